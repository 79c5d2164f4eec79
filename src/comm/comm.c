/* Process groups: argument checks, debug mode's pre-collective check, ring-formula
 * accounting, AVG and bf16/f16 handling, async handles, and timeouts (every wait is
 * bounded; each operation is published on the arrival board, board.c), over a backend
 * table. Invariant: a backend only sees validated contiguous cpu buffers; every temporary
 * buffer here comes from zt_mem_alloc with ZT_MEM_TAG_COMM and is freed by wait (except
 * after a timeout: MPI may still write it, so it is left). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/status_internal.h"
#include "comm/comm_internal.h"
#include "core/backend.h"

struct zt_comm {
  const zt__comm_backend *be;
  void *ctx;
  int rank, size;
  bool debug;
  zt_comm_stats stats;
  double timeout;        /* seconds, 0: no limit */
  uint64_t seq;          /* collectives started on this group: the board's call numbers */
  zt__board_entry *me;   /* this rank's board entry (shared memory, or own) */
  zt__board_entry own;   /* the entry when the backend has no board for this group */
  bool broken;           /* an operation timed out: the group is unusable */
  char broken_what[160]; /* which one, for later calls' messages when broken_msg is NULL */
  char *broken_msg;      /* the timeout's whole message, carried by every later call's */
  /* the back-off's look at ranks on other hosts (their board servers), per wait */
  zt__board_view *remote; /* size views, made at the first look */
  double remote_next;     /* when to look again; 0: not yet in this wait */
  bool remote_in;         /* at the last look, every needed rank there was inside a comm call */
};

/* The operation in progress, for the board and a timeout's message. */
typedef struct opinfo {
  zt__coll_kind kind;
  const char *file;
  int line;
  uint64_t seq;
  int peer, tag;
} opinfo;

/* Host bytes of a tensor for the comm backends (which take host pointers): the tensor's own
 * when its device is host-accessible, else a COMM staging buffer (stage non-NULL) moved
 * through the device's backend. */
typedef struct host_bytes {
  void *data;  /* what the backend reads or writes; NULL for an empty tensor */
  void *stage; /* owned staging buffer, or NULL */
  size_t bytes;
} host_bytes;

/* Debug mode's header of a send: what it sends and from where, checked by the receive
 * before the data moves (sent under tag + ZT_COMM_MAX_TAG: the same order as the data). */
typedef struct p2p_header {
  int64_t count;
  int32_t dtype, tag, line, pad;
  char file[32];
} p2p_header;
#define P2P_HEADER_I32 ((int64_t)(sizeof(p2p_header) / 4))

struct zt_comm_work {
  zt_comm *c;
  opinfo op;
  void *req;          /* backend request, NULL when already complete */
  zt_tensor *result;  /* the user's output tensor (version bumped at the end) */
  void *tmp;          /* f32 buffer (bf16/f16 reductions), or NULL */
  size_t tmp_bytes;
  float *tmp_result;  /* where the f32 result lies inside tmp */
  int64_t n;          /* result elements */
  bool avg;
  /* host copies of tensors on devices the host cannot address (COMM, owned by the work):
   * the input's, and the result's, written back to the device when the work completes */
  host_bytes in_stage, out_stage;
  size_t bytes_sent;  /* a send's bytes, counted when it completes */
  p2p_header header;  /* debug mode: a send's header, in flight until the wait */
  void *header_req;
};

static bool env_debug(void) {
  const char *e = getenv("ZT_COMM_DEBUG");
  return e && strcmp(e, "1") == 0;
}

#define DEFAULT_TIMEOUT_S 600.0

zt_status zt__comm_env_timeout(double *out) {
  *out = DEFAULT_TIMEOUT_S;
  const char *e = getenv("ZT_COMM_TIMEOUT");
  if (!e || !*e) return ZT_OK;
  char *end = NULL;
  double v = strtod(e, &end);
  while (end && (*end == ' ' || *end == '\t')) end++;
  if (end == e || *end || !(v >= 0) || isinf(v))
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "ZT_COMM_TIMEOUT='%.64s' is not a number of seconds >= 0 (0: no limit); fix or unset it", e);
  *out = v;
  return ZT_OK;
}

zt_status zt__comm_new(const zt__comm_backend *be, void *ctx, int rank, int size, zt_comm **out) {
  double timeout = DEFAULT_TIMEOUT_S;
  zt_status s = zt__comm_env_timeout(&timeout);
  zt_comm *c = s == ZT_OK ? calloc(1, sizeof *c) : NULL;
  if (!c) {
    be->free(ctx);
    return s != ZT_OK ? s : ZT_ERR(ZT_STATUS_OOM, "out of host memory for a zt_comm");
  }
  c->be = be;
  c->ctx = ctx;
  c->rank = rank;
  c->size = size;
  c->debug = env_debug();
  c->timeout = timeout;
  c->me = be->board_entry ? be->board_entry(ctx, rank) : NULL;
  if (!c->me) c->me = &c->own;
  zt__board_reset(c->me);
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
  zt__board_reset(c->me); /* the slot may serve another group next */
  c->be->free(c->ctx);
  free(c->broken_msg);
  free(c->remote);
  free(c);
}

