/* Training checkpoints.
 * A checkpoint folder holds model.safetensors (the model's Hugging Face names, metadata
 * format=pt) + config.json (its family's transformers config) so transformers loads it as is, and
 * optim.safetensors + state.json for resuming. state.json is the commit record: written
 * last, it names a save id that the two tensor files carry too, so a folder whose files
 * were mixed is refused instead of resumed from. Saves go into a series folder, one
 * version per save behind an atomically swapped 'latest' link (src/snapshot/series.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/backend.h"
#include "core/file.h"
#include "core/tensor_internal.h"
#include "io/atomic_file.h"
#include "io/bounce.h"
#include "io/buf.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "models/lm_internal.h"
#include "snapshot/sharded.h"
#include "snapshot/snapshot_internal.h"

#define CK_MODEL "model.safetensors"
#define CK_OPTIM "optim.safetensors"
#define CK_CONFIG "config.json"
#define CK_STATE "state.json"
#define CK_VOCAB "vocab.json"
#define CK_MERGES "merges.txt"
#define CK_FORMAT "zerotrain-checkpoint"
#define CK_VERSION 1
#define CK_PATH_CAP 4096

/* ------------------------------------------------------------------ state.json */

typedef struct ck_state {
  zt_train_state st;
  char save_id[64];
  bool has_optim;
} ck_state;

/* extra: more members (each line "  \"key\": value,\n") placed before "optimizer"; may be NULL. */
static void state_json(zt__buf *b, const ck_state *k, const char *extra) {
  const zt_train_state *st = &k->st;
  char dbuf[32];
  zt__buf_printf(b,
                 "{\n"
                 "  \"format\": \"" CK_FORMAT "\",\n"
                 "  \"version\": %d,\n"
                 "  \"save_id\": \"%s\",\n"
                 "  \"step\": %lld,\n"
                 "  \"rng\": {\"seed\": %llu, \"offset\": %llu},\n"
                 "  \"data\": {\"epoch\": %llu, \"index\": %lld},\n"
                 "  \"model\": ",
                 CK_VERSION, k->save_id, (long long)st->step, (unsigned long long)st->rng.seed,
                 (unsigned long long)st->rng.offset, (unsigned long long)st->data.epoch, (long long)st->data.index);
  zt__lm_state_json(&st->model, b);
  zt__buf_printf(b, ",\n");
  if (st->loss_scale > 0)
    zt__buf_printf(b, "  \"loss_scale\": {\"scale\": %s, \"good_steps\": %lld},\n", zt__fmt_double(dbuf, st->loss_scale),
                   (long long)st->loss_scale_good);
  if (st->options[0]) {
    zt__buf_printf(b, "  \"options\": ");
    zt__buf_json_string(b, st->options);
    zt__buf_printf(b, ",\n");
  }
  if (extra) zt__buf_printf(b, "%s", extra);
  zt__buf_printf(b, "  \"optimizer\": %s\n}\n", k->has_optim ? "true" : "false");
}

void zt__snap_state_json(zt__buf *b, const zt_train_state *st, const char *save_id, bool has_optim, const char *extra) {
  ck_state k;
  memset(&k, 0, sizeof k);
  k.st = *st;
  snprintf(k.save_id, sizeof k.save_id, "%s", save_id);
  k.has_optim = has_optim;
  state_json(b, &k, extra);
}

/* Field access for state.json: each failure names the file and the field. */
static zt_status field(const char *path, const zt__json *obj, const char *key, const char *sub, const zt__json **out) {
  const zt__json *v = zt__json_get(obj, key);
  if (v && sub) v = zt__json_get(v, sub);
  if (!v)
    return ZT_ERR(ZT_STATUS_IO, "'%s': field '%s%s%s' is missing (the file is damaged or not a zerotrain state.json)",
                  path, key, sub ? "." : "", sub ? sub : "");
  *out = v;
  return ZT_OK;
}

static zt_status field_i64(const char *path, const zt__json *obj, const char *key, const char *sub, int64_t lo,
                           int64_t hi, int64_t *out) {
  const zt__json *v = NULL;
  ZT_TRY(field(path, obj, key, sub, &v));
  if (!zt__json_i64(v, out) || *out < lo || *out > hi)
    return ZT_ERR(ZT_STATUS_IO, "'%s': field '%s%s%s' must be an integer in [%lld, %lld]", path, key, sub ? "." : "",
                  sub ? sub : "", (long long)lo, (long long)hi);
  return ZT_OK;
}

