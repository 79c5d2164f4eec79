/* zerotrain data parallelism over a zt_comm: DDP (every rank holds all parameters;
 * gradients are bucketed and all-reduced from post-accumulate-grad hooks while backward
 * runs) and FSDP (parameters grouped into wrap units, each unit one flat parameter sharded
 * evenly over the ranks: ZeRO-3, ZeRO-2, ZeRO-1, no-shard and hybrid).
 * Both give, on N ranks that each run B/N rows of a global batch, the losses, gradients
 * and parameters of one process running all B rows, up to reduction-order rounding:
 * gradients are averaged over the ranks (each rank's loss is a mean over its rows).
 * Reference semantics: PyTorch DDP, fairscale/PyTorch FSDP. */
#ifndef ZT_FSDP_H
#define ZT_FSDP_H

#include "zt/comm.h"
#include "zt/optim.h"
#include "zt/store.h"
#include "zt/strategy.h"

/* ================================================================ DDP */
typedef struct zt_ddp_options {
  int64_t bucket_bytes;  /* gradients are packed into buckets of about this many bytes, in reverse
                          * parameter order (the order backward produces them); default 25 MiB */
  bool broadcast_params; /* at creation, every rank takes rank 0's parameter values; default true */
} zt_ddp_options;
ZT_API zt_ddp_options zt_ddp_options_default(void);

typedef struct zt_ddp zt_ddp;
/* Data parallel over comm (borrowed; outlives d) for params (borrowed; the parameter
 * tensors must outlive d). Parameters that do not require grad are left alone. Registers a
 * post-accumulate-grad hook per parameter: when every parameter of a bucket has its grad,
 * the bucket is copied into a flat buffer and its all-reduce (average) starts
 * asynchronously; buckets start in bucket order on every rank (a bucket that is ready
 * waits for the ones before it), so ranks agree on the order even when some parameters
 * get no grad. The end-of-backward callback starts what is left (a parameter without a
 * grad counts as zeros; its .grad is then created), waits for everything and writes the
 * averaged values back into each .grad. */
ZT_API ZT_NODISCARD zt_status zt_ddp_new(zt_comm *comm, int n_params, const zt_param *params, const zt_ddp_options *o, zt_ddp **out);
ZT_API void zt_ddp_free(zt_ddp *d); /* removes the hooks; NULL is a no-op */
/* no_sync: with sync off, backward only accumulates into .grad locally (no communication);
 * the next backward with sync on reduces the accumulated sums. Default on. */
ZT_API void zt_ddp_set_sync(zt_ddp *d, bool sync);
ZT_API bool zt_ddp_sync(const zt_ddp *d);

/* Communication and overlap counters of a strategy, summed since creation or the last
 * reset. wait_s: time spent blocked waiting for communication (what was not overlapped
 * with compute); comm_calls/bytes_sent: as zt_comm_stats, over every group used. */
typedef struct zt_dp_stats {
  int64_t comm_calls, bytes_sent;
  double wait_s;
  int64_t all_gathers, reduce_scatters, all_reduces;
} zt_dp_stats;
ZT_API void zt_ddp_stats_get(const zt_ddp *d, zt_dp_stats *out);
ZT_API void zt_ddp_stats_reset(zt_ddp *d);

/* ================================================================ FSDP */
typedef enum zt_shard_strategy {
  ZT_SHARD_FULL = 0, /* ZeRO-3: parameters, gradients and optimizer state sharded; full
                      * parameters gathered for a unit's forward and again for its backward */
  ZT_SHARD_GRAD_OP,  /* ZeRO-2: full parameters kept from forward to the end of the unit's
                      * backward; gradients and optimizer state sharded */
  ZT_SHARD_OPT,      /* ZeRO-1: full parameters on every rank at all times; gradients
                      * reduce-scattered straight into the shard the optimizer needs (DeepSpeed's
                      * stage-1 data flow, 2 x parameters of traffic like DDP); optimizer state
                      * sharded: each rank updates its shard and the shards are all-gathered
                      * after the step (zt_fsdp_after_step) */
  ZT_SHARD_NONE,     /* replicated (DDP through flat parameters: one all-reduce per unit; the
                      * shard group is each rank alone, the replicas are every rank) */
  ZT_SHARD_HYBRID,   /* FULL inside groups of hybrid_group consecutive ranks; gradient shards
                      * all-reduced across the groups */
  ZT_SHARD_STRATEGY_COUNT
} zt_shard_strategy;
/* "full", "grad_op", "opt", "none", "hybrid" */
ZT_API const char *zt_shard_strategy_name(zt_shard_strategy s);
/* Parse "full|grad_op|opt|none|hybrid:G" (G >= 1 ranks per shard group; *group is 0 for
 * the others). Errors list the accepted forms. */
