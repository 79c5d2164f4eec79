/* Post-accumulate-grad hooks: leaves that require grad only; run after .grad is updated,
 * once per accumulation, never for zt_grad, in order, removable, and may take .grad away
 * (as a data-parallel reduce-scatter does). */
#include <stdlib.h>

#include "core/status_internal.h"
#include "zt_test.h"

typedef struct acc_rec {
  int calls;
  double grad_first; /* leaf->grad[0] when called */
  bool had_grad;
  int task_ok;       /* called inside a backward */
  int id, *order, *n_order;
  bool take_grad;    /* free .grad and set it to NULL */
  zt_tensor *seen_leaf;
} acc_rec;

static zt_status acc_hook(zt_tensor *leaf, void *ud) {
  acc_rec *r = ud;
  r->calls++;
  r->seen_leaf = leaf;
  r->had_grad = leaf->grad != NULL;
  r->grad_first = leaf->grad ? zt_tensor_get(leaf->grad, 0) : NAN;
  r->task_ok += zt_autograd_graph_task_id() >= 0;
  if (r->order) r->order[(*r->n_order)++] = r->id;
  if (r->take_grad) {
    zt_tensor_free(leaf->grad);
    leaf->grad = NULL;
  }
  return ZT_OK;
}

static void test_fires_after_grad_update(void) {
  int64_t shape[] = {3};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F32, -1, 1, 1), *y = NULL;
  acc_rec r = {0};
  ZT_CHECK_OK(zt_tensor_register_post_accumulate_grad_hook(x, acc_hook, &r, NULL));
  ZT_CHECK_OK(zt_mul_scalar(x, 3, &y));
  zt_tensor *g = zt_test_ones_like(y);
  ZT_CHECK_OK(zt_backward(1, &y, &g, true));
  ZT_CHECK(r.calls == 1 && r.had_grad && r.grad_first == 3 && r.seen_leaf == x && r.task_ok == 1);
  ZT_CHECK_OK(zt_backward(1, &y, &g, false));
  ZT_CHECK(r.calls == 2 && r.grad_first == 6); /* sees the accumulated value */
  zt_tensor *all[] = {x, y, g};
  zt_test_free_all(all, 3);
}

static void test_once_per_accumulation(void) {
  int64_t shape[] = {2};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 2), *a = NULL, *b = NULL, *c = NULL, *s = NULL;
  acc_rec r = {0};
  ZT_CHECK_OK(zt_tensor_register_post_accumulate_grad_hook(x, acc_hook, &r, NULL));
  ZT_CHECK_OK(zt_mul_scalar(x, 2, &a));
  ZT_CHECK_OK(zt_mul_scalar(x, 3, &b));
  ZT_CHECK_OK(zt_mul(x, x, &c));
  ZT_CHECK_OK(zt_add(a, b, &s));
  zt_tensor *s2 = NULL;
  ZT_CHECK_OK(zt_add(s, c, &s2));
  zt_tensor *g = zt_test_ones_like(s2);
  ZT_CHECK_OK(zt_backward(1, &s2, &g, false));
  ZT_CHECK(r.calls == 1); /* four uses, one accumulation */
  ZT_CHECK_NEAR(r.grad_first, 5 + 2 * zt_tensor_get(x, 0), 1e-12);
  /* two roots reaching the leaf: still one accumulation per backward */
  zt_tensor *p = NULL, *q = NULL;
  ZT_CHECK_OK(zt_exp(x, &p));
  ZT_CHECK_OK(zt_tanh(x, &q));
  ZT_CHECK_OK(zt_backward(2, (zt_tensor *[]){p, q}, (zt_tensor *[]){g, g}, false));
  ZT_CHECK(r.calls == 2);
  zt_tensor *all[] = {x, a, b, c, s, s2, g, p, q};
  zt_test_free_all(all, 9);
}

static void test_not_for_zt_grad_and_order(void) {
  int64_t shape[] = {2};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F64, -1, 1, 3), *y = NULL;
  int order[8], n = 0;
  acc_rec r1 = {.id = 1, .order = order, .n_order = &n}, r2 = {.id = 2, .order = order, .n_order = &n};
  zt_hook_handle *h1 = NULL;
  ZT_CHECK_OK(zt_tensor_register_post_accumulate_grad_hook(x, acc_hook, &r1, &h1));
  ZT_CHECK_OK(zt_tensor_register_post_accumulate_grad_hook(x, acc_hook, &r2, NULL));
  ZT_CHECK_OK(zt_exp(x, &y));
  zt_tensor *g = zt_test_ones_like(y), *gx = NULL;
  ZT_CHECK_OK(zt_grad(1, &y, &g, 1, &x, true, &gx));
  ZT_CHECK(r1.calls == 0 && r2.calls == 0 && x->grad == NULL);
  ZT_CHECK_OK(zt_backward(1, &y, &g, true));
  ZT_CHECK(n == 2 && order[0] == 1 && order[1] == 2);
  zt_hook_remove(h1);
  ZT_CHECK_OK(zt_backward(1, &y, &g, false));
  ZT_CHECK(r1.calls == 1 && r2.calls == 2 && n == 3 && order[2] == 2);
  zt_tensor *all[] = {x, y, g, gx};
  zt_test_free_all(all, 4);
}

