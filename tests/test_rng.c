/* Philox4x32-10: Random123 known-answer vectors (word/key order), (seed, offset) state and
 * reservation, uniform/normal statistics, and bitwise independence from the thread count
 * (the stream is a pure function of seed and offset). */
#include <stdlib.h>

#include "zt_test.h"

/* Random123 kat_vectors: philox4x32 10 rounds. Our counter words are
 * (counter_lo low, counter_lo high, counter_hi low, counter_hi high), key words
 * (seed low, seed high). */
static void test_philox_kat(void) {
  uint32_t w[4];
  zt_philox4x32(0, 0, 0, w);
  ZT_CHECK(w[0] == 0x6627e8d5u && w[1] == 0xe169c58du && w[2] == 0xbc57ac4cu && w[3] == 0x9b00dbd8u);
  zt_philox4x32(UINT64_MAX, UINT64_MAX, UINT64_MAX, w);
  ZT_CHECK(w[0] == 0x408f276du && w[1] == 0x41c83b0eu && w[2] == 0xa20bc7c6u && w[3] == 0x6d5451fdu);
  /* pi digits vector: ctr {243f6a88, 85a308d3, 13198a2e, 03707344}, key {a4093822, 299f31d0} */
  zt_philox4x32(0x299f31d0a4093822ull, 0x85a308d3243f6a88ull, 0x0370734413198a2eull, w);
  ZT_CHECK(w[0] == 0xd16cfe09u && w[1] == 0x94fdccebu && w[2] == 0x5001e420u && w[3] == 0x24126ea1u);
}

static void test_philox_counter_sensitivity(void) {
  uint32_t a[4], b[4], c[4];
  zt_philox4x32(1, 0, 0, a);
  zt_philox4x32(1, 1, 0, b);
  zt_philox4x32(1, 0, 1, c);
  ZT_CHECK(memcmp(a, b, sizeof a) != 0);
  ZT_CHECK(memcmp(a, c, sizeof a) != 0);
  ZT_CHECK(memcmp(b, c, sizeof a) != 0);
  zt_philox4x32(2, 0, 0, b);
  ZT_CHECK(memcmp(a, b, sizeof a) != 0);
}

static void test_uniform_at_matches_blocks(void) {
  zt_rng_state s = {42, 7};
  for (uint64_t i = 0; i < 16; i++) {
    uint32_t w[4];
    zt_philox4x32(42, 7 + i / 4, 0, w);
    double expect = (double)(w[i % 4] >> 8) / 16777216.0;
    ZT_CHECK_NEAR(zt_rng_uniform_at(s, i), expect, 0);
    float u = zt_rng_uniform_at(s, i);
    ZT_CHECK(u >= 0.0f && u < 1.0f);
  }
}

static void test_state_get_set_reproduces(void) {
  zt_rng_state saved = zt_rng_get_state();
  zt_rng_seed(123);
  zt_rng_state st = zt_rng_get_state();
  ZT_CHECK(st.seed == 123 && st.offset == 0);
  int64_t shape[] = {37};
  zt_tensor *a = NULL, *b = NULL;
  ZT_CHECK_OK(zt_tensor_empty(1, shape, ZT_DTYPE_F32, ZT_CPU, &a));
  ZT_CHECK_OK(zt_tensor_empty(1, shape, ZT_DTYPE_F32, ZT_CPU, &b));
  zt_rng_state before = zt_rng_get_state();
  ZT_CHECK_OK(zt_tensor_uniform_(a, -1, 1));
  zt_rng_state after = zt_rng_get_state();
  ZT_CHECK(after.offset == before.offset + (37 + 3) / 4);
  zt_rng_set_state(before);
  ZT_CHECK_OK(zt_tensor_uniform_(b, -1, 1));
  ZT_CHECK(zt_test_bitwise_equal(a, b));
  /* the next draw differs from the first */
  ZT_CHECK_OK(zt_tensor_uniform_(b, -1, 1));
  ZT_CHECK(!zt_test_bitwise_equal(a, b));
  /* normal_ uses one block per four values */
  before = zt_rng_get_state();
  ZT_CHECK_OK(zt_tensor_normal_(a, 0, 1));
  ZT_CHECK(zt_rng_get_state().offset == before.offset + (37 + 3) / 4);
  zt_rng_set_state(before);
  ZT_CHECK_OK(zt_tensor_normal_(b, 0, 1));
  ZT_CHECK(zt_test_bitwise_equal(a, b));
  /* reseeding restarts the stream */
  zt_rng_seed(123);
  ZT_CHECK_OK(zt_tensor_uniform_(b, -1, 1));
  zt_rng_seed(123);
  ZT_CHECK_OK(zt_tensor_uniform_(a, -1, 1));
  ZT_CHECK(zt_test_bitwise_equal(a, b));
  zt_tensor_free(a);
  zt_tensor_free(b);
  zt_rng_set_state(saved);
}

