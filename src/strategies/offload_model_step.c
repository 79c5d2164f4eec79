/* OffloadModel's update (zt/offload_model.h): the global grad norm from the parameters' sums
 * of squares in the optimizer's order, clipping and the update slice by slice, now or (lazy
 * updates) at each slice's next load, a parameter whose moments pass the update chunk a chunk
 * of elements at a time; the training step of both modes.
 * Invariants: an update waits (pending) only for a slice not in RAM; the optimizer's step
 * count advances once, when the last waiting parameter is updated; the moments in RAM for
 * the parameters not yet updated (those read ahead included) are at most those of the slice
 * being updated (what one slice's update holds, a chunked parameter counting one chunk); a
 * chunked parameter's moments never come into RAM whole. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/status_internal.h"
#include "offload_model_internal.h"
#include "zt/autograd.h"
#include "zt/nn.h"

/* One pending parameter of an update run: its index, its moments' bytes, and the most moment
 * bytes the run may hold while updating it (the moments of its slice's pending parameters). */
typedef struct upd {
  int i;
  size_t bytes, budget;
} upd;

/* ---------------------------------------------------------------- chunked updates */
/* The optimizer whose state lives in the store now (the waiting update's, else the last one's). */
static zt_optim *state_optim(const zt_offload_model *om) { return om->pend_opt ? om->pend_opt : om->state_opt; }

/* Parameter i's state tensors per parameter under opt (0: plain SGD, none). */
static int per_param(zt_optim *opt, int i) {
  int n = 0;
  zt_tensor *const *ts;
  zt_status e = zt_optim_param_state(opt, i, false, &n, &ts);
  ZT_ASSERT(e == ZT_OK); /* i is in range: the optimizer updates u's list (checked by the step) */
  return n;
}

bool zt__om_update_chunked(zt_offload_model *om, int i) {
  zt_optim *opt = state_optim(om);
  if (!om->o.offload_optim_state || !om->o.update_chunk_bytes || !opt || !zt_store_has_ranges(om->store)) return false;
  const zt_tensor *t = om->u.params[i].tensor;
  const zt__backend *b = zt__backend_get(zt_tensor_device(t).type);
  if (!b || !b->host_accessible) return false; /* the chunks' moments are read into host memory */
  int n = per_param(opt, i);
  return n > 0 && (size_t)n * zt_tensor_nbytes(t) > om->o.update_chunk_bytes;
}

/* Elements per chunk of a parameter with n state tensors: update_chunk_bytes of moments, cut
 * down to a multiple of 1024 elements (4 KiB of f32: page-aligned ranges in a disk store). */
static int64_t chunk_elems(const zt_offload_model *om, int n) {
  int64_t c = (int64_t)(om->o.update_chunk_bytes / ((size_t)n * sizeof(float))) / 1024 * 1024;
  return c > 1024 ? c : 1024;
}

zt_status zt__om_chunk_states(zt_offload_model *om, zt_optim *opt, int i) {
  om->state_opt = opt;
  for (int j = 0, n = per_param(opt, i); j < n; j++) {
    zt_tensor *t;
    ZT_TRY(zt_optim_param_state_one(opt, i, j, &t));
    if (!t->storage->name[0]) zt_storage_set_name(t->storage, zt_optim_state_name(opt, i, j));
    ZT_TRY(zt_storage_wait(t->storage)); /* a restore of an earlier path, if one is in flight */
    if (!zt_storage_is_evicted(t->storage)) ZT_TRY(zt_storage_evict(t->storage, om->store, t->dtype));
  }
  return ZT_OK;
}

/* Moment bytes a chunked update of parameter i holds: one chunk's (or the whole parameter's,
 * when smaller). */
static size_t chunk_bytes_held(zt_offload_model *om, int i) {
  int n = per_param(state_optim(om), i);
  int64_t numel = zt_tensor_numel(om->u.params[i].tensor), c = chunk_elems(om, n);
  return (size_t)n * sizeof(float) * (size_t)(c < numel ? c : numel);
}

