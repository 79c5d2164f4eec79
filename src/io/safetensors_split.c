/* Weights as Hugging Face folders hold them (safetensors.h): one <base>.safetensors, or, past a
 * size, <base>-0000k-of-0000N.safetensors shards and <base>.safetensors.index.json naming each
 * tensor's shard (transformers' layout; it loads either). Tensors go into shards in order, a
 * shard closed before it would pass the size (a tensor larger than the size goes alone). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/status_internal.h"
#include "io/atomic_file.h"
#include "io/buf.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "zt/io.h"

#define SPLIT_PATH_CAP 4096

static bool exists(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0;
}

/* The shard of each tensor (0-based) for shards of at most max_bytes; returns the count. */
static int cut(int n, zt_tensor *const *ts, int64_t max_bytes, int *shard) {
  int k = 0;
  int64_t held = 0;
  for (int i = 0; i < n; i++) {
    int64_t b = zt_tensor_nbytes(ts[i]);
    if (held > 0 && held + b > max_bytes) k++, held = 0;
    shard[i] = k;
    held += b;
  }
  return n > 0 ? k + 1 : 0;
}

static void shard_name(char *buf, size_t cap, const char *base, int k, int N) {
  snprintf(buf, cap, "%s-%05d-of-%05d.safetensors", base, k + 1, N);
}

static zt_status write_index(const char *dir, const char *base, int n, const char *const *names,
                             zt_tensor *const *ts, const int *shard, int N) {
  zt__buf b = {0};
  int64_t total = 0;
  for (int i = 0; i < n; i++) total += zt_tensor_nbytes(ts[i]);
  zt__buf_printf(&b, "{\n  \"metadata\": {\"total_size\": %lld},\n  \"weight_map\": {\n", (long long)total);
  char file[256];
  for (int i = 0; i < n; i++) {
    shard_name(file, sizeof file, base, shard[i], N);
    zt__buf_printf(&b, "    ");
    zt__buf_json_string(&b, names[i]);
    zt__buf_printf(&b, ": \"%s\"%s\n", file, i + 1 < n ? "," : "");
  }
  zt__buf_printf(&b, "  }\n}\n");
  char path[SPLIT_PATH_CAP];
  snprintf(file, sizeof file, "%s.safetensors.index.json", base);
  zt_status s = zt__path_join(path, sizeof path, dir, file);
  if (!s) s = zt__buf_write_atomic(&b, path);
  zt__buf_free(&b);
  return s;
}

zt_status zt__st_save_split(const char *dir, const char *base, int n, const char *const *names, zt_tensor *const *ts,
                            int n_meta, const char *const *keys, const char *const *vals, int64_t max_bytes) {
  if (n < 1 || max_bytes < 1) return ZT_ERR(ZT_STATUS_INVALID_ARG, "saving weights into '%s': nothing to save", dir);
  int *shard = malloc(sizeof *shard * (size_t)n);
  const char **sn = malloc(sizeof *sn * (size_t)n);
  zt_tensor **st = malloc(sizeof *st * (size_t)n);
  zt_status s = shard && sn && st ? ZT_OK : ZT_ERR(ZT_STATUS_OOM, "saving weights into '%s': out of memory", dir);
  int N = s ? 0 : cut(n, ts, max_bytes, shard);
  char file[256], path[SPLIT_PATH_CAP];
  for (int k = 0; k < N && !s; k++) {
    int m = 0;
    for (int i = 0; i < n; i++)
      if (shard[i] == k) sn[m] = names[i], st[m++] = ts[i];
    if (N == 1) snprintf(file, sizeof file, "%s.safetensors", base);
    else shard_name(file, sizeof file, base, k, N);
    s = zt__path_join(path, sizeof path, dir, file);
    if (!s) s = zt_safetensors_save(path, m, sn, st, n_meta, keys, vals);
  }
  if (!s && N > 1) s = write_index(dir, base, n, names, ts, shard, N);
  free(shard), free(sn), free(st);
  return s;
}

/* The weight_map of an index file: file[i] (malloc'd, caller frees each) for each name. */
static zt_status read_index(const char *path, int n, const char *const *names, char **file) {
  void *text = NULL;
  size_t len = 0;
  ZT_TRY(zt_read_file(path, &text, &len));
  char what[SPLIT_PATH_CAP + 4];
  snprintf(what, sizeof what, "'%s'", path);
  zt__json *j = NULL;
  zt_status s = zt__json_parse(text, len, what, &j);
  free(text);
  const zt__json *map = s ? NULL : zt__json_get(j, "weight_map");
  if (!s && (!map || map->kind != ZT__JSON_OBJECT))
    s = ZT_ERR(ZT_STATUS_IO, "'%s' has no \"weight_map\" object: it is not a safetensors index (or is damaged)", path);
  for (int i = 0; i < n && !s; i++) {
    const zt__json *f = zt__json_get(map, names[i]);
    if (!f || f->kind != ZT__JSON_STRING || strchr(f->str, '/'))
      s = ZT_ERR(ZT_STATUS_IO, "'%s' names no shard file for tensor '%s'", path, names[i]);
    else if (!(file[i] = strdup(f->str)))
      s = ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  }
  zt__json_free(j);
  return s;
}

zt_status zt__st_split_files(const char *dir, const char *base, int n, const char *const *names, char **file) {
  char single[256], index[256], path[SPLIT_PATH_CAP];
  snprintf(single, sizeof single, "%s.safetensors", base);
  snprintf(index, sizeof index, "%s.safetensors.index.json", base);
  ZT_TRY(zt__path_join(path, sizeof path, dir, single));
  if (exists(path) || !(zt__path_join(path, sizeof path, dir, index) == ZT_OK && exists(path))) {
    for (int i = 0; i < n; i++)
      if (!(file[i] = strdup(single))) return ZT_ERR(ZT_STATUS_OOM, "out of host memory");
    return ZT_OK;
  }
  return read_index(path, n, names, file);
}
