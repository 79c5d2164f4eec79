/* Stores (zt/store.h): every kind gives back what was put (memory and disk bitwise, bf16
 * rounded to nearest even, other dtypes as they are), accounting rises and falls on the
 * store's device under the item's tag, the disk store reuses freed extents and empties its
 * file, asynchronous gets (prefetch / wait / cancel) on the helper thread, device bytes
 * staged through their backend (the guarded device), and failing stores: a truncated spill
 * file, a write that fails in an implementation, both on the caller's thread and the
 * helper's. */
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zt_test.h"
#include "guard_backend.h"
#include "core/backend.h"
#include "core/store_internal.h"
#include <pthread.h>
#include "zt/ops.h"
#include "zt/store.h"

static const zt_device disk_dev = {ZT_DEVICE_DISK, 0};

static int64_t bytes_on(zt_device d, zt_mem_tag tag) {
  zt_mem_stats s;
  zt_mem_stats_get(d, &s);
  return s.current[tag];
}

static zt_store_stats stats_of(const zt_store *s) {
  zt_store_stats st;
  zt_store_stats_get(s, &st);
  return st;
}

typedef enum kind { KIND_MEMORY, KIND_BF16, KIND_DISK, KIND_COUNT } kind;
static const char *const kind_names[] = {"memory", "bf16", "disk"};

static zt_store *store_new(kind k) {
  zt_store *s = NULL;
  if (k == KIND_MEMORY) ZT_CHECK_OK(zt_store_memory_new(&s));
  else if (k == KIND_BF16) ZT_CHECK_OK(zt_store_bf16_new(&s));
  else ZT_CHECK_OK(zt_store_disk_new(zt_test_tmpdir(), "zt_store_test", &s));
  if (s) ZT_CHECK(!strcmp(zt_store_kind(s), kind_names[k]));
  return s;
}

/* n reproducible values of dt in host memory (malloc'd), with a NaN and infinities among floats. */
static void *values(zt_dtype dt, int64_t n, uint64_t seed) {
  zt_tensor *t = zt_test_rand(1, (int64_t[]){n}, dt, -3, 3, seed);
  void *p = malloc((size_t)n * zt_dtype_size(dt)), *d = NULL;
  if (t && p && zt_tensor_data(t, &d) == ZT_OK) memcpy(p, d, (size_t)n * zt_dtype_size(dt));
  if (dt == ZT_DTYPE_F32 && n > 3) ((float *)p)[1] = NAN, ((float *)p)[2] = INFINITY, ((float *)p)[3] = -0.0f;
  zt_tensor_free(t);
  return p;
}

/* What the bf16 store gives back for x (f32 or f64 widened). */
static bool bf16_equal(const void *want_src, const void *got, zt_dtype dt, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    double x = dt == ZT_DTYPE_F32 ? ((const float *)want_src)[i] : ((const double *)want_src)[i];
    double y = dt == ZT_DTYPE_F32 ? ((const float *)got)[i] : ((const double *)got)[i];
    double r = zt_bf16_to_f32(zt_f32_to_bf16((float)x));
    if (!(r == y || (isnan(r) && isnan(y))) || (r == 0 && signbit(r) != signbit(y))) return false;
  }
  return true;
}

/* ------------------------------------------------ round trips and accounting */
static void round_trip(kind k) {
  zt_store *s = store_new(k);
  if (!s) return;
  zt_device dev = zt_store_device(s);
  ZT_CHECK(zt_device_equal(dev, k == KIND_DISK ? disk_dev : ZT_CPU));
  const zt_dtype dts[] = {ZT_DTYPE_F32, ZT_DTYPE_F64, ZT_DTYPE_BF16, ZT_DTYPE_I32, ZT_DTYPE_I64, ZT_DTYPE_F32};
  const int64_t ns[] = {4099, 1000, 777, 513, 64, 0};
  enum { N = 6 };
  zt_store_item it[N];
  void *src[N];
  int64_t before = bytes_on(dev, ZT_MEM_TAG_OPTIM), held = 0;
  for (int i = 0; i < N; i++) {
    src[i] = values(dts[i], ns[i] ? ns[i] : 1, 40 + (uint64_t)i);
    ZT_CHECK_OK(zt_store_put(s, ZT_CPU, src[i], (size_t)ns[i] * zt_dtype_size(dts[i]), dts[i], ZT_MEM_TAG_OPTIM, &it[i]));
    size_t nb = (size_t)ns[i] * zt_dtype_size(dts[i]);
    bool rounds = k == KIND_BF16 && (dts[i] == ZT_DTYPE_F32 || dts[i] == ZT_DTYPE_F64);
    ZT_CHECK(it[i].nbytes == nb && it[i].held == (rounds ? (size_t)ns[i] * 2 : nb) && it[i].tag == ZT_MEM_TAG_OPTIM);
    held += (int64_t)it[i].held;
  }
  memset(src[0], 0, 16); /* the store took a copy: the source may change or go */
  ZT_CHECK(bytes_on(dev, ZT_MEM_TAG_OPTIM) - before == held);
  zt_store_stats st = stats_of(s);
  ZT_CHECK(st.items == N && st.bytes_held == held && st.peak_bytes_held == held && st.puts == N);
  for (int rep = 0; rep < 2; rep++) /* get leaves the store as it was */
    for (int i = 1; i < N; i++) {
      size_t nb = (size_t)ns[i] * zt_dtype_size(dts[i]);
      void *got = malloc(nb ? nb : 1);
      ZT_CHECK_OK(zt_store_get(s, &it[i], ZT_CPU, got));
      bool rounds = k == KIND_BF16 && (dts[i] == ZT_DTYPE_F32 || dts[i] == ZT_DTYPE_F64) && nb > 0;
      if (rounds) {
        ZT_CHECK(bf16_equal(src[i], got, dts[i], ns[i]));
        ZT_CHECK(memcmp(src[i], got, nb) != 0); /* it did round */
      } else {
        ZT_CHECK(memcmp(src[i], got, nb) == 0);
      }
      free(got);
    }
  /* the first item, f32 with NaN / inf / -0 among its values */
  float *got = malloc(it[0].nbytes);
  float *want = values(ZT_DTYPE_F32, ns[0], 40);
  ZT_CHECK_OK(zt_store_get(s, &it[0], ZT_CPU, got));
  if (k == KIND_BF16) ZT_CHECK(bf16_equal(want, got, ZT_DTYPE_F32, ns[0]));
  else ZT_CHECK(memcmp(want, got, it[0].nbytes) == 0);
  ZT_CHECK(isnan(got[1]) && isinf(got[2]) && got[3] == 0 && signbit(got[3]));
  free(got);
  free(want);
  for (int i = 0; i < N; i++) {
    zt_store_drop(s, &it[i]);
    ZT_CHECK(it[i].nbytes == 0 && it[i].held == 0);
    free(src[i]);
  }
  ZT_CHECK(bytes_on(dev, ZT_MEM_TAG_OPTIM) == before);
  st = stats_of(s);
  ZT_CHECK(st.items == 0 && st.bytes_held == 0 && st.peak_bytes_held == held && st.gets == 2 * (N - 1) + 1);
  zt_store_free(s);
}

static void test_round_trip(void) {
  zt_test_tmpdir_make("store");
  int64_t live = zt_test_live_bytes();
  for (int k = 0; k < KIND_COUNT; k++) round_trip((kind)k);
  ZT_CHECK(zt_test_live_bytes() == live && bytes_on(disk_dev, ZT_MEM_TAG_OPTIM) == 0);
  zt_test_tmpdir_remove();
}

/* ------------------------------------------------ the disk store's spill file */
static int64_t file_size(int fd) {
  struct stat sb;
  return fd >= 0 && fstat(fd, &sb) == 0 ? (int64_t)sb.st_size : -1;
}

static zt_store *disk_new(zt_store_direct direct, int qd, size_t chunk) {
  zt_store *s = NULL;
  zt_store_disk_options o = {zt_test_tmpdir(), "zt_store_test", direct, qd, chunk};
  ZT_CHECK_OK(zt_store_disk_new_opts(&o, &s));
  return s;
}

static zt_store_io_stats io_of(const zt_store *s) {
  zt_store_io_stats st;
  zt_store_io_stats_get(s, &st);
  return st;
}

