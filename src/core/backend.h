/* Internal: device backends. One backend per device type, looked up by the type: it owns
 * the device's memory (allocation, accounted by alloc.c per device and tag), every byte
 * move outside a kernel (fill, copy within and across devices, cast, host <-> device
 * reads and writes) and the few numeric helpers that code outside the kernels needs
 * (add-into, scale, sum-to-shape, sum of squares, the optimizer updates). Kernels run
 * between the backend's enter and exit hooks (the op dispatcher calls them).
 *
 * Rule: outside kernels and backends no code reads or writes tensor bytes; it calls the
 * zt__dev_* functions below, which pick the backend of the tensor's device. A device whose
 * memory the host cannot touch (a GPU, the guarded test device) then runs the whole stack.
 *
 *   zt_tensor *w;                                  // any device
 *   zt__dev_fill(w, 0.0);                          // the backend of w's device fills it
 *   float host[4];
 *   zt__dev_read(w, host, sizeof host);            // staged to host by that backend
 * Included by: any layer above core that must move tensor bytes outside a kernel (autograd, ops,
 * nn, models, optim, comm, strategies, io, data, snapshot, train) and the tests. */
#ifndef ZT_CORE_BACKEND_H
#define ZT_CORE_BACKEND_H

#include "zt/tensor.h"

/* Elementwise host loops below this many elements stay on one thread. */
#define ZT_PAR_MIN 32768

/* A queue of work on a device. NULL is the device's default stream, which is synchronous
 * on the host: a copy on it has finished when the call returns. */
typedef struct zt__stream zt__stream;
/* A point on a stream; waiting on it waits for the work queued before it. */
typedef struct zt__event zt__event;

/* AdamW / SGD constants for one parameter, computed once per step (f32, as the loops). */
typedef struct zt__optim_update {
  float decay;            /* w *= decay (1 - lr wd where decay applies, else 1) */
  float beta1, omb1, beta2, omb2, step_size, bc2_sqrt, eps; /* AdamW */
  float momentum, lr;     /* SGD */
} zt__optim_update;

