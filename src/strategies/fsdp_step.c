/* FSDP around the optimizer: gradient pieces (zero_grad), global norm clipping over the
 * shards, gradient scaling (loss scaling), the after-step gather of OPT, no_sync, full
 * parameters outside training (gather/release, loading full values into the shards) and
 * the communication counters. Everything here runs between backward passes, with every
 * unit IDLE. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "core/backend.h"
#include "strategies/fsdp_internal.h"

static zt_status need_idle(const zt_fsdp *f, const char *fn) {
  if (!f) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: fsdp is NULL", fn);
  if (!f->inited) return ZT_ERR(ZT_STATUS_STATE, "%s: call zt_fsdp_init first", fn);
  for (int k = 0; k < f->n_units; k++)
    if (f->units[k]->state != ZT_FSDP_STATE_IDLE)
      return ZT_ERR(ZT_STATUS_STATE, "%s: unit '%s' is in state %s; call it between training steps (every unit IDLE)",
                    fn, zt__fsdp_unit_label(f->units[k]), zt_fsdp_state_name(f->units[k]->state));
  return ZT_OK;
}

void zt_fsdp_zero_grad(zt_fsdp *f) {
  if (!f) return;
  for (int j = 0; j < f->n_pieces; j++) {
    zt_tensor *t = f->piece_params[j].tensor;
    zt_tensor_free(t->grad);
    t->grad = NULL;
  }
  for (int k = 0; k < f->n_units; k++) {
    zt__fsdp_drop_grad_shard(f->units[k]);
    zt__fsdp_drop_grads(f->units[k]); /* what no_sync accumulated goes too, like PyTorch's zero_grad */
  }
}

void zt_fsdp_set_sync(zt_fsdp *f, bool sync) {
  if (f) f->sync = sync;
}

bool zt__fsdp_ss_known(const zt__fsdp_unit *u) {
  const zt_storage *g = u->grad_shard ? u->grad_shard->storage : NULL;
  return g && u->ss_id == g->id && u->ss_version == g->version && u->n_gscale == 0;
}

double zt__fsdp_grad_ss(zt__fsdp_unit *u) {
  if (zt__fsdp_ss_known(u)) return u->grad_ss;
  /* the valid elements: the padding at the end excluded */
  int64_t lo = (int64_t)zt_comm_rank(u->f->shard_comm) * u->S, v = u->numel - lo;
  u->grad_ss = zt__dev_sum_squares(u->grad_shard, 0, v < 0 ? 0 : v > u->S ? u->S : v);
  u->ss_id = u->grad_shard->storage->id, u->ss_version = u->grad_shard->storage->version;
  return u->grad_ss;
}

zt_status zt_fsdp_clip_grad_norm(zt_fsdp *f, double max_norm, double *norm) {
  ZT_TRY(need_idle(f, "zt_fsdp_clip_grad_norm"));
  if (!norm) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_fsdp_clip_grad_norm: norm (the output) is NULL");
  if (isnan(max_norm)) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_fsdp_clip_grad_norm: max_norm is NaN (<= 0: no clipping)");
  double ss = 0;
  for (int k = 0; k < f->n_units; k++) {
    zt__fsdp_unit *u = f->units[k];
    if (!u->grad_shard) continue;
    if (!zt__fsdp_ss_known(u)) ZT_TRY(zt__fsdp_grad_in(u)); /* a state store's shard: read back after a scaling */
    ss += zt__fsdp_grad_ss(u);
    ZT_TRY(zt__fsdp_grad_out(u));
  }
  /* replicas (HYBRID, NONE) hold equal shards: the sum over one shard group is the total */
  zt_tensor *t = NULL;
  zt_mem_tag prev = zt_mem_tag_push(ZT_MEM_TAG_COMM);
  zt_status s = zt_tensor_from_data(1, (int64_t[]){1}, ZT_DTYPE_F64, &ss, &t);
  zt_mem_tag_pop(prev);
  if (!s && f->G > 1) s = zt__fsdp_all_reduce(f, f->shard_comm, t, &f->stats.all_reduces);
  double total = s ? NAN : sqrt(zt_tensor_get(t, 0));
  zt_tensor_free(t);
  ZT_TRY(s);
  *norm = total;
  if (!(max_norm > 0) || !isfinite(total) || !(total > max_norm)) return ZT_OK;
  return zt_fsdp_scale_grads(f, max_norm / (total + 1e-6));
}

