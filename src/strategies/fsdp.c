/* FSDP set-up: strategies and options, wrap units (by hand and by policy), flattening each
 * unit's parameters into one padded flat buffer that the parameter tensors view, sharding
 * it over the shard group, the hooks, and the optimizer's pieces (the parts of each
 * parameter that fall in this rank's shard). The run-time half is in fsdp_run.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/tensor_internal.h"
#include "strategies/fsdp_internal.h"
#include "zt/nn.h"

static const char *const k_strategy_names[ZT_SHARD_STRATEGY_COUNT] = {"full", "grad_op", "opt", "none", "hybrid"};

const char *zt_shard_strategy_name(zt_shard_strategy s) {
  return (int)s >= 0 && s < ZT_SHARD_STRATEGY_COUNT ? k_strategy_names[s] : "invalid";
}

zt_status zt_shard_strategy_parse(const char *text, zt_shard_strategy *s, int *group) {
  if (!text || !s || !group) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_shard_strategy_parse: NULL argument");
  *group = 0;
  for (int i = 0; i < ZT_SHARD_STRATEGY_COUNT; i++)
    if (i != ZT_SHARD_HYBRID && !strcmp(text, k_strategy_names[i])) {
      *s = (zt_shard_strategy)i;
      return ZT_OK;
    }
  if (!strncmp(text, "hybrid:", 7)) {
    char *end = NULL;
    long g = strtol(text + 7, &end, 10);
    if (end != text + 7 && !*end && g >= 1 && g <= 1 << 20) {
      *s = ZT_SHARD_HYBRID;
      *group = (int)g;
      return ZT_OK;
    }
  }
  return ZT_ERR(ZT_STATUS_INVALID_ARG,
                "unknown shard strategy '%s': use full (ZeRO-3), grad_op (ZeRO-2), opt (ZeRO-1), none (DDP) or "
                "hybrid:G (full shard inside groups of G ranks)",
                text);
}

const char *zt_fsdp_state_name(zt_fsdp_state s) {
  static const char *const names[] = {"IDLE", "FORWARD", "BACKWARD_PRE", "BACKWARD_POST"};
  return (int)s >= 0 && s <= ZT_FSDP_STATE_BACKWARD_POST ? names[s] : "invalid";
}

zt_fsdp_options zt_fsdp_options_default(void) {
  zt_fsdp_options o;
  memset(&o, 0, sizeof o);
  o.strategy = ZT_SHARD_FULL;
  o.backward_prefetch = true;
  o.limit_all_gathers = 2;
  o.broadcast_params = true;
  o.param_dtype = ZT_DTYPE_F32;
  o.reduce_dtype = ZT_DTYPE_F32;
  return o;
}

static bool low_precision(zt_dtype d) { return d == ZT_DTYPE_BF16 || d == ZT_DTYPE_F16; }

static zt_status check_options(const zt_fsdp_options *o, int world) {
  if ((int)o->strategy < 0 || o->strategy >= ZT_SHARD_STRATEGY_COUNT)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_fsdp_new: unknown strategy %d: use a zt_shard_strategy value",
                  (int)o->strategy);
  if (o->strategy == ZT_SHARD_HYBRID && (o->hybrid_group < 1 || world % o->hybrid_group))
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_fsdp_new: HYBRID needs hybrid_group (ranks per shard group) dividing the %d ranks; got %d",
                  world, o->hybrid_group);
  if (o->limit_all_gathers < 0)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_fsdp_new: limit_all_gathers is %d; use 0 (no limit) or more",
                  o->limit_all_gathers);
  if (o->param_dtype != ZT_DTYPE_F32 && !low_precision(o->param_dtype))
    return ZT_ERR(ZT_STATUS_DTYPE, "zt_fsdp_new: param_dtype %s; use f32, bf16 or f16",
                  zt_dtype_name(o->param_dtype));
  if (o->state_store && (o->strategy == ZT_SHARD_OPT || o->strategy == ZT_SHARD_NONE))
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_fsdp_new: a state store with strategy %s, which keeps every full parameter in RAM: use full, "
                  "hybrid or grad_op (they gather each unit when it runs) or no state store",
                  zt_shard_strategy_name(o->strategy));
  if (o->reduce_dtype != ZT_DTYPE_F32 && !low_precision(o->reduce_dtype))
    return ZT_ERR(ZT_STATUS_DTYPE, "zt_fsdp_new: reduce_dtype %s; use f32, bf16 or f16",
                  zt_dtype_name(o->reduce_dtype));
  return ZT_OK;
}

/* The smallest power of two f with world / f <= f that divides world (fairscale's
 * pre-divide factor): dividing by f before a low-precision sum and by world / f after it
 * keeps partial sums away from both overflow and underflow. */
