/* Inverted dropout from Philox blocks: element i uses word i % 4 of block offset + i / 4,
 * the layout of zt_rng_uniform_at, so the mask is a pure function of (seed, offset, i):
 * any thread count gives the same mask, and backward regenerates it instead of storing it. */
#include <math.h>

#include "core/tensor_internal.h"
#include "kernels.h"
#include "nn.h"

/* zt_rng_uniform_at maps a word w to (w >> 8) / 2^24. u >= p  <=>  (w >> 8) >= ceil(p 2^24)
 * exactly (p 2^24 is exact in double), so the mask matches it bit for bit. */
static uint32_t keep_threshold(double p) { return (uint32_t)ceil(p * 16777216.0); }

#define ZT_DEFINE_DROPOUT(T, SUF)                                                                      \
  /* x (n) -> out (n) = x * mask * scale; out may alias x */                                           \
  static void dropout_##SUF(zt_rng_state s, uint32_t thr, T scale, const T *x, T *out, int64_t n) {   \
    int64_t nb = (n + 3) / 4;                                                                          \
    _Pragma("omp parallel for schedule(static) if (n > ZT_PAR_MIN)")                                   \
    for (int64_t blk = 0; blk < nb; blk++) {                                                           \
      uint32_t w[4];                                                                                   \
      zt_philox4x32(s.seed, s.offset + (uint64_t)blk, 0, w);                                           \
      int64_t i0 = blk * 4, m = n - i0 < 4 ? n - i0 : 4;                                               \
      for (int64_t j = 0; j < m; j++) out[i0 + j] = (w[j] >> 8) >= thr ? x[i0 + j] * scale : (T)0;     \
    }                                                                                                  \
  }

ZT_DEFINE_DROPOUT(float, f32)
ZT_DEFINE_DROPOUT(double, f64)

void zt__cpu_dropout(zt_rng_state s, double p, const zt_tensor *x, zt_tensor *out) {
  int64_t n = zt_tensor_numel(x);
  if (n == 0) return;
  uint32_t thr = keep_threshold(p);
  double scale = 1.0 / (1.0 - p);
  if (x->dtype == ZT_DTYPE_F32)
    dropout_f32(s, thr, (float)scale, zt__tensor_ptr(x), zt__tensor_ptr(out), n);
  else
    dropout_f64(s, thr, scale, zt__tensor_ptr(x), zt__tensor_ptr(out), n);
}
