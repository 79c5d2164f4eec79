/* Tests of zt_causal_attention (and its grouped-query form, against K/V repeated per head): gradient checks in f64, forward and backward against a
 * naive reference that materialises the T x T matrix (f32 and f64, block-size edge
 * cases), memory accounting (only qkv, out and lse are kept), determinism, errors. */
#include <stdlib.h>

#include "core/status_internal.h"
#include "zt_test.h"

/* ------------------------------------------------ naive reference (in double) */
/* y (B,T,C) and, when dy is given, dqkv (B,T,3C), from qkv (B,T,3C): per head, the full
 * T x T score matrix. */
static void ref_attention(const zt_tensor *qkv, int nh, const zt_tensor *dy, double *y, double *dqkv) {
  int64_t B = qkv->shape[0], T = qkv->shape[1], C = qkv->shape[2] / 3, hs = C / nh, C3 = 3 * C;
  double scale = 1.0 / sqrt((double)hs);
  double *x = malloc(sizeof(double) * (size_t)(B * T * C3));
  double *g = dy ? malloc(sizeof(double) * (size_t)(B * T * C)) : NULL;
  double *P = malloc(sizeof(double) * (size_t)(T * T)), *dS = malloc(sizeof(double) * (size_t)(T * T));
  for (int64_t i = 0; i < B * T * C3; i++) x[i] = zt_tensor_get(qkv, i);
  if (dy)
    for (int64_t i = 0; i < B * T * C; i++) g[i] = zt_tensor_get(dy, i);
  if (dqkv) memset(dqkv, 0, sizeof(double) * (size_t)(B * T * C3));
#define Q(b, t, d) x[((b) * T + (t)) * C3 + h * hs + (d)]
#define K(b, t, d) x[((b) * T + (t)) * C3 + C + h * hs + (d)]
#define V(b, t, d) x[((b) * T + (t)) * C3 + 2 * C + h * hs + (d)]
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < nh; h++) {
      for (int64_t i = 0; i < T; i++) {
        double m = -INFINITY, l = 0;
        for (int64_t j = 0; j < T; j++) {
          double s = -INFINITY;
          if (j <= i) {
            s = 0;
            for (int64_t d = 0; d < hs; d++) s += Q(b, i, d) * K(b, j, d);
            s *= scale;
          }
          P[i * T + j] = s;
          if (s > m) m = s;
        }
        for (int64_t j = 0; j < T; j++) l += P[i * T + j] = exp(P[i * T + j] - m);
        for (int64_t j = 0; j < T; j++) P[i * T + j] /= l;
        for (int64_t d = 0; d < hs; d++) {
          double acc = 0;
          for (int64_t j = 0; j < T; j++) acc += P[i * T + j] * V(b, j, d);
          y[(b * T + i) * C + h * hs + d] = acc;
        }
      }
      if (!dy) continue;
      const double *G = g + b * T * C + h * hs;
      double *dq = dqkv + b * T * C3 + h * hs, *dk = dq + C, *dv = dk + C;
      for (int64_t i = 0; i < T; i++) {
        /* dP_ij = dy_i . v_j;  dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik) */
        double rs = 0;
        for (int64_t j = 0; j < T; j++) {
          double dp = 0;
          for (int64_t d = 0; d < hs; d++) dp += G[i * C + d] * V(b, j, d);
          dS[i * T + j] = dp;
          rs += P[i * T + j] * dp;
        }
        for (int64_t j = 0; j < T; j++) dS[i * T + j] = P[i * T + j] * (dS[i * T + j] - rs);
      }
      for (int64_t i = 0; i < T; i++)
        for (int64_t j = 0; j < T; j++)
          for (int64_t d = 0; d < hs; d++) {
            dv[j * C3 + d] += P[i * T + j] * G[i * C + d];
            dq[i * C3 + d] += scale * dS[i * T + j] * K(b, j, d);
            dk[j * C3 + d] += scale * dS[i * T + j] * Q(b, i, d);
          }
    }
#undef Q
#undef K
#undef V
  free(x);
  free(g);
  free(P);
  free(dS);
}

