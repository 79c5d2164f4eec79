/* The local backend: a group of exactly one rank. Sums over one rank are the input, so
 * all_reduce and broadcast are no-ops and the gathers are copies; there is no peer for
 * send/recv (comm.c refuses them before they get here). Everything completes at once, so
 * nothing waits (no timeouts, no board); abort has no other rank to end. No ctx. */
#include <string.h>

#include "core/status_internal.h"
#include "comm/comm_internal.h"

static zt_status local_all_reduce(void *ctx, void *buf, int64_t count, zt_dtype dt, void **req) {
  (void)ctx, (void)buf, (void)count, (void)dt;
  *req = NULL;
  return ZT_OK;
}

static zt_status local_copy(void *ctx, const void *in, void *out, int64_t count, zt_dtype dt, void **req) {
  (void)ctx;
  *req = NULL;
  if (in != out) memmove(out, in, (size_t)count * zt_dtype_size(dt));
  return ZT_OK;
}

static zt_status local_broadcast(void *ctx, void *buf, int64_t count, zt_dtype dt, int root, void **req) {
  (void)ctx, (void)buf, (void)count, (void)dt, (void)root;
  *req = NULL;
  return ZT_OK;
}

static zt_status local_p2p(void *ctx, void *buf, int64_t count, zt_dtype dt, int peer, int tag, void **req) {
  (void)ctx, (void)buf, (void)count, (void)dt, (void)tag;
  *req = NULL;
  return ZT_ERR(ZT_STATUS_INVALID_ARG, "rank %d does not exist in a one-rank (local) group; launch with mpirun", peer);
}

static zt_status local_send(void *ctx, const void *buf, int64_t count, zt_dtype dt, int dst, int tag, void **req) {
  return local_p2p(ctx, (void *)buf, count, dt, dst, tag, req);
}

static zt_status local_barrier(void *ctx, void **req) {
  (void)ctx;
  *req = NULL;
  return ZT_OK;
}

static zt_status local_split(void *ctx, int color, int key, int board_slot, void **out_ctx, int *rank, int *size) {
  (void)ctx, (void)color, (void)key, (void)board_slot;
  *out_ctx = NULL;
  *rank = 0;
  *size = 1;
  return ZT_OK;
}

static void local_free(void *ctx) { (void)ctx; }

const zt__comm_backend zt__comm_local_backend = {
    .name = "local",
    .all_reduce = local_all_reduce,
    .all_gather = local_copy,
    .reduce_scatter = local_copy,
    .broadcast = local_broadcast,
    .send = local_send,
    .recv = local_p2p,
    .barrier = local_barrier,
    .test = NULL,
    .abandon = NULL,
    .split = local_split,
    .free = local_free,
    .abort = NULL,
    .board_entry = NULL,
    .board_free_slots = NULL,
    .world_ranks = NULL,
};
