/* Sharded (FSDP) checkpoints: one safetensors file per rank of the shard group with that
 * rank's pieces of every parameter and optimizer state tensor, index.json saying which file
 * holds which element range of which parameter, and state.json as the commit record (written
 * last; every file carries its save id). Loading reads ranges from any set of shard files, so a
 * checkpoint saved at N ranks loads at M ranks; consolidation makes a single-process checkpoint.
 * The ranks must see one file system: rank 0 builds index.json from the shard files' metadata. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train/checkpoint_sharded.h"
#include "train/fileio.h"

#define SH_INDEX "index.json"
#define SH_FORMAT "zerotrain-sharded-checkpoint"
#define SH_VERSION 1
#define SH_PATH_CAP 4096

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
static int64_t numel_of(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++)
    if (shape[d] < 0 || __builtin_mul_overflow(n, shape[d], &n)) return -1;
  return n;
}

/* [start, start + count) lies within a parameter of numel elements (overflow-safe). */
static bool range_ok(int64_t start, int64_t count, int64_t numel) {
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
  char fname[64], path[SH_PATH_CAP];
  ZT_TRY(zt__path_join(path, SH_PATH_CAP, into, zt__shard_file_name(fname, rank, n_ranks)));
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
    if (!range_ok(q->start, q->count, numel_of(q->ndim, q->shape)) || zt_tensor_numel(q->t) != q->count ||
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
static zt_status parse_entry(const char *what, int i, const zt__json *v, zt__shard_entry *e) {
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
  int64_t numel = numel_of(e->ndim, e->shape);
  if (numel < 0)
    return ZT_ERR(ZT_STATUS_IO, "%s: tensor entry %d ('%s'): the element count of shape %s overflows a 64-bit integer "
                  "(the file is damaged)", what, i, p->str, zt_shape_str(e->ndim, e->shape, sb));
  if (!range_ok(start, count, numel))
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

static void entry_free(zt__shard_entry *e) {
  free(e->tensor);
  free(e->param);
  e->tensor = e->param = NULL;
}

static void entries_free(zt__shard_entry *e, int n) {
  for (int i = 0; e && i < n; i++) entry_free(&e[i]);
  free(e);
}

/* A shard file's own record of its pieces (its zt_pieces metadata), each entry checked, and
 * its save id (malloc'd; NULL if it has none). */
static zt_status load_pieces(const char *path, char **save_id, zt__shard_entry **out, int *n) {
  *save_id = NULL;
  *out = NULL;
  *n = 0;
  char *text = NULL;
  zt__json *pieces = NULL;
  zt_status s = zt_safetensors_metadata(path, "zt_save_id", save_id);
  if (!s) s = zt_safetensors_metadata(path, "zt_pieces", &text);
  if (!s && !text) s = ZT_ERR(ZT_STATUS_IO, "'%s' has no zt_pieces metadata: it is not a zerotrain shard file", path);
  char what[SH_PATH_CAP + 32];
  snprintf(what, sizeof what, "metadata of '%s'", path);
  if (!s) s = zt__json_parse(text, strlen(text), what, &pieces);
  if (!s && pieces->kind != ZT__JSON_ARRAY) s = ZT_ERR(ZT_STATUS_IO, "%s: zt_pieces is not a list", what);
  if (!s && !(*out = calloc((size_t)pieces->n + 1, sizeof **out)))
    s = ZT_ERR(ZT_STATUS_OOM, "reading '%s': out of memory", path);
  for (int i = 0; !s && i < pieces->n; i++) {
    *n = i + 1;
    s = parse_entry(what, i, &pieces->items[i], &(*out)[i]);
  }
  zt__json_free(pieces);
  free(text);
  if (s) {
    entries_free(*out, *n);
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
  ZT_TRY(zt__path_join(path, SH_PATH_CAP, into, zt__shard_file_name(fname, rank, n_ranks)));
  zt_status s = load_pieces(path, &id, e, n);
  if (!s && (!id || strcmp(id, save_id))) {
    s = ZT_ERR(ZT_STATUS_IO, "'%s' is not from this save (save id %s, expected %s)", path, id ? id : "(none)",
               save_id);
    entries_free(*e, *n);
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
                 "{\n  \"format\": \"" SH_FORMAT "\",\n  \"version\": %d,\n  \"save_id\": \"%s\",\n"
                 "  \"world_size\": %d,\n  \"strategy\": ",
                 SH_VERSION, save_id, n_ranks);
  zt__buf_json_string(&b, strategy);
  zt__buf_printf(&b, ",\n  \"optimizer\": %s,\n  \"optim_step\": %lld,\n  \"files\": [", has_optim ? "true" : "false",
                 (long long)optim_step);
  char fname[64], path[SH_PATH_CAP];
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
    entries_free(e, n);
  }
  zt__buf_printf(&b, "\n  ]\n}\n");
  if (!s) s = zt__path_join(path, SH_PATH_CAP, into, SH_INDEX);
  if (!s) s = zt__buf_write_atomic(&b, path);
  zt__buf_free(&b);
  if (s) return s;
  /* state.json last: the commit record */
  char extra[160];
  snprintf(extra, sizeof extra, "  \"sharded\": {\"world_size\": %d, \"strategy\": \"%s\"},\n", n_ranks, strategy);
  zt__ck_state_json(&b, st, save_id, has_optim, extra);
  s = zt__path_join(path, SH_PATH_CAP, into, "state.json");
  if (!s) s = zt__buf_write_atomic(&b, path);
  zt__buf_free(&b);
  return s;
}

/* ------------------------------------------------------------------ the index */

void zt__shard_index_free(zt__shard_index *ix) {
  if (!ix) return;
  for (int i = 0; i < ix->n; i++) entry_free(&ix->e[i]);
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
                 "file is damaged)", path, a->param, kind_names[a->kind], (long long)a->start,
                 (long long)(end < a->start + a->count ? end : a->start + a->count));
    if (!same) end = 0;
    if (a->count > 0 && a->start + a->count > end) end = a->start + a->count;
  }
  free(o);
  return s;
}

static zt_status index_parse(zt__shard_index *ix, const zt__json *j, const char *path) {
  const zt__json *v = zt__json_get(j, "format");
  if (j->kind != ZT__JSON_OBJECT || !v || v->kind != ZT__JSON_STRING || strcmp(v->str, SH_FORMAT))
    return ZT_ERR(ZT_STATUS_IO, "'%s' is not a zerotrain sharded checkpoint index (no \"format\": \"" SH_FORMAT "\")",
                  path);
  int64_t x;
  if (!zt__json_i64(zt__json_get(j, "version"), &x) || x != SH_VERSION)
    return ZT_ERR(ZT_STATUS_UNSUPPORTED, "'%s' is not sharded checkpoint format version %d", path, SH_VERSION);
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
    ZT_TRY(parse_entry(path, i, &ts->items[i], e));
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
    s = zt__ck_read_state(dir, &ix->st, state_id, &state_optim);
  }
  char path[SH_PATH_CAP];
  if (!s) s = zt__path_join(path, SH_PATH_CAP, dir, SH_INDEX);
  if (!s && access(path, F_OK) != 0)
    s = ZT_ERR(ZT_STATUS_IO, "checkpoint '%s' has no %s: it is not a sharded checkpoint (zt_snapshot_load reads "
               "single-process ones)", dir, SH_INDEX);
  void *text = NULL;
  size_t len = 0;
  if (!s) s = zt__read_regular_file(path, ZT__READ_JSON_MAX, "checkpoint file", &text, &len);
  zt__json *j = NULL;
  char what[SH_PATH_CAP + 8];
  snprintf(what, sizeof what, "'%s'", path);
  if (!s) s = zt__json_parse(text, len, what, &j);
  free(text);
  if (!s) s = index_parse(ix, j, path);
  zt__json_free(j);
  if (!s && (strcmp(state_id, ix->save_id) || state_optim != ix->has_optim))
    s = ZT_ERR(ZT_STATUS_IO,
               "checkpoint '%s': %s is not from the same save as state.json (save id %s, expected %s): a save into "
               "this folder was interrupted or the files were mixed; use another checkpoint",
               dir, SH_INDEX, ix->save_id, state_id);
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

static int cmp_tensor(const void *a, const void *b) {
  return strcmp(((const zt__shard_entry *)a)->tensor, ((const zt__shard_entry *)b)->tensor);
}

/* First use of a shard file: it exists, is of this save, its own record of its pieces matches
 * its tensors (f32, count elements each), and every index entry that names it agrees with that
 * record (same tensor, parameter, kind, shape and range): an index edited or mixed with another
 * save cannot put a tensor's bytes into another parameter or range. */
static zt_status check_file(zt__shard_index *ix, int f) {
  if (ix->checked[f]) return ZT_OK;
  char path[SH_PATH_CAP];
  ZT_TRY(zt__path_join(path, SH_PATH_CAP, ix->dir, ix->files[f]));
  if (access(path, F_OK) != 0)
    return ZT_ERR(ZT_STATUS_IO, "checkpoint '%s': shard file '%s' is missing (%s lists it; the checkpoint is "
                  "incomplete: copy every shard-*-of-%d file)", ix->dir, path, SH_INDEX, ix->n_files);
  char *id = NULL;
  zt__shard_entry *own = NULL;
  zt__st_info *info = NULL;
  int n_own = 0, n_info = 0;
  zt_status s = load_pieces(path, &id, &own, &n_own);
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
                 e->tensor, SH_INDEX, i);
    else if (!zt_shape_equal(e->ndim, e->shape, p->ndim, p->shape) || e->start != p->start || e->count != p->count)
      s = ZT_ERR(ZT_STATUS_IO, "checkpoint '%s': %s entry %d says tensor '%s' in '%s' holds elements [%lld, +%lld) of "
                 "'%s' of shape %s, but the shard file says [%lld, +%lld) of shape %s: %s was edited or mixed with "
                 "another save; use another checkpoint", ix->dir, SH_INDEX, i, e->tensor, path, (long long)e->start,
                 (long long)e->count, e->param, zt_shape_str(e->ndim, e->shape, a), (long long)p->start,
                 (long long)p->count, zt_shape_str(p->ndim, p->shape, b), SH_INDEX);
  }
  free(id);
  free(info);
  entries_free(own, n_own);
  if (!s) ix->checked[f] = true;
  return s;
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
      (count > 0 && !range_ok(start, count, numel_of(ndim, shape))))
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
                     "or with another kind of optimizer)", ix->dir, kind_names[kind], param);
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
                 (long long)at, (long long)gap_end, param, kind_names[kind]);
    }
  }
  float *out = NULL;
  if (!s && count > 0) s = zt_tensor_data(dst, (void **)&out);
  for (int i = 0; i < nh && !s; i++) {
    const zt__shard_entry *e = hits[i];
    char path[SH_PATH_CAP];
    zt_tensor *tmp = NULL;
    if ((s = check_file(ix, e->file)) || (s = zt__path_join(path, SH_PATH_CAP, ix->dir, ix->files[e->file])))
      break;
    if ((s = zt_tensor_empty_tagged(1, &e->count, ZT_DTYPE_F32, ZT_CPU, ZT_MEM_TAG_TEMP, &tmp))) break;
    const char *name = e->tensor;
    s = zt_safetensors_load_into(path, 1, &name, &tmp, false);
    if (!s) {
      int64_t lo = e->start > start ? e->start : start;
      int64_t hi = e->start + e->count < start + count ? e->start + e->count : start + count;
      memcpy(out + (lo - start), (const float *)zt__tensor_ptr(tmp) + (lo - e->start),
             sizeof(float) * (size_t)(hi - lo));
    }
    zt_tensor_free(tmp);
  }
  if (!s && count > 0) zt_tensor_bump_version(dst);
  free(hits);
  return s;
}

