/* Elementwise ops (add, sub, mul, div, the scalar forms, neg, exp, log, sqrt, pow, tanh,
 * relu, gelu, silu): values against naive references (bitwise for the binary ops) and known
 * values, broadcasting in every pattern, f64 gradient checks, grads for only some
 * inputs, f32 against f64, strided views, large tensors on the OpenMP paths, results
 * bitwise independent of the thread count, NaN/inf edge cases, and error messages. */
#include <stdlib.h>

#include "core/status_internal.h"
#include "zt_test.h"

/* ------------------------------------------------------------------ the ops */

typedef enum op_kind {
  K_ADD, K_SUB, K_MUL, K_DIV,                                /* binary */
  K_ADD_S, K_SUB_S, K_MUL_S, K_DIV_S, K_NEG, K_EXP, K_LOG,  /* unary */
  K_SQRT, K_POW, K_TANH, K_RELU, K_GELU, K_SILU,
  K_COUNT
} op_kind;

static const char *const op_name[K_COUNT] = {"add",        "sub",        "mul",        "div",  "add_scalar", "sub_scalar",
                                             "mul_scalar", "div_scalar", "neg",        "exp",  "log",        "sqrt",
                                             "pow",        "tanh",       "relu",       "gelu",       "silu"};
static const char *const node_name[K_COUNT] = {
    "AddBackward",  "SubBackward",  "MulBackward",  "DivBackward",  "AddScalarBackward", "SubScalarBackward",
    "MulScalarBackward", "DivScalarBackward", "NegBackward", "ExpBackward", "LogBackward", "SqrtBackward",
    "PowBackward",  "TanhBackward", "ReluBackward", "GeluBackward", "SiluBackward"};

static bool is_binary(op_kind k) { return k <= K_DIV; }

static zt_status call_binary(op_kind k, zt_tensor *a, zt_tensor *b, zt_tensor **out) {
  switch (k) {
  case K_ADD: return zt_add(a, b, out);
  case K_SUB: return zt_sub(a, b, out);
  case K_MUL: return zt_mul(a, b, out);
  default: return zt_div(a, b, out);
  }
}

static zt_status call_unary(op_kind k, double s, zt_tensor *a, zt_tensor **out) {
  switch (k) {
  case K_ADD_S: return zt_add_scalar(a, s, out); case K_SUB_S: return zt_sub_scalar(a, s, out);
  case K_MUL_S: return zt_mul_scalar(a, s, out); case K_DIV_S: return zt_div_scalar(a, s, out);
  case K_NEG: return zt_neg(a, out); case K_EXP: return zt_exp(a, out); case K_LOG: return zt_log(a, out);
  case K_SQRT: return zt_sqrt(a, out); case K_POW: return zt_pow(a, s, out);
  case K_TANH: return zt_tanh(a, out); case K_RELU: return zt_relu(a, out);
  case K_SILU: return zt_silu(a, out);
  default: return zt_gelu(a, out);
  }
}

static zt_status call_op(op_kind k, double s, zt_tensor *a, zt_tensor *b, zt_tensor **out) {
  return is_binary(k) ? call_binary(k, a, b, out) : call_unary(k, s, a, out);
}

/* GELU reference in long double, as x * sigmoid(2u) (the same function): the textbook
 * 0.5 x (1 + tanh(u)) cancels for x << 0 (at x = -5 it keeps only 9 digits in double). */
static double gelu_ref(double x) {
  long double X = x, u = 0.7978845608028654L * (X + 0.044715L * X * X * X);
  return (double)(X / (1 + expl(-2 * u)));
}

/* Reference value of a unary op in double. */
static double ref_unary(op_kind k, double s, double x) {
  switch (k) {
  case K_ADD_S: return x + s; case K_SUB_S: return x - s; case K_MUL_S: return x * s;
  case K_DIV_S: return x / s; case K_NEG: return -x; case K_EXP: return exp(x); case K_LOG: return log(x);
  case K_SQRT: return sqrt(x); case K_POW: return pow(x, s); case K_TANH: return tanh(x);
  case K_RELU: return x > 0 ? x : 0;
  case K_SILU: return (double)((long double)x / (1 + expl(-(long double)x)));
  default: return gelu_ref(x);
  }
}

/* Reference derivative of a unary op in double. */
static double ref_unary_grad(op_kind k, double s, double x) {
  switch (k) {
  case K_ADD_S: case K_SUB_S: return 1; case K_MUL_S: return s; case K_DIV_S: return 1 / s;
  case K_NEG: return -1; case K_EXP: return exp(x); case K_LOG: return 1 / x; case K_SQRT: return 0.5 / sqrt(x);
  case K_POW: return s == 0 ? 0 : s * pow(x, s - 1); case K_TANH: return 1 - tanh(x) * tanh(x);
  case K_RELU: return x > 0 ? 1 : 0;
  case K_SILU: {
    long double sg = 1 / (1 + expl(-(long double)x));
    return (double)(sg * (1 + x * (1 - sg)));
  }
  default: { /* central difference in long double (error ~1e-13); the f64 gradcheck covers it too */
    long double h = 1e-6L, X = x, up = X + h, um = X - h;
    up = up / (1 + expl(-2 * 0.7978845608028654L * (up + 0.044715L * up * up * up)));
    um = um / (1 + expl(-2 * 0.7978845608028654L * (um + 0.044715L * um * um * um)));
    return (double)((up - um) / (2 * h));
  }
  }
}

/* The scale of f(x)'s rounding errors: |f| + |x f'(x)| (intermediates such as gelu's u
 * carry relative errors that the conditioning |x f'/f| amplifies; near 0 of f this keeps
 * the relative measure meaningful). */
static double cond_scale(op_kind k, double s, double x, double fx) {
  return fabs(fx) + fabs(x * ref_unary_grad(k, s, x)) + 1e-30;
}

/* A unary case: op, scalar, and an input range where the op is smooth. */
typedef struct ucase {
  op_kind k;
  double s, lo, hi;
} ucase;

static const ucase ucases[] = {
    {K_ADD_S, 0.75, -1, 1}, {K_SUB_S, -1.25, -1, 1}, {K_MUL_S, -2.5, -1, 1}, {K_DIV_S, 3.0, -1, 1},
    {K_DIV_S, -0.1, -1, 1}, {K_NEG, 0, -1, 1},       {K_EXP, 0, -2, 2},      {K_LOG, 0, 0.2, 3},
    {K_SQRT, 0, 0.2, 3},    {K_POW, 3, -1.5, 1.5},   {K_POW, 2, -1.5, 1.5},  {K_POW, 0.5, 0.3, 2},
    {K_POW, -1.5, 0.3, 2},  {K_POW, 0, -1, 1},       {K_POW, 1, -1, 1},      {K_TANH, 0, -3, 3},
    {K_RELU, 0, -1, 1},     {K_GELU, 0, -5, 5},      {K_SILU, 0, -6, 6},
};
#define N_UCASES ((int)(sizeof ucases / sizeof ucases[0]))

/* ------------------------------------------------------------------ helpers */

static zt_tensor *from_vals(int nd, const int64_t *shape, zt_dtype dt, const double *v) {
  zt_tensor *t = NULL;
  ZT_CHECK_OK(zt_tensor_empty(nd, shape, dt, ZT_CPU, &t));
  for (int64_t i = 0; i < zt_tensor_numel(t); i++) ZT_CHECK_OK(zt_tensor_set(t, i, v[i]));
  return t;
}

static zt_tensor *cast_to(zt_tensor *t, zt_dtype dt) {
  zt_tensor *o = NULL;
  bool prev = zt_set_grad_enabled(false);
  ZT_CHECK_OK(zt_cast(t, dt, &o));
  zt_set_grad_enabled(prev);
  return o;
}

static void free_list(zt_tensor *const *ts, size_t n) {
  for (size_t i = 0; i < n; i++) zt_tensor_free(ts[i]);
}
#define FREE(...) free_list((zt_tensor *[]){__VA_ARGS__}, sizeof((zt_tensor *[]){__VA_ARGS__}) / sizeof(zt_tensor *))

