/* The training loop behind `zt train`: builds the model, data, optimizer and schedule
 * from a zt_train_config, resumes from a checkpoint when asked, and runs steps
 * (forward, backward, clip, AdamW/SGD), evaluating and checkpointing on schedule.
 * Every input is checked before step 1, on every rank, and the ranks agree on the outcome
 * and on their options before their first collective. Resume is bitwise: the RNG state,
 * data position, optimizer state and step are saved at step boundaries. A NaN/inf loss
 * stops the run before anything is saved. */
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/file.h"
#include "core/status_internal.h"
#include "io/bounce.h"
#include "train/act_trial.h"
#include "train/model_source.h"
#include "train/offload_train.h"
#include "train/parallel.h"
#include "train/pipeline_train.h"
#include "train/run_log.h"
#include "train/run_options.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* GFLOP/s of n^3 sgemm over reps runs after a warm-up: their median, or their best. */
static double sgemm_rate(int n, int reps, bool best) {
  size_t nn = (size_t)n * (size_t)n;
  float *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b), *c = malloc(nn * sizeof *c);
  double *t = reps >= 1 ? malloc(sizeof *t * (size_t)reps) : NULL;
  if (!a || !b || !c || !t) { /* reps < 1, or out of host memory: no measure */
    free(a), free(b), free(c), free(t);
    return 0;
  }
  for (size_t i = 0; i < nn; i++) a[i] = (float)(i % 7) * 0.1f, b[i] = (float)(i % 5) * 0.1f;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
  for (int r = 0; r < reps; r++) {
    double t0 = zt_clock_now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    t[r] = zt_clock_now() - t0;
  }
  qsort(t, (size_t)reps, sizeof *t, cmp_double);
  double g = 2.0 * n * (double)n * n / t[best ? 0 : reps / 2] / 1e9;
  free(t), free(a), free(b), free(c);
  return g;
}

double zt_sgemm_gflops(int n, int reps) { return sgemm_rate(n, reps, false); }

/* The ceiling MFU is measured against: the best of a few runs at two sizes, so that a moment of
 * load beside the run (which only ever slows a run down) does not set it low. */
static double sgemm_ceiling(void) {
  double a = sgemm_rate(512, 4, true), b = sgemm_rate(1024, 3, true);
  return a > b ? a : b;
}

/* Model config from the preset, what it starts from and its data, plus explicit overrides. */
zt_status zt_train_model_config(const zt_train_config *c, zt_gpt2_config *g) {
  ZT_TRY(zt_gpt2_preset(c->model.preset, g));
  ZT_TRY(zt__train_model_source(c, g)); /* init_from's shape, the token file's vocabulary */
  if (c->model.n_layer > 0) g->n_layer = c->model.n_layer;
  if (c->model.n_head > 0) g->n_head = c->model.n_head;
  if (c->model.n_embd > 0) g->n_embd = c->model.n_embd;
  if (c->model.vocab_size > 0) g->vocab_size = c->model.vocab_size;
  if (c->model.block_size > 0) g->block_size = c->model.block_size;
  if (c->model.dropout >= 0) g->dropout = c->model.dropout;
  return zt_gpt2_config_validate(g);
}

typedef struct run run;

/* How the loop runs the kind of training the config asks for, chosen once (train_mode_of): a
 * pipeline (pipeline_train.c), OffloadModel (offload_train.c) or data parallel training, plain,
 * DDP or FSDP (parallel.c). The loop itself never asks which. */
typedef struct train_mode {
  const char *(*name)(const run *r); /* in metrics ("single", "ddp", "full", "offload", "pipeline", ...) */
  zt_status (*step)(run *r, const zt_train_step_options *so, zt_train_step_result *out);
  /* a validation batch's loss (grad off), and the mean of a value over the ranks that share it */
  zt_status (*loss)(run *r, zt_tensor *x, zt_tensor *y, double *loss);
  zt_status (*mean)(run *r, double *v);
  zt_status (*save)(run *r, const zt_train_state *st);
  zt_status (*load)(run *r, zt_train_state *st);
  zt_status (*gather_full)(run *r); /* usable full parameters for a caller that takes the model */
} train_mode;

struct run {
  const train_mode *mode;
  const zt_train_config *c;
  zt_gpt2_config g;
  zt_gpt2 *model;
  zt_optim *opt;
  zt_tokens *train, *val;
  zt_loader *loader, *val_loader;
  zt_tensor *x, *y;      /* a training microbatch */
  zt_tensor *vx, *vy;    /* a validation batch */
  zt__run_log *log;
  zt__train_dp dp;
  zt__train_pp pp;       /* the pipeline (pp.P == 0: none) */
  zt__train_om om;       /* OffloadModel (om.om NULL: none) */
  zt_optim_config oc;
  zt_train_memory mem;   /* recompute and activation offload, attached to model */
  zt__act_trial trial;   /* the activation trial (off unless asked for) */
  bool scaling;          /* f16: dynamic loss scaling */
  zt_loss_scaler scaler;
  int64_t start;         /* steps done before this run (resumed) */
  int64_t saved_step;    /* step of the last checkpoint this run wrote (0: none yet) */
  char options[4096];    /* recorded in checkpoints */
  zt_dp_strategy dps;    /* the data-parallel strategy as a step sees it */
};

/* The run's rows of one microbatch on this rank. */
static int64_t microbatch_rows(const run *r) { return r->c->data.batch / r->dp.data_world / r->c->data.microbatches; }

