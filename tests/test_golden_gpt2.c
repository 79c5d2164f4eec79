/* GPT-2 end to end against PyTorch: tests/fixtures/gpt2/fixture.safetensors (written by
 * scripts/gen_gpt2_fixture.py, a float64 PyTorch reference) holds a tiny config, weights,
 * a batch, the logits, the loss, every gradient and the parameters after two AdamW steps.
 * zerotrain must reproduce all of them within the tolerances stated below, in f32 (the
 * training dtype) and in f64 (where only the fixture's own f32 rounding is left). */
#include <stdlib.h>

#include "zt/train.h"
#include "zt_test.h"

/* ------------------------------------------------ the fixture */


typedef struct fixture {
  char path[1024];
  zt_gpt2_config cfg;
  int64_t B, T;
  double lr, beta1, beta2, eps, weight_decay;
} fixture;

static bool meta_double(const char *path, const char *key, double *out) {
  char *v = NULL;
  zt_status s = zt_safetensors_metadata(path, key, &v);
  if (s != ZT_OK || !v) {
    zt_test_fail(__FILE__, __LINE__, "fixture %s: no metadata \"%s\" (%s); scripts/gen_gpt2_fixture.py makes it",
                 path, key, s ? zt_last_error() : "absent");
    free(v);
    return false;
  }
  char *end = NULL;
  *out = strtod(v, &end);
  bool ok = end != v && *end == '\0';
  if (!ok) zt_test_fail(__FILE__, __LINE__, "fixture %s: metadata %s = \"%s\" is not a number", path, key, v);
  free(v);
  return ok;
}

static bool fixture_open(fixture *fx) {
  memset(fx, 0, sizeof *fx);
  zt_test_fixture(fx->path, sizeof fx->path, "gpt2/fixture.safetensors");
  double v[12];
  const char *keys[] = {"n_layer", "n_head", "n_embd", "vocab_size", "block_size", "batch",
                        "seq",     "lr",     "beta1",  "beta2",      "eps",        "weight_decay"};
  for (int i = 0; i < 12; i++)
    if (!meta_double(fx->path, keys[i], &v[i])) return false;
  fx->cfg = (zt_gpt2_config){(int)v[0], (int)v[1], (int)v[2], (int)v[3], (int)v[4], 0.0};
  fx->B = (int64_t)v[5];
  fx->T = (int64_t)v[6];
  fx->lr = v[7];
  fx->beta1 = v[8];
  fx->beta2 = v[9];
  fx->eps = v[10];
  fx->weight_decay = v[11];
  return true;
}

/* A new tensor of the given shape/dtype holding the fixture's tensor `name` (NULL on failure,
 * reported). */
static zt_tensor *fixture_tensor(const fixture *fx, const char *name, int ndim, const int64_t *shape, zt_dtype dt) {
  zt_tensor *t = NULL;
  ZT_CHECK_OK(zt_tensor_empty(ndim, shape, dt, ZT_CPU, &t));
  if (!t) return NULL;
  zt_status s = zt_safetensors_load_into(fx->path, 1, (const char *const[]){name}, (zt_tensor *const[]){t}, false);
  if (s != ZT_OK) {
    zt_test_fail(__FILE__, __LINE__, "loading \"%s\" from %s: %s", name, fx->path, zt_last_error());
    zt_tensor_free(t);
    return NULL;
  }
  return t;
}

/* ------------------------------------------------ comparisons */

/* Element i passes when |a_i - r_i| <= atol + rtol |r_i|. Reports how many fail and the
 * worst one; returns the largest error as a fraction of its allowance (<= 1 passes), which
 * the caller prints so that the margins stay visible. */
#define COMPARE(what, a, r, rtol, atol) zt_test_compare_at(__FILE__, __LINE__, (what), (a), (r), (rtol), (atol))


