/* The stuck test group: a comm backend whose requests never complete (every test says "not
 * yet"), with a board entry per rank in the process's memory (so timeouts describe the peers)
 * and an optional world map. The group's ctx, freed by the backend's free, holds all of it. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "core/status_internal.h"
#include "stuck_comm.h"

typedef struct stuck_ctx {
  int size;
  zt__board_entry *board; /* per rank */
  int *world;             /* per rank, or NULL */
  int req;                /* the one request every operation leaves pending */
} stuck_ctx;

static zt_status pending(void *ctx, void **req) {
  *req = &((stuck_ctx *)ctx)->req;
  return ZT_OK;
}
static zt_status stuck_reduce(void *ctx, void *buf, int64_t count, zt_dtype dt, void **req) {
  (void)buf, (void)count, (void)dt;
  return pending(ctx, req);
}
static zt_status stuck_gather(void *ctx, const void *in, void *out, int64_t count, zt_dtype dt, void **req) {
  (void)in, (void)out, (void)count, (void)dt;
  return pending(ctx, req);
}
static zt_status stuck_bcast(void *ctx, void *buf, int64_t count, zt_dtype dt, int root, void **req) {
  (void)buf, (void)count, (void)dt, (void)root;
  return pending(ctx, req);
}
static zt_status stuck_send(void *ctx, const void *buf, int64_t count, zt_dtype dt, int dst, int tag, void **req) {
  (void)buf, (void)count, (void)dt, (void)dst, (void)tag;
  return pending(ctx, req);
}
static zt_status stuck_recv(void *ctx, void *buf, int64_t count, zt_dtype dt, int src, int tag, void **req) {
  (void)buf, (void)count, (void)dt, (void)src, (void)tag;
  return pending(ctx, req);
}
static zt_status stuck_test(void *ctx, void *req, bool *done) {
  (void)ctx, (void)req;
  *done = false;
  return ZT_OK;
}
static zt_status stuck_split(void *ctx, int color, int key, int slot, void **out, int *rank, int *size) {
  (void)ctx, (void)color, (void)key, (void)slot, (void)out, (void)rank, (void)size;
  return ZT_ERR(ZT_STATUS_UNSUPPORTED, "the stuck test group cannot be split");
}
static void stuck_free(void *ctx) {
  stuck_ctx *x = ctx;
  free(x->board);
  free(x->world);
  free(x);
}
static zt__board_entry *stuck_entry(void *ctx, int rank) {
  stuck_ctx *x = ctx;
  return rank >= 0 && rank < x->size ? &x->board[rank] : NULL;
}
static const int *stuck_world(void *ctx) { return ((stuck_ctx *)ctx)->world; }

static const zt__comm_backend k_stuck = {
    .name = "stuck",         .all_reduce = stuck_reduce, .all_gather = stuck_gather, .reduce_scatter = stuck_gather,
    .broadcast = stuck_bcast, .send = stuck_send,        .recv = stuck_recv,        .barrier = pending,
    .test = stuck_test,       .split = stuck_split,      .free = stuck_free,        .board_entry = stuck_entry,
    .world_ranks = stuck_world};

zt_comm *zt_test_stuck_comm(int rank, int size, const int *world, double timeout_s) {
  stuck_ctx *x = calloc(1, sizeof *x);
  if (!x) return NULL;
  x->size = size;
  x->board = calloc((size_t)size, sizeof *x->board);
  x->world = world ? malloc(sizeof *x->world * (size_t)size) : NULL;
  if (!x->board || (world && !x->world)) {
    stuck_free(x);
    return NULL;
  }
  if (world) memcpy(x->world, world, sizeof *x->world * (size_t)size);
  for (int r = 0; r < size; r++) zt__board_reset(&x->board[r]);
  zt_comm *c = NULL;
  if (zt__comm_new(&k_stuck, x, rank, size, &c)) return NULL; /* it freed x */
  zt_comm_set_timeout(c, timeout_s);
  return c;
}
