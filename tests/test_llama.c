/* The Llama family through the model interface: the strategies GPT-2 trains under apply to
 * it unchanged (they see only zt_model). Three AdamW steps of the Qwen3 and Llama 3 fixtures
 * (tests/fixtures/llama) under recompute (full, selective), activation offload, DDP and FSDP
 * on one rank give plain training's losses and parameters bitwise, and so does training on the
 * guarded device (whose bytes the host cannot touch). Pipeline stages (zt_llama_forward_stage)
 * of every partition give the plain forward's loss and grads bitwise, through the sequence's
 * wrappers; the interface's optional members (config, logits, parameter parts) are set. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/tensor_internal.h"
#include "guard_backend.h"
#include "zt/fsdp.h"
#include "zt/lm.h"
#include "zt_test.h"

#define STEPS 3
#define MAXP 64


typedef struct result {
  double loss[STEPS];
  zt_tensor *param[MAXP];
  int n;
} result;

static void free_result(result *r) {
  for (int i = 0; i < r->n; i++) zt_tensor_free(r->param[i]);
}

typedef enum variant { PLAIN, RC_FULL, RC_SELECTIVE, OFFLOAD, DDP, FSDP } variant;

/* A copy of t on dev (requires_grad kept). */
static zt_tensor *to_dev(const zt_tensor *t, zt_device dev) {
  zt_tensor *o = NULL;
  ZT_CHECK_OK(zt__tensor_to_device(t, dev, ZT_MEM_TAG_TEMP, &o));
  if (o && t->requires_grad) ZT_CHECK_OK(zt_tensor_set_requires_grad(o, true));
  return o;
}

