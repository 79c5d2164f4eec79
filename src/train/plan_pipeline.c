/* The planner's prediction of pipelines (plan_internal.h): P stages over P ranks, every schedule
 * family, D replicas (DDP or FSDP of each stage). FIRST MODEL: the simulator's step from the cost
 * model's per-stage F, B, W; states of the largest stage; to be fitted against measured runs. */
#include <string.h>

#include "core/status_internal.h"
#include "train/plan_internal.h"

zt_status zt__plan_predict_pipeline(const zt__plan_in *in, const zt_plan_config *c, zt_plan_prediction *out) {
  memset(out, 0, sizeof *out);
  (void)in, (void)c;
  return ZT_ERR(ZT_STATUS_UNSUPPORTED, "the planner does not predict pipelines yet");
}
