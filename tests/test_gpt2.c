/* GPT-2: presets and parameter counts (gpt2-124m built: 124,439,808), config and input
 * validation, HF names/order/shapes/decay of a tiny model, GPT-2 init statistics, loss
 * ln(V) at init, finite grads everywhere, finite differences in f64, 20 hand-written SGD
 * steps lowering the loss, dropout train vs eval, the logits path against the fused loss,
 * and the loss path's memory staying far below B*T*V floats. */
#include <stdlib.h>

#include "core/tensor_internal.h"
#include "zt/nn.h"
#include "zt_test.h"

static const zt_gpt2_config tiny_cfg = {2, 2, 16, 32, 8, 0.0};

static double loss_of(zt_gpt2 *m, zt_tensor *ids, zt_tensor *tg) {
  zt_tensor *loss = NULL;
  zt_status s = zt_gpt2_forward(m, ids, tg, NULL, &loss);
  if (s) {
    zt_test_fail(__FILE__, __LINE__, "forward failed: %s", zt_last_error());
    return NAN;
  }
  double v = zt_tensor_get(loss, 0);
  zt_tensor_free(loss);
  return v;
}

static void free_grads(zt_gpt2 *m) {
  zt_param *ps;
  int n = zt_gpt2_params(m, &ps);
  for (int i = 0; i < n; i++) {
    zt_tensor_free(ps[i].tensor->grad);
    ps[i].tensor->grad = NULL;
  }
}

static void test_presets(void) {
  const char *names[] = {"gpt2-tiny", "gpt2-124m", "gpt2-350m", "gpt2-774m", "gpt2-1558m"};
  int64_t counts[] = {858880, 124439808, 354823168, 774030080, 1557611200};
  int layers[] = {4, 12, 24, 36, 48}, heads[] = {4, 12, 16, 20, 25}, dims[] = {128, 768, 1024, 1280, 1600};
  for (int i = 0; i < 5; i++) {
    zt_gpt2_config c;
    ZT_CHECK_OK(zt_gpt2_preset(names[i], &c));
    ZT_CHECK(c.n_layer == layers[i] && c.n_head == heads[i] && c.n_embd == dims[i]);
    ZT_CHECK(c.vocab_size == (i ? 50257 : 256) && c.block_size == (i ? 1024 : 256));
    ZT_CHECK_OK(zt_gpt2_config_validate(&c));
    ZT_CHECK(zt_gpt2_config_num_params(&c) == counts[i]);
  }
  zt_gpt2_config c;
  ZT_CHECK_ERR(zt_gpt2_preset("gpt2-xxl", &c), ZT_STATUS_INVALID_ARG, "presets are gpt2-tiny, gpt2-124m");
}

/* The real thing, once: count and names of gpt2-124m. */
static void test_gpt2_124m_params(void) {
  zt_gpt2_config c;
  zt_gpt2 *m = NULL;
  ZT_CHECK_OK(zt_gpt2_preset("gpt2-124m", &c));
  ZT_CHECK_OK(zt_gpt2_new(&c, &m));
  if (!m) return;
  ZT_CHECK(zt_gpt2_num_params(m) == 124439808);
  zt_param *ps;
  int n = zt_gpt2_params(m, &ps);
  ZT_CHECK(n == 2 + 12 * 12 + 2);
  ZT_CHECK(!strcmp(ps[0].name, "transformer.wte.weight") && !strcmp(ps[n - 1].name, "transformer.ln_f.bias"));
  ZT_CHECK(!strcmp(ps[2 + 11 * 12 + 10].name, "transformer.h.11.mlp.c_proj.weight"));
  /* 6 N B T + 12 L T d B T */
  double f = zt_gpt2_flops_per_step(m, 4, 256);
  ZT_CHECK_NEAR(f, 6.0 * 124439808.0 * 1024 + 12.0 * 12 * 256 * 768 * 1024, 1.0);
  zt_gpt2_free(m);
}

