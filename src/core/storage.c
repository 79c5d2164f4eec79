/* Refcounted storage. Bytes may be released and re-made while the object (and every
 * tensor viewing it) lives on; that is how FSDP reshards. Or moved to a store and back
 * with their contents (evict / restore), which is how model offload streams parameters.
 * Invariants: an evicted storage is released (data NULL, or being filled by a restore in
 * flight) and its store holds the contents until the restore completes or the storage is
 * freed; only the thread that calls these functions changes the storage object. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "zt/store.h"
#include "zt/tensor.h"

struct zt_storage_eviction {
  zt_store *store;
  zt_store_item item;
  zt_store_request *req; /* a restore in flight: data is allocated and being filled */
};

static uint64_t next_id(void) {
  static uint64_t counter = 0;
  return __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
}

zt_status zt_storage_new(size_t nbytes, zt_device dev, zt_mem_tag tag, zt_storage **out) {
  zt_storage *s = calloc(1, sizeof *s);
  if (!s) return ZT_ERR(ZT_STATUS_OOM, "out of host memory for a storage object");
  s->nbytes = nbytes;
  s->device = dev;
  s->tag = tag;
  s->refcount = 1;
  s->id = next_id();
  zt_status st = zt_mem_alloc(nbytes, dev, tag, &s->data);
  if (st) {
    free(s);
    return st;
  }
  *out = s;
  return ZT_OK;
}

zt_status zt_storage_wrap(void *data, size_t nbytes, zt_device dev, zt_storage **out) {
  zt_storage *s = calloc(1, sizeof *s);
  if (!s) return ZT_ERR(ZT_STATUS_OOM, "out of host memory for a storage object");
  s->data = data;
  s->nbytes = nbytes;
  s->device = dev;
  s->tag = ZT_MEM_TAG_TEMP;
  s->refcount = 1;
  s->id = next_id();
  s->external = true;
  *out = s;
  return ZT_OK;
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
  if (!s->external && !s->released) zt_mem_free(s->data, s->nbytes, s->device, s->tag);
  free(s);
}

zt_status zt_storage_release(zt_storage *s) {
  if (!s) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_storage_release: storage is NULL");
  if (s->external) return ZT_ERR(ZT_STATUS_STATE, "zt_storage_release: cannot release wrapped (external) memory");
  if (s->released) return ZT_OK;
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

zt_status zt_storage_evict(zt_storage *s, zt_store *store, zt_dtype dtype) {
  if (!s || !store) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_storage_evict: storage or store is NULL");
  char nb[128];
  if (s->evicted)
    return ZT_ERR(ZT_STATUS_STATE, "zt_storage_evict: storage %s is evicted already (to a %s store); restore it first",
                  name_of(s, nb), zt_store_kind(s->evicted->store));
  if (s->external)
    return ZT_ERR(ZT_STATUS_STATE, "zt_storage_evict: storage %s wraps memory it does not own; it cannot be evicted",
                  name_of(s, nb));
  if (s->released)
    return ZT_ERR(ZT_STATUS_RELEASED,
                  "zt_storage_evict: storage %s has no bytes (released by a reshard or offload); re-materialise and "
                  "fill it first",
                  name_of(s, nb));
  struct zt_storage_eviction *e = calloc(1, sizeof *e);
  if (!e) return ZT_ERR(ZT_STATUS_OOM, "zt_storage_evict: out of host memory");
  e->store = store;
  zt_status st = zt_store_put(store, s->device, s->data, s->nbytes, dtype, s->tag, &e->item);
  if (st) {
    free(e);
    return zt__error_prefix(st, "zt_storage_evict: storage %s", name_of(s, nb));
  }
  zt_mem_free(s->data, s->nbytes, s->device, s->tag);
  s->data = NULL;
  s->released = true;
  s->evicted = e;
  return ZT_OK;
}

/* The store's copy dropped, the record freed: s is what release left (or restore made). */
static void eviction_free(zt_storage *s) {
  zt_store_drop(s->evicted->store, &s->evicted->item);
  free(s->evicted);
  s->evicted = NULL;
}

/* s is being freed while evicted: a restore in flight is cancelled and its bytes freed. */
static void eviction_end(zt_storage *s) {
  if (s->evicted->req) {
    zt_store_cancel(s->evicted->req);
    zt_mem_free(s->data, s->nbytes, s->device, s->tag);
    s->data = NULL;
  }
  eviction_free(s);
}

zt_status zt_storage_restore_async(zt_storage *s) {
  if (!s) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_storage_restore_async: storage is NULL");
  struct zt_storage_eviction *e = s->evicted;
  if (!e || e->req) return ZT_OK;
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
  eviction_free(s);
  return ZT_OK;
}

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
  return ZT_OK;
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
