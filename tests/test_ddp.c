/* DDP at any world size: run plainly (one rank) and under mpirun -np 2 / -np 4. Every rank
 * also runs the single-process reference (the whole global batch) itself, so no fixtures:
 * DDP on this rank's rows must give the reference's losses, grads and parameters up to
 * reduction-order rounding. Small hand-made graphs check the exact averages, unused
 * parameters (on every rank, or on one rank only), no_sync, stats and failure recovery. */
#include <stdlib.h>

#include "core/status_internal.h"
#include "zt_test.h"
#include "zt/fsdp.h"

static zt_comm *W;
static int R, N; /* rank, size */

/* ------------------------------------------------------------------ GPT-2 vs reference */
static const zt_gpt2_config CFG = {2, 2, 32, 64, 16, 0.0};
enum { GB = 8, GT = 16, STEPS = 4 };
/* Tolerances (reduction order only; the maths is the same): each rank sums its rows' grads
 * and the ranks' means are averaged, where the reference sums all rows at once, so f32
 * grads differ by a few ulps (~1e-7 relative); the loss and the parameters after STEPS
 * AdamW steps at lr 1e-3 stay within these. */
#ifndef LOSS_RTOL /* (overridable to measure the actual differences) */
#define LOSS_RTOL 1e-6
#define GRAD_RTOL 2e-5 /* relative to the largest |grad| of the parameter */
#define PARAM_ATOL 1e-5
#endif

typedef struct ddp_case {
  int64_t bucket_bytes;
  bool recompute; /* checkpointed blocks (FULL) on the DDP model */
  bool no_sync;   /* two micro-batches per step, the first with sync off */
  bool unused;    /* a parameter on the root module that forward never uses */
} ddp_case;

/* The model's parameters (plus, optionally, an unused one): a new array (free()). */
static zt_param *param_list(zt_gpt2 *m, bool unused, int *n) {
  zt_param *p = NULL;
  int np = zt_gpt2_params(m, &p);
  zt_param *out = calloc((size_t)np + 1, sizeof *out);
  memcpy(out, p, sizeof *out * (size_t)np);
  if (unused) {
    zt_tensor *u = NULL;
    ZT_CHECK_OK(zt_module_new_param(zt_gpt2_module(m), "unused", 1, (int64_t[]){5}, ZT_DTYPE_F32, false, &u));
    snprintf(out[np].name, sizeof out[np].name, "unused");
    out[np].tensor = u;
    out[np++].decay = false;
  }
  *n = np;
  return out;
}

/* Buckets the bucketing rule makes (reverse order, a bucket closes once it holds >= cap
 * bytes) and the ring bytes their all-reduces send. */
static int expected_buckets(int n, const zt_param *ps, int64_t cap, int64_t *ring_bytes) {
  int nb = 0;
  int64_t bytes = 0;
  double f = N > 1 ? 2.0 * (N - 1) / N : 0.0;
  *ring_bytes = 0;
  for (int i = n - 1; i >= 0; i--) {
    if (nb == 0 || bytes >= cap) {
      if (nb) *ring_bytes += (int64_t)(f * (double)bytes + 0.5);
      nb++;
      bytes = 0;
    }
    bytes += (int64_t)zt_tensor_nbytes(ps[i].tensor);
  }
  if (nb) *ring_bytes += (int64_t)(f * (double)bytes + 0.5);
  return nb;
}

/* A post-accumulate-grad hook registered after DDP's on the parameter whose grad comes last
 * (the tied embedding): how many all-reduces had started by then, i.e. while backward ran. */
static int64_t g_started_in_backward;
static zt_status count_started(zt_tensor *leaf, void *ud) {
  (void)leaf;
  zt_dp_stats st;
  zt_ddp_stats_get(ud, &st);
  g_started_in_backward = st.all_reduces;
  return ZT_OK;
}

