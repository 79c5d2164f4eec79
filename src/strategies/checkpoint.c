/* Activation checkpointing (torch.utils.checkpoint semantics). Non-reentrant: a frame per
 * call owns the region's inputs (saved on a no-op node, so a parent checkpoint manages
 * them) and one record per tensor the region saved; the saved records hold only an index
 * (a holder) that keeps the frame alive. Recomputed tensors are kept per graph task and
 * handed to the engine (which frees them after the node's backward) on first unpack.
 * Reentrant: a custom function that recomputes and runs a nested backward. */
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "ops/sac.h"
#include "zt/checkpoint.h"

static _Thread_local bool tl_early_stop_off = false; /* zero-initialised: early stop on */

zt_checkpoint_options zt_checkpoint_options_default(void) {
  return (zt_checkpoint_options){ZT_CHECKPOINT_EARLY_STOP_DEFAULT, true, true, {NULL, NULL}};
}

bool zt_checkpoint_set_early_stop(bool enable) {
  bool prev = !tl_early_stop_off;
  tl_early_stop_off = !enable;
  return prev;
}

static zt_status check_args(const char *who, zt_checkpoint_fn fn, int n_in, zt_tensor *const *inputs, int n_out,
                            zt_tensor **outputs) {
  if (!fn) return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: fn is NULL", who);
  if (n_in < 0 || (n_in > 0 && !inputs))
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: n_in is %d but inputs is %s", who, n_in, inputs ? "set" : "NULL");
  if (n_out < 1 || !outputs)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "%s: fn must make at least one output (n_out %d, outputs %s)", who, n_out,
                  outputs ? "set" : "NULL");
  for (int i = 0; i < n_out; i++) outputs[i] = NULL;
  return ZT_OK;
}

/* An alias of a saved input for recomputation: a fresh leaf that requires grad where the
 * original did, so the region's ops record (and save) exactly as in forward. */
static zt_status detached_input(const zt_tensor *t, bool requires_grad, zt_tensor **out) {
  ZT_TRY(zt_tensor_alias(t, out));
  if (!requires_grad) return ZT_OK;
  zt_status s = zt_tensor_set_requires_grad(*out, true);
  if (s) {
    zt_tensor_free(*out);
    *out = NULL;
  }
  return s;
}

static void free_tensors(zt_tensor **ts, int n) {
  if (!ts) return;
  for (int i = 0; i < n; i++) zt_tensor_free(ts[i]);
  free(ts);
}

/* The environment of a recomputation: grad on, the forward's RNG state (the caller's is
 * put back by env_leave), activations tagged as such (backward runs under TEMP). */
typedef struct recompute_env {
  bool grad_was;
  zt_autocast_state autocast_was;
  zt_mem_tag tag_was;
  zt_rng_state rng_was;
  bool rng_set;
  zt__sac_scope sac_was;
} recompute_env;

/* sac: the region's selective cache, replayed (NULL: every op runs, no outer policy
 * applies); autocast: the mixed-precision state the forward ran under */
static void env_enter(recompute_env *e, bool preserve_rng, zt_rng_state rng, zt__sac *sac, zt_autocast_state autocast) {
  zt__sac_enter(sac, ZT__SAC_REPLAY, &e->sac_was);
  e->autocast_was = zt_autocast_set(autocast);
  e->rng_set = preserve_rng;
  if (preserve_rng) {
    e->rng_was = zt_rng_get_state();
    zt_rng_set_state(rng);
  }
  e->grad_was = zt_set_grad_enabled(true);
  e->tag_was = zt_mem_tag_push(ZT_MEM_TAG_ACTIVATION);
}

static void env_leave(recompute_env *e) {
  zt_mem_tag_pop(e->tag_was);
  zt_set_grad_enabled(e->grad_was);
  if (e->rng_set) zt_rng_set_state(e->rng_was);
  zt_autocast_set(e->autocast_was);
  zt__sac_leave(&e->sac_was);
}

