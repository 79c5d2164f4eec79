/* The layers of GPT-2 as modules: Linear (Conv1D layout), LayerNorm, Embedding, Dropout,
 * MLP, causal self-attention and the pre-LN block. Forwards free every intermediate as
 * soon as the next op has consumed it: what backward needs is kept by the graph (saved
 * tensors hold their own storage references), nothing else stays alive. */
#include <stdlib.h>

#include "core/status_internal.h"
#include "zt/nn.h"

/* A layer struct whose first member is its module; freed by zt_module_free. */
static zt_status layer_alloc(size_t size, const char *kind, const char *name, void **out) {
  zt_module *m = calloc(1, size);
  if (!m) return ZT_ERR(ZT_STATUS_OOM, "%s \"%s\": out of host memory", kind, name ? name : "");
  zt_status s = zt_module_init(m, kind, name);
  if (s) {
    free(m);
    return s;
  }
  *out = m;
  return ZT_OK;
}

static zt_status init_normal(zt_tensor *t, double std) {
  bool prev = zt_set_grad_enabled(false);
  zt_status s = zt_tensor_normal_(t, 0.0, std);
  zt_set_grad_enabled(prev);
  return s;
}

static zt_status init_fill(zt_tensor *t, double v) {
  bool prev = zt_set_grad_enabled(false);
  zt_status s = zt_tensor_fill_(t, v);
  zt_set_grad_enabled(prev);
  return s;
}

static zt_status check_size(const char *kind, const char *what, int64_t v) {
  if (v <= 0) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: %s is %lld; it must be positive", kind, what, (long long)v);
  return ZT_OK;
}

/* Adds child (a layer) to m; on failure m still frees everything it owns. */
static zt_status add(zt_module *m, void *child) { return zt_module_add_child(m, (zt_module *)child); }

/* ------------------------------------------------------------------ Linear */

zt_status zt_nn_linear_new(const char *name, int64_t in, int64_t out, bool bias, zt_dtype dt, double init_std,
                           zt_nn_linear **out_layer) {
  if (!out_layer) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_nn_linear_new: out is NULL");
  ZT_TRY(check_size("Linear", "in", in));
  ZT_TRY(check_size("Linear", "out", out));
  zt_nn_linear *l = NULL;
  ZT_TRY(layer_alloc(sizeof *l, "Linear", name, (void **)&l));
  zt_status s = zt_module_new_param(&l->base, "weight", 2, (int64_t[]){in, out}, dt, true, &l->weight);
  if (!s) s = init_normal(l->weight, init_std);
  if (!s && bias) s = zt_module_new_param(&l->base, "bias", 1, (int64_t[]){out}, dt, false, &l->bias);
  if (s) {
    zt_module_free(&l->base);
    return s;
  }
  *out_layer = l;
  return ZT_OK;
}

zt_status zt_nn_linear_forward(zt_nn_linear *l, zt_tensor *x, zt_tensor **out) {
  if (!l) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_nn_linear_forward: layer is NULL");
  zt_status s = zt_linear_io(x, l->weight, l->bias, out);
  return s ? zt__error_prefix(s, "in Linear \"%s\"", l->base.name) : ZT_OK;
}

/* ------------------------------------------------------------------ LayerNorm */

zt_status zt_nn_layer_norm_new(const char *name, int64_t C, double eps, zt_dtype dt, zt_nn_layer_norm **out_layer) {
  if (!out_layer) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_nn_layer_norm_new: out is NULL");
  ZT_TRY(check_size("LayerNorm", "C", C));
  if (!(eps > 0)) return ZT_ERR(ZT_STATUS_INVALID_ARG, "LayerNorm: eps is %g; it must be positive", eps);
  zt_nn_layer_norm *l = NULL;
  ZT_TRY(layer_alloc(sizeof *l, "LayerNorm", name, (void **)&l));
  l->eps = eps;
  zt_status s = zt_module_new_param(&l->base, "weight", 1, (int64_t[]){C}, dt, false, &l->weight);
  if (!s) s = init_fill(l->weight, 1.0);
  if (!s) s = zt_module_new_param(&l->base, "bias", 1, (int64_t[]){C}, dt, false, &l->bias);
  if (s) {
    zt_module_free(&l->base);
    return s;
  }
  *out_layer = l;
  return ZT_OK;
}

zt_status zt_nn_layer_norm_forward(zt_nn_layer_norm *l, zt_tensor *x, zt_tensor **out) {
  if (!l) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_nn_layer_norm_forward: layer is NULL");
  zt_status s = zt_layer_norm(x, l->weight, l->bias, l->eps, out);
  return s ? zt__error_prefix(s, "in LayerNorm \"%s\"", l->base.name) : ZT_OK;
}

/* ------------------------------------------------------------------ Embedding */