static void run_gpt2_case(const ddp_case *c) {
  zt_gpt2 *ref = NULL, *dm = NULL;
  zt_rng_seed(1234);
  ZT_CHECK_OK(zt_gpt2_new(&CFG, &ref));
  zt_rng_seed(1234);
  ZT_CHECK_OK(zt_gpt2_new(&CFG, &dm));
  if (!ref || !dm) goto out_models;
  int nr = 0, nd = 0;
  zt_param *pr = param_list(ref, c->unused, &nr), *pd = param_list(dm, c->unused, &nd);
  ZT_CHECK(nr == nd);
  zt_recompute_plan *rc = c->recompute ? zt_test_recompute(dm, ZT_RECOMPUTE_FULL, 1) : NULL;
  /* ranks other than 0 start from different values: the broadcast must fix that */
  if (R != 0) {
    bool prev = zt_set_grad_enabled(false);
    ZT_CHECK_OK(zt_tensor_set(pd[0].tensor, 0, 42.0));
    zt_set_grad_enabled(prev);
  }
  zt_optim_config oc = zt_optim_default(ZT_OPTIM_ADAMW);
  oc.lr = 1e-3;
  zt_optim *or_ = NULL, *od = NULL;
  ZT_CHECK_OK(zt_optim_new(&oc, nr, pr, &or_));
  ZT_CHECK_OK(zt_optim_new(&oc, nd, pd, &od));
  zt_ddp_options o = zt_ddp_options_default();
  o.bucket_bytes = c->bucket_bytes;
  zt_ddp *d = NULL;
  ZT_CHECK_OK(zt_ddp_new(W, nd, pd, &o, &d));
  if (!d || !or_ || !od) goto out;
  for (int i = 0; i < nd; i++) ZT_CHECK(zt_test_bitwise_equal(pr[i].tensor, pd[i].tensor));
  zt_dp_stats st;
  zt_ddp_stats_get(d, &st);
  ZT_CHECK(st.comm_calls == (N > 1 ? nd : 0) && st.all_reduces == 0);

  zt_hook_handle *probe = NULL;
  ZT_CHECK_OK(zt_tensor_register_post_accumulate_grad_hook(pd[0].tensor, count_started, d, &probe));
  int64_t ring = 0;
  int nb = expected_buckets(nd, pd, c->bucket_bytes, &ring);
  int micro = c->no_sync ? 2 : 1;
  for (int step = 0; step < STEPS; step++) {
    zt_ddp_stats_reset(d);
    zt_comm_stats cs0, cs1;
    zt_comm_stats_get(W, &cs0);
    double lref = 0, lddp = 0;
    for (int k = 0; k < micro; k++) {
      zt_tensor *ids = zt_test_rand_ids(GB, GT, CFG.vocab_size, 100 + 10 * step + k);
      zt_tensor *tg = zt_test_rand_ids(GB, GT, CFG.vocab_size, 500 + 10 * step + k);
      zt_tensor *ri = zt_test_rows(ids, R, N), *rt = zt_test_rows(tg, R, N);
      lref += zt_test_gpt2_fwd_bwd(ref, ids, tg);
      zt_ddp_set_sync(d, !c->no_sync || k == micro - 1);
      lddp += zt_test_gpt2_fwd_bwd(dm, ri, rt);
      zt_tensor *ts[] = {ids, tg, ri, rt};
      zt_test_free_all(ts, 4);
      if (c->no_sync && k == 0) { /* nothing communicated, grads are this rank's own */
        zt_ddp_stats_get(d, &st);
        ZT_CHECK(st.all_reduces == 0 && st.comm_calls == 0);
      }
    }
    /* overlap: every bucket started inside backward, before its end-of-backward callback;
     * with an unused parameter (in the first bucket) none may start before the callback */
    ZT_CHECK(g_started_in_backward == (c->unused ? 0 : nb));
    zt_comm_stats_get(W, &cs1);
    zt_ddp_stats_get(d, &st);
    ZT_CHECK(st.all_reduces == nb);
    ZT_CHECK(st.comm_calls == nb);
    ZT_CHECK(st.bytes_sent == ring);
    ZT_CHECK(st.all_gathers == 0 && st.reduce_scatters == 0 && st.wait_s >= 0);
    /* the group's own counters saw exactly these collectives */
    ZT_CHECK(cs1.calls - cs0.calls == nb && cs1.bytes_sent - cs0.bytes_sent == ring);
    double lavg = zt_test_mean_over(W, lddp);
    ZT_CHECK_NEAR(lavg, lref, LOSS_RTOL * fabs(lref));
    for (int i = 0; i < nd; i++) {
      zt_tensor *gr = pr[i].tensor->grad, *gd = pd[i].tensor->grad;
      ZT_CHECK(gd != NULL); /* every parameter, the unused one too, has a grad */
      if (!gd) continue;
      if (!gr) { /* only the unused parameter: a zero grad */
        ZT_CHECK(c->unused && i == nd - 1);
        for (int64_t j = 0; j < zt_tensor_numel(gd); j++) ZT_CHECK(zt_tensor_get(gd, j) == 0.0);
        continue;
      }
      double scale = 0;
      for (int64_t j = 0; j < zt_tensor_numel(gr); j++) scale = fmax(scale, fabs(zt_tensor_get(gr, j)));
      double diff = zt_test_max_abs_diff(gr, gd);
      if (!(diff <= GRAD_RTOL * scale + 1e-9))
        zt_test_fail(__FILE__, __LINE__, "step %d: grad of %s differs by %g (max |grad| %g)", step, pd[i].name, diff,
                     scale);
    }
    ZT_CHECK_OK(zt_optim_step(or_, oc.lr));
    ZT_CHECK_OK(zt_optim_step(od, oc.lr));
    zt_optim_zero_grad(or_);
    zt_optim_zero_grad(od);
  }
  double worst = 0;
  for (int i = 0; i < nd; i++) worst = fmax(worst, zt_test_max_abs_diff(pr[i].tensor, pd[i].tensor));
  if (!(worst <= PARAM_ATOL)) zt_test_fail(__FILE__, __LINE__, "parameters differ by %g after %d steps", worst, STEPS);
  zt_hook_remove(probe);
out:
  zt_ddp_free(d);
  zt_optim_free(or_);
  zt_optim_free(od);
  free(pr);
  free(pd);
  zt_recompute_plan_free(rc);
out_models:
  zt_gpt2_free(ref);
  zt_gpt2_free(dm);
}

