/* The accounting allocator. Every data byte zerotrain allocates passes here with a
 * device and a tag; current and peak bytes are kept per (device, tag) and per device in
 * total, with atomics so kernels on helper threads may allocate. The backing allocator
 * of each device type is replaceable. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <malloc.h>
#include <string.h>
#include <pthread.h>
#include <sys/resource.h>

#include "core/status_internal.h"
#include "zt/tensor.h"
#include "backend.h"

#define ZT_ALIGN 64
/* Large blocks start on a page: the disk store's direct I/O reads and writes them in place
 * (O_DIRECT wants 4096-aligned addresses) instead of through bounce buffers. */
#define ZT_PAGE_ALIGN 4096
#define PAGE_MIN ((size_t)64 << 10)

typedef struct acct {
  _Atomic int64_t current[ZT_MEM_TAG_COUNT];
  _Atomic int64_t peak[ZT_MEM_TAG_COUNT];
  _Atomic int64_t current_total;
  _Atomic int64_t peak_total;
  _Atomic int64_t current_state, peak_state; /* PARAM + GRAD + OPTIM */
} acct;

/* ZeRO's model states: what sharding divides (the rest is activations and buffers). */
static bool state_tag(zt_mem_tag t) { return t == ZT_MEM_TAG_PARAM || t == ZT_MEM_TAG_GRAD || t == ZT_MEM_TAG_OPTIM; }

static acct g_acct[ZT_DEVICE_TYPE_COUNT][ZT_MAX_DEVICE_INDEX];
static _Atomic int64_t g_live_allocs[ZT_DEVICE_TYPE_COUNT];

/* Large-block cache of the default host allocator. A freed block of >= 1 MiB is kept for
 * the next allocation of the same rounded size, so a training step that makes the same
 * big buffers every step does not pay for fresh pages (faults and zeroing) each time.
 * Cached bytes are not live: the accounting drops at free; zt_mem_cached_bytes() shows
 * them. Bounded (ZT_ALLOC_CACHE_MB, default 1024; 0 disables), oldest evicted first. */
#define CACHE_MIN ((size_t)1 << 20)
#define CACHE_ROUND ((size_t)64 << 10)
#define CACHE_SLOTS 128
typedef struct cache_slot {
  void *ptr;
  size_t size;
} cache_slot;
static cache_slot g_cache[CACHE_SLOTS];
static int g_cache_n;
static size_t g_cache_bytes;
/* -1: not read from the environment yet. Atomic: the first frees may come from several threads
 * at once (a store's helper freeing RAM written behind, the disk store's I/O threads); each
 * computes the same value, so a relaxed store is enough. */
static _Atomic int64_t g_cache_limit = -1;
static pthread_mutex_t g_cache_mu = PTHREAD_MUTEX_INITIALIZER;
/* > 0: a fresh block gives cached blocks back first (the oldest) while cpu's live bytes and the
 * cached would pass this (zt__mem_set_resident_limit). */
static _Atomic int64_t g_resident_limit;

static size_t round_size(size_t bytes) {
  size_t q = bytes >= CACHE_MIN ? CACHE_ROUND : bytes >= PAGE_MIN ? ZT_PAGE_ALIGN : ZT_ALIGN;
  return (bytes + q - 1) / q * q;
}

static size_t align_of(size_t rounded) { return rounded >= PAGE_MIN ? ZT_PAGE_ALIGN : ZT_ALIGN; }

static int64_t cache_limit(void) {
  int64_t v = atomic_load_explicit(&g_cache_limit, memory_order_relaxed);
  if (v < 0) {
    const char *e = getenv("ZT_ALLOC_CACHE_MB");
    long long mb = e && *e ? atoll(e) : 1024;
    v = mb > 0 ? (int64_t)mb << 20 : 0;
    atomic_store_explicit(&g_cache_limit, v, memory_order_relaxed);
  }
  return v;
}

/* The oldest cached block back to the kernel (g_cache_mu held, the cache not empty). */
static void cache_drop_oldest(void) {
  free(g_cache[0].ptr);
  g_cache_bytes -= g_cache[0].size;
  memmove(&g_cache[0], &g_cache[1], sizeof *g_cache * (size_t)(g_cache_n - 1));
  g_cache_n--;
}

