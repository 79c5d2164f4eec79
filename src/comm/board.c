/* The arrival board and the message of a timeout.
 *
 * Why a board: when a collective times out, the waiting ranks must say who is missing,
 * but the missing rank cannot answer (it is stopped, deadlocked, or busy elsewhere), and
 * the group cannot carry another message (MPI cannot cancel the pending collective).
 * So each rank publishes, in memory the others can read without its help, one entry per
 * group: how many collectives it has started on the group, the kind and call site of the
 * latest, and what it is blocked in now (a call number, or a send/recv peer). A timed-out
 * rank compares its own call number k with each entry: started < k is "did not arrive"
 * (k - started calls behind), started == k with another kind is "at a different
 * operation".
 *
 * Where it lives (mpi.c): one MPI-3 shared-memory window per node (MPI_Comm_split_type
 * MPI_COMM_TYPE_SHARED + MPI_Win_allocate_shared), created with the first MPI group,
 * ZT__BOARD_SLOTS entries per rank; a group uses the slot its ranks agreed on when it was
 * made (the world: the lowest slot free on every rank, by an OR-reduction at creation; a
 * split: the timed exchange before it carries each rank's free slots, and a sub-group
 * takes the lowest one free on all its members; past 64 live groups a new one has no
 * board, and its messages say "unknown"). Plain loads of shared memory need no progress from the owner, so a stopped rank's
 * entry still reads. Ranks on another node are reported as "unknown": passive-target RMA
 * could read them, but over TCP it needs the target's progress engine, which is exactly
 * what a stopped rank lacks, and a diagnosis that can hang would defeat its purpose.
 *
 * The same entries drive the waiting ranks' back-off (comm.c): spin while every needed
 * rank is inside a comm call, sleep while one is not.
 *
 * Consistency: the owner writes an entry under a sequence lock (ver odd while writing;
 * every word atomic), readers retry until they see one even ver before and after. A
 * publish is a handful of stores to a cache line only this rank writes: negligible next
 * to any collective. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/status_internal.h"
#include "comm/comm_internal.h"

/* Odd while writing, even after, whatever ver held before (fresh shared memory is not zeroed). */
static void begin_write(zt__board_entry *e) {
  uint64_t v = atomic_load_explicit(&e->ver, memory_order_relaxed);
  atomic_store_explicit(&e->ver, v | 1, memory_order_relaxed);
  atomic_thread_fence(memory_order_release); /* the odd ver is seen before any new word */
}

static void end_write(zt__board_entry *e) {
  uint64_t v = atomic_load_explicit(&e->ver, memory_order_relaxed);
  atomic_store_explicit(&e->ver, (v | 1) + 1, memory_order_release);
}

void zt__board_reset(zt__board_entry *e) {
  begin_write(e);
  atomic_store_explicit(&e->started, 0, memory_order_relaxed);
  atomic_store_explicit(&e->last, 0, memory_order_relaxed);
  for (int i = 0; i < ZT__BOARD_FILE / 8; i++) atomic_store_explicit(&e->file[i], 0, memory_order_relaxed);
  atomic_store_explicit(&e->blocked, 0, memory_order_relaxed);
  atomic_store_explicit(&e->pid, (uint64_t)getpid(), memory_order_relaxed);
  end_write(e);
}

void zt__board_enter(zt__board_entry *e, uint64_t seq, int kind, const char *file, int line) {
  const char *base = file ? strrchr(file, '/') : NULL;
  base = base ? base + 1 : file ? file : "?";
  uint64_t w[ZT__BOARD_FILE / 8] = {0};
  size_t n = strlen(base);
  memcpy(w, base, n < ZT__BOARD_FILE ? n : ZT__BOARD_FILE);
  begin_write(e);
  atomic_store_explicit(&e->started, seq, memory_order_relaxed);
  atomic_store_explicit(&e->last, (uint64_t)(kind & 0xff) | (uint64_t)(uint32_t)line << 8, memory_order_relaxed);
  for (int i = 0; i < ZT__BOARD_FILE / 8; i++) atomic_store_explicit(&e->file[i], w[i], memory_order_relaxed);
  end_write(e);
}

