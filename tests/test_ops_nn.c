/* Tests of the nn ops: layer norm, embedding, dropout, and the Llama family's rms norm,
 * rope (and its tables) and swiglu. Gradients against finite
 * differences (f64), f32 against f64, results independent of the thread count, the
 * Philox mask layout of dropout, and the error messages. */
#include <stdlib.h>

#include "zt/checkpoint.h"
#include "zt_test.h"

/* ------------------------------------------------ helpers */
static zt_tensor *ids_tensor(int ndim, const int64_t *shape, zt_dtype dt, const int64_t *vals) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) n *= shape[d];
  int32_t v32[64];
  ZT_CHECK(n <= 64 || dt == ZT_DTYPE_I64);
  if (n > 64 && dt == ZT_DTYPE_I32) return NULL;
  if (dt == ZT_DTYPE_I32)
    for (int64_t i = 0; i < n; i++) v32[i] = (int32_t)vals[i];
  zt_tensor *t = NULL;
  ZT_CHECK_OK(zt_tensor_from_data(ndim, shape, dt, dt == ZT_DTYPE_I32 ? (const void *)v32 : (const void *)vals, &t));
  return t;
}

static zt_tensor *cast_copy(const zt_tensor *t, zt_dtype dt) {
  zt_tensor *o = NULL;
  ZT_CHECK_OK(zt_tensor_empty(t->ndim, t->shape, dt, ZT_CPU, &o));
  ZT_CHECK_OK(zt_tensor_copy_(o, t));
  return o;
}

/* Use n threads; returns the previous count to restore. */
static int set_threads(int n) {
  int prev = zt_get_num_threads();
  zt_set_num_threads(n);
  return prev;
}

/* ------------------------------------------------ layer norm */
typedef struct ln_ud {
  double eps;
} ln_ud;

static zt_status f_layer_norm(zt_tensor *const *in, zt_tensor **out, void *ud) {
  return zt_layer_norm(in[0], in[1], in[2], ((ln_ud *)ud)->eps, out);
}

static void test_layer_norm_gradcheck(void) {
  int64_t sx[] = {2, 3, 5}, sc[] = {5};
  ln_ud ud = {1e-5};
  /* every combination of weight / bias present; all present inputs require grad */
  for (int mask = 0; mask < 4; mask++) {
    zt_tensor *x = zt_test_rand_leaf(3, sx, ZT_DTYPE_F64, -2, 2, 10);
    zt_tensor *w = (mask & 1) ? zt_test_rand_leaf(1, sc, ZT_DTYPE_F64, 0.5, 1.5, 11) : NULL;
    zt_tensor *b = (mask & 2) ? zt_test_rand_leaf(1, sc, ZT_DTYPE_F64, -1, 1, 12) : NULL;
    ZT_GRADCHECK(f_layer_norm, 3, ((zt_tensor *[]){x, w, b}), &ud, NULL);
    zt_tensor_free(x);
    zt_tensor_free(w);
    zt_tensor_free(b);
  }
}

static void test_layer_norm_gradcheck_partial(void) {
  int64_t sx[] = {4, 6}, sc[] = {6};
  ln_ud ud = {1e-3};
  /* each single input requiring grad, the others present but frozen */
  for (int which = 0; which < 3; which++) {
    zt_tensor *x = zt_test_rand(2, sx, ZT_DTYPE_F64, -2, 2, 20);
    zt_tensor *w = zt_test_rand(1, sc, ZT_DTYPE_F64, 0.5, 1.5, 21);
    zt_tensor *b = zt_test_rand(1, sc, ZT_DTYPE_F64, -1, 1, 22);
    zt_tensor *ins[3] = {x, w, b};
    ZT_CHECK_OK(zt_tensor_set_requires_grad(ins[which], true));
    ZT_GRADCHECK(f_layer_norm, 3, ins, &ud, NULL);
    zt_tensor_free(x);
    zt_tensor_free(w);
    zt_tensor_free(b);
  }
  /* all require grad, zt_grad asks for the weight only: dx and db are never made */
  zt_tensor *x = zt_test_rand_leaf(2, sx, ZT_DTYPE_F64, -2, 2, 23);
  zt_tensor *w = zt_test_rand_leaf(1, sc, ZT_DTYPE_F64, 0.5, 1.5, 24);
  zt_tensor *b = zt_test_rand_leaf(1, sc, ZT_DTYPE_F64, -1, 1, 25);
  zt_tensor *y = NULL, *gw = NULL, *gy = zt_test_rand(2, sx, ZT_DTYPE_F64, -1, 1, 26);
  ZT_CHECK_OK(zt_layer_norm(x, w, b, 1e-5, &y));
  ZT_CHECK_OK(zt_grad(1, &y, &gy, 1, &w, false, &gw));
  /* reference dw = sum over rows of g * xhat, with xhat from a weight-free forward */
  zt_tensor *xh = NULL;
  ZT_CHECK_OK(zt_layer_norm(x, NULL, NULL, 1e-5, &xh));
  for (int c = 0; c < 6; c++) {
    double ref = 0;
    for (int r = 0; r < 4; r++) ref += zt_tensor_get(gy, r * 6 + c) * zt_tensor_get(xh, r * 6 + c);
    ZT_CHECK_NEAR(zt_tensor_get(gw, c), ref, 1e-12);
  }
  ZT_CHECK(x->grad == NULL && b->grad == NULL);
  zt_tensor *ts[] = {x, w, b, y, gw, gy, xh};
  for (int i = 0; i < 7; i++) zt_tensor_free(ts[i]);
}

static void test_layer_norm_values(void) {
  int64_t sx[] = {3, 8}, sc[] = {8};
  zt_tensor *x = zt_test_rand(2, sx, ZT_DTYPE_F64, -3, 5, 30);
  zt_tensor *w = zt_test_rand(1, sc, ZT_DTYPE_F64, 0.5, 1.5, 31);
  zt_tensor *b = zt_test_rand(1, sc, ZT_DTYPE_F64, -1, 1, 32);
  zt_tensor *y = NULL;
  ZT_CHECK_OK(zt_layer_norm(x, w, b, 1e-5, &y));
  for (int r = 0; r < 3; r++) {
    double m = 0, v = 0;
    for (int c = 0; c < 8; c++) m += zt_tensor_get(x, r * 8 + c) / 8;
    for (int c = 0; c < 8; c++) v += pow(zt_tensor_get(x, r * 8 + c) - m, 2) / 8;
    for (int c = 0; c < 8; c++) {
      double ref = (zt_tensor_get(x, r * 8 + c) - m) / sqrt(v + 1e-5) * zt_tensor_get(w, c) + zt_tensor_get(b, c);
      ZT_CHECK_NEAR(zt_tensor_get(y, r * 8 + c), ref, 1e-12);
    }
  }
  /* 1-d x is one row; no grad mode gives the same values */
  zt_tensor *x1 = zt_test_rand(1, sc, ZT_DTYPE_F64, -1, 1, 33), *y1 = NULL, *y2 = NULL;
  ZT_CHECK_OK(zt_tensor_set_requires_grad(x1, true));
  ZT_CHECK_OK(zt_layer_norm(x1, w, NULL, 1e-5, &y1));
  bool prev = zt_set_grad_enabled(false);
  ZT_CHECK_OK(zt_layer_norm(x1, w, NULL, 1e-5, &y2));
  zt_set_grad_enabled(prev);
  ZT_CHECK(y1->requires_grad && !y2->requires_grad);
  ZT_CHECK(zt_test_bitwise_equal(y1, y2));
  zt_tensor *ts[] = {x, w, b, y, x1, y1, y2};
  for (int i = 0; i < 7; i++) zt_tensor_free(ts[i]);
}

