/* zt_train_step: one microbatch is bitwise a hand-written forward, backward, clip and AdamW
 * update; two microbatches of half the rows give the SGD step of the whole batch (to rounding);
 * a non-finite loss stops the step before the update; bad arguments are named. GPT-2 is
 * seen only through the model interface. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zt/train.h"
#include "zt_test.h"

static const zt_gpt2_config cfg = {2, 2, 16, 32, 16, 0.0};

typedef struct batches {
  zt_tensor *x[2], *y[2];
  int n, next;
} batches;

static zt_status take(void *ud, zt_tensor **x, zt_tensor **y) {
  batches *b = ud;
  *x = b->x[b->next % b->n], *y = b->y[b->next % b->n];
  b->next++;
  return ZT_OK;
}

/* Rows [r0, r0 + n) of t (B, T) i32 as a new tensor. */
static zt_tensor *rows(zt_tensor *t, int64_t r0, int64_t n) {
  int64_t T = t->shape[1];
  zt_tensor *o = NULL;
  ZT_CHECK_OK(zt_tensor_empty(2, (int64_t[]){n, T}, ZT_DTYPE_I32, ZT_CPU, &o));
  for (int64_t i = 0; o && i < n * T; i++) ZT_CHECK_OK(zt_tensor_set(o, i, zt_tensor_get(t, r0 * T + i)));
  return o;
}

typedef struct side {
  zt_gpt2 *m;
  zt_optim *o;
  zt_param *ps;
  int n;
} side;

static void side_open(side *s, zt_optim_kind kind) {
  memset(s, 0, sizeof *s);
  zt_rng_seed(21);
  ZT_CHECK_OK(zt_gpt2_new(&cfg, &s->m));
  if (!s->m) return;
  s->n = zt_gpt2_params(s->m, &s->ps);
  zt_optim_config oc = zt_optim_default(kind);
  ZT_CHECK_OK(zt_optim_new(&oc, s->n, s->ps, &s->o));
}

static void side_close(side *s) {
  zt_optim_free(s->o);
  zt_gpt2_free(s->m);
}

/* Largest |a - b| / (|b| + 1e-3) over every parameter element of two models. */
static double param_diff(side *a, side *b) {
  double worst = 0;
  for (int i = 0; i < a->n; i++)
    for (int64_t k = 0; k < zt_tensor_numel(a->ps[i].tensor); k++) {
      double u = zt_tensor_get(a->ps[i].tensor, k), v = zt_tensor_get(b->ps[i].tensor, k);
      double d = fabs(u - v) / (fabs(v) + 1e-3);
      if (!(d <= worst)) worst = d;
    }
  return worst;
}

static void test_one_microbatch_is_the_hand_written_step(void) {
  side a, b;
  side_open(&a, ZT_OPTIM_ADAMW);
  side_open(&b, ZT_OPTIM_ADAMW);
  zt_tensor *x = zt_test_rand_ids(4, 8, 32, 1), *y = zt_test_rand_ids(4, 8, 32, 2);
  batches bs = {{x}, {y}, 1, 0};
  zt_model model = zt_gpt2_model(b.m);
  for (int step = 0; step < 3 && a.o && b.o; step++) {
    double lr = 1e-2 * (step + 1);
    /* by hand */
    zt_tensor *loss = NULL;
    ZT_CHECK_OK(zt_gpt2_forward(a.m, x, y, NULL, &loss));
    if (!loss) break;
    double la = zt_tensor_get(loss, 0), na = 0;
    ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
    zt_tensor_free(loss);
    ZT_CHECK_OK(zt_clip_grad_norm(a.n, a.ps, 0.5, &na));
    ZT_CHECK_OK(zt_optim_step(a.o, lr));
    zt_optim_zero_grad(a.o);
    /* through the step */
    zt_train_step_options so = zt_train_step_options_default();
    so.lr = lr;
    so.grad_clip = 0.5;
    zt_train_step_result r;
    ZT_CHECK_OK(zt_train_step(&model, NULL, b.o, take, &bs, &so, &r));
    ZT_CHECK(r.loss == la && r.grad_norm == na && !r.skipped && !r.bad_loss && !r.bad_grad);
  }
  ZT_CHECK(param_diff(&a, &b) == 0);
  for (int i = 0; i < b.n; i++) ZT_CHECK(b.ps[i].tensor->grad == NULL); /* zeroed after the update */
  zt_tensor_free(x);
  zt_tensor_free(y);
  side_close(&a);
  side_close(&b);
}

