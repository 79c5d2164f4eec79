/* Internal layer of sharded checkpoints, on plain pieces (a parameter's element range plus a
 * tensor) so it is testable without FSDP: the format (src/snapshot/shard_format.c), the index
 * (shard_index.c), the N -> M reader (shard_reader.c) and consolidation (shard_consolidate.c);
 * the FSDP save and load are in src/snapshot/sharded.c.
 * A piece of (parameter, kind) is elements [start, start + count) of the flattened parameter.
 * Included by: src/snapshot only (and tests). */
#ifndef ZT_TRAIN_CHECKPOINT_SHARDED_H
#define ZT_TRAIN_CHECKPOINT_SHARDED_H

#include "io/json.h"
#include "zt/snapshot.h"

#define ZT__SH_INDEX "index.json"
#define ZT__SH_FORMAT "zerotrain-sharded-checkpoint"
#define ZT__SH_VERSION 1
#define ZT__SH_PATH_CAP 4096

typedef enum zt__shard_kind {
  ZT__SHARD_PARAM = 0,
  ZT__SHARD_EXP_AVG,
  ZT__SHARD_EXP_AVG_SQ,
  ZT__SHARD_MOMENTUM,
  ZT__SHARD_KIND_COUNT
} zt__shard_kind;
/* "param", "exp_avg", "exp_avg_sq", "momentum_buffer" (the optimizer's state prefixes). */
const char *zt__shard_kind_name(zt__shard_kind k);
/* Split an optimizer state name "exp_avg.<param>" into kind and parameter name (points into
 * name); false if it has no known prefix. */
bool zt__shard_split_state_name(const char *name, zt__shard_kind *kind, const char **param);

typedef struct zt__shard_piece {
  const char *param; /* the parameter's full name */
  zt__shard_kind kind;
  int ndim;
  const int64_t *shape; /* the parameter's full shape */
  int64_t start, count;
  zt_tensor *t; /* count elements, contiguous f32 */
} zt__shard_piece;

/* "shard-<rank>-of-<n>.safetensors" into buf (64 bytes). */
const char *zt__shard_file_name(char *buf, int rank, int n);
/* One rank's shard file in folder `into`: tensors "<kind>.<param>", metadata with the save id
 * and the pieces (the index is built from it). At most one piece per (param, kind). */
ZT_NODISCARD zt_status zt__shard_write(const char *into, int rank, int n_ranks, int n, const zt__shard_piece *p,
                          const char *save_id);
/* The commit of a sharded save, after every shard file is in `into`: index.json (from the
 * shard files) then state.json (last). strategy: a name for the record. */
ZT_NODISCARD zt_status zt__shard_write_index(const char *into, int n_ranks, const char *strategy, const zt_train_state *st,
                                bool has_optim, int64_t optim_step, const char *save_id);

typedef struct zt__shard_entry {
  int file;
  char *tensor, *param;
  zt__shard_kind kind;
  int ndim;
  int64_t shape[ZT_MAX_DIMS];
  int64_t start, count;
} zt__shard_entry;
typedef struct zt__shard_index {
  char dir[4096];
  char save_id[64];
  char strategy[32];
  int world;
  bool has_optim;
  int64_t optim_step;
  zt_train_state st;
  int n_files;
  char **files;
  bool *checked; /* per file: opened, save id and tensors verified */
  int n;
  zt__shard_entry *e;
} zt__shard_index;
/* The element count of a shape (dims >= 0), or -1 when it overflows an int64. */
int64_t zt__shard_numel(int ndim, const int64_t *shape);
/* [start, start + count) lies within a parameter of numel elements (overflow-safe). */
bool zt__shard_range_ok(int64_t start, int64_t count, int64_t numel);
/* One entry of a piece list (a shard file's metadata or the index; `what` names the file, i is
 * the entry's position), checked; zt__shard_entry_free frees its strings, entries_free an array. */
ZT_NODISCARD zt_status zt__shard_entry_parse(const char *what, int i, const zt__json *v, zt__shard_entry *e);
void zt__shard_entry_free(zt__shard_entry *e);
void zt__shard_entries_free(zt__shard_entry *e, int n);
/* A shard file's own record of its pieces (its zt_pieces metadata), each entry checked, and
 * its save id (malloc'd; NULL if it has none). */
ZT_NODISCARD zt_status zt__shard_pieces_read(const char *path, char **save_id, zt__shard_entry **out, int *n);
/* Read index.json and state.json of a sharded checkpoint (checks they are of one save). */
ZT_NODISCARD zt_status zt__shard_index_read(const char *dir, zt__shard_index **out);
void zt__shard_index_free(zt__shard_index *ix);
/* Whether the index holds any entry of (param, kind). */
bool zt__shard_index_has(const zt__shard_index *ix, const char *param, zt__shard_kind kind);
/* Every shard file the index lists verified as at its first use by zt__shard_read (it exists, is
 * of this save, and agrees with the index), for a reader that checks everything before it writes. */
ZT_NODISCARD zt_status zt__shard_index_verify(zt__shard_index *ix);
/* Read elements [start, start + count) of (param, kind), whose full shape must be
 * (ndim, shape), into dst (count elements, contiguous f32) from whichever shard files hold
 * them. Errors name the checkpoint, the parameter and what is missing or differs. */
ZT_NODISCARD zt_status zt__shard_read(zt__shard_index *ix, const char *param, zt__shard_kind kind, int ndim,
                         const int64_t *shape, int64_t start, int64_t count, zt_tensor *dst);

/* zt_snapshot_load of a sharded checkpoint folder dir (resolved; src/snapshot/shard_consolidate.c):
 * consolidated on load into the whole model m and, when o is not NULL, its optimizer's state
 * (full-shaped, "exp_avg.<param>", ...) and step count, at any world size it was saved at. The
 * shape, the parameters, the state kinds and every shard file are checked before the first
 * tensor is written. A destination evicted to a store (zt_storage_evict) is filled in its store
 * through one host buffer (src/io/bounce.c), never restored: the model is never whole in RAM. */
ZT_NODISCARD zt_status zt__snapshot_load_consolidated(const char *dir, const zt_model *m, zt_optim *o, zt_train_state *st);

#endif
