/* Kernels of the shape ops and of zt_cast: block copies, strided -> contiguous copies
 * and dtype conversion. Copies move whole elements as 2/4/8-byte words, never through
 * double, so i64 values and NaN payloads survive them unchanged. */
#include <math.h>
#include <string.h>

#include "kernels.h"
#include "shape.h"

/* Copies below this many bytes stay on one thread. */
#define PAR_BYTES ((int64_t)ZT_PAR_MIN * 8)
#define TILE 32

static void par_memcpy(char *dst, const char *src, int64_t bytes) {
  if (bytes < PAR_BYTES) {
    if (bytes > 0) memcpy(dst, src, (size_t)bytes);
    return;
  }
  const int64_t chunk = (int64_t)1 << 20;
  int64_t nchunks = (bytes + chunk - 1) / chunk;
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < nchunks; k++) {
    int64_t off = k * chunk, len = bytes - off < chunk ? bytes - off : chunk;
    memcpy(dst + off, src + off, (size_t)len);
  }
}

void zt__cpu_copy_rows(void *dst, int64_t dst_pitch, const void *src, int64_t src_pitch, int64_t rows,
                       int64_t row_bytes) {
  if (rows <= 0 || row_bytes <= 0) return;
  char *d = dst;
  const char *s = src;
  if (rows == 1 || (dst_pitch == row_bytes && src_pitch == row_bytes)) {
    par_memcpy(d, s, rows * row_bytes); /* one contiguous block */
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
    par_memcpy(dp, sp, n * es);
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

/* ------------------------------------------------ dtype conversion */
/* Inline twins of zt_f32_to_bf16 / zt_bf16_to_f32 (src/core/dtype.c) so the hot f32 <->
 * bf16 loops vectorise; tests check they agree bit for bit. */
static inline uint16_t f32_to_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static inline float bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float x;
  memcpy(&x, &u, 4);
  return x;
}

/* x rounded to f32 "to odd" (truncate, then set the last bit if anything was lost).
 * Rounding that to a format with at most 22 bits of precision (bf16, f16) gives the
 * correctly rounded result: going through plain f32 rounding would round twice. */
static float f64_to_f32_odd(double x) {
  float f = (float)x;
  if (isnan(x) || isinf(f) || (double)f == x) return f;
  uint32_t u;
  memcpy(&u, &f, 4);
  if (fabs((double)f) > fabs(x)) u -= 1; /* was rounded away from zero: step back toward it */
  u |= 1;
  memcpy(&f, &u, 4);
  return f;
}

static float i64_to_f32_odd(int64_t v) {
  uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  if (u < ((uint64_t)1 << 24)) return (float)v; /* exact */
  int drop = 64 - __builtin_clzll(u) - 24;
  uint64_t m = u >> drop;
  if (u & (((uint64_t)1 << drop) - 1)) m |= 1;
  float f = ldexpf((float)m, drop); /* m < 2^24: exact */
  return v < 0 ? -f : f;
}

static int32_t f64_to_i32(double x) {
  if (isnan(x)) return 0;
  if (x >= 2147483647.0) return INT32_MAX;
  if (x <= -2147483648.0) return INT32_MIN;
  return (int32_t)x;
}
static int64_t f64_to_i64(double x) {
  if (isnan(x)) return 0;
  if (x >= 9223372036854775808.0) return INT64_MAX;
  if (x <= -9223372036854775808.0) return INT64_MIN;
  return (int64_t)x;
}

/* Every source but i64 is exact in double; i64 is converted from the integer. */
static double load_f64(zt_dtype dt, const void *p, int64_t i) {
  switch (dt) {
  case ZT_DTYPE_F32: return ((const float *)p)[i];
  case ZT_DTYPE_F64: return ((const double *)p)[i];
  case ZT_DTYPE_BF16: return bf16_to_f32(((const uint16_t *)p)[i]);
  case ZT_DTYPE_F16: return zt_f16_to_f32(((const uint16_t *)p)[i]);
  case ZT_DTYPE_I32: return ((const int32_t *)p)[i];
  default: ZT_ASSERT(0 && "dtype");
  }
  return 0;
}

static void store_from_f64(zt_dtype dt, void *p, int64_t i, double x) {
  switch (dt) {
  case ZT_DTYPE_F32: ((float *)p)[i] = (float)x; break;
  case ZT_DTYPE_F64: ((double *)p)[i] = x; break;
  case ZT_DTYPE_BF16: ((uint16_t *)p)[i] = f32_to_bf16(f64_to_f32_odd(x)); break;
  case ZT_DTYPE_F16: ((uint16_t *)p)[i] = zt_f32_to_f16(f64_to_f32_odd(x)); break;
  case ZT_DTYPE_I32: ((int32_t *)p)[i] = f64_to_i32(x); break;
  case ZT_DTYPE_I64: ((int64_t *)p)[i] = f64_to_i64(x); break;
  default: ZT_ASSERT(0 && "dtype");
  }
}

static void store_from_i64(zt_dtype dt, void *p, int64_t i, int64_t v) {
  switch (dt) {
  case ZT_DTYPE_F32: ((float *)p)[i] = (float)v; break;
  case ZT_DTYPE_F64: ((double *)p)[i] = (double)v; break;
  case ZT_DTYPE_BF16: ((uint16_t *)p)[i] = f32_to_bf16(i64_to_f32_odd(v)); break;
  case ZT_DTYPE_F16: ((uint16_t *)p)[i] = zt_f32_to_f16(i64_to_f32_odd(v)); break;
  case ZT_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)(uint32_t)(uint64_t)v; break; /* wraps */
  case ZT_DTYPE_I64: ((int64_t *)p)[i] = v; break;
  default: ZT_ASSERT(0 && "dtype");
  }
}

