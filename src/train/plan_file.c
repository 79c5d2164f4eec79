/* Plans as files (zt/plan.h): the space, the calibration with each figure's source, and every
 * entry with its options written as zt train's flags take them, its prediction and why it does
 * not fit; and a plan file's entry read back as options, for zt train --plan FILE. A plan's
 * options are the only thing a replay takes, so it trains exactly as the flags by hand would. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/file.h"
#include "core/status_internal.h"
#include "io/buf.h"
#include "io/json.h"
#include "train/plan_internal.h"

/* The options of c, as zt train's flags: names[i] = values[i], n of them (at most PLAN_OPTIONS). */
#define PLAN_OPTIONS 12
typedef struct plan_options {
  int n;
  const char *name[PLAN_OPTIONS];
  char value[PLAN_OPTIONS][ZT_TRAIN_MAX_LAYERS + 8];
} plan_options;

static void opt_s(plan_options *o, const char *name, const char *s) {
  o->name[o->n] = name;
  snprintf(o->value[o->n++], sizeof o->value[0], "%s", s);
}
static void opt_i(plan_options *o, const char *name, long long v) {
  o->name[o->n] = name;
  snprintf(o->value[o->n++], sizeof o->value[0], "%lld", v);
}

static void options_of(const zt_plan_config *c, plan_options *o) {
  memset(o, 0, sizeof *o);
  opt_i(o, "pp", c->pp);
  if (c->pp > 1) opt_s(o, "schedule", c->schedule);
  if (c->pp > 1 && c->chunks > 0) opt_i(o, "chunks", c->chunks);
  if (c->shard == ZT_SHARD_HYBRID)
    {
    char h[32];
    snprintf(h, sizeof h, "hybrid:%d", c->hybrid_group);
    opt_s(o, "shard", h);
  }
  else
    opt_s(o, "shard", c->shard == ZT_SHARD_NONE ? "none" : zt_shard_strategy_name(c->shard));
  opt_i(o, "microbatches", c->microbatches);
  char rc[ZT_TRAIN_MAX_LAYERS + 8];
  if (c->recompute_plan[0])
    snprintf(rc, sizeof rc, "plan=%s", c->recompute_plan);
  else if (c->recompute_budget > 0)
    snprintf(rc, sizeof rc, "budget=%lld", (long long)c->recompute_budget);
  else
    snprintf(rc, sizeof rc, "%s", c->recompute == ZT_RECOMPUTE_FULL ? "full" : c->recompute == ZT_RECOMPUTE_SELECTIVE ? "selective" : "none");
  opt_s(o, "recompute", rc);
  opt_s(o, "offload-activations", zt_offload_tier_name(c->offload_activations));
  if (zt__plan_fsdp_states(c)) {
    opt_s(o, "offload-states", zt_offload_tier_name(c->offload_model));
  } else if (c->offload_model) {
    opt_s(o, c->offload_states ? "offload-states" : "offload-model", zt_offload_tier_name(c->offload_model));
    opt_i(o, "offload-slices", c->slices);
    opt_i(o, "offload-resident", c->resident);
    opt_s(o, "offload-mode", c->mode == ZT_OFFLOAD_MODEL_KEEP_GRAPH ? "keep-graph" : "recompute");
  } else {
    opt_s(o, "offload-model", "none");
  }
}

void zt_plan_config_flags(const zt_plan_config *c, char *buf, size_t cap) {
  plan_options o;
  options_of(c, &o);
  size_t n = 0;
  buf[0] = '\0';
  for (int i = 0; i < o.n && n < cap; i++) {
    if (!strcmp(o.value[i], "none") && strcmp(o.name[i], "recompute")) continue; /* the defaults */
    int w = snprintf(buf + n, cap - n, "%s--%s %s", n ? " " : "", o.name[i], o.value[i]);
    n += w > 0 ? (size_t)w : 0;
  }
}

/* ---------------------------------------------------------------- writing */

static void put_prediction(zt__buf *b, const zt_plan_prediction *p) {
  char d[32];
  zt__buf_printf(b, "{\"rss\":%lld,\"accounted\":%lld,\"cache\":%lld,\"io\":%lld,\"base\":%lld,\"inflight\":%lld,\"tag\":{",
                 (long long)p->rss, (long long)p->accounted, (long long)p->cache, (long long)p->io, (long long)p->base,
                 (long long)p->inflight);
  for (int t = 0; t < ZT_MEM_TAG_COUNT; t++)
    zt__buf_printf(b, "%s\"%s\":%lld", t ? "," : "", zt_mem_tag_name((zt_mem_tag)t), (long long)p->tag[t]);
  zt__buf_printf(b, "},\"disk_held\":%lld,\"disk_read\":%lld,\"disk_written\":%lld", (long long)p->disk_held,
                 (long long)p->disk_read, (long long)p->disk_written);
  zt__buf_printf(b, ",\"compute_s\":%s", zt__fmt_double(d, p->compute_s));
  zt__buf_printf(b, ",\"comm_s\":%s", zt__fmt_double(d, p->comm_s));
  zt__buf_printf(b, ",\"io_s\":%s", zt__fmt_double(d, p->io_s));
  zt__buf_printf(b, ",\"bubble_s\":%s", zt__fmt_double(d, p->bubble_s));
  zt__buf_printf(b, ",\"step_s\":%s}", zt__fmt_double(d, p->step_s));
}