static double predivide_factor(int world) {
  int f = 1;
  while (world % f == 0 && world / f > f) f *= 2;
  return f;
}

/* The shard group and the replicas: FULL/GRAD_OP/OPT shard over every rank; NONE keeps a
 * group of one (replicas: everyone); HYBRID groups of G consecutive ranks. */
static zt_status make_groups(zt_fsdp *f) {
  int r = zt_comm_rank(f->comm), n = f->world;
  int G = n;
  if (f->o.strategy == ZT_SHARD_NONE) G = 1;
  if (f->o.strategy == ZT_SHARD_HYBRID) G = f->o.hybrid_group;
  f->G = G;
  if (G == n) {
    f->shard_comm = f->comm;
  } else if (G == 1) {
    ZT_TRY(zt_comm_init_local(&f->shard_comm));
    f->own_shard = true;
    zt_comm_set_debug(f->shard_comm, zt_comm_debug(f->comm));
  } else {
    ZT_TRY(zt_comm_split(f->comm, r / G, r, &f->shard_comm));
    f->own_shard = true;
  }
  if (G == n) return ZT_OK;
  if (G == 1) {
    f->rep_comm = f->comm;
    return ZT_OK;
  }
  ZT_TRY(zt_comm_split(f->comm, r % G, r, &f->rep_comm));
  f->own_rep = true;
  return ZT_OK;
}

zt_status zt_fsdp_new(zt_comm *comm, zt_module *root, const zt_fsdp_options *o, zt_fsdp **out) {
  if (!out) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_fsdp_new: out is NULL");
  *out = NULL;
  if (!comm) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_fsdp_new: comm is NULL; pass a process group (zt_comm_world)");
  if (!root) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_fsdp_new: root module is NULL");
  zt_fsdp_options opt = o ? *o : zt_fsdp_options_default();
  ZT_TRY(check_options(&opt, zt_comm_size(comm)));
  zt_fsdp *f = calloc(1, sizeof *f);
  if (!f) return ZT_ERR(ZT_STATUS_OOM, "out of host memory for a zt_fsdp");
  f->comm = comm;
  f->root_m = root;
  f->o = opt;
  f->world = zt_comm_size(comm);
  f->sync = true;
  f->cb_task = -1;
  bool lp = low_precision(opt.reduce_dtype);
  f->pre_div = lp ? predivide_factor(f->world) : 1.0;
  f->post_div = f->world / f->pre_div;
  zt_status s = make_groups(f);
  if (s) {
    zt_fsdp_free(f);
    return s;
  }
  *out = f;
  return ZT_OK;
}

/* ------------------------------------------------------------------ wrapping */

/* Whether needle is m or inside m's tree. */
static bool contains(const zt_module *m, const zt_module *needle) {
  if (m == needle) return true;
  for (int i = 0; i < m->n_children; i++)
    if (contains(m->children[i], needle)) return true;
  return false;
}

/* The dotted path of needle below m (prefix: m's path); false if not found. */
#define PATH_CAP 160 /* as zt__fsdp_unit.name */
static bool path_of(const zt_module *m, const char *prefix, const zt_module *needle, char out[PATH_CAP]) {
  if (m == needle) {
    memcpy(out, prefix, PATH_CAP);
    return true;
  }
  char p[PATH_CAP];
  for (int i = 0; i < m->n_children; i++) {
    const zt_module *c = m->children[i];
    int n = snprintf(p, sizeof p, "%.*s%s%s", PATH_CAP - 50, prefix, *prefix && *c->name ? "." : "", c->name);
    if (n > 0 && n < PATH_CAP && path_of(c, p, needle, out)) return true;
  }
  return false;
}

