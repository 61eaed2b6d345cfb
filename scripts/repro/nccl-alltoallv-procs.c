/* nccl-alltoallv-procs: VCCL's native ncclAlltoAllv across processes, as
 * gonccl's nccl-bench runs it (`-op alltoallv -d uint8 -c 1 -b 8 -e 16M -f 32
 * -n 5 -w 1 -np 4`), which found whole blocks wrong at 256 KiB and 8 MiB while
 * one process driving all GPUs (-g 4) and grouped send/recv were right.
 *
 * NP processes (default 4, one GPU each, forked; the ncclUniqueId and a host
 * barrier live in shared memory), one blocking communicator each, send and
 * receive buffers of 16 MiB from ncclMemAlloc registered with
 * ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC). nccl-bench's order: a
 * warm-up at every size 8 B .. 16 MiB doubling; then for each size 8 B .. 8 MiB
 * (x32): the checked run (receive buffer set to 0xa5, send buffer written,
 * ncclAlltoAllv at offset 0, stream synchronised, receive buffer compared),
 * then 5 timed runs, run `it` at element offset elems*(it % (16M/elems))
 * (nccl-tests' shift), each size's end a job-wide barrier. Layout: nccl-tests'
 * alltoallv pattern as cmd/nccl-bench/ops.go (peerBytes, alltoallvLayout): rank
 * i sends rank j dist(i,j)*total/(n(n-1)/2) bytes, rounded down to 16. Byte k of
 * the block from s to d is pat(s,d,k), never 0xa5, so a wrong byte that reads
 * 0xa5 is the receiver's own memset, i.e. a peer's put landed before it.
 *
 * VCCL's ncclAlltoAllv puts straight into the peers' windows with the copy
 * engine and waits only for the peers' "data sent" signals (src/rma/rma_ce.cc);
 * nothing waits for the receiver to be ready. Mode words tell causes apart:
 *   shift | noshift     timed runs at nccl-bench's moving offsets, or all at 0
 *   nobarrier | barrier no barrier between writing the check's buffers and the
 *                       call (nccl-bench), or a job-wide host barrier there
 *   skew                rank r sleeps 3r ms before writing the check's buffers
 *                       (what nccl-bench's per-size Go input generation does by
 *                       chance): makes the write/put race happen every time
 *   sync                cudaDeviceSynchronize + barrier after every timed run
 *   offset              the checked run at the second slot (offset elems), not
 *                       0: is a buffer inside a window handled?
 *   window | nowindow   buffers registered as windows, or plain ncclMemAlloc
 *                       (VCCL should refuse: prints REFUSED, exit 0)
 *   abi10               the older 10-argument ncclAlltoAllv (same version 2.29.2)
 *   dumps               keep the children's stdout (VCCL's "RMA Work Batch" dumps)
 * Expected if the receiver-readiness race is the cause: `skew` FAILED, `skew
 * barrier` OK, `sync` does not help, `offset` changes nothing.
 *
 *   gcc -O2 -o nccl-alltoallv-procs nccl-alltoallv-procs.c -I/usr/local/cuda/include \
 *       -L/usr/local/cuda/lib64 -lnccl -lcudart -lpthread -ldl
 *   LD_LIBRARY_PATH=/tmp/vccl/build/lib NCCL_NVLS_ENABLE=0 ./nccl-alltoallv-procs [NP] [MODES...]
 *
 * nccl.h needs ncclMemAlloc and windows (NCCL >= 2.27); ncclAlltoAllv is not in
 * NCCL's header, so it is declared here as VCCL's src/nccl.h.in has it and found
 * with dlsym. Exit 0 and OK when every checked byte is right; 1 on any wrong byte
 * or error; 2 when the library has no ncclAlltoAllv.
 */