/* ================================================================ non-reentrant */
typedef struct saved_meta {
  int ndim;
  int64_t shape[ZT_MAX_DIMS];
  zt_dtype dtype;
  bool alive; /* its saved record still exists (false once released) */
} saved_meta;

/* The tensors recomputed for one graph task; slots are emptied as they are unpacked. */
typedef struct recomputed {
  int64_t gid;
  int n;
  zt_tensor **t;
  int pending;
  struct recomputed *next;
} recomputed;

typedef struct frame {
  int refs; /* the zt_checkpoint call + one per holder */
  zt_checkpoint_fn fn;
  void *user_data;
  void (*user_data_free)(void *); /* optional: the frame owns user_data */
  int n_in, n_out;
  bool early_stop, determinism_check, preserve_rng, in_forward;
  zt_rng_state rng;
  zt_tensor *dummy;     /* a leaf requiring grad: the saver node exists whatever the inputs */
  zt_tensor *saver_out; /* its grad_fn keeps the inputs as saved tensors */
  int *input_slot;      /* per input: its index among the saver's saved tensors, -1 if NULL */
  bool *input_requires_grad;
  saved_meta *saved;
  int n_saved, cap_saved;
  recomputed *recs;
  zt__sac *sac; /* selective checkpointing: the ops' outputs the policy kept (NULL: no policy) */
  zt_autocast_state autocast; /* at forward */
} frame;

typedef struct holder {
  frame *f;
  int idx;
} holder;

static void recomputed_free(recomputed *r) {
  free_tensors(r->t, r->n);
  free(r);
}

static void frame_unlink(frame *f, recomputed *r) {
  for (recomputed **p = &f->recs; *p; p = &(*p)->next)
    if (*p == r) {
      *p = r->next;
      return;
    }
}

static void frame_release(frame *f) {
  if (--f->refs > 0) return;
  while (f->recs) {
    recomputed *r = f->recs;
    f->recs = r->next;
    recomputed_free(r);
  }
  zt_tensor_free(f->saver_out);
  zt_tensor_free(f->dummy);
  free(f->input_slot);
  free(f->input_requires_grad);
  free(f->saved);
  zt__sac_free(f->sac);
  if (f->user_data_free) f->user_data_free(f->user_data);
  free(f);
}

/* ---------------------------------------------------------------- input saver */
static zt_status saver_forward(zt_node *ctx, int n_inputs, zt_tensor *const *inputs, int n_outputs,
                               zt_tensor **outputs, void *user_data) {
  (void)n_outputs;
  frame *f = user_data;
  for (int i = 1; i < n_inputs; i++) {
    f->input_slot[i - 1] = -1;
    if (inputs[i]) ZT_TRY(zt_node_save(ctx, inputs[i], &f->input_slot[i - 1]));
  }
  return zt_tensor_empty(1, (int64_t[]){0}, ZT_DTYPE_F32, ZT_CPU, &outputs[0]);
}

static zt_status saver_backward(zt_node *ctx, int n_outputs, zt_tensor *const *grad_outputs, int n_inputs,
                                const bool *needs, zt_tensor **grad_inputs) {
  (void)ctx, (void)n_outputs, (void)grad_outputs, (void)n_inputs, (void)needs, (void)grad_inputs;
  return ZT_OK; /* its output is never used: backward does not reach it */
}

static const zt_function saver_fn = {"CheckpointSaveInputs", saver_forward, saver_backward};

/* ---------------------------------------------------------------- recomputation */
typedef struct recompute_ctx {
  frame *f;
  recomputed *r;
  int counter;  /* tensors saved so far by the recomputation */
  bool stopped; /* early stop was signalled */
} recompute_ctx;

static bool meta_matches(const saved_meta *m, const zt_tensor *t) {
  return m->dtype == t->dtype && zt_shape_equal(m->ndim, m->shape, t->ndim, t->shape);
}

/* Recomputation's pack: collect tensor idx for the frame (where its record is alive),
 * and pack an alias so the recomputed graph itself can be backwarded (Rule 6). Early
 * stop is an error status from pack that unwinds the op and fn; recompute() knows it by
 * ctx->stopped and swallows it. */
