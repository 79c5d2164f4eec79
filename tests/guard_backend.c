/* The guarded test device (ZT_DEVICE_GUARDED): memory the host cannot touch except through
 * its backend. Every byte comes from one mmap arena kept PROT_NONE; the arena is opened
 * (read-write) only inside backend calls and kernel runs (enter/exit, counted under a mutex
 * because offload's prefetch thread calls the backend too), so any direct host access to a
 * guarded tensor's bytes crashes with SIGSEGV. Its kernels and helpers are the cpu's: the
 * op slots it runs are the CPU kernel tables (kernel_type), so results must be bitwise the
 * CPU's. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/status_internal.h"
#include "guard_backend.h"
#include "core/backend.h"

#define ARENA_BYTES ((size_t)4 << 30) /* address space only (MAP_NORESERVE) */
#define ALIGN ((size_t)64)
#define MAX_FREE 65536

typedef struct span {
  size_t off, len;
} span;

static struct {
  pthread_mutex_t mu;
  char *base;
  span free_[MAX_FREE]; /* sorted by offset, coalesced */
  int n_free;
  int depth; /* open while > 0 */
  int64_t opens;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void guard_enter(void *ctx) {
  (void)ctx;
  pthread_mutex_lock(&g.mu);
  if (g.depth++ == 0) {
    ZT_ASSERT(mprotect(g.base, ARENA_BYTES, PROT_READ | PROT_WRITE) == 0);
    g.opens++;
  }
  pthread_mutex_unlock(&g.mu);
}

static void guard_exit(void *ctx) {
  (void)ctx;
  pthread_mutex_lock(&g.mu);
  ZT_ASSERT(g.depth > 0);
  if (--g.depth == 0) ZT_ASSERT(mprotect(g.base, ARENA_BYTES, PROT_NONE) == 0);
  pthread_mutex_unlock(&g.mu);
}

static size_t round_up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

/* First fit from the sorted free list; the bookkeeping lives on the host, never in the arena. */
static void *guard_alloc(void *ctx, size_t bytes, zt_device dev) {
  (void)ctx, (void)dev;
  size_t n = round_up(bytes);
  void *p = NULL;
  pthread_mutex_lock(&g.mu);
  for (int i = 0; i < g.n_free; i++)
    if (g.free_[i].len >= n) {
      p = g.base + g.free_[i].off;
      g.free_[i].off += n;
      g.free_[i].len -= n;
      if (!g.free_[i].len) {
        memmove(&g.free_[i], &g.free_[i + 1], sizeof(span) * (size_t)(g.n_free - i - 1));
        g.n_free--;
      }
      break;
    }
  pthread_mutex_unlock(&g.mu);
  return p;
}

static void guard_free(void *ctx, void *ptr, size_t bytes, zt_device dev) {
  (void)ctx, (void)dev;
  size_t off = (size_t)((char *)ptr - g.base), n = round_up(bytes);
  pthread_mutex_lock(&g.mu);
  int i = 0;
  while (i < g.n_free && g.free_[i].off < off) i++;
  bool merge_prev = i > 0 && g.free_[i - 1].off + g.free_[i - 1].len == off;
  bool merge_next = i < g.n_free && off + n == g.free_[i].off;
  if (merge_prev && merge_next) {
    g.free_[i - 1].len += n + g.free_[i].len;
    memmove(&g.free_[i], &g.free_[i + 1], sizeof(span) * (size_t)(g.n_free - i - 1));
    g.n_free--;
  } else if (merge_prev) {
    g.free_[i - 1].len += n;
  } else if (merge_next) {
    g.free_[i].off = off;
    g.free_[i].len += n;
  } else {
    ZT_ASSERT(g.n_free < MAX_FREE);
    memmove(&g.free_[i + 1], &g.free_[i], sizeof(span) * (size_t)(g.n_free - i));
    g.free_[i] = (span){off, n};
    g.n_free++;
  }
  pthread_mutex_unlock(&g.mu);
}

/* Each member: open the arena, run the cpu backend's member, close it. */
#define CPU (&zt__cpu_backend)
static void g_fill(void *c, zt_tensor *t, double v) {
  guard_enter(c);
  CPU->fill(CPU->ctx, t, v);
  guard_exit(c);
}
static void g_copy(void *c, zt_tensor *d, const zt_tensor *s) {
  guard_enter(c);
  CPU->copy(CPU->ctx, d, s);
  guard_exit(c);
}
static void g_cast(void *c, void *d, zt_dtype ddt, const void *s, zt_dtype sdt, int64_t n) {
  guard_enter(c);
  CPU->cast(CPU->ctx, d, ddt, s, sdt, n);
  guard_exit(c);
}
static void g_write(void *c, void *d, const void *h, size_t n, zt__stream *st) {
  guard_enter(c);
  CPU->write(CPU->ctx, d, h, n, st);
  guard_exit(c);
}
static void g_read(void *c, void *h, const void *s, size_t n, zt__stream *st) {
  guard_enter(c);
  CPU->read(CPU->ctx, h, s, n, st);
  guard_exit(c);
}
static void g_move(void *c, void *d, const void *s, size_t n, zt__stream *st) {
  guard_enter(c);
  CPU->move(CPU->ctx, d, s, n, st);
  guard_exit(c);
}
static void g_add_into(void *c, zt_tensor *d, const zt_tensor *s) {
  guard_enter(c);
  CPU->add_into(CPU->ctx, d, s);
  guard_exit(c);
}
static void g_scale(void *c, zt_tensor *t, double s) {
  guard_enter(c);
  CPU->scale(CPU->ctx, t, s);
  guard_exit(c);
}
static void g_add_div(void *c, zt_tensor *d, const zt_tensor *s, double div) {
  guard_enter(c);
  CPU->add_div(CPU->ctx, d, s, div);
  guard_exit(c);
}
static void g_sum_to_shape(void *c, const zt_tensor *gr, zt_tensor *out) {
  guard_enter(c);
  CPU->sum_to_shape(CPU->ctx, gr, out);
  guard_exit(c);
}
static double g_sum_squares(void *c, const zt_tensor *t, int64_t lo, int64_t n) {
  guard_enter(c);
  double r = CPU->sum_squares(CPU->ctx, t, lo, n);
  guard_exit(c);
  return r;
}
static void g_adamw(void *c, zt_tensor *w, const zt_tensor *gr, zt_tensor *m, zt_tensor *v, const zt__optim_update *u) {
  guard_enter(c);
  CPU->adamw(CPU->ctx, w, gr, m, v, u);
  guard_exit(c);
}
static void g_sgd(void *c, zt_tensor *w, const zt_tensor *gr, zt_tensor *b, const zt__optim_update *u) {
  guard_enter(c);
  CPU->sgd(CPU->ctx, w, gr, b, u);
  guard_exit(c);
}

static zt__backend guard_backend = {
    .name = "guarded",
    .type = ZT_DEVICE_GUARDED,
    .kernel_type = ZT_DEVICE_CPU, /* its op slots alias the CPU kernel tables */
    .host_accessible = false,
    .alloc = guard_alloc,
    .free = guard_free,
    .enter = guard_enter,
    .exit = guard_exit,
    .fill = g_fill,
    .copy = g_copy,
    .cast = g_cast,
    .write = g_write,
    .read = g_read,
    .move = g_move,
    .add_into = g_add_into,
    .scale = g_scale,
    .add_div = g_add_div,
    .sum_to_shape = g_sum_to_shape,
    .sum_squares = g_sum_squares,
    .adamw = g_adamw,
    .sgd = g_sgd,
};

void zt_test_guard_register(void) {
  if (!g.base) {
    void *p = mmap(NULL, ARENA_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    ZT_ASSERT(p != MAP_FAILED);
    g.base = p;
    g.free_[0] = (span){0, ARENA_BYTES};
    g.n_free = 1;
  }
  zt_status s = zt__backend_register(ZT_DEVICE_GUARDED, &guard_backend);
  ZT_ASSERT(s == ZT_OK);
}

int64_t zt_test_guard_opens(void) {
  pthread_mutex_lock(&g.mu);
  int64_t n = g.opens;
  pthread_mutex_unlock(&g.mu);
  return n;
}

bool zt_test_guard_is_closed(void) {
  pthread_mutex_lock(&g.mu);
  bool c = g.depth == 0;
  pthread_mutex_unlock(&g.mu);
  return c;
}

const void *zt_test_guard_backend(void) { return &guard_backend; }
