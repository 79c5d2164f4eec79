/* The backward engine: dependency counting, roots and implicit root grads, retain_graph,
 * zt_grad (requested/non-leaf/unreachable inputs), grad mode, graph lifetime (deep chains
 * too), needs-input-grad mask, task ids, reverse-seq_nr order, and in-place checks. */
#include <stdlib.h>

#include "core/status_internal.h"
#include "zt_test.h"

/* ------------------------------------------------ a probe function: y = x (copy),
 * backward passes the grad through and records what it was asked */
typedef struct probe {
  int forwards, backwards;
  bool needs_fwd[4], needs_bwd[4];
  int64_t order_seq; /* seq_nr when backward ran */
} probe;

static zt_status probe_forward(zt_node *ctx, int n_in, zt_tensor *const *in, int n_out, zt_tensor **out, void *ud) {
  probe *p = ud;
  p->forwards++;
  for (int i = 0; i < n_in && i < 4; i++) p->needs_fwd[i] = zt_fn_ctx_needs_input_grad(ctx, i);
  zt_fn_ctx_set_data(ctx, p, NULL);
  for (int k = 0; k < n_out; k++) {
    zt_tensor *src = in[0] ? in[0] : in[1];
    ZT_TRY(zt_tensor_clone_data(src, ZT_MEM_TAG_ACTIVATION, &out[k]));
  }
  return ZT_OK;
}

static zt_status probe_backward(zt_node *ctx, int n_out, zt_tensor *const *gout, int n_in, const bool *needs,
                                zt_tensor **gin) {
  probe *p = zt_fn_ctx_data(ctx);
  p->backwards++;
  p->order_seq = zt_node_seq_nr(ctx);
  for (int i = 0; i < n_in && i < 4; i++) p->needs_bwd[i] = needs[i];
  for (int i = 0; i < n_in; i++) {
    if (!needs[i]) continue;
    ZT_TRY(zt_tensor_clone_data(gout[0], ZT_MEM_TAG_TEMP, &gin[i]));
    for (int k = 1; k < n_out; k++) {
      zt_tensor *t = NULL;
      ZT_TRY(zt_add(gin[i], gout[k], &t));
      zt_tensor_free(gin[i]);
      gin[i] = t;
    }
  }
  return ZT_OK;
}
static const zt_function probe_fn = {"Probe", probe_forward, probe_backward};

static zt_tensor *probe1(zt_tensor *x, probe *p) {
  zt_tensor *y = NULL;
  ZT_CHECK_OK(zt_function_apply(&probe_fn, 1, &x, 1, &y, p));
  return y;
}

/* ------------------------------------------------ counting pre-hooks on every node */
typedef struct visit_log {
  int n;
  int64_t seq[256];
  const char *name[256];
} visit_log;

static zt_status log_pre_hook(zt_node *node, int n, zt_tensor **g, void *ud) {
  (void)n, (void)g;
  visit_log *l = ud;
  if (l->n < 256) {
    l->seq[l->n] = zt_node_seq_nr(node);
    l->name[l->n] = zt_node_name(node);
    l->n++;
  }
  return ZT_OK;
}

/* Register log_pre_hook on every node reachable from root (each once). */
static void hook_all(zt_node *root, visit_log *l) {
  zt_node *stack[256], *seen[256];
  int sp = 0, ns = 0;
  stack[sp++] = root;
  while (sp) {
    zt_node *n = stack[--sp];
    bool dup = false;
    for (int i = 0; i < ns; i++) dup |= seen[i] == n;
    if (dup) continue;
    seen[ns++] = n;
    ZT_CHECK_OK(zt_node_register_pre_hook(n, log_pre_hook, l, NULL));
    for (int i = 0; i < zt_node_n_next(n); i++) {
      zt_node *m = zt_node_next(n, i, NULL);
      if (m) stack[sp++] = m;
    }
  }
}

static int count_name(const visit_log *l, const char *name) {
  int c = 0;
  for (int i = 0; i < l->n; i++) c += !strcmp(l->name[i], name);
  return c;
}

/* ------------------------------------------------ tests */
static void test_diamond(void) {
  int64_t shape[] = {5};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 1);
  zt_tensor *a = NULL, *b = NULL, *c = NULL, *d = NULL;
  ZT_CHECK_OK(zt_exp(x, &a));
  ZT_CHECK_OK(zt_tanh(a, &b));
  ZT_CHECK_OK(zt_mul_scalar(a, 3, &c));
  ZT_CHECK_OK(zt_add(b, c, &d));
  visit_log log = {0};
  hook_all(d->grad_fn, &log);
  zt_tensor *g = zt_test_ones_like(d);
  ZT_CHECK_OK(zt_backward(1, &d, &g, false));
  /* each node ran exactly once: ExpBackward waited for both branches */
  ZT_CHECK(log.n == 5);
  ZT_CHECK(count_name(&log, "ExpBackward") == 1 && count_name(&log, "AccumulateGrad") == 1);
  ZT_CHECK(count_name(&log, "AddBackward") == 1 && count_name(&log, "TanhBackward") == 1);
  for (int64_t i = 0; i < 5; i++) {
    double xv = zt_tensor_get(x, i), av = exp(xv), tb = tanh(av);
    ZT_CHECK_NEAR(zt_tensor_get(x->grad, i), av * (1 - tb * tb + 3), 1e-12);
  }
  zt_tensor *all[] = {x, a, b, c, d, g};
  zt_test_free_all(all, 6);
}

static void test_tensor_used_twice(void) {
  int64_t shape[] = {4};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -2, 2, 2);
  zt_tensor *y = NULL, *z = NULL, *s = NULL;
  ZT_CHECK_OK(zt_mul(x, x, &y));   /* dy/dx = 2x */
  ZT_CHECK_OK(zt_add(x, x, &z));   /* dz/dx = 2 */
  ZT_CHECK_OK(zt_add(y, z, &s));
  zt_tensor *g = zt_test_ones_like(s);
  ZT_CHECK_OK(zt_backward(1, &s, &g, false));
  for (int64_t i = 0; i < 4; i++) ZT_CHECK_NEAR(zt_tensor_get(x->grad, i), 2 * zt_tensor_get(x, i) + 2, 1e-12);
  /* the same node twice as edges of one node */
  ZT_CHECK(zt_node_next(y->grad_fn, 0, NULL) == zt_node_next(y->grad_fn, 1, NULL));
  zt_tensor *all[] = {x, y, z, s, g};
  zt_test_free_all(all, 5);
}

