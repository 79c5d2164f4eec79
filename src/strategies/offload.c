/* Activation offload on saved-tensor hooks: pack copies a saved view's span of storage into
 * an entry held by a store (zt/store.h; shared per storage id + version) and keeps no
 * reference to the storage; the store's helper thread loads the entries packed just before
 * the one being unpacked.
 * Invariants: an entry's store bytes are dropped only when no request of it is in flight;
 * entries are touched by the thread that runs forward and backward only.
 * This file: the entries, the offload object and its public zt_offload_* API, and the
 * saved-tensor hooks; offload_internal.h lists the others. */
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "offload_internal.h"

/* What one saved tensor keeps: its view geometry and its entry, or an alias when kept. */
typedef struct record {
  zt_offload *o;
  zt__offload_entry *e;
  zt_tensor *kept;
  uint64_t version; /* kept: storage version at pack, for the in-place check */
  int64_t offset;   /* elements from the entry's span start */
  int ndim;
  int64_t shape[ZT_MAX_DIMS], stride[ZT_MAX_DIMS];
  zt_dtype dtype;
} record;

static void tier_add(zt_offload *o, int64_t delta) {
  o->st.bytes_in_tier += delta;
  if (o->st.bytes_in_tier > o->st.peak_bytes_in_tier) o->st.peak_bytes_in_tier = o->st.bytes_in_tier;
}
/* ---------------------------------------------------------------- entries */
/* Fibonacci hashing: ids are sequential, so spread them before masking. */
static size_t bucket_of(const zt_offload *o, uint64_t sid) {
  return (size_t)(sid * 0x9E3779B97F4A7C15ull >> 20) & (o->nbuckets - 1);
}

static zt_status hash_insert(zt_offload *o, zt__offload_entry *e) {
  if (o->n_live + 1 > o->nbuckets) { /* grow: chains stay about one long */
    size_t nb = o->nbuckets * 2;
    zt__offload_entry **b = calloc(nb, sizeof *b);
    if (!b) return ZT_ERR(ZT_STATUS_OOM, "zt_offload: out of host memory for the entry table");
    zt__offload_entry **old = o->buckets;
    size_t onb = o->nbuckets;
    o->buckets = b;
    o->nbuckets = nb;
    for (size_t i = 0; i < onb; i++)
      for (zt__offload_entry *x = old[i], *nx; x; x = nx) {
        nx = x->hnext;
        size_t k = bucket_of(o, x->sid);
        x->hnext = b[k];
        b[k] = x;
      }
    free(old);
  }
  size_t k = bucket_of(o, e->sid);
  e->hnext = o->buckets[k];
  o->buckets[k] = e;
  return ZT_OK;
}

static void hash_remove(zt_offload *o, zt__offload_entry *e) {
  for (zt__offload_entry **p = &o->buckets[bucket_of(o, e->sid)]; *p; p = &(*p)->hnext)
    if (*p == e) {
      *p = e->hnext;
      return;
    }
}

/* A live copy of the same storage bytes (id, version, dtype) covering [lo, lo + n). */
static zt__offload_entry *find_entry(const zt_offload *o, const zt_tensor *t, int64_t lo, int64_t n) {
  for (zt__offload_entry *e = o->buckets[bucket_of(o, t->storage->id)]; e; e = e->hnext)
    if (e->sid == t->storage->id && e->version == t->storage->version && e->dtype == t->dtype && e->lo <= lo &&
        lo + n <= e->lo + e->n)
      return e;
  return NULL;
}

static void free_tier_bytes(zt_offload *o, zt__offload_entry *e) {
  tier_add(o, -(int64_t)e->item.held);
  zt_store_drop(o->store, &e->item);
}

zt_status zt__offload_alloc(const zt__offload_entry *e, zt_storage **out) {
  return zt_storage_new(e->nbytes, e->device, e->tag, out);
}

/* A new storage holding the entry's span, loaded on this thread. */
static zt_status load(zt_offload *o, const zt__offload_entry *e, zt_storage **out) {
  zt_storage *s;
  ZT_TRY(zt__offload_alloc(e, &s));
  zt_status st = zt_store_get(o->store, &e->item, s->device, s->data);
  if (st) {
    zt_storage_release_ref(s);
    return st;
  }
  *out = s;
  return ZT_OK;
}