zt__rank_names zt__comm_names(const zt_comm *c) {
  return zt__rank_names_of(c->be->world_ranks ? c->be->world_ranks(c->ctx) : NULL, c->size, c->be->host_of);
}

int zt_comm_rank(const zt_comm *c) { return c->rank; }
int zt_comm_size(const zt_comm *c) { return c->size; }
const char *zt_comm_backend_name(const zt_comm *c) { return c->be->name; }
void zt_comm_set_debug(zt_comm *c, bool on) { c->debug = on; }
bool zt_comm_debug(const zt_comm *c) { return c->debug; }
void zt_comm_set_timeout(zt_comm *c, double seconds) {
  if (!c || !(seconds >= 0)) return;
  c->timeout = isinf(seconds) ? 0 : seconds;
}
double zt_comm_timeout(const zt_comm *c) { return c ? c->timeout : 0; }

void zt_comm_abort(zt_comm *c, int code) {
  if (c && c->be->abort) c->be->abort(c->ctx, code);
}

void zt_comm_stats_get(const zt_comm *c, zt_comm_stats *out) { *out = c->stats; }
void zt_comm_stats_reset(zt_comm *c) { memset(&c->stats, 0, sizeof c->stats); }

/* ------------------------------------------------------------ debug mode */
const char *zt__coll_kind_name(int kind) {
  static const char *const names[ZT__COLL_KIND_COUNT] = {
      "all_reduce", "all_gather", "reduce_scatter", "broadcast", "barrier",
      "split",      "check_same", "agree_status",   "send",      "recv"};
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

zt_status zt__comm_debug_compare(const zt__coll_record *recs, int n, const zt__rank_names *names) {
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
    char da[192], db[192], na[ZT__RANK_NAME], nb[ZT__RANK_NAME];
    describe(a, da, sizeof da);
    describe(b, db, sizeof db);
    return ZT_ERR(ZT_STATUS_COMM,
                  "collective mismatch (comm debug mode): %s called %s but %s called %s (%s differs); "
                  "make every rank of the group call the same collectives in the same order with the same "
                  "sizes, dtype and root",
                  zt__rank_name(names, i, nb, sizeof nb), db, zt__rank_name(names, 0, na, sizeof na), da, what);
  }
  return ZT_OK;
}

/* ------------------------------------------------------------ waiting, timeouts */
/* A new operation on the group: number it (collectives) and publish it on the board.
 * Called once the local checks passed, right before the ranks communicate. */
static opinfo enter(zt_comm *c, zt__coll_kind kind, const char *file, int line) {
  opinfo op = {.kind = kind, .file = file, .line = line, .peer = -1, .tag = -1};
  if (kind != ZT__COLL_SEND && kind != ZT__COLL_RECV) {
    op.seq = ++c->seq;
    zt__board_enter(c->me, op.seq, kind, file, line);
  }
  return op;
}

#define BOARD_REMOTE_S 6.0 /* a timeout's message waits this long at most for other hosts' boards */

/* The timeout's message; the group is unusable from now on, and keeps the message for every
 * later call's (zerotrain's last error is per thread, and a later failure overwrites it). */
static zt_status timed_out(zt_comm *c, const opinfo *op) {
  const char *base = op->file ? strrchr(op->file, '/') : NULL;
  c->broken = true;
  snprintf(c->broken_what, sizeof c->broken_what, "%s at %s:%d", zt__coll_kind_name(op->kind),
           base ? base + 1 : op->file ? op->file : "?", op->line);
  zt__rank_names names = zt__comm_names(c);
  zt__board_view *views = calloc((size_t)c->size, sizeof *views);
  if (!views) {
    char me[ZT__RANK_NAME];
    return ZT_ERR(ZT_STATUS_OOM, "%s timed out on %s (out of memory for its message)", c->broken_what,
                  zt__rank_name(&names, c->rank, me, sizeof me));
  }
  for (int r = 0; r < c->size; r++)
    zt__board_read(r == c->rank ? c->me : c->be->board_entry ? c->be->board_entry(c->ctx, r) : NULL, &views[r]);
  /* the ranks on other hosts, from their board servers: a few seconds at most */
  if (c->be->board_remote) c->be->board_remote(c->ctx, views, zt_clock_now() + BOARD_REMOTE_S);
  zt__timeout_info info = {.kind = op->kind, .file = op->file, .line = op->line, .rank = c->rank, .size = c->size,
                           .timeout_s = c->timeout, .seq = op->seq, .peer = op->peer, .tag = op->tag};
  zt_status s = zt__comm_timeout_error(&info, views, &names);
  free(views);
  free(c->broken_msg);
  c->broken_msg = strdup(zt_last_error()); /* NULL (out of memory): later calls name broken_what */
  return s;
}

static void nap(double s) {
  struct timespec ts = {0, (long)(s * 1e9)};
  nanosleep(&ts, NULL);
}

