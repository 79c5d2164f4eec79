/* Registry entry for RMS norm over the last dim (Llama's RMSNorm), with an optional weight
 * (NULL input). Forward saves x, the per-row rstd (R = numel / C) and the weight; backward
 * is one fused kernel that skips dx and dw when they are not needed. */
#include "core/tensor_internal.h"
#include "op.h"

#define K(x) ((const zt__rms_norm_kernels *)(x)->kernels)

enum { ATTR_HAS_WEIGHT };  /* attrs.i; attrs.f[0] = eps */
enum { SAVED_X, SAVED_RSTD, SAVED_WEIGHT };

static zt_status rms_shape(zt__op_call *c) {
  zt_tensor *x = c->in[0], *w = c->in[1];
  char sw[128], sx[128];
  if (!x) return ZT_ERR(ZT_STATUS_INVALID_ARG, "x is NULL");
  ZT_TRY(zt__check_float("rms_norm", x, "x"));
  if (x->ndim == 0)
    return ZT_ERR(ZT_STATUS_SHAPE, "x is 0-d; it needs at least one dim (normalised over the last)");
  int64_t C = x->shape[x->ndim - 1];
  if (C == 0) return ZT_ERR(ZT_STATUS_SHAPE, "the last dim of x has size 0; there is nothing to normalise");
  if (!(c->attrs.f[0] >= 0))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "eps is %g; it must be >= 0 (e.g. 1e-6, config.json's rms_norm_eps)",
                  c->attrs.f[0]);
  if (w) {
    ZT_TRY(zt__check_float("rms_norm", w, "weight"));
    if (w->dtype != x->dtype)
      return ZT_ERR(ZT_STATUS_DTYPE, "weight has dtype %s but x has %s; cast one with zt_cast",
                    zt_dtype_name(w->dtype), zt_dtype_name(x->dtype));
    if (w->ndim != 1 || w->shape[0] != C)
      return ZT_ERR(ZT_STATUS_SHAPE, "weight has shape %s but x %s normalises over its last dim of %lld; "
                    "weight must have shape (%lld,)", zt_shape_str(w->ndim, w->shape, sw),
                    zt_shape_str(x->ndim, x->shape, sx), (long long)C, (long long)C);
  }
  c->attrs.i[ATTR_HAS_WEIGHT] = w != NULL;
  zt__meta_of(x, &c->out_meta[0]);
  c->n_out = 1;
  return ZT_OK;
}

static zt_status rms_forward(zt__op_call *c) {
  zt_tensor *x = c->in[0];
  if (!c->node) { /* no graph: rstd is not kept */
    K(c)->rms_norm(x, c->in[1], c->attrs.f[0], c->out[0], NULL);
    return ZT_OK;
  }
  int64_t rows = zt_tensor_numel(x) / x->shape[x->ndim - 1];
  zt_tensor *rstd = NULL;
  ZT_TRY(zt_tensor_empty(1, &rows, x->dtype, zt_tensor_device(x), &rstd));
  K(c)->rms_norm(x, c->in[1], c->attrs.f[0], c->out[0], rstd);
  zt_status s = zt__op_save(c, x);
  if (!s) s = zt__op_save(c, rstd);
  if (!s && c->in[1]) s = zt__op_save(c, c->in[1]);
  zt_tensor_free(rstd); /* the saved record holds its own reference */
  return s;
}

static zt_status rms_backward(zt__op_bwd *b) {
  const bool *need = b->needs_input_grad;
  bool has_w = b->attrs->i[ATTR_HAS_WEIGHT];
  bool want_dx = need[0], want_dw = has_w && need[1];
  if (!want_dx && !want_dw) return ZT_OK;
  zt_tensor *x, *rstd, *w = NULL, *scratch = NULL;
  ZT_TRY(zt__op_saved(b, SAVED_X, &x));
  ZT_TRY(zt__op_saved(b, SAVED_RSTD, &rstd));
  /* the weight is read for dx only: a split backward's W (dw alone) no longer has it (rms_saves_read) */
  if (has_w && want_dx) ZT_TRY(zt__op_saved(b, SAVED_WEIGHT, &w));
  zt_status s = ZT_OK;
  if (want_dx) s = zt__op_grad_like_input(b, 0, false, &b->grad_in[0]);
  if (!s && want_dw) s = zt__op_grad_like_input(b, 1, false, &b->grad_in[1]);
  if (!s && want_dw) {
    int64_t C = x->shape[x->ndim - 1];
    int64_t n = K(b)->scratch_numel(zt_tensor_numel(x) / C, C);
    s = zt_tensor_empty_tagged(1, &n, x->dtype, zt_tensor_device(x), ZT_MEM_TAG_TEMP, &scratch);
  }
  if (s) return s; /* grads already made are freed by the engine */
  K(b)->rms_norm_backward(b->grad_out[0], x, w, rstd, want_dx ? b->grad_in[0] : NULL,
                          want_dw ? b->grad_in[1] : NULL, scratch ? zt__tensor_ptr(scratch) : NULL);
  zt_tensor_free(scratch);
  return ZT_OK;
}

/* The grad of x reads x, rstd and the weight; the weight's reads x, rstd. */
static uint64_t rms_saves_read(const zt__op_attrs *a, int input) {
  (void)a;
  return input == 1 ? (1u << SAVED_X) | (1u << SAVED_RSTD) : (1u << SAVED_X) | (1u << SAVED_RSTD) | (1u << SAVED_WEIGHT);
}

static const zt__op op_rms_norm = {"rms_norm", "RmsNormBackward", 2, 0, 0, rms_shape, rms_forward, rms_backward,
                                   {[ZT_DEVICE_CPU] = &zt__cpu_rms_norm_kernels}, rms_saves_read};

zt_status zt_rms_norm(zt_tensor *x, zt_tensor *weight, double eps, zt_tensor **out) {
  zt__op_attrs at = {0};
  at.f[0] = eps;
  return zt__op_run(&op_rms_norm, 2, (zt_tensor *[]){x, weight}, &at, out);
}
