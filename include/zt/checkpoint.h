/* zerotrain activation checkpointing: run a region without keeping what its ops save
 * for backward, and recompute the region when backward needs it (the semantics of
 * torch.utils.checkpoint, reentrant and non-reentrant). Recomputation restores the
 * Philox state of the forward, so results are bitwise equal to running without it. */
#ifndef ZT_CHECKPOINT_H
#define ZT_CHECKPOINT_H

#include "zt/ops.h"

/* The checkpointed region. inputs are borrowed (entries may be NULL: non-tensor state
 * travels in user_data); fn sets outputs[0..n_out) to new tensors owned by the caller.
 * fn must be a pure function of its inputs, user_data and the RNG: backward runs it again.
 * On failure fn frees what it made and returns the status of the call that failed (an
 * early stop of recomputation arrives that way: see zt_checkpoint). */
typedef zt_status (*zt_checkpoint_fn)(zt_tensor *const *inputs, int n_in, zt_tensor **outputs, int n_out,
                                      void *user_data);

typedef enum zt_checkpoint_early_stop {
  ZT_CHECKPOINT_EARLY_STOP_DEFAULT = 0, /* the thread's scoped setting (zt_checkpoint_set_early_stop) */
  ZT_CHECKPOINT_EARLY_STOP_ON,
  ZT_CHECKPOINT_EARLY_STOP_OFF
} zt_checkpoint_early_stop;

/* Selective checkpointing's policies (zt_checkpoint_policy, the decisions, the built-in
 * policies) are declared in zt/ops.h: the op dispatcher consults them. */

typedef struct zt_checkpoint_options {
  zt_checkpoint_early_stop early_stop; /* non-reentrant only */
  bool determinism_check;              /* non-reentrant: recompute must save the same count/shapes/dtypes */
  bool preserve_rng_state;             /* recompute from the forward's Philox state */
  zt_checkpoint_policy policy;         /* non-reentrant only; selective checkpointing (above) */
} zt_checkpoint_options;

/* early_stop DEFAULT, determinism_check and preserve_rng_state on, no policy. Passing NULL
 * options to the functions below means these. */
ZT_API zt_checkpoint_options zt_checkpoint_options_default(void);

/* The per-thread early-stop setting used by calls with EARLY_STOP_DEFAULT (on unless
 * changed). It is read when the checkpoint's forward runs, not in backward. Returns the
 * previous value: bool prev = zt_checkpoint_set_early_stop(false); ...; zt_checkpoint_set_early_stop(prev); */
ZT_API bool zt_checkpoint_set_early_stop(bool enable);

/* Non-reentrant checkpoint, built on saved-tensor hooks. With grad mode off it just runs
 * fn. Otherwise fn runs with a pack hook that keeps only an index per saved tensor; the
 * inputs are kept (as tensors saved by a no-op node, so an enclosing checkpoint manages
 * them too). The first unpack in a backward (graph task) recomputes fn once, with grad
 * on, the forward's RNG and autocast states (the caller's are put back afterwards) and the
 * saved-tensor hooks stack emptied (checkpoints met during recomputation still apply);
 * each recomputed tensor is freed as soon as it is unpacked, even with retain_graph, so
 * a second backward recomputes again. Early stop: recomputation is cut short once every
 * tensor the forward saved is recomputed (the pack hook returns an error tagged as a stop,
 * which fn passes up and the checkpoint swallows). Determinism check: a recomputation that
 * saves another number of tensors, or another shape/dtype at some index, fails backward
 * with ZT_STATUS_AUTOGRAD naming the index and the difference. Works with zt_backward,
 * zt_grad (also called inside fn), inputs that need no grad, nesting and several outputs.
 * Rules of PyTorch's Note "Nestable Checkpoint": 1 (saved tensors belong to the innermost
 * checkpoint), 2 (inner inputs are saved by the parent), 3 (recompute as if no checkpoint
 * were active), 4 (recomputed tensors freed on unpack), 5 (early stop), 6 (backward inside
 * fn). Recomputed tensors that a partial backward (zt_grad) never unpacks live until the
 * graph that saved them is freed, as in PyTorch. */
ZT_API ZT_NODISCARD zt_status zt_checkpoint(zt_checkpoint_fn fn, void *user_data, int n_in, zt_tensor *const *inputs, int n_out,
                        zt_tensor **outputs, const zt_checkpoint_options *opts);

/* Reentrant checkpoint: a custom function whose forward runs fn with grad off and keeps
 * the inputs; its backward recomputes fn with grad on (RNG and autocast states restored)
 * and runs a nested zt_backward through the recomputed outputs, which accumulates into
 * the .grad of every leaf used inside fn. Hence its limits, each a ZT_STATUS_AUTOGRAD error:
 *  - it cannot run under zt_grad (nor any backward that computes only some grads):
 *    found in backward;
 *  - with grad mode on, some input must require grad (else no grad could reach fn's
 *    parameters): found in forward;
 *  - some recomputed output must require grad: found in backward.
 * early_stop, determinism_check and policy do not apply (a policy is an error). */
ZT_API ZT_NODISCARD zt_status zt_checkpoint_reentrant(zt_checkpoint_fn fn, void *user_data, int n_in, zt_tensor *const *inputs,
                                  int n_out, zt_tensor **outputs, const zt_checkpoint_options *opts);

/* One stage of a sequential model: out = forward(self, x), a new tensor owned by the caller. */
typedef struct zt_checkpoint_stage {
  zt_status (*forward)(void *self, zt_tensor *x, zt_tensor **out);
  void *self;
} zt_checkpoint_stage;

/* Run stages[0..n) in order, as torch.utils.checkpoint.checkpoint_sequential: split them
 * into `segments` runs of n / segments stages (the last run takes the rest); every run
 * but the last is one zt_checkpoint region (non-reentrant, opts as for zt_checkpoint), the
 * last runs plainly. input is borrowed; *out is new. 1 <= segments <= n. The stages array
 * must stay valid until backward has run (recomputation calls the stages again). */
ZT_API ZT_NODISCARD zt_status zt_checkpoint_sequential(const zt_checkpoint_stage *stages, int n, int segments, zt_tensor *input,
                                   zt_tensor **out, const zt_checkpoint_options *opts);

#endif
