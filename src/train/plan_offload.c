/* The planner's prediction of OffloadModel (plan_internal.h), every state in the tier or the
 * optimizer's state in RAM: the --mem-limit planner's byte counts (zt_offload_plan_predict,
 * offload_plan.c) for the slices, the resident count and how backward gets its activations, fed
 * from the calibration; its compute timed by the shared cost model and overlapped with the tier's
 * reads and writes. */
#include <math.h>
#include <string.h>

#include "core/backend.h"
#include "core/status_internal.h"
#include "train/offload_plan.h"
#include "train/plan_internal.h"

void zt__offload_plan_input(const zt_plan_space *sp, const zt_plan_calibration *cal, int64_t limit, int64_t cache_limit,
                            int64_t microbatches, zt_offload_tier tier, bool trial, zt_offload_plan_input *o) {
  memset(o, 0, sizeof *o);
  o->model = sp->model;
  o->rows = sp->batch / (sp->world > 0 ? sp->world : 1), o->seq = sp->seq, o->microbatches = microbatches;
  /* the process's own RAM besides the accounting: the calibration's base and the heap's small blocks */
  o->fixed_bytes = (int64_t)cal->value[ZT_PLAN_FIG_BASE] + ZT_OFFLOAD_PLAN_FIXED;
  /* a disk store's bounce buffers: host allocations of 64 KiB and more are page-aligned, so only an
   * item's last partial page is bounced (a page per I/O thread and direction) */
  o->io_bytes = tier == ZT_OFFLOAD_DISK ? 2 * ZT_STORE_DISK_QUEUE_DEPTH * 4096 : 0;
  /* the allocator's cache of freed blocks is resident but not accounted: bounded, and counted; a
   * 64th of the limit at least, what the limit leaves up to the bound (ZT_ALLOC_CACHE_MB's) or
   * ZT__PLAN_CACHE_MAX */
  o->cache_max_bytes = cache_limit < ZT__PLAN_CACHE_MAX ? cache_limit : ZT__PLAN_CACHE_MAX;
  o->cache_bytes = limit / 64 < o->cache_max_bytes ? limit / 64 : o->cache_max_bytes;
  o->write_cap_bytes = (int64_t)ZT_STORE_WRITE_CAP_DEFAULT; /* at most; a plan lowers it to its smallest slice */
  /* the run's OffloadModel updates in chunks (its options' default; every tier's store has range ops) */
  o->update_chunk_bytes = (int64_t)zt_offload_model_options_default().update_chunk_bytes;
  o->gflops = cal->value[ZT_PLAN_FIG_GEMM];
  /* the disk's measured rates; a memory tier's copies are not timed (0: well below the compute at any
   * size) unless given */
  if (tier == ZT_OFFLOAD_DISK || cal->source[ZT_PLAN_FIG_READ] == ZT_PLAN_SOURCE_GIVEN) o->read_bps = cal->value[ZT_PLAN_FIG_READ];
  if (tier == ZT_OFFLOAD_DISK || cal->source[ZT_PLAN_FIG_WRITE] == ZT_PLAN_SOURCE_GIVEN) o->write_bps = cal->value[ZT_PLAN_FIG_WRITE];
  o->can_offload_activations = tier == ZT_OFFLOAD_DISK || tier == ZT_OFFLOAD_HOST;
  o->trial = trial;
}

