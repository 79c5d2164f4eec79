/* The options that define a training run, as name/value strings, by the option table's roles
 * (src/train/options.c): the ranks of a run compare every row but the LOCAL ones at start-up (a
 * different --batch or --seed on one rank is refused before any work), and a checkpoint records
 * the COURSE, INFO and RECORDED rows, so that a resume with other COURSE values is reported, and
 * refused unless asked (the continuation would not be bitwise), and other INFO values reported. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "io/buf.h"
#include "train/options.h"
#include "train/run_options.h"

static void add(zt__run_opts *o, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add(zt__run_opts *o, const char *name, const char *fmt, ...) {
  ZT_ASSERT(o->n < ZT__RUN_OPTS_MAX);
  o->name[o->n] = name;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(o->value[o->n], sizeof o->value[o->n], fmt, ap);
  va_end(ap);
  o->n++;
}

/* The value recorded for name in "name=value\n" lines (NULL if absent); copied into out. */
static const char *recorded(const char *rec, const char *name, char *out, size_t cap) {
  size_t l = strlen(name);
  for (const char *p = rec; p && *p;) {
    const char *nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    if (len > l && !strncmp(p, name, l) && p[l] == '=') {
      snprintf(out, cap, "%.*s", (int)(len - l - 1), p + l + 1);
      return out;
    }
    p = nl ? nl + 1 : NULL;
  }
  return NULL;
}

/* A whole decimal number recorded for name, or -1. */
static int64_t recorded_i64(const char *rec, const char *name) {
  char v[ZT__RUN_OPT_VALUE], *end = NULL;
  if (!recorded(rec, name, v, sizeof v)) return -1;
  long long x = strtoll(v, &end, 10);
  return end != v && !*end && x >= 0 ? x : -1;
}

void zt__run_schedule(const zt_train_config *c, const zt_train_state *st, int64_t *warmup, double *min_lr) {
  *min_lr = c->optim.min_lr >= 0 ? c->optim.min_lr : c->optim.lr / 10;
  *warmup = c->optim.warmup;
  if (*warmup < 0 && st) { /* the checkpoint's resolved warm-up; older checkpoints recorded it as "warmup" */
    *warmup = recorded_i64(st->options, "warmup-resolved");
    if (*warmup < 0) *warmup = recorded_i64(st->options, "warmup");
  }
  if (*warmup < 0) *warmup = c->steps / 10 < 100 ? c->steps / 10 : 100;
}

/* The row called name, derived rows included (NULL: none). */
static const zt_option *row_named(const char *name) {
  for (size_t i = 0; zt_train_option_at(i); i++)
    if (!strcmp(zt_train_option_at(i)->name, name)) return zt_train_option_at(i);
  return NULL;
}

/* Whether row o is written into a checkpoint (and compared on resume when COURSE or INFO). */
static bool recorded_role(const zt_option *o) {
  return o->role == ZT_OPTION_ROLE_COURSE || o->role == ZT_OPTION_ROLE_INFO || o->role == ZT_OPTION_ROLE_RECORDED;
}

void zt__run_options(const zt_train_config *c, const zt_lm_config *g, int world, const zt_train_state *resumed,
                     zt__run_opts *o) {
  memset(o, 0, sizeof *o);
  /* the config as the run uses it: the model's shape and dropout as resolved, the schedule's floor,
   * no pipeline schedule without a pipeline */
  zt_train_config resolved = *c, *r = &resolved; /* 8 KB */
  zt_lm_dims d = zt_lm_config_dims(g);
  r->model.n_layer = d.n_layer;
  r->model.n_head = d.n_head;
  r->model.n_embd = d.hidden;
  r->model.vocab_size = d.vocab;
  r->model.block_size = d.context;
  r->model.dropout = g->family == ZT_LM_GPT2 ? g->gpt2.dropout : 0;
  int64_t warmup;
  zt__run_schedule(c, resumed, &warmup, &r->optim.min_lr);
  if (r->parallel.pp <= 1) snprintf(r->parallel.schedule, sizeof r->parallel.schedule, "none");
  zt__option_ctx x = {.c = r, .world = world, .warmup = warmup};
  /* the recorded rows first (a checkpoint keeps them), then those the ranks agree on alone */
  for (int pass = 0; pass < 2; pass++) {
    for (size_t i = 0; zt_train_option_at(i); i++) {
      const zt_option *row = zt_train_option_at(i);
      if (row->role == ZT_OPTION_ROLE_LOCAL || recorded_role(row) != (pass == 0)) continue;
      ZT_ASSERT(o->n < ZT__RUN_OPTS_MAX);
      o->name[o->n] = row->name;
      zt__option_value(row, &x, o->value[o->n], sizeof o->value[o->n]);
      o->n++;
    }
    if (pass == 0) o->n_recorded = o->n;
  }
}

/* FNV-1a over the ids, with the count: tells two different token files apart. */
static uint64_t tokens_hash(const zt_tokens *t) {
  uint64_t h = 1469598103934665603ull ^ (uint64_t)t->count;
  for (int64_t i = 0; i < t->count; i++) h = (h ^ (uint32_t)t->ids[i]) * 1099511628211ull;
  return h;
}

