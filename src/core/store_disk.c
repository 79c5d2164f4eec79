/* The disk store: one unlinked spill file per store, written and read with pwrite/pread at
 * extents of the file (store_extent.c). Writes are synchronous: the bytes are on their way
 * when put returns, so the caller may free its copy at once. Held bytes are accounted on
 * the disk device under the item's tag. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/status_internal.h"
#include "store_internal.h"

static const zt_device disk_dev = {ZT_DEVICE_DISK, 0};

static zt_status write_full(const zt__store_spill *sp, const void *buf, size_t n, int64_t off) {
  const char *p = buf;
  while (n > 0) {
    ssize_t k = pwrite(sp->fd, p, n, (off_t)off);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0)
      return ZT_ERR(ZT_STATUS_IO,
                    "disk store: writing %zu bytes at offset %lld of the spill file in '%s' failed: %s; free disk "
                    "space there or give the store another directory",
                    n, (long long)off, sp->dir, k < 0 ? strerror(errno) : "nothing written");
    p += k, n -= (size_t)k, off += k;
  }
  return ZT_OK;
}

static zt_status read_full(const zt__store_spill *sp, void *buf, size_t n, int64_t off) {
  char *p = buf;
  while (n > 0) {
    ssize_t k = pread(sp->fd, p, n, (off_t)off);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0)
      return ZT_ERR(ZT_STATUS_IO,
                    "disk store: reading %zu bytes at offset %lld of the spill file in '%s' failed: %s; the disk "
                    "or file system there may be failing",
                    n, (long long)off, sp->dir, k < 0 ? strerror(errno) : "unexpected end of file");
    p += k, n -= (size_t)k, off += k;
  }
  return ZT_OK;
}

static zt_status disk_put(void *ctx, const void *src, zt_store_item *it) {
  zt__store_spill *sp = ctx;
  it->held = it->nbytes;
  pthread_mutex_lock(&sp->mu);
  it->off = zt__store_extent_alloc(sp, (int64_t)it->held);
  sp->live++; /* now: a drop of another item cannot empty the file under this write */
  pthread_mutex_unlock(&sp->mu);
  zt_status s = write_full(sp, src, it->held, it->off);
  if (s) {
    pthread_mutex_lock(&sp->mu);
    zt__store_extent_free(sp, it->off, (int64_t)it->held);
    sp->live--;
    pthread_mutex_unlock(&sp->mu);
    return s;
  }
  zt_mem_account(disk_dev, it->tag, (int64_t)it->held);
  return ZT_OK;
}

static zt_status disk_get(void *ctx, const zt_store_item *it, void *dst) {
  return read_full(ctx, dst, it->held, it->off);
}

static void disk_drop(void *ctx, const zt_store_item *it) {
  zt__store_spill *sp = ctx;
  zt_mem_account(disk_dev, it->tag, -(int64_t)it->held);
  pthread_mutex_lock(&sp->mu);
  zt__store_extent_free(sp, it->off, (int64_t)it->held);
  if (--sp->live == 0) { /* nothing held: give the disk space back */
    sp->n_free = 0;
    sp->end = 0;
    if (ftruncate(sp->fd, 0) != 0) { /* only the space stays taken; later writes overwrite it */
    }
  }
  pthread_mutex_unlock(&sp->mu);
}

static void spill_free(void *ctx) {
  zt__store_spill *sp = ctx;
  if (!sp) return;
  if (sp->fd >= 0) close(sp->fd);
  pthread_mutex_destroy(&sp->mu);
  free(sp->dir);
  free(sp->free_ext);
  free(sp);
}

static const zt_store_ops disk_ops = {"disk", disk_put, disk_get, disk_drop, spill_free};

/* A new spill file dir/prefix_XXXXXX, unlinked at once. */
static zt_status spill_open(const char *dir, const char *prefix, zt__store_spill **out) {
  zt__store_spill *sp = calloc(1, sizeof *sp);
  size_t n = strlen(dir) + strlen(prefix) + sizeof "/_XXXXXX";
  char *path = malloc(n);
  if (sp) {
    sp->fd = -1;
    pthread_mutex_init(&sp->mu, NULL);
    sp->dir = strdup(dir);
  }
  if (!sp || !sp->dir || !path) {
    free(path);
    spill_free(sp);
    return ZT_ERR(ZT_STATUS_OOM, "zt_store_disk_new: out of host memory");
  }
  snprintf(path, n, "%s/%s_XXXXXX", dir, prefix);
  sp->fd = mkostemp(path, O_CLOEXEC);
  zt_status s = ZT_OK;
  if (sp->fd < 0)
    s = ZT_ERR(ZT_STATUS_IO,
               "zt_store_disk_new: cannot create a spill file in directory '%s': %s; pass a writable directory "
               "(or set TMPDIR)",
               dir, strerror(errno));
  /* unlinked at once: the bytes live while fd is open, and nothing is left after a crash */
  else if (unlink(path) != 0)
    s = ZT_ERR(ZT_STATUS_IO, "zt_store_disk_new: cannot unlink the spill file '%s' in directory '%s': %s", path,
               dir, strerror(errno));
  free(path);
  if (s) {
    spill_free(sp);
    return s;
  }
  *out = sp;
  return ZT_OK;
}

zt_status zt_store_disk_new(const char *dir, const char *prefix, zt_store **out) {
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_store_disk_new: out is NULL");
  *out = NULL;
  const char *tmp = getenv("TMPDIR");
  zt__store_spill *sp = NULL;
  ZT_TRY(spill_open(dir ? dir : tmp && *tmp ? tmp : "/tmp", prefix ? prefix : "zt_store", &sp));
  return zt_store_new(&disk_ops, sp, disk_dev, out);
}
