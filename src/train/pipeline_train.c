/* The pipeline training mode (train/mode.h): the world split into replicas of a P-rank
 * pipeline (global rank = replica * P + stage rank), the GPT-2 cut into the schedule's stages
 * (embedding on the first, final norm and fused lm-head loss on the last, the blocks as
 * --pp-balance says), and everything the loop does through them (a step through
 * zt_pipeline_train_step, the loss of an evaluation batch, checkpoints in the single-process
 * format, the measured figures and timeline). Every rank builds the whole model from the seed
 * (so a pipeline run starts where one process starts) and then keeps only its stages'
 * parameters: the others' storage is released. The ranks of a replica read its rows. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/status_internal.h"
#include "train/mode.h"

/* Tags of the transfers outside the executor's: an evaluation batch's hand-overs (by stage)
 * and a save's parameters and state (by parameter). No step's transfer is in flight then, so
 * they need only stay below ZT_COMM_MAX_TAG. */
static int tag_eval(int stage) { return stage % ZT_COMM_MAX_TAG; }
static int tag_save(int param, int k) { return (8 * param + k) % ZT_COMM_MAX_TAG; }

/* A pipeline run on this rank: with --pp P the world is P x D ranks, global rank = replica * P +
 * stage rank. */
typedef struct pp_mode {
  int P, D;                /* pipeline ranks, replicas */
  int p, d;                /* this rank's place: stage rank, replica */
  zt_comm *pp_comm;        /* this replica's P ranks */
  zt_comm *dp_comm;        /* the D ranks that hold this rank's stages (NULL when D == 1 without sharding) */
  zt_zero *zero;           /* --shard full|grad_op|opt: the stages' parameters sharded over dp_comm */
  zt_comm *tied_comm;      /* the ranks of the first and the last stage, when they differ (wte is on both) */
  zt_pipeline_schedule *sched; /* compute-only, validated */
  int S, M;                /* stages, microbatches */
  int *first, *count;      /* per stage: its blocks */
  const zt_model *model;   /* borrowed: the run's */
  zt_param *own;           /* the parameters of this rank's stages (what its optimizer updates) */
  int n_own;
  bool *is_own;            /* per model parameter (the model's params order) */
  zt_tensor *tied;         /* wte when tied_comm is set */
  int64_t rows, seq;       /* of a microbatch */
  zt_tensor **x, **y;      /* per microbatch: this step's inputs and targets */
  zt_pipeline_trace trace; /* the last step's actions on this rank */
  bool replan;             /* --schedule auto: planned again from the first step's measured costs */
  double *stage_costs;     /* the last step's measured F, B, W per stage (3 S) */
} pp_mode;

bool zt__train_pp_wanted(const zt_train_config *c) { return c->parallel.pp > 1; }

static zt_status pp_check(const zt_train_config *c) {
  if (c->parallel.shard == ZT_SHARD_HYBRID)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_train_config.parallel.shard hybrid with a pipeline is not supported: the replicas of a stage shard "
                  "full, grad_op or opt, or run DDP (none)");
  if (c->parallel.mixed_precision != ZT_DTYPE_F32)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_config.parallel.mixed_precision with a pipeline is not supported yet");
  if (c->inject_nan_at)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_config.inject_nan_at (a testing aid) is not supported with a pipeline");
  if (c->memory.offload_activations)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_train_config.memory.offload_activations with a pipeline is not supported yet; use recompute");
  if (c->memory.offload_model || c->memory.offload_states) /* a pipeline keeps no state in the run's tier */
    return ZT_ERR(ZT_STATUS_UNSUPPORTED, "zt_train_config.memory.offload_model does not run with "
                  "zt_train_config.parallel.pp (a pipeline); drop one of them");
  return ZT_OK;
}

/* Comm messages name world rank w (the run's comm is the world) by its place in the grid. */
static void pp_rank_name(int w, char *buf, size_t cap, void *ud) {
  const pp_mode *pp = ud;
  bool chunked = pp->sched && pp->sched->chunks > 1; /* then a rank holds several stages */
  int n = w < pp->P * pp->D ? snprintf(buf, cap, "%s %d of %d", chunked ? "pipeline rank" : "stage", w % pp->P, pp->P) : 0;
  if (pp->D > 1 && n > 0 && (size_t)n < cap) snprintf(buf + n, cap - (size_t)n, ", replica %d of %d", w / pp->P, pp->D);
}

static zt_status pp_open(pp_mode *pp, const zt_train_config *c, zt_comm *world) {
  memset(pp, 0, sizeof *pp);
  int P = c->parallel.pp, W = zt_comm_size(world), rank = zt_comm_rank(world); /* P divides W: zt__run_open */
  pp->P = P, pp->D = W / P, pp->p = rank % P, pp->d = rank / P;
  zt_comm_set_rank_namer(pp_rank_name, pp); /* removed by pp_free */
  ZT_TRY(zt_comm_split(world, pp->d, pp->p, &pp->pp_comm));
  zt_comm *dp = NULL;
  ZT_TRY(zt_comm_split(world, pp->p, pp->d, &dp));
  if (pp->D > 1 || c->parallel.shard != ZT_SHARD_NONE) pp->dp_comm = dp; /* sharding over one replica works too */
  else zt_comm_free(dp);
  return ZT_OK;
}

static void pp_free(pp_mode *pp) {
  if (!pp) return;
  if (pp->P) zt_comm_set_rank_namer(NULL, NULL);
  zt_pipeline_schedule_free(pp->sched);
  free(pp->first);
  free(pp->count);
  free(pp->own);
  free(pp->is_own);
  free(pp->stage_costs);
  for (int m = 0; pp->x && m < pp->M; m++) zt_tensor_free(pp->x[m]), zt_tensor_free(pp->y[m]);
  free(pp->x);
  free(pp->y);
  zt_pipeline_trace_free(&pp->trace);
  zt_zero_free(pp->zero);
  zt_comm_free(pp->tied_comm);
  zt_comm_free(pp->dp_comm);
  zt_comm_free(pp->pp_comm);
  memset(pp, 0, sizeof *pp);
}

