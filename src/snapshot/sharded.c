/* Sharded (FSDP) checkpoints, the collective part: each rank's pieces of the parameters and
 * optimizer state, agreement between ranks, sharded save and load (N -> M), and full
 * checkpoints of an FSDP model. The ranks must see one file system: rank 0 builds index.json
 * from the shard files' metadata. The format, index, reader and consolidation are in
 * src/snapshot/shard_*.c (internal API: snapshot/sharded.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/backend.h"
#include "core/tensor_internal.h"
#include "io/atomic_file.h"
#include "io/bounce.h"
#include "snapshot/sharded.h"
#include "snapshot/snapshot_internal.h"

/* ------------------------------------------------------------------ FSDP: this rank's pieces */

/* This rank's pieces: every FSDP piece (kind param), then the optimizer's state tensors,
 * each placed like the piece of its parameter. */
typedef struct local_pieces {
  int n, n_params;
  zt__shard_piece *p;
} local_pieces;

static int find_piece(const local_pieces *L, const char *param) {
  for (int i = 0; i < L->n_params; i++)
    if (!strcmp(L->p[i].param, param)) return i;
  return -1;
}

static zt_status collect_pieces(zt_fsdp *f, zt_optim *o, local_pieces *L) {
  memset(L, 0, sizeof *L);
  zt_param *params = NULL;
  const zt_fsdp_piece *pieces = NULL;
  int np = zt_fsdp_params(f, &params, &pieces);
  int n_opt = 0;
  const char *const *onames = NULL;
  zt_tensor *const *ots = NULL;
  if (o) ZT_TRY(zt_optim_state(o, &n_opt, &onames, &ots));
  L->p = calloc((size_t)(np + n_opt) + 1, sizeof *L->p);
  if (!L->p) return ZT_ERR(ZT_STATUS_OOM, "checkpoint: out of memory");
  for (int i = 0; i < np; i++) {
    const zt_fsdp_piece *q = &pieces[i];
    zt_tensor *t = params[i].tensor;
    if (t->dtype != ZT_DTYPE_F32 || !zt_tensor_is_contiguous(t) || zt_tensor_numel(t) != q->count)
      return ZT_ERR(ZT_STATUS_INTERNAL, "checkpoint: FSDP piece '%s' is not a contiguous f32 view of %lld elements",
                    q->name, (long long)q->count);
    L->p[L->n++] = (zt__shard_piece){q->name, ZT__SHARD_PARAM, q->ndim, q->shape, q->start, q->count, t};
  }
  L->n_params = L->n;
  for (int k = 0; k < n_opt; k++) {
    zt__shard_kind kind;
    const char *pn;
    int i = -1;
    if (!zt__shard_split_state_name(onames[k], &kind, &pn) || (i = find_piece(L, pn)) < 0)
      return ZT_ERR(ZT_STATUS_INVALID_ARG,
                    "checkpoint: optimizer state '%s' belongs to no FSDP piece of this rank: build the optimizer over "
                    "zt_fsdp_params",
                    onames[k]);
    zt__shard_piece q = L->p[i];
    if (zt_tensor_numel(ots[k]) != q.count || ots[k]->dtype != ZT_DTYPE_F32 || !zt_tensor_is_contiguous(ots[k]))
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "checkpoint: optimizer state '%s' is not shaped like its FSDP piece",
                    onames[k]);
    q.kind = kind;
    q.t = ots[k];
    L->p[L->n++] = q;
  }
  return ZT_OK;
}

/* ------------------------------------------------------------------ FSDP: agreement between ranks */

/* Every rank learns whether any rank failed (over the shard group, then across the replicas),
 * so that all of them take the same branch and no collective is left waiting. Returns the
 * rank's own error, or an error saying another rank failed. */