static zt_status field_u64(const char *path, const zt__json *obj, const char *key, const char *sub, uint64_t *out) {
  const zt__json *v = NULL;
  ZT_TRY(field(path, obj, key, sub, &v));
  if (!zt__json_u64(v, out))
    return ZT_ERR(ZT_STATUS_IO, "'%s': field '%s%s%s' must be an unsigned 64-bit integer", path, key,
                  sub ? "." : "", sub ? sub : "");
  return ZT_OK;
}

static zt_status read_state(const char *dir, ck_state *k) {
  if (!dir || !*dir) return ZT_ERR(ZT_STATUS_INVALID_ARG, "checkpoint folder name is empty");
  memset(k, 0, sizeof *k);
  struct stat sb;
  if (stat(dir, &sb) != 0)
    return ZT_ERR(ZT_STATUS_IO, "cannot open checkpoint '%s': %s", dir, strerror(errno));
  if (!S_ISDIR(sb.st_mode))
    return ZT_ERR(ZT_STATUS_IO, "checkpoint '%s' is not a folder (a checkpoint is a folder with %s, %s and %s)", dir,
                  CK_MODEL, CK_OPTIM, CK_STATE);
  char path[CK_PATH_CAP];
  ZT_TRY(zt__path_join(path, CK_PATH_CAP, dir, CK_STATE));
  if (access(path, F_OK) != 0 && errno == ENOENT)
    return ZT_ERR(ZT_STATUS_IO,
                  "checkpoint '%s' has no %s: it is not a zerotrain checkpoint, or the save that wrote it did not "
                  "finish (%s is written last); use an earlier checkpoint",
                  dir, CK_STATE, CK_STATE);
  void *text;
  size_t len;
  ZT_TRY(zt__read_regular_file(path, ZT__READ_JSON_MAX, "checkpoint file", &text, &len));
  zt__json *j = NULL;
  char what[CK_PATH_CAP + 8];
  snprintf(what, sizeof what, "'%s'", path);
  zt_status s = zt__json_parse(text, len, what, &j);
  free(text);
  if (s) return s;
  const zt__json *v;
  int64_t x;
  zt_train_state *st = &k->st;
  if (j->kind != ZT__JSON_OBJECT || !(v = zt__json_get(j, "format")) || v->kind != ZT__JSON_STRING ||
      strcmp(v->str, CK_FORMAT)) {
    s = ZT_ERR(ZT_STATUS_IO, "'%s' is not a zerotrain state.json (no \"format\": \"" CK_FORMAT "\")", path);
    goto out;
  }
  if ((s = field_i64(path, j, "version", NULL, 0, INT32_MAX, &x))) goto out;
  if (x != CK_VERSION) {
    s = ZT_ERR(ZT_STATUS_UNSUPPORTED, "'%s' is checkpoint format version %lld; this zerotrain reads version %d", path,
               (long long)x, CK_VERSION);
    goto out;
  }
  if ((s = field(path, j, "save_id", NULL, &v))) goto out;
  if (v->kind != ZT__JSON_STRING || strlen(v->str) >= sizeof k->save_id) {
    s = ZT_ERR(ZT_STATUS_IO, "'%s': field 'save_id' must be a short string", path);
    goto out;
  }
  snprintf(k->save_id, sizeof k->save_id, "%s", v->str);
  if ((s = field_i64(path, j, "step", NULL, 0, INT64_MAX, &st->step))) goto out;
  if ((s = field_u64(path, j, "rng", "seed", &st->rng.seed))) goto out;
  if ((s = field_u64(path, j, "rng", "offset", &st->rng.offset))) goto out;
  if ((s = field_u64(path, j, "data", "epoch", &st->data.epoch))) goto out;
  if ((s = field_i64(path, j, "data", "index", 0, INT64_MAX, &st->data.index))) goto out;
  if ((s = zt__lm_state_read(path, zt__json_get(j, "model"), &st->model))) goto out;
  if (zt__json_get(j, "loss_scale")) { /* f16 runs only */
    if ((s = field(path, j, "loss_scale", "scale", &v))) goto out;
    if (!zt__json_f64(v, &st->loss_scale) || !(st->loss_scale > 0)) {
      s = ZT_ERR(ZT_STATUS_IO, "'%s': field 'loss_scale.scale' must be a positive number", path);
      goto out;
    }
    if ((s = field_i64(path, j, "loss_scale", "good_steps", 0, INT64_MAX, &st->loss_scale_good))) goto out;
  }
  if ((v = zt__json_get(j, "options"))) { /* recorded since the series layout; optional */
    if (v->kind != ZT__JSON_STRING || strlen(v->str) >= sizeof st->options) {
      s = ZT_ERR(ZT_STATUS_IO, "'%s': field 'options' must be a string of fewer than %zu bytes", path,
                 sizeof st->options);
      goto out;
    }
    memcpy(st->options, v->str, strlen(v->str) + 1);
  }
  if ((s = field(path, j, "optimizer", NULL, &v))) goto out;
  if (v->kind != ZT__JSON_BOOL) {
    s = ZT_ERR(ZT_STATUS_IO, "'%s': field 'optimizer' must be true or false", path);
    goto out;
  }
  k->has_optim = v->boolean;
out:
  zt__json_free(j);
  return s;
}

