/* Internal helpers of the checkpoint-file code (src/train/fileio.c): a growable text
 * buffer and a small JSON reader (DOM) for safetensors headers, state.json and
 * config.json. Not public API: names carry the zt__ prefix. */
#ifndef ZT_TRAIN_FILEIO_H
#define ZT_TRAIN_FILEIO_H

#include "core/file.h"
#include "zt/train.h"

/* fsync a folder (makes renames in it durable). Returns 0 or an errno value; filesystems
 * that refuse fsync on folders (EINVAL) count as success. */
int zt__fsync_dir(const char *dir);

/* ------------------------------------------------ atomic writes, streamed
 * zt_write_file_atomic in steps, for writers that produce a file piece by piece: open makes
 * the temp file beside path (".<name>.tmp.<pid>"), write appends to it, commit fsyncs,
 * closes, renames it over path and fsyncs the folder; abort closes and removes it. A failed
 * write or commit leaves the old file as it was and no temp file (after a failed write the
 * caller calls abort; a failed commit has aborted already). path is borrowed until commit or
 * abort; both free what open allocated, and abort of an aborted or committed file is a
 * no-op. Messages are zt_write_file_atomic's. */
typedef struct zt__atomic_file {
  const char *path;
  char *tmp, *dir;
  int fd;
} zt__atomic_file;
ZT_NODISCARD zt_status zt__atomic_open(const char *path, zt__atomic_file *f);
ZT_NODISCARD zt_status zt__atomic_write(zt__atomic_file *f, const void *p, size_t n);
ZT_NODISCARD zt_status zt__atomic_commit(zt__atomic_file *f);
void zt__atomic_abort(zt__atomic_file *f);

/* dir + "/" + name into buf (cap bytes); a path longer than that is ZT_STATUS_INVALID_ARG
 * naming it. */
ZT_NODISCARD zt_status zt__path_join(char *buf, size_t cap, const char *dir, const char *name);

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

/* ------------------------------------------------ safetensors (src/train/safetensors.c) */
typedef struct zt__st_info {
  const char *name;  /* points into the same allocation */
  const char *dtype; /* "F32", "BF16", ... (a static string) */
  int ndim;
  int64_t shape[ZT_MAX_DIMS];
  int64_t numel;
} zt__st_info;
/* Every tensor of a (validated) safetensors file with its dtype and shape, sorted by name
 * (zt__st_find looks one up); one malloc'd block, free it with free(). */
ZT_NODISCARD zt_status zt__safetensors_list(const char *path, int *n, zt__st_info **out);
const zt__st_info *zt__st_find(const zt__st_info *info, int n, const char *name);

/* ------------------------------------------------ staging of evicted storages (src/train/stage.c)
 * Checkpoint files pass the bytes of an evicted storage (zt/store.h) through one host buffer,
 * accounted on cpu under ZT_MEM_TAG_TEMP, instead of restoring it. */
typedef struct zt__stage {
  void *buf;
  size_t cap;
  uint64_t held_id, held_version; /* the buffer holds that storage's contents at that version (id 0: none) */
} zt__stage;
/* Sized for the largest storage among the evicted, non-empty tensors of ts (entries may be
 * NULL); none evicted: nothing allocated. Free with zt__stage_free (also after a failure). */
ZT_NODISCARD zt_status zt__stage_init(zt__stage *st, int n, zt_tensor *const *ts);
void zt__stage_free(zt__stage *st);
/* Whether t is all of its storage, contiguous from its start (a load need not read the
 * old contents first). */
bool zt__stage_covers(const zt_tensor *t);
/* t's storage is evicted (and the stage was sized for it): *view is a cpu tensor with t's
 * offset, shape, strides and dtype over the buffer, which then holds the storage's contents
 * (read: not read again when the buffer holds them already, so views of one storage one after
 * another, an FSDP shard's pieces, read it once) or what was last there (!read: the caller
 * fills all of it). Free the view before the next call; the buffer stays the stage's. */
ZT_NODISCARD zt_status zt__stage_view(zt__stage *st, const zt_tensor *t, bool read, zt_tensor **view);
/* The buffer (all of t's storage) as the new contents of t's evicted storage
 * (zt_storage_write_evicted: on failure the old contents stay). */
