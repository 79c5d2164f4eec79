/* FSDP's internal state, shared by src/strategies/fsdp.c (set-up: units, flat parameters,
 * pieces), fsdp_run.c (forward/backward hooks, gathers, reductions, the state machine) and
 * fsdp_step.c (optimizer side: clipping, after-step, full parameters, stats).
 * Invariants: a unit's parameter tensors are views of its flat storage `full` (P elements,
 * f32, padded with zeros to a multiple of the shard group size G); this rank's slice
 * [r S, (r+1) S), S = P / G, lives in `shard` (the fp32 master values; a view of `full`
 * when the unit is aliased: G == 1 in f32). Every collective is issued in an order that is
 * the same on every rank (hook order is deterministic), so ranks never mismatch. In a unit's
 * backward each trainable parameter's .grad is a view of its slot in the unit's flat
 * gradient, so the engine accumulates straight into it (PyTorch FSDP's layout).
 * Included by: src/strategies' FSDP files only. */
#ifndef ZT_STRATEGIES_FSDP_INTERNAL_H
#define ZT_STRATEGIES_FSDP_INTERNAL_H

#include "zt/autograd.h"
#include "zt/fsdp.h"

typedef struct zt__fsdp_unit zt__fsdp_unit;
#define ZT__FSDP_MAX_SCALES 4 /* scalings of a gradient shard in the store deferred to its next load */

typedef struct zt__fsdp_param {
  zt__fsdp_unit *u;
  zt_tensor *t;         /* the model's tensor (borrowed), rebound to view u->full */
  char name[96];        /* full dotted name */
  bool decay, trainable;
  int64_t off, numel;   /* elements of the flat buffer */
  int mask;             /* index into the backward's grad mask (trainable only), else -1 */
  bool ready;           /* its grad arrived in this backward */
  bool pending;         /* a grad is folded into u->grad_full and not reduced yet */
  bool has_grad;        /* some rank gave it a grad since the last zero_grad: its piece has .grad */
  zt_tensor *grad_view; /* while u->grad_full lives: the .grad FSDP gave it (a view of its slot) */
  zt_hook_handle *hook; /* post-accumulate-grad */
} zt__fsdp_param;

struct zt__fsdp_unit {
  zt_fsdp *f;
  zt_module *m;
  char name[160];       /* the module's full name; "" for the root */
  bool is_root;
  int hook_id;          /* of its forward hooks on m (0: none added) */
  int n_ps, n_trainable;
  zt__fsdp_param *ps;
  int64_t numel, P, S;  /* unpadded, padded, per rank */
  zt_storage *full;     /* NULL for a unit without parameters */
  zt_tensor *full_t;    /* 1-D view of all P elements of full */
  zt_tensor *shard;     /* S elements: fp32 master values (PARAM) */
  bool aliased;         /* shard is a view of full: nothing is ever gathered or released */
  bool keep_until_end;  /* frozen parameters: the full values stay until the end of backward */
  /* gather */
  bool gathered;          /* full holds the values of the shard version below */
  uint64_t gathered_from; /* shard storage version full was gathered from (UINT64_MAX: none) */
  zt_comm_work *gather_work;
  zt_tensor *gather_send, *gather_recv; /* param dtype buffers of a low-precision gather */
  uint64_t gather_version;              /* shard version at the start of the gather in flight */
  uint64_t full_version;                /* full's version before the gather in flight */
  bool summoned;          /* zt_fsdp_gather_full_params: stays gathered until release */
  /* backward */
  zt_fsdp_state state;
  int n_ready;
  bool reduced;          /* its reduction started in this backward */
  zt_tensor *grad_full;  /* P f32 (GRAD): grads folded in this backward (or under no_sync) */
  zt_tensor *grad_shard; /* S f32 (GRAD): the reduced gradient until zero_grad */
  int pre_order, post_order; /* position in the first forward's pre/post-forward order, -1 unseen */
  /* the state store (fsdp_store.c) */
  int first_piece, n_pieces; /* its pieces: f->pieces[first_piece, first_piece + n_pieces) */
  uint64_t ss_id, ss_version; /* grad_ss is the sum of squares of the gradient shard storage with
                               * that id at that version (id 0: none) */
  double grad_ss;
  int n_gscale;              /* factors the evicted grad_shard is to be multiplied by, in order */
  double gscale[ZT__FSDP_MAX_SCALES];
};

/* A reduction in flight: in (P, reduce dtype) reduce-scattered into out (S), then, under a
 * replicate group, all-reduced across it; finished into the unit's grad_shard. */
typedef struct zt__fsdp_reduction {
  zt__fsdp_unit *u;
  zt_tensor *in, *out;
  zt_comm_work *work;
} zt__fsdp_reduction;
#define ZT__FSDP_MAX_PENDING 2 /* reductions in flight at once: bounds the full grads alive */

