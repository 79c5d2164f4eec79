/* Where a run's model comes from: its shape before it is built (the preset, then what
 * zt_train_config.model.init_from names, then the training token file's vocabulary; shape flags
 * must agree with the first two), its first weights (init_from: a transformers model.safetensors
 * file or folder, a zerotrain checkpoint series or version, sharded ones too), and the tokenizer
 * the run's checkpoints carry (checked before step 1). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file.h"
#include "core/status_internal.h"
#include "io/atomic_file.h"
#include "io/buf.h"
#include "io/json.h"
#include "train/model_source.h"

#define MS_PATH_CAP 4096

typedef enum init_kind {
  INIT_FILE = 0,   /* a transformers safetensors file: the shape comes from the options */
  INIT_HF_DIR,     /* a folder with model.safetensors and config.json */
  INIT_CHECKPOINT, /* a zerotrain checkpoint series or one version of it */
} init_kind;

static bool has_file(const char *dir, const char *name) {
  char p[MS_PATH_CAP];
  return !zt__path_join(p, MS_PATH_CAP, dir, name) && access(p, F_OK) == 0;
}

/* What path names; HF_DIR and CHECKPOINT are folders (a folder with a 'latest' link or a
 * state.json is zerotrain's, whatever else it holds). */
static zt_status init_kind_of(const char *path, init_kind *k) {
  struct stat sb;
  if (stat(path, &sb) != 0)
    return ZT_ERR(ZT_STATUS_IO, "cannot open zt_train_config.model.init_from '%s': %s", path, strerror(errno));
  if (!S_ISDIR(sb.st_mode)) {
    *k = INIT_FILE;
    return ZT_OK;
  }
  if (has_file(path, "latest") || has_file(path, "state.json")) {
    *k = INIT_CHECKPOINT;
    return ZT_OK;
  }
  if (has_file(path, "model.safetensors") && has_file(path, "config.json")) {
    *k = INIT_HF_DIR;
    return ZT_OK;
  }
  return ZT_ERR(ZT_STATUS_INVALID_ARG,
                "zt_train_config.model.init_from '%s' is a folder with neither a zerotrain checkpoint (a 'latest' link "
                "or a state.json) nor a transformers GPT-2 model (model.safetensors and config.json)%s",
                path, has_file(path, "model.safetensors") ? ": it has model.safetensors but no config.json" : "");
}

/* An integer member of a transformers config.json, named in errors. */
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

/* The shape of a transformers GPT2Config. */
static zt_status hf_shape(const char *dir, zt_gpt2_config *g, char *what, size_t cap) {
  char path[MS_PATH_CAP];
  ZT_TRY(zt__path_join(path, MS_PATH_CAP, dir, "config.json"));
  snprintf(what, cap, "'%s'", path);
  void *text = NULL;
  size_t len = 0;
  ZT_TRY(zt__read_regular_file(path, ZT__READ_JSON_MAX, "config file", &text, &len));
  zt__json *j = NULL;
  zt_status s = zt__json_parse(text, len, what, &j);
  free(text);
  const zt__json *type = s ? NULL : zt__json_get(j, "model_type");
  if (!s && j->kind != ZT__JSON_OBJECT)
    s = ZT_ERR(ZT_STATUS_INVALID_ARG, "'%s' is not a transformers config (not a JSON object)", path);
  else if (type && (type->kind != ZT__JSON_STRING || strcmp(type->str, "gpt2")))
    s = ZT_ERR(ZT_STATUS_INVALID_ARG, "'%s' is the config of a '%s' model; zerotrain starts from GPT-2 models only",
               path, type->kind == ZT__JSON_STRING ? type->str : "?");
  if (!s) s = hf_int(path, j, "n_layer", NULL, &g->n_layer);
  if (!s) s = hf_int(path, j, "n_head", NULL, &g->n_head);
  if (!s) s = hf_int(path, j, "n_embd", NULL, &g->n_embd);
  if (!s) s = hf_int(path, j, "vocab_size", NULL, &g->vocab_size);
  if (!s) s = hf_int(path, j, "n_positions", "n_ctx", &g->block_size);
  zt__json_free(j);
  return s;
}

/* The shape of what init_from names (*known false for a file: the options give it); what names
 * where it was read. */
static zt_status init_shape(const char *path, bool *known, zt_gpt2_config *g, char *what, size_t cap) {
  init_kind k;
  *known = false;
  ZT_TRY(init_kind_of(path, &k));
  if (k == INIT_FILE) return ZT_OK;
  *known = true;
  if (k == INIT_HF_DIR) return hf_shape(path, g, what, cap);
  zt_train_state st;
  ZT_TRY(zt_snapshot_read_state(path, &st));
  char dir[MS_PATH_CAP];
  ZT_TRY(zt_snapshot_resolve(path, dir, sizeof dir));
  snprintf(what, cap, "the checkpoint '%s'", dir);
  *g = st.model;
  return ZT_OK;
}

