// The timed graph launches of nccl-bench-gl (GL_CLOOP) in C: every local GPU's graph launched in turn, rounds times;
// out[k] the µs from entry to the end of launch k. Returns the first CUDA error, or 0.
#include <stdint.h>
#include <time.h>
typedef int (*launch_t)(uintptr_t, uintptr_t);
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
int gl_loop(launch_t f, const uintptr_t *execs, const uintptr_t *streams, long n, long rounds, double *out) {
  double t0 = now();
  long k = 0;
  for (long r = 0; r < rounds; r++)
    for (long i = 0; i < n; i++) {
      int e = f(execs[i], streams[i]);
      if (e) return e;
      out[k++] = now() - t0;
    }
  return 0;
}
