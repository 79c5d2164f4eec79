/* OffloadModel (fairscale's experimental OffloadModel; see zt/offload_model.h): slices of a
 * unit sequence whose parameters live in a store, a no-grad microbatched forward slice by
 * slice keeping boundary activations in the store, and a custom function whose backward
 * recomputes each slice's chunks in reverse slice order from those activations and the
 * forward's RNG offsets (this file: residency, passes, the recomputing forward and backward,
 * set-up; offload_model_step.c: the update; offload_model_graph.c: the graph-keeping mode).
 * Invariants: a parameter's bytes (and its grad's) are in RAM exactly while a slice that uses
 * it is loading or loaded (res count > 0); at most K slices are; a parameter shared by several
 * slices gets its per-chunk contributions summed in the order one plain backward sums them
 * (later slices first), then added to its .grad, so accumulation is bitwise plain training's. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/status_internal.h"
#include "offload_model_internal.h"
#include "zt/autograd.h"
#include "zt/nn.h"

zt_offload_model_options zt_offload_model_options_default(void) {
  zt_offload_model_options o = {0};
  o.slices = 2;
  o.resident = 2;
  o.microbatches = 1;
  o.prefetch = true;
  o.offload_activations = true;
  o.lazy_update = true;
  o.restore_on_free = true;
  o.update_chunk_bytes = ZT_OFFLOAD_MODEL_UPDATE_CHUNK;
  return o;
}

/* ------------------------------------------------ residency */
/* Written behind: the training thread goes on while the store's helper writes (the RAM held
 * meanwhile is bounded by the store's write cap); a storage restored with keep and unchanged
 * since is not written at all. */
static zt_status storage_evict(zt_offload_model *om, zt_tensor *t) {
  if (!t || zt_storage_is_evicted(t->storage) || t->storage->nbytes == 0) return ZT_OK;
  return zt_storage_evict_async(t->storage, om->store, t->dtype);
}

/* keep: the store's copy stays while the storage is unchanged (its next eviction is then
 * free). Only for parameters: backward reads them and only the update (which bumps their
 * version) writes them, so a slice brought in for backward goes out without a write. Grads are
 * written by every backward that loads them and moments only come in for their update: a kept
 * copy would only hold disk space until then. */
static zt_status storage_back(zt_tensor *t, bool async, bool keep) {
  if (!t || !zt_storage_is_evicted(t->storage)) return ZT_OK;
  if (keep) {
    ZT_TRY(zt_storage_restore_async_keep(t->storage));
    return async ? ZT_OK : zt_storage_wait(t->storage);
  }
  return async ? zt_storage_restore_async(t->storage) : zt_storage_restore(t->storage);
}

static zt_status storage_wait(zt_tensor *t) { return t ? zt_storage_wait(t->storage) : ZT_OK; }
/* In RAM: a restore in flight waited for, and one that failed before (the store kept its copy,
 * the storage stayed evicted) tried again now, so a slice is never marked in with a hole. */
static zt_status storage_in(zt_tensor *t) {
  if (!t) return ZT_OK;
  ZT_TRY(zt_storage_wait(t->storage));
  return zt_storage_restore(t->storage);
}

/* Parameter i's optimizer state when it lives in the store (offload_optim_state and made): its
 * count, *ts the tensors. */
int zt__om_optim_states(zt_offload_model *om, int i, zt_tensor *const **ts) {
  int n = 0;
  *ts = NULL;
  if (!om->o.offload_optim_state || !om->state_opt) return 0;
  zt_status e = zt_optim_param_state(om->state_opt, i, false, &n, ts);
  ZT_ASSERT(e == ZT_OK); /* i is in range: the optimizer updates u's list (checked by the step) */
  return *ts ? n : 0;
}

/* Parameter i's optimizer state to the store (a restore in flight finished first). */
zt_status zt__om_optim_evict(zt_offload_model *om, int i) {
  zt_tensor *const *ts;
  int n = zt__om_optim_states(om, i, &ts);
  for (int j = 0; j < n; j++) {
    ZT_TRY(storage_wait(ts[j]));
    ZT_TRY(storage_evict(om, ts[j]));
  }
  return ZT_OK;
}

static zt_status param_evict(zt_offload_model *om, int i) {
  zt_tensor *t = om->u.params[i].tensor;
  ZT_TRY(storage_wait(t->grad)); /* a restore in flight finishes first */
  ZT_TRY(storage_wait(t));
  ZT_TRY(zt__om_optim_evict(om, i)); /* in RAM only with its parameter (its update did not come) */
  ZT_TRY(storage_evict(om, t->grad));
  return storage_evict(om, t);
}

static zt_status slice_evict(zt_offload_model *om, int s) {
  double t0 = zt_clock_now();
  zt_status s0 = ZT_OK;
  for (int j = om->sp_off[s]; j < om->sp_off[s + 1]; j++) {
    int i = om->sp[j];
    if (--om->p_res[i] == 0) {
      zt_status e = param_evict(om, i);
      if (e && !s0) s0 = e;
    }
  }
  om->state[s] = SLICE_OUT;
  om->st.evict_s += zt_clock_now() - t0;
  return s0 ? zt__error_prefix(s0, "offload model: evicting slice %d", s) : ZT_OK;
}

static zt_status slice_load(zt_offload_model *om, int s, bool async) {
  om->state[s] = SLICE_LOADING;
  om->st.loads++;
  if (async) om->st.prefetched++;
  zt_status s0 = ZT_OK;
  for (int j = om->sp_off[s]; j < om->sp_off[s + 1]; j++) {
    int i = om->sp[j];
    if (om->p_res[i]++ > 0) continue;
    zt_tensor *t = om->u.params[i].tensor;
    if (!s0) s0 = storage_back(t, async, true);
    if (!s0) s0 = storage_back(t->grad, async, false);
    /* its update comes with this load: its optimizer state too (a chunked update reads its own) */
    if (om->n_pending && om->pending[i] && !zt__om_update_chunked(om, i)) {
      zt_tensor *const *ts;
      int n = zt__om_optim_states(om, i, &ts);
      for (int j = 0; j < n && !s0; j++) s0 = storage_back(ts[j], async, false);
    }
  }
  return s0 ? zt__error_prefix(s0, "offload model: loading slice %d", s) : ZT_OK;
}

