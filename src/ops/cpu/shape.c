/* Kernels of the shape ops and of zt_cast: block copies, strided -> contiguous copies
 * and dtype conversion. Copies move whole elements as 2/4/8-byte words, never through
 * double, so i64 values and NaN payloads survive them unchanged. */
#include <math.h>
#include <string.h>

#include "core/tensor_internal.h"
#include "kernels.h"
#include "shape.h"

/* Copies below this many bytes stay on one thread. */
#define PAR_BYTES ((int64_t)ZT_PAR_MIN * 8)
#define TILE 32

void zt__cpu_copy_rows(void *dst, int64_t dst_pitch, const void *src, int64_t src_pitch, int64_t rows,
                       int64_t row_bytes) {
  if (rows <= 0 || row_bytes <= 0) return;
  char *d = dst;
  const char *s = src;
  if (rows == 1 || (dst_pitch == row_bytes && src_pitch == row_bytes)) {
    zt__host_memcpy(d, s, rows * row_bytes); /* one contiguous block */
    return;
  }
#pragma omp parallel for schedule(static) if (rows * row_bytes > PAR_BYTES)
  for (int64_t r = 0; r < rows; r++) memcpy(d + r * dst_pitch, s + r * src_pitch, (size_t)row_bytes);
}

/* ------------------------------------------------ strided -> contiguous */
/* The source's dims with size-1 dims dropped and row-major-adjacent dims merged: a
 * (4, 8) slice of a (4, 16) tensor stays 2-D, a contiguous tensor becomes 1-D. */
typedef struct collapsed {
  int nd;
  int64_t shape[ZT_MAX_DIMS], stride[ZT_MAX_DIMS];
} collapsed;

static void collapse(const zt_tensor *t, collapsed *c) {
  c->nd = 0;
  for (int d = 0; d < t->ndim; d++) {
    if (t->shape[d] == 1) continue;
    if (c->nd && c->stride[c->nd - 1] == t->stride[d] * t->shape[d]) {
      c->shape[c->nd - 1] *= t->shape[d];
      c->stride[c->nd - 1] = t->stride[d];
    } else {
      c->shape[c->nd] = t->shape[d];
      c->stride[c->nd] = t->stride[d];
      c->nd++;
    }
  }
}

/* dst (c shape, contiguous) = src (c shape, c strides), one typed copy per element
 * size. tiled: the source has unit stride in dim q < last, so walk 32x32 tiles of
 * (q, last): the writes run along dst's rows, the reads along src's rows, and each
 * tile's lines stay in L1. gather: no unit-stride dim at all. */
#define ZT_DEFINE_STRIDED(T, SUF)                                                                   \
  static void tiled_##SUF(const collapsed *c, int q, const T *restrict s, T *restrict d) {           \
    int nd = c->nd, L = nd - 1;                                                                     \
    int64_t ds[ZT_MAX_DIMS], acc = 1;                                                               \
    for (int k = nd - 1; k >= 0; k--) {                                                             \
      ds[k] = acc;                                                                                  \
      acc *= c->shape[k];                                                                           \
    }                                                                                               \
    int64_t nq = c->shape[q], nl = c->shape[L], sl = c->stride[L];                                   \
    int64_t tq = (nq + TILE - 1) / TILE, tl = (nl + TILE - 1) / TILE;                                \
    int64_t items = acc / (nq * nl) * tq * tl;                                                      \
    _Pragma("omp parallel for schedule(static) if (acc > ZT_PAR_MIN)")                              \
    for (int64_t it = 0; it < items; it++) {                                                        \
      int64_t o = it / (tq * tl), t = it % (tq * tl);                                               \
      int64_t bi = t / tl * TILE, bj = t % tl * TILE;                                               \
      int64_t so = 0, doff = 0;                                                                     \
      for (int k = nd - 1; k >= 0; k--) {                                                           \
        if (k == q || k == L) continue;                                                             \
        int64_t idx = o % c->shape[k];                                                              \
        o /= c->shape[k];                                                                           \
        so += idx * c->stride[k];                                                                   \
        doff += idx * ds[k];                                                                        \
      }                                                                                             \
      int64_t ie = bi + TILE < nq ? bi + TILE : nq, je = bj + TILE < nl ? bj + TILE : nl;           \
      for (int64_t i = bi; i < ie; i++) {                                                           \
        T *drow = d + doff + i * ds[q];                                                             \
        const T *scol = s + so + i;                                                                 \
        for (int64_t j = bj; j < je; j++) drow[j] = scol[j * sl];                                   \
      }                                                                                             \
    }                                                                                               \
  }                                                                                                 \
  static void gather_##SUF(const collapsed *c, int64_t n, const T *restrict s, T *restrict d) {      \
    int nd = c->nd;                                                                                 \
    int64_t inner = c->shape[nd - 1], sl = c->stride[nd - 1], rows = n / inner;                     \
    _Pragma("omp parallel for schedule(static) if (n > ZT_PAR_MIN)")                                \
    for (int64_t r = 0; r < rows; r++) {                                                            \
      int64_t so = 0, rem = r;                                                                      \
      for (int k = nd - 2; k >= 0; k--) {                                                           \
        so += (rem % c->shape[k]) * c->stride[k];                                                   \
        rem /= c->shape[k];                                                                         \
      }                                                                                             \
      T *drow = d + r * inner;                                                                      \
      for (int64_t j = 0; j < inner; j++) drow[j] = s[so + j * sl];                                 \
    }                                                                                               \
  }

ZT_DEFINE_STRIDED(uint16_t, u16)
ZT_DEFINE_STRIDED(uint32_t, u32)
ZT_DEFINE_STRIDED(uint64_t, u64)

void zt__cpu_to_contiguous(const zt_tensor *src, zt_tensor *dst) {
  int64_t n = zt_tensor_numel(src);
  if (n == 0) return;
  ZT_ASSERT(src->dtype == dst->dtype && zt_tensor_is_contiguous(dst));
  int64_t es = (int64_t)zt_dtype_size(src->dtype);
  const char *sp = zt__tensor_ptr(src);
  char *dp = zt__tensor_ptr(dst);
  collapsed c;
  collapse(src, &c);
  if (c.nd == 0 || (c.nd == 1 && c.stride[0] == 1)) {
    zt__host_memcpy(dp, sp, n * es);
    return;
  }
  int L = c.nd - 1;
  if (c.stride[L] == 1) {
    /* rows of the last dim are contiguous in both */
    int64_t inner = c.shape[L], rows = n / inner, rb = inner * es;
#pragma omp parallel for schedule(static) if (n > ZT_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
      int64_t so = 0, rem = r;
      for (int k = L - 1; k >= 0; k--) {
        so += (rem % c.shape[k]) * c.stride[k];
        rem /= c.shape[k];
      }
      memcpy(dp + r * rb, sp + so * es, (size_t)rb);
    }
    return;
  }
  int q = -1;
  for (int k = L - 1; k >= 0; k--)
    if (c.stride[k] == 1) {
      q = k;
      break;
    }
  switch (es) {
  case 2: q >= 0 ? tiled_u16(&c, q, (const void *)sp, (void *)dp) : gather_u16(&c, n, (const void *)sp, (void *)dp); break;
  case 4: q >= 0 ? tiled_u32(&c, q, (const void *)sp, (void *)dp) : gather_u32(&c, n, (const void *)sp, (void *)dp); break;
  case 8: q >= 0 ? tiled_u64(&c, q, (const void *)sp, (void *)dp) : gather_u64(&c, n, (const void *)sp, (void *)dp); break;
  default: ZT_ASSERT(0 && "element size");
  }
}