/* Extents are 4096-aligned with direct I/O (the last page padded on disk), 64 without. */
static void disk_extents(zt_store_direct direct) {
  const char *dir = zt_test_tmpdir_make("store");
  zt_store *s = disk_new(direct, 0, 0);
  if (!s || !dir) return;
  ZT_CHECK(io_of(s).direct == (direct == ZT_STORE_DIRECT_ON)); /* the test directory's file system has O_DIRECT */
  const int64_t A = direct == ZT_STORE_DIRECT_ON ? 4096 : 64;
#define UP(n) (((n) + A - 1) / A * A)
  /* unlinked at once: nothing in the directory */
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
  if (d) closedir(d);
  ZT_CHECK(n == 0);
  int fd = zt_test_open_fd(dir, "zt_store_test_");
  ZT_CHECK(fd >= 0);
  char buf[4096];
  for (int i = 0; i < (int)sizeof buf; i++) buf[i] = (char)(i * 7);
  zt_store_item a, b, c, e2;
  ZT_CHECK_OK(zt_store_put(s, ZT_CPU, buf, 1000, ZT_DTYPE_I32, ZT_MEM_TAG_ACTIVATION, &a));
  ZT_CHECK_OK(zt_store_put(s, ZT_CPU, buf + 8, 3000, ZT_DTYPE_I32, ZT_MEM_TAG_ACTIVATION, &b));
  ZT_CHECK_OK(zt_store_put(s, ZT_CPU, buf + 16, 500, ZT_DTYPE_I32, ZT_MEM_TAG_ACTIVATION, &c));
  ZT_CHECK(a.off == 0 && b.off == UP(1000) && c.off == UP(1000) + UP(3000));
  ZT_CHECK(file_size(fd) == c.off + (direct == ZT_STORE_DIRECT_ON ? 4096 : 500));
  ZT_CHECK(bytes_on(disk_dev, ZT_MEM_TAG_ACTIVATION) == 4500); /* held bytes, not the padding */
  zt_store_drop(s, &b);
  ZT_CHECK_OK(zt_store_put(s, ZT_CPU, buf + 24, 2000, ZT_DTYPE_I32, ZT_MEM_TAG_ACTIVATION, &e2));
  ZT_CHECK(e2.off == UP(1000)); /* first fit: b's extent */
#undef UP
  char got[4096];
  ZT_CHECK_OK(zt_store_get(s, &c, ZT_CPU, got));
  ZT_CHECK(memcmp(got, buf + 16, 500) == 0);
  ZT_CHECK_OK(zt_store_get(s, &e2, ZT_CPU, got));
  ZT_CHECK(memcmp(got, buf + 24, 2000) == 0);
  zt_store_drop(s, &a);
  zt_store_drop(s, &e2);
  ZT_CHECK(file_size(fd) > 0);
  zt_store_drop(s, &c);
  ZT_CHECK(file_size(fd) == 0); /* empty: truncated */
  ZT_CHECK(bytes_on(disk_dev, ZT_MEM_TAG_ACTIVATION) == 0);
  ZT_CHECK_OK(zt_store_put(s, ZT_CPU, buf, 64, ZT_DTYPE_I32, ZT_MEM_TAG_ACTIVATION, &a));
  ZT_CHECK(a.off == 0); /* from the start again */
  zt_store_drop(s, &a);
  zt_store_free(s);
  ZT_CHECK(zt_test_open_fd(dir, "zt_store_test_") < 0); /* closed */
  zt_test_tmpdir_remove();
}

static void test_disk_extents(void) {
  disk_extents(ZT_STORE_DIRECT_ON);
  disk_extents(ZT_STORE_DIRECT_OFF);
}

/* ------------------------------------------------ the I/O engine */
/* A page-aligned buffer of n bytes plus slack, so base + k is aligned for k = 0 only. */
static char *page_buf(size_t n) { return aligned_alloc(4096, (n + 2 * 4096) / 4096 * 4096); }

/* Odd sizes (1 byte, a page -1 / +1, 10 MiB + 3 over many chunks) from aligned and unaligned
 * sources into aligned and unaligned destinations, bytes around the destination untouched;
 * the stats count every byte and request. Through the implementation's put / get (the store's
 * dtype check would refuse 1 byte). */
static void odd_sizes(zt_store_direct direct) {
  enum { CHUNK = 64 << 10 };
  zt_store *s = disk_new(direct, 3, CHUNK);
  if (!s) return;
  const size_t sizes[] = {1, 4095, 4096, 4097, CHUNK + 5, (10u << 20) + 3};
  enum { NS = sizeof sizes / sizeof *sizes };
  char *src = page_buf(sizes[NS - 1] + 64), *dst = page_buf(sizes[NS - 1] + 64);
  for (size_t i = 0; i < sizes[NS - 1] + 64; i++) src[i] = (char)(i * 13 + (i >> 9) + 1);
  int64_t want_bytes = 0, want_requests = 0, temp0 = bytes_on(ZT_CPU, ZT_MEM_TAG_TEMP);
  for (int k = 0; k < NS; k++)
    for (int sa = 0; sa < 2; sa++)
      for (int da = 0; da < 2; da++) {
        size_t n = sizes[k], so = sa ? 1 : 0, dof = da ? 3 : 0;
        zt_store_item it = {.nbytes = n, .dtype = ZT_DTYPE_F32, .tag = ZT_MEM_TAG_OPTIM};
        ZT_CHECK_OK(s->ops->put(s->ctx, src + so, &it));
        memset(dst, 0x5a, n + 16);
        ZT_CHECK_OK(s->ops->get(s->ctx, &it, dst + dof));
        ZT_CHECK(memcmp(dst + dof, src + so, n) == 0);
        bool around = dst[dof + n] == 0x5a && dst[dof + n + 1] == 0x5a && (!dof || dst[0] == 0x5a);
        ZT_CHECK(around);
        if (memcmp(dst + dof, src + so, n) || !around)
          fprintf(stderr, "  at %zu bytes, source +%zu, destination +%zu\n", n, so, dof);
        s->ops->drop(s->ctx, &it);
        want_bytes += (int64_t)n;
        want_requests += (int64_t)((n + CHUNK - 1) / CHUNK);
      }
  zt_store_io_stats io = io_of(s);
  ZT_CHECK(io.direct == (direct == ZT_STORE_DIRECT_ON) && io.queue_depth == 3 && io.chunk_bytes == CHUNK);
  ZT_CHECK(io.write_bytes == want_bytes && io.read_bytes == want_bytes);
  ZT_CHECK(io.write_requests == want_requests && io.read_requests == want_requests);
  ZT_CHECK(io.write_seconds > 0 && io.read_seconds > 0);
  ZT_CHECK(direct == ZT_STORE_DIRECT_ON ? io.bounce_bytes > 0 : io.bounce_bytes == 0);
  ZT_CHECK(bytes_on(disk_dev, ZT_MEM_TAG_OPTIM) == 0);
  zt_store_free(s);
  ZT_CHECK(bytes_on(ZT_CPU, ZT_MEM_TAG_TEMP) == temp0); /* bounce buffers given back */
  free(src);
  free(dst);
}

