/* linear_io and the fused chunked lm_head_cross_entropy: forward against naive loops /
 * the unfused matmul + cross_entropy (values and grads, f32 and f64), finite-difference
 * gradchecks in f64 (one chunk and many, ignored targets, frozen inputs), saved-tensor
 * counts for frozen inputs, retained graphs, peak memory far below N x V, and errors. */
#include <stdio.h>
#include <stdlib.h>

#include "core/status_internal.h"
#include "ops/cpu/lm_head.h"
#include "zt_test.h"

static zt_status f_linear_io(zt_tensor *const *in, zt_tensor **out, void *ud) {
  (void)ud;
  return zt_linear_io(in[0], in[1], in[2], out);
}

/* ------------------------------------------------------------------ linear_io */

static void test_linear_io_forward_naive(void) {
  int64_t sx[] = {2, 3, 4}, sw[] = {4, 5}, sb[] = {5};
  zt_tensor *x = zt_test_rand(3, sx, ZT_DTYPE_F64, -1, 1, 1), *w = zt_test_rand(2, sw, ZT_DTYPE_F64, -1, 1, 2);
  zt_tensor *b = zt_test_rand(1, sb, ZT_DTYPE_F64, -1, 1, 3), *y = NULL;
  ZT_CHECK_OK(zt_linear_io(x, w, b, &y));
  if (y) {
    ZT_CHECK(y->ndim == 3 && y->shape[0] == 2 && y->shape[1] == 3 && y->shape[2] == 5);
    double worst = 0;
    for (int r = 0; r < 6; r++)
      for (int j = 0; j < 5; j++) {
        double acc = zt_tensor_get(b, j);
        for (int k = 0; k < 4; k++) acc += zt_tensor_get(x, r * 4 + k) * zt_tensor_get(w, k * 5 + j);
        worst = fmax(worst, fabs(acc - zt_tensor_get(y, r * 5 + j)));
      }
    ZT_CHECK(worst < 1e-12);
  }
  zt_tensor_free(y);
  zt_tensor_free(x);
  zt_tensor_free(w);
  zt_tensor_free(b);
}

static void test_linear_io_gradcheck(void) {
  int64_t sx[] = {2, 3, 4}, sw[] = {4, 5}, sb[] = {5};
  zt_tensor *x = zt_test_rand_leaf(3, sx, ZT_DTYPE_F64, -1, 1, 4), *w = zt_test_rand_leaf(2, sw, ZT_DTYPE_F64, -1, 1, 5);
  zt_tensor *b = zt_test_rand_leaf(1, sb, ZT_DTYPE_F64, -1, 1, 6);
  ZT_GRADCHECK(f_linear_io, 3, ((zt_tensor *[]){x, w, b}), NULL, NULL);
  /* no bias, 2-D x */
  int64_t sx2[] = {3, 4};
  zt_tensor *x2 = zt_test_rand_leaf(2, sx2, ZT_DTYPE_F64, -1, 1, 7);
  ZT_GRADCHECK(f_linear_io, 3, ((zt_tensor *[]){x2, w, NULL}), NULL, NULL);
  zt_tensor_free(x);
  zt_tensor_free(x2);
  zt_tensor_free(w);
  zt_tensor_free(b);
}

/* Frozen inputs: only what the needed grads read is saved, and those grads still check. */
static void test_linear_io_partial_grads(void) {
  int64_t sx[] = {3, 4}, sw[] = {4, 2}, sb[] = {2};
  zt_tensor *x = zt_test_rand_leaf(2, sx, ZT_DTYPE_F64, -1, 1, 8), *w = zt_test_rand(2, sw, ZT_DTYPE_F64, -1, 1, 9);
  zt_tensor *b = zt_test_rand(1, sb, ZT_DTYPE_F64, -1, 1, 10), *y = NULL;
  ZT_GRADCHECK(f_linear_io, 3, ((zt_tensor *[]){x, w, b}), NULL, NULL);
  ZT_CHECK_OK(zt_linear_io(x, w, b, &y));
  if (y) ZT_CHECK(zt_node_n_saved(zt_tensor_grad_fn(y)) == 1); /* W only: dx reads it */
  zt_tensor_free(y);
  y = NULL;
  /* only the bias trains: nothing saved */
  ZT_CHECK_OK(zt_tensor_set_requires_grad(x, false));
  ZT_CHECK_OK(zt_tensor_set_requires_grad(b, true));
  ZT_CHECK_OK(zt_linear_io(x, w, b, &y));
  if (y) ZT_CHECK(zt_node_n_saved(zt_tensor_grad_fn(y)) == 0);
  ZT_GRADCHECK(f_linear_io, 3, ((zt_tensor *[]){x, w, b}), NULL, NULL);
  zt_tensor_free(y);
  y = NULL;
  /* only the weight trains: x saved */
  ZT_CHECK_OK(zt_tensor_set_requires_grad(b, false));
  ZT_CHECK_OK(zt_tensor_set_requires_grad(w, true));
  ZT_CHECK_OK(zt_linear_io(x, w, b, &y));
  if (y) ZT_CHECK(zt_node_n_saved(zt_tensor_grad_fn(y)) == 1);
  ZT_GRADCHECK(f_linear_io, 3, ((zt_tensor *[]){x, w, b}), NULL, NULL);
  zt_tensor_free(y);
  zt_tensor_free(x);
  zt_tensor_free(w);
  zt_tensor_free(b);
}