static zt_status agree(zt_fsdp *f, zt_status s, const char *what, const char *dir) {
  zt_comm *groups[2] = {zt_fsdp_shard_comm(f), zt_fsdp_replicate_comm(f)};
  int32_t bad = s != ZT_OK;
  zt_tensor *t = NULL;
  zt_mem_tag prev = zt_mem_tag_push(ZT_MEM_TAG_COMM); /* the small control tensors of this file */
  zt_status c = zt_tensor_from_data(1, (int64_t[]){1}, ZT_DTYPE_I32, &bad, &t);
  zt_mem_tag_pop(prev);
  for (int g = 0; g < 2 && !c; g++)
    if (groups[g]) c = zt_all_reduce(groups[g], t, ZT_REDUCE_SUM);
  int32_t total = c ? 1 : (int32_t)zt_tensor_get(t, 0);
  zt_tensor_free(t);
  if (s) return s;
  if (c) return c;
  if (total) return ZT_ERR(ZT_STATUS_IO, "%s '%s' failed on another rank (its error says why)", what, dir);
  return ZT_OK;
}

/* Writers of a sharded save: one shard group (the first replica under HYBRID). */
static bool is_writer(zt_fsdp *f) {
  zt_comm *rc = zt_fsdp_replicate_comm(f);
  return !rc || zt_comm_rank(rc) == 0;
}

static const char *strategy_of(zt_fsdp *f) { return zt_fsdp_replicate_comm(f) ? "hybrid" : "sharded"; }

/* ------------------------------------------------------------------ FSDP: sharded save and load */

#define CTL_ID 64
zt_status zt_snapshot_save_sharded(const char *dir, zt_fsdp *f, zt_optim *o, const zt_train_state *st) {
  if (!dir || !*dir || !f || !st)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_snapshot_save_sharded: empty folder name, or NULL fsdp or state");
  zt_comm *sc = zt_fsdp_shard_comm(f);
  int r = zt_comm_rank(sc), n = zt_comm_size(sc);
  bool writer = is_writer(f), lead = writer && r == 0;
  local_pieces L;
  zt_status s = collect_pieces(f, o, &L);
  if ((s = agree(f, s, "saving sharded checkpoint", dir))) goto out;
  /* The lead rank prepares the folder; the version's name and the save id go to the shard group. */
  zt__snap_staging stage;
  int64_t ctl[1 + 2 * CTL_ID] = {0};
  char id[CTL_ID] = "";
  if (lead) {
    zt__snap_new_save_id(id, st->step);
    s = zt__snap_staging_begin(dir, st->step, &stage);
    ctl[0] = s != ZT_OK;
    for (int i = 0; i < CTL_ID; i++) ctl[1 + i] = id[i], ctl[1 + CTL_ID + i] = s ? 0 : stage.name[i];
  }
  zt_tensor *t = NULL;
  zt_mem_tag prev = zt_mem_tag_push(ZT_MEM_TAG_COMM);
  zt_status c = zt_tensor_from_data(1, (int64_t[]){1 + 2 * CTL_ID}, ZT_DTYPE_I64, ctl, &t);
  zt_mem_tag_pop(prev);
  if (!c) c = zt_broadcast(sc, t, 0);
  for (int i = 0; !c && i < 1 + 2 * CTL_ID; i++) ctl[i] = (int64_t)zt_tensor_get(t, i);
  zt_tensor_free(t);
  if (!s) s = c;
  if (!s && writer && !lead) {
    char name[CTL_ID];
    for (int i = 0; i < CTL_ID; i++) id[i] = (char)ctl[1 + i], name[i] = (char)ctl[1 + CTL_ID + i];
    id[CTL_ID - 1] = name[CTL_ID - 1] = '\0';
    s = ctl[0] ? ZT_ERR(ZT_STATUS_IO, "saving sharded checkpoint '%s' failed on rank 0 (its error says why)", dir)
               : zt__snap_staging_join(dir, name, &stage);
  }
  if (!s && writer) s = zt__shard_write(stage.stage, r, n, L.n, L.p, id);
  /* after this agreement every shard file is complete (or some rank failed) */
  s = agree(f, s, "saving sharded checkpoint", dir);
  if (lead && !ctl[0]) {
    if (!s) s = zt__snap_copy_tokenizer(stage.stage, st);
    if (!s) s = zt__shard_write_index(stage.stage, n, strategy_of(f), st, o != NULL, o ? zt_optim_step_count(o) : 0, id);
    if (!s) s = zt__snap_staging_commit(&stage);
    else zt__snap_staging_abort(&stage);
  }
  s = agree(f, s, "saving sharded checkpoint", dir);
out:
  free(L.p);
  return s;
}

