/* The guarded device (tests/guard_backend.c): memory the host cannot touch except through
 * its backend. Every op on it gives bitwise the CPU's outputs and gradients; GPT-2 tiny
 * trains on it bitwise as on the CPU (plain, full and selective recompute, activation offload
 * to each tier, OffloadModel in both modes over a disk store); a direct host access crashes
 * (SIGSEGV), and an op with no kernel for a device names the op and the device. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "zt_test.h"
#include "guard_backend.h"
#include "core/backend.h"
#include "core/tensor_internal.h"
#include "zt/train.h"

/* A copy of a cpu tensor on dev (same requires_grad). */
static zt_tensor *to_dev(const zt_tensor *t, zt_device dev) {
  zt_tensor *o = NULL;
  ZT_CHECK_OK(zt__tensor_to_device(t, dev, ZT_MEM_TAG_TEMP, &o));
  if (o && t->requires_grad) ZT_CHECK_OK(zt_tensor_set_requires_grad(o, true));
  return o;
}

/* ------------------------------------------------------------ ops */
#define MAXIN 4
#define MAXOUT 4
typedef zt_status (*op_fn)(zt_tensor **in, zt_tensor **out, int *n_out);

/* Run fn on the cpu inputs and on guarded copies; outputs and (for float outputs) the
 * grads of the inputs that require grad, from the sum of the first output, must be equal
 * bit for bit. */
static void check_op(const char *name, op_fn fn, int n_in, zt_tensor **cpu_in) {
  zt_tensor *gin[MAXIN] = {0}, *co[MAXOUT] = {0}, *go[MAXOUT] = {0};
  for (int i = 0; i < n_in; i++) gin[i] = cpu_in[i] ? to_dev(cpu_in[i], ZT_GUARDED) : NULL;
  int nc = 0, ng = 0;
  ZT_CHECK_OK(fn(cpu_in, co, &nc));
  ZT_CHECK_OK(fn(gin, go, &ng));
  ZT_CHECK(nc == ng);
  for (int k = 0; k < nc && k < ng; k++) {
    ZT_CHECK(zt_device_equal(zt_tensor_device(go[k]), ZT_GUARDED));
    if (!zt_test_bitwise_equal(co[k], go[k])) zt_test_fail(__FILE__, __LINE__, "op %s: output %d differs", name, k);
  }
  if (nc && co[0]->requires_grad && (co[0]->dtype == ZT_DTYPE_F32 || co[0]->dtype == ZT_DTYPE_F64)) {
    zt_tensor *cs = NULL, *gs = NULL;
    ZT_CHECK_OK(zt_sum(co[0], 0, NULL, false, &cs));
    ZT_CHECK_OK(zt_sum(go[0], 0, NULL, false, &gs));
    ZT_CHECK_OK(zt_backward(1, &cs, NULL, false));
    ZT_CHECK_OK(zt_backward(1, &gs, NULL, false));
    for (int i = 0; i < n_in; i++)
      if (cpu_in[i] && cpu_in[i]->requires_grad) {
        ZT_CHECK(cpu_in[i]->grad && gin[i]->grad);
        if (cpu_in[i]->grad && gin[i]->grad && !zt_test_bitwise_equal(cpu_in[i]->grad, gin[i]->grad))
          zt_test_fail(__FILE__, __LINE__, "op %s: the grad of input %d differs", name, i);
        zt_tensor_free(cpu_in[i]->grad);
        cpu_in[i]->grad = NULL;
      }
    zt_tensor_free(cs);
    zt_tensor_free(gs);
  }
  zt_test_free_all(co, MAXOUT);
  zt_test_free_all(go, MAXOUT);
  zt_test_free_all(gin, MAXIN);
  ZT_CHECK(zt_test_guard_is_closed());
}

#define ONE(expr) \
  do {            \
    *n = 1;       \
    return expr;  \
  } while (0)
