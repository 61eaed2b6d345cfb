/* nccl-abort-memory: does NCCL keep GPU memory after ncclCommAbort of a
 * communicator whose peer process died during a collective? The same fault
 * as gonccl's TestGPUFaultPeerDies ("during"), in C with no gonccl in the way.
 *
 * Rank 0 (this process, GPU 0) and rank 1 (this program re-executed, GPU 1)
 * all-reduce once; rank 1 exits; rank 0 starts a second all-reduce, waits 5 s
 * for it (it never ends), aborts, synchronizes, frees its buffer, and prints
 * GPU 0's free memory against its value before the init, for each round.
 *
 *   gcc -O2 -o nccl-abort-memory nccl-abort-memory.c -I/usr/local/cuda/include \
 *       -L/usr/local/cuda/lib64 -lnccl -lcudart
 *   NCCL_NVLS_ENABLE=0 ./nccl-abort-memory ROUNDS [blocking|nonblocking] [samethread|otherthread]
 *
 * otherthread calls ncclCommAbort from a new thread, as a Go program does
 * when the goroutine that waits has moved to another OS thread. POLL_ASYNC=1
 * polls ncclCommGetAsyncError while waiting; BEFORE=1 starts each round with
 * an init whose peer died first, aborted after 5 s.
 */
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CK(x) do { int e_ = (int)(x); if (e_) { fprintf(stderr, "%s:%d %s = %d (%s)\n", __FILE__, __LINE__, #x, e_, \
                    ncclGetLastError(NULL)); exit(1); } } while (0)
#define N (1 << 20)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

/* settle waits while a non-blocking communicator is still in progress. */
static ncclResult_t settle(ncclComm_t c, double limit) {
  ncclResult_t r = ncclInProgress;
  double end = now() + limit;
  while (r == ncclInProgress && now() < end) {
    CK(ncclCommGetAsyncError(c, &r));
    if (r == ncclInProgress) usleep(100);
  }
  return r;
}

static ncclComm_t init(ncclUniqueId id, int rank, int blocking) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = blocking;
  ncclComm_t c;
  ncclResult_t r = ncclCommInitRankConfig(&c, 2, id, rank, &cfg);
  if (r != ncclSuccess && r != ncclInProgress) CK(r);
  CK(settle(c, 60));
  return c;
}

static void* abort_comm(void* c) {
  CK(cudaSetDevice(0));
  CK(ncclCommAbort((ncclComm_t)c));
  return NULL;
}

static int child(const char* hex, int blocking) {
  ncclUniqueId id;
  for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) sscanf(hex + 2 * i, "%2hhx", (unsigned char*)&id.internal[i]);
  CK(cudaSetDevice(1));
  ncclComm_t c = init(id, 1, blocking);
  float* b;
  cudaStream_t s;
  CK(cudaMalloc((void**)&b, N * sizeof(float)));
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  ncclResult_t r = ncclAllReduce(b, b, N, ncclFloat, ncclSum, c, s);
  if (r != ncclSuccess && r != ncclInProgress) CK(r);
  CK(settle(c, 60));
  CK(cudaStreamSynchronize(s));
  _exit(0); /* dies holding its communicator, as a crashed rank does */
}

