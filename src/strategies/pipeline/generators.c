/* Schedule generators. gpipe, 1f1b, interleaved, zb-h1, zb-v (M >= 2P) and dualpipev follow
 * their papers' fixed orders; zb-h2, zb-v (M < 2P) and auto are the list scheduler of greedy.c
 * with each family's placement and activation limit; v-half and v-min are the best (under
 * their limit) of the controllable-memory paper's building blocks and the list scheduler. All
 * produce the compute-only form. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "pipeline_internal.h"

static const char NAMES[] = "gpipe 1f1b interleaved zb-h1 zb-h2 zb-v v-half v-min dualpipev auto";

const char *zt_pipeline_generator_names(void) { return NAMES; }

#define PUSH(r, op, st, mb) ZT_TRY(zt_pipeline_schedule_push(s, (r), (zt_pipeline_action){(op), (st), (mb)}))

/* GPipe: all forwards, then all backwards (memory M per rank). */
static zt_status gen_gpipe(zt_pipeline_schedule *s) {
  for (int r = 0; r < s->ranks; r++) {
    for (int m = 0; m < s->microbatches; m++) PUSH(r, ZT_PIPELINE_OP_F, r, m);
    for (int m = 0; m < s->microbatches; m++) PUSH(r, ZT_PIPELINE_OP_BW, r, m);
  }
  return ZT_OK;
}

/* 1F1B and its interleaved form: on rank r, virtual microbatch k (of M*V) is chunk
 * (k / P) % V of microbatch (k / (P*V)) * P + k % P, backwards with the chunks reversed; a
 * warmup of forwards, then one forward and one backward in turn, then the remaining backwards. */
static zt_status gen_1f1b(zt_pipeline_schedule *s) {
  int P = s->ranks, V = s->chunks, M = s->microbatches, total = M * V;
  for (int r = 0; r < P; r++) {
    int warm = V == 1 ? P - 1 - r : 2 * (P - 1 - r) + (V - 1) * P;
    if (warm > total) warm = total;
    int nf = 0, nb = 0;
#define VMB(k) (V == 1 ? (k) : ((k) / (P * V)) * P + (k) % P)
#define FWD_CHUNK(k) (((k) / P) % V)
#define BWD_CHUNK(k) (V - 1 - ((k) / P) % V)
    for (; nf < warm; nf++) PUSH(r, ZT_PIPELINE_OP_F, FWD_CHUNK(nf) * P + r, VMB(nf));
    for (; nf < total; nf++, nb++) {
      PUSH(r, ZT_PIPELINE_OP_F, FWD_CHUNK(nf) * P + r, VMB(nf));
      PUSH(r, ZT_PIPELINE_OP_BW, BWD_CHUNK(nb) * P + r, VMB(nb));
    }
    for (; nb < total; nb++) PUSH(r, ZT_PIPELINE_OP_BW, BWD_CHUNK(nb) * P + r, VMB(nb));
#undef VMB
#undef FWD_CHUNK
#undef BWD_CHUNK
  }
  return ZT_OK;
}

/* ZB-H1: 1F1B's order of F and B, each B followed by the W of the oldest pending
 * microbatch once rank r has more than r pending: the later ranks push their W's towards the
 * tail, where they would otherwise wait, and every rank holds at most 1F1B's peak (P). */
static zt_status gen_zbh1(zt_pipeline_schedule *s) {
  int P = s->ranks, M = s->microbatches;
  for (int r = 0; r < P; r++) {
    int warm = P - 1 - r < M ? P - 1 - r : M, nf = 0, nb = 0, nw = 0;
    for (; nf < warm; nf++) PUSH(r, ZT_PIPELINE_OP_F, r, nf);
    while (nb < M) {
      if (nf < M) {
        PUSH(r, ZT_PIPELINE_OP_F, r, nf);
        nf++;
      }
      PUSH(r, ZT_PIPELINE_OP_B, r, nb);
      if (++nb - nw > r) {
        PUSH(r, ZT_PIPELINE_OP_W, r, nw);
        nw++;
      }
    }
    for (; nw < M; nw++) PUSH(r, ZT_PIPELINE_OP_W, r, nw);
  }
  return ZT_OK;
}

