/* zerotrain OffloadModel (fairscale's experimental OffloadModel semantics, issue 15): a
 * model's sequence of units (GPT-2: embedding, blocks, final norm + fused lm-head loss) is cut
 * into slices whose parameters live in a store (zt/store.h) and come into RAM a few slices at
 * a time. Forward runs slice by slice under no-grad, every microbatch chunk through a slice
 * before the slice leaves, keeping only the activations at slice boundaries (in the store);
 * backward walks the slices in reverse, recomputing each chunk of a slice with grad enabled
 * from its boundary activation and the forward's RNG state, and backpropagates that chunk's
 * output grad; the optimizer then steps slice by slice.
 * Invariants: at most `resident` slices' parameters (and grads) are in RAM (the one computing
 * plus the one being prefetched); a parameter used by several slices (a tied embedding) is in
 * RAM while any of them is; the results (losses, grads, parameters) are bitwise those of plain
 * training with the same microbatches through a lossless store. */
#ifndef ZT_OFFLOAD_MODEL_H
#define ZT_OFFLOAD_MODEL_H

#include "zt/comm.h"
#include "zt/optim.h"
#include "zt/store.h"

/* A model as a sequence of units, as OffloadModel sees it (borrowed; GPT-2's is
 * zt_gpt2_offload_units in zt/train.h). */
typedef struct zt_offload_units {
  int n_units;
  int n_params;
  const zt_param *params; /* every parameter, in the order the optimizer lists them (the order clipping sums in) */
  /* Whether unit uses parameter param (a tied one is used by several units). Asked once per
   * pair when the offload model is made. */
  bool (*uses)(void *ctx, int unit, int param);
  /* Run units [first, first + count) on in (borrowed: token ids for unit 0, else the previous
   * unit's output) into *out (new); a span that ends with the last unit gives the mean loss
   * (0-d) against targets (may be NULL for a model whose loss needs none). Grad mode as the
   * caller set it. The random draws of a span must depend only on the shapes it sees (dropout
   * does): OffloadModel replays them by RNG offsets. */
  zt_status (*run)(void *ctx, int first, int count, zt_tensor *targets, zt_tensor *in, zt_tensor **out);
  void *ctx;
} zt_offload_units;

/* How backward gets each slice's activations.
 * RECOMPUTE (fairscale's OffloadFunction, the default): forward keeps no graph, only the
 *   boundary activations (in the store); backward recomputes each slice chunk by chunk. The
 *   activations in RAM are one slice's for one chunk.
 * KEEP_GRAPH (fairscale's ShardSyncLayer path): each chunk's forward runs with grad, slice
 *   after slice, keeping the whole graph (plain training's activations in RAM); a sync node at
 *   each slice's input brings the slice before it back into RAM when this slice's backward is
 *   done, so backward reloads the slices in reverse while each chunk's backward runs as one
 *   zt_backward. No recomputation; bitwise plain training too (the chunks' forwards and
 *   backwards take turns as zt_train_step's microbatches do). Every op of a unit past the
 *   first slice must lie on a path from the slice's input (an op on parameters alone could run
 *   after its slice left: an evicted-storage error). */
typedef enum zt_offload_model_mode { ZT_OFFLOAD_MODEL_RECOMPUTE = 0, ZT_OFFLOAD_MODEL_KEEP_GRAPH } zt_offload_model_mode;

/* The default update chunk (zt_offload_model_options.update_chunk_bytes): 128 MiB of moments, two
 * 64 MiB ranges of AdamW's (16 requests of the disk store's default 4 MiB each). A chunked update
 * reads and writes its moments while the computing thread waits, where a whole one's are read
 * ahead with their slice's load and written behind: so only tensors larger than a block's
 * usual ones are chunked (llama3.2-1b: the 1002 MiB tied embedding, not its 64 MiB MLP
 * weights, whose moments are 128 MiB). The memory planner counts it
 * (zt_offload_plan_input.update_chunk_bytes). */
#define ZT_OFFLOAD_MODEL_UPDATE_CHUNK ((size_t)128 << 20)

