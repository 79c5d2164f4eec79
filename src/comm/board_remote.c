/* The arrival board across hosts.
 *
 * The board (board.c) lives in one node's shared memory, so a timed-out rank can read only
 * the entries of the ranks on its own host. For the others every rank runs a board server:
 * a thread with a listening TCP socket that answers, for one board slot, the entries of its
 * node's ranks (read from that node's shared memory, with each process's state read from
 * that host's /proc). A timed-out rank asks one server per other node, under a short
 * deadline: a server whose process is stopped (SIGSTOP stops all its threads) does not
 * answer, so the next rank's server on that node is tried; a node none of whose servers
 * answers is reported as unreachable, with the first error seen.
 *
 * Why not MPI: passive-target RMA or a message over TCP needs the target's MPI progress,
 * which a stopped or wedged rank lacks, and the diagnosis must never hang. A server thread
 * needs nothing from its process's main thread; it reads memory that only atomics write.
 *
 * Every rank learns every server's addresses at start (mpi.c gathers zt__board_addr over the
 * world). A request carries the job's nonce, which a server checks, so a stray connection
 * (another job, a reused port, loopback in another network namespace) is not answered, and
 * an answer carries it back. Both ends are the same build (the start-up fingerprint), so the
 * wire structs are sent as they are, with every byte set. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/status_internal.h"
#include "comm/comm_internal.h"

#define MAGIC_ASK 0x7a74627171ULL /* "qqbtz" */
#define MAGIC_ANSWER 0x7a74627261ULL
#define READ_S 1.0 /* a server waits this long for a request's bytes */

typedef struct wire_ask {
  uint64_t magic, nonce;
  int32_t slot, pad;
} wire_ask;

typedef struct wire_view {
  int32_t world, known;
  uint64_t started, blocked_arg;
  int32_t last_kind, last_line, blocked, pid;
  char last_file[32];
  char state[ZT__BOARD_STATE];
} wire_view;

typedef struct wire_head {
  uint64_t magic, nonce;
  int32_t node, n;
} wire_head;

/* ------------------------------------------------------------ the server */
static struct {
  bool running;
  pthread_t thread;
  int fd, wake[2];
  uint64_t nonce;
  int node, n;
  zt__board_entry **rows; /* node rank -> its ZT__BOARD_SLOTS entries (borrowed from mpi.c) */
  int *world;             /* node rank -> world rank (owned) */
} g_srv = {.fd = -1, .wake = {-1, -1}};

static double now(void) { return zt_clock_now(); }

