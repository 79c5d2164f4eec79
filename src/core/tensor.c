/* Tensors: strided views over refcounted storage. A tensor struct has one owner;
 * zt_tensor_free drops its storage reference and its autograd references (through a
 * release hook the autograd layer installs, so core does not call up into autograd). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tensor_internal.h"
#include "zt/tensor.h"
#include "backend.h"

void (*zt__tensor_autograd_release)(zt_tensor *t) = NULL;
bool (*zt__grad_mode_query)(void) = NULL;

static zt_status check_shape(int ndim, const int64_t *shape, const char *fn) {
  if (ndim < 0 || ndim > ZT_MAX_DIMS)
    return ZT_ERR(ZT_STATUS_SHAPE, "%s: %d dims requested; tensors have 0 to %d dims", fn, ndim, ZT_MAX_DIMS);
  if (ndim > 0 && !shape) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: shape is NULL for a %d-dim tensor", fn, ndim);
  for (int i = 0; i < ndim; i++)
    if (shape[i] < 0) return ZT_ERR(ZT_STATUS_SHAPE, "%s: negative size %lld in dim %d", fn, (long long)shape[i], i);
  return ZT_OK;
}

static int64_t shape_numel(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  return n;
}

/* Byte size of a (checked) shape; overflow is an error rather than a wrap-around. */
static zt_status shape_nbytes(int ndim, const int64_t *shape, zt_dtype dt, const char *fn, size_t *out) {
  int64_t n = (int64_t)zt_dtype_size(dt);
  for (int i = 0; i < ndim; i++)
    if (__builtin_mul_overflow(n, shape[i], &n)) {
      char b[128];
      return ZT_ERR(ZT_STATUS_SHAPE, "%s: shape %s of %s is too large (its byte size overflows)", fn,
                    zt_shape_str(ndim, shape, b), zt_dtype_name(dt));
    }
  *out = (size_t)n;
  return ZT_OK;
}

void zt__set_contiguous_strides(zt_tensor *t) {
  int64_t s = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    t->stride[i] = s;
    s *= t->shape[i];
  }
}

zt_status zt__tensor_new_view(zt_storage *st, int64_t offset, int ndim, const int64_t *shape, const int64_t *stride,
                              zt_dtype dt, zt_tensor **out) {
  zt_tensor *t = calloc(1, sizeof *t);
  if (!t) return ZT_ERR(ZT_STATUS_OOM, "out of host memory for a tensor struct");
  t->storage = st;
  zt_storage_retain(st);
  t->offset = offset;
  t->ndim = ndim;
  if (ndim > 0) memcpy(t->shape, shape, sizeof(int64_t) * (size_t)ndim);
  if (stride) {
    if (ndim > 0) memcpy(t->stride, stride, sizeof(int64_t) * (size_t)ndim);
  } else
    zt__set_contiguous_strides(t);
  t->dtype = dt;
  *out = t;
  return ZT_OK;
}

void zt__tensor_rebind(zt_tensor *t, zt_storage *st, int64_t offset) {
  ZT_ASSERT(t && st && offset >= 0);
  ZT_ASSERT((size_t)(offset + zt_tensor_numel(t)) * zt_dtype_size(t->dtype) <= st->nbytes);
  zt_storage_retain(st);
  zt_storage_release_ref(t->storage);
  t->storage = st;
  t->offset = offset;
  zt__set_contiguous_strides(t);
}

