/* The activation trial (zt_train_config.memory.activation_trial, src/train/act_trial.c): the
 * choice from measured times, slice by slice; in zt_train_run under OffloadModel's keep-graph
 * mode with activation offload, step 3 offloads every block's activations and step 4 recomputes
 * every block (shown by the bytes sent to the tier), step 5 runs the choice (its bytes those of
 * the slices it offloads), each slice's times are measured, and the losses are bitwise those
 * of the run without the trial and of plain training; fewer than five steps run no trial; asked
 * for where it cannot run, a clear error. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "train/act_trial.h"
#include "zt_test.h"

/* Slices without blocks are skipped; a slice recomputes where that was faster; a tie offloads. */
static void test_choose(void) {
  zt_act_choice c = {0};
  c.slices = 5;
  int first[] = {0, 0, 2, 5, 6}, blocks[] = {0, 2, 3, 1, 0};
  double off[] = {1, 2.0, 1.0, 0.5, 1}, rec[] = {0.1, 1.5, 1.2, 0.5, 0.1};
  for (int s = 0; s < 5; s++) c.first_block[s] = first[s], c.blocks[s] = blocks[s], c.offload_s[s] = off[s], c.recompute_s[s] = rec[s];
  zt__act_choose(&c, 6);
  ZT_CHECK(!strcmp(c.plan, "ffnnnn"));
  ZT_CHECK(c.recomputed_slices == 1);
  c.recompute_s[2] = 0.9, c.recompute_s[3] = 0.4;
  zt__act_choose(&c, 6);
  ZT_CHECK(!strcmp(c.plan, "ffffff") && c.recomputed_slices == 3);
}

#define STEPS 6
typedef struct seen {
  double loss[STEPS];
  int kind[STEPS];
  int64_t bytes[STEPS];
  int choices, choice_step;
  char plan[ZT_TRAIN_MAX_LAYERS + 1];
} seen;

static void on_step(const zt_train_step_info *in, void *ud) {
  seen *s = ud;
  int i = (int)in->step - 1;
  if (i < 0 || i >= STEPS) return;
  s->loss[i] = in->loss, s->kind[i] = in->act_trial, s->bytes[i] = in->act_offload_bytes;
  if (in->act_choice) s->choices++, s->choice_step = (int)in->step, snprintf(s->plan, sizeof s->plan, "%s", in->act_choice->plan);
}

/* trial: -1 off, 1 on, 2 plain training (no offload at all); plan: the recompute plan to start from ("" none) */
static zt_status run_from(int trial, int64_t steps, const char *plan, seen *out, zt_train_result *res) {
  memset(out, 0, sizeof *out);
  zt_train_config c;
  zt_train_config_default(&c);
  c.data.batch = 4, c.data.seq = 64; /* a block's input, 64 KiB, is offloaded (zt_offload_options.min_bytes) */
  c.model.n_layer = 4, c.model.n_embd = 64, c.model.n_head = 4, c.model.dropout = 0.1;
  c.steps = steps, c.optim.grad_clip = 0.5, c.optim.warmup = 1, c.log.eval_every = 0, c.log.eval_batches = 1, c.threads = 1;
  if (trial != 2) {
    c.memory.offload_model = ZT_OFFLOAD_HOST, c.memory.offload_states = true;
    c.memory.offload_mode = ZT_OFFLOAD_MODEL_KEEP_GRAPH, c.memory.offload_slices = 3;
    c.memory.offload_activations = ZT_OFFLOAD_HOST;
    c.memory.activation_trial = trial;
  }
  snprintf(c.memory.recompute_plan, sizeof c.memory.recompute_plan, "%s", plan);
  return zt_train_run(&c, on_step, out, res, NULL);
}

static zt_status run(int trial, int64_t steps, seen *out, zt_train_result *res) {
  return run_from(trial, steps, "", out, res);
}