ZT_API ZT_NODISCARD zt_status zt_shard_strategy_parse(const char *text, zt_shard_strategy *s, int *group);

/* The per-unit state machine (PyTorch FSDP's training states):
 *   IDLE -> FORWARD (pre-forward) -> IDLE (post-forward)
 *   IDLE -> BACKWARD_PRE (pre-backward: the grad of an output arrived, or the unit's
 *           forward is recomputed in backward) -> BACKWARD_POST (post-backward: every
 *           trainable parameter of the unit has its grad) -> IDLE (end of backward)
 * A forward recomputed in backward (checkpointed unit) runs in BACKWARD_PRE and leaves it
 * there. Any other transition is ZT_STATUS_STATE naming the unit, the event and the state. */
typedef enum zt_fsdp_state {
  ZT_FSDP_STATE_IDLE = 0,
  ZT_FSDP_STATE_FORWARD,
  ZT_FSDP_STATE_BACKWARD_PRE,
  ZT_FSDP_STATE_BACKWARD_POST
} zt_fsdp_state;
ZT_API const char *zt_fsdp_state_name(zt_fsdp_state s); /* "IDLE", ... */

typedef struct zt_fsdp_options {
  zt_shard_strategy strategy; /* default FULL */
  int hybrid_group;           /* HYBRID: ranks per shard group; must divide the world size */
  bool backward_prefetch;     /* start gathering the next unit of backward while this one computes (default true) */
  bool forward_prefetch;      /* start gathering the next unit of forward (the order seen in the
                               * first forward) while this one computes (default false) */
  int limit_all_gathers;      /* at most this many units' full parameters gathered or in flight at
                               * once besides the root (0: no limit); default 2 */
  bool broadcast_params;      /* at init every rank takes rank 0's parameter values (default true) */
  /* Mixed precision. param_dtype: the dtype full parameters are gathered in (f32, bf16 or
   * f16); the shards stay f32 masters. The CPU kernels compute in f32, on the exact f32
   * widening of the gathered values, so a bf16 run computes with bf16-rounded parameters
   * and f32 accumulation; forward runs under autocast (zt_autocast_get) with this dtype for
   * backends that have low-precision kernels. reduce_dtype: the dtype gradients are reduced
   * in; in bf16/f16 they are divided by a pre-divide factor f (the smallest power of two
   * with N/f <= f dividing N) before the sum and by N/f after it, against overflow and
   * underflow. Default f32 for both. GPT-2 has no buffers, so there is no buffer dtype. */
  zt_dtype param_dtype;
  zt_dtype reduce_dtype;
  /* ZeRO-Infinity (default NULL: none): this rank's shard states live in this store
   * (borrowed; outlives f; a disk store puts them on disk) between their uses: each unit's
   * f32 master shard comes in for its gathers (the next unit's read ahead, in the order of
   * the first forward and its reverse in backward) and goes back as the gather lands
   * (unchanged: nothing is written); its reduced gradient shard goes out when its reduction
   * lands (its sum of squares taken then, for the norm); with zt_fsdp_offload_optim the
   * optimizer's state of its pieces too; zt_fsdp_optim_step brings each unit's three in,
   * updates, and sends them out while the next unit's are read. Parameters evicted to a
   * store before zt_fsdp_init (zt_gpt2_new_evicted) are read from it unit by unit, so the
   * whole model is never in RAM. Results are bitwise those without a store. FULL, HYBRID and
   * GRAD_OP only (OPT and NONE keep full parameters in RAM: the shards gain nothing). */
  zt_store *state_store;
} zt_fsdp_options;
ZT_API zt_fsdp_options zt_fsdp_options_default(void);

