/* Process groups at any size: run plainly (one rank, local backend) and under
 * mpirun -np 2 / -np 4 (mpi backend). Values are rank-dependent integers held in f32, so
 * every sum is exact; debug mode must turn a mismatched collective into an error on
 * every rank (never a hang). Timeouts' messages, the arrival board and the agreement
 * helpers are tested here; real timeouts (which end the job) in comm_fault_test.sh. */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/status_internal.h"
#include "zt_test.h"
#include "zt/comm.h"
#include "comm/comm_internal.h"
#include "stuck_comm.h"

static zt_comm *g_world;
static int R, N; /* rank, size */

/* How messages name world rank w ("world rank W", with " on HOST" when the job spans hosts):
 * the expectations below hold on one host and across several (tests/hosts). */
static const char *wname(int w, char *buf, size_t cap) {
  zt__rank_names n = zt__comm_names(g_world);
  return zt__rank_name(&n, w, buf, cap); /* g_world: group rank = world rank */
}

static zt_tensor *vec(zt_dtype dt, int64_t n, double (*f)(int64_t i)) {
  zt_tensor *t = NULL;
  ZT_CHECK_OK(zt_tensor_empty_tagged(1, (int64_t[]){n}, dt, ZT_CPU, ZT_MEM_TAG_TEMP, &t));
  for (int64_t i = 0; t && f && i < n; i++) ZT_CHECK_OK(zt_tensor_set(t, i, f(i)));
  return t;
}

static double v_rank(int64_t i) { return (double)(R * 10 + i); }
static double v_rank_sq(int64_t i) { return (double)((R + 1) * (R + 1) + i); }

static void test_basics(void) {
  ZT_CHECK(R >= 0 && R < N);
  if (N > 1) ZT_CHECK(strcmp(zt_comm_backend_name(g_world), "mpi") == 0);
  if (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMI_SIZE")) ZT_CHECK(strcmp(zt_comm_backend_name(g_world), "local") == 0);
  zt_comm *l = NULL;
  ZT_CHECK_OK(zt_comm_init_local(&l));
  ZT_CHECK(zt_comm_rank(l) == 0 && zt_comm_size(l) == 1 && strcmp(zt_comm_backend_name(l), "local") == 0);
  zt_comm_free(l);
  zt_comm_free(NULL);
}

static void test_all_reduce(void) {
  const zt_dtype dts[] = {ZT_DTYPE_F32, ZT_DTYPE_F64, ZT_DTYPE_I32, ZT_DTYPE_I64, ZT_DTYPE_BF16, ZT_DTYPE_F16};
  double rsum = N * (N - 1) / 2.0;
  for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) {
    zt_tensor *t = vec(dts[k], 5, v_rank);
    ZT_CHECK_OK(zt_all_reduce(g_world, t, ZT_REDUCE_SUM));
    for (int64_t i = 0; i < 5; i++) ZT_CHECK(zt_tensor_get(t, i) == 10 * rsum + N * i);
    zt_tensor_free(t);
  }
  /* avg of (r+1)^2 + i: the quotient need not be exact in f32, so within a tolerance */
  zt_tensor *t = vec(ZT_DTYPE_F32, 4, v_rank_sq);
  ZT_CHECK_OK(zt_all_reduce(g_world, t, ZT_REDUCE_AVG));
  double sq = 0;
  for (int r = 0; r < N; r++) sq += (r + 1.0) * (r + 1.0);
  for (int64_t i = 0; i < 4; i++) ZT_CHECK_NEAR(zt_tensor_get(t, i), sq / N + i, 1e-5);
  zt_tensor_free(t);
  zt_tensor *b = vec(ZT_DTYPE_BF16, 3, v_rank);
  ZT_CHECK_OK(zt_all_reduce(g_world, b, ZT_REDUCE_AVG));
  for (int64_t i = 0; i < 3; i++) ZT_CHECK_NEAR(zt_tensor_get(b, i), (10 * rsum + N * i) / N, 0.05);
  zt_tensor_free(b);
  zt_tensor *e = vec(ZT_DTYPE_F32, 0, NULL); /* empty: a no-op on every rank */
  ZT_CHECK_OK(zt_all_reduce(g_world, e, ZT_REDUCE_SUM));
  zt_tensor_free(e);
}

static void test_all_gather(void) {
  zt_tensor *in = vec(ZT_DTYPE_F32, 3, v_rank), *out = vec(ZT_DTYPE_F32, 3 * N, NULL);
  ZT_CHECK_OK(zt_all_gather(g_world, in, out));
  for (int r = 0; r < N; r++)
    for (int64_t i = 0; i < 3; i++) ZT_CHECK(zt_tensor_get(out, r * 3 + i) == r * 10 + i);
  zt_tensor_free(in);
  zt_tensor_free(out);
  for (int h = 0; h < 2; h++) {
    zt_dtype dt = h ? ZT_DTYPE_F16 : ZT_DTYPE_BF16;
    zt_tensor *bi = vec(dt, 2, v_rank), *bo = vec(dt, 2 * N, NULL);
    ZT_CHECK_OK(zt_all_gather(g_world, bi, bo));
    for (int r = 0; r < N; r++) ZT_CHECK(zt_tensor_get(bo, r * 2 + 1) == r * 10 + 1);
    zt_tensor_free(bi);
    zt_tensor_free(bo);
  }
}

static void test_reduce_scatter(void) {
  /* in[j] = rank*100 + j over N*2 elements; out (chunk r) = sum_rank(rank*100) + j */
  zt_tensor *in = vec(ZT_DTYPE_F32, 2 * N, NULL), *out = vec(ZT_DTYPE_F32, 2, NULL);
  for (int64_t j = 0; j < 2 * N; j++) ZT_CHECK_OK(zt_tensor_set(in, j, R * 100 + j));
  ZT_CHECK_OK(zt_reduce_scatter(g_world, in, out, ZT_REDUCE_SUM));
  double rsum = N * (N - 1) / 2.0;
  for (int64_t i = 0; i < 2; i++) ZT_CHECK(zt_tensor_get(out, i) == 100 * rsum + N * (R * 2 + i));
  ZT_CHECK_OK(zt_reduce_scatter(g_world, in, out, ZT_REDUCE_AVG));
  for (int64_t i = 0; i < 2; i++) ZT_CHECK_NEAR(zt_tensor_get(out, i), (100 * rsum + N * (R * 2 + i)) / N, 1e-4);
  zt_tensor_free(in);
  zt_tensor_free(out);
  for (int h = 0; h < 2; h++) {
    zt_dtype dt = h ? ZT_DTYPE_F16 : ZT_DTYPE_BF16;
    zt_tensor *bi = vec(dt, 2 * N, NULL), *bo = vec(dt, 2, NULL);
    for (int64_t j = 0; j < 2 * N; j++) ZT_CHECK_OK(zt_tensor_set(bi, j, R + j));
    ZT_CHECK_OK(zt_reduce_scatter(g_world, bi, bo, ZT_REDUCE_SUM));
    for (int64_t i = 0; i < 2; i++) ZT_CHECK(zt_tensor_get(bo, i) == rsum + N * (R * 2 + i));
    zt_tensor_free(bi);
    zt_tensor_free(bo);
  }
}

