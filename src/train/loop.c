/* The training loop behind `zt train`: builds the model, data, optimizer and schedule from a
 * zt_train_config through the run's training mode (train/mode.h), resumes from a checkpoint
 * when asked, and runs steps, evaluating and checkpointing on schedule. Every input is checked
 * before step 1, on every rank, and the ranks agree on the outcome and on their options before
 * their first collective. Resume is bitwise: the RNG state, data position, optimizer state and
 * step are saved at step boundaries. A NaN/inf loss stops the run before anything is saved.
 * The loop asks once which mode runs (choose_mode) and then calls only the mode's wrappers. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/backend.h"
#include "core/file.h"
#include "core/status_internal.h"
#include "io/bounce.h"
#include "train/act_trial.h"
#include "train/gemm_rate.h"
#include "train/memory.h"
#include "train/mode.h"
#include "train/model_source.h"
#include "train/offload_plan.h"
#include "train/run_log.h"
#include "train/run_options.h"
#include "zt/plan.h"

/* What the loop holds beside what the run owns (run) and its mode. */
typedef struct loop {
  zt__run run;           /* what the mode borrows: the world, the tier, the model, the optimizer */
  zt__mode mode;         /* chosen once (choose_mode) */
  zt_tokens *train, *val;
  zt_loader *loader, *val_loader;
  zt_tensor *x, *y;      /* a training microbatch */
  zt_tensor *vx, *vy;    /* a validation batch */
  zt__run_log *log;
  zt_train_memory mem;   /* recompute and activation offload, attached to the model */
  zt__act_trial trial;   /* the activation trial (off unless asked for) */
  bool scaling;          /* f16: dynamic loss scaling */
  zt_loss_scaler scaler;
  int64_t start;         /* steps done before this run (resumed) */
  int64_t saved_step;    /* step of the last checkpoint this run wrote (0: none yet) */
  char options[4096];    /* recorded in checkpoints */
  int64_t warmup;        /* the learning rate's schedule */
  double min_lr;
  double flops;          /* of a step (the model's count), for the MFU */
  double t_start;
  int64_t act_bytes_before; /* the activation offload's bytes before this step */
  double *step_s;        /* every step's time in this run (zt_train_result.step_s_median) */
  int64_t n_step_s, cap_step_s;
} loop;

/* The run's rows of one microbatch on this rank. */
static int64_t microbatch_rows(const loop *r) {
  return r->run.c->data.batch / r->run.data_world / r->run.c->data.microbatches;
}

/* The one place that asks which mode runs. */
static zt_status choose_mode(loop *r) {
  const zt_train_config *c = r->run.c;
  zt_status (*make)(zt__run *, zt__mode *) = zt__train_pp_wanted(c)   ? zt__mode_pipeline
                                             : zt__train_om_wanted(c) ? zt__mode_offload
                                                                      : zt__mode_data_parallel;
  return make(&r->run, &r->mode);
}

/* Frees everything, the mode's state after the optimizer and before the model, the tier last;
 * the status is the logs' (their last bytes written or not). */
static zt_status loop_free(loop *r) {
  free(r->step_s);
  zt_tensor_free(r->x);
  zt_tensor_free(r->y);
  zt_tensor_free(r->vx);
  zt_tensor_free(r->vy);
  zt_loader_free(r->loader);
  zt_loader_free(r->val_loader);
  zt_tokens_free(r->train);
  zt_tokens_free(r->val);
  zt__act_trial_close(&r->trial);
  zt_optim_free(r->run.opt);
  zt__mode_close(&r->mode); /* before the model: the strategies' hooks sit on its modules */
  zt__run_close(&r->run);
  zt_train_memory_free(&r->mem);
  zt_model_free(&r->run.model);
  zt__run_tier_close(&r->run); /* the tier last: the model and the optimizer may have had bytes in it */
  return zt__run_log_close(r->log);
}

/* The training step's microbatches: the next batch of the loader. */
static zt_status next_batch(void *ud, zt_tensor **x, zt_tensor **y) {
  loop *r = ud;
  ZT_TRY(zt_loader_next(r->loader, r->x, r->y));
  *x = r->x, *y = r->y;
  return ZT_OK;
}

static void phase(const loop *r, zt_train_phase p, int64_t step) {
  if (r->run.c->on_phase) r->run.c->on_phase(p, step, r->run.c->phase_user_data);
}

/* Split off the last tenth of a token stream as validation data. */
static zt_status split_tail(zt_tokens *all, zt_tokens **val) {
  int64_t n_val = all->count / 10;
  zt_tokens *v = calloc(1, sizeof *v);
  if (!v) return ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  v->ids = malloc(sizeof *v->ids * (size_t)(n_val ? n_val : 1));
  if (!v->ids) {
    free(v);
    return ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  }
  memcpy(v->ids, all->ids + all->count - n_val, sizeof *v->ids * (size_t)n_val);
  v->count = n_val;
  v->vocab_size = all->vocab_size;
  all->count -= n_val;
  *val = v;
  return ZT_OK;
}