ZT_NODISCARD zt_status zt__stage_store(zt__stage *st, zt_tensor *t);
/* Elements [lo, lo + n) of contiguous t to / from host memory, t resident (its backend moves
 * them) or evicted (read from / written into its store, never restored: a range that is not
 * the whole storage passes through a host copy of it). A released, not evicted, t is
 * ZT_STATUS_RELEASED. The write bumps t's version. */
ZT_NODISCARD zt_status zt__tensor_read_range(const zt_tensor *t, int64_t lo, int64_t n, void *host_dst);
ZT_NODISCARD zt_status zt__tensor_write_range(zt_tensor *t, int64_t lo, int64_t n, const void *host_src);
/* Loaded weights or optimizer state with a NaN or inf is a damaged file, not a learning-rate
 * problem: ZT_STATUS_INVALID_ARG naming what (the source), the tensor and the first bad element.
 * Evicted tensors are read back through one stage, never restored. */
ZT_NODISCARD zt_status zt__tensors_check_finite(int n, zt_tensor *const *ts, const char *const *names, const char *what);

/* ------------------------------------------------ checkpoint folders (src/train/checkpoint.c)
 * Shared by the single-process and the sharded checkpoints (src/train/checkpoint_sharded.c). */
/* Shortest "%.Ng" that reads back as the same double (0.1 rather than 0.10000000000000001). */
const char *zt__fmt_double(char buf[32], double v);
/* state.json text for st (extra: more members, each "  \"key\": value,\n", or NULL). */
void zt__ck_state_json(zt__buf *b, const zt_train_state *st, const char *save_id, bool has_optim, const char *extra);
/* Read dir/state.json of one checkpoint folder (a series is resolved first: zt_snapshot_resolve);
 * errors name the file and field; outputs may be NULL. */
ZT_NODISCARD zt_status zt__ck_read_state(const char *dir, zt_train_state *st, char save_id[64], bool *has_optim);
/* The shape a checkpoint recorded (have) against the model's (want): ZT_STATUS_SHAPE naming
 * the first field that differs and both values. */
ZT_NODISCARD zt_status zt__ck_check_shape(const char *dir, const zt_gpt2_config *have, const zt_gpt2_config *want);
/* st's tokenizer files (zt_train_state.encoder, merges; "" none) copied into the folder `into`
 * as vocab.json and merges.txt, each written atomically; errors name the file. */
ZT_NODISCARD zt_status zt__ck_copy_tokenizer(const char *into, const zt_train_state *st);
/* The error for resuming training from checkpoint dir, which holds no optimizer state. */
ZT_NODISCARD zt_status zt__ck_no_optim(const char *dir);
/* A fresh save id for a save at this step (unique per save; its second field is the save
 * time in ns, which orders the versions of a series). */
void zt__ck_new_save_id(char id[64], int64_t step);
/* One save into a checkpoint series folder (src/train/checkpoint_dir.c): begin creates the
 * folder if needed, removes staging folders of interrupted saves, picks the version name
 * (step-<N>, or step-<N>-<k> when taken) and creates the staging folder the files go into;
 * commit renames it to the version name and then points 'latest' at it (an atomic rename of
 * a new link); abort removes the staging folder. Ranks other than the one that began get the
 * same paths from the version name with join (no file system access). */
typedef struct zt__ck_stage {
  char dir[4096];   /* the series folder */
  char name[64];    /* the version ("step-00000100") */
  char stage[4096]; /* dir/.<name>.saving: where the files are written */
  char final[4096]; /* dir/<name> */
} zt__ck_stage;
ZT_NODISCARD zt_status zt__ck_stage_begin(const char *dir, int64_t step, zt__ck_stage *k);
/* Whether dir holds a checkpoint already: a 'latest' link (even a dangling one), a state.json or
 * a step-N version. */
bool zt__ck_holds_checkpoint(const char *dir);
ZT_NODISCARD zt_status zt__ck_stage_join(const char *dir, const char *name, zt__ck_stage *k);
ZT_NODISCARD zt_status zt__ck_stage_commit(zt__ck_stage *k);
void zt__ck_stage_abort(zt__ck_stage *k);
/* zt_snapshot_save with the optimizer state given as arrays (full-shaped, named
 * "exp_avg.<param>", ...): the full checkpoint of an FSDP model writes through this. */
ZT_NODISCARD zt_status zt__snapshot_save_arrays(const char *dir, zt_gpt2 *m, bool has_optim, int n_opt,
                                     const char *const *opt_names, zt_tensor *const *opt_tensors, int64_t opt_step,
                                     const zt_train_state *st);

#endif
