/* The memory planner's internals shared in the training layer (src/train/offload_plan.c,
 * mem_available.c): the activation offload's write cap it counts, the memory a process may
 * still take, and whether a run asks it to plan. zt_train_plan_memory is public (zt/train.h).
 * Included by: src/train (and its tests). */
#ifndef ZT_TRAIN_OFFLOAD_PLAN_H
#define ZT_TRAIN_OFFLOAD_PLAN_H

#include "zt/train.h"

/* The write-behind cap of the activation offload in training (zt_offload_options.write_cap):
 * two of the largest tensors a block saves (the MLP's ffn wide ones, zt_lm_dims) for a chunk
 * of tokens tokens, so a block's saves are written while its next ops compute, in bounded RAM
 * that the memory planner counts (src/train/offload_plan.c). */
/* The most allocator cache a plan gives (runs without a limit have no byte bound, only the live
 * bytes' high mark). */
#define ZT__PLAN_CACHE_MAX ((int64_t)1 << 30)

int64_t zt__train_act_write_cap(const zt_lm_config *g, int64_t tokens);
/* zt_mem_available reading its files under root ("" the real ones: root/proc/self/cgroup,
 * root/proc/meminfo, root/sys/fs/cgroup/...) for a process of rss bytes. */
ZT_NODISCARD zt_status zt__mem_available_at(const char *root, int64_t rss, zt_mem_available_info *out);
/* One plan's prediction (zt_offload_plan_predict) with the slices recompute_plan's letters
 * recompute (activation offload; NULL or "": none), and the allocator cache a run of it at limit
 * gets (what the limit leaves, as zt_offload_plan_make gives its choice): the planner's
 * (src/train/plan_offload.c) prediction of states in the tier. */
ZT_NODISCARD zt_status zt__offload_plan_at(const zt_offload_plan_input *in, int slices, int resident,
                                           zt_offload_plan_activations act, const char *recompute_plan, int64_t limit,
                                           zt_offload_plan *out);
/* The --mem-limit planner's input for a run of sp's model at limit with microbatches and states in
 * tier, from the planner's calibration (zt/plan.h): the compute rate, the tier's bandwidth, the
 * process's base; trial: activation offload plans run the activation trial. One builder for the
 * run's planning (zt_train_plan_memory) and the planner's predictions (plan_offload.c). cache_limit: the
 * allocator's cache bound before planning (zt_mem_cache_limit). */
struct zt_plan_space;
struct zt_plan_calibration;
void zt__offload_plan_input(const struct zt_plan_space *sp, const struct zt_plan_calibration *cal, int64_t limit,
                            int64_t cache_limit, int64_t microbatches, zt_offload_tier tier, bool trial,
                            zt_offload_plan_input *in);
/* A step of OffloadModel from its compute and disk seconds: how far they overlap with K resident
 * slices and the mode (measured; one rule for the --mem-limit planner and the planner's own cost
 * model, plan_offload.c). */
double zt__offload_plan_step_s(double comp, double io, int K, zt_offload_plan_activations act);
/* Whether zt_train_plan_memory has something to do for c at world ranks. */
bool zt__train_plan_wanted(const zt_train_config *c, int world);

#endif
