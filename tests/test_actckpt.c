/* Activation checkpointing (include/zt/checkpoint.h): a chain of blocks (layer_norm ->
 * linear -> gelu -> dropout) run plain and checkpointed must give bitwise equal losses and
 * grads and leave the RNG in the same state; plus recomputation rules, errors and memory. */
#include <stdlib.h>

#include "zt_test.h"
#include "zt/checkpoint.h"
#include "zt/nn.h"

enum { H = 16, ROWS = 8, MAXL = 24 };

typedef struct block {
  zt_tensor *w, *b, *lnw, *lnb;
  double p;
  int calls, completed;
  int misbehave_on_call; /* > 0: that call does other work (determinism tests) */
  int misbehave_kind;    /* 1: one row fewer (other shapes), 2: no gelu (one save fewer) */
  bool two_outputs;
} block;

typedef struct run_opts run_opts;
/* Nested: an outer checkpoint over two blocks, each checkpointed inside it. */
typedef struct pair {
  const run_opts *o;
  block *a, *b;
} pair;

typedef struct model {
  int L;
  block blk[MAXL];
  pair pairs[MAXL]; /* user_data of outer checkpoints: must live until backward */
} model;

static void model_init(model *m, int L, double p, int hid, uint64_t seed) {
  memset(m, 0, sizeof *m);
  m->L = L;
  for (int l = 0; l < L; l++) {
    block *k = &m->blk[l];
    uint64_t s = seed + 10 * (uint64_t)l;
    k->w = zt_test_rand_leaf(2, (int64_t[]){hid, hid}, ZT_DTYPE_F32, -0.5, 0.5, s);
    k->b = zt_test_rand_leaf(1, (int64_t[]){hid}, ZT_DTYPE_F32, -0.1, 0.1, s + 1);
    k->lnw = zt_test_rand_leaf(1, (int64_t[]){hid}, ZT_DTYPE_F32, 0.5, 1.5, s + 2);
    k->lnb = zt_test_rand_leaf(1, (int64_t[]){hid}, ZT_DTYPE_F32, -0.1, 0.1, s + 3);
    k->p = p;
  }
}

static void model_free(model *m) {
  for (int l = 0; l < m->L; l++) {
    zt_tensor_free(m->blk[l].w);
    zt_tensor_free(m->blk[l].b);
    zt_tensor_free(m->blk[l].lnw);
    zt_tensor_free(m->blk[l].lnb);
  }
}

static zt_tensor **params_of(block *k, int j) {
  zt_tensor **ps[4] = {&k->w, &k->b, &k->lnw, &k->lnb};
  return ps[j];
}

/* The region: out0 = gelu(linear(dropout(layer_norm(x)))), out1 = tanh(linear(...)). The
 * dropout output is saved by linear, so recomputation must redraw the same mask. */
static zt_status block_fn(zt_tensor *const *in, int n_in, zt_tensor **out, int n_out, void *ud) {
  (void)n_in;
  block *k = ud;
  k->calls++;
  bool odd = k->misbehave_on_call == k->calls;
  zt_tensor *x = in[0], *xn = NULL, *d = NULL, *h = NULL, *narrow = NULL;
  zt_status s = ZT_OK;
  if (odd && k->misbehave_kind == 1) {
    s = zt_narrow(x, 0, 0, x->shape[0] - 1, &narrow);
    x = narrow;
  }
  if (!s) s = zt_layer_norm(x, k->lnw, k->lnb, 1e-5, &xn);
  if (!s) s = zt_dropout(xn, k->p, true, &d);
  if (!s) s = zt_linear(d, k->w, k->b, &h);
  if (!s) s = (odd && k->misbehave_kind == 2) ? zt_tensor_clone_data(h, ZT_MEM_TAG_ACTIVATION, &out[0])
                                                : zt_gelu(h, &out[0]);
  if (!s && n_out > 1) {
    s = zt_tanh(h, &out[1]);
    if (s) {
      zt_tensor_free(out[0]);
      out[0] = NULL;
    }
  }
  zt_tensor_free(narrow);
  zt_tensor_free(xn);
  zt_tensor_free(d);
  zt_tensor_free(h);
  if (!s) k->completed++;
  return s;
}

typedef enum mode { MODE_PLAIN, MODE_CKPT, MODE_REENTRANT, MODE_NESTED } mode;

struct run_opts {
  mode mode;
  zt_checkpoint_options co;
  bool two_outputs;
};

static zt_status run_block(const run_opts *o, block *k, zt_tensor *x, zt_tensor **out) {
  int n_out = o->two_outputs ? 2 : 1;
  if (o->mode == MODE_PLAIN) return block_fn(&x, 1, out, n_out, k);
  if (o->mode == MODE_REENTRANT) return zt_checkpoint_reentrant(block_fn, k, 1, &x, n_out, out, &o->co);
  return zt_checkpoint(block_fn, k, 1, &x, n_out, out, &o->co);
}

