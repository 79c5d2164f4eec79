/* Process groups: argument checks, debug mode's pre-collective check, ring-formula
 * accounting, AVG and bf16/f16 handling, and async handles, over a backend table.
 * Invariant: a backend only sees validated contiguous cpu buffers; every temporary
 * buffer here comes from zt_mem_alloc with ZT_MEM_TAG_COMM and is freed by wait. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"

struct zt_comm {
  const zt__comm_backend *be;
  void *ctx;
  int rank, size;
  bool debug;
  zt_comm_stats stats;
};

struct zt_comm_work {
  zt_comm *c;
  void *req;          /* backend request, NULL when already complete */
  zt_tensor *result;  /* the user's output tensor (version bumped at the end) */
  void *tmp;          /* f32 buffer (bf16/f16 reductions), or NULL */
  size_t tmp_bytes;
  float *tmp_result;  /* where the f32 result lies inside tmp */
  int64_t n;          /* result elements */
  bool avg;
};

static bool env_debug(void) {
  const char *e = getenv("ZT_COMM_DEBUG");
  return e && strcmp(e, "1") == 0;
}

zt_status zt__comm_new(const zt__comm_backend *be, void *ctx, int rank, int size, zt_comm **out) {
  zt_comm *c = calloc(1, sizeof *c);
  if (!c) {
    be->free(ctx);
    return ZT_ERR(ZT_STATUS_OOM, "out of host memory for a zt_comm");
  }
  c->be = be;
  c->ctx = ctx;
  c->rank = rank;
  c->size = size;
  c->debug = env_debug();
  *out = c;
  return ZT_OK;
}

zt_status zt_comm_init_local(zt_comm **out) {
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_comm_init_local: out is NULL");
  *out = NULL;
  return zt__comm_new(&zt__comm_local_backend, NULL, 0, 1, out);
}

zt_status zt_comm_init_mpi(int *argc, char ***argv, zt_comm **out) {
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_comm_init_mpi: out is NULL");
  *out = NULL;
  void *ctx = NULL;
  int rank = 0, size = 1;
  ZT_TRY(zt__comm_mpi_world(argc, argv, &ctx, &rank, &size));
  return zt__comm_new(&zt__comm_mpi_backend, ctx, rank, size, out);
}

zt_status zt_comm_world(zt_comm **out) {
  bool launched = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE");
  if (launched && zt__comm_mpi_available()) return zt_comm_init_mpi(NULL, NULL, out);
  return zt_comm_init_local(out);
}

void zt_comm_free(zt_comm *c) {
  if (!c) return;
  c->be->free(c->ctx);
  free(c);
}

int zt_comm_rank(const zt_comm *c) { return c->rank; }
int zt_comm_size(const zt_comm *c) { return c->size; }
const char *zt_comm_backend_name(const zt_comm *c) { return c->be->name; }
void zt_comm_set_debug(zt_comm *c, bool on) { c->debug = on; }
bool zt_comm_debug(const zt_comm *c) { return c->debug; }
void zt_comm_stats_get(const zt_comm *c, zt_comm_stats *out) { *out = c->stats; }
void zt_comm_stats_reset(zt_comm *c) { memset(&c->stats, 0, sizeof c->stats); }

/* ------------------------------------------------------------ debug mode */
const char *zt__coll_kind_name(int kind) {
  static const char *const names[ZT__COLL_KIND_COUNT] = {"all_reduce", "all_gather", "reduce_scatter",
                                                        "broadcast",  "barrier",    "split"};
  return kind >= 0 && kind < ZT__COLL_KIND_COUNT ? names[kind] : "unknown collective";
}

static const char *op_name(int op) {
  return op == ZT_REDUCE_SUM ? "sum" : op == ZT_REDUCE_AVG ? "avg" : "-";
}

