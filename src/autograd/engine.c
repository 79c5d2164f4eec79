/* The backward engine. One call is a graph task: discover the nodes reachable from the
 * roots, decide which run (all, for zt_backward; only those leading to the requested
 * inputs, for zt_grad), count dependencies, then run ready nodes highest sequence number
 * first (the reverse of forward order), summing grads into per-node input buffers.
 * Order is deterministic, so results are bitwise reproducible. Nested backward calls
 * (from hooks or custom functions) are their own graph tasks. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/grow.h"
#include "core/status_internal.h"
#include "core/tensor_internal.h"
#include "node.h"

void zt__grad_add_into(zt_tensor *dst, const zt_tensor *src);

typedef struct cb_entry {
  zt_callback_fn fn;
  void *user_data;
} cb_entry;

typedef struct graph_task {
  int64_t id;
  cb_entry *cbs;
  int n_cbs, cap_cbs;
} graph_task;

static _Thread_local graph_task *tl_task = NULL;
static _Atomic int64_t g_task_counter = 0;

int64_t zt_autograd_graph_task_id(void) { return tl_task ? tl_task->id : -1; }

zt_status zt_autograd_queue_callback(zt_callback_fn fn, void *user_data) {
  if (!fn) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_autograd_queue_callback: fn is NULL");
  if (!tl_task)
    return ZT_ERR(ZT_STATUS_STATE,
                  "zt_autograd_queue_callback: no backward is running on this thread; callbacks can only be queued "
                  "during backward (from hooks or node functions)");
  cb_entry *c = zt__grow(tl_task->cbs, &tl_task->cap_cbs, tl_task->n_cbs + 1, sizeof *c, "backward's callbacks");
  if (!c) return ZT_STATUS_OOM;
  tl_task->cbs = c;
  tl_task->cbs[tl_task->n_cbs++] = (cb_entry){fn, user_data};
  return ZT_OK;
}

/* ------------------------------------------------ split backward's record (B -> W) */
/* One node's weight-grad work: a B node whose apply still owes the grads of its weight
 * edges (partial), or a root that leads only to weights (whole: it runs in W as in a plain
 * backward, hooks included). */
typedef struct deferred_item {
  zt_node *node;    /* retained */
  zt_tensor **bufs; /* its n_outputs output grads: as apply saw them in B (partial), the root grads (whole) */
  bool *wmask;      /* partial: the edges W computes */
  bool whole;
} deferred_item;

struct zt_deferred {
  int64_t task_id; /* B's graph task: W runs as the same task */
  bool retain_graph, spent;
  deferred_item *items; /* in B's run order */
  int n_items, cap_items;
  cb_entry *cbs; /* end-of-backward callbacks queued during B: they run at the end of W */
  int n_cbs, cap_cbs;
};

/* ------------------------------------------------ per-task node info (hash map) */
typedef struct node_info {
  zt_node *node;
  int deps;           /* grads still to come from running nodes */
  bool needed;        /* runs (or, for capture targets, is processed) */
  bool runs;          /* apply is called */
  bool queued;
  zt_tensor **buf;    /* n_outputs input buffers */
  int capture_first;  /* index into captures, -1 if none */
  bool eager;         /* leaf accumulator: contributions went straight into the leaf's .grad */
  const bool *wmask;  /* W of a split backward: a B node's weight edges (its hooks ran in B) */
} node_info;

typedef struct task_graph {
  node_info *infos;
  int n, cap;
  int *table; /* open addressing: index+1 into infos, 0 empty */
  int table_cap;
} task_graph;