/* f32 forward and grads against f64 on GPT-2-like rows. */
static void test_layer_norm_f32_vs_f64(void) {
  int64_t sx[] = {2, 7, 64}, sc[] = {64};
  zt_tensor *x64 = zt_test_rand_leaf(3, sx, ZT_DTYPE_F64, -2, 3, 40);
  zt_tensor *w64 = zt_test_rand_leaf(1, sc, ZT_DTYPE_F64, 0.5, 1.5, 41);
  zt_tensor *b64 = zt_test_rand_leaf(1, sc, ZT_DTYPE_F64, -1, 1, 42);
  zt_tensor *g64 = zt_test_rand(3, sx, ZT_DTYPE_F64, -1, 1, 43);
  zt_tensor *x32 = cast_copy(x64, ZT_DTYPE_F32), *w32 = cast_copy(w64, ZT_DTYPE_F32);
  zt_tensor *b32 = cast_copy(b64, ZT_DTYPE_F32), *g32 = cast_copy(g64, ZT_DTYPE_F32);
  ZT_CHECK_OK(zt_tensor_set_requires_grad(x32, true));
  ZT_CHECK_OK(zt_tensor_set_requires_grad(w32, true));
  ZT_CHECK_OK(zt_tensor_set_requires_grad(b32, true));
  zt_tensor *y64 = NULL, *y32 = NULL;
  ZT_CHECK_OK(zt_layer_norm(x64, w64, b64, 1e-5, &y64));
  ZT_CHECK_OK(zt_layer_norm(x32, w32, b32, 1e-5, &y32));
  ZT_CHECK(y32->dtype == ZT_DTYPE_F32);
  ZT_CHECK(zt_test_max_abs_diff(y32, y64) < 1e-5);
  ZT_CHECK_OK(zt_backward(1, &y64, &g64, false));
  ZT_CHECK_OK(zt_backward(1, &y32, &g32, false));
  ZT_CHECK(zt_test_max_abs_diff(x32->grad, x64->grad) < 1e-5);
  ZT_CHECK(zt_test_max_abs_diff(w32->grad, w64->grad) < 1e-4);
  ZT_CHECK(zt_test_max_abs_diff(b32->grad, b64->grad) < 1e-4);
  zt_tensor *ts[] = {x64, w64, b64, g64, x32, w32, b32, g32, y64, y32};
  for (int i = 0; i < 10; i++) zt_tensor_free(ts[i]);
}

/* dw / db are sums over rows: the same bits with 1 and 2 threads (rows * C above the
 * parallel threshold, rows above one chunk). */
static void test_layer_norm_threads(void) {
  int64_t sx[] = {700, 96}, sc[] = {96};
  zt_tensor *x = zt_test_rand_leaf(2, sx, ZT_DTYPE_F32, -2, 2, 50);
  zt_tensor *w = zt_test_rand_leaf(1, sc, ZT_DTYPE_F32, 0.5, 1.5, 51);
  zt_tensor *b = zt_test_rand_leaf(1, sc, ZT_DTYPE_F32, -1, 1, 52);
  zt_tensor *g = zt_test_rand(2, sx, ZT_DTYPE_F32, -1, 1, 53);
  zt_tensor *res[2][4] = {{0}};
  for (int k = 0; k < 2; k++) {
    int prev = set_threads(k + 1);
    zt_tensor *y = NULL;
    ZT_CHECK_OK(zt_layer_norm(x, w, b, 1e-5, &y));
    ZT_CHECK_OK(zt_grad(1, &y, &g, 3, (zt_tensor *[]){x, w, b}, false, res[k] + 1));
    res[k][0] = y;
    zt_set_num_threads(prev);
  }
  for (int i = 0; i < 4; i++) {
    ZT_CHECK(zt_test_bitwise_equal(res[0][i], res[1][i]));
    zt_tensor_free(res[0][i]);
    zt_tensor_free(res[1][i]);
  }
  zt_tensor *ts[] = {x, w, b, g};
  for (int i = 0; i < 4; i++) zt_tensor_free(ts[i]);
}

static void test_layer_norm_errors(void) {
  int64_t sx[] = {2, 4}, s5[] = {5}, s4[] = {4}, s24[] = {2, 4};
  zt_tensor *x = zt_test_rand(2, sx, ZT_DTYPE_F64, -1, 1, 60), *w5 = zt_test_rand(1, s5, ZT_DTYPE_F64, 0, 1, 61);
  zt_tensor *w32 = zt_test_rand(1, s4, ZT_DTYPE_F32, 0, 1, 62), *w2d = zt_test_rand(2, s24, ZT_DTYPE_F64, 0, 1, 63);
  zt_tensor *xi = NULL, *x0 = NULL, *y = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(2, sx, ZT_DTYPE_I32, ZT_CPU, &xi));
  ZT_CHECK_OK(zt_tensor_zeros(0, NULL, ZT_DTYPE_F64, ZT_CPU, &x0));
  ZT_CHECK_ERR(zt_layer_norm(x, w5, NULL, 1e-5, &y), ZT_STATUS_SHAPE, "weight has shape (5,)");
  ZT_CHECK_ERR(zt_layer_norm(x, w5, NULL, 1e-5, &y), ZT_STATUS_SHAPE, "must have shape (4,)");
  ZT_CHECK_ERR(zt_layer_norm(x, NULL, w2d, 1e-5, &y), ZT_STATUS_SHAPE, "bias has shape (2, 4)");
  ZT_CHECK_ERR(zt_layer_norm(x, w32, NULL, 1e-5, &y), ZT_STATUS_DTYPE, "weight has dtype f32 but x has f64");
  ZT_CHECK_ERR(zt_layer_norm(xi, NULL, NULL, 1e-5, &y), ZT_STATUS_DTYPE, "x has dtype i32");
  ZT_CHECK_ERR(zt_layer_norm(x0, NULL, NULL, 1e-5, &y), ZT_STATUS_SHAPE, "x is 0-d");
  ZT_CHECK_ERR(zt_layer_norm(x, NULL, NULL, -1, &y), ZT_STATUS_INVALID_ARG, "eps is -1");
  ZT_CHECK_ERR(zt_layer_norm(NULL, NULL, NULL, 1e-5, &y), ZT_STATUS_INVALID_ARG, "op 'layer_norm': x is NULL");
  ZT_CHECK(y == NULL);
  zt_tensor *ts[] = {x, w5, w32, w2d, xi, x0};
  for (int i = 0; i < 6; i++) zt_tensor_free(ts[i]);
}

