/* zerotrain comm layer: process groups and collectives over tensors.
 * A zt_comm is one process group with a backend (local: one rank; mpi: MPI_COMM_WORLD or
 * a split of it; nccl: slot reserved). Every rank of a group must call the same
 * collectives in the same order with the same sizes; debug mode checks that before each
 * collective and fails with ZT_STATUS_COMM on every rank instead of hanging. */
#ifndef ZT_COMM_H
#define ZT_COMM_H

#include "zt/tensor.h"

typedef enum zt_reduce_op {
  ZT_REDUCE_SUM = 0,
  ZT_REDUCE_AVG, /* sum / size; floating dtypes only */
  ZT_REDUCE_OP_COUNT
} zt_reduce_op;

typedef struct zt_comm zt_comm;

/* A group of one rank (rank 0, size 1): collectives are copies or no-ops. */
zt_status zt_comm_init_local(zt_comm **out);
/* The MPI world (a duplicate of MPI_COMM_WORLD). Calls MPI_Init if MPI is not initialised
 * yet (argc/argv may be NULL). ZT_STATUS_UNSUPPORTED, naming the fix, in a build without
 * MPI. */
zt_status zt_comm_init_mpi(int *argc, char ***argv, zt_comm **out);
/* mpi when launched by mpirun (OMPI_COMM_WORLD_SIZE or PMI_SIZE set) in a build with MPI,
 * else local. */
zt_status zt_comm_world(zt_comm **out);
/* Split c into sub-groups: ranks with the same color (>= 0) form one group, ordered by
 * key (ties by rank in c). Collective over c. The caller frees *out (before or after c). */
zt_status zt_comm_split(zt_comm *c, int color, int key, zt_comm **out);
/* Frees the group. When zerotrain initialised MPI, freeing the last MPI group calls
 * MPI_Finalize (MPI cannot be initialised again in this process). NULL is a no-op. */
void zt_comm_free(zt_comm *c);

int zt_comm_rank(const zt_comm *c);
int zt_comm_size(const zt_comm *c);
const char *zt_comm_backend_name(const zt_comm *c); /* "local", "mpi" */

/* Debug mode: before each collective every rank exchanges (kind, count, dtype, root, op,
 * call site) and a mismatch fails on every rank with ZT_STATUS_COMM naming the first
 * rank that differs from rank 0. Also on when the env var ZT_COMM_DEBUG=1 is set at
 * creation; splits inherit it. Costs one small all-gather per collective. */
void zt_comm_set_debug(zt_comm *c, bool on);
bool zt_comm_debug(const zt_comm *c);

/* Per-group counters for benchmarks. bytes_sent is what this rank sends by the ring
 * algorithm's formula (N ranks, B bytes): all_reduce 2(N-1)/N*B, all_gather and
 * reduce_scatter (N-1)/N*B of the full buffer, broadcast B (N > 1), send B; not what the
 * MPI library actually chose to do. */
typedef struct zt_comm_stats {
  int64_t calls;
  int64_t bytes_sent;
} zt_comm_stats;
void zt_comm_stats_get(const zt_comm *c, zt_comm_stats *out);
void zt_comm_stats_reset(zt_comm *c);

/* Collectives. Tensors: cpu, contiguous, dtype f32/f64/bf16/f16/i32/i64 (bf16 and f16 are
 * reduced in f32 and rounded once; with the mpi backend their reductions also travel in
 * f32, since MPI has no 16-bit float sum: bytes_sent counts the 16-bit size), same dtype
 * and sizes on every rank. The call site (file:line)
 * is passed by the macros for debug mode's messages. */
/* t = reduce(t over ranks), in place. */
zt_status zt_all_reduce_at(zt_comm *c, zt_tensor *t, zt_reduce_op op, const char *file, int line);
/* out = concat of every rank's in, rank order; numel(out) = size * numel(in). */
zt_status zt_all_gather_at(zt_comm *c, const zt_tensor *in, zt_tensor *out, const char *file, int line);
/* out = reduce over ranks of this rank's chunk of in; numel(in) = size * numel(out). */
zt_status zt_reduce_scatter_at(zt_comm *c, const zt_tensor *in, zt_tensor *out, zt_reduce_op op, const char *file,
                               int line);
/* t = root's t. */
zt_status zt_broadcast_at(zt_comm *c, zt_tensor *t, int root, const char *file, int line);
zt_status zt_barrier_at(zt_comm *c, const char *file, int line);
#define zt_all_reduce(c, t, op) zt_all_reduce_at((c), (t), (op), __FILE__, __LINE__)
#define zt_all_gather(c, in, out) zt_all_gather_at((c), (in), (out), __FILE__, __LINE__)
#define zt_reduce_scatter(c, in, out, op) zt_reduce_scatter_at((c), (in), (out), (op), __FILE__, __LINE__)
#define zt_broadcast(c, t, root) zt_broadcast_at((c), (t), (root), __FILE__, __LINE__)
#define zt_barrier(c) zt_barrier_at((c), __FILE__, __LINE__)

/* Point to point (blocking; dst/src != own rank; tag >= 0). Not checked by debug mode. */
zt_status zt_send(zt_comm *c, const zt_tensor *t, int dst, int tag);
zt_status zt_recv(zt_comm *c, zt_tensor *t, int src, int tag);

/* Asynchronous versions: start the collective and return a handle in *w. The tensors
 * must stay alive and untouched until zt_comm_wait(*w), which completes it, frees the
 * handle and returns the collective's status. Every handle must be waited on. Debug
 * mode's check runs (blocking) when the collective starts. */
typedef struct zt_comm_work zt_comm_work;
zt_status zt_all_reduce_async_at(zt_comm *c, zt_tensor *t, zt_reduce_op op, zt_comm_work **w, const char *file,
                                 int line);
zt_status zt_all_gather_async_at(zt_comm *c, const zt_tensor *in, zt_tensor *out, zt_comm_work **w,
                                 const char *file, int line);
zt_status zt_reduce_scatter_async_at(zt_comm *c, const zt_tensor *in, zt_tensor *out, zt_reduce_op op,
                                     zt_comm_work **w, const char *file, int line);
#define zt_all_reduce_async(c, t, op, w) zt_all_reduce_async_at((c), (t), (op), (w), __FILE__, __LINE__)
#define zt_all_gather_async(c, in, out, w) zt_all_gather_async_at((c), (in), (out), (w), __FILE__, __LINE__)
#define zt_reduce_scatter_async(c, in, out, op, w) \
  zt_reduce_scatter_async_at((c), (in), (out), (op), (w), __FILE__, __LINE__)
zt_status zt_comm_wait(zt_comm_work *w);

#endif