/* ------------------------------------------------ tolerances
 * The reference is exact to ~1e-12 (float64) but stored rounded to f32 (relative 6e-8),
 * so every tolerance below is for zerotrain's own error.
 * f32: logits and loss come out of ~10 chained f32 GEMMs, layer norms and softmaxes with
 *   sums of <= 4C = 64 terms: expected errors are a few 1e-7 relative; 1e-4 rel / 1e-5 abs
 *   leaves a wide margin yet catches any wrong formula (a GELU with erf instead of tanh
 *   moves logits by ~1e-4, a wrong attention scale or LN eps by far more).
 *   Gradients sum over B*T = 32 rows and can cancel, so their error is relative to the
 *   scale of the whole tensor, not of the element: atol 2e-5 x max|grad| of that tensor,
 *   plus 1e-4 relative (measured: < 3% of that allowance).
 *   Parameters after two steps: Adam moves each by ~lr = 1e-2 per step with a size set by
 *   g/sqrt(v), which f32 grads know to ~1e-5 (the fixture's seed was chosen so that no
 *   element's grad is within 2e-5 of zero relative to its tensor), so 2e-5 absolute
 *   (0.2% of one step) is ample and still sees a wrong bias correction, eps placement or
 *   decay on the wrong tensors (each >= 1e-4).
 * f64: the same computations agree to the fixture's rounding: 1e-6 relative everywhere.
 * The key bias (elements C..2C of every c_attn.bias) is the one exception: its gradient is
 *   exactly 0 in exact arithmetic (softmax ignores a shift q.b_k common to a row), so it is
 *   rounding noise in both programs: ~1e-18 in PyTorch's f64 (Adam then does not move it,
 *   since eps = 1e-8 dominates) but ~1e-9 in f32, where g / (|g| + eps) moves it by up to
 *   lr per step in a noise-dependent direction. The loss does not depend on it, so the only
 *   meaningful checks are its grad against 0 (in the grad comparison) and that it moved by
 *   at most 2 lr (Adam's bound for two steps). */
typedef struct tols {
  double logit_rtol, logit_atol, loss_atol;
  double grad_rtol, grad_atol_scale;
  double param_atol;
  bool key_bias_noisy;
  bool adamw; /* run the two AdamW steps: the optimizer updates f32 parameters only */
} tols;
static const tols TOL_F32 = {1e-4, 1e-5, 1e-5, 1e-4, 2e-5, 2e-5, true, true};
static const tols TOL_F64 = {1e-6, 1e-6, 1e-9, 1e-6, 1e-6, 1e-6, false, false};

/* ------------------------------------------------ the golden run */