/* No rows: an empty output, and zero dw / db. */
static void test_layer_norm_empty(void) {
  int64_t sx[] = {0, 4}, sc[] = {4};
  zt_tensor *x = NULL, *y = NULL, *gw = NULL, *gy = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(2, sx, ZT_DTYPE_F32, ZT_CPU, &x));
  ZT_CHECK_OK(zt_tensor_zeros(2, sx, ZT_DTYPE_F32, ZT_CPU, &gy));
  zt_tensor *w = zt_test_rand_leaf(1, sc, ZT_DTYPE_F32, 0, 1, 70);
  ZT_CHECK_OK(zt_layer_norm(x, w, NULL, 1e-5, &y));
  ZT_CHECK(y && zt_tensor_numel(y) == 0);
  ZT_CHECK_OK(zt_grad(1, &y, &gy, 1, &w, false, &gw));
  ZT_CHECK(gw && zt_tensor_numel(gw) == 4);
  for (int c = 0; c < 4 && gw; c++) ZT_CHECK(zt_tensor_get(gw, c) == 0);
  zt_tensor *ts[] = {x, y, gw, gy, w};
  for (int i = 0; i < 5; i++) zt_tensor_free(ts[i]);
}

/* ------------------------------------------------ embedding */
static zt_status f_embedding(zt_tensor *const *in, zt_tensor **out, void *ud) {
  (void)ud;
  return zt_embedding(in[0], in[1], out);
}

static void test_embedding_gradcheck(void) {
  int64_t sw[] = {5, 3}, si[] = {2, 4};
  int64_t vals[] = {0, 3, 3, 4, 1, 3, 0, 0}; /* repeats: rows 0 and 3 get several grads */
  for (int k = 0; k < 2; k++) {
    zt_dtype dt = k ? ZT_DTYPE_I64 : ZT_DTYPE_I32;
    zt_tensor *w = zt_test_rand_leaf(2, sw, ZT_DTYPE_F64, -1, 1, 80);
    zt_tensor *ids = ids_tensor(2, si, dt, vals);
    ZT_GRADCHECK(f_embedding, 2, ((zt_tensor *[]){w, ids}), NULL, NULL);
    zt_tensor_free(w);
    zt_tensor_free(ids);
  }
}

static void test_embedding_values(void) {
  int64_t sw[] = {6, 4}, si[] = {3}, s0[] = {0};
  int64_t vals[] = {5, 0, 5};
  zt_tensor *w = zt_test_rand_leaf(2, sw, ZT_DTYPE_F32, -1, 1, 90);
  zt_tensor *ids = ids_tensor(1, si, ZT_DTYPE_I64, vals), *y = NULL;
  ZT_CHECK_OK(zt_embedding(w, ids, &y));
  ZT_CHECK(y->ndim == 2 && y->shape[0] == 3 && y->shape[1] == 4 && y->dtype == ZT_DTYPE_F32);
  for (int n = 0; n < 3; n++)
    for (int c = 0; c < 4; c++) ZT_CHECK(zt_tensor_get(y, n * 4 + c) == zt_tensor_get(w, vals[n] * 4 + c));
  ZT_CHECK(y->requires_grad && !ids->requires_grad);
  /* ones as grad: dw rows count their ids; rows never used stay zero */
  zt_tensor *g = NULL, *dw = NULL;
  ZT_CHECK_OK(zt_tensor_full(2, y->shape, ZT_DTYPE_F32, ZT_CPU, 1.0, &g));
  ZT_CHECK_OK(zt_grad(1, &y, &g, 1, &w, false, &dw));
  for (int v = 0; v < 6; v++)
    for (int c = 0; c < 4; c++) ZT_CHECK(zt_tensor_get(dw, v * 4 + c) == (v == 5 ? 2 : v == 0 ? 1 : 0));
  /* a 0-d id gives one row (C); no ids give (0, C) */
  zt_tensor *id0 = NULL, *y0 = NULL, *ide = NULL, *ye = NULL;
  int64_t three = 3;
  ZT_CHECK_OK(zt_tensor_from_data(0, NULL, ZT_DTYPE_I64, &three, &id0));
  ZT_CHECK_OK(zt_embedding(w, id0, &y0));
  ZT_CHECK(y0->ndim == 1 && y0->shape[0] == 4 && zt_tensor_get(y0, 2) == zt_tensor_get(w, 14));
  ZT_CHECK_OK(zt_tensor_zeros(1, s0, ZT_DTYPE_I32, ZT_CPU, &ide));
  ZT_CHECK_OK(zt_embedding(w, ide, &ye));
  ZT_CHECK(ye->ndim == 2 && ye->shape[0] == 0 && ye->shape[1] == 4);
  zt_tensor *ts[] = {w, ids, y, g, dw, id0, y0, ide, ye};
  for (int i = 0; i < 9; i++) zt_tensor_free(ts[i]);
}

/* The scatter-add equals a serial loop in id order, bit for bit, with 1 and 2 threads. */
static void test_embedding_backward_threads(void) {
  enum { V = 10, N = 2048, C = 72 };
  int64_t sw[] = {V, C}, si[] = {N}, sg[] = {N, C};
  int64_t *vals = malloc(sizeof *vals * N);
  for (int n = 0; n < N; n++) vals[n] = (n * 7 + n / 3) % V;
  zt_tensor *w = zt_test_rand_leaf(2, sw, ZT_DTYPE_F32, -1, 1, 100);
  zt_tensor *ids = ids_tensor(1, si, ZT_DTYPE_I64, vals);
  zt_tensor *g = zt_test_rand(2, sg, ZT_DTYPE_F32, -1, 1, 101);
  float *ref = calloc(V * C, sizeof *ref);
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) ref[vals[n] * C + c] += (float)zt_tensor_get(g, n * C + c);
  for (int k = 0; k < 2; k++) {
    int prev = set_threads(k + 1);
    zt_tensor *y = NULL, *dw = NULL;
    ZT_CHECK_OK(zt_embedding(w, ids, &y));
    ZT_CHECK_OK(zt_grad(1, &y, &g, 1, &w, false, &dw));
    bool same = true;
    for (int i = 0; i < V * C; i++) same = same && (float)zt_tensor_get(dw, i) == ref[i];
    ZT_CHECK(same);
    zt_tensor_free(y);
    zt_tensor_free(dw);
    zt_set_num_threads(prev);
  }
  free(ref);
  free(vals);
  zt_tensor_free(w);
  zt_tensor_free(ids);
  zt_tensor_free(g);
}