/* DualPipeV's phases on rank r (chunk 0 = stage r, chunk 1 = stage 2P-1-r; each chunk's
 * microbatches in order): 2(P-r-1) forwards of chunk 0; r+1 pairs F0 F1; P-r-1 of B1 W1 F1;
 * M-2P+r+1 of F0 B1 W1 F1 B0 W0 (DualPipe overlaps each F with the B next to it; here they
 * run one after the other); P-r-1 of B1 W1 F1 B0 W0; r+1 of B1 B0 with their W's deferred;
 * P-r-1 of W B0 (W deferred); then the deferred W's. */
typedef struct dpv {
  zt_pipeline_schedule *s;
  int r, next_f[2], next_b[2];
  int *queue, q_head, q_tail; /* deferred W's: stage * M + mb */
} dpv;

static int dpv_stage(const dpv *d, int c) { return c == 0 ? d->r : 2 * d->s->ranks - 1 - d->r; }
/* F of chunk c's next microbatch; none left: nothing. */
static zt_status dpv_f(dpv *d, int c) {
  if (d->next_f[c] >= d->s->microbatches) return ZT_OK;
  return zt_pipeline_schedule_push(d->s, d->r, (zt_pipeline_action){ZT_PIPELINE_OP_F, dpv_stage(d, c), d->next_f[c]++});
}
/* B of chunk c; its W now (defer false) or queued. Nothing when the rank has not run the F
 * it needs (a phase longer than M allows). */
static zt_status dpv_b(dpv *d, int c, bool defer) {
  if (d->next_b[c] >= d->next_f[c]) return ZT_OK;
  int st = dpv_stage(d, c), mb = d->next_b[c]++;
  ZT_TRY(zt_pipeline_schedule_push(d->s, d->r, (zt_pipeline_action){ZT_PIPELINE_OP_B, st, mb}));
  if (!defer) return zt_pipeline_schedule_push(d->s, d->r, (zt_pipeline_action){ZT_PIPELINE_OP_W, st, mb});
  d->queue[d->q_tail++] = st * d->s->microbatches + mb;
  return ZT_OK;
}
/* The oldest deferred W (chunk < 0) or the oldest of chunk c; none pending: nothing. Taken
 * entries are marked -1 and skipped. */
static zt_status dpv_w(dpv *d, int chunk) {
  int M = d->s->microbatches;
  while (d->q_head < d->q_tail && d->queue[d->q_head] < 0) d->q_head++;
  for (int i = d->q_head; i < d->q_tail; i++) {
    int k = d->queue[i];
    if (k < 0 || (chunk >= 0 && k / M != dpv_stage(d, chunk))) continue;
    d->queue[i] = -1;
    return zt_pipeline_schedule_push(d->s, d->r, (zt_pipeline_action){ZT_PIPELINE_OP_W, k / M, k % M});
  }
  return ZT_OK;
}

/* One step of a phase: a list of moves, 'f'/'g' forward of chunk 0/1, 'b'/'c' B and W of
 * chunk 0/1, 'B'/'C' B of chunk 0/1 with its W deferred, 'w' the oldest deferred W, 'x'/'y'
 * the oldest deferred W of chunk 0/1. */
static zt_status dpv_steps(dpv *d, int times, const char *moves) {
  for (int i = 0; i < times; i++)
    for (const char *m = moves; *m; m++) {
      zt_status st = *m == 'f' || *m == 'g' ? dpv_f(d, *m == 'g')
                     : *m == 'w'            ? dpv_w(d, -1)
                     : *m == 'x' || *m == 'y' ? dpv_w(d, *m == 'y')
                                            : dpv_b(d, *m == 'c' || *m == 'C', *m == 'B' || *m == 'C');
      ZT_TRY(st);
    }
  return ZT_OK;
}

