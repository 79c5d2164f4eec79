/* DDP and FSDP as one strategy (zt/fsdp.h, zt/strategy.h): attaching builds the zt_ddp or
 * zt_fsdp from what the model interface shows (its parameters; its module tree and block
 * sequence), detaching frees it. The kind is chosen once, when attached (a table of its
 * calls); a training step's calls go through that table, so a caller never asks which. */
#include <stdlib.h>

#include "core/status_internal.h"
#include "zt/fsdp.h"
#include "zt/nn.h"

typedef struct dp_kind dp_kind;

struct zt_data_parallel {
  zt_comm *comm;
  zt_data_parallel_options o;
  /* attached */
  const dp_kind *kind;
  zt_ddp *ddp;
  zt_fsdp *fsdp;
  zt_param *params;
  int n_params;
};

/* One kind's calls; every member is required but scale_grads and offload_optim (NULL: the kind
 * cannot scale its gradients; keeps no state in a store). */
struct dp_kind {
  const char *(*name)(const zt_data_parallel *d);
  zt_status (*attach)(zt_data_parallel *d, const zt_model *m);
  void (*set_sync)(zt_data_parallel *d, bool sync);
  zt_status (*clip)(zt_data_parallel *d, double max_norm, double *norm);
  zt_status (*scale_grads)(zt_data_parallel *d, double factor);
  zt_status (*optim_step)(zt_data_parallel *d, zt_optim *o, double lr);
  zt_status (*after_step)(zt_data_parallel *d, zt_optim *o);
  zt_status (*offload_optim)(zt_data_parallel *d, zt_optim *o);
  void (*stats)(const zt_data_parallel *d, zt_dp_stats *out);
  zt_status (*gather_full)(zt_data_parallel *d);
  zt_status (*release_full)(zt_data_parallel *d);
};

/* ------------------------------------------------ DDP: the model's parameters, all-reduced grads */
static const char *ddp_name(const zt_data_parallel *d) { return (void)d, "ddp"; }
static zt_status ddp_attach(zt_data_parallel *d, const zt_model *m) {
  d->n_params = zt_model_params(m, &d->params);
  return zt_ddp_new(d->comm, d->n_params, d->params, &d->o.ddp, &d->ddp);
}
static void ddp_set_sync(zt_data_parallel *d, bool sync) { zt_ddp_set_sync(d->ddp, sync); }
/* the grads are the same on every rank after the all-reduce: a local norm is the global one */
static zt_status ddp_clip(zt_data_parallel *d, double max_norm, double *norm) {
  return zt_clip_grad_norm(d->n_params, d->params, max_norm, norm);
}
static zt_status ddp_optim_step(zt_data_parallel *d, zt_optim *o, double lr) { return (void)d, zt_optim_step(o, lr); }
static zt_status ddp_after_step(zt_data_parallel *d, zt_optim *o) {
  (void)d;
  zt_optim_zero_grad(o);
  return ZT_OK;
}
static void ddp_stats(const zt_data_parallel *d, zt_dp_stats *out) { zt_ddp_stats_get(d->ddp, out); }
static zt_status ddp_full(zt_data_parallel *d) { return (void)d, ZT_OK; } /* every rank holds them */

static const dp_kind k_ddp = {ddp_name, ddp_attach, ddp_set_sync, ddp_clip, NULL, ddp_optim_step, ddp_after_step,
                              NULL, ddp_stats, ddp_full, ddp_full};

/* ------------------------------------------------ FSDP: a unit per block, the optimizer over the shards */
static const char *fsdp_name(const zt_data_parallel *d) { return zt_shard_strategy_name(d->o.fsdp_options.strategy); }
static zt_status fsdp_attach(zt_data_parallel *d, const zt_model *m) {
  ZT_TRY(zt_fsdp_new(d->comm, zt_model_module(m), &d->o.fsdp_options, &d->fsdp));
  zt_module *blocks = zt_model_blocks(m);
  for (int i = 0; i < blocks->n_children; i++) ZT_TRY(zt_fsdp_wrap(d->fsdp, blocks->children[i]));
  ZT_TRY(zt_fsdp_init(d->fsdp));
  d->n_params = zt_fsdp_params(d->fsdp, &d->params, NULL);
  return ZT_OK;
}
static void fsdp_set_sync(zt_data_parallel *d, bool sync) { zt_fsdp_set_sync(d->fsdp, sync); }
static zt_status fsdp_clip(zt_data_parallel *d, double max_norm, double *norm) {
  return zt_fsdp_clip_grad_norm(d->fsdp, max_norm, norm);
}
static zt_status fsdp_scale_grads(zt_data_parallel *d, double factor) { return zt_fsdp_scale_grads(d->fsdp, factor); }
static zt_status fsdp_optim_step(zt_data_parallel *d, zt_optim *o, double lr) { return zt_fsdp_optim_step(d->fsdp, o, lr); }
static zt_status fsdp_after_step(zt_data_parallel *d, zt_optim *o) {
  (void)o; /* the pieces' grads are FSDP's */
  ZT_TRY(zt_fsdp_after_step(d->fsdp));
  zt_fsdp_zero_grad(d->fsdp);
  return ZT_OK;
}
static zt_status fsdp_offload_optim(zt_data_parallel *d, zt_optim *o) {
  return d->o.fsdp_options.state_store ? zt_fsdp_offload_optim(d->fsdp, o) : ZT_OK; /* ZeRO-Infinity */
}
static void fsdp_stats(const zt_data_parallel *d, zt_dp_stats *out) { zt_fsdp_stats_get(d->fsdp, out); }
static zt_status fsdp_gather_full(zt_data_parallel *d) { return zt_fsdp_gather_full_params(d->fsdp); }
static zt_status fsdp_release_full(zt_data_parallel *d) { return zt_fsdp_release_full_params(d->fsdp); }

