/* Tensors and dtypes: creation, strides, dtype names/parsing, bf16/f16 conversion (ties to
 * even, NaN, inf, subnormals, exhaustive round trips), get/set, copy_ with conversion,
 * fill_, aliases, contiguity, shape strings, version counters, and bad dtype/shape errors. */
#include <float.h>
#include <stdlib.h>

#include "zt_test.h"
#include "core/tensor_internal.h"

static float f_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint32_t bits_f(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* A transposed (non-contiguous) view of a contiguous 2-D tensor. */
static zt_tensor *transposed(zt_tensor *t) {
  int64_t shape[2] = {t->shape[1], t->shape[0]}, stride[2] = {t->stride[1], t->stride[0]};
  zt_tensor *v = NULL;
  ZT_CHECK_OK(zt__tensor_new_view(t->storage, t->offset, 2, shape, stride, t->dtype, &v));
  v->is_view = true;
  return v;
}

static void test_create_shapes(void) {
  int64_t shape[] = {2, 3, 4};
  zt_tensor *t = NULL;
  ZT_CHECK_OK(zt_tensor_empty(3, shape, ZT_DTYPE_F32, ZT_CPU, &t));
  ZT_CHECK(t->ndim == 3 && t->shape[0] == 2 && t->shape[1] == 3 && t->shape[2] == 4);
  ZT_CHECK(t->stride[0] == 12 && t->stride[1] == 4 && t->stride[2] == 1);
  ZT_CHECK(zt_tensor_numel(t) == 24 && zt_tensor_nbytes(t) == 96);
  ZT_CHECK(zt_tensor_is_contiguous(t) && zt_tensor_is_leaf(t) && !t->requires_grad && !t->is_view);
  ZT_CHECK(t->storage->refcount == 1 && t->storage->nbytes == 96 && t->offset == 0);
  ZT_CHECK(zt_device_equal(zt_tensor_device(t), ZT_CPU));
  ZT_CHECK(t->storage->tag == zt_mem_tag_current());
  zt_tensor_free(t);

  ZT_CHECK_OK(zt_tensor_zeros(3, shape, ZT_DTYPE_F64, ZT_CPU, &t));
  for (int64_t i = 0; i < 24; i++) ZT_CHECK(zt_tensor_get(t, i) == 0.0);
  zt_tensor_free(t);
  ZT_CHECK_OK(zt_tensor_full(3, shape, ZT_DTYPE_BF16, ZT_CPU, 1.5, &t));
  for (int64_t i = 0; i < 24; i++) ZT_CHECK(zt_tensor_get(t, i) == 1.5);
  ZT_CHECK(zt_tensor_nbytes(t) == 48);
  zt_tensor_free(t);

  /* 0-d scalar with a NULL shape */
  ZT_CHECK_OK(zt_tensor_full(0, NULL, ZT_DTYPE_F32, ZT_CPU, 2.5, &t));
  ZT_CHECK(t->ndim == 0 && zt_tensor_numel(t) == 1 && zt_tensor_is_contiguous(t));
  ZT_CHECK(zt_tensor_get(t, 0) == 2.5);
  zt_tensor_free(t);

  /* zero-size tensors are valid: no bytes, every operation a no-op */
  int64_t zs[] = {0, 3};
  ZT_CHECK_OK(zt_tensor_zeros(2, zs, ZT_DTYPE_F32, ZT_CPU, &t));
  ZT_CHECK(zt_tensor_numel(t) == 0 && zt_tensor_nbytes(t) == 0);
  void *p;
  ZT_CHECK_OK(zt_tensor_data(t, &p));
  ZT_CHECK_OK(zt_tensor_fill_(t, 3));
  zt_tensor *c = NULL;
  ZT_CHECK_OK(zt_tensor_clone_data(t, ZT_MEM_TAG_TEMP, &c));
  ZT_CHECK_OK(zt_tensor_copy_(c, t));
  zt_tensor_free(c);
  zt_tensor_free(t);
  ZT_CHECK_OK(zt_tensor_from_data(2, zs, ZT_DTYPE_F32, &(float){0}, &t));
  zt_tensor_free(t);

  /* from_data copies */
  double vals[] = {1, 2, 3, 4, 5, 6};
  int64_t s23[] = {2, 3};
  ZT_CHECK_OK(zt_tensor_from_data(2, s23, ZT_DTYPE_F64, vals, &t));
  vals[0] = 100;
  ZT_CHECK(zt_tensor_get(t, 0) == 1 && zt_tensor_get(t, 5) == 6);
  zt_tensor_free(t);

  /* the tagged variant and the thread's tag */
  ZT_CHECK_OK(zt_tensor_empty_tagged(2, s23, ZT_DTYPE_F32, ZT_CPU, ZT_MEM_TAG_OPTIM, &t));
  ZT_CHECK(t->storage->tag == ZT_MEM_TAG_OPTIM);
  zt_tensor_free(t);
  zt_mem_tag prev = zt_mem_tag_push(ZT_MEM_TAG_PARAM);
  ZT_CHECK_OK(zt_tensor_empty(2, s23, ZT_DTYPE_F32, ZT_CPU, &t));
  ZT_CHECK(t->storage->tag == ZT_MEM_TAG_PARAM);
  zt_mem_tag_pop(prev);
  zt_tensor_free(t);

  /* the full 8 dims */
  int64_t s8[8] = {1, 2, 1, 2, 1, 2, 1, 2};
  ZT_CHECK_OK(zt_tensor_zeros(8, s8, ZT_DTYPE_I64, ZT_CPU, &t));
  ZT_CHECK(zt_tensor_numel(t) == 16 && t->stride[0] == 16 && t->stride[1] == 8 && t->stride[7] == 1);
  zt_tensor_free(t);
  zt_tensor_free(NULL); /* no-op */
}

static void test_dtype_table(void) {
  const struct {
    zt_dtype dt;
    size_t size;
    const char *name, *alias;
    bool is_float;
  } rows[] = {{ZT_DTYPE_F32, 4, "f32", "float32", true},   {ZT_DTYPE_F64, 8, "f64", "float64", true},
              {ZT_DTYPE_BF16, 2, "bf16", "bfloat16", true}, {ZT_DTYPE_F16, 2, "f16", "float16", true},
              {ZT_DTYPE_I32, 4, "i32", "int32", false},     {ZT_DTYPE_I64, 8, "i64", "int64", false}};
  for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
    ZT_CHECK(zt_dtype_valid(rows[k].dt));
    ZT_CHECK(zt_dtype_size(rows[k].dt) == rows[k].size);
    ZT_CHECK(!strcmp(zt_dtype_name(rows[k].dt), rows[k].name));
    ZT_CHECK(zt_dtype_is_float(rows[k].dt) == rows[k].is_float);
    zt_dtype d = ZT_DTYPE_COUNT;
    ZT_CHECK_OK(zt_dtype_parse(rows[k].name, &d));
    ZT_CHECK(d == rows[k].dt);
    d = ZT_DTYPE_COUNT;
    ZT_CHECK_OK(zt_dtype_parse(rows[k].alias, &d));
    ZT_CHECK(d == rows[k].dt);
  }
  zt_dtype bad = (zt_dtype)99, neg = (zt_dtype)-1;
  ZT_CHECK(!zt_dtype_valid(bad) && !zt_dtype_valid(neg) && !zt_dtype_valid(ZT_DTYPE_COUNT));
  ZT_CHECK(zt_dtype_size(bad) == 0 && !zt_dtype_is_float(bad));
  ZT_CHECK(!strcmp(zt_dtype_name(bad), "invalid") && !strcmp(zt_dtype_name(neg), "invalid"));
  zt_dtype d = ZT_DTYPE_F64;
  ZT_CHECK_ERR(zt_dtype_parse("f8", &d), ZT_STATUS_DTYPE, "unknown dtype 'f8'");
  ZT_CHECK(d == ZT_DTYPE_F64); /* untouched on failure */
  ZT_CHECK_ERR(zt_dtype_parse("F32", &d), ZT_STATUS_DTYPE, "use one of f32, f64, bf16, f16, i32, i64");
  ZT_CHECK_ERR(zt_dtype_parse("", &d), ZT_STATUS_DTYPE, "unknown dtype ''");
  ZT_CHECK_ERR(zt_dtype_parse(NULL, &d), ZT_STATUS_INVALID_ARG, "NULL");
  ZT_CHECK_ERR(zt_dtype_parse("f32", NULL), ZT_STATUS_INVALID_ARG, "NULL");
}

