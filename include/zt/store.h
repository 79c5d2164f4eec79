/* zerotrain stores: a slower tier that holds byte ranges for a while (host memory, a
 * bf16-compressed copy in host memory, a spill file on disk), with put / get / drop, an
 * asynchronous get (prefetch + wait) run by the store's helper thread, and byte accounting
 * on the store's device. Activation offload keeps saved tensors in one; a storage's bytes
 * can be moved to one and back (zt_storage_evict / zt_storage_restore) while the tensors
 * that view it live on.
 * Invariants: a store holds what was put until it is dropped; get never changes it (a
 * range may be read back any number of times); the store's helper thread only reads the
 * store and writes the destination of a request, never a storage object. */
#ifndef ZT_STORE_H
#define ZT_STORE_H

#include "zt/tensor.h"

/* One put: the caller keeps this value and hands it back to get / prefetch / drop. The
 * first four fields say what was put; the rest belong to the implementation. */
typedef struct zt_store_item {
  size_t nbytes;   /* bytes put: what get gives back */
  zt_dtype dtype;  /* what they hold (the bf16 store compresses f32 and f64; other stores ignore it) */
  zt_mem_tag tag;  /* the tag the held bytes are accounted under, on the store's device */
  size_t held;     /* bytes the store holds for them (bf16: half of f32's, a quarter of f64's) */
  void *ptr;       /* implementation's: the memory stores' copy */
  int64_t off;     /* implementation's: the disk store's offset in its spill file */
  bool compressed; /* implementation's: the bf16 store rounded these bytes */
} zt_store_item;

struct zt_store_io_stats; /* below: the disk store's I/O counters */

/* A store implementation: a struct of function pointers plus ctx (zt_store_new). Host bytes
 * only: zt_store_put / _get stage a device's bytes through its backend first. */
typedef struct zt_store_ops {
  const char *kind; /* "memory", "bf16", "disk": in messages */
  /* Copy it->nbytes (> 0) host bytes at src into the store; it->dtype and it->tag are set.
   * Fill it->held and the implementation's fields, and account it->held on the store's
   * device under it->tag. Runs on the caller's thread (it may use OpenMP). */
  zt_status (*put)(void *ctx, const void *src, zt_store_item *it);
  /* Copy the item's it->nbytes back into host dst (lossy stores: their rounding). Also runs
   * on the store's helper thread, beside put, get and drop of other items: it reads only
   * the item and what never changes in ctx, and starts no OpenMP region. */
  zt_status (*get)(void *ctx, const zt_store_item *it, void *dst);
  /* Free the item's bytes and their accounting. Never runs during a get of the same item. */
  void (*drop)(void *ctx, const zt_store_item *it);
  void (*free)(void *ctx); /* optional: frees ctx at zt_store_free */
  /* Optional: the I/O engine's counters (zt_store_io_stats_get); NULL: the store does no I/O
   * (memory stores), its stats are zeros. Thread-safe. */
  void (*io_stats)(void *ctx, struct zt_store_io_stats *out);
  /* Optional, both or neither (NULL: the store moves whole items only, and a range of one goes
   * through a host copy of all of it): bytes [off, off + n) of the item, n > 0, off and n
   * multiples of the item's dtype size and inside it->nbytes (zt_store_get_range checks).
   * get_range copies them into host dst (lossy stores: their rounding); it runs where get runs
   * (the helper thread too), under get's rules. put_range overwrites them in place with host
   * src: it->held and the item's other bytes stay as they are, and on failure the range may be
   * partly written. It runs on the caller's thread (it may use OpenMP), never during a get or
   * another put_range of the same item. */
  zt_status (*get_range)(void *ctx, const zt_store_item *it, size_t off, size_t n, void *dst);
  zt_status (*put_range)(void *ctx, const zt_store_item *it, size_t off, size_t n, const void *src);
} zt_store_ops;

typedef struct zt_store zt_store;

/* A store over an implementation. ops is borrowed (static); ctx is owned from this call on
 * (ops->free frees it at zt_store_free, or here when this fails). dev is where the held
 * bytes are accounted (cpu for memory, ZT_DEVICE_DISK for files). The caller frees *out
 * with zt_store_free. */
ZT_API ZT_NODISCARD zt_status zt_store_new(const zt_store_ops *ops, void *ctx, zt_device dev, zt_store **out);
/* Lossless copies in host memory, accounted on cpu under each item's tag: the host tier (on a
 * GPU machine the GPU -> host tier). */
