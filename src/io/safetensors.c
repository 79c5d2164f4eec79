/* safetensors files: u64 little-endian header size N, N bytes of JSON header
 * {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}
 * padded with spaces to a multiple of 8, then the data (offsets relative to its start).
 * Reading validates the whole header (sizes, offsets inside the file, no overlaps) before
 * any tensor is touched, then reads each tensor with pread straight into its destination
 * (no copy of the file in memory) unless a dtype conversion needs a staging buffer.
 * Writing streams: the header, then each tensor's bytes in turn into the temp file of an
 * atomic write. A tensor whose storage is evicted to a store (zt/store.h) is read from, or
 * loaded into, the store through one host buffer (src/io/bounce.c), never restored. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/backend.h"
#include "core/file.h"
#include "core/tensor_internal.h"
#include "io/atomic_file.h"
#include "io/bounce.h"
#include "io/buf.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "zt/autograd.h"
#include "zt/store.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

/* HF's reader refuses headers over 100 MB; so do we (a corrupt size would ask for GBs). */
#define ST_MAX_HEADER ((uint64_t)100 << 20)
/* Elements converted per staging chunk. */
#define ST_CHUNK_ELEMS ((size_t)1 << 18)

typedef struct st_dtype_info {
  const char *name;
  size_t size;
  int zt; /* zt_dtype, or -1: a valid safetensors dtype that zerotrain does not load */
} st_dtype_info;

static const st_dtype_info st_dtypes[] = {
    {"F32", 4, ZT_DTYPE_F32},  {"F64", 8, ZT_DTYPE_F64}, {"BF16", 2, ZT_DTYPE_BF16}, {"F16", 2, ZT_DTYPE_F16},
    {"I32", 4, ZT_DTYPE_I32},  {"I64", 8, ZT_DTYPE_I64}, {"BOOL", 1, -1},            {"U8", 1, -1},
    {"I8", 1, -1},             {"I16", 2, -1},           {"U16", 2, -1},             {"U32", 4, -1},
    {"U64", 8, -1},            {"F8_E4M3", 1, -1},       {"F8_E5M2", 1, -1},
};
#define ST_N_DTYPES ((int)(sizeof st_dtypes / sizeof st_dtypes[0]))

static const char *st_name_of(zt_dtype dt) {
  for (int i = 0; i < ST_N_DTYPES; i++)
    if (st_dtypes[i].zt == (int)dt) return st_dtypes[i].name;
  return NULL;
}

typedef struct st_entry {
  const char *name; /* points into the parsed header */
  int dt;           /* index into st_dtypes */
  int ndim;
  int64_t shape[ZT_MAX_DIMS];
  uint64_t begin, end; /* relative to the data start */
} st_entry;

typedef struct st_file {
  const char *path;
  int fd;
  uint64_t data_start, data_len;
  zt__json *header;
  const zt__json *meta; /* the "__metadata__" object or NULL */
  int n;
  st_entry *e;
  int *by_name; /* entry indices sorted by name, for lookups */
} st_file;

static void st_close(st_file *f) {
  if (f->fd >= 0) close(f->fd);
  zt__json_free(f->header);
  free(f->e);
  free(f->by_name);
  f->fd = -1;
  f->header = NULL;
  f->e = NULL;
  f->by_name = NULL;
}

static zt_status pread_all(int fd, void *dst, size_t n, uint64_t off, const char *path) {
  char *p = dst;
  while (n > 0) {
    size_t step = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
    ssize_t r = pread(fd, p, step, (off_t)off);
    if (r < 0) {
      if (errno == EINTR) continue;
      return ZT_ERR(ZT_STATUS_IO, "cannot read '%s': %s", path, strerror(errno));
    }
    if (r == 0) return ZT_ERR(ZT_STATUS_IO, "cannot read '%s': the file ended early (truncated while reading?)", path);
    p += r;
    n -= (size_t)r;
    off += (uint64_t)r;
  }
  return ZT_OK;
}

