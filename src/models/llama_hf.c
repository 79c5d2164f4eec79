/* Llama-family models from Hugging Face folders: config.json in the layout of transformers 5
 * (rope_parameters) or 4 (top-level rope_theta and rope_scaling), and the weights in
 * model.safetensors or in the shards model.safetensors.index.json names (F32, F64, BF16, F16:
 * the safetensors reader converts). Every parameter must be found; names the model does not
 * have are refused, except a tied model's stored lm_head.weight and old rotary buffers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/status_internal.h"
#include "io/json.h"
#include "zt/io.h"
#include "zt/llama.h"

#define PATH_CAP 4096

static bool is_dir(const char *p) {
  struct stat st;
  return p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_file(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static zt_status join(char *buf, const char *dir, const char *name) {
  int n = snprintf(buf, PATH_CAP, "%s/%s", dir, name);
  if (n < 0 || n >= PATH_CAP) return ZT_ERR(ZT_STATUS_INVALID_ARG, "path '%s/%s' is too long", dir, name);
  return ZT_OK;
}

static zt_status read_json(const char *path, const char *what, zt__json **out) {
  void *text = NULL;
  size_t len = 0;
  ZT_TRY(zt_read_file(path, &text, &len));
  char w[PATH_CAP + 32];
  snprintf(w, sizeof w, "%s '%s'", what, path);
  zt_status s = zt__json_parse(text, len, w, out);
  free(text);
  if (!s && (*out)->kind != ZT__JSON_OBJECT) {
    zt__json_free(*out);
    *out = NULL;
    s = ZT_ERR(ZT_STATUS_INVALID_ARG, "%s is not a JSON object", w);
  }
  return s;
}

/* ------------------------------------------------------------------ config.json */

static bool present(const zt__json *v) { return v && v->kind != ZT__JSON_NULL; }

/* Integer key (dflt when absent or null and dflt >= 0; required otherwise). */
static zt_status get_int(const char *path, const zt__json *j, const char *key, int dflt, int *out) {
  const zt__json *v = zt__json_get(j, key);
  if (!present(v)) {
    if (dflt < 0) return ZT_ERR(ZT_STATUS_INVALID_ARG, "'%s': \"%s\" is missing", path, key);
    *out = dflt;
    return ZT_OK;
  }
  int64_t x;
  if (!zt__json_i64(v, &x) || x < 0 || x > INT32_MAX)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "'%s': \"%s\" is not a non-negative integer", path, key);
  *out = (int)x;
  return ZT_OK;
}

static zt_status get_f64(const char *path, const zt__json *j, const char *key, double dflt, bool required,
                         double *out) {
  const zt__json *v = zt__json_get(j, key);
  if (!present(v)) {
    if (required) return ZT_ERR(ZT_STATUS_INVALID_ARG, "'%s': \"%s\" is missing", path, key);
    *out = dflt;
    return ZT_OK;
  }
  if (!zt__json_f64(v, out)) return ZT_ERR(ZT_STATUS_INVALID_ARG, "'%s': \"%s\" is not a number", path, key);
  return ZT_OK;
}

static zt_status get_bool(const char *path, const zt__json *j, const char *key, bool dflt, bool *out) {
  const zt__json *v = zt__json_get(j, key);
  if (!present(v)) {
    *out = dflt;
    return ZT_OK;
  }
  if (v->kind != ZT__JSON_BOOL) return ZT_ERR(ZT_STATUS_INVALID_ARG, "'%s': \"%s\" is not true or false", path, key);
  *out = v->boolean;
  return ZT_OK;
}

