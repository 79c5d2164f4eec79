/* matmul and linear: forward against naive loops, gradients against finite differences
 * (every transpose combo, batched, broadcast batch dims, shared 2-D b, optional bias),
 * frozen inputs (no save, no GEMM), f32 vs f64, empty sizes, and shape/dtype errors. */
#include <stdlib.h>

#include "core/tensor_internal.h"
#include "zt_test.h"

typedef struct mm_ud {
  bool ta, tb;
} mm_ud;

static zt_status f_matmul(zt_tensor *const *in, zt_tensor **out, void *ud) {
  mm_ud *u = ud;
  return zt_matmul(in[0], in[1], u->ta, u->tb, out);
}

static zt_status f_linear(zt_tensor *const *in, zt_tensor **out, void *ud) {
  (void)ud;
  return zt_linear(in[0], in[1], in[2], out);
}

/* Grad of ones for a non-scalar root. */
static zt_status backward_ones(zt_tensor *y) {
  zt_tensor *g = NULL;
  ZT_TRY(zt_tensor_full(y->ndim, y->shape, y->dtype, ZT_CPU, 1.0, &g));
  zt_status s = zt_backward(1, &y, &g, false);
  zt_tensor_free(g);
  return s;
}

/* Row-major offset of the batch index `bi` (of the broadcast batch shape bshape, nbd dims)
 * inside a contiguous operand with nd dims whose matrices hold mat elements. */
static int64_t bcast_offset(const zt_tensor *t, int nbd, const int64_t *bshape, int64_t bi) {
  int64_t idx[ZT_MAX_DIMS];
  for (int d = nbd - 1; d >= 0; d--) {
    idx[d] = bi % bshape[d];
    bi /= bshape[d];
  }
  int tb = t->ndim - 2, off = nbd - tb;
  int64_t o = 0;
  for (int d = 0; d < tb; d++) o = o * t->shape[d] + (t->shape[d] == 1 ? 0 : idx[d + off]);
  return o * t->shape[t->ndim - 2] * t->shape[t->ndim - 1];
}

/* Max |zt_matmul(a, b) - naive loops|, both computed here. */
static double matmul_ref_diff(zt_tensor *a, zt_tensor *b, bool ta, bool tb) {
  zt_tensor *y = NULL;
  if (zt_matmul(a, b, ta, tb, &y)) {
    zt_test_fail(__FILE__, __LINE__, "matmul failed: %s", zt_last_error());
    return INFINITY;
  }
  int nbd = y->ndim - 2;
  int64_t M = y->shape[nbd], N = y->shape[nbd + 1], K = ta ? a->shape[a->ndim - 2] : a->shape[a->ndim - 1];
  int64_t nb = 1;
  for (int d = 0; d < nbd; d++) nb *= y->shape[d];
  double worst = 0;
  for (int64_t bi = 0; bi < nb; bi++) {
    int64_t oa = bcast_offset(a, nbd, y->shape, bi), ob = bcast_offset(b, nbd, y->shape, bi);
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        double acc = 0;
        for (int64_t k = 0; k < K; k++) {
          double x = zt_tensor_get(a, oa + (ta ? k * M + i : i * K + k));
          double w = zt_tensor_get(b, ob + (tb ? j * K + k : k * N + j));
          acc += x * w;
        }
        double d = fabs(acc - zt_tensor_get(y, (bi * M + i) * N + j));
        if (d > worst) worst = d;
      }
  }
  zt_tensor_free(y);
  return worst;
}

/* a and b shapes are given as logical (..., M, K) and (..., K, N); the stored shape swaps
 * the last two dims where transposed. */