static int cmp_by_name(const void *a, const void *b, void *ctx) {
  const st_file *f = ctx;
  return strcmp(f->e[*(const int *)a].name, f->e[*(const int *)b].name);
}
static int cmp_by_begin(const void *a, const void *b, void *ctx) {
  const st_file *f = ctx;
  const st_entry *x = &f->e[*(const int *)a], *y = &f->e[*(const int *)b];
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

static zt_status parse_entry(st_file *f, const char *name, const zt__json *v, st_entry *e) {
  const char *path = f->path;
  if (v->kind != ZT__JSON_OBJECT)
    return ZT_ERR(ZT_STATUS_IO, "'%s': the header entry of tensor '%s' is not an object", path, name);
  const zt__json *dt = zt__json_get(v, "dtype"), *shape = zt__json_get(v, "shape"),
                 *offs = zt__json_get(v, "data_offsets");
  if (!dt || dt->kind != ZT__JSON_STRING)
    return ZT_ERR(ZT_STATUS_IO, "'%s': tensor '%s' has no \"dtype\" string in the header", path, name);
  e->name = name;
  e->dt = -1;
  for (int i = 0; i < ST_N_DTYPES; i++)
    if (!strcmp(st_dtypes[i].name, dt->str)) e->dt = i;
  if (e->dt < 0)
    return ZT_ERR(ZT_STATUS_IO, "'%s': tensor '%s' has unknown dtype '%s' (safetensors dtypes: F64 F32 F16 BF16 "
                  "I64 I32 I16 I8 U8 ... BOOL)", path, name, dt->str);
  if (!shape || shape->kind != ZT__JSON_ARRAY)
    return ZT_ERR(ZT_STATUS_IO, "'%s': tensor '%s' has no \"shape\" array in the header", path, name);
  if (shape->n > ZT_MAX_DIMS)
    return ZT_ERR(ZT_STATUS_IO, "'%s': tensor '%s' has %d dimensions; zerotrain supports at most %d", path, name,
                  shape->n, ZT_MAX_DIMS);
  e->ndim = shape->n;
  /* every partial product must fit an int64 (tensor code multiplies shapes in int64) */
  int64_t numel = 1;
  bool overflow = false;
  for (int d = 0; d < shape->n; d++) {
    int64_t s;
    if (!zt__json_i64(&shape->items[d], &s) || s < 0)
      return ZT_ERR(ZT_STATUS_IO, "'%s': tensor '%s' has an invalid shape (dimension %d is not an integer >= 0)",
                    path, name, d);
    e->shape[d] = s;
    if (!overflow && __builtin_mul_overflow(numel, s, &numel)) overflow = true;
  }
  if (overflow) {
    char sb[128];
    return ZT_ERR(ZT_STATUS_IO, "'%s': tensor '%s' has shape %s, whose element count overflows a 64-bit integer: the "
                  "file is corrupt", path, name, zt_shape_str(e->ndim, e->shape, sb));
  }
  if (!offs || offs->kind != ZT__JSON_ARRAY || offs->n != 2 || !zt__json_u64(&offs->items[0], &e->begin) ||
      !zt__json_u64(&offs->items[1], &e->end) || e->begin > e->end)
    return ZT_ERR(ZT_STATUS_IO, "'%s': tensor '%s' needs \"data_offsets\": [begin, end] with 0 <= begin <= end", path,
                  name);
  char sb[128];
  uint64_t es = st_dtypes[e->dt].size, nbytes = 0;
  if (__builtin_mul_overflow((uint64_t)numel, es, &nbytes))
    return ZT_ERR(ZT_STATUS_IO, "'%s': tensor '%s' of shape %s and dtype %s needs more than 2^64 bytes: the file is "
                  "corrupt", path, name, zt_shape_str(e->ndim, e->shape, sb), st_dtypes[e->dt].name);
  if (nbytes != e->end - e->begin)
    return ZT_ERR(ZT_STATUS_IO,
                  "'%s': tensor '%s' of shape %s and dtype %s needs %llu bytes but its data_offsets [%llu, %llu] span "
                  "%llu (shape and offsets do not match)",
                  path, name, zt_shape_str(e->ndim, e->shape, sb), st_dtypes[e->dt].name,
                  (unsigned long long)nbytes, (unsigned long long)e->begin, (unsigned long long)e->end,
                  (unsigned long long)(e->end - e->begin));
  if (e->end > f->data_len)
    return ZT_ERR(ZT_STATUS_IO,
                  "'%s': tensor '%s' has data_offsets [%llu, %llu] outside the data part of the file (%llu bytes): "
                  "the file is truncated or corrupt",
                  path, name, (unsigned long long)e->begin, (unsigned long long)e->end,
                  (unsigned long long)f->data_len);
  return ZT_OK;
}

/* Open and validate everything but the tensor bytes. On error f is closed. */
static zt_status st_open(const char *path, st_file *f) {
  memset(f, 0, sizeof *f);
  f->fd = -1;
  f->path = path;
  if (!path) return ZT_ERR(ZT_STATUS_INVALID_ARG, "safetensors: the path is NULL");
  uint64_t size = 0;
  ZT_TRY(zt__open_regular_file(path, "safetensors file", &f->fd, &size));
  if (size < 8) {
    st_close(f);
    return ZT_ERR(ZT_STATUS_IO,
                  "'%s' is not a safetensors file: it has only %llu bytes (a safetensors file starts with an 8-byte "
                  "header size)", path, (unsigned long long)size);
  }
  unsigned char hb[8];
  zt_status s = pread_all(f->fd, hb, 8, 0, path);
  uint64_t hn = 0;
  for (int i = 7; i >= 0; i--) hn = hn << 8 | hb[i];
  if (!s && hn > ST_MAX_HEADER)
    s = ZT_ERR(ZT_STATUS_IO, "'%s': header size %llu is too large (the limit is %llu): not a safetensors file, or "
               "corrupt", path, (unsigned long long)hn, (unsigned long long)ST_MAX_HEADER);
  if (!s && hn > size - 8)
    s = ZT_ERR(ZT_STATUS_IO, "'%s': header size %llu is larger than the rest of the file (%llu bytes): the file is "
               "truncated or not a safetensors file", path, (unsigned long long)hn, (unsigned long long)(size - 8));
  if (!s && hn < 2)
    s = ZT_ERR(ZT_STATUS_IO, "'%s': header size %llu is too small for a JSON header", path, (unsigned long long)hn);
  char *text = NULL;
  if (!s && !(text = malloc(hn))) s = ZT_ERR(ZT_STATUS_OOM, "'%s': out of memory for the header", path);
  if (!s) s = pread_all(f->fd, text, hn, 8, path);
  if (!s) {
    char what[1200];
    snprintf(what, sizeof what, "the header of '%s'", path);
    s = zt__json_parse(text, hn, what, &f->header);
  }
  free(text);
  if (s) {
    st_close(f);
    return s;
  }
  f->data_start = 8 + hn;
  f->data_len = size - 8 - hn;
  const zt__json *h = f->header;
  if (h->kind != ZT__JSON_OBJECT) {
    st_close(f);
    return ZT_ERR(ZT_STATUS_IO, "'%s': the header is not a JSON object", path);
  }
  f->e = calloc((size_t)h->n + 1, sizeof *f->e);
  f->by_name = calloc((size_t)h->n + 1, sizeof *f->by_name);
  if (!f->e || !f->by_name) {
    st_close(f);
    return ZT_ERR(ZT_STATUS_OOM, "'%s': out of memory", path);
  }
  for (int i = 0; i < h->n && !s; i++) {
    const char *key = h->keys[i];
    const zt__json *v = &h->items[i];
    if (!strcmp(key, "__metadata__")) {
      if (v->kind != ZT__JSON_OBJECT) {
        s = ZT_ERR(ZT_STATUS_IO, "'%s': \"__metadata__\" is not an object", path);
        break;
      }
      for (int k = 0; k < v->n && !s; k++)
        if (v->items[k].kind != ZT__JSON_STRING)
          s = ZT_ERR(ZT_STATUS_IO, "'%s': metadata value of \"%s\" is not a string", path, v->keys[k]);
      f->meta = v;
      continue;
    }
    s = parse_entry(f, key, v, &f->e[f->n]);
    if (!s) f->n++;
  }
  if (s) {
    st_close(f);
    return s;
  }
  /* Overlap check on the non-empty tensors, in order of their offsets. */
  for (int i = 0; i < f->n; i++) f->by_name[i] = i;
  qsort_r(f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_by_begin, f);
  const st_entry *prev = NULL;
  for (int i = 0; i < f->n && !s; i++) {
    const st_entry *e = &f->e[f->by_name[i]];
    if (e->begin == e->end) continue;
    if (prev && e->begin < prev->end)
      s = ZT_ERR(ZT_STATUS_IO, "'%s': the data of tensors '%s' [%llu, %llu] and '%s' [%llu, %llu] overlap", path,
                 prev->name, (unsigned long long)prev->begin, (unsigned long long)prev->end, e->name,
                 (unsigned long long)e->begin, (unsigned long long)e->end);
    prev = e;
  }
  qsort_r(f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_by_name, f);
  if (s) st_close(f);
  return s;
}

static const st_entry *st_find(const st_file *f, const char *name) {
  int lo = 0, hi = f->n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    int c = strcmp(name, f->e[f->by_name[mid]].name);
    if (!c) return &f->e[f->by_name[mid]];
    if (c < 0) hi = mid - 1;
    else lo = mid + 1;
  }
  return NULL;
}

