/* The accounting allocator. Every data byte zerotrain allocates passes here with a
 * device and a tag; current and peak bytes are kept per (device, tag) and per device in
 * total, with atomics so kernels on helper threads may allocate. The backing allocator
 * of each device type is replaceable (the host's, with its cache: host_alloc.c). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/resource.h>

#include "core/status_internal.h"
#include "zt/tensor.h"
#include "backend.h"

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
