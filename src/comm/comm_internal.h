/* Internal comm interface: the backend table (struct of function pointers + ctx) that
 * comm.c dispatches to, debug mode's record comparison, the arrival board and the
 * agreement helpers' pure parts (exposed for tests).
 * Backends see only validated, contiguous buffers of f32/f64/i32/i64 (reductions) or
 * also bf16/f16 (data movement); comm.c handles AVG, half conversion, accounting,
 * timeouts' messages and the board protocol.
 * Included by: src/comm only (and the comm tests). */
#ifndef ZT_COMM_INTERNAL_H
#define ZT_COMM_INTERNAL_H

#include <stdatomic.h>

#include "zt/comm.h"

/* ------------------------------------------------------------ arrival board
 * One entry per (rank, group): what this rank last did on the group, in memory that the
 * other ranks of its node can read while it is stopped (see board.c). Every word is an
 * atomic; ver is a sequence lock (odd while the owner writes). 64 bytes. */
#define ZT__BOARD_SLOTS 64 /* entries per rank: at most 64 live MPI groups have a board */
#define ZT__BOARD_FILE 24  /* call-site base name bytes kept (3 words) */

typedef struct zt__board_entry {
  _Atomic uint64_t ver;
  _Atomic uint64_t started; /* collectives started on the group by this rank (call numbers 1, 2, ...) */
  _Atomic uint64_t last;    /* the latest started collective: kind | line << 8 */
  _Atomic uint64_t file[ZT__BOARD_FILE / 8];
  _Atomic uint64_t blocked; /* what it waits in now: zt__board_blocked | arg << 8 (call number or peer) */
  _Atomic uint64_t pid;     /* its process, to tell a stopped or dead rank from a slow one */
} zt__board_entry;

typedef enum zt__board_blocked {
  ZT__BLOCKED_NONE = 0, /* not inside a comm call on this group */
  ZT__BLOCKED_COLL,     /* waiting for collective call number arg */
  ZT__BLOCKED_SEND,     /* in zt_send to rank arg */
  ZT__BLOCKED_RECV      /* in zt_recv from rank arg */
} zt__board_blocked;

#define ZT__BOARD_STATE 12 /* "stopped", "dead" */
#define ZT__BOARD_WHY 160  /* why another node's entries could not be read */

/* A consistent copy of one rank's entry, as the timeout message reads it. */
typedef struct zt__board_view {
  bool known; /* false: the entry cannot be read (another node not reached, or no board) */
  uint64_t started;
  int last_kind, last_line;
  char last_file[ZT__BOARD_FILE + 1];
  int blocked; /* zt__board_blocked */
  uint64_t blocked_arg;
  int pid;     /* 0: unknown */
  /* remote: read from another node's board server (board_remote.c), state its process's
   * state as that host's /proc tells ("" running or unknown); a local entry's state is
   * read from this host's /proc when the message is made */
  bool remote;
  char state[ZT__BOARD_STATE];
  char why[ZT__BOARD_WHY]; /* !known: why ("" not on this node, nothing more known) */
} zt__board_view;

void zt__board_reset(zt__board_entry *e);
void zt__board_enter(zt__board_entry *e, uint64_t seq, int kind, const char *file, int line);
void zt__board_block(zt__board_entry *e, zt__board_blocked what, uint64_t arg);
void zt__board_read(const zt__board_entry *e, zt__board_view *out); /* e NULL: unknown */
/* What process pid is doing, from this host's /proc: "stopped", "dead", or NULL (running,
 * or unknown). */
const char *zt__proc_state(int pid);

/* ------------------------------------------------------------ the board across hosts
 * (board_remote.c) Every rank serves its node's entries over TCP to ranks on other nodes;
 * mpi.c gathers each rank's zt__board_addr at start. IPv4 only. */
#define ZT__BOARD_ADDRS 4 /* addresses kept per server: this host's, loopback last */
#define ZT__HOST_NAME 48  /* host name bytes kept */
typedef struct zt__board_addr {
  int32_t world, node; /* node: the world rank of the node's first rank */
  int32_t port, n_ip;  /* port 0: no server (it could not start) */
  uint32_t ip[ZT__BOARD_ADDRS]; /* network byte order */
  char host[ZT__HOST_NAME];     /* the processor name MPI gives */
} zt__board_addr;
/* Start this process's server for its node (n ranks: rows[i] node rank i's ZT__BOARD_SLOTS
 * entries, borrowed until zt__board_serve_stop; world[i] its world rank): fills me's port
 * and addresses. nonce: the job's, the same on every rank. */
ZT_NODISCARD zt_status zt__board_serve(uint64_t nonce, int node, int n, zt__board_entry *const *rows,
                                       const int *world, zt__board_addr *me);
void zt__board_serve_stop(void);
/* The views of world ranks world[0..n) (all on node `node`) at board slot `slot`, asked of
 * node's servers among addrs[0..n_addrs) in turn until one answers, before deadline
 * (zt_clock_now's clock). False (out untouched) with why when none answered. */
