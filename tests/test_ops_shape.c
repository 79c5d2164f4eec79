/* Shape ops and zt_cast: view semantics (shared storage and version counter, views of
 * views), values, gradient checks (several dims, negative dims, partial requires-grad),
 * error messages, and the rounding of dtype conversions. */
#include <stdlib.h>

#include "zt_test.h"
#include "core/tensor_internal.h"
#include "ops/cpu/shape.h"

/* ------------------------------------------------ helpers */
/* 0, 1, 2, ... in row-major order. */
static zt_tensor *arange(int nd, const int64_t *shape, zt_dtype dt) {
  zt_tensor *t = NULL;
  ZT_CHECK_OK(zt_tensor_empty(nd, shape, dt, ZT_CPU, &t));
  for (int64_t i = 0; i < zt_tensor_numel(t); i++) ZT_CHECK_OK(zt_tensor_set(t, i, (double)i));
  return t;
}

/* Element offset (from t->offset) of logical index i. */
static int64_t elem_off(const zt_tensor *t, int64_t i) {
  int64_t off = 0;
  for (int d = t->ndim - 1; d >= 0; d--) {
    off += (i % t->shape[d]) * t->stride[d];
    i /= t->shape[d];
  }
  return off;
}

static int64_t get_i64(const zt_tensor *t, int64_t i) {
  return ((const int64_t *)zt__tensor_ptr(t))[elem_off(t, i)];
}

static bool shape_is(const zt_tensor *t, int nd, const int64_t *shape) {
  return zt_shape_equal(t->ndim, t->shape, nd, shape);
}

/* The logical index in a (a->shape) of out's logical index i, for out = permute(a, p). */
static int64_t permuted_src(const zt_tensor *a, const int *p, const int64_t *out_shape, int64_t i) {
  int64_t idx[ZT_MAX_DIMS], src[ZT_MAX_DIMS];
  for (int k = a->ndim - 1; k >= 0; k--) {
    idx[k] = i % out_shape[k];
    i /= out_shape[k];
  }
  for (int k = 0; k < a->ndim; k++) src[p[k]] = idx[k];
  int64_t lin = 0;
  for (int k = 0; k < a->ndim; k++) lin = lin * a->shape[k] + src[k];
  return lin;
}

static zt_tensor *from_f32(int n, const float *v) {
  zt_tensor *t = NULL;
  ZT_CHECK_OK(zt_tensor_from_data(1, (int64_t[]){n}, ZT_DTYPE_F32, v, &t));
  return t;
}
static zt_tensor *from_f64(int n, const double *v) {
  zt_tensor *t = NULL;
  ZT_CHECK_OK(zt_tensor_from_data(1, (int64_t[]){n}, ZT_DTYPE_F64, v, &t));
  return t;
}

/* ------------------------------------------------ reshape */
static void test_reshape_view(void) {
  int64_t s[] = {2, 3, 4};
  zt_tensor *a = arange(3, s, ZT_DTYPE_F64), *r = NULL, *z = NULL, *t = NULL, *rc = NULL;
  ZT_CHECK_OK(zt_reshape(a, 2, (int64_t[]){4, -1}, &r));
  ZT_CHECK(shape_is(r, 2, (int64_t[]){4, 6}));
  ZT_CHECK(r->is_view && r->storage == a->storage && zt_tensor_is_contiguous(r));
  for (int64_t i = 0; i < 24; i++) ZT_CHECK(zt_tensor_get(r, i) == (double)i);
  /* writing through the base is visible in the view; one version counter */
  uint64_t v0 = r->storage->version;
  ZT_CHECK_OK(zt_tensor_set(a, 5, 100.0));
  ZT_CHECK(zt_tensor_get(r, 5) == 100.0);
  ZT_CHECK(r->storage->version == v0 + 1 && a->storage->version == r->storage->version);
  ZT_CHECK_OK(zt_tensor_set(r, 6, -1.0)); /* and the other way */
  ZT_CHECK(zt_tensor_get(a, 6) == -1.0);
  /* a one-element tensor to 0-d and back */
  zt_tensor *one = arange(1, (int64_t[]){1}, ZT_DTYPE_F32);
  ZT_CHECK_OK(zt_reshape(one, 0, NULL, &z));
  ZT_CHECK(z->ndim == 0 && zt_tensor_numel(z) == 1 && z->is_view);
  /* non-contiguous input: a copy in logical order, not a view */
  ZT_CHECK_OK(zt_transpose(a, 0, 2, &t));
  ZT_CHECK_OK(zt_reshape(t, 1, (int64_t[]){-1}, &rc));
  ZT_CHECK(!rc->is_view && rc->storage != a->storage && shape_is(rc, 1, (int64_t[]){24}));
  for (int64_t i = 0; i < 24; i++) ZT_CHECK(zt_tensor_get(rc, i) == zt_tensor_get(t, i));
  ZT_CHECK_OK(zt_tensor_set(a, 0, 7.0));
  ZT_CHECK(zt_tensor_get(rc, 0) == 0.0);
  zt_tensor *list[] = {a, r, z, t, rc, one};
  for (int i = 0; i < 6; i++) zt_tensor_free(list[i]);
}

static void test_reshape_errors(void) {
  int64_t s[] = {2, 3, 4};
  zt_tensor *a = arange(3, s, ZT_DTYPE_F32), *o = NULL;
  ZT_CHECK_ERR(zt_reshape(a, 2, (int64_t[]){5, 5}, &o), ZT_STATUS_SHAPE,
               "cannot reshape a tensor of shape (2, 3, 4) (24 elements) into shape (5, 5)");
  ZT_CHECK_ERR(zt_reshape(a, 2, (int64_t[]){5, -1}, &o), ZT_STATUS_SHAPE, "of shape (2, 3, 4) (24 elements) into shape (5, -1)");
  ZT_CHECK_ERR(zt_reshape(a, 2, (int64_t[]){-1, -1}, &o), ZT_STATUS_SHAPE, "only one dim may be -1");
  ZT_CHECK_ERR(zt_reshape(a, 2, (int64_t[]){-2, -12}, &o), ZT_STATUS_SHAPE, "size -2 in dim 0 is negative");
  ZT_CHECK_ERR(zt_reshape(a, 9, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 2, 12}, &o), ZT_STATUS_SHAPE, "9 dims requested");
  ZT_CHECK_ERR(zt_reshape(a, 2, NULL, &o), ZT_STATUS_INVALID_ARG, "shape is NULL");
  ZT_CHECK_ERR(zt_reshape(NULL, 1, (int64_t[]){1}, &o), ZT_STATUS_INVALID_ARG, "input 0 is NULL");
  zt_tensor *e = NULL;
  ZT_CHECK_OK(zt_tensor_empty(2, (int64_t[]){0, 3}, ZT_DTYPE_F32, ZT_CPU, &e));
  ZT_CHECK_ERR(zt_reshape(e, 2, (int64_t[]){0, -1}, &o), ZT_STATUS_SHAPE, "cannot infer the -1");
  ZT_CHECK_OK(zt_reshape(e, 3, (int64_t[]){3, 0, 5}, &o));
  ZT_CHECK(o && zt_tensor_numel(o) == 0);
  zt_tensor_free(o);
  zt_tensor_free(e);
  zt_tensor_free(a);
}

typedef struct shape_ud {
  int ndim;
  int64_t shape[ZT_MAX_DIMS];
  bool transpose_first; /* reshape a non-contiguous view (the copy path) */
} shape_ud;

static zt_status f_reshape(zt_tensor *const *in, zt_tensor **out, void *ud) {
  shape_ud *u = ud;
  zt_tensor *src = in[0], *t = NULL, *r = NULL;
  if (u->transpose_first) {
    ZT_TRY(zt_transpose(in[0], 0, -1, &t));
    src = t;
  }
  zt_status s = zt_reshape(src, u->ndim, u->shape, &r);
  if (!s) s = zt_mul(r, r, out);
  zt_tensor_free(t);
  zt_tensor_free(r);
  return s;
}

static void test_reshape_gradcheck(void) {
  int64_t s[] = {2, 3, 4};
  zt_tensor *x = zt_test_rand_leaf(3, s, ZT_DTYPE_F64, -1, 1, 11);
  shape_ud u1 = {2, {4, -1}, false}, u2 = {3, {4, 1, -1}, true}, u3 = {1, {24}, false};
  ZT_GRADCHECK(f_reshape, 1, &x, &u1, NULL);
  ZT_GRADCHECK(f_reshape, 1, &x, &u2, NULL);
  ZT_GRADCHECK(f_reshape, 1, &x, &u3, NULL);
  zt_tensor_free(x);
}