static void test_bf16_conversion(void) {
  /* exact values survive */
  const float exact[] = {0.0f, 1.0f, -1.0f, 2.0f, 0.5f, -3.75f, 1.0f + 1.0f / 128, 65280.0f, 1e-38f * 0 + 0x1p-126f};
  for (size_t k = 0; k < sizeof exact / sizeof exact[0]; k++)
    ZT_CHECK(zt_bf16_to_f32(zt_f32_to_bf16(exact[k])) == exact[k]);
  /* -0 keeps its sign */
  ZT_CHECK(zt_f32_to_bf16(-0.0f) == 0x8000);
  /* round to nearest, ties to even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 */
  ZT_CHECK(zt_bf16_to_f32(zt_f32_to_bf16(1.0f + 0x1p-8f)) == 1.0f);
  ZT_CHECK(zt_bf16_to_f32(zt_f32_to_bf16(1.0f + 3 * 0x1p-8f)) == 1.0f + 0x1p-6f);
  ZT_CHECK(zt_bf16_to_f32(zt_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f)) == 1.0f + 0x1p-7f);
  ZT_CHECK(zt_bf16_to_f32(zt_f32_to_bf16(1.0f + 0x1p-8f - 0x1p-20f)) == 1.0f);
  ZT_CHECK(zt_bf16_to_f32(zt_f32_to_bf16(-(1.0f + 3 * 0x1p-8f))) == -(1.0f + 0x1p-6f));
  /* inf, overflow to inf, NaN stays (quiet) NaN of either sign */
  ZT_CHECK(zt_f32_to_bf16(INFINITY) == 0x7f80 && zt_f32_to_bf16(-INFINITY) == 0xff80);
  ZT_CHECK(zt_f32_to_bf16(FLT_MAX) == 0x7f80);
  ZT_CHECK(isinf(zt_bf16_to_f32(0x7f80)) && zt_bf16_to_f32(0xff80) < 0);
  ZT_CHECK(isnan(zt_bf16_to_f32(zt_f32_to_bf16(NAN))));
  ZT_CHECK(isnan(zt_bf16_to_f32(zt_f32_to_bf16(-NAN))));
  /* a signalling NaN whose payload is only in the low 16 bits must not become inf */
  ZT_CHECK(isnan(zt_bf16_to_f32(zt_f32_to_bf16(f_bits(0x7f800001u)))));
  ZT_CHECK(isnan(zt_bf16_to_f32(zt_f32_to_bf16(f_bits(0xff800001u)))));
  /* subnormals: kept when representable, rounded otherwise */
  ZT_CHECK(zt_bf16_to_f32(zt_f32_to_bf16(0x1p-133f)) == 0x1p-133f);
  ZT_CHECK(zt_bf16_to_f32(zt_f32_to_bf16(0x1p-134f)) == 0.0f); /* tie -> even (0) */
  ZT_CHECK(zt_bf16_to_f32(zt_f32_to_bf16(0x1.8p-133f)) == 0x1p-132f);
  /* every bf16 value round-trips exactly through f32 (NaNs stay NaN) */
  int bad = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = zt_bf16_to_f32((uint16_t)h);
    ZT_CHECK(bits_f(f) == h << 16);
    if (isnan(f))
      bad += !isnan(zt_bf16_to_f32(zt_f32_to_bf16(f)));
    else
      bad += zt_f32_to_bf16(f) != h;
  }
  ZT_CHECK(bad == 0);
}

