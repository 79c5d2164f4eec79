/* The MPI backend: each group owns a communicator (a dup of MPI_COMM_WORLD, or a split)
 * with MPI_ERRORS_RETURN, so every failure comes back through ZT_MPI_TRY as a status
 * with file:line. Every operation is nonblocking underneath (comm.c polls MPI_Test
 * against its deadline, with a back-off). The process's arrival board (board.c) is one shared-memory
 * window per node, made with the first group. When zerotrain called MPI_Init, freeing the
 * last group finalizes MPI, unless a wait timed out (then nothing collective is called
 * again). In a build without MPI the same symbols exist and say how to get MPI.
 * Progress: OpenMPI moves a message only inside MPI calls (without CMA a large shared-memory
 * message goes fragment by fragment, each needing the sender), so ZT_COMM_PROGRESS=1 starts a
 * thread that calls into MPI every ZT_COMM_PROGRESS_US microseconds (default 200) while an
 * operation is in flight. MPI is initialised at MPI_THREAD_SERIALIZED and every call of this
 * file holds g_mu (the progress thread only tries it, so it never delays the caller); the
 * thread is not started when MPI was started by someone else below that level. Off by default:
 * on the 2-core machine it was measured on, its wake-ups cost the computing ranks as much as it
 * saves (README, pipeline section). */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "comm/comm_internal.h"
#include "zt_config.h"

#if ZT_HAVE_MPI
#include <mpi.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

static zt_status mpi_error(int rc, const char *call, const char *file, int line) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "MPI error code %d", rc);
  return zt__error(ZT_STATUS_COMM, file, line,
                   "MPI call %s failed: %s; check that every rank is alive and calls the same collectives "
                   "(set ZT_COMM_DEBUG=1 to check)",
                   call, msg);
}
#define ZT_MPI_TRY(call)                                                           \
  do {                                                                             \
    int zt__rc_ = (call);                                                          \
    if (zt__rc_ != MPI_SUCCESS) return mpi_error(zt__rc_, #call, __FILE__, __LINE__); \
  } while (0)

typedef struct mpi_ctx {
  MPI_Comm comm;
  int size;
  int slot;     /* this group's arrival-board slot, -1: none */
  int *node_of; /* group rank -> rank in the node communicator, -1: another node */
  int *world_of; /* group rank -> rank in MPI_COMM_WORLD, for messages (NULL: unknown) */
} mpi_ctx;

typedef struct mpi_req {
  MPI_Request r;
  int recv_count; /* a receive: the elements expected; -1 otherwise */
  MPI_Datatype dt;
  int peer;
} mpi_req;

static int g_live_groups;     /* MPI groups not yet freed */
static bool g_we_initialized; /* MPI_Init came from us: we finalize */
static bool g_poisoned;       /* a wait timed out: never call anything collective again */

/* The board: a window over the ranks of this node, ZT__BOARD_SLOTS entries per rank. */
static int g_board_state; /* 0 not tried, 1 made, -1 unavailable */
static MPI_Comm g_node = MPI_COMM_NULL;
static MPI_Win g_board_win = MPI_WIN_NULL;
static zt__board_entry **g_board_rows; /* per node rank */
static uint64_t g_board_used;          /* slots taken by this process's live groups */
/* The board across hosts (board_remote.c): every rank's server, by world rank. */
static zt__board_addr *g_addrs; /* NULL: not gathered */
static int g_world_size;
static uint64_t g_nonce;
static char (*g_host_label)[ZT__HOST_NAME + 16]; /* world rank -> its host's name in messages */
static bool g_multi_host;                        /* the world spans more than one node */

bool zt__comm_mpi_available(void) { return true; }

/* ---------------------------------------------------------------- the progress thread */
#define PROGRESS_NS 200000
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* held by every MPI call of this file */
static atomic_int g_pending;                            /* operations started and not yet complete */
static atomic_bool g_stop;
static bool g_progress_running;
static pthread_t g_progress;

/* Entry points hold g_mu for their MPI calls: LOCKED takes it, unlocked gives it back. */
#define LOCKED(expr) (pthread_mutex_lock(&g_mu), (expr))
static zt_status unlocked(zt_status s) {
  pthread_mutex_unlock(&g_mu);
  return s;
}

static long g_progress_ns = PROGRESS_NS;
static void *progress_main(void *arg) {
  (void)arg;
  struct timespec nap = {0, g_progress_ns};
  while (!atomic_load(&g_stop)) {
    if (atomic_load(&g_pending) > 0 && pthread_mutex_trylock(&g_mu) == 0) {
      int flag = 0;
      /* nothing is ever sent on MPI_COMM_SELF: the probe finds nothing and runs MPI's progress engine */
      MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF, &flag, MPI_STATUS_IGNORE);
      pthread_mutex_unlock(&g_mu);
    }
    nanosleep(&nap, NULL);
  }
  return NULL;
}