/* The host allocator: the cpu backend's memory, and the disk tier's accounting. */
void *zt__host_alloc(void *ctx, size_t bytes, zt_device dev) {
  (void)ctx, (void)dev;
  if (bytes > SIZE_MAX - CACHE_ROUND) return NULL; /* rounding up would wrap */
  size_t rounded = round_size(bytes);
  if (rounded >= CACHE_MIN) {
    pthread_mutex_lock(&g_cache_mu);
    for (int i = g_cache_n - 1; i >= 0; i--)
      if (g_cache[i].size == rounded) {
        void *p = g_cache[i].ptr;
        g_cache_bytes -= rounded;
        memmove(&g_cache[i], &g_cache[i + 1], sizeof *g_cache * (size_t)(g_cache_n - i - 1));
        g_cache_n--;
        pthread_mutex_unlock(&g_cache_mu);
        return p;
      }
    pthread_mutex_unlock(&g_cache_mu);
  }
  int64_t total = atomic_load_explicit(&g_resident_limit, memory_order_relaxed);
  if (total > 0) {
    int64_t live = atomic_load(&g_acct[ZT_DEVICE_CPU][0].current_total);
    pthread_mutex_lock(&g_cache_mu);
    while (g_cache_n && live + (int64_t)(g_cache_bytes + rounded) > total) cache_drop_oldest();
    pthread_mutex_unlock(&g_cache_mu);
  }
  void *p = aligned_alloc(align_of(rounded), rounded);
  if (!p && rounded >= CACHE_MIN) { /* out of memory: give the cache back and retry */
    zt_mem_empty_cache();
    p = aligned_alloc(align_of(rounded), rounded);
  }
  return p;
}

void zt__host_free(void *ctx, void *ptr, size_t bytes, zt_device dev) {
  (void)ctx, (void)dev;
  size_t rounded = round_size(bytes);
  if (rounded >= CACHE_MIN && (int64_t)rounded <= cache_limit()) {
    pthread_mutex_lock(&g_cache_mu);
    while (g_cache_n && ((int64_t)(g_cache_bytes + rounded) > cache_limit() || g_cache_n == CACHE_SLOTS))
      cache_drop_oldest();
    g_cache[g_cache_n++] = (cache_slot){ptr, rounded};
    g_cache_bytes += rounded;
    pthread_mutex_unlock(&g_cache_mu);
    return;
  }
  free(ptr);
}

void zt_mem_empty_cache(void) {
  pthread_mutex_lock(&g_cache_mu);
  for (int i = 0; i < g_cache_n; i++) free(g_cache[i].ptr);
  g_cache_n = 0;
  g_cache_bytes = 0;
  pthread_mutex_unlock(&g_cache_mu);
}

int64_t zt_mem_cache_limit(void) { return cache_limit(); }

void zt_mem_set_cache_limit(int64_t bytes) {
  pthread_mutex_lock(&g_cache_mu);
  g_cache_limit = bytes > 0 ? bytes : 0;
  while (g_cache_n && (int64_t)g_cache_bytes > g_cache_limit) cache_drop_oldest(); /* the oldest out first */
  pthread_mutex_unlock(&g_cache_mu);
  /* under a memory limit, freed large blocks must go back to the kernel: glibc's mmap threshold
   * would otherwise grow with the blocks freed (up to 32 MiB) and keep them in its heap. It is the
   * page-aligned blocks' size (64 KiB): between it and 1 MiB, blocks from the heap left it
   * fragmented (25 MiB free in a 32 MiB heap at a GPT-2-vocabulary model's peak, resident, in no
   * accounting), for no measurable speed */
  mallopt(M_MMAP_THRESHOLD, (int)PAGE_MIN);
}

void zt__mem_set_resident_limit(int64_t bytes) { atomic_store(&g_resident_limit, bytes > 0 ? bytes : 0); }
int64_t zt__mem_resident_limit(void) { return atomic_load(&g_resident_limit); }

int64_t zt_mem_cached_bytes(void) {
  pthread_mutex_lock(&g_cache_mu);
  int64_t b = (int64_t)g_cache_bytes;
  pthread_mutex_unlock(&g_cache_mu);
  return b;
}

/* Allocators installed with zt_mem_set_allocator; a zero entry means the device type's
 * backend allocates (the disk tier, which has no backend, uses host memory). */
static zt_allocator g_alloc[ZT_DEVICE_TYPE_COUNT];

static zt_allocator allocator_of(zt_device_type type) {
  if (g_alloc[type].alloc) return g_alloc[type];
  const zt__backend *b = zt__backend_get(type);
  if (b && b->alloc) return (zt_allocator){b->alloc, b->free, b->ctx};
  if (type == ZT_DEVICE_DISK) return (zt_allocator){zt__host_alloc, zt__host_free, NULL};
  return (zt_allocator){0};
}