/* A contiguous copy with no autograd history. */
static zt_tensor *copy_of(const zt_tensor *t) {
  zt_tensor *o = NULL;
  ZT_CHECK_OK(zt_tensor_clone_data(t, zt_mem_tag_current(), &o));
  return o;
}

/* Move values within margin of 0 out to +-margin (relu away from its kink). Before
 * requires_grad is set. */
static void away_from_zero(zt_tensor *t, double margin) {
  for (int64_t i = 0; i < zt_tensor_numel(t); i++) {
    double v = zt_tensor_get(t, i);
    if (fabs(v) < margin) ZT_CHECK_OK(zt_tensor_set(t, i, v < 0 ? v - margin : v + margin));
  }
}

/* Random input for a unary case (relu kept away from 0). */
static zt_tensor *ucase_input(const ucase *c, int nd, const int64_t *shape, zt_dtype dt, uint64_t seed, bool leaf) {
  zt_tensor *t = zt_test_rand(nd, shape, dt, c->lo, c->hi, seed);
  if (c->k == K_RELU) away_from_zero(t, 0.1);
  if (leaf) ZT_CHECK_OK(zt_tensor_set_requires_grad(t, true));
  return t;
}

/* Logical index in t (broadcast right-aligned to out) of out's logical index i. */
static int64_t bcast_index(const zt_tensor *t, int ond, const int64_t *oshape, int64_t i) {
  int64_t idx = 0, mul = 1;
  for (int d = ond - 1; d >= 0; d--) {
    int64_t k = i % oshape[d];
    i /= oshape[d];
    int td = d - (ond - t->ndim);
    if (td < 0) continue;
    if (t->shape[td] != 1) idx += k * mul;
    mul *= t->shape[td];
  }
  return idx;
}

/* out == a op b elementwise with broadcasting, computed in out's dtype: must be bitwise. */
static void check_binary_values(op_kind k, zt_tensor *a, zt_tensor *b, zt_tensor *out, const char *what) {
  int64_t n = zt_tensor_numel(out), bad = -1;
  for (int64_t i = 0; i < n && bad < 0; i++) {
    double x = zt_tensor_get(a, bcast_index(a, out->ndim, out->shape, i));
    double y = zt_tensor_get(b, bcast_index(b, out->ndim, out->shape, i));
    double r;
    if (out->dtype == ZT_DTYPE_F32) {
      float fx = (float)x, fy = (float)y;
      r = k == K_ADD ? fx + fy : k == K_SUB ? fx - fy : k == K_MUL ? fx * fy : fx / fy;
    } else {
      r = k == K_ADD ? x + y : k == K_SUB ? x - y : k == K_MUL ? x * y : x / y;
    }
    double got = zt_tensor_get(out, i);
    if (memcmp(&got, &r, sizeof r) != 0) bad = i;
  }
  if (bad >= 0)
    zt_test_fail(__FILE__, __LINE__, "%s %s (%s): element %lld differs from the reference", op_name[k], what,
                 zt_dtype_name(out->dtype), (long long)bad);
}

/* A broadcast pattern: shapes of a and b, and of the result. */
typedef struct bpat {
  const char *name;
  int na;
  int64_t sa[4];
  int nb;
  int64_t sb[4];
  int no;
  int64_t so[4];
} bpat;

static const bpat bpats[] = {
    {"same shape", 2, {2, 3}, 2, {2, 3}, 2, {2, 3}},
    {"b scalar-shaped (1,)", 2, {2, 3}, 1, {1}, 2, {2, 3}},
    {"a scalar-shaped (1,)", 1, {1}, 2, {2, 3}, 2, {2, 3}},
    {"b 0-d", 2, {2, 3}, 0, {0}, 2, {2, 3}},
    {"a 0-d", 0, {0}, 2, {2, 3}, 2, {2, 3}},
    {"both 0-d", 0, {0}, 0, {0}, 0, {0}},
    {"0-d and (1,)", 0, {0}, 1, {1}, 1, {1}},
    {"(3,1) vs (1,4)", 2, {3, 1}, 2, {1, 4}, 2, {3, 4}},
    {"b leading-dim broadcast", 3, {2, 3, 4}, 1, {4}, 3, {2, 3, 4}},
    {"a leading-dim broadcast", 2, {3, 4}, 3, {2, 3, 4}, 3, {2, 3, 4}},
    {"column (3,1) vs (3,4)", 2, {3, 4}, 2, {3, 1}, 2, {3, 4}},
    {"both broadcast (2,1,4) vs (3,1)", 3, {2, 1, 4}, 2, {3, 1}, 3, {2, 3, 4}},
    {"both broadcast 4-d", 4, {2, 1, 3, 1}, 3, {4, 1, 2}, 4, {2, 4, 3, 2}},
    {"size-1 result", 2, {1, 1}, 1, {1}, 2, {1, 1}},
};
#define N_BPATS ((int)(sizeof bpats / sizeof bpats[0]))

/* Inputs for a binary op: divisors kept in [0.5, 2]. */
static void binary_inputs(op_kind k, const bpat *p, zt_dtype dt, uint64_t seed, bool leaves, zt_tensor **a,
                          zt_tensor **b) {
  *a = zt_test_rand(p->na, p->sa, dt, -1, 1, seed);
  *b = k == K_DIV ? zt_test_rand(p->nb, p->sb, dt, 0.5, 2, seed + 1) : zt_test_rand(p->nb, p->sb, dt, -1, 1, seed + 1);
  if (leaves) {
    ZT_CHECK_OK(zt_tensor_set_requires_grad(*a, true));
    ZT_CHECK_OK(zt_tensor_set_requires_grad(*b, true));
  }
}

/* ------------------------------------------------------------------ gradcheck fns */

/* view modes applied to input 0 inside the checked function */
enum { VIEW_NONE, VIEW_TRANSPOSE, VIEW_NARROW };

typedef struct gc_ud {
  op_kind k;
  double s;
  int view;
} gc_ud;

static zt_status gc_fn(zt_tensor *const *in, zt_tensor **out, void *ud) {
  const gc_ud *u = ud;
  zt_tensor *x = in[0], *v = NULL;
  if (u->view == VIEW_TRANSPOSE) ZT_TRY(zt_transpose(x, 0, 1, &v));
  if (u->view == VIEW_NARROW) ZT_TRY(zt_narrow(x, 1, 1, x->shape[1] - 2, &v));
  if (v) x = v;
  zt_status s = call_op(u->k, u->s, x, is_binary(u->k) ? in[1] : NULL, out);
  zt_tensor_free(v);
  return s;
}

/* ------------------------------------------------------------------ values */

static void test_binary_values_every_pattern(void) {
  for (int dt = 0; dt < 2; dt++)
    for (int k = K_ADD; k <= K_DIV; k++)
      for (int p = 0; p < N_BPATS; p++) {
        const bpat *bp = &bpats[p];
        zt_tensor *a, *b, *o = NULL;
        binary_inputs(k, bp, dt ? ZT_DTYPE_F64 : ZT_DTYPE_F32, 10 + p, false, &a, &b);
        ZT_CHECK_OK(call_binary(k, a, b, &o));
        if (o) {
          if (!zt_shape_equal(o->ndim, o->shape, bp->no, bp->so))
            zt_test_fail(__FILE__, __LINE__, "%s %s: wrong result shape", op_name[k], bp->name);
          else
            check_binary_values(k, a, b, o, bp->name);
          ZT_CHECK(o->dtype == a->dtype);
          ZT_CHECK(!o->requires_grad && !o->grad_fn);
        }
        FREE(a, b, o);
      }
}