static void test_two_microbatches_make_the_whole_batch(void) {
  side a, b;
  /* SGD: the update is linear in the grads, so rounding stays rounding (AdamW's first steps
   * are about lr * sign(grad), which flips for grads near zero) */
  side_open(&a, ZT_OPTIM_SGD);
  side_open(&b, ZT_OPTIM_SGD);
  zt_tensor *x = zt_test_rand_ids(4, 8, 32, 3), *y = zt_test_rand_ids(4, 8, 32, 4);
  batches whole = {{x}, {y}, 1, 0};
  batches halves = {{rows(x, 0, 2), rows(x, 2, 2)}, {rows(y, 0, 2), rows(y, 2, 2)}, 2, 0};
  zt_model ma = zt_gpt2_model(a.m), mb = zt_gpt2_model(b.m);
  for (int step = 0; step < 3 && a.o && b.o; step++) {
    zt_train_step_options so = zt_train_step_options_default();
    so.lr = 0.5;
    so.grad_clip = 1.0;
    zt_train_step_result ra, rb;
    ZT_CHECK_OK(zt_train_step(&ma, NULL, a.o, take, &whole, &so, &ra));
    so.microbatches = 2;
    ZT_CHECK_OK(zt_train_step(&mb, NULL, b.o, take, &halves, &so, &rb));
    ZT_CHECK_NEAR(rb.loss, ra.loss, 1e-5 * fabs(ra.loss));
    ZT_CHECK_NEAR(rb.grad_norm, ra.grad_norm, 1e-4 * ra.grad_norm);
  }
  ZT_CHECK(halves.next == 6);
  double d = param_diff(&a, &b);
  if (!(d < 1e-4)) zt_test_fail(__FILE__, __LINE__, "parameters differ by %g (relative)", d);
  for (int i = 0; i < 2; i++) zt_tensor_free(halves.x[i]), zt_tensor_free(halves.y[i]);
  zt_tensor_free(x);
  zt_tensor_free(y);
  side_close(&a);
  side_close(&b);
}

static void count_phase(zt_train_phase p, int64_t step, void *ud) {
  int *n = ud;
  if (step == 7 && p < ZT_TRAIN_PHASE_COUNT) n[p]++;
}

static void test_bad_loss_stops_before_the_update_and_errors(void) {
  side a;
  side_open(&a, ZT_OPTIM_ADAMW);
  if (!a.o) return;
  zt_tensor *x = zt_test_rand_ids(2, 8, 32, 5), *y = zt_test_rand_ids(2, 8, 32, 6);
  batches bs = {{x}, {y}, 1, 0};
  zt_model model = zt_gpt2_model(a.m);
  double before = zt_tensor_get(a.ps[0].tensor, 0);
  int phases[ZT_TRAIN_PHASE_COUNT] = {0};
  zt_train_step_options so = zt_train_step_options_default();
  so.poison_loss = true;
  so.step = 7;
  so.on_phase = count_phase;
  so.phase_user_data = phases;
  zt_train_step_result r;
  ZT_CHECK_ERR(zt_train_step(&model, NULL, a.o, take, &bs, &so, &r), ZT_STATUS_STATE, "loss is nan at step 7");
  ZT_CHECK(r.bad_loss && isnan(r.loss) && !r.bad_grad);
  ZT_CHECK(zt_tensor_get(a.ps[0].tensor, 0) == before && zt_optim_step_count(a.o) == 0);
  ZT_CHECK(phases[ZT_TRAIN_PHASE_FORWARD] == 1 && phases[ZT_TRAIN_PHASE_BACKWARD] == 0);
  /* the phases of a good step, in order of the enum */
  so.poison_loss = false;
  memset(phases, 0, sizeof phases);
  ZT_CHECK_OK(zt_train_step(&model, NULL, a.o, take, &bs, &so, &r));
  ZT_CHECK(phases[ZT_TRAIN_PHASE_FORWARD] == 1 && phases[ZT_TRAIN_PHASE_BACKWARD] == 1 &&
           phases[ZT_TRAIN_PHASE_OPTIMIZER] == 1);
  so.microbatches = 0;
  ZT_CHECK_ERR(zt_train_step(&model, NULL, a.o, take, &bs, &so, &r), ZT_STATUS_INVALID_ARG, "0 microbatches");
  so.microbatches = 1;
  zt_loss_scaler sc = zt_loss_scaler_default();
  so.scaler = &sc;
  ZT_CHECK_ERR(zt_train_step(&model, NULL, a.o, take, &bs, &so, &r), ZT_STATUS_INVALID_ARG, "loss scaling needs");
  ZT_CHECK_ERR(zt_train_step(&model, NULL, NULL, take, &bs, &so, &r), ZT_STATUS_INVALID_ARG, "are required");
  zt_tensor_free(x);
  zt_tensor_free(y);
  side_close(&a);
}

