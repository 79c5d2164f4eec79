/* Every strategy on the Llama family, through the training run (zt_train_run_on) as `zt train`
 * runs it, against plain training of the same global batch: three steps (AdamW, clipping at 1.0)
 * on llama-tiny (4 layers, 64 wide, untied head; 8 layers in the pipelines) and on a tiny Qwen3
 * (q/k norm, no biases, tied head: the fixture tests/fixtures/llama/qwen3/model, and the same
 * shape with 8 layers, saved as a Hugging Face folder, in the pipelines), comparing each step's
 * loss and grad norm, the final validation loss and the final parameters (model_out; for states
 * on disk, the checkpoint the run streamed out of its store):
 * - bitwise: recompute full (2 blocks a region), selective (each policy), budget (a mixed plan)
 *   and a per-block plan; activation offload to disk and host (bf16 within test_offload.c's
 *   bounds); OffloadModel on a disk store, recompute and keep-graph; every state on disk planned
 *   by --mem-limit (roomy, and the smallest limit any plan fits); FSDP on one rank;
 * - a pipeline with an untied head: bitwise but the grad norm (NORM_RTOL: summed across ranks);
 * - within reduction rounding (GPT-2's tolerances: test_ddp.c, test_fsdp.c,
 *   cli_pipeline_test.sh): DDP and every FSDP sharding at the world size (AdamW's losses and
 *   norms; SGD's parameters too, see test_data_parallel), a pipeline with a tied head (the
 *   embedding's grads from the first and the last stage summed across ranks), pipeline x DDP and
 *   x FSDP on a 2 x 2 grid.
 * Run plainly (the one-process strategies) and under mpirun -np 2 / -np 4 (DDP and FSDP at the
 * world size, every schedule family at 2 and 4 stages, the grid at 4); every rank runs the
 * references itself on a one-rank group. ZT_TEST_VERBOSE=1 prints each comparison's
 * differences (2: per parameter); ZT_TEST_ONLY=test_name runs one test. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zt/lm.h"
#include "zt/model.h"
#include "zt/train.h"
#include "zt_test.h"

static zt_comm *W, *g_local; /* the world; a one-rank group for the references */
static int R, N = 1;
static char g_dir[256];                              /* shared by the ranks */
static char g_tok[400], g_qwen4[400], g_qwen[400];   /* Qwen3's tokens (vocab 80), its 8-layer copy, the fixture */
static int g_verbose;

enum { STEPS = 3, MAXP = 128 };
/* GPT-2's tolerances for reduction-order rounding (test_ddp.c, test_fsdp.c): losses 1e-6
 * relative, grad norms 1e-5 relative, parameters after the steps 1e-5 absolute; a pipeline's
 * losses within 2e-6 relative (cli_pipeline_test.sh: the tied embedding's two grads and the
 * norm summed across ranks in another order). */
#define LOSS_RTOL 1e-6
#define PIPE_LOSS_RTOL 2e-6
#define NORM_RTOL 1e-5
#define PARAM_ATOL 1e-5

typedef enum fam { LLAMA, QWEN, QWEN4 } fam;
static const char *const fam_name[] = {"llama-tiny", "qwen3", "qwen3 8 layers"};

typedef struct outcome {
  double loss[STEPS], norm[STEPS], val;
  int steps;
  char plan[128];
  int64_t act_peak_predicted;
  zt_offload_plan mem_plan; /* --mem-limit's */
  zt_model model; /* the final parameters (zeroed: none) */
} outcome;

static void outcome_free(outcome *o) {
  if (o->model.ctx) zt_model_free(&o->model);
  memset(&o->model, 0, sizeof o->model);
}

static void on_step(const zt_train_step_info *i, void *ud) {
  outcome *o = ud;
  if (i->step >= 1 && i->step <= STEPS) o->loss[i->step - 1] = i->loss, o->norm[i->step - 1] = i->grad_norm;
  o->steps++;
}