static zt_status slice_wait_(zt_offload_model *om, int s);
static zt_status slice_wait(zt_offload_model *om, int s) {
  double t0 = zt_clock_now();
  zt_status e = slice_wait_(om, s);
  om->st.load_wait_s += zt_clock_now() - t0;
  return e;
}
static zt_status slice_wait_(zt_offload_model *om, int s) {
  for (int j = om->sp_off[s]; j < om->sp_off[s + 1]; j++) {
    zt_tensor *t = om->u.params[om->sp[j]].tensor;
    zt_status e = storage_in(t);
    if (!e) e = storage_in(t->grad);
    if (e) return zt__error_prefix(e, "offload model: loading slice %d", s);
  }
  om->state[s] = SLICE_IN;
  return ZT_OK;
}

zt_status zt__om_wait_loading(zt_offload_model *om) {
  for (int s = 0; s < om->S; s++)
    if (om->state[s] == SLICE_LOADING) ZT_TRY(slice_wait(om, s));
  return ZT_OK;
}

static int resident_count(const zt_offload_model *om) {
  int n = 0;
  for (int s = 0; s < om->S; s++) n += om->state[s] != SLICE_OUT;
  return n;
}

/* Evict least recently used slices (not keep_a, keep_b) until fewer than K are in. */
static zt_status make_room(zt_offload_model *om, int keep_a, int keep_b, bool *ok) {
  *ok = true;
  while (resident_count(om) >= om->K) {
    int victim = -1;
    for (int s = 0; s < om->S; s++)
      if (om->state[s] != SLICE_OUT && s != keep_a && s != keep_b &&
          (victim < 0 || om->last_use[s] < om->last_use[victim]))
        victim = s;
    if (victim < 0) {
      *ok = false;
      return ZT_OK;
    }
    ZT_TRY(slice_wait(om, victim));
    ZT_TRY(slice_evict(om, victim));
  }
  return ZT_OK;
}

zt_status zt__om_slice_ensure(zt_offload_model *om, int s, int next) {
  if (om->state[s] == SLICE_OUT) {
    bool ok;
    ZT_TRY(make_room(om, s, -1, &ok));
    ZT_TRY(slice_load(om, s, false));
  }
  ZT_TRY(slice_wait(om, s));
  if (om->n_pending) ZT_TRY(zt__om_apply_pending(om, s)); /* lazy: the last step's update, now that it is here */
  om->last_use[s] = ++om->clock;
  if (om->o.prefetch && next >= 0 && next != s && om->state[next] == SLICE_OUT && om->K >= 2) {
    bool ok;
    ZT_TRY(make_room(om, s, next, &ok));
    if (ok) {
      ZT_TRY(slice_load(om, next, true));
      om->last_use[next] = ++om->clock;
    }
  }
  return ZT_OK;
}

/* ------------------------------------------------ passes */
static void free_tensors(zt_tensor **ts, int n) {
  if (!ts) return;
  for (int i = 0; i < n; i++) zt_tensor_free(ts[i]);
  free(ts);
}

static void pass_free(zt_offload_model *om, pass *p) {
  if (!p) return;
  int M = p->M;
  free_tensors(p->in, M);
  free_tensors(p->tgt, M);
  if (p->act)
    for (int j = 0; j < om->S * M; j++) {
      if (p->act[j]) ZT_IGNORE(zt_storage_wait(p->act[j]->storage), "freed next: a failed restore changes nothing");
      zt_tensor_free(p->act[j]);
    }
  free(p->act);
  if (p->part)
    for (int j = 0; j < om->n_shared * M; j++) {
      if (p->part[j]) ZT_IGNORE(zt_storage_wait(p->part[j]->storage), "freed next: a failed restore changes nothing");
      zt_tensor_free(p->part[j]);
    }
  free(p->part);
  free(p->rng);
  free(p->loss);
  free(p);
}

static zt_status pass_new(zt_offload_model *om, int M, pass **out) {
  pass *p = calloc(1, sizeof *p);
  size_t SM = (size_t)om->S * (size_t)M;
  if (p) {
    p->M = M;
    p->in = calloc((size_t)M, sizeof *p->in);
    p->tgt = calloc((size_t)M, sizeof *p->tgt);
    p->act = calloc(SM, sizeof *p->act);
    p->rng = calloc(SM, sizeof *p->rng);
    p->loss = calloc((size_t)M, sizeof *p->loss);
    p->part = calloc((size_t)(om->n_shared ? om->n_shared : 1) * (size_t)M, sizeof *p->part);
  }
  if (!p || !p->in || !p->tgt || !p->act || !p->rng || !p->loss || !p->part) {
    pass_free(om, p);
    return ZT_ERR(ZT_STATUS_OOM, "offload model: out of host memory for the records of a forward of %d chunks over %d "
                                 "slices",
                  M, om->S);
  }
  p->id = ++om->next_pass_id;
  *out = p;
  return ZT_OK;
}

zt_status zt__om_chunk_of(zt_tensor *x, int M, int k, zt_tensor **out) {
  *out = NULL;
  if (!x) return ZT_OK;
  int64_t rows = x->shape[0] / M;
  return zt_narrow(x, 0, (int64_t)k * rows, rows, out);
}

/* Run slice s on chunk k of p from the RNG state r; *consumed: Philox blocks drawn. */
static zt_status run_slice(zt_offload_model *om, pass *p, int s, int k, zt_tensor *in, zt_rng_state r,
                           zt_tensor **out, uint64_t *consumed) {
  zt_rng_set_state(r);
  bool last = s == om->S - 1;
  zt_status e = om->u.run(om->u.ctx, om->first[s], om->count[s], last ? p->tgt[k] : NULL, in, out);
  *consumed = zt_rng_get_state().offset - r.offset;
  if (e) return zt__error_prefix(e, "offload model: slice %d (units %d..%d), chunk %d", s, om->first[s],
                                 om->first[s] + om->count[s] - 1, k);
  return ZT_OK;
}