/* Every B left (chunk 1 before chunk 0 of a microbatch), then the deferred W's, chunk 1's first. */
static zt_status dpv_drain(dpv *d) {
  int M = d->s->microbatches;
  while (d->next_b[0] < M || d->next_b[1] < M) ZT_TRY(dpv_steps(d, 1, "CB"));
  ZT_TRY(dpv_steps(d, M, "y"));
  return dpv_steps(d, M, "x");
}

static zt_status gen_dualpipev_rank(dpv *d) {
  int P = d->s->ranks, M = d->s->microbatches, r = d->r;
  ZT_TRY(dpv_steps(d, 2 * (P - r - 1), "f"));
  ZT_TRY(dpv_steps(d, r + 1, "fg"));
  ZT_TRY(dpv_steps(d, P - r - 1, "cg"));
  ZT_TRY(dpv_steps(d, M - 2 * P + r + 1, "fcgb"));
  ZT_TRY(dpv_steps(d, P - r - 1, "cgb"));
  ZT_TRY(dpv_steps(d, r + 1, "CB"));
  ZT_TRY(dpv_steps(d, P - r - 1, "wB"));
  ZT_TRY(dpv_steps(d, 2 * d->s->microbatches, "w"));
  return ZT_OK;
}

/* ZB-V (Zero Bubble PP's handcrafted V schedule) on rank r: 2(P-r)-1 forwards of chunk 0;
 * r pairs F1 F0; P-r of F1 B1 W1 (the turn of the V comes back); then F0 B0 W0 F1 B1 W1 until
 * every forward ran (F0 while any is left); r of B0 B1 and P-r of B0 W0 with the other W's
 * deferred; the deferred W's last (chunk 1's, then chunk 0's). Every rank holds at most 2P
 * chunks (P microbatches: 1F1B's peak), and at F = B = W with M >= 2P nothing idles but the
 * fill ramp. Smaller M cuts the phases short; what they leave runs at the end. */
static zt_status gen_zbv_rank(dpv *d) {
  int P = d->s->ranks, M = d->s->microbatches, r = d->r;
  ZT_TRY(dpv_steps(d, 2 * (P - r) - 1, "f"));
  ZT_TRY(dpv_steps(d, r, "gf"));
  ZT_TRY(dpv_steps(d, P - r, "gc"));
  while (d->next_f[0] < M || d->next_f[1] < M) ZT_TRY(dpv_steps(d, 1, "fbgc"));
  ZT_TRY(dpv_steps(d, r, "BC"));
  ZT_TRY(dpv_steps(d, P - r, "Bx"));
  return dpv_drain(d);
}

static zt_status gen_v_fixed(zt_pipeline_schedule *s, zt_status (*rank_fn)(dpv *)) {
  int *queue = malloc(2 * (size_t)s->microbatches * sizeof *queue);
  if (!queue) return ZT_ERR(ZT_STATUS_OOM, "out of host memory generating a V-shape schedule");
  zt_status st = ZT_OK;
  for (int r = 0; r < s->ranks && st == ZT_OK; r++) {
    dpv d = {.s = s, .r = r, .queue = queue};
    st = rank_fn(&d);
  }
  free(queue);
  return st;
}

/* The list-scheduled families: placement, split and per-rank limit in chunk units. */
static zt_status gen_greedy(const zt_pipeline_gen_options *o, zt_pipeline_placement pl, int V, const int *limit,
                            const zt_pipeline_costs *c, zt_pipeline_schedule **out) {
  zt__pp_greedy g = {o->ranks, V, o->microbatches, pl, limit, true, *c};
  return zt__pp_greedy_run(&g, out);
}

/* V-Half and V-Min from a building block (the controllable-memory paper's construction): one
 * microbatch's F, B and W through the V's 2P stages, each action at the earliest time (in
 * chunk-action units, F = B = W) after its inputs whose residue modulo the interval k is still
 * free on its rank; W's after the B's, `wdelay` later at least. g blocks share the residues,
 * the j-th from offs[j]; microbatch m takes block m % g, shifted by k*(m/g); every rank's list is its actions in the order of those nominal times (distinct on a
 * rank, and each dependency's producer ends before its consumer starts, so no deadlock); the
 * simulator squeezes the gaps (warm-up and tail). The interval and the W delay set the
 * lifespans, hence the memory: a rank holds about (its two chunks' lifespans) / k chunks. */
