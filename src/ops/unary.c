/* Registry entries for unary and scalar elementwise ops. Each saves what its derivative
 * needs: the input (log, relu, gelu, pow, silu), the output (exp, sqrt, tanh) or nothing
 * (neg and the scalar add/mul/div). */
#include "core/status_internal.h"
#include "op.h"

#define K(x) ((const zt__unary_kernels *)(x)->kernels)

enum { SAVE_NONE, SAVE_INPUT, SAVE_OUTPUT };

static int save_kind(zt__unop op) {
  switch (op) {
  case ZT_UNOP_EXP: case ZT_UNOP_SQRT: case ZT_UNOP_TANH: return SAVE_OUTPUT;
  case ZT_UNOP_LOG: case ZT_UNOP_RELU: case ZT_UNOP_GELU: case ZT_UNOP_POW: case ZT_UNOP_SILU: return SAVE_INPUT;
  default: return SAVE_NONE;
  }
}

static zt_status unary_shape(zt__op_call *c) {
  zt_tensor *a = c->in[0];
  if (!a) return ZT_ERR(ZT_STATUS_INVALID_ARG, "the input is NULL");
  ZT_TRY(zt__check_float(c->op->name, a, "the input"));
  zt__meta_of(a, &c->out_meta[0]);
  c->n_out = 1;
  return ZT_OK;
}

static zt_status unary_forward(zt__op_call *c) {
  zt__unop op = (zt__unop)c->attrs.i[0];
  K(c)->unary(op, c->attrs.f[0], c->in[0], c->out[0]);
  int k = save_kind(op);
  if (k == SAVE_INPUT) ZT_TRY(zt__op_save(c, c->in[0]));
  if (k == SAVE_OUTPUT) ZT_TRY(zt__op_save(c, c->out[0]));
  return ZT_OK;
}

static zt_status unary_backward(zt__op_bwd *b) {
  if (!b->needs_input_grad[0]) return ZT_OK;
  zt__unop op = (zt__unop)b->attrs->i[0];
  zt_tensor *saved = NULL;
  int k = save_kind(op);
  if (k != SAVE_NONE) ZT_TRY(zt__op_saved(b, 0, &saved));
  ZT_TRY(zt__op_grad_like_input(b, 0, false, &b->grad_in[0]));
  K(b)->unary_backward(op, b->attrs->f[0], k == SAVE_INPUT ? saved : NULL, k == SAVE_OUTPUT ? saved : NULL,
                         b->grad_out[0], b->grad_in[0]);
  return ZT_OK;
}

#define ZT_UNARY_OP(NAME, NODE) static const zt__op op_##NAME = {#NAME, NODE, 1, 0, 0, unary_shape, unary_forward, unary_backward, {[ZT_DEVICE_CPU] = &zt__cpu_unary_kernels}, NULL};
ZT_UNARY_OP(neg, "NegBackward")
ZT_UNARY_OP(exp, "ExpBackward")
ZT_UNARY_OP(log, "LogBackward")
ZT_UNARY_OP(sqrt, "SqrtBackward")
ZT_UNARY_OP(tanh, "TanhBackward")
ZT_UNARY_OP(relu, "ReluBackward")
ZT_UNARY_OP(gelu, "GeluBackward")
ZT_UNARY_OP(silu, "SiluBackward")
ZT_UNARY_OP(add_scalar, "AddScalarBackward")
ZT_UNARY_OP(sub_scalar, "SubScalarBackward") /* runs as add_scalar of -s */
ZT_UNARY_OP(mul_scalar, "MulScalarBackward")
ZT_UNARY_OP(div_scalar, "DivScalarBackward")
ZT_UNARY_OP(pow, "PowBackward")

static zt_status run_unary(const zt__op *op, zt__unop kind, double s, zt_tensor *a, zt_tensor **out) {
  zt__op_attrs at = {0};
  at.i[0] = kind;
  at.f[0] = s;
  return zt__op_run(op, 1, &a, &at, out);
}

zt_status zt_neg(zt_tensor *a, zt_tensor **out) { return run_unary(&op_neg, ZT_UNOP_NEG, 0, a, out); }
zt_status zt_exp(zt_tensor *a, zt_tensor **out) { return run_unary(&op_exp, ZT_UNOP_EXP, 0, a, out); }
zt_status zt_log(zt_tensor *a, zt_tensor **out) { return run_unary(&op_log, ZT_UNOP_LOG, 0, a, out); }
zt_status zt_sqrt(zt_tensor *a, zt_tensor **out) { return run_unary(&op_sqrt, ZT_UNOP_SQRT, 0, a, out); }
zt_status zt_tanh(zt_tensor *a, zt_tensor **out) { return run_unary(&op_tanh, ZT_UNOP_TANH, 0, a, out); }
zt_status zt_relu(zt_tensor *a, zt_tensor **out) { return run_unary(&op_relu, ZT_UNOP_RELU, 0, a, out); }
zt_status zt_gelu(zt_tensor *a, zt_tensor **out) { return run_unary(&op_gelu, ZT_UNOP_GELU, 0, a, out); }
zt_status zt_silu(zt_tensor *a, zt_tensor **out) { return run_unary(&op_silu, ZT_UNOP_SILU, 0, a, out); }
zt_status zt_add_scalar(zt_tensor *a, double s, zt_tensor **out) { return run_unary(&op_add_scalar, ZT_UNOP_ADD_SCALAR, s, a, out); }
zt_status zt_sub_scalar(zt_tensor *a, double s, zt_tensor **out) { return run_unary(&op_sub_scalar, ZT_UNOP_ADD_SCALAR, -s, a, out); }
zt_status zt_mul_scalar(zt_tensor *a, double s, zt_tensor **out) { return run_unary(&op_mul_scalar, ZT_UNOP_MUL_SCALAR, s, a, out); }
zt_status zt_div_scalar(zt_tensor *a, double s, zt_tensor **out) { return run_unary(&op_div_scalar, ZT_UNOP_DIV_SCALAR, s, a, out); }
zt_status zt_pow(zt_tensor *a, double exponent, zt_tensor **out) { return run_unary(&op_pow, ZT_UNOP_POW, exponent, a, out); }
