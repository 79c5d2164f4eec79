/* Selective checkpointing (zt_checkpoint_options.policy): the policy sees each recorded op
 * once, in forward; SAVE ops are replayed from their kept outputs (not run again) and
 * everything else recomputed, bitwise equal to no checkpoint, RNG included; a changed op
 * sequence, a bad decision, a policy on the reentrant variant and an in-place change of a
 * kept output are clear errors; nested regions follow their own policy. Also: the
 * autocast (mixed-precision) state of the forward is restored for recomputation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zt_test.h"
#include "zt/checkpoint.h"

enum { R = 6, H = 12 };

typedef struct net {
  zt_tensor *w1, *b1, *w2, *lnw, *lnb;
  int calls;
  int odd_call;         /* that call runs tanh instead of gelu */
  bool end_with_linear; /* the region's output is the last linear's output itself */
  bool grad_inside;     /* zt_grad of the first linear's output w.r.t. x inside the region */
  bool nested;          /* the GELU and second dropout run in a plain checkpoint inside */
  zt_autocast_state seen[4]; /* the autocast state of each call */
} net;

static zt_status inner_fn(zt_tensor *const *in, int n_in, zt_tensor **out, int n_out, void *ud) {
  (void)n_in, (void)n_out, (void)ud;
  zt_tensor *g = NULL;
  zt_status s = zt_gelu(in[0], &g);
  if (!s) s = zt_dropout(g, 0.25, true, &out[0]);
  zt_tensor_free(g);
  return s;
}

/* x -> layer_norm -> dropout -> linear(w1, b1) -> gelu -> dropout -> linear(w2) [-> tanh] */
static zt_status net_fn(zt_tensor *const *in, int n_in, zt_tensor **out, int n_out, void *ud) {
  (void)n_in, (void)n_out;
  net *n = ud;
  if (n->calls < 4) n->seen[n->calls] = zt_autocast_get();
  n->calls++;
  zt_tensor *a = NULL, *d = NULL, *h = NULL, *g = NULL, *e = NULL, *y = NULL;
  zt_status s = zt_layer_norm(in[0], n->lnw, n->lnb, 1e-5, &a);
  if (!s) s = zt_dropout(a, 0.3, true, &d);
  if (!s) s = zt_linear(d, n->w1, n->b1, &h);
  if (!s && n->grad_inside) { /* a backward inside the region (Rule 6) */
    zt_tensor *sum = NULL, *gx = NULL;
    s = zt_sum(h, 0, NULL, false, &sum);
    if (!s) s = zt_grad(1, &sum, NULL, 1, &in[0], true, &gx);
    zt_tensor_free(sum);
    zt_tensor_free(gx);
  }
  if (!s && n->nested) {
    s = zt_checkpoint(inner_fn, NULL, 1, &h, 1, &e, NULL);
  } else if (!s) {
    s = n->odd_call == n->calls ? zt_tanh(h, &g) : zt_gelu(h, &g);
    if (!s) s = zt_dropout(g, 0.25, true, &e);
  }
  if (!s) s = zt_linear(e, n->w2, NULL, n->end_with_linear ? &out[0] : &y);
  if (!s && !n->end_with_linear) s = zt_tanh(y, &out[0]);
  zt_test_free_all((zt_tensor *[]){a, d, h, g, e, y}, 6);
  return s;
}

static void net_init(net *n) {
  memset(n, 0, sizeof *n);
  n->w1 = zt_test_rand_leaf(2, (int64_t[]){H, H}, ZT_DTYPE_F32, -0.5, 0.5, 1);
  n->b1 = zt_test_rand_leaf(1, (int64_t[]){H}, ZT_DTYPE_F32, -0.1, 0.1, 2);
  n->w2 = zt_test_rand_leaf(2, (int64_t[]){H, H}, ZT_DTYPE_F32, -0.5, 0.5, 3);
  n->lnw = zt_test_rand_leaf(1, (int64_t[]){H}, ZT_DTYPE_F32, 0.5, 1.5, 4);
  n->lnb = zt_test_rand_leaf(1, (int64_t[]){H}, ZT_DTYPE_F32, -0.1, 0.1, 5);
}

static zt_tensor **net_params(net *n, int i) {
  zt_tensor **p[5] = {&n->w1, &n->b1, &n->w2, &n->lnw, &n->lnb};
  return p[i];
}

static void net_free(net *n) {
  for (int i = 0; i < 5; i++) zt_tensor_free(*net_params(n, i));
}

typedef struct counted {
  zt_checkpoint_policy_fn inner; /* the decision; NULL: save every op */
  int seen, next_index;
  char ops[32][24];
} counted;

