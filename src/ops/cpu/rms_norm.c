/* RMS norm kernels over the last dim, rows in parallel. Backward is fused: one pass per row
 * gives dx, and dw comes from per-chunk partial sums (chunk size a function of the row count
 * only) added in chunk order, so no result depends on the thread count. */
#include <math.h>
#include <string.h>

#include "core/tensor_internal.h"
#include "kernels.h"
#include "nn.h"

#define RMS_MIN_CHUNK_ROWS 16
#define RMS_MAX_CHUNKS 64

static int64_t rms_chunk_rows(int64_t rows) {
  int64_t cr = (rows + RMS_MAX_CHUNKS - 1) / RMS_MAX_CHUNKS;
  return cr < RMS_MIN_CHUNK_ROWS ? RMS_MIN_CHUNK_ROWS : cr;
}

int64_t zt__cpu_rms_norm_scratch_numel(int64_t rows, int64_t C) {
  int64_t cr = rms_chunk_rows(rows);
  return (rows + cr - 1) / cr * C;
}

/* `omp simd reduction` lets the compiler reassociate a row's sum of squares; the order is
 * fixed by the build, not by the thread count. */
#define ZT_DEFINE_RMS_NORM(T, SUF, SQRT)                                                                     \
  /* x (R, C), w (C) or NULL -> out (R, C) =; rstd (R) = or NULL */                                          \
  static void rms_fwd_##SUF(const T *restrict x, const T *restrict w, T eps, T *restrict out,              \
                            T *restrict rstd, int64_t R, int64_t C) {                                        \
    _Pragma("omp parallel for schedule(static) if (R * C > ZT_PAR_MIN)")                                     \
    for (int64_t r = 0; r < R; r++) {                                                                        \
      const T *restrict xr = x + r * C;                                                                      \
      T *restrict o = out + r * C;                                                                           \
      T ss = 0;                                                                                              \
      _Pragma("omp simd reduction(+ : ss)")                                                                  \
      for (int64_t c = 0; c < C; c++) ss += xr[c] * xr[c];                                                   \
      T rs = 1 / SQRT(ss / (T)C + eps);                                                                      \
      if (w)                                                                                                 \
        for (int64_t c = 0; c < C; c++) o[c] = (xr[c] * rs) * w[c];                                          \
      else                                                                                                   \
        for (int64_t c = 0; c < C; c++) o[c] = xr[c] * rs;                                                   \
      if (rstd) rstd[r] = rs;                                                                                \
    }                                                                                                        \
  }                                                                                                          \
  /* g x (R, C), w (C) or NULL, rstd (R) -> dx (R, C) =, dw (C) = (each may be NULL);                      \
   * scratch (n_chunks, C) partial dw per chunk of rows.                                                   \
   * y = x r w with r = (mean(x^2) + eps)^-1/2: dx = r (dy - x r^2 mean(dy x)), dy = g w. */              \
  static void rms_bwd_##SUF(const T *restrict g, const T *restrict x, const T *restrict w,                 \
                            const T *restrict rstd, T *restrict dx, T *restrict dw, T *restrict scratch,    \
                            int64_t R, int64_t C) {                                                          \
    int64_t cr = rms_chunk_rows(R), nch = (R + cr - 1) / cr;                                                 \
    _Pragma("omp parallel for schedule(static) if (R * C > ZT_PAR_MIN)")                                     \
    for (int64_t k = 0; k < nch; k++) {                                                                      \
      T *restrict pw = dw ? scratch + k * C : NULL;                                                          \
      if (dw)                                                                                                \
        for (int64_t c = 0; c < C; c++) pw[c] = 0;                                                           \
      int64_t r1 = (k + 1) * cr < R ? (k + 1) * cr : R;                                                      \
      for (int64_t r = k * cr; r < r1; r++) {                                                                \
        const T *restrict gr = g + r * C, *restrict xr = x + r * C;                                          \
        T rs = rstd[r];                                                                                      \
        if (dw)                                                                                              \
          for (int64_t c = 0; c < C; c++) pw[c] += gr[c] * (xr[c] * rs);                                     \
        if (!dx) continue;                                                                                   \
        T s = 0;                                                                                             \
        _Pragma("omp simd reduction(+ : s)")                                                                 \
        for (int64_t c = 0; c < C; c++) s += (w ? gr[c] * w[c] : gr[c]) * xr[c];                             \
        T f = rs * rs * (s / (T)C);                                                                          \
        T *restrict dr = dx + r * C;                                                                         \
        for (int64_t c = 0; c < C; c++) {                                                                    \
          T dy = w ? gr[c] * w[c] : gr[c];                                                                   \
          dr[c] = rs * (dy - xr[c] * f);                                                                     \
        }                                                                                                    \
      }                                                                                                      \
    }                                                                                                        \
    if (!dw) return;                                                                                         \
    if (nch == 0) {                                                                                          \
      memset(dw, 0, sizeof(T) * (size_t)C);                                                                  \
      return;                                                                                                \
    }                                                                                                        \
    for (int64_t k = 1; k < nch; k++) { /* chunk order, serial */                                            \
      const T *restrict pk = scratch + k * C;                                                                \
      for (int64_t c = 0; c < C; c++) scratch[c] += pk[c];                                                   \
    }                                                                                                        \
    memcpy(dw, scratch, sizeof(T) * (size_t)C);                                                              \
  }

ZT_DEFINE_RMS_NORM(float, f32, sqrtf)
ZT_DEFINE_RMS_NORM(double, f64, sqrt)

static void *ptr_or_null(const zt_tensor *t) { return t ? zt__tensor_ptr(t) : NULL; }

void zt__cpu_rms_norm(const zt_tensor *x, const zt_tensor *w, double eps, zt_tensor *out, zt_tensor *rstd) {
  int64_t C = x->shape[x->ndim - 1], R = C ? zt_tensor_numel(x) / C : 0;
  if (x->dtype == ZT_DTYPE_F32)
    rms_fwd_f32(zt__tensor_ptr(x), ptr_or_null(w), (float)eps, zt__tensor_ptr(out), ptr_or_null(rstd), R, C);
  else
    rms_fwd_f64(zt__tensor_ptr(x), ptr_or_null(w), eps, zt__tensor_ptr(out), ptr_or_null(rstd), R, C);
}

void zt__cpu_rms_norm_backward(const zt_tensor *g, const zt_tensor *x, const zt_tensor *w, const zt_tensor *rstd,
                               zt_tensor *dx, zt_tensor *dw, void *scratch) {
  int64_t C = x->shape[x->ndim - 1], R = C ? zt_tensor_numel(x) / C : 0;
  if (x->dtype == ZT_DTYPE_F32)
    rms_bwd_f32(zt__tensor_ptr(g), zt__tensor_ptr(x), ptr_or_null(w), zt__tensor_ptr(rstd), ptr_or_null(dx),
                ptr_or_null(dw), scratch, R, C);
  else
    rms_bwd_f64(zt__tensor_ptr(g), zt__tensor_ptr(x), ptr_or_null(w), zt__tensor_ptr(rstd), ptr_or_null(dx),
                ptr_or_null(dw), scratch, R, C);
}
