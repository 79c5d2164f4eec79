/* Language models of every family behind one config (zt/lm.h): each call finds the config's
 * family table (family.h) and hands over to it; the weights of any family are written here,
 * from the model's parameters, which carry Hugging Face names in every family. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/file.h"
#include "io/atomic_file.h"
#include "core/status_internal.h"
#include "io/safetensors.h"
#include "models/family.h"
#include "models/lm_internal.h"

#define LM_PATH_CAP 4096

static const zt__lm_family_i *const families[] = {&zt__gpt2_family, &zt__llama_family};
#define N_FAMILIES ((int)(sizeof families / sizeof families[0]))

static const zt__lm_family_i *family_of(const zt_lm_config *c) {
  for (int i = 0; c && i < N_FAMILIES; i++)
    if (families[i]->id == c->family) return families[i];
  return NULL;
}

static zt_status no_family(const char *fn, const zt_lm_config *c) {
  if (!c) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: the config is NULL", fn);
  return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: the config's family is %d, which is none of zerotrain's (gpt2, llama)", fn,
                (int)c->family);
}

#define FAMILY(fn, c)                                                                                                  \
  const zt__lm_family_i *f = family_of(c);                                                                             \
  if (!f) return no_family(fn, c)

const char *zt_lm_family_name(zt_lm_family id) {
  zt_lm_config c = {.family = id};
  const zt__lm_family_i *f = family_of(&c);
  return f ? f->name : "?";
}

/* Whether name is one of list's ", "-separated entries. */
static bool listed(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = list; *p;) {
    size_t k = strcspn(p, ",");
    if (k == n && !strncmp(p, name, n)) return true;
    p += k;
    while (*p == ',' || *p == ' ') p++;
  }
  return false;
}

/* Every family's, in the order of families[]. */
const char *zt_lm_preset_names(void) { return ZT_GPT2_PRESET_NAMES ", " ZT_LLAMA_PRESET_NAMES; }

zt_status zt_lm_preset(const char *name, zt_lm_config *out) {
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_lm_preset: out is NULL");
  for (int i = 0; name && i < N_FAMILIES; i++)
    if (listed(families[i]->presets, name)) {
      memset(out, 0, sizeof *out);
      out->family = families[i]->id;
      return families[i]->preset(name, out);
    }
  return ZT_ERR(ZT_STATUS_INVALID_ARG, "unknown model preset \"%s\"; the presets are %s", name ? name : "(null)",
                zt_lm_preset_names());
}

zt_status zt_lm_config_validate(const zt_lm_config *c) {
  FAMILY("zt_lm_config_validate", c);
  return f->validate(c);
}

zt_lm_dims zt_lm_config_dims(const zt_lm_config *c) {
  const zt__lm_family_i *f = family_of(c);
  return f ? f->dims(c) : (zt_lm_dims){0};
}

double zt__lm_flops(double params, int n_layer, double attn_width, int64_t B, int64_t T) {
  double bt = (double)B * (double)T;
  return 6.0 * params * bt + 12.0 * n_layer * (double)T * attn_width * bt;
}

double zt_lm_flops_per_step(const zt_lm_dims *d, int64_t B, int64_t T) {
  return d ? zt__lm_flops((double)d->params, d->n_layer, d->attn_width, B, T) : 0;
}

zt_act_cost zt_lm_act_cost(const zt_lm_config *c, zt_recompute mode, zt_checkpoint_policy policy) {
  const zt__lm_family_i *f = family_of(c);
  return f ? f->act_cost(c, mode, policy) : (zt_act_cost){0};
}

zt_status zt_lm_config_reshape(zt_lm_config *c, int n_layer, int n_head, int hidden, int vocab, int context) {
  FAMILY("zt_lm_config_reshape", c);
  return f->reshape(c, n_layer, n_head, hidden, vocab, context);
}

zt_status zt_lm_config_set_dropout(zt_lm_config *c, double p) {
  FAMILY("zt_lm_config_set_dropout", c);
  if (f->set_dropout) return f->set_dropout(c, p);
  if (p > 0)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "dropout %g: %s models have no dropout; leave it out (or 0)", p, f->name);
  return ZT_OK;
}

zt_status zt_lm_config_check_same(const char *what, const zt_lm_config *have, const zt_lm_config *want) {
  FAMILY("zt_lm_config_check_same", want);
  if (!have || have->family != want->family)
    return ZT_ERR(ZT_STATUS_SHAPE, "%s holds a %s model, the model is %s: it was saved from another model family", what,
                  have ? zt_lm_family_name(have->family) : "?", f->name);
  return f->check_same(what, have, want);
}