/* ------------------------------------------------------------------ reading into tensors */

static bool is_int(zt_dtype dt) { return dt == ZT_DTYPE_I32 || dt == ZT_DTYPE_I64; }

/* dst[0, n) = convert(src[0, n)); returns the index of the first value out of range of
 * an integer destination, or -1. */
static int64_t convert(zt_dtype to, void *dst, zt_dtype from, const void *src, size_t n) {
  if (to == ZT_DTYPE_F32 && from == ZT_DTYPE_BF16) {
    for (size_t i = 0; i < n; i++) ((float *)dst)[i] = zt_bf16_to_f32(((const uint16_t *)src)[i]);
  } else if (to == ZT_DTYPE_F32 && from == ZT_DTYPE_F16) {
    for (size_t i = 0; i < n; i++) ((float *)dst)[i] = zt_f16_to_f32(((const uint16_t *)src)[i]);
  } else if (to == ZT_DTYPE_I32 && from == ZT_DTYPE_I64) {
    for (size_t i = 0; i < n; i++) {
      int64_t v = ((const int64_t *)src)[i];
      if (v < INT32_MIN || v > INT32_MAX) return (int64_t)i;
      ((int32_t *)dst)[i] = (int32_t)v;
    }
  } else if (to == ZT_DTYPE_I64 && from == ZT_DTYPE_I32) {
    for (size_t i = 0; i < n; i++) ((int64_t *)dst)[i] = ((const int32_t *)src)[i];
  } else {
    for (size_t i = 0; i < n; i++) zt__store(to, dst, (int64_t)i, zt__load(from, src, (int64_t)i));
  }
  return -1;
}