typedef struct zt_fsdp zt_fsdp;
/* FSDP over comm (borrowed; outlives f) for the module tree root (borrowed; outlives f):
 * root is the root unit, which holds every parameter no other unit holds. Nothing changes
 * until zt_fsdp_init. */
ZT_API ZT_NODISCARD zt_status zt_fsdp_new(zt_comm *comm, zt_module *root, const zt_fsdp_options *o, zt_fsdp **out);
/* Make module m (inside root's tree, not root, not inside or around another unit) a unit.
 * Before zt_fsdp_init only. Every rank must wrap the same modules and, in each backward,
 * use the same units (parameters unused on every rank are fine): the collectives of a
 * backward are issued in hook order, which must be the same on every rank. Reentrant
 * checkpointing (a nested backward) is not supported inside a unit; the non-reentrant
 * zt_checkpoint is (the recomputed forward gathers again). Free f only once no graph
 * recorded through its units is alive. */
ZT_API ZT_NODISCARD zt_status zt_fsdp_wrap(zt_fsdp *f, zt_module *m);
/* Auto-wrap: a unit for every module of the tree for which policy returns true (the
 * search does not descend into a wrapped module). NULL policy: zt_fsdp_policy_blocks. */
typedef bool (*zt_fsdp_wrap_policy)(const zt_module *m, void *user_data);
ZT_API bool zt_fsdp_policy_blocks(const zt_module *m, void *user_data); /* kind "Block": one unit per transformer block */
ZT_API ZT_NODISCARD zt_status zt_fsdp_auto_wrap(zt_fsdp *f, zt_fsdp_wrap_policy policy, void *user_data);
/* Flatten and shard. For each unit (in module order) its parameters (module order; a
 * tensor shared by two names, e.g. tied weights, once) are laid out in one flat f32 buffer
 * padded to a multiple of the shard group size; the parameter tensors become views of it
 * (the same zt_tensor objects, so model code is unchanged); this rank keeps its
 * 1/size slice as the f32 shard (tag PARAM). Frozen parameters (requires_grad false) may
 * share a unit with trainable ones: they are sharded too and get no grad (their unit keeps
 * its full parameters until the end of backward, since ops need frozen values there).
 * Installs the forward hooks and a post-accumulate-grad hook per trainable parameter.
 * FULL, HYBRID and GRAD_OP release the full buffers at once (gathered by the next forward).
 * A shard group of one in f32 (NONE, one rank) keeps no separate shard: the flat buffer is
 * the shard. All parameters must be f32, contiguous, and not views of another tensor. */
ZT_API ZT_NODISCARD zt_status zt_fsdp_init(zt_fsdp *f);
/* Restores nothing: the parameter tensors stay views (of released storage for FULL,
 * HYBRID); call zt_fsdp_gather_full_params first to keep usable values. Removes the hooks. */
ZT_API void zt_fsdp_free(zt_fsdp *f);

/* The optimizer's view: one entry per (parameter, this rank) overlap that requires grad,
 * named like the parameter, with its decay flag, a 1-D tensor viewing the local shard,
 * and, after a backward, .grad set to a view of the local reduced gradient shard. Feed
 * them to zt_optim_new. piece[i] (optional) tells where entry i sits in its parameter.
 * Arrays owned by f. */
