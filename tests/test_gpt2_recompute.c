/* GPT-2 with activation recomputation (a recompute plan attached as a strategy,
 * zt/strategy.h): with dropout on, three
 * AdamW steps give bitwise the same losses, grads, parameters and RNG state with FULL
 * (every 1, 2 and a grouping that does not divide n_layer) as with NONE; eval mode is
 * unchanged; bad settings are clear errors; and the peak ACTIVATION bytes of FULL stay
 * within one block's activations plus the block inputs plus the non-block part. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zt/checkpoint.h"
#include "zt/nn.h"
#include "zt/strategy.h"
#include "zt/optim.h"
#include "zt_test.h"

enum { B = 4, T = 32, STEPS = 3, MAXP = 256 };

static zt_gpt2_config cfg_of(int L) { return (zt_gpt2_config){L, 4, 64, 64, T, 0.1}; }

static zt_tensor *clone(const zt_tensor *t) {
  zt_tensor *c = NULL;
  if (t) ZT_CHECK_OK(zt_tensor_clone_data(t, ZT_MEM_TAG_TEMP, &c));
  return c;
}

typedef struct result {
  zt_tensor *loss[STEPS];
  zt_tensor *grad[MAXP], *param[MAXP]; /* grads of the last step (before its update), final params */
  int n;
  zt_rng_state rng;
} result;

static void result_free(result *r) {
  zt_test_free_all(r->loss, STEPS);
  zt_test_free_all(r->grad, r->n);
  zt_test_free_all(r->param, r->n);
}

/* How a run recomputes: a mode for all blocks (or a per-block plan), the selective
 * policy, early stop off, and an outer checkpoint around the whole forward (nesting). */
typedef struct run_cfg {
  zt_recompute mode;
  int every;
  zt_checkpoint_policy_fn policy;
  const zt_recompute *plan; /* n_layer entries, overrides mode */
  bool early_stop_off, nested;
} run_cfg;

typedef struct outer_ctx {
  zt_gpt2 *m;
  zt_tensor *ids, *tg;
} outer_ctx;

/* The whole forward as one checkpoint region: the model's own regions nest inside it. */
static zt_status outer_region(zt_tensor *const *in, int n_in, zt_tensor **out, int n_out, void *ud) {
  (void)in, (void)n_in, (void)n_out;
  outer_ctx *o = ud;
  return zt_gpt2_forward(o->m, o->ids, o->tg, NULL, out);
}

/* A recompute plan attached to m: a mode per block (plan, n entries) or mode for all. */
static zt_recompute_plan *attach(zt_gpt2 *m, zt_recompute mode, const zt_recompute *plan, int n, int every,
                                 zt_checkpoint_policy_fn policy) {
  zt_recompute_options o = zt_recompute_options_default();
  o.mode = mode, o.modes = plan, o.n_modes = plan ? n : 0, o.every = every;
  if (policy) o.policy = (zt_checkpoint_policy){policy, NULL};
  zt_recompute_plan *p = NULL;
  ZT_CHECK_OK(zt_recompute_plan_new(&o, &p));
  zt_model model = zt_gpt2_model(m);
  if (p) ZT_CHECK_OK(zt_strategy_attach(zt_recompute_plan_strategy(p), &model));
  return p;
}

