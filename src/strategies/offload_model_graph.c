/* OffloadModel's graph-keeping mode (fairscale's ShardSyncLayer path; zt/offload_model.h): a
 * chunk's forward runs with grad slice after slice, keeping the graph; a sync node (a custom
 * function, identity in forward) at each slice's input runs in backward right after the
 * slice's own nodes (the slice is reachable only through it) and brings the slice before it
 * into RAM, with the one before that on its way.
 * Invariants: when a slice's nodes run in backward its parameters are in RAM (the saved
 * tensors that alias them are read then); leaf accumulators run as soon as their grad is
 * complete, so a slice's own grads are in before its sync node evicts it; a parameter shared
 * with an earlier slice (the tied embedding) keeps its engine buffer until that slice. A
 * unit's op that reads only parameters (no path to the slice's input) could run after its
 * slice left: it then fails with the evicted storage's message (GPT-2 has none past slice 0). */
#include <stdlib.h>

#include "core/status_internal.h"
#include "offload_model_internal.h"
#include "zt/autograd.h"

typedef struct sync_data {
  zt_offload_model *om;
  int s; /* the slice whose input this node is */
} sync_data;

static zt_status sync_forward(zt_node *ctx, int n_inputs, zt_tensor *const *inputs, int n_outputs, zt_tensor **outputs,
                              void *user_data) {
  (void)n_inputs, (void)n_outputs;
  sync_data *d = malloc(sizeof *d);
  if (!d) return ZT_ERR(ZT_STATUS_OOM, "offload model: out of host memory for a sync node");
  *d = *(const sync_data *)user_data;
  zt_fn_ctx_set_data(ctx, d, free);
  return zt_tensor_alias(inputs[0], &outputs[0]);
}

static zt_status sync_backward(zt_node *ctx, int n_outputs, zt_tensor *const *grad_outputs, int n_inputs,
                               const bool *needs, zt_tensor **grad_inputs) {
  (void)n_outputs, (void)n_inputs;
  sync_data *d = zt_fn_ctx_data(ctx);
  zt_offload_model *om = d->om;
  int s = d->s;
  if (!needs[1]) return zt__om_no_zt_grad();
  zt__om_backward_mark(om, s);
  /* slice s's backward is done: its grads are final after the step's last chunk */
  if (om->graph_last) ZT_TRY(zt__om_settle_owned(om, s));
  ZT_TRY(zt__om_slice_ensure(om, s - 1, s >= 2 ? s - 2 : -1));
  if (needs[0]) ZT_TRY(zt_tensor_alias(grad_outputs[0], &grad_inputs[0]));
  return ZT_OK;
}

void zt__om_backward_mark(zt_offload_model *om, int s) {
  double t = zt_clock_now();
  om->slice_bwd_s[s] += t - om->bwd_mark - (om->st.update_s - om->bwd_update_mark);
  om->bwd_mark = t, om->bwd_update_mark = om->st.update_s;
}

static const zt_function sync_fn = {"OffloadModelSliceSync", sync_forward, sync_backward};

zt_status zt__om_forward_graph(zt_offload_model *om, zt_tensor *x, zt_tensor *y, zt_tensor **loss) {
  *loss = NULL;
  int S = om->S;
  zt_tensor *cur = x; /* the previous slice's output (x: borrowed) */
  zt_status e = ZT_OK;
  for (int s = 0; s < S && !e; s++) {
    zt_tensor *in = cur, *out = NULL;
    double t0 = zt_clock_now(), u0 = om->st.update_s;
    e = zt__om_slice_ensure(om, s, s + 1 < S ? s + 1 : -1);
    if (!e && s > 0 && zt_grad_enabled()) {
      zt_tensor *args[2] = {cur, om->probe};
      sync_data d = {om, s};
      e = zt_function_apply(&sync_fn, 2, args, 1, &in, &d);
    }
    if (!e) {
      e = om->u.run(om->u.ctx, om->first[s], om->count[s], s == S - 1 ? y : NULL, in, &out);
      if (e)
        e = zt__error_prefix(e, "offload model: slice %d (units %d..%d)", s, om->first[s],
                             om->first[s] + om->count[s] - 1);
    }
    if (in != cur) zt_tensor_free(in);
    if (cur != x) zt_tensor_free(cur);
    cur = out;
    om->slice_fwd_s[s] += zt_clock_now() - t0 - (om->st.update_s - u0);
  }
  if (e) {
    if (cur != x) zt_tensor_free(cur);
    return e;
  }
  *loss = cur;
  return ZT_OK;
}