static void describe(const zt__coll_record *r, char *buf, size_t cap) {
  snprintf(buf, cap, "%s(count %lld, dtype %s, root %d, op %s) at %.52s:%d", zt__coll_kind_name(r->kind),
           (long long)r->count, r->dtype >= 0 ? zt_dtype_name((zt_dtype)r->dtype) : "-", (int)r->root,
           op_name(r->op), r->file, (int)r->line);
}

zt_status zt__comm_debug_compare(const zt__coll_record *recs, int n) {
  const zt__coll_record *a = &recs[0];
  for (int i = 1; i < n; i++) {
    const zt__coll_record *b = &recs[i];
    const char *what = b->kind != a->kind     ? "the collective"
                       : b->count != a->count ? "the element count"
                       : b->dtype != a->dtype ? "the dtype"
                       : b->root != a->root   ? "the root"
                       : b->op != a->op       ? "the reduce op"
                                              : NULL;
    if (!what) continue;
    char da[192], db[192];
    describe(a, da, sizeof da);
    describe(b, db, sizeof db);
    return ZT_ERR(ZT_STATUS_COMM,
                  "collective mismatch (comm debug mode): rank %d called %s but rank 0 called %s (%s differs); "
                  "make every rank of the group call the same collectives in the same order with the same "
                  "sizes, dtype and root",
                  i, db, da, what);
  }
  return ZT_OK;
}

/* Exchange this rank's record with every rank (an all-gather of fixed-size records) and
 * compare, so that a mismatch fails everywhere instead of hanging. */
static zt_status debug_check(zt_comm *c, zt__coll_kind kind, int64_t count, int dtype, int root, int op,
                             const char *file, int line) {
  if (!c->debug || c->size == 1) return ZT_OK;
  zt__coll_record me;
  memset(&me, 0, sizeof me);
  me.kind = kind;
  me.count = count;
  me.dtype = dtype;
  me.root = root;
  me.op = op;
  me.line = line;
  const char *base = file ? strrchr(file, '/') : NULL;
  snprintf(me.file, sizeof me.file, "%s", base ? base + 1 : file ? file : "?");
  size_t bytes = sizeof me * (size_t)c->size;
  zt__coll_record *all = NULL;
  ZT_TRY(zt_mem_alloc(bytes, ZT_CPU, ZT_MEM_TAG_COMM, (void **)&all));
  void *req = NULL;
  zt_status s = c->be->all_gather(c->ctx, &me, all, (int64_t)(sizeof me / 4), ZT_DTYPE_I32, &req);
  if (s == ZT_OK && req) s = c->be->wait(c->ctx, req);
  if (s == ZT_OK) s = zt__comm_debug_compare(all, c->size);
  zt_mem_free(all, bytes, ZT_CPU, ZT_MEM_TAG_COMM);
  return s;
}

/* ------------------------------------------------------------ checks */
static zt_status check_comm(const zt_comm *c, const char *fn) {
  if (!c) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: comm is NULL; create one with zt_comm_world", fn);
  return ZT_OK;
}

/* t usable as a collective buffer: cpu, contiguous, bytes present, a supported dtype. */
static zt_status check_tensor(const zt_tensor *t, const char *fn, const char *name, bool reduce, zt_reduce_op op,
                              void **data) {
  if (!t) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: %s is NULL", fn, name);
  char dbuf[16];
  if (t->storage && t->storage->device.type != ZT_DEVICE_CPU)
    return ZT_ERR(ZT_STATUS_DEVICE, "%s: %s is on %s; this comm backend takes cpu tensors (move it to cpu first)",
                  fn, name, zt_device_str(t->storage->device, dbuf));
  if (!zt_tensor_is_contiguous(t))
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "%s: %s is not contiguous; collectives take contiguous tensors (use zt_tensor_clone_data)", fn,
                  name);
  if (!zt_dtype_valid(t->dtype))
    return ZT_ERR(ZT_STATUS_DTYPE, "%s: %s has dtype %d; collectives take f32, f64, bf16, f16, i32 or i64", fn, name,
                  (int)t->dtype);
  if (reduce) {
    if ((int)op < 0 || op >= ZT_REDUCE_OP_COUNT)
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: unknown reduce op %d; use ZT_REDUCE_SUM or ZT_REDUCE_AVG", fn,
                    (int)op);
    if (op == ZT_REDUCE_AVG && !zt_dtype_is_float(t->dtype))
      return ZT_ERR(ZT_STATUS_DTYPE, "%s: ZT_REDUCE_AVG on %s (%s) would truncate; use ZT_REDUCE_SUM and divide",
                    fn, name, zt_dtype_name(t->dtype));
  }
  if (zt_tensor_numel(t) == 0) {
    *data = NULL;
    return ZT_OK;
  }
  zt_status s = zt_tensor_data(t, data);
  if (s != ZT_OK) return zt__error_prefix(s, "%s: %s: ", fn, name);
  return ZT_OK;
}