static void test_embedding_errors(void) {
  int64_t sw[] = {5, 3}, s1[] = {5}, si[] = {2, 3};
  int64_t bad_hi[] = {0, 1, 2, 3, 4, 7}, bad_neg[] = {0, -1, 2, 3, 4, 0};
  zt_tensor *w = zt_test_rand_leaf(2, sw, ZT_DTYPE_F32, -1, 1, 110), *w1 = zt_test_rand(1, s1, ZT_DTYPE_F32, 0, 1, 111);
  zt_tensor *ids_hi = ids_tensor(2, si, ZT_DTYPE_I64, bad_hi), *ids_neg = ids_tensor(2, si, ZT_DTYPE_I32, bad_neg);
  zt_tensor *idsf = zt_test_rand(2, si, ZT_DTYPE_F32, 0, 1, 112), *wi = NULL, *y = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(2, sw, ZT_DTYPE_I32, ZT_CPU, &wi));
  int64_t before = zt_test_live_bytes();
  ZT_CHECK_ERR(zt_embedding(w, ids_hi, &y), ZT_STATUS_INVALID_ARG, "id 7 at position (1, 2)");
  ZT_CHECK_ERR(zt_embedding(w, ids_hi, &y), ZT_STATUS_INVALID_ARG, "V = 5 rows");
  ZT_CHECK_ERR(zt_embedding(w, ids_neg, &y), ZT_STATUS_INVALID_ARG, "op 'embedding': id -1 at position (0, 1)");
  ZT_CHECK(zt_test_live_bytes() == before); /* the failed calls left nothing behind */
  ZT_CHECK_ERR(zt_embedding(w, idsf, &y), ZT_STATUS_DTYPE, "ids have dtype f32; they must be i32 or i64");
  ZT_CHECK_ERR(zt_embedding(wi, ids_hi, &y), ZT_STATUS_DTYPE, "weight has dtype i32");
  ZT_CHECK_ERR(zt_embedding(w1, ids_hi, &y), ZT_STATUS_SHAPE, "weight has shape (5,); it must be 2-d (V, C)");
  ZT_CHECK_ERR(zt_embedding(w, NULL, &y), ZT_STATUS_INVALID_ARG, "ids is NULL");
  ZT_CHECK(y == NULL);
  zt_tensor *ts[] = {w, w1, ids_hi, ids_neg, idsf, wi};
  for (int i = 0; i < 6; i++) zt_tensor_free(ts[i]);
}

/* ------------------------------------------------ dropout */
typedef struct dropout_ud {
  zt_rng_state state; /* restored before every forward: the same mask each call */
  double p;
  bool train;
} dropout_ud;

static zt_status f_dropout(zt_tensor *const *in, zt_tensor **out, void *ud) {
  dropout_ud *d = ud;
  zt_rng_set_state(d->state);
  return zt_dropout(in[0], d->p, d->train, out);
}

static void test_dropout_gradcheck(void) {
  int64_t sx[] = {3, 7};
  dropout_ud cases[] = {{{77, 5}, 0.4, true}, {{77, 5}, 0.4, false}, {{77, 5}, 0.0, true}};
  for (int k = 0; k < 3; k++) {
    zt_tensor *x = zt_test_rand_leaf(2, sx, ZT_DTYPE_F64, -1, 1, 120);
    ZT_GRADCHECK(f_dropout, 1, &x, &cases[k], NULL);
    zt_tensor_free(x);
  }
}

/* The mask is word i % 4 of block offset + i / 4: compare with zt_rng_uniform_at; the
 * kept fraction is about 1 - p; kept values are x / (1 - p); the generator moved by
 * ceil(n / 4) blocks; backward applies the same mask. */
static void test_dropout_mask(void) {
  enum { N = 100003 }; /* above the parallel threshold, not a multiple of 4 */
  int64_t sx[] = {N};
  double p = 0.3;
  for (int k = 0; k < 2; k++) {
    zt_dtype dt = k ? ZT_DTYPE_F64 : ZT_DTYPE_F32;
    zt_tensor *x = zt_test_rand_leaf(1, sx, dt, 0.5, 1.5, 130), *y = NULL, *g = NULL, *gx = NULL;
    zt_rng_seed(1234);
    zt_rng_set_state((zt_rng_state){1234, 99});
    zt_rng_state s0 = zt_rng_get_state();
    ZT_CHECK_OK(zt_dropout(x, p, true, &y));
    zt_rng_state s1 = zt_rng_get_state();
    ZT_CHECK(s1.seed == s0.seed && s1.offset == s0.offset + (N + 3) / 4);
    ZT_CHECK_OK(zt_tensor_full(1, sx, dt, ZT_CPU, 1.0, &g));
    ZT_CHECK_OK(zt_grad(1, &y, &g, 1, &x, false, &gx));
    int64_t kept = 0, bad_mask = 0, bad_val = 0, bad_grad = 0;
    double scale = 1 / (1 - p), tol = k ? 1e-15 : 1e-6;
    for (int64_t i = 0; i < N; i++) {
      bool keep = zt_rng_uniform_at(s0, (uint64_t)i) >= p;
      double yi = zt_tensor_get(y, i), gi = zt_tensor_get(gx, i);
      kept += keep;
      bad_mask += keep != (yi != 0);
      bad_val += keep && fabs(yi - zt_tensor_get(x, i) * scale) > tol * 4;
      bad_grad += fabs(gi - (keep ? scale : 0)) > tol * 4;
    }
    ZT_CHECK(bad_mask == 0 && bad_val == 0 && bad_grad == 0);
    ZT_CHECK_NEAR((double)kept / N, 1 - p, 0.01);
    zt_tensor_free(x);
    zt_tensor_free(y);
    zt_tensor_free(g);
    zt_tensor_free(gx);
  }
}

/* Same rng state -> the same output, with 1 thread and with 2; consecutive calls draw
 * fresh masks. */
static void test_dropout_reproducible(void) {
  int64_t sx[] = {300, 301};
  zt_tensor *x = zt_test_rand(2, sx, ZT_DTYPE_F32, -1, 1, 140), *y[3] = {0};
  zt_rng_state s = {42, 7};
  for (int k = 0; k < 2; k++) {
    int prev = set_threads(k + 1);
    zt_rng_set_state(s);
    ZT_CHECK_OK(zt_dropout(x, 0.5, true, &y[k]));
    zt_set_num_threads(prev);
  }
  ZT_CHECK(zt_test_bitwise_equal(y[0], y[1]));
  ZT_CHECK_OK(zt_dropout(x, 0.5, true, &y[2]));
  ZT_CHECK(!zt_test_bitwise_equal(y[1], y[2]));
  for (int k = 0; k < 3; k++) zt_tensor_free(y[k]);
  zt_tensor_free(x);
}

/* !train or p == 0: a copy (new storage) with the same bits, drawing nothing. */
static void test_dropout_identity(void) {
  int64_t sx[] = {4, 5};
  zt_tensor *x = zt_test_rand_leaf(2, sx, ZT_DTYPE_F32, -1, 1, 150);
  struct {
    double p;
    bool train;
  } cases[] = {{0.5, false}, {0.0, true}, {0.0, false}};
  for (int k = 0; k < 3; k++) {
    zt_rng_state s0 = zt_rng_get_state();
    zt_tensor *y = NULL;
    ZT_CHECK_OK(zt_dropout(x, cases[k].p, cases[k].train, &y));
    zt_rng_state s1 = zt_rng_get_state();
    ZT_CHECK(s1.offset == s0.offset);
    ZT_CHECK(zt_test_bitwise_equal(x, y) && y->storage != x->storage && y->requires_grad);
    zt_tensor_free(y);
  }
  zt_tensor_free(x);
}

