/* FSDP's state store (ZeRO-Infinity; zt_fsdp_options.state_store): each unit's f32 master
 * shard, reduced gradient shard and its pieces' optimizer state live in a store between their
 * uses. A shard comes in for its unit's gather (read ahead one unit beyond the gather
 * prefetch, fsdp_run.c) and goes back when the gather lands; a gradient shard goes out when
 * its reduction lands, with its sum of squares taken then (the norm reads nothing back);
 * scalings of an evicted gradient shard (loss unscaling, clipping) wait for its next load and
 * are applied then, in order, so its values are those of scaling at once; the optimizer step
 * streams unit by unit.
 * Invariants: between uses a stored FSDP's shards and gradient shards are evicted (or being
 * written behind); what comes in is restored keeping the store's copy, so sending back an
 * unchanged one writes nothing. */
#include <stdlib.h>

#include "core/backend.h"
#include "core/status_internal.h"
#include "strategies/fsdp_internal.h"

bool zt__fsdp_stored(const zt_fsdp *f) { return f->o.state_store != NULL; }

/* Restore t's storage keeping the store's copy, or wait for the restore already under way. */
static zt_status bring_in(zt_tensor *t) {
  ZT_TRY(zt_storage_restore_async_keep(t->storage));
  return zt_storage_wait(t->storage);
}

static zt_status send_out(zt_fsdp *f, zt_tensor *t) {
  if (zt_storage_is_evicted(t->storage)) return ZT_OK;
  return zt_storage_evict_async(t->storage, f->o.state_store, ZT_DTYPE_F32);
}

static void read_ahead(zt_tensor *t) {
  if (t && zt_storage_is_evicted(t->storage))
    ZT_IGNORE(zt_storage_restore_async_keep(t->storage), "a read ahead that could not start is done when needed");
}

zt_status zt__fsdp_shard_in(zt__fsdp_unit *u) {
  if (!zt__fsdp_stored(u->f) || !u->shard) return ZT_OK;
  zt_status s = bring_in(u->shard);
  return s ? zt__error_prefix(s, "FSDP: reading the shard of unit '%s' from its store", zt__fsdp_unit_label(u)) : ZT_OK;
}

zt_status zt__fsdp_shard_out(zt__fsdp_unit *u) {
  if (!zt__fsdp_stored(u->f) || !u->shard) return ZT_OK;
  zt_status s = send_out(u->f, u->shard);
  return s ? zt__error_prefix(s, "FSDP: writing the shard of unit '%s' to its store", zt__fsdp_unit_label(u)) : ZT_OK;
}

void zt__fsdp_shard_ahead(zt__fsdp_unit *u) {
  if (u && zt__fsdp_stored(u->f)) read_ahead(u->shard);
}

zt_status zt__fsdp_grad_in(zt__fsdp_unit *u) {
  if (!zt__fsdp_stored(u->f) || !u->grad_shard) return ZT_OK;
  zt_status s = bring_in(u->grad_shard);
  if (s) return zt__error_prefix(s, "FSDP: reading the gradient shard of unit '%s' from its store", zt__fsdp_unit_label(u));
  for (int i = 0; i < u->n_gscale; i++) {
    zt__dev_scale(u->grad_shard, u->gscale[i]); /* as zt_fsdp_scale_grads would have, then */
    zt_tensor_bump_version(u->grad_shard);
  }
  u->n_gscale = 0;
  return ZT_OK;
}

zt_status zt__fsdp_grad_out(zt__fsdp_unit *u) {
  if (!zt__fsdp_stored(u->f) || !u->grad_shard || zt_storage_is_evicted(u->grad_shard->storage)) return ZT_OK;
  (void)zt__fsdp_grad_ss(u); /* taken while it is in RAM: the norm needs no read */
  zt_status s = send_out(u->f, u->grad_shard);
  return s ? zt__error_prefix(s, "FSDP: writing the gradient shard of unit '%s' to its store", zt__fsdp_unit_label(u)) : ZT_OK;
}

zt_status zt__fsdp_grad_scale(zt__fsdp_unit *u, double factor) {
  if (!u->grad_shard) return ZT_OK;
  bool evicted = zt_storage_is_evicted(u->grad_shard->storage);
  if (evicted && u->n_gscale < ZT__FSDP_MAX_SCALES) {
    u->gscale[u->n_gscale++] = factor;
    return ZT_OK;
  }
  ZT_TRY(zt__fsdp_grad_in(u)); /* the deferred ones first (none when it was in RAM) */
  zt__dev_scale(u->grad_shard, factor); /* f32: scaled by (float)factor */
  zt_tensor_bump_version(u->grad_shard);
  return evicted ? zt__fsdp_grad_out(u) : ZT_OK;
}

/* ------------------------------------------------------------------ the optimizer */

/* Piece j's optimizer state when it lives in the store: its count, *ts the tensors. */
static int states_of(zt_fsdp *f, int j, zt_tensor *const **ts) {
  int n = 0;
  *ts = NULL;
  if (!f->state_opt) return 0;
  zt_status e = zt_optim_param_state(f->state_opt, j, false, &n, ts);
  ZT_ASSERT(e == ZT_OK); /* j is in range: the optimizer updates the pieces (checked by the callers) */
  return *ts ? n : 0;
}