static void train_on(const char *name, variant v, zt_device dev, result *r) {
  *r = (result){0};
  char dir[1024];
  zt_test_fixture(dir, sizeof dir, "llama/%s/model", name);
  zt_llama *m = NULL;
  ZT_CHECK_OK(zt_llama_from_hf(dir, ZT_DTYPE_F32, &m));
  if (!m) return;
  zt_param *ps = NULL;
  int np = zt_llama_params(m, &ps);
  for (int i = 0; i < np && !zt_device_equal(dev, ZT_CPU); i++) { /* the parameters move to dev */
    zt_tensor *t = ps[i].tensor, *d = NULL;
    ZT_CHECK_OK(zt__tensor_to_device(t, dev, ZT_MEM_TAG_PARAM, &d));
    if (!d) break;
    zt__tensor_rebind(t, d->storage, 0);
    zt_tensor_free(d);
  }
  zt_model model = zt_llama_model(m);
  zt_recompute_plan *rc = NULL;
  zt_offload *off = NULL;
  zt_comm *comm = NULL;
  zt_data_parallel *dp = NULL;
  zt_strategy s[3];
  int n = 0;
  if (v == RC_FULL || v == RC_SELECTIVE || v == DDP || v == FSDP) {
    zt_recompute_options ro = zt_recompute_options_default();
    ro.mode = v == RC_SELECTIVE ? ZT_RECOMPUTE_SELECTIVE : ZT_RECOMPUTE_FULL;
    ro.every = v == RC_FULL ? 1 : 2;
    ZT_CHECK_OK(zt_recompute_plan_new(&ro, &rc));
    if (rc) s[n++] = zt_recompute_plan_strategy(rc);
  }
  if (v == OFFLOAD || v == DDP || v == FSDP) {
    zt_offload_options oo = zt_offload_options_default(ZT_OFFLOAD_HOST);
    oo.min_bytes = 0;
    ZT_CHECK_OK(zt_offload_new(&oo, &off));
    if (off) s[n++] = zt_offload_strategy(off);
  }
  if (v == DDP || v == FSDP) {
    zt_data_parallel_options o = {0};
    o.ddp = zt_ddp_options_default();
    o.fsdp_options = zt_fsdp_options_default();
    o.fsdp = v == FSDP;
    ZT_CHECK_OK(zt_comm_init_local(&comm));
    if (comm) ZT_CHECK_OK(zt_data_parallel_new(comm, &o, &dp));
    if (dp) s[n++] = zt_data_parallel_strategy(dp);
  }
  ZT_CHECK_OK(zt_strategies_attach(n, s, &model));
  ZT_CHECK((zt_model_blocks(&model)->n_wrappers > 0) == (rc || off)); /* the strategies hold the layers */
  if (dp) ZT_CHECK(v == FSDP ? zt_data_parallel_fsdp(dp) != NULL : zt_data_parallel_ddp(dp) != NULL);
  if (dp) np = zt_data_parallel_params(dp, &ps);
  zt_optim_config oc = zt_optim_default(ZT_OPTIM_ADAMW);
  zt_optim *o = NULL;
  ZT_CHECK_OK(zt_optim_new(&oc, np, ps, &o));
  int64_t T = 16;
  zt_tensor *ids0 = zt_test_rand_ids(2, T, zt_llama_get_config(m)->vocab_size, 7);
  zt_tensor *tg0 = zt_test_rand_ids(2, T, zt_llama_get_config(m)->vocab_size, 8);
  zt_tensor *ids = to_dev(ids0, dev), *tg = to_dev(tg0, dev);
  for (int k = 0; k < STEPS && o; k++) {
    zt_tensor *loss = NULL;
    ZT_CHECK_OK(zt_model_forward_loss(&model, ids, tg, &loss));
    if (!loss) break;
    ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
    r->loss[k] = zt_tensor_get(loss, 0);
    zt_tensor_free(loss);
    ZT_CHECK_OK(zt_optim_step(o, 1e-2));
    zt_optim_zero_grad(o);
  }
  if (dp && v == FSDP) ZT_CHECK_OK(zt_fsdp_gather_full_params(zt_data_parallel_fsdp(dp)));
  np = zt_llama_params(m, &ps);
  for (int i = 0; i < np && i < MAXP; i++)
    r->param[i] = to_dev(ps[i].tensor, ZT_CPU);
  r->n = np < MAXP ? np : MAXP;
  zt_strategies_detach(n, s);
  ZT_CHECK(zt_model_blocks(&model)->n_wrappers == 0);
  zt_data_parallel_free(dp);
  zt_comm_free(comm);
  zt_test_free_all((zt_tensor *[]){ids, tg, ids0, tg0}, 4);
  zt_optim_free(o);
  zt_recompute_plan_free(rc);
  zt_offload_free(off);
  zt_llama_free(m);
}

static void train(const char *name, variant v, result *r) { train_on(name, v, ZT_CPU, r); }

static void check_same(const result *a, const result *b, const char *what) {
  for (int k = 0; k < STEPS; k++)
    if (a->loss[k] != b->loss[k])
      zt_test_fail(__FILE__, __LINE__, "%s: loss of step %d is %.9g, plain %.9g", what, k, b->loss[k], a->loss[k]);
  ZT_CHECK(a->n == b->n && a->n > 0);
  for (int i = 0; i < a->n && i < b->n; i++)
    for (int64_t j = 0, n = zt_tensor_numel(a->param[i]); j < n; j++)
      if (zt_tensor_get(a->param[i], j) != zt_tensor_get(b->param[i], j)) {
        zt_test_fail(__FILE__, __LINE__, "%s: parameter %d differs at %lld", what, i, (long long)j);
        break;
      }
}

static void run_case(const char *name) {
  static const struct {
    variant v;
    const char *what;
  } vs[] = {{RC_FULL, "recompute full"},
            {RC_SELECTIVE, "recompute selective"},
            {OFFLOAD, "activation offload"},
            {DDP, "DDP + recompute + offload"},
            {FSDP, "FSDP + recompute + offload"}};
  result plain;
  train(name, PLAIN, &plain);
  ZT_CHECK(plain.loss[STEPS - 1] < plain.loss[0]); /* it learns */
  for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) {
    result r;
    char what[96];
    snprintf(what, sizeof what, "%s, %s", name, vs[i].what);
    train(name, vs[i].v, &r);
    check_same(&plain, &r, what);
    free_result(&r);
  }
  free_result(&plain);
}

