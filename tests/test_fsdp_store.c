/* FSDP with its states in a disk store (ZeRO-Infinity: zt_fsdp_options.state_store,
 * zt_fsdp_offload_optim, zt_fsdp_optim_step), run plainly (one rank) and under mpirun -np 2 /
 * -np 4. At every world size, against FSDP without a store on the same ranks: losses, grad
 * norms (clipping engaged) and parameters after three AdamW steps bitwise equal, for FULL,
 * HYBRID and GRAD_OP, with checkpointed units, no_sync micro-batches, micro-batches each reduced
 * (the second adding into gradient shards in the store), deferred gradient
 * scalings (loss unscaling then clipping) and the model built straight into the store; between
 * steps no parameter, gradient or optimizer byte in RAM and the store holding exactly the
 * shards and moments. Against one rank running the whole batch (a one-rank stored FSDP): within
 * the data-parallel tolerance of test_fsdp.c. A sharded checkpoint saved from the store (each
 * storage read once) loads into a plain FSDP (and back), the same values. A write that fails
 * or a read that comes back short in the update: an IO error, the last checkpoint intact. */
#include <stdlib.h>

#include "core/store_internal.h"
#include "zt_test.h"
#include "zt/fsdp.h"

static zt_comm *W;
static int R, N; /* rank, size */

static const zt_gpt2_config CFG = {3, 2, 32, 64, 16, 0.0};
enum { GB = 8, GT = 16, STEPS = 3 };
#define LR 1e-3
#define CLIP 0.05 /* below the norms of these steps: clipping scales every gradient */
/* against one rank: test_fsdp.c's tolerances (reduction order only) */
#define LOSS_RTOL 1e-6
#define PARAM_ATOL 1e-5

typedef struct scase {
  zt_shard_strategy strategy;
  int group;      /* HYBRID */
  int every;      /* > 0: checkpointed blocks */
  bool no_sync;   /* two micro-batches, the first with sync off */
  bool sync_both; /* two micro-batches, both reduced: the second adds into gradient shards in the store */
  bool scaling;   /* the loss times 1024, the gradients times 1/1024 before clipping */
  bool evicted;   /* the model built into the store (zt_gpt2_new_evicted) */
} scase;

typedef struct side {
  zt_gpt2 *m;
  zt_recompute_plan *rc;
  zt_fsdp *f;
  zt_comm *own; /* a local comm for a one-rank run */
  zt_optim *o;
  zt_store *store; /* NULL: FSDP without one */
} side;

static void side_open(side *s, const scase *c, zt_comm *comm, bool stored) {
  memset(s, 0, sizeof *s);
  if (stored) ZT_CHECK_OK(zt_store_disk_new(NULL, "zt_test_fsdp_store", &s->store));
  zt_rng_seed(1234);
  if (stored && c->evicted)
    ZT_CHECK_OK(zt_gpt2_new_evicted(&CFG, s->store, &s->m));
  else
    ZT_CHECK_OK(zt_gpt2_new(&CFG, &s->m));
  if (!s->m) return;
  if (c->every) s->rc = zt_test_recompute(s->m, ZT_RECOMPUTE_FULL, c->every);
  if (!comm) ZT_CHECK_OK(zt_comm_init_local(&s->own));
  zt_fsdp_options o = zt_fsdp_options_default();
  o.strategy = comm ? c->strategy : ZT_SHARD_FULL;
  o.hybrid_group = c->group;
  o.forward_prefetch = true;
  o.state_store = s->store;
  ZT_CHECK_OK(zt_fsdp_new(comm ? comm : s->own, zt_gpt2_module(s->m), &o, &s->f));
  ZT_CHECK_OK(zt_fsdp_auto_wrap(s->f, NULL, NULL));
  ZT_CHECK_OK(zt_fsdp_init(s->f));
  zt_param *p = NULL;
  int n = zt_fsdp_params(s->f, &p, NULL);
  zt_optim_config oc = zt_optim_default(ZT_OPTIM_ADAMW);
  oc.lr = LR;
  ZT_CHECK_OK(zt_optim_new(&oc, n, p, &s->o));
  if (stored && s->o) ZT_CHECK_OK(zt_fsdp_offload_optim(s->f, s->o));
}

static void side_close(side *s) {
  zt_optim_free(s->o);
  zt_fsdp_free(s->f);
  zt_recompute_plan_free(s->rc);
  zt_gpt2_free(s->m);
  zt_comm_free(s->own);
  zt_store_free(s->store); /* last: the model, the optimizer and the shards had bytes in it */
  memset(s, 0, sizeof *s);
}