static void test_gpt2_plain(void) { run_gpt2_case(&(ddp_case){25 << 20, false, false, false}); }
static void test_gpt2_small_buckets(void) {
  run_gpt2_case(&(ddp_case){1, false, false, false});    /* one bucket per parameter */
  run_gpt2_case(&(ddp_case){4096, false, false, false}); /* a few parameters per bucket */
  run_gpt2_case(&(ddp_case){INT64_MAX / 2, false, false, false}); /* one bucket */
}
static void test_gpt2_recompute(void) { run_gpt2_case(&(ddp_case){4096, true, false, false}); }
static void test_gpt2_no_sync(void) {
  run_gpt2_case(&(ddp_case){4096, false, true, false});
  run_gpt2_case(&(ddp_case){25 << 20, false, true, false});
}
static void test_gpt2_unused_param(void) {
  run_gpt2_case(&(ddp_case){25 << 20, false, false, true});
  run_gpt2_case(&(ddp_case){1, false, false, true});
}

/* ------------------------------------------------------------------ hand-made graphs */
/* loss_r = sum(a * x_r) + [used_b] sum(b * y_r), so grad a = x_r and grad b = y_r (or none):
 * the values are exact in f32 and their averages are checked exactly (to rounding). */
static double xv(int r, int64_t i) { return (r + 1) + 0.25 * (double)i; }
static double yv(int r, int64_t i) { return 0.5 * (r + 1) - 0.125 * (double)i; }

static zt_tensor *filled(zt_dtype dt, int64_t n, double (*f)(int, int64_t), int r) {
  zt_tensor *t = NULL;
  ZT_CHECK_OK(zt_tensor_empty(1, &n, dt, ZT_CPU, &t));
  for (int64_t i = 0; t && i < n; i++) ZT_CHECK_OK(zt_tensor_set(t, i, f(r, i)));
  return t;
}

