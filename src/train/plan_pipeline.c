/* The planner's prediction of pipelines (plan_internal.h): P stages over P ranks, every schedule
 * family, D replicas (DDP or FSDP of each stage). Time: the simulator over the cost model's F, B, W
 * of each stage, plus the update, the replicas' collectives and the tied embedding's sum. Memory:
 * each rank's own list replayed in order, counting what the executor and the ops allocate by tag
 * (the counts follow src/strategies/pipeline/execute.c, pipeline_step.c, zero.c, lm_head.c and the
 * families' zt_act_cost; those marked "measured" were read off per-action traces of GPT-2 tiny and
 * 124M and SmolLM-135M runs; test_plan_pipeline checks them against runs). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "train/plan_internal.h"
#include "zt/pipeline.h"


/* One stage of the cut and what one microbatch through it holds, in bytes (tok: its rows x seq
 * tokens, 4-byte values). */
typedef struct stage_mem {
  int b0, b1, rank;
  bool embed, head, in_grad; /* in_grad: B makes an input grad (every stage but the first) */
  bool table;                /* its first weight pass makes a V x C table's grad (not a tied table's second holder) */
  bool recompute;
  int64_t params;
  double kept;     /* ACTIVATION from F to B */
  double f_tr;     /* F's peak over what it started from (recompute) or ended with (none) */
  double gout;     /* the received output grad (ACTIVATION, right before B) */
  double w_rec;    /* ACTIVATION B leaves for W */
  double w_tr;     /* W's transient over that (the first stage's deferred backward recomputes) */
  double dy;       /* TEMP B leaves for W: the GEMMs' output grads (and the input grad sent back) */
  double gin;      /* TEMP: the input grad sent back, alive until the stage's next B */
  double f_temp, b_temp, w_temp; /* TEMP over the records: the head's logits chunk; B's; W's */
  double b_tot;    /* all tags together: B's peak over where it ends */
  double b_rec;    /* ACTIVATION B makes again over what it started with (recompute) */
} stage_mem;

/* The stage cut of --pp-balance even (pipeline_train.c's partition): L / S blocks each, the
 * first L % S stages one more. */
static void cut_even(int S, int L, int *first, int *count) {
  for (int s = 0, at = 0; s < S; s++) {
    count[s] = L / S + (s < L % S);
    first[s] = at, at += count[s];
  }
}

/* Values per token of a block, by family: its MLP's inner tensors (GPT-2: c_fc's output;
 * Llama: gate and up) and the attention projection's output width (q, k and v). */
static double mlp_inner(const zt_lm_config *m, const zt_lm_dims *d) {
  return m->family == ZT_LM_LLAMA ? 2.0 * d->ffn : (double)d->ffn;
}
static double qkv_width(const zt_lm_config *m, const zt_lm_dims *d) {
  if (m->family != ZT_LM_LLAMA) return 3.0 * d->hidden;
  const zt_llama_config *l = &m->llama;
  return (double)d->attn_width + 2.0 * l->n_kv_head * l->head_dim;
}
/* Values per token a block's forward holds at once without saving (no grad, or recomputed
 * blocks): the residual stream, a norm's output and the MLP's inner tensors with their product
 * (measured: Llama 3 C + 3 ffn; GPT-2 11 C for a one-block stage, 12 C for more, the span's input
 * held beside them). */
static double block_live(const zt_lm_config *m, const zt_lm_dims *d, int blocks) {
  double gpt2_input = m->family != ZT_LM_LLAMA && blocks > 1 ? d->hidden : 0;
  return 3.0 * d->hidden + mlp_inner(m, d) + d->ffn + gpt2_input;
}

