/* Internal comm interface: the backend table (struct of function pointers + ctx) that
 * comm.c dispatches to, and debug mode's record comparison (exposed for tests).
 * Backends see only validated, contiguous buffers of f32/f64/i32/i64 (reductions) or
 * also bf16 (data movement); comm.c handles AVG, bf16 conversion and accounting. */
#ifndef ZT_COMM_INTERNAL_H
#define ZT_COMM_INTERNAL_H

#include "zt/comm.h"

typedef struct zt__comm_backend {
  const char *name;
  /* Reductions are sums. req: where a backend may leave a request for wait (it sets
   * *req = NULL when it completed synchronously). count is per rank for gathers. */
  zt_status (*all_reduce)(void *ctx, void *buf, int64_t count, zt_dtype dt, void **req);
  zt_status (*all_gather)(void *ctx, const void *in, void *out, int64_t count, zt_dtype dt, void **req);
  zt_status (*reduce_scatter)(void *ctx, const void *in, void *out, int64_t count, zt_dtype dt, void **req);
  zt_status (*broadcast)(void *ctx, void *buf, int64_t count, zt_dtype dt, int root);
  zt_status (*send)(void *ctx, const void *buf, int64_t count, zt_dtype dt, int dst, int tag);
  zt_status (*recv)(void *ctx, void *buf, int64_t count, zt_dtype dt, int src, int tag);
  zt_status (*barrier)(void *ctx);
  /* Optional (NULL when the backend never leaves a request): complete req. */
  zt_status (*wait)(void *ctx, void *req);
  /* New backend ctx for the sub-group, with this rank and the size in it. */
  zt_status (*split)(void *ctx, int color, int key, void **out_ctx, int *rank, int *size);
  void (*free)(void *ctx);
} zt__comm_backend;

extern const zt__comm_backend zt__comm_local_backend;
extern const zt__comm_backend zt__comm_mpi_backend;
/* NCCL backend slot: zt__comm_nccl_backend, with device buffers, comes with the CUDA backend. */

/* mpi.c: whether this build has MPI, and the world ctx (initialising MPI if needed). */
bool zt__comm_mpi_available(void);
zt_status zt__comm_mpi_world(int *argc, char ***argv, void **ctx, int *rank, int *size);

/* comm.c: make a group around a backend ctx (takes ownership of ctx). */
zt_status zt__comm_new(const zt__comm_backend *be, void *ctx, int rank, int size, zt_comm **out);

/* Debug mode: one fixed-size record per rank (multiple of 4 bytes, no padding). */
typedef enum zt__coll_kind {
  ZT__COLL_ALL_REDUCE = 0,
  ZT__COLL_ALL_GATHER,
  ZT__COLL_REDUCE_SCATTER,
  ZT__COLL_BROADCAST,
  ZT__COLL_BARRIER,
  ZT__COLL_SPLIT,
  ZT__COLL_KIND_COUNT
} zt__coll_kind;

typedef struct zt__coll_record {
  int32_t kind;  /* zt__coll_kind */
  int32_t dtype; /* zt_dtype, -1 when none */
  int64_t count; /* elements of the input, -1 when none */
  int32_t root;  /* -1 when none */
  int32_t op;    /* zt_reduce_op, -1 when none */
  int32_t line;
  char file[52]; /* call site's base name, truncated */
} zt__coll_record;

const char *zt__coll_kind_name(int kind);
/* Compare n records against recs[0]; on the first rank that differs, ZT_STATUS_COMM with
 * a message naming that rank, both call sites and what differed. ZT_OK when all agree. */
zt_status zt__comm_debug_compare(const zt__coll_record *recs, int n);

#endif