/* One training step on this rank's rows (all rows when alone): loss (mean over the ranks),
 * grad norm. */
static void train_step(side *s, const scase *c, int step, bool alone, double *loss, double *norm) {
  int micro = c->no_sync || c->sync_both ? 2 : 1;
  double sum = 0;
  double scale = c->scaling ? 1024.0 : 1.0;
  for (int k = 0; k < micro; k++) {
    zt_tensor *ids = zt_test_rand_ids(GB, GT, CFG.vocab_size, 100 + 10 * step + k);
    zt_tensor *tg = zt_test_rand_ids(GB, GT, CFG.vocab_size, 500 + 10 * step + k);
    zt_tensor *ri = alone ? ids : zt_test_rows(ids, R, N), *rt = alone ? tg : zt_test_rows(tg, R, N);
    zt_fsdp_set_sync(s->f, !c->no_sync || k == micro - 1);
    zt_tensor *l = NULL, *scaled = NULL;
    ZT_CHECK_OK(zt_gpt2_forward(s->m, ri, rt, NULL, &l));
    if (l) {
      sum += zt_tensor_get(l, 0);
      if (c->scaling) ZT_CHECK_OK(zt_mul_scalar(l, scale, &scaled));
      ZT_CHECK_OK(zt_backward(1, scaled ? &scaled : &l, NULL, false));
    }
    zt_test_free_all((zt_tensor *[]){l, scaled}, 2);
    if (!alone) zt_test_free_all((zt_tensor *[]){ri, rt}, 2);
    zt_test_free_all((zt_tensor *[]){ids, tg}, 2);
  }
  if (c->scaling) ZT_CHECK_OK(zt_fsdp_scale_grads(s->f, 1.0 / scale));
  ZT_CHECK_OK(zt_fsdp_clip_grad_norm(s->f, CLIP, norm));
  ZT_CHECK_OK(zt_fsdp_optim_step(s->f, s->o, LR));
  ZT_CHECK_OK(zt_fsdp_after_step(s->f));
  zt_fsdp_zero_grad(s->f);
  *loss = alone ? sum : zt_test_mean_over(W, sum);
}

/* Every full parameter of a and b (gathered): max |a - b|. */
static double param_diff(side *a, side *b) {
  ZT_CHECK_OK(zt_fsdp_gather_full_params(a->f));
  ZT_CHECK_OK(zt_fsdp_gather_full_params(b->f));
  zt_param *pa = NULL, *pb = NULL;
  int na = zt_gpt2_params(a->m, &pa), nb = zt_gpt2_params(b->m, &pb);
  double worst = na == nb ? 0 : INFINITY;
  for (int i = 0; i < na && i < nb; i++) worst = fmax(worst, zt_test_max_abs_diff(pa[i].tensor, pb[i].tensor));
  ZT_CHECK_OK(zt_fsdp_release_full_params(a->f));
  ZT_CHECK_OK(zt_fsdp_release_full_params(b->f));
  return worst;
}

/* Between steps a stored side holds its states in the store only: the shards and the two
 * AdamW moments of every piece, nothing in RAM. */
static void check_in_store(side *s, int64_t cpu_before[ZT_MEM_TAG_COUNT], const char *what) {
  ZT_CHECK_OK(zt_store_flush(s->store)); /* the writes behind done: their RAM freed */
  zt_mem_stats ms;
  zt_mem_stats_get(ZT_CPU, &ms);
  static const zt_mem_tag tags[] = {ZT_MEM_TAG_PARAM, ZT_MEM_TAG_GRAD, ZT_MEM_TAG_OPTIM};
  for (int i = 0; i < 3; i++)
    if (ms.current[tags[i]] != cpu_before[tags[i]])
      zt_test_fail(__FILE__, __LINE__, "%s: %lld bytes of %s in RAM between steps (want none)", what,
                   (long long)(ms.current[tags[i]] - cpu_before[tags[i]]), zt_mem_tag_name(tags[i]));
  zt_param *p;
  const zt_fsdp_piece *pc;
  int n = zt_fsdp_params(s->f, &p, &pc);
  int64_t want = 0;
  for (int j = 0; j < n; j++) want += 2 * pc[j].count * 4; /* exp_avg, exp_avg_sq */
  for (int k = 0; k < zt_fsdp_num_units(s->f); k++) {
    int64_t P = zt_fsdp_unit_numel(s->f, k), G = zt_comm_size(zt_fsdp_shard_comm(s->f));
    want += (P + G - 1) / G * 4; /* the padded shard */
  }
  zt_store_stats st;
  zt_store_stats_get(s->store, &st);
  if (st.bytes_held != want)
    zt_test_fail(__FILE__, __LINE__, "%s: the store holds %lld bytes; the shards and moments are %lld", what,
                 (long long)st.bytes_held, (long long)want);
}

