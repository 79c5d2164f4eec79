/* The planner's calibration (zt/plan.h): defaults, the environment's figures (ZT_PLAN_CALIBRATION),
 * and — to come — measuring every figure here and files. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "train/plan_internal.h"

static const char *const k_fig_names[ZT_PLAN_FIG_COUNT] = {"gemm_gflops", "attn_gflops", "elem_bps", "read_bps",
                                                           "write_bps", "comm_latency_s", "comm_bps", "base_bytes"};
const char *zt_plan_figure_name(zt_plan_figure f) {
  return (unsigned)f < ZT_PLAN_FIG_COUNT ? k_fig_names[f] : "?";
}
const char *zt_plan_source_name(zt_plan_source s) {
  return s == ZT_PLAN_SOURCE_MEASURED ? "measured" : s == ZT_PLAN_SOURCE_GIVEN ? "given" : "default";
}

void zt_plan_calibration_default(zt_plan_calibration *out) {
  memset(out, 0, sizeof *out);
  out->value[ZT_PLAN_FIG_GEMM] = 50;
  out->value[ZT_PLAN_FIG_ATTN] = 10;
  out->value[ZT_PLAN_FIG_ELEM] = 4e9;
  out->value[ZT_PLAN_FIG_READ] = 1e9;
  out->value[ZT_PLAN_FIG_WRITE] = 1e9;
  out->value[ZT_PLAN_FIG_COMM_LAT] = 20e-6;
  out->value[ZT_PLAN_FIG_COMM_BW] = 2e9;
  out->value[ZT_PLAN_FIG_BASE] = 64.0 * 1048576.0;
  out->world = 1, out->threads = 0;
}

/* TEMPORARY until the calibration lands: nothing measured. */
zt_status zt_plan_calibrate(zt_comm *comm, const zt_plan_space *sp, const char *dir, int reps, zt_plan_calibration *out) {
  (void)comm, (void)sp, (void)dir, (void)reps;
  zt_plan_calibration_default(out);
  return ZT_OK;
}
zt_status zt_plan_calibration_env(zt_plan_calibration *c) {
  (void)c;
  return ZT_OK;
}
zt_status zt_plan_calibration_read(const char *path, zt_plan_calibration *c) {
  (void)path, (void)c;
  return ZT_ERR(ZT_STATUS_UNSUPPORTED, "not yet");
}
zt_status zt_plan_calibration_write(const zt_plan_calibration *c, const char *path) {
  (void)path, (void)c;
  return ZT_ERR(ZT_STATUS_UNSUPPORTED, "not yet");
}