static void config(zt_train_config *c, fam f) {
  zt_train_config_default(c);
  c->parallel.comm_timeout = 120; /* a hang fails naming the ranks, before ctest's 300 s */
  c->data.batch = 8, c->data.seq = 16;
  c->steps = STEPS, c->log.eval_every = 0, c->log.eval_batches = 1, c->threads = 1;
  if (f == LLAMA) {
    ZT_CHECK_OK(zt_train_config_set(c, "model", "llama-tiny"));
    c->model.n_embd = 64; /* 4 layers of 4 heads (2 KV heads) of 16: fast */
  } else {
    snprintf(c->model.init_from, sizeof c->model.init_from, "%s", f == QWEN ? g_qwen : g_qwen4);
    snprintf(c->data.path, sizeof c->data.path, "%s", g_tok);
  }
  snprintf(c->memory.offload_dir, sizeof c->memory.offload_dir, "%s", g_dir);
}

/* Run c over comm; o gets the losses, norms, the validation loss and (want_model) the model. */
static bool run(const zt_train_config *c, zt_comm *comm, bool want_model, outcome *o) {
  memset(o, 0, sizeof *o);
  for (int k = 0; k < STEPS; k++) o->loss[k] = o->norm[k] = NAN;
  zt_train_result res;
  zt_status s = zt_train_run_on(c, comm, on_step, o, &res, want_model ? &o->model : NULL);
  if (s != ZT_OK) {
    zt_test_fail(__FILE__, __LINE__, "rank %d: zt_train_run_on: %s: %s", R, zt_status_name(s), zt_last_error());
    outcome_free(o);
    return false;
  }
  o->val = res.last_val_loss;
  snprintf(o->plan, sizeof o->plan, "%s", res.recompute_plan);
  o->act_peak_predicted = res.act_peak_predicted;
  o->mem_plan = res.plan;
  ZT_CHECK(o->steps == STEPS);
  return true;
}

typedef enum tol {
  EXACT,    /* bitwise */
  ROUNDING, /* reduction-order rounding: losses LOSS_RTOL, norms NORM_RTOL, parameters PARAM_ATOL */
  STEPS_ONLY, /* ROUNDING on the losses and norms alone (AdamW across ranks: see test_data_parallel) */
  PIPE,     /* the same with the pipeline's loss tolerance */
  UNTIED,   /* a pipeline with an untied head: bitwise but the grad norm (its squares summed across the
             * stages' ranks in another order: NORM_RTOL) */
  BF16      /* saved activations rounded to bf16 (test_offload.c's bounds) */
} tol;
static const char *const tol_name[] = {"bitwise", "rounding", "rounding (losses)", "pipeline rounding", "bitwise but the norm", "bf16"};

static double rel(double a, double b) { return a == b ? 0 : fabs(a - b) / fmax(fabs(b), 1e-30); }

/* got's model against want's, parameter by parameter (by name): the largest |difference|. */
static double param_diff(const zt_model *want, const zt_model *got, bool *bitwise) {
  zt_param *a, *b;
  int na = zt_model_params(want, &a), nb = zt_model_params(got, &b);
  *bitwise = na == nb;
  if (na != nb) return INFINITY;
  double worst = 0;
  for (int i = 0; i < na; i++) {
    if (strcmp(a[i].name, b[i].name)) {
      zt_test_fail(__FILE__, __LINE__, "parameter %d: %s, reference %s", i, b[i].name, a[i].name);
      *bitwise = false;
      continue;
    }
    if (!zt_test_bitwise_equal(a[i].tensor, b[i].tensor)) *bitwise = false;
    double d = zt_test_max_abs_diff(a[i].tensor, b[i].tensor);
    if (g_verbose > 1 && d > 0) printf("    %s differs by %.3g\n", a[i].name, d);
    worst = fmax(worst, d);
  }
  return worst;
}