static void run_case(const scase *c, const char *what) {
  zt_mem_stats ms;
  zt_mem_stats_get(ZT_CPU, &ms);
  int64_t before[ZT_MEM_TAG_COUNT];
  memcpy(before, ms.current, sizeof before);
  double ls[STEPS], ns[STEPS], lp[STEPS], np_[STEPS];
  side st, pl;
  side_open(&st, c, W, true);
  if (!st.o) return side_close(&st);
  for (int step = 0; step < STEPS; step++) {
    train_step(&st, c, step, false, &ls[step], &ns[step]);
    check_in_store(&st, before, what);
  }
  zt_store_stats ss;
  zt_store_stats_get(st.store, &ss);
  ZT_CHECK(ss.puts_skipped > 0); /* shards sent back unchanged after a gather: nothing written */
  side_open(&pl, c, W, false);
  for (int step = 0; pl.o && step < STEPS; step++) train_step(&pl, c, step, false, &lp[step], &np_[step]);
  for (int step = 0; pl.o && step < STEPS; step++)
    if (ls[step] != lp[step] || ns[step] != np_[step])
      zt_test_fail(__FILE__, __LINE__, "%s, step %d: loss %.9g norm %.9g with the store, %.9g %.9g without", what,
                   step, ls[step], ns[step], lp[step], np_[step]);
  double d = pl.o ? param_diff(&st, &pl) : 0;
  if (d != 0) zt_test_fail(__FILE__, __LINE__, "%s: parameters differ by %g from FSDP without a store", what, d);
  side_close(&pl);
  side_close(&st);
}

static scase base(zt_shard_strategy s) {
  scase c = {0};
  c.strategy = s;
  if (s == ZT_SHARD_HYBRID) c.group = N >= 2 ? N / 2 : 1;
  return c;
}

static void test_bitwise_as_without_store(void) {
  static const zt_shard_strategy k[] = {ZT_SHARD_FULL, ZT_SHARD_HYBRID, ZT_SHARD_GRAD_OP};
  static const char *const names[] = {"full", "hybrid", "grad_op"};
  for (int i = 0; i < 3; i++) {
    scase c = base(k[i]);
    run_case(&c, names[i]);
  }
  scase c = base(ZT_SHARD_FULL);
  c.every = 1;
  run_case(&c, "full, checkpointed blocks");
  c = base(ZT_SHARD_FULL);
  c.no_sync = true;
  run_case(&c, "full, no_sync micro-batches");
  c = base(ZT_SHARD_FULL);
  c.sync_both = true;
  run_case(&c, "full, two reduced micro-batches");
  c = base(ZT_SHARD_FULL);
  c.scaling = true;
  run_case(&c, "full, loss scaling");
  c = base(ZT_SHARD_FULL);
  c.evicted = true;
  run_case(&c, "full, built in the store");
}

/* N ranks with their states on disk against one rank running every row, its states on disk. */
static void test_ranks_against_one(void) {
  scase c = base(ZT_SHARD_FULL);
  c.evicted = true;
  side one, many;
  side_open(&one, &c, NULL, true);
  side_open(&many, &c, W, true);
  for (int step = 0; one.o && many.o && step < STEPS; step++) {
    double l1, n1, ln, nn;
    train_step(&one, &c, step, true, &l1, &n1);
    train_step(&many, &c, step, false, &ln, &nn);
    if (!(fabs(l1 - ln) <= LOSS_RTOL * fabs(l1)) || !(fabs(n1 - nn) <= 1e-5 * n1))
      zt_test_fail(__FILE__, __LINE__, "step %d: %d ranks loss %.9g norm %.9g, one rank %.9g %.9g", step, N, ln, nn,
                   l1, n1);
  }
  double d = one.o && many.o ? param_diff(&one, &many) : 0;
  if (!(d <= PARAM_ATOL)) zt_test_fail(__FILE__, __LINE__, "%d ranks vs one: parameters differ by %g", N, d);
  side_close(&many);
  side_close(&one);
}

