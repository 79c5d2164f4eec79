/* The Llama family's table (family.h): Llama 2/3, Mistral, Qwen2 and Qwen3 decoders over the
 * model's own API (zt/llama.h); state.json keeps the model's transformers config.json as its
 * "config" member, read back by the same reader as a Hugging Face folder's. */
#include <stdio.h>
#include <string.h>

#include "core/status_internal.h"
#include "models/act_cost.h"
#include "models/family.h"
#include "models/llama_internal.h"

static zt_status preset(const char *name, zt_lm_config *out) { return zt_llama_preset(name, &out->llama); }
static zt_status validate(const zt_lm_config *c) { return zt_llama_config_validate(&c->llama); }

static zt_lm_dims dims(const zt_lm_config *lc) {
  const zt_llama_config *c = &lc->llama;
  int64_t C = c->hidden_size, V = c->vocab_size, F = c->intermediate_size, D = c->head_dim;
  int64_t q = (int64_t)c->n_head * D, kv = (int64_t)c->n_kv_head * D;
  int64_t block = C * q + 2 * C * kv + q * C + 3 * C * F + 2 * C; /* q, k, v, o, gate, up, down, two norms */
  if (c->attention_bias) block += q + 2 * kv;
  if (c->qk_norm) block += 2 * D;
  int context = c->max_position_embeddings;
  if (c->sliding_window > 0 && c->sliding_window < context) context = c->sliding_window; /* longer is refused */
  return (zt_lm_dims){.n_layer = c->n_layer, .hidden = c->hidden_size, .n_head = c->n_head, .vocab = c->vocab_size,
                      .context = context, .attn_width = (int)q, .ffn = c->intermediate_size, .embed_params = V * C,
                      .block_params = block, .out_params = C + V * C, /* the norm, lm_head or the tied embedding */
                      .params = zt_llama_config_num_params(c), .tied = c->tie_word_embeddings};
}

/* A new width keeps head_dim = hidden / heads when the config had it so (Qwen3's explicit one stays). */
static zt_status reshape(zt_lm_config *lc, int n_layer, int n_head, int hidden, int vocab, int context) {
  zt_llama_config *c = &lc->llama;
  bool derived = c->n_head > 0 && c->head_dim == c->hidden_size / c->n_head;
  if (n_layer > 0) c->n_layer = n_layer;
  if (n_head > 0 && n_head != c->n_head) {
    if (n_head % c->n_kv_head)
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "%d heads do not share the model's %d key/value heads evenly: give a "
                    "multiple of %d", n_head, c->n_kv_head, c->n_kv_head);
    c->n_head = n_head;
  }
  if (hidden > 0) c->hidden_size = hidden;
  if (derived && c->n_head > 0) c->head_dim = c->hidden_size / c->n_head;
  if (vocab > 0) c->vocab_size = vocab;
  if (context > 0) c->max_position_embeddings = context;
  return zt_llama_config_validate(c);
}

static zt_status check_same(const char *what, const zt_lm_config *h, const zt_lm_config *w) {
  const zt_llama_config *a = &h->llama, *b = &w->llama;
  const zt__lm_field f[] = {{"num_hidden_layers", a->n_layer, b->n_layer},
           {"hidden_size", a->hidden_size, b->hidden_size},
           {"intermediate_size", a->intermediate_size, b->intermediate_size},
           {"num_attention_heads", a->n_head, b->n_head},
           {"num_key_value_heads", a->n_kv_head, b->n_kv_head},
           {"head_dim", a->head_dim, b->head_dim},
           {"vocab_size", a->vocab_size, b->vocab_size},
           {"tie_word_embeddings", a->tie_word_embeddings, b->tie_word_embeddings},
           {"attention_bias", a->attention_bias, b->attention_bias},
           {"q/k norm (qwen3)", a->qk_norm, b->qk_norm}};
  return zt__lm_check_fields(what, (int)(sizeof f / sizeof f[0]), f);
}

static void describe(const zt_lm_config *lc, char *buf, size_t cap) {
  const zt_llama_config *c = &lc->llama;
  snprintf(buf, cap, "%s: %d layers, %d wide, %d heads (%d key/value), MLP %d, vocabulary %d, context %d%s",
           c->model_type[0] ? c->model_type : "llama", c->n_layer, c->hidden_size, c->n_head, c->n_kv_head,
           c->intermediate_size, c->vocab_size, c->max_position_embeddings, c->tie_word_embeddings ? ", tied" : "");
}

static zt_status from_hf_json(const char *path, const zt__json *j, zt_lm_config *out) {
  return zt__llama_from_hf_json(path, j, &out->llama);
}
static void hf_config_json(const zt_lm_config *c, zt_dtype dt, zt__buf *b) { zt__llama_hf_config_json(&c->llama, dt, b); }

static void state_json(const zt_lm_config *c, zt__buf *b) {
  zt__buf_printf(b, "\"config\": ");
  zt__llama_hf_config_json(&c->llama, ZT_DTYPE_F32, b);
}

static zt_status state_read(const char *path, const zt__json *model, zt_lm_config *out) {
  const zt__json *j = zt__json_get(model, "config");
  if (!j || j->kind != ZT__JSON_OBJECT)
    return ZT_ERR(ZT_STATUS_IO, "'%s': field 'model.config' (the model's config.json) is missing (the file is damaged)",
                  path);
  return zt__llama_from_hf_json(path, j, &out->llama);
}

static void free_model(void *m) { zt_llama_free(m); }

static zt_status build(const zt_lm_config *c, zt_dtype dt, zt_store *evict_to, zt_model *out) {
  zt_llama *m = NULL;
  ZT_TRY(evict_to ? zt_llama_new_evicted(&c->llama, evict_to, &m) : zt_llama_new(&c->llama, dt, &m));
  *out = zt_llama_model(m);
  out->free = free_model;
  return ZT_OK;
}

static zt_status load_hf(const zt_model *m, const char *path) { return zt_llama_load_hf_weights(m->ctx, path); }

const zt__lm_family_i zt__llama_family = {
    .id = ZT_LM_LLAMA,
    .name = "llama",
    .presets = ZT_LLAMA_PRESET_NAMES,
    .hf_types = "llama, mistral, qwen2, qwen3",
    .preset = preset,
    .validate = validate,
    .dims = dims,
    .act_cost = zt__llama_act_cost,
    .reshape = reshape,
    .check_same = check_same,
    .describe = describe,
    .from_hf_json = from_hf_json,
    .hf_config_json = hf_config_json,
    .state_json = state_json,
    .state_read = state_read,
    .build = build,
    .load_hf = load_hf,
};
