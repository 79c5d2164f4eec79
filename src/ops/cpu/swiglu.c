/* Fused SwiGLU kernels: flat parallel loops over contiguous data. silu is x * sigmoid(x)
 * with the sigmoid the unary silu uses (fast_math.h in f32, libm's exp in f64), and every
 * expression is written as silu's and mul's kernels evaluate it, so results are bitwise
 * those of the unfused composition, whatever the thread count. */
#include <math.h>

#include "core/tensor_internal.h"
#include "fast_math.h"
#include "kernels.h"
#include "nn.h"

static inline double sigmoid_f64(double x) { return 1.0 / (1.0 + exp(-x)); }

#define ZT_DEFINE_SWIGLU(T, SUF, SIG)                                                                        \
  /* a u (n) -> o (n) = (a sig(a)) u */                                                                      \
  static void swiglu_##SUF(const T *restrict a, const T *restrict u, T *restrict o, int64_t n) {            \
    _Pragma("omp parallel for simd schedule(static) if (n > ZT_PAR_MIN)")                                    \
    for (int64_t i = 0; i < n; i++) {                                                                        \
      T x = a[i];                                                                                            \
      o[i] = (x * SIG(x)) * u[i];                                                                            \
    }                                                                                                        \
  }                                                                                                          \
  /* g a u (n) -> da (n) = (g u) silu'(a), du (n) = g silu(a); either may be NULL */                         \
  static void swiglu_bwd_##SUF(const T *restrict g, const T *restrict a, const T *restrict u,               \
                               T *restrict da, T *restrict du, int64_t n) {                                  \
    if (da && du) {                                                                                          \
      _Pragma("omp parallel for simd schedule(static) if (n > ZT_PAR_MIN)")                                  \
      for (int64_t i = 0; i < n; i++) {                                                                      \
        T x = a[i], sg = SIG(x);                                                                             \
        da[i] = (g[i] * u[i]) * (sg * (1 + x * (1 - sg)));                                                   \
        du[i] = g[i] * (x * sg);                                                                             \
      }                                                                                                      \
    } else if (da) {                                                                                         \
      _Pragma("omp parallel for simd schedule(static) if (n > ZT_PAR_MIN)")                                  \
      for (int64_t i = 0; i < n; i++) {                                                                      \
        T x = a[i], sg = SIG(x);                                                                             \
        da[i] = (g[i] * u[i]) * (sg * (1 + x * (1 - sg)));                                                   \
      }                                                                                                      \
    } else if (du) {                                                                                         \
      _Pragma("omp parallel for simd schedule(static) if (n > ZT_PAR_MIN)")                                  \
      for (int64_t i = 0; i < n; i++) {                                                                      \
        T x = a[i];                                                                                          \
        du[i] = g[i] * (x * SIG(x));                                                                         \
      }                                                                                                      \
    }                                                                                                        \
  }

ZT_DEFINE_SWIGLU(float, f32, zt__sigmoidf)
ZT_DEFINE_SWIGLU(double, f64, sigmoid_f64)

static void *ptr_or_null(const zt_tensor *t) { return t ? zt__tensor_ptr(t) : NULL; }

void zt__cpu_swiglu(const zt_tensor *gate, const zt_tensor *up, zt_tensor *out) {
  int64_t n = zt_tensor_numel(gate);
  if (gate->dtype == ZT_DTYPE_F32)
    swiglu_f32(zt__tensor_ptr(gate), zt__tensor_ptr(up), zt__tensor_ptr(out), n);
  else
    swiglu_f64(zt__tensor_ptr(gate), zt__tensor_ptr(up), zt__tensor_ptr(out), n);
}

void zt__cpu_swiglu_backward(const zt_tensor *g, const zt_tensor *gate, const zt_tensor *up, zt_tensor *dgate,
                             zt_tensor *dup) {
  int64_t n = zt_tensor_numel(gate);
  if (gate->dtype == ZT_DTYPE_F32)
    swiglu_bwd_f32(zt__tensor_ptr(g), zt__tensor_ptr(gate), zt__tensor_ptr(up), ptr_or_null(dgate), ptr_or_null(dup),
                   n);
  else
    swiglu_bwd_f64(zt__tensor_ptr(g), zt__tensor_ptr(gate), zt__tensor_ptr(up), ptr_or_null(dgate), ptr_or_null(dup),
                   n);
}
