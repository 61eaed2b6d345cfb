#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
static __thread long tlsv;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static volatile long sink;
// each returns ns per iteration
double w_malloc(long n) { double t0 = now(); for (long i = 0; i < n; i++) { size_t sz = 64 + (i * 2654435761u) % 8192; void *p = malloc(sz); ((char*)p)[0] = 1; void *q = malloc(sz / 2 + 16); ((char*)q)[0] = 1; sink += (long)p ^ (long)q; free(p); free(q); } return (now() - t0) / n; }
double w_mallocbig(long n) { double t0 = now(); for (long i = 0; i < n; i++) { void *p = malloc(200000); memset(p, 1, 4096); sink += ((volatile char*)p)[100]; free(p); } return (now() - t0) / n; }
static char src[163840], dst[163840];
double w_memcpy(long n) { double t0 = now(); for (long i = 0; i < n; i++) { memcpy(dst, src, sizeof src); sink += dst[i % sizeof dst]; } return (now() - t0) / n; }
double w_mutex(long n) { double t0 = now(); for (long i = 0; i < n; i++) { pthread_mutex_lock(&mu); sink++; pthread_mutex_unlock(&mu); } return (now() - t0) / n; }
double w_tls(long n) { double t0 = now(); for (long i = 0; i < n; i++) { tlsv += i; __asm__ volatile("" ::: "memory"); } sink = tlsv; return (now() - t0) / n; }
double w_clock(long n) { double t0 = now(); for (long i = 0; i < n; i++) { sink += (long)now(); } return (now() - t0) / n; }
double w_compute(long n) { double t0 = now(); uint64_t x = 1; for (long i = 0; i < n * 100; i++) { x = x * 6364136223846793005ull + 1442695040888963407ull; x ^= x >> 13; } sink = x; return (now() - t0) / n; }
double w_yield(long n) { double t0 = now(); for (long i = 0; i < n; i++) sched_yield(); return (now() - t0) / n; }
// run all on a pthread created here (as NCCL's own threads)
struct job { double (*f)(long); long n; double r; };
static void *runner(void *a) { struct job *j = a; j->r = j->f(j->n); return 0; }
double on_pthread(double (*f)(long), long n) { struct job j = {f, n, 0}; pthread_t t; pthread_create(&t, 0, runner, &j); pthread_join(t, 0); return j.r; }
