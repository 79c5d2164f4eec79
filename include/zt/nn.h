/* zerotrain nn: modules with named parameters, and the GPT-2 model.
 * A module owns its parameter tensors (tag PARAM, requires_grad) and its children;
 * Parameter names are dotted paths; GPT-2 uses the tensor names and layouts of Hugging
 * Face's GPT2LMHeadModel ("transformer.h.0.attn.c_attn.weight", Conv1D weights stored
 * (in, out) and applied with zt_linear_io), so checkpoints need no conversion. */
#ifndef ZT_NN_H
#define ZT_NN_H

#include "zt/model.h"
#include "zt/ops.h"
#include "zt/store.h"

/* ------------------------------------------------ modules */
/* A module: a name (its segment of the dotted path: "attn", "0"), named parameters
 * (owned: tag PARAM, requires_grad), child modules (owned), and a train/eval flag. Layers
 * embed a zt_module as their first member, so a layer pointer is a module pointer;
 * zt_module_free frees the whole tree (parameters, children, the layer struct itself).
 * Parameter order is own parameters first, then each child's in turn (PyTorch's
 * named_parameters order). */
typedef struct zt_module zt_module;
/* Forward hooks of a module: pre runs before its forward computes anything, post after it,
 * with the forward's outputs (borrowed; post may register grad hooks on them). A failing
 * hook fails the forward (the hooks after it do not run). A module holds a list of them, so
 * several strategies can hook one module (FSDP gathering, activation offload, ...): pre
 * hooks and post hooks both run in the order they were added. Only forwards that call
 * zt_module_pre_forward/zt_module_post_forward run them: the GPT-2 root
 * (zt_gpt2_forward) and zt_nn_block_forward. */
typedef struct zt_module_hooks {
  zt_status (*pre)(zt_module *m, void *user_data);  /* optional */
  zt_status (*post)(zt_module *m, int n_outputs, zt_tensor *const *outputs, void *user_data); /* optional */
  void *user_data;
} zt_module_hooks;
/* One entry of a module's hook list: the hooks and the id zt_module_add_hooks returned. */
typedef struct zt_module_hook_entry {
  zt_module_hooks hooks;
  int id;
} zt_module_hook_entry;
/* Sequences: a module whose children run in order, each one's output the next one's input
 * (GPT-2's blocks). Its owner gives it the function that runs a span of its children
 * (zt_module_set_span_fn) and runs it with zt_module_run_sequence; strategies wrap the run
 * from outside (zt_module_add_wrapper), so a model never calls them: recompute regions over
 * groups of blocks, activation offload around the blocks. A wrapper runs a span further in
 * with zt_span_run(next, ...): the next wrapper inward, or the span function at the core.
 * Wrappers nest by `order` (lower outside; equal orders in the order added). */
typedef zt_status (*zt_span_fn)(void *ctx, int first, int count, zt_tensor *x, zt_tensor **y);
/* Where a wrapper's run goes on: a plain value, valid while the sequence's wrappers stay as
 * they are (a checkpoint region keeps it to recompute its span in backward). */
typedef struct zt_span_next {
  zt_module *seq;
  int level; /* the wrapper to run, or the span function when level == the wrapper count */
} zt_span_next;
typedef struct zt_module_wrapper {
  /* Runs children [first, first + count) on x (borrowed) into *y (new), through next. */
  zt_status (*run)(void *user_data, zt_span_next next, int first, int count, zt_tensor *x, zt_tensor **y);
  int order;
  void *user_data;
} zt_module_wrapper;
typedef struct zt_module_wrapper_entry {
  zt_module_wrapper wrapper;
  int id;
} zt_module_wrapper_entry;

struct zt_module {
  char name[48];
  const char *kind; /* "Linear", "LayerNorm", ..., "Module" for plain containers */
  zt_param *params; /* local names ("weight") */
  int n_params, cap_params;
  zt_module **children;
  int n_children, cap_children;
  bool training;                   /* true after init */
  void (*destroy)(zt_module *self); /* optional: frees what a layer holds besides params/children */
  zt_module_hook_entry *hooks;      /* forward hooks in the order added (zt_module_add_hooks) */
  int n_hooks, cap_hooks, next_hook_id; /* ids of hooks and wrappers */
  zt_span_fn span;                  /* sequences: runs a span of the children (NULL: not a sequence) */
  void *span_ctx;
  zt_module_wrapper_entry *wrappers; /* by order (zt_module_add_wrapper) */
  int n_wrappers, cap_wrappers;
};