static void compare(const outcome *want, const outcome *got, tol t, const char *what) {
  double dl = 0, dn = 0, dv = rel(got->val, want->val);
  bool same = !memcmp(want->loss, got->loss, sizeof want->loss) && !memcmp(want->norm, got->norm, sizeof want->norm) &&
              !memcmp(&want->val, &got->val, sizeof want->val);
  for (int k = 0; k < STEPS; k++) dl = fmax(dl, rel(got->loss[k], want->loss[k])), dn = fmax(dn, rel(got->norm[k], want->norm[k]));
  for (int k = 0; k < STEPS; k++)
    if (!isfinite(got->loss[k]) || !isfinite(got->norm[k])) dl = INFINITY;
  bool pbit = true;
  double dp = 0;
  if (want->model.ctx && got->model.ctx) dp = param_diff(&want->model, &got->model, &pbit);
  else if (want->model.ctx || got->model.ctx) dp = INFINITY, pbit = false;
  if (g_verbose)
    printf("  rank %d %-60s %-9s loss %.3g norm %.3g val %.3g params %.3g%s\n", R, what, tol_name[t], dl, dn, dv, dp,
           same && pbit ? " (bitwise)" : "");
  bool ok;
  switch (t) {
  case EXACT: ok = same && pbit; break;
  case ROUNDING: ok = dl <= LOSS_RTOL && dn <= NORM_RTOL && dv <= LOSS_RTOL && dp <= PARAM_ATOL; break;
  case UNTIED:
    ok = !memcmp(want->loss, got->loss, sizeof want->loss) && !memcmp(&want->val, &got->val, sizeof want->val) && pbit &&
         dn <= NORM_RTOL;
    break;
  case STEPS_ONLY: ok = dl <= LOSS_RTOL && dn <= NORM_RTOL && dv <= LOSS_RTOL; break;
  case PIPE: ok = dl <= PIPE_LOSS_RTOL && dn <= NORM_RTOL && dv <= PIPE_LOSS_RTOL && dp <= PARAM_ATOL; break;
  default: ok = dl > 0 && dl < 1e-3 && dp <= 2 * STEPS * 1e-3; break; /* AdamW moves a parameter by about lr a step */
  }
  if (!ok)
    zt_test_fail(__FILE__, __LINE__,
                 "rank %d, %s: not %s: losses %.17g %.17g %.17g (reference %.17g %.17g %.17g), rel %.3g; norms rel %.3g; "
                 "val rel %.3g; parameters differ by %.3g%s",
                 R, what, tol_name[t], got->loss[0], got->loss[1], got->loss[2], want->loss[0], want->loss[1],
                 want->loss[2], dl, dn, dv, dp, pbit ? "" : " (not bitwise)");
}

/* ------------------------------------------------------------------ one process */
static void test_recompute(void) {
  if (N > 1) return;
  for (fam f = LLAMA; f <= QWEN; f++) {
    zt_train_config c;
    config(&c, f);
    outcome ref, got;
    if (!run(&c, g_local, true, &ref)) continue;
    /* the selective policies on Qwen3 (its q/k norm among what they keep or recompute) */
    const char *modes[] = {"full", "selective", "plan", "budget", "selective:gemm", "selective:attention"};
    for (size_t k = 0; k < (f == QWEN ? 6u : 4u); k++) {
      config(&c, f);
      char what[128];
      if (!strcmp(modes[k], "plan")) {
        ZT_CHECK_OK(zt_train_config_set(&c, "recompute", f == LLAMA ? "plan=fsnf" : "plan=sf"));
      } else if (!strcmp(modes[k], "budget")) {
        /* below the peak without recompute (the reference's prediction): some blocks recomputed, not all */
        c.memory.recompute_budget = ref.act_peak_predicted * 85 / 100;
      } else {
        ZT_CHECK_OK(zt_train_config_set(&c, "recompute", modes[k]));
      }
      if (!strcmp(modes[k], "full")) c.memory.checkpoint_every = f == LLAMA ? 2 : 1;
      snprintf(what, sizeof what, "%s, recompute %s", fam_name[f], modes[k]);
      if (!run(&c, g_local, true, &got)) continue;
      if (!strcmp(modes[k], "budget") &&
          !(strchr(got.plan, 'n') && (strchr(got.plan, 's') || strchr(got.plan, 'f'))))
        zt_test_fail(__FILE__, __LINE__, "%s: plan %s is not a mixed one", what, got.plan);
      if (g_verbose) printf("  %s: blocks %s\n", what, got.plan);
      compare(&ref, &got, EXACT, what);
      outcome_free(&got);
    }
    outcome_free(&ref);
  }
}

