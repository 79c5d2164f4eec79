/* OffloadModel's internals shared by its files (src/strategies/offload_model.c: slices,
 * residency, the recomputing mode, set-up; offload_model_step.c: the update;
 * offload_model_graph.c: the graph-keeping mode). Internal.
 * Included by: src/strategies' OffloadModel files only. */
#ifndef ZT_STRATEGIES_OFFLOAD_MODEL_INTERNAL_H
#define ZT_STRATEGIES_OFFLOAD_MODEL_INTERNAL_H

#include "zt/offload_model.h"

typedef enum slice_state { SLICE_OUT = 0, SLICE_LOADING, SLICE_IN } slice_state;

/* What one forward keeps for its backward. act[s * M + k]: the input of slice s >= 1 for chunk
 * k (evicted between uses); rng[s * M + k]: the RNG state slice s ran chunk k from. */
typedef struct pass {
  int64_t id;
  int M;
  zt_tensor **in, **tgt; /* [M]: chunk views of the caller's inputs and targets */
  zt_tensor **act;       /* [S * M] (slice 0's entries NULL) */
  zt_rng_state *rng;     /* [S * M] */
  double *loss;          /* [M] */
  zt_tensor **part;      /* [n_shared * M]: a shared parameter's contributions of later slices, per chunk */
  bool spent;            /* its backward ran (or failed) */
} pass;

struct zt_offload_model {
  zt_offload_units u;
  zt_store *store;
  zt_offload_model_options o;
  int S, K;
  int *first, *count;      /* [S]: units of each slice */
  int *sp, *sp_off;        /* parameters of slice s: sp[sp_off[s] .. sp_off[s + 1]) (ascending) */
  int *owned, *owned_off;  /* parameters whose first slice is s (the optimizer steps them there) */
  zt_param *owned_params;  /* the same as zt_param entries, for zt_grads_scale */
  int *p_first;            /* [n_params]: the first slice using the parameter */
  int *p_nslices;          /* [n_params]: how many slices use it */
  int *p_res;              /* [n_params]: loading or loaded slices using it */
  int *shared;             /* parameters used by several slices */
  int n_shared;
  int *shared_idx;         /* [n_params]: index into shared, or -1 */
  slice_state *state;
  int64_t *last_use, clock;
  zt_tensor *probe;        /* requires grad: needed by zt_backward, not by zt_grad */
  bool calibrated;         /* rng_blocks hold each slice's draws for chunks of cal_shape */
  int cal_ndim;
  int64_t cal_shape[ZT_MAX_DIMS];
  uint64_t *rng_blocks;    /* [S] */
  pass *pass;
  int64_t next_pass_id;
  double *ss;              /* [n_params]: sum of squares of the final grad of this step */
  bool *ss_set;
  bool *pending;            /* [n_params]: its update of the last step waits for its next load (lazy updates) */
  int n_pending;
  zt_optim *state_opt;      /* offload_optim_state: the optimizer whose state lives in the store (the last step's) */
  zt_optim *pend_opt;       /* the update that waits: optimizer, lr, clip factor (0: none) */
  double pend_lr, pend_coef;
  double last_loss;
  bool graph_last;         /* graph-keeping mode: this backward is the step's last (its grads are final); the
                            * first slice's are settled by the step */
  zt_offload_model_stats st;
  /* [S]: each slice's forward and backward seconds in the graph-keeping mode, updates at loads
   * left out (zt_offload_model_slice_times); bwd_mark: when the backward's current slice began */
  double *slice_fwd_s, *slice_bwd_s, bwd_mark, bwd_update_mark;
};

/* Slice s in RAM (waited for); then, with prefetch, slice next (-1: none) on its way. */
ZT_NODISCARD zt_status zt__om_slice_ensure(zt_offload_model *om, int s, int next);
/* After the backward that makes the grads of the parameters whose first slice is s final (the
 * step's last): averaged over the replicas (comm), then each one's sum of squares for the norm.
 * Slice s must be in RAM. */
ZT_NODISCARD zt_status zt__om_settle_owned(zt_offload_model *om, int s);
/* The graph-keeping mode (offload_model_graph.c): one chunk's forward with grad, slice after
 * slice, a sync node at each slice's input whose backward brings the slice before into RAM
 * (and the one before it on its way) once this slice's backward is done. */
ZT_NODISCARD zt_status zt__om_forward_graph(zt_offload_model *om, zt_tensor *x, zt_tensor *y, zt_tensor **loss);
/* The update of the parameters of slice s (in RAM) that wait for theirs (lazy updates;
 * offload_model_step.c); the last one to go counts the optimizer's step. */
ZT_NODISCARD zt_status zt__om_apply_pending(zt_offload_model *om, int s);
/* Parameter i's optimizer state when it lives in the store (offload_optim_state, made by an
 * update or zt_offload_model_evict_optim): its count and tensors (*ts; NULL and 0: none). */
int zt__om_optim_states(zt_offload_model *om, int i, zt_tensor *const **ts);
/* Whether parameter i's update runs in chunks (offload_model_step.c): its optimizer state lives
 * in the store, which reads and writes ranges, the parameter is on a device the host can touch,
 * and its moments take more than update_chunk_bytes. Its moments then never come into RAM
 * whole: loads and read-aheads leave them in the store. */
bool zt__om_update_chunked(zt_offload_model *om, int i);
/* Parameter i's optimizer state under opt (which becomes the store's, state_opt) made where
 * missing, one tensor at a time, each evicted (its bytes written) before the next is made: a
 * chunked parameter's moments are never in RAM together, not even zero-filled at its first
 * update. */
ZT_NODISCARD zt_status zt__om_chunk_states(zt_offload_model *om, zt_optim *opt, int i);
/* Parameter i's optimizer state to the store (no-op without one). */
ZT_NODISCARD zt_status zt__om_optim_evict(zt_offload_model *om, int i);
/* The graph-keeping backward's slice s is done now (its time since bwd_mark counted, updates
 * at loads left out) and the next one begins. */
void zt__om_backward_mark(zt_offload_model *om, int s);
/* Every slice being loaded (prefetched) waited for. */
ZT_NODISCARD zt_status zt__om_wait_loading(zt_offload_model *om);
/* Chunk k of M of x along dim 0 (a view; NULL x: NULL). */
ZT_NODISCARD zt_status zt__om_chunk_of(zt_tensor *x, int M, int k, zt_tensor **out);
/* The refusal of zt_grad, one message for both modes. */
ZT_NODISCARD zt_status zt__om_no_zt_grad(void);

#endif