/* The input of slice s for chunk k, in RAM (slice 0: the caller's chunk). */
static zt_status act_ready(pass *p, int s, int k, zt_tensor **out) {
  if (s == 0) {
    *out = p->in[k];
    return ZT_OK;
  }
  zt_tensor *a = p->act[s * p->M + k];
  ZT_TRY(storage_back(a, true, false));
  ZT_TRY(storage_wait(a));
  if (k + 1 < p->M) ZT_TRY(storage_back(p->act[s * p->M + k + 1], true, false)); /* the next chunk's, meanwhile */
  *out = a;
  return ZT_OK;
}

static zt_status act_park(zt_offload_model *om, zt_tensor *t) {
  if (!om->o.offload_activations || !t || !zt_dtype_is_float(t->dtype)) return ZT_OK;
  return storage_evict(om, t);
}

/* One sweep of chunks [k0, k1) through every slice. Calibrated (cal): chunk k's slice s runs
 * from offset off0 + k C + prefix[s] and must draw rng_blocks[s]; else (chunk 0 alone) it
 * learns rng_blocks. A calibrated slice that drew otherwise stops it with *again set. */
static zt_status sweep(zt_offload_model *om, pass *p, int k0, int k1, bool cal, zt_rng_state r0, bool more,
                       bool *again) {
  int S = om->S, M = p->M;
  uint64_t total = 0, prefix = 0;
  if (cal)
    for (int s = 0; s < S; s++) total += om->rng_blocks[s];
  for (int s = 0; s < S; s++) {
    ZT_TRY(zt__om_slice_ensure(om, s, s + 1 < S ? s + 1 : (more ? 0 : -1)));
    for (int k = k0; k < k1; k++) {
      zt_rng_state r = {r0.seed, r0.offset + (uint64_t)k * total + prefix};
      zt_tensor *in = NULL, *out = NULL;
      uint64_t used = 0;
      ZT_TRY(act_ready(p, s, k, &in));
      zt_status e = run_slice(om, p, s, k, in, r, &out, &used);
      if (s > 0 && !e) e = act_park(om, in);
      if (e) {
        zt_tensor_free(out);
        return e;
      }
      p->rng[s * M + k] = r;
      if (!cal) {
        om->rng_blocks[s] = used;
      } else if (used != om->rng_blocks[s]) {
        zt_tensor_free(out);
        *again = true;
        return ZT_ERR(ZT_STATUS_STATE, "offload model: slice %d drew %llu random blocks for chunk %d, %llu for "
                                       "chunk 0",
                      s, (unsigned long long)used, k, (unsigned long long)om->rng_blocks[s]);
      }
      if (s + 1 < S) {
        p->act[(s + 1) * M + k] = out;
        ZT_TRY(act_park(om, out));
      } else {
        p->loss[k] = zt_tensor_get(out, 0);
        zt_tensor_free(out);
      }
    }
    prefix += om->rng_blocks[s];
  }
  return ZT_OK;
}

static bool cal_matches(const zt_offload_model *om, const zt_tensor *chunk) {
  return om->calibrated && zt_shape_equal(om->cal_ndim, om->cal_shape, chunk->ndim, chunk->shape);
}

/* The no-grad forward of inputs/targets into a new pass. */
static zt_status run_forward(zt_offload_model *om, zt_tensor *inputs, zt_tensor *targets, pass **out) {
  *out = NULL;
  int M = om->o.microbatches;
  if (!inputs || inputs->ndim < 1)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_offload_model_forward: inputs must be a tensor of at least one dim "
                                         "(the batch)");
  if (inputs->shape[0] % M != 0 || inputs->shape[0] == 0)
    return ZT_ERR(ZT_STATUS_SHAPE, "zt_offload_model_forward: a batch of %lld rows does not cut into %d microbatch "
                                   "chunks; give a multiple of %d rows",
                  (long long)inputs->shape[0], M, M);
  if (targets && (targets->ndim < 1 || targets->shape[0] != inputs->shape[0]))
    return ZT_ERR(ZT_STATUS_SHAPE, "zt_offload_model_forward: targets must have the inputs' %lld rows",
                  (long long)inputs->shape[0]);
  zt_rng_state r0 = zt_rng_get_state();
  for (int attempt = 0;; attempt++) {
    pass *p = NULL;
    ZT_TRY(pass_new(om, M, &p));
    zt_status e = ZT_OK;
    for (int k = 0; k < M && !e; k++) {
      e = zt__om_chunk_of(inputs, M, k, &p->in[k]);
      if (!e) e = zt__om_chunk_of(targets, M, k, &p->tgt[k]);
    }
    bool cal = M == 1 || cal_matches(om, p->in[0]);
    uint64_t total = 0;
    bool again = false;
    if (!e && M == 1) e = sweep(om, p, 0, 1, false, r0, false, &again);
    else if (!e && cal) e = sweep(om, p, 0, M, true, r0, false, &again);
    else if (!e) {
      /* chunk 0 through every slice first, to learn what each slice draws */
      om->st.rng_calibrations++;
      e = sweep(om, p, 0, 1, false, r0, true, &again);
      if (!e) {
        om->calibrated = true;
        om->cal_ndim = p->in[0]->ndim;
        memcpy(om->cal_shape, p->in[0]->shape, sizeof om->cal_shape);
        e = sweep(om, p, 1, M, true, r0, false, &again);
      }
    }
    if (again) {
      pass_free(om, p);
      om->calibrated = false;
      zt_rng_set_state(r0);
      if (attempt == 0) continue;
      return ZT_ERR(ZT_STATUS_STATE, "zt_offload_model_forward: a slice drew a different number of random blocks "
                                     "for two chunks of one shape; OffloadModel replays the forward's draws by RNG "
                                     "offsets, so a unit's random draws must depend only on the shapes it sees");
    }
    if (e) {
      pass_free(om, p);
      zt_rng_set_state(r0);
      return e;
    }
    for (int s = 0; s < om->S; s++) total += om->rng_blocks[s];
    /* where plain training's M forwards leave the generator */
    zt_rng_set_state((zt_rng_state){r0.seed, r0.offset + (uint64_t)M * total});
    double sum = 0;
    for (int k = 0; k < M; k++) sum += p->loss[k];
    om->last_loss = M == 1 ? sum : sum / (double)M;
    *out = p;
    return ZT_OK;
  }
}

