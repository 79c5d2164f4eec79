/* Process groups at any size: run plainly (one rank, local backend) and under
 * mpirun -np 2 / -np 4 (mpi backend). Values are rank-dependent integers held in f32, so
 * every sum is exact; debug mode must turn a mismatched collective into an error on
 * every rank (never a hang). */
#include <stdlib.h>

#include "zt_test.h"
#include "zt/comm.h"
#include "comm/comm_internal.h"

static zt_comm *g_world;
static int R, N; /* rank, size */

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
    ZT_CHECK_ERR(zt_send(g_world, s, 0, 0), ZT_STATUS_INVALID_ARG, "deadlock");
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
  ZT_CHECK_OK(zt__comm_debug_compare(recs, 3)); /* call sites may differ */
  recs[2].count = 5;
  ZT_CHECK_ERR(zt__comm_debug_compare(recs, 3), ZT_STATUS_COMM, "rank 2 called all_reduce(count 5");
  ZT_CHECK(strstr(zt_last_error(), "train.c:12") && strstr(zt_last_error(), "element count"));
  recs[1].kind = ZT__COLL_BROADCAST;
  ZT_CHECK_ERR(zt__comm_debug_compare(recs, 3), ZT_STATUS_COMM, "rank 1 called broadcast");
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
    char want[32];
    snprintf(want, sizeof want, "rank %d called", N - 1);
    ZT_CHECK_ERR(zt_all_reduce(g_world, u, ZT_REDUCE_SUM), ZT_STATUS_COMM, want);
    ZT_CHECK(strstr(zt_last_error(), "test_comm.c:") != NULL);
    zt_tensor_free(u);
    /* and a different collective */
    zt_tensor *v = vec(ZT_DTYPE_F32, 2, NULL);
    zt_status s = R == 0 ? zt_broadcast(g_world, v, 0) : zt_all_reduce(g_world, v, ZT_REDUCE_SUM);
    ZT_CHECK(s == ZT_STATUS_COMM && strstr(zt_last_error(), "rank 1 called all_reduce"));
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

int main(int argc, char **argv) {
  (void)argc, (void)argv;
  if (!(g_world = zt_test_world(&R, &N))) return 1;
  ZT_RUN(test_basics);
  ZT_RUN(test_all_reduce);
  ZT_RUN(test_all_gather);
  ZT_RUN(test_reduce_scatter);
  ZT_RUN(test_broadcast);
  ZT_RUN(test_send_recv_ring);
  ZT_RUN(test_async);
  ZT_RUN(test_split);
  ZT_RUN(test_bad_inputs);
  ZT_RUN(test_debug_compare);
  ZT_RUN(test_debug_mismatch);
  ZT_RUN(test_stats);
  int rc = zt_test_finish();
  zt_comm_free(g_world);
  return rc;
}
