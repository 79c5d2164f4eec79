/* Stores, internal: the store object (store.c: the generic put/get/drop with device
 * staging, the helper thread and its requests) and the disk implementation's spill file
 * with its extent allocator (store_disk.c, store_extent.c). The memory implementations are
 * store_memory.c.
 * Included by: src/core and src/strategies (the stores' users that need their internals) and
 * tests. */
#ifndef ZT_CORE_STORE_INTERNAL_H
#define ZT_CORE_STORE_INTERNAL_H

#include <pthread.h>

#include "zt/store.h"

typedef enum zt__store_request_state {
  ZT__STORE_REQ_QUEUED = 0, /* waiting for the helper */
  ZT__STORE_REQ_RUNNING,    /* the helper (or a wait) is doing the get */
  ZT__STORE_REQ_DONE        /* finished by the helper: status and msg say how */
} zt__store_request_state;

typedef enum zt__store_request_kind {
  ZT__STORE_REQ_GET = 0, /* zt_store_prefetch: item -> dst */
  ZT__STORE_REQ_PUT      /* zt__store_put_async: src -> a new item (a write behind) */
} zt__store_request_kind;

struct zt_store_request {
  zt_store *store;
  zt__store_request_kind kind;
  zt_store_item item; /* put: nbytes, dtype, tag set; the rest filled by the put */
  zt_device dev;
  void *dst;
  void *src;          /* put: host bytes owned by the request (zt_mem_free'd on dev under item.tag) */
  /* guarded by the store's mu */
  zt__store_request_state state;
  bool reclaim;       /* put: the owner wants src back, do not free it when done */
  bool src_freed;     /* put: done, and src freed by whoever finished it */
  zt_status status;
  char *msg; /* the helper's message on failure (NULL: out of host memory for it) */
  struct zt_store_request *next;
};

struct zt_store {
  const zt_store_ops *ops;
  void *ctx;
  zt_device dev;
  pthread_mutex_t mu;
  pthread_cond_t work, done;
  pthread_t thread;
  bool thread_on, stop;
  bool paused;                       /* tests: the helper starts no request (zt__store_pause) */
  zt_store_request *q_head, *q_tail; /* FIFO of queued requests */
  int in_flight;                     /* requests made and not yet waited or cancelled */
  zt_store_stats st;                 /* guarded by mu */
  /* write behind, guarded by mu: bytes held count in st.write_bytes_in_flight */
  bool helper_put;   /* set once by the maker: ops->put may run on the helper (no OpenMP in it) */
  size_t w_cap;
  int w_active;      /* puts queued or running */
  zt_status w_err;   /* the first failed write not yet reported, and its message */
  char *w_msg;
};

/* ---------------------------------------------------------------- write behind (store.c) */
/* Start an asynchronous put of nbytes host bytes at src (dev's memory, host-accessible), which
 * the request owns from now on: freed (zt_mem_free on dev under tag) when the write is done,
 * unless taken back. Waits while the write cap would be passed. *out NULL with ZT_OK: this
 * store cannot write behind (not helper_put, dev not host-accessible, no helper thread): the
 * caller keeps src and puts synchronously. A failure of an earlier write is reported here
 * (and src stays the caller's). where names the caller in messages. */
zt_status zt__store_put_async(zt_store *s, zt_device dev, void *src, size_t nbytes, zt_dtype dtype, zt_mem_tag tag,
                              const char *where, zt_store_request **out);
/* Whether puts into s may be written behind (helper_put, and its helper did not fail to start):
 * a caller that must copy its bytes first asks before copying. */
bool zt__store_can_write_behind(zt_store *s);
/* Wait until nbytes more written behind would stay within the write cap (as zt__store_put_async
 * waits), first reporting an earlier failed write. A caller that allocates the RAM it hands to
 * zt__store_put_async calls it before allocating, so the RAM held stays within the cap with the
 * new copy counted (one caller thread per store: nothing else adds writes in between). */
zt_status zt__store_write_room(zt_store *s, size_t nbytes, const char *where);
/* The first failed write behind not yet reported (cleared), without waiting: ZT_OK when none. */
zt_status zt__store_write_error(zt_store *s, const char *where);
/* Finish a put request and free it. take_back: the owner wants the bytes in RAM (a restore,
 * a free): a write not started is dropped, a running one waited for and its source kept.
 * Otherwise the write is done (here, if not started). *item: the store's copy (empty when
 * none was written); *ram: the source bytes when they were not freed (taken back, or the
 * write failed), the caller's from now on. A failed write: its status and message, *ram set. */
