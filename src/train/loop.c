/* The training loop behind `zt train`: builds the model, data, optimizer and schedule
 * from a zt_train_config, resumes from a checkpoint when asked, and runs steps
 * (forward, backward, clip, AdamW/SGD), evaluating and checkpointing on schedule.
 * Resume is bitwise: the RNG state, data position, optimizer state and step are saved
 * at step boundaries. A NaN/inf loss stops the run before anything is saved. */
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "train/parallel.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double zt_sgemm_gflops(int n, int reps) {
  size_t nn = (size_t)n * (size_t)n;
  float *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b), *c = malloc(nn * sizeof *c);
  if (!a || !b || !c || reps < 1) {
    free(a), free(b), free(c);
    return 0;
  }
  for (size_t i = 0; i < nn; i++) a[i] = (float)(i % 7) * 0.1f, b[i] = (float)(i % 5) * 0.1f;
  double *t = malloc(sizeof *t * (size_t)reps);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
  for (int r = 0; r < reps; r++) {
    double t0 = now_s();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    t[r] = now_s() - t0;
  }
  qsort(t, (size_t)reps, sizeof *t, cmp_double);
  double g = 2.0 * n * (double)n * n / t[reps / 2] / 1e9;
  free(t), free(a), free(b), free(c);
  return g;
}

/* Model config from the preset plus explicit overrides. */
zt_status zt_train_model_config(const zt_train_config *c, zt_gpt2_config *g) {
  ZT_TRY(zt_gpt2_preset(c->model, g));
  if (c->n_layer > 0) g->n_layer = c->n_layer;
  if (c->n_head > 0) g->n_head = c->n_head;
  if (c->n_embd > 0) g->n_embd = c->n_embd;
  if (c->vocab_size > 0) g->vocab_size = c->vocab_size;
  if (c->block_size > 0) g->block_size = c->block_size;
  if (c->dropout >= 0) g->dropout = c->dropout;
  return zt_gpt2_config_validate(g);
}

typedef struct run {
  const zt_train_config *c;
  zt_gpt2_config g;
  zt_gpt2 *model;
  zt_optim *opt;
  zt_tokens *train, *val;
  zt_loader *loader;
  zt_tensor *x, *y;
  FILE *metrics;
  zt__train_dp dp;
  bool scaling;          /* f16: dynamic loss scaling */
  zt_loss_scaler scaler;
} run;