/* A piece's place in the load order: by its storage, then by its index (stable). */
typedef struct piece_order {
  uint64_t storage_id;
  int i;
} piece_order;
static int cmp_order(const void *a, const void *b) {
  const piece_order *x = a, *y = b;
  if (x->storage_id != y->storage_id) return x->storage_id < y->storage_id ? -1 : 1;
  return (x->i > y->i) - (x->i < y->i);
}

/* Every local piece from the checkpoint. Pieces whose storage is in a store (FSDP's state
 * store) are read into a stage holding the storage's bytes, read once, and the storage is
 * written once after its last piece (a shard's pieces together): not a read and a write of the
 * whole storage per piece. */
static zt_status read_pieces(zt__shard_index *ix, const local_pieces *L) {
  piece_order *order = malloc(sizeof *order * (size_t)(L->n ? L->n : 1));
  zt_tensor **ts = malloc(sizeof *ts * (size_t)(L->n ? L->n : 1));
  if (!order || !ts) {
    free(order);
    free(ts);
    return ZT_ERR(ZT_STATUS_OOM, "reading checkpoint '%s': out of memory", ix->dir);
  }
  for (int i = 0; i < L->n; i++) order[i] = (piece_order){L->p[i].t->storage->id, i}, ts[i] = L->p[i].t;
  qsort(order, (size_t)L->n, sizeof *order, cmp_order);
  zt__bounce stage;
  zt_status s = zt__bounce_init(&stage, L->n, ts);
  for (int k = 0; k < L->n && !s; k++) {
    const zt__shard_piece *q = &L->p[order[k].i];
    if (!zt_storage_is_evicted(q->t->storage) || q->count == 0) {
      s = zt__shard_read(ix, q->param, q->kind, q->ndim, q->shape, q->start, q->count, q->t);
      continue;
    }
    zt_tensor *v = NULL; /* the piece over the stage, which holds its storage (read at its first piece) */
    s = zt__bounce_view(&stage, q->t, true, &v);
    if (!s) s = zt__shard_read(ix, q->param, q->kind, q->ndim, q->shape, q->start, q->count, v);
    zt_tensor_free(v);
    if (s) break;
    bool last = k + 1 == L->n || order[k + 1].storage_id != order[k].storage_id;
    if (last) s = zt__bounce_store(&stage, q->t);
  }
  zt__bounce_free(&stage);
  free(order);
  free(ts);
  return s;
}

zt_status zt_snapshot_load_sharded(const char *dir_in, zt_fsdp *f, zt_optim *o, zt_train_state *st) {
  if (!dir_in || !f) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_snapshot_load_sharded: NULL folder or fsdp");
  char dir[ZT__SH_PATH_CAP];
  ZT_TRY(zt_snapshot_resolve(dir_in, dir, sizeof dir));
  zt__shard_index *ix = NULL;
  local_pieces L = {0};
  zt_status s = zt__shard_index_read(dir, &ix);
  if (!s) s = collect_pieces(f, o, &L);
  if (!s && o && !ix->has_optim)
    s = ZT_ERR(ZT_STATUS_STATE,
               "checkpoint '%s' holds no optimizer state (it was saved without one), so training cannot resume from "
               "it; load it without an optimizer",
               dir);
  if ((s = agree(f, s, "loading sharded checkpoint", dir))) goto out;
  s = read_pieces(ix, &L);
  /* Parameters of the checkpoint that no rank of the shard group holds: another model. */
  zt_tensor *seen = NULL;
  zt_mem_tag prev = zt_mem_tag_push(ZT_MEM_TAG_COMM);
  zt_status c = zt_tensor_zeros(1, (int64_t[]){ix->n + 1}, ZT_DTYPE_I32, ZT_CPU, &seen);
  zt_mem_tag_pop(prev);
  for (int e = 0; e < ix->n && !c; e++)
    if (find_piece(&L, ix->e[e].param) >= 0) c = zt_tensor_set(seen, e, 1);
  if (!c) c = zt_all_reduce(zt_fsdp_shard_comm(f), seen, ZT_REDUCE_SUM);
  for (int e = 0; e < ix->n && !c && !s; e++)
    if (zt_tensor_get(seen, e) == 0)
      s = ZT_ERR(ZT_STATUS_SHAPE,
                 "checkpoint '%s' holds parameter '%s', which the model does not have (or has frozen): it was saved "
                 "from another model shape",
                 dir, ix->e[e].param);
  zt_tensor_free(seen);
  if (!s) s = c;
  if ((s = agree(f, s, "loading sharded checkpoint", dir))) goto out;
  if (o) zt_optim_set_step_count(o, ix->optim_step);
  if (st) *st = ix->st;
  /* OPT keeps full parameters besides the shards: refresh them from the loaded shards. */
  s = zt_fsdp_after_step(f);
out:
  free(L.p);
  zt__shard_index_free(ix);
  return s;
}