static void test_multiple_roots(void) {
  int64_t shape[] = {3};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 3);
  zt_tensor *w = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 4);
  zt_tensor *h = NULL, *y1 = NULL, *y2 = NULL;
  ZT_CHECK_OK(zt_mul(x, w, &h));
  ZT_CHECK_OK(zt_exp(h, &y1));       /* root 1 */
  ZT_CHECK_OK(zt_mul_scalar(h, 5, &y2)); /* root 2 */
  zt_tensor *g1 = zt_test_ones_like(y1), *g2 = NULL;
  ZT_CHECK_OK(zt_tensor_full(1, shape, ZT_DTYPE_F64, ZT_CPU, 2, &g2));
  ZT_CHECK_OK(zt_backward(2, (zt_tensor *[]){y1, y2}, (zt_tensor *[]){g1, g2}, false));
  for (int64_t i = 0; i < 3; i++) {
    double hv = zt_tensor_get(x, i) * zt_tensor_get(w, i), dh = exp(hv) + 10;
    ZT_CHECK_NEAR(zt_tensor_get(x->grad, i), dh * zt_tensor_get(w, i), 1e-12);
    ZT_CHECK_NEAR(zt_tensor_get(w->grad, i), dh * zt_tensor_get(x, i), 1e-12);
  }
  zt_tensor_free(x->grad);
  x->grad = NULL;
  /* one root an ancestor of the other: h and y1 = exp(h); both grads reach h */
  zt_tensor *h2 = NULL, *e2 = NULL;
  ZT_CHECK_OK(zt_mul(x, w, &h2));
  ZT_CHECK_OK(zt_exp(h2, &e2));
  ZT_CHECK_OK(zt_backward(2, (zt_tensor *[]){h2, e2}, (zt_tensor *[]){g2, g1}, false));
  for (int64_t i = 0; i < 3; i++) {
    double hv = zt_tensor_get(x, i) * zt_tensor_get(w, i);
    ZT_CHECK_NEAR(zt_tensor_get(x->grad, i), (2 + exp(hv)) * zt_tensor_get(w, i), 1e-12);
  }
  /* a root listed twice counts twice */
  zt_tensor_free(x->grad);
  x->grad = NULL;
  zt_tensor *y3 = NULL;
  ZT_CHECK_OK(zt_mul_scalar(x, 1, &y3));
  ZT_CHECK_OK(zt_backward(2, (zt_tensor *[]){y3, y3}, (zt_tensor *[]){g1, g2}, false));
  ZT_CHECK(zt_tensor_get(x->grad, 0) == 3);
  zt_tensor *all[] = {x, w, h, y1, y2, g1, g2, h2, e2, y3};
  zt_test_free_all(all, 10);
}

static void test_implicit_root_grad(void) {
  int64_t shape[] = {2, 2};
  zt_tensor *x = zt_test_rand_leaf(2, shape, ZT_DTYPE_F32, -1, 1, 5);
  zt_tensor *y = NULL;
  ZT_CHECK_OK(zt_mul_scalar(x, 2, &y));
  ZT_CHECK_ERR(zt_backward(1, &y, NULL, false), ZT_STATUS_AUTOGRAD,
               "a grad can be created implicitly only for outputs with one element; output 0 has shape (2, 2)");
  ZT_CHECK_ERR(zt_backward(1, &y, (zt_tensor *[]){NULL}, false), ZT_STATUS_AUTOGRAD, "pass its grad");
  zt_tensor *bad = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(1, (int64_t[]){4}, ZT_DTYPE_F32, ZT_CPU, &bad));
  ZT_CHECK_ERR(zt_backward(1, &y, &bad, false), ZT_STATUS_SHAPE,
               "the grad of output 0 has shape (4,) but the output has shape (2, 2)");
  ZT_CHECK(x->grad == NULL);
  /* one-element roots of any rank get 1; the leaf itself can be a root */
  zt_tensor *s = zt_test_rand_leaf(3, (int64_t[]){1, 1, 1}, ZT_DTYPE_F64, 0, 1, 6), *t = NULL;
  ZT_CHECK_OK(zt_pow(s, 3, &t));
  ZT_CHECK_OK(zt_backward(1, &t, NULL, false));
  double sv = zt_tensor_get(s, 0);
  ZT_CHECK_NEAR(zt_tensor_get(s->grad, 0), 3 * sv * sv, 1e-12);
  zt_tensor_free(s->grad);
  s->grad = NULL;
  ZT_CHECK_OK(zt_backward(1, &s, NULL, false));
  ZT_CHECK(zt_tensor_get(s->grad, 0) == 1);
  /* a root grad of another dtype is converted */
  zt_tensor *g64 = NULL;
  ZT_CHECK_OK(zt_tensor_full(2, shape, ZT_DTYPE_F64, ZT_CPU, 0.5, &g64));
  ZT_CHECK_OK(zt_backward(1, &y, &g64, false));
  ZT_CHECK(x->grad->dtype == ZT_DTYPE_F32 && zt_tensor_get(x->grad, 3) == 1.0);
  /* bad root lists */
  ZT_CHECK_ERR(zt_backward(0, &y, NULL, false), ZT_STATUS_INVALID_ARG, "no output tensors given");
  ZT_CHECK_ERR(zt_backward(1, (zt_tensor *[]){NULL}, NULL, false), ZT_STATUS_INVALID_ARG, "output 0 is NULL");
  zt_tensor *all[] = {x, y, bad, s, t, g64};
  zt_test_free_all(all, 6);
}

