/* Registry entries for reductions: sum and mean over a set of dims, max over one dim.
 * The shape rules normalise dims into attrs (a bit mask / one dim), which the node keeps
 * for backward. sum/mean save nothing (backward needs only the input's shape); max
 * saves its i64 indices, its second output, which gets no grad. */
#include "core/status_internal.h"
#include "op.h"

#define K(x) ((const zt__reduce_kernels *)(x)->kernels)

/* sum/mean attrs: i[0] mean?, i[1] keepdim, i[2] n_dims, i[3..10] dims as given,
 * i[11] reduced-dims mask (set by the shape rule). */
enum { A_MEAN = 0, A_KEEP = 1, A_NDIMS = 2, A_DIMS = 3, A_MASK = 11 };

static zt_status sum_shape(zt__op_call *c) {
  zt_tensor *a = c->in[0];
  if (!a) return ZT_ERR(ZT_STATUS_INVALID_ARG, "input is NULL");
  ZT_TRY(zt__check_float(c->op->name, a, "the input"));
  int n = (int)c->attrs.i[A_NDIMS];
  uint32_t mask = 0, seen = 0;
  if (n == 0) mask = (1u << a->ndim) - 1u;
  for (int k = 0; k < n; k++) {
    int d;
    ZT_TRY(zt__norm_dim(c->op->name, (int)c->attrs.i[A_DIMS + k], a->ndim, &d));
    if (seen & (1u << d))
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: dim %d appears more than once in the list of dims", c->op->name,
                    (int)c->attrs.i[A_DIMS + k]);
    seen |= 1u << d;
    if (a->ndim) mask |= 1u << d; /* a 0-d tensor accepts dim 0 / -1 and reduces nothing */
  }
  c->attrs.i[A_MASK] = mask;
  zt__tensor_meta *m = &c->out_meta[0];
  m->dtype = a->dtype;
  m->ndim = 0;
  for (int d = 0; d < a->ndim; d++) {
    if (!(mask & (1u << d)))
      m->shape[m->ndim++] = a->shape[d];
    else if (c->attrs.i[A_KEEP])
      m->shape[m->ndim++] = 1;
  }
  c->n_out = 1;
  return ZT_OK;
}

/* 1 for sum, 1 / (number of elements reduced into each output) for mean. */
static double sum_scale(const zt__op_attrs *at, int ndim, const int64_t *shape) {
  if (!at->i[A_MEAN]) return 1.0;
  int64_t count = 1;
  for (int d = 0; d < ndim; d++)
    if (at->i[A_MASK] & (1 << d)) count *= shape[d];
  return 1.0 / (double)count; /* count 0: inf, so the mean of nothing is NaN */
}

static zt_status sum_forward(zt__op_call *c) {
  zt_tensor *a = c->in[0];
  return K(c)->sum(a, (uint32_t)c->attrs.i[A_MASK], sum_scale(&c->attrs, a->ndim, a->shape), c->out[0]);
}

static zt_status sum_backward(zt__op_bwd *b) {
  if (!b->needs_input_grad[0]) return ZT_OK;
  const zt__tensor_meta *m = &b->in_meta[0];
  ZT_TRY(zt__op_grad_like_input(b, 0, false, &b->grad_in[0]));
  K(b)->sum_backward(b->grad_out[0], (uint32_t)b->attrs->i[A_MASK], sum_scale(b->attrs, m->ndim, m->shape),
                     b->grad_in[0]);
  return ZT_OK;
}

static const zt__op op_sum = {"sum", "SumBackward", 1, 0, 0, sum_shape, sum_forward, sum_backward, {[ZT_DEVICE_CPU] = &zt__cpu_reduce_kernels}, NULL};
static const zt__op op_mean = {"mean", "MeanBackward", 1, 0, 0, sum_shape, sum_forward, sum_backward, {[ZT_DEVICE_CPU] = &zt__cpu_reduce_kernels}, NULL};

static zt_status run_sum(const zt__op *op, bool mean, zt_tensor *a, int n_dims, const int *dims, bool keepdim,
                         zt_tensor **out) {
  if (n_dims < 0 || (n_dims > 0 && !dims))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "op '%s': n_dims is %d and dims is %s; pass n_dims >= 0 dims (0: all)",
                  op->name, n_dims, dims ? "set" : "NULL");
  if (n_dims > ZT_MAX_DIMS)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "op '%s': %d dims given but tensors have at most %d, so some are repeated or out of range",
                  op->name, n_dims, ZT_MAX_DIMS);
  zt__op_attrs at = {0};
  at.i[A_MEAN] = mean;
  at.i[A_KEEP] = keepdim;
  at.i[A_NDIMS] = n_dims;
  for (int k = 0; k < n_dims; k++) at.i[A_DIMS + k] = dims[k];
  return zt__op_run(op, 1, &a, &at, out);
}