/* STEPS AdamW steps of a 6-layer model with dropout 0.1 on fixed data. */
static void train_with(const run_cfg *rc, result *r) {
  *r = (result){0};
  zt_gpt2_config c = cfg_of(6);
  zt_rng_seed(77);
  zt_gpt2 *m = NULL;
  ZT_CHECK_OK(zt_gpt2_new(&c, &m));
  if (!m) return;
  zt_recompute_plan *p = attach(m, rc->mode, rc->plan, c.n_layer, rc->every, rc->policy);
  bool es_was = zt_checkpoint_set_early_stop(!rc->early_stop_off);
  zt_param *ps;
  int np = zt_gpt2_params(m, &ps);
  ZT_CHECK(np <= MAXP);
  zt_optim_config oc = zt_optim_default(ZT_OPTIM_ADAMW);
  zt_optim *o = NULL;
  ZT_CHECK_OK(zt_optim_new(&oc, np, ps, &o));
  zt_tensor *ids = zt_test_rand_ids(B, T, c.vocab_size, 5), *tg = zt_test_rand_ids(B, T, c.vocab_size, 6);
  outer_ctx outer = {m, ids, tg}; /* the outer region's user_data: lives until its backward */
  for (int s = 0; s < STEPS; s++) {
    zt_tensor *loss = NULL;
    if (rc->nested) {
      zt_tensor *dummy = NULL; /* the region needs no tensor input: parameters are reached inside */
      ZT_CHECK_OK(zt_checkpoint(outer_region, &outer, 1, &dummy, 1, &loss, NULL));
    } else {
      ZT_CHECK_OK(zt_gpt2_forward(m, ids, tg, NULL, &loss));
    }
    if (!loss) break;
    ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
    r->loss[s] = loss;
    if (s == STEPS - 1)
      for (int i = 0; i < np; i++) r->grad[i] = clone(ps[i].tensor->grad);
    ZT_CHECK_OK(zt_optim_step(o, 1e-3));
    zt_optim_zero_grad(o);
  }
  for (int i = 0; i < np; i++) r->param[i] = clone(ps[i].tensor);
  r->n = np;
  r->rng = zt_rng_get_state();
  zt_checkpoint_set_early_stop(es_was);
  zt_tensor_free(ids);
  zt_tensor_free(tg);
  zt_optim_free(o);
  zt_recompute_plan_free(p);
  zt_gpt2_free(m);
}

static void train(zt_recompute mode, int every, result *r) { train_with(&(run_cfg){mode, every, NULL, NULL, false, false}, r); }

/* Losses, last grads, final params and RNG state of got are bitwise those of want. */
static void check_same(const result *want, const result *got, const char *what) {
  ZT_CHECK(got->n == want->n);
  for (int s = 0; s < STEPS; s++)
    if (!(got->loss[s] && want->loss[s] && zt_test_bitwise_equal(got->loss[s], want->loss[s])))
      zt_test_fail(__FILE__, __LINE__, "%s: loss of step %d differs", what, s + 1);
  for (int i = 0; i < got->n && i < want->n; i++) {
    if (!(got->grad[i] && want->grad[i] && zt_test_bitwise_equal(got->grad[i], want->grad[i])))
      zt_test_fail(__FILE__, __LINE__, "%s: grad of parameter %d differs", what, i);
    if (!(got->param[i] && want->param[i] && zt_test_bitwise_equal(got->param[i], want->param[i])))
      zt_test_fail(__FILE__, __LINE__, "%s: parameter %d differs after %d steps", what, i, STEPS);
  }
  if (!(got->rng.seed == want->rng.seed && got->rng.offset == want->rng.offset))
    zt_test_fail(__FILE__, __LINE__, "%s: the RNG state after training differs", what);
}

static void test_bitwise_equal_to_none(void) {
  result none;
  train(ZT_RECOMPUTE_NONE, 1, &none);
  ZT_CHECK(none.n > 6 * 12);
  ZT_CHECK(none.rng.offset > 0); /* dropout drew masks */
  int everies[] = {1, 2, 4};     /* 4: groups of 4 and 2 */
  for (int e = 0; e < 3; e++) {
    result full;
    char what[64];
    snprintf(what, sizeof what, "full, every %d", everies[e]);
    train(ZT_RECOMPUTE_FULL, everies[e], &full);
    check_same(&none, &full, what);
    result_free(&full);
  }
  result_free(&none);
}

/* Selective regions under each built-in policy, a mixed per-block plan, nesting (an outer
 * checkpoint around the whole forward, the model's regions inside it), early stop off:
 * all bitwise equal to no recomputation. */