static zt_status f_add(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_add(x[0], x[1], o)); }
static zt_status f_sub(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_sub(x[0], x[1], o)); }
static zt_status f_mul(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_mul(x[0], x[1], o)); }
static zt_status f_div(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_div(x[0], x[1], o)); }
static zt_status f_neg(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_neg(x[0], o)); }
static zt_status f_exp(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_exp(x[0], o)); }
static zt_status f_log(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_log(x[0], o)); }
static zt_status f_sqrt(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_sqrt(x[0], o)); }
static zt_status f_tanh(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_tanh(x[0], o)); }
static zt_status f_relu(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_relu(x[0], o)); }
static zt_status f_gelu(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_gelu(x[0], o)); }
static zt_status f_pow(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_pow(x[0], 1.7, o)); }
static zt_status f_adds(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_add_scalar(x[0], 0.25, o)); }
static zt_status f_muls(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_mul_scalar(x[0], -3.0, o)); }
static zt_status f_divs(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_div_scalar(x[0], 7.0, o)); }
static zt_status f_sum(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_sum(x[0], 1, (int[]){1}, true, o)); }
static zt_status f_mean(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_mean(x[0], 1, (int[]){0}, false, o)); }
static zt_status f_max(zt_tensor **x, zt_tensor **o, int *n) {
  *n = 2;
  return zt_max(x[0], -1, false, &o[0], &o[1]);
}
static zt_status f_softmax(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_softmax(x[0], -1, o)); }
static zt_status f_log_softmax(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_log_softmax(x[0], 0, o)); }
static zt_status f_ce(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_cross_entropy(x[0], x[1], -100, o)); }
static zt_status f_matmul(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_matmul(x[0], x[1], false, true, o)); }
static zt_status f_bmm(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_matmul(x[0], x[2], true, false, o)); }
static zt_status f_linear(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_linear(x[0], x[1], x[2], o)); }
static zt_status f_linear_io(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_linear_io(x[0], x[1], x[2], o)); }
static zt_status f_lmh(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_lm_head_cross_entropy(x[0], x[1], x[2], -100, o)); }
static zt_status f_ln(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_layer_norm(x[0], x[1], x[2], 1e-5, o)); }
static zt_status f_emb(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_embedding(x[0], x[1], o)); }
static zt_status f_dropout(zt_tensor **x, zt_tensor **o, int *n) {
  zt_rng_seed(9); /* the same mask on both devices */
  ONE(zt_dropout(x[0], 0.3, true, o));
}
static zt_status f_attn(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_causal_attention(x[0], 2, o)); }
static zt_status f_cached_attn(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_cached_attention(x[0], x[1], x[2], 4, o)); }
static zt_status f_gqa(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_causal_attention_gqa(x[0], 4, 2, o)); }
static zt_status f_silu(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_silu(x[0], o)); }
static zt_status f_rms(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_rms_norm(x[0], x[1], 1e-6, o)); }
static zt_status f_rope(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_rope(x[0], x[1], x[2], 1, 2, o)); }
static zt_status f_swiglu(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_swiglu(x[0], x[1], o)); }
static zt_status f_cast(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_cast(x[0], ZT_DTYPE_F64, o)); }
static zt_status f_cast_bf16(zt_tensor **x, zt_tensor **o, int *n) { ONE(zt_cast(x[0], ZT_DTYPE_BF16, o)); }
/* shape ops: a copy at the end so the output is the op's bytes */
static zt_status f_transpose(zt_tensor **x, zt_tensor **o, int *n) {
  zt_tensor *t = NULL;
  ZT_TRY(zt_transpose(x[0], 0, 1, &t));
  zt_status s = zt_contiguous(t, o);
  zt_tensor_free(t);
  *n = 1;
  return s;
}
static zt_status f_permute_reshape(zt_tensor **x, zt_tensor **o, int *n) {
  zt_tensor *t = NULL;
  ZT_TRY(zt_permute(x[2], (int[]){2, 0, 1}, &t));
  zt_status s = zt_reshape(t, 1, (int64_t[]){-1}, o);
  zt_tensor_free(t);
  *n = 1;
  return s;
}
static zt_status f_narrow_cat(zt_tensor **x, zt_tensor **o, int *n) {
  zt_tensor *a = NULL, *b = NULL;
  ZT_TRY(zt_narrow(x[0], 1, 1, 3, &a));
  zt_status s = zt_narrow(x[0], 1, 0, 2, &b);
  if (!s) s = zt_cat(2, (zt_tensor *[]){a, b}, 1, o);
  zt_tensor_free(a);
  zt_tensor_free(b);
  *n = 1;
  return s;
}
static zt_status f_split(zt_tensor **x, zt_tensor **o, int *n) {
  zt_tensor *parts[2] = {0};
  ZT_TRY(zt_split(x[0], 1, 2, (int64_t[]){2, 3}, parts));
  zt_status s = zt_mul(parts[0], parts[0], &o[0]);
  if (!s) s = zt_contiguous(parts[1], &o[1]);
  zt_tensor_free(parts[0]);
  zt_tensor_free(parts[1]);
  *n = 2;
  return s;
}