static void test_config_errors(void) {
  zt_gpt2 *m = NULL;
  zt_gpt2_config c = tiny_cfg;
  c.n_embd = 15;
  ZT_CHECK_ERR(zt_gpt2_new(&c, &m), ZT_STATUS_INVALID_ARG, "n_embd = 15 is not divisible by n_head = 2");
  c = tiny_cfg;
  c.n_layer = 0;
  ZT_CHECK_ERR(zt_gpt2_config_validate(&c), ZT_STATUS_INVALID_ARG, "n_layer is 0");
  c = tiny_cfg;
  c.vocab_size = 0;
  ZT_CHECK_ERR(zt_gpt2_config_validate(&c), ZT_STATUS_INVALID_ARG, "vocab_size is 0");
  c = tiny_cfg;
  c.block_size = -1;
  ZT_CHECK_ERR(zt_gpt2_config_validate(&c), ZT_STATUS_INVALID_ARG, "block_size (context length) is -1");
  c = tiny_cfg;
  c.dropout = 1.0;
  ZT_CHECK_ERR(zt_gpt2_config_validate(&c), ZT_STATUS_INVALID_ARG, "dropout is 1");
  c = tiny_cfg;
  c.n_head = 0;
  ZT_CHECK_ERR(zt_gpt2_config_validate(&c), ZT_STATUS_INVALID_ARG, "n_head is 0");
  ZT_CHECK_ERR(zt_gpt2_new_dtype(&tiny_cfg, ZT_DTYPE_BF16, &m), ZT_STATUS_DTYPE, "not supported");
  ZT_CHECK(m == NULL);
}