static void test_broadcast(void) {
  for (int root = 0; root < N; root++) {
    zt_tensor *t = vec(ZT_DTYPE_I64, 4, v_rank);
    ZT_CHECK_OK(zt_broadcast(g_world, t, root));
    for (int64_t i = 0; i < 4; i++) ZT_CHECK(zt_tensor_get(t, i) == root * 10 + i);
    zt_tensor_free(t);
  }
}

static void test_send_recv_ring(void) {
  zt_tensor *s = vec(ZT_DTYPE_F32, 3, v_rank), *r = vec(ZT_DTYPE_F32, 3, NULL);
  if (N == 1) {
    ZT_CHECK_ERR(zt_send(g_world, s, 0, 0), ZT_STATUS_INVALID_ARG, "is this rank");
    ZT_CHECK_ERR(zt_recv(g_world, r, 1, 0), ZT_STATUS_INVALID_ARG, "not a rank");
  } else {
    int next = (R + 1) % N, prev = (R + N - 1) % N;
    /* even ranks send first, odd ranks receive first: no deadlock for any N >= 2 */
    if (R % 2 == 0) {
      ZT_CHECK_OK(zt_send(g_world, s, next, 7));
      ZT_CHECK_OK(zt_recv(g_world, r, prev, 7));
    } else {
      ZT_CHECK_OK(zt_recv(g_world, r, prev, 7));
      ZT_CHECK_OK(zt_send(g_world, s, next, 7));
    }
    for (int64_t i = 0; i < 3; i++) ZT_CHECK(zt_tensor_get(r, i) == prev * 10 + i);
  }
  zt_tensor_free(s);
  zt_tensor_free(r);
  ZT_CHECK_OK(zt_barrier(g_world));
}

/* Non-blocking point to point: every rank sends to the next and receives from the previous
 * at once (no ordering needed), two messages with one tag arrive in order; tags are range
 * checked; debug mode names both call sites of a mismatched pair instead of hanging. */
static void test_isend_irecv(void) {
  zt_tensor *s = vec(ZT_DTYPE_F32, 3, v_rank), *r1 = vec(ZT_DTYPE_F32, 3, NULL), *r2 = vec(ZT_DTYPE_F32, 3, NULL);
  zt_comm_work *ws[2] = {NULL, NULL}, *wr[2] = {NULL, NULL};
  if (N == 1) {
    ZT_CHECK_ERR(zt_isend(g_world, s, 0, 0, &ws[0]), ZT_STATUS_INVALID_ARG, "is this rank");
  } else {
    int next = (R + 1) % N, prev = (R + N - 1) % N;
    ZT_CHECK_ERR(zt_isend(g_world, s, next, ZT_COMM_MAX_TAG, &ws[0]), ZT_STATUS_INVALID_ARG, "outside [0, 16384)");
    ZT_CHECK_OK(zt_irecv(g_world, r1, prev, 5, &wr[0]));
    ZT_CHECK_OK(zt_irecv(g_world, r2, prev, 5, &wr[1]));
    ZT_CHECK_OK(zt_isend(g_world, s, next, 5, &ws[0]));
    zt_tensor *s2 = NULL;
    ZT_CHECK_OK(zt_mul_scalar(s, 2.0, &s2));
    ZT_CHECK_OK(zt_isend(g_world, s2, next, 5, &ws[1]));
    for (int k = 0; k < 2; k++) {
      ZT_CHECK_OK(zt_comm_wait(wr[k]));
      ZT_CHECK_OK(zt_comm_wait(ws[k]));
    }
    for (int64_t i = 0; i < 3; i++)
      ZT_CHECK(zt_tensor_get(r1, i) == prev * 10 + i && zt_tensor_get(r2, i) == 2 * (prev * 10 + i));
    zt_tensor_free(s2);
    /* debug mode: rank 0 sends 3 values, rank 1 expects 4 */
    bool was = zt_comm_debug(g_world);
    zt_comm_set_debug(g_world, true);
    if (R == 0) {
      zt_comm_work *w = NULL;
      ZT_CHECK_OK(zt_isend(g_world, s, 1, 9, &w));
      ZT_CHECK_OK(zt_comm_wait(w)); /* rank 1 takes the data after refusing it */
    } else if (R == 1) {
      zt_tensor *big = vec(ZT_DTYPE_F32, 4, NULL);
      char w0[ZT__RANK_NAME], want[ZT__RANK_NAME + 64];
      snprintf(want, sizeof want, "expects 4 f32 (tag 9) from %s, whose zt_send at test_comm.c:", wname(0, w0, sizeof w0));
      ZT_CHECK_ERR(zt_recv(g_world, big, 0, 9), ZT_STATUS_COMM, want);
      ZT_CHECK(strstr(zt_last_error(), "sends 3 f32"));
      zt_comm_set_debug(g_world, false);
      ZT_CHECK_OK(zt_recv(g_world, r1, 0, 9)); /* the data, without the check */
      zt_tensor_free(big);
    }
    zt_comm_set_debug(g_world, was);
  }
  zt_test_free_all((zt_tensor *[]){s, r1, r2}, 3);
  ZT_CHECK_OK(zt_barrier(g_world));
}

static void test_async(void) {
  zt_tensor *a = vec(ZT_DTYPE_F32, 4, v_rank), *gi = vec(ZT_DTYPE_F32, 2, v_rank);
  zt_tensor *go = vec(ZT_DTYPE_F32, 2 * N, NULL), *ri = vec(ZT_DTYPE_BF16, N, NULL), *ro = vec(ZT_DTYPE_BF16, 1, NULL);
  for (int64_t j = 0; j < N; j++) ZT_CHECK_OK(zt_tensor_set(ri, j, j + 1));
  zt_comm_work *w1 = NULL, *w2 = NULL, *w3 = NULL;
  ZT_CHECK_OK(zt_all_reduce_async(g_world, a, ZT_REDUCE_SUM, &w1));
  ZT_CHECK_OK(zt_all_gather_async(g_world, gi, go, &w2));
  ZT_CHECK_OK(zt_reduce_scatter_async(g_world, ri, ro, ZT_REDUCE_AVG, &w3));
  ZT_CHECK_OK(zt_comm_wait(w3)); /* any order */
  ZT_CHECK_OK(zt_comm_wait(w1));
  ZT_CHECK_OK(zt_comm_wait(w2));
  double rsum = N * (N - 1) / 2.0;
  for (int64_t i = 0; i < 4; i++) ZT_CHECK(zt_tensor_get(a, i) == 10 * rsum + N * i);
  for (int r = 0; r < N; r++) ZT_CHECK(zt_tensor_get(go, 2 * r + 1) == r * 10 + 1);
  ZT_CHECK(zt_tensor_get(ro, 0) == R + 1); /* avg of N copies of R+1 */
  zt_tensor *ts[] = {a, gi, go, ri, ro};
  zt_test_free_all(ts, 5);
}