void zt__run_options_add_data(zt__run_opts *o, const zt_tokens *train, const zt_tokens *val) {
  add(o, "data-content", "%lld tokens, hash %016llx", (long long)train->count, (unsigned long long)tokens_hash(train));
  add(o, "val-data-content", "%lld tokens, hash %016llx", (long long)val->count, (unsigned long long)tokens_hash(val));
}

void zt__run_options_record(const zt__run_opts *o, char *buf, size_t cap) {
  size_t n = 0;
  buf[0] = '\0';
  for (int i = 0; i < o->n_recorded && n < cap; i++) {
    int w = snprintf(buf + n, cap - n, "%s=%s\n", o->name[i], o->value[i]);
    if (w < 0 || (size_t)w >= cap - n) {
      buf[n] = '\0'; /* an entry that does not fit is left out (it is then not compared) */
      break;
    }
    n += (size_t)w;
  }
}

/* A number recorded for name, or NAN. */
static double recorded_f64(const char *rec, const char *name) {
  char v[ZT__RUN_OPT_VALUE], *end = NULL;
  if (!recorded(rec, name, v, sizeof v)) return NAN;
  double x = strtod(v, &end);
  return end != v && !*end ? x : NAN;
}

/* "; the learning rate at step N + 1 changes: X -> Y" when the schedule the checkpoint's run had
 * (its steps, warm-up, rates) and this run's give another rate at the resume step. */
static void lr_change(const zt_train_config *c, const zt_train_state *st, char *buf, size_t cap) {
  buf[0] = '\0';
  int64_t old_steps = recorded_i64(st->options, "steps"), old_warm = recorded_i64(st->options, "warmup-resolved");
  if (old_warm < 0) old_warm = recorded_i64(st->options, "warmup");
  double old_lr = recorded_f64(st->options, "lr"), old_min = recorded_f64(st->options, "min-lr");
  if (old_steps < 1 || old_warm < 0 || isnan(old_lr) || isnan(old_min)) return; /* not recorded */
  int64_t warmup;
  double min_lr;
  zt__run_schedule(c, st, &warmup, &min_lr);
  double was = zt_lr_cosine(st->step, old_warm, old_steps, old_lr, old_min);
  double now = zt_lr_cosine(st->step, warmup, c->steps, c->optim.lr, min_lr);
  if (fabs(was - now) > 1e-9 * fabs(was)) /* equal schedules give the same bits; this leaves room for printing */
    snprintf(buf, cap, "; the learning rate at step %lld changes: %.3e in the checkpoint's schedule -> %.3e",
             (long long)st->step + 1, was, now);
}

zt_status zt_train_resume_changes(const zt_train_config *c, int world, const zt_train_state *st, char *buf,
                                  size_t cap, bool *course) {
  if (!c || !st || !buf || !cap || !course) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_resume_changes: NULL argument");
  zt_lm_config g;
  ZT_TRY(zt_train_model_config(c, &g));
  zt__run_opts *o = malloc(sizeof *o);
  if (!o) return ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  zt__run_options(c, &g, world, st, o);
  size_t n = 0;
  buf[0] = '\0';
  *course = false;
  /* in the checkpoint's order: each recorded option that a COURSE or INFO row names (others,
   * recorded by other versions or RECORDED, are not compared) */
  for (const char *p = st->options; *p;) {
    const char *nl = strchr(p, '\n'), *eq = strchr(p, '=');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    const char *line = p;
    p = nl ? nl + 1 : p + len;
    if (!eq || eq > line + len) continue;
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)(eq - line), line);
    int at = -1;
    for (int i = 0; at < 0 && i < o->n_recorded; i++)
      if (!strcmp(o->name[i], name)) at = i;
    if (at < 0) continue;
    const zt_option *row = row_named(name); /* one: o's names are the table's */
    if (row->role != ZT_OPTION_ROLE_COURSE && row->role != ZT_OPTION_ROLE_INFO) continue;
    char was[ZT__RUN_OPT_VALUE];
    snprintf(was, sizeof was, "%.*s", (int)(line + len - eq - 1), eq + 1);
    if (!strcmp(was, o->value[at])) continue;
    /* an unset warm-up keeps the checkpoint's (older checkpoints recorded the number it resolved to) */
    if (row->unset_keeps && row->unset && !strcmp(o->value[at], row->unset)) continue;
    *course |= row->role == ZT_OPTION_ROLE_COURSE;
    int w = snprintf(buf + n, cap - n, "%s%s %s -> %s", n ? ", " : "", name, was, o->value[at]);
    if (w < 0 || (size_t)w >= cap - n) break;
    n += (size_t)w;
  }
  free(o);
  char lr[160];
  lr_change(c, st, lr, sizeof lr);
  if (lr[0] && n + strlen(lr) < cap) strcpy(buf + n, lr);
  return ZT_OK;
}