/* Start the thread if ZT_COMM_PROGRESS=1 and MPI allows it (g_mu held). Without it, messages
 * move only inside the caller's MPI calls: nothing fails. */
static void progress_start(void) {
  const char *e = getenv("ZT_COMM_PROGRESS");
  int level = MPI_THREAD_SINGLE;
  if (!e || strcmp(e, "1") || MPI_Query_thread(&level) != MPI_SUCCESS || level < MPI_THREAD_SERIALIZED) return;
  const char *us = getenv("ZT_COMM_PROGRESS_US");
  if (us && atol(us) > 0 && atol(us) < 1000000) g_progress_ns = atol(us) * 1000;
  atomic_store(&g_stop, false);
  g_progress_running = pthread_create(&g_progress, NULL, progress_main, NULL) == 0;
}

/* Stop and join it (g_mu not held: it may be waiting for it). */
static void progress_stop(void) {
  if (!g_progress_running) return;
  atomic_store(&g_stop, true);
  pthread_join(g_progress, NULL);
  g_progress_running = false;
}

static MPI_Datatype mpi_type(zt_dtype dt) {
  switch (dt) {
  case ZT_DTYPE_F32: return MPI_FLOAT;
  case ZT_DTYPE_F64: return MPI_DOUBLE;
  case ZT_DTYPE_I32: return MPI_INT32_T;
  case ZT_DTYPE_I64: return MPI_INT64_T;
  case ZT_DTYPE_BF16: /* data movement only: comm.c reduces bf16 and f16 in f32 */
  case ZT_DTYPE_F16: return MPI_UINT16_T;
  default: ZT_ASSERT(!"dtype checked by comm.c"); return MPI_BYTE;
  }
}

static zt_status check_count(int64_t count) {
  if (count > INT_MAX)
    return ZT_ERR(ZT_STATUS_UNSUPPORTED, "%lld elements exceed MPI's int count; split the tensor into chunks",
                  (long long)count);
  return ZT_OK;
}

/* Collective over MPI_COMM_WORLD, once per process. A failure leaves no board (timeouts
 * then say "unknown" for the other ranks) rather than failing the group. */
