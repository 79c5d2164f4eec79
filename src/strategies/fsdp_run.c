/* FSDP at run time (PyTorch/fairscale FSDP semantics on zerotrain's hook points):
 * - pre-forward (module hook): gather the unit's full parameters, forward-prefetch the next;
 * - post-forward: reshard (FULL/HYBRID, not the root), register pre-backward grad hooks on
 *   the outputs;
 * - pre-backward (grad hook of an output, or a forward recomputed in backward): queue the
 *   end-of-backward callback once per backward, gather again, backward-prefetch the next;
 * - post-backward (post-accumulate-grad hooks: every trainable parameter has its grad):
 *   fold the grads into the unit's flat gradient, reduce-scatter it (async), reshard;
 * - end of backward: reduce what never got there (unused parameters), wait for every
 *   reduction, reshard, hand the optimizer its gradient pieces, all units back to IDLE.
 * Invariant: refilling a unit's storage with unchanged values keeps its version, so tensors
 * saved for backward stay valid across reshard and re-gather. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/tensor_internal.h"
#include "core/backend.h"
#include "strategies/fsdp_internal.h"

/* Add what group c counted since `before` to f's stats. */
static void count_since(zt_fsdp *f, const zt_comm *c, const zt_comm_stats *before) {
  zt_comm_stats now;
  zt_comm_stats_get(c, &now);
  f->stats.comm_calls += now.calls - before->calls;
  f->stats.bytes_sent += now.bytes_sent - before->bytes_sent;
}

static zt_status timed_wait(zt_fsdp *f, zt_comm_work *w) {
  double t0 = zt_clock_now();
  zt_status s = zt_comm_wait(w);
  f->stats.wait_s += zt_clock_now() - t0;
  return s;
}

zt_status zt__fsdp_all_reduce(zt_fsdp *f, zt_comm *c, zt_tensor *t, int64_t *kind) {
  zt_comm_stats a;
  zt_comm_stats_get(c, &a);
  double t0 = zt_clock_now();
  zt_status s = zt_all_reduce(c, t, ZT_REDUCE_SUM);
  f->stats.wait_s += zt_clock_now() - t0;
  count_since(f, c, &a);
  if (kind) (*kind)++;
  return s;
}

const char *zt__fsdp_unit_label(const zt__fsdp_unit *u) { return u->is_root ? "(root)" : u->name; }

static zt_status state_error(const zt__fsdp_unit *u, const char *event, const char *hint) {
  return ZT_ERR(ZT_STATUS_STATE,
                "FSDP unit '%s': %s in state %s is not a legal transition (IDLE -> FORWARD -> IDLE -> BACKWARD_PRE "
                "-> BACKWARD_POST -> IDLE); %s",
                zt__fsdp_unit_label(u), event, zt_fsdp_state_name(u->state), hint);
}

static bool reshards_after_forward(const zt__fsdp_unit *u) {
  zt_shard_strategy s = u->f->o.strategy;
  return !u->is_root && (s == ZT_SHARD_FULL || s == ZT_SHARD_HYBRID);
}

static bool reshards_after_backward(const zt__fsdp_unit *u) {
  zt_shard_strategy s = u->f->o.strategy;
  return s == ZT_SHARD_FULL || s == ZT_SHARD_HYBRID || s == ZT_SHARD_GRAD_OP;
}

/* ------------------------------------------------------------------ gather and reshard */

bool zt__fsdp_fresh(const zt__fsdp_unit *u) {
  if (!u->full || u->aliased) return true;
  return u->gathered && !u->gather_work && !u->full->released && u->gathered_from == u->shard->storage->version;
}