zt_status zt__lm_check_fields(const char *what, int n, const zt__lm_field *f) {
  for (int i = 0; i < n; i++)
    if (f[i].have != f[i].want)
      return ZT_ERR(ZT_STATUS_SHAPE, "%s has %s %d, model has %d: it was saved from another model shape", what,
                    f[i].name, f[i].have, f[i].want);
  return ZT_OK;
}

void zt_lm_config_describe(const zt_lm_config *c, char *buf, size_t cap) {
  const zt__lm_family_i *f = family_of(c);
  if (f) f->describe(c, buf, cap);
  else if (cap) snprintf(buf, cap, "an unknown model family");
}

/* ------------------------------------------------------------------ Hugging Face config.json */

static zt_status hf_json_config(const char *path, const zt__json *j, zt_lm_config *out) {
  if (j->kind != ZT__JSON_OBJECT)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "'%s' is not a transformers config (not a JSON object)", path);
  const zt__json *type = zt__json_get(j, "model_type");
  const char *t = type && type->kind == ZT__JSON_STRING ? type->str : "gpt2"; /* GPT-2 exports may omit it */
  for (int i = 0; i < N_FAMILIES; i++)
    if (listed(families[i]->hf_types, t)) {
      memset(out, 0, sizeof *out);
      out->family = families[i]->id;
      return families[i]->from_hf_json(path, j, out);
    }
  char types[256] = "";
  for (int i = 0; i < N_FAMILIES; i++)
    snprintf(types + strlen(types), sizeof types - strlen(types), "%s%s", i ? ", " : "", families[i]->hf_types);
  return ZT_ERR(ZT_STATUS_UNSUPPORTED, "'%s' is the config of a '%s' model; zerotrain trains the model types %s", path,
                t, types);
}

zt_status zt_lm_config_from_hf(const char *path, zt_lm_config *out) {
  if (!path || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_lm_config_from_hf: path and out are required");
  char file[LM_PATH_CAP];
  struct stat sb;
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) ZT_TRY(zt__path_join(file, sizeof file, path, "config.json"));
  else snprintf(file, sizeof file, "%s", path);
  void *text = NULL;
  size_t len = 0;
  ZT_TRY(zt__read_regular_file(file, ZT__READ_JSON_MAX, "config file", &text, &len));
  char what[LM_PATH_CAP + 4];
  snprintf(what, sizeof what, "'%s'", file);
  zt__json *j = NULL;
  zt_status s = zt__json_parse(text, len, what, &j);
  free(text);
  if (!s) s = hf_json_config(file, j, out);
  zt__json_free(j);
  return s;
}

const char *zt__lm_torch_dtype(zt_dtype dt) {
  switch (dt) {
  case ZT_DTYPE_F64: return "float64";
  case ZT_DTYPE_BF16: return "bfloat16";
  case ZT_DTYPE_F16: return "float16";
  default: return "float32";
  }
}

void zt__lm_hf_config_json(const zt_lm_config *c, zt_dtype dt, zt__buf *b) {
  const zt__lm_family_i *f = family_of(c);
  if (f) f->hf_config_json(c, dt, b);
}

/* ------------------------------------------------------------------ state.json's model */

void zt__lm_state_json(const zt_lm_config *c, zt__buf *b) {
  const zt__lm_family_i *f = family_of(c);
  if (!f) return;
  zt__buf_printf(b, "{\"family\": \"%s\", ", f->name);
  f->state_json(c, b);
  zt__buf_printf(b, "}");
}

zt_status zt__lm_state_read(const char *path, const zt__json *model, zt_lm_config *out) {
  if (!model || model->kind != ZT__JSON_OBJECT)
    return ZT_ERR(ZT_STATUS_IO, "'%s': field 'model' is missing or not an object (the file is damaged)", path);
  const zt__json *fam = zt__json_get(model, "family");
  const char *name = fam && fam->kind == ZT__JSON_STRING ? fam->str : "gpt2"; /* written before there were others */
  for (int i = 0; i < N_FAMILIES; i++)
    if (!strcmp(families[i]->name, name)) {
      memset(out, 0, sizeof *out);
      out->family = families[i]->id;
      return families[i]->state_read(path, model, out);
    }
  return ZT_ERR(ZT_STATUS_UNSUPPORTED, "'%s': the model family '%s' is not one this zerotrain knows (gpt2, llama)", path,
                name);
}

