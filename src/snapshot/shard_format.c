/* Sharded checkpoints, the format: one safetensors file per rank of the shard group with that
 * rank's pieces of every parameter and optimizer state tensor ("<kind>.<param>"), whose
 * metadata records the pieces and the save id; index.json, built from those records, says
 * which file holds which element range of which parameter; state.json is written last. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/status_internal.h"
#include "io/atomic_file.h"
#include "io/buf.h"
#include "io/json.h"
#include "snapshot/sharded.h"
#include "snapshot/snapshot_internal.h"

static const char *const kind_names[ZT__SHARD_KIND_COUNT] = {"param", "exp_avg", "exp_avg_sq", "momentum_buffer"};

const char *zt__shard_kind_name(zt__shard_kind k) {
  return k >= 0 && k < ZT__SHARD_KIND_COUNT ? kind_names[k] : "invalid";
}

static bool kind_parse(const char *s, zt__shard_kind *k) {
  for (int i = 0; i < ZT__SHARD_KIND_COUNT; i++)
    if (!strcmp(s, kind_names[i])) {
      *k = (zt__shard_kind)i;
      return true;
    }
  return false;
}

bool zt__shard_split_state_name(const char *name, zt__shard_kind *kind, const char **param) {
  /* the longest prefix first: "exp_avg_sq." also starts like "exp_avg" */
  for (int i = ZT__SHARD_KIND_COUNT - 1; i >= 1; i--) {
    size_t l = strlen(kind_names[i]);
    if (!strncmp(name, kind_names[i], l) && name[l] == '.' && name[l + 1]) {
      *kind = (zt__shard_kind)i;
      *param = name + l + 1;
      return true;
    }
  }
  return false;
}

const char *zt__shard_file_name(char *buf, int rank, int n) {
  snprintf(buf, 64, "shard-%d-of-%d.safetensors", rank, n);
  return buf;
}

static void shape_json(zt__buf *b, int ndim, const int64_t *shape) {
  zt__buf_put(b, "[", 1);
  for (int d = 0; d < ndim; d++) zt__buf_printf(b, "%s%lld", d ? ", " : "", (long long)shape[d]);
  zt__buf_put(b, "]", 1);
}

/* The element count of a shape (dims >= 0), or -1 when it overflows an int64. */
int64_t zt__shard_numel(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++)
    if (shape[d] < 0 || __builtin_mul_overflow(n, shape[d], &n)) return -1;
  return n;
}

/* [start, start + count) lies within a parameter of numel elements (overflow-safe). */
bool zt__shard_range_ok(int64_t start, int64_t count, int64_t numel) {
  int64_t end;
  return numel >= 0 && start >= 0 && count >= 0 && !__builtin_add_overflow(start, count, &end) && end <= numel;
}

/* The name a piece's tensor has in a shard file: "<kind>.<param>". */
static bool tensor_name_is(const char *tensor, zt__shard_kind kind, const char *param) {
  size_t l = strlen(kind_names[kind]);
  return !strncmp(tensor, kind_names[kind], l) && tensor[l] == '.' && !strcmp(tensor + l + 1, param);
}

/* ------------------------------------------------------------------ writing */