static void test_disk_odd_sizes(void) {
  zt_test_tmpdir_make("store");
  odd_sizes(ZT_STORE_DIRECT_ON);
  odd_sizes(ZT_STORE_DIRECT_OFF);
  /* a file system that refuses O_DIRECT: buffered, and the stats say so */
  zt__store_disk_refuse_direct(true);
  zt_store *s = disk_new(ZT_STORE_DIRECT_ON, 0, 0);
  zt__store_disk_refuse_direct(false);
  if (s) {
    zt_store_io_stats io = io_of(s);
    ZT_CHECK(!io.direct && io.queue_depth == 4 && io.chunk_bytes == 4 << 20); /* the defaults */
    float x[3] = {1, 2, 3}, y[3];
    zt_store_item it, it2;
    ZT_CHECK_OK(zt_store_put(s, ZT_CPU, x, sizeof x, ZT_DTYPE_F32, ZT_MEM_TAG_TEMP, &it));
    ZT_CHECK_OK(zt_store_put(s, ZT_CPU, x, sizeof x, ZT_DTYPE_F32, ZT_MEM_TAG_TEMP, &it2));
    ZT_CHECK(it2.off == 64); /* buffered: cache-line extents */
    ZT_CHECK_OK(zt_store_get(s, &it2, ZT_CPU, y));
    ZT_CHECK(memcmp(x, y, sizeof x) == 0);
    zt_store_drop(s, &it);
    zt_store_drop(s, &it2);
    zt_store_free(s);
  }
  /* memory stores do no I/O: zeros */
  ZT_CHECK_OK(zt_store_memory_new(&s));
  zt_store_io_stats io = io_of(s);
  ZT_CHECK(io.queue_depth == 0 && io.write_bytes == 0 && !io.direct);
  zt_store_free(s);
  zt_store_io_stats_get(NULL, &io);
  ZT_CHECK(io.chunk_bytes == 0);
  /* options out of range */
  zt_store_disk_options bad = {.queue_depth = 65};
  ZT_CHECK_ERR(zt_store_disk_new_opts(&bad, &s), ZT_STATUS_INVALID_ARG, "queue_depth 65");
  bad = (zt_store_disk_options){.chunk_bytes = 100000};
  ZT_CHECK_ERR(zt_store_disk_new_opts(&bad, &s), ZT_STATUS_INVALID_ARG, "chunk_bytes 100000");
  bad = (zt_store_disk_options){.direct = (zt_store_direct)7};
  ZT_CHECK_ERR(zt_store_disk_new_opts(&bad, &s), ZT_STATUS_INVALID_ARG, "ZT_STORE_DIRECT_ON");
  ZT_CHECK(s == NULL);
  zt_test_tmpdir_remove();
}

/* Many items at once: prefetches on the helper thread beside threads that put, get and drop
 * their own items, all through one engine (small chunks: the items interleave). */
typedef struct churn {
  zt_store *s;
  int id;
  bool ok;
} churn;

static void *churn_main(void *arg) {
  churn *c = arg;
  c->ok = true;
  for (int round = 0; round < 6; round++) {
    size_t n = (size_t)(4 * (1000 + 3001 * c->id + 17 * round) * 2 + 4096 * round);
    float *x = malloc(n), *y = malloc(n);
    for (size_t i = 0; i < n / 4; i++) x[i] = (float)(i + (size_t)c->id * 7 + (size_t)round);
    zt_store_item it;
    if (zt_store_put(c->s, ZT_CPU, x, n, ZT_DTYPE_F32, ZT_MEM_TAG_ACTIVATION, &it) ||
        zt_store_get(c->s, &it, ZT_CPU, y) || memcmp(x, y, n))
      c->ok = false;
    zt_store_drop(c->s, &it);
    free(x);
    free(y);
  }
  return NULL;
}

static void test_disk_concurrent(void) {
  zt_test_tmpdir_make("store");
  zt_store *s = disk_new(ZT_STORE_DIRECT_ON, 4, 64 << 10);
  if (!s) return;
  enum { N = 24, T = 3 };
  zt_store_item it[N];
  char *src[N], *dst[N];
  size_t n[N];
  zt_store_request *r[N];
  int64_t total = 0;
  for (int i = 0; i < N; i++) {
    n[i] = (size_t)(4 * (777 + 40000 * i));
    src[i] = malloc(n[i]);
    dst[i] = malloc(n[i] + 1) + (i % 2); /* every other one unaligned */
    for (size_t j = 0; j < n[i]; j++) src[i][j] = (char)(j * 29 + (size_t)i);
    ZT_CHECK_OK(zt_store_put(s, ZT_CPU, src[i], n[i], ZT_DTYPE_F32, ZT_MEM_TAG_ACTIVATION, &it[i]));
    total += (int64_t)n[i];
  }
  for (int i = 0; i < N; i++) ZT_CHECK_OK(zt_store_prefetch(s, &it[i], ZT_CPU, dst[i], &r[i]));
  pthread_t th[T];
  churn c[T];
  for (int t = 0; t < T; t++) {
    c[t] = (churn){s, t, false};
    ZT_CHECK(pthread_create(&th[t], NULL, churn_main, &c[t]) == 0);
  }
  for (int i = 0; i < N; i++) {
    ZT_CHECK_OK(zt_store_wait(r[i]));
    ZT_CHECK(memcmp(src[i], dst[i], n[i]) == 0);
  }
  for (int t = 0; t < T; t++) {
    pthread_join(th[t], NULL);
    ZT_CHECK(c[t].ok);
  }
  zt_store_io_stats io = io_of(s);
  ZT_CHECK(io.write_bytes >= total && io.read_bytes >= total);
  for (int i = 0; i < N; i++) {
    zt_store_drop(s, &it[i]);
    free(src[i]);
    free(dst[i] - (i % 2));
  }
  ZT_CHECK(bytes_on(disk_dev, ZT_MEM_TAG_ACTIVATION) == 0);
  zt_store_free(s);
  zt_test_tmpdir_remove();
}

/* A chunk write that fails as a full disk would: the put fails naming the file's directory,
 * the offset and what to do, and holds nothing (extent free, accounting as before). A read
 * that comes back short: the get fails (here and on the helper) and the item stays readable. */
static void test_disk_faults(void) {
  const char *dir = zt_test_tmpdir_make("store");
  zt_store *s = disk_new(ZT_STORE_DIRECT_ON, 2, 64 << 10);
  if (!s || !dir) return;
  enum { N = 200000 }; /* 4 chunks: the faults land mid-item */
  char *src = page_buf(N), *got = page_buf(N);
  for (int i = 0; i < N; i++) src[i] = (char)(i * 3 + 1);
  zt_store_item a, b;
  ZT_CHECK_OK(zt_store_put(s, ZT_CPU, src, 4096, ZT_DTYPE_F32, ZT_MEM_TAG_GRAD, &a));
  int64_t grad0 = bytes_on(disk_dev, ZT_MEM_TAG_GRAD), temp0 = bytes_on(ZT_CPU, ZT_MEM_TAG_TEMP);
  ZT_CHECK(zt__store_disk_fault_at(s, ZT__IO_FAULT_WRITE_ENOSPC, 3));
  ZT_CHECK_ERR(zt_store_put(s, ZT_CPU, src, N, ZT_DTYPE_F32, ZT_MEM_TAG_GRAD, &b), ZT_STATUS_IO,
               "No space left on device");
  ZT_CHECK(strstr(zt_last_error(), dir) && strstr(zt_last_error(), "at offset") &&
           strstr(zt_last_error(), "free disk space there or give the store another directory"));
  ZT_CHECK(b.nbytes == 0 && stats_of(s).items == 1 && stats_of(s).bytes_held == 4096);
  ZT_CHECK(bytes_on(disk_dev, ZT_MEM_TAG_GRAD) == grad0);
  ZT_CHECK_OK(zt_store_put(s, ZT_CPU, src, N, ZT_DTYPE_F32, ZT_MEM_TAG_GRAD, &b)); /* room again */
  ZT_CHECK(b.off == 4096); /* the failed put's extent was given back */
  ZT_CHECK(zt__store_disk_fault_at(s, ZT__IO_FAULT_READ_SHORT, 2));
  ZT_CHECK_ERR(zt_store_get(s, &b, ZT_CPU, got), ZT_STATUS_IO, "unexpected end of file");
  ZT_CHECK(strstr(zt_last_error(), dir) && strstr(zt_last_error(), "a later get may try again"));
  ZT_CHECK_OK(zt_store_get(s, &b, ZT_CPU, got));
  ZT_CHECK(memcmp(got, src, N) == 0);
  ZT_CHECK(zt__store_disk_fault_at(s, ZT__IO_FAULT_READ_SHORT, 4)); /* the last chunk, on the helper */
  zt_store_request *r = NULL;
  ZT_CHECK_OK(zt_store_prefetch(s, &b, ZT_CPU, got + 1, &r));
  for (int t = 0; t < 5000 && !zt_store_request_done(r); t++) usleep(1000);
  ZT_CHECK_ERR(zt_store_wait(r), ZT_STATUS_IO, "the helper thread could not get 200000 bytes back");
  ZT_CHECK(strstr(zt_last_error(), "unexpected end of file") != NULL);
  ZT_CHECK_OK(zt_store_get(s, &b, ZT_CPU, got + 1));
  ZT_CHECK(memcmp(got + 1, src, N) == 0);
  ZT_CHECK(!zt__store_disk_fault_at(NULL, ZT__IO_FAULT_READ_SHORT, 1));
  zt_store_drop(s, &a);
  zt_store_drop(s, &b);
  zt_store_free(s);
  ZT_CHECK(bytes_on(disk_dev, ZT_MEM_TAG_GRAD) == 0 && bytes_on(ZT_CPU, ZT_MEM_TAG_TEMP) == temp0);
  free(src);
  free(got);
  zt_test_tmpdir_remove();
}

