/* The simulator: runs every rank's list in order on a clock, each action starting when its
 * rank is free and its inputs have arrived, and measures the step, the idle time and the live
 * activations. The same walk, without costs, is the validator's deadlock check: a rank that
 * waits for an action that can never run is reported with the rule that makes it wait. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "pipeline_internal.h"

zt_pipeline_costs zt_pipeline_costs_default(void) { return (zt_pipeline_costs){1, 1, 1, 0, 0, NULL}; }

/* A cost in range; !(x >= 0 && x <= hi) is also true of NaN. */
static bool cost_ok(double x, double hi) { return x >= 0 && x <= hi; }

zt_status zt__pp_check_costs(const zt_pipeline_costs *c, int stages) {
  const double hi = ZT_PIPELINE_MAX_COST;
  if (!cost_ok(c->f, hi) || !cost_ok(c->b, hi) || !cost_ok(c->w, hi) || !cost_ok(c->comm, hi))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "pipeline costs must be finite numbers in [0, %g] (got F=%g B=%g W=%g comm=%g)",
                  hi, c->f, c->b, c->w, c->comm);
  if (!cost_ok(c->bytes_per_unit, 1e18))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "a pipeline unit's bytes must be a finite number in [0, 1e18] (got %g)",
                  c->bytes_per_unit);
  for (int i = 0; c->stage && i < 3 * stages; i++)
    if (!cost_ok(c->stage[i], hi))
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "pipeline costs must be finite numbers in [0, %g] (got %g for %c of stage %d)",
                    hi, c->stage[i], "FBW"[i % 3], i / 3);
  return ZT_OK;
}

zt_status zt__pp_index_build(const zt_pipeline_schedule *s, zt__pp_index *ix) {
  size_t n = (size_t)ZT_PIPELINE_OP_COUNT * (size_t)zt_pipeline_stage_count(s) * (size_t)s->microbatches;
  ix->rank = malloc(n * sizeof *ix->rank);
  ix->idx = malloc(n * sizeof *ix->idx);
  if (!ix->rank || !ix->idx) {
    zt__pp_index_free(ix);
    return ZT_ERR(ZT_STATUS_OOM, "out of host memory indexing a pipeline schedule");
  }
  for (size_t k = 0; k < n; k++) ix->rank[k] = -1, ix->idx[k] = -1;
  int S = zt_pipeline_stage_count(s);
  for (int r = 0; r < s->ranks; r++)
    for (int i = 0; i < s->n_actions[r]; i++) {
      zt_pipeline_action a = s->actions[r][i];
      if ((unsigned)a.op >= ZT_PIPELINE_OP_COUNT || a.stage < 0 || a.stage >= S || a.mb < 0 || a.mb >= s->microbatches)
        continue;
      size_t k = (size_t)a.op * (size_t)S * (size_t)s->microbatches + (size_t)zt__pp_slot(s, a.stage, a.mb);
      if (ix->rank[k] < 0) ix->rank[k] = r, ix->idx[k] = i;
    }
  return ZT_OK;
}

void zt__pp_index_free(zt__pp_index *ix) {
  free(ix->rank);
  free(ix->idx);
  ix->rank = ix->idx = NULL;
}

/* What an action waits for: up to two earlier actions, whether each crosses ranks (and pays a
 * hop), and the rule that says so. */
typedef struct dep {
  zt_pipeline_action a;
  const char *rule;
} dep;

static int deps_of(const zt_pipeline_schedule *s, const zt__pp_index *ix, bool comm, int r, zt_pipeline_action a,
                   dep d[2]) {
  int S = zt_pipeline_stage_count(s), n = 0, st = a.stage, m = a.mb, i;
  switch (a.op) {
    case ZT_PIPELINE_OP_F:
      if (st > 0) {
        bool here = zt_pipeline_stage_rank(s, st - 1) == r;
        if (!comm || here)
          d[n++] = (dep){{ZT_PIPELINE_OP_F, st - 1, m}, "F of stage s runs after F of stage s-1"};
        else d[n++] = (dep){{ZT_PIPELINE_OP_RECV_F, st, m}, "F runs after the RECV_F of its input"};
      }
      break;
    case ZT_PIPELINE_OP_B:
    case ZT_PIPELINE_OP_BW:
      d[n++] = (dep){{ZT_PIPELINE_OP_F, st, m}, "the backward of a stage runs after its F"};
      if (st < S - 1) {
        bool here = zt_pipeline_stage_rank(s, st + 1) == r;
        if (!comm || here) {
          /* stage s+1's input gradient comes from its B or its BW, whichever it has */
          zt_pipeline_op op = zt__pp_find(s, ix, ZT_PIPELINE_OP_BW, st + 1, m, &i) >= 0 ? ZT_PIPELINE_OP_BW
                                                                                         : ZT_PIPELINE_OP_B;
          d[n++] = (dep){{op, st + 1, m}, "B of stage s runs after B of stage s+1"};
        } else {
          d[n++] = (dep){{ZT_PIPELINE_OP_RECV_B, st, m}, "B runs after the RECV_B of its output gradient"};
        }
      }
      break;
    case ZT_PIPELINE_OP_W: d[n++] = (dep){{ZT_PIPELINE_OP_B, st, m}, "W runs after the B of its stage and microbatch"}; break;
    case ZT_PIPELINE_OP_SEND_F: d[n++] = (dep){{ZT_PIPELINE_OP_F, st, m}, "SEND_F follows the F that produces it"}; break;
    case ZT_PIPELINE_OP_SEND_B: {
      zt_pipeline_op op = zt__pp_find(s, ix, ZT_PIPELINE_OP_BW, st, m, &i) >= 0 ? ZT_PIPELINE_OP_BW : ZT_PIPELINE_OP_B;
      d[n++] = (dep){{op, st, m}, "SEND_B follows the backward that produces it"};
      break;
    }
    case ZT_PIPELINE_OP_RECV_F: d[n++] = (dep){{ZT_PIPELINE_OP_SEND_F, st - 1, m}, "a receive waits for its send"}; break;
    case ZT_PIPELINE_OP_RECV_B: d[n++] = (dep){{ZT_PIPELINE_OP_SEND_B, st + 1, m}, "a receive waits for its send"}; break;
    default: break;
  }
  return n;
}