typedef struct blk_item {
  long t;
  zt_pipeline_action a;
} blk_item;

static int blk_cmp(const void *x, const void *y) {
  long a = ((const blk_item *)x)->t, b = ((const blk_item *)y)->t;
  return (a > b) - (a < b);
}

static long blk_place(bool *occ, int k, long t) {
  while (occ[t % k]) t++;
  occ[t % k] = true;
  return t;
}

static zt_status gen_block(int P, int M, int k, int g, const int *offs, int wdelay, bool w_late, const int *cap,
                           zt_pipeline_schedule **out) {
  *out = NULL;
  int S = 2 * P;
  long F[g][S], B[g][S], W[g][S];
  bool occ[P][k];
  memset(occ, 0, sizeof occ);
#define BLK_RANK(st) ((st) < P ? (st) : S - 1 - (st))
  for (int j = 0; j < g; j++) {
    for (int st = 0; st < S; st++)
      F[j][st] = blk_place(occ[BLK_RANK(st)], k, st ? F[j][st - 1] + 1 : offs[j]);
    for (int st = S - 1; st >= 0; st--) {
      long t = F[j][st] + 1;
      if (st < S - 1 && B[j][st + 1] + 1 > t) t = B[j][st + 1] + 1;
      B[j][st] = blk_place(occ[BLK_RANK(st)], k, t);
      if (!w_late) W[j][st] = blk_place(occ[BLK_RANK(st)], k, B[j][st] + 1 + wdelay);
    }
    if (w_late)
      for (int st = S - 1; st >= 0; st--) W[j][st] = blk_place(occ[BLK_RANK(st)], k, B[j][st] + 1 + wdelay);
  }
  zt_status rc = zt_pipeline_schedule_new(P, 2, M, ZT_PIPELINE_PLACEMENT_V, out);
  blk_item *items = rc == ZT_OK ? malloc((size_t)6 * (size_t)M * sizeof *items) : NULL;
  if (rc == ZT_OK && !items) rc = ZT_ERR(ZT_STATUS_OOM, "out of host memory generating a pipeline schedule");
  for (int r = 0; rc == ZT_OK && r < P; r++) {
    int n = 0;
    for (int m = 0; m < M; m++)
      for (int c = 0; c < 2; c++) {
        int st = c ? S - 1 - r : r;
        int j = m % g;
        long base = (long)k * (m / g);
        items[n++] = (blk_item){F[j][st] + base, {ZT_PIPELINE_OP_F, st, m}};
        items[n++] = (blk_item){B[j][st] + base, {ZT_PIPELINE_OP_B, st, m}};
        items[n++] = (blk_item){W[j][st] + base, {ZT_PIPELINE_OP_W, st, m}};
      }
    qsort(items, (size_t)n, sizeof *items, blk_cmp);
    /* the cap: a forward that would hold more than cap[r] chunks waits (in order) for the
     * next W; a B whose forward waits takes it along (over the cap: that candidate loses) */
    int live = 0, dq = 0, dn = 0;
    for (int i = 0; rc == ZT_OK && i < n; i++) {
      zt_pipeline_action a = items[i].a;
      if (a.op == ZT_PIPELINE_OP_F && (dn > dq || live >= cap[r])) {
        items[dn++].a = a; /* deferred forwards, in order, reuse the consumed prefix */
        continue;
      }
      bool needs = false;
      for (int j = dq; j < dn; j++)
        needs |= a.op == ZT_PIPELINE_OP_B && items[j].a.stage == a.stage && items[j].a.mb == a.mb;
      while (rc == ZT_OK && dq < dn && (needs || live < cap[r])) {
        zt_pipeline_action f = items[dq++].a;
        needs &= !(f.stage == a.stage && f.mb == a.mb);
        rc = zt_pipeline_schedule_push(*out, r, f), live++;
      }
      if (rc == ZT_OK) rc = zt_pipeline_schedule_push(*out, r, a);
      live += a.op == ZT_PIPELINE_OP_F ? 1 : a.op == ZT_PIPELINE_OP_W ? -1 : 0;
      while (rc == ZT_OK && dq < dn && live < cap[r]) rc = zt_pipeline_schedule_push(*out, r, items[dq++].a), live++;
    }
    while (rc == ZT_OK && dq < dn) rc = zt_pipeline_schedule_push(*out, r, items[dq++].a);
  }
#undef BLK_RANK
  free(items);
  if (rc != ZT_OK) {
    zt_pipeline_schedule_free(*out);
    *out = NULL;
  }
  return rc;
}