/* ------------------------------------------------ transpose and permute */
static void test_transpose(void) {
  int64_t s[] = {2, 3, 4};
  zt_tensor *a = arange(3, s, ZT_DTYPE_F64), *t = NULL, *t2 = NULL, *o = NULL;
  ZT_CHECK_OK(zt_transpose(a, 0, -1, &t));
  ZT_CHECK(shape_is(t, 3, (int64_t[]){4, 3, 2}) && t->is_view && t->storage == a->storage);
  ZT_CHECK(!zt_tensor_is_contiguous(t) && t->stride[0] == 1 && t->stride[2] == 12);
  int p[] = {2, 1, 0};
  for (int64_t i = 0; i < 24; i++) ZT_CHECK(zt_tensor_get(t, i) == (double)permuted_src(a, p, t->shape, i));
  ZT_CHECK_OK(zt_transpose(a, -2, 1, &t2)); /* same dim twice: a view equal to a */
  for (int64_t i = 0; i < 24; i++) ZT_CHECK(zt_tensor_get(t2, i) == (double)i);
  ZT_CHECK_OK(zt_tensor_set(a, 1, 50.0)); /* a[0,0,1] is t[1,0,0] */
  ZT_CHECK(zt_tensor_get(t, 6) == 50.0);
  ZT_CHECK_ERR(zt_transpose(a, 0, 3, &o), ZT_STATUS_SHAPE, "transpose: dim 3 is out of range for a tensor with 3 dims");
  ZT_CHECK_ERR(zt_transpose(a, -4, 0, &o), ZT_STATUS_SHAPE, "dim -4 is out of range");
  ZT_CHECK_ERR(zt_transpose(NULL, 0, 1, &o), ZT_STATUS_INVALID_ARG, "transpose: input is NULL");
  zt_tensor_free(a);
  zt_tensor_free(t);
  zt_tensor_free(t2);
}

typedef struct dims_ud {
  int d[ZT_MAX_DIMS];
} dims_ud;

/* out = transpose(x, d0, d1) * w (w shaped like the output, may require grad or not) */
static zt_status f_transpose_mul(zt_tensor *const *in, zt_tensor **out, void *ud) {
  dims_ud *u = ud;
  zt_tensor *t = NULL;
  ZT_TRY(zt_transpose(in[0], u->d[0], u->d[1], &t));
  zt_status s = zt_mul(t, in[1] ? in[1] : t, out);
  zt_tensor_free(t);
  return s;
}

static zt_status f_permute_mul(zt_tensor *const *in, zt_tensor **out, void *ud) {
  dims_ud *u = ud;
  zt_tensor *t = NULL;
  ZT_TRY(zt_permute(in[0], u->d, &t));
  zt_status s = zt_mul(t, in[1] ? in[1] : t, out);
  zt_tensor_free(t);
  return s;
}

static void test_transpose_permute_gradcheck(void) {
  int64_t s[] = {2, 3, 4};
  zt_tensor *x = zt_test_rand_leaf(3, s, ZT_DTYPE_F64, -1, 1, 21);
  dims_ud t1 = {{0, 2}}, t2 = {{-1, -2}}, t3 = {{1, 1}};
  ZT_GRADCHECK(f_transpose_mul, 2, ((zt_tensor *[]){x, NULL}), &t1, NULL);
  ZT_GRADCHECK(f_transpose_mul, 2, ((zt_tensor *[]){x, NULL}), &t2, NULL);
  ZT_GRADCHECK(f_transpose_mul, 2, ((zt_tensor *[]){x, NULL}), &t3, NULL);
  /* both inputs, then only w requires grad (x needs no grad) */
  zt_tensor *w = zt_test_rand_leaf(3, (int64_t[]){4, 3, 2}, ZT_DTYPE_F64, -1, 1, 22);
  ZT_GRADCHECK(f_transpose_mul, 2, ((zt_tensor *[]){x, w}), &t1, NULL);
  x->requires_grad = false;
  ZT_GRADCHECK(f_transpose_mul, 2, ((zt_tensor *[]){x, w}), &t1, NULL);
  ZT_CHECK(x->grad == NULL);
  x->requires_grad = true;
  zt_tensor_free(w);
  /* 4-d permutes, negative dims */
  zt_tensor *y = zt_test_rand_leaf(4, (int64_t[]){2, 3, 4, 5}, ZT_DTYPE_F64, -1, 1, 23);
  dims_ud p1 = {{-3, -1, 0, 2}}, p2 = {{3, 2, 1, 0}}, p3 = {{0, 1, 3, 2}}, p4 = {{0, 1, 2, 3}};
  ZT_GRADCHECK(f_permute_mul, 2, ((zt_tensor *[]){y, NULL}), &p1, NULL);
  ZT_GRADCHECK(f_permute_mul, 2, ((zt_tensor *[]){y, NULL}), &p2, NULL);
  ZT_GRADCHECK(f_permute_mul, 2, ((zt_tensor *[]){y, NULL}), &p3, NULL);
  ZT_GRADCHECK(f_permute_mul, 2, ((zt_tensor *[]){y, NULL}), &p4, NULL);
  zt_tensor_free(x);
  zt_tensor_free(y);
}

static void test_permute(void) {
  int64_t s[] = {2, 3, 4, 5};
  zt_tensor *a = arange(4, s, ZT_DTYPE_F32), *p = NULL, *o = NULL;
  int dims[] = {2, -1, 0, 1}, norm[] = {2, 3, 0, 1};
  ZT_CHECK_OK(zt_permute(a, dims, &p));
  ZT_CHECK(shape_is(p, 4, (int64_t[]){4, 5, 2, 3}) && p->is_view && p->storage == a->storage);
  for (int64_t i = 0; i < 120; i++) ZT_CHECK(zt_tensor_get(p, i) == (double)permuted_src(a, norm, p->shape, i));
  ZT_CHECK_ERR(zt_permute(a, (int[]){0, 0, 1, 2}, &o), ZT_STATUS_SHAPE,
               "dims (0, 0, 1, 2) are not a permutation of the 4 dims (dim 0 appears twice)");
  ZT_CHECK_ERR(zt_permute(a, (int[]){0, -4, 1, 2}, &o), ZT_STATUS_SHAPE, "appears twice");
  ZT_CHECK_ERR(zt_permute(a, (int[]){0, 1, 2, 4}, &o), ZT_STATUS_SHAPE, "dim 4 is out of range for a tensor with 4 dims");
  ZT_CHECK_ERR(zt_permute(a, NULL, &o), ZT_STATUS_INVALID_ARG, "permute: dims is NULL");
  zt_tensor_free(a);
  zt_tensor_free(p);
}

/* ------------------------------------------------ narrow */
static void test_narrow(void) {
  int64_t s[] = {3, 5};
  zt_tensor *a = arange(2, s, ZT_DTYPE_F64), *n = NULL, *n2 = NULL, *n0 = NULL, *e = NULL, *m = NULL, *o = NULL;
  ZT_CHECK_OK(zt_narrow(a, 1, 1, 3, &n));
  ZT_CHECK(shape_is(n, 2, (int64_t[]){3, 3}) && n->is_view && n->storage == a->storage && n->offset == 1);
  ZT_CHECK(!zt_tensor_is_contiguous(n));
  for (int64_t i = 0; i < 9; i++) ZT_CHECK(zt_tensor_get(n, i) == (double)(i / 3 * 5 + 1 + i % 3));
  ZT_CHECK_OK(zt_narrow(a, -1, -2, 2, &n2)); /* negative dim and start: the last two columns */
  for (int64_t i = 0; i < 6; i++) ZT_CHECK(zt_tensor_get(n2, i) == (double)(i / 2 * 5 + 3 + i % 2));
  ZT_CHECK_OK(zt_narrow(a, 0, 1, 2, &n0)); /* leading dim: still contiguous */
  ZT_CHECK(zt_tensor_is_contiguous(n0) && n0->offset == 5);
  /* later (non-view) ops accept the non-contiguous view */
  ZT_CHECK_OK(zt_exp(n, &e));
  ZT_CHECK_OK(zt_mul(n, n, &m));
  for (int64_t i = 0; i < 9; i++) {
    double v = zt_tensor_get(n, i);
    ZT_CHECK_NEAR(zt_tensor_get(e, i), exp(v), 1e-12);
    ZT_CHECK(zt_tensor_get(m, i) == v * v);
  }
  ZT_CHECK_OK(zt_tensor_set(a, 7, -3.0)); /* a[1,2] = n[1,1] */
  ZT_CHECK(zt_tensor_get(n, 4) == -3.0);
  ZT_CHECK_ERR(zt_narrow(a, 1, 3, 3, &o), ZT_STATUS_SHAPE,
               "start 3 + length 3 is out of range for dim 1 of size 5 (shape (3, 5))");
  ZT_CHECK_ERR(zt_narrow(a, 1, 6, 0, &o), ZT_STATUS_SHAPE, "start 6 is out of range for dim 1 of size 5");
  ZT_CHECK_ERR(zt_narrow(a, 1, -6, 1, &o), ZT_STATUS_SHAPE, "start -6 is out of range");
  ZT_CHECK_ERR(zt_narrow(a, 0, 0, -1, &o), ZT_STATUS_SHAPE, "length -1 is out of range");
  ZT_CHECK_ERR(zt_narrow(a, 2, 0, 1, &o), ZT_STATUS_SHAPE, "narrow: dim 2 is out of range");
  zt_tensor *z = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(0, NULL, ZT_DTYPE_F32, ZT_CPU, &z));
  ZT_CHECK_ERR(zt_narrow(z, 0, 0, 1, &o), ZT_STATUS_SHAPE, "cannot narrow a 0-d tensor");
  ZT_CHECK_OK(zt_narrow(a, 1, 5, 0, &o)); /* empty slice at the end is fine */
  ZT_CHECK(o && zt_tensor_numel(o) == 0);
  zt_tensor *list[] = {a, n, n2, n0, e, m, o, z};
  for (int i = 0; i < 8; i++) zt_tensor_free(list[i]);
}

