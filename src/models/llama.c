/* The Llama family (Llama 2/3, Mistral, Qwen2, Qwen3) built from plain modules with Hugging
 * Face's names, order and nn.Linear (out, in) layouts. A layer: x + o(attn(rope(q, k), v))
 * of RMSNorm(x), then + down(swiglu(gate, up)) of RMSNorm. q, k and v are projected
 * separately (their HF weights), optionally per-head normalised (Qwen3), then concatenated
 * into the fused layout zt_causal_attention_gqa takes and rotated there in one zt_rope call
 * (q and k heads; v passes through). The loss runs fused and chunked
 * (zt_lm_head_cross_entropy) against lm_head or the tied embedding. The layers run as the
 * sequence "model.layers" (zt_module_run_sequence); the model knows no strategy. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "zt/lm.h"
#include "llama_internal.h"
#include "lm_internal.h"

typedef zt__llama_layer layer; /* the struct zt_llama and zt__llama_layer: llama_internal.h */

/* ------------------------------------------------------------------ configs */

zt_status zt_llama_config_validate(const zt_llama_config *c) {
  if (!c) return ZT_ERR(ZT_STATUS_INVALID_ARG, "Llama config is NULL");
#define POS(f, what)                                                                                              \
  if (c->f < 1) return ZT_ERR(ZT_STATUS_INVALID_ARG, "Llama config: %s is %d; it must be positive", what, c->f)
  POS(vocab_size, "vocab_size");
  POS(hidden_size, "hidden_size");
  POS(intermediate_size, "intermediate_size");
  POS(n_layer, "num_hidden_layers");
  POS(n_head, "num_attention_heads");
  POS(n_kv_head, "num_key_value_heads");
  POS(head_dim, "head_dim");
  POS(max_position_embeddings, "max_position_embeddings");
#undef POS
  if (c->n_layer > 9999)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "Llama config: num_hidden_layers is %d; at most 9999 are supported", c->n_layer);
  if (c->n_head % c->n_kv_head)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "Llama config: num_attention_heads = %d is not a multiple of num_key_value_heads = %d", c->n_head,
                  c->n_kv_head);
  if (c->head_dim % 2)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "Llama config: head_dim = %d is odd; rotary embeddings need it even",
                  c->head_dim);
  if ((int64_t)(c->n_head + 2 * c->n_kv_head) * c->head_dim > INT_MAX / 2 || c->intermediate_size > INT_MAX / 2)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "Llama config: the projections are too wide");
  if (!(c->rms_norm_eps > 0))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "Llama config: rms_norm_eps is %g; it must be positive", c->rms_norm_eps);
  if (!(c->rope_theta > 0))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "Llama config: rope_theta is %g; it must be positive", c->rope_theta);
  if (c->sliding_window < 0)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "Llama config: sliding_window is %d; 0 means none", c->sliding_window);
  if (!(c->initializer_range >= 0))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "Llama config: initializer_range is %g", c->initializer_range);
  return ZT_OK;
}

/* Presets. llama-tiny is a small Llama 3 layout (GQA 4:2, SwiGLU) with the byte-level vocabulary of
 * gpt2-tiny (256) and an untied lm_head (so the presets cover a head of its own); the others are
 * the published models' config.json shapes (HuggingFaceTB/SmolLM-135M, Qwen/Qwen2.5-0.5B,
 * meta-llama/Llama-3.2-1B), initialised with their initializer_range (0.02). */
typedef struct preset {
  const char *name;
  zt_llama_config cfg;
} preset;

