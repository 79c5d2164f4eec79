/* Registry entry for the fused SwiGLU, silu(gate) * up (a Llama MLP's activation). Forward
 * saves gate and up only; backward recomputes silu(gate) and its derivative from gate in
 * one pass. The kernels compute exactly what zt_silu then zt_mul compute, so the fused op
 * is bitwise the composition (tests check it), with one activation fewer saved. */
#include "core/tensor_internal.h"
#include "op.h"

#define K(x) ((const zt__swiglu_kernels *)(x)->kernels)

static zt_status swiglu_shape(zt__op_call *c) {
  zt_tensor *g = c->in[0], *u = c->in[1];
  char s1[128], s2[128];
  if (!g || !u) return ZT_ERR(ZT_STATUS_INVALID_ARG, "gate and up are required (one is NULL)");
  ZT_TRY(zt__check_float("swiglu", g, "gate"));
  ZT_TRY(zt__check_same_dtype("swiglu", g, u));
  if (!zt_shape_equal(g->ndim, g->shape, u->ndim, u->shape))
    return ZT_ERR(ZT_STATUS_SHAPE, "gate has shape %s but up %s; they must have one shape (no broadcasting)",
                  zt_shape_str(g->ndim, g->shape, s1), zt_shape_str(u->ndim, u->shape, s2));
  zt__meta_of(g, &c->out_meta[0]);
  c->n_out = 1;
  return ZT_OK;
}

static zt_status swiglu_forward(zt__op_call *c) {
  K(c)->swiglu(c->in[0], c->in[1], c->out[0]);
  ZT_TRY(zt__op_save(c, c->in[0]));
  return zt__op_save(c, c->in[1]);
}

static zt_status swiglu_backward(zt__op_bwd *b) {
  const bool *need = b->needs_input_grad;
  if (!need[0] && !need[1]) return ZT_OK;
  zt_tensor *gate, *up;
  ZT_TRY(zt__op_saved(b, 0, &gate));
  ZT_TRY(zt__op_saved(b, 1, &up));
  zt_status s = ZT_OK;
  if (need[0]) s = zt__op_grad_like_input(b, 0, false, &b->grad_in[0]);
  if (!s && need[1]) s = zt__op_grad_like_input(b, 1, false, &b->grad_in[1]);
  if (s) return s; /* grads already made are freed by the engine */
  K(b)->swiglu_backward(b->grad_out[0], gate, up, need[0] ? b->grad_in[0] : NULL, need[1] ? b->grad_in[1] : NULL);
  return ZT_OK;
}

static const zt__op op_swiglu = {"swiglu", "SwigluBackward", 2, 0, 0, swiglu_shape, swiglu_forward, swiglu_backward,
                                 {[ZT_DEVICE_CPU] = &zt__cpu_swiglu_kernels}, NULL};

zt_status zt_swiglu(zt_tensor *gate, zt_tensor *up, zt_tensor **out) {
  zt__op_attrs at = {0};
  return zt__op_run(&op_swiglu, 2, (zt_tensor *[]){gate, up}, &at, out);
}
