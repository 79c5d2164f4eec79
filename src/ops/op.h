/* Internal: the op registry entry and the dispatcher. One entry per op holds its shape
 * rule, forward and backward, and its kernel table per device type; the dispatcher
 * validates inputs (released storage, device, NULLs), picks the kernels of the inputs'
 * device, makes inputs contiguous, allocates outputs from the shape rule, runs forward
 * between the device backend's enter and exit hooks, and records a node when a grad is
 * needed.
 * Included by: src/ops only. */
#ifndef ZT_OPS_OP_H
#define ZT_OPS_OP_H

#include "autograd/node.h"
#include "kernel_table.h"
#include "zt/ops.h"

#define ZT_OP_MAX_ATTRS 12
typedef struct zt__op_attrs {
  int64_t i[ZT_OP_MAX_ATTRS];
  double f[4];
} zt__op_attrs;

typedef struct zt__op zt__op;

typedef struct zt__op_call {
  const zt__op *op;
  int n_in;
  zt_tensor **in;       /* contiguous (copies where the caller's were not), borrowed */
  zt_tensor *const *orig; /* the caller's tensors (views: forward may view these) */
  int n_out;
  zt__tensor_meta out_meta[ZT_OP_MAX_ATTRS]; /* filled by the shape rule */
  zt_tensor **out;      /* allocated by the dispatcher unless the op is a view op */
  zt__op_attrs attrs;
  const void *kernels;  /* the op's kernel table for the inputs' device (kernel_table.h) */
  zt_node *node;        /* NULL when no grad will be needed: nothing to save */
  struct zt__sac_entry *sac_capture; /* selective checkpointing records this op's saves */
} zt__op_call;

typedef struct zt__op_bwd {
  zt_node *node;
  const zt__op_attrs *attrs;
  int n_in;
  const zt__tensor_meta *in_meta;
  const bool *needs_input_grad;
  zt_tensor **grad_in;          /* set grad_in[i] (new tensor) where needs_input_grad[i] */
  int n_out;
  zt_tensor *const *grad_out;   /* contiguous, never NULL */
  const void *kernels;          /* the op's kernel table for the device forward ran on */
} zt__op_bwd;

enum {
  ZT_OP_FLAG_VIEW = 1u << 0,   /* forward makes outputs as views of orig inputs */
  ZT_OP_FLAG_ANY_DTYPE = 1u << 1, /* marks ops taking non-float inputs; shape rules check dtypes */
};

struct zt__op {
  const char *name;         /* "add"; the node is named "AddBackward" style by the dispatcher */
  const char *node_name;
  int n_in;                 /* -1: variable */
  unsigned flags;
  uint32_t nondiff_inputs;  /* bit i: input i never gets a grad (indices, targets) */
  /* Validate inputs and attrs, set c->n_out and c->out_meta. Errors name what was wrong. */
  zt_status (*shape)(zt__op_call *c);
  zt_status (*forward)(zt__op_call *c);
  zt_status (*backward)(zt__op_bwd *b);
  /* Per-device kernel slots: the op's kernel table (kernel_table.h) for each device type
   * that has kernels for it; an empty slot is a clear error at dispatch. */
  const void *kernels[ZT_DEVICE_TYPE_COUNT];
  /* Optional: the saved slots (bit i: slot i) backward reads for the grad of input i alone.
   * A split backward keeps for W only the slots of the weight inputs' grads; NULL: all. */
  uint64_t (*saves_read)(const zt__op_attrs *a, int input);
};

/* Run op. inputs may contain NULL only where the op allows it (optional bias). */
ZT_NODISCARD zt_status zt__op_run(const zt__op *op, int n_in, zt_tensor *const *in, const zt__op_attrs *attrs, zt_tensor **out);

/* Save a tensor in forward (no-op when c->node is NULL). */
ZT_NODISCARD zt_status zt__op_save(zt__op_call *c, const zt_tensor *t);
/* Saved tensor i in backward (borrowed until backward returns). */
ZT_NODISCARD zt_status zt__op_saved(zt__op_bwd *b, int i, zt_tensor **out);
/* New contiguous tensor for a grad, shaped like input i (tag: current). */
ZT_NODISCARD zt_status zt__op_grad_like_input(zt__op_bwd *b, int i, bool zero, zt_tensor **out);
ZT_NODISCARD zt_status zt__tensor_from_meta(const zt__tensor_meta *m, bool zero, zt_tensor **out);
/* Reduce g (broadcast result shape) to meta's shape by summing; new tensor. */
ZT_NODISCARD zt_status zt__sum_to_shape(const zt_tensor *g, const zt__tensor_meta *m, zt_tensor **out);
/* Normalise a dim (negative counts from the end); error names the op. */
ZT_NODISCARD zt_status zt__norm_dim(const char *op, int dim, int ndim, int *out);
/* Common shape-rule helpers. */
ZT_NODISCARD zt_status zt__check_float(const char *op, const zt_tensor *t, const char *what);
ZT_NODISCARD zt_status zt__check_same_dtype(const char *op, const zt_tensor *a, const zt_tensor *b);
/* Contiguous copy of any strided tensor (no autograd). */
ZT_NODISCARD zt_status zt__make_contiguous(const zt_tensor *t, zt_tensor **out);

#endif
