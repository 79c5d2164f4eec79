/* Module forward hooks as lists: several hooks on one module run in the order added,
 * removal by id keeps the others' order, a failing hook fails the forward; and two
 * strategies on one module: FSDP's gather hooks and another hook set on the same GPT-2
 * block, with FSDP's losses unchanged by the second. */
#include <stdlib.h>
#include <string.h>

#include "core/status_internal.h"
#include "zt/fsdp.h"
#include "zt_test.h"

typedef struct trace {
  char log[64];
  int n;
} trace;

typedef struct tag {
  trace *t;
  char c;
  bool fail;
} tag;

static zt_status pre(zt_module *m, void *ud) {
  (void)m;
  tag *g = ud;
  if (g->t->n < 62) g->t->log[g->t->n++] = g->c;
  return g->fail ? ZT_ERR(ZT_STATUS_STATE, "hook %c fails", g->c) : ZT_OK;
}

static zt_status post(zt_module *m, int n, zt_tensor *const *out, void *ud) {
  (void)m, (void)n, (void)out;
  tag *g = ud;
  if (g->t->n < 62) g->t->log[g->t->n++] = (char)(g->c - 'a' + 'A');
  return ZT_OK;
}

static void test_list_order_and_removal(void) {
  zt_module *m = NULL;
  ZT_CHECK_OK(zt_module_new(NULL, "m", &m));
  if (!m) return;
  trace t = {{0}, 0};
  tag a = {&t, 'a', false}, b = {&t, 'b', false}, c = {&t, 'c', false};
  int ia = 0, ib = 0, ic = 0;
  ZT_CHECK_OK(zt_module_add_hooks(m, &(zt_module_hooks){pre, post, &a}, &ia));
  ZT_CHECK_OK(zt_module_add_hooks(m, &(zt_module_hooks){pre, NULL, &b}, &ib));
  ZT_CHECK_OK(zt_module_add_hooks(m, &(zt_module_hooks){NULL, post, &c}, &ic));
  ZT_CHECK(ia > 0 && ib > 0 && ic > 0 && ia != ib && ib != ic && ia != ic);
  ZT_CHECK(zt_module_has_pre_hook(m, pre));
  ZT_CHECK_OK(zt_module_pre_forward(m));
  ZT_CHECK_OK(zt_module_post_forward(m, 0, NULL));
  ZT_CHECK(!strcmp(t.log, "abAC"));
  zt_module_remove_hooks(m, ib);
  zt_module_remove_hooks(m, 12345); /* unknown: no-op */
  memset(&t, 0, sizeof t);
  ZT_CHECK_OK(zt_module_pre_forward(m));
  ZT_CHECK_OK(zt_module_post_forward(m, 0, NULL));
  ZT_CHECK(!strcmp(t.log, "aAC"));
  /* a failing pre hook stops the ones after it */
  a.fail = true;
  ZT_CHECK_OK(zt_module_add_hooks(m, &(zt_module_hooks){pre, NULL, &b}, NULL));
  memset(&t, 0, sizeof t);
  ZT_CHECK_ERR(zt_module_pre_forward(m), ZT_STATUS_STATE, "hook a fails");
  ZT_CHECK(!strcmp(t.log, "a"));
  ZT_CHECK_ERR(zt_module_add_hooks(m, &(zt_module_hooks){NULL, NULL, NULL}, NULL), ZT_STATUS_INVALID_ARG,
               "neither a pre nor a post hook");
  zt_module_remove_hooks(m, ia);
  zt_module_remove_hooks(m, ic);
  ZT_CHECK(m->n_hooks == 1);
  zt_module_free(m); /* frees the remaining list */
}

static const zt_gpt2_config cfg = {2, 2, 16, 32, 16, 0.0};

/* Losses of 3 AdamW steps of FSDP (one rank, FULL) on a fresh seeded model; with `extra`,
 * another hook set sits on block 0 next to FSDP's, added before FSDP wraps it. */
static void run(bool extra, double *losses, trace *t) {
  zt_rng_seed(5);
  zt_gpt2 *m = NULL;
  zt_comm *comm = NULL;
  zt_fsdp *f = NULL;
  zt_optim *o = NULL;
  ZT_CHECK_OK(zt_gpt2_new(&cfg, &m));
  ZT_CHECK_OK(zt_comm_init_local(&comm));
  if (!m || !comm) return;
  zt_module *block = zt_module_child(zt_module_child(zt_module_child(zt_gpt2_module(m), "transformer"), "h"), "0");
  ZT_CHECK(block != NULL);
  tag g = {t, 'x', false};
  int id = 0;
  if (extra) ZT_CHECK_OK(zt_module_add_hooks(block, &(zt_module_hooks){pre, post, &g}, &id));
  ZT_CHECK_OK(zt_fsdp_new(comm, zt_gpt2_module(m), NULL, &f));
  ZT_CHECK_OK(zt_fsdp_auto_wrap(f, NULL, NULL));
  ZT_CHECK_OK(zt_fsdp_init(f));
  ZT_CHECK(block->n_hooks == (extra ? 2 : 1));
  zt_param *p = NULL;
  int n = zt_fsdp_params(f, &p, NULL);
  zt_optim_config oc = zt_optim_default(ZT_OPTIM_ADAMW);
  ZT_CHECK_OK(zt_optim_new(&oc, n, p, &o));
  zt_tensor *ids = zt_test_rand_ids(2, 8, 32, 1), *tg = zt_test_rand_ids(2, 8, 32, 2);
  for (int s = 0; s < 3 && o; s++) {
    zt_tensor *loss = NULL;
    ZT_CHECK_OK(zt_gpt2_forward(m, ids, tg, NULL, &loss));
    if (!loss) break;
    losses[s] = zt_tensor_get(loss, 0);
    ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
    zt_tensor_free(loss);
    ZT_CHECK_OK(zt_optim_step(o, 1e-2));
    ZT_CHECK_OK(zt_fsdp_after_step(f));
    zt_fsdp_zero_grad(f);
  }
  zt_optim_free(o);
  zt_fsdp_free(f);
  /* FSDP took only its own hooks off the block */
  ZT_CHECK(block->n_hooks == (extra ? 1 : 0));
  if (extra) ZT_CHECK(block->hooks[0].id == id);
  zt_tensor_free(ids);
  zt_tensor_free(tg);
  zt_comm_free(comm);
  zt_gpt2_free(m);
}

static void test_fsdp_and_another_hook_on_one_block(void) {
  double plain[3] = {0}, both[3] = {0};
  trace t = {{0}, 0};
  run(false, plain, &t);
  ZT_CHECK(t.n == 0);
  run(true, both, &t);
  ZT_CHECK(!strcmp(t.log, "xXxXxX")); /* once per forward, pre then post */
  for (int s = 0; s < 3; s++) ZT_CHECK(plain[s] == both[s]);
  ZT_CHECK(plain[2] < plain[0]);
}

int main(void) {
  ZT_RUN(test_list_order_and_removal);
  ZT_RUN(test_fsdp_and_another_hook_on_one_block);
  return zt_test_finish();
}
