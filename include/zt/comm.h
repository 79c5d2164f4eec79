/* zerotrain comm layer: process groups and collectives over tensors.
 * A zt_comm is one process group with a backend (local: one rank; mpi: MPI_COMM_WORLD or
 * a split of it; nccl: slot reserved). Every rank of a group must call the same
 * collectives in the same order with the same sizes; debug mode checks that before each
 * collective and fails with ZT_STATUS_COMM on every rank instead of hanging.
 * No operation waits forever: each has the group's timeout (default 600 s), after which
 * it fails naming the ranks that did not arrive; the group is then unusable and the job
 * should end with zt_comm_abort. */
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
ZT_API ZT_NODISCARD zt_status zt_comm_init_local(zt_comm **out);
/* The MPI world (a duplicate of MPI_COMM_WORLD). Calls MPI_Init if MPI is not initialised
 * yet (argc/argv may be NULL). ZT_STATUS_UNSUPPORTED, naming the fix, in a build without
 * MPI. */
ZT_API ZT_NODISCARD zt_status zt_comm_init_mpi(int *argc, char ***argv, zt_comm **out);
/* mpi when launched by mpirun (OMPI_COMM_WORLD_SIZE or PMI_SIZE set) in a build with MPI,
 * else local. */
ZT_API ZT_NODISCARD zt_status zt_comm_world(zt_comm **out);
/* Split c into sub-groups: ranks with the same color (>= 0) form one group, ordered by
 * key (ties by rank in c). Collective over c (timed: every rank must arrive within c's
 * timeout). The sub-group inherits c's debug mode and timeout. The caller frees *out
 * (before or after c). */
ZT_API ZT_NODISCARD zt_status zt_comm_split_at(zt_comm *c, int color, int key, zt_comm **out, const char *file, int line);
#define zt_comm_split(c, color, key, out) zt_comm_split_at((c), (color), (key), (out), __FILE__, __LINE__)
/* Frees the group. When zerotrain initialised MPI, freeing the last MPI group calls
 * MPI_Finalize (MPI cannot be initialised again in this process). NULL is a no-op.
 * After a timeout in this process, only this process's memory is freed: MPI objects are
 * left and MPI is not finalized (those calls synchronise with the missing rank and would
 * hang); end the job with zt_comm_abort instead. */
ZT_API void zt_comm_free(zt_comm *c);

ZT_API int zt_comm_rank(const zt_comm *c);
ZT_API int zt_comm_size(const zt_comm *c);
ZT_API const char *zt_comm_backend_name(const zt_comm *c); /* "local", "mpi" */

/* Debug mode: before each collective every rank exchanges (kind, count, dtype, root, op,
 * call site) and a mismatch fails on every rank with ZT_STATUS_COMM naming the first
 * rank that differs from rank 0. Also on when the env var ZT_COMM_DEBUG=1 is set at
 * creation; splits inherit it. Costs one small all-gather per collective. */
ZT_API void zt_comm_set_debug(zt_comm *c, bool on);
ZT_API bool zt_comm_debug(const zt_comm *c);

/* Timeouts. Every blocking operation (collectives, send, recv, barrier, broadcast, split,
 * the agreement helpers below) and every zt_comm_wait waits at most the group's timeout,
 * in seconds (0: no limit). Default 600 s, or ZT_COMM_TIMEOUT (seconds) read at creation
 * (a value that is not a number >= 0 makes creation fail); splits inherit the parent's.
 * zt_comm_set_timeout ignores a negative or NaN value (+inf: no limit). A waiting rank
 * spins only while every rank it needs is inside a comm call (so MPI progresses); while
 * one is elsewhere (late, computing, stopped) it sleeps in steps growing to about 1 ms, so
 * it does not hold a core. Time this process itself does not run (stopped with SIGSTOP,
 * suspended) does not count: a rank continued after a stop does not blame the others.
 * On timeout the call returns ZT_STATUS_COMM with a message naming the operation, its call
 * site, this rank, the group size, the timeout and the ranks that did not arrive (from
 * the arrival board: the ranks that are calls behind, or at a different operation; for
 * ranks on another node "unknown"). After a timeout the group is unusable: MPI cannot
 * cancel a collective, so the operation stays posted (its tensors may still be written;
 * keep them alive) and every later call on the group (zt_comm_wait and zt_comm_test of its
 * other handles too) fails at once with ZT_STATUS_COMM and a message that carries the
 * timeout's whole message, so the first failure, which names the missing ranks, is never
 * lost behind a later one. End the job with zt_comm_abort. */
ZT_API void zt_comm_set_timeout(zt_comm *c, double seconds);
ZT_API double zt_comm_timeout(const zt_comm *c);