/* Training data: the token file, or the built-in set; validation data: --val-data if
 * given, else the built-in split, else the last tenth of the token file. Both loaders are
 * made here, so data too small for the batch is an error before step 1. */
static zt_status load_data(loop *r) {
  const zt_train_config *c = r->run.c;
  if (!c->data.path[0])
    ZT_TRY(zt_default_dataset(&r->train, &r->val));
  else
    ZT_TRY(zt_tokens_load(c->data.path, &r->train));
  if (c->data.val_path[0]) {
    zt_tokens_free(r->val);
    r->val = NULL;
    ZT_TRY(zt_tokens_load(c->data.val_path, &r->val));
  } else if (c->data.path[0]) {
    ZT_TRY(split_tail(r->train, &r->val));
  }
  const char *train_name = c->data.path[0] ? c->data.path : "(built-in)";
  const char *val_name = c->data.val_path[0] ? c->data.val_path : c->data.path[0] ? "(last tenth of zt_train_config.data.path)" : "(built-in)";
  int vocab = zt_lm_config_dims(&r->run.g).vocab;
  zt_status s = zt_tokens_check_range(r->train, vocab);
  if (s) return zt__error_prefix(s, "training data '%s'", train_name);
  s = zt_tokens_check_range(r->val, vocab);
  if (s) return zt__error_prefix(s, "validation data '%s'", val_name);
  int D = r->run.data_world;
  int64_t rows = c->data.batch / D; // --batch is global: this rank's rows of it (its replica's, with a pipeline)
  int64_t M = c->data.microbatches;
  if (M < 1 || rows % M)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_train_config.data.microbatches %lld does not divide this rank's %lld rows (zt_train_config.data.batch "
                  "%lld over %d %s); use a batch that is a multiple of %s x microbatches (%lld)",
                  (long long)M, (long long)rows, (long long)c->data.batch, D, zt__mode_unit(&r->mode),
                  zt__mode_unit(&r->mode), (long long)(M > 0 ? M : 1) * D);
  // each loader call gives one microbatch: rows / M of this rank, B / M of the global batch
  zt_loader_config lc = {rows / M, c->data.seq, c->seed, r->run.data_rank, D};
  if ((s = zt_loader_new(r->train, &lc, &r->loader)))
    return zt__error_prefix(s, "training data '%s' is too small for batch %lld x seq %lld", train_name,
                            (long long)c->data.batch, (long long)c->data.seq);
  zt_loader_config vc = {rows, c->data.seq, c->seed ^ 0x5a17u, r->run.data_rank, D};
  if ((s = zt_loader_new(r->val, &vc, &r->val_loader)))
    return zt__error_prefix(s,
                            "validation data '%s' is too small for batch %lld x seq %lld (give zt_train_config.data.val_path, or "
                            "lower zt_train_config.data.batch or zt_train_config.data.seq)",
                            val_name, (long long)c->data.batch, (long long)c->data.seq);
  int64_t xs[] = {rows / M, c->data.seq}, vs[] = {rows, c->data.seq};
  ZT_TRY(zt_tensor_empty_tagged(2, xs, ZT_DTYPE_I32, ZT_CPU, ZT_MEM_TAG_TEMP, &r->x));
  ZT_TRY(zt_tensor_empty_tagged(2, xs, ZT_DTYPE_I32, ZT_CPU, ZT_MEM_TAG_TEMP, &r->y));
  ZT_TRY(zt_tensor_empty_tagged(2, vs, ZT_DTYPE_I32, ZT_CPU, ZT_MEM_TAG_TEMP, &r->vx));
  return zt_tensor_empty_tagged(2, vs, ZT_DTYPE_I32, ZT_CPU, ZT_MEM_TAG_TEMP, &r->vy);
}

/* The same validation batches every time: the loader starts over. */
static zt_status eval_loss(loop *r, double *out) {
  const zt_train_config *c = r->run.c;
  ZT_TRY(zt_loader_set_pos(r->val_loader, (zt_loader_pos){0, 0}));
  int64_t nb = zt_loader_windows_per_epoch(r->val_loader) / c->data.batch; // global batches: the same count on every rank
  if (nb > c->log.eval_batches) nb = c->log.eval_batches;
  if (nb < 1) nb = 1;
  bool prev = zt_set_grad_enabled(false);
  zt_module *root = zt_model_module(&r->run.model);
  bool was_training = root->training;
  zt_module_set_training(root, false);
  double acc = 0;
  zt_status s = ZT_OK;
  for (int64_t b = 0; b < nb && s == ZT_OK; b++) {
    double l = 0;
    s = zt_loader_next(r->val_loader, r->vx, r->vy);
    if (!s) s = zt__mode_loss(&r->mode, r->vx, r->vy, &l);
    if (!s) acc += l;
  }
  zt_module_set_training(root, was_training);
  zt_set_grad_enabled(prev);
  *out = acc / (double)nb;
  if (s) return s;
  return zt__mode_mean(&r->mode, out);
}

