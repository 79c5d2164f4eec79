/* The accounting allocator: current/peak bytes per device and tag, peak reset, retag, report,
 * replaceable backing allocators (used; refused while live), peak RSS, and the per-thread
 * tag of op outputs. Isolated devices (cpu:5, disk) keep numbers free of other tests. */
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>

#include "core/backend.h"
#include "zt_test.h"

static const zt_device DEV5 = {ZT_DEVICE_CPU, 5};
static const zt_device DISK = {ZT_DEVICE_DISK, 0};

static void test_current_and_peak_per_tag(void) {
  zt_mem_stats s;
  zt_mem_stats_get(DEV5, &s);
  ZT_CHECK(s.current_total == 0);
  void *p = NULL, *g = NULL, *o = NULL;
  ZT_CHECK_OK(zt_mem_alloc(100, DEV5, ZT_MEM_TAG_PARAM, &p));
  ZT_CHECK_OK(zt_mem_alloc(200, DEV5, ZT_MEM_TAG_GRAD, &g));
  ZT_CHECK(p && g && ((uintptr_t)p % 64) == 0 && ((uintptr_t)g % 64) == 0); /* 64-byte aligned */
  zt_mem_stats_get(DEV5, &s);
  ZT_CHECK(s.current[ZT_MEM_TAG_PARAM] == 100 && s.current[ZT_MEM_TAG_GRAD] == 200 && s.current_total == 300);
  ZT_CHECK(s.peak[ZT_MEM_TAG_PARAM] == 100 && s.peak[ZT_MEM_TAG_GRAD] == 200 && s.peak_total == 300);
  zt_mem_free(p, 100, DEV5, ZT_MEM_TAG_PARAM);
  ZT_CHECK_OK(zt_mem_alloc(50, DEV5, ZT_MEM_TAG_OPTIM, &o));
  zt_mem_stats_get(DEV5, &s);
  ZT_CHECK(s.current[ZT_MEM_TAG_PARAM] == 0 && s.peak[ZT_MEM_TAG_PARAM] == 100);
  ZT_CHECK(s.current_total == 250 && s.peak_total == 300); /* peak of the sum, not sum of peaks (350) */
  /* other devices are untouched */
  zt_mem_stats d;
  zt_mem_stats_get(DISK, &d);
  ZT_CHECK(d.current_total == 0);
  /* reset_peaks: every peak becomes the current value */
  zt_mem_reset_peaks();
  zt_mem_stats_get(DEV5, &s);
  ZT_CHECK(s.peak[ZT_MEM_TAG_PARAM] == 0 && s.peak[ZT_MEM_TAG_GRAD] == 200 && s.peak[ZT_MEM_TAG_OPTIM] == 50);
  ZT_CHECK(s.peak_total == 250);
  zt_mem_free(g, 200, DEV5, ZT_MEM_TAG_GRAD);
  zt_mem_free(o, 50, DEV5, ZT_MEM_TAG_OPTIM);
  zt_mem_stats_get(DEV5, &s);
  ZT_CHECK(s.current_total == 0 && s.peak_total == 250);
  zt_mem_reset_peaks();
  zt_mem_stats_get(DEV5, &s);
  ZT_CHECK(s.peak_total == 0);
  /* model states (PARAM + GRAD + OPTIM): the peak of their sum, activations apart; retagging
   * into or out of a state tag moves bytes in or out of the sum */
  void *a = NULL, *q = NULL;
  ZT_CHECK_OK(zt_mem_alloc(100, DEV5, ZT_MEM_TAG_PARAM, &p));
  ZT_CHECK_OK(zt_mem_alloc(1000, DEV5, ZT_MEM_TAG_ACTIVATION, &a));
  ZT_CHECK_OK(zt_mem_alloc(40, DEV5, ZT_MEM_TAG_OPTIM, &o));
  zt_mem_free(o, 40, DEV5, ZT_MEM_TAG_OPTIM);
  ZT_CHECK_OK(zt_mem_alloc(30, DEV5, ZT_MEM_TAG_GRAD, &q));
  zt_mem_stats_get(DEV5, &s);
  ZT_CHECK(s.current_state == 130 && s.peak_state == 140 && s.peak_total == 1140);
  zt_mem_retag(1000, DEV5, ZT_MEM_TAG_ACTIVATION, ZT_MEM_TAG_GRAD);
  zt_mem_stats_get(DEV5, &s);
  ZT_CHECK(s.current_state == 1130 && s.peak_state == 1130);
  zt_mem_retag(1000, DEV5, ZT_MEM_TAG_GRAD, ZT_MEM_TAG_TEMP);
  zt_mem_free(a, 1000, DEV5, ZT_MEM_TAG_TEMP);
  zt_mem_free(p, 100, DEV5, ZT_MEM_TAG_PARAM);
  zt_mem_free(q, 30, DEV5, ZT_MEM_TAG_GRAD);
  zt_mem_stats_get(DEV5, &s);
  ZT_CHECK(s.current_state == 0 && s.peak_state == 1130 && s.current_total == 0);
  zt_mem_reset_peaks();
  zt_mem_stats_get(DEV5, &s);
  ZT_CHECK(s.peak_state == 0);
  /* zero bytes: NULL, nothing accounted; freeing NULL is a no-op */
  void *z = (void *)0x1;
  ZT_CHECK_OK(zt_mem_alloc(0, DEV5, ZT_MEM_TAG_TEMP, &z));
  ZT_CHECK(z == NULL);
  zt_mem_free(NULL, 0, DEV5, ZT_MEM_TAG_TEMP);
  zt_mem_stats_get(DEV5, &s);
  ZT_CHECK(s.current_total == 0 && s.peak_total == 0);
  /* an invalid device has empty stats */
  zt_mem_stats_get((zt_device){ZT_DEVICE_CPU, 99}, &s);
  ZT_CHECK(s.current_total == 0);
}