/* zt_train_run with --microbatches: M microbatches of B/M rows give the losses of one batch
 * of B rows to rounding, with a lower activation peak (predicted and measured); a count
 * that does not divide the batch is refused before step 1, naming the option. */
static void record_loss(const zt_train_step_info *info, void *ud) {
  double *l = ud;
  if (info->step >= 1 && info->step <= 3) l[info->step - 1] = info->loss;
}

static void run_with(int64_t M, double *loss, zt_train_result *res, zt_status *st) {
  zt_train_config c;
  zt_train_config_default(&c);
  c.data.batch = 8, c.data.seq = 32, c.data.microbatches = M;
  c.model.n_layer = 2, c.model.n_embd = 32, c.model.n_head = 2;
  c.steps = 3, c.log.eval_every = 0, c.log.eval_batches = 1, c.threads = 1;
  *st = zt_train_run(&c, record_loss, loss, res, NULL);
}

static void test_train_run_microbatches(void) {
  double l1[3] = {0}, l4[3] = {0}, l3[3] = {0};
  zt_train_result r1, r4, r3;
  zt_status s;
  run_with(1, l1, &r1, &s);
  ZT_CHECK(s == ZT_OK);
  run_with(4, l4, &r4, &s);
  ZT_CHECK(s == ZT_OK);
  for (int k = 0; k < 3; k++)
    if (!(fabs(l1[k] - l4[k]) <= 1e-5 * fabs(l1[k])))
      zt_test_fail(__FILE__, __LINE__, "step %d: loss %.9g with 4 microbatches, %.9g with one batch", k + 1, l4[k], l1[k]);
  printf("  activation peak: one batch %lld (predicted %lld), 4 microbatches %lld (predicted %lld)\n",
         (long long)r1.act_peak, (long long)r1.act_peak_predicted, (long long)r4.act_peak, (long long)r4.act_peak_predicted);
  ZT_CHECK(r4.act_peak_predicted * 3 < r1.act_peak_predicted);
  ZT_CHECK(r4.act_peak * 2 < r1.act_peak);
  run_with(3, l3, &r3, &s);
  ZT_CHECK(s == ZT_STATUS_INVALID_ARG && strstr(zt_last_error(), "zt_train_config.data.microbatches 3 does not divide"));
  ZT_CHECK(r3.steps_done == 0);
}

/* A stop request seen between microbatches drops the step: nothing updated, the grads gone,
 * the rest of the step's microbatches never taken. The caller looks before a step, so a step of
 * one microbatch (or the first microbatch) always runs. */
typedef struct stopping {
  batches b;
  volatile sig_atomic_t *flag;
  int set_at; /* the batch call (0-based) that raises the flag */
} stopping;

static zt_status take_and_stop(void *ud, zt_tensor **x, zt_tensor **y) {
  stopping *s = ud;
  if (s->b.next == s->set_at) *s->flag = SIGTERM;
  return take(&s->b, x, y);
}

