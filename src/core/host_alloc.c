/* The host allocator (the cpu backend's memory) and its cache of freed blocks.
 *
 * A training step frees and makes the same buffers every step; fresh pages cost a fault and
 * their zeroing each (about 1 µs a 4 KiB page here), which for a step that frees a gigabyte of
 * activations in backward and makes them again in forward is a tenth of the step. So every
 * freed block of at least 64 KiB is kept and handed to the next allocation of the same rounded
 * size. Blocks of 64 KiB and up start on a page (the disk store's direct I/O reads and writes
 * them in place); smaller ones come from malloc, which keeps them in its heap.
 *
 * Bounds: the cached blocks are resident but not live (the accounting drops at free;
 * zt_mem_cached_bytes shows them). They never hold more bytes than the most the live cpu bytes
 * have reached in this process (a freed block is kept only within that mark; the oldest go back
 * to the kernel first when another bound asks): so resident memory stays under twice the run's
 * own peak whatever it does, and in a training loop, whose blocks come back at the same sizes
 * every step, the cache stays far below that (the SmolLM-135M step: +2.4% peak RSS, against 270
 * thousand page faults a step fewer). Within that, three bounds may apply: a byte bound
 * (ZT_ALLOC_CACHE_MB, or zt_mem_set_cache_limit; by default a quarter of the machine's memory;
 * 0 turns the cache off), and a resident limit that a memory plan sets
 * (zt__mem_set_resident_limit: before a fresh block, cached ones go back while live + cached +
 * the fresh block would pass it).
 *
 * Structure: cached blocks are nodes in bins by size (a hash of the rounded size, each bin a
 * list, the newest first) and in one age list (the oldest first), so a lookup, a take and an
 * eviction cost O(1) plus a bin's few entries. One mutex guards it all: frees come from helper
 * threads too (a store's write-behind, the disk store's I/O threads). */
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/backend.h"
#include "zt/tensor.h"

#define ZT_ALIGN 64
#define ZT_PAGE_ALIGN 4096
#define PAGE_MIN ((size_t)64 << 10) /* blocks from here up start on a page, and are cached */
#define ROUND_BIG ((size_t)64 << 10)
#define BIG ((size_t)1 << 20) /* from here up sizes round to 64 KiB (fewer distinct sizes) */
#define BINS 1024

typedef struct node {
  void *ptr;
  size_t size;
  struct node *bin_prev, *bin_next; /* its bin, newest first */
  struct node *older, *newer;       /* the age list */
} node;

