/* The planner's cost model (plan_internal.h): seconds of a span of the model's forward and
 * backward from the calibration's rates (GEMMs at the GEMM rate, attention at its own, the
 * elementwise ops by the bytes they move), of the optimizer, of the collectives, and the RAM a
 * process holds besides its accounting. Every predictor times through these, so a better
 * model here is better for every mode. */
#include "train/plan_internal.h"

/* Elementwise traffic of one block, in f32 values per token: forward (norms, activation, residual
 * adds, softmax's rows aside), backward twice that. A first model, to be fitted. */
#define ELEM_HIDDEN 12.0
#define ELEM_FFN 3.0
/* The head's loss: values per token per vocabulary entry moved by softmax and its backward. */
#define ELEM_VOCAB 6.0

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
  *f = (blk_mm + head_mm) / gemm + blk_at / attn + (blk_el + head_el + emb_el) / elem;
  *b = (blk_mm + head_mm) / gemm + 2 * blk_at / attn + 2 * (blk_el + head_el + emb_el) / elem;
  *w = (blk_mm + head_mm) / gemm;
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

double zt__plan_optim_s(const zt__plan_in *in, int64_t n) {
  return 28.0 * (double)n / rate(in, ZT_PLAN_FIG_ELEM); /* AdamW: p, g, m, v read; p, m, v written */
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

void zt__plan_finish(const zt__plan_in *in, zt_plan_prediction *p) {
  p->base = (int64_t)in->cal->value[ZT_PLAN_FIG_BASE];
  p->rss = p->accounted + p->cache + p->io + p->base;
}
