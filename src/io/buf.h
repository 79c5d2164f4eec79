/* A growable text buffer for files written whole (state.json, index.json, config.json, the
 * metrics lines) and the caps of the small files the readers take (src/io/buf.c). Internal; the
 * io layer and the layers above it include it.
 * Included by: src/io and the layers above it (data, snapshot, train). */
#ifndef ZT_IO_BUF_H
#define ZT_IO_BUF_H

#include <stdbool.h>
#include <stddef.h>

#include "zt/status.h"

/* ------------------------------------------------ reading files */
/* What zt_read_file reads at most: 16 GiB (text to tokenize is the large case; the ids it
 * becomes take 4 bytes per byte of text). */
#define ZT__READ_FILE_MAX ((size_t)16 << 30)
/* Caps of the small files: JSON files (state.json, index.json, config.json) and config
 * files; GPT-2's encoder.json (1 MB) and vocab.bpe (0.5 MB). */
#define ZT__READ_JSON_MAX ((size_t)256 << 20)
#define ZT__READ_BPE_MAX ((size_t)256 << 20)
/* Opening and reading regular files under such a cap: core/file.h (zt__open_regular_file,
 * zt__read_regular_file, zt__read_text_file). */


/* ------------------------------------------------ text buffer */
/* Appends never fail visibly: on OOM the buffer sets .oom and ignores further text, so
 * a writer checks once at the end. */
typedef struct zt__buf {
  char *data; /* NUL-terminated when len > 0 */
  size_t len, cap;
  bool oom;
} zt__buf;
void zt__buf_put(zt__buf *b, const char *s, size_t n);
void zt__buf_printf(zt__buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s as a JSON string literal: quotes, and escapes for '"', '\\' and control bytes. */
void zt__buf_json_string(zt__buf *b, const char *s);
void zt__buf_free(zt__buf *b);
/* The text of b as the whole of file path, written atomically (zt_write_file_atomic); a
 * buffer that ran out of memory while it was filled is ZT_STATUS_OOM instead. */
ZT_NODISCARD zt_status zt__buf_write_atomic(const zt__buf *b, const char *path);


/* Shortest "%.Ng" that reads back as the same double (0.1 rather than 0.10000000000000001). */
const char *zt__fmt_double(char buf[32], double v);

#endif