static void test_selective_nested_early_stop_bitwise(void) {
  result none;
  train(ZT_RECOMPUTE_NONE, 1, &none);
  static const zt_recompute plan[6] = {ZT_RECOMPUTE_FULL, ZT_RECOMPUTE_SELECTIVE, ZT_RECOMPUTE_SELECTIVE,
                                       ZT_RECOMPUTE_NONE, ZT_RECOMPUTE_FULL, ZT_RECOMPUTE_FULL};
  const struct {
    const char *what;
    run_cfg rc;
  } cases[] = {
      {"selective (wide GEMMs)", {ZT_RECOMPUTE_SELECTIVE, 1, NULL, NULL, false, false}},
      {"selective (all GEMMs), every 2", {ZT_RECOMPUTE_SELECTIVE, 2, zt_checkpoint_policy_save_gemm, NULL, false, false}},
      {"selective (attention only)", {ZT_RECOMPUTE_SELECTIVE, 1, zt_checkpoint_policy_recompute_attention, NULL, false, false}},
      {"selective (save nothing)", {ZT_RECOMPUTE_SELECTIVE, 3, zt_checkpoint_policy_save_nothing, NULL, false, false}},
      {"selective, early stop off", {ZT_RECOMPUTE_SELECTIVE, 1, NULL, NULL, true, false}},
      {"full, early stop off", {ZT_RECOMPUTE_FULL, 1, NULL, NULL, true, false}},
      {"per-block plan, every 2", {ZT_RECOMPUTE_NONE, 2, NULL, plan, false, false}},
      {"nested: whole forward around full regions", {ZT_RECOMPUTE_FULL, 2, NULL, NULL, false, true}},
      {"nested: whole forward around selective regions", {ZT_RECOMPUTE_SELECTIVE, 1, NULL, NULL, false, true}},
      {"nested, early stop off", {ZT_RECOMPUTE_SELECTIVE, 1, NULL, NULL, true, true}},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    result got;
    train_with(&cases[k].rc, &got);
    check_same(&none, &got, cases[k].what);
    result_free(&got);
  }
  result_free(&none);
}

/* Eval (grad off) under FULL: the regions just run; the loss is that of NONE. */
static void test_eval_mode(void) {
  zt_gpt2_config c = cfg_of(3);
  zt_rng_seed(3);
  zt_gpt2 *m = NULL;
  ZT_CHECK_OK(zt_gpt2_new(&c, &m));
  if (!m) return;
  zt_gpt2_set_training(m, false);
  zt_tensor *ids = zt_test_rand_ids(B, T, c.vocab_size, 1), *tg = zt_test_rand_ids(B, T, c.vocab_size, 2), *a = NULL, *b = NULL;
  bool prev = zt_set_grad_enabled(false);
  ZT_CHECK_OK(zt_gpt2_forward(m, ids, tg, NULL, &a));
  zt_recompute_plan *p = attach(m, ZT_RECOMPUTE_FULL, NULL, 0, 2, NULL);
  ZT_CHECK_OK(zt_gpt2_forward(m, ids, tg, NULL, &b));
  zt_set_grad_enabled(prev);
  ZT_CHECK(a && b && zt_test_bitwise_equal(a, b));
  zt_test_free_all((zt_tensor *[]){a, b, ids, tg}, 4);
  zt_recompute_plan_free(p);
  zt_gpt2_free(m);
}