/* Wait for fd to be ready for events until deadline; false on timeout or error. */
static bool wait_fd(int fd, short events, double deadline) {
  for (;;) {
    double left = deadline - now();
    if (left <= 0) return false;
    struct pollfd p = {fd, events, 0};
    int r = poll(&p, 1, (int)(left * 1e3) + 1);
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

/* Read or write exactly n bytes before deadline (a nonblocking socket). */
static bool xfer(int fd, void *buf, size_t n, bool out, double deadline) {
  char *p = buf;
  while (n) {
    ssize_t k = out ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (k > 0) {
      p += k, n -= (size_t)k;
      continue;
    }
    if (k == 0) return false; /* closed */
    if (errno == EINTR) continue;
    if ((errno != EAGAIN && errno != EWOULDBLOCK) || !wait_fd(fd, out ? POLLOUT : POLLIN, deadline)) return false;
  }
  return true;
}

static void answer(int c) {
  wire_ask q;
  if (!xfer(c, &q, sizeof q, false, now() + READ_S) || q.magic != MAGIC_ASK || q.nonce != g_srv.nonce || q.slot < 0 ||
      q.slot >= ZT__BOARD_SLOTS)
    return; /* not ours: no answer */
  size_t bytes = sizeof(wire_head) + sizeof(wire_view) * (size_t)g_srv.n;
  char *out = calloc(1, bytes);
  if (!out) return;
  wire_head h = {MAGIC_ANSWER, g_srv.nonce, g_srv.node, g_srv.n};
  memcpy(out, &h, sizeof h);
  for (int i = 0; i < g_srv.n; i++) {
    zt__board_view v;
    zt__board_read(&g_srv.rows[i][q.slot], &v);
    wire_view w;
    memset(&w, 0, sizeof w);
    w.world = g_srv.world[i];
    w.known = v.known;
    w.started = v.started, w.blocked_arg = v.blocked_arg;
    w.last_kind = v.last_kind, w.last_line = v.last_line, w.blocked = v.blocked, w.pid = v.pid;
    memcpy(w.last_file, v.last_file, sizeof v.last_file);
    const char *st = v.known ? zt__proc_state(v.pid) : NULL;
    snprintf(w.state, sizeof w.state, "%s", st ? st : "");
    memcpy(out + sizeof h + sizeof w * (size_t)i, &w, sizeof w);
  }
  xfer(c, out, bytes, true, now() + READ_S);
  free(out);
}

static void *serve_main(void *arg) {
  (void)arg;
  for (;;) {
    struct pollfd p[2] = {{g_srv.fd, POLLIN, 0}, {g_srv.wake[0], POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (p[1].revents) break;
    if (!(p[0].revents & POLLIN)) continue;
    int c = accept(g_srv.fd, NULL, NULL);
    if (c < 0) continue;
    fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK);
    answer(c);
    close(c);
  }
  return NULL;
}

/* This host's IPv4 addresses, loopback last (tried last: in another network namespace it is
 * another host's loopback, which the nonce rejects). */
static int host_addrs(uint32_t *ip, int cap) {
  struct ifaddrs *all = NULL;
  if (getifaddrs(&all) != 0) return 0;
  int n = 0;
  for (int pass = 0; pass < 2; pass++)
    for (struct ifaddrs *a = all; a && n < cap; a = a->ifa_next) {
      if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || !(a->ifa_flags & IFF_UP)) continue;
      if (!!(a->ifa_flags & IFF_LOOPBACK) != (pass == 1)) continue;
      ip[n++] = ((struct sockaddr_in *)a->ifa_addr)->sin_addr.s_addr;
    }
  freeifaddrs(all);
  return n;
}

zt_status zt__board_serve(uint64_t nonce, int node, int n, zt__board_entry *const *rows, const int *world,
                          zt__board_addr *me) {
  if (g_srv.running) return ZT_ERR(ZT_STATUS_STATE, "the board server is already running");
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ZT_ERR(ZT_STATUS_IO, "board server: socket: %s", strerror(errno));
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY), .sin_port = 0};
  socklen_t len = sizeof a;
  zt_status s = ZT_OK;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 1024) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &len) != 0)
    s = ZT_ERR(ZT_STATUS_IO, "board server: bind/listen: %s", strerror(errno));
  int *w = s ? NULL : malloc(sizeof *w * (size_t)(n > 0 ? n : 1));
  if (!s && !w) s = ZT_ERR(ZT_STATUS_OOM, "board server: out of host memory");
  if (!s && pipe(g_srv.wake) != 0) s = ZT_ERR(ZT_STATUS_IO, "board server: pipe: %s", strerror(errno));
  if (s) {
    close(fd);
    free(w);
    return s;
  }
  memcpy(w, world, sizeof *w * (size_t)n);
  g_srv.fd = fd, g_srv.nonce = nonce, g_srv.node = node, g_srv.n = n, g_srv.world = w;
  g_srv.rows = (zt__board_entry **)rows;
  /* the thread takes no signal: the process's handlers run where they always did */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&g_srv.thread, NULL, serve_main, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    close(fd), close(g_srv.wake[0]), close(g_srv.wake[1]);
    free(w);
    g_srv.fd = g_srv.wake[0] = g_srv.wake[1] = -1;
    g_srv.world = NULL;
    return ZT_ERR(ZT_STATUS_IO, "board server: cannot start its thread: %s", strerror(rc));
  }
  g_srv.running = true;
  me->port = ntohs(a.sin_port);
  me->n_ip = host_addrs(me->ip, ZT__BOARD_ADDRS);
  return ZT_OK;
}

void zt__board_serve_stop(void) {
  if (!g_srv.running) return;
  char b = 1;
  ssize_t unused = write(g_srv.wake[1], &b, 1);
  (void)unused;
  pthread_join(g_srv.thread, NULL);
  close(g_srv.fd), close(g_srv.wake[0]), close(g_srv.wake[1]);
  free(g_srv.world);
  g_srv.fd = g_srv.wake[0] = g_srv.wake[1] = -1;
  g_srv.world = NULL;
  g_srv.running = false;
}