static double max_rel_err(const zt_tensor *t, const double *ref) {
  double m = 0, scale = 0;
  int64_t n = zt_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(ref[i]));
  for (int64_t i = 0; i < n; i++) {
    double d = fabs(zt_tensor_get(t, i) - ref[i]);
    if (!(d <= m)) m = isnan(d) ? INFINITY : d;
  }
  return m / (scale > 0 ? scale : 1);
}

/* Forward and backward of zt_causal_attention against the reference, tolerance tol
 * relative to the largest reference value. */
static void check_vs_ref(int64_t B, int64_t T, int64_t C, int nh, zt_dtype dt, double tol, uint64_t seed) {
  int64_t s3[] = {B, T, 3 * C}, s1[] = {B, T, C};
  zt_tensor *qkv = zt_test_rand_leaf(3, s3, dt, -2, 2, seed);
  zt_tensor *dy = zt_test_rand(3, s1, dt, -1, 1, seed + 1);
  double *y = malloc(sizeof(double) * (size_t)(B * T * C));
  double *dq = malloc(sizeof(double) * (size_t)(B * T * 3 * C));
  ref_attention(qkv, nh, dy, y, dq);
  zt_tensor *out = NULL;
  ZT_CHECK_OK(zt_causal_attention(qkv, nh, &out));
  if (out) {
    double e = max_rel_err(out, y);
    if (!(e <= tol))
      zt_test_fail(__FILE__, __LINE__, "forward (B=%lld T=%lld C=%lld nh=%d %s): rel err %g > %g", (long long)B,
                   (long long)T, (long long)C, nh, zt_dtype_name(dt), e, tol);
    ZT_CHECK_OK(zt_backward(1, &out, &dy, false));
    ZT_CHECK(qkv->grad != NULL);
    if (qkv->grad) {
      e = max_rel_err(qkv->grad, dq);
      if (!(e <= tol))
        zt_test_fail(__FILE__, __LINE__, "backward (B=%lld T=%lld C=%lld nh=%d %s): rel err %g > %g", (long long)B,
                     (long long)T, (long long)C, nh, zt_dtype_name(dt), e, tol);
    }
  }
  zt_tensor_free(out);
  zt_tensor_free(qkv);
  zt_tensor_free(dy);
  free(y);
  free(dq);
}