/* ------------------------------------------------ prefetch / wait / cancel */
static void test_prefetch(void) {
  zt_test_tmpdir_make("store");
  for (int k = 0; k < KIND_COUNT; k++) {
    zt_store *s = store_new((kind)k);
    if (!s) continue;
    enum { N = 8, E = 1 << 16 };
    zt_store_item it[N];
    float *src[N], *dst[N];
    zt_store_request *r[N];
    for (int i = 0; i < N; i++) {
      src[i] = values(ZT_DTYPE_F32, E, 100 + (uint64_t)i);
      dst[i] = malloc(E * sizeof(float));
      ZT_CHECK_OK(zt_store_put(s, ZT_CPU, src[i], E * sizeof(float), ZT_DTYPE_F32, ZT_MEM_TAG_TEMP, &it[i]));
    }
    for (int i = 0; i < N; i++) ZT_CHECK_OK(zt_store_prefetch(s, &it[i], ZT_CPU, dst[i], &r[i]));
    zt_store_cancel(r[3]); /* queued or running: either way gone, dst[3] untouched afterwards */
    zt_store_cancel(NULL);
    for (int i = N - 1; i >= 0; i--) { /* the last ones are likely not started: done by wait */
      if (i == 3) continue;
      ZT_CHECK_OK(zt_store_wait(r[i]));
      if (k == KIND_BF16) ZT_CHECK(bf16_equal(src[i], dst[i], ZT_DTYPE_F32, E));
      else ZT_CHECK(memcmp(src[i], dst[i], E * sizeof(float)) == 0);
    }
    zt_store_stats st = stats_of(s);
    ZT_CHECK(st.threads_started == 1 && !st.helper_failed);
    ZT_CHECK(st.helper_gets <= st.gets && st.gets >= N - 1 && st.gets <= N);
    /* a request the helper has finished is done; its wait does not block */
    zt_store_request *q = NULL;
    ZT_CHECK_OK(zt_store_prefetch(s, &it[0], ZT_CPU, dst[0], &q));
    for (int t = 0; t < 5000 && q && !zt_store_request_done(q); t++) usleep(1000);
    ZT_CHECK(q && zt_store_request_done(q));
    if (q) ZT_CHECK_OK(zt_store_wait(q));
    ZT_CHECK(stats_of(s).helper_gets >= 1);
    for (int i = 0; i < N; i++) {
      zt_store_drop(s, &it[i]);
      free(src[i]);
      free(dst[i]);
    }
    zt_store_free(s);
  }
  zt_test_tmpdir_remove();
}

/* Device bytes the host cannot touch go through their backend, on the helper thread too. */
static void test_guarded_device(void) {
  zt_test_guard_register();
  zt_test_tmpdir_make("store");
  for (int k = 0; k < KIND_COUNT; k++) {
    zt_store *s = store_new((kind)k);
    zt_tensor *a = zt_test_rand(2, (int64_t[]){64, 33}, ZT_DTYPE_F32, -1, 1, 7), *g = NULL, *back = NULL, *back2 = NULL;
    if (!s || !a) continue;
    ZT_CHECK_OK(zt__tensor_to_device(a, ZT_GUARDED, ZT_MEM_TAG_TEMP, &g));
    ZT_CHECK_OK(zt_tensor_empty(2, a->shape, ZT_DTYPE_F32, ZT_GUARDED, &back));
    ZT_CHECK_OK(zt_tensor_empty(2, a->shape, ZT_DTYPE_F32, ZT_GUARDED, &back2));
    zt_store_item it;
    zt_store_request *r = NULL;
    if (g && back && back2) {
      ZT_CHECK_OK(zt_store_put(s, ZT_GUARDED, g->storage->data, zt_tensor_nbytes(g), ZT_DTYPE_F32, ZT_MEM_TAG_TEMP, &it));
      ZT_CHECK(zt_test_guard_is_closed());
      ZT_CHECK_OK(zt_store_get(s, &it, ZT_GUARDED, back->storage->data));
      ZT_CHECK_OK(zt_store_prefetch(s, &it, ZT_GUARDED, back2->storage->data, &r));
      for (int t = 0; t < 5000 && !zt_store_request_done(r); t++) usleep(1000); /* on the helper */
      ZT_CHECK_OK(zt_store_wait(r));
      ZT_CHECK(zt_test_guard_is_closed());
      zt_tensor *want = NULL;
      if (k == KIND_BF16) {
        ZT_CHECK_OK(zt_cast(a, ZT_DTYPE_BF16, &want));
      } else {
        ZT_CHECK_OK(zt_tensor_clone_data(a, ZT_MEM_TAG_TEMP, &want));
      }
      zt_tensor *cb = NULL, *cb2 = NULL, *w32 = NULL;
      ZT_CHECK_OK(zt__tensor_to_device(back, ZT_CPU, ZT_MEM_TAG_TEMP, &cb));
      ZT_CHECK_OK(zt__tensor_to_device(back2, ZT_CPU, ZT_MEM_TAG_TEMP, &cb2));
      if (want) ZT_CHECK_OK(zt_cast(want, ZT_DTYPE_F32, &w32));
      ZT_CHECK(cb && cb2 && w32 && zt_test_bitwise_equal(cb, w32) && zt_test_bitwise_equal(cb2, w32));
      zt_test_free_all((zt_tensor *[]){want, cb, cb2, w32}, 4);
      zt_store_drop(s, &it);
    }
    zt_test_free_all((zt_tensor *[]){a, g, back, back2}, 4);
    zt_store_free(s);
  }
  zt_test_tmpdir_remove();
}

/* ------------------------------------------------ failing stores */
/* A truncated spill file: the get fails with the reader's message, on this thread and on
 * the helper's (whose failure says so). */
static void test_truncated_spill_file(void) {
  const char *dir = zt_test_tmpdir_make("store");
  zt_store *s = store_new(KIND_DISK);
  if (!s || !dir) return;
  char buf[8192] = {1, 2, 3};
  zt_store_item a, b;
  ZT_CHECK_OK(zt_store_put(s, ZT_CPU, buf, 4096, ZT_DTYPE_F32, ZT_MEM_TAG_TEMP, &a));
  ZT_CHECK_OK(zt_store_put(s, ZT_CPU, buf, 4096, ZT_DTYPE_F32, ZT_MEM_TAG_TEMP, &b));
  int fd = zt_test_open_fd(dir, "zt_store_test_");
  ZT_CHECK(fd >= 0 && ftruncate(fd, 4096) == 0); /* b's bytes are gone */
  char got[4096];
  ZT_CHECK_OK(zt_store_get(s, &a, ZT_CPU, got));
  ZT_CHECK_ERR(zt_store_get(s, &b, ZT_CPU, got), ZT_STATUS_IO, "unexpected end of file");
  ZT_CHECK(strstr(zt_last_error(), dir) != NULL); /* names where the file is */
  zt_store_request *r = NULL;
  ZT_CHECK_OK(zt_store_prefetch(s, &b, ZT_CPU, got, &r));
  for (int t = 0; t < 5000 && !zt_store_request_done(r); t++) usleep(1000);
  ZT_CHECK_ERR(zt_store_wait(r), ZT_STATUS_IO, "the helper thread could not get 4096 bytes back");
  ZT_CHECK(strstr(zt_last_error(), "unexpected end of file") != NULL);
  zt_store_drop(s, &a);
  zt_store_drop(s, &b);
  ZT_CHECK(bytes_on(disk_dev, ZT_MEM_TAG_TEMP) == 0);
  zt_store_free(s);
  zt_test_tmpdir_remove();
}

