/* GPT-2's incremental decoding: the forward of new tokens against a KV cache
 * (zt_gpt2_forward_cached). Each block computes q, k and v for the new positions only; an
 * empty cache runs the fused causal attention over the tokens (the prefill: the attention
 * zt_gpt2_forward runs), a filled one zt_cached_attention against the cached keys; the head
 * makes the last position's logits only. The blocks are zt_nn_block_forward's maths
 * (src/nn/layers.c) without its module hooks. */
#include "core/status_internal.h"
#include "gpt2_internal.h"

zt_status zt_gpt2_kv_cache_new(zt_gpt2 *m, int64_t batch, int64_t capacity, zt_kv_cache **out) {
  if (!m || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_gpt2_kv_cache_new: model and out are required");
  const zt_gpt2_config *c = &m->cfg;
  if (capacity < 1 || capacity > c->block_size)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_gpt2_kv_cache_new: capacity %lld must be in [1, %d]: the model's learned positions end at its "
                  "block_size",
                  (long long)capacity, c->block_size);
  zt_kv_cache_config g = {c->n_layer, c->n_head, c->n_embd / c->n_head, batch, capacity, m->dtype,
                          zt_tensor_device(m->wte->weight)};
  return zt_kv_cache_new(&g, out);
}

static zt_status check_cache(const zt_gpt2 *m, const zt_kv_cache *cache, const zt_tensor *ids) {
  const zt_kv_cache_config *g = zt_kv_cache_get_config(cache);
  const zt_gpt2_config *c = &m->cfg;
  if (g->n_layer != c->n_layer || g->n_kv_head != c->n_head || g->head_dim != c->n_embd / c->n_head ||
      g->dtype != m->dtype)
    return ZT_ERR(ZT_STATUS_SHAPE,
                  "the cache holds %d layers of %d heads of %lld (%s), the model has %d of %d of %d (%s): make the "
                  "cache with zt_gpt2_kv_cache_new",
                  g->n_layer, g->n_kv_head, (long long)g->head_dim, zt_dtype_name(g->dtype), c->n_layer, c->n_head,
                  c->n_embd / c->n_head, zt_dtype_name(m->dtype));
  if (g->batch != ids->shape[0])
    return ZT_ERR(ZT_STATUS_SHAPE, "the ids have %lld rows but the cache %lld", (long long)ids->shape[0],
                  (long long)g->batch);
  int64_t len = zt_kv_cache_len(cache), T = ids->shape[1];
  if (len + T > g->capacity)
    return ZT_ERR(ZT_STATUS_STATE,
                  "the cache holds %lld positions of its %lld; %lld more do not fit (past the model's context, "
                  "reset it and run the window of the last tokens again, as zt_gpt2_sample does)",
                  (long long)len, (long long)g->capacity, (long long)T);
  return ZT_OK;
}

/* One block on x (B, T, C) (borrowed) at the cache's positions [len, len + T); *out is new.
 * x + attn(ln_1(x)), then + mlp(ln_2(.)), as zt_nn_block_forward. */
static zt_status block_cached(zt_nn_block *b, zt_kv_cache *cache, int layer, zt_tensor *x, zt_tensor **out) {
  zt_nn_attention *a = b->attn;
  const int64_t C = x->shape[2];
  zt_tensor *h = NULL, *qkv = NULL, *qkv3[3] = {NULL, NULL, NULL}, *att = NULL, *y = NULL, *x1 = NULL, *f = NULL;
  zt_status s = zt_nn_layer_norm_forward(b->ln_1, x, &h);
  if (!s) s = zt_nn_linear_forward(a->c_attn, h, &qkv); /* (B, T, 3C): q, k, v side by side */
  if (!s) s = zt_split(qkv, 2, 3, (int64_t[]){C, C, C}, qkv3);
  if (!s && zt_kv_cache_len(cache) == 0) {
    s = zt_causal_attention(qkv, a->n_head, &att);
    if (!s) s = zt_kv_cache_append(cache, layer, qkv3[1], qkv3[2]);
  } else if (!s) {
    s = zt_kv_cache_attend(cache, layer, qkv3[0], qkv3[1], qkv3[2], &att);
  }
  zt_tensor_free(h), h = NULL;
  if (!s) s = zt_nn_linear_forward(a->c_proj, att, &y);
  if (!s) s = zt_nn_dropout_forward(a->resid_dropout, &y);
  if (!s) s = zt_add(x, y, &x1);
  if (!s) s = zt_nn_layer_norm_forward(b->ln_2, x1, &h);
  if (!s) s = zt_nn_mlp_forward(b->mlp, h, &f);
  if (!s) s = zt_add(x1, f, out);
  zt_tensor *all[] = {h, qkv, qkv3[0], qkv3[1], qkv3[2], att, y, x1, f};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) zt_tensor_free(all[i]);
  return s ? zt__error_prefix(s, "in Block \"%s\"", b->base.name) : ZT_OK;
}

/* *logits (B, V) of x's (B, T, C) last position: ln_f on that row, then . wte^T. */
static zt_status head_last(zt_gpt2 *m, zt_tensor *x, zt_tensor **logits) {
  const int64_t B = x->shape[0], T = x->shape[1], C = x->shape[2];
  zt_tensor *last = NULL, *h = NULL, *h2 = NULL;
  zt_status s = zt_narrow(x, 1, T - 1, 1, &last);
  if (!s) s = zt_nn_layer_norm_forward(m->ln_f, last, &h);
  if (!s) s = zt_reshape(h, 2, (int64_t[]){B, C}, &h2);
  if (!s) s = zt_matmul(h2, m->wte->weight, false, true, logits);
  zt_tensor_free(last);
  zt_tensor_free(h);
  zt_tensor_free(h2);
  return s;
}

zt_status zt_gpt2_forward_cached(zt_gpt2 *m, zt_kv_cache *cache, zt_tensor *ids, zt_tensor **logits) {
  if (!m || !cache || !logits)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_gpt2_forward_cached: model, cache and logits are required");
  zt_status s = zt__gpt2_check_ids(m, ids);
  if (!s) s = check_cache(m, cache, ids);
  if (s) return zt__error_prefix(s, "zt_gpt2_forward_cached");
  bool prev = zt_set_grad_enabled(false);
  zt_tensor *x = NULL, *lg = NULL;
  s = zt__gpt2_embed(m, ids, zt_kv_cache_len(cache), &x);
  for (int l = 0; l < m->cfg.n_layer && !s; l++) {
    zt_tensor *y = NULL;
    s = block_cached(m->blocks[l], cache, l, x, &y);
    zt_tensor_free(x);
    x = y;
  }
  if (!s) s = head_last(m, x, &lg);
  zt_tensor_free(x);
  if (!s) s = zt_kv_cache_advance(cache, ids->shape[1]);
  zt_set_grad_enabled(prev);
  if (s) {
    zt_tensor_free(lg);
    return zt__error_prefix(s, "zt_gpt2_forward_cached");
  }
  *logits = lg;
  return ZT_OK;
}