bool zt__mem_live(zt_device_type type) { return atomic_load(&g_live_allocs[type]) != 0; }

const char *zt_mem_tag_name(zt_mem_tag tag) {
  static const char *const names[ZT_MEM_TAG_COUNT] = {"PARAM", "GRAD", "OPTIM", "ACTIVATION", "COMM", "TEMP"};
  return ((int)tag >= 0 && tag < ZT_MEM_TAG_COUNT) ? names[tag] : "INVALID";
}

static bool dev_ok(zt_device d) {
  return (int)d.type >= 0 && d.type < ZT_DEVICE_TYPE_COUNT && d.index >= 0 && d.index < ZT_MAX_DEVICE_INDEX;
}

static void update_peak(_Atomic int64_t *peak, int64_t value) {
  int64_t p = atomic_load(peak);
  while (value > p && !atomic_compare_exchange_weak(peak, &p, value)) {
  }
}

static void account(zt_device dev, zt_mem_tag tag, int64_t delta) {
  acct *a = &g_acct[dev.type][dev.index];
  int64_t cur = atomic_fetch_add(&a->current[tag], delta) + delta;
  int64_t tot = atomic_fetch_add(&a->current_total, delta) + delta;
  int64_t st = state_tag(tag) ? atomic_fetch_add(&a->current_state, delta) + delta : 0;
  if (delta > 0) {
    update_peak(&a->peak[tag], cur);
    update_peak(&a->peak_total, tot);
    if (state_tag(tag)) update_peak(&a->peak_state, st);
  }
}

zt_status zt_mem_set_allocator(zt_device_type type, const zt_allocator *al) {
  if ((int)type < 0 || type >= ZT_DEVICE_TYPE_COUNT)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_mem_set_allocator: unknown device type %d", (int)type);
  if (atomic_load(&g_live_allocs[type]) != 0)
    return ZT_ERR(ZT_STATUS_STATE,
                  "zt_mem_set_allocator: %lld allocations made by the current allocator are still alive; "
                  "free every tensor on that device first",
                  (long long)atomic_load(&g_live_allocs[type]));
  if (al && (!al->alloc || !al->free))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_mem_set_allocator: alloc and free must both be set");
  g_alloc[type] = al ? *al : (zt_allocator){0};
  return ZT_OK;
}

zt_status zt_mem_alloc(size_t bytes, zt_device dev, zt_mem_tag tag, void **out) {
  if (!dev_ok(dev)) return ZT_ERR(ZT_STATUS_DEVICE, "zt_mem_alloc: invalid device (type %d index %d)", (int)dev.type, dev.index);
  if ((int)tag < 0 || tag >= ZT_MEM_TAG_COUNT) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_mem_alloc: invalid tag %d", (int)tag);
  if (bytes == 0) {
    *out = NULL;
    return ZT_OK;
  }
  zt_allocator al = allocator_of(dev.type);
  void *p = al.alloc ? al.alloc(al.ctx, bytes, dev) : NULL; /* no backend: nothing to allocate from */
  if (!p) {
    char d[16];
    return ZT_ERR(ZT_STATUS_OOM, "out of memory: could not allocate %zu bytes (%s) on %s; %s", bytes,
                  zt_mem_tag_name(tag), zt_device_str(dev, d),
                  "use a smaller batch, activation checkpointing, sharding or offload");
  }
  atomic_fetch_add(&g_live_allocs[dev.type], 1);
  account(dev, tag, (int64_t)bytes);
  *out = p;
  return ZT_OK;
}

void zt_mem_free(void *ptr, size_t bytes, zt_device dev, zt_mem_tag tag) {
  if (!ptr) return;
  ZT_ASSERT(dev_ok(dev) && (int)tag >= 0 && tag < ZT_MEM_TAG_COUNT);
  zt_allocator al = allocator_of(dev.type);
  ZT_ASSERT(al.free);
  al.free(al.ctx, ptr, bytes, dev);
  atomic_fetch_sub(&g_live_allocs[dev.type], 1);
  account(dev, tag, -(int64_t)bytes);
}

void zt_mem_account(zt_device dev, zt_mem_tag tag, int64_t delta) {
  ZT_ASSERT(dev_ok(dev) && (int)tag >= 0 && tag < ZT_MEM_TAG_COUNT);
  account(dev, tag, delta);
}