static void test_offload_activations(void) {
  if (N > 1) return;
  for (fam f = LLAMA; f <= QWEN; f++) {
    for (int sel = 0; sel < (f == QWEN ? 2 : 1); sel++) { /* with selective recompute: Qwen3's q/k norm */
      zt_train_config c;
      config(&c, f);
      if (sel) ZT_CHECK_OK(zt_train_config_set(&c, "recompute", "selective"));
      outcome ref, got;
      if (!run(&c, g_local, true, &ref)) continue;
      const char *tiers[] = {"disk", "host", "bf16"};
      for (int k = 0; k < 3; k++) {
        if (sel && k == 2) break;
        zt_train_config o = c;
        ZT_CHECK_OK(zt_train_config_set(&o, "offload-activations", tiers[k]));
        char what[128];
        snprintf(what, sizeof what, "%s, activation offload %s%s", fam_name[f], tiers[k], sel ? ", selective" : "");
        if (!run(&o, g_local, true, &got)) continue;
        compare(&ref, &got, k == 2 ? BF16 : EXACT, what);
        outcome_free(&got);
      }
      outcome_free(&ref);
    }
  }
}

static void test_offload_model(void) {
  if (N > 1) return;
  for (fam f = LLAMA; f <= QWEN; f++) {
    zt_train_config c;
    config(&c, f);
    c.data.microbatches = 2; /* OffloadModel runs them through each slice */
    outcome ref, got;
    if (!run(&c, g_local, true, &ref)) continue;
    const char *modes[] = {"recompute", "keep-graph"};
    for (int k = 0; k < 2; k++)
      for (int res = 1; res <= 2; res++) {
        if (res == 2 - k && f == LLAMA) continue; /* llama-tiny: recompute with 1 resident, keep-graph with 2 */
        zt_train_config o = c;
        ZT_CHECK_OK(zt_train_config_set(&o, "offload-model", "disk"));
        ZT_CHECK_OK(zt_train_config_set(&o, "offload-mode", modes[k]));
        o.memory.offload_slices = 3, o.memory.offload_resident = res;
        char what[128];
        snprintf(what, sizeof what, "%s, OffloadModel on disk, %s, 3 slices, %d resident", fam_name[f], modes[k], res);
        if (!run(&o, g_local, true, &got)) continue;
        compare(&ref, &got, EXACT, what);
        outcome_free(&got);
      }
    outcome_free(&ref);
  }
}

/* Every state on disk, planned by --mem-limit: model_out is refused (the whole model would be in
 * RAM), so the parameters come from the checkpoint the run streams out of its store. */
static void test_offload_states(void) {
  if (N > 1) return;
  setenv("ZT_PLAN_CALIBRATION", "gflops=20,read=1.5G,write=1.5G,rss=10M", 1); /* the same plan on any machine */
  for (fam f = LLAMA; f <= QWEN; f++) {
    zt_train_config c;
    config(&c, f);
    outcome ref, got;
    if (!run(&c, g_local, true, &ref)) continue;
    int64_t smallest = 0;
    for (int mode = 0; mode < 2; mode++) {
      zt_train_config o = c;
      ZT_CHECK_OK(zt_train_config_set(&o, "offload-states", "disk"));
      /* a roomy limit, then the smallest any plan fits (the first run's planner names it) */
      ZT_CHECK_OK(zt_train_config_set(&o, "mem-limit", "200M"));
      if (mode) o.memory.mem_limit = smallest;
      char ck[400];
      snprintf(ck, sizeof ck, "%s/states-%d-%d-%d", g_dir, R, (int)f, mode);
      snprintf(o.checkpoint.save, sizeof o.checkpoint.save, "%s", ck);
      char what[128];
      snprintf(what, sizeof what, "%s, every state on disk, --mem-limit %s", fam_name[f], mode ? "the smallest" : "200M");
      if (mode && !smallest) break;
      if (!run(&o, g_local, false, &got)) continue;
      smallest = got.mem_plan.smallest_peak;
      if (g_verbose)
        printf("  %s: plan %d slices, %d resident, activations %s, predicted peak %lld\n", what, got.mem_plan.slices,
               got.mem_plan.resident, zt_offload_plan_activations_name(got.mem_plan.activations_mode), (long long)got.mem_plan.peak);
      zt_lm_config lc;
      ZT_CHECK_OK(zt_train_model_config(&c, &lc));
      ZT_CHECK_OK(zt_lm_new(&lc, ZT_DTYPE_F32, NULL, &got.model));
      zt_train_state st;
      if (got.model.ctx) ZT_CHECK_OK(zt_snapshot_load(ck, &got.model, NULL, &st));
      compare(&ref, &got, EXACT, what);
      outcome_free(&got);
    }
    outcome_free(&ref);
  }
  unsetenv("ZT_PLAN_CALIBRATION");
}

