/* Text generation: autoregressive sampling with temperature and top-k from a private
 * Philox stream, so sampling never moves the default generator (training stays
 * reproducible). Each token is chosen from the logits of the last position of its context:
 * the last block_size tokens, at positions from 0.
 * The logits come from a KV cache (the model's forward_cached): the prompt's context is
 * prefilled, then each new token runs alone against the cached keys and values. Once the
 * context passes block_size, every new token shifts the positions of the whole window, so no
 * cached key stays valid: the cache is reset and the window of the last block_size tokens
 * prefilled again, a full forward per token as the recompute path costs (still without the
 * T x V logits). The recompute path (the whole window through forward_logits per token) is
 * kept as the reference the cache is tested and benchmarked against (train/sample.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "zt/train.h"
#include "core/backend.h"
#include "train/sample.h"

/* Where the logits of the next token come from. */
typedef struct logits_src {
  const zt_model *m;
  int64_t V;
  zt_device dev;  /* the model's */
  int64_t window; /* block_size: the context's length at most */
  zt_kv_cache *cache; /* NULL: recompute */
  int64_t start;      /* ids[start] sits at the cache's position 0 */
  float *lp;          /* (V) the logits, read from their device */
} logits_src;

/* g->lp = logits of the last of ids[0, len) in its context, the whole window recomputed. */
static zt_status logits_recompute(logits_src *g, const int32_t *ids, int64_t len) {
  int64_t T = len < g->window ? len : g->window, V = g->V;
  zt_tensor *x = NULL, *logits = NULL;
  zt_status s = zt__tensor_from_host(2, (int64_t[]){1, T}, ZT_DTYPE_I32, g->dev, ZT_MEM_TAG_TEMP, ids + len - T, &x);
  if (!s) s = g->m->forward_logits(g->m->ctx, x, &logits);
  if (!s) {
    ZT_ASSERT(logits->dtype == ZT_DTYPE_F32 && zt_tensor_is_contiguous(logits));
    zt__dev_read_range(logits, (T - 1) * V, V, g->lp);
  }
  zt_tensor_free(x);
  zt_tensor_free(logits);
  return s;
}

/* The same from the cache: the tokens it does not hold yet run through it; a context that
 * would pass the window is prefilled again from the window's first token. */
static zt_status logits_cached(logits_src *g, const int32_t *ids, int64_t len) {
  int64_t held = zt_kv_cache_len(g->cache), V = g->V;
  if (len - g->start > g->window) { /* the cache holds min(window, the longest context) */
    zt_kv_cache_reset(g->cache);
    held = 0;
    g->start = len < g->window ? 0 : len - g->window;
  }
  int64_t T = len - g->start - held;
  ZT_ASSERT(T >= 1);
  zt_tensor *x = NULL, *logits = NULL;
  zt_status s =
      zt__tensor_from_host(2, (int64_t[]){1, T}, ZT_DTYPE_I32, g->dev, ZT_MEM_TAG_TEMP, ids + g->start + held, &x);
  if (!s) s = g->m->forward_cached(g->m->ctx, g->cache, x, &logits);
  if (!s) {
    ZT_ASSERT(logits->dtype == ZT_DTYPE_F32 && zt_tensor_is_contiguous(logits));
    zt__dev_read_range(logits, 0, V, g->lp);
  }
  zt_tensor_free(x);
  zt_tensor_free(logits);
  return s;
}

/* The k-th largest of a[0, n) (1 <= k <= n), reordering a: quickselect with Hoare's
 * partition around the median of three. The value sorting would give, in O(n). */
static float kth_largest(float *a, int n, int k) {
  int lo = 0, hi = n - 1, want = k - 1; /* want: the index in descending order */
  while (lo < hi) {
    float x = a[lo], y = a[lo + (hi - lo) / 2], z = a[hi];
    float p = x > y ? (y > z ? y : (x > z ? z : x)) : (x > z ? x : (y > z ? z : y));
    int i = lo, j = hi;
    while (i <= j) {
      while (a[i] > p) i++;
      while (a[j] < p) j--;
      if (i <= j) {
        float t = a[i];
        a[i++] = a[j];
        a[j--] = t;
      }
    }
    /* a[lo..j] >= p >= a[i..hi], and everything between j and i equals p */
    if (want <= j)
      hi = j;
    else if (want >= i)
      lo = i;
    else
      return a[want];
  }
  return a[want];
}

