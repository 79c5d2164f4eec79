/* Optimizer tests: AdamW and SGD against straightforward double-precision loops written
 * here (no external reference), lazy OPTIM-tagged state, thread-count independence,
 * gradient clipping, the cosine schedule and error messages. */
#include <stdlib.h>

#include "zt_test.h"
#include "zt/optim.h"

/* ------------------------------------------------ helpers */
static zt_param make_param(const char *name, int ndim, const int64_t *shape, bool decay, uint64_t seed) {
  zt_param p;
  memset(&p, 0, sizeof p);
  snprintf(p.name, sizeof p.name, "%s", name);
  p.tensor = zt_test_rand_leaf(ndim, shape, ZT_DTYPE_F32, -1, 1, seed);
  p.decay = decay;
  return p;
}

static void set_grad(zt_param *p, uint64_t seed) {
  zt_tensor_free(p->tensor->grad);
  p->tensor->grad = zt_test_rand(p->tensor->ndim, p->tensor->shape, ZT_DTYPE_F32, -1, 1, seed);
}

static void free_params(int n, zt_param *ps) {
  for (int i = 0; i < n; i++) zt_tensor_free(ps[i].tensor);
}

static double *to_doubles(const zt_tensor *t) {
  int64_t n = zt_tensor_numel(t);
  double *d = calloc((size_t)n, sizeof *d);
  for (int64_t i = 0; i < n; i++) d[i] = zt_tensor_get(t, i);
  return d;
}

/* |a - b| <= atol + rtol |b| for every element of t against the reference r. */
static void check_close(const zt_tensor *t, const double *r, double atol, double rtol, const char *what) {
  int64_t n = zt_tensor_numel(t);
  for (int64_t i = 0; i < n; i++) {
    double a = zt_tensor_get(t, i);
    if (!(fabs(a - r[i]) <= atol + rtol * fabs(r[i]))) {
      zt_test_fail(__FILE__, __LINE__, "%s[%lld] = %.9g, reference %.9g", what, (long long)i, a, r[i]);
      return;
    }
  }
}

/* The state tensor called name, or NULL. */
static zt_tensor *state_named(zt_optim *o, const char *name) {
  int n;
  const char *const *names;
  zt_tensor *const *ts;
  if (zt_optim_state(o, &n, &names, &ts)) return NULL;
  for (int i = 0; i < n; i++)
    if (!strcmp(names[i], name)) return ts[i];
  return NULL;
}

static int64_t optim_bytes(void) {
  zt_mem_stats s;
  zt_mem_stats_get(ZT_CPU, &s);
  return s.current[ZT_MEM_TAG_OPTIM];
}

/* ------------------------------------------------ AdamW against a double loop */
#define NP 3
#define NSTEPS 3

/* torch.optim.AdamW for one parameter, in double: decoupled decay first, then the
 * moments, bias-corrected with the optimizer's global step t. */
static void ref_adamw(double *w, const double *g, double *m, double *v, int64_t n, double lr, double b1, double b2,
                      double eps, double wd, bool decay, int64_t t) {
  for (int64_t i = 0; i < n; i++) {
    if (decay) w[i] -= lr * wd * w[i];
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
    double mhat = m[i] / (1 - pow(b1, (double)t));
    double vhat = v[i] / (1 - pow(b2, (double)t));
    w[i] -= lr * mhat / (sqrt(vhat) + eps);
  }
}

static void ref_sgd(double *w, const double *g, double *buf, int64_t n, double lr, double mom, double wd, bool decay) {
  for (int64_t i = 0; i < n; i++) {
    if (decay) w[i] -= lr * wd * w[i];
    if (buf) {
      buf[i] = mom * buf[i] + g[i]; /* buf starts at 0: the first step gives buf = g */
      w[i] -= lr * buf[i];
    } else {
      w[i] -= lr * g[i];
    }
  }
}

/* Runs NSTEPS steps of an optimizer on three parameters (decay on, off, on) with the
 * grad pattern has_grad, and the same steps in double; compares weights and state. */
