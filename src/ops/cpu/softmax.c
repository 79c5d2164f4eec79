/* Softmax-family kernels. Rows (inner == 1) are streamed in L1-sized chunks: a chunk's
 * max rescales the running sum (online softmax), then its exponentials are summed while
 * the chunk is still in cache, so the logits are read from memory once per pass. Other
 * dims are done a block of columns at a time so the loops stay contiguous. */
#include <math.h>
#include <string.h>

#include "core/tensor_internal.h"
#include "fast_math.h"
#include "kernels.h"
#include "softmax.h"

/* Chunk of a row kept in L1 between its max and its exp-sum (2 KiB of f32). */
#define CHUNK 512
/* Columns handled together when the softmax dim is not the last one. */
#define COLS 64

static inline int64_t load_target(const void *t, bool i32, int64_t r) {
  return i32 ? (int64_t)((const int32_t *)t)[r] : ((const int64_t *)t)[r];
}

/* ROW_LSE: logsumexp of a contiguous row, one pass over memory. A NaN anywhere gives NaN. */
#define ZT_DEFINE_SOFTMAX(T, SUF, EXP)                                                                               \
  static double row_max_sum_##SUF(const T *restrict x, int64_t n, T *max) {                                          \
    T m = -INFINITY;                                                                                                 \
    double s = 0;                                                                                                    \
    for (int64_t c0 = 0; c0 < n; c0 += CHUNK) {                                                                      \
      int64_t w = n - c0 < CHUNK ? n - c0 : CHUNK;                                                                   \
      const T *p = x + c0;                                                                                           \
      T cm = -INFINITY;                                                                                              \
      _Pragma("omp simd reduction(max : cm)") for (int64_t j = 0; j < w; j++) cm = p[j] > cm ? p[j] : cm;            \
      if (cm > m) {                                                                                                  \
        s *= exp((double)m - (double)cm);                                                                            \
        m = cm;                                                                                                      \
      }                                                                                                              \
      T cs = 0;                                                                                                      \
      _Pragma("omp simd reduction(+ : cs)") for (int64_t j = 0; j < w; j++) cs += EXP(p[j] - m);                     \
      s += (double)cs;                                                                                               \
    }                                                                                                                \
    *max = m;                                                                                                        \
    return s;                                                                                                        \
  }                                                                                                                  \
  static double row_lse_##SUF(const T *restrict x, int64_t n) {                                                      \
    T m;                                                                                                             \
    double s = row_max_sum_##SUF(x, n, &m);                                                                          \
    return (double)m + log(s);                                                                                       \
  }                                                                                                                  \
                                                                                                                     \
  /* x, y (outer, n, inner) */                                                                                       \
  static void softmax_##SUF(const T *restrict x, int64_t outer, int64_t n, int64_t inner, bool lg,                   \
                            T *restrict y) {                                                                         \
    if (inner == 1) {                                                                                                \
      _Pragma("omp parallel for schedule(static) if (outer * n > ZT_PAR_MIN)")                                       \
      for (int64_t o = 0; o < outer; o++) {                                                                          \
        const T *xr = x + o * n;                                                                                     \
        T *yr = y + o * n;                                                                                           \
        T m;                                                                                                         \
        double s = row_max_sum_##SUF(xr, n, &m);                                                                     \
        /* x - m is exact-ish (m is an element): better than exp(x - lse) with lse rounded */                        \
        if (lg) {                                                                                                    \
          T ls = (T)log(s);                                                                                          \
          _Pragma("omp simd") for (int64_t j = 0; j < n; j++) yr[j] = (xr[j] - m) - ls;                              \
        } else {                                                                                                     \
          T inv = (T)(1.0 / s);                                                                                      \
          _Pragma("omp simd") for (int64_t j = 0; j < n; j++) yr[j] = EXP(xr[j] - m) * inv;                          \
        }                                                                                                            \
      }                                                                                                              \
      return;                                                                                                        \
    }                                                                                                                \
    int64_t nchunks = (inner + COLS - 1) / COLS, ntasks = outer * nchunks;                                           \
    _Pragma("omp parallel for schedule(static) if (outer * n * inner > ZT_PAR_MIN)")                                 \
    for (int64_t t = 0; t < ntasks; t++) {                                                                           \
      int64_t o = t / nchunks, c0 = (t % nchunks) * COLS, w = inner - c0 < COLS ? inner - c0 : COLS;                 \
      const T *xb = x + o * n * inner + c0;                                                                          \
      T *yb = y + o * n * inner + c0;                                                                                \
      T m[COLS], l[COLS]; /* l: log(sum) for log_softmax, 1 / sum for softmax */                                     \
      double s[COLS];                                                                                                \
      for (int64_t j = 0; j < w; j++) {                                                                              \
        m[j] = -INFINITY;                                                                                            \
        s[j] = 0;                                                                                                    \
      }                                                                                                              \
      for (int64_t k = 0; k < n; k++)                                                                                \
        for (int64_t j = 0; j < w; j++) m[j] = xb[k * inner + j] > m[j] ? xb[k * inner + j] : m[j];                  \
      for (int64_t k = 0; k < n; k++)                                                                                \
        for (int64_t j = 0; j < w; j++) s[j] += (double)EXP(xb[k * inner + j] - m[j]);                               \
      for (int64_t j = 0; j < w; j++) l[j] = (T)(lg ? log(s[j]) : 1.0 / s[j]);                                       \
      for (int64_t k = 0; k < n; k++) {                                                                              \
        const T *xr = xb + k * inner;                                                                                \
        T *yr = yb + k * inner;                                                                                      \
        if (lg)                                                                                                      \
          for (int64_t j = 0; j < w; j++) yr[j] = (xr[j] - m[j]) - l[j];                                             \
        else                                                                                                         \
          for (int64_t j = 0; j < w; j++) yr[j] = EXP(xr[j] - m[j]) * l[j];                                          \
      }                                                                                                              \
    }                                                                                                                \
  }                                                                                                                  \
                                                                                                                     \
  /* y, g, gx (outer, n, inner) */                                                                                   \
  static void softmax_bwd_##SUF(const T *restrict y, const T *restrict g, int64_t outer, int64_t n,                  \
                                int64_t inner, bool lg, T *restrict gx) {                                            \
    if (inner == 1) {                                                                                                \
      _Pragma("omp parallel for schedule(static) if (outer * n > ZT_PAR_MIN)")                                       \
      for (int64_t o = 0; o < outer; o++) {                                                                          \
        const T *yr = y + o * n, *gr = g + o * n;                                                                    \
        T *dr = gx + o * n;                                                                                          \
        double acc = 0;                                                                                              \
        if (lg) {                                                                                                    \
          _Pragma("omp simd reduction(+ : acc)") for (int64_t j = 0; j < n; j++) acc += (double)gr[j];               \
          T sg = (T)acc;                                                                                             \
          _Pragma("omp simd") for (int64_t j = 0; j < n; j++) dr[j] = gr[j] - EXP(yr[j]) * sg;                       \
        } else {                                                                                                     \
          _Pragma("omp simd reduction(+ : acc)") for (int64_t j = 0; j < n; j++) acc += (double)(gr[j] * yr[j]);     \
          T dot = (T)acc;                                                                                            \
          _Pragma("omp simd") for (int64_t j = 0; j < n; j++) dr[j] = yr[j] * (gr[j] - dot);                         \
        }                                                                                                            \
      }                                                                                                              \
      return;                                                                                                        \
    }                                                                                                                \
    int64_t nchunks = (inner + COLS - 1) / COLS, ntasks = outer * nchunks;                                           \
    _Pragma("omp parallel for schedule(static) if (outer * n * inner > ZT_PAR_MIN)")                                 \
    for (int64_t t = 0; t < ntasks; t++) {                                                                           \
      int64_t o = t / nchunks, c0 = (t % nchunks) * COLS, w = inner - c0 < COLS ? inner - c0 : COLS;                 \
      int64_t base = o * n * inner + c0;                                                                             \
      double acc[COLS];                                                                                              \
      T a[COLS];                                                                                                     \
      for (int64_t j = 0; j < w; j++) acc[j] = 0;                                                                    \
      for (int64_t k = 0; k < n; k++) {                                                                              \
        const T *yr = y + base + k * inner, *gr = g + base + k * inner;                                              \
        if (lg)                                                                                                      \
          for (int64_t j = 0; j < w; j++) acc[j] += (double)gr[j];                                                   \
        else                                                                                                         \
          for (int64_t j = 0; j < w; j++) acc[j] += (double)(gr[j] * yr[j]);                                         \
      }                                                                                                              \
      for (int64_t j = 0; j < w; j++) a[j] = (T)acc[j];                                                              \
      for (int64_t k = 0; k < n; k++) {                                                                              \
        const T *yr = y + base + k * inner, *gr = g + base + k * inner;                                              \
        T *dr = gx + base + k * inner;                                                                               \
        if (lg)                                                                                                      \
          for (int64_t j = 0; j < w; j++) dr[j] = gr[j] - EXP(yr[j]) * a[j];                                         \
        else                                                                                                         \
          for (int64_t j = 0; j < w; j++) dr[j] = yr[j] * (gr[j] - a[j]);                                            \
      }                                                                                                              \
    }                                                                                                                \
  }                                                                                                                  \
                                                                                                                     \
  /* logits (R, V), targets (R), lse (R) or NULL, loss (R) = per-row loss (0 on ignored rows) */                     \
  static void ce_fwd_##SUF(const T *restrict x, const void *tg, bool i32, int64_t R, int64_t V, int64_t ignore,      \
                           T *restrict lse, double *restrict loss) {                                                 \
    _Pragma("omp parallel for schedule(static) if (R * V > ZT_PAR_MIN)")                                             \
    for (int64_t r = 0; r < R; r++) {                                                                                \
      int64_t t = load_target(tg, i32, r);                                                                           \
      if (t == ignore) {                                                                                             \
        loss[r] = 0;                                                                                                 \
        continue;                                                                                                    \
      }                                                                                                              \
      const T *xr = x + r * V;                                                                                       \
      double l = row_lse_##SUF(xr, V);                                                                               \
      loss[r] = l - (double)xr[t];                                                                                   \
      if (lse) lse[r] = (T)l;                                                                                        \
    }                                                                                                                \
  }                                                                                                                  \
                                                                                                                     \
  /* logits, gx (R, V); targets, lse (R) */                                                                          \
  static void ce_bwd_##SUF(const T *restrict x, const void *tg, bool i32, const T *restrict lse, int64_t R,          \
                           int64_t V, int64_t ignore, T scale, T *restrict gx) {                                     \
    _Pragma("omp parallel for schedule(static) if (R * V > ZT_PAR_MIN)")                                             \
    for (int64_t r = 0; r < R; r++) {                                                                                \
      int64_t t = load_target(tg, i32, r);                                                                           \
      T *dr = gx + r * V;                                                                                            \
      if (t == ignore || scale == 0) {                                                                               \
        memset(dr, 0, sizeof(T) * (size_t)V);                                                                        \
        continue;                                                                                                    \
      }                                                                                                              \
      const T *xr = x + r * V;                                                                                       \
      T l = lse[r];                                                                                                  \
      _Pragma("omp simd") for (int64_t j = 0; j < V; j++) dr[j] = scale * EXP(xr[j] - l);                            \
      dr[t] = scale * (EXP(xr[t] - l) - 1);                                                                          \
    }                                                                                                                \
  }

