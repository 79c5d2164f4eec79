/* zerotrain autograd: a define-by-run graph of nodes, the engine that runs backward,
 * grad mode, hook points and custom functions.
 * Nodes are internal graph objects, counted by the tensors whose grad_fn they are and
 * by the edges of later nodes; a graph is freed when its last output tensor is.
 * Higher-order gradients (create_graph) are not supported: backward runs without
 * recording. Every hook is a (fn, user_data) pair; registering may return a handle. */
#ifndef ZT_AUTOGRAD_H
#define ZT_AUTOGRAD_H

#include "zt/tensor.h"

typedef struct zt_node zt_node;

/* ---------------------------------------------------------------- grad mode */
/* Per thread; on by default. Returns the previous setting:
 *   bool prev = zt_set_grad_enabled(false); ... zt_set_grad_enabled(prev); */
ZT_API bool zt_set_grad_enabled(bool enabled);
ZT_API bool zt_grad_enabled(void);
/* Autocast: the per-thread mixed-precision setting (enabled, and the lower-precision
 * compute dtype, bf16 by default). It is state for code that picks a compute dtype (model
 * code now; the CUDA backend's reduced-precision GEMMs later); the CPU kernels compute in
 * the dtype of their inputs and do not read it. Checkpoint recomputation runs under the
 * state its forward saw, as it does for grad mode and the RNG. Set returns the previous. */
typedef struct zt_autocast_state {
  bool enabled;
  zt_dtype dtype;
} zt_autocast_state;
ZT_API zt_autocast_state zt_autocast_get(void);
ZT_API zt_autocast_state zt_autocast_set(zt_autocast_state s);

/* ---------------------------------------------------------------- engine */
/* Backward from roots, accumulating into the .grad of every leaf that requires grad.
 * grad_roots may be NULL, or have NULL entries, for scalar roots (grad = 1).
 * Without retain_graph the saved tensors of every node run are freed, and a later
 * backward through them is a ZT_STATUS_AUTOGRAD error. */
ZT_API ZT_NODISCARD zt_status zt_backward(int n_roots, zt_tensor *const *roots, zt_tensor *const *grad_roots, bool retain_graph);
/* Split backward, for pipeline schedules (reference: torch.distributed.pipelining's
 * stage_backward_input / stage_backward_weight, the Zero Bubble paper's B and W passes).
 * B = zt_backward_input: the part of backward that the inputs' gradients need; grads_out[i]
 * is a new tensor (NULL when inputs[i] is unreachable or does not require grad, e.g. token
 * ids). An op on that path whose backward also feeds weights (linear, matmul, layer norm,
 * the fused lm-head loss, ...) computes only its input grads now; its output grads and the
 * saved tensors its weight grads read are kept in *deferred (new, the caller's), everything
 * else it saved is freed (without retain_graph). Nodes that lead only to weights (an
 * embedding's backward, views of parameters) do not run in B.
 * W = zt_backward_weight: runs the kept work, accumulates into every leaf's .grad and fires
 * post-accumulate-grad hooks and the end-of-backward callbacks queued during B or W, as one
 * backward does (the same graph task id as its B: a checkpointed region recomputed in B is
 * not recomputed again). B then W gives bitwise the grads of one zt_backward; W of several
 * microbatches in order, those of plain accumulation. Node pre/post hooks and tensor hooks
 * run in B only (post hooks see the input grads). A record is spent by its W; free it with
 * zt_deferred_free (freeing one whose W never ran drops its work and callbacks). Several
 * may be alive at once, one per microbatch. */
typedef struct zt_deferred zt_deferred;
ZT_API ZT_NODISCARD zt_status zt_backward_input(int n_outputs, zt_tensor *const *outputs, zt_tensor *const *grad_outputs,
                                                int n_inputs, zt_tensor *const *inputs, bool retain_graph,
                                                zt_tensor **grads_out, zt_deferred **deferred);
ZT_API ZT_NODISCARD zt_status zt_backward_weight(zt_deferred *d);
ZT_API void zt_deferred_free(zt_deferred *d); /* NULL is a no-op */
/* Bytes the record keeps alive for W: output grads and saved tensors (a snapshot). */
ZT_API int64_t zt_deferred_bytes(const zt_deferred *d);

/* Gradients of outputs w.r.t. inputs only: nothing is accumulated into any .grad, and
 * nodes that do not lead to an input are not run (their op backward is told which of
 * its inputs need grads). grads_out[i] is a new tensor owned by the caller, or NULL when
 * inputs[i] is not reachable from the outputs. */
