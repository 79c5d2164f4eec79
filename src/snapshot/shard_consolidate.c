/* Sharded checkpoints, consolidation: a sharded checkpoint read whole into one process, either
 * on load (zt_snapshot_load of a sharded folder: into the model and optimizer at hand, evicted
 * ones included) or offline into a single-process checkpoint (model.safetensors, config.json,
 * optim.safetensors, state.json). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/status_internal.h"
#include "core/tensor_internal.h"
#include "io/atomic_file.h"
#include "io/bounce.h"
#include "snapshot/sharded.h"
#include "snapshot/snapshot_internal.h"

bool zt_snapshot_is_sharded(const char *dir_in) {
  char dir[ZT__SH_PATH_CAP], path[ZT__SH_PATH_CAP];
  if (!dir_in || zt_snapshot_resolve(dir_in, dir, sizeof dir) || zt__path_join(path, ZT__SH_PATH_CAP, dir, ZT__SH_INDEX))
    return false;
  return access(path, F_OK) == 0;
}

/* ------------------------------------------------------------------ whole tensors from the shards */

static int param_index(const zt_param *p, int np, const char *name) {
  for (int i = 0; i < np; i++)
    if (!strcmp(p[i].name, name)) return i;
  return -1;
}

/* Everything a load can know before its first write: every parameter of the index is one of the
 * model's, of its shape, and every one of the model's is in the index; each state tensor is of a
 * kind the index holds for its parameter; every shard file is there, of this save and agrees with
 * the index; no destination is being restored into RAM. */
static zt_status check_whole(zt__shard_index *ix, const zt_param *p, int np, int n_opt, const char *const *onames) {
  char a[128], b[128], what[256];
  zt_lm_config_describe(&ix->st.model, what, sizeof what);
  for (int i = 0; i < ix->n; i++) {
    const zt__shard_entry *e = &ix->e[i];
    int k = param_index(p, np, e->param);
    if (k < 0)
      return ZT_ERR(ZT_STATUS_SHAPE,
                    "checkpoint '%s' holds parameter '%s', which the model does not have: it was saved from another "
                    "model shape than its state.json's (%s), or its files were mixed",
                    ix->dir, e->param, what);
    const zt_tensor *t = p[k].tensor;
    if (!zt_shape_equal(e->ndim, e->shape, t->ndim, t->shape))
      return ZT_ERR(ZT_STATUS_SHAPE,
                    "checkpoint '%s': parameter '%s' has shape %s in the checkpoint but %s in the model: it was saved "
                    "from another model shape",
                    ix->dir, e->param, zt_shape_str(e->ndim, e->shape, a), zt_shape_str(t->ndim, t->shape, b));
  }
  for (int k = 0; k < np; k++)
    if (!zt__shard_index_has(ix, p[k].name, ZT__SHARD_PARAM))
      return ZT_ERR(ZT_STATUS_SHAPE,
                    "checkpoint '%s' has no parameter '%s': it was saved from another model (or this parameter was "
                    "frozen there)",
                    ix->dir, p[k].name);
  for (int i = 0; i < n_opt; i++) {
    zt__shard_kind kind;
    const char *param;
    if (!zt__shard_split_state_name(onames[i], &kind, &param) || !zt__shard_index_has(ix, param, kind))
      return ZT_ERR(ZT_STATUS_STATE,
                    "checkpoint '%s' has no optimizer state '%s' (saved without an optimizer, or with another kind of "
                    "optimizer)",
                    ix->dir, onames[i]);
  }
  return zt__shard_index_verify(ix);
}

/* All of t (full-shaped, f32) from the pieces of (param, kind); an evicted t is filled in a view
 * of the stage (over its storage's other contents when it is only part of it), which then
 * replaces the store's copy: t stays evicted, and keeps its old contents on failure. */