/* Copy elements [lo, lo + n) of t's storage to the tier, as a new live entry. */
static zt_status make_entry(zt_offload *o, const zt_tensor *t, int64_t lo, int64_t n, zt__offload_entry **out) {
  zt__offload_entry *e = calloc(1, sizeof *e);
  if (!e) return ZT_ERR(ZT_STATUS_OOM, "zt_offload: out of host memory for a tier entry");
  size_t es = zt_dtype_size(t->dtype);
  e->sid = t->storage->id;
  e->version = t->storage->version;
  e->dtype = t->dtype;
  e->device = t->storage->device;
  e->tag = t->storage->tag;
  e->lo = lo;
  e->n = n;
  e->nbytes = (size_t)n * es;
  /* the store stages the bytes through the storage's backend when the host cannot touch them */
  const char *src = (const char *)t->storage->data + lo * (int64_t)es;
  double t0 = zt_clock_now();
  zt_status s = zt_store_put(o->store, t->storage->device, src, e->nbytes, t->dtype, ZT_MEM_TAG_ACTIVATION, &e->item);
  o->st.put_ms += 1e3 * (zt_clock_now() - t0);
  if (s == ZT_OK) {
    tier_add(o, (int64_t)e->item.held);
    s = hash_insert(o, e);
    if (s) free_tier_bytes(o, e);
  }
  if (s) {
    free(e);
    return s;
  }
  e->prev = o->tail;
  if (o->tail) o->tail->next = e;
  else o->head = e;
  o->tail = e;
  o->n_live++;
  o->st.entries++;
  o->st.bytes_offloaded += (int64_t)e->nbytes;
  *out = e;
  return ZT_OK;
}

static void entry_unref(zt_offload *o, zt__offload_entry *e) {
  if (--e->refs > 0) return;
  zt__offload_unwant(o, e); /* a load in flight is waited for: its store bytes are being read */
  zt__offload_window_remove(o, e);
  free_tier_bytes(o, e);
  hash_remove(o, e);
  if (e->prev) e->prev->next = e->next;
  else o->head = e->next;
  if (e->next) e->next->prev = e->prev;
  else o->tail = e->prev;
  free(e);
  o->n_live--;
}

/* ---------------------------------------------------------------- the store */
static void store_destroy(zt_offload *o) {
  ZT_ASSERT(o->n_live == 0);
  zt_store_free(o->store);
  free(o->buckets);
  free(o);
}

static void store_unref(zt_offload *o) {
  if (--o->refs == 0) store_destroy(o);
}

zt_offload_options zt_offload_options_default(zt_offload_tier tier) {
  return (zt_offload_options){tier, NULL, 64 << 10, 2};
}

zt_status zt_offload_new(const zt_offload_options *opt, zt_offload **out) {
  if (!opt || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_offload_new: options or out is NULL");
  *out = NULL;
  if (opt->tier != ZT_OFFLOAD_BF16 && opt->tier != ZT_OFFLOAD_DISK && opt->tier != ZT_OFFLOAD_HOST)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_offload_new: tier %d is not a zt_offload_tier; use ZT_OFFLOAD_BF16, ZT_OFFLOAD_DISK or "
                  "ZT_OFFLOAD_HOST",
                  (int)opt->tier);
  if (opt->min_bytes < 0)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_offload_new: min_bytes is %lld; it must be >= 0",
                  (long long)opt->min_bytes);
  if (opt->prefetch < 0 || opt->prefetch > ZT__OFFLOAD_MAX_PREFETCH)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_offload_new: prefetch is %d; it must be in [0, %d] (0: no helper thread)",
                  opt->prefetch, ZT__OFFLOAD_MAX_PREFETCH);
  zt_offload *o = calloc(1, sizeof *o);
  if (!o) return ZT_ERR(ZT_STATUS_OOM, "zt_offload_new: out of host memory");
  o->opt = *opt;
  o->refs = 1;
  o->nbuckets = 64;
  o->buckets = calloc(o->nbuckets, sizeof *o->buckets);
  if (!o->buckets) {
    free(o);
    return ZT_ERR(ZT_STATUS_OOM, "zt_offload_new: out of host memory");
  }
  zt_status s = opt->tier == ZT_OFFLOAD_DISK   ? zt_store_disk_new(opt->dir, "zt_offload", &o->store)
                : opt->tier == ZT_OFFLOAD_BF16 ? zt_store_bf16_new(&o->store)
                                               : zt_store_memory_new(&o->store);
  o->opt.dir = NULL; /* the caller's string is not kept */
  if (s) {
    store_destroy(o);
    return s;
  }
  *out = o;
  return ZT_OK;
}

static void strategy_detach(void *self);

void zt_offload_free(zt_offload *o) {
  if (!o) return;
  if (!o->handle_freed) strategy_detach(o);
  ZT_ASSERT(!o->handle_freed);
  ZT_ASSERT(o->pushed == 0); /* its hooks would point at a freed handle: pop them first */
  o->handle_freed = true;
  store_unref(o);
}

