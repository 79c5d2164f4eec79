/* Split backward (zt_backward_input = B, zt_backward_weight = W):
 * - for every op with a weight (linear, linear_io, matmul, layer norm, embedding, the fused
 *   lm-head loss) and for GPT-2 stages (a middle slice with the loss head, the first stage
 *   from token ids, the whole model with its tied embedding), B then W gives bitwise the
 *   input and weight grads of one backward;
 * - with several microbatches, B0 B1 W0 W1 gives bitwise plain gradient accumulation;
 * - what only B needed is freed at the end of B (accounting), the record keeps what W reads,
 *   and a checkpointed region is recomputed once for B and W together;
 * - post-accumulate-grad hooks and end-of-backward callbacks fire in W, not in B;
 * - the cases PyTorch's split gets wrong: a weight used twice in one stage, an op with several
 *   outputs, a parameter that needs no grad, an input that does not require grad;
 * - misuse (W twice, NULL record) is a clear error. */
#include <string.h>

#include "zt/autograd.h"
#include "zt/checkpoint.h"
#include "zt/nn.h"
#include "zt_test.h"

enum { MAXP = 64 };

/* A stage: loss from input x (may be NULL for stages fed by token ids) and its parameters. */
typedef zt_status (*stage_fn)(void *ctx, zt_tensor *x, zt_tensor **loss);

typedef struct grads {
  zt_tensor *gx;          /* the input's grad */
  zt_tensor *gp[MAXP];    /* each parameter's .grad after the step */
  int n;
} grads;

static void grads_free(grads *g) {
  zt_tensor_free(g->gx);
  zt_test_free_all(g->gp, g->n);
  memset(g, 0, sizeof *g);
}

static zt_tensor *clone(const zt_tensor *t) {
  zt_tensor *c = NULL;
  if (t) ZT_CHECK_OK(zt_tensor_clone_data(t, ZT_MEM_TAG_TEMP, &c));
  return c;
}

static void take_param_grads(zt_tensor **ps, int np, grads *g) {
  g->n = np;
  for (int i = 0; i < np; i++) {
    g->gp[i] = clone(ps[i]->grad);
    zt_tensor_free(ps[i]->grad);
    ps[i]->grad = NULL;
  }
}

/* One fused backward: x (a leaf) and the parameters accumulate. */
static void fused(stage_fn f, void *ctx, zt_tensor *x, zt_tensor **ps, int np, grads *g) {
  zt_tensor *loss = NULL;
  ZT_CHECK_OK(f(ctx, x, &loss));
  if (loss) ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
  zt_tensor_free(loss);
  if (x) {
    g->gx = clone(x->grad);
    zt_tensor_free(x->grad);
    x->grad = NULL;
  }
  take_param_grads(ps, np, g);
}

/* B, then W. */
static void split(stage_fn f, void *ctx, zt_tensor *x, zt_tensor **ps, int np, grads *g) {
  zt_tensor *loss = NULL;
  zt_deferred *d = NULL;
  ZT_CHECK_OK(f(ctx, x, &loss));
  if (loss) ZT_CHECK_OK(zt_backward_input(1, &loss, NULL, x ? 1 : 0, x ? &x : NULL, false, x ? &g->gx : NULL, &d));
  zt_tensor_free(loss); /* the record keeps what W needs */
  for (int i = 0; i < np; i++) ZT_CHECK(ps[i]->grad == NULL); /* nothing accumulated in B */
  if (x) ZT_CHECK(x->grad == NULL);                             /* the input's grad was captured */
  if (d) ZT_CHECK_OK(zt_backward_weight(d));
  zt_deferred_free(d);
  take_param_grads(ps, np, g);
}

static void check_same(const grads *a, const grads *b, const char *what) {
  if ((a->gx != NULL) != (b->gx != NULL) || (a->gx && !zt_test_bitwise_equal(a->gx, b->gx)))
    zt_test_fail(__FILE__, __LINE__, "%s: the input grads differ", what);
  ZT_CHECK(a->n == b->n);
  for (int i = 0; i < a->n && i < b->n; i++)
    if ((a->gp[i] != NULL) != (b->gp[i] != NULL) || (a->gp[i] && !zt_test_bitwise_equal(a->gp[i], b->gp[i])))
      zt_test_fail(__FILE__, __LINE__, "%s: the grads of parameter %d differ", what, i);
}

