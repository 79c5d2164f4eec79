/* The list scheduler the zero-bubble and controllable-memory families are built with (in the
 * spirit of the Zero Bubble paper's automatic scheduling): it plays the pipeline on a clock
 * and, whenever a rank is free, gives it the most urgent work that is ready: a backward (B is
 * on the critical path: the previous stage waits for it), else a forward while memory allows,
 * else a deferred W (which nothing waits for: it fills what would be a bubble). The families
 * differ in placement, split and the per-rank activation limit (generators.c). */
#include <math.h>
#include <stdlib.h>

#include "core/status_internal.h"
#include "pipeline_internal.h"

typedef struct rank_state {
  double avail;
  int *next_f, *next_b; /* per chunk */
  int live;             /* chunk units */
  int *wq, wq_head, wq_tail; /* deferred W's: slots (stage * M + mb) */
  int done, total;
} rank_state;

typedef struct engine {
  const zt__pp_greedy *g;
  int S, M;
  double *f_end, *b_end; /* per slot; -1 until scheduled */
  rank_state *rs;
} engine;

static int stage_of(const zt__pp_greedy *g, int r, int c) {
  if (g->placement == ZT_PIPELINE_PLACEMENT_V) return c == 0 ? r : 2 * g->ranks - 1 - r;
  return c * g->ranks + r;
}
static int rank_of(const zt__pp_greedy *g, int st) {
  int P = g->ranks;
  if (g->placement == ZT_PIPELINE_PLACEMENT_V) return st < P ? st : 2 * P - 1 - st;
  return st % P;
}

/* When the input of (op, stage, mb) is there on rank r, or INFINITY while unknown. */
static double ready_at(const engine *e, int r, bool fwd, int st, int mb) {
  const zt__pp_greedy *g = e->g;
  double t = 0;
  if (fwd) {
    if (st > 0) {
      double x = e->f_end[(st - 1) * e->M + mb];
      if (x < 0) return INFINITY;
      t = x + (rank_of(g, st - 1) != r ? g->costs.comm : 0);
    }
    return t;
  }
  double x = e->f_end[st * e->M + mb];
  if (x < 0) return INFINITY;
  t = x;
  if (st < e->S - 1) {
    double y = e->b_end[(st + 1) * e->M + mb];
    if (y < 0) return INFINITY;
    y += rank_of(g, st + 1) != r ? g->costs.comm : 0;
    if (y > t) t = y;
  }
  return t;
}

typedef struct choice {
  zt_pipeline_op op;
  int chunk, mb;
  double start;
} choice;

/* Is candidate (mb, stage) more urgent than the best so far? Older microbatch first, then the
 * later stage (nearer the loss: it frees memory sooner). */
static bool before(int mb, int st, int best_mb, int best_st) { return mb < best_mb || (mb == best_mb && st > best_st); }

static bool decide(const engine *e, int r, choice *out) {
  const zt__pp_greedy *g = e->g;
  const rank_state *s = &e->rs[r];
  double t = s->avail;
  int V = g->chunks;
  choice now[2] = {{.chunk = -1}, {.chunk = -1}}, later = {.chunk = -1, .start = INFINITY};
  for (int kind = 0; kind < 2; kind++) /* 0: backward, 1: forward */
    for (int c = 0; c < V; c++) {
      int mb = kind ? s->next_f[c] : s->next_b[c], st = stage_of(g, r, c);
      if (mb >= e->M) continue;
      if (kind) {
        int need = (g->placement == ZT_PIPELINE_PLACEMENT_V && c == 0 && g->limit[r] >= 2) ? 2 : 1;
        if (s->live + need > g->limit[r]) continue;
      }
      double at = ready_at(e, r, kind == 1, st, mb);
      zt_pipeline_op op = kind ? ZT_PIPELINE_OP_F : (g->split ? ZT_PIPELINE_OP_B : ZT_PIPELINE_OP_BW);
      if (at <= t) {
        choice *n = &now[kind];
        if (n->chunk < 0 || before(mb, st, n->mb, stage_of(g, r, n->chunk))) *n = (choice){op, c, mb, t};
      } else if (at < later.start) {
        later = (choice){op, c, mb, at};
      }
    }
  /* a W would block a backward that arrives while it runs: wait for the backward instead,
   * it is on the critical path (the previous stage waits for it) and the W keeps */
  double w_next = s->wq_head < s->wq_tail ? zt__pp_cost(&g->costs, g->chunks, ZT_PIPELINE_OP_W, s->wq[s->wq_head] / e->M) : 0;
  bool b_soon = later.chunk >= 0 && later.op != ZT_PIPELINE_OP_F && later.start < t + w_next;
  if (now[0].chunk >= 0) *out = now[0];
  else if (now[1].chunk >= 0) *out = now[1];
  else if (s->wq_head < s->wq_tail && !b_soon) *out = (choice){ZT_PIPELINE_OP_W, -1, -1, t};
  else if (later.chunk >= 0) *out = later;
  else return false;
  return true;
}

