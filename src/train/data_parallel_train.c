/* The data-parallel training mode (train/mode.h): on one rank without a shard strategy, plain
 * training; otherwise the data-parallel strategy (zt/fsdp.h) attached to the model, DDP
 * (shard none) or FSDP (any sharding, its states in RAM or, ZeRO-Infinity, in the run's tier),
 * which chooses between them once. --batch is the global batch (B/N rows per rank, so N ranks
 * compute what one computes); every per-step decision that could differ between ranks (a NaN
 * loss, the grad norm) is made on values all ranks share, so they stop or go on together. */
#include <stdlib.h>

#include "core/status_internal.h"
#include "train/mode.h"

typedef struct dp_mode {
  zt_data_parallel *strategy; /* attached to the model (NULL: plain training) */
  zt_dp_strategy step;        /* the strategy as zt_train_step sees it */
  zt_dp_stats last;           /* the strategy's counters at the end of the previous step */
} dp_mode;

static dp_mode *ctx(zt__mode *m) { return m->ctx; }

/* ------------------------------------------------ as zt_train_step sees it */
static zt_status step_mean(void *run, double *v) { return zt__run_mean(run, v); }
static void step_set_sync(void *run, bool sync) { (void)run, (void)sync; } /* plain: nothing to hold back */
static zt_status step_clip(void *run, double max_norm, double *norm) {
  zt__run *r = run;
  return zt_clip_grad_norm(r->n_params, r->params, max_norm, norm);
}
static zt_status step_after(void *run, zt_optim *o) {
  (void)run;
  zt_optim_zero_grad(o);
  return ZT_OK;
}
static zt_status step_update(void *run, zt_optim *o, double lr) { return (void)run, zt_optim_step(o, lr); }

/* with a strategy: its calls, the loss's mean over the run's ranks */
static zt_status strat_mean(void *m, double *v) { return zt__run_mean(((zt__mode *)m)->run, v); }
static void strat_set_sync(void *m, bool sync) { zt_data_parallel_set_sync(ctx(m)->strategy, sync); }
static zt_status strat_clip(void *m, double max_norm, double *norm) {
  return zt_data_parallel_clip_grad_norm(ctx(m)->strategy, max_norm, norm);
}
static zt_status strat_scale(void *m, double factor) { return zt_data_parallel_scale_grads(ctx(m)->strategy, factor); }
static zt_status strat_after(void *m, zt_optim *o) { return zt_data_parallel_after_step(ctx(m)->strategy, o); }
static zt_status strat_update(void *m, zt_optim *o, double lr) {
  return zt_data_parallel_optim_step(ctx(m)->strategy, o, lr);
}

/* ------------------------------------------------ the mode */
static const char *dp_name(zt__mode *m) {
  return ctx(m)->strategy ? zt_data_parallel_name(ctx(m)->strategy) : "single";
}
static zt_status dp_check(zt__mode *m) { return zt__mode_check_no_pipeline(m->run->c); }

/* with memory.offload_states (FSDP's, zt__train_fsdp_stores) built straight into the tier */
static zt_status dp_build(zt__mode *m) { return zt__run_build(m->run, m->run->c->memory.offload_states); }

/* The strategy c asks for, attached to the model; it keeps its states in the run's tier when
 * there is one (memory.offload_states). */
static zt_status attach(zt__mode *m) {
  zt__run *r = m->run;
  const zt_train_config *c = r->c;
  zt_data_parallel_options o = {0};
  o.fsdp = c->parallel.shard != ZT_SHARD_NONE;
  o.ddp = zt_ddp_options_default();
  o.fsdp_options = zt_fsdp_options_default();
  o.fsdp_options.strategy = c->parallel.shard;
  o.fsdp_options.hybrid_group = c->parallel.hybrid_group;
  o.fsdp_options.backward_prefetch = o.fsdp_options.forward_prefetch = c->parallel.prefetch;
  o.fsdp_options.param_dtype = o.fsdp_options.reduce_dtype = c->parallel.mixed_precision;
  o.fsdp_options.state_store = r->tier;
  ZT_TRY(zt_data_parallel_new(r->comm, &o, &ctx(m)->strategy));
    ZT_TRY(zt_strategy_attach(zt_data_parallel_strategy(ctx(m)->strategy), &r->model));
  r->n_params = zt_data_parallel_params(ctx(m)->strategy, &r->params);
  ctx(m)->step = (zt_dp_strategy){strat_mean, strat_set_sync, strat_clip, strat_scale, strat_after, strat_update, m};
  return ZT_OK;
}