static void compare(stage_fn f, void *ctx, zt_tensor *x, zt_tensor **ps, int np, const char *what) {
  grads a = {0}, b = {0};
  fused(f, ctx, x, ps, np, &a);
  split(f, ctx, x, ps, np, &b);
  if (x && !(a.gx && b.gx)) zt_test_fail(__FILE__, __LINE__, "%s: no grad reached the input", what);
  int reached = 0;
  for (int i = 0; i < np; i++) reached += a.gp[i] != NULL;
  if (!reached) zt_test_fail(__FILE__, __LINE__, "%s: no grad reached any parameter", what);
  check_same(&a, &b, what);
  grads_free(&a);
  grads_free(&b);
}

/* ------------------------------------------------------------------ one op at a time */

typedef struct op_ctx {
  int which;
  zt_tensor *w, *b, *r, *ids, *targets;
} op_ctx;
enum { OP_LINEAR, OP_LINEAR_IO, OP_MATMUL, OP_LAYER_NORM, OP_EMBEDDING, OP_LM_HEAD, OP_SPLIT, OP_RMS_NORM, OP_COUNT };
static const char *const op_names[] = {"linear", "linear_io", "matmul", "layer_norm", "embedding", "lm_head", "split",
                                       "rms_norm"};

/* loss = sum(op(x, w, b) * r): r makes the output grad non-uniform. */
static zt_status op_stage(void *ud, zt_tensor *x, zt_tensor **loss) {
  op_ctx *c = ud;
  zt_tensor *y = NULL, *m = NULL;
  zt_status s = ZT_OK;
  switch (c->which) {
  case OP_LINEAR: s = zt_linear(x, c->w, c->b, &y); break;
  case OP_LINEAR_IO: s = zt_linear_io(x, c->w, c->b, &y); break;
  case OP_MATMUL: s = zt_matmul(x, c->w, false, true, &y); break;
  case OP_LAYER_NORM: s = zt_layer_norm(x, c->w, c->b, 1e-5, &y); break;
  case OP_RMS_NORM: s = zt_rms_norm(x, c->w, 1e-5, &y); break; /* W reads only x and rstd: B frees the weight */
  case OP_EMBEDDING: s = zt_embedding(c->w, c->ids, &y); break;
  case OP_LM_HEAD: return zt_lm_head_cross_entropy(x, c->w, c->targets, -1, loss);
  case OP_SPLIT: { /* several outputs: x @ w^T split in two, the halves scaled apart */
    zt_tensor *h = NULL, *parts[2] = {NULL, NULL}, *a = NULL;
    s = zt_matmul(x, c->w, false, true, &h);
    if (!s) s = zt_split(h, 1, 2, (int64_t[]){3, 3}, parts);
    if (!s) s = zt_mul_scalar(parts[1], 3.0, &a);
    if (!s) s = zt_sub(parts[0], a, &y); /* (R, 3) */
    zt_test_free_all((zt_tensor *[]){h, parts[0], parts[1], a}, 4);
    if (!s) s = zt_mul(y, c->r, &m);
    zt_tensor_free(y);
    if (!s) s = zt_sum(m, 0, NULL, false, loss);
    zt_tensor_free(m);
    return s;
  }
  }
  if (!s) s = zt_mul(y, c->r, &m);
  zt_tensor_free(y);
  if (!s) s = zt_sum(m, 0, NULL, false, loss);
  zt_tensor_free(m);
  return s;
}

