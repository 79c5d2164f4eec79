/* zt bench dp: data-parallel training steps under mpirun (DDP or an FSDP strategy) on the
 * built-in data, and one JSON object (rank 0) with, per rank, the peak of the model states
 * (PARAM + GRAD + OPTIM, the peak of the sum, from the accounting, after the warm-up step)
 * against a formula, the bytes communicated per step against formulas, and the fraction of
 * communication time hidden behind compute. Ψ parameters, N ranks, G ranks per shard group,
 * f32; U_max: the largest unit (for GPT-2 the root: wte, wpe, ln_f); ring collectives send
 * (N-1)/N of the buffer.
 *   memory  ddp 16Ψ; full/hybrid 16Ψ/G + 8 U_max (the formula: the largest unit's full
 *           parameters and grads); grad_op and opt 4Ψ (full parameters) + 16Ψ/N (master
 *           shards, grad shards, optimizer state) + 4 U_max (one unit's full grads).
 *   traffic the formula: ddp, grad_op, opt 2Ψ; full 3Ψ; times 4 (N-1)/N bytes (hybrid:
 *           3Ψ inside a group of G plus 2Ψ/G across the N/G groups). And
 *           the exact model of zerotrain's schedule (padded units; full does not gather the
 *           root again for backward, as PyTorch FSDP; the grad-mask and norm all-reduces).
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
  /* peaks from here on: steady-state steps, not the set-up (every rank builds the whole
   * model once before sharding it) */
  if (in->step == a->warmup) zt_mem_reset_peaks();
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

/* The step's collectives alone: DDP/none/opt an all-reduce of Ψ floats; full two gathers
 * and a reduce-scatter of Ψ; grad_op one gather and a reduce-scatter. Median of 3. */
static zt_status comm_alone(zt_comm *w, zt_shard_strategy s, bool ddp, int64_t psi, double *out) {
  int n = zt_comm_size(w);
  int64_t pad = (psi + n - 1) / n * n;
  zt_tensor *full = NULL, *shard = NULL;
  zt_status st = zt_tensor_zeros(1, (int64_t[]){pad}, ZT_DTYPE_F32, ZT_CPU, &full);
  if (st) return st;
  st = zt_tensor_zeros(1, (int64_t[]){pad / n}, ZT_DTYPE_F32, ZT_CPU, &shard);
  double t[3];
  for (int r = 0; r < 3 && !st; r++) {
    st = zt_barrier(w);
    double t0 = zt_clock_now();
    if (ddp || s == ZT_SHARD_NONE || s == ZT_SHARD_OPT) {
      if (!st) st = zt_all_reduce(w, full, ZT_REDUCE_SUM);
    } else {
      int gathers = s == ZT_SHARD_GRAD_OP ? 1 : 2;
      for (int g = 0; g < gathers && !st; g++) st = zt_all_gather(w, shard, full);
      if (!st) st = zt_reduce_scatter(w, full, shard, ZT_REDUCE_SUM);
    }
    t[r] = zt_clock_now() - t0;
  }
  zt_tensor_free(full);
  zt_tensor_free(shard);
  if (!st) *out = median(t, 3);
  return st;
}

/* The formulas of the header comment for this run. */
static void formulas(const zt_train_config *c, const zt_lm_config *lc, int n, double *mem, double *traffic,
                     double *model) {
  zt_lm_dims g = zt_lm_config_dims(lc);
  double L = g.n_layer, N = n;
  double psi = (double)g.params;
  double u_root = (double)(g.params - g.n_layer * g.block_params), u_blk = (double)g.block_params;
  double u_max = fmax(u_root, u_blk);
  int G = c->parallel.shard == ZT_SHARD_HYBRID ? c->parallel.hybrid_group : n;
  double fg = G > 1 ? (G - 1.0) / G : 0, fn = n > 1 ? (N - 1) / N : 0;
  double p_root = ceil(u_root / G) * G, p_blk = ceil(u_blk / G) * G; /* padded units */
  double ring = 4 * fg;                                                /* bytes per element, gather or RS */
  double small = 2 * fn * 4 * (4 + 12 * L) + (G > 1 ? 2 * fg * 8 : 0); /* grad mask + norm all-reduces */
  switch (c->parallel.shard) {
  case ZT_SHARD_NONE: /* DDP */
    *mem = 16 * psi;
    *traffic = *model = 2 * psi * 4 * fn;
    return;
  case ZT_SHARD_FULL:
  case ZT_SHARD_HYBRID: {
    double R = N / G, rep = R > 1 ? 2 * (R - 1) / R * 4 : 0; /* HYBRID: shards all-reduced across groups */
    *mem = 16 * psi / G + 8 * u_max;
    *traffic = 3 * psi * ring + psi / G * rep; /* FULL inside a group, 2 x shard across the R groups */
    *model = L * p_blk * 3 * ring + p_root * 2 * ring + (L * p_blk + p_root) / G * rep + small;
    return;
  }
  default: /* GRAD_OP (one gather in forward), OPT (one after the step): gather + RS per unit */
    *mem = 4 * psi + 16 * psi / N + 4 * u_max;
    *traffic = 2 * psi * 4 * fn;
    *model = (L * p_blk + p_root) * 2 * ring + small;
    return;
  }
}