static void test_retain_graph_and_second_backward(void) {
  int64_t shape[] = {3};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, 0.5, 1, 7);
  zt_tensor *y = NULL, *z = NULL;
  ZT_CHECK_OK(zt_exp(x, &y));   /* saves its output */
  ZT_CHECK_OK(zt_mul(y, y, &z)); /* saves both inputs */
  zt_tensor *g = zt_test_ones_like(z);
  ZT_CHECK_OK(zt_backward(1, &z, &g, true));
  ZT_CHECK_OK(zt_backward(1, &z, &g, true)); /* grads accumulate */
  for (int64_t i = 0; i < 3; i++) ZT_CHECK_NEAR(zt_tensor_get(x->grad, i), 2 * 2 * exp(2 * zt_tensor_get(x, i)), 1e-9);
  ZT_CHECK_OK(zt_backward(1, &z, &g, false)); /* frees the saved tensors */
  ZT_CHECK(zt_node_n_saved(z->grad_fn) == 0);
  ZT_CHECK_ERR(zt_backward(1, &z, &g, false), ZT_STATUS_AUTOGRAD, "backward through the graph a second time");
  ZT_CHECK_ERR(zt_backward(1, &z, &g, true), ZT_STATUS_AUTOGRAD, "retain_graph=true");
  /* zt_grad frees them too */
  zt_tensor *w = NULL, *gx = NULL;
  ZT_CHECK_OK(zt_exp(x, &w));
  zt_tensor *gw = zt_test_ones_like(w);
  ZT_CHECK_OK(zt_grad(1, &w, &gw, 1, &x, false, &gx));
  zt_tensor_free(gx);
  gx = (zt_tensor *)0x1;
  ZT_CHECK_ERR(zt_grad(1, &w, &gw, 1, &x, false, &gx), ZT_STATUS_AUTOGRAD, "a second time");
  ZT_CHECK(gx == NULL); /* cleared on failure */
  zt_tensor *all[] = {x, y, z, g, w, gw};
  zt_test_free_all(all, 6);
}

static void test_zt_grad_partial(void) {
  int64_t shape[] = {4};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 8);
  zt_tensor *w = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 9);
  probe pw = {0}, px = {0};
  zt_tensor *wp = probe1(w, &pw), *xp = probe1(x, &px);
  zt_tensor *h = NULL, *y = NULL;
  ZT_CHECK_OK(zt_mul(xp, wp, &h));
  ZT_CHECK_OK(zt_tanh(h, &y));
  zt_tensor *g = zt_test_ones_like(y), *gx = NULL;
  ZT_CHECK_OK(zt_grad(1, &y, &g, 1, &x, true, &gx));
  ZT_CHECK(gx != NULL && gx->requires_grad == false && gx->grad_fn == NULL);
  ZT_CHECK(x->grad == NULL && w->grad == NULL); /* nothing accumulated */
  ZT_CHECK(px.backwards == 1 && pw.backwards == 0); /* the w branch did not run */
  for (int64_t i = 0; i < 4; i++) {
    double hv = zt_tensor_get(x, i) * zt_tensor_get(w, i), th = tanh(hv);
    ZT_CHECK_NEAR(zt_tensor_get(gx, i), (1 - th * th) * zt_tensor_get(w, i), 1e-12);
  }
  /* both, in the caller's order, and the same input twice */
  zt_tensor *gs[3] = {NULL, NULL, NULL};
  ZT_CHECK_OK(zt_grad(1, &y, &g, 3, (zt_tensor *[]){w, x, w}, true, gs));
  ZT_CHECK(gs[0] && gs[1] && gs[2] && zt_test_max_abs_diff(gs[1], gx) == 0);
  ZT_CHECK(zt_test_max_abs_diff(gs[0], gs[2]) == 0 && gs[0] != gs[2]);
  ZT_CHECK(x->grad == NULL && w->grad == NULL);
  /* and zt_backward agrees with zt_grad */
  ZT_CHECK_OK(zt_backward(1, &y, &g, false));
  ZT_CHECK(zt_test_max_abs_diff(x->grad, gx) == 0 && zt_test_max_abs_diff(w->grad, gs[0]) == 0);
  /* errors */
  zt_tensor *c = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(1, shape, ZT_DTYPE_F64, ZT_CPU, &c));
  zt_tensor *y2 = NULL, *dummy = NULL;
  ZT_CHECK_OK(zt_mul(x, c, &y2));
  ZT_CHECK_ERR(zt_grad(1, &y2, &g, 1, &c, true, &dummy), ZT_STATUS_AUTOGRAD, "input 0 does not require grad");
  ZT_CHECK_ERR(zt_grad(1, &y2, &g, 0, &c, true, &dummy), ZT_STATUS_INVALID_ARG, "at least one input");
  ZT_CHECK_ERR(zt_grad(1, &y2, &g, 1, (zt_tensor *[]){NULL}, true, &dummy), ZT_STATUS_AUTOGRAD, "input 0 is NULL");
  ZT_CHECK(dummy == NULL);
  /* a root error: grads_out is cleared, never read */
  dummy = (zt_tensor *)0x1;
  ZT_CHECK_ERR(zt_grad(1, &c, &g, 1, &x, true, &dummy), ZT_STATUS_AUTOGRAD, "output 0 does not require grad");
  ZT_CHECK(dummy == NULL);
  zt_tensor *all[] = {x, w, wp, xp, h, y, g, gx, gs[0], gs[1], gs[2], c, y2};
  zt_test_free_all(all, 13);
}

