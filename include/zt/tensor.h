/* zerotrain core layer: dtypes, devices, the accounting allocator, refcounted storage,
 * tensors (strided views over storage) and the Philox RNG.
 * Invariants: every data byte comes from the allocator with a (device, tag); storage is
 * the only refcounted object; a tensor struct has one owner, who frees it with
 * zt_tensor_free (which drops its storage reference). */
#ifndef ZT_TENSOR_H
#define ZT_TENSOR_H

#include "zt/status.h"

/* ---------------------------------------------------------------- dtypes */
typedef enum zt_dtype {
  ZT_DTYPE_F32 = 0,
  ZT_DTYPE_F64,
  ZT_DTYPE_BF16,
  ZT_DTYPE_F16,
  ZT_DTYPE_I32, /* indices (embedding, cross-entropy targets) */
  ZT_DTYPE_I64,
  ZT_DTYPE_COUNT
} zt_dtype;

ZT_API size_t zt_dtype_size(zt_dtype dt);
ZT_API const char *zt_dtype_name(zt_dtype dt); /* "f32", ...; "invalid" for unknown values */
ZT_API bool zt_dtype_valid(zt_dtype dt);
ZT_API bool zt_dtype_is_float(zt_dtype dt);
/* Parse "f32", "float32", "bf16", ...; unknown names are ZT_STATUS_DTYPE. */
ZT_API ZT_NODISCARD zt_status zt_dtype_parse(const char *name, zt_dtype *out);

/* bf16 / f16 conversion (round to nearest even, NaN kept). */
ZT_API uint16_t zt_f32_to_bf16(float x);
ZT_API float zt_bf16_to_f32(uint16_t h);
ZT_API uint16_t zt_f32_to_f16(float x);
ZT_API float zt_f16_to_f32(uint16_t h);

/* ---------------------------------------------------------------- devices */
typedef enum zt_device_type {
  ZT_DEVICE_CPU = 0,
  ZT_DEVICE_CUDA,
  ZT_DEVICE_DISK, /* offload tier: accounting only, bytes live in files */
  /* Reserved for tests: a device whose memory the host cannot touch except through its
   * backend (tests/guard_backend.c registers it); no backend in the library. */
  ZT_DEVICE_GUARDED,
  ZT_DEVICE_TYPE_COUNT
} zt_device_type;

#define ZT_MAX_DEVICE_INDEX 16
typedef struct zt_device {
  zt_device_type type;
  int index;
} zt_device;

#define ZT_CPU ((zt_device){ZT_DEVICE_CPU, 0})
ZT_API bool zt_device_equal(zt_device a, zt_device b);
/* "cpu", "cuda:0", "disk", "guarded:0" ("cpu:N" / "disk:N" for an index N > 0). buf must hold 16
 * bytes; returns buf. */
ZT_API const char *zt_device_str(zt_device d, char *buf);

/* ---------------------------------------------------------------- allocator */
typedef enum zt_mem_tag {
  ZT_MEM_TAG_PARAM = 0,
  ZT_MEM_TAG_GRAD,
  ZT_MEM_TAG_OPTIM,
  ZT_MEM_TAG_ACTIVATION,
  ZT_MEM_TAG_COMM,
  ZT_MEM_TAG_TEMP,
  ZT_MEM_TAG_COUNT
} zt_mem_tag;
ZT_API const char *zt_mem_tag_name(zt_mem_tag tag); /* "PARAM", ... */

/* A replaceable allocator: a struct of function pointers plus ctx. alloc returns NULL
 * on failure. The default one uses 64-byte aligned host memory for cpu. */
typedef struct zt_allocator {
  void *(*alloc)(void *ctx, size_t bytes, zt_device dev);
  void (*free)(void *ctx, void *ptr, size_t bytes, zt_device dev);
  void *ctx;
} zt_allocator;

/* Install an allocator for one device type (NULL restores the default). Only legal while
 * nothing allocated through the previous one is alive on that device type. */
ZT_API ZT_NODISCARD zt_status zt_mem_set_allocator(zt_device_type type, const zt_allocator *a);