/* The next token from the logits lp (V): the largest at temperature 0, else drawn with the
 * k-th uniform of rs from softmax(lp / temperature) over the top_k largest (0: all). row
 * and sel are V floats of scratch. */
static zt_status pick(const float *lp, int V, double temperature, int top_k, zt_rng_state rs, int64_t k, float *row,
                      float *sel, int32_t *next) {
  int32_t best = 0;
  if (temperature == 0) {
    for (int v = 1; v < V; v++)
      if (lp[v] > lp[best]) best = v;
    *next = best;
    return ZT_OK;
  }
  /* (logit - max) / T in double: with the max subtracted first, a tiny T sends the others to
   * exp(-inf) = 0 instead of overflowing every term to inf (and NaN) */
  float lmax = lp[0];
  for (int v = 1; v < V; v++) lmax = lp[v] > lmax ? lp[v] : lmax;
  for (int v = 0; v < V; v++) row[v] = (float)(((double)lp[v] - lmax) / temperature);
  float cutoff = -INFINITY;
  if (top_k > 0 && top_k < V) {
    memcpy(sel, row, sizeof *row * (size_t)V);
    cutoff = kth_largest(sel, V, top_k);
  }
  double sum = 0;
  for (int v = 0; v < V; v++) sum += row[v] >= cutoff ? exp((double)row[v]) : 0;
  double u = zt_rng_uniform_at(rs, (uint64_t)k) * sum, acc = 0;
  int32_t chosen = -1;
  for (int v = 0; v < V; v++) {
    if (row[v] < cutoff) continue;
    acc += exp((double)row[v]);
    chosen = v;
    if (acc > u) break;
  }
  /* the max term alone gives exp(0) = 1: anything else means NaN/inf logits (a damaged model) */
  if (!(sum >= 1 && isfinite(sum)))
    return ZT_ERR(ZT_STATUS_STATE, "zt_lm_sample: the model's logits are not finite: its weights are damaged");
  *next = chosen;
  return ZT_OK;
}

static zt_status sample(const zt_model *m, const int32_t *prompt, int64_t n_prompt, int64_t n, double temperature, int top_k,
                        uint64_t seed, bool cached, int32_t **out, int64_t *n_out) {
  if (!m || !out || !n_out || (n_prompt && !prompt))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_lm_sample: NULL model, output or prompt");
  if (n_prompt < 1) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_lm_sample: the prompt needs at least one token");
  if (n < 0 || n > ZT_SAMPLE_MAX_LEN || n_prompt > ZT_SAMPLE_MAX_LEN)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_lm_sample: %lld tokens after a prompt of %lld: each must be in [0, %d]",
                  (long long)n, (long long)n_prompt, ZT_SAMPLE_MAX_LEN);
  if (!(temperature >= 0 && temperature <= 100) || top_k < 0)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_lm_sample: temperature must be a number in [0, 100] (0: greedy; got %g) and top-k >= 0", temperature);
  const zt_lm_config *c = zt_model_config(m);
  if (!c || !m->forward_logits)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_lm_sample: the model is not a language model (zt_model.config, forward_logits)");
  zt_lm_dims d = zt_lm_config_dims(c);
  int V = d.vocab;
  cached = cached && m->kv_cache_new && m->forward_cached; /* else every token recomputes its window */
  for (int64_t i = 0; i < n_prompt; i++)
    if (prompt[i] < 0 || prompt[i] >= V)
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_lm_sample: prompt token %lld is %d, outside [0, %d)", (long long)i,
                    prompt[i], V);
  int32_t *ids = malloc(sizeof *ids * (size_t)(n_prompt + n));
  float *row = malloc(sizeof *row * (size_t)V), *sel = malloc(sizeof *sel * (size_t)V);
  logits_src g = {m, V, ZT_CPU, d.context, NULL, 0, malloc(sizeof(float) * (size_t)V)};
  if (!ids || !row || !sel || !g.lp) {
    free(ids), free(row), free(sel), free(g.lp);
    return ZT_ERR(ZT_STATUS_OOM, "out of host memory for sampling");
  }
  memcpy(ids, prompt, sizeof *ids * (size_t)n_prompt);
  int64_t len = n_prompt;
  zt_param *ps;
  if (zt_model_params(m, &ps) > 0) g.dev = zt_tensor_device(ps[0].tensor); /* the model's */
  zt_module *root = zt_model_module(m);
  bool prev = zt_set_grad_enabled(false), was_training = root->training;
  zt_module_set_training(root, false);
  zt_status s = ZT_OK;
  if (cached && n > 0) {
    /* the longest context this call reaches: the prompt and the tokens before the last */
    int64_t most = n_prompt + n - 1;
    s = m->kv_cache_new(m->ctx, 1, most < g.window ? most : g.window, &g.cache);
  }
  zt_rng_state rs = {seed, 0};
  for (int64_t k = 0; k < n && s == ZT_OK; k++) {
    s = cached ? logits_cached(&g, ids, len) : logits_recompute(&g, ids, len);
    if (!s) s = pick(g.lp, V, temperature, top_k, rs, k, row, sel, &ids[len]);
    len++;
  }
  zt_kv_cache_free(g.cache);
  zt_module_set_training(root, was_training);
  zt_set_grad_enabled(prev);
  free(row), free(sel), free(g.lp);
  if (s) {
    free(ids);
    return s;
  }
  *out = ids;
  *n_out = len;
  return ZT_OK;
}