/* On the guarded device: plain, full recompute and activation offload, bitwise the CPU's. */
static void test_guarded_qwen3(void) {
  zt_test_guard_register();
  result plain;
  train("qwen3", PLAIN, &plain);
  static const variant vs[] = {PLAIN, RC_FULL, OFFLOAD};
  for (int i = 0; i < 3; i++) {
    result r;
    int64_t opens = zt_test_guard_opens();
    train_on("qwen3", vs[i], ZT_GUARDED, &r);
    ZT_CHECK(zt_test_guard_opens() > opens); /* it did run there */
    ZT_CHECK(zt_test_guard_is_closed());
    check_same(&plain, &r, vs[i] == PLAIN ? "guarded, plain" : vs[i] == RC_FULL ? "guarded, recompute" : "guarded, offload");
    free_result(&r);
  }
  free_result(&plain);
}

/* ---------------------------------------------------------------- pipeline stages */

enum { SB = 2, ST = 12 };

/* A tiny Llama 3 (untied head, llama3 rope scaling, GQA) or Qwen3 (tied, q/k norm, q/k/v
 * biases, head_dim not hidden / heads). */
static zt_llama_config tiny(bool qwen3, int L) {
  zt_llama_config c = {.vocab_size = 40, .hidden_size = 32, .intermediate_size = 48, .n_layer = L, .n_head = 4,
                       .n_kv_head = 2, .head_dim = 8, .max_position_embeddings = 64, .rms_norm_eps = 1e-5,
                       .rope_theta = 10000, .initializer_range = 0.1};
  if (qwen3) {
    snprintf(c.model_type, sizeof c.model_type, "qwen3");
    c.head_dim = 12, c.tie_word_embeddings = true, c.qk_norm = true, c.attention_bias = true;
    c.rope_theta = 1e6, c.rms_norm_eps = 1e-6;
  } else {
    snprintf(c.model_type, sizeof c.model_type, "llama");
    c.rope_scaling = (zt_rope_scaling){ZT_ROPE_SCALING_LLAMA3, 8, 1, 4, 16};
  }
  return c;
}

/* Copies of every parameter's grad (cleared after). */
static int take_grads(zt_llama *m, zt_tensor **g) {
  zt_param *ps = NULL;
  int np = zt_llama_params(m, &ps);
  for (int i = 0; i < np && i < MAXP; i++) {
    g[i] = NULL;
    if (ps[i].tensor->grad) ZT_CHECK_OK(zt_tensor_clone_data(ps[i].tensor->grad, ZT_MEM_TAG_TEMP, &g[i]));
    zt_tensor_free(ps[i].tensor->grad);
    ps[i].tensor->grad = NULL;
  }
  return np;
}

/* The loss of stages of sizes n[0..S) (the first embeds, the last has the head), each stage's
 * output the next one's input (one graph). */
static zt_tensor *staged_loss(zt_llama *m, const int *n, int S, zt_tensor *ids, zt_tensor *tg) {
  zt_tensor *cur = ids, *out = NULL;
  for (int k = 0, first = 0; k < S; first += n[k], k++) {
    out = NULL;
    ZT_CHECK_OK(zt_llama_forward_stage(m, k == 0, first, n[k], k == S - 1 ? tg : NULL, cur, &out));
    if (cur != ids) zt_tensor_free(cur);
    if (!out) return NULL;
    cur = out;
  }
  return out;
}

/* A wrapper that counts the runs it passes on (strategies wrap the stages' layers). */
static zt_status count_run(void *ud, zt_span_next next, int first, int count, zt_tensor *x, zt_tensor **y) {
  (*(int *)ud)++;
  return zt_span_run(next, first, count, x, y);
}

/* Every partition of L layers into S = 1..L+1 stages (the first and the last may hold none;
 * a middle stage holds one or more) gives the plain forward's loss and grads bitwise. */
