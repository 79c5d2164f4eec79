/* Internal: the graph node layout shared by the engine, the op dispatcher and custom
 * functions. A node runs the backward of one forward call: it receives one grad per
 * forward output and produces one grad per forward input (edge).
 * Included by: src/autograd and the op dispatcher (src/ops). */
#ifndef ZT_AUTOGRAD_NODE_H
#define ZT_AUTOGRAD_NODE_H

#include "zt/autograd.h"

typedef struct zt__edge {
  zt_node *node; /* counted reference; NULL: this input needs no grad */
  int input_nr;  /* which output slot of node the grad goes to */
} zt__edge;

typedef struct zt__tensor_meta {
  int ndim;
  int64_t shape[ZT_MAX_DIMS];
  zt_dtype dtype;
  zt_device device;
} zt__tensor_meta;

/* A list of (fn, user_data) hooks. Handles point back at their entry. */
typedef struct zt__hook_entry {
  void *fn;
  void *user_data;
  zt_hook_handle *handle; /* may be NULL */
  bool removed;
} zt__hook_entry;
typedef struct zt__hook_list {
  zt__hook_entry *items;
  int n, cap;
} zt__hook_list;
ZT_NODISCARD zt_status zt__hook_list_add(zt__hook_list *l, void *fn, void *user_data, zt_hook_handle **handle);
void zt__hook_list_free(zt__hook_list *l); /* detaches live handles */

typedef struct zt__saved {
  zt_tensor *tensor;      /* no hooks: an alias holding the storage */
  void *packed;           /* hooks: the packed object */
  zt_saved_tensor_hooks hooks;
  bool hooked;
  uint64_t version;       /* storage version at save time */
  zt__tensor_meta meta;   /* shape/dtype at save time: unpack must give the same */
  zt_tensor *unpacked;    /* set during backward, freed after apply (kept for W by a split backward) */
  bool released;          /* freed at the end of a split backward's B: only B read it */
} zt__saved;

typedef struct zt__node_vtable {
  const char *name;
  /* grad_outputs: n_outputs contiguous grads (zeros where none arrived).
   * Sets grad_inputs[i] (new tensor) for each i with needs_input_grad[i]. */
  zt_status (*apply)(zt_node *n, zt_tensor *const *grad_outputs, const bool *needs_input_grad,
                     zt_tensor **grad_inputs);
  void (*destroy)(zt_node *n); /* optional: free the payload */
  /* optional: the saved slots (bit i: slot i; slots >= 64 always count) that apply reads
   * to compute the grads of the inputs in needs; NULL: every slot */
  uint64_t (*saved_read)(const zt_node *n, const bool *needs);
} zt__node_vtable;

struct zt_node {
  const zt__node_vtable *vt;
  const char *name; /* overrides vt->name when set (ops use their own names) */
  int refcount;
  int64_t seq_nr;
  int n_inputs;
  zt__edge *next;
  zt__tensor_meta *in_meta;
  int n_outputs;
  zt__tensor_meta *out_meta;
  zt__hook_list pre_hooks, post_hooks;
  zt__hook_list *tensor_hooks; /* per output: hooks of the non-leaf tensor it made */
  zt__saved *saved;
  int n_saved, cap_saved;
  bool saved_freed; /* backward ran without retain_graph */
  void *payload;
  void (*payload_free)(void *);
  /* leaf accumulators */
  zt_tensor *leaf;            /* AccumulateGrad only: back pointer, NULL once freed */
  bool eager;                 /* AccumulateGrad: add contributions into .grad as they come */
  zt__hook_list post_acc_hooks;
};

/* Create a node with n_inputs edges (all empty) and n_outputs output slots; NULL when out of
 * host memory (ZT_STATUS_OOM recorded, naming the size). */
zt_node *zt__node_new(const zt__node_vtable *vt, int n_inputs, int n_outputs);
void zt__node_retain(zt_node *n);
void zt__node_release(zt_node *n);
/* Point edge i of n at the grad path of t (its grad_fn, or its accumulator if it is a
 * leaf that requires grad); records t's meta as input meta i. */
ZT_NODISCARD zt_status zt__node_set_edge_from(zt_node *n, int i, zt_tensor *t);
void zt__node_set_out_meta(zt_node *n, int i, const zt_tensor *t);
/* Make t an output of n (sets grad_fn, output_nr, requires_grad). */
void zt__node_attach_output(zt_node *n, int i, zt_tensor *t);
void zt__node_free_saved(zt_node *n);
/* Free the unpacked tensors of the slots not in keep (after apply). */
void zt__node_drop_unpacked_except(zt_node *n, uint64_t keep);
/* The slots that computing grads for needs reads (vtable saved_read, else all). */
uint64_t zt__node_saved_read(const zt_node *n, const bool *needs);
/* Release the saved slots not in keep (their unpacked tensors too); kept slots keep their
 * unpacked tensor, for W to read without unpacking again. */
void zt__node_release_saved_except(zt_node *n, uint64_t keep);
bool zt__any_requires_grad(int n, zt_tensor *const *ts);
void zt__meta_of(const zt_tensor *t, zt__tensor_meta *m);

/* Leaf accumulation (engine). Takes ownership of grad. adopt: the leaf may keep grad's
 * storage as its .grad (the caller knows no one else will write it). */
/* grad NULL: the grad was added into .grad already (the engine's eager accumulation); only
 * the post-accumulate-grad hooks run. */
ZT_NODISCARD zt_status zt__accumulate_into_leaf(zt_node *acc, zt_tensor *grad, bool adopt);
extern const zt__node_vtable zt__accumulate_grad_vt;

/* Hooks registered on a tensor before it had a grad_fn/accumulator (not possible:
 * registration creates the accumulator for leaves). */
ZT_NODISCARD zt_status zt__run_tensor_hooks(zt__hook_list *l, zt_tensor **grad);

#endif
