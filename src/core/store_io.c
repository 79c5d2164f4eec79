/* The disk store's I/O engine: a small pool of threads doing pread/pwrite on one file. A read
 * or write (a job) is cut into chunks; the threads take chunks from the oldest job first, so
 * one large item keeps queue_depth requests in flight and several items share the threads.
 * Invariants: a job lives on its caller's stack and is finished (every chunk handed out and
 * none in flight) before its caller returns; only mu guards the queue and the counters; a
 * thread's bounce buffer is its own, 4096-aligned, and given back when the queue is empty.
 * A thread pool and not io_uring / Linux AIO: neither is installed everywhere we run, and
 * threads in blocking pread/pwrite reach the device's bandwidth (bench/bench_disk.c). */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/status_internal.h"
#include "store_internal.h"

enum { DIR_READ = 0, DIR_WRITE = 1 };
#define MSG_CAP 512

typedef struct io_job {
  int dir; /* DIR_READ / DIR_WRITE */
  char *buf;
  size_t n;
  int64_t off;
  size_t next;   /* bytes handed out to threads */
  int pending;   /* chunks handed out and not finished */
  bool failed;   /* a chunk failed: the rest are skipped, msg says why */
  zt_status code;
  char msg[MSG_CAP];
  struct io_job *link;
} io_job;

