/* Saved tensors: what an op keeps for backward. With saved-tensor hooks on the stack the
 * top pack() decides what is kept; otherwise an alias holds the storage and the version
 * at save time, so backward can detect in-place changes made after the save. */
#include <stdio.h>
#include <stdlib.h>

#include "core/grow.h"
#include "core/status_internal.h"
#include "core/tensor_internal.h"
#include "node.h"

typedef struct hooks_stack {
  zt_saved_tensor_hooks *items;
  int n, cap;
} hooks_stack;
static _Thread_local hooks_stack tl_hooks;

zt_status zt_saved_tensor_hooks_push(const zt_saved_tensor_hooks *h) {
  if (!h || !h->pack || !h->unpack)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "saved-tensor hooks need both pack and unpack functions");
  zt_saved_tensor_hooks *items =
      zt__grow(tl_hooks.items, &tl_hooks.cap, tl_hooks.n + 1, sizeof *items, "the saved-tensor hooks stack");
  if (!items) return ZT_STATUS_OOM;
  tl_hooks.items = items;
  tl_hooks.items[tl_hooks.n++] = *h;
  return ZT_OK;
}

zt_status zt_saved_tensor_hooks_pop(void) {
  if (tl_hooks.n == 0)
    return ZT_ERR(ZT_STATUS_STATE, "zt_saved_tensor_hooks_pop: the saved-tensor hooks stack is empty");
  if (--tl_hooks.n == 0) {
    free(tl_hooks.items);
    tl_hooks = (hooks_stack){0};
  }
  return ZT_OK;
}

int zt_saved_tensor_hooks_depth(void) { return tl_hooks.n; }
const zt_saved_tensor_hooks *zt_saved_tensor_hooks_top(void) { return tl_hooks.n ? &tl_hooks.items[tl_hooks.n - 1] : NULL; }

void zt_saved_tensor_hooks_stash(zt_saved_hooks_stash *stash) {
  stash->entries = tl_hooks.items;
  stash->depth = tl_hooks.n;
  tl_hooks = (hooks_stack){0};
}

void zt_saved_tensor_hooks_unstash(zt_saved_hooks_stash *stash) {
  free(tl_hooks.items);
  tl_hooks.items = stash->entries;
  tl_hooks.n = stash->depth;
  tl_hooks.cap = stash->depth; /* the next push reallocates */
  stash->entries = NULL;
  stash->depth = 0;
}

zt_status zt_node_save(zt_node *n, const zt_tensor *t, int *index) {
  if (!n || !t) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_node_save: node or tensor is NULL");
  zt__saved *grown = zt__grow(n->saved, &n->cap_saved, n->n_saved + 1, sizeof *grown, "a node's saved tensors");
  if (!grown) return ZT_STATUS_OOM;
  n->saved = grown;
  zt__saved rec = {0};
  rec.version = t->storage->version;
  zt__meta_of(t, &rec.meta);
  const zt_saved_tensor_hooks *h = zt_saved_tensor_hooks_top();
  if (h) {
    rec.hooked = true;
    rec.hooks = *h;
    ZT_TRY(h->pack(t, &rec.packed, h->user_data));
  } else {
    ZT_TRY(zt_tensor_alias(t, &rec.tensor));
  }
  if (index) *index = n->n_saved;
  n->saved[n->n_saved++] = rec;
  return ZT_OK;
}

int zt_node_n_saved(const zt_node *n) { return n->n_saved; }

