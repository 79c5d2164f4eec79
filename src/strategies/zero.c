/* ZeRO at step granularity over a parameter list (zt/fsdp.h): the parameters flattened in
 * order into [0, N), padded to D shards of k elements; rank r keeps [r k, (r + 1) k) as f32
 * masters. The full parameters move in and out of the parameter tensors' own storage
 * (released and allocated again), so the model's tensor objects never change. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/status_internal.h"
#include "core/tensor_internal.h"
#include "zt/fsdp.h"

struct zt_zero {
  zt_comm *c;
  int rank, D;
  zt_shard_strategy strategy;
  int n;
  zt_param *params;   /* copy of the caller's array */
  int64_t *off;       /* flat offset of each parameter */
  int64_t N, k;       /* elements, shard size */
  zt_tensor *shard;   /* (k) this rank's masters */
  zt_tensor *grad;    /* (k) the reduced grads, NULL outside a step */
  int n_pieces;
  zt_param *pieces;   /* views of shard */
  zt_fsdp_piece *where;
  int *piece_param;   /* the parameter of each piece */
  bool gathered;      /* the parameter tensors hold the full values */
};

static zt_status flat_new(int64_t n, zt_mem_tag tag, zt_tensor **out) {
  return zt_tensor_empty_tagged(1, (int64_t[]){n > 0 ? n : 1}, ZT_DTYPE_F32, ZT_CPU, tag, out);
}

zt_status zt_zero_new(zt_comm *comm, int n, const zt_param *params, zt_shard_strategy s, zt_zero **out) {
  if (!comm || n < 0 || (n && !params) || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_zero_new: NULL argument");
  if (s != ZT_SHARD_FULL && s != ZT_SHARD_GRAD_OP && s != ZT_SHARD_OPT)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_zero_new: strategy %s; ZeRO per step shards full, grad_op or opt",
                  zt_shard_strategy_name(s));
  for (int i = 0; i < n; i++) {
    const zt_tensor *t = params[i].tensor;
    if (t->dtype != ZT_DTYPE_F32 || !zt_tensor_is_contiguous(t) || zt_tensor_device(t).type != ZT_DEVICE_CPU)
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_zero_new: parameter '%s' is not a contiguous f32 cpu tensor",
                    params[i].name);
  }
  zt_zero *z = calloc(1, sizeof *z);
  if (!z) return ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  z->c = comm, z->rank = zt_comm_rank(comm), z->D = zt_comm_size(comm), z->strategy = s, z->n = n;
  z->params = malloc(sizeof *z->params * (size_t)(n ? n : 1));
  z->off = malloc(sizeof *z->off * (size_t)(n ? n : 1));
  z->pieces = malloc(sizeof *z->pieces * (size_t)(n ? n : 1));
  z->where = malloc(sizeof *z->where * (size_t)(n ? n : 1));
  z->piece_param = malloc(sizeof *z->piece_param * (size_t)(n ? n : 1));
  zt_status st = z->params && z->off && z->pieces && z->where && z->piece_param ? ZT_OK
                                                                                : ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  for (int i = 0; !st && i < n; i++) {
    z->params[i] = params[i];
    z->off[i] = z->N;
    z->N += zt_tensor_numel(params[i].tensor);
  }
  z->k = (z->N + z->D - 1) / z->D;
  if (!st) st = flat_new(z->k, ZT_MEM_TAG_PARAM, &z->shard);
  int64_t lo = z->rank * z->k, hi = lo + z->k;
  for (int i = 0; !st && i < n; i++) {
    int64_t a = z->off[i], b = a + zt_tensor_numel(params[i].tensor);
    a = a > lo ? a : lo, b = b < hi ? b : hi;
    if (a >= b) continue;
    int64_t count = b - a;
    zt_tensor *v = NULL;
    st = zt__tensor_new_view(z->shard->storage, z->shard->offset + (a - lo), 1, &count, NULL, ZT_DTYPE_F32, &v);
    if (st) break;
    v->requires_grad = true;
    int j = z->n_pieces++;
    z->pieces[j] = (zt_param){0};
    z->pieces[j].tensor = v;
    snprintf(z->pieces[j].name, sizeof z->pieces[j].name, "%s", params[i].name);
    z->pieces[j].decay = params[i].decay;
    z->where[j] = (zt_fsdp_piece){z->params[i].name, params[i].tensor->ndim, params[i].tensor->shape, a - z->off[i], count};
    z->piece_param[j] = i;
  }
  z->gathered = true;
  if (!st) st = zt_zero_shard_from_full(z);
  if (!st) st = zt_zero_release(z);
  if (st) {
    zt_zero_free(z);
    return st;
  }
  *out = z;
  return ZT_OK;
}