static zt_status read_whole(zt__shard_index *ix, zt__bounce *stage, const char *param, zt__shard_kind kind,
                            zt_tensor *t) {
  int64_t n = zt_tensor_numel(t);
  if (n == 0 || !zt_storage_is_evicted(t->storage))
    return zt__shard_read(ix, param, kind, t->ndim, t->shape, 0, n, t);
  zt_tensor *view = NULL;
  zt_status s = zt__bounce_view(stage, t, !zt__bounce_covers(t), &view);
  if (!s) s = zt__shard_read(ix, param, kind, t->ndim, t->shape, 0, n, view);
  if (s) stage->held_id = 0; /* the buffer may be partly written: not the storage's contents */
  if (!s) s = zt__bounce_store(stage, t);
  zt_tensor_free(view);
  return s;
}

/* The model's parameters and n_opt state tensors ("<kind>.<param>", full-shaped) from the
 * index, checked first (check_whole), each tensor read whole from whichever shard files hold it. */
static zt_status load_whole(zt__shard_index *ix, const zt_model *m, int n_opt, const char *const *onames,
                            zt_tensor *const *ots) {
  zt_param *p;
  int np = zt_model_params(m, &p);
  ZT_TRY(check_whole(ix, p, np, n_opt, onames));
  zt_tensor **all = malloc(sizeof *all * (size_t)(np + n_opt + 1));
  if (!all) return ZT_ERR(ZT_STATUS_OOM, "loading checkpoint '%s': out of memory", ix->dir);
  zt_status s = ZT_OK;
  for (int i = 0; i < np + n_opt && !s; i++) {
    all[i] = i < np ? p[i].tensor : ots[i - np];
    /* an evicted destination must be writable in its store now (no restore in flight) */
    if (zt_tensor_numel(all[i]) > 0 && zt_storage_is_evicted(all[i]->storage))
      s = zt_storage_read_evicted(all[i]->storage, 0, 0, NULL);
  }
  zt__bounce stage = {0};
  if (!s) s = zt__bounce_init(&stage, np + n_opt, all);
  for (int i = 0; i < np && !s; i++) s = read_whole(ix, &stage, p[i].name, ZT__SHARD_PARAM, p[i].tensor);
  for (int i = 0; i < n_opt && !s; i++) {
    zt__shard_kind kind;
    const char *param;
    bool known = zt__shard_split_state_name(onames[i], &kind, &param);
    ZT_ASSERT(known); /* check_whole */
    s = read_whole(ix, &stage, param, kind, ots[i]);
  }
  zt__bounce_free(&stage);
  free(all);
  return s;
}

zt_status zt__snapshot_load_consolidated(const char *dir, const zt_model *m, zt_optim *o, zt_train_state *st) {
  zt__shard_index *ix = NULL;
  ZT_TRY(zt__shard_index_read(dir, &ix));
  int n_opt = 0;
  const char *const *onames = NULL;
  zt_tensor *const *ots = NULL;
  zt_status s = zt__snap_check_shape(dir, &ix->st.model, zt_model_config(m));
  if (!s && o && !ix->has_optim) s = zt__snap_no_optim(dir);
  if (!s && o) s = zt_optim_state(o, &n_opt, &onames, &ots);
  if (!s) s = load_whole(ix, m, n_opt, onames, ots);
  if (!s && o) zt_optim_set_step_count(o, ix->optim_step);
  if (!s && st) *st = ix->st;
  zt__shard_index_free(ix);
  return s;
}

/* ------------------------------------------------------------------ consolidation */

/* The tokenizer files checkpoint folder dir holds (vocab.json, merges.txt; a Hugging Face
 * tokenizer.json and its companions) into st's, for a save. */
static zt_status tokenizer_of(const char *dir, zt_train_state *st) {
  char hf[ZT__SH_PATH_CAP];
  ZT_TRY(zt__path_join(hf, ZT__SH_PATH_CAP, dir, zt__snap_hf_tokenizer_files[0]));
  if (access(hf, F_OK) == 0) {
    if (strlen(dir) >= sizeof st->tokenizer) return ZT_ERR(ZT_STATUS_INVALID_ARG, "path '%s' is too long", dir);
    memcpy(st->tokenizer, dir, strlen(dir) + 1);
  }
  const char *names[2] = {"vocab.json", "merges.txt"};
  char *dst[2] = {st->encoder, st->merges};
  for (int i = 0; i < 2; i++) {
    char p[ZT__SH_PATH_CAP];
    ZT_TRY(zt__path_join(p, ZT__SH_PATH_CAP, dir, names[i]));
    if (access(p, F_OK) != 0) continue;
    if (strlen(p) >= sizeof st->encoder) return ZT_ERR(ZT_STATUS_INVALID_ARG, "path '%s' is too long", p);
    memcpy(dst[i], p, strlen(p) + 1);
  }
  return ZT_OK;
}