/* A save folder that can be written: made now (one level), so a bad --save fails before step 1. */
static zt_status check_save_dir(const char *dir) {
  struct stat sb;
  if (mkdir(dir, 0755) != 0 && errno != EEXIST)
    return ZT_ERR(ZT_STATUS_IO, "cannot create checkpoint folder '%s': %s; name a folder whose parent exists", dir,
                  strerror(errno));
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return ZT_ERR(ZT_STATUS_IO, "zt_train_config.checkpoint.save '%s' exists and is not a folder; name a folder", dir);
  if (access(dir, W_OK | X_OK) != 0)
    return ZT_ERR(ZT_STATUS_IO, "cannot write into checkpoint folder '%s': %s", dir, strerror(errno));
  return ZT_OK;
}

static zt_status check_params_finite(loop *r, const char *what) {
  int n = r->run.n_params;
  zt_tensor **ts = malloc(sizeof *ts * (size_t)(n + 1));
  const char **names = malloc(sizeof *names * (size_t)(n + 1));
  zt_status s = ts && names ? ZT_OK : ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  for (int i = 0; i < n && !s; i++) ts[i] = r->run.params[i].tensor, names[i] = r->run.params[i].name;
  if (!s) s = zt__tensors_check_finite(n, ts, names, what);
  free(ts);
  free(names);
  if (!s && r->run.opt) {
    int no = 0;
    const char *const *onames = NULL;
    zt_tensor *const *ots = NULL;
    if (!(s = zt_optim_state(r->run.opt, &no, &onames, &ots))) s = zt__tensors_check_finite(no, ots, onames, what);
  }
  return s;
}

static zt_status save_checkpoint(loop *r, int64_t step) {
  zt_train_state st = {step, zt_rng_get_state(), zt_loader_get_pos(r->loader), r->run.g, 0, 0, "", "", "", "",
                       r->run.c->checkpoint.shard_bytes};
  memcpy(st.options, r->options, sizeof st.options);
  memcpy(st.encoder, r->run.c->data.encoder, sizeof st.encoder); /* the tokenizer goes with every save */
  memcpy(st.merges, r->run.c->data.merges, sizeof st.merges);
  memcpy(st.tokenizer, r->run.c->data.tokenizer, sizeof st.tokenizer);
  if (r->scaling) st.loss_scale = r->scaler.scale, st.loss_scale_good = r->scaler.good_steps;
  ZT_TRY(zt__mode_save(&r->mode, &st));
  r->saved_step = step;
  if (r->run.rank != 0) return ZT_OK;
  zt_status s = zt_snapshot_prune(r->run.c->checkpoint.save, r->run.c->checkpoint.keep_checkpoints);
  return s ? zt__error_prefix(s, "saved checkpoint step %lld in '%s', but", (long long)step, r->run.c->checkpoint.save) : ZT_OK;
}

/* The part of a NaN message that says what survived. */
static const char *survivors(const loop *r, char *buf, size_t cap) {
  const zt_train_config *c = r->run.c;
  if (r->saved_step > 0)
    snprintf(buf, cap, "; the last checkpoint (step %lld) in '%s' is intact", (long long)r->saved_step, c->checkpoint.save);
  else if (c->checkpoint.resume[0])
    snprintf(buf, cap, "; no checkpoint was written in this run, the one it resumed from ('%s', step %lld) is intact",
             c->checkpoint.resume, (long long)r->start);
  else if (c->checkpoint.save[0])
    snprintf(buf, cap, "; no checkpoint was written yet");
  else
    buf[0] = '\0';
  return buf;
}

zt_status zt_train_run(const zt_train_config *c, zt_train_step_fn on_step, void *user_data, zt_train_result *res,
                       zt_model *model_out) {
  return zt_train_run_on(c, NULL, on_step, user_data, res, model_out);
}

/* Everything a rank can check alone, before any collective: the checkpoint to resume, the
 * data, the logs, the save folder; the model, its memory options and initial weights. */