/* Allocate / free accounted bytes. bytes == 0 gives a valid unique pointer-free NULL. */
ZT_API ZT_NODISCARD zt_status zt_mem_alloc(size_t bytes, zt_device dev, zt_mem_tag tag, void **out);
ZT_API void zt_mem_free(void *ptr, size_t bytes, zt_device dev, zt_mem_tag tag);
/* Count bytes that live outside the allocator (files on the disk device): delta > 0 adds,
 * < 0 removes; peaks update as for allocations. */
ZT_API void zt_mem_account(zt_device dev, zt_mem_tag tag, int64_t delta);
/* Move accounted bytes from one tag to another (no copy). */
ZT_API void zt_mem_retag(size_t bytes, zt_device dev, zt_mem_tag from, zt_mem_tag to);

typedef struct zt_mem_stats {
  int64_t current[ZT_MEM_TAG_COUNT];
  int64_t peak[ZT_MEM_TAG_COUNT];
  int64_t current_total;
  int64_t peak_total; /* peak of the sum, not the sum of peaks */
  int64_t current_state, peak_state; /* PARAM + GRAD + OPTIM (ZeRO's model states), peak of the sum */
} zt_mem_stats;
ZT_API void zt_mem_stats_get(zt_device dev, zt_mem_stats *out);
/* Set every peak to the current value (all devices). */
ZT_API void zt_mem_reset_peaks(void);
/* Write a human-readable table of every device with bytes into buf (snprintf rules);
 * returns the length that the full report needs. */
ZT_API size_t zt_mem_report(char *buf, size_t cap);
/* The default host allocator keeps freed blocks of >= 64 KiB for reuse by the next
 * allocation of the same size, never more bytes than the most that were live on cpu at once
 * in the process (src/core/host_alloc.c). Cached bytes are not counted as live by the
 * accounting; these report and return them. From its first block on it fixes glibc's mmap
 * threshold at 64 KiB (process-wide), so that freed blocks the cache does not keep go back to
 * the kernel instead of staying resident in malloc's heap. */
/* Bound the cache's bytes as well (default: ZT_ALLOC_CACHE_MB when set, else a quarter of the
 * machine's memory; 0 turns the cache off): cached blocks are not accounted but are resident. */
ZT_API void zt_mem_set_cache_limit(int64_t bytes);
/* The cache's byte bound now (ZT_ALLOC_CACHE_MB's, or the default, until zt_mem_set_cache_limit). */
ZT_API int64_t zt_mem_cache_limit(void);
ZT_API int64_t zt_mem_cached_bytes(void);
ZT_API void zt_mem_empty_cache(void);
/* Peak resident set size of this process in bytes (from the OS), for cross-checks. */
ZT_API int64_t zt_mem_peak_rss(void);
/* The process's resident set now, bytes (-1 where /proc cannot tell). */
ZT_API int64_t zt_mem_current_rss(void);

/* The tag given to tensors created by ops on this thread (default ACTIVATION).
 * push returns the previous tag; pass it to pop. */
ZT_API zt_mem_tag zt_mem_tag_push(zt_mem_tag tag);
ZT_API void zt_mem_tag_pop(zt_mem_tag previous);
ZT_API zt_mem_tag zt_mem_tag_current(void);

/* ---------------------------------------------------------------- storage */
/* Refcounted bytes on one device. Its bytes can be released (FSDP reshard, offload)
 * and re-made later while tensors that view it stay alive; reading released bytes is a
 * ZT_STATUS_RELEASED error. The version counter is bumped by every in-place write
 * and shared by all views of the storage. */
typedef struct zt_storage {
  void *data;      /* NULL when released or empty */
  size_t nbytes;
  zt_device device;
  zt_mem_tag tag;
  int refcount;
  bool released;
  uint64_t version;
  bool external;   /* data not owned (wraps user memory); never freed */
  uint64_t id;     /* unique in the process, never reused (identifies a storage after it is freed) */
  /* Non-NULL while its bytes are in a store (zt_storage_evict in zt/store.h); released is then
   * true as well. Internal: read it through zt_storage_is_evicted. */
  struct zt_storage_eviction *evicted;
  char name[96];   /* optional, for messages (a parameter's name); "" if unnamed: zt_storage_set_name */
} zt_storage;