void zt_pipeline_sim_free(zt_pipeline_sim *sim) {
  if (!sim) return;
  for (int r = 0; r < sim->ranks; r++) {
    if (sim->start) free(sim->start[r]);
    if (sim->end) free(sim->end[r]);
  }
  free(sim->start);
  free(sim->end);
  free(sim->n);
  free(sim->busy);
  free(sim->idle);
  free(sim->idle_in_span);
  free(sim->peak_activations);
  free(sim->peak_bytes);
  free(sim);
}

static zt_pipeline_sim *sim_alloc(const zt_pipeline_schedule *s) {
  zt_pipeline_sim *sim = calloc(1, sizeof *sim);
  if (!sim) return NULL;
  size_t P = (size_t)s->ranks;
  sim->ranks = s->ranks;
  sim->n = calloc(P, sizeof *sim->n);
  sim->start = calloc(P, sizeof *sim->start);
  sim->end = calloc(P, sizeof *sim->end);
  sim->busy = calloc(P, sizeof(double));
  sim->idle = calloc(P, sizeof(double));
  sim->idle_in_span = calloc(P, sizeof(double));
  sim->peak_activations = calloc(P, sizeof(double));
  sim->peak_bytes = calloc(P, sizeof(double));
  bool ok = sim->n && sim->start && sim->end && sim->busy && sim->idle && sim->idle_in_span && sim->peak_activations &&
            sim->peak_bytes;
  for (size_t r = 0; ok && r < P; r++) {
    size_t n = (size_t)s->n_actions[r] + 1;
    sim->n[r] = s->n_actions[r];
    sim->start[r] = calloc(n, sizeof(double));
    sim->end[r] = calloc(n, sizeof(double));
    ok = sim->start[r] && sim->end[r];
  }
  if (!ok) {
    zt_pipeline_sim_free(sim);
    return NULL;
  }
  return sim;
}

/* The deadlock report: what each unfinished rank waits for. */
static zt_status stuck(const zt_pipeline_schedule *s, const zt__pp_index *ix, bool comm, const int *pc) {
  char msg[2048];
  size_t len = 0;
  char t1[32], t2[32];
  for (int r = 0; r < s->ranks && len < sizeof msg - 200; r++) {
    if (pc[r] >= s->n_actions[r]) continue;
    zt_pipeline_action a = s->actions[r][pc[r]];
    dep d[2];
    int nd = deps_of(s, ix, comm, r, a, d);
    for (int k = 0; k < nd; k++) {
      int i, q = zt__pp_find(s, ix, d[k].a.op, d[k].a.stage, d[k].a.mb, &i);
      if (q >= 0 && i < pc[q]) continue;
      if (q < 0)
        len += (size_t)snprintf(msg + len, sizeof msg - len, "%srank %d waits at %s for %s, which is in no rank's list (%s)",
                                len ? "; " : "", r, zt_pipeline_action_str(a, t1), zt_pipeline_action_str(d[k].a, t2),
                                d[k].rule);
      else
        len += (size_t)snprintf(msg + len, sizeof msg - len, "%srank %d waits at %s for %s on rank %d (%s)",
                                len ? "; " : "", r, zt_pipeline_action_str(a, t1), zt_pipeline_action_str(d[k].a, t2), q,
                                d[k].rule);
      break;
    }
  }
  return ZT_ERR(ZT_STATUS_INVALID_ARG, "the schedule deadlocks: %s; reorder the actions so that each runs after what it needs",
                msg);
}