void zt_zero_free(zt_zero *z) {
  if (!z) return;
  for (int j = 0; j < z->n_pieces; j++) zt_tensor_free(z->pieces[j].tensor);
  zt_tensor_free(z->shard);
  zt_tensor_free(z->grad);
  free(z->params), free(z->off), free(z->pieces), free(z->where), free(z->piece_param);
  free(z);
}

int zt_zero_pieces(zt_zero *z, zt_param **params, const zt_fsdp_piece **pieces) {
  if (!z) return 0;
  if (params) *params = z->pieces;
  if (pieces) *pieces = z->where;
  return z->n_pieces;
}

zt_tensor *zt_zero_piece_param(const zt_zero *z, int i) {
  return z && i >= 0 && i < z->n_pieces ? z->params[z->piece_param[i]].tensor : NULL;
}

/* The shard's range of parameter i: its elements [*a, *b) of the flat order, clipped. */
static bool overlap(const zt_zero *z, int i, int64_t *a, int64_t *b) {
  int64_t lo = z->rank * z->k, hi = lo + z->k;
  *a = z->off[i] > lo ? z->off[i] : lo;
  *b = z->off[i] + zt_tensor_numel(z->params[i].tensor);
  if (*b > hi) *b = hi;
  return *a < *b;
}

zt_status zt_zero_shard_from_full(zt_zero *z) {
  if (!z->gathered) return ZT_ERR(ZT_STATUS_STATE, "zt_zero_shard_from_full: the full parameters are not there");
  int64_t lo = z->rank * z->k, a, b;
  zt__dev_fill(z->shard, 0.0); /* the padding */
  for (int i = 0; i < z->n; i++)
    if (overlap(z, i, &a, &b)) zt__dev_copy_range(z->shard, a - lo, z->params[i].tensor, a - z->off[i], b - a);
  zt_tensor_bump_version(z->shard);
  return ZT_OK;
}

/* Every rank's shard, in rank order, into flat (D k). */
static zt_status gather_flat(zt_zero *z, const zt_tensor *shard, zt_tensor **flat) {
  ZT_TRY(flat_new(z->D * z->k, ZT_MEM_TAG_TEMP, flat));
  zt_status s = zt_all_gather(z->c, shard, *flat);
  if (s) zt_tensor_free(*flat), *flat = NULL;
  return s;
}

/* The full values into the parameter tensors (their storage allocated again if released). */
static zt_status unflatten(zt_zero *z) {
  zt_tensor *flat = NULL;
  ZT_TRY(gather_flat(z, z->shard, &flat));
  zt_status s = ZT_OK;
  for (int i = 0; i < z->n && !s; i++) {
    zt_tensor *t = z->params[i].tensor;
    if (!(s = zt_storage_rematerialize(t->storage))) {
      zt__dev_copy_range(t, 0, flat, z->off[i], zt_tensor_numel(t));
      zt_tensor_bump_version(t);
    }
  }
  zt_tensor_free(flat);
  if (!s) z->gathered = true;
  return s;
}

zt_status zt_zero_gather(zt_zero *z) { return z->gathered ? ZT_OK : unflatten(z); }

zt_status zt_zero_release(zt_zero *z) {
  if (z->strategy == ZT_SHARD_OPT || !z->gathered) return ZT_OK;
  for (int i = 0; i < z->n; i++) ZT_TRY(zt_storage_release(z->params[i].tensor->storage));
  z->gathered = false;
  return ZT_OK;
}

zt_status zt_zero_reduce(zt_zero *z) {
  zt_tensor *flat = NULL;
  ZT_TRY(flat_new(z->D * z->k, ZT_MEM_TAG_GRAD, &flat));
  zt__dev_fill(flat, 0.0);
  zt_status s = ZT_OK;
  for (int i = 0; i < z->n && !s; i++) {
    zt_tensor *g = z->params[i].tensor->grad;
    if (!g) continue;
    if (g->dtype != ZT_DTYPE_F32 || !zt_tensor_is_contiguous(g))
      s = ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_zero_reduce: the grad of '%s' is not contiguous f32", z->params[i].name);
    else
      zt__dev_copy_range(flat, z->off[i], g, 0, zt_tensor_numel(g));
  }
  zt_tensor_free(z->grad), z->grad = NULL;
  if (!s) s = flat_new(z->k, ZT_MEM_TAG_GRAD, &z->grad);
  if (!s) s = zt_reduce_scatter(z->c, flat, z->grad, ZT_REDUCE_AVG);
  zt_tensor_free(flat);
  for (int i = 0; i < z->n; i++) zt_tensor_free(z->params[i].tensor->grad), z->params[i].tensor->grad = NULL;
  int64_t lo = z->rank * z->k;
  for (int j = 0; j < z->n_pieces && !s; j++) {
    zt_tensor *p = z->pieces[j].tensor;
    zt_tensor_free(p->grad), p->grad = NULL;
    s = zt__tensor_new_view(z->grad->storage, z->grad->offset + (z->off[z->piece_param[j]] + z->where[j].start - lo), 1,
                            p->shape, NULL, ZT_DTYPE_F32, &p->grad);
  }
  if (!s) s = zt_zero_release(z);
  return s;
}