ZT_DEFINE_SOFTMAX(float, f32, zt__expf)
ZT_DEFINE_SOFTMAX(double, f64, exp)

void zt__cpu_softmax(const zt_tensor *x, int64_t outer, int64_t n, int64_t inner, bool log, zt_tensor *y) {
  if (outer * n * inner == 0) return;
  if (x->dtype == ZT_DTYPE_F32)
    softmax_f32(zt__tensor_ptr(x), outer, n, inner, log, zt__tensor_ptr(y));
  else
    softmax_f64(zt__tensor_ptr(x), outer, n, inner, log, zt__tensor_ptr(y));
}

void zt__cpu_softmax_backward(const zt_tensor *y, const zt_tensor *g, int64_t outer, int64_t n, int64_t inner,
                              bool log, zt_tensor *gx) {
  if (outer * n * inner == 0) return;
  if (y->dtype == ZT_DTYPE_F32)
    softmax_bwd_f32(zt__tensor_ptr(y), zt__tensor_ptr(g), outer, n, inner, log, zt__tensor_ptr(gx));
  else
    softmax_bwd_f64(zt__tensor_ptr(y), zt__tensor_ptr(g), outer, n, inner, log, zt__tensor_ptr(gx));
}

int64_t zt__cpu_ce_check_targets(const zt_tensor *targets, int64_t V, int64_t ignore, int64_t *bad_value,
                                 int64_t *count) {
  int64_t R = zt_tensor_numel(targets), c = 0;
  if (R == 0) {
    *count = 0;
    return -1;
  }
  const void *tg = zt__tensor_ptr(targets);
  bool i32 = targets->dtype == ZT_DTYPE_I32;
  for (int64_t r = 0; r < R; r++) {
    int64_t t = load_target(tg, i32, r);
    if (t == ignore) continue;
    if (t < 0 || t >= V) {
      *bad_value = t;
      return r;
    }
    c++;
  }
  *count = c;
  return -1;
}

