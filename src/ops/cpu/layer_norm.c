/* Layer norm kernels over the last dim, rows in parallel. Backward is fused: one pass per
 * row gives dx, and dw/db come from per-chunk partial sums (chunk size a function of the
 * row count only) added in chunk order, so they do not depend on the thread count. */
#include <math.h>
#include <string.h>

#include "core/tensor_internal.h"
#include "kernels.h"
#include "nn.h"

/* Chunks of at least LN_MIN_CHUNK_ROWS rows, at most LN_MAX_CHUNKS of them: enough
 * chunks to feed the threads, few enough that the scratch (2 C per chunk) stays small. */
#define LN_MIN_CHUNK_ROWS 16
#define LN_MAX_CHUNKS 64

static int64_t ln_chunk_rows(int64_t rows) {
  int64_t cr = (rows + LN_MAX_CHUNKS - 1) / LN_MAX_CHUNKS;
  return cr < LN_MIN_CHUNK_ROWS ? LN_MIN_CHUNK_ROWS : cr;
}

int64_t zt__cpu_layer_norm_scratch_numel(int64_t rows, int64_t C) {
  int64_t cr = ln_chunk_rows(rows);
  return (rows + cr - 1) / cr * 2 * C;
}

/* `omp simd reduction` lets the compiler reassociate the row sums (vectorised without
 * -ffast-math); the order is fixed by the build, not by the thread count. */
#define ZT_DEFINE_LAYER_NORM(T, SUF, SQRT)                                                                   \
  /* x (R, C), w b (C) or NULL -> out (R, C) =; mean rstd (R) = or NULL */                                   \
  static void ln_fwd_##SUF(const T *restrict x, const T *restrict w, const T *restrict b, T eps,           \
                           T *restrict out, T *restrict mean, T *restrict rstd, int64_t R, int64_t C) {     \
    _Pragma("omp parallel for schedule(static) if (R * C > ZT_PAR_MIN)")                                     \
    for (int64_t r = 0; r < R; r++) {                                                                        \
      const T *restrict xr = x + r * C;                                                                      \
      T *restrict o = out + r * C;                                                                           \
      T s = 0;                                                                                               \
      _Pragma("omp simd reduction(+ : s)")                                                                   \
      for (int64_t c = 0; c < C; c++) s += xr[c];                                                            \
      T m = s / (T)C, v = 0;                                                                                 \
      /* two passes: var from centred values, no cancellation for large means */                            \
      _Pragma("omp simd reduction(+ : v)")                                                                   \
      for (int64_t c = 0; c < C; c++) v += (xr[c] - m) * (xr[c] - m);                                        \
      T rs = 1 / SQRT(v / (T)C + eps);                                                                       \
      if (w && b)                                                                                            \
        for (int64_t c = 0; c < C; c++) o[c] = (xr[c] - m) * rs * w[c] + b[c];                               \
      else if (w)                                                                                            \
        for (int64_t c = 0; c < C; c++) o[c] = (xr[c] - m) * rs * w[c];                                      \
      else if (b)                                                                                            \
        for (int64_t c = 0; c < C; c++) o[c] = (xr[c] - m) * rs + b[c];                                      \
      else                                                                                                   \
        for (int64_t c = 0; c < C; c++) o[c] = (xr[c] - m) * rs;                                             \
      if (mean) mean[r] = m;                                                                                 \
      if (rstd) rstd[r] = rs;                                                                                \
    }                                                                                                        \
  }                                                                                                          \
  /* g x (R, C), w (C) or NULL, mean rstd (R) -> dx (R, C) =, dw db (C) = (each may be NULL);             \
   * scratch (n_chunks, 2, C) partial [dw; db] per chunk of rows. */                                        \
  static void ln_bwd_##SUF(const T *restrict g, const T *restrict x, const T *restrict w,                  \
                           const T *restrict mean, const T *restrict rstd, T *restrict dx, T *restrict dw,  \
                           T *restrict db, T *restrict scratch, int64_t R, int64_t C) {                     \
    int64_t cr = ln_chunk_rows(R), nch = (R + cr - 1) / cr;                                                  \
    bool want_p = dw || db;                                                                                  \
    _Pragma("omp parallel for schedule(static) if (R * C > ZT_PAR_MIN)")                                     \
    for (int64_t k = 0; k < nch; k++) {                                                                      \
      T *restrict pw = want_p ? scratch + k * 2 * C : NULL;                                                  \
      T *restrict pb = want_p ? pw + C : NULL;                                                               \
      if (want_p)                                                                                            \
        for (int64_t c = 0; c < 2 * C; c++) pw[c] = 0;                                                       \
      int64_t r1 = (k + 1) * cr < R ? (k + 1) * cr : R;                                                      \
      for (int64_t r = k * cr; r < r1; r++) {                                                                \
        const T *restrict gr = g + r * C, *restrict xr = x + r * C;                                          \
        T m = mean[r], rs = rstd[r];                                                                         \
        if (want_p)                                                                                          \
          for (int64_t c = 0; c < C; c++) {                                                                  \
            pw[c] += gr[c] * ((xr[c] - m) * rs);                                                             \
            pb[c] += gr[c];                                                                                  \
          }                                                                                                  \
        if (!dx) continue;                                                                                   \
        /* dx = rstd (dy - mean(dy) - xhat mean(dy xhat)), dy = g w */                                       \
        T s1 = 0, s2 = 0;                                                                                    \
        _Pragma("omp simd reduction(+ : s1, s2)")                                                            \
        for (int64_t c = 0; c < C; c++) {                                                                    \
          T dy = w ? gr[c] * w[c] : gr[c];                                                                   \
          s1 += dy;                                                                                          \
          s2 += dy * ((xr[c] - m) * rs);                                                                     \
        }                                                                                                    \
        s1 /= (T)C;                                                                                          \
        s2 /= (T)C;                                                                                          \
        T *restrict dr = dx + r * C;                                                                         \
        for (int64_t c = 0; c < C; c++) {                                                                    \
          T dy = w ? gr[c] * w[c] : gr[c];                                                                   \
          dr[c] = (dy - s1 - (xr[c] - m) * rs * s2) * rs;                                                    \
        }                                                                                                    \
      }                                                                                                      \
    }                                                                                                        \
    if (!want_p) return;                                                                                     \
    if (nch == 0) { /* no rows: the sums are empty */                                                        \
      if (dw) memset(dw, 0, sizeof(T) * (size_t)C);                                                          \
      if (db) memset(db, 0, sizeof(T) * (size_t)C);                                                          \
      return;                                                                                                \
    }                                                                                                        \
    /* chunk order, serial: nch * 2C adds are nothing next to the pass above */                              \
    for (int64_t k = 1; k < nch; k++) {                                                                      \
      const T *restrict pk = scratch + k * 2 * C;                                                            \
      for (int64_t c = 0; c < 2 * C; c++) scratch[c] += pk[c];                                               \
    }                                                                                                        \
    if (dw) memcpy(dw, scratch, sizeof(T) * (size_t)C);                                                      \
    if (db) memcpy(db, scratch + C, sizeof(T) * (size_t)C);                                                  \
  }

