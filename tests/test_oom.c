/* Out of memory is a status, not an abort: a backward whose allocations start failing at
 * every possible point returns ZT_STATUS_OOM with a message, leaks nothing, and leaves the
 * graph usable (the same backward then gives the grads of a run that never failed); the
 * checkpointed regions (non-reentrant full and selective, reentrant) do the same when the
 * host allocations of their bookkeeping fail at every point, in forward and in
 * recomputation (the test links with --wrap=malloc,calloc,realloc); so does an OffloadModel's
 * set-up and step in both modes; the grow-array helper
 * reports the size and purpose and leaves the array as it was. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/grow.h"
#include "zt/checkpoint.h"
#include "zt/train.h"
#include "zt_test.h"

/* Host allocations of the code linked into this test (the library included) fail once
 * host_left of them have been made (host_left < 0: never). */
static _Atomic int host_left = -1, host_failed = 0; /* the offload helper thread allocates too */
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t k);
void *__real_realloc(void *p, size_t n);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t k);
void *__wrap_realloc(void *p, size_t n);
static bool host_fails(void) {
  int left = atomic_load(&host_left);
  while (left > 0 && !atomic_compare_exchange_weak(&host_left, &left, left - 1)) {
  }
  if (left != 0) return false;
  atomic_fetch_add(&host_failed, 1);
  return true;
}
void *__wrap_malloc(size_t n) { return host_fails() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t k) { return host_fails() ? NULL : __real_calloc(n, k); }
void *__wrap_realloc(void *p, size_t n) { return host_fails() ? NULL : __real_realloc(p, n); }

/* A backing allocator that fails once `left` allocations have been made (left < 0: never). */
typedef struct failing {
  int left;
  int failed;
  int live;
} failing;

static void *failing_alloc(void *ctx, size_t bytes, zt_device dev) {
  (void)dev;
  failing *f = ctx;
  if (f->left == 0) {
    f->failed++;
    return NULL;
  }
  if (f->left > 0) f->left--;
  f->live++;
  return aligned_alloc(64, (bytes + 63) / 64 * 64);
}
static void failing_free(void *ctx, void *ptr, size_t bytes, zt_device dev) {
  (void)bytes, (void)dev;
  failing *f = ctx;
  f->live--;
  free(ptr);
}

/* loss = sum(tanh(x @ w) * x); grads of x and w into gx, gw (copies). */
static zt_status forward_backward(zt_tensor *x, zt_tensor *w, zt_tensor **gx, zt_tensor **gw) {
  zt_tensor *y = NULL, *t = NULL, *m = NULL, *loss = NULL;
  zt_status s = zt_matmul(x, w, false, false, &y);
  if (!s) s = zt_tanh(y, &t);
  if (!s) s = zt_mul(t, x, &m);
  if (!s) s = zt_sum(m, 0, NULL, false, &loss);
  zt_tensor *in[2] = {x, w}, *g[2] = {NULL, NULL};
  if (!s) s = zt_grad(1, &loss, NULL, 2, in, false, g);
  zt_tensor_free(loss), zt_tensor_free(m), zt_tensor_free(t), zt_tensor_free(y);
  *gx = g[0], *gw = g[1];
  return s;
}