zt_status zt__lm_json_int(const char *path, const zt__json *obj, const char *key, int *out) {
  const zt__json *v = zt__json_get(obj, key);
  int64_t x;
  if (!v || !zt__json_i64(v, &x) || x < 0 || x > INT32_MAX)
    return ZT_ERR(ZT_STATUS_IO, "'%s': field 'model.%s' is missing or not an integer in [0, 2^31) (the file is damaged)",
                  path, key);
  *out = (int)x;
  return ZT_OK;
}

/* ------------------------------------------------------------------ models */

zt_status zt_lm_new(const zt_lm_config *c, zt_dtype dt, zt_store *evict_to, zt_model *out) {
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_lm_new: out is NULL");
  *out = (zt_model){0};
  FAMILY("zt_lm_new", c);
  ZT_TRY(f->validate(c));
  if (evict_to && dt != ZT_DTYPE_F32)
    return ZT_ERR(ZT_STATUS_DTYPE, "zt_lm_new: a model built into a store is f32 (asked for %s)", zt_dtype_name(dt));
  return f->build(c, dt, evict_to, out);
}

static zt_status lm_of(const char *fn, const zt_model *m, const zt__lm_family_i **f) {
  const zt_lm_config *c = m ? zt_model_config(m) : NULL;
  if (!c) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: the model is NULL or not a language model of a family", fn);
  *f = family_of(c);
  return *f ? ZT_OK : no_family(fn, c);
}

zt_status zt_lm_load_hf(const zt_model *m, const char *path) {
  const zt__lm_family_i *f;
  ZT_TRY(lm_of("zt_lm_load_hf", m, &f));
  if (!path || !*path) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_lm_load_hf: the path is empty");
  return f->load_hf(m, path);
}

zt_status zt__lm_save_weights(const zt_model *m, const char *dir, const char *base, const char *save_id,
                              int64_t max_bytes) {
  zt_param *params;
  int n = zt_model_params(m, &params);
  if (n <= 0) return ZT_ERR(ZT_STATUS_STATE, "saving into '%s': the model has no parameters", dir);
  const char **names = malloc(sizeof *names * (size_t)n);
  zt_tensor **tensors = malloc(sizeof *tensors * (size_t)n);
  zt_status s = ZT_OK;
  if (!names || !tensors) {
    s = ZT_ERR(ZT_STATUS_OOM, "saving into '%s': out of memory", dir);
  } else {
    for (int i = 0; i < n; i++) {
      names[i] = params[i].name;
      tensors[i] = params[i].tensor;
    }
    /* transformers refuses a safetensors file without format=pt in its metadata. */
    const char *keys[] = {"format", "zt_save_id"}, *vals[] = {"pt", save_id};
    s = zt__st_save_split(dir, base, n, names, tensors, save_id ? 2 : 1, keys, vals,
                          max_bytes > 0 ? max_bytes : ZT_LM_SHARD_BYTES);
  }
  free(names);
  free(tensors);
  return s;
}

zt_status zt__lm_write_hf_config(const zt_model *m, const char *path) {
  const zt__lm_family_i *f;
  ZT_TRY(lm_of("writing config.json", m, &f));
  zt_param *params;
  int n = zt_model_params(m, &params);
  zt__buf b = {0};
  f->hf_config_json(zt_model_config(m), n > 0 ? params[0].tensor->dtype : ZT_DTYPE_F32, &b);
  zt_status s = zt__buf_write_atomic(&b, path);
  zt__buf_free(&b);
  return s;
}

zt_status zt_lm_save_hf(const zt_model *m, const char *dir, int64_t max_shard_bytes) {
  const zt__lm_family_i *f;
  ZT_TRY(lm_of("zt_lm_save_hf", m, &f));
  if (!dir || !*dir) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_lm_save_hf: the folder name is empty");
  char cfg[LM_PATH_CAP];
  if (mkdir(dir, 0755) != 0 && errno != EEXIST)
    return ZT_ERR(ZT_STATUS_IO, "zt_lm_save_hf: cannot make the folder '%s': %s", dir, strerror(errno));
  ZT_TRY(zt__path_join(cfg, sizeof cfg, dir, "config.json"));
  ZT_TRY(zt__lm_save_weights(m, dir, "model", NULL, max_shard_bytes));
  return zt__lm_write_hf_config(m, cfg);
}