static struct {
  pthread_mutex_t mu;
  node *bins[BINS];
  node *oldest, *newest;
  size_t bytes; /* cached */
  int64_t high; /* the most live cpu bytes seen (with the block being made): the cache's bound */
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The byte bound; -1: not read from the environment yet. Atomic: the first frees may
 * come from several threads at once, each computing the same value. */
static _Atomic int64_t g_limit = -1;
static _Atomic int64_t g_resident_limit; /* > 0: a memory plan's bound on live + cached */

static size_t round_size(size_t bytes) {
  size_t q = bytes >= BIG ? ROUND_BIG : bytes >= PAGE_MIN ? ZT_PAGE_ALIGN : ZT_ALIGN;
  return (bytes + q - 1) / q * q;
}

static size_t bin_of(size_t rounded) { return (rounded / ZT_PAGE_ALIGN) % BINS; }

static int64_t limit(void) {
  int64_t v = atomic_load_explicit(&g_limit, memory_order_relaxed);
  if (v < 0) {
    const char *e = getenv("ZT_ALLOC_CACHE_MB");
    long long mb = e && *e ? atoll(e) : -1;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    int64_t quarter = pages > 0 && page > 0 ? (int64_t)pages * page / 4 : (int64_t)1 << 30;
    v = mb < 0 ? quarter : mb > 0 ? (int64_t)mb << 20 : 0;
    atomic_store_explicit(&g_limit, v, memory_order_relaxed);
  }
  return v;
}

/* Unlink n from its bin and the age list (g.mu held). */
static void unlink_node(node *n) {
  if (n->bin_prev)
    n->bin_prev->bin_next = n->bin_next;
  else
    g.bins[bin_of(n->size)] = n->bin_next;
  if (n->bin_next) n->bin_next->bin_prev = n->bin_prev;
  if (n->older)
    n->older->newer = n->newer;
  else
    g.oldest = n->newer;
  if (n->newer)
    n->newer->older = n->older;
  else
    g.newest = n->older;
  g.bytes -= n->size;
}

/* The oldest cached block back to the kernel (g.mu held, the cache not empty). */
static void drop_oldest(void) {
  node *n = g.oldest;
  unlink_node(n);
  free(n->ptr);
  free(n);
}

/* A cached block of exactly rounded bytes (the newest), or NULL (g.mu held). */
static void *take(size_t rounded) {
  for (node *n = g.bins[bin_of(rounded)]; n; n = n->bin_next)
    if (n->size == rounded) {
      void *p = n->ptr;
      unlink_node(n);
      free(n);
      return p;
    }
  return NULL;
}

static int64_t live_cpu(void) {
  zt_mem_stats s;
  zt_mem_stats_get(ZT_CPU, &s);
  return s.current_total;
}

/* Freed blocks the cache does not keep go back to the kernel: glibc's mmap threshold would
 * otherwise grow with the blocks freed (up to 32 MiB) and keep every block below it in its heap,
 * resident after its free and in no accounting. Fixed at the page-aligned blocks' size (64 KiB),
 * from the first block on, in every run: a heap left fragmented held 25 MiB free of 32 at a
 * GPT-2-vocabulary model's peak, and FSDP's shards (half a 350M block's 50 MB at 2 ranks) kept
 * 1.0 GB in it with the cache off (GPT-2 350M FSDP full, 1 rank: peak RSS 6.90 GB against 5.89
 * accounted; fixed: 5.91), for no measurable speed. */
static pthread_once_t g_threshold_once = PTHREAD_ONCE_INIT;
static void fix_threshold(void) { mallopt(M_MMAP_THRESHOLD, (int)PAGE_MIN); }

void *zt__host_alloc(void *ctx, size_t bytes, zt_device dev) {
  (void)ctx, (void)dev;
  pthread_once(&g_threshold_once, fix_threshold);
  if (bytes > SIZE_MAX - ROUND_BIG) return NULL; /* rounding up would wrap */
  size_t rounded = round_size(bytes);
  if (rounded < PAGE_MIN) return aligned_alloc(ZT_ALIGN, rounded);
  int64_t live = live_cpu(), res = atomic_load_explicit(&g_resident_limit, memory_order_relaxed);
  pthread_mutex_lock(&g.mu);
  if (live + (int64_t)rounded > g.high) g.high = live + (int64_t)rounded;
  void *p = take(rounded);
  if (!p && res > 0) /* a fresh block under a plan: the cache gives back what would pass its limit */
    while (g.oldest && live + (int64_t)(g.bytes + rounded) > res) drop_oldest();
  pthread_mutex_unlock(&g.mu);
  if (p) return p;
  p = aligned_alloc(ZT_PAGE_ALIGN, rounded);
  if (!p) { /* out of memory: give the cache back and retry */
    zt_mem_empty_cache();
    p = aligned_alloc(ZT_PAGE_ALIGN, rounded);
  }
  return p;
}

void zt__host_free(void *ctx, void *ptr, size_t bytes, zt_device dev) {
  (void)ctx, (void)dev;
  size_t rounded = round_size(bytes);
  int64_t lim = rounded >= PAGE_MIN ? limit() : 0;
  node *n = lim >= (int64_t)rounded ? malloc(sizeof *n) : NULL;
  if (!n) {
    free(ptr);
    return;
  }
  pthread_mutex_lock(&g.mu);
  int64_t bound = lim < g.high ? lim : g.high;
  while (g.oldest && (int64_t)(g.bytes + rounded) > bound) drop_oldest();
  bool keep = (int64_t)(g.bytes + rounded) <= bound;
  if (keep) {
    *n = (node){.ptr = ptr, .size = rounded, .older = g.newest};
    size_t b = bin_of(rounded);
    n->bin_next = g.bins[b];
    if (g.bins[b]) g.bins[b]->bin_prev = n;
    g.bins[b] = n;
    if (g.newest)
      g.newest->newer = n;
    else
      g.oldest = n;
    g.newest = n;
    g.bytes += rounded;
  }
  pthread_mutex_unlock(&g.mu);
  if (!keep) {
    free(n);
    free(ptr);
  }
}

void zt_mem_empty_cache(void) {
  pthread_mutex_lock(&g.mu);
  while (g.oldest) drop_oldest();
  pthread_mutex_unlock(&g.mu);
}

int64_t zt_mem_cache_limit(void) { return limit(); }

void zt_mem_set_cache_limit(int64_t bytes) {
  pthread_mutex_lock(&g.mu);
  atomic_store_explicit(&g_limit, bytes > 0 ? bytes : 0, memory_order_relaxed);
  while (g.oldest && (int64_t)g.bytes > (bytes > 0 ? bytes : 0)) drop_oldest(); /* the oldest out first */
  pthread_mutex_unlock(&g.mu);
}

void zt__mem_set_resident_limit(int64_t bytes) { atomic_store(&g_resident_limit, bytes > 0 ? bytes : 0); }
int64_t zt__mem_resident_limit(void) { return atomic_load(&g_resident_limit); }

void zt__host_cache_set_high(int64_t bytes) {
  pthread_mutex_lock(&g.mu);
  g.high = bytes;
  pthread_mutex_unlock(&g.mu);
}

int64_t zt_mem_cached_bytes(void) {
  pthread_mutex_lock(&g.mu);
  int64_t b = (int64_t)g.bytes;
  pthread_mutex_unlock(&g.mu);
  return b;
}