zt_status zt__fsdp_start_gather(zt__fsdp_unit *u) {
  zt_fsdp *f = u->f;
  if (u->gather_work || zt__fsdp_fresh(u)) return ZT_OK;
  ZT_TRY(zt__fsdp_shard_in(u));
  ZT_TRY(zt_storage_rematerialize(u->full));
  u->gathered = false;
  u->full_version = u->full->version;
  u->gather_version = u->shard->storage->version;
  zt_dtype dt = f->o.param_dtype;
  zt_comm_stats a;
  zt_comm_stats_get(f->shard_comm, &a);
  zt_status s;
  if (dt == ZT_DTYPE_F32) {
    s = zt_all_gather_async(f->shard_comm, u->shard, u->full_t, &u->gather_work);
  } else {
    /* the low-precision values travel; full gets their exact f32 widening when it lands */
    s = zt_tensor_empty_tagged(1, &u->S, dt, f->dev, ZT_MEM_TAG_COMM, &u->gather_send);
    if (!s) s = zt_tensor_empty_tagged(1, &u->P, dt, f->dev, ZT_MEM_TAG_COMM, &u->gather_recv);
    if (!s) {
      zt__dev_cast_range(u->gather_send, 0, u->shard, 0, u->S);
      s = zt_all_gather_async(f->shard_comm, u->gather_send, u->gather_recv, &u->gather_work);
    }
  }
  count_since(f, f->shard_comm, &a);
  if (s) {
    zt_tensor_free(u->gather_send);
    zt_tensor_free(u->gather_recv);
    u->gather_send = u->gather_recv = NULL;
    return zt__error_prefix(s, "FSDP: gathering unit '%s'", zt__fsdp_unit_label(u));
  }
  f->stats.all_gathers++;
  return ZT_OK;
}

zt_status zt__fsdp_finish_gather(zt__fsdp_unit *u) {
  if (!u->gather_work) return ZT_OK;
  zt_status s = timed_wait(u->f, u->gather_work);
  u->gather_work = NULL;
  if (!s && u->gather_recv)
    zt__dev_cast_range(u->full_t, 0, u->gather_recv, 0, u->P);
  zt_tensor_free(u->gather_send);
  zt_tensor_free(u->gather_recv);
  u->gather_send = u->gather_recv = NULL;
  if (s) return zt__error_prefix(s, "FSDP: gathering unit '%s'", zt__fsdp_unit_label(u));
  /* unchanged values keep the version (saved tensors stay valid); new values bump it once */
  u->full->version = u->full_version + (u->gather_version != u->gathered_from);
  u->gathered_from = u->gather_version;
  u->gathered = true;
  return zt__fsdp_shard_out(u); /* read by the gather only */
}

zt_status zt__fsdp_gather(zt__fsdp_unit *u) {
  ZT_TRY(zt__fsdp_start_gather(u));
  return zt__fsdp_finish_gather(u);
}

zt_status zt__fsdp_reshard(zt__fsdp_unit *u) {
  if (!u->full || u->aliased) return ZT_OK;
  ZT_TRY(zt__fsdp_finish_gather(u));
  u->gathered = false;
  return zt_storage_release(u->full);
}

/* Units (not the root) whose full parameters are present or on their way. */
static int n_gathered(const zt_fsdp *f) {
  int n = 0;
  for (int i = 0; i < f->n_units; i++) {
    const zt__fsdp_unit *u = f->units[i];
    n += !u->is_root && u->full && !u->aliased && (u->gather_work || !u->full->released);
  }
  return n;
}

/* Start gathering u ahead of its use, unless that would pass limit_all_gathers. */
static zt_status prefetch(zt__fsdp_unit *u) {
  if (!u || u->gather_work || zt__fsdp_fresh(u)) return ZT_OK;
  int limit = u->f->o.limit_all_gathers;
  if (limit && n_gathered(u->f) >= limit) return ZT_OK;
  return zt__fsdp_start_gather(u);
}

/* ------------------------------------------------------------------ reductions */

/* n zero f32 elements with tag GRAD. */
static zt_status grad_zeros(zt_device dev, int64_t n, zt_tensor **out) {
  ZT_TRY(zt_tensor_empty_tagged(1, &n, ZT_DTYPE_F32, dev, ZT_MEM_TAG_GRAD, out));
  zt__dev_fill(*out, 0.0);
  return ZT_OK;
}