static void test_retag(void) {
  void *p = NULL;
  ZT_CHECK_OK(zt_mem_alloc(4096, DISK, ZT_MEM_TAG_ACTIVATION, &p));
  zt_mem_retag(4096, DISK, ZT_MEM_TAG_ACTIVATION, ZT_MEM_TAG_COMM);
  zt_mem_stats s;
  zt_mem_stats_get(DISK, &s);
  ZT_CHECK(s.current[ZT_MEM_TAG_ACTIVATION] == 0 && s.current[ZT_MEM_TAG_COMM] == 4096);
  ZT_CHECK(s.peak[ZT_MEM_TAG_COMM] == 4096 && s.peak[ZT_MEM_TAG_ACTIVATION] == 4096);
  ZT_CHECK(s.current_total == 4096 && s.peak_total == 4096); /* the total does not move */
  zt_mem_retag(4096, DISK, ZT_MEM_TAG_COMM, ZT_MEM_TAG_COMM); /* no-op */
  zt_mem_free(p, 4096, DISK, ZT_MEM_TAG_COMM);
  zt_mem_stats_get(DISK, &s);
  ZT_CHECK(s.current_total == 0 && s.current[ZT_MEM_TAG_COMM] == 0);
  zt_mem_reset_peaks();
}

static void test_report(void) {
  void *p = NULL;
  ZT_CHECK_OK(zt_mem_alloc(1234, DISK, ZT_MEM_TAG_OPTIM, &p));
  size_t need = zt_mem_report(NULL, 0);
  ZT_CHECK(need > 0);
  char *buf = malloc(need + 1);
  ZT_CHECK(zt_mem_report(buf, need + 1) == need && strlen(buf) == need);
  ZT_CHECK(strstr(buf, "device") && strstr(buf, "tag") && strstr(buf, "current") && strstr(buf, "peak"));
  ZT_CHECK(strstr(buf, "disk") && strstr(buf, "OPTIM") && strstr(buf, "1234"));
  ZT_CHECK(strstr(buf, "total"));
  /* snprintf rules: a short buffer is truncated and terminated, the full length returned */
  char small[20];
  memset(small, 'x', sizeof small);
  ZT_CHECK(zt_mem_report(small, sizeof small) == need);
  ZT_CHECK(strlen(small) == sizeof small - 1 && !strncmp(small, buf, sizeof small - 1));
  free(buf);
  /* devices with an index are named with it */
  void *q = NULL;
  ZT_CHECK_OK(zt_mem_alloc(77, DEV5, ZT_MEM_TAG_PARAM, &q));
  char *buf2 = malloc(zt_mem_report(NULL, 0) + 1);
  zt_mem_report(buf2, zt_mem_report(NULL, 0) + 1);
  ZT_CHECK(strstr(buf2, "cpu:5") && strstr(buf2, "77"));
  free(buf2);
  zt_mem_free(q, 77, DEV5, ZT_MEM_TAG_PARAM);
  zt_mem_free(p, 1234, DISK, ZT_MEM_TAG_OPTIM);
  zt_mem_reset_peaks();
  ZT_CHECK(!strcmp(zt_mem_tag_name(ZT_MEM_TAG_PARAM), "PARAM") && !strcmp(zt_mem_tag_name(ZT_MEM_TAG_TEMP), "TEMP"));
  ZT_CHECK(!strcmp(zt_mem_tag_name((zt_mem_tag)42), "INVALID"));
}

