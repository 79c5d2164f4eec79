/* A small JSON reader (a DOM) for safetensors headers, state.json, index.json, config.json and
 * tokenizer files (src/io/json.c). Internal; the io layer and the layers above it include it.
 * Included by: src/io and the layers above it (data, snapshot, train). */
#ifndef ZT_IO_JSON_H
#define ZT_IO_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zt/status.h"

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
  struct zt__json *items; /* ARRAY/OBJECT items, in file order: iterate these to visit every member */
  char **keys;            /* OBJECT: key of each item (unique: duplicates are a parse error) */
  int *order;             /* OBJECT of more than a few members: item indices sorted by key */
} zt__json;

/* Parse text[0, len) as one JSON value (whitespace around it allowed). `what` names the
 * input in error messages ("header of 'a.safetensors'"); errors give line and column.
 * Strings may not contain NUL (\u0000); nesting deeper than 64 is refused. Duplicate keys
 * are found by sorting (O(n log n) per object); the error names the key and its line. */
ZT_NODISCARD zt_status zt__json_parse(const char *text, size_t len, const char *what, zt__json **out);
void zt__json_free(zt__json *j);
/* The members of a top-level JSON object, streamed: fn(key, value, ctx) for each in file order,
 * the key unescaped and the value parsed as by zt__json_parse (both freed after the call), so
 * large objects need no DOM and no index. Same syntax, limits and messages as zt__json_parse,
 * except that duplicate keys are not looked for (fn sees each member); a status other than
 * ZT_OK from fn stops the walk and is returned as is. */
typedef zt_status (*zt__json_member_fn)(const char *key, const zt__json *value, void *ctx);
ZT_NODISCARD zt_status zt__json_each_member(const char *text, size_t len, const char *what, zt__json_member_fn fn, void *ctx);
/* Member of an object (NULL if j is not an object or has no such key): a binary search,
 * O(log n), so looking up every member of a large object is O(n log n). */
const zt__json *zt__json_get(const zt__json *j, const char *key);
/* Exact integer conversions of a NUMBER written without fraction or exponent (false if
 * j is not one or the value does not fit). */
bool zt__json_i64(const zt__json *j, int64_t *out);
bool zt__json_u64(const zt__json *j, uint64_t *out);
/* Any NUMBER as a double. */
bool zt__json_f64(const zt__json *j, double *out);

#endif
