/* Graph nodes: creation, counted references (from output tensors and from the edges of
 * later nodes), edges to the producers of inputs, leaf accumulators, saved tensors.
 * Release is iterative so that freeing a very deep graph cannot overflow the stack. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/status_internal.h"
#include "core/tensor_internal.h"
#include "node.h"

static _Atomic int64_t g_seq_nr = 0;

zt_node *zt__node_new(const zt__node_vtable *vt, int n_inputs, int n_outputs) {
  zt_node *n = calloc(1, sizeof *n);
  if (!n) {
    ZT_ERR(ZT_STATUS_OOM, "out of host memory: %zu bytes for a graph node", sizeof *n);
    return NULL;
  }
  n->vt = vt;
  n->refcount = 1;
  n->seq_nr = atomic_fetch_add(&g_seq_nr, 1);
  n->n_inputs = n_inputs;
  n->n_outputs = n_outputs;
  n->next = calloc((size_t)(n_inputs ? n_inputs : 1), sizeof *n->next);
  n->in_meta = calloc((size_t)(n_inputs ? n_inputs : 1), sizeof *n->in_meta);
  n->out_meta = calloc((size_t)(n_outputs ? n_outputs : 1), sizeof *n->out_meta);
  n->tensor_hooks = calloc((size_t)(n_outputs ? n_outputs : 1), sizeof *n->tensor_hooks);
  if (!n->next || !n->in_meta || !n->out_meta || !n->tensor_hooks) {
    free(n->next);
    free(n->in_meta);
    free(n->out_meta);
    free(n->tensor_hooks);
    free(n);
    ZT_ERR(ZT_STATUS_OOM, "out of host memory for the edges of a graph node with %d inputs and %d outputs",
           n_inputs, n_outputs);
    return NULL;
  }
  return n;
}

void zt__node_retain(zt_node *n) {
  /* atomic: graphs built on different threads may share a leaf's accumulator */
  int prev = __atomic_fetch_add(&n->refcount, 1, __ATOMIC_RELAXED);
  ZT_ASSERT(prev > 0);
}

static void node_destroy_one(zt_node *n, zt_node ***stack, int *sp, int *cap) {
  for (int i = 0; i < n->n_inputs; i++) {
    zt_node *m = n->next[i].node;
    if (m && __atomic_sub_fetch(&m->refcount, 1, __ATOMIC_ACQ_REL) == 0) {
      if (*sp == *cap) {
        int grown_cap = *cap ? 2 * *cap : 64;
        zt_node **grown = realloc(*stack, sizeof **stack * (size_t)grown_cap);
        if (!grown) { /* out of host memory: free this one now, recursively (freeing cannot fail) */
          node_destroy_one(m, stack, sp, cap);
          continue;
        }
        *stack = grown;
        *cap = grown_cap;
      }
      (*stack)[(*sp)++] = m;
    }
  }
  zt__node_free_saved(n);
  if (n->vt->destroy) n->vt->destroy(n);
  if (n->payload_free) n->payload_free(n->payload);
  zt__hook_list_free(&n->pre_hooks);
  zt__hook_list_free(&n->post_hooks);
  zt__hook_list_free(&n->post_acc_hooks);
  for (int i = 0; i < (n->n_outputs ? n->n_outputs : 1); i++) zt__hook_list_free(&n->tensor_hooks[i]);
  free(n->tensor_hooks);
  free(n->saved);
  free(n->next);
  free(n->in_meta);
  free(n->out_meta);
  free(n);
}

void zt__node_release(zt_node *n) {
  if (!n) return;
  int left = __atomic_sub_fetch(&n->refcount, 1, __ATOMIC_ACQ_REL);
  ZT_ASSERT(left >= 0);
  if (left > 0) return;
  zt_node **stack = NULL;
  int sp = 0, cap = 0;
  node_destroy_one(n, &stack, &sp, &cap);
  while (sp > 0) node_destroy_one(stack[--sp], &stack, &sp, &cap);
  free(stack);
}

