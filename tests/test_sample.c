/* Sampling through a KV cache (zt_gpt2_sample) against the full recompute it replaced: the
 * same tokens over hundreds of tokens, greedy and with temperature / top-k, across the
 * block_size crop, checked against a copy of the old algorithm kept here; the cached
 * forward's logits against zt_gpt2_forward's last row; cached attention bitwise against
 * causal attention (f32 and f64, rows across key blocks, chunks of queries), grouped-query
 * heads against the same heads expanded; the cache's accounting, capacity, commit and
 * errors. */
#include <stdlib.h>

#include "zt_test.h"
#include "train/sample.h"

/* ------------------------------------------------ helpers */
/* (B, T, H*hs) x as the contiguous (B, H, T, hs): a cache's layout. */
static zt_tensor *heads_major(zt_tensor *x, int64_t H) {
  zt_tensor *r = NULL, *p = NULL, *c = NULL;
  ZT_CHECK_OK(zt_reshape(x, 4, (int64_t[]){x->shape[0], x->shape[1], H, x->shape[2] / H}, &r));
  ZT_CHECK_OK(zt_permute(r, (int[]){0, 2, 1, 3}, &p));
  ZT_CHECK_OK(zt_contiguous(p, &c));
  zt_tensor_free(r);
  zt_tensor_free(p);
  return c;
}

static zt_tensor *narrow_copy(zt_tensor *x, int dim, int64_t start, int64_t len) {
  zt_tensor *v = NULL, *c = NULL;
  ZT_CHECK_OK(zt_narrow(x, dim, start, len, &v));
  ZT_CHECK_OK(zt_contiguous(v, &c));
  zt_tensor_free(v);
  return c;
}

/* ------------------------------------------------ cached attention */
/* Rows of zt_cached_attention (queries alone and in chunks, against a cache that holds the
 * keys and values of qkv) must be bitwise zt_causal_attention's rows. */
static void check_rows(int64_t B, int64_t T, int64_t C, int nh, zt_dtype dt, uint64_t seed) {
  zt_tensor *qkv = zt_test_rand(3, (int64_t[]){B, T, 3 * C}, dt, -2, 2, seed), *full = NULL, *parts[3] = {0};
  ZT_CHECK_OK(zt_causal_attention(qkv, nh, &full));
  ZT_CHECK_OK(zt_split(qkv, 2, 3, (int64_t[]){C, C, C}, parts));
  zt_tensor *k = heads_major(parts[1], nh), *v = heads_major(parts[2], nh);
  const int64_t chunks[] = {1, 1, 1, 2, 5, 7};
  const int64_t ends[] = {1, 2, 63, 64, 70, T}; /* last position + 1 of each chunk */
  for (int c = 0; c < 6; c++) {
    int64_t len = ends[c] < T ? ends[c] : T, n = chunks[c] < len ? chunks[c] : len;
    zt_tensor *q = narrow_copy(parts[0], 1, len - n, n), *want = narrow_copy(full, 1, len - n, n), *got = NULL;
    ZT_CHECK_OK(zt_cached_attention(q, k, v, len, &got));
    if (got && !zt_test_bitwise_equal(got, want))
      zt_test_fail(__FILE__, __LINE__, "%s B=%lld T=%lld C=%lld heads=%d: queries [%lld, %lld) differ by %g", zt_dtype_name(dt),
                   (long long)B, (long long)T, (long long)C, nh, (long long)(len - n), (long long)len,
                   zt_test_max_abs_diff(got, want));
    zt_test_free_all((zt_tensor *[]){q, want, got}, 3);
  }
  zt_test_free_all((zt_tensor *[]){qkv, full, parts[0], parts[1], parts[2], k, v}, 7);
}

static void test_cached_attention_rows(void) {
  check_rows(2, 150, 48, 4, ZT_DTYPE_F32, 1); /* head size 12: not a whole vector */
  check_rows(1, 130, 128, 2, ZT_DTYPE_F32, 2); /* head size 64, keys over three blocks */
  check_rows(2, 9, 16, 2, ZT_DTYPE_F32, 3);
  check_rows(2, 100, 24, 3, ZT_DTYPE_F64, 4);
}

/* Grouped-query heads: query head h reads kv head h / (H / Hkv), as causal attention does
 * with each kv head repeated for its group. */