static void test_backward_oom_at_every_allocation(void) {
  failing f = {-1, 0, 0};
  zt_allocator al = {failing_alloc, failing_free, &f};
  ZT_CHECK_OK(zt_mem_set_allocator(ZT_DEVICE_CPU, &al));
  int64_t sx[] = {6, 6};
  zt_tensor *x = zt_test_rand_leaf(2, sx, ZT_DTYPE_F32, -1, 1, 1);
  zt_tensor *w = zt_test_rand_leaf(2, sx, ZT_DTYPE_F32, -1, 1, 2);
  zt_tensor *rx = NULL, *rw = NULL;
  ZT_CHECK_OK(forward_backward(x, w, &rx, &rw));
  int baseline = f.live;
  int oom = 0;
  for (int budget = 0; budget < 64; budget++) {
    f.left = budget;
    zt_tensor *gx = NULL, *gw = NULL;
    zt_clear_error();
    zt_status s = forward_backward(x, w, &gx, &gw);
    f.left = -1;
    if (s) {
      ZT_CHECK(s == ZT_STATUS_OOM);
      ZT_CHECK(strstr(zt_last_error(), "out of memory") != NULL);
      ZT_CHECK(gx == NULL && gw == NULL);
      ZT_CHECK(f.live == baseline); /* nothing of the failed step is left */
      oom++;
      continue;
    }
    ZT_CHECK(zt_test_bitwise_equal(gx, rx) && zt_test_bitwise_equal(gw, rw));
    zt_tensor_free(gx), zt_tensor_free(gw);
    break; /* enough allocations for the whole step: later budgets change nothing */
  }
  ZT_CHECK(oom > 3 && f.failed == oom);
  /* the graph survives a failed backward: forward once, backward fails, backward again */
  zt_tensor *y = NULL, *loss = NULL;
  ZT_CHECK_OK(zt_matmul(x, w, false, false, &y));
  ZT_CHECK_OK(zt_sum(y, 0, NULL, false, &loss));
  zt_tensor *in[2] = {x, w}, *g[2] = {NULL, NULL};
  f.left = 0;
  ZT_CHECK_ERR(zt_grad(1, &loss, NULL, 2, in, true, g), ZT_STATUS_OOM, "out of memory");
  f.left = -1;
  ZT_CHECK_OK(zt_grad(1, &loss, NULL, 2, in, false, g));
  ZT_CHECK(g[0] && g[1]);
  zt_tensor_free(g[0]), zt_tensor_free(g[1]);
  zt_tensor_free(loss), zt_tensor_free(y);
  zt_tensor_free(rx), zt_tensor_free(rw), zt_tensor_free(x), zt_tensor_free(w);
  ZT_CHECK(f.live == 0);
  ZT_CHECK_OK(zt_mem_set_allocator(ZT_DEVICE_CPU, NULL));
}

/* The region: tanh(x @ w) * x. */
static zt_status region(zt_tensor *const *in, int n_in, zt_tensor **out, int n_out, void *ud) {
  (void)n_in, (void)n_out, (void)ud;
  zt_tensor *y = NULL, *t = NULL;
  zt_status s = zt_matmul(in[0], in[1], false, false, &y);
  if (!s) s = zt_tanh(y, &t);
  if (!s) s = zt_mul(t, in[0], out);
  zt_tensor_free(y), zt_tensor_free(t);
  return s;
}

enum { CK_FULL, CK_SELECTIVE, CK_REENTRANT };

/* sum(region(x, w)) through a checkpoint of kind k, and the grads of x and w. */
static zt_status ck_forward_backward(int k, zt_tensor *x, zt_tensor *w, zt_tensor **gx, zt_tensor **gw) {
  zt_checkpoint_options o = zt_checkpoint_options_default();
  if (k == CK_SELECTIVE) o.policy = (zt_checkpoint_policy){zt_checkpoint_policy_save_gemm, NULL};
  zt_tensor *in[2] = {x, w}, *out = NULL, *loss = NULL;
  zt_status s = k == CK_REENTRANT ? zt_checkpoint_reentrant(region, NULL, 2, in, 1, &out, &o)
                                  : zt_checkpoint(region, NULL, 2, in, 1, &out, &o);
  if (!s) s = zt_sum(out, 0, NULL, false, &loss);
  if (!s && k == CK_REENTRANT) { /* reentrant: grads accumulate into .grad (zt_grad is refused) */
    s = zt_backward(1, &loss, NULL, false);
    if (!s) s = zt_tensor_clone_data(x->grad, ZT_MEM_TAG_TEMP, gx);
    if (!s) s = zt_tensor_clone_data(w->grad, ZT_MEM_TAG_TEMP, gw);
    zt_tensor_free(x->grad), zt_tensor_free(w->grad);
    x->grad = w->grad = NULL;
  } else if (!s) {
    zt_tensor *g[2] = {NULL, NULL};
    s = zt_grad(1, &loss, NULL, 2, in, false, g);
    *gx = g[0], *gw = g[1];
  }
  zt_tensor_free(loss), zt_tensor_free(out);
  return s;
}