static zt_status recompute_pack(const zt_tensor *t, void **packed, void *user_data) {
  recompute_ctx *c = user_data;
  frame *f = c->f;
  int idx = c->counter++;
  if (idx < c->r->n) {
    saved_meta *m = &f->saved[idx];
    if (f->determinism_check && !meta_matches(m, t)) {
      char a[128], b[128];
      return ZT_ERR(ZT_STATUS_AUTOGRAD,
                    "zt_checkpoint: recomputation is not deterministic: saved tensor %d had shape %s (%s) in "
                    "forward but shape %s (%s) when recomputed in backward; the checkpointed fn must do the same "
                    "work each time it runs (or pass determinism_check=false)",
                    idx, zt_shape_str(m->ndim, m->shape, a), zt_dtype_name(m->dtype), zt_shape_str(t->ndim, t->shape, b),
                    zt_dtype_name(t->dtype));
    }
    if (m->alive) {
      ZT_TRY(zt_tensor_alias(t, &c->r->t[idx]));
      c->r->pending++;
    }
    if (f->early_stop && c->counter == c->r->n) {
      c->stopped = true;
      return ZT_ERR(ZT_STATUS_STATE, "zt_checkpoint: recomputation stopped early (internal signal)");
    }
  }
  zt_tensor *a;
  ZT_TRY(zt_tensor_alias(t, &a));
  *packed = a;
  return ZT_OK;
}

static zt_status recompute_unpack(void *packed, zt_tensor **out, void *user_data) {
  (void)user_data;
  return zt_tensor_alias(packed, out);
}

static void recompute_release(void *packed, void *user_data) {
  (void)user_data;
  zt_tensor_free(packed);
}

/* Run fn again for graph task gid; on success *out holds the recomputed tensors (linked
 * into the frame unless gid is -1, an unpack outside backward). Early stop relies on fn
 * passing the pack hook's status up: a fn that swallows errors defeats it (and hides
 * real failures). */
static zt_status recompute(frame *f, int64_t gid, recomputed **out) {
  recomputed *r = calloc(1, sizeof *r);
  zt_tensor **args = calloc((size_t)(f->n_in ? f->n_in : 1), sizeof *args);
  zt_tensor **outs = calloc((size_t)f->n_out, sizeof *outs);
  if (r) r->t = calloc((size_t)(f->n_saved ? f->n_saved : 1), sizeof *r->t);
  if (!r || !r->t || !args || !outs) {
    size_t bytes = sizeof *r + (size_t)(f->n_saved ? f->n_saved : 1) * sizeof(zt_tensor *) +
                   (size_t)(f->n_in ? f->n_in : 1) * sizeof *args + (size_t)f->n_out * sizeof *outs;
    if (r) free(r->t);
    free(r);
    free(args);
    free(outs);
    return ZT_ERR(ZT_STATUS_OOM, "zt_checkpoint: out of host memory (%zu bytes) for the recomputation of a region", bytes);
  }
  r->gid = gid;
  r->n = f->n_saved;
  /* linked now: a holder released while fn runs drops its slot (ckpt_release) */
  if (gid >= 0) {
    r->next = f->recs;
    f->recs = r;
  }
  zt_status s = ZT_OK;
  zt_node *saver = zt_tensor_grad_fn(f->saver_out);
  for (int i = 0; i < f->n_in && s == ZT_OK; i++) {
    if (f->input_slot[i] < 0) continue;
    zt_tensor *t;
    s = zt_node_saved(saver, f->input_slot[i], &t); /* may recompute a parent checkpoint (Rule 2) */
    if (s == ZT_OK) s = detached_input(t, f->input_requires_grad[i], &args[i]);
  }
  zt_node_drop_unpacked(saver); /* a parent's recomputed tensors: freed now (Rule 4) */
  if (s) {
    zt__error_prefix(s, "zt_checkpoint: cannot recompute the region (its inputs)");
  } else {
    recompute_ctx c = {f, r, 0, false};
    zt_saved_tensor_hooks h = {recompute_pack, recompute_unpack, recompute_release, &c};
    recompute_env env;
    zt_saved_hooks_stash stash;
    env_enter(&env, f->preserve_rng, f->rng, f->sac, f->autocast);
    zt_saved_tensor_hooks_stash(&stash); /* Rule 3: as if no checkpoint were active */
    s = zt_saved_tensor_hooks_push(&h);
    if (s == ZT_OK) {
      s = f->fn(args, f->n_in, outs, f->n_out, f->user_data);
      zt_status p = zt_saved_tensor_hooks_pop();
      if (!s) s = p;
    }
    zt_saved_tensor_hooks_unstash(&stash);
    env_leave(&env);
    if (c.stopped) {
      zt_clear_error();
      s = ZT_OK;
    } else if (s == ZT_OK && f->determinism_check && !f->in_forward && c.counter != r->n) {
      /* during the forward (backward inside fn) the region is not finished: counts differ */
      s = ZT_ERR(ZT_STATUS_AUTOGRAD,
                 "zt_checkpoint: recomputation is not deterministic: the forward saved %d tensors but the "
                 "recomputation saved %d; the checkpointed fn must do the same work each time it runs (or pass "
                 "determinism_check=false)",
                 r->n, c.counter);
    }
  }
  for (int i = 0; i < f->n_out; i++) zt_tensor_free(outs[i]);
  free(outs);
  free_tensors(args, f->n_in);
  if (s) {
    if (gid >= 0) frame_unlink(f, r);
    recomputed_free(r);
    return s;
  }
  *out = r;
  return ZT_OK;
}