static zt_status read_into(const st_file *f, const st_entry *e, zt_tensor *dst, void *dp);

static zt_status read_entry(const st_file *f, const st_entry *e, zt_tensor *dst) {
  zt_dtype from = (zt_dtype)st_dtypes[e->dt].zt;
  uint64_t off = f->data_start + e->begin;
  size_t n = (size_t)zt_tensor_numel(dst);
  if (n == 0) return ZT_OK;
  void *dp;
  ZT_TRY(zt_tensor_data(dst, &dp)); /* refuses released storage */
  if (!zt_tensor_is_contiguous(dst)) {
    /* Rare (views): stage the whole tensor in the file's dtype, then a strided copy. */
    zt_tensor *tmp = NULL;
    ZT_TRY(zt_tensor_empty_tagged(dst->ndim, dst->shape, from, ZT_CPU, ZT_MEM_TAG_TEMP, &tmp));
    zt_status s = pread_all(f->fd, zt__tensor_ptr(tmp), (size_t)(e->end - e->begin), off, f->path); /* cpu: host */
    if (!s) s = zt_tensor_copy_(dst, tmp);
    zt_tensor_free(tmp);
    return s;
  }
  /* Host tensors are read straight into their bytes; others through a host copy that
   * their backend writes (read_into below sees host memory either way). */
  dp = zt__tensor_host_ptr(dst);
  if (dp) return read_into(f, e, dst, dp);
  size_t nb = zt_tensor_nbytes(dst);
  void *stage = NULL;
  ZT_TRY(zt_mem_alloc(nb, ZT_CPU, ZT_MEM_TAG_TEMP, &stage));
  zt_status s = read_into(f, e, dst, stage);
  if (!s) zt__dev_write(dst, stage, nb);
  zt_mem_free(stage, nb, ZT_CPU, ZT_MEM_TAG_TEMP);
  return s;
}