static void test_settings_and_errors(void) {
  zt_gpt2_config c = cfg_of(3);
  zt_gpt2 *m = NULL;
  ZT_CHECK_OK(zt_gpt2_new(&c, &m));
  if (!m) return;
  zt_model model = zt_gpt2_model(m);
  zt_recompute_options o = zt_recompute_options_default();
  zt_recompute_plan *p = NULL;
  ZT_CHECK_OK(zt_recompute_plan_new(&o, &p));
  if (!p) return;
  int every = 0;
  ZT_CHECK(zt_recompute_plan_mode(p, &every) == ZT_RECOMPUTE_NONE && every == 1);
  o.mode = ZT_RECOMPUTE_FULL, o.every = 0;
  ZT_CHECK_ERR(zt_recompute_plan_set(p, &o), ZT_STATUS_INVALID_ARG, "every is 0: blocks per region must be >= 1");
  o.mode = (zt_recompute)7, o.every = 1;
  ZT_CHECK_ERR(zt_recompute_plan_set(p, &o), ZT_STATUS_INVALID_ARG, "mode is 7, not none, full or selective");
  o.mode = ZT_RECOMPUTE_PLAN;
  ZT_CHECK_ERR(zt_recompute_plan_set(p, &o), ZT_STATUS_INVALID_ARG, "zt_recompute_options.modes");
  o.modes = (zt_recompute[]){ZT_RECOMPUTE_NONE, ZT_RECOMPUTE_PLAN, ZT_RECOMPUTE_FULL}, o.n_modes = 3;
  ZT_CHECK_ERR(zt_recompute_plan_set(p, &o), ZT_STATUS_INVALID_ARG, "block 1 has mode 3");
  ZT_CHECK_ERR(zt_recompute_plan_set(NULL, &o), ZT_STATUS_INVALID_ARG, "plan is NULL");
  ZT_CHECK(zt_recompute_plan_mode(p, &every) == ZT_RECOMPUTE_NONE && every == 1); /* failed calls changed nothing */
  /* a per-block plan of another length than the model's blocks: refused at attach, and
   * once attached, by set */
  o.modes = (zt_recompute[]){ZT_RECOMPUTE_FULL, ZT_RECOMPUTE_FULL}, o.n_modes = 2;
  ZT_CHECK_OK(zt_recompute_plan_set(p, &o));
  ZT_CHECK_ERR(zt_strategy_attach(zt_recompute_plan_strategy(p), &model), ZT_STATUS_INVALID_ARG,
               "2 per-block modes but the model has 3 blocks");
  o = zt_recompute_options_default();
  o.mode = ZT_RECOMPUTE_FULL, o.every = 10;
  ZT_CHECK_OK(zt_recompute_plan_set(p, &o));
  ZT_CHECK_OK(zt_strategy_attach(zt_recompute_plan_strategy(p), &model));
  ZT_CHECK_ERR(zt_strategy_attach(zt_recompute_plan_strategy(p), &model), ZT_STATUS_STATE, "attached to a model already");
  ZT_CHECK(zt_recompute_plan_mode(p, &every) == ZT_RECOMPUTE_FULL && every == 3); /* one region of all 3 blocks */
  o.modes = (zt_recompute[]){ZT_RECOMPUTE_FULL}, o.n_modes = 1;
  ZT_CHECK_ERR(zt_recompute_plan_set(p, &o), ZT_STATUS_INVALID_ARG, "1 per-block modes but the model has 3 blocks");
  ZT_CHECK(zt_recompute_plan_mode(p, &every) == ZT_RECOMPUTE_FULL && every == 3);
  ZT_CHECK(!strcmp(zt_recompute_name(ZT_RECOMPUTE_FULL), "full"));
  ZT_CHECK(!strcmp(zt_recompute_name(ZT_RECOMPUTE_NONE), "none"));
  ZT_CHECK(!strcmp(zt_recompute_name(ZT_RECOMPUTE_SELECTIVE), "selective"));
  zt_recompute mixed[3] = {ZT_RECOMPUTE_SELECTIVE, ZT_RECOMPUTE_NONE, ZT_RECOMPUTE_FULL}, back[3];
  o = zt_recompute_options_default();
  o.modes = mixed, o.n_modes = 3;
  ZT_CHECK_OK(zt_recompute_plan_set(p, &o));
  ZT_CHECK(zt_recompute_plan_mode(p, NULL) == ZT_RECOMPUTE_PLAN);
  zt_recompute_plan_modes(p, 3, back);
  ZT_CHECK(!memcmp(mixed, back, sizeof mixed));
  ZT_CHECK(zt_recompute_plan_policy(p).fn == zt_checkpoint_policy_save_wide_gemm); /* the default */
  o.policy = (zt_checkpoint_policy){zt_checkpoint_policy_save_gemm, NULL};
  ZT_CHECK_OK(zt_recompute_plan_set(p, &o));
  ZT_CHECK(zt_recompute_plan_policy(p).fn == zt_checkpoint_policy_save_gemm);
  /* detached: the model runs its blocks plainly again */
  zt_strategy_detach(zt_recompute_plan_strategy(p));
  ZT_CHECK(zt_model_blocks(&model)->n_wrappers == 0);
  zt_recompute pm[3];
  int64_t pred = 0;
  zt_checkpoint_policy wide = {zt_checkpoint_policy_save_wide_gemm, NULL};
  ZT_CHECK_ERR(zt_gpt2_plan_recompute(m, 4, T, 1000, wide, pm, &pred), ZT_STATUS_OOM, "what recomputing every block needs");
  ZT_CHECK_ERR(zt_gpt2_plan_recompute(m, 0, T, 1 << 30, wide, pm, &pred), ZT_STATUS_INVALID_ARG, "must be positive");
  ZT_CHECK_OK(zt_gpt2_plan_recompute(m, 4, T, (int64_t)1 << 40, wide, pm, &pred)); /* ample: nothing recomputed */
  for (int i = 0; i < 3; i++) ZT_CHECK(pm[i] == ZT_RECOMPUTE_NONE);
  zt_recompute_plan_free(p);
  zt_gpt2_free(m);
}

