/* Running schedules with every stage in one process (zt_pipeline_run_local) on GPT-2 split
 * into stages (zt_gpt2_forward_stage): for every schedule family at 2 and 4 ranks, the
 * microbatch losses and the accumulated gradients equal plain microbatch accumulation
 * (zt_train_step's: loss / M, backward per microbatch) bitwise, except the tied embedding,
 * whose two contributions (first and last stage) are summed in another order (to rounding);
 * also with the blocks recomputed (a recompute plan attached). */
#include <math.h>
#include <string.h>

#include "zt/comm.h"
#include "zt/nn.h"
#include "zt/pipeline.h"
#include "zt/strategy.h"
#include "zt/train.h"
#include "stuck_comm.h"
#include "zt_test.h"

enum { L = 8, B = 2, T = 8, MAXP = 160 };
static zt_comm *g_world; /* mpirun's ranks (a one-rank group otherwise) */
static int g_rank, g_size = 1;
static const zt_gpt2_config CFG = {L, 2, 16, 32, T, 0.0};

typedef struct stages_ctx {
  zt_gpt2 *g;
  int S;
  zt_tensor **targets; /* per microbatch */
} stages_ctx;

/* Stage s: blocks [s L / S, (s + 1) L / S); the first embeds, the last adds the head. */
static zt_status stage_forward(void *ud, int stage, int mb, zt_tensor *in, zt_tensor **out) {
  stages_ctx *c = ud;
  int first = stage * L / c->S, count = (stage + 1) * L / c->S - first;
  return zt_gpt2_forward_stage(c->g, stage == 0, first, count, stage == c->S - 1 ? c->targets[mb] : NULL, in, out);
}

typedef struct result {
  double loss[16];
  zt_tensor *grad[MAXP];
  int n;
} result;

static void result_free(result *r) { zt_test_free_all(r->grad, r->n); }

static void take_grads(zt_gpt2 *g, result *r) {
  zt_param *ps;
  r->n = zt_gpt2_params(g, &ps);
  for (int i = 0; i < r->n; i++) {
    r->grad[i] = NULL;
    if (ps[i].tensor->grad) ZT_CHECK_OK(zt_tensor_clone_data(ps[i].tensor->grad, ZT_MEM_TAG_TEMP, &r->grad[i]));
    zt_tensor_free(ps[i].tensor->grad);
    ps[i].tensor->grad = NULL;
  }
}

static zt_gpt2 *model(bool recompute, zt_recompute_plan **rc) {
  zt_gpt2 *g = NULL;
  zt_rng_seed(11);
  ZT_CHECK_OK(zt_gpt2_new(&CFG, &g));
  *rc = recompute && g ? zt_test_recompute(g, ZT_RECOMPUTE_FULL, 2) : NULL;
  return g;
}

/* Plain accumulation: per microbatch, forward, loss / M, backward. */
static void plain(int M, zt_tensor **ids, zt_tensor **tg, bool recompute, result *r) {
  zt_recompute_plan *rc = NULL;
  zt_gpt2 *g = model(recompute, &rc);
  if (!g) return;
  for (int m = 0; m < M; m++) {
    zt_tensor *loss = NULL, *scaled = NULL;
    ZT_CHECK_OK(zt_gpt2_forward(g, ids[m], tg[m], NULL, &loss));
    if (!loss) break;
    r->loss[m] = zt_tensor_get(loss, 0);
    ZT_CHECK_OK(zt_mul_scalar(loss, 1.0 / M, &scaled));
    ZT_CHECK_OK(zt_backward(1, &scaled, NULL, false));
    zt_tensor_free(loss), zt_tensor_free(scaled);
  }
  take_grads(g, r);
  zt_recompute_plan_free(rc);
  zt_gpt2_free(g);
}