ZT_API ZT_NODISCARD zt_status zt_store_memory_new(zt_store **out);
/* Host memory with f32 and f64 rounded to bf16 (round to nearest even, NaN kept): half the
 * bytes of f32 and a quarter of f64's, lossy; other dtypes are kept as they are (lossless). */
ZT_API ZT_NODISCARD zt_status zt_store_bf16_new(zt_store **out);
/* A spill file in dir (NULL: $TMPDIR, else /tmp) named prefix_XXXXXX (prefix NULL:
 * "zt_store"), unlinked right after open so nothing is left behind even after a crash;
 * lossless. Ranges go to 4096-byte aligned extents (64 without direct I/O), freed ones
 * reused first fit; the file is truncated when nothing is held. Direct I/O with the default
 * queue depth and chunk (zt_store_disk_new_opts). Bytes accounted on the disk device (ZT_DEVICE_DISK).
 * An unwritable dir fails here: ZT_STATUS_IO naming it. dir and prefix are copied. */
ZT_API ZT_NODISCARD zt_status zt_store_disk_new(const char *dir, const char *prefix, zt_store **out);

/* Whether the disk store bypasses the page cache. Direct I/O keeps the spill file's bytes out
 * of host memory (the page cache counts against a memory cgroup) at the price of 4096-byte
 * aligned extents and bounce buffers for unaligned bytes. */
typedef enum zt_store_direct {
  ZT_STORE_DIRECT_ON = 0, /* O_DIRECT where the file system allows it, else buffered (stats say which) */
  ZT_STORE_DIRECT_OFF     /* buffered pread/pwrite through the page cache */
} zt_store_direct;

/* The disk store's options; a zeroed struct is the defaults of zt_store_disk_new. */
/* The disk store's defaults (measured with bench/bench_disk), and the RAM its bounce buffers
 * can take at most with them (one request's chunk, page-padded, per I/O thread). */
#define ZT_STORE_DISK_QUEUE_DEPTH 4
#define ZT_STORE_DISK_CHUNK ((int64_t)4 << 20)
#define ZT_STORE_DISK_IO_BUFFERS ((int64_t)ZT_STORE_DISK_QUEUE_DEPTH * (ZT_STORE_DISK_CHUNK + 4096))
typedef struct zt_store_disk_options {
  const char *dir;        /* NULL: $TMPDIR, else /tmp */
  const char *prefix;     /* NULL: "zt_store" */
  zt_store_direct direct; /* default ZT_STORE_DIRECT_ON */
  int queue_depth;        /* I/O threads, each with one request in flight: 1..64; 0: 4 (bench_disk) */
  size_t chunk_bytes;     /* bytes per request, a multiple of 4096 in [64 KiB, 256 MiB]; 0: 4 MiB */
} zt_store_disk_options;
/* zt_store_disk_new with options (NULL: the defaults). An item's bytes are split into
 * chunk_bytes requests run by queue_depth I/O threads, so one put or get of a large item keeps
 * queue_depth requests in flight; put still returns when its bytes are written. Buffers that
 * are not 4096-aligned, and the last partial page of an item, go through bounce buffers (at
 * most one of chunk_bytes per I/O thread, accounted on cpu under ZT_MEM_TAG_TEMP while a
 * thread has work). Bad options: ZT_STATUS_INVALID_ARG naming the field. */
ZT_API ZT_NODISCARD zt_status zt_store_disk_new_opts(const zt_store_disk_options *opts, zt_store **out);

/* What a store's I/O engine did since it was made (zeros for stores without one). */
typedef struct zt_store_io_stats {
  int64_t read_bytes, write_bytes;       /* item bytes read by gets / written by puts (padding not counted) */
  double read_seconds, write_seconds;    /* wall time with at least one request of that direction in flight */
  int64_t read_requests, write_requests; /* requests (one chunk each) issued, failed ones included */
  int64_t bounce_bytes;                  /* bytes copied through bounce buffers (both directions) */
  int queue_depth;                       /* I/O threads running */
  int64_t chunk_bytes;                   /* bytes per request */
  bool direct;                           /* O_DIRECT in use (false: off, or refused by the file system) */
} zt_store_io_stats;
/* A snapshot; thread-safe. NULL s, or a store without I/O: zeros. */
ZT_API void zt_store_io_stats_get(const zt_store *s, zt_store_io_stats *out);
/* Stops the helper thread. Every item must have been dropped and every request waited or
 * cancelled (storages evicted into it restored or freed): a broken invariant otherwise
 * (ZT_ASSERT). NULL is a no-op. */