/* V-Half / V-Min: the building blocks over a few intervals and W delays, and the list scheduler
 * under the same per-rank limit (limit chunks); the shortest simulated step (F = B = W, no
 * communication) whose peak stays within the limit wins, then the lower peak. */
static zt_status gen_v_controlled(const zt_pipeline_gen_options *o, const int *limit, zt_pipeline_schedule **out) {
  int P = o->ranks, M = o->microbatches;
  zt_pipeline_costs unit = zt_pipeline_costs_default();
  zt_pipeline_schedule *best = NULL;
  double best_t = INFINITY, best_peak = INFINITY;
  zt_status last = ZT_OK;
  /* the blocks' patterns: g microbatches every k (g = 1: k = 6..11; g > 1: an average interval
   * above 6 and below 8, the g blocks spread evenly, rounded down or up). k = 10 is V-Min's at
   * P = 4: with a cap of 3 chunks no periodic block of interval 9 or less fits (the doc says why) */
  enum { NPAT = 6 + 3 + 5 + 7 + 9 + 11 };
  int pat_g[NPAT], pat_k[NPAT], npat = 0;
  for (int k = 6; k <= 11; k++) pat_g[npat] = 1, pat_k[npat++] = k;
  for (int g = 2; g <= 6; g++)
    for (int k = 6 * g + 1; k < 8 * g; k++) pat_g[npat] = g, pat_k[npat++] = k;
  for (int cand = -1; cand < npat * 2 * 2 * 8; cand++) {
    zt_pipeline_schedule *s = NULL;
    int pi = cand < 0 ? 0 : cand / 32, g = pat_g[pi], k = pat_k[pi], up = (cand / 16) % 2, offs[6];
    if (g == 1 && up) continue;
    for (int j = 0; j < g; j++) offs[j] = (j * k + (up ? g - 1 : 0)) / g;
    zt_status st = cand < 0 ? gen_greedy(o, ZT_PIPELINE_PLACEMENT_V, 2, limit, &unit, &s)
                            : gen_block(P, M, k, g, offs, (cand % 16) / 2, cand % 2, limit, &s);
    if (st != ZT_OK) {
      if (st == ZT_STATUS_OOM) {
        zt_pipeline_schedule_free(best);
        return st;
      }
      last = st;
      continue;
    }
    zt_pipeline_sim *sim = NULL;
    st = zt_pipeline_simulate(s, &unit, &sim);
    if (st != ZT_OK) { /* a candidate the cap deadlocked */
      zt_pipeline_schedule_free(s);
      if (st == ZT_STATUS_OOM) {
        zt_pipeline_schedule_free(best);
        return st;
      }
      continue;
    }
    double peak = 0, t = sim->step_time;
    bool fits = true;
    for (int r = 0; r < P; r++) {
      peak = fmax(peak, sim->peak_activations[r]);
      if (sim->peak_activations[r] * 2 > limit[r] + 1e-9) fits = false;
    }
    zt_pipeline_sim_free(sim);
    if (fits && (t < best_t - 1e-9 || (t < best_t + 1e-9 && peak < best_peak))) {
      zt_pipeline_schedule_free(best);
      best = s, best_t = t, best_peak = peak;
    } else {
      zt_pipeline_schedule_free(s);
    }
  }
  if (!best) return last;
  *out = best;
  return ZT_OK;
}