static void test_binary_known_values(void) {
  double av[] = {1, -2, 3.5, 0, 6, -7}, bv[] = {2, 4, -0.5};
  double exp_add[] = {3, 2, 3, 2, 10, -7.5}, exp_sub[] = {-1, -6, 4, -2, 2, -6.5};
  double exp_mul[] = {2, -8, -1.75, 0, 24, 3.5}, exp_div[] = {0.5, -0.5, -7, 0, 1.5, 14};
  const double *want[] = {exp_add, exp_sub, exp_mul, exp_div};
  for (int dt = 0; dt < 2; dt++) {
    zt_dtype t = dt ? ZT_DTYPE_F64 : ZT_DTYPE_F32;
    zt_tensor *a = from_vals(2, (int64_t[]){2, 3}, t, av), *b = from_vals(1, (int64_t[]){3}, t, bv);
    for (int k = K_ADD; k <= K_DIV; k++) {
      zt_tensor *o = NULL;
      ZT_CHECK_OK(call_binary(k, a, b, &o));
      for (int i = 0; o && i < 6; i++) ZT_CHECK(zt_tensor_get(o, i) == want[k][i]);
      zt_tensor_free(o);
    }
    FREE(a, b);
  }
}

static void test_unary_known_values(void) {
  struct {
    op_kind k;
    double s, x, y;
  } kv[] = {
      {K_GELU, 0, 1.0, 0.8411919906082768}, {K_GELU, 0, -1.0, -0.1588080093917233},
      /* exact values (40-digit arithmetic), rounded */
      {K_GELU, 0, 3.0, 2.996362607918227}, {K_GELU, 0, -3.0, -0.0036373920817730188},
      {K_GELU, 0, 0.5, 0.34571400982514392}, {K_GELU, 0, -5.0, -2.2917961966295060e-07},
      {K_GELU, 0, 0.0, 0.0}, {K_TANH, 0, 0.5, 0.46211715726000974},
      {K_TANH, 0, -2.0, -0.9640275800758169}, {K_TANH, 0, 0.0, 0.0},
      {K_EXP, 0, -1.5, 0.22313016014842982}, {K_EXP, 0, 0.0, 1.0}, {K_LOG, 0, 3.0, 1.0986122886681098},
      {K_LOG, 0, 1.0, 0.0}, {K_SQRT, 0, 3.0, 1.7320508075688772}, {K_SQRT, 0, 16.0, 4.0},
      {K_POW, 3, 2.0, 8.0}, {K_POW, -1.5, 2.0, 0.3535533905932738},
      {K_POW, 3.5, 0.7, 0.28697438910118783}, {K_POW, 2, -3.0, 9.0}, {K_POW, 0, 0.0, 1.0},
      {K_RELU, 0, -1.5, 0.0}, {K_RELU, 0, 2.5, 2.5}, {K_NEG, 0, 2.5, -2.5}, {K_ADD_S, 0.25, 1.0, 1.25},
      {K_SUB_S, 0.25, 1.0, 0.75}, {K_MUL_S, -3, 1.5, -4.5}, {K_DIV_S, 4, 3.0, 0.75},
  };
  for (size_t c = 0; c < sizeof kv / sizeof kv[0]; c++)
    for (int dt = 0; dt < 2; dt++) {
      zt_dtype t = dt ? ZT_DTYPE_F64 : ZT_DTYPE_F32;
      zt_tensor *x = from_vals(0, NULL, t, &kv[c].x), *y = NULL;
      ZT_CHECK_OK(call_unary(kv[c].k, kv[c].s, x, &y));
      if (y) {
        double got = zt_tensor_get(y, 0);
        double tol = (dt ? 4e-16 : 2.5e-7) * cond_scale(kv[c].k, kv[c].s, kv[c].x, kv[c].y);
        if (!(fabs(got - kv[c].y) <= tol))
          zt_test_fail(__FILE__, __LINE__, "%s(%g) %s = %.17g, want %.17g", op_name[kv[c].k], kv[c].x,
                       zt_dtype_name(t), got, kv[c].y);
        ZT_CHECK(y->ndim == 0);
      }
      FREE(x, y);
    }
}

/* Every unary case on many points, both dtypes, against the double reference; f32 within
 * a few ulp of the exact value. */
static void test_unary_values_sweep(void) {
  int64_t shape[] = {7, 129};
  for (int c = 0; c < N_UCASES; c++)
    for (int dt = 0; dt < 2; dt++) {
      const ucase *u = &ucases[c];
      zt_dtype t = dt ? ZT_DTYPE_F64 : ZT_DTYPE_F32;
      zt_tensor *x = ucase_input(u, 2, shape, t, 100 + c, false), *y = NULL;
      ZT_CHECK_OK(call_unary(u->k, u->s, x, &y));
      double worst = 0;
      for (int64_t i = 0; y && i < zt_tensor_numel(x); i++) {
        double sv = t == ZT_DTYPE_F32 ? (float)u->s : u->s, xv = zt_tensor_get(x, i), r = ref_unary(u->k, sv, xv);
        double e = fabs(zt_tensor_get(y, i) - r) / cond_scale(u->k, sv, xv, r);
        if (!(e <= worst)) worst = e;
      }
      double tol = dt ? 1e-14 : 4e-7;
      if (!(worst <= tol))
        zt_test_fail(__FILE__, __LINE__, "%s (s=%g) %s: max relative error %g > %g", op_name[u->k], u->s,
                     zt_dtype_name(t), worst, tol);
      FREE(x, y);
    }
}

/* The f32 tanh and gelu (own vectorised exp) on a dense grid and across the tanh
 * polynomial / exp switch at |x| = 0.625, tiny and huge values: relative error against
 * the f64 reference, forward and derivative. */
static void test_f32_tanh_gelu_accuracy(void) {
  int64_t n = 48001;
  double *v = malloc(sizeof *v * (size_t)n);
  for (int64_t i = 0; i < n; i++) v[i] = -12 + 24.0 * (double)i / (double)(n - 1);
  v[0] = 0.625f;
  v[1] = -0.625f;
  v[2] = nextafterf(0.625f, 0);
  v[3] = 1e-20;
  v[4] = -3e-8;
  v[5] = 40;
  v[6] = -40;
  v[7] = 9.0;
  v[8] = 8.99f;
  zt_tensor *x = from_vals(1, &n, ZT_DTYPE_F32, v);
  ZT_CHECK_OK(zt_tensor_set_requires_grad(x, true));
  op_kind ks[] = {K_TANH, K_GELU};
  for (int j = 0; j < 2; j++) {
    zt_tensor *y = NULL, *g = NULL;
    ZT_CHECK_OK(call_unary(ks[j], 0, x, &y));
    zt_tensor *ones = NULL;
    ZT_CHECK_OK(zt_tensor_full(1, &n, ZT_DTYPE_F32, ZT_CPU, 1.0, &ones));
    ZT_CHECK_OK(zt_grad(1, &y, &ones, 1, &x, false, &g));
    double wf = 0, wg = 0;
    for (int64_t i = 0; y && g && i < n; i++) {
      double xv = zt_tensor_get(x, i), r = ref_unary(ks[j], 0, xv), rg = ref_unary_grad(ks[j], 0, xv);
      double ef = fabs(zt_tensor_get(y, i) - r) / cond_scale(ks[j], 0, xv, r);
      /* derivatives are O(1) and tanh's comes from y (1 - y^2 loses ulps of y): absolute */
      double eg = fabs(zt_tensor_get(g, i) - rg) / (fabs(rg) + 1);
      if (!(ef <= wf)) wf = ef;
      if (!(eg <= wg)) wg = eg;
    }
    if (!(wf <= 3e-7)) zt_test_fail(__FILE__, __LINE__, "f32 %s: max relative error %g", op_name[ks[j]], wf);
    if (!(wg <= 2e-6)) zt_test_fail(__FILE__, __LINE__, "f32 %s derivative: max relative error %g", op_name[ks[j]], wg);
    FREE(y, g, ones);
  }
  zt_tensor_free(x);
  free(v);
}

/* NaN propagates through every unary op (relu included, so a NaN loss shows); infinities
 * give the limits. */
