/* Helpers shared by the bench_<name> programs (header-only, static inline): a monotonic
 * clock, the median of timed runs, and exiting with the library's last error. Benchmarks
 * report medians because they resist noise from other processes. */
#ifndef ZT_BENCH_UTIL_H
#define ZT_BENCH_UTIL_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "zt/status.h"

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

#endif