/* ------------------------------------------------------------------ FSDP: full checkpoints */

/* The optimizer state gathered to rank 0 of the shard group, full-shaped, in the model's
 * parameter order: each rank sends its pieces (uneven, padding excluded) packed in (parameter,
 * kind) order; where they go is known from an all-gather of every rank's (start, count). */
typedef struct full_state {
  int n;
  char **names;
  zt_tensor **ts;
} full_state;

static void full_state_free(full_state *fs) {
  for (int i = 0; i < fs->n; i++) {
    free(fs->names[i]);
    zt_tensor_free(fs->ts[i]);
  }
  free(fs->names);
  free(fs->ts);
  memset(fs, 0, sizeof *fs);
}

/* Local piece index of (param j, kind) or -1. */
static int piece_of_kind(const local_pieces *L, const char *param, zt__shard_kind kind) {
  for (int i = 0; i < L->n; i++)
    if (L->p[i].kind == kind && !strcmp(L->p[i].param, param)) return i;
  return -1;
}

/* What the ranks know of each other's pieces once gather_state has all-gathered them. */
typedef struct gather_ctx {
  zt_comm *sc;
  int n;                             /* ranks of the shard group */
  const local_pieces *L;             /* this rank's */
  zt_param *mp;                      /* the model's parameters */
  int np;
  int64_t nm;                        /* values per rank in am: (start, count) per parameter, then a flag per kind */
  const int64_t *me, *am;            /* this rank's values; every rank's, in rank order */
  bool kinds[ZT__SHARD_KIND_COUNT];  /* the kinds of state some rank holds */
} gather_ctx;

/* Where the index in fs of the full tensor (parameter j, kind k) is kept (-1: none). */
static int *slot_at(int *slot, int j, int k) { return &slot[j * (ZT__SHARD_KIND_COUNT - 1) + k - 1]; }

/* Rank q != 0: its pieces, in (parameter, kind) order, sent to rank 0 in one pack; sent even
 * after an error s here (zeros where state is missing), because rank 0 waits for it. */
static zt_status send_pieces(const gather_ctx *g, int64_t mine, zt_status s, zt_tensor **buf) {
  if (mine == 0) return s;
  zt_status c = zt_tensor_empty_tagged(1, &mine, ZT_DTYPE_F32, ZT_CPU, ZT_MEM_TAG_TEMP, buf);
  if (c) return s ? s : c;
  float *w = zt__tensor_ptr(*buf);
  memset(w, 0, sizeof(float) * (size_t)mine);
  for (int j = 0; j < g->np; j++)
    for (int k = 1; k < ZT__SHARD_KIND_COUNT; k++)
      if (g->kinds[k] && g->me[2 * j + 1] > 0) {
        int i = piece_of_kind(g->L, g->mp[j].name, (zt__shard_kind)k);
        if (i >= 0 && !s) s = zt__tensor_read_range(g->L->p[i].t, 0, g->me[2 * j + 1], w);
        w += g->me[2 * j + 1];
      }
  c = zt_send(g->sc, *buf, 0, 0x5A7);
  return s ? s : c;
}

/* Rank 0: a full tensor in fs for every (parameter, kind) some rank holds a piece of, its index
 * in slot (cap entries: -1 where none). */