zt_status zt_tensor_empty_tagged(int ndim, const int64_t *shape, zt_dtype dt, zt_device dev, zt_mem_tag tag,
                                 zt_tensor **out) {
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_tensor_empty: out is NULL");
  ZT_TRY(check_shape(ndim, shape, "zt_tensor_empty"));
  if (!zt_dtype_valid(dt))
    return ZT_ERR(ZT_STATUS_DTYPE, "zt_tensor_empty: unknown dtype %d: use a zt_dtype value such as ZT_DTYPE_F32",
                  (int)dt);
  if (!zt__backend_get(dev.type)) {
    char d[16];
    return ZT_ERR(ZT_STATUS_DEVICE, "zt_tensor_empty: no compute backend for device %s in this build",
                  zt_device_str(dev, d));
  }
  size_t nbytes = 0;
  ZT_TRY(shape_nbytes(ndim, shape, dt, "zt_tensor_empty", &nbytes));
  zt_storage *st;
  ZT_TRY(zt_storage_new(nbytes, dev, tag, &st));
  zt_status s = zt__tensor_new_view(st, 0, ndim, shape, NULL, dt, out);
  zt_storage_release_ref(st);
  return s;
}

zt_status zt_tensor_empty(int ndim, const int64_t *shape, zt_dtype dt, zt_device dev, zt_tensor **out) {
  return zt_tensor_empty_tagged(ndim, shape, dt, dev, zt_mem_tag_current(), out);
}

zt_status zt_tensor_zeros(int ndim, const int64_t *shape, zt_dtype dt, zt_device dev, zt_tensor **out) {
  ZT_TRY(zt_tensor_empty(ndim, shape, dt, dev, out));
  zt__dev_fill(*out, 0.0);
  return ZT_OK;
}

zt_status zt_tensor_full(int ndim, const int64_t *shape, zt_dtype dt, zt_device dev, double value, zt_tensor **out) {
  ZT_TRY(zt_tensor_empty(ndim, shape, dt, dev, out));
  zt__dev_fill(*out, value);
  return ZT_OK;
}

zt_status zt_tensor_from_data(int ndim, const int64_t *shape, zt_dtype dt, const void *data, zt_tensor **out) {
  if (!data) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_tensor_from_data: data is NULL");
  ZT_TRY(zt_tensor_empty(ndim, shape, dt, ZT_CPU, out));
  zt__dev_write(*out, data, zt_tensor_nbytes(*out));
  return ZT_OK;
}

void zt_tensor_free(zt_tensor *t) {
  if (!t) return;
  if ((t->grad_fn || t->grad_acc) && zt__tensor_autograd_release) zt__tensor_autograd_release(t);
  zt_tensor_free(t->grad);
  zt_storage_release_ref(t->storage);
  free(t);
}

int64_t zt_tensor_numel(const zt_tensor *t) { return shape_numel(t->ndim, t->shape); }
size_t zt_tensor_nbytes(const zt_tensor *t) { return (size_t)zt_tensor_numel(t) * zt_dtype_size(t->dtype); }
zt_device zt_tensor_device(const zt_tensor *t) { return t->storage->device; }
bool zt_tensor_is_leaf(const zt_tensor *t) { return t->grad_fn == NULL; }

bool zt_tensor_is_contiguous(const zt_tensor *t) {
  int64_t s = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->shape[i] != 1 && t->stride[i] != s) return false;
    s *= t->shape[i];
  }
  return true;
}

bool zt_shape_equal(int na, const int64_t *a, int nb, const int64_t *b) {
  if (na != nb) return false;
  for (int i = 0; i < na; i++)
    if (a[i] != b[i]) return false;
  return true;
}

/* Never overflows buf: a shape too long for 128 bytes ends in "...)". */
const char *zt_shape_str(int ndim, const int64_t *shape, char *buf) {
  char tmp[ZT_MAX_DIMS * 24 + 8];
  size_t len = 0;
  if (ndim < 0 || ndim > ZT_MAX_DIMS) {
    snprintf(buf, 128, "(invalid ndim %d)", ndim);
    return buf;
  }
  tmp[len++] = '(';
  for (int i = 0; i < ndim; i++)
    len += (size_t)snprintf(tmp + len, sizeof tmp - len, i ? ", %lld" : "%lld", (long long)shape[i]);
  snprintf(tmp + len, sizeof tmp - len, ndim == 1 ? ",)" : ")");
  if (strlen(tmp) < 128) {
    memcpy(buf, tmp, strlen(tmp) + 1);
  } else {
    memcpy(buf, tmp, 123);
    memcpy(buf + 123, "...)", 5);
  }
  return buf;
}