ZT_API ZT_NODISCARD zt_status zt_grad(int n_outputs, zt_tensor *const *outputs, zt_tensor *const *grad_outputs, int n_inputs,
                  zt_tensor *const *inputs, bool retain_graph, zt_tensor **grads_out);
/* Id of the backward running on this thread (a graph task), -1 outside backward. */
ZT_API int64_t zt_autograd_graph_task_id(void);

/* ---------------------------------------------------------------- hooks */
typedef struct zt_hook_handle zt_hook_handle;
/* Remove the hook (if its owner still exists) and free the handle. NULL is a no-op. */
ZT_API void zt_hook_remove(zt_hook_handle *h);

/* Tensor grad hook: sees the gradient of t when it is computed, before it is used
 * (accumulated into a leaf's .grad, captured by zt_grad, or passed to t's grad_fn). To
 * replace it, store a new tensor (the engine takes ownership) in *replacement. */
typedef zt_status (*zt_tensor_hook_fn)(const zt_tensor *grad, zt_tensor **replacement, void *user_data);
ZT_API ZT_NODISCARD zt_status zt_tensor_register_hook(zt_tensor *t, zt_tensor_hook_fn fn, void *user_data, zt_hook_handle **handle);

/* Post-accumulate-grad hook on a leaf that requires grad: runs after .grad is updated. */
typedef zt_status (*zt_post_acc_hook_fn)(zt_tensor *leaf, void *user_data);
ZT_API ZT_NODISCARD zt_status zt_tensor_register_post_accumulate_grad_hook(zt_tensor *leaf, zt_post_acc_hook_fn fn, void *user_data,
                                                       zt_hook_handle **handle);

/* Node pre-hook: sees (and may replace, freeing the old) the grads of the node's outputs
 * before it runs; entries are never NULL. Post-hook: sees grads it produced for its
 * inputs (NULL where not needed) and the grads it got; it may replace a grad input
 * (freeing the old) with one of the same shape and dtype. Tensor hooks of an output run
 * before its node's pre-hooks. */
typedef zt_status (*zt_node_pre_hook_fn)(zt_node *node, int n_grad_outputs, zt_tensor **grad_outputs,
                                         void *user_data);
typedef zt_status (*zt_node_post_hook_fn)(zt_node *node, int n_grad_inputs, zt_tensor **grad_inputs,
                                          int n_grad_outputs, zt_tensor *const *grad_outputs, void *user_data);
ZT_API ZT_NODISCARD zt_status zt_node_register_pre_hook(zt_node *node, zt_node_pre_hook_fn fn, void *user_data, zt_hook_handle **handle);
ZT_API ZT_NODISCARD zt_status zt_node_register_post_hook(zt_node *node, zt_node_post_hook_fn fn, void *user_data,
                                     zt_hook_handle **handle);

/* End-of-backward callback: queued while a backward runs (also from inside hooks and
 * callbacks), run once, in order, when that backward has finished. Outside backward it
 * is a ZT_STATUS_STATE error. */
typedef zt_status (*zt_callback_fn)(void *user_data);
ZT_API ZT_NODISCARD zt_status zt_autograd_queue_callback(zt_callback_fn fn, void *user_data);

/* Saved-tensor hooks: a per-thread stack. While non-empty, every tensor an op or custom
 * function saves for backward is given to the top pack(), which returns any object;
 * backward calls unpack() on it each time the tensor is needed (the tensor returned is
 * owned by the engine), and release() once the saved record is freed. t is borrowed:
 * keep it with zt_tensor_alias. */
typedef struct zt_saved_tensor_hooks {
  zt_status (*pack)(const zt_tensor *t, void **packed, void *user_data);
  zt_status (*unpack)(void *packed, zt_tensor **out, void *user_data);
  void (*release)(void *packed, void *user_data); /* optional */
  void *user_data;
} zt_saved_tensor_hooks;
ZT_API ZT_NODISCARD zt_status zt_saved_tensor_hooks_push(const zt_saved_tensor_hooks *hooks);
ZT_API ZT_NODISCARD zt_status zt_saved_tensor_hooks_pop(void);
ZT_API int zt_saved_tensor_hooks_depth(void);
/* This thread's top hooks (NULL when the stack is empty); a store checks it is on top
 * before it pops. */