static void test_ops_bitwise(void) {
  zt_test_guard_register();
  int64_t s45[] = {4, 5}, s5[] = {5}, s345[] = {3, 4, 5}, s65[] = {6, 5}, s4[] = {4}, s35[] = {3, 4, 5};
  zt_tensor *a = zt_test_rand_leaf(2, s45, ZT_DTYPE_F32, -1, 1, 1);
  zt_tensor *b = zt_test_rand_leaf(1, s5, ZT_DTYPE_F32, 0.5, 2, 2); /* broadcasts against a */
  zt_tensor *pos = zt_test_rand_leaf(2, s45, ZT_DTYPE_F32, 0.1, 3, 3);
  zt_tensor *c3 = zt_test_rand_leaf(3, s345, ZT_DTYPE_F32, -1, 1, 4);
  zt_tensor *w65 = zt_test_rand_leaf(2, s65, ZT_DTYPE_F32, -1, 1, 5);
  zt_tensor *w56 = zt_test_rand_leaf(2, (int64_t[]){5, 6}, ZT_DTYPE_F32, -1, 1, 6);
  zt_tensor *b6 = zt_test_rand_leaf(1, (int64_t[]){6}, ZT_DTYPE_F32, -1, 1, 7);
  zt_tensor *d64 = zt_test_rand_leaf(2, s45, ZT_DTYPE_F64, -1, 1, 8);
  zt_tensor *ids = zt_test_rand_ids(1, 4, 6, 9), *ids1 = NULL;
  ZT_CHECK_OK(zt_reshape(ids, 1, s4, &ids1));
  zt_tensor *lnw = zt_test_rand_leaf(1, s5, ZT_DTYPE_F32, 0.5, 1.5, 10), *lnb = zt_test_rand_leaf(1, s5, ZT_DTYPE_F32, -1, 1, 11);
  zt_tensor *qkv = zt_test_rand_leaf(3, (int64_t[]){2, 6, 12}, ZT_DTYPE_F32, -1, 1, 12);
  zt_tensor *tg5 = zt_test_rand_ids(1, 4, 5, 13), *tg = NULL;
  ZT_CHECK_OK(zt_reshape(tg5, 1, s4, &tg));
  zt_tensor *bmm = zt_test_rand_leaf(3, s35, ZT_DTYPE_F32, -1, 1, 14);
  /* cached attention (no backward): 4 query heads on 2 kv heads of size 4, 3 queries on 4 of 5 positions */
  zt_tensor *cq = zt_test_rand(3, (int64_t[]){2, 3, 16}, ZT_DTYPE_F32, -1, 1, 15);
  zt_tensor *ck = zt_test_rand(4, (int64_t[]){2, 2, 5, 4}, ZT_DTYPE_F32, -1, 1, 16);
  zt_tensor *cv = zt_test_rand(4, (int64_t[]){2, 2, 5, 4}, ZT_DTYPE_F32, -1, 1, 17);
  /* rope: (2, 6, 3 heads of 4), q and k heads rotated at positions 1..6, v copied */
  zt_tensor *rcos = NULL, *rsin = NULL;
  /* grouped-query attention: 4 query heads on 2 kv heads of size 2 */
  zt_tensor *gqkv = zt_test_rand_leaf(3, (int64_t[]){2, 6, 16}, ZT_DTYPE_F32, -1, 1, 18);
  ZT_CHECK_OK(zt_rope_table(4, 8, 10000.0, NULL, ZT_DTYPE_F32, ZT_CPU, &rcos, &rsin));
  struct {
    const char *name;
    op_fn fn;
    int n;
    zt_tensor *in[MAXIN];
  } cases[] = {
      {"add", f_add, 2, {a, b}},         {"sub", f_sub, 2, {a, b}},
      {"mul", f_mul, 2, {a, b}},         {"div", f_div, 2, {a, b}},
      {"neg", f_neg, 1, {a}},            {"exp", f_exp, 1, {a}},
      {"log", f_log, 1, {pos}},          {"sqrt", f_sqrt, 1, {pos}},
      {"tanh", f_tanh, 1, {a}},          {"relu", f_relu, 1, {a}},
      {"gelu", f_gelu, 1, {a}},          {"pow", f_pow, 1, {pos}},
      {"add_scalar", f_adds, 1, {a}},    {"mul_scalar", f_muls, 1, {a}},
      {"div_scalar", f_divs, 1, {d64}},  {"sum", f_sum, 1, {c3}},
      {"mean", f_mean, 1, {a}},          {"max", f_max, 1, {c3}},
      {"softmax", f_softmax, 1, {c3}},   {"log_softmax", f_log_softmax, 1, {a}},
      {"cross_entropy", f_ce, 2, {a, tg}},
      {"matmul", f_matmul, 2, {a, w65}}, {"matmul_batched", f_bmm, 3, {c3, NULL, bmm}},
      {"linear", f_linear, 3, {a, w65, b6}}, {"linear_io", f_linear_io, 3, {a, w56, b6}},
      {"lm_head_cross_entropy", f_lmh, 3, {a, w65, tg}},
      {"layer_norm", f_ln, 3, {a, lnw, lnb}}, {"embedding", f_emb, 2, {w65, ids1}},
      {"dropout", f_dropout, 1, {a}},    {"causal_attention", f_attn, 1, {qkv}},
      {"cached_attention", f_cached_attn, 3, {cq, ck, cv}},
      {"causal_attention_gqa", f_gqa, 1, {gqkv}},
      {"silu", f_silu, 1, {a}},          {"rms_norm", f_rms, 2, {a, lnw}},
      {"rope", f_rope, 3, {qkv, rcos, rsin}}, {"swiglu", f_swiglu, 2, {a, pos}},
      {"cast", f_cast, 1, {a}},          {"cast_bf16", f_cast_bf16, 1, {a}},
      {"transpose", f_transpose, 1, {a}}, {"permute_reshape", f_permute_reshape, 3, {NULL, NULL, c3}},
      {"narrow_cat", f_narrow_cat, 1, {a}}, {"split", f_split, 1, {a}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_op(cases[i].name, cases[i].fn, cases[i].n, cases[i].in);
  zt_tensor *all[] = {a, b, pos, c3, w65, w56, b6, d64, ids, ids1, lnw, lnb, qkv, tg5, tg, bmm, cq, ck, cv, rcos, rsin, gqkv};
  zt_test_free_all(all, (int)(sizeof all / sizeof all[0]));
}

/* Tensor-level moves: fill, copy across devices and dtypes, get/set, clone, strided copy. */
static void test_tensor_moves(void) {
  zt_test_guard_register();
  zt_tensor *c = zt_test_rand(2, (int64_t[]){3, 4}, ZT_DTYPE_F32, -2, 2, 21), *g = NULL, *t = NULL, *back = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(2, (int64_t[]){3, 4}, ZT_DTYPE_F64, ZT_GUARDED, &g));
  ZT_CHECK_OK(zt_tensor_copy_(g, c)); /* cpu f32 -> guarded f64 */
  ZT_CHECK_OK(zt_tensor_set(g, 5, 1.5));
  ZT_CHECK(zt_tensor_get(g, 5) == 1.5 && zt_tensor_get(g, 6) == zt_tensor_get(c, 6));
  ZT_CHECK_OK(zt_transpose(g, 0, 1, &t));
  ZT_CHECK_OK(zt_tensor_clone_data(t, ZT_MEM_TAG_TEMP, &back)); /* strided copy on the device */
  ZT_CHECK(zt_tensor_get(back, 1) == zt_tensor_get(g, 4));
  ZT_CHECK_OK(zt_tensor_fill_(back, -0.5));
  ZT_CHECK(zt_tensor_get(back, 11) == -0.5);
  zt_tensor *n = NULL;
  ZT_CHECK_OK(zt_tensor_empty(1, (int64_t[]){1000}, ZT_DTYPE_F32, ZT_GUARDED, &n));
  ZT_CHECK_OK(zt_tensor_normal_(n, 0, 1));
  zt_tensor *nc = NULL;
  ZT_CHECK_OK(zt_tensor_empty(1, (int64_t[]){1000}, ZT_DTYPE_F32, ZT_CPU, &nc));
  ZT_CHECK_OK(zt_tensor_normal_(nc, 0, 1));
  ZT_CHECK(!zt_test_bitwise_equal(n, nc)); /* two draws */
  zt_tensor *all[] = {c, g, t, back, n, nc};
  zt_test_free_all(all, 6);
  ZT_CHECK(zt_test_guard_is_closed());
}

/* The host touching guarded bytes directly dies with SIGSEGV (checked in a child). */
static void test_direct_access_crashes(void) {
  zt_test_guard_register();
  zt_tensor *g = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(1, (int64_t[]){16}, ZT_DTYPE_F32, ZT_GUARDED, &g));
  if (!g) return;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    volatile float *p = zt__tensor_ptr(g);
    p[0] = 1.0f; /* must fault */
    _exit(0);
  }
  int st = 0;
  ZT_CHECK(waitpid(pid, &st, 0) == pid);
  ZT_CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
  zt_tensor_free(g);
}