typedef struct narrow_ud {
  int dim;
  int64_t start, len;
} narrow_ud;

static zt_status f_narrow_mul(zt_tensor *const *in, zt_tensor **out, void *ud) {
  narrow_ud *u = ud;
  zt_tensor *t = NULL;
  ZT_TRY(zt_narrow(in[0], u->dim, u->start, u->len, &t));
  zt_status s = zt_mul(t, in[1] ? in[1] : t, out);
  zt_tensor_free(t);
  return s;
}

static void test_narrow_gradcheck(void) {
  zt_tensor *x = zt_test_rand_leaf(3, (int64_t[]){3, 4, 5}, ZT_DTYPE_F64, -1, 1, 31);
  narrow_ud u[] = {{1, 1, 2}, {-1, -3, 3}, {0, 0, 3}, {2, 4, 1}, {0, 2, 1}};
  for (int k = 0; k < 5; k++) ZT_GRADCHECK(f_narrow_mul, 2, ((zt_tensor *[]){x, NULL}), &u[k], NULL);
  zt_tensor *w = zt_test_rand_leaf(3, (int64_t[]){3, 2, 5}, ZT_DTYPE_F64, -1, 1, 32);
  ZT_GRADCHECK(f_narrow_mul, 2, ((zt_tensor *[]){x, w}), &u[0], NULL);
  x->requires_grad = false; /* only w */
  ZT_GRADCHECK(f_narrow_mul, 2, ((zt_tensor *[]){x, w}), &u[0], NULL);
  x->requires_grad = true;
  zt_tensor_free(w);
  zt_tensor_free(x);
}

/* ------------------------------------------------ views of views, versions, autograd */
static void test_views_of_views(void) {
  int64_t s[] = {4, 6};
  zt_tensor *x = arange(2, s, ZT_DTYPE_F64), *v1 = NULL, *v2 = NULL, *v3 = NULL, *v4 = NULL;
  ZT_CHECK_OK(zt_transpose(x, 0, 1, &v1));    /* (6, 4) */
  ZT_CHECK_OK(zt_narrow(v1, 0, 2, 3, &v2));   /* (3, 4): columns 2..4 of x */
  ZT_CHECK_OK(zt_permute(v2, (int[]){1, 0}, &v3)); /* (4, 3) = x[:, 2:5] */
  ZT_CHECK_OK(zt_reshape(v3, 1, (int64_t[]){12}, &v4)); /* not viewable: a copy */
  ZT_CHECK(v1->storage == x->storage && v2->storage == x->storage && v3->storage == x->storage);
  ZT_CHECK(v1->is_view && v2->is_view && v3->is_view && !v4->is_view && v4->storage != x->storage);
  for (int64_t i = 0; i < 12; i++) {
    double want = (double)(i / 3 * 6 + 2 + i % 3);
    ZT_CHECK(zt_tensor_get(v3, i) == want && zt_tensor_get(v4, i) == want);
  }
  /* base -> every view; a view -> the base and its sibling views; one version counter */
  uint64_t ver = x->storage->version;
  ZT_CHECK_OK(zt_tensor_set(x, 1 * 6 + 3, 1000.0)); /* x[1,3] = v3[1,1] */
  ZT_CHECK(zt_tensor_get(v3, 4) == 1000.0 && zt_tensor_get(v2, 1 * 4 + 1) == 1000.0);
  ZT_CHECK(zt_tensor_get(v4, 4) == 9.0);
  ZT_CHECK_OK(zt_tensor_set(v2, 0, -5.0)); /* v2[0,0] = x[0,2] */
  ZT_CHECK(zt_tensor_get(x, 2) == -5.0 && zt_tensor_get(v3, 0) == -5.0);
  ZT_CHECK(v3->storage->version == ver + 2);
  zt_tensor *list[] = {x, v1, v2, v3, v4};
  for (int i = 0; i < 5; i++) zt_tensor_free(list[i]);
}

static void test_view_modified_after_save(void) {
  /* mul saves its (contiguous) view input; changing the base in place bumps the shared
   * version counter, and backward refuses the stale saved tensor */
  zt_tensor *x = arange(2, (int64_t[]){2, 3}, ZT_DTYPE_F64), *y = NULL, *z = NULL;
  zt_tensor *w = zt_test_rand_leaf(1, (int64_t[]){6}, ZT_DTYPE_F64, -1, 1, 41);
  ZT_CHECK_OK(zt_reshape(x, 1, (int64_t[]){6}, &y));
  ZT_CHECK_OK(zt_mul(y, w, &z));
  zt_tensor *ones = NULL;
  ZT_CHECK_OK(zt_tensor_full(1, (int64_t[]){6}, ZT_DTYPE_F64, ZT_CPU, 1.0, &ones));
  ZT_CHECK_OK(zt_tensor_set(x, 0, 3.0));
  ZT_CHECK_ERR(zt_backward(1, &z, &ones, false), ZT_STATUS_AUTOGRAD, "modified by an in-place operation");
  zt_tensor *list[] = {x, y, z, w, ones};
  for (int i = 0; i < 5; i++) zt_tensor_free(list[i]);
}

static void test_transpose_mul_backward(void) {
  /* y = transpose(x); z = y * y; backward(ones): x.grad = 2 x */
  zt_tensor *x = zt_test_rand_leaf(2, (int64_t[]){3, 5}, ZT_DTYPE_F32, -1, 1, 51), *y = NULL, *z = NULL, *g = NULL;
  ZT_CHECK_OK(zt_transpose(x, 0, 1, &y));
  ZT_CHECK(y->requires_grad && !strcmp(zt_node_name(zt_tensor_grad_fn(y)), "TransposeBackward"));
  ZT_CHECK_OK(zt_mul(y, y, &z));
  ZT_CHECK_OK(zt_tensor_full(2, (int64_t[]){5, 3}, ZT_DTYPE_F32, ZT_CPU, 1.0, &g));
  ZT_CHECK_OK(zt_backward(1, &z, &g, false));
  ZT_CHECK(x->grad && shape_is(x->grad, 2, x->shape) && zt_tensor_is_contiguous(x->grad));
  for (int64_t i = 0; i < 15; i++) ZT_CHECK(zt_tensor_get(x->grad, i) == 2 * zt_tensor_get(x, i));
  zt_tensor *list[] = {x, y, z, g};
  for (int i = 0; i < 4; i++) zt_tensor_free(list[i]);
}

/* transpose -> narrow (non-leading dim) -> permute -> reshape (copy) -> square */
static zt_status f_view_chain(zt_tensor *const *in, zt_tensor **out, void *ud) {
  (void)ud;
  zt_tensor *t = NULL, *n = NULL, *p = NULL, *r = NULL;
  zt_status s = zt_transpose(in[0], 0, 2, &t); /* (5, 4, 3) */
  if (!s) s = zt_narrow(t, 1, 1, 2, &n);        /* (5, 2, 3) */
  if (!s) s = zt_permute(n, (int[]){2, 0, 1}, &p); /* (3, 5, 2) */
  if (!s) s = zt_reshape(p, 2, (int64_t[]){-1, 6}, &r);
  if (!s) s = zt_mul(r, r, out);
  zt_tensor *list[] = {t, n, p, r};
  for (int i = 0; i < 4; i++) zt_tensor_free(list[i]);
  return s;
}