static void stages_case(bool qwen3) {
  enum { L = 3 };
  zt_llama_config c = tiny(qwen3, L);
  zt_rng_seed(5);
  zt_llama *m = NULL;
  ZT_CHECK_OK(zt_llama_new(&c, ZT_DTYPE_F32, &m));
  if (!m) return;
  int runs = 0, id = 0;
  ZT_CHECK_OK(zt_module_add_wrapper(zt_llama_blocks(m), &(zt_module_wrapper){count_run, 0, &runs}, &id));
  zt_tensor *ids = zt_test_rand_ids(SB, ST, c.vocab_size, 1), *tg = zt_test_rand_ids(SB, ST, c.vocab_size, 2);
  zt_tensor *want = NULL, *wg[MAXP] = {0}, *g[MAXP] = {0};
  ZT_CHECK_OK(zt_llama_forward(m, ids, tg, NULL, &want));
  if (want) ZT_CHECK_OK(zt_backward(1, &want, NULL, false));
  int np = take_grads(m, wg), parts = 0;
  for (int S = 1; S <= L + 1; S++) {
    int n[L + 1];
    int total = 1;
    for (int k = 0; k < S; k++) total *= L + 1;
    for (int code = 0; code < total; code++) { /* n[k] in 0..L, as the digits of code */
      for (int k = 0, r = code; k < S; k++, r /= L + 1) n[k] = r % (L + 1);
      int sum = 0;
      bool ok = true;
      for (int k = 0; k < S; k++) sum += n[k], ok &= n[k] > 0 || k == 0 || k == S - 1;
      if (sum != L || !ok) continue;
      parts++;
      int runs_was = runs;
      zt_tensor *loss = staged_loss(m, n, S, ids, tg);
      ZT_CHECK(runs - runs_was == S - (n[0] == 0) - (S > 1 && n[S - 1] == 0)); /* one run per stage with layers */
      if (!loss || !want) break;
      ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
      if (!zt_test_bitwise_equal(loss, want))
        zt_test_fail(__FILE__, __LINE__, "%d stages (code %d): loss %.9g, plain %.9g", S, code, zt_tensor_get(loss, 0),
                     zt_tensor_get(want, 0));
      take_grads(m, g);
      for (int i = 0; i < np && i < MAXP; i++) {
        if (!(g[i] && wg[i] && zt_test_bitwise_equal(g[i], wg[i])))
          zt_test_fail(__FILE__, __LINE__, "%d stages (code %d): grad of parameter %d differs", S, code, i);
        zt_tensor_free(g[i]);
      }
      zt_tensor_free(loss);
    }
  }
  ZT_CHECK(parts == 1 + 4 + 6 + 4); /* S = 1..4 for L = 3 */
  zt_module_remove_wrapper(zt_llama_blocks(m), id);
  zt_test_free_all(wg, np < MAXP ? np : MAXP);
  zt_test_free_all((zt_tensor *[]){want, ids, tg}, 3);
  zt_llama_free(m);
}

static void test_stages_llama(void) { stages_case(false); }
static void test_stages_qwen3(void) { stages_case(true); }