static zt_status hand_backward(zt_tensor *a, zt_tensor *b, bool use_b, double mult) {
  zt_tensor *x = filled(a->dtype, a->shape[0], xv, R), *y = filled(b->dtype, b->shape[0], yv, R);
  zt_tensor *ax = NULL, *la = NULL, *by = NULL, *lb = NULL, *loss = NULL, *lm = NULL;
  zt_status s = zt_mul(a, x, &ax);
  if (!s) s = zt_sum(ax, 0, NULL, false, &la);
  if (!s && use_b) s = zt_mul(b, y, &by);
  if (!s && use_b) s = zt_sum(by, 0, NULL, false, &lb);
  if (!s) s = use_b ? zt_add(la, lb, &loss) : zt_mul_scalar(la, 1.0, &loss);
  if (!s) s = zt_mul_scalar(loss, mult, &lm);
  if (!s) s = zt_backward(1, &lm, NULL, false);
  zt_tensor *ts[] = {x, y, ax, la, by, lb, loss, lm};
  zt_test_free_all(ts, 8);
  return s;
}

static void drop_grads(zt_tensor *a, zt_tensor *b) {
  zt_tensor_free(a->grad);
  a->grad = NULL;
  zt_tensor_free(b->grad);
  b->grad = NULL;
}

/* a.grad == mult * mean_r x_r; b.grad == mult * (1/N) sum over ranks that used b of y_r */
static void check_hand_grads(zt_tensor *a, zt_tensor *b, int skip_rank, double mult) {
  ZT_CHECK(a->grad && b->grad);
  if (!a->grad || !b->grad) return;
  for (int64_t i = 0; i < a->shape[0]; i++) {
    double e = 0;
    for (int r = 0; r < N; r++) e += xv(r, i);
    ZT_CHECK_NEAR(zt_tensor_get(a->grad, i), mult * e / N, 1e-6);
  }
  for (int64_t i = 0; i < b->shape[0]; i++) {
    double e = 0;
    for (int r = 0; r < N; r++) e += r == skip_rank ? 0.0 : yv(r, i);
    ZT_CHECK_NEAR(zt_tensor_get(b->grad, i), mult * e / N, 1e-6);
  }
}

/* Parameter b unused on rank 1 only: its bucket still starts on every rank, in order (no
 * hang), and rank 1 gets the average in a new .grad. Both list orders, both bucket sizes,
 * f32 and f64, two backward passes each. */
static void test_unused_on_one_rank(void) {
  const zt_dtype dts[] = {ZT_DTYPE_F32, ZT_DTYPE_F64};
  for (int k = 0; k < 2; k++)
    for (int order = 0; order < 2; order++)
      for (int big = 0; big < 2; big++) {
        zt_tensor *a = zt_test_rand_leaf(1, (int64_t[]){4}, dts[k], -1, 1, 1);
        zt_tensor *b = zt_test_rand_leaf(1, (int64_t[]){6}, dts[k], -1, 1, 2);
        zt_param ps[2] = {{"a", a, false}, {"b", b, false}};
        if (order) ps[0] = (zt_param){"b", b, false}, ps[1] = (zt_param){"a", a, false};
        zt_ddp_options o = zt_ddp_options_default();
        o.bucket_bytes = big ? 1 << 20 : 1;
        zt_ddp *d = NULL;
        ZT_CHECK_OK(zt_ddp_new(W, 2, ps, &o, &d));
        for (int it = 0; d && it < 2; it++) {
          bool use_b = N == 1 || R != 1;
          ZT_CHECK_OK(hand_backward(a, b, use_b, 1.0));
          check_hand_grads(a, b, N == 1 ? -1 : 1, 1.0);
          zt_dp_stats st;
          zt_ddp_stats_get(d, &st);
          ZT_CHECK(st.all_reduces == (big ? 1 : 2) * (it + 1));
          drop_grads(a, b);
        }
        zt_ddp_free(d);
        zt_tensor_free(a);
        zt_tensor_free(b);
      }
}

/* no_sync: with sync off a backward only accumulates locally; the next synced backward
 * reduces the sum. zt_grad (no accumulation) touches nothing. */