zt_status zt_node_saved(zt_node *n, int i, zt_tensor **out) {
  if (!n || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_node_saved: node or out is NULL");
  if (n->saved_freed)
    return ZT_ERR(ZT_STATUS_AUTOGRAD,
                  "trying to backward through the graph a second time (or to read saved tensors after they were "
                  "freed): the saved tensors of %s were freed when backward ran; pass retain_graph=true to the "
                  "first zt_backward/zt_grad if you need to backward twice",
                  zt_node_name(n));
  if (i < 0 || i >= n->n_saved)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: saved tensor %d requested but %d were saved", zt_node_name(n), i,
                  n->n_saved);
  zt__saved *rec = &n->saved[i];
  if (rec->released)
    return ZT_ERR(ZT_STATUS_AUTOGRAD,
                  "%s: saved tensor %d was freed at the end of the input-grad pass (B) of a split backward, which "
                  "alone read it; the weight-grad pass (W) cannot use it",
                  zt_node_name(n), i);
  if (rec->unpacked) {
    *out = rec->unpacked;
    return ZT_OK;
  }
  if (rec->hooked) {
    zt_tensor *u = NULL;
    ZT_TRY(rec->hooks.unpack(rec->packed, &u, rec->hooks.user_data));
    if (!u) return ZT_ERR(ZT_STATUS_AUTOGRAD, "%s: the unpack hook returned no tensor for saved tensor %d", zt_node_name(n), i);
    const zt__tensor_meta *m = &rec->meta;
    if (!zt_shape_equal(u->ndim, u->shape, m->ndim, m->shape) || u->dtype != m->dtype) {
      char a[128], b[128];
      zt_status s = ZT_ERR(ZT_STATUS_AUTOGRAD,
                           "%s: the unpack hook returned a tensor of shape %s (%s) for saved tensor %d, which was "
                           "saved with shape %s (%s); unpack must restore what pack was given",
                           zt_node_name(n), zt_shape_str(u->ndim, u->shape, a), zt_dtype_name(u->dtype), i,
                           zt_shape_str(m->ndim, m->shape, b), zt_dtype_name(m->dtype));
      zt_tensor_free(u);
      return s;
    }
    if (u->storage->released) {
      zt_tensor_free(u);
      return ZT_ERR(ZT_STATUS_RELEASED, "%s: the unpack hook returned a tensor with released storage for saved tensor %d",
                    zt_node_name(n), i);
    }
    if (!zt_tensor_is_contiguous(u)) {
      zt_tensor *c;
      zt_status s = zt_tensor_clone_data(u, ZT_MEM_TAG_TEMP, &c);
      zt_tensor_free(u);
      ZT_TRY(s);
      u = c;
    }
    rec->unpacked = u;
    *out = u;
    return ZT_OK;
  }
  zt_tensor *t = rec->tensor;
  if (t->storage->version != rec->version)
    return ZT_ERR(ZT_STATUS_AUTOGRAD,
                  "one of the tensors needed for gradient computation has been modified by an in-place operation: "
                  "saved tensor %d of %s, shape %s, is at version %llu but was saved at version %llu; "
                  "do not modify it in place before backward (clone it first, or modify a copy)",
                  i, zt_node_name(n), zt_shape_str(t->ndim, t->shape, (char[128]){0}),
                  (unsigned long long)t->storage->version, (unsigned long long)rec->version);
  if (t->storage->evicted) {
    char where[160];
    snprintf(where, sizeof where, "saved tensor %d of %s", i, zt_node_name(n));
    return zt__storage_evicted_error(t, where);
  }
  if (t->storage->released)
    return ZT_ERR(ZT_STATUS_RELEASED,
                  "saved tensor %d of %s was released (its storage was freed by a reshard or offload) before "
                  "backward needed it; re-materialise it first",
                  i, zt_node_name(n));
  *out = t;
  return ZT_OK;
}

void zt_node_drop_unpacked(zt_node *n) { zt__node_drop_unpacked_except(n, 0); }

void zt__node_drop_unpacked_except(zt_node *n, uint64_t keep) {
  if (!n) return;
  for (int i = 0; i < n->n_saved; i++)
    if (n->saved[i].unpacked && !(i < 64 && keep >> i & 1)) {
      zt_tensor_free(n->saved[i].unpacked);
      n->saved[i].unpacked = NULL;
    }
}

static void release_slot(zt__saved *r) {
  if (r->released) return;
  zt_tensor_free(r->unpacked);
  r->unpacked = NULL;
  if (r->hooked) {
    if (r->hooks.release) r->hooks.release(r->packed, r->hooks.user_data);
    r->packed = NULL;
  } else {
    zt_tensor_free(r->tensor);
    r->tensor = NULL;
  }
  r->released = true;
}

uint64_t zt__node_saved_read(const zt_node *n, const bool *needs) {
  return n->vt->saved_read ? n->vt->saved_read(n, needs) : ~(uint64_t)0;
}

void zt__node_release_saved_except(zt_node *n, uint64_t keep) {
  for (int i = 0; i < n->n_saved && i < 64; i++)
    if (!(keep >> i & 1)) release_slot(&n->saved[i]);
}

void zt__node_free_saved(zt_node *n) {
  for (int i = 0; i < n->n_saved; i++) release_slot(&n->saved[i]);
  n->n_saved = 0;
}