typedef struct zt__backend {
  const char *name;             /* "cpu" */
  zt_device_type type;
  /* The device type whose op kernel tables this backend runs: its own type, or another
   * whose kernels can address its memory (the guarded test device runs the CPU's). */
  zt_device_type kernel_type;
  /* The host may read and write this device's bytes directly (cpu). Code never relies on
   * it for correctness; it may skip staging buffers when it is true. */
  bool host_accessible;
  void *ctx;

  /* ---- memory: NULL on failure; bytes > 0. Accounting is done by the caller (alloc.c). */
  void *(*alloc)(void *ctx, size_t bytes, zt_device dev);
  void (*free)(void *ctx, void *ptr, size_t bytes, zt_device dev);

  /* ---- kernel runs (optional): the dispatcher calls enter before an op's forward or
   * backward touches this device's bytes and exit after; calls nest (a refcount). */
  void (*enter)(void *ctx);
  void (*exit)(void *ctx);

  /* ---- byte moves on tensors of this device (any strides unless stated) */
  void (*fill)(void *ctx, zt_tensor *t, double v);              /* t = v (integers saturate) */
  /* dst = src, same shape; dtypes may differ (zt_tensor_copy_'s element conversion);
   * same-dtype copies move bytes exactly. */
  void (*copy)(void *ctx, zt_tensor *dst, const zt_tensor *src);
  /* dst (n of ddt) = src (n of sdt), both contiguous device pointers (zt_cast's rules:
   * round to nearest even, one rounding, NaN kept, i64 -> i32 wraps). */
  void (*cast)(void *ctx, void *dst, zt_dtype ddt, const void *src, zt_dtype sdt, int64_t n);
  /* Raw bytes between host memory and device pointers (offsets already applied). */
  void (*write)(void *ctx, void *dst, const void *host_src, size_t bytes, zt__stream *stream);
  void (*read)(void *ctx, void *host_dst, const void *src, size_t bytes, zt__stream *stream);
  /* Raw bytes within the device (regions may overlap). */
  void (*move)(void *ctx, void *dst, const void *src, size_t bytes, zt__stream *stream);

  /* ---- streams and events (optional: NULL members mean everything is synchronous) */
  zt_status (*stream_new)(void *ctx, zt__stream **out);
  void (*stream_free)(void *ctx, zt__stream *s);
  zt_status (*event_record)(void *ctx, zt__stream *s, zt__event **out);
  void (*event_wait)(void *ctx, zt__event *e); /* blocks the host; frees e */

  /* ---- helpers for code outside the kernels (f32/f64 tensors of this device) */
  /* dst += src, same shape, any strides, dtypes may differ (the engine's accumulation). */
  void (*add_into)(void *ctx, zt_tensor *dst, const zt_tensor *src);
  void (*scale)(void *ctx, zt_tensor *t, double s);             /* contiguous t *= s */
  /* dst (f32) += (float)(widen(src) / div), src f32, bf16 or f16, both contiguous with the
   * same element count (FSDP's reduced gradient shards). */
  void (*add_div)(void *ctx, zt_tensor *dst, const zt_tensor *src, double div);
  /* out (contiguous, zero-filled by the caller) += g summed down to out's shape (g has the
   * broadcast shape, out's shape is right-aligned against it). */
  void (*sum_to_shape)(void *ctx, const zt_tensor *g, zt_tensor *out);
  /* Sum of squares in double over a fixed tree of blocks: the same bits for any thread
   * count (clipping). Contiguous t; [lo, lo + n) elements of it. */
  double (*sum_squares)(void *ctx, const zt_tensor *t, int64_t lo, int64_t n);
  /* One AdamW step (f32, contiguous, n elements): w, m, v updated in place from g. */
  void (*adamw)(void *ctx, zt_tensor *w, const zt_tensor *g, zt_tensor *m, zt_tensor *v,
                const zt__optim_update *u);
  /* SGD: with buf (momentum) or without (buf NULL). */
  void (*sgd)(void *ctx, zt_tensor *w, const zt_tensor *g, zt_tensor *buf, const zt__optim_update *u);
} zt__backend;

/* The backend of a device type, or NULL when this build has none. */
const zt__backend *zt__backend_get(zt_device_type type);
/* Register (or with b NULL, remove) the backend of a device type; b is borrowed and must
 * stay alive while registered. Refused while memory allocated on that type is alive.
 * Tests use it to add the guarded device; the cpu backend is built in. */
ZT_NODISCARD zt_status zt__backend_register(zt_device_type type, const zt__backend *b);
/* The backend of dev, or a ZT_STATUS_DEVICE error naming fn and the device. */
ZT_NODISCARD zt_status zt__backend_of(zt_device dev, const char *fn, const zt__backend **out);

/* The built-in CPU backend; host allocation (64-byte aligned, with the large-block
 * cache described in host_alloc.c). */
extern const zt__backend zt__cpu_backend;
void *zt__host_alloc(void *ctx, size_t bytes, zt_device dev);
void zt__host_free(void *ctx, void *ptr, size_t bytes, zt_device dev);
/* bytes > 0: before the host allocator takes a fresh block, it gives cached blocks back (the
 * oldest first) while cpu's live bytes (the accounting), the cached ones and the new block would
 * pass bytes: the cache then fills what a memory plan leaves free and no more (0: no such bound,
 * only zt_mem_set_cache_limit's). */
void zt__mem_set_resident_limit(int64_t bytes);
int64_t zt__mem_resident_limit(void);
/* Set the host cache's bound, the high mark of cpu's live bytes (tests: a mark they can reason
 * from; the next allocation past it raises it again). */
