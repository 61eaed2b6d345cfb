// The loops of envlib.c from a C program's main thread, then from a pthread it starts
// (docs/perf/cpu-2026-11-27/README.md). With an argument, a thread runs before each loop.
#include <dlfcn.h>
#include <stdio.h>
typedef double (*wf)(long);
int main(int argc, char **argv) {
  void *h = dlopen("./libenv.so", RTLD_NOW);
  const char *names[] = {"w_malloc", "w_mallocbig", "w_memcpy", "w_mutex", "w_tls", "w_clock", "w_compute", "w_yield"};
  long ns[] = {2000000, 200000, 20000, 5000000, 20000000, 2000000, 100000, 500000};
  double (*onp)(wf, long) = dlsym(h, "on_pthread");
  for (int k = 0; k < 8; k++) {
    wf f = dlsym(h, names[k]);
    if (argc > 1) onp(f, 10); // "after": a thread started first, so glibc leaves its single-thread fast paths
    f(ns[k] / 10);
    double a = f(ns[k]), b = onp(f, ns[k]);
    printf("%s %s main %.2f pthread %.2f\n", argc > 1 ? "C-after-a-thread" : "C", names[k], a, b);
  }
}
