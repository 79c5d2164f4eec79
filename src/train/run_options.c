/* The options that define a training run, as name/value strings. The ranks of a run compare
 * them at start-up (a different --batch or --seed on one rank is refused before any work), and
 * a checkpoint records those that set the run's course, so that a resume with other values is
 * reported, and refused unless asked (the continuation would not be bitwise). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "io/buf.h"
#include "train/run_options.h"

/* Options whose change alters the losses of a resumed run (the model's shape is checked apart). */
static const char *const k_course[] = {"seed",     "batch",     "seq",     "lr",   "min-lr",         "warmup",
                                       "optimizer", "weight-decay", "beta1", "beta2", "momentum", "grad-clip",
                                       "dropout",  "data",      "mixed-precision"};
/* Recorded and reported, never refused: the step count (extending a run is what resuming is
 * for; the cosine schedule then stretches from the checkpoint on, and a warm-up that follows
 * the step count shows as a course change of its own), evaluation data, the data-parallel
 * layout (a sharded checkpoint resumes at any rank count, equal up to reduction-order rounding),
 * the pipeline layout (its checkpoints are single-process ones), the microbatch count (the same rows and mean loss, up to summation-order rounding) and the model offload (bitwise plain training with
 * a lossless tier; its checkpoints are single-process ones). */
static const char *const k_info[] = {"steps", "val-data", "ranks", "shard", "microbatches", "pp", "schedule", "chunks",
                                     "pp-balance", "offload-model"};
/* Recorded for the next run's use, not compared: the warm-up the run resolved (an unset warm-up
 * follows the step count, and a resume that extends the run keeps the checkpoint's, so the
 * schedule up to the resume step is the one the run had). */
static const char *const k_quiet[] = {"warmup-resolved"};

static bool in_list(const char *name, const char *const *list, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(name, list[i])) return true;
  return false;
}
#define IN(name, list) in_list((name), (list), sizeof(list) / sizeof((list)[0]))

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