static void golden_run(zt_dtype dt, const tols *tol) {
  fixture fx;
  if (!fixture_open(&fx)) return;
  const zt_gpt2_config *c = &fx.cfg;
  const int64_t B = fx.B, T = fx.T, V = c->vocab_size, C = c->n_embd;
  ZT_CHECK(T <= c->block_size);

  zt_gpt2 *m = NULL;
  ZT_CHECK_OK(zt_gpt2_new_dtype(c, dt, &m));
  if (!m) return;
  zt_gpt2_set_training(m, true); /* dropout 0: training mode must change nothing */
  zt_param *ps = NULL;
  int np = zt_gpt2_params(m, &ps);
  ZT_CHECK(np == 4 + 12 * c->n_layer);
  if (np <= 0) {
    zt_gpt2_free(m);
    return;
  }

  /* Weights from the fixture (f32 values: the reference computed from exactly these).
   * The fixture's AdamW decays exactly the >= 2-D tensors; so must the model's flags. */
  const char **names = calloc((size_t)np, sizeof *names);
  zt_tensor **tens = calloc((size_t)np, sizeof *tens);
  for (int i = 0; i < np; i++) {
    names[i] = ps[i].name;
    tens[i] = ps[i].tensor;
    if (ps[i].decay != (ps[i].tensor->ndim >= 2))
      zt_test_fail(__FILE__, __LINE__, "%s: decay flag %d, expected %d (decay exactly the 2-D tensors)", ps[i].name,
                   ps[i].decay, ps[i].tensor->ndim >= 2);
  }
  bool prev = zt_set_grad_enabled(false);
  ZT_CHECK_OK(zt_safetensors_load_into(fx.path, np, names, tens, false));
  zt_set_grad_enabled(prev);
  free(names);
  free(tens);

  zt_tensor *ids = fixture_tensor(&fx, "input_ids", 2, (int64_t[]){B, T}, ZT_DTYPE_I32);
  zt_tensor *targets = fixture_tensor(&fx, "targets", 2, (int64_t[]){B, T}, ZT_DTYPE_I32);
  zt_tensor *ref_logits = fixture_tensor(&fx, "logits", 3, (int64_t[]){B, T, V}, ZT_DTYPE_F32);
  zt_tensor *ref_loss = fixture_tensor(&fx, "loss", 0, NULL, ZT_DTYPE_F64);
  zt_tensor *ref_loss2 = fixture_tensor(&fx, "loss_step2", 0, NULL, ZT_DTYPE_F64);
  zt_optim *opt = NULL;
  if (!ids || !targets || !ref_logits || !ref_loss || !ref_loss2) goto done;
  int n_ignored = 0;
  for (int64_t i = 0; i < B * T; i++) n_ignored += zt_tensor_get(targets, i) == -1;
  ZT_CHECK(n_ignored == 1); /* the fixture exercises the ignore index */

  double worst_logits, worst_loss, worst_grad = 0, worst_loss2 = 0, worst_param = 0;
  /* 1. logits (no targets) */
  zt_tensor *logits = NULL, *loss = NULL;
  ZT_CHECK_OK(zt_gpt2_forward(m, ids, NULL, &logits, NULL));
  worst_logits = COMPARE("logits", logits, ref_logits, tol->logit_rtol, tol->logit_atol);
  zt_tensor_free(logits);

  /* 2. loss (fused chunked output layer) and every gradient */
  ZT_CHECK_OK(zt_gpt2_forward(m, ids, targets, NULL, &loss));
  if (!loss) goto done;
  worst_loss = COMPARE("loss", loss, ref_loss, 0, tol->loss_atol);
  ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
  zt_tensor_free(loss);
  loss = NULL;
  for (int i = 0; i < np; i++) {
    char what[128];
    snprintf(what, sizeof what, "grad.%s", ps[i].name);
    zt_tensor *ref = fixture_tensor(&fx, what, ps[i].tensor->ndim, ps[i].tensor->shape, ZT_DTYPE_F32);
    if (!ref) continue;
    if (!ps[i].tensor->grad)
      zt_test_fail(__FILE__, __LINE__, "%s: no gradient after backward", ps[i].name);
    else
      worst_grad = fmax(worst_grad, COMPARE(what, ps[i].tensor->grad, ref, tol->grad_rtol,
                                            tol->grad_atol_scale * zt_test_max_abs(ref)));
    zt_tensor_free(ref);
  }

  /* 3. two AdamW steps on the same batch, grads cleared between: the fixture's loss at
   * step 2 (after one update) and the parameters after the second update. */
  if (!tol->adamw) goto report;
  zt_optim_config oc = zt_optim_default(ZT_OPTIM_ADAMW);
  oc.lr = fx.lr;
  oc.beta1 = fx.beta1;
  oc.beta2 = fx.beta2;
  oc.eps = fx.eps;
  oc.weight_decay = fx.weight_decay;
  ZT_CHECK_OK(zt_optim_new(&oc, np, ps, &opt));
  if (!opt) goto done;
  ZT_CHECK_OK(zt_optim_step(opt, fx.lr));
  zt_optim_zero_grad(opt);
  for (int i = 0; i < np; i++) ZT_CHECK(ps[i].tensor->grad == NULL);
  ZT_CHECK_OK(zt_gpt2_forward(m, ids, targets, NULL, &loss));
  if (!loss) goto done;
  worst_loss2 = COMPARE("loss_step2", loss, ref_loss2, 0, tol->loss_atol);
  ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
  zt_tensor_free(loss);
  ZT_CHECK_OK(zt_optim_step(opt, fx.lr));
  ZT_CHECK(zt_optim_step_count(opt) == 2);
  for (int i = 0; i < np; i++) {
    char what[128];
    snprintf(what, sizeof what, "after2.%s", ps[i].name);
    zt_tensor *ref = fixture_tensor(&fx, what, ps[i].tensor->ndim, ps[i].tensor->shape, ZT_DTYPE_F32);
    if (!ref) continue;
    size_t len = strlen(ps[i].name);
    if (tol->key_bias_noisy && len >= 11 && !strcmp(ps[i].name + len - 11, "c_attn.bias")) {
      /* q and v parts as usual; the key bias within Adam's bound (see the tolerances) */
      zt_tensor *parts[3] = {NULL, NULL, NULL}, *rparts[3] = {NULL, NULL, NULL};
      bool prev2 = zt_set_grad_enabled(false);
      ZT_CHECK_OK(zt_split(ps[i].tensor, 0, 3, (int64_t[]){C, C, C}, parts));
      ZT_CHECK_OK(zt_split(ref, 0, 3, (int64_t[]){C, C, C}, rparts));
      zt_set_grad_enabled(prev2);
      if (parts[0] && rparts[0]) {
        char wq[200], wk[200], wv[200];
        snprintf(wq, sizeof wq, "%s (query part)", what);
        snprintf(wk, sizeof wk, "%s (key part: zero grad, noise-driven)", what);
        snprintf(wv, sizeof wv, "%s (value part)", what);
        worst_param = fmax(worst_param, COMPARE(wq, parts[0], rparts[0], 0, tol->param_atol));
        COMPARE(wk, parts[1], rparts[1], 0, 2.0 * fx.lr * 1.01);
        worst_param = fmax(worst_param, COMPARE(wv, parts[2], rparts[2], 0, tol->param_atol));
      }
      for (int k = 0; k < 3; k++) {
        zt_tensor_free(parts[k]);
        zt_tensor_free(rparts[k]);
      }
    } else {
      worst_param = fmax(worst_param, COMPARE(what, ps[i].tensor, ref, 0, tol->param_atol));
    }
    zt_tensor_free(ref);
  }
report:
  printf("  %s vs PyTorch, worst error / tolerance: logits %.3f, loss %.3f, grads %.3f", zt_dtype_name(dt),
         worst_logits, worst_loss, worst_grad);
  if (tol->adamw)
    printf(", loss_step2 %.3f, params after 2 AdamW steps %.3f\n", worst_loss2, worst_param);
  else
    printf(" (AdamW: checked in f32)\n");

done:
  zt_optim_free(opt);
  zt_tensor_free(ids);
  zt_tensor_free(targets);
  zt_tensor_free(ref_logits);
  zt_tensor_free(ref_loss);
  zt_tensor_free(ref_loss2);
  zt_gpt2_free(m);
}