static zt_status pp_hold_others(pp_mode *pp, bool keep) {
  zt_param *ps;
  int n = zt_model_params(pp->model, &ps);
  for (int i = 0; i < n; i++) {
    if (pp->is_own[i]) continue;
    zt_storage *st = ps[i].tensor->storage;
    ZT_TRY(keep ? zt_storage_rematerialize(st) : zt_storage_release(st));
  }
  return ZT_OK;
}

/* ---------------------------------------------------------------- setup */

/* Whether name is one of the generators (a space-separated list). */
static bool is_generator(const char *name) {
  const char *list = zt_pipeline_generator_names();
  size_t n = strlen(name);
  for (const char *p = list; *p;) {
    const char *e = strchr(p, ' ');
    size_t k = e ? (size_t)(e - p) : strlen(p);
    if (k == n && !strncmp(p, name, n)) return true;
    p += k;
    while (*p == ' ') p++;
  }
  return false;
}

static zt_status make_schedule(pp_mode *pp, const zt_train_config *c) {
  const char *name = c->parallel.schedule;
  int M = (int)c->data.microbatches;
  zt_status s;
  if (is_generator(name)) {
    zt_pipeline_gen_options o = {.name = name, .ranks = pp->P, .microbatches = M, .chunks = c->parallel.chunks};
    if (!strcmp(name, "auto")) o.mem_limit = pp->P; /* 1F1B's peak: auto never holds more than 1F1B */
    s = zt_pipeline_generate(&o, &pp->sched);
  } else {
    s = zt_pipeline_schedule_read(name, &pp->sched);
    if (!s && (pp->sched->ranks != pp->P || pp->sched->microbatches != M))
      s = ZT_ERR(ZT_STATUS_INVALID_ARG,
                 "the file is for %d ranks and %d microbatches, the run has zt_train_config.parallel.pp %d and "
                 "zt_train_config.data.microbatches %d",
                 pp->sched->ranks, pp->sched->microbatches, pp->P, M);
    if (!s && c->parallel.chunks && pp->sched->chunks != c->parallel.chunks)
      s = ZT_ERR(ZT_STATUS_INVALID_ARG, "the file has %d chunks per rank, zt_train_config.parallel.chunks asks %d",
                 pp->sched->chunks, c->parallel.chunks);
  }
  if (!s) s = zt_pipeline_validate(pp->sched);
  if (s)
    return zt__error_prefix(s, "zt_train_config.parallel.schedule '%s' (a generator: %s; or a schedule file)", name,
                            zt_pipeline_generator_names());
  pp->S = zt_pipeline_stage_count(pp->sched);
  pp->M = M;
  pp->replan = !strcmp(name, "auto");
  return ZT_OK;
}

/* Modelled forward cost per token of a block and of the head (embedding: none), in FLOPs:
 * a block's four weight matmuls and its attention; the lm head's matmul and its softmax. */
static void costs_per_token(const zt_lm_dims *d, int64_t T, double *block, double *head) {
  double C = d->hidden, V = d->vocab;
  *block = 2 * (double)d->block_params + 2 * (double)T * d->attn_width;
  *head = 2 * C * V + 5 * V;
}

/* Blocks per stage minimising the largest stage cost (contiguous, every middle stage at
 * least one block): best[s][j], the least max cost of stages 0..s holding blocks [0, j). */
static zt_status balance_auto(int S, int L, double cb, double ch, int *count) {
  size_t n = (size_t)S * (size_t)(L + 1);
  double *best = calloc(n, sizeof *best);
  int *from = malloc(sizeof *from * n);
  zt_status s = best && from ? ZT_OK : ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  for (int st = 0; !s && st < S; st++)
    for (int j = 0; j <= L; j++) {
      double b = INFINITY;
      int arg = -1, need = st > 0 && st < S - 1 ? 1 : 0;
      for (int i = 0; i <= (st == 0 ? 0 : j - need); i++) { /* stage st holds blocks [i, j) */
        double prev = st == 0 ? 0 : best[(size_t)(st - 1) * (L + 1) + i];
        double cost = (j - i) * cb + (st == S - 1 ? ch : 0);
        double v = prev > cost ? prev : cost;
        if (v < b) b = v, arg = i;
      }
      best[(size_t)st * (L + 1) + j] = b, from[(size_t)st * (L + 1) + j] = arg;
    }
  if (!s && !isfinite(best[(size_t)(S - 1) * (L + 1) + L]))
    s = ZT_ERR(ZT_STATUS_INVALID_ARG, "no balance of %d blocks over %d stages gives every middle stage a block", L, S);
  for (int st = S - 1, j = L; !s && st >= 0; st--) {
    int i = from[(size_t)st * (L + 1) + j];
    count[st] = j - i;
    j = i;
  }
  free(best);
  free(from);
  return s;
}