static void test_dropout_errors(void) {
  int64_t sx[] = {4};
  zt_tensor *x = zt_test_rand(1, sx, ZT_DTYPE_F32, -1, 1, 160), *xi = NULL, *y = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(1, sx, ZT_DTYPE_I64, ZT_CPU, &xi));
  zt_rng_state s0 = zt_rng_get_state();
  ZT_CHECK_ERR(zt_dropout(x, -0.1, true, &y), ZT_STATUS_INVALID_ARG, "p is -0.1; it must be in [0, 1)");
  ZT_CHECK_ERR(zt_dropout(x, 1.0, true, &y), ZT_STATUS_INVALID_ARG, "p is 1; it must be in [0, 1)");
  ZT_CHECK_ERR(zt_dropout(x, 1.0, false, &y), ZT_STATUS_INVALID_ARG, "it must be in [0, 1)");
  ZT_CHECK_ERR(zt_dropout(x, NAN, true, &y), ZT_STATUS_INVALID_ARG, "op 'dropout': p is nan");
  ZT_CHECK_ERR(zt_dropout(xi, 0.5, true, &y), ZT_STATUS_DTYPE, "x has dtype i64");
  ZT_CHECK(zt_rng_get_state().offset == s0.offset); /* failed calls draw nothing */
  ZT_CHECK(y == NULL);
  zt_tensor_free(x);
  zt_tensor_free(xi);
}

/* ------------------------------------------------ rms norm */
static zt_status f_rms_norm(zt_tensor *const *in, zt_tensor **out, void *ud) {
  return zt_rms_norm(in[0], in[1], *(double *)ud, out);
}

static void test_rms_norm_gradcheck(void) {
  int64_t sx[] = {2, 3, 5}, sc[] = {5};
  double eps = 1e-5;
  for (int with_w = 0; with_w < 2; with_w++) {
    zt_tensor *x = zt_test_rand_leaf(3, sx, ZT_DTYPE_F64, -2, 2, 110);
    zt_tensor *w = with_w ? zt_test_rand_leaf(1, sc, ZT_DTYPE_F64, 0.5, 1.5, 111) : NULL;
    ZT_GRADCHECK(f_rms_norm, 2, ((zt_tensor *[]){x, w}), &eps, NULL);
    zt_tensor_free(x);
    zt_tensor_free(w);
  }
  /* each input alone requiring grad */
  for (int which = 0; which < 2; which++) {
    zt_tensor *x = zt_test_rand(2, (int64_t[]){40, 6}, ZT_DTYPE_F64, -2, 2, 112); /* several dw chunks */
    zt_tensor *w = zt_test_rand(1, (int64_t[]){6}, ZT_DTYPE_F64, 0.5, 1.5, 113);
    zt_tensor *ins[2] = {x, w};
    ZT_CHECK_OK(zt_tensor_set_requires_grad(ins[which], true));
    ZT_GRADCHECK(f_rms_norm, 2, ins, &eps, NULL);
    zt_tensor_free(x);
    zt_tensor_free(w);
  }
}

/* Values against LlamaRMSNorm's formula; f32 against f64; thread-count independence. */
static void test_rms_norm_values(void) {
  int64_t sx[] = {3, 70, 16}, sc[] = {16};
  zt_tensor *x = zt_test_rand_leaf(3, sx, ZT_DTYPE_F64, -3, 5, 120);
  zt_tensor *w = zt_test_rand_leaf(1, sc, ZT_DTYPE_F64, 0.5, 1.5, 121);
  zt_tensor *y = NULL;
  ZT_CHECK_OK(zt_rms_norm(x, w, 1e-6, &y));
  for (int r = 0; r < 3 * 70; r++) {
    double ms = 0;
    for (int c = 0; c < 16; c++) ms += pow(zt_tensor_get(x, r * 16 + c), 2) / 16;
    for (int c = 0; c < 16; c++)
      ZT_CHECK_NEAR(zt_tensor_get(y, r * 16 + c), zt_tensor_get(x, r * 16 + c) / sqrt(ms + 1e-6) * zt_tensor_get(w, c),
                    1e-12);
  }
  /* f32 vs f64, forward and grads */
  zt_tensor *g = zt_test_rand(3, sx, ZT_DTYPE_F64, -1, 1, 122);
  zt_tensor *x32 = cast_copy(x, ZT_DTYPE_F32), *w32 = cast_copy(w, ZT_DTYPE_F32), *g32 = cast_copy(g, ZT_DTYPE_F32);
  ZT_CHECK_OK(zt_tensor_set_requires_grad(x32, true));
  ZT_CHECK_OK(zt_tensor_set_requires_grad(w32, true));
  zt_tensor *y32 = NULL, *d64[2] = {0}, *d32[2] = {0};
  ZT_CHECK_OK(zt_rms_norm(x32, w32, 1e-6, &y32));
  ZT_CHECK(zt_test_max_abs_diff(y, y32) < 1e-5);
  ZT_CHECK_OK(zt_grad(1, &y, &g, 2, (zt_tensor *[]){x, w}, false, d64));
  ZT_CHECK_OK(zt_grad(1, &y32, &g32, 2, (zt_tensor *[]){x32, w32}, false, d32));
  ZT_CHECK(zt_test_max_abs_diff(d64[0], d32[0]) < 1e-5);
  ZT_CHECK(zt_test_max_abs_diff(d64[1], d32[1]) < 1e-3);
  /* the thread count changes no bit */
  zt_tensor *yb = NULL, *db[2] = {0};
  int prev = set_threads(1);
  ZT_CHECK_OK(zt_rms_norm(x32, w32, 1e-6, &yb));
  ZT_CHECK_OK(zt_grad(1, &yb, &g32, 2, (zt_tensor *[]){x32, w32}, false, db));
  set_threads(prev);
  zt_tensor *ya = NULL, *da[2] = {0};
  ZT_CHECK_OK(zt_rms_norm(x32, w32, 1e-6, &ya));
  ZT_CHECK_OK(zt_grad(1, &ya, &g32, 2, (zt_tensor *[]){x32, w32}, false, da));
  ZT_CHECK(zt_test_bitwise_equal(ya, yb) && zt_test_bitwise_equal(da[0], db[0]) && zt_test_bitwise_equal(da[1], db[1]));
  zt_tensor *ts[] = {x, w, y, g, x32, w32, g32, y32, d64[0], d64[1], d32[0], d32[1], yb, db[0], db[1], ya, da[0], da[1]};
  zt_test_free_all(ts, (int)(sizeof ts / sizeof ts[0]));
}