/* ------------------------------------------------------------------ across the ranks */
/* DDP (more than one rank) and every FSDP sharding at the world size, against plain training of
 * the global batch (each rank runs it on its own): AdamW's losses and grad norms, and SGD's
 * (momentum) losses, norms and parameters. AdamW's parameters are not compared: Adam divides by
 * sqrt(v) + eps (1e-8, which a run cannot change), so an element whose grad is near eps moves by
 * an amount that depends on its last bits (test_fsdp.c raises eps for this, measured: Qwen3's
 * layer-0 q_proj, whose grads the q norm makes cancel, ends 3e-5 apart after three steps at 2
 * ranks while every other parameter stays within 2e-6, and SGD's parameters within 2e-8). */
static void test_data_parallel(void) {
  for (fam f = LLAMA; f <= QWEN; f++)
    for (int sgd = 0; sgd < 2; sgd++) {
      zt_train_config c;
      config(&c, f);
      if (sgd) ZT_CHECK_OK(zt_train_config_set(&c, "optimizer", "sgd"));
      if (sgd) c.optim.lr = 0.05;
      outcome ref, got;
      if (!run(&c, g_local, true, &ref)) continue;
      char shards[6][32];
      int n = 0;
      /* SGD (the parameters) on DDP, full and hybrid; one rank: FSDP full alone */
      if (N > 1) snprintf(shards[n++], 32, "none");
      snprintf(shards[n++], 32, "full");
      if (N > 1 && !sgd) snprintf(shards[n++], 32, "grad_op");
      if (N > 1 && !sgd) snprintf(shards[n++], 32, "opt");
      if (N > 1) snprintf(shards[n++], 32, "hybrid:%d", N / 2); /* groups of N/2, replicated across 2 */
      for (int k = 0; k < n; k++) {
        zt_train_config o = c;
        ZT_CHECK_OK(zt_train_config_set(&o, "shard", shards[k]));
        char what[128];
        snprintf(what, sizeof what, "%s, %.31s at %d ranks, %s", fam_name[f], strcmp(shards[k], "none") ? shards[k] : "DDP",
                 N, sgd ? "SGD" : "AdamW");
        if (!run(&o, W, true, &got)) continue;
        compare(&ref, &got, sgd ? ROUNDING : STEPS_ONLY, what);
        outcome_free(&got);
      }
      outcome_free(&ref);
    }
}

/* A pipeline of N stages (the world), every schedule family, 2N microbatches, against plain
 * training with those microbatches: llama-tiny's head is untied (the last stage's alone),
 * Qwen3's tied (its grads from the first and the last stage summed). */
static void test_pipeline(void) {
  if (N == 1) return;
  int M = 2 * N;
  char names[512];
  snprintf(names, sizeof names, "%s", zt_pipeline_generator_names());
  for (fam f = LLAMA; f <= QWEN4; f += 2) {
    zt_train_config c;
    config(&c, f);
    if (f == LLAMA) c.model.n_layer = 8; /* 4 ranks x 2 chunks: 8 stages of a block */
    c.data.microbatches = M;
    outcome ref, got;
    if (!run(&c, g_local, true, &ref)) continue;
    char list[512], *save = NULL;
    snprintf(list, sizeof list, "%s", names);
    for (char *s = strtok_r(list, " ", &save); s; s = strtok_r(NULL, " ", &save)) {
      zt_train_config o = c;
      o.parallel.pp = N;
      snprintf(o.parallel.schedule, sizeof o.parallel.schedule, "%.64s", s);
      char what[128];
      snprintf(what, sizeof what, "%s, pipeline %.64s, %d stages, %d microbatches", fam_name[f], s, N, M);
      if (!run(&o, W, true, &got)) continue;
      compare(&ref, &got, f == LLAMA ? UNTIED : PIPE, what);
      outcome_free(&got);
    }
    outcome_free(&ref);
  }
}

/* 2 x 2: two replicas of a 2-stage pipeline, DDP or FSDP (full, grad_op, opt) across them,
 * 2 microbatches each, against plain training of the global batch in 4 microbatches. */
