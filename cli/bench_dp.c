/* zt bench dp: data-parallel training steps under mpirun (DDP or an FSDP strategy) on the
 * built-in data, and one JSON object (rank 0) with, per rank, the peak PARAM+GRAD+OPTIM
 * bytes against the ZeRO formula, the bytes communicated per step against the formula,
 * and the fraction of communication time hidden behind compute. Formulas (Ψ parameters,
 * N ranks, f32, ring collectives sending (N-1)/N of the buffer):
 *   memory  DDP/none 16Ψ; opt (ZeRO-1) 8Ψ + 8Ψ/N; grad_op 4Ψ + 12Ψ/N (+ the largest unit's
 *           full grads); full 16Ψ/N + the largest unit's full parameters and grads;
 *   traffic DDP 2Ψ (all-reduce); full 3Ψ (gather in forward, again in backward, reduce-
 *           scatter) less the root unit's backward gather (the root stays gathered from its
 *           forward to its backward); grad_op/opt 2Ψ; each times 4 (N-1)/N bytes.
 * Overlap: 1 - (time blocked on communication in the step) / (the same collectives timed
 * alone, without compute). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

typedef struct bench_acc {
  int64_t warmup, n;
  double ms[256], sent[256], wait[256];
  zt_mem_stats mem;
  int64_t rss;
} bench_acc;

static void on_step(const zt_train_step_info *in, void *ud) {
  bench_acc *a = ud;
  a->mem = in->mem;
  a->rss = in->peak_rss;
  if (in->step <= a->warmup || a->n >= 256) return;
  a->ms[a->n] = in->step_ms;
  a->sent[a->n] = (double)in->comm.bytes_sent;
  a->wait[a->n] = in->comm.wait_s;
  a->n++;
}

static int cmp_d(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

static double median(double *v, int64_t n) {
  if (n < 1) return NAN;
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return v[n / 2];
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The step's collectives alone: DDP/none/opt an all-reduce of Ψ floats; full two gathers
 * and a reduce-scatter of Ψ; grad_op one gather and a reduce-scatter. Median of 3. */
static zt_status comm_alone(zt_comm *w, zt_shard_strategy s, bool ddp, int64_t psi, double *out) {
  int n = zt_comm_size(w);
  int64_t pad = (psi + n - 1) / n * n;
  zt_tensor *full = NULL, *shard = NULL;
  ZT_TRY(zt_tensor_zeros(1, (int64_t[]){pad}, ZT_DTYPE_F32, ZT_CPU, &full));
  zt_status st = zt_tensor_zeros(1, (int64_t[]){pad / n}, ZT_DTYPE_F32, ZT_CPU, &shard);
  double t[3];
  for (int r = 0; r < 3 && !st; r++) {
    st = zt_barrier(w);
    double t0 = now_s();
    if (ddp || s == ZT_SHARD_NONE || s == ZT_SHARD_OPT) {
      if (!st) st = zt_all_reduce(w, full, ZT_REDUCE_SUM);
    } else {
      int gathers = s == ZT_SHARD_GRAD_OP ? 1 : 2;
      for (int g = 0; g < gathers && !st; g++) st = zt_all_gather(w, shard, full);
      if (!st) st = zt_reduce_scatter(w, full, shard, ZT_REDUCE_SUM);
    }
    t[r] = now_s() - t0;
  }
  zt_tensor_free(full);
  zt_tensor_free(shard);
  if (!st) *out = median(t, 3);
  return st;
}

