/* The Llama family's incremental decoding and its config.json writer. For each fixture folder
 * (tests/fixtures/llama/CASE/model: Llama 3 with GQA and llama3 rope, Qwen2 with q/k/v biases,
 * Qwen3 with q/k norm, Mistral with one KV head and a sliding window), with q and k sharpened
 * so that attention depends on positions, a prompt is prefilled then decoded token by token
 * (and once by a chunk) and every step's logits must be zt_llama_forward's last row over the
 * same tokens (f32 and f64); the cache holds only the KV heads; refusals leave the cache as it
 * was. Every fixture config (both layouts) goes read -> written -> read back to the same. */
#include <stdlib.h>

#include "io/buf.h"
#include "io/json.h"
#include "models/llama_internal.h"
#include "zt/llama.h"
#include "zt_test.h"

static const char *const CASES[] = {"llama3", "qwen2", "qwen3", "mistral"};
#define N_CASES 4

/* ------------------------------------------------ helpers */
static zt_llama *fixture_model(const char *name, zt_dtype dt) {
  char dir[1024];
  zt_test_fixture(dir, sizeof dir, "llama/%s/model", name);
  zt_llama *m = NULL;
  ZT_CHECK_OK(zt_llama_from_hf(dir, dt, &m));
  return m;
}

static bool has(const char *name, const char *part) { return strstr(name, part) != NULL; }

/* The fixtures' N(0, 0.02) projections give nearly uniform attention, blind to positions:
 * q and k projections (and biases) x4, Qwen3's q/k norm weights x3 (sharper attention
 * would amplify f32 rounding in the scores past the tolerance). */
static void sharpen(zt_llama *m) {
  zt_param *ps = NULL;
  int n = zt_llama_params(m, &ps);
  bool prev = zt_set_grad_enabled(false);
  for (int i = 0; i < n; i++) {
    const char *nm = ps[i].name;
    double f = has(nm, "q_proj") || has(nm, "k_proj") ? 4 : has(nm, "q_norm") || has(nm, "k_norm") ? 3 : 1;
    if (f == 1) continue;
    zt_tensor *t = NULL;
    ZT_CHECK_OK(zt_mul_scalar(ps[i].tensor, f, &t));
    if (t) ZT_CHECK_OK(zt_tensor_copy_(ps[i].tensor, t));
    zt_tensor_free(t);
  }
  zt_set_grad_enabled(prev);
}

static zt_tensor *narrow_copy(zt_tensor *x, int dim, int64_t start, int64_t len) {
  zt_tensor *v = NULL, *c = NULL;
  ZT_CHECK_OK(zt_narrow(x, dim, start, len, &v));
  if (v) ZT_CHECK_OK(zt_contiguous(v, &c));
  zt_tensor_free(v);
  return c;
}

/* zt_llama_forward's logits of the last of ids' first n positions, (B, V). */
static zt_tensor *forward_last(zt_llama *m, zt_tensor *ids, int64_t n) {
  zt_tensor *prefix = narrow_copy(ids, 1, 0, n), *lg = NULL, *last = NULL, *out = NULL;
  bool prev = zt_set_grad_enabled(false);
  ZT_CHECK_OK(zt_llama_forward(m, prefix, NULL, &lg, NULL));
  zt_set_grad_enabled(prev);
  if (lg) last = narrow_copy(lg, 1, n - 1, 1);
  if (last) ZT_CHECK_OK(zt_reshape(last, 2, (int64_t[]){last->shape[0], last->shape[2]}, &out));
  zt_test_free_all((zt_tensor *[]){prefix, lg, last}, 3);
  return out;
}

static double max_abs(const zt_tensor *t) {
  double m = 0;
  for (int64_t i = 0; i < zt_tensor_numel(t); i++) m = fmax(m, fabs(zt_tensor_get(t, i)));
  return m;
}

/* The cached step over ids [start, start + n) must give forward_last(start + n) within tol
 * (relative to the largest logit). Returns the relative difference. */
