/* Tests of softmax, log_softmax and fused cross-entropy: values against naive f64
 * references over every dim, numerical stability, f32 (fast exp) against f64, gradient
 * checks, ignore_index, the saved-memory promise of cross-entropy, and error messages. */
#include <stdlib.h>

#include "zt_test.h"
#include "core/tensor_internal.h"

/* Naive (log-)softmax of a along dim d, in f64, compared with y. Returns max relative error. */
static double softmax_err(const zt_tensor *a, int d, bool lg, const zt_tensor *y) {
  int64_t outer = 1, n = a->shape[d], inner = 1;
  for (int k = 0; k < d; k++) outer *= a->shape[k];
  for (int k = d + 1; k < a->ndim; k++) inner *= a->shape[k];
  double worst = 0;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      double m = -INFINITY, s = 0;
      for (int64_t k = 0; k < n; k++) m = fmax(m, zt_tensor_get(a, (o * n + k) * inner + i));
      for (int64_t k = 0; k < n; k++) s += exp(zt_tensor_get(a, (o * n + k) * inner + i) - m);
      for (int64_t k = 0; k < n; k++) {
        int64_t j = (o * n + k) * inner + i;
        double x = zt_tensor_get(a, j), want = lg ? x - m - log(s) : exp(x - m) / s;
        double e = fabs(zt_tensor_get(y, j) - want) / (lg ? 1 + fabs(want) : fabs(want) + 1e-30);
        if (!(e <= worst)) worst = e;
      }
    }
  return worst;
}

static void test_softmax_values_every_dim(void) {
  int64_t s[] = {3, 4, 70}; /* 70 columns: two column chunks when dim != last */
  for (int dt = 0; dt < 2; dt++) {
    zt_dtype t = dt ? ZT_DTYPE_F64 : ZT_DTYPE_F32;
    zt_tensor *a = zt_test_rand(3, s, t, -8, 8, 1);
    for (int d = -3; d < 3; d++)
      for (int lg = 0; lg < 2; lg++) {
        zt_tensor *y = NULL;
        ZT_CHECK_OK(lg ? zt_log_softmax(a, d, &y) : zt_softmax(a, d, &y));
        if (!y) continue;
        ZT_CHECK(zt_shape_equal(y->ndim, y->shape, 3, s) && y->dtype == t);
        double e = softmax_err(a, d < 0 ? d + 3 : d, lg, y);
        if (!(e <= (dt ? 1e-13 : 2e-6)))
          zt_test_fail(__FILE__, __LINE__, "%s dim %d %s: relative error %g", lg ? "log_softmax" : "softmax", d,
                       zt_dtype_name(t), e);
        zt_tensor_free(y);
      }
    zt_tensor_free(a);
  }
}

static void test_softmax_stable_and_edge(void) {
  int64_t s[] = {2, 3};
  double v[] = {1000, 1001, 1002, -1000, -1001, -3000};
  zt_tensor *a = NULL, *y = NULL, *ly = NULL;
  ZT_CHECK_OK(zt_tensor_from_data(2, s, ZT_DTYPE_F64, v, &a));
  ZT_CHECK_OK(zt_softmax(a, 1, &y));
  ZT_CHECK_OK(zt_log_softmax(a, -1, &ly));
  double e2 = exp(-1), e1 = exp(-2), z = 1 + e2 + e1;
  ZT_CHECK_NEAR(zt_tensor_get(y, 2), 1 / z, 1e-14);
  ZT_CHECK_NEAR(zt_tensor_get(y, 0), e1 / z, 1e-14);
  ZT_CHECK_NEAR(zt_tensor_get(ly, 0), -2 - log(z), 1e-13);
  ZT_CHECK_NEAR(zt_tensor_get(ly, 5), -2000 - log1p(exp(-1)), 1e-10);
  ZT_CHECK(zt_tensor_get(y, 5) == 0);
  zt_tensor_free(y);
  zt_tensor_free(ly);
  zt_tensor_free(a);
  /* f32 with -inf (masked) entries and a huge spread: exact zeros, no NaN */
  float w[] = {-INFINITY, 0, 50, -INFINITY, -200, 50};
  ZT_CHECK_OK(zt_tensor_from_data(2, s, ZT_DTYPE_F32, w, &a));
  ZT_CHECK_OK(zt_softmax(a, 1, &y));
  ZT_CHECK(zt_tensor_get(y, 0) == 0 && zt_tensor_get(y, 3) == 0 && zt_tensor_get(y, 4) == 0);
  ZT_CHECK_NEAR(zt_tensor_get(y, 2), 1, 1e-7);
  zt_tensor_free(y);
  zt_tensor_free(a);
  /* 0-d and size-1 dims: softmax 1, log_softmax 0 */
  double one = 3.5;
  ZT_CHECK_OK(zt_tensor_from_data(0, NULL, ZT_DTYPE_F64, &one, &a));
  ZT_CHECK_OK(zt_softmax(a, 0, &y));
  ZT_CHECK_OK(zt_log_softmax(a, 0, &ly));
  ZT_CHECK(y->ndim == 0 && zt_tensor_get(y, 0) == 1 && zt_tensor_get(ly, 0) == 0);
  zt_tensor_free(y);
  zt_tensor_free(ly);
  zt_tensor_free(a);
}