static zt_status prepare(loop *r, zt_train_state *st, zt_train_result *result) {
  const zt_train_config *c = r->run.c;
  if (c->checkpoint.resume[0]) {
    ZT_TRY(zt_snapshot_read_state(c->checkpoint.resume, st));
    if (zt_lm_config_check_same("the checkpoint", &st->model, &r->run.g)) {
      char have[256], want[256];
      zt_lm_config_describe(&st->model, have, sizeof have);
      zt_lm_config_describe(&r->run.g, want, sizeof want);
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "checkpoint '%s' is of another model shape (%s) than asked (%s); resume with the "
                    "same model options (zt_train_config.model)", c->checkpoint.resume, have, want);
    }
    if (st->step > c->steps)
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "checkpoint '%s' is at step %lld, beyond zt_train_config.steps %lld", c->checkpoint.resume,
                    (long long)st->step, (long long)c->steps);
    char changes[1024];
    bool course = false;
    ZT_TRY(zt_train_resume_changes(c, r->run.world, st, changes, sizeof changes, &course));
    if (course && !c->checkpoint.allow_config_change)
      return ZT_ERR(ZT_STATUS_INVALID_ARG,
                    "resuming '%s' with options other than its run's (%s): the continuation would not be the run "
                    "it was; give the same options, or "
                    "zt_train_config.checkpoint.allow_config_change = true to continue anyway",
                    c->checkpoint.resume, changes);
    r->start = st->step;
  }
  ZT_TRY(load_data(r));
  ZT_TRY(zt__train_tokenizer_check(c, &r->run.g));
  if (c->checkpoint.save[0] && r->run.rank == 0) ZT_TRY(check_save_dir(c->checkpoint.save));
  if (r->run.rank == 0) ZT_TRY(zt__run_log_open(c->log.metrics, c->log.tensorboard, r->start, &r->log));
  if (r->run.rank == 0 && c->log.timeline[0]) ZT_TRY(zt__check_output_file(c->log.timeline, "zt_train_config.log.timeline"));
  // every rank builds the same model from the seed (and the strategies broadcast rank 0's anyway)
  zt_rng_seed(c->seed);
  ZT_TRY(zt__mode_build(&r->mode));
  // load_data checked that the batch divides into ranks x microbatches
  ZT_TRY(zt_train_memory_attach(&r->run.model, c, microbatch_rows(r), &r->mem, result));
  if (c->model.init_from[0]) ZT_TRY(zt__train_init_from(&r->run.model, c->model.init_from));
  return ZT_OK;
}

/* After the activation trial's choice: the summary's plan and prediction are the new plan's. */
static void describe_plan(loop *r, zt_train_result *res) {
  zt__train_plan_result(&r->run.model, &r->mem, microbatch_rows(r), r->run.c->data.seq, res);
}

/* Every rank gets the first failure of any rank (s: this rank's); on success, the ranks' options
 * (with resumed: the checkpoint read, and the data's content) are compared, and a difference is
 * an error naming the option and the ranks' values. Collective. */
static zt_status agree(loop *r, zt_status s, const zt_train_state *resumed) {
  if (!r->run.comm || r->run.world < 2) return s;
  s = zt_comm_agree_status(r->run.comm, s);
  zt__run_opts *o = s ? NULL : malloc(sizeof *o);
  if (!s && !o) s = ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  if (!s) {
    zt__run_options(r->run.c, &r->run.g, r->run.world, resumed, o);
    if (r->train) zt__run_options_add_data(o, r->train, r->val);
    const char *values[ZT__RUN_OPTS_MAX];
    for (int i = 0; i < o->n; i++) values[i] = o->value[i];
    s = zt_comm_check_same(r->run.comm, o->n, o->name, values);
  }
  free(o);
  return s;
}

/* Whether any rank was asked to stop: *sig the request's value (a signal number; where ranks got
 * different ones, their mean), 0 none. Every rank gets the same answer. */
static zt_status stop_agreed(loop *r, int *sig) {
  *sig = 0;
  if (!r->run.c->stop_request) return ZT_OK;
  double v[2] = {*r->run.c->stop_request, *r->run.c->stop_request ? 1 : 0};
  if (r->run.world > 1) { /* the whole world, pipeline ranks included */
    zt_tensor *t = NULL;
    ZT_TRY(zt_tensor_from_data(1, (int64_t[]){2}, ZT_DTYPE_F64, v, &t));
    zt_status s = zt_all_reduce(r->run.comm, t, ZT_REDUCE_SUM);
    if (!s) v[0] = zt_tensor_get(t, 0), v[1] = zt_tensor_get(t, 1);
    zt_tensor_free(t);
    ZT_TRY(s);
  }
  *sig = v[1] > 0 ? (int)lround(v[0] / v[1]) : 0;
  return ZT_OK;
}

/* Adds a sentence to res->warnings; returns it (for the step's info). */
static const char *warn(zt_train_result *res, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const char *warn(zt_train_result *res, const char *fmt, ...) {
  size_t n = strlen(res->warnings), cap = sizeof res->warnings;
  if (n + 3 >= cap) return res->warnings;
  if (n) n += (size_t)snprintf(res->warnings + n, cap - n, "; ");
  const char *at = res->warnings + n;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(res->warnings + n, cap - n, fmt, ap);
  va_end(ap);
  return at;
}

/* Options that make sense alone but not together (the mode's own: zt__mode_check); the checks
 * that need no file or rank. */
static zt_status check_combinations(const zt_train_config *c) {
  if (c->optim.min_lr > c->optim.lr)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_config.optim.min_lr %g is above zt_train_config.optim.lr %g: the "
                  "cosine schedule would rise from the peak to the floor; give a floor at most the peak rate",
                  c->optim.min_lr, c->optim.lr);
  return ZT_OK;
}