static double check_step(zt_llama *m, zt_kv_cache *c, zt_tensor *ids, int64_t start, int64_t n, double tol,
                         const char *what) {
  zt_tensor *step = narrow_copy(ids, 1, start, n), *got = NULL, *want = forward_last(m, ids, start + n);
  ZT_CHECK_OK(zt_llama_forward_cached(m, c, step, &got));
  double rel = INFINITY;
  if (got && want) {
    ZT_CHECK(got->ndim == 2 && got->shape[0] == want->shape[0] && got->shape[1] == want->shape[1]);
    ZT_CHECK(!got->requires_grad && zt_grad_enabled());
    rel = zt_test_max_abs_diff(got, want) / max_abs(want);
  }
  if (!(rel <= tol))
    zt_test_fail(__FILE__, __LINE__, "%s: positions [%lld, %lld): cached logits differ from the forward's by %g "
                 "(relative; tolerance %g)", what, (long long)start, (long long)(start + n), rel, tol);
  ZT_CHECK(zt_kv_cache_len(c) == start + n);
  zt_test_free_all((zt_tensor *[]){step, got, want}, 3);
  return rel;
}

/* ------------------------------------------------ decoding against the forward */
static void decode_case(const char *name, zt_dtype dt, double tol) {
  int64_t live = zt_test_live_bytes();
  zt_llama *m = fixture_model(name, dt);
  if (!m) return;
  sharpen(m);
  const zt_llama_config *cf = zt_llama_get_config(m);
  const int64_t B = 2, N = 20, P = 6; /* N <= Mistral's window of 32 */
  char what[64];
  snprintf(what, sizeof what, "%s %s", name, zt_dtype_name(dt));
  zt_mem_stats before, after;
  zt_mem_stats_get(ZT_CPU, &before);
  zt_kv_cache *c = NULL;
  ZT_CHECK_OK(zt_llama_kv_cache_new(m, B, N, &c));
  zt_mem_stats_get(ZT_CPU, &after);
  /* only the KV heads are held: n_kv_head < n_head in every case */
  int64_t want_bytes = (int64_t)cf->n_layer * 2 * B * cf->n_kv_head * N * cf->head_dim * (int64_t)zt_dtype_size(dt);
  ZT_CHECK(cf->n_kv_head < cf->n_head);
  ZT_CHECK(after.current[ZT_MEM_TAG_ACTIVATION] - before.current[ZT_MEM_TAG_ACTIVATION] == want_bytes);
  zt_tensor *ids = zt_test_rand_ids(B, N, cf->vocab_size, 41);
  double worst = 0;
  if (c && ids) {
    worst = fmax(worst, check_step(m, c, ids, 0, P, tol, what)); /* the prefill */
    for (int64_t t = P; t < 12; t++) worst = fmax(worst, check_step(m, c, ids, t, 1, tol, what));
    worst = fmax(worst, check_step(m, c, ids, 12, 3, tol, what)); /* a chunk against the cache */
    for (int64_t t = 15; t < N; t++) worst = fmax(worst, check_step(m, c, ids, t, 1, tol, what));
    /* reset: the same tokens again give the same logits (the rows past len are rewritten) */
    zt_kv_cache_reset(c);
    worst = fmax(worst, check_step(m, c, ids, 0, N, tol, what));
  }
  printf("  %s: worst relative difference %.3g\n", what, worst);
  zt_tensor_free(ids);
  zt_kv_cache_free(c);
  zt_llama_free(m);
  ZT_CHECK(zt_test_live_bytes() == live);
}

static void test_decode_matches_forward_f32(void) {
  for (int i = 0; i < N_CASES; i++) decode_case(CASES[i], ZT_DTYPE_F32, 1e-5);
}

static void test_decode_matches_forward_f64(void) {
  for (int i = 0; i < N_CASES; i++) decode_case(CASES[i], ZT_DTYPE_F64, 1e-12);
}