static void test_nan_and_inf(void) {
  for (int dt = 0; dt < 2; dt++) {
    zt_dtype t = dt ? ZT_DTYPE_F64 : ZT_DTYPE_F32;
    double v[] = {NAN, INFINITY, -INFINITY};
    zt_tensor *x = from_vals(1, (int64_t[]){3}, t, v);
    op_kind ks[] = {K_NEG, K_EXP, K_LOG, K_SQRT, K_TANH, K_RELU, K_GELU, K_ADD_S, K_MUL_S, K_DIV_S, K_POW};
    for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++) {
      zt_tensor *y = NULL;
      ZT_CHECK_OK(call_unary(ks[j], 1.5, x, &y));
      if (y && !isnan(zt_tensor_get(y, 0)))
        zt_test_fail(__FILE__, __LINE__, "%s(NaN) %s = %g, want NaN", op_name[ks[j]], zt_dtype_name(t),
                     zt_tensor_get(y, 0));
      zt_tensor_free(y);
    }
    struct {
      op_kind k;
      double pos, neg; /* f(+inf), f(-inf) */
    } lim[] = {{K_TANH, 1, -1}, {K_EXP, INFINITY, 0}, {K_RELU, INFINITY, 0}, {K_NEG, -INFINITY, INFINITY}};
    for (size_t j = 0; j < sizeof lim / sizeof lim[0]; j++) {
      zt_tensor *y = NULL;
      ZT_CHECK_OK(call_unary(lim[j].k, 0, x, &y));
      if (y) {
        ZT_CHECK(zt_tensor_get(y, 1) == lim[j].pos);
        ZT_CHECK(zt_tensor_get(y, 2) == lim[j].neg);
      }
      zt_tensor_free(y);
    }
    zt_tensor *y = NULL;
    ZT_CHECK_OK(zt_gelu(x, &y));
    if (y) ZT_CHECK(zt_tensor_get(y, 1) == INFINITY);
    zt_tensor_free(y);
    /* saturated tanh and gelu: exact limits, no NaN from exp overflow */
    double big[] = {30, -30, 200, -200};
    zt_tensor *xb = from_vals(1, (int64_t[]){4}, t, big), *yt = NULL, *yg = NULL;
    ZT_CHECK_OK(zt_tanh(xb, &yt));
    ZT_CHECK_OK(zt_gelu(xb, &yg));
    if (yt && yg) {
      ZT_CHECK(zt_tensor_get(yt, 0) == 1 && zt_tensor_get(yt, 1) == -1);
      ZT_CHECK(zt_tensor_get(yt, 2) == 1 && zt_tensor_get(yt, 3) == -1);
      ZT_CHECK(zt_tensor_get(yg, 0) == 30 && zt_tensor_get(yg, 2) == 200);
      ZT_CHECK(fabs(zt_tensor_get(yg, 1)) < 1e-30 && fabs(zt_tensor_get(yg, 3)) < 1e-30);
    }
    FREE(xb, yt, yg, x);
  }
}

/* pow with exponent 0 has grad 0 everywhere (x = 0 included: no 0 * inf NaN). */
static void test_pow_zero_exponent_grad(void) {
  for (int dt = 0; dt < 2; dt++) {
    double v[] = {0, -1, 2};
    zt_tensor *x = from_vals(1, (int64_t[]){3}, dt ? ZT_DTYPE_F64 : ZT_DTYPE_F32, v), *y = NULL, *l = NULL;
    ZT_CHECK_OK(zt_tensor_set_requires_grad(x, true));
    ZT_CHECK_OK(zt_pow(x, 0, &y));
    ZT_CHECK_OK(zt_sum(y, 0, NULL, false, &l));
    ZT_CHECK_OK(zt_backward(1, &l, NULL, false));
    ZT_CHECK(x->grad != NULL);
    for (int i = 0; x->grad && i < 3; i++) ZT_CHECK(zt_tensor_get(x->grad, i) == 0);
    for (int i = 0; y && i < 3; i++) ZT_CHECK(zt_tensor_get(y, i) == 1);
    FREE(l, y, x);
  }
}

/* ------------------------------------------------------------------ gradient checks */

static void test_gradcheck_binary_every_pattern(void) {
  for (int k = K_ADD; k <= K_DIV; k++)
    for (int p = 0; p < N_BPATS; p++) {
      zt_tensor *a, *b;
      binary_inputs(k, &bpats[p], ZT_DTYPE_F64, 30 + p, true, &a, &b);
      gc_ud u = {k, 0, VIEW_NONE};
      if (!ZT_GRADCHECK(gc_fn, 2, ((zt_tensor *[]){a, b}), &u, NULL))
        fprintf(stderr, "  (%s, %s)\n", op_name[k], bpats[p].name);
      FREE(a, b);
    }
}

static zt_status f_self(zt_tensor *const *in, zt_tensor **out, void *ud) {
  return call_binary(*(op_kind *)ud, in[0], in[0], out);
}

/* The same tensor as both inputs: both grads accumulate into it. */
static void test_gradcheck_same_tensor_twice(void) {
  for (int k = K_ADD; k <= K_DIV; k++) {
    zt_tensor *a = zt_test_rand_leaf(2, (int64_t[]){3, 2}, ZT_DTYPE_F64, 0.5, 2, 40);
    op_kind kk = k;
    ZT_GRADCHECK(f_self, 1, (&a), &kk, NULL);
    zt_tensor_free(a);
  }
}

static void test_gradcheck_unary_every_op(void) {
  int64_t shape[] = {3, 5};
  for (int c = 0; c < N_UCASES; c++) {
    const ucase *uc = &ucases[c];
    zt_tensor *x = ucase_input(uc, 2, shape, ZT_DTYPE_F64, 50 + c, true);
    gc_ud u = {uc->k, uc->s, VIEW_NONE};
    if (!ZT_GRADCHECK(gc_fn, 1, &x, &u, NULL)) fprintf(stderr, "  (%s, s=%g)\n", op_name[uc->k], uc->s);
    zt_tensor_free(x);
    /* 0-d input */
    zt_tensor *x0 = ucase_input(uc, 0, NULL, ZT_DTYPE_F64, 70 + c, true);
    ZT_GRADCHECK(gc_fn, 1, &x0, &u, NULL);
    zt_tensor_free(x0);
  }
}

/* Gradients through non-contiguous views (transpose, narrow) of the leaf. */
static void test_gradcheck_views(void) {
  for (int k = K_ADD; k <= K_DIV; k++) {
    /* transpose: a (4,3) -> (3,4) op b (4,) */
    zt_tensor *a = zt_test_rand_leaf(2, (int64_t[]){4, 3}, ZT_DTYPE_F64, -1, 1, 60);
    zt_tensor *b = zt_test_rand_leaf(1, (int64_t[]){4}, ZT_DTYPE_F64, 0.5, 2, 61);
    gc_ud u = {k, 0, VIEW_TRANSPOSE};
    ZT_GRADCHECK(gc_fn, 2, ((zt_tensor *[]){a, b}), &u, NULL);
    FREE(a, b);
    /* narrow: a (3,6) -> (3,4) op b (3,1) */
    a = zt_test_rand_leaf(2, (int64_t[]){3, 6}, ZT_DTYPE_F64, -1, 1, 62);
    b = zt_test_rand_leaf(2, (int64_t[]){3, 1}, ZT_DTYPE_F64, 0.5, 2, 63);
    u.view = VIEW_NARROW;
    ZT_GRADCHECK(gc_fn, 2, ((zt_tensor *[]){a, b}), &u, NULL);
    FREE(a, b);
  }
  for (int c = 0; c < N_UCASES; c++) {
    const ucase *uc = &ucases[c];
    for (int view = VIEW_TRANSPOSE; view <= VIEW_NARROW; view++) {
      zt_tensor *x = ucase_input(uc, 2, (int64_t[]){3, 5}, ZT_DTYPE_F64, 80 + c, true);
      gc_ud u = {uc->k, uc->s, view};
      ZT_GRADCHECK(gc_fn, 1, &x, &u, NULL);
      zt_tensor_free(x);
    }
  }
}

/* ------------------------------------------------------------------ partial grads */

/* Only one input requires grad: the other gets no .grad, the grad that is computed
 * equals the one computed when both require grad, and mul/div save only what that grad
 * reads. */