static void test_rms_norm_errors(void) {
  zt_tensor *x = zt_test_rand(2, (int64_t[]){2, 4}, ZT_DTYPE_F32, -1, 1, 130), *y = NULL;
  zt_tensor *w3 = zt_test_rand(1, (int64_t[]){3}, ZT_DTYPE_F32, -1, 1, 131);
  zt_tensor *w64 = zt_test_rand(1, (int64_t[]){4}, ZT_DTYPE_F64, -1, 1, 132);
  ZT_CHECK_ERR(zt_rms_norm(x, w3, 1e-6, &y), ZT_STATUS_SHAPE, "weight must have shape (4,)");
  ZT_CHECK_ERR(zt_rms_norm(x, w64, 1e-6, &y), ZT_STATUS_DTYPE, "cast one with zt_cast");
  ZT_CHECK_ERR(zt_rms_norm(x, NULL, -1, &y), ZT_STATUS_INVALID_ARG, "eps is -1");
  zt_tensor *ts[] = {x, w3, w64};
  zt_test_free_all(ts, 3);
}

/* ------------------------------------------------ rope */
typedef struct rope_ud {
  zt_tensor *cos, *sin;
  int64_t off, n_rot;
} rope_ud;

static zt_status f_rope(zt_tensor *const *in, zt_tensor **out, void *ud) {
  rope_ud *u = ud;
  return zt_rope(in[0], u->cos, u->sin, u->off, u->n_rot, out);
}

static void test_rope_gradcheck(void) {
  zt_tensor *c = NULL, *sn = NULL;
  ZT_CHECK_OK(zt_rope_table(4, 9, 10000.0, NULL, ZT_DTYPE_F64, ZT_CPU, &c, &sn));
  /* (B, T, 3 heads of 4): all heads; two heads rotated, the third copied; an offset */
  rope_ud cases[] = {{c, sn, 0, -1}, {c, sn, 3, 2}, {c, sn, 6, 0}};
  for (int k = 0; k < 3; k++) {
    zt_tensor *x = zt_test_rand_leaf(3, (int64_t[]){2, 3, 12}, ZT_DTYPE_F64, -2, 2, 140 + k);
    ZT_GRADCHECK(f_rope, 1, &x, &cases[k], NULL);
    zt_tensor_free(x);
  }
  zt_tensor_free(c);
  zt_tensor_free(sn);
}

/* The inverse frequency transformers' llama3 rope gives dimension pair i (long double). */
static long double ref_inv_freq(int i, int D, double theta, const zt_rope_scaling *sc) {
  long double f = 1.0L / powl(theta, (long double)(2 * i) / D);
  if (!sc) return f;
  long double wl = 2 * 3.14159265358979323846L / f, orig = sc->original_max_position_embeddings;
  long double lo = orig / sc->low_freq_factor, hi = orig / sc->high_freq_factor;
  long double scaled = wl > lo ? f / sc->factor : f;
  long double sm = (orig / wl - sc->low_freq_factor) / (sc->high_freq_factor - sc->low_freq_factor);
  long double smoothed = (1 - sm) * scaled / sc->factor + sm * scaled;
  return (!(wl < hi) && !(wl > lo)) ? smoothed : scaled;
}

/* Table values (plain and llama3-scaled, every regime hit) and the rotation against the
 * rotate-half formula q cos + rotate_half(q) sin, with an offset. */
static void test_rope_values(void) {
  const int D = 16, P = 40;
  zt_rope_scaling sc = {ZT_ROPE_SCALING_LLAMA3, 8.0, 1.0, 4.0, 64};
  for (int scaled = 0; scaled < 2; scaled++) {
    zt_tensor *c = NULL, *sn = NULL;
    ZT_CHECK_OK(zt_rope_table(D, P, 500.0, scaled ? &sc : NULL, ZT_DTYPE_F64, ZT_CPU, &c, &sn));
    if (!c) return;
    ZT_CHECK(c->ndim == 2 && c->shape[0] == P && c->shape[1] == D / 2);
    int regimes[3] = {0};
    for (int i = 0; i < D / 2; i++) {
      long double f = ref_inv_freq(i, D, 500.0, scaled ? &sc : NULL);
      long double wl = 2 * 3.14159265358979323846L / ref_inv_freq(i, D, 500.0, NULL); /* unscaled */
      regimes[wl < 16 ? 0 : wl > 64 ? 2 : 1]++;
      for (int p = 0; p < P; p++) {
        ZT_CHECK_NEAR(zt_tensor_get(c, p * D / 2 + i), (double)cosl(p * f), 1e-12);
        ZT_CHECK_NEAR(zt_tensor_get(sn, p * D / 2 + i), (double)sinl(p * f), 1e-12);
      }
    }
    if (scaled) ZT_CHECK(regimes[0] > 0 && regimes[1] > 0 && regimes[2] > 0);
    /* x (2, 5, 2 heads of D) at positions 7..11 */
    zt_tensor *x = zt_test_rand(3, (int64_t[]){2, 5, 2 * D}, ZT_DTYPE_F64, -1, 1, 150), *y = NULL;
    ZT_CHECK_OK(zt_rope(x, c, sn, 7, -1, &y));
    for (int b = 0; b < 2; b++)
      for (int t = 0; t < 5; t++)
        for (int h = 0; h < 2; h++)
          for (int i = 0; i < D; i++) {
            int64_t base = (b * 5 + t) * 2 * D + h * D, j = i % (D / 2), p = 7 + t;
            double xi = zt_tensor_get(x, base + i), rot = i < D / 2 ? -zt_tensor_get(x, base + i + D / 2)
                                                                    : zt_tensor_get(x, base + i - D / 2);
            double ref = xi * zt_tensor_get(c, p * D / 2 + j) + rot * zt_tensor_get(sn, p * D / 2 + j);
            ZT_CHECK_NEAR(zt_tensor_get(y, base + i), ref, 1e-14);
          }
    /* f32 tables are the f64 ones rounded */
    zt_tensor *c32 = NULL, *s32 = NULL;
    ZT_CHECK_OK(zt_rope_table(D, P, 500.0, scaled ? &sc : NULL, ZT_DTYPE_F32, ZT_CPU, &c32, &s32));
    for (int k = 0; k < P * D / 2; k++) ZT_CHECK(zt_tensor_get(c32, k) == (double)(float)zt_tensor_get(c, k));
    zt_tensor *ts[] = {c, sn, x, y, c32, s32};
    zt_test_free_all(ts, 6);
  }
}

