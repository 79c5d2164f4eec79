/* Rotary position embedding kernel, Hugging Face's rotate-half layout: rows (one position
 * of one sequence) in parallel, each element computed from its own inputs, so results do
 * not depend on the thread count. The backward is the same rotation by minus the angles. */
#include <string.h>

#include "core/tensor_internal.h"
#include "kernels.h"
#include "nn.h"

#define ZT_DEFINE_ROPE(T, SUF)                                                                               \
  /* x (N, T, W) -> o (N, T, W) =; cs sn (P, D/2); heads [0, n_rot) rotated, the rest copied */              \
  static void rope_##SUF(const T *restrict x, const T *restrict cs, const T *restrict sn, T *restrict o,   \
                         int64_t N, int64_t Tn, int64_t W, int64_t D, int64_t off, int64_t n_rot, bool inv) { \
    const int64_t half = D / 2, R = N * Tn, rw = n_rot * D;                                                  \
    _Pragma("omp parallel for schedule(static) if (R * W > ZT_PAR_MIN)")                                     \
    for (int64_t r = 0; r < R; r++) {                                                                        \
      const T *restrict c = cs + (off + r % Tn) * half, *restrict s = sn + (off + r % Tn) * half;            \
      const T *restrict xr = x + r * W;                                                                      \
      T *restrict orow = o + r * W;                                                                          \
      for (int64_t h0 = 0; h0 < rw; h0 += D) {                                                               \
        const T *restrict a = xr + h0, *restrict b = a + half;                                               \
        T *restrict oa = orow + h0, *restrict ob = oa + half;                                                \
        if (!inv) {                                                                                          \
          _Pragma("omp simd")                                                                                \
          for (int64_t i = 0; i < half; i++) {                                                               \
            oa[i] = a[i] * c[i] - b[i] * s[i];                                                               \
            ob[i] = b[i] * c[i] + a[i] * s[i];                                                               \
          }                                                                                                  \
        } else {                                                                                             \
          _Pragma("omp simd")                                                                                \
          for (int64_t i = 0; i < half; i++) {                                                               \
            oa[i] = a[i] * c[i] + b[i] * s[i];                                                               \
            ob[i] = b[i] * c[i] - a[i] * s[i];                                                               \
          }                                                                                                  \
        }                                                                                                    \
      }                                                                                                      \
      if (rw < W) memcpy(orow + rw, xr + rw, sizeof(T) * (size_t)(W - rw));                                 \
    }                                                                                                        \
  }

ZT_DEFINE_ROPE(float, f32)
ZT_DEFINE_ROPE(double, f64)

void zt__cpu_rope(const zt_tensor *x, const zt_tensor *cos, const zt_tensor *sin, int64_t pos_offset, int64_t n_rot,
                  bool inverse, zt_tensor *out) {
  const int64_t W = x->shape[x->ndim - 1], Tn = x->shape[x->ndim - 2], D = 2 * cos->shape[1];
  const int64_t N = W * Tn != 0 ? zt_tensor_numel(x) / (W * Tn) : 0;
  if (x->dtype == ZT_DTYPE_F32)
    rope_f32(zt__tensor_ptr(x), zt__tensor_ptr(cos), zt__tensor_ptr(sin), zt__tensor_ptr(out), N, Tn, W, D,
             pos_offset, n_rot, inverse);
  else
    rope_f64(zt__tensor_ptr(x), zt__tensor_ptr(cos), zt__tensor_ptr(sin), zt__tensor_ptr(out), N, Tn, W, D,
             pos_offset, n_rot, inverse);
}