static void test_split(void) {
  zt_comm *sub = NULL;
  ZT_CHECK_OK(zt_comm_split(g_world, R % 2, R, &sub));
  if (!sub) return;
  int expect = N == 1 ? 1 : (R % 2 == 0 ? (N + 1) / 2 : N / 2);
  ZT_CHECK(zt_comm_size(sub) == expect && zt_comm_rank(sub) == R / 2);
  zt_tensor *t = vec(ZT_DTYPE_I32, 2, NULL);
  ZT_CHECK_OK(zt_tensor_fill_(t, R));
  ZT_CHECK_OK(zt_all_reduce(sub, t, ZT_REDUCE_SUM));
  double want = 0;
  for (int r = R % 2; r < N; r += 2) want += r;
  ZT_CHECK(zt_tensor_get(t, 0) == want && zt_tensor_get(t, 1) == want);
  zt_tensor_free(t);
  zt_comm_free(sub);
}

static void test_bad_inputs(void) {
  zt_tensor *f = vec(ZT_DTYPE_F32, 4, NULL), *i = vec(ZT_DTYPE_I32, 4, NULL), *h = vec(ZT_DTYPE_F16, 4, NULL);
  zt_tensor *small = vec(ZT_DTYPE_F32, 4 * N - 1, NULL), *m = NULL, *mt = NULL;
  ZT_CHECK_OK(zt_tensor_zeros(2, (int64_t[]){2, 3}, ZT_DTYPE_F32, ZT_CPU, &m));
  ZT_CHECK_OK(zt_transpose(m, 0, 1, &mt));
  ZT_CHECK_OK(zt_all_reduce(g_world, h, ZT_REDUCE_SUM)); /* f16 reduces like bf16 */
  ZT_CHECK_ERR(zt_all_reduce(g_world, i, ZT_REDUCE_AVG), ZT_STATUS_DTYPE, "truncate");
  ZT_CHECK_ERR(zt_all_reduce(g_world, f, (zt_reduce_op)9), ZT_STATUS_INVALID_ARG, "reduce op");
  ZT_CHECK_ERR(zt_all_reduce(g_world, mt, ZT_REDUCE_SUM), ZT_STATUS_INVALID_ARG, "not contiguous");
  ZT_CHECK_ERR(zt_all_gather(g_world, f, small), ZT_STATUS_SHAPE, "size * numel(in)");
  ZT_CHECK_ERR(zt_all_gather(g_world, f, i), ZT_STATUS_DTYPE, "same dtype");
  ZT_CHECK_ERR(zt_reduce_scatter(g_world, small, f, ZT_REDUCE_SUM), ZT_STATUS_SHAPE, "size * numel(out)");
  ZT_CHECK_ERR(zt_broadcast(g_world, f, N), ZT_STATUS_INVALID_ARG, "not a rank");
  ZT_CHECK_ERR(zt_all_reduce(NULL, f, ZT_REDUCE_SUM), ZT_STATUS_INVALID_ARG, "NULL");
  ZT_CHECK_ERR(zt_all_reduce_async(g_world, f, ZT_REDUCE_SUM, NULL), ZT_STATUS_INVALID_ARG, "NULL");
  ZT_CHECK_ERR(zt_comm_split(g_world, -1, 0, &(zt_comm *){NULL}), ZT_STATUS_INVALID_ARG, "color");
  ZT_CHECK_OK(zt_storage_release(f->storage));
  ZT_CHECK_ERR(zt_all_reduce(g_world, f, ZT_REDUCE_SUM), ZT_STATUS_RELEASED, "t");
  zt_tensor *ts[] = {f, i, h, small, m, mt};
  zt_test_free_all(ts, 6);
  ZT_CHECK_OK(zt_barrier(g_world)); /* every rank failed locally: still in step */
}

static void test_debug_compare(void) {
  /* The comparison itself, on synthetic records (so it is tested at size 1 too). */
  zt__coll_record recs[3];
  memset(recs, 0, sizeof recs);
  for (int k = 0; k < 3; k++) {
    recs[k].kind = ZT__COLL_ALL_REDUCE;
    recs[k].count = 4;
    recs[k].dtype = ZT_DTYPE_F32;
    recs[k].root = -1;
    recs[k].op = ZT_REDUCE_SUM;
    recs[k].line = 10 + k;
    snprintf(recs[k].file, sizeof recs[k].file, "train.c");
  }
  ZT_CHECK_OK(zt__comm_debug_compare(recs, 3, NULL)); /* call sites may differ */
  recs[2].count = 5;
  ZT_CHECK_ERR(zt__comm_debug_compare(recs, 3, NULL), ZT_STATUS_COMM, "rank 2 called all_reduce(count 5");
  ZT_CHECK(strstr(zt_last_error(), "train.c:12") && strstr(zt_last_error(), "element count"));
  recs[1].kind = ZT__COLL_BROADCAST;
  ZT_CHECK_ERR(zt__comm_debug_compare(recs, 3, NULL), ZT_STATUS_COMM, "rank 1 called broadcast");
}

static void test_debug_mismatch(void) {
  zt_comm_set_debug(g_world, true);
  ZT_CHECK(zt_comm_debug(g_world));
  zt_tensor *t = vec(ZT_DTYPE_F32, 4, v_rank);
  ZT_CHECK_OK(zt_all_reduce(g_world, t, ZT_REDUCE_SUM)); /* matching: fine */
  zt_tensor_free(t);
  if (N > 1) {
    /* the last rank passes a different count: every rank must get the error */
    zt_tensor *u = vec(ZT_DTYPE_F32, R == N - 1 ? 5 : 4, NULL);
    char want[ZT__RANK_NAME + 16], nm[ZT__RANK_NAME];
    snprintf(want, sizeof want, "%s called", wname(N - 1, nm, sizeof nm));
    ZT_CHECK_ERR(zt_all_reduce(g_world, u, ZT_REDUCE_SUM), ZT_STATUS_COMM, want);
    ZT_CHECK(strstr(zt_last_error(), "test_comm.c:") != NULL);
    zt_tensor_free(u);
    /* and a different collective */
    zt_tensor *v = vec(ZT_DTYPE_F32, 2, NULL);
    zt_status s = R == 0 ? zt_broadcast(g_world, v, 0) : zt_all_reduce(g_world, v, ZT_REDUCE_SUM);
    snprintf(want, sizeof want, "%s called all_reduce", wname(1, nm, sizeof nm));
    ZT_CHECK(s == ZT_STATUS_COMM && strstr(zt_last_error(), want));
    zt_tensor_free(v);
  }
  zt_comm_set_debug(g_world, false);
  ZT_CHECK_OK(zt_barrier(g_world));
}

static void test_stats(void) {
  zt_comm_stats_reset(g_world);
  zt_tensor *t = vec(ZT_DTYPE_F32, 8 * N, NULL);
  ZT_CHECK_OK(zt_tensor_fill_(t, 1));
  ZT_CHECK_OK(zt_all_reduce(g_world, t, ZT_REDUCE_SUM));
  zt_comm_stats st;
  zt_comm_stats_get(g_world, &st);
  ZT_CHECK(st.calls == 1 && st.bytes_sent == (int64_t)(2 * (N - 1) * 8 * 4)); /* 2(N-1)/N * 32N bytes */
  zt_tensor_free(t);
}