static size_t ptr_hash(const void *p) {
  uintptr_t x = (uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return (size_t)x;
}

static int graph_find(const task_graph *g, const zt_node *n) {
  if (!g->table_cap) return -1;
  size_t mask = (size_t)g->table_cap - 1;
  for (size_t h = ptr_hash(n) & mask;; h = (h + 1) & mask) {
    int v = g->table[h];
    if (!v) return -1;
    if (g->infos[v - 1].node == n) return v - 1;
  }
}

static void table_insert(task_graph *g, int idx) {
  size_t mask = (size_t)g->table_cap - 1;
  size_t h = ptr_hash(g->infos[idx].node) & mask;
  while (g->table[h]) h = (h + 1) & mask;
  g->table[h] = idx + 1;
}

/* The index of n, added; -1 when out of host memory (ZT_STATUS_OOM recorded; g unchanged). */
static int graph_add(task_graph *g, zt_node *n) {
  node_info *infos = zt__grow(g->infos, &g->cap, g->n + 1, sizeof *infos, "backward's node list");
  if (!infos) return -1;
  g->infos = infos;
  if (2 * (g->n + 1) > g->table_cap) {
    int cap = g->table_cap ? 2 * g->table_cap : 128;
    int *table = calloc((size_t)cap, sizeof *table);
    if (!table) {
      ZT_ERR(ZT_STATUS_OOM, "out of host memory: %zu bytes for backward's node table", sizeof *table * (size_t)cap);
      return -1;
    }
    free(g->table);
    g->table = table;
    g->table_cap = cap;
    for (int i = 0; i < g->n; i++) table_insert(g, i);
  }
  g->infos[g->n] = (node_info){.node = n, .capture_first = -1};
  /* the task holds a reference: hooks and callbacks may free the tensors that own the
   * graph while it runs */
  zt__node_retain(n);
  table_insert(g, g->n);
  return g->n++;
}

/* Push a node index on discover's stack. */
static bool stack_push(int **stack, int *sp, int *cap, int idx) {
  int *grown = zt__grow(*stack, cap, *sp + 1, sizeof *grown, "backward's graph walk");
  if (!grown) return false;
  *stack = grown;
  (*stack)[(*sp)++] = idx;
  return true;
}

/* Discover every node reachable from the roots (iterative DFS). Out of host memory: OOM,
 * with the nodes found so far in g (each retained, released with g). */
static zt_status discover(task_graph *g, int n_roots, zt_node *const *roots) {
  int *stack = NULL, sp = 0, cap = 0;
  zt_status s = ZT_OK;
  for (int r = 0; r < n_roots && !s; r++) {
    if (!roots[r] || graph_find(g, roots[r]) >= 0) continue;
    int idx = graph_add(g, roots[r]);
    if (idx < 0 || !stack_push(&stack, &sp, &cap, idx)) s = ZT_STATUS_OOM;
    while (sp && !s) {
      zt_node *n = g->infos[stack[--sp]].node;
      for (int i = 0; i < n->n_inputs && !s; i++) {
        zt_node *m = n->next[i].node;
        if (!m || graph_find(g, m) >= 0) continue;
        int j = graph_add(g, m);
        if (j < 0 || !stack_push(&stack, &sp, &cap, j)) s = ZT_STATUS_OOM;
      }
    }
  }
  free(stack);
  return s;
}

/* zt_grad: a node is needed if it is a capture target or leads to one. Visit nodes in
 * increasing sequence number: an edge goes to a node created earlier (or to a leaf
 * accumulator, which has no edges), so one pass settles everything; the loop repeats
 * only if some graph breaks that rule. */
typedef struct seq_idx {
  int64_t seq;
  int idx;
} seq_idx;
static int cmp_seq(const void *a, const void *b) {
  const seq_idx *x = a, *y = b;
  return (x->seq > y->seq) - (x->seq < y->seq);
}

static zt_status mark_needed_for_capture(task_graph *g) {
  size_t bytes = sizeof(seq_idx) * (size_t)(g->n ? g->n : 1);
  seq_idx *order = malloc(bytes);
  if (!order) return ZT_ERR(ZT_STATUS_OOM, "out of host memory: %zu bytes for zt_grad's node order", bytes);
  for (int k = 0; k < g->n; k++) order[k] = (seq_idx){g->infos[k].node->seq_nr, k};
  qsort(order, (size_t)g->n, sizeof *order, cmp_seq);
  bool changed = true;
  while (changed) {
    changed = false;
    for (int o = 0; o < g->n; o++) {
      node_info *in = &g->infos[order[o].idx];
      if (in->runs) continue;
      for (int i = 0; i < in->node->n_inputs; i++) {
        zt_node *m = in->node->next[i].node;
        if (!m) continue;
        node_info *mi = &g->infos[graph_find(g, m)];
        if (mi->needed) {
          in->needed = in->runs = true;
          changed = true;
          break;
        }
      }
    }
  }
  free(order);
  return ZT_OK;
}

/* ------------------------------------------------ ready queue: max-heap on priority
 * Leaf accumulators first (as PyTorch's AccumulateGrad: a leaf's .grad, and its
 * post-accumulate-grad hooks, come as soon as its last contribution is in, which is when
 * FSDP and DDP start reducing it), then the highest sequence number (the reverse of
 * forward order). Accumulators were made whenever their leaf first needed one, so their
 * sequence numbers only order them among themselves. The order never changes values: each
 * node runs once, on its fully summed input buffer. */
typedef struct heap {
  int *items;
  int n, cap;
} heap;

static bool before(const task_graph *g, int a, int b) {
  const zt_node *x = g->infos[a].node, *y = g->infos[b].node;
  bool ax = x->vt == &zt__accumulate_grad_vt, ay = y->vt == &zt__accumulate_grad_vt;
  if (ax != ay) return ax;
  return x->seq_nr > y->seq_nr;
}

static zt_status heap_push(heap *h, const task_graph *g, int idx) {
  int *items = zt__grow(h->items, &h->cap, h->n + 1, sizeof *items, "backward's ready queue");
  if (!items) return ZT_STATUS_OOM;
  h->items = items;
  int i = h->n++;
  h->items[i] = idx;
  while (i > 0) {
    int p = (i - 1) / 2;
    if (!before(g, h->items[i], h->items[p])) break;
    int t = h->items[p];
    h->items[p] = h->items[i];
    h->items[i] = t;
    i = p;
  }
  return ZT_OK;
}

static int heap_pop(heap *h, const task_graph *g) {
  int top = h->items[0];
  h->items[0] = h->items[--h->n];
  int i = 0;
  for (;;) {
    int l = 2 * i + 1, r = l + 1, m = i;
    if (l < h->n && before(g, h->items[l], h->items[m])) m = l;
    if (r < h->n && before(g, h->items[r], h->items[m])) m = r;
    if (m == i) break;
    int t = h->items[m];
    h->items[m] = h->items[i];
    h->items[i] = t;
    i = m;
  }
  return top;
}

/* ------------------------------------------------ running */
typedef struct capture {
  zt_node *node;
  int slot;
  int input_index; /* index into the caller's inputs */
  int next_same_node;
} capture;

/* Grads handed to nodes and summed in buffers are contiguous and readable; hooks and
 * backward functions may return any view, so normalise here (takes ownership). */
static zt_status normalize_grad(zt_tensor **t) {
  if ((*t)->storage->released) {
    zt_tensor_free(*t);
    *t = NULL;
    return ZT_ERR(ZT_STATUS_RELEASED, "a gradient produced during backward has released storage");
  }
  if (zt_tensor_is_contiguous(*t)) return ZT_OK;
  zt_tensor *c;
  zt_status s = zt_tensor_clone_data(*t, ZT_MEM_TAG_TEMP, &c);
  zt_tensor_free(*t);
  *t = s ? NULL : c;
  return s;
}

/* Add grad (owned) into buffer slot. */
static zt_status buffer_add(zt_tensor **slot, zt_tensor *grad) {
  ZT_TRY(normalize_grad(&grad));
  if (!*slot) {
    *slot = grad;
    return ZT_OK;
  }
  /* sum in place only into bytes nobody else can see */
  if ((*slot)->storage->refcount > 1 || (*slot)->storage->external) {
    zt_tensor *c;
    zt_status s = zt_tensor_clone_data(*slot, ZT_MEM_TAG_TEMP, &c);
    if (s) {
      zt_tensor_free(grad);
      return s;
    }
    zt_tensor_free(*slot);
    *slot = c;
  }
  zt__grad_add_into(*slot, grad);
  zt_tensor_free(grad);
  return ZT_OK;
}

static bool hooks_active(const zt__hook_list *l) {
  for (int i = 0; i < l->n; i++)
    if (!l->items[i].removed) return true;
  return false;
}

/* A leaf accumulator that takes each contribution as it comes (zt_tensor_set_eager_accumulation),
 * adding it into the leaf's existing .grad instead of holding an input buffer until the last
 * one arrives (which, for a weight used early and late in backward, such as a tied
 * embedding, keeps a gradient-sized buffer alive through the whole backward), when nothing
 * needs the summed gradient first (no tensor, pre or post hooks on it, not captured by
 * zt_grad). Post-accumulate-grad hooks still run once, when the last contribution is in. */
static bool eager_accumulator(const node_info *in) {
  const zt_node *n = in->node;
  if (n->vt != &zt__accumulate_grad_vt || !n->eager || !in->runs || in->capture_first >= 0 || in->buf[0])
    return false;
  if (in->eager) return true;
  const zt_tensor *leaf = n->leaf, *g = leaf ? leaf->grad : NULL;
  if (!g || g->storage->released || !zt_dtype_is_float(g->dtype) ||
      !zt_shape_equal(g->ndim, g->shape, leaf->ndim, leaf->shape))
    return false;
  return !hooks_active(&n->tensor_hooks[0]) && !hooks_active(&n->pre_hooks) && !hooks_active(&n->post_hooks);
}

static zt_status eager_add(node_info *in, zt_tensor *grad) {
  ZT_TRY(normalize_grad(&grad));
  zt_tensor *leaf = in->node->leaf;
  zt_status s = ZT_OK;
  if (!leaf->grad) { /* a hook dropped it since: start again from zeros */
    s = zt_tensor_empty_tagged(leaf->ndim, leaf->shape, leaf->dtype, zt_tensor_device(leaf), ZT_MEM_TAG_GRAD,
                               &leaf->grad);
    if (!s) zt__dev_fill(leaf->grad, 0.0);
  }
  if (!s) zt__grad_add_into(leaf->grad, grad);
  zt_tensor_free(grad);
  in->eager = true;
  return s;
}

static zt_status check_grad(const zt_node *n, int i, const zt_tensor *g) {
  const zt__tensor_meta *m = &n->in_meta[i];
  if (!zt_shape_equal(g->ndim, g->shape, m->ndim, m->shape) || g->dtype != m->dtype) {
    char a[128], b[128];
    return ZT_ERR(ZT_STATUS_AUTOGRAD,
                  "%s returned a gradient of shape %s (%s) for input %d, which has shape %s (%s); a backward must "
                  "return grads shaped like its inputs",
                  zt_node_name(n), zt_shape_str(g->ndim, g->shape, a), zt_dtype_name(g->dtype), i,
                  zt_shape_str(m->ndim, m->shape, b), zt_dtype_name(m->dtype));
  }
  return ZT_OK;
}

/* After a pre-hook: every grad output is still there and shaped like the output. */
static zt_status check_grad_outputs(const zt_node *n, zt_tensor **bufs) {
  for (int k = 0; k < n->n_outputs; k++) {
    const zt__tensor_meta *m = &n->out_meta[k];
    if (!bufs[k])
      return ZT_ERR(ZT_STATUS_AUTOGRAD, "a pre-hook of %s left grad output %d NULL; replace it, do not remove it",
                    zt_node_name(n), k);
    if (!zt_shape_equal(bufs[k]->ndim, bufs[k]->shape, m->ndim, m->shape) || bufs[k]->dtype != m->dtype) {
      char a[128], b[128];
      return ZT_ERR(ZT_STATUS_SHAPE, "a pre-hook of %s replaced grad output %d of shape %s (%s) with one of shape %s (%s)",
                    zt_node_name(n), k, zt_shape_str(m->ndim, m->shape, a), zt_dtype_name(m->dtype),
                    zt_shape_str(bufs[k]->ndim, bufs[k]->shape, b), zt_dtype_name(bufs[k]->dtype));
    }
    ZT_TRY(normalize_grad(&bufs[k]));
  }
  return ZT_OK;
}

static void free_bufs(zt_tensor **bufs, int n) {
  if (!bufs) return;
  for (int k = 0; k < n; k++) zt_tensor_free(bufs[k]);
  free(bufs);
}

static zt_status defer_partial(zt_deferred *d, zt_node *n, zt_tensor **bufs, const bool *needs, bool retain_graph,
                               bool *deferred);

static zt_status run_node(task_graph *g, int idx, heap *ready, capture *caps, zt_tensor **cap_out,
                          bool retain_graph, zt_deferred *split) {
  node_info *in = &g->infos[idx];
  zt_node *n = in->node;
  zt_status s = ZT_OK;
  bool partial = in->wmask != NULL; /* W: output grads, hooks and captures were B's */
  /* Missing grads become zeros; then tensor hooks, then captures. An eager accumulator has
   * its grad in the leaf already and only runs its post-accumulate-grad hooks. */
  for (int k = 0; k < n->n_outputs && !in->eager && !partial; k++) {
    if (!in->buf[k]) ZT_TRY(zt_tensor_zeros(n->out_meta[k].ndim, n->out_meta[k].shape, n->out_meta[k].dtype,
                                            n->out_meta[k].device, &in->buf[k]));
    ZT_TRY(zt__run_tensor_hooks(&n->tensor_hooks[k], &in->buf[k]));
    ZT_TRY(normalize_grad(&in->buf[k]));
  }
  for (int c = in->capture_first; c >= 0; c = caps[c].next_same_node)
    ZT_TRY(zt_tensor_clone_data(in->buf[caps[c].slot], ZT_MEM_TAG_TEMP, &cap_out[caps[c].input_index]));
  /* apply may run a nested backward: own the buffers here, not in the task's table */
  zt_tensor **bufs = in->buf;
  in->buf = NULL;
  if (!in->runs) {
    free_bufs(bufs, n->n_outputs);
    return ZT_OK;
  }

  for (int k = 0; s == ZT_OK && !partial && k < n->pre_hooks.n; k++) {
    zt__hook_entry e = n->pre_hooks.items[k];
    if (!e.removed) s = ((zt_node_pre_hook_fn)e.fn)(n, n->n_outputs, bufs, e.user_data);
    if (s == ZT_OK) s = check_grad_outputs(n, bufs);
  }
  if (s) {
    free_bufs(bufs, n->n_outputs);
    return s;
  }
  int ni = n->n_inputs;
  bool *needs = calloc((size_t)(ni ? ni : 1), sizeof *needs);
  zt_tensor **gin = calloc((size_t)(ni ? ni : 1), sizeof *gin);
  if (!needs || !gin) {
    free(needs);
    free(gin);
    free_bufs(bufs, n->n_outputs);
    return ZT_ERR(ZT_STATUS_OOM, "out of host memory: the input-grad lists of a node with %d inputs", ni);
  }
  for (int i = 0; i < ni; i++) {
    zt_node *m = n->next[i].node;
    if (partial) {
      needs[i] = in->wmask[i];
    } else if (m) {
      int j = graph_find(g, m);
      needs[i] = j >= 0 && g->infos[j].needed;
    }
  }
  s = n->vt->apply(n, bufs, needs, gin);
  /* B of a split backward: the weight edges' work waits for W, with the output grads and
   * what it reads (bufs is then the record's) */
  bool deferred = false;
  if (!s && split) s = defer_partial(split, n, bufs, needs, retain_graph, &deferred);
  if (deferred) bufs = NULL;
  if (!deferred) zt_node_drop_unpacked(n);
  for (int i = 0; i < ni; i++)
    if (gin[i] && !needs[i]) {
      zt_tensor_free(gin[i]);
      gin[i] = NULL;
    }
  for (int i = 0; i < ni && s == ZT_OK; i++)
    if (gin[i]) s = check_grad(n, i, gin[i]);
  for (int k = 0; s == ZT_OK && !partial && k < n->post_hooks.n; k++) {
    zt__hook_entry e = n->post_hooks.items[k];
    if (!e.removed) s = ((zt_node_post_hook_fn)e.fn)(n, ni, gin, n->n_outputs, bufs, e.user_data);
    /* a post-hook may replace grad inputs */
    for (int i = 0; i < ni && s == ZT_OK; i++)
      if (gin[i]) s = check_grad(n, i, gin[i]);
  }
  free_bufs(bufs, n->n_outputs);
  if (!retain_graph && n->n_saved > 0 && !deferred) {
    zt__node_free_saved(n);
    n->saved_freed = true;
  }
  for (int i = 0; i < ni; i++) {
    if (!needs[i]) {
      zt_tensor_free(gin[i]);
      continue;
    }
    node_info *mi = &g->infos[graph_find(g, n->next[i].node)];
    if (s == ZT_OK && gin[i]) {
      s = eager_accumulator(mi) ? eager_add(mi, gin[i]) : buffer_add(&mi->buf[n->next[i].input_nr], gin[i]);
      gin[i] = NULL;
    }
    zt_tensor_free(gin[i]);
    if (--mi->deps == 0 && !mi->queued) {
      mi->queued = true;
      zt_status hs = heap_push(ready, g, (int)(mi - g->infos));
      if (!s) s = hs;
    }
  }
  free(needs);
  free(gin);
  return s;
}

/* ------------------------------------------------ split backward: recording in B */
static deferred_item *add_item(zt_deferred *d) {
  deferred_item *it = zt__grow(d->items, &d->cap_items, d->n_items + 1, sizeof *it, "a split backward's record");
  if (!it) return NULL;
  d->items = it;
  it = &d->items[d->n_items];
  *it = (deferred_item){0};
  return it;
}

/* After n's apply in B: when n has edges to nodes B does not run (weights), keep its
 * output grads (bufs, taken over: *deferred) and the saved slots those edges' grads read;
 * release the other slots now (without retain_graph). */
static zt_status defer_partial(zt_deferred *d, zt_node *n, zt_tensor **bufs, const bool *needs, bool retain_graph,
                               bool *deferred) {
  *deferred = false;
  bool any = false;
  for (int i = 0; i < n->n_inputs; i++) any |= n->next[i].node && !needs[i];
  if (!any) return ZT_OK;
  bool *wmask = calloc((size_t)n->n_inputs, sizeof *wmask);
  deferred_item *it = wmask ? add_item(d) : NULL;
  if (!it) {
    free(wmask);
    return ZT_ERR(ZT_STATUS_OOM, "out of host memory for the weight-grad record of %s", zt_node_name(n));
  }
  for (int i = 0; i < n->n_inputs; i++) wmask[i] = n->next[i].node && !needs[i];
  zt__node_retain(n);
  *it = (deferred_item){n, bufs, wmask, false};
  d->n_items++;
  uint64_t keep = zt__node_saved_read(n, wmask);
  zt__node_drop_unpacked_except(n, keep);
  if (!retain_graph) zt__node_release_saved_except(n, keep);
  *deferred = true;
  return ZT_OK;
}

/* Roots that lead only to weights run whole in W, from their root grads (taken over). */
static zt_status defer_roots(zt_deferred *d, task_graph *g) {
  for (int k = 0; k < g->n; k++) {
    node_info *in = &g->infos[k];
    bool seeded = false;
    for (int j = 0; in->buf && j < in->node->n_outputs; j++) seeded |= in->buf[j] != NULL;
    if (in->needed || !seeded) continue;
    deferred_item *it = add_item(d);
    if (!it) return ZT_STATUS_OOM;
    zt__node_retain(in->node);
    *it = (deferred_item){in->node, in->buf, NULL, true};
    d->n_items++;
    in->buf = NULL;
  }
  return ZT_OK;
}

/* Gradient edge of a tensor: its grad_fn slot, or its accumulator. */
static zt_status grad_edge(zt_tensor *t, zt__edge *e) {
  if (t->grad_fn) {
    *e = (zt__edge){t->grad_fn, t->output_nr};
    return ZT_OK;
  }
  zt_node *acc;
  ZT_TRY(zt_tensor_grad_accumulator(t, &acc));
  *e = (zt__edge){acc, 0};
  return ZT_OK;
}

static void task_graph_free(task_graph *g) {
  for (int k = 0; k < g->n; k++) free_bufs(g->infos[k].buf, g->infos[k].node->n_outputs);
  for (int k = 0; k < g->n; k++) zt__node_release(g->infos[k].node);
  free(g->infos);
  free(g->table);
}

/* Backward runs with grad mode off and its temporaries tagged TEMP. */
typedef struct bw_scope {
  zt_mem_tag tag;
  bool grad;
} bw_scope;
static bw_scope bw_enter(void) {
  bw_scope b;
  b.tag = zt_mem_tag_push(ZT_MEM_TAG_TEMP);
  b.grad = zt_set_grad_enabled(false);
  return b;
}
static void bw_leave(bw_scope b) {
  zt_set_grad_enabled(b.grad);
  zt_mem_tag_pop(b.tag);
}

/* zt_backward (inputs NULL), zt_grad, or the B of a split backward (split: the record). */
static zt_status run_backward(int n_roots, zt_tensor *const *roots, zt_tensor *const *grad_roots, bool retain_graph,
                              int n_inputs, zt_tensor *const *inputs, zt_tensor **grads_out, zt_deferred *split) {
  const char *fn = split ? "zt_backward_input" : inputs ? "zt_grad" : "zt_backward";
  if (n_roots <= 0 || !roots) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: no output tensors given", fn);
  zt__edge *root_edges = calloc((size_t)n_roots, sizeof *root_edges);
  zt_tensor **root_grads = calloc((size_t)n_roots, sizeof *root_grads);
  capture *caps = calloc((size_t)(n_inputs ? n_inputs : 1), sizeof *caps);
  if (!root_edges || !root_grads || !caps) {
    free(root_edges);
    free(root_grads);
    free(caps);
    return ZT_ERR(ZT_STATUS_OOM, "%s: out of host memory for the lists of %d outputs and %d inputs", fn, n_roots,
                  n_inputs);
  }
  task_graph g = {0};
  heap ready = {0};
  graph_task task = {0}, *prev_task = tl_task;
  zt_status s = ZT_OK;
  for (int i = 0; i < n_inputs; i++) grads_out[i] = NULL;

  for (int r = 0; r < n_roots && s == ZT_OK; r++) {
    zt_tensor *t = roots[r];
    if (!t) {
      s = ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: output %d is NULL", fn, r);
      break;
    }
    if (!t->requires_grad) {
      s = ZT_ERR(ZT_STATUS_AUTOGRAD,
                 "%s: output %d does not require grad and has no grad_fn (was it computed with grad mode off, or "
                 "from tensors that do not require grad?)",
                 fn, r);
      break;
    }
    s = grad_edge(t, &root_edges[r]);
    if (s) break;
    zt_tensor *gr = grad_roots ? grad_roots[r] : NULL;
    if (!gr) {
      if (zt_tensor_numel(t) != 1) {
        char b[128];
        s = ZT_ERR(ZT_STATUS_AUTOGRAD,
                   "%s: a grad can be created implicitly only for outputs with one element; output %d has shape %s: "
                   "pass its grad",
                   fn, r, zt_shape_str(t->ndim, t->shape, b));
        break;
      }
      s = zt_tensor_full(t->ndim, t->shape, t->dtype, zt_tensor_device(t), 1.0, &root_grads[r]);
    } else if (!zt_shape_equal(gr->ndim, gr->shape, t->ndim, t->shape)) {
      char a[128], b[128];
      s = ZT_ERR(ZT_STATUS_SHAPE, "%s: the grad of output %d has shape %s but the output has shape %s", fn, r,
                 zt_shape_str(gr->ndim, gr->shape, a), zt_shape_str(t->ndim, t->shape, b));
    } else {
      s = zt_tensor_empty_tagged(t->ndim, t->shape, t->dtype, zt_tensor_device(t), ZT_MEM_TAG_TEMP, &root_grads[r]);
      if (!s) s = zt_tensor_copy_(root_grads[r], gr);
    }
  }
  if (s) goto done;

  {
    zt_node **rn = malloc(sizeof *rn * (size_t)n_roots);
    if (!rn) {
      s = ZT_ERR(ZT_STATUS_OOM, "%s: out of host memory for the list of %d outputs", fn, n_roots);
      goto done;
    }
    for (int r = 0; r < n_roots; r++) rn[r] = root_edges[r].node;
    s = discover(&g, n_roots, rn);
    free(rn);
    if (s) goto done;
  }
  if (inputs || split) {
    for (int i = 0; i < n_inputs; i++) {
      grads_out[i] = NULL;
      zt_tensor *t = inputs[i];
      caps[i] = (capture){NULL, 0, i, -1};
      if (split && t && !t->requires_grad) continue; /* token ids: no grad, not an error */
      if (!t || !t->requires_grad) {
        s = ZT_ERR(ZT_STATUS_AUTOGRAD, "zt_grad: input %d %s", i, t ? "does not require grad" : "is NULL");
        goto done;
      }
      zt__edge e;
      if ((s = grad_edge(t, &e))) goto done;
      caps[i] = (capture){e.node, e.input_nr, i, -1};
      int j = graph_find(&g, e.node);
      if (j < 0) continue; /* not reachable: grad stays NULL */
      caps[i].next_same_node = g.infos[j].capture_first;
      g.infos[j].capture_first = i;
      g.infos[j].needed = true;
    }
    if ((s = mark_needed_for_capture(&g))) goto done;
  } else {
    for (int k = 0; k < g.n; k++) g.infos[k].needed = g.infos[k].runs = true;
  }
  for (int k = 0; k < g.n; k++) {
    node_info *in = &g.infos[k];
    in->buf = calloc((size_t)(in->node->n_outputs ? in->node->n_outputs : 1), sizeof *in->buf);
    if (!in->buf) {
      s = ZT_ERR(ZT_STATUS_OOM, "%s: out of host memory for the grad buffers of %d nodes", fn, g.n);
      goto done;
    }
  }
  for (int k = 0; k < g.n; k++) {
    node_info *in = &g.infos[k];
    if (!in->runs) continue;
    for (int i = 0; i < in->node->n_inputs; i++) {
      zt_node *m = in->node->next[i].node;
      if (!m) continue;
      node_info *mi = &g.infos[graph_find(&g, m)];
      if (mi->needed) mi->deps++;
    }
  }
  for (int r = 0; r < n_roots && s == ZT_OK; r++) {
    node_info *in = &g.infos[graph_find(&g, root_edges[r].node)];
    s = buffer_add(&in->buf[root_edges[r].input_nr], root_grads[r]);
    root_grads[r] = NULL;
  }
  if (!s && split) s = defer_roots(split, &g);
  if (s) goto done;
  for (int r = 0; r < n_roots; r++) {
    node_info *in = &g.infos[graph_find(&g, root_edges[r].node)];
    if (in->needed && in->deps == 0 && !in->queued) {
      in->queued = true;
      if ((s = heap_push(&ready, &g, (int)(in - g.infos)))) goto done;
    }
  }

  task.id = atomic_fetch_add(&g_task_counter, 1) + 1;
  tl_task = &task;
  while (ready.n && s == ZT_OK) s = run_node(&g, heap_pop(&ready, &g), &ready, caps, grads_out, retain_graph, split);
  if (split) { /* the callbacks wait for W, which runs as this same task */
    split->task_id = task.id;
    split->cbs = task.cbs, split->n_cbs = task.n_cbs, split->cap_cbs = task.cap_cbs;
    task.cbs = NULL;
  }
  /* End-of-backward callbacks, including those queued by callbacks. */
  for (int c = 0; s == ZT_OK && c < task.n_cbs && !split; c++) s = task.cbs[c].fn(task.cbs[c].user_data);
  tl_task = prev_task;

done:
  tl_task = prev_task;
  if (s && (inputs || split))
    for (int i = 0; i < n_inputs; i++) {
      zt_tensor_free(grads_out[i]);
      grads_out[i] = NULL;
    }
  task_graph_free(&g);
  for (int r = 0; r < n_roots; r++) zt_tensor_free(root_grads[r]);
  free(task.cbs);
  free(ready.items);
  free(root_edges);
  free(root_grads);
  free(caps);
  return s;
}

zt_status zt_backward(int n_roots, zt_tensor *const *roots, zt_tensor *const *grad_roots, bool retain_graph) {
  bw_scope b = bw_enter();
  zt_status s = run_backward(n_roots, roots, grad_roots, retain_graph, 0, NULL, NULL, NULL);
  bw_leave(b);
  return s;
}

zt_status zt_grad(int n_outputs, zt_tensor *const *outputs, zt_tensor *const *grad_outputs, int n_inputs,
                  zt_tensor *const *inputs, bool retain_graph, zt_tensor **grads_out) {
  if (n_inputs <= 0 || !inputs || !grads_out)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_grad: give at least one input and an array for its grads");
  bw_scope b = bw_enter();
  zt_status s = run_backward(n_outputs, outputs, grad_outputs, retain_graph, n_inputs, inputs, grads_out, NULL);
  bw_leave(b);
  return s;
}

/* ------------------------------------------------ split backward: B and W */

void zt_deferred_free(zt_deferred *d) {
  if (!d) return;
  for (int k = 0; k < d->n_items; k++) {
    deferred_item *it = &d->items[k];
    free_bufs(it->bufs, it->node->n_outputs);
    free(it->wmask);
    zt__node_release(it->node);
  }
  free(d->items);
  free(d->cbs);
  free(d);
}

zt_status zt_backward_input(int n_outputs, zt_tensor *const *outputs, zt_tensor *const *grad_outputs, int n_inputs,
                            zt_tensor *const *inputs, bool retain_graph, zt_tensor **grads_out, zt_deferred **deferred) {
  if (!deferred) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_backward_input: deferred (the record for W) is NULL");
  *deferred = NULL;
  if (n_inputs < 0 || (n_inputs > 0 && (!inputs || !grads_out)))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_backward_input: %d inputs without the inputs or an array for their grads",
                  n_inputs);
  zt_deferred *d = calloc(1, sizeof *d);
  if (!d) return ZT_ERR(ZT_STATUS_OOM, "zt_backward_input: out of host memory for the record");
  d->retain_graph = retain_graph;
  bw_scope b = bw_enter();
  zt_status s = run_backward(n_outputs, outputs, grad_outputs, retain_graph, n_inputs, inputs, grads_out, d);
  bw_leave(b);
  if (s) {
    zt_deferred_free(d);
    return s;
  }
  *deferred = d;
  return ZT_OK;
}

