/* dtype conversion of contiguous host buffers: zt_cast's kernel and the cpu backend's cast
 * (one home). Floats round to nearest even (f64 and i64 go to bf16/f16 with one rounding,
 * not two); NaN stays NaN. Floats to integers truncate toward zero, saturate at the
 * integer's range, and NaN gives 0. i64 to i32 wraps (two's complement). */
#include <math.h>
#include <string.h>

#include "core/status_internal.h"
#include "backend.h"

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
/* dst (n) of type DT = CONV(src (n) of type ST) in one parallel loop (zt__host_cast's fast paths). */
#define CAST_LOOP(ST, DT, CONV)                                      \
  do {                                                               \
    const ST *restrict s = src;                                      \
    DT *restrict d = dst;                                            \
    _Pragma("omp parallel for schedule(static) if (n > ZT_PAR_MIN)") \
    for (int64_t i = 0; i < n; i++) d[i] = CONV(s[i]);               \
  } while (0)

void zt__host_cast(void *dst, zt_dtype ddt, const void *src, zt_dtype sdt, int64_t n) {
  if (n <= 0) return;
  if (sdt == ddt) {
    zt__host_memcpy(dst, src, n * (int64_t)zt_dtype_size(sdt));
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