static void test_cached_attention_gqa(void) {
  const int64_t B = 2, T = 70, H = 6, Hkv = 2, hs = 8, C = H * hs, Ckv = Hkv * hs;
  zt_tensor *q = zt_test_rand(3, (int64_t[]){B, T, C}, ZT_DTYPE_F32, -2, 2, 11);
  zt_tensor *kv[2] = {zt_test_rand(3, (int64_t[]){B, T, Ckv}, ZT_DTYPE_F32, -2, 2, 12),
                      zt_test_rand(3, (int64_t[]){B, T, Ckv}, ZT_DTYPE_F32, -2, 2, 13)};
  float *packed = malloc(sizeof(float) * (size_t)(B * T * 3 * C));
  for (int64_t r = 0; r < B * T; r++)
    for (int64_t x = 0; x < C; x++) {
      int64_t g = x / hs / (H / Hkv), d = x % hs;
      packed[r * 3 * C + x] = (float)zt_tensor_get(q, r * C + x);
      for (int i = 0; i < 2; i++) packed[r * 3 * C + (i + 1) * C + x] = (float)zt_tensor_get(kv[i], r * Ckv + g * hs + d);
    }
  zt_tensor *qkv = NULL, *full = NULL;
  ZT_CHECK_OK(zt_tensor_from_data(3, (int64_t[]){B, T, 3 * C}, ZT_DTYPE_F32, packed, &qkv));
  ZT_CHECK_OK(zt_causal_attention(qkv, (int)H, &full));
  zt_tensor *k = heads_major(kv[0], Hkv), *v = heads_major(kv[1], Hkv);
  for (int64_t len = 1; len <= T; len += 23) {
    zt_tensor *qr = narrow_copy(q, 1, len - 1, 1), *want = narrow_copy(full, 1, len - 1, 1), *got = NULL;
    ZT_CHECK_OK(zt_cached_attention(qr, k, v, len, &got));
    ZT_CHECK(got && zt_test_bitwise_equal(got, want));
    zt_test_free_all((zt_tensor *[]){qr, want, got}, 3);
  }
  free(packed);
  zt_test_free_all((zt_tensor *[]){q, kv[0], kv[1], qkv, full, k, v}, 7);
}

static void test_cached_attention_errors(void) {
  zt_tensor *q = zt_test_rand(3, (int64_t[]){1, 2, 8}, ZT_DTYPE_F32, -1, 1, 1);
  zt_tensor *k = zt_test_rand(4, (int64_t[]){1, 2, 5, 4}, ZT_DTYPE_F32, -1, 1, 2);
  zt_tensor *v = zt_test_rand(4, (int64_t[]){1, 2, 5, 4}, ZT_DTYPE_F32, -1, 1, 3);
  zt_tensor *v3 = zt_test_rand(4, (int64_t[]){1, 2, 6, 4}, ZT_DTYPE_F32, -1, 1, 4);
  zt_tensor *q3 = zt_test_rand(3, (int64_t[]){1, 2, 12}, ZT_DTYPE_F32, -1, 1, 5);
  zt_tensor *q64 = zt_test_rand(3, (int64_t[]){1, 2, 8}, ZT_DTYPE_F64, -1, 1, 6);
  zt_tensor *qb = zt_test_rand(3, (int64_t[]){2, 2, 8}, ZT_DTYPE_F32, -1, 1, 7);
  zt_tensor *ql = zt_test_rand_leaf(3, (int64_t[]){1, 2, 8}, ZT_DTYPE_F32, -1, 1, 8), *o = NULL;
  ZT_CHECK_ERR(zt_cached_attention(q, k, v3, 3, &o), ZT_STATUS_SHAPE, "must both be 4-D");
  ZT_CHECK_ERR(zt_cached_attention(q3, k, v, 3, &o), ZT_STATUS_SHAPE, "multiple of the cache's 2 kv heads");
  ZT_CHECK_ERR(zt_cached_attention(qb, k, v, 3, &o), ZT_STATUS_SHAPE, "batch");
  ZT_CHECK_ERR(zt_cached_attention(q64, k, v, 3, &o), ZT_STATUS_DTYPE, "different dtypes");
  ZT_CHECK_ERR(zt_cached_attention(q, k, v, 1, &o), ZT_STATUS_SHAPE, "Tq <= len <= capacity");
  ZT_CHECK_ERR(zt_cached_attention(q, k, v, 6, &o), ZT_STATUS_SHAPE, "Tq <= len <= capacity");
  ZT_CHECK_ERR(zt_cached_attention(k, k, v, 3, &o), ZT_STATUS_SHAPE, "3-D");
  /* no backward: refused where a graph would be recorded, fine without one */
  ZT_CHECK_ERR(zt_cached_attention(ql, k, v, 3, &o), ZT_STATUS_AUTOGRAD, "no backward");
  bool prev = zt_set_grad_enabled(false);
  ZT_CHECK_OK(zt_cached_attention(ql, k, v, 3, &o));
  zt_set_grad_enabled(prev);
  ZT_CHECK(o && !o->requires_grad && o->shape[1] == 2 && o->shape[2] == 8);
  zt_test_free_all((zt_tensor *[]){q, k, v, v3, q3, q64, qb, ql, o}, 9);
}

