/* Activation offload: the storage tiers (host memory, bf16-compressed host memory, disk
 * spill file) and the loads that bring an entry's bytes back into a storage. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/status_internal.h"
#include "offload_internal.h"

static const zt_device disk_dev = {ZT_DEVICE_DISK, 0};

/* ---------------------------------------------------------------- memory tiers */
/* Round to nearest even, NaN kept quiet: the rule of zt_f32_to_bf16, inlined for speed. */
static inline uint16_t bf16_of(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float f32_of_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* src (n elements of f32 or f64) = bf16 into dst. f64 rounds to f32 first. Runs on the
 * calling thread (pack), so it may use the OpenMP pool. */
static void bf16_compress(const void *src, zt_dtype dt, uint16_t *dst, int64_t n) {
  if (dt == ZT_DTYPE_F32) {
    const float *s = src;
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
    for (int64_t i = 0; i < n; i++) dst[i] = bf16_of(s[i]);
  } else {
    const double *s = src;
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
    for (int64_t i = 0; i < n; i++) dst[i] = bf16_of((float)s[i]);
  }
}

/* Also runs on the helper thread: no OpenMP here (it would start a second pool). */
static void bf16_expand(const uint16_t *src, zt_dtype dt, void *dst, int64_t n) {
  if (dt == ZT_DTYPE_F32) {
    float *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = f32_of_bf16(src[i]);
  } else {
    double *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = f32_of_bf16(src[i]);
  }
}

/* Host memory, accounted as cpu ACTIVATION so the tier shows in the memory table. */
static zt_status host_put(void *ctx, const void *src, zt_dtype dt, int64_t n, zt__offload_tier_loc *loc) {
  (void)ctx;
  loc->bytes = (size_t)n * zt_dtype_size(dt);
  ZT_TRY(zt_mem_alloc(loc->bytes, ZT_CPU, ZT_MEM_TAG_ACTIVATION, &loc->host));
  memcpy(loc->host, src, loc->bytes);
  return ZT_OK;
}

/* f32 and f64 become bf16; bf16 and f16 are no wider, so they are copied as they are. */
static zt_status bf16_put(void *ctx, const void *src, zt_dtype dt, int64_t n, zt__offload_tier_loc *loc) {
  if (dt != ZT_DTYPE_F32 && dt != ZT_DTYPE_F64) return host_put(ctx, src, dt, n, loc);
  loc->compressed = true;
  loc->bytes = (size_t)n * 2;
  ZT_TRY(zt_mem_alloc(loc->bytes, ZT_CPU, ZT_MEM_TAG_ACTIVATION, &loc->host));
  bf16_compress(src, dt, loc->host, n);
  return ZT_OK;
}

static zt_status mem_get(void *ctx, const zt__offload_tier_loc *loc, zt_dtype dt, int64_t n, void *dst) {
  (void)ctx;
  if (loc->compressed) bf16_expand(loc->host, dt, dst, n);
  else memcpy(dst, loc->host, loc->bytes);
  return ZT_OK;
}

static void mem_drop(void *ctx, const zt__offload_tier_loc *loc) {
  (void)ctx;
  zt_mem_free(loc->host, loc->bytes, ZT_CPU, ZT_MEM_TAG_ACTIVATION);
}

const zt__offload_tier_ops zt__offload_host_tier = {host_put, mem_get, mem_drop, NULL};
const zt__offload_tier_ops zt__offload_bf16_tier = {bf16_put, mem_get, mem_drop, NULL};
/* ---------------------------------------------------------------- disk tier */
static zt_status write_full(const zt__offload_spill *sp, const void *buf, size_t n, int64_t off) {
  const char *p = buf;
  while (n > 0) {
    ssize_t k = pwrite(sp->fd, p, n, (off_t)off);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0)
      return ZT_ERR(ZT_STATUS_IO,
                    "zt_offload: writing %zu bytes at offset %lld of the spill file in '%s' failed: %s; free disk "
                    "space there or pass another directory in zt_offload_options.dir",
                    n, (long long)off, sp->dir, k < 0 ? strerror(errno) : "nothing written");
    p += k, n -= (size_t)k, off += k;
  }
  return ZT_OK;
}

static zt_status read_full(const zt__offload_spill *sp, void *buf, size_t n, int64_t off) {
  char *p = buf;
  while (n > 0) {
    ssize_t k = pread(sp->fd, p, n, (off_t)off);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0)
      return ZT_ERR(ZT_STATUS_IO,
                    "zt_offload: reading %zu bytes at offset %lld of the spill file in '%s' failed: %s; the disk "
                    "or file system there may be failing",
                    n, (long long)off, sp->dir, k < 0 ? strerror(errno) : "unexpected end of file");
    p += k, n -= (size_t)k, off += k;
  }
  return ZT_OK;
}
/* Writes are synchronous: simple, and the bytes are on their way before pack returns, so
 * forward may free the activation at once. */
