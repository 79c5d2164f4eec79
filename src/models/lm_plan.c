/* The activation model and the memory-budget planner of recomputation over every family
 * (zt/lm.h): a family states what a block keeps per token in each recompute mode
 * (zt_act_cost) and these count regions, backward's recomputation and the output part from
 * that alone. */
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "zt/lm.h"

int64_t zt_lm_predict_activation_peak(const zt_lm_config *c, int64_t B, int64_t T, const zt_recompute *modes, int every,
                                      zt_checkpoint_policy policy) {
  if (!c || !modes || B < 1 || T < 1) return 0;
  int L = zt_lm_config_dims(c).n_layer;
  if (every < 1) every = 1;
  double tokens = (double)B * (double)T, es = 4, out = 0; /* f32 */
  double kept = 0, worst = 0;
  for (int i = 0; i < L;) { /* regions as a recompute plan makes them */
    int n = 1;
    while (i + n < L && n < every && modes[i + n] == modes[i]) n++;
    zt_act_cost one = zt_lm_act_cost(c, modes[i], policy);
    out = one.out;
    double region_kept = one.input + n * one.kept, region_recomp = n * one.recomp;
    /* backward of this region: the regions before it still hold theirs */
    double bwd = kept + region_kept + region_recomp;
    if (bwd > worst) worst = bwd;
    kept += region_kept;
    i += n;
  }
  /* end of forward: the final norm's input and stats, its output and the output layer's input grad */
  double fwd = kept + out;
  double peak = (fwd > worst ? fwd : worst) * tokens * es;
  return (int64_t)(peak + tokens * 4 + (double)T * 4); /* + the token and position ids (i32) */
}

static double work_of(const zt_lm_config *c, zt_recompute mode, zt_checkpoint_policy policy) {
  return mode == ZT_RECOMPUTE_NONE ? 0 : zt_lm_act_cost(c, mode, policy).work;
}

/* The best change of one block's mode, by predicted peak: with more_work, a change that
 * adds recomputation and lowers the peak, scored by bytes freed per unit of added work (a
 * change that reaches the budget by itself first; ties to later blocks, whose backward
 * overlaps fewer kept regions); otherwise a change that removes recomputation and still
 * fits the budget, the most work removed first (ties to the lower peak). Returns the
 * block, or -1 when no change qualifies. */
static int best_change(const zt_lm_config *c, int64_t B, int64_t T, zt_checkpoint_policy policy, zt_recompute *modes,
                       int64_t peak, int64_t budget, bool more_work, zt_recompute *mode_out, int64_t *peak_out) {
  static const zt_recompute all[3] = {ZT_RECOMPUTE_NONE, ZT_RECOMPUTE_SELECTIVE, ZT_RECOMPUTE_FULL};
  int L = zt_lm_config_dims(c).n_layer, best = -1;
  double best_score = -1e300;
  for (int i = 0; i < L; i++) {
    zt_recompute was = modes[i];
    for (int k = 0; k < 3; k++) {
      double dw = work_of(c, all[k], policy) - work_of(c, was, policy);
      if (more_work ? dw <= 0 : dw >= 0) continue;
      modes[i] = all[k];
      int64_t p = zt_lm_predict_activation_peak(c, B, T, modes, 1, policy);
      double score;
      if (more_work) {
        if (p >= peak) continue;
        score = (double)(peak - p) / dw + (p <= budget ? 1e30 / dw : 0);
      } else {
        if (p > budget) continue;
        score = -dw - (double)p * 1e-20;
      }
      if (more_work ? score >= best_score : score > best_score) {
        best = i;
        best_score = score;
        *mode_out = all[k];
        *peak_out = p;
      }
    }
    modes[i] = was;
  }
  return best;
}

zt_status zt_lm_plan_recompute(const zt_lm_config *c, int64_t B, int64_t T, int64_t budget, zt_checkpoint_policy policy,
                               zt_recompute *modes, int64_t *predicted) {
  if (!c || !modes) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_lm_plan_recompute: model or modes is NULL");
  if (B < 1 || T < 1 || budget < 1)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_lm_plan_recompute: batch %lld, length %lld and budget %lld must be positive",
                  (long long)B, (long long)T, (long long)budget);
  int L = zt_lm_config_dims(c).n_layer;
  for (int i = 0; i < L; i++) modes[i] = ZT_RECOMPUTE_FULL;
  int64_t floor_bytes = zt_lm_predict_activation_peak(c, B, T, modes, 1, policy);
  if (floor_bytes > budget)
    return ZT_ERR(ZT_STATUS_OOM,
                  "activation budget %.1f MiB is below %.1f MiB, what recomputing every block needs at batch %lld x "
                  "length %lld; raise the budget, or lower the batch or sequence length",
                  (double)budget / 1048576.0, (double)floor_bytes / 1048576.0, (long long)B, (long long)T);
  for (int i = 0; i < L; i++) modes[i] = ZT_RECOMPUTE_NONE;
  int64_t peak = zt_lm_predict_activation_peak(c, B, T, modes, 1, policy);
  /* greedy: add the recomputation that frees the most per unit of work until it fits */
  while (peak > budget) {
    zt_recompute mode;
    int64_t p;
    int i = best_change(c, B, T, policy, modes, peak, budget, true, &mode, &p);
    if (i < 0) break; /* nothing helps any more (cannot happen above the floor) */
    modes[i] = mode;
    peak = p;
  }
  if (peak > budget) { /* the greedy path stalled: fall back to the floor */
    for (int i = 0; i < L; i++) modes[i] = ZT_RECOMPUTE_FULL;
    peak = floor_bytes;
  }
  /* relax: the greedy steps overshoot (one FULL block frees a lot); undo the most work
   * that still fits, one block at a time, so the plan uses the budget it was given */
  for (;;) {
    zt_recompute mode;
    int64_t p;
    int i = best_change(c, B, T, policy, modes, peak, budget, false, &mode, &p);
    if (i < 0) break;
    modes[i] = mode;
    peak = p;
  }
  if (predicted) *predicted = peak;
  return ZT_OK;
}
