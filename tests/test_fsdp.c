/* FSDP at any world size: run plainly (one rank) and under mpirun -np 2 / -np 4. Every rank
 * also runs the single-process reference (the whole global batch) itself, so no fixtures:
 * each strategy on this rank's rows must give the reference's losses, gradient pieces, norms
 * and parameters after several AdamW steps, up to reduction-order rounding; with
 * checkpointed units, unused and frozen parameters, no_sync, prefetch on and off; mixed
 * precision against a one-rank FSDP run in the same precision. Hand-made units check the
 * exact gradient averages over padded shards, memory per strategy, communication counts,
 * the state machine's errors and recovery after a failed backward. */
#include <stdlib.h>

#include "core/tensor_internal.h"
#include "zt_test.h"
#include "zt/fsdp.h"

static zt_comm *W;
static int R, N; /* rank, size */

static const zt_gpt2_config CFG = {3, 2, 32, 64, 16, 0.0};
enum { GB = 8, GT = 16, STEPS = 3 };
#define LR 1e-3
/* Tolerances, from reduction order only (as test_ddp.c): each rank sums its rows' grads and
 * the ranks' partial sums are added, where the reference sums all rows at once, so f32
 * grads differ by a few ulps; losses and parameters after STEPS AdamW steps at lr 1e-3
 * stay within these. Mixed precision is compared with a one-rank run in the same
 * precision: the gradient of each rank is rounded to the reduce dtype before the sum
 * there but after it in the one-rank run, so grads agree to a few bf16/f16 ulps (2^-8 /
 * 2^-11 relative) and Adam (which divides by the gradient's own scale) turns that into
 * parameter differences of a few lr * 2^-8. */
#define LOSS_RTOL 1e-6
#define GRAD_RTOL 2e-5 /* relative to the largest |grad| of the parameter */
#define PARAM_ATOL 1e-5
#define MP_LOSS_RTOL 2e-4
#define MP_GRAD_RTOL 2e-2
#define MP_PARAM_ATOL 1e-3
/* Adam divides by sqrt(v) + eps: with the default eps (1e-8) an element whose grad is near
 * eps moves by an amount that depends on its last bits, and the next step's grads then
 * differ by ~1e-4 relative (measured at 2 ranks with no_sync). A larger eps keeps the
 * comparison at rounding level (5e-7 on grads, 1e-7 on parameters, measured) without
 * hiding any real difference. */
#define ADAM_EPS 1e-4

typedef struct fcase {
  zt_shard_strategy strategy;
  int group;    /* HYBRID: ranks per shard group */
  int every;    /* > 0: checkpointed blocks (FULL recompute), regions of `every` blocks */
  bool no_sync; /* two micro-batches per step, the first with sync off */
  bool unused;  /* a decayed parameter that forward never uses, in the root and in block 1 */
  bool frozen;  /* transformer.h.0.ln_1 frozen (its weight's values are needed in backward) */
  bool prefetch;
  bool offload; /* the blocks' saved activations go to the disk tier (every size) */
  zt_dtype param_dtype, reduce_dtype;
} fcase;

static zt_tensor *find_param(zt_module *root, const char *name) {
  zt_param *ps = NULL;
  int n = 0;
  ZT_CHECK_OK(zt_module_named_params(root, "", &n, &ps));
  zt_tensor *t = NULL;
  for (int i = 0; i < n && !t; i++)
    if (!strcmp(ps[i].name, name)) t = ps[i].tensor;
  free(ps);
  return t;
}

/* The model with the case's memory strategies (*rc, *off: NULL when not asked for). */
static zt_gpt2 *make_model(const fcase *c, bool perturb, zt_recompute_plan **rc, zt_offload **off) {
  zt_rng_seed(1234);
  zt_gpt2 *m = NULL;
  ZT_CHECK_OK(zt_gpt2_new(&CFG, &m));
  if (!m) return NULL;
  zt_module *root = zt_gpt2_module(m);
  if (c->unused) {
    zt_module *h1 = zt_module_child(zt_module_child(zt_module_child(root, "transformer"), "h"), "1");
    zt_tensor *a = NULL, *b = NULL;
    ZT_CHECK_OK(zt_module_new_param(root, "unused", 1, (int64_t[]){5}, ZT_DTYPE_F32, true, &a));
    ZT_CHECK_OK(zt_module_new_param(h1, "unused", 1, (int64_t[]){7}, ZT_DTYPE_F32, true, &b));
    bool prev = zt_set_grad_enabled(false);
    ZT_CHECK_OK(zt_tensor_fill_(a, 0.5)); /* decay would change them if a step touched them */
    ZT_CHECK_OK(zt_tensor_fill_(b, -0.25));
    zt_set_grad_enabled(prev);
  }
  /* frozen: block 0's first layer norm; its backward (which needs the weight's values)
   * runs after the unit's last trainable grad has arrived */
  if (c->frozen) {
    ZT_CHECK_OK(zt_tensor_set_requires_grad(find_param(root, "transformer.h.0.ln_1.weight"), false));
    ZT_CHECK_OK(zt_tensor_set_requires_grad(find_param(root, "transformer.h.0.ln_1.bias"), false));
  }
  if (c->every) *rc = zt_test_recompute(m, ZT_RECOMPUTE_FULL, c->every);
  if (c->offload) {
    zt_offload_options o = zt_offload_options_default(ZT_OFFLOAD_DISK);
    o.min_bytes = 0;
    *off = zt_test_offload(m, &o);
  }
  if (perturb) { /* ranks other than 0 start elsewhere: zt_fsdp_init's broadcast must fix it */
    bool prev = zt_set_grad_enabled(false);
    ZT_CHECK_OK(zt_tensor_set(find_param(root, "transformer.wpe.weight"), 3, 42.0));
    zt_set_grad_enabled(prev);
  }
  return m;
}

typedef struct side {
  zt_gpt2 *m;
  zt_recompute_plan *rc; /* the case's memory strategies (NULL: none) */
  zt_offload *off;
  zt_fsdp *f;    /* NULL: plain single-process training */
  zt_comm *own;  /* a local comm made for a one-rank FSDP reference */
  zt_optim *o;
  zt_param *ps;  /* plain: the model's parameters (named, with added ones) */
  int n;
} side;

