// nbtrace: times the threads NCCL starts, in any process, by LD_PRELOAD. A
// non-blocking communicator's every launch runs on a thread NCCL starts
// (group.cc: pthread_create in ncclGroupEndInternal, pthread_join when
// ncclCommGetAsyncError first reads ncclSuccess), so a launch splits into:
//
//   create  the caller's pthread_create call
//   start   from that call to the thread's first instruction of NCCL's code
//   run     NCCL's work on the thread (the launch itself)
//   seen    from the thread's end to the caller's pthread_join call: how late
//           the caller's polls saw it done
//   join    the pthread_join call
//   cycle   from pthread_create's call to pthread_join's return
//
// It times the threads whose start routine lies in a file whose name holds
// NBTRACE_LIB (default "libnccl"), so that the Go runtime's own threads are
// left out. Every NBTRACE_BATCH (default 2000) threads joined, and at exit
// where the process runs C's exit handlers (a Go program does not), it prints
// the median and the 10th and 90th percentiles of each part, in µs, over the
// threads joined since the last line. It runs in the C reference and the Go
// program alike, to find which part of a launch differs between them
// (scripts/bench-nonblocking.sh, NBTRACE=1):
//
//   gcc -O2 -shared -fPIC -o /tmp/nbtrace.so scripts/nbtrace.c -ldl -lpthread
//   mpirun -np 4 -x LD_PRELOAD=/tmp/nbtrace.so ./nonblocking-go -n 2400
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAXREC (1 << 16)

struct rec {
  void* (*fn)(void*);
  void* arg;
  pthread_t th;
  _Atomic int state; // 0 free, 1 created, 2 joined
  double call, ret, begin, end, joincall, joinret;
};

static struct rec recs[MAXREC];
static _Atomic int nrec;
static int (*real_create)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
static int (*real_join)(pthread_t, void**);
static const char* want;
static int batch;
static int joined, reported; // under mu
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static void summarize(void);

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void resolve(void) {
  if (!real_create) {
    real_create = dlsym(RTLD_NEXT, "pthread_create");
    real_join = dlsym(RTLD_NEXT, "pthread_join");
    want = getenv("NBTRACE_LIB");
    if (!want || !*want) want = "libnccl";
    const char* b = getenv("NBTRACE_BATCH");
    batch = b && atoi(b) > 0 ? atoi(b) : 2000;
  }
}

static void* trampoline(void* p) {
  struct rec* r = p;
  r->begin = now();
  void* v = r->fn(r->arg);
  r->end = now();
  return v;
}

int pthread_create(pthread_t* th, const pthread_attr_t* attr, void* (*fn)(void*), void* arg) {
  resolve();
  Dl_info info;
  if (!dladdr((void*)fn, &info) || !info.dli_fname || !strstr(info.dli_fname, want)) return real_create(th, attr, fn, arg);
  int i = atomic_fetch_add(&nrec, 1);
  if (i >= MAXREC) return real_create(th, attr, fn, arg);
  struct rec* r = &recs[i];
  r->fn = fn;
  r->arg = arg;
  r->call = now();
  int e = real_create(th, attr, trampoline, r);
  r->ret = now();
  if (e == 0) {
    r->th = *th;
    atomic_store(&r->state, 1);
  }
  return e;
}

int pthread_join(pthread_t th, void** v) {
  resolve();
  int n = atomic_load(&nrec);
  if (n > MAXREC) n = MAXREC;
  struct rec* r = NULL;
  for (int i = n - 1; i >= 0 && i >= n - 256; i--) {
    if (atomic_load(&recs[i].state) == 1 && pthread_equal(recs[i].th, th)) {
      r = &recs[i];
      break;
    }
  }
  double t = now();
  int e = real_join(th, v);
  if (r) {
    r->joincall = t;
    r->joinret = now();
    atomic_store(&r->state, 2);
    pthread_mutex_lock(&mu);
    if (++joined % batch == 0) summarize();
    pthread_mutex_unlock(&mu);
  }
  return e;
}

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static void report(const char* name, double* v, int n) {
  qsort(v, n, sizeof *v, cmp);
  fprintf(stderr, " %s %.1f (%.1f-%.1f)", name, v[n / 2], v[n / 10], v[n * 9 / 10]);
}

// summarize prints the line for the threads joined since the last one; the
// caller holds mu.
static void summarize(void) {
  int n = atomic_load(&nrec);
  if (n > MAXREC) n = MAXREC;
  double* v[6];
  for (int k = 0; k < 6; k++) v[k] = malloc(sizeof(double) * (n + 1));
  int m = 0;
  for (int i = reported; i < n; i++) {
    struct rec* r = &recs[i];
    if (atomic_load(&r->state) != 2) continue;
    v[0][m] = r->ret - r->call;
    v[1][m] = r->begin - r->call;
    v[2][m] = r->end - r->begin;
    v[3][m] = r->joincall - r->end;
    v[4][m] = r->joinret - r->joincall;
    v[5][m] = r->joinret - r->call;
    atomic_store(&r->state, 3); // reported
    m++;
  }
  // The next line starts at the first thread not reported yet: one still
  // running (another communicator's) is reported once joined.
  while (reported < n && atomic_load(&recs[reported].state) == 3) reported++;
  fprintf(stderr, "nbtrace pid %d: %d threads of %s joined (of %d started); µs, median (p10-p90):", (int)getpid(), m,
          want ? want : "libnccl", n);
  if (m > 0) {
    report("create", v[0], m);
    report("start", v[1], m);
    report("run", v[2], m);
    report("seen", v[3], m);
    report("join", v[4], m);
    report("cycle", v[5], m);
  }
  fprintf(stderr, "\n");
  for (int k = 0; k < 6; k++) free(v[k]);
}

__attribute__((destructor)) static void atexit_summary(void) {
  pthread_mutex_lock(&mu);
  summarize();
  pthread_mutex_unlock(&mu);
}