static zt_status partition(pp_mode *pp, const zt_train_config *c, const zt_lm_dims *g) {
  int S = pp->S, L = g->n_layer;
  pp->first = calloc((size_t)S, sizeof *pp->first);
  pp->count = calloc((size_t)S, sizeof *pp->count);
  if (!pp->first || !pp->count) return ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  const char *b = c->parallel.pp_balance;
  if (!strcmp(b, "even") || !b[0]) {
    for (int s = 0; s < S; s++) pp->count[s] = L / S + (s < L % S);
  } else if (!strcmp(b, "auto")) {
    double cb, ch;
    costs_per_token(g, c->data.seq, &cb, &ch);
    ZT_TRY(balance_auto(S, L, cb, ch, pp->count));
  } else {
    const char *q = b;
    int k = 0, sum = 0;
    while (*q) {
      char *end;
      long v = strtol(q, &end, 10);
      if (end == q || v < 0 || v > L || (*end && *end != ','))
        return ZT_ERR(ZT_STATUS_INVALID_ARG,
                      "zt_train_config.parallel.pp_balance '%s': give even, auto or blocks per stage as a comma list "
                      "(e.g. 1,3,3,1)", b);
      if (k < S) pp->count[k] = (int)v;
      k++, sum += (int)v;
      q = *end ? end + 1 : end;
    }
    if (k != S || sum != L)
      return ZT_ERR(ZT_STATUS_INVALID_ARG,
                    "zt_train_config.parallel.pp_balance '%s' gives %d stages %d blocks; the run has %d stages (%d ranks x "
                    "%d chunks) and the model %d blocks",
                    b, k, sum, S, pp->P, pp->sched->chunks, L);
  }
  for (int s = 0, at = 0; s < S; s++) {
    pp->first[s] = at, at += pp->count[s];
    if (pp->count[s] == 0 && s > 0 && s < S - 1)
      return ZT_ERR(ZT_STATUS_INVALID_ARG,
                    "stage %d of %d gets no block (the model has %d blocks; zt_train_config.parallel.pp_balance %s): use "
                    "fewer stages (zt_train_config.parallel.pp or chunks) or a model with more layers",
                    s, S, L, b);
  }
  return ZT_OK;
}

/* The stage of block i. */
static int block_stage(const pp_mode *pp, int i) {
  for (int s = 0; s < pp->S; s++)
    if (i >= pp->first[s] && i < pp->first[s] + pp->count[s]) return s;
  return -1;
}

/* Whether parameter i belongs to a stage on this rank (a tied embedding: the first and the last). */
static bool owned(const pp_mode *pp, int i) {
  int part = pp->model->param_part(pp->model->ctx, i);
  int r0 = zt_pipeline_stage_rank(pp->sched, 0), rl = zt_pipeline_stage_rank(pp->sched, pp->S - 1);
  if (part >= 0) return zt_pipeline_stage_rank(pp->sched, block_stage(pp, part)) == pp->p;
  if (part == ZT_PART_BOTH) return r0 == pp->p || rl == pp->p;
  if (part == ZT_PART_OUTPUT) return rl == pp->p;
  return r0 == pp->p;
}

static zt_status pp_setup(pp_mode *pp, const zt_train_config *c, const zt_model *m) {
  pp->model = m;
  if (!m->forward_stage || !m->param_part)
    return ZT_ERR(ZT_STATUS_UNSUPPORTED, "a pipeline needs a model with stages (zt_model.forward_stage, param_part)");
  zt_lm_dims g = zt_lm_config_dims(zt_model_config(m));
  ZT_TRY(make_schedule(pp, c));
  ZT_TRY(partition(pp, c, &g));
  zt_param *ps;
  int n = zt_model_params(m, &ps);
  pp->own = malloc(sizeof *pp->own * (size_t)(n ? n : 1));
  pp->is_own = calloc((size_t)(n ? n : 1), sizeof *pp->is_own);
  pp->stage_costs = calloc((size_t)pp->S * 3, sizeof *pp->stage_costs);
  pp->x = calloc((size_t)pp->M, sizeof *pp->x);
  pp->y = calloc((size_t)pp->M, sizeof *pp->y);
  if (!pp->own || !pp->is_own || !pp->stage_costs || !pp->x || !pp->y) return ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  for (int i = 0; i < n; i++)
    if ((pp->is_own[i] = owned(pp, i))) pp->own[pp->n_own++] = ps[i];
  pp->rows = c->data.batch / pp->D / pp->M;
  pp->seq = c->data.seq;
  for (int k = 0; k < pp->M; k++) {
    int64_t sh[2] = {pp->rows, pp->seq};
    ZT_TRY(zt_tensor_empty_tagged(2, sh, ZT_DTYPE_I32, ZT_CPU, ZT_MEM_TAG_TEMP, &pp->x[k]));
    ZT_TRY(zt_tensor_empty_tagged(2, sh, ZT_DTYPE_I32, ZT_CPU, ZT_MEM_TAG_TEMP, &pp->y[k]));
  }
  return ZT_OK;
}

static zt_status pp_link(pp_mode *pp, const zt_train_config *c, zt_param **params, int *n_params) {
  /* wte is used by the first stage (embedding) and the last (the head): when they are on two
   * ranks, those two sum its grads */
  zt_param *ps;
  int n = zt_model_params(pp->model, &ps);
  int r0 = zt_pipeline_stage_rank(pp->sched, 0), rl = zt_pipeline_stage_rank(pp->sched, pp->S - 1);
  if (r0 != rl) {
    bool member = pp->p == r0 || pp->p == rl;
    zt_comm *t = NULL;
    ZT_TRY(zt_comm_split(pp->pp_comm, member ? 0 : 1, pp->p, &t));
    if (!member) zt_comm_free(t);
    for (int i = 0; member && i < n; i++)
      if (pp->model->param_part(pp->model->ctx, i) == ZT_PART_BOTH) pp->tied_comm = t, pp->tied = ps[i].tensor;
    if (member && !pp->tied_comm) zt_comm_free(t); /* an untied head: nothing to sum */
  }
  ZT_TRY(pp_hold_others(pp, false));
  *params = pp->own, *n_params = pp->n_own;
  if (c->parallel.shard == ZT_SHARD_NONE) return ZT_OK;
  ZT_TRY(zt_zero_new(pp->dp_comm, pp->n_own, pp->own, c->parallel.shard, &pp->zero));
  *n_params = zt_zero_pieces(pp->zero, params, NULL);
  return ZT_OK;
}

