/* zerotrain files: atomic whole-file writes, whole-file reads and safetensors files of tensors
 * (src/io/). Below the snapshot and training layers; needs only tensors (and stores, whose
 * evicted tensors a save reads and a load writes without restoring them). */
#ifndef ZT_IO_H
#define ZT_IO_H

#include "zt/tensor.h"

/* ------------------------------------------------ files (src/io/atomic_file.c) */
/* Write bytes to path atomically: a temp file in the same folder, fsync, rename, fsync
 * of the folder. On failure the old file (if any) is intact. */
ZT_API ZT_NODISCARD zt_status zt_write_file_atomic(const char *path, const void *const *chunks, const size_t *sizes, int n_chunks);
/* Read a whole file (malloc'd, caller frees). */
ZT_API ZT_NODISCARD zt_status zt_read_file(const char *path, void **data, size_t *size);

/* ------------------------------------------------ safetensors (src/io/safetensors.c) */
/* Save tensors (f32/f64/bf16/f16/i32/i64) with their names, plus optional string
 * metadata pairs, atomically. Written tensor after tensor; a tensor whose storage is evicted
 * (zt_storage_evict) is read from its store through one host buffer (the largest such
 * storage, ZT_MEM_TAG_TEMP) and stays evicted: the same bytes as a save from RAM. */
ZT_API ZT_NODISCARD zt_status zt_safetensors_save(const char *path, int n, const char *const *names, zt_tensor *const *tensors,
                              int n_meta, const char *const *meta_keys, const char *const *meta_values);
/* Load the named tensors into existing tensors (shapes must match; dtypes are converted).
 * strict: every name must be present in the file and the file must hold no others.
 * Errors name the file, the tensor and what differs. A destination whose storage is evicted
 * is filled in its store (zt_storage_write_evicted) through one host buffer and stays
 * evicted; one being restored (zt_storage_restore_async) is refused before anything loads. */
ZT_API ZT_NODISCARD zt_status zt_safetensors_load_into(const char *path, int n, const char *const *names, zt_tensor *const *tensors,
                                   bool strict);
/* Read one metadata value (malloc'd string, caller frees; NULL if absent). */
ZT_API ZT_NODISCARD zt_status zt_safetensors_metadata(const char *path, const char *key, char **value);
/* The tensor names in a file, in header order. *names is one malloc'd block (the array,
 * NULL-terminated, followed by the strings): free it with free(). */
ZT_API ZT_NODISCARD zt_status zt_safetensors_names(const char *path, int *n, char ***names);

#endif