/* Bad stages are refused saying why; the interface's optional members. */
static void test_stage_errors_and_interface(void) {
  zt_llama_config c = tiny(false, 2);
  zt_llama *m = NULL;
  ZT_CHECK_OK(zt_llama_new(&c, ZT_DTYPE_F32, &m));
  if (!m) return;
  zt_tensor *ids = zt_test_rand_ids(SB, ST, c.vocab_size, 1), *tg = zt_test_rand_ids(SB, ST + 1, c.vocab_size, 2);
  zt_tensor *out = NULL, *h = zt_test_rand(3, (int64_t[]){SB, ST, 16}, ZT_DTYPE_F32, -1, 1, 3);
  ZT_CHECK_ERR(zt_llama_forward_stage(m, true, 1, 2, NULL, ids, &out), ZT_STATUS_INVALID_ARG, "outside the model's 2");
  ZT_CHECK_ERR(zt_llama_forward_stage(m, false, 1, 0, NULL, ids, &out), ZT_STATUS_INVALID_ARG, "does nothing");
  ZT_CHECK_ERR(zt_llama_forward_stage(m, true, 0, 1, tg, ids, &out), ZT_STATUS_SHAPE, "they must be (2, 12)");
  ZT_CHECK_ERR(zt_llama_forward_stage(m, false, 0, 1, NULL, h, &out), ZT_STATUS_SHAPE, "takes (B, T, 32)");
  ZT_CHECK(!out);
  zt_model mi = zt_llama_model(m);
  const zt_lm_config *lc = zt_model_config(&mi);
  ZT_CHECK(lc && lc->family == ZT_LM_LLAMA && lc->llama.n_layer == 2 && lc->llama.hidden_size == 32);
  zt_tensor *lg = NULL, *want = NULL;
  ZT_CHECK_OK(mi.forward_logits(mi.ctx, ids, &lg));
  ZT_CHECK_OK(zt_llama_forward(m, ids, NULL, &want, NULL));
  ZT_CHECK(lg && want && lg->ndim == 3 && lg->shape[2] == c.vocab_size && zt_test_bitwise_equal(lg, want));
  zt_param *ps = NULL;
  int np = zt_llama_params(m, &ps);
  for (int i = 0; i < np; i++) {
    int part = mi.param_part(mi.ctx, i), want_part = ZT_PART_OUTPUT;
    if (!strncmp(ps[i].name, "model.layers.", 13)) want_part = ps[i].name[13] - '0';
    if (!strcmp(ps[i].name, "model.embed_tokens.weight")) want_part = ZT_PART_INPUT;
    if (part != want_part) zt_test_fail(__FILE__, __LINE__, "%s has part %d, not %d", ps[i].name, part, want_part);
  }
  ZT_CHECK(mi.param_part(mi.ctx, np - 1) == ZT_PART_OUTPUT && !strcmp(ps[np - 1].name, "lm_head.weight"));
  zt_test_free_all((zt_tensor *[]){ids, tg, h, lg, want}, 5);
  zt_llama_free(m);
  c = tiny(true, 2); /* tied: the embedding is both ends' */
  ZT_CHECK_OK(zt_llama_new(&c, ZT_DTYPE_F32, &m));
  if (!m) return;
  mi = zt_llama_model(m);
  ZT_CHECK(mi.param_part(mi.ctx, 0) == ZT_PART_BOTH);
  zt_llama_free(m);
}

/* ---------------------------------------------------------------- built into a store */

/* zt_llama_new_evicted: every parameter in the store under its HF name once built, and after restoring, bitwise zt_llama_new's from the same seed (tied and untied). */
static void test_new_evicted(void) {
  for (int q = 0; q < 2; q++) {
    zt_llama_config c = tiny(q, 3);
    zt_store *store = NULL;
    ZT_CHECK_OK(zt_store_memory_new(&store));
    zt_llama *a = NULL, *b = NULL;
    zt_rng_seed(9);
    ZT_CHECK_OK(zt_llama_new(&c, ZT_DTYPE_F32, &a));
    zt_rng_seed(9);
    ZT_CHECK_OK(zt_llama_new_evicted(&c, store, &b));
    if (!a || !b) return;
    zt_param *pa = NULL, *pb = NULL;
    int na = zt_llama_params(a, &pa), nb = zt_llama_params(b, &pb);
    zt_store_stats ss;
    zt_store_stats_get(store, &ss);
    ZT_CHECK(ss.items == nb && ss.bytes_held == zt_llama_config_num_params(&c) * 4); /* all in the store */
    ZT_CHECK(na == nb && na == 2 + 3 * (q ? 14 : 9) + !q);
    for (int i = 0; i < na && i < nb; i++) {
      zt_storage *st = pb[i].tensor->storage;
      ZT_CHECK(zt_storage_is_evicted(st) && !strcmp(st->name, pb[i].name));
      ZT_CHECK_OK(zt_storage_restore(st));
      if (!zt_test_bitwise_equal(pa[i].tensor, pb[i].tensor))
        zt_test_fail(__FILE__, __LINE__, "%s differs from zt_llama_new's", pa[i].name);
    }
    ZT_CHECK_ERR(zt_llama_new_evicted(&c, NULL, &b), ZT_STATUS_INVALID_ARG, "store and out are required");
    zt_llama_free(a);
    zt_llama_free(b);
    zt_store_free(store);
  }
}