/* ---------------------------------------------------------------- the checkpoint's hooks */
static zt_status ckpt_pack(const zt_tensor *t, void **packed, void *user_data) {
  frame *f = user_data;
  if (f->n_saved == f->cap_saved) {
    int cap = f->cap_saved ? 2 * f->cap_saved : 16;
    saved_meta *m = realloc(f->saved, sizeof *m * (size_t)cap);
    if (!m) return ZT_ERR(ZT_STATUS_OOM, "zt_checkpoint: out of host memory for saved-tensor records");
    f->saved = m;
    f->cap_saved = cap;
  }
  holder *h = malloc(sizeof *h);
  if (!h) return ZT_ERR(ZT_STATUS_OOM, "zt_checkpoint: out of host memory for a saved-tensor record");
  saved_meta *m = &f->saved[f->n_saved];
  m->ndim = t->ndim;
  memcpy(m->shape, t->shape, sizeof m->shape);
  m->dtype = t->dtype;
  m->alive = true;
  h->f = f;
  h->idx = f->n_saved++;
  f->refs++;
  *packed = h;
  return ZT_OK;
}

static zt_status ckpt_unpack(void *packed, zt_tensor **out, void *user_data) {
  (void)user_data;
  holder *h = packed;
  frame *f = h->f;
  int64_t gid = zt_autograd_graph_task_id();
  recomputed *r = NULL;
  if (gid >= 0)
    for (recomputed *q = f->recs; q && !r; q = q->next)
      if (q->gid == gid) r = q;
  if (!r) ZT_TRY(recompute(f, gid, &r));
  zt_tensor *t = h->idx < r->n ? r->t[h->idx] : NULL;
  if (t) {
    r->t[h->idx] = NULL;
    r->pending--;
  }
  if (gid < 0 || r->pending == 0) {
    if (gid >= 0) frame_unlink(f, r);
    recomputed_free(r);
  }
  if (!t)
    return ZT_ERR(ZT_STATUS_AUTOGRAD,
                  "zt_checkpoint: saved tensor %d is unpacked but was never recomputed or was already unpacked in "
                  "this backward; a node's saved tensors can be read once per backward",
                  h->idx);
  *out = t; /* the engine owns it and frees it after the node's backward (Rule 4) */
  return ZT_OK;
}

static void ckpt_release(void *packed, void *user_data) {
  (void)user_data;
  holder *h = packed;
  frame *f = h->f;
  f->saved[h->idx].alive = false;
  for (recomputed *r = f->recs; r; r = r->next)
    if (h->idx < r->n && r->t[h->idx]) {
      zt_tensor_free(r->t[h->idx]);
      r->t[h->idx] = NULL;
      r->pending--;
    }
  free(h);
  frame_release(f);
}