static void side_open(side *s, const fcase *c, zt_comm *comm, bool fsdp, bool perturb) {
  memset(s, 0, sizeof *s);
  s->m = make_model(c, perturb, &s->rc, &s->off);
  if (!s->m) return;
  zt_param *p = NULL;
  int n = 0;
  if (fsdp) {
    if (!comm) ZT_CHECK_OK(zt_comm_init_local(&s->own));
    zt_fsdp_options o = zt_fsdp_options_default();
    o.strategy = comm ? c->strategy : ZT_SHARD_FULL;
    o.hybrid_group = c->group;
    o.backward_prefetch = o.forward_prefetch = c->prefetch;
    o.param_dtype = c->param_dtype;
    o.reduce_dtype = c->reduce_dtype;
    ZT_CHECK_OK(zt_fsdp_new(comm ? comm : s->own, zt_gpt2_module(s->m), &o, &s->f));
    ZT_CHECK_OK(zt_fsdp_auto_wrap(s->f, NULL, NULL));
    ZT_CHECK_OK(zt_fsdp_init(s->f));
    n = zt_fsdp_params(s->f, &p, NULL);
  } else {
    ZT_CHECK_OK(zt_module_named_params(zt_gpt2_module(s->m), "", &s->n, &s->ps));
    p = s->ps;
    n = s->n;
  }
  zt_optim_config oc = zt_optim_default(ZT_OPTIM_ADAMW);
  oc.lr = LR;
  oc.eps = ADAM_EPS;
  ZT_CHECK_OK(zt_optim_new(&oc, n, p, &s->o));
}

static void side_close(side *s) {
  zt_optim_free(s->o);
  zt_fsdp_free(s->f);
  zt_recompute_plan_free(s->rc);
  zt_offload_free(s->off);
  zt_gpt2_free(s->m);
  zt_comm_free(s->own);
  free(s->ps);
  memset(s, 0, sizeof *s);
}

/* The full gradient of parameter `name` on the reference side, as a new f32 tensor (the
 * plain side's .grad, or the one-rank FSDP side's pieces, which are whole parameters), or
 * NULL when it has none. */
static zt_tensor *ref_grad(side *s, const char *name) {
  if (!s->f) {
    for (int i = 0; i < s->n; i++)
      if (!strcmp(s->ps[i].name, name) && s->ps[i].tensor->grad) {
        zt_tensor *g = NULL;
        ZT_CHECK_OK(zt_tensor_clone_data(s->ps[i].tensor->grad, ZT_MEM_TAG_TEMP, &g));
        return g;
      }
    return NULL;
  }
  zt_param *p;
  const zt_fsdp_piece *pc;
  int n = zt_fsdp_params(s->f, &p, &pc);
  for (int j = 0; j < n; j++)
    if (!strcmp(pc[j].name, name) && p[j].tensor->grad) {
      zt_tensor *g = NULL;
      ZT_CHECK(pc[j].start == 0); /* one rank: every piece is a whole parameter */
      ZT_CHECK_OK(zt_tensor_clone_data(p[j].tensor->grad, ZT_MEM_TAG_TEMP, &g));
      return g;
    }
  return NULL;
}

static double g_worst_grad[STEPS];
/* Every gradient piece of this rank against the reference's slice; pieces without a grad
 * exactly where the reference has none. */
static void compare_grads(side *ref, side *fs, double rtol, int step) {
  zt_param *p;
  const zt_fsdp_piece *pc;
  int n = zt_fsdp_params(fs->f, &p, &pc);
  for (int j = 0; j < n; j++) {
    zt_tensor *want = ref_grad(ref, pc[j].name), *got = p[j].tensor->grad;
    if (!want || !got) {
      if (!want != !got)
        zt_test_fail(__FILE__, __LINE__, "step %d: %s has %s grad but the reference %s", step, pc[j].name,
                     got ? "a" : "no", want ? "has one" : "has none");
      zt_tensor_free(want);
      continue;
    }
    const float *w = zt__tensor_ptr(want), *g = zt__tensor_ptr(got);
    double scale = 0, diff = 0;
    for (int64_t i = 0; i < zt_tensor_numel(want); i++) scale = fmax(scale, fabs(w[i]));
    for (int64_t i = 0; i < pc[j].count; i++) diff = fmax(diff, fabs(w[pc[j].start + i] - g[i]));
    if (getenv("ZT_TEST_VERBOSE") && scale > 0 && diff / scale > g_worst_grad[step]) g_worst_grad[step] = diff / scale;
    if (!(diff <= rtol * scale + 1e-9))
      zt_test_fail(__FILE__, __LINE__, "rank %d step %d: grad of %s [%lld, +%lld) differs by %g (max |grad| %g)", R,
                   step, pc[j].name, (long long)pc[j].start, (long long)pc[j].count, diff, scale);
    zt_tensor_free(want);
  }
}

/* Full parameter values by name after gathering: max |ref - fsdp| over all. */
static double compare_params(side *ref, side *fs) {
  if (ref->f) ZT_CHECK_OK(zt_fsdp_gather_full_params(ref->f));
  ZT_CHECK_OK(zt_fsdp_gather_full_params(fs->f));
  zt_param *a = NULL, *b = NULL;
  int na = 0, nb = 0;
  ZT_CHECK_OK(zt_module_named_params(zt_gpt2_module(ref->m), "", &na, &a));
  ZT_CHECK_OK(zt_module_named_params(zt_gpt2_module(fs->m), "", &nb, &b));
  double worst = na == nb ? 0 : INFINITY;
  for (int i = 0; i < na && i < nb; i++) worst = fmax(worst, zt_test_max_abs_diff(a[i].tensor, b[i].tensor));
  free(a);
  free(b);
  if (ref->f) ZT_CHECK_OK(zt_fsdp_release_full_params(ref->f));
  ZT_CHECK_OK(zt_fsdp_release_full_params(fs->f));
  return worst;
}

static bool low_precision(const fcase *c) { return c->param_dtype != ZT_DTYPE_F32 || c->reduce_dtype != ZT_DTYPE_F32; }

