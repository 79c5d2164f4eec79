/* The Llama family end to end against float64 references: tests/fixtures/llama/CASE (written
 * by scripts/gen_llama_fixture.py) holds a Hugging Face folder (model/), the same config in
 * transformers 4's layout (config_v4.json) and reference.safetensors: a batch, the logits, the
 * loss, every gradient and the parameters after two AdamW steps. For each case (Llama 3 with
 * GQA and llama3 rope scaling, Qwen2 with biases, Qwen3 with q/k norm, Mistral with one KV
 * head and a sliding window) and each config layout, zerotrain loads the folder and must
 * reproduce all of them at the GPT-2 golden test's tolerances (tests/test_golden_gpt2.c). */
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zt/llama.h"
#include "zt/optim.h"
#include "zt_test.h"

static const char *const CASES[] = {"llama3", "qwen2", "qwen3", "mistral"};
#define N_CASES 4


typedef struct fixture {
  char dir[1024], model[1100], ref[1100];
  int64_t B, T;
  double lr, beta1, beta2, eps, weight_decay;
} fixture;

static bool meta_double(const char *path, const char *key, double *out) {
  char *v = NULL;
  zt_status s = zt_safetensors_metadata(path, key, &v);
  if (s != ZT_OK || !v) {
    zt_test_fail(__FILE__, __LINE__, "fixture %s: no metadata \"%s\" (%s)", path, key, s ? zt_last_error() : "absent");
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

static bool fixture_open(const char *name, fixture *fx) {
  memset(fx, 0, sizeof *fx);
  zt_test_fixture(fx->dir, sizeof fx->dir, "llama/%s", name);
  snprintf(fx->model, sizeof fx->model, "%s/model", fx->dir);
  snprintf(fx->ref, sizeof fx->ref, "%s/reference.safetensors", fx->dir);
  double v[7];
  const char *keys[] = {"batch", "seq", "lr", "beta1", "beta2", "eps", "weight_decay"};
  for (int i = 0; i < 7; i++)
    if (!meta_double(fx->ref, keys[i], &v[i])) return false;
  fx->B = (int64_t)v[0], fx->T = (int64_t)v[1];
  fx->lr = v[2], fx->beta1 = v[3], fx->beta2 = v[4], fx->eps = v[5], fx->weight_decay = v[6];
  return true;
}

static zt_tensor *fixture_tensor(const fixture *fx, const char *name, int ndim, const int64_t *shape, zt_dtype dt) {
  zt_tensor *t = NULL;
  ZT_CHECK_OK(zt_tensor_empty(ndim, shape, dt, ZT_CPU, &t));
  if (!t) return NULL;
  zt_status s = zt_safetensors_load_into(fx->ref, 1, (const char *const[]){name}, (zt_tensor *const[]){t}, false);
  if (s != ZT_OK) {
    zt_test_fail(__FILE__, __LINE__, "loading \"%s\" from %s: %s", name, fx->ref, zt_last_error());
    zt_tensor_free(t);
    return NULL;
  }
  return t;
}

/* ------------------------------------------------ comparisons (as test_golden_gpt2.c) */

#define COMPARE(what, a, r, rtol, atol) zt_test_compare_at(__FILE__, __LINE__, (what), (a), (r), (rtol), (atol))


/* ------------------------------------------------ tolerances: test_golden_gpt2.c's, for
 * the same reasons (the reference is exact; stored rounded to f32). No key-bias exception:
 * rotary positions rotate q/k biases per position, so their gradients are not zero. */
typedef struct tols {
  double logit_rtol, logit_atol, loss_atol;
  double grad_rtol, grad_atol_scale;
  double param_atol;
  bool adamw;
} tols;
static const tols TOL_F32 = {1e-4, 1e-5, 1e-5, 1e-4, 2e-5, 2e-5, true};
static const tols TOL_F64 = {1e-6, 1e-6, 1e-9, 1e-6, 1e-6, 1e-6, false};

/* The config read against the reference's metadata numbers. */
static void check_config(const fixture *fx, const zt_llama_config *c, const char *layout) {
  double v;
  struct {
    const char *key;
    double val;
  } want[] = {
      {"vocab_size", c->vocab_size},
      {"hidden_size", c->hidden_size},
      {"intermediate_size", c->intermediate_size},
      {"num_hidden_layers", c->n_layer},
      {"num_attention_heads", c->n_head},
      {"num_key_value_heads", c->n_kv_head},
      {"head_dim", c->head_dim},
      {"rms_norm_eps", c->rms_norm_eps},
      {"rope_theta", c->rope_theta},
      {"tie_word_embeddings", c->tie_word_embeddings},
      {"attention_bias", c->attention_bias},
      {"qk_norm", c->qk_norm},
      {"sliding_window", c->sliding_window},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    if (meta_double(fx->ref, want[i].key, &v) && v != want[i].val)
      zt_test_fail(__FILE__, __LINE__, "%s (%s): config %s = %g, reference %g", fx->dir, layout, want[i].key,
                   want[i].val, v);
  if (c->rope_scaling.type == ZT_ROPE_SCALING_LLAMA3 && meta_double(fx->ref, "rope_factor", &v))
    ZT_CHECK(v == c->rope_scaling.factor);
}

/* The rotary table's angles at position 1 are the inverse frequencies: cos/sin of them
 * against the reference's rope_inv_freq (after scaling). */
static void check_rope(const fixture *fx, const zt_llama_config *c) {
  int64_t h = c->head_dim / 2;
  zt_tensor *cs = NULL, *sn = NULL, *inv = fixture_tensor(fx, "rope_inv_freq", 1, &h, ZT_DTYPE_F64);
  const zt_rope_scaling *sc = c->rope_scaling.type ? &c->rope_scaling : NULL;
  ZT_CHECK_OK(zt_rope_table(c->head_dim, 2, c->rope_theta, sc, ZT_DTYPE_F64, ZT_CPU, &cs, &sn));
  if (cs && sn && inv)
    for (int64_t i = 0; i < h; i++) {
      double f = zt_tensor_get(inv, i);
      ZT_CHECK(fabs(zt_tensor_get(cs, h + i) - cos(f)) < 1e-12 && fabs(zt_tensor_get(sn, h + i) - sin(f)) < 1e-12);
    }
  zt_tensor_free(cs);
  zt_tensor_free(sn);
  zt_tensor_free(inv);
}

static void golden_run(const char *name, bool v4, zt_dtype dt, const tols *tol) {
  fixture fx;
  if (!fixture_open(name, &fx)) return;
  char cfg_path[1200];
  if (v4)
    snprintf(cfg_path, sizeof cfg_path, "%s/config_v4.json", fx.dir); /* a file, in transformers 4's layout */
  else
    snprintf(cfg_path, sizeof cfg_path, "%s", fx.model); /* the folder's config.json (transformers 5) */
  const char *layout = v4 ? "v4 config" : "v5 config";
  zt_llama_config c;
  ZT_CHECK_OK(zt_llama_config_from_hf(cfg_path, &c));
  check_config(&fx, &c, layout);
  if (dt == ZT_DTYPE_F32 && !v4) check_rope(&fx, &c);
  const int64_t B = fx.B, T = fx.T, V = c.vocab_size;
  zt_llama *m = NULL;
  ZT_CHECK_OK(zt_llama_new(&c, dt, &m));
  if (!m) return;
  ZT_CHECK_OK(zt_llama_load_hf_weights(m, fx.model));
  zt_llama_set_training(m, true);
  zt_param *ps = NULL;
  int np = zt_llama_params(m, &ps);
  int64_t total = 0;
  for (int i = 0; i < np; i++) {
    total += zt_tensor_numel(ps[i].tensor);
    if (ps[i].decay != (ps[i].tensor->ndim >= 2))
      zt_test_fail(__FILE__, __LINE__, "%s: decay flag %d, expected %d", ps[i].name, ps[i].decay,
                   ps[i].tensor->ndim >= 2);
  }
  ZT_CHECK(total == zt_llama_config_num_params(&c));
  /* the reference's gradients name exactly the model's parameters */
  int nr = 0, n_grads = 0;
  char **rnames = NULL;
  ZT_CHECK_OK(zt_safetensors_names(fx.ref, &nr, &rnames));
  for (int i = 0; i < nr; i++)
    if (!strncmp(rnames[i], "grad.", 5)) n_grads++;
  free(rnames);
  ZT_CHECK(n_grads == np);

  zt_tensor *ids = fixture_tensor(&fx, "input_ids", 2, (int64_t[]){B, T}, ZT_DTYPE_I32);
  zt_tensor *targets = fixture_tensor(&fx, "targets", 2, (int64_t[]){B, T}, ZT_DTYPE_I32);
  zt_tensor *ref_logits = fixture_tensor(&fx, "logits", 3, (int64_t[]){B, T, V}, ZT_DTYPE_F32);
  zt_tensor *ref_loss = fixture_tensor(&fx, "loss", 0, NULL, ZT_DTYPE_F64);
  zt_tensor *ref_loss2 = fixture_tensor(&fx, "loss_step2", 0, NULL, ZT_DTYPE_F64);
  zt_optim *opt = NULL;
  zt_tensor *logits = NULL, *loss = NULL;
  double worst_logits = 0, worst_loss = 0, worst_grad = 0, worst_loss2 = 0, worst_param = 0;
  if (!ids || !targets || !ref_logits || !ref_loss || !ref_loss2) goto done;
  int n_ignored = 0;
  for (int64_t i = 0; i < B * T; i++) n_ignored += zt_tensor_get(targets, i) == -1;
  ZT_CHECK(n_ignored >= 1);

  ZT_CHECK_OK(zt_llama_forward(m, ids, NULL, &logits, NULL));
  worst_logits = COMPARE("logits", logits, ref_logits, tol->logit_rtol, tol->logit_atol);
  zt_tensor_free(logits);

  ZT_CHECK_OK(zt_llama_forward(m, ids, targets, NULL, &loss));
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
  ZT_CHECK_OK(zt_llama_forward(m, ids, targets, NULL, &loss));
  if (!loss) goto done;
  worst_loss2 = COMPARE("loss_step2", loss, ref_loss2, 0, tol->loss_atol);
  ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
  zt_tensor_free(loss);
  ZT_CHECK_OK(zt_optim_step(opt, fx.lr));
  for (int i = 0; i < np; i++) {
    char what[128];
    snprintf(what, sizeof what, "after2.%s", ps[i].name);
    zt_tensor *ref = fixture_tensor(&fx, what, ps[i].tensor->ndim, ps[i].tensor->shape, ZT_DTYPE_F32);
    if (!ref) continue;
    worst_param = fmax(worst_param, COMPARE(what, ps[i].tensor, ref, 0, tol->param_atol));
    zt_tensor_free(ref);
  }
report:
  printf("  %-7s %s %s, worst error / tolerance: logits %.3f, loss %.3f, grads %.3f", name, layout,
         zt_dtype_name(dt), worst_logits, worst_loss, worst_grad);
  if (tol->adamw)
    printf(", loss_step2 %.3f, params after 2 AdamW steps %.3f\n", worst_loss2, worst_param);
  else
    printf("\n");
done:
  zt_optim_free(opt);
  zt_tensor_free(ids);
  zt_tensor_free(targets);
  zt_tensor_free(ref_logits);
  zt_tensor_free(ref_loss);
  zt_tensor_free(ref_loss2);
  zt_llama_free(m);
}

static void test_golden_llama_f32(void) {
  for (int i = 0; i < N_CASES; i++)
    for (int v4 = 0; v4 < 2; v4++) golden_run(CASES[i], v4, ZT_DTYPE_F32, &TOL_F32);
}

static void test_golden_llama_f64(void) {
  for (int i = 0; i < N_CASES; i++) golden_run(CASES[i], false, ZT_DTYPE_F64, &TOL_F64);
}

/* ------------------------------------------------ refusals */

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  ZT_CHECK(f != NULL);
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

static void expect_refused(const char *dir, const char *json, const char *needle) {
  char path[1100];
  snprintf(path, sizeof path, "%s/config.json", dir);
  write_text(path, json);
  zt_llama_config c;
  zt_status s = zt_llama_config_from_hf(dir, &c);
  ZT_CHECK(s != ZT_OK);
  if (s && !strstr(zt_last_error(), needle))
    zt_test_fail(__FILE__, __LINE__, "error \"%s\" does not mention \"%s\"", zt_last_error(), needle);
}

static void test_refusals(void) {
  char dir[] = "/tmp/zt_llama_XXXXXX";
  ZT_CHECK(mkdtemp(dir) != NULL);
#define SHAPE "\"vocab_size\": 64, \"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 1, " \
              "\"num_attention_heads\": 4"
  expect_refused(dir, "{\"model_type\": \"gpt2\", " SHAPE "}", "llama, mistral, qwen2 and qwen3");
  expect_refused(dir, "{\"model_type\": \"llama\", " SHAPE ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4}}",
                 "\"yarn\"");
  expect_refused(dir, "{\"model_type\": \"llama\", " SHAPE ", \"rope_parameters\": {\"rope_type\": \"dynamic\", "
                 "\"rope_theta\": 10000}}", "\"dynamic\"");
  expect_refused(dir, "{\"model_type\": \"llama\", " SHAPE ", \"num_key_value_heads\": 3}", "num_key_value_heads");
  /* qwen2 means biases; a sequence longer than Mistral's window is refused by name */
  char path[1100];
  snprintf(path, sizeof path, "%s/config.json", dir);
  write_text(path, "{\"model_type\": \"qwen2\", " SHAPE "}");
  zt_llama_config c;
  ZT_CHECK_OK(zt_llama_config_from_hf(dir, &c));
  ZT_CHECK(c.attention_bias && !c.qk_norm && c.sliding_window == 0 && c.n_kv_head == 4 && c.head_dim == 8);
  write_text(path, "{\"model_type\": \"mistral\", " SHAPE ", \"sliding_window\": 4}");
  ZT_CHECK_OK(zt_llama_config_from_hf(dir, &c));
  ZT_CHECK(c.sliding_window == 4);
  zt_llama *m = NULL;
  ZT_CHECK_OK(zt_llama_new(&c, ZT_DTYPE_F32, &m));
  zt_tensor *ids = NULL, *logits = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(2, (int64_t[]){1, 5}, ZT_DTYPE_I32, ZT_CPU, &ids));
  if (m && ids) {
    zt_status s = zt_llama_forward(m, ids, NULL, &logits, NULL);
    ZT_CHECK(s != ZT_OK && strstr(zt_last_error(), "sliding window"));
  }
  /* weights missing from the folder */
  if (m) {
    zt_status s = zt_llama_load_hf_weights(m, dir);
    ZT_CHECK(s != ZT_OK && strstr(zt_last_error(), "model.safetensors"));
  }
  zt_tensor_free(ids);
  zt_tensor_free(logits);
  zt_llama_free(m);
  unlink(path);
  rmdir(dir);
}