/* zt_checkpoint; user_data_free (optional) gives the frame user_data, freed with it. */
static zt_status checkpoint_impl(zt_checkpoint_fn fn, void *user_data, void (*user_data_free)(void *), int n_in,
                                 zt_tensor *const *inputs, int n_out, zt_tensor **outputs,
                                 const zt_checkpoint_options *opts) {
  zt_checkpoint_options o = opts ? *opts : zt_checkpoint_options_default();
  if (!zt_grad_enabled()) {
    zt_status s = fn(inputs, n_in, outputs, n_out, user_data);
    if (user_data_free) user_data_free(user_data);
    return s;
  }
  frame *f = calloc(1, sizeof *f);
  if (!f) {
    if (user_data_free) user_data_free(user_data);
    return ZT_ERR(ZT_STATUS_OOM, "zt_checkpoint: out of host memory (%zu bytes) for a region's frame", sizeof *f);
  }
  f->refs = 1;
  f->fn = fn;
  f->user_data = user_data;
  f->user_data_free = user_data_free;
  f->n_in = n_in;
  f->n_out = n_out;
  f->early_stop = o.early_stop == ZT_CHECKPOINT_EARLY_STOP_DEFAULT ? !tl_early_stop_off
                                                                   : o.early_stop == ZT_CHECKPOINT_EARLY_STOP_ON;
  f->determinism_check = o.determinism_check;
  f->preserve_rng = o.preserve_rng_state;
  if (f->preserve_rng) f->rng = zt_rng_get_state();
  if (o.policy.fn && !(f->sac = zt__sac_new(o.policy))) {
    frame_release(f); /* frees user_data with it */
    return ZT_STATUS_OOM; /* message recorded by zt__sac_new */
  }
  f->autocast = zt_autocast_get();
  f->input_slot = calloc((size_t)(n_in ? n_in : 1), sizeof *f->input_slot);
  f->input_requires_grad = calloc((size_t)(n_in ? n_in : 1), sizeof *f->input_requires_grad);
  zt_tensor **saver_in = calloc((size_t)n_in + 1, sizeof *saver_in);
  if (!f->input_slot || !f->input_requires_grad || !saver_in) {
    size_t bytes = (size_t)(n_in ? n_in : 1) * (sizeof *f->input_slot + sizeof *f->input_requires_grad) +
                   ((size_t)n_in + 1) * sizeof *saver_in;
    free(saver_in);
    frame_release(f); /* frees user_data with it */
    return ZT_ERR(ZT_STATUS_OOM, "zt_checkpoint: out of host memory (%zu bytes) for the input lists of a region of %d inputs",
                  bytes, n_in);
  }
  for (int i = 0; i < n_in; i++) {
    saver_in[i + 1] = inputs[i];
    f->input_requires_grad[i] = inputs[i] && inputs[i]->requires_grad;
  }
  zt_status s = zt_tensor_empty(1, (int64_t[]){0}, ZT_DTYPE_F32, ZT_CPU, &f->dummy);
  if (s == ZT_OK) s = zt_tensor_set_requires_grad(f->dummy, true);
  saver_in[0] = f->dummy;
  /* the inputs are saved through the current hooks: a parent checkpoint's (Rule 2) */
  if (s == ZT_OK) s = zt_function_apply(&saver_fn, n_in + 1, saver_in, 1, &f->saver_out, f);
  free(saver_in);
  if (s == ZT_OK) {
    zt_saved_tensor_hooks h = {ckpt_pack, ckpt_unpack, ckpt_release, f};
    s = zt_saved_tensor_hooks_push(&h);
    if (s == ZT_OK) {
      zt__sac_scope outer; /* this region's policy, not an enclosing region's, applies to its ops */
      zt__sac_enter(f->sac, ZT__SAC_RECORD, &outer);
      f->in_forward = true;
      s = fn(inputs, n_in, outputs, n_out, user_data);
      f->in_forward = false;
      zt__sac_leave(&outer);
      zt_status p = zt_saved_tensor_hooks_pop();
      if (!s) s = p;
    }
  }
  frame_release(f);
  return s;
}