static zt_status disk_put(void *ctx, const void *src, zt_dtype dt, int64_t n, zt__offload_tier_loc *loc) {
  zt__offload_spill *sp = ctx;
  loc->bytes = (size_t)n * zt_dtype_size(dt);
  loc->off = zt__offload_extent_alloc(sp, (int64_t)loc->bytes);
  zt_status s = write_full(sp, src, loc->bytes, loc->off);
  if (s) {
    zt__offload_extent_free(sp, loc->off, (int64_t)loc->bytes);
    return s;
  }
  sp->live++;
  zt_mem_account(disk_dev, ZT_MEM_TAG_ACTIVATION, (int64_t)loc->bytes);
  return ZT_OK;
}

static zt_status disk_get(void *ctx, const zt__offload_tier_loc *loc, zt_dtype dt, int64_t n, void *dst) {
  (void)dt, (void)n;
  return read_full(ctx, dst, loc->bytes, loc->off);
}

static void disk_drop(void *ctx, const zt__offload_tier_loc *loc) {
  zt__offload_spill *sp = ctx;
  zt__offload_extent_free(sp, loc->off, (int64_t)loc->bytes);
  zt_mem_account(disk_dev, ZT_MEM_TAG_ACTIVATION, -(int64_t)loc->bytes);
  if (--sp->live == 0) { /* nothing live: give the disk space back between steps */
    sp->n_free = 0;
    sp->end = 0;
    if (ftruncate(sp->fd, 0) != 0) { /* only the space stays taken; later writes overwrite it */
    }
  }
}

static void spill_free(void *ctx) {
  zt__offload_spill *sp = ctx;
  if (!sp) return;
  if (sp->fd >= 0) close(sp->fd);
  free(sp->dir);
  free(sp->free_ext);
  free(sp);
}

const zt__offload_tier_ops zt__offload_disk_tier = {disk_put, disk_get, disk_drop, spill_free};

zt_status zt__offload_spill_open(const char *dir, zt__offload_spill **out) {
  zt__offload_spill *sp = calloc(1, sizeof *sp);
  size_t n = strlen(dir) + sizeof "/zt_offload_XXXXXX";
  char *path = malloc(n);
  if (sp) sp->fd = -1;
  if (sp) sp->dir = strdup(dir);
  if (!sp || !sp->dir || !path) {
    free(path);
    spill_free(sp);
    return ZT_ERR(ZT_STATUS_OOM, "zt_offload_new: out of host memory");
  }
  snprintf(path, n, "%s/zt_offload_XXXXXX", dir);
  sp->fd = mkostemp(path, O_CLOEXEC);
  zt_status s = ZT_OK;
  if (sp->fd < 0)
    s = ZT_ERR(ZT_STATUS_IO,
               "zt_offload_new: cannot create a spill file in directory '%s': %s; pass a writable directory in "
               "zt_offload_options.dir (or set TMPDIR)",
               dir, strerror(errno));
  /* unlinked at once: the bytes live while fd is open, and nothing is left after a crash */
  else if (unlink(path) != 0)
    s = ZT_ERR(ZT_STATUS_IO, "zt_offload_new: cannot unlink the spill file '%s' in directory '%s': %s", path, dir,
               strerror(errno));
  free(path);
  if (s) {
    spill_free(sp);
    return s;
  }
  *out = sp;
  return ZT_OK;
}
/* ---------------------------------------------------------------- loads */
zt__offload_load_src zt__offload_src_of(const zt_offload *o, const zt__offload_entry *e) {
  return (zt__offload_load_src){o->tier, o->tier_ctx, e->loc, e->nbytes, e->n, e->dtype, e->device, e->tag};
}

/* A new storage (on the saved storage's device, with its tag) holding the entry's span.
 * Thread-safe: the allocator and the backends' byte moves are, and the tier bytes are not
 * dropped while this runs. */
zt_status zt__offload_load(const zt__offload_load_src *src, zt_storage **out) {
  zt_storage *s;
  ZT_TRY(zt_storage_new(src->nbytes, src->device, src->tag, &s));
  void *host = zt__storage_host_data(s), *stage = NULL;
  zt_status st = host ? ZT_OK : zt_mem_alloc(src->nbytes, ZT_CPU, ZT_MEM_TAG_TEMP, &stage);
  if (!st) st = src->tier->get(src->ctx, &src->loc, src->dtype, src->n, host ? host : stage);
  if (!st && stage) zt__dev_storage_write(s, 0, stage, src->nbytes);
  if (stage) zt_mem_free(stage, src->nbytes, ZT_CPU, ZT_MEM_TAG_TEMP);
  if (st) {
    zt_storage_release_ref(s);
    return st;
  }
  *out = s;
  return ZT_OK;
}
