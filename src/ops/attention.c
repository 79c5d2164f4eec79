/* Registry entries of attention (kernels in cpu/attention.c).
 * causal_attention: fused causal self-attention, qkv (B,T,3C) -> (B,T,C), or grouped-query
 * with n_kv_head < n_head: qkv (B,T,(n_head + 2 n_kv_head) hs) -> (B,T,n_head hs), each kv
 * head read in place by the query heads sharing it (attrs.i[1] = n_kv_head). Forward saves qkv,
 * the output and a per-row logsumexp (B,n_head,T), never a T x T matrix; backward
 * recomputes the scores from them block by block.
 * cached_attention: new queries against a KV cache (incremental decoding), grouped-query
 * heads allowed; inference only: it has no backward and refuses to run where a graph would
 * be recorded. */
#include "core/status_internal.h"
#include "op.h"

#define K(x) ((const zt__attention_kernels *)(x)->kernels)

/* Grouped-query (n_kv < n_head) shape rule: qkv's last dim is (n_head + 2 n_kv) hs. */
static zt_status gqa_shape(zt__op_call *c, const zt_tensor *x, int n_head, int n_kv) {
  char sh[128];
  if (n_kv <= 0 || n_kv > n_head || n_head % n_kv != 0)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "n_kv_head = %d must be positive and divide n_head = %d (each kv head serves n_head / n_kv_head "
                  "query heads)", n_kv, n_head);
  int64_t w = x->shape[2], heads = n_head + 2 * (int64_t)n_kv;
  if (w == 0 || w % heads != 0)
    return ZT_ERR(ZT_STATUS_SHAPE,
                  "qkv's last dim must be (n_head + 2 n_kv_head) * head_dim = %lld * head_dim with head_dim > 0 "
                  "(q heads, then k heads, then v heads), got %lld (shape %s)",
                  (long long)heads, (long long)w, zt_shape_str(x->ndim, x->shape, sh));
  zt__tensor_meta *m = &c->out_meta[0];
  m->ndim = 3;
  m->shape[0] = x->shape[0];
  m->shape[1] = x->shape[1];
  m->shape[2] = w / heads * n_head;
  m->dtype = x->dtype;
  c->n_out = 1;
  return ZT_OK;
}

static zt_status attn_shape(zt__op_call *c) {
  zt_tensor *x = c->in[0];
  int n_head = (int)c->attrs.i[0], n_kv = (int)c->attrs.i[1];
  char sh[128];
  if (!x) return ZT_ERR(ZT_STATUS_INVALID_ARG, "qkv is NULL");
  ZT_TRY(zt__check_float(c->op->name, x, "qkv"));
  if (x->ndim != 3)
    return ZT_ERR(ZT_STATUS_SHAPE, "qkv must be 3-D (B, T, 3C), got shape %s", zt_shape_str(x->ndim, x->shape, sh));
  if (n_head <= 0) return ZT_ERR(ZT_STATUS_INVALID_ARG, "n_head must be positive, got %d", n_head);
  if (n_kv != n_head) return gqa_shape(c, x, n_head, n_kv);
  int64_t c3 = x->shape[2];
  if (c3 == 0 || c3 % 3 != 0)
    return ZT_ERR(ZT_STATUS_SHAPE,
                  "qkv's last dim must be 3C (q, k and v side by side) with C > 0, got %lld (shape %s), which is "
                  "not a positive multiple of 3",
                  (long long)c3, zt_shape_str(x->ndim, x->shape, sh));
  if ((c3 / 3) % n_head != 0)
    return ZT_ERR(ZT_STATUS_SHAPE, "C = %lld (qkv's last dim / 3) is not divisible by n_head = %d", (long long)(c3 / 3),
                  n_head);
  zt__tensor_meta *m = &c->out_meta[0];
  m->ndim = 3;
  m->shape[0] = x->shape[0];
  m->shape[1] = x->shape[1];
  m->shape[2] = c3 / 3;
  m->dtype = x->dtype;
  c->n_out = 1;
  return ZT_OK;
}

static zt_status attn_forward(zt__op_call *c) {
  zt_tensor *qkv = c->in[0], *lse = NULL;
  int n_head = (int)c->attrs.i[0];
  int64_t shape[3] = {qkv->shape[0], n_head, qkv->shape[1]};
  /* lse only outlives forward when it is saved for backward. */
  zt_mem_tag tag = c->node ? zt_mem_tag_current() : ZT_MEM_TAG_TEMP;
  ZT_TRY(zt_tensor_empty_tagged(3, shape, qkv->dtype, zt_tensor_device(qkv), tag, &lse));
  zt_status s = K(c)->forward(qkv, n_head, (int)c->attrs.i[1], c->out[0], lse);
  if (!s) s = zt__op_save(c, qkv);
  if (!s) s = zt__op_save(c, c->out[0]);
  if (!s) s = zt__op_save(c, lse);
  zt_tensor_free(lse);
  return s;
}

/* Saved tensors come back through saved-tensor hooks, which may hand out any layout. */
static zt_status contiguous_or_self(zt_tensor *t, zt_tensor **tmp, zt_tensor **use) {
  *tmp = NULL;
  *use = t;
  if (zt_tensor_is_contiguous(t)) return ZT_OK;
  ZT_TRY(zt__make_contiguous(t, tmp));
  *use = *tmp;
  return ZT_OK;
}

