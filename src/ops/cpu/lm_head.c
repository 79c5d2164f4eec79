/* Kernels of the fused output layer + cross-entropy: per row of a chunk of logits, its
 * max, the sum of exponentials (accumulated in f64 across blocks), the loss, and in place
 * scale * (softmax - onehot). A row (V floats, 200 KB for GPT-2) stays in L2 across its
 * three passes. f32 uses a vectorisable exp (Cody-Waite reduction, degree-7 polynomial,
 * about 1 ulp); f64 uses libm. */
#include <math.h>
#include <string.h>

#include "kernels.h"
#include "lm_head.h"

/* Elements summed in the row's dtype before adding into the f64 total. */
#define BLOCK 1024

/* exp(x) for f32 in a form GCC vectorises: x = n ln2 + r with |r| <= ln2 / 2 (ln2 split
 * in a high part exact in few bits and a low correction), e^r by its Taylor series to r^7
 * (truncation error below 1e-8 relative), times 2^n built in the exponent bits. Inputs
 * here are <= 0 (x - max); below -87 the result flushes to 0, and NaN stays NaN. */
static inline float exp_f32(float x) {
  float xc = x < -87.0f ? -87.0f : x;
  xc = xc > 88.0f ? 88.0f : xc;
  float n = (xc * 1.4426950408889634f + 12582912.0f) - 12582912.0f; /* round(x / ln2) */
  float r = xc - n * 0.693145751953125f;
  r = r - n * 1.428606820309417e-6f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t bits = ((int32_t)n + 127) * (1 << 23);
  float two_n;
  memcpy(&two_n, &bits, sizeof two_n);
  float y = p * two_n;
  y = x < -87.0f ? 0.0f : y;
  return x == x ? y : x;
}

static inline int64_t target_at(const void *t, bool i32, int64_t r) {
  return i32 ? (int64_t)((const int32_t *)t)[r] : ((const int64_t *)t)[r];
}

#define ZT_DEFINE_LM_HEAD(T, SUF, EXP)                                                                              \
  /* row (V): loss of the row against target t; when grad, row (=) scale*(softmax - onehot(t)) */                  \
  static double row_##SUF(T *restrict row, int64_t V, int64_t t, bool grad, T scale) {                              \
    T m = -INFINITY;                                                                                                \
    _Pragma("omp simd reduction(max : m)") for (int64_t j = 0; j < V; j++) m = row[j] > m ? row[j] : m;             \
    T xt = row[t];                                                                                                  \
    double s = 0;                                                                                                   \
    for (int64_t j0 = 0; j0 < V; j0 += BLOCK) {                                                                     \
      int64_t w = V - j0 < BLOCK ? V - j0 : BLOCK;                                                                  \
      T *p = row + j0;                                                                                              \
      T bs = 0;                                                                                                     \
      if (grad) {                                                                                                   \
        _Pragma("omp simd reduction(+ : bs)") for (int64_t j = 0; j < w; j++) {                                     \
          T e = EXP(p[j] - m);                                                                                      \
          p[j] = e;                                                                                                 \
          bs += e;                                                                                                  \
        }                                                                                                           \
      } else {                                                                                                      \
        _Pragma("omp simd reduction(+ : bs)") for (int64_t j = 0; j < w; j++) bs += EXP(p[j] - m);                  \
      }                                                                                                             \
      s += (double)bs;                                                                                              \
    }                                                                                                               \
    if (grad) {                                                                                                     \
      T inv = (T)((double)scale / s);                                                                               \
      _Pragma("omp simd") for (int64_t j = 0; j < V; j++) row[j] *= inv;                                            \
      row[t] -= scale;                                                                                              \
    }                                                                                                               \
    return (double)m + log(s) - (double)xt;                                                                         \
  }                                                                                                                 \
                                                                                                                    \
  /* logits (n, V) (grad: = in place), targets (n), loss (n) (=) */                                                 \
  static void chunk_##SUF(T *restrict x, const void *tg, bool i32, int64_t n, int64_t V, int64_t ignore, bool grad, \
                          T scale, double *restrict loss) {                                                         \
    _Pragma("omp parallel for schedule(static) if (n * V > ZT_PAR_MIN)")                                            \
    for (int64_t r = 0; r < n; r++) {                                                                               \
      int64_t t = target_at(tg, i32, r);                                                                            \
      T *row = x + r * V;                                                                                           \
      if (t == ignore) {                                                                                            \
        loss[r] = 0;                                                                                                \
        if (grad) memset(row, 0, sizeof(T) * (size_t)V);                                                            \
        continue;                                                                                                   \
      }                                                                                                             \
      loss[r] = row_##SUF(row, V, t, grad, scale);                                                                  \
    }                                                                                                               \
  }                                                                                                                 \
                                                                                                                    \
  static void scale_##SUF(int64_t n, T s, const T *restrict x, T *restrict y) {                                    \
    _Pragma("omp parallel for simd schedule(static) if (n > ZT_PAR_MIN)")                                          \
    for (int64_t i = 0; i < n; i++) y[i] = s * x[i];                                                                \
  }

ZT_DEFINE_LM_HEAD(float, f32, exp_f32)
ZT_DEFINE_LM_HEAD(double, f64, exp)

void zt__cpu_lm_head_chunk(zt_dtype dt, void *logits, const void *targets, bool tgt_i32, int64_t n, int64_t V,
                           int64_t ignore, bool grad, double scale, double *loss) {
  if (n == 0) return;
  if (dt == ZT_DTYPE_F32)
    chunk_f32(logits, targets, tgt_i32, n, V, ignore, grad, (float)scale, loss);
  else
    chunk_f64(logits, targets, tgt_i32, n, V, ignore, grad, scale, loss);
}

void zt__cpu_scale(zt_dtype dt, int64_t n, double s, const void *x, void *y) {
  if (dt == ZT_DTYPE_F32)
    scale_f32(n, (float)s, x, y);
  else
    scale_f64(n, s, x, y);
}
