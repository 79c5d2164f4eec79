/* The OffloadModel training mode (train/mode.h): a language model as zt_offload_model's unit
 * sequence (unit 0 the embeddings, units 1..L the blocks, unit L + 1 the final norm and the
 * fused loss, which uses a tied embedding again; a span of units runs as the model's
 * forward_stage), its parameters and grads in the run's tier (disk, bf16 or host) a few
 * slices at a time, and with memory.offload_states its optimizer state there too. Each step
 * gathers its data.microbatches microbatches into one batch that runs as that many chunks
 * (with DDP, each rank its rows, the grads averaged slice by slice); evaluation goes through it
 * too; a save streams every parameter from the tier. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "train/mode.h"

static int n_layer(const zt_model *m) { return zt_lm_config_dims(zt_model_config(m)).n_layer; }

static bool lm_uses(void *ctx, int unit, int param) {
  const zt_model *m = ctx;
  int n = zt_model_params(m, NULL), L = n_layer(m);
  if (param < 0 || param >= n) return false;
  int part = m->param_part(m->ctx, param);
  if (unit == 0) return part == ZT_PART_INPUT || part == ZT_PART_BOTH;
  if (unit == L + 1) return part == ZT_PART_OUTPUT || part == ZT_PART_BOTH;
  return part == unit - 1;
}

static zt_status lm_run(void *ctx, int first, int count, zt_tensor *targets, zt_tensor *in, zt_tensor **out) {
  const zt_model *m = ctx;
  int L = n_layer(m), last = first + count;
  bool head = last == L + 2;
  int b0 = first > 0 ? first - 1 : 0, b1 = last - 1 < L ? last - 1 : L;
  if (head && !targets) return ZT_ERR(ZT_STATUS_INVALID_ARG, "the model's last unit (the loss) needs targets (B, T)");
  return m->forward_stage(m->ctx, first == 0, b0, b1 > b0 ? b1 - b0 : 0, head ? targets : NULL, in, out);
}

zt_status zt_lm_offload_units(const zt_model *m, zt_offload_units *out) {
  if (!m || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_lm_offload_units: model and out are required");
  if (!zt_model_config(m) || !m->forward_stage || !m->param_part)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_lm_offload_units: the model is not a language model with stages "
                  "(zt_model.config, forward_stage and param_part)");
  zt_param *ps = NULL;
  int n = zt_model_params(m, &ps);
  *out = (zt_offload_units){n_layer(m) + 2, n, ps, lm_uses, lm_run, (void *)m};
  return ZT_OK;
}

/* ------------------------------------------------ the mode */
typedef struct om_mode {
  zt_offload_model *om;   /* NULL until opened (link with offload_states, else ready) */
  zt_tensor *x, *y;       /* a step's batch: the microbatches one after another */
  int64_t M;
  zt_offload_model_mode mode;
} om_mode;

static om_mode *ctx(zt__mode *m) { return m->ctx; }

bool zt__train_om_wanted(const zt_train_config *c) { return c->memory.offload_model != 0 && !zt__train_fsdp_stores(c); }

/* Frees the offload model (every parameter back in RAM, unless offload_states) and the batch;
 * the tier stays (the run's). */
static void om_free(om_mode *o) {
  zt_offload_model_free(o->om); /* every parameter back in RAM (but with offload_states), the store emptied */
  zt_tensor_free(o->x);
  zt_tensor_free(o->y);
  o->om = NULL;
  o->x = o->y = NULL;
}

/* The tier (unless made) and the offload model over the run's model for this rank's rows, the
 * parameters evicted: once their values are final for step 1 (after a resume's load), or, with
 * memory.offload_states (the model built into the tier, restore_on_free off, the optimizer's
 * state in the tier), before the resume's load. */
