/* FSDP FULL on the guarded device (tests/guard_backend.c), on one rank or under mpirun -np 2:
 * GPT-2 tiny trained with its parameters, flat shards, gathers, gradient reductions and
 * optimizer state on the guarded device gives bitwise the losses and parameters of the same
 * run on the CPU. The collectives stage the guarded bytes through host buffers (the comm
 * backends take host pointers); any direct host access to them would crash. */
#include <string.h>

#include "zt_test.h"
#include "guard_backend.h"
#include "core/backend.h"
#include "core/tensor_internal.h"
#include "zt/fsdp.h"

static zt_comm *W;
static int R, N; /* rank, size */

static const zt_gpt2_config CFG = {2, 2, 32, 64, 16, 0.1};
enum { GB = 4, GT = 16, STEPS = 3, MAXP = 64 };

typedef struct run {
  double loss[STEPS], norm[STEPS];
  int n;
  zt_tensor *param[MAXP]; /* full parameters after the steps, on the cpu */
} run;

static zt_tensor *to_dev(const zt_tensor *t, zt_device dev) {
  zt_tensor *o = NULL;
  ZT_CHECK_OK(zt__tensor_to_device(t, dev, ZT_MEM_TAG_TEMP, &o));
  return o;
}

/* Move every parameter of m to dev (new storage there, same tensor objects). */
static void params_to(zt_gpt2 *m, zt_device dev) {
  zt_param *ps;
  int np = zt_gpt2_params(m, &ps);
  for (int i = 0; i < np; i++) {
    zt_tensor *d = NULL;
    ZT_CHECK_OK(zt__tensor_to_device(ps[i].tensor, dev, ZT_MEM_TAG_PARAM, &d));
    if (!d) return;
    zt__tensor_rebind(ps[i].tensor, d->storage, 0);
    zt_tensor_free(d);
  }
}

static void train(zt_device dev, run *r) {
  *r = (run){0};
  zt_rng_seed(77); /* the same initial weights on every rank */
  zt_gpt2 *m = NULL;
  ZT_CHECK_OK(zt_gpt2_new(&CFG, &m));
  if (!m) return;
  params_to(m, dev);
  zt_fsdp_options fo = zt_fsdp_options_default();
  fo.strategy = ZT_SHARD_FULL;
  zt_fsdp *f = NULL;
  ZT_CHECK_OK(zt_fsdp_new(W, zt_gpt2_module(m), &fo, &f));
  ZT_CHECK_OK(zt_fsdp_auto_wrap(f, NULL, NULL));
  ZT_CHECK_OK(zt_fsdp_init(f));
  zt_param *p = NULL;
  int np = zt_fsdp_params(f, &p, NULL);
  zt_optim_config oc = zt_optim_default(ZT_OPTIM_ADAMW);
  zt_optim *o = NULL;
  ZT_CHECK_OK(zt_optim_new(&oc, np, p, &o));
  for (int s = 0; s < STEPS && o; s++) {
    zt_tensor *ids = zt_test_rand_ids(GB, GT, CFG.vocab_size, 10 + s), *tg = zt_test_rand_ids(GB, GT, CFG.vocab_size, 20 + s);
    zt_tensor *ri = zt_test_rows(ids, R, N), *rt = zt_test_rows(tg, R, N);
    zt_tensor *di = to_dev(ri, dev), *dt = to_dev(rt, dev), *loss = NULL;
    ZT_CHECK_OK(zt_gpt2_forward(m, di, dt, NULL, &loss));
    if (loss) {
      ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
      r->loss[s] = zt_tensor_get(loss, 0);
    }
    zt_tensor_free(loss);
    zt_test_free_all((zt_tensor *[]){ids, tg, ri, rt, di, dt}, 6);
    ZT_CHECK_OK(zt_fsdp_clip_grad_norm(f, 0.5, &r->norm[s]));
    ZT_CHECK_OK(zt_optim_step(o, 1e-2));
    ZT_CHECK_OK(zt_fsdp_after_step(f));
    zt_fsdp_zero_grad(f);
  }
  ZT_CHECK_OK(zt_fsdp_gather_full_params(f));
  zt_param *full;
  r->n = zt_gpt2_params(m, &full);
  for (int i = 0; i < r->n && i < MAXP; i++) {
    ZT_CHECK(zt_device_equal(zt_tensor_device(full[i].tensor), dev));
    r->param[i] = to_dev(full[i].tensor, ZT_CPU);
  }
  ZT_CHECK_OK(zt_fsdp_release_full_params(f));
  zt_optim_free(o);
  zt_fsdp_free(f);
  zt_gpt2_free(m);
}