static void test_each_op(void) {
  enum { R = 5, C = 4, O = 6, V = 9 };
  for (int k = 0; k < OP_COUNT; k++) {
    op_ctx c = {k, NULL, NULL, NULL, NULL, NULL};
    zt_tensor *x = zt_test_rand_leaf(2, (int64_t[]){R, C}, ZT_DTYPE_F32, -1, 1, 10 + (uint64_t)k);
    int64_t out_cols = O;
    switch (k) {
    case OP_LINEAR:
    case OP_MATMUL:
    case OP_SPLIT:
      c.w = zt_test_rand_leaf(2, (int64_t[]){O, C}, ZT_DTYPE_F32, -1, 1, 2);
      if (k == OP_SPLIT) out_cols = 3;
      break;
    case OP_LINEAR_IO: c.w = zt_test_rand_leaf(2, (int64_t[]){C, O}, ZT_DTYPE_F32, -1, 1, 2); break;
    case OP_LAYER_NORM:
    case OP_RMS_NORM: c.w = zt_test_rand_leaf(1, (int64_t[]){C}, ZT_DTYPE_F32, 0.5, 1.5, 2), out_cols = C; break;
    case OP_EMBEDDING:
    case OP_LM_HEAD: c.w = zt_test_rand_leaf(2, (int64_t[]){V, C}, ZT_DTYPE_F32, -1, 1, 2), out_cols = C; break;
    }
    if (k == OP_LINEAR || k == OP_LINEAR_IO || k == OP_LAYER_NORM)
      c.b = zt_test_rand_leaf(1, (int64_t[]){out_cols}, ZT_DTYPE_F32, -1, 1, 3);
    c.r = zt_test_rand(2, (int64_t[]){R, out_cols}, ZT_DTYPE_F32, -1, 1, 4);
    if (k == OP_EMBEDDING) c.ids = zt_test_rand_ids(R, 1, V, 5);
    if (k == OP_EMBEDDING) { /* ids (R, 1) -> (R, 1, C): r to match */
      zt_tensor_free(c.r);
      c.r = zt_test_rand(3, (int64_t[]){R, 1, C}, ZT_DTYPE_F32, -1, 1, 4);
    }
    if (k == OP_LM_HEAD) {
      zt_tensor *t2 = zt_test_rand_ids(R, 1, V, 6);
      ZT_CHECK_OK(zt_reshape(t2, 1, (int64_t[]){R}, &c.targets));
      zt_tensor_free(t2);
    }
    zt_tensor *ps[2] = {c.w, c.b};
    int np = c.b ? 2 : 1;
    compare(op_stage, &c, k == OP_EMBEDDING ? NULL : x, ps, np, op_names[k]);
    zt_test_free_all((zt_tensor *[]){x, c.w, c.b, c.r, c.ids, c.targets}, 6);
  }
}

/* A weight used twice in one stage, next to a weight that needs no grad:
 * loss = sum(((x W^T) F^T) W^T * r). */
typedef struct twice_ctx {
  zt_tensor *w, *frozen, *r;
} twice_ctx;
static zt_status twice_stage(void *ud, zt_tensor *x, zt_tensor **loss) {
  twice_ctx *c = ud;
  zt_tensor *y = NULL, *z = NULL, *u = NULL, *m = NULL;
  zt_status s = zt_linear(x, c->w, NULL, &y);
  if (!s) s = zt_linear(y, c->frozen, NULL, &z);
  if (!s) s = zt_linear(z, c->w, NULL, &u);
  if (!s) s = zt_mul(u, c->r, &m);
  if (!s) s = zt_sum(m, 0, NULL, false, loss);
  zt_test_free_all((zt_tensor *[]){y, z, u, m}, 4);
  return s;
}

static void test_weight_used_twice(void) {
  twice_ctx c = {zt_test_rand_leaf(2, (int64_t[]){4, 4}, ZT_DTYPE_F32, -1, 1, 2),
                 zt_test_rand(2, (int64_t[]){4, 4}, ZT_DTYPE_F32, -1, 1, 3),
                 zt_test_rand(2, (int64_t[]){3, 4}, ZT_DTYPE_F32, -1, 1, 4)};
  zt_tensor *x = zt_test_rand_leaf(2, (int64_t[]){3, 4}, ZT_DTYPE_F32, -1, 1, 1);
  compare(twice_stage, &c, x, &c.w, 1, "a weight used twice, a frozen weight between");
  ZT_CHECK(!c.frozen->grad);
  zt_test_free_all((zt_tensor *[]){x, c.w, c.frozen, c.r}, 4);
}

/* ------------------------------------------------------------------ GPT-2 stages */

typedef struct gpt_ctx {
  zt_gpt2 *g;
  zt_tensor *ids, *targets, *r;
  int first, count; /* blocks of the slice */
  bool head;        /* ln_f and the loss end the stage */
  bool embed;       /* the stage starts from ids */
  zt_checkpoint_fn region; /* non-NULL: the blocks run as one checkpoint region */
  int recomputes;   /* how often the region ran */
} gpt_ctx;

static zt_nn_block *block_of(zt_gpt2 *g, int i) {
  zt_model m = zt_gpt2_model(g);
  return (zt_nn_block *)zt_model_blocks(&m)->children[i];
}