/* Parameter i's update a chunk at a time: the grad scaled, then per chunk its moments read
 * from the store (ranges), AdamW on the chunk's elements, the moments written back in place.
 * RAM holds the parameter, its grad and one chunk's moments (OPTIM). A failure stops there:
 * the chunks before it are updated (the parameter partly), the failing chunk's moments may be
 * partly written. */
static zt_status update_chunked(zt_offload_model *om, int i) {
  zt_optim *opt = om->pend_opt;
  const zt_param *pr = &om->u.params[i];
  ZT_TRY(zt__om_chunk_states(om, opt, i));
  zt_tensor *const *ts;
  int ns = zt__om_optim_states(om, i, &ts);
  ZT_ASSERT(ns > 0 && ns <= 2);
  if (om->pend_coef > 0) ZT_TRY(zt_grads_scale(1, pr, om->pend_coef));
  int64_t numel = zt_tensor_numel(pr->tensor), c = chunk_elems(om, ns);
  if (c > numel) c = numel;
  zt_tensor *buf[2] = {NULL, NULL}, *part[2] = {NULL, NULL};
  float *data[2] = {NULL, NULL};
  zt_status e = ZT_OK;
  for (int q = 0; q < ns && !e; q++) {
    e = zt_tensor_empty_tagged(1, &c, ZT_DTYPE_F32, ZT_CPU, ZT_MEM_TAG_OPTIM, &buf[q]);
    if (!e) e = zt_tensor_data(buf[q], (void **)&data[q]);
  }
  for (int64_t off = 0; off < numel && !e; off += c) {
    int64_t len = numel - off < c ? numel - off : c;
    size_t boff = (size_t)off * sizeof(float), blen = (size_t)len * sizeof(float);
    zt_tensor *const *use = buf;
    if (len < c) { /* the last chunk: the buffers' first len elements */
      for (int q = 0; q < ns && !e; q++) e = zt_narrow(buf[q], 0, 0, len, &part[q]);
      use = part;
    }
    double t0 = zt_clock_now();
    for (int q = 0; q < ns && !e; q++) e = zt_storage_read_evicted(ts[q]->storage, boff, blen, data[q]);
    double t1 = zt_clock_now();
    if (!e) e = zt_optim_step_param_range(opt, om->pend_lr, i, off, len, ns, use);
    double t2 = zt_clock_now();
    for (int q = 0; q < ns && !e; q++) e = zt_storage_write_evicted_in_place(ts[q]->storage, boff, blen, data[q]);
    om->st.update_read_wait_s += t1 - t0, om->st.update_adamw_s += t2 - t1;
    om->st.update_write_s += zt_clock_now() - t2;
    om->st.update_chunks += !e;
  }
  for (int q = 0; q < 2; q++) zt_tensor_free(part[q]), zt_tensor_free(buf[q]);
  if (e) return zt__error_prefix(e, "offload model: the chunked update of parameter '%s'", pr->name);
  om->st.chunked_params++;
  zt_tensor_free(pr->tensor->grad);
  pr->tensor->grad = NULL;
  om->pending[i] = false;
  om->n_pending--;
  return ZT_OK;
}

/* ---------------------------------------------------------------- whole updates */
/* Parameter i's optimizer state in the store: its bytes; with start, its restores begun (the
 * store's helper reads it while the caller goes on; a no-op for one in RAM or on its way). A
 * chunked parameter: the bytes its update holds, nothing begun (it reads its chunks itself). */
static size_t moments(zt_offload_model *om, int i, bool start, zt_status *st) {
  if (zt__om_update_chunked(om, i)) return chunk_bytes_held(om, i);
  zt_tensor *const *ts;
  int n = zt__om_optim_states(om, i, &ts);
  size_t b = 0;
  for (int q = 0; q < n; q++) {
    b += ts[q]->storage->nbytes;
    if (start && !*st) *st = zt_storage_restore_async(ts[q]->storage);
  }
  return b;
}

