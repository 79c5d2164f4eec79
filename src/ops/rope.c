/* Registry entry for rotary position embeddings (Hugging Face's rotate-half layout) and the
 * builder of their cos/sin tables, with Llama 3's rope scaling. cos and sin are inputs
 * that get no grad; forward saves the rows of them it used (backward rotates the grad by
 * minus the angles) and nothing else. The table is computed in f64 on the host and copied to the device through
 * the backend, like any tensor made from data. */
#include <math.h>

#include "core/status_internal.h"
#include "core/tensor_internal.h"
#include "op.h"

#define K(x) ((const zt__rope_kernels *)(x)->kernels)

enum { ATTR_OFFSET, ATTR_N_ROT }; /* attrs.i */

static zt_status rope_shape(zt__op_call *c) {
  zt_tensor *x = c->in[0], *cs = c->in[1], *sn = c->in[2];
  char s1[128], s2[128];
  if (!x || !cs || !sn) return ZT_ERR(ZT_STATUS_INVALID_ARG, "x, cos and sin are required (one is NULL)");
  ZT_TRY(zt__check_float("rope", x, "x"));
  ZT_TRY(zt__check_same_dtype("rope", x, cs));
  ZT_TRY(zt__check_same_dtype("rope", x, sn));
  if (x->ndim < 2)
    return ZT_ERR(ZT_STATUS_SHAPE, "x must be (..., T, n_head * head_dim), at least 2-D; got shape %s",
                  zt_shape_str(x->ndim, x->shape, s1));
  if (cs->ndim != 2 || !zt_shape_equal(cs->ndim, cs->shape, sn->ndim, sn->shape) || cs->shape[1] < 1)
    return ZT_ERR(ZT_STATUS_SHAPE, "cos and sin must both be (positions, head_dim / 2) (zt_rope_table builds "
                  "them); got %s and %s", zt_shape_str(cs->ndim, cs->shape, s1), zt_shape_str(sn->ndim, sn->shape, s2));
  int64_t W = x->shape[x->ndim - 1], T = x->shape[x->ndim - 2], D = 2 * cs->shape[1], P = cs->shape[0];
  if (W % D != 0)
    return ZT_ERR(ZT_STATUS_SHAPE, "x's last dim %lld is not a multiple of head_dim %lld (twice the tables' last "
                  "dim); x must hold whole heads", (long long)W, (long long)D);
  int64_t n_rot = c->attrs.i[ATTR_N_ROT], heads = W / D;
  if (n_rot < 0) n_rot = heads;
  if (n_rot > heads)
    return ZT_ERR(ZT_STATUS_SHAPE, "n_rot_heads = %lld but x (shape %s) holds only %lld heads of %lld",
                  (long long)n_rot, zt_shape_str(x->ndim, x->shape, s1), (long long)heads, (long long)D);
  int64_t off = c->attrs.i[ATTR_OFFSET];
  if (off < 0 || off + T > P)
    return ZT_ERR(ZT_STATUS_SHAPE, "positions %lld .. %lld (pos_offset %lld, %lld rows) are outside the tables' "
                  "%lld positions; build the tables for at least pos_offset + T positions",
                  (long long)off, (long long)(off + T - 1), (long long)off, (long long)T, (long long)P);
  c->attrs.i[ATTR_N_ROT] = n_rot;
  zt__meta_of(x, &c->out_meta[0]);
  c->n_out = 1;
  return ZT_OK;
}

/* Saves only the rows of the tables this call used, [pos_offset, pos_offset + T) (views: no
 * copy unless a saved-tensor hook packs them), so backward reads them from row 0. */
static zt_status rope_forward(zt__op_call *c) {
  const int64_t off = c->attrs.i[ATTR_OFFSET], T = c->in[0]->shape[c->in[0]->ndim - 2];
  K(c)->rope(c->in[0], c->in[1], c->in[2], off, c->attrs.i[ATTR_N_ROT], false, c->out[0]);
  if (!c->node) return ZT_OK;
  zt_tensor *rows[2] = {NULL, NULL};
  zt_status s = ZT_OK;
  for (int i = 0; i < 2 && !s; i++) {
    s = zt_narrow(c->in[1 + i], 0, off, T, &rows[i]);
    if (!s) s = zt__op_save(c, rows[i]);
  }
  zt_tensor_free(rows[0]);
  zt_tensor_free(rows[1]);
  return s;
}

static zt_status rope_backward(zt__op_bwd *b) {
  if (!b->needs_input_grad[0]) return ZT_OK;
  zt_tensor *saved[2], *tmp[2] = {NULL, NULL}, *use[2];
  zt_status s = ZT_OK;
  for (int i = 0; i < 2 && !s; i++) {
    s = zt__op_saved(b, i, &saved[i]);
    use[i] = saved[i];
    /* saved-tensor hooks may hand back any layout */
    if (!s && !zt_tensor_is_contiguous(saved[i])) {
      s = zt__make_contiguous(saved[i], &tmp[i]);
      use[i] = tmp[i];
    }
  }
  if (!s) s = zt__op_grad_like_input(b, 0, false, &b->grad_in[0]);
  if (!s) K(b)->rope(b->grad_out[0], use[0], use[1], 0, b->attrs->i[ATTR_N_ROT], true, b->grad_in[0]);
  zt_tensor_free(tmp[0]);
  zt_tensor_free(tmp[1]);
  return s;
}