/* ---------------------------------------------------------------- hooks */
/* Why t stays as it is (NULL: it goes to the tier). */
static const char *keep_reason(const zt_offload *o, const zt_tensor *t) {
  if (zt_tensor_numel(t) == 0) return "empty";
  if (!zt_dtype_is_float(t->dtype)) return "not float";
  /* parameters (and views of their storage) must stay where the optimizer updates them */
  if ((t->requires_grad && zt_tensor_is_leaf(t)) || t->storage->tag == ZT_MEM_TAG_PARAM) return "parameter";
  if ((int64_t)zt_tensor_nbytes(t) < o->opt.min_bytes) return "small";
  if (t->storage->released || !t->storage->data) return "released"; /* the engine reports it if still so */
  return NULL;
}

static zt_status off_pack(const zt_tensor *t, void **packed, void *user_data) {
  zt_offload *o = user_data;
  record *r = calloc(1, sizeof *r);
  if (!r) return ZT_ERR(ZT_STATUS_OOM, "zt_offload: out of host memory for a saved-tensor record");
  r->o = o;
  r->ndim = t->ndim;
  memcpy(r->shape, t->shape, sizeof r->shape);
  memcpy(r->stride, t->stride, sizeof r->stride);
  r->dtype = t->dtype;
  zt_status s = ZT_OK;
  if (keep_reason(o, t)) {
    r->version = t->storage->version;
    s = zt_tensor_alias(t, &r->kept);
    if (s == ZT_OK) o->st.tensors_kept++;
  } else {
    /* the span of storage elements the view touches (strides may be negative) */
    int64_t lo = t->offset, hi = t->offset;
    for (int d = 0; d < t->ndim; d++) {
      int64_t ext = t->stride[d] * (t->shape[d] - 1);
      if (ext < 0) lo += ext;
      else hi += ext;
    }
    ZT_ASSERT(lo >= 0 && (size_t)(hi + 1) * zt_dtype_size(t->dtype) <= t->storage->nbytes);
    zt__offload_entry *e = find_entry(o, t, lo, hi - lo + 1);
    if (!e) s = make_entry(o, t, lo, hi - lo + 1, &e);
    if (s == ZT_OK) {
      e->refs++;
      r->e = e;
      r->offset = t->offset - e->lo;
      o->st.tensors_offloaded++;
    }
  }
  if (s) {
    free(r);
    return s;
  }
  o->refs++;
  *packed = r;
  return ZT_OK;
}

static zt_status off_unpack(void *packed, zt_tensor **out, void *user_data) {
  (void)user_data;
  record *r = packed;
  zt_offload *o = r->o;
  if (r->kept) {
    /* The engine checks versions only for un-hooked records; a kept alias is the live
     * storage, so an in-place change after the save must fail here as it would there. */
    zt_tensor *k = r->kept;
    if (k->storage->version != r->version)
      return ZT_ERR(ZT_STATUS_AUTOGRAD,
                    "one of the tensors needed for gradient computation has been modified by an in-place "
                    "operation: a saved tensor of shape %s (kept in place by the activation offload) is at version "
                    "%llu but was saved at version %llu; do not modify it in place before backward (clone it first, "
                    "or modify a copy)",
                    zt_shape_str(k->ndim, k->shape, (char[128]){0}), (unsigned long long)k->storage->version,
                    (unsigned long long)r->version);
    return zt_tensor_alias(k, out);
  }
  zt__offload_entry *e = r->e;
  double t0 = 1e3 * zt_clock_now();
  zt_storage *s = NULL;
  zt_status err = ZT_OK;
  bool served = false;
  o->st.unpacks++;
  /* before our own wait or load, so the helper works meanwhile; a request of e that the
   * helper has not started is done by the wait below, at once */
  zt__offload_schedule(o, e);
  if (e->state == ZT__OFFLOAD_ENTRY_LOADING) {
    served = zt_store_request_done(e->req);
    err = zt_store_wait(e->req);
    e->req = NULL;
    if (err) { /* reported once; a later unpack tries again */
      zt_storage_release_ref(e->ready);
      e->ready = NULL;
      e->state = ZT__OFFLOAD_ENTRY_STORED;
      served = false;
    } else {
      e->state = ZT__OFFLOAD_ENTRY_READY;
      e->used = false;
    }
  }
  if (e->state == ZT__OFFLOAD_ENTRY_READY) {
    s = e->ready;
    zt_storage_retain(s);
    if (e->used) {
      served = true;
      o->st.reuses++;
    } else if (served) {
      o->st.prefetch_hits++;
    }
    e->used = true;
  } else if (!err) {
    err = load(o, e, &s);
    if (err == ZT_OK && e->wanted) { /* kept for the other saves of this storage */
      zt_storage_retain(s);
      e->ready = s;
      e->used = true;
      e->state = ZT__OFFLOAD_ENTRY_READY;
    }
  }
  if (!served) {
    o->st.waits++;
    o->st.wait_ms += 1e3 * zt_clock_now() - t0;
  }
  if (err) return zt__error_prefix(err, "zt_offload: loading a saved tensor back");
  zt_status st = zt__tensor_new_view(s, r->offset, r->ndim, r->shape, r->stride, r->dtype, out);
  zt_storage_release_ref(s); /* the view holds it now; the tier copy stays until release */
  return st;
}

