/* Sharded checkpoints, the N -> M reader: any element range of a parameter read from
 * whichever shard files hold it, so a checkpoint saved at N ranks loads at M. Each shard file
 * is verified against its own record and the index at its first use. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/backend.h"
#include "core/tensor_internal.h"
#include "io/atomic_file.h"
#include "io/bounce.h"
#include "io/safetensors.h"
#include "snapshot/sharded.h"

static int cmp_tensor(const void *a, const void *b) {
  return strcmp(((const zt__shard_entry *)a)->tensor, ((const zt__shard_entry *)b)->tensor);
}

/* First use of a shard file: it exists, is of this save, its own record of its pieces matches
 * its tensors (f32, count elements each), and every index entry that names it agrees with that
 * record (same tensor, parameter, kind, shape and range): an index edited or mixed with another
 * save cannot put a tensor's bytes into another parameter or range. */
static zt_status check_file(zt__shard_index *ix, int f) {
  if (ix->checked[f]) return ZT_OK;
  char path[ZT__SH_PATH_CAP];
  ZT_TRY(zt__path_join(path, ZT__SH_PATH_CAP, ix->dir, ix->files[f]));
  if (access(path, F_OK) != 0)
    return ZT_ERR(ZT_STATUS_IO, "checkpoint '%s': shard file '%s' is missing (%s lists it; the checkpoint is "
                  "incomplete: copy every shard-*-of-%d file)", ix->dir, path, ZT__SH_INDEX, ix->n_files);
  char *id = NULL;
  zt__shard_entry *own = NULL;
  zt__st_info *info = NULL;
  int n_own = 0, n_info = 0;
  zt_status s = zt__shard_pieces_read(path, &id, &own, &n_own);
  if (!s && (!id || strcmp(id, ix->save_id)))
    s = ZT_ERR(ZT_STATUS_IO, "checkpoint '%s': '%s' is not from the same save as state.json (save id %s, expected "
               "%s): a save was interrupted or files were mixed; use another checkpoint",
               ix->dir, path, id ? id : "(none)", ix->save_id);
  if (!s) s = zt__safetensors_list(path, &n_info, &info);
  if (!s) qsort(own, (size_t)n_own, sizeof *own, cmp_tensor);
  for (int k = 0; !s && k < n_own; k++) {
    const zt__shard_entry *p = &own[k];
    const zt__st_info *t = zt__st_find(info, n_info, p->tensor);
    if (k && !strcmp(own[k - 1].tensor, p->tensor))
      s = ZT_ERR(ZT_STATUS_IO, "checkpoint '%s': the metadata of '%s' lists tensor '%s' twice (the file is damaged)",
                 ix->dir, path, p->tensor);
    else if (!t)
      s = ZT_ERR(ZT_STATUS_IO, "checkpoint '%s': '%s' has no tensor '%s' (its own metadata lists it: the file is "
                 "damaged)", ix->dir, path, p->tensor);
    else if (strcmp(t->dtype, "F32") || t->numel != p->count)
      s = ZT_ERR(ZT_STATUS_IO, "checkpoint '%s': tensor '%s' of '%s' is %s with %lld elements, but its metadata says "
                 "F32 with %lld (the file is damaged)", ix->dir, p->tensor, path, t->dtype, (long long)t->numel,
                 (long long)p->count);
  }
  for (int i = 0; !s && i < ix->n; i++) {
    const zt__shard_entry *e = &ix->e[i];
    if (e->file != f) continue;
    zt__shard_entry key = {.tensor = e->tensor};
    const zt__shard_entry *p = bsearch(&key, own, (size_t)n_own, sizeof *own, cmp_tensor);
    char a[128], b[128];
    if (!p)
      s = ZT_ERR(ZT_STATUS_IO, "checkpoint '%s': '%s' has no tensor '%s' (%s entry %d lists it there)", ix->dir, path,
                 e->tensor, ZT__SH_INDEX, i);
    else if (!zt_shape_equal(e->ndim, e->shape, p->ndim, p->shape) || e->start != p->start || e->count != p->count)
      s = ZT_ERR(ZT_STATUS_IO, "checkpoint '%s': %s entry %d says tensor '%s' in '%s' holds elements [%lld, +%lld) of "
                 "'%s' of shape %s, but the shard file says [%lld, +%lld) of shape %s: %s was edited or mixed with "
                 "another save; use another checkpoint", ix->dir, ZT__SH_INDEX, i, e->tensor, path, (long long)e->start,
                 (long long)e->count, e->param, zt_shape_str(e->ndim, e->shape, a), (long long)p->start,
                 (long long)p->count, zt_shape_str(p->ndim, p->shape, b), ZT__SH_INDEX);
  }
  free(id);
  free(info);
  zt__shard_entries_free(own, n_own);
  if (!s) ix->checked[f] = true;
  return s;
}