static const preset presets[] = {
    {"llama-tiny", {.model_type = "llama", .vocab_size = 256, .hidden_size = 128, .intermediate_size = 352,
                    .n_layer = 4, .n_head = 4, .n_kv_head = 2, .head_dim = 32, .max_position_embeddings = 256,
                    .rms_norm_eps = 1e-5, .rope_theta = 10000, .initializer_range = 0.02}},
    {"smollm-135m", {.model_type = "llama", .vocab_size = 49152, .hidden_size = 576, .intermediate_size = 1536,
                     .n_layer = 30, .n_head = 9, .n_kv_head = 3, .head_dim = 64, .max_position_embeddings = 2048,
                     .rms_norm_eps = 1e-5, .rope_theta = 10000, .tie_word_embeddings = true,
                     .initializer_range = 0.02}},
    {"qwen2.5-0.5b", {.model_type = "qwen2", .vocab_size = 151936, .hidden_size = 896, .intermediate_size = 4864,
                      .n_layer = 24, .n_head = 14, .n_kv_head = 2, .head_dim = 64, .max_position_embeddings = 32768,
                      .rms_norm_eps = 1e-6, .rope_theta = 1e6, .tie_word_embeddings = true,
                      .attention_bias = true, .initializer_range = 0.02}},
    {"llama3.2-1b", {.model_type = "llama", .vocab_size = 128256, .hidden_size = 2048, .intermediate_size = 8192,
                     .n_layer = 16, .n_head = 32, .n_kv_head = 8, .head_dim = 64, .max_position_embeddings = 131072,
                     .rms_norm_eps = 1e-5, .rope_theta = 500000,
                     .rope_scaling = {ZT_ROPE_SCALING_LLAMA3, 32, 1, 4, 8192}, .tie_word_embeddings = true,
                     .initializer_range = 0.02}},
};
#define N_PRESETS ((int)(sizeof presets / sizeof presets[0]))

zt_status zt_llama_preset(const char *name, zt_llama_config *out) {
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_llama_preset: out is NULL");
  for (int i = 0; name && i < N_PRESETS; i++)
    if (!strcmp(name, presets[i].name)) {
      *out = presets[i].cfg;
      return ZT_OK;
    }
  return ZT_ERR(ZT_STATUS_INVALID_ARG, "unknown Llama-family preset \"%s\"; the presets are " ZT_LLAMA_PRESET_NAMES,
                name ? name : "(null)");
}

int64_t zt_llama_config_num_params(const zt_llama_config *c) {
  int64_t C = c->hidden_size, D = c->head_dim, H = c->n_head, K = c->n_kv_head, I = c->intermediate_size;
  int64_t per = C * H * D + 2 * C * K * D + H * D * C + 3 * C * I + 2 * C;
  if (c->attention_bias) per += H * D + 2 * K * D;
  if (c->qk_norm) per += 2 * D;
  int64_t V = c->vocab_size;
  return V * C * (c->tie_word_embeddings ? 1 : 2) + c->n_layer * per + C;
}

/* ------------------------------------------------------------------ building */

void zt_llama_free(zt_llama *m) {
  if (!m) return;
  zt_module_free(m->root);
  zt_tensor_free(m->cos);
  zt_tensor_free(m->sin);
  free(m->layers);
  free(m->params);
  free(m);
}

/* A new child module of parent (added, so parent frees it). */
static zt_status child(zt_module *parent, const char *kind, const char *name, zt_module **out) {
  ZT_TRY(zt_module_new(kind, name, out));
  return zt_module_add_child(parent, *out);
}

typedef enum init_kind { INIT_NORMAL, INIT_ONES, INIT_ZEROS } init_kind;

/* Parameter name of module mod (1-D or 2-D), decay exactly when 2-D, initialised. */
static zt_status param(zt_llama *m, zt_module *mod, const char *name, int64_t d0, int64_t d1, init_kind init,
                       zt_tensor **out) {
  int nd = d1 > 0 ? 2 : 1;
  ZT_TRY(zt_module_new_param(mod, name, nd, (int64_t[]){d0, d1}, m->dtype, nd == 2, out));
  bool prev = zt_set_grad_enabled(false);
  zt_status s = init == INIT_NORMAL ? zt_tensor_normal_(*out, 0.0, m->cfg.initializer_range)
                                    : zt_tensor_fill_(*out, init == INIT_ONES ? 1.0 : 0.0);
  zt_set_grad_enabled(prev);
  return s;
}

/* A Linear child "name" of parent: weight (out, in), bias (out) when asked. */
static zt_status linear(zt_llama *m, zt_module *parent, const char *name, int64_t in, int64_t out, bool bias,
                        zt_tensor **w, zt_tensor **b) {
  zt_module *l = NULL;
  ZT_TRY(child(parent, "Linear", name, &l));
  ZT_TRY(param(m, l, "weight", out, in, INIT_NORMAL, w));
  if (bias) ZT_TRY(param(m, l, "bias", out, 0, INIT_ZEROS, b));
  return ZT_OK;
}

static zt_status rmsnorm(zt_llama *m, zt_module *parent, const char *name, int64_t C, zt_tensor **w) {
  zt_module *l = NULL;
  ZT_TRY(child(parent, "RMSNorm", name, &l));
  return param(m, l, "weight", C, 0, INIT_ONES, w);
}

