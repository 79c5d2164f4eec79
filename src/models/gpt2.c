/* GPT-2 (pre-LN, GELU tanh, learned positions, tied input/output embedding) built from
 * the nn modules, with Hugging Face GPT2LMHeadModel's parameter names, order and Conv1D
 * layouts. The loss path never holds B*T*V logits: the output layer and cross-entropy
 * run fused and chunked (zt_lm_head_cross_entropy) against the tied wte. The blocks run as
 * the sequence "transformer.h" (zt_module_run_sequence), which memory strategies wrap from
 * outside (zt/strategy.h); the model knows none of them. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "core/backend.h"
#include "gpt2_internal.h"
#include "lm_internal.h"

/* ------------------------------------------------------------------ configs */

typedef struct preset {
  const char *name;
  zt_gpt2_config cfg;
} preset;

/* Dropout 0 everywhere: the presets are for training from scratch, where it only slows
 * learning down (nanoGPT's choice); set config.dropout for more. gpt2-tiny is byte-level
 * (vocab 256) and small enough to learn the default data in a minute or two on 2 cores. */
static const preset presets[] = {
    {"gpt2-tiny", {4, 4, 128, 256, 256, 0.0}},
    {"gpt2-124m", {12, 12, 768, 50257, 1024, 0.0}},
    {"gpt2-350m", {24, 16, 1024, 50257, 1024, 0.0}},
    {"gpt2-774m", {36, 20, 1280, 50257, 1024, 0.0}},
    {"gpt2-1558m", {48, 25, 1600, 50257, 1024, 0.0}},
};
#define N_PRESETS ((int)(sizeof presets / sizeof presets[0]))

zt_status zt_gpt2_preset(const char *name, zt_gpt2_config *out) {
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_gpt2_preset: out is NULL");
  for (int i = 0; name && i < N_PRESETS; i++)
    if (!strcmp(name, presets[i].name)) {
      *out = presets[i].cfg;
      return ZT_OK;
    }
  return ZT_ERR(ZT_STATUS_INVALID_ARG,
                "unknown model preset \"%s\"; the presets are " ZT_GPT2_PRESET_NAMES,
                name ? name : "(null)");
}

zt_status zt_gpt2_config_validate(const zt_gpt2_config *c) {
  if (!c) return ZT_ERR(ZT_STATUS_INVALID_ARG, "GPT-2 config is NULL");
  if (c->n_layer < 1 || c->n_layer > 9999)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "GPT-2 config: n_layer is %d; it must be in [1, 9999]", c->n_layer);
  if (c->n_head < 1) return ZT_ERR(ZT_STATUS_INVALID_ARG, "GPT-2 config: n_head is %d; it must be positive", c->n_head);
  if (c->n_embd < 1) return ZT_ERR(ZT_STATUS_INVALID_ARG, "GPT-2 config: n_embd is %d; it must be positive", c->n_embd);
  if (c->n_embd % c->n_head)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "GPT-2 config: n_embd = %d is not divisible by n_head = %d (each head gets n_embd / n_head dims)",
                  c->n_embd, c->n_head);
  if (c->n_embd > INT_MAX / 4)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "GPT-2 config: n_embd = %d is too large (4 * n_embd must fit an int)",
                  c->n_embd);
  if (c->vocab_size < 1)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "GPT-2 config: vocab_size is %d; it must be positive", c->vocab_size);
  if (c->block_size < 1)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "GPT-2 config: block_size (context length) is %d; it must be positive",
                  c->block_size);
  if (!(c->dropout >= 0 && c->dropout < 1))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "GPT-2 config: dropout is %g; it must be in [0, 1)", c->dropout);
  return ZT_OK;
}

int64_t zt_gpt2_config_num_params(const zt_gpt2_config *c) {
  int64_t C = c->n_embd, L = c->n_layer;
  int64_t per_layer = 2 * 2 * C            /* ln_1, ln_2 */
                      + C * 3 * C + 3 * C  /* c_attn */
                      + C * C + C          /* attn c_proj */
                      + C * 4 * C + 4 * C  /* c_fc */
                      + 4 * C * C + C;     /* mlp c_proj */
  return (int64_t)c->vocab_size * C + (int64_t)c->block_size * C + L * per_layer + 2 * C;
}

/* ------------------------------------------------------------------ building */

