/* Refcounted storage. Bytes may be released and re-made while the object (and every
 * tensor viewing it) lives on; that is how FSDP reshards. Or moved to a store and back
 * with their contents (evict / restore), which is how model offload streams parameters.
 * Invariants: an evicted storage is released (data NULL, or being filled by a restore in
 * flight) and its contents are in exactly one of: a write behind in flight (the request owns
 * the RAM), RAM kept after a failed write (ram), the store's item; only the thread that calls
 * these functions changes the storage object. A storage restored with keep is not evicted:
 * its store copy and version are in a side table (kept copies), so tensor.h's struct stays. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "core/store_internal.h"
#include "core/tensor_internal.h"
#include "zt/store.h"
#include "zt/tensor.h"

struct zt_storage_eviction {
  zt_store *store;
  zt_dtype dtype;         /* what the bytes hold, for a put again after a failed write behind */
  zt_store_item item;
  bool has_item;          /* item is the store's (a zero-byte put makes an empty one) */
  zt_store_request *req;  /* a restore in flight: data is allocated and being filled */
  bool keep;              /* that restore keeps the store's copy */
  zt_store_request *wreq; /* a write behind in flight: the bytes are the request's until it ends */
  void *ram;              /* the contents in RAM, not in the store (their write behind failed) */
};

/* ---------------------------------------------------------------- kept copies */
/* A storage restored with keep: the store's copy of it and the version it was restored at.
 * A side table keyed by the storage, not a field, so the public struct is unchanged; looked up
 * only at evictions, keeping restores and frees (skipped while the table is empty). */
typedef struct kept {
  const zt_storage *s;
  zt_store *store;
  zt_store_item item;
  uint64_t version;
  struct kept *next;
} kept;

#define KEPT_BUCKETS 1024
static pthread_mutex_t g_kept_mu = PTHREAD_MUTEX_INITIALIZER;
static kept *g_kept[KEPT_BUCKETS];
static atomic_long g_kept_n;

static size_t kept_bucket(const zt_storage *s) { return (size_t)(s->id * 0x9E3779B97F4A7C15ull >> 54) % KEPT_BUCKETS; }

/* Take s's kept copy out of the table (NULL: none); the caller drops or uses it. */
static kept *kept_take(const zt_storage *s) {
  if (atomic_load(&g_kept_n) == 0) return NULL;
  pthread_mutex_lock(&g_kept_mu);
  kept **pp = &g_kept[kept_bucket(s)], *k = NULL;
  for (; *pp; pp = &(*pp)->next)
    if ((*pp)->s == s) {
      k = *pp;
      *pp = k->next;
      atomic_fetch_sub(&g_kept_n, 1);
      break;
    }
  pthread_mutex_unlock(&g_kept_mu);
  return k;
}

/* Remember s's store copy at its version; out of host memory: the copy is dropped (the next
 * eviction puts, as without keep). */
static void kept_add(const zt_storage *s, zt_store *store, zt_store_item *item) {
  kept *k = malloc(sizeof *k);
  if (!k) {
    zt_store_drop(store, item);
    return;
  }
  *k = (kept){.s = s, .store = store, .item = *item, .version = s->version};
  pthread_mutex_lock(&g_kept_mu);
  size_t b = kept_bucket(s);
  k->next = g_kept[b];
  g_kept[b] = k;
  atomic_fetch_add(&g_kept_n, 1);
  pthread_mutex_unlock(&g_kept_mu);
}

static void kept_drop(kept *k) {
  if (!k) return;
  zt_store_drop(k->store, &k->item);
  free(k);
}

void zt_storage_drop_kept(zt_storage *s) {
  if (s) kept_drop(kept_take(s));
}

bool zt_storage_has_kept(const zt_storage *s) {
  if (!s || atomic_load(&g_kept_n) == 0) return false;
  pthread_mutex_lock(&g_kept_mu);
  bool found = false;
  for (kept *k = g_kept[kept_bucket(s)]; k && !found; k = k->next) found = k->s == s;
  pthread_mutex_unlock(&g_kept_mu);
  return found;
}

static uint64_t next_id(void) {
  static uint64_t counter = 0;
  return __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
}

/* A storage object over data (owned unless external). */
static zt_status storage_object(void *data, size_t nbytes, zt_device dev, zt_mem_tag tag, bool external,
                                zt_storage **out) {
  zt_storage *s = calloc(1, sizeof *s);
  if (!s) return ZT_ERR(ZT_STATUS_OOM, "out of host memory for a storage object");
  s->data = data;
  s->nbytes = nbytes;
  s->device = dev;
  s->tag = tag;
  s->refcount = 1;
  s->id = next_id();
  s->external = external;
  *out = s;
  return ZT_OK;
}