static void test_only_one_input_requires_grad(void) {
  /* saved tensors per op for (only a, only b, both) */
  int want_saved[4][3] = {{0, 0, 0}, {0, 0, 0}, {1, 1, 2}, {1, 2, 2}};
  for (int k = K_ADD; k <= K_DIV; k++)
    for (int p = 0; p < N_BPATS; p++) {
      zt_tensor *a0, *b0;
      binary_inputs(k, &bpats[p], ZT_DTYPE_F64, 90 + p, false, &a0, &b0);
      zt_tensor *gout = zt_test_rand(bpats[p].no, bpats[p].so, ZT_DTYPE_F64, -1, 1, 7);
      zt_tensor *ref[2] = {NULL, NULL};
      for (int which = 2; which >= 0; which--) { /* both first: the reference grads */
        zt_tensor *a = copy_of(a0), *b = copy_of(b0), *o = NULL;
        if (which != 1) ZT_CHECK_OK(zt_tensor_set_requires_grad(a, true));
        if (which != 0) ZT_CHECK_OK(zt_tensor_set_requires_grad(b, true));
        ZT_CHECK_OK(call_binary(k, a, b, &o));
        if (!o) break;
        ZT_CHECK(o->requires_grad && zt_tensor_grad_fn(o));
        if (zt_tensor_grad_fn(o)) {
          ZT_CHECK(strcmp(zt_node_name(zt_tensor_grad_fn(o)), node_name[k]) == 0);
          int ns = zt_node_n_saved(zt_tensor_grad_fn(o));
          if (ns != want_saved[k][which])
            zt_test_fail(__FILE__, __LINE__, "%s (%s) saved %d tensors, want %d", op_name[k],
                         which == 0 ? "only a" : which == 1 ? "only b" : "both", ns, want_saved[k][which]);
        }
        ZT_CHECK_OK(zt_backward(1, &o, &gout, false));
        if (which == 2) {
          ref[0] = a->grad;
          ref[1] = b->grad;
          a->grad = b->grad = NULL;
          ZT_CHECK(ref[0] && ref[1]);
          /* separate grads, not two views of one buffer */
          if (ref[0] && ref[1]) ZT_CHECK(ref[0]->storage != ref[1]->storage);
        } else {
          zt_tensor *got = which == 0 ? a->grad : b->grad, *other = which == 0 ? b->grad : a->grad;
          ZT_CHECK(other == NULL);
          ZT_CHECK(got && ref[which] && zt_test_bitwise_equal(got, ref[which]));
        }
        FREE(o, a, b);
      }
      /* and through the gradcheck with one leaf */
      for (int which = 0; which < 2; which++) {
        zt_tensor *a = copy_of(a0), *b = copy_of(b0);
        ZT_CHECK_OK(zt_tensor_set_requires_grad(which ? b : a, true));
        gc_ud u = {k, 0, VIEW_NONE};
        ZT_GRADCHECK(gc_fn, 2, ((zt_tensor *[]){a, b}), &u, NULL);
        ZT_CHECK((which ? a : b)->grad == NULL);
        FREE(a, b);
      }
      FREE(ref[0], ref[1], gout, a0, b0);
    }
}

/* Both inputs require grad but zt_grad asks for one: only that one is computed, and no
 * .grad is touched. */
static void test_partial_zt_grad(void) {
  for (int k = K_ADD; k <= K_DIV; k++)
    for (int which = 0; which < 2; which++) {
      zt_tensor *a, *b, *o = NULL, *g = NULL;
      binary_inputs(k, &bpats[11], ZT_DTYPE_F64, 120, true, &a, &b);
      ZT_CHECK_OK(call_binary(k, a, b, &o));
      zt_tensor *gout = zt_test_rand(o->ndim, o->shape, ZT_DTYPE_F64, -1, 1, 3);
      zt_tensor *want = which ? b : a;
      ZT_CHECK_OK(zt_grad(1, &o, &gout, 1, &want, true, &g));
      ZT_CHECK(g && zt_shape_equal(g->ndim, g->shape, want->ndim, want->shape));
      ZT_CHECK(a->grad == NULL && b->grad == NULL);
      ZT_CHECK_OK(zt_backward(1, &o, &gout, false));
      ZT_CHECK(g && want->grad && zt_test_bitwise_equal(g, want->grad));
      FREE(g, gout, o, a, b);
    }
}

/* No node without a grad to compute; node names when there is one. */
static void test_recording(void) {
  zt_tensor *x = zt_test_rand(1, (int64_t[]){4}, ZT_DTYPE_F64, 0.5, 1, 1);
  zt_tensor *xl = zt_test_rand_leaf(1, (int64_t[]){4}, ZT_DTYPE_F64, 0.5, 1, 2);
  for (int k = 0; k < K_COUNT; k++) {
    zt_tensor *o1 = NULL, *o2 = NULL, *o3 = NULL;
    ZT_CHECK_OK(call_op(k, 2, x, x, &o1));
    ZT_CHECK_OK(call_op(k, 2, xl, x, &o2));
    bool prev = zt_set_grad_enabled(false);
    ZT_CHECK_OK(call_op(k, 2, xl, xl, &o3));
    zt_set_grad_enabled(prev);
    ZT_CHECK(o1 && !o1->requires_grad && !zt_tensor_grad_fn(o1));
    ZT_CHECK(o3 && !o3->requires_grad && !zt_tensor_grad_fn(o3));
    ZT_CHECK(o2 && o2->requires_grad && zt_tensor_grad_fn(o2));
    if (o2 && zt_tensor_grad_fn(o2) && strcmp(zt_node_name(zt_tensor_grad_fn(o2)), node_name[k]) != 0)
      zt_test_fail(__FILE__, __LINE__, "%s: node is %s, want %s", op_name[k], zt_node_name(zt_tensor_grad_fn(o2)),
                   node_name[k]);
    FREE(o1, o2, o3);
  }
  FREE(x, xl);
}

/* ------------------------------------------------------------------ f32 vs f64 */

/* Forward and grads in f32 agree with f64 on the same (f32-representable) inputs. */
static void test_f32_matches_f64(void) {
  for (int k = K_ADD; k <= K_DIV; k++)
    for (int p = 0; p < N_BPATS; p++) {
      const bpat *bp = &bpats[p];
      zt_tensor *a32, *b32;
      binary_inputs(k, bp, ZT_DTYPE_F32, 140 + p, true, &a32, &b32);
      zt_tensor *a64 = cast_to(a32, ZT_DTYPE_F64), *b64 = cast_to(b32, ZT_DTYPE_F64);
      ZT_CHECK_OK(zt_tensor_set_requires_grad(a64, true));
      ZT_CHECK_OK(zt_tensor_set_requires_grad(b64, true));
      zt_tensor *g32 = zt_test_rand(bp->no, bp->so, ZT_DTYPE_F32, -1, 1, 5), *g64 = cast_to(g32, ZT_DTYPE_F64);
      zt_tensor *o32 = NULL, *o64 = NULL;
      ZT_CHECK_OK(call_binary(k, a32, b32, &o32));
      ZT_CHECK_OK(call_binary(k, a64, b64, &o64));
      ZT_CHECK_OK(zt_backward(1, &o32, &g32, false));
      ZT_CHECK_OK(zt_backward(1, &o64, &g64, false));
      double tol = 1e-5;
      if (!(zt_test_max_abs_diff(o32, o64) <= tol) || !a32->grad || !a64->grad ||
          !(zt_test_max_abs_diff(a32->grad, a64->grad) <= tol) || !(zt_test_max_abs_diff(b32->grad, b64->grad) <= tol))
        zt_test_fail(__FILE__, __LINE__, "%s %s: f32 and f64 disagree", op_name[k], bp->name);
      ZT_CHECK(o32->dtype == ZT_DTYPE_F32 && a32->grad && a32->grad->dtype == ZT_DTYPE_F32);
      FREE(a32, b32, a64, b64, g32, g64, o32, o64);
    }
  for (int c = 0; c < N_UCASES; c++) {
    const ucase *uc = &ucases[c];
    zt_tensor *x32 = ucase_input(uc, 2, (int64_t[]){9, 31}, ZT_DTYPE_F32, 160 + c, true);
    zt_tensor *x64 = cast_to(x32, ZT_DTYPE_F64);
    ZT_CHECK_OK(zt_tensor_set_requires_grad(x64, true));
    zt_tensor *g32 = zt_test_rand(2, (int64_t[]){9, 31}, ZT_DTYPE_F32, -1, 1, 6), *g64 = cast_to(g32, ZT_DTYPE_F64);
    zt_tensor *o32 = NULL, *o64 = NULL;
    ZT_CHECK_OK(call_unary(uc->k, uc->s, x32, &o32));
    ZT_CHECK_OK(call_unary(uc->k, uc->s, x64, &o64));
    ZT_CHECK_OK(zt_backward(1, &o32, &g32, false));
    ZT_CHECK_OK(zt_backward(1, &o64, &g64, false));
    /* relative to the magnitudes (exp, pow reach ~10) */
    double df = 0, dg = 0;
    for (int64_t i = 0; o32 && o64 && x32->grad && x64->grad && i < 9 * 31; i++) {
      double e = fabs(zt_tensor_get(o32, i) - zt_tensor_get(o64, i)) / (1 + fabs(zt_tensor_get(o64, i)));
      double eg = fabs(zt_tensor_get(x32->grad, i) - zt_tensor_get(x64->grad, i)) /
                  (1 + fabs(zt_tensor_get(x64->grad, i)));
      if (!(e <= df)) df = e;
      if (!(eg <= dg)) dg = eg;
    }
    if (!(df <= 1e-6) || !(dg <= 2e-6) || !x32->grad)
      zt_test_fail(__FILE__, __LINE__, "%s (s=%g): f32 vs f64 differ by %g (forward), %g (grad)", op_name[uc->k],
                   uc->s, df, dg);
    FREE(x32, x64, g32, g64, o32, o64);
  }
}

