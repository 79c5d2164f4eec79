/* The pipeline executor: a schedule run on a model's stages, across the ranks of a zt_comm
 * (zt_pipeline_run: each rank its own list, the hand-over by non-blocking sends and receives)
 * or with every stage in this process (zt_pipeline_run_local: the ranks take turns, each
 * running its next actions while their inputs are there, so each list keeps its order). A
 * stage's input is the previous stage's output cut from its graph (an alias, or the received
 * bytes, made a leaf that requires grad); B is zt_backward_input from the stage's output with
 * the next stage's input grad (the last stage: its loss times the scale), W
 * zt_backward_weight of B's record, BW both. */
#include <stdlib.h>

#include "core/status_internal.h"
#include "pipeline_internal.h"
#include "zt/autograd.h"
#include "zt/comm.h"
#include "zt/ops.h"

/* Per (stage, microbatch): the tensors between actions and the transfers in flight. */
typedef struct xslot {
  zt_tensor *in;   /* the stage's input: a leaf (stage > 0) */
  zt_tensor *out;  /* its output (the last stage: the scaled loss), graph alive until B */
  zt_tensor *gin;  /* B's grad of the input: the previous stage's output grad */
  zt_tensor *gout; /* the received grad of out (from stage + 1 on another rank) */
  zt_comm_work *recv_in, *recv_gout, *send_out, *send_gin;
  zt_deferred *rec; /* B's record, until W */
  bool f, b;        /* done (the in-process runner's readiness) */
} xslot;

typedef struct xrun {
  const zt_pipeline_schedule *s;
  const zt_pipeline_stages *st;
  const zt_pipeline_boundary *bd;
  zt_comm *comm; /* NULL: every stage in this process */
  zt_tensor *const *inputs;
  double loss_scale;
  double *losses;
  int S, rank;
  xslot *slots;
  double waited; /* seconds spent waiting for transfers, summed */
} xrun;

static xslot *xat(xrun *r, int stage, int mb) { return &r->slots[zt__pp_slot(r->s, stage, mb)]; }
static bool local(xrun *r, int stage) { return !r->comm || zt_pipeline_stage_rank(r->s, stage) == r->rank; }
/* A tag per (stage, microbatch, direction): 0 activations, 1 gradients. */
static int tag_of(xrun *r, int stage, int mb, int dir) { return (stage * r->s->microbatches + mb) * 2 + dir; }

/* Wait for a transfer; the time goes to r->waited, not to the action that waits. */
static zt_status wait_work(xrun *r, zt_comm_work **w) {
  if (!*w) return ZT_OK;
  double t0 = zt_clock_now();
  zt_status s = zt_comm_wait(*w);
  r->waited += zt_clock_now() - t0;
  *w = NULL;
  return s;
}

static zt_status boundary_tensor(xrun *r, zt_tensor **out) {
  return zt_tensor_empty_tagged(r->bd->ndim, r->bd->shape, r->bd->dtype, ZT_CPU, ZT_MEM_TAG_ACTIVATION, out);
}

static zt_status xforward(xrun *r, int stage, int mb) {
  xslot *sl = xat(r, stage, mb);
  zt_tensor *in = r->inputs[mb];
  if (stage > 0) {
    if (local(r, stage - 1)) {
      ZT_TRY(zt_tensor_alias(xat(r, stage - 1, mb)->out, &sl->in));
    } else {
      ZT_TRY(wait_work(r, &sl->recv_in)); /* posted by RECV_F (sl->in is its buffer) */
      if (!sl->in) return ZT_ERR(ZT_STATUS_STATE, "stage %d's input for microbatch %d was never received", stage, mb);
    }
    ZT_TRY(zt_tensor_set_requires_grad(sl->in, true));
    in = sl->in;
  }
  zt_tensor *out = NULL;
  ZT_TRY(r->st->forward(r->st->ctx, stage, mb, in, &out));
  if (stage == r->S - 1) {
    if (zt_tensor_numel(out) != 1) {
      zt_tensor_free(out);
      return ZT_ERR(ZT_STATUS_SHAPE, "the last stage must return a loss (one element)");
    }
    if (r->losses) r->losses[mb] = zt_tensor_get(out, 0);
    zt_tensor *scaled = NULL;
    zt_status s = r->loss_scale != 1.0 ? zt_mul_scalar(out, r->loss_scale, &scaled) : ZT_OK;
    if (scaled) zt_tensor_free(out), out = scaled;
    if (s) {
      zt_tensor_free(out);
      return s;
    }
  }
  sl->out = out;
  sl->f = true;
  return ZT_OK;
}

