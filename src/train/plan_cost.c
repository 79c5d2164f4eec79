/* The planner's cost model (plan_internal.h): seconds of a span of the model's forward and
 * backward from the calibration's rates (GEMMs at the GEMM rate, attention at its own, the
 * elementwise ops by the bytes they move), of the optimizer, of the collectives, and the RAM a
 * process holds besides its accounting. Every predictor times through these, so a better
 * model here is better for every mode. */
#include <unistd.h>

#include "train/plan_internal.h"

/* Elementwise traffic of one block, in f32 values a token moved (read + written) in forward, from
 * the ops a GPT-2 or Llama block runs between its GEMMs: two norms (2 each), two residual adds (3
 * each) and the GEMMs' bias adds and the attention's reshapes (about 2 more), C-wide: 12; the MLP's
 * activation (read, write) and its bias or gate product: 3 ffn-wide. Backward moves about twice
 * that (each op's grad reads its saved inputs and the incoming grad). Not refit: the machine these
 * were checked on was loaded (its sgemm rate varied 39-175 GFLOP/s between minutes). */
#define ELEM_HIDDEN 12.0
#define ELEM_FFN 3.0
/* The LM head (src/ops/lm_head.c) is one fused op that makes its grads in forward: per token and
 * vocabulary entry it writes the logits (its GEMM), reads them for the row's max and again for the
 * exponentials' sum, and writes the softmax-minus-one-hot grad in place: 4 values, all in forward,
 * as are its three GEMMs (logits, dx, dW); its backward only scales what forward made. */
#define ELEM_VOCAB 4.0

static double rate(const zt__plan_in *in, zt_plan_figure f) {
  double v = in->cal->value[f];
  return v > 0 ? v : 1;
}

int64_t zt__plan_params(const zt__plan_in *in, int b0, int b1, bool embed, bool head) {
  const zt_lm_dims *d = &in->d;
  int64_t n = (int64_t)(b1 - b0) * d->block_params;
  if (embed) n += d->embed_params;
  if (head && !(embed && d->tied)) n += d->out_params; /* a tied head is the embedding, counted once */
  return n;
}

void zt__plan_compute_fbw(const zt__plan_in *in, int64_t rows, int b0, int b1, bool embed, bool head, double *f,
                          double *b, double *w) {
  const zt_lm_dims *d = &in->d;
  double T = (double)in->sp->seq, tok = (double)rows * T, L = b1 - b0;
  double gemm = rate(in, ZT_PLAN_FIG_GEMM) * 1e9, attn = rate(in, ZT_PLAN_FIG_ATTN) * 1e9;
  double elem = rate(in, ZT_PLAN_FIG_ELEM);
  double blk_mm = 2.0 * (double)d->block_params * tok * L;     /* forward; B and W each as much */
  double blk_at = 4.0 * T * (double)d->attn_width * tok * L;   /* forward; backward twice */
  double blk_el = 4.0 * (ELEM_HIDDEN * d->hidden + ELEM_FFN * d->ffn) * tok * L;
  double head_mm = head ? 2.0 * (double)d->vocab * d->hidden * tok : 0;
  double head_el = head ? 4.0 * ELEM_VOCAB * d->vocab * tok : 0;
  double emb_el = embed ? 4.0 * 4.0 * d->hidden * tok : 0;
  *f = (blk_mm + 3 * head_mm) / gemm + blk_at / attn + (blk_el + head_el + emb_el) / elem;
  *b = blk_mm / gemm + 2 * blk_at / attn + 2 * (blk_el + emb_el) / elem;
  *w = blk_mm / gemm;
}

double zt__plan_compute_s(const zt__plan_in *in, int64_t rows, int b0, int b1, bool embed, bool head,
                          zt_recompute recompute) {
  double f, b, w;
  zt__plan_compute_fbw(in, rows, b0, b1, embed, head, &f, &b, &w);
  double extra = 0;
  if (recompute != ZT_RECOMPUTE_NONE && b1 > b0) {
    double bf, bb, bw;
    zt__plan_compute_fbw(in, rows, b0, b1, false, false, &bf, &bb, &bw);
    zt_act_cost a = zt_lm_act_cost(&in->sp->model, recompute, (zt_checkpoint_policy){0});
    extra = a.work * bf;
  }
  return f + b + w + extra;
}

/* AdamW reads p, g, m, v and writes p, m, v (28 bytes a parameter); the clipping before it (on by
 * default, zt_train_config.optim.grad_clip 1.0) reads every grad once for the norm and scales it
 * in place (12 more). */
double zt__plan_optim_s(const zt__plan_in *in, int64_t n) {
  return (28.0 + 12.0) * (double)n / rate(in, ZT_PLAN_FIG_ELEM);
}

static double coll(const zt__plan_in *in, int n, double moved) {
  if (n <= 1) return 0;
  return in->cal->value[ZT_PLAN_FIG_COMM_LAT] + moved / rate(in, ZT_PLAN_FIG_COMM_BW);
}
double zt__plan_allreduce_s(const zt__plan_in *in, int n, int64_t bytes) {
  return coll(in, n, 2.0 * (n - 1) / (n > 0 ? n : 1) * (double)bytes);
}
double zt__plan_allgather_s(const zt__plan_in *in, int n, int64_t bytes) {
  return coll(in, n, (double)(n - 1) / (n > 0 ? n : 1) * (double)bytes);
}
double zt__plan_p2p_s(const zt__plan_in *in, int64_t bytes) { return coll(in, 2, (double)bytes); }