/* ------------------------------------------------------------------ strided inputs */

/* Ops on transposed and narrowed views give bitwise what they give on contiguous copies. */
static void test_non_contiguous_inputs(void) {
  for (int dt = 0; dt < 2; dt++) {
    zt_dtype t = dt ? ZT_DTYPE_F64 : ZT_DTYPE_F32;
    /* small and large (the parallel kernels after the contiguous copy) */
    int64_t sizes[2][2] = {{5, 7}, {190, 181}};
    for (int sz = 0; sz < 2; sz++) {
      int64_t r = sizes[sz][0], c = sizes[sz][1];
      zt_tensor *base = zt_test_rand(2, (int64_t[]){r, c}, t, 0.5, 2, 170 + sz);
      zt_tensor *tr = NULL, *nw = NULL, *trc = NULL, *nwc = NULL;
      ZT_CHECK_OK(zt_transpose(base, 0, 1, &tr));      /* (c, r) */
      ZT_CHECK_OK(zt_narrow(base, 1, 2, c - 3, &nw));  /* (r, c-3) */
      ZT_CHECK(!zt_tensor_is_contiguous(tr) && !zt_tensor_is_contiguous(nw));
      ZT_CHECK_OK(zt_contiguous(tr, &trc));
      ZT_CHECK_OK(zt_contiguous(nw, &nwc));
      zt_tensor *bias_r = zt_test_rand(1, (int64_t[]){r}, t, 0.5, 2, 3);
      zt_tensor *col = zt_test_rand(2, (int64_t[]){r, 1}, t, 0.5, 2, 4);
      /* a non-contiguous second operand too: a column of base */
      zt_tensor *colv = NULL, *colvc = NULL;
      ZT_CHECK_OK(zt_narrow(base, 1, 1, 1, &colv)); /* (r, 1), stride c */
      ZT_CHECK_OK(zt_contiguous(colv, &colvc));
      for (int k = K_ADD; k <= K_DIV; k++) {
        zt_tensor *o1 = NULL, *o2 = NULL, *o3 = NULL, *o4 = NULL, *o5 = NULL, *o6 = NULL;
        ZT_CHECK_OK(call_binary(k, tr, bias_r, &o1));
        ZT_CHECK_OK(call_binary(k, trc, bias_r, &o2));
        ZT_CHECK_OK(call_binary(k, nw, col, &o3));
        ZT_CHECK_OK(call_binary(k, nwc, col, &o4));
        ZT_CHECK_OK(call_binary(k, nw, colv, &o5));
        ZT_CHECK_OK(call_binary(k, nwc, colvc, &o6));
        ZT_CHECK(o1 && o2 && zt_test_bitwise_equal(o1, o2));
        ZT_CHECK(o3 && o4 && zt_test_bitwise_equal(o3, o4));
        ZT_CHECK(o5 && o6 && zt_test_bitwise_equal(o5, o6));
        if (o1 && sz == 0) check_binary_values(k, tr, bias_r, o1, "transposed");
        FREE(o1, o2, o3, o4, o5, o6);
      }
      for (int cc = 0; cc < N_UCASES; cc++) {
        const ucase *uc = &ucases[cc];
        zt_tensor *o1 = NULL, *o2 = NULL, *o3 = NULL, *o4 = NULL;
        ZT_CHECK_OK(call_unary(uc->k, uc->s, tr, &o1));
        ZT_CHECK_OK(call_unary(uc->k, uc->s, trc, &o2));
        ZT_CHECK_OK(call_unary(uc->k, uc->s, nw, &o3));
        ZT_CHECK_OK(call_unary(uc->k, uc->s, nwc, &o4));
        ZT_CHECK(o1 && o2 && zt_test_bitwise_equal(o1, o2));
        ZT_CHECK(o3 && o4 && zt_test_bitwise_equal(o3, o4));
        FREE(o1, o2, o3, o4);
      }
      FREE(base, tr, nw, trc, nwc, bias_r, col, colv, colvc);
    }
  }
}

/* ------------------------------------------------------------------ large tensors */

/* Large broadcasts (> ZT_PAR_MIN outputs: the parallel kernel, thread ranges starting
 * mid-row) against the naive reference, bitwise. */
static const bpat big_pats[] = {
    {"same", 2, {140, 257}, 2, {140, 257}, 2, {140, 257}},
    {"bias (C,)", 2, {140, 257}, 1, {257}, 2, {140, 257}},
    {"bias (1,1,C)", 3, {4, 35, 257}, 3, {1, 1, 257}, 3, {4, 35, 257}},
    {"column (R,1)", 2, {140, 257}, 2, {140, 1}, 2, {140, 257}},
    {"scalar (1,)", 1, {1}, 2, {140, 257}, 2, {140, 257}},
    {"0-d", 2, {140, 257}, 0, {0}, 2, {140, 257}},
    {"outer (R,1)+(1,C)", 2, {140, 1}, 2, {1, 257}, 2, {140, 257}},
    {"middle (B,T,C)+(T,1)", 3, {5, 7, 1000}, 2, {7, 1}, 3, {5, 7, 1000}},
    {"two long rows", 2, {2, 18000}, 2, {2, 1}, 2, {2, 18000}},
    {"both broadcast 3-d", 3, {12, 1, 1000}, 2, {3, 1}, 3, {12, 3, 1000}},
};
#define N_BIG ((int)(sizeof big_pats / sizeof big_pats[0]))

static void test_large_broadcast_values(void) {
  for (int dt = 0; dt < 2; dt++)
    for (int p = 0; p < N_BIG; p++)
      for (int k = K_ADD; k <= K_DIV; k++) {
        zt_tensor *a, *b, *o = NULL;
        binary_inputs(k, &big_pats[p], dt ? ZT_DTYPE_F64 : ZT_DTYPE_F32, 200 + p, false, &a, &b);
        ZT_CHECK_OK(call_binary(k, a, b, &o));
        if (o) {
          ZT_CHECK(zt_shape_equal(o->ndim, o->shape, big_pats[p].no, big_pats[p].so));
          check_binary_values(k, a, b, o, big_pats[p].name);
        }
        FREE(a, b, o);
      }
}

