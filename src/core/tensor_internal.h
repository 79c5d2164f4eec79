/* Internal helpers of the core layer shared with ops and autograd.
 * Included by: src/core, autograd, ops, nn and the layers above them, and tests. */
#ifndef ZT_CORE_TENSOR_INTERNAL_H
#define ZT_CORE_TENSOR_INTERNAL_H

#include "zt/tensor.h"
#include "core/status_internal.h"

/* The ZT_STATUS_RELEASED error for reading t while its storage is evicted to a store (or
 * being restored from one), naming the tensor; where says who read it ("op 'add': input
 * 0"). Every reader that finds storage->released asks this first when storage->evicted. */
ZT_NODISCARD zt_status zt__storage_evicted_error(const zt_tensor *t, const char *where);
/* A storage that owns data: nbytes allocated with zt_mem_alloc on dev under tag, freed (and
 * unaccounted) with the storage. On failure (out of host memory) data stays the caller's. */
ZT_NODISCARD zt_status zt__storage_adopt(void *data, size_t nbytes, zt_device dev, zt_mem_tag tag, zt_storage **out);

/* zt_tensor_data for code that has already checked (asserts). */
void *zt__tensor_ptr(const zt_tensor *t);

/* Installed by the autograd layer: drop grad_fn / accumulator references of t. */
extern void (*zt__tensor_autograd_release)(zt_tensor *t);
/* Installed by the autograd layer: is grad mode on (for in-place checks)? */
extern bool (*zt__grad_mode_query)(void);

ZT_NODISCARD zt_status zt__tensor_new_view(zt_storage *st, int64_t offset, int ndim, const int64_t *shape, const int64_t *stride,
                              zt_dtype dt, zt_tensor **out);
void zt__set_contiguous_strides(zt_tensor *t);
/* Make t a contiguous view of st at offset (elements), keeping its shape, dtype and autograd
 * state (FSDP's flat parameters: the model keeps its tensor objects). st must hold the
 * elements; t's old storage reference is dropped and st retained. */
void zt__tensor_rebind(zt_tensor *t, zt_storage *st, int64_t offset);
/* In-place writes to a tensor that requires grad are refused while grad mode is on
 * (the write would not be recorded); fn names the caller in the message. */
ZT_NODISCARD zt_status zt__check_inplace(const zt_tensor *t, const char *fn);
double zt__load(zt_dtype dt, const void *p, int64_t i);
void zt__store(zt_dtype dt, void *p, int64_t i, double v);

/* Offset (in elements, from t's offset) of logical row-major index i. */
static inline int64_t zt__strided_index(const zt_tensor *t, int64_t i) {
  int64_t off = 0;
  for (int d = t->ndim - 1; d >= 0; d--) {
    int64_t n = t->shape[d];
    off += (i % n) * t->stride[d];
    i /= n;
  }
  return off;
}

#endif
