/* GPT-2's activation counts (zt_act_cost, zt/lm.h): the bytes each op of a block saves for
 * backward, true to what forward does only as long as the counts below follow
 * src/nn/layers.c and src/models/gpt2.c. The predictor and the planner over them are every
 * family's (lm_plan.c). */
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "models/act_cost.h"
#include "models/gpt2_internal.h"

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

static zt_lm_config lm_of(const zt_gpt2 *m) { return (zt_lm_config){.family = ZT_LM_GPT2, .gpt2 = *zt_gpt2_get_config(m)}; }

int64_t zt_gpt2_predict_activation_peak(const zt_gpt2 *m, int64_t B, int64_t T, const zt_recompute *modes, int every,
                                        zt_checkpoint_policy policy) {
  if (!m) return 0;
  zt_lm_config c = lm_of(m);
  return zt_lm_predict_activation_peak(&c, B, T, modes, every, policy);
}

zt_status zt_gpt2_plan_recompute(const zt_gpt2 *m, int64_t B, int64_t T, int64_t budget, zt_checkpoint_policy policy,
                                 zt_recompute *modes, int64_t *predicted) {
  if (!m) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_gpt2_plan_recompute: model or modes is NULL");
  zt_lm_config c = lm_of(m);
  return zt_lm_plan_recompute(&c, B, T, budget, policy, modes, predicted);
}
