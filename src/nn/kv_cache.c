/* The KV cache of incremental decoding: per layer, the keys and values of the positions a
 * decoder has seen, (batch, n_kv_head, capacity, head_dim) tensors made up front (tag
 * ACTIVATION). Model-agnostic: a model writes each layer's new keys and values at [len,
 * len + T) and commits the step once every layer has them, so a failed step leaves the
 * cache as it was (the rows past len are overwritten by the next try). */
#include <stdlib.h>

#include "core/status_internal.h"
#include "core/tensor_internal.h"
#include "zt/nn.h"

struct zt_kv_cache {
  zt_kv_cache_config cfg;
  zt_tensor **k, **v; /* per layer */
  int64_t len;        /* committed positions */
  int64_t *staged;    /* per layer: positions written at [len, len + staged) since the last commit */
};

void zt_kv_cache_free(zt_kv_cache *c) {
  if (!c) return;
  for (int l = 0; c->k && l < c->cfg.n_layer; l++) {
    zt_tensor_free(c->k[l]);
    zt_tensor_free(c->v[l]);
  }
  free(c->k);
  free(c->v);
  free(c->staged);
  free(c);
}

static zt_status check_config(const zt_kv_cache_config *g) {
  if (g->n_layer < 1 || g->n_kv_head < 1 || g->head_dim < 1 || g->batch < 1 || g->capacity < 1)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_kv_cache_new: n_layer %d, n_kv_head %d, head_dim %lld, batch %lld and capacity %lld must all be "
                  "positive",
                  g->n_layer, g->n_kv_head, (long long)g->head_dim, (long long)g->batch, (long long)g->capacity);
  if (g->dtype != ZT_DTYPE_F32 && g->dtype != ZT_DTYPE_F64)
    return ZT_ERR(ZT_STATUS_DTYPE, "zt_kv_cache_new: dtype %s; the cache holds f32 or f64 (the model's dtype)",
                  zt_dtype_name(g->dtype));
  return ZT_OK;
}