static void test_checkpoint_host_oom_at_every_allocation(void) {
  static const char *const names[] = {"full", "selective", "reentrant"};
  failing f = {-1, 0, 0}; /* counts live tensor allocations */
  zt_allocator al = {failing_alloc, failing_free, &f};
  ZT_CHECK_OK(zt_mem_set_allocator(ZT_DEVICE_CPU, &al));
  int64_t sx[] = {5, 5};
  zt_tensor *x = zt_test_rand_leaf(2, sx, ZT_DTYPE_F32, -1, 1, 3);
  zt_tensor *w = zt_test_rand_leaf(2, sx, ZT_DTYPE_F32, -1, 1, 4);
  for (int k = CK_FULL; k <= CK_REENTRANT; k++) {
    zt_tensor *rx = NULL, *rw = NULL;
    ZT_CHECK_OK(ck_forward_backward(k, x, w, &rx, &rw));
    int baseline = f.live, oom = 0;
    host_failed = 0;
    bool done = false;
    for (int budget = 0; budget < 4000 && !done; budget++) {
      zt_tensor *gx = NULL, *gw = NULL;
      zt_clear_error();
      host_left = budget;
      zt_status s = ck_forward_backward(k, x, w, &gx, &gw);
      host_left = -1;
      zt_tensor_free(x->grad), zt_tensor_free(w->grad); /* what a failed reentrant backward left */
      x->grad = w->grad = NULL;
      if (s) {
        if (s != ZT_STATUS_OOM || !strstr(zt_last_error(), "out of host memory"))
          zt_test_fail(__FILE__, __LINE__, "%s, host allocation %d failing: status %d, \"%s\"", names[k], budget, (int)s,
                       zt_last_error());
        zt_tensor_free(gx), zt_tensor_free(gw); /* reentrant: a grad cloned before the other's clone failed */
        if (f.live != baseline) /* no tensor of the failed step is left */
          zt_test_fail(__FILE__, __LINE__, "%s, host allocation %d failing: %d tensors left (\"%s\")", names[k], budget,
                       f.live - baseline, zt_last_error());
        oom++;
        continue;
      }
      if (!(zt_test_bitwise_equal(gx, rx) && zt_test_bitwise_equal(gw, rw)))
        zt_test_fail(__FILE__, __LINE__, "%s: grads after %d failing runs differ", names[k], oom);
      zt_tensor_free(gx), zt_tensor_free(gw);
      done = true;
    }
    printf("  %s: %d host allocations failed in turn, each an OOM status (%d failed)\n", names[k], oom, host_failed);
    ZT_CHECK(done && oom > 5 && host_failed >= oom); /* after the first, cleanup's allocations fail too */
    zt_tensor_free(rx), zt_tensor_free(rw);
  }
  zt_tensor_free(x), zt_tensor_free(w);
  ZT_CHECK(f.live == 0);
  ZT_CHECK_OK(zt_mem_set_allocator(ZT_DEVICE_CPU, NULL));
}

/* A whole training step of GPT-2 (zt_train_step: forward, backward, clipping, AdamW) with
 * recompute and activation offload attached, host allocations failing at every point in
 * turn: each failure is ZT_STATUS_OOM, the parameters stay as they were, and once the step
 * succeeds its loss and parameters are bitwise those of a step that never failed. */
typedef struct one_batch {
  zt_tensor *x, *y;
} one_batch;
static zt_status give(void *ud, zt_tensor **x, zt_tensor **y) {
  one_batch *b = ud;
  *x = b->x, *y = b->y;
  return ZT_OK;
}

typedef struct stack {
  zt_gpt2 *g;
  zt_recompute_plan *rc;
  zt_offload *off;
  zt_optim *o;
  zt_param *ps;
  int np;
} stack;

static void stack_open(stack *st) {
  *st = (stack){0};
  zt_gpt2_config c = {2, 2, 16, 32, 8, 0.1};
  zt_rng_seed(9);
  ZT_CHECK_OK(zt_gpt2_new(&c, &st->g));
  if (!st->g) return;
  st->rc = zt_test_recompute(st->g, ZT_RECOMPUTE_FULL, 1);
  zt_offload_options oo = zt_offload_options_default(ZT_OFFLOAD_HOST);
  oo.min_bytes = 0, oo.prefetch = 1;
  st->off = zt_test_offload(st->g, &oo);
  st->np = zt_gpt2_params(st->g, &st->ps);
  zt_optim_config oc = zt_optim_default(ZT_OPTIM_ADAMW);
  ZT_CHECK_OK(zt_optim_new(&oc, st->np, st->ps, &st->o));
}

static void stack_close(stack *st) {
  zt_optim_free(st->o);
  zt_recompute_plan_free(st->rc);
  zt_offload_free(st->off);
  zt_gpt2_free(st->g);
}