/* Parameter i's update: its moments in RAM (waited for, or read now), its grad scaled, AdamW,
 * its grad freed, its moments back to the store at once (written behind). */
static zt_status update_one(zt_offload_model *om, int i) {
  if (zt__om_update_chunked(om, i)) return update_chunked(om, i);
  zt_tensor *const *ts;
  int ns = zt__om_optim_states(om, i, &ts);
  double t0 = zt_clock_now();
  for (int q = 0; q < ns; q++) ZT_TRY(zt_storage_restore(ts[q]->storage)); /* waits for one in flight */
  double t1 = zt_clock_now();
  if (om->pend_coef > 0) ZT_TRY(zt_grads_scale(1, &om->u.params[i], om->pend_coef));
  ZT_TRY(zt_optim_step_params(om->pend_opt, om->pend_lr, 1, &i));
  om->st.update_read_wait_s += t1 - t0, om->st.update_adamw_s += zt_clock_now() - t1;
  zt_tensor *t = om->u.params[i].tensor;
  zt_tensor_free(t->grad);
  t->grad = NULL;
  om->pending[i] = false;
  om->n_pending--;
  return zt__om_optim_evict(om, i); /* back to the store at once: RAM holds it for the update only */
}

/* The updates of u[0..n), one parameter after another (AdamW is per parameter: updating them
 * one by one is bitwise the same as together). Before each, the moments of the parameters
 * after it are read ahead while they fit, with those of it and the others read ahead not yet
 * updated, within its budget: so the reads of the next parameters, and of the next slice's
 * once this slice's last ones are in, go on while this one's AdamW runs, and RAM never holds
 * more moments than one whole slice's update did when they were read all at once. The last
 * waiting parameter counts the optimizer's step. A failure leaves the ones before it updated
 * (not pending); restores started for the others finish with their slices' evictions. */
static zt_status update_run(zt_offload_model *om, int n, const upd *u, bool count) {
  int ahead = 0;    /* restores started for u[0..ahead) */
  size_t held = 0;  /* moment bytes of u[j..ahead): in RAM or on their way, not yet updated */
  for (int j = 0; j < n; j++) {
    while (ahead < n && (ahead == j || held + u[ahead].bytes <= u[j].budget)) {
      zt_status st = ZT_OK;
      moments(om, u[ahead].i, true, &st);
      if (st) return st;
      om->st.moments_read_ahead += count && ahead > j && u[ahead].bytes > 0 && !zt__om_update_chunked(om, u[ahead].i);
      held += u[ahead].bytes;
      ahead++;
    }
    ZT_TRY(update_one(om, u[j].i));
    held -= u[j].bytes;
  }
  if (om->n_pending == 0) {
    zt_optim_step_finish(om->pend_opt);
    om->pend_opt = NULL;
  }
  return ZT_OK;
}

/* Append slice s's pending parameters (not yet in u) to u[*n..), each with the slice's budget. */
static void add_slice(zt_offload_model *om, int s, upd *u, int *n, bool *in_run) {
  int first = *n;
  size_t budget = 0;
  zt_status unused = ZT_OK;
  for (int j = om->sp_off[s]; j < om->sp_off[s + 1]; j++) {
    int i = om->sp[j];
    if (!om->pending[i] || in_run[i]) continue;
    in_run[i] = true;
    u[*n] = (upd){i, moments(om, i, false, &unused), 0};
    budget += u[(*n)++].bytes;
  }
  for (int k = first; k < *n; k++) u[k].budget = budget;
}

/* The update of the parameters of slice only (in RAM), or (only < 0) of every slice in RAM, in
 * slice order, as one run (the moments of the next slice read while this one's AdamW runs);
 * step_end: the step's end's run (its moments read ahead are counted: none was on its way
 * before; its time is the step end's too). */