/* The run's options recorded for its checkpoints. */
static zt_status record_options(loop *r, const zt_train_state *resumed) {
  zt__run_opts *o = malloc(sizeof *o);
  if (!o) return ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  zt__run_options(r->run.c, &r->run.g, r->run.world, resumed, o);
  zt__run_options_record(o, r->options, sizeof r->options);
  free(o);
  return ZT_OK;
}

/* Up to the ranks' agreement: the world, the model's shape, the planner (--mem-limit: the options
 * it chose, in *planned), the mode, and what each rank checks alone (prepare). Until the ranks
 * agree, nothing here is a collective: a rank that fails alone (another option than the
 * others', a file only it cannot read) reaches the agreement like the others. */
static zt_status set_up(loop *r, const zt_train_config *c, zt_comm *comm, zt_train_config *planned,
                        zt_train_state *st, zt_train_result *result) {
  zt__run *run = &r->run;
  run->c = c;
  run->next = next_batch, run->next_data = r;
  zt_status s = zt__run_open(run, c, comm);
  if (!s) s = zt_train_model_config(c, &run->g);
  int context = zt_lm_config_dims(&run->g).context;
  if (!s && c->data.seq > context)
    s = ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_config.data.seq %lld is longer than the model's context (%d); use "
               "zt_train_config.data.seq <= %d or zt_train_config.model.block_size",
               (long long)c->data.seq, context, context);
  if (!s && c->plan[0]) { /* --plan auto|FILE: the planner's options (zt train resolves it itself, to print it) */
    *planned = *c;
    zt_plan_run pr;
    s = zt_train_plan(planned, run->comm, &pr);
    c = run->c = planned;
  }
  if (!s && zt__train_plan_wanted(c, run->world)) {
    if (c != planned) *planned = *c;
    s = zt_train_plan_memory(planned, run->world, &result->plan);
    c = run->c = planned;
  }
  /* the allocator's bound for this run (a plan's: --plan's or --mem-limit's; or none: a bound an
   * earlier run in this process set goes) */
  if (!s) zt__mem_set_resident_limit(c->memory.held_limit);
  if (run->comm) zt_comm_set_timeout(run->comm, c->parallel.comm_timeout);
  if (!s) s = choose_mode(r);
  if (!s) s = zt__mode_check(&r->mode);
  if (!s) s = check_combinations(c);
  // the ranks fail together on any rank's bad input, and refuse to run with different options
  s = agree(r, s, NULL);
  if (!s) s = zt__mode_open(&r->mode);
  if (!s) s = prepare(r, st, result);
  s = agree(r, s, c->checkpoint.resume[0] ? st : NULL); /* now with the data's content */
  if (s) result->failed_together = true;
  return s;
}

/* The resumed checkpoint's state: the mode's load (its stream made this rank's), the data's
 * position, the random stream, the loss scale. */
static zt_status resume(loop *r, zt_train_state *st) {
  ZT_TRY(zt__mode_load(&r->mode, st));
  ZT_TRY(zt_loader_set_pos(r->loader, st->data));
  zt_rng_set_state(st->rng);
  if (st->loss_scale > 0) r->scaler.scale = st->loss_scale, r->scaler.good_steps = st->loss_scale_good;
  return ZT_OK;
}

/* After the agreement: the optimizer and what it updates (the mode's link), a resume, the
 * weights checked finite on every rank, the parameters ready for step 1, the activation trial
 * and the learning rate's schedule. */