static void run_against_reference(const zt_optim_config *c, const bool has_grad[NSTEPS][NP]) {
  int64_t s0[] = {3, 5}, s1[] = {7}, s2[] = {4, 4};
  zt_param ps[NP] = {make_param("h.0.weight", 2, s0, true, 11), make_param("h.0.bias", 1, s1, false, 12),
                     make_param("wte.weight", 2, s2, true, 13)};
  double *w[NP], *m[NP], *v[NP];
  int64_t n[NP];
  for (int i = 0; i < NP; i++) {
    n[i] = zt_tensor_numel(ps[i].tensor);
    w[i] = to_doubles(ps[i].tensor);
    m[i] = calloc((size_t)n[i], sizeof(double));
    v[i] = calloc((size_t)n[i], sizeof(double));
  }
  zt_optim *o = NULL;
  ZT_CHECK_OK(zt_optim_new(c, NP, ps, &o));
  const double lrs[NSTEPS] = {0.05, 0.03, 0.01};
  for (int s = 0; s < NSTEPS; s++) {
    for (int i = 0; i < NP; i++) {
      if (!has_grad[s][i]) continue;
      set_grad(&ps[i], 100 + 10 * (uint64_t)s + (uint64_t)i);
      double *g = to_doubles(ps[i].tensor->grad);
      if (c->kind == ZT_OPTIM_ADAMW)
        ref_adamw(w[i], g, m[i], v[i], n[i], lrs[s], c->beta1, c->beta2, c->eps, c->weight_decay, ps[i].decay, s + 1);
      else
        ref_sgd(w[i], g, c->momentum != 0 ? m[i] : NULL, n[i], lrs[s], c->momentum, c->weight_decay, ps[i].decay);
      free(g);
    }
    ZT_CHECK_OK(zt_optim_step(o, lrs[s]));
    ZT_CHECK(zt_optim_step_count(o) == s + 1);
    zt_optim_zero_grad(o);
  }
  for (int i = 0; i < NP; i++) {
    char name[160];
    check_close(ps[i].tensor, w[i], 1e-6, 1e-5, ps[i].name);
    if (c->kind == ZT_OPTIM_ADAMW) {
      snprintf(name, sizeof name, "exp_avg.%.96s", ps[i].name);
      zt_tensor *sm = state_named(o, name);
      ZT_CHECK(sm != NULL);
      if (sm) check_close(sm, m[i], 1e-7, 1e-5, name);
      snprintf(name, sizeof name, "exp_avg_sq.%.96s", ps[i].name);
      zt_tensor *sv = state_named(o, name);
      ZT_CHECK(sv != NULL);
      if (sv) check_close(sv, v[i], 1e-8, 1e-5, name);
    } else if (c->momentum != 0) {
      snprintf(name, sizeof name, "momentum_buffer.%.96s", ps[i].name);
      zt_tensor *sb = state_named(o, name);
      ZT_CHECK(sb != NULL);
      if (sb) check_close(sb, m[i], 1e-6, 1e-5, name);
    }
    free(w[i]);
    free(m[i]);
    free(v[i]);
  }
  zt_optim_free(o);
  free_params(NP, ps);
}

static void test_adamw_reference(void) {
  static const bool all[NSTEPS][NP] = {{1, 1, 1}, {1, 1, 1}, {1, 1, 1}};
  zt_optim_config c = zt_optim_default(ZT_OPTIM_ADAMW);
  c.weight_decay = 0.1;
  run_against_reference(&c, all);
  /* Other hyperparameters, and no weight decay at all. */
  c.beta1 = 0.8;
  c.beta2 = 0.999;
  c.eps = 1e-3;
  c.weight_decay = 0;
  run_against_reference(&c, all);
}

static void test_adamw_skips_params_without_grad(void) {
  /* wte has no grad at step 2, the bias none at step 1: both are skipped there (bias
   * correction still follows the optimizer's global step). */
  static const bool some[NSTEPS][NP] = {{1, 0, 1}, {1, 1, 0}, {1, 1, 1}};
  zt_optim_config c = zt_optim_default(ZT_OPTIM_ADAMW);
  run_against_reference(&c, some);
}

static void test_sgd_reference(void) {
  static const bool all[NSTEPS][NP] = {{1, 1, 1}, {1, 1, 1}, {1, 1, 1}};
  static const bool some[NSTEPS][NP] = {{1, 0, 1}, {0, 1, 1}, {1, 1, 0}};
  zt_optim_config c = zt_optim_default(ZT_OPTIM_SGD);
  c.momentum = 0.9;
  c.weight_decay = 0.05;
  run_against_reference(&c, all);
  run_against_reference(&c, some);
  c.momentum = 0; /* plain SGD: no state */
  run_against_reference(&c, all);
}

/* ------------------------------------------------ skipping, zero_grad, versions */
static void test_skip_and_zero_grad(void) {
  int64_t s[] = {8, 4};
  zt_param ps[2] = {make_param("a", 2, s, true, 1), make_param("b", 2, s, true, 2)};
  zt_tensor *b0 = NULL;
  ZT_CHECK_OK(zt_tensor_clone_data(ps[1].tensor, ZT_MEM_TAG_TEMP, &b0));
  zt_optim_config c = zt_optim_default(ZT_OPTIM_ADAMW);
  zt_optim *o = NULL;
  ZT_CHECK_OK(zt_optim_new(&c, 2, ps, &o));
  set_grad(&ps[0], 5);
  uint64_t va = ps[0].tensor->storage->version, vb = ps[1].tensor->storage->version;
  int64_t before = optim_bytes();
  ZT_CHECK(zt_grad_enabled());
  ZT_CHECK_OK(zt_optim_step(o, 1e-2));
  ZT_CHECK(zt_grad_enabled()); /* restored after the update */
  ZT_CHECK(ps[0].tensor->storage->version > va);
  ZT_CHECK(ps[1].tensor->storage->version == vb);
  ZT_CHECK(zt_test_bitwise_equal(ps[1].tensor, b0));
  /* Only the parameter that was updated got state. */
  ZT_CHECK(optim_bytes() - before == 2 * (int64_t)zt_tensor_nbytes(ps[0].tensor));
  /* zero_grad frees grads (set_to_none) and their bytes. */
  int64_t live = zt_test_live_bytes();
  zt_optim_zero_grad(o);
  ZT_CHECK(ps[0].tensor->grad == NULL && ps[1].tensor->grad == NULL);
  ZT_CHECK(live - zt_test_live_bytes() == (int64_t)zt_tensor_nbytes(ps[0].tensor));
  /* A step with no grads at all changes nothing but the step count. */
  ZT_CHECK_OK(zt_optim_step(o, 1e-2));
  ZT_CHECK(zt_optim_step_count(o) == 2);
  zt_optim_free(o);
  ZT_CHECK(optim_bytes() == before);
  zt_tensor_free(b0);
  free_params(2, ps);
}

