/* Running a schedule with every stage in this process (zt_pipeline_run_local): the executor's
 * semantics without transport. Ranks take turns: each runs its next actions while their inputs
 * are there (F of stage s needs F of s-1; B of s needs B of s+1), so the order of each rank's
 * list is kept and the ranks interleave as the schedule lets them. A stage's input is the
 * previous stage's output cut from its graph (an alias made a leaf that requires grad), as a
 * receive would make it; B is zt_backward_input from the stage's output with the next stage's
 * input grad, W zt_backward_weight of B's record, BW both. */
#include <stdlib.h>

#include "core/status_internal.h"
#include "pipeline_internal.h"
#include "zt/autograd.h"
#include "zt/ops.h"

typedef struct slot {
  zt_tensor *in;      /* the stage's input: a leaf (stage > 0) */
  zt_tensor *out;     /* its output (the last stage: the scaled loss), graph alive until B */
  zt_tensor *gin;     /* B's grad of the input: the previous stage's output grad */
  zt_deferred *rec;   /* B's record, until W */
  bool f, b, w;
} slot;

typedef struct run {
  const zt_pipeline_schedule *s;
  const zt_pipeline_stages *st;
  zt_tensor *const *inputs;
  double loss_scale;
  double *losses;
  int S;
  slot *slots;
} run;

static slot *at(run *r, int stage, int mb) { return &r->slots[zt__pp_slot(r->s, stage, mb)]; }

static bool ready(run *r, zt_pipeline_action a) {
  switch (a.op) {
  case ZT_PIPELINE_OP_F: return a.stage == 0 || at(r, a.stage - 1, a.mb)->f;
  case ZT_PIPELINE_OP_B:
  case ZT_PIPELINE_OP_BW: return at(r, a.stage, a.mb)->f && (a.stage == r->S - 1 || at(r, a.stage + 1, a.mb)->b);
  case ZT_PIPELINE_OP_W: return at(r, a.stage, a.mb)->b;
  default: return true; /* sends and receives: the hand-over is immediate here */
  }
}

static zt_status forward(run *r, int stage, int mb) {
  slot *sl = at(r, stage, mb);
  zt_tensor *in = r->inputs[mb];
  if (stage > 0) { /* the previous stage's output, cut from its graph */
    ZT_TRY(zt_tensor_alias(at(r, stage - 1, mb)->out, &sl->in));
    ZT_TRY(zt_tensor_set_requires_grad(sl->in, true));
    in = sl->in;
  }
  zt_tensor *out = NULL;
  ZT_TRY(r->st->forward(r->st->ctx, stage, mb, in, &out));
  if (stage == r->S - 1) {
    if (out->ndim != 0 && zt_tensor_numel(out) != 1) {
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

static zt_status backward_input(run *r, int stage, int mb) {
  slot *sl = at(r, stage, mb);
  zt_tensor *g = stage == r->S - 1 ? NULL : at(r, stage + 1, mb)->gin;
  zt_tensor *gin = NULL;
  ZT_TRY(zt_backward_input(1, &sl->out, g ? &g : NULL, stage > 0 ? 1 : 0, stage > 0 ? &sl->in : NULL, false,
                           stage > 0 ? &gin : NULL, &sl->rec));
  sl->gin = gin;
  sl->b = true;
  /* what the next stage handed back, and this stage's output, are done with (the record
   * keeps what W reads) */
  if (stage < r->S - 1) {
    slot *next = at(r, stage + 1, mb);
    zt_tensor_free(next->gin), next->gin = NULL;
  }
  zt_tensor_free(sl->out), sl->out = NULL;
  return ZT_OK;
}

static zt_status backward_weight(run *r, int stage, int mb) {
  slot *sl = at(r, stage, mb);
  zt_status s = zt_backward_weight(sl->rec);
  zt_deferred_free(sl->rec), sl->rec = NULL;
  if (!s) sl->w = true;
  return s;
}

static zt_status run_action(run *r, zt_pipeline_action a) {
  switch (a.op) {
  case ZT_PIPELINE_OP_F: return forward(r, a.stage, a.mb);
  case ZT_PIPELINE_OP_B: return backward_input(r, a.stage, a.mb);
  case ZT_PIPELINE_OP_W: return backward_weight(r, a.stage, a.mb);
  case ZT_PIPELINE_OP_BW:
    ZT_TRY(backward_input(r, a.stage, a.mb));
    return backward_weight(r, a.stage, a.mb);
  default: return ZT_OK;
  }
}

static void slots_free(run *r) {
  for (int k = 0; r->slots && k < r->S * r->s->microbatches; k++) {
    slot *sl = &r->slots[k];
    zt_tensor_free(sl->in);
    zt_tensor_free(sl->out);
    zt_tensor_free(sl->gin);
    zt_deferred_free(sl->rec);
  }
  free(r->slots);
}

zt_status zt_pipeline_run_local(const zt_pipeline_schedule *s, const zt_pipeline_stages *st, zt_tensor *const *inputs,
                                double loss_scale, double *losses) {
  if (!s || !st || !st->forward || !inputs)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_pipeline_run_local: schedule, stages (with forward) and inputs are required");
  ZT_TRY(zt_pipeline_validate(s));
  run r = {s, st, inputs, loss_scale, losses, zt_pipeline_stage_count(s), NULL};
  r.slots = calloc((size_t)(r.S * s->microbatches), sizeof *r.slots);
  int *pc = calloc((size_t)s->ranks, sizeof *pc);
  zt_status st0 = ZT_OK;
  if (!r.slots || !pc) st0 = ZT_ERR(ZT_STATUS_OOM, "zt_pipeline_run_local: out of host memory");
  for (bool progress = true; progress && !st0;) {
    progress = false;
    for (int k = 0; k < s->ranks && !st0; k++)
      while (pc[k] < s->n_actions[k] && ready(&r, s->actions[k][pc[k]]) && !st0) {
        zt_pipeline_action a = s->actions[k][pc[k]++];
        st0 = run_action(&r, a);
        if (st0) {
          char tok[32];
          zt__error_prefix(st0, "rank %d, action %s", k, zt_pipeline_action_str(a, tok));
        }
        progress = true;
      }
  }
  for (int k = 0; k < s->ranks && !st0; k++)
    if (pc[k] < s->n_actions[k]) /* the validator simulates the same rules: cannot happen */
      st0 = ZT_ERR(ZT_STATUS_STATE, "zt_pipeline_run_local: rank %d cannot go on at its action %d", k, pc[k]);
  free(pc);
  slots_free(&r);
  return st0;
}