static void test_f32_vs_reference(void) {
  /* T around the block sizes (48 / 64 depending on the ISA), T = 1, hs not a multiple of
   * the vector width, n_head = 1. */
  static const int64_t cases[][4] = {
      {1, 1, 8, 2},   {2, 3, 6, 2},    {1, 47, 16, 1}, {1, 48, 16, 1}, {2, 49, 24, 3},  {1, 63, 64, 1},
      {1, 64, 64, 1}, {1, 65, 64, 1},  {2, 97, 40, 2}, {1, 130, 12, 2}, {1, 200, 128, 2}, {3, 17, 130, 2},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    check_vs_ref(cases[k][0], cases[k][1], cases[k][2], (int)cases[k][3], ZT_DTYPE_F32, 5e-6, 100 + k);
}

static void test_f64_vs_reference(void) {
  static const int64_t cases[][4] = {{1, 1, 4, 1}, {2, 9, 12, 3}, {1, 70, 16, 2}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    check_vs_ref(cases[k][0], cases[k][1], cases[k][2], (int)cases[k][3], ZT_DTYPE_F64, 1e-12, 200 + k);
}

/* Large scores: the online softmax must not overflow where a naive exp would. */
static void test_f32_large_scores(void) {
  int64_t B = 1, T = 150, C = 32;
  int64_t s3[] = {B, T, 3 * C};
  zt_tensor *qkv = zt_test_rand(3, s3, ZT_DTYPE_F32, -30, 30, 7), *out = NULL;
  double *y = malloc(sizeof(double) * (size_t)(B * T * C));
  ref_attention(qkv, 2, NULL, y, NULL);
  ZT_CHECK_OK(zt_causal_attention(qkv, 2, &out));
  if (out) ZT_CHECK(max_rel_err(out, y) < 1e-4);
  zt_tensor_free(out);
  zt_tensor_free(qkv);
  free(y);
}

/* ------------------------------------------------ gradient checks (f64) */
static zt_status f_attn(zt_tensor *const *in, zt_tensor **out, void *ud) {
  return zt_causal_attention(in[0], *(int *)ud, out);
}

static void test_gradcheck(void) {
  static const int64_t cases[][4] = {{1, 1, 4, 2}, {2, 5, 6, 2}, {1, 7, 8, 1}, {2, 4, 9, 3}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    int64_t s[] = {cases[k][0], cases[k][1], 3 * cases[k][2]};
    int nh = (int)cases[k][3];
    zt_tensor *qkv = zt_test_rand_leaf(3, s, ZT_DTYPE_F64, -1.5, 1.5, 300 + k);
    ZT_GRADCHECK(f_attn, 1, ((zt_tensor *[]){qkv}), &nh, NULL);
    zt_tensor_free(qkv);
  }
}

/* qkv built from three leaves with zt_cat: grads flow back through the op into each
 * part, including a view input; only q and v require grad. */
static zt_status f_attn_cat(zt_tensor *const *in, zt_tensor **out, void *ud) {
  zt_tensor *qkv = NULL;
  ZT_TRY(zt_cat(3, in, 2, &qkv));
  zt_status s = zt_causal_attention(qkv, *(int *)ud, out);
  zt_tensor_free(qkv);
  return s;
}

static void test_gradcheck_partial(void) {
  int64_t s[] = {2, 6, 4};
  int nh = 2;
  zt_tensor *q = zt_test_rand_leaf(3, s, ZT_DTYPE_F64, -1, 1, 401);
  zt_tensor *k = zt_test_rand(3, s, ZT_DTYPE_F64, -1, 1, 402);
  zt_tensor *v = zt_test_rand_leaf(3, s, ZT_DTYPE_F64, -1, 1, 403);
  ZT_GRADCHECK(f_attn_cat, 3, ((zt_tensor *[]){q, k, v}), &nh, NULL);
  zt_tensor_free(q);
  zt_tensor_free(k);
  zt_tensor_free(v);
}

/* A non-contiguous qkv (a transposed view) gives the same result as its contiguous copy. */
static void test_strided_input(void) {
  int64_t s[] = {2, 12, 5}; /* transposed to (2, 5, 12) = (B, T, 3C) with C = 4 */
  zt_tensor *x = zt_test_rand(3, s, ZT_DTYPE_F32, -1, 1, 11), *xt = NULL, *xc = NULL, *a = NULL, *b = NULL;
  ZT_CHECK_OK(zt_transpose(x, 1, 2, &xt));
  ZT_CHECK_OK(zt_contiguous(xt, &xc));
  ZT_CHECK_OK(zt_causal_attention(xt, 2, &a));
  ZT_CHECK_OK(zt_causal_attention(xc, 2, &b));
  if (a && b) ZT_CHECK(zt_test_bitwise_equal(a, b));
  zt_tensor_free(a);
  zt_tensor_free(b);
  zt_tensor_free(xt);
  zt_tensor_free(xc);
  zt_tensor_free(x);
}

/* ------------------------------------------------ memory: no T x T matrix is kept or made */
static void test_saved_memory(void) {
  const int64_t B = 1, T = 2048, C = 64;
  const int nh = 1;
  int prev_threads = zt_get_num_threads();
  zt_set_num_threads(2); /* backward scratch is per thread */
  int64_t s3[] = {B, T, 3 * C};
  int64_t s1[] = {B, T, C};
  zt_tensor *qkv = zt_test_rand_leaf(3, s3, ZT_DTYPE_F32, -1, 1, 5), *out = NULL;
  zt_tensor *gy = zt_test_rand(3, s1, ZT_DTYPE_F32, -1, 1, 6);
  const int64_t qkv_b = B * T * 3 * C * 4, out_b = B * T * C * 4, lse_b = B * nh * T * 4, tt_b = T * T * 4;
  zt_mem_stats m0, m1, m2;
  zt_mem_stats_get(ZT_CPU, &m0);
  zt_mem_reset_peaks();
  ZT_CHECK_OK(zt_causal_attention(qkv, nh, &out));
  zt_mem_stats_get(ZT_CPU, &m1);
  ZT_CHECK(out != NULL);
  if (out) {
    zt_node *n = zt_tensor_grad_fn(out);
    ZT_CHECK(n != NULL && strcmp(zt_node_name(n), "CausalAttentionBackward") == 0);
    ZT_CHECK(n != NULL && zt_node_n_saved(n) == 3);
    /* live activations: qkv (made before) + out + lse; nothing else, and no TEMP left */
    ZT_CHECK(m1.current[ZT_MEM_TAG_ACTIVATION] - m0.current[ZT_MEM_TAG_ACTIVATION] == out_b + lse_b);
    ZT_CHECK(m0.current[ZT_MEM_TAG_ACTIVATION] >= qkv_b);
    ZT_CHECK(m1.current[ZT_MEM_TAG_TEMP] == m0.current[ZT_MEM_TAG_TEMP]);
    /* forward's peak: out + lse + O(T) per-thread scratch, well below one T x T matrix */
    ZT_CHECK(m1.peak_total - m0.current_total < out_b + lse_b + tt_b / 4);
    zt_mem_reset_peaks();
    ZT_CHECK_OK(zt_backward(1, &out, &gy, false));
    zt_mem_stats_get(ZT_CPU, &m2);
    /* backward's peak above what was live: grads plus O(T) scratch, below half a T x T */
    ZT_CHECK(m2.peak_total - m1.current_total < 2 * qkv_b + out_b + tt_b / 2);
  }
  zt_tensor_free(out);
  zt_tensor_free(qkv);
  zt_tensor_free(gy);
  zt_set_num_threads(prev_threads);
}

/* ------------------------------------------------ determinism and grad mode */
/* 1 vs 2 threads, bitwise. (B, n_head) = (2, 4) splits the forward by head either way;
 * (1, 3) splits it by (head, query block) on 2 threads. */
static void check_deterministic(int64_t B, int64_t T, int64_t C, int nh) {
  int64_t s3[] = {B, T, 3 * C}, s1[] = {B, T, C};
  zt_tensor *gy = zt_test_rand(3, s1, ZT_DTYPE_F32, -1, 1, 21);
  zt_tensor *res[2][2] = {{NULL}};
  int prev = zt_get_num_threads();
  for (int r = 0; r < 2; r++) {
    zt_set_num_threads(r == 0 ? 1 : 2);
    zt_tensor *qkv = zt_test_rand_leaf(3, s3, ZT_DTYPE_F32, -1, 1, 20);
    ZT_CHECK_OK(zt_causal_attention(qkv, nh, &res[r][0]));
    if (res[r][0]) ZT_CHECK_OK(zt_backward(1, &res[r][0], &gy, false));
    res[r][1] = qkv->grad;
    qkv->grad = NULL;
    zt_tensor_free(qkv);
  }
  zt_set_num_threads(prev);
  for (int k = 0; k < 2; k++) {
    ZT_CHECK(res[0][k] && res[1][k]);
    if (res[0][k] && res[1][k]) ZT_CHECK(zt_test_bitwise_equal(res[0][k], res[1][k]));
    zt_tensor_free(res[0][k]);
    zt_tensor_free(res[1][k]);
  }
  zt_tensor_free(gy);
}

static void test_deterministic_across_threads(void) {
  check_deterministic(2, 150, 96, 4);
  check_deterministic(1, 300, 96, 3);
}

static void test_no_grad_mode(void) {
  int64_t s3[] = {1, 10, 12};
  zt_tensor *qkv = zt_test_rand_leaf(3, s3, ZT_DTYPE_F32, -1, 1, 9), *out = NULL;
  zt_mem_stats m0, m1;
  zt_mem_stats_get(ZT_CPU, &m0);
  bool prev = zt_set_grad_enabled(false);
  ZT_CHECK_OK(zt_causal_attention(qkv, 2, &out));
  zt_set_grad_enabled(prev);
  zt_mem_stats_get(ZT_CPU, &m1);
  ZT_CHECK(out && !out->requires_grad && zt_tensor_grad_fn(out) == NULL);
  /* nothing saved: only the output stays */
  ZT_CHECK(m1.current_total - m0.current_total == 10 * 4 * 4);
  zt_tensor_free(out);
  zt_tensor_free(qkv);
}

static void test_empty_batch(void) {
  int64_t s3[] = {0, 5, 12};
  zt_tensor *qkv = NULL, *out = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(3, s3, ZT_DTYPE_F32, ZT_CPU, &qkv));
  ZT_CHECK_OK(zt_causal_attention(qkv, 2, &out));
  ZT_CHECK(out && out->ndim == 3 && out->shape[0] == 0 && out->shape[2] == 4);
  zt_tensor_free(out);
  zt_tensor_free(qkv);
}

/* ------------------------------------------------ errors */
static void test_errors(void) {
  zt_tensor *out = NULL;
  int64_t s2[] = {4, 12}, s3[] = {1, 4, 12}, s3b[] = {1, 4, 10}, s3c[] = {1, 4, 0};
  zt_tensor *a2 = zt_test_rand(2, s2, ZT_DTYPE_F32, -1, 1, 1);
  zt_tensor *a3 = zt_test_rand(3, s3, ZT_DTYPE_F32, -1, 1, 2);
  zt_tensor *bad3 = zt_test_rand(3, s3b, ZT_DTYPE_F32, -1, 1, 3);
  zt_tensor *z3 = NULL, *i3 = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(3, s3c, ZT_DTYPE_F32, ZT_CPU, &z3));
  ZT_CHECK_OK(zt_tensor_zeros(3, s3, ZT_DTYPE_I32, ZT_CPU, &i3));
  ZT_CHECK_ERR(zt_causal_attention(a2, 2, &out), ZT_STATUS_SHAPE, "qkv must be 3-D (B, T, 3C), got shape (4, 12)");
  ZT_CHECK_ERR(zt_causal_attention(bad3, 2, &out), ZT_STATUS_SHAPE, "got 10 (shape (1, 4, 10)), which is not");
  ZT_CHECK_ERR(zt_causal_attention(z3, 2, &out), ZT_STATUS_SHAPE, "not a positive multiple of 3");
  ZT_CHECK_ERR(zt_causal_attention(a3, 3, &out), ZT_STATUS_SHAPE, "C = 4 (qkv's last dim / 3) is not divisible by n_head = 3");
  ZT_CHECK_ERR(zt_causal_attention(a3, 0, &out), ZT_STATUS_INVALID_ARG, "n_head must be positive, got 0");
  ZT_CHECK_ERR(zt_causal_attention(a3, -2, &out), ZT_STATUS_INVALID_ARG, "n_head must be positive, got -2");
  ZT_CHECK_ERR(zt_causal_attention(i3, 2, &out), ZT_STATUS_DTYPE, "qkv has dtype i32");
  ZT_CHECK_ERR(zt_causal_attention(NULL, 2, &out), ZT_STATUS_INVALID_ARG, "qkv is NULL");
  ZT_CHECK_ERR(zt_causal_attention(a3, 2, NULL), ZT_STATUS_INVALID_ARG, "output pointer is NULL");
  ZT_CHECK(out == NULL);
  /* messages name the op */
  ZT_CHECK_ERR(zt_causal_attention(a3, 0, &out), ZT_STATUS_INVALID_ARG, "causal_attention");
  zt_tensor_free(a2);
  zt_tensor_free(a3);
  zt_tensor_free(bad3);
  zt_tensor_free(z3);
  zt_tensor_free(i3);
}