ZT_API ZT_NODISCARD zt_status zt_storage_new(size_t nbytes, zt_device dev, zt_mem_tag tag, zt_storage **out);
/* Wrap caller memory (not accounted, never freed); caller keeps it alive. */
ZT_API ZT_NODISCARD zt_status zt_storage_wrap(void *data, size_t nbytes, zt_device dev, zt_storage **out);
ZT_API void zt_storage_retain(zt_storage *s);
ZT_API void zt_storage_release_ref(zt_storage *s); /* drops one reference; frees at zero */
/* Free the bytes, keep the object. Views stay valid objects; their data is unreadable.
 * An evicted storage has no bytes in memory already: no-op (the store's copy stays). */
ZT_API ZT_NODISCARD zt_status zt_storage_release(zt_storage *s);
/* Allocate the bytes again (contents undefined: the caller fills them). The version is
 * not bumped (a refill with the same values keeps saved tensors valid); a caller that
 * writes different values must call zt_tensor_bump_version. An evicted storage is refused
 * (ZT_STATUS_STATE): zt_storage_restore brings its contents back. */
ZT_API ZT_NODISCARD zt_status zt_storage_rematerialize(zt_storage *s);
ZT_API void zt_storage_retag(zt_storage *s, zt_mem_tag tag);
/* Name the storage in error messages (e.g. reading it while evicted); truncated to fit
 * name[]; NULL clears it. */
ZT_API void zt_storage_set_name(zt_storage *s, const char *name);

/* ---------------------------------------------------------------- tensors */
#define ZT_MAX_DIMS 8

struct zt_node;

/* A strided view over a storage. Fields are public for reading; change them only via
 * the functions below. Offsets and strides are in elements. */
typedef struct zt_tensor {
  zt_storage *storage;
  int64_t offset;
  int ndim;
  int64_t shape[ZT_MAX_DIMS];
  int64_t stride[ZT_MAX_DIMS];
  zt_dtype dtype;
  /* autograd */
  bool requires_grad;
  struct zt_tensor *grad;         /* leaves: accumulated gradient, owned */
  struct zt_node *grad_fn;        /* non-leaves: producing node (a counted reference) */
  int output_nr;                  /* which output of grad_fn */
  struct zt_node *grad_acc;       /* leaves that require grad: their accumulator node (counted ref) */
  bool is_view;                   /* shares storage with a tensor it was derived from */
} zt_tensor;

/* New contiguous tensor, uninitialised / zero-filled, with tag zt_mem_tag_current(). */
ZT_API ZT_NODISCARD zt_status zt_tensor_empty(int ndim, const int64_t *shape, zt_dtype dt, zt_device dev, zt_tensor **out);
ZT_API ZT_NODISCARD zt_status zt_tensor_zeros(int ndim, const int64_t *shape, zt_dtype dt, zt_device dev, zt_tensor **out);
ZT_API ZT_NODISCARD zt_status zt_tensor_full(int ndim, const int64_t *shape, zt_dtype dt, zt_device dev, double value, zt_tensor **out);
/* Same with an explicit tag. */
ZT_API ZT_NODISCARD zt_status zt_tensor_empty_tagged(int ndim, const int64_t *shape, zt_dtype dt, zt_device dev, zt_mem_tag tag,
                                 zt_tensor **out);
/* New contiguous tensor holding a copy of data (n = product of shape elements of dt). */
ZT_API ZT_NODISCARD zt_status zt_tensor_from_data(int ndim, const int64_t *shape, zt_dtype dt, const void *data, zt_tensor **out);
/* Frees the struct, its .grad, drops its storage ref and autograd refs. NULL is a no-op. */
ZT_API void zt_tensor_free(zt_tensor *t);

