/* OffloadModel in training (zt/offload_model.h): GPT-2 as its unit sequence (unit 0 the
 * embeddings (wte, wpe), units 1..L the blocks, unit L + 1 the final layer norm and the fused
 * lm-head loss, which uses the tied wte again; a span of units runs as zt_gpt2_forward_stage),
 * and the training loop's part (offload_train.h): the store, the step, evaluation, holding
 * every parameter in RAM for a save. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/status_internal.h"
#include "train/offload_train.h"

static bool name_is(const char *name, const char *prefix) { return strncmp(name, prefix, strlen(prefix)) == 0; }

static bool gpt2_uses(void *ctx, int unit, int param) {
  zt_gpt2 *m = ctx;
  zt_param *ps = NULL;
  int n = zt_gpt2_params(m, &ps), L = zt_gpt2_get_config(m)->n_layer;
  if (param < 0 || param >= n) return false;
  const char *name = ps[param].name;
  if (unit == 0) return !strcmp(name, "transformer.wte.weight") || !strcmp(name, "transformer.wpe.weight");
  if (unit == L + 1) return !strcmp(name, "transformer.wte.weight") || name_is(name, "transformer.ln_f.");
  char prefix[48];
  snprintf(prefix, sizeof prefix, "transformer.h.%d.", unit - 1);
  return name_is(name, prefix);
}

static zt_status gpt2_run(void *ctx, int first, int count, zt_tensor *targets, zt_tensor *in, zt_tensor **out) {
  zt_gpt2 *m = ctx;
  int L = zt_gpt2_get_config(m)->n_layer, last = first + count;
  bool head = last == L + 2;
  int b0 = first > 0 ? first - 1 : 0, b1 = last - 1 < L ? last - 1 : L;
  if (head && !targets)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "GPT-2's last unit (the loss) needs targets (B, T)");
  return zt_gpt2_forward_stage(m, first == 0, b0, b1 > b0 ? b1 - b0 : 0, head ? targets : NULL, in, out);
}

zt_status zt_gpt2_offload_units(zt_gpt2 *m, zt_offload_units *out) {
  if (!m || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_gpt2_offload_units: model and out are required");
  zt_param *ps = NULL;
  int n = zt_gpt2_params(m, &ps);
  *out = (zt_offload_units){zt_gpt2_get_config(m)->n_layer + 2, n, ps, gpt2_uses, gpt2_run, m};
  return ZT_OK;
}

/* ------------------------------------------------ the training loop's part */
bool zt__train_fsdp_stores(const zt_train_config *c) {
  return c->memory.offload_states && c->parallel.shard != ZT_SHARD_NONE;
}

bool zt__train_om_wanted(const zt_train_config *c) { return c->memory.offload_model != 0 && !zt__train_fsdp_stores(c); }

zt_status zt__train_om_store(zt__train_om *om, const zt_train_config *c, zt_comm *comm) {
  if (om->store) return ZT_OK;
  bool fsdp = zt__train_fsdp_stores(c); /* the store is FSDP's: no offload model */
  const char *no = c->parallel.pp > 1 ? "zt_train_config.parallel.pp (a pipeline)"
                   : !fsdp && c->parallel.shard != ZT_SHARD_NONE
                       ? "zt_train_config.parallel.shard (FSDP; with memory.offload_states instead, FSDP keeps its "
                         "states in the store itself: ZeRO-Infinity)"
                   : !fsdp && c->parallel.mixed_precision != ZT_DTYPE_F32 ? "zt_train_config.parallel.mixed_precision"
                   : fsdp && (c->parallel.shard == ZT_SHARD_OPT)
                       ? "zt_train_config.parallel.shard opt, which keeps every full parameter in RAM (use full, "
                         "hybrid:G or grad_op)"
                   : !fsdp && c->memory.offload_mode == ZT_OFFLOAD_MODEL_KEEP_GRAPH && comm && zt_comm_size(comm) > 1
                       ? "more than one process in zt_train_config.memory.offload_mode keep-graph (its chunks decide "
                         "on their own losses; DDP needs recompute)"
                       : NULL;
  if (no)
    return ZT_ERR(ZT_STATUS_UNSUPPORTED, "zt_train_config.memory.offload_model does not run with %s; drop one of them",
                  no);
  const char *dir = c->memory.offload_dir[0] ? c->memory.offload_dir : NULL;
  switch ((zt_offload_tier)c->memory.offload_model) {
  case ZT_OFFLOAD_BF16: ZT_TRY(zt_store_bf16_new(&om->store)); break;
  case ZT_OFFLOAD_DISK: ZT_TRY(zt_store_disk_new(dir, "zt_offload_model", &om->store)); break;
  default: ZT_TRY(zt_store_memory_new(&om->store)); break;
  }
  if (c->memory.offload_write_cap > 0) zt_store_set_write_cap(om->store, (size_t)c->memory.offload_write_cap);
  return ZT_OK;
}