zt_status zt_storage_new(size_t nbytes, zt_device dev, zt_mem_tag tag, zt_storage **out) {
  void *data = NULL;
  ZT_TRY(zt_mem_alloc(nbytes, dev, tag, &data));
  zt_status st = storage_object(data, nbytes, dev, tag, false, out);
  if (st) zt_mem_free(data, nbytes, dev, tag);
  return st;
}

zt_status zt__storage_adopt(void *data, size_t nbytes, zt_device dev, zt_mem_tag tag, zt_storage **out) {
  return storage_object(data, nbytes, dev, tag, false, out);
}

zt_status zt_storage_wrap(void *data, size_t nbytes, zt_device dev, zt_storage **out) {
  return storage_object(data, nbytes, dev, ZT_MEM_TAG_TEMP, true, out);
}

void zt_storage_retain(zt_storage *s) {
  ZT_ASSERT(s && s->refcount > 0);
  __atomic_add_fetch(&s->refcount, 1, __ATOMIC_RELAXED);
}

static void eviction_end(zt_storage *s);

void zt_storage_release_ref(zt_storage *s) {
  if (!s) return;
  ZT_ASSERT(s->refcount > 0);
  if (__atomic_sub_fetch(&s->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
  if (s->evicted) eviction_end(s);
  else kept_drop(kept_take(s));
  if (!s->external && !s->released) zt_mem_free(s->data, s->nbytes, s->device, s->tag);
  free(s);
}

zt_status zt_storage_release(zt_storage *s) {
  if (!s) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_storage_release: storage is NULL");
  if (s->external) return ZT_ERR(ZT_STATUS_STATE, "zt_storage_release: cannot release wrapped (external) memory");
  if (s->released) return ZT_OK;
  kept_drop(kept_take(s)); /* rematerialised bytes are undefined: the copy says nothing of them */
  zt_mem_free(s->data, s->nbytes, s->device, s->tag);
  s->data = NULL;
  s->released = true;
  return ZT_OK;
}

zt_status zt_storage_rematerialize(zt_storage *s) {
  if (!s) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_storage_rematerialize: storage is NULL");
  if (s->evicted)
    return ZT_ERR(ZT_STATUS_STATE,
                  "zt_storage_rematerialize: the storage is evicted to a %s store; zt_storage_restore brings its "
                  "contents back",
                  zt_store_kind(s->evicted->store));
  if (!s->released) return ZT_OK;
  ZT_TRY(zt_mem_alloc(s->nbytes, s->device, s->tag, &s->data));
  s->released = false;
  /* No version bump: release + re-materialise is how reshard and offload move bytes
   * away and back unchanged, and tensors saved for backward must stay valid across it.
   * A caller that refills with different values bumps the version itself. */
  return ZT_OK;
}

void zt_storage_retag(zt_storage *s, zt_mem_tag tag) {
  if (!s->external && !s->released) zt_mem_retag(s->nbytes, s->device, s->tag, tag);
  s->tag = tag;
}

void zt_storage_set_name(zt_storage *s, const char *name) {
  if (!s) return;
  snprintf(s->name, sizeof s->name, "%s", name ? name : "");
}

/* ---------------------------------------------------------------- evict / restore */
/* "'name'" or "unnamed", for messages. */
static const char *name_of(const zt_storage *s, char buf[128]) {
  if (!s->name[0]) return "(unnamed)";
  snprintf(buf, 128, "'%s'", s->name);
  return buf;
}

static zt_status evict(zt_storage *s, zt_store *store, zt_dtype dtype, bool async, const char *fn) {
  if (!s || !store) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: storage or store is NULL", fn);
  char nb[128];
  if (s->evicted)
    return ZT_ERR(ZT_STATUS_STATE, "%s: storage %s is evicted already (to a %s store); restore it first", fn,
                  name_of(s, nb), zt_store_kind(s->evicted->store));
  if (s->external)
    return ZT_ERR(ZT_STATUS_STATE, "%s: storage %s wraps memory it does not own; it cannot be evicted", fn,
                  name_of(s, nb));
  if (s->released)
    return ZT_ERR(ZT_STATUS_RELEASED,
                  "%s: storage %s has no bytes (released by a reshard or offload); re-materialise and fill it first",
                  fn, name_of(s, nb));
  struct zt_storage_eviction *e = calloc(1, sizeof *e);
  if (!e) return ZT_ERR(ZT_STATUS_OOM, "%s: out of host memory", fn);
  e->store = store;
  e->dtype = dtype;
  kept *k = kept_take(s);
  if (k && k->store == store && k->version == s->version && k->item.dtype == dtype) {
    /* unchanged since its keeping restore: the store's copy is its contents, no put */
    e->item = k->item;
    e->has_item = true;
    free(k);
    zt__store_count_skipped(store);
  } else {
    kept_drop(k); /* changed (or another store, dtype): the copy is stale */
    zt_status st = ZT_OK;
    if (async) st = zt__store_put_async(store, s->device, s->data, s->nbytes, dtype, s->tag, fn, &e->wreq);
    if (!st && !e->wreq) { /* synchronous (asked for, or the store cannot write behind) */
      st = zt_store_put(store, s->device, s->data, s->nbytes, dtype, s->tag, &e->item);
      e->has_item = !st;
    }
    if (st) {
      free(e);
      return zt__error_prefix(st, "%s: storage %s", fn, name_of(s, nb));
    }
  }
  if (!e->wreq) zt_mem_free(s->data, s->nbytes, s->device, s->tag); /* else freed when its write is done */
  s->data = NULL;
  s->released = true;
  s->evicted = e;
  return ZT_OK;
}

zt_status zt_storage_evict(zt_storage *s, zt_store *store, zt_dtype dtype) {
  return evict(s, store, dtype, false, "zt_storage_evict");
}

zt_status zt_storage_evict_async(zt_storage *s, zt_store *store, zt_dtype dtype) {
  return evict(s, store, dtype, true, "zt_storage_evict_async");
}

/* A write behind in flight ends: take_back (a restore, a free) takes the bytes back into
 * e->ram when the write has not finished (never starting it) or failed; else it is waited for
 * (done here when not started), its bytes freed. Returns the write's failure (the bytes then
 * in e->ram). */
static zt_status write_settle(struct zt_storage_eviction *e, bool take_back) {
  if (!e->wreq) return ZT_OK;
  zt_store_item item;
  void *ram;
  zt_status st = zt__store_put_finish(e->wreq, take_back, &item, &ram);
  e->wreq = NULL;
  if (!st && item.nbytes) {
    e->item = item;
    e->has_item = true;
  }
  e->ram = ram;
  return st;
}
/* The store's copy dropped, the record freed: s is what release left (or restore made). */
static void eviction_free(zt_storage *s) {
  if (s->evicted->has_item) zt_store_drop(s->evicted->store, &s->evicted->item);
  free(s->evicted);
  s->evicted = NULL;
}

/* s is being freed while evicted: a restore in flight is cancelled and its bytes freed. */
static void eviction_end(zt_storage *s) {
  struct zt_storage_eviction *e = s->evicted;
  if (e->req) {
    zt_store_cancel(e->req);
    zt_mem_free(s->data, s->nbytes, s->device, s->tag);
    s->data = NULL;
  }
  /* a write not started is never done; a failed one was reported to the store */
  ZT_IGNORE(write_settle(e, true), "the storage is freed: its bytes are not needed");
  if (e->ram) zt_mem_free(e->ram, s->nbytes, s->device, s->tag);
  e->ram = NULL;
  eviction_free(s);
}

static zt_status restore_async(zt_storage *s, bool keep) {
  if (!s) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_storage_restore_async: storage is NULL");
  struct zt_storage_eviction *e = s->evicted;
  if (!e || e->req) return ZT_OK;
  /* its write behind's bytes, still in RAM, are the contents: served from there, no get (a
   * failure of the write is the store's to report: zt_store_flush, the next evict_async) */
  ZT_IGNORE(write_settle(e, true), "the bytes are back in RAM: nothing is lost");
  if (e->ram) {
    s->data = e->ram;
    e->ram = NULL;
    s->released = false;
    if (e->has_item && keep) kept_add(s, e->store, &e->item); /* written and unchanged: a clean copy */
    else if (e->has_item) zt_store_drop(e->store, &e->item);
    free(e);
    s->evicted = NULL;
    return ZT_OK;
  }
  e->keep = keep;
  void *data = NULL;
  char nb[128];
  zt_status st = zt_mem_alloc(s->nbytes, s->device, s->tag, &data);
  if (!st) st = zt_store_prefetch(e->store, &e->item, s->device, data, &e->req);
  if (st) {
    zt_mem_free(data, s->nbytes, s->device, s->tag);
    return zt__error_prefix(st, "restoring storage %s", name_of(s, nb));
  }
  s->data = data; /* still released: unreadable until zt_storage_wait */
  return ZT_OK;
}

zt_status zt_storage_wait(zt_storage *s) {
  if (!s) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_storage_wait: storage is NULL");
  struct zt_storage_eviction *e = s->evicted;
  if (!e || !e->req) return ZT_OK;
  zt_status st = zt_store_wait(e->req);
  e->req = NULL;
  if (st) {
    char nb[128];
    zt_mem_free(s->data, s->nbytes, s->device, s->tag);
    s->data = NULL;
    return zt__error_prefix(st, "restoring storage %s from a %s store", name_of(s, nb), zt_store_kind(e->store));
  }
  s->released = false;
  if (e->keep && e->has_item) {
    kept_add(s, e->store, &e->item);
    free(e);
    s->evicted = NULL;
    return ZT_OK;
  }
  eviction_free(s);
  return ZT_OK;
}

zt_status zt_storage_restore_async(zt_storage *s) { return restore_async(s, false); }
zt_status zt_storage_restore_async_keep(zt_storage *s) { return restore_async(s, true); }

zt_status zt_storage_restore(zt_storage *s) {
  ZT_TRY(zt_storage_restore_async(s));
  return zt_storage_wait(s);
}

bool zt_storage_is_evicted(const zt_storage *s) { return s && s->evicted; }

zt_status zt__storage_evicted_error(const zt_tensor *t, const char *where) {
  const zt_storage *s = t->storage;
  char who[320], shape[128];
  zt_shape_str(t->ndim, t->shape, shape);
  if (s->name[0]) snprintf(who, sizeof who, "tensor '%s' (%s %s)", s->name, zt_dtype_name(t->dtype), shape);
  else snprintf(who, sizeof who, "a tensor (%s %s) of an unnamed storage", zt_dtype_name(t->dtype), shape);
  if (s->evicted->req)
    return ZT_ERR(ZT_STATUS_RELEASED,
                  "%s: %s is being restored from a %s store (zt_storage_restore_async); call zt_storage_wait before "
                  "reading it",
                  where, who, zt_store_kind(s->evicted->store));
  return ZT_ERR(ZT_STATUS_RELEASED,
                "%s: %s is evicted to a %s store (zt_storage_evict): its bytes are not in memory; bring them back "
                "with zt_storage_restore (or zt_storage_restore_async, then zt_storage_wait) before reading it",
                where, who, zt_store_kind(s->evicted->store));
}

/* ---------------------------------------------------------------- evicted contents, in place */
/* The contents in the store's item: a write behind waited for; bytes left in RAM by a failed
 * one put again, synchronously. On failure they stay in RAM (a restore gives them back). The
 * storage object is only settled, its contents unchanged: hence const in. */
static zt_status written(const zt_storage *cs, const char *fn) {
  zt_storage *s = (zt_storage *)cs;
  struct zt_storage_eviction *e = s->evicted;
  char nb[128];
  /* a failure leaves the bytes in e->ram (and was reported to the store): put again below */
  ZT_IGNORE(write_settle(e, false), "its bytes are in RAM: put again below");
  if (!e->ram) return ZT_OK;
  zt_store_item it;
  zt_status st = zt_store_put(e->store, s->device, e->ram, s->nbytes, e->dtype, s->tag, &it);
  if (st)
    return zt__error_prefix(st,
                            "%s: storage %s, whose write behind had failed, could not be put again (its bytes are "
                            "kept in RAM: zt_storage_restore gives them back)",
                            fn, name_of(s, nb));
  zt_mem_free(e->ram, s->nbytes, s->device, s->tag);
  e->ram = NULL;
  e->item = it;
  e->has_item = true;
  return ZT_OK;
}

/* The checks both calls share: evicted, no restore in flight, the range inside. */
static zt_status check_evicted_range(const zt_storage *s, size_t off, size_t nbytes, const void *buf,
                                     const char *fn) {
  if (!s || (!buf && nbytes)) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: storage or host buffer is NULL", fn);
  char nb[128];
  if (!s->evicted)
    return ZT_ERR(ZT_STATUS_STATE,
                  "%s: storage %s is not evicted to a store; its bytes are %s (read or write them through its "
                  "tensors, zt_tensor_data)",
                  fn, name_of(s, nb), s->released ? "released (re-materialise it first)" : "in memory");
  if (s->evicted->req)
    return ZT_ERR(ZT_STATUS_STATE,
                  "%s: storage %s is being restored from a %s store (zt_storage_restore_async); call zt_storage_wait "
                  "first and use its bytes in memory",
                  fn, name_of(s, nb), zt_store_kind(s->evicted->store));
  if (off > s->nbytes || nbytes > s->nbytes - off)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: bytes [%zu, %zu) are outside storage %s of %zu bytes", fn, off,
                  off + nbytes, name_of(s, nb), s->nbytes);
  return written(s, fn);
}

zt_status zt_storage_read_evicted(const zt_storage *s, size_t off, size_t nbytes, void *dst) {
  ZT_TRY(check_evicted_range(s, off, nbytes, dst, "zt_storage_read_evicted"));
  if (!nbytes) return ZT_OK;
  const struct zt_storage_eviction *e = s->evicted;
  char nb[128];
  if (off == 0 && nbytes == s->nbytes) {
    zt_status st = zt_store_get(e->store, &e->item, ZT_CPU, dst);
    return st ? zt__error_prefix(st, "zt_storage_read_evicted: storage %s", name_of(s, nb)) : ZT_OK;
  }
  size_t es = zt_dtype_size(e->item.dtype);
  if (zt_store_has_ranges(e->store) && off % es == 0 && nbytes % es == 0) { /* the range alone */
    zt_status st = zt_store_get_range(e->store, &e->item, off, nbytes, dst);
    return st ? zt__error_prefix(st, "zt_storage_read_evicted: storage %s", name_of(s, nb)) : ZT_OK;
  }
  void *whole = NULL;
  ZT_TRY(zt_mem_alloc(s->nbytes, ZT_CPU, ZT_MEM_TAG_TEMP, &whole));
  zt_status st = zt_store_get(e->store, &e->item, ZT_CPU, whole);
  if (!st) memcpy(dst, (const char *)whole + off, nbytes);
  zt_mem_free(whole, s->nbytes, ZT_CPU, ZT_MEM_TAG_TEMP);
  return st ? zt__error_prefix(st, "zt_storage_read_evicted: storage %s", name_of(s, nb)) : ZT_OK;
}

zt_status zt_storage_write_evicted(zt_storage *s, size_t off, size_t nbytes, const void *src) {
  ZT_TRY(check_evicted_range(s, off, nbytes, src, "zt_storage_write_evicted"));
  if (!nbytes) return ZT_OK;
  struct zt_storage_eviction *e = s->evicted;
  char nb[128];
  void *whole = NULL;
  const void *from = src;
  zt_status st = ZT_OK;
  if (off != 0 || nbytes != s->nbytes) { /* the store puts whole items: merge into the old contents */
    ZT_TRY(zt_mem_alloc(s->nbytes, ZT_CPU, ZT_MEM_TAG_TEMP, &whole));
    st = zt_store_get(e->store, &e->item, ZT_CPU, whole);
    if (!st) memcpy((char *)whole + off, src, nbytes);
    from = whole;
  }
  zt_store_item fresh;
  if (!st) st = zt_store_put(e->store, ZT_CPU, from, s->nbytes, e->item.dtype, e->item.tag, &fresh);
  if (whole) zt_mem_free(whole, s->nbytes, ZT_CPU, ZT_MEM_TAG_TEMP);
  if (st) return zt__error_prefix(st, "zt_storage_write_evicted: storage %s (its old contents are kept)", name_of(s, nb));
  /* the new copy is in: only now may the old one go */
  zt_store_drop(e->store, &e->item);
  e->item = fresh;
  s->version++;
  return ZT_OK;
}

zt_status zt_storage_write_evicted_in_place(zt_storage *s, size_t off, size_t nbytes, const void *src) {
  const char *fn = "zt_storage_write_evicted_in_place";
  ZT_TRY(check_evicted_range(s, off, nbytes, src, fn));
  if (!nbytes) return ZT_OK;
  struct zt_storage_eviction *e = s->evicted;
  if (!zt_store_has_ranges(e->store)) return zt_storage_write_evicted(s, off, nbytes, src);
  char nb[128];
  zt_status st = zt_store_put_range(e->store, &e->item, off, nbytes, src);
  s->version++; /* new values, or (on failure) some of them */
  return st ? zt__error_prefix(st, "%s: storage %s (bytes [%zu, %zu) may be partly written)", fn, name_of(s, nb), off,
                               off + nbytes)
            : ZT_OK;
}
