/* dtypes, their sizes and names, and bf16/f16 <-> f32 conversion (round to nearest
 * even; NaN stays NaN; f16 handles subnormals). */
#include <math.h>
#include <string.h>

#include "core/status_internal.h"
#include "zt/tensor.h"

static const struct {
  const char *name;
  const char *alias;
  size_t size;
  bool is_float;
} dtype_info[ZT_DTYPE_COUNT] = {
    [ZT_DTYPE_F32] = {"f32", "float32", 4, true}, [ZT_DTYPE_F64] = {"f64", "float64", 8, true},
    [ZT_DTYPE_BF16] = {"bf16", "bfloat16", 2, true}, [ZT_DTYPE_F16] = {"f16", "float16", 2, true},
    [ZT_DTYPE_I32] = {"i32", "int32", 4, false},  [ZT_DTYPE_I64] = {"i64", "int64", 8, false},
};

bool zt_dtype_valid(zt_dtype dt) { return (int)dt >= 0 && dt < ZT_DTYPE_COUNT; }
size_t zt_dtype_size(zt_dtype dt) { return zt_dtype_valid(dt) ? dtype_info[dt].size : 0; }
const char *zt_dtype_name(zt_dtype dt) { return zt_dtype_valid(dt) ? dtype_info[dt].name : "invalid"; }
bool zt_dtype_is_float(zt_dtype dt) { return zt_dtype_valid(dt) && dtype_info[dt].is_float; }

zt_status zt_dtype_parse(const char *name, zt_dtype *out) {
  if (!name || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_dtype_parse: name or out is NULL");
  for (int i = 0; i < ZT_DTYPE_COUNT; i++) {
    if (!strcmp(name, dtype_info[i].name) || !strcmp(name, dtype_info[i].alias)) {
      *out = (zt_dtype)i;
      return ZT_OK;
    }
  }
  return ZT_ERR(ZT_STATUS_DTYPE, "unknown dtype '%s': use one of f32, f64, bf16, f16, i32, i64", name);
}

static uint32_t f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}
static float bits_f32(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

uint16_t zt_f32_to_bf16(float x) {
  uint32_t u = f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)((u + rounding) >> 16);
}

float zt_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t zt_f32_to_f16(float x) {
  uint32_t u = f32_bits(x);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);        /* NaN */
  if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);       /* overflow (incl. rounding) -> inf */
  if (abs < 0x38800000u) {                                         /* subnormal or zero in f16 */
    float a = bits_f32(abs);
    /* scale so that the f16 subnormal unit (2^-24) becomes 1, round to nearest even */
    float scaled = a * 16777216.0f;
    uint32_t m = (uint32_t)nearbyintf(scaled);
    return (uint16_t)(sign | m);
  }
  uint32_t exp = ((abs >> 23) - 127 + 15) << 10;
  uint32_t mant = (abs >> 13) & 0x3ffu;
  uint32_t rest = abs & 0x1fffu;
  uint32_t h = exp | mant;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
  return (uint16_t)(sign | h);
}

float zt_f16_to_f32(uint16_t h) {
  uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    float v = (float)mant / 16777216.0f;
    return sign ? -v : v;
  }
  if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));
  return bits_f32(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}
