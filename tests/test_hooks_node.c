/* Node hooks: pre-hooks see and may replace a node's grad outputs; post-hooks see the grads
 * it produced (NULL where not needed) and got, and may replace the former. Removal, order
 * (tensor hooks first), and errors that stop backward. */
#include <stdlib.h>

#include "core/status_internal.h"
#include "zt_test.h"

typedef struct pre_rec {
  int calls;
  int n_grads;
  double first[4];
  double replace_with; /* != 0: replace every grad output with this constant */
  int id, *order, *n_order;
} pre_rec;

static zt_status pre_hook(zt_node *node, int n, zt_tensor **g, void *ud) {
  (void)node;
  pre_rec *r = ud;
  r->calls++;
  r->n_grads = n;
  for (int k = 0; k < n && k < 4; k++) r->first[k] = zt_tensor_get(g[k], 0);
  if (r->order) r->order[(*r->n_order)++] = r->id;
  if (r->replace_with != 0)
    for (int k = 0; k < n; k++) {
      zt_tensor *t = NULL;
      ZT_TRY(zt_tensor_full(g[k]->ndim, g[k]->shape, g[k]->dtype, ZT_CPU, r->replace_with, &t));
      zt_tensor_free(g[k]);
      g[k] = t;
    }
  return ZT_OK;
}

typedef struct post_rec {
  int calls, n_in, n_out;
  bool in_null[4];
  double in_first[4], out_first[4];
  double scale_inputs; /* != 0: replace grad inputs by grad * scale */
} post_rec;

static zt_status post_hook(zt_node *node, int n_in, zt_tensor **gin, int n_out, zt_tensor *const *gout, void *ud) {
  (void)node;
  post_rec *r = ud;
  r->calls++;
  r->n_in = n_in;
  r->n_out = n_out;
  for (int i = 0; i < n_in && i < 4; i++) {
    r->in_null[i] = gin[i] == NULL;
    r->in_first[i] = gin[i] ? zt_tensor_get(gin[i], 0) : NAN;
  }
  for (int k = 0; k < n_out && k < 4; k++) r->out_first[k] = zt_tensor_get(gout[k], 0);
  if (r->scale_inputs != 0)
    for (int i = 0; i < n_in; i++) {
      if (!gin[i]) continue;
      zt_tensor *t = NULL;
      ZT_TRY(zt_mul_scalar(gin[i], r->scale_inputs, &t));
      zt_tensor_free(gin[i]);
      gin[i] = t;
    }
  return ZT_OK;
}

static void test_pre_hook_sees_and_replaces(void) {
  int64_t shape[] = {3};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 1), *y = NULL, *z = NULL;
  ZT_CHECK_OK(zt_exp(x, &y));
  ZT_CHECK_OK(zt_mul_scalar(y, 3, &z));
  pre_rec r = {0};
  ZT_CHECK_OK(zt_node_register_pre_hook(y->grad_fn, pre_hook, &r, NULL));
  zt_tensor *g = zt_test_ones_like(z);
  ZT_CHECK_OK(zt_backward(1, &z, &g, true));
  ZT_CHECK(r.calls == 1 && r.n_grads == 1 && r.first[0] == 3);
  for (int64_t i = 0; i < 3; i++) ZT_CHECK_NEAR(zt_tensor_get(x->grad, i), 3 * exp(zt_tensor_get(x, i)), 1e-12);
  /* replace the grad output: ExpBackward now gets 0.5 */
  zt_tensor_free(x->grad);
  x->grad = NULL;
  r.replace_with = 0.5;
  ZT_CHECK_OK(zt_backward(1, &z, &g, false));
  ZT_CHECK(r.calls == 2 && r.first[0] == 3);
  for (int64_t i = 0; i < 3; i++) ZT_CHECK_NEAR(zt_tensor_get(x->grad, i), 0.5 * exp(zt_tensor_get(x, i)), 1e-12);
  zt_tensor *all[] = {x, y, z, g};
  zt_test_free_all(all, 4);
}

