/* A run's plan (zt_train_plan, zt/plan.h): --plan auto plans the run's space and takes the fastest
 * configuration predicted to fit, --plan FILE[:N] takes a plan file's, and a run configured by
 * hand gets the prediction of its own options. Only options are written, so a plan trains to the
 * same losses as the same flags given by hand. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "train/plan_internal.h"

zt_status zt_plan_calibration_for(const zt_train_config *c, zt_comm *comm, const zt_plan_space *sp, int reps,
                                  zt_plan_calibration *cal) {
  zt_plan_calibration_default(cal);
  if (c->plan_calibration[0]) ZT_TRY(zt_plan_calibration_read(c->plan_calibration, cal));
  ZT_TRY(zt_plan_calibration_env(cal));
  bool all = true;
  for (int f = 0; f < ZT_PLAN_FIG_COUNT; f++)
    all = all && (cal->source[f] != ZT_PLAN_SOURCE_DEFAULT ||
                  ((f == ZT_PLAN_FIG_COMM_LAT || f == ZT_PLAN_FIG_COMM_BW) && sp->world == 1));
  if (all || reps < 1) return ZT_OK;
  zt_plan_calibration m;
  ZT_TRY(zt_plan_calibrate(comm, sp, c->memory.offload_dir[0] ? c->memory.offload_dir : NULL, reps, &m));
  for (int f = 0; f < ZT_PLAN_FIG_COUNT; f++) /* what was given stays */
    if (cal->source[f] == ZT_PLAN_SOURCE_DEFAULT)
      cal->value[f] = m.value[f], cal->source[f] = m.source[f], cal->spread[f] = m.spread[f];
  cal->world = m.world, cal->threads = m.threads, cal->reps = m.reps;
  return ZT_OK;
}

/* "FILE:N": the path and N (-1: none). */
static void split_entry(const char *spec, char *path, size_t cap, int *index) {
  snprintf(path, cap, "%s", spec);
  *index = -1;
  char *colon = strrchr(path, ':');
  if (!colon || !colon[1] || strspn(colon + 1, "0123456789") != strlen(colon + 1)) return;
  *index = atoi(colon + 1);
  *colon = '\0';
}

zt_status zt_train_plan(zt_train_config *c, zt_comm *comm, zt_plan_run *out) {
  if (!c || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_plan: config and out are required");
  memset(out, 0, sizeof *out);
  int world = comm ? zt_comm_size(comm) : 1;
  zt_plan_space sp;
  ZT_TRY(zt_plan_space_of(c, world, &sp));
  bool automatic = !strcmp(c->plan, "auto");
  /* microbatches given (more than one) stay: accumulating a batch in other slices changes its sums'
   * rounding, so a user who wants plain training's results bitwise keeps them; one is the planner's */
  sp.microbatches = c->data.microbatches > 1 ? c->data.microbatches : 0;
  /* a run by hand measures only its base at its start (every test and every run pays for the
   * start: a whole calibration is what zt plan and --plan auto take the time for); its step is
   * predicted from --plan-calibration's figures, ZT_PLAN_CALIBRATION's, or the defaults, each
   * printed with its source */
  if (!c->plan[0]) sp.skip = ~(1u << ZT_PLAN_FIG_BASE);
  ZT_TRY(zt_plan_calibration_for(c, comm, &sp, automatic ? 3 : 1, &out->cal));
  zt_plan_entry *e = &out->entry;
  if (automatic) {
    zt_plan *p = NULL;
    ZT_TRY(zt_plan_make(&sp, &out->cal, &p));
    out->limit = p->limit;
    snprintf(out->limit_source, sizeof out->limit_source, "%s", p->limit_source);
    out->candidates = p->n;
    for (int i = 0; i < p->n; i++) out->fitting += p->entries[i].fits;
    zt_status s = zt_plan_refusal(p);
    if (!s) *e = p->entries[p->chosen];
    zt_plan_free(p);
    if (s) return zt__error_prefix(s, "zt_train_config.plan auto");
    snprintf(out->source, sizeof out->source, "planned: the fastest of %d configurations that fit (of %d)",
             out->fitting, out->candidates);
    out->planned = true;
  } else if (c->plan[0]) {
    char path[sizeof c->plan];
    int index;
    split_entry(c->plan, path, sizeof path, &index);
    ZT_TRY(zt_plan_read(path, index, &sp, &e->config, &e->pred));
    zt_plan_config_name(&e->config, e->name, sizeof e->name);
    e->fits = true;
    snprintf(out->source, sizeof out->source, "from the plan file %s (%s)", path,
             index >= 0 ? "the entry given" : "its choice");
    out->planned = true;
  } else {
    zt_plan_config_of(c, world, &e->config);
    zt_plan_config_name(&e->config, e->name, sizeof e->name);
    zt_status s = zt_plan_predict(&sp, &out->cal, &e->config, &e->pred);
    if (s) { /* a configuration the planner does not model: the run goes on, unpredicted */
      snprintf(out->source, sizeof out->source, "not predicted: %s", zt_last_error());
      zt_clear_error();
      memset(&e->pred, 0, sizeof e->pred);
    } else {
      snprintf(out->source, sizeof out->source, "the options given");
    }
  }
  /* states in the tier: the slices given, which the run's OffloadModel set-up predicts again for
   * its cache and write-behind bounds (zt_train_plan_memory) */
  if (out->planned) {
    int64_t limit = c->memory.mem_limit;
    zt_plan_config_apply(&e->config, c);
    bool om_states = e->config.offload_states && !zt__plan_fsdp_states(&e->config);
    if (om_states) c->memory.mem_limit = limit; /* the cache bound and write cap for it */
    /* the limit planned for holds: what the prediction puts in the allocator (accounted and
     * cached) may grow to what the limit leaves beside the rest, and no further, so a cache
     * larger than predicted (its blocks' sizes peak apart, which the prediction counts by kind:
     * docs/plan.md#accuracy) gives blocks back instead of passing the limit. States in the tier:
     * the --mem-limit planner bounds its own (offload_plan.c) */
    int64_t planned_for = automatic ? out->limit : limit;
    const zt_plan_prediction *q = &e->pred;
    int64_t held = planned_for - ZT_OFFLOAD_PLAN_MARGIN(q->rss) - q->io - q->base;
    if (!om_states && planned_for > 0 && q->rss > 0 && held > 0) c->memory.held_limit = held;
  }
  c->plan[0] = '\0';
  return ZT_OK;
}