static zt_status run_slice(gpt_ctx *c, zt_tensor *x, zt_tensor **y) {
  zt_tensor *cur = x;
  for (int i = c->first; i < c->first + c->count; i++) {
    zt_tensor *o = NULL;
    zt_status s = zt_nn_block_forward(block_of(c->g, i), cur, &o);
    if (cur != x) zt_tensor_free(cur);
    if (s) return s;
    cur = o;
  }
  *y = cur;
  return ZT_OK;
}

static zt_status slice_region(zt_tensor *const *in, int n_in, zt_tensor **out, int n_out, void *ud) {
  (void)n_in, (void)n_out;
  gpt_ctx *c = ud;
  c->recomputes++;
  return run_slice(c, in[0], out);
}

static zt_status gpt_stage(void *ud, zt_tensor *x, zt_tensor **loss) {
  gpt_ctx *c = ud;
  zt_module *tr = zt_module_child(zt_gpt2_module(c->g), "transformer");
  zt_nn_embedding *wte = (zt_nn_embedding *)zt_module_child(tr, "wte");
  zt_tensor *h = NULL, *y = NULL;
  zt_status s = ZT_OK;
  if (c->embed) {
    zt_nn_embedding *wpe = (zt_nn_embedding *)zt_module_child(tr, "wpe");
    zt_tensor *tok = NULL, *pe = NULL;
    s = zt_embedding(wte->weight, c->ids, &tok);
    if (!s) s = zt_narrow(wpe->weight, 0, 0, c->ids->shape[1], &pe);
    if (!s) s = zt_add(tok, pe, &h);
    zt_tensor_free(tok), zt_tensor_free(pe);
  }
  zt_tensor *in = c->embed ? h : x;
  if (!s && c->region) {
    s = zt_checkpoint(c->region, c, 1, &in, 1, &y, NULL);
  } else if (!s) {
    s = run_slice(c, in, &y);
  }
  zt_tensor_free(h);
  if (s) return s;
  if (!c->head) { /* a stage that hands its output on: loss = sum(y * r) stands for the next stage's grad */
    zt_tensor *m = NULL;
    s = zt_mul(y, c->r, &m);
    zt_tensor_free(y);
    if (!s) s = zt_sum(m, 0, NULL, false, loss);
    zt_tensor_free(m);
    return s;
  }
  zt_nn_layer_norm *ln_f = (zt_nn_layer_norm *)zt_module_child(tr, "ln_f");
  zt_tensor *n = NULL, *n2 = NULL;
  int64_t B = y->shape[0], T = y->shape[1], C = y->shape[2];
  s = zt_nn_layer_norm_forward(ln_f, y, &n);
  zt_tensor_free(y);
  if (!s) s = zt_reshape(n, 2, (int64_t[]){B * T, C}, &n2);
  zt_tensor_free(n);
  if (!s) s = zt_lm_head_cross_entropy(n2, wte->weight, c->targets, -1, loss);
  zt_tensor_free(n2);
  return s;
}

enum { B = 2, T = 8 };
static const zt_gpt2_config CFG = {4, 2, 16, 32, T, 0.0};

static int gpt_params(zt_gpt2 *g, zt_tensor **ps) {
  zt_param *p;
  int n = zt_gpt2_params(g, &p);
  for (int i = 0; i < n && i < MAXP; i++) ps[i] = p[i].tensor;
  return n < MAXP ? n : MAXP;
}

static void gpt_ctx_open(gpt_ctx *c, int first, int count, bool embed, bool head) {
  *c = (gpt_ctx){0};
  zt_rng_seed(3);
  ZT_CHECK_OK(zt_gpt2_new(&CFG, &c->g));
  c->ids = zt_test_rand_ids(B, T, CFG.vocab_size, 1);
  zt_tensor *t = zt_test_rand_ids(B, T, CFG.vocab_size, 2);
  ZT_CHECK_OK(zt_reshape(t, 1, (int64_t[]){B * T}, &c->targets));
  zt_tensor_free(t);
  c->r = zt_test_rand(3, (int64_t[]){B, T, CFG.n_embd}, ZT_DTYPE_F32, -1, 1, 7);
  c->first = first, c->count = count, c->embed = embed, c->head = head;
}

static void gpt_ctx_close(gpt_ctx *c) {
  zt_test_free_all((zt_tensor *[]){c->ids, c->targets, c->r}, 3);
  zt_gpt2_free(c->g);
}

