/* zerotrain status codes and error messages (and the monotonic clock everything times with).
 * The library never exits or prints: a failing call returns a zt_status and leaves a
 * message (what was wrong, what to do) for zt_last_error(); broken invariants abort
 * with file:line. ZT_API marks what libzt.so exports (the rest is hidden). */
#ifndef ZT_STATUS_H
#define ZT_STATUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ZT_API __attribute__((visibility("default")))
/* On every function that returns a zt_status: ignoring one is a compile error (-Werror); a
 * caller that has nothing to do with a failure says why (ZT_IGNORE in the library). */
#define ZT_NODISCARD __attribute__((warn_unused_result))

typedef enum zt_status {
  ZT_OK = 0,
  ZT_STATUS_INVALID_ARG, /* a bad argument: NULL, out of range, unknown enum value */
  ZT_STATUS_SHAPE,       /* shapes that do not fit the op */
  ZT_STATUS_DTYPE,       /* a dtype the op does not take, or mixed dtypes */
  ZT_STATUS_DEVICE,      /* tensors on different devices, or a device with no backend */
  ZT_STATUS_OOM,         /* the allocator could not give the bytes */
  ZT_STATUS_STATE,       /* a call that is illegal in the current state */
  ZT_STATUS_RELEASED,    /* reading a storage whose bytes were released */
  ZT_STATUS_AUTOGRAD,    /* backward twice, in-place after save, no grad_fn, ... */
  ZT_STATUS_IO,          /* files */
  ZT_STATUS_UNSUPPORTED, /* a valid request this build cannot do */
  ZT_STATUS_COMM,        /* collectives */
  ZT_STATUS_INTERNAL,    /* a foreign library failed */
  ZT_STATUS_COUNT
} zt_status;

/* The message of the last failure on this thread ("" if none). Valid until the next
 * failing call on this thread. */
ZT_API const char *zt_last_error(void);
/* The name of a status code, e.g. "ZT_STATUS_SHAPE". */
ZT_API const char *zt_status_name(zt_status s);
/* Forget the last message (tests use it). */
ZT_API void zt_clear_error(void);

/* Which zerotrain this is: "0.9.0 (commit 1a2b3c4d5e; MPI yes, CUDA no, NCCL no; OpenBLAS ...)". */
ZT_API const char *zt_version(void);

/* Seconds on a monotonic clock (CLOCK_MONOTONIC): only differences mean anything. The one
 * clock of the library, the CLI, the tests and the benchmarks (src/core/clock.c). */
ZT_API double zt_clock_now(void);

/* Record a message for zt_last_error() and return code: callers of the library (the CLI,
 * applications) that report their own failures the same way. */
ZT_API ZT_NODISCARD zt_status zt_set_error(zt_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