static void check_matmul_case(int na, const int64_t *sa_logical, int nb, const int64_t *sb_logical, bool ta,
                              bool tb, uint64_t seed) {
  int64_t sa[ZT_MAX_DIMS], sb[ZT_MAX_DIMS];
  memcpy(sa, sa_logical, sizeof(int64_t) * (size_t)na);
  memcpy(sb, sb_logical, sizeof(int64_t) * (size_t)nb);
  if (ta) {
    sa[na - 2] = sa_logical[na - 1];
    sa[na - 1] = sa_logical[na - 2];
  }
  if (tb) {
    sb[nb - 2] = sb_logical[nb - 1];
    sb[nb - 1] = sb_logical[nb - 2];
  }
  zt_tensor *a = zt_test_rand_leaf(na, sa, ZT_DTYPE_F64, -1, 1, seed);
  zt_tensor *b = zt_test_rand_leaf(nb, sb, ZT_DTYPE_F64, -1, 1, seed + 1);
  double d = matmul_ref_diff(a, b, ta, tb);
  if (!(d < 1e-12)) zt_test_fail(__FILE__, __LINE__, "forward differs from naive loops by %g (ta %d tb %d)", d, ta, tb);
  mm_ud u = {ta, tb};
  if (!ZT_GRADCHECK(f_matmul, 2, ((zt_tensor *[]){a, b}), &u, NULL))
    fprintf(stderr, "  (case ta %d tb %d, seed %llu)\n", ta, tb, (unsigned long long)seed);
  zt_tensor_free(a);
  zt_tensor_free(b);
}

static void test_matmul_2d_all_transposes(void) {
  int64_t sa[] = {3, 4}, sb[] = {4, 5};
  for (int t = 0; t < 4; t++) check_matmul_case(2, sa, 2, sb, t & 1, t & 2, 10 + (uint64_t)t);
}

static void test_matmul_batched_all_transposes(void) {
  int64_t sa[] = {2, 3, 4}, sb[] = {2, 4, 5};
  for (int t = 0; t < 4; t++) check_matmul_case(3, sa, 3, sb, t & 1, t & 2, 20 + (uint64_t)t);
}

/* b 2-D, shared by the batch: the folded single-GEMM path (and its ta fallback). */
static void test_matmul_shared_2d_b(void) {
  int64_t sa[] = {2, 3, 3, 4}, sb[] = {4, 5};
  for (int t = 0; t < 4; t++) check_matmul_case(4, sa, 2, sb, t & 1, t & 2, 30 + (uint64_t)t);
  int64_t sb1[] = {1, 4, 5}; /* batch of one: folds too */
  check_matmul_case(4, sa, 3, sb1, false, false, 35);
}

/* Batch dims broadcast between a and b: (1,..) vs (n,..), and a shared 2-D a. */
static void test_matmul_batch_broadcast(void) {
  int64_t sa1[] = {1, 3, 4}, sb1[] = {2, 4, 5};
  for (int t = 0; t < 4; t++) check_matmul_case(3, sa1, 3, sb1, t & 1, t & 2, 40 + (uint64_t)t);
  int64_t sa2[] = {2, 1, 3, 4}, sb2[] = {3, 4, 2};
  for (int t = 0; t < 4; t++) check_matmul_case(4, sa2, 3, sb2, t & 1, t & 2, 50 + (uint64_t)t);
  int64_t sa3[] = {3, 4}, sb3[] = {2, 4, 5};
  check_matmul_case(2, sa3, 3, sb3, false, true, 60);
  int64_t sa4[] = {2, 1, 3, 4}, sb4[] = {1, 3, 4, 2}; /* both broadcast on different dims */
  check_matmul_case(4, sa4, 4, sb4, true, false, 61);
}