static void test_softmax_f32_large_rows(void) {
  int64_t s[] = {6, 50257};
  zt_tensor *a = zt_test_rand(2, s, ZT_DTYPE_F64, -12, 12, 3), *af = NULL;
  ZT_CHECK_OK(zt_tensor_empty(2, s, ZT_DTYPE_F32, ZT_CPU, &af));
  ZT_CHECK_OK(zt_tensor_copy_(af, a));
  for (int lg = 0; lg < 2; lg++) {
    zt_tensor *y = NULL;
    ZT_CHECK_OK(lg ? zt_log_softmax(af, 1, &y) : zt_softmax(af, 1, &y));
    double e = softmax_err(af, 1, lg, y);
    if (!(e <= 2e-6)) zt_test_fail(__FILE__, __LINE__, "f32 %s on (6, 50257): error %g", lg ? "log" : "", e);
    zt_tensor_free(y);
  }
  zt_tensor_free(af);
  zt_tensor_free(a);
}

typedef struct sm_args {
  int dim;
  bool log;
} sm_args;

static zt_status f_softmax(zt_tensor *const *in, zt_tensor **out, void *ud) {
  sm_args *a = ud;
  return a->log ? zt_log_softmax(in[0], a->dim, out) : zt_softmax(in[0], a->dim, out);
}

static void test_softmax_gradcheck(void) {
  int64_t s[] = {3, 4, 5}, sc[] = {3, 70}, s1[] = {6};
  zt_tensor *a = zt_test_rand_leaf(3, s, ZT_DTYPE_F64, -2, 2, 5);
  for (int d = -1; d < 3; d++)
    for (int lg = 0; lg < 2; lg++) ZT_GRADCHECK(f_softmax, 1, &a, (&(sm_args){d, lg}), NULL);
  zt_tensor_free(a);
  a = zt_test_rand_leaf(2, sc, ZT_DTYPE_F64, -2, 2, 6); /* dim 0: column chunks */
  for (int lg = 0; lg < 2; lg++) ZT_GRADCHECK(f_softmax, 1, &a, (&(sm_args){0, lg}), NULL);
  zt_tensor_free(a);
  a = zt_test_rand_leaf(1, s1, ZT_DTYPE_F64, -2, 2, 7);
  for (int lg = 0; lg < 2; lg++) ZT_GRADCHECK(f_softmax, 1, &a, (&(sm_args){0, lg}), NULL);
  zt_tensor_free(a);
}

/* softmax(a) * b: only a requires grad. */
static zt_status f_softmax_mul(zt_tensor *const *in, zt_tensor **out, void *ud) {
  (void)ud;
  zt_tensor *t = NULL;
  ZT_TRY(zt_softmax(in[0], 1, &t));
  zt_status s = zt_mul(t, in[1], out);
  zt_tensor_free(t);
  return s;
}

static void test_softmax_partial_requires_grad(void) {
  int64_t s[] = {4, 5};
  zt_tensor *a = zt_test_rand_leaf(2, s, ZT_DTYPE_F64, -1, 1, 8), *b = zt_test_rand(2, s, ZT_DTYPE_F64, -1, 1, 9);
  ZT_GRADCHECK(f_softmax_mul, 2, ((zt_tensor *[]){a, b}), NULL, NULL);
  zt_tensor *y = NULL;
  ZT_CHECK_OK(zt_log_softmax(b, 0, &y));
  ZT_CHECK(y && !y->requires_grad && !y->grad_fn);
  zt_tensor_free(y);
  zt_tensor_free(a);
  zt_tensor_free(b);
}