/* ------------------------------------------------ replaceable allocator */
typedef struct counting {
  int allocs, frees;
  size_t bytes_live;
  size_t fail_above; /* 0: never fail */
} counting;

static void *count_alloc(void *ctx, size_t bytes, zt_device dev) {
  (void)dev;
  counting *c = ctx;
  if (c->fail_above && bytes > c->fail_above) return NULL;
  c->allocs++;
  c->bytes_live += bytes;
  return aligned_alloc(64, (bytes + 63) / 64 * 64);
}
static void count_free(void *ctx, void *ptr, size_t bytes, zt_device dev) {
  (void)dev;
  counting *c = ctx;
  c->frees++;
  c->bytes_live -= bytes;
  free(ptr);
}

static void test_replaceable_allocator(void) {
  counting c = {0};
  zt_allocator al = {count_alloc, count_free, &c};
  ZT_CHECK_OK(zt_mem_set_allocator(ZT_DEVICE_CPU, &al));
  int64_t shape[] = {10, 10};
  zt_tensor *t = NULL, *u = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(2, shape, ZT_DTYPE_F32, ZT_CPU, &t));
  ZT_CHECK(c.allocs == 1 && c.bytes_live == 400);
  ZT_CHECK_OK(zt_exp(t, &u)); /* op outputs come from it too */
  ZT_CHECK(c.allocs == 2 && c.bytes_live == 800);
  /* refused while its allocations are alive */
  ZT_CHECK_ERR(zt_mem_set_allocator(ZT_DEVICE_CPU, NULL), ZT_STATUS_STATE, "2 allocations made by the current");
  ZT_CHECK_ERR(zt_mem_set_allocator(ZT_DEVICE_CPU, &al), ZT_STATUS_STATE, "free every tensor on that device first");
  /* release/re-materialise go through it as well */
  ZT_CHECK_OK(zt_storage_release(u->storage));
  ZT_CHECK(c.frees == 1 && c.bytes_live == 400);
  ZT_CHECK_OK(zt_storage_rematerialize(u->storage));
  ZT_CHECK(c.allocs == 3 && c.bytes_live == 800);
  zt_tensor_free(u);
  zt_tensor_free(t);
  ZT_CHECK(c.frees == 3 && c.bytes_live == 0);
  /* a failing backing allocator surfaces as OOM with advice */
  c.fail_above = 1000;
  ZT_CHECK_ERR(zt_tensor_empty(1, (int64_t[]){1000}, ZT_DTYPE_F32, ZT_CPU, &t), ZT_STATUS_OOM,
               "out of memory: could not allocate 4000 bytes (ACTIVATION) on cpu");
  ZT_CHECK_ERR(zt_tensor_empty(1, (int64_t[]){1000}, ZT_DTYPE_F32, ZT_CPU, &t), ZT_STATUS_OOM,
               "activation checkpointing");
  ZT_CHECK_OK(zt_mem_set_allocator(ZT_DEVICE_CPU, NULL)); /* nothing alive: allowed */
  ZT_CHECK_OK(zt_tensor_zeros(2, shape, ZT_DTYPE_F32, ZT_CPU, &t));
  ZT_CHECK(c.allocs == 3); /* the default is back */
  zt_tensor_free(t);
  /* per device type: a disk allocator does not affect cpu */
  ZT_CHECK_OK(zt_mem_set_allocator(ZT_DEVICE_DISK, &al));
  void *p = NULL;
  ZT_CHECK_OK(zt_mem_alloc(64, DISK, ZT_MEM_TAG_OPTIM, &p));
  ZT_CHECK(c.allocs == 4);
  ZT_CHECK_OK(zt_tensor_zeros(2, shape, ZT_DTYPE_F32, ZT_CPU, &t));
  ZT_CHECK(c.allocs == 4);
  ZT_CHECK_ERR(zt_mem_set_allocator(ZT_DEVICE_CPU, &al), ZT_STATUS_STATE, "still alive"); /* t lives */
  zt_tensor_free(t);
  zt_mem_free(p, 64, DISK, ZT_MEM_TAG_OPTIM);
  ZT_CHECK_OK(zt_mem_set_allocator(ZT_DEVICE_DISK, NULL));
  zt_mem_reset_peaks();
  /* bad arguments */
  zt_allocator half = {count_alloc, NULL, &c};
  ZT_CHECK_ERR(zt_mem_set_allocator(ZT_DEVICE_CPU, &half), ZT_STATUS_INVALID_ARG, "alloc and free must both be set");
  ZT_CHECK_ERR(zt_mem_set_allocator((zt_device_type)7, NULL), ZT_STATUS_INVALID_ARG, "unknown device type 7");
  ZT_CHECK_ERR(zt_mem_alloc(8, ((zt_device){ZT_DEVICE_CPU, 16}), ZT_MEM_TAG_TEMP, &p), ZT_STATUS_DEVICE,
               "invalid device");
  ZT_CHECK_ERR(zt_mem_alloc(8, ZT_CPU, (zt_mem_tag)9, &p), ZT_STATUS_INVALID_ARG, "invalid tag 9");
  /* no backend memory for cuda in a cpu build: the default allocator refuses */
  ZT_CHECK_ERR(zt_mem_alloc(8, ((zt_device){ZT_DEVICE_CUDA, 0}), ZT_MEM_TAG_TEMP, &p), ZT_STATUS_OOM, "cuda:0");
}

