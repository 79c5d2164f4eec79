/* Broadcasting binary kernels: out (shape S) = a (broadcastable to S) op b (same).
 * Same-shape inputs take a flat vectorisable loop; otherwise rows of the last dim are
 * processed with per-input strides (0 along broadcast dims). */
#include "kernels.h"

#define ZT_DEFINE_BINARY(T, SUF)                                                                    \
  static inline T binop_##SUF(zt_binop op, T x, T y) {                                              \
    switch (op) {                                                                                   \
    case ZT_BINOP_ADD: return x + y;                                                                \
    case ZT_BINOP_SUB: return x - y;                                                                \
    case ZT_BINOP_MUL: return x * y;                                                                \
    default: return x / y;                                                                          \
    }                                                                                               \
  }                                                                                                 \
  static void flat_##SUF(zt_binop op, const T *restrict a, const T *restrict b, T *restrict o, int64_t n) { \
    switch (op) {                                                                                   \
    case ZT_BINOP_ADD:                                                                              \
      _Pragma("omp parallel for simd schedule(static) if (n > ZT_PAR_MIN)") for (int64_t i = 0; i < n; i++) o[i] = a[i] + b[i]; \
      break;                                                                                        \
    case ZT_BINOP_SUB:                                                                              \
      _Pragma("omp parallel for simd schedule(static) if (n > ZT_PAR_MIN)") for (int64_t i = 0; i < n; i++) o[i] = a[i] - b[i]; \
      break;                                                                                        \
    case ZT_BINOP_MUL:                                                                              \
      _Pragma("omp parallel for simd schedule(static) if (n > ZT_PAR_MIN)") for (int64_t i = 0; i < n; i++) o[i] = a[i] * b[i]; \
      break;                                                                                        \
    default:                                                                                        \
      _Pragma("omp parallel for simd schedule(static) if (n > ZT_PAR_MIN)") for (int64_t i = 0; i < n; i++) o[i] = a[i] / b[i]; \
      break;                                                                                        \
    }                                                                                               \
  }                                                                                                 \
  static void bcast_##SUF(zt_binop op, const T *a, const int64_t *sa, const T *b, const int64_t *sb, T *o, \
                          const int64_t *shape, int nd) {                                           \
    int64_t inner = nd ? shape[nd - 1] : 1, n = 1;                                                  \
    for (int d = 0; d < nd; d++) n *= shape[d];                                                     \
    int64_t rows = inner ? n / inner : 0, ia = nd ? sa[nd - 1] : 0, ib = nd ? sb[nd - 1] : 0;       \
    _Pragma("omp parallel for schedule(static) if (n > ZT_PAR_MIN)")                                \
    for (int64_t r = 0; r < rows; r++) {                                                            \
      int64_t oa = 0, ob = 0, rem = r;                                                              \
      for (int d = nd - 2; d >= 0; d--) {                                                           \
        int64_t k = rem % shape[d];                                                                 \
        rem /= shape[d];                                                                            \
        oa += k * sa[d];                                                                            \
        ob += k * sb[d];                                                                            \
      }                                                                                             \
      T *orow = o + r * inner;                                                                      \
      for (int64_t j = 0; j < inner; j++) orow[j] = binop_##SUF(op, a[oa + j * ia], b[ob + j * ib]); \
    }                                                                                               \
  }

ZT_DEFINE_BINARY(float, f32)
ZT_DEFINE_BINARY(double, f64)

/* Strides of t (contiguous) seen from a broadcast shape of nd dims (0 on broadcast dims). */
static void bcast_strides(const zt_tensor *t, int nd, int64_t *st) {
  int off = nd - t->ndim;
  int64_t s = 1;
  for (int d = nd - 1; d >= 0; d--) {
    int td = d - off;
    if (td < 0) {
      st[d] = 0;
      continue;
    }
    st[d] = t->shape[td] == 1 ? 0 : s;
    s *= t->shape[td];
  }
}

void zt__cpu_binary(zt_binop op, const zt_tensor *a, const zt_tensor *b, zt_tensor *out) {
  int64_t n = zt_tensor_numel(out);
  bool same = zt_shape_equal(a->ndim, a->shape, out->ndim, out->shape) &&
              zt_shape_equal(b->ndim, b->shape, out->ndim, out->shape);
  int64_t sa[ZT_MAX_DIMS], sb[ZT_MAX_DIMS];
  if (!same) {
    bcast_strides(a, out->ndim, sa);
    bcast_strides(b, out->ndim, sb);
  }
  if (out->dtype == ZT_DTYPE_F32) {
    if (same)
      flat_f32(op, zt__tensor_ptr(a), zt__tensor_ptr(b), zt__tensor_ptr(out), n);
    else
      bcast_f32(op, zt__tensor_ptr(a), sa, zt__tensor_ptr(b), sb, zt__tensor_ptr(out), out->shape, out->ndim);
  } else {
    ZT_ASSERT(out->dtype == ZT_DTYPE_F64);
    if (same)
      flat_f64(op, zt__tensor_ptr(a), zt__tensor_ptr(b), zt__tensor_ptr(out), n);
    else
      bcast_f64(op, zt__tensor_ptr(a), sa, zt__tensor_ptr(b), sb, zt__tensor_ptr(out), out->shape, out->ndim);
  }
}