static void after_forward_checks(const fcase *c, zt_fsdp *f) {
  int nu = zt_fsdp_num_units(f);
  ZT_CHECK(nu == CFG.n_layer + 1 && !strcmp(zt_fsdp_unit_name(f, nu - 1), "") &&
           !strcmp(zt_fsdp_unit_name(f, 0), "transformer.h.0"));
  for (int k = 0; k < nu; k++) {
    ZT_CHECK(zt_fsdp_unit_state(f, k) == ZT_FSDP_STATE_IDLE);
    bool root = k == nu - 1, g = zt_fsdp_unit_gathered(f, k);
    bool aliased = zt_comm_size(zt_fsdp_shard_comm(f)) == 1 && c->param_dtype == ZT_DTYPE_F32;
    /* FULL/HYBRID free a block's full parameters after its forward (the root keeps them for
     * the backward that follows); GRAD_OP, OPT and NONE keep them */
    bool want = aliased || root || !(c->strategy == ZT_SHARD_FULL || c->strategy == ZT_SHARD_HYBRID);
    if (g != want) zt_test_fail(__FILE__, __LINE__, "unit %d gathered %d after forward, expected %d", k, g, want);
  }
}

static void run_case(const fcase *c, const char *what) {
  bool mp = low_precision(c);
  side ref, fs;
  /* mixed precision: the reference is FSDP on one rank (a local comm) in the same precision */
  side_open(&ref, c, NULL, mp, false);
  side_open(&fs, c, W, true, R != 0);
  if (!ref.o || !fs.o) goto out;
  int micro = c->no_sync ? 2 : 1;
  double worst_loss = 0;
  for (int step = 0; step < STEPS; step++) {
    zt_fsdp_stats_reset(fs.f);
    double lref = 0, lfs = 0;
    for (int k = 0; k < micro; k++) {
      zt_tensor *ids = zt_test_rand_ids(GB, GT, CFG.vocab_size, 100 + 10 * step + k);
      zt_tensor *tg = zt_test_rand_ids(GB, GT, CFG.vocab_size, 500 + 10 * step + k);
      zt_tensor *ri = zt_test_rows(ids, R, N), *rt = zt_test_rows(tg, R, N);
      bool sync = !c->no_sync || k == micro - 1;
      if (ref.f) zt_fsdp_set_sync(ref.f, sync);
      lref += zt_test_gpt2_fwd_bwd(ref.m, ids, tg);
      zt_fsdp_set_sync(fs.f, sync);
      zt_tensor *loss = NULL;
      ZT_CHECK_OK(zt_gpt2_forward(fs.m, ri, rt, NULL, &loss));
      if (step == 0 && k == 0) after_forward_checks(c, fs.f);
      if (loss) {
        lfs += zt_tensor_get(loss, 0);
        ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
      }
      zt_tensor_free(loss);
      zt_test_free_all((zt_tensor *[]){ids, tg, ri, rt}, 4);
      if (!sync) { /* nothing reduced, nothing communicated but gathers: no piece has a grad */
        zt_param *p;
        int np = zt_fsdp_params(fs.f, &p, NULL);
        for (int j = 0; j < np; j++) ZT_CHECK(p[j].tensor->grad == NULL);
        zt_dp_stats st;
        zt_fsdp_stats_get(fs.f, &st);
        ZT_CHECK(st.reduce_scatters == 0 && st.all_reduces == 0);
      }
    }
    /* after backward every unit is IDLE, and FULL/HYBRID/GRAD_OP hold no full parameters */
    bool aliased = zt_comm_size(zt_fsdp_shard_comm(fs.f)) == 1 && c->param_dtype == ZT_DTYPE_F32;
    bool frees = c->strategy == ZT_SHARD_FULL || c->strategy == ZT_SHARD_HYBRID || c->strategy == ZT_SHARD_GRAD_OP;
    for (int k = 0; k < zt_fsdp_num_units(fs.f); k++) {
      ZT_CHECK(zt_fsdp_unit_state(fs.f, k) == ZT_FSDP_STATE_IDLE);
      if (frees && !aliased) ZT_CHECK(!zt_fsdp_unit_gathered(fs.f, k));
    }
    double lavg = zt_test_mean_over(W, lfs);
    double lt = (mp ? MP_LOSS_RTOL : LOSS_RTOL) * fabs(lref);
    worst_loss = fmax(worst_loss, fabs(lavg - lref));
    if (!(fabs(lavg - lref) <= lt))
      zt_test_fail(__FILE__, __LINE__, "%s, step %d: loss %.9g vs reference %.9g", what, step, lavg, lref);
    compare_grads(&ref, &fs, mp ? MP_GRAD_RTOL : GRAD_RTOL, step);
    double nr = 0, nf = 0;
    if (ref.f)
      ZT_CHECK_OK(zt_fsdp_clip_grad_norm(ref.f, 1.0, &nr));
    else
      ZT_CHECK_OK(zt_clip_grad_norm(ref.n, ref.ps, 1.0, &nr));
    ZT_CHECK_OK(zt_fsdp_clip_grad_norm(fs.f, 1.0, &nf));
    if (!(fabs(nr - nf) <= (mp ? 1e-2 : 1e-5) * nr))
      zt_test_fail(__FILE__, __LINE__, "%s, step %d: grad norm %.9g vs reference %.9g", what, step, nf, nr);
    ZT_CHECK_OK(zt_optim_step(ref.o, LR));
    ZT_CHECK_OK(zt_optim_step(fs.o, LR));
    if (ref.f) {
      ZT_CHECK_OK(zt_fsdp_after_step(ref.f));
      zt_fsdp_zero_grad(ref.f);
    } else {
      zt_optim_zero_grad(ref.o);
    }
    ZT_CHECK_OK(zt_fsdp_after_step(fs.f));
    zt_fsdp_zero_grad(fs.f);
  }
  double d = compare_params(&ref, &fs);
  if (!(d <= (mp ? MP_PARAM_ATOL : PARAM_ATOL)))
    zt_test_fail(__FILE__, __LINE__, "%s: parameters differ by %g after %d steps", what, d, STEPS);
  if (getenv("ZT_TEST_VERBOSE"))
    printf("rank %d %-36s loss %.3g  grads %.2g %.2g %.2g  params %.3g\n", R, what, worst_loss, g_worst_grad[0],
           g_worst_grad[1], g_worst_grad[2], d);
  memset(g_worst_grad, 0, sizeof g_worst_grad);
out:
  side_close(&ref);
  side_close(&fs);
}

