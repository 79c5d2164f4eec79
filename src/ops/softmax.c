/* Registry entries for softmax, log_softmax and fused cross-entropy. Softmax and
 * log_softmax save their output. Cross-entropy saves the logits, the targets and one
 * logsumexp per row -- never a (rows, V) probability matrix -- and backward recomputes
 * each softmax row from them. */
#include <stdio.h>

#include "core/backend.h"
#include "core/status_internal.h"
#include "op.h"

#define K(x) ((const zt__softmax_kernels *)(x)->kernels)

/* a seen as (outer, n, inner) around dim d. */
static void split_at(int ndim, const int64_t *shape, int d, int64_t *outer, int64_t *n, int64_t *inner) {
  *outer = 1;
  *inner = 1;
  *n = ndim ? shape[d] : 1;
  for (int k = 0; k < d && k < ndim; k++) *outer *= shape[k];
  for (int k = d + 1; k < ndim; k++) *inner *= shape[k];
}

/* attrs: i[0] dim as given, i[1] log?, i[2] normalised dim (set by the shape rule). */
static zt_status softmax_shape(zt__op_call *c) {
  zt_tensor *a = c->in[0];
  if (!a) return ZT_ERR(ZT_STATUS_INVALID_ARG, "input is NULL");
  ZT_TRY(zt__check_float(c->op->name, a, "the input"));
  int d;
  ZT_TRY(zt__norm_dim(c->op->name, (int)c->attrs.i[0], a->ndim, &d));
  c->attrs.i[2] = d;
  zt__meta_of(a, &c->out_meta[0]);
  c->n_out = 1;
  return ZT_OK;
}

static zt_status softmax_forward(zt__op_call *c) {
  zt_tensor *a = c->in[0];
  int64_t outer, n, inner;
  split_at(a->ndim, a->shape, (int)c->attrs.i[2], &outer, &n, &inner);
  K(c)->softmax(a, outer, n, inner, c->attrs.i[1] != 0, c->out[0]);
  return zt__op_save(c, c->out[0]);
}

static zt_status softmax_backward(zt__op_bwd *b) {
  if (!b->needs_input_grad[0]) return ZT_OK;
  zt_tensor *y;
  ZT_TRY(zt__op_saved(b, 0, &y));
  const zt__tensor_meta *m = &b->in_meta[0];
  int64_t outer, n, inner;
  split_at(m->ndim, m->shape, (int)b->attrs->i[2], &outer, &n, &inner);
  ZT_TRY(zt__op_grad_like_input(b, 0, false, &b->grad_in[0]));
  K(b)->softmax_backward(y, b->grad_out[0], outer, n, inner, b->attrs->i[1] != 0, b->grad_in[0]);
  return ZT_OK;
}

static const zt__op op_softmax = {"softmax", "SoftmaxBackward", 1, 0, 0, softmax_shape, softmax_forward,
                                 softmax_backward, {[ZT_DEVICE_CPU] = &zt__cpu_softmax_kernels}, NULL};
static const zt__op op_log_softmax = {"log_softmax", "LogSoftmaxBackward", 1, 0, 0, softmax_shape, softmax_forward,
                                     softmax_backward, {[ZT_DEVICE_CPU] = &zt__cpu_softmax_kernels}, NULL};

static zt_status run_softmax(const zt__op *op, bool log, zt_tensor *a, int dim, zt_tensor **out) {
  zt__op_attrs at = {0};
  at.i[0] = dim;
  at.i[1] = log;
  return zt__op_run(op, 1, &a, &at, out);
}

zt_status zt_softmax(zt_tensor *a, int dim, zt_tensor **out) { return run_softmax(&op_softmax, false, a, dim, out); }
zt_status zt_log_softmax(zt_tensor *a, int dim, zt_tensor **out) {
  return run_softmax(&op_log_softmax, true, a, dim, out);
}

/* ------------------------------------------------------------------ cross-entropy */
/* inputs: logits (..., V) f32/f64, targets (...) i32/i64; attrs: i[0] ignore_index.
 * saved: 0 logits, 1 targets, 2 lse (rows). */

static zt_status ce_shape(zt__op_call *c) {
  zt_tensor *x = c->in[0], *t = c->in[1];
  if (!x) return ZT_ERR(ZT_STATUS_INVALID_ARG, "cross_entropy: logits is NULL");
  if (!t) return ZT_ERR(ZT_STATUS_INVALID_ARG, "cross_entropy: targets is NULL");
  ZT_TRY(zt__check_float(c->op->name, x, "logits"));
  if (t->dtype != ZT_DTYPE_I32 && t->dtype != ZT_DTYPE_I64)
    return ZT_ERR(ZT_STATUS_DTYPE,
                  "cross_entropy: targets have dtype %s; they must be class indices of dtype i32 or i64",
                  zt_dtype_name(t->dtype));
  char sx[128], st[128], se[128];
  if (x->ndim < 1)
    return ZT_ERR(ZT_STATUS_SHAPE, "cross_entropy: logits are 0-d; they must have shape (..., V) with V classes last");
  if (!zt_shape_equal(x->ndim - 1, x->shape, t->ndim, t->shape))
    return ZT_ERR(ZT_STATUS_SHAPE,
                  "cross_entropy: targets have shape %s but logits %s need targets of shape %s (logits without "
                  "their last dim)",
                  zt_shape_str(t->ndim, t->shape, st), zt_shape_str(x->ndim, x->shape, sx),
                  zt_shape_str(x->ndim - 1, x->shape, se));
  if (x->shape[x->ndim - 1] == 0)
    return ZT_ERR(ZT_STATUS_SHAPE, "cross_entropy: logits of shape %s have no classes (last dim is 0)",
                  zt_shape_str(x->ndim, x->shape, sx));
  c->out_meta[0].ndim = 0;
  c->out_meta[0].dtype = x->dtype;
  c->n_out = 1;
  return ZT_OK;
}