static zt_status attn_backward(zt__op_bwd *b) {
  if (!b->needs_input_grad[0]) return ZT_OK;
  zt_tensor *saved[3], *tmp[3] = {NULL, NULL, NULL}, *use[3];
  zt_status s = ZT_OK;
  for (int i = 0; i < 3 && !s; i++) {
    s = zt__op_saved(b, i, &saved[i]);
    if (!s) s = contiguous_or_self(saved[i], &tmp[i], &use[i]);
  }
  if (!s) s = zt__op_grad_like_input(b, 0, false, &b->grad_in[0]);
  if (!s) {
    s = K(b)->backward(use[0], use[1], use[2], b->grad_out[0], (int)b->attrs->i[0], (int)b->attrs->i[1],
                       b->grad_in[0]);
    if (s) {
      zt_tensor_free(b->grad_in[0]);
      b->grad_in[0] = NULL;
    }
  }
  for (int i = 0; i < 3; i++) zt_tensor_free(tmp[i]);
  return s;
}

static const zt__op op_causal_attention = {"causal_attention", "CausalAttentionBackward", 1, 0, 0,
                                          attn_shape, attn_forward, attn_backward, {[ZT_DEVICE_CPU] = &zt__cpu_attention_kernels}, NULL};

zt_status zt_causal_attention(zt_tensor *qkv, int n_head, zt_tensor **out) {
  zt__op_attrs at = {0};
  at.i[0] = n_head;
  at.i[1] = n_head;
  return zt__op_run(&op_causal_attention, 1, &qkv, &at, out);
}

zt_status zt_causal_attention_gqa(zt_tensor *qkv, int n_head, int n_kv_head, zt_tensor **out) {
  zt__op_attrs at = {0};
  at.i[0] = n_head;
  at.i[1] = n_kv_head;
  return zt__op_run(&op_causal_attention, 1, &qkv, &at, out);
}

/* q (B,Tq,H*hs), k and v (B,Hkv,S,hs); attr len: positions held, Tq <= len <= S. */
static zt_status cached_shape(zt__op_call *c) {
  zt_tensor *q = c->in[0], *k = c->in[1], *v = c->in[2];
  int64_t len = c->attrs.i[0];
  char s1[128], s2[128];
  if (!q || !k || !v) return ZT_ERR(ZT_STATUS_INVALID_ARG, "q, k and v are required (one is NULL)");
  ZT_TRY(zt__check_float(c->op->name, q, "q"));
  ZT_TRY(zt__check_same_dtype(c->op->name, q, k));
  ZT_TRY(zt__check_same_dtype(c->op->name, q, v));
  if (q->ndim != 3)
    return ZT_ERR(ZT_STATUS_SHAPE, "q must be 3-D (B, Tq, n_head * head_dim), got shape %s",
                  zt_shape_str(q->ndim, q->shape, s1));
  if (k->ndim != 4 || !zt_shape_equal(k->ndim, k->shape, v->ndim, v->shape))
    return ZT_ERR(ZT_STATUS_SHAPE,
                  "the cache's k and v must both be 4-D (B, n_kv_head, capacity, head_dim), got %s and %s",
                  zt_shape_str(k->ndim, k->shape, s1), zt_shape_str(v->ndim, v->shape, s2));
  int64_t B = q->shape[0], Tq = q->shape[1], Hkv = k->shape[1], S = k->shape[2], hs = k->shape[3];
  if (k->shape[0] != B)
    return ZT_ERR(ZT_STATUS_SHAPE, "q has batch %lld but the cache %lld; they must match", (long long)B,
                  (long long)k->shape[0]);
  if (hs < 1 || Hkv < 1 || q->shape[2] % hs || q->shape[2] / hs % Hkv || q->shape[2] == 0)
    return ZT_ERR(ZT_STATUS_SHAPE,
                  "q's last dim %lld must be n_head * head_dim with head_dim = %lld (the cache's last dim) and "
                  "n_head a positive multiple of the cache's %lld kv heads",
                  (long long)q->shape[2], (long long)hs, (long long)Hkv);
  if (len < Tq || len > S)
    return ZT_ERR(ZT_STATUS_SHAPE,
                  "the cache holds %lld positions, of capacity %lld, for %lld queries: it must hold the queries' "
                  "own keys (Tq <= len <= capacity)",
                  (long long)len, (long long)S, (long long)Tq);
  zt__tensor_meta *m = &c->out_meta[0];
  m->ndim = 3;
  m->shape[0] = B;
  m->shape[1] = Tq;
  m->shape[2] = q->shape[2];
  m->dtype = q->dtype;
  c->n_out = 1;
  return ZT_OK;
}

#define NO_BACKWARD                                                                                            \
  "has no backward: it is for inference; run it with grad mode off (zt_set_grad_enabled(false)), and train " \
  "through zt_causal_attention"

static zt_status cached_forward(zt__op_call *c) {
  if (c->node) return ZT_ERR(ZT_STATUS_AUTOGRAD, "an input requires grad, but cached attention " NO_BACKWARD);
  return K(c)->cached(c->in[0], c->in[1], c->in[2], c->attrs.i[0], c->out[0]);
}

static zt_status cached_backward(zt__op_bwd *b) {
  (void)b;
  return ZT_ERR(ZT_STATUS_AUTOGRAD, "cached attention " NO_BACKWARD);
}

static const zt__op op_cached_attention = {"cached_attention", "CachedAttentionBackward", 3, 0, 0,
                                           cached_shape, cached_forward, cached_backward,
                                           {[ZT_DEVICE_CPU] = &zt__cpu_attention_kernels}, NULL};

zt_status zt_cached_attention(zt_tensor *q, zt_tensor *k, zt_tensor *v, int64_t len, zt_tensor **out) {
  zt__op_attrs at = {0};
  at.i[0] = len;
  return zt__op_run(&op_cached_attention, 3, (zt_tensor *[]){q, k, v}, &at, out);
}
