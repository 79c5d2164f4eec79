/* zerotrain status codes and error messages (and the monotonic clock everything times with).
 * The library never exits or prints: a failing call returns a zt_status and leaves a
 * message (what was wrong, what to do) for zt_last_error(); broken invariants abort
 * through ZT_ASSERT with file:line. */
#ifndef ZT_STATUS_H
#define ZT_STATUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
const char *zt_last_error(void);
/* The name of a status code, e.g. "ZT_STATUS_SHAPE". */
const char *zt_status_name(zt_status s);
/* Forget the last message (tests use it). */
void zt_clear_error(void);

/* Seconds on a monotonic clock (CLOCK_MONOTONIC): only differences mean anything. The one
 * clock of the library, the CLI, the tests and the benchmarks (src/core/clock.c). */
double zt_clock_now(void);

/* Internal: record a message for zt_last_error() and return code. */
zt_status zt__error(zt_status code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Internal: prefix the current message with more context ("in op 'add': ..."). */
zt_status zt__error_prefix(zt_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void zt__assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));

#define ZT_ERR(code, ...) zt__error((code), __FILE__, __LINE__, __VA_ARGS__)
#define ZT_TRY(expr)                 \
  do {                               \
    zt_status zt__s_ = (expr);       \
    if (zt__s_ != ZT_OK) return zt__s_; \
  } while (0)
#define ZT_ASSERT(cond) \
  do {                  \
    if (!(cond)) zt__assert_fail(#cond, __FILE__, __LINE__); \
  } while (0)

#endif
