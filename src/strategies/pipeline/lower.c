/* Lowering: the compute-only form to the one with explicit sends and receives. A receive goes
 * right before the action that needs it, not as early as possible: a rank blocked in an early
 * receive cannot run work that is ready (the head-of-line bubble of pytorch#172668). A send
 * goes right after the action that produces it, so the peer's data leaves as soon as it can. */
#include <string.h>

#include "core/status_internal.h"
#include "pipeline_internal.h"

/* The hop out of stage `from` to stage `to`, when `to` exists and is on another rank. */
static bool crosses(const zt_pipeline_schedule *s, int from, int to) {
  if (to < 0 || to >= zt_pipeline_stage_count(s)) return false;
  return zt_pipeline_stage_rank(s, to) != zt_pipeline_stage_rank(s, from);
}

zt_status zt_pipeline_lower(const zt_pipeline_schedule *s, zt_pipeline_schedule **out) {
  *out = NULL;
  if (zt_pipeline_has_comm(s))
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "the schedule has sends and receives already; lowering takes the compute-only form (F, B, W, BW)");
  zt_pipeline_schedule *o;
  ZT_TRY(zt_pipeline_schedule_new(s->ranks, s->chunks, s->microbatches, s->placement, &o));
  memcpy(o->name, s->name, sizeof o->name);
  zt_status st = ZT_OK;
  for (int r = 0; r < s->ranks && st == ZT_OK; r++)
    for (int i = 0; i < s->n_actions[r] && st == ZT_OK; i++) {
      zt_pipeline_action a = s->actions[r][i];
      bool fwd = a.op == ZT_PIPELINE_OP_F, back = a.op == ZT_PIPELINE_OP_B || a.op == ZT_PIPELINE_OP_BW;
      int in = fwd ? a.stage - 1 : a.stage + 1, outst = fwd ? a.stage + 1 : a.stage - 1;
      if ((fwd || back) && crosses(s, a.stage, in))
        st = zt_pipeline_schedule_push(o, r, (zt_pipeline_action){fwd ? ZT_PIPELINE_OP_RECV_F : ZT_PIPELINE_OP_RECV_B,
                                                                  a.stage, a.mb});
      if (st == ZT_OK) st = zt_pipeline_schedule_push(o, r, a);
      if (st == ZT_OK && (fwd || back) && crosses(s, a.stage, outst))
        st = zt_pipeline_schedule_push(o, r, (zt_pipeline_action){fwd ? ZT_PIPELINE_OP_SEND_F : ZT_PIPELINE_OP_SEND_B,
                                                                  a.stage, a.mb});
    }
  if (st != ZT_OK) {
    zt_pipeline_schedule_free(o);
    return st;
  }
  *out = o;
  return ZT_OK;
}
