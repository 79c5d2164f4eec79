/* Micro-benchmark of all-reduce latency under mpirun (not a test): median time per call of
 * blocking f32 all-reduces of a few sizes, one JSON line from rank 0. Uses only the calls
 * that predate comm timeouts, so the same source builds against an older libzt to compare.
 *   mpirun -np 2 comm_latency [reps (5)] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "zt/comm.h"

static int cmp_d(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 5;
  if (reps < 1 || reps > 99) reps = 5;
  zt_comm *w = NULL;
  if (zt_comm_world(&w)) {
    fprintf(stderr, "zt_comm_world: %s\n", zt_last_error());
    return 1;
  }
  const int64_t sizes[] = {1, 1024, 262144};
  const int iters[] = {4000, 2000, 100};
  if (zt_comm_rank(w) == 0) printf("{\"bench\":\"comm_latency\",\"ranks\":%d,\"all_reduce_us\":{", zt_comm_size(w));
  for (int k = 0; k < 3; k++) {
    zt_tensor *t = NULL;
    if (zt_tensor_zeros(1, (int64_t[]){sizes[k]}, ZT_DTYPE_F32, ZT_CPU, &t)) return 1;
    double med[99];
    for (int r = 0; r < reps; r++) {
      if (zt_barrier(w)) return 1;
      double t0 = zt_clock_now();
      for (int i = 0; i < iters[k]; i++)
        if (zt_all_reduce(w, t, ZT_REDUCE_SUM)) {
          fprintf(stderr, "%s\n", zt_last_error());
          return 1;
        }
      med[r] = (zt_clock_now() - t0) / iters[k] * 1e6;
    }
    qsort(med, (size_t)reps, sizeof med[0], cmp_d);
    if (zt_comm_rank(w) == 0) printf("%s\"%lld\":%.2f", k ? "," : "", (long long)sizes[k], med[reps / 2]);
    zt_tensor_free(t);
  }
  if (zt_comm_rank(w) == 0) printf("}}\n");
  zt_comm_free(w);
  return 0;
}