zt_status zt__shard_write(const char *into, int rank, int n_ranks, int n, const zt__shard_piece *p,
                          const char *save_id) {
  char fname[64], path[ZT__SH_PATH_CAP];
  ZT_TRY(zt__path_join(path, ZT__SH_PATH_CAP, into, zt__shard_file_name(fname, rank, n_ranks)));
  const char **names = calloc((size_t)n + 1, sizeof *names);
  char **owned = calloc((size_t)n + 1, sizeof *owned);
  zt_tensor **ts = calloc((size_t)n + 1, sizeof *ts);
  zt__buf meta = {0};
  zt_status s = ZT_OK;
  if (!names || !owned || !ts) {
    s = ZT_ERR(ZT_STATUS_OOM, "writing '%s': out of memory", path);
    goto out;
  }
  zt__buf_put(&meta, "[", 1);
  for (int i = 0; i < n && !s; i++) {
    const zt__shard_piece *q = &p[i];
    if (!zt__shard_range_ok(q->start, q->count, zt__shard_numel(q->ndim, q->shape)) || zt_tensor_numel(q->t) != q->count ||
        q->kind < 0 || q->kind >= ZT__SHARD_KIND_COUNT) {
      s = ZT_ERR(ZT_STATUS_INVALID_ARG, "writing '%s': piece '%s' (%s) has a bad range [%lld, +%lld) or tensor", path,
                 q->param, zt__shard_kind_name(q->kind), (long long)q->start, (long long)q->count);
      break;
    }
    size_t l = strlen(kind_names[q->kind]) + strlen(q->param) + 2;
    if (!(owned[i] = malloc(l))) {
      s = ZT_ERR(ZT_STATUS_OOM, "writing '%s': out of memory", path);
      break;
    }
    snprintf(owned[i], l, "%s.%s", kind_names[q->kind], q->param);
    names[i] = owned[i];
    ts[i] = q->t;
    zt__buf_printf(&meta, "%s{\"tensor\": ", i ? ", " : "");
    zt__buf_json_string(&meta, owned[i]);
    zt__buf_printf(&meta, ", \"param\": ");
    zt__buf_json_string(&meta, q->param);
    zt__buf_printf(&meta, ", \"kind\": \"%s\", \"shape\": ", kind_names[q->kind]);
    shape_json(&meta, q->ndim, q->shape);
    zt__buf_printf(&meta, ", \"start\": %lld, \"count\": %lld}", (long long)q->start, (long long)q->count);
  }
  zt__buf_put(&meta, "]", 1);
  if (!s && meta.oom) s = ZT_ERR(ZT_STATUS_OOM, "writing '%s': out of memory", path);
  if (!s) {
    char r[16], w[16];
    snprintf(r, sizeof r, "%d", rank);
    snprintf(w, sizeof w, "%d", n_ranks);
    const char *keys[] = {"zt_save_id", "zt_rank", "zt_world", "zt_pieces"};
    const char *vals[] = {save_id, r, w, meta.data};
    s = zt_safetensors_save(path, n, names, ts, 4, keys, vals);
  }
out:
  for (int i = 0; owned && i < n; i++) free(owned[i]);
  free(owned);
  free(names);
  free(ts);
  zt__buf_free(&meta);
  return s;
}

/* One entry of a piece list (shard metadata or index; `what` names the file, i is the entry's
 * index): fields checked, strings copied. */