/* Only one input requires grad: the other gets no grad, and only the needed tensor is saved. */
static void test_matmul_one_input_requires_grad(void) {
  int64_t sa[] = {2, 3, 4}, sb[] = {4, 5};
  zt_tensor *a = zt_test_rand_leaf(3, sa, ZT_DTYPE_F64, -1, 1, 70);
  zt_tensor *b = zt_test_rand(2, sb, ZT_DTYPE_F64, -1, 1, 71);
  mm_ud u = {false, false};
  ZT_GRADCHECK(f_matmul, 2, ((zt_tensor *[]){a, b}), &u, NULL);
  zt_tensor *y = NULL;
  ZT_CHECK_OK(zt_matmul(a, b, false, false, &y));
  ZT_CHECK(y && zt_tensor_grad_fn(y) && strcmp(zt_node_name(zt_tensor_grad_fn(y)), "MatmulBackward") == 0);
  if (y) ZT_CHECK(zt_node_n_saved(zt_tensor_grad_fn(y)) == 1); /* b only: dA reads b */
  ZT_CHECK_OK(backward_ones(y));
  zt_tensor_free(y);
  ZT_CHECK(b->grad == NULL);
  zt_tensor_free(a->grad);
  a->grad = NULL;
  /* the other way round, transposed b */
  ZT_CHECK_OK(zt_tensor_set_requires_grad(a, false));
  int64_t sbt[] = {5, 4};
  zt_tensor *bt = zt_test_rand_leaf(2, sbt, ZT_DTYPE_F64, -1, 1, 72);
  u.tb = true;
  ZT_GRADCHECK(f_matmul, 2, ((zt_tensor *[]){a, bt}), &u, NULL);
  zt_tensor_free(a);
  zt_tensor_free(b);
  zt_tensor_free(bt);
}

static void test_linear_gradcheck(void) {
  int64_t sx[] = {2, 3, 4}, sw[] = {5, 4}, sbias[] = {5};
  zt_tensor *x = zt_test_rand_leaf(3, sx, ZT_DTYPE_F64, -1, 1, 80);
  zt_tensor *w = zt_test_rand_leaf(2, sw, ZT_DTYPE_F64, -1, 1, 81);
  zt_tensor *bias = zt_test_rand_leaf(1, sbias, ZT_DTYPE_F64, -1, 1, 82);
  ZT_GRADCHECK(f_linear, 3, ((zt_tensor *[]){x, w, bias}), NULL, NULL);
  ZT_GRADCHECK(f_linear, 3, ((zt_tensor *[]){x, w, NULL}), NULL, NULL);
  /* forward: y == x . W^T + bias, and == matmul(x, W, tb) without bias */
  zt_tensor *y = NULL, *ym = NULL;
  ZT_CHECK_OK(zt_linear(x, w, bias, &y));
  ZT_CHECK_OK(zt_matmul(x, w, false, true, &ym));
  if (y && ym) {
    ZT_CHECK(y->ndim == 3 && y->shape[0] == 2 && y->shape[1] == 3 && y->shape[2] == 5);
    for (int64_t r = 0; r < 6; r++)
      for (int64_t j = 0; j < 5; j++)
        ZT_CHECK_NEAR(zt_tensor_get(y, r * 5 + j), zt_tensor_get(ym, r * 5 + j) + zt_tensor_get(bias, j), 1e-12);
  }
  zt_tensor_free(y);
  zt_tensor_free(ym);
  ZT_CHECK(matmul_ref_diff(x, w, false, true) < 1e-12);
  /* 1-D x and 2-D x */
  int64_t s1[] = {4}, s2[] = {7, 4};
  zt_tensor *x1 = zt_test_rand_leaf(1, s1, ZT_DTYPE_F64, -1, 1, 83);
  zt_tensor *x2 = zt_test_rand_leaf(2, s2, ZT_DTYPE_F64, -1, 1, 84);
  ZT_GRADCHECK(f_linear, 3, ((zt_tensor *[]){x1, w, bias}), NULL, NULL);
  ZT_GRADCHECK(f_linear, 3, ((zt_tensor *[]){x2, w, bias}), NULL, NULL);
  zt_tensor_free(x1);
  zt_tensor_free(x2);
  zt_tensor_free(x);
  zt_tensor_free(w);
  zt_tensor_free(bias);
}