bool zt_snapshot_is_sharded(const char *dir_in) {
  char dir[SH_PATH_CAP], path[SH_PATH_CAP];
  if (!dir_in || zt_snapshot_resolve(dir_in, dir, sizeof dir) || zt__path_join(path, SH_PATH_CAP, dir, SH_INDEX))
    return false;
  return access(path, F_OK) == 0;
}

/* ------------------------------------------------------------------ consolidation */

zt_status zt_snapshot_consolidate(const char *sharded_in, const char *out_dir) {
  if (!sharded_in || !out_dir || !*out_dir)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_snapshot_consolidate: NULL folder or empty output folder name");
  char sharded_dir[SH_PATH_CAP];
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
      size_t l = strlen(kind_names[kind]) + strlen(params[k].name) + 2;
      if (!(names[n_opt] = malloc(l))) {
        s = ZT_ERR(ZT_STATUS_OOM, "consolidating '%s': out of memory", sharded_dir);
        break;
      }
      snprintf(names[n_opt], l, "%s.%s", kind_names[kind], params[k].name);
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

/* ------------------------------------------------------------------ FSDP: this rank's pieces */

/* This rank's pieces: every FSDP piece (kind param), then the optimizer's state tensors,
 * each placed like the piece of its parameter. */
typedef struct local_pieces {
  int n, n_params;
  zt__shard_piece *p;
} local_pieces;

static int find_piece(const local_pieces *L, const char *param) {
  for (int i = 0; i < L->n_params; i++)
    if (!strcmp(L->p[i].param, param)) return i;
  return -1;
}

static zt_status collect_pieces(zt_fsdp *f, zt_optim *o, local_pieces *L) {
  memset(L, 0, sizeof *L);
  zt_param *params = NULL;
  const zt_fsdp_piece *pieces = NULL;
  int np = zt_fsdp_params(f, &params, &pieces);
  int n_opt = 0;
  const char *const *onames = NULL;
  zt_tensor *const *ots = NULL;
  if (o) ZT_TRY(zt_optim_state(o, &n_opt, &onames, &ots));
  L->p = calloc((size_t)(np + n_opt) + 1, sizeof *L->p);
  if (!L->p) return ZT_ERR(ZT_STATUS_OOM, "checkpoint: out of memory");
  for (int i = 0; i < np; i++) {
    const zt_fsdp_piece *q = &pieces[i];
    zt_tensor *t = params[i].tensor;
    if (t->dtype != ZT_DTYPE_F32 || !zt_tensor_is_contiguous(t) || zt_tensor_numel(t) != q->count)
      return ZT_ERR(ZT_STATUS_INTERNAL, "checkpoint: FSDP piece '%s' is not a contiguous f32 view of %lld elements",
                    q->name, (long long)q->count);
    L->p[L->n++] = (zt__shard_piece){q->name, ZT__SHARD_PARAM, q->ndim, q->shape, q->start, q->count, t};
  }
  L->n_params = L->n;
  for (int k = 0; k < n_opt; k++) {
    zt__shard_kind kind;
    const char *pn;
    int i = -1;
    if (!zt__shard_split_state_name(onames[k], &kind, &pn) || (i = find_piece(L, pn)) < 0)
      return ZT_ERR(ZT_STATUS_INVALID_ARG,
                    "checkpoint: optimizer state '%s' belongs to no FSDP piece of this rank: build the optimizer over "
                    "zt_fsdp_params",
                    onames[k]);
    zt__shard_piece q = L->p[i];
    if (zt_tensor_numel(ots[k]) != q.count || ots[k]->dtype != ZT_DTYPE_F32 || !zt_tensor_is_contiguous(ots[k]))
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "checkpoint: optimizer state '%s' is not shaped like its FSDP piece",
                    onames[k]);
    q.kind = kind;
    q.t = ots[k];
    L->p[L->n++] = q;
  }
  return ZT_OK;
}

