/* DDP and FSDP as strategies (zt/fsdp.h, zt/strategy.h): attaching builds the zt_ddp or
 * zt_fsdp from what the model interface shows (its parameters; its module tree and block
 * sequence), detaching frees it. */
#include <stdlib.h>

#include "core/status_internal.h"
#include "zt/fsdp.h"
#include "zt/nn.h"

struct zt_data_parallel {
  zt_comm *comm;
  zt_data_parallel_options o;
  /* attached */
  zt_ddp *ddp;
  zt_fsdp *fsdp;
  zt_param *params;
  int n_params;
};

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
  d->ddp = NULL, d->fsdp = NULL, d->params = NULL, d->n_params = 0;
}

static zt_status attach_fsdp(zt_data_parallel *d, const zt_model *m) {
  ZT_TRY(zt_fsdp_new(d->comm, zt_model_module(m), &d->o.fsdp_options, &d->fsdp));
  zt_module *blocks = zt_model_blocks(m);
  for (int i = 0; i < blocks->n_children; i++) ZT_TRY(zt_fsdp_wrap(d->fsdp, blocks->children[i]));
  ZT_TRY(zt_fsdp_init(d->fsdp));
  d->n_params = zt_fsdp_params(d->fsdp, &d->params, NULL);
  return ZT_OK;
}

static zt_status attach(void *self, const zt_model *m) {
  zt_data_parallel *d = self;
  if (d->ddp || d->fsdp)
    return ZT_ERR(ZT_STATUS_STATE, "the data-parallel strategy is attached to a model already; detach it first");
  zt_status s;
  if (d->o.fsdp) {
    s = attach_fsdp(d, m);
  } else {
    d->n_params = zt_model_params(m, &d->params);
    s = zt_ddp_new(d->comm, d->n_params, d->params, &d->o.ddp, &d->ddp);
  }
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