/* ------------------------------------------------ the modes */
static zt_status next_batch(void *ud, zt_tensor **x, zt_tensor **y);

static const char *dp_name(const run *r) {
  return !r->dp.ddp && !r->dp.fsdp ? "single" : r->dp.ddp ? "ddp" : zt_shard_strategy_name(r->c->parallel.shard);
}
static zt_status dp_step(run *r, const zt_train_step_options *so, zt_train_step_result *out) {
  zt_model model = zt_gpt2_model(r->model);
  return zt_train_step(&model, &r->dps, r->opt, next_batch, r, so, out);
}
static zt_status dp_loss(run *r, zt_tensor *x, zt_tensor *y, double *loss) {
  zt_tensor *l = NULL;
  ZT_TRY(zt_gpt2_forward(r->model, x, y, NULL, &l));
  *loss = zt_tensor_get(l, 0);
  zt_tensor_free(l);
  return ZT_OK;
}
static zt_status dp_mean(run *r, double *v) { return zt__train_dp_mean(&r->dp, v); }
static zt_status dp_save(run *r, const zt_train_state *st) {
  return zt__train_dp_save(&r->dp, r->c, r->c->checkpoint.save, r->model, r->opt, st);
}
static zt_status dp_load(run *r, zt_train_state *st) {
  return zt__train_dp_load(&r->dp, r->c->checkpoint.resume, r->model, r->opt, st);
}
static zt_status dp_gather_full(run *r) { return zt__train_dp_gather_full(&r->dp); }
static const train_mode k_data_parallel = {dp_name, dp_step, dp_loss, dp_mean, dp_save, dp_load, dp_gather_full};

static const char *om_name(const run *r) { return r->dp.world > 1 ? "offload+ddp" : "offload"; }
static zt_status om_step(run *r, const zt_train_step_options *so, zt_train_step_result *out) {
  return zt__train_om_step(&r->om, &r->dps, r->opt, next_batch, r, so, out);
}
static zt_status om_loss(run *r, zt_tensor *x, zt_tensor *y, double *loss) {
  return zt__train_om_loss(&r->om, x, y, loss);
}
/* its parameters (and with offload_states its optimizer state) stream from the store into the
 * files, never all in RAM; the waiting updates first, so the optimizer's state and count are
 * the step's */
static zt_status om_save(run *r, const zt_train_state *st) {
  ZT_TRY(zt__train_om_settle(&r->om));
  return dp_save(r, st);
}
static const train_mode k_offload = {om_name, om_step, om_loss, dp_mean, om_save, dp_load, dp_gather_full};

static const char *pp_name(const run *r) { return r->pp.D > 1 ? "pipeline+ddp" : "pipeline"; }
static zt_status pp_step(run *r, const zt_train_step_options *so, zt_train_step_result *out) {
  return zt__train_pp_step(&r->pp, r->opt, next_batch, r, so, out);
}
static zt_status pp_loss(run *r, zt_tensor *x, zt_tensor *y, double *loss) {
  return zt__train_pp_loss(&r->pp, x, y, loss);
}
static zt_status pp_mean(run *r, double *v) { return zt__train_pp_replica_mean(&r->pp, v); }
static zt_status pp_save(run *r, const zt_train_state *st) {
  return zt__train_pp_save(&r->pp, r->dp.comm, &r->oc, r->c->checkpoint.save, r->opt, st);
}
static zt_status pp_load(run *r, zt_train_state *st) {
  return zt__train_pp_load(&r->pp, &r->oc, r->c->checkpoint.resume, r->opt, st);
}
static zt_status pp_gather_full(run *r) { return zt__train_pp_gather_full(&r->pp); }
static const train_mode k_pipeline = {pp_name, pp_step, pp_loss, pp_mean, pp_save, pp_load, pp_gather_full};

static const train_mode *train_mode_of(const zt_train_config *c) {
  return zt__train_pp_wanted(c) ? &k_pipeline : zt__train_om_wanted(c) ? &k_offload : &k_data_parallel;
}

/* Frees everything; the status is the logs' (their last bytes written or not). */
static zt_status run_free(run *r) {
  zt_tensor_free(r->x);
  zt_tensor_free(r->y);
  zt_tensor_free(r->vx);
  zt_tensor_free(r->vy);
  zt_loader_free(r->loader);
  zt_loader_free(r->val_loader);
  zt_tokens_free(r->train);
  zt_tokens_free(r->val);
  zt__act_trial_close(&r->trial);
  zt__train_om_free(&r->om); /* before the model: its parameters come back into RAM (or stay in the store) */
  zt_optim_free(r->opt);
  zt__train_pp_free(&r->pp);
  zt__train_dp_free(&r->dp); // before the model: the strategies' hooks sit on its modules
  zt_train_memory_free(&r->mem);
  zt_gpt2_free(r->model);
  zt__train_om_close(&r->om); /* the store last: the model and the optimizer may have had bytes in it */
  return zt__run_log_close(r->log);
}

const char *zt_train_phase_name(zt_train_phase p) {
  static const char *const names[ZT_TRAIN_PHASE_COUNT] = {"forward", "backward", "optimizer", "evaluation",
                                                          "checkpoint"};
  return p >= 0 && p < ZT_TRAIN_PHASE_COUNT ? names[p] : "?";
}