/* ------------------------------------------------ the cache */
static void test_kv_cache(void) {
  int64_t live = zt_test_live_bytes();
  zt_mem_stats before, st;
  zt_mem_stats_get(ZT_CPU, &before);
  zt_kv_cache_config cfg = {3, 2, 8, 2, 10, ZT_DTYPE_F32, ZT_CPU};
  zt_kv_cache *c = NULL;
  ZT_CHECK_OK(zt_kv_cache_new(&cfg, &c));
  if (!c) return;
  zt_mem_stats_get(ZT_CPU, &st);
  /* k and v of 3 layers, each (2, 2, 10, 8) f32 */
  ZT_CHECK(st.current[ZT_MEM_TAG_ACTIVATION] - before.current[ZT_MEM_TAG_ACTIVATION] == 2 * 3 * 2 * 2 * 10 * 8 * 4);
  zt_tensor *k = zt_test_rand(3, (int64_t[]){2, 4, 16}, ZT_DTYPE_F32, -1, 1, 1);
  zt_tensor *q = zt_test_rand(3, (int64_t[]){2, 4, 32}, ZT_DTYPE_F32, -1, 1, 2), *o = NULL, *bad = NULL;
  ZT_CHECK(zt_kv_cache_len(c) == 0);
  for (int l = 0; l < 3; l++) ZT_CHECK_OK(zt_kv_cache_append(c, l, k, k));
  ZT_CHECK_OK(zt_kv_cache_advance(c, 4));
  ZT_CHECK(zt_kv_cache_len(c) == 4);
  /* a step that misses a layer is not committed */
  ZT_CHECK_OK(zt_kv_cache_attend(c, 0, q, k, k, &o));
  ZT_CHECK(o && o->shape[0] == 2 && o->shape[1] == 4 && o->shape[2] == 32);
  ZT_CHECK_ERR(zt_kv_cache_advance(c, 4), ZT_STATUS_STATE, "layer 1 took 0 new positions, not 4");
  ZT_CHECK(zt_kv_cache_len(c) == 4);
  ZT_CHECK_ERR(zt_kv_cache_append(c, 3, k, k), ZT_STATUS_INVALID_ARG, "outside the cache's 3 layers");
  ZT_CHECK_ERR(zt_kv_cache_append(c, 0, q, k), ZT_STATUS_SHAPE, "the cache takes (2, T, 16)");
  ZT_CHECK_OK(zt_tensor_zeros(3, (int64_t[]){2, 7, 16}, ZT_DTYPE_F32, ZT_CPU, &bad));
  ZT_CHECK_ERR(zt_kv_cache_append(c, 0, bad, bad), ZT_STATUS_STATE, "holds 4 of its 10 positions; 7 more do not fit");
  zt_kv_cache_reset(c);
  ZT_CHECK(zt_kv_cache_len(c) == 0);
  ZT_CHECK_OK(zt_kv_cache_append(c, 0, bad, bad));
  zt_kv_cache_config wrong = cfg;
  wrong.dtype = ZT_DTYPE_I32;
  zt_kv_cache *c2 = NULL;
  ZT_CHECK_ERR(zt_kv_cache_new(&wrong, &c2), ZT_STATUS_DTYPE, "f32 or f64");
  wrong = cfg;
  wrong.capacity = 0;
  ZT_CHECK_ERR(zt_kv_cache_new(&wrong, &c2), ZT_STATUS_INVALID_ARG, "must all be positive");
  zt_test_free_all((zt_tensor *[]){k, q, o, bad}, 4);
  zt_kv_cache_free(c);
  ZT_CHECK(zt_test_live_bytes() == live);
}

