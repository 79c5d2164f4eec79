/* Sequential bandwidth of the disk store's I/O engine: zt_store_put then zt_store_get of
 * TOTAL bytes in ITEM-sized items (page-aligned host buffers), direct I/O, at queue depths
 * 1, 2, 4, 8 and chunks of 1, 4 and 8 MiB; and the device's reference, a single-threaded
 * O_DIRECT pwrite/pread loop of 8 MiB blocks over a fresh file. Each configuration runs
 * RUNS times, the median is reported. Usage: bench_disk [dir [total_mib [item_mib]]] (dir:
 * $TMPDIR, else /tmp; 1024; 128). One JSON object per line, e.g.
 * {"bench":"disk","mode":"engine","qd":4,"chunk_mib":4,"write_gbps":..,"read_gbps":..,..}. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "zt/store.h"

#define RUNS 3
#define MIB ((size_t)1 << 20)

static void *page_buffer(size_t n) {
  void *p = NULL;
  if (zt_mem_alloc(n, ZT_CPU, ZT_MEM_TAG_TEMP, &p)) bench_die("allocating a buffer");
  if ((uintptr_t)p % 4096) {
    fprintf(stderr, "bench_disk: the allocator gave an unaligned %zu-byte buffer\n", n);
    exit(1);
  }
  return p;
}

/* The device without the engine: one thread, O_DIRECT, 8 MiB blocks, a fresh file. */
static void reference(const char *dir, size_t total, char *buf, size_t block, double *w, double *r) {
  char path[4096];
  snprintf(path, sizeof path, "%s/bench_disk_XXXXXX", dir);
  int fd = mkostemp(path, O_CLOEXEC);
  if (fd < 0 || unlink(path) != 0 || fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_DIRECT) != 0) {
    perror("bench_disk: an O_DIRECT file in dir");
    exit(1);
  }
  double t0 = bench_now_s();
  for (size_t off = 0; off < total; off += block)
    if (pwrite(fd, buf, block, (off_t)off) != (ssize_t)block) {
      perror("bench_disk: pwrite");
      exit(1);
    }
  double t1 = bench_now_s();
  for (size_t off = 0; off < total; off += block)
    if (pread(fd, buf, block, (off_t)off) != (ssize_t)block) {
      perror("bench_disk: pread");
      exit(1);
    }
  double t2 = bench_now_s();
  close(fd);
  *w = (double)total / 1e9 / (t1 - t0);
  *r = (double)total / 1e9 / (t2 - t1);
}

/* The engine through the store: put every item, then get every item back. */
static void engine(const char *dir, size_t total, size_t item, char *src, char *dst, int qd, size_t chunk,
                   double *w, double *r, zt_store_io_stats *io) {
  zt_store_disk_options o = {.dir = dir, .prefix = "bench_disk", .queue_depth = qd, .chunk_bytes = chunk};
  zt_store *s = NULL;
  if (zt_store_disk_new_opts(&o, &s)) bench_die("zt_store_disk_new_opts");
  size_t n = total / item;
  zt_store_item *it = calloc(n, sizeof *it);
  if (!it) bench_die("out of memory");
  double t0 = bench_now_s();
  for (size_t i = 0; i < n; i++)
    if (zt_store_put(s, ZT_CPU, src, item, ZT_DTYPE_F32, ZT_MEM_TAG_PARAM, &it[i])) bench_die("zt_store_put");
  double t1 = bench_now_s();
  for (size_t i = 0; i < n; i++)
    if (zt_store_get(s, &it[i], ZT_CPU, dst)) bench_die("zt_store_get");
  double t2 = bench_now_s();
  zt_store_io_stats_get(s, io);
  for (size_t i = 0; i < n; i++) zt_store_drop(s, &it[i]);
  zt_store_free(s);
  free(it);
  if (memcmp(src, dst, item) != 0) {
    fprintf(stderr, "bench_disk: the last item came back different\n");
    exit(1);
  }
  *w = (double)(n * item) / 1e9 / (t1 - t0);
  *r = (double)(n * item) / 1e9 / (t2 - t1);
}

int main(int argc, char **argv) {
  const char *tmp = getenv("TMPDIR");
  const char *dir = argc > 1 ? argv[1] : tmp && *tmp ? tmp : "/tmp";
  size_t total = (argc > 2 ? (size_t)atol(argv[2]) : 1024) * MIB;
  size_t item = (argc > 3 ? (size_t)atol(argv[3]) : 128) * MIB;
  if (!item || total < item) {
    fprintf(stderr, "usage: bench_disk [dir [total_mib [item_mib]]] (total >= item > 0)\n");
    return 2;
  }
  char *src = page_buffer(item), *dst = page_buffer(item);
  for (size_t i = 0; i < item; i++) src[i] = (char)(i * 131 + (i >> 12)); /* no zero pages */
  double w[RUNS], r[RUNS];
  for (int k = 0; k < RUNS; k++) reference(dir, total, dst, 8 * MIB, &w[k], &r[k]);
  printf("{\"bench\":\"disk\",\"mode\":\"reference\",\"qd\":1,\"block_mib\":8,\"total_mib\":%zu,"
         "\"write_gbps\":%.3f,\"read_gbps\":%.3f}\n",
         total / MIB, bench_median(w, RUNS), bench_median(r, RUNS));
  fflush(stdout);
  const size_t chunks[] = {1 * MIB, 4 * MIB, 8 * MIB};
  const int qds[] = {1, 2, 4, 8};
  for (int c = 0; c < 3; c++)
    for (int q = 0; q < 4; q++) {
      zt_store_io_stats io = {0};
      for (int k = 0; k < RUNS; k++) engine(dir, total, item, src, dst, qds[q], chunks[c], &w[k], &r[k], &io);
      printf("{\"bench\":\"disk\",\"mode\":\"engine\",\"qd\":%d,\"chunk_mib\":%zu,\"item_mib\":%zu,\"total_mib\":%zu,"
             "\"direct\":%s,\"write_gbps\":%.3f,\"read_gbps\":%.3f,\"write_busy_s\":%.3f,\"read_busy_s\":%.3f,"
             "\"write_requests\":%lld,\"read_requests\":%lld}\n",
             qds[q], chunks[c] / MIB, item / MIB, total / MIB, io.direct ? "true" : "false", bench_median(w, RUNS),
             bench_median(r, RUNS), io.write_seconds, io.read_seconds, (long long)io.write_requests,
             (long long)io.read_requests);
      fflush(stdout);
    }
  zt_mem_free(src, item, ZT_CPU, ZT_MEM_TAG_TEMP);
  zt_mem_free(dst, item, ZT_CPU, ZT_MEM_TAG_TEMP);
  return 0;
}