/* ------------------------------------------------ grouped-query attention */
/* qkv_mha (B,T,3 H hs) from a GQA qkv (B,T,(H + 2 Hkv) hs): each kv head repeated for the
 * query heads it serves (what GQA must compute, without making this copy). */
static zt_tensor *expand_kv(const zt_tensor *qkv, int H, int Hkv) {
  int64_t B = qkv->shape[0], T = qkv->shape[1], W = qkv->shape[2], hs = W / (H + 2 * Hkv), C = H * hs;
  zt_tensor *e = NULL;
  ZT_CHECK_OK(zt_tensor_empty(3, (int64_t[]){B, T, 3 * C}, qkv->dtype, ZT_CPU, &e));
  for (int64_t r = 0; r < B * T; r++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t x = 0; x < hs; x++) {
        int64_t kh = h / (H / Hkv);
        ZT_CHECK_OK(zt_tensor_set(e, r * 3 * C + h * hs + x, zt_tensor_get(qkv, r * W + h * hs + x)));
        ZT_CHECK_OK(zt_tensor_set(e, r * 3 * C + C + h * hs + x, zt_tensor_get(qkv, r * W + C + kh * hs + x)));
        ZT_CHECK_OK(zt_tensor_set(e, r * 3 * C + 2 * C + h * hs + x,
                                  zt_tensor_get(qkv, r * W + C + Hkv * hs + kh * hs + x)));
      }
  return e;
}