static void test_stop_between_microbatches(void) {
  side a;
  side_open(&a, ZT_OPTIM_ADAMW);
  if (!a.o) return;
  zt_tensor *x = zt_test_rand_ids(2, 8, 32, 7), *y = zt_test_rand_ids(2, 8, 32, 8);
  volatile sig_atomic_t flag = 0;
  stopping st = {{{x}, {y}, 1, 0}, &flag, 0};
  zt_model model = zt_gpt2_model(a.m);
  double before = zt_tensor_get(a.ps[0].tensor, 0);
  zt_train_step_options so = zt_train_step_options_default();
  so.microbatches = 3;
  so.stop_request = &flag;
  zt_train_step_result r;
  ZT_CHECK_OK(zt_train_step(&model, NULL, a.o, take_and_stop, &st, &so, &r));
  ZT_CHECK(r.interrupted && st.b.next == 1); /* stopped before the second microbatch */
  ZT_CHECK(zt_tensor_get(a.ps[0].tensor, 0) == before && zt_optim_step_count(a.o) == 0);
  for (int i = 0; i < a.n; i++) ZT_CHECK(a.ps[i].tensor->grad == NULL);
  /* one microbatch: the caller's look before the step is the only one */
  so.microbatches = 1;
  ZT_CHECK_OK(zt_train_step(&model, NULL, a.o, take_and_stop, &st, &so, &r));
  ZT_CHECK(!r.interrupted && zt_optim_step_count(a.o) == 1);
  /* no request: every microbatch runs */
  flag = 0;
  st.set_at = -1;
  so.microbatches = 3;
  ZT_CHECK_OK(zt_train_step(&model, NULL, a.o, take_and_stop, &st, &so, &r));
  ZT_CHECK(!r.interrupted && zt_optim_step_count(a.o) == 2 && st.b.next == 5);
  zt_tensor_free(x);
  zt_tensor_free(y);
  side_close(&a);
}

/* zt_train_run stopped on request, mid-step (between microbatches) or at a step's end: it
 * returns ZT_OK with stopped set, saves its last complete step, and a run resumed from that
 * checkpoint gives the uninterrupted run's losses bitwise (the step cut short left no trace:
 * the data position and the random stream were put back). */
typedef struct stop_plan {
  volatile sig_atomic_t flag;
  int64_t step;          /* raise the flag in this step ... */
  zt_train_phase phase;  /* ... at the second time this phase starts (the second microbatch's forward) */
  int seen;
  double loss[8];
} stop_plan;

static void stop_on_phase(zt_train_phase p, int64_t step, void *ud) {
  stop_plan *sp = ud;
  if (step == sp->step && p == sp->phase && ++sp->seen == 1) sp->flag = SIGINT;
}

static void keep_loss(const zt_train_step_info *info, void *ud) {
  stop_plan *sp = ud;
  if (info->step >= 1 && info->step <= 8) sp->loss[info->step - 1] = info->loss;
}

static void stop_config(zt_train_config *c, const char *save, const char *resume) {
  zt_train_config_default(c);
  c->data.batch = 4, c->data.seq = 16, c->data.microbatches = 2;
  c->model.n_layer = 2, c->model.n_embd = 32, c->model.n_head = 2, c->model.dropout = 0.1; /* the stream matters */
  c->steps = 6, c->log.eval_every = 0, c->log.eval_batches = 1, c->threads = 1;
  snprintf(c->checkpoint.save, sizeof c->checkpoint.save, "%s", save);
  snprintf(c->checkpoint.resume, sizeof c->checkpoint.resume, "%s", resume);
}

static void stop_run_and_resume(bool offload);

static void test_train_run_stops_and_resumes(void) {
  stop_run_and_resume(false);
  /* OffloadModel's recomputing mode: the step stops after its forward (its updates waiting from
   * the last step applied there: the checkpoint is still the last step's) */
  stop_run_and_resume(true);
}

static void stop_config_om(zt_train_config *c, bool offload) {
  if (!offload) return;
  c->memory.offload_model = ZT_OFFLOAD_HOST, c->memory.offload_slices = 3, c->memory.offload_resident = 1;
}

