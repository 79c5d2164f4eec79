/* Strategies applied from outside (zt/strategy.h) on sequence wrappers (zt/nn.h):
 * - wrappers nest by order whatever the order they are added in, a wrapper may split the
 *   span it runs, a stale `next` (wrappers changed between forward and backward) is an
 *   error, only sequences take wrappers;
 * - on GPT-2, recompute and activation offload attached in either list order give bitwise
 *   the losses and parameters of plain training over three AdamW steps, with the same
 *   offload traffic (recompute inside offload: only region inputs reach the tier);
 * - DDP and FSDP through the same interface (one-rank group), composed with both, give
 *   the same results;
 * - a failing zt_strategies_attach leaves nothing attached, and detaching restores the
 *   plain run. */
#include <string.h>

#include "core/status_internal.h"
#include "zt/fsdp.h"
#include "zt/nn.h"
#include "zt/offload.h"
#include "zt/optim.h"
#include "zt/strategy.h"
#include "zt_test.h"

/* ------------------------------------------------------------------ a toy sequence */

typedef struct toy {
  char log[128];
  int n;
} toy;

static void note(toy *t, const char *s) {
  size_t k = strlen(s);
  if (t->n + (int)k < (int)sizeof t->log - 1) {
    memcpy(t->log + t->n, s, k);
    t->n += (int)k;
    t->log[t->n] = 0;
  }
}

/* child i multiplies by i + 2 */
static zt_status toy_span(void *ctx, int first, int count, zt_tensor *x, zt_tensor **y) {
  char b[16];
  snprintf(b, sizeof b, "[%d,%d)", first, first + count);
  note(ctx, b);
  zt_tensor *cur = x;
  for (int i = first; i < first + count; i++) {
    zt_tensor *o = NULL;
    zt_status s = zt_mul_scalar(cur, i + 2, &o);
    if (cur != x) zt_tensor_free(cur);
    if (s) return s;
    cur = o;
  }
  *y = cur;
  return ZT_OK;
}

typedef struct wrap_ctx {
  toy *t;
  const char *name;
  bool split;       /* run the span as two halves */
  zt_span_next kept; /* the last next it was given */
} wrap_ctx;

static zt_status wrap(void *ud, zt_span_next next, int first, int count, zt_tensor *x, zt_tensor **y) {
  wrap_ctx *w = ud;
  w->kept = next;
  note(w->t, w->name);
  if (!w->split || count < 2) return zt_span_run(next, first, count, x, y);
  zt_tensor *mid = NULL;
  ZT_TRY(zt_span_run(next, first, count / 2, x, &mid));
  zt_status s = zt_span_run(next, first + count / 2, count - count / 2, mid, y);
  zt_tensor_free(mid);
  return s;
}