static void test_pre_hook_on_accumulator(void) {
  int64_t shape[] = {2};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F32, -1, 1, 2), *y = NULL;
  ZT_CHECK_OK(zt_mul_scalar(x, 7, &y));
  zt_node *acc = NULL;
  ZT_CHECK_OK(zt_tensor_grad_accumulator(x, &acc));
  pre_rec r = {.replace_with = 2};
  ZT_CHECK_OK(zt_node_register_pre_hook(acc, pre_hook, &r, NULL));
  zt_tensor *g = zt_test_ones_like(y);
  ZT_CHECK_OK(zt_backward(1, &y, &g, false));
  ZT_CHECK(r.calls == 1 && r.first[0] == 7 && zt_tensor_get(x->grad, 1) == 2);
  zt_tensor *all[] = {x, y, g};
  zt_test_free_all(all, 3);
}

/* A function with two outputs and three inputs (the middle one needs no grad). */
static zt_status two_forward(zt_node *ctx, int n_in, zt_tensor *const *in, int n_out, zt_tensor **out, void *ud) {
  (void)ctx, (void)n_in, (void)n_out, (void)ud;
  ZT_TRY(zt_add(in[0], in[2], &out[0]));
  return zt_sub(in[0], in[2], &out[1]);
}
static zt_status two_backward(zt_node *ctx, int n_out, zt_tensor *const *gout, int n_in, const bool *needs,
                              zt_tensor **gin) {
  (void)ctx, (void)n_out, (void)n_in;
  if (needs[0]) ZT_TRY(zt_add(gout[0], gout[1], &gin[0]));
  if (needs[2]) ZT_TRY(zt_sub(gout[0], gout[1], &gin[2]));
  return ZT_OK;
}
static const zt_function two_fn = {"Two", two_forward, two_backward};

static void test_post_hook_sees_grads(void) {
  int64_t shape[] = {2};
  zt_tensor *a = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 3);
  zt_tensor *b = zt_test_rand(1, shape, ZT_DTYPE_F64, -1, 1, 4);
  zt_tensor *c = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 5);
  zt_tensor *o[2] = {0}, *s = NULL, *t = NULL, *u = NULL;
  ZT_CHECK_OK(zt_function_apply(&two_fn, 3, (zt_tensor *[]){a, b, c}, 2, o, NULL));
  ZT_CHECK(!strcmp(zt_node_name(o[0]->grad_fn), "Two") && o[0]->grad_fn == o[1]->grad_fn);
  ZT_CHECK(o[0]->output_nr == 0 && o[1]->output_nr == 1);
  ZT_CHECK_OK(zt_mul_scalar(o[0], 2, &s));
  ZT_CHECK_OK(zt_mul_scalar(o[1], 5, &t));
  ZT_CHECK_OK(zt_add(s, t, &u));
  post_rec r = {0};
  pre_rec pr = {0};
  ZT_CHECK_OK(zt_node_register_post_hook(o[0]->grad_fn, post_hook, &r, NULL));
  ZT_CHECK_OK(zt_node_register_pre_hook(o[0]->grad_fn, pre_hook, &pr, NULL));
  zt_tensor *g = zt_test_ones_like(u);
  ZT_CHECK_OK(zt_backward(1, &u, &g, true));
  ZT_CHECK(pr.calls == 1 && pr.n_grads == 2 && pr.first[0] == 2 && pr.first[1] == 5);
  ZT_CHECK(r.calls == 1 && r.n_in == 3 && r.n_out == 2);
  ZT_CHECK(!r.in_null[0] && r.in_null[1] && !r.in_null[2]); /* b needs no grad */
  ZT_CHECK(r.in_first[0] == 7 && r.in_first[2] == -3);
  ZT_CHECK(r.out_first[0] == 2 && r.out_first[1] == 5);
  ZT_CHECK(zt_tensor_get(a->grad, 0) == 7 && zt_tensor_get(c->grad, 1) == -3);
  /* post-hooks may replace the grads the node produced */
  r.scale_inputs = 10;
  ZT_CHECK_OK(zt_backward(1, &u, &g, false));
  ZT_CHECK(zt_tensor_get(a->grad, 0) == 77 && zt_tensor_get(c->grad, 1) == -33);
  zt_tensor *all[] = {a, b, c, o[0], o[1], s, t, u, g};
  zt_test_free_all(all, 9);
}

