/* Tensor grad hooks: see a tensor's grad when it is computed (leaves and non-leaves), may
 * replace it (the engine owns the replacement), run in registration order on the chained
 * result, are removed by handle, and are seen by zt_grad captures as well as accumulation. */
#include <stdlib.h>

#include "core/status_internal.h"
#include "zt_test.h"

typedef struct rec {
  int calls;
  double first;    /* element 0 of the grad seen */
  double scale;    /* replace with grad * scale when != 0 */
  int id;
  int *order;      /* appends id */
  int *n_order;
} rec;

static zt_status rec_hook(const zt_tensor *grad, zt_tensor **replacement, void *ud) {
  rec *r = ud;
  r->calls++;
  r->first = zt_tensor_get(grad, 0);
  if (r->order) r->order[(*r->n_order)++] = r->id;
  if (r->scale != 0) {
    zt_tensor *g = (zt_tensor *)grad, *out = NULL;
    ZT_TRY(zt_mul_scalar(g, r->scale, &out));
    *replacement = out;
  }
  return ZT_OK;
}

static void test_leaf_hook(void) {
  int64_t shape[] = {3};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 1), *y = NULL;
  rec r = {0};
  ZT_CHECK_OK(zt_tensor_register_hook(x, rec_hook, &r, NULL));
  ZT_CHECK_OK(zt_mul_scalar(x, 3, &y));
  zt_tensor *g = zt_test_ones_like(y);
  ZT_CHECK_OK(zt_backward(1, &y, &g, true));
  ZT_CHECK(r.calls == 1 && r.first == 3);
  ZT_CHECK(zt_tensor_get(x->grad, 2) == 3);
  /* replacing: .grad receives the replacement */
  r.scale = 10;
  ZT_CHECK_OK(zt_backward(1, &y, &g, false));
  ZT_CHECK(r.calls == 2 && r.first == 3);
  ZT_CHECK(zt_tensor_get(x->grad, 0) == 33);
  zt_tensor_free(y);
  zt_tensor_free(g);
  zt_tensor_free(x);
}

static void test_nonleaf_hook(void) {
  int64_t shape[] = {4};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 2), *h = NULL, *y = NULL;
  ZT_CHECK_OK(zt_exp(x, &h));
  ZT_CHECK_OK(zt_mul_scalar(h, 2, &y));
  rec r = {.scale = 0.5};
  ZT_CHECK_OK(zt_tensor_register_hook(h, rec_hook, &r, NULL));
  zt_tensor *g = zt_test_ones_like(y);
  ZT_CHECK_OK(zt_backward(1, &y, &g, false));
  ZT_CHECK(r.calls == 1 && r.first == 2); /* grad of h = 2 */
  /* the replacement (grad * 0.5) flows on: x.grad = exp(x) */
  for (int64_t i = 0; i < 4; i++) ZT_CHECK_NEAR(zt_tensor_get(x->grad, i), exp(zt_tensor_get(x, i)), 1e-12);
  zt_tensor_free(h);
  zt_tensor_free(y);
  zt_tensor_free(g);
  zt_tensor_free(x);
}

static void test_hook_on_tensor_used_twice(void) {
  int64_t shape[] = {2};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 3), *h = NULL, *a = NULL, *b = NULL, *s = NULL;
  ZT_CHECK_OK(zt_mul_scalar(x, 1, &h));
  ZT_CHECK_OK(zt_mul_scalar(h, 2, &a));
  ZT_CHECK_OK(zt_mul_scalar(h, 5, &b));
  ZT_CHECK_OK(zt_add(a, b, &s));
  rec rh = {0}, rx = {0};
  ZT_CHECK_OK(zt_tensor_register_hook(h, rec_hook, &rh, NULL));
  ZT_CHECK_OK(zt_tensor_register_hook(x, rec_hook, &rx, NULL));
  zt_tensor *g = zt_test_ones_like(s);
  ZT_CHECK_OK(zt_backward(1, &s, &g, false));
  ZT_CHECK(rh.calls == 1 && rh.first == 7); /* once, with the summed grad */
  ZT_CHECK(rx.calls == 1 && rx.first == 7);
  zt_tensor *all[] = {x, h, a, b, s, g};
  for (int i = 0; i < 6; i++) zt_tensor_free(all[i]);
}

