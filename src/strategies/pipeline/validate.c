/* The validator, run before any schedule executes: ranges and placement, each microbatch's
 * F, B, W (or BW) once per stage, the order within a rank, sends matched to receives, and no
 * deadlock (the simulator's walk); a compute-only schedule is lowered and held to the same
 * rules (what zt_pipeline_run executes). The first broken rule is the error, naming the rank,
 * the action and the rule. Every check is linear in the actions (plus ranks^2 counters). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "pipeline_internal.h"

static const char *const ONCE = "every microbatch runs F, and B and W or BW, exactly once per stage";

/* Rule 1: ranges and placement. */
zt_status zt__pp_check_ranges(const zt_pipeline_schedule *s) {
  int S = zt_pipeline_stage_count(s);
  char t[32];
  for (int r = 0; r < s->ranks; r++)
    for (int i = 0; i < s->n_actions[r]; i++) {
      zt_pipeline_action a = s->actions[r][i];
      if ((unsigned)a.op >= ZT_PIPELINE_OP_COUNT)
        return ZT_ERR(ZT_STATUS_INVALID_ARG, "rank %d, action %d: unknown kind %d", r, i, (int)a.op);
      if (a.stage < 0 || a.stage >= S)
        return ZT_ERR(ZT_STATUS_INVALID_ARG, "rank %d, action %d (%s): stage %d is out of range (the schedule has %d stages)",
                      r, i, zt_pipeline_action_str(a, t), a.stage, S);
      if (a.mb < 0 || a.mb >= s->microbatches)
        return ZT_ERR(ZT_STATUS_INVALID_ARG,
                      "rank %d, action %d (%s): microbatch %d is out of range (the schedule has microbatches=%d)", r, i,
                      zt_pipeline_action_str(a, t), a.mb, s->microbatches);
      int q = zt_pipeline_stage_rank(s, a.stage);
      if (q != r)
        return ZT_ERR(ZT_STATUS_INVALID_ARG,
                      "rank %d, action %d (%s): stage %d is placed on rank %d, not rank %d (placement %s)", r, i,
                      zt_pipeline_action_str(a, t), a.stage, q, r,
                      s->placement == ZT_PIPELINE_PLACEMENT_V ? "v: rank r holds stages r and 2P-1-r" : "loop: stage s on rank s%P");
    }
  return ZT_OK;
}

/* Rule 2 and the duplicate part of rule 4: each (op, stage, mb) at most once, and the
 * compute ones present as ONCE says. */
static zt_status check_once(const zt_pipeline_schedule *s, const zt__pp_index *ix) {
  char t[32], t2[32];
  for (int r = 0; r < s->ranks; r++)
    for (int i = 0; i < s->n_actions[r]; i++) {
      zt_pipeline_action a = s->actions[r][i];
      int j, q = zt__pp_find(s, ix, a.op, a.stage, a.mb, &j);
      if (q != r || j != i)
        return ZT_ERR(ZT_STATUS_INVALID_ARG, "rank %d, action %d: %s appears again (first as action %d of rank %d; %s)", r,
                      i, zt_pipeline_action_str(a, t), j, q, zt__pp_is_compute(a.op) ? ONCE : "each hop is sent and received once");
    }
  int S = zt_pipeline_stage_count(s), i;
  for (int st = 0; st < S; st++)
    for (int m = 0; m < s->microbatches; m++) {
      int r = zt_pipeline_stage_rank(s, st);
      bool f = zt__pp_find(s, ix, ZT_PIPELINE_OP_F, st, m, &i) >= 0;
      bool b = zt__pp_find(s, ix, ZT_PIPELINE_OP_B, st, m, &i) >= 0;
      bool w = zt__pp_find(s, ix, ZT_PIPELINE_OP_W, st, m, &i) >= 0;
      bool bw = zt__pp_find(s, ix, ZT_PIPELINE_OP_BW, st, m, &i) >= 0;
      zt_pipeline_action F = {ZT_PIPELINE_OP_F, st, m}, B = {ZT_PIPELINE_OP_B, st, m}, W = {ZT_PIPELINE_OP_W, st, m};
      if (!f) return ZT_ERR(ZT_STATUS_INVALID_ARG, "rank %d: %s is missing (%s)", r, zt_pipeline_action_str(F, t), ONCE);
      if (bw && (b || w))
        return ZT_ERR(ZT_STATUS_INVALID_ARG, "rank %d: stage %d microbatch %d has both BW and %s (%s)", r, st, m,
                      b ? zt_pipeline_action_str(B, t) : zt_pipeline_action_str(W, t), ONCE);
      if (!bw && !b && !w)
        return ZT_ERR(ZT_STATUS_INVALID_ARG, "rank %d: stage %d microbatch %d has no backward (neither %s and %s nor BW; %s)",
                      r, st, m, zt_pipeline_action_str(B, t), zt_pipeline_action_str(W, t2), ONCE);
      if (!bw && !w)
        return ZT_ERR(ZT_STATUS_INVALID_ARG, "rank %d: %s has no %s (W is missing; %s)", r, zt_pipeline_action_str(B, t),
                      zt_pipeline_action_str(W, t2), ONCE);
      if (!bw && !b)
        return ZT_ERR(ZT_STATUS_INVALID_ARG, "rank %d: %s has no %s (B is missing; %s)", r, zt_pipeline_action_str(W, t),
                      zt_pipeline_action_str(B, t2), ONCE);
    }
  return ZT_OK;
}