/* The smallest M a family takes (and M's other conditions): INVALID_ARG saying so. */
static zt_status check_m(const char *name, int P, int M) {
  if (!strcmp(name, "interleaved") && (M < P || M % P))
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "schedule interleaved needs microbatches to be a multiple of the ranks, at least %d (got %d)", P, M);
  if (!strcmp(name, "dualpipev") && M < 2 * P)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "schedule dualpipev needs at least %d microbatches (2 x %d ranks; got %d)",
                  2 * P, P, M);
  return ZT_OK;
}

/* auto: the list scheduler under the given costs and limit, with one chunk per rank (ZB-H
 * placement) and with two in a V (or only the one o->chunks names); the shorter step wins
 * (then the lower peak). */
static zt_status gen_auto(const zt_pipeline_gen_options *o, const zt_pipeline_costs *c, zt_pipeline_schedule **out) {
  int P = o->ranks, M = o->microbatches;
  if (o->mem_limit != 0 && !(o->mem_limit >= 1))
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "auto's memory limit must be at least 1 (one microbatch's activations per rank) or 0 for none (got %g)",
                  o->mem_limit);
  int lim[2][P];
  zt_pipeline_schedule *best = NULL;
  double best_t = INFINITY, best_peak = INFINITY;
  zt_status last = ZT_OK;
  for (int v = o->chunks ? o->chunks : 1; v <= (o->chunks ? o->chunks : 2); v++) {
    for (int r = 0; r < P; r++)
      lim[v - 1][r] = o->mem_limit > 0 && o->mem_limit < M ? (int)floor(o->mem_limit * v + 1e-9) : M * v;
    zt_pipeline_schedule *s;
    zt_status st = gen_greedy(o, v == 1 ? ZT_PIPELINE_PLACEMENT_LOOP : ZT_PIPELINE_PLACEMENT_V, v, lim[v - 1], c, &s);
    if (st != ZT_OK) {
      last = st;
      continue;
    }
    zt_pipeline_sim *sim;
    st = zt_pipeline_simulate(s, c, &sim);
    if (st != ZT_OK) {
      zt_pipeline_schedule_free(s);
      zt_pipeline_schedule_free(best);
      return st;
    }
    double peak = 0;
    for (int r = 0; r < P; r++) peak = fmax(peak, sim->peak_activations[r]);
    bool better = sim->step_time < best_t - 1e-9 || (sim->step_time < best_t + 1e-9 && peak < best_peak);
    if (better) {
      zt_pipeline_schedule_free(best);
      best = s, best_t = sim->step_time, best_peak = peak;
    } else {
      zt_pipeline_schedule_free(s);
    }
    zt_pipeline_sim_free(sim);
  }
  if (!best) return last;
  *out = best;
  return ZT_OK;
}

