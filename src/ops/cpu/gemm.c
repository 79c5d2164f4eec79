/* GEMM through OpenBLAS (row-major cblas_sgemm / cblas_dgemm) or, for one f32 row, its own
 * GEMV; the broadcast batched form, and linear's bias helpers. Callers have checked that
 * every size fits BLAS's int. BLAS calls stay outside OpenMP regions (OpenBLAS threads each
 * call itself); only the bandwidth-bound GEMV and bias helpers use OpenMP loops. */
#include <cblas.h>
#include <string.h>

#include "core/status_internal.h"
#include "gemm.h"
#include "kernels.h"

static int64_t max1(int64_t x) { return x > 1 ? x : 1; }

/* One row (M == 1, f32, A not transposed): a matrix-vector product, what decoding a token
 * runs. OpenBLAS's sgemm packs all of B for it (three times the bytes a GEMV reads), and its
 * sgemv splits the transposed form's sums across threads (results would depend on the thread
 * count), so it is done here: each output summed over k in order, threads splitting the
 * outputs only. c (N) = a (K) . op(B), or c += that when beta == 1.
 * Threads only from GEMV_PAR_MIN elements of B (16 MiB): one core streams a smaller B nearly
 * as fast as two, and a short parallel region's fork and join is where OpenMP loses the cores
 * on a loaded machine (a GPT-2 124M decode step, 2 threads beside other jobs: 27-39 ms with
 * the blocks' GEMVs on one thread, 126-163 ms with them threaded). */
#define GEMV_COLS 128
#define GEMV_PAR_MIN (1 << 22)
static void gemv_f32(bool tb, int64_t N, int64_t K, const float *restrict a, const float *restrict b, int64_t ldb,
                     bool acc, float *restrict c) {
  if (tb) {
    /* B (N,K): c[n] = a . B[n,:], contiguous dot products */
#pragma omp parallel for schedule(static) if (N * K > GEMV_PAR_MIN)
    for (int64_t n = 0; n < N; n++) {
      const float *bn = b + n * ldb;
      float s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t k = 0; k < K; k++) s += a[k] * bn[k];
      c[n] = acc ? c[n] + s : s;
    }
    return;
  }
  /* B (K,N): a block of GEMV_COLS outputs accumulates a[k] * B[k, block] row after row */
  int64_t nblk = (N + GEMV_COLS - 1) / GEMV_COLS;
#pragma omp parallel for schedule(static) if (N * K > GEMV_PAR_MIN)
  for (int64_t blk = 0; blk < nblk; blk++) {
    int64_t n0 = blk * GEMV_COLS, w = N - n0 < GEMV_COLS ? N - n0 : GEMV_COLS;
    float s[GEMV_COLS] = {0};
    for (int64_t k = 0; k < K; k++) {
      const float ak = a[k], *bk = b + k * ldb + n0;
#pragma omp simd
      for (int64_t j = 0; j < w; j++) s[j] += ak * bk[j];
    }
    for (int64_t j = 0; j < w; j++) c[n0 + j] = acc ? c[n0 + j] + s[j] : s[j];
  }
}