zt_status zt__shard_entry_parse(const char *what, int i, const zt__json *v, zt__shard_entry *e) {
  const zt__json *t = zt__json_get(v, "tensor"), *p = zt__json_get(v, "param"), *k = zt__json_get(v, "kind"),
                 *sh = zt__json_get(v, "shape");
  int64_t start, count;
  const char *bad = NULL;
  if (v->kind != ZT__JSON_OBJECT) bad = "is not an object";
  else if (!t || t->kind != ZT__JSON_STRING) bad = "has no \"tensor\" string";
  else if (!p || p->kind != ZT__JSON_STRING || !*p->str) bad = "has no \"param\" string";
  else if (!k || k->kind != ZT__JSON_STRING || !kind_parse(k->str, &e->kind)) bad = "has no known \"kind\"";
  else if (!sh || sh->kind != ZT__JSON_ARRAY || sh->n > ZT_MAX_DIMS) bad = "has no \"shape\" list (at most 8 dims)";
  else if (!zt__json_i64(zt__json_get(v, "start"), &start) || !zt__json_i64(zt__json_get(v, "count"), &count))
    bad = "has no integer \"start\" and \"count\"";
  for (int d = 0; !bad && d < sh->n; d++)
    if (!zt__json_i64(&sh->items[d], &e->shape[d]) || e->shape[d] < 0) bad = "has a shape dimension that is not >= 0";
  if (bad)
    return ZT_ERR(ZT_STATUS_IO, "%s: tensor entry %d %s (the file is damaged or not from zerotrain)", what, i, bad);
  e->ndim = sh->n;
  e->start = start;
  e->count = count;
  char sb[128];
  int64_t numel = zt__shard_numel(e->ndim, e->shape);
  if (numel < 0)
    return ZT_ERR(ZT_STATUS_IO, "%s: tensor entry %d ('%s'): the element count of shape %s overflows a 64-bit integer "
                  "(the file is damaged)", what, i, p->str, zt_shape_str(e->ndim, e->shape, sb));
  if (!zt__shard_range_ok(start, count, numel))
    return ZT_ERR(ZT_STATUS_IO, "%s: tensor entry %d ('%s'): elements [%lld, +%lld) are not within its shape %s of "
                  "%lld elements (the file is damaged)", what, i, p->str, (long long)start, (long long)count,
                  zt_shape_str(e->ndim, e->shape, sb), (long long)numel);
  if (!tensor_name_is(t->str, e->kind, p->str))
    return ZT_ERR(ZT_STATUS_IO, "%s: tensor entry %d names tensor '%s' for %s of parameter '%s', which is stored as "
                  "'%s.%s' (the file is damaged or was edited)", what, i, t->str, kind_names[e->kind], p->str,
                  kind_names[e->kind], p->str);
  e->tensor = strdup(t->str);
  e->param = strdup(p->str);
  if (!e->tensor || !e->param) return ZT_ERR(ZT_STATUS_OOM, "%s: out of memory", what);
  return ZT_OK;
}

static void entry_json(zt__buf *b, const char *file, const zt__shard_entry *e) {
  zt__buf_printf(b, "    {\"file\": ");
  zt__buf_json_string(b, file);
  zt__buf_printf(b, ", \"tensor\": ");
  zt__buf_json_string(b, e->tensor);
  zt__buf_printf(b, ", \"param\": ");
  zt__buf_json_string(b, e->param);
  zt__buf_printf(b, ", \"kind\": \"%s\", \"shape\": ", kind_names[e->kind]);
  shape_json(b, e->ndim, e->shape);
  zt__buf_printf(b, ", \"start\": %lld, \"count\": %lld}", (long long)e->start, (long long)e->count);
}

void zt__shard_entry_free(zt__shard_entry *e) {
  free(e->tensor);
  free(e->param);
  e->tensor = e->param = NULL;
}

void zt__shard_entries_free(zt__shard_entry *e, int n) {
  for (int i = 0; e && i < n; i++) zt__shard_entry_free(&e[i]);
  free(e);
}

/* A shard file's own record of its pieces (its zt_pieces metadata), each entry checked, and
 * its save id (malloc'd; NULL if it has none). */
zt_status zt__shard_pieces_read(const char *path, char **save_id, zt__shard_entry **out, int *n) {
  *save_id = NULL;
  *out = NULL;
  *n = 0;
  char *text = NULL;
  zt__json *pieces = NULL;
  zt_status s = zt_safetensors_metadata(path, "zt_save_id", save_id);
  if (!s) s = zt_safetensors_metadata(path, "zt_pieces", &text);
  if (!s && !text) s = ZT_ERR(ZT_STATUS_IO, "'%s' has no zt_pieces metadata: it is not a zerotrain shard file", path);
  char what[ZT__SH_PATH_CAP + 32];
  snprintf(what, sizeof what, "metadata of '%s'", path);
  if (!s) s = zt__json_parse(text, strlen(text), what, &pieces);
  if (!s && pieces->kind != ZT__JSON_ARRAY) s = ZT_ERR(ZT_STATUS_IO, "%s: zt_pieces is not a list", what);
  if (!s && !(*out = calloc((size_t)pieces->n + 1, sizeof **out)))
    s = ZT_ERR(ZT_STATUS_OOM, "reading '%s': out of memory", path);
  for (int i = 0; !s && i < pieces->n; i++) {
    *n = i + 1;
    s = zt__shard_entry_parse(what, i, &pieces->items[i], &(*out)[i]);
  }
  zt__json_free(pieces);
  free(text);
  if (s) {
    zt__shard_entries_free(*out, *n);
    free(*save_id);
    *save_id = NULL;
    *out = NULL;
    *n = 0;
  }
  return s;
}