static zt_status pair_fn(zt_tensor *const *in, int n_in, zt_tensor **out, int n_out, void *ud) {
  (void)n_in, (void)n_out;
  pair *p = ud;
  run_opts inner = *p->o;
  inner.mode = MODE_CKPT;
  zt_tensor *mid = NULL;
  zt_status s = run_block(&inner, p->a, in[0], &mid);
  if (!s) s = run_block(&inner, p->b, mid, out);
  zt_tensor_free(mid);
  return s;
}

/* loss = sum over blocks' outputs chain of mean(y^2) (+ mean(tanh) when two outputs). */
static zt_status forward(model *m, const run_opts *o, zt_tensor *x, zt_tensor **loss) {
  zt_tensor *cur = x, *extra = NULL;
  zt_status s = ZT_OK;
  pair *pairs = m->pairs;
  for (int l = 0; l < m->L && !s;) {
    zt_tensor *outs[2] = {NULL, NULL};
    if (o->mode == MODE_NESTED && l + 1 < m->L) {
      pairs[l] = (pair){o, &m->blk[l], &m->blk[l + 1]};
      run_opts outer = *o;
      s = zt_checkpoint(pair_fn, &pairs[l], 1, &cur, 1, outs, &outer.co);
      l += 2;
    } else {
      run_opts one = *o;
      if (one.mode == MODE_NESTED) one.mode = MODE_CKPT;
      s = run_block(&one, &m->blk[l], cur, outs);
      l += 1;
    }
    if (cur != x) zt_tensor_free(cur);
    cur = outs[0];
    if (outs[1]) {
      zt_tensor *t = NULL;
      if (!s) s = zt_mean(outs[1], 0, NULL, false, &t);
      if (!s && extra) {
        zt_tensor *e2 = NULL;
        s = zt_add(extra, t, &e2);
        zt_tensor_free(t);
        t = e2;
      }
      zt_tensor_free(extra);
      extra = t;
      zt_tensor_free(outs[1]);
    }
  }
  zt_tensor *sq = NULL, *l1 = NULL;
  if (!s) s = zt_mul(cur, cur, &sq);
  if (!s) s = zt_mean(sq, 0, NULL, false, &l1);
  if (!s && extra) {
    s = zt_add(l1, extra, loss);
    zt_tensor_free(l1);
  } else if (!s) {
    *loss = l1;
  }
  if (cur != x) zt_tensor_free(cur);
  zt_tensor_free(sq);
  zt_tensor_free(extra);
  return s;
}

/* Results of one run: loss, grads of x and every parameter, RNG state after backward. */
typedef struct result {
  zt_tensor *loss;
  zt_tensor *gx;
  zt_tensor *g[MAXL][4];
  zt_rng_state rng;
  int calls[MAXL], completed[MAXL];
} result;

static zt_tensor *clone(const zt_tensor *t) {
  zt_tensor *c = NULL;
  if (t) ZT_CHECK_OK(zt_tensor_clone_data(t, ZT_MEM_TAG_TEMP, &c));
  return c;
}

static void result_free(result *r) {
  zt_tensor_free(r->loss);
  zt_tensor_free(r->gx);
  for (int l = 0; l < MAXL; l++)
    for (int j = 0; j < 4; j++) zt_tensor_free(r->g[l][j]);
  memset(r, 0, sizeof *r);
}

/* Run forward + n_backward backwards (retain_graph on all but the last) from seed 42. */
static void run(int L, double p, const run_opts *o, bool x_requires_grad, int n_backward, result *r) {
  memset(r, 0, sizeof *r);
  model m;
  model_init(&m, L, p, H, 100);
  zt_tensor *x = x_requires_grad ? zt_test_rand_leaf(2, (int64_t[]){ROWS, H}, ZT_DTYPE_F32, -1, 1, 7)
                                 : zt_test_rand(2, (int64_t[]){ROWS, H}, ZT_DTYPE_F32, -1, 1, 7);
  zt_rng_seed(42);
  zt_tensor *loss = NULL;
  ZT_CHECK_OK(forward(&m, o, x, &loss));
  for (int b = 0; b < n_backward && loss; b++) ZT_CHECK_OK(zt_backward(1, &loss, NULL, b + 1 < n_backward));
  r->rng = zt_rng_get_state();
  r->loss = clone(loss);
  r->gx = clone(x->grad);
  for (int l = 0; l < L; l++) {
    for (int j = 0; j < 4; j++) r->g[l][j] = clone((*params_of(&m.blk[l], j))->grad);
    r->calls[l] = m.blk[l].calls;
    r->completed[l] = m.blk[l].completed;
  }
  zt_tensor_free(loss);
  zt_tensor_free(x);
  model_free(&m);
}

static bool same_tensor(const zt_tensor *a, const zt_tensor *b) {
  if (!a || !b) return a == b;
  return zt_test_bitwise_equal(a, b);
}