/* An op whose kernel slot is empty for the device's kernel type is a clear error. */
static void test_empty_slot_error(void) {
  zt__backend fake = *(const zt__backend *)zt_test_guard_backend();
  fake.type = ZT_DEVICE_CUDA;
  fake.kernel_type = ZT_DEVICE_CUDA; /* no op has cuda kernels in this build */
  ZT_CHECK_OK(zt__backend_register(ZT_DEVICE_CUDA, &fake));
  zt_tensor *x = NULL, *y = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(1, (int64_t[]){4}, ZT_DTYPE_F32, ((zt_device){ZT_DEVICE_CUDA, 0}), &x));
  ZT_CHECK_ERR(zt_gelu(x, &y), ZT_STATUS_DEVICE, "op 'gelu' has no kernel for device cuda:0 in this build");
  zt_tensor_free(x);
  ZT_CHECK_OK(zt__backend_register(ZT_DEVICE_CUDA, NULL));
  ZT_CHECK_ERR(zt_tensor_empty(1, (int64_t[]){4}, ZT_DTYPE_F32, ((zt_device){ZT_DEVICE_CUDA, 0}), &x),
               ZT_STATUS_DEVICE, "no compute backend for device cuda:0");
}

/* ------------------------------------------------------------ GPT-2 training */
enum { B = 2, T = 16, STEPS = 3, MAXP = 64 };
typedef enum mode {
  MODE_PLAIN,
  MODE_FULL,
  MODE_SELECTIVE,
  MODE_OFFLOAD_HOST,
  MODE_OFFLOAD_BF16,
  MODE_OFFLOAD_DISK,
  MODE_OFFLOAD_MODEL,      /* OffloadModel, disk store, recomputing */
  MODE_OFFLOAD_MODEL_GRAPH /* OffloadModel, disk store, keeping the graph */
} mode;

