/* The planner (zt/plan.h): the space of configurations a model, a batch and a world allow,
 * each predicted by its mode's predictor (plan_dp.c, plan_pipeline.c, plan_offload.c) and
 * ranked, the fastest that fits first. It writes options a run takes by hand and nothing else,
 * so a plan never changes results. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "train/offload_plan.h"
#include "train/plan_internal.h"

/* A plan fits a limit when its predicted RSS plus this does: the prediction's own error on what it
 * models and the kernel's memory for the process (the --mem-limit planner's margin). */
#define FIT_MARGIN(rss) ZT_OFFLOAD_PLAN_MARGIN(rss)
/* The RAM a prediction needs of a limit: its peak, what writes behind may add, and the margin. */
static int64_t need_of(const zt_plan_prediction *p) { return p->rss + p->inflight + FIT_MARGIN(p->rss); }
/* The schedule families a pipeline is planned with: one of each kind (fill-drain, one forward one
 * backward, interleaved, zero bubble with one and with two chunks a rank). */
static const char *const k_schedules[] = {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"};
#define N_SCHEDULES (sizeof k_schedules / sizeof *k_schedules)

void zt_plan_space_default(zt_plan_space *sp) {
  memset(sp, 0, sizeof *sp);
  if (zt_lm_preset("gpt2-tiny", &sp->model)) zt_clear_error();
  sp->batch = 8, sp->seq = 64, sp->world = 1, sp->tier = ZT_OFFLOAD_DISK, sp->eval_between = true;
}

zt_status zt_plan_space_of(const zt_train_config *t, int world, zt_plan_space *out) {
  zt_plan_space_default(out);
  ZT_TRY(zt_train_model_config(t, &out->model));
  out->batch = t->data.batch, out->seq = t->data.seq, out->world = world;
  out->mem_limit = t->memory.mem_limit;
  out->tier = t->memory.offload_model ? t->memory.offload_model : ZT_OFFLOAD_DISK;
  out->eval_between = t->log.eval_every > 0 && t->log.eval_every < t->steps;
  return ZT_OK;
}

/* ---------------------------------------------------------------- configurations */

/* DDP for no sharding, else the strategy's own name */
static const char *shard_name(zt_shard_strategy s) { return s == ZT_SHARD_NONE ? "ddp" : zt_shard_strategy_name(s); }

/* Appends ", " (or nothing at the start) and the text to buf. */
static void part(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void part(char *buf, size_t cap, const char *fmt, ...) {
  size_t n = strlen(buf);
  if (n && n + 2 < cap) strcpy(buf + n, ", "), n += 2;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + n, cap - n, fmt, ap);
  va_end(ap);
}

void zt_plan_config_name(const zt_plan_config *c, char *buf, size_t cap) {
  char par[64] = "", mem[160] = "";
  int dp = c->dp;
  size_t n = 0;
  if (c->pp > 1) n = (size_t)snprintf(par, sizeof par, "pp%d %s%s", c->pp, c->schedule, c->microbatches > 1 || dp > 1 ? " " : "");
  if (c->microbatches > 1 && n < sizeof par)
    n += (size_t)snprintf(par + n, sizeof par - n, "mb%lld%s", (long long)c->microbatches,
                          dp > 1 || c->shard != ZT_SHARD_NONE || (c->pp <= 1 && !c->offload_model) ? " " : "");
  if (c->pp > 1 && dp > 1 && n < sizeof par) n += (size_t)snprintf(par + n, sizeof par - n, "x ");
  if (n < sizeof par) {
    if (c->shard == ZT_SHARD_HYBRID)
      snprintf(par + n, sizeof par - n, "dp%d hybrid:%d", dp, c->hybrid_group);
    else if (dp > 1 || c->shard != ZT_SHARD_NONE)
      snprintf(par + n, sizeof par - n, "dp%d %s", dp, shard_name(c->shard));
    else if (c->pp <= 1 && !c->offload_model)
      snprintf(par + n, sizeof par - n, "plain");
  }
  if (zt__plan_fsdp_states(c))
    part(mem, sizeof mem, "states %s", zt_offload_tier_name(c->offload_model));
  else if (c->offload_model)
    part(mem, sizeof mem, "%s %s %d/%d %s", c->offload_states ? "states" : "offload-model",
         zt_offload_tier_name(c->offload_model), c->resident, c->slices,
         c->mode == ZT_OFFLOAD_MODEL_KEEP_GRAPH ? "keep" : "recompute");
  if (c->recompute_plan[0])
    part(mem, sizeof mem, "recompute %d of %d", (int)(strlen(c->recompute_plan) - strspn(c->recompute_plan, "n")),
         (int)strlen(c->recompute_plan));
  else if (c->recompute_budget > 0)
    part(mem, sizeof mem, "recompute budget %.0fM", (double)c->recompute_budget / 1048576.0);
  else if (c->recompute != ZT_RECOMPUTE_NONE)
    part(mem, sizeof mem, "recompute %s", c->recompute == ZT_RECOMPUTE_FULL ? "full" : "selective");
  if (c->offload_activations) part(mem, sizeof mem, "activations to %s", zt_offload_tier_name(c->offload_activations));
  n = strlen(par);
  while (n > 0 && par[n - 1] == ' ') par[--n] = '\0';
  snprintf(buf, cap, "%s%s%s", par, par[0] && mem[0] ? ", " : "", mem);
}

void zt_plan_config_apply(const zt_plan_config *c, zt_train_config *t) {
  zt_train_memory_options *m = &t->memory;
  zt_train_parallel_options *p = &t->parallel;
  p->pp = c->pp > 1 ? c->pp : 1;
  if (c->pp > 1) snprintf(p->schedule, sizeof p->schedule, "%s", c->schedule);
  p->chunks = c->chunks;
  p->shard = c->shard, p->hybrid_group = c->shard == ZT_SHARD_HYBRID ? c->hybrid_group : 0;
  if (c->microbatches > 0) t->data.microbatches = c->microbatches;
  m->recompute = c->recompute;
  m->recompute_budget = c->recompute_plan[0] ? 0 : c->recompute_budget;
  snprintf(m->recompute_plan, sizeof m->recompute_plan, "%s", c->recompute_plan);
  if (c->recompute_plan[0] || c->recompute_budget > 0) m->recompute = ZT_RECOMPUTE_NONE;
  m->offload_activations = c->offload_activations;
  m->offload_model = c->offload_model;
  m->offload_states = c->offload_model && c->offload_states;
  bool om = c->offload_model && !zt__plan_fsdp_states(c); /* FSDP's states have no slices */
  m->offload_slices = om ? c->slices : 0;
  m->offload_resident = om ? c->resident : 0;
  m->offload_mode = c->mode;
  m->mem_limit = 0; /* planned: the run takes the options as they are */
  if (c->offload_model) m->activation_trial = ZT_ACT_TRIAL_OFF; /* the plan's choice stays */
}

void zt_plan_config_of(const zt_train_config *t, int world, zt_plan_config *out) {
  memset(out, 0, sizeof *out);
  const zt_train_memory_options *m = &t->memory;
  out->pp = t->parallel.pp > 1 ? t->parallel.pp : 1;
  out->dp = world / out->pp > 0 ? world / out->pp : 1;
  out->shard = t->parallel.shard, out->hybrid_group = t->parallel.hybrid_group;
  if (out->dp == 1 && out->shard == ZT_SHARD_NONE) out->shard = ZT_SHARD_NONE;
  snprintf(out->schedule, sizeof out->schedule, "%.31s", out->pp > 1 ? t->parallel.schedule : "");
  out->chunks = t->parallel.chunks;
  out->microbatches = t->data.microbatches > 0 ? t->data.microbatches : 1;
  out->recompute = m->recompute, out->recompute_budget = m->recompute_budget;
  snprintf(out->recompute_plan, sizeof out->recompute_plan, "%s", m->recompute_plan);
  out->offload_activations = m->offload_activations;
  out->offload_model = m->offload_model, out->offload_states = m->offload_states;
  out->slices = m->offload_slices > 0 ? m->offload_slices : 2;
  out->resident = m->offload_resident > 0 ? m->offload_resident : 2;
  out->mode = m->offload_mode;
}

/* Why c cannot run in sp (NULL: it can). */
static const char *unrunnable(const zt_plan_space *sp, const zt_lm_dims *d, const zt_plan_config *c, char *buf,
                              size_t cap) {
  if (c->pp < 1 || c->dp < 1 || (int64_t)c->pp * c->dp != sp->world)
    return snprintf(buf, cap, "pp %d x dp %d is not the world's %d ranks", c->pp, c->dp, sp->world), buf;
  if (c->microbatches < 1 || sp->batch % ((int64_t)c->dp * c->microbatches))
    return snprintf(buf, cap, "batch %lld does not split into %d replicas x %lld microbatches", (long long)sp->batch,
                    c->dp, (long long)c->microbatches),
           buf;
  if (c->pp > d->n_layer)
    return snprintf(buf, cap, "%d stages for %d blocks", c->pp, d->n_layer), buf;
  if (c->shard == ZT_SHARD_HYBRID && (c->hybrid_group < 2 || c->dp % c->hybrid_group || c->hybrid_group == c->dp))
    return snprintf(buf, cap, "hybrid:%d does not split %d ranks into groups", c->hybrid_group, c->dp), buf;
  if (c->pp > 1 && c->shard == ZT_SHARD_HYBRID) return snprintf(buf, cap, "hybrid sharding with a pipeline"), buf;
  bool fsdp_states = zt__plan_fsdp_states(c);
  if (fsdp_states && (c->pp > 1 || c->shard == ZT_SHARD_OPT || c->offload_model != ZT_OFFLOAD_DISK))
    return snprintf(buf, cap, "FSDP's states in a tier with a pipeline, opt sharding or a tier other than disk"), buf;
  if (c->offload_model && !fsdp_states && (c->pp > 1 || c->dp > 1))
    return snprintf(buf, cap, "OffloadModel is one process"), buf;
  if (c->offload_model && !fsdp_states &&
      (c->slices < 1 || c->slices > d->n_layer + 2 || c->resident < 1 || c->resident > c->slices))
    return snprintf(buf, cap, "%d of %d slices resident", c->resident, c->slices), buf;
  if (c->offload_activations && c->pp > 1) return snprintf(buf, cap, "activation offload in a pipeline"), buf;
  return NULL;
}

zt_status zt_plan_predict(const zt_plan_space *sp, const zt_plan_calibration *cal, const zt_plan_config *c,
                          zt_plan_prediction *out) {
  if (!sp || !cal || !c || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_plan_predict: every argument is required");
  memset(out, 0, sizeof *out);
  ZT_TRY(zt_lm_config_validate(&sp->model));
  if (sp->batch < 1 || sp->seq < 1 || sp->world < 1)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_plan_predict: batch, seq and world must be at least 1");
  zt__plan_in in = {.sp = sp, .cal = cal, .d = zt_lm_config_dims(&sp->model), .limit = sp->mem_limit};
  if (in.limit <= 0) {
    zt_mem_available_info av;
    ZT_TRY(zt_mem_available(&av));
    in.limit = av.bytes;
  }
  char why[160];
  if (unrunnable(sp, &in.d, c, why, sizeof why)) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_plan_predict: %s", why);
  if (c->offload_model && !zt__plan_fsdp_states(c)) return zt__plan_predict_offload(&in, c, out);
  if (c->pp > 1) return zt__plan_predict_pipeline(&in, c, out);
  return zt__plan_predict_dp(&in, c, out);
}

/* ---------------------------------------------------------------- enumeration */

typedef struct list {
  zt_plan_entry *e;
  int n, cap;
} list;

static zt_status push(list *l, const zt_plan_space *sp, const zt_plan_calibration *cal, int64_t limit,
                      const zt_plan_config *c) {
  zt_plan_prediction p;
  zt_status s = zt_plan_predict(sp, cal, c, &p);
  if (s == ZT_STATUS_INVALID_ARG || s == ZT_STATUS_UNSUPPORTED) { /* not in this space: left out */
    zt_clear_error();
    return ZT_OK;
  }
  ZT_TRY(s);
  char flags[2048], other[2048];
  zt_plan_config_flags(c, flags, sizeof flags);
  for (int i = 0; i < l->n; i++) { /* a configuration twice (the search finds one of the grid's): once */
    zt_plan_config_flags(&l->e[i].config, other, sizeof other);
    if (!strcmp(flags, other)) return ZT_OK;
  }
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 64;
    zt_plan_entry *e = realloc(l->e, (size_t)cap * sizeof *e);
    if (!e) return ZT_ERR(ZT_STATUS_OOM, "out of host memory for the plan's entries");
    l->e = e, l->cap = cap;
  }
  zt_plan_entry *e = &l->e[l->n++];
  memset(e, 0, sizeof *e);
  e->config = *c, e->pred = p;
  zt_plan_config_name(c, e->name, sizeof e->name);
  bool ram = need_of(&p) <= limit;
  bool disk = sp->disk_limit <= 0 || p.disk_held <= sp->disk_limit;
  e->fits = ram && disk;
  if (!ram)
    snprintf(e->why, sizeof e->why, "needs %.0f MiB of RAM a rank (%.0f MiB with the margin), over %.0f MiB",
             (double)p.rss / 1048576.0, (double)need_of(&p) / 1048576.0, (double)limit / 1048576.0);
  else if (!disk)
    snprintf(e->why, sizeof e->why, "holds %.0f MiB on disk, over %.0f MiB", (double)p.disk_held / 1048576.0,
             (double)sp->disk_limit / 1048576.0);
  return ZT_OK;
}

/* The activation variants of a base configuration: recompute none, selective, full; activation
 * offload to a lossless tier (one process or DDP/FSDP); and, where keeping everything does not fit
 * but recomputing every block does, the per-block plan for exactly what the limit leaves. */
static zt_status push_activations(list *l, const zt_plan_space *sp, const zt_plan_calibration *cal, int64_t limit,
                                  zt_plan_config c) {
  static const zt_recompute modes[] = {ZT_RECOMPUTE_NONE, ZT_RECOMPUTE_SELECTIVE, ZT_RECOMPUTE_FULL};
  int first = l->n;
  for (size_t i = 0; i < 3; i++) {
    c.recompute = modes[i];
    ZT_TRY(push(l, sp, cal, limit, &c));
  }
  c.recompute = ZT_RECOMPUTE_NONE;
  if (c.pp == 1 && (sp->tier == ZT_OFFLOAD_DISK || sp->tier == ZT_OFFLOAD_HOST)) {
    c.offload_activations = sp->tier;
    ZT_TRY(push(l, sp, cal, limit, &c));
    c.offload_activations = ZT_OFFLOAD_NONE;
  }
  /* the budget: none's peak did not fit, full's did */
  if (l->n - first >= 3 && c.pp == 1) {
    const zt_plan_entry *none = &l->e[first], *full = &l->e[first + 2];
    if (!none->fits && full->fits) {
      int64_t other = none->pred.rss - none->pred.tag[ZT_MEM_TAG_ACTIVATION];
      int64_t room = limit - FIT_MARGIN(limit) - other;
      if (room > full->pred.tag[ZT_MEM_TAG_ACTIVATION]) {
        c.recompute_budget = room;
        ZT_TRY(push(l, sp, cal, limit, &c));
      }
    }
  }
  return ZT_OK;
}

/* Microbatch counts for a replica's rows: each divisor among 1, 2, 4, ... (a pipeline: from its
 * ranks up, at most 4 x them), or the space's own. */
static int microbatch_counts(const zt_plan_space *sp, int pp, int dp, int64_t *out) {
  int n = 0;
  int64_t rows = sp->batch / dp;
  if (sp->microbatches > 0) {
    out[n++] = sp->microbatches;
    return n;
  }
  for (int64_t m = 1; m <= rows && n < 8; m *= 2) {
    if (rows % m) continue;
    if (pp > 1 && (m < pp || m > 4 * pp)) continue;
    if (pp == 1 && m > 8) continue;
    out[n++] = m;
  }
  return n;
}

static zt_status enumerate(list *l, const zt_plan_space *sp, const zt_plan_calibration *cal, int64_t limit,
                           const zt_lm_dims *d) {
  zt_plan_config c;
  {
    for (int pp = 1; pp <= sp->world; pp++) {
      if (sp->world % pp || pp > d->n_layer) continue;
      int dp = sp->world / pp;
      int64_t mbs[8];
      int nm = microbatch_counts(sp, pp, dp, mbs);
      zt_shard_strategy shards[4 + 16];
      int gs[4 + 16], ns = 0;
      shards[ns] = ZT_SHARD_NONE, gs[ns++] = 0;
      if (dp > 1) {
        shards[ns] = ZT_SHARD_FULL, gs[ns++] = 0;
        shards[ns] = ZT_SHARD_GRAD_OP, gs[ns++] = 0;
        shards[ns] = ZT_SHARD_OPT, gs[ns++] = 0;
        for (int g = 2; pp == 1 && g < dp && ns < 20; g++)
          if (dp % g == 0) shards[ns] = ZT_SHARD_HYBRID, gs[ns++] = g;
      }
      for (int si = 0; si < ns; si++)
        for (int mi = 0; mi < nm; mi++)
          for (size_t ki = 0; ki < (pp > 1 ? N_SCHEDULES : 1); ki++) {
            memset(&c, 0, sizeof c);
            c.pp = pp, c.dp = dp, c.shard = shards[si], c.hybrid_group = gs[si], c.microbatches = mbs[mi];
            if (pp > 1) snprintf(c.schedule, sizeof c.schedule, "%s", k_schedules[ki]);
            ZT_TRY(push_activations(l, sp, cal, limit, c));
            if (pp == 1 && (c.shard == ZT_SHARD_FULL || c.shard == ZT_SHARD_HYBRID) && sp->tier == ZT_OFFLOAD_DISK) {
              /* and FSDP's states on disk (ZeRO-Infinity over the ranks) */
              c.offload_model = ZT_OFFLOAD_DISK, c.offload_states = true, c.slices = c.resident = 2;
              ZT_TRY(push_activations(l, sp, cal, limit, c));
            }
          }
    }
  }
  if (sp->world != 1 || sp->tier != ZT_OFFLOAD_DISK) return ZT_OK; /* plan_offload.c predicts the disk tier */
  /* OffloadModel, one process, at every slicing the --mem-limit planner considers: the
   * optimizer's state in RAM (the parameters and grads in the tier: fairscale's OffloadModel), or
   * every state in the tier; and the --mem-limit search's own pick below */
  int64_t mbs[8];
  int nm = microbatch_counts(sp, 1, 1, mbs);
  for (int mi = 0; mi < nm; mi++)
    for (int states = 0; states <= 1; states++)
      for (int mode = 0; mode <= 1; mode++)
        for (int N = 2; N <= d->n_layer + 2; N++)
          for (int K = 1; K <= N && K <= 3; K++) {
            memset(&c, 0, sizeof c);
            c.pp = c.dp = 1, c.shard = ZT_SHARD_NONE, c.microbatches = mbs[mi];
            c.offload_model = sp->tier, c.offload_states = states, c.slices = N, c.resident = K;
            c.mode = mode ? ZT_OFFLOAD_MODEL_KEEP_GRAPH : ZT_OFFLOAD_MODEL_RECOMPUTE;
            ZT_TRY(push(l, sp, cal, limit, &c));
            if (mode) {
              c.offload_activations = sp->tier; /* keep-graph with the blocks' saves in the tier */
              ZT_TRY(push(l, sp, cal, limit, &c));
            }
          }
  /* and the --mem-limit planner's own search for the states' part (zt_offload_plan_make: every
   * slicing and resident count, activation offload with the slices that recompute instead) */
  for (int mi = 0; mi < nm; mi++) {
    zt_offload_plan_input in;
    zt__offload_plan_input(sp, cal, limit, zt_mem_cache_limit(), mbs[mi], sp->tier, false, &in);
    zt_offload_plan op;
    zt_status s = zt_offload_plan_make(&in, limit, &op);
    if (s) { /* nothing of it fits: the entries above say how far off */
      zt_clear_error();
      continue;
    }
    memset(&c, 0, sizeof c);
    c.pp = c.dp = 1, c.shard = ZT_SHARD_NONE, c.microbatches = mbs[mi];
    c.offload_model = sp->tier, c.offload_states = true, c.slices = op.slices, c.resident = op.resident;
    c.mode = op.activations_mode == ZT_OFFLOAD_PLAN_RECOMPUTE ? ZT_OFFLOAD_MODEL_RECOMPUTE : ZT_OFFLOAD_MODEL_KEEP_GRAPH;
    c.offload_activations = op.activations_mode == ZT_OFFLOAD_PLAN_OFFLOAD ? sp->tier : ZT_OFFLOAD_NONE;
    if (op.recomputed_slices) snprintf(c.recompute_plan, sizeof c.recompute_plan, "%s", op.recompute_plan);
    ZT_TRY(push(l, sp, cal, limit, &c));
  }
  return ZT_OK;
}

/* How many mechanisms a configuration stacks on plain training: among predictions within the
 * model's resolution (TIE) the fewer wins, since each costs what the model does not count (a
 * slice's hand-over, a pipeline's start, a recompute's kernels) and is one more thing to go wrong. */
static int machinery(const zt_plan_config *c) {
  return (c->offload_model ? 3 : 0) + (c->offload_states ? 1 : 0) + (c->offload_activations ? 2 : 0) +
         (c->recompute != ZT_RECOMPUTE_NONE || c->recompute_budget > 0 || c->recompute_plan[0] ? 1 : 0) +
         (c->pp > 1 ? 2 : 0) + (c->shard != ZT_SHARD_NONE ? 1 : 0) + (c->microbatches > 1 ? 1 : 0);
}
#define TIE 0.01

/* Fitting ones by predicted step (within TIE: the less compute under it, the fewer mechanisms,
 * then the less RAM), then the rest by RAM. */
static int by_rank(const void *a, const void *b) {
  const zt_plan_entry *x = a, *y = b;
  if (x->fits != y->fits) return x->fits ? -1 : 1;
  if (x->fits) {
    double dx = x->pred.step_s, dy = y->pred.step_s;
    if (fabs(dx - dy) > TIE * (dx < dy ? dx : dy)) return dx < dy ? -1 : 1;
    /* the same step: the less compute under it, which leaves the prediction more room to be wrong in
     * (a disk-bound step hides a recompute's second forward only as long as the disk is as slow as
     * measured and the two overlap as modelled) */
    double wx = x->pred.compute_s, wy = y->pred.compute_s;
    if (fabs(wx - wy) > TIE * (wx < wy ? wx : wy)) return wx < wy ? -1 : 1;
    int mx = machinery(&x->config), my = machinery(&y->config);
    if (mx != my) return mx < my ? -1 : 1;
  }
  return x->pred.rss < y->pred.rss ? -1 : x->pred.rss > y->pred.rss;
}

/* Nothing fits: the smallest limit some configuration fits, from the few smallest at the limit
 * given, each predicted again at what it needs until it fits there (its cache grows with the limit). */
static zt_status smallest(zt_plan *p, const zt_plan_calibration *cal) {
  p->smallest_limit = INT64_MAX;
  for (int i = 0; i < p->n && i < 8; i++) {
    zt_plan_space at = p->space;
    zt_plan_prediction q = p->entries[i].pred;
    for (int k = 0; k < 8; k++) {
      int64_t need = need_of(&q);
      if (k > 0 && need <= at.mem_limit) break;
      at.mem_limit = (need + 1048575) / 1048576 * 1048576; /* whole MiB: the limit as a message names it */
      ZT_TRY(zt_plan_predict(&at, cal, &p->entries[i].config, &q));
    }
    if (need_of(&q) <= at.mem_limit && at.mem_limit < p->smallest_limit) {
      p->smallest_limit = at.mem_limit;
      p->smallest = p->entries[i];
      p->smallest.pred = q, p->smallest.fits = true, p->smallest.why[0] = '\0';
    }
  }
  if (p->smallest_limit == INT64_MAX) p->smallest_limit = 0;
  return ZT_OK;
}

zt_status zt_plan_make(const zt_plan_space *sp, const zt_plan_calibration *cal, zt_plan **out) {
  if (!sp || !cal || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_plan_make: every argument is required");
  *out = NULL;
  ZT_TRY(zt_lm_config_validate(&sp->model));
  if (sp->batch < 1 || sp->seq < 1 || sp->world < 1)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_plan_make: batch, seq and world must be at least 1");
  zt_lm_dims d = zt_lm_config_dims(&sp->model);
  if (sp->seq > d.context)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_plan_make: seq %lld is longer than the model's context (%d)",
                  (long long)sp->seq, d.context);
  if (sp->batch % sp->world)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_plan_make: batch %lld does not split over %d ranks; give a multiple of it",
                  (long long)sp->batch, sp->world);
  zt_plan *p = calloc(1, sizeof *p);
  if (!p) return ZT_ERR(ZT_STATUS_OOM, "out of host memory for a plan");
  p->space = *sp, p->cal = *cal, p->chosen = -1;
  p->limit = sp->mem_limit;
  snprintf(p->limit_source, sizeof p->limit_source, "the limit given");
  zt_status s = ZT_OK;
  if (p->limit <= 0) {
    zt_mem_available_info av;
    s = zt_mem_available(&av);
    if (!s) p->limit = av.bytes, snprintf(p->limit_source, sizeof p->limit_source, "%s", av.source);
  }
  list l = {0};
  zt_plan_space at = *sp; /* every prediction for the limit resolved once */
  at.mem_limit = p->limit;
  if (!s) s = enumerate(&l, &at, cal, p->limit, &d);
  if (s) {
    free(l.e), free(p);
    return s;
  }
  qsort(l.e, (size_t)l.n, sizeof *l.e, by_rank);
  p->entries = l.e, p->n = l.n;
  p->chosen = p->n > 0 && p->entries[0].fits ? 0 : -1;
  if (p->chosen < 0) s = smallest(p, cal);
  if (s) {
    zt_plan_free(p);
    return s;
  }
  *out = p;
  return ZT_OK;
}

void zt_plan_free(zt_plan *p) {
  if (!p) return;
  free(p->entries);
  free(p);
}

zt_status zt_plan_refusal(const zt_plan *p) {
  if (!p) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_plan_refusal: no plan");
  if (p->chosen >= 0) return ZT_OK;
  if (p->n == 0)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "no configuration runs this model at batch %lld on %d ranks: give a batch "
                                         "that splits over the ranks",
                  (long long)p->space.batch, p->space.world);
  return ZT_ERR(ZT_STATUS_OOM,
                "no configuration fits %.0f MiB a rank (%s): the smallest needs %.0f MiB (%s); give at least that "
                "limit, more ranks, or a smaller batch or sequence",
                (double)p->limit / 1048576.0, p->limit_source, ceil((double)p->smallest_limit / 1048576.0),
                p->smallest.name);
}