#define _GNU_SOURCE /* RTLD_DEFAULT, usleep, MAP_ANONYMOUS */
#include <cuda_runtime.h>
#include <nccl.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CK(x) do { int e_ = (int)(x); if (e_) { fprintf(stderr, "rank %d: %s:%d %s = %d (%s)\n", rank, __FILE__, \
                    __LINE__, #x, e_, ncclGetLastError(NULL)); exit(1); } } while (0)
#define MAXNP 16
#define MINB 8
#define MAXB (16 << 20) /* -e 16M: every buffer */
#define FACTOR 32
#define ITERS 5
#define NSIZES 8

/* VCCL's two forms (src/nccl.h.in of a2av_base: 11 arguments). */
typedef ncclResult_t (*a2av11_t)(const void*, const size_t*, const size_t*, void*, const size_t*, const size_t*,
                                 void* relaybuff, size_t relaycount, ncclDataType_t, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*a2av10_t)(const void*, const size_t*, const size_t*, void*, const size_t*, const size_t*,
                                 const void* relaybuff, ncclDataType_t, ncclComm_t, cudaStream_t);

struct shared {
  pthread_barrier_t bar;
  ncclUniqueId id;
  long count[NSIZES];
  long wrong[NSIZES][MAXNP][MAXNP]; /* [size][receiver][source] */
  long a5[NSIZES];                  /* wrong bytes that read 0xa5 */
  double us[NSIZES][MAXNP];
};
static struct shared* sh;
static int np = 4, rank = -1, doshift = 1, window = 1, barrier = 0, skew = 0, syncit = 0, offset = 0, abi = 11, dumps = 0;
static void* a2av;
static size_t *sc, *sd, *rc, *rd; /* n*n each */

static void hbarrier(void) { pthread_barrier_wait(&sh->bar); }

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static uint8_t pat(int s, int d, size_t k) {
  uint8_t v = (uint8_t)(s * 61 + d * 17 + k * 7 + 1);
  return v == 0xa5 ? 0x5a : v;
}

/* peerBytes: cmd/nccl-bench/ops.go, nccl-tests' generated alltoallv pattern. */
static size_t peerBytes(int i, int j, int n, size_t total) {
  if (n == 1) return total & ~(size_t)15;
  int dist = (j - i + n) % n;
  return (size_t)((double)dist * (double)total / (double)(n * (n - 1) / 2)) & ~(size_t)15;
}

/* layout: alltoallvLayout for one-byte elements, count per rank. */
static void layout(size_t count) {
  size_t total = count * np;
  for (int i = 0; i < np; i++) {
    size_t so = 0, ro = 0;
    for (int j = 0; j < np; j++) {
      int k = i * np + j;
      sc[k] = peerBytes(i, j, np, total), sd[k] = so, so += sc[k];
      rc[k] = peerBytes(j, i, np, total), rd[k] = ro, ro += rc[k];
    }
  }
}

/* bytes per rank as nccl-bench counts them: size/n, per-peer count aligned to 16. */
static size_t countOf(size_t size) { return (size / np) & ~(size_t)15; }

static ncclResult_t call(uint8_t* send, uint8_t* recv, size_t off, ncclComm_t comm, cudaStream_t s) {
  if (abi == 10)
    return ((a2av10_t)a2av)(send + off, sc, sd, recv + off, rc, rd, NULL, ncclUint8, comm, s);
  return ((a2av11_t)a2av)(send + off, sc, sd, recv + off, rc, rd, NULL, 0, ncclUint8, comm, s);
}