/* ------------------------------------------------ backward */
/* The input of slice s, chunk k, detached, requiring grad when float (and, for slice 0,
 * when the caller's input does). */
static zt_status detached(zt_tensor *a, bool want, zt_tensor **out) {
  ZT_TRY(zt_tensor_alias(a, out));
  if (want && zt_dtype_is_float(a->dtype)) {
    zt_status e = zt_tensor_set_requires_grad(*out, true);
    if (e) {
      zt_tensor_free(*out);
      *out = NULL;
      return e;
    }
  }
  return ZT_OK;
}

static void add_into(zt_tensor *dst, const zt_tensor *src) {
  zt__dev_add_into(dst, src);
  zt_tensor_bump_version(dst);
}

/* After chunk k's backward of slice s: a shared parameter's contribution of this slice. At
 * its first slice (the last in backward) it is summed with the later slices' (as one plain
 * backward's buffer sums them) and added to .grad (stash: the .grad before this chunk). */
static zt_status shared_settle(zt_offload_model *om, pass *p, int s, int k, int i, zt_tensor *stash) {
  zt_tensor *t = om->u.params[i].tensor;
  zt_tensor *c = t->grad;
  t->grad = NULL;
  zt_tensor **part = &p->part[om->shared_idx[i] * p->M + k];
  zt_status e = ZT_OK;
  if (s != om->p_first[i]) {
    t->grad = stash;
    if (!c) return ZT_OK;
    if (!*part) {
      zt_storage_retag(c->storage, ZT_MEM_TAG_TEMP);
      *part = c;
    } else {
      e = storage_back(*part, false, false);
      if (!e) add_into(*part, c);
      zt_tensor_free(c);
    }
    return e ? e : act_park(om, *part);
  }
  if (*part) {
    e = storage_back(*part, false, false);
    if (!e && c) {
      add_into(c, *part);
    } else if (!e) {
      c = *part, *part = NULL;
      zt_storage_retag(c->storage, ZT_MEM_TAG_GRAD);
    }
    zt_tensor_free(*part);
    *part = NULL;
  }
  if (!e && stash) e = storage_back(stash, false, false); /* back from the store (chunk_backward) */
  if (!e && c && stash) {
    add_into(stash, c);
    zt_tensor_free(c);
    c = NULL;
  }
  if (e) {
    zt_tensor_free(c);
    t->grad = stash;
    return e;
  }
  t->grad = stash ? stash : c;
  return ZT_OK;
}

/* Backward of chunk k through slice s: recompute from its input with the forward's RNG state,
 * backward with gout (the next slice's input grad; the last slice: g, through loss / M);
 * *gin gets the input's grad (NULL: none). */
static zt_status chunk_backward(zt_offload_model *om, pass *p, int s, int k, zt_tensor *gout, zt_tensor *g,
                                bool want_in, zt_tensor **gin) {
  *gin = NULL;
  int M = p->M, first = om->sp_off[s], n = om->sp_off[s + 1] - first;
  zt_tensor *in = NULL, *a = NULL, *out = NULL, *scaled = NULL;
  zt_tensor **stash = calloc((size_t)(n ? n : 1), sizeof *stash);
  if (!stash) return ZT_ERR(ZT_STATUS_OOM, "offload model: out of host memory for slice %d's list", s);
  zt_status e = act_ready(p, s, k, &in);
  if (!e) e = detached(in, s > 0 || want_in, &a);
  if (!e) {
    bool prev = zt_set_grad_enabled(true);
    uint64_t used = 0;
    e = run_slice(om, p, s, k, a, p->rng[s * M + k], &out, &used);
    bool last = s == om->S - 1;
    if (!e && last && M > 1) e = zt_mul_scalar(out, 1.0 / (double)M, &scaled); /* as zt_train_step */
    /* a shared parameter's grad starts from none in each chunk's backward */
    for (int j = 0; j < n && !e; j++) {
      int i = om->sp[first + j];
      if (om->shared_idx[i] < 0) continue;
      zt_tensor *t = om->u.params[i].tensor;
      stash[j] = t->grad;
      t->grad = NULL;
      /* at its first slice the grad so far waits in the store while the chunk's contributions
       * are made and summed (one embedding-sized tensor less in RAM) */
      if (stash[j] && s == om->p_first[i] && om->o.offload_activations) e = storage_evict(om, stash[j]);
    }
    zt_tensor *root = scaled ? scaled : out;
    if (!e && root && root->requires_grad) e = zt_backward(1, &root, last ? &g : &gout, false);
    for (int j = 0; j < n; j++) {
      int i = om->sp[first + j];
      if (om->shared_idx[i] < 0) continue;
      zt_status e2 = e ? ZT_OK : shared_settle(om, p, s, k, i, stash[j]);
      if (e) { /* put the stashed grad back; this chunk's contribution is dropped */
        zt_tensor *t = om->u.params[i].tensor;
        if (stash[j]) {
          zt_tensor_free(t->grad);
          t->grad = stash[j];
        }
      }
      if (e2 && !e) e = e2;
      stash[j] = NULL;
    }
    zt_set_grad_enabled(prev);
  }
  if (!e && a && a->grad) {
    *gin = a->grad;
    a->grad = NULL;
    zt_storage_retag((*gin)->storage, ZT_MEM_TAG_ACTIVATION);
  }
  zt_tensor_free(scaled);
  zt_tensor_free(out);
  zt_tensor_free(a);
  free(stash);
  return e;
}