/* A new empty container module (heap, free with zt_module_free). */
ZT_API ZT_NODISCARD zt_status zt_module_new(const char *kind, const char *name, zt_module **out);
/* Initialise an embedded module (layers call this on their first member). */
ZT_API ZT_NODISCARD zt_status zt_module_init(zt_module *m, const char *kind, const char *name);
/* A new parameter owned by m: zero-filled, tag PARAM, requires_grad. *out (may be NULL)
 * gets a borrowed pointer. Names must be unique within m. */
ZT_API ZT_NODISCARD zt_status zt_module_new_param(zt_module *m, const char *name, int ndim, const int64_t *shape, zt_dtype dt,
                              bool decay, zt_tensor **out);
/* Adopt child (m frees it from now on, also when this call fails). */
ZT_API ZT_NODISCARD zt_status zt_module_add_child(zt_module *m, zt_module *child);
/* The direct child with this name, or NULL. */
ZT_API zt_module *zt_module_child(const zt_module *m, const char *name);
/* All parameters of the tree with full dotted names ("h.0.attn.c_attn.weight", after
 * prefix + "." when prefix is not empty). *out is a new array (free() it); the tensors
 * are borrowed from the modules. */
ZT_API ZT_NODISCARD zt_status zt_module_named_params(const zt_module *m, const char *prefix, int *n, zt_param **out);
ZT_API int64_t zt_module_num_params(const zt_module *m); /* elements, whole tree */
/* Every parameter of the tree to store (zt_storage_evict, in its dtype), each storage named by
 * its full name under prefix (zt_module_named_params) unless it has a name: what a model built
 * straight into a store does with each module once it is made and initialised. */
ZT_API ZT_NODISCARD zt_status zt_module_evict_params(const zt_module *m, const char *prefix, zt_store *store);
ZT_API void zt_module_set_training(zt_module *m, bool training); /* whole tree */
ZT_API void zt_module_free(zt_module *m); /* NULL is a no-op */
/* Append forward hooks to m's list; *id (may be NULL) gets the id that removes them (ids
 * are > 0 and unique within m). Do not add or remove a module's hooks while its forward runs. */
ZT_API ZT_NODISCARD zt_status zt_module_add_hooks(zt_module *m, const zt_module_hooks *h, int *id);
/* Remove the hooks added under id (an unknown id is a no-op); the others keep their order. */
ZT_API void zt_module_remove_hooks(zt_module *m, int id);
/* Whether m holds hooks whose pre is fn (for strategies that must not hook a module twice). */
ZT_API bool zt_module_has_pre_hook(const zt_module *m, zt_status (*fn)(zt_module *m, void *user_data));
/* Run every pre / post hook in order (called by forwards that support hooks). */
ZT_API ZT_NODISCARD zt_status zt_module_pre_forward(zt_module *m);
ZT_API ZT_NODISCARD zt_status zt_module_post_forward(zt_module *m, int n_outputs, zt_tensor *const *outputs);

/* Make m a sequence whose spans run through span(ctx, ...) (the owner's function). */
ZT_API ZT_NODISCARD zt_status zt_module_set_span_fn(zt_module *m, zt_span_fn span, void *ctx);
/* Add a wrapper to sequence m; *id (may be NULL) removes it. As with hooks, do not change a
 * sequence's wrappers between a forward and its backward (regions recompute through them). */
ZT_API ZT_NODISCARD zt_status zt_module_add_wrapper(zt_module *m, const zt_module_wrapper *w, int *id);
ZT_API void zt_module_remove_wrapper(zt_module *m, int id); /* unknown id: a no-op */
/* Run a span through next (what wrappers call). */
ZT_API ZT_NODISCARD zt_status zt_span_run(zt_span_next next, int first, int count, zt_tensor *x, zt_tensor **y);
/* Run all of sequence m's children on x (borrowed) into *y (new), through its wrappers. */
ZT_API ZT_NODISCARD zt_status zt_module_run_sequence(zt_module *m, zt_tensor *x, zt_tensor **y);

/* ------------------------------------------------ layers */
/* Every forward takes its input borrowed and gives a new tensor (caller frees), except
 * dropout, which replaces *x in place of the caller's reference. Weights are initialised
 * N(0, init_std) from the default Philox generator (grad mode off), biases 0. */