static void test_removal(void) {
  int64_t shape[] = {2};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F32, -1, 1, 4), *y = NULL;
  rec r1 = {.scale = 2}, r2 = {0};
  zt_hook_handle *h1 = NULL, *h2 = NULL;
  ZT_CHECK_OK(zt_tensor_register_hook(x, rec_hook, &r1, &h1));
  ZT_CHECK_OK(zt_tensor_register_hook(x, rec_hook, &r2, &h2));
  ZT_CHECK(h1 && h2 && h1 != h2);
  ZT_CHECK_OK(zt_exp(x, &y));
  zt_tensor *g = zt_test_ones_like(y);
  ZT_CHECK_OK(zt_backward(1, &y, &g, true));
  ZT_CHECK(r1.calls == 1 && r2.calls == 1);
  zt_hook_remove(h1);
  ZT_CHECK_OK(zt_backward(1, &y, &g, true));
  ZT_CHECK(r1.calls == 1 && r2.calls == 2);
  /* r2 now sees the unscaled grad */
  ZT_CHECK_NEAR(r2.first, exp(zt_tensor_get(x, 0)), 1e-6);
  zt_hook_remove(NULL); /* no-op */
  /* a hook on a non-leaf whose graph is gone: removing is still safe */
  zt_tensor *h = NULL;
  zt_hook_handle *hh = NULL;
  ZT_CHECK_OK(zt_tanh(x, &h));
  ZT_CHECK_OK(zt_tensor_register_hook(h, rec_hook, &r1, &hh));
  zt_tensor_free(h);
  zt_hook_remove(hh);
  zt_tensor_free(y);
  zt_tensor_free(x); /* x's accumulator goes with it */
  zt_hook_remove(h2);
  zt_tensor_free(g);
}

/* A hook that removes itself while running. */
typedef struct self_remove {
  zt_hook_handle *h;
  int calls;
} self_remove;
static zt_status self_removing_hook(const zt_tensor *grad, zt_tensor **rep, void *ud) {
  (void)grad, (void)rep;
  self_remove *s = ud;
  s->calls++;
  zt_hook_remove(s->h);
  s->h = NULL;
  return ZT_OK;
}

static void test_self_removal(void) {
  int64_t shape[] = {2};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F32, -1, 1, 5), *y = NULL;
  self_remove s = {0};
  ZT_CHECK_OK(zt_tensor_register_hook(x, self_removing_hook, &s, &s.h));
  ZT_CHECK_OK(zt_exp(x, &y));
  zt_tensor *g = zt_test_ones_like(y);
  ZT_CHECK_OK(zt_backward(1, &y, &g, true));
  ZT_CHECK_OK(zt_backward(1, &y, &g, false));
  ZT_CHECK(s.calls == 1);
  zt_tensor_free(y);
  zt_tensor_free(g);
  zt_tensor_free(x);
}

static void test_order_and_chaining(void) {
  int64_t shape[] = {2};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 6), *y = NULL;
  int order[8], n = 0;
  rec a = {.scale = 2, .id = 1, .order = order, .n_order = &n};
  rec b = {.scale = 3, .id = 2, .order = order, .n_order = &n};
  rec c = {.id = 3, .order = order, .n_order = &n};
  ZT_CHECK_OK(zt_mul_scalar(x, 1, &y));
  ZT_CHECK_OK(zt_tensor_register_hook(y, rec_hook, &a, NULL));
  ZT_CHECK_OK(zt_tensor_register_hook(y, rec_hook, &b, NULL));
  ZT_CHECK_OK(zt_tensor_register_hook(y, rec_hook, &c, NULL));
  zt_tensor *g = zt_test_ones_like(y);
  ZT_CHECK_OK(zt_backward(1, &y, &g, false));
  ZT_CHECK(n == 3 && order[0] == 1 && order[1] == 2 && order[2] == 3);
  ZT_CHECK(a.first == 1 && b.first == 2 && c.first == 6); /* each sees the previous replacement */
  ZT_CHECK(zt_tensor_get(x->grad, 0) == 6);
  zt_tensor_free(y);
  zt_tensor_free(g);
  zt_tensor_free(x);
}

