/* GPT-2 with activation recomputation (zt_gpt2_set_recompute): with dropout on, three
 * AdamW steps give bitwise the same losses, grads, parameters and RNG state with FULL
 * (every 1, 2 and a grouping that does not divide n_layer) as with NONE; eval mode is
 * unchanged; bad settings are clear errors; and the peak ACTIVATION bytes of FULL stay
 * within one block's activations plus the block inputs plus the non-block part. */
#include <stdlib.h>
#include <string.h>

#include "zt/nn.h"
#include "zt/optim.h"
#include "zt_test.h"

enum { B = 4, T = 32, STEPS = 3, MAXP = 256 };

static zt_gpt2_config cfg_of(int L) { return (zt_gpt2_config){L, 4, 64, 64, T, 0.1}; }

static zt_tensor *rand_ids(int V, uint64_t seed) {
  int32_t *v = malloc(sizeof *v * (size_t)(B * T));
  zt_rng_state st = {seed, 0};
  for (int64_t i = 0; i < B * T; i++) v[i] = (int32_t)(zt_rng_uniform_at(st, (uint64_t)i) * V);
  zt_tensor *t = NULL;
  ZT_CHECK_OK(zt_tensor_from_data(2, (int64_t[]){B, T}, ZT_DTYPE_I32, v, &t));
  free(v);
  return t;
}

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