static void check_same(const result *a, const result *b, int L) {
  ZT_CHECK(a->loss && same_tensor(a->loss, b->loss));
  ZT_CHECK(same_tensor(a->gx, b->gx));
  for (int l = 0; l < L; l++)
    for (int j = 0; j < 4; j++) {
      ZT_CHECK(a->g[l][j] != NULL);
      if (!same_tensor(a->g[l][j], b->g[l][j])) zt_test_fail(__FILE__, __LINE__, "grad of block %d param %d differs", l, j);
    }
  ZT_CHECK(a->rng.seed == b->rng.seed && a->rng.offset == b->rng.offset);
}

static run_opts opts_for(mode md) {
  run_opts o = {md, zt_checkpoint_options_default(), false};
  return o;
}

/* ---------------------------------------------------------------- tests */
static void test_bitwise_equal_with_dropout(void) {
  result plain, ck;
  run_opts po = opts_for(MODE_PLAIN), co = opts_for(MODE_CKPT);
  run(4, 0.3, &po, true, 1, &plain);
  run(4, 0.3, &co, true, 1, &ck);
  check_same(&plain, &ck, 4);
  /* forward + one recomputation per block, cut short by early stop (dropout not rerun) */
  for (int l = 0; l < 4; l++) {
    ZT_CHECK(ck.calls[l] == 2);
    ZT_CHECK(ck.completed[l] == 1);
  }
  ZT_CHECK(plain.rng.offset > 0);
  result_free(&plain);
  result_free(&ck);
}

static void test_early_stop_on_off(void) {
  result plain, on, off, scoped;
  run_opts po = opts_for(MODE_PLAIN), o_on = opts_for(MODE_CKPT), o_off = opts_for(MODE_CKPT),
           o_def = opts_for(MODE_CKPT);
  o_on.co.early_stop = ZT_CHECKPOINT_EARLY_STOP_ON;
  o_off.co.early_stop = ZT_CHECKPOINT_EARLY_STOP_OFF;
  run(3, 0.2, &po, true, 1, &plain);
  run(3, 0.2, &o_on, true, 1, &on);
  run(3, 0.2, &o_off, true, 1, &off);
  bool prev = zt_checkpoint_set_early_stop(false);
  run(3, 0.2, &o_def, true, 1, &scoped);
  ZT_CHECK(zt_checkpoint_set_early_stop(prev) == false);
  ZT_CHECK(prev == true);
  check_same(&plain, &on, 3);
  check_same(&plain, &off, 3);
  check_same(&plain, &scoped, 3);
  for (int l = 0; l < 3; l++) {
    ZT_CHECK(on.completed[l] == 1);     /* recomputation stopped early */
    ZT_CHECK(off.completed[l] == 2);    /* recomputation ran to the end */
    ZT_CHECK(scoped.completed[l] == 2); /* the scoped setting applies to DEFAULT */
  }
  result_free(&plain);
  result_free(&on);
  result_free(&off);
  result_free(&scoped);
}

static void test_retain_graph_second_backward(void) {
  result plain, ck;
  run_opts po = opts_for(MODE_PLAIN), co = opts_for(MODE_CKPT);
  run(3, 0.25, &po, true, 2, &plain);
  run(3, 0.25, &co, true, 2, &ck);
  check_same(&plain, &ck, 3);
  for (int l = 0; l < 3; l++) ZT_CHECK(ck.calls[l] == 3); /* each backward recomputes (Rule 4) */
  result_free(&plain);
  result_free(&ck);
}

static void test_inputs_not_requiring_grad(void) {
  result plain, ck;
  run_opts po = opts_for(MODE_PLAIN), co = opts_for(MODE_CKPT);
  run(3, 0.1, &po, false, 1, &plain);
  run(3, 0.1, &co, false, 1, &ck);
  ZT_CHECK(plain.gx == NULL && ck.gx == NULL);
  check_same(&plain, &ck, 3);
  result_free(&plain);
  result_free(&ck);
}

static void test_multiple_outputs(void) {
  result plain, ck;
  run_opts po = opts_for(MODE_PLAIN), co = opts_for(MODE_CKPT);
  po.two_outputs = co.two_outputs = true;
  run(3, 0.2, &po, true, 1, &plain);
  run(3, 0.2, &co, true, 1, &ck);
  check_same(&plain, &ck, 3);
  result_free(&plain);
  result_free(&ck);
}