static void test_trial_in_training(void) {
  seen on, off, plain;
  zt_train_result r, roff;
  ZT_CHECK_OK(run(ZT_ACT_TRIAL_ON, STEPS, &on, &r));
  ZT_CHECK_OK(run(ZT_ACT_TRIAL_OFF, STEPS, &off, &roff));
  ZT_CHECK_OK(run(2, STEPS, &plain, NULL));
  for (int i = 0; i < STEPS; i++)
    if (on.loss[i] != off.loss[i] || on.loss[i] != plain.loss[i])
      zt_test_fail(__FILE__, __LINE__, "step %d: loss %.9g with the trial, %.9g without, %.9g plain", i + 1, on.loss[i],
                   off.loss[i], plain.loss[i]);
  /* steps 3 and 4 ran the trial; the choice came once, after step 4 */
  int kinds[STEPS] = {0, 0, 1, 2, 0, 0};
  for (int i = 0; i < STEPS; i++) ZT_CHECK(on.kind[i] == kinds[i] && off.kind[i] == 0);
  ZT_CHECK(on.choices == 1 && on.choice_step == 4 && off.choices == 0);
  /* every block's saves to the tier in step 3 (as in steps 1 and 2); only the blocks' inputs in step 4 */
  int64_t *b = on.bytes + 2;
  ZT_CHECK(b[0] == off.bytes[2] && b[0] == on.bytes[0] && b[1] > 0 && b[1] * 4 < b[0]);
  /* step 5 runs the choice: as step 3 with nothing recomputed, as step 4 with everything, between otherwise */
  const zt_act_choice *c = &r.act_choice;
  printf("  choice %s: offloaded", c->plan);
  for (int s = 0; s < c->slices; s++) printf(" %.4f", c->offload_s[s]);
  printf(" s, recomputed");
  for (int s = 0; s < c->slices; s++) printf(" %.4f", c->recompute_s[s]);
  printf(" s; bytes to the tier in steps 3-6 %lld %lld %lld %lld\n", (long long)b[0], (long long)b[1],
         (long long)b[2], (long long)b[3]);
  ZT_CHECK(!strcmp(c->plan, on.plan) && strlen(c->plan) == 4);
  if (!strchr(c->plan, 'f')) ZT_CHECK(b[2] == b[0]);
  else if (!strchr(c->plan, 'n')) ZT_CHECK(b[2] == b[1]);
  else ZT_CHECK(b[2] > b[1] && b[2] < b[0]);
  ZT_CHECK(b[3] == b[2]);
  /* what it measured: three slices, their blocks 0..3 in order, each timed both ways */
  ZT_CHECK(c->slices == 3 && c->offload_step == 3 && c->recompute_step == 4);
  ZT_CHECK(c->offload_step_s > 0 && c->recompute_step_s > 0);
  int next = 0;
  for (int s = 0; s < c->slices; s++) {
    ZT_CHECK(c->first_block[s] == next && c->blocks[s] > 0);
    next += c->blocks[s];
    ZT_CHECK(c->offload_s[s] > 0 && c->recompute_s[s] > 0);
    ZT_CHECK(c->offload_s[s] < c->offload_step_s && c->recompute_s[s] < c->recompute_step_s);
  }
  ZT_CHECK(next == 4);
  /* the run's summary gives the plan the trial chose and its prediction, not the one before it
   * (a run that starts from every block recomputed: offloading is cheaper for most slices) */
  ZT_CHECK(!strcmp(r.recompute_plan, c->plan) && !strcmp(roff.recompute_plan, "nnnn"));
  seen from_f;
  zt_train_result rf;
  ZT_CHECK_OK(run_from(ZT_ACT_TRIAL_ON, STEPS, "ffff", &from_f, &rf));
  printf("  from ffff the trial chose %s; the summary says %s (predicted %lld bytes, none recomputed %lld)\n",
         rf.act_choice.plan, rf.recompute_plan, (long long)rf.act_peak_predicted, (long long)roff.act_peak_predicted);
  ZT_CHECK(!strcmp(rf.recompute_plan, rf.act_choice.plan));
  if (!strchr(rf.act_choice.plan, 'f')) ZT_CHECK(rf.act_peak_predicted == roff.act_peak_predicted);
  else ZT_CHECK(rf.act_peak_predicted < roff.act_peak_predicted || !strchr(rf.act_choice.plan, 'n'));
}

static void test_too_few_steps_or_nothing_to_try(void) {
  seen s;
  zt_train_result r;
  ZT_CHECK_OK(run(ZT_ACT_TRIAL_ON, 4, &s, &r)); /* no step would run the choice */
  ZT_CHECK(r.act_choice.slices == 0 && s.choices == 0 && s.kind[2] == 0 && s.kind[3] == 0);
  zt_train_config c;
  zt_train_config_default(&c);
  c.data.batch = 4, c.data.seq = 32, c.model.n_layer = 2, c.model.n_embd = 32, c.model.n_head = 2;
  c.steps = 4, c.log.eval_every = 0, c.threads = 1;
  c.memory.activation_trial = ZT_ACT_TRIAL_ON; /* no OffloadModel, no activation offload */
  ZT_CHECK_ERR(zt_train_run(&c, NULL, NULL, NULL, NULL), ZT_STATUS_INVALID_ARG, "it needs zt_train_config.memory.offload_model");
  ZT_CHECK_OK(zt_train_config_set(&c, "activation-trial", "off"));
  ZT_CHECK(c.memory.activation_trial == ZT_ACT_TRIAL_OFF);
  ZT_CHECK_ERR(zt_train_config_set(&c, "activation-trial", "sometimes"), ZT_STATUS_INVALID_ARG, "auto, on or off");
}

int main(void) {
  ZT_RUN(test_choose);
  ZT_RUN(test_trial_in_training);
  ZT_RUN(test_too_few_steps_or_nothing_to_try);
  return zt_test_finish();
}