static void piped(const zt_pipeline_schedule *s, zt_tensor **ids, zt_tensor **tg, bool recompute, result *r) {
  zt_recompute_plan *rc = NULL;
  zt_gpt2 *g = model(recompute, &rc);
  if (!g) return;
  stages_ctx c = {g, zt_pipeline_stage_count(s), tg};
  zt_pipeline_stages st = {stage_forward, &c};
  ZT_CHECK_OK(zt_pipeline_run_local(s, &st, ids, 1.0 / s->microbatches, r->loss));
  take_grads(g, r);
  zt_recompute_plan_free(rc);
  zt_gpt2_free(g);
}

static void compare(const result *want, const result *got, int M, const char *what) {
  for (int m = 0; m < M; m++)
    if (memcmp(&want->loss[m], &got->loss[m], sizeof(double)))
      zt_test_fail(__FILE__, __LINE__, "%s: loss of microbatch %d: %.17g, plain %.17g", what, m, got->loss[m],
                   want->loss[m]);
  ZT_CHECK(want->n == got->n);
  for (int i = 0; i < want->n && i < got->n; i++) {
    if (!want->grad[i] || !got->grad[i]) {
      zt_test_fail(__FILE__, __LINE__, "%s: parameter %d has no grad", what, i);
      continue;
    }
    if (i == 0) { /* wte: tied, its two contributions summed in another order */
      double d = zt_test_max_abs_diff(want->grad[i], got->grad[i]);
      if (!(d <= 1e-6)) zt_test_fail(__FILE__, __LINE__, "%s: the tied embedding's grads differ by %g", what, d);
    } else if (!zt_test_bitwise_equal(want->grad[i], got->grad[i])) {
      zt_test_fail(__FILE__, __LINE__, "%s: the grads of parameter %d differ by %g", what, i,
                   zt_test_max_abs_diff(want->grad[i], got->grad[i]));
    }
  }
}

/* Every schedule family. */
static const char *const names[] = {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2",
                                    "zb-v",  "v-half", "v-min",     "dualpipev", "auto"};
enum { N_FAMILIES = (int)(sizeof names / sizeof names[0]) };

/* M microbatches of token ids and targets (seeds base + m, base + 100 + m). */
static void make_batches(int M, uint64_t base, zt_tensor **ids, zt_tensor **tg) {
  for (int m = 0; m < M; m++) {
    ids[m] = zt_test_rand_ids(B, T, CFG.vocab_size, base + (uint64_t)m);
    tg[m] = zt_test_rand_ids(B, T, CFG.vocab_size, base + 100 + (uint64_t)m);
  }
}

/* The family's schedule for P ranks and M microbatches (NULL, counted as a failure, if none). */
static zt_pipeline_schedule *generate(const char *name, int P, int M) {
  zt_pipeline_gen_options o = {0};
  o.name = name, o.ranks = P, o.microbatches = M;
  zt_pipeline_schedule *s = NULL;
  ZT_CHECK_OK(zt_pipeline_generate(&o, &s));
  return s;
}

static void test_every_family(void) {
  for (int P = 2; P <= 4; P += 2) {
    int M = 2 * P;
    zt_tensor *ids[16], *tg[16];
    make_batches(M, 100, ids, tg);
    for (int rec = 0; rec < 2; rec++) {
      result want = {0};
      plain(M, ids, tg, rec, &want);
      for (int k = 0; k < N_FAMILIES; k++) {
        zt_pipeline_schedule *s = generate(names[k], P, M);
        if (!s) continue;
        char what[96];
        snprintf(what, sizeof what, "%s, %d ranks, %d microbatches%s", names[k], P, M, rec ? ", recomputed" : "");
        result got = {0};
        piped(s, ids, tg, rec, &got);
        compare(&want, &got, M, what);
        result_free(&got);
        zt_pipeline_schedule_free(s);
      }
      result_free(&want);
    }
    zt_test_free_all(ids, M);
    zt_test_free_all(tg, M);
  }
}

/* Across the ranks of mpirun (P = the world size, 2 or 4): every family, run by
 * zt_pipeline_run with sends and receives; each rank holds the grads of its stages' parameters,
 * their sum over the ranks (the others add zeros) equals plain accumulation, bitwise but for
 * the tied embedding (first and last stage). */