void zt_mem_retag(size_t bytes, zt_device dev, zt_mem_tag from, zt_mem_tag to) {
  if (from == to || bytes == 0) return;
  ZT_ASSERT(dev_ok(dev) && (int)from >= 0 && from < ZT_MEM_TAG_COUNT && (int)to >= 0 && to < ZT_MEM_TAG_COUNT);
  acct *a = &g_acct[dev.type][dev.index];
  atomic_fetch_sub(&a->current[from], (int64_t)bytes);
  int64_t cur = atomic_fetch_add(&a->current[to], (int64_t)bytes) + (int64_t)bytes;
  update_peak(&a->peak[to], cur);
  if (state_tag(from) != state_tag(to)) {
    int64_t d = state_tag(to) ? (int64_t)bytes : -(int64_t)bytes;
    int64_t st = atomic_fetch_add(&a->current_state, d) + d;
    if (d > 0) update_peak(&a->peak_state, st);
  }
}

void zt_mem_stats_get(zt_device dev, zt_mem_stats *out) {
  memset(out, 0, sizeof *out);
  if (!dev_ok(dev)) return;
  acct *a = &g_acct[dev.type][dev.index];
  for (int t = 0; t < ZT_MEM_TAG_COUNT; t++) {
    out->current[t] = atomic_load(&a->current[t]);
    out->peak[t] = atomic_load(&a->peak[t]);
  }
  out->current_total = atomic_load(&a->current_total);
  out->peak_total = atomic_load(&a->peak_total);
  out->current_state = atomic_load(&a->current_state);
  out->peak_state = atomic_load(&a->peak_state);
}

void zt_mem_reset_peaks(void) {
  for (int d = 0; d < ZT_DEVICE_TYPE_COUNT; d++)
    for (int i = 0; i < ZT_MAX_DEVICE_INDEX; i++) {
      acct *a = &g_acct[d][i];
      for (int t = 0; t < ZT_MEM_TAG_COUNT; t++) atomic_store(&a->peak[t], atomic_load(&a->current[t]));
      atomic_store(&a->peak_total, atomic_load(&a->current_total));
      atomic_store(&a->peak_state, atomic_load(&a->current_state));
    }
}

size_t zt_mem_report(char *buf, size_t cap) {
  size_t len = 0;
#define ZT_APPEND(...)                                                        \
  do {                                                                        \
    int n_ = snprintf(buf ? buf + (len < cap ? len : cap) : NULL,             \
                      buf && len < cap ? cap - len : 0, __VA_ARGS__);         \
    if (n_ > 0) len += (size_t)n_;                                            \
  } while (0)
  ZT_APPEND("%-8s %-10s %14s %14s\n", "device", "tag", "current", "peak");
  for (int d = 0; d < ZT_DEVICE_TYPE_COUNT; d++)
    for (int i = 0; i < ZT_MAX_DEVICE_INDEX; i++) {
      zt_mem_stats s;
      zt_device dev = {(zt_device_type)d, i};
      zt_mem_stats_get(dev, &s);
      if (s.peak_total == 0) continue;
      char ds[16];
      zt_device_str(dev, ds);
      for (int t = 0; t < ZT_MEM_TAG_COUNT; t++)
        if (s.peak[t]) ZT_APPEND("%-8s %-10s %14lld %14lld\n", ds, zt_mem_tag_name((zt_mem_tag)t),
                                 (long long)s.current[t], (long long)s.peak[t]);
      ZT_APPEND("%-8s %-10s %14lld %14lld\n", ds, "total", (long long)s.current_total, (long long)s.peak_total);
    }
#undef ZT_APPEND
  return len;
}

int64_t zt_mem_peak_rss(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return -1;
  return (int64_t)ru.ru_maxrss * 1024; /* Linux reports KiB */
}

int64_t zt_mem_current_rss(void) {
  FILE *f = fopen("/proc/self/status", "r"); /* VmRSS in KiB */
  if (!f) return -1;
  char line[256];
  long long kib = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %lld", &kib) == 1) break;
  fclose(f);
  return kib < 0 ? -1 : (int64_t)kib * 1024;
}

static _Thread_local zt_mem_tag tl_tag = ZT_MEM_TAG_ACTIVATION;
zt_mem_tag zt_mem_tag_push(zt_mem_tag tag) {
  zt_mem_tag prev = tl_tag;
  tl_tag = tag;
  return prev;
}
void zt_mem_tag_pop(zt_mem_tag previous) { tl_tag = previous; }
zt_mem_tag zt_mem_tag_current(void) { return tl_tag; }
