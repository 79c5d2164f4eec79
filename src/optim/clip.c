/* Global grad-norm clipping (torch.nn.utils.clip_grad_norm_ with the L2 norm). The norm
 * is a sum of squares in double over a fixed tree (the backend's sum_squares, summed in
 * parameter order), so it is bitwise the same for any thread count. */
#include <math.h>
#include <string.h>

#include "core/status_internal.h"
#include "core/backend.h"
#include "zt/optim.h"

/* Every grad present must be f32/f64, contiguous and materialised; checked before any is read. */
static zt_status check_grads(const char *fn, int n_params, const zt_param *params) {
  if (n_params < 0 || (n_params > 0 && !params))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: %d parameters with %s array: pass n_params >= 0 and an array of that "
                                         "many",
                  fn, n_params, params ? "an" : "a NULL");
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
    void *d; /* unused: zt_tensor_data only checks that the bytes exist (not released) */
    zt_status s = zt_tensor_data(g, &d);
    if (s) return zt__error_prefix(s, "%s: parameter '%s'", fn, params[i].name);
  }
  return ZT_OK;
}

/* Sum of squares of the grads present (checked), in parameter order. */
static double sum_squares(int n_params, const zt_param *params) {
  double sum = 0;
  for (int i = 0; i < n_params; i++) {
    const zt_tensor *g = params[i].tensor->grad;
    if (g) sum += zt__dev_sum_squares(g, 0, zt_tensor_numel(g)); /* the backend's fixed tree of blocks */
  }
  return sum;
}

static void scale_all(int n_params, const zt_param *params, double coef) {
  for (int i = 0; i < n_params; i++) {
    zt_tensor *g = params[i].tensor->grad;
    if (!g) continue;
    zt__dev_scale(g, coef);
    zt_tensor_bump_version(g);
  }
}

zt_status zt_grad_sum_squares(int n_params, const zt_param *params, double *ss) {
  if (!ss) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_grad_sum_squares: ss (the output) is NULL");
  *ss = 0;
  ZT_TRY(check_grads("zt_grad_sum_squares", n_params, params));
  *ss = sum_squares(n_params, params);
  return ZT_OK;
}

zt_status zt_grads_scale(int n_params, const zt_param *params, double coef) {
  ZT_TRY(check_grads("zt_grads_scale", n_params, params));
  scale_all(n_params, params, coef);
  return ZT_OK;
}

zt_status zt_clip_grad_norm(int n_params, const zt_param *params, double max_norm, double *norm) {
  const char *fn = "zt_clip_grad_norm";
  if (!norm) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: norm (the output) is NULL", fn);
  *norm = 0;
  if (isnan(max_norm)) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: max_norm is NaN (use <= 0 for no clipping)", fn);
  ZT_TRY(check_grads(fn, n_params, params)); /* every grad, before any is read */
  double total = sqrt(sum_squares(n_params, params));
  *norm = total;
  /* A non-finite norm is reported, not applied (scaling by max/inf would zero the grads
   * and hide the blow-up): the caller decides whether to skip the step. */
  if (max_norm > 0 && isfinite(total) && total > max_norm) scale_all(n_params, params, max_norm / (total + 1e-6));
  return ZT_OK;
}