typedef struct zt_fsdp_piece {
  const char *name;            /* the parameter's full name */
  int ndim;
  const int64_t *shape;        /* the parameter's full shape */
  int64_t start, count;        /* elements [start, start + count) of the flattened parameter */
} zt_fsdp_piece;
ZT_API int zt_fsdp_params(zt_fsdp *f, zt_param **params, const zt_fsdp_piece **pieces);
/* Free the gradient shards (set_to_none; use instead of zt_optim_zero_grad). */
ZT_API void zt_fsdp_zero_grad(zt_fsdp *f);
/* Global L2 norm of the gradient shards over all ranks (padding excluded; each element
 * counted once, also under HYBRID), clipping like zt_clip_grad_norm. Collective. A
 * non-finite norm (an inf or NaN in any rank's shard: the global check of loss scaling) is
 * returned with ZT_OK and nothing scaled. */
ZT_API ZT_NODISCARD zt_status zt_fsdp_clip_grad_norm(zt_fsdp *f, double max_norm, double *norm);
/* Multiply every gradient shard by factor (unscaling after loss scaling). Local. */
ZT_API ZT_NODISCARD zt_status zt_fsdp_scale_grads(zt_fsdp *f, double factor);
/* After zt_optim_step on the pieces: OPT all-gathers the updated shards into the full
 * parameters; the others have nothing to do (the next forward gathers). Collective. */
ZT_API ZT_NODISCARD zt_status zt_fsdp_after_step(zt_fsdp *f);
/* The update of the pieces by o (made with zt_optim_new over zt_fsdp_params), unit by unit:
 * with a state store each unit's shard, gradient shard and (zt_fsdp_offload_optim) optimizer
 * state are brought in (the next unit's read while this one updates), the pieces updated
 * (zt_optim_step_params), the new values sent back (written behind); then the step counted
 * (zt_optim_step_finish). Bitwise zt_optim_step, which it is without a store. Local. */
ZT_API ZT_NODISCARD zt_status zt_fsdp_optim_step(zt_fsdp *f, zt_optim *o, double lr);
/* Put o's state (made now for every piece, zero, as the first update would make it) in the
 * state store, where it stays between zt_fsdp_optim_step's updates. Needs a state store; o
 * must update zt_fsdp_params' list. Checkpoints read and write it there (streamed). */
ZT_API ZT_NODISCARD zt_status zt_fsdp_offload_optim(zt_fsdp *f, zt_optim *o);
/* no_sync: with sync off, backward keeps each unit's full (unsharded) gradient and
 * accumulates into it without communicating; the next backward with sync on reduces the
 * sums. Memory: every unit's full gradient. Default on. */
ZT_API void zt_fsdp_set_sync(zt_fsdp *f, bool sync);

/* Gather every unit's full parameters into the parameter tensors (for evaluation outside
 * training, sampling or a full checkpoint) until zt_fsdp_release_full_params. IDLE units
 * only. Collective. */
ZT_API ZT_NODISCARD zt_status zt_fsdp_gather_full_params(zt_fsdp *f);
ZT_API ZT_NODISCARD zt_status zt_fsdp_release_full_params(zt_fsdp *f);
/* Write values into the local shards from full parameter values (e.g. after loading a
 * full checkpoint into the gathered parameters): every rank copies its slices from the
 * parameter tensors, which must hold the full values (between gather and release). */
ZT_API ZT_NODISCARD zt_status zt_fsdp_shard_from_full(zt_fsdp *f);

/* Introspection (tests, metrics). Units are numbered in module order, the root last. */
ZT_API int zt_fsdp_num_units(const zt_fsdp *f);
ZT_API zt_fsdp_state zt_fsdp_unit_state(const zt_fsdp *f, int unit);
ZT_API const char *zt_fsdp_unit_name(const zt_fsdp *f, int unit); /* the module's full name ("" for the root) */
ZT_API int64_t zt_fsdp_unit_numel(const zt_fsdp *f, int unit);  /* unpadded elements of its flat parameter */
ZT_API bool zt_fsdp_unit_gathered(const zt_fsdp *f, int unit);  /* full parameters present now */
ZT_API zt_comm *zt_fsdp_shard_comm(const zt_fsdp *f);    /* the group a shard is split over */
ZT_API zt_comm *zt_fsdp_replicate_comm(const zt_fsdp *f); /* the ranks holding equal shards (HYBRID: across the
                                                    * groups; NONE: every rank); NULL for the others */