bool zt__board_ask(const zt__board_addr *addrs, int n_addrs, int node, uint64_t nonce, int slot, int n,
                   const int *world, zt__board_view *out, double deadline, char *why, size_t cap);

/* ------------------------------------------------------------ naming ranks (names.c)
 * How a message names the ranks of a group: world[r] is group rank r's world rank (world
 * NULL, or an entry < 0: unknown), fn/ud the application's namer (fn NULL: none). */
#define ZT__RANK_LABEL 64  /* label bytes kept */
#define ZT__RANK_NAME 176  /* enough for any zt__rank_name */
typedef struct zt__rank_names {
  const int *world;
  int size;
  zt_comm_rank_namer fn;
  void *ud;
  const char *(*host)(int world_rank); /* its host's name, NULL when the job is on one host */
} zt__rank_names;
/* The names of a group with this world map (may be NULL) and host namer (may be NULL), with
 * the process's namer. */
zt__rank_names zt__rank_names_of(const int *world, int size, const char *(*host)(int world_rank));
/* Group rank r's world rank, -1 when unknown (n NULL too). */
int zt__rank_world(const zt__rank_names *n, int r);
/* "world rank W on HOST (LABEL; group rank R)", leaving out a host when the job is on one,
 * a label that is empty and a group rank equal to W; "rank R" when the world rank is unknown
 * (n NULL too). Returns buf. */
const char *zt__rank_name(const zt__rank_names *n, int r, char *buf, size_t cap);

/* The operation that timed out. seq: collectives' call number on the group (0 for send/recv). */
typedef struct zt__timeout_info {
  int kind; /* zt__coll_kind */
  const char *file;
  int line;
  int rank, size;
  double timeout_s;
  uint64_t seq;
  int peer, tag; /* send / recv */
} zt__timeout_info;

/* The message of a timeout (ZT_STATUS_COMM): the operation, call site, rank, size and
 * timeout, and, from views[size] (one per rank of the group), the ranks that did not
 * arrive and what they were doing, every rank named through names (NULL: "rank R"). Pure:
 * tested with synthetic views. */
ZT_NODISCARD zt_status zt__comm_timeout_error(const zt__timeout_info *op, const zt__board_view *views,
                                              const zt__rank_names *names);

/* ------------------------------------------------------------ backends */
typedef struct zt__comm_backend {
  const char *name;
  /* Every operation starts and leaves a request in *req for wait, or sets *req = NULL
   * when it completed synchronously. Reductions are sums. count is per rank for gathers. */
  zt_status (*all_reduce)(void *ctx, void *buf, int64_t count, zt_dtype dt, void **req);
  zt_status (*all_gather)(void *ctx, const void *in, void *out, int64_t count, zt_dtype dt, void **req);
  zt_status (*reduce_scatter)(void *ctx, const void *in, void *out, int64_t count, zt_dtype dt, void **req);
  zt_status (*broadcast)(void *ctx, void *buf, int64_t count, zt_dtype dt, int root, void **req);
  zt_status (*send)(void *ctx, const void *buf, int64_t count, zt_dtype dt, int dst, int tag, void **req);
  zt_status (*recv)(void *ctx, void *buf, int64_t count, zt_dtype dt, int src, int tag, void **req);
  zt_status (*barrier)(void *ctx, void **req);
  /* Optional (NULL when the backend never leaves a request): one nonblocking check of
   * req (it also drives the backend's progress). When complete (or failed) it frees req
   * and sets *done; comm.c polls it against the deadline with its back-off. */
  zt_status (*test)(void *ctx, void *req, bool *done);
  /* Optional: comm.c gives up on req (timed out). The operation cannot be cancelled, so
   * req stays with the backend, and since a rank is missing the backend must never again
   * call anything that synchronises with other ranks (freeing groups, finalizing). */
  void (*abandon)(void *ctx, void *req);
  /* New backend ctx for the sub-group, with this rank and the size in it. board_slot:
   * the arrival-board slot the sub-group's ranks agreed on (-1: none). Blocking: comm.c
   * first checks with a timed exchange that every rank arrived. */
  zt_status (*split)(void *ctx, int color, int key, int board_slot, void **out_ctx, int *rank, int *size);
  void (*free)(void *ctx);
  /* Optional: end every process of the job now, with this exit code. */
  void (*abort)(void *ctx, int code);
  /* Optional: the board entry of the group's rank r, in memory other ranks can read;
   * NULL when it cannot be read from here (another node, no board). */
  zt__board_entry *(*board_entry)(void *ctx, int rank);
  /* Optional: the board slots free in this process (bit i: slot i). */
  uint64_t (*board_free_slots)(void *ctx);
  /* Optional: the world rank of each of the group's ranks (size entries, -1 where unknown;
   * owned by ctx), for messages; NULL when the backend has no world beyond the group. */
  const int *(*world_ranks)(void *ctx);
  /* Optional: a world rank's host name, for messages; NULL when the job is on one host. */
  const char *(*host_of)(int world_rank);
  /* Optional: fill views[r] of the group's ranks the board could not read (another node)
   * from their nodes' board servers, before deadline; each one not reached keeps known
   * false and gets why. */
  void (*board_remote)(void *ctx, zt__board_view *views, double deadline);
} zt__comm_backend;