static void test_zt_grad_nonleaf_and_unreachable(void) {
  int64_t shape[] = {3};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 10);
  zt_tensor *u = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 11); /* not used by z */
  zt_tensor *y = NULL, *z = NULL, *v = NULL;
  ZT_CHECK_OK(zt_exp(x, &y));
  ZT_CHECK_OK(zt_mul(y, y, &z));
  ZT_CHECK_OK(zt_exp(u, &v)); /* another graph */
  zt_tensor *g = zt_test_ones_like(z), *out[4] = {0};
  ZT_CHECK_OK(zt_grad(1, &z, &g, 4, (zt_tensor *[]){y, u, x, v}, true, out));
  ZT_CHECK(out[1] == NULL && out[3] == NULL);
  for (int64_t i = 0; i < 3; i++) {
    double yv = zt_tensor_get(y, i);
    ZT_CHECK_NEAR(zt_tensor_get(out[0], i), 2 * yv, 1e-12);
    ZT_CHECK_NEAR(zt_tensor_get(out[2], i), 2 * yv * yv, 1e-12);
  }
  /* the output itself as input: its grad is the grad given */
  zt_tensor *gz = NULL;
  ZT_CHECK_OK(zt_grad(1, &z, &g, 1, &z, true, &gz));
  ZT_CHECK(gz && zt_test_max_abs_diff(gz, g) == 0);
  ZT_CHECK(x->grad == NULL && u->grad == NULL);
  zt_tensor *all[] = {x, u, y, z, v, g, out[0], out[2], gz};
  zt_test_free_all(all, 9);
}

static void test_grad_mode_and_propagation(void) {
  int64_t shape[] = {3};
  zt_tensor *w = zt_test_rand_leaf(1, shape, ZT_DTYPE_F32, -1, 1, 12);
  zt_tensor *c = zt_test_rand(1, shape, ZT_DTYPE_F32, -1, 1, 13);
  zt_tensor *a = NULL, *b = NULL, *d = NULL, *e = NULL;
  ZT_CHECK(zt_grad_enabled());
  ZT_CHECK_OK(zt_add(w, c, &a));
  ZT_CHECK(a->requires_grad && a->grad_fn && !zt_tensor_is_leaf(a));
  ZT_CHECK(!strcmp(zt_node_name(a->grad_fn), "AddBackward"));
  ZT_CHECK_OK(zt_add(c, c, &b));
  ZT_CHECK(!b->requires_grad && !b->grad_fn && zt_tensor_is_leaf(b));
  ZT_CHECK(zt_tensor_grad_fn(b) == NULL && zt_tensor_grad_fn(a) == a->grad_fn);
  /* an input that needs no grad has no edge */
  ZT_CHECK_OK(zt_mul(c, w, &e));
  ZT_CHECK(zt_node_n_next(e->grad_fn) == 2 && zt_node_next(e->grad_fn, 0, NULL) == NULL);
  int nr = -1;
  zt_node *acc = zt_node_next(e->grad_fn, 1, &nr), *acc2 = NULL;
  ZT_CHECK(acc && nr == 0 && !strcmp(zt_node_name(acc), "AccumulateGrad"));
  ZT_CHECK_OK(zt_tensor_grad_accumulator(w, &acc2));
  ZT_CHECK(acc == acc2 && w->grad_acc == acc);
  ZT_CHECK(zt_node_next(e->grad_fn, 7, NULL) == NULL);
  ZT_CHECK_ERR(zt_tensor_grad_accumulator(c, &acc2), ZT_STATUS_AUTOGRAD, "only leaf tensors that require grad");
  ZT_CHECK_ERR(zt_tensor_grad_accumulator(a, &acc2), ZT_STATUS_AUTOGRAD, "only leaf tensors that require grad");
  /* grad mode off: nothing recorded, per thread, nestable */
  bool prev = zt_set_grad_enabled(false);
  ZT_CHECK(prev && !zt_grad_enabled());
  ZT_CHECK(zt_set_grad_enabled(false) == false);
  ZT_CHECK_OK(zt_exp(a, &d));
  ZT_CHECK(!d->requires_grad && !d->grad_fn);
  zt_set_grad_enabled(prev);
  ZT_CHECK(zt_grad_enabled());
  ZT_CHECK_ERR(zt_backward(1, &d, NULL, false), ZT_STATUS_AUTOGRAD, "output 0 does not require grad");
  zt_tensor *all[] = {w, c, a, b, d, e};
  zt_test_free_all(all, 6);
}

/* The graph lives exactly as long as its outputs; saved tensors and node data go with it. */
static int g_data_freed = 0;
static void count_free(void *p) {
  (void)p;
  g_data_freed++;
}
static zt_status keep_forward(zt_node *ctx, int n_in, zt_tensor *const *in, int n_out, zt_tensor **out, void *ud) {
  (void)n_in, (void)n_out, (void)ud;
  zt_fn_ctx_set_data(ctx, NULL, count_free);
  ZT_TRY(zt_node_save(ctx, in[0], NULL));
  return zt_tensor_clone_data(in[0], ZT_MEM_TAG_ACTIVATION, &out[0]);
}
static zt_status keep_backward(zt_node *ctx, int n_out, zt_tensor *const *gout, int n_in, const bool *needs,
                               zt_tensor **gin) {
  (void)ctx, (void)n_out, (void)n_in;
  if (needs[0]) return zt_tensor_clone_data(gout[0], ZT_MEM_TAG_TEMP, &gin[0]);
  return ZT_OK;
}
static const zt_function keep_fn = {"Keep", keep_forward, keep_backward};

static void test_graph_freed_with_outputs(void) {
  int64_t shape[] = {256};
  int64_t live0 = zt_test_live_bytes();
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F32, -1, 1, 14);
  zt_tensor *k = NULL, *y = NULL, *z = NULL;
  g_data_freed = 0;
  ZT_CHECK_OK(zt_function_apply(&keep_fn, 1, &x, 1, &k, NULL));
  ZT_CHECK_OK(zt_exp(k, &y)); /* saves y */
  ZT_CHECK_OK(zt_mul(y, k, &z)); /* saves y, k */
  int64_t live1 = zt_test_live_bytes();
  zt_tensor_free(k);
  zt_tensor_free(y);
  ZT_CHECK(zt_test_live_bytes() == live1); /* still saved by the graph */
  ZT_CHECK(g_data_freed == 0);
  zt_tensor_free(z); /* the last output: the whole graph goes */
  ZT_CHECK(g_data_freed == 1);
  ZT_CHECK(zt_test_live_bytes() == live0 + 1024); /* only x */
  /* without grad the node (and its data) goes right after forward */
  bool prev = zt_set_grad_enabled(false);
  ZT_CHECK_OK(zt_function_apply(&keep_fn, 1, &x, 1, &k, NULL));
  zt_set_grad_enabled(prev);
  ZT_CHECK(g_data_freed == 2 && !k->grad_fn);
  zt_tensor_free(k);
  /* the accumulator outlives a freed leaf without harm */
  ZT_CHECK_OK(zt_exp(x, &y));
  zt_tensor_free(x);
  zt_tensor *g = zt_test_ones_like(y);
  ZT_CHECK_OK(zt_backward(1, &y, &g, false)); /* no leaf to accumulate into: a no-op */
  zt_tensor_free(g);
  zt_tensor_free(y);
  ZT_CHECK(zt_test_live_bytes() == live0);
}

