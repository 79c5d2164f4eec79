/* zerotrain strategies: what changes how a model trains (its memory, its parallelism) without
 * changing its results, applied to a model from outside through one interface. A strategy
 * attaches to a zt_model (zt/model.h) by hooking its modules and wrapping the run of its
 * blocks (zt/nn.h: module hooks and sequence wrappers are lists, so several strategies act
 * on one module), and detaches the same way; the model never calls a strategy.
 *
 * The built-in strategies, in their order of composition (outermost first):
 *   data parallel (zt_data_parallel_strategy: DDP or FSDP's variants, zt/fsdp.h), order 100;
 *   activation offload (zt_offload_strategy, zt/offload.h), order 200;
 *   recompute (zt_recompute_plan_strategy, below), order 300.
 * Order is what nests: offload wraps recompute, so inside a checkpoint region only the
 * region's inputs reach the offload tier; FSDP's gather hooks sit on the blocks themselves,
 * so a recomputed block gathers its parameters again. zt_strategies_attach sorts by order,
 * so callers may list strategies in any order.
 *
 *   zt_model model = zt_gpt2_model(g);
 *   zt_recompute_options ro = zt_recompute_options_default();
 *   ro.mode = ZT_RECOMPUTE_SELECTIVE;
 *   zt_recompute_plan *rc;  zt_offload *off;
 *   zt_recompute_plan_new(&ro, &rc);
 *   zt_offload_new(&(zt_offload_options){...}, &off);
 *   zt_strategy s[] = {zt_recompute_plan_strategy(rc), zt_offload_strategy(off)};
 *   zt_strategies_attach(2, s, &model);    ... train with zt_train_step ...
 *   zt_strategies_detach(2, s);  zt_recompute_plan_free(rc);  zt_offload_free(off);
 */
#ifndef ZT_STRATEGY_H
#define ZT_STRATEGY_H

#include "zt/model.h"
#include "zt/ops.h"

/* One strategy's calls. attach hooks m (borrowed; it must outlive the attachment) and fails
 * with ZT_STATUS_STATE when the strategy is attached already; detach undoes it (a no-op when
 * not attached). Detach every strategy before freeing the model it is attached to. */
typedef struct zt_strategy_ops {
  const char *kind; /* "data-parallel", "activation-offload", "recompute" */
  int order;        /* composition: lower attaches first and runs outside */
  zt_status (*attach)(void *self, const zt_model *m);
  void (*detach)(void *self);
} zt_strategy_ops;
/* A strategy: its calls and the object they act on (a view; the object's own free releases it). */
typedef struct zt_strategy {
  const zt_strategy_ops *ops;
  void *self;
} zt_strategy;

enum { ZT_STRATEGY_ORDER_DATA_PARALLEL = 100, ZT_STRATEGY_ORDER_OFFLOAD = 200, ZT_STRATEGY_ORDER_RECOMPUTE = 300 };

ZT_API ZT_NODISCARD zt_status zt_strategy_attach(zt_strategy s, const zt_model *m);
ZT_API void zt_strategy_detach(zt_strategy s);
/* Attach s[0..n) in order of composition (stable by ops->order); on a failure the ones
 * attached are detached again and the status says which strategy failed. */
ZT_API ZT_NODISCARD zt_status zt_strategies_attach(int n, const zt_strategy *s, const zt_model *m);
/* Detach s[0..n) in the reverse order of composition. */
ZT_API void zt_strategies_detach(int n, const zt_strategy *s);

/* ------------------------------------------------ recompute plans (src/strategies/recompute.c) */
/* Activation recomputation of a model's blocks: consecutive blocks of one mode form regions of
 * up to `every` blocks (counted from block 0); a FULL or SELECTIVE region runs inside a
 * non-reentrant zt_checkpoint (zt/checkpoint.h), so only its input stays between forward and
 * backward and backward recomputes it (dropout masks included: the RNG is restored).
 * SELECTIVE regions run under `policy`. Losses and grads are bitwise those without it. */
typedef struct zt_recompute_options {
  zt_recompute mode;         /* every block's mode (NONE, FULL or SELECTIVE) unless modes is given */
  const zt_recompute *modes; /* or one mode per block (n_modes of them: the model's block count); copied */
  int n_modes;
  int every;                 /* blocks per region, >= 1; more than the block count: one region */
  zt_checkpoint_policy policy; /* of SELECTIVE regions; fn NULL: zt_checkpoint_policy_save_wide_gemm */
} zt_recompute_options;
/* NONE, every 1, no per-block modes, policy save_wide_gemm. */
ZT_API zt_recompute_options zt_recompute_options_default(void);

typedef struct zt_recompute_plan zt_recompute_plan;
/* A plan (bad modes, every < 1: ZT_STATUS_INVALID_ARG naming the field). *out is the caller's. */
ZT_API ZT_NODISCARD zt_status zt_recompute_plan_new(const zt_recompute_options *o, zt_recompute_plan **out);
/* Change the plan, attached or not; between steps, never between a forward and its backward
 * (recomputation reads the current regions). A failed call changes nothing. */
ZT_API ZT_NODISCARD zt_status zt_recompute_plan_set(zt_recompute_plan *p, const zt_recompute_options *o);
/* The common mode of all blocks, or PLAN when they differ; *every (may be NULL) the region
 * size in use (capped at the block count once attached). */
ZT_API zt_recompute zt_recompute_plan_mode(const zt_recompute_plan *p, int *every);
/* Writes n_modes modes (block i's mode; with a single mode, that one for every entry). */
ZT_API void zt_recompute_plan_modes(const zt_recompute_plan *p, int n_modes, zt_recompute *modes);
ZT_API zt_checkpoint_policy zt_recompute_plan_policy(const zt_recompute_plan *p);
/* The plan as a strategy: attaching wraps the model's block sequence (a per-block plan
 * must have one mode per block: ZT_STATUS_INVALID_ARG otherwise). */
ZT_API zt_strategy zt_recompute_plan_strategy(zt_recompute_plan *p);
/* Detaches it and frees it. NULL is a no-op. */
ZT_API void zt_recompute_plan_free(zt_recompute_plan *p);
/* "none", "full", "selective", "plan" */
ZT_API const char *zt_recompute_name(zt_recompute mode);

#endif