static void board_init(bool per_rank) {
  if (g_board_state) return;
  g_board_state = -1;
  MPI_Comm node;
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  if (per_rank ? MPI_Comm_split(MPI_COMM_WORLD, me, 0, &node) != MPI_SUCCESS
               : MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS)
    return;
  MPI_Comm_set_errhandler(node, MPI_ERRORS_RETURN);
  int n = 0;
  MPI_Comm_size(node, &n);
  zt__board_entry *mine = NULL;
  MPI_Win win;
  if (MPI_Win_allocate_shared((MPI_Aint)(sizeof *mine * ZT__BOARD_SLOTS), (int)sizeof *mine, MPI_INFO_NULL, node,
                              &mine, &win) != MPI_SUCCESS) {
    MPI_Comm_free(&node);
    return;
  }
  MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
  zt__board_entry **rows = calloc((size_t)n, sizeof *rows);
  bool ok = rows != NULL;
  for (int q = 0; ok && q < n; q++) {
    MPI_Aint bytes = 0;
    int disp = 0;
    ok = MPI_Win_shared_query(win, q, &bytes, &disp, &rows[q]) == MPI_SUCCESS &&
         bytes >= (MPI_Aint)(sizeof *mine * ZT__BOARD_SLOTS);
  }
  for (int i = 0; i < ZT__BOARD_SLOTS; i++) zt__board_reset(&mine[i]);
  /* every row is zeroed before anyone can read it */
  if (MPI_Barrier(node) != MPI_SUCCESS) ok = false;
  if (!ok) {
    free(rows);
    MPI_Win_free(&win);
    MPI_Comm_free(&node);
    return;
  }
  g_node = node;
  g_board_win = win;
  g_board_rows = rows;
  g_board_state = 1;
}

/* Every rank's host name in messages: MPI's processor name, or "node K" (K: the node's place
 * among the world's nodes) where two nodes share a name (network namespaces of one machine). */
static void host_labels(void) {
  g_host_label = calloc((size_t)g_world_size, sizeof *g_host_label);
  if (!g_host_label) return;
  bool distinct = true;
  int nodes = 0;
  for (int w = 0; w < g_world_size; w++) {
    nodes += g_addrs[w].node == w;
    for (int v = 0; v < w && distinct; v++)
      distinct = g_addrs[v].node == g_addrs[w].node || strcmp(g_addrs[v].host, g_addrs[w].host) != 0;
  }
  g_multi_host = nodes > 1;
  for (int w = 0; w < g_world_size; w++) {
    int k = 0;
    for (int v = 0; v < g_addrs[w].node; v++) k += g_addrs[v].node == v;
    if (distinct)
      snprintf(g_host_label[w], sizeof g_host_label[w], "%s", g_addrs[w].host);
    else
      snprintf(g_host_label[w], sizeof g_host_label[w], "node %d", k);
  }
}

static int translate(MPI_Comm comm, int size, MPI_Comm to, int **out);
static const char *mpi_host_of(int world_rank);

/* The board servers: every rank serves its node's entries and learns every other rank's
 * server (world collectives, called by every rank whatever board_init gave it, so that the
 * calls match). A failure leaves this rank without remote boards (messages say "unknown"). */
static void board_remote_init(void) {
  static bool done;
  if (done) return;
  done = true;
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world_size);
  uint64_t nonce = (uint64_t)getpid() * 0x9e3779b97f4a7c15ULL ^ (uint64_t)(zt_clock_now() * 1e9) ^ (uint64_t)(uintptr_t)&me;
  if (MPI_Bcast(&nonce, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD) != MPI_SUCCESS) return;
  zt__board_addr mine;
  memset(&mine, 0, sizeof mine);
  mine.world = me, mine.node = me;
  int len = 0;
  char name[MPI_MAX_PROCESSOR_NAME];
  if (MPI_Get_processor_name(name, &len) == MPI_SUCCESS)
    snprintf(mine.host, sizeof mine.host, "%.*s", (int)sizeof mine.host - 1, name);
  int *world = NULL, n = 0;
  if (g_board_state == 1 && MPI_Comm_size(g_node, &n) == MPI_SUCCESS && translate(g_node, n, MPI_COMM_WORLD, &world) == MPI_SUCCESS) {
    mine.node = world[0]; /* split_type keeps world order: node rank 0 is its lowest world rank */
    zt_status st = zt__board_serve(nonce, mine.node, n, g_board_rows, world, &mine);
    if (st) mine.port = 0; /* others then report this node's ranks as unknown, saying why */
  }
  free(world);
  zt__board_addr *all = calloc((size_t)g_world_size, sizeof *all);
  char *buf = malloc(sizeof mine * (size_t)g_world_size); /* every rank calls the gather, even without memory */
  int rc = MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, buf ? buf : (char *)&mine, buf ? (int)sizeof mine : 0,
                         MPI_BYTE, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS || !all || !buf) {
    free(all);
    free(buf);
    return;
  }
  memcpy(all, buf, sizeof mine * (size_t)g_world_size);
  free(buf);
  g_addrs = all;
  g_nonce = nonce;
  host_labels();
}

