/* Internal helpers of the checkpoint-file code (src/train/fileio.c): a growable text
 * buffer and a small JSON reader (DOM) for safetensors headers, state.json and
 * config.json. Not public API: names carry the zt__ prefix. */
#ifndef ZT_TRAIN_FILEIO_H
#define ZT_TRAIN_FILEIO_H

#include "zt/train.h"

/* fsync a folder (makes renames in it durable). Returns 0 or an errno value; filesystems
 * that refuse fsync on folders (EINVAL) count as success. */
int zt__fsync_dir(const char *dir);

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

/* ------------------------------------------------ JSON */
typedef enum zt__json_kind {
  ZT__JSON_NULL = 0,
  ZT__JSON_BOOL,
  ZT__JSON_NUMBER,
  ZT__JSON_STRING,
  ZT__JSON_ARRAY,
  ZT__JSON_OBJECT
} zt__json_kind;

typedef struct zt__json {
  zt__json_kind kind;
  bool boolean;
  char *str;              /* STRING: the unescaped value (UTF-8); NUMBER: its text as written */
  int n;                  /* ARRAY/OBJECT: number of items */
  struct zt__json *items; /* ARRAY/OBJECT items, in file order */
  char **keys;            /* OBJECT: key of each item (unique: duplicates are a parse error) */
} zt__json;

/* Parse text[0, len) as one JSON value (whitespace around it allowed). `what` names the
 * input in error messages ("header of 'a.safetensors'"); errors give line and column.
 * Strings may not contain NUL (\u0000); nesting deeper than 64 is refused. */
zt_status zt__json_parse(const char *text, size_t len, const char *what, zt__json **out);
void zt__json_free(zt__json *j);
/* Member of an object (NULL if j is not an object or has no such key). */
const zt__json *zt__json_get(const zt__json *j, const char *key);
/* Exact integer conversions of a NUMBER written without fraction or exponent (false if
 * j is not one or the value does not fit). */
bool zt__json_i64(const zt__json *j, int64_t *out);
bool zt__json_u64(const zt__json *j, uint64_t *out);
/* Any NUMBER as a double. */
bool zt__json_f64(const zt__json *j, double *out);

#endif