/* ---------------------------------------------------------------- a step */

typedef struct stage_ctx {
  pp_mode *pp;
  zt_tensor **targets; /* per microbatch */
} stage_ctx;

static zt_status stage_forward(void *ud, int stage, int mb, zt_tensor *in, zt_tensor **out) {
  stage_ctx *c = ud;
  pp_mode *pp = c->pp;
  return pp->model->forward_stage(pp->model->ctx, stage == 0, pp->first[stage], pp->count[stage],
                               stage == pp->S - 1 ? c->targets[mb] : NULL, in, out);
}

static zt_pipeline_boundary boundary(const pp_mode *pp, int64_t rows) {
  zt_pipeline_boundary b = {3, {rows, pp->seq, zt_lm_config_dims(zt_model_config(pp->model)).hidden}, ZT_DTYPE_F32};
  return b;
}

static zt_status pp_step(pp_mode *pp, zt_optim *o, zt_batch_fn next, void *user_data,
                            const zt_train_step_options *so, zt_train_step_result *out) {
  *out = (zt_train_step_result){0};
  out->grad_norm = NAN;
  if (so->on_phase) so->on_phase(ZT_TRAIN_PHASE_FORWARD, so->step, so->phase_user_data);
  for (int m = 0; m < pp->M; m++) {
    zt_tensor *x, *y;
    ZT_TRY(next(user_data, &x, &y));
    ZT_TRY(zt__dev_copy(pp->x[m], x));
    ZT_TRY(zt__dev_copy(pp->y[m], y));
  }
  stage_ctx ctx = {pp, pp->y};
  zt_pipeline_stages st = {stage_forward, &ctx};
  zt_pipeline_trace_free(&pp->trace);
  zt_pipeline_step_options po = {0};
  po.schedule = pp->sched;
  po.comm = pp->pp_comm;
  po.boundary = boundary(pp, pp->rows);
  po.lr = so->lr;
  po.grad_clip = so->grad_clip;
  po.tied = pp->tied ? &pp->tied : NULL;
  po.n_tied = pp->tied ? 1 : 0;
  po.tied_comm = pp->tied_comm;
  po.dp_comm = pp->dp_comm;
  po.zero = pp->zero;
  po.trace = &pp->trace;
  zt_param *ps = pp->own;
  int n = pp->zero ? zt_zero_pieces(pp->zero, &ps, NULL) : pp->n_own;
  return zt_pipeline_train_step(&st, o, n, ps, pp->x, &po, out);
}

/* ---------------------------------------------------------------- evaluation */

static zt_status pp_loss(pp_mode *pp, zt_tensor *x, zt_tensor *y, double *loss) {
  zt_pipeline_boundary b = boundary(pp, x->shape[0]);
  zt_tensor *cur = NULL; /* the output of the last stage this rank ran */
  double l = 0;
  zt_status s = pp->zero ? zt_zero_gather(pp->zero) : ZT_OK;
  for (int st = 0; st < pp->S && !s; st++) {
    int r = zt_pipeline_stage_rank(pp->sched, st), prev = st > 0 ? zt_pipeline_stage_rank(pp->sched, st - 1) : r;
    if (r != pp->p) continue;
    zt_tensor *in = st == 0 ? x : cur;
    if (st > 0 && prev != pp->p) {
      zt_tensor_free(cur), cur = NULL;
      s = zt_tensor_empty_tagged(b.ndim, b.shape, b.dtype, ZT_CPU, ZT_MEM_TAG_ACTIVATION, &cur);
      if (!s) s = zt_recv(pp->pp_comm, cur, prev, tag_eval(st));
      in = cur;
    }
    zt_tensor *o = NULL;
    if (!s) s = pp->model->forward_stage(pp->model->ctx, st == 0, pp->first[st], pp->count[st], st == pp->S - 1 ? y : NULL, in, &o);
    if (s) break;
    zt_tensor_free(cur), cur = o;
    if (st == pp->S - 1) {
      l = zt_tensor_get(cur, 0);
    } else if (zt_pipeline_stage_rank(pp->sched, st + 1) != pp->p) {
      s = zt_send(pp->pp_comm, cur, zt_pipeline_stage_rank(pp->sched, st + 1), tag_eval(st + 1));
    }
  }
  zt_tensor_free(cur);
  if (pp->zero) {
    zt_status r = zt_zero_release(pp->zero);
    if (!s) s = r;
  }
  /* the last stage's rank has it, the others add zeros: every rank gets it exactly */
  zt_tensor *t = NULL;
  if (!s) s = zt_tensor_from_data(1, (int64_t[]){1}, ZT_DTYPE_F64, &l, &t);
  if (!s) s = zt_all_reduce(pp->pp_comm, t, ZT_REDUCE_SUM);
  if (!s) *loss = zt_tensor_get(t, 0);
  zt_tensor_free(t);
  return s;
}

static zt_status pp_replica_mean(pp_mode *pp, double *v) {
  if (!pp->dp_comm) return ZT_OK;
  zt_tensor *t = NULL;
  ZT_TRY(zt_tensor_from_data(1, (int64_t[]){1}, ZT_DTYPE_F64, v, &t));
  zt_status s = zt_all_reduce(pp->dp_comm, t, ZT_REDUCE_AVG);
  if (!s) *v = zt_tensor_get(t, 0);
  zt_tensor_free(t);
  return s;
}

/* ---------------------------------------------------------------- checkpoints */