static zt_status xbackward_input(xrun *r, int stage, int mb) {
  xslot *sl = xat(r, stage, mb);
  zt_tensor *g = NULL;
  if (stage < r->S - 1) {
    if (local(r, stage + 1)) {
      g = xat(r, stage + 1, mb)->gin;
    } else {
      ZT_TRY(wait_work(r, &sl->recv_gout));
      g = sl->gout;
    }
    if (!g) return ZT_ERR(ZT_STATUS_STATE, "stage %d's output grad for microbatch %d is missing", stage, mb);
  }
  ZT_TRY(wait_work(r, &sl->send_out)); /* its bytes must leave before the output goes */
  ZT_TRY(zt_backward_input(1, &sl->out, g ? &g : NULL, stage > 0 ? 1 : 0, stage > 0 ? &sl->in : NULL, false,
                           stage > 0 ? &sl->gin : NULL, &sl->rec));
  if (stage < r->S - 1 && local(r, stage + 1)) {
    xslot *next = xat(r, stage + 1, mb);
    ZT_TRY(wait_work(r, &next->send_gin));
    zt_tensor_free(next->gin), next->gin = NULL;
  }
  zt_tensor_free(sl->gout), sl->gout = NULL;
  zt_tensor_free(sl->out), sl->out = NULL;
  zt_tensor_free(sl->in), sl->in = NULL; /* the graph keeps what W reads */
  sl->b = true;
  /* input grads sent to another rank by this stage's earlier B's: once sent, gone (at most
   * one per stage stays in flight, not one per microbatch) */
  for (int m = 0; stage > 0 && !local(r, stage - 1) && m < mb; m++) {
    xslot *old = xat(r, stage, m);
    if (!old->send_gin) continue;
    ZT_TRY(wait_work(r, &old->send_gin));
    zt_tensor_free(old->gin), old->gin = NULL;
  }
  return ZT_OK;
}

static zt_status xbackward_weight(xrun *r, int stage, int mb) {
  xslot *sl = xat(r, stage, mb);
  zt_status s = zt_backward_weight(sl->rec);
  zt_deferred_free(sl->rec), sl->rec = NULL;
  return s;
}

static zt_status xaction(xrun *r, zt_pipeline_action a) {
  xslot *sl = xat(r, a.stage, a.mb);
  if (!r->comm && !zt__pp_is_compute(a.op)) return ZT_OK; /* in one process the hand-over is immediate */
  switch (a.op) {
  case ZT_PIPELINE_OP_F: return xforward(r, a.stage, a.mb);
  case ZT_PIPELINE_OP_B: return xbackward_input(r, a.stage, a.mb);
  case ZT_PIPELINE_OP_W: return xbackward_weight(r, a.stage, a.mb);
  case ZT_PIPELINE_OP_BW:
    ZT_TRY(xbackward_input(r, a.stage, a.mb));
    return xbackward_weight(r, a.stage, a.mb);
  case ZT_PIPELINE_OP_SEND_F:
    return zt_isend(r->comm, sl->out, zt_pipeline_stage_rank(r->s, a.stage + 1), tag_of(r, a.stage, a.mb, 0),
                    &sl->send_out);
  case ZT_PIPELINE_OP_RECV_F:
    ZT_TRY(boundary_tensor(r, &sl->in));
    return zt_irecv(r->comm, sl->in, zt_pipeline_stage_rank(r->s, a.stage - 1), tag_of(r, a.stage - 1, a.mb, 0),
                    &sl->recv_in);
  case ZT_PIPELINE_OP_SEND_B:
    return zt_isend(r->comm, sl->gin, zt_pipeline_stage_rank(r->s, a.stage - 1), tag_of(r, a.stage, a.mb, 1),
                    &sl->send_gin);
  case ZT_PIPELINE_OP_RECV_B:
    ZT_TRY(boundary_tensor(r, &sl->gout));
    return zt_irecv(r->comm, sl->gout, zt_pipeline_stage_rank(r->s, a.stage + 1), tag_of(r, a.stage + 1, a.mb, 1),
                    &sl->recv_gout);
  default: return ZT_OK;
  }
}