/* A leaf's accumulator runs as soon as its grad is complete, before op nodes that are
 * ready too (PyTorch's AccumulateGrad priority): FSDP reduces and reshards a unit while the
 * rest of backward computes. w's accumulator is made before the forward (lowest sequence
 * number), so ordering by sequence number alone would run it last. */
static int g_events[8], g_n_events;
static zt_status node_pre(zt_node *node, int n, zt_tensor **grads, void *ud) {
  (void)node, (void)n, (void)grads;
  g_events[g_n_events++] = (int)(intptr_t)ud;
  return ZT_OK;
}

static void test_accumulator_runs_when_ready(void) {
  int64_t shape[] = {3};
  zt_tensor *x = zt_test_rand(1, shape, ZT_DTYPE_F32, -1, 1, 11);
  zt_tensor *v = zt_test_rand_leaf(1, shape, ZT_DTYPE_F32, -1, 1, 12);
  zt_tensor *w = zt_test_rand_leaf(1, shape, ZT_DTYPE_F32, -1, 1, 13);
  acc_rec rw = {.id = 1, .order = g_events, .n_order = &g_n_events};
  g_n_events = 0;
  ZT_CHECK_OK(zt_tensor_register_post_accumulate_grad_hook(w, acc_hook, &rw, NULL));
  zt_tensor *h1 = NULL, *h2 = NULL, *loss = NULL;
  ZT_CHECK_OK(zt_mul(x, v, &h1));  /* first in forward: last in backward */
  ZT_CHECK_OK(zt_mul(h1, w, &h2)); /* its backward makes w's grad complete */
  ZT_CHECK_OK(zt_sum(h2, 0, NULL, false, &loss));
  ZT_CHECK_OK(zt_node_register_pre_hook(zt_tensor_grad_fn(h1), node_pre, (void *)(intptr_t)2, NULL));
  ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
  ZT_CHECK(g_n_events == 2 && g_events[0] == 1 && g_events[1] == 2);
  zt_tensor *all[] = {x, v, w, h1, h2, loss};
  zt_test_free_all(all, 6);
}

/* Eager accumulation: w is used first and last in forward, so its first contribution comes
 * early in backward. Eager, that contribution goes into w.grad at once and its buffer is freed
 * (measured from a node pre-hook in between); the result is bitwise the buffered one from a
 * zero .grad; the post-accumulate hook fires once; a tensor hook on w turns it off (the hook
 * must see the sum). */
static int64_t g_mid_bytes;
static int g_tensor_hook_calls;
static zt_status mid_probe(zt_node *node, int n, zt_tensor **grads, void *ud) {
  (void)node, (void)n, (void)grads, (void)ud;
  zt_mem_stats m;
  zt_mem_stats_get(ZT_CPU, &m);
  g_mid_bytes += m.current_total; /* minus the bytes before backward (eager_run) */
  return ZT_OK;
}
static zt_status count_tensor_hook(const zt_tensor *g, zt_tensor **rep, void *ud) {
  (void)g, (void)rep, (void)ud;
  g_tensor_hook_calls++;
  return ZT_OK;
}

static zt_tensor *eager_run(bool eager, bool tensor_hook, int *acc_calls) {
  int64_t shape[] = {4096};
  zt_tensor *x = zt_test_rand(1, shape, ZT_DTYPE_F32, -1, 1, 21);
  zt_tensor *w = zt_test_rand_leaf(1, shape, ZT_DTYPE_F32, -1, 1, 22);
  ZT_CHECK_OK(zt_tensor_zeros(1, shape, ZT_DTYPE_F32, ZT_CPU, &w->grad));
  ZT_CHECK_OK(zt_tensor_set_eager_accumulation(w, eager));
  acc_rec r = {0};
  ZT_CHECK_OK(zt_tensor_register_post_accumulate_grad_hook(w, acc_hook, &r, NULL));
  if (tensor_hook) ZT_CHECK_OK(zt_tensor_register_hook(w, count_tensor_hook, NULL, NULL));
  zt_tensor *h1 = NULL, *h2 = NULL, *h3 = NULL, *loss = NULL;
  ZT_CHECK_OK(zt_mul(x, w, &h1));  /* last in backward: w's second contribution */
  ZT_CHECK_OK(zt_exp(h1, &h2));    /* in between: the probe */
  ZT_CHECK_OK(zt_mul(h2, w, &h3)); /* first in backward: w's first contribution */
  ZT_CHECK_OK(zt_sum(h3, 0, NULL, false, &loss));
  ZT_CHECK_OK(zt_node_register_pre_hook(zt_tensor_grad_fn(h2), mid_probe, NULL, NULL));
  zt_mem_stats m;
  zt_mem_stats_get(ZT_CPU, &m);
  g_mid_bytes = -m.current_total;
  ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
  *acc_calls = r.calls;
  zt_tensor *g = NULL;
  ZT_CHECK_OK(zt_tensor_clone_data(w->grad, ZT_MEM_TAG_TEMP, &g));
  zt_tensor *all[] = {x, w, h1, h2, h3, loss};
  zt_test_free_all(all, 6);
  return g;
}

