/* nccl-abort-race: gonccl's Abort watchdog (TestGPUFaultAbortWatchdog) in C.
 *
 * Each round makes a two-GPU communicator in one process (one rank per GPU,
 * ncclCommInitRank in a group), all-reduces once together, then one thread
 * per rank enqueues 1 MiB all-reduces in a loop. After 0-20 ms a watchdog
 * tells both to stop; each thread then calls ncclCommAbort on its own
 * communicator as soon as its last ncclAllReduce has returned, so no call is
 * inside NCCL on that communicator, while the other rank's thread may still be
 * inside ncclAllReduce on its own. That is exactly what gonccl's Abort does.
 *
 *   gcc -O2 -o nccl-abort-race nccl-abort-race.c -I/usr/local/cuda/include \
 *       -L/usr/local/cuda/lib64 -lnccl -lcudart -lpthread
 *   NCCL_NVLS_ENABLE=0 ./nccl-abort-race SECONDS
 */
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define CK(x) do { int e_ = (int)(x); if (e_) { fprintf(stderr, "%s:%d %s = %d (%s)\n", __FILE__, __LINE__, #x, e_, \
                    ncclGetLastError(NULL)); exit(1); } } while (0)
#define N (1 << 18)

static ncclComm_t comm[2];
static cudaStream_t stream[2];
static float* buf[2];
static volatile int stop;
static long ops[2];

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static void* rank_loop(void* p) {
  int r = (int)(long)p;
  CK(cudaSetDevice(r));
  while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
    ncclResult_t e = ncclAllReduce(buf[r], buf[r], N, ncclFloat, ncclSum, comm[r], stream[r]);
    if (e != ncclSuccess) break;
    ops[r]++;
  }
  CK(ncclCommAbort(comm[r])); /* no other call on this communicator is inside NCCL now */
  return NULL;
}

int main(int argc, char** argv) {
  double secs = argc > 1 ? atof(argv[1]) : 10;
  int v;
  CK(ncclGetVersion(&v));
  for (int r = 0; r < 2; r++) {
    CK(cudaSetDevice(r));
    CK(cudaStreamCreateWithFlags(&stream[r], cudaStreamNonBlocking));
    CK(cudaMalloc((void**)&buf[r], N * sizeof(float)));
  }
  srand(3);
  double end = now() + secs;
  int rounds = 0;
  long total = 0;
  while (now() < end) {
    ncclUniqueId id;
    CK(ncclGetUniqueId(&id));
    CK(ncclGroupStart());
    for (int r = 0; r < 2; r++) {
      CK(cudaSetDevice(r));
      CK(ncclCommInitRank(&comm[r], 2, id, r));
    }
    CK(ncclGroupEnd());
    CK(ncclGroupStart());
    for (int r = 0; r < 2; r++) CK(ncclAllReduce(buf[r], buf[r], N, ncclFloat, ncclSum, comm[r], stream[r]));
    CK(ncclGroupEnd());
    for (int r = 0; r < 2; r++) CK(cudaStreamSynchronize(stream[r]));
    stop = 0;
    ops[0] = ops[1] = 0;
    pthread_t th[2];
    for (int r = 0; r < 2; r++) pthread_create(&th[r], NULL, rank_loop, (void*)(long)r);
    usleep(rand() % 20000);
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < 2; r++) {
      CK(cudaSetDevice(r));
      CK(cudaStreamSynchronize(stream[r]));
    }
    rounds++;
    total += ops[0] + ops[1];
  }
  printf("NCCL %d: %d rounds in %.0f s, %ld all-reduces enqueued and aborted, no crash\n", v, rounds, secs, total);
  return 0;
}