static zt_status generate(const zt_pipeline_gen_options *o, int V, zt_pipeline_schedule **out) {
  const char *n = o->name;
  int P = o->ranks, M = o->microbatches;
  zt_pipeline_costs unit = zt_pipeline_costs_default();
  zt_pipeline_costs c = o->costs;
  if (c.f == 0 && c.b == 0 && c.w == 0 && c.comm == 0) c = unit;
  int lim[P];
  zt_pipeline_placement pl = ZT_PIPELINE_PLACEMENT_LOOP;
  if (!strcmp(n, "zb-h2")) {
    /* about twice 1F1B's peak on every rank: room for the extra warmup forwards */
    for (int r = 0; r < P; r++) lim[r] = 2 * P - 1;
    return gen_greedy(o, pl, 1, lim, &unit, out);
  }
  pl = ZT_PIPELINE_PLACEMENT_V;
  bool zbv_short = !strcmp(n, "zb-v") && M < 2 * P;
  if (zbv_short || !strcmp(n, "v-half") || !strcmp(n, "v-min")) {
    /* in chunk units (2 per microbatch): ZB-V below 2P microbatches (where its phases do not
     * fit) 1F1B's P, V-Half P/2, V-Min P/3 */
    for (int r = 0; r < P; r++) {
      lim[r] = zbv_short ? 2 * P : !strcmp(n, "v-half") ? P : (2 * P + 2) / 3;
      if (lim[r] < 2) lim[r] = 2;
    }
    if (!zbv_short) return gen_v_controlled(o, lim, out);
    return gen_greedy(o, pl, V, lim, &unit, out);
  }
  if (!strcmp(n, "auto")) return gen_auto(o, &c, out);
  bool dpv = !strcmp(n, "dualpipev"), zbv = !strcmp(n, "zb-v");
  zt_status st = zt_pipeline_schedule_new(P, V, M, dpv || zbv ? pl : ZT_PIPELINE_PLACEMENT_LOOP, out);
  if (st != ZT_OK) return st;
  st = !strcmp(n, "gpipe") ? gen_gpipe(*out)
       : !strcmp(n, "zb-h1") ? gen_zbh1(*out)
       : dpv                 ? gen_v_fixed(*out, gen_dualpipev_rank)
       : zbv                 ? gen_v_fixed(*out, gen_zbv_rank)
                             : gen_1f1b(*out);
  if (st != ZT_OK) {
    zt_pipeline_schedule_free(*out);
    *out = NULL;
  }
  return st;
}

zt_status zt_pipeline_generate(const zt_pipeline_gen_options *o, zt_pipeline_schedule **out) {
  *out = NULL;
  const char *n = o->name ? o->name : "";
  size_t len = strlen(n);
  bool known = false;
  for (const char *w = NAMES; *w;) {
    const char *e = strchr(w, ' ');
    size_t l = e ? (size_t)(e - w) : strlen(w);
    if (l == len && !strncmp(w, n, l)) known = true;
    w += l + (e ? 1 : 0);
  }
  if (!known) return ZT_ERR(ZT_STATUS_INVALID_ARG, "unknown schedule '%s' (schedules: %s)", n, NAMES);
  if (o->ranks < 1 || o->ranks > ZT_PIPELINE_MAX_RANKS || o->microbatches < 1 ||
      o->microbatches > ZT_PIPELINE_MAX_MICROBATCHES)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "schedule %s needs ranks in [1, %d] and microbatches in [1, %d] (got %d, %d)", n,
                  ZT_PIPELINE_MAX_RANKS, ZT_PIPELINE_MAX_MICROBATCHES, o->ranks, o->microbatches);
  bool vshape = !strcmp(n, "zb-v") || !strcmp(n, "v-half") || !strcmp(n, "v-min") || !strcmp(n, "dualpipev");
  int V = o->chunks;
  if (!strcmp(n, "interleaved")) {
    if (V == 0) V = 2;
    if (V < 2) return ZT_ERR(ZT_STATUS_INVALID_ARG, "schedule interleaved needs chunks >= 2 (got %d)", V);
  } else if (vshape) {
    if (V != 0 && V != 2)
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "schedule %s puts 2 chunks on each rank in a V (got chunks=%d)", n, V);
    V = 2;
  } else if (!strcmp(n, "auto")) {
    if (V != 0 && V != 1 && V != 2)
      return ZT_ERR(ZT_STATUS_INVALID_ARG,
                    "schedule auto plans 1 chunk per rank or 2 in a V (chunks=0: the better of both; got %d)", V);
  } else {
    if (V != 0 && V != 1) return ZT_ERR(ZT_STATUS_INVALID_ARG, "schedule %s has 1 chunk per rank (got chunks=%d)", n, V);
    V = 1;
  }
  ZT_TRY(check_m(n, o->ranks, o->microbatches));
  /* auto tries V = 2 when chunks is 0 */
  ZT_TRY(zt__pp_check_size(o->ranks, V ? V : 2, o->microbatches));
  ZT_TRY(zt__pp_check_costs(&o->costs, o->ranks * V)); /* auto's per-stage costs: checked as it simulates */
  ZT_TRY(generate(o, V, out));
  snprintf((*out)->name, sizeof (*out)->name, "%s", n);
  return ZT_OK;
}