/* The parameter an optimizer state tensor belongs to ("exp_avg.<name>" -> "<name>"). */
static const char *state_param(const char *state) {
  const char *dot = strchr(state, '.');
  return dot ? dot + 1 : state;
}

/* dst's state tensors take the values of src's of the same names (those src has). */
static zt_status copy_state(zt_optim *dst, zt_optim *src) {
  int nd, ns;
  const char *const *dn, *const *sn;
  zt_tensor *const *dt, *const *stt;
  ZT_TRY(zt_optim_state(dst, &nd, &dn, &dt));
  ZT_TRY(zt_optim_state(src, &ns, &sn, &stt));
  for (int i = 0; i < nd; i++)
    for (int k = 0; k < ns; k++)
      if (!strcmp(dn[i], sn[k])) {
        ZT_TRY(zt__dev_copy(dt[i], stt[k]));
        zt_tensor_bump_version(dt[i]);
        break;
      }
  zt_optim_set_step_count(dst, zt_optim_step_count(src));
  return ZT_OK;
}

/* The pipeline rank that holds parameter i for saving (a tied embedding: the first stage's). */
static int holder(const pp_mode *pp, int i) {
  int part = pp->model->param_part(pp->model->ctx, i);
  if (part >= 0) return zt_pipeline_stage_rank(pp->sched, block_stage(pp, part));
  if (part == ZT_PART_OUTPUT) return zt_pipeline_stage_rank(pp->sched, pp->S - 1);
  return zt_pipeline_stage_rank(pp->sched, 0);
}

/* Replica 0's holders send each parameter and its state to pipeline rank 0, which puts them
 * into the model and into full (an optimizer over every parameter). */
static zt_status gather_to_writer(pp_mode *pp, zt_optim *o, zt_optim *full) {
  zt_param *ps;
  int n = zt_model_params(pp->model, &ps), no = 0, nf = 0;
  const char *const *on = NULL, *const *fn = NULL;
  zt_tensor *const *ot = NULL, *const *ft = NULL;
  ZT_TRY(zt_optim_state(o, &no, &on, &ot));
  if (full) ZT_TRY(zt_optim_state(full, &nf, &fn, &ft));
  if (full) ZT_TRY(copy_state(full, o)); /* the writer's own parameters' state */
  for (int i = 0; i < n; i++) {
    int h = holder(pp, i);
    if (h == 0) continue;
    if (pp->p == 0) ZT_TRY(zt_recv(pp->pp_comm, ps[i].tensor, h, tag_save(i, 0)));
    else if (pp->p == h) ZT_TRY(zt_send(pp->pp_comm, ps[i].tensor, 0, tag_save(i, 0)));
    else continue;
    /* its state tensors, in the optimizer's order (the same on both sides) */
    int k = 1;
    if (pp->p == 0) {
      for (int j = 0; j < nf; j++)
        if (!strcmp(state_param(fn[j]), ps[i].name)) ZT_TRY(zt_recv(pp->pp_comm, ft[j], h, tag_save(i, k++)));
    } else {
      for (int j = 0; j < no; j++)
        if (!strcmp(state_param(on[j]), ps[i].name)) ZT_TRY(zt_send(pp->pp_comm, ot[j], 0, tag_save(i, k++)));
    }
  }
  return ZT_OK;
}

static zt_status pp_save(pp_mode *pp, zt_comm *world, const zt_optim_config *oc, const char *dir, zt_optim *o,
                            const zt_train_state *st) {
  bool writer = pp->d == 0 && pp->p == 0;
  zt_param *ps;
  int n = zt_model_params(pp->model, &ps);
  zt_optim *full = NULL, *mine = o; /* sharded: mine is an optimizer over the stages' full parameters */
  zt_status s = writer ? pp_hold_others(pp, true) : ZT_OK;
  if (!s && writer) s = zt_optim_new(oc, n, ps, &full);
  if (!s && pp->zero) s = zt_optim_new(oc, pp->n_own, pp->own, &mine);
  s = zt_comm_agree_status(world, s);
  if (!s && pp->zero) s = zt_zero_gather(pp->zero);
  if (!s && pp->zero) s = zt_zero_state_to_full(pp->zero, o, mine);
  if (!s && pp->d == 0) s = gather_to_writer(pp, mine, full);
  if (!s && writer) s = zt_snapshot_save(dir, pp->model, full, st);
  if (pp->zero) {
    zt_status r = zt_zero_release(pp->zero);
    if (!s) s = r;
    zt_optim_free(mine);
  }
  zt_optim_free(full);
  if (writer) {
    zt_status r = pp_hold_others(pp, false);
    if (!s) s = r;
  }
  return zt_comm_agree_status(world, s);
}

static zt_status pp_load(pp_mode *pp, const zt_optim_config *oc, const char *dir, zt_optim *o,
                            zt_train_state *st) {
  zt_param *ps;
  int n = zt_model_params(pp->model, &ps);
  zt_optim *full = NULL;
  zt_status s = pp_hold_others(pp, true);
  if (!s && pp->zero) s = zt_zero_gather(pp->zero); /* the stages' parameters present, to load into */
  if (!s && o) s = zt_optim_new(oc, n, ps, &full);
  if (!s) s = zt_snapshot_load(dir, pp->model, full, st);
  if (!s && o) s = pp->zero ? zt_zero_state_from_full(pp->zero, o, full) : copy_state(o, full);
  if (!s && pp->zero) s = zt_zero_shard_from_full(pp->zero);
  zt_optim_free(full);
  zt_status r = pp_hold_others(pp, false);
  if (!s) s = r;
  r = pp->zero ? zt_zero_release(pp->zero) : ZT_OK;
  return s ? s : r;
}

/* ---------------------------------------------------------------- measured figures */

