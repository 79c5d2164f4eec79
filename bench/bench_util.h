/* Helpers shared by the bench_<name> programs (header-only, static inline): a monotonic
 * clock, the median of timed runs, exiting with the library's last error, and random f32
 * inputs whose grads a timed run drops. Benchmarks
 * report medians because they resist noise from other processes. */
#ifndef ZT_BENCH_UTIL_H
#define ZT_BENCH_UTIL_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "zt/status.h"
#include "zt/tensor.h"

/* Seconds on CLOCK_MONOTONIC (only differences mean anything). */
static inline double bench_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median of v[0..n), n >= 1 (the mean of the middle two when n is even). Sorts v in
 * place, so v[0] is then the best run. */
static inline double bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Prints "<program>: <what>: <zt_last_error()>" to stderr and exits with status 1. */
static inline void bench_die(const char *what) {
  fprintf(stderr, "%s: %s: %s\n", program_invocation_short_name, what, zt_last_error());
  exit(1);
}

/* An f32 CPU tensor of shape[ndim], uniform in [lo, hi); leaf: it requires grad. Exits on failure. */
static inline zt_tensor *bench_rand_tensor(int ndim, const int64_t *shape, double lo, double hi, bool leaf) {
  zt_tensor *t = NULL;
  if (zt_tensor_empty(ndim, shape, ZT_DTYPE_F32, ZT_CPU, &t)) bench_die("alloc");
  if (zt_tensor_uniform_(t, lo, hi)) bench_die("init");
  if (leaf && zt_tensor_set_requires_grad(t, true)) bench_die("requires_grad");
  return t;
}

/* Frees t's grad, so the next timed backward starts without one (t NULL: nothing). */
static inline void bench_drop_grad(zt_tensor *t) {
  if (!t) return;
  zt_tensor_free(t->grad);
  t->grad = NULL;
}

#endif
