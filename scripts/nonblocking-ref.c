// The C reference for non-blocking launches (scripts/bench-nonblocking.sh
// builds and runs it): µs per plainly launched all-reduce on a blocking and
// on a non-blocking communicator, one process per GPU under mpirun, at 8 B,
// 64 KiB and 8 MiB. After each call that returns ncclInProgress,
// ncclCommGetAsyncError is polled until it leaves ncclInProgress, as NCCL's
// documentation asks and gonccl does. Prints the mean over the ranks.
#include <mpi.h>
#include <nccl.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#define CK(x) do { int e_ = (int)(x); if (e_ != 0 && e_ != ncclInProgress) { fprintf(stderr, "%s:%d %s = %d\n", __FILE__, __LINE__, #x, e_); exit(1); } } while (0)
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static void settle(ncclComm_t c) { ncclResult_t r; do { CK(ncclCommGetAsyncError(c, &r)); } while (r == ncclInProgress); CK(r); }
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n; MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &n);
  int iters = argc > 1 ? atoi(argv[1]) : 2400;
  CK(cudaSetDevice(rank));
  int version; CK(ncclGetVersion(&version));
  if (rank == 0) printf("C nccl version %d\n", version);
  cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  size_t counts[] = {2, 16384, 2097152};
  float *in, *out; CK(cudaMalloc((void**)&in, 2097152 * 4)); CK(cudaMalloc((void**)&out, 2097152 * 4));
  CK(cudaMemset(in, 0, 2097152 * 4));
  for (int blocking = 1; blocking >= 0; blocking--) {
    ncclUniqueId id; if (rank == 0) CK(ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER; cfg.blocking = blocking;
    ncclComm_t c; CK(ncclCommInitRankConfig(&c, n, id, rank, &cfg)); settle(c);
    for (int k = 0; k < 3; k++) {
      size_t cnt = counts[k];
      for (int i = 0; i < 20; i++) { CK(ncclAllReduce(in, out, cnt, ncclFloat, ncclSum, c, s)); settle(c); }
      CK(cudaStreamSynchronize(s));
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = now();
      for (int i = 0; i < iters; i++) { CK(ncclAllReduce(in, out, cnt, ncclFloat, ncclSum, c, s)); settle(c); }
      CK(cudaStreamSynchronize(s));
      double us = (now() - t0) / iters, sum;
      MPI_Reduce(&us, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
      if (rank == 0) printf("C np %d n %zu %s: %.1f us per all-reduce launched plainly (mean of ranks, %d iters)\n", n, cnt, blocking ? "blocking" : "-nonblocking", sum / n, iters);
    }
    CK(ncclCommFinalize(c)); settle(c); CK(ncclCommDestroy(c));
  }
  MPI_Finalize();
  return 0;
}