zt_status zt_fsdp_wrap(zt_fsdp *f, zt_module *m) {
  if (!f || !m) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_fsdp_wrap: NULL fsdp or module");
  if (f->inited) return ZT_ERR(ZT_STATUS_STATE, "zt_fsdp_wrap: units are fixed once zt_fsdp_init has run");
  char name[PATH_CAP] = "";
  if (m == f->root_m)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_fsdp_wrap: the root module is always a unit; wrap its submodules");
  if (!path_of(f->root_m, (char[PATH_CAP]){""}, m, name))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_fsdp_wrap: module \"%s\" (%s) is not inside the root's tree", m->name,
                  m->kind);
  for (int i = 0; i < f->n_units; i++) {
    zt_module *w = f->units[i]->m;
    if (contains(w, m) || contains(m, w))
      return ZT_ERR(ZT_STATUS_INVALID_ARG,
                    "zt_fsdp_wrap: module '%s' %s unit '%s'; units must not nest (besides the root): wrap one of them",
                    name, w == m ? "is already" : contains(w, m) ? "is inside" : "contains", f->units[i]->name);
  }
  zt__fsdp_unit **us = realloc(f->units, sizeof *us * (size_t)(f->n_units + 1));
  if (!us) return ZT_ERR(ZT_STATUS_OOM, "out of host memory for an FSDP unit");
  f->units = us;
  zt__fsdp_unit *u = calloc(1, sizeof *u);
  if (!u) return ZT_ERR(ZT_STATUS_OOM, "out of host memory for an FSDP unit");
  u->f = f;
  u->m = m;
  snprintf(u->name, sizeof u->name, "%s", name);
  us[f->n_units++] = u;
  return ZT_OK;
}

bool zt_fsdp_policy_blocks(const zt_module *m, void *user_data) {
  (void)user_data;
  return m && m->kind && !strcmp(m->kind, "Block");
}

static zt_status auto_wrap(zt_fsdp *f, zt_module *m, zt_fsdp_wrap_policy policy, void *ud) {
  if (m != f->root_m && policy(m, ud)) return zt_fsdp_wrap(f, m);
  for (int i = 0; i < m->n_children; i++) ZT_TRY(auto_wrap(f, m->children[i], policy, ud));
  return ZT_OK;
}

zt_status zt_fsdp_auto_wrap(zt_fsdp *f, zt_fsdp_wrap_policy policy, void *user_data) {
  if (!f) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_fsdp_auto_wrap: fsdp is NULL");
  return auto_wrap(f, f->root_m, policy ? policy : zt_fsdp_policy_blocks, user_data);
}

/* ------------------------------------------------------------------ flattening and sharding */

/* Units in module order (the order of a depth-first walk), so every rank numbers them alike
 * whatever order they were wrapped in. */
static void order_units(zt_fsdp *f, const zt_module *m, int *k, zt__fsdp_unit **out) {
  for (int i = 0; i < f->n_units; i++)
    if (f->units[i]->m == m) {
      out[(*k)++] = f->units[i];
      return;
    }
  for (int i = 0; i < m->n_children; i++) order_units(f, m->children[i], k, out);
}

static zt_status check_param(zt_fsdp *f, const zt_param *p) {
  const zt_tensor *t = p->tensor;
  if (t->dtype != ZT_DTYPE_F32)
    return ZT_ERR(ZT_STATUS_DTYPE, "zt_fsdp_init: parameter '%s' is %s; FSDP keeps f32 master parameters", p->name,
                  zt_dtype_name(t->dtype));
  if (!zt_tensor_is_contiguous(t) || t->is_view || t->offset)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_fsdp_init: parameter '%s' must be a contiguous tensor with storage of its own (not a view)",
                  p->name);
  if (f->have_dev && !zt_device_equal(zt_tensor_device(t), f->dev)) {
    char a[16], b[16];
    return ZT_ERR(ZT_STATUS_DEVICE, "zt_fsdp_init: parameter '%s' is on %s, others on %s; move them to one device",
                  p->name, zt_device_str(zt_tensor_device(t), a), zt_device_str(f->dev, b));
  }
  f->dev = zt_tensor_device(t);
  f->have_dev = true;
  if (!zt_tensor_is_leaf(t)) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_fsdp_init: parameter '%s' is not a leaf", p->name);
  if (t->storage->released && !zt_storage_is_evicted(t->storage)) /* evicted: read from its store */
    return ZT_ERR(ZT_STATUS_RELEASED, "zt_fsdp_init: parameter '%s' has released storage", p->name);
  return ZT_OK;
}

/* The parameters of u (names under prefix), skipping tensors listed already (tied). For the
 * root, skips tensors of the other units. */