void zt__cpu_gemm(zt_dtype dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                  const void *B, int64_t ldb, double beta, void *C, int64_t ldc) {
  ZT_ASSERT(dt == ZT_DTYPE_F32 || dt == ZT_DTYPE_F64);
  ZT_ASSERT(beta == 0.0 || beta == 1.0);
  if (M == 0 || N == 0) return;
  size_t es = zt_dtype_size(dt);
  if (K == 0) {
    /* An empty sum. BLAS would reject the zero leading dims, so do it here. */
    if (beta == 0.0)
      for (int64_t i = 0; i < M; i++) memset((char *)C + (size_t)(i * ldc) * es, 0, (size_t)N * es);
    return;
  }
  if (dt == ZT_DTYPE_F32 && M == 1 && !ta) {
    gemv_f32(tb, N, K, A, B, ldb, beta != 0.0, C);
    return;
  }
  /* Leading dims must be >= 1 even for a single row/column (BLAS argument checks). */
  lda = max1(lda);
  ldb = max1(ldb);
  ldc = max1(ldc);
  enum CBLAS_TRANSPOSE opa = ta ? CblasTrans : CblasNoTrans, opb = tb ? CblasTrans : CblasNoTrans;
  if (dt == ZT_DTYPE_F32)
    cblas_sgemm(CblasRowMajor, opa, opb, (int)M, (int)N, (int)K, 1.0f, A, (int)lda, B, (int)ldb, (float)beta, C,
                (int)ldc);
  else
    cblas_dgemm(CblasRowMajor, opa, opb, (int)M, (int)N, (int)K, 1.0, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

void zt__cpu_gemm_batched(zt_dtype dt, const zt__gemm_batch *bt, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                          const void *A, int64_t lda, const void *B, int64_t ldb, void *C, int64_t ldc) {
  int nbd = bt->nbd;
  int64_t nb = 1;
  for (int d = 0; d < nbd; d++) nb *= bt->bshape[d];
  size_t es = zt_dtype_size(dt);
  int64_t idx[ZT_MAX_DIMS] = {0};
  int64_t oa = 0, ob = 0, oc = 0;
  for (int64_t i = 0; i < nb; i++) {
    /* First visit of this C slice: every coordinate along a dim C is broadcast on is 0
     * (row-major order reaches that index before any other mapping to the slice). */
    bool first = true;
    for (int d = 0; d < nbd; d++)
      if (bt->cs[d] == 0 && idx[d] != 0) first = false;
    zt__cpu_gemm(dt, ta, tb, M, N, K, (const char *)A + (size_t)oa * es, lda, (const char *)B + (size_t)ob * es, ldb,
                 first ? 0.0 : 1.0, (char *)C + (size_t)oc * es, ldc);
    /* advance the batch index (odometer) and the three offsets with it */
    for (int d = nbd - 1; d >= 0; d--) {
      if (++idx[d] < bt->bshape[d]) {
        oa += bt->as[d];
        ob += bt->bs[d];
        oc += bt->cs[d];
        break;
      }
      oa -= bt->as[d] * (bt->bshape[d] - 1);
      ob -= bt->bs[d] * (bt->bshape[d] - 1);
      oc -= bt->cs[d] * (bt->bshape[d] - 1);
      idx[d] = 0;
    }
  }
}

/* out (R,N) = bias (N) per row (=). */
#define ZT_DEFINE_FILL_ROWS(T, SUF)                                                   \
  static void fill_rows_##SUF(int64_t R, int64_t N, const T *restrict bias, T *restrict out) { \
    _Pragma("omp parallel for schedule(static) if (R * N > ZT_PAR_MIN)")               \
    for (int64_t r = 0; r < R; r++) memcpy(out + r * N, bias, (size_t)N * sizeof(T)); \
  }
ZT_DEFINE_FILL_ROWS(float, f32)
ZT_DEFINE_FILL_ROWS(double, f64)

void zt__cpu_fill_rows(zt_dtype dt, int64_t R, int64_t N, const void *bias, void *out) {
  if (dt == ZT_DTYPE_F32)
    fill_rows_f32(R, N, bias, out);
  else
    fill_rows_f64(R, N, bias, out);
}

/* out (N) = sum_r g (R,N) (=). Threads split the columns into blocks of COLS; each block
 * walks all rows with a vectorisable inner loop over its columns, accumulating in double
 * (f32 grads summed over thousands of rows would otherwise lose digits). */
#define COLS 64
#define ZT_DEFINE_COL_SUM(T, SUF)                                                      \
  static void col_sum_##SUF(int64_t R, int64_t N, const T *restrict g, T *restrict out) { \
    int64_t nblk = (N + COLS - 1) / COLS;                                              \
    _Pragma("omp parallel for schedule(static) if (R * N > ZT_PAR_MIN)")                \
    for (int64_t blk = 0; blk < nblk; blk++) {                                         \
      int64_t j0 = blk * COLS, w = N - j0 < COLS ? N - j0 : COLS;                      \
      double acc[COLS] = {0};                                                          \
      for (int64_t r = 0; r < R; r++) {                                                \
        const T *row = g + r * N + j0;                                                 \
        _Pragma("omp simd") for (int64_t j = 0; j < w; j++) acc[j] += (double)row[j];  \
      }                                                                                \
      for (int64_t j = 0; j < w; j++) out[j0 + j] = (T)acc[j];                         \
    }                                                                                  \
  }
ZT_DEFINE_COL_SUM(float, f32)
ZT_DEFINE_COL_SUM(double, f64)

void zt__cpu_col_sum(zt_dtype dt, int64_t R, int64_t N, const void *g, void *out) {
  if (dt == ZT_DTYPE_F32)
    col_sum_f32(R, N, g, out);
  else
    col_sum_f64(R, N, g, out);
}