static void test_sequence_wrappers(void) {
  toy t = {{0}, 0};
  zt_module *seq = NULL, *leaf = NULL;
  ZT_CHECK_OK(zt_module_new("ModuleList", "h", &seq));
  if (!seq) return;
  for (int i = 0; i < 4; i++) {
    zt_module *c = NULL;
    char name[8];
    snprintf(name, sizeof name, "%d", i);
    ZT_CHECK_OK(zt_module_new(NULL, name, &c));
    ZT_CHECK_OK(zt_module_add_child(seq, c));
  }
  zt_tensor *x = zt_test_rand_leaf(1, (int64_t[]){3}, ZT_DTYPE_F32, -1, 1, 1), *y = NULL;
  zt_module_wrapper w0 = {wrap, 100, NULL};
  ZT_CHECK_ERR(zt_module_add_wrapper(seq, &w0, NULL), ZT_STATUS_INVALID_ARG, "is not a sequence");
  ZT_CHECK_ERR(zt_module_run_sequence(seq, x, &y), ZT_STATUS_INVALID_ARG, "not a sequence");
  ZT_CHECK_OK(zt_module_set_span_fn(seq, toy_span, &t));
  /* added inner first: they still nest by order */
  wrap_ctx inner = {&t, "I", true, {0}}, outer = {&t, "O", false, {0}};
  int id_in = 0, id_out = 0;
  ZT_CHECK_OK(zt_module_add_wrapper(seq, &(zt_module_wrapper){wrap, 300, &inner}, &id_in));
  ZT_CHECK_OK(zt_module_add_wrapper(seq, &(zt_module_wrapper){wrap, 200, &outer}, &id_out));
  ZT_CHECK_OK(zt_module_run_sequence(seq, x, &y));
  ZT_CHECK(!strcmp(t.log, "OI[0,2)[2,4)"));
  if (y) ZT_CHECK_NEAR(zt_tensor_get(y, 1), zt_tensor_get(x, 1) * 2 * 3 * 4 * 5, 1e-5);
  zt_tensor_free(y), y = NULL;
  /* a span outside the sequence, and a next left over from before the wrappers changed */
  ZT_CHECK_ERR(zt_span_run((zt_span_next){seq, 0}, 3, 2, x, &y), ZT_STATUS_INVALID_ARG, "outside sequence");
  zt_span_next stale = inner.kept; /* level 2: the span function, with two wrappers */
  zt_module_remove_wrapper(seq, id_out);
  ZT_CHECK_ERR(zt_span_run(stale, 0, 1, x, &y), ZT_STATUS_STATE, "wrappers changed between a forward and its backward");
  zt_module_remove_wrapper(seq, id_in);
  t.n = 0, t.log[0] = 0;
  ZT_CHECK_OK(zt_module_run_sequence(seq, x, &y));
  ZT_CHECK(!strcmp(t.log, "[0,4)")); /* no wrappers left */
  ZT_CHECK_OK(zt_module_new(NULL, "leaf", &leaf));
  ZT_CHECK_ERR(zt_module_run_sequence(leaf, x, &y), ZT_STATUS_INVALID_ARG, "not a sequence");
  zt_test_free_all((zt_tensor *[]){x, y}, 2);
  zt_module_free(leaf);
  zt_module_free(seq);
}

/* ------------------------------------------------------------------ GPT-2 */

enum { B = 2, T = 16, STEPS = 3, MAXP = 64 };

typedef struct result {
  double loss[STEPS];
  zt_tensor *param[MAXP];
  int n;
  zt_offload_stats st;
} result;

/* STEPS AdamW steps of a 3-layer GPT-2 with dropout; with_rc / with_off attach a FULL
 * recompute plan (regions of 2 blocks) and a lossless offload store, listed in the given
 * order (reversed: offload first); dp (NULL: none) a data-parallel strategy on a one-rank
 * group, listed last, whose parameters the optimizer then updates. */
