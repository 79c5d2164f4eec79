/* Atomic whole-file writes (temp file in the same folder, fsync, rename, fsync of the folder:
 * a reader sees the old file or the new one, never a mix, and a failed write leaves the old file
 * as it was) and whole-file reads (atomic_file.h, zt/io.h). */
#include "io/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/file.h"
#include "core/status_internal.h"
#include "io/buf.h"
#include "zt/io.h"

/* ------------------------------------------------------------------ atomic write */

/* fsync of a folder makes a rename in it durable; some filesystems refuse it (EINVAL),
 * which is not an error of ours. */
int zt__fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  int err = 0;
  if (fsync(fd) != 0 && errno != EINVAL && errno != ENOTSUP) err = errno;
  close(fd);
  return err;
}

static int write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    size_t step = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
    ssize_t w = write(fd, p, step);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* The one home of the atomic-write steps: zt_write_file_atomic writes its chunks through
 * these, the safetensors writer its tensors one after another. */
zt_status zt__atomic_open(const char *path, zt__atomic_file *f) {
  *f = (zt__atomic_file){.fd = -1};
  if (!path || !*path) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_write_file_atomic: the path is empty");
  const char *slash = strrchr(path, '/');
  const char *base = slash ? slash + 1 : path;
  if (!*base) return ZT_ERR(ZT_STATUS_INVALID_ARG, "cannot write '%s': it names a folder, not a file", path);
  size_t dir_len = slash ? (size_t)(slash - path) : 0;
  size_t cap = strlen(path) + 64;
  f->path = path;
  f->tmp = malloc(cap);
  f->dir = malloc(cap);
  if (!f->tmp || !f->dir) {
    zt__atomic_abort(f);
    return ZT_ERR(ZT_STATUS_OOM, "cannot write '%s': out of memory", path);
  }
  /* ".<name>.tmp.<pid>" beside the target: the rename stays within one filesystem. */
  if (slash) {
    snprintf(f->tmp, cap, "%.*s/.%s.tmp.%ld", (int)dir_len, path, base, (long)getpid());
    snprintf(f->dir, cap, "%.*s", (int)(dir_len ? dir_len : 1), path);
  } else {
    snprintf(f->tmp, cap, ".%s.tmp.%ld", base, (long)getpid());
    snprintf(f->dir, cap, ".");
  }
  f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (f->fd < 0) {
    zt_status s =
        ZT_ERR(ZT_STATUS_IO, "cannot write '%s': cannot create the temp file '%s': %s", path, f->tmp, strerror(errno));
    free(f->tmp); /* nothing was created: nothing to unlink */
    f->tmp = NULL;
    zt__atomic_abort(f);
    return s;
  }
  return ZT_OK;
}

zt_status zt__atomic_write(zt__atomic_file *f, const void *p, size_t n) {
  int err = write_all(f->fd, p, n);
  if (!err) return ZT_OK;
  return ZT_ERR(ZT_STATUS_IO, "cannot write '%s': writing the temp file '%s' failed: %s (the old file is intact)",
                f->path, f->tmp, strerror(err));
}

void zt__atomic_abort(zt__atomic_file *f) {
  if (f->fd >= 0) close(f->fd);
  if (f->tmp) unlink(f->tmp);
  free(f->tmp);
  free(f->dir);
  *f = (zt__atomic_file){.fd = -1};
}

zt_status zt__atomic_commit(zt__atomic_file *f) {
  zt_status s = ZT_OK;
  if (fsync(f->fd) != 0)
    s = ZT_ERR(ZT_STATUS_IO, "cannot write '%s': fsync of the temp file '%s' failed: %s (the old file is intact)",
               f->path, f->tmp, strerror(errno));
  int fd = f->fd;
  f->fd = -1;
  if (close(fd) != 0 && !s)
    s = ZT_ERR(ZT_STATUS_IO, "cannot write '%s': closing the temp file '%s' failed: %s (the old file is intact)",
               f->path, f->tmp, strerror(errno));
  if (!s && rename(f->tmp, f->path) != 0)
    s = ZT_ERR(ZT_STATUS_IO, "cannot write '%s': renaming '%s' over it failed: %s (the old file is intact)", f->path,
               f->tmp, strerror(errno));
  if (s) {
    zt__atomic_abort(f);
    return s;
  }
  int err = zt__fsync_dir(f->dir);
  if (err)
    s = ZT_ERR(ZT_STATUS_IO, "wrote '%s' but the fsync of its folder '%s' failed: %s (the write may not survive a crash)",
               f->path, f->dir, strerror(err));
  free(f->tmp); /* renamed: nothing to unlink */
  f->tmp = NULL;
  zt__atomic_abort(f);
  return s;
}

zt_status zt_write_file_atomic(const char *path, const void *const *chunks, const size_t *sizes, int n_chunks) {
  if (!path || !*path) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_write_file_atomic: the path is empty");
  if (n_chunks < 0 || (n_chunks > 0 && (!chunks || !sizes)))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_write_file_atomic('%s'): %d chunks with NULL chunk/size arrays", path,
                  n_chunks);
  for (int i = 0; i < n_chunks; i++)
    if (sizes[i] > 0 && !chunks[i])
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_write_file_atomic('%s'): chunk %d is NULL with %zu bytes", path, i,
                    sizes[i]);
  zt__atomic_file f;
  ZT_TRY(zt__atomic_open(path, &f));
  zt_status s = ZT_OK;
  for (int i = 0; i < n_chunks && !s; i++) s = zt__atomic_write(&f, chunks[i], sizes[i]);
  if (s) {
    zt__atomic_abort(&f);
    return s;
  }
  return zt__atomic_commit(&f);
}

/* ------------------------------------------------------------------ reading */

zt_status zt__path_join(char *buf, size_t cap, const char *dir, const char *name) {
  int n = snprintf(buf, cap, "%s/%s", dir, name);
  if (n < 0 || (size_t)n >= cap) return ZT_ERR(ZT_STATUS_INVALID_ARG, "path '%s/%s' is too long", dir, name);
  return ZT_OK;
}

zt_status zt_read_file(const char *path, void **data, size_t *size) {
  if (!path || !data || !size) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_read_file: NULL argument");
  return zt__read_regular_file(path, ZT__READ_FILE_MAX, "file", data, size);
}