/* ------------------------------------------------------------------ FSDP: agreement between ranks */

/* Every rank learns whether any rank failed (over the shard group, then across the replicas),
 * so that all of them take the same branch and no collective is left waiting. Returns the
 * rank's own error, or an error saying another rank failed. */
static zt_status agree(zt_fsdp *f, zt_status s, const char *what, const char *dir) {
  zt_comm *groups[2] = {zt_fsdp_shard_comm(f), zt_fsdp_replicate_comm(f)};
  int32_t bad = s != ZT_OK;
  zt_tensor *t = NULL;
  zt_mem_tag prev = zt_mem_tag_push(ZT_MEM_TAG_COMM); /* the small control tensors of this file */
  zt_status c = zt_tensor_from_data(1, (int64_t[]){1}, ZT_DTYPE_I32, &bad, &t);
  zt_mem_tag_pop(prev);
  for (int g = 0; g < 2 && !c; g++)
    if (groups[g]) c = zt_all_reduce(groups[g], t, ZT_REDUCE_SUM);
  int32_t total = c ? 1 : (int32_t)zt_tensor_get(t, 0);
  zt_tensor_free(t);
  if (s) return s;
  if (c) return c;
  if (total) return ZT_ERR(ZT_STATUS_IO, "%s '%s' failed on another rank (its error says why)", what, dir);
  return ZT_OK;
}

