/* Selective checkpointing's op-output cache (see sac.h). An entry per op the policy saw in
 * the region's forward: its name and decision and, for SAVE, aliases of its outputs, the
 * recipe of what it saved (input i, output k, or an extra tensor kept here), its attrs
 * and the RNG state after it, so that replay leaves every later op exactly as forward did. */
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "sac.h"
#include "op.h"

typedef enum save_kind { SAVE_INPUT, SAVE_OUTPUT, SAVE_EXTRA } save_kind;
typedef struct save_step {
  save_kind kind;
  int index;         /* input or output index */
  zt_tensor *extra;  /* SAVE_EXTRA: an alias kept by the cache */
} save_step;

struct zt__sac_entry {
  const zt__op *op;
  zt_checkpoint_decision decision;
  int n_out;
  zt_tensor *out[ZT_OP_MAX_ATTRS];
  uint64_t out_version[ZT_OP_MAX_ATTRS];
  save_step *steps;
  int n_steps, cap_steps;
  zt__op_attrs attrs;
  zt_rng_state rng_after;
  bool complete; /* the forward of the op succeeded */
};

struct zt__sac {
  zt_checkpoint_policy policy;
  bool recording; /* the region's forward is running (a backward inside it may replay what exists so far) */
  zt__sac_entry *e;
  int n, cap;
};

static _Thread_local zt__sac_scope tl_scope; /* zero: no scope */

zt__sac *zt__sac_new(zt_checkpoint_policy policy) {
  zt__sac *s = calloc(1, sizeof *s);
  if (!s) {
    (void)ZT_ERR(ZT_STATUS_OOM, "zt_checkpoint: out of host memory (%zu bytes) for a selective checkpoint's cache",
                 sizeof *s);
    return NULL;
  }
  s->policy = policy;
  return s;
}

void zt__sac_free(zt__sac *s) {
  if (!s) return;
  for (int i = 0; i < s->n; i++) {
    zt__sac_entry *e = &s->e[i];
    for (int k = 0; k < e->n_out; k++) zt_tensor_free(e->out[k]);
    for (int j = 0; j < e->n_steps; j++) zt_tensor_free(e->steps[j].extra);
    free(e->steps);
  }
  free(s->e);
  free(s);
}

void zt__sac_enter(zt__sac *s, zt__sac_mode mode, zt__sac_scope *saved) {
  *saved = tl_scope;
  tl_scope = (zt__sac_scope){s, mode, 0};
  if (s && mode == ZT__SAC_RECORD) s->recording = true;
}

void zt__sac_leave(const zt__sac_scope *saved) {
  if (tl_scope.sac && tl_scope.mode == ZT__SAC_RECORD) tl_scope.sac->recording = false;
  tl_scope = *saved;
}

int64_t zt__sac_cached_bytes(const zt__sac *s) {
  int64_t b = 0;
  for (int i = 0; s && i < s->n; i++) {
    const zt__sac_entry *e = &s->e[i];
    for (int k = 0; k < e->n_out; k++)
      if (e->out[k]) b += (int64_t)e->out[k]->storage->nbytes;
    for (int j = 0; j < e->n_steps; j++)
      if (e->steps[j].extra) b += (int64_t)e->steps[j].extra->storage->nbytes;
  }
  return b;
}

static zt_status op_info(zt__op_call *c, int index, zt_checkpoint_op_info *info) {
  int64_t bytes = 0;
  for (int k = 0; k < c->n_out; k++) {
    int64_t n = 1;
    for (int d = 0; d < c->out_meta[k].ndim; d++) n *= c->out_meta[k].shape[d];
    bytes += n * (int64_t)zt_dtype_size(c->out_meta[k].dtype);
  }
  *info = (zt_checkpoint_op_info){c->op->name, index, c->n_in, c->orig, c->out_meta[0].ndim, c->out_meta[0].shape,
                                  c->out_meta[0].dtype, bytes};
  return ZT_OK;
}

zt_status zt__sac_before(zt__op_call *c, zt__sac_entry **entry, bool *replay) {
  *entry = NULL;
  *replay = false;
  zt__sac *s = tl_scope.sac;
  if (!s) return ZT_OK;
  int idx = tl_scope.next++;
  if (tl_scope.mode == ZT__SAC_RECORD) {
    zt_checkpoint_op_info info;
    ZT_TRY(op_info(c, idx, &info));
    zt_checkpoint_decision d = s->policy.fn ? s->policy.fn(&info, s->policy.user_data) : ZT_CHECKPOINT_RECOMPUTE;
    if (d != ZT_CHECKPOINT_SAVE && d != ZT_CHECKPOINT_RECOMPUTE)
      return ZT_ERR(ZT_STATUS_INVALID_ARG,
                    "zt_checkpoint: the selective policy returned %d for op '%s' (#%d); it must return "
                    "ZT_CHECKPOINT_SAVE or ZT_CHECKPOINT_RECOMPUTE",
                    (int)d, c->op->name, idx);
    if (s->n == s->cap) {
      int cap = s->cap ? 2 * s->cap : 32;
      zt__sac_entry *e = realloc(s->e, sizeof *e * (size_t)cap);
      if (!e) return ZT_ERR(ZT_STATUS_OOM, "zt_checkpoint: out of host memory for the selective cache");
      s->e = e;
      s->cap = cap;
    }
    ZT_ASSERT(idx == s->n); /* a region's forward runs once */
    zt__sac_entry *e = &s->e[s->n++];
    memset(e, 0, sizeof *e);
    e->op = c->op;
    e->decision = d;
    e->complete = d != ZT_CHECKPOINT_SAVE; /* a SAVE entry is complete once its outputs are kept */
    if (d == ZT_CHECKPOINT_SAVE) *entry = e;
    return ZT_OK;
  }
  if (idx >= s->n && s->recording) return ZT_OK; /* a backward inside the region: ops past the forward's so far just run */
  if (idx >= s->n || s->e[idx].op != c->op || !s->e[idx].complete)
    return ZT_ERR(ZT_STATUS_AUTOGRAD,
                  "zt_checkpoint: recomputation is not deterministic: op #%d of the selective region is '%s' when "
                  "recomputed but was %s%s%s in forward; the checkpointed fn must run the same ops each time",
                  idx, c->op->name, idx < s->n ? "'" : "", idx < s->n ? s->e[idx].op->name : "not run",
                  idx < s->n ? "'" : "");
  if (s->e[idx].decision == ZT_CHECKPOINT_SAVE) {
    *entry = &s->e[idx];
    *replay = true;
  }
  return ZT_OK;
}