/* ------------------------------------------------ state: names, tags, shapes, accounting */
static void test_state_names_tags_accounting(void) {
  int64_t s0[] = {6, 5}, s1[] = {5};
  zt_param ps[2] = {make_param("transformer.h.0.mlp.c_fc.weight", 2, s0, true, 1),
                    make_param("transformer.h.0.mlp.c_fc.bias", 1, s1, false, 2)};
  int64_t nb = (int64_t)(zt_tensor_nbytes(ps[0].tensor) + zt_tensor_nbytes(ps[1].tensor));
  int64_t base = optim_bytes();
  zt_optim_config c = zt_optim_default(ZT_OPTIM_ADAMW);
  zt_optim *o = NULL;
  ZT_CHECK_OK(zt_optim_new(&c, 2, ps, &o));
  ZT_CHECK(optim_bytes() == base); /* lazy */
  int n = -1;
  const char *const *names = NULL;
  zt_tensor *const *ts = NULL;
  ZT_CHECK_OK(zt_optim_state(o, &n, &names, &ts));
  ZT_CHECK(n == 4);
  ZT_CHECK(optim_bytes() - base == 2 * nb);
  static const char *const want[4] = {
      "exp_avg.transformer.h.0.mlp.c_fc.weight", "exp_avg_sq.transformer.h.0.mlp.c_fc.weight",
      "exp_avg.transformer.h.0.mlp.c_fc.bias", "exp_avg_sq.transformer.h.0.mlp.c_fc.bias"};
  for (int i = 0; i < 4 && n == 4; i++) {
    ZT_CHECK(!strcmp(names[i], want[i]));
    const zt_tensor *p = ps[i / 2].tensor;
    ZT_CHECK(ts[i]->storage->tag == ZT_MEM_TAG_OPTIM);
    ZT_CHECK(ts[i]->dtype == ZT_DTYPE_F32);
    ZT_CHECK(zt_shape_equal(ts[i]->ndim, ts[i]->shape, p->ndim, p->shape));
    ZT_CHECK(zt_tensor_get(ts[i], 0) == 0 && zt_tensor_get(ts[i], zt_tensor_numel(p) - 1) == 0);
  }
  /* A second call returns the same tensors and allocates nothing. */
  zt_tensor *const *ts2 = NULL;
  ZT_CHECK_OK(zt_optim_state(o, &n, &names, &ts2));
  ZT_CHECK(ts2[0] == ts[0] && optim_bytes() - base == 2 * nb);
  zt_optim_free(o);
  ZT_CHECK(optim_bytes() == base);

  /* SGD with momentum: one buffer per parameter; plain SGD: none. */
  c = zt_optim_default(ZT_OPTIM_SGD);
  ZT_CHECK_OK(zt_optim_new(&c, 2, ps, &o));
  set_grad(&ps[1], 3);
  ZT_CHECK_OK(zt_optim_step(o, 0.1));
  ZT_CHECK(optim_bytes() - base == (int64_t)zt_tensor_nbytes(ps[1].tensor));
  ZT_CHECK_OK(zt_optim_state(o, &n, &names, &ts));
  ZT_CHECK(n == 2 && !strcmp(names[0], "momentum_buffer.transformer.h.0.mlp.c_fc.weight") &&
           !strcmp(names[1], "momentum_buffer.transformer.h.0.mlp.c_fc.bias"));
  ZT_CHECK(optim_bytes() - base == nb);
  zt_optim_free(o);
  c.momentum = 0;
  ZT_CHECK_OK(zt_optim_new(&c, 2, ps, &o));
  ZT_CHECK_OK(zt_optim_state(o, &n, &names, &ts));
  ZT_CHECK(n == 0 && optim_bytes() == base);
  zt_optim_free(o);
  free_params(2, ps);
}

/* Loading state (and the step count) into a fresh optimizer before its first step
 * continues exactly where the first one was: the checkpoint-resume path. */
static void test_state_load_resumes_bitwise(void) {
  int64_t s[] = {9, 7};
  for (int kind = 0; kind < 2; kind++) {
    zt_param a = make_param("w", 2, s, true, 4);
    zt_param b = make_param("w", 2, s, true, 4);
    zt_optim_config c = zt_optim_default(kind == 0 ? ZT_OPTIM_ADAMW : ZT_OPTIM_SGD);
    c.weight_decay = 0.1;
    zt_optim *oa = NULL, *ob = NULL;
    ZT_CHECK_OK(zt_optim_new(&c, 1, &a, &oa));
    for (int st = 0; st < 2; st++) {
      set_grad(&a, 50 + (uint64_t)st);
      ZT_CHECK_OK(zt_optim_step(oa, 0.02));
    }
    /* "Checkpoint": weights, state, step count into b / ob. */
    bool prev = zt_set_grad_enabled(false); /* b requires grad: copy_ wants grad mode off */
    ZT_CHECK_OK(zt_tensor_copy_(b.tensor, a.tensor));
    zt_set_grad_enabled(prev);
    ZT_CHECK_OK(zt_optim_new(&c, 1, &b, &ob));
    int na, nb;
    const char *const *names_a, *const *names_b;
    zt_tensor *const *ta, *const *tb;
    ZT_CHECK_OK(zt_optim_state(oa, &na, &names_a, &ta));
    ZT_CHECK_OK(zt_optim_state(ob, &nb, &names_b, &tb));
    ZT_CHECK(na == nb);
    for (int i = 0; i < na && na == nb; i++) {
      ZT_CHECK(!strcmp(names_a[i], names_b[i]));
      ZT_CHECK_OK(zt_tensor_copy_(tb[i], ta[i]));
    }
    zt_optim_set_step_count(ob, zt_optim_step_count(oa));
    set_grad(&a, 60);
    set_grad(&b, 60);
    ZT_CHECK_OK(zt_optim_step(oa, 0.01));
    ZT_CHECK_OK(zt_optim_step(ob, 0.01));
    ZT_CHECK(zt_test_bitwise_equal(a.tensor, b.tensor));
    ZT_CHECK(zt_optim_step_count(ob) == 3);
    zt_optim_free(oa);
    zt_optim_free(ob);
    zt_tensor_free(a.tensor);
    zt_tensor_free(b.tensor);
  }
}