static void test_view_chain_gradcheck(void) {
  zt_tensor *x = zt_test_rand_leaf(3, (int64_t[]){3, 4, 5}, ZT_DTYPE_F64, -1, 1, 61);
  ZT_GRADCHECK(f_view_chain, 1, &x, NULL, NULL);
  /* f32 forward of the same chain: bitwise the f32 rounding of the f64 one */
  zt_tensor *x32 = NULL, *o32 = NULL, *o64 = NULL, *o64c = NULL;
  ZT_CHECK_OK(zt_cast(x, ZT_DTYPE_F32, &x32));
  ZT_CHECK_OK(zt_cast(x32, ZT_DTYPE_F64, &o64c)); /* x rounded to f32, exact in f64 */
  bool prev = zt_set_grad_enabled(false);
  ZT_CHECK_OK(f_view_chain(&x32, &o32, NULL));
  ZT_CHECK_OK(f_view_chain(&o64c, &o64, NULL));
  zt_set_grad_enabled(prev);
  ZT_CHECK(o32->dtype == ZT_DTYPE_F32 && shape_is(o32, 2, (int64_t[]){5, 6}));
  for (int64_t i = 0; i < 30; i++) ZT_CHECK(zt_tensor_get(o32, i) == (double)(float)zt_tensor_get(o64, i));
  zt_tensor *list[] = {x, x32, o32, o64, o64c};
  for (int i = 0; i < 5; i++) zt_tensor_free(list[i]);
}

/* ------------------------------------------------ contiguous and the copy kernel */
static void test_contiguous(void) {
  zt_tensor *a = arange(2, (int64_t[]){3, 4}, ZT_DTYPE_F64), *c = NULL, *t = NULL, *tc = NULL;
  ZT_CHECK_OK(zt_contiguous(a, &c)); /* always a copy */
  ZT_CHECK(c->storage != a->storage && !c->is_view && zt_test_bitwise_equal(a, c));
  ZT_CHECK_OK(zt_transpose(a, 0, 1, &t));
  ZT_CHECK_OK(zt_contiguous(t, &tc));
  ZT_CHECK(zt_tensor_is_contiguous(tc) && !tc->is_view && shape_is(tc, 2, (int64_t[]){4, 3}));
  for (int64_t i = 0; i < 12; i++) ZT_CHECK(zt_tensor_get(tc, i) == (double)(i % 3 * 4 + i / 3));
  zt_tensor *list[] = {a, c, t, tc};
  for (int i = 0; i < 4; i++) zt_tensor_free(list[i]);

  /* i64 beyond 2^53 and bf16 bit patterns go through views and copies unchanged */
  int64_t big[6];
  for (int i = 0; i < 6; i++) big[i] = ((int64_t)1 << 60) + 2 * i + 1;
  zt_tensor *b = NULL, *bt = NULL, *bc = NULL, *br = NULL, *bcat = NULL;
  ZT_CHECK_OK(zt_tensor_from_data(2, (int64_t[]){2, 3}, ZT_DTYPE_I64, big, &b));
  ZT_CHECK_OK(zt_transpose(b, 0, 1, &bt));
  ZT_CHECK_OK(zt_contiguous(bt, &bc));
  ZT_CHECK_OK(zt_reshape(bt, 1, (int64_t[]){6}, &br));
  ZT_CHECK_OK(zt_cat(2, (zt_tensor *[]){b, b}, 0, &bcat));
  zt_tensor *bcast = NULL; /* same-dtype cast of the strided view: the dispatcher's copy is exact too */
  ZT_CHECK_OK(zt_cast(bt, ZT_DTYPE_I64, &bcast));
  for (int64_t i = 0; i < 6; i++) {
    int64_t want = big[i % 2 * 3 + i / 2];
    ZT_CHECK(get_i64(bc, i) == want && get_i64(br, i) == want && get_i64(bt, i) == want);
    ZT_CHECK(get_i64(bcast, i) == want);
    ZT_CHECK(get_i64(bcat, i) == big[i] && get_i64(bcat, i + 6) == big[i]);
  }
  zt_tensor *list2[] = {b, bt, bc, br, bcat, bcast};
  for (int i = 0; i < 6; i++) zt_tensor_free(list2[i]);
}

/* Every path of zt__cpu_to_contiguous against element-by-element reads. */
static void check_copy(const zt_tensor *v) {
  zt_tensor *c = NULL;
  ZT_CHECK_OK(zt_contiguous((zt_tensor *)v, &c));
  if (!c) return;
  bool ok = zt_tensor_is_contiguous(c);
  for (int64_t i = 0; ok && i < zt_tensor_numel(v); i++) ok = zt_tensor_get(c, i) == zt_tensor_get(v, i);
  ZT_CHECK(ok);
  zt_tensor_free(c);
}

static void test_copy_kernel_paths(void) {
  /* big enough for the OpenMP paths; partial tiles at the edges */
  zt_dtype dts[] = {ZT_DTYPE_F32, ZT_DTYPE_F64, ZT_DTYPE_BF16};
  for (int k = 0; k < 3; k++) {
    zt_tensor *a = arange(3, (int64_t[]){3, 200, 150}, dts[k] == ZT_DTYPE_BF16 ? ZT_DTYPE_F32 : dts[k]);
    if (dts[k] == ZT_DTYPE_BF16) { /* small integers are exact in bf16 */
      zt_tensor *m = NULL, *b = NULL;
      ZT_CHECK_OK(zt_tensor_full(3, a->shape, ZT_DTYPE_F32, ZT_CPU, 0, &m));
      for (int64_t i = 0; i < zt_tensor_numel(m); i++) ZT_CHECK_OK(zt_tensor_set(m, i, (double)(i % 200)));
      ZT_CHECK_OK(zt_cast(m, ZT_DTYPE_BF16, &b));
      zt_tensor_free(m);
      zt_tensor_free(a);
      a = b;
    }
    zt_tensor *v[5] = {0};
    ZT_CHECK_OK(zt_transpose(a, 1, 2, &v[0]));          /* tiled, with an outer dim */
    ZT_CHECK_OK(zt_permute(a, (int[]){2, 0, 1}, &v[1])); /* tiled, merged dims */
    ZT_CHECK_OK(zt_narrow(a, 2, 3, 140, &v[2]));         /* rows */
    ZT_CHECK_OK(zt_transpose(v[2], 0, 2, &v[3]));       /* tiled over a slice */
    ZT_CHECK_OK(zt_narrow(a, 1, 0, 1, &v[4]));          /* rows, with a size-1 dim dropped */
    for (int i = 0; i < 5; i++) check_copy(v[i]);
    for (int i = 0; i < 5; i++) zt_tensor_free(v[i]);
    zt_tensor_free(a);
  }
  /* no unit-stride dim (every other element): the gather path */
  zt_tensor *a = arange(1, (int64_t[]){64}, ZT_DTYPE_F32), *g = NULL;
  ZT_CHECK_OK(zt__tensor_new_view(a->storage, 1, 2, (int64_t[]){4, 8}, (int64_t[]){16, 2}, ZT_DTYPE_F32, &g));
  check_copy(g);
  zt_tensor *gc = NULL;
  ZT_CHECK_OK(zt_contiguous(g, &gc));
  ZT_CHECK(zt_tensor_get(gc, 9) == 1 + 16 + 2);
  zt_tensor_free(gc);
  zt_tensor_free(g);
  zt_tensor_free(a);
}

static zt_status f_contiguous_mul(zt_tensor *const *in, zt_tensor **out, void *ud) {
  (void)ud;
  zt_tensor *t = NULL, *c = NULL;
  zt_status s = zt_transpose(in[0], 0, -1, &t);
  if (!s) s = zt_contiguous(t, &c);
  if (!s) s = zt_mul(c, in[1], out);
  zt_tensor_free(t);
  zt_tensor_free(c);
  return s;
}