static zt_status unit_params(zt_fsdp *f, zt__fsdp_unit *u) {
  zt_param *ps = NULL;
  int n = 0;
  ZT_TRY(zt_module_named_params(u->m, u->name, &n, &ps));
  u->ps = calloc((size_t)(n ? n : 1), sizeof *u->ps);
  if (!u->ps) {
    free(ps);
    return ZT_ERR(ZT_STATUS_OOM, "out of host memory for FSDP parameters");
  }
  zt_status s = ZT_OK;
  for (int i = 0; i < n && !s; i++) {
    zt_tensor *t = ps[i].tensor;
    bool dup = false;
    for (int j = 0; j < u->n_ps && !dup; j++) dup = u->ps[j].t == t;
    for (int k = 0; k < f->n_units && !dup; k++) {
      zt__fsdp_unit *o = f->units[k];
      if (o == u) continue;
      for (int j = 0; j < o->n_ps && !dup; j++)
        if (o->ps[j].t == t) {
          if (!u->is_root)
            s = ZT_ERR(ZT_STATUS_INVALID_ARG,
                       "zt_fsdp_init: parameter '%s' is shared by units '%s' and '%s'; a shared (tied) tensor must "
                       "live in one unit: wrap a module that holds both uses",
                       ps[i].name, o->name, u->name);
          dup = true;
        }
    }
    if (dup || s) continue;
    if ((s = check_param(f, &ps[i]))) break;
    zt__fsdp_param *p = &u->ps[u->n_ps++];
    p->u = u;
    p->t = t;
    snprintf(p->name, sizeof p->name, "%s", ps[i].name);
    p->decay = ps[i].decay;
    p->trainable = t->requires_grad;
    p->off = u->numel;
    p->numel = zt_tensor_numel(t);
    p->mask = -1;
    u->numel += p->numel;
    if (p->trainable)
      p->mask = f->n_mask++, u->n_trainable++;
    else
      u->keep_until_end = true;
  }
  free(ps);
  return s;
}

/* Flatten u: the flat buffer (rank 0's values when broadcasting), the parameter tensors
 * rebound to it, the shard. */
static zt_status flatten(zt_fsdp *f, zt__fsdp_unit *u) {
  int G = f->G;
  u->P = (u->numel + G - 1) / G * G;
  u->S = u->P / G;
  u->gathered_from = UINT64_MAX;
  if (u->numel == 0) return ZT_OK;
  ZT_TRY(zt_storage_new((size_t)u->P * sizeof(float), f->dev, ZT_MEM_TAG_PARAM, &u->full));
  ZT_TRY(zt__tensor_new_view(u->full, 0, 1, &u->P, NULL, ZT_DTYPE_F32, &u->full_t));
  /* byte moves through the device's backend: the padding zeroed, each parameter copied in */
  if (u->P > u->numel) {
    zt_tensor *pad;
    int64_t np = u->P - u->numel;
    ZT_TRY(zt__tensor_new_view(u->full, u->numel, 1, &np, NULL, ZT_DTYPE_F32, &pad));
    zt__dev_fill(pad, 0.0);
    zt_tensor_free(pad);
  }
  for (int i = 0; i < u->n_ps; i++) {
    zt__fsdp_param *p = &u->ps[i];
    if (!zt_storage_is_evicted(p->t->storage)) {
      zt__dev_copy_range(u->full_t, p->off, p->t, 0, p->numel);
      continue;
    }
    /* built into a store (zt_gpt2_new_evicted): read from it, never restored */
    char *dst = zt__tensor_host_ptr(u->full_t);
    if (!dst)
      return ZT_ERR(ZT_STATUS_DEVICE, "zt_fsdp_init: parameter '%s' is in a store and its unit's flat buffer is not "
                                      "host memory: restore it first",
                    p->name);
    ZT_TRY(zt_storage_read_evicted(p->t->storage, 0, (size_t)p->numel * sizeof(float), dst + p->off * (int64_t)sizeof(float)));
  }
  if (f->o.broadcast_params && f->world > 1) {
    zt_comm_stats a, b;
    zt_comm_stats_get(f->comm, &a);
    zt_status s = zt_broadcast(f->comm, u->full_t, 0);
    if (s) return zt__error_prefix(s, "FSDP: broadcasting unit '%s' from rank 0", u->name);
    zt_comm_stats_get(f->comm, &b);
    f->stats.comm_calls += b.calls - a.calls;
    f->stats.bytes_sent += b.bytes_sent - a.bytes_sent;
  }
  for (int i = 0; i < u->n_ps; i++) zt__tensor_rebind(u->ps[i].t, u->full, u->ps[i].off);
  /* with a state store the shard is its own storage even alone, so that it can leave RAM */
  u->aliased = G == 1 && f->o.param_dtype == ZT_DTYPE_F32 && !zt__fsdp_stored(f);
  if (u->aliased) {
    ZT_TRY(zt__tensor_new_view(u->full, 0, 1, &u->S, NULL, ZT_DTYPE_F32, &u->shard));
  } else {
    int r = zt_comm_rank(f->shard_comm);
    ZT_TRY(zt_tensor_empty_tagged(1, &u->S, ZT_DTYPE_F32, f->dev, ZT_MEM_TAG_PARAM, &u->shard));
    zt__dev_copy_range(u->shard, 0, u->full_t, (int64_t)r * u->S, u->S);
  }
  /* What the parameters hold now is what a gather of this shard gives (in f32). */
  if (f->o.param_dtype == ZT_DTYPE_F32) u->gathered_from = u->shard->storage->version;
  u->gathered = true;
  if (u->aliased) return ZT_OK;
  /* FULL, HYBRID and GRAD_OP gather in the first forward; OPT and low-precision NONE keep
   * full values, made now as a gather would make them */
  if (f->o.strategy == ZT_SHARD_OPT || f->o.strategy == ZT_SHARD_NONE) return zt__fsdp_gather(u);
  ZT_TRY(zt__fsdp_reshard(u));
  zt_storage_set_name(u->shard->storage, u->is_root ? "FSDP shard of the root unit" : u->name);
  return zt__fsdp_shard_out(u);
}