/* Entry e into dp, host memory for the elements of contiguous dst (converted to its dtype). */
static zt_status read_into(const st_file *f, const st_entry *e, zt_tensor *dst, void *dp) {
  zt_dtype from = (zt_dtype)st_dtypes[e->dt].zt;
  uint64_t off = f->data_start + e->begin;
  size_t n = (size_t)zt_tensor_numel(dst);
  if (from == dst->dtype) {
    ZT_TRY(pread_all(f->fd, dp, (size_t)(e->end - e->begin), off, f->path));
    zt_tensor_bump_version(dst);
    return ZT_OK;
  }
  size_t fs = st_dtypes[e->dt].size, ds = zt_dtype_size(dst->dtype);
  size_t chunk = n < ST_CHUNK_ELEMS ? n : ST_CHUNK_ELEMS;
  void *buf = malloc(chunk * fs);
  if (!buf) return ZT_ERR(ZT_STATUS_OOM, "'%s': out of memory converting tensor '%s'", f->path, e->name);
  zt_status s = ZT_OK;
  for (size_t i = 0; i < n && !s; i += chunk) {
    size_t m = n - i < chunk ? n - i : chunk;
    s = pread_all(f->fd, buf, m * fs, off + i * fs, f->path);
    if (s) break;
    int64_t bad = convert(dst->dtype, (char *)dp + i * ds, from, buf, m);
    if (bad >= 0)
      s = ZT_ERR(ZT_STATUS_DTYPE, "'%s': tensor '%s': value %lld at index %llu does not fit in %s", f->path, e->name,
                 (long long)((const int64_t *)buf)[bad], (unsigned long long)(i + (size_t)bad),
                 zt_dtype_name(dst->dtype));
  }
  free(buf);
  zt_tensor_bump_version(dst);
  return s;
}

/* Entry e into dst. An evicted dst is loaded into a view of the stage (over the storage's old
 * contents when dst is only part of it) and the stage then replaces the store's copy: the
 * storage stays evicted, and on failure keeps its old contents. */
static zt_status load_entry(const st_file *f, const st_entry *e, zt_tensor *dst, zt__bounce *stage) {
  if (zt_tensor_numel(dst) == 0 || !zt_storage_is_evicted(dst->storage)) return read_entry(f, e, dst);
  zt_tensor *view = NULL;
  zt_status s = zt__bounce_view(stage, dst, !zt__bounce_covers(dst), &view);
  if (!s) s = read_entry(f, e, view);
  if (s) stage->held_id = 0; /* the buffer may be partly written: not the storage's contents */
  if (!s) s = zt__bounce_store(stage, dst);
  zt_tensor_free(view);
  return s;
}

/* Lists up to 3 names of a set for an error message ("'a', 'b', 'c' and 4 more"). */
static void name_list(char *buf, size_t cap, const char *const *names, int n) {
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && i < 3; i++)
    len += (size_t)snprintf(buf + len, len < cap ? cap - len : 0, "%s'%s'", i ? ", " : "", names[i]);
  if (n > 3 && len < cap) snprintf(buf + len, cap - len, " and %d more", n - 3);
}