void zt__meta_of(const zt_tensor *t, zt__tensor_meta *m) {
  m->ndim = t->ndim;
  memcpy(m->shape, t->shape, sizeof m->shape);
  m->dtype = t->dtype;
  m->device = zt_tensor_device(t);
}

/* ------------------------------------------------ leaf accumulators */
/* The engine owns grad_outputs[0] and frees it right after apply. When nothing else
 * shares its storage, the leaf adopts those bytes (an alias; the engine's reference goes
 * away after apply) instead of copying them. */
static bool can_adopt(const zt_tensor *leaf, const zt_tensor *g, int refs_allowed) {
  return g->storage->refcount <= refs_allowed && !g->storage->external && !g->storage->released && g->offset == 0 &&
         zt_tensor_is_contiguous(g) && g->dtype == leaf->dtype && g->storage->nbytes == zt_tensor_nbytes(g) &&
         zt_shape_equal(g->ndim, g->shape, leaf->ndim, leaf->shape);
}

static zt_status acc_apply(zt_node *n, zt_tensor *const *grad_outputs, const bool *needs, zt_tensor **grad_inputs) {
  (void)needs, (void)grad_inputs;
  if (!grad_outputs[0]) return zt__accumulate_into_leaf(n, NULL, false); /* added as it came (engine) */
  bool adopt = n->leaf && !n->leaf->grad && can_adopt(n->leaf, grad_outputs[0], 1);
  zt_tensor *g = NULL;
  ZT_TRY(zt_tensor_alias(grad_outputs[0], &g));
  return zt__accumulate_into_leaf(n, g, adopt);
}
const zt__node_vtable zt__accumulate_grad_vt = {"AccumulateGrad", acc_apply, NULL, NULL};