/* Frozen weights: W and bias do not require grad. Only W is saved (dx reads it). */
static void test_linear_frozen_weights(void) {
  int64_t sx[] = {3, 2, 6}, sw[] = {4, 6}, sbias[] = {4};
  zt_tensor *x = zt_test_rand_leaf(3, sx, ZT_DTYPE_F64, -1, 1, 90);
  zt_tensor *w = zt_test_rand(2, sw, ZT_DTYPE_F64, -1, 1, 91);
  zt_tensor *bias = zt_test_rand(1, sbias, ZT_DTYPE_F64, -1, 1, 92);
  ZT_GRADCHECK(f_linear, 3, ((zt_tensor *[]){x, w, bias}), NULL, NULL);
  zt_tensor *y = NULL;
  ZT_CHECK_OK(zt_linear(x, w, bias, &y));
  if (y) ZT_CHECK(zt_node_n_saved(zt_tensor_grad_fn(y)) == 1);
  ZT_CHECK_OK(backward_ones(y));
  zt_tensor_free(y);
  ZT_CHECK(w->grad == NULL && bias->grad == NULL);
  /* only the bias trains: nothing is saved at all */
  ZT_CHECK_OK(zt_tensor_set_requires_grad(x, false));
  ZT_CHECK_OK(zt_tensor_set_requires_grad(bias, true));
  ZT_GRADCHECK(f_linear, 3, ((zt_tensor *[]){x, w, bias}), NULL, NULL);
  y = NULL;
  ZT_CHECK_OK(zt_linear(x, w, bias, &y));
  if (y) ZT_CHECK(zt_node_n_saved(zt_tensor_grad_fn(y)) == 0);
  zt_tensor_free(y);
  zt_tensor_free(x);
  zt_tensor_free(w);
  zt_tensor_free(bias);
}

/* Partial backward: W requires grad but zt_grad asks for x only. The weight-grad GEMM
 * must not run: its (out, in) result would raise the allocation peak by W's bytes. */
static void test_linear_partial_grad_skips_weight_gemm(void) {
  int64_t sx[] = {2, 64}, sw[] = {256, 64}, sbias[] = {256};
  zt_tensor *x = zt_test_rand_leaf(2, sx, ZT_DTYPE_F64, -1, 1, 100);
  zt_tensor *w = zt_test_rand_leaf(2, sw, ZT_DTYPE_F64, -1, 1, 101);
  zt_tensor *bias = zt_test_rand_leaf(1, sbias, ZT_DTYPE_F64, -1, 1, 102);
  zt_tensor *y = NULL, *gx = NULL, *ones = NULL;
  ZT_CHECK_OK(zt_tensor_full(2, (int64_t[]){2, 256}, ZT_DTYPE_F64, ZT_CPU, 1.0, &ones));
  ZT_CHECK_OK(zt_linear(x, w, bias, &y));
  zt_mem_stats before, after;
  zt_mem_stats_get(ZT_CPU, &before);
  zt_mem_reset_peaks();
  ZT_CHECK_OK(zt_grad(1, &y, (zt_tensor *[]){ones}, 1, &x, false, &gx));
  zt_mem_stats_get(ZT_CPU, &after);
  int64_t rise = after.peak_total - before.current_total;
  ZT_CHECK(rise < (int64_t)zt_tensor_nbytes(w));
  ZT_CHECK(gx && w->grad == NULL && bias->grad == NULL);
  /* gx == ones(2,256) . W */
  if (gx)
    for (int64_t i = 0; i < 64; i++) {
      double s = 0;
      for (int64_t o = 0; o < 256; o++) s += zt_tensor_get(w, o * 64 + i);
      ZT_CHECK_NEAR(zt_tensor_get(gx, i), s, 1e-9);
      ZT_CHECK_NEAR(zt_tensor_get(gx, 64 + i), s, 1e-9);
    }
  zt_tensor_free(gx);
  zt_tensor_free(y);
  /* same for matmul: grads for a only */
  zt_tensor *ym = NULL, *ga = NULL;
  ZT_CHECK_OK(zt_matmul(x, w, false, true, &ym));
  zt_mem_stats_get(ZT_CPU, &before);
  zt_mem_reset_peaks();
  ZT_CHECK_OK(zt_grad(1, &ym, (zt_tensor *[]){ones}, 1, &x, false, &ga));
  zt_mem_stats_get(ZT_CPU, &after);
  ZT_CHECK(after.peak_total - before.current_total < (int64_t)zt_tensor_nbytes(w));
  ZT_CHECK(ga && w->grad == NULL);
  zt_tensor_free(ga);
  zt_tensor_free(ym);
  zt_tensor_free(ones);
  zt_tensor_free(x);
  zt_tensor_free(w);
  zt_tensor_free(bias);
}