static void board_free(void) {
  zt__board_serve_stop(); /* before the window it reads goes */
  free(g_addrs);
  free(g_host_label);
  g_addrs = NULL, g_host_label = NULL, g_multi_host = false;
  if (g_board_state != 1) return;
  MPI_Win_free(&g_board_win);
  MPI_Comm_free(&g_node);
  free(g_board_rows);
  g_board_rows = NULL;
  g_board_state = 0;
}

/* Each of comm's `size` ranks as a rank of `to` (-1: not in it), in a new array *out; an MPI
 * error code (*out NULL) when MPI cannot say or memory runs out. */
static int translate(MPI_Comm comm, int size, MPI_Comm to, int **out) {
  int *in = malloc(sizeof *in * (size_t)size), *of = malloc(sizeof *of * (size_t)size);
  MPI_Group g = MPI_GROUP_NULL, tg = MPI_GROUP_NULL;
  int rc = in && of ? MPI_Comm_group(comm, &g) : MPI_ERR_NO_MEM;
  if (rc == MPI_SUCCESS) rc = MPI_Comm_group(to, &tg);
  for (int r = 0; in && r < size; r++) in[r] = r;
  if (rc == MPI_SUCCESS) rc = MPI_Group_translate_ranks(g, size, in, tg, of);
  if (g != MPI_GROUP_NULL) MPI_Group_free(&g);
  if (tg != MPI_GROUP_NULL) MPI_Group_free(&tg);
  free(in);
  for (int r = 0; rc == MPI_SUCCESS && r < size; r++)
    if (of[r] == MPI_UNDEFINED) of[r] = -1;
  if (rc != MPI_SUCCESS) free(of), of = NULL;
  *out = of;
  return rc;
}

/* Group rank -> node rank, for reading the other ranks' entries. */
static zt_status map_to_node(MPI_Comm comm, int size, int **out) {
  *out = NULL;
  if (g_board_state != 1) return ZT_OK;
  int rc = translate(comm, size, g_node, out);
  if (rc == MPI_ERR_NO_MEM) return ZT_ERR(ZT_STATUS_OOM, "out of host memory for an MPI group");
  return rc == MPI_SUCCESS ? ZT_OK : mpi_error(rc, "MPI_Group_translate_ranks", __FILE__, __LINE__);
}