/* Make each trainable parameter's .grad a view of its slot in the unit's flat gradient
 * (made, zeroed, when missing), so the engine accumulates into it with no copy; a .grad that
 * is something else (set by the caller) is added into the slot first. */
static zt_status fold_grad(zt__fsdp_param *p);
static zt_status attach_grads(zt__fsdp_unit *u) {
  if (!u->n_trainable) return ZT_OK;
  if (!u->grad_full) ZT_TRY(grad_zeros(u->f->dev, u->P, &u->grad_full));
  for (int i = 0; i < u->n_ps; i++) {
    zt__fsdp_param *p = &u->ps[i];
    if (!p->trainable || (p->grad_view && p->t->grad == p->grad_view)) continue;
    if (p->t->grad) ZT_TRY(fold_grad(p));
    zt_tensor_free(p->grad_view); /* a view the caller replaced: its values are in the slot */
    p->grad_view = NULL;
    ZT_TRY(zt__tensor_new_view(u->grad_full->storage, p->off, p->t->ndim, p->t->shape, NULL, ZT_DTYPE_F32,
                               &p->grad_view));
    p->t->grad = p->grad_view;
  }
  return ZT_OK;
}

/* Take the views away before the flat gradient is reduced or dropped. */
static void detach_grads(zt__fsdp_unit *u) {
  for (int i = 0; i < u->n_ps; i++) {
    zt__fsdp_param *p = &u->ps[i];
    if (!p->grad_view) continue;
    if (p->t->grad == p->grad_view) p->t->grad = NULL;
    zt_tensor_free(p->grad_view);
    p->grad_view = NULL;
  }
}

void zt__fsdp_drop_grad_shard(zt__fsdp_unit *u) {
  zt_tensor_free(u->grad_shard);
  u->grad_shard = NULL;
  u->n_gscale = 0;
  for (int i = 0; i < u->n_ps; i++) u->ps[i].has_grad = false;
}

void zt__fsdp_drop_grads(zt__fsdp_unit *u) {
  detach_grads(u);
  zt_tensor_free(u->grad_full);
  u->grad_full = NULL;
  for (int i = 0; i < u->n_ps; i++) u->ps[i].pending = false;
}

/* Add a .grad that is not FSDP's view into the unit's flat gradient and free it. */
static zt_status fold_grad(zt__fsdp_param *p) {
  zt__fsdp_unit *u = p->u;
  zt_tensor *g = p->t->grad;
  if (!u->grad_full) ZT_TRY(grad_zeros(u->f->dev, u->P, &u->grad_full));
  if (g->dtype != ZT_DTYPE_F32 || zt_tensor_numel(g) != p->numel)
    return ZT_ERR(ZT_STATUS_DTYPE, "FSDP: the .grad of '%s' is %s with %lld elements; expected f32 with %lld", p->name,
                  zt_dtype_name(g->dtype), (long long)zt_tensor_numel(g), (long long)p->numel);
  zt_tensor *tmp = NULL;
  if (!zt_tensor_is_contiguous(g)) ZT_TRY(zt_tensor_clone_data(g, ZT_MEM_TAG_TEMP, &tmp));
  zt_tensor *slot = NULL; /* the parameter's slot of the flat gradient, shaped like g */
  zt_status s = zt__tensor_new_view(u->grad_full->storage, u->grad_full->offset + p->off, g->ndim, g->shape, NULL,
                                    ZT_DTYPE_F32, &slot);
  if (!s) zt__dev_add_into(slot, tmp ? tmp : g);
  zt_tensor_free(slot);
  zt_tensor_free(tmp);
  ZT_TRY(s);
  p->t->grad = NULL;
  zt_tensor_free(g);
  return ZT_OK;
}

/* Whether the optimizer's views of u's gradient shard were all dropped since the last
 * backward made them (zt_optim_zero_grad on the pieces, set_to_none): the shard's values are
 * then stale, and the next reduction must replace them, not add to them (PyTorch: a grad set
 * to None is replaced). */