zt_status zt_snapshot_consolidate(const char *sharded_in, const char *out_dir, bool force) {
  if (!sharded_in || !out_dir || !*out_dir)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_snapshot_consolidate: NULL folder or empty output folder name");
  char sharded_dir[ZT__SH_PATH_CAP];
  ZT_TRY(zt_snapshot_resolve(sharded_in, sharded_dir, sizeof sharded_dir));
  zt__shard_index *ix = NULL;
  ZT_TRY(zt__shard_index_read(sharded_dir, &ix));
  if (!force && zt__snap_holds_checkpoint(out_dir)) {
    zt__shard_index_free(ix);
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "'%s' holds a checkpoint already: consolidating into it would add a version and move its 'latest' "
                  "link; name a new folder, or force it (zt consolidate --force) to add the consolidated checkpoint "
                  "as its newest version",
                  out_dir);
  }
  bool made = access(out_dir, F_OK) != 0; /* removed again on failure */
  /* Building the model draws its (overwritten) initial values from the default generator:
   * keep the caller's stream where it was. */
  zt_rng_state rng = zt_rng_get_state();
  zt_model model = {0}, *m = &model;
  zt_status s = zt_lm_new(&ix->st.model, ZT_DTYPE_F32, NULL, &model);
  zt_rng_set_state(rng);
  if (s) {
    zt__error_prefix(s, "consolidating '%s' (model config from its state.json)", sharded_dir);
    zt__shard_index_free(ix);
    return s;
  }
  zt_param *params;
  int np = zt_model_params(m, &params);
  int cap = np * (ZT__SHARD_KIND_COUNT - 1) + 1, n_opt = 0;
  char **names = calloc((size_t)cap, sizeof *names);
  zt_tensor **ts = calloc((size_t)cap, sizeof *ts);
  if (!names || !ts) s = ZT_ERR(ZT_STATUS_OOM, "consolidating '%s': out of memory", sharded_dir);
  /* a full-shaped tensor for each kind of state the index holds of a parameter */
  for (int k = 0; k < np && !s && ix->has_optim; k++) {
    zt_tensor *t = params[k].tensor;
    for (int kind = 1; kind < ZT__SHARD_KIND_COUNT && !s; kind++) {
      if (!zt__shard_index_has(ix, params[k].name, (zt__shard_kind)kind)) continue;
      size_t l = strlen(zt__shard_kind_name(kind)) + strlen(params[k].name) + 2;
      if (!(names[n_opt] = malloc(l))) {
        s = ZT_ERR(ZT_STATUS_OOM, "consolidating '%s': out of memory", sharded_dir);
        break;
      }
      snprintf(names[n_opt], l, "%s.%s", zt__shard_kind_name(kind), params[k].name);
      s = zt_tensor_empty_tagged(t->ndim, t->shape, ZT_DTYPE_F32, ZT_CPU, ZT_MEM_TAG_TEMP, &ts[n_opt++]);
    }
  }
  if (!s) s = load_whole(ix, m, n_opt, (const char *const *)names, ts);
  if (!s) s = tokenizer_of(sharded_dir, &ix->st); /* the tokenizer files it carries go along */
  if (!s)
    s = zt__snapshot_save_arrays(out_dir, m, ix->has_optim, n_opt, (const char *const *)names, ts, ix->optim_step,
                                 &ix->st);
  for (int i = 0; i < cap && names && ts; i++) {
    free(names[i]);
    zt_tensor_free(ts[i]);
  }
  free(names);
  free(ts);
  zt_model_free(&model);
  zt__shard_index_free(ix);
  if (s && made) rmdir(out_dir); /* only when it is empty: a failed save left nothing in it */
  return s;
}
