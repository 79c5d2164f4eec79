/* The growable text buffer of the files written whole (buf.h), and the shortest round-trip
 * form of a double. */
#include "io/buf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/status_internal.h"
#include "zt/io.h"

/* ------------------------------------------------------------------ text buffer */

static bool buf_reserve(zt__buf *b, size_t extra) {
  if (b->oom) return false;
  if (b->len + extra + 1 <= b->cap) return true;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->len + extra + 1) cap *= 2;
  char *d = realloc(b->data, cap);
  if (!d) {
    b->oom = true;
    return false;
  }
  b->data = d;
  b->cap = cap;
  return true;
}

void zt__buf_put(zt__buf *b, const char *s, size_t n) {
  if (!buf_reserve(b, n)) return;
  memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = '\0';
}

void zt__buf_printf(zt__buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || !buf_reserve(b, (size_t)n)) return;
  va_start(ap, fmt);
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

void zt__buf_json_string(zt__buf *b, const char *s) {
  zt__buf_put(b, "\"", 1);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') {
      char e[2] = {'\\', (char)*p};
      zt__buf_put(b, e, 2);
    } else if (*p < 0x20) {
      zt__buf_printf(b, "\\u%04x", *p);
    } else {
      zt__buf_put(b, (const char *)p, 1);
    }
  }
  zt__buf_put(b, "\"", 1);
}

void zt__buf_free(zt__buf *b) {
  free(b->data);
  memset(b, 0, sizeof *b);
}

zt_status zt__buf_write_atomic(const zt__buf *b, const char *path) {
  if (b->oom) return ZT_ERR(ZT_STATUS_OOM, "out of memory writing '%s'", path);
  const void *chunk = b->data;
  size_t size = b->len;
  return zt_write_file_atomic(path, &chunk, &size, 1);
}

const char *zt__fmt_double(char buf[32], double v) {
  for (int prec = 6; prec <= 17; prec++) {
    snprintf(buf, 32, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  return buf;
}
