/* Internal: the GPT-2 model's struct and the helpers its files share (gpt2.c builds it and
 * runs the training forward; gpt2_decode.c runs incremental decoding with a KV cache).
 * Included by: src/models only. */
#ifndef ZT_MODELS_GPT2_INTERNAL_H
#define ZT_MODELS_GPT2_INTERNAL_H

#include "io/buf.h"
#include "models/act_cost.h" /* zt__gpt2_act_cost (gpt2_plan.c), for the family table */
#include "zt/lm.h"

struct zt_gpt2 {
  zt_module *root; /* "" -> "transformer" -> wte, wpe, drop, h (0..L-1), ln_f */
  zt_gpt2_config cfg;
  zt_lm_config lm; /* cfg as its family's (zt_model.config) */
  zt_dtype dtype;
  zt_nn_embedding *wte, *wpe;
  zt_nn_dropout *drop;
  zt_nn_block **blocks;
  zt_nn_layer_norm *ln_f;
  zt_store *evict_to; /* zt_gpt2_new_evicted: where each module's parameters go once made (NULL: none) */
  zt_module *h;     /* the blocks as a sequence (its span function: run_blocks) */
  zt_param *params; /* full HF names, state_dict order */
  int n_params;
};

/* Token ids (B, T) i32 with 1 <= T <= block_size, or an error saying what is wrong. */
ZT_NODISCARD zt_status zt__gpt2_check_ids(const zt_gpt2 *m, const zt_tensor *ids);
/* x (B, T, C) = wte[ids] + wpe[pos0 .. pos0 + T), then dropout; *out is new. */
ZT_NODISCARD zt_status zt__gpt2_embed(zt_gpt2 *m, zt_tensor *ids, int64_t pos0, zt_tensor **out);

/* GPT2Config's config.json for c (gpt2_hf.c). */
void zt__gpt2_hf_config_json(const zt_lm_config *c, zt_dtype dt, zt__buf *b);

#endif