static void account(zt_comm *c, double factor, size_t bytes) {
  c->stats.calls++;
  c->stats.bytes_sent += (int64_t)(factor * (double)bytes + 0.5);
}

/* ------------------------------------------------------------ async handles */
static zt_status work_new(zt_comm *c, zt_tensor *result, bool avg, zt_comm_work **out) {
  zt_comm_work *w = calloc(1, sizeof *w);
  if (!w) return ZT_ERR(ZT_STATUS_OOM, "out of host memory for a zt_comm_work");
  w->c = c;
  w->result = result;
  w->n = zt_tensor_numel(result);
  w->avg = avg;
  *out = w;
  return ZT_OK;
}

static void work_free(zt_comm_work *w) {
  if (w->tmp) zt_mem_free(w->tmp, w->tmp_bytes, ZT_CPU, ZT_MEM_TAG_COMM);
  free(w);
}

static bool half(zt_dtype dt) { return dt == ZT_DTYPE_BF16 || dt == ZT_DTYPE_F16; }

/* f32 copy of n bf16/f16 values, in a COMM buffer owned by w (MPI has no 16-bit float sum:
 * half-precision reductions travel and add in f32 and are rounded once at the end). */
static zt_status work_tmp_from_half(zt_comm_work *w, const uint16_t *src, zt_dtype dt, int64_t n, int64_t cap) {
  w->tmp_bytes = (size_t)cap * sizeof(float);
  ZT_TRY(zt_mem_alloc(w->tmp_bytes, ZT_CPU, ZT_MEM_TAG_COMM, &w->tmp));
  float *f = w->tmp;
  if (dt == ZT_DTYPE_BF16)
    for (int64_t i = 0; i < n; i++) f[i] = zt_bf16_to_f32(src[i]);
  else
    for (int64_t i = 0; i < n; i++) f[i] = zt_f16_to_f32(src[i]);
  return ZT_OK;
}

zt_status zt_comm_wait(zt_comm_work *w) {
  if (!w) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_comm_wait: work is NULL");
  zt_comm *c = w->c;
  zt_status s = ZT_OK;
  if (w->req) s = c->be->wait(c->ctx, w->req);
  if (s == ZT_OK && w->n > 0) {
    void *dst = zt__tensor_ptr(w->result);
    double scale = w->avg ? 1.0 / (double)c->size : 1.0;
    if (w->tmp_result) {
      uint16_t *h = dst;
      if (w->result->dtype == ZT_DTYPE_BF16)
        for (int64_t i = 0; i < w->n; i++) h[i] = zt_f32_to_bf16((float)(w->tmp_result[i] * scale));
      else
        for (int64_t i = 0; i < w->n; i++) h[i] = zt_f32_to_f16((float)(w->tmp_result[i] * scale));
    } else if (w->avg && w->result->dtype == ZT_DTYPE_F32) {
      float *f = dst;
      for (int64_t i = 0; i < w->n; i++) f[i] = (float)(f[i] * scale);
    } else if (w->avg) {
      double *d = dst;
      for (int64_t i = 0; i < w->n; i++) d[i] *= scale;
    }
  }
  if (s == ZT_OK) zt_tensor_bump_version(w->result);
  work_free(w);
  return s;
}

