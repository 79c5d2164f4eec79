/* The memory stores: a lossless copy in host memory ("memory") and one with f32/f64 rounded
 * to bf16 ("bf16"). Held bytes come from the allocator on cpu under the item's tag, so
 * they show in the memory table as what they hold. Neither has state: ctx is NULL. */
#include <string.h>

#include "core/status_internal.h"
#include "store_internal.h"

/* Round to nearest even, NaN kept quiet: the rule of zt_f32_to_bf16, inlined for speed. */
static inline uint16_t bf16_of(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float f32_of_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* src (n elements of f32 or f64) = bf16 into dst. f64 rounds to f32 first. Runs on the
 * caller's thread (put), so it may use the OpenMP pool. */
static void bf16_compress(const void *src, zt_dtype dt, uint16_t *dst, int64_t n) {
  if (dt == ZT_DTYPE_F32) {
    const float *s = src;
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
    for (int64_t i = 0; i < n; i++) dst[i] = bf16_of(s[i]);
  } else {
    const double *s = src;
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
    for (int64_t i = 0; i < n; i++) dst[i] = bf16_of((float)s[i]);
  }
}

/* Also runs on the helper thread: no OpenMP here (it would start a second pool). */
static void bf16_expand(const uint16_t *src, zt_dtype dt, void *dst, int64_t n) {
  if (dt == ZT_DTYPE_F32) {
    float *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = f32_of_bf16(src[i]);
  } else {
    double *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = f32_of_bf16(src[i]);
  }
}

static zt_status memory_put(void *ctx, const void *src, zt_store_item *it) {
  (void)ctx;
  it->held = it->nbytes;
  ZT_TRY(zt_mem_alloc(it->held, ZT_CPU, it->tag, &it->ptr));
  memcpy(it->ptr, src, it->held);
  return ZT_OK;
}

/* f32 and f64 become bf16; bf16, f16 and integers are no wider or must not round, so they
 * are copied as they are. */
static zt_status bf16_put(void *ctx, const void *src, zt_store_item *it) {
  if (it->dtype != ZT_DTYPE_F32 && it->dtype != ZT_DTYPE_F64) return memory_put(ctx, src, it);
  int64_t n = (int64_t)(it->nbytes / zt_dtype_size(it->dtype));
  it->compressed = true;
  it->held = (size_t)n * 2;
  ZT_TRY(zt_mem_alloc(it->held, ZT_CPU, it->tag, &it->ptr));
  bf16_compress(src, it->dtype, it->ptr, n);
  return ZT_OK;
}

static zt_status memory_get(void *ctx, const zt_store_item *it, void *dst) {
  (void)ctx;
  if (it->compressed) bf16_expand(it->ptr, it->dtype, dst, (int64_t)(it->nbytes / zt_dtype_size(it->dtype)));
  else memcpy(dst, it->ptr, it->nbytes);
  return ZT_OK;
}

/* Ranges: whole elements (zt_store_get_range checks), so a compressed item's range is
 * elements [off / size, (off + n) / size) of its bf16 copy. */
static zt_status memory_get_range(void *ctx, const zt_store_item *it, size_t off, size_t n, void *dst) {
  (void)ctx;
  if (!it->compressed) {
    memcpy(dst, (const char *)it->ptr + off, n);
    return ZT_OK;
  }
  size_t es = zt_dtype_size(it->dtype);
  bf16_expand((const uint16_t *)it->ptr + off / es, it->dtype, dst, (int64_t)(n / es));
  return ZT_OK;
}

static zt_status memory_put_range(void *ctx, const zt_store_item *it, size_t off, size_t n, const void *src) {
  (void)ctx;
  if (!it->compressed) {
    memcpy((char *)it->ptr + off, src, n);
    return ZT_OK;
  }
  size_t es = zt_dtype_size(it->dtype);
  bf16_compress(src, it->dtype, (uint16_t *)it->ptr + off / es, (int64_t)(n / es));
  return ZT_OK;
}

static void memory_drop(void *ctx, const zt_store_item *it) {
  (void)ctx;
  zt_mem_free(it->ptr, it->held, ZT_CPU, it->tag);
}

static const zt_store_ops memory_ops = {"memory", memory_put, memory_get, memory_drop, NULL, NULL, memory_get_range,
                                        memory_put_range};
static const zt_store_ops bf16_ops = {"bf16", bf16_put, memory_get, memory_drop, NULL, NULL, memory_get_range,
                                      memory_put_range};

/* memory: put is a memcpy, fine on the helper (write behind); bf16's put compresses with
 * OpenMP, which the helper must not start: it stays on the caller's thread */
zt_status zt_store_memory_new(zt_store **out) {
  ZT_TRY(zt_store_new(&memory_ops, NULL, ZT_CPU, out));
  (*out)->helper_put = true;
  return ZT_OK;
}
zt_status zt_store_bf16_new(zt_store **out) { return zt_store_new(&bf16_ops, NULL, ZT_CPU, out); }