typedef struct run {
  double loss[STEPS];
  int n;
  zt_tensor *param[MAXP]; /* final parameters, on the cpu */
} run;

/* Move every parameter of m to dev (new storage there, same tensor objects). */
static void params_to(zt_gpt2 *m, zt_device dev) {
  zt_param *ps;
  int np = zt_gpt2_params(m, &ps);
  for (int i = 0; i < np; i++) {
    zt_tensor *t = ps[i].tensor, *d = NULL;
    ZT_CHECK_OK(zt__tensor_to_device(t, dev, ZT_MEM_TAG_PARAM, &d));
    if (!d) return;
    zt__tensor_rebind(t, d->storage, 0);
    zt_tensor_free(d);
  }
}

static void train(zt_device dev, mode md, run *r) {
  *r = (run){0};
  zt_gpt2_config c = {2, 2, 32, 64, T, 0.1};
  zt_rng_seed(123);
  zt_gpt2 *m = NULL;
  ZT_CHECK_OK(zt_gpt2_new(&c, &m));
  if (!m) return;
  params_to(m, dev);
  zt_recompute_plan *rc = md == MODE_FULL        ? zt_test_recompute(m, ZT_RECOMPUTE_FULL, 1)
                          : md == MODE_SELECTIVE ? zt_test_recompute(m, ZT_RECOMPUTE_SELECTIVE, 1)
                                                 : NULL;
  zt_offload *off = NULL;
  if (md >= MODE_OFFLOAD_HOST && md <= MODE_OFFLOAD_DISK) {
    zt_offload_tier tier = md == MODE_OFFLOAD_HOST ? ZT_OFFLOAD_HOST
                           : md == MODE_OFFLOAD_BF16 ? ZT_OFFLOAD_BF16
                                                     : ZT_OFFLOAD_DISK;
    zt_offload_options oo = zt_offload_options_default(tier);
    oo.min_bytes = 0; /* tiny GPT-2's activations are small: offload them all */
    off = zt_test_offload(m, &oo);
  }
  zt_param *ps;
  int np = zt_gpt2_params(m, &ps);
  zt_optim_config oc = zt_optim_default(ZT_OPTIM_ADAMW);
  zt_optim *o = NULL;
  ZT_CHECK_OK(zt_optim_new(&oc, np, ps, &o));
  zt_tensor *ids0 = zt_test_rand_ids(B, T, c.vocab_size, 5), *tg0 = zt_test_rand_ids(B, T, c.vocab_size, 6);
  zt_tensor *ids = to_dev(ids0, dev), *tg = to_dev(tg0, dev);
  zt_store *store = NULL;
  zt_offload_model *om = NULL;
  if (md >= MODE_OFFLOAD_MODEL) { /* parameters and grads evicted through the device's backend */
    ZT_CHECK_OK(zt_store_disk_new(NULL, "zt_guarded_om", &store));
    zt_offload_units u;
    ZT_CHECK_OK(zt_lm_offload_units(zt_test_lm(m), &u));
    zt_offload_model_options oo = zt_offload_model_options_default();
    oo.slices = 3, oo.resident = 1, oo.microbatches = 2;
    oo.mode = md == MODE_OFFLOAD_MODEL_GRAPH ? ZT_OFFLOAD_MODEL_KEEP_GRAPH : ZT_OFFLOAD_MODEL_RECOMPUTE;
    if (store) ZT_CHECK_OK(zt_offload_model_new(&u, store, &oo, &om));
    for (int s = 0; om && s < STEPS; s++)
      ZT_CHECK_OK(zt_offload_model_train_step(om, o, ids, tg, 1e-2, 0.5, &r->loss[s], NULL));
    zt_offload_model_free(om); /* the last update done, every parameter back */
  }
  for (int s = 0; s < STEPS && md < MODE_OFFLOAD_MODEL; s++) {
    zt_tensor *loss = NULL;
    ZT_CHECK_OK(zt_gpt2_forward(m, ids, tg, NULL, &loss));
    if (!loss) break;
    ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
    r->loss[s] = zt_tensor_get(loss, 0);
    zt_tensor_free(loss);
    if (md >= MODE_OFFLOAD_HOST && md <= MODE_OFFLOAD_DISK) { /* the tier was used, and its loads ran (on the helper thread too) */
      zt_offload_stats st;
      zt_offload_stats_get(off, &st);
      ZT_CHECK(st.tensors_offloaded > 0 && st.unpacks > 0 && st.threads_started > 0 && st.bytes_in_tier == 0);
    }
    double norm = 0;
    ZT_CHECK_OK(zt_clip_grad_norm(np, ps, 0.5, &norm));
    ZT_CHECK_OK(zt_optim_step(o, 1e-2));
    zt_optim_zero_grad(o);
  }
  for (int i = 0; i < np && i < MAXP; i++) r->param[i] = to_dev(ps[i].tensor, ZT_CPU);
  r->n = np;
  zt_tensor *all[] = {ids0, tg0, ids, tg};
  zt_test_free_all(all, 4);
  zt_optim_free(o);
  zt_store_free(store);
  zt_recompute_plan_free(rc);
  zt_offload_free(off);
  zt_gpt2_free(m);
}