/* With evict_to: module mod's parameters (named under prefix, their HF names) go to the store. */
static zt_status evict(zt_llama *m, zt_module *mod, const char *prefix) {
  return m->evict_to ? zt_module_evict_params(mod, prefix, m->evict_to) : ZT_OK;
}

static zt_status run_layers(void *ctx, int first, int count, zt_tensor *x, zt_tensor **out);

/* Modules are made in state_dict order, so the Philox draws of the initialisation follow it;
 * each top-level one (embed_tokens, a layer, norm, lm_head) is evicted once made (evict_to). */
static zt_status build(zt_llama *m) {
  const zt_llama_config *c = &m->cfg;
  int64_t C = c->hidden_size, D = c->head_dim, H = c->n_head, K = c->n_kv_head, I = c->intermediate_size;
  zt_module *model = NULL, *emb = NULL, *ln = NULL;
  ZT_TRY(zt_module_new("LlamaForCausalLM", "", &m->root));
  ZT_TRY(child(m->root, "LlamaModel", "model", &model));
  ZT_TRY(child(model, "Embedding", "embed_tokens", &emb));
  ZT_TRY(param(m, emb, "weight", c->vocab_size, C, INIT_NORMAL, &m->embed));
  ZT_TRY(evict(m, emb, "model.embed_tokens"));
  ZT_TRY(child(model, "ModuleList", "layers", &m->layers_seq));
  ZT_TRY(zt_module_set_span_fn(m->layers_seq, run_layers, m));
  m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
  if (!m->layers) return ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  for (int i = 0; i < c->n_layer; i++) {
    layer *L = &m->layers[i];
    char name[16];
    snprintf(name, sizeof name, "%d", i);
    zt_module *attn = NULL, *mlp = NULL;
    ZT_TRY(child(m->layers_seq, "LlamaDecoderLayer", name, &L->mod));
    ZT_TRY(child(L->mod, "Attention", "self_attn", &attn));
    ZT_TRY(linear(m, attn, "q_proj", C, H * D, c->attention_bias, &L->wq, &L->bq));
    ZT_TRY(linear(m, attn, "k_proj", C, K * D, c->attention_bias, &L->wk, &L->bk));
    ZT_TRY(linear(m, attn, "v_proj", C, K * D, c->attention_bias, &L->wv, &L->bv));
    ZT_TRY(linear(m, attn, "o_proj", H * D, C, false, &L->wo, NULL));
    if (c->qk_norm) {
      ZT_TRY(rmsnorm(m, attn, "q_norm", D, &L->q_norm));
      ZT_TRY(rmsnorm(m, attn, "k_norm", D, &L->k_norm));
    }
    ZT_TRY(child(L->mod, "MLP", "mlp", &mlp));
    ZT_TRY(linear(m, mlp, "gate_proj", C, I, false, &L->wg, NULL));
    ZT_TRY(linear(m, mlp, "up_proj", C, I, false, &L->wu, NULL));
    ZT_TRY(linear(m, mlp, "down_proj", I, C, false, &L->wd, NULL));
    ZT_TRY(rmsnorm(m, L->mod, "input_layernorm", C, &L->ln1));
    ZT_TRY(rmsnorm(m, L->mod, "post_attention_layernorm", C, &L->ln2));
    char prefix[32];
    snprintf(prefix, sizeof prefix, "model.layers.%d", i);
    ZT_TRY(evict(m, L->mod, prefix));
  }
  ZT_TRY(child(model, "RMSNorm", "norm", &ln));
  ZT_TRY(param(m, ln, "weight", C, 0, INIT_ONES, &m->norm));
  ZT_TRY(evict(m, ln, "model.norm"));
  if (!c->tie_word_embeddings) {
    zt_module *head = NULL;
    ZT_TRY(child(m->root, "Linear", "lm_head", &head));
    ZT_TRY(param(m, head, "weight", c->vocab_size, C, INIT_NORMAL, &m->lm_head));
    ZT_TRY(evict(m, head, "lm_head"));
  }
  return zt_module_named_params(m->root, "", &m->n_params, &m->params);
}

/* A model of c in dtype dt, its parameters evicted to store as made (NULL: kept); what names
 * the caller in errors. */