static void test_tiny_names_shapes_decay(void) {
  zt_gpt2 *m = NULL;
  zt_rng_seed(1);
  ZT_CHECK_OK(zt_gpt2_new(&tiny_cfg, &m));
  if (!m) return;
  zt_param *ps;
  int n = zt_gpt2_params(m, &ps);
  ZT_CHECK(n == 2 + 2 * 12 + 2);
  ZT_CHECK(zt_gpt2_num_params(m) == zt_gpt2_config_num_params(&tiny_cfg));
  ZT_CHECK(zt_gpt2_num_params(m) == 7232);
  const char *suffix[] = {"ln_1.weight",  "ln_1.bias",  "attn.c_attn.weight", "attn.c_attn.bias",
                          "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                          "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
  int64_t C = 16, sh[12][2] = {{C, 0}, {C, 0}, {C, 3 * C}, {3 * C, 0}, {C, C}, {C, 0},
                               {C, 0}, {C, 0}, {C, 4 * C}, {4 * C, 0}, {4 * C, C}, {C, 0}};
  char want[96];
  ZT_CHECK(!strcmp(ps[0].name, "transformer.wte.weight") && ps[0].decay && ps[0].tensor->shape[0] == 32 &&
           ps[0].tensor->shape[1] == C);
  ZT_CHECK(!strcmp(ps[1].name, "transformer.wpe.weight") && ps[1].decay && ps[1].tensor->shape[0] == 8);
  for (int l = 0; l < 2; l++)
    for (int k = 0; k < 12; k++) {
      zt_param *p = &ps[2 + l * 12 + k];
      snprintf(want, sizeof want, "transformer.h.%d.%s", l, suffix[k]);
      if (strcmp(p->name, want)) zt_test_fail(__FILE__, __LINE__, "param is %s, expected %s", p->name, want);
      bool two_d = sh[k][1] != 0;
      ZT_CHECK(p->decay == two_d);
      ZT_CHECK(p->tensor->ndim == (two_d ? 2 : 1) && p->tensor->shape[0] == sh[k][0] &&
               (!two_d || p->tensor->shape[1] == sh[k][1]));
    }
  ZT_CHECK(!strcmp(ps[n - 2].name, "transformer.ln_f.weight") && !strcmp(ps[n - 1].name, "transformer.ln_f.bias"));
  ZT_CHECK(!ps[n - 2].decay && !ps[n - 1].decay);
  for (int i = 0; i < n; i++) ZT_CHECK(ps[i].tensor->storage->tag == ZT_MEM_TAG_PARAM && ps[i].tensor->requires_grad);
  zt_gpt2_free(m);
}

/* N(0, 0.02) everywhere, residual projections 0.02 / sqrt(2 L), biases 0, LN 1 / 0;
 * the same seed gives the same weights. */
static void test_init(void) {
  zt_gpt2_config c = {2, 2, 64, 512, 64, 0.0};
  zt_gpt2 *m = NULL, *m2 = NULL;
  zt_rng_seed(7);
  ZT_CHECK_OK(zt_gpt2_new(&c, &m));
  zt_rng_seed(7);
  ZT_CHECK_OK(zt_gpt2_new(&c, &m2));
  if (!m || !m2) return;
  zt_param *ps, *ps2;
  int n = zt_gpt2_params(m, &ps);
  zt_gpt2_params(m2, &ps2);
  for (int i = 0; i < n; i++) {
    zt_tensor *t = ps[i].tensor;
    ZT_CHECK(zt_test_bitwise_equal(t, ps2[i].tensor));
    const char *nm = ps[i].name;
    double sd = zt_test_std(t), mean = zt_test_mean(t);
    if (strstr(nm, "ln_") && strstr(nm, ".weight"))
      ZT_CHECK(sd == 0 && mean == 1);
    else if (strstr(nm, ".bias"))
      ZT_CHECK(sd == 0 && mean == 0);
    else if (strstr(nm, "c_proj.weight")) {
      if (fabs(sd - 0.01) > 0.001) zt_test_fail(__FILE__, __LINE__, "%s std %g, expected 0.01", nm, sd);
    } else if (fabs(sd - 0.02) > 0.0015)
      zt_test_fail(__FILE__, __LINE__, "%s std %g, expected 0.02", nm, sd);
  }
  zt_gpt2_free(m);
  zt_gpt2_free(m2);
}

static void test_forward_errors(void) {
  zt_gpt2 *m = NULL;
  ZT_CHECK_OK(zt_gpt2_new(&tiny_cfg, &m));
  if (!m) return;
  zt_tensor *ids = zt_test_rand_ids(2, 8, 32, 1), *tg = zt_test_rand_ids(2, 8, 32, 2), *lg = NULL, *loss = NULL;
  zt_tensor *long_ids = zt_test_rand_ids(1, 9, 32, 3), *short_tg = zt_test_rand_ids(2, 7, 32, 4);
  zt_tensor *fids = zt_test_rand(2, (int64_t[]){2, 8}, ZT_DTYPE_F32, 0, 5, 5), *ids1 = NULL;
  ZT_CHECK_ERR(zt_gpt2_forward(m, fids, NULL, &lg, NULL), ZT_STATUS_DTYPE, "token ids must be i32");
  ZT_CHECK_ERR(zt_gpt2_forward(m, long_ids, NULL, &lg, NULL), ZT_STATUS_SHAPE,
               "T = 9 is longer than the model's context (block_size = 8)");
  ZT_CHECK_ERR(zt_gpt2_forward(m, ids, short_tg, NULL, &loss), ZT_STATUS_SHAPE, "must have the same shape");
  ZT_CHECK_ERR(zt_gpt2_forward(m, ids, NULL, NULL, &loss), ZT_STATUS_INVALID_ARG, "without targets");
  ZT_CHECK_ERR(zt_gpt2_forward(m, ids, tg, NULL, NULL), ZT_STATUS_INVALID_ARG, "loss is NULL");
  ZT_CHECK_OK(zt_tensor_zeros(1, (int64_t[]){8}, ZT_DTYPE_I32, ZT_CPU, &ids1));
  ZT_CHECK_ERR(zt_gpt2_forward(m, ids1, NULL, &lg, NULL), ZT_STATUS_SHAPE, "must be (B, T)");
  ZT_CHECK_OK(zt_tensor_set(ids, 5, 32));
  ZT_CHECK_ERR(zt_gpt2_forward(m, ids, tg, NULL, &loss), ZT_STATUS_INVALID_ARG, "id 32 at position (0, 5)");
  ZT_CHECK_OK(zt_tensor_set(ids, 5, 1));
  ZT_CHECK_OK(zt_tensor_set(tg, 3, 40));
  ZT_CHECK_ERR(zt_gpt2_forward(m, ids, tg, NULL, &loss), ZT_STATUS_INVALID_ARG, "is 40, outside [0, 32)");
  ZT_CHECK(lg == NULL && loss == NULL);
  zt_tensor *ts[] = {ids, tg, long_ids, short_tg, fids, ids1};
  for (int i = 0; i < 6; i++) zt_tensor_free(ts[i]);
  zt_gpt2_free(m);
}

/* Loss ln(V) at init, every parameter gets a finite grad; ignored targets (-1) work. */
static void test_forward_backward(void) {
  zt_gpt2 *m = NULL;
  zt_rng_seed(11);
  ZT_CHECK_OK(zt_gpt2_new(&tiny_cfg, &m));
  if (!m) return;
  zt_tensor *ids = zt_test_rand_ids(3, 8, 32, 1), *tg = zt_test_rand_ids(3, 8, 32, 2), *loss = NULL;
  ZT_CHECK_OK(zt_tensor_set(tg, 4, -1));
  ZT_CHECK_OK(zt_gpt2_forward(m, ids, tg, NULL, &loss));
  if (loss) {
    ZT_CHECK(loss->ndim == 0);
    ZT_CHECK_NEAR(zt_tensor_get(loss, 0), log(32.0), 0.1);
    ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
    zt_param *ps;
    int n = zt_gpt2_params(m, &ps);
    for (int i = 0; i < n; i++) {
      zt_tensor *g = ps[i].tensor->grad;
      if (!g) {
        zt_test_fail(__FILE__, __LINE__, "%s got no grad", ps[i].name);
        continue;
      }
      double sq = 0;
      for (int64_t k = 0; k < zt_tensor_numel(g); k++) sq += zt_tensor_get(g, k) * zt_tensor_get(g, k);
      if (!isfinite(sq) || sq == 0) zt_test_fail(__FILE__, __LINE__, "%s grad norm^2 %g", ps[i].name, sq);
    }
  }
  zt_tensor_free(loss);
  zt_tensor_free(ids);
  zt_tensor_free(tg);
  zt_gpt2_free(m);
}

/* Central differences in f64 for a few elements of several parameters (including the
 * tied wte, which gets grads from both the embedding and the output layer). */
static void test_finite_differences_f64(void) {
  zt_gpt2 *m = NULL;
  zt_rng_seed(12);
  ZT_CHECK_OK(zt_gpt2_new_dtype(&tiny_cfg, ZT_DTYPE_F64, &m));
  if (!m) return;
  /* larger weights than GPT-2 init so every path carries signal */
  zt_param *ps;
  int n = zt_gpt2_params(m, &ps);
  bool prev = zt_set_grad_enabled(false);
  for (int i = 0; i < n; i++) ZT_CHECK_OK(zt_tensor_normal_(ps[i].tensor, 0.1, 0.3));
  zt_set_grad_enabled(prev);
  zt_tensor *ids = zt_test_rand_ids(2, 8, 32, 3), *tg = zt_test_rand_ids(2, 8, 32, 4), *loss = NULL;
  ZT_CHECK_OK(zt_gpt2_forward(m, ids, tg, NULL, &loss));
  if (loss) ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
  zt_tensor_free(loss);
  for (int i = 0; i < n; i++) {
    zt_tensor *t = ps[i].tensor;
    if (!t->grad) {
      zt_test_fail(__FILE__, __LINE__, "%s got no grad", ps[i].name);
      continue;
    }
    int64_t numel = zt_tensor_numel(t);
    for (int j = 0; j < 3; j++) {
      int64_t k = (int64_t)(j * 7919 + i * 31) % numel;
      double v = zt_tensor_get(t, k), eps = 1e-5;
      prev = zt_set_grad_enabled(false);
      ZT_CHECK_OK(zt_tensor_set(t, k, v + eps));
      double lp = loss_of(m, ids, tg);
      ZT_CHECK_OK(zt_tensor_set(t, k, v - eps));
      double lm = loss_of(m, ids, tg);
      ZT_CHECK_OK(zt_tensor_set(t, k, v));
      zt_set_grad_enabled(prev);
      double num = (lp - lm) / (2 * eps), ana = zt_tensor_get(t->grad, k);
      if (!(fabs(num - ana) <= 1e-7 + 1e-5 * fabs(num)))
        zt_test_fail(__FILE__, __LINE__, "%s[%lld]: numeric %.10g analytic %.10g", ps[i].name, (long long)k, num, ana);
    }
  }
  zt_tensor_free(ids);
  zt_tensor_free(tg);
  zt_gpt2_free(m);
}

/* 20 plain SGD steps on one batch, written out here: the loss must fall clearly. */
static void test_sgd_lowers_loss(void) {
  zt_gpt2 *m = NULL;
  zt_rng_seed(13);
  ZT_CHECK_OK(zt_gpt2_new(&tiny_cfg, &m));
  if (!m) return;
  zt_tensor *ids = zt_test_rand_ids(4, 8, 32, 5), *tg = zt_test_rand_ids(4, 8, 32, 6);
  zt_param *ps;
  int n = zt_gpt2_params(m, &ps);
  double first = 0, last = 0;
  for (int step = 0; step < 20; step++) {
    zt_tensor *loss = NULL;
    ZT_CHECK_OK(zt_gpt2_forward(m, ids, tg, NULL, &loss));
    if (!loss) break;
    double l = zt_tensor_get(loss, 0);
    if (step == 0) first = l;
    last = l;
    ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
    zt_tensor_free(loss);
    bool prev = zt_set_grad_enabled(false);
    for (int i = 0; i < n; i++) {
      zt_tensor *p = ps[i].tensor, *g = p->grad;
      if (!g) continue;
      float *pv = zt__tensor_ptr(p);
      const float *gv = zt__tensor_ptr(g);
      for (int64_t k = 0; k < zt_tensor_numel(p); k++) pv[k] -= 0.5f * gv[k];
      zt_tensor_bump_version(p);
    }
    zt_set_grad_enabled(prev);
    free_grads(m);
  }
  ZT_CHECK(last < first - 0.5);
  zt_tensor_free(ids);
  zt_tensor_free(tg);
  zt_gpt2_free(m);
}

/* Dropout: in training two forwards differ; in eval they are equal, and equal to a
 * dropout-free model with the same weights. */
static void test_dropout_train_eval(void) {
  zt_gpt2_config c = tiny_cfg, c0 = tiny_cfg;
  c.dropout = 0.2;
  zt_gpt2 *m = NULL, *m0 = NULL;
  zt_rng_seed(14);
  ZT_CHECK_OK(zt_gpt2_new(&c, &m));
  zt_rng_seed(14);
  ZT_CHECK_OK(zt_gpt2_new(&c0, &m0));
  if (!m || !m0) return;
  zt_tensor *ids = zt_test_rand_ids(2, 8, 32, 7), *tg = zt_test_rand_ids(2, 8, 32, 8);
  double a = loss_of(m, ids, tg), b = loss_of(m, ids, tg);
  ZT_CHECK(a != b);
  zt_gpt2_set_training(m, false);
  double e1 = loss_of(m, ids, tg), e2 = loss_of(m, ids, tg), ref = loss_of(m0, ids, tg);
  ZT_CHECK(e1 == e2 && e1 == ref);
  zt_gpt2_set_training(m, true);
  ZT_CHECK(loss_of(m, ids, tg) != e1);
  zt_tensor_free(ids);
  zt_tensor_free(tg);
  zt_gpt2_free(m);
  zt_gpt2_free(m0);
}

/* Logits (B, T, V) from the forward without targets give the fused loss back. */
static void test_logits_match_loss(void) {
  zt_gpt2 *m = NULL;
  zt_rng_seed(15);
  ZT_CHECK_OK(zt_gpt2_new(&tiny_cfg, &m));
  if (!m) return;
  bool prev = zt_set_grad_enabled(false);
  zt_param *ps;
  int n = zt_gpt2_params(m, &ps);
  for (int i = 0; i < n; i++) ZT_CHECK_OK(zt_tensor_normal_(ps[i].tensor, 0.2, 0.5)); /* a non-uniform output */
  zt_set_grad_enabled(prev);
  zt_tensor *ids = zt_test_rand_ids(2, 6, 32, 9), *tg = zt_test_rand_ids(2, 6, 32, 10), *lg = NULL, *ce = NULL, *loss = NULL;
  ZT_CHECK_OK(zt_gpt2_forward(m, ids, NULL, &lg, NULL));
  ZT_CHECK_OK(zt_gpt2_forward(m, ids, tg, NULL, &loss));
  if (lg && loss) {
    ZT_CHECK(lg->ndim == 3 && lg->shape[0] == 2 && lg->shape[1] == 6 && lg->shape[2] == 32);
    ZT_CHECK_OK(zt_cross_entropy(lg, tg, -1, &ce));
    if (ce) {
      ZT_CHECK_NEAR(zt_tensor_get(ce, 0), zt_tensor_get(loss, 0), 1e-5);
      ZT_CHECK(fabs(zt_tensor_get(loss, 0) - log(32.0)) > 0.05);
    }
  }
  zt_tensor *ts[] = {ids, tg, lg, ce, loss};
  for (int i = 0; i < 5; i++) zt_tensor_free(ts[i]);
  zt_gpt2_free(m);
}

/* A case where B*T*V dominates: forward + backward of the loss path never holds a
 * B*T*V tensor (peak activation + temp bytes stay well below it). */
static void test_loss_path_memory(void) {
  zt_gpt2_config c = {1, 1, 16, 8192, 64, 0.0};
  zt_gpt2 *m = NULL;
  ZT_CHECK_OK(zt_gpt2_new(&c, &m));
  if (!m) return;
  int64_t B = 64, T = 64, btv = B * T * 8192 * 4;
  zt_tensor *ids = zt_test_rand_ids(B, T, 8192, 11), *tg = zt_test_rand_ids(B, T, 8192, 12), *loss = NULL;
  zt_mem_stats before, after;
  zt_mem_stats_get(ZT_CPU, &before);
  zt_mem_reset_peaks();
  ZT_CHECK_OK(zt_gpt2_forward(m, ids, tg, NULL, &loss));
  zt_mem_stats_get(ZT_CPU, &after);
  int64_t act_tmp = after.peak[ZT_MEM_TAG_ACTIVATION] + after.peak[ZT_MEM_TAG_TEMP] -
                    before.current[ZT_MEM_TAG_ACTIVATION] - before.current[ZT_MEM_TAG_TEMP];
  if (!(act_tmp < btv / 4))
    zt_test_fail(__FILE__, __LINE__, "forward peak activation+temp %lld bytes vs B*T*V*4 = %lld", (long long)act_tmp,
                 (long long)btv);
  if (loss) ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
  zt_mem_stats_get(ZT_CPU, &after);
  ZT_CHECK(after.peak_total - before.current_total < btv / 4);
  zt_tensor_free(loss);
  zt_tensor_free(ids);
  zt_tensor_free(tg);
  zt_gpt2_free(m);
}

int main(void) {
  ZT_RUN(test_presets);
  ZT_RUN(test_gpt2_124m_params);
  ZT_RUN(test_config_errors);
  ZT_RUN(test_tiny_names_shapes_decay);
  ZT_RUN(test_init);
  ZT_RUN(test_forward_errors);
  ZT_RUN(test_forward_backward);
  ZT_RUN(test_finite_differences_f64);
  ZT_RUN(test_sgd_lowers_loss);
  ZT_RUN(test_dropout_train_eval);
  ZT_RUN(test_logits_match_loss);
  ZT_RUN(test_loss_path_memory);
  return zt_test_finish();
}