/* Linear in Hugging Face's Conv1D layout: weight (in, out), bias (out) or none;
 * y = x (..., in) . W + b via zt_linear_io. */
typedef struct zt_nn_linear {
  zt_module base;
  zt_tensor *weight, *bias;
} zt_nn_linear;
ZT_API ZT_NODISCARD zt_status zt_nn_linear_new(const char *name, int64_t in, int64_t out, bool bias, zt_dtype dt, double init_std,
                           zt_nn_linear **out_layer);
ZT_API ZT_NODISCARD zt_status zt_nn_linear_forward(zt_nn_linear *l, zt_tensor *x, zt_tensor **out);

/* Layer norm over the last dim (C): weight 1, bias 0 at init (no decay). */
typedef struct zt_nn_layer_norm {
  zt_module base;
  zt_tensor *weight, *bias;
  double eps;
} zt_nn_layer_norm;
ZT_API ZT_NODISCARD zt_status zt_nn_layer_norm_new(const char *name, int64_t C, double eps, zt_dtype dt, zt_nn_layer_norm **out_layer);
ZT_API ZT_NODISCARD zt_status zt_nn_layer_norm_forward(zt_nn_layer_norm *l, zt_tensor *x, zt_tensor **out);

/* Embedding table weight (V, C) (decay). */
/* Token ids as a language model takes them: (B, T) i32 with B, T >= 1, or an error saying what
 * is wrong (their values are the embedding's to check). */
ZT_API ZT_NODISCARD zt_status zt_check_token_ids(const zt_tensor *ids);
typedef struct zt_nn_embedding {
  zt_module base;
  zt_tensor *weight;
} zt_nn_embedding;
ZT_API ZT_NODISCARD zt_status zt_nn_embedding_new(const char *name, int64_t V, int64_t C, zt_dtype dt, double init_std,
                              zt_nn_embedding **out_layer);
ZT_API ZT_NODISCARD zt_status zt_nn_embedding_forward(zt_nn_embedding *e, zt_tensor *ids, zt_tensor **out);

/* Dropout with probability p, active only in training mode with p > 0. When active, *x
 * is replaced by the result and the old tensor freed; otherwise *x is left as it is (no
 * copy, no op recorded). */
typedef struct zt_nn_dropout {
  zt_module base;
  double p;
} zt_nn_dropout;
ZT_API ZT_NODISCARD zt_status zt_nn_dropout_new(const char *name, double p, zt_nn_dropout **out_layer);
ZT_API ZT_NODISCARD zt_status zt_nn_dropout_forward(zt_nn_dropout *d, zt_tensor **x);

/* GPT-2 MLP: c_fc (C, 4C), GELU (tanh), c_proj (4C, C), dropout. */
typedef struct zt_nn_mlp {
  zt_module base;
  zt_nn_linear *c_fc, *c_proj;
  zt_nn_dropout *dropout;
} zt_nn_mlp;
ZT_API ZT_NODISCARD zt_status zt_nn_mlp_new(const char *name, int64_t C, double dropout, zt_dtype dt, double init_std,
                        double proj_std, zt_nn_mlp **out_layer);
ZT_API ZT_NODISCARD zt_status zt_nn_mlp_forward(zt_nn_mlp *m, zt_tensor *x, zt_tensor **out);

/* Causal self-attention: c_attn (C, 3C) makes q, k, v side by side, the fused
 * zt_causal_attention, then c_proj (C, C) and the residual dropout. */
typedef struct zt_nn_attention {
  zt_module base;
  zt_nn_linear *c_attn, *c_proj;
  zt_nn_dropout *resid_dropout;
  int n_head;
} zt_nn_attention;
ZT_API ZT_NODISCARD zt_status zt_nn_attention_new(const char *name, int64_t C, int n_head, double dropout, zt_dtype dt,
                              double init_std, double proj_std, zt_nn_attention **out_layer);
ZT_API ZT_NODISCARD zt_status zt_nn_attention_forward(zt_nn_attention *a, zt_tensor *x, zt_tensor **out);

/* Pre-LN transformer block: x + attn(ln_1(x)), then + mlp(ln_2(.)). x (B, T, C). */
typedef struct zt_nn_block {
  zt_module base;
  zt_nn_layer_norm *ln_1, *ln_2;
  zt_nn_attention *attn;
  zt_nn_mlp *mlp;
} zt_nn_block;
ZT_API ZT_NODISCARD zt_status zt_nn_block_new(const char *name, int64_t C, int n_head, double dropout, zt_dtype dt, double init_std,
                          double proj_std, zt_nn_block **out_layer);