static zt_status new_model(const zt_llama_config *c, zt_dtype dt, zt_store *store, const char *what,
                           zt_llama **out) {
  zt_llama *m = calloc(1, sizeof *m);
  if (!m) return ZT_ERR(ZT_STATUS_OOM, "%s: out of host memory", what);
  m->cfg = *c;
  m->lm = (zt_lm_config){.family = ZT_LM_LLAMA, .llama = *c};
  m->dtype = dt;
  m->evict_to = store;
  zt_status s = build(m);
  m->evict_to = NULL;
  if (s) {
    zt_llama_free(m); /* what went to the store is given back */
    return zt__error_prefix(s, "%s", what);
  }
  *out = m;
  return ZT_OK;
}

zt_status zt_llama_new(const zt_llama_config *c, zt_dtype dt, zt_llama **out) {
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_llama_new: out is NULL");
  *out = NULL;
  ZT_TRY(zt_llama_config_validate(c));
  if (dt != ZT_DTYPE_F32 && dt != ZT_DTYPE_F64)
    return ZT_ERR(ZT_STATUS_DTYPE, "zt_llama_new: dtype %s is not supported; the model computes in f32 (or f64)",
                  zt_dtype_name(dt));
  return new_model(c, dt, NULL, "zt_llama_new", out);
}

zt_status zt_llama_new_evicted(const zt_llama_config *c, zt_store *store, zt_llama **out) {
  if (!out || !store) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_llama_new_evicted: store and out are required");
  *out = NULL;
  ZT_TRY(zt_llama_config_validate(c));
  return new_model(c, ZT_DTYPE_F32, store, "zt_llama_new_evicted", out);
}

const zt_llama_config *zt_llama_get_config(const zt_llama *m) { return m ? &m->cfg : NULL; }
zt_module *zt_llama_module(zt_llama *m) { return m ? m->root : NULL; }
zt_module *zt_llama_blocks(zt_llama *m) { return m ? m->layers_seq : NULL; }

int zt_llama_params(zt_llama *m, zt_param **params) {
  if (!m) return 0;
  if (params) *params = m->params;
  return m->n_params;
}

int64_t zt_llama_num_params(const zt_llama *m) { return m ? zt_module_num_params(m->root) : 0; }

void zt_llama_set_training(zt_llama *m, bool training) {
  if (m) zt_module_set_training(m->root, training);
}

double zt_llama_flops_per_step(const zt_llama *m, int64_t B, int64_t T) {
  if (!m) return 0;
  return zt__lm_flops((double)zt_llama_num_params(m), m->cfg.n_layer, (double)m->cfg.n_head * m->cfg.head_dim, B, T);
}

/* ------------------------------------------------------------------ the model interface */

static zt_status model_forward_loss(void *ctx, zt_tensor *inputs, zt_tensor *targets, zt_tensor **loss) {
  return zt_llama_forward(ctx, inputs, targets, NULL, loss);
}
static int model_params(void *ctx, zt_param **params) { return zt_llama_params(ctx, params); }
static zt_module *model_module(void *ctx) { return zt_llama_module(ctx); }
static zt_module *model_blocks(void *ctx) { return zt_llama_blocks(ctx); }
static double model_flops(void *ctx, int64_t B, int64_t T) { return zt_llama_flops_per_step(ctx, B, T); }
static const zt_lm_config *model_config(void *ctx) { return &((zt_llama *)ctx)->lm; }
static zt_status model_forward_logits(void *ctx, zt_tensor *ids, zt_tensor **logits) {
  return zt_llama_forward(ctx, ids, NULL, logits, NULL);
}
static zt_status model_forward_stage(void *ctx, bool embed_first, int first, int count, zt_tensor *targets,
                                     zt_tensor *in, zt_tensor **out) {
  return zt_llama_forward_stage(ctx, embed_first, first, count, targets, in, out);
}

/* Parameter i's part: its layer for "model.layers.N.*", else the embedding (both ends when
 * tied), the final norm or lm_head (the last stage). */
static int model_param_part(void *ctx, int i) {
  zt_llama *m = ctx;
  ZT_ASSERT(i >= 0 && i < m->n_params);
  const zt_param *p = &m->params[i];
  static const char layers[] = "model.layers.";
  if (!strncmp(p->name, layers, sizeof layers - 1)) return (int)strtol(p->name + sizeof layers - 1, NULL, 10);
  if (p->tensor == m->embed) return m->cfg.tie_word_embeddings ? ZT_PART_BOTH : ZT_PART_INPUT;
  return ZT_PART_OUTPUT;
}