/* Entries of one shard file, from its metadata (checks it belongs to this save). */
static zt_status shard_entries(const char *into, int rank, int n_ranks, const char *save_id, zt__shard_entry **e,
                               int *n, char *path) {
  char fname[64], *id = NULL;
  ZT_TRY(zt__path_join(path, ZT__SH_PATH_CAP, into, zt__shard_file_name(fname, rank, n_ranks)));
  zt_status s = zt__shard_pieces_read(path, &id, e, n);
  if (!s && (!id || strcmp(id, save_id))) {
    s = ZT_ERR(ZT_STATUS_IO, "'%s' is not from this save (save id %s, expected %s)", path, id ? id : "(none)",
               save_id);
    zt__shard_entries_free(*e, *n);
    *e = NULL;
    *n = 0;
  }
  free(id);
  return s;
}

zt_status zt__shard_write_index(const char *into, int n_ranks, const char *strategy, const zt_train_state *st,
                                bool has_optim, int64_t optim_step, const char *save_id) {
  zt__buf b = {0};
  zt__buf_printf(&b,
                 "{\n  \"format\": \"" ZT__SH_FORMAT "\",\n  \"version\": %d,\n  \"save_id\": \"%s\",\n"
                 "  \"world_size\": %d,\n  \"strategy\": ",
                 ZT__SH_VERSION, save_id, n_ranks);
  zt__buf_json_string(&b, strategy);
  zt__buf_printf(&b, ",\n  \"optimizer\": %s,\n  \"optim_step\": %lld,\n  \"files\": [", has_optim ? "true" : "false",
                 (long long)optim_step);
  char fname[64], path[ZT__SH_PATH_CAP];
  for (int r = 0; r < n_ranks; r++) {
    zt__buf_printf(&b, "%s", r ? ", " : "");
    zt__buf_json_string(&b, zt__shard_file_name(fname, r, n_ranks));
  }
  zt__buf_printf(&b, "],\n  \"tensors\": [\n");
  zt_status s = ZT_OK;
  bool first = true;
  for (int r = 0; r < n_ranks && !s; r++) {
    zt__shard_entry *e = NULL;
    int n = 0;
    s = shard_entries(into, r, n_ranks, save_id, &e, &n, path);
    for (int i = 0; !s && i < n; i++) {
      zt__buf_printf(&b, "%s", first ? "" : ",\n");
      entry_json(&b, zt__shard_file_name(fname, r, n_ranks), &e[i]);
      first = false;
    }
    zt__shard_entries_free(e, n);
  }
  zt__buf_printf(&b, "\n  ]\n}\n");
  if (!s) s = zt__path_join(path, ZT__SH_PATH_CAP, into, ZT__SH_INDEX);
  if (!s) s = zt__buf_write_atomic(&b, path);
  zt__buf_free(&b);
  if (s) return s;
  /* state.json last: the commit record */
  char extra[160];
  snprintf(extra, sizeof extra, "  \"sharded\": {\"world_size\": %d, \"strategy\": \"%s\"},\n", n_ranks, strategy);
  zt__snap_state_json(&b, st, save_id, has_optim, extra);
  s = zt__path_join(path, ZT__SH_PATH_CAP, into, "state.json");
  if (!s) s = zt__buf_write_atomic(&b, path);
  zt__buf_free(&b);
  return s;
}