/* rope_theta and the scaling, from rope_parameters (v5) or rope_theta + rope_scaling (v4). */
static zt_status read_rope(const char *path, const zt__json *j, zt_llama_config *c) {
  const zt__json *rp = zt__json_get(j, "rope_parameters");
  const zt__json *sc = NULL;
  if (present(rp)) {
    if (rp->kind != ZT__JSON_OBJECT)
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "'%s': \"rope_parameters\" is not an object", path);
    ZT_TRY(get_f64(path, rp, "rope_theta", 0, false, &c->rope_theta));
    sc = rp;
  }
  if (!(c->rope_theta > 0)) ZT_TRY(get_f64(path, j, "rope_theta", 10000.0, false, &c->rope_theta));
  if (!sc) {
    sc = zt__json_get(j, "rope_scaling");
    if (present(sc) && sc->kind != ZT__JSON_OBJECT)
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "'%s': \"rope_scaling\" is not an object", path);
    if (!present(sc)) sc = NULL;
  }
  c->rope_scaling = (zt_rope_scaling){0};
  if (!sc) return ZT_OK;
  const zt__json *type = zt__json_get(sc, "rope_type");
  if (!present(type)) type = zt__json_get(sc, "type");
  const char *t = present(type) && type->kind == ZT__JSON_STRING ? type->str : "default";
  if (!strcmp(t, "default")) return ZT_OK;
  if (strcmp(t, "llama3"))
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "'%s': rope scaling type \"%s\" is not supported; zerotrain supports \"default\" (none) and "
                  "\"llama3\"",
                  path, t);
  zt_rope_scaling *r = &c->rope_scaling;
  r->type = ZT_ROPE_SCALING_LLAMA3;
  int orig = 0;
  ZT_TRY(get_f64(path, sc, "factor", 0, true, &r->factor));
  ZT_TRY(get_f64(path, sc, "low_freq_factor", 0, true, &r->low_freq_factor));
  ZT_TRY(get_f64(path, sc, "high_freq_factor", 0, true, &r->high_freq_factor));
  ZT_TRY(get_int(path, sc, "original_max_position_embeddings", -1, &orig));
  r->original_max_position_embeddings = orig;
  return ZT_OK;
}

static zt_status parse_config(const char *path, const zt__json *j, zt_llama_config *c) {
  memset(c, 0, sizeof *c);
  const zt__json *type = zt__json_get(j, "model_type");
  const char *t = present(type) && type->kind == ZT__JSON_STRING ? type->str : NULL;
  if (!t || (strcmp(t, "llama") && strcmp(t, "mistral") && strcmp(t, "qwen2") && strcmp(t, "qwen3")))
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "'%s' is the config of a '%s' model; the Llama family supports model_type llama, mistral, qwen2 "
                  "and qwen3",
                  path, t ? t : "(no model_type)");
  snprintf(c->model_type, sizeof c->model_type, "%s", t);
  const zt__json *act = zt__json_get(j, "hidden_act");
  if (present(act) && (act->kind != ZT__JSON_STRING || strcmp(act->str, "silu")))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "'%s': hidden_act is \"%s\"; only \"silu\" (SwiGLU) is supported", path,
                  act->kind == ZT__JSON_STRING ? act->str : "?");
  bool mlp_bias = false;
  ZT_TRY(get_bool(path, j, "mlp_bias", false, &mlp_bias));
  if (mlp_bias) return ZT_ERR(ZT_STATUS_INVALID_ARG, "'%s': mlp_bias is true; MLP biases are not supported", path);
  ZT_TRY(get_int(path, j, "vocab_size", -1, &c->vocab_size));
  ZT_TRY(get_int(path, j, "hidden_size", -1, &c->hidden_size));
  ZT_TRY(get_int(path, j, "intermediate_size", -1, &c->intermediate_size));
  ZT_TRY(get_int(path, j, "num_hidden_layers", -1, &c->n_layer));
  ZT_TRY(get_int(path, j, "num_attention_heads", -1, &c->n_head));
  ZT_TRY(get_int(path, j, "num_key_value_heads", c->n_head, &c->n_kv_head));
  if (c->n_head < 1) return ZT_ERR(ZT_STATUS_INVALID_ARG, "'%s': num_attention_heads is 0", path);
  ZT_TRY(get_int(path, j, "head_dim", c->hidden_size / c->n_head, &c->head_dim));
  ZT_TRY(get_int(path, j, "max_position_embeddings", 2048, &c->max_position_embeddings));
  ZT_TRY(get_f64(path, j, "rms_norm_eps", 1e-6, false, &c->rms_norm_eps));
  ZT_TRY(get_f64(path, j, "initializer_range", 0.02, false, &c->initializer_range));
  ZT_TRY(read_rope(path, j, c));
  ZT_TRY(get_bool(path, j, "tie_word_embeddings", false, &c->tie_word_embeddings));
  ZT_TRY(get_bool(path, j, "attention_bias", false, &c->attention_bias));
  if (!strcmp(t, "qwen2")) c->attention_bias = true; /* Qwen2 always has q/k/v biases */
  c->qk_norm = !strcmp(t, "qwen3");
  bool use_sw = !strcmp(t, "mistral");
  if (!use_sw) ZT_TRY(get_bool(path, j, "use_sliding_window", false, &use_sw));
  if (use_sw) ZT_TRY(get_int(path, j, "sliding_window", 0, &c->sliding_window));
  return zt_llama_config_validate(c);
}