/* Writers of a sharded save: one shard group (the first replica under HYBRID). */
static bool is_writer(zt_fsdp *f) {
  zt_comm *rc = zt_fsdp_replicate_comm(f);
  return !rc || zt_comm_rank(rc) == 0;
}

static const char *strategy_of(zt_fsdp *f) { return zt_fsdp_replicate_comm(f) ? "hybrid" : "sharded"; }

/* ------------------------------------------------------------------ FSDP: sharded save and load */

#define CTL_ID 64
zt_status zt_snapshot_save_sharded(const char *dir, zt_fsdp *f, zt_optim *o, const zt_train_state *st) {
  if (!dir || !*dir || !f || !st)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_snapshot_save_sharded: empty folder name, or NULL fsdp or state");
  zt_comm *sc = zt_fsdp_shard_comm(f);
  int r = zt_comm_rank(sc), n = zt_comm_size(sc);
  bool writer = is_writer(f), lead = writer && r == 0;
  local_pieces L;
  zt_status s = collect_pieces(f, o, &L);
  if ((s = agree(f, s, "saving sharded checkpoint", dir))) goto out;
  /* The lead rank prepares the folder; the version's name and the save id go to the shard group. */
  zt__ck_stage stage;
  int64_t ctl[1 + 2 * CTL_ID] = {0};
  char id[CTL_ID] = "";
  if (lead) {
    zt__ck_new_save_id(id, st->step);
    s = zt__ck_stage_begin(dir, st->step, &stage);
    ctl[0] = s != ZT_OK;
    for (int i = 0; i < CTL_ID; i++) ctl[1 + i] = id[i], ctl[1 + CTL_ID + i] = s ? 0 : stage.name[i];
  }
  zt_tensor *t = NULL;
  zt_mem_tag prev = zt_mem_tag_push(ZT_MEM_TAG_COMM);
  zt_status c = zt_tensor_from_data(1, (int64_t[]){1 + 2 * CTL_ID}, ZT_DTYPE_I64, ctl, &t);
  zt_mem_tag_pop(prev);
  if (!c) c = zt_broadcast(sc, t, 0);
  for (int i = 0; !c && i < 1 + 2 * CTL_ID; i++) ctl[i] = (int64_t)zt_tensor_get(t, i);
  zt_tensor_free(t);
  if (!s) s = c;
  if (!s && writer && !lead) {
    char name[CTL_ID];
    for (int i = 0; i < CTL_ID; i++) id[i] = (char)ctl[1 + i], name[i] = (char)ctl[1 + CTL_ID + i];
    id[CTL_ID - 1] = name[CTL_ID - 1] = '\0';
    s = ctl[0] ? ZT_ERR(ZT_STATUS_IO, "saving sharded checkpoint '%s' failed on rank 0 (its error says why)", dir)
               : zt__ck_stage_join(dir, name, &stage);
  }
  if (!s && writer) s = zt__shard_write(stage.stage, r, n, L.n, L.p, id);
  /* after this agreement every shard file is complete (or some rank failed) */
  s = agree(f, s, "saving sharded checkpoint", dir);
  if (lead && !ctl[0]) {
    if (!s) s = zt__shard_write_index(stage.stage, n, strategy_of(f), st, o != NULL, o ? zt_optim_step_count(o) : 0, id);
    if (!s) s = zt__ck_stage_commit(&stage);
    else zt__ck_stage_abort(&stage);
  }
  s = agree(f, s, "saving sharded checkpoint", dir);
out:
  free(L.p);
  return s;
}