static void test_across_ranks(void) {
  int P = g_size;
  zt_comm *w = g_world;
  if (!w || P == 1) return;
  int M = 2 * P;
  zt_tensor *ids[16], *tg[16];
  make_batches(M, 100, ids, tg);
  result want = {0};
  plain(M, ids, tg, false, &want);
  zt_pipeline_boundary bd = {3, {B, T, CFG.n_embd}, ZT_DTYPE_F32};
  for (int k = 0; k < N_FAMILIES; k++) {
    zt_pipeline_schedule *s = generate(names[k], P, M);
    if (!s) continue;
    zt_recompute_plan *rc = NULL;
    zt_gpt2 *g = model(false, &rc);
    stages_ctx c = {g, zt_pipeline_stage_count(s), tg};
    zt_pipeline_stages st = {stage_forward, &c};
    result got = {0};
    for (int m = 0; m < M; m++) got.loss[m] = 0;
    zt_pipeline_trace tr;
    ZT_CHECK_OK(zt_pipeline_run(s, &st, w, &bd, ids, 1.0 / M, got.loss, &tr));
    /* the trace: every action of this rank's lowered list, in order, timed */
    int computes = 0;
    for (int i = 0; i < tr.n; i++) {
      computes += tr.actions[i].op <= ZT_PIPELINE_OP_BW;
      ZT_CHECK(tr.end[i] >= tr.start[i] && (i == 0 || tr.start[i] >= tr.end[i - 1]));
    }
    int want_computes = 0;
    for (int i = 0; i < s->n_actions[g_rank]; i++) want_computes += s->actions[g_rank][i].op <= ZT_PIPELINE_OP_BW;
    ZT_CHECK(computes == want_computes && tr.n >= computes);
    ZT_CHECK(tr.busy > 0 && tr.busy <= tr.span && tr.bubble_rate >= 0 && tr.bubble_rate < 1);
    zt_pipeline_trace_free(&tr);
    /* the losses live on the last stage's rank: sum them (the others hold zeros) */
    zt_tensor *lt = NULL;
    ZT_CHECK_OK(zt_tensor_from_data(1, (int64_t[]){M}, ZT_DTYPE_F64, got.loss, &lt));
    ZT_CHECK_OK(zt_all_reduce(w, lt, ZT_REDUCE_SUM));
    for (int m = 0; m < M; m++) got.loss[m] = zt_tensor_get(lt, m);
    zt_tensor_free(lt);
    zt_param *ps;
    int np = zt_gpt2_params(g, &ps);
    for (int i = 0; i < np; i++) { /* every rank takes part in every sum */
      zt_tensor *t = ps[i].tensor;
      if (!t->grad) ZT_CHECK_OK(zt_tensor_zeros(t->ndim, t->shape, t->dtype, ZT_CPU, &t->grad));
      ZT_CHECK_OK(zt_all_reduce(w, t->grad, ZT_REDUCE_SUM));
    }
    take_grads(g, &got);
    char what[96];
    snprintf(what, sizeof what, "%s across %d ranks, %d microbatches", names[k], P, M);
    compare(&want, &got, M, what);
    result_free(&got);
    zt_gpt2_free(g);
    zt_pipeline_schedule_free(s);
  }
  result_free(&want);
  zt_test_free_all(ids, M);
  zt_test_free_all(tg, M);
}

/* Three AdamW steps with clipping on a pipeline across the ranks against zt_train_step in
 * one process with the same microbatches: losses and parameters agree to rounding (the norm
 * and the tied grad are summed in another order), and the tied embedding's copies stay
 * bitwise identical on every rank. */
typedef struct mb_feed {
  zt_tensor **ids, **tg;
  int next, M;
} mb_feed;
static zt_status feed(void *ud, zt_tensor **x, zt_tensor **y) {
  mb_feed *f = ud;
  *x = f->ids[f->next % f->M], *y = f->tg[f->next % f->M];
  f->next++;
  return ZT_OK;
}

