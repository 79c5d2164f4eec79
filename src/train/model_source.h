/* Where a run's model comes from (src/train/model_source.c): its shape, its first weights and
 * the tokenizer its checkpoints carry.
 * Included by: src/train. */
#ifndef ZT_TRAIN_MODEL_SOURCE_H
#define ZT_TRAIN_MODEL_SOURCE_H

#include "zt/train.h"

/* g holds the preset's config; sets the shape of what c->model.init_from names (a transformers
 * folder's config.json: n_layer, n_head, n_embd, vocab_size, n_positions; a zerotrain checkpoint's
 * state.json), where a shape option or an explicitly set preset that contradicts it is an error
 * naming both values; else, with no vocab_size option, the vocabulary size from the header of the
 * training token file (when it records one). A vocab_size option smaller than that header's is an
 * error naming both (a larger one is a padded vocabulary). The shape options are applied after. */
ZT_NODISCARD zt_status zt__train_model_source(const zt_train_config *c, zt_lm_config *g);
/* Load init_from's weights into m: a transformers safetensors file, a folder with model.safetensors
 * (and config.json), or a zerotrain checkpoint series or version (sharded: consolidated on load). */
ZT_NODISCARD zt_status zt__train_init_from(const zt_model *m, const char *path);
/* The run's tokenizer (c->data.encoder and merges: both or neither; or c->data.tokenizer, a
 * Hugging Face folder, not with them) loads, and its vocabulary fits the model's (g). */
ZT_NODISCARD zt_status zt__train_tokenizer_check(const zt_train_config *c, const zt_lm_config *g);

#endif