static void test_nested(void) {
  result plain, ck, off;
  run_opts po = opts_for(MODE_PLAIN), no = opts_for(MODE_NESTED), no_off = opts_for(MODE_NESTED);
  no_off.co.early_stop = ZT_CHECKPOINT_EARLY_STOP_OFF;
  run(5, 0.2, &po, true, 1, &plain);
  run(5, 0.2, &no, true, 1, &ck);
  run(5, 0.2, &no_off, true, 2, &off); /* and a second backward, retain_graph */
  check_same(&plain, &ck, 5);
  /* block 1's unpack recomputes the outer region, which stops early once block 1's input is
   * saved again (Rule 5; block 1 is not rerun there); block 0's unpack then needs the outer
   * tensor kept for it: forward + outer recompute + its own recompute (Rules 1-3) */
  ZT_CHECK(ck.calls[0] == 3 && ck.calls[1] == 2);
  ZT_CHECK(ck.calls[2] == 3 && ck.calls[3] == 2 && ck.calls[4] == 2);
  /* early stop off: the outer recomputation runs block 1 too; two backwards recompute twice */
  ZT_CHECK(off.calls[0] == 5 && off.calls[1] == 5);
  result plain2;
  run(5, 0.2, &po, true, 2, &plain2);
  check_same(&plain2, &off, 5);
  result_free(&plain);
  result_free(&ck);
  result_free(&off);
  result_free(&plain2);
}

static void test_reentrant_bitwise_equal(void) {
  result plain, ck;
  run_opts po = opts_for(MODE_PLAIN), ro = opts_for(MODE_REENTRANT);
  run(4, 0.3, &po, true, 1, &plain);
  run(4, 0.3, &ro, true, 1, &ck);
  check_same(&plain, &ck, 4);
  for (int l = 0; l < 4; l++) ZT_CHECK(ck.calls[l] == 2 && ck.completed[l] == 2);
  result_free(&plain);
  result_free(&ck);
  ro.two_outputs = po.two_outputs = true;
  run(3, 0.3, &po, true, 1, &plain);
  run(3, 0.3, &ro, true, 1, &ck);
  check_same(&plain, &ck, 3);
  result_free(&plain);
  result_free(&ck);
}

/* zt_grad w.r.t. x and the first block's weight: checkpointed equals plain; no .grad. */
static void grad_run(mode md, zt_tensor **gx, zt_tensor **gw, zt_status *st) {
  model m;
  model_init(&m, 3, 0.2, H, 100);
  zt_tensor *x = zt_test_rand_leaf(2, (int64_t[]){ROWS, H}, ZT_DTYPE_F32, -1, 1, 7);
  run_opts o = opts_for(md);
  zt_rng_seed(42);
  zt_tensor *loss = NULL;
  ZT_CHECK_OK(forward(&m, &o, x, &loss));
  zt_tensor *ins[2] = {x, m.blk[0].w}, *gs[2] = {NULL, NULL};
  zt_clear_error();
  *st = loss ? zt_grad(1, &loss, NULL, 2, ins, false, gs) : ZT_STATUS_INTERNAL;
  *gx = gs[0];
  *gw = gs[1];
  ZT_CHECK(x->grad == NULL && m.blk[0].w->grad == NULL);
  zt_tensor_free(loss);
  zt_tensor_free(x);
  model_free(&m);
}

static void test_zt_grad_non_reentrant(void) {
  zt_tensor *px, *pw, *cx, *cw;
  zt_status s1, s2;
  grad_run(MODE_PLAIN, &px, &pw, &s1);
  grad_run(MODE_CKPT, &cx, &cw, &s2);
  ZT_CHECK(s1 == ZT_OK && s2 == ZT_OK);
  ZT_CHECK(px && cx && zt_test_bitwise_equal(px, cx));
  ZT_CHECK(pw && cw && zt_test_bitwise_equal(pw, cw));
  zt_tensor_free(px);
  zt_tensor_free(pw);
  zt_tensor_free(cx);
  zt_tensor_free(cw);
}

static void test_reentrant_errors(void) {
  zt_tensor *gx, *gw;
  zt_status s;
  grad_run(MODE_REENTRANT, &gx, &gw, &s);
  ZT_CHECK(s == ZT_STATUS_AUTOGRAD);
  ZT_CHECK(strstr(zt_last_error(), "zt_checkpoint_reentrant does not support zt_grad") != NULL);
  ZT_CHECK(gx == NULL && gw == NULL);
  /* no input requires grad: refused in forward */
  model m;
  model_init(&m, 1, 0.0, H, 100);
  zt_tensor *x = zt_test_rand(2, (int64_t[]){ROWS, H}, ZT_DTYPE_F32, -1, 1, 7), *y = NULL;
  ZT_CHECK_ERR(zt_checkpoint_reentrant(block_fn, &m.blk[0], 1, &x, 1, &y, NULL), ZT_STATUS_AUTOGRAD,
               "none of the 1 inputs requires grad");
  ZT_CHECK(y == NULL);
  zt_tensor_free(x);
  model_free(&m);
}

static zt_status detached_fn(zt_tensor *const *in, int n_in, zt_tensor **out, int n_out, void *ud) {
  (void)n_in, (void)n_out, (void)ud;
  return zt_tensor_clone_data(in[0], ZT_MEM_TAG_ACTIVATION, &out[0]);
}