zt_status zt_snapshot_load_sharded(const char *dir_in, zt_fsdp *f, zt_optim *o, zt_train_state *st) {
  if (!dir_in || !f) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_snapshot_load_sharded: NULL folder or fsdp");
  char dir[SH_PATH_CAP];
  ZT_TRY(zt_snapshot_resolve(dir_in, dir, sizeof dir));
  zt__shard_index *ix = NULL;
  local_pieces L = {0};
  zt_status s = zt__shard_index_read(dir, &ix);
  if (!s) s = collect_pieces(f, o, &L);
  if (!s && o && !ix->has_optim)
    s = ZT_ERR(ZT_STATUS_STATE,
               "checkpoint '%s' holds no optimizer state (it was saved without one), so training cannot resume from "
               "it; load it without an optimizer",
               dir);
  if ((s = agree(f, s, "loading sharded checkpoint", dir))) goto out;
  for (int i = 0; i < L.n && !s; i++) {
    const zt__shard_piece *q = &L.p[i];
    s = zt__shard_read(ix, q->param, q->kind, q->ndim, q->shape, q->start, q->count, q->t);
  }
  /* Parameters of the checkpoint that no rank of the shard group holds: another model. */
  zt_tensor *seen = NULL;
  zt_mem_tag prev = zt_mem_tag_push(ZT_MEM_TAG_COMM);
  zt_status c = zt_tensor_zeros(1, (int64_t[]){ix->n + 1}, ZT_DTYPE_I32, ZT_CPU, &seen);
  zt_mem_tag_pop(prev);
  for (int e = 0; e < ix->n && !c; e++)
    if (find_piece(&L, ix->e[e].param) >= 0) c = zt_tensor_set(seen, e, 1);
  if (!c) c = zt_all_reduce(zt_fsdp_shard_comm(f), seen, ZT_REDUCE_SUM);
  for (int e = 0; e < ix->n && !c && !s; e++)
    if (zt_tensor_get(seen, e) == 0)
      s = ZT_ERR(ZT_STATUS_SHAPE,
                 "checkpoint '%s' holds parameter '%s', which the model does not have (or has frozen): it was saved "
                 "from another model shape",
                 dir, ix->e[e].param);
  zt_tensor_free(seen);
  if (!s) s = c;
  if ((s = agree(f, s, "loading sharded checkpoint", dir))) goto out;
  if (o) zt_optim_set_step_count(o, ix->optim_step);
  if (st) *st = ix->st;
  /* OPT keeps full parameters besides the shards: refresh them from the loaded shards. */
  s = zt_fsdp_after_step(f);
out:
  free(L.p);
  zt__shard_index_free(ix);
  return s;
}