static zt_status step(stack *st, one_batch *b, zt_train_step_result *r) {
  zt_model m = zt_gpt2_model(st->g);
  zt_train_step_options so = zt_train_step_options_default();
  so.lr = 1e-2, so.grad_clip = 1.0, so.step = 1;
  return zt_train_step(&m, NULL, st->o, give, b, &so, r);
}

static void test_train_step_host_oom_at_every_allocation(void) {
  one_batch b = {zt_test_rand_ids(2, 8, 32, 1), zt_test_rand_ids(2, 8, 32, 2)};
  stack ref, st;
  zt_train_step_result rr, r;
  stack_open(&ref);
  zt_rng_state rng0 = zt_rng_get_state();
  ZT_CHECK_OK(step(&ref, &b, &rr));
  stack_open(&st);
  if (!ref.g || !st.g) return;
  zt_tensor *before[64] = {0};
  for (int i = 0; i < st.np && i < 64; i++) ZT_CHECK_OK(zt_tensor_clone_data(st.ps[i].tensor, ZT_MEM_TAG_TEMP, &before[i]));
  int oom = 0;
  bool done = false;
  host_failed = 0;
  for (int budget = 0; budget < 20000 && !done; budget++) {
    zt_rng_set_state(rng0); /* a retry starts from the same RNG state (dropout) */
    zt_clear_error();
    host_left = budget;
    zt_status s = step(&st, &b, &r);
    host_left = -1;
    if (s) {
      if (s != ZT_STATUS_OOM || !strstr(zt_last_error(), "out of host memory")) {
        zt_test_fail(__FILE__, __LINE__, "host allocation %d failing: status %d, \"%s\"", budget, (int)s, zt_last_error());
        break;
      }
      for (int i = 0; i < st.np && i < 64; i++)
        if (!zt_test_bitwise_equal(before[i], st.ps[i].tensor)) {
          zt_test_fail(__FILE__, __LINE__, "host allocation %d failing: parameter %d changed", budget, i);
          budget = 1 << 30;
          break;
        }
      zt_optim_zero_grad(st.o); /* the grads of the failed step are partial */
      oom++;
      continue;
    }
    done = true;
  }
  printf("  training step: %d host allocations failed in turn, each an OOM status\n", oom);
  ZT_CHECK(done && oom > 100);
  ZT_CHECK(done && !memcmp(&r.loss, &rr.loss, sizeof r.loss));
  for (int i = 0; done && i < st.np; i++)
    if (!zt_test_bitwise_equal(ref.ps[i].tensor, st.ps[i].tensor))
      zt_test_fail(__FILE__, __LINE__, "parameter %d differs from the reference step", i);
  zt_test_free_all(before, 64);
  zt_test_free_all((zt_tensor *[]){b.x, b.y}, 2);
  stack_close(&ref);
  stack_close(&st);
}

/* An OffloadModel (memory store, 3 slices, one in RAM, 2 chunks) made and stepped with host
 * allocations failing at every point in turn, in both modes, a fresh model each time: each
 * failure is ZT_STATUS_OOM saying so, and freeing everything after it leaves no byte behind
 * (the helper thread's failures included); the first run that succeeds gives the loss and
 * parameters of a run that never failed. */
typedef struct om_run {
  zt_gpt2 *g;
  zt_optim *o;
  zt_store *store;
  zt_offload_model *om;
} om_run;

static zt_status om_step(om_run *r, zt_offload_model_mode mode, one_batch *b, double *loss) {
  zt_offload_units u;
  zt_status s = zt_lm_offload_units(zt_test_lm(r->g), &u);
  zt_offload_model_options oo = zt_offload_model_options_default();
  oo.slices = 3, oo.resident = 1, oo.microbatches = 2, oo.mode = mode;
  if (!s) s = zt_offload_model_new(&u, r->store, &oo, &r->om);
  if (!s) s = zt_offload_model_train_step(r->om, r->o, b->x, b->y, 1e-2, 1.0, loss, NULL);
  return s ? s : zt_offload_model_flush(r->om);
}

static void om_open(om_run *r) {
  *r = (om_run){0};
  zt_gpt2_config c = {2, 2, 16, 32, 8, 0.1};
  zt_rng_seed(9);
  ZT_CHECK_OK(zt_gpt2_new(&c, &r->g));
  zt_param *ps = NULL;
  int np = zt_gpt2_params(r->g, &ps);
  zt_optim_config oc = zt_optim_default(ZT_OPTIM_ADAMW);
  ZT_CHECK_OK(zt_optim_new(&oc, np, ps, &r->o));
  ZT_CHECK_OK(zt_store_memory_new(&r->store));
}