static void check_runs(const run *want, const run *got, const char *what) {
  for (int s = 0; s < STEPS; s++)
    if (memcmp(&want->loss[s], &got->loss[s], sizeof(double)))
      zt_test_fail(__FILE__, __LINE__, "%s: loss of step %d differs: %.17g vs %.17g", what, s, want->loss[s], got->loss[s]);
  ZT_CHECK(want->n == got->n);
  for (int i = 0; i < want->n && i < got->n && i < MAXP; i++)
    if (!zt_test_bitwise_equal(want->param[i], got->param[i]))
      zt_test_fail(__FILE__, __LINE__, "%s: parameter %d differs after %d steps", what, i, STEPS);
}

static void free_run(run *r) { zt_test_free_all(r->param, MAXP); }

static void gpt2_mode(mode md, const char *what) {
  zt_test_guard_register();
  run cpu, gd;
  train(ZT_CPU, md, &cpu);
  int64_t opens = zt_test_guard_opens();
  train(ZT_GUARDED, md, &gd);
  ZT_CHECK(zt_test_guard_opens() > opens); /* it did run on the guarded device */
  ZT_CHECK(zt_test_guard_is_closed());
  check_runs(&cpu, &gd, what);
  free_run(&cpu);
  free_run(&gd);
}

static void test_gpt2_plain(void) { gpt2_mode(MODE_PLAIN, "plain"); }
static void test_gpt2_recompute_full(void) { gpt2_mode(MODE_FULL, "full recompute"); }
static void test_gpt2_recompute_selective(void) { gpt2_mode(MODE_SELECTIVE, "selective recompute"); }
static void test_gpt2_offload_host(void) { gpt2_mode(MODE_OFFLOAD_HOST, "activation offload (host tier)"); }
static void test_gpt2_offload_bf16(void) { gpt2_mode(MODE_OFFLOAD_BF16, "activation offload (bf16 tier)"); }
static void test_gpt2_offload_disk(void) { gpt2_mode(MODE_OFFLOAD_DISK, "activation offload (disk tier)"); }
static void test_gpt2_offload_model(void) { gpt2_mode(MODE_OFFLOAD_MODEL, "OffloadModel (disk, recompute)"); }
static void test_gpt2_offload_model_graph(void) {
  gpt2_mode(MODE_OFFLOAD_MODEL_GRAPH, "OffloadModel (disk, keep-graph)");
}