static zt_status apply_slices(zt_offload_model *om, int only, bool step_end) {
  double t0 = zt_clock_now();
  int P = om->u.n_params, n = 0;
  upd *u = malloc(sizeof *u * (size_t)(P ? P : 1));
  bool *in_run = calloc((size_t)(P ? P : 1), sizeof *in_run);
  zt_status e = ZT_OK;
  if (!u || !in_run) e = ZT_ERR(ZT_STATUS_OOM, "offload model: out of host memory for an update");
  for (int s = 0; !e && s < om->S; s++)
    if ((only < 0 || s == only) && om->state[s] == SLICE_IN) add_slice(om, s, u, &n, in_run);
  if (!e && n) e = update_run(om, n, u, step_end);
  free(u);
  free(in_run);
  double dt = zt_clock_now() - t0;
  om->st.update_s += dt;
  if (step_end) om->st.update_end_s += dt;
  return e;
}

zt_status zt__om_apply_pending(zt_offload_model *om, int s) { return apply_slices(om, s, false); }

zt_status zt_offload_model_step(zt_offload_model *om, zt_optim *opt, double lr, double grad_clip, double *norm) {
  const char *fn = "zt_offload_model_step";
  if (norm) *norm = NAN;
  if (!om || !opt) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: offload model and optimizer are required", fn);
  if (isnan(grad_clip)) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: grad_clip is NaN (use < 0 for neither)", fn);
  const zt_param *ops = NULL;
  int n = zt_optim_params(opt, &ops);
  if (n != om->u.n_params || ops != om->u.params)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: the optimizer must update the offload model's parameter list (the same "
                                         "array of %d): make it with zt_optim_new over zt_offload_units.params",
                  fn, om->u.n_params);
  if (om->n_pending) ZT_TRY(zt_offload_model_flush(om)); /* a step with no forward since the last one */
  if (om->o.mode == ZT_OFFLOAD_MODEL_KEEP_GRAPH && om->graph_last) {
    /* the first slice has no sync node after its backward: its grads are settled here */
    ZT_TRY(zt__om_slice_ensure(om, 0, -1));
    ZT_TRY(zt__om_settle_owned(om, 0));
    om->graph_last = false;
  }
  double total = NAN, coef = 0;
  if (grad_clip >= 0) {
    double sum = 0; /* in parameter order, as zt_clip_grad_norm */
    for (int i = 0; i < n; i++)
      if (om->ss_set[i]) sum += om->ss[i];
    total = sqrt(sum);
    if (norm) *norm = total;
    if (!isfinite(total))
      return ZT_ERR(ZT_STATUS_STATE, "%s: gradient norm is %g: the step stopped before its update", fn, total);
    if (grad_clip > 0 && total > grad_clip) coef = grad_clip / (total + 1e-6);
  }
  /* The slices in RAM now, now; the others when they are next loaded (lazy), or loaded one
   * after another right here (zt_offload_model_flush). */
  om->pend_opt = opt, om->pend_lr = lr, om->pend_coef = coef;
  if (om->o.offload_optim_state) om->state_opt = opt;
  for (int i = 0; i < n; i++) {
    om->pending[i] = om->u.params[i].tensor->grad != NULL;
    om->n_pending += om->pending[i];
  }
  memset(om->ss_set, 0, sizeof *om->ss_set * (size_t)n);
  if (!om->n_pending) {
    zt_optim_step_finish(opt);
    om->pend_opt = NULL;
    return ZT_OK;
  }
  /* the slices in RAM (backward left the first ones), as one run: the moments of the next slice
   * are read while this one's AdamW runs */
  zt_status e = apply_slices(om, -1, true);
  if (e) return e;
  return om->o.lazy_update ? ZT_OK : zt_offload_model_flush(om);
}

/* The graph-keeping mode's step: chunk after chunk, forward with grad and backward of its loss
 * / M (as zt_train_step's microbatches), then the slices the last backward left settled. */