zt_status zt_kv_cache_new(const zt_kv_cache_config *cfg, zt_kv_cache **out) {
  if (!cfg || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_kv_cache_new: config and out are required");
  ZT_TRY(check_config(cfg));
  zt_kv_cache *c = calloc(1, sizeof *c);
  int L = cfg->n_layer;
  if (c) {
    c->cfg = *cfg;
    c->k = calloc((size_t)L, sizeof *c->k);
    c->v = calloc((size_t)L, sizeof *c->v);
    c->staged = calloc((size_t)L, sizeof *c->staged);
  }
  if (!c || !c->k || !c->v || !c->staged) {
    zt_kv_cache_free(c);
    return ZT_ERR(ZT_STATUS_OOM, "zt_kv_cache_new: out of host memory");
  }
  int64_t shape[4] = {cfg->batch, cfg->n_kv_head, cfg->capacity, cfg->head_dim};
  zt_status s = ZT_OK;
  for (int l = 0; l < L && !s; l++) {
    s = zt_tensor_empty_tagged(4, shape, cfg->dtype, cfg->device, ZT_MEM_TAG_ACTIVATION, &c->k[l]);
    if (!s) s = zt_tensor_empty_tagged(4, shape, cfg->dtype, cfg->device, ZT_MEM_TAG_ACTIVATION, &c->v[l]);
  }
  if (s) {
    zt_kv_cache_free(c);
    return zt__error_prefix(s, "zt_kv_cache_new: %d layers of keys and values", L);
  }
  *out = c;
  return ZT_OK;
}

const zt_kv_cache_config *zt_kv_cache_get_config(const zt_kv_cache *c) { return c ? &c->cfg : NULL; }
int64_t zt_kv_cache_len(const zt_kv_cache *c) { return c ? c->len : 0; }

void zt_kv_cache_reset(zt_kv_cache *c) {
  if (!c) return;
  c->len = 0;
  for (int l = 0; l < c->cfg.n_layer; l++) c->staged[l] = 0;
}

/* x (B, T, n_kv_head * head_dim), any strides, as the view (B, n_kv_head, T, head_dim). */
static zt_status heads_view(const zt_kv_cache *c, zt_tensor *x, zt_tensor **out) {
  const int64_t hs = c->cfg.head_dim;
  int64_t shape[4] = {x->shape[0], c->cfg.n_kv_head, x->shape[1], hs};
  int64_t stride[4] = {x->stride[0], hs * x->stride[2], x->stride[1], x->stride[2]};
  return zt__tensor_new_view(x->storage, x->offset, 4, shape, stride, x->dtype, out);
}

/* Rows [len, len + T) of t (B, n_kv_head, capacity, head_dim), as a view. */
static zt_status rows_view(const zt_kv_cache *c, zt_tensor *t, int64_t T, zt_tensor **out) {
  return zt__tensor_new_view(t->storage, t->offset + c->len * c->cfg.head_dim, 4,
                             (int64_t[]){t->shape[0], t->shape[1], T, t->shape[3]}, t->stride, t->dtype, out);
}

static zt_status check_kv(const zt_kv_cache *c, const char *what, const zt_tensor *x) {
  char sh[128];
  const zt_kv_cache_config *g = &c->cfg;
  if (!x) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s is NULL", what);
  if (x->ndim != 3 || x->shape[0] != g->batch || x->shape[2] != g->n_kv_head * g->head_dim)
    return ZT_ERR(ZT_STATUS_SHAPE, "%s has shape %s; the cache takes (%lld, T, %lld) (batch, positions, n_kv_head %d "
                  "* head_dim %lld)", what, zt_shape_str(x->ndim, x->shape, sh), (long long)g->batch,
                  (long long)(g->n_kv_head * g->head_dim), g->n_kv_head, (long long)g->head_dim);
  if (x->dtype != g->dtype)
    return ZT_ERR(ZT_STATUS_DTYPE, "%s has dtype %s but the cache holds %s", what, zt_dtype_name(x->dtype),
                  zt_dtype_name(g->dtype));
  return ZT_OK;
}

zt_status zt_kv_cache_append(zt_kv_cache *c, int layer, zt_tensor *k, zt_tensor *v) {
  if (!c) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_kv_cache_append: cache is NULL");
  if (layer < 0 || layer >= c->cfg.n_layer)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_kv_cache_append: layer %d is outside the cache's %d layers", layer,
                  c->cfg.n_layer);
  zt_status s = check_kv(c, "k", k);
  if (!s) s = check_kv(c, "v", v);
  if (!s && (k->shape[1] != v->shape[1] || k->shape[1] < 1))
    s = ZT_ERR(ZT_STATUS_SHAPE, "k has %lld positions and v %lld; they must be the same, at least 1",
               (long long)k->shape[1], (long long)v->shape[1]);
  if (s) return zt__error_prefix(s, "zt_kv_cache_append");
  int64_t T = k->shape[1];
  if (c->len + T > c->cfg.capacity)
    return ZT_ERR(ZT_STATUS_STATE,
                  "zt_kv_cache_append: the cache holds %lld of its %lld positions; %lld more do not fit (reset it "
                  "with zt_kv_cache_reset and run the last positions again, or make a larger one)",
                  (long long)c->len, (long long)c->cfg.capacity, (long long)T);
  zt_tensor *src[2] = {NULL, NULL}, *dst[2] = {NULL, NULL}, *in[2] = {k, v}, *cache[2] = {c->k[layer], c->v[layer]};
  for (int i = 0; i < 2 && !s; i++) {
    s = heads_view(c, in[i], &src[i]);
    if (!s) s = rows_view(c, cache[i], T, &dst[i]);
    if (!s) s = zt_tensor_copy_(dst[i], src[i]); /* a device copy (across devices too) */
  }
  for (int i = 0; i < 2; i++) {
    zt_tensor_free(src[i]);
    zt_tensor_free(dst[i]);
  }
  if (s) return zt__error_prefix(s, "zt_kv_cache_append");
  c->staged[layer] = T;
  return ZT_OK;
}