static void run_free(run *r) {
  zt_tensor_free(r->x);
  zt_tensor_free(r->y);
  zt_loader_free(r->loader);
  zt_tokens_free(r->train);
  zt_tokens_free(r->val);
  zt_optim_free(r->opt);
  zt__train_dp_free(&r->dp); // before the model: FSDP's hooks sit on its modules
  zt_gpt2_free(r->model);
  if (r->metrics) fclose(r->metrics);
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
 * given, else the built-in split, else the last tenth of the token file. */
static zt_status load_data(run *r) {
  const zt_train_config *c = r->c;
  if (!c->data[0])
    ZT_TRY(zt_default_dataset(&r->train, &r->val));
  else
    ZT_TRY(zt_tokens_load(c->data, &r->train));
  if (c->val_data[0]) {
    zt_tokens_free(r->val);
    r->val = NULL;
    ZT_TRY(zt_tokens_load(c->val_data, &r->val));
  } else if (c->data[0]) {
    ZT_TRY(split_tail(r->train, &r->val));
  }
  zt_status s = zt_tokens_check_range(r->train, r->g.vocab_size);
  if (s) return zt__error_prefix(s, "training data '%s'", c->data[0] ? c->data : "(default)");
  s = zt_tokens_check_range(r->val, r->g.vocab_size);
  if (s) return zt__error_prefix(s, "validation data '%s'", c->val_data[0] ? c->val_data : "(split)");
  return ZT_OK;
}

static zt_status eval_loss(run *r, double *out) {
  const zt_train_config *c = r->c;
  zt_loader_config lc = {c->batch / r->dp.world, c->seq, c->seed ^ 0x5a17u, r->dp.rank, r->dp.world};
  zt_loader *vl = NULL;
  zt_status s = zt_loader_new(r->val, &lc, &vl);
  if (s) return zt__error_prefix(s, "validation data is too small for batch %lld x seq %lld", (long long)c->batch,
                                 (long long)c->seq);
  int64_t nb = zt_loader_windows_per_epoch(vl) / c->batch; // global batches: the same count on every rank
  if (nb > c->eval_batches) nb = c->eval_batches;
  if (nb < 1) nb = 1;
  bool prev = zt_set_grad_enabled(false);
  bool was_training = zt_gpt2_module(r->model)->training;
  zt_gpt2_set_training(r->model, false);
  double acc = 0;
  for (int64_t b = 0; b < nb && s == ZT_OK; b++) {
    zt_tensor *loss = NULL;
    s = zt_loader_next(vl, r->x, r->y);
    if (!s) s = zt_gpt2_forward(r->model, r->x, r->y, NULL, &loss);
    if (!s) acc += zt_tensor_get(loss, 0);
    zt_tensor_free(loss);
  }
  zt_gpt2_set_training(r->model, was_training);
  zt_set_grad_enabled(prev);
  zt_loader_free(vl);
  *out = acc / (double)nb;
  return s ? s : zt__train_dp_mean(&r->dp, out);
}

/* Per-rank figures in a metrics line: peak bytes per tag, peak total, peak RSS, and this
 * step's communication. */
enum { RANK_FIG_BYTES = ZT_MEM_TAG_COUNT, RANK_FIG_RSS, RANK_FIG_SENT, RANK_FIG_CALLS, RANK_FIG_WAIT, RANK_FIG_N };

static void rank_figures(const zt_train_step_info *in, double *v) {
  for (int t = 0; t < ZT_MEM_TAG_COUNT; t++) v[t] = (double)in->mem.peak[t];
  v[RANK_FIG_BYTES] = (double)in->mem.peak_total;
  v[RANK_FIG_RSS] = (double)in->peak_rss;
  v[RANK_FIG_SENT] = (double)in->comm.bytes_sent;
  v[RANK_FIG_CALLS] = (double)in->comm.comm_calls;
  v[RANK_FIG_WAIT] = in->comm.wait_s * 1e3;
}

static void write_metrics(FILE *f, const zt_train_step_info *in, const char *shard, const double *ranks) {
  fprintf(f, "{\"step\":%lld,\"loss\":%.9g,\"lr\":%.6g,\"grad_norm\":%.6g,\"step_ms\":%.3f,\"tokens_per_s\":%.2f,\"mfu\":%.4f",
          (long long)in->step, in->loss, in->lr, in->grad_norm, in->step_ms, in->tokens_per_s, in->mfu);
  if (!isnan(in->val_loss)) fprintf(f, ",\"val_loss\":%.6f", in->val_loss);
  fprintf(f, ",\"mem\":{");
  for (int t = 0; t < ZT_MEM_TAG_COUNT; t++)
    fprintf(f, "%s\"%s\":{\"current\":%lld,\"peak\":%lld}", t ? "," : "", zt_mem_tag_name((zt_mem_tag)t),
            (long long)in->mem.current[t], (long long)in->mem.peak[t]);
  fprintf(f, ",\"total\":{\"current\":%lld,\"peak\":%lld}},\"act_peak_predicted\":%lld,\"peak_rss\":%lld",
          (long long)in->mem.current_total, (long long)in->mem.peak_total, (long long)in->act_peak_predicted,
          (long long)in->peak_rss);
  if (in->loss_scale > 0) fprintf(f, ",\"loss_scale\":%g,\"skipped\":%s", in->loss_scale, in->skipped ? "true" : "false");
  fprintf(f, ",\"world\":%d,\"shard\":\"%s\",\"ranks\":[", in->world, shard);
  for (int r = 0; r < in->world; r++) {
    const double *v = ranks + (size_t)r * RANK_FIG_N;
    fprintf(f, "%s{\"rank\":%d,\"mem_peak\":{", r ? "," : "", r);
    for (int t = 0; t < ZT_MEM_TAG_COUNT; t++)
      fprintf(f, "%s\"%s\":%.0f", t ? "," : "", zt_mem_tag_name((zt_mem_tag)t), v[t]);
    fprintf(f, ",\"total\":%.0f},\"peak_rss\":%.0f,\"comm_bytes\":%.0f,\"comm_calls\":%.0f,\"comm_wait_ms\":%.3f}",
            v[RANK_FIG_BYTES], v[RANK_FIG_RSS], v[RANK_FIG_SENT], v[RANK_FIG_CALLS], v[RANK_FIG_WAIT]);
  }
  fprintf(f, "]}\n");
  fflush(f);
}

static zt_status save_checkpoint(run *r, int64_t step, zt_loader_pos pos) {
  zt_train_state st = {step, zt_rng_get_state(), pos, r->g, 0, 0};
  if (r->scaling) st.loss_scale = r->scaler.scale, st.loss_scale_good = r->scaler.good_steps;
  return zt__train_dp_save(&r->dp, r->c, r->c->save, r->model, r->opt, &st);
}

zt_status zt_train_setup_memory(zt_gpt2 *m, const zt_train_config *c, zt_train_result *res) {
  int L = zt_gpt2_get_config(m)->n_layer;
  zt_recompute *modes = calloc((size_t)L, sizeof *modes);
  if (!modes) return ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  zt_status s = zt_gpt2_set_selective_policy(m, (zt_checkpoint_policy){c->selective_policy, NULL});
  if (!s && c->recompute_budget > 0) {
    s = zt_gpt2_plan_recompute(m, c->batch, c->seq, c->recompute_budget, modes, NULL);
    if (s) zt__error_prefix(s, "--recompute budget=%lld", (long long)c->recompute_budget);
    if (!s) s = zt_gpt2_set_recompute_blocks(m, modes, 1);
  } else if (!s) {
    s = zt_gpt2_set_recompute(m, c->recompute, c->checkpoint_every);
  }
  if (!s && c->offload_activations) {
    zt_offload_options o = zt_offload_options_default((zt_offload_tier)c->offload_activations);
    if (c->offload_dir[0]) o.dir = c->offload_dir;
    s = zt_gpt2_set_activation_offload(m, &o);
  }
  if (!s) {
    zt_gpt2_get_recompute_blocks(m, modes);
    size_t cap = sizeof res->recompute_plan, n = 0;
    for (int i = 0; i < L; i++) {
      if (n + 4 >= cap) {
        strcpy(res->recompute_plan + n, "...");
        n += 3;
        break;
      }
      res->recompute_plan[n++] = modes[i] == ZT_RECOMPUTE_FULL ? 'f' : modes[i] == ZT_RECOMPUTE_SELECTIVE ? 's' : 'n';
    }
    res->recompute_plan[n] = 0;
    res->act_peak_predicted = zt_gpt2_predict_activation_peak(m, c->batch, c->seq, NULL, 0);
  }
  free(modes);
  return s;
}

zt_status zt_train_run(const zt_train_config *c, zt_train_step_fn on_step, void *user_data, zt_train_result *res,
                       zt_gpt2 **model_out) {
  return zt_train_run_on(c, NULL, on_step, user_data, res, model_out);
}

zt_status zt_train_run_on(const zt_train_config *c, zt_comm *comm, zt_train_step_fn on_step, void *user_data,
                          zt_train_result *res, zt_gpt2 **model_out) {
  if (!c) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_run: config is NULL");
  run r = {0};
  r.c = c;
  zt_train_result result = {0};
  zt_status s = ZT_OK;
  zt_set_num_threads(c->threads);
  ZT_TRY(zt_train_model_config(c, &r.g));
  if (c->seq > r.g.block_size)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "--seq %lld is longer than the model's context (%d); use --seq <= %d or --ctx",
                  (long long)c->seq, r.g.block_size, r.g.block_size);
  zt_train_state st = {0};
  if (c->resume[0]) {
    ZT_TRY(zt_checkpoint_read_state(c->resume, &st));
    const zt_gpt2_config *k = &st.model;
    if (k->n_layer != r.g.n_layer || k->n_head != r.g.n_head || k->n_embd != r.g.n_embd ||
        k->vocab_size != r.g.vocab_size || k->block_size != r.g.block_size)
      return ZT_ERR(ZT_STATUS_INVALID_ARG,
                    "checkpoint '%s' is of another model shape (layers %d heads %d dim %d vocab %d ctx %d) than asked "
                    "(layers %d heads %d dim %d vocab %d ctx %d); resume with the same --model/--layers/... flags",
                    c->resume, k->n_layer, k->n_head, k->n_embd, k->vocab_size, k->block_size, r.g.n_layer, r.g.n_head,
                    r.g.n_embd, r.g.vocab_size, r.g.block_size);
  }
  if ((s = zt__train_dp_open(&r.dp, c, comm))) goto done;
  // every rank builds the same model from the seed (and the strategies broadcast rank 0's anyway)
  zt_rng_seed(c->seed);
  if ((s = zt_gpt2_new(&r.g, &r.model))) goto done;
  if ((s = zt_train_setup_memory(r.model, c, &result))) goto done;
  if (c->init_from[0] && (s = zt_gpt2_load_hf(r.model, c->init_from))) goto done;
  if ((s = zt__train_dp_wrap(&r.dp, c, r.model))) goto done;
  // the dropout masks of rank r must not repeat rank 0's: each rank its own stream
  if (r.dp.world > 1) zt_rng_seed(c->seed + (uint64_t)r.dp.rank);
  zt_param *params = r.dp.params;
  int n_params = r.dp.n_params;
  zt_optim_config oc = zt_optim_default(c->optimizer);
  oc.lr = c->lr;
  oc.weight_decay = c->weight_decay;
  oc.beta1 = c->beta1;
  oc.beta2 = c->beta2;
  oc.momentum = c->momentum;
  if ((s = zt_optim_new(&oc, n_params, params, &r.opt))) goto done;
  if ((s = load_data(&r))) goto done;
  r.scaling = c->mixed_precision == ZT_DTYPE_F16; // f16 gradients need a loss scale; bf16's range does not
  r.scaler = zt_loss_scaler_default();
  int64_t rows = c->batch / r.dp.world; // --batch is global: this rank's rows of it
  zt_loader_config lc = {rows, c->seq, c->seed, r.dp.rank, r.dp.world};
  if ((s = zt_loader_new(r.train, &lc, &r.loader))) {
    zt__error_prefix(s, "training data is too small for batch %lld x seq %lld", (long long)c->batch, (long long)c->seq);
    goto done;
  }
  int64_t xs[] = {rows, c->seq};
  if ((s = zt_tensor_empty_tagged(2, xs, ZT_DTYPE_I32, ZT_CPU, ZT_MEM_TAG_TEMP, &r.x))) goto done;
  if ((s = zt_tensor_empty_tagged(2, xs, ZT_DTYPE_I32, ZT_CPU, ZT_MEM_TAG_TEMP, &r.y))) goto done;
  int64_t start = 0;
  if (c->resume[0]) {
    if ((s = zt__train_dp_load(&r.dp, c->resume, r.model, r.opt, &st))) goto done;
    if ((s = zt_loader_set_pos(r.loader, st.data))) goto done;
    zt_rng_set_state(st.rng);
    if (st.loss_scale > 0) r.scaler.scale = st.loss_scale, r.scaler.good_steps = st.loss_scale_good;
    start = st.step;
    if (start > c->steps) {
      s = ZT_ERR(ZT_STATUS_INVALID_ARG, "checkpoint '%s' is at step %lld, beyond --steps %lld", c->resume,
                 (long long)start, (long long)c->steps);
      goto done;
    }
  }
  if (c->metrics[0] && r.dp.rank == 0 && !(r.metrics = fopen(c->metrics, start ? "a" : "w"))) {
    s = ZT_ERR(ZT_STATUS_IO, "cannot open metrics file '%s': %s", c->metrics, strerror(errno));
    goto done;
  }
  int64_t warmup = c->warmup >= 0 ? c->warmup : (c->steps / 10 < 100 ? c->steps / 10 : 100);
  double min_lr = c->min_lr >= 0 ? c->min_lr : c->lr / 10;
  result.sgemm_gflops = zt_sgemm_gflops(512, 5);
  result.num_params = zt_gpt2_num_params(r.model);
  double flops = zt_gpt2_flops_per_step(r.model, c->batch, c->seq);
  double t_start = now_s();
  result.first_loss = NAN;
  result.last_val_loss = NAN;
  for (int64_t step = start; step < c->steps; step++) {
    double t0 = now_s();
    double lr = zt_lr_cosine(step, warmup, c->steps, c->lr, min_lr);
    zt_tensor *loss = NULL;
    if ((s = zt_loader_next(r.loader, r.x, r.y))) break;
    if ((s = zt_gpt2_forward(r.model, r.x, r.y, NULL, &loss))) break;
    double lv = zt_tensor_get(loss, 0);
    if (c->inject_nan_at == step + 1) lv = NAN;
    // the global batch's loss (a mean of equal-sized row means); every rank decides on it
    if ((s = zt__train_dp_mean(&r.dp, &lv))) {
      zt_tensor_free(loss);
      break;
    }
    if (!isfinite(lv)) {
      zt_tensor_free(loss);
      s = ZT_ERR(ZT_STATUS_STATE,
                 "loss is %g at step %lld: training stopped%s%s%s; lower --lr or check the data", lv,
                 (long long)step + 1, c->save[0] ? ", the last good checkpoint in '" : "",
                 c->save[0] ? c->save : "", c->save[0] ? "' is intact" : "");
      break;
    }
    double scale = r.scaling ? r.scaler.scale : 0;
    zt_tensor *scaled = NULL;
    if (r.scaling && (s = zt_mul_scalar(loss, scale, &scaled))) {
      zt_tensor_free(loss);
      break;
    }
    s = zt_backward(1, scaled ? &scaled : &loss, NULL, false);
    zt_tensor_free(loss);
    zt_tensor_free(scaled);
    if (s) break;
    if (r.scaling && (s = zt__train_dp_scale_grads(&r.dp, 1.0 / scale))) break;
    double gnorm = 0;
    if ((s = zt__train_dp_clip(&r.dp, c->grad_clip, &gnorm))) break;
    // f16: an inf/NaN grad on any rank (the norm is global) skips the update and backs off
    bool skipped = r.scaling && !zt_loss_scaler_update(&r.scaler, isfinite(gnorm));
    if (!isfinite(gnorm) && !skipped) {
      s = ZT_ERR(ZT_STATUS_STATE, "gradient norm is %g at step %lld: training stopped%s%s%s; lower --lr", gnorm,
                 (long long)step + 1, c->save[0] ? ", the last good checkpoint in '" : "", c->save[0] ? c->save : "",
                 c->save[0] ? "' is intact" : "");
      break;
    }
    if (!skipped && (s = zt_optim_step(r.opt, lr))) break;
    if ((s = zt__train_dp_after_step(&r.dp, r.opt))) break;
    double dt = now_s() - t0;
    if (isnan(result.first_loss)) result.first_loss = lv;
    result.last_loss = lv;
    result.steps_done = step + 1 - start;
    zt_train_step_info info = {0};
    info.step = step + 1;
    info.total_steps = c->steps;
    info.loss = lv;
    info.lr = lr;
    info.grad_norm = gnorm;
    info.val_loss = NAN;
    info.step_ms = dt * 1e3;
    info.tokens_per_s = (double)(c->batch * c->seq) / dt;
    info.mfu = flops / dt / 1e9 / (result.sgemm_gflops * r.dp.world); // every rank has its own ceiling
    bool last = step + 1 == c->steps || step + 1 == c->stop_at;
    if ((c->eval_every && (step + 1) % c->eval_every == 0) || last) {
      if ((s = eval_loss(&r, &info.val_loss))) break;
      result.last_val_loss = info.val_loss;
    }
    zt_mem_stats_get(ZT_CPU, &info.mem);
    info.peak_rss = zt_mem_peak_rss();
    info.act_peak_predicted = result.act_peak_predicted;
    info.loss_scale = scale;
    info.skipped = skipped;
    info.rank = r.dp.rank;
    info.world = r.dp.world;
    zt__train_dp_step_stats(&r.dp, &info.comm);
    double mine[RANK_FIG_N], *all = NULL;
    rank_figures(&info, mine);
    if (r.dp.world > 1) {
      if (!(all = malloc(sizeof *all * RANK_FIG_N * (size_t)r.dp.world))) {
        s = ZT_ERR(ZT_STATUS_OOM, "out of host memory");
        break;
      }
      s = zt__train_dp_gather(&r.dp, mine, RANK_FIG_N, all);
    }
    result.act_peak = info.mem.peak[ZT_MEM_TAG_ACTIVATION];
    zt_offload *off = zt_gpt2_activation_offload(r.model);
    if (off) {
      zt_offload_stats os;
      zt_offload_stats_get(off, &os);
      result.offload_peak_bytes = os.peak_bytes_in_tier;
    }
    if (!s && r.metrics)
      write_metrics(r.metrics, &info, !r.dp.ddp && !r.dp.fsdp ? "single" : r.dp.ddp ? "ddp" : zt_shard_strategy_name(c->shard),
                    all ? all : mine);
    free(all);
    if (s) break;
    if (on_step) on_step(&info, user_data);
    if (c->save[0] && ((c->save_every && (step + 1) % c->save_every == 0) || last))
      if ((s = save_checkpoint(&r, step + 1, zt_loader_get_pos(r.loader)))) break;
    if (step + 1 == c->stop_at) break;
  }
  result.seconds = now_s() - t_start;
  if (result.seconds > 0) result.tokens_per_s = (double)(result.steps_done * c->batch * c->seq) / result.seconds;
done:
  if (res) *res = result;
  if (s == ZT_OK && model_out) s = zt__train_dp_gather_full(&r.dp); // the caller gets usable full parameters
  if (s == ZT_OK && model_out) {
    *model_out = r.model;
    r.model = NULL;
  }
  run_free(&r);
  return s;
}