static void test_train_steps_across_ranks(void) {
  int R = g_rank, P = g_size;
  zt_comm *w = g_world;
  if (!w || P == 1) return;
  enum { STEPS = 3 };
  int M = 2 * P;
  zt_tensor *ids[16], *tg[16];
  make_batches(M, 300, ids, tg);
  zt_optim_config oc = zt_optim_default(ZT_OPTIM_ADAMW);
  /* the reference: one process */
  zt_recompute_plan *rc = NULL;
  zt_gpt2 *ref = model(false, &rc);
  zt_param *rp;
  int np = zt_gpt2_params(ref, &rp);
  zt_optim *ro = NULL;
  ZT_CHECK_OK(zt_optim_new(&oc, np, rp, &ro));
  zt_model rm = zt_gpt2_model(ref);
  double want[STEPS];
  mb_feed f = {ids, tg, 0, M};
  for (int k = 0; k < STEPS; k++) {
    zt_train_step_options so = zt_train_step_options_default();
    so.microbatches = M, so.lr = 1e-2, so.grad_clip = 1.0;
    zt_train_step_result r;
    ZT_CHECK_OK(zt_train_step(&rm, NULL, ro, feed, &f, &so, &r));
    want[k] = r.loss;
  }
  static const char *const some[] = {"1f1b", "zb-h1", "interleaved", "zb-v"};
  for (size_t n = 0; n < sizeof some / sizeof some[0]; n++) {
    zt_pipeline_schedule *s = generate(some[n], P, M);
    zt_gpt2 *g = model(false, &rc);
    if (!s || !g) break;
    zt_param *ps;
    int n_ps = zt_gpt2_params(g, &ps);
    zt_optim *o = NULL;
    ZT_CHECK_OK(zt_optim_new(&oc, n_ps, ps, &o));
    stages_ctx c = {g, zt_pipeline_stage_count(s), tg};
    zt_pipeline_stages st = {stage_forward, &c};
    zt_tensor *wte = ps[0].tensor;
    zt_pipeline_step_options po = {.schedule = s, .comm = w, .boundary = {3, {B, T, CFG.n_embd}, ZT_DTYPE_F32},
                                   .lr = 1e-2, .grad_clip = 1.0, .tied = &wte, .n_tied = 1};
    for (int k = 0; k < STEPS; k++) {
      zt_train_step_result r;
      ZT_CHECK_OK(zt_pipeline_train_step(&st, o, n_ps, ps, ids, &po, &r));
      if (!(fabs(r.loss - want[k]) <= 1e-5 * fabs(want[k])))
        zt_test_fail(__FILE__, __LINE__, "%s: loss of step %d is %.9g, one process %.9g", some[n], k + 1, r.loss, want[k]);
    }
    /* every rank's copy of wte is the same bits */
    zt_tensor *all = NULL;
    ZT_CHECK_OK(zt_tensor_empty(2, (int64_t[]){P, zt_tensor_numel(wte)}, ZT_DTYPE_F32, ZT_CPU, &all));
    zt_tensor *flat = NULL;
    ZT_CHECK_OK(zt_reshape(wte, 1, (int64_t[]){zt_tensor_numel(wte)}, &flat));
    ZT_CHECK_OK(zt_all_gather(w, flat, all));
    for (int q = 1; q < P; q++) {
      zt_tensor *a = NULL, *b = NULL;
      ZT_CHECK_OK(zt_narrow(all, 0, 0, 1, &a));
      ZT_CHECK_OK(zt_narrow(all, 0, q, 1, &b));
      if (!zt_test_bitwise_equal(a, b)) zt_test_fail(__FILE__, __LINE__, "%s: rank %d's wte differs from rank 0's", some[n], q);
      zt_test_free_all((zt_tensor *[]){a, b}, 2);
    }
    zt_test_free_all((zt_tensor *[]){all, flat}, 2);
    /* the parameters of this rank's stages (and wte) against the reference */
    for (int i = 0; i < n_ps; i++) {
      bool mine = i == 0;
      for (int stg = 0; stg < c.S && !mine; stg++) {
        if (zt_pipeline_stage_rank(s, stg) != R) continue;
        int first = stg * L / c.S, count = (stg + 1) * L / c.S - first;
        char pre[32];
        for (int b = first; b < first + count && !mine; b++) {
          snprintf(pre, sizeof pre, "transformer.h.%d.", b);
          mine = !strncmp(ps[i].name, pre, strlen(pre));
        }
        if (stg == 0 && !strcmp(ps[i].name, "transformer.wpe.weight")) mine = true;
        if (stg == c.S - 1 && !strncmp(ps[i].name, "transformer.ln_f.", 17)) mine = true;
      }
      if (!mine) continue;
      double d = zt_test_max_abs_diff(ps[i].tensor, rp[i].tensor);
      if (!(d <= 1e-5)) zt_test_fail(__FILE__, __LINE__, "%s: %s differs from one process by %g", some[n], ps[i].name, d);
    }
    zt_optim_free(o);
    zt_gpt2_free(g);
    zt_pipeline_schedule_free(s);
  }
  zt_optim_free(ro);
  zt_gpt2_free(ref);
  zt_test_free_all(ids, M);
  zt_test_free_all(tg, M);
}

