/* Tests of sum, mean and max: values against a naive reference over every subset of
 * dims (keepdim on/off, f32 and f64, strided inputs, shapes large enough for the blocked
 * and parallel paths), gradient checks, first-maximum grads, and error messages. */
#include <stdlib.h>

#include "zt_test.h"
#include "core/tensor_internal.h"

/* ------------------------------------------------------------------ references */

/* Naive sum/mean of a over the dims in mask into ref (numel of the kept dims). */
static void ref_sum(const zt_tensor *a, uint32_t mask, bool mean, double *ref, int64_t nref) {
  for (int64_t k = 0; k < nref; k++) ref[k] = 0;
  int64_t n = zt_tensor_numel(a), count = 1;
  for (int d = 0; d < a->ndim; d++)
    if (mask & (1u << d)) count *= a->shape[d];
  for (int64_t i = 0; i < n; i++) {
    int64_t rem = i, o = 0, ostr = 1;
    for (int d = a->ndim - 1; d >= 0; d--) {
      int64_t id = rem % a->shape[d];
      rem /= a->shape[d];
      if (!(mask & (1u << d))) {
        o += id * ostr;
        ostr *= a->shape[d];
      }
    }
    ref[o] += zt_tensor_get(a, i);
  }
  if (mean)
    for (int64_t k = 0; k < nref; k++) ref[k] /= (double)count;
}

/* Check zt_sum / zt_mean of a over the dims in mask against ref_sum (shape and values). */
static void check_sum(zt_tensor *a, uint32_t mask, bool mean, bool keepdim, double tol) {
  int dims[ZT_MAX_DIMS], nd = 0;
  for (int d = 0; d < a->ndim; d++)
    if (mask & (1u << d)) dims[nd++] = (d % 2) ? d - a->ndim : d; /* mix negative dims in */
  if (nd == 0) return;
  zt_tensor *out = NULL;
  ZT_CHECK_OK(mean ? zt_mean(a, nd, dims, keepdim, &out) : zt_sum(a, nd, dims, keepdim, &out));
  if (!out) return;
  int64_t eshape[ZT_MAX_DIMS];
  int en = 0;
  for (int d = 0; d < a->ndim; d++) {
    if (!(mask & (1u << d)))
      eshape[en++] = a->shape[d];
    else if (keepdim)
      eshape[en++] = 1;
  }
  ZT_CHECK(zt_shape_equal(out->ndim, out->shape, en, eshape));
  int64_t nref = zt_tensor_numel(out);
  double *ref = malloc(sizeof *ref * (size_t)(nref ? nref : 1));
  ref_sum(a, mask, mean, ref, nref);
  double worst = 0;
  for (int64_t k = 0; k < nref; k++) {
    double d = fabs(zt_tensor_get(out, k) - ref[k]) / (1 + fabs(ref[k]));
    if (!(d <= worst)) worst = d;
  }
  if (!(worst <= tol))
    zt_test_fail(__FILE__, __LINE__, "%s over mask 0x%x (keepdim %d, %s): relative error %g", mean ? "mean" : "sum",
                 mask, keepdim, zt_dtype_name(a->dtype), worst);
  free(ref);
  zt_tensor_free(out);
}

/* ------------------------------------------------------------------ sum / mean values */

static void test_sum_every_subset(void) {
  int64_t s3[] = {3, 4, 5}, s5[] = {2, 1, 3, 4, 2};
  for (int dt = 0; dt < 2; dt++) {
    zt_dtype t = dt ? ZT_DTYPE_F64 : ZT_DTYPE_F32;
    double tol = dt ? 1e-14 : 1e-6;
    zt_tensor *a = zt_test_rand(3, s3, t, -1, 1, 11), *b = zt_test_rand(5, s5, t, -1, 1, 12);
    for (uint32_t m = 1; m < 8; m++)
      for (int k = 0; k < 4; k++) check_sum(a, m, k & 1, k & 2, tol);
    for (uint32_t m = 1; m < 32; m++)
      for (int k = 0; k < 4; k++) check_sum(b, m, k & 1, k & 2, tol);
    zt_tensor_free(a);
    zt_tensor_free(b);
  }
}