zt_status zt_lm_sample(const zt_model *m, const int32_t *prompt, int64_t n_prompt, int64_t n, double temperature,
                         int top_k, uint64_t seed, int32_t **out, int64_t *n_out) {
  return sample(m, prompt, n_prompt, n, temperature, top_k, seed, true, out, n_out);
}

zt_status zt__lm_sample_recompute(const zt_model *m, const int32_t *prompt, int64_t n_prompt, int64_t n,
                                    double temperature, int top_k, uint64_t seed, int32_t **out, int64_t *n_out) {
  return sample(m, prompt, n_prompt, n, temperature, top_k, seed, false, out, n_out);
}

zt_status zt_lm_logits(const zt_model *m, const int32_t *ids, int64_t n, float **out) {
  const zt_lm_config *c = m ? zt_model_config(m) : NULL;
  if (!c || !m->forward_logits || !ids || !out)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_lm_logits: a language model, ids and out are required");
  zt_lm_dims d = zt_lm_config_dims(c);
  if (n < 1 || n > d.context)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_lm_logits: %lld tokens; give 1 to %d (the model's context)", (long long)n,
                  d.context);
  *out = malloc(sizeof **out * (size_t)n * (size_t)d.vocab);
  if (!*out) return ZT_ERR(ZT_STATUS_OOM, "zt_lm_logits: out of host memory");
  zt_param *ps;
  zt_device dev = zt_model_params(m, &ps) > 0 ? zt_tensor_device(ps[0].tensor) : ZT_CPU;
  zt_module *root = zt_model_module(m);
  bool prev = zt_set_grad_enabled(false), was_training = root->training;
  zt_module_set_training(root, false);
  zt_tensor *x = NULL, *logits = NULL;
  zt_status s = zt__tensor_from_host(2, (int64_t[]){1, n}, ZT_DTYPE_I32, dev, ZT_MEM_TAG_TEMP, ids, &x);
  if (!s) s = m->forward_logits(m->ctx, x, &logits);
  if (!s) {
    ZT_ASSERT(logits->dtype == ZT_DTYPE_F32 && zt_tensor_is_contiguous(logits));
    zt__dev_read_range(logits, 0, n * d.vocab, *out);
  }
  zt_tensor_free(x);
  zt_tensor_free(logits);
  zt_module_set_training(root, was_training);
  zt_set_grad_enabled(prev);
  if (s) free(*out), *out = NULL;
  return s;
}