static zt_status start_run(loop *r, zt_train_state *st, zt_train_result *result) {
  zt__run *run = &r->run;
  const zt_train_config *c = run->c;
  const zt_train_state *resumed = c->checkpoint.resume[0] ? st : NULL;
  ZT_TRY(record_options(r, resumed));
  run->oc = zt_optim_default(c->optim.kind);
  run->oc.lr = c->optim.lr;
  run->oc.weight_decay = c->optim.weight_decay;
  run->oc.beta1 = c->optim.beta1;
  run->oc.beta2 = c->optim.beta2;
  run->oc.momentum = c->optim.momentum;
  r->scaling = c->parallel.mixed_precision == ZT_DTYPE_F16; // f16 gradients need a loss scale; bf16's range does not
  r->scaler = zt_loss_scaler_default();
  ZT_TRY(zt__mode_link(&r->mode));
  // the dropout masks of rank r must not repeat rank 0's: each rank its own stream
  if (run->world > 1) zt_rng_seed(c->seed + (uint64_t)run->rank);
  if (resumed) ZT_TRY(resume(r, st));
  if (resumed || c->model.init_from[0]) {
    char what[600];
    snprintf(what, sizeof what, "%s '%s'", resumed ? "checkpoint" : "zt_train_config.model.init_from",
             resumed ? c->checkpoint.resume : c->model.init_from);
    zt_status s = check_params_finite(r, what);
    if (run->world > 1) s = zt_comm_agree_status(run->comm, s);
    if (s) {
      result->failed_together = true;
      return s;
    }
  }
  ZT_TRY(zt__mode_ready(&r->mode));
  ZT_TRY(zt__act_trial_open(&r->trial, c, zt__mode_offload_model(&r->mode), r->mem.recompute, zt_lm_config_dims(&run->g).n_layer,
                            r->start, &result->act_choice));
  zt__run_schedule(c, resumed, &r->warmup, &r->min_lr);
  return ZT_OK;
}

/* Step step + 1's options. */
static zt_train_step_options step_options(loop *r, int64_t step, double lr) {
  const zt_train_config *c = r->run.c;
  zt_train_step_options so = zt_train_step_options_default();
  so.lr = lr;
  so.microbatches = c->data.microbatches;
  so.grad_clip = c->optim.grad_clip;
  so.scaler = r->scaling ? &r->scaler : NULL;
  so.poison_loss = c->inject_nan_at == step + 1;
  so.step = step + 1;
  so.on_phase = c->on_phase;
  so.phase_user_data = c->phase_user_data;
  so.stop_request = c->stop_request;
  return so;
}

/* A step whose loss or gradient norm is not finite stops the run, on every rank (both values
 * are global), saying what survived. */
static zt_status check_step(loop *r, int64_t step, const zt_train_step_result *sr, zt_train_result *result) {
  char why[700];
  zt_status s = ZT_OK;
  if (sr->bad_loss)
    s = ZT_ERR(ZT_STATUS_STATE, "loss is %g at step %lld: training stopped%s; lower zt_train_config.optim.lr or check the data", sr->loss,
               (long long)step + 1, survivors(r, why, sizeof why));
  else if (sr->bad_grad)
    s = ZT_ERR(ZT_STATUS_STATE, "gradient norm is %g at step %lld: training stopped%s; lower zt_train_config.optim.lr", sr->grad_norm,
               (long long)step + 1, survivors(r, why, sizeof why));
  if (sr->bad_loss || sr->bad_grad) result->failed_together = true;
  return s;
}

/* The step's figures that need no collective. */
static void step_info(loop *r, int64_t step, const zt_train_step_result *sr, double lr, double dt,
                      zt_train_result *result, zt_train_step_info *info) {
  const zt_train_config *c = r->run.c;
  *info = (zt_train_step_info){0};
  info->step = step + 1;
  info->first_step = r->start + 1;
  info->total_steps = c->steps;
  info->loss = sr->loss;
  info->lr = lr;
  info->grad_norm = sr->grad_norm;
  info->val_loss = NAN;
  info->step_ms = dt * 1e3;
  info->elapsed_s = zt_clock_now() - r->t_start;
  info->tokens_per_s = (double)(c->data.batch * c->data.seq) / dt;
  /* every rank has its own ceiling; one the step beat was measured while the machine was busier */
  double gflops = r->flops / dt / 1e9 / r->run.world;
  if (gflops > result->sgemm_gflops) result->sgemm_gflops = gflops;
  info->mfu = result->sgemm_gflops > 0 ? gflops / result->sgemm_gflops : 0;
  info->loss_scale = sr->loss_scale;
  info->skipped = sr->skipped;
  info->rank = r->run.rank;
  info->world = r->run.world;
  info->pp_bubble = info->pp_sim_bubble = NAN;
}

/* The step's memory, the mode's figures, every rank's figures to rank 0, and the metrics line.
 * A log that cannot be written costs no training: said once, and written no more. */
