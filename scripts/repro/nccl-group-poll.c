/* nccl-group-poll: gonccl's settleAll in C. After a non-blocking ncclGroupEnd
 * each rank's thread polled ncclCommGetAsyncError on every communicator of the
 * process, not only its own; on NCCL 2.30.7 and VCCL 2.29.2 the process died
 * with "terminate called without an active exception".
 *
 * One process, one rank per GPU (NGPUS, default all visible), non-blocking
 * communicators made in one group on the main thread. Then one thread per rank
 * runs STEPS ring steps: in one group ncclSend(a) to rank+1 and ncclRecv(b)
 * from rank-1; ncclGroupEnd (ncclInProgress); wait until communicators leave
 * ncclInProgress; swap a and b. a starts as bytes rank+1, so at the end rank r
 * holds rank (r-STEPS mod N)'s. Each rank checks that, then finalize, destroy.
 *
 *   gcc -O2 -o nccl-group-poll nccl-group-poll.c -I/usr/local/cuda/include \
 *       -L/usr/local/cuda/lib64 -lnccl -lcudart -lpthread
 *   NCCL_NVLS_ENABLE=0 ./nccl-group-poll all|own|locked [STEPS] [NGPUS]
 *
 * Defaults: 1000 steps, every visible GPU; 256 KiB per Send/Recv.
 * all:    each thread waits on every communicator in turn (gonccl's settleAll).
 *         Two threads can both see one group job finished; from 2.29 one then
 *         deletes it while the other joins its std::thread (std::terminate).
 * own:    each thread waits on its own communicator only, as NCCL asks.
 * locked: as all, but every ncclCommGetAsyncError this program makes is under
 *         one mutex: is serialising the polls enough? (A poll still overlaps
 *         the owning thread's unlocked ncclSend/Recv/GroupEnd on that comm.)
 * Exit 0 and "OK" when every rank holds the right data; 1 on any error or a
 * communicator in progress for 60 s. Expected: all dies on 2.29 and later
 * ("terminate called without an active exception", SIGABRT, exit 134); 2.28's
 * pthread job underflows a refcount instead and may pass; own passes.
 */
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(x) do { int e_ = (int)(x); if (e_) { fprintf(stderr, "%s:%d %s = %d (%s)\n", __FILE__, __LINE__, #x, e_, \
                    ncclGetLastError(NULL)); exit(1); } } while (0)
/* OK accepts ncclInProgress too: a non-blocking communicator's calls may return it. */
#define OK(x) do { ncclResult_t r_ = (x); if (r_ != ncclInProgress) CK(r_); } while (0)
#define COUNT (1 << 16) /* int32 per buffer: 256 KiB */
#define MAXG 64

enum { ALL, OWN, LOCKED };
static int mode, nranks, steps;
static ncclComm_t comm[MAXG];
static cudaStream_t stream[MAXG];
static int32_t *bufa[MAXG], *bufb[MAXG];
static int bad[MAXG];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

/* state reads communicator i's state, under the process-wide mutex in mode locked. */
static ncclResult_t state(int i) {
  ncclResult_t r;
  if (mode == LOCKED) pthread_mutex_lock(&mu);
  CK(ncclCommGetAsyncError(comm[i], &r));
  if (mode == LOCKED) pthread_mutex_unlock(&mu);
  return r;
}

/* settle waits while communicator i is in progress; an error or 60 s ends the program. */
static void settle(int i, const char* what) {
  double end = now() + 60;
  ncclResult_t r;
  while ((r = state(i)) == ncclInProgress) {
    if (now() > end) {
      fprintf(stderr, "%s: communicator %d still in progress after 60 s\n", what, i);
      exit(1);
    }
    sched_yield();
  }
  if (r != ncclSuccess) {
    fprintf(stderr, "%s: communicator %d async error %d (%s)\n", what, i, (int)r, ncclGetLastError(NULL));
    exit(1);
  }
}