/* The back-off. MPI moves a nonblocking operation forward only inside MPI calls (no
 * progress thread), so a rank that sleeps while its peers are in the operation slows
 * every round of it (shared-memory transfers go fragment by fragment, each needing both
 * sides). So the waiting rank spins (MPI_Test) as long as the board shows every rank it
 * needs inside a comm call (ranks on other hosts: as their board servers last said), and naps only while one is
 * elsewhere (computing, late, stopped). Naps grow with the time already waited (1/16 of
 * it, NAP_MIN_S to NAP_MAX_S); after each, BURST_S of spinning. Spinning with everyone
 * present is capped at PRESENT_SPIN_S, so a rank stopped inside the operation (its entry
 * still says "waiting") costs its peers a few per cent of a core after that. */
#define SPIN_S 1e-3         /* always spin this long first: most waits end here */
#define CHECK_S 50e-6       /* how often a spinning rank looks at the board */
#define PRESENT_SPIN_S 5.0
#define BURST_S 20e-6
#define NAP_MIN_S 5e-6
#define NAP_MAX_S 1e-3
#define FROZEN_S 2.0 /* a gap between two looks that long: this process was not running */

/* Ranks on other hosts are looked at through their board servers (a TCP round trip, during which
 * this rank makes no MPI progress), so only once a wait has lasted REMOTE_AFTER_S, far longer
 * than a collective's round over a slow link takes, then every REMOTE_CHECK_S, each look given
 * at most REMOTE_ASK_S (at 10 ms a look from a 10 ms wait on a link of 10 ms delay made a 4-byte
 * all-reduce 31 ms instead of 21: bench/results/hosts.md). A host that did not answer counts as
 * present, and is not asked again in this wait: a stopped server accepts no connection, and
 * every look would leave one more in its queue (a full queue drops new ones, and the timeout's
 * message would read "unreachable"). */
#define REMOTE_AFTER_S 0.1
#define REMOTE_CHECK_S 0.25
#define REMOTE_ASK_S 20e-3

/* Whether a rank's view lets op progress: it is inside a comm call (this one, for collectives). */
static bool view_in_comm(const zt__board_view *v, const opinfo *op, bool p2p) {
  return !v->known || (v->blocked != ZT__BLOCKED_NONE && (p2p || v->started >= op->seq));
}

/* Is every rank that op needs on other hosts inside a comm call, at the last look? */
static bool remote_in_comm(zt_comm *c, const opinfo *op, bool p2p, double waited) {
  if (!c->be->board_remote || waited < REMOTE_AFTER_S) return true;
  double t = zt_clock_now();
  if (c->remote_next > 0 && t < c->remote_next) return c->remote_in;
  c->remote_next = t + REMOTE_CHECK_S;
  c->remote_in = true;
  if (!c->remote) c->remote = malloc(sizeof *c->remote * (size_t)c->size);
  if (!c->remote) return true;
  memset(c->remote, 0, sizeof *c->remote * (size_t)c->size);
  if (p2p) /* only the peer's host is asked: the others count as read */
    for (int r = 0; r < c->size; r++) c->remote[r].known = r != op->peer;
  c->be->board_remote(c->ctx, c->remote, t + REMOTE_ASK_S);
  bool silent = false;
  for (int r = p2p ? op->peer : 0; r < (p2p ? op->peer + 1 : c->size); r++) {
    if (r == c->rank || c->be->board_entry(c->ctx, r)) continue;
    if (!c->remote[r].remote) silent = true;
    else if (!view_in_comm(&c->remote[r], op, p2p)) c->remote_in = false;
  }
  if (silent) c->remote_next = INFINITY; /* asked no more in this wait (see above) */
  return c->remote_in;
}

/* Is every rank that op needs inside a comm call, so that the operation can progress? */
static bool peers_in_comm(zt_comm *c, const opinfo *op, double waited) {
  if (!c->be->board_entry) return true;
  bool p2p = op->kind == ZT__COLL_SEND || op->kind == ZT__COLL_RECV, other_host = false;
  for (int r = p2p ? op->peer : 0; r < (p2p ? op->peer + 1 : c->size); r++) {
    if (r == c->rank) continue;
    const zt__board_entry *e = c->be->board_entry(c->ctx, r);
    if (!e) { /* another node: its board server says */
      other_host = true;
      continue;
    }
    zt__board_view v;
    zt__board_read(e, &v);
    if (!view_in_comm(&v, op, p2p)) return false;
  }
  return !other_host || remote_in_comm(c, op, p2p, waited);
}