static void test_contiguous_gradcheck(void) {
  zt_tensor *x = zt_test_rand_leaf(3, (int64_t[]){2, 3, 4}, ZT_DTYPE_F64, -1, 1, 71);
  zt_tensor *w = zt_test_rand_leaf(3, (int64_t[]){4, 3, 2}, ZT_DTYPE_F64, -1, 1, 72);
  ZT_GRADCHECK(f_contiguous_mul, 2, ((zt_tensor *[]){x, w}), NULL, NULL);
  w->requires_grad = false;
  ZT_GRADCHECK(f_contiguous_mul, 2, ((zt_tensor *[]){x, w}), NULL, NULL);
  zt_tensor_free(x);
  zt_tensor_free(w);
}

/* ------------------------------------------------ cat */
static void test_cat(void) {
  zt_tensor *a = arange(3, (int64_t[]){2, 1, 4}, ZT_DTYPE_F64), *b = arange(3, (int64_t[]){2, 3, 4}, ZT_DTYPE_F64);
  zt_tensor *c = arange(3, (int64_t[]){2, 2, 4}, ZT_DTYPE_F64), *e = NULL, *o = NULL, *o2 = NULL;
  ZT_CHECK_OK(zt_tensor_empty(3, (int64_t[]){2, 0, 4}, ZT_DTYPE_F64, ZT_CPU, &e));
  ZT_CHECK_OK(zt_cat(4, (zt_tensor *[]){a, e, b, c}, 1, &o));
  ZT_CHECK(shape_is(o, 3, (int64_t[]){2, 6, 4}) && !o->is_view);
  for (int64_t i = 0; i < 48; i++) {
    int64_t r = i / 24, j = i / 4 % 6, k = i % 4;
    double want = j < 1 ? r * 4 + k : j < 4 ? r * 12 + (j - 1) * 4 + k : r * 8 + (j - 4) * 4 + k;
    ZT_CHECK(zt_tensor_get(o, i) == want);
  }
  ZT_CHECK_OK(zt_cat(3, (zt_tensor *[]){a, b, c}, -2, &o2));
  ZT_CHECK(zt_test_bitwise_equal(o, o2));
  zt_tensor_free(o2);
  o2 = NULL;
  /* non-contiguous input, leading dim, single input */
  zt_tensor *t = NULL, *x = arange(2, (int64_t[]){3, 2}, ZT_DTYPE_F32), *y = arange(2, (int64_t[]){2, 3}, ZT_DTYPE_F32);
  ZT_CHECK_OK(zt_transpose(x, 0, 1, &t)); /* (2, 3) */
  ZT_CHECK_OK(zt_cat(2, (zt_tensor *[]){t, y}, 0, &o2));
  ZT_CHECK(shape_is(o2, 2, (int64_t[]){4, 3}));
  for (int64_t i = 0; i < 6; i++) ZT_CHECK(zt_tensor_get(o2, i) == zt_tensor_get(t, i) && zt_tensor_get(o2, i + 6) == i);
  zt_tensor *one = NULL;
  ZT_CHECK_OK(zt_cat(1, &y, -1, &one));
  ZT_CHECK(zt_test_bitwise_equal(one, y) && one->storage != y->storage);
  zt_tensor *list[] = {a, b, c, e, o, o2, t, x, y, one};
  for (int i = 0; i < 10; i++) zt_tensor_free(list[i]);
}

static void test_cat_errors(void) {
  zt_tensor *a = arange(3, (int64_t[]){2, 1, 4}, ZT_DTYPE_F64), *b = arange(3, (int64_t[]){2, 3, 5}, ZT_DTYPE_F64);
  zt_tensor *f = arange(3, (int64_t[]){2, 1, 4}, ZT_DTYPE_F32), *d2 = arange(2, (int64_t[]){2, 4}, ZT_DTYPE_F64);
  zt_tensor *z = NULL, *o = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(0, NULL, ZT_DTYPE_F64, ZT_CPU, &z));
  ZT_CHECK_ERR(zt_cat(2, (zt_tensor *[]){a, f}, 1, &o), ZT_STATUS_DTYPE,
               "tensor 1 has dtype f32 but tensor 0 has dtype f64; cast them to one dtype");
  ZT_CHECK_ERR(zt_cat(2, (zt_tensor *[]){a, b}, 1, &o), ZT_STATUS_SHAPE,
               "tensor 1 has shape (2, 3, 5) but tensor 0 has shape (2, 1, 4); they must match in every dim except dim 1");
  ZT_CHECK_ERR(zt_cat(2, (zt_tensor *[]){a, d2}, 0, &o), ZT_STATUS_SHAPE, "tensor 1 has shape (2, 4) but tensor 0");
  ZT_CHECK_ERR(zt_cat(2, (zt_tensor *[]){a, a}, 3, &o), ZT_STATUS_SHAPE, "cat: dim 3 is out of range");
  ZT_CHECK_ERR(zt_cat(2, (zt_tensor *[]){z, z}, 0, &o), ZT_STATUS_SHAPE, "0-d tensors cannot be concatenated");
  ZT_CHECK_ERR(zt_cat(0, (zt_tensor *[]){a}, 0, &o), ZT_STATUS_INVALID_ARG, "cat: no tensors given");
  ZT_CHECK_ERR(zt_cat(2, (zt_tensor *[]){a, NULL}, 0, &o), ZT_STATUS_INVALID_ARG, "input 1 is NULL");
  ZT_CHECK(o == NULL);
  zt_tensor *list[] = {a, b, f, d2, z};
  for (int i = 0; i < 5; i++) zt_tensor_free(list[i]);
}

typedef struct cat_ud {
  int n, dim;
} cat_ud;

static zt_status f_cat_sq(zt_tensor *const *in, zt_tensor **out, void *ud) {
  cat_ud *u = ud;
  zt_tensor *t = NULL;
  ZT_TRY(zt_cat(u->n, in, u->dim, &t));
  zt_status s = zt_mul(t, t, out);
  zt_tensor_free(t);
  return s;
}

static void test_cat_gradcheck(void) {
  zt_tensor *a = zt_test_rand_leaf(3, (int64_t[]){2, 1, 4}, ZT_DTYPE_F64, -1, 1, 81);
  zt_tensor *b = zt_test_rand_leaf(3, (int64_t[]){2, 3, 4}, ZT_DTYPE_F64, -1, 1, 82);
  zt_tensor *c = zt_test_rand_leaf(3, (int64_t[]){2, 2, 4}, ZT_DTYPE_F64, -1, 1, 83);
  cat_ud u = {3, 1}, un = {3, -2};
  ZT_GRADCHECK(f_cat_sq, 3, ((zt_tensor *[]){a, b, c}), &u, NULL);
  ZT_GRADCHECK(f_cat_sq, 3, ((zt_tensor *[]){a, b, c}), &un, NULL);
  b->requires_grad = false; /* the middle input needs no grad */
  ZT_GRADCHECK(f_cat_sq, 3, ((zt_tensor *[]){a, b, c}), &u, NULL);
  ZT_CHECK(b->grad == NULL);
  b->requires_grad = true;
  /* leading and last dims */
  zt_tensor *p = zt_test_rand_leaf(2, (int64_t[]){2, 3}, ZT_DTYPE_F64, -1, 1, 84);
  zt_tensor *q = zt_test_rand_leaf(2, (int64_t[]){1, 3}, ZT_DTYPE_F64, -1, 1, 85);
  zt_tensor *r = zt_test_rand_leaf(2, (int64_t[]){2, 5}, ZT_DTYPE_F64, -1, 1, 86);
  cat_ud u0 = {2, 0}, ul = {2, -1};
  ZT_GRADCHECK(f_cat_sq, 2, ((zt_tensor *[]){p, q}), &u0, NULL);
  ZT_GRADCHECK(f_cat_sq, 2, ((zt_tensor *[]){p, r}), &ul, NULL);
  /* more inputs than the dispatcher's on-stack slots */
  zt_tensor *many[20];
  for (int i = 0; i < 20; i++) many[i] = zt_test_rand_leaf(2, (int64_t[]){2, 1 + i % 3}, ZT_DTYPE_F64, -1, 1, 100 + i);
  many[7]->requires_grad = false;
  cat_ud u20 = {20, 1};
  ZT_GRADCHECK(f_cat_sq, 20, many, &u20, NULL);
  for (int i = 0; i < 20; i++) zt_tensor_free(many[i]);
  zt_tensor *list[] = {a, b, c, p, q, r};
  for (int i = 0; i < 6; i++) zt_tensor_free(list[i]);
}