zt_status zt__plan_predict_offload(const zt__plan_in *in, const zt_plan_config *c, zt_plan_prediction *out) {
  memset(out, 0, sizeof *out);
  if (c->offload_model != ZT_OFFLOAD_DISK)
    return ZT_ERR(ZT_STATUS_UNSUPPORTED, "the planner predicts OffloadModel on the disk tier only: a memory tier (%s) "
                                         "keeps its store in this process's RAM beside the slices, which the slices' "
                                         "counts leave out (on a CPU it only exercises the machinery)",
                  zt_offload_tier_name(c->offload_model));
  if (c->recompute != ZT_RECOMPUTE_NONE || c->recompute_budget > 0 ||
      (c->recompute_plan[0] && !(c->mode == ZT_OFFLOAD_MODEL_KEEP_GRAPH && c->offload_activations)))
    return ZT_ERR(ZT_STATUS_UNSUPPORTED, "OffloadModel's activations are its mode's (and with activation offload, the "
                                         "slices its search recomputes), not a recompute option's");
  zt_offload_plan_activations act = c->mode != ZT_OFFLOAD_MODEL_KEEP_GRAPH ? ZT_OFFLOAD_PLAN_RECOMPUTE
                                    : c->offload_activations              ? ZT_OFFLOAD_PLAN_OFFLOAD
                                                                          : ZT_OFFLOAD_PLAN_KEEP;
  zt_offload_plan_input o;
  zt__offload_plan_input(in->sp, in->cal, in->limit, zt_mem_cache_limit(), c->microbatches, c->offload_model, false, &o);
  o.optim_in_ram = !c->offload_states;
  zt_offload_plan p;
  ZT_TRY(zt__offload_plan_at(&o, c->slices, c->resident, act, c->recompute_plan, in->limit, &p));
  /* the states as one figure: the slices' parameters, grads and moments are PARAM, GRAD and OPTIM
   * in turn, and the prediction counts them at their sum's peak; the moments kept in RAM are OPTIM */
  int64_t moments = o.optim_in_ram ? 8 * in->d.params : 0;
  out->tag[ZT_MEM_TAG_PARAM] = p.states_bytes - moments;
  out->tag[ZT_MEM_TAG_OPTIM] = moments;
  out->tag[ZT_MEM_TAG_ACTIVATION] = p.activation_bytes;
  out->accounted = p.states_bytes + p.activation_bytes;
  /* the cache's bound is what the limit leaves; what fills it is what a step frees and takes again,
   * the slices' states passing through RAM: it holds no more than they are */
  out->cache = p.cache_bytes < p.states_bytes ? p.cache_bytes : p.states_bytes;
  /* with the optimizer's state in RAM no plan bounds the cache: it holds each kind of block at its
   * own peak (offload_plan.c's held_bytes) */
  if (o.optim_in_ram) out->cache = p.held_bytes - p.states_bytes - p.activation_bytes;
  /* the disk's buffers; writes behind the disk add to the peak only where it falls behind (the
   * run's allocator bound is the plan's peak: gpt2-124m 4 slices 2 resident keep-graph measured
   * its peak, +0.2%; with the 82 MiB counted, +8.0%) */
  out->io = p.io_bytes;
  out->inflight = p.inflight_bytes;
  double comp = c->microbatches * zt__plan_compute_s(in, in->sp->batch / c->microbatches, 0, in->d.n_layer, true, true,
                                                     act == ZT_OFFLOAD_PLAN_RECOMPUTE ? ZT_RECOMPUTE_FULL
                                                                                      : ZT_RECOMPUTE_NONE) +
                zt__plan_optim_s(in, in->d.params);
  out->compute_s = comp;
  /* what the disk adds past the compute it overlaps (offload_plan.c's rule: none without a slice
   * prefetched) */
  out->step_s = zt__offload_plan_step_s(comp, p.io_s, c->resident < c->slices ? c->resident : c->slices, act);
  out->io_s = out->step_s - comp;
  /* parameters, grads and (in the tier) moments; what a step moves as offload_plan.c times it */
  out->disk_held = c->offload_model == ZT_OFFLOAD_DISK ? (o.optim_in_ram ? 8 : 16) * in->d.params : 0;
  out->disk_read = p.read_bytes, out->disk_written = p.written_bytes;
  zt__plan_finish(in, out);
  /* the --mem-limit planner's fixed bytes are the base and the heap's small blocks */
  out->base = p.fixed_bytes;
  out->rss = out->accounted + out->cache + out->io + out->base;
  return ZT_OK;
}