struct zt_fsdp {
  zt_comm *comm;                   /* every rank (borrowed) */
  zt_comm *shard_comm, *rep_comm;  /* shard group (size G) and replicas (NULL when one) */
  bool own_shard, own_rep;
  zt_module *root_m;
  zt_fsdp_options o;
  int G, world;
  bool inited;
  int n_units;
  zt__fsdp_unit **units; /* wrapped modules in wrap order until init; module order then, root last */
  /* the optimizer's view */
  int n_pieces;
  zt_param *piece_params;
  zt_fsdp_piece *pieces;
  zt__fsdp_param **piece_of; /* the parameter behind each piece */
  int n_mask;                /* trainable parameters */
  bool sync;
  int64_t cb_task;           /* graph task whose end-of-backward callback is queued; -1 none */
  int fwd_depth;             /* units inside their forward (not counting recomputation) */
  zt_autocast_state autocast_prev; /* low-precision params: the state before the outermost forward */
  bool order_done;           /* the first forward's order is recorded */
  int n_pre, n_post;
  zt__fsdp_unit **pre_seq, **post_seq;
  zt__fsdp_reduction pend[ZT__FSDP_MAX_PENDING + 1];
  int n_pend;
  double pre_div, post_div;  /* gradient divide factors before and after the reduction */
  zt_dp_stats stats;
  zt_device dev;             /* the parameters' device: flat buffers live there */
  bool have_dev;
  zt_optim *state_opt;       /* the optimizer whose state lives in o.state_store (zt_fsdp_offload_optim) */
};

/* A unit's name for messages: its module's, "(root)" for the root (fsdp_run.c). */
const char *zt__fsdp_unit_label(const zt__fsdp_unit *u);

/* fsdp_run.c */
ZT_NODISCARD zt_status zt__fsdp_pre_forward(zt_module *m, void *user_data);
ZT_NODISCARD zt_status zt__fsdp_post_forward(zt_module *m, int n_outputs, zt_tensor *const *outputs, void *user_data);
ZT_NODISCARD zt_status zt__fsdp_grad_ready(zt_tensor *leaf, void *user_data);
ZT_NODISCARD zt_status zt__fsdp_start_gather(zt__fsdp_unit *u);
ZT_NODISCARD zt_status zt__fsdp_finish_gather(zt__fsdp_unit *u);
ZT_NODISCARD zt_status zt__fsdp_gather(zt__fsdp_unit *u);
ZT_NODISCARD zt_status zt__fsdp_reshard(zt__fsdp_unit *u);
/* Whether the unit's full values are current (gathered from the shard as it is now). */
bool zt__fsdp_fresh(const zt__fsdp_unit *u);
/* Free the unit's reduced gradient shard (set_to_none) and what is known of it. */
void zt__fsdp_drop_grad_shard(zt__fsdp_unit *u);
/* Free the unit's flat gradient (and the parameters' views of it) and its pending flags. */
void zt__fsdp_drop_grads(zt__fsdp_unit *u);
/* Finish what a backward that failed left behind (its end-of-backward never ran). */
void zt__fsdp_recover(zt_fsdp *f);
/* The sum of squares (f64) of the valid (unpadded) part of u's gradient shard: taken now (the
 * shard in RAM) unless known for the shard as it is (its storage and version, no scaling
 * deferred), which is then returned without reading it. */
double zt__fsdp_grad_ss(zt__fsdp_unit *u);
/* Whether u->grad_ss is that of u's gradient shard as it is. */
bool zt__fsdp_ss_known(const zt__fsdp_unit *u);

/* fsdp_store.c: the state store (o.state_store; each is a no-op without one). The shard and
 * the gradient shard of a unit come in with a restore that keeps the store's copy, so sending
 * back what did not change writes nothing. */
bool zt__fsdp_stored(const zt_fsdp *f);
/* u's shard readable (its read ahead waited for, or read now). */
ZT_NODISCARD zt_status zt__fsdp_shard_in(zt__fsdp_unit *u);
/* u's shard back to the store (written behind when it changed). */
ZT_NODISCARD zt_status zt__fsdp_shard_out(zt__fsdp_unit *u);
/* Start reading u's shard (NULL, or in RAM: nothing); a failure shows at zt__fsdp_shard_in. */
void zt__fsdp_shard_ahead(zt__fsdp_unit *u);
/* u's gradient shard (made: u->grad_shard) readable with its deferred scalings applied. */
ZT_NODISCARD zt_status zt__fsdp_grad_in(zt__fsdp_unit *u);
/* u's gradient shard's sum of squares taken (unless current) and the shard to the store. */
ZT_NODISCARD zt_status zt__fsdp_grad_out(zt__fsdp_unit *u);
/* Multiply u's gradient shard by factor: now when in RAM, else at its next load. */
ZT_NODISCARD zt_status zt__fsdp_grad_scale(zt__fsdp_unit *u, double factor);

/* Collective on comm; counted in f's stats (kind: the counter to bump, NULL for none). */
ZT_NODISCARD zt_status zt__fsdp_all_reduce(zt_fsdp *f, zt_comm *c, zt_tensor *t, int64_t *kind);

#endif