/* Counts calls and checks they come in index order. */
static zt_checkpoint_decision counting(const zt_checkpoint_op_info *info, void *ud) {
  counted *c = ud;
  ZT_CHECK(info->index == c->next_index);
  c->next_index++;
  if (c->seen < 32) snprintf(c->ops[c->seen], sizeof c->ops[0], "%s", info->op);
  c->seen++;
  ZT_CHECK(info->out_bytes > 0 && info->n_in >= 1);
  return c->inner ? c->inner(info, NULL) : ZT_CHECKPOINT_SAVE;
}

typedef struct run {
  zt_tensor *loss, *grad[6]; /* params and x */
  zt_rng_state rng;
} run;

static void run_free(run *r) {
  zt_tensor_free(r->loss);
  zt_test_free_all(r->grad, 6);
}

/* loss = sum(net(x)) with x requiring grad; policy NULL: no checkpoint at all. */
static zt_status run_net(net *n, const zt_checkpoint_policy *policy, bool checkpoint, run *r) {
  memset(r, 0, sizeof *r);
  zt_rng_seed(42);
  zt_tensor *x = zt_test_rand_leaf(2, (int64_t[]){R, H}, ZT_DTYPE_F32, -1, 1, 9), *y = NULL;
  zt_checkpoint_options o = zt_checkpoint_options_default();
  if (policy) o.policy = *policy;
  zt_status s = checkpoint ? zt_checkpoint(net_fn, n, 1, &x, 1, &y, &o) : net_fn(&x, 1, &y, 1, n);
  if (!s) s = zt_sum(y, 0, NULL, false, &r->loss);
  if (!s) s = zt_backward(1, &r->loss, NULL, false);
  for (int i = 0; i < 5 && !s; i++) {
    zt_tensor **p = net_params(n, i);
    r->grad[i] = (*p)->grad;
    (*p)->grad = NULL;
  }
  if (!s) {
    r->grad[5] = x->grad;
    x->grad = NULL;
  }
  for (int i = 0; i < 5; i++) {
    zt_tensor **p = net_params(n, i);
    zt_tensor_free((*p)->grad);
    (*p)->grad = NULL;
  }
  r->rng = zt_rng_get_state();
  zt_tensor_free(y);
  zt_tensor_free(x);
  return s;
}

static void check_same(const run *a, const run *b, const char *what) {
  if (!(a->loss && b->loss && zt_test_bitwise_equal(a->loss, b->loss)))
    zt_test_fail(__FILE__, __LINE__, "%s: losses differ", what);
  for (int i = 0; i < 6; i++)
    if (!(a->grad[i] && b->grad[i] && zt_test_bitwise_equal(a->grad[i], b->grad[i])))
      zt_test_fail(__FILE__, __LINE__, "%s: grad %d differs", what, i);
  if (a->rng.offset != b->rng.offset) zt_test_fail(__FILE__, __LINE__, "%s: RNG state after differs", what);
}

static zt_checkpoint_decision save_dropout(const zt_checkpoint_op_info *info, void *ud) {
  (void)ud;
  return strcmp(info->op, "dropout") ? ZT_CHECKPOINT_RECOMPUTE : ZT_CHECKPOINT_SAVE;
}

static zt_checkpoint_decision save_odd(const zt_checkpoint_op_info *info, void *ud) {
  (void)ud;
  return info->index % 2 ? ZT_CHECKPOINT_SAVE : ZT_CHECKPOINT_RECOMPUTE;
}

static void test_policies_bitwise_and_seen_once(void) {
  net n;
  net_init(&n);
  run plain;
  ZT_CHECK_OK(run_net(&n, NULL, false, &plain));
  const struct {
    const char *what;
    zt_checkpoint_policy_fn fn;
  } cases[] = {{"save every op", NULL},
               {"save GEMMs", zt_checkpoint_policy_save_gemm},
               {"save wide GEMMs", zt_checkpoint_policy_save_wide_gemm},
               {"save nothing", zt_checkpoint_policy_save_nothing},
               {"save dropouts (RNG replayed)", save_dropout},
               {"save odd ops", save_odd},
               {"recompute attention only", zt_checkpoint_policy_recompute_attention}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    counted c = {cases[k].fn, 0, 0, {{0}}};
    zt_checkpoint_policy p = {counting, &c};
    run got;
    n.calls = 0;
    ZT_CHECK_OK(run_net(&n, &p, true, &got));
    check_same(&plain, &got, cases[k].what);
    ZT_CHECK(n.calls == 2); /* forward and one recomputation */
    /* seen once each, in forward only: layer_norm dropout linear gelu dropout linear tanh */
    ZT_CHECK(c.seen == 7);
    ZT_CHECK(!strcmp(c.ops[0], "layer_norm") && !strcmp(c.ops[2], "linear") && !strcmp(c.ops[3], "gelu") &&
             !strcmp(c.ops[6], "tanh"));
    run_free(&got);
  }
  run_free(&plain);
  net_free(&n);
}