/* zt_optim_step_params over parts of the list, then zt_optim_step_finish, is zt_optim_step
 * (OffloadModel updates a slice's parameters at a time); a bad index changes nothing. */
static void test_step_params(void) {
  int64_t s0[] = {9, 7}, s1[] = {5};
  for (int kind = 0; kind < 2; kind++) {
    zt_param a[2] = {make_param("w", 2, s0, true, 4), make_param("b", 1, s1, false, 5)};
    zt_param b[2] = {make_param("w", 2, s0, true, 4), make_param("b", 1, s1, false, 5)};
    zt_optim_config c = zt_optim_default(kind == 0 ? ZT_OPTIM_ADAMW : ZT_OPTIM_SGD);
    zt_optim *oa = NULL, *ob = NULL;
    ZT_CHECK_OK(zt_optim_new(&c, 2, a, &oa));
    ZT_CHECK_OK(zt_optim_new(&c, 2, b, &ob));
    const zt_param *listed = NULL;
    ZT_CHECK(zt_optim_params(ob, &listed) == 2 && listed == b);
    for (int st = 0; st < 3; st++) {
      for (int i = 0; i < 2; i++) set_grad(&a[i], 90 + (uint64_t)(st * 2 + i)), set_grad(&b[i], 90 + (uint64_t)(st * 2 + i));
      ZT_CHECK_OK(zt_optim_step(oa, 0.02));
      ZT_CHECK_OK(zt_optim_step_params(ob, 0.02, 1, (int[]){1}));
      ZT_CHECK(zt_optim_step_count(ob) == st); /* not yet counted */
      ZT_CHECK_ERR(zt_optim_step_params(ob, 0.02, 1, (int[]){2}), ZT_STATUS_INVALID_ARG, "outside the optimizer's 2");
      ZT_CHECK_OK(zt_optim_step_params(ob, 0.02, 1, (int[]){0}));
      zt_optim_step_finish(ob);
    }
    for (int i = 0; i < 2; i++) ZT_CHECK(zt_test_bitwise_equal(a[i].tensor, b[i].tensor));
    ZT_CHECK(zt_optim_step_count(ob) == 3);
    zt_optim_free(oa);
    zt_optim_free(ob);
    free_params(2, a);
    free_params(2, b);
  }
}

static zt_tensor *zeros1(int64_t n) {
  zt_tensor *t = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(1, &n, ZT_DTYPE_F32, ZT_CPU, &t));
  return t;
}

/* zt_optim_step_param_range over ranges covering a parameter (uneven, one element, the rest),
 * with state buffers the caller keeps and copies in and out, is bitwise zt_optim_step_params
 * over 3 steps: parameter and state (AdamW, SGD with momentum, plain SGD); a failing call
 * (bad index, range, buffers, grad) changes nothing; a parameter without a grad is skipped. */