/* "(1, 3)" for flat position pos of shape (ndim, shape). */
static const char *pos_str(int ndim, const int64_t *shape, int64_t pos, char *buf, size_t cap) {
  int64_t idx[ZT_MAX_DIMS];
  for (int d = ndim - 1; d >= 0; d--) {
    idx[d] = pos % shape[d];
    pos /= shape[d];
  }
  size_t k = (size_t)snprintf(buf, cap, "(");
  for (int d = 0; d < ndim && k < cap; d++)
    k += (size_t)snprintf(buf + k, cap - k, d ? ", %lld" : "%lld", (long long)idx[d]);
  if (k < cap) snprintf(buf + k, cap - k, ")");
  return buf;
}

static zt_status ce_forward(zt__op_call *c) {
  zt_tensor *x = c->in[0], *t = c->in[1];
  int64_t ignore = c->attrs.i[0], V = x->shape[x->ndim - 1], R = zt_tensor_numel(t), bad_val = 0, count = 0;
  int64_t bad = K(c)->check_targets(t, V, ignore, &bad_val, &count);
  if (bad >= 0) {
    char ps[160];
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "cross_entropy: target at position %s (flat %lld) is %lld, outside [0, %lld) and not ignore_index "
                  "(%lld)",
                  pos_str(t->ndim, t->shape, bad, ps, sizeof ps), (long long)bad, (long long)bad_val, (long long)V,
                  (long long)ignore);
  }
  zt_tensor *lse = NULL;
  if (c->node) ZT_TRY(zt_tensor_empty(1, (int64_t[]){R}, x->dtype, zt_tensor_device(x), &lse));
  double sum = 0;
  zt_status s = K(c)->cross_entropy(x, t, ignore, lse, &sum);
  if (!s) {
    double loss = count ? sum / (double)count : 0.0; /* all ignored: 0, not 0/0 */
    float lf = (float)loss;
    zt__dev_write_range(c->out[0], 0, 1, x->dtype == ZT_DTYPE_F32 ? (const void *)&lf : (const void *)&loss);
  }
  if (!s) s = zt__op_save(c, x);
  if (!s) s = zt__op_save(c, t);
  if (!s) s = zt__op_save(c, lse);
  zt_tensor_free(lse); /* the saved record keeps its own reference */
  return s;
}

static zt_status ce_backward(zt__op_bwd *b) {
  if (!b->needs_input_grad[0]) return ZT_OK;
  zt_tensor *x, *t, *lse;
  ZT_TRY(zt__op_saved(b, 0, &x));
  ZT_TRY(zt__op_saved(b, 1, &t));
  ZT_TRY(zt__op_saved(b, 2, &lse));
  int64_t V = x->shape[x->ndim - 1], bad_val = 0, count = 0;
  /* recount the non-ignored rows (O(rows)); the version check has already caught
   * in-place writes, so a bad target here means bytes written behind zerotrain's back */
  if (K(b)->check_targets(t, V, b->attrs->i[0], &bad_val, &count) >= 0)
    return ZT_ERR(ZT_STATUS_STATE, "cross_entropy: a target is %lld, outside [0, %lld), in backward: the targets "
                  "were modified after forward without a version bump", (long long)bad_val, (long long)V);
  double g = zt_tensor_get(b->grad_out[0], 0);
  ZT_TRY(zt__op_grad_like_input(b, 0, false, &b->grad_in[0]));
  K(b)->cross_entropy_backward(x, t, lse, b->attrs->i[0], count ? g / (double)count : 0.0, b->grad_in[0]);
  return ZT_OK;
}

/* Input 1 (targets) is integer: no float check on it, and never a grad. */
static const zt__op op_cross_entropy = {"cross_entropy", "CrossEntropyBackward", 2, ZT_OP_FLAG_ANY_DTYPE, 1u << 1,
                                       ce_shape, ce_forward, ce_backward, {[ZT_DEVICE_CPU] = &zt__cpu_softmax_kernels}, NULL};

zt_status zt_cross_entropy(zt_tensor *logits, zt_tensor *targets, int64_t ignore_index, zt_tensor **out) {
  zt__op_attrs at = {0};
  at.i[0] = ignore_index;
  return zt__op_run(&op_cross_entropy, 2, (zt_tensor *[]){logits, targets}, &at, out);
}