/* The whole backward (the custom function's): slices in reverse, chunks in order. *gx: the
 * grads of slice 0's chunk inputs concatenated (want_in), else NULL. */
static zt_status run_backward(zt_offload_model *om, pass *p, zt_tensor *g, bool want_in, zt_tensor **gx) {
  *gx = NULL;
  int S = om->S, M = p->M;
  zt_tensor **gout = calloc((size_t)M, sizeof *gout), **gin = calloc((size_t)M, sizeof *gin);
  if (!gout || !gin) {
    free(gout);
    free(gin);
    return ZT_ERR(ZT_STATUS_OOM, "offload model: out of host memory for %d chunks' grads", M);
  }
  zt_rng_state caller = zt_rng_get_state();
  memset(om->ss_set, 0, sizeof *om->ss_set * (size_t)om->u.n_params);
  zt_status e = ZT_OK;
  for (int s = S - 1; s >= 0 && !e; s--) {
    e = zt__om_slice_ensure(om, s, s > 0 ? s - 1 : -1);
    /* on their way meanwhile: this slice's first input, the previous slice's (its first chunk) */
    if (!e && s > 0) e = storage_back(p->act[s * M], true, false);
    if (!e && s > 1) e = storage_back(p->act[(s - 1) * M], true, false);
    if (!e && gout[0]) e = storage_back(gout[0], true, false);
    for (int k = 0; k < M && !e; k++) {
      if (gout[k]) e = storage_back(gout[k], true, false);
      if (!e && gout[k]) e = storage_wait(gout[k]);
      if (!e && k + 1 < M && gout[k + 1]) e = storage_back(gout[k + 1], true, false); /* the next chunk's, meanwhile */
      if (!e) e = chunk_backward(om, p, s, k, gout[k], g, want_in, &gin[k]);
      zt_tensor_free(gout[k]);
      gout[k] = NULL;
      if (!e && s > 0) {
        zt_tensor_free(p->act[s * M + k]); /* its backward is done */
        p->act[s * M + k] = NULL;
        e = act_park(om, gin[k]);
      }
    }
    /* the grads of the parameters this slice is the first to use are final */
    if (!e) e = zt__om_settle_owned(om, s);
    zt_tensor **t = gout;
    gout = gin, gin = t;
  }
  zt_rng_set_state(caller);
  if (!e && want_in) {
    bool all = true;
    for (int k = 0; k < M; k++) all &= gout[k] != NULL;
    if (all && M == 1) {
      *gx = gout[0], gout[0] = NULL;
    } else if (all) {
      e = zt_cat(M, gout, 0, gx);
    }
  }
  free_tensors(gout, M);
  free_tensors(gin, M);
  return e;
}

zt_status zt__om_settle_owned(zt_offload_model *om, int s) {
  for (int j = om->owned_off[s]; j < om->owned_off[s + 1]; j++) {
    int i = om->owned[j];
    zt_tensor *gr = om->u.params[i].tensor->grad;
    if (!gr) continue;
    if (om->o.comm && zt_comm_size(om->o.comm) > 1) { /* DDP: the replicas' mean */
      ZT_TRY(zt_all_reduce(om->o.comm, gr, ZT_REDUCE_AVG));
      zt_tensor_bump_version(gr);
    }
    ZT_TRY(zt_grad_sum_squares(1, &om->u.params[i], &om->ss[i]));
    om->ss_set[i] = true;
  }
  return ZT_OK;
}

zt_status zt__om_no_zt_grad(void) {
  return ZT_ERR(ZT_STATUS_AUTOGRAD,
                "an offloaded model (zt_offload_model) is not compatible with zt_grad (nor a backward that computes "
                "only some grads): its backward brings slices into RAM and accumulates into the .grad of every "
                "parameter; call zt_backward on the loss");
}

/* ------------------------------------------------ the custom function */
typedef struct fn_data {
  zt_offload_model *om;
  int64_t pass_id;
  bool want_in;
} fn_data;

typedef struct fn_args {
  zt_offload_model *om;
  zt_status status;
} fn_args;

static zt_status om_fn_forward(zt_node *ctx, int n_inputs, zt_tensor *const *inputs, int n_outputs,
                               zt_tensor **outputs, void *user_data) {
  (void)n_inputs, (void)n_outputs;
  zt_offload_model *om = user_data;
  fn_data *d = calloc(1, sizeof *d);
  if (!d) return ZT_ERR(ZT_STATUS_OOM, "offload model: out of host memory for a forward's record");
  zt_fn_ctx_set_data(ctx, d, free); /* the node owns it from here */
  d->om = om;
  d->want_in = inputs[0]->requires_grad && zt_dtype_is_float(inputs[0]->dtype);
  pass *p = NULL;
  ZT_TRY(run_forward(om, inputs[0], inputs[1], &p));
  pass_free(om, om->pass);
  om->pass = p;
  d->pass_id = p->id;
  return zt_tensor_full(0, NULL, ZT_DTYPE_F32, zt_tensor_device(inputs[0]), om->last_loss, &outputs[0]);
}

static zt_status om_fn_backward(zt_node *ctx, int n_outputs, zt_tensor *const *grad_outputs, int n_inputs,
                                const bool *needs, zt_tensor **grad_inputs) {
  (void)n_outputs, (void)n_inputs;
  fn_data *d = zt_fn_ctx_data(ctx);
  zt_offload_model *om = d->om;
  if (!needs[2]) return zt__om_no_zt_grad();
  pass *p = om->pass;
  if (!p || p->id != d->pass_id || p->spent)
    return ZT_ERR(ZT_STATUS_STATE, "offload model: the activations of this forward are gone (%s); run the backward "
                                   "of a forward before the next forward",
                  p && p->id == d->pass_id ? "its backward already ran" : "another forward ran since");
  p->spent = true;
  zt_tensor *gx = NULL;
  zt_status e = run_backward(om, p, grad_outputs[0], d->want_in && needs[0], &gx);
  pass_free(om, om->pass); /* its activations are spent either way */
  om->pass = NULL;
  if (e) {
    zt_tensor_free(gx);
    return e;
  }
  if (needs[0]) grad_inputs[0] = gx;
  else zt_tensor_free(gx);
  return ZT_OK;
}