zt_status zt_safetensors_load_into(const char *path, int n, const char *const *names, zt_tensor *const *tensors,
                                   bool strict) {
  if (n < 0 || (n > 0 && (!names || !tensors)))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_safetensors_load_into('%s'): bad name/tensor arrays", path ? path : "");
  for (int i = 0; i < n; i++) {
    if (!names[i] || !tensors[i])
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_safetensors_load_into('%s'): name or tensor %d is NULL",
                    path ? path : "", i);
  }
  st_file f;
  ZT_TRY(st_open(path, &f));
  zt_status s = ZT_OK;
  zt__bounce stage = {0};
  const st_entry **found = calloc((size_t)n + 1, sizeof *found);
  const char **listed = calloc((size_t)(n > f.n ? n : f.n) + 1, sizeof *listed);
  if (!found || !listed) {
    s = ZT_ERR(ZT_STATUS_OOM, "'%s': out of memory", path);
    goto out;
  }
  /* Check every name, shape and dtype before writing any tensor. */
  int n_missing = 0;
  for (int i = 0; i < n; i++)
    if (!(found[i] = st_find(&f, names[i]))) listed[n_missing++] = names[i];
  char list[512];
  if (strict && n_missing) {
    name_list(list, sizeof list, listed, n_missing);
    s = ZT_ERR(ZT_STATUS_INVALID_ARG, "'%s' has no tensor %s (%d of the %d asked for are missing)", path, list,
               n_missing, n);
    goto out;
  }
  if (strict) {
    /* here every name was found; the file's entries no name asked for are extra */
    int n_extra = 0;
    bool *asked = calloc((size_t)f.n + 1, sizeof *asked);
    if (!asked) {
      s = ZT_ERR(ZT_STATUS_OOM, "'%s': out of memory", path);
      goto out;
    }
    for (int i = 0; i < n; i++) asked[found[i] - f.e] = true;
    for (int k = 0; k < f.n; k++)
      if (!asked[k]) listed[n_extra++] = f.e[k].name;
    free(asked);
    if (n_extra) {
      name_list(list, sizeof list, listed, n_extra);
      s = ZT_ERR(ZT_STATUS_INVALID_ARG, "'%s' holds tensor %s that were not asked for (a strict load wants exactly "
                 "the %d names given)", path, list, n);
      goto out;
    }
  }
  for (int i = 0; i < n && !s; i++) {
    const st_entry *e = found[i];
    zt_tensor *t = tensors[i];
    if (!e) continue;
    if (!zt_shape_equal(e->ndim, e->shape, t->ndim, t->shape)) {
      char a[128], b[128];
      s = ZT_ERR(ZT_STATUS_SHAPE, "'%s': tensor '%s' has shape %s in the file but %s where it is loaded", path,
                 names[i], zt_shape_str(e->ndim, e->shape, a), zt_shape_str(t->ndim, t->shape, b));
    } else if (st_dtypes[e->dt].zt < 0) {
      s = ZT_ERR(ZT_STATUS_DTYPE, "'%s': tensor '%s' has dtype %s, which zerotrain cannot load (it loads F32, F64, "
                 "BF16, F16, I32, I64)", path, names[i], st_dtypes[e->dt].name);
    } else if (is_int((zt_dtype)st_dtypes[e->dt].zt) != is_int(t->dtype)) {
      s = ZT_ERR(ZT_STATUS_DTYPE, "'%s': tensor '%s' is %s in the file and cannot be converted to %s (integer and "
                 "floating-point tensors do not mix)", path, names[i], st_dtypes[e->dt].name,
                 zt_dtype_name(t->dtype));
    } else if (zt_tensor_numel(t) > 0) {
      void *p;
      /* an evicted destination is filled in its store; a zero-byte read checks that it can be
       * (no restore in flight) */
      s = zt_storage_is_evicted(t->storage) ? zt_storage_read_evicted(t->storage, 0, 0, NULL) : zt_tensor_data(t, &p);
      if (s) zt__error_prefix(s, "loading '%s' from '%s'", names[i], path);
    }
  }
  if (s) goto out;
  /* Evicted destinations are filled through one host buffer, one after another. */
  zt_tensor **evicted = calloc((size_t)n + 1, sizeof *evicted);
  if (!evicted) {
    s = ZT_ERR(ZT_STATUS_OOM, "'%s': out of memory", path);
    goto out;
  }
  for (int i = 0; i < n; i++)
    if (found[i]) evicted[i] = tensors[i];
  s = zt__bounce_init(&stage, n, evicted);
  free(evicted);
  if (s) {
    zt__error_prefix(s, "loading '%s' into evicted tensors", path);
    goto out;
  }
  /* Loading is like initialisation: no autograd record, also for leaves that need grad. */
  bool prev = zt_set_grad_enabled(false);
  for (int i = 0; i < n && !s; i++)
    if (found[i] && (s = load_entry(&f, found[i], tensors[i], &stage)))
      zt__error_prefix(s, "loading tensor '%s' (earlier tensors were already loaded)", names[i]);
  zt_set_grad_enabled(prev);
out:
  zt__bounce_free(&stage);
  free(found);
  free(listed);
  st_close(&f);
  return s;
}

zt_status zt_safetensors_metadata(const char *path, const char *key, char **value) {
  if (!key || !value) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_safetensors_metadata: NULL key or value pointer");
  *value = NULL;
  st_file f;
  ZT_TRY(st_open(path, &f));
  const zt__json *v = zt__json_get(f.meta, key);
  zt_status s = ZT_OK;
  if (v && !(*value = strdup(v->str))) s = ZT_ERR(ZT_STATUS_OOM, "'%s': out of memory", path);
  st_close(&f);
  return s;
}