static void test_no_sync_exact(void) {
  zt_tensor *a = zt_test_rand_leaf(1, (int64_t[]){4}, ZT_DTYPE_F32, -1, 1, 3);
  zt_tensor *b = zt_test_rand_leaf(1, (int64_t[]){6}, ZT_DTYPE_F32, -1, 1, 4);
  zt_param ps[2] = {{"a", a, false}, {"b", b, false}};
  zt_ddp *d = NULL;
  ZT_CHECK_OK(zt_ddp_new(W, 2, ps, NULL, &d));
  if (!d) goto out;
  ZT_CHECK(zt_ddp_sync(d));
  zt_ddp_set_sync(d, false);
  ZT_CHECK(!zt_ddp_sync(d));
  ZT_CHECK_OK(hand_backward(a, b, true, 1.0));
  for (int64_t i = 0; i < 4; i++) ZT_CHECK(zt_tensor_get(a->grad, i) == (float)xv(R, i)); /* local only */
  zt_dp_stats st;
  zt_ddp_stats_get(d, &st);
  ZT_CHECK(st.all_reduces == 0);
  zt_ddp_set_sync(d, true);
  ZT_CHECK_OK(hand_backward(a, b, true, 2.0)); /* accumulated: x_r + 2 x_r */
  check_hand_grads(a, b, -1, 3.0);
  zt_ddp_stats_get(d, &st);
  ZT_CHECK(st.all_reduces == 1);
  drop_grads(a, b);
  /* zt_grad accumulates nothing, so no hook fires and nothing is reduced */
  zt_tensor *x = filled(ZT_DTYPE_F32, 4, xv, R), *ax = NULL, *la = NULL, *ga = NULL;
  ZT_CHECK_OK(zt_mul(a, x, &ax));
  ZT_CHECK_OK(zt_sum(ax, 0, NULL, false, &la));
  ZT_CHECK_OK(zt_grad(1, &la, NULL, 1, &a, false, &ga));
  zt_ddp_stats_get(d, &st);
  ZT_CHECK(st.all_reduces == 1 && a->grad == NULL);
  zt_tensor *ts[] = {x, ax, la, ga};
  zt_test_free_all(ts, 4);
  /* and a plain backward afterwards is reduced as usual */
  ZT_CHECK_OK(hand_backward(a, b, true, 1.0));
  check_hand_grads(a, b, -1, 1.0);
  drop_grads(a, b);
out:
  zt_ddp_free(d);
  zt_tensor_free(a);
  zt_tensor_free(b);
}

/* A backward that fails after some DDP hooks ran (its end-of-backward callback never runs)
 * must not break the next one: the stale round is waited on and forgotten. */
static int g_fail_left;
static zt_status failing_hook(zt_tensor *leaf, void *ud) {
  (void)leaf, (void)ud;
  if (g_fail_left > 0) {
    g_fail_left--;
    return ZT_ERR(ZT_STATUS_STATE, "test hook fails on purpose");
  }
  return ZT_OK;
}

static void test_failed_backward_recovers(void) {
  for (int big = 0; big < 2; big++) {
    zt_tensor *a = zt_test_rand_leaf(1, (int64_t[]){4}, ZT_DTYPE_F32, -1, 1, 5);
    zt_tensor *b = zt_test_rand_leaf(1, (int64_t[]){6}, ZT_DTYPE_F32, -1, 1, 6);
    zt_param ps[2] = {{"a", a, false}, {"b", b, false}};
    zt_ddp_options o = zt_ddp_options_default();
    o.bucket_bytes = big ? 1 << 20 : 1;
    zt_ddp *d = NULL;
    zt_hook_handle *h = NULL;
    ZT_CHECK_OK(zt_ddp_new(W, 2, ps, &o, &d));
    if (!d) goto next;
    /* registered after DDP's hook, so DDP has marked the parameter ready when this fails */
    ZT_CHECK_OK(zt_tensor_register_post_accumulate_grad_hook(a, failing_hook, NULL, &h));
    ZT_CHECK_OK(zt_tensor_register_post_accumulate_grad_hook(b, failing_hook, NULL, NULL));
    g_fail_left = 1;
    ZT_CHECK_ERR(hand_backward(a, b, true, 1.0), ZT_STATUS_STATE, "fails on purpose");
    drop_grads(a, b);
    ZT_CHECK_OK(hand_backward(a, b, true, 1.0));
    check_hand_grads(a, b, -1, 1.0);
    drop_grads(a, b);
    /* freeing in the middle of a failed round waits for what it started */
    g_fail_left = 1;
    ZT_CHECK_ERR(hand_backward(a, b, true, 1.0), ZT_STATUS_STATE, "fails on purpose");
    drop_grads(a, b);
  next:
    zt_hook_remove(h);
    zt_ddp_free(d);
    zt_tensor_free(a);
    zt_tensor_free(b);
  }
}