zt_status zt_checkpoint(zt_checkpoint_fn fn, void *user_data, int n_in, zt_tensor *const *inputs, int n_out,
                        zt_tensor **outputs, const zt_checkpoint_options *opts) {
  ZT_TRY(check_args("zt_checkpoint", fn, n_in, inputs, n_out, outputs));
  return checkpoint_impl(fn, user_data, NULL, n_in, inputs, n_out, outputs, opts);
}

/* ---------------------------------------------------------------- sequential */
/* Stages [first, last) of one segment; the segment descriptors live in the frames of the
 * regions, so they stay valid for recomputation (freed with the frame). */
typedef struct segment {
  const zt_checkpoint_stage *stages;
  int first, last;
} segment;

static zt_status run_stages(const zt_checkpoint_stage *st, int first, int last, zt_tensor *x, zt_tensor **out) {
  zt_tensor *cur = x;
  zt_status s = ZT_OK;
  for (int i = first; i < last && s == ZT_OK; i++) {
    zt_tensor *next = NULL;
    if (!st[i].forward) s = ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_checkpoint_sequential: stage %d has no forward", i);
    if (s == ZT_OK) s = st[i].forward(st[i].self, cur, &next);
    if (s) s = zt__error_prefix(s, "in stage %d", i);
    if (cur != x) zt_tensor_free(cur);
    cur = next;
  }
  if (s == ZT_OK && cur == x) s = zt_tensor_alias(x, &cur); /* an empty run: a new tensor all the same */
  if (s == ZT_OK) *out = cur;
  return s;
}

static zt_status segment_fn(zt_tensor *const *inputs, int n_in, zt_tensor **outputs, int n_out, void *user_data) {
  (void)n_in, (void)n_out;
  segment *g = user_data;
  return run_stages(g->stages, g->first, g->last, inputs[0], &outputs[0]);
}

zt_status zt_checkpoint_sequential(const zt_checkpoint_stage *stages, int n, int segments, zt_tensor *input,
                                   zt_tensor **out, const zt_checkpoint_options *opts) {
  if (!stages || !input || !out || n < 1)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_checkpoint_sequential: need stages (n >= 1, got %d), input and out", n);
  if (segments < 1 || segments > n)
    return ZT_ERR(ZT_STATUS_INVALID_ARG, "zt_checkpoint_sequential: segments is %d; it must be in [1, %d] (the number of stages)",
                  segments, n);
  *out = NULL;
  int size = n / segments, start = 0;
  zt_tensor *cur = input;
  zt_status s = ZT_OK;
  for (int k = 0; k + 1 < segments && s == ZT_OK; k++, start += size) {
    /* the descriptor must outlive this call: keep it with the region's recomputation */
    segment *g = malloc(sizeof *g);
    if (!g) {
      s = ZT_ERR(ZT_STATUS_OOM, "zt_checkpoint_sequential: out of host memory (%zu bytes) for segment %d's descriptor",
                 sizeof *g, k);
      break;
    }
    *g = (segment){stages, start, start + size};
    zt_tensor *next = NULL;
    s = checkpoint_impl(segment_fn, g, free, 1, &cur, 1, &next, opts);
    if (cur != input) zt_tensor_free(cur);
    cur = next;
  }
  zt_tensor *last = NULL;
  if (s == ZT_OK) s = run_stages(stages, start, n, cur, &last);
  if (cur != input) zt_tensor_free(cur);
  if (s == ZT_OK) *out = last;
  return s;
}

/* ================================================================ reentrant */
typedef struct reentrant_ctx {
  zt_checkpoint_fn fn;
  void *user_data;
  int n_in;
  bool preserve_rng;
  zt_rng_state rng;
  int *slot;              /* per input: saved index, -1 for NULL */
  bool *requires_grad;    /* per input */
  zt_tensor *probe;       /* extra input: needs a grad only in a full zt_backward */
  zt_autocast_state autocast; /* at forward */
  bool *owned;            /* set once the node owns this (the caller frees it otherwise) */
} reentrant_ctx;

