/* The disk store: one unlinked spill file per store, opened with O_DIRECT where the file
 * system allows it (the page cache would count against a memory cgroup), written and read at
 * extents of the file (store_extent.c) by the I/O engine (store_io.c). Writes are
 * synchronous: the bytes are on disk (direct) or in the page cache when put returns, so the
 * caller may free its copy at once. Held bytes are accounted on the disk device under the
 * item's tag. */
#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/status_internal.h"
#include "store_internal.h"

static const zt_device disk_dev = {ZT_DEVICE_DISK, 0};

static zt_status disk_put(void *ctx, const void *src, zt_store_item *it) {
  zt__store_spill *sp = ctx;
  it->held = it->nbytes;
  pthread_mutex_lock(&sp->mu);
  it->off = zt__store_extent_alloc(sp, (int64_t)it->held);
  sp->live++; /* now: a drop of another item cannot empty the file under this write */
  pthread_mutex_unlock(&sp->mu);
  zt_status s = zt__io_write(sp->io, src, it->held, it->off);
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
  zt__store_spill *sp = ctx;
  return zt__io_read(sp->io, dst, it->held, it->off);
}

/* Ranges of an item's extent. Without direct I/O the file takes any offset; with it, I/O
 * starts at page boundaries (the extent is page-aligned and page-padded, so a whole page around
 * any byte of the item lies inside it), and a page the range shares with the rest of the item
 * goes through a host page: read (get), or read, patched and written back (put). */
static size_t range_align(const zt__store_spill *sp) { return sp->align == ZT__IO_ALIGN ? ZT__IO_ALIGN : 1; }

/* The page of the extent at page offset at, read into a TEMP host page (*page, freed by the
 * caller with page_free). */
static zt_status page_read(zt__store_spill *sp, const zt_store_item *it, size_t at, char **page) {
  ZT_TRY(zt_mem_alloc(ZT__IO_ALIGN, ZT_CPU, ZT_MEM_TAG_TEMP, (void **)page));
  zt_status s = zt__io_read(sp->io, *page, ZT__IO_ALIGN, it->off + (int64_t)at);
  if (s) {
    zt_mem_free(*page, ZT__IO_ALIGN, ZT_CPU, ZT_MEM_TAG_TEMP);
    *page = NULL;
  }
  return s;
}
static void page_free(char *page) {
  if (page) zt_mem_free(page, ZT__IO_ALIGN, ZT_CPU, ZT_MEM_TAG_TEMP);
}

static zt_status disk_get_range(void *ctx, const zt_store_item *it, size_t off, size_t n, void *dst) {
  zt__store_spill *sp = ctx;
  size_t A = range_align(sp), head = off % A;
  char *d = dst;
  if (head) { /* the first page, from its start */
    char *page;
    ZT_TRY(page_read(sp, it, off - head, &page));
    size_t k = A - head < n ? A - head : n;
    memcpy(d, page + head, k);
    page_free(page);
    off += k, d += k, n -= k;
  }
  /* page-aligned from here: the last partial page is read whole through a bounce buffer */
  return n ? zt__io_read(sp->io, d, n, it->off + (int64_t)off) : ZT_OK;
}

/* Bytes [off, off + n) within one page, read, patched and written back whole. */
static zt_status page_patch(zt__store_spill *sp, const zt_store_item *it, size_t off, size_t n, const char *src) {
  size_t at = off / ZT__IO_ALIGN * ZT__IO_ALIGN;
  char *page;
  ZT_TRY(page_read(sp, it, at, &page));
  memcpy(page + (off - at), src, n);
  zt_status s = zt__io_write(sp->io, page, ZT__IO_ALIGN, it->off + (int64_t)at);
  page_free(page);
  return s;
}

static zt_status disk_put_range(void *ctx, const zt_store_item *it, size_t off, size_t n, const void *src) {
  zt__store_spill *sp = ctx;
  const char *p = src;
  size_t A = range_align(sp);
  if (A == 1) return zt__io_write(sp->io, p, n, it->off + (int64_t)off);
  size_t head = off % A;
  if (head) { /* the first page's bytes before the range are kept */
    size_t k = A - head < n ? A - head : n;
    ZT_TRY(page_patch(sp, it, off, k, p));
    off += k, p += k, n -= k;
  }
  size_t body = n / A * A, tail = n - body;
  if (body) ZT_TRY(zt__io_write(sp->io, p, body, it->off + (int64_t)off));
  if (!tail) return ZT_OK;
  /* the last partial page: at the item's end the rest is padding (written as zeros, as a put
   * writes it); else the item's bytes after the range are kept */
  if (off + n == it->nbytes) return zt__io_write(sp->io, p + body, tail, it->off + (int64_t)(off + body));
  return page_patch(sp, it, off + body, tail, p + body);
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
  zt__io_free(sp->io); /* its threads use fd */
  if (sp->fd >= 0) close(sp->fd);
  pthread_mutex_destroy(&sp->mu);
  free(sp->dir);
  free(sp->free_ext);
  free(sp);
}