/* Poll req until it completes (ZT_OK or its error) or the timeout passes (*late). */
static zt_status poll_req(zt_comm *c, void *req, const opinfo *op, bool *late) {
  bool done = false;
  zt_status s = c->be->test(c->ctx, req, &done);
  if (done) return s;
  double t0 = zt_clock_now(), t = t0, next_check = t0 + SPIN_S;
  c->remote_next = 0; /* a new wait: other hosts' ranks not looked at yet */
  for (;;) {
    s = c->be->test(c->ctx, req, &done);
    if (done) return s;
    double prev = t;
    t = zt_clock_now();
    /* this process did not run (stopped, suspended): not the peers' time; a rank continued
     * after SIGSTOP then neither times out at once nor blames the ranks that waited for it */
    if (t - prev > FROZEN_S) t0 += t - prev;
    if (c->timeout > 0 && t - t0 >= c->timeout) {
      *late = true;
      return ZT_STATUS_COMM;
    }
    if (t < next_check) continue;
    double waited = t - t0;
    if (waited < PRESENT_SPIN_S && peers_in_comm(c, op, waited)) {
      next_check = t + CHECK_S;
      continue;
    }
    double n = waited / 16;
    nap(n < NAP_MIN_S ? NAP_MIN_S : n > NAP_MAX_S ? NAP_MAX_S : n);
    next_check = zt_clock_now() + BURST_S;
  }
}

/* Complete the backend's request (NULL: already complete) within the group's timeout,
 * showing on the board what this rank waits for. */
static zt_status wait_req(zt_comm *c, void *req, const opinfo *op) {
  if (!req) return ZT_OK;
  zt__board_blocked what = op->kind == ZT__COLL_SEND   ? ZT__BLOCKED_SEND
                           : op->kind == ZT__COLL_RECV ? ZT__BLOCKED_RECV
                                                       : ZT__BLOCKED_COLL;
  zt__board_block(c->me, what, what == ZT__BLOCKED_COLL ? op->seq : (uint64_t)op->peer);
  bool late = false;
  zt_status s = poll_req(c, req, op, &late);
  if (late) {
    if (c->be->abandon) c->be->abandon(c->ctx, req);
    return timed_out(c, op); /* still posted: the board keeps saying so */
  }
  zt__board_block(c->me, ZT__BLOCKED_NONE, 0);
  return s;
}

/* Exchange this rank's record with every rank (an all-gather of fixed-size records) and
 * compare, so that a mismatch fails everywhere instead of hanging. */
static zt_status debug_check(zt_comm *c, const opinfo *op, int64_t count, int dtype, int root, int rop) {
  if (!c->debug || c->size == 1) return ZT_OK;
  zt__coll_record me;
  memset(&me, 0, sizeof me);
  me.kind = op->kind;
  me.count = count;
  me.dtype = dtype;
  me.root = root;
  me.op = rop;
  me.line = op->line;
  const char *base = op->file ? strrchr(op->file, '/') : NULL;
  snprintf(me.file, sizeof me.file, "%s", base ? base + 1 : op->file ? op->file : "?");
  size_t bytes = sizeof me * (size_t)c->size;
  zt__coll_record *all = NULL;
  ZT_TRY(zt_mem_alloc(bytes, ZT_CPU, ZT_MEM_TAG_COMM, (void **)&all));
  void *req = NULL;
  zt_status s = c->be->all_gather(c->ctx, &me, all, (int64_t)(sizeof me / 4), ZT_DTYPE_I32, &req);
  if (s == ZT_OK) s = wait_req(c, req, op);
  if (c->broken) return s; /* MPI may still write `all`: leave it */
  zt__rank_names names = zt__comm_names(c);
  if (s == ZT_OK) s = zt__comm_debug_compare(all, c->size, &names);
  zt_mem_free(all, bytes, ZT_CPU, ZT_MEM_TAG_COMM);
  return s;
}

/* ------------------------------------------------------------ checks */
static zt_status check_comm(const zt_comm *c, const char *fn) {
  if (!c) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: comm is NULL; create one with zt_comm_world", fn);
  if (c->broken && c->broken_msg) /* the first message ends with its own site: no second one */
    return zt_set_error(ZT_STATUS_COMM, "%s: this group is unusable after an earlier failure on this rank: %s", fn,
                        c->broken_msg);
  if (c->broken)
    return ZT_ERR(ZT_STATUS_COMM,
                  "%s: this group is unusable: %s timed out on this rank earlier, and MPI cannot cancel it; end "
                  "the job with zt_comm_abort",
                  fn, c->broken_what);
  return ZT_OK;
}

zt_status zt__comm_usable(const zt_comm *c, const char *fn) { return check_comm(c, fn); }

/* t usable as a collective buffer (contiguous, bytes present, a supported dtype, any device
 * with a backend), and its host bytes in *hb: staged from the device when read_in (what the
 * comm backend reads); the caller frees a stage (stage_free / stage_finish). */
static zt_status check_tensor(const zt_tensor *t, const char *fn, const char *name, bool reduce, zt_reduce_op op,
                              bool read_in, host_bytes *hb) {
  if (!t) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: %s is NULL", fn, name);
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
  *hb = (host_bytes){0};
  if (zt_tensor_numel(t) == 0) return ZT_OK;
  void *unused = NULL;
  zt_status s = zt_tensor_data(t, &unused); /* refuses released storage */
  if (s != ZT_OK) return zt__error_prefix(s, "%s: %s", fn, name);
  hb->bytes = zt_tensor_nbytes(t);
  hb->data = zt__tensor_host_ptr(t);
  if (hb->data) return ZT_OK;
  s = zt_mem_alloc(hb->bytes, ZT_CPU, ZT_MEM_TAG_COMM, &hb->stage);
  if (s != ZT_OK) return zt__error_prefix(s, "%s: staging %s in host memory", fn, name);
  hb->data = hb->stage;
  if (read_in) zt__dev_read(t, hb->data, hb->bytes);
  return ZT_OK;
}