static void test_sum_large_paths(void) {
  /* blocked partial sums (few outputs, long reductions), many outputs, alternating groups */
  int64_t s1[] = {3000, 50}, s2[] = {5, 70000}, s3[] = {6, 7, 80, 90}, s4[] = {200000}, s5[] = {64, 300};
  zt_tensor *a = zt_test_rand(2, s1, ZT_DTYPE_F32, -1, 1, 21);
  check_sum(a, 1, false, false, 1e-6);
  check_sum(a, 2, true, true, 1e-6);
  zt_tensor_free(a);
  a = zt_test_rand(2, s2, ZT_DTYPE_F32, -1, 1, 22);
  check_sum(a, 2, false, false, 1e-6);
  check_sum(a, 1, false, true, 1e-6);
  check_sum(a, 3, true, false, 1e-6);
  zt_tensor_free(a);
  a = zt_test_rand(4, s3, ZT_DTYPE_F64, -1, 1, 23);
  for (uint32_t m = 1; m < 16; m++) check_sum(a, m, m & 1, m & 2, 1e-13);
  zt_tensor_free(a);
  a = zt_test_rand(1, s4, ZT_DTYPE_F32, 0, 1, 24);
  check_sum(a, 1, false, false, 1e-7); /* f64 accumulation: far better than naive f32 */
  check_sum(a, 1, true, false, 1e-7);
  zt_tensor_free(a);
  a = zt_test_rand(2, s5, ZT_DTYPE_F64, -1, 1, 25); /* inner kept, wider than one column chunk */
  check_sum(a, 1, false, false, 1e-13);
  zt_tensor_free(a);
  int64_t s6[] = {2000, 300}, s7[] = {40, 3, 2000};
  a = zt_test_rand(2, s6, ZT_DTYPE_F64, -1, 1, 26); /* blocked, two column chunks */
  check_sum(a, 1, false, true, 1e-13);
  zt_tensor_free(a);
  a = zt_test_rand(3, s7, ZT_DTYPE_F32, -1, 1, 27); /* blocked across rows of an outer reduced group */
  check_sum(a, 5, false, false, 1e-6);
  check_sum(a, 5, true, true, 1e-6);
  zt_tensor_free(a);
}

/* The summation order is fixed by the shape: 1 and 2 threads give the same bits. */
static void test_sum_thread_count_independent(void) {
  int64_t s1[] = {3000, 50}, s2[] = {5, 70000}, s3[] = {40, 3, 2000};
  int64_t *shapes[] = {s1, s2, s3};
  int nds[] = {2, 2, 3};
  int prev = zt_get_num_threads();
  for (int k = 0; k < 3; k++) {
    zt_tensor *a = zt_test_rand(nds[k], shapes[k], ZT_DTYPE_F32, -1, 1, 28 + (uint64_t)k);
    for (int mode = 0; mode < 3; mode++) {
      int dims[] = {0, 2};
      int nd = mode == 0 ? 0 : mode == 1 ? 1 : (nds[k] == 3 ? 2 : 1);
      zt_tensor *o1 = NULL, *o2 = NULL;
      zt_set_num_threads(1);
      ZT_CHECK_OK(zt_sum(a, nd, dims, false, &o1));
      zt_set_num_threads(2);
      ZT_CHECK_OK(zt_sum(a, nd, dims, false, &o2));
      ZT_CHECK(o1 && o2 && zt_test_bitwise_equal(o1, o2));
      zt_tensor_free(o1);
      zt_tensor_free(o2);
    }
    zt_tensor_free(a);
  }
  zt_set_num_threads(prev);
}