/* Rule 3: within a rank, the backward after F, W after B. */
static zt_status check_rank_order(const zt_pipeline_schedule *s, const zt__pp_index *ix) {
  char t[32], t2[32];
  for (int r = 0; r < s->ranks; r++)
    for (int i = 0; i < s->n_actions[r]; i++) {
      zt_pipeline_action a = s->actions[r][i];
      zt_pipeline_op need;
      const char *rule;
      if (a.op == ZT_PIPELINE_OP_B || a.op == ZT_PIPELINE_OP_BW)
        need = ZT_PIPELINE_OP_F, rule = "the backward of a stage runs after its F";
      else if (a.op == ZT_PIPELINE_OP_W) need = ZT_PIPELINE_OP_B, rule = "W runs after the B of its stage and microbatch";
      else continue;
      int j;
      zt__pp_find(s, ix, need, a.stage, a.mb, &j);
      if (j > i)
        return ZT_ERR(ZT_STATUS_INVALID_ARG, "rank %d, action %d: %s comes before %s (%s)", r, i,
                      zt_pipeline_action_str(a, t), zt_pipeline_action_str((zt_pipeline_action){need, a.stage, a.mb}, t2),
                      rule);
    }
  return ZT_OK;
}

/* The hop a communication action belongs to: the compute action on its own rank that it
 * follows (sends) or precedes (receives), and the peer's stage. false: no such hop. */
static bool hop_of(const zt_pipeline_schedule *s, const zt__pp_index *ix, zt_pipeline_action a, zt_pipeline_op *local,
                   int *peer_stage) {
  int S = zt_pipeline_stage_count(s), i;
  zt_pipeline_op back = zt__pp_find(s, ix, ZT_PIPELINE_OP_BW, a.stage, a.mb, &i) >= 0 ? ZT_PIPELINE_OP_BW : ZT_PIPELINE_OP_B;
  switch (a.op) {
    case ZT_PIPELINE_OP_SEND_F: *local = ZT_PIPELINE_OP_F, *peer_stage = a.stage + 1; break;
    case ZT_PIPELINE_OP_RECV_F: *local = ZT_PIPELINE_OP_F, *peer_stage = a.stage - 1; break;
    case ZT_PIPELINE_OP_SEND_B: *local = back, *peer_stage = a.stage - 1; break;
    case ZT_PIPELINE_OP_RECV_B: *local = back, *peer_stage = a.stage + 1; break;
    default: return false;
  }
  if (*peer_stage < 0 || *peer_stage >= S) return false;
  return zt_pipeline_stage_rank(s, *peer_stage) != zt_pipeline_stage_rank(s, a.stage);
}

/* The receive that matches a send, and the other way round. */
static zt_pipeline_action partner(zt_pipeline_action a) {
  switch (a.op) {
    case ZT_PIPELINE_OP_SEND_F: return (zt_pipeline_action){ZT_PIPELINE_OP_RECV_F, a.stage + 1, a.mb};
    case ZT_PIPELINE_OP_RECV_F: return (zt_pipeline_action){ZT_PIPELINE_OP_SEND_F, a.stage - 1, a.mb};
    case ZT_PIPELINE_OP_SEND_B: return (zt_pipeline_action){ZT_PIPELINE_OP_RECV_B, a.stage - 1, a.mb};
    default: return (zt_pipeline_action){ZT_PIPELINE_OP_SEND_B, a.stage + 1, a.mb};
  }
}

/* Rule 4, per action: a send or receive belongs to a hop between ranks, sits on the right
 * side of its compute action, and has its partner; every hop of the compute actions has both. */