/* Saved-tensor hooks whose unpack returns strided views: pack stores a copy with its last
 * two dims physically swapped; unpack returns a view in the original shape (as an
 * offload or compression hook may). Backward must still get the right values. */
static zt_status pack_swapped(const zt_tensor *t, void **packed, void *ud) {
  (void)ud;
  int nd = t->ndim;
  int64_t sh[ZT_MAX_DIMS];
  memcpy(sh, t->shape, sizeof sh);
  if (nd >= 2) {
    sh[nd - 2] = t->shape[nd - 1];
    sh[nd - 1] = t->shape[nd - 2];
  }
  zt_tensor *p = NULL;
  ZT_TRY(zt_tensor_empty(nd, sh, t->dtype, ZT_CPU, &p));
  int64_t n = zt_tensor_numel(t), r = nd >= 2 ? t->shape[nd - 2] : 1, c = nd >= 1 ? t->shape[nd - 1] : 1;
  for (int64_t i = 0; i < n; i++) {
    int64_t mat = i / (r * c), ii = (i / c) % r, jj = i % c;
    ZT_CHECK_OK(zt_tensor_set(p, mat * r * c + jj * r + ii, zt_tensor_get(t, i)));
  }
  *packed = p;
  return ZT_OK;
}
static zt_status unpack_swapped(void *packed, zt_tensor **out, void *ud) {
  (void)ud;
  zt_tensor *p = packed;
  int nd = p->ndim;
  int64_t sh[ZT_MAX_DIMS], st[ZT_MAX_DIMS];
  memcpy(sh, p->shape, sizeof sh);
  memcpy(st, p->stride, sizeof st);
  if (nd >= 2) {
    sh[nd - 2] = p->shape[nd - 1];
    sh[nd - 1] = p->shape[nd - 2];
    st[nd - 2] = p->stride[nd - 1];
    st[nd - 1] = p->stride[nd - 2];
  }
  return zt__tensor_new_view(p->storage, 0, nd, sh, st, p->dtype, out);
}
static void release_swapped(void *packed, void *ud) {
  (void)ud;
  zt_tensor_free(packed);
}

static void test_noncontiguous_saved_tensors(void) {
  zt_saved_tensor_hooks h = {pack_swapped, unpack_swapped, release_swapped, NULL};
  int64_t sa[] = {2, 4, 3}, sb[] = {4, 5}, sw[] = {5, 3}, sbias[] = {5};
  zt_tensor *a = zt_test_rand_leaf(3, sa, ZT_DTYPE_F64, -1, 1, 130);
  zt_tensor *b = zt_test_rand_leaf(2, sb, ZT_DTYPE_F64, -1, 1, 131);
  zt_tensor *w = zt_test_rand_leaf(2, sw, ZT_DTYPE_F64, -1, 1, 132);
  zt_tensor *bias = zt_test_rand_leaf(1, sbias, ZT_DTYPE_F64, -1, 1, 133);
  ZT_CHECK_OK(zt_saved_tensor_hooks_push(&h));
  mm_ud u = {true, false};
  ZT_GRADCHECK(f_matmul, 2, ((zt_tensor *[]){a, b}), &u, NULL);
  int64_t sx[] = {2, 4, 3};
  zt_tensor *x = zt_test_rand_leaf(3, sx, ZT_DTYPE_F64, -1, 1, 134);
  ZT_GRADCHECK(f_linear, 3, ((zt_tensor *[]){x, w, bias}), NULL, NULL);
  ZT_CHECK_OK(zt_saved_tensor_hooks_pop());
  zt_tensor_free(a);
  zt_tensor_free(b);
  zt_tensor_free(w);
  zt_tensor_free(bias);
  zt_tensor_free(x);
}