zt_status zt_kv_cache_attend(zt_kv_cache *c, int layer, zt_tensor *q, zt_tensor *k, zt_tensor *v, zt_tensor **out) {
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_kv_cache_attend: out is NULL");
  ZT_TRY(zt_kv_cache_append(c, layer, k, v));
  zt_status s = zt_cached_attention(q, c->k[layer], c->v[layer], c->len + k->shape[1], out);
  return s ? zt__error_prefix(s, "zt_kv_cache_attend (layer %d)", layer) : ZT_OK;
}

zt_status zt_kv_cache_advance(zt_kv_cache *c, int64_t n) {
  if (!c) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_kv_cache_advance: cache is NULL");
  for (int l = 0; l < c->cfg.n_layer; l++)
    if (c->staged[l] != n)
      return ZT_ERR(ZT_STATUS_STATE,
                    "zt_kv_cache_advance: layer %d took %lld new positions, not %lld: every layer must take the "
                    "step's keys and values (zt_kv_cache_append or zt_kv_cache_attend) before it is committed",
                    l, (long long)c->staged[l], (long long)n);
  c->len += n;
  for (int l = 0; l < c->cfg.n_layer; l++) c->staged[l] = 0;
  return ZT_OK;
}

static zt_status decode_check(const zt_kv_cache *c, const zt_kv_decoder *d, const zt_tensor *ids) {
  const zt_kv_cache_config *g = &c->cfg;
  if (g->n_layer != d->n_layer)
    return ZT_ERR(ZT_STATUS_SHAPE, "the cache holds %d layers, the model has %d: make the cache for this model",
                  g->n_layer, d->n_layer);
  if (ids->ndim != 2 || g->batch != ids->shape[0])
    return ZT_ERR(ZT_STATUS_SHAPE, "the ids have %lld rows but the cache %lld", (long long)ids->shape[0],
                  (long long)g->batch);
  int64_t len = c->len, T = ids->shape[1];
  if (len + T > g->capacity)
    return ZT_ERR(ZT_STATUS_STATE,
                  "the cache holds %lld positions of its %lld; %lld more do not fit (past the model's context, "
                  "reset it and run the window of the last tokens again, as zt_lm_sample does)",
                  (long long)len, (long long)g->capacity, (long long)T);
  return ZT_OK;
}

/* The last position of x (B, T, C), normed, times w (V, C) transposed: (B, V). */
static zt_status last_logits(const zt_kv_decoder *d, zt_tensor *x, zt_tensor **logits) {
  const int64_t B = x->shape[0], T = x->shape[1], C = x->shape[2];
  zt_tensor *last = NULL, *h = NULL, *h2 = NULL;
  zt_status s = zt_narrow(x, 1, T - 1, 1, &last);
  if (!s) s = d->norm(d->ctx, last, &h);
  if (!s) s = zt_reshape(h, 2, (int64_t[]){B, C}, &h2);
  if (!s) s = zt_matmul(h2, d->out_weight, false, true, logits);
  zt_tensor_free(last);
  zt_tensor_free(h);
  zt_tensor_free(h2);
  return s;
}

zt_status zt_kv_cache_decode(zt_kv_cache *c, const zt_kv_decoder *d, zt_tensor *ids, zt_tensor **logits) {
  if (!c || !d || !ids || !logits) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_kv_cache_decode: NULL argument");
  ZT_TRY(decode_check(c, d, ids));
  bool prev = zt_set_grad_enabled(false);
  zt_tensor *x = NULL, *lg = NULL;
  zt_status s = d->embed(d->ctx, ids, c->len, &x);
  for (int l = 0; l < d->n_layer && !s; l++) {
    zt_tensor *y = NULL;
    s = d->layer(d->ctx, c, l, x, &y);
    zt_tensor_free(x);
    x = y;
  }
  if (!s) s = last_logits(d, x, &lg);
  zt_tensor_free(x);
  if (!s) s = zt_kv_cache_advance(c, ids->shape[1]);
  zt_set_grad_enabled(prev);
  if (s) {
    zt_tensor_free(lg);
    return s;
  }
  *logits = lg;
  return ZT_OK;
}