static void test_softmax_errors(void) {
  int64_t s[] = {2, 3};
  zt_tensor *a = zt_test_rand(2, s, ZT_DTYPE_F32, -1, 1, 10), *i = NULL, *y = NULL;
  ZT_CHECK_ERR(zt_softmax(a, 2, &y), ZT_STATUS_SHAPE, "op 'softmax': softmax: dim 2 is out of range");
  ZT_CHECK_ERR(zt_log_softmax(a, -3, &y), ZT_STATUS_SHAPE, "log_softmax: dim -3 is out of range");
  ZT_CHECK_OK(zt_tensor_zeros(2, s, ZT_DTYPE_I32, ZT_CPU, &i));
  ZT_CHECK_ERR(zt_softmax(i, 0, &y), ZT_STATUS_DTYPE, "has dtype i32");
  ZT_CHECK_ERR(zt_softmax(NULL, 0, &y), ZT_STATUS_INVALID_ARG, "input is NULL");
  ZT_CHECK(y == NULL);
  zt_tensor_free(i);
  zt_tensor_free(a);
}

/* ------------------------------------------------------------------ cross-entropy */

/* Targets tensor from values, as i32 or i64. */
static zt_tensor *targets_of(int ndim, const int64_t *shape, const int64_t *v, bool i32) {
  zt_tensor *t = NULL;
  ZT_CHECK_OK(zt_tensor_empty(ndim, shape, i32 ? ZT_DTYPE_I32 : ZT_DTYPE_I64, ZT_CPU, &t));
  for (int64_t k = 0; k < zt_tensor_numel(t); k++) ZT_CHECK_OK(zt_tensor_set(t, k, (double)v[k]));
  return t;
}

/* The loss and dlogits by hand from zt_log_softmax: -mean(logp[r, t_r]) over non-ignored
 * rows; grad (softmax - onehot) / count. */
static void ce_by_hand(zt_tensor *logits, const int64_t *tg, int64_t ignore, double *loss, double *grad) {
  int64_t V = logits->shape[logits->ndim - 1], R = zt_tensor_numel(logits) / V, count = 0;
  zt_tensor *lp = NULL;
  bool prev = zt_set_grad_enabled(false);
  ZT_CHECK_OK(zt_log_softmax(logits, -1, &lp));
  zt_set_grad_enabled(prev);
  double sum = 0;
  for (int64_t r = 0; r < R; r++)
    if (tg[r] != ignore) {
      sum -= zt_tensor_get(lp, r * V + tg[r]);
      count++;
    }
  *loss = count ? sum / (double)count : 0;
  for (int64_t r = 0; r < R; r++)
    for (int64_t j = 0; j < V; j++)
      grad[r * V + j] =
          tg[r] == ignore ? 0 : (exp(zt_tensor_get(lp, r * V + j)) - (j == tg[r])) / (double)count;
  zt_tensor_free(lp);
}

static void check_ce_against_hand(zt_dtype dt, bool i32, int64_t ignore, const int64_t *tg, double tol) {
  int64_t s[] = {2, 3, 7};
  zt_tensor *x = zt_test_rand_leaf(3, s, dt, -4, 4, 20), *t = targets_of(2, s, tg, i32), *l = NULL;
  double want, grad[42];
  ce_by_hand(x, tg, ignore, &want, grad);
  ZT_CHECK_OK(zt_cross_entropy(x, t, ignore, &l));
  if (l) {
    ZT_CHECK(l->ndim == 0 && l->dtype == dt && l->requires_grad);
    ZT_CHECK_NEAR(zt_tensor_get(l, 0), want, tol);
    ZT_CHECK_OK(zt_backward(1, &l, NULL, false));
    for (int k = 0; x->grad && k < 42; k++) ZT_CHECK_NEAR(zt_tensor_get(x->grad, k), grad[k], tol);
  }
  zt_tensor_free(l);
  zt_tensor_free(t);
  zt_tensor_free(x);
}