/* Rotating T rows at once equals rotating each row at its own offset (cached decoding). */
static void test_rope_offset_rows(void) {
  zt_tensor *c = NULL, *sn = NULL, *all = NULL;
  ZT_CHECK_OK(zt_rope_table(8, 12, 10000.0, NULL, ZT_DTYPE_F32, ZT_CPU, &c, &sn));
  zt_tensor *x = zt_test_rand(3, (int64_t[]){1, 6, 24}, ZT_DTYPE_F32, -1, 1, 160);
  ZT_CHECK_OK(zt_rope(x, c, sn, 2, 2, &all));
  for (int t = 0; t < 6; t++) {
    zt_tensor *row = NULL, *yr = NULL, *ar = NULL;
    ZT_CHECK_OK(zt_narrow(x, 1, t, 1, &row));
    ZT_CHECK_OK(zt_rope(row, c, sn, 2 + t, 2, &yr));
    ZT_CHECK_OK(zt_narrow(all, 1, t, 1, &ar));
    zt_tensor *arc = NULL;
    ZT_CHECK_OK(zt_contiguous(ar, &arc));
    ZT_CHECK(zt_test_bitwise_equal(yr, arc));
    zt_tensor *ts[] = {row, yr, ar, arc};
    zt_test_free_all(ts, 4);
  }
  /* the third head (v of a fused qkv) is copied */
  for (int t = 0; t < 6; t++)
    for (int i = 16; i < 24; i++) ZT_CHECK(zt_tensor_get(all, t * 24 + i) == zt_tensor_get(x, t * 24 + i));
  zt_tensor *ts[] = {c, sn, all, x};
  zt_test_free_all(ts, 4);
}

static void test_rope_errors(void) {
  zt_tensor *c = NULL, *sn = NULL, *y = NULL, *c2 = NULL, *s2 = NULL;
  ZT_CHECK_OK(zt_rope_table(4, 6, 10000.0, NULL, ZT_DTYPE_F32, ZT_CPU, &c, &sn));
  zt_tensor *x = zt_test_rand(3, (int64_t[]){1, 4, 8}, ZT_DTYPE_F32, -1, 1, 170);
  zt_tensor *x6 = zt_test_rand(3, (int64_t[]){1, 4, 6}, ZT_DTYPE_F32, -1, 1, 171);
  zt_tensor *x64 = zt_test_rand(3, (int64_t[]){1, 4, 8}, ZT_DTYPE_F64, -1, 1, 172);
  ZT_CHECK_ERR(zt_rope(x, c, sn, 3, -1, &y), ZT_STATUS_SHAPE, "outside the tables' 6 positions");
  ZT_CHECK_ERR(zt_rope(x6, c, sn, 0, -1, &y), ZT_STATUS_SHAPE, "not a multiple of head_dim 4");
  ZT_CHECK_ERR(zt_rope(x, c, sn, 0, 3, &y), ZT_STATUS_SHAPE, "holds only 2 heads");
  ZT_CHECK_ERR(zt_rope(x64, c, sn, 0, -1, &y), ZT_STATUS_DTYPE, "");
  ZT_CHECK_ERR(zt_rope_table(5, 6, 1e4, NULL, ZT_DTYPE_F32, ZT_CPU, &c2, &s2), ZT_STATUS_INVALID_ARG, "even");
  zt_rope_scaling bad = {ZT_ROPE_SCALING_LLAMA3, 8.0, 4.0, 1.0, 8192};
  ZT_CHECK_ERR(zt_rope_table(4, 6, 1e4, &bad, ZT_DTYPE_F32, ZT_CPU, &c2, &s2), ZT_STATUS_INVALID_ARG,
               "low_freq_factor < high_freq_factor");
  zt_tensor *ts[] = {c, sn, x, x6, x64};
  zt_test_free_all(ts, 5);
}

/* ------------------------------------------------ swiglu */
static zt_status f_swiglu(zt_tensor *const *in, zt_tensor **out, void *ud) {
  (void)ud;
  return zt_swiglu(in[0], in[1], out);
}

static void test_swiglu_gradcheck(void) {
  int64_t sh[] = {3, 4, 5};
  zt_tensor *g = zt_test_rand_leaf(3, sh, ZT_DTYPE_F64, -4, 4, 180);
  zt_tensor *u = zt_test_rand_leaf(3, sh, ZT_DTYPE_F64, -2, 2, 181);
  ZT_GRADCHECK(f_swiglu, 2, ((zt_tensor *[]){g, u}), NULL, NULL);
  zt_test_free_all((zt_tensor *[]){g, u}, 2);
  for (int which = 0; which < 2; which++) {
    zt_tensor *a = zt_test_rand(3, sh, ZT_DTYPE_F64, -4, 4, 182), *b = zt_test_rand(3, sh, ZT_DTYPE_F64, -2, 2, 183);
    zt_tensor *ins[2] = {a, b};
    ZT_CHECK_OK(zt_tensor_set_requires_grad(ins[which], true));
    ZT_GRADCHECK(f_swiglu, 2, ins, NULL, NULL);
    zt_test_free_all(ins, 2);
  }
}

/* The fused op is bitwise zt_mul(zt_silu(gate), up), output and both grads, in f32 and f64,
 * on the OpenMP path too (n > ZT_PAR_MIN). */
static void test_swiglu_matches_composition(void) {
  zt_dtype dts[2] = {ZT_DTYPE_F32, ZT_DTYPE_F64};
  for (int d = 0; d < 2; d++) {
    int64_t sh[] = {64, 3000};
    zt_tensor *a = zt_test_rand_leaf(2, sh, dts[d], -12, 12, 190), *u = zt_test_rand_leaf(2, sh, dts[d], -3, 3, 191);
    zt_tensor *gy = zt_test_rand(2, sh, dts[d], -1, 1, 192);
    zt_tensor *y1 = NULL, *s = NULL, *y2 = NULL, *g1[2] = {0}, *g2[2] = {0};
    ZT_CHECK_OK(zt_swiglu(a, u, &y1));
    ZT_CHECK_OK(zt_silu(a, &s));
    ZT_CHECK_OK(zt_mul(s, u, &y2));
    ZT_CHECK(zt_test_bitwise_equal(y1, y2));
    ZT_CHECK_OK(zt_grad(1, &y1, &gy, 2, (zt_tensor *[]){a, u}, false, g1));
    ZT_CHECK_OK(zt_grad(1, &y2, &gy, 2, (zt_tensor *[]){a, u}, false, g2));
    ZT_CHECK(zt_test_bitwise_equal(g1[0], g2[0]));
    ZT_CHECK(zt_test_bitwise_equal(g1[1], g2[1]));
    zt_tensor *ts[] = {a, u, gy, y1, s, y2, g1[0], g1[1], g2[0], g2[1]};
    zt_test_free_all(ts, 10);
  }
}

static void test_swiglu_errors(void) {
  zt_tensor *a = zt_test_rand(2, (int64_t[]){2, 4}, ZT_DTYPE_F32, -1, 1, 200), *y = NULL;
  zt_tensor *b = zt_test_rand(1, (int64_t[]){4}, ZT_DTYPE_F32, -1, 1, 201);
  ZT_CHECK_ERR(zt_swiglu(a, b, &y), ZT_STATUS_SHAPE, "they must have one shape");
  ZT_CHECK_ERR(zt_swiglu(a, NULL, &y), ZT_STATUS_INVALID_ARG, "gate and up are required");
  zt_test_free_all((zt_tensor *[]){a, b}, 2);
}