void zt__board_block(zt__board_entry *e, zt__board_blocked what, uint64_t arg) {
  begin_write(e);
  atomic_store_explicit(&e->blocked, (uint64_t)what | arg << 8, memory_order_relaxed);
  end_write(e);
}

void zt__board_read(const zt__board_entry *e, zt__board_view *out) {
  memset(out, 0, sizeof *out);
  if (!e) return;
  zt__board_entry *m = (zt__board_entry *)e; /* atomic loads take non-const pointers in C11 */
  uint64_t w[ZT__BOARD_FILE / 8], started, last, blocked, pid;
  for (int tries = 0; tries < 100000; tries++) { /* a write takes nanoseconds */
    uint64_t v0 = atomic_load_explicit(&m->ver, memory_order_acquire);
    if (v0 & 1) continue;
    started = atomic_load_explicit(&m->started, memory_order_relaxed);
    last = atomic_load_explicit(&m->last, memory_order_relaxed);
    for (int i = 0; i < ZT__BOARD_FILE / 8; i++) w[i] = atomic_load_explicit(&m->file[i], memory_order_relaxed);
    blocked = atomic_load_explicit(&m->blocked, memory_order_relaxed);
    pid = atomic_load_explicit(&m->pid, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&m->ver, memory_order_relaxed) != v0) continue;
    out->known = true;
    out->started = started;
    out->last_kind = (int)(last & 0xff);
    out->last_line = (int)(uint32_t)(last >> 8);
    memcpy(out->last_file, w, ZT__BOARD_FILE);
    out->last_file[ZT__BOARD_FILE] = '\0';
    out->blocked = (int)(blocked & 0xff);
    out->blocked_arg = blocked >> 8;
    out->pid = (int)pid;
    return;
  }
  /* a writer stopped half-way (stopped inside a publish): leave it unknown */
}

/* ------------------------------------------------------------ the message */
typedef struct sbuf {
  char *p;
  size_t cap, len;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...) {
  if (b->len + 1 >= b->cap) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
  va_end(ap);
  if (n > 0) b->len += (size_t)n;
  if (b->len >= b->cap) b->len = b->cap - 1;
}

static const char *op_label(int kind) {
  switch (kind) {
  case ZT__COLL_SEND: return "zt_send";
  case ZT__COLL_RECV: return "zt_recv";
  default: return zt__coll_kind_name(kind);
  }
}

/* Group rank r's name (names NULL: "rank R"), in a buffer of the caller's. */
#define NAME(r, buf) zt__rank_name(names, (r), (buf), sizeof(buf))

/* A board's peer (a uint64 arg) as a group rank for its name. */
static int peer_of(uint64_t arg) { return arg < (uint64_t)INT_MAX ? (int)arg : -1; }

/* What a rank is doing now, from its entry, and its process's state (NULL: running or
 * unknown): the details inside a message's parentheses. */
static void doing(sbuf *b, const zt__board_view *v, const char *state, const zt__rank_names *names) {
  char peer[ZT__RANK_NAME];
  if (v->started > 0)
    put(b, "its last collective on this group was call #%llu, %s at %s:%d", (unsigned long long)v->started,
        op_label(v->last_kind), v->last_file, v->last_line);
  else
    put(b, "it has made no collective call on this group");
  switch (v->blocked) {
  case ZT__BLOCKED_COLL:
    if (v->blocked_arg == v->started)
      put(b, ", and it is waiting in that call");
    else
      put(b, ", and it is waiting for its call #%llu", (unsigned long long)v->blocked_arg);
    break;
  case ZT__BLOCKED_SEND: put(b, "; it is blocked in zt_send to %s", NAME(peer_of(v->blocked_arg), peer)); break;
  case ZT__BLOCKED_RECV: put(b, "; it is blocked in zt_recv from %s", NAME(peer_of(v->blocked_arg), peer)); break;
  default: put(b, "; it is in no comm call now%s", state ? "" : ": busy elsewhere, stopped or dead"); break;
  }
  if (state) put(b, "; its process (pid %d) is %s", v->pid, state);
}