/* zt_grad captures the grad after the hooks of the captured tensor ran. */
static void test_hooks_seen_by_zt_grad(void) {
  int64_t shape[] = {3};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 7), *h = NULL, *y = NULL;
  ZT_CHECK_OK(zt_exp(x, &h));
  ZT_CHECK_OK(zt_mul_scalar(h, 4, &y));
  rec rx = {.scale = 10}, rh = {.scale = 0.5};
  ZT_CHECK_OK(zt_tensor_register_hook(x, rec_hook, &rx, NULL));
  ZT_CHECK_OK(zt_tensor_register_hook(h, rec_hook, &rh, NULL));
  zt_tensor *g = zt_test_ones_like(y), *out[2] = {0};
  ZT_CHECK_OK(zt_grad(1, &y, &g, 2, (zt_tensor *[]){h, x}, false, out));
  ZT_CHECK(rx.calls == 1 && rh.calls == 1);
  for (int64_t i = 0; i < 3; i++) {
    ZT_CHECK(zt_tensor_get(out[0], i) == 2); /* 4, halved by h's hook */
    ZT_CHECK_NEAR(zt_tensor_get(out[1], i), 20 * exp(zt_tensor_get(x, i)), 1e-12);
  }
  ZT_CHECK(x->grad == NULL);
  zt_tensor *all[] = {x, h, y, g, out[0], out[1]};
  for (int i = 0; i < 6; i++) zt_tensor_free(all[i]);
}

/* Hooks may return any view: here a transposed view of a new buffer. */
static zt_status transposed_copy_hook(const zt_tensor *grad, zt_tensor **rep, void *ud) {
  (void)ud;
  zt_tensor *buf = NULL;
  ZT_TRY(zt_tensor_empty(2, (int64_t[]){grad->shape[1], grad->shape[0]}, grad->dtype, ZT_CPU, &buf));
  for (int64_t i = 0; i < grad->shape[0]; i++)
    for (int64_t j = 0; j < grad->shape[1]; j++)
      ZT_TRY(zt_tensor_set(buf, j * grad->shape[0] + i, -zt_tensor_get(grad, i * grad->shape[1] + j)));
  zt_status s = zt_tensor_alias(buf, rep);
  zt_tensor_free(buf);
  ZT_TRY(s);
  (*rep)->shape[0] = grad->shape[0], (*rep)->shape[1] = grad->shape[1];
  (*rep)->stride[0] = 1, (*rep)->stride[1] = grad->shape[0];
  return ZT_OK;
}

static void test_strided_replacement(void) {
  int64_t shape[] = {2, 3};
  zt_tensor *x = zt_test_rand_leaf(2, shape, ZT_DTYPE_F64, -1, 1, 8), *h = NULL, *y = NULL;
  ZT_CHECK_OK(zt_exp(x, &h));
  ZT_CHECK_OK(zt_tanh(h, &y));
  ZT_CHECK_OK(zt_tensor_register_hook(h, transposed_copy_hook, NULL, NULL));
  zt_tensor *r = zt_test_rand(2, shape, ZT_DTYPE_F64, -1, 1, 9);
  ZT_CHECK_OK(zt_backward(1, &y, &r, false));
  for (int64_t i = 0; i < 6; i++) {
    double hv = exp(zt_tensor_get(x, i)), t = tanh(hv);
    ZT_CHECK_NEAR(zt_tensor_get(x->grad, i), -zt_tensor_get(r, i) * (1 - t * t) * hv, 1e-12);
  }
  zt_tensor *all[] = {x, h, y, r};
  for (int i = 0; i < 4; i++) zt_tensor_free(all[i]);
}