/* Peak ACTIVATION bytes over one forward + backward (peaks reset before forward, read
 * after backward, relative to the ACTIVATION bytes live before) under a per-block plan and
 * policy, with the model's prediction of it. */
static int64_t peak_plan(int L, const zt_recompute *plan, int every, zt_checkpoint_policy_fn policy, int64_t *predicted) {
  zt_gpt2_config c = cfg_of(L);
  zt_rng_seed(11);
  zt_gpt2 *m = NULL;
  ZT_CHECK_OK(zt_gpt2_new(&c, &m));
  if (!m) return 0;
  zt_recompute_plan *p = attach(m, ZT_RECOMPUTE_NONE, plan, L, every, policy);
  *predicted = zt_gpt2_predict_activation_peak(m, B, T, plan, every, zt_recompute_plan_policy(p));
  zt_tensor *ids = zt_test_rand_ids(B, T, c.vocab_size, 1), *tg = zt_test_rand_ids(B, T, c.vocab_size, 2), *loss = NULL;
  zt_mem_stats st;
  zt_mem_stats_get(ZT_CPU, &st);
  int64_t base = st.current[ZT_MEM_TAG_ACTIVATION];
  zt_mem_reset_peaks();
  ZT_CHECK_OK(zt_gpt2_forward(m, ids, tg, NULL, &loss));
  if (loss) ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
  zt_mem_stats_get(ZT_CPU, &st);
  zt_test_free_all((zt_tensor *[]){loss, ids, tg}, 3);
  zt_recompute_plan_free(p);
  zt_gpt2_free(m);
  return st.peak[ZT_MEM_TAG_ACTIVATION] - base;
}

static void fill(zt_recompute *p, int L, zt_recompute mode) {
  for (int i = 0; i < L; i++) p[i] = mode;
}

static int64_t peak_activation(int L, zt_recompute mode, int every) {
  zt_recompute plan[16];
  int64_t predicted;
  ZT_CHECK(L <= 16);
  fill(plan, L, mode);
  return peak_plan(L, plan, every, NULL, &predicted);
}

static void test_memory_peak_activation(void) {
  enum { L = 8 };
  // one block's activations and the non-block part (embeddings, ln_f, output layer),
  // measured without recomputation from two depths
  int64_t none_half = peak_activation(L / 2, ZT_RECOMPUTE_NONE, 1), none = peak_activation(L, ZT_RECOMPUTE_NONE, 1);
  int64_t per_block = (none - none_half) / (L / 2), rest = none_half - (L / 2) * per_block;
  int64_t block_input = (int64_t)B * T * cfg_of(L).n_embd * 4;
  int64_t full1 = peak_activation(L, ZT_RECOMPUTE_FULL, 1), full2 = peak_activation(L, ZT_RECOMPUTE_FULL, 2);
  printf("  peak ACTIVATION bytes, %d layers: none %lld, full every 1 %lld, every 2 %lld (one block %lld, "
         "block input %lld, non-block part %lld)\n",
         L, (long long)none, (long long)full1, (long long)full2, (long long)per_block, (long long)block_input,
         (long long)rest);
  ZT_CHECK(per_block > 4 * block_input); /* a block keeps many tensors of its input's size */
  ZT_CHECK(full1 <= rest + per_block + L * block_input);
  ZT_CHECK(full2 <= rest + 2 * per_block + L / 2 * block_input);
  ZT_CHECK(full1 * 10 < none * 6);
  ZT_CHECK(full1 <= full2);
}