/* What the rank's process is doing, from this host's /proc: "stopped" (SIGSTOP, a debugger),
 * "dead", or NULL (running, or unknown). */
const char *zt__proc_state(int pid) {
  if (pid <= 0) return NULL;
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return errno == ENOENT ? "dead" : NULL;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
  if (!p || p[1] != ' ') return NULL;
  switch (p[2]) {
  case 'T':
  case 't': return "stopped";
  case 'Z':
  case 'X': return "dead";
  default: return NULL;
  }
}

/* A known view's process state: read on its host by its board server (remote), or here. */
static const char *state_of(const zt__board_view *v) {
  if (v->remote) return v->state[0] ? v->state : NULL;
  return zt__proc_state(v->pid);
}

static void seconds(char *buf, size_t cap, double s) {
  if (s == floor(s) && s < 1e9)
    snprintf(buf, cap, "%.0f s", s);
  else
    snprintf(buf, cap, "%.3g s", s);
}

/* A rank the collective waits for: calls behind, or at another operation. */
static bool absent(const zt__timeout_info *op, const zt__board_view *v) {
  return v->started < op->seq || (v->started == op->seq && v->last_kind != op->kind);
}

/* The ranks past the first `skip` of those absent (known) or unknown (!known), by number:
 * " world ranks 7 8 9" (" rank 7" without a world). */
static void list_ranks(sbuf *b, const zt__timeout_info *op, const zt__board_view *views, const zt__rank_names *names,
                       bool known, int skip) {
  int n = 0, listed = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int r = 0, seen = 0; r < op->size; r++) {
      const zt__board_view *v = &views[r];
      if (r == op->rank || v->known != known || (known && !absent(op, v)) || ++seen <= skip) continue;
      if (pass == 0) {
        n++;
        continue;
      }
      if (listed == 0) put(b, " %srank%s", zt__rank_world(names, r) >= 0 ? "world " : "", n > 1 ? "s" : "");
      int w = zt__rank_world(names, r);
      if (listed++ < 24) put(b, " %d", w >= 0 ? w : r);
    }
  if (listed > 24) put(b, " ... (%d in all)", listed);
}

#define DETAIL_MAX 6     /* ranks described in full; the rest only numbered */
#define DETAIL_BYTES 900 /* nor more once the message is this long (long names) */
#define MSG_MAX 1500     /* the message's bytes: it is carried inside later calls' messages */
static const char k_advice[] =
    ". This group is unusable now (MPI cannot cancel the operation): end the job with zt_comm_abort; if a rank is "
    "only slow, raise the limit (ZT_COMM_TIMEOUT or zt_comm_set_timeout)";

static void p2p_message(sbuf *b, const zt__timeout_info *op, const zt__board_view *views, const zt__rank_names *names,
                        const char *base, const char *tbuf) {
  char me[ZT__RANK_NAME], peer[ZT__RANK_NAME];
  bool send = op->kind == ZT__COLL_SEND;
  put(b, "%s at %s:%d (tag %d) %s %s timed out after %s on %s: the %s did not post the matching %s", op_label(op->kind),
      base, op->line, op->tag, send ? "to" : "from", NAME(op->peer, peer), tbuf, NAME(op->rank, me),
      send ? "receiver" : "sender", send ? "receive" : "send");
  const zt__board_view *v = op->peer >= 0 && op->peer < op->size ? &views[op->peer] : NULL;
  if (v && v->known) {
    put(b, " (");
    doing(b, v, state_of(v), names);
    put(b, ")");
  } else {
    put(b, " (what it is doing is unknown: it is not on this node%s%s)", v && v->why[0] ? ", and " : "",
        v && v->why[0] ? v->why : "");
  }
}