/* linear_io(x, W, b) == linear(x, W^T, b) in f32 (the same GEMM up to layout). */
static void test_linear_io_matches_linear_f32(void) {
  int64_t sx[] = {5, 7}, sw[] = {7, 6}, sb[] = {6};
  zt_tensor *x = zt_test_rand(2, sx, ZT_DTYPE_F32, -1, 1, 11), *w = zt_test_rand(2, sw, ZT_DTYPE_F32, -1, 1, 12);
  zt_tensor *b = zt_test_rand(1, sb, ZT_DTYPE_F32, -1, 1, 13), *wt = NULL, *wtc = NULL, *y1 = NULL, *y2 = NULL;
  ZT_CHECK_OK(zt_transpose(w, 0, 1, &wt));
  ZT_CHECK_OK(zt_contiguous(wt, &wtc));
  ZT_CHECK_OK(zt_linear_io(x, w, b, &y1));
  ZT_CHECK_OK(zt_linear(x, wtc, b, &y2));
  if (y1 && y2) ZT_CHECK(zt_test_max_abs_diff(y1, y2) < 1e-5);
  zt_tensor *ts[] = {x, w, b, wt, wtc, y1, y2};
  for (int i = 0; i < 7; i++) zt_tensor_free(ts[i]);
}

static void test_linear_io_errors(void) {
  int64_t sx[] = {3, 4}, sw[] = {5, 2}, sb[] = {3};
  zt_tensor *x = zt_test_rand(2, sx, ZT_DTYPE_F64, -1, 1, 1), *w = zt_test_rand(2, sw, ZT_DTYPE_F64, -1, 1, 2);
  zt_tensor *y = NULL;
  ZT_CHECK_ERR(zt_linear_io(x, w, NULL, &y), ZT_STATUS_SHAPE, "weight (in, out) with the same in");
  int64_t sw2[] = {4, 2};
  zt_tensor *w2 = zt_test_rand(2, sw2, ZT_DTYPE_F64, -1, 1, 2), *b = zt_test_rand(1, sb, ZT_DTYPE_F64, -1, 1, 3);
  ZT_CHECK_ERR(zt_linear_io(x, w2, b, &y), ZT_STATUS_SHAPE, "bias must be (2,)");
  zt_tensor *w32 = zt_test_rand(2, sw2, ZT_DTYPE_F32, -1, 1, 2);
  ZT_CHECK_ERR(zt_linear_io(x, w32, NULL, &y), ZT_STATUS_DTYPE, "different dtypes");
  ZT_CHECK_ERR(zt_linear_io(NULL, w2, NULL, &y), ZT_STATUS_INVALID_ARG, "x is NULL");
  zt_tensor_free(x);
  zt_tensor_free(w);
  zt_tensor_free(w2);
  zt_tensor_free(w32);
  zt_tensor_free(b);
}

/* ------------------------------------------------------------------ lm_head_cross_entropy */

typedef struct lmh_ud {
  zt_tensor *targets;
  int64_t ignore;
} lmh_ud;

static zt_status f_lmh(zt_tensor *const *in, zt_tensor **out, void *ud) {
  lmh_ud *u = ud;
  return zt_lm_head_cross_entropy(in[0], in[1], u->targets, u->ignore, out);
}

/* Unfused reference: cross_entropy(matmul(x, W^T)). */
static zt_status f_unfused(zt_tensor *const *in, zt_tensor **out, void *ud) {
  lmh_ud *u = ud;
  zt_tensor *logits = NULL;
  ZT_TRY(zt_matmul(in[0], in[1], false, true, &logits));
  zt_status s = zt_cross_entropy(logits, u->targets, u->ignore, out);
  zt_tensor_free(logits);
  return s;
}