static void test_reentrant_no_output_requires_grad(void) {
  zt_tensor *x = zt_test_rand_leaf(1, (int64_t[]){4}, ZT_DTYPE_F32, -1, 1, 3), *y = NULL, *z = NULL, *l = NULL;
  ZT_CHECK_OK(zt_checkpoint_reentrant(detached_fn, NULL, 1, &x, 1, &y, NULL));
  ZT_CHECK(y && y->requires_grad);
  ZT_CHECK_OK(zt_mul(y, y, &z));
  ZT_CHECK_OK(zt_sum(z, 0, NULL, false, &l));
  ZT_CHECK_ERR(zt_backward(1, &l, NULL, false), ZT_STATUS_AUTOGRAD, "none of the outputs of the recomputed region");
  zt_tensor_free(l);
  zt_tensor_free(z);
  zt_tensor_free(y);
  zt_tensor_free(x);
}

static void determinism_case(int kind, zt_checkpoint_early_stop es, bool check, zt_status want, const char *msg) {
  model m;
  model_init(&m, 1, 0.1, H, 100);
  m.blk[0].misbehave_on_call = 2; /* the recomputation */
  m.blk[0].misbehave_kind = kind;
  zt_tensor *x = zt_test_rand_leaf(2, (int64_t[]){ROWS, H}, ZT_DTYPE_F32, -1, 1, 7), *y = NULL, *l = NULL;
  zt_checkpoint_options o = zt_checkpoint_options_default();
  o.early_stop = es;
  o.determinism_check = check;
  ZT_CHECK_OK(zt_checkpoint(block_fn, &m.blk[0], 1, &x, 1, &y, &o));
  ZT_CHECK_OK(zt_sum(y, 0, NULL, false, &l));
  if (want == ZT_OK)
    ZT_CHECK_OK(zt_backward(1, &l, NULL, false));
  else
    ZT_CHECK_ERR(zt_backward(1, &l, NULL, false), want, msg);
  zt_tensor_free(l);
  zt_tensor_free(y);
  zt_tensor_free(x);
  model_free(&m);
}

static void test_determinism_check(void) {
  /* another shape at index 0 (layer_norm's input): named with both shapes and the op */
  determinism_case(1, ZT_CHECKPOINT_EARLY_STOP_ON, true, ZT_STATUS_AUTOGRAD,
                   "saved tensor 0 had shape (8, 16) (f32) in forward but shape (7, 16) (f32)");
  determinism_case(1, ZT_CHECKPOINT_EARLY_STOP_ON, true, ZT_STATUS_AUTOGRAD, "layer_norm");
  /* one save fewer (gelu skipped): the region ends before the count is reached, with early
   * stop on or off (an extra save at the end is invisible with early stop on, as in PyTorch) */
  determinism_case(2, ZT_CHECKPOINT_EARLY_STOP_OFF, true, ZT_STATUS_AUTOGRAD,
                   "the forward saved 7 tensors but the recomputation saved 6");
  determinism_case(2, ZT_CHECKPOINT_EARLY_STOP_ON, true, ZT_STATUS_AUTOGRAD, "the forward saved 7 tensors but the recomputation saved 6");
  /* check off: the engine still refuses a wrong shape when unpacking */
  determinism_case(1, ZT_CHECKPOINT_EARLY_STOP_ON, false, ZT_STATUS_AUTOGRAD, "unpack must restore what pack was given");
}

/* Backward inside the region (Rule 6): fn takes zt_grad of part of itself. */
static zt_status grad_inside_fn(zt_tensor *const *in, int n_in, zt_tensor **out, int n_out, void *ud) {
  (void)n_in, (void)n_out, (void)ud;
  zt_tensor *y = NULL, *z = NULL, *s = NULL, *gx = NULL;
  zt_status st = zt_tanh(in[0], &y);
  if (!st) st = zt_gelu(y, &z);
  if (!st) st = zt_sum(z, 0, NULL, false, &s);
  if (!st) st = zt_grad(1, &s, NULL, 1, &in[0], true, &gx);
  if (!st) st = zt_mul(gx, z, &out[0]);
  zt_tensor_free(y);
  zt_tensor_free(z);
  zt_tensor_free(s);
  zt_tensor_free(gx);
  return st;
}

static void test_backward_inside_region(void) {
  double vals[2][4];
  for (int mode_i = 0; mode_i < 3; mode_i++) {
    zt_tensor *x = zt_test_rand_leaf(1, (int64_t[]){4}, ZT_DTYPE_F64, -1, 1, 5), *y = NULL, *l = NULL;
    zt_checkpoint_options o = zt_checkpoint_options_default();
    o.early_stop = mode_i == 2 ? ZT_CHECKPOINT_EARLY_STOP_OFF : ZT_CHECKPOINT_EARLY_STOP_ON;
    if (mode_i == 0)
      ZT_CHECK_OK(grad_inside_fn(&x, 1, &y, 1, NULL));
    else
      ZT_CHECK_OK(zt_checkpoint(grad_inside_fn, NULL, 1, &x, 1, &y, &o));
    ZT_CHECK_OK(zt_sum(y, 0, NULL, false, &l));
    ZT_CHECK_OK(zt_backward(1, &l, NULL, false));
    /* zt_grad gives a tensor without history: only the z path carries grad */
    for (int i = 0; i < 4; i++) vals[mode_i ? 1 : 0][i] = zt_tensor_get(x->grad, i);
    if (mode_i)
      for (int i = 0; i < 4; i++) ZT_CHECK(vals[0][i] == vals[1][i]);
    zt_tensor_free(l);
    zt_tensor_free(y);
    zt_tensor_free(x);
  }
}