zt_model zt_llama_model(zt_llama *m) {
  return (zt_model){.forward_loss = model_forward_loss, .params = model_params, .module = model_module,
                    .blocks = model_blocks, .flops_per_step = model_flops, .config = model_config,
                    .forward_logits = model_forward_logits, .forward_stage = model_forward_stage,
                    .param_part = model_param_part, .kv_cache_new = zt__llama_model_kv_cache_new,
                    .forward_cached = zt__llama_model_forward_cached, .ctx = m};
}

/* ------------------------------------------------------------------ forward */

/* Rotary tables covering T positions on dev (rebuilt larger, or on another device, when needed;
 * graphs that saved the old ones hold their own references). */
static zt_status ensure_rope(zt_llama *m, int64_t T, zt_device dev) {
  if (m->cos && m->rope_n >= T && zt_device_equal(m->rope_dev, dev)) return ZT_OK;
  const zt_llama_config *c = &m->cfg;
  int64_t n = T > m->rope_n ? T : m->rope_n;
  zt_tensor *cs = NULL, *sn = NULL;
  const zt_rope_scaling *sc = c->rope_scaling.type == ZT_ROPE_SCALING_NONE ? NULL : &c->rope_scaling;
  ZT_TRY(zt_rope_table(c->head_dim, n, c->rope_theta, sc, m->dtype, dev, &cs, &sn));
  zt_tensor_free(m->cos);
  zt_tensor_free(m->sin);
  m->cos = cs, m->sin = sn, m->rope_n = n, m->rope_dev = dev;
  return ZT_OK;
}

zt_status zt__llama_ensure_rope(zt_llama *m, int64_t T, zt_device dev) { return ensure_rope(m, T, dev); }

/* x (B, T, n * D) -> RMSNorm over each head's D values with weight w (D); *out is new. */
zt_status zt__llama_head_norm(zt_tensor *x, zt_tensor *w, int64_t n, int64_t D, double eps, zt_tensor **out) {
  int64_t B = x->shape[0], T = x->shape[1];
  zt_tensor *x4 = NULL, *y4 = NULL;
  zt_status s = zt_reshape(x, 4, (int64_t[]){B, T, n, D}, &x4);
  if (!s) s = zt_rms_norm(x4, w, eps, &y4);
  if (!s) s = zt_reshape(y4, 3, (int64_t[]){B, T, n * D}, out);
  zt_tensor_free(x4);
  zt_tensor_free(y4);
  return s;
}

/* Frees *t and sets it to NULL. */
static void drop(zt_tensor **t) {
  zt_tensor_free(*t);
  *t = NULL;
}

/* One decoder layer on x (B, T, C) (borrowed) -> *out (new). */
static zt_status layer_forward(zt_llama *m, layer *L, zt_tensor *x, zt_tensor **out) {
  const zt_llama_config *c = &m->cfg;
  int64_t H = c->n_head, K = c->n_kv_head, D = c->head_dim;
  double eps = c->rms_norm_eps;
  zt_tensor *h = NULL, *q = NULL, *k = NULL, *v = NULL, *t = NULL, *qkv = NULL, *a = NULL, *x1 = NULL;
  zt_tensor *g = NULL, *u = NULL;
  *out = NULL;
  zt_status s = zt_module_pre_forward(L->mod);
  if (!s) s = ensure_rope(m, x->shape[1], zt_tensor_device(x));
  // attention: q, k, v (B, T, {H, K, K} * D), fused as q heads, k heads, v heads
  if (!s) s = zt_rms_norm(x, L->ln1, eps, &h);
  if (!s) s = zt_linear(h, L->wq, L->bq, &q);
  if (!s) s = zt_linear(h, L->wk, L->bk, &k);
  if (!s) s = zt_linear(h, L->wv, L->bv, &v);
  drop(&h);
  if (!s && c->qk_norm) {
    s = zt__llama_head_norm(q, L->q_norm, H, D, eps, &t);
    if (!s) zt_tensor_free(q), q = t, t = NULL;
    if (!s) s = zt__llama_head_norm(k, L->k_norm, K, D, eps, &t);
    if (!s) zt_tensor_free(k), k = t, t = NULL;
  }
  if (!s) s = zt_cat(3, (zt_tensor *[]){q, k, v}, 2, &t);
  drop(&q), drop(&k), drop(&v);
  if (!s) s = zt_rope(t, m->cos, m->sin, 0, H + K, &qkv); /* q and k heads; v passes */
  drop(&t);
  if (!s) s = zt_causal_attention_gqa(qkv, (int)H, (int)K, &a);
  drop(&qkv);
  if (!s) s = zt_linear(a, L->wo, NULL, &t);
  drop(&a);
  if (!s) s = zt_add(x, t, &x1);
  drop(&t);
  // MLP: down(silu(gate(h)) * up(h))
  if (!s) s = zt_rms_norm(x1, L->ln2, eps, &h);
  if (!s) s = zt_linear(h, L->wg, NULL, &g);
  if (!s) s = zt_linear(h, L->wu, NULL, &u);
  drop(&h);
  if (!s) s = zt_swiglu(g, u, &t);
  drop(&g), drop(&u);
  if (!s) s = zt_linear(t, L->wd, NULL, &a);
  drop(&t);
  if (!s) s = zt_add(x1, a, out);
  drop(&a), drop(&x1);
  if (!s) s = zt_module_post_forward(L->mod, 1, out);
  if (s) drop(out);
  return s ? zt__error_prefix(s, "in decoder layer %s", L->mod->name) : ZT_OK;
}

