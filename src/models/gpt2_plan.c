/* GPT-2 activation memory model and the memory-budget planner of recomputation. The model
 * counts the bytes each op saves for backward (see zt_gpt2_predict_activation_peak in
 * nn.h); it uses only the public model API, so it stays true to what forward does only as
 * long as the counts below follow src/nn/layers.c and src/models/gpt2.c. */
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "models/act_cost.h"
#include "models/gpt2_internal.h"

/* Values per token, for one block: what its region keeps as input (once per region),
 * what else it keeps between forward and backward, and what its recomputation
 * materialises in backward. */
typedef struct block_cost {
  double input, kept, recomp;
} block_cost;

zt_act_cost zt__gpt2_act_cost(const zt_lm_config *lc, zt_recompute mode, zt_checkpoint_policy p) {
  const zt_gpt2_config *c = &lc->gpt2;
  double C = c->n_embd, H = c->n_head;
  /* at the end of forward: ln_f's input and stats, its output and the output layer's input grad */
  double out = 3 * C + 2;
  /* NONE: ln_1 input x, its mean/rstd, c_attn input, qkv, attention output and its
   * logsumexp (n_head per token), ln_2 input and stats, c_fc input, the GELU's input and
   * output (4C each) */
  double none = 16 * C + 4 + H;
  /* Work a block's recomputation adds, in block forwards (GEMM FLOPs dominate: 24 C^2 per
   * token). Early stop ends every recomputation at the MLP down-projection's save, before
   * its GEMM (8 C^2): FULL redoes the rest, about 0.7; SELECTIVE redoes the attention
   * projection (2 C^2), attention, layer norms, GELU and adds, about 0.15. */
  if (mode == ZT_RECOMPUTE_NONE) return (zt_act_cost){0, none, 0, 0, out};
  /* recomputing the attention projection also makes its output (C) live beside the
   * saved tensors while the residual add runs: recomputation peaks at `none` (the input,
   * kept by the region, counted again) */
  if (mode == ZT_RECOMPUTE_FULL) return (zt_act_cost){C, 0, none, 0.7, out};
  if (p.fn == zt_checkpoint_policy_save_gemm) /* qkv, both projections, c_fc */
    return (zt_act_cost){C, 9 * C, none - 8 * C, 0.15, out};
  if (p.fn == zt_checkpoint_policy_recompute_attention) {
    /* every output but the attention core's: also the projections' outputs (and dropout's) */
    double drop = c->dropout > 0 ? 2 * C : 0;
    return (zt_act_cost){C, 16 * C + 4 + drop, C + H, 0.15, out};
  }
  /* save_wide_gemm (and policies the model does not know): qkv (3C), c_fc (4C); the
   * attention projection is recomputed (+C live, as for FULL) */
  return (zt_act_cost){C, 7 * C, none - 7 * C, 0.15, out};
}

static block_cost cost_of(const zt_gpt2 *m, zt_recompute mode, zt_checkpoint_policy p) {
  zt_lm_config lc = {.family = ZT_LM_GPT2, .gpt2 = *zt_gpt2_get_config(m)};
  zt_act_cost a = zt__gpt2_act_cost(&lc, mode, p);
  return (block_cost){a.input, a.kept, a.recomp};
}

int64_t zt_gpt2_predict_activation_peak(const zt_gpt2 *m, int64_t B, int64_t T, const zt_recompute *modes, int every,
                                        zt_checkpoint_policy policy) {
  if (!m || !modes || B < 1 || T < 1) return 0;
  const zt_gpt2_config *c = zt_gpt2_get_config(m);
  int L = c->n_layer;
  if (every < 1) every = 1;
  double C = c->n_embd, tokens = (double)B * (double)T, es = 4; /* f32 */
  double kept = 0, worst = 0;
  for (int i = 0; i < L;) { /* regions as a recompute plan makes them */
    int n = 1;
    while (i + n < L && n < every && modes[i + n] == modes[i]) n++;
    block_cost one = cost_of(m, modes[i], policy);
    double region_kept = one.input + n * one.kept, region_recomp = n * one.recomp;
    /* backward of this region: the regions before it still hold theirs */
    double bwd = kept + region_kept + region_recomp;
    if (bwd > worst) worst = bwd;
    kept += region_kept;
    i += n;
  }
  /* end of forward: ln_f's input and stats, its output and the output layer's input grad */
  double fwd = kept + 3 * C + 2;
  double peak = (fwd > worst ? fwd : worst) * tokens * es;
  return (int64_t)(peak + tokens * 4 + (double)T * 4); /* + the token and position ids (i32) */
}

