/* nccl-group-abort: ncclCommAbort racing a group on another thread, which
 * gonccl's Abort used to allow; on NCCL 2.30.7 that was a SIGSEGV inside
 * ncclGroupEnd.
 *
 * Each round makes one communicator per GPU (NGPUS ranks, default 2, one per
 * GPU) in one group on the main thread. A worker thread then loops:
 * ncclGroupStart; an in-place 1 MiB float all-reduce on every rank's
 * communicator; ncclGroupEnd (non-blocking: then it polls every communicator
 * until none is in progress; no other thread polls). After 0-20 ms a watchdog
 * thread aborts every communicator:
 *
 * race:    at once, wherever the worker is (inside a group, inside
 *          ncclGroupEnd, polling); the worker stops at the top of its loop.
 *          This breaks NCCL's rule that no thread calls NCCL while
 *          ncclCommAbort runs (docs/userguide/source/usage/communicators.rst,
 *          "Fault Tolerance"); a communicator linked in another thread's open
 *          group is freed under it. Expected: a crash within a few rounds.
 * ingroup: waits until the worker has made its all-reduce calls and has not
 *          called ncclGroupEnd yet (no call inside NCCL, only an open group:
 *          what a per-communicator count of calls in flight lets through),
 *          aborts, then lets the worker call ncclGroupEnd on the freed
 *          communicators. Expected: a crash or an error in round 1.
 * safe:    sets a stop flag, waits until the worker is outside any group and
 *          will call NCCL no more, then aborts. Expected: every round passes.
 *
 *   gcc -O2 -o nccl-group-abort nccl-group-abort.c -I/usr/local/cuda/include \
 *       -L/usr/local/cuda/lib64 -lnccl -lcudart -lpthread
 *   NCCL_NVLS_ENABLE=0 ./nccl-group-abort race|ingroup|safe [blocking|nonblocking] [ROUNDS] [NGPUS]
 *
 * Defaults: nonblocking, 20 rounds, 2 GPUs; SEED=n changes the delays. A round
 * still running after 120 s ends the process ("Alarm clock", exit 142).
 * Exit 1 on any error in safe mode; in race and ingroup, surviving exits 0.
 */
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CK(x) do { int e_ = (int)(x); if (e_) { fprintf(stderr, "%s:%d %s = %d (%s)\n", __FILE__, __LINE__, #x, e_, \
                    ncclGetLastError(NULL)); exit(1); } } while (0)
/* OK accepts ncclInProgress too: a non-blocking communicator's calls may return it. */
#define OK(x) do { ncclResult_t r_ = (x); if (r_ != ncclInProgress) CK(r_); } while (0)
#define COUNT (1 << 18) /* floats: 1 MiB */
#define MAXG 64

enum { RACE, INGROUP, SAFE };
enum { W_OUT, W_GROUP, W_PARKED, W_END, W_POLL, W_DONE }; /* where the worker is */
static const char* wname[] = {"outside NCCL", "inside a group (enqueuing)", "in a group before ncclGroupEnd",
                              "inside ncclGroupEnd", "polling ncclCommGetAsyncError", "done"};
static int mode, blocking, nranks;
static ncclComm_t comm[MAXG];
static cudaStream_t stream[MAXG];
static float* buf[MAXG];
/* per round, shared between the threads */
static int stop, aborting, aborted, where, groups, delay_us;
static int werr, werr_rank, where_before, where_after;
static const char* werr_call;
static ncclResult_t abort_res[MAXG];
static double abort_ms;