static void test_ce_matches_log_softmax_gather(void) {
  int64_t tg[] = {0, 6, 3, 2, 2, 5};
  int64_t tg_ign[] = {0, -100, 3, -100, 2, 5}, tg_ign3[] = {3, 6, 3, 2, 3, 5};
  for (int i32 = 0; i32 < 2; i32++) {
    check_ce_against_hand(ZT_DTYPE_F64, i32, -100, tg, 1e-14);
    check_ce_against_hand(ZT_DTYPE_F32, i32, -100, tg, 2e-6);
    check_ce_against_hand(ZT_DTYPE_F64, i32, -100, tg_ign, 1e-14);
    check_ce_against_hand(ZT_DTYPE_F64, i32, 3, tg_ign3, 1e-14); /* an in-range ignore_index */
  }
}

static void test_ce_all_ignored(void) {
  int64_t s[] = {3, 4}, tg[] = {-1, -1, -1};
  zt_tensor *x = zt_test_rand_leaf(2, s, ZT_DTYPE_F32, -1, 1, 21), *t = targets_of(1, s, tg, false), *l = NULL;
  ZT_CHECK_OK(zt_cross_entropy(x, t, -1, &l));
  ZT_CHECK(l && zt_tensor_get(l, 0) == 0);
  ZT_CHECK_OK(zt_backward(1, &l, NULL, false));
  for (int k = 0; x->grad && k < 12; k++) ZT_CHECK(zt_tensor_get(x->grad, k) == 0);
  ZT_CHECK(x->grad != NULL);
  zt_tensor_free(l);
  zt_tensor_free(t);
  zt_tensor_free(x);
}

static zt_status f_ce(zt_tensor *const *in, zt_tensor **out, void *ud) {
  return zt_cross_entropy(in[0], in[1], *(int64_t *)ud, out);
}

static void test_ce_gradcheck(void) {
  int64_t ign = -100;
  int64_t s2[] = {5, 6}, t2[] = {1, -100, 5, 0, -100};
  zt_tensor *x = zt_test_rand_leaf(2, s2, ZT_DTYPE_F64, -2, 2, 30), *t = targets_of(1, s2, t2, true);
  ZT_GRADCHECK(f_ce, 2, ((zt_tensor *[]){x, t}), &ign, NULL);
  zt_tensor_free(x);
  zt_tensor_free(t);
  int64_t s3[] = {2, 3, 4}, t3[] = {3, 0, 1, 2, 2, 1};
  x = zt_test_rand_leaf(3, s3, ZT_DTYPE_F64, -2, 2, 31);
  t = targets_of(2, s3, t3, false);
  ZT_GRADCHECK(f_ce, 2, ((zt_tensor *[]){x, t}), &ign, NULL);
  zt_tensor_free(x);
  zt_tensor_free(t);
  /* 1-D logits (V) with a 0-d target */
  int64_t s1[] = {5}, t1[] = {4};
  x = zt_test_rand_leaf(1, s1, ZT_DTYPE_F64, -2, 2, 32);
  t = targets_of(0, NULL, t1, false);
  ZT_GRADCHECK(f_ce, 2, ((zt_tensor *[]){x, t}), &ign, NULL);
  zt_tensor_free(x);
  zt_tensor_free(t);
}

/* Many rows (parallel path) and a GPT-2 sized vocabulary: f32 (fast exp) against f64. */
static void test_ce_f32_large_vs_f64(void) {
  int64_t s[] = {24, 50257}, tg[24];
  for (int r = 0; r < 24; r++) tg[r] = r % 5 == 3 ? -100 : (r * 7919) % 50257;
  zt_tensor *x64 = zt_test_rand_leaf(2, s, ZT_DTYPE_F64, -10, 10, 40), *x32 = NULL, *t = targets_of(1, s, tg, false);
  ZT_CHECK_OK(zt_tensor_empty(2, s, ZT_DTYPE_F32, ZT_CPU, &x32));
  ZT_CHECK_OK(zt_tensor_copy_(x32, x64));
  ZT_CHECK_OK(zt_tensor_set_requires_grad(x32, true));
  zt_tensor *l64 = NULL, *l32 = NULL;
  ZT_CHECK_OK(zt_cross_entropy(x64, t, -100, &l64));
  ZT_CHECK_OK(zt_cross_entropy(x32, t, -100, &l32));
  ZT_CHECK_NEAR(zt_tensor_get(l32, 0), zt_tensor_get(l64, 0), 1e-5);
  ZT_CHECK_OK(zt_backward(1, &l64, NULL, false));
  ZT_CHECK_OK(zt_backward(1, &l32, NULL, false));
  ZT_CHECK(zt_test_max_abs_diff(x32->grad, x64->grad) < 1e-8); /* grads are ~1e-5 / 19 rows */
  /* the loss against a direct f64 sum */
  double sum = 0;
  int cnt = 0;
  for (int r = 0; r < 24; r++) {
    if (tg[r] == -100) continue;
    double m = -INFINITY, z = 0;
    for (int64_t j = 0; j < 50257; j++) m = fmax(m, zt_tensor_get(x64, r * 50257 + j));
    for (int64_t j = 0; j < 50257; j++) z += exp(zt_tensor_get(x64, r * 50257 + j) - m);
    sum += m + log(z) - zt_tensor_get(x64, r * 50257 + tg[r]);
    cnt++;
  }
  ZT_CHECK_NEAR(zt_tensor_get(l64, 0), sum / cnt, 1e-12);
  zt_tensor_free(l64);
  zt_tensor_free(l32);
  zt_tensor_free(t);
  zt_tensor_free(x32);
  zt_tensor_free(x64);
}