/* A sharded checkpoint saved from the store loads into FSDP without one, and back. */
static void test_checkpoints(void) {
  scase c = base(ZT_SHARD_FULL);
  side st, pl;
  side_open(&st, &c, W, true);
  side_open(&pl, &c, W, false);
  if (!st.o || !pl.o) goto out;
  double l, n;
  train_step(&st, &c, 0, false, &l, &n);
  char dir[256], a[300], b[300];
  zt_test_shared_tmpdir(W, "fsdp_store", dir, sizeof dir);
  snprintf(a, sizeof a, "%s/a", dir);
  snprintf(b, sizeof b, "%s/b", dir);
  zt_train_state ts = {0};
  ts.step = 1;
  ts.model = (zt_lm_config){.family = ZT_LM_GPT2, .gpt2 = CFG};
  zt_store_io_stats io0, io1;
  zt_store_io_stats_get(st.store, &io0);
  ZT_CHECK_OK(zt_snapshot_save_sharded(a, st.f, st.o, &ts));
  zt_store_io_stats_get(st.store, &io1);
  zt_store_stats ss;
  zt_store_stats_get(st.store, &ss);
  /* each storage read once (a shard's pieces one after another share one read), whole
   * 4096-byte blocks */
  if (io1.read_bytes - io0.read_bytes > ss.bytes_held + 4096 * ss.items)
    zt_test_fail(__FILE__, __LINE__, "the save read %lld bytes from a store holding %lld in %lld items",
                 (long long)(io1.read_bytes - io0.read_bytes), (long long)ss.bytes_held, (long long)ss.items);
  zt_train_state got = {0};
  ZT_CHECK_OK(zt_snapshot_load_sharded(a, pl.f, pl.o, &got));
  ZT_CHECK(got.step == 1 && zt_optim_step_count(pl.o) == zt_optim_step_count(st.o));
  ZT_CHECK(param_diff(&st, &pl) == 0);
  /* both take the same next step: the optimizer state came across too */
  double l2, n2, l3, n3;
  train_step(&st, &c, 1, false, &l2, &n2);
  train_step(&pl, &c, 1, false, &l3, &n3);
  ZT_CHECK(l2 == l3 && n2 == n3 && param_diff(&st, &pl) == 0);
  /* and back: plain -> the store (into the evicted shards and moments) */
  train_step(&pl, &c, 2, false, &l3, &n3);
  ZT_CHECK_OK(zt_snapshot_save_sharded(b, pl.f, pl.o, &ts));
  zt_store_io_stats_get(st.store, &io0);
  ZT_CHECK_OK(zt_snapshot_load_sharded(b, st.f, st.o, &got));
  zt_store_io_stats_get(st.store, &io1);
  zt_store_stats_get(st.store, &ss);
  /* into the store: each storage read once (a shard, for the padding its pieces leave) and
   * written once */
  if (io1.read_bytes - io0.read_bytes > ss.bytes_held + 4096 * ss.items ||
      io1.write_bytes - io0.write_bytes > ss.bytes_held + 4096 * ss.items)
    zt_test_fail(__FILE__, __LINE__, "the load read %lld and wrote %lld bytes into a store holding %lld in %lld items",
                 (long long)(io1.read_bytes - io0.read_bytes), (long long)(io1.write_bytes - io0.write_bytes),
                 (long long)ss.bytes_held, (long long)ss.items);
  ZT_CHECK(param_diff(&st, &pl) == 0);
  train_step(&st, &c, 3, false, &l2, &n2);
  train_step(&pl, &c, 3, false, &l3, &n3);
  ZT_CHECK(l2 == l3 && n2 == n3 && param_diff(&st, &pl) == 0);
  ZT_CHECK_OK(zt_barrier(W));
  if (R == 0) zt_test_tmpdir_remove();
out:
  side_close(&pl);
  side_close(&st);
}

