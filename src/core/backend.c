/* The backend registry (one backend per device type; cpu built in, others registered) and
 * the zt__dev_* calls through which code outside the kernels moves tensor bytes. Copies
 * across devices are staged through a host buffer: read from one backend, write with the
 * other. */
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "backend.h"
#include "tensor_internal.h"

static const zt__backend *g_backends[ZT_DEVICE_TYPE_COUNT] = {[ZT_DEVICE_CPU] = &zt__cpu_backend};

const zt__backend *zt__backend_get(zt_device_type type) {
  if ((int)type < 0 || type >= ZT_DEVICE_TYPE_COUNT) return NULL;
  return __atomic_load_n(&g_backends[type], __ATOMIC_ACQUIRE);
}

zt_status zt__backend_register(zt_device_type type, const zt__backend *b) {
  if ((int)type < 0 || type >= ZT_DEVICE_TYPE_COUNT)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt__backend_register: unknown device type %d", (int)type);
  if (zt__mem_live(type))
    return ZT_ERR(ZT_STATUS_STATE,
                  "zt__backend_register: memory allocated by the current backend of device type %d is still alive; "
                  "free every tensor on that device first",
                  (int)type);
  if (b && (!b->alloc || !b->free || !b->fill || !b->copy || !b->cast || !b->read || !b->write || !b->move ||
            !b->add_into || !b->scale || !b->add_div || !b->sum_to_shape || !b->sum_squares || !b->adamw || !b->sgd))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt__backend_register: backend '%s' leaves a required member NULL",
                  b->name ? b->name : "?");
  __atomic_store_n(&g_backends[type], b, __ATOMIC_RELEASE);
  return ZT_OK;
}

zt_status zt__backend_of(zt_device dev, const char *fn, const zt__backend **out) {
  const zt__backend *b = zt__backend_get(dev.type);
  if (!b) {
    char d[16];
    return ZT_ERR(ZT_STATUS_DEVICE, "%s: no backend for device %s in this build", fn, zt_device_str(dev, d));
  }
  *out = b;
  return ZT_OK;
}

/* The backend of a tensor that exists (its device had one when it was allocated). */
static const zt__backend *be(const zt_tensor *t) {
  const zt__backend *b = zt__backend_get(t->storage->device.type);
  ZT_ASSERT(b);
  return b;
}

void zt__dev_enter(zt_device dev) {
  const zt__backend *b = zt__backend_get(dev.type);
  if (b && b->enter) b->enter(b->ctx);
}

void zt__dev_exit(zt_device dev) {
  const zt__backend *b = zt__backend_get(dev.type);
  if (b && b->exit) b->exit(b->ctx);
}

/* Device address of element i of t (pointer arithmetic only: nothing is touched). */
static void *elem_ptr(const zt_tensor *t, int64_t i) {
  ZT_ASSERT(!t->storage->released);
  return (char *)t->storage->data + (t->offset + i) * (int64_t)zt_dtype_size(t->dtype);
}

void zt__dev_fill(zt_tensor *t, double v) {
  if (zt_tensor_numel(t)) be(t)->fill(be(t)->ctx, t, v);
}

zt_status zt__dev_copy(zt_tensor *dst, const zt_tensor *src) {
  if (!zt_tensor_numel(src)) return ZT_OK;
  if (zt_device_equal(zt_tensor_device(dst), zt_tensor_device(src))) {
    be(dst)->copy(be(dst)->ctx, dst, src);
    return ZT_OK;
  }
  /* across devices: contiguous in src's dtype on the source, host staging, then the
   * destination converts and scatters */
  zt_tensor *a = NULL, *b = NULL;
  zt_status s = ZT_OK;
  if (!zt_tensor_is_contiguous(src)) s = zt_tensor_clone_data(src, ZT_MEM_TAG_TEMP, &a);
  const zt_tensor *cs = a ? a : src;
  bool direct = zt_tensor_is_contiguous(dst) && dst->dtype == src->dtype;
  if (!s && !direct) s = zt_tensor_empty_tagged(src->ndim, src->shape, src->dtype, zt_tensor_device(dst),
                                                ZT_MEM_TAG_TEMP, &b);
  size_t bytes = zt_tensor_nbytes(src);
  void *host = s ? NULL : malloc(bytes);
  if (!s && !host) s = ZT_ERR(ZT_STATUS_OOM, "out of host memory: %zu bytes to stage a copy across devices", bytes);
  if (!s) {
    zt__dev_read(cs, host, bytes);
    zt__dev_write(b ? b : dst, host, bytes);
    if (b) be(dst)->copy(be(dst)->ctx, dst, b);
  }
  free(host);
  zt_tensor_free(a);
  zt_tensor_free(b);
  return s;
}

void zt__dev_read(const zt_tensor *t, void *host_dst, size_t bytes) {
  if (bytes) be(t)->read(be(t)->ctx, host_dst, elem_ptr(t, 0), bytes, NULL);
}