static void test_reserve_advances_offset(void) {
  zt_rng_state saved = zt_rng_get_state();
  zt_rng_set_state((zt_rng_state){9, 100});
  zt_rng_state r1 = zt_rng_reserve(5);
  zt_rng_state r2 = zt_rng_reserve(3);
  zt_rng_state r3 = zt_rng_reserve(0);
  ZT_CHECK(r1.seed == 9 && r1.offset == 100);
  ZT_CHECK(r2.seed == 9 && r2.offset == 105);
  ZT_CHECK(r3.offset == 108);
  ZT_CHECK(zt_rng_get_state().offset == 108);
  /* a tensor fill draws exactly the reserved blocks: element i = uniform_at(state, i) */
  int64_t shape[] = {10};
  zt_tensor *t = NULL;
  ZT_CHECK_OK(zt_tensor_empty(1, shape, ZT_DTYPE_F64, ZT_CPU, &t));
  ZT_CHECK_OK(zt_tensor_uniform_(t, 0, 1));
  for (int64_t i = 0; i < 10; i++) ZT_CHECK_NEAR(zt_tensor_get(t, i), zt_rng_uniform_at(r3, (uint64_t)i), 0);
  zt_tensor_free(t);
  zt_rng_set_state(saved);
}

static void moments(const zt_tensor *t, double *mean, double *std, double *mn, double *mx) {
  int64_t n = zt_tensor_numel(t);
  double s = 0, s2 = 0;
  *mn = INFINITY;
  *mx = -INFINITY;
  for (int64_t i = 0; i < n; i++) {
    double v = zt_tensor_get(t, i);
    s += v;
    s2 += v * v;
    if (v < *mn) *mn = v;
    if (v > *mx) *mx = v;
  }
  *mean = s / (double)n;
  *std = sqrt(s2 / (double)n - *mean * *mean);
}

static void test_uniform_statistics(void) {
  zt_rng_seed(2024);
  int64_t shape[] = {200000};
  zt_tensor *t = NULL;
  ZT_CHECK_OK(zt_tensor_empty(1, shape, ZT_DTYPE_F32, ZT_CPU, &t));
  ZT_CHECK_OK(zt_tensor_uniform_(t, -2, 3));
  double mean, std, mn, mx;
  moments(t, &mean, &std, &mn, &mx);
  ZT_CHECK_NEAR(mean, 0.5, 0.02);                /* std error ~ 1.44/sqrt(2e5) = 0.003 */
  ZT_CHECK_NEAR(std, 5.0 / sqrt(12.0), 0.01);
  ZT_CHECK(mn >= -2 && mx < 3);
  ZT_CHECK(mn < -1.99 && mx > 2.99);
  /* bucket counts: each tenth holds about 10% */
  int counts[10] = {0};
  for (int64_t i = 0; i < shape[0]; i++) counts[(int)((zt_tensor_get(t, i) + 2) / 0.5)]++;
  for (int k = 0; k < 10; k++) ZT_CHECK(fabs(counts[k] / 200000.0 - 0.1) < 0.005);
  zt_tensor_free(t);
}

