/* What OpenMPI makes of the hosts harness (tests/hosts/hosts_lib.sh), one line per rank in
 * world-rank order: "rank R host NAME node-group G size S first F", where NAME is
 * MPI_Get_processor_name, the node group is MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) (the
 * group the comm layer's arrival board shares a window within), S its size and F its lowest
 * world rank. Then a byte-moving check over every pair: an all-reduce and a ring exchange of
 * 1 MiB, whose sums rank 0 checks ("ok" or a message). Exit status 0 when all agree. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  char name[MPI_MAX_PROCESSOR_NAME] = {0};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int nsize = 0, first = rank;
  MPI_Comm_size(node, &nsize);
  MPI_Allreduce(&rank, &first, 1, MPI_INT, MPI_MIN, node);
  char line[MPI_MAX_PROCESSOR_NAME + 96];
  memset(line, 0, sizeof line);
  snprintf(line, sizeof line, "rank %d host %s node-group %d size %d first %d", rank, name, first, nsize, first);
  char *all = rank == 0 ? calloc((size_t)size, sizeof line) : NULL;
  MPI_Gather(line, (int)sizeof line, MPI_CHAR, all, (int)sizeof line, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank == 0)
    for (int r = 0; r < size; r++) printf("%s\n", all + (size_t)r * sizeof line);
  /* bytes across the hosts: an all-reduce and a ring exchange of 1 MiB */
  enum { N = 1 << 18 };
  int *a = malloc(sizeof *a * N), *b = malloc(sizeof *b * N);
  for (int i = 0; i < N; i++) a[i] = rank + i;
  MPI_Allreduce(a, b, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  int bad = 0;
  for (int i = 0; i < N; i++) bad |= b[i] != size * (size - 1) / 2 + size * i;
  int to = (rank + 1) % size, from = (rank + size - 1) % size;
  MPI_Sendrecv(a, N, MPI_INT, to, 7, b, N, MPI_INT, from, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  for (int i = 0; i < N; i++) bad |= b[i] != from + i;
  int anybad = 0;
  MPI_Reduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) printf("%s\n", anybad ? "bytes: WRONG" : "bytes: ok");
  free(a);
  free(b);
  free(all);
  MPI_Comm_free(&node);
  MPI_Finalize();
  return rank == 0 && anybad ? 1 : 0;
}
