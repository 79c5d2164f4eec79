/* Sharded checkpoints, consolidation: a sharded checkpoint turned into a single-process one
 * (model.safetensors, config.json, optim.safetensors, state.json), offline in one process. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/status_internal.h"
#include "train/checkpoint_sharded.h"
#include "train/fileio.h"

bool zt_snapshot_is_sharded(const char *dir_in) {
  char dir[ZT__SH_PATH_CAP], path[ZT__SH_PATH_CAP];
  if (!dir_in || zt_snapshot_resolve(dir_in, dir, sizeof dir) || zt__path_join(path, ZT__SH_PATH_CAP, dir, ZT__SH_INDEX))
    return false;
  return access(path, F_OK) == 0;
}

/* ------------------------------------------------------------------ consolidation */

zt_status zt_snapshot_consolidate(const char *sharded_in, const char *out_dir) {
  if (!sharded_in || !out_dir || !*out_dir)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_snapshot_consolidate: NULL folder or empty output folder name");
  char sharded_dir[ZT__SH_PATH_CAP];
  ZT_TRY(zt_snapshot_resolve(sharded_in, sharded_dir, sizeof sharded_dir));
  zt__shard_index *ix = NULL;
  ZT_TRY(zt__shard_index_read(sharded_dir, &ix));
  /* Building the model draws its (overwritten) initial values from the default generator:
   * keep the caller's stream where it was. */
  zt_rng_state rng = zt_rng_get_state();
  zt_gpt2 *m = NULL;
  zt_status s = zt_gpt2_new(&ix->st.model, &m);
  zt_rng_set_state(rng);
  if (s) {
    zt__error_prefix(s, "consolidating '%s' (model config from its state.json)", sharded_dir);
    zt__shard_index_free(ix);
    return s;
  }
  zt_param *params;
  int np = zt_gpt2_params(m, &params);
  int cap = np * (ZT__SHARD_KIND_COUNT - 1) + 1, n_opt = 0;
  char **names = calloc((size_t)cap, sizeof *names);
  zt_tensor **ts = calloc((size_t)cap, sizeof *ts);
  if (!names || !ts) s = ZT_ERR(ZT_STATUS_OOM, "consolidating '%s': out of memory", sharded_dir);
  /* every parameter of the index must be one of the model's */
  for (int i = 0; i < ix->n && !s; i++) {
    bool found = false;
    for (int k = 0; k < np && !found; k++) found = !strcmp(params[k].name, ix->e[i].param);
    if (!found)
      s = ZT_ERR(ZT_STATUS_SHAPE,
                 "checkpoint '%s' holds parameter '%s', which a GPT-2 model of its state.json config (n_layer %d) "
                 "does not have: the files are damaged or mixed",
                 sharded_dir, ix->e[i].param, ix->st.model.n_layer);
  }
  for (int k = 0; k < np && !s; k++) {
    zt_tensor *t = params[k].tensor;
    s = zt__shard_read(ix, params[k].name, ZT__SHARD_PARAM, t->ndim, t->shape, 0, zt_tensor_numel(t), t);
    for (int kind = 1; kind < ZT__SHARD_KIND_COUNT && !s && ix->has_optim; kind++) {
      if (!zt__shard_index_has(ix, params[k].name, (zt__shard_kind)kind)) continue;
      size_t l = strlen(zt__shard_kind_name(kind)) + strlen(params[k].name) + 2;
      if (!(names[n_opt] = malloc(l))) {
        s = ZT_ERR(ZT_STATUS_OOM, "consolidating '%s': out of memory", sharded_dir);
        break;
      }
      snprintf(names[n_opt], l, "%s.%s", zt__shard_kind_name(kind), params[k].name);
      if ((s = zt_tensor_empty_tagged(t->ndim, t->shape, ZT_DTYPE_F32, ZT_CPU, ZT_MEM_TAG_TEMP, &ts[n_opt]))) break;
      n_opt++;
      s = zt__shard_read(ix, params[k].name, (zt__shard_kind)kind, t->ndim, t->shape, 0, zt_tensor_numel(t),
                         ts[n_opt - 1]);
    }
  }
  if (!s)
    s = zt__snapshot_save_arrays(out_dir, m, ix->has_optim, n_opt, (const char *const *)names, ts, ix->optim_step,
                                   &ix->st);
  for (int i = 0; i < cap && names && ts; i++) {
    free(names[i]);
    zt_tensor_free(ts[i]);
  }
  free(names);
  free(ts);
  zt_gpt2_free(m);
  zt__shard_index_free(ix);
  return s;
}