static void test_normal_statistics(void) {
  zt_rng_seed(77);
  int64_t shape[] = {400, 500};
  zt_tensor *t = NULL;
  ZT_CHECK_OK(zt_tensor_empty(2, shape, ZT_DTYPE_F64, ZT_CPU, &t));
  ZT_CHECK_OK(zt_tensor_normal_(t, 1.5, 0.5));
  double mean, std, mn, mx;
  moments(t, &mean, &std, &mn, &mx);
  ZT_CHECK_NEAR(mean, 1.5, 0.01);
  ZT_CHECK_NEAR(std, 0.5, 0.01);
  /* about 68.3% within one std, 95.4% within two */
  int64_t n = zt_tensor_numel(t), in1 = 0, in2 = 0;
  for (int64_t i = 0; i < n; i++) {
    double z = fabs(zt_tensor_get(t, i) - 1.5) / 0.5;
    in1 += z < 1;
    in2 += z < 2;
  }
  ZT_CHECK_NEAR((double)in1 / (double)n, 0.6827, 0.005);
  ZT_CHECK_NEAR((double)in2 / (double)n, 0.9545, 0.003);
  zt_tensor_free(t);
  /* bf16 / f16 targets work too */
  int64_t s2[] = {1000};
  ZT_CHECK_OK(zt_tensor_empty(1, s2, ZT_DTYPE_BF16, ZT_CPU, &t));
  ZT_CHECK_OK(zt_tensor_normal_(t, 0, 1));
  moments(t, &mean, &std, &mn, &mx);
  ZT_CHECK(fabs(mean) < 0.15 && fabs(std - 1) < 0.1);
  zt_tensor_free(t);
}

/* Fill with 1 thread and with 2 threads from the same state: bitwise equal. Sizes above
 * the parallel threshold so the 2-thread run really splits the loop. */
static void test_thread_count_independence(void) {
  int prev = zt_get_num_threads();
  int64_t shape[] = {300001};
  zt_tensor *a = NULL, *b = NULL;
  ZT_CHECK_OK(zt_tensor_empty(1, shape, ZT_DTYPE_F32, ZT_CPU, &a));
  ZT_CHECK_OK(zt_tensor_empty(1, shape, ZT_DTYPE_F32, ZT_CPU, &b));
  zt_rng_state st = {555, 12};
  for (int kind = 0; kind < 2; kind++) {
    zt_set_num_threads(1);
    zt_rng_set_state(st);
    ZT_CHECK_OK(kind ? zt_tensor_normal_(a, 0, 1) : zt_tensor_uniform_(a, 0, 1));
    zt_set_num_threads(2);
    zt_rng_set_state(st);
    ZT_CHECK_OK(kind ? zt_tensor_normal_(b, 0, 1) : zt_tensor_uniform_(b, 0, 1));
    ZT_CHECK(zt_test_bitwise_equal(a, b));
  }
  zt_set_num_threads(prev);
  zt_tensor_free(a);
  zt_tensor_free(b);
}

static void test_rng_errors(void) {
  int64_t shape[] = {4, 3};
  zt_tensor *t = NULL, *leaf = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(2, shape, ZT_DTYPE_I32, ZT_CPU, &t));
  ZT_CHECK_ERR(zt_tensor_uniform_(t, 0, 1), ZT_STATUS_DTYPE, "floating-point");
  ZT_CHECK_ERR(zt_tensor_normal_(t, 0, 1), ZT_STATUS_DTYPE, "floating-point");
  ZT_CHECK_ERR(zt_tensor_uniform_(NULL, 0, 1), ZT_STATUS_DTYPE, "floating-point");
  zt_tensor_free(t);
  /* init of a parameter belongs under grad mode off */
  leaf = zt_test_rand_leaf(2, shape, ZT_DTYPE_F32, 0, 1, 1);
  ZT_CHECK_ERR(zt_tensor_normal_(leaf, 0, 1), ZT_STATUS_AUTOGRAD, "in-place");
  bool prev = zt_set_grad_enabled(false);
  ZT_CHECK_OK(zt_tensor_normal_(leaf, 0, 1));
  zt_set_grad_enabled(prev);
  zt_tensor_free(leaf);
}

int main(void) {
  ZT_RUN(test_philox_kat);
  ZT_RUN(test_philox_counter_sensitivity);
  ZT_RUN(test_uniform_at_matches_blocks);
  ZT_RUN(test_state_get_set_reproduces);
  ZT_RUN(test_reserve_advances_offset);
  ZT_RUN(test_uniform_statistics);
  ZT_RUN(test_normal_statistics);
  ZT_RUN(test_thread_count_independence);
  ZT_RUN(test_rng_errors);
  return zt_test_finish();
}
