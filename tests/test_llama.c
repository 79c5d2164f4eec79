/* The Llama family through the model interface: the strategies GPT-2 trains under apply to
 * it unchanged (they see only zt_model). Three AdamW steps of the Qwen3 and Llama 3 fixtures
 * (tests/fixtures/llama) under recompute (full, selective), activation offload, DDP and FSDP
 * on one rank give plain training's losses and parameters bitwise, and so does training on the
 * guarded device (whose bytes the host cannot touch). */
#include <stdlib.h>

#include "core/backend.h"
#include "core/tensor_internal.h"
#include "guard_backend.h"
#include "zt/fsdp.h"
#include "zt/llama.h"
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

static void test_strategies_qwen3(void) { run_case("qwen3"); }
static void test_strategies_llama3(void) { run_case("llama3"); }

int main(void) {
  ZT_RUN(test_strategies_qwen3);
  ZT_RUN(test_strategies_llama3);
  ZT_RUN(test_guarded_qwen3);
  return zt_test_finish();
}
