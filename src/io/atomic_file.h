/* Writing files so that a crash, a kill or a full disk never leaves half a file under the final
 * name (src/io/atomic_file.c): a temporary file in the same folder, fsync, rename, fsync of the
 * folder. Internal; the io layer and the layers above it (snapshot, train) include it.
 * Included by: src/io and the layers above it (snapshot, train). */
#ifndef ZT_IO_ATOMIC_FILE_H
#define ZT_IO_ATOMIC_FILE_H

#include <stddef.h>

#include "zt/status.h"

/* fsync a folder (makes renames in it durable). Returns 0 or an errno value; filesystems
 * that refuse fsync on folders (EINVAL) count as success. */
int zt__fsync_dir(const char *dir);


/* ------------------------------------------------ atomic writes, streamed
 * zt_write_file_atomic in steps, for writers that produce a file piece by piece: open makes
 * the temp file beside path (".<name>.tmp.<pid>"), write appends to it, commit fsyncs,
 * closes, renames it over path and fsyncs the folder; abort closes and removes it. A failed
 * write or commit leaves the old file as it was and no temp file (after a failed write the
 * caller calls abort; a failed commit has aborted already). path is borrowed until commit or
 * abort; both free what open allocated, and abort of an aborted or committed file is a
 * no-op. Messages are zt_write_file_atomic's. */
typedef struct zt__atomic_file {
  const char *path;
  char *tmp, *dir;
  int fd;
} zt__atomic_file;
ZT_NODISCARD zt_status zt__atomic_open(const char *path, zt__atomic_file *f);
ZT_NODISCARD zt_status zt__atomic_write(zt__atomic_file *f, const void *p, size_t n);
ZT_NODISCARD zt_status zt__atomic_commit(zt__atomic_file *f);
void zt__atomic_abort(zt__atomic_file *f);

/* dir + "/" + name into buf (cap bytes); a path longer than that is ZT_STATUS_INVALID_ARG
 * naming it. */
ZT_NODISCARD zt_status zt__path_join(char *buf, size_t cap, const char *dir, const char *name);

#endif