void zt__dev_write(zt_tensor *t, const void *host_src, size_t bytes) {
  if (bytes) be(t)->write(be(t)->ctx, elem_ptr(t, 0), host_src, bytes, NULL);
}

void zt__dev_read_range(const zt_tensor *t, int64_t lo, int64_t n, void *host_dst) {
  if (n > 0) be(t)->read(be(t)->ctx, host_dst, elem_ptr(t, lo), (size_t)n * zt_dtype_size(t->dtype), NULL);
}

void zt__dev_write_range(zt_tensor *t, int64_t lo, int64_t n, const void *host_src) {
  if (n > 0) be(t)->write(be(t)->ctx, elem_ptr(t, lo), host_src, (size_t)n * zt_dtype_size(t->dtype), NULL);
}

void zt__dev_copy_range(zt_tensor *dst, int64_t dlo, const zt_tensor *src, int64_t slo, int64_t n) {
  ZT_ASSERT(dst->dtype == src->dtype && zt_device_equal(zt_tensor_device(dst), zt_tensor_device(src)));
  if (n > 0)
    be(dst)->move(be(dst)->ctx, elem_ptr(dst, dlo), elem_ptr(src, slo), (size_t)n * zt_dtype_size(dst->dtype), NULL);
}

void zt__dev_cast_range(zt_tensor *dst, int64_t dlo, const zt_tensor *src, int64_t slo, int64_t n) {
  ZT_ASSERT(zt_device_equal(zt_tensor_device(dst), zt_tensor_device(src)));
  if (n > 0) be(dst)->cast(be(dst)->ctx, elem_ptr(dst, dlo), dst->dtype, elem_ptr(src, slo), src->dtype, n);
}

void zt__dev_add_into(zt_tensor *dst, const zt_tensor *src) { be(dst)->add_into(be(dst)->ctx, dst, src); }
void zt__dev_scale(zt_tensor *t, double s) { be(t)->scale(be(t)->ctx, t, s); }
void zt__dev_add_div(zt_tensor *dst, const zt_tensor *src, double div) {
  be(dst)->add_div(be(dst)->ctx, dst, src, div);
}
void zt__dev_sum_to_shape(const zt_tensor *g, zt_tensor *out) { be(g)->sum_to_shape(be(g)->ctx, g, out); }
double zt__dev_sum_squares(const zt_tensor *t, int64_t lo, int64_t n) {
  return be(t)->sum_squares(be(t)->ctx, t, lo, n);
}
void zt__dev_adamw(zt_tensor *w, const zt_tensor *g, zt_tensor *m, zt_tensor *v, const zt__optim_update *u) {
  be(w)->adamw(be(w)->ctx, w, g, m, v, u);
}
void zt__dev_sgd(zt_tensor *w, const zt_tensor *g, zt_tensor *buf, const zt__optim_update *u) {
  be(w)->sgd(be(w)->ctx, w, g, buf, u);
}

static const zt__backend *be_of_storage(const zt_storage *s) {
  const zt__backend *b = zt__backend_get(s->device.type);
  ZT_ASSERT(b && !s->released && s->data);
  return b;
}

void zt__dev_storage_read(const zt_storage *s, size_t off, void *host_dst, size_t bytes) {
  ZT_ASSERT(off + bytes <= s->nbytes);
  if (bytes) be_of_storage(s)->read(be_of_storage(s)->ctx, host_dst, (const char *)s->data + off, bytes, NULL);
}

void zt__dev_storage_write(zt_storage *s, size_t off, const void *host_src, size_t bytes) {
  ZT_ASSERT(off + bytes <= s->nbytes);
  if (bytes) be_of_storage(s)->write(be_of_storage(s)->ctx, (char *)s->data + off, host_src, bytes, NULL);
}

void *zt__storage_host_data(const zt_storage *s) {
  const zt__backend *b = zt__backend_get(s->device.type);
  return b && b->host_accessible ? s->data : NULL;
}

void *zt__tensor_host_ptr(const zt_tensor *t) {
  char *p = zt__storage_host_data(t->storage);
  return p ? p + t->offset * (int64_t)zt_dtype_size(t->dtype) : NULL;
}

zt_status zt__tensor_from_host(int ndim, const int64_t *shape, zt_dtype dt, zt_device dev, zt_mem_tag tag,
                               const void *host_src, zt_tensor **out) {
  ZT_TRY(zt_tensor_empty_tagged(ndim, shape, dt, dev, tag, out));
  zt__dev_write(*out, host_src, zt_tensor_nbytes(*out));
  return ZT_OK;
}

zt_status zt__tensor_to_device(const zt_tensor *t, zt_device dev, zt_mem_tag tag, zt_tensor **out) {
  ZT_TRY(zt_tensor_empty_tagged(t->ndim, t->shape, t->dtype, dev, tag, out));
  zt_status s = zt__dev_copy(*out, t);
  if (s) {
    zt_tensor_free(*out);
    *out = NULL;
  }
  return s;
}