zt_status zt_tensor_grad_accumulator(zt_tensor *leaf, zt_node **out) {
  if (!leaf || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_tensor_grad_accumulator: tensor or out is NULL");
  if (leaf->grad_fn || !leaf->requires_grad)
    return ZT_ERR(ZT_STATUS_AUTOGRAD, "only leaf tensors that require grad have a grad accumulator");
  if (!leaf->grad_acc) {
    zt_node *acc = zt__node_new(&zt__accumulate_grad_vt, 0, 1);
    if (!acc) return ZT_STATUS_OOM; /* message recorded by zt__node_new */
    acc->leaf = leaf;
    zt__meta_of(leaf, &acc->out_meta[0]);
    leaf->grad_acc = acc;
  }
  *out = leaf->grad_acc;
  return ZT_OK;
}

zt_status zt_tensor_set_eager_accumulation(zt_tensor *leaf, bool eager) {
  zt_node *acc = NULL;
  ZT_TRY(zt_tensor_grad_accumulator(leaf, &acc));
  acc->eager = eager;
  return ZT_OK;
}

/* dst += src for tensors of one shape (engine buffers and leaf grads). */
void zt__grad_add_into(zt_tensor *dst, const zt_tensor *src) {
  zt__dev_add_into(dst, src); /* the backend of dst's device */
  zt_tensor_bump_version(dst);
}

zt_status zt__accumulate_into_leaf(zt_node *acc, zt_tensor *grad, bool adopt) {
  zt_tensor *leaf = acc->leaf;
  if (!leaf) {
    zt_tensor_free(grad);
    return ZT_OK;
  }
  if (!grad) {
    /* already accumulated: only the hooks */
  } else if (!leaf->grad) {
    adopt = adopt || can_adopt(leaf, grad, 1);
    if (adopt) {
      zt_storage_retag(grad->storage, ZT_MEM_TAG_GRAD);
      leaf->grad = grad;
    } else {
      zt_tensor *g;
      zt_status s = zt_tensor_empty_tagged(leaf->ndim, leaf->shape, leaf->dtype, zt_tensor_device(leaf), ZT_MEM_TAG_GRAD, &g);
      if (s) {
        zt_tensor_free(grad);
        return s;
      }
      s = zt__dev_copy(g, grad);
      zt_tensor_free(grad);
      if (s) {
        zt_tensor_free(g);
        return s;
      }
      leaf->grad = g;
    }
    leaf->grad->requires_grad = false;
  } else {
    zt_tensor *lg = leaf->grad;
    zt_status s = ZT_OK;
    if (lg->storage->evicted)
      s = zt__storage_evicted_error(lg, "accumulating a gradient into a leaf's .grad");
    else if (lg->storage->released)
      s = ZT_ERR(ZT_STATUS_RELEASED, "cannot accumulate into a leaf's .grad whose storage was released; "
                                     "re-materialise it, or set .grad to NULL to start a new one");
    else if (!zt_shape_equal(lg->ndim, lg->shape, grad->ndim, grad->shape) || !zt_dtype_is_float(lg->dtype)) {
      char a[128], b[128];
      s = ZT_ERR(ZT_STATUS_SHAPE, "cannot accumulate a gradient of shape %s into a leaf's .grad of shape %s (%s)",
                 zt_shape_str(grad->ndim, grad->shape, a), zt_shape_str(lg->ndim, lg->shape, b),
                 zt_dtype_name(lg->dtype));
    }
    if (!s) zt__grad_add_into(lg, grad);
    zt_tensor_free(grad);
    ZT_TRY(s);
  }
  for (int i = 0; i < acc->post_acc_hooks.n; i++) {
    zt__hook_entry *e = &acc->post_acc_hooks.items[i];
    if (!e->removed) ZT_TRY(((zt_post_acc_hook_fn)e->fn)(leaf, e->user_data));
  }
  return ZT_OK;
}

/* ------------------------------------------------ edges and outputs */
zt_status zt__node_set_edge_from(zt_node *n, int i, zt_tensor *t) {
  ZT_ASSERT(i >= 0 && i < n->n_inputs);
  if (!t) return ZT_OK;
  zt__meta_of(t, &n->in_meta[i]);
  if (!t->requires_grad) return ZT_OK;
  zt_node *m = t->grad_fn;
  int nr = t->output_nr;
  if (!m) {
    ZT_TRY(zt_tensor_grad_accumulator(t, &m));
    nr = 0;
  }
  zt__node_retain(m);
  n->next[i] = (zt__edge){m, nr};
  return ZT_OK;
}

void zt__node_set_out_meta(zt_node *n, int i, const zt_tensor *t) { zt__meta_of(t, &n->out_meta[i]); }

void zt__node_attach_output(zt_node *n, int i, zt_tensor *t) {
  ZT_ASSERT(!t->grad_fn && !t->grad_acc);
  zt__node_retain(n);
  t->grad_fn = n;
  t->output_nr = i;
  t->requires_grad = true;
  zt__node_set_out_meta(n, i, t);
}

bool zt__any_requires_grad(int n, zt_tensor *const *ts) {
  for (int i = 0; i < n; i++)
    if (ts[i] && ts[i]->requires_grad) return true;
  return false;
}

static void tensor_autograd_release(zt_tensor *t) {
  if (t->grad_fn) zt__node_release(t->grad_fn);
  t->grad_fn = NULL;
  if (t->grad_acc) {
    t->grad_acc->leaf = NULL;
    zt__node_release(t->grad_acc);
    t->grad_acc = NULL;
  }
}
__attribute__((constructor)) static void install_release(void) { zt__tensor_autograd_release = tensor_autograd_release; }

/* ------------------------------------------------ public node queries */
zt_node *zt_tensor_grad_fn(const zt_tensor *t) { return t ? t->grad_fn : NULL; }
const char *zt_node_name(const zt_node *n) { return n->name ? n->name : n->vt->name; }
int zt_node_n_next(const zt_node *n) { return n->n_inputs; }
zt_node *zt_node_next(const zt_node *n, int i, int *input_nr) {
  if (i < 0 || i >= n->n_inputs) return NULL;
  if (input_nr) *input_nr = n->next[i].input_nr;
  return n->next[i].node;
}
int64_t zt_node_seq_nr(const zt_node *n) { return n->seq_nr; }