static void test_f16_conversion(void) {
  ZT_CHECK(zt_f32_to_f16(1.0f) == 0x3c00 && zt_f32_to_f16(-2.0f) == 0xc000 && zt_f32_to_f16(0.0f) == 0);
  ZT_CHECK(zt_f32_to_f16(-0.0f) == 0x8000);
  ZT_CHECK(zt_f32_to_f16(65504.0f) == 0x7bff);
  ZT_CHECK(zt_f16_to_f32(0x7bff) == 65504.0f);
  /* ties to even in the normal range: 1 + 2^-11 halfway between 1 and 1 + 2^-10 */
  ZT_CHECK(zt_f32_to_f16(1.0f + 0x1p-11f) == 0x3c00);
  ZT_CHECK(zt_f32_to_f16(1.0f + 3 * 0x1p-11f) == 0x3c02);
  ZT_CHECK(zt_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f) == 0x3c01);
  /* mantissa carry into the exponent: 2 - 2^-12 rounds up to 2 */
  ZT_CHECK(zt_f32_to_f16(2.0f - 0x1p-12f) == 0x4000);
  /* overflow: 65519.99 -> 65504; 65520 (the tie) -> inf */
  ZT_CHECK(zt_f32_to_f16(65519.0f) == 0x7bff);
  ZT_CHECK(zt_f32_to_f16(65520.0f) == 0x7c00 && zt_f32_to_f16(-65520.0f) == 0xfc00);
  ZT_CHECK(zt_f32_to_f16(1e10f) == 0x7c00 && zt_f32_to_f16(INFINITY) == 0x7c00 && zt_f32_to_f16(-INFINITY) == 0xfc00);
  ZT_CHECK(isinf(zt_f16_to_f32(0x7c00)) && zt_f16_to_f32(0xfc00) < 0);
  ZT_CHECK((zt_f32_to_f16(NAN) & 0x7fff) > 0x7c00 && isnan(zt_f16_to_f32(zt_f32_to_f16(NAN))));
  ZT_CHECK(isnan(zt_f16_to_f32(zt_f32_to_f16(f_bits(0x7f800001u)))));
  ZT_CHECK(zt_f32_to_f16(-NAN) & 0x8000);
  /* subnormals: unit 2^-24; ties to even; smallest normal 2^-14 */
  ZT_CHECK(zt_f32_to_f16(0x1p-24f) == 0x0001);
  ZT_CHECK(zt_f32_to_f16(0x1p-25f) == 0x0000);       /* tie -> 0 */
  ZT_CHECK(zt_f32_to_f16(0x1.8p-24f) == 0x0002);     /* 1.5 units -> 2 */
  ZT_CHECK(zt_f32_to_f16(0x1.4p-24f) == 0x0001);     /* 1.25 units -> 1 */
  ZT_CHECK(zt_f32_to_f16(-0x1p-24f) == 0x8001);
  ZT_CHECK(zt_f32_to_f16(1023 * 0x1p-24f) == 0x03ff);
  ZT_CHECK(zt_f32_to_f16(1023.5f * 0x1p-24f) == 0x0400); /* rounds up into the normals */
  ZT_CHECK(zt_f32_to_f16(0x1p-14f) == 0x0400);
  ZT_CHECK(zt_f32_to_f16(1e-30f) == 0 && zt_f32_to_f16(FLT_TRUE_MIN) == 0);
  ZT_CHECK(zt_f16_to_f32(0x0001) == 0x1p-24f && zt_f16_to_f32(0x03ff) == 1023 * 0x1p-24f);
  /* every f16 value round-trips exactly through f32 */
  int bad = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = zt_f16_to_f32((uint16_t)h);
    if (isnan(f))
      bad += !isnan(zt_f16_to_f32(zt_f32_to_f16(f)));
    else
      bad += zt_f32_to_f16(f) != h;
  }
  ZT_CHECK(bad == 0);
  /* every f16 midpoint between neighbours rounds to the even one (positive finite range) */
  bad = 0;
  for (uint32_t h = 0; h < 0x7bff; h++) {
    double lo = zt_f16_to_f32((uint16_t)h), hi = zt_f16_to_f32((uint16_t)(h + 1));
    float mid = (float)((lo + hi) / 2); /* exact in f32 */
    uint16_t want = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
    bad += zt_f32_to_f16(mid) != want;
  }
  ZT_CHECK(bad == 0);
}