static zt_status new_ctx(MPI_Comm comm, int slot, void **out, int *rank, int *size) {
  zt_status s = ZT_OK;
  int rc = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(comm, rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(comm, size);
  if (rc != MPI_SUCCESS) s = mpi_error(rc, "MPI_Comm_rank/size", __FILE__, __LINE__);
  mpi_ctx *x = s == ZT_OK ? calloc(1, sizeof *x) : NULL;
  if (s == ZT_OK && !x) s = ZT_ERR(ZT_STATUS_OOM, "out of host memory for an MPI group");
  if (s == ZT_OK) s = map_to_node(comm, *size, &x->node_of);
  if (s != ZT_OK) {
    free(x);
    MPI_Comm_free(&comm);
    return s;
  }
  x->comm = comm;
  x->size = *size;
  /* group rank -> world rank, for messages (left NULL when MPI cannot say: they use group ranks) */
  translate(comm, *size, MPI_COMM_WORLD, &x->world_of);
  x->slot = x->node_of && slot >= 0 && slot < ZT__BOARD_SLOTS ? slot : -1;
  if (x->slot >= 0) g_board_used |= (uint64_t)1 << x->slot;
  g_live_groups++;
  *out = x;
  return ZT_OK;
}

static zt_status mpi_world_(int *argc, char ***argv, void **ctx, int *rank, int *size) {
  int inited = 0, finalized = 0;
  ZT_MPI_TRY(MPI_Finalized(&finalized));
  if (finalized)
    return ZT_ERR(ZT_STATUS_STATE,
                  "MPI was already finalized in this process and cannot start again; keep one world comm alive "
                  "for the whole run");
  ZT_MPI_TRY(MPI_Initialized(&inited));
  if (!inited) {
    int provided = 0;
    ZT_MPI_TRY(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided));
    g_we_initialized = true;
  }
  if (!g_progress_running) progress_start();
  /* ZT_COMM_BOARD_SCOPE=rank: a board per rank, as if each rank were on its own host, so that
   * the other ranks' entries come from their board servers over TCP (the cross-host path,
   * testable on one machine); "node" (the default): one board per node */
  const char *scope = getenv("ZT_COMM_BOARD_SCOPE");
  if (scope && *scope && strcmp(scope, "node") && strcmp(scope, "rank"))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "ZT_COMM_BOARD_SCOPE='%.32s' is neither 'node' nor 'rank'; fix or unset it",
                  scope);
  bool per_rank = scope && !strcmp(scope, "rank");
  MPI_Comm dup;
  ZT_MPI_TRY(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  ZT_MPI_TRY(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
  board_init(per_rank);
  board_remote_init();
  /* a board slot free on every rank (each process may hold different groups) */
  uint64_t used = 0;
  int rc = MPI_Allreduce(&g_board_used, &used, 1, MPI_UINT64_T, MPI_BOR, dup);
  if (rc != MPI_SUCCESS) {
    MPI_Comm_free(&dup);
    return mpi_error(rc, "MPI_Allreduce", __FILE__, __LINE__);
  }
  int slot = -1;
  for (int i = 0; i < ZT__BOARD_SLOTS && slot < 0; i++)
    if (!(used >> i & 1)) slot = i;
  return new_ctx(dup, slot, ctx, rank, size);
}

zt_status zt__comm_mpi_world(int *argc, char ***argv, void **ctx, int *rank, int *size) {
  pthread_mutex_lock(&g_mu);
  return unlocked(mpi_world_(argc, argv, ctx, rank, size));
}

static zt_status req_new(mpi_req **out) {
  mpi_req *q = malloc(sizeof *q);
  if (!q) return ZT_ERR(ZT_STATUS_OOM, "out of host memory for an MPI request");
  q->r = MPI_REQUEST_NULL;
  q->recv_count = -1;
  q->dt = MPI_BYTE;
  q->peer = -1;
  *out = q;
  return ZT_OK;
}

/* rc: what starting the operation returned; on success q goes to *req, else it is freed. */
static zt_status req_started(int rc, const char *call, mpi_req *q, void **req, int line) {
  if (rc != MPI_SUCCESS) {
    free(q);
    return mpi_error(rc, call, __FILE__, line);
  }
  *req = q;
  atomic_fetch_add(&g_pending, 1);
  return ZT_OK;
}

static zt_status mpi_all_reduce_(void *ctx, void *buf, int64_t count, zt_dtype dt, void **req) {
  mpi_ctx *x = ctx;
  mpi_req *q = NULL;
  ZT_TRY(check_count(count));
  ZT_TRY(req_new(&q));
  int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(dt), MPI_SUM, x->comm, &q->r);
  return req_started(rc, "MPI_Iallreduce", q, req, __LINE__);
}

