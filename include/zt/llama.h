/* zerotrain Llama family: Llama 2/3, Mistral, Qwen2/2.5 and Qwen3 decoders (RMSNorm, rotary
 * positions in Hugging Face's rotate-half layout, grouped-query attention, a SwiGLU MLP), with
 * the parameter names and layouts of transformers' *ForCausalLM (nn.Linear weights (out, in)),
 * so a Hugging Face folder loads without conversion. Implements zt_model (zt/model.h); the
 * decoder layers run as the sequence "model.layers" (zt_module_run_sequence), which memory
 * strategies wrap from outside. src/models/llama.c (model), llama_hf.c (folders), llama_decode.c
 * (incremental decoding with a KV cache). */
#ifndef ZT_LLAMA_H
#define ZT_LLAMA_H

#include "zt/nn.h"

typedef struct zt_llama_config {
  char model_type[16]; /* "llama", "mistral", "qwen2", "qwen3" (informative: the flags below decide) */
  int vocab_size;
  int hidden_size;
  int intermediate_size;
  int n_layer;  /* num_hidden_layers */
  int n_head;   /* num_attention_heads */
  int n_kv_head; /* num_key_value_heads (divides n_head; 1: multi-query) */
  int head_dim;  /* even; hidden_size / n_head unless the config says otherwise (Qwen3) */
  int max_position_embeddings; /* the longest sequence accepted */
  double rms_norm_eps;
  double rope_theta;
  zt_rope_scaling rope_scaling; /* type NONE or LLAMA3 */
  bool tie_word_embeddings;     /* no lm_head.weight: the output layer is embed_tokens */
  bool attention_bias;          /* biases on q, k and v (Qwen2); o_proj never has one */
  bool qk_norm;                 /* Qwen3: per-head RMSNorm of q and k (weights (head_dim)) before rope */
  int sliding_window;           /* Mistral: 0 none; sequences longer than it are refused */
  double initializer_range;     /* std of the random initialisation (0.02) */
} zt_llama_config;

/* The presets, ", "-separated (a string literal, for tables and messages). */
#define ZT_LLAMA_PRESET_NAMES "llama-tiny, smollm-135m, qwen2.5-0.5b, llama3.2-1b"
/* A preset config by name: llama-tiny (4 layers, 128 wide, 4 heads of 32, 2 KV heads, SwiGLU
 * 352, byte-level vocabulary 256, context 256, rope_theta 1e4, an untied lm_head), smollm-135m
 * (HuggingFaceTB/SmolLM-135M), qwen2.5-0.5b (Qwen/Qwen2.5-0.5B: q/k/v biases, rope_theta 1e6)
 * or llama3.2-1b (meta-llama/Llama-3.2-1B: llama3 rope scaling, context 131072); the three
 * published ones tied, as released. Unknown names are ZT_STATUS_INVALID_ARG listing them. */
ZT_API ZT_NODISCARD zt_status zt_llama_preset(const char *name, zt_llama_config *out);
/* Check a config (positive sizes, heads dividing, even head_dim, ...); errors say what to fix. */
ZT_API ZT_NODISCARD zt_status zt_llama_config_validate(const zt_llama_config *c);
/* Read a transformers config.json (path: the file, or a folder holding config.json), in the
 * layout of transformers 5 (rope_parameters) or 4 (top-level rope_theta, rope_scaling).
 * model_type must be llama, mistral, qwen2 or qwen3 (qwen2 implies q/k/v biases, qwen3 the
 * q/k norm); rope_type "default" or "llama3" (others are refused by name). */
ZT_API ZT_NODISCARD zt_status zt_llama_config_from_hf(const char *path, zt_llama_config *out);
/* Parameters a model of this config has (a tied head once), without building it. */
ZT_API int64_t zt_llama_config_num_params(const zt_llama_config *c);

typedef struct zt_llama zt_llama;

/* Build a model (f32 or f64 parameters) initialised N(0, initializer_range) for weights and
 * embeddings, 1 for RMSNorm weights, 0 for biases, from the default Philox generator in
 * state_dict order. Free with zt_llama_free. */
ZT_API ZT_NODISCARD zt_status zt_llama_new(const zt_llama_config *c, zt_dtype dt, zt_llama **out);
/* Same (f32), for models larger than RAM: each top-level module's parameters (embed_tokens,
 * each layer, norm, lm_head) go to store (zt_storage_evict, named by their HF names) as soon
 * as that module is made and initialised, so at most one module's parameters are in RAM at any
 * time; the values are bitwise zt_llama_new's (the same Philox draws in the same order). The
 * store must outlive the model (zt_llama_free gives its bytes back). */
ZT_API ZT_NODISCARD zt_status zt_llama_new_evicted(const zt_llama_config *c, zt_store *store, zt_llama **out);
ZT_API void zt_llama_free(zt_llama *m); /* NULL is a no-op */
/* Load the weights of a Hugging Face folder into m: model.safetensors, or the shards that
 * model.safetensors.index.json names (dir may also name one safetensors file). Every parameter must be present with m's shape (F32,
 * F64, BF16 or F16 on disk, converted); a tied model ignores a stored lm_head.weight. */