static void test_get_set_all_dtypes(void) {
  int64_t shape[] = {2, 3};
  for (int d = 0; d < ZT_DTYPE_COUNT; d++) {
    zt_tensor *t = NULL;
    ZT_CHECK_OK(zt_tensor_zeros(2, shape, (zt_dtype)d, ZT_CPU, &t));
    for (int64_t i = 0; i < 6; i++) ZT_CHECK_OK(zt_tensor_set(t, i, (double)(i * 3 - 7)));
    for (int64_t i = 0; i < 6; i++) ZT_CHECK(zt_tensor_get(t, i) == (double)(i * 3 - 7));
    ZT_CHECK_ERR(zt_tensor_set(t, 6, 1), ZT_STATUS_INVALID_ARG, "index 6 out of range for 6 elements");
    ZT_CHECK_ERR(zt_tensor_set(t, -1, 1), ZT_STATUS_INVALID_ARG, "out of range");
    zt_clear_error();
    ZT_CHECK(isnan(zt_tensor_get(t, 6)));
    ZT_CHECK(strstr(zt_last_error(), "index 6 out of range") != NULL);
    zt_tensor_free(t);
  }
  /* rounding on store for narrow floats */
  zt_tensor *t = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(1, (int64_t[]){1}, ZT_DTYPE_F16, ZT_CPU, &t));
  ZT_CHECK_OK(zt_tensor_set(t, 0, 1.0 + 3 * 0x1p-11));
  ZT_CHECK(zt_tensor_get(t, 0) == 1.0 + 0x1p-9);
  zt_tensor_free(t);
  /* integer stores: truncation toward zero; NaN and out-of-range values saturate, never UB */
  ZT_CHECK_OK(zt_tensor_zeros(1, (int64_t[]){5}, ZT_DTYPE_I32, ZT_CPU, &t));
  ZT_CHECK_OK(zt_tensor_set(t, 0, -2.7));
  ZT_CHECK_OK(zt_tensor_set(t, 1, NAN));
  ZT_CHECK_OK(zt_tensor_set(t, 2, 1e20));
  ZT_CHECK_OK(zt_tensor_set(t, 3, -INFINITY));
  ZT_CHECK_OK(zt_tensor_set(t, 4, 2147483647.0));
  ZT_CHECK(zt_tensor_get(t, 0) == -2 && zt_tensor_get(t, 1) == 0 && zt_tensor_get(t, 2) == 2147483647.0);
  ZT_CHECK(zt_tensor_get(t, 3) == -2147483648.0 && zt_tensor_get(t, 4) == 2147483647.0);
  zt_tensor_free(t);
  ZT_CHECK_OK(zt_tensor_zeros(1, (int64_t[]){2}, ZT_DTYPE_I64, ZT_CPU, &t));
  ZT_CHECK_OK(zt_tensor_set(t, 0, 1e30));
  ZT_CHECK_OK(zt_tensor_set(t, 1, -1e30));
  int64_t *ip;
  ZT_CHECK_OK(zt_tensor_data(t, (void **)&ip));
  ZT_CHECK(ip[0] > INT64_MAX - 2048 && ip[1] == INT64_MIN);
  zt_tensor_free(t);
  /* get/set through a strided view index the logical (row-major) order */
  int64_t s23[] = {2, 3};
  double v[] = {0, 1, 2, 3, 4, 5};
  zt_tensor *base = NULL;
  ZT_CHECK_OK(zt_tensor_from_data(2, s23, ZT_DTYPE_F64, v, &base));
  zt_tensor *tr = transposed(base); /* (3, 2): tr[i][j] = base[j][i] */
  ZT_CHECK(zt_tensor_get(tr, 1) == 3 && zt_tensor_get(tr, 2) == 1 && zt_tensor_get(tr, 5) == 5);
  ZT_CHECK_OK(zt_tensor_set(tr, 1, 30));
  ZT_CHECK(zt_tensor_get(base, 3) == 30);
  zt_tensor_free(tr);
  zt_tensor_free(base);
}