static void stop_run_and_resume(bool offload) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/ck", zt_test_tmpdir_make("stop"));
  zt_train_config c;
  stop_plan ref = {0};
  stop_config(&c, "", "");
  stop_config_om(&c, offload);
  zt_train_result r;
  ZT_CHECK_OK(zt_train_run(&c, keep_loss, &ref, &r, NULL));
  ZT_CHECK(!r.stopped && r.last_step == 6);
  /* mid-step: the request comes in step 4's first microbatch, seen before its second */
  for (int mid = 1; mid >= 0; mid--) {
    stop_plan sp = {0};
    sp.step = mid ? 4 : 3, sp.phase = mid ? ZT_TRAIN_PHASE_FORWARD : ZT_TRAIN_PHASE_OPTIMIZER;
    stop_config(&c, dir, "");
    stop_config_om(&c, offload);
    c.stop_request = &sp.flag;
    c.on_phase = stop_on_phase, c.phase_user_data = &sp;
    ZT_CHECK_OK(zt_train_run(&c, keep_loss, &sp, &r, NULL));
    ZT_CHECK(r.stopped && r.last_step == 3 && r.saved_step == 3 && r.steps_done == 3);
    zt_train_state st;
    ZT_CHECK_OK(zt_snapshot_read_state(dir, &st));
    ZT_CHECK(st.step == 3);
    stop_plan rest = {0};
    stop_config(&c, "", dir);
    stop_config_om(&c, offload);
    ZT_CHECK_OK(zt_train_run(&c, keep_loss, &rest, &r, NULL));
    ZT_CHECK(!r.stopped && r.last_step == 6);
    for (int k = 0; k < 6; k++) {
      double got = k < 3 ? sp.loss[k] : rest.loss[k];
      if (got != ref.loss[k])
        zt_test_fail(__FILE__, __LINE__, "%sstopped %s: step %d's loss %.9g, uninterrupted %.9g",
                     offload ? "OffloadModel: " : "", mid ? "mid-step" : "after a step", k + 1, got, ref.loss[k]);
    }
  }
  /* a request before step 1: nothing to save, and nothing was */
  stop_plan early = {.flag = SIGTERM};
  stop_config(&c, dir, dir);
  stop_config_om(&c, offload);
  c.stop_request = &early.flag;
  ZT_CHECK_OK(zt_train_run(&c, keep_loss, &early, &r, NULL));
  ZT_CHECK(r.stopped && r.steps_done == 0 && r.saved_step == 0 && r.last_step == 3);
  zt_test_tmpdir_remove();
}

/* The run gives the blocks the allocator cached before its first step back (the set-up's: a model
 * built whole and then sharded or cut into stages), so the steps' cache holds only their own: a
 * 4 MiB block freed before the run is no longer cached when step 1's forward starts. */
static void cached_at_step_one(zt_train_phase p, int64_t step, void *ud) {
  int64_t *at = ud;
  if (step == 1 && p == ZT_TRAIN_PHASE_FORWARD && *at < 0) *at = zt_mem_cached_bytes();
}

static void test_train_run_gives_the_setup_cache_back(void) {
  zt_tensor *t = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(1, (int64_t[]){1 << 20}, ZT_DTYPE_F32, ZT_CPU, &t));
  zt_tensor_free(t);
  if (zt_mem_cached_bytes() < (4 << 20)) { /* the cache is off (ZT_ALLOC_CACHE_MB=0: make asan) */
    printf("  (the allocator's cache is off here: nothing to give back)\n");
    return;
  }
  zt_train_config c;
  stop_config(&c, "", "");
  c.steps = 1;
  int64_t at = -1;
  c.on_phase = cached_at_step_one, c.phase_user_data = &at;
  zt_train_result r;
  ZT_CHECK_OK(zt_train_run(&c, NULL, NULL, &r, NULL));
  ZT_CHECK(at >= 0 && at < (4 << 20));
}

int main(void) {
  ZT_RUN(test_one_microbatch_is_the_hand_written_step);
  ZT_RUN(test_two_microbatches_make_the_whole_batch);
  ZT_RUN(test_bad_loss_stops_before_the_update_and_errors);
  ZT_RUN(test_train_run_microbatches);
  ZT_RUN(test_stop_between_microbatches);
  ZT_RUN(test_train_run_stops_and_resumes);
  ZT_RUN(test_train_run_gives_the_setup_cache_back);
  return zt_test_finish();
}