static bool views_dropped(const zt_fsdp *f, const zt__fsdp_unit *u) {
  for (int j = 0; j < f->n_pieces; j++)
    if (f->piece_of[j]->u == u && f->piece_params[j].tensor->grad) return false;
  return true;
}

/* Wait for reduction k and add its result into the unit's gradient shard. */
static zt_status finish_reduce(zt_fsdp *f, zt__fsdp_reduction *r) {
  zt__fsdp_unit *u = r->u;
  zt_status s = r->work ? timed_wait(f, r->work) : ZT_OK;
  r->work = NULL;
  if (!s && f->rep_comm) s = zt__fsdp_all_reduce(f, f->rep_comm, r->out, &f->stats.all_reduces);
  if (!s && u->grad_shard && views_dropped(f, u)) zt__fsdp_drop_grad_shard(u);
  if (!s && !u->grad_shard) s = grad_zeros(f->dev, u->S, &u->grad_shard);
  if (!s) s = zt__fsdp_grad_in(u); /* a shard in the store that this reduction adds to */
  if (!s) {
    zt__dev_add_div(u->grad_shard, r->out, f->post_div); /* += (float)(widen(out) / post_div) */
    zt_tensor_bump_version(u->grad_shard);
    s = zt__fsdp_grad_out(u);
  }
  if (r->out != r->in) zt_tensor_free(r->out);
  zt_tensor_free(r->in);
  *r = (zt__fsdp_reduction){0};
  return s ? zt__error_prefix(s, "FSDP: reducing the gradient of unit '%s'", zt__fsdp_unit_label(u)) : ZT_OK;
}

static zt_status finish_oldest(zt_fsdp *f) {
  zt_status s = finish_reduce(f, &f->pend[0]);
  memmove(&f->pend[0], &f->pend[1], sizeof f->pend[0] * (size_t)(f->n_pend - 1));
  f->n_pend--;
  return s;
}

static zt_status finish_all(zt_fsdp *f) {
  zt_status first = ZT_OK;
  while (f->n_pend) {
    zt_status s = finish_oldest(f);
    if (s && !first) first = s;
  }
  return first;
}

/* Start the reduction of u's flat gradient (zeros where no grad arrived): divide by the
 * pre-divide factor, cast to the reduce dtype, reduce-scatter over the shard group. */
static zt_status start_reduce(zt__fsdp_unit *u) {
  zt_fsdp *f = u->f;
  u->reduced = true;
  if (!u->n_trainable) return ZT_OK;
  if (!u->grad_full) ZT_TRY(grad_zeros(u->f->dev, u->P, &u->grad_full));
  detach_grads(u);
  zt_tensor *in = u->grad_full, *out = NULL;
  u->grad_full = NULL;
  if (f->pre_div != 1.0) {
    zt__dev_scale(in, 1.0 / f->pre_div); /* a power of two: exact */
  }
  zt_status s = ZT_OK;
  zt_dtype rd = f->o.reduce_dtype;
  if (rd != ZT_DTYPE_F32) {
    zt_tensor *lp = NULL;
    s = zt_tensor_empty_tagged(1, &u->P, rd, f->dev, ZT_MEM_TAG_COMM, &lp);
    if (!s) zt__dev_cast_range(lp, 0, in, 0, u->P);
    zt_tensor_free(in);
    in = lp;
  }
  zt_comm_work *w = NULL;
  if (!s && f->G > 1) {
    zt_comm_stats a;
    zt_comm_stats_get(f->shard_comm, &a);
    s = zt_tensor_empty_tagged(1, &u->S, rd, f->dev, ZT_MEM_TAG_COMM, &out);
    if (!s) s = zt_reduce_scatter_async(f->shard_comm, in, out, ZT_REDUCE_SUM, &w);
    count_since(f, f->shard_comm, &a);
    if (!s) f->stats.reduce_scatters++;
  } else {
    out = in; /* a group of one: the flat gradient is the shard */
  }
  if (s) {
    if (out != in) zt_tensor_free(out);
    zt_tensor_free(in);
    return zt__error_prefix(s, "FSDP: reducing the gradient of unit '%s'", zt__fsdp_unit_label(u));
  }
  f->pend[f->n_pend++] = (zt__fsdp_reduction){u, in, out, w};
  return f->n_pend > ZT__FSDP_MAX_PENDING ? finish_oldest(f) : ZT_OK;
}