/* The activation model predicts the measured peak within 2% for every mode and policy;
 * selective keeps a bit over half of none; budget plans stay within their budget and use
 * at least 90% of it. */
static void test_memory_model_and_budget(void) {
  enum { L = 8 };
  zt_recompute plan[L];
  int64_t pred = 0, none, got;
  fill(plan, L, ZT_RECOMPUTE_NONE);
  none = peak_plan(L, plan, 1, NULL, &pred);
  ZT_CHECK(llabs(none - pred) * 50 <= none);
  const struct {
    zt_recompute mode;
    int every;
    zt_checkpoint_policy_fn policy;
  } cases[] = {{ZT_RECOMPUTE_FULL, 1, NULL},
               {ZT_RECOMPUTE_FULL, 3, NULL},
               {ZT_RECOMPUTE_SELECTIVE, 1, NULL},
               {ZT_RECOMPUTE_SELECTIVE, 2, NULL},
               {ZT_RECOMPUTE_SELECTIVE, 1, zt_checkpoint_policy_save_gemm},
               {ZT_RECOMPUTE_SELECTIVE, 1, zt_checkpoint_policy_recompute_attention}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    fill(plan, L, cases[k].mode);
    got = peak_plan(L, plan, cases[k].every, cases[k].policy, &pred);
    printf("  %s every %d policy %zu: measured %lld predicted %lld (none %lld)\n", zt_recompute_name(cases[k].mode),
           cases[k].every, k, (long long)got, (long long)pred, (long long)none);
    if (llabs(got - pred) * 50 > got)
      zt_test_fail(__FILE__, __LINE__, "case %zu: predicted peak %lld is not within 2%% of the measured %lld", k,
                   (long long)pred, (long long)got);
    if (k == 2) ZT_CHECK(got * 10 < none * 6); /* selective (wide GEMMs): 8C of 16C per block kept */
  }
  /* budgets between full recomputation and none */
  zt_gpt2_config c = cfg_of(L);
  zt_gpt2 *m = NULL;
  ZT_CHECK_OK(zt_gpt2_new(&c, &m));
  if (!m) return;
  double fracs[] = {0.3, 0.5, 0.75};
  for (int k = 0; k < 3; k++) {
    int64_t budget = (int64_t)(fracs[k] * (double)none), p2 = 0;
    ZT_CHECK_OK(zt_gpt2_plan_recompute(m, B, T, budget, (zt_checkpoint_policy){zt_checkpoint_policy_save_wide_gemm, NULL},
                                       plan, &p2));
    got = peak_plan(L, plan, 1, NULL, &pred);
    char modes[L + 1];
    for (int i = 0; i < L; i++) modes[i] = "nfsp"[plan[i]];
    modes[L] = 0;
    printf("  budget %.2f x none = %lld: plan %s, predicted %lld, measured %lld\n", fracs[k], (long long)budget, modes,
           (long long)p2, (long long)got);
    ZT_CHECK(p2 == pred && p2 <= budget);
    if (got > budget + budget / 100)
      zt_test_fail(__FILE__, __LINE__, "budget %lld: measured peak %lld is over it", (long long)budget, (long long)got);
    if (got * 10 < budget * 9)
      zt_test_fail(__FILE__, __LINE__, "budget %lld: measured peak %lld uses under 90%% of it", (long long)budget,
                   (long long)got);
  }
  zt_gpt2_free(m);
}

int main(void) {
  ZT_RUN(test_settings_and_errors);
  ZT_RUN(test_eval_mode);
  ZT_RUN(test_bitwise_equal_to_none);
  ZT_RUN(test_memory_peak_activation);
  ZT_RUN(test_selective_nested_early_stop_bitwise);
  ZT_RUN(test_memory_model_and_budget);
  return zt_test_finish();
}
