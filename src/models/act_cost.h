/* Internal: what each family's block keeps for backward, per token (zt_act_cost, zt/lm.h), the
 * counts the activation predictor and the recompute planner (lm_plan.c) run on. One function per
 * family, in its *_plan.c, counted from its forward's ops; the family tables (family.h) list them.
 * Included by: src/models. */
#ifndef ZT_MODELS_ACT_COST_H
#define ZT_MODELS_ACT_COST_H

#include "zt/lm.h"

/* GPT-2's block (gpt2_plan.c: the per-op counts of src/nn/layers.c and gpt2.c); c->family GPT2. */
zt_act_cost zt__gpt2_act_cost(const zt_lm_config *c, zt_recompute mode, zt_checkpoint_policy p);
/* A Llama-family decoder layer (llama_plan.c: the per-op counts of llama.c's layer_forward);
 * c->family LLAMA. */
zt_act_cost zt__llama_act_cost(const zt_lm_config *c, zt_recompute mode, zt_checkpoint_policy p);

#endif
