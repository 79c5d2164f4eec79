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

/* ------------------------------------------------ checkpoint folders (src/train/checkpoint.c)
 * Shared by the single-process and the sharded checkpoints (src/train/checkpoint_sharded.c). */
/* state.json text for st (extra: more members, each "  \"key\": value,\n", or NULL). */
void zt__ck_state_json(zt__buf *b, const zt_train_state *st, const char *save_id, bool has_optim, const char *extra);
/* Read dir/state.json (errors name the file and field); outputs may be NULL. */
zt_status zt__ck_read_state(const char *dir, zt_train_state *st, char save_id[64], bool *has_optim);
/* A fresh save id for a save at this step (unique per save). */
void zt__ck_new_save_id(char id[64], int64_t step);
/* The whole-folder atomic save: begin picks where files go (a sibling staging folder that
 * commit swaps with dir, or dir itself when dir holds other files), commit makes it visible
 * (state.json last), abort removes the staging folder. */
typedef enum zt__ck_mode { ZT__CK_MODE_NEW = 0, ZT__CK_MODE_SWAP, ZT__CK_MODE_IN_PLACE } zt__ck_mode;
typedef struct zt__ck_stage {
  char dir[4096], parent[4096], stage[4096];
  const char *base;  /* last component of dir (points into dir) */
  zt__ck_mode mode;
  const char *into;  /* the folder to write the files into: dir or stage */
} zt__ck_stage;
/* Paths only (no file system access): for ranks that learn the mode from the rank that began. */
zt_status zt__ck_stage_paths(const char *dir, zt__ck_stage *k);
void zt__ck_stage_set_mode(zt__ck_stage *k, zt__ck_mode mode);
zt_status zt__ck_stage_begin(const char *dir, zt__ck_stage *k);
zt_status zt__ck_stage_commit(zt__ck_stage *k);
void zt__ck_stage_abort(zt__ck_stage *k);
/* zt_checkpoint_save with the optimizer state given as arrays (full-shaped, named
 * "exp_avg.<param>", ...): the full checkpoint of an FSDP model writes through this. */
zt_status zt__checkpoint_save_arrays(const char *dir, zt_gpt2 *m, bool has_optim, int n_opt,
                                     const char *const *opt_names, zt_tensor *const *opt_tensors, int64_t opt_step,
                                     const zt_train_state *st);

#endif