ZT_API void zt_store_free(zt_store *s);
ZT_API const char *zt_store_kind(const zt_store *s);
ZT_API zt_device zt_store_device(const zt_store *s);

/* Copy nbytes at src (a pointer into dev's memory: a storage's data plus an offset) into
 * the store, accounted under tag; *out says where they went. dtype: what the bytes hold
 * (nbytes a multiple of its size). nbytes 0 makes an empty item (nothing held). On
 * failure nothing is held and *out is cleared. put, get and drop may be called from any
 * thread (the built-in stores lock what they share). */
ZT_API ZT_NODISCARD zt_status zt_store_put(zt_store *s, zt_device dev, const void *src, size_t nbytes, zt_dtype dtype,
                                          zt_mem_tag tag, zt_store_item *out);
/* Copy an item back into dst (it->nbytes bytes of dev's memory), synchronously. */
ZT_API ZT_NODISCARD zt_status zt_store_get(zt_store *s, const zt_store_item *it, zt_device dev, void *dst);
/* Free what the store holds for it (accounting drops); *it is cleared. No request of it may
 * be in flight. */
ZT_API void zt_store_drop(zt_store *s, zt_store_item *it);
/* Whether the store reads and writes byte ranges of an item without a whole-item copy (its ops
 * have get_range / put_range: the memory, bf16 and disk stores). NULL: false. */
ZT_API bool zt_store_has_ranges(const zt_store *s);
/* Copy bytes [off, off + nbytes) of an item into host dst, synchronously (bf16: the rounded
 * values). off and nbytes must be multiples of the item's dtype size and inside it->nbytes
 * (ZT_STATUS_INVALID_ARG otherwise); a store without range ops is ZT_STATUS_UNSUPPORTED
 * (zt_store_has_ranges). The disk store reads the unaligned head page of a range through a
 * host page (ZT_MEM_TAG_TEMP, freed before return), the rest as a get does. Counts as a get. */
ZT_API ZT_NODISCARD zt_status zt_store_get_range(zt_store *s, const zt_store_item *it, size_t off, size_t nbytes,
                                                void *dst);
/* Overwrite bytes [off, off + nbytes) of an item in place with host src (bf16: rounded, as a
 * put rounds), checked as zt_store_get_range. Not all-or-nothing: on failure the range may be
 * partly written (the item's bytes outside it are unchanged, and it stays held and
 * accounted as before); a caller that must keep the old contents puts a new item instead
 * (zt_storage_write_evicted). With direct I/O the disk store reads, patches and writes back
 * the pages a range shares with the rest of the item (its unaligned head and tail; a host page,
 * ZT_MEM_TAG_TEMP). No get or prefetch of the item may be in flight. Counts as a put. */
ZT_API ZT_NODISCARD zt_status zt_store_put_range(zt_store *s, const zt_store_item *it, size_t off, size_t nbytes,
                                                const void *src);

/* An asynchronous get: the store's helper thread (started on first use) copies the item
 * into dst (it->nbytes of dev's memory) while the caller works. Requests run in the order
 * they were made. The item is copied into the request, but what it names must not be
 * dropped, nor dst freed, until zt_store_wait or zt_store_cancel, one of which the caller
 * must call (it owns *out until then). Without a helper thread (it could not start), wait
 * does the get. */
typedef struct zt_store_request zt_store_request;
ZT_API ZT_NODISCARD zt_status zt_store_prefetch(zt_store *s, const zt_store_item *it, zt_device dev, void *dst,
                                               zt_store_request **out);
/* Whether the helper has finished it (wait would not block). */
ZT_API bool zt_store_request_done(zt_store_request *r);
/* Wait for the get and free r: its status, with the helper's message (a failure on the
 * helper says "the helper thread"). A request the helper has not started is done here, at
 * once, on the caller's thread (sooner than waiting its turn). */
ZT_API ZT_NODISCARD zt_status zt_store_wait(zt_store_request *r);
/* Drop a request that is no longer needed and free it: taken off the queue if not
 * started, else waited for (dst may be freed afterwards). NULL is a no-op. */
ZT_API void zt_store_cancel(zt_store_request *r);