static void test_fsdp_full_bitwise(void) {
  zt_test_guard_register();
  run cpu, gd;
  train(ZT_CPU, &cpu);
  int64_t opens = zt_test_guard_opens();
  train(ZT_GUARDED, &gd);
  ZT_CHECK(zt_test_guard_opens() > opens);
  ZT_CHECK(zt_test_guard_is_closed());
  for (int s = 0; s < STEPS; s++) {
    if (memcmp(&cpu.loss[s], &gd.loss[s], sizeof(double)))
      zt_test_fail(__FILE__, __LINE__, "rank %d: loss of step %d differs: %.17g vs %.17g", R, s, cpu.loss[s], gd.loss[s]);
    if (memcmp(&cpu.norm[s], &gd.norm[s], sizeof(double)))
      zt_test_fail(__FILE__, __LINE__, "rank %d: grad norm of step %d differs: %.17g vs %.17g", R, s, cpu.norm[s],
                   gd.norm[s]);
  }
  ZT_CHECK(cpu.n == gd.n && cpu.n > 0);
  for (int i = 0; i < cpu.n && i < gd.n && i < MAXP; i++)
    if (!zt_test_bitwise_equal(cpu.param[i], gd.param[i]))
      zt_test_fail(__FILE__, __LINE__, "rank %d: parameter %d differs after %d steps", R, i, STEPS);
  zt_test_free_all(cpu.param, MAXP);
  zt_test_free_all(gd.param, MAXP);
}

/* Every collective on guarded tensors gives the bytes it gives on cpu tensors. */
static void test_collectives(void) {
  zt_test_guard_register();
  int64_t n = 6;
  zt_tensor *a = zt_test_rand(1, &n, ZT_DTYPE_F32, -1, 1, 31 + (uint64_t)R), *ga = to_dev(a, ZT_GUARDED);
  /* all-reduce (avg) in place */
  ZT_CHECK_OK(zt_all_reduce(W, a, ZT_REDUCE_AVG));
  ZT_CHECK_OK(zt_all_reduce(W, ga, ZT_REDUCE_AVG));
  zt_tensor *back = to_dev(ga, ZT_CPU);
  ZT_CHECK(zt_test_bitwise_equal(a, back));
  zt_tensor_free(back);
  /* all-gather and reduce-scatter */
  int64_t nn = n * N;
  zt_tensor *all = NULL, *gall = NULL, *rs = NULL, *grs = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(1, &nn, ZT_DTYPE_F32, ZT_CPU, &all));
  ZT_CHECK_OK(zt_tensor_zeros(1, &nn, ZT_DTYPE_F32, ZT_GUARDED, &gall));
  ZT_CHECK_OK(zt_all_gather(W, a, all));
  ZT_CHECK_OK(zt_all_gather(W, ga, gall));
  back = to_dev(gall, ZT_CPU);
  ZT_CHECK(zt_test_bitwise_equal(all, back));
  zt_tensor_free(back);
  ZT_CHECK_OK(zt_tensor_zeros(1, &n, ZT_DTYPE_F32, ZT_CPU, &rs));
  ZT_CHECK_OK(zt_tensor_zeros(1, &n, ZT_DTYPE_F32, ZT_GUARDED, &grs));
  ZT_CHECK_OK(zt_reduce_scatter(W, all, rs, ZT_REDUCE_SUM));
  ZT_CHECK_OK(zt_reduce_scatter(W, gall, grs, ZT_REDUCE_SUM));
  back = to_dev(grs, ZT_CPU);
  ZT_CHECK(zt_test_bitwise_equal(rs, back));
  zt_tensor_free(back);
  /* broadcast from the last rank */
  ZT_CHECK_OK(zt_tensor_fill_(ga, (double)R));
  ZT_CHECK_OK(zt_broadcast(W, ga, N - 1));
  ZT_CHECK(zt_tensor_get(ga, 0) == (double)(N - 1) && zt_tensor_get(ga, n - 1) == (double)(N - 1));
  zt_test_free_all((zt_tensor *[]){a, ga, all, gall, rs, grs}, 6);
  ZT_CHECK(zt_test_guard_is_closed());
}

int main(void) {
  if (!(W = zt_test_world(&R, &N))) return 1;
  ZT_RUN(test_collectives);
  ZT_RUN(test_fsdp_full_bitwise);
  int rc = zt_test_finish();
  zt_comm_free(W);
  return rc;
}