/* Large unary ops and their backward against the double reference. */
static void test_large_unary_values(void) {
  int64_t n = 36001;
  for (int c = 0; c < N_UCASES; c++)
    for (int dt = 0; dt < 2; dt++) {
      const ucase *uc = &ucases[c];
      zt_dtype t = dt ? ZT_DTYPE_F64 : ZT_DTYPE_F32;
      double s = dt ? uc->s : (double)(float)uc->s;
      zt_tensor *x = ucase_input(uc, 1, &n, t, 300 + c, true), *y = NULL, *g = NULL;
      zt_tensor *gout = zt_test_rand(1, &n, t, -1, 1, 9);
      ZT_CHECK_OK(call_unary(uc->k, uc->s, x, &y));
      ZT_CHECK_OK(zt_grad(1, &y, &gout, 1, &x, false, &g));
      double wf = 0, wg = 0;
      for (int64_t i = 0; y && g && i < n; i++) {
        double xv = zt_tensor_get(x, i), r = ref_unary(uc->k, s, xv);
        double rg = zt_tensor_get(gout, i) * ref_unary_grad(uc->k, s, xv);
        double ef = fabs(zt_tensor_get(y, i) - r) / cond_scale(uc->k, s, xv, r);
        double eg = fabs(zt_tensor_get(g, i) - rg) / (1 + fabs(rg));
        if (!(ef <= wf)) wf = ef;
        if (!(eg <= wg)) wg = eg;
      }
      /* f64 gelu's derivative reference is a central difference (~1e-13) */
      double tf = dt ? 1e-14 : 5e-7, tg = dt ? (uc->k == K_GELU ? 1e-11 : 1e-14) : 2e-6;
      if (!(wf <= tf) || !(wg <= tg))
        zt_test_fail(__FILE__, __LINE__, "large %s (s=%g) %s: errors %g (forward), %g (grad)", op_name[uc->k], uc->s,
                     zt_dtype_name(t), wf, wg);
      FREE(x, y, g, gout);
    }
}

/* The f32 vectorised paths give each element the same bits wherever it sits: slices at
 * every alignment and length (scalar remainders, unaligned starts) match the big run. */
static void test_position_independent(void) {
  int64_t n = 40000;
  for (int dt = 0; dt < 2; dt++) {
    zt_dtype t = dt ? ZT_DTYPE_F64 : ZT_DTYPE_F32;
    zt_tensor *x = zt_test_rand_leaf(1, &n, t, -6, 6, 400), *go = zt_test_rand(1, &n, t, -1, 1, 401);
    for (int k = K_ADD_S; k < K_COUNT; k++) {
      if (k == K_LOG || k == K_SQRT || k == K_POW) continue; /* need positive inputs; libm anyway */
      zt_tensor *y = NULL, *g = NULL;
      ZT_CHECK_OK(call_unary(k, 1.5, x, &y));
      ZT_CHECK_OK(zt_grad(1, &y, &go, 1, &x, false, &g));
      for (int64_t start = 0; y && g && start < 19; start++)
        for (int64_t len = 1; len < 21; len += 3) {
          zt_tensor *xs = NULL, *gs = NULL, *ys = NULL, *gxs = NULL, *yref = NULL, *gref = NULL;
          int64_t st = start * 37 % 1000;
          ZT_CHECK_OK(zt_narrow(x, 0, st, len, &xs));
          ZT_CHECK_OK(zt_narrow(go, 0, st, len, &gs));
          ZT_CHECK_OK(call_unary(k, 1.5, xs, &ys));
          ZT_CHECK_OK(zt_grad(1, &ys, &gs, 1, &x, false, &gxs)); /* grad w.r.t. the full x */
          ZT_CHECK_OK(zt_narrow(y, 0, st, len, &yref));
          ZT_CHECK_OK(zt_narrow(g, 0, st, len, &gref));
          zt_tensor *gxn = NULL;
          if (gxs) ZT_CHECK_OK(zt_narrow(gxs, 0, st, len, &gxn));
          if (!ys || !gxn || !zt_test_bitwise_equal(ys, yref) || !zt_test_bitwise_equal(gxn, gref))
            zt_test_fail(__FILE__, __LINE__, "%s %s: slice at %lld (len %lld) differs from the full run", op_name[k],
                         zt_dtype_name(t), (long long)st, (long long)len);
          FREE(xs, gs, ys, gxs, yref, gref, gxn);
        }
      FREE(y, g);
    }
    FREE(x, go);
  }
}

/* Forward and backward of every op on > ZT_PAR_MIN elements: bitwise the same with 1 and
 * 2 threads. */
static void test_thread_count_independent(void) {
  int prev = zt_get_num_threads();
  int64_t shape[] = {180, 191};
  for (int dt = 0; dt < 2; dt++) {
    zt_dtype t = dt ? ZT_DTYPE_F64 : ZT_DTYPE_F32;
    /* binary: same shape, bias, column, scalar, outer */
    int pats[] = {0, 1, 3, 4, 6};
    for (int pi = 0; pi < 5; pi++)
      for (int k = K_ADD; k <= K_DIV; k++) {
        zt_tensor *res[2][3] = {{NULL}};
        for (int r = 0; r < 2; r++) {
          zt_set_num_threads(r + 1);
          zt_tensor *a, *b, *o = NULL;
          binary_inputs(k, &big_pats[pats[pi]], t, 500 + pi, true, &a, &b);
          zt_tensor *go = zt_test_rand(big_pats[pats[pi]].no, big_pats[pats[pi]].so, t, -1, 1, 501);
          ZT_CHECK_OK(call_binary(k, a, b, &o));
          ZT_CHECK_OK(zt_backward(1, &o, &go, false));
          res[r][0] = o;
          res[r][1] = a->grad;
          res[r][2] = b->grad;
          a->grad = b->grad = NULL;
          FREE(a, b, go);
        }
        for (int j = 0; j < 3; j++) {
          if (!res[0][j] || !res[1][j] || !zt_test_bitwise_equal(res[0][j], res[1][j]))
            zt_test_fail(__FILE__, __LINE__, "%s %s %s: %s differs between 1 and 2 threads", op_name[k],
                         big_pats[pats[pi]].name, zt_dtype_name(t), j == 0 ? "output" : j == 1 ? "grad a" : "grad b");
          FREE(res[0][j], res[1][j]);
        }
      }
    for (int c = 0; c < N_UCASES; c++) {
      const ucase *uc = &ucases[c];
      zt_tensor *res[2][2] = {{NULL}};
      for (int r = 0; r < 2; r++) {
        zt_set_num_threads(r + 1);
        zt_tensor *x = ucase_input(uc, 2, shape, t, 600 + c, true), *o = NULL;
        zt_tensor *go = zt_test_rand(2, shape, t, -1, 1, 601);
        ZT_CHECK_OK(call_unary(uc->k, uc->s, x, &o));
        ZT_CHECK_OK(zt_backward(1, &o, &go, false));
        res[r][0] = o;
        res[r][1] = x->grad;
        x->grad = NULL;
        FREE(x, go);
      }
      for (int j = 0; j < 2; j++) {
        if (!res[0][j] || !res[1][j] || !zt_test_bitwise_equal(res[0][j], res[1][j]))
          zt_test_fail(__FILE__, __LINE__, "%s (s=%g) %s: %s differs between 1 and 2 threads", op_name[uc->k], uc->s,
                       zt_dtype_name(t), j ? "grad" : "output");
        FREE(res[0][j], res[1][j]);
      }
    }
  }
  zt_set_num_threads(prev);
}

/* ------------------------------------------------------------------ edge shapes */