extern const zt__comm_backend zt__comm_local_backend;
extern const zt__comm_backend zt__comm_mpi_backend;
/* NCCL backend slot: zt__comm_nccl_backend, with device buffers, comes with the CUDA backend. */

/* mpi.c: whether this build has MPI, and the world ctx (initialising MPI if needed). */
bool zt__comm_mpi_available(void);
ZT_NODISCARD zt_status zt__comm_mpi_world(int *argc, char ***argv, void **ctx, int *rank, int *size);

/* comm.c: make a group around a backend ctx (takes ownership of ctx). Reads
 * ZT_COMM_DEBUG and ZT_COMM_TIMEOUT (a bad value is ZT_STATUS_INVALID_ARG). */
ZT_NODISCARD zt_status zt__comm_new(const zt__comm_backend *be, void *ctx, int rank, int size, zt_comm **out);
/* The timeout in ZT_COMM_TIMEOUT (default 600 s when unset). */
ZT_NODISCARD zt_status zt__comm_env_timeout(double *out);

/* Kinds of operation, for debug mode's records and the board. */
typedef enum zt__coll_kind {
  ZT__COLL_ALL_REDUCE = 0,
  ZT__COLL_ALL_GATHER,
  ZT__COLL_REDUCE_SCATTER,
  ZT__COLL_BROADCAST,
  ZT__COLL_BARRIER,
  ZT__COLL_SPLIT,
  ZT__COLL_CHECK_SAME,
  ZT__COLL_AGREE_STATUS,
  ZT__COLL_SEND, /* point to point: not counted as the group's calls */
  ZT__COLL_RECV,
  ZT__COLL_KIND_COUNT
} zt__coll_kind;

/* comm.c: ZT_OK, or the error a call on c gets when c is NULL or unusable (a timeout on it
 * earlier: the message carries that timeout's). For callers that allocate before calling. */
ZT_NODISCARD zt_status zt__comm_usable(const zt_comm *c, const char *fn);
/* comm.c: every rank's bytes_per_rank bytes (a multiple of 4) into out, rank order:
 * a collective of this kind on the board, timed like the others. For agree.c. */
ZT_NODISCARD zt_status zt__comm_gather_bytes(zt_comm *c, zt__coll_kind kind, const void *in, void *out, size_t bytes_per_rank,
                                const char *file, int line);

/* Debug mode: one fixed-size record per rank (multiple of 4 bytes, no padding). */
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
 * a message naming that rank (through names, may be NULL), both call sites and what
 * differed. ZT_OK when all agree. */
ZT_NODISCARD zt_status zt__comm_debug_compare(const zt__coll_record *recs, int n, const zt__rank_names *names);
/* comm.c: how c's messages name its ranks. */
zt__rank_names zt__comm_names(const zt_comm *c);

/* ------------------------------------------------------------ agreement (agree.c) */
#define ZT__SAME_NAME 32  /* name bytes kept (truncated) */
#define ZT__SAME_VALUE 40 /* value bytes shown (truncated) */
/* One named value of zt_comm_check_same, as every rank sends it. */
typedef struct zt__same_record {
  uint64_t name_hash, value_hash;
  int64_t value_len;
  int32_t present; /* 0: this rank passed fewer fields */
  int32_t name_len;
  char name[ZT__SAME_NAME];
  char value[ZT__SAME_VALUE];
} zt__same_record;
void zt__same_record_set(zt__same_record *r, const char *name, const char *value);
/* recs[rank * m + i]: field i of each of n ranks. ZT_STATUS_INVALID_ARG naming the first
 * field that differs and every rank's value of it (ranks named through names, may be NULL);
 * ZT_OK when all agree. */
ZT_NODISCARD zt_status zt__comm_same_compare(const zt__same_record *recs, int n, int m, const zt__rank_names *names);

#define ZT__AGREE_MSG 480
typedef struct zt__agree_record {
  int32_t status;
  char msg[ZT__AGREE_MSG]; /* the start of zt_last_error(), NUL-terminated */
} zt__agree_record;
/* The verdict for rank `rank` from every rank's record: ZT_OK, or its own status (its
 * message left as it is), or the lowest failing rank's status with its name (through
 * names, may be NULL: "rank R") + ": " + its message. Pure. */
ZT_NODISCARD zt_status zt__comm_agree_pick(const zt__agree_record *recs, int n, int rank, const zt__rank_names *names);

#endif