static void test_copy_conversion(void) {
  int64_t shape[] = {3, 4};
  zt_tensor *src = zt_test_rand(2, shape, ZT_DTYPE_F32, -100, 100, 5);
  zt_tensor *bf = NULL, *h = NULL, *d = NULL, *i = NULL, *back = NULL;
  ZT_CHECK_OK(zt_tensor_empty(2, shape, ZT_DTYPE_BF16, ZT_CPU, &bf));
  ZT_CHECK_OK(zt_tensor_empty(2, shape, ZT_DTYPE_F16, ZT_CPU, &h));
  ZT_CHECK_OK(zt_tensor_empty(2, shape, ZT_DTYPE_F64, ZT_CPU, &d));
  ZT_CHECK_OK(zt_tensor_empty(2, shape, ZT_DTYPE_I32, ZT_CPU, &i));
  ZT_CHECK_OK(zt_tensor_empty(2, shape, ZT_DTYPE_F32, ZT_CPU, &back));
  ZT_CHECK_OK(zt_tensor_copy_(bf, src));
  ZT_CHECK_OK(zt_tensor_copy_(h, src));
  ZT_CHECK_OK(zt_tensor_copy_(d, src));
  ZT_CHECK_OK(zt_tensor_copy_(i, src));
  for (int64_t k = 0; k < 12; k++) {
    float x = (float)zt_tensor_get(src, k);
    ZT_CHECK(zt_tensor_get(bf, k) == zt_bf16_to_f32(zt_f32_to_bf16(x)));
    ZT_CHECK(zt_tensor_get(h, k) == zt_f16_to_f32(zt_f32_to_f16(x)));
    ZT_CHECK(zt_tensor_get(d, k) == (double)x);
    ZT_CHECK(zt_tensor_get(i, k) == trunc((double)x));
  }
  /* f32 -> f64 -> f32 is exact */
  ZT_CHECK_OK(zt_tensor_copy_(back, d));
  ZT_CHECK(zt_test_bitwise_equal(back, src));
  /* bf16 -> f32 is exact: copying back gives the bf16 values */
  ZT_CHECK_OK(zt_tensor_copy_(back, bf));
  ZT_CHECK(zt_test_max_abs_diff(back, bf) == 0);
  /* relative error of bf16 is at most 2^-8 (half an ulp), f16 at most 2^-11 (values in normal range) */
  for (int64_t k = 0; k < 12; k++) {
    double x = zt_tensor_get(src, k);
    ZT_CHECK(fabs(zt_tensor_get(bf, k) - x) <= fabs(x) * 0x1p-8);
    ZT_CHECK(fabs(zt_tensor_get(h, k) - x) <= fabs(x) * 0x1p-11 + 0x1p-25);
  }
  /* copy into a transposed view (strided destination, with conversion) */
  int64_t s43[] = {4, 3};
  zt_tensor *dst = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(2, s43, ZT_DTYPE_F64, ZT_CPU, &dst));
  zt_tensor *dt = transposed(dst); /* (3, 4) */
  ZT_CHECK_OK(zt_tensor_copy_(dt, src));
  for (int64_t r = 0; r < 3; r++)
    for (int64_t c = 0; c < 4; c++) ZT_CHECK(zt_tensor_get(dst, c * 3 + r) == zt_tensor_get(src, r * 4 + c));
  /* strided source, same dtype: i64 beyond 2^53 survives (no trip through double) */
  int64_t big[6] = {(1ll << 53) + 1, -((1ll << 60) + 3), 7, INT64_MAX, INT64_MIN, 9};
  int64_t s23[] = {2, 3}, s32[] = {3, 2};
  zt_tensor *bi = NULL, *bo = NULL;
  ZT_CHECK_OK(zt_tensor_from_data(2, s23, ZT_DTYPE_I64, big, &bi));
  zt_tensor *bt = transposed(bi);
  ZT_CHECK_OK(zt_tensor_empty(2, s32, ZT_DTYPE_I64, ZT_CPU, &bo));
  ZT_CHECK_OK(zt_tensor_copy_(bo, bt));
  int64_t *op;
  ZT_CHECK_OK(zt_tensor_data(bo, (void **)&op));
  for (int r = 0; r < 3; r++)
    for (int c = 0; c < 2; c++) ZT_CHECK(op[r * 2 + c] == big[c * 3 + r]);
  /* clone of a strided view is contiguous and equal */
  zt_tensor *cl = NULL;
  ZT_CHECK_OK(zt_tensor_clone_data(bt, ZT_MEM_TAG_TEMP, &cl));
  ZT_CHECK(zt_tensor_is_contiguous(cl) && cl->storage != bi->storage && cl->storage->tag == ZT_MEM_TAG_TEMP);
  ZT_CHECK_OK(zt_tensor_data(cl, (void **)&op));
  ZT_CHECK(memcmp(op, ((int64_t[]){big[0], big[3], big[1], big[4], big[2], big[5]}), sizeof big) == 0);
  /* copy onto itself is harmless */
  ZT_CHECK_OK(zt_tensor_copy_(src, src));
  ZT_CHECK(zt_test_max_abs_diff(src, back) < 1e9);
  /* shape mismatch */
  ZT_CHECK_ERR(zt_tensor_copy_(dst, src), ZT_STATUS_SHAPE, "shapes differ: destination (4, 3), source (3, 4)");
  ZT_CHECK_ERR(zt_tensor_copy_(NULL, src), ZT_STATUS_INVALID_ARG, "NULL");
  zt_tensor *all[] = {src, bf, h, d, i, back, dst, dt, bi, bt, bo, cl};
  for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) zt_tensor_free(all[k]);
}