/* ------------------------------------------------------------------ end of backward */

static bool low_precision_params(const zt_fsdp *f) { return f->o.param_dtype != ZT_DTYPE_F32; }

static void reset_states(zt_fsdp *f) {
  if (f->fwd_depth > 0 && low_precision_params(f)) zt_autocast_set(f->autocast_prev); /* a forward that failed */
  for (int k = 0; k < f->n_units; k++) {
    zt__fsdp_unit *u = f->units[k];
    u->state = ZT_FSDP_STATE_IDLE;
    u->n_ready = 0;
    u->reduced = false;
    for (int i = 0; i < u->n_ps; i++) u->ps[i].ready = false;
  }
  f->cb_task = -1;
  f->fwd_depth = 0;
}

/* Which trainable parameters got a grad on any rank in this round (the same answer on
 * every rank): the units to reduce now, and the pieces that get a .grad. */
static zt_status exchange_mask(zt_fsdp *f, zt_tensor **out) {
  zt_tensor *m = NULL;
  int32_t *v = calloc((size_t)f->n_mask, sizeof *v); /* built on the host, then moved to the device */
  if (!v) return ZT_ERR(ZT_STATUS_OOM, "FSDP: out of host memory for the gradient mask");
  for (int k = 0; k < f->n_units; k++)
    for (int i = 0; i < f->units[k]->n_ps; i++) {
      const zt__fsdp_param *p = &f->units[k]->ps[i];
      if (p->mask >= 0) v[p->mask] = p->pending;
    }
  zt_status s = zt__tensor_from_host(1, (int64_t[]){f->n_mask}, ZT_DTYPE_I32, f->dev, ZT_MEM_TAG_COMM, v, &m);
  free(v);
  if (s) return s;
  if (f->world > 1) s = zt__fsdp_all_reduce(f, f->comm, m, &f->stats.all_reduces);
  if (s) {
    zt_tensor_free(m);
    return s;
  }
  *out = m;
  return ZT_OK;
}

static zt_status end_of_backward(void *user_data) {
  zt_fsdp *f = user_data;
  zt_status s = ZT_OK;
  if (f->sync && f->n_mask) {
    zt_tensor *mask = NULL;
    s = exchange_mask(f, &mask);
    int32_t *g = mask ? malloc(sizeof *g * (size_t)f->n_mask) : NULL; /* the mask read back to the host */
    if (mask && !g) s = ZT_ERR(ZT_STATUS_OOM, "FSDP: out of host memory for the gradient mask");
    if (g) zt__dev_read(mask, g, sizeof *g * (size_t)f->n_mask);
    /* units whose post-backward never fired (unused parameters): reduce what they have */
    for (int k = 0; k < f->n_units && !s; k++) {
      zt__fsdp_unit *u = f->units[k];
      bool any = false;
      for (int i = 0; i < u->n_ps && !any; i++) any = u->ps[i].mask >= 0 && g[u->ps[i].mask];
      if (!u->reduced && any) s = start_reduce(u);
    }
    zt_status w = finish_all(f);
    if (!s) s = w;
    for (int k = 0; k < f->n_units; k++)
      for (int i = 0; i < f->units[k]->n_ps; i++) {
        zt__fsdp_param *p = &f->units[k]->ps[i];
        if (!s && p->mask >= 0 && g[p->mask]) p->has_grad = true;
        p->pending = false;
      }
    zt_tensor_free(mask);
    free(g);
    /* the optimizer's view: each piece whose parameter has a grad sees its slice */
    for (int j = 0; j < f->n_pieces && !s; j++) {
      zt__fsdp_param *p = f->piece_of[j];
      zt_tensor *pt = f->piece_params[j].tensor;
      if (!p->has_grad || pt->grad || !p->u->grad_shard) continue;
      zt_tensor *sh = p->u->grad_shard;
      int64_t lo = (int64_t)zt_comm_rank(f->shard_comm) * p->u->S;
      s = zt__tensor_new_view(sh->storage, sh->offset + p->off + f->pieces[j].start - lo, 1, &f->pieces[j].count, NULL,
                              ZT_DTYPE_F32, &pt->grad);
    }
  }
  for (int k = 0; k < f->n_units; k++) {
    zt__fsdp_unit *u = f->units[k];
    if (!u->summoned && reshards_after_backward(u)) {
      zt_status r = zt__fsdp_reshard(u);
      if (!s) s = r;
    }
  }
  reset_states(f);
  f->order_done = true;
  return s;
}

