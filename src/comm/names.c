/* How messages name ranks: by world rank (the one a user sees in mpirun's output and
 * OMPI_COMM_WORLD_RANK), with its host when the job spans several, the rank in the group when
 * it differs and the label the application's namer gives (zt_comm_set_rank_namer), e.g.
 * "world rank 3 on node2 (stage 1 of 2, replica 1 of 2; group rank 1)". Without a world rank (the local backend, synthetic tests)
 * a rank is "rank R", as a group knows it. The namer is process-wide, read under a mutex. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "comm/comm_internal.h"

static pthread_mutex_t g_namer_mu = PTHREAD_MUTEX_INITIALIZER;
static zt_comm_rank_namer g_namer;
static void *g_namer_ud;

void zt_comm_set_rank_namer(zt_comm_rank_namer fn, void *user_data) {
  pthread_mutex_lock(&g_namer_mu);
  g_namer = fn;
  g_namer_ud = fn ? user_data : NULL;
  pthread_mutex_unlock(&g_namer_mu);
}

zt__rank_names zt__rank_names_of(const int *world, int size, const char *(*host)(int world_rank)) {
  zt__rank_names n = {.world = world, .size = size, .host = host};
  pthread_mutex_lock(&g_namer_mu);
  n.fn = g_namer;
  n.ud = g_namer_ud;
  pthread_mutex_unlock(&g_namer_mu);
  return n;
}

int zt__rank_world(const zt__rank_names *n, int r) {
  if (!n || !n->world || r < 0 || r >= n->size) return -1;
  return n->world[r] >= 0 ? n->world[r] : -1;
}

/* The application's label for world rank w, in buf ("" when none). */
static void label_of(const zt__rank_names *n, int w, char *buf, size_t cap) {
  buf[0] = '\0';
  if (!n->fn || w < 0) return;
  n->fn(w, buf, cap, n->ud);
  buf[cap - 1] = '\0'; /* a namer that filled the buffer without a NUL */
}

const char *zt__rank_name(const zt__rank_names *n, int r, char *buf, size_t cap) {
  if (!buf || cap == 0) return "";
  int w = zt__rank_world(n, r);
  if (w < 0) {
    snprintf(buf, cap, "rank %d", r);
    return buf;
  }
  char label[ZT__RANK_LABEL], at[ZT__HOST_NAME + 8] = "";
  label_of(n, w, label, sizeof label);
  const char *h = n->host ? n->host(w) : NULL;
  if (h && *h) snprintf(at, sizeof at, " on %s", h);
  bool other = w != r;
  if (!label[0] && !other)
    snprintf(buf, cap, "world rank %d%s", w, at);
  else if (!label[0])
    snprintf(buf, cap, "world rank %d%s (group rank %d)", w, at, r);
  else if (!other)
    snprintf(buf, cap, "world rank %d%s (%s)", w, at, label);
  else
    snprintf(buf, cap, "world rank %d%s (%s; group rank %d)", w, at, label, r);
  return buf;
}
