/* The one bounded host buffer through which checkpoint files pass the bytes of evicted
 * storages (zt_storage_read_evicted / zt_storage_write_evicted), so that saving or loading a
 * model whose state lives in a store needs RAM for its largest evicted storage, never a
 * restore; and the finiteness check of loaded values, which reads evicted tensors back
 * through such a buffer. Invariant: a view made here aliases the buffer (a wrapped cpu
 * storage) and is freed before the buffer is reused. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/tensor_internal.h"
#include "io/bounce.h"
#include "zt/autograd.h"
#include "zt/ops.h"
#include "zt/store.h"

zt_status zt__bounce_init(zt__bounce *st, int n, zt_tensor *const *ts) {
  *st = (zt__bounce){0};
  size_t cap = 0;
  for (int i = 0; i < n; i++)
    if (ts[i] && zt_storage_is_evicted(ts[i]->storage) && zt_tensor_numel(ts[i]) > 0 &&
        ts[i]->storage->nbytes > cap)
      cap = ts[i]->storage->nbytes;
  if (!cap) return ZT_OK;
  ZT_TRY(zt_mem_alloc(cap, ZT_CPU, ZT_MEM_TAG_TEMP, &st->buf));
  st->cap = cap;
  return ZT_OK;
}

void zt__bounce_free(zt__bounce *st) {
  if (st->buf) zt_mem_free(st->buf, st->cap, ZT_CPU, ZT_MEM_TAG_TEMP);
  *st = (zt__bounce){0};
}

bool zt__bounce_covers(const zt_tensor *t) {
  return t->offset == 0 && zt_tensor_is_contiguous(t) && zt_tensor_nbytes(t) == t->storage->nbytes;
}

zt_status zt__bounce_view(zt__bounce *st, const zt_tensor *t, bool read, zt_tensor **view) {
  *view = NULL;
  zt_storage *s = t->storage;
  ZT_ASSERT(zt_storage_is_evicted(s) && s->nbytes <= st->cap); /* zt__bounce_init sized it for t */
  bool held = st->held_id == s->id && st->held_version == s->version;
  st->held_id = 0; /* until read (the caller may write into the view) */
  if (read && !held) ZT_TRY(zt_storage_read_evicted(s, 0, s->nbytes, st->buf));
  if (read) st->held_id = s->id, st->held_version = s->version;
  zt_storage *w = NULL;
  ZT_TRY(zt_storage_wrap(st->buf, s->nbytes, ZT_CPU, &w));
  zt_status r = zt__tensor_new_view(w, t->offset, t->ndim, t->shape, t->stride, t->dtype, view);
  zt_storage_release_ref(w); /* the view holds it */
  return r;
}

zt_status zt__bounce_store(zt__bounce *st, zt_tensor *t) {
  st->held_id = 0;
  ZT_TRY(zt_storage_write_evicted(t->storage, 0, t->storage->nbytes, st->buf));
  st->held_id = t->storage->id, st->held_version = t->storage->version; /* the buffer is what was written */
  return ZT_OK;
}

/* Where t's elements [lo, lo + n) lie in its storage, in bytes. */
static void byte_range(const zt_tensor *t, int64_t lo, int64_t n, size_t *off, size_t *nbytes) {
  size_t el = zt_dtype_size(t->dtype);
  *off = (size_t)(t->offset + lo) * el;
  *nbytes = (size_t)n * el;
}

zt_status zt__tensor_read_range(const zt_tensor *t, int64_t lo, int64_t n, void *host_dst) {
  if (n <= 0) return ZT_OK;
  if (zt_storage_is_evicted(t->storage)) {
    size_t off, nb;
    byte_range(t, lo, n, &off, &nb);
    return zt_storage_read_evicted(t->storage, off, nb, host_dst);
  }
  void *unused = NULL;
  ZT_TRY(zt_tensor_data(t, &unused)); /* refuses released storage */
  zt__dev_read_range(t, lo, n, host_dst);
  return ZT_OK;
}

zt_status zt__tensor_write_range(zt_tensor *t, int64_t lo, int64_t n, const void *host_src) {
  if (n <= 0) return ZT_OK;
  if (zt_storage_is_evicted(t->storage)) {
    size_t off, nb;
    byte_range(t, lo, n, &off, &nb);
    return zt_storage_write_evicted(t->storage, off, nb, host_src); /* bumps the version */
  }
  void *unused = NULL;
  ZT_TRY(zt_tensor_data(t, &unused));
  zt__dev_write_range(t, lo, n, host_src);
  zt_tensor_bump_version(t);
  return ZT_OK;
}

/* A resident tensor: the sum says whether all is finite (any device); the first bad element
 * is looked for only when it is not. */
static zt_status check_one(zt_tensor *t, const char *name, const char *what) {
  zt_tensor *sum = NULL;
  ZT_TRY(zt_sum(t, 0, NULL, false, &sum));
  double v = zt_tensor_get(sum, 0);
  zt_tensor_free(sum);
  if (isfinite(v)) return ZT_OK;
  int64_t ne = zt_tensor_numel(t), at = 0;
  while (at < ne && isfinite(zt_tensor_get(t, at))) at++; /* the first bad element, for the message */
  return ZT_ERR(ZT_STATUS_INVALID_ARG,
                "%s: tensor '%s' holds %s (element %lld of %lld): the file is damaged or was written by a run that "
                "diverged; use another checkpoint",
                what, name, at < ne ? (isnan(zt_tensor_get(t, at)) ? "NaN" : "inf") : "values whose sum overflows",
                (long long)(at < ne ? at : 0), (long long)ne);
}

zt_status zt__tensors_check_finite(int n, zt_tensor *const *ts, const char *const *names, const char *what) {
  zt__bounce st;
  ZT_TRY(zt__bounce_init(&st, n, ts));
  bool prev = zt_set_grad_enabled(false);
  zt_status s = ZT_OK;
  for (int i = 0; i < n && !s; i++) {
    if (!zt_storage_is_evicted(ts[i]->storage) || zt_tensor_numel(ts[i]) == 0) {
      s = check_one(ts[i], names[i], what);
      continue;
    }
    /* evicted: its bytes are read back into the stage and checked there, never restored */
    zt_tensor *v = NULL;
    s = zt__bounce_view(&st, ts[i], true, &v);
    if (!s) s = check_one(v, names[i], what);
    zt_tensor_free(v);
  }
  zt_set_grad_enabled(prev);
  zt__bounce_free(&st);
  return s;
}
