/* zerotrain activation offload: saved-tensor hooks that move what ops save for backward
 * to a slower tier (bf16 copy in host memory, a spill file on disk, or a lossless host
 * copy) and bring it back before backward uses it, with a helper thread that prefetches
 * the next tensors backward will need. Parameters, small and non-float tensors stay put. */
#ifndef ZT_OFFLOAD_H
#define ZT_OFFLOAD_H

#include "zt/autograd.h"
#include "zt/strategy.h"

/* What the hooks do:
 * - pack keeps a saved tensor as it is (an alias) when it is empty, not float, a leaf that
 *   requires grad or a view of PARAM-tagged storage (parameters never move), or smaller
 *   than min_bytes. Otherwise it copies the span of storage elements the view touches
 *   ([min, max] offset over its shape and strides) to the tier at once, and keeps no
 *   reference to the storage: its memory goes when forward drops its own references.
 * - Saves of one storage (same zt_storage id and version, same dtype) whose span lies inside
 *   a live entry's span share that entry (refcounted); each record keeps its own view
 *   geometry. A save that needs more of the storage than an existing entry holds makes a
 *   new entry. A storage changed in place between two saves gives two entries.
 * - unpack rebuilds the view over a fresh storage (cpu, the saved storage's tag) holding the
 *   span: original shape, strides and dtype; bf16 values come back rounded. The engine
 *   owns it; the tier copy stays until the record is released (retain_graph works).
 * - In-place changes after the save: an offloaded tensor was copied at save time, so
 *   backward uses the values the op saw (no error, as PyTorch with saved-tensor hooks: the
 *   storage may be gone by then, so its version cannot be read). A kept tensor is the live
 *   storage, so unpack checks its version and fails like the engine does.
 * - Prefetch: entries are kept in pack order. At each unpack the window becomes that entry
 *   (its load stays for the other saves of its storage, usually read by the next node) and
 *   the `prefetch` entries packed before it, which the helper thread loads in that order;
 *   entries leaving the window drop their loads, so at most prefetch + 1 loads wait unused.
 *   A load error on the helper is reported, with its message, by the unpack that needs it.
 * - The tier is a store (zt/store.h: ZT_OFFLOAD_HOST the memory store, BF16 the bf16 store,
 *   DISK the disk store with its spill file named zt_offload_XXXXXX) owned by the offload;
 *   the helper thread is the store's, and its loads are asynchronous gets (zt_store_prefetch).
 * - DISK writes behind (write_cap > 0, the default): pack copies the span into host memory
 *   (cpu, ACTIVATION) and returns while the store's helper thread writes the copy (direct I/O at
 *   an offset of the spill file; freed extents are reused first fit, and the file is truncated
 *   when no entry is live); the copy is freed when written. Copies not yet written hold at most
 *   write_cap bytes (pack waits for earlier writes first; one save larger than the cap alone goes
 *   through). A save needed before its write ended (unpacked, or entering the prefetch window)
 *   takes its copy back: a write not started is never done, a running one is waited for; the
 *   copy then serves backward, without a read, until the record is released. A failed write
 *   loses nothing (its copy stays in RAM and serves backward) and is reported, once, as the
 *   store's error (ZT_STATUS_IO naming the spill file's directory) by the next pack, unpack or
 *   zt_offload_flush. write_cap 0: pack writes synchronously (no copy). The store's bytes are
 *   accounted on the disk device, tag ACTIVATION; BF16 and HOST bytes are cpu ACTIVATION (their
 *   puts are copies in RAM: always synchronous). Why a copy and not a reference to the saved
 *   storage while its write runs: see make_entry in src/strategies/offload.c. */

typedef enum zt_offload_tier {
  ZT_OFFLOAD_NONE = 0, /* no tier: what a config's tier field holds when nothing is offloaded (zt_offload_new
                          refuses it: no tier to offload to) */
  ZT_OFFLOAD_BF16 = 1, /* keep a bf16 copy in host memory: half the bytes of f32 (a quarter of f64); lossy
                          (round to nearest even); bf16/f16 tensors are copied as they are */
  ZT_OFFLOAD_DISK,     /* write to a spill file on disk: lossless; bytes accounted on device disk (ZT_DEVICE_DISK) */
  ZT_OFFLOAD_HOST      /* lossless copy in host memory: the GPU -> host tier; on cpu it only exercises the machinery */
} zt_offload_tier;
/* "none", "bf16", "disk", "host" ("invalid" for another value). */
ZT_API const char *zt_offload_tier_name(zt_offload_tier tier);

typedef struct zt_offload_options {
  zt_offload_tier tier;
  const char *dir;   /* DISK: directory for the spill file (NULL: $TMPDIR, else /tmp); the file is unlinked
                        right after open, so nothing is left behind even after a crash; copied by zt_offload_new */
  int64_t min_bytes; /* saved tensors of fewer bytes stay as they are (default 64 KiB; 0: every non-empty one
                        goes) */
  int prefetch;      /* how many saved tensors a helper thread brings back ahead of use (default 2; 0: no
                        thread, every load is synchronous in unpack); at most 64 */
  int64_t write_cap; /* DISK: the most bytes of RAM that copies of saves being written behind hold at once
                        (default ZT_STORE_WRITE_CAP_DEFAULT; 0: pack writes synchronously); >= 0 */
} zt_offload_options;

