/* Internal error plumbing of the library (not installed, not exported): the calls behind
 * ZT_ERR/ZT_TRY/ZT_ASSERT. Users of the public API report errors through zt_set_error.
 * Included by: every layer of the library (not cli/, which uses zt_set_error) and tests. */
#ifndef ZT_CORE_STATUS_INTERNAL_H
#define ZT_CORE_STATUS_INTERNAL_H

#include "zt/status.h"

/* Record a message for zt_last_error() and return code. */
zt_status zt__error(zt_status code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Prefix the current message with more context ("in op 'add': ..."). */
zt_status zt__error_prefix(zt_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void zt__assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));
/* Keep the message of the failure that is the one to report while clean-up that may fail too
 * runs (a failing call overwrites zt_last_error()): held = zt__error_hold(s) before it,
 * zt__error_restore(held) after puts the message back and frees it. s == ZT_OK (or no memory
 * for the copy): NULL, and restoring NULL does nothing. */
char *zt__error_hold(zt_status s);
void zt__error_restore(char *held);

#define ZT_ERR(code, ...) zt__error((code), __FILE__, __LINE__, __VA_ARGS__)
#define ZT_TRY(expr)                 \
  do {                               \
    zt_status zt__s_ = (expr);       \
    if (zt__s_ != ZT_OK) return zt__s_; \
  } while (0)
/* A status the caller can do nothing with (while freeing, or after an earlier failure that
 * is the one reported): dropped on purpose; `why` says why, in the source. */
#define ZT_IGNORE(expr, why)           \
  do {                                 \
    zt_status zt__ignored_ = (expr);   \
    (void)zt__ignored_;                \
    (void)sizeof(why);                 \
  } while (0)
#define ZT_ASSERT(cond) \
  do {                  \
    if (!(cond)) zt__assert_fail(#cond, __FILE__, __LINE__); \
  } while (0)

#endif
