/* The Llama family's incremental decoding: the forward of new tokens against a KV cache
 * (zt_llama_forward_cached). Each layer computes q, k and v for the new positions only
 * (biases, Qwen3's per-head norm), rotates q and k at their absolute positions [len, len + T),
 * and attends: an empty cache runs the fused grouped-query causal attention over the tokens
 * (the prefill: what zt_llama_forward runs), a filled one zt_cached_attention, whose query
 * heads of a group read their one cached kv head in place. The cache holds the n_kv_head
 * heads only. The head makes the last position's logits only. The layers are llama.c's
 * layer_forward maths without its module hooks. */
#include "core/status_internal.h"
#include "llama_internal.h"

/* Positions a cache may hold: the context, and a sliding window when the config has one
 * (attention is full causal, which equals the window's only up to its length). */
static zt_status check_positions(const zt_llama_config *c, int64_t n, const char *what) {
  if (n > c->max_position_embeddings)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "%s %lld is longer than the model's context (max_position_embeddings = %d): use at most %d",
                  what, (long long)n, c->max_position_embeddings, c->max_position_embeddings);
  if (c->sliding_window > 0 && n > c->sliding_window)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "%s %lld is longer than the model's sliding window (%d); zerotrain's attention is full causal, "
                  "which equals sliding-window attention only up to the window: use at most %d",
                  what, (long long)n, c->sliding_window, c->sliding_window);
  return ZT_OK;
}

zt_status zt_llama_kv_cache_new(zt_llama *m, int64_t batch, int64_t capacity, zt_kv_cache **out) {
  if (!m || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_llama_kv_cache_new: model and out are required");
  *out = NULL;
  const zt_llama_config *c = &m->cfg;
  if (capacity < 1)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_llama_kv_cache_new: capacity %lld must be at least 1",
                  (long long)capacity);
  zt_status s = check_positions(c, capacity, "capacity");
  if (s) return zt__error_prefix(s, "zt_llama_kv_cache_new");
  zt_kv_cache_config g = {c->n_layer, c->n_kv_head, c->head_dim, batch, capacity, m->dtype,
                          zt_tensor_device(m->embed)};
  return zt_kv_cache_new(&g, out);
}


/* The cache's layers, heads and dtype are the model's, and the positions it would hold fit the
 * context and window (its rows and room: zt_kv_cache_decode). */
static zt_status check_cache(const zt_llama *m, const zt_kv_cache *cache, const zt_tensor *ids) {
  const zt_kv_cache_config *g = zt_kv_cache_get_config(cache);
  const zt_llama_config *c = &m->cfg;
  if (g->n_layer != c->n_layer || g->n_kv_head != c->n_kv_head || g->head_dim != c->head_dim || g->dtype != m->dtype)
    return ZT_ERR(ZT_STATUS_SHAPE,
                  "the cache holds %d layers of %d kv heads of %lld (%s), the model has %d of %d of %d (%s): make "
                  "the cache with zt_llama_kv_cache_new",
                  g->n_layer, g->n_kv_head, (long long)g->head_dim, zt_dtype_name(g->dtype), c->n_layer,
                  c->n_kv_head, c->head_dim, zt_dtype_name(m->dtype));
  int64_t held = zt_kv_cache_len(cache) + ids->shape[1];
  return held > g->capacity ? ZT_OK : check_positions(c, held, "the positions held would be");
}

/* After a step s that wrote *result from *t: *t becomes *result when s succeeded. */
static zt_status replace(zt_status s, zt_tensor **t, zt_tensor **result) {
  if (s) return s;
  zt_tensor_free(*t);
  *t = *result;
  *result = NULL;
  return ZT_OK;
}

/* q, k and v (B, T, {H, K, K} * D) of h (B, T, C) at positions [len, len + T): projected,
 * per-head normalised (Qwen3), q and k rotated. */
static zt_status qkv_at(zt_llama *m, zt__llama_layer *L, zt_tensor *h, int64_t len, zt_tensor **q, zt_tensor **k,
                        zt_tensor **v) {
  const zt_llama_config *c = &m->cfg;
  zt_tensor *t = NULL;
  zt_status s = zt_linear(h, L->wq, L->bq, q);
  if (!s) s = zt_linear(h, L->wk, L->bk, k);
  if (!s) s = zt_linear(h, L->wv, L->bv, v);
  if (!s && c->qk_norm) {
    s = replace(zt__llama_head_norm(*q, L->q_norm, c->n_head, c->head_dim, c->rms_norm_eps, &t), q, &t);
    if (!s) s = replace(zt__llama_head_norm(*k, L->k_norm, c->n_kv_head, c->head_dim, c->rms_norm_eps, &t), k, &t);
  }
  if (!s) s = replace(zt_rope(*q, m->cos, m->sin, len, -1, &t), q, &t);
  if (!s) s = replace(zt_rope(*k, m->cos, m->sin, len, -1, &t), k, &t);
  return s;
}

