/* A model family's table (zt/lm.h): what zt_lm_* dispatch to. One table per family, in its
 * own file (gpt2_family.c, llama_family.c), listed in lm.c. Every member is required unless it
 * says otherwise. Configs passed in are the family's own (c->family is the table's id).
 * Included by: src/models. */
#ifndef ZT_MODELS_FAMILY_H
#define ZT_MODELS_FAMILY_H

#include "io/buf.h"
#include "io/json.h"
#include "zt/lm.h"

typedef struct zt__lm_family_i {
  zt_lm_family id;
  const char *name;     /* "gpt2" */
  const char *presets;  /* its preset names, ", "-separated */
  const char *hf_types; /* the config.json model_type values it reads, ", "-separated */
  /* A preset of presets' list into *out (family set). */
  zt_status (*preset)(const char *name, zt_lm_config *out);
  zt_status (*validate)(const zt_lm_config *c);
  zt_lm_dims (*dims)(const zt_lm_config *c);
  zt_act_cost (*act_cost)(const zt_lm_config *c, zt_recompute mode, zt_checkpoint_policy policy);
  /* zt_lm_config_reshape's change (sizes <= 0 kept), leaving c valid or an error. */
  zt_status (*reshape)(zt_lm_config *c, int n_layer, int n_head, int hidden, int vocab, int context);
  /* Optional (NULL: the family has no dropout and refuses p > 0). */
  zt_status (*set_dropout)(zt_lm_config *c, double p);
  /* The first field where have and want differ in what loading needs, as ZT_STATUS_SHAPE
   * "<what> has <field> <have>, the model has <want>..." (both of this family). */
  zt_status (*check_same)(const char *what, const zt_lm_config *have, const zt_lm_config *want);
  void (*describe)(const zt_lm_config *c, char *buf, size_t cap);
  /* A transformers config.json (parsed: j, read from path, named in errors) of one of
   * hf_types into *out; and the config.json that a saved model of c in dtype dt carries. */
  zt_status (*from_hf_json)(const char *path, const zt__json *j, zt_lm_config *out);
  void (*hf_config_json)(const zt_lm_config *c, zt_dtype dt, zt__buf *b);
  /* state.json's "model" object: the members after "family" (each "\"key\": value", ", "-joined,
   * no braces), and reading them back from the object (path named in errors). */
  void (*state_json)(const zt_lm_config *c, zt__buf *b);
  zt_status (*state_read)(const char *path, const zt__json *model, zt_lm_config *out);
  /* zt_lm_new: *out owns the model (free set); evict_to as zt_lm_new says. */
  zt_status (*build)(const zt_lm_config *c, zt_dtype dt, zt_store *evict_to, zt_model *out);
  /* zt_lm_load_hf for a model of this family: path a folder or a safetensors file. */
  zt_status (*load_hf)(const zt_model *m, const char *path);
} zt__lm_family_i;

/* A config field as two configs have it, for check_same: zt__lm_check_fields gives the
 * ZT_STATUS_SHAPE of the first that differs ("<what> has <name> <have>, model has <want>"). */
typedef struct zt__lm_field {
  const char *name;
  int have, want;
} zt__lm_field;
ZT_NODISCARD zt_status zt__lm_check_fields(const char *what, int n, const zt__lm_field *f);

extern const zt__lm_family_i zt__gpt2_family;
extern const zt__lm_family_i zt__llama_family;

#endif
