/* A run's activation memory options attached to its model (src/train/memory.c): the recompute
 * plan and the activation offload (zt_train_memory_attach, public), and the figures the run's
 * summary shows for the plan attached. Included by: src/train. */
#ifndef ZT_TRAIN_MEMORY_H
#define ZT_TRAIN_MEMORY_H

#include "zt/train.h"

/* res's recompute_plan and act_peak_predicted from the plan now attached (rows: a microbatch). */
void zt__train_plan_result(const zt_model *m, const zt_train_memory *mem, int64_t rows, int64_t seq,
                           zt_train_result *res);

#endif