static zt_status mpi_all_gather_(void *ctx, const void *in, void *out, int64_t count, zt_dtype dt, void **req) {
  mpi_ctx *x = ctx;
  mpi_req *q = NULL;
  ZT_TRY(check_count(count));
  ZT_TRY(req_new(&q));
  MPI_Datatype t = mpi_type(dt);
  int rc = MPI_Iallgather(in, (int)count, t, out, (int)count, t, x->comm, &q->r);
  return req_started(rc, "MPI_Iallgather", q, req, __LINE__);
}

static zt_status mpi_reduce_scatter_(void *ctx, const void *in, void *out, int64_t count, zt_dtype dt, void **req) {
  mpi_ctx *x = ctx;
  mpi_req *q = NULL;
  ZT_TRY(check_count(count));
  ZT_TRY(req_new(&q));
  int rc = MPI_Ireduce_scatter_block(in, out, (int)count, mpi_type(dt), MPI_SUM, x->comm, &q->r);
  return req_started(rc, "MPI_Ireduce_scatter_block", q, req, __LINE__);
}

static zt_status mpi_broadcast_(void *ctx, void *buf, int64_t count, zt_dtype dt, int root, void **req) {
  mpi_ctx *x = ctx;
  mpi_req *q = NULL;
  ZT_TRY(check_count(count));
  ZT_TRY(req_new(&q));
  int rc = MPI_Ibcast(buf, (int)count, mpi_type(dt), root, x->comm, &q->r);
  return req_started(rc, "MPI_Ibcast", q, req, __LINE__);
}

static zt_status mpi_send_(void *ctx, const void *buf, int64_t count, zt_dtype dt, int dst, int tag, void **req) {
  mpi_ctx *x = ctx;
  mpi_req *q = NULL;
  ZT_TRY(check_count(count));
  ZT_TRY(req_new(&q));
  int rc = MPI_Isend(buf, (int)count, mpi_type(dt), dst, tag, x->comm, &q->r);
  return req_started(rc, "MPI_Isend", q, req, __LINE__);
}

static zt_status mpi_recv_(void *ctx, void *buf, int64_t count, zt_dtype dt, int src, int tag, void **req) {
  mpi_ctx *x = ctx;
  mpi_req *q = NULL;
  ZT_TRY(check_count(count));
  ZT_TRY(req_new(&q));
  q->recv_count = (int)count;
  q->dt = mpi_type(dt);
  q->peer = src;
  int rc = MPI_Irecv(buf, (int)count, q->dt, src, tag, x->comm, &q->r);
  return req_started(rc, "MPI_Irecv", q, req, __LINE__);
}

static zt_status mpi_barrier_(void *ctx, void **req) {
  mpi_ctx *x = ctx;
  mpi_req *q = NULL;
  ZT_TRY(req_new(&q));
  int rc = MPI_Ibarrier(x->comm, &q->r);
  return req_started(rc, "MPI_Ibarrier", q, req, __LINE__);
}

static zt_status mpi_test_(void *ctx, void *req, bool *done) {
  mpi_ctx *x = ctx;
  mpi_req *q = req;
  MPI_Status st;
  int flag = 0;
  int rc = MPI_Test(&q->r, &flag, &st);
  if (rc == MPI_SUCCESS && !flag) return ZT_OK;
  *done = true;
  atomic_fetch_sub(&g_pending, 1);
  int want = q->recv_count, peer = q->peer;
  MPI_Datatype dt = q->dt;
  free(q);
  if (rc != MPI_SUCCESS) return mpi_error(rc, "MPI_Test", __FILE__, __LINE__);
  if (want >= 0) {
    int got = 0;
    ZT_MPI_TRY(MPI_Get_count(&st, dt, &got));
    if (got != want) {
      zt__rank_names names = zt__rank_names_of(x->world_of, x->size, mpi_host_of);
      char who[ZT__RANK_NAME];
      return ZT_ERR(ZT_STATUS_COMM, "received %d elements from %s but the tensor holds %d; send the same size", got,
                    zt__rank_name(&names, peer, who, sizeof who), want);
    }
  }
  return ZT_OK;
}