static zt_status check_optim(const zt_fsdp *f, const zt_optim *o, const char *fn) {
  const zt_param *ps = NULL;
  if (zt_optim_params(o, &ps) != f->n_pieces || ps != f->piece_params)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: the optimizer must update the FSDP pieces (make it with zt_optim_new over "
                                         "zt_fsdp_params' list)",
                  fn);
  return ZT_OK;
}

/* Start reading what unit u's update needs: shard, gradient shard, optimizer state. */
static void unit_ahead(zt_fsdp *f, zt__fsdp_unit *u) {
  read_ahead(u->shard);
  read_ahead(u->grad_shard);
  for (int j = u->first_piece; j < u->first_piece + u->n_pieces; j++) {
    zt_tensor *const *ts;
    int n = states_of(f, j, &ts);
    for (int q = 0; q < n; q++) read_ahead(ts[q]);
  }
}

static zt_status states_move(zt_fsdp *f, zt__fsdp_unit *u, bool in) {
  for (int j = u->first_piece; j < u->first_piece + u->n_pieces; j++) {
    zt_tensor *const *ts;
    int n = states_of(f, j, &ts);
    for (int q = 0; q < n; q++) {
      zt_status s = in ? bring_in(ts[q]) : send_out(f, ts[q]);
      if (s)
        return zt__error_prefix(s, "FSDP: %s the optimizer state of '%s' %s its store", in ? "reading" : "writing",
                                f->piece_params[j].name, in ? "from" : "to");
    }
  }
  return ZT_OK;
}

/* The units that have pieces, from k on: the next one's index, or n_units. */
static int next_with_pieces(const zt_fsdp *f, int k) {
  while (k < f->n_units && !f->units[k]->n_pieces) k++;
  return k;
}

static zt_status unit_update(zt_fsdp *f, zt__fsdp_unit *u, zt_optim *o, double lr, int *idx) {
  ZT_TRY(zt__fsdp_shard_in(u));
  ZT_TRY(zt__fsdp_grad_in(u));
  ZT_TRY(states_move(f, u, true));
  int n = 0;
  for (int j = u->first_piece; j < u->first_piece + u->n_pieces; j++) idx[n++] = j;
  ZT_TRY(zt_optim_step_params(o, lr, n, idx));
  ZT_TRY(zt__fsdp_shard_out(u)); /* new values: written behind */
  ZT_TRY(states_move(f, u, false));
  return zt__fsdp_grad_out(u); /* unchanged: nothing written, its RAM freed */
}

zt_status zt_fsdp_optim_step(zt_fsdp *f, zt_optim *o, double lr) {
  const char *fn = "zt_fsdp_optim_step";
  if (!f || !o) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: fsdp and optimizer are required", fn);
  if (!f->inited) return ZT_ERR(ZT_STATUS_STATE, "%s: call zt_fsdp_init first", fn);
  ZT_TRY(check_optim(f, o, fn));
  if (!zt__fsdp_stored(f)) return zt_optim_step(o, lr);
  int *idx = malloc(sizeof *idx * (size_t)(f->n_pieces ? f->n_pieces : 1));
  if (!idx) return ZT_ERR(ZT_STATUS_OOM, "%s: out of host memory", fn);
  zt_status s = ZT_OK;
  for (int k = next_with_pieces(f, 0); k < f->n_units && !s; k = next_with_pieces(f, k + 1)) {
    int next = next_with_pieces(f, k + 1);
    if (next < f->n_units) unit_ahead(f, f->units[next]); /* read while this one updates */
    s = unit_update(f, f->units[k], o, lr, idx);
  }
  free(idx);
  if (s) return s;
  zt_optim_step_finish(o);
  return ZT_OK;
}

zt_status zt_fsdp_offload_optim(zt_fsdp *f, zt_optim *o) {
  const char *fn = "zt_fsdp_offload_optim";
  if (!f || !o) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: fsdp and optimizer are required", fn);
  if (!f->inited) return ZT_ERR(ZT_STATUS_STATE, "%s: call zt_fsdp_init first", fn);
  if (!zt__fsdp_stored(f))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: the FSDP was made without zt_fsdp_options.state_store", fn);
  ZT_TRY(check_optim(f, o, fn));
  if (f->state_opt && f->state_opt != o)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: another optimizer's state already lives in the store", fn);
  f->state_opt = o;
  for (int j = 0; j < f->n_pieces; j++) { /* one piece's state in RAM at a time */
    int n;
    zt_tensor *const *ts;
    ZT_TRY(zt_optim_param_state(o, j, true, &n, &ts));
    for (int q = 0; q < n; q++) {
      if (!ts[q]->storage->name[0]) zt_storage_set_name(ts[q]->storage, zt_optim_state_name(o, j, q));
      ZT_TRY(send_out(f, ts[q]));
    }
  }
  return ZT_OK;
}