/* Rule 6 with a policy: zt_grad inside the region; and nesting: a plain checkpoint inside
 * the selective region, whose ops the outer policy does not see. */
static void test_backward_inside_and_nested(void) {
  net n;
  net_init(&n);
  run plain, got;
  n.grad_inside = true;
  ZT_CHECK_OK(run_net(&n, NULL, false, &plain));
  counted c = {zt_checkpoint_policy_save_gemm, 0, 0, {{0}}};
  zt_checkpoint_policy p = {counting, &c};
  ZT_CHECK_OK(run_net(&n, &p, true, &got));
  check_same(&plain, &got, "zt_grad inside a selective region");
  run_free(&plain);
  run_free(&got);

  n.grad_inside = false;
  n.nested = true;
  ZT_CHECK_OK(run_net(&n, NULL, false, &plain));
  c = (counted){NULL, 0, 0, {{0}}};
  ZT_CHECK_OK(run_net(&n, &p, true, &got));
  check_same(&plain, &got, "plain checkpoint nested in a selective one");
  ZT_CHECK(c.seen == 5); /* layer_norm dropout linear linear tanh: not the inner gelu and dropout */
  ZT_CHECK(c.seen == 5 && !strcmp(c.ops[3], "linear"));
  run_free(&plain);
  run_free(&got);
  net_free(&n);
}

static void test_errors(void) {
  net n;
  net_init(&n);
  run got;
  /* a different op sequence in recomputation names both ops */
  n.odd_call = 2;
  zt_checkpoint_policy p = {zt_checkpoint_policy_save_gemm, NULL};
  ZT_CHECK_ERR(run_net(&n, &p, true, &got), ZT_STATUS_AUTOGRAD, "op #3 of the selective region is 'tanh' when recomputed but was 'gelu'");
  run_free(&got);
  n.odd_call = 0;
  n.calls = 0;
  /* the reentrant variant takes no policy */
  zt_tensor *x = zt_test_rand_leaf(2, (int64_t[]){R, H}, ZT_DTYPE_F32, -1, 1, 9), *y = NULL;
  zt_checkpoint_options o = zt_checkpoint_options_default();
  o.policy = p;
  ZT_CHECK_ERR(zt_checkpoint_reentrant(net_fn, &n, 1, &x, 1, &y, &o), ZT_STATUS_INVALID_ARG,
               "selective policies work with zt_checkpoint (non-reentrant) only");
  /* a kept output modified in place before backward: replay refuses it */
  n.end_with_linear = true;
  zt_tensor *loss = NULL;
  zt_checkpoint_policy all = {zt_checkpoint_policy_save_gemm, NULL};
  o.policy = all;
  ZT_CHECK_OK(zt_checkpoint(net_fn, &n, 1, &x, 1, &y, &o));
  ZT_CHECK_OK(zt_sum(y, 0, NULL, false, &loss));
  bool prev = zt_set_grad_enabled(false);
  ZT_CHECK_OK(zt_tensor_fill_(y, 0.5));
  zt_set_grad_enabled(prev);
  ZT_CHECK_ERR(zt_backward(1, &loss, NULL, false), ZT_STATUS_AUTOGRAD, "kept by the selective policy, was modified in place");
  zt_test_free_all((zt_tensor *[]){x, y, loss}, 3);
  for (int i = 0; i < 5; i++) {
    zt_tensor **q = net_params(&n, i);
    zt_tensor_free((*q)->grad);
    (*q)->grad = NULL;
  }
  net_free(&n);
}

static zt_checkpoint_decision bad_decision(const zt_checkpoint_op_info *info, void *ud) {
  (void)info, (void)ud;
  return (zt_checkpoint_decision)5;
}

static void test_bad_decision(void) {
  net n;
  net_init(&n);
  run got;
  zt_checkpoint_policy p = {bad_decision, NULL};
  ZT_CHECK_ERR(run_net(&n, &p, true, &got), ZT_STATUS_INVALID_ARG, "the selective policy returned 5 for op 'layer_norm' (#0)");
  run_free(&got);
  net_free(&n);
}