static zt_status wrong_shape_hook(const zt_tensor *grad, zt_tensor **rep, void *ud) {
  (void)grad, (void)ud;
  return zt_tensor_zeros(1, (int64_t[]){7}, ZT_DTYPE_F64, ZT_CPU, rep);
}
static zt_status wrong_dtype_hook(const zt_tensor *grad, zt_tensor **rep, void *ud) {
  (void)ud;
  return zt_tensor_zeros(grad->ndim, grad->shape, ZT_DTYPE_F32, ZT_CPU, rep);
}
static zt_status failing_hook(const zt_tensor *grad, zt_tensor **rep, void *ud) {
  (void)ud;
  /* a replacement made before failing is freed by the engine */
  ZT_TRY(zt_tensor_zeros(grad->ndim, grad->shape, grad->dtype, ZT_CPU, rep));
  return ZT_ERR(ZT_STATUS_STATE, "hook says no");
}

static void test_hook_errors(void) {
  int64_t shape[] = {3};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 10), *c = NULL, *y = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(1, shape, ZT_DTYPE_F64, ZT_CPU, &c));
  ZT_CHECK_ERR(zt_tensor_register_hook(c, rec_hook, NULL, NULL), ZT_STATUS_AUTOGRAD,
               "cannot register a hook on a tensor that does not require grad");
  ZT_CHECK_ERR(zt_tensor_register_hook(x, NULL, NULL, NULL), ZT_STATUS_INVALID_ARG, "hook function is NULL");
  ZT_CHECK_ERR(zt_tensor_register_hook(NULL, rec_hook, NULL, NULL), ZT_STATUS_INVALID_ARG, "NULL");
  zt_tensor *g = zt_test_ones_like(x);
  zt_hook_handle *h = NULL;
  ZT_CHECK_OK(zt_exp(x, &y));
  ZT_CHECK_OK(zt_tensor_register_hook(y, wrong_shape_hook, NULL, &h));
  ZT_CHECK_ERR(zt_backward(1, &y, &g, true), ZT_STATUS_SHAPE,
               "a tensor grad hook replaced a grad of shape (3,) (f64) with one of shape (7,) (f64)");
  zt_hook_remove(h);
  ZT_CHECK_OK(zt_tensor_register_hook(y, wrong_dtype_hook, NULL, &h));
  ZT_CHECK_ERR(zt_backward(1, &y, &g, true), ZT_STATUS_SHAPE, "same shape and dtype");
  zt_hook_remove(h);
  ZT_CHECK_OK(zt_tensor_register_hook(x, failing_hook, NULL, &h));
  ZT_CHECK_ERR(zt_backward(1, &y, &g, true), ZT_STATUS_STATE, "hook says no");
  ZT_CHECK(x->grad == NULL);
  zt_hook_remove(h);
  ZT_CHECK_OK(zt_backward(1, &y, &g, false));
  ZT_CHECK(x->grad != NULL);
  zt_tensor *all[] = {x, c, y, g};
  for (int i = 0; i < 4; i++) zt_tensor_free(all[i]);
}

int main(void) {
  ZT_RUN(test_leaf_hook);
  ZT_RUN(test_nonleaf_hook);
  ZT_RUN(test_hook_on_tensor_used_twice);
  ZT_RUN(test_removal);
  ZT_RUN(test_self_removal);
  ZT_RUN(test_order_and_chaining);
  ZT_RUN(test_hooks_seen_by_zt_grad);
  ZT_RUN(test_strided_replacement);
  ZT_RUN(test_hook_errors);
  return zt_test_finish();
}