ZT_API ZT_NODISCARD zt_status zt_nn_block_forward(zt_nn_block *b, zt_tensor *x, zt_tensor **out);

/* ------------------------------------------------ KV cache (incremental decoding) */
/* The keys and values of the positions a decoder has seen, per layer, so that each new
 * token computes q, k and v for itself only and attends to the cached keys and values
 * (zt_cached_attention). Model-agnostic: every layer holds k and v of shape (batch,
 * n_kv_head, capacity, head_dim) (a grouped-query model keeps only its kv heads), made up
 * front on `device` (accounted under tag ACTIVATION, freed with the cache).
 * A step of T new positions gives every layer its keys and values (B, T, n_kv_head *
 * head_dim) with zt_kv_cache_append or zt_kv_cache_attend, which write them at positions
 * [len, len + T), then commits with zt_kv_cache_advance(c, T); a step that fails before
 * the commit leaves the cache as it was. src/nn/kv_cache.c. */
typedef struct zt_kv_cache zt_kv_cache;
typedef struct zt_kv_cache_config {
  int n_layer;
  int n_kv_head;
  int64_t head_dim;
  int64_t batch;
  int64_t capacity; /* positions per layer */
  zt_dtype dtype;   /* f32 or f64 */
  zt_device device;
} zt_kv_cache_config;
ZT_API ZT_NODISCARD zt_status zt_kv_cache_new(const zt_kv_cache_config *cfg, zt_kv_cache **out);
ZT_API void zt_kv_cache_free(zt_kv_cache *c); /* NULL is a no-op */
ZT_API const zt_kv_cache_config *zt_kv_cache_get_config(const zt_kv_cache *c);
ZT_API int64_t zt_kv_cache_len(const zt_kv_cache *c); /* committed positions */
ZT_API void zt_kv_cache_reset(zt_kv_cache *c);        /* to no positions (the bytes stay allocated) */
/* Write layer's keys k and values v (B, T, n_kv_head * head_dim; any strides, e.g. views
 * into a fused qkv) at positions [len, len + T). len + T beyond the capacity is
 * ZT_STATUS_STATE. Writing a layer again before the commit replaces what it wrote. */
ZT_API ZT_NODISCARD zt_status zt_kv_cache_append(zt_kv_cache *c, int layer, zt_tensor *k, zt_tensor *v);
/* zt_kv_cache_append, then *out (B, T, n_head * head_dim) = attention of q (B, T, n_head *
 * head_dim) at positions [len, len + T) against every position held (zt_cached_attention).
 * Inference only (grad mode off where q requires grad). */
ZT_API ZT_NODISCARD zt_status zt_kv_cache_attend(zt_kv_cache *c, int layer, zt_tensor *q, zt_tensor *k, zt_tensor *v,
                                                 zt_tensor **out);
/* Commit a step of n positions: every layer must have taken n since the last commit
 * (ZT_STATUS_STATE naming the layer otherwise). */
ZT_API ZT_NODISCARD zt_status zt_kv_cache_advance(zt_kv_cache *c, int64_t n);
/* A model's decoding step over a cache (its forward_cached), from its parts: embed the ids (B,
 * T) at positions [len, len + T) into x (B, T, C); run each of n_layer layers on x, reading and
 * writing the cache; norm the last position (B, 1, C); *logits (B, V) = that times out_weight
 * (V, C) transposed; commit T positions. With grad mode off throughout. Checked first: the
 * ids' rows are the cache's batch, the cache has n_layer layers and room for T more positions
 * (ZT_STATUS_STATE saying how to go on). On failure the cache is as it was. */
typedef struct zt_kv_decoder {
  int n_layer;
  zt_status (*embed)(void *ctx, zt_tensor *ids, int64_t pos0, zt_tensor **x);
  zt_status (*layer)(void *ctx, zt_kv_cache *c, int layer, zt_tensor *x, zt_tensor **out);
  zt_status (*norm)(void *ctx, zt_tensor *x, zt_tensor **out);
  zt_tensor *out_weight;
  void *ctx;
} zt_kv_decoder;
ZT_API ZT_NODISCARD zt_status zt_kv_cache_decode(zt_kv_cache *c, const zt_kv_decoder *d, zt_tensor *ids,
                                                 zt_tensor **logits);