void zt_gpt2_free(zt_gpt2 *m) {
  if (!m) return;
  zt_module_free(m->root);
  free(m->blocks);
  free(m->params);
  free(m);
}

/* Child made: added to parent; with evict_to, its parameters go to the store now. */
static zt_status add_to(zt_gpt2 *m, zt_module *parent, void *child) {
  ZT_TRY(zt_module_add_child(parent, (zt_module *)child));
  if (!m->evict_to) return ZT_OK;
  char prefix[96]; /* the HF names: the child's path under the root */
  snprintf(prefix, sizeof prefix, "transformer.%s%s", parent == m->h ? "h." : "", ((zt_module *)child)->name);
  return zt_module_evict_params(child, prefix, m->evict_to);
}

static zt_status run_blocks(void *ctx, int first, int count, zt_tensor *x, zt_tensor **out);

/* Modules are made in state_dict order, so the Philox draws of the initialisation follow
 * that order too (reproducible from the seed alone). */
static zt_status build(zt_gpt2 *m) {
  const zt_gpt2_config *c = &m->cfg;
  zt_dtype dt = m->dtype;
  double std = 0.02, proj_std = 0.02 / sqrt(2.0 * c->n_layer);
  zt_module *tr = NULL;
  ZT_TRY(zt_module_new("GPT2LMHeadModel", "", &m->root));
  ZT_TRY(zt_module_new("GPT2Model", "transformer", &tr));
  ZT_TRY(add_to(m, m->root, tr));
  ZT_TRY(zt_nn_embedding_new("wte", c->vocab_size, c->n_embd, dt, std, &m->wte));
  ZT_TRY(add_to(m, tr, m->wte));
  ZT_TRY(zt_nn_embedding_new("wpe", c->block_size, c->n_embd, dt, std, &m->wpe));
  ZT_TRY(add_to(m, tr, m->wpe));
  ZT_TRY(zt_nn_dropout_new("drop", c->dropout, &m->drop));
  ZT_TRY(add_to(m, tr, m->drop));
  ZT_TRY(zt_module_new("ModuleList", "h", &m->h));
  ZT_TRY(add_to(m, tr, m->h));
  ZT_TRY(zt_module_set_span_fn(m->h, run_blocks, m));
  m->blocks = calloc((size_t)c->n_layer, sizeof *m->blocks);
  if (!m->blocks) return ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  for (int i = 0; i < c->n_layer; i++) {
    char name[16];
    snprintf(name, sizeof name, "%d", i);
    ZT_TRY(zt_nn_block_new(name, c->n_embd, c->n_head, c->dropout, dt, std, proj_std, &m->blocks[i]));
    ZT_TRY(add_to(m, m->h, m->blocks[i]));
  }
  ZT_TRY(zt_nn_layer_norm_new("ln_f", c->n_embd, 1e-5, dt, &m->ln_f));
  ZT_TRY(add_to(m, tr, m->ln_f));
  return zt_module_named_params(m->root, "", &m->n_params, &m->params);
}

zt_status zt_gpt2_new_dtype(const zt_gpt2_config *c, zt_dtype dt, zt_gpt2 **out) {
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_gpt2_new: out is NULL");
  ZT_TRY(zt_gpt2_config_validate(c));
  if (dt != ZT_DTYPE_F32 && dt != ZT_DTYPE_F64)
    return ZT_ERR(ZT_STATUS_DTYPE, "zt_gpt2_new: dtype %s is not supported; GPT-2 computes in f32 (or f64)",
                  zt_dtype_name(dt));
  zt_gpt2 *m = calloc(1, sizeof *m);
  if (!m) return ZT_ERR(ZT_STATUS_OOM, "zt_gpt2_new: out of host memory");
  m->cfg = *c;
  m->lm = (zt_lm_config){.family = ZT_LM_GPT2, .gpt2 = *c};
  m->dtype = dt;
  zt_status s = build(m);
  if (s) {
    zt_gpt2_free(m);
    return zt__error_prefix(s, "zt_gpt2_new");
  }
  *out = m;
  return ZT_OK;
}

zt_status zt_gpt2_new(const zt_gpt2_config *c, zt_gpt2 **out) { return zt_gpt2_new_dtype(c, ZT_DTYPE_F32, out); }

