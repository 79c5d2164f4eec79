/* GPT-2's family table (family.h): its presets, sizes, config.json and state.json members, and
 * its build, over the GPT-2 model's own API (zt/nn.h). */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/status_internal.h"
#include "io/atomic_file.h"
#include "models/family.h"
#include "models/gpt2_internal.h"
#include "models/lm_internal.h"

static zt_status preset(const char *name, zt_lm_config *out) { return zt_gpt2_preset(name, &out->gpt2); }
static zt_status validate(const zt_lm_config *c) { return zt_gpt2_config_validate(&c->gpt2); }

static zt_lm_dims dims(const zt_lm_config *lc) {
  const zt_gpt2_config *c = &lc->gpt2;
  int64_t C = c->n_embd, V = c->vocab_size;
  return (zt_lm_dims){.n_layer = c->n_layer, .hidden = c->n_embd, .n_head = c->n_head, .vocab = c->vocab_size,
                      .context = c->block_size, .attn_width = c->n_embd, .ffn = 4 * c->n_embd,
                      .embed_params = (V + c->block_size) * C, /* wte, wpe */
                      .block_params = 12 * C * C + 13 * C,
                      .out_params = V * C + 2 * C, /* the tied wte again, ln_f */
                      .params = zt_gpt2_config_num_params(c), .tied = true};
}

static zt_status reshape(zt_lm_config *lc, int n_layer, int n_head, int hidden, int vocab, int context) {
  zt_gpt2_config *c = &lc->gpt2;
  if (n_layer > 0) c->n_layer = n_layer;
  if (n_head > 0) c->n_head = n_head;
  if (hidden > 0) c->n_embd = hidden;
  if (vocab > 0) c->vocab_size = vocab;
  if (context > 0) c->block_size = context;
  return zt_gpt2_config_validate(c);
}

static zt_status set_dropout(zt_lm_config *lc, double p) {
  lc->gpt2.dropout = p;
  return zt_gpt2_config_validate(&lc->gpt2);
}

static zt_status check_same(const char *what, const zt_lm_config *h, const zt_lm_config *w) {
  const zt__lm_field f[] = {{"n_layer", h->gpt2.n_layer, w->gpt2.n_layer},
           {"n_head", h->gpt2.n_head, w->gpt2.n_head},
           {"n_embd", h->gpt2.n_embd, w->gpt2.n_embd},
           {"vocab_size", h->gpt2.vocab_size, w->gpt2.vocab_size},
           {"block_size", h->gpt2.block_size, w->gpt2.block_size}};
  return zt__lm_check_fields(what, (int)(sizeof f / sizeof f[0]), f);
}

static void describe(const zt_lm_config *lc, char *buf, size_t cap) {
  const zt_gpt2_config *c = &lc->gpt2;
  snprintf(buf, cap, "gpt2: %d layers, %d wide, %d heads, vocabulary %d, context %d", c->n_layer, c->n_embd, c->n_head,
           c->vocab_size, c->block_size);
}

/* An integer member of a transformers GPT2Config (or its alternative name), named in errors. */
static zt_status hf_int(const char *path, const zt__json *j, const char *key, const char *alt, int *out) {
  const zt__json *v = zt__json_get(j, key);
  if (!v && alt) v = zt__json_get(j, alt);
  int64_t x;
  if (!v || !zt__json_i64(v, &x) || x < 1 || x > INT32_MAX)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "'%s': '%s' is missing or not a positive integer (a transformers GPT-2 "
                  "config.json has n_layer, n_head, n_embd, vocab_size and n_positions)", path, key);
  *out = (int)x;
  return ZT_OK;
}

static zt_status from_hf_json(const char *path, const zt__json *j, zt_lm_config *lc) {
  zt_gpt2_config *g = &lc->gpt2;
  ZT_TRY(hf_int(path, j, "n_layer", NULL, &g->n_layer));
  ZT_TRY(hf_int(path, j, "n_head", NULL, &g->n_head));
  ZT_TRY(hf_int(path, j, "n_embd", NULL, &g->n_embd));
  ZT_TRY(hf_int(path, j, "vocab_size", NULL, &g->vocab_size));
  return hf_int(path, j, "n_positions", "n_ctx", &g->block_size);
}

static void state_json(const zt_lm_config *lc, zt__buf *b) {
  const zt_gpt2_config *c = &lc->gpt2;
  char d[32];
  zt__buf_printf(b, "\"n_layer\": %d, \"n_head\": %d, \"n_embd\": %d, \"vocab_size\": %d, \"block_size\": %d, "
                 "\"dropout\": %s", c->n_layer, c->n_head, c->n_embd, c->vocab_size, c->block_size,
                 zt__fmt_double(d, c->dropout));
}

static zt_status state_read(const char *path, const zt__json *j, zt_lm_config *lc) {
  zt_gpt2_config *c = &lc->gpt2;
  ZT_TRY(zt__lm_json_int(path, j, "n_layer", &c->n_layer));
  ZT_TRY(zt__lm_json_int(path, j, "n_head", &c->n_head));
  ZT_TRY(zt__lm_json_int(path, j, "n_embd", &c->n_embd));
  ZT_TRY(zt__lm_json_int(path, j, "vocab_size", &c->vocab_size));
  ZT_TRY(zt__lm_json_int(path, j, "block_size", &c->block_size));
  const zt__json *d = zt__json_get(j, "dropout");
  if (!d || !zt__json_f64(d, &c->dropout) || !(c->dropout >= 0 && c->dropout < 1))
    return ZT_ERR(ZT_STATUS_IO, "'%s': field 'model.dropout' must be a number in [0, 1)", path);
  return ZT_OK;
}

static void free_model(void *m) { zt_gpt2_free(m); }

static zt_status build(const zt_lm_config *c, zt_dtype dt, zt_store *evict_to, zt_model *out) {
  zt_gpt2 *m = NULL;
  ZT_TRY(evict_to ? zt_gpt2_new_evicted(&c->gpt2, evict_to, &m) : zt_gpt2_new_dtype(&c->gpt2, dt, &m));
  *out = zt_gpt2_model(m);
  out->free = free_model;
  return ZT_OK;
}

/* A folder's model.safetensors, or the file itself. */
static zt_status load_hf(const zt_model *m, const char *path) {
  struct stat sb;
  if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) return zt_gpt2_load_hf(m->ctx, path);
  char file[4096];
  ZT_TRY(zt__path_join(file, sizeof file, path, "model.safetensors"));
  return zt_gpt2_load_hf(m->ctx, file);
}

const zt__lm_family_i zt__gpt2_family = {
    .id = ZT_LM_GPT2,
    .name = "gpt2",
    .presets = ZT_GPT2_PRESET_NAMES,
    .hf_types = "gpt2",
    .preset = preset,
    .validate = validate,
    .dims = dims,
    .act_cost = zt__gpt2_act_cost,
    .reshape = reshape,
    .set_dropout = set_dropout,
    .check_same = check_same,
    .describe = describe,
    .from_hf_json = from_hf_json,
    .hf_config_json = zt__gpt2_hf_config_json,
    .state_json = state_json,
    .state_read = state_read,
    .build = build,
    .load_hf = load_hf,
};
