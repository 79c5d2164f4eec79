/* Lowering: the compute-only form to the one with explicit sends and receives. A send goes
 * right after the action that produces it, so the peer's data leaves as soon as it can. A
 * receive goes right before the action that needs it, not as early as possible: a rank blocked
 * in an early receive cannot run work that is ready (the head-of-line bubble of pytorch#172668).
 * Between two ranks, messages of a kind are received in the order they were sent (as blocking
 * point-to-point messages match, and as the validator's rule 4 asks): when a rank needs a
 * message before one sent earlier on the same channel, the earlier ones are received first,
 * right before it. That never waits longer: an earlier message's producer ran before the
 * needed one's on the sender. So a valid schedule lowers to a valid one. */
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "pipeline_internal.h"

/* The hop out of stage `from` to stage `to`, when `to` exists and is on another rank. */
static bool crosses(const zt_pipeline_schedule *s, int from, int to) {
  if (to < 0 || to >= zt_pipeline_stage_count(s)) return false;
  return zt_pipeline_stage_rank(s, to) != zt_pipeline_stage_rank(s, from);
}

/* Messages are numbered kind * S * M + slot of the sending stage (kind 0: activations of stage
 * s to s+1; 1: input grads of stage s to s-1). The message compute action a needs from another
 * rank (in) or produces for one (out, with the receiving rank in *peer); -1: none. */
static int message_in(const zt_pipeline_schedule *s, zt_pipeline_action a) {
  int SM = zt_pipeline_stage_count(s) * s->microbatches;
  if (a.op == ZT_PIPELINE_OP_F) return crosses(s, a.stage, a.stage - 1) ? zt__pp_slot(s, a.stage - 1, a.mb) : -1;
  if (a.op == ZT_PIPELINE_OP_B || a.op == ZT_PIPELINE_OP_BW)
    return crosses(s, a.stage, a.stage + 1) ? SM + zt__pp_slot(s, a.stage + 1, a.mb) : -1;
  return -1;
}
static int message_out(const zt_pipeline_schedule *s, zt_pipeline_action a, int *peer) {
  int SM = zt_pipeline_stage_count(s) * s->microbatches, to = a.op == ZT_PIPELINE_OP_F ? a.stage + 1 : a.stage - 1;
  if (!(a.op == ZT_PIPELINE_OP_F || a.op == ZT_PIPELINE_OP_B || a.op == ZT_PIPELINE_OP_BW) || !crosses(s, a.stage, to))
    return -1;
  *peer = zt_pipeline_stage_rank(s, to);
  return (a.op == ZT_PIPELINE_OP_F ? 0 : SM) + zt__pp_slot(s, a.stage, a.mb);
}

/* The receive of message msg (on the rank of the stage it goes to). */
static zt_pipeline_action recv_of(const zt_pipeline_schedule *s, int msg) {
  int SM = zt_pipeline_stage_count(s) * s->microbatches, slot = msg % SM, st = slot / s->microbatches;
  if (msg < SM) return (zt_pipeline_action){ZT_PIPELINE_OP_RECV_F, st + 1, slot % s->microbatches};
  return (zt_pipeline_action){ZT_PIPELINE_OP_RECV_B, st - 1, slot % s->microbatches};
}

typedef struct lowering {
  const zt_pipeline_schedule *s;
  zt_pipeline_schedule *o;
  int *prev;     /* per message: the one sent before it on its channel (sender, receiver, kind), or -1 */
  bool *got;     /* per message: received already */
  int *chain;    /* scratch: the messages a receive takes along */
} lowering;

/* Link each message to the previous one on its channel: rank q's sends, in its order. */
static void link_channels(lowering *L, int q, int *last) {
  const zt_pipeline_schedule *s = L->s;
  for (int i = 0; i < s->n_actions[q]; i++) {
    zt_pipeline_action a = s->actions[q][i];
    int peer, msg = message_out(s, a, &peer);
    if (msg < 0) continue;
    int *l = &last[2 * peer + (a.op != ZT_PIPELINE_OP_F)];
    L->prev[msg] = *l, *l = msg;
  }
  for (int k = 0; k < 2 * s->ranks; k++) last[k] = -1;
}

/* Rank r's receives of message msg and of the ones sent before it on its channel that r has
 * not received yet, in the order they were sent. */
static zt_status receive(lowering *L, int r, int msg) {
  int n = 0;
  for (int m = msg; m >= 0 && !L->got[m]; m = L->prev[m]) L->chain[n++] = m, L->got[m] = true;
  while (n > 0) ZT_TRY(zt_pipeline_schedule_push(L->o, r, recv_of(L->s, L->chain[--n])));
  return ZT_OK;
}

zt_status zt__pp_lower_checked(const zt_pipeline_schedule *s, zt_pipeline_schedule **out) {
  *out = NULL;
  size_t n = 2 * (size_t)zt_pipeline_stage_count(s) * (size_t)s->microbatches;
  lowering L = {.s = s, .prev = malloc(n * sizeof(int)), .got = calloc(n, sizeof(bool)), .chain = malloc(n * sizeof(int))};
  int *last = malloc(2 * (size_t)s->ranks * sizeof *last);
  zt_status st = L.prev && L.got && L.chain && last
                     ? zt_pipeline_schedule_new(s->ranks, s->chunks, s->microbatches, s->placement, &L.o)
                     : ZT_ERR(ZT_STATUS_OOM, "out of host memory lowering a pipeline schedule");
  if (st == ZT_OK) {
    memcpy(L.o->name, s->name, sizeof L.o->name);
    for (int k = 0; k < 2 * s->ranks; k++) last[k] = -1;
    for (int q = 0; q < s->ranks; q++) link_channels(&L, q, last);
  }
  for (int r = 0; r < s->ranks && st == ZT_OK; r++)
    for (int i = 0; i < s->n_actions[r] && st == ZT_OK; i++) {
      zt_pipeline_action a = s->actions[r][i];
      int peer, in = message_in(s, a), outm = message_out(s, a, &peer);
      if (in >= 0) st = receive(&L, r, in);
      if (st == ZT_OK) st = zt_pipeline_schedule_push(L.o, r, a);
      if (st == ZT_OK && outm >= 0)
        st = zt_pipeline_schedule_push(L.o, r, (zt_pipeline_action){a.op == ZT_PIPELINE_OP_F ? ZT_PIPELINE_OP_SEND_F
                                                                                             : ZT_PIPELINE_OP_SEND_B,
                                                                    a.stage, a.mb});
    }
  free(L.prev);
  free(L.got);
  free(L.chain);
  free(last);
  if (st != ZT_OK) {
    zt_pipeline_schedule_free(L.o);
    return st;
  }
  *out = L.o;
  return ZT_OK;
}

zt_status zt_pipeline_lower(const zt_pipeline_schedule *s, zt_pipeline_schedule **out) {
  *out = NULL;
  if (zt_pipeline_has_comm(s))
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "the schedule has sends and receives already; lowering takes the compute-only form (F, B, W, BW)");
  /* only a valid schedule has one producer per message (what the channels are made of) */
  ZT_TRY(zt__pp_check_rules(s));
  return zt__pp_lower_checked(s, out);
}