static void reentrant_ctx_free(void *p) {
  reentrant_ctx *rc = p;
  zt_tensor_free(rc->probe);
  free(rc->slot);
  free(rc->requires_grad);
  free(rc);
}

static zt_status reentrant_forward(zt_node *ctx, int n_inputs, zt_tensor *const *inputs, int n_outputs,
                                   zt_tensor **outputs, void *user_data) {
  reentrant_ctx *rc = user_data;
  zt_fn_ctx_set_data(ctx, rc, reentrant_ctx_free); /* the node owns it from here */
  *rc->owned = true;
  (void)n_inputs;
  for (int i = 0; i < rc->n_in; i++) {
    rc->slot[i] = -1;
    if (inputs[i]) ZT_TRY(zt_node_save(ctx, inputs[i], &rc->slot[i]));
  }
  return rc->fn(inputs, rc->n_in, outputs, n_outputs, rc->user_data); /* grad mode is off here */
}

static zt_status reentrant_backward(zt_node *ctx, int n_outputs, zt_tensor *const *grad_outputs, int n_inputs,
                                    const bool *needs, zt_tensor **grad_inputs) {
  (void)n_inputs;
  reentrant_ctx *rc = zt_fn_ctx_data(ctx);
  /* Under zt_grad (or any backward that computes only some grads) the probe's accumulator
   * is not needed; the nested zt_backward below would accumulate into .grad all the same. */
  if (!needs[rc->n_in])
    return ZT_ERR(ZT_STATUS_AUTOGRAD,
                  "zt_checkpoint_reentrant does not support zt_grad (nor a backward that computes only some grads): "
                  "its backward runs zt_backward through the recomputed region, which accumulates into the .grad "
                  "of every leaf used there; call zt_backward, or use zt_checkpoint (non-reentrant)");
  zt_tensor **args = calloc((size_t)(rc->n_in ? rc->n_in : 1), sizeof *args);
  zt_tensor **outs = calloc((size_t)n_outputs, sizeof *outs);
  zt_tensor **roots = calloc((size_t)n_outputs, sizeof *roots);
  zt_tensor **grads = calloc((size_t)n_outputs, sizeof *grads);
  if (!args || !outs || !roots || !grads) {
    free(args);
    free(outs);
    free(roots);
    free(grads);
    return ZT_ERR(ZT_STATUS_OOM, "zt_checkpoint_reentrant: out of host memory (%zu bytes) for the lists of a backward",
                  (size_t)(rc->n_in ? rc->n_in : 1) * sizeof *args + 3 * (size_t)n_outputs * sizeof *outs);
  }
  zt_status s = ZT_OK;
  for (int i = 0; i < rc->n_in && s == ZT_OK; i++) {
    if (rc->slot[i] < 0) continue;
    zt_tensor *t;
    s = zt_node_saved(ctx, rc->slot[i], &t);
    if (s == ZT_OK) s = detached_input(t, rc->requires_grad[i], &args[i]);
  }
  if (s == ZT_OK) {
    recompute_env env;
    env_enter(&env, rc->preserve_rng, rc->rng, NULL, rc->autocast);
    s = rc->fn(args, rc->n_in, outs, n_outputs, rc->user_data);
    env_leave(&env);
  }
  int m = 0;
  for (int k = 0; k < n_outputs && s == ZT_OK; k++)
    if (outs[k] && outs[k]->requires_grad) {
      roots[m] = outs[k];
      grads[m++] = grad_outputs[k];
    }
  if (s == ZT_OK && m == 0)
    s = ZT_ERR(ZT_STATUS_AUTOGRAD,
               "zt_checkpoint_reentrant: none of the outputs of the recomputed region requires grad, so this "
               "checkpoint is not needed (nothing in it can get a gradient)");
  if (s == ZT_OK) s = zt_backward(m, roots, grads, false);
  for (int i = 0; i < rc->n_in && s == ZT_OK; i++)
    if (needs[i] && args[i] && args[i]->grad) {
      grad_inputs[i] = args[i]->grad;
      args[i]->grad = NULL;
    }
  for (int k = 0; k < n_outputs; k++) zt_tensor_free(outs[k]);
  free_tensors(args, rc->n_in);
  free(outs);
  free(roots);
  free(grads);
  return s; /* the probe gets no grad (its accumulator sees zeros) */
}

