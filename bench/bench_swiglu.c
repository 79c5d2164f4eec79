/* SwiGLU fused (zt_swiglu) against the unfused composition (zt_silu then zt_mul), f32, at
 * a Llama MLP's shapes: gate and up (B*T, F) for B=4, T=256 and F = 1536 (smollm-135m's
 * intermediate size) or 8192 (llama3.2-1b's). Each run is one forward with grad on and one
 * zt_backward for both inputs; fused and unfused runs alternate back to back, medians of
 * the timed runs after warm-up. graph_bytes: what the forward leaves allocated (outputs and
 * what backward keeps beyond the inputs), from the allocator's accounting. One JSON object
 * per line, e.g. {"bench":"swiglu","variant":"fused","tokens":1024,"F":1536,...}.
 * Run: OMP_NUM_THREADS=1 build/bench/bench_swiglu (results: bench/results/swiglu.jsonl, 3 runs
 * at 2 threads then 3 at 1 thread on a 2-core machine shared with other builds: the 2-thread
 * medians there are hit by waits for a busy core; the 1-thread ones are steady). */
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"
#include "zt/ops.h"

#define WARMUP 3
#define RUNS 15

static int64_t cpu_bytes(void) {
  zt_mem_stats s;
  zt_mem_stats_get(ZT_CPU, &s);
  return s.current_total;
}

/* One forward + backward; t[0], t[1] get their times, *graph the bytes forward left. */
static void run_once(bool fused, zt_tensor *a, zt_tensor *u, zt_tensor *gy, double *t, int64_t *graph) {
  zt_tensor *s = NULL, *y = NULL;
  int64_t m0 = cpu_bytes();
  double t0 = bench_now_s();
  if (fused) {
    if (zt_swiglu(a, u, &y)) bench_die("zt_swiglu");
  } else {
    if (zt_silu(a, &s)) bench_die("zt_silu");
    if (zt_mul(s, u, &y)) bench_die("zt_mul");
  }
  double t1 = bench_now_s();
  *graph = cpu_bytes() - m0;
  /* the composition's intermediate lives on in the graph only */
  zt_tensor_free(s);
  if (zt_backward(1, &y, &gy, false)) bench_die("zt_backward");
  double t2 = bench_now_s();
  zt_tensor_free(y);
  bench_drop_grad(a);
  bench_drop_grad(u);
  t[0] = t1 - t0;
  t[1] = t2 - t1;
}

static void bench_swiglu(int64_t N, int64_t F) {
  int64_t sh[] = {N, F};
  zt_tensor *a = bench_rand_tensor(2, sh, -4, 4, true), *u = bench_rand_tensor(2, sh, -2, 2, true);
  zt_tensor *gy = bench_rand_tensor(2, sh, -1, 1, false);
  double tf[2][RUNS], tb[2][RUNS];
  int64_t graph[2] = {0, 0};
  for (int r = -WARMUP; r < RUNS; r++)
    for (int v = 0; v < 2; v++) {
      double t[2];
      run_once(v == 0, a, u, gy, t, &graph[v]);
      if (r >= 0) {
        tf[v][r] = t[0];
        tb[v][r] = t[1];
      }
    }
  /* memory bound: bytes moved per element, forward 2 reads + 1 write (fused) or 3 reads +
   * 2 writes (unfused); backward 3 reads + 2 writes (fused) or 5 reads + 3 writes */
  static const double fwd_bytes[2] = {12, 20}, bwd_bytes[2] = {20, 32};
  for (int v = 0; v < 2; v++) {
    double f = bench_median(tf[v], RUNS), b = bench_median(tb[v], RUNS), n = (double)(N * F);
    printf("{\"bench\":\"swiglu\",\"variant\":\"%s\",\"tokens\":%lld,\"F\":%lld,\"dtype\":\"f32\",\"threads\":%d,"
           "\"fwd_ms\":%.3f,\"bwd_ms\":%.3f,\"total_ms\":%.3f,\"fwd_gbs\":%.1f,\"bwd_gbs\":%.1f,"
           "\"graph_bytes\":%lld}\n",
           v == 0 ? "fused" : "unfused", (long long)N, (long long)F, zt_get_num_threads(), 1e3 * f, 1e3 * b,
           1e3 * (f + b), fwd_bytes[v] * n / f * 1e-9, bwd_bytes[v] * n / b * 1e-9, (long long)graph[v]);
  }
  fflush(stdout);
  zt_tensor_free(a);
  zt_tensor_free(u);
  zt_tensor_free(gy);
}

int main(void) {
  zt_rng_seed(1);
  static const int64_t Fs[] = {1536, 8192};
  for (int i = 0; i < 2; i++) bench_swiglu(4 * 256, Fs[i]);
  return 0;
}
