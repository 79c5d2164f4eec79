/* Registry entries for broadcasting binary ops: add, sub, mul, div. Backward reduces
 * the broadcast grad back to each input's shape. mul and div save only the inputs their
 * backward will read for the inputs that get a grad (attrs.i[0] says which). */
#include "core/status_internal.h"
#include "op.h"

#define K(x) ((const zt__binary_kernels *)(x)->kernels)

static zt_status binary_shape(zt__op_call *c) {
  zt_tensor *a = c->in[0], *b = c->in[1];
  if (!a || !b) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s input is NULL", a ? "second" : "first");
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

/* Bits of attrs.i[0] (mul, div): which inputs were saved, in this order. */
enum { SAVED_A = 1, SAVED_B = 2 };

static bool gets_grad(const zt__op_call *c, int i) { return c->node && zt_node_next(c->node, i, NULL) != NULL; }

static zt_status binary_forward(zt__op_call *c, zt__binop op) {
  K(c)->binary(op, c->in[0], c->in[1], c->out[0]);
  /* d(a*b)/da = b, d(a*b)/db = a; d(a/b)/da = 1/b, d(a/b)/db = -a/b^2 */
  bool ga = gets_grad(c, 0), gb = gets_grad(c, 1);
  bool save_a = op == ZT_BINOP_MUL ? gb : op == ZT_BINOP_DIV && gb;
  bool save_b = op == ZT_BINOP_MUL ? ga : op == ZT_BINOP_DIV && (ga || gb);
  c->attrs.i[0] = (save_a ? SAVED_A : 0) | (save_b ? SAVED_B : 0);
  if (save_a) ZT_TRY(zt__op_save(c, c->in[0]));
  if (save_b) ZT_TRY(zt__op_save(c, c->in[1]));
  return ZT_OK;
}
static zt_status add_forward(zt__op_call *c) { return binary_forward(c, ZT_BINOP_ADD); }
static zt_status sub_forward(zt__op_call *c) { return binary_forward(c, ZT_BINOP_SUB); }
static zt_status mul_forward(zt__op_call *c) { return binary_forward(c, ZT_BINOP_MUL); }
static zt_status div_forward(zt__op_call *c) { return binary_forward(c, ZT_BINOP_DIV); }

/* Saved a and b (NULL where not saved). */
static zt_status saved_ab(zt__op_bwd *b, zt_tensor **x, zt_tensor **y) {
  int64_t m = b->attrs->i[0];
  int k = 0;
  *x = *y = NULL;
  if (m & SAVED_A) ZT_TRY(zt__op_saved(b, k++, x));
  if (m & SAVED_B) ZT_TRY(zt__op_saved(b, k++, y));
  return ZT_OK;
}

static bool same_shape(const zt_tensor *t, const zt__tensor_meta *m) {
  return zt_shape_equal(t->ndim, t->shape, m->ndim, m->shape);
}

/* grad_in[i] = (neg ? -1 : 1) * sum_to_shape(g); g is borrowed. Same shape: one pass
 * (copy or negate) instead of zero-fill + accumulate. */
static zt_status reduce_grad(zt__op_bwd *b, int i, const zt_tensor *g, bool neg) {
  const zt__tensor_meta *m = &b->in_meta[i];
  zt_tensor *r;
  if (same_shape(g, m)) {
    ZT_TRY(zt__tensor_from_meta(m, false, &r));
    K(b)->unary(neg ? ZT_UNOP_NEG : ZT_UNOP_MUL_SCALAR, 1, g, r); /* x * 1 copies exactly */
  } else {
    ZT_TRY(zt__sum_to_shape(g, m, &r));
    if (neg) K(b)->unary(ZT_UNOP_NEG, 0, r, r);
  }
  b->grad_in[i] = r;
  return ZT_OK;
}

static zt_status add_backward(zt__op_bwd *b) {
  if (b->needs_input_grad[0]) ZT_TRY(reduce_grad(b, 0, b->grad_out[0], false));
  if (b->needs_input_grad[1]) ZT_TRY(reduce_grad(b, 1, b->grad_out[0], false));
  return ZT_OK;
}
static zt_status sub_backward(zt__op_bwd *b) {
  if (b->needs_input_grad[0]) ZT_TRY(reduce_grad(b, 0, b->grad_out[0], false));
  if (b->needs_input_grad[1]) ZT_TRY(reduce_grad(b, 1, b->grad_out[0], true));
  return ZT_OK;
}

/* grad_in[i] = (neg ? -1 : 1) * sum_to_shape(t) for a t the caller made (status s);
 * takes t, which becomes the grad itself when it already has the input's shape. */
static zt_status reduce_owned(zt__op_bwd *b, int i, zt_tensor *t, zt_status s, bool neg) {
  if (s) return s;
  if (same_shape(t, &b->in_meta[i])) {
    if (neg) K(b)->unary(ZT_UNOP_NEG, 0, t, t);
    b->grad_in[i] = t;
    return ZT_OK;
  }
  s = reduce_grad(b, i, t, neg);
  zt_tensor_free(t);
  return s;
}

static zt_status mul_backward(zt__op_bwd *b) {
  zt_tensor *x, *y, *t = NULL;
  ZT_TRY(saved_ab(b, &x, &y));
  if (b->needs_input_grad[0]) ZT_TRY(reduce_owned(b, 0, t, zt_mul(b->grad_out[0], y, &t), false));
  if (b->needs_input_grad[1]) ZT_TRY(reduce_owned(b, 1, t, zt_mul(b->grad_out[0], x, &t), false));
  return ZT_OK;
}

static zt_status div_backward(zt__op_bwd *b) {
  zt_tensor *x, *y, *t = NULL;
  ZT_TRY(saved_ab(b, &x, &y));
  if (b->needs_input_grad[0]) ZT_TRY(reduce_owned(b, 0, t, zt_div(b->grad_out[0], y, &t), false));
  if (b->needs_input_grad[1]) {
    /* d(x/y)/dy = -x / y^2: computed as -(g * (x / y)) / y, which stays finite where
     * x / y does (y^2 could overflow or underflow first) */
    zt_tensor *q = NULL, *gq = NULL, *r = NULL;
    zt_status s = zt_div(x, y, &q);
    if (!s) s = zt_mul(b->grad_out[0], q, &gq);
    if (!s) s = zt_div(gq, y, &r);
    zt_tensor_free(q);
    zt_tensor_free(gq);
    ZT_TRY(reduce_owned(b, 1, r, s, true));
  }
  return ZT_OK;
}

static const zt__op op_add = {"add", "AddBackward", 2, 0, 0, binary_shape, add_forward, add_backward, {[ZT_DEVICE_CPU] = &zt__cpu_binary_kernels}, NULL};
static const zt__op op_sub = {"sub", "SubBackward", 2, 0, 0, binary_shape, sub_forward, sub_backward, {[ZT_DEVICE_CPU] = &zt__cpu_binary_kernels}, NULL};
static const zt__op op_mul = {"mul", "MulBackward", 2, 0, 0, binary_shape, mul_forward, mul_backward, {[ZT_DEVICE_CPU] = &zt__cpu_binary_kernels}, NULL};
static const zt__op op_div = {"div", "DivBackward", 2, 0, 0, binary_shape, div_forward, div_backward, {[ZT_DEVICE_CPU] = &zt__cpu_binary_kernels}, NULL};

zt_status zt_add(zt_tensor *a, zt_tensor *b, zt_tensor **out) { return zt__op_run(&op_add, 2, (zt_tensor *[]){a, b}, NULL, out); }
zt_status zt_sub(zt_tensor *a, zt_tensor *b, zt_tensor **out) { return zt__op_run(&op_sub, 2, (zt_tensor *[]){a, b}, NULL, out); }
zt_status zt_mul(zt_tensor *a, zt_tensor *b, zt_tensor **out) { return zt__op_run(&op_mul, 2, (zt_tensor *[]){a, b}, NULL, out); }
zt_status zt_div(zt_tensor *a, zt_tensor *b, zt_tensor **out) { return zt__op_run(&op_div, 2, (zt_tensor *[]){a, b}, NULL, out); }