zt_status zt_gpt2_new_evicted(const zt_gpt2_config *c, zt_store *store, zt_gpt2 **out) {
  if (!out || !store) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_gpt2_new_evicted: store and out are required");
  *out = NULL;
  ZT_TRY(zt_gpt2_config_validate(c));
  zt_gpt2 *m = calloc(1, sizeof *m);
  if (!m) return ZT_ERR(ZT_STATUS_OOM, "zt_gpt2_new_evicted: out of host memory");
  m->cfg = *c;
  m->lm = (zt_lm_config){.family = ZT_LM_GPT2, .gpt2 = *c};
  m->dtype = ZT_DTYPE_F32;
  m->evict_to = store;
  zt_status s = build(m);
  m->evict_to = NULL;
  if (s) {
    zt_gpt2_free(m); /* what went to the store is given back */
    return zt__error_prefix(s, "zt_gpt2_new_evicted");
  }
  *out = m;
  return ZT_OK;
}

const zt_gpt2_config *zt_gpt2_get_config(const zt_gpt2 *m) { return m ? &m->cfg : NULL; }
zt_module *zt_gpt2_module(zt_gpt2 *m) { return m ? m->root : NULL; }

int zt_gpt2_params(zt_gpt2 *m, zt_param **params) {
  if (!m) return 0;
  if (params) *params = m->params;
  return m->n_params;
}

int64_t zt_gpt2_num_params(const zt_gpt2 *m) { return m ? zt_module_num_params(m->root) : 0; }

void zt_gpt2_set_training(zt_gpt2 *m, bool training) {
  if (m) zt_module_set_training(m->root, training);
}

double zt_gpt2_flops_per_step(const zt_gpt2 *m, int64_t B, int64_t T) {
  if (!m) return 0;
  return zt__lm_flops((double)zt_gpt2_num_params(m), m->cfg.n_layer, m->cfg.n_embd, B, T);
}

/* ------------------------------------------------------------------ the model interface */

static zt_status model_forward_loss(void *ctx, zt_tensor *inputs, zt_tensor *targets, zt_tensor **loss) {
  return zt_gpt2_forward(ctx, inputs, targets, NULL, loss);
}
static int model_params(void *ctx, zt_param **params) { return zt_gpt2_params(ctx, params); }
static zt_module *model_module(void *ctx) { return zt_gpt2_module(ctx); }
static zt_module *model_blocks(void *ctx) { return ((zt_gpt2 *)ctx)->h; }
static double model_flops(void *ctx, int64_t B, int64_t T) { return zt_gpt2_flops_per_step(ctx, B, T); }
static const zt_lm_config *model_config(void *ctx) { return &((zt_gpt2 *)ctx)->lm; }
static zt_status model_logits(void *ctx, zt_tensor *ids, zt_tensor **logits) {
  return zt_gpt2_forward(ctx, ids, NULL, logits, NULL);
}
static zt_status model_stage(void *ctx, bool embed_first, int first, int count, zt_tensor *targets, zt_tensor *in,
                             zt_tensor **out) {
  return zt_gpt2_forward_stage(ctx, embed_first, first, count, targets, in, out);
}
/* "transformer.h.<i>." a block's; ln_f the output's; wte (tied) both ends'; wpe the input's. */
static int model_part(void *ctx, int i) {
  zt_gpt2 *m = ctx;
  const char *name = m->params[i].name, *h = "transformer.h.";
  if (!strncmp(name, h, strlen(h))) return atoi(name + strlen(h));
  if (!strncmp(name, "transformer.ln_f.", 17)) return ZT_PART_OUTPUT;
  if (!strcmp(name, "transformer.wte.weight")) return ZT_PART_BOTH;
  return ZT_PART_INPUT;
}
static zt_status model_cache(void *ctx, int64_t batch, int64_t capacity, zt_kv_cache **out) {
  return zt_gpt2_kv_cache_new(ctx, batch, capacity, out);
}
static zt_status model_cached(void *ctx, zt_kv_cache *cache, zt_tensor *ids, zt_tensor **logits) {
  return zt_gpt2_forward_cached(ctx, cache, ids, logits);
}