/* W's graph: the nodes the record's weight edges and whole roots reach, plus the partial
 * nodes themselves (ready at once, with their output grads from B). */
static zt_status weight_graph(zt_deferred *d, task_graph *g) {
  int n_roots = 0;
  for (int k = 0; k < d->n_items; k++) {
    deferred_item *it = &d->items[k];
    for (int i = 0; i < it->node->n_inputs; i++) n_roots += it->whole ? 0 : it->wmask[i];
    n_roots += it->whole;
  }
  zt_node **rn = malloc(sizeof *rn * (size_t)(n_roots ? n_roots : 1));
  if (!rn) return ZT_ERR(ZT_STATUS_OOM, "zt_backward_weight: out of host memory for %d roots", n_roots);
  int r = 0;
  for (int k = 0; k < d->n_items; k++) {
    deferred_item *it = &d->items[k];
    if (it->whole) rn[r++] = it->node;
    for (int i = 0; !it->whole && i < it->node->n_inputs; i++)
      if (it->wmask[i]) rn[r++] = it->node->next[i].node;
  }
  zt_status s = discover(g, n_roots, rn);
  free(rn);
  for (int k = 0; k < g->n && !s; k++) {
    node_info *in = &g->infos[k];
    in->needed = in->runs = true;
    in->buf = calloc((size_t)(in->node->n_outputs ? in->node->n_outputs : 1), sizeof *in->buf);
    if (!in->buf) s = ZT_ERR(ZT_STATUS_OOM, "zt_backward_weight: out of host memory for the grad buffers of %d nodes", g->n);
  }
  int n_plain = g->n;
  for (int k = 0; k < d->n_items && !s; k++) { /* the partial nodes: B ran their hooks already */
    deferred_item *it = &d->items[k];
    if (it->whole) continue;
    int j = graph_add(g, it->node);
    if (j < 0) {
      s = ZT_STATUS_OOM;
      break;
    }
    g->infos[j].needed = g->infos[j].runs = true;
    g->infos[j].wmask = it->wmask;
    g->infos[j].buf = it->bufs;
    it->bufs = NULL;
  }
  for (int k = 0; k < g->n && !s; k++) {
    node_info *in = &g->infos[k];
    zt_node *n = in->node;
    for (int i = 0; i < n->n_inputs; i++)
      if (n->next[i].node && (k < n_plain || in->wmask[i])) g->infos[graph_find(g, n->next[i].node)].deps++;
  }
  for (int k = 0; k < d->n_items && !s; k++) { /* the whole roots' grads */
    deferred_item *it = &d->items[k];
    if (!it->whole) continue;
    node_info *in = &g->infos[graph_find(g, it->node)];
    for (int j = 0; j < it->node->n_outputs && !s; j++) {
      if (it->bufs[j]) s = buffer_add(&in->buf[j], it->bufs[j]);
      it->bufs[j] = NULL;
    }
  }
  return s;
}

