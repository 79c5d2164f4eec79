/* Unary elementwise kernels and their backward, flat loops over contiguous data.
 * GELU is the tanh approximation used by GPT-2. */
#include <math.h>

#include "kernels.h"

#define GELU_K 0.7978845608028654 /* sqrt(2/pi) */
#define GELU_C 0.044715

#define ZT_DEFINE_UNARY(T, SUF, EXP, LOG, SQRT, TANH, POW)                                          \
  static void unary_##SUF(zt_unop op, T s, const T *restrict a, T *restrict o, int64_t n) {         \
    _Pragma("omp parallel for schedule(static) if (n > ZT_PAR_MIN)")                                \
    for (int64_t i = 0; i < n; i++) {                                                               \
      T x = a[i], y;                                                                                \
      switch (op) {                                                                                 \
      case ZT_UNOP_NEG: y = -x; break;                                                              \
      case ZT_UNOP_EXP: y = EXP(x); break;                                                          \
      case ZT_UNOP_LOG: y = LOG(x); break;                                                          \
      case ZT_UNOP_SQRT: y = SQRT(x); break;                                                        \
      case ZT_UNOP_TANH: y = TANH(x); break;                                                        \
      case ZT_UNOP_RELU: y = x > 0 ? x : 0; break;                                                  \
      case ZT_UNOP_GELU: y = (T)0.5 * x * (1 + TANH((T)GELU_K * (x + (T)GELU_C * x * x * x))); break; \
      case ZT_UNOP_ADD_SCALAR: y = x + s; break;                                                    \
      case ZT_UNOP_MUL_SCALAR: y = x * s; break;                                                    \
      case ZT_UNOP_DIV_SCALAR: y = x / s; break;                                                    \
      default: y = POW(x, s); break;                                                                \
      }                                                                                             \
      o[i] = y;                                                                                     \
    }                                                                                               \
  }                                                                                                 \
  static void unary_bwd_##SUF(zt_unop op, T s, const T *x, const T *y, const T *restrict g, T *restrict gx, \
                              int64_t n) {                                                          \
    _Pragma("omp parallel for schedule(static) if (n > ZT_PAR_MIN)")                                \
    for (int64_t i = 0; i < n; i++) {                                                               \
      T d;                                                                                          \
      switch (op) {                                                                                 \
      case ZT_UNOP_NEG: d = -g[i]; break;                                                           \
      case ZT_UNOP_EXP: d = g[i] * y[i]; break;                                                     \
      case ZT_UNOP_LOG: d = g[i] / x[i]; break;                                                     \
      case ZT_UNOP_SQRT: d = g[i] / (2 * y[i]); break;                                              \
      case ZT_UNOP_TANH: d = g[i] * (1 - y[i] * y[i]); break;                                       \
      case ZT_UNOP_RELU: d = x[i] > 0 ? g[i] : 0; break;                                            \
      case ZT_UNOP_GELU: {                                                                          \
        T v = x[i], u = (T)GELU_K * (v + (T)GELU_C * v * v * v), t = TANH(u);                        \
        T du = (T)GELU_K * (1 + 3 * (T)GELU_C * v * v);                                             \
        d = g[i] * ((T)0.5 * (1 + t) + (T)0.5 * v * (1 - t * t) * du);                               \
        break;                                                                                      \
      }                                                                                             \
      case ZT_UNOP_ADD_SCALAR: d = g[i]; break;                                                     \
      case ZT_UNOP_MUL_SCALAR: d = g[i] * s; break;                                                 \
      case ZT_UNOP_DIV_SCALAR: d = g[i] / s; break;                                                 \
      default: d = g[i] * s * POW(x[i], s - 1); break;                                              \
      }                                                                                             \
      gx[i] = d;                                                                                    \
    }                                                                                               \
  }

ZT_DEFINE_UNARY(float, f32, expf, logf, sqrtf, tanhf, powf)
ZT_DEFINE_UNARY(double, f64, exp, log, sqrt, tanh, pow)

void zt__cpu_unary(zt_unop op, double s, const zt_tensor *a, zt_tensor *out) {
  int64_t n = zt_tensor_numel(a);
  if (a->dtype == ZT_DTYPE_F32)
    unary_f32(op, (float)s, zt__tensor_ptr(a), zt__tensor_ptr(out), n);
  else
    unary_f64(op, s, zt__tensor_ptr(a), zt__tensor_ptr(out), n);
}

void zt__cpu_unary_backward(zt_unop op, double s, const zt_tensor *x, const zt_tensor *y, const zt_tensor *g,
                            zt_tensor *gx) {
  int64_t n = zt_tensor_numel(g);
  const void *xp = x ? zt__tensor_ptr(x) : NULL, *yp = y ? zt__tensor_ptr(y) : NULL;
  if (g->dtype == ZT_DTYPE_F32)
    unary_bwd_f32(op, (float)s, xp, yp, zt__tensor_ptr(g), zt__tensor_ptr(gx), n);
  else
    unary_bwd_f64(op, s, xp, yp, zt__tensor_ptr(g), zt__tensor_ptr(gx), n);
}