static void stage_free(host_bytes *hb) {
  if (hb->stage) zt_mem_free(hb->stage, hb->bytes, ZT_CPU, ZT_MEM_TAG_COMM);
  hb->stage = NULL;
}

/* After the backend wrote hb: a staged result goes to t's device; the stage is freed. */
static void stage_finish(host_bytes *hb, zt_tensor *t) {
  if (hb->stage) zt__dev_write(t, hb->stage, hb->bytes);
  stage_free(hb);
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
  w->n = result ? zt_tensor_numel(result) : 0;
  w->avg = avg;
  *out = w;
  return ZT_OK;
}

static void work_free(zt_comm_work *w) {
  if (w->tmp) zt_mem_free(w->tmp, w->tmp_bytes, ZT_CPU, ZT_MEM_TAG_COMM);
  stage_free(&w->in_stage);
  stage_free(&w->out_stage);
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

zt_status zt_comm_test(zt_comm_work *w, bool *done) {
  if (done) *done = false;
  if (!w) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_comm_test: work is NULL");
  zt_comm *c = w->c;
  if (c->broken) return check_comm(c, "zt_comm_test");
  void **reqs[2] = {&w->header_req, &w->req}; /* in order: a debug-mode send's header first */
  for (int i = 0; i < 2; i++) {
    if (!*reqs[i]) continue;
    bool fin = false;
    zt_status s = c->be->test(c->ctx, *reqs[i], &fin);
    if (!fin) return ZT_OK;
    *reqs[i] = NULL; /* the backend freed it */
    if (s) return s;
  }
  if (done) *done = true;
  return ZT_OK;
}

zt_status zt_comm_wait(zt_comm_work *w) {
  if (!w) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_comm_wait: work is NULL");
  zt_comm *c = w->c;
  zt_status s = w->req || w->header_req ? check_comm(c, "zt_comm_wait") : ZT_OK;
  if (s == ZT_OK) s = wait_req(c, w->header_req, &w->op);
  if (s == ZT_OK) w->header_req = NULL;
  if (s == ZT_OK) s = wait_req(c, w->req, &w->op);
  if (s != ZT_OK && (w->req || w->header_req)) {
    /* not complete (timed out, or the group was already unusable): MPI keeps the request
     * and may still write the buffers, so the f32 buffer stays allocated */
    free(w);
    return s;
  }
  if (s == ZT_OK && w->n > 0) {
    void *dst = w->out_stage.data; /* host bytes of the result */
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
  if (s == ZT_OK && w->result) {
    stage_finish(&w->out_stage, w->result);
    zt_tensor_bump_version(w->result);
  }
  if (s == ZT_OK && (w->op.kind == ZT__COLL_SEND || w->op.kind == ZT__COLL_RECV))
    account(c, 1.0, w->bytes_sent); /* a receive sends nothing */
  work_free(w);
  return s;
}

/* ------------------------------------------------------------ collectives */
static zt_status all_reduce_start(zt_comm *c, zt_tensor *t, zt_reduce_op op, zt_comm_work **out, const char *file,
                                  int line) {
  const char *fn = "zt_all_reduce";
  host_bytes hb;
  ZT_TRY(check_comm(c, fn));
  ZT_TRY(check_tensor(t, fn, "t", true, op, true, &hb));
  int64_t n = zt_tensor_numel(t);
  opinfo oi = enter(c, ZT__COLL_ALL_REDUCE, file, line);
  zt_comm_work *w = NULL;
  zt_status s0 = debug_check(c, &oi, n, t->dtype, -1, op);
  if (!s0) s0 = work_new(c, t, op == ZT_REDUCE_AVG, &w);
  if (s0) {
    stage_free(&hb);
    return s0;
  }
  w->op = oi;
  w->out_stage = hb; /* in place: the result's host bytes */
  void *data = hb.data;
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
    return zt__error_prefix(s, "%s", fn);
  }
  account(c, 2.0 * (c->size - 1) / c->size, zt_tensor_nbytes(t));
  *out = w;
  return ZT_OK;
}

static zt_status all_gather_start(zt_comm *c, const zt_tensor *in, zt_tensor *out, zt_comm_work **wout,
                                  const char *file, int line) {
  const char *fn = "zt_all_gather";
  host_bytes hin, hout;
  ZT_TRY(check_comm(c, fn));
  ZT_TRY(check_tensor(in, fn, "in", false, ZT_REDUCE_SUM, false, &hin));
  ZT_TRY(check_tensor(out, fn, "out", false, ZT_REDUCE_SUM, false, &hout));
  stage_free(&hin), stage_free(&hout); /* checked; staged below, once the shapes agree */
  int64_t n = zt_tensor_numel(in);
  if (out->dtype != in->dtype)
    return ZT_ERR(ZT_STATUS_DTYPE, "%s: out has dtype %s but in has %s; give both the same dtype", fn,
                  zt_dtype_name(out->dtype), zt_dtype_name(in->dtype));
  if (zt_tensor_numel(out) != n * c->size)
    return ZT_ERR(ZT_STATUS_SHAPE, "%s: out has %lld elements; it needs size * numel(in) = %d * %lld", fn,
                  (long long)zt_tensor_numel(out), c->size, (long long)n);
  opinfo oi = enter(c, ZT__COLL_ALL_GATHER, file, line);
  ZT_TRY(debug_check(c, &oi, n, in->dtype, -1, -1));
  zt_comm_work *w = NULL;
  ZT_TRY(work_new(c, out, false, &w));
  w->op = oi;
  zt_status s = check_tensor(in, fn, "in", false, ZT_REDUCE_SUM, true, &w->in_stage);
  if (!s) s = check_tensor(out, fn, "out", false, ZT_REDUCE_SUM, false, &w->out_stage);
  if (!s && n > 0) s = c->be->all_gather(c->ctx, w->in_stage.data, w->out_stage.data, n, in->dtype, &w->req);
  if (s != ZT_OK) {
    work_free(w);
    return zt__error_prefix(s, "%s", fn);
  }
  account(c, (double)(c->size - 1) / c->size, zt_tensor_nbytes(out));
  *wout = w;
  return ZT_OK;
}

static zt_status reduce_scatter_start(zt_comm *c, const zt_tensor *in, zt_tensor *out, zt_reduce_op op,
                                      zt_comm_work **wout, const char *file, int line) {
  const char *fn = "zt_reduce_scatter";
  host_bytes hin, hout;
  ZT_TRY(check_comm(c, fn));
  ZT_TRY(check_tensor(in, fn, "in", true, op, false, &hin));
  ZT_TRY(check_tensor(out, fn, "out", true, op, false, &hout));
  stage_free(&hin), stage_free(&hout); /* checked; staged below, once the shapes agree */
  int64_t n = zt_tensor_numel(out);
  if (out->dtype != in->dtype)
    return ZT_ERR(ZT_STATUS_DTYPE, "%s: out has dtype %s but in has %s; give both the same dtype", fn,
                  zt_dtype_name(out->dtype), zt_dtype_name(in->dtype));
  if (zt_tensor_numel(in) != n * c->size)
    return ZT_ERR(ZT_STATUS_SHAPE, "%s: in has %lld elements; it needs size * numel(out) = %d * %lld", fn,
                  (long long)zt_tensor_numel(in), c->size, (long long)n);
  opinfo oi = enter(c, ZT__COLL_REDUCE_SCATTER, file, line);
  ZT_TRY(debug_check(c, &oi, zt_tensor_numel(in), in->dtype, -1, op));
  zt_comm_work *w = NULL;
  ZT_TRY(work_new(c, out, op == ZT_REDUCE_AVG, &w));
  w->op = oi;
  zt_status s = check_tensor(in, fn, "in", true, op, true, &w->in_stage);
  if (!s) s = check_tensor(out, fn, "out", true, op, false, &w->out_stage);
  const void *din = w->in_stage.data, *src = din;
  void *dst = w->out_stage.data;
  zt_dtype dt = in->dtype;
  if (s == ZT_OK && n > 0 && half(dt)) {
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
    return zt__error_prefix(s, "%s", fn);
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
  host_bytes hb;
  ZT_TRY(check_comm(c, fn));
  ZT_TRY(check_tensor(t, fn, "t", false, ZT_REDUCE_SUM, false, &hb));
  stage_free(&hb);
  if (root < 0 || root >= c->size)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: root %d is not a rank of this group (size %d)", fn, root, c->size);
  int64_t n = zt_tensor_numel(t);
  opinfo oi = enter(c, ZT__COLL_BROADCAST, file, line);
  ZT_TRY(debug_check(c, &oi, n, t->dtype, root, -1));
  if (n > 0) {
    void *req = NULL;
    zt_status s = check_tensor(t, fn, "t", false, ZT_REDUCE_SUM, c->rank == root, &hb);
    if (s == ZT_OK) s = c->be->broadcast(c->ctx, hb.data, n, t->dtype, root, &req);
    if (s == ZT_OK) s = wait_req(c, req, &oi);
    if (s != ZT_OK) {
      if (!req) stage_free(&hb); /* a request MPI still holds keeps its buffer */
      return c->broken ? s : zt__error_prefix(s, "%s", fn);
    }
    stage_finish(&hb, t);
  }
  account(c, c->size > 1 ? 1.0 : 0.0, zt_tensor_nbytes(t));
  zt_tensor_bump_version(t);
  return ZT_OK;
}

zt_status zt_barrier_at(zt_comm *c, const char *file, int line) {
  ZT_TRY(check_comm(c, "zt_barrier"));
  opinfo oi = enter(c, ZT__COLL_BARRIER, file, line);
  ZT_TRY(debug_check(c, &oi, -1, -1, -1, -1));
  void *req = NULL;
  zt_status s = c->be->barrier(c->ctx, &req);
  if (s == ZT_OK) s = wait_req(c, req, &oi);
  if (s != ZT_OK) return c->broken ? s : zt__error_prefix(s, "zt_barrier");
  c->stats.calls++;
  return ZT_OK;
}

static zt_status check_peer(const zt_comm *c, const char *fn, const char *what, int peer, int tag) {
  if (peer < 0 || peer >= c->size)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: %s %d is not a rank of this group (size %d)", fn, what, peer, c->size);
  if (peer == c->rank)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: %s %d is this rank; send to and receive from other ranks only", fn,
                  what, peer);
  if (tag < 0 || tag >= ZT_COMM_MAX_TAG)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: tag %d is outside [0, %d); use a tag in that range", fn, tag,
                  ZT_COMM_MAX_TAG);
  return ZT_OK;
}