typedef struct zt_offload_model_options {
  zt_offload_model_mode mode; /* default RECOMPUTE */
  int slices;             /* N in [1, n_units]: contiguous units balanced by parameter bytes (default 2) */
  const int *slice_units; /* optional (by hand): N counts of units, each >= 1, summing to n_units */
  int resident;           /* K >= 1: slices whose parameters may be in RAM at once (default 2; more than N: N) */
  int microbatches;       /* M >= 1: the batch is cut into M chunks along dim 0 (default 1) */
  bool prefetch;          /* with K >= 2, restore the next slice on the store's helper thread while this one
                           * computes (default on) */
  bool offload_activations; /* boundary activations and their grads go to the store between uses (default on;
                             * off: they stay in RAM) */
  bool lazy_update;       /* zt_offload_model_step updates the slices in RAM at once and each other one when it
                           * is next loaded (the next forward, zt_offload_model_restore_all or _flush), which
                           * saves a sweep of loads per step; the optimizer's step count advances when the last
                           * one is done (default on; off: every slice loaded and updated in the step) */
  bool offload_optim_state; /* the optimizer's state (AdamW's moments) lives in the store too: a parameter's state
                             * comes into RAM with its slice for the update (prefetched with it) and goes back right
                             * after it, so every model state is in the store (default off: the state stays in RAM) */
  size_t update_chunk_bytes; /* with offload_optim_state and a store with range ops (zt_store_has_ranges): a
                             * parameter whose moments (all its optimizer state) take more bytes than this is
                             * updated a chunk of elements at a time, each chunk's moments read from the store,
                             * stepped (zt_optim_step_param_range) and written back in place, so RAM holds the
                             * parameter, its grad and one chunk's moments, never its whole moments (a tied
                             * embedding's are the largest state of a Llama). Bitwise the whole update. Chunks
                             * start at multiples of 1024 elements (4 KiB of f32: page-aligned in a disk store).
                             * Default ZT_OFFLOAD_MODEL_UPDATE_CHUNK; 0: every parameter updated whole. */
  bool restore_on_free;   /* zt_offload_model_free brings every parameter and grad back into RAM (default on);
                           * off: they stay in the store (whoever frees the model frees them; the store must
                           * outlive it), for models larger than RAM */
  zt_comm *comm;          /* optional (borrowed): data-parallel replicas, each running the same slices on its
                           * own rows (DDP): once a slice's backward has made the grads of the parameters it is
                           * the first to use final, they are averaged over comm (an all-reduce per parameter,
                           * before the slice leaves RAM), so the norm and the update are the same on every
                           * rank. Every rank must have grads for the same parameters (GPT-2: all). */
} zt_offload_model_options;
ZT_API zt_offload_model_options zt_offload_model_options_default(void);

typedef struct zt_offload_model zt_offload_model;

/* The slices zt_offload_model_new makes of U units whose parameter bytes are bytes[U] (a shared
 * parameter counted in each unit using it): count[S] contiguous units per slice, each >= 1,
 * the largest slice as small as it can be (for planners). */
ZT_API ZT_NODISCARD zt_status zt_offload_model_balance(int U, int S, const int64_t *bytes, int *count);

/* Wrap u's units into slices over store (borrowed: it must outlive the offload model) and
 * evict every parameter (and grad) to it: from here on a parameter is in RAM only while a
 * slice that uses it is. Refused: parameters sharing a storage (each is evicted on its own),
 * a parameter no unit uses, a wrapped or released parameter storage. *out: free with
 * zt_offload_model_free, before the model and the store. */
ZT_API ZT_NODISCARD zt_status zt_offload_model_new(const zt_offload_units *u, zt_store *store,
                                                   const zt_offload_model_options *o, zt_offload_model **out);
/* Restores every parameter and grad into RAM (the model is whole again; not with
 * restore_on_free off), drops the last forward's boundary activations. Pending lazy updates
 * are applied first. NULL is a no-op. */
ZT_API void zt_offload_model_free(zt_offload_model *om);

/* Forward of the whole model on inputs (B, ...) and targets (B, ...) (may be NULL), B a
 * multiple of the microbatch count: the mean over the chunks of each chunk's loss (0-d f32,
 * new). KEEP_GRAPH: one chunk (M must be 1; zt_offload_model_train_step runs M), the loss
 * recorded by the model's own ops with sync nodes at the slice boundaries (zt_grad refused as
 * below; the RNG drawn as plain training's forward draws it). Otherwise (RECOMPUTE): With grad mode on the loss is recorded for backward (a custom function): zt_backward
 * of it runs the slice-by-slice backward, accumulating into every parameter's .grad (evicted
 * with its slice) and, when inputs is a float tensor that requires grad, into inputs' grad.
 * zt_grad through it is refused (its backward accumulates into .grad, like fairscale's
 * "Checkpointing is not compatible with .grad()"). One forward at a time: a new forward drops
 * the last one's activations (its backward then fails, naming why). Inputs' requires_grad is
 * never changed. The RNG is left where plain training's M microbatch forwards leave it. */
ZT_API ZT_NODISCARD zt_status zt_offload_model_forward(zt_offload_model *om, zt_tensor *inputs, zt_tensor *targets,
                                                       zt_tensor **loss);
/* The last forward's mean loss as plain training computes it: the sum of the chunks' losses
 * (as doubles) over M (NaN before the first forward). */
ZT_API double zt_offload_model_last_loss(const zt_offload_model *om);
/* After backward: the global grad norm (summed in the optimizer's parameter order, as
 * zt_clip_grad_norm sums it: bitwise its value), clipping (grad_clip > 0: every grad times
 * grad_clip / (norm + 1e-6) when the norm exceeds it; 0: measure only; < 0: neither, *norm
 * NaN), then the update of opt at lr slice by slice (each slice's parameters and grads
 * restored, its grads scaled, its parameters stepped with zt_optim_step_params one after
 * another, its grads freed, the slice evicted again), then zt_optim_step_finish; with
 * lazy_update a slice not in RAM is updated when it is next loaded (see
 * zt_offload_model_flush). opt must update u's parameter list (the same array); its state
 * stays in RAM, or with offload_optim_state in the store: a parameter's moments come in for
 * its update and go back right after it, and the slices in RAM now are updated as one run in
 * which the moments of the parameters after the one being updated (the next slice's too) are
 * read ahead by the store's helper while its AdamW runs, holding at most the moments of the
 * slice being updated. A non-finite norm (when measured) stops before any update:
 * ZT_STATUS_STATE, grads kept. A store failure midway leaves the parameters before it
 * updated. *norm may be NULL. */