zt_status zt_fsdp_scale_grads(zt_fsdp *f, double factor) {
  if (!f) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_fsdp_scale_grads: fsdp is NULL");
  for (int k = 0; k < f->n_units; k++) ZT_TRY(zt__fsdp_grad_scale(f->units[k], factor));
  return ZT_OK;
}

/* Gather every unit whose full values are stale, all started before any is waited on. */
static zt_status gather_all(zt_fsdp *f, bool (*which)(const zt__fsdp_unit *)) {
  zt_status s = ZT_OK;
  for (int k = 0; k < f->n_units && !s; k++)
    if (which(f->units[k])) s = zt__fsdp_start_gather(f->units[k]);
  for (int k = 0; k < f->n_units; k++) {
    zt_status w = zt__fsdp_finish_gather(f->units[k]);
    if (!s) s = w;
  }
  return s;
}

/* Units that keep full values between steps (OPT, and NONE in low precision). */
static bool keeps_full(const zt__fsdp_unit *u) {
  zt_shard_strategy s = u->f->o.strategy;
  return s == ZT_SHARD_OPT || s == ZT_SHARD_NONE || u->summoned;
}

static bool every_unit(const zt__fsdp_unit *u) {
  (void)u;
  return true;
}

zt_status zt_fsdp_after_step(zt_fsdp *f) {
  ZT_TRY(need_idle(f, "zt_fsdp_after_step"));
  /* the others gather in the next forward (a stale full value is never used: gathers
   * compare the shard's version) */
  return gather_all(f, keeps_full);
}

zt_status zt_fsdp_gather_full_params(zt_fsdp *f) {
  ZT_TRY(need_idle(f, "zt_fsdp_gather_full_params"));
  ZT_TRY(gather_all(f, every_unit));
  for (int k = 0; k < f->n_units; k++) f->units[k]->summoned = true;
  return ZT_OK;
}

zt_status zt_fsdp_release_full_params(zt_fsdp *f) {
  ZT_TRY(need_idle(f, "zt_fsdp_release_full_params"));
  zt_status s = ZT_OK;
  for (int k = 0; k < f->n_units; k++) {
    zt__fsdp_unit *u = f->units[k];
    u->summoned = false;
    zt_shard_strategy st = f->o.strategy;
    if (st == ZT_SHARD_FULL || st == ZT_SHARD_HYBRID || st == ZT_SHARD_GRAD_OP) {
      zt_status r = zt__fsdp_reshard(u);
      if (!s) s = r;
    }
  }
  return s;
}

zt_status zt_fsdp_shard_from_full(zt_fsdp *f) {
  ZT_TRY(need_idle(f, "zt_fsdp_shard_from_full"));
  int r = zt_comm_rank(f->shard_comm);
  for (int k = 0; k < f->n_units; k++) {
    zt__fsdp_unit *u = f->units[k];
    if (!u->full) continue;
    if (u->full->released)
      return ZT_ERR(ZT_STATUS_STATE,
                    "zt_fsdp_shard_from_full: unit '%s' holds no full parameters; call zt_fsdp_gather_full_params and "
                    "write the full values first",
                    zt__fsdp_unit_label(u));
    if (u->aliased) continue;
    ZT_TRY(zt__fsdp_shard_in(u));
    zt__dev_copy_range(u->shard, 0, u->full_t, (int64_t)r * u->S, u->S);
    zt_tensor_bump_version(u->shard);
    ZT_TRY(zt__fsdp_shard_out(u));
    /* f32: full holds exactly what a gather of the new shard gives; low precision: it holds
     * the unrounded values, so the next use gathers again */
    u->gathered_from = f->o.param_dtype == ZT_DTYPE_F32 ? u->shard->storage->version : UINT64_MAX;
    u->gathered = true;
  }
  return ZT_OK;
}

void zt_fsdp_stats_get(const zt_fsdp *f, zt_dp_stats *out) {
  if (!out) return;
  *out = f ? f->stats : (zt_dp_stats){0};
}

void zt_fsdp_stats_reset(zt_fsdp *f) {
  if (f) f->stats = (zt_dp_stats){0};
}
