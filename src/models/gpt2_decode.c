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

/* The cache's layers, heads and dtype are the model's (its rows and room: zt_kv_cache_decode). */
static zt_status check_cache(const zt_gpt2 *m, const zt_kv_cache *cache) {
  const zt_kv_cache_config *g = zt_kv_cache_get_config(cache);
  const zt_gpt2_config *c = &m->cfg;
  if (g->n_layer != c->n_layer || g->n_kv_head != c->n_head || g->head_dim != c->n_embd / c->n_head ||
      g->dtype != m->dtype)
    return ZT_ERR(ZT_STATUS_SHAPE,
                  "the cache holds %d layers of %d heads of %lld (%s), the model has %d of %d of %d (%s): make the "
                  "cache with zt_gpt2_kv_cache_new",
                  g->n_layer, g->n_kv_head, (long long)g->head_dim, zt_dtype_name(g->dtype), c->n_layer, c->n_head,
                  c->n_embd / c->n_head, zt_dtype_name(m->dtype));
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
static zt_status embed(void *ctx, zt_tensor *ids, int64_t pos0, zt_tensor **x) {
  return zt__gpt2_embed(ctx, ids, pos0, x);
}
static zt_status layer(void *ctx, zt_kv_cache *c, int l, zt_tensor *x, zt_tensor **out) {
  return block_cached(((zt_gpt2 *)ctx)->blocks[l], c, l, x, out);
}
static zt_status norm(void *ctx, zt_tensor *x, zt_tensor **out) {
  return zt_nn_layer_norm_forward(((zt_gpt2 *)ctx)->ln_f, x, out);
}

zt_status zt_gpt2_forward_cached(zt_gpt2 *m, zt_kv_cache *cache, zt_tensor *ids, zt_tensor **logits) {
  if (!m || !cache || !logits)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_gpt2_forward_cached: model, cache and logits are required");
  zt_status s = zt__gpt2_check_ids(m, ids);
  if (!s) s = check_cache(m, cache);
  zt_kv_decoder d = {m->cfg.n_layer, embed, layer, norm, m->wte->weight, m};
  if (!s) s = zt_kv_cache_decode(cache, &d, ids, logits);
  return s ? zt__error_prefix(s, "zt_gpt2_forward_cached") : ZT_OK;
}
