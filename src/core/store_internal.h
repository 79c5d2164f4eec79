/* Stores, internal: the store object (store.c: the generic put/get/drop with device
 * staging, the helper thread and its requests) and the disk implementation's spill file
 * with its extent allocator (store_disk.c, store_extent.c). The memory implementations are
 * store_memory.c. */
#ifndef ZT_CORE_STORE_INTERNAL_H
#define ZT_CORE_STORE_INTERNAL_H

#include <pthread.h>

#include "zt/store.h"

typedef enum zt__store_request_state {
  ZT__STORE_REQ_QUEUED = 0, /* waiting for the helper */
  ZT__STORE_REQ_RUNNING,    /* the helper (or a wait) is doing the get */
  ZT__STORE_REQ_DONE        /* finished by the helper: status and msg say how */
} zt__store_request_state;

struct zt_store_request {
  zt_store *store;
  zt_store_item item;
  zt_device dev;
  void *dst;
  /* guarded by the store's mu */
  zt__store_request_state state;
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
  zt_store_request *q_head, *q_tail; /* FIFO of queued requests */
  int in_flight;                     /* requests made and not yet waited or cancelled */
  zt_store_stats st;                 /* guarded by mu */
};

/* ---------------------------------------------------------------- disk (store_disk.c, store_extent.c) */
typedef struct zt__store_extent {
  int64_t off, len;
} zt__store_extent;

/* One unlinked spill file. fd and dir never change (gets read them on the helper thread);
 * the extents are guarded by mu (put and drop may come from any thread, one at a time). */
typedef struct zt__store_spill {
  int fd;
  char *dir;
  pthread_mutex_t mu;
  int64_t end;                /* bytes in use up to here */
  zt__store_extent *free_ext; /* freed extents below end: sorted by offset, coalesced */
  int n_free, cap_free;
  int64_t live;               /* extents in use: at 0 the file is emptied */
} zt__store_spill;

/* First fit among freed extents, else the end of the file (64-byte aligned lengths). */
int64_t zt__store_extent_alloc(zt__store_spill *sp, int64_t len);
/* Give an extent back: merged with its neighbours, and the end pulled in when it was the
 * last one. */
void zt__store_extent_free(zt__store_spill *sp, int64_t off, int64_t len);

#endif