static void test_deep_chain(void) {
  int64_t shape[] = {2};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F32, -1, 1, 15);
  const int N = 100000;
  zt_tensor *y = NULL, *cur = x;
  for (int i = 0; i < N; i++) {
    ZT_CHECK_OK(zt_add_scalar(cur, 1e-3, &y));
    if (cur != x) zt_tensor_free(cur);
    cur = y;
  }
  zt_tensor *g = zt_test_ones_like(cur);
  ZT_CHECK_OK(zt_backward(1, &cur, &g, false));
  ZT_CHECK(x->grad && zt_tensor_get(x->grad, 1) == 1);
  zt_tensor *gx = NULL;
  ZT_CHECK_OK(zt_grad(1, &cur, &g, 1, &x, false, &gx));
  ZT_CHECK(gx && zt_tensor_get(gx, 0) == 1);
  zt_tensor_free(gx);
  zt_tensor_free(cur); /* frees 100000 nodes iteratively */
  /* and a chain freed without ever running backward, of ops that save tensors */
  cur = x;
  for (int i = 0; i < N; i++) {
    ZT_CHECK_OK(zt_mul(cur, x, &y));
    if (cur != x) zt_tensor_free(cur);
    cur = y;
  }
  zt_tensor_free(cur);
  zt_tensor_free(g);
  zt_tensor_free(x);
}

/* needs_input_grad: forward and backward see which inputs need grads, per call. */
static void test_needs_input_grad_mask(void) {
  int64_t shape[] = {3};
  zt_tensor *a = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 16);
  zt_tensor *b = zt_test_rand(1, shape, ZT_DTYPE_F64, -1, 1, 17);
  zt_tensor *c = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 18);
  probe p = {0};
  zt_tensor *y = NULL;
  ZT_CHECK_OK(zt_function_apply(&probe_fn, 4, (zt_tensor *[]){a, b, NULL, c}, 1, &y, &p));
  ZT_CHECK(p.needs_fwd[0] && !p.needs_fwd[1] && !p.needs_fwd[2] && p.needs_fwd[3]);
  zt_tensor *g = zt_test_ones_like(y), *gc = NULL;
  ZT_CHECK_OK(zt_grad(1, &y, &g, 1, &c, true, &gc));
  ZT_CHECK(p.backwards == 1 && !p.needs_bwd[0] && !p.needs_bwd[1] && !p.needs_bwd[2] && p.needs_bwd[3]);
  ZT_CHECK_OK(zt_backward(1, &y, &g, false));
  ZT_CHECK(p.backwards == 2 && p.needs_bwd[0] && !p.needs_bwd[1] && !p.needs_bwd[2] && p.needs_bwd[3]);
  ZT_CHECK(a->grad && c->grad && zt_tensor_get(a->grad, 0) == 1);
  /* a function whose inputs need no grad records nothing */
  probe q = {0};
  zt_tensor *y2 = NULL;
  ZT_CHECK_OK(zt_function_apply(&probe_fn, 1, &b, 1, &y2, &q));
  ZT_CHECK(q.forwards == 1 && !q.needs_fwd[0] && !y2->requires_grad && !y2->grad_fn);
  zt_tensor *all[] = {a, b, c, y, g, gc, y2};
  zt_test_free_all(all, 7);
}

static int64_t g_seen_task = -100;
static int64_t g_seen_nested = -100;
static zt_status task_hook(const zt_tensor *grad, zt_tensor **rep, void *ud) {
  (void)grad, (void)rep, (void)ud;
  g_seen_task = zt_autograd_graph_task_id();
  return ZT_OK;
}
static zt_status nested_hook(const zt_tensor *grad, zt_tensor **rep, void *ud) {
  (void)rep;
  int64_t outer = zt_autograd_graph_task_id();
  /* a nested backward is its own task; the outer id comes back afterwards */
  zt_tensor *x = ud, *y = NULL, *gx = NULL;
  bool prev = zt_set_grad_enabled(true);
  zt_status s = zt_exp(x, &y);
  zt_set_grad_enabled(prev);
  ZT_TRY(s);
  zt_tensor *g = NULL;
  ZT_TRY(zt_tensor_full(y->ndim, y->shape, y->dtype, ZT_CPU, 1, &g));
  s = zt_grad(1, &y, &g, 1, &x, false, &gx);
  zt_tensor_free(gx);
  zt_tensor_free(g);
  zt_tensor_free(y);
  (void)grad;
  g_seen_nested = zt_autograd_graph_task_id() == outer ? outer : -200;
  return s;
}
static zt_status record_task_in_backward(const zt_tensor *grad, zt_tensor **rep, void *ud) {
  (void)grad, (void)rep;
  *(int64_t *)ud = zt_autograd_graph_task_id();
  return ZT_OK;
}