static void test_golden_gpt2_f32(void) { golden_run(ZT_DTYPE_F32, &TOL_F32); }
static void test_golden_gpt2_f64(void) { golden_run(ZT_DTYPE_F64, &TOL_F64); }

/* The fixture's config and its consistency with the model's parameter list: every tensor
 * the test reads exists with the model's shapes, and strict loading of the weights alone
 * is refused (the file holds more), so a renamed or reshaped parameter shows up here. */
static void test_fixture_matches_model(void) {
  fixture fx;
  if (!fixture_open(&fx)) return;
  ZT_CHECK_OK(zt_gpt2_config_validate(&fx.cfg));
  ZT_CHECK(fx.B >= 1 && fx.T >= 1 && fx.T <= fx.cfg.block_size);
  ZT_CHECK(fx.lr > 0 && fx.weight_decay > 0); /* decay on, so the decay flags matter */
  zt_gpt2 *m = NULL;
  ZT_CHECK_OK(zt_gpt2_new(&fx.cfg, &m));
  if (!m) return;
  zt_param *ps = NULL;
  int np = zt_gpt2_params(m, &ps);
  ZT_CHECK(np == 4 + 12 * fx.cfg.n_layer);
  if (np <= 0) {
    zt_gpt2_free(m);
    return;
  }
  int64_t total = 0;
  for (int i = 0; i < np; i++) total += zt_tensor_numel(ps[i].tensor);
  ZT_CHECK(total == zt_gpt2_num_params(m));
  const char **names = calloc((size_t)np, sizeof *names);
  zt_tensor **tens = calloc((size_t)np, sizeof *tens);
  for (int i = 0; i < np; i++) {
    names[i] = ps[i].name;
    tens[i] = ps[i].tensor;
  }
  bool prev = zt_set_grad_enabled(false);
  ZT_CHECK_OK(zt_safetensors_load_into(fx.path, np, names, tens, false));
  ZT_CHECK(zt_safetensors_load_into(fx.path, np, names, tens, true) != ZT_OK);
  zt_set_grad_enabled(prev);
  free(names);
  free(tens);
  zt_gpt2_free(m);
}

int main(void) {
  ZT_RUN(test_fixture_matches_model);
  ZT_RUN(test_golden_gpt2_f32);
  ZT_RUN(test_golden_gpt2_f64);
  return zt_test_finish();
}