/* ------------------------------------------------ refusals */
static void test_decode_errors(void) {
  int64_t live = zt_test_live_bytes();
  zt_llama *m = fixture_model("qwen2", ZT_DTYPE_F32), *mis = fixture_model("mistral", ZT_DTYPE_F32);
  if (!m || !mis) goto out;
  zt_kv_cache *c = NULL, *bad = NULL;
  ZT_CHECK_ERR(zt_llama_kv_cache_new(m, 1, 0, &c), ZT_STATUS_INVALID_ARG, "at least 1");
  ZT_CHECK_ERR(zt_llama_kv_cache_new(m, 1, 513, &c), ZT_STATUS_INVALID_ARG, "max_position_embeddings = 512");
  ZT_CHECK_ERR(zt_llama_kv_cache_new(mis, 1, 33, &c), ZT_STATUS_INVALID_ARG, "sliding window (32)");
  ZT_CHECK_OK(zt_llama_kv_cache_new(mis, 1, 32, &bad)); /* Mistral's cache: one KV head */
  ZT_CHECK_OK(zt_llama_kv_cache_new(m, 2, 5, &c));
  int V = zt_llama_get_config(m)->vocab_size;
  zt_tensor *ids = zt_test_rand_ids(2, 5, V, 3), *lg = NULL, *i64 = NULL, *flat = NULL, *oob = NULL;
  zt_tensor *pre = narrow_copy(ids, 1, 0, 3), *row = narrow_copy(ids, 0, 0, 1);
  ZT_CHECK_OK(zt_tensor_zeros(2, (int64_t[]){2, 1}, ZT_DTYPE_I64, ZT_CPU, &i64));
  ZT_CHECK_OK(zt_tensor_zeros(1, (int64_t[]){2}, ZT_DTYPE_I32, ZT_CPU, &flat));
  ZT_CHECK_OK(zt_tensor_zeros(2, (int64_t[]){2, 1}, ZT_DTYPE_I32, ZT_CPU, &oob));
  ZT_CHECK_OK(zt_tensor_set(oob, 1, V)); /* one id past the vocabulary */
  ZT_CHECK_OK(zt_llama_forward_cached(m, c, pre, &lg));
  zt_tensor_free(lg), lg = NULL;
  ZT_CHECK_ERR(zt_llama_forward_cached(m, c, ids, &lg), ZT_STATUS_STATE, "holds 3 positions of its 5; 5 more");
  ZT_CHECK_ERR(zt_llama_forward_cached(m, c, i64, &lg), ZT_STATUS_DTYPE, "must be i32");
  ZT_CHECK_ERR(zt_llama_forward_cached(m, c, flat, &lg), ZT_STATUS_SHAPE, "(B, T)");
  ZT_CHECK_ERR(zt_llama_forward_cached(m, c, row, &lg), ZT_STATUS_SHAPE, "1 rows but the cache 2");
  ZT_CHECK_ERR(zt_llama_forward_cached(m, bad, pre, &lg), ZT_STATUS_SHAPE, "make the cache with zt_llama_kv_cache_new");
  ZT_CHECK(zt_llama_forward_cached(m, c, oob, &lg) != ZT_OK && strstr(zt_last_error(), "zt_llama_forward_cached"));
  ZT_CHECK_ERR(zt_llama_forward_cached(NULL, c, pre, &lg), ZT_STATUS_INVALID_ARG, "are required");
  ZT_CHECK(lg == NULL && zt_kv_cache_len(c) == 3 && zt_grad_enabled());
  /* the refused steps left the cache as it was: the rest still matches the forward */
  check_step(m, c, ids, 3, 2, 1e-5, "after refusals");
  zt_test_free_all((zt_tensor *[]){ids, lg, i64, flat, oob, pre, row}, 7);
  zt_kv_cache_free(c);
  zt_kv_cache_free(bad);
out:
  zt_llama_free(m);
  zt_llama_free(mis);
  ZT_CHECK(zt_test_live_bytes() == live);
}

/* The model interface's members (llama_internal.h) are the public functions. */
static void test_model_members(void) {
  zt_llama *m = fixture_model("llama3", ZT_DTYPE_F32);
  if (!m) return;
  zt_model mm = zt_llama_model(m);
  mm.kv_cache_new = zt__llama_model_kv_cache_new;
  mm.forward_cached = zt__llama_model_forward_cached;
  zt_kv_cache *a = NULL, *b = NULL;
  zt_tensor *ids = zt_test_rand_ids(1, 4, zt_llama_get_config(m)->vocab_size, 5), *la = NULL, *lb = NULL;
  ZT_CHECK_OK(mm.kv_cache_new(mm.ctx, 1, 8, &a));
  ZT_CHECK_OK(zt_llama_kv_cache_new(m, 1, 8, &b));
  if (a && b) {
    ZT_CHECK_OK(mm.forward_cached(mm.ctx, a, ids, &la));
    ZT_CHECK_OK(zt_llama_forward_cached(m, b, ids, &lb));
    ZT_CHECK(la && lb && zt_test_bitwise_equal(la, lb) && zt_kv_cache_len(a) == 4);
  }
  zt_test_free_all((zt_tensor *[]){ids, la, lb}, 3);
  zt_kv_cache_free(a);
  zt_kv_cache_free(b);
  zt_llama_free(m);
}