static zt_tensor *make_targets(int64_t N, int64_t V, uint64_t seed, int64_t ignore, int every) {
  int32_t *v = malloc(sizeof *v * (size_t)N);
  zt_rng_state st = {seed, 0};
  for (int64_t i = 0; i < N; i++) {
    v[i] = (int32_t)(zt_rng_uniform_at(st, (uint64_t)i) * (double)V);
    if (every && i % every == every - 1) v[i] = (int32_t)ignore;
  }
  zt_tensor *t = NULL;
  ZT_CHECK_OK(zt_tensor_from_data(1, (int64_t[]){N}, ZT_DTYPE_I32, v, &t));
  free(v);
  return t;
}

static void lmh_gradcheck_case(int64_t N, int64_t C, int64_t V, int64_t chunk, bool gx, bool gw, int every,
                               uint64_t seed) {
  zt__lm_head_set_chunk_rows(chunk);
  zt_tensor *x = zt_test_rand(2, (int64_t[]){N, C}, ZT_DTYPE_F64, -1, 1, seed);
  zt_tensor *w = zt_test_rand(2, (int64_t[]){V, C}, ZT_DTYPE_F64, -1, 1, seed + 1);
  if (gx) ZT_CHECK_OK(zt_tensor_set_requires_grad(x, true));
  if (gw) ZT_CHECK_OK(zt_tensor_set_requires_grad(w, true));
  lmh_ud u = {make_targets(N, V, seed + 2, -1, every), -1};
  if (!ZT_GRADCHECK(f_lmh, 2, ((zt_tensor *[]){x, w}), &u, NULL))
    fprintf(stderr, "  (N %lld C %lld V %lld chunk %lld gx %d gw %d)\n", (long long)N, (long long)C, (long long)V,
            (long long)chunk, gx, gw);
  zt__lm_head_set_chunk_rows(0);
  zt_tensor_free(x);
  zt_tensor_free(w);
  zt_tensor_free(u.targets);
}

static void test_lm_head_gradcheck(void) {
  lmh_gradcheck_case(6, 4, 7, 0, true, true, 0, 100);  /* one chunk */
  lmh_gradcheck_case(11, 3, 5, 4, true, true, 0, 110); /* three chunks, last partial */
  lmh_gradcheck_case(9, 4, 6, 2, true, true, 3, 120);  /* ignored targets */
  lmh_gradcheck_case(7, 3, 5, 3, true, false, 0, 130); /* x only */
  lmh_gradcheck_case(7, 3, 5, 3, false, true, 2, 140); /* W only */
}

/* Which grads forward computes follows the inputs' requires_grad: only those are saved. */
static void test_lm_head_saves_only_needed(void) {
  zt_tensor *x = zt_test_rand(2, (int64_t[]){5, 3}, ZT_DTYPE_F64, -1, 1, 1);
  zt_tensor *w = zt_test_rand_leaf(2, (int64_t[]){4, 3}, ZT_DTYPE_F64, -1, 1, 2);
  zt_tensor *t = make_targets(5, 4, 3, -1, 0), *y = NULL;
  ZT_CHECK_OK(zt_lm_head_cross_entropy(x, w, t, -1, &y));
  if (y) ZT_CHECK(zt_node_n_saved(zt_tensor_grad_fn(y)) == 1);
  zt_tensor_free(y);
  y = NULL;
  bool prev = zt_set_grad_enabled(false);
  ZT_CHECK_OK(zt_lm_head_cross_entropy(x, w, t, -1, &y));
  if (y) ZT_CHECK(!y->requires_grad);
  zt_set_grad_enabled(prev);
  zt_tensor_free(y);
  zt_tensor_free(x);
  zt_tensor_free(w);
  zt_tensor_free(t);
}

/* Values and grads equal the unfused path (f64 tightly, f32 within rounding), with the
 * grads obtained by backward from the loss (the g == 1 alias path). */