static void test_graph_task_id(void) {
  ZT_CHECK(zt_autograd_graph_task_id() == -1);
  int64_t shape[] = {2};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 19), *y = NULL;
  ZT_CHECK_OK(zt_exp(x, &y));
  ZT_CHECK_OK(zt_tensor_register_hook(y, task_hook, NULL, NULL));
  zt_tensor *g = zt_test_ones_like(y);
  ZT_CHECK_OK(zt_backward(1, &y, &g, true));
  int64_t first = g_seen_task;
  ZT_CHECK(first >= 0 && zt_autograd_graph_task_id() == -1);
  ZT_CHECK_OK(zt_backward(1, &y, &g, true));
  ZT_CHECK(g_seen_task >= 0 && g_seen_task != first);
  /* nested */
  zt_tensor *x2 = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 20), *y2 = NULL;
  ZT_CHECK_OK(zt_mul_scalar(x, 2, &y2));
  int64_t inner_task = -5;
  ZT_CHECK_OK(zt_tensor_register_hook(x2, record_task_in_backward, &inner_task, NULL));
  ZT_CHECK_OK(zt_tensor_register_hook(y2, nested_hook, x2, NULL));
  g_seen_nested = -100;
  ZT_CHECK_OK(zt_backward(1, &y2, &g, false));
  ZT_CHECK(g_seen_nested >= 0);
  ZT_CHECK(inner_task >= 0 && inner_task != g_seen_nested);
  ZT_CHECK(zt_autograd_graph_task_id() == -1);
  zt_tensor *all[] = {x, y, g, x2, y2};
  zt_test_free_all(all, 5);
}

static void test_execution_order(void) {
  int64_t shape[] = {3};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, 0.1, 1, 21);
  zt_tensor *w = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, 0.1, 1, 22);
  zt_tensor *t[8] = {0};
  ZT_CHECK_OK(zt_exp(x, &t[0]));
  ZT_CHECK_OK(zt_tanh(w, &t[1]));
  ZT_CHECK_OK(zt_mul(t[0], t[1], &t[2]));
  ZT_CHECK_OK(zt_log(t[0], &t[3]));
  ZT_CHECK_OK(zt_sqrt(t[1], &t[4]));
  ZT_CHECK_OK(zt_add(t[3], t[4], &t[5]));
  ZT_CHECK_OK(zt_sub(t[5], t[2], &t[6]));
  ZT_CHECK_OK(zt_gelu(t[6], &t[7]));
  visit_log log = {0};
  hook_all(t[7]->grad_fn, &log);
  zt_tensor *g = zt_test_ones_like(t[7]);
  ZT_CHECK_OK(zt_backward(1, &t[7], &g, false));
  ZT_CHECK(log.n == 10); /* 8 ops + 2 accumulators */
  int64_t last = INT64_MAX;
  int ops = 0;
  for (int i = 0; i < log.n; i++) {
    if (!strcmp(log.name[i], "AccumulateGrad")) continue;
    ZT_CHECK(log.seq[i] < last); /* strictly decreasing: the reverse of creation */
    last = log.seq[i];
    ops++;
  }
  ZT_CHECK(ops == 8);
  ZT_CHECK(!strcmp(log.name[0], "GeluBackward"));
  /* and seq numbers increase in creation order */
  for (int i = 1; i < 8; i++) ZT_CHECK(zt_node_seq_nr(t[i]->grad_fn) > zt_node_seq_nr(t[i - 1]->grad_fn));
  zt_tensor_free(g);
  zt_test_free_all(t, 8);
  zt_tensor_free(x);
  zt_tensor_free(w);
}

static void test_inplace_after_save(void) {
  int64_t shape[] = {3};
  zt_tensor *w = zt_test_rand_leaf(1, shape, ZT_DTYPE_F32, -1, 1, 23);
  zt_tensor *a = zt_test_rand(1, shape, ZT_DTYPE_F32, -1, 1, 24);
  zt_tensor *y = NULL;
  ZT_CHECK_OK(zt_mul(w, a, &y));
  ZT_CHECK_OK(zt_tensor_fill_(a, 2)); /* a needs no grad: allowed, but it was saved */
  zt_tensor *g = zt_test_ones_like(y);
  ZT_CHECK_ERR(zt_backward(1, &y, &g, true), ZT_STATUS_AUTOGRAD,
               "one of the tensors needed for gradient computation has been modified by an in-place operation");
  ZT_CHECK_ERR(zt_backward(1, &y, &g, true), ZT_STATUS_AUTOGRAD, "saved tensor 0 of MulBackward, shape (3,)");
  ZT_CHECK(w->grad == NULL);
  zt_tensor_free(y);
  /* through an alias (shared version counter) and an output saved by exp */
  zt_tensor *e = NULL, *al = NULL;
  ZT_CHECK_OK(zt_exp(w, &e));
  bool prev = zt_set_grad_enabled(false);
  ZT_CHECK_OK(zt_tensor_alias(e, &al));
  ZT_CHECK_OK(zt_tensor_set(al, 0, 5));
  zt_set_grad_enabled(prev);
  ZT_CHECK_ERR(zt_backward(1, &e, &g, false), ZT_STATUS_AUTOGRAD, "modified by an in-place operation");
  zt_tensor_free(al);
  zt_tensor_free(e);
  /* ops that save nothing do not care */
  ZT_CHECK_OK(zt_add(w, a, &y));
  ZT_CHECK_OK(zt_tensor_fill_(a, 3));
  ZT_CHECK_OK(zt_backward(1, &y, &g, false));
  ZT_CHECK(zt_tensor_get(w->grad, 0) == 1);
  zt_tensor *all[] = {w, a, y, g};
  zt_test_free_all(all, 4);
}

static void test_inplace_on_leaf_requiring_grad(void) {
  int64_t shape[] = {3};
  zt_tensor *w = zt_test_rand_leaf(1, shape, ZT_DTYPE_F32, -1, 1, 25), *src = NULL, *y = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(1, shape, ZT_DTYPE_F32, ZT_CPU, &src));
  ZT_CHECK_ERR(zt_tensor_fill_(w, 0), ZT_STATUS_AUTOGRAD,
               "zt_tensor_fill_: a tensor that requires grad is used in an in-place operation while grad mode is on");
  ZT_CHECK_ERR(zt_tensor_copy_(w, src), ZT_STATUS_AUTOGRAD, "zt_set_grad_enabled(false)");
  ZT_CHECK_ERR(zt_tensor_set(w, 0, 1), ZT_STATUS_AUTOGRAD, "in-place");
  /* non-leaves that require grad are refused too (the write would not be recorded) */
  ZT_CHECK_OK(zt_exp(w, &y));
  ZT_CHECK_ERR(zt_tensor_fill_(y, 0), ZT_STATUS_AUTOGRAD, "in-place");
  uint64_t v = w->storage->version;
  bool prev = zt_set_grad_enabled(false);
  ZT_CHECK_OK(zt_tensor_fill_(w, 0.5));
  ZT_CHECK_OK(zt_tensor_copy_(w, src));
  zt_set_grad_enabled(prev);
  ZT_CHECK(w->storage->version == v + 2 && zt_tensor_get(w, 1) == 0);
  zt_tensor_free(y);
  zt_tensor_free(src);
  zt_tensor_free(w);
}