/* Naming ranks in messages. Every message that names a rank of a group (timeouts, send/recv
 * failures, debug mode's mismatches, check_same, agree_status) names it by its rank in the
 * MPI world ("world rank 3": the rank mpirun and OMPI_COMM_WORLD_RANK give), adds its rank in
 * the group when that differs, and the label this namer gives to the world rank:
 * "world rank 3 (stage 1 of 2, replica 1 of 2; group rank 1)". Without MPI (the local
 * backend) a rank is "rank R". fn writes a short label for world rank w into buf (at most cap
 * bytes with the NUL; "" for none; longer ones are cut) and may be called from any thread
 * that builds a message, while a call fails: it must be quick and must not call the comm
 * layer. One namer per process: a later call replaces it, fn NULL removes it. user_data
 * stays the caller's and must outlive the registration (remove the namer before freeing it). */
typedef void (*zt_comm_rank_namer)(int world_rank, char *buf, size_t cap, void *user_data);
ZT_API void zt_comm_set_rank_namer(zt_comm_rank_namer fn, void *user_data);

/* Ends every process of the job now with exit code `code` (mpi: MPI_Abort on the world,
 * which makes mpirun kill every rank, also stopped ones). Only the program (the CLI)
 * decides to call it; the library never does. Local backend: there are no other ranks,
 * so it does nothing and returns (the caller then exits as usual). NULL: nothing. */
ZT_API void zt_comm_abort(zt_comm *c, int code);

/* Agreement helpers for start-up checks (collectives over c).
 * check_same: every rank passes n named values as strings (the caller formats numbers);
 * when any differs, every rank fails with ZT_STATUS_INVALID_ARG naming the first
 * differing field and the ranks with their values (long values truncated), e.g.
 * "ranks disagree on 'batch': world rank 0 has '8', world rank 1 has '4'; start every rank
 * with the same options". Different n or names across ranks are reported too. Values are
 * compared by length and a 64-bit hash. NULL values read as "(null)". Strings stay the
 * caller's. */
ZT_API ZT_NODISCARD zt_status zt_comm_check_same_at(zt_comm *c, int n, const char *const *names, const char *const *values,
                                const char *file, int line);
#define zt_comm_check_same(...) zt_comm_check_same_at(__VA_ARGS__, __FILE__, __LINE__)
/* agree_status: every rank passes its own status s (with its zt_last_error() when s !=
 * ZT_OK). ZT_OK on every rank when every s is ZT_OK. Otherwise every rank fails: a failing
 * rank returns its own s and keeps its message; the others return the lowest failing rank
 * R's status with its message (first ~480 bytes) prefixed by R's name and ": " ("world
 * rank R: ...", see zt_comm_set_rank_namer). Lets ranks validate inputs locally and fail
 * together before the first real collective. */
ZT_API ZT_NODISCARD zt_status zt_comm_agree_status_at(zt_comm *c, zt_status s, const char *file, int line);
#define zt_comm_agree_status(c, s) zt_comm_agree_status_at((c), (s), __FILE__, __LINE__)

/* Per-group counters for benchmarks. bytes_sent is what this rank sends by the ring
 * algorithm's formula (N ranks, B bytes): all_reduce 2(N-1)/N*B, all_gather and
 * reduce_scatter (N-1)/N*B of the full buffer, broadcast B (N > 1), send B; not what the
 * MPI library actually chose to do. */
typedef struct zt_comm_stats {
  int64_t calls;
  int64_t bytes_sent;
} zt_comm_stats;
ZT_API void zt_comm_stats_get(const zt_comm *c, zt_comm_stats *out);
ZT_API void zt_comm_stats_reset(zt_comm *c);

/* Collectives. Tensors: cpu, contiguous, dtype f32/f64/bf16/f16/i32/i64 (bf16 and f16 are
 * reduced in f32 and rounded once; with the mpi backend their reductions also travel in
 * f32, since MPI has no 16-bit float sum: bytes_sent counts the 16-bit size), same dtype
 * and sizes on every rank. The call site (file:line)
 * is passed by the macros for debug mode's messages. */
/* t = reduce(t over ranks), in place. */
ZT_API ZT_NODISCARD zt_status zt_all_reduce_at(zt_comm *c, zt_tensor *t, zt_reduce_op op, const char *file, int line);
/* out = concat of every rank's in, rank order; numel(out) = size * numel(in). */
ZT_API ZT_NODISCARD zt_status zt_all_gather_at(zt_comm *c, const zt_tensor *in, zt_tensor *out, const char *file, int line);
/* out = reduce over ranks of this rank's chunk of in; numel(in) = size * numel(out). */
ZT_API ZT_NODISCARD zt_status zt_reduce_scatter_at(zt_comm *c, const zt_tensor *in, zt_tensor *out, zt_reduce_op op, const char *file,
                               int line);
