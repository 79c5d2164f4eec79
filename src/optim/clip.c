/* Global grad-norm clipping (torch.nn.utils.clip_grad_norm_ with the L2 norm). The norm
 * is a sum of squares in double over a fixed tree (blocks of BLOCK elements, summed in
 * parameter and block order), so it is bitwise the same for any thread count. */
#include <math.h>
#include <string.h>

#include "ops/cpu/kernels.h" /* ZT_PAR_MIN */
#include "optim/optim_internal.h"

#define BLOCK 8192 /* elements per partial sum */
#define GROUP 64   /* blocks per parallel region (partials live on the stack) */

/* Sum of squares of one block, in double, with 8 independent lanes (vectorisable, and a
 * fixed order). */
#define DEFINE_SUMSQ(T, SUF)                                                            \
  static double sumsq_##SUF(const T *restrict g, int64_t n) {                           \
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                           \
    int64_t i = 0;                                                                      \
    for (; i + 8 <= n; i += 8)                                                          \
      for (int j = 0; j < 8; j++) {                                                     \
        double x = (double)g[i + j];                                                    \
        acc[j] += x * x;                                                                \
      }                                                                                 \
    double tail = 0;                                                                    \
    for (; i < n; i++) {                                                                \
      double x = (double)g[i];                                                          \
      tail += x * x;                                                                    \
    }                                                                                   \
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail; \
  }                                                                                     \
  /* Sum of squares of g (n): blocks in parallel, partials added in block order. */     \
  static double tensor_sumsq_##SUF(const T *g, int64_t n) {                             \
    double total = 0;                                                                   \
    for (int64_t start = 0; start < n; start += (int64_t)BLOCK * GROUP) {               \
      int64_t len = n - start < (int64_t)BLOCK * GROUP ? n - start : (int64_t)BLOCK * GROUP; \
      int nb = (int)((len + BLOCK - 1) / BLOCK);                                        \
      double part[GROUP];                                                               \
      _Pragma("omp parallel for schedule(static) if (len > ZT_PAR_MIN)")                \
      for (int b = 0; b < nb; b++) {                                                    \
        int64_t lo = (int64_t)b * BLOCK, hi = lo + BLOCK < len ? lo + BLOCK : len;      \
        part[b] = sumsq_##SUF(g + start + lo, hi - lo);                                 \
      }                                                                                 \
      for (int b = 0; b < nb; b++) total += part[b];                                    \
    }                                                                                   \
    return total;                                                                       \
  }                                                                                     \
  /* g (n) *= s */                                                                      \
  static void scale_##SUF(T *restrict g, int64_t n, T s) {                              \
    _Pragma("omp parallel for simd schedule(static) if (n > ZT_PAR_MIN)")               \
    for (int64_t i = 0; i < n; i++) g[i] *= s;                                          \
  }

DEFINE_SUMSQ(float, f32)
DEFINE_SUMSQ(double, f64)

double zt__grad_sumsq_f32(const float *g, int64_t n) { return tensor_sumsq_f32(g, n); }
void zt__grad_scale_f32(float *g, int64_t n, float s) { scale_f32(g, n, s); }

zt_status zt_clip_grad_norm(int n_params, const zt_param *params, double max_norm, double *norm) {
  const char *fn = "zt_clip_grad_norm";
  if (!norm) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: norm (the output) is NULL", fn);
  *norm = 0;
  if (n_params < 0 || (n_params > 0 && !params))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: %d parameters with %s array: pass n_params >= 0 and an array of that "
                                         "many",
                  fn, n_params, params ? "an" : "a NULL");
  if (isnan(max_norm)) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: max_norm is NaN (use <= 0 for no clipping)", fn);
  /* Check every grad before touching any. */
  for (int i = 0; i < n_params; i++) {
    const zt_tensor *t = params[i].tensor;
    if (!t) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: parameter %d ('%s') has a NULL tensor", fn, i, params[i].name);
    const zt_tensor *g = t->grad;
    if (!g) continue; /* no grad: not part of the norm, like torch */
    if (g->dtype != ZT_DTYPE_F32 && g->dtype != ZT_DTYPE_F64)
      return ZT_ERR(ZT_STATUS_DTYPE, "%s: the grad of parameter '%s' is %s: f32 or f64 only", fn, params[i].name,
                    zt_dtype_name(g->dtype));
    if (!zt_tensor_is_contiguous(g))
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: the grad of parameter '%s' is not contiguous", fn, params[i].name);
    void *d;
    zt_status s = zt_tensor_data(g, &d);
    if (s) return zt__error_prefix(s, "%s: parameter '%s'", fn, params[i].name);
  }
  double ss = 0;
  for (int i = 0; i < n_params; i++) {
    const zt_tensor *g = params[i].tensor->grad;
    if (!g) continue;
    int64_t n = zt_tensor_numel(g);
    ss += g->dtype == ZT_DTYPE_F32 ? tensor_sumsq_f32(zt__tensor_ptr(g), n) : tensor_sumsq_f64(zt__tensor_ptr(g), n);
  }
  double total = sqrt(ss);
  *norm = total;
  /* A non-finite norm is reported, not applied (scaling by max/inf would zero the grads
   * and hide the blow-up): the caller decides whether to skip the step. */
  if (!(max_norm > 0) || !isfinite(total) || !(total > max_norm)) return ZT_OK;
  double coef = max_norm / (total + 1e-6);
  for (int i = 0; i < n_params; i++) {
    zt_tensor *g = params[i].tensor->grad;
    if (!g) continue;
    int64_t n = zt_tensor_numel(g);
    if (g->dtype == ZT_DTYPE_F32)
      scale_f32(zt__tensor_ptr(g), n, (float)coef);
    else
      scale_f64(zt__tensor_ptr(g), n, coef);
    zt_tensor_bump_version(g);
  }
  return ZT_OK;
}