static fcase base(zt_shard_strategy s) {
  fcase c = {0};
  c.strategy = s;
  c.prefetch = true;
  c.param_dtype = c.reduce_dtype = ZT_DTYPE_F32;
  if (s == ZT_SHARD_HYBRID) c.group = N >= 2 ? N / 2 : 1;
  return c;
}

static const zt_shard_strategy k_all[] = {ZT_SHARD_FULL, ZT_SHARD_GRAD_OP, ZT_SHARD_OPT, ZT_SHARD_NONE,
                                          ZT_SHARD_HYBRID};

static void test_strategies_match_single_process(void) {
  for (int i = 0; i < 5; i++) {
    fcase c = base(k_all[i]);
    run_case(&c, zt_shard_strategy_name(k_all[i]));
    c.prefetch = false;
    run_case(&c, "no prefetch");
  }
  /* HYBRID with one rank per group (= NONE) and one group (= FULL) */
  fcase h = base(ZT_SHARD_HYBRID);
  h.group = 1;
  run_case(&h, "hybrid:1");
  h.group = N;
  run_case(&h, "hybrid:N");
}

static void test_checkpointed_units(void) {
  for (int i = 0; i < 5; i++) {
    fcase c = base(k_all[i]);
    c.every = 1;
    run_case(&c, "recompute every block");
    c.every = 2; /* a region of two units: the recomputation gathers the earlier one too */
    run_case(&c, "recompute every 2 blocks");
  }
}

static void test_unused_and_frozen(void) {
  for (int i = 0; i < 5; i++) {
    fcase c = base(k_all[i]);
    c.unused = true;
    run_case(&c, "unused parameters");
    c.unused = false;
    c.frozen = true;
    run_case(&c, "frozen parameter");
    c.every = 1;
    run_case(&c, "frozen parameter, recompute");
  }
}

static void test_no_sync(void) {
  for (int i = 0; i < 5; i++) {
    fcase c = base(k_all[i]);
    c.no_sync = true;
    run_case(&c, "no_sync");
  }
}

/* Composition with activation offload (disk tier), alone and inside checkpointed units. */
static void test_with_activation_offload(void) {
  const zt_shard_strategy ss[] = {ZT_SHARD_FULL, ZT_SHARD_GRAD_OP};
  for (int i = 0; i < 2; i++) {
    fcase c = base(ss[i]);
    c.offload = true;
    run_case(&c, "activation offload");
    c.every = 1;
    run_case(&c, "activation offload, recompute");
  }
}

static void test_mixed_precision(void) {
  const zt_dtype dts[] = {ZT_DTYPE_BF16, ZT_DTYPE_F16};
  const zt_shard_strategy ss[] = {ZT_SHARD_FULL, ZT_SHARD_GRAD_OP, ZT_SHARD_HYBRID};
  for (int d = 0; d < 2; d++)
    for (int i = 0; i < 3; i++) {
      fcase c = base(ss[i]);
      c.param_dtype = c.reduce_dtype = dts[d];
      run_case(&c, d ? "f16" : "bf16");
    }
  fcase c = base(ZT_SHARD_FULL);
  c.param_dtype = ZT_DTYPE_BF16; /* bf16 parameters, f32 gradient reduction */
  c.every = 1;
  run_case(&c, "bf16 params, f32 reduce, recompute");
}

/* Mixed precision really computes with rounded parameters: the gathered values are bf16
 * numbers while the f32 master shards are not, the loss differs from the f32 loss, and the
 * forward runs under autocast in bf16. */
static void test_mixed_precision_values(void) {
  fcase c = base(ZT_SHARD_FULL);
  c.param_dtype = c.reduce_dtype = ZT_DTYPE_BF16;
  side a, b;
  side_open(&a, &c, W, true, false);
  c.param_dtype = c.reduce_dtype = ZT_DTYPE_F32;
  side_open(&b, &c, W, true, false);
  if (!a.f || !b.f) goto out;
  zt_tensor *ids = zt_test_rand_ids(GB, GT, CFG.vocab_size, 7), *tg = zt_test_rand_ids(GB, GT, CFG.vocab_size, 8);
  zt_tensor *ri = zt_test_rows(ids, R, N), *rt = zt_test_rows(tg, R, N), *la = NULL, *lb = NULL;
  ZT_CHECK_OK(zt_gpt2_forward(a.m, ri, rt, NULL, &la));
  ZT_CHECK_OK(zt_gpt2_forward(b.m, ri, rt, NULL, &lb));
  if (la && lb) {
    double x = zt_tensor_get(la, 0), y = zt_tensor_get(lb, 0);
    ZT_CHECK(x != y && fabs(x - y) < 1e-2 * fabs(y));
  }
  ZT_CHECK_OK(zt_backward(1, &la, NULL, false));
  ZT_CHECK(!zt_autocast_get().enabled);
  ZT_CHECK_OK(zt_fsdp_gather_full_params(a.f));
  zt_tensor *w = find_param(zt_gpt2_module(a.m), "transformer.h.1.attn.c_attn.weight");
  int64_t rounded = 0;
  for (int64_t i = 0; i < zt_tensor_numel(w); i++) {
    float v = (float)zt_tensor_get(w, i);
    rounded += zt_bf16_to_f32(zt_f32_to_bf16(v)) == v;
  }
  ZT_CHECK(rounded == zt_tensor_numel(w));
  ZT_CHECK_OK(zt_fsdp_release_full_params(a.f));
  zt_param *p;
  int np = zt_fsdp_params(a.f, &p, NULL);
  int64_t exact = 0, total = 0;
  for (int j = 0; j < np; j++)
    for (int64_t i = 0; i < zt_tensor_numel(p[j].tensor); i++, total++) {
      float v = (float)zt_tensor_get(p[j].tensor, i);
      exact += zt_bf16_to_f32(zt_f32_to_bf16(v)) == v;
    }
  ZT_CHECK(exact < total / 2); /* the masters keep f32 precision */
  zt_test_free_all((zt_tensor *[]){ids, tg, ri, rt, la, lb}, 6);
out:
  side_close(&a);
  side_close(&b);
}