static void om_close(om_run *r) {
  zt_offload_model_free(r->om);
  zt_optim_free(r->o);
  zt_gpt2_free(r->g);
  zt_store_free(r->store);
}

static void test_offload_model_host_oom_at_every_allocation(void) {
  one_batch b = {zt_test_rand_ids(4, 8, 32, 1), zt_test_rand_ids(4, 8, 32, 2)};
  for (int mode = 0; mode < 2; mode++) {
    om_run ref;
    double want = 0, got = 0;
    int64_t live = zt_test_live_bytes();
    om_open(&ref);
    zt_rng_state rng0 = zt_rng_get_state();
    ZT_CHECK_OK(om_step(&ref, (zt_offload_model_mode)mode, &b, &want));
    int oom = 0;
    bool done = false;
    for (int budget = 0; budget < 50000 && !done; budget++) {
      om_run r;
      om_open(&r);
      if (!r.g || !r.o || !r.store) break;
      zt_rng_set_state(rng0);
      zt_clear_error();
      host_left = budget;
      zt_status s = om_step(&r, (zt_offload_model_mode)mode, &b, &got);
      host_left = -1;
      if (s && (s != ZT_STATUS_OOM || !strstr(zt_last_error(), "out of host memory"))) {
        zt_test_fail(__FILE__, __LINE__, "mode %d, host allocation %d failing: status %d, \"%s\"", mode, budget, (int)s,
                     zt_last_error());
        om_close(&r);
        break;
      }
      if (!s) {
        done = true;
        ZT_CHECK(!memcmp(&got, &want, sizeof got));
        zt_param *pr, *pg;
        int n = zt_gpt2_params(ref.g, &pr);
        zt_gpt2_params(r.g, &pg);
        for (int i = 0; i < n; i++) ZT_CHECK(zt_test_bitwise_equal(pr[i].tensor, pg[i].tensor));
      }
      oom += s != ZT_OK;
      om_close(&r);
    }
    om_close(&ref);
    printf("  OffloadModel (%s): %d host allocations failed in turn, each an OOM status\n",
           mode ? "keep-graph" : "recompute", oom);
    ZT_CHECK(done && oom > 50);
    ZT_CHECK(zt_test_live_bytes() == live);
  }
  zt_test_free_all((zt_tensor *[]){b.x, b.y}, 2);
}

static void test_grow_array(void) {
  int cap = 0;
  int *a = zt__grow(NULL, &cap, 3, sizeof *a, "a test list");
  ZT_CHECK(a && cap == 8);
  a[0] = 7;
  ZT_CHECK(zt__grow(a, &cap, 8, sizeof *a, "a test list") == a && cap == 8); /* room enough */
  int *b = zt__grow(a, &cap, 9, sizeof *b, "a test list");
  ZT_CHECK(b && cap == 16 && b[0] == 7);
  a = b;
  /* a size no allocator gives: NULL, a status naming the purpose, the array untouched */
  zt_clear_error();
  ZT_CHECK(zt__grow(a, &cap, 1 << 30, (size_t)1 << 40, "a huge test list") == NULL);
  ZT_CHECK(strstr(zt_last_error(), "out of host memory") && strstr(zt_last_error(), "a huge test list"));
  zt_clear_error();
  ZT_CHECK(zt__grow(a, &cap, 1 << 20, (size_t)1 << 30, "a large test list") == NULL); /* 1 PiB */
  ZT_CHECK(strstr(zt_last_error(), "could not allocate 1125899906842624 bytes for a large test list"));
  ZT_CHECK(cap == 16 && a[0] == 7);
  free(a);
}

/* Under AddressSanitizer, an allocation that cannot be served returns NULL (as plain malloc
 * does) instead of ending the process, so the 1 PiB request above is a status there too. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

int main(void) {
  ZT_RUN(test_backward_oom_at_every_allocation);
  ZT_RUN(test_checkpoint_host_oom_at_every_allocation);
  ZT_RUN(test_train_step_host_oom_at_every_allocation);
  ZT_RUN(test_offload_model_host_oom_at_every_allocation);
  ZT_RUN(test_grow_array);
  return zt_test_finish();
}