zt_status zt_tensor_data(const zt_tensor *t, void **out) {
  if (!t || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_tensor_data: tensor or out is NULL");
  if (t->storage->evicted) return zt__storage_evicted_error(t, "reading tensor data");
  if (t->storage->released)
    return ZT_ERR(ZT_STATUS_RELEASED,
                  "tensor data was released (its storage was freed by a reshard or an offload); "
                  "re-materialise the storage (zt_storage_rematerialize and refill) before reading it");
  *out = (char *)t->storage->data + t->offset * (int64_t)zt_dtype_size(t->dtype);
  return ZT_OK;
}

void *zt__tensor_ptr(const zt_tensor *t) {
  ZT_ASSERT(!t->storage->released);
  return (char *)t->storage->data + t->offset * (int64_t)zt_dtype_size(t->dtype);
}

zt_status zt_tensor_alias(const zt_tensor *t, zt_tensor **out) {
  if (!t || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_tensor_alias: tensor or out is NULL");
  ZT_TRY(zt__tensor_new_view(t->storage, t->offset, t->ndim, t->shape, t->stride, t->dtype, out));
  (*out)->is_view = t->is_view;
  return ZT_OK;
}

/* ------------------------------------------------ element access and strided copy */
double zt__load(zt_dtype dt, const void *p, int64_t i) {
  switch (dt) {
  case ZT_DTYPE_F32: return ((const float *)p)[i];
  case ZT_DTYPE_F64: return ((const double *)p)[i];
  case ZT_DTYPE_BF16: return zt_bf16_to_f32(((const uint16_t *)p)[i]);
  case ZT_DTYPE_F16: return zt_f16_to_f32(((const uint16_t *)p)[i]);
  case ZT_DTYPE_I32: return ((const int32_t *)p)[i];
  case ZT_DTYPE_I64: return (double)((const int64_t *)p)[i];
  default: ZT_ASSERT(0 && "bad dtype");
  }
  return 0;
}

/* double -> integer without undefined behaviour: NaN gives 0, out-of-range values
 * saturate, the rest truncate toward zero (as a C cast would). */
static int64_t sat_i64(double v, double lo, double hi) {
  if (v != v) return 0;
  if (v <= lo) return (int64_t)lo;
  if (v >= hi) return (int64_t)hi;
  return (int64_t)v;
}

void zt__store(zt_dtype dt, void *p, int64_t i, double v) {
  switch (dt) {
  case ZT_DTYPE_F32: ((float *)p)[i] = (float)v; break;
  case ZT_DTYPE_F64: ((double *)p)[i] = v; break;
  case ZT_DTYPE_BF16: ((uint16_t *)p)[i] = zt_f32_to_bf16((float)v); break;
  case ZT_DTYPE_F16: ((uint16_t *)p)[i] = zt_f32_to_f16((float)v); break;
  case ZT_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)sat_i64(v, -2147483648.0, 2147483647.0); break;
  /* 2^63 is not an int64; the largest double below it is 2^63 - 1024 */
  case ZT_DTYPE_I64: ((int64_t *)p)[i] = sat_i64(v, -9223372036854775808.0, 9223372036854774784.0); break;
  default: ZT_ASSERT(0 && "bad dtype");
  }
}

/* Bad reads are user errors, not broken invariants: NaN and a message, no abort. */
double zt_tensor_get(const zt_tensor *t, int64_t i) {
  void *p;
  if (zt_tensor_data(t, &p)) return NAN;
  if (i < 0 || i >= zt_tensor_numel(t)) {
    ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_tensor_get: index %lld out of range for %lld elements", (long long)i,
           (long long)zt_tensor_numel(t));
    return NAN;
  }
  union {
    double d;
    int64_t i;
  } e; /* one element of any dtype, read back through t's backend */
  zt__dev_read_range(t, zt__strided_index(t, i), 1, &e);
  return zt__load(t->dtype, &e, 0);
}