/* f16 with dynamic loss scaling. Iteration 0: rank 0 alone overflows (its loss scaled by
 * 1e30: inf in f16). Iteration 1: the last rank alone puts an inf into one element of its
 * own gradient shard. The clipping norm is global, so every rank sees the inf and skips
 * the step both times; the scaler backs off twice, then grows after growth_interval
 * finite steps. */
static void test_loss_scaling(void) {
  fcase c = base(ZT_SHARD_FULL);
  c.param_dtype = c.reduce_dtype = ZT_DTYPE_F16;
  side s;
  side_open(&s, &c, W, true, false);
  zt_loss_scaler sc = zt_loss_scaler_default();
  sc.growth_interval = 2;
  zt_tensor *ids = zt_test_rand_ids(GB, GT, CFG.vocab_size, 3), *tg = zt_test_rand_ids(GB, GT, CFG.vocab_size, 4);
  zt_tensor *ri = zt_test_rows(ids, R, N), *rt = zt_test_rows(tg, R, N);
  for (int it = 0; s.f && it < 4; it++) {
    zt_tensor *loss = NULL, *scaled = NULL;
    double scale = it == 0 && R == 0 ? 1e30 : sc.scale;
    ZT_CHECK_OK(zt_gpt2_forward(s.m, ri, rt, NULL, &loss));
    ZT_CHECK_OK(zt_mul_scalar(loss, scale, &scaled));
    ZT_CHECK_OK(zt_backward(1, &scaled, NULL, false));
    ZT_CHECK_OK(zt_fsdp_scale_grads(s.f, 1.0 / scale));
    if (it == 1 && R == N - 1) {
      zt_param *p;
      zt_fsdp_params(s.f, &p, NULL);
      ZT_CHECK_OK(zt_tensor_set(p[0].tensor->grad, 0, INFINITY));
    }
    double norm = 0;
    ZT_CHECK_OK(zt_fsdp_clip_grad_norm(s.f, 1.0, &norm));
    ZT_CHECK(isfinite(norm) == (it >= 2));
    bool step = zt_loss_scaler_update(&sc, isfinite(norm));
    ZT_CHECK(step == (it >= 2));
    if (step) ZT_CHECK_OK(zt_optim_step(s.o, LR));
    ZT_CHECK_OK(zt_fsdp_after_step(s.f));
    zt_fsdp_zero_grad(s.f);
    zt_test_free_all((zt_tensor *[]){loss, scaled}, 2);
  }
  ZT_CHECK(sc.skipped == 2 && sc.scale == 32768.0 && sc.good_steps == 0);
  zt_test_free_all((zt_tensor *[]){ids, tg, ri, rt}, 4);
  side_close(&s);
}

/* ------------------------------------------------------------------ hand-made units */
/* root (no parameters of its own but "c") with units "a" (w: 5 elements) and "b" (w: 3):
 * sizes that do not divide by the rank count, so shards carry padding. */
typedef struct toy {
  zt_module *root, *a, *b;
  zt_tensor *wa, *wb, *wc;
} toy;

static void toy_make(toy *t) {
  memset(t, 0, sizeof *t);
  ZT_CHECK_OK(zt_module_new("Toy", "", &t->root));
  ZT_CHECK_OK(zt_module_new("Lin", "a", &t->a));
  ZT_CHECK_OK(zt_module_new("Lin", "b", &t->b));
  ZT_CHECK_OK(zt_module_add_child(t->root, t->a));
  ZT_CHECK_OK(zt_module_add_child(t->root, t->b));
  ZT_CHECK_OK(zt_module_new_param(t->a, "w", 1, (int64_t[]){5}, ZT_DTYPE_F32, true, &t->wa));
  ZT_CHECK_OK(zt_module_new_param(t->b, "w", 1, (int64_t[]){3}, ZT_DTYPE_F32, true, &t->wb));
  ZT_CHECK_OK(zt_module_new_param(t->root, "c", 1, (int64_t[]){2}, ZT_DTYPE_F32, false, &t->wc));
  bool prev = zt_set_grad_enabled(false);
  for (int i = 0; i < 5; i++) ZT_CHECK_OK(zt_tensor_set(t->wa, i, 1 + i));
  for (int i = 0; i < 3; i++) ZT_CHECK_OK(zt_tensor_set(t->wb, i, -1 - i));
  for (int i = 0; i < 2; i++) ZT_CHECK_OK(zt_tensor_set(t->wc, i, 0.5 * i));
  zt_set_grad_enabled(prev);
}

static double xv(int r, int64_t i) { return (r + 1) + 0.25 * (double)i; }

static zt_tensor *filled(int64_t n, int r) {
  zt_tensor *t = NULL;
  ZT_CHECK_OK(zt_tensor_empty(1, &n, ZT_DTYPE_F32, ZT_CPU, &t));
  for (int64_t i = 0; t && i < n; i++) ZT_CHECK_OK(zt_tensor_set(t, i, xv(r, i)));
  return t;
}

/* out = sum(w * x_r) inside m's forward hooks (a unit's forward). */
static zt_status unit_fwd(zt_module *m, zt_tensor *w, zt_tensor **out) {
  zt_tensor *x = filled(zt_tensor_numel(w), R), *wx = NULL;
  zt_status s = zt_module_pre_forward(m);
  if (!s) s = zt_mul(w, x, &wx);
  if (!s) s = zt_sum(wx, 0, NULL, false, out);
  if (!s) s = zt_module_post_forward(m, 1, out);
  zt_tensor_free(x);
  zt_tensor_free(wx);
  return s;
}