static void test_fill(void) {
  int64_t shape[] = {3, 5};
  for (int d = 0; d < ZT_DTYPE_COUNT; d++) {
    zt_tensor *t = NULL;
    ZT_CHECK_OK(zt_tensor_empty(2, shape, (zt_dtype)d, ZT_CPU, &t));
    ZT_CHECK_OK(zt_tensor_fill_(t, 3.0));
    for (int64_t i = 0; i < 15; i++) ZT_CHECK(zt_tensor_get(t, i) == 3.0);
    zt_tensor_free(t);
  }
  /* strided fill touches only the view */
  int64_t s4[] = {4, 4};
  zt_tensor *base = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(2, s4, ZT_DTYPE_F32, ZT_CPU, &base));
  zt_tensor *col = NULL; /* column 1: shape (4,), stride 4, offset 1 */
  ZT_CHECK_OK(zt__tensor_new_view(base->storage, 1, 1, (int64_t[]){4}, (int64_t[]){4}, ZT_DTYPE_F32, &col));
  ZT_CHECK(!zt_tensor_is_contiguous(col));
  ZT_CHECK_OK(zt_tensor_fill_(col, -1));
  for (int64_t i = 0; i < 16; i++) ZT_CHECK(zt_tensor_get(base, i) == (i % 4 == 1 ? -1.0 : 0.0));
  zt_tensor_free(col);
  zt_tensor_free(base);
  ZT_CHECK_ERR(zt_tensor_fill_(NULL, 1), ZT_STATUS_INVALID_ARG, "NULL");
}

static void test_alias_and_contiguity(void) {
  int64_t shape[] = {2, 3};
  zt_tensor *t = zt_test_rand(2, shape, ZT_DTYPE_F32, 0, 1, 3);
  ZT_CHECK_OK(zt_tensor_set_requires_grad(t, true));
  zt_tensor *a = NULL;
  ZT_CHECK_OK(zt_tensor_alias(t, &a));
  ZT_CHECK(a->storage == t->storage && t->storage->refcount == 2);
  ZT_CHECK(!a->requires_grad && !a->grad_fn && !a->grad_acc && !a->grad);
  ZT_CHECK(zt_shape_equal(a->ndim, a->shape, t->ndim, t->shape) && a->offset == t->offset);
  ZT_CHECK_OK(zt_tensor_set(a, 4, 42));
  ZT_CHECK(zt_tensor_get(t, 4) == 42);
  /* freeing the original keeps the bytes alive for the alias */
  zt_tensor_free(t);
  ZT_CHECK(a->storage->refcount == 1 && zt_tensor_get(a, 4) == 42);
  zt_tensor *tr = transposed(a);
  ZT_CHECK(!zt_tensor_is_contiguous(tr) && tr->storage->refcount == 2);
  zt_tensor *ta = NULL;
  ZT_CHECK_OK(zt_tensor_alias(tr, &ta));
  ZT_CHECK(ta->stride[0] == 1 && ta->stride[1] == 3 && ta->is_view);
  zt_tensor_free(ta);
  zt_tensor_free(tr);
  zt_tensor_free(a);
  /* size-1 dims do not break contiguity whatever their stride */
  zt_tensor *b = NULL, *v = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(2, shape, ZT_DTYPE_F32, ZT_CPU, &b));
  ZT_CHECK_OK(zt__tensor_new_view(b->storage, 0, 3, (int64_t[]){1, 2, 3}, (int64_t[]){99, 3, 1}, ZT_DTYPE_F32, &v));
  ZT_CHECK(zt_tensor_is_contiguous(v));
  zt_tensor_free(v);
  /* a row of a matrix (offset, unit stride) is contiguous */
  ZT_CHECK_OK(zt__tensor_new_view(b->storage, 3, 1, (int64_t[]){3}, (int64_t[]){1}, ZT_DTYPE_F32, &v));
  ZT_CHECK(zt_tensor_is_contiguous(v));
  ZT_CHECK_OK(zt_tensor_fill_(v, 2));
  ZT_CHECK(zt_tensor_get(b, 2) == 0 && zt_tensor_get(b, 3) == 2);
  zt_tensor_free(v);
  zt_tensor_free(b);
  ZT_CHECK_ERR(zt_tensor_alias(NULL, &a), ZT_STATUS_INVALID_ARG, "NULL");
}

