/* Internal: the op-output cache of selective checkpointing. A checkpoint region with a
 * policy owns one cache; while it is the thread's active scope, the dispatcher asks the
 * policy about each recorded op (record mode, the region's forward) and keeps the outputs
 * of SAVE ops, or hands those outputs back instead of running the op (replay mode, the
 * recomputation). Entries are addressed by the op's ordinal in the region.
 * Included by: src/ops and src/strategies (selective checkpointing). */
#ifndef ZT_OPS_SAC_H
#define ZT_OPS_SAC_H

#include "zt/ops.h"

typedef struct zt__sac zt__sac;

typedef enum zt__sac_mode {
  ZT__SAC_RECORD = 0,
  ZT__SAC_REPLAY
} zt__sac_mode;

/* The thread's active scope. sac NULL: no policy applies (a plain checkpoint region, a
 * reentrant recomputation, or no region at all). */
typedef struct zt__sac_scope {
  zt__sac *sac;
  zt__sac_mode mode;
  int next; /* ordinal of the next op the policy sees */
} zt__sac_scope;

zt__sac *zt__sac_new(zt_checkpoint_policy policy);
void zt__sac_free(zt__sac *s); /* NULL is a no-op */
/* Make (s, mode) the active scope from ordinal 0; *saved receives the previous scope. */
void zt__sac_enter(zt__sac *s, zt__sac_mode mode, zt__sac_scope *saved);
void zt__sac_leave(const zt__sac_scope *saved);
/* Bytes the cache holds (outputs and extra saved tensors; shared storage counted once per entry). */
int64_t zt__sac_cached_bytes(const zt__sac *s);

/* ---- used by the dispatcher (registry.c) */
typedef struct zt__op_call zt__op_call;
typedef struct zt__sac_entry zt__sac_entry;
/* Before an op that records a node runs: in record mode asks the policy and returns the
 * entry to capture into (SAVE) or NULL; in replay mode checks the op sequence and returns
 * the entry to replay (SAVE) or NULL (run the op). *replay tells which. */
ZT_NODISCARD zt_status zt__sac_before(zt__op_call *c, zt__sac_entry **entry, bool *replay);
/* Record mode: a tensor op c saved in forward (classified as input, output or extra). */
ZT_NODISCARD zt_status zt__sac_capture_save(zt__op_call *c, zt__sac_entry *e, const zt_tensor *t);
/* Record mode, after a successful forward: keep the outputs, attrs and RNG state. */
ZT_NODISCARD zt_status zt__sac_capture_done(zt__op_call *c, zt__sac_entry *e);
/* Replay mode, instead of the op's forward: outputs from the cache, saves replayed on
 * c->node, attrs and RNG state as after the forward's run. */
ZT_NODISCARD zt_status zt__sac_replay(zt__op_call *c, zt__sac_entry *e);

#endif
