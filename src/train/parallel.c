/* The training loop's data-parallel part: on one rank without --shard, plain training; on
 * N ranks, DDP (--shard none) or FSDP (any other --shard), with --batch the global batch
 * (B/N rows per rank, so N ranks compute what one computes). Every per-step decision that
 * could differ between ranks (a NaN loss, the grad norm) is made on values all ranks share,
 * so they stop or go on together. */
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "train/parallel.h"
#include "core/backend.h"

zt_status zt__train_dp_open(zt__train_dp *dp, const zt_train_config *c, zt_comm *comm) {
  memset(dp, 0, sizeof *dp);
  if (!comm) {
    ZT_TRY(zt_comm_world(&comm));
    dp->own_comm = true;
  }
  dp->comm = comm;
  dp->rank = zt_comm_rank(comm);
  dp->world = zt_comm_size(comm);
  if (c->parallel.pp > 1 && dp->world % c->parallel.pp)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_train_config.parallel.pp %d does not divide the %d ranks: run P x D ranks (mpirun -np %d for one "
                  "pipeline, %d for two replicas of it)",
                  c->parallel.pp, dp->world, c->parallel.pp, 2 * c->parallel.pp);
  int P = c->parallel.pp > 1 ? c->parallel.pp : 1;
  dp->data_rank = dp->rank / P, dp->data_world = dp->world / P;
  if (c->data.batch % dp->data_world)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_train_config.data.batch %lld is the global batch and must divide evenly over the %d %s; use a "
                  "multiple of %d",
                  (long long)c->data.batch, dp->data_world, P > 1 ? "pipeline replicas" : "ranks", dp->data_world);
  if (c->parallel.mixed_precision != ZT_DTYPE_F32 && c->parallel.shard == ZT_SHARD_NONE)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_train_config.parallel.mixed_precision %s needs an FSDP strategy (it sets the dtype FSDP gathers parameters and reduces "
                  "gradients in): set zt_train_config.parallel.shard to full, grad_op, opt or hybrid:G (one rank works too)",
                  c->parallel.mixed_precision == ZT_DTYPE_BF16 ? "bf16" : "fp16");
  if (c->parallel.shard == ZT_SHARD_HYBRID && (c->parallel.hybrid_group < 1 || dp->world % c->parallel.hybrid_group))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_config.parallel.shard hybrid:%d needs a group size that divides the %d ranks",
                  c->parallel.hybrid_group, dp->world);
  return ZT_OK;
}

zt_status zt__train_dp_wrap(zt__train_dp *dp, const zt_train_config *c, zt_gpt2 *m, zt_store *state_store) {
  dp->n_params = zt_gpt2_params(m, &dp->params);
  if (c->parallel.shard == ZT_SHARD_NONE && dp->world == 1) return ZT_OK; /* plain training */
  zt_data_parallel_options o = {0};
  o.fsdp = c->parallel.shard != ZT_SHARD_NONE;
  o.ddp = zt_ddp_options_default();
  o.fsdp_options = zt_fsdp_options_default();
  o.fsdp_options.strategy = c->parallel.shard;
  o.fsdp_options.hybrid_group = c->parallel.hybrid_group;
  o.fsdp_options.backward_prefetch = o.fsdp_options.forward_prefetch = c->parallel.prefetch;
  o.fsdp_options.param_dtype = o.fsdp_options.reduce_dtype = c->parallel.mixed_precision;
  o.fsdp_options.state_store = state_store;
  ZT_TRY(zt_data_parallel_new(dp->comm, &o, &dp->strategy));
  zt_model model = zt_gpt2_model(m);
  ZT_TRY(zt_strategy_attach(zt_data_parallel_strategy(dp->strategy), &model));
  dp->ddp = zt_data_parallel_ddp(dp->strategy);
  dp->fsdp = zt_data_parallel_fsdp(dp->strategy);
  dp->n_params = zt_data_parallel_params(dp->strategy, &dp->params);
  return ZT_OK;
}

void zt__train_dp_free(zt__train_dp *dp) {
  zt_data_parallel_free(dp->strategy);
  if (dp->own_comm) zt_comm_free(dp->comm);
  memset(dp, 0, sizeof *dp);
}

zt_status zt__train_dp_mean(zt__train_dp *dp, double *v) {
  if (dp->world == 1) return ZT_OK;
  zt_tensor *t = NULL;
  ZT_TRY(zt_tensor_from_data(1, (int64_t[]){1}, ZT_DTYPE_F64, v, &t));
  zt_status s = zt_all_reduce(dp->comm, t, ZT_REDUCE_AVG);
  if (!s) *v = zt_tensor_get(t, 0);
  zt_tensor_free(t);
  return s;
}

zt_status zt__train_dp_clip(zt__train_dp *dp, double max_norm, double *norm) {
  // DDP's grads are already the same on every rank after the all-reduce
  if (dp->fsdp) return zt_fsdp_clip_grad_norm(dp->fsdp, max_norm, norm);
  return zt_clip_grad_norm(dp->n_params, dp->params, max_norm, norm);
}

zt_status zt__train_dp_scale_grads(zt__train_dp *dp, double factor) {
  return dp->fsdp ? zt_fsdp_scale_grads(dp->fsdp, factor) : ZT_OK; /* loss scaling is FSDP-only */
}