/* ------------------------------------------------------------ timeouts */
static void test_timeout_api(void) {
  const char *env = getenv("ZT_COMM_TIMEOUT");
  double want = env && *env ? atof(env) : 600.0;
  ZT_CHECK(zt_comm_timeout(g_world) == want);
  char *saved = env ? strdup(env) : NULL;
  zt_comm *l = NULL;
  setenv("ZT_COMM_TIMEOUT", "2.5", 1);
  ZT_CHECK_OK(zt_comm_init_local(&l));
  ZT_CHECK(l && zt_comm_timeout(l) == 2.5);
  zt_comm_set_timeout(l, 0);
  ZT_CHECK(zt_comm_timeout(l) == 0);
  zt_comm_set_timeout(l, -1); /* ignored */
  zt_comm_set_timeout(l, NAN);
  ZT_CHECK(zt_comm_timeout(l) == 0);
  zt_comm_set_timeout(l, 7);
  ZT_CHECK(zt_comm_timeout(l) == 7);
  zt_comm_set_timeout(l, INFINITY); /* no limit */
  ZT_CHECK(zt_comm_timeout(l) == 0);
  zt_comm_abort(l, 3); /* local: no other rank, returns */
  zt_comm_abort(NULL, 3);
  zt_comm_free(l);
  l = NULL;
  setenv("ZT_COMM_TIMEOUT", "soon", 1);
  ZT_CHECK_ERR(zt_comm_init_local(&l), ZT_STATUS_INVALID_ARG, "ZT_COMM_TIMEOUT='soon'");
  ZT_CHECK(l == NULL);
  setenv("ZT_COMM_TIMEOUT", "-3", 1);
  ZT_CHECK_ERR(zt_comm_init_local(&l), ZT_STATUS_INVALID_ARG, ">= 0");
  unsetenv("ZT_COMM_TIMEOUT");
  ZT_CHECK_OK(zt_comm_init_local(&l));
  ZT_CHECK(l && zt_comm_timeout(l) == 600);
  zt_comm_free(l);
  if (saved) setenv("ZT_COMM_TIMEOUT", saved, 1);
  free(saved);
  /* splits inherit the parent's timeout (not the environment's) */
  zt_comm_set_timeout(g_world, 42);
  zt_comm *sub = NULL;
  ZT_CHECK_OK(zt_comm_split(g_world, 0, R, &sub));
  ZT_CHECK(sub && zt_comm_timeout(sub) == 42);
  ZT_CHECK_OK(zt_barrier(sub)); /* a timed wait that completes */
  zt_comm_free(sub);
  zt_comm_set_timeout(g_world, want);
}

static void test_board_entry(void) {
  zt__board_entry e;
  zt__board_view v;
  memset(&e, 0xff, sizeof e); /* like fresh shared memory: anything */
  zt__board_reset(&e);
  zt__board_read(&e, &v);
  ZT_CHECK(v.known && v.started == 0 && v.blocked == ZT__BLOCKED_NONE);
  zt__board_enter(&e, 5, ZT__COLL_BROADCAST, "/long/path/to/a_rather_long_source_name.c", 123);
  zt__board_block(&e, ZT__BLOCKED_COLL, 5);
  zt__board_read(&e, &v);
  ZT_CHECK(v.started == 5 && v.last_kind == ZT__COLL_BROADCAST && v.last_line == 123);
  ZT_CHECK(strncmp(v.last_file, "a_rather_long_source_", 21) == 0); /* base name, cut to 24 bytes */
  ZT_CHECK(strlen(v.last_file) == ZT__BOARD_FILE);
  ZT_CHECK(v.blocked == ZT__BLOCKED_COLL && v.blocked_arg == 5);
  zt__board_block(&e, ZT__BLOCKED_RECV, 3);
  zt__board_read(&e, &v);
  ZT_CHECK(v.blocked == ZT__BLOCKED_RECV && v.blocked_arg == 3);
  ZT_CHECK(v.pid == (int)getpid()); /* what tells a stopped or dead rank from a slow one */
  zt__board_read(NULL, &v);
  ZT_CHECK(!v.known);
}

/* A child process stopped with SIGSTOP, standing for a stopped rank; 0 under mpirun, where
 * fork is best avoided. The caller kills and reaps it. */
static pid_t stopped_child(void) {
  if (g_world && zt_comm_size(g_world) > 1) return 0;
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  int st = 0;
  ZT_CHECK(child > 0 && kill(child, SIGSTOP) == 0);
  ZT_CHECK(waitpid(child, &st, WUNTRACED) == child && WIFSTOPPED(st));
  return child > 0 ? child : 0;
}

static void kill_child(pid_t child) {
  int st = 0;
  if (child > 0) ZT_CHECK(kill(child, SIGKILL) == 0 && waitpid(child, &st, 0) == child);
}

static zt__board_view view(uint64_t started, int kind, int line, int blocked, uint64_t arg) {
  zt__board_view v;
  memset(&v, 0, sizeof v);
  v.known = true;
  v.started = started;
  v.last_kind = kind;
  v.last_line = line;
  snprintf(v.last_file, sizeof v.last_file, "loop.c");
  v.blocked = blocked;
  v.blocked_arg = arg;
  return v;
}