static int get(int* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static void put(int* p, int v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

/* fail keeps the worker's first failure. */
static void fail(const char* call, int rank, ncclResult_t e) {
  if (werr) return;
  werr = e;
  werr_call = call;
  werr_rank = rank;
}

static void* worker(void* p) {
  (void)p;
  while (mode == INGROUP || !get(&stop)) {
    put(&where, W_GROUP);
    CK(ncclGroupStart());
    for (int r = 0; r < nranks; r++) {
      CK(cudaSetDevice(r));
      ncclResult_t e = ncclAllReduce(buf[r], buf[r], COUNT, ncclFloat, ncclSum, comm[r], stream[r]);
      if (e != ncclSuccess && e != ncclInProgress) fail("ncclAllReduce", r, e);
    }
    if (mode == INGROUP && get(&stop)) { /* let the watchdog abort now */
      put(&where, W_PARKED);
      while (!get(&aborted)) usleep(100);
    }
    put(&where, W_END);
    ncclResult_t e = ncclGroupEnd();
    if (e != ncclSuccess && e != ncclInProgress) fail("ncclGroupEnd", -1, e);
    if (e == ncclInProgress && !get(&aborted)) { /* ingroup: no poll of the aborted communicators */
      put(&where, W_POLL);
      for (int r = 0; r < nranks && !werr; r++) {
        ncclResult_t s = ncclInProgress;
        while (s == ncclInProgress && !(mode == RACE && get(&aborting))) {
          ncclResult_t e2 = ncclCommGetAsyncError(comm[r], &s);
          if (e2 != ncclSuccess) {
            fail("ncclCommGetAsyncError", r, e2);
            break;
          }
          if (s == ncclInProgress) sched_yield();
        }
        if (s != ncclSuccess && s != ncclInProgress) fail("asyncError", r, s);
      }
    }
    put(&where, W_OUT);
    if (werr || get(&aborted)) break;
    put(&groups, get(&groups) + 1);
  }
  put(&where, W_DONE);
  return NULL;
}

static void* watchdog(void* p) {
  (void)p;
  usleep(delay_us);
  put(&stop, 1);
  if (mode == SAFE)
    while (get(&where) != W_DONE) usleep(100);
  if (mode == INGROUP)
    while (get(&where) != W_PARKED && get(&where) != W_DONE) usleep(100);
  where_before = get(&where);
  put(&aborting, 1);
  double t0 = now();
  for (int r = 0; r < nranks; r++) {
    CK(cudaSetDevice(r));
    abort_res[r] = ncclCommAbort(comm[r]);
  }
  abort_ms = (now() - t0) * 1e3;
  where_after = get(&where);
  put(&aborted, 1);
  return NULL;
}

int main(int argc, char** argv) {
  const char* names[] = {"race", "ingroup", "safe"};
  mode = -1;
  for (int m = 0; argc > 1 && m < 3; m++)
    if (strcmp(argv[1], names[m]) == 0) mode = m;
  if (mode < 0) {
    fprintf(stderr, "usage: %s race|ingroup|safe [blocking|nonblocking] [ROUNDS] [NGPUS]\n", argv[0]);
    return 2;
  }
  blocking = argc > 2 && strcmp(argv[2], "blocking") == 0;
  int rounds = argc > 3 ? atoi(argv[3]) : 20;
  nranks = argc > 4 ? atoi(argv[4]) : 2;
  int ndev;
  CK(cudaGetDeviceCount(&ndev));
  if (nranks < 1 || nranks > ndev || nranks > MAXG) {
    fprintf(stderr, "NGPUS %d: %d GPUs visible\n", nranks, ndev);
    return 2;
  }
  unsigned seed = getenv("SEED") ? (unsigned)atoi(getenv("SEED")) : 1;
  int v;
  CK(ncclGetVersion(&v));
  printf("NCCL %d, %s, %s communicators, %d ranks, %d rounds, seed %u\n", v, names[mode],
         blocking ? "blocking" : "non-blocking", nranks, rounds, seed);
  for (int r = 0; r < nranks; r++) {
    CK(cudaSetDevice(r));
    CK(cudaStreamCreateWithFlags(&stream[r], cudaStreamNonBlocking));
    CK(cudaMalloc((void**)&buf[r], COUNT * sizeof(float)));
    CK(cudaMemset(buf[r], 0, COUNT * sizeof(float)));
    CK(cudaDeviceSynchronize());
  }
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = blocking;
  int failures = 0, inside = 0;
  for (int round = 1; round <= rounds; round++) {
    alarm(120);
    ncclUniqueId id;
    CK(ncclGetUniqueId(&id));
    CK(ncclGroupStart());
    for (int r = 0; r < nranks; r++) {
      CK(cudaSetDevice(r));
      OK(ncclCommInitRankConfig(&comm[r], nranks, id, r, &cfg));
    }
    OK(ncclGroupEnd());
    for (int r = 0; r < nranks && !blocking; r++) { /* the worker has not started: only this thread polls */
      ncclResult_t s = ncclInProgress;
      while (s == ncclInProgress) {
        CK(ncclCommGetAsyncError(comm[r], &s));
        if (s == ncclInProgress) sched_yield();
      }
      CK(s);
    }
    stop = aborting = aborted = groups = werr = 0;
    where = W_OUT;
    delay_us = rand_r(&seed) % 20000;
    printf("round %d: abort in %.1f ms\n", round, delay_us / 1e3);
    fflush(stdout);

    pthread_t tw, td;
    CK(pthread_create(&tw, NULL, worker, NULL));
    CK(pthread_create(&td, NULL, watchdog, NULL));
    CK(pthread_join(tw, NULL));
    CK(pthread_join(td, NULL));
    for (int r = 0; r < nranks; r++) {
      CK(cudaSetDevice(r));
      CK(cudaStreamSynchronize(stream[r]));
    }

    char res[8 * MAXG] = "", after[160] = "the worker stopped with no error";
    int bad = werr != 0;
    for (int r = 0; r < nranks; r++) {
      snprintf(res + strlen(res), sizeof res - strlen(res), "%s%d", r ? " " : "", (int)abort_res[r]);
      bad |= abort_res[r] != ncclSuccess;
    }
    if (werr && werr_rank >= 0)
      snprintf(after, sizeof after, "the worker saw %s = %d on rank %d", werr_call, werr, werr_rank);
    else if (werr)
      snprintf(after, sizeof after, "the worker saw %s = %d", werr_call, werr);
    printf("round %d: %d groups ended; the abort began with the worker %s and ended with it %s; "
           "aborts took %.1f ms and returned %s; %s\n",
           round, groups, wname[where_before], wname[where_after], abort_ms, res, after);
    fflush(stdout);
    inside += where_before != W_OUT && where_before != W_DONE;
    failures += bad;
    alarm(0);
  }
  for (int r = 0; r < nranks; r++) {
    CK(cudaSetDevice(r));
    CK(cudaFree(buf[r]));
    CK(cudaStreamDestroy(stream[r]));
  }
  if (mode == SAFE) {
    printf("NCCL %d, safe: %s, %d of %d rounds with an error\n", v, failures ? "FAILED" : "OK", failures, rounds);
    return failures ? 1 : 0;
  }
  printf("NCCL %d, %s: no crash in %d rounds (the abort began inside a group or NCCL call in %d; "
         "an error in %d)\n", v, names[mode], rounds, inside, failures);
  return 0;
}