static void test_step_param_range(void) {
  int64_t shape[] = {13, 77}; /* 1001 elements, above the loops' parallel threshold in the big range */
  enum { N = 13 * 77 };
  const int64_t cuts[] = {0, 1, 300, 301, 1000, N};
  enum { NC = sizeof cuts / sizeof *cuts - 1 };
  for (int kind = 0; kind < 3; kind++) {
    zt_optim_config c = zt_optim_default(kind == 0 ? ZT_OPTIM_ADAMW : ZT_OPTIM_SGD);
    if (kind == 2) c.momentum = 0;
    zt_param a = make_param("w", 2, shape, true, 4), b = make_param("w", 2, shape, true, 4);
    zt_optim *oa = NULL, *ob = NULL;
    ZT_CHECK_OK(zt_optim_new(&c, 1, &a, &oa));
    ZT_CHECK_OK(zt_optim_new(&c, 1, &b, &ob));
    int ns = kind == 0 ? 2 : kind == 1 ? 1 : 0;
    zt_tensor *full[2] = {NULL, NULL}; /* b's state, kept by the caller */
    for (int q = 0; q < ns; q++) full[q] = zeros1(N);
    for (int st = 0; st < 3; st++) {
      set_grad(&a, 50 + (uint64_t)st), set_grad(&b, 50 + (uint64_t)st);
      ZT_CHECK_OK(zt_optim_step_params(oa, 0.03, 1, (int[]){0}));
      zt_optim_step_finish(oa);
      for (int k = 0; k < NC; k++) {
        int64_t off = cuts[k], len = cuts[k + 1] - cuts[k];
        zt_tensor *buf[2] = {NULL, NULL};
        float *fd, *bd;
        for (int q = 0; q < ns; q++) {
          buf[q] = zeros1(len);
          if (zt_tensor_data(full[q], (void **)&fd) || zt_tensor_data(buf[q], (void **)&bd)) continue;
          memcpy(bd, fd + off, (size_t)len * 4);
        }
        if (k == 1) { /* failures first: nothing changes */
          zt_tensor *w0 = NULL;
          ZT_CHECK_OK(zt_tensor_clone_data(b.tensor, ZT_MEM_TAG_TEMP, &w0));
          ZT_CHECK_ERR(zt_optim_step_param_range(ob, 0.03, 1, off, len, ns, buf), ZT_STATUS_INVALID_ARG,
                       "outside the optimizer's 1");
          ZT_CHECK_ERR(zt_optim_step_param_range(ob, 0.03, 0, N - 1, 2, ns, buf), ZT_STATUS_INVALID_ARG,
                       "outside parameter 'w' of 1001 elements");
          ZT_CHECK_ERR(zt_optim_step_param_range(ob, 0.03, 0, off, len, ns + 1, buf), ZT_STATUS_INVALID_ARG,
                       "this optimizer keeps");
          ZT_CHECK_ERR(zt_optim_step_param_range(ob, NAN, 0, off, len, ns, buf), ZT_STATUS_INVALID_ARG,
                       "invalid learning rate");
          if (ns) {
            ZT_CHECK_ERR(zt_optim_step_param_range(ob, 0.03, 0, off, len + 1, ns, buf), ZT_STATUS_INVALID_ARG,
                         "contiguous f32 tensor of 300 elements");
            if (ns == 2)
              ZT_CHECK_ERR(zt_optim_step_param_range(ob, 0.03, 0, off, len, ns, (zt_tensor *[]){buf[0], buf[0]}),
                           ZT_STATUS_INVALID_ARG, "overlap");
          }
          zt_tensor *g = b.tensor->grad;
          b.tensor->grad = zeros1(N); /* wrong shape */
          ZT_CHECK_ERR(zt_optim_step_param_range(ob, 0.03, 0, off, len, ns, buf), ZT_STATUS_SHAPE, "its grad has shape");
          zt_tensor_free(b.tensor->grad);
          b.tensor->grad = NULL; /* no grad: skipped */
          ZT_CHECK_OK(zt_optim_step_param_range(ob, 0.03, 0, off, len, ns, buf));
          b.tensor->grad = g;
          ZT_CHECK(zt_test_bitwise_equal(w0, b.tensor));
          zt_tensor_free(w0);
        }
        ZT_CHECK_OK(zt_optim_step_param_range(ob, 0.03, 0, off, len, ns, buf));
        for (int q = 0; q < ns; q++) {
          if (zt_tensor_data(full[q], (void **)&fd) || zt_tensor_data(buf[q], (void **)&bd)) continue;
          memcpy(fd + off, bd, (size_t)len * 4);
          zt_tensor_free(buf[q]);
        }
      }
      ZT_CHECK(zt_optim_step_count(ob) == st); /* not counted by the ranges */
      zt_optim_step_finish(ob);
    }
    ZT_CHECK(zt_test_bitwise_equal(a.tensor, b.tensor));
    for (int q = 0; q < ns; q++) {
      zt_tensor *want = state_named(oa, zt_optim_state_name(oa, 0, q));
      float *wd, *fd;
      ZT_CHECK(want && !zt_tensor_data(want, (void **)&wd) && !zt_tensor_data(full[q], (void **)&fd) &&
               memcmp(wd, fd, N * 4) == 0);
      zt_tensor_free(full[q]);
    }
    int n;
    zt_tensor *const *ts;
    ZT_CHECK_OK(zt_optim_param_state(ob, 0, false, &n, &ts));
    ZT_CHECK(n == ns && ts == NULL); /* the ranges made none of ob's own */
    if (ns == 2) { /* one at a time: listed once both exist */
      zt_tensor *t0 = NULL, *t1 = NULL;
      ZT_CHECK_OK(zt_optim_param_state_one(ob, 0, 0, &t0));
      ZT_CHECK_OK(zt_optim_param_state(ob, 0, false, &n, &ts));
      ZT_CHECK(ts == NULL && t0);
      ZT_CHECK_OK(zt_optim_param_state_one(ob, 0, 1, &t1));
      ZT_CHECK_OK(zt_optim_param_state(ob, 0, false, &n, &ts));
      ZT_CHECK(ts && ts[0] == t0 && ts[1] == t1);
      ZT_CHECK_ERR(zt_optim_param_state_one(ob, 0, 2, &t1), ZT_STATUS_INVALID_ARG, "with 2 each");
    }
    zt_optim_free(oa);
    zt_optim_free(ob);
    free_params(1, &a);
    free_params(1, &b);
  }
}

/* ------------------------------------------------ thread-count independence */
/* n (above the parallel threshold, odd so thread chunks start unaligned): three AdamW
 * or SGD steps and a clip, with the given thread count. Returns weights and state. */