/* min_bytes 64 KiB, prefetch 2, dir NULL, write_cap ZT_STORE_WRITE_CAP_DEFAULT. */
ZT_API zt_offload_options zt_offload_options_default(zt_offload_tier tier);

typedef struct zt_offload zt_offload;

/* Make an offload store. For DISK the spill file is opened (and unlinked) here, so an
 * unwritable directory fails now: ZT_STATUS_IO naming the directory. A bad tier, a
 * negative min_bytes or a prefetch outside [0, 64] is ZT_STATUS_INVALID_ARG. The caller
 * owns *out and frees it with zt_offload_free. */
ZT_API ZT_NODISCARD zt_status zt_offload_new(const zt_offload_options *o, zt_offload **out);

/* Push its saved-tensor hooks on this thread's stack: what ops save from now on goes to
 * the tier (inside a zt_checkpoint region the checkpoint's hooks are on top, so only the
 * region's inputs reach the store). Pair with zt_offload_pop before zt_backward: backward
 * itself saves nothing. */
ZT_API ZT_NODISCARD zt_status zt_offload_push(zt_offload *o);
/* Pop its hooks; ZT_STATUS_STATE if the top of this thread's stack is not this store's. */
ZT_API ZT_NODISCARD zt_status zt_offload_pop(zt_offload *o);

/* The store as a strategy (zt/strategy.h): attaching wraps the model's block sequence so
 * that in training forwards (grad mode on) what the blocks save goes to the tier: the
 * hooks are pushed around the blocks' run and popped after it. Composed outside recompute,
 * so inside a checkpoint region only the region's input reaches the tier. Losses and grads
 * are bitwise those without offload for the lossless tiers (DISK, HOST). */
ZT_API zt_strategy zt_offload_strategy(zt_offload *o);

/* Wait until no save is being written behind, then report (and forget) the first write that
 * failed since the last report: ZT_STATUS_IO (or what the store said) naming it. The saves
 * whose writes failed keep their bytes in RAM (backward reads them from there). With nothing
 * written behind (other tiers, write_cap 0): ZT_OK at once. */
ZT_API ZT_NODISCARD zt_status zt_offload_flush(zt_offload *o);

/* Drop the caller's handle (detaching it first if it is attached as a strategy). Graphs still holding records keep the store (tier bytes, spill
 * file, helper thread) alive until they are freed; the last one frees it. Freeing while
 * its hooks are still pushed is a broken invariant (ZT_ASSERT). NULL is a no-op.
 * A store is used from one thread (the one that runs forward and backward); only its
 * helper thread runs beside it. */
ZT_API void zt_offload_free(zt_offload *o);

typedef struct zt_offload_stats {
  int64_t tensors_offloaded, bytes_offloaded; /* cumulative: saves sent to the tier (sharing an entry included) /
                                                 bytes of the original tensors copied there (once per entry) */
  int64_t entries;                            /* cumulative: tier copies made (saves of one storage share one) */
  int64_t bytes_in_tier, peak_bytes_in_tier;  /* bytes held by the tier now / at peak (bf16: compressed bytes;
                                                 a write behind counts from its pack until taken back) */
  int64_t tensors_kept;                       /* saved tensors left alone (small, parameters, not float) */
  int64_t unpacks;                            /* unpacks of offloaded tensors (kept ones are not counted) */
  int64_t prefetch_hits;                      /* unpacks that found the bytes ready: loaded by the helper, or
                                                 still in RAM from a write behind taken back without a wait */
  int64_t reuses;                             /* unpacks served by the load of an earlier unpack of the same entry */
  int64_t waits;                              /* unpacks that had to wait for or do the load themselves */
  int64_t prefetched;                         /* loads done by the helper thread (used or not) */
  int64_t threads_started;                    /* helper threads started (0 with prefetch 0) */
  double wait_ms;                             /* time backward spent waiting for loads */
  double put_ms;                              /* time forward spent putting saves into the tier (written
                                                 behind: copying them, and waiting for the write cap) */
  int64_t writes_behind;                      /* entries whose write went behind (DISK, write_cap > 0) */
  int64_t writes_taken_back;                  /* of those, writes not started when backward (or a release)
                                                 needed the entry: never done, the RAM copy used instead */
} zt_offload_stats;
/* A snapshot (NULL o: zeros). Call on the thread that uses the store. */
ZT_API void zt_offload_stats_get(const zt_offload *o, zt_offload_stats *out);
/* Counters to zero; peak to current (bytes_in_tier is a state, not a counter: kept). */
ZT_API void zt_offload_reset_stats(zt_offload *o);

#endif