zt_status zt_llama_config_from_hf(const char *path, zt_llama_config *out) {
  if (!path || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_llama_config_from_hf: path and out are required");
  char buf[PATH_CAP];
  if (is_dir(path)) {
    ZT_TRY(join(buf, path, "config.json"));
    path = buf;
  }
  zt__json *j = NULL;
  ZT_TRY(read_json(path, "config", &j));
  zt_llama_config c;
  zt_status s = parse_config(path, j, &c);
  zt__json_free(j);
  if (!s) *out = c;
  return s;
}

/* ------------------------------------------------------------------ weights */

static bool ignorable(const zt_llama *m, const char *name) {
  size_t n = strlen(name), k = strlen("rotary_emb.inv_freq");
  if (n >= k && !strcmp(name + n - k, "rotary_emb.inv_freq")) return true;
  return zt_llama_get_config(m)->tie_word_embeddings && !strcmp(name, "lm_head.weight");
}

/* Names of file (n_names) that m neither has nor may ignore: an error naming the first. */
static zt_status check_extra(zt_llama *m, const char *file, int n, char **names) {
  zt_param *ps = NULL;
  int np = zt_llama_params(m, &ps);
  for (int i = 0; i < n; i++) {
    bool known = ignorable(m, names[i]);
    for (int k = 0; k < np && !known; k++) known = !strcmp(ps[k].name, names[i]);
    if (!known)
      return ZT_ERR(ZT_STATUS_INVALID_ARG,
                    "'%s' holds tensor '%s', which a %s model of this config does not have (is config.json the "
                    "folder's own?)",
                    file, names[i], zt_llama_get_config(m)->model_type);
  }
  return ZT_OK;
}

/* Load the params idx[0..n) of m from one file (non-strict: their presence was checked). */
static zt_status load_some(zt_llama *m, const char *file, int n, const int *idx) {
  zt_param *ps = NULL;
  zt_llama_params(m, &ps);
  const char **names = calloc((size_t)n + 1, sizeof *names);
  zt_tensor **ts = calloc((size_t)n + 1, sizeof *ts);
  zt_status s = ZT_OK;
  if (!names || !ts) s = ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  for (int i = 0; i < n && !s; i++) names[i] = ps[idx[i]].name, ts[i] = ps[idx[i]].tensor;
  bool prev = zt_set_grad_enabled(false);
  if (!s) s = zt_safetensors_load_into(file, n, names, ts, false);
  zt_set_grad_enabled(prev);
  free(names);
  free(ts);
  return s;
}

static zt_status load_single(zt_llama *m, const char *file) {
  int nf = 0;
  char **names = NULL;
  ZT_TRY(zt_safetensors_names(file, &nf, &names));
  zt_param *ps = NULL;
  int np = zt_llama_params(m, &ps);
  zt_status s = check_extra(m, file, nf, names);
  for (int k = 0; k < np && !s; k++) {
    bool found = false;
    for (int i = 0; i < nf && !found; i++) found = !strcmp(names[i], ps[k].name);
    if (!found)
      s = ZT_ERR(ZT_STATUS_INVALID_ARG, "'%s' has no tensor '%s' (the model's config asks for it)", file, ps[k].name);
  }
  free(names);
  int *idx = malloc(sizeof *idx * (size_t)(np + 1));
  if (!s && !idx) s = ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  for (int k = 0; k < np && !s; k++) idx[k] = k;
  if (!s) s = load_some(m, file, np, idx);
  free(idx);
  return s;
}

static zt_status load_sharded(zt_llama *m, const char *dir, const char *index) {
  zt__json *j = NULL;
  ZT_TRY(read_json(index, "safetensors index", &j));
  const zt__json *map = zt__json_get(j, "weight_map");
  zt_param *ps = NULL;
  int np = zt_llama_params(m, &ps);
  zt_status s = ZT_OK;
  if (!map || map->kind != ZT__JSON_OBJECT)
    s = ZT_ERR(ZT_STATUS_INVALID_ARG, "'%s' has no \"weight_map\" object", index);
  int *idx = malloc(sizeof *idx * (size_t)(np + 1));
  bool *done = calloc((size_t)np + 1, sizeof *done);
  if (!s && (!idx || !done)) s = ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  for (int i = 0; i < (map ? map->n : 0) && !s; i++) {
    if (map->items[i].kind != ZT__JSON_STRING)
      s = ZT_ERR(ZT_STATUS_INVALID_ARG, "'%s': weight_map[\"%s\"] is not a file name", index, map->keys[i]);
    else
      s = check_extra(m, index, 1, &map->keys[i]);
  }
  for (int k = 0; k < np && !s; k++) {
    const zt__json *f = zt__json_get(map, ps[k].name);
    if (!f) s = ZT_ERR(ZT_STATUS_INVALID_ARG, "'%s' names no file for tensor '%s'", index, ps[k].name);
  }
  // one load per shard, of the parameters it holds
  for (int k = 0; k < np && !s; k++) {
    if (done[k]) continue;
    const char *file = zt__json_get(map, ps[k].name)->str;
    int n = 0;
    for (int q = k; q < np; q++)
      if (!done[q] && !strcmp(zt__json_get(map, ps[q].name)->str, file)) idx[n++] = q, done[q] = true;
    char path[PATH_CAP];
    if (strchr(file, '/')) s = ZT_ERR(ZT_STATUS_INVALID_ARG, "'%s': shard '%s' is not a plain file name", index, file);
    if (!s) s = join(path, dir, file);
    if (!s) s = load_some(m, path, n, idx);
  }
  free(idx);
  free(done);
  zt__json_free(j);
  return s;
}

zt_status zt_llama_load_hf_weights(zt_llama *m, const char *dir) {
  if (!m || !dir) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_llama_load_hf_weights: model and dir are required");
  char single[PATH_CAP], index[PATH_CAP];
  ZT_TRY(join(single, dir, "model.safetensors"));
  ZT_TRY(join(index, dir, "model.safetensors.index.json"));
  zt_status s;
  if (is_file(single))
    s = load_single(m, single);
  else if (is_file(index))
    s = load_sharded(m, dir, index);
  else
    s = ZT_ERR(ZT_STATUS_IO, "'%s' holds neither model.safetensors nor model.safetensors.index.json", dir);
  return s ? zt__error_prefix(s, "loading the weights of '%s'", dir) : ZT_OK;
}

zt_status zt_llama_from_hf(const char *dir, zt_dtype dt, zt_llama **out) {
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_llama_from_hf: out is NULL");
  *out = NULL;
  zt_llama_config c;
  ZT_TRY(zt_llama_config_from_hf(dir, &c));
  zt_llama *m = NULL;
  ZT_TRY(zt_llama_new(&c, dt, &m));
  zt_status s = zt_llama_load_hf_weights(m, dir);
  if (s) {
    zt_llama_free(m);
    return s;
  }
  *out = m;
  return ZT_OK;
}