static zt_status check_comm_actions(const zt_pipeline_schedule *s, const zt__pp_index *ix) {
  char t[32], t2[32];
  int S = zt_pipeline_stage_count(s);
  for (int r = 0; r < s->ranks; r++)
    for (int i = 0; i < s->n_actions[r]; i++) {
      zt_pipeline_action a = s->actions[r][i];
      zt_pipeline_op local;
      int peer, j;
      if (zt__pp_is_compute(a.op)) {
        /* its hops in and out: F: in from s-1, out to s+1; backward: in from s+1, out to s-1 */
        if (a.op == ZT_PIPELINE_OP_W) continue;
        bool fwd = a.op == ZT_PIPELINE_OP_F;
        zt_pipeline_action need[2] = {{fwd ? ZT_PIPELINE_OP_RECV_F : ZT_PIPELINE_OP_RECV_B, a.stage, a.mb},
                                      {fwd ? ZT_PIPELINE_OP_SEND_F : ZT_PIPELINE_OP_SEND_B, a.stage, a.mb}};
        int peers[2] = {fwd ? a.stage - 1 : a.stage + 1, fwd ? a.stage + 1 : a.stage - 1};
        for (int k = 0; k < 2; k++) {
          if (peers[k] < 0 || peers[k] >= S || zt_pipeline_stage_rank(s, peers[k]) == r) continue;
          if (zt__pp_find(s, ix, need[k].op, need[k].stage, need[k].mb, &j) < 0)
            return ZT_ERR(ZT_STATUS_INVALID_ARG,
                          "rank %d: %s has no %s (in a schedule with sends and receives every hop between ranks needs "
                          "both; zt_pipeline_lower adds them)",
                          r, zt_pipeline_action_str(a, t), zt_pipeline_action_str(need[k], t2));
        }
        continue;
      }
      if (!hop_of(s, ix, a, &local, &peer))
        return ZT_ERR(ZT_STATUS_INVALID_ARG,
                      "rank %d, action %d: %s is not a hop between ranks (stage %d's neighbour is on the same rank or "
                      "does not exist)",
                      r, i, zt_pipeline_action_str(a, t), a.stage);
      zt__pp_find(s, ix, local, a.stage, a.mb, &j);
      bool send = a.op == ZT_PIPELINE_OP_SEND_F || a.op == ZT_PIPELINE_OP_SEND_B;
      zt_pipeline_action la = {local, a.stage, a.mb};
      if (send && j > i)
        return ZT_ERR(ZT_STATUS_INVALID_ARG, "rank %d, action %d: %s comes before %s (a send follows the action that produces it)",
                      r, i, zt_pipeline_action_str(a, t), zt_pipeline_action_str(la, t2));
      if (!send && j < i)
        return ZT_ERR(ZT_STATUS_INVALID_ARG, "rank %d, action %d: %s comes after %s (a receive precedes the action that needs it)",
                      r, i, zt_pipeline_action_str(a, t), zt_pipeline_action_str(la, t2));
      zt_pipeline_action p = partner(a);
      if (zt__pp_find(s, ix, p.op, p.stage, p.mb, &j) < 0)
        return ZT_ERR(ZT_STATUS_INVALID_ARG, "rank %d, action %d: %s has no matching %s on rank %d", r, i,
                      zt_pipeline_action_str(a, t), zt_pipeline_action_str(p, t2), zt_pipeline_stage_rank(s, p.stage));
    }
  return ZT_OK;
}

/* The message a communication action carries: its kind (0 activations, 1 gradients) and the
 * (stage, microbatch) slot of the stage that sends it, as an index into 2 x S x M entries; the
 * rank on the other side goes to *peer. */
static int message_of(const zt_pipeline_schedule *s, zt_pipeline_action a, int *peer) {
  int S = zt_pipeline_stage_count(s), from = a.stage, to = a.stage, kind = 0;
  switch (a.op) {
    case ZT_PIPELINE_OP_SEND_F: to = a.stage + 1; break;
    case ZT_PIPELINE_OP_RECV_F: from = a.stage - 1; break;
    case ZT_PIPELINE_OP_SEND_B: to = a.stage - 1, kind = 1; break;
    default: from = a.stage + 1, kind = 1; break; /* RECV_B */
  }
  bool send = a.op == ZT_PIPELINE_OP_SEND_F || a.op == ZT_PIPELINE_OP_SEND_B;
  *peer = zt_pipeline_stage_rank(s, send ? to : from);
  return kind * S * s->microbatches + zt__pp_slot(s, from, a.mb);
}

/* Number each of rank r's sends by its place among those of its channel (the receiving rank
 * and the kind), into num[message]; count holds 2 x ranks counters, zero on entry and on
 * return. */