static zt_tensor *to_f32(const zt_tensor *t) {
  zt_tensor *o = NULL;
  if (zt_tensor_empty(t->ndim, t->shape, ZT_DTYPE_F32, ZT_CPU, &o) || zt_tensor_copy_(o, t))
    zt_test_fail(__FILE__, __LINE__, "to_f32: %s", zt_last_error());
  return o;
}

static double rel_err(const zt_tensor *a, const zt_tensor *b) {
  double d = zt_test_max_abs_diff(a, b), m = 0;
  int64_t n = zt_tensor_numel(b);
  for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(zt_tensor_get(b, i)));
  return d / (m > 0 ? m : 1);
}

/* Runs fn on f64 inputs and on f32 copies, backward with a random grad, and compares the
 * outputs and every input grad (relative to the largest f64 magnitude). */
static void check_f32_vs_f64(zt_gc_fn fn, int n, zt_tensor *const *in64, void *ud) {
  zt_tensor *in32[4] = {0};
  for (int i = 0; i < n; i++)
    if (in64[i]) {
      in32[i] = to_f32(in64[i]);
      ZT_CHECK_OK(zt_tensor_set_requires_grad(in32[i], true));
    }
  zt_tensor *y64 = NULL, *y32 = NULL;
  ZT_CHECK_OK(fn(in64, &y64, ud));
  ZT_CHECK_OK(fn(in32, &y32, ud));
  if (y64 && y32) {
    ZT_CHECK(rel_err(y32, y64) < 1e-5);
    zt_tensor *g64 = zt_test_rand(y64->ndim, y64->shape, ZT_DTYPE_F64, -1, 1, 555);
    zt_tensor *g32 = to_f32(g64);
    ZT_CHECK_OK(zt_backward(1, &y64, &g64, false));
    ZT_CHECK_OK(zt_backward(1, &y32, &g32, false));
    for (int i = 0; i < n; i++)
      if (in64[i]) {
        ZT_CHECK(in64[i]->grad && in32[i]->grad);
        if (in64[i]->grad && in32[i]->grad) {
          double e = rel_err(in32[i]->grad, in64[i]->grad);
          if (!(e < 1e-5)) zt_test_fail(__FILE__, __LINE__, "grad of input %d: f32 vs f64 relative error %g", i, e);
        }
      }
    zt_tensor_free(g64);
    zt_tensor_free(g32);
  }
  zt_tensor_free(y64);
  zt_tensor_free(y32);
  for (int i = 0; i < n; i++)
    if (in64[i]) {
      zt_tensor_free(in64[i]->grad);
      in64[i]->grad = NULL;
      zt_tensor_free(in32[i]);
    }
}

/* f32 and f64 agree (forward and every grad) on sizes that are not multiples of the
 * BLAS blocking, through the folded and batched matmul paths and linear. */