/* The next stage's rank never answers (a stopped rank): the first receive that waits for it
 * times out, and that message, naming it, is the one returned, although the transfers still in
 * flight then fail too when the executor waits for them. */
static void test_stopped_peer(void) {
  enum { M = 2 };
  zt_pipeline_schedule *s = generate("1f1b", 2, M);
  zt_comm *stuck = zt_test_stuck_comm(0, 2, (const int[]){2, 3}, 0.05);
  zt_recompute_plan *rc = NULL;
  zt_gpt2 *g = model(false, &rc);
  zt_tensor *ids[M], *tg[M];
  make_batches(M, 300, ids, tg);
  if (s && stuck && g) {
    stages_ctx c = {g, 2, tg};
    zt_pipeline_stages st = {stage_forward, &c};
    zt_pipeline_boundary bd = {3, {B, T, CFG.n_embd}, ZT_DTYPE_F32};
    double losses[M];
    ZT_CHECK_ERR(zt_pipeline_run(s, &st, stuck, &bd, ids, 1.0 / M, losses, NULL), ZT_STATUS_COMM,
                 "from world rank 3 (group rank 1) timed out after 0.05 s on world rank 2 (group rank 0): the sender "
                 "did not post the matching send");
    ZT_CHECK(strncmp(zt_last_error(), "schedule rank 0, action 0B", 26) == 0);
    ZT_CHECK(!strstr(zt_last_error(), "unusable after"));
  }
  zt_test_free_all(ids, M);
  zt_test_free_all(tg, M);
  zt_gpt2_free(g);
  zt_comm_free(stuck);
  zt_pipeline_schedule_free(s);
}

static void test_errors(void) {
  zt_pipeline_schedule *s = NULL;
  ZT_CHECK_OK(zt_pipeline_schedule_new(2, 1, 1, ZT_PIPELINE_PLACEMENT_LOOP, &s));
  if (!s) return;
  ZT_CHECK_OK(zt_pipeline_schedule_push(s, 0, (zt_pipeline_action){ZT_PIPELINE_OP_F, 0, 0})); /* the rest missing */
  stages_ctx c = {NULL, 2, NULL};
  zt_pipeline_stages st = {stage_forward, &c};
  zt_tensor *ids = zt_test_rand_ids(B, T, CFG.vocab_size, 1);
  ZT_CHECK(zt_pipeline_run_local(s, &st, &ids, 1.0, NULL) == ZT_STATUS_INVALID_ARG); /* validated first */
  ZT_CHECK_ERR(zt_pipeline_run_local(s, NULL, &ids, 1.0, NULL), ZT_STATUS_INVALID_ARG, "required");
  zt_tensor_free(ids);
  zt_pipeline_schedule_free(s);
}

int main(void) {
  g_world = zt_test_world(&g_rank, &g_size);
  ZT_RUN(test_every_family);
  ZT_RUN(test_across_ranks);
  ZT_RUN(test_train_steps_across_ranks);
  ZT_RUN(test_stopped_peer);
  ZT_RUN(test_errors);
  zt_comm_free(g_world);
  return zt_test_finish();
}