/* ------------------------------------------------ GPT-2 */
/* A small GPT-2 (context 32) trained a few steps, so its logits are far from flat. */
static zt_gpt2 *trained_model(zt_dtype dt) {
  zt_gpt2_config gc = {2, 4, 64, 96, 32, 0.0};
  zt_rng_seed(7);
  zt_gpt2 *m = NULL;
  ZT_CHECK_OK(zt_gpt2_new_dtype(&gc, dt, &m));
  if (!m) return NULL;
  if (dt == ZT_DTYPE_F32) { /* the optimizer takes f32 parameters: an f64 model stays as made */
    zt_optim *o = zt_test_gpt2_adamw(m);
    for (int i = 0; i < 12; i++) zt_test_gpt2_step(m, o, i % 3);
    zt_optim_free(o);
  }
  zt_gpt2_set_training(m, false);
  return m;
}

/* The cached forward's logits, fed in steps, against zt_gpt2_forward's last row over the same
 * tokens, within tol: attention is bitwise (test_cached_attention_rows), but one-row GEMMs sum
 * in another order than BLAS's many-row ones. */
static void check_cached_logits(zt_dtype dt, int64_t B, double tol) {
  zt_gpt2 *m = trained_model(dt);
  if (!m) return;
  const int64_t T = 32, V = 96, steps[] = {5, 1, 1, 4, 1, 7, 1, 1, 11};
  zt_tensor *ids = zt_test_rand_ids(B, T, (int)V, 3);
  zt_kv_cache *c = NULL;
  ZT_CHECK_OK(zt_gpt2_kv_cache_new(m, B, T, &c));
  double worst = 0, spread = 0;
  for (int i = 0, len = 0; i < 9 && c; i++) {
    zt_tensor *x = narrow_copy(ids, 1, len, steps[i]), *lg = NULL, *full = NULL, *pre = narrow_copy(ids, 1, 0, len + steps[i]);
    len += (int)steps[i];
    ZT_CHECK_OK(zt_gpt2_forward_cached(m, c, x, &lg));
    ZT_CHECK(zt_kv_cache_len(c) == len);
    ZT_CHECK_OK(zt_gpt2_forward(m, pre, NULL, &full, NULL));
    ZT_CHECK(lg && lg->ndim == 2 && lg->shape[0] == B && lg->shape[1] == V && !lg->requires_grad);
    for (int64_t b = 0; lg && full && b < B; b++) {
      double mn = INFINITY, mx = -INFINITY;
      for (int64_t v = 0; v < V; v++) {
        double want = zt_tensor_get(full, (b * len + len - 1) * V + v), got = zt_tensor_get(lg, b * V + v);
        worst = fmax(worst, fabs(want - got));
        mn = fmin(mn, want), mx = fmax(mx, want);
      }
      spread = fmax(spread, mx - mn);
    }
    zt_test_free_all((zt_tensor *[]){x, lg, full, pre}, 4);
  }
  printf("  %s, batch %lld: cached logits within %.3g of the full forward's (tolerance %g; logits spread over %.3g)\n",
         zt_dtype_name(dt), (long long)B, worst, tol, spread);
  ZT_CHECK(worst <= tol);
  ZT_CHECK(dt != ZT_DTYPE_F32 || spread > 3); /* a trained model that tells tokens apart */
  zt_kv_cache_free(c);
  zt_tensor_free(ids);
  zt_gpt2_free(m);
}

static void test_forward_cached_logits(void) {
  check_cached_logits(ZT_DTYPE_F32, 1, 2e-6);
  check_cached_logits(ZT_DTYPE_F32, 2, 2e-6);
  check_cached_logits(ZT_DTYPE_F64, 2, 1e-12);
}