/* A store whose device fills up: a memory store under a byte budget, failing writes past it
 * as a full disk would, and failing its next `fail_gets` gets. */
typedef struct limited {
  int64_t budget, used;
  int fail_gets;
} limited;

static zt_status limited_put(void *ctx, const void *src, zt_store_item *it) {
  limited *l = ctx;
  if (l->used + (int64_t)it->nbytes > l->budget)
    return zt_set_error(ZT_STATUS_IO, "limited store: no space left for %zu bytes (%lld of %lld used)", it->nbytes,
                        (long long)l->used, (long long)l->budget);
  it->held = it->nbytes;
  zt_status s = zt_mem_alloc(it->held, ZT_CPU, it->tag, &it->ptr);
  if (s) return s;
  memcpy(it->ptr, src, it->held);
  l->used += (int64_t)it->held;
  return ZT_OK;
}

static zt_status limited_get(void *ctx, const zt_store_item *it, void *dst) {
  limited *l = ctx;
  if (__atomic_load_n(&l->fail_gets, __ATOMIC_RELAXED) > 0) {
    __atomic_sub_fetch(&l->fail_gets, 1, __ATOMIC_RELAXED);
    return zt_set_error(ZT_STATUS_IO, "limited store: read error (simulated)");
  }
  memcpy(dst, it->ptr, it->nbytes);
  return ZT_OK;
}

static void limited_drop(void *ctx, const zt_store_item *it) {
  limited *l = ctx;
  l->used -= (int64_t)it->held;
  zt_mem_free(it->ptr, it->held, ZT_CPU, it->tag);
}

static void limited_free(void *ctx) { free(ctx); }

static const zt_store_ops limited_ops = {"limited", limited_put, limited_get, limited_drop, limited_free, NULL, NULL, NULL};

static zt_store *limited_new(int64_t budget, limited **ctx) {
  limited *l = calloc(1, sizeof *l);
  if (l) l->budget = budget;
  if (ctx) *ctx = l;
  zt_store *s = NULL;
  ZT_CHECK_OK(zt_store_new(&limited_ops, l, ZT_CPU, &s));
  return s;
}

static void test_failing_write(void) {
  int64_t live = zt_test_live_bytes();
  zt_store *s = limited_new(1000, NULL);
  if (!s) return;
  char buf[1024] = {0};
  zt_store_item a, b;
  ZT_CHECK_OK(zt_store_put(s, ZT_CPU, buf, 800, ZT_DTYPE_F32, ZT_MEM_TAG_TEMP, &a));
  ZT_CHECK_ERR(zt_store_put(s, ZT_CPU, buf, 400, ZT_DTYPE_F32, ZT_MEM_TAG_TEMP, &b), ZT_STATUS_IO,
               "no space left for 400 bytes");
  ZT_CHECK(b.nbytes == 0 && stats_of(s).items == 1 && stats_of(s).bytes_held == 800);
  zt_store_drop(s, &a);
  ZT_CHECK_OK(zt_store_put(s, ZT_CPU, buf, 400, ZT_DTYPE_F32, ZT_MEM_TAG_TEMP, &b)); /* room again */
  zt_store_drop(s, &b);
  zt_store_free(s);
  ZT_CHECK(zt_test_live_bytes() == live);
}

/* ------------------------------------------------ ranges in place */
/* get_range / put_range on an item of N f32 (not a whole number of pages): ranges that start
 * and end inside pages, cross pages and the disk store's 64 KiB requests, reach the item's end,
 * or are the whole item; each read checked against a model of the contents (bf16: rounded as a
 * put rounds) and, after each write, the whole item read back (bytes outside the range kept).
 * The held bytes and their accounting stay as they were; TEMP host pages are given back. */
static void ranges(zt_store *s, bool bf16) {
  enum { N = 20000 };
  float *v = values(ZT_DTYPE_F32, N, 11), *want = malloc(N * sizeof(float));
  char *got = page_buf(N * sizeof(float) + 64);
  memcpy(want, v, N * sizeof(float));
  zt_store_item it;
  ZT_CHECK_OK(zt_store_put(s, ZT_CPU, v, N * sizeof(float), ZT_DTYPE_F32, ZT_MEM_TAG_OPTIM, &it));
  zt_device dev = zt_store_device(s);
  int64_t held0 = bytes_on(dev, ZT_MEM_TAG_OPTIM), temp0 = bytes_on(ZT_CPU, ZT_MEM_TAG_TEMP);
  int64_t puts0 = stats_of(s).puts, items0 = stats_of(s).items;
  const int64_t rg[][2] = {{0, 1},        {1, 1025},   {1023, 1025}, {5, 6},       {1024, 3072}, {19990, 20000},
                           {17000, 20000}, {100, 18000}, {0, 20000},   {4095, 4097}, {8191, 16385}};
  enum { NR = sizeof rg / sizeof *rg };
  for (int r = 0; r < NR; r++) {
    size_t off = (size_t)rg[r][0] * 4, n = (size_t)(rg[r][1] - rg[r][0]) * 4;
    char *dst = got + (r % 2 ? 4 : 0); /* aligned and unaligned destinations */
    ZT_CHECK_OK(zt_store_get_range(s, &it, off, n, dst));
    bool ok = bf16 ? bf16_equal(want + rg[r][0], dst, ZT_DTYPE_F32, rg[r][1] - rg[r][0])
                   : memcmp(dst, (char *)want + off, n) == 0;
    ZT_CHECK(ok);
    if (!ok) fprintf(stderr, "  %s: get_range of elements [%lld, %lld)\n", zt_store_kind(s), (long long)rg[r][0],
                     (long long)rg[r][1]);
    /* new values for the range, from an unaligned source */
    float *w = values(ZT_DTYPE_F32, rg[r][1] - rg[r][0], 100 + (uint64_t)r);
    memcpy(got + 4, w, n);
    ZT_CHECK_OK(zt_store_put_range(s, &it, off, n, got + 4));
    memcpy((char *)want + off, w, n);
    free(w);
    ZT_CHECK_OK(zt_store_get(s, &it, ZT_CPU, got));
    ok = bf16 ? bf16_equal(want, got, ZT_DTYPE_F32, N) : memcmp(got, want, N * sizeof(float)) == 0;
    ZT_CHECK(ok);
    if (!ok) fprintf(stderr, "  %s: after put_range of elements [%lld, %lld)\n", zt_store_kind(s),
                     (long long)rg[r][0], (long long)rg[r][1]);
  }
  ZT_CHECK(bytes_on(dev, ZT_MEM_TAG_OPTIM) == held0 && bytes_on(ZT_CPU, ZT_MEM_TAG_TEMP) == temp0);
  ZT_CHECK(stats_of(s).puts == puts0 + NR && stats_of(s).items == items0);
  /* bad ranges: nothing read or written */
  ZT_CHECK_ERR(zt_store_get_range(s, &it, 2, 8, got), ZT_STATUS_INVALID_ARG, "not whole f32 elements");
  ZT_CHECK_ERR(zt_store_put_range(s, &it, 0, 6, got), ZT_STATUS_INVALID_ARG, "not whole f32 elements");
  ZT_CHECK_ERR(zt_store_get_range(s, &it, (N - 1) * 4, 8, got), ZT_STATUS_INVALID_ARG, "inside the item's 80000 bytes");
  ZT_CHECK_ERR(zt_store_put_range(s, &it, (N + 1) * 4, 4, got), ZT_STATUS_INVALID_ARG, "inside the item");
  ZT_CHECK_ERR(zt_store_get_range(s, &it, 0, 4, NULL), ZT_STATUS_INVALID_ARG, "NULL");
  ZT_CHECK_OK(zt_store_get_range(s, &it, 8, 0, got)); /* empty: nothing to do */
  ZT_CHECK_OK(zt_store_get(s, &it, ZT_CPU, got));
  ZT_CHECK(bf16 ? bf16_equal(want, got, ZT_DTYPE_F32, N) : memcmp(got, want, N * sizeof(float)) == 0);
  zt_store_drop(s, &it);
  free(v);
  free(want);
  free(got);
}