static p2p_header header_of(const zt_tensor *t, const opinfo *oi) {
  p2p_header h;
  memset(&h, 0, sizeof h);
  h.count = zt_tensor_numel(t);
  h.dtype = (int32_t)t->dtype;
  h.tag = oi->tag;
  h.line = oi->line;
  const char *base = oi->file ? strrchr(oi->file, '/') : NULL;
  snprintf(h.file, sizeof h.file, "%s", base ? base + 1 : oi->file ? oi->file : "?");
  return h;
}

/* The receive's side of the debug check: the matching send's header, against t. */
static zt_status check_header(zt_comm *c, const zt_tensor *t, const opinfo *oi) {
  p2p_header got, want = header_of(t, oi);
  void *req = NULL;
  opinfo hi = *oi;
  zt_status s = c->be->recv(c->ctx, &got, P2P_HEADER_I32, ZT_DTYPE_I32, oi->peer, oi->tag + ZT_COMM_MAX_TAG, &req);
  if (s == ZT_OK) s = wait_req(c, req, &hi);
  if (s) return s;
  got.file[sizeof got.file - 1] = '\0';
  zt__rank_names names = zt__comm_names(c);
  char me[ZT__RANK_NAME], peer[ZT__RANK_NAME];
  if (got.count != want.count || got.dtype != want.dtype)
    return ZT_ERR(ZT_STATUS_COMM,
                  "send/receive mismatch (comm debug mode): zt_recv at %s:%d on %s expects %lld %s (tag %d) from "
                  "%s, whose zt_send at %s:%d sends %lld %s; give both the same shape and dtype",
                  want.file, want.line, zt__rank_name(&names, c->rank, me, sizeof me), (long long)want.count,
                  zt_dtype_name((zt_dtype)want.dtype), oi->tag, zt__rank_name(&names, oi->peer, peer, sizeof peer),
                  got.file, got.line, (long long)got.count,
                  got.dtype >= 0 && got.dtype < ZT_DTYPE_COUNT ? zt_dtype_name((zt_dtype)got.dtype) : "?");
  return ZT_OK;
}