/* Per-row losses are summed in row order: 1 and 2 threads give the same bits. */
static void test_ce_thread_count_independent(void) {
  int64_t s[] = {300, 700}, tg[300];
  for (int r = 0; r < 300; r++) tg[r] = (r * 31) % 700;
  zt_tensor *x = zt_test_rand(2, s, ZT_DTYPE_F32, -5, 5, 45), *t = targets_of(1, s, tg, false), *l1 = NULL, *l2 = NULL;
  int prev = zt_get_num_threads();
  zt_set_num_threads(1);
  ZT_CHECK_OK(zt_cross_entropy(x, t, -100, &l1));
  zt_set_num_threads(2);
  ZT_CHECK_OK(zt_cross_entropy(x, t, -100, &l2));
  zt_set_num_threads(prev);
  ZT_CHECK(l1 && l2 && zt_test_bitwise_equal(l1, l2));
  zt_tensor_free(l1);
  zt_tensor_free(l2);
  zt_tensor_free(t);
  zt_tensor_free(x);
}

static void test_ce_saves_no_softmax_matrix(void) {
  int64_t s[] = {64, 1000}, tg[64];
  for (int r = 0; r < 64; r++) tg[r] = (r * 37) % 1000;
  zt_tensor *x = zt_test_rand_leaf(2, s, ZT_DTYPE_F32, -3, 3, 50), *t = targets_of(1, s, tg, true), *l = NULL;
  zt_mem_stats before, after;
  zt_mem_stats_get(ZT_CPU, &before);
  zt_mem_reset_peaks();
  ZT_CHECK_OK(zt_cross_entropy(x, t, -100, &l));
  zt_mem_stats_get(ZT_CPU, &after);
  /* kept: the 0-d loss and one f32 logsumexp per row; peak adds only the f64 row losses */
  ZT_CHECK(after.current_total - before.current_total == 4 + 64 * 4);
  ZT_CHECK(after.peak_total - before.current_total <= 4 + 64 * 4 + 64 * 8);
  ZT_CHECK_OK(zt_backward(1, &l, NULL, false));
  zt_tensor_free(l);
  zt_tensor_free(t);
  zt_tensor_free(x);
}

static void test_ce_strided_logits_and_no_grad(void) {
  int64_t s[] = {9, 4}, tg[] = {0, 8, 3, -100}; /* logits = transpose of (9, 4): (4, 9) */
  zt_tensor *base = zt_test_rand(2, s, ZT_DTYPE_F64, -2, 2, 60), *x = NULL, *xc = NULL;
  int64_t shape[] = {4, 9}, stride[] = {1, 4};
  ZT_CHECK_OK(zt__tensor_new_view(base->storage, 0, 2, shape, stride, ZT_DTYPE_F64, &x));
  ZT_CHECK_OK(zt_tensor_clone_data(x, ZT_MEM_TAG_ACTIVATION, &xc));
  zt_tensor *t = targets_of(1, shape, tg, false), *l1 = NULL, *l2 = NULL;
  ZT_CHECK_OK(zt_cross_entropy(x, t, -100, &l1));
  ZT_CHECK_OK(zt_cross_entropy(xc, t, -100, &l2));
  ZT_CHECK(l1 && l2 && zt_tensor_get(l1, 0) == zt_tensor_get(l2, 0));
  ZT_CHECK(l1 && !l1->requires_grad && !l1->grad_fn); /* nothing needs a grad: no node */
  zt_tensor_free(l1);
  zt_tensor_free(l2);
  zt_tensor_free(t);
  zt_tensor_free(xc);
  zt_tensor_free(x);
  zt_tensor_free(base);
}