zt_status zt__train_om_open(zt__train_om *om, const zt_train_config *c, zt_gpt2 *m, zt_comm *comm, int64_t rows) {
  int L = zt_gpt2_get_config(m)->n_layer;
  if (c->memory.offload_slices > L + 2)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_config.memory.offload_slices %d: the model has %d units to slice "
                                         "(embedding, %d blocks, head); give at most %d",
                  c->memory.offload_slices, L + 2, L, L + 2);
  zt_status s = zt__train_om_store(om, c, comm);
  zt_offload_units u;
  if (!s) s = zt_gpt2_offload_units(m, &u);
  zt_offload_model_options o = zt_offload_model_options_default();
  if (c->memory.offload_slices > 0) o.slices = c->memory.offload_slices; /* 0: the options' default */
  if (c->memory.offload_resident > 0) o.resident = c->memory.offload_resident;
  o.microbatches = (int)c->data.microbatches;
  o.mode = (zt_offload_model_mode)c->memory.offload_mode;
  o.comm = comm && zt_comm_size(comm) > 1 ? comm : NULL;
  o.offload_optim_state = c->memory.offload_states;
  o.restore_on_free = !c->memory.offload_states;
  om->M = c->data.microbatches;
  om->mode = o.mode;
  if (!s) s = zt_offload_model_new(&u, om->store, &o, &om->om);
  int64_t shape[2] = {rows, c->data.seq};
  if (!s) s = zt_tensor_empty_tagged(2, shape, ZT_DTYPE_I32, ZT_CPU, ZT_MEM_TAG_TEMP, &om->x);
  if (!s) s = zt_tensor_empty_tagged(2, shape, ZT_DTYPE_I32, ZT_CPU, ZT_MEM_TAG_TEMP, &om->y);
  if (s) zt__train_om_free(om);
  return s;
}

static void phase(const zt_train_step_options *so, zt_train_phase p) {
  if (so->on_phase) so->on_phase(p, so->step, so->phase_user_data);
}

/* Microbatch k's rows of the step's batch get (x, y). */
static zt_status put_rows(zt__train_om *om, int64_t k, zt_tensor *x, zt_tensor *y) {
  int64_t rows = x->shape[0];
  zt_tensor *dx = NULL, *dy = NULL;
  zt_status s = zt_narrow(om->x, 0, k * rows, rows, &dx);
  if (!s) s = zt_narrow(om->y, 0, k * rows, rows, &dy);
  if (!s) s = zt_tensor_copy_(dx, x);
  if (!s) s = zt_tensor_copy_(dy, y);
  zt_tensor_free(dx);
  zt_tensor_free(dy);
  return s;
}