ZT_API int64_t zt_tensor_numel(const zt_tensor *t);
ZT_API size_t zt_tensor_nbytes(const zt_tensor *t); /* numel * dtype size */
ZT_API bool zt_tensor_is_contiguous(const zt_tensor *t);
ZT_API zt_device zt_tensor_device(const zt_tensor *t);
ZT_API bool zt_tensor_is_leaf(const zt_tensor *t);
ZT_API bool zt_shape_equal(int na, const int64_t *a, int nb, const int64_t *b);
/* "(4, 256, 768)"; buf must hold 128 bytes; returns buf. */
ZT_API const char *zt_shape_str(int ndim, const int64_t *shape, char *buf);

/* Pointer to the first element; ZT_STATUS_RELEASED if the storage bytes are gone. */
ZT_API ZT_NODISCARD zt_status zt_tensor_data(const zt_tensor *t, void **out);

/* A new tensor struct over the same storage and view (no autograd history). */
ZT_API ZT_NODISCARD zt_status zt_tensor_alias(const zt_tensor *t, zt_tensor **out);
/* A contiguous copy (no autograd history), with the given tag. */
ZT_API ZT_NODISCARD zt_status zt_tensor_clone_data(const zt_tensor *t, zt_mem_tag tag, zt_tensor **out);
/* Copy values src -> dst (same shape; dtype conversion allowed); bumps dst's version. */
ZT_API ZT_NODISCARD zt_status zt_tensor_copy_(zt_tensor *dst, const zt_tensor *src);
ZT_API ZT_NODISCARD zt_status zt_tensor_fill_(zt_tensor *t, double value);
/* Element i (row-major logical index) as double; for tests and small reads. NaN (and a
 * message for zt_last_error) when the storage is released or i is out of range. */
ZT_API double zt_tensor_get(const zt_tensor *t, int64_t i);
/* Integer dtypes truncate and saturate (NaN gives 0). Like copy_ and fill_, refused for a
 * tensor that requires grad while grad mode is on. */
ZT_API ZT_NODISCARD zt_status zt_tensor_set(zt_tensor *t, int64_t i, double v);
/* Bump the version counter (call after writing through zt_tensor_data). */
ZT_API void zt_tensor_bump_version(zt_tensor *t);
/* Mark a leaf as requiring grad (error for non-leaves and integer dtypes). */
ZT_API ZT_NODISCARD zt_status zt_tensor_set_requires_grad(zt_tensor *t, bool requires_grad);

/* ---------------------------------------------------------------- RNG */
/* Philox4x32-10, counter based: the stream is a pure function of (seed, offset), so
 * results do not depend on thread count. offset counts 128-bit blocks used so far. */
typedef struct zt_rng_state {
  uint64_t seed;
  uint64_t offset;
} zt_rng_state;

/* The process-wide default generator (cpu). */
ZT_API void zt_rng_seed(uint64_t seed);
ZT_API zt_rng_state zt_rng_get_state(void);
ZT_API void zt_rng_set_state(zt_rng_state s);
/* Reserve n 128-bit blocks from the default generator; returns the state to draw them
 * from (seed, first offset). Thread-safe. */
ZT_API zt_rng_state zt_rng_reserve(uint64_t nblocks);

/* One Philox4x32-10 block: four 32-bit words for (key=seed, counter=(offset, sub)). */
ZT_API void zt_philox4x32(uint64_t seed, uint64_t counter_lo, uint64_t counter_hi, uint32_t out[4]);
/* Uniform floats in [0,1) / standard normals for element i of a stream started at s. */
ZT_API float zt_rng_uniform_at(zt_rng_state s, uint64_t i);
/* Fill t with U[lo,hi) / N(mean,std) from the default generator. Refused for a tensor
 * that requires grad while grad mode is on (initialise under zt_set_grad_enabled(false)). */
ZT_API ZT_NODISCARD zt_status zt_tensor_uniform_(zt_tensor *t, double lo, double hi);
ZT_API ZT_NODISCARD zt_status zt_tensor_normal_(zt_tensor *t, double mean, double std);

#endif
