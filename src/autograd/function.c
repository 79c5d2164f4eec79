/* Custom functions: user forward/backward in C. The function's node is its ctx: forward
 * saves tensors on it (through the saved-tensor hooks, like ops) and attaches any other
 * state with zt_fn_ctx_set_data. Forward runs with grad mode off. */
#include <stdlib.h>

#include "core/status_internal.h"
#include "node.h"

typedef struct fn_payload {
  const zt_function *fn;
  void *data;
  void (*data_free)(void *);
  bool *needs_input_grad; /* known at forward time */
} fn_payload;

static zt_status fn_apply(zt_node *n, zt_tensor *const *grad_outputs, const bool *needs, zt_tensor **grad_inputs) {
  fn_payload *p = n->payload;
  return p->fn->backward(n, n->n_outputs, grad_outputs, n->n_inputs, needs, grad_inputs);
}

static void fn_destroy(zt_node *n) {
  fn_payload *p = n->payload;
  if (!p) return; /* the payload could not be allocated */
  if (p->data_free) p->data_free(p->data);
  free(p->needs_input_grad);
  free(p);
  n->payload = NULL;
}

static const zt__node_vtable fn_vt = {"CustomFunction", fn_apply, fn_destroy, NULL};

/* ctx must be a custom function's node (ops' nodes carry another payload). */
static fn_payload *payload_of(zt_node *ctx) {
  ZT_ASSERT(ctx && ctx->vt == &fn_vt && ctx->payload);
  return ctx->payload;
}

void zt_fn_ctx_set_data(zt_node *ctx, void *data, void (*free_fn)(void *)) {
  fn_payload *p = payload_of(ctx);
  if (p->data_free) p->data_free(p->data);
  p->data = data;
  p->data_free = free_fn;
}
void *zt_fn_ctx_data(zt_node *ctx) { return payload_of(ctx)->data; }
bool zt_fn_ctx_needs_input_grad(zt_node *ctx, int i) {
  fn_payload *p = payload_of(ctx);
  return i >= 0 && i < ctx->n_inputs && p->needs_input_grad[i];
}

zt_status zt_function_apply(const zt_function *fn, int n_inputs, zt_tensor *const *inputs, int n_outputs,
                            zt_tensor **outputs, void *user_data) {
  if (!fn || !fn->forward || !fn->backward)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_function_apply: the function needs forward and backward");
  if (n_inputs < 0 || n_outputs <= 0 || (n_inputs && !inputs) || !outputs)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_function_apply(%s): bad input/output counts or arrays",
                  fn->name ? fn->name : "?");
  bool record = zt_grad_enabled() && zt__any_requires_grad(n_inputs, inputs);
  zt_node *n = zt__node_new(&fn_vt, n_inputs, n_outputs);
  if (!n) return zt__error_prefix(ZT_STATUS_OOM, "zt_function_apply(%s)", fn->name ? fn->name : "?");
  n->name = fn->name;
  fn_payload *p = calloc(1, sizeof *p);
  if (p) p->needs_input_grad = calloc((size_t)(n_inputs ? n_inputs : 1), sizeof(bool));
  if (!p || !p->needs_input_grad) {
    free(p);
    zt__node_release(n);
    return ZT_ERR(ZT_STATUS_OOM, "zt_function_apply(%s): out of host memory for the node's payload",
                  fn->name ? fn->name : "?");
  }
  p->fn = fn;
  n->payload = p;
  zt_status s = ZT_OK;
  for (int i = 0; i < n_inputs && s == ZT_OK; i++) {
    if (!inputs[i]) continue;
    if (record) s = zt__node_set_edge_from(n, i, inputs[i]);
    p->needs_input_grad[i] = record && inputs[i]->requires_grad;
  }
  for (int i = 0; i < n_outputs; i++) outputs[i] = NULL;
  if (s == ZT_OK) {
    bool prev = zt_set_grad_enabled(false);
    s = fn->forward(n, n_inputs, inputs, n_outputs, outputs, user_data);
    zt_set_grad_enabled(prev);
  }
  for (int i = 0; i < n_outputs && s == ZT_OK; i++) {
    if (!outputs[i]) {
      s = ZT_ERR(ZT_STATUS_INVALID_ARG, "custom function %s: forward did not set output %d", zt_node_name(n), i);
      break;
    }
    for (int j = 0; j < n_inputs && s == ZT_OK; j++)
      if (outputs[i] == inputs[j])
        s = ZT_ERR(ZT_STATUS_INVALID_ARG,
                   "custom function %s: forward returned input %d itself as output %d; return a new tensor "
                   "(zt_tensor_alias for a view)",
                   zt_node_name(n), j, i);
    for (int j = 0; j < i && s == ZT_OK; j++)
      if (outputs[i] == outputs[j])
        s = ZT_ERR(ZT_STATUS_INVALID_ARG, "custom function %s: forward returned one tensor as outputs %d and %d",
                   zt_node_name(n), j, i);
    if (s == ZT_OK && (outputs[i]->grad_fn || outputs[i]->grad_acc || outputs[i]->requires_grad))
      s = ZT_ERR(ZT_STATUS_INVALID_ARG,
                 "custom function %s: output %d already has autograd history or requires grad; forward must "
                 "return new tensors (it runs with grad mode off)",
                 zt_node_name(n), i);
  }
  if (s) {
    /* free what forward made, once each; never the caller's inputs nor tensors with
     * autograd state (forward, running without grad, cannot have made those) */
    for (int i = 0; i < n_outputs; i++) {
      bool skip = !outputs[i];
      for (int j = 0; j < n_inputs; j++) skip |= outputs[i] == inputs[j];
      for (int j = 0; j < i; j++) skip |= outputs[i] == outputs[j]; /* freed already */
      if (skip) continue;
      zt_tensor *o = outputs[i];
      if (!o->grad_fn && !o->grad_acc && !o->requires_grad) zt_tensor_free(o);
    }
    for (int i = 0; i < n_outputs; i++) outputs[i] = NULL;
    zt__node_release(n);
    return s;
  }
  for (int i = 0; i < n_outputs; i++) {
    zt__node_set_out_meta(n, i, outputs[i]);
    if (record && zt_dtype_is_float(outputs[i]->dtype)) zt__node_attach_output(n, i, outputs[i]);
  }
  zt__node_release(n);
  return ZT_OK;
}