static const zt_function om_fn = {"OffloadModelBackward", om_fn_forward, om_fn_backward};

zt_status zt_offload_model_forward(zt_offload_model *om, zt_tensor *inputs, zt_tensor *targets, zt_tensor **loss) {
  if (!om || !inputs || !loss)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_offload_model_forward: offload model, inputs and loss are required");
  *loss = NULL;
  if (!zt_grad_enabled()) { /* evaluation: nothing kept */
    pass *p = NULL;
    ZT_TRY(run_forward(om, inputs, targets, &p));
    pass_free(om, p);
    return zt_tensor_full(0, NULL, ZT_DTYPE_F32, zt_tensor_device(inputs), om->last_loss, loss);
  }
  if (om->o.mode == ZT_OFFLOAD_MODEL_KEEP_GRAPH) {
    if (om->o.microbatches > 1)
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_offload_model_forward: the graph-keeping mode runs one chunk per forward; "
                                           "with %d microbatches use zt_offload_model_train_step (each chunk's forward "
                                           "and backward in turn)",
                    om->o.microbatches);
    memset(om->ss_set, 0, sizeof *om->ss_set * (size_t)om->u.n_params);
    om->graph_last = true;
    ZT_TRY(zt__om_forward_graph(om, inputs, targets, loss));
    om->last_loss = zt_tensor_get(*loss, 0);
    return ZT_OK;
  }
  zt_tensor *in[3] = {inputs, targets, om->probe};
  return zt_function_apply(&om_fn, 3, in, 1, loss, om);
}

double zt_offload_model_last_loss(const zt_offload_model *om) { return om ? om->last_loss : NAN; }

/* ------------------------------------------------ set-up */
zt_status zt_offload_model_restore_all(zt_offload_model *om) {
  if (!om) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_offload_model_restore_all: offload model is NULL");
  for (int s = 0; s < om->S; s++)
    if (om->state[s] == SLICE_OUT) ZT_TRY(slice_load(om, s, false));
  for (int s = 0; s < om->S; s++) ZT_TRY(slice_wait(om, s));
  for (int s = 0; s < om->S && om->n_pending; s++) ZT_TRY(zt__om_apply_pending(om, s));
  return ZT_OK;
}

zt_status zt_offload_model_evict_all(zt_offload_model *om) {
  if (!om) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_offload_model_evict_all: offload model is NULL");
  for (int s = 0; s < om->S; s++)
    if (om->state[s] != SLICE_OUT) {
      ZT_TRY(slice_wait(om, s));
      ZT_TRY(slice_evict(om, s));
    }
  return ZT_OK;
}

zt_status zt_offload_model_evict_optim(zt_offload_model *om, zt_optim *opt) {
  const char *fn = "zt_offload_model_evict_optim";
  if (!om || !opt) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: offload model and optimizer are required", fn);
  if (!om->o.offload_optim_state)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: the offload model was made without offload_optim_state", fn);
  const zt_param *ops = NULL;
  if (zt_optim_params(opt, &ops) != om->u.n_params || ops != om->u.params)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: the optimizer must update the offload model's parameter list", fn);
  if (om->state_opt && om->state_opt != opt)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: another optimizer's state already lives in the store", fn);
  om->state_opt = opt;
  for (int i = 0; i < om->u.n_params; i++) { /* one parameter's state in RAM at a time */
    if (zt__om_update_chunked(om, i)) { /* one state tensor at a time */
      ZT_TRY(zt__om_chunk_states(om, opt, i));
      continue;
    }
    int n;
    zt_tensor *const *ts;
    ZT_TRY(zt_optim_param_state(opt, i, true, &n, &ts));
    for (int j = 0; j < n; j++)
      if (!ts[j]->storage->name[0]) zt_storage_set_name(ts[j]->storage, zt_optim_state_name(opt, i, j));
    ZT_TRY(zt__om_optim_evict(om, i));
  }
  return ZT_OK;
}

void zt_offload_model_stats_get(const zt_offload_model *om, zt_offload_model_stats *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (om) *out = om->st;
}

void zt_offload_model_slice_times(const zt_offload_model *om, int s, double *forward_s, double *backward_s) {
  ZT_ASSERT(om && s >= 0 && s < om->S);
  if (forward_s) *forward_s = om->slice_fwd_s[s];
  if (backward_s) *backward_s = om->slice_bwd_s[s];
}

void zt_offload_model_slice_units(const zt_offload_model *om, int s, int *first, int *count) {
  ZT_ASSERT(om && s >= 0 && s < om->S);
  if (first) *first = om->first[s];
  if (count) *count = om->count[s];
}