/* STEPS AdamW steps of a 6-layer model with dropout 0.1 on fixed data. */
static void train(zt_recompute mode, int every, result *r) {
  *r = (result){0};
  zt_gpt2_config c = cfg_of(6);
  zt_rng_seed(77);
  zt_gpt2 *m = NULL;
  ZT_CHECK_OK(zt_gpt2_new(&c, &m));
  if (!m) return;
  ZT_CHECK_OK(zt_gpt2_set_recompute(m, mode, every));
  zt_param *ps;
  int np = zt_gpt2_params(m, &ps);
  ZT_CHECK(np <= MAXP);
  zt_optim_config oc = zt_optim_default(ZT_OPTIM_ADAMW);
  zt_optim *o = NULL;
  ZT_CHECK_OK(zt_optim_new(&oc, np, ps, &o));
  zt_tensor *ids = rand_ids(c.vocab_size, 5), *tg = rand_ids(c.vocab_size, 6);
  for (int s = 0; s < STEPS; s++) {
    zt_tensor *loss = NULL;
    ZT_CHECK_OK(zt_gpt2_forward(m, ids, tg, NULL, &loss));
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
  zt_tensor_free(ids);
  zt_tensor_free(tg);
  zt_optim_free(o);
  zt_gpt2_free(m);
}

static void test_bitwise_equal_to_none(void) {
  result none;
  train(ZT_RECOMPUTE_NONE, 1, &none);
  ZT_CHECK(none.n > 6 * 12);
  ZT_CHECK(none.rng.offset > 0); /* dropout drew masks */
  int everies[] = {1, 2, 4};     /* 4: groups of 4 and 2 */
  for (int e = 0; e < 3; e++) {
    result full;
    train(ZT_RECOMPUTE_FULL, everies[e], &full);
    ZT_CHECK(full.n == none.n);
    for (int s = 0; s < STEPS; s++)
      if (!(full.loss[s] && none.loss[s] && zt_test_bitwise_equal(full.loss[s], none.loss[s])))
        zt_test_fail(__FILE__, __LINE__, "every %d: loss of step %d differs", everies[e], s + 1);
    for (int i = 0; i < full.n && i < none.n; i++) {
      if (!(full.grad[i] && none.grad[i] && zt_test_bitwise_equal(full.grad[i], none.grad[i])))
        zt_test_fail(__FILE__, __LINE__, "every %d: grad of parameter %d differs", everies[e], i);
      if (!(full.param[i] && none.param[i] && zt_test_bitwise_equal(full.param[i], none.param[i])))
        zt_test_fail(__FILE__, __LINE__, "every %d: parameter %d differs after %d steps", everies[e], i, STEPS);
    }
    ZT_CHECK(full.rng.seed == none.rng.seed && full.rng.offset == none.rng.offset);
    result_free(&full);
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
  zt_tensor *ids = rand_ids(c.vocab_size, 1), *tg = rand_ids(c.vocab_size, 2), *a = NULL, *b = NULL;
  bool prev = zt_set_grad_enabled(false);
  ZT_CHECK_OK(zt_gpt2_forward(m, ids, tg, NULL, &a));
  ZT_CHECK_OK(zt_gpt2_set_recompute(m, ZT_RECOMPUTE_FULL, 2));
  ZT_CHECK_OK(zt_gpt2_forward(m, ids, tg, NULL, &b));
  zt_set_grad_enabled(prev);
  ZT_CHECK(a && b && zt_test_bitwise_equal(a, b));
  zt_test_free_all((zt_tensor *[]){a, b, ids, tg}, 4);
  zt_gpt2_free(m);
}

static void test_settings_and_errors(void) {
  zt_gpt2_config c = cfg_of(3);
  zt_gpt2 *m = NULL;
  ZT_CHECK_OK(zt_gpt2_new(&c, &m));
  if (!m) return;
  int every = 0;
  ZT_CHECK(zt_gpt2_get_recompute(m, &every) == ZT_RECOMPUTE_NONE && every == 1);
  ZT_CHECK_ERR(zt_gpt2_set_recompute(m, ZT_RECOMPUTE_FULL, 0), ZT_STATUS_INVALID_ARG, "it must be >= 1");
  ZT_CHECK_ERR(zt_gpt2_set_recompute(m, (zt_recompute)7, 1), ZT_STATUS_INVALID_ARG, "mode 7 is not a zt_recompute");
  ZT_CHECK_ERR(zt_gpt2_set_recompute(NULL, ZT_RECOMPUTE_FULL, 1), ZT_STATUS_INVALID_ARG, "model is NULL");
  ZT_CHECK(zt_gpt2_get_recompute(m, &every) == ZT_RECOMPUTE_NONE && every == 1); /* failed calls changed nothing */
  ZT_CHECK_OK(zt_gpt2_set_recompute(m, ZT_RECOMPUTE_FULL, 10));                  /* one region of all 3 blocks */
  ZT_CHECK(zt_gpt2_get_recompute(m, &every) == ZT_RECOMPUTE_FULL && every == 3);
  ZT_CHECK(!strcmp(zt_recompute_name(ZT_RECOMPUTE_FULL), "full"));
  ZT_CHECK(!strcmp(zt_recompute_name(ZT_RECOMPUTE_NONE), "none"));
  zt_gpt2_free(m);
}

/* Peak ACTIVATION bytes over one forward + backward (peaks reset before forward, read
 * after backward), relative to the ACTIVATION bytes live before. */
static int64_t peak_activation(int L, zt_recompute mode, int every) {
  zt_gpt2_config c = cfg_of(L);
  zt_rng_seed(11);
  zt_gpt2 *m = NULL;
  ZT_CHECK_OK(zt_gpt2_new(&c, &m));
  if (!m) return 0;
  ZT_CHECK_OK(zt_gpt2_set_recompute(m, mode, every));
  zt_tensor *ids = rand_ids(c.vocab_size, 1), *tg = rand_ids(c.vocab_size, 2), *loss = NULL;
  zt_mem_stats st;
  zt_mem_stats_get(ZT_CPU, &st);
  int64_t base = st.current[ZT_MEM_TAG_ACTIVATION];
  zt_mem_reset_peaks();
  ZT_CHECK_OK(zt_gpt2_forward(m, ids, tg, NULL, &loss));
  if (loss) ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
  zt_mem_stats_get(ZT_CPU, &st);
  zt_test_free_all((zt_tensor *[]){loss, ids, tg}, 3);
  zt_gpt2_free(m);
  return st.peak[ZT_MEM_TAG_ACTIVATION] - base;
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

int main(void) {
  ZT_RUN(test_settings_and_errors);
  ZT_RUN(test_eval_mode);
  ZT_RUN(test_bitwise_equal_to_none);
  ZT_RUN(test_memory_peak_activation);
  return zt_test_finish();
}