/* ------------------------------------------------------------------ FSDP: full checkpoints */

/* The optimizer state gathered to rank 0 of the shard group, full-shaped, in the model's
 * parameter order: each rank sends its pieces (uneven, padding excluded) packed in (parameter,
 * kind) order; where they go is known from an all-gather of every rank's (start, count). */
typedef struct full_state {
  int n;
  char **names;
  zt_tensor **ts;
} full_state;

static void full_state_free(full_state *fs) {
  for (int i = 0; i < fs->n; i++) {
    free(fs->names[i]);
    zt_tensor_free(fs->ts[i]);
  }
  free(fs->names);
  free(fs->ts);
  memset(fs, 0, sizeof *fs);
}

/* Local piece index of (param j, kind) or -1. */
static int piece_of_kind(const local_pieces *L, const char *param, zt__shard_kind kind) {
  for (int i = 0; i < L->n; i++)
    if (L->p[i].kind == kind && !strcmp(L->p[i].param, param)) return i;
  return -1;
}

static zt_status gather_state(zt_fsdp *f, zt_gpt2 *m, const local_pieces *L, full_state *fs) {
  zt_comm *sc = zt_fsdp_shard_comm(f);
  int r = zt_comm_rank(sc), n = zt_comm_size(sc);
  zt_param *mp;
  int np = zt_gpt2_params(m, &mp);
  int64_t nm = (int64_t)np * 2 + ZT__SHARD_KIND_COUNT;
  zt_tensor *meta = NULL, *all = NULL, *buf = NULL;
  zt_mem_tag prev = zt_mem_tag_push(ZT_MEM_TAG_COMM);
  zt_status s = zt_tensor_zeros(1, &nm, ZT_DTYPE_I64, ZT_CPU, &meta);
  if (!s) s = zt_tensor_zeros(1, (int64_t[]){nm * n}, ZT_DTYPE_I64, ZT_CPU, &all);
  zt_mem_tag_pop(prev);
  if (s) goto out;
  int64_t *me = zt__tensor_ptr(meta);
  for (int j = 0; j < np; j++) {
    int i = find_piece(L, mp[j].name);
    if (i >= 0) me[2 * j] = L->p[i].start, me[2 * j + 1] = L->p[i].count;
  }
  for (int i = L->n_params; i < L->n; i++) me[2 * np + L->p[i].kind] = 1;
  if ((s = zt_all_gather(sc, meta, all))) goto out;
  const int64_t *am = zt__tensor_ptr(all);
  bool kinds[ZT__SHARD_KIND_COUNT] = {false};
  for (int q = 0; q < n; q++)
    for (int k = 1; k < ZT__SHARD_KIND_COUNT; k++) kinds[k] |= am[q * nm + 2 * np + k] != 0;
  /* every piece of this rank has each kind of state (checked before anything is sent) */
  int64_t mine = 0;
  for (int j = 0; j < np; j++)
    for (int k = 1; k < ZT__SHARD_KIND_COUNT; k++)
      if (kinds[k] && me[2 * j + 1] > 0) {
        if (piece_of_kind(L, mp[j].name, (zt__shard_kind)k) < 0)
          s = ZT_ERR(ZT_STATUS_INVALID_ARG, "saving a full checkpoint: this rank has no optimizer state '%s.%s'",
                     kind_names[k], mp[j].name);
        mine += me[2 * j + 1];
      }
  if (r != 0) {
    /* sent even after an error here (zeros where state is missing): rank 0 waits for it */
    if (mine == 0) goto out;
    zt_status c = zt_tensor_empty_tagged(1, &mine, ZT_DTYPE_F32, ZT_CPU, ZT_MEM_TAG_TEMP, &buf);
    if (c) {
      s = s ? s : c;
      goto out;
    }
    float *w = zt__tensor_ptr(buf);
    memset(w, 0, sizeof(float) * (size_t)mine);
    for (int j = 0; j < np; j++)
      for (int k = 1; k < ZT__SHARD_KIND_COUNT; k++)
        if (kinds[k] && me[2 * j + 1] > 0) {
          int i = piece_of_kind(L, mp[j].name, (zt__shard_kind)k);
          if (i >= 0) memcpy(w, zt__tensor_ptr(L->p[i].t), sizeof(float) * (size_t)me[2 * j + 1]);
          w += me[2 * j + 1];
        }
    c = zt_send(sc, buf, 0, 0x5A7);
    if (!s) s = c;
    goto out;
  }
  /* rank 0: full tensors for every parameter some rank holds a piece of */
  int cap = np * (ZT__SHARD_KIND_COUNT - 1) + 1;
  fs->names = calloc((size_t)cap, sizeof *fs->names);
  fs->ts = calloc((size_t)cap, sizeof *fs->ts);
  int *slot = calloc((size_t)cap, sizeof *slot); /* (j, k) -> fs index or -1 */
  if (!fs->names || !fs->ts || !slot) {
    free(slot);
    s = ZT_ERR(ZT_STATUS_OOM, "saving a full checkpoint: out of memory");
    goto out;
  }
  for (int j = 0; j < np && !s; j++) {
    int64_t covered = 0;
    for (int q = 0; q < n; q++) covered += am[q * nm + 2 * j + 1];
    for (int k = 1; k < ZT__SHARD_KIND_COUNT && !s; k++) {
      slot[j * (ZT__SHARD_KIND_COUNT - 1) + k - 1] = -1;
      if (!kinds[k] || covered == 0) continue;
      zt_tensor *t = mp[j].tensor;
      if (covered != zt_tensor_numel(t)) {
        s = ZT_ERR(ZT_STATUS_INTERNAL, "saving a full checkpoint: the FSDP pieces of '%s' cover %lld of its %lld "
                   "elements", mp[j].name, (long long)covered, (long long)zt_tensor_numel(t));
        break;
      }
      size_t l = strlen(kind_names[k]) + strlen(mp[j].name) + 2;
      if (!(fs->names[fs->n] = malloc(l))) {
        s = ZT_ERR(ZT_STATUS_OOM, "saving a full checkpoint: out of memory");
        break;
      }
      snprintf(fs->names[fs->n], l, "%s.%s", kind_names[k], mp[j].name);
      s = zt_tensor_empty_tagged(t->ndim, t->shape, ZT_DTYPE_F32, ZT_CPU, ZT_MEM_TAG_TEMP, &fs->ts[fs->n]);
      slot[j * (ZT__SHARD_KIND_COUNT - 1) + k - 1] = fs->n++;
    }
  }
  /* rank q's pack, in (parameter, kind) order, into the full tensors; q = 0 from its own pieces.
   * Every rank's pack is received even after an error, so that no sender is left blocked. */
  for (int q = 0; q < n; q++) {
    int64_t total = 0;
    for (int j = 0; j < np; j++)
      for (int k = 1; k < ZT__SHARD_KIND_COUNT; k++) total += kinds[k] ? am[q * nm + 2 * j + 1] : 0;
    if (q > 0 && total > 0) {
      zt_tensor_free(buf);
      buf = NULL;
      zt_status c = zt_tensor_empty_tagged(1, &total, ZT_DTYPE_F32, ZT_CPU, ZT_MEM_TAG_TEMP, &buf);
      if (!c) c = zt_recv(sc, buf, q, 0x5A7);
      if (c) {
        if (!s) s = c;
        continue;
      }
    }
    const float *rd = q > 0 && buf ? zt__tensor_ptr(buf) : NULL;
    for (int j = 0; j < np && !s; j++)
      for (int k = 1; k < ZT__SHARD_KIND_COUNT; k++) {
        int64_t start = am[q * nm + 2 * j], count = am[q * nm + 2 * j + 1];
        if (!kinds[k] || count == 0) continue;
        float *dst = (float *)zt__tensor_ptr(fs->ts[slot[j * (ZT__SHARD_KIND_COUNT - 1) + k - 1]]) + start;
        if (q == 0) {
          memcpy(dst, zt__tensor_ptr(L->p[piece_of_kind(L, mp[j].name, (zt__shard_kind)k)].t),
                 sizeof(float) * (size_t)count);
        } else {
          memcpy(dst, rd, sizeof(float) * (size_t)count);
          rd += count;
        }
      }
  }
  free(slot);
out:
  zt_tensor_free(meta);
  zt_tensor_free(all);
  zt_tensor_free(buf);
  return s;
}