zt_model zt_gpt2_model(zt_gpt2 *m) {
  return (zt_model){.forward_loss = model_forward_loss, .params = model_params, .module = model_module,
                    .blocks = model_blocks, .flops_per_step = model_flops, .config = model_config,
                    .forward_logits = model_logits, .forward_stage = model_stage, .param_part = model_part,
                    .kv_cache_new = model_cache, .forward_cached = model_cached, .ctx = m};
}

/* ------------------------------------------------------------------ forward */

zt_status zt__gpt2_check_ids(const zt_gpt2 *m, const zt_tensor *ids) {
  ZT_TRY(zt_check_token_ids(ids));
  if (ids->shape[1] > m->cfg.block_size)
    return ZT_ERR(ZT_STATUS_SHAPE,
                  "sequence length T = %lld is longer than the model's context (block_size = %d); use T <= %d",
                  (long long)ids->shape[1], m->cfg.block_size, m->cfg.block_size);
  return ZT_OK;
}

static zt_status check_inputs(const zt_gpt2 *m, const zt_tensor *ids, const zt_tensor *targets,
                              zt_tensor **logits, zt_tensor **loss) {
  char s1[128], s2[128];
  ZT_TRY(zt__gpt2_check_ids(m, ids));
  if (targets) {
    if (targets->dtype != ZT_DTYPE_I32)
      return ZT_ERR(ZT_STATUS_DTYPE, "targets have dtype %s; they must be i32", zt_dtype_name(targets->dtype));
    if (!zt_shape_equal(targets->ndim, targets->shape, ids->ndim, ids->shape))
      return ZT_ERR(ZT_STATUS_SHAPE, "targets have shape %s but ids %s; they must have the same shape",
                    zt_shape_str(targets->ndim, targets->shape, s1), zt_shape_str(ids->ndim, ids->shape, s2));
    if (!loss) return ZT_ERR(ZT_STATUS_INVALID_ARG, "targets were given but loss is NULL");
  } else {
    if (loss) return ZT_ERR(ZT_STATUS_INVALID_ARG, "loss was asked for without targets; pass targets (B, T)");
    if (!logits) return ZT_ERR(ZT_STATUS_INVALID_ARG, "neither targets nor logits: nothing to compute");
  }
  return ZT_OK;
}

zt_status zt__gpt2_embed(zt_gpt2 *m, zt_tensor *ids, int64_t pos0, zt_tensor **out) {
  int64_t T = ids->shape[1];
  zt_tensor *pos = NULL, *tok = NULL, *pe = NULL;
  /* position ids made on the host and copied to the ids' device by its backend */
  int32_t *p = malloc(sizeof *p * (size_t)(T ? T : 1));
  if (!p) return ZT_ERR(ZT_STATUS_OOM, "out of host memory for %lld position ids", (long long)T);
  for (int64_t t = 0; t < T; t++) p[t] = (int32_t)(pos0 + t);
  zt_status s = zt__tensor_from_host(1, &T, ZT_DTYPE_I32, zt_tensor_device(ids), zt_mem_tag_current(), p, &pos);
  free(p);
  if (!s) s = zt_nn_embedding_forward(m->wte, ids, &tok);
  if (!s) s = zt_nn_embedding_forward(m->wpe, pos, &pe);
  zt_tensor_free(pos);
  if (!s) s = zt_add(tok, pe, out); /* (B, T, C) + (T, C) */
  zt_tensor_free(tok);
  zt_tensor_free(pe);
  if (!s) s = zt_nn_dropout_forward(m->drop, out);
  return s;
}

/* The sequence's span function: blocks [first, first + count) on x (borrowed); *out is new. */
static zt_status run_blocks(void *ctx, int first, int count, zt_tensor *x, zt_tensor **out) {
  zt_gpt2 *m = ctx;
  zt_tensor *cur = x;
  for (int i = first; i < first + count; i++) {
    zt_tensor *y = NULL;
    zt_status s = zt_nn_block_forward(m->blocks[i], cur, &y);
    if (cur != x) zt_tensor_free(cur);
    if (s) return s;
    cur = y;
  }
  *out = cur;
  return ZT_OK;
}

/* The head on the blocks' output x (borrowed): ln_f, then the loss against targets (B, T)
 * and/or the logits. */