zt_status zt__snap_read_state(const char *dir, zt_train_state *st, char save_id[64], bool *has_optim) {
  ck_state k;
  ZT_TRY(read_state(dir, &k));
  if (st) *st = k.st;
  if (save_id) memcpy(save_id, k.save_id, sizeof k.save_id);
  if (has_optim) *has_optim = k.has_optim;
  return ZT_OK;
}

zt_status zt_snapshot_read_state(const char *dir_in, zt_train_state *st) {
  if (!st) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_snapshot_read_state: st is NULL");
  char dir[CK_PATH_CAP];
  ZT_TRY(zt_snapshot_resolve(dir_in, dir, sizeof dir));
  ck_state k;
  ZT_TRY(read_state(dir, &k));
  *st = k.st;
  return ZT_OK;
}

/* ------------------------------------------------------------------ save */

const char *const zt__snap_hf_tokenizer_files[ZT__SNAP_HF_TOKENIZER_FILES] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"};

zt_status zt__snap_copy_tokenizer(const char *into, const zt_train_state *st) {
  const char *src[2] = {st->encoder, st->merges}, *dst[2] = {CK_VOCAB, CK_MERGES};
  for (int i = 0; i < 2; i++) {
    if (!src[i][0]) continue;
    void *data = NULL;
    size_t n = 0;
    char path[CK_PATH_CAP];
    ZT_TRY(zt__read_regular_file(src[i], ZT__READ_BPE_MAX, "tokenizer file", &data, &n));
    const void *chunk = data;
    zt_status s = zt__path_join(path, CK_PATH_CAP, into, dst[i]);
    if (!s) s = zt_write_file_atomic(path, &chunk, &n, 1);
    free(data);
    if (s) return zt__error_prefix(s, "copying the tokenizer file '%s' into the checkpoint", src[i]);
  }
  if (!st->tokenizer[0]) return ZT_OK;
  for (int i = 0; i < ZT__SNAP_HF_TOKENIZER_FILES; i++) {
    char from[CK_PATH_CAP], path[CK_PATH_CAP];
    ZT_TRY(zt__path_join(from, CK_PATH_CAP, st->tokenizer, zt__snap_hf_tokenizer_files[i]));
    if (i > 0 && access(from, F_OK) != 0) continue; /* tokenizer.json is needed, the others are optional */
    void *data = NULL;
    size_t n = 0;
    ZT_TRY(zt__read_regular_file(from, ZT__READ_JSON_MAX, "tokenizer file", &data, &n));
    const void *chunk = data;
    zt_status s = zt__path_join(path, CK_PATH_CAP, into, zt__snap_hf_tokenizer_files[i]);
    if (!s) s = zt_write_file_atomic(path, &chunk, &n, 1);
    free(data);
    if (s) return zt__error_prefix(s, "copying the tokenizer file '%s' into the checkpoint", from);
  }
  return ZT_OK;
}