static int child(void) {
  int ndev;
  CK(cudaGetDeviceCount(&ndev));
  CK(cudaSetDevice(rank % ndev));
  if (rank == 0) CK(ncclGetUniqueId(&sh->id));
  hbarrier();
  ncclComm_t comm;
  CK(ncclCommInitRank(&comm, np, sh->id, rank));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  uint8_t *send, *recv;
  ncclWindow_t sw = NULL, rw = NULL;
  CK(ncclMemAlloc((void**)&send, MAXB));
  CK(ncclMemAlloc((void**)&recv, MAXB));
  if (window) {
    CK(ncclCommWindowRegister(comm, send, MAXB, &sw, NCCL_WIN_COLL_SYMMETRIC));
    CK(ncclCommWindowRegister(comm, recv, MAXB, &rw, NCCL_WIN_COLL_SYMMETRIC));
  }
  uint8_t* host = malloc(MAXB);
  sc = calloc(np * np, sizeof(size_t)), sd = calloc(np * np, sizeof(size_t));
  rc = calloc(np * np, sizeof(size_t)), rd = calloc(np * np, sizeof(size_t));
  /* warm-up, as nccl-bench's warmUp: every size doubling, offset 0, local sync */
  for (size_t size = MINB; size <= MAXB; size *= 2) {
    size_t count = countOf(size);
    if (count == 0) continue;
    layout(count);
    ncclResult_t r = call(send, recv, 0, comm, s);
    if (r != ncclSuccess && !window) {
      fprintf(stderr, "rank %d: ncclAlltoAllv on buffers outside windows: %d (%s)\n", rank, r, ncclGetLastError(comm));
      exit(3);
    }
    CK(r);
    CK(cudaStreamSynchronize(s));
  }
  int si = 0;
  for (size_t size = MINB; size <= MAXB && si < NSIZES; size *= FACTOR, si++) {
    size_t count = countOf(size), elems = count * np;
    sh->count[si] = (long)count;
    hbarrier(); /* nccl-bench's jobReduce at the end of the previous size */
    if (count == 0) continue;
    layout(count);
    size_t slots = MAXB / elems > 0 ? MAXB / elems : 1;
    size_t coff = offset && slots > 1 ? elems : 0;
    /* the checked run: nccl-bench's writeInputs, launch, sync, compare */
    if (skew) usleep(3000 * rank);
    memset(host, 0, elems);
    for (int j = 0; j < np; j++)
      for (size_t k = 0; k < sc[rank * np + j]; k++) host[sd[rank * np + j] + k] = pat(rank, j, k);
    CK(cudaMemset(recv + coff, 0xa5, elems));
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(send + coff, host, elems, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize());
    if (barrier) hbarrier();
    CK(call(send, recv, coff, comm, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(host, recv + coff, elems, cudaMemcpyDeviceToHost));
    long a5 = 0;
    for (int p = 0; p < np; p++) {
      long w = 0;
      for (size_t k = 0; k < rc[rank * np + p]; k++) {
        uint8_t got = host[rd[rank * np + p] + k];
        if (got != pat(p, rank, k)) w++, a5 += got == 0xa5;
      }
      sh->wrong[si][rank][p] = w;
    }
    __atomic_add_fetch(&sh->a5[si], a5, __ATOMIC_SEQ_CST);
    hbarrier(); /* nccl-bench's jobReduce of the wrong counts */
    /* the timed runs */
    double t0 = now();
    for (int it = 0; it < ITERS; it++) {
      CK(call(send, recv, doshift ? elems * (it % slots) : 0, comm, s));
      if (syncit) {
        CK(cudaDeviceSynchronize());
        hbarrier();
      }
    }
    CK(cudaStreamSynchronize(s));
    sh->us[si][rank] = (now() - t0) * 1e6 / ITERS;
  }
  hbarrier();
  if (window) {
    CK(ncclCommWindowDeregister(comm, sw));
    CK(ncclCommWindowDeregister(comm, rw));
  }
  CK(ncclMemFree(send));
  CK(ncclMemFree(recv));
  CK(ncclCommFinalize(comm));
  CK(ncclCommDestroy(comm));
  return 0;
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    if (a[0] >= '0' && a[0] <= '9') np = atoi(a);
    else if (!strcmp(a, "shift")) doshift = 1;
    else if (!strcmp(a, "noshift")) doshift = 0;
    else if (!strcmp(a, "window")) window = 1;
    else if (!strcmp(a, "nowindow")) window = 0;
    else if (!strcmp(a, "barrier")) barrier = 1;
    else if (!strcmp(a, "nobarrier")) barrier = 0;
    else if (!strcmp(a, "skew")) skew = 1;
    else if (!strcmp(a, "sync")) syncit = 1;
    else if (!strcmp(a, "offset")) offset = 1;
    else if (!strcmp(a, "abi10")) abi = 10;
    else if (!strcmp(a, "dumps")) dumps = 1;
    else {
      fprintf(stderr, "usage: %s [NP] [shift|noshift] [window|nowindow] [nobarrier|barrier] [skew] [sync] [offset] [abi10] [dumps]\n", argv[0]);
      return 1;
    }
  }
  if (np < 2 || np > MAXNP) {
    fprintf(stderr, "NP must be 2..%d\n", MAXNP);
    return 1;
  }
  int v;
  CK(ncclGetVersion(&v)); /* no CUDA call before fork: the children own the GPUs */
  a2av = dlsym(RTLD_DEFAULT, "ncclAlltoAllv");
  printf("NCCL %d, ncclAlltoAllv %s (%d-argument form), %d processes, %s, %s, %s%s%s%s\n", v, a2av ? "found" : "MISSING",
         abi, np, doshift ? "shift" : "noshift", window ? "window" : "nowindow", barrier ? "barrier" : "nobarrier",
         skew ? ", skew" : "", syncit ? ", sync" : "", offset ? ", offset" : "");
  fflush(stdout);
  if (!a2av) return 2;
  sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  memset(sh, 0, sizeof *sh);
  pthread_barrierattr_t ba;
  pthread_barrierattr_init(&ba);
  pthread_barrierattr_setpshared(&ba, PTHREAD_PROCESS_SHARED);
  pthread_barrier_init(&sh->bar, &ba, np);
  pid_t pids[MAXNP];
  for (int r = 0; r < np; r++) {
    if ((pids[r] = fork()) == 0) {
      rank = r;
      alarm(600); /* a dead peer leaves the others in a barrier */
      if (!dumps && !freopen("/dev/null", "w", stdout)) return 1;
      exit(child());
    }
  }
  int failed = 0, refused = 0;
  for (int left = np; left > 0; left--) {
    int st;
    pid_t p = wait(&st);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (code == 3) refused++;
    else if (code != 0 && !failed) {
      failed = 1;
      fprintf(stderr, "process %d exited %d; stopping the others\n", (int)p, code);
      for (int r = 0; r < np; r++)
        if (pids[r] != p) kill(pids[r], SIGKILL);
    }
  }
  if (!window && refused == np) {
    printf("REFUSED: ncclAlltoAllv wants buffers in symmetric windows\n");
    return 0;
  }
  if (failed || refused) return 1;
  printf("%12s %10s %10s %12s %10s  %s\n", "size(B)", "count", "time(us)", "#wrong", "of:0xa5", "wrong blocks recv<-src:bytes");
  long all = 0;
  int si = 0;
  for (size_t size = MINB; size <= MAXB && si < NSIZES; size *= FACTOR, si++) {
    if (sh->count[si] == 0) {
      printf("%12zu %10s  (count 0 per rank: skipped, as nccl-bench does)\n", size, "0");
      continue;
    }
    long w = 0;
    double us = 0;
    char blocks[1024] = "";
    for (int r = 0; r < np; r++) {
      us += sh->us[si][r] / np;
      for (int p = 0; p < np; p++) {
        w += sh->wrong[si][r][p];
        size_t len = strlen(blocks);
        if (sh->wrong[si][r][p] && len < sizeof blocks - 32)
          snprintf(blocks + len, sizeof blocks - len, " %d<-%d:%ld", r, p, sh->wrong[si][r][p]);
      }
    }
    all += w;
    printf("%12ld %10ld %10.1f %12ld %10ld %s\n", sh->count[si] * np, sh->count[si], us, w, sh->a5[si], blocks);
  }
  printf("%s\n", all ? "FAILED" : "OK");
  return all ? 1 : 0;
}