/* The training step's microbatches: the next batch of the loader. */
static zt_status next_batch(void *ud, zt_tensor **x, zt_tensor **y) {
  run *r = ud;
  ZT_TRY(zt_loader_next(r->loader, r->x, r->y));
  *x = r->x, *y = r->y;
  return ZT_OK;
}

static void phase(const run *r, zt_train_phase p, int64_t step) {
  if (r->c->on_phase) r->c->on_phase(p, step, r->c->phase_user_data);
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
static zt_status load_data(run *r) {
  const zt_train_config *c = r->c;
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
  zt_status s = zt_tokens_check_range(r->train, r->g.vocab_size);
  if (s) return zt__error_prefix(s, "training data '%s'", train_name);
  s = zt_tokens_check_range(r->val, r->g.vocab_size);
  if (s) return zt__error_prefix(s, "validation data '%s'", val_name);
  int D = r->dp.data_world;
  int64_t rows = c->data.batch / D; // --batch is global: this rank's rows of it (its replica's, with a pipeline)
  int64_t M = c->data.microbatches;
  if (M < 1 || rows % M)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_train_config.data.microbatches %lld does not divide this rank's %lld rows (zt_train_config.data.batch "
                  "%lld over %d %s); use a batch that is a multiple of %s x microbatches (%lld)",
                  (long long)M, (long long)rows, (long long)c->data.batch, D, r->pp.P ? "replicas" : "ranks",
                  r->pp.P ? "replicas" : "ranks", (long long)(M > 0 ? M : 1) * D);
  // each loader call gives one microbatch: rows / M of this rank, B / M of the global batch
  zt_loader_config lc = {rows / M, c->data.seq, c->seed, r->dp.data_rank, D};
  if ((s = zt_loader_new(r->train, &lc, &r->loader)))
    return zt__error_prefix(s, "training data '%s' is too small for batch %lld x seq %lld", train_name,
                            (long long)c->data.batch, (long long)c->data.seq);
  zt_loader_config vc = {rows, c->data.seq, c->seed ^ 0x5a17u, r->dp.data_rank, D};
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
static zt_status eval_loss(run *r, double *out) {
  const zt_train_config *c = r->c;
  ZT_TRY(zt_loader_set_pos(r->val_loader, (zt_loader_pos){0, 0}));
  int64_t nb = zt_loader_windows_per_epoch(r->val_loader) / c->data.batch; // global batches: the same count on every rank
  if (nb > c->log.eval_batches) nb = c->log.eval_batches;
  if (nb < 1) nb = 1;
  bool prev = zt_set_grad_enabled(false);
  bool was_training = zt_gpt2_module(r->model)->training;
  zt_gpt2_set_training(r->model, false);
  double acc = 0;
  zt_status s = ZT_OK;
  for (int64_t b = 0; b < nb && s == ZT_OK; b++) {
    double l = 0;
    s = zt_loader_next(r->val_loader, r->vx, r->vy);
    if (!s) s = r->mode->loss(r, r->vx, r->vy, &l);
    if (!s) acc += l;
  }
  zt_gpt2_set_training(r->model, was_training);
  zt_set_grad_enabled(prev);
  *out = acc / (double)nb;
  if (s) return s;
  return r->mode->mean(r, out);
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

static zt_status check_params_finite(run *r, const char *what) {
  int n = r->dp.n_params;
  zt_tensor **ts = malloc(sizeof *ts * (size_t)(n + 1));
  const char **names = malloc(sizeof *names * (size_t)(n + 1));
  zt_status s = ts && names ? ZT_OK : ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  for (int i = 0; i < n && !s; i++) ts[i] = r->dp.params[i].tensor, names[i] = r->dp.params[i].name;
  if (!s) s = zt__tensors_check_finite(n, ts, names, what);
  free(ts);
  free(names);
  if (!s && r->opt) {
    int no = 0;
    const char *const *onames = NULL;
    zt_tensor *const *ots = NULL;
    if (!(s = zt_optim_state(r->opt, &no, &onames, &ots))) s = zt__tensors_check_finite(no, ots, onames, what);
  }
  return s;
}

static zt_status save_checkpoint(run *r, int64_t step) {
  zt_train_state st = {step, zt_rng_get_state(), zt_loader_get_pos(r->loader), r->g, 0, 0, "", "", ""};
  memcpy(st.options, r->options, sizeof st.options);
  memcpy(st.encoder, r->c->data.encoder, sizeof st.encoder); /* the tokenizer goes with every save */
  memcpy(st.merges, r->c->data.merges, sizeof st.merges);
  if (r->scaling) st.loss_scale = r->scaler.scale, st.loss_scale_good = r->scaler.good_steps;
  ZT_TRY(r->mode->save(r, &st));
  r->saved_step = step;
  if (r->dp.rank != 0) return ZT_OK;
  zt_status s = zt_snapshot_prune(r->c->checkpoint.save, r->c->checkpoint.keep_checkpoints);
  return s ? zt__error_prefix(s, "saved checkpoint step %lld in '%s', but", (long long)step, r->c->checkpoint.save) : ZT_OK;
}

/* The part of a NaN message that says what survived. */
static const char *survivors(const run *r, char *buf, size_t cap) {
  const zt_train_config *c = r->c;
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

/* "f", "s", "n" per block ("..." when it does not fit). */
static void plan_string(const zt_recompute *modes, int L, char *out, size_t cap) {
  size_t n = 0;
  for (int i = 0; i < L; i++) {
    if (n + 4 >= cap) {
      strcpy(out + n, "...");
      n += 3;
      break;
    }
    out[n++] = modes[i] == ZT_RECOMPUTE_FULL ? 'f' : modes[i] == ZT_RECOMPUTE_SELECTIVE ? 's' : 'n';
  }
  out[n] = 0;
}

/* res's recompute_plan and act_peak_predicted from the plan now attached (rows: a microbatch). */
static void plan_result(zt_gpt2 *m, const zt_train_memory *mem, int64_t rows, int64_t seq, zt_train_result *res) {
  int L = zt_gpt2_get_config(m)->n_layer, every = 1;
  zt_recompute *modes = calloc((size_t)L, sizeof *modes);
  if (!modes) return; /* out of host memory: the figures stay as they were */
  zt_recompute_plan_modes(mem->recompute, L, modes);
  zt_recompute_plan_mode(mem->recompute, &every);
  plan_string(modes, L, res->recompute_plan, sizeof res->recompute_plan);
  res->act_peak_predicted = zt_gpt2_predict_activation_peak(m, rows, seq, modes, every,
                                                            zt_recompute_plan_policy(mem->recompute));
  free(modes);
}

zt_status zt_train_memory_attach(zt_gpt2 *m, const zt_train_config *c, int64_t rows, zt_train_memory *mem,
                                 zt_train_result *res) {
  if (!m || !c || !mem) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_memory_attach: model, config or out is NULL");
  if (rows < 1) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_memory_attach: %lld rows", (long long)rows);
  *mem = (zt_train_memory){0};
  int L = zt_gpt2_get_config(m)->n_layer;
  zt_recompute *modes = calloc((size_t)L, sizeof *modes);
  if (!modes) return ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  zt_recompute_options ro = zt_recompute_options_default();
  ro.policy = (zt_checkpoint_policy){c->memory.selective_policy, NULL};
  ro.mode = c->memory.recompute;
  ro.every = c->memory.checkpoint_every;
  zt_status s = ZT_OK;
  if (c->memory.recompute_plan[0]) { /* a letter per block */
    if (strlen(c->memory.recompute_plan) != (size_t)L)
      s = ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_config.memory.recompute_plan '%s' has %zu letters; the model has %d "
                                        "blocks: give one letter (n, s or f) per block",
                 c->memory.recompute_plan, strlen(c->memory.recompute_plan), L);
    for (int i = 0; i < L && !s; i++) {
      char ch = c->memory.recompute_plan[i];
      if (ch != 'n' && ch != 's' && ch != 'f')
        s = ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_config.memory.recompute_plan '%s': block %d's letter '%c' is not "
                                          "n (none), s (selective) or f (full)",
                   c->memory.recompute_plan, i, ch);
      modes[i] = ch == 'f' ? ZT_RECOMPUTE_FULL : ch == 's' ? ZT_RECOMPUTE_SELECTIVE : ZT_RECOMPUTE_NONE;
    }
    ro.modes = modes, ro.n_modes = L, ro.every = 1;
  } else if (c->memory.recompute_budget > 0) {
    s = zt_gpt2_plan_recompute(m, rows, c->data.seq, c->memory.recompute_budget, ro.policy, modes, NULL);
    if (s) zt__error_prefix(s, "zt_train_config.memory.recompute_budget=%lld", (long long)c->memory.recompute_budget);
    ro.modes = modes, ro.n_modes = L, ro.every = 1;
  }
  if (!s) s = zt_recompute_plan_new(&ro, &mem->recompute);
  if (!s && c->memory.offload_activations) {
    zt_offload_options o = zt_offload_options_default((zt_offload_tier)c->memory.offload_activations);
    if (c->memory.offload_dir[0]) o.dir = c->memory.offload_dir;
    o.write_cap = zt__train_act_write_cap(zt_gpt2_get_config(m), rows * c->data.seq); /* what the planner counts */
    s = zt_offload_new(&o, &mem->offload);
  }
  zt_model model = zt_gpt2_model(m);
  zt_strategy st[2] = {zt_recompute_plan_strategy(mem->recompute), zt_offload_strategy(mem->offload)};
  if (!s) s = zt_strategies_attach(mem->offload ? 2 : 1, st, &model);
  free(modes);
  if (!s && res) plan_result(m, mem, rows, c->data.seq, res);
  if (s) zt_train_memory_free(mem);
  return s;
}

void zt_train_memory_free(zt_train_memory *mem) {
  if (!mem) return;
  zt_recompute_plan_free(mem->recompute); /* each detaches itself first */
  zt_offload_free(mem->offload);
  *mem = (zt_train_memory){0};
}

zt_status zt_train_run(const zt_train_config *c, zt_train_step_fn on_step, void *user_data, zt_train_result *res,
                       zt_gpt2 **model_out) {
  return zt_train_run_on(c, NULL, on_step, user_data, res, model_out);
}

/* Everything a rank can check alone, before any collective: the checkpoint to resume, the
 * data, the logs, the save folder; the model, its memory options and initial weights. */
static zt_status prepare(run *r, zt_train_state *st, zt_train_result *result) {
  const zt_train_config *c = r->c;
  if (c->checkpoint.resume[0]) {
    ZT_TRY(zt_snapshot_read_state(c->checkpoint.resume, st));
    const zt_gpt2_config *k = &st->model;
    if (k->n_layer != r->g.n_layer || k->n_head != r->g.n_head || k->n_embd != r->g.n_embd ||
        k->vocab_size != r->g.vocab_size || k->block_size != r->g.block_size)
      return ZT_ERR(ZT_STATUS_INVALID_ARG,
                    "checkpoint '%s' is of another model shape (layers %d heads %d dim %d vocab %d ctx %d) than asked "
                    "(layers %d heads %d dim %d vocab %d ctx %d); resume with the same model options ("
                    "zt_train_config.model)",
                    c->checkpoint.resume, k->n_layer, k->n_head, k->n_embd, k->vocab_size, k->block_size, r->g.n_layer,
                    r->g.n_head, r->g.n_embd, r->g.vocab_size, r->g.block_size);
    if (st->step > c->steps)
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "checkpoint '%s' is at step %lld, beyond zt_train_config.steps %lld", c->checkpoint.resume,
                    (long long)st->step, (long long)c->steps);
    char changes[1024];
    bool course = false;
    ZT_TRY(zt_train_resume_changes(c, r->dp.world, st, changes, sizeof changes, &course));
    if (course && !c->checkpoint.allow_config_change)
      return ZT_ERR(ZT_STATUS_INVALID_ARG,
                    "resuming '%s' with options other than its run's (%s): the continuation would not be the run "
                    "it was; give the same options, or "
                    "zt_train_config.checkpoint.allow_config_change = true to continue anyway",
                    c->checkpoint.resume, changes);
    r->start = st->step;
  }
  ZT_TRY(load_data(r));
  ZT_TRY(zt__train_tokenizer_check(c, &r->g));
  if (c->checkpoint.save[0] && r->dp.rank == 0) ZT_TRY(check_save_dir(c->checkpoint.save));
  if (r->dp.rank == 0) ZT_TRY(zt__run_log_open(c->log.metrics, c->log.tensorboard, r->start, &r->log));
  if (r->dp.rank == 0 && c->log.timeline[0]) ZT_TRY(zt__check_output_file(c->log.timeline, "zt_train_config.log.timeline"));
  // every rank builds the same model from the seed (and the strategies broadcast rank 0's anyway)
  zt_rng_seed(c->seed);
  if (c->memory.offload_states) { /* built straight into the store: the whole model is never in RAM */
    ZT_TRY(zt__train_om_store(&r->om, c, r->dp.comm));
    ZT_TRY(zt_gpt2_new_evicted(&r->g, r->om.store, &r->model));
  } else {
    ZT_TRY(zt_gpt2_new(&r->g, &r->model));
  }
  // load_data checked that the batch divides into ranks x microbatches
  ZT_TRY(zt_train_memory_attach(r->model, c, microbatch_rows(r), &r->mem, result));
  if (c->model.init_from[0]) ZT_TRY(zt__train_init_from(r->model, c->model.init_from));
  if (r->pp.P) ZT_TRY(zt__train_pp_setup(&r->pp, c, r->model));
  return ZT_OK;
}