int main(int argc, char** argv) {
  int blocking = !(argc > 2 && strcmp(argv[2], "nonblocking") == 0);
  int other = argc > 3 && strcmp(argv[3], "otherthread") == 0;
  int before = getenv("BEFORE") && *getenv("BEFORE") == '1';
  if (argc > 3 && strcmp(argv[1], "child") == 0) return child(argv[3], blocking);
  if (argc > 1 && strcmp(argv[1], "childdie") == 0) return 0; /* a rank that dies before its init */
  int rounds = argc > 1 ? atoi(argv[1]) : 6;
  int v;
  CK(ncclGetVersion(&v));
  CK(cudaSetDevice(0));
  CK(cudaFree(0));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  size_t start = 0, total;
  printf("NCCL %d, %s communicators, abort from %s\n", v, blocking ? "blocking" : "non-blocking",
         other ? "another thread" : "the launching thread");
  for (int round = 1; round <= rounds; round++) {
    size_t base, after;
    CK(cudaMemGetInfo(&base, &total));
    if (round == 1) start = base;
    if (before) { /* BEFORE=1: first a peer that dies before init, as gonccl's test does between its faults */
      ncclUniqueId id0;
      CK(ncclGetUniqueId(&id0));
      pid_t p0 = fork();
      if (p0 == 0) {
        execl("/proc/self/exe", argv[0], "childdie", (char*)NULL);
        _exit(127);
      }
      ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
      cfg.blocking = 0;
      ncclComm_t c0;
      ncclResult_t r0 = ncclCommInitRankConfig(&c0, 2, id0, 0, &cfg);
      if (r0 == ncclInProgress) r0 = settle(c0, 5);
      CK(ncclCommAbort(c0));
      int st0;
      waitpid(p0, &st0, 0);
      size_t mid;
      CK(cudaMemGetInfo(&mid, &total));
      printf("round %d: init without its peer ended %d after 5 s and was aborted; GPU 0 free %+ld bytes\n", round, (int)r0,
             (long)mid - (long)base);
    }
    ncclUniqueId id;
    CK(ncclGetUniqueId(&id));
    char hex[2 * NCCL_UNIQUE_ID_BYTES + 1];
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; i++) sprintf(hex + 2 * i, "%02x", (unsigned char)id.internal[i]);
    pid_t pid = fork();
    if (pid == 0) {
      execl("/proc/self/exe", argv[0], "child", blocking ? "blocking" : "nonblocking", hex, (char*)NULL);
      _exit(127);
    }
    ncclComm_t c = init(id, 0, blocking);
    float* b;
    CK(cudaMalloc((void**)&b, N * sizeof(float)));
    ncclResult_t r = ncclAllReduce(b, b, N, ncclFloat, ncclSum, c, s);
    if (r != ncclSuccess && r != ncclInProgress) CK(r);
    CK(settle(c, 60));
    CK(cudaStreamSynchronize(s));
    int status;
    waitpid(pid, &status, 0); /* rank 1 is gone */
    r = ncclAllReduce(b, b, N, ncclFloat, ncclSum, c, s);
    double t0 = now();
    /* A non-blocking communicator launches in the background: wait that out
     * first (as gonccl does after every call), then for the stream. */
    ncclResult_t launched = r == ncclInProgress ? settle(c, 5) : r;
    double tl = now() - t0;
    /* POLL_ASYNC=1 also asks ncclCommGetAsyncError while waiting, as gonccl's Wait does. */
    int poll_async = getenv("POLL_ASYNC") && *getenv("POLL_ASYNC") == '1';
    ncclResult_t async = ncclSuccess;
    while (now() - t0 < 5 && cudaStreamQuery(s) == cudaErrorNotReady) {
      if (poll_async) CK(ncclCommGetAsyncError(c, &async));
      usleep(1000);
    }
    int hung = cudaStreamQuery(s) == cudaErrorNotReady;
    if (other) {
      pthread_t th;
      pthread_create(&th, NULL, abort_comm, c);
      pthread_join(th, NULL);
    } else {
      CK(ncclCommAbort(c));
    }
    CK(cudaStreamSynchronize(s));
    CK(cudaFree(b));
    double t1 = now();
    do {
      CK(cudaMemGetInfo(&after, &total));
      if (after >= base) break;
      usleep(100000);
    } while (now() - t1 < 5);
    printf("round %d: second all-reduce returned %d, launch %d after %.2f s, async %d, kernel %s; GPU 0 free %+ld bytes this round, "
           "%+ld since round 1\n", round, (int)r, (int)launched, tl, (int)async, hung ? "hung until the abort" : "not running",
           (long)after - (long)base, (long)after - (long)start);
    fflush(stdout);
  }
  return 0;
}