static void test_gpt2_stages(void) {
  zt_tensor *ps[MAXP];
  gpt_ctx c;
  /* a middle-and-last stage: blocks 1..3, ln_f and the loss, from an activation */
  gpt_ctx_open(&c, 1, 3, false, true);
  zt_tensor *x = zt_test_rand_leaf(3, (int64_t[]){B, T, CFG.n_embd}, ZT_DTYPE_F32, -1, 1, 8);
  int np = gpt_params(c.g, ps);
  compare(gpt_stage, &c, x, ps, np, "GPT-2 last stage (blocks 1-3 + head)");
  /* the same with the blocks in one checkpoint region: recomputed once for B and W */
  c.region = slice_region;
  grads a = {0}, b = {0};
  fused(gpt_stage, &c, x, ps, np, &a);
  c.recomputes = 0;
  split(gpt_stage, &c, x, ps, np, &b);
  check_same(&a, &b, "GPT-2 last stage in a checkpoint region");
  if (c.recomputes != 2) /* the forward and one recomputation */
    zt_test_fail(__FILE__, __LINE__, "the region ran %d times for its forward, B and W; want 2", c.recomputes);
  grads_free(&a), grads_free(&b);
  c.region = NULL;
  gpt_ctx_close(&c);
  zt_tensor_free(x);
  /* the first stage: token ids (no grad) through the embeddings and blocks 0..1 */
  gpt_ctx_open(&c, 0, 2, true, false);
  np = gpt_params(c.g, ps);
  compare(gpt_stage, &c, NULL, ps, np, "GPT-2 first stage (embeddings + blocks 0-1)");
  gpt_ctx_close(&c);
  /* the whole model: wte used by the first op and the last (tied) */
  gpt_ctx_open(&c, 0, 4, true, true);
  np = gpt_params(c.g, ps);
  compare(gpt_stage, &c, NULL, ps, np, "GPT-2 whole, tied embedding");
  gpt_ctx_close(&c);
}

/* B0 B1 W0 W1 accumulates bitwise as backward 0, backward 1. */
static void test_microbatches(void) {
  zt_tensor *ps[MAXP];
  gpt_ctx c;
  gpt_ctx_open(&c, 1, 3, false, true);
  int np = gpt_params(c.g, ps);
  zt_tensor *x[2] = {zt_test_rand_leaf(3, (int64_t[]){B, T, CFG.n_embd}, ZT_DTYPE_F32, -1, 1, 20),
                     zt_test_rand_leaf(3, (int64_t[]){B, T, CFG.n_embd}, ZT_DTYPE_F32, -1, 1, 21)};
  zt_tensor *want[MAXP] = {0}, *gx[2] = {NULL, NULL}, *fx[2] = {NULL, NULL};
  for (int k = 0; k < 2; k++) {
    zt_tensor *loss = NULL;
    ZT_CHECK_OK(gpt_stage(&c, x[k], &loss));
    ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
    zt_tensor_free(loss);
    fx[k] = clone(x[k]->grad);
    zt_tensor_free(x[k]->grad), x[k]->grad = NULL;
  }
  for (int i = 0; i < np; i++) want[i] = clone(ps[i]->grad), zt_tensor_free(ps[i]->grad), ps[i]->grad = NULL;
  zt_deferred *d[2] = {NULL, NULL};
  for (int k = 0; k < 2; k++) {
    zt_tensor *loss = NULL;
    ZT_CHECK_OK(gpt_stage(&c, x[k], &loss));
    ZT_CHECK_OK(zt_backward_input(1, &loss, NULL, 1, &x[k], false, &gx[k], &d[k]));
    zt_tensor_free(loss);
  }
  ZT_CHECK(zt_deferred_bytes(d[0]) > 0 && zt_deferred_bytes(d[1]) > 0); /* two records alive at once */
  for (int k = 0; k < 2; k++) ZT_CHECK_OK(zt_backward_weight(d[k]));
  for (int k = 0; k < 2; k++)
    if (!(gx[k] && fx[k] && zt_test_bitwise_equal(gx[k], fx[k])))
      zt_test_fail(__FILE__, __LINE__, "microbatch %d: input grads differ by %g", k,
                   gx[k] && fx[k] ? zt_test_max_abs_diff(gx[k], fx[k]) : -1.0);
  for (int i = 0; i < np; i++)
    if ((ps[i]->grad != NULL) != (want[i] != NULL) || (want[i] && !zt_test_bitwise_equal(ps[i]->grad, want[i])))
      zt_test_fail(__FILE__, __LINE__, "parameter %d: W0 W1 does not accumulate what two backwards do", i);
  ZT_CHECK_ERR(zt_backward_weight(d[0]), ZT_STATUS_STATE, "computed already");
  ZT_CHECK_ERR(zt_backward_weight(NULL), ZT_STATUS_INVALID_ARG, "NULL");
  ZT_CHECK_ERR(zt_backward_input(1, &x[0], NULL, 0, NULL, false, NULL, NULL), ZT_STATUS_INVALID_ARG, "deferred");
  zt_deferred_free(d[0]), zt_deferred_free(d[1]);
  for (int i = 0; i < np; i++) zt_tensor_free(ps[i]->grad), ps[i]->grad = NULL;
  zt_test_free_all(want, np);
  zt_test_free_all((zt_tensor *[]){x[0], x[1], gx[0], gx[1], fx[0], fx[1]}, 6);
  gpt_ctx_close(&c);
}