/* After the activation trial's choice: the summary's plan and prediction are the new plan's. */
static void describe_plan(run *r, zt_train_result *res) {
  plan_result(r->model, &r->mem, microbatch_rows(r), r->c->data.seq, res);
}

/* Options that make sense alone but not together; the checks that need no file or rank. */
static zt_status check_combinations(const zt_train_config *c) {
  bool pp = zt__train_pp_wanted(c);
  if (c->log.timeline[0] && !pp)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_config.log.timeline draws a pipeline's steps: it needs "
                  "zt_train_config.parallel.pp > 1");
  if (!pp && strcmp(c->parallel.schedule, "1f1b"))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_config.parallel.schedule '%s' is a pipeline schedule, and this run "
                  "has no pipeline: give zt_train_config.parallel.pp > 1, or leave the schedule out",
                  c->parallel.schedule);
  if (!pp && c->parallel.chunks)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_config.parallel.chunks %d sets a pipeline's stages per rank, and "
                  "this run has no pipeline: give zt_train_config.parallel.pp > 1, or leave it out",
                  c->parallel.chunks);
  if (!pp && strcmp(c->parallel.pp_balance, "even"))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_config.parallel.pp_balance '%s' sets a pipeline's stages, and this "
                  "run has no pipeline: give zt_train_config.parallel.pp > 1, or leave it out",
                  c->parallel.pp_balance);
  if (c->optim.min_lr > c->optim.lr)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_config.optim.min_lr %g is above zt_train_config.optim.lr %g: the "
                  "cosine schedule would rise from the peak to the floor; give a floor at most the peak rate",
                  c->optim.min_lr, c->optim.lr);
  return pp ? zt__train_pp_check(c) : ZT_OK;
}