/* The sequence's span function: layers [first, first + count) on x (borrowed); *out is new. */
static zt_status run_layers(void *ctx, int first, int count, zt_tensor *x, zt_tensor **out) {
  zt_llama *m = ctx;
  zt_tensor *cur = x;
  for (int i = first; i < first + count; i++) {
    zt_tensor *y = NULL;
    zt_status s = layer_forward(m, &m->layers[i], cur, &y);
    if (cur != x) zt_tensor_free(cur);
    if (s) return s;
    cur = y;
  }
  *out = cur;
  return ZT_OK;
}

/* A sequence of T positions fits the model (its context and sliding window). */
static zt_status check_len(const zt_llama *m, int64_t T) {
  const zt_llama_config *c = &m->cfg;
  if (T > c->max_position_embeddings)
    return ZT_ERR(ZT_STATUS_SHAPE,
                  "sequence length T = %lld is longer than the model's context (max_position_embeddings = %d)",
                  (long long)T, c->max_position_embeddings);
  if (c->sliding_window > 0 && T > c->sliding_window)
    return ZT_ERR(ZT_STATUS_SHAPE,
                  "sequence length T = %lld is longer than the model's sliding window (%d); zerotrain's attention "
                  "is full causal, which equals sliding-window attention only up to the window: use T <= %d",
                  (long long)T, c->sliding_window, c->sliding_window);
  return ZT_OK;
}

static zt_status check_ids(const zt_llama *m, const zt_tensor *ids) {
  ZT_TRY(zt_check_token_ids(ids));
  return check_len(m, ids->shape[1]);
}

/* targets (B, T) i32 for rows of B x T (the ids' or the hidden state's first two sizes). */
static zt_status check_targets(const zt_tensor *targets, int64_t B, int64_t T) {
  char s1[128];
  if (targets->dtype != ZT_DTYPE_I32)
    return ZT_ERR(ZT_STATUS_DTYPE, "targets have dtype %s; they must be i32", zt_dtype_name(targets->dtype));
  if (targets->ndim != 2 || targets->shape[0] != B || targets->shape[1] != T)
    return ZT_ERR(ZT_STATUS_SHAPE, "targets have shape %s but the input is %lld rows of %lld tokens; they must be (%lld, %lld)",
                  zt_shape_str(targets->ndim, targets->shape, s1), (long long)B, (long long)T, (long long)B,
                  (long long)T);
  return ZT_OK;
}

static zt_status check_inputs(const zt_llama *m, const zt_tensor *ids, const zt_tensor *targets, zt_tensor **logits,
                              zt_tensor **loss) {
  ZT_TRY(check_ids(m, ids));
  if (targets) {
    ZT_TRY(check_targets(targets, ids->shape[0], ids->shape[1]));
    if (!loss) return ZT_ERR(ZT_STATUS_INVALID_ARG, "targets were given but loss is NULL");
  } else {
    if (loss) return ZT_ERR(ZT_STATUS_INVALID_ARG, "loss was asked for without targets; pass targets (B, T)");
    if (!logits) return ZT_ERR(ZT_STATUS_INVALID_ARG, "neither targets nor logits: nothing to compute");
  }
  return ZT_OK;
}