/* ------------------------------------------------------------ asking */
/* How one try ended: answered, not connected (try the server's next address), or connected
 * without an answer (its process is stopped or busy: try the next server). */
typedef enum { ASK_OK, ASK_NO_CONNECT, ASK_NO_ANSWER } ask_result;

/* One server at ip:port: its node's views of the n world ranks into out, or why not. */
static ask_result ask_one(uint32_t ip, int port, uint64_t nonce, int node, int slot, int n, const int *world,
                    zt__board_view *out, double deadline, char *why, size_t cap) {
  char where[48];
  struct in_addr ia = {ip};
  snprintf(where, sizeof where, "%s:%d", inet_ntoa(ia), port);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    snprintf(why, cap, "socket: %s", strerror(errno));
    return ASK_NO_CONNECT;
  }
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = ip, .sin_port = htons((uint16_t)port)};
  bool ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0 || errno == EINPROGRESS;
  int err = ok ? 0 : errno;
  if (ok && !wait_fd(fd, POLLOUT, deadline)) ok = false, err = ETIMEDOUT;
  socklen_t el = sizeof err;
  if (ok && (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err)) ok = false;
  if (!ok) {
    if (err == ECONNREFUSED)
      snprintf(why, cap, "%s: connection refused (no process listens there: the rank's is gone)", where);
    else if (err == ETIMEDOUT)
      snprintf(why, cap, "%s: no connection in time (the host is unreachable)", where);
    else
      snprintf(why, cap, "%s: %s", where, strerror(err ? err : EIO));
    close(fd);
    return ASK_NO_CONNECT;
  }
  wire_ask q = {MAGIC_ASK, nonce, slot, 0};
  wire_head h;
  ok = xfer(fd, &q, sizeof q, true, deadline) && xfer(fd, &h, sizeof h, false, deadline);
  if (!ok || h.magic != MAGIC_ANSWER || h.nonce != nonce || h.node != node || h.n < 0 || h.n > 1 << 20) {
    snprintf(why, cap, "%s: %s", where, ok ? "not this job's board server" : "no answer (its process is stopped or busy)");
    close(fd);
    return ok ? ASK_NO_CONNECT : ASK_NO_ANSWER;
  }
  for (int i = 0; i < h.n && ok; i++) {
    wire_view w;
    ok = xfer(fd, &w, sizeof w, false, deadline);
    for (int k = 0; ok && k < n; k++) {
      if (world[k] != w.world) continue;
      zt__board_view *v = &out[k];
      memset(v, 0, sizeof *v);
      v->known = w.known != 0, v->remote = true;
      v->started = w.started, v->blocked_arg = w.blocked_arg;
      v->last_kind = w.last_kind, v->last_line = w.last_line, v->blocked = w.blocked, v->pid = w.pid;
      memcpy(v->last_file, w.last_file, ZT__BOARD_FILE);
      v->last_file[ZT__BOARD_FILE] = '\0';
      memcpy(v->state, w.state, sizeof v->state);
      v->state[sizeof v->state - 1] = '\0';
    }
  }
  close(fd);
  if (!ok) snprintf(why, cap, "%s: the answer was cut short", where);
  return ok ? ASK_OK : ASK_NO_ANSWER;
}

#define TRY_S 1.0 /* one try's limit: a server answers in well under a millisecond */

bool zt__board_ask(const zt__board_addr *addrs, int n_addrs, int node, uint64_t nonce, int slot, int n, const int *world,
                   zt__board_view *out, double deadline, char *why, size_t cap) {
  snprintf(why, cap, "no board server is known there");
  bool first = true;
  for (int a = 0; a < n_addrs; a++) {
    const zt__board_addr *s = &addrs[a];
    if (s->node != node || s->port == 0) continue;
    for (int i = 0; i < s->n_ip && i < ZT__BOARD_ADDRS; i++) {
      double t = now();
      if (t >= deadline) return false;
      char e[160];
      ask_result r = ask_one(s->ip[i], s->port, nonce, node, slot, n, world, out, t + TRY_S < deadline ? t + TRY_S : deadline,
                             e, sizeof e);
      if (r == ASK_OK) return true;
      if (first) snprintf(why, cap, "%s", e), first = false;
      if (r == ASK_NO_ANSWER) break; /* its process does not run: its other addresses reach the same */
    }
  }
  return false;
}