static void mpi_abandon(void *ctx, void *req) {
  (void)ctx, (void)req; /* req stays allocated: MPI still owns the request */
  g_poisoned = true;
}

static zt_status mpi_split_(void *ctx, int color, int key, int board_slot, void **out_ctx, int *rank, int *size) {
  mpi_ctx *x = ctx;
  MPI_Comm sub;
  ZT_MPI_TRY(MPI_Comm_split(x->comm, color, key, &sub));
  return new_ctx(sub, board_slot, out_ctx, rank, size);
}

static void mpi_free_(void *ctx) {
  mpi_ctx *x = ctx;
  if (!x) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  /* after a timeout every MPI call that synchronises could wait for the missing rank */
  if (!finalized && !g_poisoned) MPI_Comm_free(&x->comm);
  if (x->slot >= 0) g_board_used &= ~((uint64_t)1 << x->slot);
  free(x->node_of);
  free(x->world_of);
  free(x);
  if (--g_live_groups == 0 && g_we_initialized && !finalized && !g_poisoned) {
    board_free();
    pthread_mutex_unlock(&g_mu); /* the thread may be waiting for it */
    progress_stop();
    pthread_mutex_lock(&g_mu);
    MPI_Finalize();
    g_we_initialized = false;
  }
}

static void mpi_abort(void *ctx, int code) {
  (void)ctx;
  MPI_Abort(MPI_COMM_WORLD, code);
}

static zt__board_entry *mpi_board_entry(void *ctx, int rank) {
  mpi_ctx *x = ctx;
  if (!x || x->slot < 0 || !x->node_of || rank < 0 || rank >= x->size || x->node_of[rank] < 0) return NULL;
  return &g_board_rows[x->node_of[rank]][x->slot];
}

static const int *mpi_world_ranks(void *ctx) { return ((mpi_ctx *)ctx)->world_of; }

static const char *mpi_host_of(int world_rank) {
  if (!g_multi_host || !g_host_label || world_rank < 0 || world_rank >= g_world_size) return NULL;
  return g_host_label[world_rank];
}

/* The entries of the group's ranks on other nodes, one node at a time, from its servers. */
static void mpi_board_remote(void *ctx, zt__board_view *views, double deadline) {
  mpi_ctx *x = ctx;
  if (!x || x->slot < 0 || !x->node_of || !x->world_of || !g_addrs) return;
  int *world = malloc(sizeof *world * (size_t)x->size), *at = malloc(sizeof *at * (size_t)x->size);
  zt__board_view *got = calloc((size_t)x->size, sizeof *got);
  bool *asked = calloc((size_t)x->size, sizeof *asked);
  for (int r = 0; world && at && got && asked && r < x->size; r++) {
    int w = x->world_of[r];
    if (asked[r] || views[r].known || x->node_of[r] >= 0 || w < 0 || w >= g_world_size) continue;
    int node = g_addrs[w].node, n = 0;
    for (int q = r; q < x->size; q++) { /* the group's ranks on that node */
      int wq = x->world_of[q];
      if (!asked[q] && !views[q].known && x->node_of[q] < 0 && wq >= 0 && wq < g_world_size &&
          g_addrs[wq].node == node)
        world[n] = wq, at[n++] = q, asked[q] = true;
    }
    char why[ZT__BOARD_WHY - ZT__HOST_NAME - 32];
    bool ok = zt__board_ask(g_addrs, g_world_size, node, g_nonce, x->slot, n, world, got, deadline, why, sizeof why);
    for (int k = 0; k < n; k++) {
      zt__board_view *v = &views[at[k]];
      if (ok && got[k].remote) {
        *v = got[k];
      } else {
        snprintf(v->why, sizeof v->why, "its host %s: %s", g_host_label ? g_host_label[w] : "?",
                 ok ? "its board server does not list it" : why);
      }
    }
  }
  free(world), free(at), free(got), free(asked);
}

