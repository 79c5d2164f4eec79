/* zerotrain model interface: what the training step (zt_train_step) and the strategies see
 * of a model, whatever its family: forward to a loss, the parameters the optimizer updates,
 * the module tree and the ordered blocks that strategies act on (recompute regions, FSDP
 * units, pipeline stages). A struct of function pointers plus ctx; GPT-2 (zt_gpt2_model in
 * zt/nn.h) and the Llama family (zt_llama_model in zt/llama.h) implement it. Those borrow the
 * model; zt_lm_new (zt/lm.h) returns one that owns it (free set). */
#ifndef ZT_MODEL_H
#define ZT_MODEL_H

#include "zt/tensor.h"

typedef struct zt_module zt_module;       /* zt/nn.h */
typedef struct zt_kv_cache zt_kv_cache;   /* zt/nn.h */
typedef struct zt_lm_config zt_lm_config; /* zt/lm.h */

/* A named parameter. `decay`: whether weight decay applies (2-D weights and embeddings
 * yes; biases and layer-norm parameters no). */
typedef struct zt_param {
  char name[96];
  zt_tensor *tensor;
  bool decay;
} zt_param;

/* How a strategy may run a block (recompute, zt/strategy.h): NONE keeps every activation for
 * backward; FULL runs it inside a checkpoint region (only the region's input stays between
 * forward and backward, the rest is recomputed in backward); SELECTIVE likewise under a
 * selective policy that keeps some outputs. PLAN names a mix of modes across blocks. */
typedef enum zt_recompute {
  ZT_RECOMPUTE_NONE = 0,
  ZT_RECOMPUTE_FULL,
  ZT_RECOMPUTE_SELECTIVE,
  ZT_RECOMPUTE_PLAN
} zt_recompute;
typedef struct zt_model {
  /* Required: *loss gets the mean loss (0-d, recorded for backward when grad mode is on) of
   * the model on inputs against targets (borrowed). */
  zt_status (*forward_loss)(void *ctx, zt_tensor *inputs, zt_tensor *targets, zt_tensor **loss);
  /* Required: the parameters in a fixed order (the array is owned by the model). */
  int (*params)(void *ctx, zt_param **params);
  /* Required: the root module (strategies walk and hook the tree from it). */
  zt_module *(*module)(void *ctx);
  /* Required: the ordered blocks (a transformer's layers) as a sequence module (zt/nn.h):
   * its children are the blocks, and forward runs them through zt_module_run_sequence, so
   * memory strategies wrap spans of them (zt/strategy.h). */
  zt_module *(*blocks)(void *ctx);
  /* Optional (NULL: unknown, 0): training FLOPs of one step of B rows of T tokens. */
  double (*flops_per_step)(void *ctx, int64_t B, int64_t T);

  /* The members below are a language model's (zt/lm.h), which the training layer, checkpoints
   * and sampling use; a model that is not one leaves them NULL and those refuse it. */
  /* Optional: the model's family and shape (owned by the model). */
  const zt_lm_config *(*config)(void *ctx);
  /* Optional: *logits (B, T, V) of every position of ids (B, T) i32, no loss. */
  zt_status (*forward_logits)(void *ctx, zt_tensor *ids, zt_tensor **logits);
  /* Optional: a pipeline stage's part of the forward (pipeline training, OffloadModel): the
   * embeddings when embed_first (in: ids (B, T) i32; else in: the hidden state (B, T, hidden),
   * borrowed), then blocks [first, first + count) through the block sequence's wrappers (count
   * may be 0), then, with targets, the final norm and the fused loss (*out: the mean loss, 0-d);
   * without targets *out is the hidden state after the blocks. The stages of a partition run
   * in order compute exactly what forward_loss computes. The root module's hooks do not run. */
  zt_status (*forward_stage)(void *ctx, bool embed_first, int first, int count, zt_tensor *targets, zt_tensor *in,
                             zt_tensor **out);
  /* Optional (required with forward_stage): where parameter i (params order) is used: its block
   * (0..n_layer-1), ZT_PART_INPUT (embeddings, first stage), ZT_PART_OUTPUT (final norm, an
   * untied output layer: last stage) or ZT_PART_BOTH (a tied embedding: first and last). */
  int (*param_part)(void *ctx, int i);
  /* Optional: a KV cache for batch rows and capacity positions (holding only the KV heads),
   * and the forward of ids at the cache's next positions giving the last position's logits
   * (B, V); inference only (see zt_gpt2_forward_cached). */
  zt_status (*kv_cache_new)(void *ctx, int64_t batch, int64_t capacity, zt_kv_cache **out);
  zt_status (*forward_cached)(void *ctx, zt_kv_cache *cache, zt_tensor *ids, zt_tensor **logits);
  /* Optional (NULL: the interface borrows the model): frees the model (zt_lm_new's). */
  void (*free)(void *ctx);
  void *ctx;
} zt_model;

/* Where a parameter is used (zt_model.param_part), besides a block index. */
enum { ZT_PART_INPUT = -1, ZT_PART_OUTPUT = -2, ZT_PART_BOTH = -3 };

/* Calls through the interface (m borrowed). */
static inline zt_status zt_model_forward_loss(const zt_model *m, zt_tensor *inputs, zt_tensor *targets,
                                              zt_tensor **loss) {
  return m->forward_loss(m->ctx, inputs, targets, loss);
}
static inline int zt_model_params(const zt_model *m, zt_param **params) { return m->params(m->ctx, params); }
static inline zt_module *zt_model_module(const zt_model *m) { return m->module(m->ctx); }
static inline zt_module *zt_model_blocks(const zt_model *m) { return m->blocks(m->ctx); }
static inline const zt_lm_config *zt_model_config(const zt_model *m) { return m->config ? m->config(m->ctx) : NULL; }
/* Frees an owned model (free set) and zeroes *m; a borrowed or zeroed one is only zeroed. */
static inline void zt_model_free(zt_model *m) {
  if (m && m->free && m->ctx) m->free(m->ctx);
  if (m) *m = (zt_model){0};
}
static inline double zt_model_flops_per_step(const zt_model *m, int64_t B, int64_t T) {
  return m->flops_per_step ? m->flops_per_step(m->ctx, B, T) : 0;
}

#endif