/* A stage's input: ids (embed_first) or the hidden state (B, T, hidden) of the model's dtype. */
static zt_status check_stage_input(const zt_llama *m, bool embed_first, const zt_tensor *in) {
  char s1[128];
  if (embed_first) return check_ids(m, in);
  if (in->ndim != 3 || in->shape[0] < 1 || in->shape[1] < 1 || in->shape[2] != m->cfg.hidden_size)
    return ZT_ERR(ZT_STATUS_SHAPE, "the hidden state has shape %s; a stage after the embedding takes (B, T, %d)",
                  zt_shape_str(in->ndim, in->shape, s1), m->cfg.hidden_size);
  if (in->dtype != m->dtype)
    return ZT_ERR(ZT_STATUS_DTYPE, "the hidden state has dtype %s, the model %s", zt_dtype_name(in->dtype),
                  zt_dtype_name(m->dtype));
  return check_len(m, in->shape[1]);
}

/* The head on the layers' output x (borrowed): the final norm, then the loss and/or logits. */
static zt_status head(zt_llama *m, zt_tensor *x, zt_tensor *targets, zt_tensor **logits, zt_tensor **loss) {
  zt_tensor *h = NULL, *h2 = NULL, *t2 = NULL, *lg = NULL, *ls = NULL;
  zt_tensor *w = m->lm_head ? m->lm_head : m->embed;
  int64_t B = x->shape[0], T = x->shape[1], C = m->cfg.hidden_size;
  zt_status s = zt_rms_norm(x, m->norm, m->cfg.rms_norm_eps, &h);
  if (!s && targets) {
    s = zt_reshape(h, 2, (int64_t[]){B * T, C}, &h2);
    if (!s) s = zt_reshape(targets, 1, (int64_t[]){B * T}, &t2);
    if (!s) s = zt_lm_head_cross_entropy(h2, w, t2, -1, &ls);
  }
  if (!s && logits) s = zt_matmul(h, w, false, true, &lg); /* (B, T, V) */
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

zt_status zt_llama_forward(zt_llama *m, zt_tensor *ids, zt_tensor *targets, zt_tensor **logits, zt_tensor **loss) {
  if (!m) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_llama_forward: model is NULL");
  zt_status s = check_inputs(m, ids, targets, logits, loss);
  if (!s) s = zt_module_pre_forward(m->root);
  zt_tensor *x = NULL, *y = NULL;
  if (!s) s = zt_embedding(m->embed, ids, &x);
  if (!s) s = zt_module_run_sequence(m->layers_seq, x, &y); /* through the strategies' wrappers */
  zt_tensor_free(x);
  if (!s) s = head(m, y, targets, logits, loss);
  zt_tensor_free(y);
  if (!s) {
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
  return s ? zt__error_prefix(s, "zt_llama_forward") : ZT_OK;
}

zt_status zt_llama_forward_stage(zt_llama *m, bool embed_first, int first, int count, zt_tensor *targets,
                                 zt_tensor *in, zt_tensor **out) {
  if (!m || !in || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_llama_forward_stage: model, in or out is NULL");
  *out = NULL;
  int L = m->cfg.n_layer;
  if (first < 0 || count < 0 || first > L - count)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_llama_forward_stage: layers [%d, %d) are outside the model's %d", first,
                  first + count, L);
  if (!embed_first && !count && !targets)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_llama_forward_stage: a stage with no layers, no embedding and no head does nothing");
  zt_status s = check_stage_input(m, embed_first, in);
  if (!s && targets) s = check_targets(targets, in->shape[0], in->shape[1]);
  zt_tensor *x = NULL, *y = NULL;
  if (!s && embed_first) s = zt_embedding(m->embed, in, &x);
  zt_tensor *cur = embed_first ? x : in;
  if (!s && count > 0) s = zt_span_run((zt_span_next){m->layers_seq, 0}, first, count, cur, &y); /* the wrappers */
  zt_tensor *hid = count > 0 ? y : cur;
  if (!s && targets) {
    s = head(m, hid, targets, NULL, out);
  } else if (!s) { /* the hidden state after the stage: the layers' output, or the embedding's */
    *out = hid;
    if (hid == y) y = NULL;
    else x = NULL;
  }
  zt_tensor_free(x);
  zt_tensor_free(y);
  return s ? zt__error_prefix(s, "zt_llama_forward_stage") : ZT_OK;
}