static void test_ranges(void) {
  zt_test_tmpdir_make("store");
  for (int k = 0; k < KIND_COUNT; k++) {
    zt_store *s = store_new((kind)k);
    if (!s) continue;
    ZT_CHECK(zt_store_has_ranges(s));
    ranges(s, k == KIND_BF16);
    zt_store_free(s);
  }
  /* small requests (several per range), direct and buffered */
  for (int d = 0; d < 2; d++) {
    zt_store *s = disk_new(d ? ZT_STORE_DIRECT_OFF : ZT_STORE_DIRECT_ON, 2, 64 << 10);
    if (!s) continue;
    ranges(s, false);
    zt_store_free(s);
  }
  /* a write that fails midway: the status names the disk; the item stays held as it was */
  zt_store *s = disk_new(ZT_STORE_DIRECT_ON, 2, 64 << 10);
  if (s) {
    enum { N = 60000 };
    float *v = values(ZT_DTYPE_F32, N, 3);
    zt_store_item it;
    ZT_CHECK_OK(zt_store_put(s, ZT_CPU, v, N * 4, ZT_DTYPE_F32, ZT_MEM_TAG_OPTIM, &it));
    int64_t held0 = bytes_on(disk_dev, ZT_MEM_TAG_OPTIM);
    ZT_CHECK(zt__store_disk_fault_at(s, ZT__IO_FAULT_WRITE_ENOSPC, 2));
    ZT_CHECK_ERR(zt_store_put_range(s, &it, 4, (N - 2) * 4, v), ZT_STATUS_IO, "No space left on device");
    ZT_CHECK(stats_of(s).items == 1 && bytes_on(disk_dev, ZT_MEM_TAG_OPTIM) == held0);
    ZT_CHECK(zt__store_disk_fault_at(s, ZT__IO_FAULT_READ_SHORT, 1));
    ZT_CHECK_ERR(zt_store_get_range(s, &it, 4, 8, v), ZT_STATUS_IO, "unexpected end of file");
    zt_store_drop(s, &it);
    zt_store_free(s);
    free(v);
  }
  /* a store without range ops refuses them */
  s = limited_new(1 << 20, NULL);
  if (s) {
    float x[4] = {1, 2, 3, 4};
    zt_store_item it;
    ZT_CHECK(!zt_store_has_ranges(s) && !zt_store_has_ranges(NULL));
    ZT_CHECK_OK(zt_store_put(s, ZT_CPU, x, sizeof x, ZT_DTYPE_F32, ZT_MEM_TAG_TEMP, &it));
    ZT_CHECK_ERR(zt_store_get_range(s, &it, 0, 4, x), ZT_STATUS_UNSUPPORTED, "moves whole items only");
    ZT_CHECK_ERR(zt_store_put_range(s, &it, 0, 4, x), ZT_STATUS_UNSUPPORTED, "zt_store_has_ranges");
    zt_store_drop(s, &it);
    zt_store_free(s);
  }
  zt_test_tmpdir_remove();
}

/* Storages evicted into a disk store read and write ranges without a whole copy: the TEMP peak
 * of a range read or an in-place write is a page at most (the whole-copy path's is the whole
 * storage), the version is bumped, and a store without range ops keeps the whole-copy path. */
static void test_storage_ranges(void) {
  zt_test_tmpdir_make("store");
  enum { N = 50000 };
  for (int k = 0; k < 2; k++) {
    zt_store *s = k ? limited_new(1 << 22, NULL) : disk_new(ZT_STORE_DIRECT_ON, 2, 64 << 10);
    zt_tensor *t = zt_test_rand(1, (int64_t[]){N}, ZT_DTYPE_F32, -1, 1, 5);
    float *want = malloc(N * 4), *got = malloc(N * 4), *part = malloc(4096 * 4), *d = NULL;
    if (!s || !t || zt_tensor_data(t, (void **)&d)) continue;
    memcpy(want, d, N * 4);
    ZT_CHECK_OK(zt_storage_evict(t->storage, s, ZT_DTYPE_F32));
    for (int i = 0; i < 4096; i++) part[i] = (float)i - 7.5f;
    uint64_t v0 = t->storage->version;
    zt_mem_reset_peaks();
    int64_t temp0 = bytes_on(ZT_CPU, ZT_MEM_TAG_TEMP);
    ZT_CHECK_OK(zt_storage_write_evicted_in_place(t->storage, 1001 * 4, 4096 * 4, part));
    memcpy(want + 1001, part, 4096 * 4);
    ZT_CHECK_OK(zt_storage_read_evicted(t->storage, 999 * 4, 5000 * 4, got));
    ZT_CHECK(memcmp(got, want + 999, 5000 * 4) == 0);
    zt_mem_stats ms;
    zt_mem_stats_get(ZT_CPU, &ms);
    int64_t temp_peak = ms.peak[ZT_MEM_TAG_TEMP] - temp0;
    /* disk: a page and the I/O threads' bounce buffers (64 KiB + a page each); limited: whole copies */
    ZT_CHECK(k ? temp_peak >= N * 4 : temp_peak <= 4096 + 2 * ((64 << 10) + 4096));
    ZT_CHECK(t->storage->version > v0);
    ZT_CHECK_OK(zt_storage_restore(t->storage));
    ZT_CHECK_OK(zt_tensor_data(t, (void **)&d));
    ZT_CHECK(memcmp(d, want, N * 4) == 0);
    ZT_CHECK_ERR(zt_storage_write_evicted_in_place(t->storage, 0, 4, part), ZT_STATUS_STATE, "not evicted");
    zt_tensor_free(t);
    zt_store_free(s);
    free(want), free(got), free(part);
  }
  zt_test_tmpdir_remove();
}

/* ------------------------------------------------ argument errors */
static void test_errors(void) {
  zt_store *s = NULL;
  ZT_CHECK_ERR(zt_store_new(NULL, NULL, ZT_CPU, &s), ZT_STATUS_INVALID_ARG, "ops or out is NULL");
  ZT_CHECK(s == NULL);
  const char *dir = zt_test_tmpdir_make("store");
  char missing[512];
  zt_test_tmp_path_to(missing, sizeof missing, "no/such/dir");
  ZT_CHECK_ERR(zt_store_disk_new(missing, NULL, &s), ZT_STATUS_IO, missing);
  ZT_CHECK(strstr(zt_last_error(), "writable directory") != NULL);
  ZT_CHECK_OK(zt_store_memory_new(&s));
  if (!s || !dir) return;
  char buf[16] = {0};
  zt_store_item it;
  ZT_CHECK_ERR(zt_store_put(s, ZT_CPU, buf, 6, ZT_DTYPE_F32, ZT_MEM_TAG_TEMP, &it), ZT_STATUS_INVALID_ARG,
               "6 bytes are not a whole number of f32 elements");
  ZT_CHECK_ERR(zt_store_put(s, ZT_CPU, NULL, 8, ZT_DTYPE_F32, ZT_MEM_TAG_TEMP, &it), ZT_STATUS_INVALID_ARG, "NULL");
  ZT_CHECK_ERR(zt_store_put(s, ZT_CPU, buf, 8, (zt_dtype)77, ZT_MEM_TAG_TEMP, &it), ZT_STATUS_INVALID_ARG,
               "dtype 77");
  ZT_CHECK_ERR(zt_store_wait(NULL), ZT_STATUS_INVALID_ARG, "request is NULL");
  ZT_CHECK(stats_of(s).items == 0);
  zt_store_free(s);
  zt_store_free(NULL);
  zt_test_tmpdir_remove();
}

/* ------------------------------------------------ storage evict / restore */
/* A PARAM-tagged (64, 48) f32 tensor named "w", with a transposed and a narrowed view. */
typedef struct evict_case {
  zt_tensor *w, *wt, *wn, *want; /* want: w's values as a restore gives them back */
} evict_case;

static evict_case evict_case_new(kind k) {
  evict_case c = {0};
  c.w = zt_test_rand(2, (int64_t[]){64, 48}, ZT_DTYPE_F32, -1, 1, 21);
  zt_storage_retag(c.w->storage, ZT_MEM_TAG_PARAM);
  zt_storage_set_name(c.w->storage, "w");
  ZT_CHECK_OK(zt_transpose(c.w, 0, 1, &c.wt));
  ZT_CHECK_OK(zt_narrow(c.w, 0, 8, 16, &c.wn));
  if (k == KIND_BF16) {
    zt_tensor *b = NULL;
    ZT_CHECK_OK(zt_cast(c.w, ZT_DTYPE_BF16, &b));
    if (b) ZT_CHECK_OK(zt_cast(b, ZT_DTYPE_F32, &c.want));
    zt_tensor_free(b);
  } else {
    ZT_CHECK_OK(zt_tensor_clone_data(c.w, ZT_MEM_TAG_TEMP, &c.want));
  }
  return c;
}

