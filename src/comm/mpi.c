/* The MPI backend: each group owns a communicator (a dup of MPI_COMM_WORLD, or a split)
 * with MPI_ERRORS_RETURN, so every failure comes back through ZT_MPI_TRY as a status
 * with file:line. When zerotrain called MPI_Init, freeing the last group finalizes MPI.
 * In a build without MPI the same symbols exist and say how to get MPI. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm/comm_internal.h"
#include "zt_config.h"

#if ZT_HAVE_MPI
#include <mpi.h>

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
} mpi_ctx;

static int g_live_groups;   /* MPI groups not yet freed */
static bool g_we_initialized; /* MPI_Init came from us: we finalize */

bool zt__comm_mpi_available(void) { return true; }

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

static zt_status new_ctx(MPI_Comm comm, void **out, int *rank, int *size) {
  ZT_MPI_TRY(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  ZT_MPI_TRY(MPI_Comm_rank(comm, rank));
  ZT_MPI_TRY(MPI_Comm_size(comm, size));
  mpi_ctx *x = malloc(sizeof *x);
  if (!x) {
    MPI_Comm_free(&comm);
    return ZT_ERR(ZT_STATUS_OOM, "out of host memory for an MPI group");
  }
  x->comm = comm;
  g_live_groups++;
  *out = x;
  return ZT_OK;
}

zt_status zt__comm_mpi_world(int *argc, char ***argv, void **ctx, int *rank, int *size) {
  int inited = 0, finalized = 0;
  ZT_MPI_TRY(MPI_Finalized(&finalized));
  if (finalized)
    return ZT_ERR(ZT_STATUS_STATE,
                  "MPI was already finalized in this process and cannot start again; keep one world comm alive "
                  "for the whole run");
  ZT_MPI_TRY(MPI_Initialized(&inited));
  if (!inited) {
    ZT_MPI_TRY(MPI_Init(argc, argv));
    g_we_initialized = true;
  }
  MPI_Comm dup;
  ZT_MPI_TRY(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  ZT_MPI_TRY(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
  return new_ctx(dup, ctx, rank, size);
}

static zt_status mpi_all_reduce(void *ctx, void *buf, int64_t count, zt_dtype dt, void **req) {
  mpi_ctx *x = ctx;
  ZT_TRY(check_count(count));
  MPI_Request *r = malloc(sizeof *r);
  if (!r) return ZT_ERR(ZT_STATUS_OOM, "out of host memory for an MPI request");
  int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(dt), MPI_SUM, x->comm, r);
  if (rc != MPI_SUCCESS) free(r);
  ZT_MPI_TRY(rc);
  *req = r;
  return ZT_OK;
}

static zt_status mpi_all_gather(void *ctx, const void *in, void *out, int64_t count, zt_dtype dt, void **req) {
  mpi_ctx *x = ctx;
  ZT_TRY(check_count(count));
  MPI_Request *r = malloc(sizeof *r);
  if (!r) return ZT_ERR(ZT_STATUS_OOM, "out of host memory for an MPI request");
  MPI_Datatype t = mpi_type(dt);
  int rc = MPI_Iallgather(in, (int)count, t, out, (int)count, t, x->comm, r);
  if (rc != MPI_SUCCESS) free(r);
  ZT_MPI_TRY(rc);
  *req = r;
  return ZT_OK;
}

static zt_status mpi_reduce_scatter(void *ctx, const void *in, void *out, int64_t count, zt_dtype dt, void **req) {
  mpi_ctx *x = ctx;
  ZT_TRY(check_count(count));
  MPI_Request *r = malloc(sizeof *r);
  if (!r) return ZT_ERR(ZT_STATUS_OOM, "out of host memory for an MPI request");
  int rc = MPI_Ireduce_scatter_block(in, out, (int)count, mpi_type(dt), MPI_SUM, x->comm, r);
  if (rc != MPI_SUCCESS) free(r);
  ZT_MPI_TRY(rc);
  *req = r;
  return ZT_OK;
}

static zt_status mpi_wait(void *ctx, void *req) {
  (void)ctx;
  MPI_Request *r = req;
  int rc = MPI_Wait(r, MPI_STATUS_IGNORE);
  free(r);
  ZT_MPI_TRY(rc);
  return ZT_OK;
}

static zt_status mpi_broadcast(void *ctx, void *buf, int64_t count, zt_dtype dt, int root) {
  mpi_ctx *x = ctx;
  ZT_TRY(check_count(count));
  ZT_MPI_TRY(MPI_Bcast(buf, (int)count, mpi_type(dt), root, x->comm));
  return ZT_OK;
}

static zt_status mpi_send(void *ctx, const void *buf, int64_t count, zt_dtype dt, int dst, int tag) {
  mpi_ctx *x = ctx;
  ZT_TRY(check_count(count));
  ZT_MPI_TRY(MPI_Send(buf, (int)count, mpi_type(dt), dst, tag, x->comm));
  return ZT_OK;
}

static zt_status mpi_recv(void *ctx, void *buf, int64_t count, zt_dtype dt, int src, int tag) {
  mpi_ctx *x = ctx;
  ZT_TRY(check_count(count));
  MPI_Status st;
  ZT_MPI_TRY(MPI_Recv(buf, (int)count, mpi_type(dt), src, tag, x->comm, &st));
  int got = 0;
  ZT_MPI_TRY(MPI_Get_count(&st, mpi_type(dt), &got));
  if (got != (int)count)
    return ZT_ERR(ZT_STATUS_COMM, "received %d elements from rank %d but the tensor holds %lld; send the same size",
                  got, src, (long long)count);
  return ZT_OK;
}

static zt_status mpi_barrier(void *ctx) {
  mpi_ctx *x = ctx;
  ZT_MPI_TRY(MPI_Barrier(x->comm));
  return ZT_OK;
}

static zt_status mpi_split(void *ctx, int color, int key, void **out_ctx, int *rank, int *size) {
  mpi_ctx *x = ctx;
  MPI_Comm sub;
  ZT_MPI_TRY(MPI_Comm_split(x->comm, color, key, &sub));
  return new_ctx(sub, out_ctx, rank, size);
}

static void mpi_free(void *ctx) {
  mpi_ctx *x = ctx;
  if (!x) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&x->comm);
  free(x);
  if (--g_live_groups == 0 && g_we_initialized && !finalized) {
    MPI_Finalize();
    g_we_initialized = false;
  }
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
    .wait = mpi_wait,
    .split = mpi_split,
    .free = mpi_free,
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