static void test_sum_all_dims_and_0d(void) {
  int64_t s[] = {2, 3};
  double v[] = {1, 2, 3, 4, 5, 6};
  zt_tensor *a = NULL, *o = NULL;
  ZT_CHECK_OK(zt_tensor_from_data(2, s, ZT_DTYPE_F64, v, &a));
  ZT_CHECK_OK(zt_sum(a, 0, NULL, false, &o));
  ZT_CHECK(o && o->ndim == 0);
  ZT_CHECK_NEAR(zt_tensor_get(o, 0), 21, 0);
  zt_tensor_free(o);
  ZT_CHECK_OK(zt_mean(a, 0, NULL, true, &o));
  ZT_CHECK(o && o->ndim == 2 && o->shape[0] == 1 && o->shape[1] == 1);
  ZT_CHECK_NEAR(zt_tensor_get(o, 0), 3.5, 1e-15);
  zt_tensor_free(o);
  /* 0-d input: all-dims and dim 0 reduce nothing */
  zt_tensor *z = NULL, *z2 = NULL;
  ZT_CHECK_OK(zt_sum(a, 0, NULL, false, &z));
  ZT_CHECK_OK(zt_mean(z, 1, (int[]){0}, false, &z2)); /* -1 too once zt__norm_dim takes it for 0-d */
  ZT_CHECK(z2 && z2->ndim == 0);
  ZT_CHECK_NEAR(zt_tensor_get(z2, 0), 21, 0);
  zt_tensor_free(z2);
  ZT_CHECK_OK(zt_sum(z, 0, NULL, true, &z2));
  ZT_CHECK(z2 && z2->ndim == 0);
  zt_tensor_free(z2);
  zt_tensor_free(z);
  zt_tensor_free(a);
}

static void test_sum_empty(void) {
  int64_t s[] = {0, 3};
  zt_tensor *a = NULL, *o = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(2, s, ZT_DTYPE_F32, ZT_CPU, &a));
  ZT_CHECK_OK(zt_sum(a, 1, (int[]){0}, false, &o));
  ZT_CHECK(o && o->ndim == 1 && o->shape[0] == 3);
  ZT_CHECK(zt_tensor_get(o, 0) == 0 && zt_tensor_get(o, 2) == 0);
  zt_tensor_free(o);
  ZT_CHECK_OK(zt_mean(a, 1, (int[]){0}, false, &o));
  ZT_CHECK(isnan(zt_tensor_get(o, 1))); /* mean of nothing */
  zt_tensor_free(o);
  ZT_CHECK_OK(zt_sum(a, 1, (int[]){1}, true, &o)); /* nothing to write */
  ZT_CHECK(o && o->shape[0] == 0 && o->shape[1] == 1);
  zt_tensor_free(o);
  zt_tensor_free(a);
}

/* A transposed (non-contiguous) view of a (R, C) tensor: (C, R). */
static zt_tensor *transposed(zt_tensor *a) {
  zt_tensor *t = NULL;
  int64_t shape[] = {a->shape[1], a->shape[0]}, stride[] = {a->stride[1], a->stride[0]};
  ZT_CHECK_OK(zt__tensor_new_view(a->storage, a->offset, 2, shape, stride, a->dtype, &t));
  return t;
}

static void test_sum_strided_input(void) {
  int64_t s[] = {7, 9};
  zt_tensor *a = zt_test_rand(2, s, ZT_DTYPE_F64, -1, 1, 31);
  zt_tensor *t = transposed(a);
  ZT_CHECK(!zt_tensor_is_contiguous(t));
  for (uint32_t m = 1; m < 4; m++) check_sum(t, m, false, false, 1e-14);
  zt_tensor_free(t);
  zt_tensor_free(a);
}

static void test_sum_f32_matches_f64(void) {
  int64_t s[] = {33, 17, 65};
  zt_tensor *a = zt_test_rand(3, s, ZT_DTYPE_F64, -3, 3, 41);
  zt_tensor *b = NULL;
  ZT_CHECK_OK(zt_tensor_empty(3, s, ZT_DTYPE_F32, ZT_CPU, &b));
  ZT_CHECK_OK(zt_tensor_copy_(b, a));
  int dims[] = {0, 2};
  zt_tensor *o64 = NULL, *o32 = NULL;
  ZT_CHECK_OK(zt_mean(a, 2, dims, false, &o64));
  ZT_CHECK_OK(zt_mean(b, 2, dims, false, &o32));
  ZT_CHECK(zt_test_max_abs_diff(o64, o32) < 1e-6);
  zt_tensor_free(o64);
  zt_tensor_free(o32);
  zt_tensor_free(a);
  zt_tensor_free(b);
}

/* ------------------------------------------------------------------ sum / mean grads */

typedef struct red_args {
  bool mean, keepdim;
  int n;
  int dims[4];
} red_args;

static zt_status f_red(zt_tensor *const *in, zt_tensor **out, void *ud) {
  red_args *r = ud;
  return r->mean ? zt_mean(in[0], r->n, r->dims, r->keepdim, out) : zt_sum(in[0], r->n, r->dims, r->keepdim, out);
}