/* ---------------------------------------------------------------- presets */

/* Each preset validates and has its model's parameter count (the published ones: as their model
 * cards count them, a tied head once); llama-tiny builds with that many and runs; unknown names
 * list the presets. */
static void test_presets(void) {
  static const struct {
    const char *name;
    int64_t params;
  } want[] = {{"llama-tiny", 4 * (2 * 128 * 128 + 2 * 128 * 64 + 3 * 128 * 352 + 2 * 128) + 2 * 256 * 128 + 128},
              {"smollm-135m", 134515008},
              {"qwen2.5-0.5b", 494032768},
              {"llama3.2-1b", 1235814400}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    zt_llama_config c = {0};
    ZT_CHECK_OK(zt_llama_preset(want[i].name, &c));
    ZT_CHECK_OK(zt_llama_config_validate(&c));
    ZT_CHECK(strstr(ZT_LLAMA_PRESET_NAMES, want[i].name) != NULL);
    if (zt_llama_config_num_params(&c) != want[i].params)
      zt_test_fail(__FILE__, __LINE__, "%s: %lld parameters, not %lld", want[i].name,
                   (long long)zt_llama_config_num_params(&c), (long long)want[i].params);
  }
  zt_llama_config c = {0};
  ZT_CHECK_OK(zt_llama_preset("qwen2.5-0.5b", &c));
  ZT_CHECK(c.attention_bias && c.tie_word_embeddings && !c.qk_norm && c.rope_theta == 1e6);
  ZT_CHECK_OK(zt_llama_preset("llama3.2-1b", &c));
  ZT_CHECK(c.rope_scaling.type == ZT_ROPE_SCALING_LLAMA3 && c.rope_scaling.factor == 32 &&
           c.rope_scaling.original_max_position_embeddings == 8192 && c.max_position_embeddings == 131072);
  ZT_CHECK_OK(zt_llama_preset("llama-tiny", &c));
  ZT_CHECK(!c.tie_word_embeddings && c.vocab_size == 256);
  zt_llama *m = NULL;
  ZT_CHECK_OK(zt_llama_new(&c, ZT_DTYPE_F32, &m));
  ZT_CHECK(zt_llama_num_params(m) == zt_llama_config_num_params(&c));
  zt_tensor *ids = zt_test_rand_ids(1, 8, c.vocab_size, 1), *loss = NULL;
  ZT_CHECK_OK(zt_llama_forward(m, ids, ids, NULL, &loss));
  ZT_CHECK(loss && fabs(zt_tensor_get(loss, 0) - log(256.0)) < 0.5); /* near uniform at init */
  zt_test_free_all((zt_tensor *[]){ids, loss}, 2);
  zt_llama_free(m);
  ZT_CHECK_ERR(zt_llama_preset("llama-7b", &c), ZT_STATUS_INVALID_ARG,
               "unknown Llama-family preset \"llama-7b\"; the presets are llama-tiny, smollm-135m");
  ZT_CHECK_ERR(zt_llama_preset(NULL, &c), ZT_STATUS_INVALID_ARG, "qwen2.5-0.5b, llama3.2-1b");
}

static void test_strategies_qwen3(void) { run_case("qwen3"); }
static void test_strategies_llama3(void) { run_case("llama3"); }

int main(void) {
  ZT_RUN(test_stages_llama);
  ZT_RUN(test_stages_qwen3);
  ZT_RUN(test_stage_errors_and_interface);
  ZT_RUN(test_new_evicted);
  ZT_RUN(test_presets);
  ZT_RUN(test_strategies_qwen3);
  ZT_RUN(test_strategies_llama3);
  ZT_RUN(test_guarded_qwen3);
  return zt_test_finish();
}
