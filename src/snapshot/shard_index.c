/* Sharded checkpoints, the index: index.json and state.json read back and checked (one save,
 * entries whose ranges fit their parameter and do not overlap). */
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
#include "snapshot/sharded.h"
#include "snapshot/snapshot_internal.h"

void zt__shard_index_free(zt__shard_index *ix) {
  if (!ix) return;
  for (int i = 0; i < ix->n; i++) zt__shard_entry_free(&ix->e[i]);
  for (int i = 0; i < ix->n_files; i++) free(ix->files[i]);
  free(ix->files);
  free(ix->checked);
  free(ix->e);
  free(ix);
}

/* Entries in (param, kind, start) order. */
static int cmp_entry(const void *a, const void *b) {
  const zt__shard_entry *x = *(const zt__shard_entry *const *)a, *y = *(const zt__shard_entry *const *)b;
  int c = strcmp(x->param, y->param);
  if (c) return c;
  if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
  return x->start < y->start ? -1 : x->start > y->start;
}

/* The entries of one parameter agree on its shape, and the ranges of one (param, kind) do not
 * overlap (each element is stored at most once): sorted, O(n log n). */
static zt_status check_ranges(const zt__shard_index *ix, const char *path) {
  const zt__shard_entry **o = malloc(sizeof *o * ((size_t)ix->n + 1));
  if (!o) return ZT_ERR(ZT_STATUS_OOM, "reading '%s': out of memory", path);
  for (int i = 0; i < ix->n; i++) o[i] = &ix->e[i];
  qsort(o, (size_t)ix->n, sizeof *o, cmp_entry);
  zt_status s = ZT_OK;
  int64_t end = 0; /* the furthest end so far of the current (param, kind) */
  for (int i = 0; i < ix->n && !s; i++) {
    const zt__shard_entry *a = o[i], *b = i ? o[i - 1] : NULL;
    bool same_param = b && !strcmp(a->param, b->param), same = same_param && a->kind == b->kind;
    char sa[128], sb[128];
    if (same_param && !zt_shape_equal(a->ndim, a->shape, b->ndim, b->shape))
      s = ZT_ERR(ZT_STATUS_IO, "'%s': parameter '%s' is listed with two shapes, %s and %s (the file is damaged)", path,
                 a->param, zt_shape_str(b->ndim, b->shape, sa), zt_shape_str(a->ndim, a->shape, sb));
    else if (same && a->count > 0 && a->start < end)
      s = ZT_ERR(ZT_STATUS_IO, "'%s': two entries of '%s' (%s) overlap: elements [%lld, %lld) are listed twice (the "
                 "file is damaged)", path, a->param, zt__shard_kind_name(a->kind), (long long)a->start,
                 (long long)(end < a->start + a->count ? end : a->start + a->count));
    if (!same) end = 0;
    if (a->count > 0 && a->start + a->count > end) end = a->start + a->count;
  }
  free(o);
  return s;
}

