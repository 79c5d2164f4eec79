/* zerotrain model interface: what the training step (zt_train_step) and the strategies see
 * of a model, whatever its family: forward to a loss, the parameters the optimizer updates,
 * the module tree and the ordered blocks that strategies act on (recompute regions, FSDP
 * units, pipeline stages). A struct of function pointers plus ctx; GPT-2 (zt_gpt2_model in
 * zt/nn.h) and the Llama family (zt_llama_model in zt/llama.h) implement it. The interface borrows the model: it owns nothing. */
#ifndef ZT_MODEL_H
#define ZT_MODEL_H

#include "zt/tensor.h"

typedef struct zt_module zt_module; /* zt/nn.h */

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
  void *ctx;
} zt_model;

/* Calls through the interface (m borrowed). */
static inline zt_status zt_model_forward_loss(const zt_model *m, zt_tensor *inputs, zt_tensor *targets,
                                              zt_tensor **loss) {
  return m->forward_loss(m->ctx, inputs, targets, loss);
}
static inline int zt_model_params(const zt_model *m, zt_param **params) { return m->params(m->ctx, params); }
static inline zt_module *zt_model_module(const zt_model *m) { return m->module(m->ctx); }
static inline zt_module *zt_model_blocks(const zt_model *m) { return m->blocks(m->ctx); }
static inline double zt_model_flops_per_step(const zt_model *m, int64_t B, int64_t T) {
  return m->flops_per_step ? m->flops_per_step(m->ctx, B, T) : 0;
}

#endif