int zt_cli_bench_dp(int argc, char **argv) {
  zt_train_config c;
  zt_train_config_default(&c);
  c.eval_every = 0;
  c.eval_batches = 1;
  c.grad_clip = 1.0;
  int64_t steps = 5, warmup = 1;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help")) {
      printf("usage: mpirun -np N zt bench dp --model NAME --batch B --seq T --shard MODE [--steps N (5)]\n"
             "       [--warmup-steps N (1)] [zt train options]\n");
      return 0;
    }
    if (strncmp(a, "--", 2) || !v) {
      fprintf(stderr, "zt bench dp: bad argument '%s' (options take a value; see --help)\n", a);
      return 2;
    }
    i++;
    if (!strcmp(a, "--steps") || !strcmp(a, "--warmup-steps")) {
      char *end;
      long long x = strtoll(v, &end, 10);
      if (*end || x < (strcmp(a, "--steps") ? 0 : 1) || x > 200) {
        fprintf(stderr, "zt bench dp: bad value '%s' for %s\n", v, a);
        return 2;
      }
      *(strcmp(a, "--steps") ? &warmup : &steps) = x;
    } else if (zt_train_config_set(&c, a + 2, v)) {
      fprintf(stderr, "zt bench dp: %s\n", zt_last_error());
      return 2;
    }
  }
  c.steps = steps + warmup;
  zt_comm *w = NULL;
  if (zt_comm_world(&w)) return zt_cli_fail("bench dp");
  int rank = zt_comm_rank(w), n = zt_comm_size(w);
  bench_acc acc = {.warmup = warmup};
  zt_train_result res;
  int rc = 1;
  zt_gpt2_config g;
  double alone = 0;
  bool ddp = c.shard == ZT_SHARD_NONE;
  if (zt_train_model_config(&c, &g) || zt_train_run_on(&c, w, on_step, &acc, &res, NULL)) goto fail;
  int64_t psi = zt_gpt2_config_num_params(&g);
  if (comm_alone(w, c.shard, ddp, psi, &alone)) goto fail;
  // per rank: PARAM+GRAD+OPTIM peak, peak total, rss, median bytes sent and wait per step
  double mine[5] = {(double)(acc.mem.peak[ZT_MEM_TAG_PARAM] + acc.mem.peak[ZT_MEM_TAG_GRAD] +
                             acc.mem.peak[ZT_MEM_TAG_OPTIM]),
                    (double)acc.mem.peak_total, (double)acc.rss, median(acc.sent, acc.n), median(acc.wait, acc.n)};
  double med_ms = median(acc.ms, acc.n);
  zt_tensor *in = NULL, *all = NULL;
  if (zt_tensor_from_data(1, (int64_t[]){5}, ZT_DTYPE_F64, mine, &in) ||
      zt_tensor_zeros(1, (int64_t[]){5 * (int64_t)n}, ZT_DTYPE_F64, ZT_CPU, &all) || zt_all_gather(w, in, all)) {
    zt_tensor_free(in), zt_tensor_free(all);
    goto fail;
  }
  if (rank == 0) {
    double P = (double)psi, N = n, f = 4.0 * (N - 1) / N;
    double mem_formula = 16 * P, traffic = 2 * P * f;
    const char *name = ddp ? (n > 1 ? "ddp" : "single") : zt_shard_strategy_name(c.shard);
    if (!ddp) switch (c.shard) {
      case ZT_SHARD_FULL: mem_formula = 16 * P / N; traffic = 3 * P * f; break;
      case ZT_SHARD_GRAD_OP: mem_formula = 4 * P + 12 * P / N; break;
      case ZT_SHARD_OPT: mem_formula = 8 * P + 8 * P / N; break;
      default: break;
      }
    printf("{\"bench\":\"dp\",\"model\":\"%s\",\"params\":%lld,\"ranks\":%d,\"shard\":\"%s\",\"batch\":%lld,\"seq\":%lld,"
           "\"steps\":%lld,\"ms_per_step\":%.1f,\"mem_formula_bytes\":%.0f,\"traffic_formula_bytes\":%.0f,"
           "\"comm_alone_ms\":%.1f,\"per_rank\":[",
           c.model, (long long)psi, n, name, (long long)c.batch, (long long)c.seq, (long long)acc.n, med_ms,
           mem_formula, traffic, alone * 1e3);
    const double *v = zt__tensor_ptr(all);
    for (int r = 0; r < n; r++, v += 5)
      printf("%s{\"rank\":%d,\"param_grad_optim_peak\":%.0f,\"peak_total\":%.0f,\"peak_rss\":%.0f,"
             "\"bytes_sent_per_step\":%.0f,\"comm_wait_ms\":%.1f,\"overlap\":%.3f}",
             r ? "," : "", r, v[0], v[1], v[2], v[3], v[4] * 1e3, alone > 0 ? fmax(0, 1 - v[4] / alone) : 0.0);
    printf("]}\n");
  }
  zt_tensor_free(in), zt_tensor_free(all);
  rc = 0;
fail:
  if (rc) rc = zt_cli_fail("bench dp");
  zt_comm_free(w);
  return rc;
}