/* ------------------------------------------------ GPT-2 */
typedef struct zt_gpt2_config {
  int n_layer;
  int n_head;
  int n_embd;
  int vocab_size;
  int block_size; /* context length (learned positions) */
  double dropout; /* embedding, attention-output and MLP-output dropout */
} zt_gpt2_config;

#define ZT_GPT2_PRESET_NAMES "gpt2-tiny, gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m"
/* Presets: ZT_GPT2_PRESET_NAMES. Unknown names are ZT_STATUS_INVALID_ARG listing the presets. */
ZT_API ZT_NODISCARD zt_status zt_gpt2_preset(const char *name, zt_gpt2_config *out);
/* Parameters a model of this config has (tied embedding once), without building it. */
ZT_API int64_t zt_gpt2_config_num_params(const zt_gpt2_config *c);
/* Check a config (positive sizes, n_embd divisible by n_head, ...). */
ZT_API ZT_NODISCARD zt_status zt_gpt2_config_validate(const zt_gpt2_config *c);

typedef struct zt_gpt2 zt_gpt2;

/* Build a model with GPT-2 initialisation (N(0, 0.02); residual projections scaled by
 * 1/sqrt(2 n_layer); biases 0; layer norms 1/0) from the default Philox generator. */
ZT_API ZT_NODISCARD zt_status zt_gpt2_new(const zt_gpt2_config *c, zt_gpt2 **out);
/* Same, with parameters of dtype dt (f32 or f64; f64 for finite-difference tests). */
ZT_API ZT_NODISCARD zt_status zt_gpt2_new_dtype(const zt_gpt2_config *c, zt_dtype dt, zt_gpt2 **out);
/* Same (f32), for models larger than RAM: each top-level module's parameters (wte, wpe, each
 * block, ln_f) go to store (zt_storage_evict, named by their HF names) as soon as that module
 * is made and initialised, so at most one module's parameters are in RAM at any time; the
 * values are bitwise zt_gpt2_new's (the same Philox draws in the same order). The store must
 * outlive the model (zt_gpt2_free gives its bytes back). */
ZT_API ZT_NODISCARD zt_status zt_gpt2_new_evicted(const zt_gpt2_config *c, zt_store *store, zt_gpt2 **out);
ZT_API void zt_gpt2_free(zt_gpt2 *m);
/* The root module (name "", child "transformer"): for generic module code. Owned by m. */
ZT_API zt_module *zt_gpt2_module(zt_gpt2 *m);
ZT_API const zt_gpt2_config *zt_gpt2_get_config(const zt_gpt2 *m);
/* The parameters in a fixed order with HF names; the tied wte/lm_head is listed once
 * ("transformer.wte.weight"). The array is owned by the model. */
ZT_API int zt_gpt2_params(zt_gpt2 *m, zt_param **params);
ZT_API int64_t zt_gpt2_num_params(const zt_gpt2 *m); /* all parameters, tied embedding once */
ZT_API void zt_gpt2_set_training(zt_gpt2 *m, bool training); /* dropout on/off */
/* m through the model interface (zt/model.h), borrowed: forward_loss is zt_gpt2_forward with
 * targets, params zt_gpt2_params, blocks the sequence "transformer.h" of the transformer
 * layers, through which forward runs them (so recompute and offload strategies wrap it). */
ZT_API zt_model zt_gpt2_model(zt_gpt2 *m);

/* Load GPT-2 weights (src/models/gpt2_hf.c) from a transformers safetensors file (model.safetensors of
 * GPT2LMHeadModel: zerotrain keeps HF's layouts, so no transposes; lm_head is tied to
 * wte). Save writes the same format plus an HF config.json beside it. */
ZT_API ZT_NODISCARD zt_status zt_gpt2_load_hf(zt_gpt2 *m, const char *path);
ZT_API ZT_NODISCARD zt_status zt_gpt2_save_hf(zt_gpt2 *m, const char *path);

/* Forward. ids (B, T) i32 with T <= block_size and ids in [0, vocab). With targets (B, T)
 * i32 (ignore index -1), *loss receives the mean cross-entropy (0-d) computed by the fused
 * chunked output layer, which never holds all B*T*V logits, and logits may be NULL. Without
 * targets, *logits receives (B, T, V), every position's (pass loss NULL; sampling uses
 * zt_gpt2_forward_cached, which makes the last position's only). */