static void test_peak_rss(void) {
  int64_t rss = zt_mem_peak_rss();
  ZT_CHECK(rss > 1024 * 1024); /* at least a MiB for any process with libc and OpenMP */
  /* touching 64 MiB raises it by about that much */
  int64_t shape[] = {16 << 20};
  zt_tensor *t = NULL;
  ZT_CHECK_OK(zt_tensor_full(1, shape, ZT_DTYPE_F32, ZT_CPU, 1, &t));
  ZT_CHECK(zt_mem_peak_rss() >= rss);
  ZT_CHECK(zt_mem_peak_rss() >= 64ll << 20);
  zt_tensor_free(t);
}

/* ------------------------------------------------ per-thread tag for op outputs */
static void *other_thread(void *arg) {
  *(zt_mem_tag *)arg = zt_mem_tag_current();
  return NULL;
}

static void test_thread_tag(void) {
  ZT_CHECK(zt_mem_tag_current() == ZT_MEM_TAG_ACTIVATION);
  int64_t shape[] = {8};
  zt_tensor *x = zt_test_rand(1, shape, ZT_DTYPE_F32, 0, 1, 1), *y = NULL, *z = NULL;
  zt_mem_tag prev = zt_mem_tag_push(ZT_MEM_TAG_PARAM);
  ZT_CHECK(prev == ZT_MEM_TAG_ACTIVATION && zt_mem_tag_current() == ZT_MEM_TAG_PARAM);
  zt_mem_stats s0, s1;
  zt_mem_stats_get(ZT_CPU, &s0);
  ZT_CHECK_OK(zt_exp(x, &y));
  zt_mem_stats_get(ZT_CPU, &s1);
  ZT_CHECK(y->storage->tag == ZT_MEM_TAG_PARAM);
  ZT_CHECK(s1.current[ZT_MEM_TAG_PARAM] == s0.current[ZT_MEM_TAG_PARAM] + 32);
  /* nesting, and other threads keep their own (default) tag */
  zt_mem_tag prev2 = zt_mem_tag_push(ZT_MEM_TAG_COMM);
  ZT_CHECK(prev2 == ZT_MEM_TAG_PARAM);
  zt_mem_tag seen = ZT_MEM_TAG_COUNT;
  pthread_t th;
  ZT_CHECK(pthread_create(&th, NULL, other_thread, &seen) == 0);
  pthread_join(th, NULL);
  ZT_CHECK(seen == ZT_MEM_TAG_ACTIVATION);
  ZT_CHECK_OK(zt_add(x, y, &z));
  ZT_CHECK(z->storage->tag == ZT_MEM_TAG_COMM);
  zt_mem_tag_pop(prev2);
  ZT_CHECK(zt_mem_tag_current() == ZT_MEM_TAG_PARAM);
  zt_mem_tag_pop(prev);
  ZT_CHECK(zt_mem_tag_current() == ZT_MEM_TAG_ACTIVATION);
  zt_tensor_free(z);
  ZT_CHECK_OK(zt_neg(x, &z));
  ZT_CHECK(z->storage->tag == ZT_MEM_TAG_ACTIVATION);
  zt_tensor_free(x);
  zt_tensor_free(y);
  zt_tensor_free(z);
}