zt_status zt__train_om_step(zt__train_om *om, const zt_dp_strategy *dp, zt_optim *o, zt_batch_fn next,
                            void *user_data, const zt_train_step_options *so, zt_train_step_result *out) {
  zt_train_step_result r = {0};
  r.grad_norm = NAN;
  *out = r;
  phase(so, ZT_TRAIN_PHASE_FORWARD);
  for (int64_t k = 0; k < om->M; k++) {
    zt_tensor *x = NULL, *y = NULL;
    ZT_TRY(next(user_data, &x, &y));
    if (x->shape[0] * om->M != om->x->shape[0])
      return ZT_ERR(ZT_STATUS_SHAPE, "offload model step: a microbatch of %lld rows, %lld expected",
                    (long long)x->shape[0], (long long)(om->x->shape[0] / om->M));
    ZT_TRY(put_rows(om, k, x, y));
  }
  if (om->mode == ZT_OFFLOAD_MODEL_KEEP_GRAPH) { /* each chunk's forward and backward in turn */
    phase(so, ZT_TRAIN_PHASE_BACKWARD);
    zt_status s = zt_offload_model_train_step(om->om, o, om->x, om->y, so->lr, so->grad_clip, &r.loss, &r.grad_norm);
    if (s && !isfinite(r.loss)) r.bad_loss = true;
    else if (s && so->grad_clip >= 0 && !isfinite(r.grad_norm)) r.bad_grad = true;
    *out = r;
    return s;
  }
  zt_tensor *loss = NULL;
  ZT_TRY(zt_offload_model_forward(om->om, om->x, om->y, &loss));
  r.loss = so->poison_loss ? NAN : zt_offload_model_last_loss(om->om);
  zt_status s = dp && dp->mean ? dp->mean(dp->ctx, &r.loss) : ZT_OK; /* the replicas' mean: every rank decides on it */
  if (!s && !isfinite(r.loss)) {
    r.bad_loss = true;
    s = ZT_ERR(ZT_STATUS_STATE, "loss is %g at step %lld: the step stopped before its update", r.loss,
               (long long)so->step);
  }
  if (!s && so->stop_request) { /* a safe point: forward leaves the parameters as the last step's end left them */
    double v = *so->stop_request ? 1 : 0;
    s = dp && dp->mean ? dp->mean(dp->ctx, &v) : ZT_OK; /* any rank's request stops every rank here */
    r.interrupted = !s && v > 0;
  }
  if (!s && !r.interrupted) {
    phase(so, ZT_TRAIN_PHASE_BACKWARD);
    s = zt_backward(1, &loss, NULL, false);
  }
  zt_tensor_free(loss);
  if (r.interrupted) { /* the step is dropped: its boundary activations go with the next forward */
    *out = r;
    return ZT_OK;
  }
  if (!s) {
    phase(so, ZT_TRAIN_PHASE_OPTIMIZER);
    s = zt_offload_model_step(om->om, o, so->lr, so->grad_clip, &r.grad_norm);
    if (s && so->grad_clip >= 0 && !isfinite(r.grad_norm)) r.bad_grad = true;
  }
  *out = r;
  return s;
}

zt_status zt__train_om_loss(zt__train_om *om, zt_tensor *x, zt_tensor *y, double *loss) {
  bool prev = zt_set_grad_enabled(false);
  zt_tensor *l = NULL;
  zt_status s = zt_offload_model_forward(om->om, x, y, &l);
  zt_set_grad_enabled(prev);
  if (!s) *loss = zt_offload_model_last_loss(om->om);
  zt_tensor_free(l);
  return s;
}

zt_status zt__train_om_settle(zt__train_om *om) {
  /* the slices in RAM stay: the writer reads resident tensors where they are */
  return om->om ? zt_offload_model_flush(om->om) : ZT_OK;
}

void zt__train_om_io_step(zt__train_om *om, zt_train_step_info *info) {
  if (!om->store) return;
  zt_store_io_stats now;
  zt_store_io_stats_get(om->store, &now);
  info->io_read_bytes = now.read_bytes - om->io_last.read_bytes;
  info->io_write_bytes = now.write_bytes - om->io_last.write_bytes;
  info->io_read_ms = (now.read_seconds - om->io_last.read_seconds) * 1e3;
  info->io_write_ms = (now.write_seconds - om->io_last.write_seconds) * 1e3;
  om->io_last = now;
}

void zt__train_om_io_skip(zt__train_om *om) {
  zt_train_step_info unused = {0};
  zt__train_om_io_step(om, &unused);
}

void zt__train_om_result(const zt__train_om *om, zt_train_result *res) {
  if (!om->om) return;
  zt_offload_model_stats st;
  zt_offload_model_stats_get(om->om, &st);
  zt_store_stats ss;
  zt_store_stats_get(om->store, &ss);
  res->model_slices = st.slices;
  res->model_resident = st.resident;
  res->model_slice_loads = st.loads;
  res->model_slice_prefetched = st.prefetched;
  res->model_load_wait_s = st.load_wait_s, res->model_update_s = st.update_s, res->model_evict_s = st.evict_s;
  res->model_update_end_s = st.update_end_s, res->model_update_read_wait_s = st.update_read_wait_s;
  res->model_update_adamw_s = st.update_adamw_s;
  res->model_store_peak_bytes = ss.peak_bytes_held;
  zt_mem_stats_get(ZT_CPU, &res->model_ram);
  res->model_store_device = zt_store_device(om->store);
  zt_mem_stats_get(res->model_store_device, &res->model_store);
}

void zt__train_om_free(zt__train_om *om) {
  zt_offload_model_free(om->om); /* every parameter back in RAM (but with offload_states), the store emptied */
  zt_tensor_free(om->x);
  zt_tensor_free(om->y);
  om->om = NULL;
  om->x = om->y = NULL;
}

void zt__train_om_close(zt__train_om *om) {
  zt__train_om_free(om);
  zt_store_free(om->store);
  *om = (zt__train_om){0};
}