zt_status zt_snapshot_save_full(const char *dir, zt_gpt2 *m, zt_fsdp *f, zt_optim *o, const zt_train_state *st) {
  if (!dir || !*dir || !m || !f || !st)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_snapshot_save_full: empty folder name, or NULL model, fsdp or state");
  ZT_TRY(zt_fsdp_gather_full_params(f));
  zt_comm *sc = zt_fsdp_shard_comm(f);
  bool lead = is_writer(f) && zt_comm_rank(sc) == 0;
  local_pieces L = {0};
  full_state fs = {0};
  zt_status s = o ? collect_pieces(f, o, &L) : ZT_OK;
  s = agree(f, s, "saving full checkpoint", dir);
  if (!s && o && is_writer(f)) s = gather_state(f, m, &L, &fs);
  if (!s && lead)
    s = zt__snapshot_save_arrays(dir, m, o != NULL, fs.n, (const char *const *)fs.names, fs.ts,
                                   o ? zt_optim_step_count(o) : 0, st);
  full_state_free(&fs);
  free(L.p);
  s = agree(f, s, "saving full checkpoint", dir);
  zt_status r = zt_fsdp_release_full_params(f);
  return s ? s : r;
}

/* This rank's slices of the optimizer state from a single-process optim.safetensors. */
static zt_status load_state_slices(const char *dir, const char *save_id, const local_pieces *L, zt_optim *o) {
  char path[SH_PATH_CAP], *id = NULL, *step = NULL, **names = NULL;
  int nn = 0;
  ZT_TRY(zt__path_join(path, SH_PATH_CAP, dir, "optim.safetensors"));
  zt_status s = zt_safetensors_metadata(path, "zt_save_id", &id);
  if (!s && (!id || strcmp(id, save_id)))
    s = ZT_ERR(ZT_STATUS_IO, "checkpoint '%s': optim.safetensors is not from the same save as state.json (save id "
               "%s, expected %s); use another checkpoint", dir, id ? id : "(none)", save_id);
  if (!s) s = zt_safetensors_metadata(path, "step", &step);
  char *end = NULL;
  errno = 0;
  long long v = step ? strtoll(step, &end, 10) : -1;
  /* AdamW's bias correction reads the step as a double: beyond 2^53 it is not exact (and
   * strtoll's clamp of a longer number to 2^63-1 overflows when the step is incremented) */
  if (!s && !(step && *step >= '0' && *step <= '9' && !*end && !errno && v >= 0 && v <= (1ll << 53)))
    s = ZT_ERR(ZT_STATUS_IO, "'%s': metadata 'step' is missing or not an integer in [0, 2^53] (the file is damaged)",
               path);
  if (!s) s = zt_safetensors_names(path, &nn, &names);
  for (int i = L->n_params; i < L->n && !s; i++) {
    const zt__shard_piece *q = &L->p[i];
    char name[256];
    snprintf(name, sizeof name, "%s.%s", kind_names[q->kind], q->param);
    bool found = false;
    for (int k = 0; k < nn && !found; k++) found = !strcmp(names[k], name);
    if (!found) {
      s = ZT_ERR(ZT_STATUS_IO, "'%s' has no tensor '%s': it was saved with another optimizer or model", path, name);
      break;
    }
    zt_tensor *full = NULL;
    const char *nm = name;
    if (!(s = zt_tensor_empty_tagged(q->ndim, q->shape, ZT_DTYPE_F32, ZT_CPU, ZT_MEM_TAG_TEMP, &full)))
      s = zt_safetensors_load_into(path, 1, &nm, &full, false);
    if (!s && q->count > 0) {
      memcpy(zt__tensor_ptr(q->t), (const float *)zt__tensor_ptr(full) + q->start, sizeof(float) * (size_t)q->count);
      zt_tensor_bump_version(q->t);
    }
    zt_tensor_free(full);
  }
  if (!s) zt_optim_set_step_count(o, v);
  free(id);
  free(step);
  free(names);
  return s;
}