ZT_API const zt_saved_tensor_hooks *zt_saved_tensor_hooks_top(void);
/* Run with an empty stack: stash it, and put it back (checkpoint recompute uses this). */
typedef struct zt_saved_hooks_stash {
  void *entries;
  int depth;
} zt_saved_hooks_stash;
ZT_API void zt_saved_tensor_hooks_stash(zt_saved_hooks_stash *stash);
ZT_API void zt_saved_tensor_hooks_unstash(zt_saved_hooks_stash *stash);

/* ---------------------------------------------------------------- nodes */
ZT_API zt_node *zt_tensor_grad_fn(const zt_tensor *t); /* NULL for leaves */
ZT_API const char *zt_node_name(const zt_node *node);  /* "MatmulBackward", "AccumulateGrad", ... */
ZT_API int zt_node_n_next(const zt_node *node);
/* The node that receives the grad of input i (NULL if that input needs none). */
ZT_API zt_node *zt_node_next(const zt_node *node, int i, int *input_nr);
ZT_API int64_t zt_node_seq_nr(const zt_node *node);
/* The accumulator node of a leaf that requires grad (created on first use). */
ZT_API ZT_NODISCARD zt_status zt_tensor_grad_accumulator(zt_tensor *leaf, zt_node **out);
/* Eager accumulation (off by default): while the leaf has a .grad, each gradient
 * contribution is added into it as soon as it is computed, instead of being summed in a
 * buffer that lives until the last contribution arrives (a weight used early and late in
 * backward, like a tied embedding, otherwise holds a gradient-sized buffer through the whole
 * backward). Skipped while the leaf has tensor hooks or its accumulator node hooks. The
 * post-accumulate-grad hooks still run once, after the last contribution. The sum is
 * (g + c1) + c2 rather than g + (c1 + c2): bitwise the same when .grad starts at zero
 * (FSDP's flat-gradient views), rounding apart otherwise. */
ZT_API ZT_NODISCARD zt_status zt_tensor_set_eager_accumulation(zt_tensor *leaf, bool eager);

/* Save a tensor for backward on a node (through the saved-tensor hooks); returns its
 * index. The node keeps no reference to t itself. */
ZT_API ZT_NODISCARD zt_status zt_node_save(zt_node *node, const zt_tensor *t, int *index);
/* Unpack saved tensor i for use in backward (checks the version counter). The tensor is
 * owned by the node until its backward returns. */
ZT_API ZT_NODISCARD zt_status zt_node_saved(zt_node *node, int i, zt_tensor **out);
ZT_API int zt_node_n_saved(const zt_node *node);
/* Free the tensors zt_node_saved unpacked on node now, instead of after its backward
 * returns (the engine does it then); a later zt_node_saved unpacks again. Checkpoint
 * recomputation uses it to drop a parent's recomputed tensors early. */
ZT_API void zt_node_drop_unpacked(zt_node *node);

/* ---------------------------------------------------------------- custom functions */
/* A user-defined differentiable function. forward runs with grad disabled and must
 * create n_outputs new tensors; ctx is the function's node: save tensors with
 * zt_node_save, non-tensor values with zt_fn_ctx_set_data. backward gets one grad per
 * output (never NULL: zeros where an output got none) and sets grad_inputs[i] (a new
 * tensor) for every i with needs_input_grad[i]. Inputs may be NULL (non-tensor slots). */
typedef struct zt_function {
  const char *name;
  zt_status (*forward)(zt_node *ctx, int n_inputs, zt_tensor *const *inputs, int n_outputs, zt_tensor **outputs,
                       void *user_data);
  zt_status (*backward)(zt_node *ctx, int n_outputs, zt_tensor *const *grad_outputs, int n_inputs,
                        const bool *needs_input_grad, zt_tensor **grad_inputs);
} zt_function;
ZT_API ZT_NODISCARD zt_status zt_function_apply(const zt_function *fn, int n_inputs, zt_tensor *const *inputs, int n_outputs,
                            zt_tensor **outputs, void *user_data);
/* Attach non-tensor state to a custom function's ctx; free_fn (optional) runs when the
 * node is freed. */
ZT_API void zt_fn_ctx_set_data(zt_node *ctx, void *data, void (*free_fn)(void *));
ZT_API void *zt_fn_ctx_data(zt_node *ctx);
/* Whether the function's input i needs a grad (known in forward too). */
ZT_API bool zt_fn_ctx_needs_input_grad(zt_node *ctx, int i);

#endif