/* GQA against multi-head attention on K/V repeated per head, in f32: the output and dq
 * bitwise, dk and dv bitwise the per-head grads summed in head order (in f32). */
static void check_gqa_vs_repeated(int64_t B, int64_t T, int64_t hs, int H, int Hkv, uint64_t seed) {
  int64_t W = (H + 2 * Hkv) * hs, C = H * hs;
  zt_tensor *qkv = zt_test_rand_leaf(3, (int64_t[]){B, T, W}, ZT_DTYPE_F32, -2, 2, seed);
  zt_tensor *dy = zt_test_rand(3, (int64_t[]){B, T, C}, ZT_DTYPE_F32, -1, 1, seed + 1);
  zt_tensor *e = expand_kv(qkv, H, Hkv), *y = NULL, *ye = NULL;
  ZT_CHECK_OK(zt_tensor_set_requires_grad(e, true));
  ZT_CHECK_OK(zt_causal_attention_gqa(qkv, H, Hkv, &y));
  ZT_CHECK_OK(zt_causal_attention(e, H, &ye));
  if (!y || !ye) return;
  if (!zt_test_bitwise_equal(y, ye))
    zt_test_fail(__FILE__, __LINE__, "gqa forward (B=%lld T=%lld hs=%lld H=%d Hkv=%d) differs from repeated kv",
                 (long long)B, (long long)T, (long long)hs, H, Hkv);
  ZT_CHECK_OK(zt_backward(1, &y, &dy, false));
  ZT_CHECK_OK(zt_backward(1, &ye, &dy, false));
  bool same = qkv->grad && e->grad;
  for (int64_t r = 0; same && r < B * T; r++)
    for (int64_t x = 0; x < hs; x++) {
      for (int64_t h = 0; h < H; h++)
        same &= zt_tensor_get(qkv->grad, r * W + h * hs + x) == zt_tensor_get(e->grad, r * 3 * C + h * hs + x);
      for (int64_t kh = 0; kh < Hkv; kh++)
        for (int part = 1; part <= 2; part++) {
          float acc = 0;
          for (int64_t h = kh * (H / Hkv); h < (kh + 1) * (H / Hkv); h++)
            acc = (h == kh * (H / Hkv)) ? (float)zt_tensor_get(e->grad, r * 3 * C + part * C + h * hs + x)
                                        : acc + (float)zt_tensor_get(e->grad, r * 3 * C + part * C + h * hs + x);
          same &= zt_tensor_get(qkv->grad, r * W + C + (part - 1) * Hkv * hs + kh * hs + x) == (double)acc;
        }
    }
  if (!same)
    zt_test_fail(__FILE__, __LINE__, "gqa backward (B=%lld T=%lld hs=%lld H=%d Hkv=%d) differs from repeated kv",
                 (long long)B, (long long)T, (long long)hs, H, Hkv);
  zt_tensor *ts[] = {qkv, dy, e, y, ye};
  zt_test_free_all(ts, 5);
}