static void evict_case_free(evict_case *c) { zt_test_free_all((zt_tensor *[]){c->w, c->wt, c->wn, c->want}, 4); }

/* The views read what w's values restored make (w bitwise the expected values). */
static void check_views(const evict_case *c) {
  ZT_CHECK(zt_test_bitwise_equal(c->w, c->want));
  zt_tensor *t = NULL, *n = NULL;
  ZT_CHECK_OK(zt_transpose(c->want, 0, 1, &t));
  ZT_CHECK_OK(zt_narrow(c->want, 0, 8, 16, &n));
  ZT_CHECK(t && n && zt_test_bitwise_equal(c->wt, t) && zt_test_bitwise_equal(c->wn, n));
  zt_test_free_all((zt_tensor *[]){t, n}, 2);
}

static void evict_restore(kind k) {
  zt_store *s = store_new(k);
  evict_case c = evict_case_new(k);
  if (!s || !c.w || !c.wt || !c.wn || !c.want) return;
  zt_storage *st = c.w->storage;
  const int64_t B = 64 * 48 * 4;
  zt_device sdev = zt_store_device(s);
  int64_t cpu0 = bytes_on(ZT_CPU, ZT_MEM_TAG_PARAM), dev0 = bytes_on(sdev, ZT_MEM_TAG_PARAM);
  if (k == KIND_DISK) dev0 = bytes_on(disk_dev, ZT_MEM_TAG_PARAM);
  uint64_t version = st->version;
  ZT_CHECK_OK(zt_storage_evict(st, s, ZT_DTYPE_F32));
  ZT_CHECK(zt_storage_is_evicted(st) && st->released && !st->data && st->refcount == 3);
  /* accounting: off the cpu, onto the store's device, under PARAM (bf16: half) */
  int64_t held = k == KIND_BF16 ? B / 2 : B;
  if (k == KIND_DISK) {
    ZT_CHECK(bytes_on(ZT_CPU, ZT_MEM_TAG_PARAM) == cpu0 - B && bytes_on(disk_dev, ZT_MEM_TAG_PARAM) == dev0 + B);
  } else {
    ZT_CHECK(bytes_on(ZT_CPU, ZT_MEM_TAG_PARAM) == cpu0 - B + held);
  }
  ZT_CHECK(stats_of(s).items == 1 && stats_of(s).bytes_held == held);
  /* every reader names the tensor and says what to do */
  void *p;
  zt_tensor *o = NULL;
  ZT_CHECK_ERR(zt_tensor_data(c.wn, &p), ZT_STATUS_RELEASED, "tensor 'w' (f32 (16, 48)) is evicted to a");
  ZT_CHECK(strstr(zt_last_error(), kind_names[k]) && strstr(zt_last_error(), "zt_storage_restore"));
  ZT_CHECK_ERR(zt_add(c.w, c.w, &o), ZT_STATUS_RELEASED, "op 'add': input 0: tensor 'w' (f32 (64, 48)) is evicted");
  if (k == KIND_DISK) printf("  %s\n", zt_last_error());
  ZT_CHECK_ERR(zt_matmul(c.want, c.wt, false, false, &o), ZT_STATUS_RELEASED, "op 'matmul': input 1: tensor 'w'");
  ZT_CHECK_ERR(zt_tensor_clone_data(c.wt, ZT_MEM_TAG_TEMP, &o), ZT_STATUS_RELEASED, "tensor 'w'");
  ZT_CHECK_ERR(zt_tensor_fill_(c.w, 1), ZT_STATUS_RELEASED, "is evicted");
  ZT_CHECK_ERR(zt_tensor_copy_(c.w, c.want), ZT_STATUS_RELEASED, "is evicted");
  ZT_CHECK(isnan(zt_tensor_get(c.wn, 0)) && strstr(zt_last_error(), "tensor 'w'"));
  ZT_CHECK(o == NULL);
  ZT_CHECK_ERR(zt_storage_rematerialize(st), ZT_STATUS_STATE, "zt_storage_restore brings its contents back");
  ZT_CHECK_OK(zt_storage_release(st)); /* no bytes in memory already: a no-op */
  ZT_CHECK(zt_storage_is_evicted(st));
  ZT_CHECK_ERR(zt_storage_evict(st, s, ZT_DTYPE_F32), ZT_STATUS_STATE, "storage 'w' is evicted already");
  ZT_CHECK_OK(zt_storage_wait(st)); /* no restore in flight: no-op */
  ZT_CHECK_OK(zt_storage_restore(st));
  ZT_CHECK(!zt_storage_is_evicted(st) && !st->released && st->data && st->version == version);
  ZT_CHECK(bytes_on(ZT_CPU, ZT_MEM_TAG_PARAM) == cpu0 && stats_of(s).items == 0);
  if (k == KIND_DISK) ZT_CHECK(bytes_on(disk_dev, ZT_MEM_TAG_PARAM) == dev0);
  ZT_CHECK_OK(zt_storage_restore(st)); /* not evicted: no-op */
  check_views(&c);
  ZT_CHECK_OK(zt_add(c.wt, c.wt, &o)); /* readable again */
  zt_tensor_free(o);
  evict_case_free(&c);
  zt_store_free(s);
}

static void test_evict_restore(void) {
  zt_test_tmpdir_make("store");
  int64_t live = zt_test_live_bytes();
  for (int k = 0; k < KIND_COUNT; k++) evict_restore((kind)k);
  ZT_CHECK(zt_test_live_bytes() == live && bytes_on(disk_dev, ZT_MEM_TAG_PARAM) == 0);
  zt_test_tmpdir_remove();
}

/* Several storages restored at once on the helper thread; reading one before its wait is
 * an error; a storage freed while evicted or while its restore is in flight gives the
 * store's bytes back. */
static void test_restore_async(void) {
  zt_test_tmpdir_make("store");
  int64_t live = zt_test_live_bytes();
  zt_store *s = store_new(KIND_DISK);
  if (!s) return;
  enum { N = 6 };
  zt_tensor *t[N], *want[N];
  for (int i = 0; i < N; i++) {
    t[i] = zt_test_rand(2, (int64_t[]){128, 96 + i}, ZT_DTYPE_F32, -1, 1, 30 + (uint64_t)i);
    ZT_CHECK_OK(zt_tensor_clone_data(t[i], ZT_MEM_TAG_TEMP, &want[i]));
    ZT_CHECK_OK(zt_storage_evict(t[i]->storage, s, ZT_DTYPE_F32));
  }
  ZT_CHECK(stats_of(s).items == N);
  for (int i = 0; i < N; i++) ZT_CHECK_OK(zt_storage_restore_async(t[i]->storage));
  ZT_CHECK_OK(zt_storage_restore_async(t[0]->storage)); /* in flight already: no-op */
  void *p;
  ZT_CHECK_ERR(zt_tensor_data(t[N - 1], &p), ZT_STATUS_RELEASED, "is being restored from a disk store");
  ZT_CHECK(strstr(zt_last_error(), "unnamed storage") && strstr(zt_last_error(), "zt_storage_wait"));
  printf("  %s\n", zt_last_error());
  zt_tensor_free(t[1]); /* freed while its restore is in flight: cancelled */
  t[1] = NULL;
  for (int i = 0; i < N; i++) {
    if (!t[i]) continue;
    ZT_CHECK_OK(zt_storage_wait(t[i]->storage));
    ZT_CHECK(!zt_storage_is_evicted(t[i]->storage) && zt_test_bitwise_equal(t[i], want[i]));
  }
  ZT_CHECK(stats_of(s).items == 0 && stats_of(s).threads_started == 1);
  ZT_CHECK(bytes_on(disk_dev, ZT_MEM_TAG_ACTIVATION) == 0);
  /* freed while evicted: the store's copy goes with it */
  ZT_CHECK_OK(zt_storage_evict(t[0]->storage, s, ZT_DTYPE_F32));
  ZT_CHECK(stats_of(s).items == 1);
  zt_tensor_free(t[0]);
  t[0] = NULL;
  ZT_CHECK(stats_of(s).items == 0 && bytes_on(disk_dev, ZT_MEM_TAG_ACTIVATION) == 0);
  zt_test_free_all(t, N);
  zt_test_free_all(want, N);
  zt_store_free(s);
  ZT_CHECK(zt_test_live_bytes() == live);
  zt_test_tmpdir_remove();
}