/* Peak ACTIVATION bytes over forward + backward of a deep chain: checkpointing every block
 * keeps one recomputed block at a time (recomputation is tagged ACTIVATION too). */
static int64_t peak_activation(mode md, int L) {
  model m;
  model_init(&m, L, 0.1, 64, 300);
  zt_tensor *x = zt_test_rand_leaf(2, (int64_t[]){64, 64}, ZT_DTYPE_F32, -1, 1, 7);
  run_opts o = opts_for(md);
  zt_mem_stats st;
  zt_mem_stats_get(ZT_CPU, &st);
  int64_t base = st.current[ZT_MEM_TAG_ACTIVATION];
  zt_mem_reset_peaks();
  zt_tensor *loss = NULL;
  ZT_CHECK_OK(forward(&m, &o, x, &loss));
  if (loss) ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
  zt_mem_stats_get(ZT_CPU, &st);
  zt_tensor_free(loss);
  zt_tensor_free(x);
  model_free(&m);
  return st.peak[ZT_MEM_TAG_ACTIVATION] - base;
}

static void test_memory_peak_activation(void) {
  int L = 16;
  int64_t plain = peak_activation(MODE_PLAIN, L), ck = peak_activation(MODE_CKPT, L),
          re = peak_activation(MODE_REENTRANT, L);
  int64_t block_act = 64 * 64 * 4; /* one (64, 64) f32 activation */
  printf("  peak ACTIVATION bytes, %d blocks: plain %lld, checkpoint %lld, reentrant %lld (one tensor %lld)\n", L,
         (long long)plain, (long long)ck, (long long)re, (long long)block_act);
  ZT_CHECK(plain > 3 * L * block_act);  /* x, layer_norm out, linear out per block */
  ZT_CHECK(ck * 2 < plain);
  ZT_CHECK(re * 2 < plain);
  /* block outputs (L) plus one recomputed block's tensors, with slack */
  ZT_CHECK(ck <= (L + 6) * block_act);
}

static void test_grad_mode_off_and_bad_args(void) {
  model m;
  model_init(&m, 1, 0.0, H, 100);
  zt_tensor *x = zt_test_rand_leaf(2, (int64_t[]){ROWS, H}, ZT_DTYPE_F32, -1, 1, 7), *y = NULL;
  bool prev = zt_set_grad_enabled(false);
  ZT_CHECK_OK(zt_checkpoint(block_fn, &m.blk[0], 1, &x, 1, &y, NULL));
  ZT_CHECK(y && !y->requires_grad && m.blk[0].calls == 1);
  zt_tensor_free(y);
  zt_set_grad_enabled(prev);
  ZT_CHECK_ERR(zt_checkpoint(NULL, NULL, 1, &x, 1, &y, NULL), ZT_STATUS_INVALID_ARG, "fn is NULL");
  ZT_CHECK_ERR(zt_checkpoint(block_fn, &m.blk[0], 1, &x, 0, &y, NULL), ZT_STATUS_INVALID_ARG,
               "at least one output");
  zt_tensor_free(x);
  model_free(&m);
}

/* An input changed in place after forward: recomputation refuses it (version counter). */
static void test_input_modified_in_place(void) {
  model m;
  model_init(&m, 1, 0.0, H, 100);
  zt_tensor *x = zt_test_rand(2, (int64_t[]){ROWS, H}, ZT_DTYPE_F32, -1, 1, 7), *y = NULL, *l = NULL;
  ZT_CHECK_OK(zt_checkpoint(block_fn, &m.blk[0], 1, &x, 1, &y, NULL));
  ZT_CHECK_OK(zt_sum(y, 0, NULL, false, &l));
  ZT_CHECK_OK(zt_tensor_set(x, 0, 5.0));
  ZT_CHECK_ERR(zt_backward(1, &l, NULL, false), ZT_STATUS_AUTOGRAD, "modified by an in-place operation");
  ZT_CHECK(strstr(zt_last_error(), "zt_checkpoint: cannot recompute") != NULL);
  zt_tensor_free(l);
  zt_tensor_free(y);
  zt_tensor_free(x);
  model_free(&m);
}

/* preserve_rng_state off: recomputation draws new dropout masks from the caller's
 * generator, so the grads differ from plain and the generator moves on (as in PyTorch). */
