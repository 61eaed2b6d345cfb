// An MPI program that exchanges data through MPI itself (MPI_Allgather, as
// nccl-tests' MPI build does at start), every element checked: it proves that
// two hosts emulated on one machine (scripts/emulated-host-rsh.sh) keep their
// ranks' Open MPI shared memory apart. scripts/test-launchers.sh runs it.
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

enum { N = 1 << 16, ROUNDS = 50 };

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long *in = malloc(sizeof(long) * N), *out = malloc(sizeof(long) * N * size);
  for (int r = 0; r < ROUNDS; r++) {
    for (int i = 0; i < N; i++) in[i] = ((long)rank << 40) + ((long)r << 20) + i;
    MPI_Allgather(in, N, MPI_LONG, out, N, MPI_LONG, MPI_COMM_WORLD);
    for (int p = 0; p < size; p++)
      for (int i = 0; i < N; i++)
        if (out[(size_t)p * N + i] != ((long)p << 40) + ((long)r << 20) + i) {
          printf("mpi-allgather: rank %d: round %d, element %d of rank %d wrong\n", rank, r, i, p);
          MPI_Abort(MPI_COMM_WORLD, 1);
        }
  }
  printf("mpi-allgather: rank %d of %d: %d rounds checked\n", rank, size, ROUNDS);
  MPI_Finalize();
  return 0;
}