/* Backward computes in TEMP; a leaf's .grad ends up tagged GRAD; nothing TEMP is left. */
static void test_backward_tags(void) {
  int64_t shape[] = {4, 4};
  zt_tensor *w = zt_test_rand_leaf(2, shape, ZT_DTYPE_F32, -1, 1, 1), *y = NULL, *l = NULL;
  int64_t temp0 = 0, grad0 = 0;
  zt_mem_stats s;
  zt_mem_stats_get(ZT_CPU, &s);
  temp0 = s.current[ZT_MEM_TAG_TEMP];
  grad0 = s.current[ZT_MEM_TAG_GRAD];
  ZT_CHECK_OK(zt_tanh(w, &y));
  ZT_CHECK_OK(zt_mul(y, y, &l));
  zt_tensor *g = NULL;
  ZT_CHECK_OK(zt_tensor_full(2, shape, ZT_DTYPE_F32, ZT_CPU, 1, &g));
  zt_mem_stats_get(ZT_CPU, &s);
  int64_t temp1 = s.current[ZT_MEM_TAG_TEMP];
  ZT_CHECK_OK(zt_backward(1, &l, &g, false));
  ZT_CHECK(zt_mem_tag_current() == ZT_MEM_TAG_ACTIVATION);
  zt_mem_stats_get(ZT_CPU, &s);
  ZT_CHECK(w->grad && w->grad->storage->tag == ZT_MEM_TAG_GRAD);
  ZT_CHECK(s.current[ZT_MEM_TAG_GRAD] == grad0 + 64);
  ZT_CHECK(s.current[ZT_MEM_TAG_TEMP] == temp1);
  ZT_CHECK(s.peak[ZT_MEM_TAG_TEMP] > temp0);
  zt_tensor_free(g);
  zt_tensor_free(l);
  zt_tensor_free(y);
  zt_tensor_free(w);
}

/* Allocations from many OpenMP threads at once keep exact totals. */
static void test_concurrent_accounting(void) {
  zt_mem_stats s0, s1;
  zt_mem_stats_get(DEV5, &s0);
#pragma omp parallel for schedule(static) num_threads(2)
  for (int i = 0; i < 2000; i++) {
    void *p = NULL;
    if (zt_mem_alloc((size_t)(i % 7 + 1) * 16, DEV5, (zt_mem_tag)(i % ZT_MEM_TAG_COUNT), &p) == ZT_OK)
      zt_mem_free(p, (size_t)(i % 7 + 1) * 16, DEV5, (zt_mem_tag)(i % ZT_MEM_TAG_COUNT));
  }
  zt_mem_stats_get(DEV5, &s1);
  ZT_CHECK(s1.current_total == s0.current_total);
  for (int t = 0; t < ZT_MEM_TAG_COUNT; t++) ZT_CHECK(s1.current[t] == 0);
  ZT_CHECK(s1.peak_total >= 16 && s1.peak_total <= 2 * 7 * 16);
  zt_mem_reset_peaks();
}

/* Freed big blocks are reused for the next allocation of the same size; the accounting
 * counts them as freed; empty_cache returns them. */
