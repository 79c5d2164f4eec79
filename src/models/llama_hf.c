/* Llama-family models from Hugging Face folders: config.json in the layout of transformers 5
 * (rope_parameters) or 4 (top-level rope_theta and rope_scaling), and the weights in
 * model.safetensors or in the shards model.safetensors.index.json names (F32, F64, BF16, F16:
 * the safetensors reader converts). Every parameter must be found; names the model does not
 * have are refused, except a tied model's stored lm_head.weight and old rotary buffers. The
 * writer makes the config.json that transformers 4 and 5 both load as a config's model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/status_internal.h"
#include "llama_internal.h"
#include "zt/io.h"

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
  zt_status s = zt__llama_from_hf_json(path, j, out);
  zt__json_free(j);
  return s;
}

zt_status zt__llama_from_hf_json(const char *path, const zt__json *j, zt_llama_config *out) {
  if (!path || !j || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt__llama_from_hf_json: path, j and out are required");
  if (j->kind != ZT__JSON_OBJECT) return ZT_ERR(ZT_STATUS_INVALID_ARG, "config '%s' is not a JSON object", path);
  zt_llama_config c = {0};
  zt_status s = parse_config(path, j, &c);
  if (!s) *out = c;
  return s;
}

/* ------------------------------------------------------------------ writing config.json */

/* The model_type config.json gets: c's own, or the type its flags need when c has none. */
static const char *hf_type(const zt_llama_config *c) {
  const char *known[] = {"llama", "mistral", "qwen2", "qwen3"};
  for (int i = 0; i < 4; i++)
    if (!strcmp(c->model_type, known[i])) return known[i];
  return c->qk_norm ? "qwen3" : "llama";
}

static const char *hf_architecture(const char *type) {
  if (!strcmp(type, "mistral")) return "MistralForCausalLM";
  if (!strcmp(type, "qwen2")) return "Qwen2ForCausalLM";
  if (!strcmp(type, "qwen3")) return "Qwen3ForCausalLM";
  return "LlamaForCausalLM";
}

static const char *hf_dtype(zt_dtype dt) {
  switch (dt) {
  case ZT_DTYPE_F64: return "float64";
  case ZT_DTYPE_BF16: return "bfloat16";
  case ZT_DTYPE_F16: return "float16";
  default: return "float32";
  }
}

/* v as a JSON number Python reads as a float (500000.0, not the int 500000), exactly. */
static void put_float(zt__buf *b, double v) {
  char t[32];
  zt__fmt_double(t, v);
  zt__buf_printf(b, "%s%s", t, strpbrk(t, ".eEn") ? "" : ".0");
}

/* The rope object: rope_type and, for llama3, its factors; rope_theta inside when with_theta
 * (transformers 5's rope_parameters; 4's rope_scaling has it at the top level). */
static void put_rope(zt__buf *b, const zt_llama_config *c, bool with_theta) {
  const zt_rope_scaling *r = &c->rope_scaling;
  bool llama3 = r->type == ZT_ROPE_SCALING_LLAMA3;
  zt__buf_printf(b, "{\"rope_type\": \"%s\"", llama3 ? "llama3" : "default");
  if (with_theta) zt__buf_printf(b, ", \"rope_theta\": "), put_float(b, c->rope_theta);
  if (llama3) {
    zt__buf_printf(b, ", \"factor\": "), put_float(b, r->factor);
    zt__buf_printf(b, ", \"low_freq_factor\": "), put_float(b, r->low_freq_factor);
    zt__buf_printf(b, ", \"high_freq_factor\": "), put_float(b, r->high_freq_factor);
    zt__buf_printf(b, ", \"original_max_position_embeddings\": %lld", (long long)r->original_max_position_embeddings);
  }
  zt__buf_printf(b, "}");
}

/* sliding_window, and what makes transformers apply it: Mistral always does; Qwen2 and Qwen3
 * with use_sliding_window, on the layers from max_window_layers on (0: all). Llama has no
 * window in transformers: use_sliding_window is for zerotrain's reader. */
static void put_sliding(zt__buf *b, const zt_llama_config *c, const char *type) {
  int w = c->sliding_window;
  if (w > 0)
    zt__buf_printf(b, "  \"sliding_window\": %d,\n", w);
  else
    zt__buf_printf(b, "  \"sliding_window\": null,\n");
  bool qwen = !strcmp(type, "qwen2") || !strcmp(type, "qwen3");
  if (qwen || (w > 0 && strcmp(type, "mistral")))
    zt__buf_printf(b, "  \"use_sliding_window\": %s,\n", w > 0 ? "true" : "false");
  if (qwen && w > 0) zt__buf_printf(b, "  \"max_window_layers\": 0,\n");
}

void zt__llama_hf_config_json(const zt_llama_config *c, zt_dtype dt, zt__buf *b) {
  const char *type = hf_type(c);
  zt__buf_printf(b,
                 "{\n"
                 "  \"architectures\": [\"%s\"],\n"
                 "  \"model_type\": \"%s\",\n"
                 "  \"vocab_size\": %d,\n"
                 "  \"hidden_size\": %d,\n"
                 "  \"intermediate_size\": %d,\n"
                 "  \"num_hidden_layers\": %d,\n"
                 "  \"num_attention_heads\": %d,\n"
                 "  \"num_key_value_heads\": %d,\n"
                 "  \"head_dim\": %d,\n"
                 "  \"max_position_embeddings\": %d,\n"
                 "  \"hidden_act\": \"silu\",\n",
                 hf_architecture(type), type, c->vocab_size, c->hidden_size, c->intermediate_size, c->n_layer,
                 c->n_head, c->n_kv_head, c->head_dim, c->max_position_embeddings);
  zt__buf_printf(b, "  \"rms_norm_eps\": "), put_float(b, c->rms_norm_eps);
  zt__buf_printf(b, ",\n  \"initializer_range\": "), put_float(b, c->initializer_range);
  zt__buf_printf(b, ",\n  \"rope_theta\": "), put_float(b, c->rope_theta);
  zt__buf_printf(b, ",\n  \"rope_scaling\": ");
  if (c->rope_scaling.type == ZT_ROPE_SCALING_NONE)
    zt__buf_printf(b, "null");
  else
    put_rope(b, c, false);
  zt__buf_printf(b, ",\n  \"rope_parameters\": "), put_rope(b, c, true);
  zt__buf_printf(b, ",\n  \"attention_bias\": %s,\n  \"tie_word_embeddings\": %s,\n", c->attention_bias ? "true" : "false",
                 c->tie_word_embeddings ? "true" : "false");
  if (!strcmp(type, "llama")) zt__buf_printf(b, "  \"mlp_bias\": false,\n");
  put_sliding(b, c, type);
  zt__buf_printf(b, "  \"use_cache\": true,\n  \"torch_dtype\": \"%s\",\n  \"dtype\": \"%s\"\n}\n", hf_dtype(dt),
                 hf_dtype(dt));
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
  if (is_file(dir)) /* one safetensors file */
    s = load_single(m, dir);
  else if (is_file(single))
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