zt_status zt_safetensors_names(const char *path, int *n, char ***names) {
  if (!n || !names) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_safetensors_names: NULL output");
  *n = 0;
  *names = NULL;
  st_file f;
  ZT_TRY(st_open(path, &f));
  size_t bytes = sizeof(char *) * ((size_t)f.n + 1);
  for (int i = 0; i < f.n; i++) bytes += strlen(f.e[i].name) + 1;
  char **arr = malloc(bytes);
  if (!arr) {
    st_close(&f);
    return ZT_ERR(ZT_STATUS_OOM, "'%s': out of memory", path);
  }
  char *p = (char *)(arr + f.n + 1);
  for (int i = 0; i < f.n; i++) { /* header order */
    size_t l = strlen(f.e[i].name) + 1;
    memcpy(p, f.e[i].name, l);
    arr[i] = p;
    p += l;
  }
  arr[f.n] = NULL;
  *n = f.n;
  *names = arr;
  st_close(&f);
  return ZT_OK;
}

zt_status zt__safetensors_list(const char *path, int *n, zt__st_info **out) {
  if (!n || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt__safetensors_list: NULL output");
  *n = 0;
  *out = NULL;
  st_file f;
  ZT_TRY(st_open(path, &f));
  size_t bytes = sizeof(zt__st_info) * ((size_t)f.n + 1);
  for (int i = 0; i < f.n; i++) bytes += strlen(f.e[i].name) + 1;
  zt__st_info *info = malloc(bytes);
  if (!info) {
    st_close(&f);
    return ZT_ERR(ZT_STATUS_OOM, "'%s': out of memory", path);
  }
  char *p = (char *)(info + f.n + 1);
  for (int i = 0; i < f.n; i++) { /* by_name: sorted by name */
    const st_entry *e = &f.e[f.by_name[i]];
    size_t l = strlen(e->name) + 1;
    memcpy(p, e->name, l);
    zt__st_info *x = &info[i];
    x->name = p;
    x->dtype = st_dtypes[e->dt].name;
    x->ndim = e->ndim;
    x->numel = 1;
    for (int d = 0; d < e->ndim; d++) {
      x->shape[d] = e->shape[d];
      x->numel *= e->shape[d]; /* no overflow: checked by parse_entry */
    }
    p += l;
  }
  *n = f.n;
  *out = info;
  st_close(&f);
  return ZT_OK;
}

const zt__st_info *zt__st_find(const zt__st_info *info, int n, const char *name) {
  int lo = 0, hi = n - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2, c = strcmp(name, info[mid].name);
    if (!c) return &info[mid];
    if (c < 0) hi = mid - 1;
    else lo = mid + 1;
  }
  return NULL;
}

/* ------------------------------------------------------------------ writing */

/* One tensor's bytes appended to f, from host memory: the tensor's own when it is contiguous
 * host memory; an evicted storage's read into the stage (never restored); else a contiguous
 * cpu copy, freed at once (a strided view, or a device the host cannot address). */
static zt_status write_tensor(zt__atomic_file *f, zt__bounce *stage, zt_tensor *t) {
  size_t nb = zt_tensor_nbytes(t);
  if (nb == 0) return ZT_OK;
  zt_tensor *view = NULL, *clone = NULL;
  const zt_tensor *src = t;
  zt_status s = ZT_OK;
  if (zt_storage_is_evicted(t->storage)) {
    s = zt__bounce_view(stage, t, true, &view);
    src = view;
  }
  bool host = !s && zt__tensor_host_ptr(src) != NULL;
  if (!s && (!zt_tensor_is_contiguous(src) || !host)) {
    s = host ? zt_tensor_clone_data(src, ZT_MEM_TAG_TEMP, &clone)
             : zt__tensor_to_device(src, ZT_CPU, ZT_MEM_TAG_TEMP, &clone);
    src = clone;
  }
  void *d = NULL; /* host bytes: src is host memory here (above) */
  if (!s) s = zt_tensor_data(src, &d);
  if (!s) s = zt__atomic_write(f, d, nb);
  zt_tensor_free(clone);
  zt_tensor_free(view);
  return s;
}