ZT_DEFINE_LAYER_NORM(float, f32, sqrtf)
ZT_DEFINE_LAYER_NORM(double, f64, sqrt)

static void *ptr_or_null(const zt_tensor *t) { return t ? zt__tensor_ptr(t) : NULL; }

void zt__cpu_layer_norm(const zt_tensor *x, const zt_tensor *w, const zt_tensor *b, double eps, zt_tensor *out,
                        zt_tensor *mean, zt_tensor *rstd) {
  int64_t C = x->shape[x->ndim - 1], R = C ? zt_tensor_numel(x) / C : 0;
  if (x->dtype == ZT_DTYPE_F32)
    ln_fwd_f32(zt__tensor_ptr(x), ptr_or_null(w), ptr_or_null(b), (float)eps, zt__tensor_ptr(out),
               ptr_or_null(mean), ptr_or_null(rstd), R, C);
  else
    ln_fwd_f64(zt__tensor_ptr(x), ptr_or_null(w), ptr_or_null(b), eps, zt__tensor_ptr(out), ptr_or_null(mean),
               ptr_or_null(rstd), R, C);
}

void zt__cpu_layer_norm_backward(const zt_tensor *g, const zt_tensor *x, const zt_tensor *w, const zt_tensor *mean,
                                 const zt_tensor *rstd, zt_tensor *dx, zt_tensor *dw, zt_tensor *db, void *scratch) {
  int64_t C = x->shape[x->ndim - 1], R = C ? zt_tensor_numel(x) / C : 0;
  if (x->dtype == ZT_DTYPE_F32)
    ln_bwd_f32(zt__tensor_ptr(g), zt__tensor_ptr(x), ptr_or_null(w), zt__tensor_ptr(mean), zt__tensor_ptr(rstd),
               ptr_or_null(dx), ptr_or_null(dw), ptr_or_null(db), scratch, R, C);
  else
    ln_bwd_f64(zt__tensor_ptr(g), zt__tensor_ptr(x), ptr_or_null(w), zt__tensor_ptr(mean), zt__tensor_ptr(rstd),
               ptr_or_null(dx), ptr_or_null(dw), ptr_or_null(db), scratch, R, C);
}