ZT_API ZT_NODISCARD zt_status zt_llama_load_hf_weights(zt_llama *m, const char *dir);
/* zt_llama_config_from_hf(dir) + zt_llama_new + zt_llama_load_hf_weights(dir). */
ZT_API ZT_NODISCARD zt_status zt_llama_from_hf(const char *dir, zt_dtype dt, zt_llama **out);

ZT_API const zt_llama_config *zt_llama_get_config(const zt_llama *m);
/* The root module ("" -> "model" -> embed_tokens, layers, norm; "lm_head" when untied). */
ZT_API zt_module *zt_llama_module(zt_llama *m);
/* The decoder layers as a sequence module ("model.layers"). */
ZT_API zt_module *zt_llama_blocks(zt_llama *m);
/* The parameters with Hugging Face names in state_dict order (array owned by m); decay on
 * exactly the 2-D tensors (embeddings, projections, an untied lm_head). */
ZT_API int zt_llama_params(zt_llama *m, zt_param **params);
ZT_API int64_t zt_llama_num_params(const zt_llama *m);
ZT_API void zt_llama_set_training(zt_llama *m, bool training);
/* 6 N B T + 12 L T (n_head head_dim) B T. */
ZT_API double zt_llama_flops_per_step(const zt_llama *m, int64_t B, int64_t T);
/* m through the model interface (borrowed): forward_loss is zt_llama_forward with targets,
 * forward_logits without; forward_stage is zt_llama_forward_stage; param_part: a layer's
 * parameters their layer, embed_tokens ZT_PART_INPUT (ZT_PART_BOTH when tied), the final norm
 * and lm_head ZT_PART_OUTPUT; config: {ZT_LM_LLAMA, m's config} (zt/lm.h). */
ZT_API zt_model zt_llama_model(zt_llama *m);

/* Forward. ids (B, T) i32 (T <= max_position_embeddings and <= sliding_window when set).
 * With targets (B, T) i32 (ignore index -1), *loss is the mean cross-entropy (0-d) of the
 * fused chunked output layer (no B*T*V logits are held) and logits may be NULL; without
 * targets pass loss NULL and *logits gets (B, T, V). */
ZT_API ZT_NODISCARD zt_status zt_llama_forward(zt_llama *m, zt_tensor *ids, zt_tensor *targets, zt_tensor **logits,
                                               zt_tensor **loss);

/* A pipeline stage's part of the forward: embed_tokens when embed_first (in: ids (B, T) i32;
 * else in: the hidden state (B, T, hidden_size), borrowed), then layers [first, first + count)
 * through the sequence "model.layers"'s wrappers (count may be 0), then, with targets (B, T)
 * i32, the final norm and the fused loss (*out: the mean loss, 0-d, as zt_llama_forward's);
 * without targets *out is the hidden state after the layers. The stages of any partition run
 * in order compute bitwise what zt_llama_forward computes. The root module's forward hooks are
 * not run. */
ZT_API ZT_NODISCARD zt_status zt_llama_forward_stage(zt_llama *m, bool embed_first, int first, int count,
                                                     zt_tensor *targets, zt_tensor *in, zt_tensor **out);

/* Incremental decoding (src/models/llama_decode.c). A KV cache for m: its n_layer layers of
 * n_kv_head heads of head_dim (only the KV heads: a grouped-query model's query heads share
 * them, never copied per head), `capacity` positions (1..max_position_embeddings, and at most
 * sliding_window when the config has one), batch rows, on the device and in the dtype of m's
 * parameters: n_layer * 2 * batch * n_kv_head * capacity * head_dim values. Free it with
 * zt_kv_cache_free. */
ZT_API ZT_NODISCARD zt_status zt_llama_kv_cache_new(zt_llama *m, int64_t batch, int64_t capacity, zt_kv_cache **out);
/* The forward of ids (B, T) i32 at positions [len, len + T) (len = zt_kv_cache_len(cache),
 * len + T <= the cache's capacity): each layer computes q, k and v for the new positions only
 * (q/k/v biases, Qwen3's q/k norm), rotates q and k at those absolute positions, and attends to
 * the cached keys and values with each query head reading its group's kv head (a cache with no
 * positions runs zt_causal_attention_gqa over the ids, as zt_llama_forward does); the new keys
 * and values are added to the cache, and *logits (B, V) are the last position's only (no B*T*V
 * logits are made). Runs with grad mode off (inference: nothing is recorded), through the
 * layers directly: no module hooks or sequence wrappers (training strategies) run, so the
 * parameters must be resident. The logits are zt_llama_forward's last row over the same tokens
 * up to the summation order of GEMMs over other row counts (f32: about 1e-6 relative). On
 * failure the cache is as it was before the call. */
ZT_API ZT_NODISCARD zt_status zt_llama_forward_cached(zt_llama *m, zt_kv_cache *cache, zt_tensor *ids,
                                                      zt_tensor **logits);

#endif