static void stage_fill(const zt__plan_in *in, const zt_plan_config *c, const zt_pipeline_schedule *s, int S,
                       int64_t rows, int st, int b0, int b1, stage_mem *m) {
  const zt_lm_dims *d = &in->d;
  double T = (double)in->sp->seq, n4 = (double)rows * T * 4, C = d->hidden, V = d->vocab;
  int nb = b1 - b0;
  memset(m, 0, sizeof *m);
  m->b0 = b0, m->b1 = b1, m->rank = zt_pipeline_stage_rank(s, st);
  m->embed = st == 0, m->head = st == S - 1, m->in_grad = st > 0;
  m->table = m->embed || m->head;
  m->recompute = c->recompute != ZT_RECOMPUTE_NONE && nb > 0;
  m->params = zt__plan_params(in, b0, b1, m->embed, m->head);
  zt_act_cost a = zt_lm_act_cost(&in->sp->model, c->recompute, (zt_checkpoint_policy){0});
  zt_act_cost none = zt_lm_act_cost(&in->sp->model, ZT_RECOMPUTE_NONE, (zt_checkpoint_policy){0});
  bool next_remote = st < S - 1 && zt_pipeline_stage_rank(s, st + 1) != m->rank;
  bool prev_remote = st > 0 && zt_pipeline_stage_rank(s, st - 1) != m->rank;
  double out_c = next_remote ? C : 0; /* the output stays in the slot until B (an alias on one rank) */
  m->kept = n4 * (nb * (a.input + a.kept) + out_c);
  if (m->embed) m->kept += T * 4;                       /* the position ids (i32) */
  if (m->head) m->kept += n4 * (none.out - C) + 4;      /* the final norm's, less the input grad; the loss */
  m->f_tr = n4 * (m->recompute ? block_live(&in->sp->model, d, nb) : C);
  m->gout = n4 * out_c;
  /* What W reads: the inputs of every GEMM (the norms' outputs, the attention's output, the MLP's
   * product: 3 C + ffn) and of both norms with their statistics, 5 C + ffn + 4 a block (GPT-2's
   * 9 C + 4 measured), and the final norm's input. Without recomputation they are saved tensors
   * already; with it, B makes them again. The first stage makes no input grad: its B only keeps
   * the received grad, and its W runs the whole backward. */
  const zt_lm_config *lm = &in->sp->model;
  double rec = n4 * (nb * (5 * C + d->ffn + 4) + (m->head ? C + 2 : 0));
  if (!m->in_grad) {
    m->w_rec = m->kept - m->gout;
    m->dy = m->gout, m->gin = 0;
    /* a block recomputed at a time: all of it, or selectively the share it keeps again (GPT-2
     * measured: 8 C + 6 a token, 4 C + ffn) */
    if (m->recompute)
      m->w_tr = n4 * (c->recompute == ZT_RECOMPUTE_FULL ? none.input + none.kept : 4 * C + d->ffn + 4);
  } else {
    m->w_rec = m->recompute ? rec : (rec < m->kept ? rec : m->kept);
    /* the output grads W multiplies: q, k and v's, both projections' (C each), the MLP's inner
     * ones and both norms' (GPT-2: 11 C a block, measured); the final norm's and the head's input
     * grad */
    m->gin = prev_remote ? n4 * C : 0;
    double dy_blk = qkv_width(lm, d) + 4 * C + mlp_inner(lm, d);
    m->dy = n4 * (nb * dy_blk + (m->head ? 2 * C : 0)) - m->gin; /* of which the input grad outlives W */
  }
  /* TEMP: the head's chunk of logits and its losses in F; in B the grads in flight; in W the
   * first stage's whole backward (its blocks' temporaries, 9 C a token, then the embedding's dense
   * table grad with its output grad), or the head's weight grad scaled by the loss scale */
  if (m->head) {
    double r = zt__plan_head_rows((double)rows * T, V);
    m->f_temp = r * V * 4 + r * 8;
  }
  m->b_temp = m->in_grad ? 2 * n4 * C : 0;
  /* measured (GPT-2 124M and tiny): B peaks 6 C a token over where it ends; recomputing all of a
   * block, its records for W pile up over what it kept (they are what it made again) */
  m->b_tot = 6 * n4 * C;
  if (m->recompute && c->recompute == ZT_RECOMPUTE_FULL) m->b_rec = m->w_rec;
  if (m->recompute && c->recompute == ZT_RECOMPUTE_SELECTIVE && m->in_grad) {
    /* selectively, B makes W's inputs again beside what the block kept, which stays until W:
     * the norms' outputs and the residual between them, the attention's output and the MLP's
     * product (GPT-2 and SmolLM measured: 4 C + ffn + 4 a token) */
    m->b_rec = n4 * nb * (4 * C + d->ffn + 4);
    m->w_rec = m->kept + m->b_rec;
  }
  double w = 0;
  if (!m->in_grad) w = n4 * 9 * C;
  if (m->embed && w < V * C * 4 + n4 * C) w = V * C * 4 + n4 * C;
  if (m->head && w < V * C * 4) w = V * C * 4;
  m->w_temp = w;
}