static zt_status om_open(zt__mode *m) {
  zt__run *r = m->run;
  const zt_train_config *c = r->c;
  om_mode *o = ctx(m);
  int L = zt_lm_config_dims(&r->g).n_layer;
  int64_t rows = c->data.batch / r->data_world;
  if (c->memory.offload_slices > L + 2)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_config.memory.offload_slices %d: the model has %d units to slice "
                                         "(embedding, %d blocks, head); give at most %d",
                  c->memory.offload_slices, L + 2, L, L + 2);
  zt_status s = zt__run_tier(r);
  zt_offload_units u;
  if (!s) s = zt_lm_offload_units(&r->model, &u);
  zt_offload_model_options mo = zt_offload_model_options_default();
  if (c->memory.offload_slices > 0) mo.slices = c->memory.offload_slices; /* 0: the options' default */
  if (c->memory.offload_resident > 0) mo.resident = c->memory.offload_resident;
  mo.microbatches = (int)c->data.microbatches;
  mo.mode = c->memory.offload_mode;
  mo.comm = r->world > 1 ? r->comm : NULL;
  mo.offload_optim_state = c->memory.offload_states;
  mo.restore_on_free = !c->memory.offload_states;
  o->M = c->data.microbatches;
  o->mode = mo.mode;
  if (!s) s = zt_offload_model_new(&u, r->tier, &mo, &o->om);
  int64_t shape[2] = {rows, c->data.seq};
  if (!s) s = zt_tensor_empty_tagged(2, shape, ZT_DTYPE_I32, ZT_CPU, ZT_MEM_TAG_TEMP, &o->x);
  if (!s) s = zt_tensor_empty_tagged(2, shape, ZT_DTYPE_I32, ZT_CPU, ZT_MEM_TAG_TEMP, &o->y);
  if (s) om_free(o);
  return s;
}

static const char *om_name(zt__mode *m) { return m->run->world > 1 ? "offload+ddp" : "offload"; }
static zt_status om_check(zt__mode *m) { return zt__mode_check_no_pipeline(m->run->c); }
/* with memory.offload_states built straight into the tier: the whole model is never in RAM */
static zt_status om_build(zt__mode *m) { return zt__run_build(m->run, m->run->c->memory.offload_states); }

/* The optimizer over every parameter (OffloadModel averages the grads itself, DDP); with
 * offload_states the offload model now and the optimizer's state made in the tier, so that a
 * resume streams into it. */
static zt_status om_link(zt__mode *m) {
  zt__run *r = m->run;
  r->n_params = zt_model_params(&r->model, &r->params);
  ZT_TRY(zt__run_optim(r));
  if (!r->c->memory.offload_states) return ZT_OK;
  ZT_TRY(om_open(m));
  return r->c->checkpoint.resume[0] ? zt_offload_model_evict_optim(ctx(m)->om, r->opt) : ZT_OK;
}

/* from here on the parameters live in the tier, a few slices in RAM at a time */
static zt_status om_ready(zt__mode *m) { return ctx(m)->om ? ZT_OK : om_open(m); }
static zt_offload_model *om_offload_model(zt__mode *m) { return ctx(m)->om; }

/* its parameters (and with offload_states its optimizer state) stream from the tier into the
 * files, never all in RAM; the waiting updates first (and no restore in flight), so the
 * optimizer's state and count are the step's; the slices in RAM stay, written from there */
static zt_status om_save(zt__mode *m, const zt_train_state *st) {
  if (ctx(m)->om) ZT_TRY(zt_offload_model_flush(ctx(m)->om));
  return zt__run_save_replicated(m->run, st);
}
static zt_status om_load(zt__mode *m, zt_train_state *st) {
  return zt_snapshot_load(m->run->c->checkpoint.resume, &m->run->model, m->run->opt, st);
}

static void phase(const zt_train_step_options *so, zt_train_phase p) {
  if (so->on_phase) so->on_phase(p, so->step, so->phase_user_data);
}

