/* Internal: the Llama family's model struct and the helpers its files share (llama.c builds
 * the model and runs the training forward; llama_decode.c runs incremental decoding with a KV
 * cache; llama_hf.c reads and writes transformers' config.json).
 * Included by: src/models. */
#ifndef ZT_MODELS_LLAMA_INTERNAL_H
#define ZT_MODELS_LLAMA_INTERNAL_H

#include "io/buf.h"
#include "io/json.h"
#include "zt/lm.h"

typedef struct zt__llama_layer {
  zt_module *mod; /* "N" under model.layers (owned by the tree) */
  zt_tensor *wq, *bq, *wk, *bk, *wv, *bv, *wo, *q_norm, *k_norm;
  zt_tensor *wg, *wu, *wd, *ln1, *ln2;
} zt__llama_layer;

struct zt_llama {
  zt_module *root; /* "" -> model (embed_tokens, layers, norm), lm_head */
  zt_module *layers_seq;
  zt_llama_config cfg;
  zt_lm_config lm; /* {LLAMA, cfg}: what zt_model.config gives */
  zt_dtype dtype;
  zt_store *evict_to; /* zt_llama_new_evicted: where each top-level module's parameters go once made */
  zt_tensor *embed, *norm, *lm_head; /* lm_head: NULL when tied */
  zt__llama_layer *layers;
  zt_param *params;
  int n_params;
  /* rotary tables (rope_n, head_dim / 2), grown on demand, on rope_dev */
  zt_tensor *cos, *sin;
  int64_t rope_n;
  zt_device rope_dev;
};

/* m->cos and m->sin cover at least T positions on dev (rebuilt larger, or on another device,
 * when needed; tensors that hold the old ones keep their own references). llama.c. */
ZT_NODISCARD zt_status zt__llama_ensure_rope(zt_llama *m, int64_t T, zt_device dev);
/* x (B, T, n * D) -> RMSNorm over each head's D values with weight w (D) (Qwen3's q/k norm);
 * *out is new. llama.c. */
ZT_NODISCARD zt_status zt__llama_head_norm(zt_tensor *x, zt_tensor *w, int64_t n, int64_t D, double eps,
                                           zt_tensor **out);

/* zt_llama_kv_cache_new and zt_llama_forward_cached with ctx a zt_llama: zt_model's
 * kv_cache_new and forward_cached members (zt/model.h). llama_decode.c. */
ZT_NODISCARD zt_status zt__llama_model_kv_cache_new(void *ctx, int64_t batch, int64_t capacity, zt_kv_cache **out);
ZT_NODISCARD zt_status zt__llama_model_forward_cached(void *ctx, zt_kv_cache *cache, zt_tensor *ids,
                                                      zt_tensor **logits);

/* config.json already parsed (j, an object; path names it in errors) into *out, validated;
 * *out is unchanged on failure. The layouts and refusals of zt_llama_config_from_hf, which
 * reads the file and calls this. llama_hf.c. */
ZT_NODISCARD zt_status zt__llama_from_hf_json(const char *path, const zt__json *j, zt_llama_config *out);
/* Appends to b the config.json transformers loads as c (4.x and 5.x alike): architectures
 * and model_type by c->model_type (an empty or unknown one: "qwen3" when qk_norm, else
 * "llama"), rope_theta with rope_scaling (4.x) and rope_parameters (5.x) saying the same,
 * sliding_window (null for 0) with use_sliding_window and max_window_layers 0 where the
 * type needs them to apply it to every layer, torch_dtype (4.x) and dtype (5.x) of dt.
 * Flags a type cannot say (q/k norm outside qwen3; qwen2 without biases) do not round-trip
 * through zt__llama_from_hf_json. llama_hf.c. */
void zt__llama_hf_config_json(const zt_llama_config *c, zt_dtype dt, zt__buf *b);

#endif