/* loss = [root forward: a(.) + b(.) + sum(c)]; grads: a.w = x_r, b.w = x_r, c = 1 per rank */
static zt_status toy_step(toy *t, bool use_b) {
  zt_tensor *la = NULL, *lb = NULL, *c = NULL, *s1 = NULL, *loss = NULL;
  zt_status s = zt_module_pre_forward(t->root);
  if (!s) s = unit_fwd(t->a, t->wa, &la);
  if (!s && use_b) s = unit_fwd(t->b, t->wb, &lb);
  if (!s) s = zt_sum(t->wc, 0, NULL, false, &c);
  if (!s) s = use_b ? zt_add(la, lb, &s1) : zt_mul_scalar(la, 1.0, &s1);
  if (!s) s = zt_add(s1, c, &loss);
  if (!s) s = zt_module_post_forward(t->root, 1, &loss);
  if (!s) s = zt_backward(1, &loss, NULL, false);
  zt_test_free_all((zt_tensor *[]){la, lb, c, s1, loss}, 5);
  return s;
}

/* Each piece's grad is exactly its slice of the mean over ranks of x_r (and 1 for c). */
static void check_toy_grads(zt_fsdp *f, bool b_used) {
  zt_param *p;
  const zt_fsdp_piece *pc;
  int n = zt_fsdp_params(f, &p, &pc);
  int64_t seen[3] = {0, 0, 0};
  for (int j = 0; j < n; j++) {
    int which = !strcmp(pc[j].name, "a.w") ? 0 : !strcmp(pc[j].name, "b.w") ? 1 : !strcmp(pc[j].name, "c") ? 2 : -1;
    ZT_CHECK(which >= 0);
    if (which < 0) continue;
    seen[which] += pc[j].count;
    zt_tensor *g = p[j].tensor->grad;
    if (which == 1 && !b_used) {
      ZT_CHECK(g == NULL);
      continue;
    }
    ZT_CHECK(g != NULL && zt_tensor_numel(g) == pc[j].count);
    for (int64_t i = 0; g && i < pc[j].count; i++) {
      double e = 0;
      for (int r = 0; r < N; r++) e += which == 2 ? 1.0 : xv(r, pc[j].start + i);
      ZT_CHECK_NEAR(zt_tensor_get(g, i), e / N, 1e-6);
    }
  }
  /* the pieces of all ranks cover each parameter exactly once */
  zt_tensor *t = NULL;
  ZT_CHECK_OK(zt_tensor_from_data(1, (int64_t[]){3}, ZT_DTYPE_I64, seen, &t));
  ZT_CHECK_OK(zt_all_reduce(zt_fsdp_shard_comm(f), t, ZT_REDUCE_SUM));
  ZT_CHECK(zt_tensor_get(t, 0) == 5 && zt_tensor_get(t, 1) == 3 && zt_tensor_get(t, 2) == 2);
  zt_tensor_free(t);
}

static zt_fsdp *toy_fsdp(toy *t, zt_shard_strategy s, int group) {
  zt_fsdp_options o = zt_fsdp_options_default();
  o.strategy = s;
  o.hybrid_group = group;
  zt_fsdp *f = NULL;
  ZT_CHECK_OK(zt_fsdp_new(W, t->root, &o, &f));
  ZT_CHECK_OK(zt_fsdp_wrap(f, t->b)); /* wrap order does not matter: units follow module order */
  ZT_CHECK_OK(zt_fsdp_wrap(f, t->a));
  ZT_CHECK_OK(zt_fsdp_init(f));
  return f;
}

static void test_exact_averages(void) {
  for (int i = 0; i < 5; i++) {
    toy t;
    toy_make(&t);
    zt_fsdp *f = toy_fsdp(&t, k_all[i], N >= 2 ? N / 2 : 1);
    if (f) {
      ZT_CHECK(zt_fsdp_num_units(f) == 3 && !strcmp(zt_fsdp_unit_name(f, 0), "a") && zt_fsdp_unit_numel(f, 0) == 5 &&
               zt_fsdp_unit_numel(f, 2) == 2);
      for (int it = 0; it < 2; it++) {
        bool use_b = it == 0;
        ZT_CHECK_OK(toy_step(&t, use_b));
        check_toy_grads(f, use_b); /* b unused in the second: its pieces get no grad */
        zt_fsdp_zero_grad(f);
      }
      /* full values after gather: what was set before init */
      ZT_CHECK_OK(zt_fsdp_gather_full_params(f));
      for (int k = 0; k < 5; k++) ZT_CHECK(zt_tensor_get(t.wa, k) == 1 + k);
      for (int k = 0; k < 3; k++) ZT_CHECK(zt_tensor_get(t.wb, k) == -1 - k);
      ZT_CHECK_OK(zt_fsdp_release_full_params(f));
    }
    zt_fsdp_free(f);
    zt_module_free(t.root);
  }
}

/* PARAM bytes per strategy right after init (the model's own storage was given up): the
 * shards only (FULL, GRAD_OP, HYBRID), shards and full values (OPT), the flat buffers (NONE). */
static void test_memory_after_init(void) {
  for (int i = 0; i < 5; i++) {
    zt_mem_stats m0, m1;
    zt_mem_stats_get(ZT_CPU, &m0);
    zt_rng_seed(1);
    zt_gpt2 *m = NULL;
    ZT_CHECK_OK(zt_gpt2_new(&CFG, &m));
    zt_fsdp_options o = zt_fsdp_options_default();
    o.strategy = k_all[i];
    o.hybrid_group = N >= 2 ? N / 2 : 1;
    zt_fsdp *f = NULL;
    ZT_CHECK_OK(zt_fsdp_new(W, zt_gpt2_module(m), &o, &f));
    ZT_CHECK_OK(zt_fsdp_auto_wrap(f, NULL, NULL));
    ZT_CHECK_OK(zt_fsdp_init(f));
    zt_mem_stats_get(ZT_CPU, &m1);
    int G = zt_comm_size(zt_fsdp_shard_comm(f));
    int64_t shards = 0, full = 0;
    for (int k = 0; k < zt_fsdp_num_units(f); k++) {
      int64_t P = (zt_fsdp_unit_numel(f, k) + G - 1) / G * G;
      full += 4 * P;
      shards += 4 * (P / G);
    }
    int64_t want = G == 1 ? full : k_all[i] == ZT_SHARD_OPT ? full + shards : shards;
    int64_t got = m1.current[ZT_MEM_TAG_PARAM] - m0.current[ZT_MEM_TAG_PARAM];
    if (got != want)
      zt_test_fail(__FILE__, __LINE__, "%s: PARAM %lld bytes after init, expected %lld", zt_shard_strategy_name(k_all[i]),
                   (long long)got, (long long)want);
    zt_fsdp_free(f);
    zt_gpt2_free(m);
  }
}