static void test_timeout_message(void) {
  /* rank 0 of 5 times out in all_reduce call #7: rank 1 arrived (waiting), rank 2 is one
   * call behind and not in a comm call, rank 3 is at a broadcast, rank 4 is off-node */
  zt__board_view v[5];
  v[0] = view(7, ZT__COLL_ALL_REDUCE, 40, ZT__BLOCKED_COLL, 7);
  v[1] = view(7, ZT__COLL_ALL_REDUCE, 40, ZT__BLOCKED_COLL, 7);
  v[2] = view(6, ZT__COLL_ALL_GATHER, 31, ZT__BLOCKED_NONE, 0);
  v[3] = view(7, ZT__COLL_BROADCAST, 55, ZT__BLOCKED_COLL, 7);
  memset(&v[4], 0, sizeof v[4]);
  zt__timeout_info op = {.kind = ZT__COLL_ALL_REDUCE, .file = "/src/train/loop.c", .line = 40, .rank = 0,
                         .size = 5, .timeout_s = 2.5, .seq = 7, .peer = -1, .tag = -1};
  ZT_CHECK_ERR(zt__comm_timeout_error(&op, v, NULL), ZT_STATUS_COMM,
               "all_reduce at loop.c:40 timed out after 2.5 s on rank 0, call #7 on this group of 5 ranks: ");
  const char *m = zt_last_error();
  ZT_CHECK(strstr(m, "rank 2 did not arrive (1 call behind: its last collective on this group was call #6, "
                     "all_gather at loop.c:31; it is in no comm call now"));
  ZT_CHECK(strstr(m, "rank 3 is at a different operation: broadcast at loop.c:55 (its call #7, waiting in it)"));
  ZT_CHECK(strstr(m, "unknown for rank 4 (not on this node"));
  ZT_CHECK(!strstr(m, "rank 1 "));
  ZT_CHECK(strstr(m, "unusable") && strstr(m, "zt_comm_abort") && strstr(m, "ZT_COMM_TIMEOUT"));
  /* several calls behind, blocked in an older call or a receive */
  v[2] = view(4, ZT__COLL_ALL_GATHER, 31, ZT__BLOCKED_COLL, 3);
  v[3] = view(5, ZT__COLL_BARRIER, 12, ZT__BLOCKED_RECV, 1);
  v[4] = view(7, ZT__COLL_ALL_REDUCE, 40, ZT__BLOCKED_NONE, 0); /* arrived, already done */
  op.timeout_s = 600;
  ZT_CHECK_ERR(zt__comm_timeout_error(&op, v, NULL), ZT_STATUS_COMM, "timed out after 600 s");
  m = zt_last_error();
  ZT_CHECK(strstr(m, "rank 2 did not arrive (3 calls behind") && strstr(m, "waiting for its call #3"));
  ZT_CHECK(strstr(m, "rank 3 did not arrive (2 calls behind") && strstr(m, "blocked in zt_recv from rank 1"));
  ZT_CHECK(!strstr(m, "rank 4") && !strstr(m, "unknown"));
  /* everyone arrived (running processes: this one) */
  for (int r = 0; r < 5; r++) v[r] = view(7, ZT__COLL_ALL_REDUCE, 40, ZT__BLOCKED_COLL, 7), v[r].pid = (int)getpid();
  ZT_CHECK_ERR(zt__comm_timeout_error(&op, v, NULL), ZT_STATUS_COMM, "every rank reached this call");
  /* everyone arrived, but rank 2's process is stopped inside the call, then dead */
  pid_t child = stopped_child();
  if (child > 0) {
    v[2].pid = (int)child;
    char want[96];
    snprintf(want, sizeof want, "rank 2 reached this call but its process (pid %d) is stopped", (int)child);
    ZT_CHECK_ERR(zt__comm_timeout_error(&op, v, NULL), ZT_STATUS_COMM, want);
    ZT_CHECK(!strstr(zt_last_error(), "every rank reached this call"));
    kill_child(child);
    snprintf(want, sizeof want, "rank 2 reached this call but its process (pid %d) is dead", (int)child);
    ZT_CHECK_ERR(zt__comm_timeout_error(&op, v, NULL), ZT_STATUS_COMM, want);
  }
  /* point to point */
  zt__timeout_info p2p = {.kind = ZT__COLL_SEND, .file = "ckpt.c", .line = 9, .rank = 1, .size = 5,
                          .timeout_s = 3, .peer = 0, .tag = 7};
  v[0] = view(2, ZT__COLL_BARRIER, 70, ZT__BLOCKED_COLL, 2);
  ZT_CHECK_ERR(zt__comm_timeout_error(&p2p, v, NULL), ZT_STATUS_COMM,
               "zt_send at ckpt.c:9 (tag 7) to rank 0 timed out after 3 s on rank 1: the receiver did not post the "
               "matching receive (its last collective on this group was call #2, barrier at loop.c:70, and it is "
               "waiting in that call)");
  /* many missing ranks: the first few in full, then their numbers */
  zt__board_view many[40];
  for (int r = 0; r < 40; r++) many[r] = view(r == 0 ? 2 : 1, ZT__COLL_BARRIER, 5, ZT__BLOCKED_NONE, 0);
  zt__timeout_info big = {.kind = ZT__COLL_BARRIER, .file = "x.c", .line = 5, .rank = 0, .size = 40,
                          .timeout_s = 1, .seq = 2};
  ZT_CHECK_ERR(zt__comm_timeout_error(&big, many, NULL), ZT_STATUS_COMM, "rank 5 did not arrive");
  ZT_CHECK(strstr(zt_last_error(), "also not here: ranks 6 7 8") && !strstr(zt_last_error(), "rank 6 did not"));
  ZT_CHECK(strstr(zt_last_error(), "zt_comm_abort")); /* the advice survives a long list */
}

/* ------------------------------------------------------------ naming ranks */
/* A 2x2 grid's namer, as the pipeline registers it: world rank w is stage w % 2, replica w / 2. */
static void grid_namer(int w, char *buf, size_t cap, void *ud) {
  (void)ud;
  snprintf(buf, cap, "stage %d of 2, replica %d of 2", w % 2, w / 2);
}

static void long_namer(int w, char *buf, size_t cap, void *ud) {
  (void)w, (void)ud;
  memset(buf, 'x', cap); /* no NUL: the caller ends it */
}

static void empty_namer(int w, char *buf, size_t cap, void *ud) {
  (void)w, (void)cap, (void)ud;
  buf[0] = '\0';
}

/* The names of a group whose ranks are world ranks world[0..size) (stage 1 of a 2x2 grid:
 * world ranks 1 and 3), with the grid's labels. */
static zt__rank_names grid_names(const int *world, int size) {
  zt__rank_names n = {.world = world, .size = size, .fn = grid_namer, .ud = NULL};
  return n;
}

static void test_rank_names(void) {
  char b[ZT__RANK_NAME];
  const int stage1[2] = {1, 3}, same[2] = {0, 1}, unknown[2] = {0, -1};
  zt__rank_names n = grid_names(stage1, 2);
  ZT_CHECK(strcmp(zt__rank_name(NULL, 1, b, sizeof b), "rank 1") == 0); /* no world: the group's rank */
  ZT_CHECK(strcmp(zt__rank_name(&n, 1, b, sizeof b), "world rank 3 (stage 1 of 2, replica 1 of 2; group rank 1)") == 0);
  ZT_CHECK(zt__rank_world(&n, 1) == 3 && zt__rank_world(&n, 2) == -1 && zt__rank_world(NULL, 0) == -1);
  n.fn = NULL;
  ZT_CHECK(strcmp(zt__rank_name(&n, 1, b, sizeof b), "world rank 3 (group rank 1)") == 0);
  n = grid_names(same, 2);
  ZT_CHECK(strcmp(zt__rank_name(&n, 1, b, sizeof b), "world rank 1 (stage 1 of 2, replica 0 of 2)") == 0);
  n.fn = empty_namer; /* an empty label is left out */
  ZT_CHECK(strcmp(zt__rank_name(&n, 1, b, sizeof b), "world rank 1") == 0);
  n = grid_names(unknown, 2);
  ZT_CHECK(strcmp(zt__rank_name(&n, 1, b, sizeof b), "rank 1") == 0);
  n.fn = long_namer; /* a label that fills its buffer is cut, and the name still ends */
  ZT_CHECK(strlen(zt__rank_name(&n, 0, b, sizeof b)) < sizeof b && strstr(b, "world rank 0 (xxx"));
  /* the process's namer, as zt__comm_names reads it */
  zt_comm_set_rank_namer(grid_namer, NULL);
  n = zt__rank_names_of(stage1, 2, NULL);
  ZT_CHECK(n.fn == grid_namer && strstr(zt__rank_name(&n, 0, b, sizeof b), "(stage 1 of 2, replica 0 of 2; group"));
  zt_comm_set_rank_namer(NULL, &n);
  n = zt__rank_names_of(stage1, 2, NULL);
  ZT_CHECK(!n.fn && !n.ud && strcmp(zt__rank_name(&n, 0, b, sizeof b), "world rank 1 (group rank 0)") == 0);
}

/* A timeout in a 2x2 pipeline grid, seen from world rank 1 (stage 1, replica 0) in the group of
 * stage 1's replicas (world ranks 1 and 3): world rank 3, stopped, is named by its world rank,
 * its place in the grid and its rank in the group; its process state is given. */