/* Moves every transfer in flight forward (MPI progresses them only inside its calls): after
 * each action, so that a message a peer already waits for does not sit behind this rank's
 * next computation. */
static zt_status progress(xrun *r) {
  for (int k = 0; k < r->S * r->s->microbatches; k++) {
    xslot *sl = &r->slots[k];
    zt_comm_work *ws[] = {sl->send_out, sl->send_gin, sl->recv_in, sl->recv_gout};
    for (int i = 0; i < 4; i++)
      if (ws[i]) ZT_TRY(zt_comm_test(ws[i], NULL));
  }
  return ZT_OK;
}

/* Waits for what is still in flight (the sends of the last actions; after a failure, also
 * receives: each wait is bounded by the group's timeout), frees the rest; the first failure
 * is kept, with its message (the one that names a missing rank: later waits on the group
 * fail too). */
static zt_status xslots_free(xrun *r, zt_status s) {
  char *first = zt__error_hold(s);
  for (int k = 0; r->slots && k < r->S * r->s->microbatches; k++) {
    xslot *sl = &r->slots[k];
    zt_comm_work **ws[] = {&sl->send_out, &sl->send_gin, &sl->recv_in, &sl->recv_gout};
    for (int i = 0; i < 4; i++) { /* a transfer's buffer may go only once it is done */
      zt_status w = wait_work(r, ws[i]);
      if (!s) s = w;
    }
    zt_tensor_free(sl->in);
    zt_tensor_free(sl->out);
    zt_tensor_free(sl->gin);
    zt_tensor_free(sl->gout);
    zt_deferred_free(sl->rec);
  }
  free(r->slots);
  zt__error_restore(first);
  return s;
}

/* In one process: an action may run when its inputs are there. */
static bool ready(xrun *r, zt_pipeline_action a) {
  switch (a.op) {
  case ZT_PIPELINE_OP_F: return a.stage == 0 || xat(r, a.stage - 1, a.mb)->f;
  case ZT_PIPELINE_OP_B:
  case ZT_PIPELINE_OP_BW: return xat(r, a.stage, a.mb)->f && (a.stage == r->S - 1 || xat(r, a.stage + 1, a.mb)->b);
  case ZT_PIPELINE_OP_W: return xat(r, a.stage, a.mb)->b;
  default: return true;
  }
}

/* Run rank k's action i, naming it in a failure. */
static zt_status step_action(xrun *r, int k, zt_pipeline_action a) {
  zt_status s = xaction(r, a);
  if (s) {
    char tok[32];
    zt__error_prefix(s, "schedule rank %d, action %s", k, zt_pipeline_action_str(a, tok));
  }
  return s;
}

zt_status zt_pipeline_run_local(const zt_pipeline_schedule *s, const zt_pipeline_stages *st, zt_tensor *const *inputs,
                                double loss_scale, double *losses) {
  if (!s || !st || !st->forward || !inputs)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_pipeline_run_local: schedule, stages (with forward) and inputs are required");
  ZT_TRY(zt_pipeline_validate(s));
  xrun r = {s, st, NULL, NULL, inputs, loss_scale, losses, zt_pipeline_stage_count(s), 0, NULL, 0};
  r.slots = calloc((size_t)(r.S * s->microbatches), sizeof *r.slots);
  int *pc = calloc((size_t)s->ranks, sizeof *pc);
  zt_status st0 = r.slots && pc ? ZT_OK : ZT_ERR(ZT_STATUS_OOM, "zt_pipeline_run_local: out of host memory");
  for (bool progress = true; progress && !st0;) {
    progress = false;
    for (int k = 0; k < s->ranks && !st0; k++)
      while (!st0 && pc[k] < s->n_actions[k] && ready(&r, s->actions[k][pc[k]])) {
        st0 = step_action(&r, k, s->actions[k][pc[k]++]);
        progress = true;
      }
  }
  for (int k = 0; k < s->ranks && !st0; k++)
    if (pc[k] < s->n_actions[k]) /* the validator simulates the same rules: cannot happen */
      st0 = ZT_ERR(ZT_STATUS_STATE, "zt_pipeline_run_local: rank %d cannot go on at its action %d", k, pc[k]);
  free(pc);
  return xslots_free(&r, st0);
}

