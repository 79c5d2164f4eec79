/* Modules: a tree of named parameters and children with a train/eval flag. A module owns
 * its parameter tensors and its children; freeing the root frees the tree. Full names are
 * built only when asked for (zt_module_named_params), in PyTorch's named_parameters order:
 * own parameters, then each child's, depth first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "zt/nn.h"
#include "core/grow.h"

static zt_status check_name(const char *what, const char *name, size_t cap) {
  if (!name) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s name is NULL", what);
  if (strlen(name) >= cap)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s name \"%s\" is too long (at most %zu characters)", what, name, cap - 1);
  if (strchr(name, '.'))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s name \"%s\" contains a '.'; dots separate the path segments", what,
                  name);
  return ZT_OK;
}

zt_status zt_module_init(zt_module *m, const char *kind, const char *name) {
  if (!m) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_module_init: module is NULL");
  memset(m, 0, sizeof *m);
  ZT_TRY(check_name("module", name ? name : "", sizeof m->name));
  snprintf(m->name, sizeof m->name, "%s", name ? name : "");
  m->kind = kind ? kind : "Module";
  m->training = true;
  return ZT_OK;
}

zt_status zt_module_new(const char *kind, const char *name, zt_module **out) {
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_module_new: out is NULL");
  zt_module *m = malloc(sizeof *m);
  if (!m) return ZT_ERR(ZT_STATUS_OOM, "zt_module_new: out of host memory");
  zt_status s = zt_module_init(m, kind, name);
  if (s) {
    free(m);
    return s;
  }
  *out = m;
  return ZT_OK;
}

zt_status zt_module_new_param(zt_module *m, const char *name, int ndim, const int64_t *shape, zt_dtype dt,
                              bool decay, zt_tensor **out) {
  if (!m) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_module_new_param: module is NULL");
  ZT_TRY(check_name("parameter", name, sizeof m->params[0].name));
  if (!zt_dtype_is_float(dt))
    return ZT_ERR(ZT_STATUS_DTYPE, "parameter \"%s\" has dtype %s; parameters must be floating point", name,
                  zt_dtype_name(dt));
  for (int i = 0; i < m->n_params; i++)
    if (!strcmp(m->params[i].name, name))
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "module \"%s\" already has a parameter named \"%s\"", m->name, name);
  zt_param *grown = zt__grow(m->params, &m->cap_params, m->n_params + 1, sizeof *grown, "a module's parameter list");
  if (!grown) return ZT_STATUS_OOM;
  m->params = grown;
  zt_tensor *t = NULL;
  ZT_TRY(zt_tensor_empty_tagged(ndim, shape, dt, ZT_CPU, ZT_MEM_TAG_PARAM, &t));
  zt_status s = zt_tensor_fill_(t, 0.0);
  if (!s) s = zt_tensor_set_requires_grad(t, true);
  if (s) {
    zt_tensor_free(t);
    return s;
  }
  zt_param *p = &m->params[m->n_params++];
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "%s", name);
  p->tensor = t;
  p->decay = decay;
  if (out) *out = t;
  return ZT_OK;
}

zt_status zt_module_add_child(zt_module *m, zt_module *child) {
  if (!m || !child) {
    zt_module_free(child);
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_module_add_child: %s is NULL", m ? "child" : "module");
  }
  if (zt_module_child(m, child->name)) {
    zt_status s = ZT_ERR(ZT_STATUS_INVALID_ARG, "module \"%s\" already has a child named \"%s\"", m->name,
                         child->name);
    zt_module_free(child);
    return s;
  }
  zt_module **c = zt__grow(m->children, &m->cap_children, m->n_children + 1, sizeof *c, "a module's child list");
  if (!c) {
    zt_module_free(child);
    return ZT_STATUS_OOM;
  }
  m->children = c;
  m->children[m->n_children++] = child;
  return ZT_OK;
}

zt_module *zt_module_child(const zt_module *m, const char *name) {
  if (!m || !name) return NULL;
  for (int i = 0; i < m->n_children; i++)
    if (!strcmp(m->children[i]->name, name)) return m->children[i];
  return NULL;
}

static int count_params(const zt_module *m) {
  int n = m->n_params;
  for (int i = 0; i < m->n_children; i++) n += count_params(m->children[i]);
  return n;
}

/* Appends m's parameters under path prefix ("" at the root) at out[*k]. */
static zt_status collect(const zt_module *m, const char *prefix, zt_param *out, int *k) {
  char path[sizeof out[0].name];
  for (int i = 0; i < m->n_params; i++) {
    zt_param *p = &out[(*k)++];
    *p = m->params[i];
    int len = snprintf(p->name, sizeof p->name, "%s%s%s", prefix, *prefix ? "." : "", m->params[i].name);
    if (len >= (int)sizeof p->name)
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "parameter path \"%s.%s\" is longer than %zu characters", prefix,
                    m->params[i].name, sizeof p->name - 1);
  }
  for (int c = 0; c < m->n_children; c++) {
    const zt_module *ch = m->children[c];
    int len = snprintf(path, sizeof path, "%s%s%s", prefix, *prefix && *ch->name ? "." : "", ch->name);
    if (len >= (int)sizeof path)
      return ZT_ERR(ZT_STATUS_INVALID_ARG, "module path \"%s.%s\" is too long", prefix, ch->name);
    ZT_TRY(collect(ch, path, out, k));
  }
  return ZT_OK;
}