zt_status zt__shard_index_verify(zt__shard_index *ix) {
  for (int f = 0; f < ix->n_files; f++) ZT_TRY(check_file(ix, f));
  return ZT_OK;
}

static int cmp_start(const void *a, const void *b) {
  const zt__shard_entry *x = *(const zt__shard_entry *const *)a, *y = *(const zt__shard_entry *const *)b;
  return x->start < y->start ? -1 : x->start > y->start;
}

zt_status zt__shard_read(zt__shard_index *ix, const char *param, zt__shard_kind kind, int ndim,
                         const int64_t *shape, int64_t start, int64_t count, zt_tensor *dst) {
  char a[128], b[128];
  if (!dst || dst->dtype != ZT_DTYPE_F32 || !zt_tensor_is_contiguous(dst) || zt_tensor_numel(dst) != count)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt__shard_read('%s'): dst must be a contiguous f32 tensor of %lld elements",
                  param, (long long)count);
  if (ndim < 0 || ndim > ZT_MAX_DIMS || start < 0 || count < 0 ||
      (count > 0 && !zt__shard_range_ok(start, count, zt__shard_numel(ndim, shape))))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt__shard_read('%s'): elements [%lld, +%lld) are not within its shape",
                  param, (long long)start, (long long)count);
  const zt__shard_entry **hits = calloc((size_t)ix->n + 1, sizeof *hits);
  if (!hits) return ZT_ERR(ZT_STATUS_OOM, "reading checkpoint '%s': out of memory", ix->dir);
  int nh = 0;
  bool any = false;
  zt_status s = ZT_OK;
  for (int i = 0; i < ix->n && !s; i++) {
    const zt__shard_entry *e = &ix->e[i];
    if (strcmp(e->param, param)) continue;
    if (!zt_shape_equal(e->ndim, e->shape, ndim, shape))
      s = ZT_ERR(ZT_STATUS_SHAPE,
                 "checkpoint '%s': parameter '%s' has shape %s in the checkpoint but %s in the model: it was saved "
                 "from another model shape",
                 ix->dir, param, zt_shape_str(e->ndim, e->shape, a), zt_shape_str(ndim, shape, b));
    if (e->kind != kind) continue;
    any = true;
    if (e->start < start + count && start < e->start + e->count) hits[nh++] = e;
  }
  if (!s && !any)
    s = kind == ZT__SHARD_PARAM
            ? ZT_ERR(ZT_STATUS_SHAPE,
                     "checkpoint '%s' has no parameter '%s': it was saved from another model (or this parameter was "
                     "frozen there)", ix->dir, param)
            : ZT_ERR(ZT_STATUS_STATE, "checkpoint '%s' has no optimizer state '%s.%s' (saved without an optimizer, "
                     "or with another kind of optimizer)", ix->dir, zt__shard_kind_name(kind), param);
  if (!s && count > 0) {
    qsort(hits, (size_t)nh, sizeof *hits, cmp_start);
    int64_t at = start;
    for (int i = 0; i < nh && !s; i++) {
      if (hits[i]->start > at) break;
      at = hits[i]->start + hits[i]->count;
    }
    if (at < start + count) {
      int64_t gap_end = start + count;
      for (int i = 0; i < nh; i++)
        if (hits[i]->start > at && hits[i]->start < gap_end) gap_end = hits[i]->start;
      s = ZT_ERR(ZT_STATUS_IO, "checkpoint '%s': elements [%lld, %lld) of '%s' (%s) are in no shard file", ix->dir,
                 (long long)at, (long long)gap_end, param, zt__shard_kind_name(kind));
    }
  }
  for (int i = 0; i < nh && !s; i++) {
    const zt__shard_entry *e = hits[i];
    char path[ZT__SH_PATH_CAP];
    zt_tensor *tmp = NULL;
    if ((s = check_file(ix, e->file)) || (s = zt__path_join(path, ZT__SH_PATH_CAP, ix->dir, ix->files[e->file])))
      break;
    if ((s = zt_tensor_empty_tagged(1, &e->count, ZT_DTYPE_F32, ZT_CPU, ZT_MEM_TAG_TEMP, &tmp))) break;
    const char *name = e->tensor;
    s = zt_safetensors_load_into(path, 1, &name, &tmp, false);
    if (!s) {
      int64_t lo = e->start > start ? e->start : start;
      int64_t hi = e->start + e->count < start + count ? e->start + e->count : start + count;
      /* tmp is a cpu tensor (host bytes); dst is written by its backend, or in its store */
      s = zt__tensor_write_range(dst, lo - start, hi - lo, (const float *)zt__tensor_ptr(tmp) + (lo - e->start));
    }
    zt_tensor_free(tmp);
  }
  free(hits);
  return s;
}