zt_status zt_nn_embedding_new(const char *name, int64_t V, int64_t C, zt_dtype dt, double init_std,
                              zt_nn_embedding **out_layer) {
  if (!out_layer) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_nn_embedding_new: out is NULL");
  ZT_TRY(check_size("Embedding", "V", V));
  ZT_TRY(check_size("Embedding", "C", C));
  zt_nn_embedding *e = NULL;
  ZT_TRY(layer_alloc(sizeof *e, "Embedding", name, (void **)&e));
  zt_status s = zt_module_new_param(&e->base, "weight", 2, (int64_t[]){V, C}, dt, true, &e->weight);
  if (!s) s = init_normal(e->weight, init_std);
  if (s) {
    zt_module_free(&e->base);
    return s;
  }
  *out_layer = e;
  return ZT_OK;
}

zt_status zt_nn_embedding_forward(zt_nn_embedding *e, zt_tensor *ids, zt_tensor **out) {
  if (!e) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_nn_embedding_forward: layer is NULL");
  zt_status s = zt_embedding(e->weight, ids, out);
  return s ? zt__error_prefix(s, "in Embedding \"%s\"", e->base.name) : ZT_OK;
}

/* ------------------------------------------------------------------ Dropout */

zt_status zt_nn_dropout_new(const char *name, double p, zt_nn_dropout **out_layer) {
  if (!out_layer) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_nn_dropout_new: out is NULL");
  if (!(p >= 0 && p < 1))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "Dropout \"%s\": p is %g; it must be in [0, 1)", name ? name : "", p);
  zt_nn_dropout *d = NULL;
  ZT_TRY(layer_alloc(sizeof *d, "Dropout", name, (void **)&d));
  d->p = p;
  *out_layer = d;
  return ZT_OK;
}

zt_status zt_nn_dropout_forward(zt_nn_dropout *d, zt_tensor **x) {
  if (!d || !x || !*x) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_nn_dropout_forward: NULL argument");
  /* Inactive dropout is the identity: keep the caller's tensor (no copy, no node). */
  if (!d->base.training || d->p == 0) return ZT_OK;
  zt_tensor *y = NULL;
  zt_status s = zt_dropout(*x, d->p, true, &y);
  if (s) return zt__error_prefix(s, "in Dropout \"%s\"", d->base.name);
  zt_tensor_free(*x);
  *x = y;
  return ZT_OK;
}

/* ------------------------------------------------------------------ MLP */

zt_status zt_nn_mlp_new(const char *name, int64_t C, double dropout, zt_dtype dt, double init_std, double proj_std,
                        zt_nn_mlp **out_layer) {
  if (!out_layer) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_nn_mlp_new: out is NULL");
  ZT_TRY(check_size("MLP", "C", C));
  zt_nn_mlp *m = NULL;
  ZT_TRY(layer_alloc(sizeof *m, "MLP", name, (void **)&m));
  zt_status s = zt_nn_linear_new("c_fc", C, 4 * C, true, dt, init_std, &m->c_fc);
  if (!s) s = add(&m->base, m->c_fc);
  if (!s) s = zt_nn_linear_new("c_proj", 4 * C, C, true, dt, proj_std, &m->c_proj);
  if (!s) s = add(&m->base, m->c_proj);
  if (!s) s = zt_nn_dropout_new("dropout", dropout, &m->dropout);
  if (!s) s = add(&m->base, m->dropout);
  if (s) {
    zt_module_free(&m->base);
    return s;
  }
  *out_layer = m;
  return ZT_OK;
}

zt_status zt_nn_mlp_forward(zt_nn_mlp *m, zt_tensor *x, zt_tensor **out) {
  if (!m || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_nn_mlp_forward: NULL argument");
  zt_tensor *h = NULL, *g = NULL, *y = NULL;
  // h (B,T,4C) = x . c_fc; g = gelu(h); y (B,T,C) = g . c_proj
  zt_status s = zt_nn_linear_forward(m->c_fc, x, &h);
  if (!s) s = zt_gelu(h, &g);
  zt_tensor_free(h);
  if (!s) s = zt_nn_linear_forward(m->c_proj, g, &y);
  zt_tensor_free(g);
  if (!s) s = zt_nn_dropout_forward(m->dropout, &y);
  if (s) {
    zt_tensor_free(y);
    return s;
  }
  *out = y;
  return ZT_OK;
}

/* ------------------------------------------------------------------ attention */

zt_status zt_nn_attention_new(const char *name, int64_t C, int n_head, double dropout, zt_dtype dt, double init_std,
                              double proj_std, zt_nn_attention **out_layer) {
  if (!out_layer) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_nn_attention_new: out is NULL");
  ZT_TRY(check_size("CausalSelfAttention", "C", C));
  ZT_TRY(check_size("CausalSelfAttention", "n_head", n_head));
  if (C % n_head)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "CausalSelfAttention: C = %lld is not divisible by n_head = %d",
                  (long long)C, n_head);
  zt_nn_attention *a = NULL;
  ZT_TRY(layer_alloc(sizeof *a, "CausalSelfAttention", name, (void **)&a));
  a->n_head = n_head;
  zt_status s = zt_nn_linear_new("c_attn", C, 3 * C, true, dt, init_std, &a->c_attn);
  if (!s) s = add(&a->base, a->c_attn);
  if (!s) s = zt_nn_linear_new("c_proj", C, C, true, dt, proj_std, &a->c_proj);
  if (!s) s = add(&a->base, a->c_proj);
  if (!s) s = zt_nn_dropout_new("resid_dropout", dropout, &a->resid_dropout);
  if (!s) s = add(&a->base, a->resid_dropout);
  if (s) {
    zt_module_free(&a->base);
    return s;
  }
  *out_layer = a;
  return ZT_OK;
}