/* A rank's figures: its compute time, its last action's end, then per stage and kind (F, B, W,
 * BW) the time and the count (zeros for other ranks' stages, so that the sum over the ranks
 * holds every stage's). */
enum { FIG_BUSY, FIG_END, FIG_STAGES };
static int fig_n(const pp_mode *pp) { return FIG_STAGES + 8 * pp->S; }

static void my_figures(const pp_mode *pp, double *v) {
  const zt_pipeline_trace *t = &pp->trace;
  memset(v, 0, sizeof *v * (size_t)fig_n(pp));
  v[FIG_BUSY] = t->busy;
  for (int i = 0; i < t->n; i++) {
    if (t->end[i] > v[FIG_END]) v[FIG_END] = t->end[i];
    zt_pipeline_action a = t->actions[i];
    if (a.op > ZT_PIPELINE_OP_BW) continue;
    double *k = v + FIG_STAGES + 8 * a.stage + 2 * a.op;
    k[0] += t->end[i] - t->start[i], k[1] += 1;
  }
}

static zt_status gather_pp(pp_mode *pp, const double *mine, int n, double *all) {
  zt_tensor *in = NULL, *out = NULL;
  ZT_TRY(zt_tensor_from_data(1, (int64_t[]){n}, ZT_DTYPE_F64, mine, &in));
  zt_status s = zt_tensor_empty_tagged(1, (int64_t[]){(int64_t)n * pp->P}, ZT_DTYPE_F64, ZT_CPU, ZT_MEM_TAG_TEMP, &out);
  if (!s) s = zt_all_gather(pp->pp_comm, in, out);
  if (!s) zt__dev_read(out, all, sizeof *all * (size_t)n * (size_t)pp->P);
  zt_tensor_free(in);
  zt_tensor_free(out);
  return s;
}

/* Every rank's figures (*all, P x fig_n, the caller frees) and their sum over the ranks (sum,
 * fig_n: busy summed, END the latest). Collective over the pipeline group. */
static zt_status all_figures(pp_mode *pp, double **all, double *sum) {
  int n = fig_n(pp);
  double *mine = malloc(sizeof *mine * (size_t)n);
  *all = malloc(sizeof **all * (size_t)n * (size_t)pp->P);
  zt_status s = mine && *all ? ZT_OK : ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  if (!s) my_figures(pp, mine);
  if (!s) s = gather_pp(pp, mine, n, *all);
  free(mine);
  memset(sum, 0, sizeof *sum * (size_t)n);
  for (int r = 0; !s && r < pp->P; r++)
    for (int i = 0; i < n; i++) {
      double x = (*all)[(size_t)r * n + i];
      sum[i] = i == FIG_END ? (x > sum[i] ? x : sum[i]) : sum[i] + x;
    }
  return s;
}

/* The simulator's costs from the measured means, per stage (pp->stage_costs: F, B, W; a
 * fused BW counts as B, W zero), and as per-rank-share means (f, b, w: for the titles). */
static zt_pipeline_costs measured_costs(pp_mode *pp, const double *sum) {
  double tot[3] = {0}, cnt[3] = {0};
  for (int st = 0; st < pp->S; st++) {
    const double *k = sum + FIG_STAGES + 8 * st; /* F, B, W, BW: (time, count) */
    double mean[3] = {k[1] ? k[0] / k[1] : 0, (k[3] + k[7]) ? (k[2] + k[6]) / (k[3] + k[7]) : 0, k[5] ? k[4] / k[5] : 0};
    for (int j = 0; j < 3; j++) pp->stage_costs[3 * st + j] = mean[j];
    tot[0] += k[0], cnt[0] += k[1], tot[1] += k[2] + k[6], cnt[1] += k[3] + k[7], tot[2] += k[4], cnt[2] += k[5];
  }
  double V = pp->sched->chunks;
  zt_pipeline_costs c = zt_pipeline_costs_default();
  c.comm = 0;
  c.f = cnt[0] ? tot[0] / cnt[0] * V : 0;
  c.b = cnt[1] ? tot[1] / cnt[1] * V : 0;
  c.w = cnt[2] ? tot[2] / cnt[2] * V : 0;
  c.stage = pp->stage_costs;
  return c;
}

/* --schedule auto: the greedy planner on the measured costs (the same on every rank of the
 * pipeline: they come from one gather), once. A plan that fails keeps the schedule. */
static zt_status replan(pp_mode *pp, zt_pipeline_costs c) {
  pp->replan = false;
  /* the same chunks: the stages' blocks and parameters stay where they are */
  zt_pipeline_gen_options o = {.name = "auto", .ranks = pp->P, .microbatches = pp->M, .chunks = pp->sched->chunks,
                               .costs = c, .mem_limit = pp->P};
  zt_pipeline_schedule *s = NULL;
  if (zt_pipeline_generate(&o, &s) || zt_pipeline_validate(s) || s->placement != pp->sched->placement) {
    zt_pipeline_schedule_free(s);
    return ZT_OK;
  }
  zt_pipeline_schedule_free(pp->sched);
  pp->sched = s;
  return ZT_OK;
}

/* The last step's figures: this rank's F, B, W (BW counted as B) and waiting seconds, and the
 * pipeline's measured bubble rate (1 - sum of the ranks' compute / (P x step time)) with the
 * simulator's prediction for the schedule from the step's measured mean costs. After the first
 * step of --schedule auto, the schedule is planned again from those costs (activations capped
 * at 1F1B's peak, P units). Collective over the pipeline group. */
