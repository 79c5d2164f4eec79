/* End-of-backward callbacks: queued during backward (from hooks or other callbacks), run once,
 * in order, after every node ran; queued-by-callbacks run in the same backward; nested
 * backwards have their own queue; queueing outside backward is ZT_STATUS_STATE. */
#include <stdlib.h>

#include "core/status_internal.h"
#include "zt_test.h"

typedef struct log {
  int n;
  int ids[32];
  zt_tensor *leaf;       /* checked to already have its grad when a callback runs */
  bool leaf_had_grad[32];
  int64_t task[32];
  int requeue;           /* callbacks with id < requeue queue id + 10 */
} log_t;

typedef struct cb_arg {
  log_t *log;
  int id;
} cb_arg;

static cb_arg g_args[64];
static int g_n_args;

static cb_arg *arg(log_t *l, int id) {
  g_args[g_n_args] = (cb_arg){l, id};
  return &g_args[g_n_args++];
}

static zt_status callback(void *ud) {
  cb_arg *a = ud;
  log_t *l = a->log;
  l->leaf_had_grad[l->n] = l->leaf && l->leaf->grad;
  l->task[l->n] = zt_autograd_graph_task_id();
  l->ids[l->n++] = a->id;
  if (a->id < l->requeue) ZT_TRY(zt_autograd_queue_callback(callback, arg(l, a->id + 10)));
  return ZT_OK;
}

/* A tensor hook that queues two callbacks each time it fires. */
static zt_status queue_hook(const zt_tensor *grad, zt_tensor **rep, void *ud) {
  (void)grad, (void)rep;
  log_t *l = ud;
  ZT_TRY(zt_autograd_queue_callback(callback, arg(l, 1)));
  ZT_TRY(zt_autograd_queue_callback(callback, arg(l, 2)));
  return ZT_OK;
}

static void test_run_once_after_backward(void) {
  g_n_args = 0;
  int64_t shape[] = {3};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F32, -1, 1, 1), *h = NULL, *y = NULL;
  ZT_CHECK_OK(zt_exp(x, &h));
  ZT_CHECK_OK(zt_tanh(h, &y));
  log_t l = {.leaf = x};
  ZT_CHECK_OK(zt_tensor_register_hook(h, queue_hook, &l, NULL)); /* fires before x's grad exists */
  zt_tensor *g = zt_test_ones_like(y);
  ZT_CHECK_OK(zt_backward(1, &y, &g, true));
  ZT_CHECK(l.n == 2 && l.ids[0] == 1 && l.ids[1] == 2);
  ZT_CHECK(l.leaf_had_grad[0] && l.leaf_had_grad[1]); /* after the whole backward */
  ZT_CHECK(l.task[0] >= 0 && l.task[0] == l.task[1]);
  /* a second backward queues (and runs) its own, once */
  ZT_CHECK_OK(zt_backward(1, &y, &g, false));
  ZT_CHECK(l.n == 4 && l.ids[2] == 1 && l.ids[3] == 2 && l.task[2] != l.task[0]);
  ZT_CHECK(zt_autograd_graph_task_id() == -1);
  zt_tensor *all[] = {x, h, y, g};
  zt_test_free_all(all, 4);
}

static void test_callbacks_queue_callbacks(void) {
  g_n_args = 0;
  int64_t shape[] = {2};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F32, -1, 1, 2), *y = NULL;
  ZT_CHECK_OK(zt_exp(x, &y));
  log_t l = {.requeue = 20}; /* 1 -> 11 -> 21; 2 -> 12 -> 22 */
  ZT_CHECK_OK(zt_tensor_register_hook(x, queue_hook, &l, NULL));
  zt_tensor *g = zt_test_ones_like(y);
  ZT_CHECK_OK(zt_backward(1, &y, &g, false));
  int want[] = {1, 2, 11, 12, 21, 22};
  ZT_CHECK(l.n == 6);
  for (int i = 0; i < 6 && i < l.n; i++) ZT_CHECK(l.ids[i] == want[i]);
  zt_tensor *all[] = {x, y, g};
  zt_test_free_all(all, 3);
}

static void test_outside_backward(void) {
  log_t l = {0};
  g_n_args = 0;
  ZT_CHECK_ERR(zt_autograd_queue_callback(callback, arg(&l, 1)), ZT_STATUS_STATE,
               "no backward is running on this thread; callbacks can only be queued during backward");
  ZT_CHECK_ERR(zt_autograd_queue_callback(NULL, NULL), ZT_STATUS_INVALID_ARG, "fn is NULL");
  ZT_CHECK(l.n == 0);
}

/* A nested backward (from a hook) runs its own callbacks when it ends, before the outer
 * backward goes on; the outer ones run at the outer end. */
typedef struct nested_ctx {
  log_t *log;
  zt_tensor *x2;
} nested_ctx;

static zt_status inner_hook(const zt_tensor *grad, zt_tensor **rep, void *ud) {
  (void)grad, (void)rep;
  return zt_autograd_queue_callback(callback, arg(ud, 100));
}