static void test_timeout_message_names(void) {
  const int stage1[2] = {1, 3};
  zt__rank_names n = grid_names(stage1, 2);
  zt__board_view v[2];
  v[0] = view(5, ZT__COLL_ALL_REDUCE, 60, ZT__BLOCKED_COLL, 5);
  v[1] = view(4, ZT__COLL_ALL_GATHER, 506, ZT__BLOCKED_SEND, 0);
  pid_t child = stopped_child();
  v[1].pid = (int)child;
  zt__timeout_info op = {.kind = ZT__COLL_ALL_REDUCE, .file = "src/train/pipeline_step.c", .line = 60, .rank = 0,
                         .size = 2, .timeout_s = 4, .seq = 5, .peer = -1, .tag = -1};
  ZT_CHECK_ERR(zt__comm_timeout_error(&op, v, &n), ZT_STATUS_COMM,
               "all_reduce at pipeline_step.c:60 timed out after 4 s on world rank 1 (stage 1 of 2, replica 0 of 2; "
               "group rank 0), call #5 on this group of 2 ranks: world rank 3 (stage 1 of 2, replica 1 of 2; group "
               "rank 1) did not arrive (1 call behind: its last collective on this group was call #4, all_gather at "
               "loop.c:506; it is blocked in zt_send to world rank 1 (stage 1 of 2, replica 0 of 2; group rank 0)");
  char want[160];
  snprintf(want, sizeof want, "; its process (pid %d) is stopped). This group is unusable now", (int)child);
  if (child > 0) ZT_CHECK(strstr(zt_last_error(), want));
  /* a receive from it (stage 0 of replica 1 waits for stage 1's grad) */
  const int replica1[2] = {2, 3};
  n = grid_names(replica1, 2);
  v[1] = view(4, ZT__COLL_ALL_GATHER, 506, ZT__BLOCKED_NONE, 0);
  v[1].pid = (int)child;
  zt__timeout_info p2p = {.kind = ZT__COLL_RECV, .file = "execute.c", .line = 158, .rank = 0, .size = 2,
                          .timeout_s = 4, .peer = 1, .tag = 7};
  ZT_CHECK_ERR(zt__comm_timeout_error(&p2p, v, &n), ZT_STATUS_COMM,
               "zt_recv at execute.c:158 (tag 7) from world rank 3 (stage 1 of 2, replica 1 of 2; group rank 1) timed "
               "out after 4 s on world rank 2 (stage 0 of 2, replica 1 of 2; group rank 0): the sender did not post "
               "the matching send (its last collective on this group was call #4, all_gather at loop.c:506; it is in "
               "no comm call now");
  snprintf(want, sizeof want, "in no comm call now; its process (pid %d) is stopped)", (int)child);
  if (child > 0) ZT_CHECK(strstr(zt_last_error(), want));
  kill_child(child);
  /* many ranks with long names: the rest listed by world rank, the message bounded, the advice kept */
  static int world[40];
  zt__board_view many[40];
  for (int r = 0; r < 40; r++) world[r] = 2 * r + 1, many[r] = view(r == 0 ? 2 : 1, ZT__COLL_BARRIER, 5, ZT__BLOCKED_NONE, 0);
  n = grid_names(world, 40);
  zt__timeout_info big = {.kind = ZT__COLL_BARRIER, .file = "x.c", .line = 5, .rank = 0, .size = 40, .timeout_s = 1,
                          .seq = 2};
  ZT_CHECK_ERR(zt__comm_timeout_error(&big, many, &n), ZT_STATUS_COMM, "; also not here: world ranks 11 13 15");
  const char *m = zt_last_error();
  ZT_CHECK(strstr(m, "world rank 9 (stage 1 of 2, replica 4 of 2; group rank 4) did not arrive"));
  ZT_CHECK(strlen(m) < 1600 && strstr(m, "zt_comm_abort; if a rank is only slow, raise the limit"));
  /* ranks the board cannot see */
  memset(many, 0, sizeof many);
  many[0] = view(2, ZT__COLL_BARRIER, 5, ZT__BLOCKED_COLL, 2);
  ZT_CHECK_ERR(zt__comm_timeout_error(&big, many, &n), ZT_STATUS_COMM, "unknown for world ranks 3 5 7");
}

static const char *two_hosts(int world_rank) { return world_rank < 2 ? "hostA" : "hostB"; }

/* Ranks on other hosts: named with their host; entries read from a board server carry their
 * process state from that host; hosts not reached are said once each, with why. */
static void test_timeout_message_hosts(void) {
  const int world[4] = {0, 1, 2, 3};
  zt__rank_names n = {.world = world, .size = 4, .host = two_hosts};
  char b[ZT__RANK_NAME];
  ZT_CHECK(strcmp(zt__rank_name(&n, 2, b, sizeof b), "world rank 2 on hostB") == 0);
  n.fn = grid_namer;
  ZT_CHECK(strcmp(zt__rank_name(&n, 3, b, sizeof b), "world rank 3 on hostB (stage 1 of 2, replica 1 of 2)") == 0);
  n.fn = NULL;
  zt__board_view v[4];
  for (int r = 0; r < 4; r++) v[r] = view(3, ZT__COLL_ALL_REDUCE, 9, ZT__BLOCKED_COLL, 3);
  v[2] = view(2, ZT__COLL_BARRIER, 8, ZT__BLOCKED_NONE, 0);
  v[2].remote = true, v[2].pid = 999999; /* no such process here: the remote state is what counts */
  snprintf(v[2].state, sizeof v[2].state, "stopped");
  zt__timeout_info op = {.kind = ZT__COLL_ALL_REDUCE, .file = "x.c", .line = 9, .rank = 0, .size = 4, .timeout_s = 5,
                         .seq = 3, .peer = -1, .tag = -1};
  ZT_CHECK_ERR(zt__comm_timeout_error(&op, v, &n), ZT_STATUS_COMM,
               "world rank 2 on hostB did not arrive (1 call behind: its last collective on this group was call #2, "
               "barrier at loop.c:8; it is in no comm call now; its process (pid 999999) is stopped)");
  /* hostB not reached: one reason for its two ranks */
  memset(&v[2], 0, sizeof v[2]);
  memset(&v[3], 0, sizeof v[3]);
  snprintf(v[2].why, sizeof v[2].why, "its host hostB: 10.0.0.2:4000: Connection timed out");
  snprintf(v[3].why, sizeof v[3].why, "its host hostB: 10.0.0.2:4000: Connection timed out");
  ZT_CHECK_ERR(zt__comm_timeout_error(&op, v, &n), ZT_STATUS_COMM,
               "unknown for world ranks 2 3 (not on this node, and its host hostB: 10.0.0.2:4000: Connection timed "
               "out). This group");
  zt__timeout_info p2p = {.kind = ZT__COLL_RECV, .file = "e.c", .line = 1, .rank = 0, .size = 4, .timeout_s = 5,
                          .peer = 3, .tag = 2};
  ZT_CHECK_ERR(zt__comm_timeout_error(&p2p, v, &n), ZT_STATUS_COMM,
               "(what it is doing is unknown: it is not on this node, and its host hostB: 10.0.0.2:4000: Connection "
               "timed out)");
}