static const dp_kind k_fsdp = {fsdp_name,       fsdp_attach,     fsdp_set_sync,      fsdp_clip,
                               fsdp_scale_grads, fsdp_optim_step, fsdp_after_step,    fsdp_offload_optim,
                               fsdp_stats,       fsdp_gather_full, fsdp_release_full};

/* ------------------------------------------------ the strategy */
zt_status zt_data_parallel_new(zt_comm *comm, const zt_data_parallel_options *o, zt_data_parallel **out) {
  if (!comm || !o || !out)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_data_parallel_new: %s is NULL", !comm ? "comm" : !o ? "options" : "out");
  zt_data_parallel *d = calloc(1, sizeof *d);
  if (!d) return ZT_ERR(ZT_STATUS_OOM, "zt_data_parallel_new: out of host memory");
  d->comm = comm;
  d->o = *o;
  *out = d;
  return ZT_OK;
}

static void detach(void *self) {
  zt_data_parallel *d = self;
  zt_ddp_free(d->ddp);
  zt_fsdp_free(d->fsdp);
  d->ddp = NULL, d->fsdp = NULL, d->params = NULL, d->n_params = 0, d->kind = NULL;
}

static zt_status attach(void *self, const zt_model *m) {
  zt_data_parallel *d = self;
  if (d->kind)
    return ZT_ERR(ZT_STATUS_STATE, "the data-parallel strategy is attached to a model already; detach it first");
  d->kind = d->o.fsdp ? &k_fsdp : &k_ddp; /* the one place that asks */
  zt_status s = d->kind->attach(d, m);
  if (s) detach(d);
  return s;
}

static const zt_strategy_ops ops = {"data-parallel", ZT_STRATEGY_ORDER_DATA_PARALLEL, attach, detach};

zt_strategy zt_data_parallel_strategy(zt_data_parallel *d) { return (zt_strategy){&ops, d}; }
zt_ddp *zt_data_parallel_ddp(const zt_data_parallel *d) { return d ? d->ddp : NULL; }
zt_fsdp *zt_data_parallel_fsdp(const zt_data_parallel *d) { return d ? d->fsdp : NULL; }

int zt_data_parallel_params(const zt_data_parallel *d, zt_param **params) {
  if (params) *params = d ? d->params : NULL;
  return d ? d->n_params : 0;
}

void zt_data_parallel_free(zt_data_parallel *d) {
  if (!d) return;
  detach(d);
  free(d);
}

/* ------------------------------------------------ a step's calls: the attached kind's */
const char *zt_data_parallel_name(const zt_data_parallel *d) {
  ZT_ASSERT(d && d->kind);
  return d->kind->name(d);
}

void zt_data_parallel_set_sync(zt_data_parallel *d, bool sync) {
  ZT_ASSERT(d && d->kind);
  d->kind->set_sync(d, sync);
}

zt_status zt_data_parallel_clip_grad_norm(zt_data_parallel *d, double max_norm, double *norm) {
  ZT_ASSERT(d && d->kind);
  return d->kind->clip(d, max_norm, norm);
}

zt_status zt_data_parallel_scale_grads(zt_data_parallel *d, double factor) {
  ZT_ASSERT(d && d->kind);
  if (!d->kind->scale_grads)
    return ZT_ERR(ZT_STATUS_UNSUPPORTED, "zt_data_parallel_scale_grads: %s cannot scale its gradients; loss scaling "
                                         "needs FSDP", d->kind->name(d));
  return d->kind->scale_grads(d, factor);
}

zt_status zt_data_parallel_optim_step(zt_data_parallel *d, zt_optim *o, double lr) {
  ZT_ASSERT(d && d->kind);
  return d->kind->optim_step(d, o, lr);
}

zt_status zt_data_parallel_after_step(zt_data_parallel *d, zt_optim *o) {
  ZT_ASSERT(d && d->kind);
  return d->kind->after_step(d, o);
}

zt_status zt_data_parallel_offload_optim(zt_data_parallel *d, zt_optim *o) {
  ZT_ASSERT(d && d->kind);
  return d->kind->offload_optim ? d->kind->offload_optim(d, o) : ZT_OK;
}

void zt_data_parallel_stats_get(const zt_data_parallel *d, zt_dp_stats *out) {
  ZT_ASSERT(d && d->kind);
  d->kind->stats(d, out);
}

zt_status zt_data_parallel_gather_full(zt_data_parallel *d) {
  ZT_ASSERT(d && d->kind);
  return d->kind->gather_full(d);
}

zt_status zt_data_parallel_release_full(zt_data_parallel *d) {
  ZT_ASSERT(d && d->kind);
  return d->kind->release_full(d);
}
