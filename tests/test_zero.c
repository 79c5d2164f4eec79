/* ZeRO per step (src/strategies/zero.c) over the ranks of mpirun (one rank alone otherwise):
 * shards and pieces cover the parameters exactly once; gather brings back bitwise the values;
 * reduce gives each piece the average of the ranks' grads (bitwise the all-reduce's); an
 * update of the pieces lands in the parameters (OPT at after_step, FULL at the next gather);
 * the optimizer state goes to a full optimizer and back bitwise; FULL and GRAD_OP release the
 * full parameters (PARAM accounting drops) and OPT keeps them; bad arguments are errors. */
#include <math.h>
#include <string.h>

#include "zt/fsdp.h"
#include "zt/nn.h"
#include "zt/optim.h"
#include "zt_test.h"

static zt_comm *g_world;
static int g_rank, g_size = 1;

enum { NP = 3 };
static const int64_t SHAPES[NP][2] = {{5, 7}, {3, 1}, {11, 2}}; /* 35 + 3 + 22 = 60 elements */

static void make_params(zt_param *ps, zt_tensor **ref) {
  for (int i = 0; i < NP; i++) {
    ps[i] = (zt_param){0};
    snprintf(ps[i].name, sizeof ps[i].name, "p%d", i);
    ps[i].decay = i != 1;
    ZT_CHECK_OK(zt_tensor_empty_tagged(2, SHAPES[i], ZT_DTYPE_F32, ZT_CPU, ZT_MEM_TAG_PARAM, &ps[i].tensor));
    if (!ps[i].tensor) return;
    for (int64_t k = 0; k < zt_tensor_numel(ps[i].tensor); k++) ZT_CHECK_OK(zt_tensor_set(ps[i].tensor, k, 0.01 * (double)(k + 100 * i) - 1));
    ps[i].tensor->requires_grad = true;
    ZT_CHECK_OK(zt_tensor_clone_data(ps[i].tensor, ZT_MEM_TAG_TEMP, &ref[i]));
  }
}

/* Rank r's grad of parameter i, element k. */
static double grad_value(int r, int i, int64_t k) { return sin(0.1 * (double)(k + 7 * i + 13 * r)); }

static void set_grads(zt_param *ps) {
  for (int i = 0; i < NP; i++) {
    zt_tensor *t = ps[i].tensor;
    ZT_CHECK_OK(zt_tensor_empty(t->ndim, t->shape, ZT_DTYPE_F32, ZT_CPU, &t->grad));
    if (!t->grad) return;
    for (int64_t k = 0; k < zt_tensor_numel(t); k++) ZT_CHECK_OK(zt_tensor_set(t->grad, k, grad_value(g_rank, i, k)));
  }
}

