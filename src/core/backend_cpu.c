/* The cpu backend: host memory (the caching host allocator of alloc.c), byte moves as
 * plain loads and stores, synchronous copies (no streams: every call has finished when it
 * returns). Its numeric helpers are in backend_cpu_math.c, its kernels in src/ops/cpu/. */
#include <string.h>

#include "core/tensor_internal.h"
#include "backend.h"

/* Copies below this many bytes stay on one thread. */
#define PAR_BYTES ((int64_t)ZT_PAR_MIN * 8)

void zt__host_memcpy(void *dst, const void *src, int64_t bytes) {
  if (bytes < PAR_BYTES) {
    if (bytes > 0) memcpy(dst, src, (size_t)bytes);
    return;
  }
  const int64_t chunk = (int64_t)1 << 20;
  int64_t nchunks = (bytes + chunk - 1) / chunk;
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < nchunks; k++) {
    int64_t off = k * chunk, len = bytes - off < chunk ? bytes - off : chunk;
    memcpy((char *)dst + off, (const char *)src + off, (size_t)len);
  }
}

static void cpu_fill(void *ctx, zt_tensor *t, double v) {
  (void)ctx;
  int64_t n = zt_tensor_numel(t);
  if (n == 0) return;
  void *p = zt__tensor_ptr(t);
  if (!zt_tensor_is_contiguous(t)) {
    for (int64_t i = 0; i < n; i++) zt__store(t->dtype, p, zt__strided_index(t, i), v);
  } else if (t->dtype == ZT_DTYPE_F32) {
    float f = (float)v;
    for (int64_t i = 0; i < n; i++) ((float *)p)[i] = f;
  } else if (v == 0.0 && !__builtin_signbit(v)) {
    memset(p, 0, (size_t)n * zt_dtype_size(t->dtype)); /* +0 is all-zero bits in every dtype */
  } else {
    for (int64_t i = 0; i < n; i++) zt__store(t->dtype, p, i, v);
  }
}

/* Copy src -> dst elementwise over any strides; rows along the last dim are memcpy'd
 * when both are unit-stride there and dtypes match. Same-dtype copies move bytes (never
 * through double), so i64 values above 2^53 and NaN payloads survive. */
static void cpu_copy(void *ctx, zt_tensor *dst, const zt_tensor *src) {
  (void)ctx;
  int nd = src->ndim;
  int64_t n = zt_tensor_numel(src);
  if (n == 0) return;
  const char *sp = zt__tensor_ptr(src);
  char *dp = zt__tensor_ptr(dst);
  size_t es = zt_dtype_size(src->dtype);
  bool same = dst->dtype == src->dtype;
  if (same && zt_tensor_is_contiguous(src) && zt_tensor_is_contiguous(dst)) {
    memmove(dp, sp, (size_t)n * es);
    return;
  }
  int64_t inner = nd ? src->shape[nd - 1] : 1;
  int64_t sst = nd ? src->stride[nd - 1] : 1, dst_st = nd ? dst->stride[nd - 1] : 1;
  int64_t rows = n / inner;
  bool fast = same && sst == 1 && dst_st == 1;
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t r = 0; r < rows; r++) {
    int64_t so = 0, doff = 0, rem = r;
    for (int d = nd - 2; d >= 0; d--) {
      int64_t k = rem % src->shape[d];
      rem /= src->shape[d];
      so += k * src->stride[d];
      doff += k * dst->stride[d];
    }
    if (fast) {
      memcpy(dp + doff * (int64_t)es, sp + so * (int64_t)es, (size_t)inner * es);
    } else if (same && es == 4) {
      for (int64_t j = 0; j < inner; j++) ((uint32_t *)dp)[doff + j * dst_st] = ((const uint32_t *)sp)[so + j * sst];
    } else if (same && es == 8) {
      for (int64_t j = 0; j < inner; j++) ((uint64_t *)dp)[doff + j * dst_st] = ((const uint64_t *)sp)[so + j * sst];
    } else if (same && es == 2) {
      for (int64_t j = 0; j < inner; j++) ((uint16_t *)dp)[doff + j * dst_st] = ((const uint16_t *)sp)[so + j * sst];
    } else {
      for (int64_t j = 0; j < inner; j++)
        zt__store(dst->dtype, dp, doff + j * dst_st, zt__load(src->dtype, sp, so + j * sst));
    }
  }
}

static void cpu_cast(void *ctx, void *dst, zt_dtype ddt, const void *src, zt_dtype sdt, int64_t n) {
  (void)ctx;
  zt__host_cast(dst, ddt, src, sdt, n);
}

static void cpu_write(void *ctx, void *dst, const void *host_src, size_t bytes, zt__stream *stream) {
  (void)ctx, (void)stream;
  zt__host_memcpy(dst, host_src, (int64_t)bytes);
}

static void cpu_read(void *ctx, void *host_dst, const void *src, size_t bytes, zt__stream *stream) {
  (void)ctx, (void)stream;
  zt__host_memcpy(host_dst, src, (int64_t)bytes);
}

static void cpu_move(void *ctx, void *dst, const void *src, size_t bytes, zt__stream *stream) {
  (void)ctx, (void)stream;
  if (bytes) memmove(dst, src, bytes);
}

/* backend_cpu_math.c */
void zt__cpu_add_into(void *ctx, zt_tensor *dst, const zt_tensor *src);
void zt__cpu_scale_tensor(void *ctx, zt_tensor *t, double s);
void zt__cpu_add_div(void *ctx, zt_tensor *dst, const zt_tensor *src, double div);
void zt__cpu_sum_to_shape(void *ctx, const zt_tensor *g, zt_tensor *out);
double zt__cpu_sum_squares(void *ctx, const zt_tensor *t, int64_t lo, int64_t n);
void zt__cpu_adamw(void *ctx, zt_tensor *w, const zt_tensor *g, zt_tensor *m, zt_tensor *v, const zt__optim_update *u);
void zt__cpu_sgd(void *ctx, zt_tensor *w, const zt_tensor *g, zt_tensor *buf, const zt__optim_update *u);

const zt__backend zt__cpu_backend = {
    .name = "cpu",
    .type = ZT_DEVICE_CPU,
    .kernel_type = ZT_DEVICE_CPU,
    .host_accessible = true,
    .alloc = zt__host_alloc,
    .free = zt__host_free,
    .fill = cpu_fill,
    .copy = cpu_copy,
    .cast = cpu_cast,
    .write = cpu_write,
    .read = cpu_read,
    .move = cpu_move,
    .add_into = zt__cpu_add_into,
    .scale = zt__cpu_scale_tensor,
    .add_div = zt__cpu_add_div,
    .sum_to_shape = zt__cpu_sum_to_shape,
    .sum_squares = zt__cpu_sum_squares,
    .adamw = zt__cpu_adamw,
    .sgd = zt__cpu_sgd,
};