/* ------------------------------------------------------------ collectives */
static zt_status all_reduce_start(zt_comm *c, zt_tensor *t, zt_reduce_op op, zt_comm_work **out, const char *file,
                                  int line) {
  const char *fn = "zt_all_reduce";
  void *data = NULL;
  ZT_TRY(check_comm(c, fn));
  ZT_TRY(check_tensor(t, fn, "t", true, op, &data));
  int64_t n = zt_tensor_numel(t);
  ZT_TRY(debug_check(c, ZT__COLL_ALL_REDUCE, n, t->dtype, -1, op, file, line));
  zt_comm_work *w = NULL;
  ZT_TRY(work_new(c, t, op == ZT_REDUCE_AVG, &w));
  zt_status s = ZT_OK;
  void *buf = data;
  zt_dtype dt = t->dtype;
  if (n > 0 && half(dt)) {
    s = work_tmp_from_half(w, data, dt, n, n);
    buf = w->tmp_result = w->tmp;
    dt = ZT_DTYPE_F32;
  }
  if (s == ZT_OK && n > 0) s = c->be->all_reduce(c->ctx, buf, n, dt, &w->req);
  if (s != ZT_OK) {
    work_free(w);
    return zt__error_prefix(s, "%s: ", fn);
  }
  account(c, 2.0 * (c->size - 1) / c->size, zt_tensor_nbytes(t));
  *out = w;
  return ZT_OK;
}

static zt_status all_gather_start(zt_comm *c, const zt_tensor *in, zt_tensor *out, zt_comm_work **wout,
                                  const char *file, int line) {
  const char *fn = "zt_all_gather";
  void *din = NULL, *dout = NULL;
  ZT_TRY(check_comm(c, fn));
  ZT_TRY(check_tensor(in, fn, "in", false, ZT_REDUCE_SUM, &din));
  ZT_TRY(check_tensor(out, fn, "out", false, ZT_REDUCE_SUM, &dout));
  int64_t n = zt_tensor_numel(in);
  if (out->dtype != in->dtype)
    return ZT_ERR(ZT_STATUS_DTYPE, "%s: out has dtype %s but in has %s; give both the same dtype", fn,
                  zt_dtype_name(out->dtype), zt_dtype_name(in->dtype));
  if (zt_tensor_numel(out) != n * c->size)
    return ZT_ERR(ZT_STATUS_SHAPE, "%s: out has %lld elements; it needs size * numel(in) = %d * %lld", fn,
                  (long long)zt_tensor_numel(out), c->size, (long long)n);
  ZT_TRY(debug_check(c, ZT__COLL_ALL_GATHER, n, in->dtype, -1, -1, file, line));
  zt_comm_work *w = NULL;
  ZT_TRY(work_new(c, out, false, &w));
  zt_status s = n > 0 ? c->be->all_gather(c->ctx, din, dout, n, in->dtype, &w->req) : ZT_OK;
  if (s != ZT_OK) {
    work_free(w);
    return zt__error_prefix(s, "%s: ", fn);
  }
  account(c, (double)(c->size - 1) / c->size, zt_tensor_nbytes(out));
  *wout = w;
  return ZT_OK;
}