/* A rank's replay: its compute list in order, the bytes each action leaves and the peaks
 * within it, by tag, over `base` bytes that stay (states, token ids); and, for the allocator's
 * cache (pipe_rank_rss), GRAD's and TEMP's V x C blocks (the tables' grads, the head's weight
 * grads in flight, a table's transient grad) apart from their other bytes, each at its own peak. */
typedef struct rank_mem {
  int64_t own;         /* parameters of its stages, a tied table once */
  double act_peak, grad_peak, temp_peak, total_peak;
  double grads;        /* its stages' grads (all of them exist at the step's end) */
  double temp_end;     /* TEMP still held at the end of the schedule (input grads sent back) */
  int vc_peak, vc_end; /* V x C blocks of GRAD and TEMP: the most live at once; GRAD's at the end */
  double grad_rest, temp_rest; /* GRAD's and TEMP's other bytes at their peaks */
} rank_mem;

/* Each tag's peak within an action, and the peak of their sum (tot < 0: their sum: they peak
 * together); gv and tv: V x C blocks (vc bytes each) of g and t. */
static void note(rank_mem *o, double base, double vc, double a, double g, double t, double tot, int gv, int tv) {
  if (a > o->act_peak) o->act_peak = a;
  if (g > o->grad_peak) o->grad_peak = g;
  if (t > o->temp_peak) o->temp_peak = t;
  if (gv + tv > o->vc_peak) o->vc_peak = gv + tv;
  if (g - gv * vc > o->grad_rest) o->grad_rest = g - gv * vc;
  if (t - tv * vc > o->temp_rest) o->temp_rest = t - tv * vc;
  if (tot < 0) tot = base + a + g + t;
  if (tot > o->total_peak) o->total_peak = tot;
}