static void add_f64(zt__run_opts *o, const char *name, double v) {
  char b[32];
  add(o, name, "%s", zt__fmt_double(b, v));
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

void zt__run_options(const zt_train_config *c, const zt_gpt2_config *g, int world, const zt_train_state *resumed,
                     zt__run_opts *o) {
  memset(o, 0, sizeof *o);
  int64_t warmup;
  double min_lr;
  zt__run_schedule(c, resumed, &warmup, &min_lr);
  add(o, "seed", "%llu", (unsigned long long)c->seed);
  add(o, "batch", "%lld", (long long)c->data.batch);
  add(o, "seq", "%lld", (long long)c->data.seq);
  add(o, "steps", "%lld", (long long)c->steps);
  add_f64(o, "lr", c->optim.lr);
  add_f64(o, "min-lr", min_lr);
  if (c->optim.warmup >= 0) add(o, "warmup", "%lld", (long long)c->optim.warmup);
  else add(o, "warmup", "auto");
  add(o, "warmup-resolved", "%lld", (long long)warmup);
  add(o, "optimizer", "%s", c->optim.kind == ZT_OPTIM_SGD ? "sgd" : "adamw");
  add_f64(o, "weight-decay", c->optim.weight_decay);
  add_f64(o, "beta1", c->optim.beta1);
  add_f64(o, "beta2", c->optim.beta2);
  add_f64(o, "momentum", c->optim.momentum);
  add_f64(o, "grad-clip", c->optim.grad_clip);
  add_f64(o, "dropout", g->dropout);
  add(o, "data", "%s", c->data.path[0] ? c->data.path : "(built-in)");
  add(o, "mixed-precision", "%s", c->parallel.mixed_precision == ZT_DTYPE_F32 ? "none" : zt_dtype_name(c->parallel.mixed_precision));
  add(o, "val-data", "%s", c->data.val_path[0] ? c->data.val_path : "(split)");
  add(o, "ranks", "%d", world);
  add(o, "shard", "%s", c->parallel.shard == ZT_SHARD_NONE ? "none" : zt_shard_strategy_name(c->parallel.shard));
  add(o, "microbatches", "%lld", (long long)c->data.microbatches);
  add(o, "pp", "%d", c->parallel.pp);
  add(o, "schedule", "%s", c->parallel.pp > 1 ? c->parallel.schedule : "none");
  add(o, "chunks", "%d", c->parallel.chunks);
  add(o, "pp-balance", "%s", c->parallel.pp_balance);
  static const char *const tiers[] = {"none", "bf16", "disk", "host"};
  add(o, "offload-model", "%s", tiers[c->memory.offload_model & 3]);
  o->n_recorded = o->n;
  /* the rest must agree between ranks, and is not recorded */
  add(o, "layers", "%d", g->n_layer);
  add(o, "heads", "%d", g->n_head);
  add(o, "dim", "%d", g->n_embd);
  add(o, "vocab", "%d", g->vocab_size);
  add(o, "ctx", "%d", g->block_size);
  add(o, "hybrid-group", "%d", c->parallel.hybrid_group);
  add(o, "prefetch", "%d", c->parallel.prefetch);
  add(o, "recompute", "%s", zt_recompute_name(c->memory.recompute));
  add(o, "recompute-budget", "%lld", (long long)c->memory.recompute_budget);
  add(o, "checkpoint-every", "%d", c->memory.checkpoint_every);
  add(o, "save", "%s", c->checkpoint.save);
  add(o, "save-every", "%lld", (long long)c->checkpoint.save_every);
  add(o, "save-format", "%s", c->checkpoint.save_full ? "full" : "sharded");
  add(o, "resume", "%s", c->checkpoint.resume);
  add(o, "init-from", "%s", c->model.init_from);
  add(o, "encoder", "%s", c->data.encoder);
  add(o, "merges", "%s", c->data.merges);
  add(o, "stop-at", "%lld", (long long)c->stop_at);
  add(o, "inject-nan-at", "%lld", (long long)c->inject_nan_at);
  add(o, "eval-every", "%lld", (long long)c->log.eval_every);
  add(o, "eval-batches", "%lld", (long long)c->log.eval_batches);
  add(o, "timeline", "%s", c->log.timeline);
  add(o, "metrics", "%s", c->log.metrics);         /* rank 0 writes them: given to another rank alone, */
  add(o, "tensorboard", "%s", c->log.tensorboard); /* they would be dropped without a word */
  add(o, "keep-checkpoints", "%d", c->checkpoint.keep_checkpoints);
  add_f64(o, "comm-timeout", c->parallel.comm_timeout);
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
  zt_gpt2_config g;
  ZT_TRY(zt_train_model_config(c, &g));
  zt__run_opts *o = malloc(sizeof *o);
  if (!o) return ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  zt__run_options(c, &g, world, st, o);
  size_t n = 0;
  buf[0] = '\0';
  *course = false;
  for (int i = 0; i < o->n_recorded; i++) {
    char was[ZT__RUN_OPT_VALUE];
    if (IN(o->name[i], k_quiet) || !recorded(st->options, o->name[i], was, sizeof was) || !strcmp(was, o->value[i]))
      continue;
    /* an unset warm-up keeps the checkpoint's (older checkpoints recorded the number it resolved to) */
    if (!strcmp(o->name[i], "warmup") && !strcmp(o->value[i], "auto")) continue;
    bool is_course = IN(o->name[i], k_course);
    ZT_ASSERT(is_course || IN(o->name[i], k_info));
    *course |= is_course;
    int w = snprintf(buf + n, cap - n, "%s%s %s -> %s", n ? ", " : "", o->name[i], was, o->value[i]);
    if (w < 0 || (size_t)w >= cap - n) break;
    n += (size_t)w;
  }
  free(o);
  char lr[160];
  lr_change(c, st, lr, sizeof lr);
  if (lr[0] && n + strlen(lr) < cap) strcpy(buf + n, lr);
  return ZT_OK;
}