zt_status zt__store_put_finish(zt_store_request *r, bool take_back, zt_store_item *item, void **ram);
/* zt__store_put_finish with take_back, for an owner whose writes' failures the store reports
 * (zt__store_write_error, zt_store_flush): returns whether the write failed, making no message.
 * !wait: only where that needs no wait (the write done, or not started: taken back), else
 * *settled false and r is left as it was. */
bool zt__store_put_settle(zt_store_request *r, bool wait, zt_store_item *item, void **ram, bool *settled);
/* Tests: while paused the helper starts no request (queued ones stay queued: a wait or a put
 * finish does them, or takes them back); a flush or a write cap would then wait until unpaused. */
void zt__store_pause(zt_store *s, bool paused);
/* Count an eviction that needed no put (the store's kept copy was clean). */
void zt__store_count_skipped(zt_store *s);

/* ---------------------------------------------------------------- the I/O engine (store_io.c) */
/* A pool of I/O threads over one file descriptor: a read or write of n bytes is split into
 * chunks that the threads take in order, so up to queue_depth requests are in flight. */
typedef struct zt__io zt__io;

#define ZT__IO_ALIGN 4096 /* O_DIRECT: offsets, lengths and buffer addresses */

/* Threads start here (fewer than queue_depth when the system refuses some; none: the caller
 * does its own I/O). fd is borrowed; dir is only named in messages (copied). */
zt_status zt__io_new(int fd, bool direct, int queue_depth, size_t chunk_bytes, const char *dir, zt__io **out);
void zt__io_free(zt__io *io);
/* Synchronous: returns when every chunk is done (or, after a failure, when none is in flight
 * any more: the buffer is the caller's again). With direct I/O, off must be 4096-aligned; n
 * and buf need not be (the last partial page is padded with zeros on disk, and read back
 * through a bounce buffer). Fails with ZT_STATUS_IO naming the file's directory, the
 * offset and what to do. */
zt_status zt__io_write(zt__io *io, const void *buf, size_t n, int64_t off);
zt_status zt__io_read(zt__io *io, void *buf, size_t n, int64_t off);
void zt__io_stats_get(zt__io *io, zt_store_io_stats *out);

/* Fault injection for tests: the nth chunk request from now (1: the next) of that kind
 * fails as a full disk would (ENOSPC) or reads back short (end of file); 0 disarms it. */
typedef enum zt__io_fault {
  ZT__IO_FAULT_WRITE_ENOSPC = 0,
  ZT__IO_FAULT_READ_SHORT,
  ZT__IO_FAULT_COUNT
} zt__io_fault;
void zt__io_fault_at(zt__io *io, zt__io_fault kind, int64_t nth);
/* The same on a disk store (zt_store_disk_new*); false for other stores. */
bool zt__store_disk_fault_at(zt_store *s, zt__io_fault kind, int64_t nth);
/* Tests: make disk stores made from now on act as if the file system refused O_DIRECT. */
void zt__store_disk_refuse_direct(bool on);

/* ---------------------------------------------------------------- disk (store_disk.c, store_extent.c) */
typedef struct zt__store_extent {
  int64_t off, len;
} zt__store_extent;

/* One unlinked spill file. fd and dir never change (gets read them on the helper thread);
 * the extents are guarded by mu (put and drop may come from any thread, one at a time). */
typedef struct zt__store_spill {
  int fd;
  char *dir;
  zt__io *io;
  int64_t align;              /* extents' alignment: ZT__IO_ALIGN with direct I/O, else 64 */
  pthread_mutex_t mu;
  int64_t end;                /* bytes in use up to here */
  zt__store_extent *free_ext; /* freed extents below end: sorted by offset, coalesced */
  int n_free, cap_free;
  int64_t live;               /* extents in use: at 0 the file is emptied */
} zt__store_spill;

/* First fit among freed extents, else the end of the file (lengths rounded to sp->align). */
int64_t zt__store_extent_alloc(zt__store_spill *sp, int64_t len);
/* Give an extent back: merged with its neighbours, and the end pulled in when it was the
 * last one. */
void zt__store_extent_free(zt__store_spill *sp, int64_t off, int64_t len);

#endif