/* Queue end_of_backward once per backward (graph task), from whichever hook runs first. */
static zt_status ensure_callback(zt_fsdp *f) {
  int64_t task = zt_autograd_graph_task_id();
  if (task < 0 || f->cb_task == task) return ZT_OK;
  if (f->cb_task >= 0) zt__fsdp_recover(f); /* a backward that failed before its end */
  ZT_TRY(zt_autograd_queue_callback(end_of_backward, f));
  f->cb_task = task;
  return ZT_OK;
}

void zt__fsdp_recover(zt_fsdp *f) {
  ZT_IGNORE(finish_all(f), "recovering from an earlier failure, which is the one reported");
  for (int k = 0; k < f->n_units; k++) {
    zt__fsdp_unit *u = f->units[k];
    ZT_IGNORE(zt__fsdp_finish_gather(u), "as above");
    zt__fsdp_drop_grads(u);
  }
  reset_states(f);
}

/* ------------------------------------------------------------------ the hooks */

static zt_status post_backward(zt__fsdp_unit *u) {
  zt_fsdp *f = u->f;
  if (u->state != ZT_FSDP_STATE_BACKWARD_PRE)
    return state_error(u, "post-backward (every trainable parameter has its grad)",
                       "were its parameters used outside its forward, or its outputs detached?");
  u->state = ZT_FSDP_STATE_BACKWARD_POST;
  if (f->sync) ZT_TRY(start_reduce(u));
  if (reshards_after_backward(u) && !u->keep_until_end && !u->summoned) ZT_TRY(zt__fsdp_reshard(u));
  return ZT_OK;
}

zt_status zt__fsdp_grad_ready(zt_tensor *leaf, void *user_data) {
  zt__fsdp_param *p = user_data;
  zt__fsdp_unit *u = p->u;
  ZT_TRY(ensure_callback(u->f));
  if (!leaf->grad) return ZT_OK;
  /* FSDP's view got the grad in place; anything else (no pre-backward ran) is folded in */
  if (leaf->grad != p->grad_view) ZT_TRY(attach_grads(u));
  p->pending = true;
  if (p->ready) return ZT_OK;
  p->ready = true;
  return ++u->n_ready == u->n_trainable ? post_backward(u) : ZT_OK;
}

static zt_status pre_backward(const zt_tensor *grad, zt_tensor **replacement, void *user_data) {
  (void)grad, (void)replacement;
  zt__fsdp_unit *u = user_data;
  zt_fsdp *f = u->f;
  ZT_TRY(ensure_callback(f));
  if (u->state == ZT_FSDP_STATE_IDLE)
    u->state = ZT_FSDP_STATE_BACKWARD_PRE;
  else if (u->state != ZT_FSDP_STATE_BACKWARD_PRE)
    return state_error(u, "pre-backward (the grad of an output arrived)",
                       "an output's grad arrived after the unit's backward was done: return only tensors computed "
                       "from the unit's parameters, detach the others");
  ZT_TRY(zt__fsdp_gather(u));
  ZT_TRY(attach_grads(u));
  if (f->o.backward_prefetch && u->post_order > 0) ZT_TRY(prefetch(f->post_seq[u->post_order - 1]));
  int ahead = f->o.backward_prefetch ? 2 : 1; /* as in forward */
  if (u->post_order >= ahead) zt__fsdp_shard_ahead(f->post_seq[u->post_order - ahead]);
  return ZT_OK;
}