/* Every rank gets the first failure of any rank (s: this rank's); on success, the ranks' options
 * (with resumed: the checkpoint read, and the data's content) are compared, and a difference is
 * an error naming the option and the ranks' values. Collective. */
static zt_status agree(run *r, zt_status s, const zt_train_state *resumed) {
  if (!r->dp.comm || r->dp.world < 2) return s;
  s = zt_comm_agree_status(r->dp.comm, s);
  zt__run_opts *o = s ? NULL : malloc(sizeof *o);
  if (!s && !o) s = ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  if (!s) {
    zt__run_options(r->c, &r->g, r->dp.world, resumed, o);
    if (r->train) zt__run_options_add_data(o, r->train, r->val);
    const char *values[ZT__RUN_OPTS_MAX];
    for (int i = 0; i < o->n; i++) values[i] = o->value[i];
    s = zt_comm_check_same(r->dp.comm, o->n, o->name, values);
  }
  free(o);
  return s;
}

/* Whether any rank was asked to stop: *sig the request's value (a signal number; where ranks got
 * different ones, their mean), 0 none. Every rank gets the same answer. */
static zt_status stop_agreed(run *r, int *sig) {
  *sig = 0;
  if (!r->c->stop_request) return ZT_OK;
  double v[2] = {*r->c->stop_request, *r->c->stop_request ? 1 : 0};
  if (r->dp.world > 1) { /* the whole world, pipeline ranks included */
    zt_tensor *t = NULL;
    ZT_TRY(zt_tensor_from_data(1, (int64_t[]){2}, ZT_DTYPE_F64, v, &t));
    zt_status s = zt_all_reduce(r->dp.comm, t, ZT_REDUCE_SUM);
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

zt_status zt_train_run_on(const zt_train_config *c, zt_comm *comm, zt_train_step_fn on_step, void *user_data,
                          zt_train_result *res, zt_gpt2 **model_out) {
  if (!c) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_run: config is NULL");
  if (model_out && c->memory.offload_states)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_run: model_out asks for the whole model in RAM, which "
                  "zt_train_config.memory.offload_states exists to avoid; pass NULL (the checkpoints have it)");
  run r = {0};
  r.c = c;
  r.mode = train_mode_of(c);
  zt_train_result result = {0};
  zt_status s = ZT_OK;
  zt_set_num_threads(c->threads);
  if (res) *res = result;
  zt_train_state st = {0};
  /* Until the ranks agree, nothing here is a collective: a rank that fails alone (another option
   * than the others', a file only it cannot read) reaches the agreement like the others. */
  s = zt__train_dp_open(&r.dp, c, comm);
  if (!s) s = zt_train_model_config(c, &r.g);
  if (!s && c->data.seq > r.g.block_size)
    s = ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_config.data.seq %lld is longer than the model's context (%d); use "
               "zt_train_config.data.seq <= %d or zt_train_config.model.block_size",
               (long long)c->data.seq, r.g.block_size, r.g.block_size);
  zt_train_config planned; /* --mem-limit: the options the planner chose */
  if (!s && zt__train_plan_wanted(c, r.dp.world)) {
    planned = *c;
    s = zt_train_plan_memory(&planned, r.dp.world, &result.plan);
    c = r.c = &planned;
  }
  if (r.dp.comm) zt_comm_set_timeout(r.dp.comm, c->parallel.comm_timeout);
  if (!s) s = check_combinations(c);
  // the ranks fail together on any rank's bad input, and refuse to run with different options
  s = agree(&r, s, NULL);
  if (!s && zt__train_pp_wanted(c)) s = zt__train_pp_open(&r.pp, c, r.dp.comm);
  if (!s) s = prepare(&r, &st, &result);
  s = agree(&r, s, c->checkpoint.resume[0] ? &st : NULL); /* now with the data's content */
  if (s) {
    result.failed_together = true;
    goto done;
  }
  {
    zt__run_opts *o = malloc(sizeof *o);
    if (!o) {
      s = ZT_ERR(ZT_STATUS_OOM, "out of host memory");
      goto done;
    }
    zt__run_options(c, &r.g, r.dp.world, c->checkpoint.resume[0] ? &st : NULL, o);
    zt__run_options_record(o, r.options, sizeof r.options);
    free(o);
  }
  if (r.pp.P) {
    // the stages' parameters (or their shards) only: the optimizer's; the rest of the model's storage goes
    if ((s = zt__train_pp_link(&r.pp, c, &r.dp.params, &r.dp.n_params))) goto done;
  } else if (zt__train_om_wanted(c)) {
    r.dp.n_params = zt_gpt2_params(r.model, &r.dp.params); // OffloadModel averages the grads itself (DDP)
  } else if ((s = zt__train_dp_wrap(&r.dp, c, r.model, r.om.store))) {
    goto done;
  }
  // the dropout masks of rank r must not repeat rank 0's: each rank its own stream
  if (r.dp.world > 1) zt_rng_seed(c->seed + (uint64_t)r.dp.rank);
  r.oc = zt_optim_default(c->optim.kind);
  r.oc.lr = c->optim.lr;
  r.oc.weight_decay = c->optim.weight_decay;
  r.oc.beta1 = c->optim.beta1;
  r.oc.beta2 = c->optim.beta2;
  r.oc.momentum = c->optim.momentum;
  if ((s = zt_optim_new(&r.oc, r.dp.n_params, r.dp.params, &r.opt))) goto done;
  r.scaling = c->parallel.mixed_precision == ZT_DTYPE_F16; // f16 gradients need a loss scale; bf16's range does not
  r.scaler = zt_loss_scaler_default();
  // every state in the store: the offload model now, the optimizer's state made in the store, so
  // that a resume streams into it
  if (zt__train_om_wanted(c) && c->memory.offload_states &&
      ((s = zt__train_om_open(&r.om, c, r.model, r.dp.comm, c->data.batch / r.dp.data_world)) ||
       (c->checkpoint.resume[0] && (s = zt_offload_model_evict_optim(r.om.om, r.opt)))))
    goto done;
  if (zt__train_fsdp_stores(c) && (s = zt_fsdp_offload_optim(r.dp.fsdp, r.opt))) goto done; /* ZeRO-Infinity */
  if (c->checkpoint.resume[0]) {
    if ((s = r.mode->load(&r, &st))) goto done;
    if ((s = zt_loader_set_pos(r.loader, st.data))) goto done;
    // rank 0's stream was saved; a data-parallel rank r draws from seed + r (above) exactly as
    // many values as rank 0 (the same shapes), so its stream continues at rank 0's offset
    if (r.dp.world > 1 && !r.pp.P) st.rng.seed += (uint64_t)r.dp.rank;
    zt_rng_set_state(st.rng);
    if (st.loss_scale > 0) r.scaler.scale = st.loss_scale, r.scaler.good_steps = st.loss_scale_good;
  }
  if (c->checkpoint.resume[0] || c->model.init_from[0]) {
    char what[600];
    snprintf(what, sizeof what, "%s '%s'", c->checkpoint.resume[0] ? "checkpoint" : "zt_train_config.model.init_from",
             c->checkpoint.resume[0] ? c->checkpoint.resume : c->model.init_from);
    s = check_params_finite(&r, what);
    if (r.dp.world > 1) s = zt_comm_agree_status(r.dp.comm, s);
    if (s) {
      result.failed_together = true;
      goto done;
    }
  }
  // OffloadModel: from here on the parameters live in its store, a few slices in RAM at a time
  if (zt__train_om_wanted(c) && !r.om.om &&
      (s = zt__train_om_open(&r.om, c, r.model, r.dp.comm, c->data.batch / r.dp.data_world)))
    goto done;
  int64_t start = r.start;
  if ((s = zt__act_trial_open(&r.trial, c, r.om.om, r.mem.recompute, r.g.n_layer, start, &result.act_choice)))
    goto done;
  int64_t warmup;
  double min_lr;
  zt__run_schedule(c, c->checkpoint.resume[0] ? &st : NULL, &warmup, &min_lr);
  result.sgemm_gflops = sgemm_ceiling();
  result.num_params = zt_gpt2_num_params(r.model);
  double flops = zt_gpt2_flops_per_step(r.model, c->data.batch, c->data.seq);
  double t_start = zt_clock_now();
  zt_mem_reset_peaks(); /* the peaks reported (per step, act_peak) are this run's, from its first step */
  zt__train_om_io_skip(&r.om); /* the set-up's I/O (building, loading) is no step's */
  result.first_loss = NAN;
  result.last_val_loss = NAN;
  char why[700];
  r.dps = zt__train_dp_strategy(&r.dp);
  int64_t act_bytes_before = 0; /* the activation offload's bytes before this step */
  int64_t step = start;
  for (; step < c->steps; step++) {
    if ((s = stop_agreed(&r, &result.stop_signal))) break;
    if (result.stop_signal) {
      result.stopped = true;
      break;
    }
    double t0 = zt_clock_now();
    double lr = zt_lr_cosine(step, warmup, c->steps, c->optim.lr, min_lr);
    zt_train_step_options so = zt_train_step_options_default();
    so.lr = lr;
    so.microbatches = c->data.microbatches;
    so.grad_clip = c->optim.grad_clip;
    so.scaler = r.scaling ? &r.scaler : NULL;
    so.poison_loss = c->inject_nan_at == step + 1;
    so.step = step + 1;
    so.on_phase = c->on_phase;
    so.phase_user_data = c->phase_user_data;
    so.stop_request = c->stop_request;
    zt_train_step_result sr;
    zt_act_trial_step trial_kind = ZT_ACT_TRIAL_STEP_NONE;
    bool chosen = false;
    /* where a step cut short puts the data and the random stream back to */
    zt_loader_pos pos0 = zt_loader_get_pos(r.loader);
    zt_rng_state rng0 = zt_rng_get_state();
    if ((s = zt__act_trial_before(&r.trial, step + 1, &trial_kind))) break;
    s = r.mode->step(&r, &so, &sr);
    if (!s && sr.interrupted) { /* every rank dropped the step (they agreed in it) */
      s = zt_loader_set_pos(r.loader, pos0);
      zt_rng_set_state(rng0);
      if (!s) s = stop_agreed(&r, &result.stop_signal);
      result.stopped = true;
      break;
    }
    double lv = sr.loss, gnorm = sr.grad_norm, scale = sr.loss_scale;
    bool skipped = sr.skipped;
    if (sr.bad_loss)
      s = ZT_ERR(ZT_STATUS_STATE, "loss is %g at step %lld: training stopped%s; lower zt_train_config.optim.lr or check the data", lv,
                 (long long)step + 1, survivors(&r, why, sizeof why));
    else if (sr.bad_grad)
      s = ZT_ERR(ZT_STATUS_STATE, "gradient norm is %g at step %lld: training stopped%s; lower zt_train_config.optim.lr", gnorm,
                 (long long)step + 1, survivors(&r, why, sizeof why));
    if (sr.bad_loss || sr.bad_grad) result.failed_together = true;
    if (s) break;
    double dt = zt_clock_now() - t0;
    if ((s = zt__act_trial_after(&r.trial, step + 1, dt, &chosen))) break;
    if (chosen) describe_plan(&r, &result); /* the summary shows the plan the trial chose */
    if (isnan(result.first_loss)) result.first_loss = lv;
    result.last_loss = lv;
    result.steps_done = step + 1 - start;
    zt_train_step_info info = {0};
    info.step = step + 1;
    info.first_step = start + 1;
    info.total_steps = c->steps;
    info.loss = lv;
    info.lr = lr;
    info.grad_norm = gnorm;
    info.val_loss = NAN;
    info.step_ms = dt * 1e3;
    info.elapsed_s = zt_clock_now() - t_start;
    info.tokens_per_s = (double)(c->data.batch * c->data.seq) / dt;
    /* every rank has its own ceiling; one the step beat was measured while the machine was busier */
    double gflops = flops / dt / 1e9 / r.dp.world;
    if (gflops > result.sgemm_gflops) result.sgemm_gflops = gflops;
    info.mfu = result.sgemm_gflops > 0 ? gflops / result.sgemm_gflops : 0;
    info.act_trial = trial_kind;
    info.act_choice = chosen ? &result.act_choice : NULL;
    bool last = step + 1 == c->steps || step + 1 == c->stop_at;
    zt__train_om_io_step(&r.om, &info); /* the step's own I/O: the evaluation's is no step's */
    if ((c->log.eval_every && (step + 1) % c->log.eval_every == 0) || last) {
      phase(&r, ZT_TRAIN_PHASE_EVAL, step + 1);
      if ((s = eval_loss(&r, &info.val_loss))) break;
      result.last_val_loss = info.val_loss;
      zt__train_om_io_skip(&r.om);
    }
    zt_mem_stats_get(ZT_CPU, &info.mem);
    info.peak_rss = zt_mem_peak_rss();
    info.act_peak_predicted = result.act_peak_predicted;
    info.loss_scale = scale;
    info.skipped = skipped;
    info.rank = r.dp.rank;
    info.world = r.dp.world;
    zt__train_dp_step_stats(&r.dp, &info.comm);
    info.pp_bubble = info.pp_sim_bubble = NAN;
    if (r.pp.P) {
      zt__pp_figures pf;
      if ((s = zt__train_pp_figures(&r.pp, &pf))) break;
      info.pp_bubble = pf.bubble, info.pp_sim_bubble = pf.sim_bubble;
      info.pp_f_ms = pf.f_s * 1e3, info.pp_b_ms = pf.b_s * 1e3, info.pp_w_ms = pf.w_s * 1e3;
      info.pp_wait_ms = pf.wait_s * 1e3;
    }
    double mine[ZT__RANK_FIG_N], *all = NULL;
    zt__rank_figures(&info, mine);
    if (r.dp.world > 1) {
      if (!(all = malloc(sizeof *all * ZT__RANK_FIG_N * (size_t)r.dp.world))) {
        s = ZT_ERR(ZT_STATUS_OOM, "out of host memory");
        break;
      }
      s = zt__train_dp_gather(&r.dp, mine, ZT__RANK_FIG_N, all);
    }
    result.act_peak = info.mem.peak[ZT_MEM_TAG_ACTIVATION];
    if (r.mem.offload) {
      zt_offload_stats os;
      zt_offload_stats_get(r.mem.offload, &os);
      info.act_offload_bytes = os.bytes_offloaded - act_bytes_before;
      act_bytes_before = os.bytes_offloaded;
      result.offload_peak_bytes = os.peak_bytes_in_tier;
      result.offload_put_s = os.put_ms / 1e3, result.offload_wait_s = os.wait_ms / 1e3;
    }
    if (!s && r.log && zt__run_log_step(r.log, &info, r.mode->name(&r), all ? all : mine)) {
      /* a log that cannot be written costs no training: said once, and written no more */
      info.warning = warn(&result, "%s; the run goes on without its logs", zt_last_error());
      ZT_IGNORE(zt__run_log_close(r.log), "the write's failure is the one reported");
      r.log = NULL;
    }
    free(all);
    if (s) break;
    if (c->checkpoint.save[0] && ((c->checkpoint.save_every && (step + 1) % c->checkpoint.save_every == 0) || last)) {
      phase(&r, ZT_TRAIN_PHASE_SAVE, step + 1);
      if ((s = save_checkpoint(&r, step + 1))) break;
      info.saved_step = step + 1;
    }
    if (on_step) on_step(&info, user_data);
    if (step + 1 == c->stop_at) {
      step++;
      break;
    }
  }
  /* stopped on request: the last complete step is saved (without an evaluation: a scheduler's
   * grace period is short) */
  if (!s && result.stopped && c->checkpoint.save[0] && step > start && r.saved_step != step) {
    phase(&r, ZT_TRAIN_PHASE_SAVE, step);
    s = save_checkpoint(&r, step);
  }
  result.saved_step = r.saved_step;
  result.last_step = step;
  /* figures last: one that cannot be written is a warning, after the checkpoint is safe */
  if (!s && r.pp.P && c->log.timeline[0] && result.steps_done > 0) {
    zt_status t = zt__train_pp_timeline(&r.pp, c->log.timeline);
    if (t) warn(&result, "%s; the training and its checkpoints are not affected", zt_last_error());
  }
  result.seconds = zt_clock_now() - t_start;
  if (result.seconds > 0) result.tokens_per_s = (double)(result.steps_done * c->data.batch * c->data.seq) / result.seconds;
done:
  zt__train_om_result(&r.om, &result);
  if (res) *res = result;
  zt__train_om_free(&r.om); /* the model whole again (for model_out) */
  if (s == ZT_OK && model_out) // the caller gets usable full parameters
    s = r.mode->gather_full(&r);
  if (s == ZT_OK && model_out) {
    *model_out = r.model;
    r.model = NULL;
  }
  zt_status closed = run_free(&r);
  return s ? s : closed;
}
