/* CPU kernels of the shape ops (src/ops/shape.c) and of zt_cast (src/ops/cast.c).
 * Copies move bytes (2-, 4- or 8-byte elements), so they are exact for every dtype,
 * i64 included; only zt__cpu_cast converts values.
 * Included by: src/ops only (and its test). */
#ifndef ZT_OPS_CPU_SHAPE_H
#define ZT_OPS_CPU_SHAPE_H

#include "core/backend.h"
#include "zt/tensor.h"

/* dst (rows, row_bytes) = src (rows, row_bytes): a 2-D block copy; row r starts at
 * dst + r * dst_pitch and src + r * src_pitch (pitches in bytes). Blocks must not
 * overlap. cat, split and narrow (and their grads) are all this copy with
 * rows = prod(shape[:dim]). */
void zt__cpu_copy_rows(void *dst, int64_t dst_pitch, const void *src, int64_t src_pitch, int64_t rows,
                       int64_t row_bytes);

/* dst (shape of src, contiguous) = src (any strides, same dtype). Dims are merged
 * where the strides allow; when the source's unit-stride dim is not its last (a
 * transposed view), the copy goes in 32x32 tiles so that reads and writes both stay
 * in cache. */
void zt__cpu_to_contiguous(const zt_tensor *src, zt_tensor *dst);

/* dst (n) of dtype ddt = src (n) of dtype sdt, both contiguous: zt__host_cast
 * (src/core/cast.c), the one home of dtype conversion. */
#define zt__cpu_cast(src, sdt, dst, ddt, n) zt__host_cast((dst), (ddt), (src), (sdt), (n))

#endif