static void compare_with_unfused(zt_dtype dt, int64_t N, int64_t C, int64_t V, int64_t chunk, double tol) {
  zt__lm_head_set_chunk_rows(chunk);
  zt_tensor *x[2], *w[2], *loss[2] = {NULL, NULL};
  lmh_ud u = {make_targets(N, V, 77, -100, 5), -100};
  for (int k = 0; k < 2; k++) {
    x[k] = zt_test_rand_leaf(2, (int64_t[]){N, C}, dt, -2, 2, 70);
    w[k] = zt_test_rand_leaf(2, (int64_t[]){V, C}, dt, -1, 1, 71);
    zt_status s = (k ? f_unfused : f_lmh)((zt_tensor *[]){x[k], w[k]}, &loss[k], &u);
    ZT_CHECK_OK(s);
    if (!s) ZT_CHECK_OK(zt_backward(1, &loss[k], NULL, false));
  }
  if (loss[0] && loss[1]) {
    ZT_CHECK_NEAR(zt_tensor_get(loss[0], 0), zt_tensor_get(loss[1], 0), tol);
    ZT_CHECK(x[0]->grad && x[1]->grad && w[0]->grad && w[1]->grad);
    if (x[0]->grad && x[1]->grad) ZT_CHECK(zt_test_max_abs_diff(x[0]->grad, x[1]->grad) < tol);
    if (w[0]->grad && w[1]->grad) ZT_CHECK(zt_test_max_abs_diff(w[0]->grad, w[1]->grad) < tol);
  }
  for (int k = 0; k < 2; k++) {
    zt_tensor_free(loss[k]);
    zt_tensor_free(x[k]);
    zt_tensor_free(w[k]);
  }
  zt_tensor_free(u.targets);
  zt__lm_head_set_chunk_rows(0);
}

static void test_lm_head_matches_unfused(void) {
  compare_with_unfused(ZT_DTYPE_F64, 37, 8, 50, 0, 1e-12);
  compare_with_unfused(ZT_DTYPE_F64, 37, 8, 50, 8, 1e-12);
  compare_with_unfused(ZT_DTYPE_F32, 300, 32, 1000, 0, 2e-5);
  compare_with_unfused(ZT_DTYPE_F32, 300, 32, 1000, 64, 2e-5);
  /* dW's GEMM in blocks of 4096 rows: two blocks, over one chunk and over several (+=) */
  compare_with_unfused(ZT_DTYPE_F64, 37, 8, 5000, 0, 1e-12);
  compare_with_unfused(ZT_DTYPE_F64, 37, 8, 5000, 8, 1e-12);
}

/* A retained graph with a non-unit incoming grad: two backwards give exactly twice the
 * grad (the saved grads are never scaled in place). */
static void test_lm_head_retain_graph_scaled(void) {
  zt_tensor *x = zt_test_rand_leaf(2, (int64_t[]){6, 3}, ZT_DTYPE_F64, -1, 1, 1);
  zt_tensor *w = zt_test_rand_leaf(2, (int64_t[]){5, 3}, ZT_DTYPE_F64, -1, 1, 2);
  zt_tensor *t = make_targets(6, 5, 3, -1, 0), *y = NULL, *g = NULL, *once = NULL;
  ZT_CHECK_OK(zt_lm_head_cross_entropy(x, w, t, -1, &y));
  ZT_CHECK_OK(zt_tensor_full(0, NULL, ZT_DTYPE_F64, ZT_CPU, 0.5, &g));
  if (y && g) {
    ZT_CHECK_OK(zt_backward(1, &y, &g, true));
    if (w->grad) ZT_CHECK_OK(zt_tensor_clone_data(w->grad, ZT_MEM_TAG_TEMP, &once));
    ZT_CHECK_OK(zt_backward(1, &y, &g, false));
    if (once && w->grad)
      for (int64_t i = 0; i < 15; i++) ZT_CHECK_NEAR(zt_tensor_get(w->grad, i), 2 * zt_tensor_get(once, i), 1e-15);
  }
  zt_tensor *ts[] = {x, w, t, y, g, once};
  for (int i = 0; i < 6; i++) zt_tensor_free(ts[i]);
}