/* ------------------------------------------------ split */
static void test_split(void) {
  zt_tensor *a = arange(2, (int64_t[]){3, 10}, ZT_DTYPE_F64), *parts[4] = {0}, *o[2] = {0};
  int64_t sizes[] = {2, 0, 5, 3};
  ZT_CHECK_OK(zt_split(a, -1, 4, sizes, parts));
  int64_t start = 0;
  for (int k = 0; k < 4; k++) {
    ZT_CHECK(parts[k] && shape_is(parts[k], 2, (int64_t[]){3, sizes[k]}));
    ZT_CHECK(parts[k]->is_view && parts[k]->storage == a->storage);
    for (int64_t i = 0; i < 3 * sizes[k]; i++)
      ZT_CHECK(zt_tensor_get(parts[k], i) == (double)(i / sizes[k] * 10 + start + i % sizes[k]));
    start += sizes[k];
  }
  ZT_CHECK_OK(zt_tensor_set(a, 12, 77.0)); /* a[1,2] = parts[2][1,0] */
  ZT_CHECK(zt_tensor_get(parts[2], 5) == 77.0);
  ZT_CHECK_ERR(zt_split(a, 1, 2, (int64_t[]){2, 2}, o), ZT_STATUS_SHAPE,
               "the 2 part sizes sum to 4 but dim 1 has size 10 (shape (3, 10))");
  ZT_CHECK_ERR(zt_split(a, 1, 2, (int64_t[]){11, -1}, o), ZT_STATUS_SHAPE, "part 1 has negative size -1");
  ZT_CHECK_ERR(zt_split(a, 2, 1, (int64_t[]){3}, o), ZT_STATUS_SHAPE, "split: dim 2 is out of range");
  ZT_CHECK_ERR(zt_split(a, 0, 0, (int64_t[]){3}, o), ZT_STATUS_INVALID_ARG, "at least one part");
  zt_tensor *z = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(0, NULL, ZT_DTYPE_F64, ZT_CPU, &z));
  ZT_CHECK_ERR(zt_split(z, 0, 1, (int64_t[]){1}, o), ZT_STATUS_SHAPE, "cannot split a 0-d tensor");
  ZT_CHECK(o[0] == NULL && o[1] == NULL);
  for (int k = 0; k < 4; k++) zt_tensor_free(parts[k]);
  zt_tensor_free(z);
  zt_tensor_free(a);
}

typedef struct split_ud {
  int dim, n;
  const int64_t *sizes;
  int mode; /* 0: cat of the parts in reverse order; 1: cat(part 2, part 0) squared, part 1 unused */
} split_ud;

static zt_status f_split(zt_tensor *const *in, zt_tensor **out, void *ud) {
  split_ud *u = ud;
  zt_tensor **p = calloc((size_t)u->n, sizeof *p), *t = NULL;
  zt_status s = zt_split(in[0], u->dim, u->n, u->sizes, p);
  if (!s && u->mode == 0) {
    zt_tensor **rev = calloc((size_t)u->n, sizeof *rev);
    for (int k = 0; k < u->n; k++) rev[k] = p[u->n - 1 - k];
    s = zt_cat(u->n, rev, u->dim, &t);
    free(rev);
    if (!s) s = zt_mul(t, t, out);
  } else if (!s) {
    s = zt_cat(2, (zt_tensor *[]){p[2], p[0]}, u->dim, &t);
    if (!s) s = zt_mul(t, t, out);
  }
  for (int k = 0; k < u->n; k++) zt_tensor_free(p[k]);
  zt_tensor_free(t);
  free(p);
  return s;
}

static void test_split_gradcheck(void) {
  zt_tensor *x = zt_test_rand_leaf(3, (int64_t[]){2, 7, 3}, ZT_DTYPE_F64, -1, 1, 91);
  int64_t s1[] = {3, 1, 3}, s2[] = {2, 0, 5};
  split_ud u1 = {1, 3, s1, 0}, u2 = {-2, 3, s2, 1}, u3 = {1, 3, s1, 1};
  ZT_GRADCHECK(f_split, 1, &x, &u1, NULL);
  ZT_GRADCHECK(f_split, 1, &x, &u2, NULL);
  ZT_GRADCHECK(f_split, 1, &x, &u3, NULL); /* part 1 gets no grad: zeros there */
  /* more parts than one node takes (11): split in groups, then again */
  int64_t sz[30];
  int64_t total = 0;
  for (int k = 0; k < 30; k++) total += sz[k] = 1 + k % 2;
  zt_tensor *y = zt_test_rand_leaf(2, (int64_t[]){total, 2}, ZT_DTYPE_F64, -1, 1, 92);
  int ns[] = {11, 12, 23, 30};
  for (int k = 0; k < 4; k++) {
    int64_t sum = 0;
    for (int j = 0; j < ns[k] - 1; j++) sum += sz[j];
    int64_t szk[30];
    memcpy(szk, sz, sizeof szk);
    szk[ns[k] - 1] = total - sum; /* last part takes the rest */
    split_ud u = {0, ns[k], szk, 0};
    ZT_GRADCHECK(f_split, 1, &y, &u, NULL);
  }
  zt_tensor *parts[30] = {0};
  ZT_CHECK_OK(zt_split(y, 0, 30, sz, parts));
  for (int k = 0; k < 30; k++) {
    ZT_CHECK(parts[k]->storage == y->storage && parts[k]->is_view && parts[k]->shape[0] == sz[k]);
    ZT_CHECK(!strcmp(zt_node_name(zt_tensor_grad_fn(parts[k])), "SplitBackward"));
  }
  int64_t off = 0;
  for (int k = 0; k < 30; k++) {
    ZT_CHECK(zt_tensor_get(parts[k], 0) == zt_tensor_get(y, off * 2));
    off += sz[k];
  }
  for (int k = 0; k < 30; k++) zt_tensor_free(parts[k]);
  zt_tensor_free(y);
  zt_tensor_free(x);
}

/* ------------------------------------------------ cast */
static void test_cast_bf16_f16_rounding(void) {
  const float p7 = 0x1p-7f, p8 = 0x1p-8f, p9 = 0x1p-9f;
  float in[] = {1.0f, 1.0f + p9, 1.0f + p8, 1.0f + p7 + p8, 1.0f + p8 + 0x1p-20f, -2.5f, 65504.0f, 0x1p-130f,
                INFINITY, -0.0f, 3.4e38f};
  float bf[] = {1.0f, 1.0f, 1.0f, 1.0f + 0x1p-6f, 1.0f + p7, -2.5f, 65536.0f, 0x1p-130f, INFINITY, -0.0f, INFINITY};
  int n = 11;
  zt_tensor *x = from_f32(n, in), *b = NULL, *back = NULL;
  ZT_CHECK_OK(zt_cast(x, ZT_DTYPE_BF16, &b));
  ZT_CHECK_OK(zt_cast(b, ZT_DTYPE_F32, &back));
  ZT_CHECK(b->dtype == ZT_DTYPE_BF16 && back->dtype == ZT_DTYPE_F32);
  for (int i = 0; i < n; i++) {
    ZT_CHECK(zt_tensor_get(back, i) == (double)bf[i]);
    if (zt_tensor_get(back, i) != (double)bf[i]) fprintf(stderr, "  bf16 case %d: %.9g\n", i, zt_tensor_get(back, i));
  }
  ZT_CHECK(signbit(zt_tensor_get(back, 9)));
  zt_tensor_free(b);
  zt_tensor_free(back);

  const float h10 = 0x1p-10f, h11 = 0x1p-11f;
  float in16[] = {1.0f, 1.0f + h11, 1.0f + h10 + h11, 1.0f + 0x1p-12f, 65504.0f, 65519.0f, 65520.0f,
                  0x1p-24f, 0x1p-26f, 0x1.8p-25f, 1e5f, -1.0f - h10};
  float f16[] = {1.0f, 1.0f, 1.0f + 0x1p-9f, 1.0f, 65504.0f, 65504.0f, INFINITY, 0x1p-24f, 0.0f, 0x1p-24f,
                 INFINITY, -1.0f - h10};
  int n16 = 12;
  zt_tensor *x16 = from_f32(n16, in16), *h = NULL, *back16 = NULL;
  ZT_CHECK_OK(zt_cast(x16, ZT_DTYPE_F16, &h));
  ZT_CHECK_OK(zt_cast(h, ZT_DTYPE_F32, &back16));
  for (int i = 0; i < n16; i++) {
    ZT_CHECK(zt_tensor_get(back16, i) == (double)f16[i]);
    if (zt_tensor_get(back16, i) != (double)f16[i]) fprintf(stderr, "  f16 case %d: %.9g\n", i, zt_tensor_get(back16, i));
  }
  /* NaN stays NaN in both */
  float nan_in[] = {NAN, -NAN};
  zt_tensor *xn = from_f32(2, nan_in), *bn = NULL, *hn = NULL, *bn2 = NULL, *hn2 = NULL;
  ZT_CHECK_OK(zt_cast(xn, ZT_DTYPE_BF16, &bn));
  ZT_CHECK_OK(zt_cast(xn, ZT_DTYPE_F16, &hn));
  ZT_CHECK_OK(zt_cast(bn, ZT_DTYPE_F32, &bn2));
  ZT_CHECK_OK(zt_cast(hn, ZT_DTYPE_F64, &hn2));
  for (int i = 0; i < 2; i++) ZT_CHECK(isnan(zt_tensor_get(bn2, i)) && isnan(zt_tensor_get(hn2, i)));
  zt_tensor *list[] = {x, x16, h, back16, xn, bn, hn, bn2, hn2};
  for (int i = 0; i < 9; i++) zt_tensor_free(list[i]);
}