static void run_threads(zt_optim_kind kind, int threads, zt_tensor **w_out, zt_tensor **m_out, double *norm) {
  int prev = zt_get_num_threads();
  zt_set_num_threads(threads);
  int64_t s0[] = {100003}, s1[] = {37};
  zt_param ps[2] = {make_param("big", 1, s0, true, 21), make_param("small", 1, s1, false, 22)};
  zt_optim_config c = zt_optim_default(kind);
  zt_optim *o = NULL;
  ZT_CHECK_OK(zt_optim_new(&c, 2, ps, &o));
  for (int st = 0; st < 3; st++) {
    set_grad(&ps[0], 70 + (uint64_t)st);
    set_grad(&ps[1], 80 + (uint64_t)st);
    ZT_CHECK_OK(zt_clip_grad_norm(2, ps, 50.0, norm));
    ZT_CHECK_OK(zt_optim_step(o, 0.01));
  }
  ZT_CHECK_OK(zt_tensor_clone_data(ps[0].tensor, ZT_MEM_TAG_TEMP, w_out));
  int n;
  const char *const *names;
  zt_tensor *const *ts;
  ZT_CHECK_OK(zt_optim_state(o, &n, &names, &ts));
  ZT_CHECK_OK(zt_tensor_clone_data(ts[kind == ZT_OPTIM_ADAMW ? 1 : 0], ZT_MEM_TAG_TEMP, m_out));
  zt_optim_free(o);
  free_params(2, ps);
  zt_set_num_threads(prev);
}

static void test_threads_bitwise(void) {
  for (int kind = 0; kind < 2; kind++) {
    zt_tensor *w1 = NULL, *m1 = NULL, *w2 = NULL, *m2 = NULL;
    double n1 = 0, n2 = 0;
    run_threads((zt_optim_kind)kind, 1, &w1, &m1, &n1);
    run_threads((zt_optim_kind)kind, 2, &w2, &m2, &n2);
    ZT_CHECK(w1 && w2 && zt_test_bitwise_equal(w1, w2));
    ZT_CHECK(m1 && m2 && zt_test_bitwise_equal(m1, m2));
    ZT_CHECK(n1 == n2 && n1 > 50.0); /* the clip was active */
    zt_tensor_free(w1);
    zt_tensor_free(m1);
    zt_tensor_free(w2);
    zt_tensor_free(m2);
  }
}

/* ------------------------------------------------ clipping */
static double ref_norm(int n, const zt_param *ps) {
  double ss = 0;
  for (int i = 0; i < n; i++) {
    const zt_tensor *g = ps[i].tensor->grad;
    if (!g) continue;
    for (int64_t j = 0; j < zt_tensor_numel(g); j++) ss += zt_tensor_get(g, j) * zt_tensor_get(g, j);
  }
  return sqrt(ss);
}

static void test_clip_grad_norm(void) {
  int64_t s0[] = {40000}, s1[] = {3, 7}, s2[] = {5};
  zt_param ps[3] = {make_param("a", 1, s0, true, 1), make_param("b", 2, s1, false, 2),
                    make_param("c", 1, s2, false, 3)};
  set_grad(&ps[0], 31);
  set_grad(&ps[1], 32); /* c has no grad: skipped */
  double want = ref_norm(3, ps), norm = 0;
  zt_tensor *g0 = NULL, *g1 = NULL;
  ZT_CHECK_OK(zt_tensor_clone_data(ps[0].tensor->grad, ZT_MEM_TAG_TEMP, &g0));
  ZT_CHECK_OK(zt_tensor_clone_data(ps[1].tensor->grad, ZT_MEM_TAG_TEMP, &g1));
  /* Below max_norm, and with max_norm <= 0: norm reported, grads untouched. */
  ZT_CHECK_OK(zt_clip_grad_norm(3, ps, want * 1.01, &norm));
  ZT_CHECK_NEAR(norm, want, 1e-10 * want);
  ZT_CHECK(zt_test_bitwise_equal(ps[0].tensor->grad, g0) && zt_test_bitwise_equal(ps[1].tensor->grad, g1));
  ZT_CHECK_OK(zt_clip_grad_norm(3, ps, 0, &norm));
  ZT_CHECK_NEAR(norm, want, 1e-10 * want);
  ZT_CHECK(zt_test_bitwise_equal(ps[0].tensor->grad, g0));
  /* Above: every grad scaled by max_norm / (norm + 1e-6). */
  double max_norm = 1.5;
  ZT_CHECK_OK(zt_clip_grad_norm(3, ps, max_norm, &norm));
  ZT_CHECK_NEAR(norm, want, 1e-10 * want);
  float coef = (float)(max_norm / (want + 1e-6));
  for (int64_t j = 0; j < 40000; j += 997)
    ZT_CHECK(zt_tensor_get(ps[0].tensor->grad, j) == (double)((float)zt_tensor_get(g0, j) * coef));
  for (int64_t j = 0; j < 21; j++)
    ZT_CHECK(zt_tensor_get(ps[1].tensor->grad, j) == (double)((float)zt_tensor_get(g1, j) * coef));
  double after = 0;
  ZT_CHECK_OK(zt_clip_grad_norm(3, ps, 0, &after));
  ZT_CHECK_NEAR(after, max_norm, 1e-5);
  /* Non-finite norms are reported, grads left as they are. */
  zt_set_grad_enabled(false);
  ZT_CHECK_OK(zt_tensor_set(ps[1].tensor->grad, 4, INFINITY));
  ZT_CHECK_OK(zt_tensor_copy_(g0, ps[0].tensor->grad));
  ZT_CHECK_OK(zt_clip_grad_norm(3, ps, 1.0, &norm));
  ZT_CHECK(isinf(norm));
  ZT_CHECK(zt_test_bitwise_equal(ps[0].tensor->grad, g0));
  ZT_CHECK_OK(zt_tensor_set(ps[1].tensor->grad, 4, NAN));
  ZT_CHECK_OK(zt_clip_grad_norm(3, ps, 1.0, &norm));
  ZT_CHECK(isnan(norm));
  zt_set_grad_enabled(true);
  /* No grads at all: norm 0. */
  ZT_CHECK_OK(zt_clip_grad_norm(1, &ps[2], 1.0, &norm));
  ZT_CHECK(norm == 0);
  zt_tensor_free(g0);
  zt_tensor_free(g1);
  free_params(3, ps);
}

