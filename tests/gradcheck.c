/* Finite-difference gradient check in f64. The scalar checked is sum(out * r) for a fixed
 * random r, so every output element contributes; analytic grads come from zt_grad (only
 * the checked inputs) and, separately, from zt_backward's accumulation into .grad. */
#include <stdlib.h>

#include "zt_test.h"

static double weighted_sum(const zt_tensor *out, const zt_tensor *r) {
  double acc = 0;
  int64_t n = zt_tensor_numel(out);
  for (int64_t i = 0; i < n; i++) acc += zt_tensor_get(out, i) * zt_tensor_get(r, i);
  return acc;
}

bool zt_gradcheck_at(const char *file, int line, zt_gc_fn fn, int n, zt_tensor *const *inputs, void *ud,
                     const zt_gc_opts *opts) {
  zt_gc_opts o = {1e-6, 1e-5, 1e-4};
  if (opts) o = *opts;
  int before = zt_test_failed_checks;
  zt_tensor *out = NULL;
  zt_status s = fn(inputs, &out, ud);
  if (s) {
    zt_test_fail(file, line, "gradcheck: forward failed: %s", zt_last_error());
    return false;
  }
  zt_tensor *r = zt_test_rand(out->ndim, out->shape, out->dtype, -1, 1, 1234);
  /* analytic via zt_grad, for the inputs that require grad */
  zt_tensor **req = calloc((size_t)n, sizeof *req);
  zt_tensor **g = calloc((size_t)n, sizeof *g);
  int nreq = 0;
  for (int i = 0; i < n; i++)
    if (inputs[i] && inputs[i]->requires_grad) req[nreq++] = inputs[i];
  if (!out->requires_grad) {
    zt_test_fail(file, line, "gradcheck: output does not require grad");
    goto done;
  }
  s = zt_grad(1, &out, &r, nreq, req, true, g);
  if (s) {
    zt_test_fail(file, line, "gradcheck: zt_grad failed: %s", zt_last_error());
    goto done;
  }
  /* zt_backward must accumulate the same values into .grad */
  s = zt_backward(1, &out, &r, false);
  if (s) {
    zt_test_fail(file, line, "gradcheck: zt_backward failed: %s", zt_last_error());
    goto done;
  }
  for (int k = 0; k < nreq; k++) {
    if (!g[k] || !req[k]->grad) {
      zt_test_fail(file, line, "gradcheck: no grad for checked input %d", k);
      continue;
    }
    double d = zt_test_max_abs_diff(g[k], req[k]->grad);
    if (d > 0) zt_test_fail(file, line, "gradcheck: zt_grad and zt_backward differ by %g for input %d", d, k);
  }
  zt_tensor_free(out);
  out = NULL;
  /* numeric */
  bool prev = zt_set_grad_enabled(false);
  for (int k = 0; k < nreq && zt_test_failed_checks == before; k++) {
    zt_tensor *x = req[k];
    int64_t m = zt_tensor_numel(x);
    for (int64_t j = 0; j < m; j++) {
      double v = zt_tensor_get(x, j);
      double f[2];
      for (int sgn = 0; sgn < 2; sgn++) {
        x->requires_grad = false;
        ZT_CHECK_OK(zt_tensor_set(x, j, v + (sgn ? -o.eps : o.eps)));
        x->requires_grad = true;
        zt_tensor *y = NULL;
        if (fn(inputs, &y, ud)) {
          zt_test_fail(file, line, "gradcheck: forward failed at a perturbed point: %s", zt_last_error());
          f[sgn] = NAN;
        } else {
          f[sgn] = weighted_sum(y, r);
        }
        zt_tensor_free(y);
      }
      x->requires_grad = false;
      ZT_CHECK_OK(zt_tensor_set(x, j, v));
      x->requires_grad = true;
      double num = (f[0] - f[1]) / (2 * o.eps);
      double ana = zt_tensor_get(g[k], j);
      if (!(fabs(num - ana) <= o.atol + o.rtol * fabs(num))) {
        zt_test_fail(file, line, "gradcheck: input %d element %lld: analytic %.10g, numeric %.10g", k, (long long)j, ana,
                     num);
        break;
      }
    }
  }
  zt_set_grad_enabled(prev);
done:
  for (int k = 0; k < nreq; k++) {
    zt_tensor_free(g[k]);
    zt_tensor_free(req[k]->grad);
    req[k]->grad = NULL;
  }
  zt_tensor_free(out);
  zt_tensor_free(r);
  free(req);
  free(g);
  return zt_test_failed_checks == before;
}