/* One rounding, not two: f64 and i64 values just past a bf16/f16 tie. */
static void test_cast_single_rounding(void) {
  double in[] = {1.0 + 0x1p-8 + 0x1p-40, 1.0 + 0x1p-8 - 0x1p-40, 1.0 + 0x1p-11 + 0x1p-40, -(1.0 + 0x1p-8 + 0x1p-40)};
  zt_tensor *x = from_f64(4, in), *b = NULL, *h = NULL;
  ZT_CHECK_OK(zt_cast(x, ZT_DTYPE_BF16, &b));
  ZT_CHECK_OK(zt_cast(x, ZT_DTYPE_F16, &h));
  ZT_CHECK(zt_tensor_get(b, 0) == 1.0 + 0x1p-7); /* via f32 it would be a tie, rounded to 1.0 */
  ZT_CHECK(zt_tensor_get(b, 1) == 1.0);
  ZT_CHECK(zt_tensor_get(h, 2) == 1.0 + 0x1p-10);
  ZT_CHECK(zt_tensor_get(b, 3) == -(1.0 + 0x1p-7));
  int64_t iv[] = {((int64_t)1 << 40) + ((int64_t)1 << 32) + 1, ((int64_t)1 << 40) + ((int64_t)1 << 32),
                  -(((int64_t)1 << 40) + ((int64_t)1 << 32) + 1), ((int64_t)1 << 53) + 1, INT64_MIN};
  zt_tensor *xi = NULL, *bi = NULL, *di = NULL, *fi = NULL;
  ZT_CHECK_OK(zt_tensor_from_data(1, (int64_t[]){5}, ZT_DTYPE_I64, iv, &xi));
  ZT_CHECK_OK(zt_cast(xi, ZT_DTYPE_BF16, &bi));
  ZT_CHECK_OK(zt_cast(xi, ZT_DTYPE_F64, &di));
  ZT_CHECK_OK(zt_cast(xi, ZT_DTYPE_F32, &fi));
  ZT_CHECK(zt_tensor_get(bi, 0) == 0x1p40 + 0x1p33); /* past the tie: up */
  ZT_CHECK(zt_tensor_get(bi, 1) == 0x1p40);          /* the tie: to even */
  ZT_CHECK(zt_tensor_get(bi, 2) == -(0x1p40 + 0x1p33));
  ZT_CHECK(zt_tensor_get(bi, 4) == -0x1p63);
  ZT_CHECK(zt_tensor_get(di, 3) == 0x1p53 && zt_tensor_get(fi, 0) == 0x1p40 + 0x1p32);
  zt_tensor *list[] = {x, b, h, xi, bi, di, fi};
  for (int i = 0; i < 7; i++) zt_tensor_free(list[i]);
}

static uint32_t lcg(uint64_t *st) {
  *st = *st * 6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)(*st >> 32);
}

/* The kernels' conversions agree bit for bit with the core's (src/core/dtype.c), and
 * f64 -> bf16/f16 of values exact in f32 equals f32 -> bf16/f16. */
static void test_cast_matches_core(void) {
  const int64_t n16 = 65536;
  zt_tensor *h = NULL, *hf = NULL, *bf = NULL;
  ZT_CHECK_OK(zt_tensor_empty(1, &n16, ZT_DTYPE_F16, ZT_CPU, &h));
  uint16_t *hp = zt__tensor_ptr(h);
  for (int64_t i = 0; i < n16; i++) hp[i] = (uint16_t)i;
  ZT_CHECK_OK(zt_cast(h, ZT_DTYPE_F32, &hf));
  h->dtype = ZT_DTYPE_BF16; /* same bits read as bf16 */
  ZT_CHECK_OK(zt_cast(h, ZT_DTYPE_F32, &bf));
  const uint32_t *hfp = zt__tensor_ptr(hf), *bfp = zt__tensor_ptr(bf);
  int bad = 0;
  for (int64_t i = 0; i < n16; i++) {
    float a = zt_f16_to_f32((uint16_t)i), b = zt_bf16_to_f32((uint16_t)i);
    bad += memcmp(&hfp[i], &a, 4) != 0 || memcmp(&bfp[i], &b, 4) != 0;
  }
  ZT_CHECK(bad == 0);

  const int64_t n = 1 << 18;
  zt_tensor *f = NULL, *fb = NULL, *fh = NULL, *d = NULL, *db = NULL, *dh = NULL;
  ZT_CHECK_OK(zt_tensor_empty(1, &n, ZT_DTYPE_F32, ZT_CPU, &f));
  uint32_t *fp = zt__tensor_ptr(f);
  uint64_t st = 12345;
  for (int64_t i = 0; i < n; i++) {
    uint32_t u = lcg(&st);
    if (i % 4 == 1) u = (u & 0xffff0000u) | 0x8000u;                  /* exact bf16 ties */
    if (i % 4 == 2) u = (u & 0x8fffe000u) | 0x38001000u;              /* f16-range ties */
    if (i % 4 == 3) u = (u & 0x80ffffffu) | (uint32_t)(0x38 + i % 16) << 24; /* around f16's range */
    fp[i] = u;
  }
  ZT_CHECK_OK(zt_cast(f, ZT_DTYPE_BF16, &fb));
  ZT_CHECK_OK(zt_cast(f, ZT_DTYPE_F16, &fh));
  ZT_CHECK_OK(zt_cast(f, ZT_DTYPE_F64, &d));
  ZT_CHECK_OK(zt_cast(d, ZT_DTYPE_BF16, &db));
  ZT_CHECK_OK(zt_cast(d, ZT_DTYPE_F16, &dh));
  const uint16_t *fbp = zt__tensor_ptr(fb), *fhp = zt__tensor_ptr(fh), *dbp = zt__tensor_ptr(db), *dhp = zt__tensor_ptr(dh);
  int bad_b = 0, bad_h = 0, bad_db = 0, bad_dh = 0;
  for (int64_t i = 0; i < n; i++) {
    float x;
    memcpy(&x, &fp[i], 4);
    bad_b += fbp[i] != zt_f32_to_bf16(x);
    bad_h += fhp[i] != zt_f32_to_f16(x);
    if (!isnan(x)) {
      bad_db += dbp[i] != fbp[i];
      bad_dh += dhp[i] != fhp[i];
    }
  }
  ZT_CHECK(bad_b == 0 && bad_h == 0 && bad_db == 0 && bad_dh == 0);
  if (bad_b || bad_h || bad_db || bad_dh) fprintf(stderr, "  mismatches: %d %d %d %d\n", bad_b, bad_h, bad_db, bad_dh);
  zt_tensor *list[] = {h, hf, bf, f, fb, fh, d, db, dh};
  for (int i = 0; i < 9; i++) zt_tensor_free(list[i]);
}