zt_status zt_module_named_params(const zt_module *m, const char *prefix, int *n, zt_param **out) {
  if (!m || !n || !out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_module_named_params: NULL argument");
  int total = count_params(m);
  zt_param *ps = calloc((size_t)(total ? total : 1), sizeof *ps);
  if (!ps) return ZT_ERR(ZT_STATUS_OOM, "zt_module_named_params: out of host memory");
  int k = 0;
  zt_status s = collect(m, prefix ? prefix : "", ps, &k);
  if (s) {
    free(ps);
    return s;
  }
  *n = total;
  *out = ps;
  return ZT_OK;
}

zt_status zt_module_evict_params(const zt_module *m, const char *prefix, zt_store *store) {
  int n = 0;
  zt_param *ps = NULL;
  ZT_TRY(zt_module_named_params(m, prefix, &n, &ps));
  zt_status s = ZT_OK;
  for (int i = 0; i < n && !s; i++) {
    zt_storage *st = ps[i].tensor->storage;
    if (!st->name[0]) zt_storage_set_name(st, ps[i].name);
    s = zt_storage_evict(st, store, ps[i].tensor->dtype);
  }
  free(ps);
  return s;
}

int64_t zt_module_num_params(const zt_module *m) {
  if (!m) return 0;
  int64_t n = 0;
  for (int i = 0; i < m->n_params; i++) n += zt_tensor_numel(m->params[i].tensor);
  for (int i = 0; i < m->n_children; i++) n += zt_module_num_params(m->children[i]);
  return n;
}

void zt_module_set_training(zt_module *m, bool training) {
  if (!m) return;
  m->training = training;
  for (int i = 0; i < m->n_children; i++) zt_module_set_training(m->children[i], training);
}

void zt_module_free(zt_module *m) {
  if (!m) return;
  for (int i = 0; i < m->n_children; i++) zt_module_free(m->children[i]);
  for (int i = 0; i < m->n_params; i++) zt_tensor_free(m->params[i].tensor);
  free(m->children);
  free(m->params);
  free(m->hooks);
  free(m->wrappers);
  if (m->destroy) m->destroy(m);
  free(m); /* the layer struct that embeds m as its first member */
}

zt_status zt_module_add_hooks(zt_module *m, const zt_module_hooks *h, int *id) {
  if (!m || !h) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_module_add_hooks: %s is NULL", m ? "hooks" : "module");
  if (!h->pre && !h->post) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_module_add_hooks: neither a pre nor a post hook");
  zt_module_hook_entry *e = zt__grow(m->hooks, &m->cap_hooks, m->n_hooks + 1, sizeof *e, "a module's hook list");
  if (!e) return ZT_STATUS_OOM;
  m->hooks = e;
  int k = ++m->next_hook_id;
  m->hooks[m->n_hooks++] = (zt_module_hook_entry){*h, k};
  if (id) *id = k;
  return ZT_OK;
}

void zt_module_remove_hooks(zt_module *m, int id) {
  if (!m) return;
  for (int i = 0; i < m->n_hooks; i++)
    if (m->hooks[i].id == id) {
      memmove(&m->hooks[i], &m->hooks[i + 1], sizeof *m->hooks * (size_t)(m->n_hooks - i - 1));
      m->n_hooks--;
      return;
    }
}

bool zt_module_has_pre_hook(const zt_module *m, zt_status (*fn)(zt_module *m, void *user_data)) {
  for (int i = 0; m && i < m->n_hooks; i++)
    if (m->hooks[i].hooks.pre == fn) return true;
  return false;
}

zt_status zt_module_pre_forward(zt_module *m) {
  for (int i = 0; m && i < m->n_hooks; i++) {
    const zt_module_hooks *h = &m->hooks[i].hooks;
    if (h->pre) ZT_TRY(h->pre(m, h->user_data));
  }
  return ZT_OK;
}

zt_status zt_module_post_forward(zt_module *m, int n_outputs, zt_tensor *const *outputs) {
  for (int i = 0; m && i < m->n_hooks; i++) {
    const zt_module_hooks *h = &m->hooks[i].hooks;
    if (h->post) ZT_TRY(h->post(m, n_outputs, outputs, h->user_data));
  }
  return ZT_OK;
}

/* ------------------------------------------------------------------ sequences */

zt_status zt_module_set_span_fn(zt_module *m, zt_span_fn span, void *ctx) {
  if (!m || !span) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_module_set_span_fn: %s is NULL", m ? "span" : "module");
  m->span = span;
  m->span_ctx = ctx;
  return ZT_OK;
}

zt_status zt_module_add_wrapper(zt_module *m, const zt_module_wrapper *w, int *id) {
  if (!m || !w || !w->run)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_module_add_wrapper: %s is NULL", !m ? "module" : !w ? "wrapper" : "run");
  if (!m->span)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_module_add_wrapper: module \"%s\" (%s) is not a sequence; only a sequence's runs can be wrapped",
                  m->name, m->kind);
  zt_module_wrapper_entry *e =
      zt__grow(m->wrappers, &m->cap_wrappers, m->n_wrappers + 1, sizeof *e, "a sequence's wrapper list");
  if (!e) return ZT_STATUS_OOM;
  m->wrappers = e;
  int at = m->n_wrappers;
  while (at > 0 && m->wrappers[at - 1].wrapper.order > w->order) at--;
  memmove(&m->wrappers[at + 1], &m->wrappers[at], sizeof *e * (size_t)(m->n_wrappers - at));
  int k = ++m->next_hook_id;
  m->wrappers[at] = (zt_module_wrapper_entry){*w, k};
  m->n_wrappers++;
  if (id) *id = k;
  return ZT_OK;
}

