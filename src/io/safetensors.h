/* The header of a safetensors file as a list (src/io/safetensors.c): the readers that take
 * ranges of tensors (the sharded snapshots) and the checks before a load. Internal.
 * Included by: src/io and src/snapshot (and tests). */
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

#endif