static zt_status commit(engine *e, int r, choice c, zt_pipeline_schedule *out) {
  const zt__pp_greedy *g = e->g;
  rank_state *s = &e->rs[r];
  int st = c.chunk >= 0 ? stage_of(g, r, c.chunk) : -1, slot;
  double end;
  switch (c.op) {
    case ZT_PIPELINE_OP_F:
      end = c.start + zt__pp_cost(&g->costs, g->chunks, ZT_PIPELINE_OP_F, st);
      e->f_end[st * e->M + c.mb] = end;
      s->next_f[c.chunk]++, s->live++;
      break;
    case ZT_PIPELINE_OP_B:
    case ZT_PIPELINE_OP_BW:
      end = c.start + zt__pp_cost(&g->costs, g->chunks, c.op, st);
      e->b_end[st * e->M + c.mb] = end;
      s->next_b[c.chunk]++;
      if (c.op == ZT_PIPELINE_OP_B) s->wq[s->wq_tail++] = st * e->M + c.mb;
      else s->live--;
      break;
    default:
      slot = s->wq[s->wq_head++];
      st = slot / e->M, c.mb = slot % e->M;
      end = c.start + zt__pp_cost(&g->costs, g->chunks, ZT_PIPELINE_OP_W, st);
      s->live--;
      break;
  }
  s->avail = end;
  s->done++;
  return zt_pipeline_schedule_push(out, r, (zt_pipeline_action){c.op, st, c.mb});
}

static void engine_free(engine *e) {
  for (int r = 0; e->rs && r < e->g->ranks; r++) {
    free(e->rs[r].next_f);
    free(e->rs[r].next_b);
    free(e->rs[r].wq);
  }
  free(e->rs);
  free(e->f_end);
  free(e->b_end);
}

zt_status zt__pp_greedy_run(const zt__pp_greedy *g, zt_pipeline_schedule **out) {
  *out = NULL;
  int P = g->ranks, V = g->chunks, M = g->microbatches;
  engine e = {.g = g, .S = P * V, .M = M};
  size_t slots = (size_t)e.S * (size_t)M;
  e.f_end = malloc(slots * sizeof(double));
  e.b_end = malloc(slots * sizeof(double));
  e.rs = calloc((size_t)P, sizeof *e.rs);
  bool ok = e.f_end && e.b_end && e.rs;
  for (int r = 0; ok && r < P; r++) {
    rank_state *s = &e.rs[r];
    s->next_f = calloc((size_t)V, sizeof(int));
    s->next_b = calloc((size_t)V, sizeof(int));
    s->wq = malloc((size_t)V * (size_t)M * sizeof(int));
    s->total = V * M * (g->split ? 3 : 2);
    ok = s->next_f && s->next_b && s->wq;
  }
  zt_pipeline_schedule *o = NULL;
  zt_status st = ok ? zt_pipeline_schedule_new(P, V, M, g->placement, &o)
                    : ZT_ERR(ZT_STATUS_OOM, "out of host memory generating a pipeline schedule");
  for (size_t k = 0; ok && k < slots; k++) e.f_end[k] = e.b_end[k] = -1;
  while (st == ZT_OK) {
    int best = -1;
    choice bc = {0};
    bool left = false;
    for (int r = 0; r < P; r++) {
      if (e.rs[r].done == e.rs[r].total) continue;
      left = true;
      choice c;
      if (decide(&e, r, &c) && (best < 0 || c.start < bc.start)) best = r, bc = c;
    }
    if (!left) break;
    if (best < 0) {
      int r = 0;
      while (e.rs[r].done == e.rs[r].total) r++;
      st = ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "no schedule fits an activation limit of %g per rank (rank %d holds %g and can neither run a "
                  "backward nor start a forward); raise the limit",
                  g->limit[r] / (double)V, r, e.rs[r].live / (double)V);
      break;
    }
    st = commit(&e, best, bc, o);
  }
  engine_free(&e);
  if (st != ZT_OK) {
    zt_pipeline_schedule_free(o);
    return st;
  }
  *out = o;
  return ZT_OK;
}