static const zt_function reentrant_fn = {"CheckpointReentrant", reentrant_forward, reentrant_backward};

zt_status zt_checkpoint_reentrant(zt_checkpoint_fn fn, void *user_data, int n_in, zt_tensor *const *inputs,
                                  int n_out, zt_tensor **outputs, const zt_checkpoint_options *opts) {
  ZT_TRY(check_args("zt_checkpoint_reentrant", fn, n_in, inputs, n_out, outputs));
  zt_checkpoint_options o = opts ? *opts : zt_checkpoint_options_default();
  if (o.policy.fn)
    return ZT_ERR(ZT_STATUS_INVALID_ARG,
                  "zt_checkpoint_reentrant: selective policies work with zt_checkpoint (non-reentrant) only; "
                  "drop options.policy or use zt_checkpoint");
  if (!zt_grad_enabled()) return fn(inputs, n_in, outputs, n_out, user_data);
  bool any = false;
  for (int i = 0; i < n_in; i++) any |= inputs[i] && inputs[i]->requires_grad;
  if (!any)
    return ZT_ERR(ZT_STATUS_AUTOGRAD,
                  "zt_checkpoint_reentrant: none of the %d inputs requires grad, so no gradient could reach the "
                  "region's parameters (the reentrant checkpoint runs fn with grad off); make an input require "
                  "grad or use zt_checkpoint (non-reentrant)",
                  n_in);
  reentrant_ctx *rc = calloc(1, sizeof *rc);
  if (!rc) return ZT_ERR(ZT_STATUS_OOM, "zt_checkpoint_reentrant: out of host memory (%zu bytes) for a region's context", sizeof *rc);
  rc->fn = fn;
  rc->user_data = user_data;
  rc->n_in = n_in;
  rc->preserve_rng = o.preserve_rng_state;
  if (rc->preserve_rng) rc->rng = zt_rng_get_state();
  rc->autocast = zt_autocast_get();
  rc->slot = calloc((size_t)(n_in ? n_in : 1), sizeof *rc->slot);
  rc->requires_grad = calloc((size_t)(n_in ? n_in : 1), sizeof *rc->requires_grad);
  zt_tensor **in = calloc((size_t)n_in + 1, sizeof *in);
  if (!rc->slot || !rc->requires_grad || !in) {
    size_t bytes = (size_t)(n_in ? n_in : 1) * (sizeof *rc->slot + sizeof *rc->requires_grad) + ((size_t)n_in + 1) * sizeof *in;
    free(in);
    reentrant_ctx_free(rc);
    return ZT_ERR(ZT_STATUS_OOM, "zt_checkpoint_reentrant: out of host memory (%zu bytes) for the input lists of a region of %d inputs",
                  bytes, n_in);
  }
  for (int i = 0; i < n_in; i++) {
    in[i] = inputs[i];
    rc->requires_grad[i] = inputs[i] && inputs[i]->requires_grad;
  }
  zt_status s = zt_tensor_empty(1, (int64_t[]){0}, ZT_DTYPE_F32, ZT_CPU, &rc->probe);
  if (s == ZT_OK) s = zt_tensor_set_requires_grad(rc->probe, true);
  if (s) {
    free(in);
    reentrant_ctx_free(rc);
    return s;
  }
  in[n_in] = rc->probe;
  bool owned = false;
  rc->owned = &owned;
  s = zt_function_apply(&reentrant_fn, n_in + 1, in, n_out, outputs, rc);
  if (!owned) reentrant_ctx_free(rc);
  free(in);
  return s;
}