static void test_ce_errors(void) {
  int64_t s[] = {2, 3, 7}, bad[] = {2, 4}, tg[] = {0, 1, 2, 3, 4, 5};
  zt_tensor *x = zt_test_rand_leaf(3, s, ZT_DTYPE_F32, -1, 1, 70), *l = NULL;
  zt_tensor *t = targets_of(2, s, tg, false);
  /* wrong target dtype */
  zt_tensor *tf = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(2, s, ZT_DTYPE_F32, ZT_CPU, &tf));
  ZT_CHECK_ERR(zt_cross_entropy(x, tf, -100, &l), ZT_STATUS_DTYPE,
               "targets have dtype f32; they must be class indices");
  /* logits not float */
  zt_tensor *xi = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(3, s, ZT_DTYPE_I64, ZT_CPU, &xi));
  ZT_CHECK_ERR(zt_cross_entropy(xi, t, -100, &l), ZT_STATUS_DTYPE, "logits has dtype i64");
  /* shape mismatch */
  zt_tensor *tb = targets_of(2, bad, (int64_t[]){0, 0, 0, 0, 0, 0, 0, 0}, false);
  ZT_CHECK_ERR(zt_cross_entropy(x, tb, -100, &l), ZT_STATUS_SHAPE,
               "targets have shape (2, 4) but logits (2, 3, 7) need targets of shape (2, 3)");
  zt_tensor *x0 = NULL;
  double one = 1;
  ZT_CHECK_OK(zt_tensor_from_data(0, NULL, ZT_DTYPE_F64, &one, &x0));
  ZT_CHECK_ERR(zt_cross_entropy(x0, t, -100, &l), ZT_STATUS_SHAPE, "logits are 0-d");
  ZT_CHECK_ERR(zt_cross_entropy(x, NULL, -100, &l), ZT_STATUS_INVALID_ARG, "targets is NULL");
  /* targets out of range: position and value named */
  int64_t hi[] = {0, 1, 2, 3, 4, 7}, neg[] = {0, -5, 2, 3, 4, 6};
  zt_tensor *th = targets_of(2, s, hi, true), *tn = targets_of(2, s, neg, false);
  ZT_CHECK_ERR(zt_cross_entropy(x, th, -100, &l), ZT_STATUS_INVALID_ARG,
               "target at position (1, 2) (flat 5) is 7, outside [0, 7) and not ignore_index (-100)");
  ZT_CHECK_ERR(zt_cross_entropy(x, tn, -100, &l), ZT_STATUS_INVALID_ARG, "position (0, 1) (flat 1) is -5");
  ZT_CHECK(l == NULL);
  ZT_CHECK_OK(zt_cross_entropy(x, tn, -5, &l)); /* fine once -5 is the ignore_index */
  zt_tensor_free(l);
  zt_tensor_free(th);
  zt_tensor_free(tn);
  zt_tensor_free(x0);
  zt_tensor_free(tb);
  zt_tensor_free(xi);
  zt_tensor_free(tf);
  zt_tensor_free(t);
  zt_tensor_free(x);
}

int main(void) {
  ZT_RUN(test_softmax_values_every_dim);
  ZT_RUN(test_softmax_stable_and_edge);
  ZT_RUN(test_softmax_f32_large_rows);
  ZT_RUN(test_softmax_gradcheck);
  ZT_RUN(test_softmax_partial_requires_grad);
  ZT_RUN(test_softmax_errors);
  ZT_RUN(test_ce_matches_log_softmax_gather);
  ZT_RUN(test_ce_all_ignored);
  ZT_RUN(test_ce_gradcheck);
  ZT_RUN(test_ce_f32_large_vs_f64);
  ZT_RUN(test_ce_thread_count_independent);
  ZT_RUN(test_ce_saves_no_softmax_matrix);
  ZT_RUN(test_ce_strided_logits_and_no_grad);
  ZT_RUN(test_ce_errors);
  return zt_test_finish();
}