/* An unused output still gets a (zero) grad in the pre-hook: entries are never NULL. */
static void test_pre_hook_zero_grads_for_unused_output(void) {
  int64_t shape[] = {2};
  zt_tensor *a = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 6);
  zt_tensor *c = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 7);
  zt_tensor *o[2] = {0}, *s = NULL;
  ZT_CHECK_OK(zt_function_apply(&two_fn, 3, (zt_tensor *[]){a, NULL, c}, 2, o, NULL));
  ZT_CHECK_OK(zt_mul_scalar(o[1], 4, &s));
  pre_rec pr = {0};
  ZT_CHECK_OK(zt_node_register_pre_hook(o[1]->grad_fn, pre_hook, &pr, NULL));
  zt_tensor *g = zt_test_ones_like(s);
  ZT_CHECK_OK(zt_backward(1, &s, &g, false));
  ZT_CHECK(pr.calls == 1 && pr.first[0] == 0 && pr.first[1] == 4);
  ZT_CHECK(zt_tensor_get(a->grad, 0) == 4 && zt_tensor_get(c->grad, 0) == -4);
  zt_tensor *all[] = {a, c, o[0], o[1], s, g};
  zt_test_free_all(all, 6);
}

static zt_status order_tensor_hook(const zt_tensor *grad, zt_tensor **rep, void *ud) {
  (void)grad, (void)rep;
  pre_rec *r = ud;
  r->order[(*r->n_order)++] = r->id;
  return ZT_OK;
}

static void test_order_and_removal(void) {
  int64_t shape[] = {2};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 8), *y = NULL;
  ZT_CHECK_OK(zt_tanh(x, &y));
  int order[16], n = 0;
  pre_rec p1 = {.id = 1, .order = order, .n_order = &n}, p2 = {.id = 2, .order = order, .n_order = &n};
  pre_rec th = {.id = 0, .order = order, .n_order = &n};
  post_rec q = {0};
  zt_hook_handle *h1 = NULL, *h2 = NULL, *hq = NULL;
  ZT_CHECK_OK(zt_node_register_pre_hook(y->grad_fn, pre_hook, &p1, &h1));
  ZT_CHECK_OK(zt_node_register_pre_hook(y->grad_fn, pre_hook, &p2, &h2));
  ZT_CHECK_OK(zt_node_register_post_hook(y->grad_fn, post_hook, &q, &hq));
  ZT_CHECK_OK(zt_tensor_register_hook(y, order_tensor_hook, &th, NULL)); /* registered last, runs first */
  zt_tensor *g = zt_test_ones_like(y);
  ZT_CHECK_OK(zt_backward(1, &y, &g, true));
  ZT_CHECK(n == 3 && order[0] == 0 && order[1] == 1 && order[2] == 2);
  ZT_CHECK(q.calls == 1);
  zt_hook_remove(h1);
  zt_hook_remove(hq);
  n = 0;
  ZT_CHECK_OK(zt_backward(1, &y, &g, true));
  ZT_CHECK(n == 2 && order[0] == 0 && order[1] == 2 && p1.calls == 1 && p2.calls == 2 && q.calls == 1);
  zt_tensor_free(y); /* the node goes; removing its remaining handle is still safe */
  zt_hook_remove(h2);
  zt_tensor_free(g);
  zt_tensor_free(x);
}

static zt_status failing_pre(zt_node *node, int n, zt_tensor **g, void *ud) {
  (void)n, (void)g, (void)ud;
  return ZT_ERR(ZT_STATUS_STATE, "pre-hook of %s refuses", zt_node_name(node));
}
static zt_status null_pre(zt_node *node, int n, zt_tensor **g, void *ud) {
  (void)node, (void)n, (void)ud;
  zt_tensor_free(g[0]);
  g[0] = NULL;
  return ZT_OK;
}
static zt_status reshape_pre(zt_node *node, int n, zt_tensor **g, void *ud) {
  (void)node, (void)n, (void)ud;
  zt_tensor_free(g[0]);
  g[0] = NULL;
  return zt_tensor_zeros(1, (int64_t[]){5}, ZT_DTYPE_F64, ZT_CPU, &g[0]);
}
static zt_status failing_post(zt_node *node, int n_in, zt_tensor **gin, int n_out, zt_tensor *const *gout, void *ud) {
  (void)node, (void)n_in, (void)gin, (void)n_out, (void)gout, (void)ud;
  return ZT_ERR(ZT_STATUS_STATE, "post-hook refuses");
}
static zt_status bad_shape_post(zt_node *node, int n_in, zt_tensor **gin, int n_out, zt_tensor *const *gout,
                                void *ud) {
  (void)node, (void)n_in, (void)n_out, (void)gout, (void)ud;
  zt_tensor_free(gin[0]);
  gin[0] = NULL;
  return zt_tensor_zeros(1, (int64_t[]){9}, ZT_DTYPE_F64, ZT_CPU, &gin[0]);
}

