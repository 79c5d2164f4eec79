/* Helpers of the fuzz targets (see fuzz_util.h). */
#include "fuzz_util.h"

#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[256];

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

void zt_fuzz_remove(const char *path) { nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static void cleanup(void) {
  if (g_dir[0]) zt_fuzz_remove(g_dir);
}

void zt_fuzz_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "zt fuzz: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  abort();
}

void zt_fuzz_init(void) {
  if (g_dir[0]) return;
  setenv("ZT_ALLOC_CACHE_MB", "0", 1);
  setenv("OMP_NUM_THREADS", "1", 1);
  struct stat sb;
  const char *base = stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode) && access("/dev/shm", W_OK) == 0 ? "/dev/shm"
                     : getenv("TMPDIR")                                                                  ? getenv("TMPDIR")
                                                                                                         : "/tmp";
  snprintf(g_dir, sizeof g_dir, "%s/zt_fuzz_XXXXXX", base);
  if (!mkdtemp(g_dir)) zt_fuzz_fail("cannot make a temporary folder in %s", base);
  atexit(cleanup);
}

const char *zt_fuzz_path(const char *name) {
  static char bufs[8][512];
  static int k;
  k = (k + 1) % 8;
  snprintf(bufs[k], sizeof bufs[k], "%s/%s", g_dir, name);
  return bufs[k];
}

void zt_fuzz_write(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) zt_fuzz_fail("cannot write '%s'", path);
}