void zt_module_remove_wrapper(zt_module *m, int id) {
  if (!m) return;
  for (int i = 0; i < m->n_wrappers; i++)
    if (m->wrappers[i].id == id) {
      memmove(&m->wrappers[i], &m->wrappers[i + 1], sizeof *m->wrappers * (size_t)(m->n_wrappers - i - 1));
      m->n_wrappers--;
      return;
    }
}

zt_status zt_span_run(zt_span_next next, int first, int count, zt_tensor *x, zt_tensor **y) {
  zt_module *m = next.seq;
  if (!m || !m->span || !x || !y) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_span_run: no sequence, input or output");
  if (first < 0 || count < 1 || first > m->n_children - count)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_span_run: span [%d, %d) is outside sequence \"%s\" of %d modules",
                  first, first + count, m->name, m->n_children);
  if (next.level < 0 || next.level > m->n_wrappers)
    return ZT_ERR(ZT_STATUS_STATE, "zt_span_run: wrapper %d of sequence \"%s\" is gone (it has %d); wrappers "
                  "changed between a forward and its backward", next.level, m->name, m->n_wrappers);
  if (next.level == m->n_wrappers) return m->span(m->span_ctx, first, count, x, y);
  const zt_module_wrapper *w = &m->wrappers[next.level].wrapper;
  return w->run(w->user_data, (zt_span_next){m, next.level + 1}, first, count, x, y);
}

zt_status zt_module_run_sequence(zt_module *m, zt_tensor *x, zt_tensor **y) {
  if (!m || !m->span)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_module_run_sequence: %s", m ? "the module is not a sequence" : "module is NULL");
  if (m->n_children < 1) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_module_run_sequence: sequence \"%s\" is empty", m->name);
  return zt_span_run((zt_span_next){m, 0}, 0, m->n_children, x, y);
}