/* A restore that fails leaves the storage evicted with the store's copy, and a later one
 * succeeds; a failing put leaves the storage as it was. */
static void test_evict_failures(void) {
  int64_t live = zt_test_live_bytes();
  limited *lim = NULL;
  zt_store *s = limited_new(10000, &lim);
  zt_tensor *a = zt_test_rand(1, (int64_t[]){1024}, ZT_DTYPE_F32, -1, 1, 50), *want = NULL, *ext = NULL;
  if (!s || !a) return;
  ZT_CHECK_OK(zt_tensor_clone_data(a, ZT_MEM_TAG_TEMP, &want));
  zt_storage_set_name(a->storage, "h.0.mlp.c_fc.weight");
  ZT_CHECK_OK(zt_storage_evict(a->storage, s, ZT_DTYPE_F32));
  lim->fail_gets = 1;
  ZT_CHECK_ERR(zt_storage_restore(a->storage), ZT_STATUS_IO, "restoring storage 'h.0.mlp.c_fc.weight' from a limited store");
  ZT_CHECK(strstr(zt_last_error(), "read error (simulated)"));
  ZT_CHECK(zt_storage_is_evicted(a->storage) && !a->storage->data);
  lim->fail_gets = 1; /* on the helper thread */
  ZT_CHECK_OK(zt_storage_restore_async(a->storage));
  usleep(20000); /* most likely run by the helper by now */
  ZT_CHECK_ERR(zt_storage_wait(a->storage), ZT_STATUS_IO, "read error (simulated)");
  ZT_CHECK(zt_storage_is_evicted(a->storage));
  ZT_CHECK_OK(zt_storage_restore(a->storage));
  ZT_CHECK(zt_test_bitwise_equal(a, want));
  /* no room: the put fails, the storage stays as it was */
  zt_tensor *big = zt_test_rand(1, (int64_t[]){4096}, ZT_DTYPE_F32, -1, 1, 51);
  ZT_CHECK_ERR(zt_storage_evict(big->storage, s, ZT_DTYPE_F32), ZT_STATUS_IO, "zt_storage_evict: storage (unnamed)");
  ZT_CHECK(strstr(zt_last_error(), "no space left for 16384 bytes"));
  ZT_CHECK(!zt_storage_is_evicted(big->storage) && zt_tensor_get(big, 5) == zt_tensor_get(big, 5));
  /* what cannot be evicted */
  float buf[4] = {1, 2, 3, 4};
  ZT_CHECK_OK(zt_tensor_from_data(1, (int64_t[]){4}, ZT_DTYPE_F32, buf, &ext));
  zt_storage *w = NULL;
  ZT_CHECK_OK(zt_storage_wrap(buf, sizeof buf, ZT_CPU, &w));
  ZT_CHECK_ERR(zt_storage_evict(w, s, ZT_DTYPE_F32), ZT_STATUS_STATE, "wraps memory it does not own");
  ZT_CHECK_OK(zt_storage_release(ext->storage));
  ZT_CHECK_ERR(zt_storage_evict(ext->storage, s, ZT_DTYPE_F32), ZT_STATUS_RELEASED, "has no bytes");
  zt_tensor *odd = zt_test_rand(1, (int64_t[]){3}, ZT_DTYPE_F32, -1, 1, 52);
  ZT_CHECK_ERR(zt_storage_evict(odd->storage, s, ZT_DTYPE_F64), ZT_STATUS_INVALID_ARG, "12 bytes are not a whole number of f64");
  zt_tensor_free(odd);
  ZT_CHECK_ERR(zt_storage_evict(NULL, s, ZT_DTYPE_F32), ZT_STATUS_INVALID_ARG, "storage or store is NULL");
  ZT_CHECK(stats_of(s).items == 0);
  zt_storage_release_ref(w);
  zt_test_free_all((zt_tensor *[]){a, want, ext, big}, 4);
  zt_store_free(s);
  ZT_CHECK(zt_test_live_bytes() == live);
}

/* A parameter evicted between forward and backward: backward reads its saved alias and
 * names it; restored, backward gives the grads of a run with no eviction. */
static void test_evicted_saved_tensor(void) {
  zt_store *s = store_new(KIND_MEMORY);
  zt_tensor *x = zt_test_rand(2, (int64_t[]){8, 16}, ZT_DTYPE_F32, -1, 1, 60);
  zt_tensor *w = zt_test_rand_leaf(2, (int64_t[]){16, 4}, ZT_DTYPE_F32, -1, 1, 61);
  zt_tensor *xg = NULL, *y = NULL, *loss = NULL, *plain = NULL;
  if (!s || !x || !w) return;
  zt_storage_set_name(w->storage, "lm.weight");
  ZT_CHECK_OK(zt_tensor_set_requires_grad(x, true));
  for (int run = 0; run < 2; run++) {
    ZT_CHECK_OK(zt_matmul(x, w, false, false, &y));
    if (y) ZT_CHECK_OK(zt_sum(y, 0, NULL, false, &loss));
    if (run == 1) {
      ZT_CHECK_OK(zt_storage_evict(w->storage, s, ZT_DTYPE_F32));
      ZT_CHECK_ERR(zt_backward(1, &loss, NULL, true), ZT_STATUS_RELEASED, "tensor 'lm.weight' (f32 (16, 4)) is evicted");
      ZT_CHECK(strstr(zt_last_error(), "saved tensor"));
      ZT_CHECK_OK(zt_storage_restore(w->storage));
    }
    if (loss) ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
    if (run == 0) ZT_CHECK_OK(zt_tensor_clone_data(x->grad, ZT_MEM_TAG_TEMP, &plain));
    else ZT_CHECK(x->grad && plain && zt_test_bitwise_equal(x->grad, plain));
    zt_tensor_free(x->grad);
    x->grad = NULL;
    zt_tensor_free(w->grad);
    w->grad = NULL;
    zt_test_free_all((zt_tensor *[]){y, loss}, 2);
    y = loss = NULL;
  }
  /* a leaf's .grad evicted: accumulation into it names it */
  ZT_CHECK_OK(zt_matmul(x, w, false, false, &y));
  if (y) ZT_CHECK_OK(zt_sum(y, 0, NULL, false, &loss));
  if (loss) ZT_CHECK_OK(zt_backward(1, &loss, NULL, true));
  if (w->grad) {
    zt_storage_set_name(w->grad->storage, "lm.weight.grad");
    ZT_CHECK_OK(zt_storage_evict(w->grad->storage, s, ZT_DTYPE_F32));
    ZT_CHECK_ERR(zt_backward(1, &loss, NULL, false), ZT_STATUS_RELEASED, "tensor 'lm.weight.grad'");
    ZT_CHECK_OK(zt_storage_restore(w->grad->storage));
  }
  zt_test_free_all((zt_tensor *[]){x, w, xg, y, loss, plain}, 6);
  zt_store_free(s);
}

int main(void) {
  ZT_RUN(test_round_trip);
  ZT_RUN(test_disk_extents);
  ZT_RUN(test_disk_odd_sizes);
  ZT_RUN(test_disk_concurrent);
  ZT_RUN(test_disk_faults);
  ZT_RUN(test_prefetch);
  ZT_RUN(test_guarded_device);
  ZT_RUN(test_truncated_spill_file);
  ZT_RUN(test_failing_write);
  ZT_RUN(test_errors);
  ZT_RUN(test_evict_restore);
  ZT_RUN(test_restore_async);
  ZT_RUN(test_evict_failures);
  ZT_RUN(test_evicted_saved_tensor);
  ZT_RUN(test_ranges);
  ZT_RUN(test_storage_ranges);
  return zt_test_finish();
}