typedef struct pp_figs {
  double f_s, b_s, w_s, wait_s; /* this rank */
  double bubble, sim_bubble, step_s;
} pp_figs;
static zt_status pp_figures(pp_mode *pp, pp_figs *out) {
  int n = fig_n(pp);
  double *all = NULL, *sum = malloc(sizeof *sum * (size_t)n);
  zt_status s = sum ? all_figures(pp, &all, sum) : ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  *out = (pp_figs){0};
  out->sim_bubble = out->bubble = NAN;
  const double *mine = all ? all + (size_t)pp->p * n : NULL;
  for (int st = 0; !s && st < pp->S; st++) {
    const double *k = mine + FIG_STAGES + 8 * st;
    out->f_s += k[0], out->b_s += k[2] + k[6], out->w_s += k[4];
  }
  out->wait_s = pp->trace.span - pp->trace.busy;
  if (!s) {
    out->step_s = sum[FIG_END];
    if (out->step_s > 0) out->bubble = 1 - sum[FIG_BUSY] / (pp->P * out->step_s);
  }
  zt_pipeline_costs c = s ? zt_pipeline_costs_default() : measured_costs(pp, sum);
  zt_pipeline_sim *sim = NULL;
  if (!s && c.f > 0 && zt_pipeline_simulate(pp->sched, &c, &sim) == ZT_OK) out->sim_bubble = sim->bubble_rate;
  zt_pipeline_sim_free(sim);
  if (!s && pp->replan && c.f > 0) s = replan(pp, c);
  free(all);
  free(sum);
  return s;
}

/* The measured step as a schedule of compute actions with their times (rank 0). acts holds
 * per rank `cap` records of (op, stage, mb, start, end), op < 0 after the last. */
static zt_status measured_sim(const pp_mode *pp, const double *acts, int cap, zt_pipeline_schedule **s_out,
                              zt_pipeline_sim **sim_out) {
  const zt_pipeline_schedule *g = pp->sched;
  zt_pipeline_schedule *s = NULL;
  ZT_TRY(zt_pipeline_schedule_new(g->ranks, g->chunks, g->microbatches, g->placement, &s));
  snprintf(s->name, sizeof s->name, "%s", g->name);
  zt_pipeline_sim *sim = calloc(1, sizeof *sim);
  zt_status st = sim ? ZT_OK : ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  if (!st) {
    sim->ranks = g->ranks;
    sim->n = calloc((size_t)g->ranks, sizeof *sim->n);
    sim->start = calloc((size_t)g->ranks, sizeof *sim->start);
    sim->end = calloc((size_t)g->ranks, sizeof *sim->end);
    if (!sim->n || !sim->start || !sim->end) st = ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  }
  double busy = 0;
  for (int r = 0; r < g->ranks && !st; r++) {
    sim->start[r] = calloc((size_t)(cap ? cap : 1), sizeof **sim->start);
    sim->end[r] = calloc((size_t)(cap ? cap : 1), sizeof **sim->end);
    if (!sim->start[r] || !sim->end[r]) st = ZT_ERR(ZT_STATUS_OOM, "out of host memory");
    for (int i = 0; i < cap && !st; i++) {
      const double *a = acts + ((size_t)r * cap + i) * 5;
      if (a[0] < 0) break;
      st = zt_pipeline_schedule_push(s, r, (zt_pipeline_action){(zt_pipeline_op)a[0], (int)a[1], (int)a[2]});
      sim->start[r][i] = a[3], sim->end[r][i] = a[4], sim->n[r]++;
      busy += a[4] - a[3];
      if (a[4] > sim->step_time) sim->step_time = a[4];
    }
  }
  if (!st) sim->bubble_rate = sim->step_time > 0 ? 1 - busy / (g->ranks * sim->step_time) : 0;
  if (st) {
    zt_pipeline_schedule_free(s);
    zt_pipeline_sim_free(sim);
    return st;
  }
  *s_out = s, *sim_out = sim;
  return ZT_OK;
}

static zt_status pp_timeline(pp_mode *pp, const char *path) {
  const zt_pipeline_trace *t = &pp->trace;
  double n = 0, *figs = NULL, *sum = malloc(sizeof *sum * (size_t)fig_n(pp)), *counts = malloc(sizeof *counts * (size_t)pp->P);
  zt_status s = sum && counts ? ZT_OK : ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  for (int i = 0; i < t->n; i++) n += t->actions[i].op <= ZT_PIPELINE_OP_BW;
  if (!s) s = all_figures(pp, &figs, sum);
  if (!s) s = gather_pp(pp, &n, 1, counts);
  int cap = 0;
  for (int r = 0; !s && r < pp->P; r++)
    if (counts[r] > cap) cap = (int)counts[r];
  double *mine = NULL, *all = NULL;
  if (!s) {
    mine = malloc(sizeof *mine * 5 * (size_t)(cap ? cap : 1));
    all = malloc(sizeof *all * 5 * (size_t)(cap ? cap : 1) * (size_t)pp->P);
    if (!mine || !all) s = ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  }
  if (!s) {
    int k = 0;
    for (int i = 0; i < t->n; i++) {
      zt_pipeline_action a = t->actions[i];
      if (a.op > ZT_PIPELINE_OP_BW) continue;
      double rec[5] = {a.op, a.stage, a.mb, t->start[i], t->end[i]};
      memcpy(mine + 5 * k++, rec, sizeof rec);
    }
    for (; k < cap; k++) mine[5 * k] = -1;
    s = gather_pp(pp, mine, 5 * (cap ? cap : 1), all);
  }
  zt_pipeline_schedule *ms = NULL;
  zt_pipeline_sim *msim = NULL, *psim = NULL;
  char *svg = NULL;
  if (!s && pp->p == 0) {
    zt_pipeline_costs c = measured_costs(pp, sum);
    s = measured_sim(pp, all, cap ? cap : 1, &ms, &msim);
    if (!s) s = zt_pipeline_simulate(pp->sched, &c, &psim);
    char t1[256], t2[256];
    if (!s) {
      snprintf(t1, sizeof t1, "measured: %s, %d ranks, %d microbatches; step %.1f ms, bubble rate %.1f%%", pp->sched->name,
               pp->P, pp->M, msim->step_time * 1e3, 100 * msim->bubble_rate);
      snprintf(t2, sizeof t2,
               "simulated from the measured costs per stage (means F %.1f, B %.1f, W %.1f ms per rank share): step %.1f ms, bubble "
               "rate %.1f%%",
               c.f * 1e3, c.b * 1e3, c.w * 1e3, psim->step_time * 1e3, 100 * psim->bubble_rate);
      const zt_pipeline_schedule *ss[2] = {ms, pp->sched};
      const zt_pipeline_sim *sims[2] = {msim, psim};
      const char *titles[2] = {t1, t2};
      s = zt_pipeline_render_svg_stack(2, ss, sims, titles, &svg);
    }
    if (!s) {
      const void *chunk = svg;
      size_t len = strlen(svg);
      s = zt_write_file_atomic(path, &chunk, &len, 1);
    }
    if (s) s = zt__error_prefix(s, "writing the pipeline timeline '%s'", path);
  }
  free(svg);
  zt_pipeline_schedule_free(ms);
  zt_pipeline_sim_free(msim);
  zt_pipeline_sim_free(psim);
  free(mine), free(all), free(figs), free(sum), free(counts);
  return s;
}