static void coll_message(sbuf *b, const zt__timeout_info *op, const zt__board_view *views, const zt__rank_names *names,
                         const char *base, const char *tbuf) {
  char me[ZT__RANK_NAME], who[ZT__RANK_NAME];
  put(b, "%s at %s:%d timed out after %s on %s, call #%llu on this group of %d ranks: ", op_label(op->kind), base,
      op->line, tbuf, NAME(op->rank, me), (unsigned long long)op->seq, op->size);
  int missing = 0, unknown = 0, shown = 0, shown_missing = 0;
  for (int r = 0; r < op->size; r++) {
    const zt__board_view *v = &views[r];
    if (r == op->rank) continue;
    if (!v->known) {
      unknown++;
      continue;
    }
    const char *state = state_of(v);
    bool room = shown < DETAIL_MAX && b->len < DETAIL_BYTES;
    if (!absent(op, v)) { /* in this call too: name it when its process is not running */
      if (state && room)
        put(b, "%s%s reached this call but its process (pid %d) is %s", shown++ ? "; " : "", NAME(r, who), v->pid,
            state);
      continue;
    }
    missing++;
    if (!room) continue;
    put(b, "%s%s ", shown++ ? "; " : "", NAME(r, who));
    shown_missing++;
    if (v->started < op->seq) {
      put(b, "did not arrive (%llu call%s behind: ", (unsigned long long)(op->seq - v->started),
          op->seq - v->started == 1 ? "" : "s");
      doing(b, v, state, names);
      put(b, ")");
    } else {
      put(b, "is at a different operation: %s at %s:%d (its call #%llu%s", op_label(v->last_kind), v->last_file,
          v->last_line, (unsigned long long)v->started,
          v->blocked == ZT__BLOCKED_COLL && v->blocked_arg == v->started ? ", waiting in it" : "");
      if (state) put(b, "; its process (pid %d) is %s", v->pid, state);
      put(b, ")");
    }
  }
  if (missing > shown_missing) {
    put(b, "; also not here:");
    list_ranks(b, op, views, names, true, shown_missing);
  }
  if (unknown) {
    put(b, "%sunknown for", shown ? "; " : "");
    list_ranks(b, op, views, names, false, 0);
    put(b, " (not on this node");
    int whys = 0;
    for (int r = 0; r < op->size; r++) { /* each distinct reason once: one per host not reached */
      const zt__board_view *v = &views[r];
      if (r == op->rank || v->known || !v->why[0]) continue;
      bool seen = false;
      for (int q = 0; q < r && !seen; q++) seen = q != op->rank && !views[q].known && !strcmp(views[q].why, v->why);
      if (!seen) put(b, "%s%s", whys++ ? "; " : ", and ", v->why);
    }
    if (!whys) put(b, ": the arrival board covers the ranks that share a node");
    put(b, ")");
  }
  if (!missing && !unknown && !shown)
    put(b, "every rank reached this call, so one of them stopped inside it (stopped or dead) or the transport "
           "failed");
}

zt_status zt__comm_timeout_error(const zt__timeout_info *op, const zt__board_view *views, const zt__rank_names *names) {
  char msg[MSG_MAX], tbuf[32];
  /* the details, then the advice, which a long list of ranks must not push out */
  sbuf b = {msg, sizeof msg - sizeof k_advice, 0};
  msg[0] = '\0';
  const char *base = op->file ? strrchr(op->file, '/') : NULL;
  base = base ? base + 1 : op->file ? op->file : "?";
  seconds(tbuf, sizeof tbuf, op->timeout_s);
  if (op->kind == ZT__COLL_SEND || op->kind == ZT__COLL_RECV)
    p2p_message(&b, op, views, names, base, tbuf);
  else
    coll_message(&b, op, views, names, base, tbuf);
  if (b.len + 1 >= b.cap) memcpy(msg + b.len - 3, "...", 3); /* cut */
  b.cap = sizeof msg;
  put(&b, "%s", k_advice);
  return ZT_ERR(ZT_STATUS_COMM, "%s", msg);
}