static void train_dp(bool with_rc, bool with_off, bool reversed, const zt_data_parallel_options *dpo, result *r) {
  *r = (result){0};
  zt_gpt2_config c = {3, 2, 32, 64, T, 0.1};
  zt_rng_seed(5);
  zt_gpt2 *g = NULL;
  ZT_CHECK_OK(zt_gpt2_new(&c, &g));
  if (!g) return;
  zt_model model = zt_gpt2_model(g);
  zt_recompute_options ro = zt_recompute_options_default();
  ro.mode = ZT_RECOMPUTE_FULL, ro.every = 2;
  zt_recompute_plan *rc = NULL;
  zt_offload *off = NULL;
  zt_strategy s[3];
  int n = 0;
  zt_comm *comm = NULL;
  zt_data_parallel *dp = NULL;
  if (with_rc) ZT_CHECK_OK(zt_recompute_plan_new(&ro, &rc));
  if (with_off) {
    zt_offload_options oo = zt_offload_options_default(ZT_OFFLOAD_HOST);
    oo.min_bytes = 0;
    ZT_CHECK_OK(zt_offload_new(&oo, &off));
  }
  if (rc && !reversed) s[n++] = zt_recompute_plan_strategy(rc);
  if (off) s[n++] = zt_offload_strategy(off);
  if (rc && reversed) s[n++] = zt_recompute_plan_strategy(rc);
  if (dpo) {
    ZT_CHECK_OK(zt_comm_init_local(&comm));
    ZT_CHECK_OK(zt_data_parallel_new(comm, dpo, &dp));
    s[n++] = zt_data_parallel_strategy(dp);
  }
  ZT_CHECK_OK(zt_strategies_attach(n, s, &model));
  if (dp) ZT_CHECK_ERR(zt_strategy_attach(zt_data_parallel_strategy(dp), &model), ZT_STATUS_STATE, "attached to a model already");
  zt_param *ps;
  int np = zt_gpt2_params(g, &ps);
  if (dp) {
    ZT_CHECK(dpo->fsdp ? zt_data_parallel_fsdp(dp) && !zt_data_parallel_ddp(dp)
                       : zt_data_parallel_ddp(dp) && !zt_data_parallel_fsdp(dp));
    zt_param *dps = NULL;
    int dn = zt_data_parallel_params(dp, &dps);
    ZT_CHECK(dn > 0 && dps);
    np = dn, ps = dps;
  }
  zt_optim_config oc = zt_optim_default(ZT_OPTIM_ADAMW);
  zt_optim *o = NULL;
  ZT_CHECK_OK(zt_optim_new(&oc, np, ps, &o));
  zt_tensor *ids = zt_test_rand_ids(B, T, c.vocab_size, 7), *tg = zt_test_rand_ids(B, T, c.vocab_size, 8);
  for (int k = 0; k < STEPS && o; k++) {
    zt_tensor *loss = NULL;
    ZT_CHECK_OK(zt_gpt2_forward(g, ids, tg, NULL, &loss));
    if (!loss) break;
    ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
    r->loss[k] = zt_tensor_get(loss, 0);
    zt_tensor_free(loss);
    ZT_CHECK_OK(zt_optim_step(o, 1e-2));
    zt_optim_zero_grad(o); /* under FSDP too: the next reduction replaces the dropped grads */
  }
  if (dp && dpo->fsdp) ZT_CHECK_OK(zt_fsdp_gather_full_params(zt_data_parallel_fsdp(dp)));
  np = zt_gpt2_params(g, &ps); /* the model's full parameters, whatever the optimizer saw */
  for (int i = 0; i < np && i < MAXP; i++) ZT_CHECK_OK(zt_tensor_clone_data(ps[i].tensor, ZT_MEM_TAG_TEMP, &r->param[i]));
  r->n = np < MAXP ? np : MAXP;
  zt_offload_stats_get(off, &r->st);
  zt_strategies_detach(n, s);
  ZT_CHECK(!zt_data_parallel_fsdp(dp) && !zt_data_parallel_ddp(dp));
  zt_data_parallel_free(dp);
  zt_comm_free(comm);
  ZT_CHECK(zt_model_blocks(&model)->n_wrappers == 0);
  zt_test_free_all((zt_tensor *[]){ids, tg}, 2);
  zt_optim_free(o);
  zt_recompute_plan_free(rc);
  zt_offload_free(off);
  zt_gpt2_free(g);
}

static void train(bool with_rc, bool with_off, bool reversed, result *r) { train_dp(with_rc, with_off, reversed, NULL, r); }

static void check_same(const result *want, const result *got, const char *what) {
  for (int k = 0; k < STEPS; k++)
    if (memcmp(&want->loss[k], &got->loss[k], sizeof(double)))
      zt_test_fail(__FILE__, __LINE__, "%s: loss of step %d differs: %.17g vs %.17g", what, k + 1, want->loss[k],
                   got->loss[k]);
  ZT_CHECK(want->n == got->n);
  for (int i = 0; i < want->n && i < got->n; i++)
    if (!zt_test_bitwise_equal(want->param[i], got->param[i]))
      zt_test_fail(__FILE__, __LINE__, "%s: parameter %d differs after %d steps", what, i, STEPS);
}

static void free_result(result *r) { zt_test_free_all(r->param, r->n); }