static void disk_io_stats(void *ctx, zt_store_io_stats *out) {
  zt__store_spill *sp = ctx;
  zt__io_stats_get(sp->io, out);
}

static const zt_store_ops disk_ops = {"disk", disk_put, disk_get, disk_drop, spill_free, disk_io_stats,
                                      disk_get_range, disk_put_range};

static atomic_bool g_refuse_direct; /* tests: play a file system without O_DIRECT */
void zt__store_disk_refuse_direct(bool on) { atomic_store(&g_refuse_direct, on); }

bool zt__store_disk_fault_at(zt_store *s, zt__io_fault kind, int64_t nth) {
  if (!s || s->ops != &disk_ops) return false;
  zt__io_fault_at(((zt__store_spill *)s->ctx)->io, kind, nth);
  return true;
}

/* A new spill file dir/prefix_XXXXXX, unlinked at once. */
static zt_status spill_open(const char *dir, const char *prefix, bool want_direct, int queue_depth, size_t chunk_bytes,
                            zt__store_spill **out) {
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
  /* O_DIRECT after the file exists (fcntl, not open): a file system that refuses it (EINVAL)
   * would otherwise fail the open after creating the file, and leave it behind */
  bool direct = false;
  if (!s && want_direct && !atomic_load(&g_refuse_direct)) {
    int fl = fcntl(sp->fd, F_GETFL);
    direct = fl >= 0 && fcntl(sp->fd, F_SETFL, fl | O_DIRECT) == 0;
    if (!direct && errno != EINVAL)
      s = ZT_ERR(ZT_STATUS_IO, "zt_store_disk_new: cannot turn on direct I/O for the spill file in '%s': %s", dir,
                 strerror(errno));
  }
  sp->align = direct ? ZT__IO_ALIGN : 64;
  if (!s) s = zt__io_new(sp->fd, direct, queue_depth, chunk_bytes, dir, &sp->io);
  if (s) {
    spill_free(sp);
    return s;
  }
  *out = sp;
  return ZT_OK;
}

/* The defaults, from bench/bench_disk.c on a virtio disk with ext4 (bench/results/
 * disk_virtio_ext4.jsonl): 4 requests of 4 MiB in flight read and write at the bandwidth of a
 * single-threaded 8 MiB O_DIRECT loop within that shared machine's noise; 1 MiB chunks and
 * QD 1 read slower, deeper queues gain nothing there and cost threads and bounce memory. */
#define DEFAULT_QUEUE_DEPTH ZT_STORE_DISK_QUEUE_DEPTH
#define DEFAULT_CHUNK ((size_t)ZT_STORE_DISK_CHUNK)
#define MAX_QUEUE_DEPTH 64
#define MIN_CHUNK ((size_t)64 << 10)
#define MAX_CHUNK ((size_t)256 << 20)

zt_status zt_store_disk_new_opts(const zt_store_disk_options *opts, zt_store **out) {
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_store_disk_new_opts: out is NULL");
  *out = NULL;
  zt_store_disk_options o = opts ? *opts : (zt_store_disk_options){0};
  if (o.direct != ZT_STORE_DIRECT_ON && o.direct != ZT_STORE_DIRECT_OFF)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_store_disk_new_opts: direct is %d: pass ZT_STORE_DIRECT_ON or _OFF",
                  (int)o.direct);
  if (o.queue_depth < 0 || o.queue_depth > MAX_QUEUE_DEPTH)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_store_disk_new_opts: queue_depth %d is out of range: pass 1..%d (0: %d)",
                  o.queue_depth, MAX_QUEUE_DEPTH, DEFAULT_QUEUE_DEPTH);
  if (o.chunk_bytes && (o.chunk_bytes % ZT__IO_ALIGN || o.chunk_bytes < MIN_CHUNK || o.chunk_bytes > MAX_CHUNK))
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_store_disk_new_opts: chunk_bytes %zu is not a multiple of %d in [%zu, %zu]: pass one (0: %zu)",
                  o.chunk_bytes, ZT__IO_ALIGN, MIN_CHUNK, MAX_CHUNK, DEFAULT_CHUNK);
  const char *tmp = getenv("TMPDIR");
  zt__store_spill *sp = NULL;
  ZT_TRY(spill_open(o.dir ? o.dir : tmp && *tmp ? tmp : "/tmp", o.prefix ? o.prefix : "zt_store",
                    o.direct == ZT_STORE_DIRECT_ON, o.queue_depth ? o.queue_depth : DEFAULT_QUEUE_DEPTH,
                    o.chunk_bytes ? o.chunk_bytes : DEFAULT_CHUNK, &sp));
  ZT_TRY(zt_store_new(&disk_ops, sp, disk_dev, out));
  (*out)->helper_put = true; /* a write behind runs on the helper, its chunks on the I/O threads */
  return ZT_OK;
}

zt_status zt_store_disk_new(const char *dir, const char *prefix, zt_store **out) {
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_store_disk_new: out is NULL");
  return zt_store_disk_new_opts(&(zt_store_disk_options){.dir = dir, .prefix = prefix}, out);
}