static zt_status log_step(loop *r, zt_train_step_info *info, zt_train_result *result) {
  zt_mem_stats_get(ZT_CPU, &info->mem);
  info->peak_rss = zt_mem_peak_rss();
  info->act_peak_predicted = result->act_peak_predicted;
  ZT_TRY(zt__mode_stats(&r->mode, info));
  double mine[ZT__RANK_FIG_N], *all = NULL;
  zt__rank_figures(info, mine);
  zt_status s = ZT_OK;
  if (r->run.world > 1) {
    if (!(all = malloc(sizeof *all * ZT__RANK_FIG_N * (size_t)r->run.world)))
      return ZT_ERR(ZT_STATUS_OOM, "out of host memory");
    s = zt__run_gather(&r->run, mine, ZT__RANK_FIG_N, all);
  }
  result->act_peak = info->mem.peak[ZT_MEM_TAG_ACTIVATION];
  for (int k = 0; k < (all ? r->run.world : 1); k++) { /* the worst rank's figures */
    const double *v = all ? all + (size_t)k * ZT__RANK_FIG_N : mine;
    for (int t = 0; t < ZT_MEM_TAG_COUNT; t++)
      if ((int64_t)v[t] > result->tag_peak_max[t]) result->tag_peak_max[t] = (int64_t)v[t];
    if ((int64_t)v[ZT__RANK_FIG_BYTES] > result->peak_bytes_max) result->peak_bytes_max = (int64_t)v[ZT__RANK_FIG_BYTES];
    if ((int64_t)v[ZT__RANK_FIG_RSS] > result->peak_rss_max) result->peak_rss_max = (int64_t)v[ZT__RANK_FIG_RSS];
  }
  if (r->mem.offload) {
    zt_offload_stats os;
    zt_offload_stats_get(r->mem.offload, &os);
    info->act_offload_bytes = os.bytes_offloaded - r->act_bytes_before;
    r->act_bytes_before = os.bytes_offloaded;
    result->offload_peak_bytes = os.peak_bytes_in_tier;
    result->offload_put_s = os.put_ms / 1e3, result->offload_wait_s = os.wait_ms / 1e3;
  }
  if (!s && r->log && zt__run_log_step(r->log, info, zt__mode_name(&r->mode), all ? all : mine)) {
    info->warning = warn(result, "%s; the run goes on without its logs", zt_last_error());
    ZT_IGNORE(zt__run_log_close(r->log), "the write's failure is the one reported");
    r->log = NULL;
  }
  free(all);
  return s;
}

/* Step step + 1: the mode's step, then its figures, an evaluation and a checkpoint when due.
 * *interrupted: every rank dropped the step (they agreed in it), the data and the random
 * stream put back to where the step began. */
static zt_status one_step(loop *r, int64_t step, zt_train_step_fn on_step, void *user_data, zt_train_result *result,
                          bool *interrupted) {
  const zt_train_config *c = r->run.c;
  double t0 = zt_clock_now();
  double lr = zt_lr_cosine(step, r->warmup, c->steps, c->optim.lr, r->min_lr);
  zt_train_step_options so = step_options(r, step, lr);
  zt_train_step_result sr = {0};
  zt_act_trial_step trial_kind = ZT_ACT_TRIAL_STEP_NONE;
  bool chosen = false;
  zt_loader_pos pos0 = zt_loader_get_pos(r->loader);
  zt_rng_state rng0 = zt_rng_get_state();
  ZT_TRY(zt__act_trial_before(&r->trial, step + 1, &trial_kind));
  zt_status s = zt__mode_step(&r->mode, &so, &sr);
  if (!s && sr.interrupted) {
    s = zt_loader_set_pos(r->loader, pos0);
    zt_rng_set_state(rng0);
    if (!s) s = stop_agreed(r, &result->stop_signal);
    result->stopped = *interrupted = true;
    return s;
  }
  /* a failed step: its error (the other ranks' waits end with the job); a NaN or inf loss or grad
   * norm is check_step's to say */
  if (s && !sr.bad_loss && !sr.bad_grad) return s;
  ZT_TRY(check_step(r, step, &sr, result));
  double dt = zt_clock_now() - t0;
  ZT_TRY(zt__act_trial_after(&r->trial, step + 1, dt, &chosen));
  if (r->n_step_s == r->cap_step_s) {
    int64_t cap = r->cap_step_s ? 2 * r->cap_step_s : 64;
    double *t = realloc(r->step_s, (size_t)cap * sizeof *t);
    if (!t) return ZT_ERR(ZT_STATUS_OOM, "out of host memory");
    r->step_s = t, r->cap_step_s = cap;
  }
  r->step_s[r->n_step_s++] = dt;
  if (chosen) describe_plan(r, result); /* the summary shows the plan the trial chose */
  if (isnan(result->first_loss)) result->first_loss = sr.loss;
  result->last_loss = sr.loss;
  result->steps_done = step + 1 - r->start;
  zt_train_step_info info;
  step_info(r, step, &sr, lr, dt, result, &info);
  info.act_trial = trial_kind;
  info.act_choice = chosen ? &result->act_choice : NULL;
  bool last = step + 1 == c->steps || step + 1 == c->stop_at;
  zt__run_tier_io(&r->run, &info); /* the step's own I/O: the evaluation's is no step's */
  if ((c->log.eval_every && (step + 1) % c->log.eval_every == 0) || last) {
    phase(r, ZT_TRAIN_PHASE_EVAL, step + 1);
    ZT_TRY(eval_loss(r, &info.val_loss));
    result->last_val_loss = info.val_loss;
    zt__run_tier_io_skip(&r->run);
  }
  ZT_TRY(log_step(r, &info, result));
  if (c->checkpoint.save[0] && ((c->checkpoint.save_every && (step + 1) % c->checkpoint.save_every == 0) || last)) {
    phase(r, ZT_TRAIN_PHASE_SAVE, step + 1);
    ZT_TRY(save_checkpoint(r, step + 1));
    info.saved_step = step + 1;
  }
  if (on_step) on_step(&info, user_data);
  return ZT_OK;
}

