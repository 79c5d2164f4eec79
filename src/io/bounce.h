/* Bytes of tensors wherever they live (src/io/bounce.c): one host buffer that a save reads
 * evicted storages through and a load writes them through (never restoring them), and ranges of
 * a tensor's elements to and from host memory. Internal.
 * Included by: src/io and the layers above it (snapshot, train). */
#ifndef ZT_IO_BOUNCE_H
#define ZT_IO_BOUNCE_H

#include "zt/tensor.h"

/* ------------------------------------------------ staging of evicted storages (src/io/bounce.c)
 * Checkpoint files pass the bytes of an evicted storage (zt/store.h) through one host buffer,
 * accounted on cpu under ZT_MEM_TAG_TEMP, instead of restoring it. */
typedef struct zt__bounce {
  void *buf;
  size_t cap;
  uint64_t held_id, held_version; /* the buffer holds that storage's contents at that version (id 0: none) */
} zt__bounce;
/* Sized for the largest storage among the evicted, non-empty tensors of ts (entries may be
 * NULL); none evicted: nothing allocated. Free with zt__bounce_free (also after a failure). */
ZT_NODISCARD zt_status zt__bounce_init(zt__bounce *st, int n, zt_tensor *const *ts);
void zt__bounce_free(zt__bounce *st);
/* Whether t is all of its storage, contiguous from its start (a load need not read the
 * old contents first). */
bool zt__bounce_covers(const zt_tensor *t);
/* t's storage is evicted (and the stage was sized for it): *view is a cpu tensor with t's
 * offset, shape, strides and dtype over the buffer, which then holds the storage's contents
 * (read: not read again when the buffer holds them already, so views of one storage one after
 * another, an FSDP shard's pieces, read it once) or what was last there (!read: the caller
 * fills all of it). Free the view before the next call; the buffer stays the stage's. */
ZT_NODISCARD zt_status zt__bounce_view(zt__bounce *st, const zt_tensor *t, bool read, zt_tensor **view);
/* The buffer (all of t's storage) as the new contents of t's evicted storage
 * (zt_storage_write_evicted: on failure the old contents stay). */
ZT_NODISCARD zt_status zt__bounce_store(zt__bounce *st, zt_tensor *t);
/* Elements [lo, lo + n) of contiguous t to / from host memory, t resident (its backend moves
 * them) or evicted (read from / written into its store, never restored: a range that is not
 * the whole storage passes through a host copy of it). A released, not evicted, t is
 * ZT_STATUS_RELEASED. The write bumps t's version. */
ZT_NODISCARD zt_status zt__tensor_read_range(const zt_tensor *t, int64_t lo, int64_t n, void *host_dst);
ZT_NODISCARD zt_status zt__tensor_write_range(zt_tensor *t, int64_t lo, int64_t n, const void *host_src);
/* Loaded weights or optimizer state with a NaN or inf is a damaged file, not a learning-rate
 * problem: ZT_STATUS_INVALID_ARG naming what (the source), the tensor and the first bad element.
 * Evicted tensors are read back through one stage, never restored. */
ZT_NODISCARD zt_status zt__tensors_check_finite(int n, zt_tensor *const *ts, const char *const *names, const char *what);

#endif