static void test_sum_mean_gradcheck(void) {
  int64_t s[] = {3, 4, 5};
  zt_tensor *a = zt_test_rand_leaf(3, s, ZT_DTYPE_F64, -1, 1, 51);
  red_args cases[] = {
      {false, false, 1, {0}},     {true, true, 1, {0}},       {false, true, 1, {1}},     {true, false, 1, {-2}},
      {false, false, 1, {2}},     {true, true, 1, {-1}},      {false, false, 2, {0, 2}}, {true, true, 2, {2, 0}},
      {false, true, 2, {1, 2}},   {true, false, 3, {0, 1, 2}}, {false, false, 0, {0}},   {true, true, 0, {0}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) ZT_GRADCHECK(f_red, 1, &a, &cases[k], NULL);
  zt_tensor_free(a);
  int64_t s1[] = {6};
  a = zt_test_rand_leaf(1, s1, ZT_DTYPE_F64, -1, 1, 52);
  ZT_GRADCHECK(f_red, 1, &a, &cases[11], NULL);
  zt_tensor_free(a);
}

/* sum(a * b over dim 1): only a requires grad; b is a plain input. */
static zt_status f_mul_sum(zt_tensor *const *in, zt_tensor **out, void *ud) {
  (void)ud;
  zt_tensor *t = NULL;
  ZT_TRY(zt_mul(in[0], in[1], &t));
  zt_status s = zt_sum(t, 1, (int[]){1}, false, out);
  zt_tensor_free(t);
  return s;
}

static void test_sum_partial_requires_grad(void) {
  int64_t s[] = {4, 6};
  zt_tensor *a = zt_test_rand_leaf(2, s, ZT_DTYPE_F64, -1, 1, 61);
  zt_tensor *b = zt_test_rand(2, s, ZT_DTYPE_F64, -1, 1, 62);
  ZT_GRADCHECK(f_mul_sum, 2, ((zt_tensor *[]){a, b}), NULL, NULL);
  /* no grad needed anywhere: nothing recorded */
  zt_tensor *o = NULL;
  ZT_CHECK_OK(zt_sum(b, 0, NULL, false, &o));
  ZT_CHECK(o && !o->requires_grad && !o->grad_fn);
  zt_tensor_free(o);
  zt_tensor_free(a);
  zt_tensor_free(b);
}

static void test_sum_backward_values(void) {
  /* mean over dim 0 of (4, 3): each input gets g / 4 */
  int64_t s[] = {4, 3};
  zt_tensor *a = zt_test_rand_leaf(2, s, ZT_DTYPE_F32, -1, 1, 71), *m = NULL, *l = NULL;
  ZT_CHECK_OK(zt_mean(a, 1, (int[]){0}, false, &m));
  ZT_CHECK_OK(zt_sum(m, 0, NULL, false, &l));
  ZT_CHECK_OK(zt_backward(1, &l, NULL, false));
  ZT_CHECK(a->grad && a->grad->dtype == ZT_DTYPE_F32);
  for (int64_t i = 0; a->grad && i < 12; i++) ZT_CHECK_NEAR(zt_tensor_get(a->grad, i), 0.25, 0);
  zt_tensor_free(l);
  zt_tensor_free(m);
  zt_tensor_free(a);
}

/* ------------------------------------------------------------------ max */

static void test_max_values_and_indices(void) {
  int64_t s[] = {3, 4, 5};
  zt_tensor *a = zt_test_rand(3, s, ZT_DTYPE_F64, -1, 1, 81);
  for (int d = -3; d < 3; d++)
    for (int keep = 0; keep < 2; keep++) {
      zt_tensor *v = NULL, *ix = NULL;
      ZT_CHECK_OK(zt_max(a, d, keep, &v, &ix));
      if (!v || !ix) continue;
      int dd = d < 0 ? d + 3 : d;
      ZT_CHECK(ix->dtype == ZT_DTYPE_I64 && v->dtype == ZT_DTYPE_F64);
      ZT_CHECK(v->ndim == (keep ? 3 : 2) && zt_shape_equal(v->ndim, v->shape, ix->ndim, ix->shape));
      /* naive check: walk the output positions (outer, inner) around dd */
      int64_t outer = 1, inner = 1, n = s[dd];
      for (int k = 0; k < dd; k++) outer *= s[k];
      for (int k = dd + 1; k < 3; k++) inner *= s[k];
      for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
          double best = -INFINITY;
          int64_t bi = -1;
          for (int64_t k = 0; k < n; k++) {
            double x = zt_tensor_get(a, (o * n + k) * inner + i);
            if (x > best) {
              best = x;
              bi = k;
            }
          }
          ZT_CHECK(zt_tensor_get(v, o * inner + i) == best);
          ZT_CHECK(zt_tensor_get(ix, o * inner + i) == (double)bi);
        }
      zt_tensor_free(v);
      zt_tensor_free(ix);
    }
  zt_tensor_free(a);
}