typedef struct zt_store_stats {
  int64_t items, bytes_held, peak_bytes_held; /* now / at peak (held: the store's bytes, bf16 compressed) */
  int64_t puts, gets;                         /* cumulative: put and get calls (waits that did the get count) */
  int64_t helper_gets;                        /* gets run by the helper thread (failed ones too) */
  int threads_started;                        /* 0 or 1 */
  bool helper_failed;                         /* the helper thread could not start: requests run in wait */
  /* write-behind (zt_storage_evict_async) and clean evictions */
  int64_t async_puts;                  /* writes handed to the helper (each also counts in puts once done) */
  int64_t puts_skipped;                /* evictions of storages unchanged since a keeping restore: no put */
  int64_t write_bytes_in_flight;       /* RAM held by writes queued, running, or failed and not yet settled */
  int64_t peak_write_bytes_in_flight;  /* at most the cap (zt_store_set_write_cap), or one item above 0 */
  int64_t write_failures;              /* asynchronous writes that failed */
} zt_store_stats;
/* A snapshot; thread-safe. NULL s: zeros. */
ZT_API void zt_store_stats_get(const zt_store *s, zt_store_stats *out);

/* The most bytes of RAM that writes behind (zt_storage_evict_async) may hold at once: an
 * eviction that would pass it waits for earlier writes first (one item larger than the cap
 * alone is let through). A memory planner adds it to a step's peak. Default
 * ZT_STORE_WRITE_CAP_DEFAULT; 0 makes every zt_storage_evict_async synchronous in effect (it
 * waits for its own write). Call it while no write is in flight. */
#define ZT_STORE_WRITE_CAP_DEFAULT ((size_t)256 << 20)
ZT_API void zt_store_set_write_cap(zt_store *s, size_t bytes);
ZT_API size_t zt_store_write_cap(const zt_store *s);
/* Wait until no write behind is queued or running, then report (and forget) the first write
 * that failed since the last report: ZT_STATUS_IO (or what the store said) naming it. The
 * storages whose writes failed keep their bytes in RAM and are restored from them. */
ZT_API ZT_NODISCARD zt_status zt_store_flush(zt_store *s);

/* ---------------------------------------------------------------- storage eviction */
/* Move a storage's bytes to a store and release them (accounting drops on the storage's
 * device, rises on the store's, under the storage's tag). The storage object and every
 * tensor viewing it stay valid; reading its data (an op, zt_tensor_data and the calls built
 * on it) is ZT_STATUS_RELEASED naming the tensor (see zt_storage_set_name) until it is
 * restored. dtype: what the bytes hold (the bf16 store rounds f32/f64; nbytes must be a
 * multiple of its size). The version is kept: the contents are the same after restore (bf16:
 * rounded). The store must outlive the eviction (restore, or free the storage, first).
 * Refused (state unchanged): wrapped (external) storage, released bytes, a storage already
 * evicted. */
ZT_API ZT_NODISCARD zt_status zt_storage_evict(zt_storage *s, zt_store *store, zt_dtype dtype);
/* zt_storage_evict with the write behind: the storage is evicted (unreadable) when this
 * returns, its bytes are written by the store's helper thread (in order with its gets) while
 * the caller goes on, and its RAM is freed (accounting dropped) when the write is done. Until
 * then the RAM counts against the store's write cap (zt_store_set_write_cap): past it, this
 * waits for earlier writes. Every later call on the storage orders after its write: a restore,
 * or a free, takes the bytes back from RAM when the write has not finished (a write not started
 * is never done; a running one is waited for); zt_storage_read_evicted / _write_evicted wait
 * for it. A failed write loses nothing: the bytes stay in RAM (counted in flight), a restore
 * gives them back, read_evicted / write_evicted try the put again and fail with its message,
 * and the failure is reported by the next zt_storage_evict_async into the store (which then
 * evicts nothing) or by zt_store_flush. Stores whose put cannot run on the helper (bf16: it compresses with OpenMP; stores made
 * with zt_store_new: their put runs on the caller's thread), devices the host
 * cannot touch, or a store whose helper could not start: the put is synchronous, as
 * zt_storage_evict. A storage restored with zt_storage_restore_async_keep and not changed since
 * (same version) puts nothing: its RAM is freed and the store's kept copy used (as
 * zt_storage_evict does). Refused as zt_storage_evict is. */
ZT_API ZT_NODISCARD zt_status zt_storage_evict_async(zt_storage *s, zt_store *store, zt_dtype dtype);
/* Bring the bytes back (allocated again on the storage's device with its tag, filled from
 * the store, the store's copy dropped). A storage not evicted: no-op. On failure it stays
 * evicted (the store's copy kept) and a later restore may try again. */