/* FULL's traffic in one step of GPT-2: each unit gathered in forward and (blocks) again in
 * backward, one reduce-scatter per unit, the grad-mask all-reduce and the norm's. Bytes by
 * the ring formula, rounded per call as zt_comm_stats does. */
static void test_full_shard_traffic(void) {
  fcase c = base(ZT_SHARD_FULL);
  side s;
  side_open(&s, &c, W, true, false);
  if (!s.f) goto out;
  int nu = zt_fsdp_num_units(s.f), L = CFG.n_layer;
  double fr = N > 1 ? (double)(N - 1) / N : 0;
  int64_t want = 0, n_mask = 0;
  for (int k = 0; k < nu; k++) {
    int64_t P = (zt_fsdp_unit_numel(s.f, k) + N - 1) / N * N;
    int64_t one = (int64_t)(fr * 4.0 * (double)P + 0.5);
    want += (k == nu - 1 ? 2 : 3) * one; /* the root is not gathered again for backward */
  }
  zt_param *ps = NULL;
  int np = 0;
  ZT_CHECK_OK(zt_module_named_params(zt_gpt2_module(s.m), "", &np, &ps));
  n_mask = np;
  free(ps);
  want += (int64_t)(2 * fr * 4.0 * (double)n_mask + 0.5) + (int64_t)(2 * fr * 8.0 + 0.5);
  for (int step = 0; step < 2; step++) {
    zt_fsdp_stats_reset(s.f);
    zt_tensor *ids = zt_test_rand_ids(GB, GT, CFG.vocab_size, 1), *tg = zt_test_rand_ids(GB, GT, CFG.vocab_size, 2);
    zt_tensor *ri = zt_test_rows(ids, R, N), *rt = zt_test_rows(tg, R, N);
    zt_test_gpt2_fwd_bwd(s.m, ri, rt);
    double norm;
    ZT_CHECK_OK(zt_fsdp_clip_grad_norm(s.f, 1.0, &norm));
    ZT_CHECK_OK(zt_optim_step(s.o, LR));
    ZT_CHECK_OK(zt_fsdp_after_step(s.f));
    zt_fsdp_zero_grad(s.f);
    zt_dp_stats st;
    zt_fsdp_stats_get(s.f, &st);
    if (N > 1) {
      ZT_CHECK(st.all_gathers == 2 * L + 1 && st.reduce_scatters == L + 1 && st.all_reduces == 2);
      ZT_CHECK(st.comm_calls == 3 * L + 2 + 2);
      if (st.bytes_sent != want)
        zt_test_fail(__FILE__, __LINE__, "step %d: %lld bytes sent, expected %lld", step, (long long)st.bytes_sent,
                     (long long)want);
    } else {
      ZT_CHECK(st.comm_calls == 0 && st.bytes_sent == 0); /* one rank: nothing to move */
    }
    zt_test_free_all((zt_tensor *[]){ids, tg, ri, rt}, 4);
  }
out:
  side_close(&s);
}

/* Backward prefetch: while block 2 computes its backward, block 1's gather is already under
 * way (or done); without prefetch it is not. Observed from a hook on a parameter of block 2
 * that runs after FSDP's own. */
static zt_fsdp *g_probe_f;
static bool g_probe_seen;
static zt_status probe(zt_tensor *leaf, void *ud) {
  (void)leaf, (void)ud;
  g_probe_seen = zt_fsdp_unit_gathered(g_probe_f, 1);
  return ZT_OK;
}

static void test_backward_prefetch(void) {
  if (N == 1) return; /* one rank: full parameters are the shards, always present */
  for (int pf = 0; pf < 2; pf++) {
    fcase c = base(ZT_SHARD_FULL);
    c.prefetch = pf;
    side s;
    side_open(&s, &c, W, true, false);
    if (!s.f) continue;
    g_probe_f = s.f;
    ZT_CHECK_OK(zt_tensor_register_post_accumulate_grad_hook(
        find_param(zt_gpt2_module(s.m), "transformer.h.2.mlp.c_proj.weight"), probe, NULL, NULL));
    zt_tensor *ids = zt_test_rand_ids(GB, GT, CFG.vocab_size, 1), *tg = zt_test_rand_ids(GB, GT, CFG.vocab_size, 2);
    zt_tensor *ri = zt_test_rows(ids, R, N), *rt = zt_test_rows(tg, R, N);
    for (int it = 0; it < 2; it++) { /* the order is learnt in the first iteration */
      g_probe_seen = !pf;
      zt_test_gpt2_fwd_bwd(s.m, ri, rt);
      zt_fsdp_zero_grad(s.f);
    }
    ZT_CHECK(g_probe_seen == pf);
    zt_test_free_all((zt_tensor *[]){ids, tg, ri, rt}, 4);
    side_close(&s);
  }
}

/* ------------------------------------------------------------------ the state machine */
static zt_fsdp *g_hook_f;
static zt_status g_hook_status;
static zt_status gather_in_backward(const zt_tensor *grad, zt_tensor **rep, void *ud) {
  (void)grad, (void)rep, (void)ud;
  g_hook_status = zt_fsdp_gather_full_params(g_hook_f);
  return ZT_OK;
}