zt_status zt__fsdp_pre_forward(zt_module *m, void *user_data) {
  (void)m;
  zt__fsdp_unit *u = user_data;
  zt_fsdp *f = u->f;
  if (zt_autograd_graph_task_id() >= 0) {
    /* recomputation in backward (a checkpointed unit): gather again, stay BACKWARD_PRE */
    ZT_TRY(ensure_callback(f));
    if (u->state != ZT_FSDP_STATE_IDLE && u->state != ZT_FSDP_STATE_BACKWARD_PRE)
      return state_error(u, "forward recomputed in backward",
                         "its backward was already done: recompute a region before the backward of its units");
    u->state = ZT_FSDP_STATE_BACKWARD_PRE;
    return zt__fsdp_gather(u);
  }
  if (f->cb_task >= 0) zt__fsdp_recover(f); /* a backward failed: start clean */
  if (u->state != ZT_FSDP_STATE_IDLE)
    return state_error(u, "pre-forward",
                       u->state == ZT_FSDP_STATE_FORWARD ? "its forward was entered again before it returned"
                                                         : "its backward is still under way");
  if (!f->order_done && u->pre_order < 0) {
    u->pre_order = f->n_pre;
    f->pre_seq[f->n_pre++] = u;
  }
  ZT_TRY(zt__fsdp_gather(u));
  u->state = ZT_FSDP_STATE_FORWARD;
  /* the outermost forward computes under autocast in the param dtype */
  if (f->fwd_depth++ == 0 && low_precision_params(f))
    f->autocast_prev = zt_autocast_set((zt_autocast_state){true, f->o.param_dtype});
  if (f->o.forward_prefetch && f->order_done && u->pre_order >= 0 && u->pre_order + 1 < f->n_pre)
    ZT_TRY(prefetch(f->pre_seq[u->pre_order + 1]));
  /* the state store: the shard of the unit gathered after the ones above is read meanwhile */
  int ahead = f->o.forward_prefetch ? 2 : 1;
  if (f->order_done && u->pre_order >= 0 && u->pre_order + ahead < f->n_pre)
    zt__fsdp_shard_ahead(f->pre_seq[u->pre_order + ahead]);
  return ZT_OK;
}

zt_status zt__fsdp_post_forward(zt_module *m, int n_outputs, zt_tensor *const *outputs, void *user_data) {
  (void)m;
  zt__fsdp_unit *u = user_data;
  zt_fsdp *f = u->f;
  if (zt_autograd_graph_task_id() >= 0) {
    if (u->state != ZT_FSDP_STATE_BACKWARD_PRE)
      return state_error(u, "post-forward of a recomputation", "the recomputation did not start through pre-forward");
    return ZT_OK; /* kept gathered for the backward that asked for the recomputation */
  }
  if (u->state != ZT_FSDP_STATE_FORWARD)
    return state_error(u, "post-forward", "post-forward runs only after the unit's pre-forward");
  if (--f->fwd_depth == 0 && low_precision_params(f)) zt_autocast_set(f->autocast_prev);
  if (!f->order_done && u->post_order < 0) {
    u->post_order = f->n_post;
    f->post_seq[f->n_post++] = u;
  }
  if (u->is_root) f->order_done = true;
  bool grad = zt_grad_enabled();
  if (!u->summoned && (grad ? reshards_after_forward(u) : reshards_after_backward(u))) ZT_TRY(zt__fsdp_reshard(u));
  for (int i = 0; grad && i < n_outputs; i++) {
    zt_tensor *t = outputs[i];
    bool dup = false;
    for (int j = 0; j < i && !dup; j++) dup = outputs[j] == t;
    if (t && t->requires_grad && !dup) ZT_TRY(zt_tensor_register_hook(t, pre_backward, u, NULL));
  }
  u->state = ZT_FSDP_STATE_IDLE;
  return ZT_OK;
}