struct zt__io {
  int fd;
  bool direct;
  int qd; /* threads running */
  size_t chunk;
  char *dir;
  pthread_t *threads;
  pthread_mutex_t mu;
  pthread_cond_t work, done;
  bool stop;
  io_job *head, *tail; /* jobs with chunks not yet handed out */
  /* counters, guarded by mu */
  int in_flight[2];
  double busy_since[2], busy[2];
  int64_t bytes[2], requests[2], bounce_bytes;
  _Atomic int bounce_held; /* threads holding a bounce buffer (freed when they go idle) */
  _Atomic int64_t fault[ZT__IO_FAULT_COUNT]; /* countdowns: the request that takes it from 1 to 0 fails */
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static bool fault_fires(zt__io *io, zt__io_fault kind) {
  int64_t v = atomic_load(&io->fault[kind]);
  while (v > 0 && !atomic_compare_exchange_weak(&io->fault[kind], &v, v - 1)) {
  }
  return v == 1;
}

void zt__io_fault_at(zt__io *io, zt__io_fault kind, int64_t nth) {
  if (io && (int)kind >= 0 && kind < ZT__IO_FAULT_COUNT) atomic_store(&io->fault[kind], nth > 0 ? nth : 0);
}

/* ---------------------------------------------------------------- one request */
/* The whole range with pread/pwrite (short transfers continued). inject: act as if the first
 * call failed (write: ENOSPC) or hit the end of the file (read). */
static bool full_io(zt__io *io, int dir, char *msg, char *p, size_t n, int64_t off, bool inject) {
  while (n > 0) {
    ssize_t k;
    if (inject) {
      inject = false;
      k = dir == DIR_WRITE ? -1 : 0;
      errno = ENOSPC;
    } else {
      k = dir == DIR_WRITE ? pwrite(io->fd, p, n, (off_t)off) : pread(io->fd, p, n, (off_t)off);
    }
    if (k < 0 && errno == EINTR) continue;
    if (k > 0) {
      p += k, n -= (size_t)k, off += k;
      continue;
    }
    const char *why = k < 0 ? strerror(errno) : dir == DIR_WRITE ? "nothing written" : "unexpected end of file";
    if (dir == DIR_WRITE)
      snprintf(msg, MSG_CAP,
               "disk store: writing %zu bytes at offset %lld of the spill file in '%s' failed: %s; free disk space "
               "there or give the store another directory",
               n, (long long)off, io->dir, why);
    else
      snprintf(msg, MSG_CAP,
               "disk store: reading %zu bytes at offset %lld of the spill file in '%s' failed: %s; the disk or file "
               "system there may be failing (the item is kept: a later get may try again)",
               n, (long long)off, io->dir, why);
    return false;
  }
  return true;
}

/* One chunk: the caller's buffer directly where O_DIRECT allows it (aligned address, whole
 * pages), the rest (an unaligned buffer, the last partial page) through bounce, padded with
 * zeros to a whole page on disk. Returns the bytes that went through bounce, or -1. */
static int64_t do_chunk(zt__io *io, int dir, char *msg, char *buf, size_t len, int64_t off, char *bounce) {
  bool inject = fault_fires(io, dir == DIR_WRITE ? ZT__IO_FAULT_WRITE_ENOSPC : ZT__IO_FAULT_READ_SHORT);
  if (!io->direct) return full_io(io, dir, msg, buf, len, off, inject) ? 0 : -1;
  size_t direct = (uintptr_t)buf % ZT__IO_ALIGN == 0 ? len / ZT__IO_ALIGN * ZT__IO_ALIGN : 0;
  if (direct && !full_io(io, dir, msg, buf, direct, off, inject)) return -1;
  if (direct) inject = false;
  size_t rest = len - direct;
  if (!rest) return 0;
  size_t padded = (rest + ZT__IO_ALIGN - 1) / ZT__IO_ALIGN * ZT__IO_ALIGN;
  if (dir == DIR_WRITE) {
    memcpy(bounce, buf + direct, rest);
    memset(bounce + rest, 0, padded - rest);
    if (!full_io(io, dir, msg, bounce, padded, off + (int64_t)direct, inject)) return -1;
  } else {
    if (!full_io(io, dir, msg, bounce, padded, off + (int64_t)direct, inject)) return -1;
    memcpy(buf + direct, bounce, rest);
  }
  return (int64_t)rest;
}

/* A thread's bounce buffer: chunk bytes (the most one request moves), 4096-aligned whatever
 * the cpu allocator gives (it may have been replaced), accounted as TEMP. */
typedef struct bounce {
  void *raw;
  char *p;
} bounce;

static size_t bounce_size(const zt__io *io) { return io->chunk + ZT__IO_ALIGN; }

static bool bounce_get(zt__io *io, bounce *b) {
  if (b->p) return true;
  if (zt_mem_alloc(bounce_size(io), ZT_CPU, ZT_MEM_TAG_TEMP, &b->raw)) return false;
  atomic_fetch_add(&io->bounce_held, 1);
  b->p = (char *)(((uintptr_t)b->raw + ZT__IO_ALIGN - 1) / ZT__IO_ALIGN * ZT__IO_ALIGN);
  return true;
}

static void bounce_put(zt__io *io, bounce *b) {
  if (b->raw) {
    zt_mem_free(b->raw, bounce_size(io), ZT_CPU, ZT_MEM_TAG_TEMP);
    atomic_fetch_sub(&io->bounce_held, 1);
  }
  *b = (bounce){0};
}

/* Whether a chunk [buf, buf+len) needs the bounce buffer. */
static bool needs_bounce(const zt__io *io, const char *buf, size_t len) {
  return io->direct && ((uintptr_t)buf % ZT__IO_ALIGN || len % ZT__IO_ALIGN);
}

/* Under mu: hand out job's next chunk; the job leaves the queue with its last one. */
static void take_chunk(zt__io *io, io_job *job, size_t *at, size_t *len) {
  *at = job->next;
  *len = job->n - job->next < io->chunk ? job->n - job->next : io->chunk;
  job->next += *len;
  job->pending++;
  if (job->next == job->n && io->head == job) {
    io->head = job->link;
    if (!io->head) io->tail = NULL;
  }
}

/* Runs one chunk taken under mu; returns with mu held again and the job's counters updated. */
static void run_chunk(zt__io *io, io_job *job, size_t at, size_t len, bounce *b) {
  bool skip = job->failed; /* an earlier chunk failed: the job fails anyway */
  int d = job->dir;
  if (!skip && io->in_flight[d]++ == 0) io->busy_since[d] = now_s();
  pthread_mutex_unlock(&io->mu);
  int64_t bounced = 0;
  zt_status code = ZT_STATUS_IO;
  char msg[MSG_CAP]; /* this chunk's failure, copied into the job if it is the first */
  if (!skip) {
    char *buf = job->buf + at;
    if (needs_bounce(io, buf, len) && !bounce_get(io, b)) {
      bounced = -1;
      code = ZT_STATUS_OOM;
      snprintf(msg, MSG_CAP,
               "disk store: out of host memory for a %zu-byte bounce buffer (an unaligned buffer or an item's last "
               "page); pass 4096-aligned buffers or a smaller chunk_bytes",
               bounce_size(io));
    } else {
      bounced = do_chunk(io, d, msg, buf, len, job->off + (int64_t)at, b->p);
    }
  }
  pthread_mutex_lock(&io->mu);
  if (!skip) {
    if (--io->in_flight[d] == 0) io->busy[d] += now_s() - io->busy_since[d];
    io->requests[d]++;
    if (bounced >= 0) {
      io->bytes[d] += (int64_t)len;
      io->bounce_bytes += bounced;
    } else if (!job->failed) {
      job->failed = true;
      job->code = code;
      memcpy(job->msg, msg, MSG_CAP);
    }
  }
  job->pending--;
  if (job->next == job->n && job->pending == 0) pthread_cond_broadcast(&io->done);
}

static void *worker_main(void *arg) {
  zt__io *io = arg;
  bounce b = {0};
  pthread_mutex_lock(&io->mu);
  for (;;) {
    if (!io->stop && !io->head && b.raw) { /* idle: the bounce buffer's memory goes back */
      pthread_mutex_unlock(&io->mu);
      bounce_put(io, &b);
      pthread_mutex_lock(&io->mu);
      pthread_cond_broadcast(&io->done); /* a caller may wait for the bounce buffers to go back */
      continue;
    }
    if (io->stop) break;
    if (!io->head) {
      pthread_cond_wait(&io->work, &io->mu);
      continue;
    }
    io_job *job = io->head;
    size_t at, len;
    take_chunk(io, job, &at, &len);
    run_chunk(io, job, at, len, &b);
  }
  pthread_mutex_unlock(&io->mu);
  bounce_put(io, &b);
  return NULL;
}

/* ---------------------------------------------------------------- jobs */
static zt_status run_job(zt__io *io, int dir, void *buf, size_t n, int64_t off) {
  if (!n) return ZT_OK;
  ZT_ASSERT(!io->direct || off % ZT__IO_ALIGN == 0);
  io_job job = {.dir = dir, .buf = buf, .n = n, .off = off};
  pthread_mutex_lock(&io->mu);
  if (io->qd > 0) {
    if (io->tail) io->tail->link = &job;
    else io->head = &job;
    io->tail = &job;
    /* one chunk: one thread is enough; more: wake them all */
    if (n > io->chunk) pthread_cond_broadcast(&io->work);
    else pthread_cond_signal(&io->work);
    /* and, when nothing else is queued, until the threads gave their bounce buffers back: the
     * caller then sees the TEMP bytes of its I/O gone (memory tests compare before and after) */
    while (job.next < job.n || job.pending > 0 || (!io->head && atomic_load(&io->bounce_held) > 0))
      pthread_cond_wait(&io->done, &io->mu);
  } else { /* no thread could start: the caller does its own chunks, one at a time */
    bounce b = {0};
    while (job.next < job.n) {
      size_t at, len;
      take_chunk(io, &job, &at, &len);
      run_chunk(io, &job, at, len, &b);
    }
    pthread_mutex_unlock(&io->mu);
    bounce_put(io, &b);
    pthread_mutex_lock(&io->mu);
  }
  pthread_mutex_unlock(&io->mu);
  return job.failed ? ZT_ERR(job.code, "%s", job.msg) : ZT_OK;
}

zt_status zt__io_write(zt__io *io, const void *buf, size_t n, int64_t off) {
  return run_job(io, DIR_WRITE, (void *)buf, n, off); /* a write only reads buf */
}

zt_status zt__io_read(zt__io *io, void *buf, size_t n, int64_t off) { return run_job(io, DIR_READ, buf, n, off); }

void zt__io_stats_get(zt__io *io, zt_store_io_stats *out) {
  *out = (zt_store_io_stats){0};
  if (!io) return;
  pthread_mutex_lock(&io->mu);
  double t = now_s();
  out->read_bytes = io->bytes[DIR_READ];
  out->write_bytes = io->bytes[DIR_WRITE];
  /* time of requests still in flight counts up to now */
  out->read_seconds = io->busy[DIR_READ] + (io->in_flight[DIR_READ] ? t - io->busy_since[DIR_READ] : 0);
  out->write_seconds = io->busy[DIR_WRITE] + (io->in_flight[DIR_WRITE] ? t - io->busy_since[DIR_WRITE] : 0);
  out->read_requests = io->requests[DIR_READ];
  out->write_requests = io->requests[DIR_WRITE];
  out->bounce_bytes = io->bounce_bytes;
  out->queue_depth = io->qd > 0 ? io->qd : 1;
  out->chunk_bytes = (int64_t)io->chunk;
  out->direct = io->direct;
  pthread_mutex_unlock(&io->mu);
}

/* ---------------------------------------------------------------- the pool */
zt_status zt__io_new(int fd, bool direct, int queue_depth, size_t chunk_bytes, const char *dir, zt__io **out) {
  ZT_ASSERT(queue_depth > 0 && chunk_bytes > 0 && chunk_bytes % ZT__IO_ALIGN == 0);
  zt__io *io = calloc(1, sizeof *io);
  if (io) {
    io->threads = calloc((size_t)queue_depth, sizeof *io->threads);
    io->dir = strdup(dir);
  }
  if (!io || !io->threads || !io->dir) {
    if (io) free(io->threads), free(io->dir);
    free(io);
    return ZT_ERR(ZT_STATUS_OOM, "disk store: out of host memory for its I/O engine");
  }
  io->fd = fd;
  io->direct = direct;
  io->chunk = chunk_bytes;
  pthread_mutex_init(&io->mu, NULL);
  pthread_cond_init(&io->work, NULL);
  pthread_cond_init(&io->done, NULL);
  /* fewer threads than asked (the system refuses some) is a shallower queue, never wrong */
  for (int i = 0; i < queue_depth; i++) {
    if (pthread_create(&io->threads[i], NULL, worker_main, io) != 0) break;
    io->qd++;
  }
  *out = io;
  return ZT_OK;
}

void zt__io_free(zt__io *io) {
  if (!io) return;
  pthread_mutex_lock(&io->mu);
  ZT_ASSERT(!io->head); /* every job finishes before its caller returns */
  io->stop = true;
  pthread_cond_broadcast(&io->work);
  pthread_mutex_unlock(&io->mu);
  for (int i = 0; i < io->qd; i++) pthread_join(io->threads[i], NULL);
  pthread_cond_destroy(&io->work);
  pthread_cond_destroy(&io->done);
  pthread_mutex_destroy(&io->mu);
  free(io->threads);
  free(io->dir);
  free(io);
}