zt_status zt__train_model_source(const zt_train_config *c, zt_gpt2_config *g) {
  const zt_train_model_options *mo = &c->model;
  char what[MS_PATH_CAP + 32] = "";
  bool known = false;
  zt_gpt2_config src = *g;
  if (mo->init_from[0]) ZT_TRY(init_shape(mo->init_from, &known, &src, what, sizeof what));
  if (known) {
    const struct {
      const char *field, *key;
      int flag, preset, source;
    } f[] = {{"n_layer", "n_layer", mo->n_layer, g->n_layer, src.n_layer},
             {"n_head", "n_head", mo->n_head, g->n_head, src.n_head},
             {"n_embd", "n_embd", mo->n_embd, g->n_embd, src.n_embd},
             {"vocab_size", "vocab_size", mo->vocab_size, g->vocab_size, src.vocab_size},
             {"block_size", "n_positions", mo->block_size, g->block_size, src.block_size}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
      if (f[i].flag > 0 && f[i].flag != f[i].source)
        return ZT_ERR(ZT_STATUS_INVALID_ARG,
                      "zt_train_config.model.%s %d contradicts %s %d of %s (zt_train_config.model.init_from): leave "
                      "zt_train_config.model.%s out, and the model takes the shape it starts from",
                      f[i].field, f[i].flag, f[i].key, f[i].source, what, f[i].field);
      if (mo->preset_set && f[i].preset != f[i].source)
        return ZT_ERR(ZT_STATUS_INVALID_ARG,
                      "zt_train_config.model.preset %s has %s %d, but %s has %d (zt_train_config.model.init_from): "
                      "leave zt_train_config.model.preset out, and the model takes the shape it starts from",
                      mo->preset, f[i].key, f[i].preset, what, f[i].source);
    }
    g->n_layer = src.n_layer, g->n_head = src.n_head, g->n_embd = src.n_embd;
    g->vocab_size = src.vocab_size, g->block_size = src.block_size;
  }
  /* the training data's vocabulary (its tokenizer's), unless given or taken from init_from; a
   * file that cannot be read is left to the data's loading, which names what is wrong */
  int32_t data_vocab = 0;
  if (c->data.path[0] && zt_tokens_vocab_size(c->data.path, &data_vocab)) {
    zt_clear_error();
    data_vocab = 0;
  }
  if (data_vocab > 0 && mo->vocab_size > 0 && mo->vocab_size < data_vocab)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_train_config.model.vocab_size %d is smaller than the vocabulary of the token file '%s' (%d tokens, "
                  "from its header): the data's ids would not fit the model; leave zt_train_config.model.vocab_size out "
                  "to take the file's",
                  mo->vocab_size, c->data.path, data_vocab);
  if (data_vocab > 0 && mo->vocab_size <= 0 && known && src.vocab_size < data_vocab)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "%s (zt_train_config.model.init_from) has a vocabulary of %d tokens, smaller than the token file "
                  "'%s' (%d tokens, from its header): the data was tokenized for another model",
                  what, src.vocab_size, c->data.path, data_vocab);
  if (data_vocab > 0 && mo->vocab_size <= 0 && !known) g->vocab_size = data_vocab;
  return ZT_OK;
}

zt_status zt__train_init_from(zt_gpt2 *m, const char *path) {
  init_kind k;
  ZT_TRY(init_kind_of(path, &k));
  if (k == INIT_CHECKPOINT) return zt_snapshot_load(path, m, NULL, NULL);
  if (k == INIT_FILE) return zt_gpt2_load_hf(m, path);
  char file[MS_PATH_CAP];
  ZT_TRY(zt__path_join(file, MS_PATH_CAP, path, "model.safetensors"));
  return zt_gpt2_load_hf(m, file);
}

zt_status zt__train_tokenizer_check(const zt_train_config *c, const zt_gpt2_config *g) {
  const char *enc = c->data.encoder, *merges = c->data.merges, *hf = c->data.tokenizer;
  if (!enc[0] && !merges[0] && !hf[0]) return ZT_OK;
  if (hf[0] && (enc[0] || merges[0]))
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_train_config.data.tokenizer (a Hugging Face tokenizer folder) and zt_train_config.data.encoder/"
                  "merges (GPT-2's files) are two ways to give the tokenizer: give one");
  if (!hf[0] && (!enc[0] || !merges[0]))
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_train_config.data.encoder and zt_train_config.data.merges go together (GPT-2 byte-pair encoding: "
                  "encoder.json and vocab.bpe, the files the data was tokenized with): give both or neither");
  zt_tokenizer *t = NULL;
  zt_status s = hf[0] ? zt_tokenizer_hf(hf, &t) : zt_tokenizer_gpt2(enc, merges, &t);
  if (s)
    return zt__error_prefix(s, hf[0] ? "the tokenizer (zt_train_config.data.tokenizer)"
                                     : "the tokenizer (zt_train_config.data.encoder, zt_train_config.data.merges)");
  if (!hf[0]) hf = enc;
  int32_t v = zt_tokenizer_vocab_size(t);
  zt_tokenizer_free(t);
  if (v > g->vocab_size)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "the tokenizer '%s' has %d tokens, more than the model's vocabulary of %d: its ids would not fit "
                  "the model; give zt_train_config.model.vocab_size %d (or a token file made with it, whose header "
                  "gives it)",
                  hf, v, g->vocab_size, v);
  return ZT_OK;
}

/* ------------------------------------------------ the run's model config (zt/train.h) */
/* Model config from the preset, what it starts from and its data, plus explicit overrides. */
zt_status zt_train_model_config(const zt_train_config *c, zt_gpt2_config *g) {
  ZT_TRY(zt_gpt2_preset(c->model.preset, g));
  ZT_TRY(zt__train_model_source(c, g)); /* init_from's shape, the token file's vocabulary */
  if (c->model.n_layer > 0) g->n_layer = c->model.n_layer;
  if (c->model.n_head > 0) g->n_head = c->model.n_head;
  if (c->model.n_embd > 0) g->n_embd = c->model.n_embd;
  if (c->model.vocab_size > 0) g->vocab_size = c->model.vocab_size;
  if (c->model.block_size > 0) g->block_size = c->model.block_size;
  if (c->model.dropout >= 0) g->dropout = c->model.dropout;
  return zt_gpt2_config_validate(g);
}