zt_status zt_tensor_set(zt_tensor *t, int64_t i, double v) {
  void *p;
  ZT_TRY(zt_tensor_data(t, &p));
  ZT_TRY(zt__check_inplace(t, "zt_tensor_set"));
  if (i < 0 || i >= zt_tensor_numel(t))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_tensor_set: index %lld out of range for %lld elements", (long long)i,
                  (long long)zt_tensor_numel(t));
  union {
    double d;
    int64_t i;
  } e;
  zt__store(t->dtype, &e, 0, v);
  zt__dev_write_range(t, zt__strided_index(t, i), 1, &e);
  zt_tensor_bump_version(t);
  return ZT_OK;
}

void zt_tensor_bump_version(zt_tensor *t) { t->storage->version++; }

zt_status zt_tensor_clone_data(const zt_tensor *t, zt_mem_tag tag, zt_tensor **out) {
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_tensor_clone_data: out is NULL");
  void *p;
  ZT_TRY(zt_tensor_data(t, &p));
  ZT_TRY(zt_tensor_empty_tagged(t->ndim, t->shape, t->dtype, zt_tensor_device(t), tag, out));
  zt_status s = zt__dev_copy(*out, t);
  if (s) zt_tensor_free(*out), *out = NULL;
  return s;
}

zt_status zt__check_inplace(const zt_tensor *t, const char *fn) {
  if (t->requires_grad && zt__grad_mode_query && zt__grad_mode_query())
    return ZT_ERR(ZT_STATUS_AUTOGRAD,
                  "%s: a tensor that requires grad is used in an in-place operation while grad mode is on; "
                  "do it under zt_set_grad_enabled(false) (as optimizers and init do)",
                  fn);
  return ZT_OK;
}

zt_status zt_tensor_copy_(zt_tensor *dst, const zt_tensor *src) {
  if (!dst || !src) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_tensor_copy_: NULL tensor");
  if (!zt_shape_equal(dst->ndim, dst->shape, src->ndim, src->shape)) {
    char a[128], b[128];
    return ZT_ERR(ZT_STATUS_SHAPE, "zt_tensor_copy_: shapes differ: destination %s, source %s",
                  zt_shape_str(dst->ndim, dst->shape, a), zt_shape_str(src->ndim, src->shape, b));
  }
  ZT_TRY(zt__check_inplace(dst, "zt_tensor_copy_"));
  void *p;
  ZT_TRY(zt_tensor_data(dst, &p));
  ZT_TRY(zt_tensor_data(src, &p));
  ZT_TRY(zt__dev_copy(dst, src)); /* across devices too, staged through the host */
  zt_tensor_bump_version(dst);
  return ZT_OK;
}

zt_status zt_tensor_fill_(zt_tensor *t, double value) {
  if (!t) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_tensor_fill_: tensor is NULL");
  ZT_TRY(zt__check_inplace(t, "zt_tensor_fill_"));
  void *p;
  ZT_TRY(zt_tensor_data(t, &p));
  zt__dev_fill(t, value);
  zt_tensor_bump_version(t);
  return ZT_OK;
}

zt_status zt_tensor_set_requires_grad(zt_tensor *t, bool requires_grad) {
  if (!t) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_tensor_set_requires_grad: tensor is NULL");
  if (t->grad_fn)
    return ZT_ERR(ZT_STATUS_AUTOGRAD,
                  "requires_grad can only be changed on leaf tensors; this tensor was computed by an op "
                  "(detach it with zt_tensor_alias first)");
  if (requires_grad && !zt_dtype_is_float(t->dtype))
    return ZT_ERR(ZT_STATUS_DTYPE, "only floating-point tensors can require grad (this one is %s)",
                  zt_dtype_name(t->dtype));
  t->requires_grad = requires_grad;
  return ZT_OK;
}