static zt_status reduce_scatter_start(zt_comm *c, const zt_tensor *in, zt_tensor *out, zt_reduce_op op,
                                      zt_comm_work **wout, const char *file, int line) {
  const char *fn = "zt_reduce_scatter";
  void *din = NULL, *dout = NULL;
  ZT_TRY(check_comm(c, fn));
  ZT_TRY(check_tensor(in, fn, "in", true, op, &din));
  ZT_TRY(check_tensor(out, fn, "out", true, op, &dout));
  int64_t n = zt_tensor_numel(out);
  if (out->dtype != in->dtype)
    return ZT_ERR(ZT_STATUS_DTYPE, "%s: out has dtype %s but in has %s; give both the same dtype", fn,
                  zt_dtype_name(out->dtype), zt_dtype_name(in->dtype));
  if (zt_tensor_numel(in) != n * c->size)
    return ZT_ERR(ZT_STATUS_SHAPE, "%s: in has %lld elements; it needs size * numel(out) = %d * %lld", fn,
                  (long long)zt_tensor_numel(in), c->size, (long long)n);
  ZT_TRY(debug_check(c, ZT__COLL_REDUCE_SCATTER, zt_tensor_numel(in), in->dtype, -1, op, file, line));
  zt_comm_work *w = NULL;
  ZT_TRY(work_new(c, out, op == ZT_REDUCE_AVG, &w));
  zt_status s = ZT_OK;
  const void *src = din;
  void *dst = dout;
  zt_dtype dt = in->dtype;
  if (n > 0 && half(dt)) {
    /* tmp = [f32 input (size*n) | f32 result (n)] */
    s = work_tmp_from_half(w, din, dt, n * c->size, n * (c->size + 1));
    if (s == ZT_OK) {
      src = w->tmp;
      dst = w->tmp_result = (float *)w->tmp + n * c->size;
      dt = ZT_DTYPE_F32;
    }
  }
  if (s == ZT_OK && n > 0) s = c->be->reduce_scatter(c->ctx, src, dst, n, dt, &w->req);
  if (s != ZT_OK) {
    work_free(w);
    return zt__error_prefix(s, "%s: ", fn);
  }
  account(c, (double)(c->size - 1) / c->size, zt_tensor_nbytes(in));
  *wout = w;
  return ZT_OK;
}

zt_status zt_all_reduce_async_at(zt_comm *c, zt_tensor *t, zt_reduce_op op, zt_comm_work **w, const char *file,
                                 int line) {
  if (!w) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_all_reduce_async: w is NULL");
  *w = NULL;
  return all_reduce_start(c, t, op, w, file, line);
}

zt_status zt_all_gather_async_at(zt_comm *c, const zt_tensor *in, zt_tensor *out, zt_comm_work **w,
                                 const char *file, int line) {
  if (!w) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_all_gather_async: w is NULL");
  *w = NULL;
  return all_gather_start(c, in, out, w, file, line);
}

zt_status zt_reduce_scatter_async_at(zt_comm *c, const zt_tensor *in, zt_tensor *out, zt_reduce_op op,
                                     zt_comm_work **w, const char *file, int line) {
  if (!w) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_reduce_scatter_async: w is NULL");
  *w = NULL;
  return reduce_scatter_start(c, in, out, op, w, file, line);
}

zt_status zt_all_reduce_at(zt_comm *c, zt_tensor *t, zt_reduce_op op, const char *file, int line) {
  zt_comm_work *w = NULL;
  ZT_TRY(all_reduce_start(c, t, op, &w, file, line));
  return zt_comm_wait(w);
}

zt_status zt_all_gather_at(zt_comm *c, const zt_tensor *in, zt_tensor *out, const char *file, int line) {
  zt_comm_work *w = NULL;
  ZT_TRY(all_gather_start(c, in, out, &w, file, line));
  return zt_comm_wait(w);
}

zt_status zt_reduce_scatter_at(zt_comm *c, const zt_tensor *in, zt_tensor *out, zt_reduce_op op, const char *file,
                               int line) {
  zt_comm_work *w = NULL;
  ZT_TRY(reduce_scatter_start(c, in, out, op, &w, file, line));
  return zt_comm_wait(w);
}