zt_status zt__train_dp_after_step(zt__train_dp *dp, zt_optim *o) {
  if (!dp->fsdp) {
    zt_optim_zero_grad(o);
    return ZT_OK;
  }
  ZT_TRY(zt_fsdp_after_step(dp->fsdp));
  zt_fsdp_zero_grad(dp->fsdp);
  return ZT_OK;
}

static zt_status strategy_mean(void *ctx, double *v) { return zt__train_dp_mean(ctx, v); }
static void strategy_set_sync(void *ctx, bool sync) {
  zt__train_dp *dp = ctx;
  if (dp->ddp) zt_ddp_set_sync(dp->ddp, sync);
  if (dp->fsdp) zt_fsdp_set_sync(dp->fsdp, sync);
}
static zt_status strategy_clip(void *ctx, double max_norm, double *norm) {
  return zt__train_dp_clip(ctx, max_norm, norm);
}
static zt_status strategy_scale_grads(void *ctx, double factor) { return zt__train_dp_scale_grads(ctx, factor); }
static zt_status strategy_after_step(void *ctx, zt_optim *o) { return zt__train_dp_after_step(ctx, o); }
static zt_status strategy_optim_step(void *ctx, zt_optim *o, double lr) {
  zt__train_dp *dp = ctx;
  return dp->fsdp ? zt_fsdp_optim_step(dp->fsdp, o, lr) : zt_optim_step(o, lr);
}

zt_dp_strategy zt__train_dp_strategy(zt__train_dp *dp) {
  return (zt_dp_strategy){strategy_mean, strategy_set_sync, strategy_clip,
                          dp->fsdp ? strategy_scale_grads : NULL, strategy_after_step, strategy_optim_step, dp};
}

void zt__train_dp_step_stats(zt__train_dp *dp, zt_dp_stats *out) {
  zt_dp_stats now = {0};
  if (dp->ddp) zt_ddp_stats_get(dp->ddp, &now);
  if (dp->fsdp) zt_fsdp_stats_get(dp->fsdp, &now);
  out->comm_calls = now.comm_calls - dp->last.comm_calls;
  out->bytes_sent = now.bytes_sent - dp->last.bytes_sent;
  out->wait_s = now.wait_s - dp->last.wait_s;
  out->all_gathers = now.all_gathers - dp->last.all_gathers;
  out->reduce_scatters = now.reduce_scatters - dp->last.reduce_scatters;
  out->all_reduces = now.all_reduces - dp->last.all_reduces;
  dp->last = now;
}

zt_status zt__train_dp_gather(zt__train_dp *dp, const double *mine, int n, double *all) {
  zt_tensor *in = NULL, *out = NULL;
  ZT_TRY(zt_tensor_from_data(1, (int64_t[]){n}, ZT_DTYPE_F64, mine, &in));
  zt_status s = zt_tensor_empty_tagged(1, (int64_t[]){(int64_t)n * dp->world}, ZT_DTYPE_F64, ZT_CPU, ZT_MEM_TAG_TEMP,
                                       &out);
  if (!s) s = zt_all_gather(dp->comm, in, out);
  if (!s && all) zt__dev_read(out, all, sizeof *all * (size_t)n * (size_t)dp->world);
  zt_tensor_free(in);
  zt_tensor_free(out);
  return s;
}

zt_status zt__train_dp_save(zt__train_dp *dp, const zt_train_config *c, const char *dir, zt_gpt2 *m, zt_optim *o,
                            const zt_train_state *st) {
  if (dp->fsdp)
    return c->checkpoint.save_full ? zt_snapshot_save_full(dir, m, dp->fsdp, o, st)
                        : zt_snapshot_save_sharded(dir, dp->fsdp, o, st);
  // plain and DDP: every rank holds the same values; rank 0 writes, the others wait for it
  zt_status s = ZT_OK;
  if (dp->rank == 0) s = zt_snapshot_save(dir, m, o, st);
  if (dp->world == 1) return s;
  double ok = s ? 0 : 1;
  zt_status g = zt__train_dp_mean(dp, &ok);
  if (s || g) return s ? s : g;
  if (ok < 1) return ZT_ERR(ZT_STATUS_IO, "rank 0 could not write checkpoint '%s' (see its error)", dir);
  return ZT_OK;
}

zt_status zt__train_dp_load(zt__train_dp *dp, const char *dir, zt_gpt2 *m, zt_optim *o, zt_train_state *st) {
  if (!dp->fsdp) return zt_snapshot_load(dir, m, o, st);
  if (zt_snapshot_is_sharded(dir)) return zt_snapshot_load_sharded(dir, dp->fsdp, o, st);
  return zt_snapshot_load_full(dir, m, dp->fsdp, o, st);
}

zt_status zt__train_dp_gather_full(zt__train_dp *dp) {
  return dp->fsdp ? zt_fsdp_gather_full_params(dp->fsdp) : ZT_OK;
}

zt_status zt__train_dp_release_full(zt__train_dp *dp) {
  return dp->fsdp ? zt_fsdp_release_full_params(dp->fsdp) : ZT_OK;
}
