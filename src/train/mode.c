/* The training mode's thin wrappers (mode.h): each calls the member, or does what mode.h says
 * for an optional one left NULL. Facts the loop needs (the data share's name, whose random
 * stream a resumed rank continues) are read here, so the loop never asks which mode runs. */
#include <string.h>

#include "core/status_internal.h"
#include "train/mode.h"

const char *zt__mode_unit(const zt__mode *m) { return m->iface->unit; }
const char *zt__mode_name(zt__mode *m) { return m->iface->name(m); }
zt_status zt__mode_check(zt__mode *m) { return m->iface->check(m); }
zt_status zt__mode_open(zt__mode *m) { return m->iface->open ? m->iface->open(m) : ZT_OK; }
zt_status zt__mode_build(zt__mode *m) { return m->iface->build(m); }
zt_status zt__mode_link(zt__mode *m) { return m->iface->link(m); }
zt_status zt__mode_save(zt__mode *m, const zt_train_state *st) { return m->iface->save(m, st); }

zt_status zt__mode_load(zt__mode *m, zt_train_state *st) {
  ZT_TRY(m->iface->load(m, st));
  /* rank 0's stream was saved; a rank r of its own stream draws from seed + r exactly as many
   * values as rank 0 (the same shapes), so its stream continues at rank 0's offset */
  if (m->iface->own_stream) st->rng.seed += (uint64_t)m->run->rank;
  return ZT_OK;
}

zt_status zt__mode_ready(zt__mode *m) { return m->iface->ready ? m->iface->ready(m) : ZT_OK; }
zt_offload_model *zt__mode_offload_model(zt__mode *m) {
  return m->iface->offload_model ? m->iface->offload_model(m) : NULL;
}
zt_status zt__mode_step(zt__mode *m, const zt_train_step_options *so, zt_train_step_result *out) {
  return m->iface->step(m, so, out);
}
zt_status zt__mode_loss(zt__mode *m, zt_tensor *x, zt_tensor *y, double *loss) { return m->iface->loss(m, x, y, loss); }
zt_status zt__mode_mean(zt__mode *m, double *v) { return m->iface->mean(m, v); }
zt_status zt__mode_stats(zt__mode *m, zt_train_step_info *info) {
  return m->iface->stats ? m->iface->stats(m, info) : ZT_OK;
}

zt_status zt__mode_timeline(zt__mode *m, const char *path) {
  if (!m->iface->timeline)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "'%s': a %s run has no timeline to draw (a pipeline's has)", path,
                  zt__mode_name(m));
  return m->iface->timeline(m, path);
}

void zt__mode_end(zt__mode *m, zt_train_result *res) {
  if (m->iface && m->iface->end) m->iface->end(m, res);
}
zt_status zt__mode_gather(zt__mode *m) { return m->iface->gather ? m->iface->gather(m) : ZT_OK; }

void zt__mode_close(zt__mode *m) {
  if (m->iface) m->iface->close(m);
  memset(m, 0, sizeof *m);
}

zt_status zt__mode_check_no_pipeline(const zt_train_config *c) {
  if (c->log.timeline[0])
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_config.log.timeline draws a pipeline's steps: it needs "
                  "zt_train_config.parallel.pp > 1");
  if (strcmp(c->parallel.schedule, "1f1b"))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_config.parallel.schedule '%s' is a pipeline schedule, and this run "
                  "has no pipeline: give zt_train_config.parallel.pp > 1, or leave the schedule out",
                  c->parallel.schedule);
  if (c->parallel.chunks)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_config.parallel.chunks %d sets a pipeline's stages per rank, and "
                  "this run has no pipeline: give zt_train_config.parallel.pp > 1, or leave it out",
                  c->parallel.chunks);
  if (strcmp(c->parallel.pp_balance, "even"))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_train_config.parallel.pp_balance '%s' sets a pipeline's stages, and this "
                  "run has no pipeline: give zt_train_config.parallel.pp > 1, or leave it out",
                  c->parallel.pp_balance);
  return ZT_OK;
}