static zt_status make_full(const gather_ctx *g, full_state *fs, int *slot) {
  for (int j = 0; j < g->np; j++) {
    int64_t covered = 0;
    for (int q = 0; q < g->n; q++) covered += g->am[q * g->nm + 2 * j + 1];
    for (int k = 1; k < ZT__SHARD_KIND_COUNT; k++) {
      *slot_at(slot, j, k) = -1;
      if (!g->kinds[k] || covered == 0) continue;
      zt_tensor *t = g->mp[j].tensor;
      if (covered != zt_tensor_numel(t))
        return ZT_ERR(ZT_STATUS_INTERNAL, "saving a full checkpoint: the FSDP pieces of '%s' cover %lld of its %lld "
                      "elements", g->mp[j].name, (long long)covered, (long long)zt_tensor_numel(t));
      size_t l = strlen(zt__shard_kind_name(k)) + strlen(g->mp[j].name) + 2;
      if (!(fs->names[fs->n] = malloc(l))) return ZT_ERR(ZT_STATUS_OOM, "saving a full checkpoint: out of memory");
      snprintf(fs->names[fs->n], l, "%s.%s", zt__shard_kind_name(k), g->mp[j].name);
      zt_status s = zt_tensor_empty_tagged(t->ndim, t->shape, ZT_DTYPE_F32, ZT_CPU, ZT_MEM_TAG_TEMP, &fs->ts[fs->n]);
      *slot_at(slot, j, k) = fs->n++; /* counted either way: full_state_free frees its name */
      ZT_TRY(s);
    }
  }
  return ZT_OK;
}

/* Rank 0: rank q's pack, in (parameter, kind) order, into the full tensors; q = 0 from its own
 * pieces. Every rank's pack is received even after an error s, so that no sender is left blocked. */
static zt_status receive_pieces(const gather_ctx *g, int *slot, full_state *fs, zt_tensor **buf, zt_status s) {
  for (int q = 0; q < g->n; q++) {
    const int64_t *aq = g->am + q * g->nm;
    int64_t total = 0;
    for (int j = 0; j < g->np; j++)
      for (int k = 1; k < ZT__SHARD_KIND_COUNT; k++) total += g->kinds[k] ? aq[2 * j + 1] : 0;
    if (q > 0 && total > 0) {
      zt_tensor_free(*buf);
      *buf = NULL;
      zt_status c = zt_tensor_empty_tagged(1, &total, ZT_DTYPE_F32, ZT_CPU, ZT_MEM_TAG_TEMP, buf);
      if (!c) c = zt_recv(g->sc, *buf, q, 0x5A7);
      if (c) {
        if (!s) s = c;
        continue;
      }
    }
    const float *rd = q > 0 && *buf ? zt__tensor_ptr(*buf) : NULL;
    for (int j = 0; j < g->np && !s; j++)
      for (int k = 1; k < ZT__SHARD_KIND_COUNT; k++) {
        int64_t start = aq[2 * j], count = aq[2 * j + 1];
        if (!g->kinds[k] || count == 0) continue;
        float *dst = (float *)zt__tensor_ptr(fs->ts[*slot_at(slot, j, k)]) + start;
        if (q == 0) {
          if (!s) s = zt__tensor_read_range(g->L->p[piece_of_kind(g->L, g->mp[j].name, (zt__shard_kind)k)].t, 0, count, dst);
        } else {
          memcpy(dst, rd, sizeof(float) * (size_t)count);
          rd += count;
        }
      }
  }
  return s;
}

/* The full state on rank 0 (fs) from every rank's FSDP pieces (L): the ranks all-gather where
 * their pieces lie, then each sends its pack to rank 0. Collective over the shard group. */