/* ------------------------------------------------------------------ memory and hooks */

static int64_t activation_now(void) {
  zt_mem_stats st;
  zt_mem_stats_get(ZT_CPU, &st);
  return st.current[ZT_MEM_TAG_ACTIVATION];
}

/* x -> linear -> gelu -> linear -> sum: B frees gelu's saved input and keeps the second
 * linear's input (W reads it); W frees the rest. */
static void test_memory_freed_at_end_of_b(void) {
  enum { R = 64, C = 32 };
  zt_tensor *x = zt_test_rand_leaf(2, (int64_t[]){R, C}, ZT_DTYPE_F32, -1, 1, 1);
  zt_tensor *w1 = zt_test_rand_leaf(2, (int64_t[]){C, C}, ZT_DTYPE_F32, -1, 1, 2);
  zt_tensor *w2 = zt_test_rand_leaf(2, (int64_t[]){C, C}, ZT_DTYPE_F32, -1, 1, 3);
  int64_t base = activation_now(), one = (int64_t)R * C * 4;
  zt_tensor *h = NULL, *a = NULL, *y = NULL, *loss = NULL, *gx = NULL;
  ZT_CHECK_OK(zt_linear(x, w1, NULL, &h));
  ZT_CHECK_OK(zt_gelu(h, &a));
  ZT_CHECK_OK(zt_linear(a, w2, NULL, &y));
  ZT_CHECK_OK(zt_sum(y, 0, NULL, false, &loss));
  zt_test_free_all((zt_tensor *[]){h, a, y}, 3); /* the graph holds what it saved */
  ZT_CHECK(activation_now() - base >= 2 * one);  /* h (gelu's input) and a (the second linear's) */
  zt_deferred *d = NULL;
  ZT_CHECK_OK(zt_backward_input(1, &loss, NULL, 1, &x, false, &gx, &d));
  zt_tensor_free(loss);
  int64_t after_b = activation_now() - base;
  printf("  activations: %lld bytes before B, %lld after B (one tensor %lld), record %lld bytes\n",
         (long long)(2 * one), (long long)after_b, (long long)one, (long long)zt_deferred_bytes(d));
  ZT_CHECK(after_b == one);                   /* a only: W reads it for w2's grad; h is gone */
  ZT_CHECK(zt_deferred_bytes(d) >= one + 2 * one); /* a, and the output grads of both linears */
  ZT_CHECK_OK(zt_backward_weight(d));
  zt_deferred_free(d);
  ZT_CHECK(activation_now() == base);
  ZT_CHECK(w1->grad && w2->grad);
  zt_test_free_all((zt_tensor *[]){x, w1, w2, gx}, 4);
}

/* A slot only B reads, on a node that W still needs: the fused lm-head loss saves its input
 * grad (read by B) and its weight grad (read by W); the end of B releases the first and keeps
 * the second in the record. */