static void test_large_block_cache(void) {
  zt_mem_empty_cache();
  ZT_CHECK(zt_mem_cached_bytes() == 0);
  const char *env = getenv("ZT_ALLOC_CACHE_MB");
  if (env && atoi(env) == 0) { /* cache off (sanitizer runs): nothing is ever cached */
    int64_t big0[] = {3 << 20};
    zt_tensor *t = NULL;
    ZT_CHECK_OK(zt_tensor_empty(1, big0, ZT_DTYPE_F32, ZT_CPU, &t));
    zt_tensor_free(t);
    ZT_CHECK(zt_mem_cached_bytes() == 0);
    return;
  }
  int64_t big[] = {3 << 20}; /* 12 MiB of f32 */
  zt_tensor *a = NULL, *b = NULL, *c = NULL;
  ZT_CHECK_OK(zt_tensor_empty(1, big, ZT_DTYPE_F32, ZT_CPU, &a));
  void *pa = a->storage->data;
  int64_t live = zt_test_live_bytes();
  zt_tensor_free(a);
  ZT_CHECK(zt_test_live_bytes() == live - (int64_t)(12 << 20));
  ZT_CHECK(zt_mem_cached_bytes() >= (int64_t)(12 << 20));
  ZT_CHECK_OK(zt_tensor_empty(1, big, ZT_DTYPE_F32, ZT_CPU, &b));
  ZT_CHECK(b->storage->data == pa); /* reused, no fresh pages */
  ZT_CHECK(zt_mem_cached_bytes() == 0);
  int64_t small[] = {1000};
  ZT_CHECK_OK(zt_tensor_empty(1, small, ZT_DTYPE_F32, ZT_CPU, &c));
  zt_tensor_free(c); /* small blocks are not cached */
  ZT_CHECK(zt_mem_cached_bytes() == 0);
  zt_tensor_free(b);
  zt_mem_empty_cache();
  ZT_CHECK(zt_mem_cached_bytes() == 0);
}

/* Under a resident limit (zt__mem_set_resident_limit, what a memory plan sets), a fresh block
 * gives cached blocks back first so that the live bytes and the cached stay within it; without
 * one, the cache keeps them up to its own bound. */
static void test_resident_limit(void) {
  int64_t bound = zt_mem_cache_limit();
  zt_mem_empty_cache();
  zt_mem_set_cache_limit((int64_t)64 << 20);
  int64_t a_sz[] = {(int64_t)3 << 20}, b_sz[] = {(int64_t)2 << 20}; /* 12 and 8 MiB of f32: sizes the cache tells apart */
  zt_tensor *a = NULL, *b = NULL, *c = NULL;
  ZT_CHECK_OK(zt_tensor_empty(1, a_sz, ZT_DTYPE_F32, ZT_CPU, &a)); /* both live: the high mark has room for both */
  ZT_CHECK_OK(zt_tensor_empty(1, b_sz, ZT_DTYPE_F32, ZT_CPU, &b));
  zt_tensor_free(a);
  ZT_CHECK(zt_mem_cached_bytes() == (int64_t)12 << 20);
  zt_tensor_free(b);
  ZT_CHECK(zt_mem_cached_bytes() == (int64_t)20 << 20);
  /* room for the live bytes and one more 8 MiB block: the 12 MiB one (the oldest) goes back */
  zt__mem_set_resident_limit(zt_test_live_bytes() + ((int64_t)16 << 20));
  ZT_CHECK_OK(zt_tensor_empty(1, a_sz, ZT_DTYPE_F32, ZT_CPU, &a)); /* a cache hit: nothing to give back */
  ZT_CHECK(zt_mem_cached_bytes() == (int64_t)8 << 20);
  ZT_CHECK_OK(zt_tensor_empty(1, (int64_t[]){(int64_t)1 << 20}, ZT_DTYPE_F32, ZT_CPU, &c)); /* fresh 4 MiB: 8 MiB back */
  ZT_CHECK(zt_mem_cached_bytes() == 0);
  ZT_CHECK(zt_test_live_bytes() + zt_mem_cached_bytes() <= zt__mem_resident_limit());
  zt_tensor_free(c);
  zt_tensor_free(a);
  zt__mem_set_resident_limit(0);
  zt_mem_empty_cache();
  zt_mem_set_cache_limit(bound);
}

/* The cache never holds more bytes than the most that were live at once (its high mark): a
 * freed block that would pass it sends the oldest cached ones back first. */