static void test_lm_head_all_ignored(void) {
  zt_tensor *x = zt_test_rand_leaf(2, (int64_t[]){4, 3}, ZT_DTYPE_F32, -1, 1, 1);
  zt_tensor *w = zt_test_rand_leaf(2, (int64_t[]){5, 3}, ZT_DTYPE_F32, -1, 1, 2);
  zt_tensor *t = NULL, *y = NULL;
  ZT_CHECK_OK(zt_tensor_full(1, (int64_t[]){4}, ZT_DTYPE_I32, ZT_CPU, -1, &t));
  ZT_CHECK_OK(zt_lm_head_cross_entropy(x, w, t, -1, &y));
  if (y) {
    ZT_CHECK(zt_tensor_get(y, 0) == 0.0);
    ZT_CHECK_OK(zt_backward(1, &y, NULL, false));
    if (x->grad && w->grad) {
      for (int64_t i = 0; i < 12; i++) ZT_CHECK(zt_tensor_get(x->grad, i) == 0.0);
      for (int64_t i = 0; i < 15; i++) ZT_CHECK(zt_tensor_get(w->grad, i) == 0.0);
    }
  }
  /* no rows at all */
  zt_tensor *x0 = zt_test_rand_leaf(2, (int64_t[]){0, 3}, ZT_DTYPE_F32, -1, 1, 1), *t0 = NULL, *y0 = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(1, (int64_t[]){0}, ZT_DTYPE_I32, ZT_CPU, &t0));
  ZT_CHECK_OK(zt_lm_head_cross_entropy(x0, w, t0, -1, &y0));
  if (y0) {
    ZT_CHECK(zt_tensor_get(y0, 0) == 0.0);
    zt_tensor_free(w->grad);
    w->grad = NULL;
    ZT_CHECK_OK(zt_backward(1, &y0, NULL, false));
    if (w->grad)
      for (int64_t i = 0; i < 15; i++) ZT_CHECK(zt_tensor_get(w->grad, i) == 0.0);
  }
  zt_tensor *ts[] = {x, w, t, y, x0, t0, y0};
  for (int i = 0; i < 7; i++) zt_tensor_free(ts[i]);
}

/* N x V dominates: forward with grads never holds anything near N x V floats. */
static void test_lm_head_memory(void) {
  int64_t N = 4096, C = 16, V = 4096;
  zt_tensor *x = zt_test_rand_leaf(2, (int64_t[]){N, C}, ZT_DTYPE_F32, -1, 1, 1);
  zt_tensor *w = zt_test_rand_leaf(2, (int64_t[]){V, C}, ZT_DTYPE_F32, -1, 1, 2);
  zt_tensor *t = make_targets(N, V, 3, -1, 0), *y = NULL;
  zt_mem_stats before, after;
  zt_mem_stats_get(ZT_CPU, &before);
  zt_mem_reset_peaks();
  ZT_CHECK_OK(zt_lm_head_cross_entropy(x, w, t, -1, &y));
  zt_mem_stats_get(ZT_CPU, &after);
  int64_t nv = N * V * 4;
  int64_t act_tmp = after.peak[ZT_MEM_TAG_ACTIVATION] + after.peak[ZT_MEM_TAG_TEMP] -
                    before.current[ZT_MEM_TAG_ACTIVATION] - before.current[ZT_MEM_TAG_TEMP];
  ZT_CHECK(act_tmp < nv / 4);
  ZT_CHECK(after.peak_total - before.current_total < nv / 4);
  if (y) ZT_CHECK_OK(zt_backward(1, &y, NULL, false));
  zt_mem_stats_get(ZT_CPU, &after);
  ZT_CHECK(after.peak_total - before.current_total < nv / 4);
  zt_tensor_free(y);
  zt_tensor_free(x);
  zt_tensor_free(w);
  zt_tensor_free(t);
}

static void test_lm_head_errors(void) {
  zt_tensor *x = zt_test_rand(2, (int64_t[]){4, 3}, ZT_DTYPE_F32, -1, 1, 1);
  zt_tensor *w = zt_test_rand(2, (int64_t[]){5, 3}, ZT_DTYPE_F32, -1, 1, 2);
  zt_tensor *w2 = zt_test_rand(2, (int64_t[]){5, 2}, ZT_DTYPE_F32, -1, 1, 2);
  zt_tensor *w64 = zt_test_rand(2, (int64_t[]){5, 3}, ZT_DTYPE_F64, -1, 1, 2);
  zt_tensor *x3 = zt_test_rand(3, (int64_t[]){2, 2, 3}, ZT_DTYPE_F32, -1, 1, 1);
  zt_tensor *t = make_targets(4, 5, 3, -1, 0), *t3 = make_targets(3, 5, 3, -1, 0), *y = NULL;
  zt_tensor *tf = zt_test_rand(1, (int64_t[]){4}, ZT_DTYPE_F32, 0, 1, 1);
  ZT_CHECK_ERR(zt_lm_head_cross_entropy(x, w2, t, -1, &y), ZT_STATUS_SHAPE, "with the same C");
  ZT_CHECK_ERR(zt_lm_head_cross_entropy(x3, w, t, -1, &y), ZT_STATUS_SHAPE, "reshape (B, T, C)");
  ZT_CHECK_ERR(zt_lm_head_cross_entropy(x, w, t3, -1, &y), ZT_STATUS_SHAPE, "targets of shape (4,)");
  ZT_CHECK_ERR(zt_lm_head_cross_entropy(x, w64, t, -1, &y), ZT_STATUS_DTYPE, "different dtypes");
  ZT_CHECK_ERR(zt_lm_head_cross_entropy(x, w, tf, -1, &y), ZT_STATUS_DTYPE, "i32 or i64");
  ZT_CHECK_ERR(zt_lm_head_cross_entropy(x, w, NULL, -1, &y), ZT_STATUS_INVALID_ARG, "targets is NULL");
  ZT_CHECK_OK(zt_tensor_set(t, 2, 5));
  ZT_CHECK_ERR(zt_lm_head_cross_entropy(x, w, t, -1, &y), ZT_STATUS_INVALID_ARG,
               "target at position 2 is 5, outside [0, 5)");
  ZT_CHECK_OK(zt_tensor_set(t, 2, -1)); /* ignored: fine */
  ZT_CHECK_OK(zt_lm_head_cross_entropy(x, w, t, -1, &y));
  zt_tensor *ts[] = {x, w, w2, w64, x3, t, t3, tf, y};
  for (int i = 0; i < 9; i++) zt_tensor_free(ts[i]);
}

