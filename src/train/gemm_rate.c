/* The machine's single-precision GEMM rate (gemm_rate.h): n^3 sgemm timed through OpenBLAS,
 * the median of a few runs (zt_sgemm_gflops, for the planner and `zt bench`) or the best of
 * them (the ceiling a run's MFU is measured against). */
#include <cblas.h>
#include <stdlib.h>

#include "train/gemm_rate.h"
#include "zt/train.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double zt__median(double *v, int64_t n) {
  if (n < 1) return 0;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* GFLOP/s of n^3 sgemm over reps runs after a warm-up: their median, or their best. */
static double sgemm_rate(int n, int reps, bool best) {
  size_t nn = (size_t)n * (size_t)n;
  float *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b), *c = malloc(nn * sizeof *c);
  double *t = reps >= 1 ? malloc(sizeof *t * (size_t)reps) : NULL;
  if (!a || !b || !c || !t) { /* reps < 1, or out of host memory: no measure */
    free(a), free(b), free(c), free(t);
    return 0;
  }
  for (size_t i = 0; i < nn; i++) a[i] = (float)(i % 7) * 0.1f, b[i] = (float)(i % 5) * 0.1f;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
  for (int r = 0; r < reps; r++) {
    double t0 = zt_clock_now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    t[r] = zt_clock_now() - t0;
  }
  qsort(t, (size_t)reps, sizeof *t, cmp_double);
  double g = 2.0 * n * (double)n * n / t[best ? 0 : reps / 2] / 1e9;
  free(t), free(a), free(b), free(c);
  return g;
}

double zt_sgemm_gflops(int n, int reps) { return sgemm_rate(n, reps, false); }

/* Measured once per thread count in a process: a test or a tool that runs many short runs pays
 * for it once (about 10 GFLOP), not per run. */
double zt__sgemm_ceiling(void) {
  static int threads;
  static double ceiling;
  int n = zt_get_num_threads();
  if (ceiling > 0 && threads == n) return ceiling;
  double a = sgemm_rate(512, 4, true), b = sgemm_rate(1024, 3, true);
  threads = n, ceiling = a > b ? a : b;
  return ceiling;
}
