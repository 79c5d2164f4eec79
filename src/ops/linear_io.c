/* Registry entry for linear_io: x (..., in) . W (in, out) + bias (out), the Conv1D layout
 * of GPT-2 checkpoints, so HF weights are used as stored. All rows of x form one GEMM in
 * forward and in each backward GEMM; the node saves only what the needed grads read. */
#include <limits.h>

#include "op.h"
#include "cpu/gemm.h"

/* attrs.i: saved-tensor index of x and of W, -1 when not saved (set by forward). */
enum { LIO_SAVE_X, LIO_SAVE_W };

static int64_t rows_of(int ndim, const int64_t *shape) {
  int64_t r = 1;
  for (int d = 0; d < ndim - 1; d++) r *= shape[d];
  return r;
}

static zt_status check_int(const char *what, int64_t v) {
  if (v > INT_MAX)
    return ZT_ERR(ZT_STATUS_UNSUPPORTED, "%s is %lld, more than the %d that BLAS (32-bit int) takes; split the work",
                  what, (long long)v, INT_MAX);
  return ZT_OK;
}

static zt_status lio_shape(zt_op_call *c) {
  zt_tensor *x = c->in[0], *w = c->in[1], *bias = c->in[2];
  if (!x || !w) return ZT_ERR(ZT_STATUS_INVALID_ARG, "input %s is NULL (only bias may be NULL)", x ? "weight" : "x");
  ZT_TRY(zt__check_float(c->op->name, x, "input x"));
  ZT_TRY(zt__check_same_dtype(c->op->name, x, w));
  if (bias) ZT_TRY(zt__check_same_dtype(c->op->name, x, bias));
  char s1[128], s2[128];
  if (x->ndim < 1 || w->ndim != 2 || w->shape[0] != x->shape[x->ndim - 1])
    return ZT_ERR(ZT_STATUS_SHAPE,
                  "x %s and weight %s do not fit: x must be (..., in) and weight (in, out) with the same in",
                  zt_shape_str(x->ndim, x->shape, s1), zt_shape_str(w->ndim, w->shape, s2));
  int64_t nin = w->shape[0], nout = w->shape[1];
  if (bias && (bias->ndim != 1 || bias->shape[0] != nout))
    return ZT_ERR(ZT_STATUS_SHAPE, "bias %s does not fit weight %s: bias must be (%lld,) (one per output)",
                  zt_shape_str(bias->ndim, bias->shape, s1), zt_shape_str(w->ndim, w->shape, s2), (long long)nout);
  ZT_TRY(check_int("the row count of x", rows_of(x->ndim, x->shape)));
  ZT_TRY(check_int("in", nin));
  ZT_TRY(check_int("out", nout));
  zt__tensor_meta *m = &c->out_meta[0];
  zt__meta_of(x, m);
  m->shape[m->ndim - 1] = nout;
  c->n_out = 1;
  return ZT_OK;
}

static zt_status lio_forward(zt_op_call *c) {
  zt_tensor *x = c->in[0], *w = c->in[1], *bias = c->in[2], *y = c->out[0];
  int64_t R = rows_of(x->ndim, x->shape), nin = w->shape[0], nout = w->shape[1];
  void *py = zt__tensor_ptr(y);
  // y (R, out) = bias (out) per row (=), then y += x (R, in) . W (in, out)
  if (bias) zt__cpu_fill_rows(y->dtype, R, nout, zt__tensor_ptr(bias), py);
  zt__cpu_gemm(y->dtype, false, false, R, nout, nin, zt__tensor_ptr(x), nin, zt__tensor_ptr(w), nout,
               bias ? 1.0 : 0.0, py, nout);
  /* dW reads x, dx reads W: save each only when the other input's grad will be needed
   * (the node's edges say which inputs get one). */
  bool dx = c->node && c->node->next[0].node, dw = c->node && c->node->next[1].node;
  int k = 0;
  c->attrs.i[LIO_SAVE_X] = c->attrs.i[LIO_SAVE_W] = -1;
  if (dw) {
    ZT_TRY(zt__op_save(c, x));
    c->attrs.i[LIO_SAVE_X] = k++;
  }
  if (dx) {
    ZT_TRY(zt__op_save(c, w));
    c->attrs.i[LIO_SAVE_W] = k++;
  }
  return ZT_OK;
}

static zt_status saved_at(zt_op_bwd *b, int64_t i, zt_tensor **out) {
  ZT_ASSERT(i >= 0); /* the edge that asks for this grad existed in forward */
  return zt__op_saved(b, (int)i, out);
}

static zt_status lio_backward(zt_op_bwd *b) {
  const zt__tensor_meta *mx = &b->in_meta[0], *mw = &b->in_meta[1];
  int64_t R = rows_of(mx->ndim, mx->shape), nin = mw->shape[0], nout = mw->shape[1];
  const zt_tensor *gy = b->grad_out[0];
  zt_dtype dt = gy->dtype;
  const void *pg = zt__tensor_ptr(gy);
  if (b->needs_input_grad[0]) {
    zt_tensor *w;
    ZT_TRY(saved_at(b, b->attrs->i[LIO_SAVE_W], &w));
    ZT_TRY(zt__op_grad_like_input(b, 0, false, &b->grad_in[0]));
    // dx (R, in) = g (R, out) . W^T (out, in)
    zt__cpu_gemm(dt, false, true, R, nin, nout, pg, nout, zt__tensor_ptr(w), nout, 0.0,
                 zt__tensor_ptr(b->grad_in[0]), nin);
  }
  if (b->needs_input_grad[1]) {
    zt_tensor *x;
    ZT_TRY(saved_at(b, b->attrs->i[LIO_SAVE_X], &x));
    ZT_TRY(zt__op_grad_like_input(b, 1, false, &b->grad_in[1]));
    // dW (in, out) = x^T (in, R) . g (R, out): one GEMM over every row of the batch
    zt__cpu_gemm(dt, true, false, nin, nout, R, zt__tensor_ptr(x), nin, pg, nout, 0.0,
                 zt__tensor_ptr(b->grad_in[1]), nout);
  }
  if (b->needs_input_grad[2]) {
    ZT_TRY(zt__op_grad_like_input(b, 2, false, &b->grad_in[2]));
    // db (out) = column sums of g (R, out)
    zt__cpu_col_sum(dt, R, nout, pg, zt__tensor_ptr(b->grad_in[2]));
  }
  return ZT_OK;
}

static const zt_op op_linear_io = {"linear_io", "LinearIoBackward", 3, 0, 0, lio_shape, lio_forward, lio_backward};

zt_status zt_linear_io(zt_tensor *x, zt_tensor *weight, zt_tensor *bias, zt_tensor **out) {
  return zt__op_run(&op_linear_io, 3, (zt_tensor *[]){x, weight, bias}, NULL, out);
}