static void test_shape_str(void) {
  char buf[128];
  ZT_CHECK(!strcmp(zt_shape_str(3, (int64_t[]){4, 256, 768}, buf), "(4, 256, 768)"));
  ZT_CHECK(!strcmp(zt_shape_str(1, (int64_t[]){5}, buf), "(5,)"));
  ZT_CHECK(!strcmp(zt_shape_str(0, NULL, buf), "()"));
  ZT_CHECK(!strcmp(zt_shape_str(2, (int64_t[]){0, -1}, buf), "(0, -1)"));
  /* 8 huge dims do not fit in 128 bytes: truncated, terminated, closed */
  int64_t huge[8];
  for (int i = 0; i < 8; i++) huge[i] = INT64_MIN;
  memset(buf, 'x', sizeof buf);
  zt_shape_str(8, huge, buf);
  ZT_CHECK(memchr(buf, 0, sizeof buf) != NULL);
  ZT_CHECK(strlen(buf) == 127 && !strcmp(buf + strlen(buf) - 4, "...)"));
  ZT_CHECK(!strncmp(buf, "(-9223372036854775808, ", 23));
  /* shape equality */
  ZT_CHECK(zt_shape_equal(2, (int64_t[]){2, 3}, 2, (int64_t[]){2, 3}));
  ZT_CHECK(!zt_shape_equal(2, (int64_t[]){2, 3}, 2, (int64_t[]){3, 2}));
  ZT_CHECK(!zt_shape_equal(1, (int64_t[]){6}, 2, (int64_t[]){2, 3}));
  ZT_CHECK(zt_shape_equal(0, NULL, 0, NULL));
  /* device strings */
  char d[16];
  ZT_CHECK(!strcmp(zt_device_str(ZT_CPU, d), "cpu"));
  ZT_CHECK(!strcmp(zt_device_str((zt_device){ZT_DEVICE_CUDA, 3}, d), "cuda:3"));
  ZT_CHECK(!strcmp(zt_device_str((zt_device){ZT_DEVICE_DISK, 0}, d), "disk"));
  ZT_CHECK(!strcmp(zt_device_str((zt_device){ZT_DEVICE_CPU, 5}, d), "cpu:5"));
  ZT_CHECK(!strcmp(zt_device_str((zt_device){ZT_DEVICE_DISK, 2}, d), "disk:2"));
  ZT_CHECK(!strcmp(zt_device_str((zt_device){(zt_device_type)9, 0}, d), "invalid(9)"));
  ZT_CHECK(zt_device_equal(ZT_CPU, (zt_device){ZT_DEVICE_CPU, 0}));
  ZT_CHECK(!zt_device_equal(ZT_CPU, (zt_device){ZT_DEVICE_CUDA, 0}));
}

static void test_version_counter(void) {
  int64_t shape[] = {4};
  zt_tensor *t = NULL, *a = NULL, *src = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(1, shape, ZT_DTYPE_F32, ZT_CPU, &t));
  ZT_CHECK_OK(zt_tensor_zeros(1, shape, ZT_DTYPE_F64, ZT_CPU, &src));
  ZT_CHECK_OK(zt_tensor_alias(t, &a));
  uint64_t v = t->storage->version;
  ZT_CHECK_OK(zt_tensor_set(t, 0, 1));
  ZT_CHECK(t->storage->version == v + 1);
  ZT_CHECK_OK(zt_tensor_fill_(a, 2)); /* through the alias: the shared counter */
  ZT_CHECK(t->storage->version == v + 2 && a->storage->version == v + 2);
  ZT_CHECK_OK(zt_tensor_copy_(t, src));
  ZT_CHECK(t->storage->version == v + 3);
  ZT_CHECK(src->storage->version == 0); /* the source is not written */
  ZT_CHECK_OK(zt_tensor_uniform_(a, 0, 1));
  ZT_CHECK_OK(zt_tensor_normal_(a, 0, 1));
  ZT_CHECK(t->storage->version == v + 5);
  zt_tensor_bump_version(t);
  ZT_CHECK(a->storage->version == v + 6);
  /* reads do not bump */
  (void)zt_tensor_get(t, 1);
  zt_tensor *c = NULL;
  ZT_CHECK_OK(zt_tensor_clone_data(t, ZT_MEM_TAG_TEMP, &c));
  ZT_CHECK(t->storage->version == v + 6 && c->storage->version == 0);
  /* failed writes do not bump */
  ZT_CHECK_ERR(zt_tensor_set(t, 9, 0), ZT_STATUS_INVALID_ARG, "out of range");
  ZT_CHECK(t->storage->version == v + 6);
  zt_tensor_free(c);
  zt_tensor_free(a);
  zt_tensor_free(t);
  zt_tensor_free(src);
}