/* t = root's t. */
ZT_API ZT_NODISCARD zt_status zt_broadcast_at(zt_comm *c, zt_tensor *t, int root, const char *file, int line);
ZT_API ZT_NODISCARD zt_status zt_barrier_at(zt_comm *c, const char *file, int line);
#define zt_all_reduce(c, t, op) zt_all_reduce_at((c), (t), (op), __FILE__, __LINE__)
#define zt_all_gather(c, in, out) zt_all_gather_at((c), (in), (out), __FILE__, __LINE__)
#define zt_reduce_scatter(c, in, out, op) zt_reduce_scatter_at((c), (in), (out), (op), __FILE__, __LINE__)
#define zt_broadcast(c, t, root) zt_broadcast_at((c), (t), (root), __FILE__, __LINE__)
#define zt_barrier(c) zt_barrier_at((c), __FILE__, __LINE__)

/* Point to point (timed; dst/src another rank of the group; tag in [0, ZT_COMM_MAX_TAG)).
 * Messages between two ranks with one tag arrive in the order sent. Blocking: zt_send,
 * zt_recv (a small send may complete before the receiver posts its receive). Non-blocking:
 * zt_isend / zt_irecv start the transfer and return a handle that zt_comm_wait completes
 * (the tensor must stay alive and untouched until then; a received tensor holds the data
 * after the wait). Debug mode (ZT_COMM_DEBUG=1) checks each receive against its send: the
 * send carries a header (count, dtype, call site) that the receive compares with its own
 * tensor before the data moves, and a mismatch is an error on the receiving rank naming
 * both call sites, instead of a hang or silently wrong bytes. */
#define ZT_COMM_MAX_TAG 16384
ZT_API ZT_NODISCARD zt_status zt_send_at(zt_comm *c, const zt_tensor *t, int dst, int tag, const char *file, int line);
ZT_API ZT_NODISCARD zt_status zt_recv_at(zt_comm *c, zt_tensor *t, int src, int tag, const char *file, int line);
#define zt_send(c, t, dst, tag) zt_send_at((c), (t), (dst), (tag), __FILE__, __LINE__)
#define zt_recv(c, t, src, tag) zt_recv_at((c), (t), (src), (tag), __FILE__, __LINE__)

/* Asynchronous versions: start the collective and return a handle in *w. The tensors
 * must stay alive and untouched until zt_comm_wait(*w), which completes it, frees the
 * handle and returns the collective's status. Every handle must be waited on. Debug
 * mode's check runs (blocking) when the collective starts. zt_comm_wait waits at most the
 * group's timeout (counted from the wait); on timeout it frees the handle but not the
 * operation's buffers (MPI may still write them) and the group is unusable. */
typedef struct zt_comm_work zt_comm_work;
ZT_API ZT_NODISCARD zt_status zt_all_reduce_async_at(zt_comm *c, zt_tensor *t, zt_reduce_op op, zt_comm_work **w, const char *file,
                                 int line);
ZT_API ZT_NODISCARD zt_status zt_all_gather_async_at(zt_comm *c, const zt_tensor *in, zt_tensor *out, zt_comm_work **w,
                                 const char *file, int line);
ZT_API ZT_NODISCARD zt_status zt_reduce_scatter_async_at(zt_comm *c, const zt_tensor *in, zt_tensor *out, zt_reduce_op op,
                                     zt_comm_work **w, const char *file, int line);
#define zt_all_reduce_async(c, t, op, w) zt_all_reduce_async_at((c), (t), (op), (w), __FILE__, __LINE__)
#define zt_all_gather_async(c, in, out, w) zt_all_gather_async_at((c), (in), (out), (w), __FILE__, __LINE__)
#define zt_reduce_scatter_async(c, in, out, op, w) \
  zt_reduce_scatter_async_at((c), (in), (out), (op), (w), __FILE__, __LINE__)
ZT_API ZT_NODISCARD zt_status zt_isend_at(zt_comm *c, const zt_tensor *t, int dst, int tag, zt_comm_work **w,
                                         const char *file, int line);
ZT_API ZT_NODISCARD zt_status zt_irecv_at(zt_comm *c, zt_tensor *t, int src, int tag, zt_comm_work **w, const char *file,
                                         int line);
#define zt_isend(c, t, dst, tag, w) zt_isend_at((c), (t), (dst), (tag), (w), __FILE__, __LINE__)
#define zt_irecv(c, t, src, tag, w) zt_irecv_at((c), (t), (src), (tag), (w), __FILE__, __LINE__)
ZT_API ZT_NODISCARD zt_status zt_comm_wait(zt_comm_work *w);
/* Move w forward without waiting (MPI progresses a transfer only inside its calls: a rank
 * that computes between a zt_isend and its wait holds back a large message that its peer
 * is already waiting for). *done (may be NULL) tells whether w's transfer is complete; the
 * handle stays valid either way and still needs zt_comm_wait, which is then immediate. A
 * failed transfer is reported here (and the wait then returns ZT_OK). */
ZT_API ZT_NODISCARD zt_status zt_comm_test(zt_comm_work *w, bool *done);

#endif