static void test_max_ties_first_and_nan(void) {
  int64_t s[] = {2, 4};
  double v[] = {1, 3, 3, 2, 5, NAN, 7, NAN};
  zt_tensor *a = NULL, *val = NULL, *ix = NULL, *l = NULL;
  ZT_CHECK_OK(zt_tensor_from_data(2, s, ZT_DTYPE_F64, v, &a));
  ZT_CHECK_OK(zt_tensor_set_requires_grad(a, true));
  ZT_CHECK_OK(zt_max(a, 1, false, &val, &ix));
  ZT_CHECK(zt_tensor_get(val, 0) == 3 && zt_tensor_get(ix, 0) == 1);
  ZT_CHECK(isnan(zt_tensor_get(val, 1)) && zt_tensor_get(ix, 1) == 1); /* first NaN wins */
  ZT_CHECK(!ix->requires_grad && val->requires_grad);
  ZT_CHECK_OK(zt_sum(val, 0, NULL, false, &l));
  zt_tensor_free(ix); /* backward must not need the caller's indices tensor */
  ZT_CHECK_OK(zt_backward(1, &l, NULL, false));
  double want[] = {0, 1, 0, 0, 0, 1, 0, 0};
  for (int i = 0; a->grad && i < 8; i++) ZT_CHECK(zt_tensor_get(a->grad, i) == want[i]);
  zt_tensor_free(l);
  zt_tensor_free(val);
  zt_tensor_free(a);
  /* columns path (dim 0 of (3, 2)) with ties too, f32 */
  int64_t s2[] = {3, 2};
  float w[] = {4, 1, 4, 2, 0, 2};
  ZT_CHECK_OK(zt_tensor_from_data(2, s2, ZT_DTYPE_F32, w, &a));
  ZT_CHECK_OK(zt_max(a, 0, true, &val, &ix));
  ZT_CHECK(val->ndim == 2 && val->shape[0] == 1 && val->shape[1] == 2);
  ZT_CHECK(zt_tensor_get(val, 0) == 4 && zt_tensor_get(ix, 0) == 0);
  ZT_CHECK(zt_tensor_get(val, 1) == 2 && zt_tensor_get(ix, 1) == 1);
  zt_tensor_free(val);
  zt_tensor_free(ix);
  zt_tensor_free(a);
}

typedef struct max_args {
  int dim;
  bool keepdim;
} max_args;

static zt_status f_max(zt_tensor *const *in, zt_tensor **out, void *ud) {
  max_args *m = ud;
  return zt_max(in[0], m->dim, m->keepdim, out, NULL);
}

static void test_max_gradcheck(void) {
  int64_t s[] = {4, 5, 6};
  zt_tensor *a = zt_test_rand_leaf(3, s, ZT_DTYPE_F64, -1, 1, 91);
  max_args cases[] = {{0, false}, {0, true}, {1, false}, {-2, true}, {2, false}, {-1, true}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) ZT_GRADCHECK(f_max, 1, &a, &cases[k], NULL);
  zt_tensor_free(a);
  int64_t s1[] = {7};
  a = zt_test_rand_leaf(1, s1, ZT_DTYPE_F64, -1, 1, 92);
  ZT_GRADCHECK(f_max, 1, &a, &cases[0], NULL);
  zt_tensor_free(a);
}