#define PAIR(a, b) ((int)(a) * (int)ZT_DTYPE_COUNT + (int)(b))
/* dst (n) of type DT = CONV(src (n) of type ST) in one parallel loop (zt__cpu_cast's fast paths). */
#define CAST_LOOP(ST, DT, CONV)                                      \
  do {                                                               \
    const ST *restrict s = src;                                      \
    DT *restrict d = dst;                                            \
    _Pragma("omp parallel for schedule(static) if (n > ZT_PAR_MIN)") \
    for (int64_t i = 0; i < n; i++) d[i] = CONV(s[i]);               \
  } while (0)

void zt__cpu_cast(const void *src, zt_dtype sdt, void *dst, zt_dtype ddt, int64_t n) {
  if (n <= 0) return;
  if (sdt == ddt) {
    par_memcpy(dst, src, n * (int64_t)zt_dtype_size(sdt));
    return;
  }
  /* Fast paths for the mixed-precision pairs; the rest go element by element. */
  switch (PAIR(sdt, ddt)) {
  case PAIR(ZT_DTYPE_F32, ZT_DTYPE_BF16): CAST_LOOP(float, uint16_t, f32_to_bf16); return;
  case PAIR(ZT_DTYPE_BF16, ZT_DTYPE_F32): CAST_LOOP(uint16_t, float, bf16_to_f32); return;
  case PAIR(ZT_DTYPE_F32, ZT_DTYPE_F16): CAST_LOOP(float, uint16_t, zt_f32_to_f16); return;
  case PAIR(ZT_DTYPE_F16, ZT_DTYPE_F32): CAST_LOOP(uint16_t, float, zt_f16_to_f32); return;
  case PAIR(ZT_DTYPE_F32, ZT_DTYPE_F64): CAST_LOOP(float, double, (double)); return;
  case PAIR(ZT_DTYPE_F64, ZT_DTYPE_F32): CAST_LOOP(double, float, (float)); return;
  default: break;
  }
  if (sdt == ZT_DTYPE_I64) {
    const int64_t *s = src;
#pragma omp parallel for schedule(static) if (n > ZT_PAR_MIN)
    for (int64_t i = 0; i < n; i++) store_from_i64(ddt, dst, i, s[i]);
  } else {
#pragma omp parallel for schedule(static) if (n > ZT_PAR_MIN)
    for (int64_t i = 0; i < n; i++) store_from_f64(ddt, dst, i, load_f64(sdt, src, i));
  }
}
