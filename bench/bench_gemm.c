/* GEMM throughput: zt_matmul through the op layer (grad mode off, f32, a fresh output
 * from the accounting allocator every call) against raw cblas_sgemm into one reused
 * buffer, same sizes, same run. Median of timed runs after warm-up; one JSON object per
 * line: {"bench":"gemm","m":..,"n":..,"k":..,"zt_gflops":..,"sgemm_gflops":..,"ratio":..}
 * plus zt_minflt (page faults per zt call in the timed runs) and warmup. Warm-up lasts
 * until a zt call takes no page faults: glibc's aligned_alloc needs several rounds
 * before it reuses a freed output block instead of growing the heap (a training loop
 * reaches that steady state in its first steps). */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "core/tensor_internal.h"
#include "bench_util.h"
#include "zt/ops.h"

#define MIN_WARMUP 3
#define MAX_WARMUP 30
#define MIN_RUNS 11

static long minor_faults(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

/* Run count: at least MIN_RUNS, more for small sizes so each side gets ~1 s at
 * 100 GFLOP/s (a median over many short runs resists noise from other processes). */
static int runs_for(double flops) {
  int n = (int)(1.0 * 100e9 / flops);
  return n < MIN_RUNS ? MIN_RUNS : (n > 401 ? 401 : n);
}

static void bench(int64_t m, int64_t n, int64_t k) {
  zt_tensor *a = NULL, *b = NULL, *c = NULL;
  if (zt_tensor_empty(2, (int64_t[]){m, k}, ZT_DTYPE_F32, ZT_CPU, &a) ||
      zt_tensor_empty(2, (int64_t[]){k, n}, ZT_DTYPE_F32, ZT_CPU, &b) ||
      zt_tensor_empty(2, (int64_t[]){m, n}, ZT_DTYPE_F32, ZT_CPU, &c))
    bench_die("alloc");
  if (zt_tensor_uniform_(a, -1, 1) || zt_tensor_uniform_(b, -1, 1)) bench_die("init");
  float *pa = zt__tensor_ptr(a), *pb = zt__tensor_ptr(b), *pc = zt__tensor_ptr(c);
  double flops = 2.0 * (double)m * (double)n * (double)k;
  int runs = runs_for(flops);
  double *t_zt = malloc(sizeof(double) * (size_t)runs), *t_blas = malloc(sizeof(double) * (size_t)runs);
  if (!t_zt || !t_blas) bench_die("malloc");

  bool prev = zt_set_grad_enabled(false);
  /* Interleave the two, alternating which goes first, so drift in machine load and
   * cache state hit both alike. r < 0: warm-up. */
  long faults = 0;
  int warm = 0, r = -1;
  for (;;) {
    double t_z = 0, t_b = 0;
    long f_z = 0;
    for (int side = 0; side < 2; side++) {
      bool zt_side = (side == 0) == ((r + warm) % 2 == 0);
      long f0 = minor_faults();
      double t0 = bench_now_s();
      if (zt_side) {
        zt_tensor *y = NULL;
        if (zt_matmul(a, b, false, false, &y)) bench_die("zt_matmul");
        zt_tensor_free(y); /* timed too: allocating and freeing the output is part of the op */
        t_z = bench_now_s() - t0;
        f_z = minor_faults() - f0;
      } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0f, pa, (int)k, pb, (int)n,
                    0.0f, pc, (int)n);
        t_b = bench_now_s() - t0;
      }
    }
    if (r < 0) {
      warm++;
      if ((warm >= MIN_WARMUP && f_z == 0) || warm >= MAX_WARMUP) r = 0;
      continue;
    }
    t_zt[r] = t_z;
    t_blas[r] = t_b;
    faults += f_z;
    if (++r == runs) break;
  }
  zt_set_grad_enabled(prev);
  double zt_gf = flops / bench_median(t_zt, runs) / 1e9, blas_gf = flops / bench_median(t_blas, runs) / 1e9;
  /* bench_median() sorted both: [0] is the best run, a cross-check less sensitive to load */
  double ratio_best = t_blas[0] / t_zt[0];
  printf("{\"bench\":\"gemm\",\"m\":%lld,\"n\":%lld,\"k\":%lld,\"zt_gflops\":%.2f,\"sgemm_gflops\":%.2f,"
         "\"ratio\":%.4f,\"ratio_best\":%.4f,\"runs\":%d,\"warmup\":%d,\"zt_minflt\":%.1f,\"threads\":%d}\n",
         (long long)m, (long long)n, (long long)k, zt_gf, blas_gf, zt_gf / blas_gf, ratio_best, runs, warm,
         (double)faults / runs, zt_get_num_threads());
  fflush(stdout);
  free(t_zt);
  free(t_blas);
  zt_tensor_free(a);
  zt_tensor_free(b);
  zt_tensor_free(c);
}

int main(void) {
  static const int64_t square[] = {256, 512, 1024, 2048};
  for (int i = 0; i < 4; i++) bench(square[i], square[i], square[i]);
  /* GPT-2 124M shapes for 1024 tokens: qkv (768 -> 2304) and MLP up (768 -> 3072) */
  bench(1024, 2304, 768);
  bench(1024, 3072, 768);
  return 0;
}
