/* Registry entry for zt_cast: a converted copy, between any two dtypes (always a new
 * tensor, also for the same dtype). Differentiable between float dtypes: the grad is
 * converted back to the input's dtype. Integer outputs carry no grad (the dispatcher
 * attaches only float outputs to the graph). Rounding rules: src/ops/cpu/shape.h. */
#include "core/tensor_internal.h"
#include "op.h"

#define K(x) ((const zt__cast_kernels *)(x)->kernels)

/* attrs: i[0] = the target dtype. */
static zt_status cast_shape(zt__op_call *c) {
  const zt_tensor *a = c->in[0];
  if (!a) return ZT_ERR(ZT_STATUS_INVALID_ARG, "input is NULL");
  zt_dtype dt = (zt_dtype)c->attrs.i[0];
  if (!zt_dtype_valid(dt))
    return ZT_ERR(ZT_STATUS_DTYPE, "unknown target dtype value %lld: use a zt_dtype value such as ZT_DTYPE_BF16",
                  (long long)c->attrs.i[0]);
  zt__meta_of(a, &c->out_meta[0]);
  c->out_meta[0].dtype = dt;
  c->n_out = 1;
  return ZT_OK;
}

static zt_status cast_forward(zt__op_call *c) {
  const zt_tensor *a = c->in[0];
  K(c)->cast(zt__tensor_ptr(c->out[0]), c->out[0]->dtype, zt__tensor_ptr(a), a->dtype, zt_tensor_numel(a));
  return ZT_OK;
}

static zt_status cast_backward(zt__op_bwd *b) {
  if (!b->needs_input_grad[0]) return ZT_OK;
  const zt_tensor *g = b->grad_out[0];
  if (g->dtype == b->in_meta[0].dtype) return zt_tensor_alias(g, &b->grad_in[0]);
  ZT_TRY(zt__op_grad_like_input(b, 0, false, &b->grad_in[0]));
  K(b)->cast(zt__tensor_ptr(b->grad_in[0]), b->in_meta[0].dtype, zt__tensor_ptr(g), g->dtype, zt_tensor_numel(g));
  return ZT_OK;
}

static const zt__op op_cast = {"cast", "CastBackward", 1, ZT_OP_FLAG_ANY_DTYPE, 0, cast_shape, cast_forward,
                              cast_backward, {[ZT_DEVICE_CPU] = &zt__cpu_cast_kernels}, NULL};

zt_status zt_cast(zt_tensor *a, zt_dtype dtype, zt_tensor **out) {
  zt__op_attrs at = {0};
  at.i[0] = (int)dtype; /* via int: the enum may be unsigned, and -1 should read as -1 */
  return zt__op_run(&op_cast, 1, &a, &at, out);
}