/* The other messages that name ranks: debug mode's mismatch, check_same, agree_status. */
static void test_messages_name_world_ranks(void) {
  const int world[3] = {1, 3, 5}; /* stage 1 of three replicas */
  zt__rank_names n = grid_names(world, 3);
  zt__coll_record recs[3];
  memset(recs, 0, sizeof recs);
  for (int k = 0; k < 3; k++) recs[k].kind = ZT__COLL_ALL_REDUCE, recs[k].count = k == 2 ? 5 : 4;
  ZT_CHECK_ERR(zt__comm_debug_compare(recs, 3, &n), ZT_STATUS_COMM,
               "world rank 5 (stage 1 of 2, replica 2 of 2; group rank 2) called all_reduce(count 5");
  ZT_CHECK(strstr(zt_last_error(), "but world rank 1 (stage 1 of 2, replica 0 of 2; group rank 0) called"));
  zt__same_record same[3];
  for (int r = 0; r < 3; r++) zt__same_record_set(&same[r], "batch", r == 1 ? "4" : "8");
  ZT_CHECK_ERR(zt__comm_same_compare(same, 3, 1, &n), ZT_STATUS_INVALID_ARG,
               "ranks disagree on 'batch': world ranks 1 (stage 1 of 2, replica 0 of 2; group rank 0), 5 (stage 1 of "
               "2, replica 2 of 2; group rank 2) have '8', world rank 3 (stage 1 of 2, replica 1 of 2; group rank 1) "
               "has '4'");
  zt__same_record_set(&same[2], "seq", "8");
  ZT_CHECK_ERR(zt__comm_same_compare(same, 3, 1, &n), ZT_STATUS_INVALID_ARG,
               "is 'batch' on world rank 1 (stage 1 of 2, replica 0 of 2; group rank 0) but 'seq' on world rank 5");
  zt__agree_record ag[3];
  memset(ag, 0, sizeof ag);
  ag[1].status = ZT_STATUS_IO;
  snprintf(ag[1].msg, sizeof ag[1].msg, "cannot open data.tok [data.c:9]");
  ZT_CHECK_ERR(zt__comm_agree_pick(ag, 3, 0, &n), ZT_STATUS_IO,
               "world rank 3 (stage 1 of 2, replica 1 of 2; group rank 1): cannot open data.tok [data.c:9]");
}

/* ------------------------------------------------------------ a group made unusable */
/* Rank 0 of stage 1's replicas (world ranks 1 and 3) whose peer never answers: a receive
 * times out, and every later call on the group fails at once, carrying that message. */
static void test_unusable_group_keeps_first_message(void) {
  zt_comm *c = zt_test_stuck_comm(0, 2, (const int[]){1, 3}, 0.05);
  ZT_CHECK(c != NULL);
  if (!c) return;
  zt_comm_set_rank_namer(grid_namer, NULL);
  zt_tensor *a = vec(ZT_DTYPE_F32, 4, NULL), *b = vec(ZT_DTYPE_F32, 4, NULL);
  zt_comm_work *pending = NULL, *other = NULL;
  ZT_CHECK_OK(zt_isend(c, a, 1, 3, &pending)); /* in flight when the group breaks */
  ZT_CHECK_OK(zt_isend(c, a, 1, 4, &other));
  const char *first_want = "zt_recv at test_comm.c:";
  ZT_CHECK_ERR(zt_recv(c, b, 1, 7), ZT_STATUS_COMM, first_want);
  char first[2048];
  snprintf(first, sizeof first, "%s", zt_last_error());
  ZT_CHECK(strstr(first, "(tag 7) from world rank 3 (stage 1 of 2, replica 1 of 2; group rank 1) timed out after "
                         "0.05 s on world rank 1 (stage 1 of 2, replica 0 of 2; group rank 0): the sender did not post"));
  /* every later call fails at once with a message that carries the first one whole */
  double t0 = zt_clock_now();
  const char *later = "this group is unusable after an earlier failure on this rank: zt_recv at test_comm.c:";
  ZT_CHECK_ERR(zt_comm_wait(pending), ZT_STATUS_COMM, later);
  ZT_CHECK(strstr(zt_last_error(), first) && strstr(zt_last_error(), "zt_comm_wait: "));
  bool done = true;
  ZT_CHECK_ERR(zt_comm_test(other, &done), ZT_STATUS_COMM, later);
  ZT_CHECK(!done && strstr(zt_last_error(), first));
  ZT_CHECK_ERR(zt_comm_wait(other), ZT_STATUS_COMM, later);
  ZT_CHECK_ERR(zt_barrier(c), ZT_STATUS_COMM, later);
  ZT_CHECK(strstr(zt_last_error(), first) && strstr(zt_last_error(), "zt_barrier: "));
  ZT_CHECK_ERR(zt_all_reduce(c, a, ZT_REDUCE_SUM), ZT_STATUS_COMM, later);
  ZT_CHECK_ERR(zt_comm_agree_status(c, ZT_OK), ZT_STATUS_COMM, later);
  ZT_CHECK(zt_clock_now() - t0 < 0.05 * 5 + 5); /* no more waiting (generous: a loaded machine) */
  zt_comm_set_rank_namer(NULL, NULL);
  zt_comm_free(c);
  zt_tensor_free(a);
  zt_tensor_free(b);
}

/* ------------------------------------------------------------ agreement */
static void test_check_same_compare(void) {
  /* synthetic records of 3 ranks x 2 fields (so the comparison is tested at size 1 too) */
  zt__same_record recs[3 * 2];
  const char *names[2] = {"model", "batch"};
  for (int r = 0; r < 3; r++) {
    zt__same_record_set(&recs[r * 2 + 0], names[0], "gpt2-tiny");
    zt__same_record_set(&recs[r * 2 + 1], names[1], r == 1 ? "4" : "8");
  }
  ZT_CHECK_ERR(zt__comm_same_compare(recs, 3, 2, NULL), ZT_STATUS_INVALID_ARG,
               "ranks disagree on 'batch': ranks 0, 2 have '8', rank 1 has '4'; start every rank with the same options");
  zt__same_record_set(&recs[1 * 2 + 1], names[1], "8");
  ZT_CHECK_OK(zt__comm_same_compare(recs, 3, 2, NULL));
  /* long values that differ after the shown prefix: caught by length + hash, shown cut */
  char a[200], b[200];
  memset(a, 'x', sizeof a - 1), a[sizeof a - 1] = '\0';
  memcpy(b, a, sizeof b);
  b[190] = 'y';
  zt__same_record_set(&recs[0 * 2 + 0], "data", a);
  zt__same_record_set(&recs[1 * 2 + 0], "data", a);
  zt__same_record_set(&recs[2 * 2 + 0], "data", b);
  ZT_CHECK_ERR(zt__comm_same_compare(recs, 3, 2, NULL), ZT_STATUS_INVALID_ARG, "ranks disagree on 'data': ranks 0, 1 have 'xxx");
  ZT_CHECK(strstr(zt_last_error(), "...', rank 2 has 'xxx") != NULL);
  /* a different name at the same position, and a missing field */
  zt__same_record_set(&recs[2 * 2 + 0], "seq", "x");
  ZT_CHECK_ERR(zt__comm_same_compare(recs, 3, 2, NULL), ZT_STATUS_INVALID_ARG,
               "value 1 is 'data' on rank 0 but 'seq' on rank 2");
  zt__same_record_set(&recs[2 * 2 + 0], "data", a);
  memset(&recs[1 * 2 + 1], 0, sizeof recs[0]);
  ZT_CHECK_ERR(zt__comm_same_compare(recs, 3, 2, NULL), ZT_STATUS_INVALID_ARG,
               "rank 0 passes 2 values, rank 1 passes 1 (the first missing one is 'batch')");
}