static zt_status send_start(zt_comm *c, const zt_tensor *t, int dst, int tag, zt_comm_work **out, const char *file,
                            int line) {
  const char *fn = "zt_send";
  host_bytes hb;
  ZT_TRY(check_comm(c, fn));
  ZT_TRY(check_tensor(t, fn, "t", false, ZT_REDUCE_SUM, false, &hb));
  stage_free(&hb);
  ZT_TRY(check_peer(c, fn, "dst", dst, tag));
  zt_comm_work *w = NULL;
  ZT_TRY(work_new(c, NULL, false, &w));
  w->op = enter(c, ZT__COLL_SEND, file, line);
  w->op.peer = dst;
  w->op.tag = tag;
  w->bytes_sent = zt_tensor_nbytes(t);
  zt_status s = ZT_OK;
  if (c->debug) {
    w->header = header_of(t, &w->op);
    s = c->be->send(c->ctx, &w->header, P2P_HEADER_I32, ZT_DTYPE_I32, dst, tag + ZT_COMM_MAX_TAG, &w->header_req);
  }
  if (!s) s = check_tensor(t, fn, "t", false, ZT_REDUCE_SUM, true, &w->in_stage);
  if (!s) s = c->be->send(c->ctx, w->in_stage.data, zt_tensor_numel(t), t->dtype, dst, tag, &w->req);
  if (s) {
    work_free(w);
    return zt__error_prefix(s, "%s", fn);
  }
  *out = w;
  return ZT_OK;
}

