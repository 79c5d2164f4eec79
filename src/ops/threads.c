/* One thread pool for everything: OpenBLAS is the OpenMP build, so GEMMs and our
 * OpenMP loops share the same threads and never oversubscribe the cores. */
#include <omp.h>

#include "zt/ops.h"

void openblas_set_num_threads(int num_threads);

void zt_set_num_threads(int n) {
  if (n <= 0) n = omp_get_num_procs();
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int zt_get_num_threads(void) { return omp_get_max_threads(); }