zt_status zt__sac_capture_save(zt__op_call *c, zt__sac_entry *e, const zt_tensor *t) {
  if (e->n_steps == e->cap_steps) {
    int cap = e->cap_steps ? 2 * e->cap_steps : 4;
    save_step *st = realloc(e->steps, sizeof *st * (size_t)cap);
    if (!st) return ZT_ERR(ZT_STATUS_OOM, "zt_checkpoint: out of host memory for the selective cache");
    e->steps = st;
    e->cap_steps = cap;
  }
  save_step st = {SAVE_EXTRA, -1, NULL};
  for (int i = 0; i < c->n_in && st.index < 0; i++)
    if (t && (t == c->in[i] || t == c->orig[i])) st = (save_step){SAVE_INPUT, i, NULL};
  for (int k = 0; k < c->n_out && st.index < 0; k++)
    if (t == c->out[k]) st = (save_step){SAVE_OUTPUT, k, NULL};
  if (st.kind == SAVE_EXTRA) ZT_TRY(zt_tensor_alias(t, &st.extra));
  e->steps[e->n_steps++] = st;
  return ZT_OK;
}

zt_status zt__sac_capture_done(zt__op_call *c, zt__sac_entry *e) {
  e->n_out = c->n_out;
  for (int k = 0; k < c->n_out; k++) {
    ZT_TRY(zt_tensor_alias(c->out[k], &e->out[k]));
    e->out_version[k] = c->out[k]->storage->version;
  }
  e->attrs = c->attrs;
  e->rng_after = zt_rng_get_state();
  e->complete = true;
  return ZT_OK;
}

zt_status zt__sac_replay(zt__op_call *c, zt__sac_entry *e) {
  ZT_ASSERT(e->n_out == c->n_out);
  for (int k = 0; k < c->n_out; k++)
    if (e->out[k]->storage->version != e->out_version[k])
      return ZT_ERR(ZT_STATUS_AUTOGRAD,
                    "zt_checkpoint: output %d of op '%s', kept by the selective policy, was modified in place after "
                    "the forward; do not modify it in place (clone it first), or let the policy recompute the op",
                    k, c->op->name);
  for (int k = 0; k < c->n_out; k++) ZT_TRY(zt_tensor_alias(e->out[k], &c->out[k]));
  for (int j = 0; j < e->n_steps; j++) {
    const save_step *st = &e->steps[j];
    const zt_tensor *t = st->kind == SAVE_INPUT ? c->in[st->index] : st->kind == SAVE_OUTPUT ? c->out[st->index] : st->extra;
    ZT_TRY(zt_node_save(c->node, t, NULL));
  }
  c->attrs = e->attrs;
  /* dropout reserves its Philox range in its shape rule, which replay runs too; this
   * covers ops that draw inside forward (none today), which replay skips */
  zt_rng_set_state(e->rng_after);
  return ZT_OK;
}

/* ---------------------------------------------------------------- built-in policies */
static bool is_gemm(const char *op) {
  return !strcmp(op, "matmul") || !strcmp(op, "linear") || !strcmp(op, "linear_io");
}

zt_checkpoint_decision zt_checkpoint_policy_save_gemm(const zt_checkpoint_op_info *info, void *user_data) {
  (void)user_data;
  return is_gemm(info->op) ? ZT_CHECKPOINT_SAVE : ZT_CHECKPOINT_RECOMPUTE;
}

zt_checkpoint_decision zt_checkpoint_policy_save_wide_gemm(const zt_checkpoint_op_info *info, void *user_data) {
  (void)user_data;
  if (!is_gemm(info->op) || info->n_in < 1 || !info->inputs[0] || info->out_ndim < 1) return ZT_CHECKPOINT_RECOMPUTE;
  const zt_tensor *x = info->inputs[0];
  int64_t in_last = x->ndim ? x->shape[x->ndim - 1] : 1;
  return info->out_shape[info->out_ndim - 1] > in_last ? ZT_CHECKPOINT_SAVE : ZT_CHECKPOINT_RECOMPUTE;
}

zt_checkpoint_decision zt_checkpoint_policy_recompute_attention(const zt_checkpoint_op_info *info, void *user_data) {
  (void)user_data;
  return strcmp(info->op, "causal_attention") ? ZT_CHECKPOINT_SAVE : ZT_CHECKPOINT_RECOMPUTE;
}

zt_checkpoint_decision zt_checkpoint_policy_save_nothing(const zt_checkpoint_op_info *info, void *user_data) {
  (void)info, (void)user_data;
  return ZT_CHECKPOINT_RECOMPUTE;
}
