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
  if ((has_file(path, "model.safetensors") || has_file(path, "model.safetensors.index.json")) &&
      has_file(path, "config.json")) {
    *k = INIT_HF_DIR;
    return ZT_OK;
  }
  return ZT_ERR(ZT_STATUS_INVALID_ARG,
                "zt_train_config.model.init_from '%s' is a folder with neither a zerotrain checkpoint (a 'latest' link "
                "or a state.json) nor a Hugging Face model (config.json with model.safetensors or "
                "model.safetensors.index.json)%s",
                path, has_file(path, "model.safetensors") ? ": it has model.safetensors but no config.json" : "");
}

/* The shape of what init_from names (*known false for a file: the options give it); what names
 * where it was read. */
static zt_status init_shape(const char *path, bool *known, zt_lm_config *g, char *what, size_t cap) {
  init_kind k;
  *known = false;
  ZT_TRY(init_kind_of(path, &k));
  if (k == INIT_FILE) return ZT_OK;
  *known = true;
  if (k == INIT_HF_DIR) {
    snprintf(what, cap, "'%s/config.json'", path);
    return zt_lm_config_from_hf(path, g);
  }
  zt_train_state st;
  ZT_TRY(zt_snapshot_read_state(path, &st));
  char dir[MS_PATH_CAP];
  ZT_TRY(zt_snapshot_resolve(path, dir, sizeof dir));
  snprintf(what, cap, "the checkpoint '%s'", dir);
  *g = st.model;
  return ZT_OK;
}

zt_status zt__train_model_source(const zt_train_config *c, zt_lm_config *g) {
  const zt_train_model_options *mo = &c->model;
  char what[MS_PATH_CAP + 32] = "";
  bool known = false;
  zt_lm_config src = *g;
  if (mo->init_from[0]) ZT_TRY(init_shape(mo->init_from, &known, &src, what, sizeof what));
  zt_lm_dims p = zt_lm_config_dims(g), d = zt_lm_config_dims(&src);
  if (known) {
    const struct {
      const char *field, *key;
      int flag, preset, source;
    } f[] = {{"n_layer", "layers", mo->n_layer, p.n_layer, d.n_layer},
             {"n_head", "heads", mo->n_head, p.n_head, d.n_head},
             {"n_embd", "width", mo->n_embd, p.hidden, d.hidden},
             {"vocab_size", "vocab_size", mo->vocab_size, p.vocab, d.vocab},
             {"block_size", "context", mo->block_size, p.context, d.context}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
      if (f[i].flag > 0 && f[i].flag != f[i].source)
        return ZT_ERR(ZT_STATUS_INVALID_ARG,
                      "zt_train_config.model.%s %d contradicts %s %d of %s (zt_train_config.model.init_from): leave "
                      "zt_train_config.model.%s out, and the model takes the shape it starts from",
                      f[i].field, f[i].flag, f[i].key, f[i].source, what, f[i].field);
      if (mo->preset_set && (f[i].preset != f[i].source || g->family != src.family))
        return ZT_ERR(ZT_STATUS_INVALID_ARG,
                      "zt_train_config.model.preset %s has %s %d, but %s has %d (zt_train_config.model.init_from): "
                      "leave zt_train_config.model.preset out, and the model takes the shape it starts from",
                      mo->preset, f[i].key, f[i].preset, what, f[i].source);
    }
    double dropout = g->family == ZT_LM_GPT2 && src.family == ZT_LM_GPT2 ? g->gpt2.dropout : 0;
    *g = src; /* its family and whole shape */
    if (g->family == ZT_LM_GPT2) g->gpt2.dropout = dropout;
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
  if (data_vocab > 0 && mo->vocab_size <= 0 && known && d.vocab < data_vocab)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "%s (zt_train_config.model.init_from) has a vocabulary of %d tokens, smaller than the token file "
                  "'%s' (%d tokens, from its header): the data was tokenized for another model",
                  what, d.vocab, c->data.path, data_vocab);
  if (data_vocab > 0 && mo->vocab_size <= 0 && !known) return zt_lm_config_reshape(g, 0, 0, 0, data_vocab, 0);
  return ZT_OK;
}

zt_status zt__train_init_from(const zt_model *m, const char *path) {
  init_kind k;
  ZT_TRY(init_kind_of(path, &k));
  if (k == INIT_CHECKPOINT) return zt_snapshot_load(path, m, NULL, NULL);
  return zt_lm_load_hf(m, path); /* a folder or one safetensors file */
}

zt_status zt__train_tokenizer_check(const zt_train_config *c, const zt_lm_config *g) {
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
  int vocab = zt_lm_config_dims(g).vocab;
  if (v > vocab)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "the tokenizer '%s' has %d tokens, more than the model's vocabulary of %d: its ids would not fit "
                  "the model; give zt_train_config.model.vocab_size %d (or a token file made with it, whose header "
                  "gives it)",
                  hf, v, vocab, v);
  return ZT_OK;
}

/* ------------------------------------------------ the run's model config (zt/train.h) */
/* Model config from the preset, what it starts from and its data, plus explicit overrides. */
zt_status zt_train_model_config(const zt_train_config *c, zt_lm_config *g) {
  ZT_TRY(zt_lm_preset(c->model.preset, g));
  ZT_TRY(zt__train_model_source(c, g)); /* init_from's family and shape, the token file's vocabulary */
  const zt_train_model_options *mo = &c->model;
  ZT_TRY(zt_lm_config_reshape(g, mo->n_layer, mo->n_head, mo->n_embd, mo->vocab_size, mo->block_size));
  if (mo->dropout >= 0) ZT_TRY(zt_lm_config_set_dropout(g, mo->dropout));
  return zt_lm_config_validate(g);
}