/* Writes the four files (and the tokenizer's) into `into`; state.json last (the commit record). */
static zt_status write_files(const char *into, const zt_model *m, int n_opt, const char *const *opt_names,
                             zt_tensor *const *opt_tensors, int64_t opt_step, const ck_state *k) {
  char path[CK_PATH_CAP];
  ZT_TRY(zt__lm_save_weights(m, into, "model", k->save_id, k->st.shard_bytes));
  ZT_TRY(zt__path_join(path, CK_PATH_CAP, into, CK_CONFIG));
  ZT_TRY(zt__lm_write_hf_config(m, path));
  if (k->has_optim) {
    char step[32];
    snprintf(step, sizeof step, "%lld", (long long)opt_step);
    const char *keys[] = {"zt_save_id", "step"}, *vals[] = {k->save_id, step};
    ZT_TRY(zt__path_join(path, CK_PATH_CAP, into, CK_OPTIM));
    ZT_TRY(zt_safetensors_save(path, n_opt, opt_names, opt_tensors, 2, keys, vals));
  }
  ZT_TRY(zt__snap_copy_tokenizer(into, &k->st));
  zt__buf b = {0};
  state_json(&b, k, NULL);
  zt_status s = zt__path_join(path, CK_PATH_CAP, into, CK_STATE);
  if (!s) s = zt__buf_write_atomic(&b, path);
  zt__buf_free(&b);
  return s;
}

zt_status zt__snapshot_save_arrays(const char *dir, const zt_model *m, bool has_optim, int n_opt,
                                     const char *const *opt_names, zt_tensor *const *opt_tensors, int64_t opt_step,
                                     const zt_train_state *st) {
  if (!dir || !*dir || !m || !st)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_snapshot_save: empty folder name, or NULL model or state");
  ck_state k;
  memset(&k, 0, sizeof k);
  k.st = *st;
  const zt_lm_config *own = zt_model_config(m);
  if (!own) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_snapshot_save: the model is not a language model of a family (zt/lm.h)");
  k.st.model = *own; /* the model's own shape, whatever st says */
  k.has_optim = has_optim;
  zt__snap_new_save_id(k.save_id, st->step);
  zt__snap_staging stage;
  ZT_TRY(zt__snap_staging_begin(dir, st->step, &stage));
  zt_status s = write_files(stage.stage, m, n_opt, opt_names, opt_tensors, opt_step, &k);
  if (s) {
    zt__snap_staging_abort(&stage);
    return s;
  }
  return zt__snap_staging_commit(&stage);
}

zt_status zt_snapshot_save(const char *dir, const zt_model *m, zt_optim *o, const zt_train_state *st) {
  if (!dir || !*dir || !m || !st)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_snapshot_save: empty folder name, or NULL model or state");
  int n_opt = 0;
  const char *const *opt_names = NULL;
  zt_tensor *const *opt_tensors = NULL;
  int64_t opt_step = 0;
  if (o) {
    ZT_TRY(zt_optim_state(o, &n_opt, &opt_names, &opt_tensors));
    opt_step = zt_optim_step_count(o);
  }
  return zt__snapshot_save_arrays(dir, m, o != NULL, n_opt, opt_names, opt_tensors, opt_step, st);
}

/* ------------------------------------------------------------------ load */

static zt_status check_save_id(const char *dir, const char *file, const char *want) {
  char path[CK_PATH_CAP], *id = NULL;
  ZT_TRY(zt__path_join(path, CK_PATH_CAP, dir, file));
  ZT_TRY(zt_safetensors_metadata(path, "zt_save_id", &id));
  zt_status s = ZT_OK;
  if (!id || strcmp(id, want))
    s = ZT_ERR(ZT_STATUS_IO,
               "checkpoint '%s': %s is not from the same save as %s (save id %s, expected %s): a save into this "
               "folder was interrupted or the files were mixed; use another checkpoint",
               dir, file, CK_STATE, id ? id : "(none)", want);
  free(id);
  return s;
}

/* The optimizer's step count from optim.safetensors' metadata. */
static zt_status read_optim_step(const char *dir, int64_t *out) {
  char path[CK_PATH_CAP], *step = NULL;
  ZT_TRY(zt__path_join(path, CK_PATH_CAP, dir, CK_OPTIM));
  ZT_TRY(zt_safetensors_metadata(path, "step", &step));
  char *end = NULL;
  errno = 0;
  long long v = step ? strtoll(step, &end, 10) : -1;
  /* AdamW's bias correction reads the step as a double: beyond 2^53 it is not exact */
  bool ok = step && *step && !*end && !errno && v >= 0 && v <= (1ll << 53);
  free(step);
  if (!ok)
    return ZT_ERR(ZT_STATUS_IO, "'%s': metadata 'step' is missing or not an integer in [0, 2^53]: the file is damaged",
                  path);
  *out = v;
  return ZT_OK;
}

