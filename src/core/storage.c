/* Refcounted storage. Bytes may be released and re-made while the object (and every
 * tensor viewing it) lives on; that is how FSDP reshards and offload evicts. */
#include <stdlib.h>

#include "core/status_internal.h"
#include "zt/tensor.h"

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

void zt_storage_release_ref(zt_storage *s) {
  if (!s) return;
  ZT_ASSERT(s->refcount > 0);
  if (__atomic_sub_fetch(&s->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
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