ZT_API void zt_fsdp_stats_get(const zt_fsdp *f, zt_dp_stats *out);
ZT_API void zt_fsdp_stats_reset(zt_fsdp *f);

/* ================================================================ ZeRO per step */
/* ZeRO at step granularity over a list of parameters (src/strategies/zero.c), for loops that
 * run their own microbatches, such as a pipeline stage across its replicas, where FSDP's
 * per-module hooks do not fit (several microbatches in flight, weight grads late): comm's
 * ranks hold the same parameters; they are flattened in order, cut into equal shards (the
 * last padded) and rank r keeps shard r (f32 masters, tag PARAM). Per step: zt_zero_gather
 * before the first forward (all-gather into the parameter tensors), zt_zero_reduce after the
 * last backward (the full grads summed into the shards by a reduce-scatter, averaged; the
 * full grads freed), the optimizer on zt_zero_pieces, zt_zero_after_step. Strategies: FULL and
 * GRAD_OP (the same at step granularity): the full parameters exist from the gather to the
 * reduce; OPT: they stay, and after_step all-gathers the updated shards into them. The
 * parameters must be f32, contiguous, on the cpu. */
typedef struct zt_zero zt_zero;
/* Shards from the parameters' current values (equal on every rank). comm and params are
 * borrowed (outlive z). FULL, GRAD_OP or OPT; anything else is ZT_STATUS_INVALID_ARG. */
ZT_API ZT_NODISCARD zt_status zt_zero_new(zt_comm *comm, int n, const zt_param *params, zt_shard_strategy s,
                                          zt_zero **out);
ZT_API void zt_zero_free(zt_zero *z); /* the parameter tensors are left as they are; NULL is a no-op */
/* The optimizer's view: per parameter that overlaps this rank's shard, a 1-D view of the
 * shard named like the parameter (piece[i] says where: as zt_fsdp_params). Owned by z. */
ZT_API int zt_zero_pieces(zt_zero *z, zt_param **params, const zt_fsdp_piece **pieces);
/* The parameter tensor piece i belongs to. */
ZT_API zt_tensor *zt_zero_piece_param(const zt_zero *z, int i);
/* Full parameters into the parameter tensors (a no-op when they are there). Collective. */
ZT_API ZT_NODISCARD zt_status zt_zero_gather(zt_zero *z);
/* FULL, GRAD_OP: free the full parameters (a no-op for OPT, or when they are not there). */
ZT_API ZT_NODISCARD zt_status zt_zero_release(zt_zero *z);
/* The parameters' grads (none: zeros) averaged over the ranks into the pieces' grads; the
 * full grads freed; FULL, GRAD_OP release the full parameters. Collective. */
ZT_API ZT_NODISCARD zt_status zt_zero_reduce(zt_zero *z);
/* After the update of the pieces: OPT all-gathers the shards into the parameters; the
 * pieces' grads are freed. Collective (OPT). */
ZT_API ZT_NODISCARD zt_status zt_zero_after_step(zt_zero *z);
/* The shards from the parameter tensors' values (after loading weights into them; they must
 * be present). Local. */
ZT_API ZT_NODISCARD zt_status zt_zero_shard_from_full(zt_zero *z);
/* Optimizer state between an optimizer over the pieces (sharded) and one over the full
 * parameters (same kind; full's state names "<kind>.<name>" matched to the pieces'):
 * to_full all-gathers the pieces' state into full's (collective); from_full copies each
 * piece's range out of full's (local). Step counts follow. */
ZT_API ZT_NODISCARD zt_status zt_zero_state_to_full(zt_zero *z, zt_optim *sharded, zt_optim *full);
ZT_API ZT_NODISCARD zt_status zt_zero_state_from_full(zt_zero *z, zt_optim *sharded, zt_optim *full);