/* Errors leave the cache as it was: the next step computes what it would have. */
static void test_forward_cached_errors(void) {
  zt_gpt2 *m = trained_model(ZT_DTYPE_F32);
  if (!m) return;
  zt_kv_cache *c = NULL, *small = NULL, *other = NULL;
  ZT_CHECK_OK(zt_gpt2_kv_cache_new(m, 1, 8, &c));
  ZT_CHECK_ERR(zt_gpt2_kv_cache_new(m, 1, 33, &small), ZT_STATUS_INVALID_ARG, "must be in [1, 32]");
  zt_kv_cache_config oc = {3, 4, 16, 1, 8, ZT_DTYPE_F32, ZT_CPU};
  ZT_CHECK_OK(zt_kv_cache_new(&oc, &other));
  int32_t five[] = {1, 2, 3, 4, 5}, badv[] = {6, 96}, two[] = {6, 7};
  zt_tensor *x5 = NULL, *xb = NULL, *x2 = NULL, *x22 = NULL, *lg = NULL, *want = NULL, *got = NULL;
  ZT_CHECK_OK(zt_tensor_from_data(2, (int64_t[]){1, 5}, ZT_DTYPE_I32, five, &x5));
  ZT_CHECK_OK(zt_tensor_from_data(2, (int64_t[]){1, 2}, ZT_DTYPE_I32, badv, &xb));
  ZT_CHECK_OK(zt_tensor_from_data(2, (int64_t[]){1, 2}, ZT_DTYPE_I32, two, &x2));
  ZT_CHECK_OK(zt_tensor_zeros(2, (int64_t[]){2, 2}, ZT_DTYPE_I32, ZT_CPU, &x22));
  ZT_CHECK_ERR(zt_gpt2_forward_cached(m, other, x5, &lg), ZT_STATUS_SHAPE, "make the cache with zt_gpt2_kv_cache_new");
  ZT_CHECK_ERR(zt_gpt2_forward_cached(m, c, x22, &lg), ZT_STATUS_SHAPE, "the ids have 2 rows but the cache 1");
  ZT_CHECK_OK(zt_gpt2_forward_cached(m, c, x5, &lg));
  zt_tensor_free(lg), lg = NULL;
  ZT_CHECK_ERR(zt_gpt2_forward_cached(m, c, xb, &lg), ZT_STATUS_INVALID_ARG, "96");
  ZT_CHECK(zt_kv_cache_len(c) == 5 && !lg);
  ZT_CHECK_ERR(zt_gpt2_forward_cached(m, c, x5, &lg), ZT_STATUS_STATE, "holds 5 positions of its 8; 5 more do not fit");
  ZT_CHECK_OK(zt_gpt2_forward_cached(m, c, x2, &got));
  /* the same seven tokens in one prefill */
  int32_t seven[] = {1, 2, 3, 4, 5, 6, 7};
  zt_tensor *x7 = NULL;
  ZT_CHECK_OK(zt_tensor_from_data(2, (int64_t[]){1, 7}, ZT_DTYPE_I32, seven, &x7));
  zt_kv_cache_reset(c);
  ZT_CHECK_OK(zt_gpt2_forward_cached(m, c, x7, &want));
  ZT_CHECK(got && want && zt_test_max_abs_diff(got, want) <= 2e-6);
  zt_test_free_all((zt_tensor *[]){x5, xb, x2, x22, x7, lg, want, got}, 8);
  zt_kv_cache_free(c);
  zt_kv_cache_free(other);
  zt_gpt2_free(m);
}

/* ------------------------------------------------ sampling */
static int cmp_desc(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x < y) - (x > y);
}

/* The sampler as it was before the KV cache, kept verbatim in its maths: the whole context
 * (the last block_size tokens) through zt_gpt2_forward per token, top-k by sorting. */
static int32_t *ref_sample(zt_gpt2 *m, const int32_t *prompt, int64_t n_prompt, int64_t n, double temperature,
                           int top_k, uint64_t seed) {
  const zt_gpt2_config *c = zt_gpt2_get_config(m);
  int V = c->vocab_size;
  int32_t *ids = malloc(sizeof *ids * (size_t)(n_prompt + n));
  float *row = malloc(sizeof *row * (size_t)V), *sorted = malloc(sizeof *sorted * (size_t)V), *lp = malloc(sizeof *lp * (size_t)V);
  memcpy(ids, prompt, sizeof *ids * (size_t)n_prompt);
  int64_t len = n_prompt;
  bool prev = zt_set_grad_enabled(false);
  zt_rng_state rs = {seed, 0};
  for (int64_t k = 0; k < n; k++) {
    int64_t T = len < c->block_size ? len : c->block_size;
    zt_tensor *x = NULL, *logits = NULL;
    ZT_CHECK_OK(zt_tensor_from_data(2, (int64_t[]){1, T}, ZT_DTYPE_I32, ids + len - T, &x));
    ZT_CHECK_OK(zt_gpt2_forward(m, x, NULL, &logits, NULL));
    for (int v = 0; v < V; v++) lp[v] = (float)zt_tensor_get(logits, (T - 1) * V + v);
    int32_t next = 0;
    if (temperature == 0) {
      for (int v = 1; v < V; v++)
        if (lp[v] > lp[next]) next = v;
    } else {
      float lmax = lp[0];
      for (int v = 1; v < V; v++) lmax = lp[v] > lmax ? lp[v] : lmax;
      for (int v = 0; v < V; v++) row[v] = (float)(((double)lp[v] - lmax) / temperature);
      float cutoff = -INFINITY;
      if (top_k > 0 && top_k < V) {
        memcpy(sorted, row, sizeof *row * (size_t)V);
        qsort(sorted, (size_t)V, sizeof *sorted, cmp_desc);
        cutoff = sorted[top_k - 1];
      }
      double sum = 0;
      for (int v = 0; v < V; v++) sum += row[v] >= cutoff ? exp((double)row[v]) : 0;
      double u = zt_rng_uniform_at(rs, (uint64_t)k) * sum, acc = 0;
      for (int v = 0; v < V; v++) {
        if (row[v] < cutoff) continue;
        acc += exp((double)row[v]);
        next = v;
        if (acc > u) break;
      }
    }
    ids[len++] = next;
    zt_tensor_free(x);
    zt_tensor_free(logits);
  }
  zt_set_grad_enabled(prev);
  free(row), free(sorted), free(lp);
  return ids;
}

