/* Latency and bandwidth of the comm layer's collectives and point to point, under mpirun
 * (bench/hosts.sh runs it across the hosts harness, clean and under each network fault).
 * For each op (all_reduce, all_gather, reduce_scatter, broadcast, and a ping-pong between
 * rank 0 and the last rank: sendrecv) and each size (bytes of the per-rank f32 buffer: the
 * all-reduce's tensor, the all-gather's input, the reduce-scatter's output), the median over
 * REPS repetitions of the time per call (about 0.2 s of calls each), and the bus bandwidth in the usual (nccl-tests)
 * sense: bytes x 2(n-1)/n / time for the all-reduce, x (n-1)/n for the gathers and
 * scatters, bytes / time for the broadcast and one way of the ping-pong. One JSON line from
 * rank 0.
 *   mpirun -np N bench_comm [reps (5)] [label] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zt/comm.h"
#include "zt/tensor.h"

static int cmp_d(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

static zt_tensor *vec(int64_t n) {
  zt_tensor *t = NULL;
  if (zt_tensor_zeros(1, (int64_t[]){n}, ZT_DTYPE_F32, ZT_CPU, &t)) {
    fprintf(stderr, "bench_comm: %s\n", zt_last_error());
    exit(1);
  }
  return t;
}

#define CK(x)                                                        \
  do {                                                               \
    if (x) {                                                         \
      fprintf(stderr, "bench_comm: %s\n", zt_last_error());          \
      exit(1);                                                       \
    }                                                                \
  } while (0)

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 5;
  const char *label = argc > 2 ? argv[2] : "";
  if (reps < 1 || reps > 99) reps = 5;
  zt_comm *w = NULL;
  CK(zt_comm_world(&w));
  int n = zt_comm_size(w), me = zt_comm_rank(w);
  /* 192 KiB: one microbatch of gpt2-124m's activations, 2 x 32 tokens x 768 floats (a pipeline hop) */
  const int64_t bytes[] = {4, 65536, 196608, 4 << 20};
  enum { NSIZES = 4 };
  const char *ops[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "sendrecv"};
  if (me == 0) printf("{\"bench\":\"comm\",\"label\":\"%s\",\"ranks\":%d,\"reps\":%d,\"ops\":{", label, n, reps);
  for (int o = 0; o < 5; o++) {
    if (me == 0) printf("%s\"%s\":{", o ? "," : "", ops[o]);
    for (int k = 0; k < NSIZES; k++) {
      int64_t m = bytes[k] / 4;
      zt_tensor *a = vec(m), *b = vec(m * n), *c = vec(m);
      /* calls per repetition: about 0.2 s of them (rank 0's first call, timed, sets the count
       * for every rank), 2 to 200 */
      int iters = 1;
      double med[99];
      for (int r = -1; r < reps; r++) {
        CK(zt_barrier(w));
        double t0 = zt_clock_now();
        for (int i = 0; i < iters; i++) {
          switch (o) {
          case 0: CK(zt_all_reduce(w, a, ZT_REDUCE_SUM)); break;
          case 1: CK(zt_all_gather(w, a, b)); break;
          case 2: CK(zt_reduce_scatter(w, b, c, ZT_REDUCE_SUM)); break;
          case 3: CK(zt_broadcast(w, a, 0)); break;
          default:
            if (me == 0) {
              CK(zt_send(w, a, n - 1, 1));
              CK(zt_recv(w, a, n - 1, 2));
            } else if (me == n - 1) {
              CK(zt_recv(w, a, 0, 1));
              CK(zt_send(w, a, 0, 2));
            }
          }
        }
        if (o == 4) CK(zt_barrier(w));
        double dt = (zt_clock_now() - t0) / iters;
        if (r < 0) { /* the calibration call */
          zt_tensor *it = vec(1);
          float *p = NULL;
          CK(zt_tensor_data(it, (void **)&p));
          p[0] = (float)(me == 0 ? (dt > 0 ? 0.2 / dt : 200) : 0);
          CK(zt_broadcast(w, it, 0));
          iters = p[0] < 2 ? 2 : p[0] > 200 ? 200 : (int)p[0];
          zt_tensor_free(it);
          continue;
        }
        med[r] = dt;
        if (o == 4) med[r] /= 2; /* one way */
      }
      qsort(med, (size_t)reps, sizeof med[0], cmp_d);
      double t = med[reps / 2];
      double f = o == 0 ? 2.0 * (n - 1) / n : (o == 1 || o == 2) ? (double)(n - 1) / n : 1.0;
      if (me == 0)
        printf("%s\"%lld\":{\"us\":%.1f,\"busbw_MBps\":%.1f}", k ? "," : "", (long long)bytes[k], t * 1e6,
               (double)bytes[k] * f / t / 1e6);
      zt_tensor_free(a);
      zt_tensor_free(b);
      zt_tensor_free(c);
    }
    if (me == 0) printf("}");
  }
  if (me == 0) printf("}}\n");
  fflush(stdout);
  zt_comm_free(w);
  return 0;
}