void zt_offload_model_free(zt_offload_model *om) {
  if (!om) return;
  pass_free(om, om->pass);
  om->pass = NULL;
  if (!om->o.restore_on_free) {
    /* the parameters stay in the store (their owner frees them there); a waiting update is applied */
    if (om->n_pending) ZT_IGNORE(zt_offload_model_flush(om), "a failed update leaves what it could not do");
    if (om->state) ZT_IGNORE(zt_offload_model_evict_all(om), "a slice that could not go stays in RAM");
  } else if (om->n_pending) {
    ZT_IGNORE(zt_offload_model_restore_all(om), "a failed update leaves what it could not do");
  }
  if (om->state && om->o.restore_on_free) {
    for (int s = 0; s < om->S; s++)
      if (om->state[s] != SLICE_OUT) ZT_IGNORE(slice_wait(om, s), "restored below");
    /* the model whole again: every parameter and grad back in RAM */
    for (int i = 0; i < om->u.n_params; i++) {
      zt_tensor *t = om->u.params[i].tensor;
      ZT_IGNORE(zt_storage_restore(t->storage), "nothing to do on failure: the storage keeps the store's copy");
      if (t->grad) ZT_IGNORE(zt_storage_restore(t->grad->storage), "as above");
      zt_storage_drop_kept(t->storage); /* the store is the caller's to free: nothing of ours stays in it */
    }
  }
  /* the writes behind of what stays evicted finish (a failure keeps its bytes in RAM, and a
   * restore gives them back: nothing to report here) */
  if (om->store) ZT_IGNORE(zt_store_flush(om->store), "no status to return it in; the bytes are kept");
  zt_tensor_free(om->probe);
  free(om->first);
  free(om->count);
  free(om->sp);
  free(om->sp_off);
  free(om->owned);
  free(om->owned_off);
  free(om->p_first);
  free(om->p_nslices);
  free(om->p_res);
  free(om->shared);
  free(om->shared_idx);
  free(om->state);
  free(om->last_use);
  free(om->rng_blocks);
  free(om->ss);
  free(om->ss_set);
  free(om->pending);
  free(om->slice_fwd_s);
  free(om->slice_bwd_s);
  free(om);
}

zt_status zt_offload_model_balance(int U, int S, const int64_t *bytes, int *count) {
  if (U < 1 || S < 1 || S > U || !bytes || !count)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_offload_model_balance: %d units in %d slices (1 <= slices <= units)", U, S);
  int64_t *pre = calloc((size_t)U + 1, sizeof *pre);
  int64_t *best = calloc((size_t)(S + 1) * (size_t)(U + 1), sizeof *best);
  int *cut = calloc((size_t)(S + 1) * (size_t)(U + 1), sizeof *cut);
  if (!pre || !best || !cut) {
    free(pre), free(best), free(cut);
    return ZT_ERR(ZT_STATUS_OOM, "zt_offload_model_new: out of host memory for balancing %d units over %d slices", U,
                  S);
  }
  for (int u = 0; u < U; u++) pre[u + 1] = pre[u] + bytes[u];
#define B(s, u) best[(size_t)(s) * (size_t)(U + 1) + (size_t)(u)]
#define C(s, u) cut[(size_t)(s) * (size_t)(U + 1) + (size_t)(u)]
  for (int u = 0; u <= U; u++) B(1, u) = pre[u], C(1, u) = 0;
  for (int s = 2; s <= S; s++)
    for (int u = s; u <= U; u++) {
      B(s, u) = INT64_MAX;
      for (int v = s - 1; v < u; v++) {
        int64_t m = B(s - 1, v) > pre[u] - pre[v] ? B(s - 1, v) : pre[u] - pre[v];
        if (m < B(s, u)) B(s, u) = m, C(s, u) = v;
      }
    }
  for (int s = S, u = U; s >= 1; s--) {
    int v = C(s, u);
    count[s - 1] = u - v;
    u = v;
  }
#undef B
#undef C
  free(pre);
  free(best);
  free(cut);
  return ZT_OK;
}

static zt_status check_options(const zt_offload_units *u, const zt_offload_model_options *o) {
  const char *fn = "zt_offload_model_new";
  if (!u->uses || !u->run || u->n_units < 1 || u->n_params < 0 || (u->n_params > 0 && !u->params))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: the units need uses, run, n_units >= 1 and their parameter list", fn);
  if (o->slices < 1 || o->slices > u->n_units)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: %d slices of %d units; give 1 to %d", fn, o->slices, u->n_units,
                  u->n_units);
  if (o->resident < 1)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: %d resident slices; at least 1 must be in RAM to compute", fn,
                  o->resident);
  if (o->mode != ZT_OFFLOAD_MODEL_RECOMPUTE && o->mode != ZT_OFFLOAD_MODEL_KEEP_GRAPH)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: unknown mode %d: ZT_OFFLOAD_MODEL_RECOMPUTE or _KEEP_GRAPH", fn,
                  (int)o->mode);
  if (o->microbatches < 1)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: %d microbatches; a forward needs at least 1", fn, o->microbatches);
  if (o->slice_units) {
    int sum = 0;
    for (int s = 0; s < o->slices; s++) {
      if (o->slice_units[s] < 1)
        return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: slice %d has %d units; every slice needs at least 1", fn, s,
                      o->slice_units[s]);
      sum += o->slice_units[s];
    }
    if (sum != u->n_units)
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: the slices' unit counts sum to %d, the model has %d units", fn, sum,
                    u->n_units);
  }
  for (int i = 0; i < u->n_params; i++) {
    const zt_tensor *t = u->params[i].tensor;
    if (!t) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: parameter %d ('%s') has a NULL tensor", fn, i, u->params[i].name);
    for (int j = 0; j < i; j++)
      if (u->params[j].tensor->storage == t->storage)
        return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: parameters '%s' and '%s' share one storage; OffloadModel evicts "
                                             "each parameter's storage on its own, so give each its own",
                      fn, u->params[j].name, u->params[i].name);
  }
  return ZT_OK;
}