void zt__host_cache_set_high(int64_t bytes);
/* The CPU backend's loops, for backends whose kernels address host-like memory. */
void zt__host_cast(void *dst, zt_dtype ddt, const void *src, zt_dtype sdt, int64_t n);
void zt__host_memcpy(void *dst, const void *src, int64_t bytes); /* parallel above ~256 KiB */
/* Whether allocations made on a device type are alive (alloc.c). */
bool zt__mem_live(zt_device_type type);

/* Enter / exit the backend of dev around code that runs kernels on its bytes. */
void zt__dev_enter(zt_device dev);
void zt__dev_exit(zt_device dev);

/* ---- tensor-level byte moves, routed to the tensor's backend (tensors not released) */
void zt__dev_fill(zt_tensor *t, double v);
/* dst = src: any devices (across devices staged through host memory), shapes equal. */
ZT_NODISCARD zt_status zt__dev_copy(zt_tensor *dst, const zt_tensor *src);
/* Contiguous t's elements [0, bytes) to / from host memory. */
void zt__dev_read(const zt_tensor *t, void *host_dst, size_t bytes);
void zt__dev_write(zt_tensor *t, const void *host_src, size_t bytes);
/* Element-range variants: elements [lo, lo + n) of contiguous t. */
void zt__dev_read_range(const zt_tensor *t, int64_t lo, int64_t n, void *host_dst);
void zt__dev_write_range(zt_tensor *t, int64_t lo, int64_t n, const void *host_src);
/* dst elements [dlo, dlo + n) = src elements [slo, slo + n), both contiguous, same dtype,
 * same device. */
void zt__dev_copy_range(zt_tensor *dst, int64_t dlo, const zt_tensor *src, int64_t slo, int64_t n);
/* Contiguous cast of n elements: dst[dlo..] (ddt) = src[slo..] (sdt), same device. */
void zt__dev_cast_range(zt_tensor *dst, int64_t dlo, const zt_tensor *src, int64_t slo, int64_t n);
void zt__dev_add_into(zt_tensor *dst, const zt_tensor *src);
void zt__dev_scale(zt_tensor *t, double s);
void zt__dev_add_div(zt_tensor *dst, const zt_tensor *src, double div);
void zt__dev_sum_to_shape(const zt_tensor *g, zt_tensor *out);
double zt__dev_sum_squares(const zt_tensor *t, int64_t lo, int64_t n);
void zt__dev_adamw(zt_tensor *w, const zt_tensor *g, zt_tensor *m, zt_tensor *v, const zt__optim_update *u);
void zt__dev_sgd(zt_tensor *w, const zt_tensor *g, zt_tensor *buf, const zt__optim_update *u);
/* Storage-level moves (offload's tier copies): bytes [off, off + bytes) of s to / from host
 * memory, through s's backend; s not released. */
void zt__dev_storage_read(const zt_storage *s, size_t off, void *host_dst, size_t bytes);
void zt__dev_storage_write(zt_storage *s, size_t off, const void *host_src, size_t bytes);
/* The host address of s's bytes when its device's backend is host_accessible (cpu), else
 * NULL. The one sanctioned way to skip a staging buffer: code that holds a non-NULL result
 * may read and write those bytes directly (pread straight into a parameter, a tier copy
 * with no bounce), and must stage through zt__dev_storage_read / _write otherwise. */
void *zt__storage_host_data(const zt_storage *s);
/* The same for tensor t: the host address of its first element (t's offset applied), or NULL. */
void *zt__tensor_host_ptr(const zt_tensor *t);

/* A new contiguous tensor on dev holding host_src (ndim/shape/dtype as zt_tensor_empty). */
ZT_NODISCARD zt_status zt__tensor_from_host(int ndim, const int64_t *shape, zt_dtype dt, zt_device dev, zt_mem_tag tag,
                               const void *host_src, zt_tensor **out);
/* A contiguous copy of t on another device (same dtype and shape), tag as given. */
ZT_NODISCARD zt_status zt__tensor_to_device(const zt_tensor *t, zt_device dev, zt_mem_tag tag, zt_tensor **out);

#endif