/* What SAVE keeps stays alive between forward and backward; RECOMPUTE keeps nothing. */
static void test_memory(void) {
  net n;
  net_init(&n);
  int64_t kept[3];
  zt_checkpoint_policy_fn fns[3] = {zt_checkpoint_policy_save_nothing, zt_checkpoint_policy_save_gemm, NULL};
  for (int k = 0; k < 3; k++) {
    counted c = {fns[k], 0, 0, {{0}}};
    zt_checkpoint_policy p = {counting, &c};
    zt_checkpoint_options o = zt_checkpoint_options_default();
    o.policy = p;
    zt_tensor *x = zt_test_rand_leaf(2, (int64_t[]){R, H}, ZT_DTYPE_F32, -1, 1, 9), *y = NULL, *loss = NULL;
    zt_mem_stats a, b;
    zt_mem_stats_get(ZT_CPU, &a);
    ZT_CHECK_OK(zt_checkpoint(net_fn, &n, 1, &x, 1, &y, &o));
    zt_mem_stats_get(ZT_CPU, &b);
    kept[k] = b.current[ZT_MEM_TAG_ACTIVATION] - a.current[ZT_MEM_TAG_ACTIVATION];
    ZT_CHECK_OK(zt_sum(y, 0, NULL, false, &loss));
    ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
    zt_test_free_all((zt_tensor *[]){x, y, loss}, 3);
    for (int i = 0; i < 5; i++) {
      zt_tensor **q = net_params(&n, i);
      zt_tensor_free((*q)->grad);
      (*q)->grad = NULL;
    }
  }
  int64_t row = (int64_t)R * H * 4;
  /* nothing: the output only; GEMMs: + both linears' outputs; all: + layer norm (out,
   * mean, rstd), two dropouts, gelu */
  printf("  ACTIVATION bytes kept after forward: save nothing %lld, GEMMs %lld, all %lld (a %dx%d f32 tensor: %lld)\n",
         (long long)kept[0], (long long)kept[1], (long long)kept[2], R, H, (long long)row);
  ZT_CHECK(kept[0] == row);
  ZT_CHECK(kept[1] == 3 * row);
  ZT_CHECK(kept[2] >= 7 * row);
  net_free(&n);
}

/* Mixed-precision state: recomputation runs under the autocast state of the forward, for
 * both variants, and the caller's state is untouched afterwards. */
static void test_autocast_state_restored(void) {
  for (int reentrant = 0; reentrant < 2; reentrant++) {
    net n;
    net_init(&n);
    zt_tensor *x = zt_test_rand_leaf(2, (int64_t[]){R, H}, ZT_DTYPE_F32, -1, 1, 9), *y = NULL, *loss = NULL;
    zt_autocast_state was = zt_autocast_set((zt_autocast_state){true, ZT_DTYPE_F16});
    ZT_CHECK_OK(reentrant ? zt_checkpoint_reentrant(net_fn, &n, 1, &x, 1, &y, NULL)
                          : zt_checkpoint(net_fn, &n, 1, &x, 1, &y, NULL));
    zt_autocast_set((zt_autocast_state){false, ZT_DTYPE_BF16}); /* backward runs under another state */
    ZT_CHECK_OK(zt_sum(y, 0, NULL, false, &loss));
    ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
    ZT_CHECK(n.calls == 2);
    ZT_CHECK(n.seen[0].enabled && n.seen[0].dtype == ZT_DTYPE_F16);
    if (!(n.seen[1].enabled && n.seen[1].dtype == ZT_DTYPE_F16))
      zt_test_fail(__FILE__, __LINE__, "%s recomputation ran under autocast %d/%s, not the forward's",
                   reentrant ? "reentrant" : "non-reentrant", (int)n.seen[1].enabled, zt_dtype_name(n.seen[1].dtype));
    zt_autocast_state now = zt_autocast_get();
    ZT_CHECK(!now.enabled && now.dtype == ZT_DTYPE_BF16); /* the caller's state is back */
    zt_autocast_set(was);
    zt_test_free_all((zt_tensor *[]){x, y, loss}, 3);
    for (int i = 0; i < 5; i++) {
      zt_tensor **q = net_params(&n, i);
      zt_tensor_free((*q)->grad);
      (*q)->grad = NULL;
    }
    net_free(&n);
  }
}

int main(void) {
  ZT_RUN(test_policies_bitwise_and_seen_once);
  ZT_RUN(test_backward_inside_and_nested);
  ZT_RUN(test_errors);
  ZT_RUN(test_bad_decision);
  ZT_RUN(test_memory);
  ZT_RUN(test_autocast_state_restored);
  return zt_test_finish();
}