int zt_cli_bench_dp(int argc, char **argv) {
  zt_train_config c;
  zt_train_config_default(&c);
  c.log.eval_every = 0;
  c.log.eval_batches = 1;
  c.optim.grad_clip = 1.0;
  int64_t steps = 5, warmup = 1;
  if (zt_cli_wants_help(argc, argv)) {
    printf("usage: mpirun -np N zt bench dp --model NAME --batch B --seq T --shard MODE [--steps N (5)]\n"
           "       [--warmup-steps N (1)] [zt train options]\n");
    return 0;
  }
  int rc = zt_cli_bench_options("bench dp", argc, argv, &c, &steps, &warmup);
  if (rc) return rc;
  c.steps = steps + warmup;
  zt_comm *w = NULL;
  if (zt_comm_world(&w)) return zt_cli_fail("bench dp");
  int rank = zt_comm_rank(w), n = zt_comm_size(w);
  bench_acc acc = {.warmup = warmup};
  zt_train_result res;
  rc = 1;
  zt_lm_config g;
  double alone = 0;
  bool ddp = c.parallel.shard == ZT_SHARD_NONE;
  if (zt_train_model_config(&c, &g) || zt_train_run_on(&c, w, on_step, &acc, &res, NULL)) goto fail;
  int64_t psi = zt_lm_config_dims(&g).params;
  if (comm_alone(w, c.parallel.shard, ddp, psi, &alone)) goto fail;
  // per rank: model-state peak, peak total, rss, median bytes sent and wait per step
  double mine[5] = {(double)acc.mem.peak_state, (double)acc.mem.peak_total, (double)acc.rss, median(acc.sent, acc.n),
                    median(acc.wait, acc.n)};
  double med_ms = median(acc.ms, acc.n);
  zt_tensor *in = NULL, *all = NULL;
  if (zt_tensor_from_data(1, (int64_t[]){5}, ZT_DTYPE_F64, mine, &in) ||
      zt_tensor_zeros(1, (int64_t[]){5 * (int64_t)n}, ZT_DTYPE_F64, ZT_CPU, &all) || zt_all_gather(w, in, all)) {
    zt_tensor_free(in), zt_tensor_free(all);
    goto fail;
  }
  if (rank == 0) {
    double mem_formula, traffic, model;
    formulas(&c, &g, n, &mem_formula, &traffic, &model);
    const char *name = ddp ? (n > 1 ? "ddp" : "single") : zt_shard_strategy_name(c.parallel.shard);
    printf("{\"bench\":\"dp\",\"model\":\"%s\",\"params\":%lld,\"ranks\":%d,\"shard\":\"%s\",\"batch\":%lld,\"seq\":%lld,"
           "\"prefetch\":%s,\"steps\":%lld,\"ms_per_step\":%.1f,\"mem_formula_bytes\":%.0f,"
           "\"traffic_formula_bytes\":%.0f,\"traffic_model_bytes\":%.0f,\"comm_alone_ms\":%.1f,\"per_rank\":[",
           c.model.preset, (long long)psi, n, name, (long long)c.data.batch, (long long)c.data.seq, c.parallel.prefetch ? "true" : "false",
           (long long)acc.n, med_ms, mem_formula, traffic, model, alone * 1e3);
    for (int r = 0; r < n; r++) {
      double v[5]; /* read through the tensor API: the CLI touches no storage bytes */
      for (int k = 0; k < 5; k++) v[k] = zt_tensor_get(all, 5 * r + k);
      printf("%s{\"rank\":%d,\"model_state_peak\":%.0f,\"peak_total\":%.0f,\"peak_rss\":%.0f,"
             "\"bytes_sent_per_step\":%.0f,\"comm_wait_ms\":%.1f,\"overlap\":%.3f}",
             r ? "," : "", r, v[0], v[1], v[2], v[3], v[4] * 1e3, alone > 0 ? fmax(0, 1 - v[4] / alone) : 0.0);
    }
    printf("]}\n");
  }
  zt_tensor_free(in), zt_tensor_free(all);
  rc = 0;
fail:
  if (rc) rc = zt_cli_fail("bench dp");
  zt_comm_free(w);
  return rc;
}