/* nondiff_inputs: cos and sin (bits 1 and 2) get no grad */
static const zt__op op_rope = {"rope", "RopeBackward", 3, 0, (1u << 1) | (1u << 2), rope_shape, rope_forward,
                               rope_backward, {[ZT_DEVICE_CPU] = &zt__cpu_rope_kernels}, NULL};

zt_status zt_rope(zt_tensor *x, zt_tensor *cos, zt_tensor *sin, int64_t pos_offset, int64_t n_rot_heads,
                  zt_tensor **out) {
  zt__op_attrs at = {0};
  at.i[ATTR_OFFSET] = pos_offset;
  at.i[ATTR_N_ROT] = n_rot_heads;
  return zt__op_run(&op_rope, 3, (zt_tensor *[]){x, cos, sin}, &at, out);
}

/* ------------------------------------------------------------------ tables */
/* Inverse frequency i of half, with transformers' llama3 adjustment when asked. */
static double inv_freq(int64_t i, int64_t head_dim, double theta, const zt_rope_scaling *sc) {
  double f = 1.0 / pow(theta, (double)(2 * i) / (double)head_dim);
  if (!sc || sc->type != ZT_ROPE_SCALING_LLAMA3) return f;
  const double orig = (double)sc->original_max_position_embeddings, wavelen = 2 * M_PI / f;
  if (wavelen < orig / sc->high_freq_factor) return f;               /* high frequencies: kept */
  if (wavelen > orig / sc->low_freq_factor) return f / sc->factor;   /* low frequencies: scaled */
  double s = (orig / wavelen - sc->low_freq_factor) / (sc->high_freq_factor - sc->low_freq_factor);
  return (1 - s) * f / sc->factor + s * f;                           /* between: blended */
}

static zt_status check_table_args(int64_t head_dim, int64_t n_pos, double theta, const zt_rope_scaling *sc,
                                  zt_dtype dtype) {
  if (head_dim <= 0 || head_dim % 2)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "head_dim is %lld; rope needs a positive even head size",
                  (long long)head_dim);
  if (n_pos < 0) return ZT_ERR(ZT_STATUS_INVALID_ARG, "n_pos is %lld; it must be >= 0", (long long)n_pos);
  if (!(theta > 0)) return ZT_ERR(ZT_STATUS_INVALID_ARG, "theta is %g; rope_theta must be > 0", theta);
  if (dtype != ZT_DTYPE_F32 && dtype != ZT_DTYPE_F64)
    return ZT_ERR(ZT_STATUS_DTYPE, "rope tables are f32 or f64 (the dtype of the q and k they rotate), not %s",
                  zt_dtype_name(dtype));
  if (!sc || sc->type == ZT_ROPE_SCALING_NONE) return ZT_OK;
  if (sc->type != ZT_ROPE_SCALING_LLAMA3)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "unknown rope scaling type %d; supported: none and llama3", (int)sc->type);
  if (!(sc->factor > 0) || sc->original_max_position_embeddings <= 0 || !(sc->low_freq_factor > 0) ||
      !(sc->low_freq_factor < sc->high_freq_factor))
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "llama3 rope scaling needs factor > 0, original_max_position_embeddings > 0 and 0 < "
                  "low_freq_factor < high_freq_factor; got factor %g, original_max_position_embeddings %lld, "
                  "low_freq_factor %g, high_freq_factor %g",
                  sc->factor, (long long)sc->original_max_position_embeddings, sc->low_freq_factor,
                  sc->high_freq_factor);
  return ZT_OK;
}

zt_status zt_rope_table(int64_t head_dim, int64_t n_pos, double theta, const zt_rope_scaling *scaling, zt_dtype dtype,
                        zt_device dev, zt_tensor **cos_out, zt_tensor **sin_out) {
  if (!cos_out || !sin_out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "cos and sin (the outputs) must not be NULL");
  ZT_TRY(check_table_args(head_dim, n_pos, theta, scaling, dtype));
  const int64_t half = head_dim / 2, n = n_pos * half, shape[2] = {n_pos, half};
  size_t bytes = sizeof(double) * (size_t)(2 * n + half + 1);
  void *buf = NULL;
  ZT_TRY(zt_mem_alloc(bytes, ZT_CPU, ZT_MEM_TAG_TEMP, &buf));
  double *c = buf, *s = c + n, *f = s + n;
  for (int64_t i = 0; i < half; i++) f[i] = inv_freq(i, head_dim, theta, scaling);
  for (int64_t p = 0; p < n_pos; p++)
    for (int64_t i = 0; i < half; i++) {
      double a = (double)p * f[i];
      c[p * half + i] = cos(a);
      s[p * half + i] = sin(a);
    }
  zt_tensor *hc = NULL, *hs = NULL, *dc = NULL, *ds = NULL;
  zt_status st = zt_tensor_from_data(2, shape, ZT_DTYPE_F64, c, &hc);
  if (!st) st = zt_tensor_from_data(2, shape, ZT_DTYPE_F64, s, &hs);
  zt_mem_free(buf, bytes, ZT_CPU, ZT_MEM_TAG_TEMP);
  if (!st) st = zt_tensor_empty(2, shape, dtype, dev, &dc);
  if (!st) st = zt_tensor_empty(2, shape, dtype, dev, &ds);
  if (!st) st = zt_tensor_copy_(dc, hc);
  if (!st) st = zt_tensor_copy_(ds, hs);
  zt_tensor_free(hc);
  zt_tensor_free(hs);
  if (st) {
    zt_tensor_free(dc);
    zt_tensor_free(ds);
    return st;
  }
  *cos_out = dc;
  *sin_out = ds;
  return ZT_OK;
}