/* The first accumulation adopts the engine's grad bytes: no copy, one allocation fewer. */
typedef struct counter {
  int allocs;
} counter;
static void *c_alloc(void *ctx, size_t b, zt_device d) {
  (void)d;
  ((counter *)ctx)->allocs++;
  return aligned_alloc(64, (b + 63) / 64 * 64);
}
static void c_free(void *ctx, void *p, size_t b, zt_device d) {
  (void)ctx, (void)b, (void)d;
  free(p);
}

static void test_leaf_adopts_grad(void) {
  ZT_CHECK(zt_test_live_bytes() == 0); /* replacing the allocator needs no live allocations */
  counter c = {0};
  zt_allocator al = {c_alloc, c_free, &c};
  ZT_CHECK_OK(zt_mem_set_allocator(ZT_DEVICE_CPU, &al));
  int64_t shape[] = {1000};
  zt_tensor *w = NULL, *y = NULL, *g = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(1, shape, ZT_DTYPE_F32, ZT_CPU, &w));
  ZT_CHECK_OK(zt_tensor_set_requires_grad(w, true));
  ZT_CHECK_OK(zt_mul_scalar(w, 2, &y));
  ZT_CHECK_OK(zt_tensor_full(1, shape, ZT_DTYPE_F32, ZT_CPU, 1, &g));
  int before = c.allocs;
  ZT_CHECK_OK(zt_backward(1, &y, &g, true));
  /* root grad copy + MulScalarBackward's output; the leaf keeps the latter */
  ZT_CHECK(c.allocs - before == 2);
  ZT_CHECK(w->grad && w->grad->storage->refcount == 1 && w->grad->storage->tag == ZT_MEM_TAG_GRAD);
  ZT_CHECK(zt_tensor_get(w->grad, 999) == 2);
  /* the second accumulation adds in place */
  before = c.allocs;
  ZT_CHECK_OK(zt_backward(1, &y, &g, false));
  ZT_CHECK(c.allocs - before == 2 && zt_tensor_get(w->grad, 0) == 4);
  zt_tensor_free(y);
  zt_tensor_free(g);
  zt_tensor_free(w);
  ZT_CHECK_OK(zt_mem_set_allocator(ZT_DEVICE_CPU, NULL));
}

/* A user-set .grad (e.g. a view into a flat buffer, as FSDP does) is accumulated into in
 * place, whatever its strides. */
static void test_accumulate_into_strided_grad(void) {
  int64_t shape[] = {2, 3};
  zt_tensor *w = zt_test_rand_leaf(2, shape, ZT_DTYPE_F64, -1, 1, 26), *y = NULL, *flat = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(1, (int64_t[]){6}, ZT_DTYPE_F64, ZT_CPU, &flat));
  /* w.grad = transposed view of a (3, 2) buffer: shape (2, 3), strides (1, 2) */
  zt_tensor *gv = NULL;
  ZT_CHECK_OK(zt_tensor_alias(flat, &gv));
  gv->ndim = 2;
  gv->shape[0] = 2, gv->shape[1] = 3, gv->stride[0] = 1, gv->stride[1] = 2;
  w->grad = gv;
  zt_tensor *scale = zt_test_rand(2, shape, ZT_DTYPE_F64, 1, 2, 27), *g = NULL;
  ZT_CHECK_OK(zt_mul(w, scale, &y));
  ZT_CHECK_OK(zt_tensor_full(2, shape, ZT_DTYPE_F64, ZT_CPU, 1, &g));
  ZT_CHECK_OK(zt_backward(1, &y, &g, false));
  ZT_CHECK(w->grad == gv);
  for (int64_t i = 0; i < 2; i++)
    for (int64_t j = 0; j < 3; j++) ZT_CHECK(zt_tensor_get(flat, j * 2 + i) == zt_tensor_get(scale, i * 3 + j));
  /* a .grad of the wrong shape is an error, not a silent overrun */
  zt_tensor *wrong = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(1, (int64_t[]){6}, ZT_DTYPE_F64, ZT_CPU, &wrong));
  w->grad = wrong;
  zt_tensor_free(gv);
  zt_tensor_free(y);
  ZT_CHECK_OK(zt_mul(w, scale, &y));
  ZT_CHECK_ERR(zt_backward(1, &y, &g, false), ZT_STATUS_SHAPE,
               "cannot accumulate a gradient of shape (2, 3) into a leaf's .grad of shape (6,)");
  zt_tensor *all[] = {w, y, flat, scale, g};
  zt_test_free_all(all, 5);
}

/* Hooks and callbacks may free the outputs that own the graph while it runs. */
static zt_status free_root_hook(const zt_tensor *grad, zt_tensor **rep, void *ud) {
  (void)grad, (void)rep;
  zt_tensor **root = ud;
  zt_tensor_free(*root);
  *root = NULL;
  return ZT_OK;
}

static void test_outputs_freed_during_backward(void) {
  int64_t shape[] = {4};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 28), *h = NULL, *y = NULL;
  ZT_CHECK_OK(zt_exp(x, &h));
  ZT_CHECK_OK(zt_mul(h, h, &y));
  /* fires inside ExpBackward's turn, before it runs: freeing y frees Mul and Exp */
  ZT_CHECK_OK(zt_tensor_register_hook(h, free_root_hook, &y, NULL));
  zt_tensor_free(h); /* y's graph is now owned by y alone */
  zt_tensor *g = zt_test_ones_like(y);
  ZT_CHECK_OK(zt_backward(1, &y, &g, false));
  ZT_CHECK(y == NULL && x->grad);
  for (int64_t i = 0; i < 4; i++) ZT_CHECK_NEAR(zt_tensor_get(x->grad, i), 2 * exp(2 * zt_tensor_get(x, i)), 1e-9);
  zt_tensor_free(g);
  zt_tensor_free(x);
}