static void number_channel(const zt_pipeline_schedule *s, int r, int *count, int *num) {
  for (int i = 0; i < s->n_actions[r]; i++) {
    zt_pipeline_action a = s->actions[r][i];
    if (a.op != ZT_PIPELINE_OP_SEND_F && a.op != ZT_PIPELINE_OP_SEND_B) continue;
    int peer, msg = message_of(s, a, &peer);
    num[msg] = count[2 * peer + (a.op == ZT_PIPELINE_OP_SEND_B)]++;
  }
  memset(count, 0, 2 * (size_t)s->ranks * sizeof *count);
}

/* Rule 4, between two ranks: the k-th send of a kind from rank a to rank b is matched by the
 * k-th receive of that kind on b from a. Every message gets its number on the sending side,
 * then the receives are walked in order; linear in the actions (check_comm_actions has
 * matched every send with one receive already). */
static zt_status check_comm_order(const zt_pipeline_schedule *s) {
  size_t n = 2 * (size_t)zt_pipeline_stage_count(s) * (size_t)s->microbatches;
  int *num = malloc(n * sizeof *num), *count = calloc(2 * (size_t)s->ranks, sizeof *count);
  if (!num || !count) {
    free(num);
    free(count);
    return ZT_ERR(ZT_STATUS_OOM, "out of host memory checking a pipeline schedule's sends and receives");
  }
  for (int r = 0; r < s->ranks; r++) number_channel(s, r, count, num);
  zt_status st = ZT_OK;
  for (int b = 0; b < s->ranks && st == ZT_OK; b++) {
    for (int j = 0; j < s->n_actions[b] && st == ZT_OK; j++) {
      zt_pipeline_action y = s->actions[b][j];
      if (y.op != ZT_PIPELINE_OP_RECV_F && y.op != ZT_PIPELINE_OP_RECV_B) continue;
      int a, msg = message_of(s, y, &a), kind = y.op == ZT_PIPELINE_OP_RECV_B, k = count[2 * a + kind]++;
      if (num[msg] == k) continue;
      /* send number k from a to b: the one the k-th receive should have matched */
      zt_pipeline_op so = kind ? ZT_PIPELINE_OP_SEND_B : ZT_PIPELINE_OP_SEND_F;
      for (int i = 0; i < s->n_actions[a]; i++) {
        zt_pipeline_action x = s->actions[a][i];
        int peer = -1, m = x.op == so ? message_of(s, x, &peer) : 0;
        if (peer != b || num[m] != k) continue;
        char t[32], t2[32], t3[32];
        st = ZT_ERR(ZT_STATUS_INVALID_ARG,
                    "rank %d, action %d: %s is send number %d from rank %d to rank %d, but rank %d's receive number %d "
                    "is %s, not %s (sends and receives between two ranks match in order, as blocking point-to-point "
                    "messages do)",
                    a, i, zt_pipeline_action_str(x, t), k + 1, a, b, b, k + 1, zt_pipeline_action_str(y, t2),
                    zt_pipeline_action_str(partner(x), t3));
        break;
      }
      ZT_ASSERT(st != ZT_OK); /* the receive's own send has another number, so send number k exists */
    }
    memset(count, 0, 2 * (size_t)s->ranks * sizeof *count);
  }
  free(num);
  free(count);
  return st;
}

zt_status zt__pp_check_rules(const zt_pipeline_schedule *s) {
  ZT_TRY(zt__pp_check_ranges(s));
  zt__pp_index ix;
  ZT_TRY(zt__pp_index_build(s, &ix));
  zt_status st = check_once(s, &ix);
  if (st == ZT_OK) st = check_rank_order(s, &ix);
  if (st == ZT_OK && zt_pipeline_has_comm(s)) st = check_comm_actions(s, &ix);
  if (st == ZT_OK && zt_pipeline_has_comm(s)) st = check_comm_order(s);
  zt__pp_index_free(&ix);
  if (st == ZT_OK) st = zt__pp_check_progress(s);
  return st;
}

zt_status zt_pipeline_validate(const zt_pipeline_schedule *s) {
  ZT_TRY(zt__pp_check_rules(s));
  if (zt_pipeline_has_comm(s)) return ZT_OK;
  /* what zt_pipeline_run executes: the lowered form, which must pass the same rules (lowering
   * keeps a valid schedule valid; this holds it to that) */
  zt_pipeline_schedule *l;
  ZT_TRY(zt__pp_lower_checked(s, &l));
  zt_status st = zt__pp_check_rules(l);
  zt_pipeline_schedule_free(l);
  if (st != ZT_OK)
    return zt__error_prefix(st, "the schedule is valid, but its form with sends and receives (zt_pipeline_lower, "
                                "what zt_pipeline_run executes) is not; this is a bug in the lowering, please report "
                                "it with the schedule");
  return ZT_OK;
}