zt_status zt__snap_check_shape(const char *dir, const zt_lm_config *have, const zt_lm_config *want) {
  if (!want) return ZT_ERR(ZT_STATUS_INVALID_ARG, "loading '%s': the model is not a language model of a family (zt/lm.h)", dir);
  char what[CK_PATH_CAP + 16];
  snprintf(what, sizeof what, "checkpoint '%s'", dir);
  return zt_lm_config_check_same(what, have, want);
}

zt_status zt__snap_no_optim(const char *dir) {
  return ZT_ERR(ZT_STATUS_STATE,
                "checkpoint '%s' holds no optimizer state (it was saved without one), so training cannot resume "
                "from it; load the weights only (zt_train_config.model.init_from %s)",
                dir, dir);
}

static bool first_of(char *const *file, int i) {
  for (int j = 0; j < i; j++)
    if (!strcmp(file[j], file[i])) return false;
  return true;
}

/* The model's weights from dir: model.safetensors or its shards (model.safetensors.index.json),
 * every file of this save (checked before any is read), each holding exactly its tensors. */
static zt_status load_weights(const char *dir, const zt_model *m, const char *save_id) {
  zt_param *params;
  int np = zt_model_params(m, &params);
  const char **names = malloc(sizeof *names * (size_t)(np > 0 ? np : 1));
  zt_tensor **ts = malloc(sizeof *ts * (size_t)(np > 0 ? np : 1));
  char **file = calloc((size_t)(np > 0 ? np : 1), sizeof *file);
  zt_status s = names && ts && file ? ZT_OK : ZT_ERR(ZT_STATUS_OOM, "loading checkpoint '%s': out of memory", dir);
  for (int i = 0; i < np && !s; i++) names[i] = params[i].name;
  if (!s) s = zt__st_split_files(dir, "model", np, names, file);
  for (int i = 0; i < np && !s; i++) /* each file once, where it first appears */
    if (first_of(file, i)) s = check_save_id(dir, file[i], save_id);
  for (int i = 0; i < np && !s; i++) {
    if (!first_of(file, i)) continue;
    int n = 0;
    for (int j = i; j < np; j++)
      if (!strcmp(file[j], file[i])) names[n] = params[j].name, ts[n++] = params[j].tensor;
    char path[CK_PATH_CAP];
    s = zt__path_join(path, CK_PATH_CAP, dir, file[i]);
    if (!s) s = zt_safetensors_load_into(path, n, names, ts, true);
  }
  for (int i = 0; file && i < np; i++) free(file[i]);
  free(file), free(names), free(ts);
  return s;
}

zt_status zt_snapshot_load(const char *dir_in, const zt_model *m, zt_optim *o, zt_train_state *st) {
  if (!m) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_snapshot_load: model is NULL");
  char dir[CK_PATH_CAP];
  ZT_TRY(zt_snapshot_resolve(dir_in, dir, sizeof dir));
  /* a sharded (FSDP) checkpoint is consolidated on load, into this whole model */
  if (zt_snapshot_is_sharded(dir)) return zt__snapshot_load_consolidated(dir, m, o, st);
  ck_state k;
  ZT_TRY(read_state(dir, &k));
  ZT_TRY(zt__snap_check_shape(dir, &k.st.model, zt_model_config(m)));
  if (o && !k.has_optim) return zt__snap_no_optim(dir);
  /* Everything checkable is checked before the first tensor is overwritten. */
  int64_t opt_step = 0;
  if (o) ZT_TRY(check_save_id(dir, CK_OPTIM, k.save_id));
  if (o) ZT_TRY(read_optim_step(dir, &opt_step));
  ZT_TRY(load_weights(dir, m, k.save_id));
  char path[CK_PATH_CAP];
  if (o) {
    int n_opt;
    const char *const *opt_names;
    zt_tensor *const *opt_tensors;
    ZT_TRY(zt_optim_state(o, &n_opt, &opt_names, &opt_tensors));
    ZT_TRY(zt__path_join(path, CK_PATH_CAP, dir, CK_OPTIM));
    ZT_TRY(zt_safetensors_load_into(path, n_opt, opt_names, opt_tensors, true));
    zt_optim_set_step_count(o, opt_step);
  }
  if (st) *st = k.st;
  return ZT_OK;
}
