/* Unary elementwise kernels and their backward: flat loops over contiguous data, one
 * loop per op so each vectorises. GELU is the tanh approximation used by GPT-2, computed
 * as x * sigmoid(2u) (== 0.5 x (1 + tanh(u))), which needs one exp and no cancellation.
 * SiLU is x * sigmoid(x) with fast_math.h's sigmoid (shared with the fused SwiGLU).
 * f32 tanh and GELU use the inline, vectorisable exp of fast_math.h instead of libm (the
 * hot GPT-2 activation); f64 uses libm throughout (gradchecks and references). Every element
 * is computed by the same code whatever the thread count or its position. */
#include <math.h>
#include <stdint.h>

#include "core/tensor_internal.h"
#include "fast_math.h"
#include "kernels.h"

#define GELU_K 0.7978845608028654 /* sqrt(2/pi) */
#define GELU_C 0.044715

/* tanh for f32: odd minimax polynomial (Cephes tanhf) for |x| < 0.625, else
 * sign(x) (1 - 2 / (e^{2|x|} + 1)); past |x| = 9.01 tanh rounds to +-1 in f32, so |x| is
 * clamped at 10 (exp stays finite). NaN stays NaN. */
static inline float tanh_f32(float x) {
  float ax = fabsf(x), z = x * x;
  float ps = -5.70498872745e-3f;
  ps = ps * z + 2.06390887954e-2f;
  ps = ps * z - 5.37397155531e-2f;
  ps = ps * z + 1.33314422036e-1f;
  ps = ps * z - 3.33332819422e-1f;
  ps = ps * z * x + x;
  float e = zt__expf_clamped(2.0f * (ax < 10.0f ? ax : 10.0f));
  float pl = 1.0f - 2.0f / (e + 1.0f);
  pl = x < 0 ? -pl : pl;
  return ax >= 0.625f ? pl : ps; /* NaN: the comparison is false and ps is NaN */
}

/* sigmoid(2u) for GELU: 1 / (1 + e^{-2u}). In f32, where e^{-2u} passes e^88 the true
 * x * sigmoid is below the smallest normal float: give 0 (as f64's exp overflow does). */
static inline float gelu_sig_f32(float x) {
  float u = (float)GELU_K * (x + (float)GELU_C * x * x * x), t = -2.0f * u;
  float sg = 1.0f / (1.0f + zt__expf_clamped(t));
  return t > 88.0f ? 0.0f : sg;
}
static inline double gelu_sig_f64(double x) {
  double u = GELU_K * (x + GELU_C * x * x * x);
  return 1.0 / (1.0 + exp(-2.0 * u));
}

/* One parallel, vectorised loop per op. */
#define EW_LOOP(BODY)                                                                \
  do {                                                                               \
    _Pragma("omp parallel for simd schedule(static) if (n > ZT_PAR_MIN)")            \
    for (int64_t i = 0; i < n; i++) { BODY; }                                        \
  } while (0)