/* Run s on the clock; sim (may be NULL) receives the times and measures. */
static zt_status run(const zt_pipeline_schedule *s, const zt_pipeline_costs *c, zt_pipeline_sim *sim) {
  ZT_TRY(zt__pp_check_ranges(s)); /* the walk looks up each action's neighbours: they must exist */
  zt__pp_index ix;
  ZT_TRY(zt__pp_index_build(s, &ix));
  int P = s->ranks;
  int *pc = calloc((size_t)P, sizeof *pc);
  double *t_free = calloc((size_t)P, sizeof *t_free);
  double **end = calloc((size_t)P, sizeof *end);
  bool ok = pc && t_free && end;
  for (int r = 0; ok && r < P; r++) ok = (end[r] = calloc((size_t)s->n_actions[r] + 1, sizeof(double))) != NULL;
  zt_status st = ZT_OK;
  if (!ok) st = ZT_ERR(ZT_STATUS_OOM, "out of host memory simulating a pipeline schedule");
  bool comm = zt_pipeline_has_comm(s);
  for (bool progress = true; st == ZT_OK && progress;) {
    progress = false;
    for (int r = 0; r < P; r++) {
      while (pc[r] < s->n_actions[r]) {
        zt_pipeline_action a = s->actions[r][pc[r]];
        dep d[2];
        int nd = deps_of(s, &ix, comm, r, a, d);
        double ready = 0;
        bool go = true;
        for (int k = 0; k < nd && go; k++) {
          int i, q = zt__pp_find(s, &ix, d[k].a.op, d[k].a.stage, d[k].a.mb, &i);
          if (q < 0 || i >= pc[q]) go = false;
          else {
            double t = end[q][i] + (q != r ? c->comm : 0);
            if (t > ready) ready = t;
          }
        }
        if (!go) break;
        double t0 = ready > t_free[r] ? ready : t_free[r];
        double t1 = t0 + zt__pp_cost(c, s->chunks, a.op, a.stage);
        if (sim) sim->start[r][pc[r]] = t0, sim->end[r][pc[r]] = t1;
        end[r][pc[r]++] = t1;
        t_free[r] = t1;
        progress = true;
      }
    }
  }
  if (st == ZT_OK)
    for (int r = 0; r < P; r++)
      if (pc[r] < s->n_actions[r]) {
        st = stuck(s, &ix, comm, pc);
        break;
      }
  for (int r = 0; end && r < P; r++) free(end[r]);
  free(end);
  free(pc);
  free(t_free);
  zt__pp_index_free(&ix);
  return st;
}

zt_status zt__pp_check_progress(const zt_pipeline_schedule *s) {
  zt_pipeline_costs c = zt_pipeline_costs_default();
  return run(s, &c, NULL);
}

/* Busy and idle time, and live activations (chunk counts, walked in each rank's order). */
static void measure(const zt_pipeline_schedule *s, const zt_pipeline_costs *c, zt_pipeline_sim *sim) {
  double step = 0;
  for (int r = 0; r < s->ranks; r++)
    for (int i = 0; i < s->n_actions[r]; i++)
      if (sim->end[r][i] > step) step = sim->end[r][i];
  sim->step_time = step;
  double idle = 0;
  for (int r = 0; r < s->ranks; r++) {
    double busy = 0, first = -1, last = 0;
    int live = 0, peak = 0;
    for (int i = 0; i < s->n_actions[r]; i++) {
      zt_pipeline_op op = s->actions[r][i].op;
      double d = zt__pp_cost(c, s->chunks, op, s->actions[r][i].stage);
      if (!zt__pp_is_compute(op)) continue;
      busy += d;
      if (first < 0) first = sim->start[r][i];
      last = sim->end[r][i];
      if (op == ZT_PIPELINE_OP_F && ++live > peak) peak = live;
      if (op == ZT_PIPELINE_OP_W || op == ZT_PIPELINE_OP_BW) live--;
    }
    sim->busy[r] = busy;
    sim->idle[r] = step - busy;
    sim->idle_in_span[r] = first < 0 ? 0 : (last - first) - busy;
    sim->peak_activations[r] = (double)peak / s->chunks;
    sim->peak_bytes[r] = sim->peak_activations[r] * c->bytes_per_unit;
    idle += sim->idle[r];
  }
  sim->bubble_rate = step > 0 ? idle / (s->ranks * step) : 0;
}

zt_status zt_pipeline_simulate(const zt_pipeline_schedule *s, const zt_pipeline_costs *costs, zt_pipeline_sim **out) {
  *out = NULL;
  zt_pipeline_costs c = costs ? *costs : zt_pipeline_costs_default();
  ZT_TRY(zt__pp_check_costs(&c, zt_pipeline_stage_count(s)));
  zt_pipeline_sim *sim = sim_alloc(s);
  if (!sim) return ZT_ERR(ZT_STATUS_OOM, "out of host memory for a pipeline simulation");
  zt_status st = run(s, &c, sim);
  if (st != ZT_OK) {
    zt_pipeline_sim_free(sim);
    return st;
  }
  measure(s, &c, sim);
  *out = sim;
  return ZT_OK;
}