/* Zero-element tensors: forward and backward give empty results of the right shapes. */
static void test_zero_size(void) {
  zt_tensor *a = NULL, *b = zt_test_rand_leaf(1, (int64_t[]){3}, ZT_DTYPE_F64, -1, 1, 1);
  ZT_CHECK_OK(zt_tensor_zeros(2, (int64_t[]){0, 3}, ZT_DTYPE_F64, ZT_CPU, &a));
  ZT_CHECK_OK(zt_tensor_set_requires_grad(a, true));
  for (int k = K_ADD; k <= K_DIV; k++) {
    zt_tensor *o = NULL, *go = NULL;
    ZT_CHECK_OK(call_binary(k, a, b, &o));
    ZT_CHECK(o && zt_shape_equal(o->ndim, o->shape, 2, (int64_t[]){0, 3}));
    ZT_CHECK_OK(zt_tensor_zeros(2, (int64_t[]){0, 3}, ZT_DTYPE_F64, ZT_CPU, &go));
    if (o) ZT_CHECK_OK(zt_backward(1, &o, &go, false));
    ZT_CHECK(a->grad && zt_tensor_numel(a->grad) == 0);
    ZT_CHECK(b->grad && zt_shape_equal(b->grad->ndim, b->grad->shape, 1, (int64_t[]){3}));
    for (int i = 0; b->grad && i < 3; i++) ZT_CHECK(zt_tensor_get(b->grad, i) == 0);
    FREE(a->grad, b->grad);
    a->grad = b->grad = NULL;
    FREE(o, go);
  }
  for (int k = K_ADD_S; k < K_COUNT; k++) {
    zt_tensor *o = NULL;
    ZT_CHECK_OK(call_unary(k, 2, a, &o));
    ZT_CHECK(o && zt_tensor_numel(o) == 0 && o->ndim == 2);
    zt_tensor_free(o);
  }
  FREE(a, b);
}

/* ------------------------------------------------------------------ errors */

static void test_error_broadcast_mismatch(void) {
  zt_tensor *a = zt_test_rand(2, (int64_t[]){2, 3}, ZT_DTYPE_F32, -1, 1, 1);
  zt_tensor *b = zt_test_rand(1, (int64_t[]){4}, ZT_DTYPE_F32, -1, 1, 2);
  zt_tensor *c = zt_test_rand(3, (int64_t[]){5, 1, 3}, ZT_DTYPE_F32, -1, 1, 3);
  zt_tensor *d = zt_test_rand(2, (int64_t[]){4, 2}, ZT_DTYPE_F32, -1, 1, 4);
  for (int k = K_ADD; k <= K_DIV; k++) {
    zt_tensor *sentinel = (zt_tensor *)&sentinel, *o = sentinel;
    char prefix[32];
    snprintf(prefix, sizeof prefix, "op '%s'", op_name[k]);
    ZT_CHECK_ERR(call_binary(k, a, b, &o), ZT_STATUS_SHAPE, "shapes (2, 3) and (4,) cannot be broadcast");
    ZT_CHECK(strstr(zt_last_error(), prefix) != NULL);
    ZT_CHECK(o == sentinel);
    ZT_CHECK_ERR(call_binary(k, b, a, &o), ZT_STATUS_SHAPE, "shapes (4,) and (2, 3)");
    ZT_CHECK_ERR(call_binary(k, c, d, &o), ZT_STATUS_SHAPE, "shapes (5, 1, 3) and (4, 2)");
    ZT_CHECK(o == sentinel);
  }
  FREE(a, b, c, d);
}

static void test_error_dtypes(void) {
  int64_t s[] = {2, 3};
  zt_tensor *f32 = zt_test_rand(2, s, ZT_DTYPE_F32, -1, 1, 1), *f64 = zt_test_rand(2, s, ZT_DTYPE_F64, -1, 1, 2);
  zt_tensor *i32 = NULL, *bf16 = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(2, s, ZT_DTYPE_I32, ZT_CPU, &i32));
  ZT_CHECK_OK(zt_tensor_zeros(2, s, ZT_DTYPE_BF16, ZT_CPU, &bf16));
  for (int k = K_ADD; k <= K_DIV; k++) {
    zt_tensor *o = NULL;
    ZT_CHECK_ERR(call_binary(k, f32, f64, &o), ZT_STATUS_DTYPE, "different dtypes (f32 and f64)");
    ZT_CHECK_ERR(call_binary(k, f64, f32, &o), ZT_STATUS_DTYPE, "different dtypes (f64 and f32)");
    ZT_CHECK_ERR(call_binary(k, f32, i32, &o), ZT_STATUS_DTYPE, "different dtypes (f32 and i32)");
    ZT_CHECK_ERR(call_binary(k, i32, i32, &o), ZT_STATUS_DTYPE, "has dtype i32");
    ZT_CHECK(strstr(zt_last_error(), "f32 or f64") != NULL);
    ZT_CHECK_ERR(call_binary(k, i32, f32, &o), ZT_STATUS_DTYPE, "has dtype i32");
    ZT_CHECK_ERR(call_binary(k, bf16, bf16, &o), ZT_STATUS_DTYPE, "has dtype bf16");
    ZT_CHECK(o == NULL);
  }
  for (int k = K_ADD_S; k < K_COUNT; k++) {
    zt_tensor *o = NULL;
    char want[64];
    snprintf(want, sizeof want, "op '%s'", op_name[k]);
    ZT_CHECK_ERR(call_unary(k, 2, i32, &o), ZT_STATUS_DTYPE, "has dtype i32");
    if (!strstr(zt_last_error(), want))
      zt_test_fail(__FILE__, __LINE__, "message \"%s\" does not name %s", zt_last_error(), want);
    ZT_CHECK_ERR(call_unary(k, 2, bf16, &o), ZT_STATUS_DTYPE, "has dtype bf16");
    ZT_CHECK(o == NULL);
  }
  FREE(f32, f64, i32, bf16);
}

static void test_error_null_arguments(void) {
  zt_tensor *a = zt_test_rand(1, (int64_t[]){3}, ZT_DTYPE_F32, 0.5, 1, 1), *o = NULL;
  for (int k = K_ADD; k <= K_DIV; k++) {
    ZT_CHECK_ERR(call_binary(k, NULL, a, &o), ZT_STATUS_INVALID_ARG, "first input is NULL");
    ZT_CHECK_ERR(call_binary(k, a, NULL, &o), ZT_STATUS_INVALID_ARG, "second input is NULL");
    ZT_CHECK_ERR(call_binary(k, NULL, NULL, &o), ZT_STATUS_INVALID_ARG, "input is NULL");
    ZT_CHECK_ERR(call_binary(k, a, a, NULL), ZT_STATUS_INVALID_ARG, "output pointer is NULL");
  }
  for (int k = K_ADD_S; k < K_COUNT; k++) {
    ZT_CHECK_ERR(call_unary(k, 2, NULL, &o), ZT_STATUS_INVALID_ARG, "input is NULL");
    ZT_CHECK_ERR(call_unary(k, 2, a, NULL), ZT_STATUS_INVALID_ARG, "output pointer is NULL");
  }
  ZT_CHECK(o == NULL);
  zt_tensor_free(a);
}

int main(void) {
  ZT_RUN(test_binary_values_every_pattern);
  ZT_RUN(test_binary_known_values);
  ZT_RUN(test_unary_known_values);
  ZT_RUN(test_unary_values_sweep);
  ZT_RUN(test_f32_tanh_gelu_accuracy);
  ZT_RUN(test_nan_and_inf);
  ZT_RUN(test_pow_zero_exponent_grad);
  ZT_RUN(test_gradcheck_binary_every_pattern);
  ZT_RUN(test_gradcheck_same_tensor_twice);
  ZT_RUN(test_gradcheck_unary_every_op);
  ZT_RUN(test_gradcheck_views);
  ZT_RUN(test_only_one_input_requires_grad);
  ZT_RUN(test_partial_zt_grad);
  ZT_RUN(test_recording);
  ZT_RUN(test_f32_matches_f64);
  ZT_RUN(test_non_contiguous_inputs);
  ZT_RUN(test_large_broadcast_values);
  ZT_RUN(test_large_unary_values);
  ZT_RUN(test_position_independent);
  ZT_RUN(test_thread_count_independent);
  ZT_RUN(test_zero_size);
  ZT_RUN(test_error_broadcast_mismatch);
  ZT_RUN(test_error_dtypes);
  ZT_RUN(test_error_null_arguments);
  return zt_test_finish();
}