/* Hooks are removed by zt_ddp_free: a later backward reduces nothing (local grads). */
static void test_free_removes_hooks(void) {
  zt_tensor *a = zt_test_rand_leaf(1, (int64_t[]){4}, ZT_DTYPE_F32, -1, 1, 7);
  zt_tensor *b = zt_test_rand_leaf(1, (int64_t[]){6}, ZT_DTYPE_F32, -1, 1, 8);
  zt_param ps[2] = {{"a", a, false}, {"b", b, false}};
  zt_ddp *d = NULL;
  ZT_CHECK_OK(zt_ddp_new(W, 2, ps, NULL, &d));
  zt_ddp_free(d);
  ZT_CHECK_OK(hand_backward(a, b, true, 1.0));
  for (int64_t i = 0; i < 4; i++) ZT_CHECK(zt_tensor_get(a->grad, i) == (float)xv(R, i));
  drop_grads(a, b);
  zt_tensor_free(a);
  zt_tensor_free(b);
  zt_ddp_free(NULL);
}

static void test_errors(void) {
  zt_tensor *a = zt_test_rand_leaf(1, (int64_t[]){4}, ZT_DTYPE_F32, -1, 1, 9);
  zt_param ps[2] = {{"a", a, false}, {"a_again", a, false}};
  zt_ddp *d = (zt_ddp *)&d;
  ZT_CHECK_ERR(zt_ddp_new(NULL, 1, ps, NULL, &d), ZT_STATUS_INVALID_ARG, "comm is NULL");
  ZT_CHECK(d == NULL);
  ZT_CHECK_ERR(zt_ddp_new(W, 1, NULL, NULL, &d), ZT_STATUS_INVALID_ARG, "params is NULL");
  ZT_CHECK_ERR(zt_ddp_new(W, 1, ps, NULL, NULL), ZT_STATUS_INVALID_ARG, "out is NULL");
  ZT_CHECK_ERR(zt_ddp_new(W, 2, ps, NULL, &d), ZT_STATUS_INVALID_ARG, "same tensor");
  zt_ddp_options o = zt_ddp_options_default();
  o.bucket_bytes = 0;
  ZT_CHECK_ERR(zt_ddp_new(W, 1, ps, &o, &d), ZT_STATUS_INVALID_ARG, "bucket_bytes");
  zt_tensor *h = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(1, (int64_t[]){4}, ZT_DTYPE_BF16, ZT_CPU, &h));
  ZT_CHECK_OK(zt_tensor_set_requires_grad(h, true));
  zt_param hp[1] = {{"half", h, false}};
  ZT_CHECK_ERR(zt_ddp_new(W, 1, hp, NULL, &d), ZT_STATUS_DTYPE, "'half' is bf16");
  ZT_CHECK(zt_ddp_options_default().bucket_bytes == 25 << 20 && zt_ddp_options_default().broadcast_params);
  zt_tensor_free(h);
  zt_tensor_free(a);
}

int main(int argc, char **argv) {
  (void)argc, (void)argv;
  if (!(W = zt_test_world(&R, &N))) return 1;
  ZT_RUN(test_errors);
  ZT_RUN(test_unused_on_one_rank);
  ZT_RUN(test_no_sync_exact);
  ZT_RUN(test_failed_backward_recovers);
  ZT_RUN(test_free_removes_hooks);
  ZT_RUN(test_gpt2_plain);
  ZT_RUN(test_gpt2_small_buckets);
  ZT_RUN(test_gpt2_recompute);
  ZT_RUN(test_gpt2_no_sync);
  ZT_RUN(test_gpt2_unused_param);
  int rc = zt_test_finish();
  zt_comm_free(W);
  return rc;
}