static void test_rng_not_preserved(void) {
  result plain, ck;
  run_opts po = opts_for(MODE_PLAIN), co = opts_for(MODE_CKPT);
  co.co.preserve_rng_state = false;
  run(2, 0.5, &po, true, 1, &plain);
  run(2, 0.5, &co, true, 1, &ck);
  ZT_CHECK(zt_test_bitwise_equal(plain.loss, ck.loss));
  ZT_CHECK(!zt_test_bitwise_equal(plain.g[0][0], ck.g[0][0]));
  ZT_CHECK(ck.rng.offset > plain.rng.offset);
  result_free(&plain);
  result_free(&ck);
}

/* ---------------------------------------------------------------- GPT-2 blocks */
enum { NB = 4, BC = 32 };
typedef enum block_mode { BM_PLAIN, BM_EACH, BM_NESTED, BM_SEQUENTIAL, BM_REENTRANT } block_mode;

static zt_status nn_block_stage(void *self, zt_tensor *x, zt_tensor **out) { return zt_nn_block_forward(self, x, out); }
static zt_status nn_block_region(zt_tensor *const *in, int n_in, zt_tensor **out, int n_out, void *ud) {
  (void)n_in, (void)n_out;
  return zt_nn_block_forward(ud, in[0], out);
}
typedef struct two_blocks {
  zt_nn_block *a, *b;
} two_blocks;
static zt_status nested_region(zt_tensor *const *in, int n_in, zt_tensor **out, int n_out, void *ud) {
  (void)n_in, (void)n_out;
  two_blocks *t = ud;
  zt_tensor *mid = NULL;
  zt_status s = zt_checkpoint(nn_block_region, t->a, 1, in, 1, &mid, NULL);
  if (!s) s = zt_checkpoint(nn_block_region, t->b, 1, &mid, 1, out, NULL);
  zt_tensor_free(mid);
  return s;
}

/* NB GPT-2 blocks (dropout 0.1) run 2 steps of forward+backward; returns loss of step 2,
 * all grads (accumulated over both steps) and x's grad. */
static void run_blocks(block_mode md, zt_tensor **loss_out, zt_tensor **grads, int *n_grads, zt_rng_state *rng) {
  zt_rng_seed(1234);
  zt_nn_block *blk[NB];
  for (int i = 0; i < NB; i++) {
    char name[8];
    snprintf(name, sizeof name, "%d", i);
    ZT_CHECK_OK(zt_nn_block_new(name, BC, 4, 0.1, ZT_DTYPE_F32, 0.02, 0.02, &blk[i]));
  }
  zt_tensor *x = zt_test_rand_leaf(3, (int64_t[]){2, 8, BC}, ZT_DTYPE_F32, -1, 1, 9);
  zt_checkpoint_stage stages[NB];
  for (int i = 0; i < NB; i++) stages[i] = (zt_checkpoint_stage){nn_block_stage, blk[i]};
  two_blocks pairs[NB / 2];
  for (int i = 0; i < NB / 2; i++) pairs[i] = (two_blocks){blk[2 * i], blk[2 * i + 1]};
  zt_tensor *loss = NULL;
  for (int step = 0; step < 2; step++) {
    zt_tensor *cur = x, *y = NULL;
    zt_status s = ZT_OK;
    if (md == BM_SEQUENTIAL) {
      s = zt_checkpoint_sequential(stages, NB, 3, x, &cur, NULL);
    } else if (md == BM_NESTED) {
      for (int i = 0; i < NB / 2 && !s; i++) {
        s = zt_checkpoint(nested_region, &pairs[i], 1, &cur, 1, &y, NULL);
        if (cur != x) zt_tensor_free(cur);
        cur = y;
      }
    } else {
      for (int i = 0; i < NB && !s; i++) {
        if (md == BM_PLAIN) s = zt_nn_block_forward(blk[i], cur, &y);
        if (md == BM_EACH) s = zt_checkpoint(nn_block_region, blk[i], 1, &cur, 1, &y, NULL);
        if (md == BM_REENTRANT) s = zt_checkpoint_reentrant(nn_block_region, blk[i], 1, &cur, 1, &y, NULL);
        if (cur != x) zt_tensor_free(cur);
        cur = y;
      }
    }
    ZT_CHECK_OK(s);
    zt_tensor *sq = NULL;
    zt_tensor_free(loss);
    loss = NULL;
    ZT_CHECK_OK(zt_mul(cur, cur, &sq));
    ZT_CHECK_OK(zt_mean(sq, 0, NULL, false, &loss));
    ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
    zt_tensor_free(sq);
    if (cur != x) zt_tensor_free(cur);
  }
  *rng = zt_rng_get_state();
  *loss_out = loss;
  int n = 0;
  grads[n++] = clone(x->grad);
  for (int i = 0; i < NB; i++) {
    int np = 0;
    zt_param *ps = NULL;
    ZT_CHECK_OK(zt_module_named_params(&blk[i]->base, "", &np, &ps));
    for (int j = 0; j < np; j++) grads[n++] = clone(ps[j].tensor->grad);
    free(ps);
    zt_module_free(&blk[i]->base);
  }
  *n_grads = n;
  zt_tensor_free(x);
}