/* Microbatch k's rows of the step's batch get (x, y). */
static zt_status put_rows(om_mode *om, int64_t k, zt_tensor *x, zt_tensor *y) {
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

/* The step's microbatches from the run's batches into one batch. */
static zt_status gather_batch(zt__mode *m) {
  om_mode *om = ctx(m);
  for (int64_t k = 0; k < om->M; k++) {
    zt_tensor *x = NULL, *y = NULL;
    ZT_TRY(m->run->next(m->run->next_data, &x, &y));
    if (x->shape[0] * om->M != om->x->shape[0])
      return ZT_ERR(ZT_STATUS_SHAPE, "offload model step: a microbatch of %lld rows, %lld expected",
                    (long long)x->shape[0], (long long)(om->x->shape[0] / om->M));
    ZT_TRY(put_rows(om, k, x, y));
  }
  return ZT_OK;
}

/* keep-graph: each chunk's forward and backward in turn, then the update */
static zt_status step_keep_graph(zt__mode *m, const zt_train_step_options *so, zt_train_step_result *r) {
  om_mode *om = ctx(m);
  phase(so, ZT_TRAIN_PHASE_BACKWARD);
  zt_status s = zt_offload_model_train_step(om->om, m->run->opt, om->x, om->y, so->lr, so->grad_clip, &r->loss,
                                            &r->grad_norm);
  if (s && !isfinite(r->loss)) r->bad_loss = true;
  else if (s && so->grad_clip >= 0 && !isfinite(r->grad_norm)) r->bad_grad = true;
  return s;
}

/* One optimizer step over so->microbatches microbatches (as zt_train_step's, bitwise with a
 * lossless tier); the loss is the replicas' mean. With so->stop_request, the recomputing mode
 * stops after its forward when any rank asks (out->interrupted; nothing updated, no grads made:
 * the forward only applied the last step's waiting updates); the graph-keeping mode runs to its
 * end. */
static zt_status om_step(zt__mode *m, const zt_train_step_options *so, zt_train_step_result *out) {
  om_mode *om = ctx(m);
  zt__run *run = m->run;
  zt_train_step_result r = {0};
  r.grad_norm = NAN;
  *out = r;
  phase(so, ZT_TRAIN_PHASE_FORWARD);
  ZT_TRY(gather_batch(m));
  if (om->mode == ZT_OFFLOAD_MODEL_KEEP_GRAPH) {
    zt_status s = step_keep_graph(m, so, &r);
    *out = r;
    return s;
  }
  zt_tensor *loss = NULL;
  ZT_TRY(zt_offload_model_forward(om->om, om->x, om->y, &loss));
  r.loss = so->poison_loss ? NAN : zt_offload_model_last_loss(om->om);
  zt_status s = zt__run_mean(run, &r.loss); /* the replicas' mean: every rank decides on it */
  if (!s && !isfinite(r.loss)) {
    r.bad_loss = true;
    s = ZT_ERR(ZT_STATUS_STATE, "loss is %g at step %lld: the step stopped before its update", r.loss,
               (long long)so->step);
  }
  if (!s && so->stop_request) { /* a safe point: forward leaves the parameters as the last step's end left them */
    double v = *so->stop_request ? 1 : 0;
    s = zt__run_mean(run, &v); /* any rank's request stops every rank here */
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
    s = zt_offload_model_step(om->om, run->opt, so->lr, so->grad_clip, &r.grad_norm);
    if (s && so->grad_clip >= 0 && !isfinite(r.grad_norm)) r.bad_grad = true;
  }
  *out = r;
  return s;
}

static zt_status om_loss(zt__mode *m, zt_tensor *x, zt_tensor *y, double *loss) {
  bool prev = zt_set_grad_enabled(false);
  zt_tensor *l = NULL;
  zt_status s = zt_offload_model_forward(ctx(m)->om, x, y, &l);
  zt_set_grad_enabled(prev);
  if (!s) *loss = zt_offload_model_last_loss(ctx(m)->om);
  zt_tensor_free(l);
  return s;
}

static zt_status om_mean(zt__mode *m, double *v) { return zt__run_mean(m->run, v); }

/* The run's figures (slices, loads, the tier's peak), then every parameter back in RAM (unless
 * offload_states). */
static void om_end(zt__mode *m, zt_train_result *res) {
  om_mode *om = ctx(m);
  if (!om || !om->om) return;
  zt_offload_model_stats st;
  zt_offload_model_stats_get(om->om, &st);
  zt_store_stats ss;
  zt_store_stats_get(m->run->tier, &ss);
  res->model_slices = st.slices;
  res->model_resident = st.resident;
  res->model_slice_loads = st.loads;
  res->model_slice_prefetched = st.prefetched;
  res->model_load_wait_s = st.load_wait_s, res->model_update_s = st.update_s, res->model_evict_s = st.evict_s;
  res->model_update_end_s = st.update_end_s, res->model_update_read_wait_s = st.update_read_wait_s;
  res->model_update_adamw_s = st.update_adamw_s;
  res->model_store_peak_bytes = ss.peak_bytes_held;
  zt_mem_stats_get(ZT_CPU, &res->model_ram);
  res->model_store_device = zt_store_device(m->run->tier);
  zt_mem_stats_get(res->model_store_device, &res->model_store);
  om_free(om);
}

static void om_close(zt__mode *m) {
  if (!m->ctx) return;
  om_free(ctx(m));
  free(m->ctx);
  m->ctx = NULL;
}

static const zt__mode_i k_offload = {
    .unit = "ranks",
    .own_stream = true,
    .name = om_name,
    .check = om_check,
    .build = om_build,
    .link = om_link,
    .save = om_save,
    .load = om_load,
    .ready = om_ready,
    .offload_model = om_offload_model,
    .step = om_step,
    .loss = om_loss,
    .mean = om_mean,
    .end = om_end,
    .close = om_close,
};

zt_status zt__mode_offload(zt__run *run, zt__mode *out) {
  om_mode *o = calloc(1, sizeof *o);
  if (!o) return ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  *out = (zt__mode){&k_offload, o, run};
  return ZT_OK;
}