static void test_errors(void) {
  zt_store *store = NULL;
  ZT_CHECK_OK(zt_store_memory_new(&store));
  zt_gpt2 *m = NULL;
  ZT_CHECK_OK(zt_gpt2_new(&CFG, &m));
  zt_fsdp_options o = zt_fsdp_options_default();
  o.state_store = store;
  zt_fsdp *f = NULL;
  for (int s = ZT_SHARD_OPT; s <= ZT_SHARD_NONE; s++) {
    o.strategy = (zt_shard_strategy)s;
    ZT_CHECK_ERR(zt_fsdp_new(W, zt_gpt2_module(m), &o, &f), ZT_STATUS_INVALID_ARG, "keeps every full parameter in RAM");
  }
  o = zt_fsdp_options_default();
  ZT_CHECK_OK(zt_fsdp_new(W, zt_gpt2_module(m), &o, &f));
  ZT_CHECK_OK(zt_fsdp_init(f));
  zt_param *p = NULL;
  int n = zt_fsdp_params(f, &p, NULL);
  zt_optim *opt = NULL;
  zt_optim_config oc = zt_optim_default(ZT_OPTIM_ADAMW);
  ZT_CHECK_OK(zt_optim_new(&oc, n, p, &opt));
  ZT_CHECK_ERR(zt_fsdp_offload_optim(f, opt), ZT_STATUS_INVALID_ARG, "without zt_fsdp_options.state_store");
  zt_optim *other = NULL;
  ZT_CHECK_OK(zt_optim_new(&oc, n > 1 ? n - 1 : n, p, &other));
  ZT_CHECK_ERR(zt_fsdp_optim_step(f, other, LR), ZT_STATUS_INVALID_ARG, "must update the FSDP pieces");
  zt_optim_free(other);
  zt_optim_free(opt);
  zt_fsdp_free(f);
  zt_gpt2_free(m);
  zt_store_free(store);
}

/* The update meets a fault of the disk (a full disk on a write, a short read): the step says
 * so, as an IO error naming what to do (local: no collective follows, so every rank's timing may
 * differ), and the checkpoint saved before it is intact: it loads into FSDP without a store as
 * the state it saved. */
static void fault_case(zt__io_fault kind, const char *expect) {
  scase c = base(ZT_SHARD_FULL);
  side s, pl, q;
  side_open(&s, &c, W, true);
  side_open(&pl, &c, W, false);
  side_open(&q, &c, W, false);
  char dir[256], ck[300];
  zt_test_shared_tmpdir(W, "fsdp_store_fault", dir, sizeof dir);
  snprintf(ck, sizeof ck, "%s/ck", dir);
  if (!s.o || !pl.o || !q.o) goto out;
  double l, n;
  train_step(&s, &c, 0, false, &l, &n);
  train_step(&pl, &c, 0, false, &l, &n);
  zt_train_state ts = {0};
  ts.step = 1;
  ts.model = (zt_lm_config){.family = ZT_LM_GPT2, .gpt2 = CFG};
  ZT_CHECK_OK(zt_snapshot_save_sharded(ck, s.f, s.o, &ts));
  zt_tensor *ids = zt_test_rand_ids(GB, GT, CFG.vocab_size, 7), *tg = zt_test_rand_ids(GB, GT, CFG.vocab_size, 8);
  zt_tensor *ri = zt_test_rows(ids, R, N), *rt = zt_test_rows(tg, R, N), *loss = NULL;
  ZT_CHECK_OK(zt_gpt2_forward(s.m, ri, rt, NULL, &loss));
  if (loss) ZT_CHECK_OK(zt_backward(1, &loss, NULL, false));
  ZT_CHECK_OK(zt_store_flush(s.store));
  ZT_CHECK(zt__store_disk_fault_at(s.store, kind, 1)); /* the next request of that kind */
  zt_status e = zt_fsdp_optim_step(s.f, s.o, LR);
  if (!e) e = zt_store_flush(s.store); /* written behind: reported by a later eviction or the flush */
  ZT_CHECK(e == ZT_STATUS_IO);
  if (e && !strstr(zt_last_error(), expect))
    zt_test_fail(__FILE__, __LINE__, "the error does not say '%s': %s", expect, zt_last_error());
  ZT_CHECK(zt__store_disk_fault_at(s.store, kind, 0));
  zt_fsdp_zero_grad(s.f);
  zt_test_free_all((zt_tensor *[]){ids, tg, ri, rt, loss}, 5);
  zt_train_state got = {0};
  ZT_CHECK_OK(zt_snapshot_load_sharded(ck, q.f, q.o, &got));
  ZT_CHECK(got.step == 1 && param_diff(&q, &pl) == 0);
out:
  ZT_CHECK_OK(zt_barrier(W));
  if (R == 0) zt_test_tmpdir_remove();
  side_close(&q);
  side_close(&pl);
  side_close(&s);
}

static void test_faults(void) {
  fault_case(ZT__IO_FAULT_WRITE_ENOSPC, "free space");
  fault_case(ZT__IO_FAULT_READ_SHORT, "unexpected end of file");
}

int main(void) {
  if (!(W = zt_test_world(&R, &N))) return 1;
  ZT_RUN(test_errors);
  ZT_RUN(test_bitwise_as_without_store);
  ZT_RUN(test_ranks_against_one);
  ZT_RUN(test_checkpoints);
  ZT_RUN(test_faults);
  int rc = zt_test_finish();
  zt_comm_free(W);
  return rc;
}