#define ZT_DEFINE_UNARY(T, SUF, EXP, LOG, SQRT, TANH, POW, SIG)                                          \
  /* o (n) = f(a (n)); o may be a (same element read then written). */                            \
  static void unary_##SUF(zt__unop op, T s, const T *a, T *o, int64_t n) {                          \
    switch (op) {                                                                                   \
    case ZT_UNOP_NEG: EW_LOOP(o[i] = -a[i]); break;                                                 \
    case ZT_UNOP_EXP: EW_LOOP(o[i] = EXP(a[i])); break;                                             \
    case ZT_UNOP_LOG: EW_LOOP(o[i] = LOG(a[i])); break;                                             \
    case ZT_UNOP_SQRT: EW_LOOP(o[i] = SQRT(a[i])); break;                                           \
    case ZT_UNOP_TANH: EW_LOOP(o[i] = TANH(a[i])); break;                                           \
    /* x < 0 ? 0 : x keeps NaN (a NaN loss must show) */                                           \
    case ZT_UNOP_RELU: EW_LOOP(T x = a[i]; o[i] = x < 0 ? 0 : x); break;                            \
    case ZT_UNOP_GELU: EW_LOOP(T x = a[i]; o[i] = x * gelu_sig_##SUF(x)); break;                    \
    case ZT_UNOP_SILU: EW_LOOP(T x = a[i]; o[i] = x * SIG(x)); break;                                \
    case ZT_UNOP_ADD_SCALAR: EW_LOOP(o[i] = a[i] + s); break;                                       \
    case ZT_UNOP_MUL_SCALAR: EW_LOOP(o[i] = a[i] * s); break;                                       \
    case ZT_UNOP_DIV_SCALAR: EW_LOOP(o[i] = a[i] / s); break;                                       \
    case ZT_UNOP_POW:                                                                               \
      if (s == 2) /* squares are common and x * x is what pow gives, exactly rounded */             \
        EW_LOOP(o[i] = a[i] * a[i]);                                                                \
      else                                                                                          \
        EW_LOOP(o[i] = POW(a[i], s));                                                               \
      break;                                                                                        \
    }                                                                                               \
  }                                                                                                 \
  /* gx (n) = g * f'(x), from x or y = f(x) (whichever the op saved; the other is NULL). */       \
  static void unary_bwd_##SUF(zt__unop op, T s, const T *x, const T *y, const T *restrict g,        \
                              T *restrict gx, int64_t n) {                                          \
    switch (op) {                                                                                   \
    case ZT_UNOP_NEG: EW_LOOP(gx[i] = -g[i]); break;                                                \
    case ZT_UNOP_EXP: EW_LOOP(gx[i] = g[i] * y[i]); break;                                          \
    case ZT_UNOP_LOG: EW_LOOP(gx[i] = g[i] / x[i]); break;                                          \
    case ZT_UNOP_SQRT: EW_LOOP(gx[i] = g[i] / (2 * y[i])); break;                                   \
    case ZT_UNOP_TANH: EW_LOOP(gx[i] = g[i] * (1 - y[i] * y[i])); break;                            \
    case ZT_UNOP_RELU: EW_LOOP(gx[i] = x[i] > 0 ? g[i] : 0); break;                                 \
    case ZT_UNOP_GELU:                                                                              \
      /* d/dx [x sig(2u)] = sig + 2 x sig (1 - sig) u',  u' = K (1 + 3 C x^2) */                    \
      EW_LOOP(T v = x[i]; T sg = gelu_sig_##SUF(v);                                                 \
              T du = (T)GELU_K * (1 + 3 * (T)GELU_C * v * v);                                       \
              gx[i] = g[i] * (sg + 2 * v * sg * (1 - sg) * du));                                    \
      break;                                                                                        \
    case ZT_UNOP_SILU: /* d/dx [x sig] = sig (1 + x (1 - sig)) */                                   \
      EW_LOOP(T v = x[i]; T sg = SIG(v); gx[i] = g[i] * (sg * (1 + v * (1 - sg))));                  \
      break;                                                                                        \
    case ZT_UNOP_ADD_SCALAR: EW_LOOP(gx[i] = g[i]); break;                                          \
    case ZT_UNOP_MUL_SCALAR: EW_LOOP(gx[i] = g[i] * s); break;                                      \
    case ZT_UNOP_DIV_SCALAR: EW_LOOP(gx[i] = g[i] / s); break;                                      \
    case ZT_UNOP_POW:                                                                               \
      if (s == 0) /* x^0 is constant (pow(0, -1) would make 0 * inf) */                            \
        EW_LOOP(gx[i] = 0);                                                                         \
      else if (s == 2)                                                                              \
        EW_LOOP(gx[i] = g[i] * 2 * x[i]);                                                           \
      else                                                                                          \
        EW_LOOP(gx[i] = g[i] * s * POW(x[i], s - 1));                                               \
      break;                                                                                        \
    }                                                                                               \
  }

ZT_DEFINE_UNARY(float, f32, expf, logf, sqrtf, tanh_f32, powf, zt__sigmoidf)
static inline double sigmoid_f64(double x) { return 1.0 / (1.0 + exp(-x)); }
ZT_DEFINE_UNARY(double, f64, exp, log, sqrt, tanh, pow, sigmoid_f64)

/* out (n) = f(a (n)); out may alias a. */
void zt__cpu_unary(zt__unop op, double s, const zt_tensor *a, zt_tensor *out) {
  int64_t n = zt_tensor_numel(a);
  if (a->dtype == ZT_DTYPE_F32)
    unary_f32(op, (float)s, zt__tensor_ptr(a), zt__tensor_ptr(out), n);
  else
    unary_f64(op, s, zt__tensor_ptr(a), zt__tensor_ptr(out), n);
}

/* gx (n) = g (n) * f'(x (n)), using y (n) = f(x) instead of x for exp / sqrt / tanh. */
void zt__cpu_unary_backward(zt__unop op, double s, const zt_tensor *x, const zt_tensor *y, const zt_tensor *g,
                            zt_tensor *gx) {
  int64_t n = zt_tensor_numel(g);
  const void *xp = x ? zt__tensor_ptr(x) : NULL, *yp = y ? zt__tensor_ptr(y) : NULL;
  if (g->dtype == ZT_DTYPE_F32)
    unary_bwd_f32(op, (float)s, xp, yp, zt__tensor_ptr(g), zt__tensor_ptr(gx), n);
  else
    unary_bwd_f64(op, s, xp, yp, zt__tensor_ptr(g), zt__tensor_ptr(gx), n);
}