static void* rank_loop(void* p) {
  int r = (int)(long)p, next = (r + 1) % nranks, prev = (r + nranks - 1) % nranks;
  int32_t *a = bufa[r], *b = bufb[r], *t;
  CK(cudaSetDevice(r));
  for (int s = 0; s < steps; s++) {
    CK(ncclGroupStart());
    OK(ncclSend(a, COUNT, ncclInt32, next, comm[r], stream[r]));
    OK(ncclRecv(b, COUNT, ncclInt32, prev, comm[r], stream[r]));
    OK(ncclGroupEnd());
    if (mode == OWN) {
      settle(r, "step");
    } else {
      for (int i = 0; i < nranks; i++) settle(i, "step");
    }
    t = a;
    a = b;
    b = t;
  }
  CK(cudaStreamSynchronize(stream[r]));
  int src = ((r - steps) % nranks + nranks) % nranks;
  uint32_t want = (uint32_t)(src + 1) * 0x01010101u;
  int32_t* h = malloc(COUNT * sizeof(int32_t));
  CK(h == NULL);
  CK(cudaMemcpy(h, a, COUNT * sizeof(int32_t), cudaMemcpyDeviceToHost));
  for (int i = 0; i < COUNT && !bad[r]; i++) {
    if ((uint32_t)h[i] != want) {
      printf("rank %d: element %d is 0x%08x, want 0x%08x (rank %d's)\n", r, i, (unsigned)h[i], (unsigned)want, src);
      bad[r] = 1;
    }
  }
  if (!bad[r]) printf("rank %d: OK, holds rank %d's data\n", r, src);
  free(h);
  return NULL;
}

int main(int argc, char** argv) {
  const char* names[] = {"all", "own", "locked"};
  mode = -1;
  for (int m = 0; argc > 1 && m < 3; m++)
    if (strcmp(argv[1], names[m]) == 0) mode = m;
  if (mode < 0) {
    fprintf(stderr, "usage: %s all|own|locked [STEPS] [NGPUS]\n", argv[0]);
    return 2;
  }
  steps = argc > 2 ? atoi(argv[2]) : 1000;
  CK(cudaGetDeviceCount(&nranks));
  if (argc > 3) {
    int n = atoi(argv[3]);
    if (n < 1 || n > nranks) {
      fprintf(stderr, "NGPUS %d: %d GPUs visible\n", n, nranks);
      return 2;
    }
    nranks = n;
  }
  if (nranks > MAXG) nranks = MAXG;
  int v;
  CK(ncclGetVersion(&v));
  printf("NCCL %d, %d ranks, %d ring steps, each thread polls %s\n", v, nranks, steps,
         mode == OWN ? "its own communicator" : mode == ALL ? "every communicator" : "every communicator under one mutex");
  fflush(stdout);

  ncclUniqueId id;
  CK(ncclGetUniqueId(&id));
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  CK(ncclGroupStart());
  for (int r = 0; r < nranks; r++) {
    CK(cudaSetDevice(r));
    OK(ncclCommInitRankConfig(&comm[r], nranks, id, r, &cfg));
  }
  OK(ncclGroupEnd());
  for (int r = 0; r < nranks; r++) settle(r, "init");

  size_t bytes = COUNT * sizeof(int32_t);
  for (int r = 0; r < nranks; r++) {
    CK(cudaSetDevice(r));
    CK(cudaStreamCreateWithFlags(&stream[r], cudaStreamNonBlocking));
    CK(cudaMalloc((void**)&bufa[r], bytes));
    CK(cudaMalloc((void**)&bufb[r], bytes));
    CK(cudaMemset(bufa[r], r + 1, bytes)); /* every byte rank+1 */
    CK(cudaMemset(bufb[r], 0, bytes));
    CK(cudaDeviceSynchronize()); /* the memsets are on the legacy stream, which ours does not wait for */
  }

  double t0 = now();
  pthread_t th[MAXG];
  for (int r = 0; r < nranks; r++) CK(pthread_create(&th[r], NULL, rank_loop, (void*)(long)r));
  for (int r = 0; r < nranks; r++) CK(pthread_join(th[r], NULL));
  double secs = now() - t0;

  /* Finalize all in the background, wait from this thread, then destroy. */
  for (int r = 0; r < nranks; r++) {
    CK(cudaSetDevice(r));
    OK(ncclCommFinalize(comm[r]));
  }
  for (int r = 0; r < nranks; r++) settle(r, "finalize");
  for (int r = 0; r < nranks; r++) {
    CK(cudaSetDevice(r));
    CK(ncclCommDestroy(comm[r]));
    CK(cudaFree(bufa[r]));
    CK(cudaFree(bufb[r]));
    CK(cudaStreamDestroy(stream[r]));
  }
  int failed = 0;
  for (int r = 0; r < nranks; r++) failed += bad[r];
  if (failed) {
    printf("NCCL %d, %s: FAILED, %d of %d ranks hold wrong data after %d steps\n", v, names[mode], failed, nranks, steps);
    return 1;
  }
  printf("NCCL %d, %s: OK, %d steps on %d ranks in %.2f s\n", v, names[mode], steps, nranks, secs);
  return 0;
}