static uint64_t mpi_board_free_slots(void *ctx) {
  (void)ctx;
  return g_board_state == 1 ? ~g_board_used : 0;
}

/* The backend's entry points: each holds g_mu for its MPI calls (MPI_THREAD_SERIALIZED). */
static zt_status mpi_all_reduce(void *ctx, void *buf, int64_t count, zt_dtype dt, void **req) {
  return unlocked(LOCKED(mpi_all_reduce_(ctx, buf, count, dt, req)));
}
static zt_status mpi_all_gather(void *ctx, const void *in, void *out, int64_t count, zt_dtype dt, void **req) {
  return unlocked(LOCKED(mpi_all_gather_(ctx, in, out, count, dt, req)));
}
static zt_status mpi_reduce_scatter(void *ctx, const void *in, void *out, int64_t count, zt_dtype dt, void **req) {
  return unlocked(LOCKED(mpi_reduce_scatter_(ctx, in, out, count, dt, req)));
}
static zt_status mpi_broadcast(void *ctx, void *buf, int64_t count, zt_dtype dt, int root, void **req) {
  return unlocked(LOCKED(mpi_broadcast_(ctx, buf, count, dt, root, req)));
}
static zt_status mpi_send(void *ctx, const void *buf, int64_t count, zt_dtype dt, int dst, int tag, void **req) {
  return unlocked(LOCKED(mpi_send_(ctx, buf, count, dt, dst, tag, req)));
}
static zt_status mpi_recv(void *ctx, void *buf, int64_t count, zt_dtype dt, int src, int tag, void **req) {
  return unlocked(LOCKED(mpi_recv_(ctx, buf, count, dt, src, tag, req)));
}
static zt_status mpi_barrier(void *ctx, void **req) { return unlocked(LOCKED(mpi_barrier_(ctx, req))); }
static zt_status mpi_test(void *ctx, void *req, bool *done) { return unlocked(LOCKED(mpi_test_(ctx, req, done))); }
static zt_status mpi_split(void *ctx, int color, int key, int board_slot, void **out_ctx, int *rank, int *size) {
  return unlocked(LOCKED(mpi_split_(ctx, color, key, board_slot, out_ctx, rank, size)));
}
static void mpi_free(void *ctx) {
  pthread_mutex_lock(&g_mu);
  mpi_free_(ctx);
  pthread_mutex_unlock(&g_mu);
}

const zt__comm_backend zt__comm_mpi_backend = {
    .name = "mpi",
    .all_reduce = mpi_all_reduce,
    .all_gather = mpi_all_gather,
    .reduce_scatter = mpi_reduce_scatter,
    .broadcast = mpi_broadcast,
    .send = mpi_send,
    .recv = mpi_recv,
    .barrier = mpi_barrier,
    .test = mpi_test,
    .abandon = mpi_abandon,
    .split = mpi_split,
    .free = mpi_free,
    .abort = mpi_abort,
    .board_entry = mpi_board_entry,
    .board_free_slots = mpi_board_free_slots,
    .world_ranks = mpi_world_ranks,
    .host_of = mpi_host_of,
    .board_remote = mpi_board_remote,
};

#else /* !ZT_HAVE_MPI */

bool zt__comm_mpi_available(void) { return false; }

zt_status zt__comm_mpi_world(int *argc, char ***argv, void **ctx, int *rank, int *size) {
  (void)argc, (void)argv, (void)ctx, (void)rank, (void)size;
  return ZT_ERR(ZT_STATUS_UNSUPPORTED,
                "this build of zerotrain has no MPI backend; install MPI (apt-get install libopenmpi-dev "
                "openmpi-bin, or scripts/setup.sh) and rebuild with -DZT_WITH_MPI=AUTO or ON");
}

/* Never reached: no MPI group can be made. */
const zt__comm_backend zt__comm_mpi_backend = {.name = "mpi"};

#endif
