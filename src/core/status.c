/* Status codes and the per-thread last-error message. The library never exits; only
 * ZT_ASSERT (a broken invariant, never bad user input) aborts, naming file:line. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"

#define ZT_MSG_CAP 2048
static _Thread_local char tl_msg[ZT_MSG_CAP];

const char *zt_last_error(void) { return tl_msg; }
void zt_clear_error(void) { tl_msg[0] = '\0'; }

const char *zt_status_name(zt_status s) {
  static const char *const names[ZT_STATUS_COUNT] = {
      "ZT_OK",           "ZT_STATUS_INVALID_ARG", "ZT_STATUS_SHAPE",    "ZT_STATUS_DTYPE",
      "ZT_STATUS_DEVICE", "ZT_STATUS_OOM",        "ZT_STATUS_STATE",    "ZT_STATUS_RELEASED",
      "ZT_STATUS_AUTOGRAD", "ZT_STATUS_IO",       "ZT_STATUS_UNSUPPORTED", "ZT_STATUS_COMM",
      "ZT_STATUS_INTERNAL"};
  if ((int)s < 0 || s >= ZT_STATUS_COUNT) return "ZT_STATUS_UNKNOWN";
  return names[s];
}

zt_status zt__error(zt_status code, const char *file, int line, const char *fmt, ...) {
  char body[ZT_MSG_CAP];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(body, sizeof body, fmt, ap);
  va_end(ap);
  const char *base = strrchr(file, '/');
  int n = snprintf(tl_msg, sizeof tl_msg, "%s", body);
  if (n >= 0 && (size_t)n < sizeof tl_msg)
    snprintf(tl_msg + n, sizeof tl_msg - (size_t)n, " [%s:%d]", base ? base + 1 : file, line);
  return code;
}

zt_status zt_set_error(zt_status code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tl_msg, sizeof tl_msg, fmt, ap);
  va_end(ap);
  return code;
}

zt_status zt__error_prefix(zt_status code, const char *fmt, ...) {
  char prefix[512], old[ZT_MSG_CAP];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, tl_msg, sizeof old);
  int n = snprintf(tl_msg, sizeof tl_msg, "%s: ", prefix);
  if (n >= 0 && (size_t)n < sizeof tl_msg) snprintf(tl_msg + n, sizeof tl_msg - (size_t)n, "%s", old);
  return code;
}

char *zt__error_hold(zt_status s) { return s != ZT_OK ? strdup(tl_msg) : NULL; }

void zt__error_restore(char *held) {
  if (!held) return;
  snprintf(tl_msg, sizeof tl_msg, "%s", held);
  free(held);
}

void zt__assert_fail(const char *expr, const char *file, int line) {
  fprintf(stderr, "zerotrain: internal invariant broken: %s at %s:%d\n", expr, file, line);
  abort();
}