static zt_status replay(const zt__plan_in *in, const zt_pipeline_schedule *s, int r, const stage_mem *sm,
                        double base, rank_mem *out) {
  const zt_lm_dims *d = &in->d;
  double dW = (double)d->vocab * d->hidden * 4; /* the head's weight grad, made in its forward */
  int S = zt_pipeline_stage_count(s);
  bool *seen = calloc((size_t)S, sizeof *seen);
  double *gin = calloc((size_t)S, sizeof *gin);
  if (!seen || !gin) {
    free(seen), free(gin);
    return ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  }
  double act = 0, grad = 0, temp = 0;
  int gv = 0; /* V x C blocks in grad */
  for (int i = 0; i < s->n_actions[r]; i++) {
    zt_pipeline_action a = s->actions[r][i];
    const stage_mem *m = &sm[a.stage];
    if (a.op == ZT_PIPELINE_OP_F) {
      double before = act;
      act += m->kept;
      if (m->head) grad += dW, gv++; /* saved by the fused head until its weight pass */
      note(out, base, dW, m->recompute ? before + m->f_tr : act + m->f_tr, grad, temp + m->f_temp, -1, gv, 0);
      continue;
    }
    if (a.op == ZT_PIPELINE_OP_B || a.op == ZT_PIPELINE_OP_BW) {
      /* the blocks' saved tensors go as their grads come: the sum peaks over where B ends (the
       * first stage's B only takes the received grad in) */
      double peak = act + m->gout + (m->in_grad ? m->b_rec : 0), t_peak = temp + m->dy + m->gin + m->b_temp;
      double tot = base + act + grad + temp + 2 * m->gout;
      act += m->w_rec - m->kept;
      temp += m->dy - gin[a.stage] + m->gin; /* the stage's previous input grad has left */
      gin[a.stage] = m->gin;
      if (m->in_grad) tot = base + act + grad + temp + m->b_tot;
      note(out, base, dW, peak, grad, t_peak, tot, gv, 0);
    }
    if (a.op == ZT_PIPELINE_OP_W || a.op == ZT_PIPELINE_OP_BW) {
      /* the head's scaled weight grad, or the embedding's dense one: a V x C transient */
      note(out, base, dW, act + m->w_tr, grad, temp + m->w_temp, -1, gv, m->head || m->embed);
      act -= m->w_rec;
      temp -= m->dy;
      if (!seen[a.stage]) { /* a stage's grads are made by its first weight pass */
        seen[a.stage] = true;
        grad += 4.0 * (double)m->params;
        gv += m->table;
      }
      if (m->head) grad -= dW, gv--; /* the saved one goes: its scaled copy is summed into the grad */
      note(out, base, dW, act, grad, temp, -1, gv, 0);
    }
  }
  out->grads = grad;
  out->temp_end = temp;
  out->vc_end = gv;
  free(seen);
  free(gin);
  return ZT_OK;
}

/* Rank r's peak RAM: its tags replayed (its peak of their sum the accounted peak), the blocks the
 * allocator's cache keeps beside them, and MPI's buffers of the collectives after the schedule.
 *
 * The cache hands a freed block only to an allocation of its rounded size, and keeps what it is
 * given (below its bounds), so what a rank holds grows to every size's own peak count of blocks
 * and stays there (measured per block size at the peak, GPT-2 124M and 350M, pp 2 alone and x dp 2
 * FSDP full: within 50 MiB of the rule below):
 *   - each kind of block at its own peak at once (the grads, the activations and TEMP's blocks
 *     are never all live together, and are all cached by the step's end: plan_cost.c's pool), the
 *     V x C blocks, which GRAD and TEMP share (a table's grad, the head's weight grads in flight,
 *     a table's transient grad), at the most of them live at once, and GRAD's and TEMP's other
 *     bytes at their own peaks (GPT-2 124M pp 4 zb-v, rank 0: 5 of them live at once, a block
 *     more than GRAD's peak holds, and its blocks' grads made after that peak: -6.4% without);
 *   - the head's chunk of logits beside TEMP's largest block (the table grads) when they differ;
 *   - not the other stages' parameters, which every rank builds and releases (pipeline_train.c):
 *     the run gives the set-up's cached blocks back before step 1 (loop.c);
 *   - an evaluation's blocks: it runs a replica's rows at once, so with several microbatches its
 *     activations and logits chunk are sizes of their own, made once and kept.
 * MPI: the tied table's sum between the first and the last stage's ranks is an in-place
 * all-reduce of the V x C grad, which OpenMPI copies into a buffer of its size first (measured:
 * GPT-2 124M pp 2, the first stage's rank 147 MiB above its blocks; x dp 2 FSDP full, beside
 * the reduction tree's unit: 310 MiB on the groups' first ranks), and the replicas' collectives
 * (below). An evaluation between steps leaves its blocks cached when the next step's collectives
 * run (zt_plan_space.eval_between); one only after the last step peaks apart from them. */