/* 300 tokens after a one-token prompt, 100 after prompts of 6 and 40 (longer than the
 * context of 32, which every run passes, again and again): the cached sampler, the recompute
 * path and the old algorithm give the same tokens, and they are not a constant run. */
static void test_same_tokens(void) {
  zt_gpt2 *m = trained_model(ZT_DTYPE_F32);
  if (!m) return;
  int64_t live = zt_test_live_bytes();
  struct {
    double temperature;
    int top_k, distinct; /* at least this many distinct tokens come out */
  } settings[] = {{0, 0, 2}, {0.8, 10, 8}, {1.0, 0, 25}, {0.5, 3, 3}, {2.0, 95, 25}};
  int32_t prompt[40];
  for (int i = 0; i < 40; i++) prompt[i] = (i * 37 + 5) % 96;
  const int64_t prompts[] = {1, 6, 40};
  for (int p = 0; p < 3; p++)
    for (int s = 0; s < 5; s++) {
      int64_t np = prompts[p], n = np == 1 ? 300 : 100, n1 = 0, n2 = 0;
      int32_t *cached = NULL, *recomputed = NULL, *ref = ref_sample(m, prompt, np, n, settings[s].temperature, settings[s].top_k, 42 + (uint64_t)s);
      ZT_CHECK_OK(zt_lm_sample(zt_test_lm(m), prompt, np, n, settings[s].temperature, settings[s].top_k, 42 + (uint64_t)s, &cached, &n1));
      ZT_CHECK_OK(zt__lm_sample_recompute(zt_test_lm(m), prompt, np, n, settings[s].temperature, settings[s].top_k, 42 + (uint64_t)s,
                                            &recomputed, &n2));
      ZT_CHECK(n1 == np + n && n2 == np + n);
      int64_t first = -1;
      bool seen[96] = {false};
      int distinct = 0;
      for (int64_t i = 0; cached && recomputed && i < np + n; i++) {
        if (first < 0 && (cached[i] != ref[i] || recomputed[i] != ref[i])) first = i;
        if (i >= np && !seen[ref[i]]) seen[ref[i]] = true, distinct++;
      }
      if (first >= 0)
        zt_test_fail(__FILE__, __LINE__, "prompt %lld, temperature %g, top-k %d: token %lld differs: cached %d, recomputed %d, "
                     "reference %d", (long long)np, settings[s].temperature, settings[s].top_k, (long long)first,
                     cached[first], recomputed[first], ref[first]);
      ZT_CHECK(distinct >= settings[s].distinct);
      free(cached), free(recomputed), free(ref);
    }
  ZT_CHECK(zt_test_live_bytes() == live); /* the cache went with its call */
  zt_gpt2_free(m);
}

int main(void) {
  ZT_RUN(test_cached_attention_rows);
  ZT_RUN(test_cached_attention_gqa);
  ZT_RUN(test_cached_attention_errors);
  ZT_RUN(test_kv_cache);
  ZT_RUN(test_forward_cached_logits);
  ZT_RUN(test_forward_cached_errors);
  ZT_RUN(test_same_tokens);
  return zt_test_finish();
}