static zt_status build(zt_offload_model *om) {
  const zt_offload_units *u = &om->u;
  int S = om->S, P = u->n_params, U = u->n_units;
  size_t SP = (size_t)S * (size_t)(P ? P : 1);
  bool *use = calloc(SP, sizeof *use);
  int64_t *ubytes = calloc((size_t)U, sizeof *ubytes);
  bool *uu = calloc((size_t)U * (size_t)(P ? P : 1), sizeof *uu);
  om->first = calloc((size_t)S, sizeof *om->first);
  om->count = calloc((size_t)S, sizeof *om->count);
  om->sp = calloc(SP, sizeof *om->sp);
  om->sp_off = calloc((size_t)S + 1, sizeof *om->sp_off);
  om->owned = calloc((size_t)(P ? P : 1), sizeof *om->owned);
  om->owned_off = calloc((size_t)S + 1, sizeof *om->owned_off);
  om->p_first = calloc((size_t)(P ? P : 1), sizeof *om->p_first);
  om->p_nslices = calloc((size_t)(P ? P : 1), sizeof *om->p_nslices);
  om->p_res = calloc((size_t)(P ? P : 1), sizeof *om->p_res);
  om->shared = calloc((size_t)(P ? P : 1), sizeof *om->shared);
  om->shared_idx = calloc((size_t)(P ? P : 1), sizeof *om->shared_idx);
  om->state = calloc((size_t)S, sizeof *om->state);
  om->last_use = calloc((size_t)S, sizeof *om->last_use);
  om->rng_blocks = calloc((size_t)S, sizeof *om->rng_blocks);
  om->ss = calloc((size_t)(P ? P : 1), sizeof *om->ss);
  om->ss_set = calloc((size_t)(P ? P : 1), sizeof *om->ss_set);
  om->pending = calloc((size_t)(P ? P : 1), sizeof *om->pending);
  om->slice_fwd_s = calloc((size_t)S, sizeof *om->slice_fwd_s);
  om->slice_bwd_s = calloc((size_t)S, sizeof *om->slice_bwd_s);
  zt_status e = ZT_OK;
  if (!use || !ubytes || !uu || !om->first || !om->count || !om->sp || !om->sp_off || !om->owned || !om->owned_off ||
      !om->p_first || !om->p_nslices || !om->p_res || !om->shared || !om->shared_idx ||
      !om->state || !om->last_use || !om->rng_blocks || !om->ss || !om->ss_set || !om->pending ||
      !om->slice_fwd_s || !om->slice_bwd_s)
    e = ZT_ERR(ZT_STATUS_OOM, "zt_offload_model_new: out of host memory for the slice tables");
  for (int v = 0; v < U && !e; v++)
    for (int i = 0; i < P; i++)
      if (u->uses(u->ctx, v, i)) {
        uu[(size_t)v * (size_t)P + (size_t)i] = true;
        ubytes[v] += (int64_t)u->params[i].tensor->storage->nbytes;
      }
  if (!e) {
    if (om->o.slice_units) memcpy(om->count, om->o.slice_units, sizeof *om->count * (size_t)S);
    else e = zt_offload_model_balance(U, S, ubytes, om->count);
    for (int s = 1; s < S && !e; s++) om->first[s] = om->first[s - 1] + om->count[s - 1];
  }
  for (int s = 0; s < S && !e; s++) {
    int64_t bytes = 0;
    for (int v = om->first[s]; v < om->first[s] + om->count[s]; v++)
      for (int i = 0; i < P; i++) use[(size_t)s * (size_t)P + (size_t)i] |= uu[(size_t)v * (size_t)P + (size_t)i];
    om->sp_off[s + 1] = om->sp_off[s];
    for (int i = 0; i < P; i++)
      if (use[(size_t)s * (size_t)P + (size_t)i]) {
        om->sp[om->sp_off[s + 1]++] = i;
        bytes += (int64_t)u->params[i].tensor->storage->nbytes;
      }
    if (bytes > om->st.slice_param_bytes_max) om->st.slice_param_bytes_max = bytes;
  }
  for (int i = 0; i < P && !e; i++) {
    om->p_first[i] = -1;
    om->shared_idx[i] = -1;
    for (int s = 0; s < S; s++)
      if (use[(size_t)s * (size_t)P + (size_t)i]) {
        if (om->p_first[i] < 0) om->p_first[i] = s;
        om->p_nslices[i]++;
      }
    if (om->p_first[i] < 0)
      e = ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_offload_model_new: no unit uses parameter '%s'; every parameter must "
                                        "belong to a unit (it is in RAM only while a slice that uses it is)",
                 u->params[i].name);
    else if (om->p_nslices[i] > 1)
      om->shared_idx[i] = om->n_shared, om->shared[om->n_shared++] = i;
  }
  for (int s = 0; s < S && !e; s++) {
    om->owned_off[s + 1] = om->owned_off[s];
    for (int i = 0; i < P; i++)
      if (om->p_first[i] == s) {
        om->owned[om->owned_off[s + 1]++] = i;
      }
  }
  free(use);
  free(ubytes);
  free(uu);
  return e;
}

zt_status zt_offload_model_new(const zt_offload_units *u, zt_store *store, const zt_offload_model_options *o,
                               zt_offload_model **out) {
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_offload_model_new: out is NULL");
  *out = NULL;
  if (!u || !store) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_offload_model_new: units and store are required");
  zt_offload_model_options opt = o ? *o : zt_offload_model_options_default();
  ZT_TRY(check_options(u, &opt));
  zt_offload_model *om = calloc(1, sizeof *om);
  if (!om) return ZT_ERR(ZT_STATUS_OOM, "zt_offload_model_new: out of host memory");
  om->u = *u;
  om->store = store;
  om->o = opt;
  om->S = opt.slices;
  om->K = opt.resident < opt.slices ? opt.resident : opt.slices;
  om->last_loss = NAN;
  om->st.slices = om->S;
  om->st.resident = om->K;
  om->st.microbatches = opt.microbatches;
  zt_status e = build(om);
  om->o.slice_units = NULL; /* borrowed by this call only */
  if (!e) e = zt_tensor_empty(1, (int64_t[]){0}, ZT_DTYPE_F32, ZT_CPU, &om->probe);
  if (!e) e = zt_tensor_set_requires_grad(om->probe, true);
  for (int i = 0; i < u->n_params && !e; i++) {
    zt_tensor *t = u->params[i].tensor;
    if (!t->storage->name[0]) zt_storage_set_name(t->storage, u->params[i].name);
    e = param_evict(om, i);
  }
  if (e) {
    zt_offload_model_free(om); /* restores what was evicted */
    return zt__error_prefix(e, "zt_offload_model_new");
  }
  *out = om;
  return ZT_OK;
}