static void test_grid(void) {
  if (N != 4) return;
  for (fam f = LLAMA; f <= QWEN4; f += 2) {
    zt_train_config c;
    config(&c, f);
    if (f == LLAMA) c.model.n_layer = 8;
    c.data.microbatches = 4;
    outcome ref, got;
    if (!run(&c, g_local, true, &ref)) continue;
    const char *shards[] = {"none", "full", "grad_op", "opt"};
    const char *scheds[] = {"zb-h1", "zb-v"};
    for (int k = 0; k < 4; k++)
      for (int j = k % 2; j < 2; j += 2) { /* one schedule per sharding, each schedule twice (a short test) */
        zt_train_config o = c;
        o.data.microbatches = 2, o.parallel.pp = 2;
        snprintf(o.parallel.schedule, sizeof o.parallel.schedule, "%s", scheds[j]);
        ZT_CHECK_OK(zt_train_config_set(&o, "shard", shards[k]));
        char what[128];
        snprintf(what, sizeof what, "%s, 2 x 2 grid, %s, %s", fam_name[f], scheds[j],
                 k ? shards[k] : "DDP");
        if (!run(&o, W, true, &got)) continue;
        compare(&ref, &got, PIPE, what);
        outcome_free(&got);
      }
    outcome_free(&ref);
  }
}

/* ------------------------------------------------------------------ set-up */
/* Qwen3's data (a token file of its vocabulary, 80) and its 8-layer copy (the fixture's config
 * with 8 layers: 4 ranks of 2 chunks need 8 stages, random weights saved as a Hugging Face folder), made by rank 0. */
static void set_up(void) {
  zt_test_shared_tmpdir(W, "llama_strategies", g_dir, sizeof g_dir);
  zt_test_fixture(g_qwen, sizeof g_qwen, "llama/qwen3/model");
  snprintf(g_tok, sizeof g_tok, "%s/qwen.tok", g_dir);
  snprintf(g_qwen4, sizeof g_qwen4, "%s/qwen4", g_dir);
  if (R == 0) {
    enum { COUNT = 20000 };
    int32_t *ids = malloc(sizeof *ids * COUNT);
    uint64_t x = 88172645463325252ull;
    for (int i = 0; ids && i < COUNT; i++) { /* a stream with some structure to learn */
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      ids[i] = i % 3 == 0 ? (int32_t)(x % 80) : (ids[i - 1] * 7 + 3) % 80;
    }
    zt_tokens t = {ids, COUNT, 80};
    if (ids) ZT_CHECK_OK(zt_tokens_save(g_tok, &t, 0));
    free(ids);
    zt_lm_config lc;
    ZT_CHECK_OK(zt_lm_config_from_hf(g_qwen, &lc));
    ZT_CHECK(lc.family == ZT_LM_LLAMA && lc.llama.qk_norm && !lc.llama.attention_bias && lc.llama.tie_word_embeddings);
    ZT_CHECK_OK(zt_lm_config_reshape(&lc, 8, 0, 0, 0, 0));
    zt_model m = {0};
    zt_rng_seed(5);
    ZT_CHECK_OK(zt_lm_new(&lc, ZT_DTYPE_F32, NULL, &m));
    if (m.ctx) ZT_CHECK_OK(zt_lm_save_hf(&m, g_qwen4, 0));
    if (m.ctx) zt_model_free(&m);
  }
  ZT_CHECK_OK(zt_barrier(W));
}

int main(void) {
  g_verbose = getenv("ZT_TEST_VERBOSE") ? atoi(getenv("ZT_TEST_VERBOSE")) : 0;
  W = zt_test_world(&R, &N);
  if (!W) return 1;
  ZT_CHECK_OK(zt_comm_init_local(&g_local));
  set_up();
  const char *only = getenv("ZT_TEST_ONLY"); /* a test's name: that one alone */
#define RUN_SOME(fn) \
  if (!only || !strcmp(only, #fn)) ZT_RUN(fn)
  RUN_SOME(test_recompute);
  RUN_SOME(test_offload_activations);
  RUN_SOME(test_offload_model);
  RUN_SOME(test_offload_states);
  RUN_SOME(test_data_parallel);
  RUN_SOME(test_pipeline);
  RUN_SOME(test_grid);
  ZT_CHECK_OK(zt_barrier(W));
  if (R == 0) zt_test_tmpdir_remove();
  zt_comm_free(g_local);
  zt_comm_free(W);
  return zt_test_finish();
}