zt_status zt_backward_weight(zt_deferred *d) {
  if (!d) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_backward_weight: the record is NULL");
  if (d->spent)
    return ZT_ERR(ZT_STATUS_STATE, "zt_backward_weight: this record's weight grads were computed already; a record "
                                   "is spent by its W (run B again for another)");
  d->spent = true;
  bw_scope b = bw_enter();
  task_graph g = {0};
  heap ready = {0};
  graph_task task = {d->task_id, d->cbs, d->n_cbs, d->cap_cbs}, *prev_task = tl_task;
  d->cbs = NULL, d->n_cbs = d->cap_cbs = 0;
  zt_status s = weight_graph(d, &g);
  for (int k = 0; k < g.n && !s; k++)
    if (g.infos[k].deps == 0 && !g.infos[k].queued) {
      g.infos[k].queued = true;
      s = heap_push(&ready, &g, k);
    }
  tl_task = &task;
  while (ready.n && s == ZT_OK) s = run_node(&g, heap_pop(&ready, &g), &ready, NULL, NULL, d->retain_graph, NULL);
  for (int c = 0; s == ZT_OK && c < task.n_cbs; c++) s = task.cbs[c].fn(task.cbs[c].user_data);
  tl_task = prev_task;
  task_graph_free(&g);
  free(task.cbs);
  free(ready.items);
  bw_leave(b);
  return s;
}

int64_t zt_deferred_bytes(const zt_deferred *d) {
  int64_t bytes = 0;
  for (int k = 0; d && k < d->n_items; k++) {
    const deferred_item *it = &d->items[k];
    for (int j = 0; it->bufs && j < it->node->n_outputs; j++)
      if (it->bufs[j]) bytes += zt_tensor_numel(it->bufs[j]) * (int64_t)zt_dtype_size(it->bufs[j]->dtype);
    for (int i = 0; i < it->node->n_saved; i++) {
      const zt__saved *r = &it->node->saved[i];
      const zt_tensor *t = r->released ? NULL : r->unpacked ? r->unpacked : r->hooked ? NULL : r->tensor;
      if (t && !(t->storage->tag == ZT_MEM_TAG_PARAM)) bytes += zt_tensor_numel(t) * (int64_t)zt_dtype_size(t->dtype);
    }
  }
  return bytes;
}