zt_status zt_nn_attention_forward(zt_nn_attention *a, zt_tensor *x, zt_tensor **out) {
  if (!a || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_nn_attention_forward: NULL argument");
  zt_tensor *qkv = NULL, *att = NULL, *y = NULL;
  // qkv (B,T,3C) = x . c_attn: q, k, v side by side, split inside the fused attention
  zt_status s = zt_nn_linear_forward(a->c_attn, x, &qkv);
  if (!s) s = zt_causal_attention(qkv, a->n_head, &att);
  if (s == ZT_OK && !att) s = ZT_ERR(ZT_STATUS_INTERNAL, "causal attention gave no output");
  zt_tensor_free(qkv);
  if (!s) s = zt_nn_linear_forward(a->c_proj, att, &y);
  zt_tensor_free(att);
  if (!s) s = zt_nn_dropout_forward(a->resid_dropout, &y);
  if (s) {
    zt_tensor_free(y);
    return zt__error_prefix(s, "in CausalSelfAttention \"%s\"", a->base.name);
  }
  *out = y;
  return ZT_OK;
}

/* ------------------------------------------------------------------ block */

zt_status zt_nn_block_new(const char *name, int64_t C, int n_head, double dropout, zt_dtype dt, double init_std,
                          double proj_std, zt_nn_block **out_layer) {
  if (!out_layer) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_nn_block_new: out is NULL");
  zt_nn_block *b = NULL;
  ZT_TRY(layer_alloc(sizeof *b, "Block", name, (void **)&b));
  /* children in Hugging Face's order: ln_1, attn, ln_2, mlp */
  zt_status s = zt_nn_layer_norm_new("ln_1", C, 1e-5, dt, &b->ln_1);
  if (!s) s = add(&b->base, b->ln_1);
  if (!s) s = zt_nn_attention_new("attn", C, n_head, dropout, dt, init_std, proj_std, &b->attn);
  if (!s) s = add(&b->base, b->attn);
  if (!s) s = zt_nn_layer_norm_new("ln_2", C, 1e-5, dt, &b->ln_2);
  if (!s) s = add(&b->base, b->ln_2);
  if (!s) s = zt_nn_mlp_new("mlp", C, dropout, dt, init_std, proj_std, &b->mlp);
  if (!s) s = add(&b->base, b->mlp);
  if (s) {
    zt_module_free(&b->base);
    return s;
  }
  *out_layer = b;
  return ZT_OK;
}

/* out = x + f(ln(x)) for one residual branch; x borrowed. */
static zt_status residual(zt_tensor *x, zt_nn_layer_norm *ln, void *branch,
                          zt_status (*f)(void *, zt_tensor *, zt_tensor **), zt_tensor **out) {
  zt_tensor *h = NULL, *r = NULL;
  zt_status s = zt_nn_layer_norm_forward(ln, x, &h);
  if (!s) s = f(branch, h, &r);
  zt_tensor_free(h);
  if (!s) s = zt_add(x, r, out);
  zt_tensor_free(r);
  return s;
}

static zt_status attn_fn(void *a, zt_tensor *x, zt_tensor **out) { return zt_nn_attention_forward(a, x, out); }
static zt_status mlp_fn(void *m, zt_tensor *x, zt_tensor **out) { return zt_nn_mlp_forward(m, x, out); }

zt_status zt_nn_block_forward(zt_nn_block *b, zt_tensor *x, zt_tensor **out) {
  if (!b || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_nn_block_forward: NULL argument");
  zt_tensor *x1 = NULL;
  *out = NULL;
  zt_status s = zt_module_pre_forward(&b->base);
  if (!s) s = residual(x, b->ln_1, b->attn, attn_fn, &x1);
  if (!s) s = residual(x1, b->ln_2, b->mlp, mlp_fn, out);
  zt_tensor_free(x1);
  if (!s) s = zt_module_post_forward(&b->base, 1, out);
  if (s) {
    zt_tensor_free(*out);
    *out = NULL;
  }
  return s ? zt__error_prefix(s, "in Block \"%s\"", b->base.name) : ZT_OK;
}

zt_status zt_check_token_ids(const zt_tensor *ids) {
  char sh[128];
  if (!ids) return ZT_ERR(ZT_STATUS_INVALID_ARG, "ids is NULL");
  if (ids->dtype != ZT_DTYPE_I32)
    return ZT_ERR(ZT_STATUS_DTYPE, "ids have dtype %s; token ids must be i32", zt_dtype_name(ids->dtype));
  if (ids->ndim != 2 || ids->shape[0] < 1 || ids->shape[1] < 1)
    return ZT_ERR(ZT_STATUS_SHAPE, "ids have shape %s; they must be (B, T) with B, T >= 1",
                  zt_shape_str(ids->ndim, ids->shape, sh));
  return ZT_OK;
}