static void test_check_same(void) {
  char rank_s[16], batch[16];
  snprintf(rank_s, sizeof rank_s, "%d", R);
  snprintf(batch, sizeof batch, "%d", 8);
  const char *names[] = {"model", "batch", "rank"};
  const char *same[] = {"gpt2-tiny", batch, "0"};
  ZT_CHECK_OK(zt_comm_check_same(g_world, 3, names, same));
  ZT_CHECK_OK(zt_comm_check_same(g_world, 0, NULL, NULL));
  const char *differ[] = {"gpt2-tiny", batch, rank_s};
  if (N > 1) {
    char n0[ZT__RANK_NAME], n1[ZT__RANK_NAME], want[2 * ZT__RANK_NAME + 64];
    snprintf(want, sizeof want, "ranks disagree on 'rank': %s has '0', %s has '1'", wname(0, n0, sizeof n0),
             wname(1, n1, sizeof n1));
    ZT_CHECK_ERR(zt_comm_check_same(g_world, 3, names, differ), ZT_STATUS_INVALID_ARG, want);
    ZT_CHECK(strstr(zt_last_error(), "start every rank with the same options"));
    /* the last rank passes one field fewer: every rank fails, nobody hangs */
    ZT_CHECK_ERR(zt_comm_check_same(g_world, R == N - 1 ? 2 : 3, names, same), ZT_STATUS_INVALID_ARG,
                 "passes 2 (the first missing one is 'rank')");
    /* a NULL value reads "(null)" */
    const char *nul[] = {"gpt2-tiny", R == 0 ? NULL : batch, "0"};
    snprintf(want, sizeof want, "%s has '(null)'", n0);
    ZT_CHECK_ERR(zt_comm_check_same(g_world, 3, names, nul), ZT_STATUS_INVALID_ARG, want);
  } else {
    ZT_CHECK_OK(zt_comm_check_same(g_world, 3, names, differ));
  }
  ZT_CHECK_ERR(zt_comm_check_same(g_world, -1, names, same), ZT_STATUS_INVALID_ARG, "n = -1");
  ZT_CHECK_OK(zt_barrier(g_world)); /* still in step */
}

static void test_agree_pick(void) {
  zt__agree_record recs[3];
  memset(recs, 0, sizeof recs);
  ZT_CHECK_OK(zt__comm_agree_pick(recs, 3, 0, NULL));
  recs[1].status = ZT_STATUS_SHAPE;
  snprintf(recs[1].msg, sizeof recs[1].msg, "batch 7 does not divide by 2 ranks; pick a multiple [config.c:77]");
  recs[2].status = ZT_STATUS_IO;
  snprintf(recs[2].msg, sizeof recs[2].msg, "cannot open data.tok");
  ZT_CHECK_ERR(zt__comm_agree_pick(recs, 3, 0, NULL), ZT_STATUS_SHAPE,
               "rank 1: batch 7 does not divide by 2 ranks; pick a multiple [config.c:77]");
  ZT_CHECK(strcmp(zt_last_error(), "rank 1: batch 7 does not divide by 2 ranks; pick a multiple [config.c:77]") == 0);
  zt__error(ZT_STATUS_IO, "mine.c", 1, "my own message");
  ZT_CHECK(zt__comm_agree_pick(recs, 3, 2, NULL) == ZT_STATUS_IO); /* a failing rank keeps its own */
  ZT_CHECK(strcmp(zt_last_error(), "my own message [mine.c:1]") == 0);
  recs[1].status = ZT_OK;
  ZT_CHECK_ERR(zt__comm_agree_pick(recs, 3, 1, NULL), ZT_STATUS_IO, "rank 2: cannot open data.tok");
}

static void test_agree_status(void) {
  ZT_CHECK_OK(zt_comm_agree_status(g_world, ZT_OK));
  /* the last rank fails with its own message; the others learn it, prefixed */
  zt_status mine = ZT_OK;
  if (R == N - 1) mine = zt__error(ZT_STATUS_SHAPE, "cfg.c", 12, "batch 6 does not divide by %d ranks", N);
  char own[256];
  snprintf(own, sizeof own, "%s", zt_last_error());
  zt_status s = zt_comm_agree_status(g_world, mine);
  ZT_CHECK(s == ZT_STATUS_SHAPE);
  if (R == N - 1) {
    ZT_CHECK(strcmp(zt_last_error(), own) == 0);
  } else {
    char want[256], nm[ZT__RANK_NAME];
    snprintf(want, sizeof want, "%s: batch 6 does not divide by %d ranks [cfg.c:12]", wname(N - 1, nm, sizeof nm), N);
    ZT_CHECK(strcmp(zt_last_error(), want) == 0);
  }
  /* two failing ranks: the others get the lowest one's */
  if (N > 2) {
    mine = R == 1 ? zt__error(ZT_STATUS_IO, "a.c", 1, "one") : R == 2 ? zt__error(ZT_STATUS_OOM, "b.c", 2, "two")
                                                                     : ZT_OK;
    s = zt_comm_agree_status(g_world, mine);
    if (R == 1) ZT_CHECK(s == ZT_STATUS_IO && strcmp(zt_last_error(), "one [a.c:1]") == 0);
    if (R == 2) ZT_CHECK(s == ZT_STATUS_OOM && strcmp(zt_last_error(), "two [b.c:2]") == 0);
    char want1[ZT__RANK_NAME + 32], nm1[ZT__RANK_NAME];
    snprintf(want1, sizeof want1, "%s: one [a.c:1]", wname(1, nm1, sizeof nm1));
    if (R != 1 && R != 2) ZT_CHECK(s == ZT_STATUS_IO && strcmp(zt_last_error(), want1) == 0);
  }
  ZT_CHECK_OK(zt_comm_agree_status(g_world, ZT_OK)); /* usable afterwards */
}

int main(int argc, char **argv) {
  (void)argc, (void)argv;
  if (!(g_world = zt_test_world(&R, &N))) return 1;
  ZT_RUN(test_basics);
  ZT_RUN(test_all_reduce);
  ZT_RUN(test_all_gather);
  ZT_RUN(test_reduce_scatter);
  ZT_RUN(test_broadcast);
  ZT_RUN(test_send_recv_ring);
  ZT_RUN(test_isend_irecv);
  ZT_RUN(test_async);
  ZT_RUN(test_split);
  ZT_RUN(test_bad_inputs);
  ZT_RUN(test_debug_compare);
  ZT_RUN(test_debug_mismatch);
  ZT_RUN(test_stats);
  ZT_RUN(test_timeout_api);
  ZT_RUN(test_board_entry);
  ZT_RUN(test_timeout_message);
  ZT_RUN(test_rank_names);
  ZT_RUN(test_timeout_message_names);
  ZT_RUN(test_timeout_message_hosts);
  ZT_RUN(test_messages_name_world_ranks);
  ZT_RUN(test_unusable_group_keeps_first_message);
  ZT_RUN(test_check_same_compare);
  ZT_RUN(test_check_same);
  ZT_RUN(test_agree_pick);
  ZT_RUN(test_agree_status);
  int rc = zt_test_finish();
  zt_comm_free(g_world);
  return rc;
}