static zt_status pp_gather_full(pp_mode *pp) {
  if (pp->zero) ZT_TRY(zt_zero_gather(pp->zero));
  ZT_TRY(pp_hold_others(pp, true));
  zt_param *ps;
  int n = zt_model_params(pp->model, &ps);
  for (int i = 0; i < n; i++) {
    ZT_TRY(zt_broadcast(pp->pp_comm, ps[i].tensor, holder(pp, i)));
    pp->is_own[i] = true; /* held here now: nothing to release */
  }
  return ZT_OK;
}

/* ---------------------------------------------------------------- the mode */
static pp_mode *ctx(zt__mode *m) { return m->ctx; }

static const char *pipe_name(zt__mode *m) { return ctx(m)->D > 1 ? "pipeline+ddp" : "pipeline"; }
static zt_status pipe_check(zt__mode *m) { return pp_check(m->run->c); }
static zt_status pipe_open(zt__mode *m) { return pp_open(ctx(m), m->run->c, m->run->comm); }
/* every rank builds the whole model (in RAM: no state goes into the tier), then cuts it */
static zt_status pipe_build(zt__mode *m) {
  ZT_TRY(zt__run_build(m->run, false));
  return pp_setup(ctx(m), m->run->c, &m->run->model);
}
/* the stages' parameters (or their shards) only: the optimizer's; the rest of the model's storage goes */
static zt_status pipe_link(zt__mode *m) {
  ZT_TRY(pp_link(ctx(m), m->run->c, &m->run->params, &m->run->n_params));
  return zt__run_optim(m->run);
}
static zt_status pipe_save(zt__mode *m, const zt_train_state *st) {
  zt__run *r = m->run;
  return pp_save(ctx(m), r->comm, &r->oc, r->c->checkpoint.save, r->opt, st);
}
static zt_status pipe_load(zt__mode *m, zt_train_state *st) {
  zt__run *r = m->run;
  return pp_load(ctx(m), &r->oc, r->c->checkpoint.resume, r->opt, st);
}
static zt_status pipe_step(zt__mode *m, const zt_train_step_options *so, zt_train_step_result *out) {
  return pp_step(ctx(m), m->run->opt, m->run->next, m->run->next_data, so, out);
}
static zt_status pipe_loss(zt__mode *m, zt_tensor *x, zt_tensor *y, double *loss) { return pp_loss(ctx(m), x, y, loss); }
static zt_status pipe_mean(zt__mode *m, double *v) { return pp_replica_mean(ctx(m), v); }
static zt_status pipe_stats(zt__mode *m, zt_train_step_info *info) {
  pp_figs pf;
  ZT_TRY(pp_figures(ctx(m), &pf));
  info->pp_bubble = pf.bubble, info->pp_sim_bubble = pf.sim_bubble;
  info->pp_f_ms = pf.f_s * 1e3, info->pp_b_ms = pf.b_s * 1e3, info->pp_w_ms = pf.w_s * 1e3;
  info->pp_wait_ms = pf.wait_s * 1e3;
  return ZT_OK;
}
static zt_status pipe_timeline(zt__mode *m, const char *path) { return pp_timeline(ctx(m), path); }
static zt_status pipe_gather(zt__mode *m) { return pp_gather_full(ctx(m)); }
static void pipe_close(zt__mode *m) {
  if (!m->ctx) return;
  pp_free(ctx(m));
  free(m->ctx);
  m->ctx = NULL;
}

static const zt__mode_i k_pipeline = {
    .unit = "replicas",
    .own_stream = false,
    .name = pipe_name,
    .check = pipe_check,
    .open = pipe_open,
    .build = pipe_build,
    .link = pipe_link,
    .save = pipe_save,
    .load = pipe_load,
    .step = pipe_step,
    .loss = pipe_loss,
    .mean = pipe_mean,
    .stats = pipe_stats,
    .timeline = pipe_timeline,
    .gather = pipe_gather,
    .close = pipe_close,
};

zt_status zt__mode_pipeline(zt__run *run, zt__mode *out) {
  pp_mode *pp = calloc(1, sizeof *pp);
  if (!pp) return ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  *out = (zt__mode){&k_pipeline, pp, run};
  return ZT_OK;
}