/* Attention of layer l's new positions: the prefill (empty cache) through the fused causal
 * attention, later steps against the cache; either way k and v go into the cache. */
static zt_status attend(zt_llama *m, zt_kv_cache *cache, int l, zt_tensor *q, zt_tensor *k, zt_tensor *v,
                        zt_tensor **out) {
  if (zt_kv_cache_len(cache) > 0) return zt_kv_cache_attend(cache, l, q, k, v, out);
  zt_tensor *qkv = NULL;
  zt_status s = zt_cat(3, (zt_tensor *[]){q, k, v}, 2, &qkv);
  if (!s) s = zt_causal_attention_gqa(qkv, m->cfg.n_head, m->cfg.n_kv_head, out);
  zt_tensor_free(qkv);
  if (!s) s = zt_kv_cache_append(cache, l, k, v);
  return s;
}

/* Layer l on x (B, T, C) (borrowed) at the cache's positions [len, len + T); *out is new.
 * x + o(attn(rope(q, k), v)) of RMSNorm(x), then + down(swiglu(gate, up)) of RMSNorm. */
static zt_status layer_cached(zt_llama *m, zt_kv_cache *cache, int l, zt_tensor *x, zt_tensor **out) {
  zt__llama_layer *L = &m->layers[l];
  double eps = m->cfg.rms_norm_eps;
  zt_tensor *h = NULL, *q = NULL, *k = NULL, *v = NULL, *a = NULL, *o = NULL, *x1 = NULL;
  zt_tensor *h2 = NULL, *g = NULL, *u = NULL, *gu = NULL, *d = NULL;
  zt_status s = zt_rms_norm(x, L->ln1, eps, &h);
  if (!s) s = qkv_at(m, L, h, zt_kv_cache_len(cache), &q, &k, &v);
  if (!s) s = attend(m, cache, l, q, k, v, &a);
  if (!s) s = zt_linear(a, L->wo, NULL, &o);
  if (!s) s = zt_add(x, o, &x1);
  if (!s) s = zt_rms_norm(x1, L->ln2, eps, &h2);
  if (!s) s = zt_linear(h2, L->wg, NULL, &g);
  if (!s) s = zt_linear(h2, L->wu, NULL, &u);
  if (!s) s = zt_swiglu(g, u, &gu);
  if (!s) s = zt_linear(gu, L->wd, NULL, &d);
  if (!s) s = zt_add(x1, d, out);
  zt_tensor *all[] = {h, q, k, v, a, o, x1, h2, g, u, gu, d};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) zt_tensor_free(all[i]);
  return s ? zt__error_prefix(s, "in decoder layer %s", L->mod->name) : ZT_OK;
}

static zt_status embed(void *ctx, zt_tensor *ids, int64_t pos0, zt_tensor **x) {
  zt_llama *m = ctx;
  ZT_TRY(zt__llama_ensure_rope(m, pos0 + ids->shape[1], zt_tensor_device(m->embed)));
  return zt_embedding(m->embed, ids, x);
}
static zt_status layer(void *ctx, zt_kv_cache *c, int l, zt_tensor *x, zt_tensor **out) {
  return layer_cached(ctx, c, l, x, out);
}
static zt_status norm(void *ctx, zt_tensor *x, zt_tensor **out) {
  zt_llama *m = ctx;
  return zt_rms_norm(x, m->norm, m->cfg.rms_norm_eps, out);
}

zt_status zt_llama_forward_cached(zt_llama *m, zt_kv_cache *cache, zt_tensor *ids, zt_tensor **logits) {
  if (!m || !cache || !logits)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_llama_forward_cached: model, cache and logits are required");
  zt_status s = zt_check_token_ids(ids); /* ids in [0, vocab_size): zt_embedding checks them */
  if (!s) s = check_cache(m, cache, ids);
  zt_kv_decoder d = {m->cfg.n_layer, embed, layer, norm, m->lm_head ? m->lm_head : m->embed, m};
  if (!s) s = zt_kv_cache_decode(cache, &d, ids, logits);
  return s ? zt__error_prefix(s, "zt_llama_forward_cached") : ZT_OK;
}

/* The model interface's members (zt/model.h), ctx a zt_llama. */
zt_status zt__llama_model_kv_cache_new(void *ctx, int64_t batch, int64_t capacity, zt_kv_cache **out) {
  return zt_llama_kv_cache_new(ctx, batch, capacity, out);
}

zt_status zt__llama_model_forward_cached(void *ctx, zt_kv_cache *cache, zt_tensor *ids, zt_tensor **logits) {
  return zt_llama_forward_cached(ctx, cache, ids, logits);
}