static void test_gpt2_blocks_bitwise(void) {
  zt_tensor *pl = NULL, *pg[128];
  int pn = 0;
  zt_rng_state prng;
  run_blocks(BM_PLAIN, &pl, pg, &pn, &prng);
  ZT_CHECK(pn > 1 + NB && pn < 128);
  ZT_CHECK(prng.offset > 0); /* dropout drew masks */
  for (block_mode md = BM_EACH; md <= BM_REENTRANT; md++) {
    zt_tensor *l = NULL, *g[128];
    int n = 0;
    zt_rng_state rng;
    run_blocks(md, &l, g, &n, &rng);
    ZT_CHECK(n == pn);
    if (!(l && pl && zt_test_bitwise_equal(l, pl))) zt_test_fail(__FILE__, __LINE__, "mode %d: loss differs", md);
    for (int i = 0; i < n && i < pn; i++)
      if (!(g[i] && pg[i] && zt_test_bitwise_equal(g[i], pg[i])))
        zt_test_fail(__FILE__, __LINE__, "mode %d: grad %d differs", md, i);
    ZT_CHECK(rng.seed == prng.seed && rng.offset == prng.offset);
    zt_tensor_free(l);
    for (int i = 0; i < n; i++) zt_tensor_free(g[i]);
  }
  zt_tensor_free(pl);
  for (int i = 0; i < pn; i++) zt_tensor_free(pg[i]);
}

static void test_sequential_errors(void) {
  zt_tensor *x = zt_test_rand_leaf(1, (int64_t[]){4}, ZT_DTYPE_F32, -1, 1, 3), *y = NULL;
  zt_checkpoint_stage st[2] = {{nn_block_stage, NULL}, {NULL, NULL}};
  ZT_CHECK_ERR(zt_checkpoint_sequential(st, 2, 3, x, &y, NULL), ZT_STATUS_INVALID_ARG, "segments is 3");
  ZT_CHECK_ERR(zt_checkpoint_sequential(st, 2, 1, x, &y, NULL), ZT_STATUS_INVALID_ARG, "NULL argument");
  zt_checkpoint_stage st2[1] = {{NULL, NULL}};
  ZT_CHECK_ERR(zt_checkpoint_sequential(st2, 1, 1, x, &y, NULL), ZT_STATUS_INVALID_ARG, "stage 0 has no forward");
  ZT_CHECK(y == NULL);
  zt_tensor_free(x);
}

/* A saved tensor read outside backward (graph task -1) is recomputed on the spot. */
static void test_unpack_outside_backward(void) {
  zt_tensor *h[2] = {NULL, NULL};
  for (int c = 0; c < 2; c++) {
    model m;
    model_init(&m, 1, 0.3, H, 100);
    zt_tensor *x = zt_test_rand_leaf(2, (int64_t[]){ROWS, H}, ZT_DTYPE_F32, -1, 1, 7), *y = NULL, *t = NULL;
    zt_rng_seed(42);
    if (c == 0)
      ZT_CHECK_OK(block_fn(&x, 1, &y, 1, &m.blk[0]));
    else
      ZT_CHECK_OK(zt_checkpoint(block_fn, &m.blk[0], 1, &x, 1, &y, NULL));
    zt_node *gelu = zt_tensor_grad_fn(y);
    ZT_CHECK(gelu && zt_node_n_saved(gelu) == 1);
    ZT_CHECK_OK(zt_node_saved(gelu, 0, &t));
    h[c] = clone(t);
    if (c == 1) ZT_CHECK(m.blk[0].calls == 2);
    zt_tensor_free(y);
    zt_tensor_free(x);
    model_free(&m);
  }
  ZT_CHECK(h[0] && h[1] && zt_test_bitwise_equal(h[0], h[1]));
  zt_tensor_free(h[0]);
  zt_tensor_free(h[1]);
}

int main(void) {
  ZT_RUN(test_unpack_outside_backward);
  ZT_RUN(test_gpt2_blocks_bitwise);
  ZT_RUN(test_sequential_errors);
  ZT_RUN(test_input_modified_in_place);
  ZT_RUN(test_rng_not_preserved);
  ZT_RUN(test_bitwise_equal_with_dropout);
  ZT_RUN(test_early_stop_on_off);
  ZT_RUN(test_retain_graph_second_backward);
  ZT_RUN(test_inputs_not_requiring_grad);
  ZT_RUN(test_multiple_outputs);
  ZT_RUN(test_nested);
  ZT_RUN(test_zt_grad_non_reentrant);
  ZT_RUN(test_backward_inside_region);
  ZT_RUN(test_determinism_check);
  ZT_RUN(test_reentrant_bitwise_equal);
  ZT_RUN(test_reentrant_errors);
  ZT_RUN(test_reentrant_no_output_requires_grad);
  ZT_RUN(test_memory_peak_activation);
  ZT_RUN(test_grad_mode_off_and_bad_args);
  return zt_test_finish();
}