static void test_b_only_slot_released(void) {
  enum { N = 64, C = 32, V = 48 };
  zt_tensor *x = zt_test_rand_leaf(2, (int64_t[]){N, C}, ZT_DTYPE_F32, -1, 1, 1);
  zt_tensor *w = zt_test_rand_leaf(2, (int64_t[]){V, C}, ZT_DTYPE_F32, -1, 1, 2);
  zt_tensor *t2 = zt_test_rand_ids(N, 1, V, 3), *t = NULL, *loss = NULL, *half = NULL, *gx = NULL;
  ZT_CHECK_OK(zt_reshape(t2, 1, (int64_t[]){N}, &t));
  int64_t base = activation_now();
  ZT_CHECK_OK(zt_lm_head_cross_entropy(x, w, t, -1, &loss));
  ZT_CHECK_OK(zt_mul_scalar(loss, 0.5, &half)); /* a grad of 0.5: B makes a new input grad */
  int64_t before = activation_now() - base;
  zt_deferred *d = NULL;
  ZT_CHECK_OK(zt_backward_input(1, &half, NULL, 1, &x, false, &gx, &d));
  int64_t after = activation_now() - base;
  printf("  lm-head loss: activations %lld before B, %lld after; record %lld bytes\n", (long long)before,
         (long long)after, (long long)zt_deferred_bytes(d));
  ZT_CHECK(before - after >= (int64_t)N * C * 4);        /* the saved input grad is gone */
  ZT_CHECK(zt_deferred_bytes(d) >= (int64_t)V * C * 4);  /* the saved weight grad is kept for W */
  ZT_CHECK_OK(zt_backward_weight(d));
  zt_deferred_free(d);
  ZT_CHECK(w->grad != NULL);
  zt_test_free_all((zt_tensor *[]){x, w, t2, t, loss, half, gx}, 7);
}

typedef struct fired {
  int post_acc, callbacks, in_b;
  bool b_done;
} fired;

static zt_status on_acc(zt_tensor *leaf, void *ud) {
  (void)leaf;
  fired *f = ud;
  f->post_acc++;
  if (!f->b_done) f->in_b++;
  return ZT_OK;
}
static zt_status on_end(void *ud) {
  fired *f = ud;
  f->callbacks++;
  if (!f->b_done) f->in_b++;
  return ZT_OK;
}
/* a tensor hook that queues an end-of-backward callback (as DDP and FSDP do) */
static zt_status queue_end(const zt_tensor *grad, zt_tensor **replacement, void *ud) {
  (void)grad, (void)replacement;
  return zt_autograd_queue_callback(on_end, ud);
}

static void test_hooks_fire_in_w(void) {
  zt_tensor *x = zt_test_rand_leaf(2, (int64_t[]){3, 4}, ZT_DTYPE_F32, -1, 1, 1);
  zt_tensor *w = zt_test_rand_leaf(2, (int64_t[]){4, 4}, ZT_DTYPE_F32, -1, 1, 2);
  zt_tensor *frozen = zt_test_rand(2, (int64_t[]){4, 4}, ZT_DTYPE_F32, -1, 1, 3); /* needs no grad */
  fired f = {0};
  zt_hook_handle *h1 = NULL, *h2 = NULL;
  ZT_CHECK_OK(zt_tensor_register_post_accumulate_grad_hook(w, on_acc, &f, &h1));
  zt_tensor *y = NULL, *z = NULL, *u = NULL, *loss = NULL, *gx = NULL;
  /* w used twice in one stage, next to a frozen weight */
  ZT_CHECK_OK(zt_linear(x, w, NULL, &y));
  ZT_CHECK_OK(zt_linear(y, frozen, NULL, &z));
  ZT_CHECK_OK(zt_linear(z, w, NULL, &u));
  ZT_CHECK_OK(zt_tensor_register_hook(u, queue_end, &f, &h2));
  ZT_CHECK_OK(zt_sum(u, 0, NULL, false, &loss));
  zt_deferred *d = NULL;
  ZT_CHECK_OK(zt_backward_input(1, &loss, NULL, 1, &x, false, &gx, &d));
  f.b_done = true;
  ZT_CHECK(f.in_b == 0 && !w->grad && gx);
  ZT_CHECK_OK(zt_backward_weight(d));
  ZT_CHECK(f.post_acc == 1 && f.callbacks == 1 && w->grad && !frozen->grad);
  zt_deferred_free(d);
  zt_hook_remove(h1);
  zt_hook_remove(h2);
  zt_test_free_all((zt_tensor *[]){x, w, frozen, y, z, u, loss, gx}, 8);
}

int main(void) {
  ZT_RUN(test_each_op);
  ZT_RUN(test_weight_used_twice);
  ZT_RUN(test_gpt2_stages);
  ZT_RUN(test_microbatches);
  ZT_RUN(test_memory_freed_at_end_of_b);
  ZT_RUN(test_b_only_slot_released);
  ZT_RUN(test_hooks_fire_in_w);
  return zt_test_finish();
}
