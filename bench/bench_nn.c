/* Forward and backward time of the fused nn ops at GPT-2 124M shapes (f32): causal
 * attention (B=4, T in {256, 1024}, C=768, 12 heads) and layer norm (same B, T, C).
 * Each run is one forward with grad on and one zt_backward; median of the timed runs
 * after warm-up. One JSON object per line, e.g.
 * {"bench":"attention","B":4,"T":256,"C":768,"heads":12,"fwd_ms":..,"bwd_ms":..,"gflops":..}. */
#include <stdio.h>
#include <stdlib.h>

#include "bench_util.h"
#include "zt/ops.h"

#define WARMUP 2
#define RUNS 9

/* Causal attention FLOPs count only the unmasked half: per head and (i, j <= i) pair,
 * forward does 2 multiply-adds per channel (q.k, p*v), backward 5 (recomputed q.k, dO.v,
 * and the dq, dk, dv products). */
static void bench_attention(int64_t B, int64_t T, int64_t C, int nh) {
  zt_tensor *qkv = bench_rand_tensor(3, (int64_t[]){B, T, 3 * C}, -1, 1, true);
  zt_tensor *gy = bench_rand_tensor(3, (int64_t[]){B, T, C}, -1, 1, false);
  double tf[RUNS], tb[RUNS];
  for (int r = -WARMUP; r < RUNS; r++) {
    zt_tensor *y = NULL;
    double t0 = bench_now_s();
    if (zt_causal_attention(qkv, nh, &y)) bench_die("zt_causal_attention");
    double t1 = bench_now_s();
    if (zt_backward(1, &y, &gy, false)) bench_die("zt_backward (attention)");
    double t2 = bench_now_s();
    zt_tensor_free(y);
    bench_drop_grad(qkv);
    if (r >= 0) {
      tf[r] = t1 - t0;
      tb[r] = t2 - t1;
    }
  }
  double f = bench_median(tf, RUNS), b = bench_median(tb, RUNS);
  double pairs = (double)B * nh * (double)T * (double)(T + 1) / 2, hs = (double)(C / nh);
  double ff = 4 * hs * pairs, fb = 10 * hs * pairs;
  printf("{\"bench\":\"attention\",\"B\":%lld,\"T\":%lld,\"C\":%lld,\"heads\":%d,\"dtype\":\"f32\",\"threads\":%d,"
         "\"fwd_ms\":%.3f,\"bwd_ms\":%.3f,\"fwd_gflops\":%.1f,\"bwd_gflops\":%.1f,\"gflops\":%.1f}\n",
         (long long)B, (long long)T, (long long)C, nh, zt_get_num_threads(), 1e3 * f, 1e3 * b, ff / f * 1e-9,
         fb / b * 1e-9, (ff + fb) / (f + b) * 1e-9);
  fflush(stdout);
  zt_tensor_free(qkv);
  zt_tensor_free(gy);
}

/* Layer norm is memory bound: GB/s counts one read of x and one write of y forward, and
 * reads of x and dy plus one write of dx backward (weight, bias and stats are small). */
static void bench_layer_norm(int64_t B, int64_t T, int64_t C) {
  zt_tensor *x = bench_rand_tensor(3, (int64_t[]){B, T, C}, -2, 2, true);
  zt_tensor *w = bench_rand_tensor(1, (int64_t[]){C}, 0.5, 1.5, true);
  zt_tensor *bias = bench_rand_tensor(1, (int64_t[]){C}, -0.5, 0.5, true);
  zt_tensor *gy = bench_rand_tensor(3, (int64_t[]){B, T, C}, -1, 1, false);
  double tf[RUNS], tb[RUNS];
  for (int r = -WARMUP; r < RUNS; r++) {
    zt_tensor *y = NULL;
    double t0 = bench_now_s();
    if (zt_layer_norm(x, w, bias, 1e-5, &y)) bench_die("zt_layer_norm");
    double t1 = bench_now_s();
    if (zt_backward(1, &y, &gy, false)) bench_die("zt_backward (layer_norm)");
    double t2 = bench_now_s();
    zt_tensor_free(y);
    bench_drop_grad(x);
    bench_drop_grad(w);
    bench_drop_grad(bias);
    if (r >= 0) {
      tf[r] = t1 - t0;
      tb[r] = t2 - t1;
    }
  }
  double f = bench_median(tf, RUNS), b = bench_median(tb, RUNS), n = (double)(B * T * C) * sizeof(float);
  printf("{\"bench\":\"layer_norm\",\"B\":%lld,\"T\":%lld,\"C\":%lld,\"dtype\":\"f32\",\"threads\":%d,"
         "\"fwd_ms\":%.3f,\"bwd_ms\":%.3f,\"fwd_gbps\":%.1f,\"bwd_gbps\":%.1f}\n",
         (long long)B, (long long)T, (long long)C, zt_get_num_threads(), 1e3 * f, 1e3 * b, 2 * n / f * 1e-9,
         3 * n / b * 1e-9);
  fflush(stdout);
  zt_tensor_free(x);
  zt_tensor_free(w);
  zt_tensor_free(bias);
  zt_tensor_free(gy);
}

int main(void) {
  zt_rng_seed(1);
  static const int64_t Ts[] = {256, 1024};
  for (int i = 0; i < 2; i++) bench_attention(4, Ts[i], 768, 12);
  for (int i = 0; i < 2; i++) bench_layer_norm(4, Ts[i], 768);
  return 0;
}