/* The train layer's byte moves on guarded tensors: safetensors save and load, the loader's
 * batches, sampling (through the KV cache) from a model whose parameters are guarded. */
static void test_train_io(void) {
  zt_test_guard_register();
  ZT_CHECK(zt_test_tmpdir_make("guarded") != NULL);
  /* safetensors: a guarded tensor saved and loaded back (same dtype, and converted) */
  zt_tensor *c = zt_test_rand(2, (int64_t[]){3, 5}, ZT_DTYPE_F32, -1, 1, 41), *g = to_dev(c, ZT_GUARDED);
  zt_tensor *g2 = NULL, *g64 = NULL, *c64 = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(2, (int64_t[]){3, 5}, ZT_DTYPE_F32, ZT_GUARDED, &g2));
  ZT_CHECK_OK(zt_tensor_zeros(2, (int64_t[]){3, 5}, ZT_DTYPE_F64, ZT_GUARDED, &g64));
  ZT_CHECK_OK(zt_tensor_zeros(2, (int64_t[]){3, 5}, ZT_DTYPE_F64, ZT_CPU, &c64));
  const char *path = zt_test_tmp_path("g.safetensors"), *name = "w";
  ZT_CHECK_OK(zt_safetensors_save(path, 1, &name, &g, 0, NULL, NULL));
  ZT_CHECK_OK(zt_safetensors_load_into(path, 1, &name, &g2, true));
  ZT_CHECK_OK(zt_safetensors_load_into(path, 1, &name, &g64, true));
  ZT_CHECK_OK(zt_safetensors_load_into(path, 1, &name, &c64, true));
  zt_tensor *b2 = to_dev(g2, ZT_CPU), *b64 = to_dev(g64, ZT_CPU);
  ZT_CHECK(zt_test_bitwise_equal(c, b2) && zt_test_bitwise_equal(c64, b64));
  zt_test_free_all((zt_tensor *[]){c, g, g2, g64, c64, b2, b64}, 7);
  /* the loader writes a guarded batch as it writes a cpu one */
  int32_t ids[200];
  for (int i = 0; i < 200; i++) ids[i] = (i * 7) % 50;
  zt_tokens tok = {ids, 200, 50};
  zt_loader_config lc = {2, 8, 5, 0, 1};
  zt_loader *lcpu = NULL, *lg = NULL;
  ZT_CHECK_OK(zt_loader_new(&tok, &lc, &lcpu));
  ZT_CHECK_OK(zt_loader_new(&tok, &lc, &lg));
  zt_tensor *x = NULL, *y = NULL, *gx = NULL, *gy = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(2, (int64_t[]){2, 8}, ZT_DTYPE_I32, ZT_CPU, &x));
  ZT_CHECK_OK(zt_tensor_zeros(2, (int64_t[]){2, 8}, ZT_DTYPE_I32, ZT_CPU, &y));
  ZT_CHECK_OK(zt_tensor_zeros(2, (int64_t[]){2, 8}, ZT_DTYPE_I32, ZT_GUARDED, &gx));
  ZT_CHECK_OK(zt_tensor_zeros(2, (int64_t[]){2, 8}, ZT_DTYPE_I32, ZT_GUARDED, &gy));
  for (int k = 0; k < 3; k++) {
    ZT_CHECK_OK(zt_loader_next(lcpu, x, y));
    ZT_CHECK_OK(zt_loader_next(lg, gx, gy));
    zt_tensor *bx = to_dev(gx, ZT_CPU), *by = to_dev(gy, ZT_CPU);
    ZT_CHECK(zt_test_bitwise_equal(x, bx) && zt_test_bitwise_equal(y, by));
    zt_test_free_all((zt_tensor *[]){bx, by}, 2);
  }
  zt_loader_free(lcpu);
  zt_loader_free(lg);
  zt_test_free_all((zt_tensor *[]){x, y, gx, gy}, 4);
  /* sampling: the same tokens from cpu and guarded parameters (the KV cache on the device;
   * 30 tokens pass the context of T, so the cache is prefilled again there) */
  zt_gpt2_config gc = {2, 2, 32, 64, T, 0.0};
  int32_t *out[2] = {0};
  int64_t n_out[2] = {0};
  for (int d = 0; d < 2; d++) {
    zt_rng_seed(5);
    zt_gpt2 *m = NULL;
    ZT_CHECK_OK(zt_gpt2_new(&gc, &m));
    if (!m) return;
    if (d) params_to(m, ZT_GUARDED);
    ZT_CHECK_OK(zt_lm_sample(zt_test_lm(m), (int32_t[]){1, 2, 3}, 3, 30, 0.8, 10, 99, &out[d], &n_out[d]));
    zt_gpt2_free(m);
  }
  ZT_CHECK(n_out[0] == 33 && n_out[1] == 33 && out[0] && out[1] && !memcmp(out[0], out[1], sizeof(int32_t) * 33));
  free(out[0]);
  free(out[1]);
  zt_test_tmpdir_remove();
  ZT_CHECK(zt_test_guard_is_closed());
}

int main(void) {
  ZT_RUN(test_tensor_moves);
  ZT_RUN(test_direct_access_crashes);
  ZT_RUN(test_empty_slot_error);
  ZT_RUN(test_ops_bitwise);
  ZT_RUN(test_gpt2_plain);
  ZT_RUN(test_gpt2_recompute_full);
  ZT_RUN(test_gpt2_recompute_selective);
  ZT_RUN(test_gpt2_offload_model);
  ZT_RUN(test_gpt2_offload_model_graph);
  ZT_RUN(test_gpt2_offload_host);
  ZT_RUN(test_gpt2_offload_bf16);
  ZT_RUN(test_gpt2_offload_disk);
  ZT_RUN(test_train_io);
  return zt_test_finish();
}