static void test_f32_matches_f64(void) {
  int64_t sa[] = {2, 33, 65}, sat[] = {2, 65, 33}, sb[] = {65, 17}, sbt[] = {2, 17, 65}, sw[] = {17, 65},
          sbias[] = {17};
  zt_tensor *a = zt_test_rand_leaf(3, sa, ZT_DTYPE_F64, -1, 1, 110);
  zt_tensor *at = zt_test_rand_leaf(3, sat, ZT_DTYPE_F64, -1, 1, 111);
  zt_tensor *b = zt_test_rand_leaf(2, sb, ZT_DTYPE_F64, -1, 1, 112);
  zt_tensor *bt = zt_test_rand_leaf(3, sbt, ZT_DTYPE_F64, -1, 1, 113);
  zt_tensor *w = zt_test_rand_leaf(2, sw, ZT_DTYPE_F64, -1, 1, 114);
  zt_tensor *bias = zt_test_rand_leaf(1, sbias, ZT_DTYPE_F64, -1, 1, 115);
  mm_ud nn = {false, false}, nt = {false, true}, tn = {true, false};
  check_f32_vs_f64(f_matmul, 2, (zt_tensor *[]){a, b}, &nn);   /* folded */
  check_f32_vs_f64(f_matmul, 2, (zt_tensor *[]){a, bt}, &nt);  /* batched */
  check_f32_vs_f64(f_matmul, 2, (zt_tensor *[]){at, b}, &tn);  /* shared b, transposed a */
  check_f32_vs_f64(f_linear, 3, (zt_tensor *[]){a, w, bias}, NULL);
  zt_tensor_free(a);
  zt_tensor_free(at);
  zt_tensor_free(b);
  zt_tensor_free(bt);
  zt_tensor_free(w);
  zt_tensor_free(bias);
}

/* Empty dims: K == 0 gives zeros; an empty batch gives an empty output and zero grads for
 * an operand that broadcasts over it. */
static void test_empty_sizes(void) {
  int64_t sa[] = {3, 0}, sb[] = {0, 4};
  zt_tensor *a = zt_test_rand_leaf(2, sa, ZT_DTYPE_F64, -1, 1, 120);
  zt_tensor *b = zt_test_rand_leaf(2, sb, ZT_DTYPE_F64, -1, 1, 121);
  zt_tensor *y = NULL;
  ZT_CHECK_OK(zt_matmul(a, b, false, false, &y));
  if (y) {
    ZT_CHECK(y->shape[0] == 3 && y->shape[1] == 4);
    for (int64_t i = 0; i < 12; i++) ZT_CHECK(zt_tensor_get(y, i) == 0.0);
  }
  zt_tensor_free(y);
  zt_tensor_free(a);
  zt_tensor_free(b);
  int64_t sa2[] = {0, 3, 4}, sb2[] = {1, 4, 2};
  a = zt_test_rand_leaf(3, sa2, ZT_DTYPE_F64, -1, 1, 122);
  b = zt_test_rand_leaf(3, sb2, ZT_DTYPE_F64, -1, 1, 123);
  y = NULL;
  ZT_CHECK_OK(zt_matmul(a, b, false, false, &y));
  if (y) {
    ZT_CHECK(y->ndim == 3 && y->shape[0] == 0 && y->shape[1] == 3 && y->shape[2] == 2);
    ZT_CHECK_OK(backward_ones(y));
    ZT_CHECK(b->grad && zt_tensor_numel(b->grad) == 8);
    if (b->grad)
      for (int64_t i = 0; i < 8; i++) ZT_CHECK(zt_tensor_get(b->grad, i) == 0.0);
  }
  zt_tensor_free(y);
  zt_tensor_free(a);
  zt_tensor_free(b);
}