void zt_pipeline_trace_free(zt_pipeline_trace *t) {
  if (!t) return;
  free(t->actions);
  free(t->start);
  free(t->end);
  *t = (zt_pipeline_trace){0};
}

static zt_status trace_new(zt_pipeline_trace *t, int n) {
  *t = (zt_pipeline_trace){0};
  t->actions = malloc(sizeof *t->actions * (size_t)(n ? n : 1));
  t->start = malloc(sizeof *t->start * (size_t)(n ? n : 1));
  t->end = malloc(sizeof *t->end * (size_t)(n ? n : 1));
  if (t->actions && t->start && t->end) return ZT_OK;
  zt_pipeline_trace_free(t);
  return ZT_ERR(ZT_STATUS_OOM, "zt_pipeline_run: out of host memory for a trace of %d actions", n);
}

static void trace_finish(zt_pipeline_trace *t) {
  t->busy = 0;
  for (int i = 0; i < t->n; i++)
    if (zt__pp_is_compute(t->actions[i].op)) t->busy += t->end[i] - t->start[i];
  t->span = t->n ? t->end[t->n - 1] - t->start[0] : 0;
  t->bubble_rate = t->span > 0 ? 1.0 - t->busy / t->span : 0;
}

zt_status zt_pipeline_run(const zt_pipeline_schedule *s, const zt_pipeline_stages *st, zt_comm *comm,
                          const zt_pipeline_boundary *bd, zt_tensor *const *inputs, double loss_scale, double *losses,
                          zt_pipeline_trace *trace) {
  if (trace) *trace = (zt_pipeline_trace){0};
  if (!s || !st || !st->forward || !comm || !bd || !inputs)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_pipeline_run: schedule, stages (with forward), comm, boundary and inputs are required");
  if (zt_comm_size(comm) != s->ranks)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_pipeline_run: the schedule has %d ranks but the group %d", s->ranks,
                  zt_comm_size(comm));
  int S = zt_pipeline_stage_count(s);
  if ((int64_t)S * s->microbatches * 2 > ZT_COMM_MAX_TAG)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_pipeline_run: %d stages x %d microbatches need more message tags than the %d there are", S,
                  s->microbatches, ZT_COMM_MAX_TAG / 2);
  zt_pipeline_schedule *low = NULL;
  ZT_TRY(zt_pipeline_has_comm(s) ? zt_pipeline_validate(s) : zt_pipeline_lower(s, &low));
  if (low) {
    zt_status v = zt_pipeline_validate(low);
    if (v) {
      zt_pipeline_schedule_free(low);
      return v;
    }
  }
  const zt_pipeline_schedule *run_s = low ? low : s;
  xrun r = {run_s, st, bd, comm, inputs, loss_scale, losses, S, zt_comm_rank(comm), NULL, 0};
  r.slots = calloc((size_t)(S * s->microbatches), sizeof *r.slots);
  zt_status st0 = r.slots ? ZT_OK : ZT_ERR(ZT_STATUS_OOM, "zt_pipeline_run: out of host memory");
  int n = run_s->n_actions[r.rank];
  if (!st0 && trace) st0 = trace_new(trace, n);
  double t0 = zt_clock_now();
  for (int i = 0; !st0 && i < n; i++) {
    double a0 = zt_clock_now(), w0 = r.waited;
    st0 = step_action(&r, r.rank, run_s->actions[r.rank][i]);
    if (!st0) st0 = progress(&r);
    if (trace) { /* an action's waits for its transfers count as time before it: it computes from then on */
      trace->actions[i] = run_s->actions[r.rank][i];
      trace->start[i] = a0 - t0 + (r.waited - w0), trace->end[i] = zt_clock_now() - t0;
      trace->n = i + 1;
    }
  }
  if (trace && trace->actions) trace_finish(trace);
  st0 = xslots_free(&r, st0);
  zt_pipeline_schedule_free(low);
  return st0;
}