zt_status zt_snapshot_load_full(const char *dir_in, zt_gpt2 *m, zt_fsdp *f, zt_optim *o, zt_train_state *st) {
  if (!dir_in || !m || !f) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_snapshot_load_full: NULL folder, model or fsdp");
  char id[64] = "", dir[SH_PATH_CAP];
  bool has_optim = false;
  local_pieces L = {0};
  zt_status s = zt_snapshot_resolve(dir_in, dir, sizeof dir);
  if (!s) s = zt__ck_read_state(dir, NULL, id, &has_optim);
  if (!s && o && !has_optim)
    s = ZT_ERR(ZT_STATUS_STATE,
               "checkpoint '%s' holds no optimizer state (it was saved without one), so training cannot resume from "
               "it; load it without an optimizer",
               dir);
  if (!s && o) s = collect_pieces(f, o, &L);
  if ((s = agree(f, s, "loading checkpoint", dir))) goto out;
  if ((s = zt_fsdp_gather_full_params(f))) goto out;
  zt_train_state got;
  s = zt_snapshot_load(dir, m, NULL, &got);
  if (!s) s = zt_fsdp_shard_from_full(f);
  if (!s && o) s = load_state_slices(dir, id, &L, o);
  s = agree(f, s, "loading checkpoint", dir);
  zt_status r = zt_fsdp_release_full_params(f);
  if (!s) s = r;
  if (!s && st) *st = got;
out:
  free(L.p);
  return s;
}