/* This rank's pieces: the part of each trainable parameter inside [r S, (r+1) S). */
static zt_status build_pieces(zt_fsdp *f) {
  int r = zt_comm_rank(f->shard_comm);
  int cap = f->n_mask ? f->n_mask : 1;
  f->piece_params = calloc((size_t)cap, sizeof *f->piece_params);
  f->pieces = calloc((size_t)cap, sizeof *f->pieces);
  f->piece_of = calloc((size_t)cap, sizeof *f->piece_of);
  if (!f->piece_params || !f->pieces || !f->piece_of) return ZT_ERR(ZT_STATUS_OOM, "out of host memory for FSDP pieces");
  for (int k = 0; k < f->n_units; k++) {
    zt__fsdp_unit *u = f->units[k];
    int64_t lo = (int64_t)r * u->S, hi = lo + u->S;
    u->first_piece = f->n_pieces;
    for (int i = 0; i < u->n_ps; i++) {
      zt__fsdp_param *p = &u->ps[i];
      int64_t a = p->off > lo ? p->off : lo, b = p->off + p->numel < hi ? p->off + p->numel : hi;
      if (!p->trainable || b <= a) continue;
      int j = f->n_pieces++;
      int64_t count = b - a;
      zt_param *pp = &f->piece_params[j];
      snprintf(pp->name, sizeof pp->name, "%s", p->name);
      pp->decay = p->decay;
      ZT_TRY(zt__tensor_new_view(u->shard->storage, u->shard->offset + (a - lo), 1, &count, NULL, ZT_DTYPE_F32,
                                 &pp->tensor));
      f->pieces[j] = (zt_fsdp_piece){pp->name, p->t->ndim, p->t->shape, a - p->off, count};
      f->piece_of[j] = p;
    }
    u->n_pieces = f->n_pieces - u->first_piece;
  }
  return ZT_OK;
}

