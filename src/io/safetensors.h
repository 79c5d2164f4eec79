/* The header of a safetensors file as a list (src/io/safetensors.c): the readers that take
 * ranges of tensors (the sharded snapshots) and the checks before a load. Internal.
 * Included by: src/io, src/models and src/snapshot (and tests). */
#ifndef ZT_IO_SAFETENSORS_H
#define ZT_IO_SAFETENSORS_H

#include "zt/io.h"

/* ------------------------------------------------ safetensors (src/io/safetensors.c) */
typedef struct zt__st_info {
  const char *name;  /* points into the same allocation */
  const char *dtype; /* "F32", "BF16", ... (a static string) */
  int ndim;
  int64_t shape[ZT_MAX_DIMS];
  int64_t numel;
} zt__st_info;
/* Every tensor of a (validated) safetensors file with its dtype and shape, sorted by name
 * (zt__st_find looks one up); one malloc'd block, free it with free(). */
ZT_NODISCARD zt_status zt__safetensors_list(const char *path, int *n, zt__st_info **out);
const zt__st_info *zt__st_find(const zt__st_info *info, int n, const char *name);

/* ------------------------------------------------ split weights (src/io/safetensors_split.c) */
/* n tensors into dir as Hugging Face folders hold weights: <base>.safetensors when they take at
 * most max_bytes, else shards <base>-0000k-of-0000N.safetensors of at most max_bytes each (in
 * order; a larger tensor alone) and <base>.safetensors.index.json; every file carries the
 * metadata pairs. */
ZT_NODISCARD zt_status zt__st_save_split(const char *dir, const char *base, int n, const char *const *names,
                                         zt_tensor *const *ts, int n_meta, const char *const *keys,
                                         const char *const *vals, int64_t max_bytes);
/* Which file of dir holds each of n names (file[i], malloc'd; the caller frees each, also on
 * failure): <base>.safetensors when it exists, else what <base>.safetensors.index.json maps. */
ZT_NODISCARD zt_status zt__st_split_files(const char *dir, const char *base, int n, const char *const *names,
                                          char **file);

#endif