ZT_API ZT_NODISCARD zt_status zt_gpt2_forward(zt_gpt2 *m, zt_tensor *ids, zt_tensor *targets, zt_tensor **logits, zt_tensor **loss);

/* Incremental decoding (src/models/gpt2_decode.c). A KV cache for m: its n_layer layers and
 * n_head heads of n_embd / n_head, `capacity` positions (1..block_size), batch rows, on the
 * device and in the dtype of m's parameters. Free it with zt_kv_cache_free. */
ZT_API ZT_NODISCARD zt_status zt_gpt2_kv_cache_new(zt_gpt2 *m, int64_t batch, int64_t capacity, zt_kv_cache **out);
/* The forward of ids (B, T) i32 at positions [len, len + T) (len = zt_kv_cache_len(cache),
 * len + T <= the cache's capacity): each block computes q, k, v for the new positions only and
 * attends to the cached ones (a cache with no positions runs zt_causal_attention over the
 * ids, as zt_gpt2_forward does), the new keys and values are added to the cache, and
 * *logits (B, V) are the last position's only (the head never makes B*T*V logits). Runs with
 * grad mode off (inference: nothing is recorded), through the blocks directly: no module
 * hooks or sequence wrappers (training strategies) run, so the parameters must be resident.
 * In eval mode the logits are zt_gpt2_forward's last row over the same tokens, up to the
 * summation order of GEMMs over other row counts (in f32 about 1e-7 relative: the attention
 * rows are bitwise). On failure the cache is as it was before the call. */
ZT_API ZT_NODISCARD zt_status zt_gpt2_forward_cached(zt_gpt2 *m, zt_kv_cache *cache, zt_tensor *ids, zt_tensor **logits);

/* A pipeline stage's part of the forward: the embeddings when embed_first (in: token ids
 * (B, T) i32; else in: the hidden state (B, T, C), borrowed), then blocks [first, first +
 * count) through the block sequence's wrappers (count may be 0), then, when targets (B, T)
 * are given, ln_f and the fused loss (*out: the mean loss, 0-d, as zt_gpt2_forward's);
 * without targets *out is the hidden state after the blocks. The stages of a partition run
 * in order compute exactly what zt_gpt2_forward computes. The root module's forward hooks
 * (FSDP's root unit) are not run. */
ZT_API ZT_NODISCARD zt_status zt_gpt2_forward_stage(zt_gpt2 *m, bool embed_first, int first, int count,
                                                    zt_tensor *targets, zt_tensor *in, zt_tensor **out);

/* Memory-budget planning (src/models/gpt2_plan.c). The activation model counts, per
 * token, what each block keeps from forward to backward (NONE: 16C + 4 + n_head values;
 * SELECTIVE with save_wide_gemm: 8C, with save_gemm: 10C, with recompute_attention:
 * 15C + 4; FULL: C per region), the non-block part (the output layer's input grad, the
 * final layer norm's input and statistics, the embedding's output) and, in backward, the
 * recomputed activations of one region at a time; the peak is the larger of the end of
 * forward and the worst region's backward. Other policies are counted as save_wide_gemm.
 * modes: n_layer entries (a recompute plan's, zt/strategy.h), every: blocks per region,
 * policy: of the SELECTIVE blocks (fn NULL: save_wide_gemm). */
ZT_API int64_t zt_gpt2_predict_activation_peak(const zt_gpt2 *m, int64_t B, int64_t T, const zt_recompute *modes,
                                               int every, zt_checkpoint_policy policy);
/* Choose a mode per block (NONE, SELECTIVE or FULL; every 1) so that the predicted peak is
 * within budget bytes at the least recomputation: greedily, the change that frees the
 * most bytes per unit of recomputed work first (SELECTIVE redoes about 0.15 of a block's
 * forward, FULL about 0.7: early stop skips the MLP down-projection), then undoing the most work that still fits. Writes
 * modes (n_layer entries) and the predicted peak.
 * A budget below what full recomputation of every block needs is ZT_STATUS_OOM, naming
 * that minimum. */
ZT_API ZT_NODISCARD zt_status zt_gpt2_plan_recompute(const zt_gpt2 *m, int64_t B, int64_t T, int64_t budget,
                                        zt_checkpoint_policy policy, zt_recompute *modes, int64_t *predicted);

/* Training FLOPs per step by the formula 6 N B T + 12 L T d B T. */
ZT_API double zt_gpt2_flops_per_step(const zt_gpt2 *m, int64_t B, int64_t T);

#endif