double zt__plan_head_rows(double rows, double V) {
  double max = (double)((int64_t)100 << 20) / (V * 4);
  max = max < 16 ? 16 : max > 512 ? 512 : (double)(int64_t)max;
  double n = (double)(int64_t)((rows + max - 1) / max);
  int64_t r = (int64_t)((rows + n - 1) / n);
  r = (r + 15) / 16 * 16;
  return (double)r < rows ? (double)r : rows;
}

/* The pool, every predictor's rule for the allocator's cache (src/core/host_alloc.c), each in its
 * own terms (plan_dp.c, plan_pipeline.c; OffloadModel's, plan_offload.c: the bound its plan leaves, or by
 * kind of block with the optimizer's state in RAM): the
 * cache hands a freed block only to an allocation of its rounded size, and the tags' blocks are of
 * different sizes (activations are rows x widths, grads and moments parameter-shaped, TEMP the
 * transients'), so a training loop, which makes the same blocks every step, ends up holding each
 * tag's own peak at once: the RSS reaches the sum of the tags' peaks, the cache being that sum
 * less the accounted total's peak (measured, one process: RSS less that sum is a constant per
 * model, 17.4-18.8 MiB over thirteen gpt2-tiny runs of every memory mode, 136.6 and 138.4 MiB for
 * GPT-2 124M plain and full recompute, 134.9 MiB SmolLM). It stays under the cache's bounds: the
 * live bytes' high mark (the accounted peak) and its byte limit (zt_mem_cache_limit). */
void zt__plan_finish(const zt__plan_in *in, zt_plan_prediction *p) {
  p->base = (int64_t)in->cal->value[ZT_PLAN_FIG_BASE];
  p->rss = p->accounted + p->cache + p->io + p->base;
}

/* DDP (src/strategies/ddp.c): buckets of 25 MiB (zt_ddp_options_default) start from backward's grad hooks, in reverse
 * parameter order, so their all-reduces run behind the rest of backward (two thirds of a step's
 * compute: B and W); what is exposed is the part longer than that, and at least the last bucket's
 * (the embedding's grads come last, after every block). FSDP (fsdp_run.c): FULL and HYBRID gather
 * every unit in forward and again in backward, behind the unit before it (prefetch), and
 * reduce-scatter each unit's grads behind the next unit's backward: exposed is what passes the
 * compute, and the first gather, which nothing hides. GRAD_OP gathers once (forward); OPT keeps
 * the parameters and all-gathers the updated shards after the update, behind nothing. HYBRID adds
 * the shards' all-reduce across the replicas, at the end of backward. */
#define BACKWARD_SHARE (2.0 / 3.0)
bool zt__plan_cores_shared(const zt__plan_in *in) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int t = in->cal->threads > 0 ? in->cal->threads : 1;
  return in->sp->world > 1 && in->cal->world == in->sp->world && cores > 0 && (long)in->sp->world * t > cores;
}

double zt__plan_shared_speedup(const zt__plan_in *in, double k) {
  if (!zt__plan_cores_shared(in) || !(k > 0)) return 1;
  double cores = (double)sysconf(_SC_NPROCESSORS_ONLN), t = in->cal->threads > 0 ? in->cal->threads : 1;
  double all = cores / ((double)in->sp->world * t), some = cores / (k * t);
  return (some < 1 ? some : 1) / (all < 1 ? all : 1);
}

double zt__plan_dp_comm_s(const zt__plan_in *in, const zt_plan_config *c, double Pb, double blk, double root,
                          double compute_s) {
  int n = c->dp;
  if (n <= 1) return 0;
  /* cores shared: a collective's progress takes the cores the compute needs, so nothing hides
   * (measured: gpt2-124m DDP at 4 ranks on 2 cores, 17-33% above the step with the all-reduce hidden) */
  if (zt__plan_cores_shared(in)) compute_s = 0;
  double bwd = BACKWARD_SHARE * compute_s;
  if (c->shard == ZT_SHARD_NONE) {
    double ar = zt__plan_allreduce_s(in, n, (int64_t)Pb);
    double last = zt__plan_allreduce_s(in, n, (int64_t)(Pb < ZT__PLAN_DDP_BUCKET ? Pb : ZT__PLAN_DDP_BUCKET));
    double hidden = ar - bwd;
    return hidden > last ? hidden : last;
  }
  int G = c->shard == ZT_SHARD_HYBRID && c->hybrid_group > 1 ? c->hybrid_group : n;
  double gather = zt__plan_allgather_s(in, G, (int64_t)Pb); /* every unit once */
  double rs = zt__plan_allgather_s(in, G, (int64_t)Pb);     /* a reduce-scatter moves as much */
  double first = zt__plan_allgather_s(in, G, (int64_t)(root > blk ? root : blk));
  double exposed;
  switch (c->shard) {
  case ZT_SHARD_OPT: {
    double h = rs - bwd;
    exposed = (h > 0 ? h : 0) + gather; /* the after-step all-gather */
    break;
  }
  case ZT_SHARD_GRAD_OP: {
    double h = gather + rs - compute_s;
    exposed = (h > 0 ? h : 0) + first;
    break;
  }
  default: { /* FULL, HYBRID */
    double h = 2 * gather + rs - compute_s;
    exposed = (h > 0 ? h : 0) + first;
    if (c->shard == ZT_SHARD_HYBRID) exposed += zt__plan_allreduce_s(in, n / G, (int64_t)(Pb / G));
    break;
  }
  }
  return exposed;
}

/* The activation offload's disk: saves are written behind forward and read back ahead of backward
 * (its prefetch), so only the part past the compute shows. */
double zt__plan_io_s(const zt__plan_in *in, double read, double written, double compute_s) {
  double t = read / rate(in, ZT_PLAN_FIG_READ) + written / rate(in, ZT_PLAN_FIG_WRITE);
  return t > compute_s ? t - compute_s : 0;
}
