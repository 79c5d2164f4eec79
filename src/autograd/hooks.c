/* Hook lists and removable handles. Entries are never moved once added (removal marks
 * them), so a handle is (list, index); when the owner dies the handle is detached and
 * removing it later is a no-op. Registration functions for tensors and nodes live here. */
#include <stdlib.h>

#include "core/grow.h"
#include "core/status_internal.h"
#include "node.h"

struct zt_hook_handle {
  zt__hook_list *list; /* NULL once the owner is gone */
  int index;
};

zt_status zt__hook_list_add(zt__hook_list *l, void *fn, void *user_data, zt_hook_handle **handle) {
  if (!fn) return ZT_ERR(ZT_STATUS_INVALID_ARG, "hook function is NULL");
  zt__hook_entry *items = zt__grow(l->items, &l->cap, l->n + 1, sizeof *items, "a hook list");
  if (!items) return ZT_STATUS_OOM;
  l->items = items;
  zt_hook_handle *h = NULL;
  if (handle) {
    h = malloc(sizeof *h);
    if (!h) return ZT_ERR(ZT_STATUS_OOM, "out of host memory for a hook handle");
    h->list = l;
    h->index = l->n;
    *handle = h;
  }
  l->items[l->n++] = (zt__hook_entry){fn, user_data, h, false};
  return ZT_OK;
}

void zt__hook_list_free(zt__hook_list *l) {
  for (int i = 0; i < l->n; i++)
    if (l->items[i].handle) l->items[i].handle->list = NULL;
  free(l->items);
  *l = (zt__hook_list){0};
}

void zt_hook_remove(zt_hook_handle *h) {
  if (!h) return;
  if (h->list) {
    h->list->items[h->index].removed = true;
    h->list->items[h->index].handle = NULL;
  }
  free(h);
}

zt_status zt__run_tensor_hooks(zt__hook_list *l, zt_tensor **grad) {
  for (int i = 0; i < l->n; i++) {
    if (l->items[i].removed) continue;
    zt_tensor *rep = NULL;
    zt_status s = ((zt_tensor_hook_fn)l->items[i].fn)(*grad, &rep, l->items[i].user_data);
    if (rep == *grad) rep = NULL;
    if (s) {
      zt_tensor_free(rep);
      return s;
    }
    if (!rep) continue;
    if (!zt_shape_equal(rep->ndim, rep->shape, (*grad)->ndim, (*grad)->shape) || rep->dtype != (*grad)->dtype) {
      char a[128], b[128];
      s = ZT_ERR(ZT_STATUS_SHAPE,
                 "a tensor grad hook replaced a grad of shape %s (%s) with one of shape %s (%s); the replacement "
                 "must have the same shape and dtype",
                 zt_shape_str((*grad)->ndim, (*grad)->shape, a), zt_dtype_name((*grad)->dtype),
                 zt_shape_str(rep->ndim, rep->shape, b), zt_dtype_name(rep->dtype));
      zt_tensor_free(rep);
      return s;
    }
    zt_tensor_free(*grad);
    *grad = rep;
  }
  return ZT_OK;
}

zt_status zt_tensor_register_hook(zt_tensor *t, zt_tensor_hook_fn fn, void *user_data, zt_hook_handle **handle) {
  if (!t) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_tensor_register_hook: tensor is NULL");
  if (!t->requires_grad)
    return ZT_ERR(ZT_STATUS_AUTOGRAD, "cannot register a hook on a tensor that does not require grad");
  zt_node *n = t->grad_fn;
  int slot = t->output_nr;
  if (!n) {
    ZT_TRY(zt_tensor_grad_accumulator(t, &n));
    slot = 0;
  }
  return zt__hook_list_add(&n->tensor_hooks[slot], (void *)fn, user_data, handle);
}

zt_status zt_tensor_register_post_accumulate_grad_hook(zt_tensor *leaf, zt_post_acc_hook_fn fn, void *user_data,
                                                       zt_hook_handle **handle) {
  if (!leaf) return ZT_ERR(ZT_STATUS_INVALID_ARG, "post-accumulate-grad hook: tensor is NULL");
  if (leaf->grad_fn || !leaf->requires_grad)
    return ZT_ERR(ZT_STATUS_AUTOGRAD,
                  "post-accumulate-grad hooks can only be registered on leaf tensors that require grad");
  zt_node *acc;
  ZT_TRY(zt_tensor_grad_accumulator(leaf, &acc));
  return zt__hook_list_add(&acc->post_acc_hooks, (void *)fn, user_data, handle);
}

zt_status zt_node_register_pre_hook(zt_node *node, zt_node_pre_hook_fn fn, void *user_data, zt_hook_handle **handle) {
  if (!node) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_node_register_pre_hook: node is NULL");
  return zt__hook_list_add(&node->pre_hooks, (void *)fn, user_data, handle);
}

zt_status zt_node_register_post_hook(zt_node *node, zt_node_post_hook_fn fn, void *user_data,
                                     zt_hook_handle **handle) {
  if (!node) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_node_register_post_hook: node is NULL");
  return zt__hook_list_add(&node->post_hooks, (void *)fn, user_data, handle);
}