static zt_status recv_start(zt_comm *c, zt_tensor *t, int src, int tag, zt_comm_work **out, const char *file,
                            int line) {
  const char *fn = "zt_recv";
  host_bytes hb;
  ZT_TRY(check_comm(c, fn));
  ZT_TRY(check_tensor(t, fn, "t", false, ZT_REDUCE_SUM, false, &hb));
  stage_free(&hb);
  ZT_TRY(check_peer(c, fn, "src", src, tag));
  opinfo oi = enter(c, ZT__COLL_RECV, file, line);
  oi.peer = src;
  oi.tag = tag;
  if (c->debug) {
    zt_status s = check_header(c, t, &oi);
    if (s) return c->broken ? s : zt__error_prefix(s, "%s", fn);
  }
  zt_comm_work *w = NULL;
  ZT_TRY(work_new(c, t, false, &w));
  w->op = oi;
  w->n = 0; /* nothing to rescale: the result is the bytes received */
  zt_status s = check_tensor(t, fn, "t", false, ZT_REDUCE_SUM, false, &w->out_stage);
  if (!s) s = c->be->recv(c->ctx, w->out_stage.data, zt_tensor_numel(t), t->dtype, src, tag, &w->req);
  if (s) {
    work_free(w);
    return zt__error_prefix(s, "%s", fn);
  }
  *out = w;
  return ZT_OK;
}

zt_status zt_isend_at(zt_comm *c, const zt_tensor *t, int dst, int tag, zt_comm_work **w, const char *file, int line) {
  if (!w) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_isend: w is NULL");
  *w = NULL;
  return send_start(c, t, dst, tag, w, file, line);
}

zt_status zt_irecv_at(zt_comm *c, zt_tensor *t, int src, int tag, zt_comm_work **w, const char *file, int line) {
  if (!w) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_irecv: w is NULL");
  *w = NULL;
  return recv_start(c, t, src, tag, w, file, line);
}

zt_status zt_send_at(zt_comm *c, const zt_tensor *t, int dst, int tag, const char *file, int line) {
  zt_comm_work *w = NULL;
  ZT_TRY(send_start(c, t, dst, tag, &w, file, line));
  return zt_comm_wait(w);
}

zt_status zt_recv_at(zt_comm *c, zt_tensor *t, int src, int tag, const char *file, int line) {
  zt_comm_work *w = NULL;
  ZT_TRY(recv_start(c, t, src, tag, &w, file, line));
  return zt_comm_wait(w);
}

/* A collective all-gather of raw records (for split and agree.c): published, debug-checked
 * and timed like the public collectives. */
static zt_status gather_raw(zt_comm *c, const opinfo *oi, const void *in, void *out, size_t bytes) {
  ZT_ASSERT(bytes % 4 == 0);
  ZT_TRY(debug_check(c, oi, (int64_t)(bytes / 4), ZT_DTYPE_I32, -1, -1));
  void *req = NULL;
  zt_status s = c->be->all_gather(c->ctx, in, out, (int64_t)(bytes / 4), ZT_DTYPE_I32, &req);
  if (s == ZT_OK) s = wait_req(c, req, oi);
  if (s != ZT_OK) return s;
  account(c, (double)(c->size - 1) / c->size, bytes * (size_t)c->size);
  return ZT_OK;
}

zt_status zt__comm_gather_bytes(zt_comm *c, zt__coll_kind kind, const void *in, void *out, size_t bytes_per_rank,
                                const char *file, int line) {
  ZT_TRY(check_comm(c, zt__coll_kind_name(kind)));
  opinfo oi = enter(c, kind, file, line);
  return gather_raw(c, &oi, in, out, bytes_per_rank);
}

/* What each rank tells the others before a split: its color and key (for the record),
 * and the board slots free in its process, so a sub-group's ranks can agree on one. */
typedef struct split_record {
  int32_t color, key;
  uint64_t free_slots;
} split_record;

zt_status zt_comm_split_at(zt_comm *c, int color, int key, zt_comm **out, const char *file, int line) {
  ZT_TRY(check_comm(c, "zt_comm_split"));
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_comm_split: out is NULL");
  *out = NULL;
  if (color < 0) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_comm_split: color %d is negative; use a color >= 0", color);
  opinfo oi = enter(c, ZT__COLL_SPLIT, file, line);
  /* MPI_Comm_split cannot be timed, so first a timed exchange: once every rank is here,
   * the split itself does not wait for a missing one. */
  split_record me = {.color = color, .key = key, .free_slots = c->be->board_free_slots ? c->be->board_free_slots(c->ctx) : 0};
  split_record *all = calloc((size_t)c->size, sizeof *all);
  if (!all) return ZT_ERR(ZT_STATUS_OOM, "zt_comm_split: out of host memory");
  zt_status s = gather_raw(c, &oi, &me, all, sizeof me);
  if (s != ZT_OK) {
    if (!c->broken) free(all);
    return s;
  }
  uint64_t common = ~(uint64_t)0;
  for (int r = 0; r < c->size; r++)
    if (all[r].color == color) common &= all[r].free_slots;
  free(all);
  int slot = -1;
  for (int i = 0; i < ZT__BOARD_SLOTS && i < 64; i++)
    if (common >> i & 1) {
      slot = i;
      break;
    }
  void *ctx = NULL;
  int rank = 0, size = 1;
  s = c->be->split(c->ctx, color, key, slot, &ctx, &rank, &size);
  if (s != ZT_OK) return zt__error_prefix(s, "zt_comm_split");
  ZT_TRY(zt__comm_new(c->be, ctx, rank, size, out));
  (*out)->debug = c->debug;
  (*out)->timeout = c->timeout;
  return ZT_OK;
}
