/* The activation model and the recompute budget planner over families (zt_lm_predict_*, zt/lm.h)
 * on the Llama family: for a tiny Llama 3 and a tiny Qwen3 (q/k norms, biases, a tied head,
 * head_dim * heads wider than hidden), the predicted peak of ACTIVATION bytes over one forward and
 * backward is within 2% of zerotrain's accounting in modes NONE, FULL (regions of 1 and 3 layers)
 * and SELECTIVE under each built-in policy, as test_gpt2_recompute checks GPT-2's; budget plans
 * stay within their budget and use at least 90% of it; bad budgets are clear errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zt/checkpoint.h"
#include "zt/lm.h"
#include "zt/strategy.h"
#include "zt_test.h"

enum { B = 4, T = 32, MAXL = 16 };

static zt_lm_config cfg_of(bool qwen3, int L) {
  zt_lm_config c = {.family = ZT_LM_LLAMA,
                    .llama = {.model_type = "llama", .vocab_size = 64, .hidden_size = 64, .intermediate_size = 176,
                              .n_layer = L, .n_head = 4, .n_kv_head = 2, .head_dim = 16,
                              .max_position_embeddings = T, .rms_norm_eps = 1e-5, .rope_theta = 10000,
                              .initializer_range = 0.02}};
  if (qwen3) {
    zt_llama_config *q = &c.llama;
    snprintf(q->model_type, sizeof q->model_type, "qwen3");
    q->head_dim = 24, q->qk_norm = true, q->attention_bias = true, q->tie_word_embeddings = true;
  }
  return c;
}

/* Peak ACTIVATION bytes over one forward + backward under a per-block plan and policy (peaks
 * reset before forward, relative to the bytes live before; the rotary tables, which the model
 * keeps, made by an earlier forward), with the model's prediction of it. */
static int64_t peak_plan(const zt_lm_config *c, const zt_recompute *plan, int every, zt_checkpoint_policy_fn pf,
                         int64_t *predicted) {
  zt_rng_seed(11);
  zt_llama *m = NULL;
  ZT_CHECK_OK(zt_llama_new(&c->llama, ZT_DTYPE_F32, &m));
  if (!m) return 0;
  zt_recompute_options o = zt_recompute_options_default();
  o.modes = plan, o.n_modes = c->llama.n_layer, o.every = every;
  if (pf) o.policy = (zt_checkpoint_policy){pf, NULL};
  zt_recompute_plan *p = NULL;
  ZT_CHECK_OK(zt_recompute_plan_new(&o, &p));
  zt_model model = zt_llama_model(m);
  if (p) ZT_CHECK_OK(zt_strategy_attach(zt_recompute_plan_strategy(p), &model));
  *predicted = zt_lm_predict_activation_peak(c, B, T, plan, every, zt_recompute_plan_policy(p));
  int V = c->llama.vocab_size;
  zt_tensor *ids = zt_test_rand_ids(B, T, V, 1), *tg = zt_test_rand_ids(B, T, V, 2), *loss = NULL;
  bool prev = zt_set_grad_enabled(false);
  ZT_CHECK_OK(zt_llama_forward(m, ids, tg, NULL, &loss)); /* builds the rotary tables */
  zt_set_grad_enabled(prev);
  zt_tensor_free(loss);
  loss = NULL;
  zt_mem_stats st;
  zt_mem_stats_get(ZT_CPU, &st);
  int64_t base = st.current[ZT_MEM_TAG_ACTIVATION];
  zt_mem_reset_peaks();
  ZT_CHECK_OK(zt_llama_forward(m, ids, tg, NULL, &loss));
  if (loss) ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
  zt_mem_stats_get(ZT_CPU, &st);
  zt_test_free_all((zt_tensor *[]){loss, ids, tg}, 3);
  zt_recompute_plan_free(p);
  zt_llama_free(m);
  return st.peak[ZT_MEM_TAG_ACTIVATION] - base;
}

static void fill(zt_recompute *p, int L, zt_recompute mode) {
  for (int i = 0; i < L; i++) p[i] = mode;
}