static void test_hook_errors(void) {
  int64_t shape[] = {2};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 9), *y = NULL;
  ZT_CHECK_OK(zt_exp(x, &y));
  zt_tensor *g = zt_test_ones_like(y);
  zt_hook_handle *h = NULL;
  struct {
    zt_node_pre_hook_fn pre;
    zt_node_post_hook_fn post;
    zt_status code;
    const char *msg;
  } cases[] = {
      {failing_pre, NULL, ZT_STATUS_STATE, "pre-hook of ExpBackward refuses"},
      {null_pre, NULL, ZT_STATUS_AUTOGRAD, "a pre-hook of ExpBackward left grad output 0 NULL"},
      {reshape_pre, NULL, ZT_STATUS_SHAPE, "replaced grad output 0 of shape (2,) (f64) with one of shape (5,) (f64)"},
      {NULL, failing_post, ZT_STATUS_STATE, "post-hook refuses"},
      {NULL, bad_shape_post, ZT_STATUS_AUTOGRAD, "ExpBackward returned a gradient of shape (9,) (f64) for input 0"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    if (cases[k].pre) ZT_CHECK_OK(zt_node_register_pre_hook(y->grad_fn, cases[k].pre, NULL, &h));
    if (cases[k].post) ZT_CHECK_OK(zt_node_register_post_hook(y->grad_fn, cases[k].post, NULL, &h));
    ZT_CHECK_ERR(zt_backward(1, &y, &g, true), cases[k].code, cases[k].msg);
    ZT_CHECK(x->grad == NULL);
    zt_hook_remove(h);
  }
  ZT_CHECK_OK(zt_backward(1, &y, &g, false));
  ZT_CHECK(x->grad != NULL);
  ZT_CHECK_ERR(zt_node_register_pre_hook(NULL, pre_hook, NULL, NULL), ZT_STATUS_INVALID_ARG, "node is NULL");
  ZT_CHECK_ERR(zt_node_register_post_hook(NULL, post_hook, NULL, NULL), ZT_STATUS_INVALID_ARG, "node is NULL");
  ZT_CHECK_ERR(zt_node_register_pre_hook(y->grad_fn, NULL, NULL, NULL), ZT_STATUS_INVALID_ARG, "hook function is NULL");
  zt_tensor *all[] = {x, y, g};
  zt_test_free_all(all, 3);
}

/* Pre-hooks do not run on nodes that zt_grad does not need. */
static void test_hooks_only_on_nodes_that_run(void) {
  int64_t shape[] = {2};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 10);
  zt_tensor *w = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 11);
  zt_tensor *ew = NULL, *y = NULL;
  ZT_CHECK_OK(zt_exp(w, &ew));
  ZT_CHECK_OK(zt_mul(x, ew, &y));
  pre_rec r = {0};
  ZT_CHECK_OK(zt_node_register_pre_hook(ew->grad_fn, pre_hook, &r, NULL));
  zt_tensor *g = zt_test_ones_like(y), *gx = NULL;
  ZT_CHECK_OK(zt_grad(1, &y, &g, 1, &x, true, &gx));
  ZT_CHECK(r.calls == 0);
  ZT_CHECK_OK(zt_backward(1, &y, &g, false));
  ZT_CHECK(r.calls == 1);
  zt_tensor *all[] = {x, w, ew, y, g, gx};
  zt_test_free_all(all, 6);
}

int main(void) {
  ZT_RUN(test_pre_hook_sees_and_replaces);
  ZT_RUN(test_pre_hook_on_accumulator);
  ZT_RUN(test_post_hook_sees_grads);
  ZT_RUN(test_pre_hook_zero_grads_for_unused_output);
  ZT_RUN(test_order_and_removal);
  ZT_RUN(test_hook_errors);
  ZT_RUN(test_hooks_only_on_nodes_that_run);
  return zt_test_finish();
}