ZT_API ZT_NODISCARD zt_status zt_offload_model_step(zt_offload_model *om, zt_optim *opt, double lr, double grad_clip,
                                                    double *norm);
/* Lazy updates: apply every update that waits for its slice's next load now (loading those
 * slices), so the parameters and the optimizer state and step count are the step's (before
 * reading them elsewhere, or freeing the optimizer). zt_offload_model_restore_all and
 * zt_offload_model_free do it too: the optimizer must outlive a pending update. Afterwards no
 * load is in flight: every evicted parameter and state can be read from the store
 * (zt_storage_read_evicted: streamed checkpoints). */
ZT_API ZT_NODISCARD zt_status zt_offload_model_flush(zt_offload_model *om);
/* One training step: forward, a non-finite mean loss stops before backward (ZT_STATUS_STATE),
 * backward, zt_offload_model_step. Bitwise zt_train_step's with M microbatches (the chunks)
 * over a lossless store. loss and grad_norm may be NULL. */
ZT_API ZT_NODISCARD zt_status zt_offload_model_train_step(zt_offload_model *om, zt_optim *opt, zt_tensor *inputs,
                                                          zt_tensor *targets, double lr, double grad_clip,
                                                          double *loss, double *grad_norm);

/* With offload_optim_state: make opt's state of every parameter now (zero, as its first update
 * would) and put it in the store one parameter at a time, so that a checkpoint can be loaded
 * into it (zt_snapshot_load streams into evicted tensors) and saved from it without holding it
 * in RAM. opt must update u's parameter list; it must outlive the offload model. */
ZT_API ZT_NODISCARD zt_status zt_offload_model_evict_optim(zt_offload_model *om, zt_optim *opt);

/* Every parameter and grad in RAM (checkpoints, evaluation with other code, sampling) until
 * zt_offload_model_evict_all; in between the offload model's own calls keep them in RAM. */
ZT_API ZT_NODISCARD zt_status zt_offload_model_restore_all(zt_offload_model *om);
ZT_API ZT_NODISCARD zt_status zt_offload_model_evict_all(zt_offload_model *om);

typedef struct zt_offload_model_stats {
  int slices, resident, microbatches;
  int64_t slice_param_bytes_max; /* the largest slice's parameter bytes (a shared parameter counted in each) */
  int64_t loads;                 /* slice loads so far */
  int64_t prefetched;            /* of which started ahead on the store's helper thread */
  int64_t rng_calibrations;      /* forwards that first ran chunk 0 through every slice to learn the slices'
                                  * random draws (the first with M > 1 and each new chunk shape) */
  /* Where the computing thread's time went outside compute (cumulative seconds): waiting for
   * slices to load (a prefetch not done yet, or a load not prefetched), the updates applied
   * at loads (AdamW, moments in and out), and evictions (puts, or waits for the write-behind cap). */
  double load_wait_s, update_s, evict_s;
  /* Of update_s: the step's end (the slices backward left in RAM), waiting for moments to be
   * read, and AdamW itself (the rest: grads scaled, moments handed to the store) */
  double update_end_s, update_read_wait_s, update_adamw_s;
  /* offload_optim_state: parameters whose moments the step's end (the updates of the slices
   * backward left in RAM) began reading before their turn, while earlier parameters' AdamW ran */
  int64_t moments_read_ahead;
  /* offload_optim_state: chunked updates (update_chunk_bytes): parameters updated in chunks, the
   * chunks, and the seconds spent writing chunks' moments back (their reads count in
   * update_read_wait_s, their AdamW in update_adamw_s) */
  int64_t chunked_params, update_chunks;
  double update_write_s;
} zt_offload_model_stats;
ZT_API void zt_offload_model_stats_get(const zt_offload_model *om, zt_offload_model_stats *out);
/* Slice s's time so far in the graph-keeping mode's steps (zt_offload_model_train_step),
 * cumulative seconds: its forward (from its load being waited for to its output) and its
 * backward (from the later slice's sync node, or backward's start, to its own, or backward's
 * end), both without the updates applied at loads (lazy updates: the last step's, which run in
 * the next forward). What a slice's activations cost (offloaded, or recomputed in its backward)
 * shows here; zt train's activation trial compares these. Either pointer may be NULL. */
ZT_API void zt_offload_model_slice_times(const zt_offload_model *om, int s, double *forward_s, double *backward_s);
/* Slice s's units [*first, *first + *count). */
ZT_API void zt_offload_model_slice_units(const zt_offload_model *om, int s, int *first, int *count);

#endif