/* f64 -> bf16 is correctly rounded: no bf16 value is nearer, and ties go to even. */
static void test_cast_f64_bf16_nearest(void) {
  const int64_t n = 1 << 16;
  zt_tensor *d = NULL, *b = NULL;
  ZT_CHECK_OK(zt_tensor_empty(1, &n, ZT_DTYPE_F64, ZT_CPU, &d));
  double *dp = zt__tensor_ptr(d);
  uint64_t st = 777;
  for (int64_t i = 0; i < n; i++) {
    double m = 1.0 + (double)(lcg(&st) & 0x7f) / 128.0 + 1.0 / 256.0; /* a bf16 tie ... */
    double eps = (double)(int32_t)lcg(&st) * 0x1p-70;                 /* ... nudged by a little */
    if (i % 3 == 0) eps = 0;
    dp[i] = ldexp(m + eps, (int)(lcg(&st) % 60) - 30) * (i % 2 ? -1 : 1);
  }
  ZT_CHECK_OK(zt_cast(d, ZT_DTYPE_BF16, &b));
  const uint16_t *bp = zt__tensor_ptr(b);
  int bad = 0;
  for (int64_t i = 0; i < n; i++) {
    double x = dp[i], v = zt_bf16_to_f32(bp[i]);
    double up = zt_bf16_to_f32((uint16_t)(bp[i] + 1)), dn = zt_bf16_to_f32((uint16_t)(bp[i] - 1));
    double e = fabs(x - v), eu = fabs(x - up), ed = fabs(x - dn);
    if (e > eu || e > ed || ((e == eu || e == ed) && (bp[i] & 1))) bad++;
  }
  ZT_CHECK(bad == 0);
  zt_tensor_free(d);
  zt_tensor_free(b);
}

static void test_cast_integers(void) {
  double in[] = {2.7, -2.7, NAN, 1e10, -1e10, 2147483647.5, -0.5, 1e19};
  zt_tensor *x = from_f64(8, in), *i32 = NULL, *i64 = NULL, *back = NULL, *i32b = NULL;
  ZT_CHECK_OK(zt_cast(x, ZT_DTYPE_I32, &i32));
  ZT_CHECK_OK(zt_cast(x, ZT_DTYPE_I64, &i64));
  int32_t want32[] = {2, -2, 0, INT32_MAX, INT32_MIN, INT32_MAX, 0, INT32_MAX};
  int64_t want64[] = {2, -2, 0, 10000000000LL, -10000000000LL, 2147483647, 0, INT64_MAX};
  const int32_t *p32 = zt__tensor_ptr(i32);
  for (int i = 0; i < 8; i++) ZT_CHECK(p32[i] == want32[i] && get_i64(i64, i) == want64[i]);
  /* i64 -> i32 wraps, i32 -> i64 and -> f64 are exact */
  int64_t iv[] = {((int64_t)1 << 32) + 5, -1, (int64_t)INT32_MAX + 1};
  zt_tensor *xi = NULL;
  ZT_CHECK_OK(zt_tensor_from_data(1, (int64_t[]){3}, ZT_DTYPE_I64, iv, &xi));
  ZT_CHECK_OK(zt_cast(xi, ZT_DTYPE_I32, &i32b));
  const int32_t *pb = zt__tensor_ptr(i32b);
  ZT_CHECK(pb[0] == 5 && pb[1] == -1 && pb[2] == INT32_MIN);
  ZT_CHECK_OK(zt_cast(i32b, ZT_DTYPE_F64, &back));
  ZT_CHECK(zt_tensor_get(back, 2) == -2147483648.0);
  /* every pair of dtypes runs, on a non-contiguous input, with small integers exact */
  zt_tensor *src = arange(2, (int64_t[]){3, 4}, ZT_DTYPE_F64);
  for (int a = 0; a < ZT_DTYPE_COUNT; a++) {
    zt_tensor *sa = NULL, *t = NULL;
    ZT_CHECK_OK(zt_cast(src, (zt_dtype)a, &sa));
    ZT_CHECK_OK(zt_transpose(sa, 0, 1, &t));
    for (int b = 0; b < ZT_DTYPE_COUNT; b++) {
      zt_tensor *o = NULL;
      ZT_CHECK_OK(zt_cast(t, (zt_dtype)b, &o));
      if (!o) continue;
      ZT_CHECK(o->dtype == (zt_dtype)b && shape_is(o, 2, (int64_t[]){4, 3}));
      for (int64_t i = 0; i < 12; i++) ZT_CHECK(zt_tensor_get(o, i) == (double)(i % 3 * 4 + i / 3));
      zt_tensor_free(o);
    }
    zt_tensor_free(sa);
    zt_tensor_free(t);
  }
  zt_tensor *list[] = {x, i32, i64, back, i32b, xi, src};
  for (int i = 0; i < 7; i++) zt_tensor_free(list[i]);
}

static zt_status f_cast_chain(zt_tensor *const *in, zt_tensor **out, void *ud) {
  zt_dtype mid = *(zt_dtype *)ud;
  zt_tensor *a = NULL, *b = NULL;
  zt_status s = zt_cast(in[0], mid, &a);
  if (!s) s = zt_cast(a, ZT_DTYPE_F64, &b);
  if (!s) s = zt_mul(b, b, out);
  zt_tensor_free(a);
  zt_tensor_free(b);
  return s;
}

static void test_cast_autograd(void) {
  zt_tensor *x = zt_test_rand_leaf(2, (int64_t[]){2, 3}, ZT_DTYPE_F64, -1, 1, 201);
  zt_dtype f64 = ZT_DTYPE_F64, f32 = ZT_DTYPE_F32;
  ZT_GRADCHECK(f_cast_chain, 1, &x, &f64, NULL);
  zt_gc_opts loose = {1e-2, 1e-4, 1e-4}; /* central differences of a square are exact; f32 rounding is not */
  ZT_GRADCHECK(f_cast_chain, 1, &x, &f32, &loose);

  /* f32 leaf -> bf16 -> f32: the grad comes back as f32 (values exact in bf16 pass unchanged) */
  zt_tensor *w = zt_test_rand_leaf(1, (int64_t[]){4}, ZT_DTYPE_F32, -1, 1, 202), *b = NULL, *c = NULL, *g = NULL;
  ZT_CHECK_OK(zt_cast(w, ZT_DTYPE_BF16, &b));
  ZT_CHECK(b->requires_grad && !strcmp(zt_node_name(zt_tensor_grad_fn(b)), "CastBackward"));
  ZT_CHECK_OK(zt_cast(b, ZT_DTYPE_F32, &c));
  float gv[] = {0.5f, -1.25f, 3.0f, 0.0078125f};
  g = from_f32(4, gv);
  ZT_CHECK_OK(zt_backward(1, &c, &g, false));
  ZT_CHECK(w->grad && w->grad->dtype == ZT_DTYPE_F32);
  for (int i = 0; w->grad && i < 4; i++) ZT_CHECK(zt_tensor_get(w->grad, i) == (double)gv[i]);
  /* integer outputs are not differentiable */
  zt_tensor *k = NULL;
  ZT_CHECK_OK(zt_cast(w, ZT_DTYPE_I32, &k));
  ZT_CHECK(!k->requires_grad && zt_tensor_grad_fn(k) == NULL);
  zt_tensor *o = NULL;
  ZT_CHECK_ERR(zt_cast(w, (zt_dtype)42, &o), ZT_STATUS_DTYPE, "unknown target dtype value 42");
  ZT_CHECK_ERR(zt_cast(w, (zt_dtype)-1, &o), ZT_STATUS_DTYPE, "unknown target dtype value -1");
  ZT_CHECK_ERR(zt_cast(NULL, ZT_DTYPE_F32, &o), ZT_STATUS_INVALID_ARG, "input is NULL");
  ZT_CHECK(o == NULL);
  zt_tensor *list[] = {x, w, b, c, g, k};
  for (int i = 0; i < 6; i++) zt_tensor_free(list[i]);
}

int main(void) {
  ZT_RUN(test_reshape_view);
  ZT_RUN(test_reshape_errors);
  ZT_RUN(test_reshape_gradcheck);
  ZT_RUN(test_transpose);
  ZT_RUN(test_permute);
  ZT_RUN(test_transpose_permute_gradcheck);
  ZT_RUN(test_narrow);
  ZT_RUN(test_narrow_gradcheck);
  ZT_RUN(test_views_of_views);
  ZT_RUN(test_view_modified_after_save);
  ZT_RUN(test_transpose_mul_backward);
  ZT_RUN(test_view_chain_gradcheck);
  ZT_RUN(test_contiguous);
  ZT_RUN(test_copy_kernel_paths);
  ZT_RUN(test_contiguous_gradcheck);
  ZT_RUN(test_cat);
  ZT_RUN(test_cat_errors);
  ZT_RUN(test_cat_gradcheck);
  ZT_RUN(test_split);
  ZT_RUN(test_split_gradcheck);
  ZT_RUN(test_cast_bf16_f16_rounding);
  ZT_RUN(test_cast_single_rounding);
  ZT_RUN(test_cast_matches_core);
  ZT_RUN(test_cast_f64_bf16_nearest);
  ZT_RUN(test_cast_integers);
  ZT_RUN(test_cast_autograd);
  return zt_test_finish();
}