/* The steps, until the last, a stop request (the last complete step saved, without an
 * evaluation: a scheduler's grace period is short) or a failure; then the figures of the run. */
static zt_status train(loop *r, zt_train_step_fn on_step, void *user_data, zt_train_result *result) {
  const zt_train_config *c = r->run.c;
  result->sgemm_gflops = zt__sgemm_ceiling();
  result->num_params = zt_module_num_params(zt_model_module(&r->run.model));
  r->flops = zt_model_flops_per_step(&r->run.model, c->data.batch, c->data.seq);
  r->t_start = zt_clock_now();
  /* the set-up's freed blocks go back before step 1 (a model built whole and then sharded or cut
   * into stages, a checkpoint's buffers): the allocator's cache then holds only the blocks the
   * steps free and make again, which the planner predicts (GPT-2 350M FSDP full at 2 ranks: rank
   * 0's peak RSS 4.73 GiB with them, 4.37 GiB without, the step as fast) */
  zt_mem_empty_cache();
  zt_mem_reset_peaks(); /* the peaks reported (per step, act_peak) are this run's, from its first step */
  zt__run_tier_io_skip(&r->run); /* the set-up's I/O (building, loading) is no step's */
  result->first_loss = NAN;
  result->last_val_loss = NAN;
  zt_status s = ZT_OK;
  int64_t step = r->start;
  for (; step < c->steps; step++) {
    if ((s = stop_agreed(r, &result->stop_signal))) break;
    if (result->stop_signal) {
      result->stopped = true;
      break;
    }
    bool interrupted = false;
    if ((s = one_step(r, step, on_step, user_data, result, &interrupted)) || interrupted) break;
    if (step + 1 == c->stop_at) {
      step++;
      break;
    }
  }
  if (!s && result->stopped && c->checkpoint.save[0] && step > r->start && r->saved_step != step) {
    phase(r, ZT_TRAIN_PHASE_SAVE, step);
    s = save_checkpoint(r, step);
  }
  result->saved_step = r->saved_step;
  result->last_step = step;
  /* figures last: one that cannot be written is a warning, after the checkpoint is safe */
  if (!s && c->log.timeline[0] && result->steps_done > 0 && zt__mode_timeline(&r->mode, c->log.timeline))
    warn(result, "%s; the training and its checkpoints are not affected", zt_last_error());
  result->seconds = zt_clock_now() - r->t_start;
  if (r->n_step_s > 0) { /* the first step of a run (page faults, BLAS buffers) is no later step's */
    int64_t k = r->n_step_s > 1 ? 1 : 0, n = r->n_step_s - k;
    result->step_s_median = zt__median(r->step_s + k, n);
  }
  if (result->seconds > 0)
    result->tokens_per_s = (double)(result->steps_done * c->data.batch * c->data.seq) / result->seconds;
  return s;
}

zt_status zt_train_run_on(const zt_train_config *c, zt_comm *comm, zt_train_step_fn on_step, void *user_data,
                          zt_train_result *res, zt_model *model_out) {
  if (!c) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_run: config is NULL");
  if (model_out) ZT_TRY(zt__run_check_model_out(c));
  loop r = {0};
  zt_train_result result = {0};
  zt_set_num_threads(c->threads);
  if (res) *res = result;
  zt_train_state st = {0};
  zt_train_config planned; /* --mem-limit: the options the planner chose */
  zt_status s = set_up(&r, c, comm, &planned, &st, &result);
  if (!s) s = start_run(&r, &st, &result);
  if (!s) s = train(&r, on_step, user_data, &result);
  /* the steps are over: the blocks the allocator cached for them go back first, so making the model
   * whole again adds its own bytes, not them (GPT-2 350M FSDP full at 2 ranks: the cache held 2.0
   * GiB there, and the process's peak passed the steps' by 0.6 GiB); the run's bound on the
   * allocator ends with its steps */
  zt_mem_empty_cache();
  zt__mem_set_resident_limit(0);
  zt__mode_end(&r.mode, &result); /* the model whole again (for model_out) */
  if (res) *res = result;
  if (s == ZT_OK && model_out) s = zt__mode_gather(&r.mode); // the caller gets usable full parameters
  if (s == ZT_OK && model_out) {
    *model_out = r.run.model;
    r.run.model = (zt_model){0};
  }
  zt_status closed = loop_free(&r);
  return s ? s : closed;
}