zt_status zt_safetensors_save(const char *path, int n, const char *const *names, zt_tensor *const *tensors,
                              int n_meta, const char *const *meta_keys, const char *const *meta_values) {
  const char *p = path ? path : "";
  if (!path || !*path) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_safetensors_save: the path is empty");
  if (n < 0 || (n > 0 && (!names || !tensors)) || n_meta < 0 || (n_meta > 0 && (!meta_keys || !meta_values)))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_safetensors_save('%s'): bad name/tensor/metadata arrays", p);
  for (int i = 0; i < n; i++) {
    if (!names[i] || !*names[i] || !tensors[i])
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_safetensors_save('%s'): tensor %d has a NULL/empty name or is NULL", p,
                    i);
    if (!strcmp(names[i], "__metadata__"))
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_safetensors_save('%s'): '__metadata__' is reserved, not a tensor name",
                    p);
    for (int k = 0; k < i; k++)
      if (!strcmp(names[k], names[i]))
        return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_safetensors_save('%s'): tensor name '%s' is given twice", p, names[i]);
    if (!st_name_of(tensors[i]->dtype))
      return ZT_ERR(ZT_STATUS_DTYPE, "zt_safetensors_save('%s'): tensor '%s' has dtype %s, which cannot be saved", p,
                    names[i], zt_dtype_name(tensors[i]->dtype));
  }
  for (int i = 0; i < n_meta; i++) {
    if (!meta_keys[i] || !meta_values[i])
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_safetensors_save('%s'): metadata pair %d has a NULL key or value", p, i);
    for (int k = 0; k < i; k++)
      if (!strcmp(meta_keys[k], meta_keys[i]))
        return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_safetensors_save('%s'): metadata key '%s' is given twice", p,
                      meta_keys[i]);
  }
  zt_status s = ZT_OK;
  zt__buf h = {0};
  /* Tensors are written in the given order, back to back (HF's writer orders by dtype
   * and name; any order with consistent offsets is valid). */
  zt__buf_put(&h, "{", 1);
  if (n_meta > 0) {
    zt__buf_put(&h, "\"__metadata__\":{", 16);
    for (int i = 0; i < n_meta; i++) {
      if (i) zt__buf_put(&h, ",", 1);
      zt__buf_json_string(&h, meta_keys[i]);
      zt__buf_put(&h, ":", 1);
      zt__buf_json_string(&h, meta_values[i]);
    }
    zt__buf_put(&h, "}", 1);
  }
  uint64_t off = 0;
  for (int i = 0; i < n; i++) {
    zt_tensor *t = tensors[i];
    size_t nb = zt_tensor_nbytes(t);
    if (i || n_meta > 0) zt__buf_put(&h, ",", 1);
    zt__buf_json_string(&h, names[i]);
    zt__buf_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", st_name_of(t->dtype));
    for (int d = 0; d < t->ndim; d++) zt__buf_printf(&h, "%s%lld", d ? "," : "", (long long)t->shape[d]);
    zt__buf_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off, (unsigned long long)(off + nb));
    off += nb;
  }
  zt__buf_put(&h, "}", 1);
  while (h.len % 8) zt__buf_put(&h, " ", 1); /* the data starts 8-byte aligned */
  if (h.oom) {
    zt__buf_free(&h);
    return ZT_ERR(ZT_STATUS_OOM, "zt_safetensors_save('%s'): out of memory for the header", p);
  }
  /* The header is all shapes: it goes first, then each tensor's bytes in turn, so at most one
   * tensor's copy (an evicted one's, in the stage) is in memory at a time. */
  unsigned char size_le[8];
  for (int i = 0; i < 8; i++) size_le[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
  zt__bounce stage = {0};
  zt__atomic_file af = {.fd = -1};
  s = zt__bounce_init(&stage, n, tensors);
  if (!s) s = zt__atomic_open(path, &af);
  if (!s) s = zt__atomic_write(&af, size_le, 8);
  if (!s) s = zt__atomic_write(&af, h.data, h.len);
  for (int i = 0; i < n && !s; i++)
    if ((s = write_tensor(&af, &stage, tensors[i])))
      zt__error_prefix(s, "saving tensor '%s' to '%s'", names[i], p);
  if (s) zt__atomic_abort(&af);
  else s = zt__atomic_commit(&af);
  zt__bounce_free(&stage);
  zt__buf_free(&h);
  return s;
}