static void test_gpt2_composition(void) {
  result plain, rc, off, both, both_rev;
  train(false, false, false, &plain);
  train(true, false, false, &rc);
  train(false, true, false, &off);
  train(true, true, false, &both);
  train(true, true, true, &both_rev);
  check_same(&plain, &rc, "recompute");
  check_same(&plain, &off, "offload");
  check_same(&plain, &both, "recompute + offload");
  check_same(&plain, &both_rev, "offload + recompute (listed the other way)");
  /* recompute inside offload: only the 2 region inputs per step reach the tier, against
   * everything the blocks save without recompute */
  ZT_CHECK(both.st.tensors_offloaded == both_rev.st.tensors_offloaded);
  ZT_CHECK(both.st.tensors_offloaded == 2 * STEPS);
  ZT_CHECK(off.st.tensors_offloaded > 10 * STEPS);
  free_result(&plain), free_result(&rc), free_result(&off), free_result(&both), free_result(&both_rev);
}

/* DDP and FSDP (full) on one rank, listed after recompute and offload: each attaches first
 * (by order) and training gives plain training's losses and parameters, bitwise. */
static void test_data_parallel_strategy(void) {
  result plain, ddp, fsdp;
  train(false, false, false, &plain);
  zt_data_parallel_options o = {0};
  o.ddp = zt_ddp_options_default();
  o.fsdp_options = zt_fsdp_options_default();
  train_dp(true, true, false, &o, &ddp);
  o.fsdp = true;
  train_dp(true, true, false, &o, &fsdp);
  check_same(&plain, &ddp, "DDP + recompute + offload");
  check_same(&plain, &fsdp, "FSDP full + recompute + offload");
  free_result(&plain), free_result(&ddp), free_result(&fsdp);
}

static void test_failed_attach_leaves_nothing(void) {
  zt_gpt2_config c = {3, 2, 32, 64, T, 0.0};
  zt_gpt2 *g = NULL;
  ZT_CHECK_OK(zt_gpt2_new(&c, &g));
  if (!g) return;
  zt_model model = zt_gpt2_model(g);
  zt_recompute_options ro = zt_recompute_options_default();
  ro.modes = (zt_recompute[]){ZT_RECOMPUTE_FULL, ZT_RECOMPUTE_NONE}, ro.n_modes = 2; /* the model has 3 blocks */
  zt_recompute_plan *rc = NULL;
  zt_offload *off = NULL;
  ZT_CHECK_OK(zt_recompute_plan_new(&ro, &rc));
  ZT_CHECK_OK(zt_offload_new(&(zt_offload_options){ZT_OFFLOAD_HOST, NULL, 0, 0, 0}, &off));
  zt_strategy s[] = {zt_recompute_plan_strategy(rc), zt_offload_strategy(off)};
  ZT_CHECK_ERR(zt_strategies_attach(2, s, &model), ZT_STATUS_INVALID_ARG,
               "attaching the recompute strategy: the recompute plan has 2 per-block modes but the model has 3 blocks");
  ZT_CHECK(zt_model_blocks(&model)->n_wrappers == 0); /* offload (attached first, by order) was detached again */
  ZT_CHECK_OK(zt_strategy_attach(zt_offload_strategy(off), &model));
  ZT_CHECK(zt_model_blocks(&model)->n_wrappers == 1);
  zt_offload_free(off); /* detaches itself */
  ZT_CHECK(zt_model_blocks(&model)->n_wrappers == 0);
  ZT_CHECK_ERR(zt_strategy_attach((zt_strategy){NULL, NULL}, &model), ZT_STATUS_INVALID_ARG, "no calls");
  zt_recompute_plan_free(rc);
  zt_gpt2_free(g);
}

int main(void) {
  ZT_RUN(test_sequence_wrappers);
  ZT_RUN(test_gpt2_composition);
  ZT_RUN(test_data_parallel_strategy);
  ZT_RUN(test_failed_attach_leaves_nothing);
  return zt_test_finish();
}