/* ------------------------------------------------ config.json written and read back */
static void check_same_config(const zt_llama_config *a, const zt_llama_config *b, const char *what) {
  const zt_rope_scaling *ra = &a->rope_scaling, *rb = &b->rope_scaling;
  bool same = !strcmp(a->model_type, b->model_type) && a->vocab_size == b->vocab_size &&
              a->hidden_size == b->hidden_size && a->intermediate_size == b->intermediate_size &&
              a->n_layer == b->n_layer && a->n_head == b->n_head && a->n_kv_head == b->n_kv_head &&
              a->head_dim == b->head_dim && a->max_position_embeddings == b->max_position_embeddings &&
              a->rms_norm_eps == b->rms_norm_eps && a->rope_theta == b->rope_theta && ra->type == rb->type &&
              ra->factor == rb->factor && ra->low_freq_factor == rb->low_freq_factor &&
              ra->high_freq_factor == rb->high_freq_factor &&
              ra->original_max_position_embeddings == rb->original_max_position_embeddings &&
              a->tie_word_embeddings == b->tie_word_embeddings && a->attention_bias == b->attention_bias &&
              a->qk_norm == b->qk_norm && a->sliding_window == b->sliding_window &&
              a->initializer_range == b->initializer_range;
  if (!same) zt_test_fail(__FILE__, __LINE__, "%s: the config read back differs from the one written", what);
}

/* c -> config.json text -> parsed -> the same config; the text is returned (free it). */
static char *round_trip(const zt_llama_config *c, zt_dtype dt, const char *what) {
  zt__buf b = {0};
  zt__llama_hf_config_json(c, dt, &b);
  ZT_CHECK(!b.oom && b.len > 0);
  zt__json *j = NULL;
  zt_llama_config back;
  ZT_CHECK_OK(zt__json_parse(b.data, b.len, what, &j));
  if (j) {
    ZT_CHECK_OK(zt__llama_from_hf_json(what, j, &back));
    check_same_config(c, &back, what);
  }
  zt__json_free(j);
  return b.data;
}

static void test_config_round_trip(void) {
  for (int i = 0; i < N_CASES; i++)
    for (int v4 = 0; v4 < 2; v4++) {
      char path[1024];
      zt_test_fixture(path, sizeof path, v4 ? "llama/%s/config_v4.json" : "llama/%s/model/config.json", CASES[i]);
      zt_llama_config c;
      ZT_CHECK_OK(zt_llama_config_from_hf(path, &c));
      free(round_trip(&c, ZT_DTYPE_F32, path));
    }
  /* windows where each type says them; a type from the flags; the dtype; both rope layouts */
  zt_llama_config c;
  char path[1024];
  zt_test_fixture(path, sizeof path, "llama/qwen3/model/config.json");
  ZT_CHECK_OK(zt_llama_config_from_hf(path, &c));
  c.sliding_window = 16;
  char *t = round_trip(&c, ZT_DTYPE_F64, "qwen3 with a window");
  ZT_CHECK(t && strstr(t, "\"use_sliding_window\": true") && strstr(t, "\"max_window_layers\": 0") &&
           strstr(t, "\"dtype\": \"float64\"") && strstr(t, "\"torch_dtype\": \"float64\""));
  free(t);
  c.model_type[0] = '\0'; /* no type: the q/k norm makes it qwen3 */
  zt__buf b = {0};
  zt__llama_hf_config_json(&c, ZT_DTYPE_F32, &b);
  ZT_CHECK(b.data && strstr(b.data, "\"Qwen3ForCausalLM\"") && strstr(b.data, "\"model_type\": \"qwen3\""));
  zt__buf_free(&b);
  zt_test_fixture(path, sizeof path, "llama/llama3/model/config.json");
  ZT_CHECK_OK(zt_llama_config_from_hf(path, &c));
  c.sliding_window = 64;
  t = round_trip(&c, ZT_DTYPE_F32, "llama with a window");
  ZT_CHECK(t && strstr(t, "\"rope_theta\": 500000.0,") && strstr(t, "\"rope_scaling\": {\"rope_type\": \"llama3\"") &&
           strstr(t, "\"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 500000.0"));
  free(t);
}

int main(void) {
  ZT_RUN(test_decode_matches_forward_f32);
  ZT_RUN(test_decode_matches_forward_f64);
  ZT_RUN(test_decode_errors);
  ZT_RUN(test_model_members);
  ZT_RUN(test_config_round_trip);
  return zt_test_finish();
}
