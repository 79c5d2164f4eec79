/* Activation offload, internal: the types and calls shared by its files (zt__). Saved
 * tensors are packed into tier entries (offload_tiers.c: host, bf16-compressed host and
 * disk spill file; offload_extent.c: the spill file's extent allocator), loaded back ahead
 * of backward by a helper thread (offload_prefetch.c) and handed to the saved-tensor hooks
 * of the public zt_offload_* API (offload.c).
 * Invariants: tier bytes are freed only on the calling thread, never while the helper reads
 * them; everything the helper touches is guarded by mu. Saved tensors may live on any
 * device: the tiers work on host bytes, which are the storage's own when its backend is
 * host-accessible (cpu: no extra copy) and a staging buffer moved by the backend
 * otherwise (zt__dev_storage_read / _write, on the helper thread too). */
#ifndef ZT_STRATEGIES_OFFLOAD_INTERNAL_H
#define ZT_STRATEGIES_OFFLOAD_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zt/nn.h"
#include "zt/offload.h"
#include "../core/backend.h"
#include "../core/tensor_internal.h"

#define ZT__OFFLOAD_MAX_PREFETCH 64

typedef enum zt__offload_entry_state {
  ZT__OFFLOAD_ENTRY_TIER = 0, /* only in the tier */
  ZT__OFFLOAD_ENTRY_QUEUED,   /* waiting for the helper */
  ZT__OFFLOAD_ENTRY_LOADING,  /* the helper is reading its tier bytes */
  ZT__OFFLOAD_ENTRY_READY,    /* loaded: ready holds the bytes */
  ZT__OFFLOAD_ENTRY_FAILED    /* the helper failed: err and errmsg say why */
} zt__offload_entry_state;

/* Where the tier keeps an entry's bytes. */
typedef struct zt__offload_tier_loc {
  void *host;      /* memory tiers */
  int64_t off;     /* disk: offset in the spill file */
  size_t bytes;    /* held by the tier */
  bool compressed; /* bf16 of f32/f64 values */
} zt__offload_tier_loc;

/* A tier: a struct of function pointers plus ctx, one per implementation (host, bf16,
 * disk). put and drop run on the calling thread; get also on the helper, so it reads only
 * loc and the fields of ctx that never change, and drop never runs during a get of loc. */
typedef struct zt__offload_tier_ops {
  /* copy n elements of dtype dt at src into the tier; loc says where they went */
  zt_status (*put)(void *ctx, const void *src, zt_dtype dt, int64_t n, zt__offload_tier_loc *loc);
  /* write them back, as dt, into dst */
  zt_status (*get)(void *ctx, const zt__offload_tier_loc *loc, zt_dtype dt, int64_t n, void *dst);
  void (*drop)(void *ctx, const zt__offload_tier_loc *loc);
  void (*free)(void *ctx); /* optional */
} zt__offload_tier_ops;

/* One tier copy of elements [lo, lo + n) of a storage, in the dtype of the views. */
typedef struct zt__offload_entry {
  uint64_t sid, version;
  zt_dtype dtype;
  zt_device device; /* of the saved storage: loads are made there */
  zt_mem_tag tag;   /* of the saved storage: loads are accounted as what they bring back */
  int64_t lo, n;
  size_t nbytes; /* of the span in its own dtype: what a load makes */
  zt__offload_tier_loc loc;  /* where the tier keeps it */
  int refs;      /* records using it (calling thread only) */
  /* guarded by mu */
  zt__offload_entry_state state;
  bool wanted; /* in the window: a finished load is kept, else dropped */
  bool used;   /* READY and already handed to an unpack (so a later one is a reuse, not a hit) */
  zt_storage *ready;
  zt_status err;
  char *errmsg;
  struct zt__offload_entry *qnext;
  /* calling thread only */
  struct zt__offload_entry *prev, *next; /* pack order */
  struct zt__offload_entry *hnext;       /* hash chain (same sid bucket) */
} zt__offload_entry;

struct zt_offload {
  zt_offload_options opt;
  const zt__offload_tier_ops *tier;
  void *tier_ctx;
  int refs;         /* the handle + one per live record */
  bool handle_freed;
  int pushed;
  zt_module *seq;   /* attached as a strategy: the model's block sequence it wraps (NULL: not) */
  int wrapper_id;
  zt__offload_entry *head, *tail;
  zt__offload_entry **buckets;
  size_t nbuckets, n_live;
  zt__offload_entry *pf[ZT__OFFLOAD_MAX_PREFETCH + 1]; /* the window: the entry last unpacked and the ones before it */
  int n_pf;
  pthread_mutex_t mu;
  pthread_cond_t work, done;
  pthread_t thread;
  bool thread_on, thread_failed, stop;
  zt__offload_entry *q_head;
  zt_offload_stats st;
};

typedef struct zt__offload_extent {
  int64_t off, len;
} zt__offload_extent;

/* One unlinked spill file. fd and dir never change (the helper reads them); the rest is
 * the calling thread's. */
typedef struct zt__offload_spill {
  int fd;
  char *dir;
  int64_t end;      /* bytes in use up to here */
  zt__offload_extent *free_ext; /* freed extents below end: sorted by offset, coalesced */
  int n_free, cap_free;
  int64_t live; /* extents in use: at 0 the file is emptied */
} zt__offload_spill;

typedef struct zt__offload_load_src {
  const zt__offload_tier_ops *tier;
  void *ctx;
  zt__offload_tier_loc loc;
  size_t nbytes;
  int64_t n;
  zt_dtype dtype;
  zt_device device;
  zt_mem_tag tag;
} zt__offload_load_src;

/* ---------------------------------------------------------------- tiers (offload_tiers.c) */
extern const zt__offload_tier_ops zt__offload_host_tier, zt__offload_bf16_tier, zt__offload_disk_tier;
/* A new spill file in dir, unlinked at once (the disk tier's ctx). */
ZT_NODISCARD zt_status zt__offload_spill_open(const char *dir, zt__offload_spill **out);
zt__offload_load_src zt__offload_src_of(const zt_offload *o, const zt__offload_entry *e);
/* A new storage (on the saved storage's device, with its tag) holding the entry's span.
 * Thread-safe: the allocator and the backends' byte moves are, and the tier bytes are not
 * dropped while this runs. */
ZT_NODISCARD zt_status zt__offload_load(const zt__offload_load_src *src, zt_storage **out);

/* ---------------------------------------------------------------- spill extents (offload_extent.c) */
/* First fit among freed extents, else the end of the file. */
int64_t zt__offload_extent_alloc(zt__offload_spill *sp, int64_t len);
/* Give an extent back: merged with its neighbours, and the end pulled in when it was the
 * last one. */
void zt__offload_extent_free(zt__offload_spill *sp, int64_t off, int64_t len);

/* ---------------------------------------------------------------- prefetch (offload_prefetch.c) */
/* Under mu: take e off the helper's queue. */
void zt__offload_queue_remove(zt_offload *o, zt__offload_entry *e);
/* Under mu: take e out of the window; whatever was loaded for it is dropped. */
void zt__offload_unwant(zt_offload *o, zt__offload_entry *e);
void zt__offload_window_remove(zt_offload *o, zt__offload_entry *e);
/* Under mu: the window becomes cur and the live entries packed just before it; new ones
 * are queued for the helper thread (started on first need). */
void zt__offload_schedule(zt_offload *o, zt__offload_entry *cur);

#endif