static void test_gqa_vs_repeated_kv(void) {
  /* groups of 2, 3 and 4, multi-query (Hkv = 1), T across the block sizes, hs off the
   * vector width; B * Hkv of 1, 2 and 4 tasks takes both forward paths on 2 threads */
  static const int64_t cases[][5] = {{1, 5, 8, 4, 2},    {2, 49, 16, 6, 2}, {1, 65, 12, 4, 1},
                                     {2, 130, 32, 8, 2}, {1, 97, 20, 6, 3}, {3, 33, 64, 9, 3}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    check_gqa_vs_repeated(cases[k][0], cases[k][1], cases[k][2], (int)cases[k][3], (int)cases[k][4], 500 + k);
}

typedef struct gqa_ud {
  int H, Hkv;
} gqa_ud;

static zt_status f_gqa(zt_tensor *const *in, zt_tensor **out, void *ud) {
  gqa_ud *u = ud;
  return zt_causal_attention_gqa(in[0], u->H, u->Hkv, out);
}

static void test_gqa_gradcheck(void) {
  /* B, T, hs, H, Hkv */
  static const int64_t cases[][5] = {{1, 5, 4, 4, 2}, {2, 4, 3, 3, 1}, {1, 6, 2, 4, 1}, {1, 3, 2, 6, 3}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    int64_t s[] = {cases[k][0], cases[k][1], (cases[k][3] + 2 * cases[k][4]) * cases[k][2]};
    gqa_ud ud = {(int)cases[k][3], (int)cases[k][4]};
    zt_tensor *qkv = zt_test_rand_leaf(3, s, ZT_DTYPE_F64, -1.5, 1.5, 600 + k);
    ZT_GRADCHECK(f_gqa, 1, ((zt_tensor *[]){qkv}), &ud, NULL);
    zt_tensor_free(qkv);
  }
}

/* n_kv_head == n_head is GPT-2's attention, bitwise; 1 vs 2 threads bitwise for GQA. */
static void test_gqa_mha_and_threads(void) {
  zt_tensor *qkv = zt_test_rand_leaf(3, (int64_t[]){2, 70, 96}, ZT_DTYPE_F32, -1, 1, 700), *a = NULL, *b = NULL;
  ZT_CHECK_OK(zt_causal_attention(qkv, 4, &a));
  ZT_CHECK_OK(zt_causal_attention_gqa(qkv, 4, 4, &b));
  if (a && b) ZT_CHECK(zt_test_bitwise_equal(a, b));
  zt_tensor_free(a);
  zt_tensor_free(b);
  zt_tensor_free(qkv);
  int prev = zt_get_num_threads();
  zt_tensor *res[2][2] = {{NULL}};
  zt_tensor *gy = zt_test_rand(3, (int64_t[]){1, 200, 96}, ZT_DTYPE_F32, -1, 1, 701);
  for (int r = 0; r < 2; r++) {
    zt_set_num_threads(r + 1);
    zt_tensor *x = zt_test_rand_leaf(3, (int64_t[]){1, 200, 6 * 16 + 2 * 2 * 16}, ZT_DTYPE_F32, -1, 1, 702);
    ZT_CHECK_OK(zt_causal_attention_gqa(x, 6, 2, &res[r][0]));
    if (res[r][0]) ZT_CHECK_OK(zt_backward(1, &res[r][0], &gy, false));
    res[r][1] = x->grad;
    x->grad = NULL;
    zt_tensor_free(x);
  }
  zt_set_num_threads(prev);
  for (int k = 0; k < 2; k++) {
    ZT_CHECK(res[0][k] && res[1][k] && zt_test_bitwise_equal(res[0][k], res[1][k]));
    zt_tensor_free(res[0][k]);
    zt_tensor_free(res[1][k]);
  }
  zt_tensor_free(gy);
}

static void test_gqa_errors(void) {
  zt_tensor *out = NULL, *x = zt_test_rand(3, (int64_t[]){1, 4, 24}, ZT_DTYPE_F32, -1, 1, 710);
  ZT_CHECK_ERR(zt_causal_attention_gqa(x, 4, 3, &out), ZT_STATUS_INVALID_ARG, "must be positive and divide n_head = 4");
  ZT_CHECK_ERR(zt_causal_attention_gqa(x, 4, 0, &out), ZT_STATUS_INVALID_ARG, "n_kv_head = 0");
  ZT_CHECK_ERR(zt_causal_attention_gqa(x, 8, 4, &out), ZT_STATUS_SHAPE, "= 16 * head_dim");
  ZT_CHECK_OK(zt_causal_attention_gqa(x, 4, 2, &out)); /* (4 + 4) heads of 3 */
  if (out) ZT_CHECK(out->shape[2] == 12);
  zt_tensor_free(out);
  zt_tensor_free(x);
}

int main(void) {
  ZT_RUN(test_f32_vs_reference);
  ZT_RUN(test_f64_vs_reference);
  ZT_RUN(test_f32_large_scores);
  ZT_RUN(test_gradcheck);
  ZT_RUN(test_gradcheck_partial);
  ZT_RUN(test_strided_input);
  ZT_RUN(test_saved_memory);
  ZT_RUN(test_deterministic_across_threads);
  ZT_RUN(test_no_grad_mode);
  ZT_RUN(test_empty_batch);
  ZT_RUN(test_errors);
  ZT_RUN(test_gqa_vs_repeated_kv);
  ZT_RUN(test_gqa_gradcheck);
  ZT_RUN(test_gqa_mha_and_threads);
  ZT_RUN(test_gqa_errors);
  return zt_test_finish();
}