static zt_status gather_state(zt_fsdp *f, const zt_model *m, const local_pieces *L, full_state *fs) {
  gather_ctx g = {.sc = zt_fsdp_shard_comm(f), .L = L};
  int r = zt_comm_rank(g.sc);
  g.n = zt_comm_size(g.sc);
  g.np = zt_model_params(m, &g.mp);
  g.nm = (int64_t)g.np * 2 + ZT__SHARD_KIND_COUNT;
  zt_tensor *meta = NULL, *all = NULL, *buf = NULL;
  int *slot = NULL;
  zt_mem_tag prev = zt_mem_tag_push(ZT_MEM_TAG_COMM);
  zt_status s = zt_tensor_zeros(1, &g.nm, ZT_DTYPE_I64, ZT_CPU, &meta);
  if (!s) s = zt_tensor_zeros(1, (int64_t[]){g.nm * g.n}, ZT_DTYPE_I64, ZT_CPU, &all);
  zt_mem_tag_pop(prev);
  if (s) goto out;
  /* meta, all, buf and the full tensors fs->ts are cpu tensors made here (host bytes); the
   * pieces live on the parameters' device and are read and written through its backend */
  int64_t *me = zt__tensor_ptr(meta);
  for (int j = 0; j < g.np; j++) {
    int i = find_piece(L, g.mp[j].name);
    if (i >= 0) me[2 * j] = L->p[i].start, me[2 * j + 1] = L->p[i].count;
  }
  for (int i = L->n_params; i < L->n; i++) me[2 * g.np + L->p[i].kind] = 1;
  if ((s = zt_all_gather(g.sc, meta, all))) goto out;
  g.me = me;
  g.am = zt__tensor_ptr(all);
  for (int q = 0; q < g.n; q++)
    for (int k = 1; k < ZT__SHARD_KIND_COUNT; k++) g.kinds[k] |= g.am[q * g.nm + 2 * g.np + k] != 0;
  /* every piece of this rank has each kind of state (checked before anything is sent) */
  int64_t mine = 0;
  for (int j = 0; j < g.np; j++)
    for (int k = 1; k < ZT__SHARD_KIND_COUNT; k++)
      if (g.kinds[k] && me[2 * j + 1] > 0) {
        if (piece_of_kind(L, g.mp[j].name, (zt__shard_kind)k) < 0)
          s = ZT_ERR(ZT_STATUS_INVALID_ARG, "saving a full checkpoint: this rank has no optimizer state '%s.%s'",
                     zt__shard_kind_name(k), g.mp[j].name);
        mine += me[2 * j + 1];
      }
  if (r != 0) {
    s = send_pieces(&g, mine, s, &buf);
    goto out;
  }
  int cap = g.np * (ZT__SHARD_KIND_COUNT - 1) + 1;
  fs->names = calloc((size_t)cap, sizeof *fs->names);
  fs->ts = calloc((size_t)cap, sizeof *fs->ts);
  slot = calloc((size_t)cap, sizeof *slot);
  if (!fs->names || !fs->ts || !slot) s = ZT_ERR(ZT_STATUS_OOM, "saving a full checkpoint: out of memory");
  if (!s) s = make_full(&g, fs, slot);
  s = receive_pieces(&g, slot, fs, &buf, s);
out:
  free(slot);
  zt_tensor_free(meta);
  zt_tensor_free(all);
  zt_tensor_free(buf);
  return s;
}

zt_status zt_snapshot_save_full(const char *dir, const zt_model *m, zt_fsdp *f, zt_optim *o, const zt_train_state *st) {
  if (!dir || !*dir || !m || !f || !st)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_snapshot_save_full: empty folder name, or NULL model, fsdp or state");
  ZT_TRY(zt_fsdp_gather_full_params(f));
  zt_comm *sc = zt_fsdp_shard_comm(f);
  bool lead = is_writer(f) && zt_comm_rank(sc) == 0;
  local_pieces L = {0};
  full_state fs = {0};
  zt_status s = o ? collect_pieces(f, o, &L) : ZT_OK;
  s = agree(f, s, "saving full checkpoint", dir);
  if (!s && o && is_writer(f)) s = gather_state(f, m, &L, &fs);
  if (!s && lead)
    s = zt__snapshot_save_arrays(dir, m, o != NULL, fs.n, (const char *const *)fs.names, fs.ts,
                                   o ? zt_optim_step_count(o) : 0, st);
  full_state_free(&fs);
  free(L.p);
  s = agree(f, s, "saving full checkpoint", dir);
  zt_status r = zt_fsdp_release_full_params(f);
  return s ? s : r;
}