/* A backward may return any view; the engine hands contiguous grads to the next node. */
static zt_status tview_forward(zt_node *ctx, int n_in, zt_tensor *const *in, int n_out, zt_tensor **out, void *ud) {
  (void)ctx, (void)n_in, (void)n_out, (void)ud;
  return zt_tensor_clone_data(in[0], ZT_MEM_TAG_ACTIVATION, &out[0]);
}
static zt_status tview_backward(zt_node *ctx, int n_out, zt_tensor *const *gout, int n_in, const bool *needs,
                                zt_tensor **gin) {
  (void)ctx, (void)n_out, (void)n_in;
  if (!needs[0]) return ZT_OK;
  /* grad (2, 3) returned as a transposed view of a contiguous (3, 2) tensor */
  zt_tensor *buf = NULL;
  ZT_TRY(zt_tensor_empty(2, (int64_t[]){3, 2}, gout[0]->dtype, ZT_CPU, &buf));
  for (int64_t i = 0; i < 2; i++)
    for (int64_t j = 0; j < 3; j++) ZT_TRY(zt_tensor_set(buf, j * 2 + i, zt_tensor_get(gout[0], i * 3 + j) * 10));
  zt_status s = zt_tensor_alias(buf, &gin[0]);
  zt_tensor_free(buf);
  ZT_TRY(s);
  gin[0]->shape[0] = 2, gin[0]->shape[1] = 3, gin[0]->stride[0] = 1, gin[0]->stride[1] = 2;
  return ZT_OK;
}
static const zt_function tview_fn = {"TView", tview_forward, tview_backward};

static void test_noncontiguous_grads(void) {
  int64_t shape[] = {2, 3};
  zt_tensor *x = zt_test_rand_leaf(2, shape, ZT_DTYPE_F64, -1, 1, 29), *e = NULL, *v = NULL, *v2 = NULL, *s = NULL;
  ZT_CHECK_OK(zt_exp(x, &e));
  ZT_CHECK_OK(zt_function_apply(&tview_fn, 1, &e, 1, &v, NULL));
  ZT_CHECK_OK(zt_function_apply(&tview_fn, 1, &e, 1, &v2, NULL));
  ZT_CHECK_OK(zt_add(v, v2, &s)); /* two strided grads summed into e's buffer */
  zt_tensor *r = zt_test_rand(2, shape, ZT_DTYPE_F64, -1, 1, 30);
  ZT_CHECK_OK(zt_backward(1, &s, &r, false));
  for (int64_t i = 0; i < 6; i++)
    ZT_CHECK_NEAR(zt_tensor_get(x->grad, i), 20 * zt_tensor_get(r, i) * exp(zt_tensor_get(x, i)), 1e-12);
  zt_tensor *all[] = {x, e, v, v2, s, r};
  zt_test_free_all(all, 6);
}

/* A failing backward reports its error, stops, and leaves no state or memory behind. */
static zt_status fail_backward(zt_node *ctx, int n_out, zt_tensor *const *gout, int n_in, const bool *needs,
                               zt_tensor **gin) {
  (void)ctx, (void)n_out, (void)gout, (void)n_in, (void)needs, (void)gin;
  return ZT_ERR(ZT_STATUS_STATE, "probe backward refuses");
}
static const zt_function fail_fn = {"Fail", tview_forward, fail_backward};

static void test_backward_error_cleanup(void) {
  int64_t shape[] = {2, 3};
  zt_tensor *x = zt_test_rand_leaf(2, shape, ZT_DTYPE_F64, -1, 1, 31), *e = NULL, *f = NULL, *y = NULL;
  ZT_CHECK_OK(zt_exp(x, &e));
  ZT_CHECK_OK(zt_function_apply(&fail_fn, 1, &e, 1, &f, NULL));
  ZT_CHECK_OK(zt_tanh(f, &y));
  zt_tensor *g = zt_test_ones_like(y), *gx = (zt_tensor *)0x1;
  ZT_CHECK_ERR(zt_backward(1, &y, &g, true), ZT_STATUS_STATE, "probe backward refuses");
  ZT_CHECK(x->grad == NULL && zt_autograd_graph_task_id() == -1 && zt_grad_enabled());
  ZT_CHECK(zt_mem_tag_current() == ZT_MEM_TAG_ACTIVATION);
  ZT_CHECK_ERR(zt_grad(1, &y, &g, 1, &x, true, &gx), ZT_STATUS_STATE, "refuses");
  ZT_CHECK(gx == NULL);
  zt_tensor *all[] = {x, e, f, y, g};
  zt_test_free_all(all, 5);
}

int main(void) {
  ZT_RUN(test_leaf_adopts_grad); /* first: needs no live cpu allocations */
  ZT_RUN(test_diamond);
  ZT_RUN(test_tensor_used_twice);
  ZT_RUN(test_multiple_roots);
  ZT_RUN(test_implicit_root_grad);
  ZT_RUN(test_retain_graph_and_second_backward);
  ZT_RUN(test_zt_grad_partial);
  ZT_RUN(test_zt_grad_nonleaf_and_unreachable);
  ZT_RUN(test_grad_mode_and_propagation);
  ZT_RUN(test_graph_freed_with_outputs);
  ZT_RUN(test_deep_chain);
  ZT_RUN(test_needs_input_grad_mask);
  ZT_RUN(test_graph_task_id);
  ZT_RUN(test_execution_order);
  ZT_RUN(test_inplace_after_save);
  ZT_RUN(test_inplace_on_leaf_requiring_grad);
  ZT_RUN(test_accumulate_into_strided_grad);
  ZT_RUN(test_outputs_freed_during_backward);
  ZT_RUN(test_noncontiguous_grads);
  ZT_RUN(test_backward_error_cleanup);
  return zt_test_finish();
}