static void test_eager_accumulation(void) {
  int calls_off = 0, calls_on = 0, calls_hook = 0;
  zt_tensor *off = eager_run(false, false, &calls_off);
  int64_t bytes_off = g_mid_bytes;
  zt_tensor *on = eager_run(true, false, &calls_on);
  int64_t bytes_on = g_mid_bytes;
  g_tensor_hook_calls = 0;
  zt_tensor *hooked = eager_run(true, true, &calls_hook);
  int64_t bytes_hooked = g_mid_bytes;
  ZT_CHECK(calls_off == 1 && calls_on == 1 && calls_hook == 1);
  ZT_CHECK(zt_test_bitwise_equal(off, on) && zt_test_bitwise_equal(off, hooked));
  ZT_CHECK(bytes_off - bytes_on == 4096 * 4); /* the first contribution's buffer is gone */
  ZT_CHECK(bytes_hooked == bytes_off && g_tensor_hook_calls == 1); /* the hook saw one, summed grad */
  zt_tensor *all[] = {off, on, hooked};
  zt_test_free_all(all, 3);
}

/* The hook takes the grad away (e.g. after reducing it elsewhere); the next backward
 * starts a new .grad. */
static void test_hook_takes_grad(void) {
  int64_t shape[] = {2};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F32, -1, 1, 4), *y = NULL;
  acc_rec r = {.take_grad = true};
  ZT_CHECK_OK(zt_tensor_register_post_accumulate_grad_hook(x, acc_hook, &r, NULL));
  ZT_CHECK_OK(zt_mul_scalar(x, 2, &y));
  zt_tensor *g = zt_test_ones_like(y);
  int64_t live = zt_test_live_bytes();
  ZT_CHECK_OK(zt_backward(1, &y, &g, true));
  ZT_CHECK(r.calls == 1 && r.grad_first == 2 && x->grad == NULL);
  ZT_CHECK(zt_test_live_bytes() == live);
  ZT_CHECK_OK(zt_backward(1, &y, &g, false));
  ZT_CHECK(r.calls == 2 && r.grad_first == 2 && x->grad == NULL);
  zt_tensor *all[] = {x, y, g};
  zt_test_free_all(all, 3);
}

static zt_status failing_acc_hook(zt_tensor *leaf, void *ud) {
  (void)leaf, (void)ud;
  return ZT_ERR(ZT_STATUS_COMM, "reduce-scatter failed");
}

static void test_errors(void) {
  int64_t shape[] = {2};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F32, -1, 1, 5), *y = NULL, *c = NULL;
  ZT_CHECK_OK(zt_exp(x, &y));
  ZT_CHECK_ERR(zt_tensor_register_post_accumulate_grad_hook(y, acc_hook, NULL, NULL), ZT_STATUS_AUTOGRAD,
               "post-accumulate-grad hooks can only be registered on leaf tensors that require grad");
  ZT_CHECK_OK(zt_tensor_zeros(1, shape, ZT_DTYPE_F32, ZT_CPU, &c));
  ZT_CHECK_ERR(zt_tensor_register_post_accumulate_grad_hook(c, acc_hook, NULL, NULL), ZT_STATUS_AUTOGRAD,
               "only be registered on leaf tensors");
  ZT_CHECK_ERR(zt_tensor_register_post_accumulate_grad_hook(NULL, acc_hook, NULL, NULL), ZT_STATUS_INVALID_ARG,
               "tensor is NULL");
  ZT_CHECK_ERR(zt_tensor_register_post_accumulate_grad_hook(x, NULL, NULL, NULL), ZT_STATUS_INVALID_ARG,
               "hook function is NULL");
  zt_hook_handle *h = NULL;
  ZT_CHECK_OK(zt_tensor_register_post_accumulate_grad_hook(x, failing_acc_hook, NULL, &h));
  zt_tensor *g = zt_test_ones_like(y);
  ZT_CHECK_ERR(zt_backward(1, &y, &g, true), ZT_STATUS_COMM, "reduce-scatter failed");
  ZT_CHECK(x->grad != NULL); /* it ran after the update */
  zt_hook_remove(h);
  ZT_CHECK_OK(zt_backward(1, &y, &g, false));
  zt_tensor *all[] = {x, y, c, g};
  zt_test_free_all(all, 4);
}

int main(void) {
  ZT_RUN(test_fires_after_grad_update);
  ZT_RUN(test_once_per_accumulation);
  ZT_RUN(test_not_for_zt_grad_and_order);
  ZT_RUN(test_accumulator_runs_when_ready);
  ZT_RUN(test_eager_accumulation);
  ZT_RUN(test_hook_takes_grad);
  ZT_RUN(test_errors);
  return zt_test_finish();
}