/* The model as the plan knows it: its family and sizes (what zt_plan_read compares). */
static void put_model(zt__buf *b, const zt_lm_config *m) {
  zt_lm_dims d = zt_lm_config_dims(m);
  char desc[256];
  zt_lm_config_describe(m, desc, sizeof desc);
  zt__buf_printf(b, "{\"family\":\"%s\",\"layers\":%d,\"hidden\":%d,\"heads\":%d,\"vocab\":%d,\"context\":%d,"
                    "\"ffn\":%d,\"params\":%lld,\"description\":",
                 zt_lm_family_name(m->family), d.n_layer, d.hidden, d.n_head, d.vocab, d.context, d.ffn,
                 (long long)d.params);
  zt__buf_json_string(b, desc);
  zt__buf_printf(b, "}");
}

zt_status zt_plan_write(const zt_plan *p, const char *path) {
  if (!p || !path || !*path) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_plan_write: a plan and a path are required");
  zt__buf b = {0};
  const zt_plan_space *sp = &p->space;
  zt__buf_printf(&b, "{\"zerotrain_plan\":1,\n\"space\":{\"model\":");
  put_model(&b, &sp->model);
  zt__buf_printf(&b, ",\"batch\":%lld,\"seq\":%lld,\"microbatches\":%lld,\"world\":%d,\"mem_limit\":%lld,"
                     "\"disk_limit\":%lld,\"tier\":\"%s\",\"eval_between\":%s},\n",
                 (long long)sp->batch, (long long)sp->seq, (long long)sp->microbatches, sp->world,
                 (long long)sp->mem_limit, (long long)sp->disk_limit, zt_offload_tier_name(sp->tier),
                 sp->eval_between ? "true" : "false");
  zt__buf_printf(&b, "\"limit\":%lld,\"limit_source\":", (long long)p->limit);
  zt__buf_json_string(&b, p->limit_source);
  zt__buf_printf(&b, ",\n\"calibration\":");
  zt__plan_put_calibration(&b, &p->cal);
  zt__buf_printf(&b, ",\n\"chosen\":%d,\n\"entries\":[", p->chosen);
  for (int i = 0; i < p->n; i++) {
    const zt_plan_entry *e = &p->entries[i];
    zt__buf_printf(&b, "%s\n{\"index\":%d,\"name\":", i ? "," : "", i);
    zt__buf_json_string(&b, e->name);
    zt__buf_printf(&b, ",\"fits\":%s,\"why\":", e->fits ? "true" : "false");
    zt__buf_json_string(&b, e->why);
    plan_options o;
    options_of(&e->config, &o);
    zt__buf_printf(&b, ",\"options\":{");
    for (int k = 0; k < o.n; k++) {
      zt__buf_printf(&b, "%s\"%s\":", k ? "," : "", o.name[k]);
      zt__buf_json_string(&b, o.value[k]);
    }
    zt__buf_printf(&b, "},\"predicted\":");
    put_prediction(&b, &e->pred);
    zt__buf_printf(&b, "}");
  }
  zt__buf_printf(&b, "\n]}\n");
  zt_status s = zt__buf_write_atomic(&b, path);
  zt__buf_free(&b);
  return s ? zt__error_prefix(s, "the plan") : ZT_OK;
}

/* ---------------------------------------------------------------- reading */

static bool i64_of(const zt__json *j, const char *key, int64_t *out) {
  const zt__json *v = zt__json_get(j, key);
  return v && zt__json_i64(v, out);
}

/* The plan's space against the run's: a plan made for another model, batch, sequence or world
 * would predict nothing true about this run. */