static void test_state_errors(void) {
  toy t;
  toy_make(&t);
  zt_fsdp *f = toy_fsdp(&t, ZT_SHARD_OPT, 0); /* OPT: full values always present */
  if (!f) goto out;
  /* a unit's forward entered again before it returned */
  ZT_CHECK_OK(zt_module_pre_forward(t.a));
  ZT_CHECK(zt_fsdp_unit_state(f, 0) == ZT_FSDP_STATE_FORWARD);
  ZT_CHECK_ERR(zt_module_pre_forward(t.a), ZT_STATUS_STATE, "FSDP unit 'a': pre-forward in state FORWARD");
  ZT_CHECK_OK(zt_module_post_forward(t.a, 0, NULL));
  ZT_CHECK(zt_fsdp_unit_state(f, 0) == ZT_FSDP_STATE_IDLE);
  /* post-forward without pre-forward */
  ZT_CHECK_ERR(zt_module_post_forward(t.a, 0, NULL), ZT_STATUS_STATE, "post-forward in state IDLE");
  /* a unit's parameter used outside its forward: its grads arrive with no pre-backward */
  zt_tensor *y = NULL, *l = NULL;
  ZT_CHECK_OK(zt_mul_scalar(t.wa, 2.0, &y));
  ZT_CHECK_OK(zt_sum(y, 0, NULL, false, &l));
  ZT_CHECK_ERR(zt_backward(1, &l, NULL, false), ZT_STATUS_STATE,
               "FSDP unit 'a': post-backward (every trainable parameter has its grad) in state IDLE");
  zt_test_free_all((zt_tensor *[]){y, l}, 2);
  /* the failed backward is recovered from: a normal step works and gives exact grads */
  zt_fsdp_zero_grad(f);
  ZT_CHECK_OK(toy_step(&t, true));
  check_toy_grads(f, true);
  zt_fsdp_zero_grad(f);
  /* full parameters cannot be summoned during backward */
  g_hook_f = f;
  g_hook_status = ZT_OK;
  zt_tensor *la = NULL;
  ZT_CHECK_OK(zt_module_pre_forward(t.root));
  ZT_CHECK_OK(unit_fwd(t.a, t.wa, &la));
  ZT_CHECK_OK(zt_module_post_forward(t.root, 1, &la));
  ZT_CHECK_OK(zt_tensor_register_hook(la, gather_in_backward, NULL, NULL));
  ZT_CHECK_OK(zt_backward(1, &la, NULL, false));
  ZT_CHECK(g_hook_status == ZT_STATUS_STATE && strstr(zt_last_error(), "between training steps"));
  zt_tensor_free(la);
  /* units fixed after init; no nesting; the root is not wrappable */
  ZT_CHECK_ERR(zt_fsdp_wrap(f, t.a), ZT_STATUS_STATE, "fixed");
  zt_fsdp *g = NULL;
  ZT_CHECK_OK(zt_fsdp_new(W, t.root, NULL, &g));
  ZT_CHECK_ERR(zt_fsdp_wrap(g, t.root), ZT_STATUS_INVALID_ARG, "root module is always a unit");
  ZT_CHECK_OK(zt_fsdp_wrap(g, t.a));
  ZT_CHECK_ERR(zt_fsdp_wrap(g, t.a), ZT_STATUS_INVALID_ARG, "is already unit 'a'");
  zt_fsdp_free(g);
out:
  zt_fsdp_free(f);
  zt_module_free(t.root);
}

static void test_option_errors(void) {
  toy t;
  toy_make(&t);
  zt_fsdp *f = (zt_fsdp *)&f;
  zt_fsdp_options o = zt_fsdp_options_default();
  ZT_CHECK(o.strategy == ZT_SHARD_FULL && o.backward_prefetch && !o.forward_prefetch && o.limit_all_gathers == 2);
  ZT_CHECK_ERR(zt_fsdp_new(NULL, t.root, &o, &f), ZT_STATUS_INVALID_ARG, "comm is NULL");
  ZT_CHECK(f == NULL);
  o.strategy = ZT_SHARD_HYBRID;
  o.hybrid_group = N + 1;
  ZT_CHECK_ERR(zt_fsdp_new(W, t.root, &o, &f), ZT_STATUS_INVALID_ARG, "hybrid_group");
  o = zt_fsdp_options_default();
  o.param_dtype = ZT_DTYPE_F64;
  ZT_CHECK_ERR(zt_fsdp_new(W, t.root, &o, &f), ZT_STATUS_DTYPE, "param_dtype f64");
  zt_shard_strategy s;
  int grp;
  ZT_CHECK_OK(zt_shard_strategy_parse("hybrid:4", &s, &grp));
  ZT_CHECK(s == ZT_SHARD_HYBRID && grp == 4);
  ZT_CHECK_OK(zt_shard_strategy_parse("grad_op", &s, &grp));
  ZT_CHECK(s == ZT_SHARD_GRAD_OP && grp == 0);
  ZT_CHECK_ERR(zt_shard_strategy_parse("hybrid", &s, &grp), ZT_STATUS_INVALID_ARG, "hybrid:G");
  ZT_CHECK_ERR(zt_shard_strategy_parse("zero3", &s, &grp), ZT_STATUS_INVALID_ARG, "unknown shard strategy 'zero3'");
  /* a tensor shared by two units */
  zt_module_free(t.root);
  toy_make(&t);
  zt_tensor *shared = t.a->params[0].tensor;
  t.b->params[0].tensor = shared; /* b lists a's tensor object too (restored before freeing) */
  zt_tensor *own_b = t.wb;
  zt_fsdp *g = NULL;
  ZT_CHECK_OK(zt_fsdp_new(W, t.root, NULL, &g));
  ZT_CHECK_OK(zt_fsdp_wrap(g, t.a));
  ZT_CHECK_OK(zt_fsdp_wrap(g, t.b));
  ZT_CHECK_ERR(zt_fsdp_init(g), ZT_STATUS_INVALID_ARG, "is shared by units 'a' and 'b'");
  zt_fsdp_free(g);
  t.b->params[0].tensor = own_b;
  zt_module_free(t.root);
}

int main(void) {
  if (!(W = zt_test_world(&R, &N))) return 1;
  ZT_RUN(test_option_errors);
  ZT_RUN(test_exact_averages);
  ZT_RUN(test_state_errors);
  ZT_RUN(test_memory_after_init);
  ZT_RUN(test_full_shard_traffic);
  ZT_RUN(test_backward_prefetch);
  ZT_RUN(test_strategies_match_single_process);
  ZT_RUN(test_checkpointed_units);
  ZT_RUN(test_unused_and_frozen);
  ZT_RUN(test_no_sync);
  ZT_RUN(test_with_activation_offload);
  ZT_RUN(test_mixed_precision);
  ZT_RUN(test_mixed_precision_values);
  ZT_RUN(test_loss_scaling);
  int rc = zt_test_finish();
  zt_comm_free(W);
  return rc;
}