/* GPT-2's vocabulary: the RAM the step takes beyond the accounting (OpenBLAS's packing buffers,
 * resident for the process's life) stays small: 49.9 MiB when dW's GEMM ran over all 50257 rows
 * at once, about 4 MiB in blocks. RSS is the process's own only without a sanitizer. Runs first,
 * before any other GEMM this large. */
static void test_lm_head_blas_buffer(void) {
#if defined(__SANITIZE_ADDRESS__)
  printf("SKIP test_lm_head_blas_buffer: ASan's shadow memory and quarantine are in the RSS\n");
#else
  int64_t N = 512, C = 64, V = 50257;
  int threads = zt_get_num_threads();
  zt_set_num_threads(2); /* one thread packs differently at C 64 (threads at C >= 384, slower) */
  int64_t cache = zt_mem_cache_limit();
  zt_mem_set_cache_limit(0); /* freed blocks go back to the kernel: RSS = the accounting + the rest */
  zt_tensor *x = zt_test_rand_leaf(2, (int64_t[]){N, C}, ZT_DTYPE_F32, -1, 1, 1);
  zt_tensor *w = zt_test_rand_leaf(2, (int64_t[]){V, C}, ZT_DTYPE_F32, -1, 1, 2);
  zt_tensor *t = make_targets(N, V, 3, -1, 0), *y = NULL;
  zt_mem_stats a0, a1;
  zt_mem_stats_get(ZT_CPU, &a0);
  int64_t rss0 = zt_mem_current_rss();
  ZT_CHECK_OK(zt_lm_head_cross_entropy(x, w, t, -1, &y)); /* dx and dW made here */
  zt_mem_stats_get(ZT_CPU, &a1);
  int64_t rss1 = zt_mem_current_rss();
  int64_t beyond = (rss1 - rss0) - (a1.current_total - a0.current_total);
  ZT_CHECK(rss0 > 0 && rss1 > 0);
  ZT_CHECK(beyond < (int64_t)16 << 20);
  if (beyond >= (int64_t)16 << 20) fprintf(stderr, "  %.1f MiB resident beyond the accounting\n", beyond / 1048576.0);
  zt_tensor *ts[] = {x, w, t, y};
  for (int i = 0; i < 4; i++) zt_tensor_free(ts[i]);
  zt_mem_set_cache_limit(cache);
  zt_set_num_threads(threads);
#endif
}

int main(void) {
  ZT_RUN(test_lm_head_blas_buffer);
  ZT_RUN(test_linear_io_forward_naive);
  ZT_RUN(test_linear_io_gradcheck);
  ZT_RUN(test_linear_io_partial_grads);
  ZT_RUN(test_linear_io_matches_linear_f32);
  ZT_RUN(test_linear_io_errors);
  ZT_RUN(test_lm_head_gradcheck);
  ZT_RUN(test_lm_head_saves_only_needed);
  ZT_RUN(test_lm_head_matches_unfused);
  ZT_RUN(test_lm_head_retain_graph_scaled);
  ZT_RUN(test_lm_head_all_ignored);
  ZT_RUN(test_lm_head_memory);
  ZT_RUN(test_lm_head_errors);
  return zt_test_finish();
}