static zt_status pipe_rank_rss(const zt__plan_in *in, const zt_plan_config *c, const zt_pipeline_schedule *s,
                               const stage_mem *sm, int r, rank_mem *rmr, zt_plan_prediction *out) {
  const zt_plan_space *sp = in->sp;
  const zt_lm_dims *d = &in->d;
  int S = zt_pipeline_stage_count(s), D = c->dp, M = (int)c->microbatches;
  double rows = (double)(sp->batch / D / M), T = (double)sp->seq, table = 4.0 * (double)d->vocab * d->hidden;
  double own = (double)rmr->own;
  double shard = c->shard == ZT_SHARD_NONE ? own : (double)((rmr->own + D - 1) / D);
  bool zero = c->shard != ZT_SHARD_NONE, has0 = sm[0].rank == r, hasL = sm[S - 1].rank == r;
  /* ZeRO per step (zero.c): the shard of masters beside the gathered parameters; the update
   * over the shard */
  double param = 4 * own + (zero ? 4 * shard : 0), optim = 8 * shard;
  /* token ids and targets: the step's microbatches, the loop's microbatch and evaluation batch */
  double inputs = ((double)M + 1) * 2 * rows * T * 4 + 2.0 * (double)(sp->batch / D) * T * 4;
  ZT_TRY(replay(in, s, r, sm, param + optim + inputs, rmr));
  double grad = rmr->grad_peak, temp = rmr->temp_peak + inputs, total = rmr->total_peak, act = rmr->act_peak;
  double after = param + optim + inputs + rmr->grads + rmr->temp_end; /* the collectives after the schedule */
  if (zero) {
    /* reduce: a flat (D k) of the grads, then this rank's shard (k), the grads still there;
     * gather: a flat (D k) in TEMP */
    double flat = 4 * D * shard, g = rmr->grads + flat + 4 * shard;
    if (g > grad) grad = g;
    if (inputs + flat > temp) temp = inputs + flat;
    /* GRAD's and TEMP's other bytes peak here; the reduction's flat and the gather's are one
     * block size, which the cache keeps once */
    double g_rest = g - rmr->vc_end * table;
    bool both = g_rest > rmr->grad_rest && flat > rmr->temp_rest;
    if (g_rest > rmr->grad_rest) rmr->grad_rest = g_rest;
    if (flat > rmr->temp_rest) rmr->temp_rest = both ? 0 : flat;
    after += flat + 4 * shard;
    if (param + optim + inputs + flat > total) total = param + optim + inputs + flat;
  } else if (D > 1) {
    double bucket = 4 * own < ZT__PLAN_DDP_BUCKET ? 4 * own : ZT__PLAN_DDP_BUCKET;
    if (rmr->grads + bucket > grad) grad = rmr->grads + bucket;
    double g_rest = rmr->grads + bucket - rmr->vc_end * table;
    if (g_rest > rmr->grad_rest) rmr->grad_rest = g_rest;
    after += bucket;
  }
  if (after > total) total = after;
  /* the step's blocks, each kind at its own peak at once: the V x C ones, GRAD's and TEMP's others,
   * the activations (with the parameters and moments, which stay) */
  double pool = param + optim + act + rmr->vc_peak * table + rmr->grad_rest + rmr->temp_rest + inputs - total;
  double chunk = hasL ? sm[S - 1].f_temp : 0;
  if (chunk >= rmr->temp_rest) chunk = 0; /* the chunk is TEMP's peak block itself */
  int nb = 0;
  for (int k = 0; k < S; k++)
    if (sm[k].rank == r && sm[k].b1 - sm[k].b0 > nb) nb = sm[k].b1 - sm[k].b0;
  double cache = pool + chunk, lim = (double)zt_mem_cache_limit();
  if (cache > lim) cache = lim;

  /* the run's last evaluation: a replica's rows at once through the stages, without grads */
  double ev = nb ? (double)(sp->batch / D) * T * 4 * block_live(&in->sp->model, d, nb) : 0, ev_temp = 0;
  if (hasL) { /* the head's chunk of logits over those rows */
    double ch = zt__plan_head_rows((double)(sp->batch / D) * T, d->vocab);
    ev_temp = ch * d->vocab * 4 + ch * 8;
  }
  double ev_fresh = M > 1 ? ev + ev_temp : 0; /* one microbatch: the step's own sizes */
  double train_total = total;
  if (ev > act) act = ev;
  if (inputs + ev_temp > temp) temp = inputs + ev_temp;
  if (param + optim + inputs + ev + ev_temp > total) total = param + optim + inputs + ev + ev_temp;

  /* MPI's buffers after the schedule (above): the tied table's sum, and the replicas' */
  double mpi = d->tied && sm[0].rank != sm[S - 1].rank && (has0 || hasL) ? table : 0;
  if (zero && D > 1) {
    /* FSDP over the replicas reduces each unit down a binomial tree whose first rank holds a unit
     * a level, outside the accounting (plan_dp.c's rule; measured GPT-2 124M pp 2 x dp 2 full: the
     * stage's first rank 160 MB above the other, its largest unit the 154 MB table) */
    double unit = d->tied || has0 || hasL ? table : 4.0 * (double)d->block_params;
    mpi += ceil(log2((double)D)) * unit;
  } else if (D > 1) {
    /* DDP over the replicas averages one message at a time in place (pipeline_step.c), copied
     * the same way: the largest message, the table alone or a bucket, one at a time with the
     * tied sum (measured GPT-2 124M pp 2 x dp 2: every rank 147-151 MiB above its blocks, where
     * FSDP's tree adds to the tied sum). Its buckets' flats come in several sizes, each cached:
     * not counted (there, 80 MiB) */
    double own4 = 4.0 * own, bucket = own4 < ZT__PLAN_DDP_BUCKET ? own4 : ZT__PLAN_DDP_BUCKET;
    double msg = has0 || hasL ? (table > bucket ? table : bucket) : bucket;
    if (msg > mpi) mpi = msg;
  }
  double held = train_total + cache, peak, io;
  if (sp->eval_between) peak = held + ev_fresh + mpi, io = mpi;
  else if (mpi >= ev_fresh) peak = held + mpi, io = mpi;
  else peak = held + ev_fresh, io = 0;

  out->tag[ZT_MEM_TAG_PARAM] = (int64_t)param;
  out->tag[ZT_MEM_TAG_GRAD] = (int64_t)grad;
  out->tag[ZT_MEM_TAG_OPTIM] = (int64_t)optim;
  out->tag[ZT_MEM_TAG_ACTIVATION] = (int64_t)act;
  out->tag[ZT_MEM_TAG_TEMP] = (int64_t)temp;
  out->accounted = (int64_t)total;
  out->io = (int64_t)io;
  out->cache = peak - io > total ? (int64_t)(peak - io - total) : 0;
  zt__plan_finish(in, out);
  return ZT_OK;
}