zt_status zt_sum(zt_tensor *a, int n_dims, const int *dims, bool keepdim, zt_tensor **out) {
  return run_sum(&op_sum, false, a, n_dims, dims, keepdim, out);
}

zt_status zt_mean(zt_tensor *a, int n_dims, const int *dims, bool keepdim, zt_tensor **out) {
  return run_sum(&op_mean, true, a, n_dims, dims, keepdim, out);
}

/* ------------------------------------------------------------------ max */
/* attrs: i[0] dim as given, i[1] keepdim, i[2] normalised dim (set by the shape rule). */

/* a seen as (outer, n, inner) around dim d. */
static void split_at(int ndim, const int64_t *shape, int d, int64_t *outer, int64_t *n, int64_t *inner) {
  *outer = 1;
  *inner = 1;
  *n = ndim ? shape[d] : 1;
  for (int k = 0; k < d && k < ndim; k++) *outer *= shape[k];
  for (int k = d + 1; k < ndim; k++) *inner *= shape[k];
}

static zt_status max_shape(zt__op_call *c) {
  zt_tensor *a = c->in[0];
  if (!a) return ZT_ERR(ZT_STATUS_INVALID_ARG, "input is NULL");
  ZT_TRY(zt__check_float(c->op->name, a, "the input"));
  int d;
  ZT_TRY(zt__norm_dim(c->op->name, (int)c->attrs.i[0], a->ndim, &d));
  if (a->ndim && a->shape[d] == 0) {
    char s[128];
    return ZT_ERR(ZT_STATUS_SHAPE, "%s: dim %d of a tensor of shape %s has size 0, so it has no max",
                  c->op->name, (int)c->attrs.i[0], zt_shape_str(a->ndim, a->shape, s));
  }
  c->attrs.i[2] = d;
  zt__tensor_meta *m = &c->out_meta[0];
  m->dtype = a->dtype;
  m->ndim = 0;
  for (int k = 0; k < a->ndim; k++) {
    if (k != d)
      m->shape[m->ndim++] = a->shape[k];
    else if (c->attrs.i[1])
      m->shape[m->ndim++] = 1;
  }
  c->out_meta[1] = *m;
  c->out_meta[1].dtype = ZT_DTYPE_I64;
  c->n_out = 2;
  return ZT_OK;
}

static zt_status max_forward(zt__op_call *c) {
  zt_tensor *a = c->in[0];
  int64_t outer, n, inner;
  split_at(a->ndim, a->shape, (int)c->attrs.i[2], &outer, &n, &inner);
  K(c)->max(a, outer, n, inner, c->out[0], c->out[1]);
  return zt__op_save(c, c->out[1]);
}

static zt_status max_backward(zt__op_bwd *b) {
  if (!b->needs_input_grad[0]) return ZT_OK;
  zt_tensor *idx;
  ZT_TRY(zt__op_saved(b, 0, &idx));
  const zt__tensor_meta *m = &b->in_meta[0];
  int64_t outer, n, inner;
  split_at(m->ndim, m->shape, (int)b->attrs->i[2], &outer, &n, &inner);
  ZT_TRY(zt__op_grad_like_input(b, 0, false, &b->grad_in[0]));
  K(b)->max_backward(b->grad_out[0], idx, outer, n, inner, b->grad_in[0]);
  return ZT_OK;
}

static const zt__op op_max = {"max", "MaxBackward", 1, 0, 0, max_shape, max_forward, max_backward, {[ZT_DEVICE_CPU] = &zt__cpu_reduce_kernels}, NULL};

zt_status zt_max(zt_tensor *a, int dim, bool keepdim, zt_tensor **values, zt_tensor **indices) {
  if (!values) return ZT_ERR(ZT_STATUS_INVALID_ARG, "op 'max': the values pointer is NULL");
  zt__op_attrs at = {0};
  at.i[0] = dim;
  at.i[1] = keepdim;
  zt_tensor *outs[2] = {NULL, NULL};
  ZT_TRY(zt__op_run(&op_max, 1, &a, &at, outs));
  *values = outs[0];
  if (indices)
    *indices = outs[1];
  else
    zt_tensor_free(outs[1]); /* the node keeps its own reference for backward */
  return ZT_OK;
}
