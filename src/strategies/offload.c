/* Activation offload on saved-tensor hooks: pack copies a saved view's span of storage into
 * an entry held by a store (zt/store.h; shared per storage id + version) and keeps no
 * reference to the storage; on the disk tier the copy is written behind by the store's helper
 * thread; the same helper loads the entries packed just before the one being unpacked.
 * Invariants: an entry's bytes are always in one of: its write behind, the store, its ready
 * storage (offload_internal.h); its store bytes are dropped only when no request of it is in
 * flight; entries are touched by the thread that runs forward and backward only.
 * This file: the entries, the offload object and its public zt_offload_* API, and the
 * saved-tensor hooks; offload_internal.h lists the others. */
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/status_internal.h"
#include "core/store_internal.h"
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
  tier_add(o, -(int64_t)e->tier_bytes);
  e->tier_bytes = 0;
  if (e->in_store) zt_store_drop(o->store, &e->item);
  e->in_store = false;
}

/* Everything e holds freed: a write behind taken back (never done when not started) or
 * waited for, a load in flight waited for (its store bytes are being read), its ready
 * storage, its host copy, its store bytes. */
static void entry_bytes_free(zt_offload *o, zt__offload_entry *e) {
  if (e->state == ZT__OFFLOAD_ENTRY_WRITING) {
    bool settled;
    ZT_IGNORE(zt__offload_settle(o, e, true, &settled), "a copy not made a storage stays in e->ram: freed below");
  }
  zt__offload_unwant(o, e);
  zt_storage_release_ref(e->ready); /* the only copy (never written) is kept by unwant */
  e->ready = NULL;
  if (e->ram) zt_mem_free(e->ram, e->nbytes, ZT_CPU, ZT_MEM_TAG_ACTIVATION);
  e->ram = NULL;
  free_tier_bytes(o, e);
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

/* The entry's host copy (e->ram) becomes its ready storage: adopted as it is on cpu, else
 * written into a new storage on the entry's device. On failure e->ram stays. */
static zt_status ram_to_ready(zt__offload_entry *e) {
  zt_storage *s = NULL;
  if (zt_device_equal(e->device, ZT_CPU)) {
    ZT_TRY(zt__storage_adopt(e->ram, e->nbytes, ZT_CPU, ZT_MEM_TAG_ACTIVATION, &s));
    if (e->tag != ZT_MEM_TAG_ACTIVATION) zt_storage_retag(s, e->tag); /* accounted as what it brings back */
  } else {
    ZT_TRY(zt__offload_alloc(e, &s));
    zt__dev_storage_write(s, 0, e->ram, e->nbytes);
    zt_mem_free(e->ram, e->nbytes, ZT_CPU, ZT_MEM_TAG_ACTIVATION);
  }
  e->ram = NULL;
  e->ready = s;
  e->state = ZT__OFFLOAD_ENTRY_READY;
  e->used = false;
  return ZT_OK;
}

zt_status zt__offload_settle(zt_offload *o, zt__offload_entry *e, bool wait, bool *settled) {
  *settled = true;
  if (e->state != ZT__OFFLOAD_ENTRY_WRITING) return ZT_OK;
  zt_store_item item;
  void *ram = NULL;
  bool done = true;
  /* a failed write is the store's to report (zt__store_write_error: the next pack or unpack), once */
  bool failed = zt__store_put_settle(e->wreq, wait, &item, &ram, &done);
  if (!done) {
    *settled = false;
    return ZT_OK;
  }
  e->wreq = NULL;
  e->state = ZT__OFFLOAD_ENTRY_STORED;
  if (item.nbytes) { /* written */
    e->item = item;
    e->in_store = true;
    tier_add(o, (int64_t)item.held - (int64_t)e->tier_bytes);
    e->tier_bytes = item.held;
  } else { /* taken back before it started, or failed: the bytes are only in RAM now */
    tier_add(o, -(int64_t)e->tier_bytes);
    e->tier_bytes = 0;
    o->st.writes_taken_back += !failed;
  }
  if (!ram) return ZT_OK;
  e->ram = ram;
  zt_status s = ram_to_ready(e);
  if (s == ZT_OK) e->ram_hit = true;
  else if (e->in_store) { /* the store has it: the copy is not needed */
    zt_mem_free(e->ram, e->nbytes, ZT_CPU, ZT_MEM_TAG_ACTIVATION);
    e->ram = NULL;
  }
  return s;
}

/* Write behind: a host copy of the span handed to the store's helper. *e->wreq NULL when the
 * store cannot (then the caller puts synchronously). The copy is made in host memory rather
 * than the saved storage being held (retained) until its write ends: that would keep forward's
 * whole storage (not only the span) for the write's time, and it would not be correct: the
 * saved bytes must be the ones the op saw at the save, but forward may change the storage in
 * place after it (offload's contract: backward then sees the saved values, zt/offload.h), and
 * the storage may be released or evicted (FSDP's reshard, OffloadModel's boundary
 * activations) while the helper reads it; the helper would race with those writes. A copy is
 * forward's own for as long as the write needs it, and a memcpy costs far less than the write. */
static zt_status put_behind(zt_offload *o, const zt_tensor *t, int64_t lo, zt__offload_entry *e) {
  const char *where = "zt_offload: writing a saved tensor behind";
  ZT_TRY(zt__store_write_room(o->store, e->nbytes, where)); /* first: the cap counts the copy about to be made */
  void *buf = NULL;
  ZT_TRY(zt_mem_alloc(e->nbytes, ZT_CPU, ZT_MEM_TAG_ACTIVATION, &buf));
  zt__dev_storage_read(t->storage, (size_t)lo * zt_dtype_size(t->dtype), buf, e->nbytes);
  zt_status s = zt__store_put_async(o->store, ZT_CPU, buf, e->nbytes, t->dtype, ZT_MEM_TAG_ACTIVATION, where, &e->wreq);
  if (s == ZT_OK && !e->wreq) /* no helper after all: put the copy now */
    s = zt_store_put(o->store, ZT_CPU, buf, e->nbytes, t->dtype, ZT_MEM_TAG_ACTIVATION, &e->item);
  if (!e->wreq) {
    zt_mem_free(buf, e->nbytes, ZT_CPU, ZT_MEM_TAG_ACTIVATION);
    if (s == ZT_OK) e->in_store = true, e->tier_bytes = e->item.held;
    return s;
  }
  e->state = ZT__OFFLOAD_ENTRY_WRITING;
  e->tier_bytes = e->nbytes; /* what the lossless stores that write behind hold for it */
  o->st.writes_behind++;
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
  double t0 = zt_clock_now();
  zt_status s;
  if (o->opt.tier == ZT_OFFLOAD_DISK && o->opt.write_cap > 0 && zt__store_can_write_behind(o->store)) {
    s = put_behind(o, t, lo, e);
  } else {
    /* the store stages the bytes through the storage's backend when the host cannot touch them */
    const char *src = (const char *)t->storage->data + lo * (int64_t)es;
    s = zt_store_put(o->store, t->storage->device, src, e->nbytes, t->dtype, ZT_MEM_TAG_ACTIVATION, &e->item);
    if (s == ZT_OK) e->in_store = true, e->tier_bytes = e->item.held;
  }
  o->st.put_ms += 1e3 * (zt_clock_now() - t0);
  if (s == ZT_OK) {
    tier_add(o, (int64_t)e->tier_bytes);
    s = hash_insert(o, e);
    if (s) entry_bytes_free(o, e);
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
  entry_bytes_free(o, e);
  zt__offload_window_remove(o, e);
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

const char *zt_offload_tier_name(zt_offload_tier tier) {
  switch (tier) {
  case ZT_OFFLOAD_NONE: return "none";
  case ZT_OFFLOAD_BF16: return "bf16";
  case ZT_OFFLOAD_DISK: return "disk";
  case ZT_OFFLOAD_HOST: return "host";
  }
  return "invalid";
}

zt_offload_options zt_offload_options_default(zt_offload_tier tier) {
  return (zt_offload_options){tier, NULL, 64 << 10, 2, (int64_t)ZT_STORE_WRITE_CAP_DEFAULT};
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
  if (opt->write_cap < 0)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_offload_new: write_cap is %lld; it must be >= 0 (0: synchronous writes)",
                  (long long)opt->write_cap);
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
  zt_store_set_write_cap(o->store, (size_t)opt->write_cap); /* nothing in flight yet */
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
  if (e->state == ZT__OFFLOAD_ENTRY_WRITING) { /* its copy is still in RAM: taken back, or its running write waited for */
    bool settled;
    err = zt__offload_settle(o, e, false, &settled);
    if (!err && !settled) {
      err = zt__offload_settle(o, e, true, &settled);
      e->ram_hit = false; /* it waited */
    }
  }
  if (!err && e->ram) err = ram_to_ready(e); /* a copy that could not be made a storage before */
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
    } else if (served || e->ram_hit) {
      served = true;
      o->st.prefetch_hits++;
    }
    e->used = true;
    e->ram_hit = false;
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
  /* a write behind that failed (this entry's or another's): its bytes are safe in RAM, but the
   * store's trouble is reported now, once */
  if (!err) err = zt__store_write_error(o->store, "zt_offload: a saved tensor's write behind");
  if (err) {
    zt_storage_release_ref(s);
    return zt__error_prefix(err, "zt_offload: loading a saved tensor back");
  }
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

zt_status zt_offload_flush(zt_offload *o) {
  if (!o) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_offload_flush: offload is NULL");
  return zt_store_flush(o->store);
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