/* This rank's slices of the optimizer state from a single-process optim.safetensors. */
static zt_status load_state_slices(const char *dir, const char *save_id, const local_pieces *L, zt_optim *o) {
  char path[ZT__SH_PATH_CAP], *id = NULL, *step = NULL, **names = NULL;
  int nn = 0;
  ZT_TRY(zt__path_join(path, ZT__SH_PATH_CAP, dir, "optim.safetensors"));
  zt_status s = zt_safetensors_metadata(path, "zt_save_id", &id);
  if (!s && (!id || strcmp(id, save_id)))
    s = ZT_ERR(ZT_STATUS_IO, "checkpoint '%s': optim.safetensors is not from the same save as state.json (save id "
               "%s, expected %s); use another checkpoint", dir, id ? id : "(none)", save_id);
  if (!s) s = zt_safetensors_metadata(path, "step", &step);
  char *end = NULL;
  errno = 0;
  long long v = step ? strtoll(step, &end, 10) : -1;
  /* AdamW's bias correction reads the step as a double: beyond 2^53 it is not exact (and
   * strtoll's clamp of a longer number to 2^63-1 overflows when the step is incremented) */
  if (!s && !(step && *step >= '0' && *step <= '9' && !*end && !errno && v >= 0 && v <= (1ll << 53)))
    s = ZT_ERR(ZT_STATUS_IO, "'%s': metadata 'step' is missing or not an integer in [0, 2^53] (the file is damaged)",
               path);
  if (!s) s = zt_safetensors_names(path, &nn, &names);
  for (int i = L->n_params; i < L->n && !s; i++) {
    const zt__shard_piece *q = &L->p[i];
    char name[256];
    snprintf(name, sizeof name, "%s.%s", zt__shard_kind_name(q->kind), q->param);
    bool found = false;
    for (int k = 0; k < nn && !found; k++) found = !strcmp(names[k], name);
    if (!found) {
      s = ZT_ERR(ZT_STATUS_IO, "'%s' has no tensor '%s': it was saved with another optimizer or model", path, name);
      break;
    }
    zt_tensor *full = NULL;
    const char *nm = name;
    if (!(s = zt_tensor_empty_tagged(q->ndim, q->shape, ZT_DTYPE_F32, ZT_CPU, ZT_MEM_TAG_TEMP, &full)))
      s = zt_safetensors_load_into(path, 1, &nm, &full, false);
    if (!s) s = zt__tensor_write_range(q->t, 0, q->count, (const float *)zt__tensor_ptr(full) + q->start); /* full: cpu */
    zt_tensor_free(full);
  }
  if (!s) zt_optim_set_step_count(o, v);
  free(id);
  free(step);
  free(names);
  return s;
}

zt_status zt_snapshot_load_full(const char *dir_in, const zt_model *m, zt_fsdp *f, zt_optim *o, zt_train_state *st) {
  if (!dir_in || !m || !f) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_snapshot_load_full: NULL folder, model or fsdp");
  char id[64] = "", dir[ZT__SH_PATH_CAP];
  bool has_optim = false;
  local_pieces L = {0};
  zt_status s = zt_snapshot_resolve(dir_in, dir, sizeof dir);
  if (!s) s = zt__snap_read_state(dir, NULL, id, &has_optim);
  if (!s && o && !has_optim)
    s = ZT_ERR(ZT_STATUS_STATE,
               "checkpoint '%s' holds no optimizer state (it was saved without one), so training cannot resume from "
               "it; load it without an optimizer",
               dir);
  if (!s && o) s = collect_pieces(f, o, &L);
  if ((s = agree(f, s, "loading checkpoint", dir))) goto out;
  if ((s = zt_fsdp_gather_full_params(f))) goto out;
  zt_train_state got;
  s = zt_snapshot_load(dir, m, NULL, &got);
  if (!s) s = zt_fsdp_shard_from_full(f);
  if (!s && o) s = load_state_slices(dir, id, &L, o);
  s = agree(f, s, "loading checkpoint", dir);
  zt_status r = zt_fsdp_release_full_params(f);
  if (!s) s = r;
  if (!s && st) *st = got;
out:
  free(L.p);
  return s;
}