/* ================================================================ as a strategy */
/* DDP or FSDP applied to a model through the strategy interface (zt/strategy.h), order 100
 * (outermost): attaching makes the zt_ddp over the model's parameters, or the zt_fsdp over
 * its module tree with one unit per block of its block sequence, initialised (flattened,
 * sharded, rank 0's values broadcast when the options say so); detaching frees it (its
 * hooks go; under FSDP the parameters stay views of the shards' storage: gather the full
 * parameters first to keep usable values, as zt_fsdp_free says). */
typedef struct zt_data_parallel_options {
  bool fsdp;                 /* false: DDP */
  zt_ddp_options ddp;        /* DDP's */
  zt_fsdp_options fsdp_options; /* FSDP's (sharding strategy, prefetch, mixed precision, ...) */
} zt_data_parallel_options;
typedef struct zt_data_parallel zt_data_parallel;
/* comm is borrowed (outlives d). */
ZT_API ZT_NODISCARD zt_status zt_data_parallel_new(zt_comm *comm, const zt_data_parallel_options *o, zt_data_parallel **out);
ZT_API zt_strategy zt_data_parallel_strategy(zt_data_parallel *d);
/* While attached: the DDP or FSDP object (NULL for the other kind, or detached). */
ZT_API zt_ddp *zt_data_parallel_ddp(const zt_data_parallel *d);
ZT_API zt_fsdp *zt_data_parallel_fsdp(const zt_data_parallel *d);
/* While attached: what the optimizer updates (the model's parameters under DDP, FSDP's
 * pieces under FSDP); the array is owned by d or the model. */
ZT_API int zt_data_parallel_params(const zt_data_parallel *d, zt_param **params);
ZT_API void zt_data_parallel_free(zt_data_parallel *d); /* detaches first; NULL is a no-op */
/* A training step's calls, the same for DDP and FSDP (the kind is chosen once, when attached;
 * call them while attached). o updates zt_data_parallel_params' list. */
/* "ddp", or FSDP's sharding strategy ("full", "grad_op", ...; zt_shard_strategy_name). */
ZT_API const char *zt_data_parallel_name(const zt_data_parallel *d);
/* no_sync (zt_ddp_set_sync, zt_fsdp_set_sync). */
ZT_API void zt_data_parallel_set_sync(zt_data_parallel *d, bool sync);
/* The global gradient norm, clipped as zt_clip_grad_norm (DDP's gradients are the same on
 * every rank after its all-reduce; FSDP's norm is over the shards, collective). */
ZT_API ZT_NODISCARD zt_status zt_data_parallel_clip_grad_norm(zt_data_parallel *d, double max_norm, double *norm);
/* Multiply every gradient by factor (loss unscaling): FSDP's shards; DDP: ZT_STATUS_UNSUPPORTED. */
ZT_API ZT_NODISCARD zt_status zt_data_parallel_scale_grads(zt_data_parallel *d, double factor);
/* The update (zt_optim_step; FSDP: zt_fsdp_optim_step, unit by unit with a state store). */
ZT_API ZT_NODISCARD zt_status zt_data_parallel_optim_step(zt_data_parallel *d, zt_optim *o, double lr);
/* After the update: FSDP's after-step (zt_fsdp_after_step), then the gradients freed. */
ZT_API ZT_NODISCARD zt_status zt_data_parallel_after_step(zt_data_parallel *d, zt_optim *o);
/* FSDP with a state store: o's state goes into it (zt_fsdp_offload_optim); otherwise nothing. */
ZT_API ZT_NODISCARD zt_status zt_data_parallel_offload_optim(zt_data_parallel *d, zt_optim *o);
/* The counters (zt_ddp_stats_get, zt_fsdp_stats_get). */
ZT_API void zt_data_parallel_stats_get(const zt_data_parallel *d, zt_dp_stats *out);
/* Usable full parameters in the model's tensors until release (FSDP gathers them,
 * collective; DDP holds them already). */
ZT_API ZT_NODISCARD zt_status zt_data_parallel_gather_full(zt_data_parallel *d);
ZT_API ZT_NODISCARD zt_status zt_data_parallel_release_full(zt_data_parallel *d);

#endif