static zt_status dp_link(zt__mode *m) {
  zt__run *r = m->run;
  r->n_params = zt_model_params(&r->model, &r->params);
  ctx(m)->step = (zt_dp_strategy){step_mean, step_set_sync, step_clip, NULL, step_after, step_update, r};
  if (r->c->parallel.shard != ZT_SHARD_NONE || r->world > 1) ZT_TRY(attach(m));
  ZT_TRY(zt__run_optim(r));
  /* ZeRO-Infinity: the optimizer's state made in the tier, so that a resume streams into it */
  return ctx(m)->strategy ? zt_data_parallel_offload_optim(ctx(m)->strategy, r->opt) : ZT_OK;
}

static zt_status dp_save(zt__mode *m, const zt_train_state *st) {
  zt__run *r = m->run;
  zt_fsdp *fsdp = ctx(m)->strategy ? zt_data_parallel_fsdp(ctx(m)->strategy) : NULL;
  const char *dir = r->c->checkpoint.save;
  if (!fsdp) return zt__run_save_replicated(r, st); /* plain and DDP: every rank holds the same values */
  return r->c->checkpoint.save_full ? zt_snapshot_save_full(dir, &r->model, fsdp, r->opt, st)
                                    : zt_snapshot_save_sharded(dir, fsdp, r->opt, st);
}

static zt_status dp_load(zt__mode *m, zt_train_state *st) {
  zt__run *r = m->run;
  zt_fsdp *fsdp = ctx(m)->strategy ? zt_data_parallel_fsdp(ctx(m)->strategy) : NULL;
  const char *dir = r->c->checkpoint.resume;
  if (!fsdp) return zt_snapshot_load(dir, &r->model, r->opt, st);
  if (zt_snapshot_is_sharded(dir)) return zt_snapshot_load_sharded(dir, fsdp, r->opt, st);
  return zt_snapshot_load_full(dir, &r->model, fsdp, r->opt, st);
}

static zt_status dp_step(zt__mode *m, const zt_train_step_options *so, zt_train_step_result *out) {
  return zt_train_step(&m->run->model, &ctx(m)->step, m->run->opt, m->run->next, m->run->next_data, so, out);
}

static zt_status dp_loss(zt__mode *m, zt_tensor *x, zt_tensor *y, double *loss) {
  zt_tensor *l = NULL;
  ZT_TRY(zt_model_forward_loss(&m->run->model, x, y, &l));
  *loss = zt_tensor_get(l, 0);
  zt_tensor_free(l);
  return ZT_OK;
}

static zt_status dp_mean(zt__mode *m, double *v) { return zt__run_mean(m->run, v); }

/* this step's communication: the counters' change since the last step */
static zt_status dp_stats(zt__mode *m, zt_train_step_info *info) {
  dp_mode *d = ctx(m);
  zt_dp_stats now = {0}, *out = &info->comm;
  if (d->strategy) zt_data_parallel_stats_get(d->strategy, &now);
  out->comm_calls = now.comm_calls - d->last.comm_calls;
  out->bytes_sent = now.bytes_sent - d->last.bytes_sent;
  out->wait_s = now.wait_s - d->last.wait_s;
  out->all_gathers = now.all_gathers - d->last.all_gathers;
  out->reduce_scatters = now.reduce_scatters - d->last.reduce_scatters;
  out->all_reduces = now.all_reduces - d->last.all_reduces;
  d->last = now;
  return ZT_OK;
}

static zt_status dp_gather(zt__mode *m) {
  return ctx(m)->strategy ? zt_data_parallel_gather_full(ctx(m)->strategy) : ZT_OK;
}

static void dp_close(zt__mode *m) {
  if (!m->ctx) return;
  zt_data_parallel_free(ctx(m)->strategy); /* its hooks leave the model's modules */
  free(m->ctx);
  m->ctx = NULL;
}

static const zt__mode_i k_data_parallel = {
    .unit = "ranks",
    .own_stream = true,
    .name = dp_name,
    .check = dp_check,
    .build = dp_build,
    .link = dp_link,
    .save = dp_save,
    .load = dp_load,
    .step = dp_step,
    .loss = dp_loss,
    .mean = dp_mean,
    .stats = dp_stats,
    .gather = dp_gather,
    .close = dp_close,
};

zt_status zt__mode_data_parallel(zt__run *run, zt__mode *out) {
  dp_mode *d = calloc(1, sizeof *d);
  if (!d) return ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  *out = (zt__mode){&k_data_parallel, d, run};
  return ZT_OK;
}
