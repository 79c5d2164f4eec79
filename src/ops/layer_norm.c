/* Registry entry for layer norm over the last dim, with optional weight and bias (NULL
 * inputs). Forward saves x, the per-row mean and rstd (R = numel / C each) and the weight;
 * backward is one fused kernel that skips dx, dw and db when they are not needed. */
#include "core/tensor_internal.h"
#include "op.h"

#define K(x) ((const zt__layer_norm_kernels *)(x)->kernels)

enum { ATTR_HAS_WEIGHT, ATTR_HAS_BIAS };  /* attrs.i; attrs.f[0] = eps */
enum { SAVED_X, SAVED_MEAN, SAVED_RSTD, SAVED_WEIGHT };

static zt_status check_param(const zt_tensor *x, const zt_tensor *p, const char *what) {
  ZT_TRY(zt__check_float("layer_norm", p, what));
  if (p->dtype != x->dtype)
    return ZT_ERR(ZT_STATUS_DTYPE, "%s has dtype %s but x has %s; cast one with zt_cast", what,
                  zt_dtype_name(p->dtype), zt_dtype_name(x->dtype));
  int64_t C = x->shape[x->ndim - 1];
  if (p->ndim != 1 || p->shape[0] != C) {
    char sp[128], sx[128];
    return ZT_ERR(ZT_STATUS_SHAPE, "%s has shape %s but x %s normalises over its last dim of %lld; "
                  "%s must have shape (%lld,)", what, zt_shape_str(p->ndim, p->shape, sp),
                  zt_shape_str(x->ndim, x->shape, sx), (long long)C, what, (long long)C);
  }
  return ZT_OK;
}

static zt_status ln_shape(zt__op_call *c) {
  zt_tensor *x = c->in[0], *w = c->in[1], *b = c->in[2];
  if (!x) return ZT_ERR(ZT_STATUS_INVALID_ARG, "x is NULL");
  ZT_TRY(zt__check_float("layer_norm", x, "x"));
  if (x->ndim == 0)
    return ZT_ERR(ZT_STATUS_SHAPE, "x is 0-d; it needs at least one dim (normalised over the last)");
  if (x->shape[x->ndim - 1] == 0)
    return ZT_ERR(ZT_STATUS_SHAPE, "the last dim of x has size 0; there is nothing to normalise");
  if (!(c->attrs.f[0] >= 0))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "eps is %g; it must be >= 0 (e.g. 1e-5)", c->attrs.f[0]);
  if (w) ZT_TRY(check_param(x, w, "weight"));
  if (b) ZT_TRY(check_param(x, b, "bias"));
  c->attrs.i[ATTR_HAS_WEIGHT] = w != NULL;
  c->attrs.i[ATTR_HAS_BIAS] = b != NULL;
  zt__meta_of(x, &c->out_meta[0]);
  c->n_out = 1;
  return ZT_OK;
}

static zt_status ln_forward(zt__op_call *c) {
  zt_tensor *x = c->in[0];
  if (!c->node) { /* no graph: mean and rstd are not kept */
    K(c)->layer_norm(x, c->in[1], c->in[2], c->attrs.f[0], c->out[0], NULL, NULL);
    return ZT_OK;
  }
  int64_t rows = zt_tensor_numel(x) / x->shape[x->ndim - 1];
  zt_tensor *mean = NULL, *rstd = NULL;
  zt_status s = zt_tensor_empty(1, &rows, x->dtype, zt_tensor_device(x), &mean);
  if (!s) s = zt_tensor_empty(1, &rows, x->dtype, zt_tensor_device(x), &rstd);
  if (!s) {
    K(c)->layer_norm(x, c->in[1], c->in[2], c->attrs.f[0], c->out[0], mean, rstd);
    s = zt__op_save(c, x);
  }
  if (!s) s = zt__op_save(c, mean);
  if (!s) s = zt__op_save(c, rstd);
  if (!s && c->in[1]) s = zt__op_save(c, c->in[1]);
  /* the saved records hold their own references */
  zt_tensor_free(mean);
  zt_tensor_free(rstd);
  return s;
}

static zt_status ln_backward(zt__op_bwd *b) {
  const bool *need = b->needs_input_grad;
  bool has_w = b->attrs->i[ATTR_HAS_WEIGHT], has_b = b->attrs->i[ATTR_HAS_BIAS];
  bool want_dx = need[0], want_dw = has_w && need[1], want_db = has_b && need[2];
  if (!want_dx && !want_dw && !want_db) return ZT_OK;
  zt_tensor *x, *mean, *rstd, *w = NULL, *scratch = NULL;
  ZT_TRY(zt__op_saved(b, SAVED_X, &x));
  ZT_TRY(zt__op_saved(b, SAVED_MEAN, &mean));
  ZT_TRY(zt__op_saved(b, SAVED_RSTD, &rstd));
  if (has_w) ZT_TRY(zt__op_saved(b, SAVED_WEIGHT, &w));
  zt_status s = ZT_OK;
  if (want_dx) s = zt__op_grad_like_input(b, 0, false, &b->grad_in[0]);
  if (!s && want_dw) s = zt__op_grad_like_input(b, 1, false, &b->grad_in[1]);
  if (!s && want_db) s = zt__op_grad_like_input(b, 2, false, &b->grad_in[2]);
  if (!s && (want_dw || want_db)) {
    int64_t C = x->shape[x->ndim - 1];
    int64_t n = K(b)->scratch_numel(zt_tensor_numel(x) / C, C);
    s = zt_tensor_empty_tagged(1, &n, x->dtype, zt_tensor_device(x), ZT_MEM_TAG_TEMP, &scratch);
  }
  if (s) return s; /* grads already made are freed by the engine */
  K(b)->layer_norm_backward(b->grad_out[0], x, w, mean, rstd, want_dx ? b->grad_in[0] : NULL,
                            want_dw ? b->grad_in[1] : NULL, want_db ? b->grad_in[2] : NULL,
                            scratch ? zt__tensor_ptr(scratch) : NULL);
  zt_tensor_free(scratch);
  return ZT_OK;
}

static const zt__op op_layer_norm = {"layer_norm", "LayerNormBackward", 3, 0, 0, ln_shape, ln_forward, ln_backward, {[ZT_DEVICE_CPU] = &zt__cpu_layer_norm_kernels}, NULL};

zt_status zt_layer_norm(zt_tensor *x, zt_tensor *weight, zt_tensor *bias, double eps, zt_tensor **out) {
  zt__op_attrs at = {0};
  at.f[0] = eps;
  return zt__op_run(&op_layer_norm, 3, (zt_tensor *[]){x, weight, bias}, &at, out);
}
