/* Registry entry of fused causal self-attention: qkv (B,T,3C) -> (B,T,C). Forward saves
 * qkv, the output and a per-row logsumexp (B,n_head,T), never a T x T matrix; backward
 * recomputes the scores from them block by block (kernels in cpu/attention.c). */
#include "core/status_internal.h"
#include "op.h"

#define K(x) ((const zt__attention_kernels *)(x)->kernels)

static zt_status attn_shape(zt__op_call *c) {
  zt_tensor *x = c->in[0];
  int n_head = (int)c->attrs.i[0];
  char sh[128];
  if (!x) return ZT_ERR(ZT_STATUS_INVALID_ARG, "qkv is NULL");
  ZT_TRY(zt__check_float(c->op->name, x, "qkv"));
  if (x->ndim != 3)
    return ZT_ERR(ZT_STATUS_SHAPE, "qkv must be 3-D (B, T, 3C), got shape %s", zt_shape_str(x->ndim, x->shape, sh));
  if (n_head <= 0) return ZT_ERR(ZT_STATUS_INVALID_ARG, "n_head must be positive, got %d", n_head);
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
  zt_status s = K(c)->forward(qkv, n_head, c->out[0], lse);
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
    s = K(b)->backward(use[0], use[1], use[2], b->grad_out[0], (int)b->attrs->i[0], b->grad_in[0]);
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
  return zt__op_run(&op_causal_attention, 1, &qkv, &at, out);
}