/* Work a block's recomputation adds, in block forwards (GEMM FLOPs dominate: 24 C^2 per
 * token). Early stop ends every recomputation at the MLP down-projection's save, before
 * its GEMM (8 C^2): FULL redoes the rest, about 0.7; SELECTIVE redoes the attention
 * projection (2 C^2), attention, layer norms, GELU and adds, about 0.15. */
static double work_of(zt_recompute mode) {
  return mode == ZT_RECOMPUTE_FULL ? 0.7 : mode == ZT_RECOMPUTE_SELECTIVE ? 0.15 : 0.0;
}

/* The best change of one block's mode, by predicted peak: with more_work, a change that
 * adds recomputation and lowers the peak, scored by bytes freed per unit of added work (a
 * change that reaches the budget by itself first; ties to later blocks, whose backward
 * overlaps fewer kept regions); otherwise a change that removes recomputation and still
 * fits the budget, the most work removed first (ties to the lower peak). Returns the
 * block, or -1 when no change qualifies. */
static int best_change(const zt_gpt2 *m, int64_t B, int64_t T, zt_checkpoint_policy policy, zt_recompute *modes,
                       int64_t peak, int64_t budget, bool more_work, zt_recompute *mode_out, int64_t *peak_out) {
  static const zt_recompute all[3] = {ZT_RECOMPUTE_NONE, ZT_RECOMPUTE_SELECTIVE, ZT_RECOMPUTE_FULL};
  int L = zt_gpt2_get_config(m)->n_layer, best = -1;
  double best_score = -1e300;
  for (int i = 0; i < L; i++) {
    zt_recompute was = modes[i];
    for (int k = 0; k < 3; k++) {
      double dw = work_of(all[k]) - work_of(was);
      if (more_work ? dw <= 0 : dw >= 0) continue;
      modes[i] = all[k];
      int64_t p = zt_gpt2_predict_activation_peak(m, B, T, modes, 1, policy);
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

zt_status zt_gpt2_plan_recompute(const zt_gpt2 *m, int64_t B, int64_t T, int64_t budget, zt_checkpoint_policy policy,
                                 zt_recompute *modes, int64_t *predicted) {
  if (!m || !modes) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_gpt2_plan_recompute: model or modes is NULL");
  if (B < 1 || T < 1 || budget < 1)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_gpt2_plan_recompute: batch %lld, length %lld and budget %lld must be positive",
                  (long long)B, (long long)T, (long long)budget);
  int L = zt_gpt2_get_config(m)->n_layer;
  for (int i = 0; i < L; i++) modes[i] = ZT_RECOMPUTE_FULL;
  int64_t floor_bytes = zt_gpt2_predict_activation_peak(m, B, T, modes, 1, policy);
  if (floor_bytes > budget)
    return ZT_ERR(ZT_STATUS_OOM,
                  "activation budget %.1f MiB is below %.1f MiB, what recomputing every block needs at batch %lld x "
                  "length %lld; raise the budget, or lower the batch or sequence length",
                  (double)budget / 1048576.0, (double)floor_bytes / 1048576.0, (long long)B, (long long)T);
  for (int i = 0; i < L; i++) modes[i] = ZT_RECOMPUTE_NONE;
  int64_t peak = zt_gpt2_predict_activation_peak(m, B, T, modes, 1, policy);
  /* greedy: add the recomputation that frees the most per unit of work until it fits */
  while (peak > budget) {
    zt_recompute mode;
    int64_t p;
    int i = best_change(m, B, T, policy, modes, peak, budget, true, &mode, &p);
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
    int i = best_change(m, B, T, policy, modes, peak, budget, false, &mode, &p);
    if (i < 0) break;
    modes[i] = mode;
    peak = p;
  }
  if (predicted) *predicted = peak;
  return ZT_OK;
}