static void test_strategy(zt_shard_strategy strategy) {
  const char *sn = zt_shard_strategy_name(strategy);
  zt_param ps[NP];
  zt_tensor *ref[NP] = {0};
  make_params(ps, ref);
  zt_mem_stats before;
  zt_mem_stats_get(ZT_CPU, &before);
  zt_zero *z = NULL;
  ZT_CHECK_OK(zt_zero_new(g_world, NP, ps, strategy, &z));
  if (!z) return;
  zt_mem_stats after;
  zt_mem_stats_get(ZT_CPU, &after);
  int64_t shard = (60 + g_size - 1) / g_size * 4;
  int64_t want_param = strategy == ZT_SHARD_OPT ? before.current[ZT_MEM_TAG_PARAM] + shard : before.current[ZT_MEM_TAG_PARAM] - 240 + shard;
  if (after.current[ZT_MEM_TAG_PARAM] != want_param)
    zt_test_fail(__FILE__, __LINE__, "%s: PARAM bytes %lld after sharding, expected %lld", sn,
                 (long long)after.current[ZT_MEM_TAG_PARAM], (long long)want_param);
  /* the pieces of all ranks cover every element once */
  zt_param *pc;
  const zt_fsdp_piece *where;
  int n = zt_zero_pieces(z, &pc, &where);
  double covered = n, total = 0;
  for (int j = 0; j < n; j++) total += (double)where[j].count;
  {
    zt_tensor *t = NULL;
    ZT_CHECK_OK(zt_tensor_from_data(1, (int64_t[]){1}, ZT_DTYPE_F64, &total, &t));
    ZT_CHECK_OK(zt_all_reduce(g_world, t, ZT_REDUCE_SUM));
    total = zt_tensor_get(t, 0);
    zt_tensor_free(t);
  }
  ZT_CHECK(covered >= 1);
  ZT_CHECK_NEAR(total, 60, 0);
  /* gather: the values back, bitwise */
  ZT_CHECK_OK(zt_zero_gather(z));
  for (int i = 0; i < NP; i++)
    if (!zt_test_bitwise_equal(ps[i].tensor, ref[i])) zt_test_fail(__FILE__, __LINE__, "%s: gather changed %s", sn, ps[i].name);
  /* reduce: the average of the ranks' grads in each piece */
  set_grads(ps);
  ZT_CHECK_OK(zt_zero_reduce(z));
  for (int i = 0; i < NP; i++) ZT_CHECK(ps[i].tensor->grad == NULL);
  for (int j = 0; j < n; j++) {
    int i = where[j].name[1] - '0';
    ZT_CHECK(zt_zero_piece_param(z, j) == ps[i].tensor);
    for (int64_t k = 0; k < where[j].count; k++) {
      double sum = 0;
      for (int r = 0; r < g_size; r++) sum += (float)grad_value(r, i, where[j].start + k);
      double got = zt_tensor_get(pc[j].tensor->grad, k);
      if (fabs(got - sum / g_size) > 1e-6)
        zt_test_fail(__FILE__, __LINE__, "%s: piece of %s element %lld: grad %g, average %g", sn, where[j].name,
                     (long long)(where[j].start + k), got, sum / g_size);
    }
  }
  zt_mem_stats_get(ZT_CPU, &after);
  bool released = strategy != ZT_SHARD_OPT;
  if ((after.current[ZT_MEM_TAG_PARAM] == want_param) != true)
    zt_test_fail(__FILE__, __LINE__, "%s: PARAM bytes after reduce %lld, expected %lld (%s)", sn,
                 (long long)after.current[ZT_MEM_TAG_PARAM], (long long)want_param, released ? "released" : "kept");
  /* an update of the pieces (SGD, lr 1: w -= g) reaches the parameters */
  zt_optim_config oc = zt_optim_default(ZT_OPTIM_SGD);
  oc.lr = 1, oc.momentum = 0, oc.weight_decay = 0;
  zt_optim *o = NULL;
  ZT_CHECK_OK(zt_optim_new(&oc, n, pc, &o));
  ZT_CHECK_OK(zt_optim_step(o, 1));
  ZT_CHECK_OK(zt_zero_after_step(z));
  ZT_CHECK_OK(zt_zero_gather(z));
  for (int i = 0; i < NP; i++)
    for (int64_t k = 0; k < zt_tensor_numel(ps[i].tensor); k++) {
      double sum = 0;
      for (int r = 0; r < g_size; r++) sum += (float)grad_value(r, i, k);
      double want = (float)((float)zt_tensor_get(ref[i], k) - (float)(sum / g_size));
      if (fabs(zt_tensor_get(ps[i].tensor, k) - want) > 1e-6)
        zt_test_fail(__FILE__, __LINE__, "%s: %s[%lld] is %g after the update, expected %g", sn, ps[i].name, (long long)k,
                     zt_tensor_get(ps[i].tensor, k), want);
    }
  zt_optim_free(o);
  /* optimizer state: pieces -> full -> pieces, bitwise */
  zt_optim_config ac = zt_optim_default(ZT_OPTIM_ADAMW);
  zt_optim *sharded = NULL, *full = NULL, *back = NULL;
  ZT_CHECK_OK(zt_optim_new(&ac, n, pc, &sharded));
  ZT_CHECK_OK(zt_optim_new(&ac, NP, ps, &full));
  ZT_CHECK_OK(zt_optim_new(&ac, n, pc, &back));
  int ns;
  const char *const *names;
  zt_tensor *const *st;
  ZT_CHECK_OK(zt_optim_state(sharded, &ns, &names, &st));
  for (int i = 0; i < ns; i++)
    for (int64_t k = 0; k < zt_tensor_numel(st[i]); k++) ZT_CHECK_OK(zt_tensor_set(st[i], k, 0.5 + 0.001 * (double)(k + 31 * i) + g_rank));
  zt_optim_set_step_count(sharded, 7);
  ZT_CHECK_OK(zt_zero_state_to_full(z, sharded, full));
  ZT_CHECK(zt_optim_step_count(full) == 7);
  ZT_CHECK_OK(zt_zero_state_from_full(z, back, full));
  ZT_CHECK(zt_optim_step_count(back) == 7);
  zt_tensor *const *bt;
  ZT_CHECK_OK(zt_optim_state(back, &ns, &names, &bt));
  for (int i = 0; i < ns; i++)
    if (!zt_test_bitwise_equal(st[i], bt[i])) zt_test_fail(__FILE__, __LINE__, "%s: state %s changed on the way", sn, names[i]);
  zt_optim_free(sharded), zt_optim_free(full), zt_optim_free(back);
  ZT_CHECK_OK(zt_zero_release(z));
  zt_zero_free(z);
  for (int i = 0; i < NP; i++) zt_tensor_free(ps[i].tensor), zt_tensor_free(ref[i]);
}

static void test_errors(void) {
  zt_param ps[NP];
  zt_tensor *ref[NP] = {0};
  make_params(ps, ref);
  zt_zero *z = NULL;
  zt_comm *one = NULL;
  ZT_CHECK_OK(zt_comm_init_local(&one));
  ZT_CHECK_ERR(zt_zero_new(one, NP, ps, ZT_SHARD_HYBRID, &z), ZT_STATUS_INVALID_ARG, "ZeRO per step shards full, grad_op or opt");
  zt_tensor *keep = ps[1].tensor;
  ZT_CHECK_OK(zt_tensor_empty(2, SHAPES[1], ZT_DTYPE_F64, ZT_CPU, &ps[1].tensor));
  ZT_CHECK_ERR(zt_zero_new(one, NP, ps, ZT_SHARD_FULL, &z), ZT_STATUS_INVALID_ARG, "parameter 'p1' is not a contiguous f32 cpu tensor");
  zt_tensor_free(ps[1].tensor);
  ps[1].tensor = keep;
  zt_comm_free(one);
  for (int i = 0; i < NP; i++) zt_tensor_free(ps[i].tensor), zt_tensor_free(ref[i]);
}

static void test_full(void) { test_strategy(ZT_SHARD_FULL); }
static void test_grad_op(void) { test_strategy(ZT_SHARD_GRAD_OP); }
static void test_opt(void) { test_strategy(ZT_SHARD_OPT); }

int main(void) {
  g_world = zt_test_world(&g_rank, &g_size);
  ZT_RUN(test_full);
  ZT_RUN(test_grad_op);
  ZT_RUN(test_opt);
  ZT_RUN(test_errors);
  zt_comm_free(g_world);
  return zt_test_finish();
}
