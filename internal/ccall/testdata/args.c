/* Functions with known results, to check that every argument slot arrives where the
 * C calling convention puts it. */
#include <stdint.h>
#include <string.h>

int noop(void) { return 0; }

/* Weighted sum of 24 arguments: a wrong slot or order changes the result. */
uint64_t weigh24(uint64_t a1, uint64_t a2, uint64_t a3, uint64_t a4, uint64_t a5, uint64_t a6,
                 uint64_t a7, uint64_t a8, uint64_t a9, uint64_t a10, uint64_t a11, uint64_t a12,
                 uint64_t a13, uint64_t a14, uint64_t a15, uint64_t a16, uint64_t a17, uint64_t a18,
                 uint64_t a19, uint64_t a20, uint64_t a21, uint64_t a22, uint64_t a23, uint64_t a24) {
    uint64_t a[24] = {a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12,
                      a13, a14, a15, a16, a17, a18, a19, a20, a21, a22, a23, a24};
    uint64_t s = 0;
    for (int i = 0; i < 24; i++) s = s * 1000003u + a[i];
    return s;
}

/* Weighted sum of the first n of 23 arguments, for calls of every length:
 * the slots after a_n are not read (a shorter call leaves them unset). */
uint64_t weighn(uint64_t n, uint64_t a1, uint64_t a2, uint64_t a3, uint64_t a4, uint64_t a5,
                uint64_t a6, uint64_t a7, uint64_t a8, uint64_t a9, uint64_t a10, uint64_t a11,
                uint64_t a12, uint64_t a13, uint64_t a14, uint64_t a15, uint64_t a16, uint64_t a17,
                uint64_t a18, uint64_t a19, uint64_t a20, uint64_t a21, uint64_t a22, uint64_t a23) {
    uint64_t a[23] = {a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12,
                      a13, a14, a15, a16, a17, a18, a19, a20, a21, a22, a23};
    uint64_t s = n;
    for (uint64_t i = 0; i < n && i < 23; i++) s = s * 1000003u + a[i];
    return s;
}

/* A 128-byte struct by value between two scalars, as ncclCommInitRank takes its id. */
typedef struct { char internal[128]; } id128;
int byvalue(int before, id128 id, int after, uint64_t* out) {
    uint64_t s = 0;
    for (int i = 0; i < 128; i++) s = s * 131u + (unsigned char)id.internal[i];
    *out = s;
    return before * 1000 + after;
}

/* Writes through a pointer into caller memory. */
int32_t store(int32_t* p, int32_t v) { *p = v; return -v; }

/* Calls in a batch: logged appends its id to a log and returns ret; weigh11
 * logs the weighted sum of its 11 arguments (every slot a batch entry fills)
 * and returns 0; take_log empties the log into out. */
static uint64_t calls[64];
static int ncalls;
int logged(int64_t id, int ret) {
    if (ncalls < 64) calls[ncalls++] = (uint64_t)id;
    return ret;
}
int weigh11(uint64_t a1, uint64_t a2, uint64_t a3, uint64_t a4, uint64_t a5, uint64_t a6,
            uint64_t a7, uint64_t a8, uint64_t a9, uint64_t a10, uint64_t a11) {
    uint64_t a[11] = {a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11};
    uint64_t s = 0;
    for (int i = 0; i < 11; i++) s = s * 1000003u + a[i];
    if (ncalls < 64) calls[ncalls++] = s;
    return 0;
}
int take_log(uint64_t* out) {
    int n = ncalls;
    memcpy(out, calls, n * sizeof calls[0]);
    ncalls = 0;
    return n;
}

/* A CUDA runtime's current device, per thread, for CallOn: dev_get is
 * cudaGetDevice (0 on a thread that never chose one), dev_set cudaSetDevice
 * (refuses 99 with 101 and counts its calls; dev_gets counts dev_get's),
 * dev_fail_get makes dev_get fail with the given code, dev_here is a call
 * that returns the thread's device, dev_clear takes the thread back to no
 * device. */
static __thread int cur_dev;
static int get_fails, sets, gets;
int dev_get(int* d) {
    __atomic_add_fetch(&gets, 1, __ATOMIC_SEQ_CST);
    if (get_fails) return get_fails;
    *d = cur_dev;
    return 0;
}
int dev_set(int d) {
    if (d == 99) return 101;
    __atomic_add_fetch(&sets, 1, __ATOMIC_SEQ_CST);
    cur_dev = d;
    return 0;
}
void dev_fail_get(int code) { get_fails = code; }
int dev_sets(void) { return __atomic_load_n(&sets, __ATOMIC_SEQ_CST); }
int dev_gets(void) { return __atomic_load_n(&gets, __ATOMIC_SEQ_CST); }
int dev_here(void) { return cur_dev; }
void dev_clear(void) { cur_dev = 0; }