static void test_requires_grad_flag(void) {
  int64_t shape[] = {3};
  zt_tensor *t = NULL, *i = NULL, *y = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(1, shape, ZT_DTYPE_F32, ZT_CPU, &t));
  ZT_CHECK_OK(zt_tensor_set_requires_grad(t, true));
  ZT_CHECK(t->requires_grad && zt_tensor_is_leaf(t));
  ZT_CHECK_OK(zt_tensor_set_requires_grad(t, false));
  ZT_CHECK(!t->requires_grad);
  ZT_CHECK_OK(zt_tensor_zeros(1, shape, ZT_DTYPE_I64, ZT_CPU, &i));
  ZT_CHECK_ERR(zt_tensor_set_requires_grad(i, true), ZT_STATUS_DTYPE, "only floating-point tensors can require grad");
  ZT_CHECK_OK(zt_tensor_set_requires_grad(i, false));
  ZT_CHECK_OK(zt_tensor_set_requires_grad(t, true));
  ZT_CHECK_OK(zt_exp(t, &y));
  ZT_CHECK(!zt_tensor_is_leaf(y));
  ZT_CHECK_ERR(zt_tensor_set_requires_grad(y, false), ZT_STATUS_AUTOGRAD, "only be changed on leaf tensors");
  ZT_CHECK_ERR(zt_tensor_set_requires_grad(NULL, true), ZT_STATUS_INVALID_ARG, "NULL");
  zt_tensor_free(y);
  zt_tensor_free(i);
  zt_tensor_free(t);
}

static void test_creation_errors(void) {
  zt_tensor *t = (zt_tensor *)0x1;
  int64_t shape[] = {2, 3};
  ZT_CHECK_ERR(zt_tensor_empty(2, shape, (zt_dtype)99, ZT_CPU, &t), ZT_STATUS_DTYPE, "unknown dtype 99");
  ZT_CHECK_ERR(zt_tensor_zeros(2, shape, (zt_dtype)-3, ZT_CPU, &t), ZT_STATUS_DTYPE, "unknown dtype -3");
  ZT_CHECK_ERR(zt_tensor_full(2, (int64_t[]){2, -1}, ZT_DTYPE_F32, ZT_CPU, 0, &t), ZT_STATUS_SHAPE,
               "negative size -1 in dim 1");
  int64_t s9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  ZT_CHECK_ERR(zt_tensor_empty(9, s9, ZT_DTYPE_F32, ZT_CPU, &t), ZT_STATUS_SHAPE,
               "9 dims requested; tensors have 0 to 8 dims");
  ZT_CHECK_ERR(zt_tensor_empty(-1, s9, ZT_DTYPE_F32, ZT_CPU, &t), ZT_STATUS_SHAPE, "-1 dims requested");
  ZT_CHECK_ERR(zt_tensor_empty(2, NULL, ZT_DTYPE_F32, ZT_CPU, &t), ZT_STATUS_INVALID_ARG, "shape is NULL");
  ZT_CHECK_ERR(zt_tensor_empty(2, shape, ZT_DTYPE_F32, ZT_CPU, NULL), ZT_STATUS_INVALID_ARG, "out is NULL");
  /* sizes whose byte count overflows */
  int64_t huge[] = {1ll << 40, 1ll << 40};
  ZT_CHECK_ERR(zt_tensor_empty(2, huge, ZT_DTYPE_F32, ZT_CPU, &t), ZT_STATUS_SHAPE, "too large");
  int64_t huge2[] = {1ll << 62};
  ZT_CHECK_ERR(zt_tensor_empty(1, huge2, ZT_DTYPE_F64, ZT_CPU, &t), ZT_STATUS_SHAPE, "(4611686018427387904,) of f64");
  ZT_CHECK_ERR(zt_tensor_empty(2, shape, ZT_DTYPE_F32, ((zt_device){ZT_DEVICE_CUDA, 0}), &t), ZT_STATUS_DEVICE,
               "no compute backend for device cuda:0");
  ZT_CHECK_ERR(zt_tensor_from_data(2, shape, ZT_DTYPE_F32, NULL, &t), ZT_STATUS_INVALID_ARG, "data is NULL");
  ZT_CHECK(t == (zt_tensor *)0x1); /* never written on failure */
  ZT_CHECK_ERR(zt_tensor_data(NULL, (void **)&t), ZT_STATUS_INVALID_ARG, "NULL");
}

int main(void) {
  ZT_RUN(test_create_shapes);
  ZT_RUN(test_dtype_table);
  ZT_RUN(test_bf16_conversion);
  ZT_RUN(test_f16_conversion);
  ZT_RUN(test_get_set_all_dtypes);
  ZT_RUN(test_copy_conversion);
  ZT_RUN(test_fill);
  ZT_RUN(test_alias_and_contiguity);
  ZT_RUN(test_shape_str);
  ZT_RUN(test_version_counter);
  ZT_RUN(test_requires_grad_flag);
  ZT_RUN(test_creation_errors);
  return zt_test_finish();
}