static void model_within_2pct(bool qwen3) {
  enum { L = 6 };
  zt_lm_config c = cfg_of(qwen3, L);
  zt_recompute plan[L];
  const struct {
    zt_recompute mode;
    int every;
    zt_checkpoint_policy_fn policy;
    const char *what;
  } cases[] = {{ZT_RECOMPUTE_NONE, 1, NULL, "none"},
               {ZT_RECOMPUTE_FULL, 1, NULL, "full"},
               {ZT_RECOMPUTE_FULL, 3, NULL, "full, every 3"},
               {ZT_RECOMPUTE_SELECTIVE, 1, NULL, "selective (wide GEMMs)"},
               {ZT_RECOMPUTE_SELECTIVE, 2, NULL, "selective (wide GEMMs), every 2"},
               {ZT_RECOMPUTE_SELECTIVE, 1, zt_checkpoint_policy_save_gemm, "selective (all GEMMs)"},
               {ZT_RECOMPUTE_SELECTIVE, 1, zt_checkpoint_policy_recompute_attention, "selective (attention)"}};
  int64_t none = 0;
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    int64_t pred = 0;
    fill(plan, L, cases[k].mode);
    int64_t got = peak_plan(&c, plan, cases[k].every, cases[k].policy, &pred);
    if (k == 0) none = got;
    printf("  %s, %s: measured %lld predicted %lld\n", qwen3 ? "qwen3" : "llama", cases[k].what, (long long)got,
           (long long)pred);
    if (llabs(got - pred) * 50 > got)
      zt_test_fail(__FILE__, __LINE__, "%s, %s: predicted peak %lld is not within 2%% of the measured %lld",
                   qwen3 ? "qwen3" : "llama", cases[k].what, (long long)pred, (long long)got);
  }
  /* a mixed plan in regions of 2 */
  static const zt_recompute mixed[L] = {ZT_RECOMPUTE_FULL, ZT_RECOMPUTE_SELECTIVE, ZT_RECOMPUTE_SELECTIVE,
                                        ZT_RECOMPUTE_NONE, ZT_RECOMPUTE_FULL, ZT_RECOMPUTE_FULL};
  int64_t pred = 0, got = peak_plan(&c, mixed, 2, NULL, &pred);
  if (llabs(got - pred) * 50 > got)
    zt_test_fail(__FILE__, __LINE__, "mixed plan: predicted %lld, measured %lld", (long long)pred, (long long)got);
  fill(plan, L, ZT_RECOMPUTE_FULL);
  ZT_CHECK(peak_plan(&c, plan, 1, NULL, &pred) * 3 < none); /* full recomputation saves most */
}

static void test_model_llama(void) { model_within_2pct(false); }
static void test_model_qwen3(void) { model_within_2pct(true); }

/* Budgets between full recomputation and none: the plan's measured peak is within the budget and
 * uses at least 90% of it; a budget below full recomputation's is ZT_STATUS_OOM naming it. */
static void test_budget_plans(void) {
  enum { L = 8 };
  zt_lm_config c = cfg_of(false, L);
  zt_recompute plan[L];
  int64_t pred = 0;
  fill(plan, L, ZT_RECOMPUTE_NONE);
  int64_t none = peak_plan(&c, plan, 1, NULL, &pred);
  zt_checkpoint_policy wide = {zt_checkpoint_policy_save_wide_gemm, NULL};
  double fracs[] = {0.3, 0.5, 0.75};
  for (int k = 0; k < 3; k++) {
    int64_t budget = (int64_t)(fracs[k] * (double)none), p2 = 0;
    ZT_CHECK_OK(zt_lm_plan_recompute(&c, B, T, budget, wide, plan, &p2));
    int64_t got = peak_plan(&c, plan, 1, NULL, &pred);
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
  ZT_CHECK_ERR(zt_lm_plan_recompute(&c, B, T, 1000, wide, plan, &pred), ZT_STATUS_OOM,
               "what recomputing every block needs");
  ZT_CHECK_ERR(zt_lm_plan_recompute(&c, 0, T, 1 << 30, wide, plan, &pred), ZT_STATUS_INVALID_ARG, "must be positive");
  ZT_CHECK_OK(zt_lm_plan_recompute(&c, B, T, (int64_t)1 << 40, wide, plan, &pred)); /* ample: nothing recomputed */
  for (int i = 0; i < L; i++) ZT_CHECK(plan[i] == ZT_RECOMPUTE_NONE);
}

/* The work a mode redoes orders the planner: none < selective < full, for every policy; FULL
 * keeps the least. */
static void test_work_order(void) {
  zt_checkpoint_policy_fn fns[] = {zt_checkpoint_policy_save_wide_gemm, zt_checkpoint_policy_save_gemm,
                                   zt_checkpoint_policy_recompute_attention};
  for (int q = 0; q < 2; q++)
    for (int k = 0; k < 3; k++) {
      zt_lm_config c = cfg_of(q, 2);
      zt_checkpoint_policy p = {fns[k], NULL};
      zt_act_cost n = zt_lm_act_cost(&c, ZT_RECOMPUTE_NONE, p), s = zt_lm_act_cost(&c, ZT_RECOMPUTE_SELECTIVE, p),
                  f = zt_lm_act_cost(&c, ZT_RECOMPUTE_FULL, p);
      ZT_CHECK(n.work == 0 && s.work > 0 && s.work < f.work && f.work <= 1);
      ZT_CHECK(f.input + f.kept < s.input + s.kept);
      if (k < 2) ZT_CHECK(s.input + s.kept < n.kept); /* recompute_attention keeps every other op's output */
    }
}

/* zt_lm_* reach the Llama family (its table is listed in lm.c). */
static void test_family_listed(void) {
  zt_lm_config c = cfg_of(false, 3);
  if (zt_lm_config_dims(&c).n_layer != 3)
    zt_test_fail(__FILE__, __LINE__, "zt_lm_config_dims of a Llama config has %d layers, not 3: the Llama family's "
                 "table (llama_family.c) is not listed in lm.c", zt_lm_config_dims(&c).n_layer);
}

int main(void) {
  ZT_RUN(test_family_listed);
  if (zt_test_failed_checks) return zt_test_finish(); /* nothing below can pass */
  ZT_RUN(test_work_order);
  ZT_RUN(test_model_llama);
  ZT_RUN(test_model_qwen3);
  ZT_RUN(test_budget_plans);
  return zt_test_finish();
}