static zt_status index_parse(zt__shard_index *ix, const zt__json *j, const char *path) {
  const zt__json *v = zt__json_get(j, "format");
  if (j->kind != ZT__JSON_OBJECT || !v || v->kind != ZT__JSON_STRING || strcmp(v->str, ZT__SH_FORMAT))
    return ZT_ERR(ZT_STATUS_IO, "'%s' is not a zerotrain sharded checkpoint index (no \"format\": \"" ZT__SH_FORMAT "\")",
                  path);
  int64_t x;
  if (!zt__json_i64(zt__json_get(j, "version"), &x) || x != ZT__SH_VERSION)
    return ZT_ERR(ZT_STATUS_UNSUPPORTED, "'%s' is not sharded checkpoint format version %d", path, ZT__SH_VERSION);
  const zt__json *id = zt__json_get(j, "save_id"), *st = zt__json_get(j, "strategy"),
                 *opt = zt__json_get(j, "optimizer"), *files = zt__json_get(j, "files"),
                 *ts = zt__json_get(j, "tensors");
  if (!id || id->kind != ZT__JSON_STRING || strlen(id->str) >= sizeof ix->save_id || !st ||
      st->kind != ZT__JSON_STRING || !opt || opt->kind != ZT__JSON_BOOL || !files || files->kind != ZT__JSON_ARRAY ||
      !ts || ts->kind != ZT__JSON_ARRAY || !zt__json_i64(zt__json_get(j, "world_size"), &x) || x < 1 ||
      x > 1 << 20)
    return ZT_ERR(ZT_STATUS_IO,
                  "'%s': a field of save_id, world_size, strategy, optimizer, files, tensors is missing or bad (the "
                  "file is damaged)",
                  path);
  /* AdamW's bias correction reads the step as a double: beyond 2^53 it is not exact (and a
   * step near 2^63 overflows when incremented) */
  if (!zt__json_i64(zt__json_get(j, "optim_step"), &ix->optim_step) || ix->optim_step < 0 ||
      ix->optim_step > ((int64_t)1 << 53))
    return ZT_ERR(ZT_STATUS_IO, "'%s': field 'optim_step' is missing or not an integer in [0, 2^53] (the file is "
                  "damaged)", path);
  ix->world = (int)x;
  snprintf(ix->save_id, sizeof ix->save_id, "%s", id->str);
  snprintf(ix->strategy, sizeof ix->strategy, "%s", st->str);
  ix->has_optim = opt->boolean;
  ix->files = calloc((size_t)files->n + 1, sizeof *ix->files);
  ix->checked = calloc((size_t)files->n + 1, sizeof *ix->checked);
  ix->e = calloc((size_t)ts->n + 1, sizeof *ix->e);
  if (!ix->files || !ix->checked || !ix->e) return ZT_ERR(ZT_STATUS_OOM, "reading '%s': out of memory", path);
  for (int i = 0; i < files->n; i++) {
    const zt__json *f = &files->items[i];
    if (f->kind != ZT__JSON_STRING || !*f->str || strchr(f->str, '/'))
      return ZT_ERR(ZT_STATUS_IO, "'%s': files[%d] is not a file name", path, i);
    if (!(ix->files[i] = strdup(f->str))) return ZT_ERR(ZT_STATUS_OOM, "reading '%s': out of memory", path);
    ix->n_files = i + 1;
  }
  for (int i = 0; i < ts->n; i++) {
    const zt__json *f = zt__json_get(&ts->items[i], "file");
    zt__shard_entry *e = &ix->e[i];
    ix->n = i + 1; /* freed with the index even when it fails half way */
    ZT_TRY(zt__shard_entry_parse(path, i, &ts->items[i], e));
    e->file = -1;
    for (int k = 0; f && f->kind == ZT__JSON_STRING && k < ix->n_files && e->file < 0; k++)
      if (!strcmp(f->str, ix->files[k])) e->file = k;
    if (e->file < 0)
      return ZT_ERR(ZT_STATUS_IO, "'%s': tensor entry %d ('%s') names no file of the files list", path, i, e->tensor);
  }
  return check_ranges(ix, path);
}

zt_status zt__shard_index_read(const char *dir, zt__shard_index **out) {
  *out = NULL;
  zt__shard_index *ix = calloc(1, sizeof *ix);
  if (!ix) return ZT_ERR(ZT_STATUS_OOM, "reading checkpoint '%s': out of memory", dir ? dir : "");
  zt_status s = ZT_OK;
  char state_id[64] = "";
  bool state_optim = false;
  if (!dir || strlen(dir) >= sizeof ix->dir - 64) s = ZT_ERR(ZT_STATUS_INVALID_ARG, "bad checkpoint folder name");
  if (!s) {
    snprintf(ix->dir, sizeof ix->dir, "%s", dir);
    s = zt__snap_read_state(dir, &ix->st, state_id, &state_optim);
  }
  char path[ZT__SH_PATH_CAP];
  if (!s) s = zt__path_join(path, ZT__SH_PATH_CAP, dir, ZT__SH_INDEX);
  if (!s && access(path, F_OK) != 0)
    s = ZT_ERR(ZT_STATUS_IO, "checkpoint '%s' has no %s: it is not a sharded checkpoint (zt_snapshot_load reads "
               "single-process ones)", dir, ZT__SH_INDEX);
  void *text = NULL;
  size_t len = 0;
  if (!s) s = zt__read_regular_file(path, ZT__READ_JSON_MAX, "checkpoint file", &text, &len);
  zt__json *j = NULL;
  char what[ZT__SH_PATH_CAP + 8];
  snprintf(what, sizeof what, "'%s'", path);
  if (!s) s = zt__json_parse(text, len, what, &j);
  free(text);
  if (!s) s = index_parse(ix, j, path);
  zt__json_free(j);
  if (!s && (strcmp(state_id, ix->save_id) || state_optim != ix->has_optim))
    s = ZT_ERR(ZT_STATUS_IO,
               "checkpoint '%s': %s is not from the same save as state.json (save id %s, expected %s): a save into "
               "this folder was interrupted or the files were mixed; use another checkpoint",
               dir, ZT__SH_INDEX, ix->save_id, state_id);
  if (s) {
    zt__shard_index_free(ix);
    return s;
  }
  *out = ix;
  return ZT_OK;
}

bool zt__shard_index_has(const zt__shard_index *ix, const char *param, zt__shard_kind kind) {
  for (int i = 0; i < ix->n; i++)
    if (ix->e[i].kind == kind && !strcmp(ix->e[i].param, param)) return true;
  return false;
}