/* ------------------------------------------------ the Llama ops together */
/* A Llama-shaped block on x (B, T, C): rms_norm, one fused qkv projection (4 query heads,
 * 2 kv heads of 8), rope on q and k, GQA attention, then a SwiGLU MLP (gate and up of 48). */
enum { LB = 2, LT = 9, LC = 32, LH = 4, LKV = 2, LD = 8, LF = 48 };
typedef struct llama_ud {
  zt_tensor *cos, *sin;
} llama_ud;

static zt_status llama_block(zt_tensor *const *in, int n_in, zt_tensor **out, int n_out, void *ud) {
  (void)n_in;
  (void)n_out;
  llama_ud *u = ud;
  zt_tensor *x = in[0], *nw = in[1], *wqkv = in[2], *wg = in[3], *wu = in[4];
  zt_tensor *h = NULL, *qkv = NULL, *r = NULL, *a = NULL, *g = NULL, *up = NULL;
  zt_status s = zt_rms_norm(x, nw, 1e-6, &h);
  if (!s) s = zt_linear(h, wqkv, NULL, &qkv);
  if (!s) s = zt_rope(qkv, u->cos, u->sin, 0, LH + LKV, &r);
  if (!s) s = zt_causal_attention_gqa(r, LH, LKV, &a);
  if (!s) s = zt_linear(a, wg, NULL, &g);
  if (!s) s = zt_linear(a, wu, NULL, &up);
  if (!s) s = zt_swiglu(g, up, out);
  zt_tensor *ts[] = {h, qkv, r, a, g, up};
  zt_test_free_all(ts, 6);
  return s;
}

/* Saved-tensor hooks that hand back a copy (offload's shape): pack clones, unpack aliases. */
static zt_status pack_clone(const zt_tensor *t, void **packed, void *ud) {
  (void)ud;
  zt_tensor *c = NULL;
  zt_status s = zt_tensor_clone_data(t, ZT_MEM_TAG_TEMP, &c);
  *packed = c;
  return s;
}
static zt_status unpack_alias(void *packed, zt_tensor **out, void *ud) {
  (void)ud;
  return zt_tensor_alias(packed, out);
}
static void release_clone(void *packed, void *ud) {
  (void)ud;
  zt_tensor_free(packed);
}

/* Plain, under a non-reentrant checkpoint and under copying saved-tensor hooks: bitwise
 * the same output and grads (f32), so recompute and activation offload work on these ops. */
static void test_llama_ops_checkpoint_and_hooks(void) {
  llama_ud ud = {NULL, NULL};
  ZT_CHECK_OK(zt_rope_table(LD, 16, 10000.0, NULL, ZT_DTYPE_F32, ZT_CPU, &ud.cos, &ud.sin));
  zt_tensor *p[5] = {
      zt_test_rand_leaf(3, (int64_t[]){LB, LT, LC}, ZT_DTYPE_F32, -1, 1, 210),
      zt_test_rand_leaf(1, (int64_t[]){LC}, ZT_DTYPE_F32, 0.5, 1.5, 211),
      zt_test_rand_leaf(2, (int64_t[]){(LH + 2 * LKV) * LD, LC}, ZT_DTYPE_F32, -0.3, 0.3, 212),
      zt_test_rand_leaf(2, (int64_t[]){LF, LH * LD}, ZT_DTYPE_F32, -0.3, 0.3, 213),
      zt_test_rand_leaf(2, (int64_t[]){LF, LH * LD}, ZT_DTYPE_F32, -0.3, 0.3, 214),
  };
  zt_tensor *gy = zt_test_rand(3, (int64_t[]){LB, LT, LF}, ZT_DTYPE_F32, -1, 1, 215);
  zt_tensor *y[3] = {NULL, NULL, NULL}, *grads[3][5] = {{NULL}};
  zt_saved_tensor_hooks hooks = {pack_clone, unpack_alias, release_clone, NULL};
  for (int mode = 0; mode < 3; mode++) {
    if (mode == 0) ZT_CHECK_OK(llama_block(p, 5, &y[0], 1, &ud));
    if (mode == 1) ZT_CHECK_OK(zt_checkpoint(llama_block, &ud, 5, p, 1, &y[1], NULL));
    if (mode == 2) {
      ZT_CHECK_OK(zt_saved_tensor_hooks_push(&hooks));
      ZT_CHECK_OK(llama_block(p, 5, &y[2], 1, &ud));
      ZT_CHECK_OK(zt_saved_tensor_hooks_pop());
    }
    if (!y[mode]) return;
    ZT_CHECK_OK(zt_backward(1, &y[mode], &gy, false));
    for (int i = 0; i < 5; i++) {
      grads[mode][i] = p[i]->grad;
      p[i]->grad = NULL;
    }
  }
  for (int mode = 1; mode < 3; mode++) {
    ZT_CHECK(zt_test_bitwise_equal(y[0], y[mode]));
    for (int i = 0; i < 5; i++)
      if (!grads[0][i] || !grads[mode][i] || !zt_test_bitwise_equal(grads[0][i], grads[mode][i]))
        zt_test_fail(__FILE__, __LINE__, "mode %d: the grad of input %d differs from plain", mode, i);
  }
  for (int mode = 0; mode < 3; mode++) zt_test_free_all(grads[mode], 5);
  zt_test_free_all(y, 3);
  zt_test_free_all(p, 5);
  zt_tensor *ts[] = {gy, ud.cos, ud.sin};
  zt_test_free_all(ts, 3);
}

int main(void) {
  ZT_RUN(test_layer_norm_gradcheck);
  ZT_RUN(test_layer_norm_gradcheck_partial);
  ZT_RUN(test_layer_norm_values);
  ZT_RUN(test_layer_norm_f32_vs_f64);
  ZT_RUN(test_layer_norm_threads);
  ZT_RUN(test_layer_norm_errors);
  ZT_RUN(test_layer_norm_empty);
  ZT_RUN(test_embedding_gradcheck);
  ZT_RUN(test_embedding_values);
  ZT_RUN(test_embedding_backward_threads);
  ZT_RUN(test_embedding_errors);
  ZT_RUN(test_dropout_gradcheck);
  ZT_RUN(test_dropout_mask);
  ZT_RUN(test_dropout_reproducible);
  ZT_RUN(test_dropout_identity);
  ZT_RUN(test_dropout_errors);
  ZT_RUN(test_rms_norm_gradcheck);
  ZT_RUN(test_rms_norm_values);
  ZT_RUN(test_rms_norm_errors);
  ZT_RUN(test_rope_gradcheck);
  ZT_RUN(test_rope_values);
  ZT_RUN(test_rope_offset_rows);
  ZT_RUN(test_rope_errors);
  ZT_RUN(test_swiglu_gradcheck);
  ZT_RUN(test_swiglu_matches_composition);
  ZT_RUN(test_swiglu_errors);
  ZT_RUN(test_llama_ops_checkpoint_and_hooks);
  return zt_test_finish();
}