static void test_cache_high_mark(void) {
  const char *env = getenv("ZT_ALLOC_CACHE_MB");
  if (env && atoi(env) == 0) return; /* cache off (sanitizer runs) */
  zt_mem_empty_cache();
  int64_t live = zt_test_live_bytes(), high = live + ((int64_t)16 << 20);
  zt__host_cache_set_high(high); /* no allocation below passes it: it stays */
  int64_t a_sz[] = {(int64_t)3 << 20}, b_sz[] = {(int64_t)2 << 20}, small_sz[] = {(int64_t)16 << 10};
  zt_tensor *a = NULL, *b = NULL, *s = NULL;
  ZT_CHECK_OK(zt_tensor_empty(1, a_sz, ZT_DTYPE_F32, ZT_CPU, &a)); /* 12 MiB */
  zt_tensor_free(a);
  ZT_CHECK(zt_mem_cached_bytes() == (int64_t)12 << 20);
  ZT_CHECK_OK(zt_tensor_empty(1, b_sz, ZT_DTYPE_F32, ZT_CPU, &b)); /* 8 MiB, fresh */
  zt_tensor_free(b); /* 12 + 8 within the mark: both kept; else the 12 MiB one (the oldest) goes */
  ZT_CHECK(zt_mem_cached_bytes() == ((int64_t)20 << 20 <= high ? (int64_t)20 << 20 : (int64_t)8 << 20));
  zt_mem_empty_cache();
  zt__host_cache_set_high((int64_t)1 << 20); /* a 1 MiB mark: an 8 MiB block freed is not kept */
  ZT_CHECK_OK(zt_tensor_empty(1, b_sz, ZT_DTYPE_F32, ZT_CPU, &b));
  zt__host_cache_set_high((int64_t)1 << 20);
  zt_tensor_free(b);
  ZT_CHECK(zt_mem_cached_bytes() == 0);
  /* 64 KiB blocks and up are cached (the page-aligned ones): a 64 KiB f32 block is reused */
  zt__host_cache_set_high(high);
  ZT_CHECK_OK(zt_tensor_empty(1, small_sz, ZT_DTYPE_F32, ZT_CPU, &s));
  void *ps = s->storage->data;
  zt_tensor_free(s);
  ZT_CHECK_OK(zt_tensor_empty(1, small_sz, ZT_DTYPE_F32, ZT_CPU, &s));
  ZT_CHECK(s->storage->data == ps);
  zt_tensor_free(s);
  zt_mem_empty_cache();
  ZT_CHECK(zt_mem_cached_bytes() == 0);
}

/* A freed block the cache does not keep goes back to the kernel: the allocator fixes glibc's mmap
 * threshold at 64 KiB, so after a 20 MiB block is freed (which would raise glibc's own threshold
 * to its size) a 16 MiB block is still mapped on its own, not carved from malloc's heap, where it
 * would stay resident after its free (host_alloc.c). Sanitizer builds replace malloc: not there. */
static void test_freed_blocks_leave(void) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return;
#else
  int64_t bound = zt_mem_cache_limit();
  zt_mem_set_cache_limit(0); /* nothing cached */
  zt_tensor *t = NULL;
  ZT_CHECK_OK(zt_tensor_empty(1, (int64_t[]){(int64_t)5 << 20}, ZT_DTYPE_F32, ZT_CPU, &t)); /* 20 MiB */
  zt_tensor_free(t);
  size_t mapped = mallinfo2().hblkhd;
  ZT_CHECK_OK(zt_tensor_empty(1, (int64_t[]){(int64_t)4 << 20}, ZT_DTYPE_F32, ZT_CPU, &t)); /* 16 MiB */
  ZT_CHECK(mallinfo2().hblkhd >= mapped + ((size_t)16 << 20));
  zt_tensor_free(t);
  ZT_CHECK(mallinfo2().hblkhd == mapped);
  zt_mem_set_cache_limit(bound);
#endif
}

int main(void) {
  ZT_RUN(test_large_block_cache);
  ZT_RUN(test_cache_high_mark);
  ZT_RUN(test_resident_limit);
  ZT_RUN(test_freed_blocks_leave);
  ZT_RUN(test_current_and_peak_per_tag);
  ZT_RUN(test_retag);
  ZT_RUN(test_report);
  ZT_RUN(test_replaceable_allocator);
  ZT_RUN(test_peak_rss);
  ZT_RUN(test_thread_tag);
  ZT_RUN(test_backward_tags);
  ZT_RUN(test_concurrent_accounting);
  return zt_test_finish();
}
