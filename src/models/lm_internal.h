/* What the checkpoint layer needs of a language model beyond zt/lm.h (src/models/lm.c): the
 * weights file and config.json of any family, and state.json's "model" object.
 * Included by: src/models, src/snapshot. */
#ifndef ZT_MODELS_LM_INTERNAL_H
#define ZT_MODELS_LM_INTERNAL_H

#include "io/buf.h"
#include "io/json.h"
#include "zt/lm.h"

/* m's parameters (Hugging Face names) into dir as <base>.safetensors, or past max_bytes (0 or
 * less: ZT_LM_SHARD_BYTES) as shards with <base>.safetensors.index.json (zt__st_save_split),
 * with metadata format=pt and, when save_id is not NULL, zt_save_id. */
ZT_NODISCARD zt_status zt__lm_save_weights(const zt_model *m, const char *dir, const char *base, const char *save_id,
                                           int64_t max_bytes);
/* The transformers config.json of m (its family's, in its parameters' dtype), written atomically. */
ZT_NODISCARD zt_status zt__lm_write_hf_config(const zt_model *m, const char *path);
/* transformers' name of dt in config.json ("float32", "bfloat16", ...). */
const char *zt__lm_torch_dtype(zt_dtype dt);
/* zt_lm_flops_per_step's count from its parts (each family's zt_*_flops_per_step). */
double zt__lm_flops(double params, int n_layer, double attn_width, int64_t B, int64_t T);
void zt__lm_hf_config_json(const zt_lm_config *c, zt_dtype dt, zt__buf *b);
/* state.json's "model": {"family": ..., the family's members}; and back (an object without
 * "family" is GPT-2's, as zerotrain wrote it before there were others). */
void zt__lm_state_json(const zt_lm_config *c, zt__buf *b);
ZT_NODISCARD zt_status zt__lm_state_read(const char *path, const zt__json *model, zt_lm_config *out);
/* An integer member key of state.json's model object in [0, 2^31), errors naming path. */
ZT_NODISCARD zt_status zt__lm_json_int(const char *path, const zt__json *obj, const char *key, int *out);

#endif
