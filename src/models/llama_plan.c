/* The Llama family's activation counts (zt_act_cost, zt/lm.h): what a decoder layer of llama.c
 * keeps between forward and backward, per token, in each recompute mode. The counts follow the
 * ops of layer_forward and what each saves (src/ops: rms_norm its input and rstd, linear its
 * input, rope only views of the tables, attention its qkv, output and logsumexp, swiglu gate and
 * up); they stay true only as long as they follow that code. */
#include "core/status_internal.h"
#include "models/act_cost.h"

/* A layer's widths, in values per token. */
typedef struct widths {
  double C, H, K, HD, KD, A, I; /* hidden, heads, KV heads, q width, k (and v) width, fused qkv, MLP */
  double qk;                    /* Qwen3's q/k norms: their inputs and rstd; 0 without */
} widths;

static widths widths_of(const zt_llama_config *c) {
  widths w = {.C = c->hidden_size, .H = c->n_head, .K = c->n_kv_head, .I = c->intermediate_size};
  w.HD = w.H * c->head_dim, w.KD = w.K * c->head_dim, w.A = w.HD + 2 * w.KD;
  w.qk = c->qk_norm ? w.HD + w.KD + w.H + w.K : 0;
  return w;
}

/* NONE: input_layernorm's input x and rstd, the q/k/v projections' input, [the q/k norms' inputs
 * and rstd], the rotated qkv, the attention output (o_proj's input) and its logsumexp (a value
 * per head), post_attention_layernorm's input and rstd, gate/up's input, gate and up (swiglu's
 * inputs), swiglu's output (down_proj's input). The biases save nothing. */
static double kept_none(const widths *w) {
  return 4 * w->C + 2 + w->qk + w->A + w->HD + w->H + 3 * w->I;
}

/* Multiply-adds per token of a layer's projections. */
static double gemm_work(const widths *w) { return w->C * w->A + w->HD * w->C + 3 * w->C * w->I; }

/* A recomputation that redoes down_proj holds one hidden-sized tensor (C) per layer more at its
 * peak than the saved ones (measured by tests/test_lm_plan.c, whether o_proj is kept or not;
 * GPT-2's counts carry the same C): it then peaks at NONE's count, the input included. */

/* What SELECTIVE under policy p keeps beside the region's input, the outputs of the ops it saves
 * (and their statistics); *recomp: what recomputing the rest makes live (NONE's count less the
 * input and less what is kept already); *redo: the projections' work recomputed (multiply-adds). */
static double selective_kept(const widths *w, zt_checkpoint_policy p, double *recomp, double *redo) {
  double rest = kept_none(w) - w->C, qk_out = w->qk > 0 ? w->HD + w->KD : 0; /* q, k: NONE keeps them with q/k norms */
  if (p.fn == zt_checkpoint_policy_recompute_attention) {
    /* every op's output but the attention core's: the norms (h, h2, rstd), q/k/v, [their norms],
     * the concatenation, the rotation, o_proj, the residual add, gate, up, swiglu, down_proj */
    *recomp = w->HD + w->H, *redo = 0;
    return 5 * w->C + 2 + 3 * w->A + w->qk + 3 * w->I;
  }
  if (p.fn == zt_checkpoint_policy_save_gemm) { /* q, k, v, o_proj, gate, up, down_proj */
    *recomp = rest - qk_out - 2 * w->I, *redo = 0;
    return w->A + 2 * w->C + 2 * w->I;
  }
  /* save_wide_gemm (and policies the model does not know): the projections wider than their
   * input: gate and up when I > C, q when H D > C, k and v when K D > C, o_proj when C > H D,
   * down_proj when C > I */
  double kept = 0, redo_w = 0;
  if (w->I > w->C) kept += 2 * w->I, rest -= 2 * w->I;
  else redo_w += 2 * w->C * w->I;
  if (w->HD > w->C) kept += w->HD, rest -= w->qk > 0 ? w->HD : 0;
  else redo_w += w->C * w->HD;
  if (w->KD > w->C) kept += 2 * w->KD, rest -= w->qk > 0 ? w->KD : 0;
  else redo_w += 2 * w->C * w->KD;
  if (w->C > w->HD) kept += w->C;
  else redo_w += w->C * w->HD;
  if (w->C > w->I) kept += w->C;
  else rest += w->C; /* down_proj redone: see above; its work is not (early stop) */
  *recomp = rest, *redo = redo_w;
  return kept;
}

zt_act_cost zt__llama_act_cost(const zt_lm_config *lc, zt_recompute mode, zt_checkpoint_policy p) {
  ZT_ASSERT(lc->family == ZT_LM_LLAMA);
  widths w = widths_of(&lc->llama);
  /* at the end of forward: the final norm's input and rstd, its output and the fused output
   * layer's input grad (made in forward) */
  double out = 3 * w.C + 1, none = kept_none(&w), G = gemm_work(&w);
  if (mode == ZT_RECOMPUTE_NONE) return (zt_act_cost){0, none, 0, 0, out};
  /* Work: the projections' share of a layer's forward recomputed, plus about 0.05 for the rest
   * (norms, rotation, attention, adds). Early stop ends recomputation at down_proj's save, before
   * its GEMM: FULL redoes every projection but that. */
  if (mode == ZT_RECOMPUTE_FULL) return (zt_act_cost){w.C, 0, none, (G - w.C * w.I) / G + 0.05, out};
  double recomp = 0, redo = 0, kept = selective_kept(&w, p, &recomp, &redo);
  return (zt_act_cost){w.C, kept, recomp, redo / G + 0.05, out};
}
