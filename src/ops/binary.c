/* Registry entries for broadcasting binary ops: add, sub, mul, div. Backward reduces
 * the broadcast grad back to each input's shape; mul and div save both inputs. */
#include "op.h"
#include "cpu/kernels.h"

static zt_status binary_shape(zt_op_call *c) {
  zt_tensor *a = c->in[0], *b = c->in[1];
  if (!a || !b) return ZT_ERR(ZT_STATUS_INVALID_ARG, "input is NULL");
  ZT_TRY(zt__check_float(c->op->name, a, "input a"));
  ZT_TRY(zt__check_same_dtype(c->op->name, a, b));
  int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
  zt__tensor_meta *m = &c->out_meta[0];
  m->ndim = nd;
  m->dtype = a->dtype;
  for (int d = 0; d < nd; d++) {
    int da = d - (nd - a->ndim), db = d - (nd - b->ndim);
    int64_t x = da >= 0 ? a->shape[da] : 1, y = db >= 0 ? b->shape[db] : 1;
    if (x != y && x != 1 && y != 1) {
      char sa[128], sb[128];
      return ZT_ERR(ZT_STATUS_SHAPE, "shapes %s and %s cannot be broadcast together (dim %d: %lld vs %lld)",
                    zt_shape_str(a->ndim, a->shape, sa), zt_shape_str(b->ndim, b->shape, sb), d, (long long)x,
                    (long long)y);
    }
    m->shape[d] = x == 1 ? y : x;
  }
  c->n_out = 1;
  return ZT_OK;
}

static zt_status binary_forward(zt_op_call *c, zt_binop op) {
  zt__cpu_binary(op, c->in[0], c->in[1], c->out[0]);
  if (op == ZT_BINOP_MUL || op == ZT_BINOP_DIV) {
    ZT_TRY(zt__op_save(c, c->in[0]));
    ZT_TRY(zt__op_save(c, c->in[1]));
  }
  return ZT_OK;
}
static zt_status add_forward(zt_op_call *c) { return binary_forward(c, ZT_BINOP_ADD); }
static zt_status sub_forward(zt_op_call *c) { return binary_forward(c, ZT_BINOP_SUB); }
static zt_status mul_forward(zt_op_call *c) { return binary_forward(c, ZT_BINOP_MUL); }
static zt_status div_forward(zt_op_call *c) { return binary_forward(c, ZT_BINOP_DIV); }

/* grad_in[i] = sum_to_shape(g), negated when neg. */
static zt_status reduce_grad(zt_op_bwd *b, int i, zt_tensor *g, bool neg) {
  zt_tensor *r;
  ZT_TRY(zt__sum_to_shape(g, &b->in_meta[i], &r));
  if (neg) {
    zt_tensor *n;
    zt_status s = zt_neg(r, &n);
    zt_tensor_free(r);
    ZT_TRY(s);
    r = n;
  }
  b->grad_in[i] = r;
  return ZT_OK;
}

static zt_status add_backward(zt_op_bwd *b) {
  if (b->needs_input_grad[0]) ZT_TRY(reduce_grad(b, 0, b->grad_out[0], false));
  if (b->needs_input_grad[1]) ZT_TRY(reduce_grad(b, 1, b->grad_out[0], false));
  return ZT_OK;
}
static zt_status sub_backward(zt_op_bwd *b) {
  if (b->needs_input_grad[0]) ZT_TRY(reduce_grad(b, 0, b->grad_out[0], false));
  if (b->needs_input_grad[1]) ZT_TRY(reduce_grad(b, 1, b->grad_out[0], true));
  return ZT_OK;
}

/* grad_in[i] = sum_to_shape(f(g, ...)) where t is computed by the caller. */
static zt_status reduce_owned(zt_op_bwd *b, int i, zt_tensor *t, zt_status s) {
  if (s) return s;
  s = reduce_grad(b, i, t, false);
  zt_tensor_free(t);
  return s;
}

static zt_status mul_backward(zt_op_bwd *b) {
  zt_tensor *x, *y, *t = NULL;
  ZT_TRY(zt__op_saved(b, 0, &x));
  ZT_TRY(zt__op_saved(b, 1, &y));
  if (b->needs_input_grad[0]) ZT_TRY(reduce_owned(b, 0, t, zt_mul(b->grad_out[0], y, &t)));
  if (b->needs_input_grad[1]) ZT_TRY(reduce_owned(b, 1, t, zt_mul(b->grad_out[0], x, &t)));
  return ZT_OK;
}

static zt_status div_backward(zt_op_bwd *b) {
  zt_tensor *x, *y, *t = NULL;
  ZT_TRY(zt__op_saved(b, 0, &x));
  ZT_TRY(zt__op_saved(b, 1, &y));
  if (b->needs_input_grad[0]) ZT_TRY(reduce_owned(b, 0, t, zt_div(b->grad_out[0], y, &t)));
  if (b->needs_input_grad[1]) {
    /* d(x/y)/dy = -x / y^2: computed as -(g * (x / y)) / y */
    zt_tensor *q = NULL, *gq = NULL, *r = NULL;
    zt_status s = zt_div(x, y, &q);
    if (!s) s = zt_mul(b->grad_out[0], q, &gq);
    if (!s) s = zt_div(gq, y, &r);
    zt_tensor_free(q);
    zt_tensor_free(gq);
    ZT_TRY(s);
    zt_tensor *rr = NULL;
    s = zt__sum_to_shape(r, &b->in_meta[1], &rr);
    zt_tensor_free(r);
    ZT_TRY(s);
    s = zt_neg(rr, &b->grad_in[1]);
    zt_tensor_free(rr);
    ZT_TRY(s);
  }
  return ZT_OK;
}

static const zt_op op_add = {"add", "AddBackward", 2, 0, 0, binary_shape, add_forward, add_backward};
static const zt_op op_sub = {"sub", "SubBackward", 2, 0, 0, binary_shape, sub_forward, sub_backward};
static const zt_op op_mul = {"mul", "MulBackward", 2, 0, 0, binary_shape, mul_forward, mul_backward};
static const zt_op op_div = {"div", "DivBackward", 2, 0, 0, binary_shape, div_forward, div_backward};

zt_status zt_add(zt_tensor *a, zt_tensor *b, zt_tensor **out) { return zt__op_run(&op_add, 2, (zt_tensor *[]){a, b}, NULL, out); }
zt_status zt_sub(zt_tensor *a, zt_tensor *b, zt_tensor **out) { return zt__op_run(&op_sub, 2, (zt_tensor *[]){a, b}, NULL, out); }
zt_status zt_mul(zt_tensor *a, zt_tensor *b, zt_tensor **out) { return zt__op_run(&op_mul, 2, (zt_tensor *[]){a, b}, NULL, out); }
zt_status zt_div(zt_tensor *a, zt_tensor *b, zt_tensor **out) { return zt__op_run(&op_div, 2, (zt_tensor *[]){a, b}, NULL, out); }