zt_status zt_broadcast_at(zt_comm *c, zt_tensor *t, int root, const char *file, int line) {
  const char *fn = "zt_broadcast";
  void *data = NULL;
  ZT_TRY(check_comm(c, fn));
  ZT_TRY(check_tensor(t, fn, "t", false, ZT_REDUCE_SUM, &data));
  if (root < 0 || root >= c->size)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: root %d is not a rank of this group (size %d)", fn, root, c->size);
  int64_t n = zt_tensor_numel(t);
  ZT_TRY(debug_check(c, ZT__COLL_BROADCAST, n, t->dtype, root, -1, file, line));
  if (n > 0) {
    zt_status s = c->be->broadcast(c->ctx, data, n, t->dtype, root);
    if (s != ZT_OK) return zt__error_prefix(s, "%s: ", fn);
  }
  account(c, c->size > 1 ? 1.0 : 0.0, zt_tensor_nbytes(t));
  zt_tensor_bump_version(t);
  return ZT_OK;
}

zt_status zt_barrier_at(zt_comm *c, const char *file, int line) {
  ZT_TRY(check_comm(c, "zt_barrier"));
  ZT_TRY(debug_check(c, ZT__COLL_BARRIER, -1, -1, -1, -1, file, line));
  zt_status s = c->be->barrier(c->ctx);
  if (s != ZT_OK) return zt__error_prefix(s, "zt_barrier: ");
  c->stats.calls++;
  return ZT_OK;
}

static zt_status check_peer(const zt_comm *c, const char *fn, const char *what, int peer, int tag) {
  if (peer < 0 || peer >= c->size)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: %s %d is not a rank of this group (size %d)", fn, what, peer, c->size);
  if (peer == c->rank)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: %s %d is this rank; a blocking send to yourself would deadlock", fn,
                  what, peer);
  if (tag < 0) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: tag %d is negative; use a tag >= 0", fn, tag);
  return ZT_OK;
}

zt_status zt_send(zt_comm *c, const zt_tensor *t, int dst, int tag) {
  void *data = NULL;
  ZT_TRY(check_comm(c, "zt_send"));
  ZT_TRY(check_tensor(t, "zt_send", "t", false, ZT_REDUCE_SUM, &data));
  ZT_TRY(check_peer(c, "zt_send", "dst", dst, tag));
  zt_status s = c->be->send(c->ctx, data, zt_tensor_numel(t), t->dtype, dst, tag);
  if (s != ZT_OK) return zt__error_prefix(s, "zt_send: ");
  account(c, 1.0, zt_tensor_nbytes(t));
  return ZT_OK;
}

zt_status zt_recv(zt_comm *c, zt_tensor *t, int src, int tag) {
  void *data = NULL;
  ZT_TRY(check_comm(c, "zt_recv"));
  ZT_TRY(check_tensor(t, "zt_recv", "t", false, ZT_REDUCE_SUM, &data));
  ZT_TRY(check_peer(c, "zt_recv", "src", src, tag));
  zt_status s = c->be->recv(c->ctx, data, zt_tensor_numel(t), t->dtype, src, tag);
  if (s != ZT_OK) return zt__error_prefix(s, "zt_recv: ");
  c->stats.calls++;
  zt_tensor_bump_version(t);
  return ZT_OK;
}

zt_status zt_comm_split(zt_comm *c, int color, int key, zt_comm **out) {
  ZT_TRY(check_comm(c, "zt_comm_split"));
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_comm_split: out is NULL");
  *out = NULL;
  if (color < 0) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_comm_split: color %d is negative; use a color >= 0", color);
  ZT_TRY(debug_check(c, ZT__COLL_SPLIT, -1, -1, -1, -1, __FILE__, __LINE__));
  void *ctx = NULL;
  int rank = 0, size = 1;
  zt_status s = c->be->split(c->ctx, color, key, &ctx, &rank, &size);
  if (s != ZT_OK) return zt__error_prefix(s, "zt_comm_split: ");
  ZT_TRY(zt__comm_new(c->be, ctx, rank, size, out));
  (*out)->debug = c->debug;
  return ZT_OK;
}