/* ------------------------------------------------ schedule */
static void test_lr_cosine(void) {
  const double mx = 6e-4, mn = 6e-5;
  /* warm-up: (step + 1) / warmup */
  ZT_CHECK_NEAR(zt_lr_cosine(0, 10, 110, mx, mn), mx / 10, 1e-18);
  ZT_CHECK_NEAR(zt_lr_cosine(4, 10, 110, mx, mn), mx * 5 / 10, 1e-18);
  ZT_CHECK_NEAR(zt_lr_cosine(9, 10, 110, mx, mn), mx, 1e-18);
  /* cosine from max_lr at step warmup to min_lr at total */
  ZT_CHECK_NEAR(zt_lr_cosine(10, 10, 110, mx, mn), mx, 1e-18);
  ZT_CHECK_NEAR(zt_lr_cosine(60, 10, 110, mx, mn), mn + 0.5 * (mx - mn), 1e-15);
  ZT_CHECK_NEAR(zt_lr_cosine(35, 10, 110, mx, mn), mn + 0.5 * (1 + cos(M_PI * 0.25)) * (mx - mn), 1e-15);
  ZT_CHECK(zt_lr_cosine(109, 10, 110, mx, mn) > mn && zt_lr_cosine(109, 10, 110, mx, mn) < mn + 1e-6);
  ZT_CHECK_NEAR(zt_lr_cosine(110, 10, 110, mx, mn), mn, 1e-18);
  ZT_CHECK_NEAR(zt_lr_cosine(1000, 10, 110, mx, mn), mn, 1e-18);
  /* monotone after warm-up */
  for (int64_t s = 10; s < 110; s++) ZT_CHECK(zt_lr_cosine(s + 1, 10, 110, mx, mn) <= zt_lr_cosine(s, 10, 110, mx, mn));
  /* no warm-up; a negative step counts as 0 */
  ZT_CHECK_NEAR(zt_lr_cosine(0, 0, 100, mx, mn), mx, 1e-18);
  ZT_CHECK_NEAR(zt_lr_cosine(-5, 10, 110, mx, mn), mx / 10, 1e-18);
  /* total <= warmup: warm-up, then min_lr */
  ZT_CHECK_NEAR(zt_lr_cosine(3, 5, 5, mx, mn), mx * 4 / 5, 1e-18);
  ZT_CHECK_NEAR(zt_lr_cosine(5, 5, 5, mx, mn), mn, 1e-18);
}