static void test_errors(void) {
  int64_t s234[] = {2, 3, 4}, s56[] = {5, 6}, s3[] = {3}, s345[] = {3, 4, 5}, s45[] = {4, 5}, s5[] = {5};
  zt_tensor *a = zt_test_rand(3, s234, ZT_DTYPE_F64, -1, 1, 1);
  zt_tensor *b = zt_test_rand(2, s56, ZT_DTYPE_F64, -1, 1, 2);
  zt_tensor *v = zt_test_rand(1, s3, ZT_DTYPE_F64, -1, 1, 3);
  zt_tensor *c = zt_test_rand(3, s345, ZT_DTYPE_F64, -1, 1, 4);
  zt_tensor *w = zt_test_rand(2, s45, ZT_DTYPE_F64, -1, 1, 5);
  zt_tensor *w32 = zt_test_rand(2, s45, ZT_DTYPE_F32, -1, 1, 6);
  zt_tensor *bias = zt_test_rand(1, s5, ZT_DTYPE_F64, -1, 1, 7);
  zt_tensor *ii = NULL, *y = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(2, s45, ZT_DTYPE_I32, ZT_CPU, &ii));
  /* matmul */
  ZT_CHECK_ERR(zt_matmul(a, b, false, false, &y), ZT_STATUS_SHAPE, "a (2, 3, 4) and b (5, 6) do not fit");
  ZT_CHECK_ERR(zt_matmul(a, b, false, false, &y), ZT_STATUS_SHAPE, "K = 4 from a, 5 from b");
  ZT_CHECK_ERR(zt_matmul(a, b, true, true, &y), ZT_STATUS_SHAPE, "(2, 3, 4) (transposed) and b (5, 6) (transposed)");
  ZT_CHECK_ERR(zt_matmul(a, c, false, false, &y), ZT_STATUS_SHAPE,
               "a (2, 3, 4) and b (3, 4, 5): batch dims cannot be broadcast");
  ZT_CHECK_ERR(zt_matmul(v, b, false, false, &y), ZT_STATUS_SHAPE, "a (3,) and b (5, 6): both need at least 2 dims");
  ZT_CHECK_ERR(zt_matmul(a, w32, false, false, &y), ZT_STATUS_DTYPE, "different dtypes (f64 and f32)");
  ZT_CHECK_ERR(zt_matmul(ii, w, false, false, &y), ZT_STATUS_DTYPE, "matmul: input a has dtype i32");
  ZT_CHECK_ERR(zt_matmul(NULL, w, false, false, &y), ZT_STATUS_INVALID_ARG, "op 'matmul'");
  /* linear: x (2,3,4), W (4,5) wrong way round */
  ZT_CHECK_ERR(zt_linear(a, w, NULL, &y), ZT_STATUS_SHAPE, "x (2, 3, 4) and weight (4, 5) do not fit");
  ZT_CHECK_ERR(zt_linear(a, c, NULL, &y), ZT_STATUS_SHAPE, "weight (3, 4, 5)");
  zt_tensor *w54 = zt_test_rand(2, (int64_t[]){5, 4}, ZT_DTYPE_F64, -1, 1, 8);
  zt_tensor *w64 = zt_test_rand(2, (int64_t[]){6, 4}, ZT_DTYPE_F64, -1, 1, 9);
  ZT_CHECK_OK(zt_linear(a, w54, bias, &y));
  zt_tensor_free(y);
  y = NULL;
  ZT_CHECK_ERR(zt_linear(a, w64, bias, &y), ZT_STATUS_SHAPE, "bias (5,) does not fit weight (6, 4)");
  ZT_CHECK_ERR(zt_linear(a, w32, NULL, &y), ZT_STATUS_DTYPE, "different dtypes");
  ZT_CHECK_ERR(zt_linear(NULL, w54, NULL, &y), ZT_STATUS_INVALID_ARG, "input x is NULL");
  ZT_CHECK(y == NULL);
  zt_tensor_free(w54);
  zt_tensor_free(w64);
  zt_tensor_free(a);
  zt_tensor_free(b);
  zt_tensor_free(v);
  zt_tensor_free(c);
  zt_tensor_free(w);
  zt_tensor_free(w32);
  zt_tensor_free(bias);
  zt_tensor_free(ii);
}

int main(void) {
  ZT_RUN(test_matmul_2d_all_transposes);
  ZT_RUN(test_matmul_batched_all_transposes);
  ZT_RUN(test_matmul_shared_2d_b);
  ZT_RUN(test_matmul_batch_broadcast);
  ZT_RUN(test_matmul_one_input_requires_grad);
  ZT_RUN(test_linear_gradcheck);
  ZT_RUN(test_linear_frozen_weights);
  ZT_RUN(test_linear_partial_grad_skips_weight_gemm);
  ZT_RUN(test_noncontiguous_saved_tensors);
  ZT_RUN(test_f32_matches_f64);
  ZT_RUN(test_empty_sizes);
  ZT_RUN(test_errors);
  return zt_test_finish();
}