ZT_API ZT_NODISCARD zt_status zt_storage_restore(zt_storage *s);
/* Start a restore: the bytes are allocated now and filled by the store's helper thread;
 * the storage stays unreadable (ZT_STATUS_RELEASED, "being restored") until
 * zt_storage_wait. A storage not evicted, or already being restored: no-op. */
ZT_API ZT_NODISCARD zt_status zt_storage_restore_async(zt_storage *s);
/* zt_storage_restore_async that keeps the store's copy (the store holds it, and accounts it)
 * with the storage's version: a later zt_storage_evict / _evict_async into the same store,
 * with the same dtype, of a storage whose version has not changed puts nothing (a clean
 * eviction: zt_store_stats.puts_skipped). A changed version drops the copy at that eviction
 * and puts afresh. Whoever writes a storage's bytes must bump its version
 * (zt_tensor_bump_version; ops, the optimizers and gradient accumulation do), or drop the copy
 * (zt_storage_drop_kept): else an eviction would keep the old bytes. The copy is dropped when
 * the storage is freed or released; a store being freed must have no kept copies
 * (zt_storage_drop_kept them first). */
ZT_API ZT_NODISCARD zt_status zt_storage_restore_async_keep(zt_storage *s);
/* Drop the store's copy kept by zt_storage_restore_async_keep (none: no-op). */
ZT_API void zt_storage_drop_kept(zt_storage *s);
/* Whether the storage holds a kept copy in a store (it is in memory, restored with keep). */
ZT_API bool zt_storage_has_kept(const zt_storage *s);
/* Finish a restore started by zt_storage_restore_async (no-op otherwise). On failure the
 * storage stays evicted, as for zt_storage_restore. */
ZT_API ZT_NODISCARD zt_status zt_storage_wait(zt_storage *s);
/* Whether its bytes are in a store (a restore in flight included). */
ZT_API bool zt_storage_is_evicted(const zt_storage *s);
/* Read nbytes of an evicted storage's contents, from byte offset off, into host memory dst
 * without restoring it (bf16 store: the rounded values); the storage stays evicted and the
 * store's copy unchanged. A store with range ops (zt_store_has_ranges) reads a range of whole
 * elements (off and nbytes multiples of the evicted dtype's size) alone; other ranges, and any
 * in a store without them, go through a host copy of all of the storage (ZT_MEM_TAG_TEMP on
 * cpu, freed before return). Refused (ZT_STATUS_STATE): a
 * storage that is not evicted (read it through zt_tensor_data) or whose restore is in
 * flight (zt_storage_wait first); a range past the end is ZT_STATUS_INVALID_ARG. */
ZT_API ZT_NODISCARD zt_status zt_storage_read_evicted(const zt_storage *s, size_t off, size_t nbytes, void *dst);
/* Replace nbytes of an evicted storage's contents, from byte offset off, with host bytes at
 * src, without restoring it: a new put into the same store (same dtype and tag), then the
 * old item dropped, so on failure the old contents stay and the storage is as it was. The
 * store holds both copies for a moment (a memory store: one storage's bytes more on cpu). A
 * range that is not the whole storage is merged into a host copy of the old contents first
 * (ZT_MEM_TAG_TEMP, as for zt_storage_read_evicted). The version is bumped (new values).
 * Refused as zt_storage_read_evicted is. */
ZT_API ZT_NODISCARD zt_status zt_storage_write_evicted(zt_storage *s, size_t off, size_t nbytes, const void *src);
/* Overwrite nbytes of an evicted storage's contents, from byte offset off, with host bytes at
 * src, in place in the store's copy (zt_store_put_range): no second copy is held and no other
 * byte is read or written. Not all-or-nothing: on failure the range may be partly written (the
 * storage stays evicted, its bytes outside the range as they were); callers that must keep the
 * old contents on failure use zt_storage_write_evicted. A store without range ops: as
 * zt_storage_write_evicted (all-or-nothing, through a whole copy). off and nbytes: multiples
 * of the evicted dtype's size. The version is bumped (also on failure: the contents may have
 * changed). Refused as zt_storage_read_evicted is. */
ZT_API ZT_NODISCARD zt_status zt_storage_write_evicted_in_place(zt_storage *s, size_t off, size_t nbytes,
                                                               const void *src);

#endif