zt_status zt_fsdp_init(zt_fsdp *f) {
  if (!f) return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_fsdp_init: fsdp is NULL");
  if (f->inited) return ZT_ERR(ZT_STATUS_STATE, "zt_fsdp_init: already initialised");
  /* the wrapped units in module order, then the root */
  zt__fsdp_unit **us = calloc((size_t)f->n_units + 1, sizeof *us);
  zt__fsdp_unit *root = calloc(1, sizeof *root);
  if (!us || !root) {
    free(us);
    free(root);
    return ZT_ERR(ZT_STATUS_OOM, "out of host memory for FSDP units");
  }
  int k = 0;
  order_units(f, f->root_m, &k, us);
  ZT_ASSERT(k == f->n_units);
  root->f = f;
  root->m = f->root_m;
  root->is_root = true;
  us[k] = root;
  free(f->units);
  f->units = us;
  f->n_units = k + 1;
  f->inited = true; /* from here on zt_fsdp_free undoes hooks */
  zt_status s = ZT_OK;
  for (int i = 0; i < f->n_units && !s; i++) s = unit_params(f, f->units[i]);
  for (int i = 0; i < f->n_units && !s; i++) {
    zt__fsdp_unit *u = f->units[i];
    u->pre_order = u->post_order = -1;
    s = flatten(f, u);
    for (int j = 0; j < u->n_ps && !s; j++)
      if (u->ps[j].trainable) {
        s = zt_tensor_register_post_accumulate_grad_hook(u->ps[j].t, zt__fsdp_grad_ready, &u->ps[j], &u->ps[j].hook);
        /* contributions go straight into the zeroed flat-gradient view (no buffer held) */
        if (!s) s = zt_tensor_set_eager_accumulation(u->ps[j].t, true);
      }
    if (!s && zt_module_has_pre_hook(u->m, zt__fsdp_pre_forward))
      s = ZT_ERR(ZT_STATUS_STATE, "module \"%s\" (%s) is wrapped by FSDP already; free that zt_fsdp first",
                 u->m->name, u->m->kind);
    if (!s) s = zt_module_add_hooks(u->m, &(zt_module_hooks){zt__fsdp_pre_forward, zt__fsdp_post_forward, u}, &u->hook_id);
  }
  size_t nu = (size_t)(unsigned)k + 1;
  f->pre_seq = calloc(nu, sizeof *f->pre_seq);
  f->post_seq = calloc(nu, sizeof *f->post_seq);
  if (!s && (!f->pre_seq || !f->post_seq)) s = ZT_ERR(ZT_STATUS_OOM, "out of host memory");
  if (!s) s = build_pieces(f);
  return s ? zt__error_prefix(s, "zt_fsdp_init") : ZT_OK;
}

void zt_fsdp_free(zt_fsdp *f) {
  if (!f) return;
  if (f->inited) zt__fsdp_recover(f);
  for (int k = 0; k < f->n_units; k++) {
    zt__fsdp_unit *u = f->units[k];
    if (u->hook_id) zt_module_remove_hooks(u->m, u->hook_id);
    for (int i = 0; i < u->n_ps; i++) zt_hook_remove(u->ps[i].hook);
    if (u->gather_work) ZT_IGNORE(zt_comm_wait(u->gather_work), "freeing: a failed gather only means its buffers go");
    zt_tensor_free(u->gather_send);
    zt_tensor_free(u->gather_recv);
    zt__fsdp_drop_grads(u);
    zt_tensor_free(u->grad_shard);
    zt_tensor_free(u->shard);
    zt_tensor_free(u->full_t);
    zt_storage_release_ref(u->full);
    free(u->ps);
    free(u);
  }
  for (int j = 0; j < f->n_pieces; j++) zt_tensor_free(f->piece_params[j].tensor);
  free(f->piece_params);
  free(f->pieces);
  free(f->piece_of);
  free(f->units);
  free(f->pre_seq);
  free(f->post_seq);
  if (f->own_shard) zt_comm_free(f->shard_comm);
  if (f->own_rep) zt_comm_free(f->rep_comm);
  free(f);
}

/* ------------------------------------------------------------------ introspection */

int zt_fsdp_params(zt_fsdp *f, zt_param **params, const zt_fsdp_piece **pieces) {
  if (params) *params = f ? f->piece_params : NULL;
  if (pieces) *pieces = f ? f->pieces : NULL;
  return f ? f->n_pieces : 0;
}

int zt_fsdp_num_units(const zt_fsdp *f) { return f && f->inited ? f->n_units : 0; }

static const zt__fsdp_unit *unit_at(const zt_fsdp *f, int unit) {
  return f && f->inited && unit >= 0 && unit < f->n_units ? f->units[unit] : NULL;
}

zt_fsdp_state zt_fsdp_unit_state(const zt_fsdp *f, int unit) {
  const zt__fsdp_unit *u = unit_at(f, unit);
  return u ? u->state : ZT_FSDP_STATE_IDLE;
}

const char *zt_fsdp_unit_name(const zt_fsdp *f, int unit) {
  const zt__fsdp_unit *u = unit_at(f, unit);
  return u ? u->name : NULL;
}

int64_t zt_fsdp_unit_numel(const zt_fsdp *f, int unit) {
  const zt__fsdp_unit *u = unit_at(f, unit);
  return u ? u->numel : 0;
}

bool zt_fsdp_unit_gathered(const zt_fsdp *f, int unit) {
  const zt__fsdp_unit *u = unit_at(f, unit);
  return u && u->full && !u->full->released;
}

zt_comm *zt_fsdp_shard_comm(const zt_fsdp *f) { return f ? f->shard_comm : NULL; }
zt_comm *zt_fsdp_replicate_comm(const zt_fsdp *f) { return f ? f->rep_comm : NULL; }
