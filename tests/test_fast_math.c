/* The inline f32 exp of src/ops/cpu/fast_math.h (tanh, GELU, softmax): NaN in gives NaN out,
 * +-inf and huge inputs give the clamped values without undefined behaviour (the float-to-int
 * conversion of a NaN n was UB; clang's UBSan, as in the fuzz build, reports it), and the
 * relative error against libm over the range stays ~1e-7. The kernels on NaN and inf. */
#include <float.h>
#include <math.h>

#include "ops/cpu/fast_math.h"
#include "zt/ops.h"
#include "zt_test.h"

static void test_special_inputs(void) {
  const float e88 = zt__expf_clamped(88.0f), em87 = zt__expf_clamped(-87.0f);
  ZT_CHECK(isfinite(e88) && fabsf(e88 / expf(88.0f) - 1) < 1e-6f);
  ZT_CHECK(em87 > 0 && fabsf(em87 / expf(-87.0f) - 1) < 1e-6f);
  volatile float nan = NAN, inf = INFINITY; /* volatile: computed at run time */
  ZT_CHECK(isnan(zt__expf_clamped(nan)));    /* was e^-87: NaN turned into a number */
  ZT_CHECK(isnan(zt__expf_clamped(-nan)));
  ZT_CHECK(isnan(zt__expf(nan)));
  ZT_CHECK(zt__expf_clamped(inf) == e88 && zt__expf_clamped(FLT_MAX) == e88 && zt__expf_clamped(1e30f) == e88);
  ZT_CHECK(zt__expf_clamped(-inf) == em87 && zt__expf_clamped(-FLT_MAX) == em87);
  ZT_CHECK(zt__expf(inf) == e88 && zt__expf(-inf) == 0 && zt__expf(-FLT_MAX) == 0 && zt__expf(-87.5f) == 0);
  /* NaNs of every payload, in a loop the compiler vectorises */
  float x[64], y[64], z[64];
  for (int i = 0; i < 64; i++) {
    uint32_t u = 0x7f800001u + (uint32_t)i * 0x1234u + (i % 2 ? 0x80000000u : 0);
    memcpy(&x[i], &u, 4);
  }
  for (int i = 0; i < 64; i++) y[i] = zt__expf_clamped(x[i]), z[i] = zt__expf(x[i]);
  int bad = 0;
  for (int i = 0; i < 64; i++) bad += !isnan(y[i]) || !isnan(z[i]);
  ZT_CHECK(bad == 0);
}

static void test_accuracy(void) {
  double worst = 0;
  for (float v = -87.0f; v <= 88.0f; v += 0.0137f) {
    double want = exp((double)v);
    worst = fmax(worst, fabs(zt__expf_clamped(v) / want - 1));
    worst = fmax(worst, fabs(zt__expf(v) / want - 1));
  }
  ZT_CHECK(worst < 3e-7);
}

/* The kernels that use it: NaN stays NaN; the infinities give the limits. */
static void test_kernels(void) {
  float in[5] = {NAN, INFINITY, -INFINITY, 1e30f, -1e30f};
  int64_t n = 5;
  zt_tensor *x = NULL, *g = NULL, *t = NULL;
  ZT_CHECK_OK(zt_tensor_from_data(1, &n, ZT_DTYPE_F32, in, &x));
  ZT_CHECK_OK(zt_gelu(x, &g));
  ZT_CHECK_OK(zt_tanh(x, &t));
  if (g && t) {
    ZT_CHECK(isnan(zt_tensor_get(g, 0)) && isnan(zt_tensor_get(t, 0)));
    ZT_CHECK(zt_tensor_get(t, 1) == 1 && zt_tensor_get(t, 2) == -1 && zt_tensor_get(t, 3) == 1);
    ZT_CHECK(zt_tensor_get(g, 3) == 1e30f && zt_tensor_get(g, 4) == 0);
  }
  zt_test_free_all((zt_tensor *[]){x, g, t}, 3);
  float row[4] = {0, -INFINITY, 1, NAN};
  int64_t s4 = 4;
  zt_tensor *r = NULL, *sm = NULL;
  ZT_CHECK_OK(zt_tensor_from_data(1, &s4, ZT_DTYPE_F32, row, &r));
  ZT_CHECK_OK(zt_softmax(r, 0, &sm));
  if (sm) ZT_CHECK(isnan(zt_tensor_get(sm, 0)) && isnan(zt_tensor_get(sm, 3))); /* NaN in a row: NaN */
  zt_test_free_all((zt_tensor *[]){r, sm}, 2);
}

int main(void) {
  ZT_RUN(test_special_inputs);
  ZT_RUN(test_accuracy);
  ZT_RUN(test_kernels);
  return zt_test_finish();
}