static zt_status head(zt_gpt2 *m, zt_tensor *x, zt_tensor *targets, zt_tensor **logits, zt_tensor **loss) {
  zt_tensor *h = NULL, *h2 = NULL, *t2 = NULL, *lg = NULL, *ls = NULL;
  zt_status s = zt_nn_layer_norm_forward(m->ln_f, x, &h);
  int64_t B = x->shape[0], T = x->shape[1], C = m->cfg.n_embd;
  if (!s && targets) {
    // loss = mean CE of h (B*T, C) . wte^T against targets (B*T), chunked: no (B*T, V) tensor
    s = zt_reshape(h, 2, (int64_t[]){B * T, C}, &h2);
    if (!s) s = zt_reshape(targets, 1, (int64_t[]){B * T}, &t2);
    if (!s) s = zt_lm_head_cross_entropy(h2, m->wte->weight, t2, -1, &ls);
  }
  // logits (B, T, V) = h . wte^T (one GEMM over all B*T rows)
  if (!s && logits) s = zt_matmul(h, m->wte->weight, false, true, &lg);
  zt_tensor_free(h);
  zt_tensor_free(h2);
  zt_tensor_free(t2);
  if (s) {
    zt_tensor_free(lg);
    zt_tensor_free(ls);
    return s;
  }
  if (logits) *logits = lg;
  if (loss) *loss = ls;
  return ZT_OK;
}

static zt_status forward(zt_gpt2 *m, zt_tensor *ids, zt_tensor *targets, zt_tensor **logits, zt_tensor **loss) {
  ZT_TRY(check_inputs(m, ids, targets, logits, loss));
  zt_tensor *x = NULL, *y = NULL;
  zt_status s = zt__gpt2_embed(m, ids, 0, &x);
  if (!s) s = zt_module_run_sequence(m->h, x, &y); /* through the strategies' wrappers */
  zt_tensor_free(x);
  if (!s) s = head(m, y, targets, logits, loss);
  zt_tensor_free(y);
  return s;
}

zt_status zt_gpt2_forward_stage(zt_gpt2 *m, bool embed_first, int first, int count, zt_tensor *targets, zt_tensor *in,
                                zt_tensor **out) {
  if (!m || !in || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_gpt2_forward_stage: model, in or out is NULL");
  *out = NULL;
  int L = m->cfg.n_layer;
  if (first < 0 || count < 0 || first > L - count)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_gpt2_forward_stage: blocks [%d, %d) are outside the model's %d", first,
                  first + count, L);
  if (embed_first) ZT_TRY(zt__gpt2_check_ids(m, in));
  zt_tensor *x = NULL, *y = NULL;
  zt_status s = embed_first ? zt__gpt2_embed(m, in, 0, &x) : ZT_OK;
  zt_tensor *cur = embed_first ? x : in;
  if (!s && count > 0) s = zt_span_run((zt_span_next){m->h, 0}, first, count, cur, &y); /* through the wrappers */
  zt_tensor *hid = count > 0 ? y : cur;
  if (!s && targets) {
    s = head(m, hid, targets, NULL, out);
  } else if (!s && count > 0) {
    *out = y, y = NULL;
  } else if (!s && embed_first) {
    *out = x, x = NULL;
  } else if (!s) {
    s = ZT_ERR(ZT_STATUS_INVALID_ARG, "a stage with no blocks, no embedding and no head does nothing");
  }
  zt_tensor_free(x);
  zt_tensor_free(y);
  return s ? zt__error_prefix(s, "zt_gpt2_forward_stage") : ZT_OK;
}

zt_status zt_gpt2_forward(zt_gpt2 *m, zt_tensor *ids, zt_tensor *targets, zt_tensor **logits, zt_tensor **loss) {
  if (!m) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_gpt2_forward: model is NULL");
  zt_status s = zt_module_pre_forward(m->root);
  if (!s) s = forward(m, ids, targets, logits, loss);
  if (!s) {
    // the root's outputs: the loss and/or the logits
    zt_tensor *o[2];
    int n = 0;
    if (loss) o[n++] = *loss;
    if (logits) o[n++] = *logits;
    s = zt_module_post_forward(m->root, n, o);
    if (s) {
      if (loss) zt_tensor_free(*loss), *loss = NULL;
      if (logits) zt_tensor_free(*logits), *logits = NULL;
    }
  }
  return s ? zt__error_prefix(s, "zt_gpt2_forward") : ZT_OK;
}
