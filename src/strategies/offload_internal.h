/* Activation offload, internal: the types and calls shared by its files (zt__). Saved
 * tensors are packed into entries held by a store (zt/store.h: memory, bf16 or disk), written
 * behind by the store's helper thread on the disk tier (a RAM copy put asynchronously, within
 * the store's write cap), loaded back ahead of backward by the same helper for the entries in
 * the prefetch window (offload_prefetch.c) and handed to the saved-tensor hooks of the public
 * zt_offload_* API (offload.c).
 * Invariants: an entry's bytes are always somewhere: its write behind's RAM copy (WRITING), the
 * store's item (in_store), or its ready storage (READY without in_store: the only copy, kept
 * until the entry is freed), or ram; an entry's store bytes are dropped only when no request
 * of it is in flight; entries are touched only by the thread that runs forward and backward
 * (the store's helper sees only its requests). Saved tensors may live on any device: the store
 * stages a device's bytes through its backend when the host cannot touch them (on the helper
 * thread too), and a write behind's copy is made through it into host memory.
 * Included by: src/strategies' activation-offload files only (and tests). */
#ifndef ZT_STRATEGIES_OFFLOAD_INTERNAL_H
#define ZT_STRATEGIES_OFFLOAD_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tensor_internal.h"
#include "zt/nn.h"
#include "zt/offload.h"
#include "zt/store.h"

#define ZT__OFFLOAD_MAX_PREFETCH 64

typedef enum zt__offload_entry_state {
  ZT__OFFLOAD_ENTRY_STORED = 0, /* only in the store */
  ZT__OFFLOAD_ENTRY_LOADING,    /* ready is being filled by the store's request req */
  ZT__OFFLOAD_ENTRY_READY,      /* ready holds the bytes (without in_store: the only copy) */
  ZT__OFFLOAD_ENTRY_WRITING     /* a host copy is being written behind by wreq (which owns it) */
} zt__offload_entry_state;

/* One store copy of elements [lo, lo + n) of a storage, in the dtype of the views. */
typedef struct zt__offload_entry {
  uint64_t sid, version;
  zt_dtype dtype;
  zt_device device;   /* of the saved storage: loads are made there */
  zt_mem_tag tag;     /* of the saved storage: loads are accounted as what they bring back */
  int64_t lo, n;
  size_t nbytes;      /* of the span in its own dtype: what a load makes */
  zt_store_item item; /* where the store keeps it (in_store) */
  bool in_store;      /* item holds the bytes (false: written never, or the write failed) */
  size_t tier_bytes;  /* what it counts in st.bytes_in_tier (a write in flight counts its bytes) */
  zt_store_request *wreq; /* WRITING: the write behind */
  void *ram;          /* a host copy (cpu, ACTIVATION, nbytes) not yet made its ready storage (that failed) */
  bool ram_hit;       /* READY from its write's RAM copy without a wait: its first unpack is a hit */
  int refs;           /* records using it */
  zt__offload_entry_state state;
  bool wanted;        /* in the window: a load is kept, else dropped */
  bool used;          /* READY and already handed to an unpack (so a later one is a reuse, not a hit) */
  zt_storage *ready;  /* LOADING / READY: the load */
  zt_store_request *req; /* LOADING */
  struct zt__offload_entry *prev, *next; /* pack order */
  struct zt__offload_entry *hnext;       /* hash chain (same sid bucket) */
} zt__offload_entry;

struct zt_offload {
  zt_offload_options opt;
  zt_store *store;
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
  zt_offload_stats st;
  int64_t base_prefetched, base_threads; /* the store's helper counters at the last reset */
};

/* A new storage (on the saved storage's device, with its tag) for the entry's span. */
ZT_NODISCARD zt_status zt__offload_alloc(const zt__offload_entry *e, zt_storage **out);
/* A WRITING entry's write behind ended. wait: taken back when not started (never written),
 * waited for when running; !wait: only where that needs no wait (queued: taken back; done),
 * else *settled false and e stays WRITING. Afterwards e is STORED (written; the helper freed
 * the copy) or READY from the RAM copy (in the store too when the write finished while it was
 * being taken back). The write's failure is the store's to report (zt__store_write_error), so it
 * is not returned here; the bytes are then READY from RAM: nothing is lost. A failure to make
 * the copy a storage (out of host memory) is returned, the copy kept in e->ram. */
ZT_NODISCARD zt_status zt__offload_settle(zt_offload *o, zt__offload_entry *e, bool wait, bool *settled);

/* ---------------------------------------------------------------- prefetch (offload_prefetch.c) */
/* Take e out of the window: a load in flight is cancelled, a finished one dropped. */
void zt__offload_unwant(zt_offload *o, zt__offload_entry *e);
void zt__offload_window_remove(zt_offload *o, zt__offload_entry *e);
/* The window becomes cur and the live entries packed just before it; new ones are sent to
 * the store's helper thread (started on first need). */
void zt__offload_schedule(zt_offload *o, zt__offload_entry *cur);

#endif