static zt_status check_space(const char *path, const zt__json *space, const zt_plan_space *want) {
  const zt__json *m = zt__json_get(space, "model");
  const zt__json *fam = m ? zt__json_get(m, "family") : NULL;
  zt_lm_dims d = zt_lm_config_dims(&want->model);
  int64_t v[8];
  const char *keys[8] = {"layers", "hidden", "heads", "vocab", "params", "batch", "seq", "world"};
  int64_t w[8] = {d.n_layer, d.hidden, d.n_head, d.vocab, d.params, want->batch, want->seq, want->world};
  if (!m || !fam || fam->kind != ZT__JSON_STRING)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "plan file '%s': no space.model.family: not a plan zt plan wrote", path);
  if (strcmp(fam->str, zt_lm_family_name(want->model.family)))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "plan file '%s' was made for a %s model; this run trains a %s one: make a "
                                         "plan for this run with zt plan",
                  path, fam->str, zt_lm_family_name(want->model.family));
  for (int i = 0; i < 8; i++) {
    if (!i64_of(i < 5 ? m : space, keys[i], &v[i]))
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "plan file '%s': space has no integer '%s': not a plan zt plan wrote", path,
                    keys[i]);
    if (v[i] != w[i])
      return ZT_ERR(ZT_STATUS_INVALID_ARG,
                    "plan file '%s' was made for %s %lld; this run has %s %lld: make a plan for this run with zt plan "
                    "(its --ranks, --batch, --seq and model options as the run's)",
                    path, keys[i], (long long)v[i], keys[i], (long long)w[i]);
  }
  return ZT_OK;
}

zt_status zt_plan_read(const char *path, int index, const zt_plan_space *want, zt_plan_config *out,
                       zt_plan_prediction *pred) {
  if (!path || !want || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_plan_read: path, want and out are required");
  char *text = NULL;
  size_t n = 0;
  ZT_TRY(zt__read_text_file(path, ZT__READ_JSON_MAX, "plan file", &text, &n));
  zt__json *j = NULL;
  zt_status s = zt__json_parse(text, n, path, &j);
  free(text);
  ZT_TRY(s);
  const zt__json *space = zt__json_get(j, "space"), *entries = zt__json_get(j, "entries");
  int64_t chosen = -1;
  if (!space || !entries || entries->kind != ZT__JSON_ARRAY || !i64_of(j, "chosen", &chosen))
    s = ZT_ERR(ZT_STATUS_INVALID_ARG, "plan file '%s': no space, entries or chosen: not a plan zt plan wrote", path);
  if (!s) s = check_space(path, space, want);
  int64_t k = index >= 0 ? index : chosen;
  if (!s && (k < 0 || k >= entries->n))
    s = ZT_ERR(ZT_STATUS_INVALID_ARG,
               index >= 0 ? "plan file '%s' has %d entries; entry %lld is not one of them"
                          : "plan file '%s' chose no configuration (nothing fit its limit; %d entries, %lld): give "
                            "an entry (zt train --plan FILE:N) or make a plan for a larger limit",
               path, entries->n, (long long)k);
  zt_train_config t;
  zt_train_config_default(&t);
  const zt__json *opts = s ? NULL : zt__json_get(&entries->items[k], "options");
  if (!s && (!opts || opts->kind != ZT__JSON_OBJECT))
    s = ZT_ERR(ZT_STATUS_INVALID_ARG, "plan file '%s': entry %lld has no options", path, (long long)k);
  for (int i = 0; !s && i < opts->n; i++) {
    const zt__json *v = &opts->items[i];
    if (v->kind != ZT__JSON_STRING)
      s = ZT_ERR(ZT_STATUS_INVALID_ARG, "plan file '%s': entry %lld's option '%s' is not a string", path, (long long)k,
                 opts->keys[i]);
    else if ((s = zt_train_config_set(&t, opts->keys[i], v->str)))
      s = zt__error_prefix(s, "plan file");
  }
  if (!s) zt_plan_config_of(&t, want->world, out);
  if (!s && pred) {
    memset(pred, 0, sizeof *pred);
    const zt__json *p = zt__json_get(&entries->items[k], "predicted"), *tag = p ? zt__json_get(p, "tag") : NULL;
    double x;
    if (p) {
      i64_of(p, "rss", &pred->rss), i64_of(p, "accounted", &pred->accounted), i64_of(p, "cache", &pred->cache);
      i64_of(p, "io", &pred->io), i64_of(p, "base", &pred->base), i64_of(p, "disk_held", &pred->disk_held);
      i64_of(p, "inflight", &pred->inflight);
      i64_of(p, "disk_read", &pred->disk_read), i64_of(p, "disk_written", &pred->disk_written);
      const char *fk[5] = {"compute_s", "comm_s", "io_s", "bubble_s", "step_s"};
      double *fv[5] = {&pred->compute_s, &pred->comm_s, &pred->io_s, &pred->bubble_s, &pred->step_s};
      for (int i = 0; i < 5; i++)
        if (zt__json_get(p, fk[i]) && zt__json_f64(zt__json_get(p, fk[i]), &x)) *fv[i] = x;
    }
    for (int t2 = 0; tag && t2 < ZT_MEM_TAG_COUNT; t2++) i64_of(tag, zt_mem_tag_name((zt_mem_tag)t2), &pred->tag[t2]);
  }
  zt__json_free(j);
  return s;
}