zt_status zt__cpu_cross_entropy(const zt_tensor *logits, const zt_tensor *targets, int64_t ignore, zt_tensor *lse,
                                double *loss_sum) {
  int64_t V = logits->shape[logits->ndim - 1], R = zt_tensor_numel(targets);
  *loss_sum = 0;
  if (R == 0) return ZT_OK;
  /* Per-row losses, summed in row order afterwards: the result does not depend on the
   * thread count. */
  double *loss = NULL;
  size_t bytes = sizeof *loss * (size_t)R;
  ZT_TRY(zt_mem_alloc(bytes, ZT_CPU, ZT_MEM_TAG_TEMP, (void **)&loss));
  const void *tg = zt__tensor_ptr(targets);
  bool i32 = targets->dtype == ZT_DTYPE_I32;
  if (logits->dtype == ZT_DTYPE_F32)
    ce_fwd_f32(zt__tensor_ptr(logits), tg, i32, R, V, ignore, lse ? zt__tensor_ptr(lse) : NULL, loss);
  else
    ce_fwd_f64(zt__tensor_ptr(logits), tg, i32, R, V, ignore, lse ? zt__tensor_ptr(lse) : NULL, loss);
  double s = 0;
  for (int64_t r = 0; r < R; r++) s += loss[r];
  zt_mem_free(loss, bytes, ZT_CPU, ZT_MEM_TAG_TEMP);
  *loss_sum = s;
  return ZT_OK;
}

void zt__cpu_cross_entropy_backward(const zt_tensor *logits, const zt_tensor *targets, const zt_tensor *lse,
                                    int64_t ignore, double scale, zt_tensor *gx) {
  int64_t V = logits->shape[logits->ndim - 1], R = zt_tensor_numel(targets);
  if (R * V == 0) return;
  const void *tg = zt__tensor_ptr(targets);
  bool i32 = targets->dtype == ZT_DTYPE_I32;
  if (logits->dtype == ZT_DTYPE_F32)
    ce_bwd_f32(zt__tensor_ptr(logits), tg, i32, zt__tensor_ptr(lse), R, V, ignore, (float)scale,
               zt__tensor_ptr(gx));
  else
    ce_bwd_f64(zt__tensor_ptr(logits), tg, i32, zt__tensor_ptr(lse), R, V, ignore, scale, zt__tensor_ptr(gx));
}