zt_status zt_zero_after_step(zt_zero *z) {
  for (int j = 0; j < z->n_pieces; j++) zt_tensor_free(z->pieces[j].tensor->grad), z->pieces[j].tensor->grad = NULL;
  zt_tensor_free(z->grad), z->grad = NULL;
  return z->strategy == ZT_SHARD_OPT ? unflatten(z) : ZT_OK;
}

/* ---------------------------------------------------------------- optimizer state */

/* The tensor named "<kind>.<name>" in an optimizer's state, or NULL. */
static zt_tensor *state_of(int n, const char *const *names, zt_tensor *const *ts, const char *kind, size_t kl,
                           const char *name) {
  for (int i = 0; i < n; i++)
    if (!strncmp(names[i], kind, kl) && names[i][kl] == '.' && !strcmp(names[i] + kl + 1, name)) return ts[i];
  return NULL;
}

/* Call fn for each state kind of full (the prefixes of its names, each once). */
typedef zt_status (*kind_fn)(zt_zero *z, const char *kind, size_t kl, int ns, const char *const *sn,
                             zt_tensor *const *st, int nf, const char *const *fn, zt_tensor *const *ft);
static zt_status each_kind(zt_zero *z, zt_optim *sharded, zt_optim *full, kind_fn f) {
  int ns, nf;
  const char *const *sn, *const *fn;
  zt_tensor *const *st, *const *ft;
  ZT_TRY(zt_optim_state(sharded, &ns, &sn, &st));
  ZT_TRY(zt_optim_state(full, &nf, &fn, &ft));
  for (int i = 0; i < nf; i++) {
    const char *dot = strchr(fn[i], '.');
    size_t kl = dot ? (size_t)(dot - fn[i]) : strlen(fn[i]);
    bool seen = false;
    for (int j = 0; j < i && !seen; j++) seen = !strncmp(fn[j], fn[i], kl) && fn[j][kl] == '.';
    if (!seen) ZT_TRY(f(z, fn[i], kl, ns, sn, st, nf, fn, ft));
  }
  return ZT_OK;
}

static zt_status kind_to_full(zt_zero *z, const char *kind, size_t kl, int ns, const char *const *sn,
                              zt_tensor *const *st, int nf, const char *const *fn, zt_tensor *const *ft) {
  zt_tensor *mine = NULL, *flat = NULL;
  ZT_TRY(flat_new(z->k, ZT_MEM_TAG_TEMP, &mine));
  zt__dev_fill(mine, 0.0);
  int64_t lo = z->rank * z->k;
  for (int j = 0; j < z->n_pieces; j++) {
    zt_tensor *t = state_of(ns, sn, st, kind, kl, z->pieces[j].name);
    if (t) zt__dev_copy_range(mine, z->off[z->piece_param[j]] + z->where[j].start - lo, t, 0, z->where[j].count);
  }
  zt_status s = gather_flat(z, mine, &flat);
  for (int i = 0; i < z->n && !s; i++) {
    zt_tensor *t = state_of(nf, fn, ft, kind, kl, z->params[i].name);
    if (!t) continue;
    zt__dev_copy_range(t, 0, flat, z->off[i], zt_tensor_numel(t));
    zt_tensor_bump_version(t);
  }
  zt_tensor_free(mine);
  zt_tensor_free(flat);
  return s;
}

static zt_status kind_from_full(zt_zero *z, const char *kind, size_t kl, int ns, const char *const *sn,
                                zt_tensor *const *st, int nf, const char *const *fn, zt_tensor *const *ft) {
  for (int j = 0; j < z->n_pieces; j++) {
    zt_tensor *to = state_of(ns, sn, st, kind, kl, z->pieces[j].name);
    zt_tensor *from = state_of(nf, fn, ft, kind, kl, z->pieces[j].name);
    if (!to || !from) continue;
    zt__dev_copy_range(to, 0, from, z->where[j].start, z->where[j].count);
    zt_tensor_bump_version(to);
  }
  return ZT_OK;
}

zt_status zt_zero_state_to_full(zt_zero *z, zt_optim *sharded, zt_optim *full) {
  ZT_TRY(each_kind(z, sharded, full, kind_to_full));
  zt_optim_set_step_count(full, zt_optim_step_count(sharded));
  return ZT_OK;
}

zt_status zt_zero_state_from_full(zt_zero *z, zt_optim *sharded, zt_optim *full) {
  ZT_TRY(each_kind(z, sharded, full, kind_from_full));
  zt_optim_set_step_count(sharded, zt_optim_step_count(full));
  return ZT_OK;
}