static zt_status outer_hook(const zt_tensor *grad, zt_tensor **rep, void *ud) {
  (void)grad, (void)rep;
  nested_ctx *c = ud;
  ZT_TRY(zt_autograd_queue_callback(callback, arg(c->log, 1)));
  bool prev = zt_set_grad_enabled(true);
  zt_tensor *y2 = NULL, *g = NULL, *gx = NULL;
  zt_status s = zt_mul_scalar(c->x2, 2, &y2);
  zt_set_grad_enabled(prev);
  ZT_TRY(s);
  s = zt_tensor_full(1, y2->shape, y2->dtype, ZT_CPU, 1, &g);
  if (!s) s = zt_grad(1, &y2, &g, 1, &c->x2, false, &gx);
  int after_inner = c->log->n;
  zt_tensor_free(g);
  zt_tensor_free(gx);
  zt_tensor_free(y2);
  ZT_TRY(s);
  /* the inner callback already ran; ours has not */
  if (after_inner != 1 || c->log->ids[0] != 100) return ZT_ERR(ZT_STATUS_INTERNAL, "inner callback did not run");
  return zt_autograd_queue_callback(callback, arg(c->log, 2));
}

static void test_nested_backward_queues(void) {
  g_n_args = 0;
  int64_t shape[] = {2};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F32, -1, 1, 3), *y = NULL;
  zt_tensor *x2 = zt_test_rand_leaf(1, shape, ZT_DTYPE_F32, -1, 1, 4);
  log_t l = {0};
  nested_ctx c = {&l, x2};
  ZT_CHECK_OK(zt_tensor_register_hook(x2, inner_hook, &l, NULL));
  ZT_CHECK_OK(zt_exp(x, &y));
  ZT_CHECK_OK(zt_tensor_register_hook(y, outer_hook, &c, NULL));
  zt_tensor *g = zt_test_ones_like(y);
  ZT_CHECK_OK(zt_backward(1, &y, &g, false));
  ZT_CHECK(l.n == 3 && l.ids[0] == 100 && l.ids[1] == 1 && l.ids[2] == 2);
  ZT_CHECK(l.task[0] != l.task[1] && l.task[1] == l.task[2]);
  zt_tensor *all[] = {x, y, x2, g};
  zt_test_free_all(all, 4);
}

static zt_status failing_callback(void *ud) {
  (void)ud;
  return ZT_ERR(ZT_STATUS_COMM, "wait for reductions failed");
}
static zt_status queue_failing_hook(const zt_tensor *grad, zt_tensor **rep, void *ud) {
  (void)grad, (void)rep;
  ZT_TRY(zt_autograd_queue_callback(failing_callback, NULL));
  return zt_autograd_queue_callback(callback, arg(ud, 7));
}

static void test_callback_error(void) {
  g_n_args = 0;
  int64_t shape[] = {2};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F32, -1, 1, 5), *y = NULL;
  ZT_CHECK_OK(zt_exp(x, &y));
  log_t l = {0};
  ZT_CHECK_OK(zt_tensor_register_hook(y, queue_failing_hook, &l, NULL));
  zt_tensor *g = zt_test_ones_like(y);
  ZT_CHECK_ERR(zt_backward(1, &y, &g, false), ZT_STATUS_COMM, "wait for reductions failed");
  ZT_CHECK(l.n == 0); /* later callbacks do not run after a failure */
  ZT_CHECK(x->grad != NULL && zt_autograd_graph_task_id() == -1);
  ZT_CHECK_ERR(zt_autograd_queue_callback(callback, arg(&l, 1)), ZT_STATUS_STATE, "no backward is running");
  zt_tensor *all[] = {x, y, g};
  zt_test_free_all(all, 3);
}

/* Callbacks may free the outputs (and so the graph) of the backward that ran them. */
static zt_status free_outputs_callback(void *ud) {
  zt_tensor **y = ud;
  zt_tensor_free(*y);
  *y = NULL;
  return ZT_OK;
}
static zt_status queue_free_hook(const zt_tensor *grad, zt_tensor **rep, void *ud) {
  (void)grad, (void)rep;
  return zt_autograd_queue_callback(free_outputs_callback, ud);
}

static void test_callback_frees_graph(void) {
  int64_t shape[] = {2};
  zt_tensor *x = zt_test_rand_leaf(1, shape, ZT_DTYPE_F32, -1, 1, 6), *y = NULL;
  ZT_CHECK_OK(zt_tanh(x, &y));
  ZT_CHECK_OK(zt_tensor_register_hook(x, queue_free_hook, &y, NULL));
  zt_tensor *g = zt_test_ones_like(x);
  ZT_CHECK_OK(zt_backward(1, &y, &g, true));
  ZT_CHECK(y == NULL && x->grad != NULL);
  zt_tensor_free(g);
  zt_tensor_free(x);
}

int main(void) {
  ZT_RUN(test_run_once_after_backward);
  ZT_RUN(test_callbacks_queue_callbacks);
  ZT_RUN(test_outside_backward);
  ZT_RUN(test_nested_backward_queues);
  ZT_RUN(test_callback_error);
  ZT_RUN(test_callback_frees_graph);
  return zt_test_finish();
}
