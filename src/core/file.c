/* Whole-file reads (see file.h): a regular file only, opened without blocking, at most a stated
 * size, read to the size fstat saw; text without NUL bytes. */
#include "core/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/status_internal.h"

static const char *file_type_name(mode_t m) {
  if (S_ISDIR(m)) return "a folder";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a plain file";
}

zt_status zt__open_regular_file(const char *path, const char *what, int *fd, uint64_t *size) {
  const char *w = what ? what : "file";
  *fd = -1;
  *size = 0;
  if (!path) return ZT_ERR(ZT_STATUS_INVALID_ARG, "cannot read the %s: the path is NULL", w);
  /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever */
  int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (f < 0) return ZT_ERR(ZT_STATUS_IO, "cannot read %s '%s': %s", w, path, strerror(errno));
  struct stat sb;
  if (fstat(f, &sb) != 0) {
    int e = errno;
    close(f);
    return ZT_ERR(ZT_STATUS_IO, "cannot read %s '%s': %s", w, path, strerror(e));
  }
  if (!S_ISREG(sb.st_mode)) {
    close(f);
    return ZT_ERR(ZT_STATUS_IO, "cannot read %s '%s': it is %s, not a regular file", w, path,
                  file_type_name(sb.st_mode));
  }
  /* reads of a regular file never return EAGAIN; blocking mode again for the callers' stdio */
  int fl = fcntl(f, F_GETFL);
  if (fl >= 0) (void)fcntl(f, F_SETFL, fl & ~O_NONBLOCK);
  *fd = f;
  *size = (uint64_t)sb.st_size;
  return ZT_OK;
}

zt_status zt__read_regular_file(const char *path, size_t max_bytes, const char *what, void **data, size_t *size) {
  if (!data || !size) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt__read_regular_file: NULL output");
  *data = NULL;
  *size = 0;
  const char *w = what ? what : "file";
  int fd;
  uint64_t n;
  ZT_TRY(zt__open_regular_file(path, w, &fd, &n));
  if (n > max_bytes) {
    close(fd);
    return ZT_ERR(ZT_STATUS_IO, "cannot read %s '%s': it has %llu bytes, more than the %zu bytes such a file may "
                  "have (is it the right file?)", w, path, (unsigned long long)n, max_bytes);
  }
  /* the extra byte holds a NUL, so text files can be used as C strings */
  char *buf = malloc((size_t)n + 1);
  if (!buf) {
    close(fd);
    return ZT_ERR(ZT_STATUS_OOM, "cannot read %s '%s': out of memory for %llu bytes", w, path,
                  (unsigned long long)n + 1);
  }
  /* read what fstat saw: a file that grows meanwhile is read to that size, one that shrinks
   * to its end */
  size_t got = 0;
  while (got < (size_t)n) {
    size_t step = (size_t)n - got < ((size_t)1 << 30) ? (size_t)n - got : ((size_t)1 << 30);
    ssize_t r = read(fd, buf + got, step);
    if (r < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      free(buf);
      close(fd);
      return ZT_ERR(ZT_STATUS_IO, "cannot read %s '%s': %s", w, path, strerror(e));
    }
    if (r == 0) break;
    got += (size_t)r;
  }
  close(fd);
  buf[got] = '\0';
  *data = buf;
  *size = got;
  return ZT_OK;
}

zt_status zt__read_text_file(const char *path, size_t max_bytes, const char *what, char **text, size_t *size) {
  void *data = NULL;
  *text = NULL;
  *size = 0;
  const char *w = what ? what : "file";
  ZT_TRY(zt__read_regular_file(path, max_bytes, w, &data, size));
  const char *p = data, *nul = memchr(p, '\0', *size);
  if (*size >= 3 && !memcmp(p, "\xEF\xBB\xBF", 3)) {
    free(data);
    *size = 0;
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "%s '%s', line 1: starts with a UTF-8 byte-order mark (BOM, the bytes EF BB BF, which some editors "
                  "add); save the file as UTF-8 without a BOM",
                  w, path);
  }
  if (nul) {
    int line = 1;
    for (const char *q = p; q < nul; q++) line += *q == '\n';
    size_t at = (size_t)(nul - p) + 1; /* counted from 1, as editors count */
    free(data);
    *size = 0;
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "%s '%s', line %d: holds a NUL byte (byte %zu of the file), which no text has: is it the right file?",
                  w, path, line, at);
  }
  *text = data;
  return ZT_OK;
}

zt_status zt__check_output_file(const char *path, const char *what) {
  struct stat sb;
  if (!path[0]) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: the path is empty; name a file", what);
  if (stat(path, &sb) == 0) {
    if (!S_ISREG(sb.st_mode))
      return ZT_ERR(ZT_STATUS_IO, "%s '%s' is %s; name a file (it is written whole, replacing one that exists)", what,
                    path, file_type_name(sb.st_mode));
    if (access(path, W_OK) != 0)
      return ZT_ERR(ZT_STATUS_IO, "%s '%s' cannot be written: %s", what, path, strerror(errno));
  }
  char dir[4096];
  const char *slash = strrchr(path, '/');
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == path) snprintf(dir, sizeof dir, "/");
  else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  if (stat(dir, &sb) != 0)
    return ZT_ERR(ZT_STATUS_IO, "%s '%s': its folder '%s' does not exist (%s); name a file in a folder that exists",
                  what, path, dir, strerror(errno));
  if (!S_ISDIR(sb.st_mode))
    return ZT_ERR(ZT_STATUS_IO, "%s '%s': '%s' is %s, not a folder", what, path, dir, file_type_name(sb.st_mode));
  if (access(dir, W_OK | X_OK) != 0)
    return ZT_ERR(ZT_STATUS_IO, "%s '%s': cannot write into its folder '%s': %s", what, path, dir, strerror(errno));
  return ZT_OK;
}
