// A stand-in for a non-blocking NCCL launch, for launch-analog.go: nb_launch
// starts a thread that works for 40 µs and then publishes success, as NCCL's
// group job thread does; nb_poll reads the result and, the first time it
// reads success, joins the thread, as ncclCommGetAsyncError does.
//
//   gcc -O2 -shared -fPIC -o /tmp/libnb.so launch-analog.c -lpthread
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

static pthread_t th;
static _Atomic int result;
static int joined;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void* job(void* a) {
  (void)a;
  double t = now();
  while (now() - t < 40) {
  }
  atomic_store(&result, 0);
  return 0;
}

int nb_launch(void) {
  atomic_store(&result, 7); // ncclInProgress
  joined = 0;
  pthread_create(&th, 0, job, 0);
  return 7;
}

int nb_poll(int* r) {
  *r = atomic_load(&result);
  if (*r == 0 && !joined) {
    pthread_join(th, 0);
    joined = 1;
  }
  return 0;
}

// nb_wait polls as C's reference does (a kernel yield every 16th poll, as
// gonccl's wait).
void nb_wait(void) {
  int r, k = 0;
  do {
    if (++k % 16 == 0) sched_yield();
    nb_poll(&r);
  } while (r == 7);
}

// nb_loop is n launches, each waited out in C: µs per launch.
double nb_loop(int n) {
  double t0 = now();
  for (int i = 0; i < n; i++) {
    nb_launch();
    nb_wait();
  }
  return (now() - t0) / n;
}