static void off_release(void *packed, void *user_data) {
  (void)user_data;
  record *r = packed;
  zt_offload *o = r->o;
  zt_tensor_free(r->kept);
  if (r->e) entry_unref(o, r->e);
  free(r);
  store_unref(o);
}

zt_status zt_offload_push(zt_offload *o) {
  if (!o) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_offload_push: store is NULL");
  zt_saved_tensor_hooks h = {off_pack, off_unpack, off_release, o};
  ZT_TRY(zt_saved_tensor_hooks_push(&h));
  o->pushed++;
  return ZT_OK;
}

zt_status zt_offload_pop(zt_offload *o) {
  if (!o) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_offload_pop: store is NULL");
  const zt_saved_tensor_hooks *top = zt_saved_tensor_hooks_top();
  if (!top || top->pack != off_pack || top->user_data != o) {
    const char *why = !top                    ? "the stack is empty"
                      : top->pack == off_pack ? "another store's hooks are on top"
                                              : "other hooks (e.g. a checkpoint region) are on top";
    return ZT_ERR(ZT_STATUS_STATE,
                  "zt_offload_pop: this store's hooks are not on top of this thread's saved-tensor hooks stack (%s); "
                  "pop in the reverse order of push, on the thread that pushed",
                  why);
  }
  ZT_TRY(zt_saved_tensor_hooks_pop());
  o->pushed--;
  return ZT_OK;
}

void zt_offload_stats_get(const zt_offload *o, zt_offload_stats *out) {
  if (!out) return;
  if (!o) {
    *out = (zt_offload_stats){0};
    return;
  }
  *out = o->st;
  zt_store_stats ss; /* the helper's counters live in the store */
  zt_store_stats_get(o->store, &ss);
  out->prefetched = ss.helper_gets - o->base_prefetched;
  out->threads_started = ss.threads_started - o->base_threads;
}

void zt_offload_reset_stats(zt_offload *o) {
  if (!o) return;
  int64_t cur = o->st.bytes_in_tier;
  o->st = (zt_offload_stats){0};
  o->st.bytes_in_tier = cur;
  o->st.peak_bytes_in_tier = cur;
  zt_store_stats ss;
  zt_store_stats_get(o->store, &ss);
  o->base_prefetched = ss.helper_gets;
  o->base_threads = ss.threads_started;
}

/* ---------------------------------------------------------------- as a strategy */

static zt_status wrap_run(void *ud, zt_span_next next, int first, int count, zt_tensor *x, zt_tensor **y) {
  zt_offload *o = ud;
  if (!zt_grad_enabled()) return zt_span_run(next, first, count, x, y); /* nothing is saved */
  ZT_TRY(zt_offload_push(o));
  zt_status s = zt_span_run(next, first, count, x, y);
  zt_status p = zt_offload_pop(o);
  if (s) return s;
  if (p) zt_tensor_free(*y), *y = NULL;
  return p;
}

static zt_status strategy_attach(void *self, const zt_model *m) {
  zt_offload *o = self;
  if (o->handle_freed) return ZT_ERR(ZT_STATUS_STATE, "the offload store was freed");
  if (o->seq) return ZT_ERR(ZT_STATUS_STATE, "the offload store is attached to a model already; detach it first");
  zt_module *seq = zt_model_blocks(m);
  if (!seq) return ZT_ERR(ZT_STATUS_INVALID_ARG, "the model has no block sequence");
  zt_module_wrapper w = {wrap_run, ZT_STRATEGY_ORDER_OFFLOAD, o};
  ZT_TRY(zt_module_add_wrapper(seq, &w, &o->wrapper_id));
  o->seq = seq;
  return ZT_OK;
}

static void strategy_detach(void *self) {
  zt_offload *o = self;
  if (!o->seq) return;
  zt_module_remove_wrapper(o->seq, o->wrapper_id);
  o->seq = NULL;
}

static const zt_strategy_ops strategy_ops = {"activation-offload", ZT_STRATEGY_ORDER_OFFLOAD, strategy_attach,
                                             strategy_detach};

zt_strategy zt_offload_strategy(zt_offload *o) { return (zt_strategy){&strategy_ops, o}; }