/* A sharded copy of a fixture (two shards and an index) loads to the same parameters, and a
 * BF16 copy converts on load. */
static void test_sharded_and_bf16(void) {
  fixture fx;
  if (!fixture_open("llama3", &fx)) return;
  zt_llama *a = NULL, *b = NULL;
  ZT_CHECK_OK(zt_llama_from_hf(fx.model, ZT_DTYPE_F32, &a));
  if (!a) return;
  zt_llama_config c = *zt_llama_get_config(a);
  ZT_CHECK_OK(zt_llama_new(&c, ZT_DTYPE_F32, &b));
  char dir[] = "/tmp/zt_llama_XXXXXX";
  ZT_CHECK(mkdtemp(dir) != NULL);
  zt_param *ps = NULL;
  int np = zt_llama_params(a, &ps);
  const char **names = calloc((size_t)np, sizeof *names);
  zt_tensor **ts = calloc((size_t)np, sizeof *ts);
  for (int i = 0; i < np; i++) names[i] = ps[i].name, ts[i] = ps[i].tensor;
  int h = np / 2;
  char p1[1100], p2[1100], idx[1100];
  snprintf(p1, sizeof p1, "%s/model-00001-of-00002.safetensors", dir);
  snprintf(p2, sizeof p2, "%s/model-00002-of-00002.safetensors", dir);
  snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
  ZT_CHECK_OK(zt_safetensors_save(p1, h, names, ts, 0, NULL, NULL));
  ZT_CHECK_OK(zt_safetensors_save(p2, np - h, names + h, ts + h, 0, NULL, NULL));
  FILE *f = fopen(idx, "w");
  ZT_CHECK(f != NULL);
  if (f) {
    fprintf(f, "{\"metadata\": {}, \"weight_map\": {");
    for (int i = 0; i < np; i++)
      fprintf(f, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"", i ? ", " : "", names[i], i < h ? 1 : 2);
    fprintf(f, "}}");
    fclose(f);
  }
  if (b) {
    ZT_CHECK_OK(zt_llama_load_hf_weights(b, dir));
    zt_param *pb = NULL;
    zt_llama_params(b, &pb);
    for (int i = 0; i < np; i++)
      for (int64_t k = 0, n = zt_tensor_numel(ps[i].tensor); k < n; k++)
        if (zt_tensor_get(ps[i].tensor, k) != zt_tensor_get(pb[i].tensor, k)) {
          zt_test_fail(__FILE__, __LINE__, "sharded load: %s[%lld] differs", names[i], (long long)k);
          break;
        }
  }
  unlink(p1);
  unlink(p2);
  unlink(idx);
  /* BF16 on disk: converted, within bf16 rounding */
  char single[1100];
  snprintf(single, sizeof single, "%s/model.safetensors", dir);
  zt_tensor **bt = calloc((size_t)np, sizeof *bt);
  bool prev = zt_set_grad_enabled(false);
  for (int i = 0; i < np; i++) ZT_CHECK_OK(zt_cast(ts[i], ZT_DTYPE_BF16, &bt[i]));
  zt_set_grad_enabled(prev);
  ZT_CHECK_OK(zt_safetensors_save(single, np, names, bt, 0, NULL, NULL));
  if (b) {
    ZT_CHECK_OK(zt_llama_load_hf_weights(b, dir));
    zt_param *pb = NULL;
    zt_llama_params(b, &pb);
    for (int i = 0; i < np; i++)
      for (int64_t k = 0, n = zt_tensor_numel(ps[i].tensor); k < n; k++) {
        double x = zt_tensor_get(ps[i].tensor, k), y = zt_tensor_get(pb[i].tensor, k);
        if (fabs(x - y) > fabs(x) * (1.0 / 256)) {
          zt_test_fail(__FILE__, __LINE__, "bf16 load: %s[%lld] = %g, f32 %g", names[i], (long long)k, y, x);
          break;
        }
      }
  }
  for (int i = 0; i < np; i++) zt_tensor_free(bt[i]);
  free(bt);
  unlink(single);
  rmdir(dir);
  free(names);
  free(ts);
  zt_llama_free(a);
  zt_llama_free(b);
}

int main(void) {
  ZT_RUN(test_golden_llama_f32);
  ZT_RUN(test_golden_llama_f64);
  ZT_RUN(test_refusals);
  ZT_RUN(test_sharded_and_bf16);
  return zt_test_finish();
}
