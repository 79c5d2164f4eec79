/* The activation trial (act_trial.h): what a slice's activations cost is measured both ways
 * in the run itself, not predicted. Offloaded, a slice's blocks copy their saved tensors to the
 * tier in forward and wait for them in backward where the disk falls behind; recomputed, only
 * each block's input goes there and backward runs the blocks' forward again. Each slice's
 * forward + backward time (zt_offload_model_slice_times: waits for loads, evictions and the
 * activations' own I/O included, the updates applied at loads not) is taken in a step that
 * offloads every slice and in one that recomputes every slice, and each slice keeps the way
 * that took less. The trial starts at the run's third step (ZT_ACT_TRIAL_FIRST): the first two
 * are unlike the later ones, so a way tried there would not be compared like for like. Step 1
 * starts with an empty allocator cache and no update waiting for a load; step 2's updates make
 * AdamW's moments instead of reading them (measured at GPT-2 774M: 8.3 GiB read from the store
 * against 12.6 GiB in later steps), which leaves the disk freer for the activations.
 * Invariant: recomputation is bitwise (zt_checkpoint), so the trial changes times only, and
 * the plan changes between steps only (zt_recompute_plan_set). */
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "train/act_trial.h"

/* Every block in mode (letters NULL), or each as its letter says: 'f' recomputed, 'n' offloaded. */
static zt_status set_plan(zt__act_trial *t, zt_recompute mode, const char *letters) {
  zt_recompute_options ro = zt_recompute_options_default();
  ro.policy = zt_recompute_plan_policy(t->plan);
  ro.mode = mode, ro.every = 1;
  zt_recompute *modes = letters ? calloc((size_t)t->L, sizeof *modes) : NULL;
  if (letters && !modes) return ZT_ERR(ZT_STATUS_OOM, "activation trial: out of host memory");
  for (int i = 0; letters && i < t->L; i++) modes[i] = letters[i] == 'f' ? ZT_RECOMPUTE_FULL : ZT_RECOMPUTE_NONE;
  if (modes) ro.modes = modes, ro.n_modes = t->L;
  zt_status s = zt_recompute_plan_set(t->plan, &ro);
  free(modes);
  return s;
}

zt_status zt__act_trial_open(zt__act_trial *t, const zt_train_config *c, zt_offload_model *om,
                             zt_recompute_plan *plan, int L, int64_t start, zt_act_choice *out) {
  *t = (zt__act_trial){0};
  if (c->memory.activation_trial != ZT_ACT_TRIAL_ON) return ZT_OK;
  if (!om || !plan || c->memory.offload_mode != ZT_OFFLOAD_MODEL_KEEP_GRAPH || !c->memory.offload_activations)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_config.memory.activation_trial on compares offloading each slice's "
                                         "activations with recomputing its blocks: it needs "
                                         "zt_train_config.memory.offload_model with "
                                         "zt_train_config.memory.offload_mode keep-graph and "
                                         "zt_train_config.memory.offload_activations; give those, or leave the trial "
                                         "at auto");
  if (start + ZT_ACT_TRIAL_FIRST + 2 > c->steps) return ZT_OK; /* no step would run the choice */
  zt_offload_model_stats st;
  zt_offload_model_stats_get(om, &st);
  if (!(t->t0 = calloc((size_t)st.slices, sizeof *t->t0)))
    return ZT_ERR(ZT_STATUS_OOM, "activation trial: out of host memory");
  t->om = om, t->plan = plan, t->L = L, t->first = start + ZT_ACT_TRIAL_FIRST, t->out = out;
  memset(out, 0, sizeof *out);
  out->slices = st.slices;
  out->offload_step = t->first, out->recompute_step = t->first + 1;
  for (int s = 0; s < st.slices; s++) {
    int u0, n;
    zt_offload_model_slice_units(om, s, &u0, &n);
    int b0 = u0 > 1 ? u0 - 1 : 0, b1 = u0 + n - 1 < L ? u0 + n - 1 : L; /* units 1..L are the blocks */
    out->first_block[s] = b0, out->blocks[s] = b1 > b0 ? b1 - b0 : 0;
  }
  return ZT_OK;
}

static double slice_time(zt_offload_model *om, int s) {
  double f, b;
  zt_offload_model_slice_times(om, s, &f, &b);
  return f + b;
}

zt_status zt__act_trial_before(zt__act_trial *t, int64_t step, zt_act_trial_step *kind) {
  *kind = ZT_ACT_TRIAL_STEP_NONE;
  if (!t->om || step < t->first || step > t->first + 1) return ZT_OK;
  *kind = step == t->first ? ZT_ACT_TRIAL_STEP_OFFLOAD : ZT_ACT_TRIAL_STEP_RECOMPUTE;
  zt_status s = set_plan(t, *kind == ZT_ACT_TRIAL_STEP_OFFLOAD ? ZT_RECOMPUTE_NONE : ZT_RECOMPUTE_FULL, NULL);
  for (int i = 0; i < t->out->slices; i++) t->t0[i] = slice_time(t->om, i);
  return s;
}

void zt__act_choose(zt_act_choice *c, int L) {
  memset(c->plan, 'n', (size_t)L);
  c->plan[L] = 0;
  c->recomputed_slices = 0;
  for (int s = 0; s < c->slices; s++) {
    if (!c->blocks[s] || !(c->recompute_s[s] < c->offload_s[s])) continue;
    memset(c->plan + c->first_block[s], 'f', (size_t)c->blocks[s]);
    c->recomputed_slices++;
  }
}

zt_status zt__act_trial_after(zt__act_trial *t, int64_t step, double step_s, bool *chosen) {
  *chosen = false;
  if (!t->om || step < t->first || step > t->first + 1) return ZT_OK;
  bool rec = step == t->first + 1;
  zt_act_choice *c = t->out;
  for (int s = 0; s < c->slices; s++) (rec ? c->recompute_s : c->offload_s)[s] = slice_time(t->om, s) - t->t0[s];
  *(rec ? &c->recompute_step_s : &c->offload_step_s) = step_s;
  if (!rec) return ZT_OK;
  zt__act_choose(c, t->L);
  *chosen = true;
  return set_plan(t, ZT_RECOMPUTE_NONE, c->plan);
}

void zt__act_trial_close(zt__act_trial *t) {
  free(t->t0);
  *t = (zt__act_trial){0};
}