static void test_max_large(void) {
  int64_t s[] = {300, 200};
  zt_tensor *a = zt_test_rand(2, s, ZT_DTYPE_F32, -1, 1, 95), *v = NULL, *ix = NULL;
  ZT_CHECK_OK(zt_max(a, 0, false, &v, &ix));
  for (int64_t i = 0; v && i < 200; i++) {
    double best = -INFINITY;
    for (int64_t k = 0; k < 300; k++) best = fmax(best, zt_tensor_get(a, k * 200 + i));
    ZT_CHECK(zt_tensor_get(v, i) == best);
    ZT_CHECK(zt_tensor_get(a, (int64_t)zt_tensor_get(ix, i) * 200 + i) == best);
  }
  zt_tensor_free(v);
  zt_tensor_free(ix);
  zt_tensor_free(a);
}

/* ------------------------------------------------------------------ errors */

static void test_reduce_errors(void) {
  int64_t s[] = {2, 3}, z[] = {2, 0};
  zt_tensor *a = zt_test_rand(2, s, ZT_DTYPE_F32, -1, 1, 101), *o = NULL, *ix = NULL;
  ZT_CHECK_ERR(zt_sum(a, 1, (int[]){2}, false, &o), ZT_STATUS_SHAPE, "dim 2 is out of range for a tensor with 2 dims");
  ZT_CHECK_ERR(zt_mean(a, 1, (int[]){-3}, false, &o), ZT_STATUS_SHAPE, "op 'mean'");
  ZT_CHECK_ERR(zt_sum(a, 2, ((int[]){1, -1}), false, &o), ZT_STATUS_INVALID_ARG, "dim -1 appears more than once");
  ZT_CHECK_ERR(zt_sum(a, 2, ((int[]){0, 0}), false, &o), ZT_STATUS_INVALID_ARG, "appears more than once");
  ZT_CHECK_ERR(zt_sum(a, 9, ((int[]){0, 1, 0, 1, 0, 1, 0, 1, 0}), false, &o), ZT_STATUS_INVALID_ARG,
               "at most 8");
  ZT_CHECK_ERR(zt_sum(a, 1, NULL, false, &o), ZT_STATUS_INVALID_ARG, "dims is NULL");
  ZT_CHECK_ERR(zt_sum(NULL, 0, NULL, false, &o), ZT_STATUS_INVALID_ARG, "input is NULL");
  ZT_CHECK_ERR(zt_max(a, 2, false, &o, &ix), ZT_STATUS_SHAPE, "op 'max': max: dim 2 is out of range");
  ZT_CHECK_ERR(zt_max(a, 0, false, NULL, &ix), ZT_STATUS_INVALID_ARG, "values pointer is NULL");
  ZT_CHECK(o == NULL && ix == NULL);
  zt_tensor *e = NULL, *iv = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(2, z, ZT_DTYPE_F64, ZT_CPU, &e));
  ZT_CHECK_ERR(zt_max(e, 1, false, &o, NULL), ZT_STATUS_SHAPE, "has size 0, so it has no max");
  ZT_CHECK_OK(zt_tensor_zeros(2, s, ZT_DTYPE_I64, ZT_CPU, &iv));
  ZT_CHECK_ERR(zt_sum(iv, 0, NULL, false, &o), ZT_STATUS_DTYPE, "has dtype i64");
  ZT_CHECK_ERR(zt_max(iv, 0, false, &o, NULL), ZT_STATUS_DTYPE, "has dtype i64");
  zt_tensor_free(iv);
  zt_tensor_free(e);
  zt_tensor_free(a);
}

int main(void) {
  ZT_RUN(test_sum_every_subset);
  ZT_RUN(test_sum_large_paths);
  ZT_RUN(test_sum_thread_count_independent);
  ZT_RUN(test_sum_all_dims_and_0d);
  ZT_RUN(test_sum_empty);
  ZT_RUN(test_sum_strided_input);
  ZT_RUN(test_sum_f32_matches_f64);
  ZT_RUN(test_sum_mean_gradcheck);
  ZT_RUN(test_sum_partial_requires_grad);
  ZT_RUN(test_sum_backward_values);
  ZT_RUN(test_max_values_and_indices);
  ZT_RUN(test_max_ties_first_and_nan);
  ZT_RUN(test_max_gradcheck);
  ZT_RUN(test_max_large);
  ZT_RUN(test_reduce_errors);
  return zt_test_finish();
}