static zt_status graph_chunks(zt_offload_model *om, zt_tensor *inputs, zt_tensor *targets) {
  int M = om->o.microbatches;
  if (!inputs || inputs->ndim < 1 || inputs->shape[0] % M || inputs->shape[0] == 0)
    return ZT_ERR(ZT_STATUS_SHAPE, "zt_offload_model_train_step: the batch must cut into %d microbatch chunks", M);
  memset(om->ss_set, 0, sizeof *om->ss_set * (size_t)om->u.n_params);
  double sum = 0;
  om->last_loss = NAN;
  for (int k = 0; k < M; k++) {
    zt_tensor *x = NULL, *y = NULL, *l = NULL, *scaled = NULL;
    zt_status e = zt__om_chunk_of(inputs, M, k, &x);
    if (!e) e = zt__om_chunk_of(targets, M, k, &y);
    om->graph_last = k == M - 1;
    if (!e) e = zt__om_forward_graph(om, x, y, &l);
    double lv = e ? NAN : zt_tensor_get(l, 0);
    if (!e && !isfinite(lv))
      e = ZT_ERR(ZT_STATUS_STATE, "zt_offload_model_train_step: chunk %d's loss is %g: the step stopped before its "
                                  "backward",
                 k, lv);
    if (!e && M > 1) e = zt_mul_scalar(l, 1.0 / (double)M, &scaled); /* as zt_train_step */
    om->bwd_mark = zt_clock_now(), om->bwd_update_mark = om->st.update_s; /* the last slice's backward begins */
    if (!e) e = zt_backward(1, scaled ? &scaled : &l, NULL, false);
    if (!e) zt__om_backward_mark(om, 0);
    if (!e) sum += lv;
    zt_tensor_free(scaled);
    zt_tensor_free(l);
    zt_tensor_free(x);
    zt_tensor_free(y);
    if (e) return e;
  }
  om->last_loss = M == 1 ? sum : sum / (double)M;
  return ZT_OK;
}

zt_status zt_offload_model_train_step(zt_offload_model *om, zt_optim *opt, zt_tensor *inputs, zt_tensor *targets,
                                      double lr, double grad_clip, double *loss, double *grad_norm) {
  if (loss) *loss = NAN;
  if (grad_norm) *grad_norm = NAN;
  if (om && om->o.mode == ZT_OFFLOAD_MODEL_KEEP_GRAPH) {
    zt_status e = graph_chunks(om, inputs, targets);
    if (loss) *loss = om->last_loss;
    return e ? e : zt_offload_model_step(om, opt, lr, grad_clip, grad_norm);
  }
  zt_tensor *l = NULL;
  ZT_TRY(zt_offload_model_forward(om, inputs, targets, &l));
  double lv = om->last_loss;
  if (loss) *loss = lv;
  zt_status e = ZT_OK;
  if (!isfinite(lv))
    e = ZT_ERR(ZT_STATUS_STATE, "zt_offload_model_train_step: loss is %g: the step stopped before its backward", lv);
  if (!e) e = zt_backward(1, &l, NULL, false);
  zt_tensor_free(l);
  if (!e) e = zt_offload_model_step(om, opt, lr, grad_clip, grad_norm);
  return e;
}

/* The first slice from s on with an update waiting (-1: none). */
static int next_pending(const zt_offload_model *om, int s) {
  for (; s < om->S; s++)
    for (int j = om->sp_off[s]; j < om->sp_off[s + 1]; j++)
      if (om->pending[om->sp[j]]) return s;
  return -1;
}

zt_status zt_offload_model_flush(zt_offload_model *om) {
  if (!om) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_offload_model_flush: offload model is NULL");
  /* each waiting slice loaded (applying its update), the next one on its way meanwhile */
  for (int s = next_pending(om, 0); s >= 0 && om->n_pending; s = next_pending(om, s + 1))
    ZT_TRY(zt__om_slice_ensure(om, s, next_pending(om, s + 1)));
  return zt__om_wait_loading(om); /* nothing left in flight: every evicted tensor can be read from the store */
}