zt_status zt__plan_predict_pipeline(const zt__plan_in *in, const zt_plan_config *c, zt_plan_prediction *out) {
  memset(out, 0, sizeof *out);
  const zt_plan_space *sp = in->sp;
  const zt_lm_dims *d = &in->d;
  int P = c->pp, D = c->dp, L = d->n_layer;
  int M = (int)c->microbatches;
  int64_t rows = sp->batch / D / M;
  if (rows < 1) return ZT_ERR(ZT_STATUS_INVALID_ARG, "batch %lld over %d replicas x %d microbatches leaves no row",
                              (long long)sp->batch, D, M);
  zt_pipeline_schedule *s = NULL;
  zt_pipeline_gen_options go = {.name = c->schedule, .ranks = P, .microbatches = M, .chunks = c->chunks};
  if (!strcmp(c->schedule, "auto")) go.mem_limit = P;
  ZT_TRY(zt_pipeline_generate(&go, &s));
  int S = zt_pipeline_stage_count(s);
  if (S > L + 2 && S > 2) { /* a middle stage without a block (pipeline_train.c refuses it) */
    zt_pipeline_schedule_free(s);
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%d stages for %d blocks: a middle stage would get none", S, L);
  }
  int *first = calloc((size_t)S, sizeof *first), *count = calloc((size_t)S, sizeof *count);
  stage_mem *sm = calloc((size_t)S, sizeof *sm);
  double *cost = calloc((size_t)S * 3, sizeof *cost);
  rank_mem *rm = calloc((size_t)P, sizeof *rm);
  zt_pipeline_sim *sim = NULL;
  zt_status st = first && count && sm && cost && rm ? ZT_OK : ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  if (!st) {
    cut_even(S, L, first, count);
    for (int k = 0; k < S; k++) {
      stage_fill(in, c, s, S, rows, k, first[k], first[k] + count[k], &sm[k]);
      double f, b, w;
      zt__plan_compute_fbw(in, rows, sm[k].b0, sm[k].b1, sm[k].embed, sm[k].head, &f, &b, &w);
      /* B redoes the recomputed share of the blocks' forward */
      double extra = zt__plan_compute_s(in, rows, sm[k].b0, sm[k].b1, false, false, c->recompute) -
                     zt__plan_compute_s(in, rows, sm[k].b0, sm[k].b1, false, false, ZT_RECOMPUTE_NONE);
      cost[3 * k] = f, cost[3 * k + 1] = b + extra, cost[3 * k + 2] = w;
    }
    /* a rank holding the first and the last stage keeps one tied table (and one grad of it) */
    if (d->tied && S > 1 && sm[S - 1].rank == sm[0].rank) {
      sm[S - 1].params -= (int64_t)d->vocab * d->hidden;
      sm[S - 1].table = false;
    }
    for (int k = 0; k < S; k++) rm[sm[k].rank].own += sm[k].params;
    zt_pipeline_costs pc = zt_pipeline_costs_default();
    pc.stage = cost;
    pc.comm = zt__plan_p2p_s(in, rows * sp->seq * (int64_t)d->hidden * 4);
    st = zt_pipeline_simulate(s, &pc, &sim);
  }
  /* memory: every rank's peak RSS (pipe_rank_rss); the prediction is the worst rank's */
  double worst_rss = -1;
  for (int r = 0; !st && r < P; r++) {
    zt_plan_prediction pr;
    memset(&pr, 0, sizeof pr);
    if ((st = pipe_rank_rss(in, c, s, sm, r, &rm[r], &pr))) break;
    if ((double)pr.rss > worst_rss) worst_rss = (double)pr.rss, *out = pr;
  }
  if (!st) {
    /* time: the schedule, then the update of the largest rank's share, the replicas' collectives
     * and the tied table's sum between the first and the last stage's ranks */
    int64_t most = 0;
    for (int r = 0; r < P; r++)
      if (rm[r].own > most) most = rm[r].own;
    double upd = zt__plan_optim_s(in, c->shard == ZT_SHARD_NONE ? most : (most + D - 1) / D);
    double dp = 0; /* FSDP: the gather before the schedule and the reduce-scatter after it */
    if (c->shard != ZT_SHARD_NONE) dp = 2 * zt__plan_allgather_s(in, D, 4 * most);
    else if (D > 1) dp = zt__plan_allreduce_s(in, D, 4 * most);
    double tied = 0;
    if (d->tied && sm[0].rank != sm[S - 1].rank) tied = zt__plan_allreduce_s(in, 2, (int64_t)d->vocab * d->hidden * 4);
    /* cores shared by more ranks than they hold: a rank in its bubble gives its cores to the ones
     * computing, so the schedule runs at the rate of the ranks busy on average, not of all of them
     * (measured: gpt2-124m pp 4 on 2 cores, +70% predicted without) */
    double speed = zt__plan_shared_speedup(in, (double)P * D * (1 - sim->bubble_rate));
    double sched = sim->step_time / speed;
    out->bubble_s = sim->bubble_rate * sched;
    out->compute_s = sched - out->bubble_s + upd;
    out->comm_s = dp + tied;
    out->step_s = sched + upd + dp + tied;
  }
  zt_pipeline_sim_free(sim);
  zt_pipeline_schedule_free(s);
  free(first), free(count), free(sm), free(cost), free(rm);
  return st;
}