/* ------------------------------------------------ errors */
static void test_errors(void) {
  int64_t s[] = {4, 3};
  zt_param p = make_param("w", 2, s, true, 1);
  zt_optim *o = NULL;
  zt_optim_config c = zt_optim_default(ZT_OPTIM_ADAMW);
  ZT_CHECK_ERR(zt_optim_new(NULL, 1, &p, &o), ZT_STATUS_INVALID_ARG, "config is NULL");
  ZT_CHECK_ERR(zt_optim_new(&c, 1, &p, NULL), ZT_STATUS_INVALID_ARG, "out is NULL");
  ZT_CHECK_ERR(zt_optim_new(&c, 2, NULL, &o), ZT_STATUS_INVALID_ARG, "NULL array");
  ZT_CHECK_ERR(zt_optim_new(&c, -1, &p, &o), ZT_STATUS_INVALID_ARG, "n_params >= 0");
  zt_optim_config bad = c;
  bad.kind = (zt_optim_kind)7;
  ZT_CHECK_ERR(zt_optim_new(&bad, 1, &p, &o), ZT_STATUS_INVALID_ARG, "unknown optimizer kind 7");
  bad = c;
  bad.lr = -1e-3;
  ZT_CHECK_ERR(zt_optim_new(&bad, 1, &p, &o), ZT_STATUS_INVALID_ARG, "invalid learning rate -0.001");
  bad = c;
  bad.beta1 = 1.0;
  ZT_CHECK_ERR(zt_optim_new(&bad, 1, &p, &o), ZT_STATUS_INVALID_ARG, "beta1 1: it must be in [0, 1)");
  bad = c;
  bad.beta2 = -0.1;
  ZT_CHECK_ERR(zt_optim_new(&bad, 1, &p, &o), ZT_STATUS_INVALID_ARG, "beta2 -0.1");
  bad = c;
  bad.eps = 0;
  ZT_CHECK_ERR(zt_optim_new(&bad, 1, &p, &o), ZT_STATUS_INVALID_ARG, "eps 0: it must be finite and > 0");
  bad = c;
  bad.weight_decay = -0.1;
  ZT_CHECK_ERR(zt_optim_new(&bad, 1, &p, &o), ZT_STATUS_INVALID_ARG, "invalid weight decay");
  bad = zt_optim_default(ZT_OPTIM_SGD);
  bad.momentum = -0.5;
  ZT_CHECK_ERR(zt_optim_new(&bad, 1, &p, &o), ZT_STATUS_INVALID_ARG, "SGD momentum -0.5");
  ZT_CHECK(o == NULL);

  /* parameters */
  zt_param q = p;
  q.tensor = NULL;
  snprintf(q.name, sizeof q.name, "ln_f.bias");
  ZT_CHECK_ERR(zt_optim_new(&c, 1, &q, &o), ZT_STATUS_INVALID_ARG, "parameter 0 ('ln_f.bias') has a NULL tensor");
  q.tensor = zt_test_rand_leaf(2, s, ZT_DTYPE_F64, -1, 1, 2);
  ZT_CHECK_ERR(zt_optim_new(&c, 1, &q, &o), ZT_STATUS_DTYPE, "'ln_f.bias' is f64: the optimizer updates f32");
  zt_tensor_free(q.tensor);
  ZT_CHECK_OK(zt_mul(p.tensor, p.tensor, &q.tensor));
  ZT_CHECK_ERR(zt_optim_new(&c, 1, &q, &o), ZT_STATUS_INVALID_ARG, "'ln_f.bias' is not a leaf");
  zt_tensor_free(q.tensor);
  zt_param twice[2] = {p, p};
  snprintf(twice[1].name, sizeof twice[1].name, "lm_head.weight");
  ZT_CHECK_ERR(zt_optim_new(&c, 2, twice, &o), ZT_STATUS_INVALID_ARG,
               "parameters 'w' and 'lm_head.weight' overlap in memory");

  /* step: bad lr and bad grads change nothing */
  ZT_CHECK_OK(zt_optim_new(&c, 1, &p, &o));
  ZT_CHECK_ERR(zt_optim_step(NULL, 1e-3), ZT_STATUS_INVALID_ARG, "optimizer is NULL");
  ZT_CHECK_ERR(zt_optim_step(o, -1.0), ZT_STATUS_INVALID_ARG, "zt_optim_step: invalid learning rate -1");
  ZT_CHECK_ERR(zt_optim_step(o, NAN), ZT_STATUS_INVALID_ARG, "invalid learning rate nan");
  zt_tensor *w0 = NULL;
  ZT_CHECK_OK(zt_tensor_clone_data(p.tensor, ZT_MEM_TAG_TEMP, &w0));
  int64_t s2[] = {3, 4}, ob = optim_bytes();
  p.tensor->grad = zt_test_rand(2, s2, ZT_DTYPE_F32, -1, 1, 3);
  ZT_CHECK_ERR(zt_optim_step(o, 1e-3), ZT_STATUS_SHAPE, "parameter 'w' has shape (4, 3) but its grad has shape (3, 4)");
  zt_tensor_free(p.tensor->grad);
  p.tensor->grad = zt_test_rand(2, s, ZT_DTYPE_F64, -1, 1, 3);
  ZT_CHECK_ERR(zt_optim_step(o, 1e-3), ZT_STATUS_DTYPE, "the grad of parameter 'w' is f64: it must be f32");
  ZT_CHECK(zt_optim_step_count(o) == 0);
  ZT_CHECK(zt_test_bitwise_equal(p.tensor, w0));
  ZT_CHECK(optim_bytes() == ob);

  /* clip */
  double norm;
  ZT_CHECK_ERR(zt_clip_grad_norm(1, &p, 1.0, NULL), ZT_STATUS_INVALID_ARG, "norm (the output) is NULL");
  ZT_CHECK_ERR(zt_clip_grad_norm(1, NULL, 1.0, &norm), ZT_STATUS_INVALID_ARG, "NULL array");
  ZT_CHECK_ERR(zt_clip_grad_norm(1, &p, NAN, &norm), ZT_STATUS_INVALID_ARG, "max_norm is NaN");
  zt_tensor_free(p.tensor->grad);
  ZT_CHECK_OK(zt_tensor_zeros(2, s, ZT_DTYPE_I32, ZT_CPU, &p.tensor->grad));
  ZT_CHECK_ERR(zt_clip_grad_norm(1, &p, 1.0, &norm), ZT_STATUS_DTYPE, "the grad of parameter 'w' is i32: f32 or f64");
  zt_param nul = p;
  nul.tensor = NULL;
  ZT_CHECK_ERR(zt_clip_grad_norm(1, &nul, 1.0, &norm), ZT_STATUS_INVALID_ARG, "has a NULL tensor");

  zt_optim_free(o);
  zt_tensor_free(w0);
  zt_tensor_free(p.tensor);
}

int main(void) {
  ZT_RUN(test_adamw_reference);
  ZT_RUN(test_adamw_skips_params_without_grad);
  ZT_RUN(test_sgd_reference);
  ZT_RUN(test_skip_and_zero_grad);
  ZT_RUN(test_state_names_tags_accounting);
  ZT_RUN(test_state_load_resumes_bitwise);
  ZT_RUN(test_step_params);
  ZT_RUN(test_step_param_range);
  ZT_RUN(test_threads_bitwise);
  ZT_RUN(test_clip_grad_norm);
  ZT_RUN(test_lr_cosine);
  ZT_RUN(test_errors);
  return zt_test_finish();
}
