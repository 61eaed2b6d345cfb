/* A fake NCCL for gonccl's tests, over the fake CUDA runtime (fakecudart.c).
 *
 * It behaves like NCCL where a binding can go wrong: the unique id travels by
 * value and is checked byte for byte; ncclCommInitRank blocks until every rank
 * has joined; operations are checked with NCCL's result codes and last-error
 * text, then run later on the stream's worker thread, meeting the other ranks'
 * workers; group depth and pending operations belong to the calling thread;
 * results are exact for every data type and reduction.
 *
 * Variants: the default is NCCL 2.28.3; -DFAKENCCL_OLD is 2.14.3 (no Split,
 * Register, MemAlloc, windows, AlltoAll/Gather/Scatter, InitRankScalable, fp8);
 * -DFAKENCCL_VCCL=11 or =10 is VCCL 2.29.2 with ncclAlltoAllv in that ABI;
 * -DFAKENCCL_BROKEN lacks ncclCommInitRank; -DFAKENCCL_VERSION_CODE=N reports N.
 * Registering a symmetric window is collective, as in NCCL: every rank of the
 * communicator must call it, and each call waits for the others.
 * FAKENCCL_NULL_WINDOW=1 makes ncclCommWindowRegister succeed with no window. */
#define _GNU_SOURCE
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

#if defined(FAKENCCL_OLD)
#define VERSION_CODE 21403
#define HAS_228 0
#define NUM_TYPES 10
#elif defined(FAKENCCL_VCCL)
#define VERSION_CODE 22902
#define HAS_228 1
#define NUM_TYPES 12
#else
#define VERSION_CODE 22803
#define HAS_228 1
#define NUM_TYPES 12
#endif
#ifdef FAKENCCL_VERSION_CODE
#undef VERSION_CODE
#define VERSION_CODE FAKENCCL_VERSION_CODE
#endif

typedef enum { ncclSuccess, ncclUnhandledCudaError, ncclSystemError, ncclInternalError, ncclInvalidArgument,
               ncclInvalidUsage, ncclRemoteError, ncclInProgress } ncclResult_t;
enum { tInt8, tUint8, tInt32, tUint32, tInt64, tUint64, tFloat16, tFloat32, tFloat64, tBfloat16, tE4M3, tE5M2 };
enum { opSum, opProd, opMax, opMin, opAvg, opPreMul };
typedef struct { char internal[128]; } ncclUniqueId;

/* From the fake CUDA runtime. */
int fakecuda_ptr_device(const void* p, size_t len);
int fakecuda_stream_enqueue(void* stream, int dev, void (*fn)(void*), void* arg);
int fakecuda_current_device(void);
int cudaMalloc(void** p, size_t n);
int cudaFree(void* p);

/* ---- errors: NCCL keeps one last-error buffer for the whole process ---- */

static pthread_mutex_t errmu = PTHREAD_MUTEX_INITIALIZER;
static char last_error[1024];

static ncclResult_t fail(ncclResult_t r, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&errmu);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    pthread_mutex_unlock(&errmu);
    va_end(ap);
    return r;
}

API const char* ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    }
    return "unknown result code";
}

API const char* ncclGetLastError(void* comm) { return last_error; }

API ncclResult_t ncclGetVersion(int* v) {
    if (!v) return fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
    *v = VERSION_CODE;
    return ncclSuccess;
}

/* ---- unique ids ---- */

static uint64_t xorshift(uint64_t* s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void fill_id(ncclUniqueId* id, uint64_t key) {
    memcpy(id->internal, "FKID", 4);
    memcpy(id->internal + 4, &key, 8);
    uint64_t s = key | 1;
    for (int i = 12; i < 128; i++) id->internal[i] = (char)xorshift(&s);
}

/* check_id returns the key, or -1 after setting the error for a mangled id. */
static int check_id(const ncclUniqueId* id, const char* fn, uint64_t* key) {
    ncclUniqueId want;
    memcpy(key, id->internal + 4, 8);
    fill_id(&want, *key);
    for (int i = 0; i < 128; i++)
        if (id->internal[i] != want.internal[i]) {
            fail(ncclInvalidArgument, "%s: corrupt unique id (byte %d)", fn, i);
            return -1;
        }
    return 0;
}

static pthread_mutex_t g = PTHREAD_MUTEX_INITIALIZER; /* cliques, comms, groups */
static pthread_cond_t gc = PTHREAD_COND_INITIALIZER;
static uint64_t next_key = 0x9e3779b97f4a7c15ull;

API ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    if (!id) return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
    uint64_t key;
    const char* addr = getenv("NCCL_COMM_ID");
    if (addr && *addr) { /* the same id on every rank, from the address */
        key = 1469598103934665603ull;
        for (const char* p = addr; *p; p++) key = (key ^ (unsigned char)*p) * 1099511628211ull;
    } else {
        pthread_mutex_lock(&g);
        key = xorshift(&next_key);
        pthread_mutex_unlock(&g);
    }
    fill_id(id, key);
    return ncclSuccess;
}

/* ---- cliques and communicators ---- */

#define SLOTS 64
#define MAXR 64

typedef struct slot { /* one collective's meeting place */
    long seq;
    int busy, arrived, computed, left;
    struct task* task[MAXR];
} slot;

typedef struct msg { /* a posted send */
    int src, dst;
    long seq;
    const void* buf;
    size_t bytes;
    int taken;
    struct msg* next;
} msg;

typedef struct clique {
    uint64_t key;
    int nranks, joined;
    struct comm* comm[MAXR];
    slot slots[SLOTS];
    msg* mail;
    /* ncclCommSplit rendezvous */
    long split_seq;
    int split_arrived, split_left;
    int color[MAXR], skey[MAXR];
    uint64_t split_base;
    /* symmetric window registration rendezvous */
    long win_seq;
    int win_arrived, win_left;
    struct clique* next;
} clique;
static clique* cliques;

#define COMM_MAGIC 0x434f4d4du
#define DEAD_MAGIC 0xdeaddeadu
typedef struct window {
    char* base;
    size_t size;
    int flags;
    struct window* next;
} window;
typedef struct comm {
    unsigned magic;
    clique* c;
    int rank, nranks, dev;
    int ready;      /* joined its clique */
    ncclResult_t async;
    long coll_seq, split_seq, win_seq;
    long send_seq[MAXR], recv_seq[MAXR];
    int pending;    /* work items not yet run */
    int aborted;    /* ncclCommAbort was called: waits on peers give up, as NCCL's abort flag makes them */
    int blocking;
    int cfg[32];    /* config ints by field index; INT_MIN when undefined */
    char* name;
    char* netname;
    /* PreMulSum ops: slot i is op 5+i */
    int premul_used[32];
    int premul_type[32];
    int premul_res[32];
    double premul_f[32];
    int64_t premul_i[32];
    const void* premul_ptr[32];
    window* windows;
    struct comm* next_all;
} comm;
static comm* all_comms; /* every comm ever made, live or dead */

/* live checks a comm argument: NULL and unknown pointers are argument errors;
 * a destroyed communicator is a use-after-free that real NCCL would not survive,
 * so the fake stops the process loudly. */
static ncclResult_t live(comm* c, const char* fn) {
    if (!c) return fail(ncclInvalidArgument, "%s: comm argument is NULL", fn);
    pthread_mutex_lock(&g);
    comm* k = all_comms;
    while (k && k != c) k = k->next_all;
    pthread_mutex_unlock(&g);
    if (!k) return fail(ncclInvalidArgument, "%s: invalid comm %p", fn, (void*)c);
    if (c->magic == DEAD_MAGIC) {
        fprintf(stderr, "fakenccl: %s: use of destroyed communicator %p\n", fn, (void*)c);
        abort();
    }
    if (!c->ready) return fail(ncclInvalidUsage, "%s: communicator is still initializing", fn);
    return ncclSuccess;
}

/* ---- groups: depth, pending tasks, the first failure and deferred inits belong to the calling thread ---- */

static __thread int group_depth;
static __thread struct task* group_head;
static __thread struct task** group_tail; /* NULL means &group_head */
static __thread ncclResult_t group_error; /* a call inside the group failed: ncclGroupEnd launches nothing */
static __thread comm* group_inits[MAXR];  /* communicators whose init the group deferred */
static __thread int group_ninits;

/* group_err records a failure inside a group, as NCCL's ncclGroupErrCheck does. */
static ncclResult_t group_err(ncclResult_t r) {
    if (group_depth > 0 && r != ncclSuccess && r != ncclInProgress) group_error = r;
    return r;
}

/* A test-set delay inside every operation call, so that a call still inside
 * the library when another thread frees its communicator is caught (below). */
static long call_delay_us;
API void fakenccl_set_call_delay_us(long us) { __atomic_store_n(&call_delay_us, us, __ATOMIC_RELAXED); }

/* inside_call ends an operation call: after the delay, a communicator freed
 * meanwhile is the use-after-free real NCCL would not survive. */
static void inside_call(comm* c, const char* fn) {
    long us = __atomic_load_n(&call_delay_us, __ATOMIC_RELAXED);
    if (us > 0) usleep(us);
    if (c && c->magic == DEAD_MAGIC) {
        fprintf(stderr, "fakenccl: %s: communicator %p freed while the call was inside the library\n", fn, (void*)c);
        abort();
    }
}

static const char* cfg_names[] = {"blocking", "cgaClusterSize", "minCTAs", "maxCTAs", "splitShare", "trafficClass",
                                  "collnetEnable", "CTAPolicy", "shrinkShare", "nvlsCTAs", "nChannelsPerNetPeer",
                                  "nvlinkCentricSched", NULL};
static const int cfg_offsets[] = {16, 20, 24, 28, 40, 44, 56, 60, 64, 68, 72, 76};

static comm* new_comm(int dev) {
    comm* c = calloc(1, sizeof *c);
    c->magic = COMM_MAGIC;
    c->dev = dev;
    c->blocking = 1;
    for (int i = 0; i < 32; i++) c->cfg[i] = INT_MIN;
    pthread_mutex_lock(&g);
    c->next_all = all_comms;
    all_comms = c;
    pthread_mutex_unlock(&g);
    return c;
}

/* read_config copies a ncclConfig_t as the library of this version would. */
static ncclResult_t read_config(comm* c, const void* cfg, const char* fn) {
    if (!cfg) return ncclSuccess;
    const char* p = cfg;
    size_t size;
    unsigned magic, version;
    memcpy(&size, p, 8);
    memcpy(&magic, p + 8, 4);
    memcpy(&version, p + 12, 4);
    if (magic != 0xcafebeef) return fail(ncclInvalidArgument, "%s: config has wrong magic %#x", fn, magic);
#ifdef FAKENCCL_OLD
    size_t mine = 24; /* 2.14 reads blocking only */
    int nfields = 1;
#else
    size_t mine = 80;
    int nfields = 12;
#endif
    if (size < 24) return fail(ncclInvalidArgument, "%s: config size %zu too small", fn, size);
    size_t n = size < mine ? size : mine;
    for (int i = 0; i < nfields; i++) {
        if ((size_t)cfg_offsets[i] + 4 > n) break;
        memcpy(&c->cfg[i], p + cfg_offsets[i], 4);
    }
#ifndef FAKENCCL_OLD
    char* s;
    if (n >= 40 && (memcpy(&s, p + 32, 8), s)) c->netname = strdup(s);
    if (n >= 56 && (memcpy(&s, p + 48, 8), s)) c->name = strdup(s);
#endif
    if (c->cfg[0] != INT_MIN && c->cfg[0] != 0 && c->cfg[0] != 1)
        return fail(ncclInvalidArgument, "%s: blocking must be 0 or 1, not %d", fn, c->cfg[0]);
    c->blocking = c->cfg[0] != 0;
    return ncclSuccess;
}

API int fakenccl_config_int(comm* c, const char* field, int* out) {
    for (int i = 0; cfg_names[i]; i++)
        if (c && strcmp(cfg_names[i], field) == 0) {
            *out = c->cfg[i];
            return 0;
        }
    return 4;
}

API const char* fakenccl_comm_name(comm* c) { return c ? c->name : NULL; }

API int fakenccl_live_comms(void) {
    int n = 0;
    pthread_mutex_lock(&g);
    for (comm* c = all_comms; c; c = c->next_all) n += c->magic == COMM_MAGIC;
    pthread_mutex_unlock(&g);
    return n;
}

/* join adds c as rank of the clique of key and waits for the others. */
static ncclResult_t join(comm* c, uint64_t key, int nranks, int rank, const char* fn) {
    pthread_mutex_lock(&g);
    clique* q = cliques;
    while (q && q->key != key) q = q->next;
    if (!q) {
        q = calloc(1, sizeof *q);
        q->key = key;
        q->nranks = nranks;
        q->next = cliques;
        cliques = q;
    }
    if (q->nranks != nranks) {
        pthread_mutex_unlock(&g);
        return fail(ncclInvalidUsage, "%s: nranks %d differs from %d given by other ranks", fn, nranks, q->nranks);
    }
    if (q->comm[rank]) {
        pthread_mutex_unlock(&g);
        return fail(ncclInvalidUsage, "%s: rank %d joined twice", fn, rank);
    }
    q->comm[rank] = c;
    c->c = q;
    c->rank = rank;
    c->nranks = nranks;
    q->joined++;
    pthread_cond_broadcast(&gc);
    while (q->joined < nranks && !c->aborted) pthread_cond_wait(&gc, &g);
    if (c->aborted) { /* ncclCommAbort during a non-blocking init: the bootstrap gives up */
        pthread_mutex_unlock(&g);
        return ncclInternalError;
    }
    c->ready = 1;
    if (c->async == ncclInProgress) c->async = ncclSuccess;
    pthread_cond_broadcast(&gc);
    pthread_mutex_unlock(&g);
    return ncclSuccess;
}

typedef struct joiner {
    comm* c;
    uint64_t key;
    int nranks, rank;
} joiner;

static void* join_later(void* p) {
    joiner* j = p;
    join(j->c, j->key, j->nranks, j->rank, "ncclCommInitRankConfig");
    free(j);
    return NULL;
}

static ncclResult_t init_rank(comm** out, int nranks, const ncclUniqueId* id, int rank, const void* cfg, const char* fn) {
    if (!out) return fail(ncclInvalidArgument, "%s: comm is NULL", fn);
    if (nranks < 1 || nranks > MAXR) return fail(ncclInvalidArgument, "%s: invalid nranks %d", fn, nranks);
    if (rank < 0 || rank >= nranks) return fail(ncclInvalidArgument, "%s: rank %d out of range [0, %d)", fn, rank, nranks);
    uint64_t key;
    if (check_id(id, fn, &key)) return ncclInvalidArgument;
    comm* c = new_comm(fakecuda_current_device());
    ncclResult_t r = read_config(c, cfg, fn);
    if (r) return r;
    *out = c;
    if (!c->blocking || group_depth > 0) { /* in a group NCCL defers the init to ncclGroupEnd */
        c->async = ncclInProgress;
        if (group_depth > 0) {
            if (group_ninits == MAXR) return group_err(fail(ncclInternalError, "%s: too many inits in one group", fn));
            group_inits[group_ninits++] = c;
        }
        joiner* j = malloc(sizeof *j);
        *j = (joiner){c, key, nranks, rank};
        pthread_t th;
        pthread_create(&th, NULL, join_later, j);
        pthread_detach(th);
        return c->blocking ? ncclSuccess : ncclInProgress;
    }
    return join(c, key, nranks, rank, fn);
}

#ifndef FAKENCCL_BROKEN
API ncclResult_t ncclCommInitRank(comm** out, int nranks, ncclUniqueId id, int rank) {
    return init_rank(out, nranks, &id, rank, NULL, "ncclCommInitRank");
}
#endif

API ncclResult_t ncclCommInitRankConfig(comm** out, int nranks, ncclUniqueId id, int rank, const void* cfg) {
    return init_rank(out, nranks, &id, rank, cfg, "ncclCommInitRankConfig");
}

API ncclResult_t ncclCommInitAll(comm** comms, int ndev, const int* devlist) {
    if (!comms) return fail(ncclInvalidArgument, "ncclCommInitAll: comms is NULL");
    if (ndev < 1 || ndev > MAXR) return fail(ncclInvalidArgument, "ncclCommInitAll: invalid ndev %d", ndev);
    pthread_mutex_lock(&g);
    uint64_t key = xorshift(&next_key);
    pthread_mutex_unlock(&g);
    clique* q = calloc(1, sizeof *q);
    q->key = key;
    q->nranks = q->joined = ndev;
    for (int i = 0; i < ndev; i++) {
        comm* c = new_comm(devlist ? devlist[i] : i);
        c->c = q;
        c->rank = i;
        c->nranks = ndev;
        c->ready = 1;
        q->comm[i] = comms[i] = c;
    }
    pthread_mutex_lock(&g);
    q->next = cliques;
    cliques = q;
    pthread_mutex_unlock(&g);
    return ncclSuccess;
}

#if HAS_228
API ncclResult_t ncclCommInitRankScalable(comm** out, int nranks, int rank, int nId, ncclUniqueId* ids, const void* cfg) {
    if (nId < 1 || !ids) return fail(ncclInvalidArgument, "ncclCommInitRankScalable: %d ids", nId);
    return init_rank(out, nranks, &ids[0], rank, cfg, "ncclCommInitRankScalable");
}

/* split_meet is ncclCommSplit's rendezvous over the parent's clique: it
 * returns the new communicator's size, this rank's place in it and its key, or
 * -1 if nc was aborted meanwhile. */
static int split_meet(comm* c, comm* nc, int color, int key, int* me, uint64_t* newkey) {
    clique* q = c->c;
    int n = c->nranks;
    pthread_mutex_lock(&g);
    long seq = c->split_seq++;
    while (q->split_seq != seq && !(nc && nc->aborted)) pthread_cond_wait(&gc, &g); /* an earlier split still in use */
    if (nc && nc->aborted) {
        pthread_mutex_unlock(&g);
        return -1;
    }
    if (q->split_arrived == 0) q->split_base = xorshift(&next_key);
    q->color[c->rank] = color;
    q->skey[c->rank] = key;
    q->split_arrived++;
    pthread_cond_broadcast(&gc);
    while (q->split_arrived < n && !(nc && nc->aborted)) pthread_cond_wait(&gc, &g);
    if (nc && nc->aborted) {
        pthread_mutex_unlock(&g);
        return -1;
    }
    int size = 0;
    *me = 0;
    for (int i = 0; i < n; i++) {
        if (q->color[i] != color) continue;
        size++;
        if (q->skey[i] < key || (q->skey[i] == key && i < c->rank)) (*me)++;
    }
    *newkey = q->split_base ^ ((uint64_t)(unsigned)color * 0x100000001b3ull);
    if (++q->split_left == n) { /* the last one out resets for the next split */
        q->split_arrived = q->split_left = 0;
        q->split_seq++;
        pthread_cond_broadcast(&gc);
    }
    pthread_mutex_unlock(&g);
    return size;
}

typedef struct splitter {
    comm *parent, *nc, **out;
    int color, key;
} splitter;

/* split_later runs a non-blocking split. As NCCL, it writes the new handle
 * only when done, and the parent stays in progress until then. */
static void* split_later(void* p) {
    splitter* sp = p;
    int me;
    uint64_t newkey;
    int size = split_meet(sp->parent, sp->nc, sp->color, sp->key, &me, &newkey);
    ncclResult_t r = size > 0 ? join(sp->nc, newkey, size, me, "ncclCommSplit") : ncclInternalError;
    pthread_mutex_lock(&g);
    if (r == ncclSuccess) *sp->out = sp->nc;
    sp->parent->async = r == ncclSuccess || sp->parent->aborted ? ncclSuccess : r;
    pthread_cond_broadcast(&gc);
    pthread_mutex_unlock(&g);
    free(sp);
    return NULL;
}

API ncclResult_t ncclCommSplit(comm* c, int color, int key, comm** out, const void* cfg) {
    ncclResult_t r = live(c, "ncclCommSplit");
    if (r) return r;
    if (!out) return fail(ncclInvalidArgument, "ncclCommSplit: newcomm is NULL");
    if (color == -1) {
        int me;
        uint64_t newkey;
        split_meet(c, NULL, color, key, &me, &newkey);
        *out = NULL;
        return ncclSuccess;
    }
    comm* nc = new_comm(c->dev);
    if ((r = read_config(nc, cfg, "ncclCommSplit"))) return r;
    if (!nc->blocking) { /* as NCCL: the split runs on; the parent says when it is done */
        *out = NULL;
        nc->async = ncclInProgress;
        pthread_mutex_lock(&g);
        c->async = ncclInProgress;
        pthread_mutex_unlock(&g);
        splitter* sp = malloc(sizeof *sp);
        *sp = (splitter){c, nc, out, color, key};
        pthread_t th;
        pthread_create(&th, NULL, split_later, sp);
        pthread_detach(th);
        return ncclInProgress;
    }
    *out = nc;
    int me;
    uint64_t newkey;
    int size = split_meet(c, NULL, color, key, &me, &newkey);
    return join(nc, newkey, size, me, "ncclCommSplit");
}
#endif

static void wait_idle(comm* c) {
    pthread_mutex_lock(&g);
    while (c->pending) pthread_cond_wait(&gc, &g);
    pthread_mutex_unlock(&g);
}

static void* finalize_later(void* p) {
    comm* c = p;
    wait_idle(c);
    pthread_mutex_lock(&g);
    c->async = ncclSuccess;
    pthread_mutex_unlock(&g);
    return NULL;
}

API ncclResult_t ncclCommFinalize(comm* c) {
    ncclResult_t r = live(c, "ncclCommFinalize");
    if (r) return r;
    if (!c->blocking) {
        c->async = ncclInProgress;
        pthread_t th;
        pthread_create(&th, NULL, finalize_later, c);
        pthread_detach(th);
        return ncclInProgress;
    }
    wait_idle(c);
    return ncclSuccess;
}

static ncclResult_t release(comm* c, const char* fn, int wait) {
    if (!c) return fail(ncclInvalidArgument, "%s: comm is NULL", fn);
    ncclResult_t r = live(c, fn);
    if (r && r != ncclInvalidUsage) return r; /* a comm still initializing may be aborted */
    if (wait) wait_idle(c);
    pthread_mutex_lock(&g);
    if (!wait) c->aborted = 1;
    c->magic = DEAD_MAGIC; /* kept allocated: work in flight may still read it */
    pthread_cond_broadcast(&gc);
    pthread_mutex_unlock(&g);
    return ncclSuccess;
}

API ncclResult_t ncclCommDestroy(comm* c) { return release(c, "ncclCommDestroy", 1); }
API ncclResult_t ncclCommAbort(comm* c) { return release(c, "ncclCommAbort", 0); }

API ncclResult_t ncclCommGetAsyncError(comm* c, ncclResult_t* r) {
    if (!c || !r) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: NULL argument");
    pthread_mutex_lock(&g);
    comm* k = all_comms;
    while (k && k != c) k = k->next_all;
    if (k && c->magic == DEAD_MAGIC) {
        fprintf(stderr, "fakenccl: ncclCommGetAsyncError: use of destroyed communicator %p\n", (void*)c);
        abort();
    }
    if (k) *r = c->async;
    pthread_mutex_unlock(&g);
    return k ? ncclSuccess : fail(ncclInvalidArgument, "ncclCommGetAsyncError: invalid comm");
}

API ncclResult_t ncclCommCount(comm* c, int* n) {
    ncclResult_t r = live(c, "ncclCommCount");
    if (r) return r;
    if (!n) return fail(ncclInvalidArgument, "ncclCommCount: count is NULL");
    *n = c->nranks;
    return ncclSuccess;
}

API ncclResult_t ncclCommCuDevice(comm* c, int* d) {
    ncclResult_t r = live(c, "ncclCommCuDevice");
    if (r) return r;
    if (!d) return fail(ncclInvalidArgument, "ncclCommCuDevice: device is NULL");
    *d = c->dev;
    return ncclSuccess;
}

API ncclResult_t ncclCommUserRank(comm* c, int* rank) {
    ncclResult_t r = live(c, "ncclCommUserRank");
    if (r) return r;
    if (!rank) return fail(ncclInvalidArgument, "ncclCommUserRank: rank is NULL");
    *rank = c->rank;
    return ncclSuccess;
}

/* ---- element types ---- */

static int type_size(int t) {
    static const int s[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
    return s[t];
}

static int is_float(int t) { return t >= tFloat16 && t != tInt64 && t != tUint64; }
static int is_signed(int t) { return t == tInt8 || t == tInt32 || t == tInt64; }

/* A small float format: mbits mantissa bits, exponent bias, how overflow ends. */
typedef struct { int mbits, ebits, bias, saturate, ieee_top; } fmt_t;
static const fmt_t F16 = {10, 5, 15, 0, 1}, BF16 = {7, 8, 127, 0, 1}, E4M3 = {3, 4, 7, 1, 0}, E5M2 = {2, 5, 15, 1, 1};

static double decode_small(unsigned v, fmt_t f) {
    unsigned sign = v >> (f.mbits + f.ebits) & 1, e = v >> f.mbits & ((1u << f.ebits) - 1), m = v & ((1u << f.mbits) - 1);
    unsigned emax = (1u << f.ebits) - 1;
    double x;
    if (f.ieee_top && e == emax) x = m ? NAN : INFINITY;
    else if (!f.ieee_top && e == emax && m == (1u << f.mbits) - 1) x = NAN; /* e4m3 fn: only S.1111.111 */
    else if (e == 0) x = ldexp(m, 1 - f.bias - f.mbits);
    else x = ldexp(m + (1u << f.mbits), (int)e - f.bias - f.mbits);
    return sign ? -x : x;
}

static uint64_t rne(double x) { /* x >= 0, < 2^53 */
    uint64_t i = (uint64_t)x;
    double d = x - (double)i;
    if (d > 0.5 || (d == 0.5 && (i & 1))) i++;
    return i;
}

static unsigned encode_small(double x, fmt_t f) {
    unsigned sign = signbit(x) ? 1u << (f.mbits + f.ebits) : 0;
    unsigned emax = (1u << f.ebits) - 1;
    unsigned maxfinite = f.ieee_top ? ((emax - 1) << f.mbits) | ((1u << f.mbits) - 1) : (emax << f.mbits) | ((1u << f.mbits) - 2);
    if (isnan(x)) return f.ieee_top ? (emax << f.mbits) | ((1u << f.mbits) - 1) : (emax << f.mbits) | ((1u << f.mbits) - 1);
    double a = fabs(x);
    unsigned code;
    if (isinf(a)) code = maxfinite + 1;
    else if (a == 0) code = 0;
    else {
        int e;
        frexp(a, &e);
        int E = e - 1, emin = 1 - f.bias;
        if (E < emin) code = (unsigned)rne(ldexp(a, f.bias - 1 + f.mbits));
        else {
            uint64_t q = rne(ldexp(a, f.mbits - E));
            if (q == 2ull << f.mbits) {
                q >>= 1;
                E++;
            }
            uint64_t c = ((uint64_t)(E + f.bias) << f.mbits) | (q - (1ull << f.mbits));
            code = c > maxfinite + 1 ? maxfinite + 1 : (unsigned)c;
        }
    }
    if (code > maxfinite) code = f.saturate ? maxfinite : (emax << f.mbits); /* saturate, or infinity */
    return sign | code;
}

typedef union {
    double f;
    int64_t i;
    uint64_t u;
} val;

static val load(int t, const void* p, size_t k) {
    val v;
    const char* b = (const char*)p + k * type_size(t);
    switch (t) {
    case tInt8: v.i = *(const int8_t*)b; break;
    case tUint8: v.u = *(const uint8_t*)b; break;
    case tInt32: v.i = *(const int32_t*)b; break;
    case tUint32: v.u = *(const uint32_t*)b; break;
    case tInt64: v.i = *(const int64_t*)b; break;
    case tUint64: v.u = *(const uint64_t*)b; break;
    case tFloat16: v.f = decode_small(*(const uint16_t*)b, F16); break;
    case tBfloat16: v.f = decode_small(*(const uint16_t*)b, BF16); break;
    case tE4M3: v.f = decode_small(*(const uint8_t*)b, E4M3); break;
    case tE5M2: v.f = decode_small(*(const uint8_t*)b, E5M2); break;
    case tFloat32: v.f = *(const float*)b; break;
    default: v.f = *(const double*)b; break;
    }
    return v;
}

static void store(int t, void* p, size_t k, val v) {
    char* b = (char*)p + k * type_size(t);
    switch (t) {
    case tInt8: case tUint8: *(uint8_t*)b = (uint8_t)v.u; break;
    case tInt32: case tUint32: *(uint32_t*)b = (uint32_t)v.u; break;
    case tInt64: case tUint64: *(uint64_t*)b = v.u; break;
    case tFloat16: *(uint16_t*)b = (uint16_t)encode_small(v.f, F16); break;
    case tBfloat16: *(uint16_t*)b = (uint16_t)encode_small(v.f, BF16); break;
    case tE4M3: *(uint8_t*)b = (uint8_t)encode_small(v.f, E4M3); break;
    case tE5M2: *(uint8_t*)b = (uint8_t)encode_small(v.f, E5M2); break;
    case tFloat32: *(float*)b = (float)v.f; break;
    default: *(double*)b = v.f; break;
    }
}

/* sext makes an integer wrapped to the type's width comparable again. */
static val wrap(int t, val v) {
    switch (t) {
    case tInt8: v.i = (int8_t)v.u; break;
    case tUint8: v.u = (uint8_t)v.u; break;
    case tInt32: v.i = (int32_t)v.u; break;
    case tUint32: v.u = (uint32_t)v.u; break;
    }
    return v;
}

/* combine folds b into a: values in rank order, rounded once at the end. */
static val combine(int t, int op, val a, val b) {
    if (is_float(t)) {
        switch (op) {
        case opProd: a.f *= b.f; break;
        case opMax: a.f = a.f >= b.f ? a.f : b.f; break;
        case opMin: a.f = a.f <= b.f ? a.f : b.f; break;
        default: a.f += b.f; break;
        }
        return a;
    }
    switch (op) {
    case opProd: a.u *= b.u; break;
    case opMax: a = is_signed(t) ? (a.i >= b.i ? a : b) : (a.u >= b.u ? a : b); break;
    case opMin: a = is_signed(t) ? (a.i <= b.i ? a : b) : (a.u <= b.u ? a : b); break;
    default: a.u += b.u; break;
    }
    return wrap(t, a);
}

/* ---- operations ---- */

enum { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAlltoAll, kGather, kScatter, kSend, kRecv, kAlltoAllv };

typedef struct task {
    int kind, type, op, root, peer;
    const void* send;
    void* recv;
    size_t count;
    comm* c;
    long seq;
    void* stream;
    /* PreMulSum scalar, resolved at launch */
    int premul_res;
    double scalar_f;
    int64_t scalar_i;
    const void* scalar_ptr;
    size_t* a2av; /* sendcounts, sdispls, recvcounts, rdispls: copied at launch */
    const size_t* a2av_user[4]; /* the caller's arrays, read until the group ends (as VCCL does) */
    unsigned long a2av_sum;     /* their checksum when the call was made */
    struct task* next;
} task;

static val scalar_of(task* t) {
    val s;
    if (t->premul_res == 0) return load(t->type, t->scalar_ptr, 0);
    if (is_float(t->type)) s.f = t->scalar_f;
    else s.i = t->scalar_i;
    return s;
}

/* reduce_elem reduces element k of every rank's send (offset off elements). */
static val reduce_elem(task** all, int n, task* me, size_t k) {
    int t = me->type, op = me->op;
    val acc = {0};
    if (op >= opPreMul) {
        val s = scalar_of(me);
        for (int r = 0; r < n; r++) {
            val x = load(t, all[r]->send, k), p;
            if (is_float(t)) p.f = x.f * s.f;
            else p.u = x.u * s.u;
            acc = r ? combine(t, opSum, acc, p) : wrap(t, p);
        }
        return acc;
    }
    acc = load(t, all[0]->send, k);
    for (int r = 1; r < n; r++) acc = combine(t, op, acc, load(t, all[r]->send, k));
    if (op == opAvg) {
        if (is_float(t)) acc.f /= n;
        else if (is_signed(t)) acc.i /= n;
        else acc.u /= (uint64_t)n;
    }
    return acc;
}

/* compute writes this rank's result into out, reading the peers' inputs. */
static void compute(task** all, int n, task* me, char* out) {
    int t = me->type, sz = type_size(t), r = me->c->rank;
    size_t cnt = me->count;
    switch (me->kind) {
    case kAllReduce:
    case kReduce:
        for (size_t k = 0; k < cnt; k++) store(t, out, k, reduce_elem(all, n, me, k));
        break;
    case kReduceScatter:
        for (size_t k = 0; k < cnt; k++) store(t, out, k, reduce_elem(all, n, me, r * cnt + k));
        break;
    case kBroadcast:
        memcpy(out, all[me->root]->send, cnt * sz);
        break;
    case kAllGather:
    case kGather:
        for (int p = 0; p < n; p++) memcpy(out + p * cnt * sz, all[p]->send, cnt * sz);
        break;
    case kAlltoAll:
        for (int p = 0; p < n; p++) memcpy(out + p * cnt * sz, (const char*)all[p]->send + r * cnt * sz, cnt * sz);
        /* NCCL's ncclAlltoAll is concurrent sends and receives: in place,
         * peers' blocks are overwritten while they are read (seen on H200
         * with 2.28.3). The fake makes that visible: the peers' blocks of an
         * in-place exchange come back as garbage. */
        if ((const char*)me->send < (const char*)me->recv + n * cnt * sz && (const char*)me->recv < (const char*)me->send + n * cnt * sz)
            for (int p = 0; p < n; p++)
                if (p != r) memset(out + p * cnt * sz, 0xA5, cnt * sz);
        break;
    case kScatter:
        memcpy(out, (const char*)all[me->root]->send + r * cnt * sz, cnt * sz);
        break;
    case kAlltoAllv: {
        size_t *sc = me->a2av, *sd = sc + n * n, *rd = sc + 3 * n * n;
        for (int i = 0; i < n; i++)
            memcpy(out + rd[r * n + i] * sz, (const char*)all[i]->send + sd[i * n + r] * sz, sc[i * n + r] * sz);
        break;
    }
    }
}

static size_t out_bytes(task* me) {
    int n = me->c->nranks, sz = type_size(me->type);
    switch (me->kind) {
    case kAllGather: case kGather: case kAlltoAll: return me->count * n * sz;
    case kAlltoAllv: {
        size_t end = 0, *rc = me->a2av + 2 * n * n, *rd = me->a2av + 3 * n * n;
        for (int i = 0; i < n; i++) {
            size_t e = rd[me->c->rank * n + i] + rc[me->c->rank * n + i];
            if (e > end) end = e;
        }
        return end * sz;
    }
    }
    return me->count * sz;
}

/* run_collective meets the other ranks' tasks of the same sequence number,
 * computes into a private buffer once all inputs are there, and writes it out
 * only when every rank has finished reading: in-place forms stay correct. */
static void run_collective(task* me) {
    clique* q = me->c->c;
    int n = me->c->nranks;
    pthread_mutex_lock(&g);
    slot* s = &q->slots[me->seq % SLOTS];
    while (s->busy && s->seq != me->seq && !me->c->aborted) pthread_cond_wait(&gc, &g);
    if (me->c->aborted) {
        pthread_mutex_unlock(&g);
        return;
    }
    if (!s->busy) {
        memset(s, 0, sizeof *s);
        s->busy = 1;
        s->seq = me->seq;
    }
    s->task[me->c->rank] = me;
    s->arrived++;
    pthread_cond_broadcast(&gc);
    while (s->arrived < n && !me->c->aborted) pthread_cond_wait(&gc, &g);
    pthread_mutex_unlock(&g);
    if (me->c->aborted) return; /* the kernel quits on NCCL's abort flag */

    int receives = !((me->kind == kReduce || me->kind == kGather) && me->c->rank != me->root);
    size_t bytes = out_bytes(me);
    char* out = receives ? malloc(bytes ? bytes : 1) : NULL;
    if (out && me->kind == kAlltoAllv) memcpy(out, me->recv, bytes);
    if (out) compute(s->task, n, me, out);

    pthread_mutex_lock(&g);
    s->computed++;
    pthread_cond_broadcast(&gc);
    while (s->computed < n && !me->c->aborted) pthread_cond_wait(&gc, &g);
    pthread_mutex_unlock(&g);
    if (me->c->aborted) {
        free(out);
        return;
    }
    if (out) memcpy(me->recv, out, bytes);
    free(out);
    pthread_mutex_lock(&g);
    if (++s->left == n) s->busy = 0;
    pthread_cond_broadcast(&gc);
    pthread_mutex_unlock(&g);
}

/* run_p2p posts every send of a batch, performs its receives, then waits until
 * its sends were taken: any matched pattern completes, as NCCL groups do. */
static void run_p2p(task* batch) {
    pthread_mutex_lock(&g);
    for (task* t = batch; t; t = t->next) {
        if (t->kind != kSend) continue;
        msg* m = calloc(1, sizeof *m);
        *m = (msg){t->c->rank, t->peer, t->seq, t->send, t->count * type_size(t->type), 0, t->c->c->mail};
        t->c->c->mail = m;
    }
    pthread_cond_broadcast(&gc);
    for (task* t = batch; t; t = t->next) {
        if (t->kind != kRecv) continue;
        clique* q = t->c->c;
        msg* m;
        for (;;) {
            for (m = q->mail; m; m = m->next)
                if (!m->taken && m->src == t->peer && m->dst == t->c->rank && m->seq == t->seq) break;
            if (m || t->c->aborted) break;
            pthread_cond_wait(&gc, &g);
        }
        if (!m) continue; /* aborted */
        size_t want = t->count * type_size(t->type);
        if (m->bytes != want) {
            t->c->async = ncclInvalidUsage;
            fail(ncclInvalidUsage, "ncclRecv: peer %d sent %zu bytes, %zu expected", t->peer, m->bytes, want);
        }
        memcpy(t->recv, m->buf, m->bytes < want ? m->bytes : want);
        m->taken = 1;
        pthread_cond_broadcast(&gc);
    }
    for (task* t = batch; t; t = t->next) {
        if (t->kind != kSend) continue;
        clique* q = t->c->c;
        for (;;) {
            msg** pm = &q->mail;
            while (*pm && !((*pm)->src == t->c->rank && (*pm)->dst == t->peer && (*pm)->seq == t->seq)) pm = &(*pm)->next;
            if (*pm && (*pm)->taken) {
                msg* m = *pm;
                *pm = m->next;
                free(m);
                break;
            }
            if (t->c->aborted) break;
            pthread_cond_wait(&gc, &g);
        }
    }
    pthread_mutex_unlock(&g);
}

/* A work item: one (comm, stream)'s tasks of one group, in order. */
static void run_item(void* p) {
    task* list = p;
    comm* c = list->c;
    task *p2p = NULL, **tail = &p2p;
    for (task* t = list; t;) {
        task* next = t->next;
        if (t->kind == kSend || t->kind == kRecv) {
            t->next = NULL;
            *tail = t;
            tail = &t->next;
        } else {
            run_collective(t);
            free(t->a2av);
            free(t);
        }
        t = next;
    }
    if (p2p) run_p2p(p2p);
    while (p2p) {
        task* next = p2p->next;
        free(p2p);
        p2p = next;
    }
    pthread_mutex_lock(&g);
    c->pending--;
    pthread_cond_broadcast(&gc);
    pthread_mutex_unlock(&g);
}


API ncclResult_t ncclGroupStart(void) {
    group_depth++;
    return ncclSuccess;
}

static unsigned long a2av_checksum(const size_t* const a[4], int n) {
    unsigned long h = 1469598103934665603ul;
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < n * n; i++) h = (h ^ a[k][i]) * 1099511628211ul;
    return h;
}

static void free_tasks(task* list) {
    while (list) {
        task* next = list->next;
        free(list->a2av);
        free(list);
        list = next;
    }
}

/* launch numbers the tasks and hands each (comm, stream) its work item. */
static ncclResult_t launch(task* list) {
    for (task* t = list; t; t = t->next) {
        if (t->kind != kAlltoAllv) continue;
        int n = t->c->nranks;
        if (a2av_checksum(t->a2av_user, n) != t->a2av_sum) {
            free_tasks(list);
            return fail(ncclInvalidUsage, "ncclAlltoAllv : count or displacement arrays changed before the group ended");
        }
        for (int k = 0; k < 4; k++) memcpy(t->a2av + k * n * n, t->a2av_user[k], n * n * sizeof(size_t));
    }
    pthread_mutex_lock(&g);
    for (task* t = list; t; t = t->next) {
        if (t->kind == kSend) t->seq = t->c->send_seq[t->peer]++;
        else if (t->kind == kRecv) t->seq = t->c->recv_seq[t->peer]++;
        else t->seq = t->c->coll_seq++;
    }
    pthread_mutex_unlock(&g);
    while (list) {
        task *item = NULL, **it = &item, **rest = &list;
        comm* c = list->c;
        void* st = list->stream;
        for (task* t = list; t;) {
            task* next = t->next;
            if (t->c == c && t->stream == st) {
                *rest = next;
                t->next = NULL;
                *it = t;
                it = &t->next;
            } else rest = &t->next;
            t = next;
        }
        pthread_mutex_lock(&g);
        c->pending++;
        pthread_mutex_unlock(&g);
        if (fakecuda_stream_enqueue(st, c->dev, run_item, item)) {
            pthread_mutex_lock(&g);
            c->pending--;
            pthread_mutex_unlock(&g);
            return fail(ncclUnhandledCudaError, "invalid stream %p", st);
        }
    }
    return ncclSuccess;
}

API ncclResult_t ncclGroupEnd(void) {
    if (group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd: not in a group");
    if (--group_depth > 0) return ncclSuccess;
    task* list = group_head;
    group_head = NULL;
    group_tail = NULL;
    ncclResult_t err = group_error;
    group_error = ncclSuccess;
    int ninits = group_ninits, nonblocking = 0;
    group_ninits = 0;
    if (err) { /* as NCCL: a failed call inside the group discards all of it */
        free_tasks(list);
        return fail(err, "ncclGroupEnd: a call inside the group failed; nothing was launched");
    }
    for (int i = 0; i < ninits; i++) { /* blocking inits complete within ncclGroupEnd */
        comm* c = group_inits[i];
        if (!c->blocking) {
            nonblocking = 1;
            continue;
        }
        pthread_mutex_lock(&g);
        while (!c->ready && !c->aborted) pthread_cond_wait(&gc, &g);
        pthread_mutex_unlock(&g);
    }
    ncclResult_t r = launch(list);
    return r == ncclSuccess && nonblocking ? ncclInProgress : r;
}

static void* launch_later(void* p) {
    task* t = p;
    comm* c = t->c;
    ncclResult_t r = launch(t);
    pthread_mutex_lock(&g);
    c->async = r;
    pthread_mutex_unlock(&g);
    return NULL;
}

/* submit queues a checked task in the thread's group, or runs it as a group of
 * one. A non-blocking communicator's launch runs on a thread of its own, as
 * NCCL's groupLaunchNonBlocking does: the call returns ncclInProgress and the
 * communicator's state says when the launch is done. */
static ncclResult_t submit(task* t) {
    if (group_depth > 0) {
        if (!group_tail) group_tail = &group_head;
        *group_tail = t;
        group_tail = &t->next;
        return ncclSuccess;
    }
    if (!t->c->blocking) {
        pthread_mutex_lock(&g);
        if (t->c->async == ncclInProgress) {
            pthread_mutex_unlock(&g);
            free_tasks(t);
            return fail(ncclInvalidUsage, "call on a non-blocking communicator still in progress");
        }
        t->c->async = ncclInProgress;
        pthread_mutex_unlock(&g);
        pthread_t th;
        pthread_create(&th, NULL, launch_later, t);
        pthread_detach(th);
        return ncclInProgress;
    }
    return launch(t);
}

static ncclResult_t check_buf(comm* c, const char* fn, const char* what, const void* p, size_t bytes) {
    if (!bytes) return ncclSuccess;
    if (!p) return fail(ncclInvalidArgument, "%s : %s argument is NULL", fn, what);
    int d = fakecuda_ptr_device(p, bytes);
    if (d == -2) return fail(ncclInvalidArgument, "%s : %s of %zu bytes overruns its allocation", fn, what, bytes);
    if (d < 0) return fail(ncclInvalidArgument, "%s : %s %p is not device memory", fn, what, p);
    if (d != c->dev)
        return fail(ncclInvalidArgument, "%s : %s allocated on device %d mismatchs with NCCL device %d", fn, what, d, c->dev);
    return ncclSuccess;
}

/* enqueue checks the arguments the way NCCL's ArgsCheck does, then submits. */
static ncclResult_t enqueue_checked(int kind, const char* fn, const void* send, void* recv, size_t count, int type, int op,
                            int root, comm* c, void* stream) {
    ncclResult_t r = live(c, fn);
    if (r) return r;
    if (type < 0 || type >= NUM_TYPES) return fail(ncclInvalidArgument, "%s : invalid type %d", fn, type);
    int isop = kind == kAllReduce || kind == kReduce || kind == kReduceScatter;
    if (isop && (op < 0 || (op >= opPreMul && (op - opPreMul >= 32 || !c->premul_used[op - opPreMul]))))
        return fail(ncclInvalidArgument, "%s : invalid reduction operation %d", fn, op);
    if (isop && op >= opPreMul && c->premul_type[op - opPreMul] != type)
        return fail(ncclInvalidArgument, "%s : PreMulSum op %d was made for another type", fn, op);
    int n = c->nranks, sz = type_size(type);
    if ((kind == kBroadcast || kind == kReduce || kind == kGather || kind == kScatter) && (root < 0 || root >= n))
        return fail(ncclInvalidArgument, "%s : invalid root %d (root should be in the 0..%d range)", fn, root, n - 1);
    if ((kind == kSend || kind == kRecv) && (root < 0 || root >= n))
        return fail(ncclInvalidArgument, "%s : invalid peer %d (peer should be in the 0..%d range)", fn, root, n - 1);
    size_t sb = count * sz, rb = count * sz;
    int me = c->rank;
    switch (kind) {
    case kAllGather: rb *= n; break;
    case kReduceScatter: sb *= n; break;
    case kAlltoAll: sb *= n; rb *= n; break;
    case kGather: rb = me == root ? rb * n : 0; break;
    case kScatter: sb = me == root ? sb * n : 0; break;
    case kBroadcast: sb = me == root ? sb : 0; break;
    case kReduce: rb = me == root ? rb : 0; break;
    case kSend: rb = 0; break;
    case kRecv: sb = 0; break;
    }
    if ((r = check_buf(c, fn, "sendbuff", send, sb)) || (r = check_buf(c, fn, "recvbuff", recv, rb))) return r;
    if (count == 0 && kind != kSend && kind != kRecv) return ncclSuccess; /* nothing to do, as NCCL */
    task* t = calloc(1, sizeof *t);
    *t = (task){.kind = kind, .type = type, .op = op, .root = root, .peer = root, .send = send, .recv = recv,
                .count = count, .c = c, .stream = stream};
    if (isop && op >= opPreMul) {
        int i = op - opPreMul;
        t->premul_res = c->premul_res[i];
        t->scalar_f = c->premul_f[i];
        t->scalar_i = c->premul_i[i];
        t->scalar_ptr = c->premul_ptr[i];
    }
    return submit(t);
}

static ncclResult_t enqueue(int kind, const char* fn, const void* send, void* recv, size_t count, int type, int op,
                            int root, comm* c, void* stream) {
    ncclResult_t r = group_err(enqueue_checked(kind, fn, send, recv, count, type, op, root, c, stream));
    inside_call(r == ncclSuccess || r == ncclInProgress ? c : NULL, fn);
    return r;
}

API ncclResult_t ncclAllReduce(const void* s, void* r, size_t count, int type, int op, comm* c, void* st) {
    return enqueue(kAllReduce, "AllReduce", s, r, count, type, op, 0, c, st);
}
API ncclResult_t ncclBroadcast(const void* s, void* r, size_t count, int type, int root, comm* c, void* st) {
    return enqueue(kBroadcast, "Broadcast", s, r, count, type, 0, root, c, st);
}
API ncclResult_t ncclBcast(void* b, size_t count, int type, int root, comm* c, void* st) {
    return enqueue(kBroadcast, "Broadcast", b, b, count, type, 0, root, c, st);
}
API ncclResult_t ncclReduce(const void* s, void* r, size_t count, int type, int op, int root, comm* c, void* st) {
    return enqueue(kReduce, "Reduce", s, r, count, type, op, root, c, st);
}
API ncclResult_t ncclAllGather(const void* s, void* r, size_t count, int type, comm* c, void* st) {
    return enqueue(kAllGather, "AllGather", s, r, count, type, 0, 0, c, st);
}
API ncclResult_t ncclReduceScatter(const void* s, void* r, size_t count, int type, int op, comm* c, void* st) {
    return enqueue(kReduceScatter, "ReduceScatter", s, r, count, type, op, 0, c, st);
}
API ncclResult_t ncclSend(const void* s, size_t count, int type, int peer, comm* c, void* st) {
    return enqueue(kSend, "Send", s, NULL, count, type, 0, peer, c, st);
}
API ncclResult_t ncclRecv(void* r, size_t count, int type, int peer, comm* c, void* st) {
    return enqueue(kRecv, "Recv", NULL, r, count, type, 0, peer, c, st);
}
#if HAS_228
API ncclResult_t ncclAlltoAll(const void* s, void* r, size_t count, int type, comm* c, void* st) {
    return enqueue(kAlltoAll, "AlltoAll", s, r, count, type, 0, 0, c, st);
}
API ncclResult_t ncclGather(const void* s, void* r, size_t count, int type, int root, comm* c, void* st) {
    return enqueue(kGather, "Gather", s, r, count, type, 0, root, c, st);
}
API ncclResult_t ncclScatter(const void* s, void* r, size_t count, int type, int root, comm* c, void* st) {
    return enqueue(kScatter, "Scatter", s, r, count, type, 0, root, c, st);
}
#endif

API ncclResult_t ncclRedOpCreatePreMulSum(int* op, void* scalar, int type, int residence, comm* c) {
    ncclResult_t r = live(c, "ncclRedOpCreatePreMulSum");
    if (r) return r;
    if (!op || !scalar) return fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: NULL argument");
    if (type < 0 || type >= NUM_TYPES) return fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: invalid type %d", type);
    if (residence != 0 && residence != 1) return fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: invalid residence %d", residence);
    if (residence == 0 && check_buf(c, "ncclRedOpCreatePreMulSum", "scalar", scalar, type_size(type))) return ncclInvalidArgument;
    pthread_mutex_lock(&g);
    int i = 0;
    while (i < 32 && c->premul_used[i]) i++;
    if (i == 32) {
        pthread_mutex_unlock(&g);
        return fail(ncclInvalidUsage, "ncclRedOpCreatePreMulSum: too many ops");
    }
    c->premul_used[i] = 1;
    c->premul_type[i] = type;
    c->premul_res[i] = residence;
    c->premul_ptr[i] = scalar;
    if (residence == 1) { /* host immediate: read now */
        val v = load(type, scalar, 0);
        c->premul_f[i] = v.f;
        c->premul_i[i] = v.i;
    }
    pthread_mutex_unlock(&g);
    *op = opPreMul + i;
    return ncclSuccess;
}

API ncclResult_t ncclRedOpDestroy(int op, comm* c) {
    ncclResult_t r = live(c, "ncclRedOpDestroy");
    if (r) return r;
    int i = op - opPreMul;
    if (i < 0 || i >= 32 || !c->premul_used[i]) return fail(ncclInvalidArgument, "ncclRedOpDestroy: op %d is not a PreMulSum op", op);
    c->premul_used[i] = 0;
    return ncclSuccess;
}

#if HAS_228
/* ---- registration, memory, windows ---- */

API ncclResult_t ncclCommRegister(comm* c, void* buff, size_t size, void** handle) {
    ncclResult_t r = live(c, "ncclCommRegister");
    if (r) return r;
    if (!handle) return fail(ncclInvalidArgument, "ncclCommRegister: handle is NULL");
    if ((r = check_buf(c, "ncclCommRegister", "buff", buff, size))) return r;
    size_t* h = malloc(2 * sizeof(size_t));
    h[0] = (size_t)buff;
    h[1] = size;
    *handle = h;
    return ncclSuccess;
}

API ncclResult_t ncclCommDeregister(comm* c, void* handle) {
    ncclResult_t r = live(c, "ncclCommDeregister");
    if (r) return r;
    if (!handle) return fail(ncclInvalidArgument, "ncclCommDeregister: handle is NULL");
    free(handle);
    return ncclSuccess;
}

API ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
    if (!ptr) return fail(ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
    if (cudaMalloc(ptr, size)) return fail(ncclUnhandledCudaError, "ncclMemAlloc: cudaMalloc failed");
    return ncclSuccess;
}

API ncclResult_t ncclMemFree(void* ptr) {
    if (cudaFree(ptr)) return fail(ncclUnhandledCudaError, "ncclMemFree: cudaFree failed");
    return ncclSuccess;
}

typedef struct winreg {
    comm* c;
    void* buff;
    size_t size;
    window** win;
    int flags;
} winreg;

static void register_window(comm* c, void* buff, size_t size, window** win, int flags);

static void* register_later(void* p) {
    winreg* w = p;
    register_window(w->c, w->buff, w->size, w->win, w->flags);
    pthread_mutex_lock(&g);
    w->c->async = ncclSuccess;
    pthread_cond_broadcast(&gc);
    pthread_mutex_unlock(&g);
    free(w);
    return NULL;
}

API ncclResult_t ncclCommWindowRegister(comm* c, void* buff, size_t size, window** win, int flags) {
    ncclResult_t r = live(c, "ncclCommWindowRegister");
    if (r) return r;
    if (!win) return fail(ncclInvalidArgument, "ncclCommWindowRegister: win is NULL");
    if ((r = check_buf(c, "ncclCommWindowRegister", "buff", buff, size))) return r;
    const char* null = getenv("FAKENCCL_NULL_WINDOW");
    if (null && *null == '1') {
        *win = NULL;
        return ncclSuccess;
    }
    if (!c->blocking) { /* as NCCL 2.28: queued; the window appears when the communicator is ready again */
        *win = NULL;
        winreg* w = malloc(sizeof *w);
        *w = (winreg){c, buff, size, win, flags};
        pthread_mutex_lock(&g);
        c->async = ncclInProgress;
        pthread_mutex_unlock(&g);
        pthread_t th;
        pthread_create(&th, NULL, register_later, w);
        pthread_detach(th);
        return ncclSuccess;
    }
    register_window(c, buff, size, win, flags);
    return ncclSuccess;
}

static void register_window(comm* c, void* buff, size_t size, window** win, int flags) {
    if (flags & 1) { /* symmetric: collective, every rank registers together */
        clique* q = c->c;
        pthread_mutex_lock(&g);
        long seq = c->win_seq++;
        while (q->win_seq != seq) pthread_cond_wait(&gc, &g);
        q->win_arrived++;
        pthread_cond_broadcast(&gc);
        while (q->win_arrived < c->nranks) pthread_cond_wait(&gc, &g);
        if (++q->win_left == c->nranks) {
            q->win_arrived = q->win_left = 0;
            q->win_seq++;
            pthread_cond_broadcast(&gc);
        }
        pthread_mutex_unlock(&g);
    }
    window* w = calloc(1, sizeof *w);
    *w = (window){buff, size, flags, NULL};
    pthread_mutex_lock(&g);
    w->next = c->windows;
    c->windows = w;
    *win = w;
    pthread_mutex_unlock(&g);
}

API ncclResult_t ncclCommWindowDeregister(comm* c, window* w) {
    ncclResult_t r = live(c, "ncclCommWindowDeregister");
    if (r) return r;
    pthread_mutex_lock(&g);
    for (window** pw = &c->windows; *pw; pw = &(*pw)->next)
        if (*pw == w) {
            *pw = w->next;
            pthread_mutex_unlock(&g);
            free(w);
            return ncclSuccess;
        }
    pthread_mutex_unlock(&g);
    return fail(ncclInvalidArgument, "ncclCommWindowDeregister: unknown window %p", (void*)w);
}
#endif

#ifdef FAKENCCL_VCCL
static int in_symmetric_window(comm* c, const void* p, size_t bytes) {
    int ok = 0;
    pthread_mutex_lock(&g);
    for (window* w = c->windows; w && !ok; w = w->next)
        ok = (w->flags & 1) && (const char*)p >= w->base && (const char*)p + bytes <= w->base + w->size;
    pthread_mutex_unlock(&g);
    return ok;
}

static ncclResult_t alltoallv_checked(const void* send, const size_t* sc, const size_t* sd, void* recv, const size_t* rc,
                              const size_t* rd, const void* relay, size_t relaycount, int type, comm* c, void* st) {
    const char* fn = "ncclAlltoAllv";
    ncclResult_t r = live(c, fn);
    if (r) return r;
    if (type < 0 || type >= NUM_TYPES) return fail(ncclInvalidArgument, "%s : invalid type %d", fn, type);
    if (!relay && relaycount) return fail(ncclInvalidArgument, "%s : relaycount %zu without a relay buffer", fn, relaycount);
    if (!sc || !sd || !rc || !rd) return fail(ncclInvalidArgument, "%s : NULL count or displacement array", fn);
    int n = c->nranks, me = c->rank, sz = type_size(type);
    size_t sendEnd = 0, recvEnd = 0;
    for (int j = 0; j < n; j++) {
        if (sc[me * n + j] && sd[me * n + j] + sc[me * n + j] > sendEnd) sendEnd = sd[me * n + j] + sc[me * n + j];
        if (rc[me * n + j] && rd[me * n + j] + rc[me * n + j] > recvEnd) recvEnd = rd[me * n + j] + rc[me * n + j];
        if (sc[j * n + me] != rc[me * n + j])
            return fail(ncclInvalidArgument, "%s : rank %d sends %zu to rank %d, which expects %zu", fn, j, sc[j * n + me], me, rc[me * n + j]);
    }
    if (!in_symmetric_window(c, send, sendEnd * sz) || !in_symmetric_window(c, recv, recvEnd * sz))
        return fail(ncclInvalidArgument, "%s : buffers not in a valid symmetric window", fn);
    if ((r = check_buf(c, fn, "sendbuff", send, sendEnd * sz)) || (r = check_buf(c, fn, "recvbuff", recv, recvEnd * sz))) return r;
    task* t = calloc(1, sizeof *t);
    *t = (task){.kind = kAlltoAllv, .type = type, .send = send, .recv = recv, .c = c, .stream = st};
    /* VCCL keeps the array pointers and reads them when the group ends: so
     * does the fake, and it fails the group if they changed in between. */
    t->a2av = malloc(4 * n * n * sizeof(size_t));
    t->a2av_user[0] = sc, t->a2av_user[1] = sd, t->a2av_user[2] = rc, t->a2av_user[3] = rd;
    t->a2av_sum = a2av_checksum(t->a2av_user, n);
    return submit(t);
}

static ncclResult_t alltoallv(const void* send, const size_t* sc, const size_t* sd, void* recv, const size_t* rc,
                              const size_t* rd, const void* relay, size_t relaycount, int type, comm* c, void* st) {
    ncclResult_t r = group_err(alltoallv_checked(send, sc, sd, recv, rc, rd, relay, relaycount, type, c, st));
    inside_call(r == ncclSuccess || r == ncclInProgress ? c : NULL, "ncclAlltoAllv");
    return r;
}

#if FAKENCCL_VCCL == 11
API ncclResult_t ncclAlltoAllv(const void* send, const size_t* sc, const size_t* sd, void* recv, const size_t* rc,
                               const size_t* rd, void* relay, size_t relaycount, int type, comm* c, void* st) {
    return alltoallv(send, sc, sd, recv, rc, rd, relay, relaycount, type, c, st);
}
#else
API ncclResult_t ncclAlltoAllv(const void* send, const size_t* sc, const size_t* sd, void* recv, const size_t* rc,
                               const size_t* rd, const void* relay, int type, comm* c, void* st) {
    return alltoallv(send, sc, sd, recv, rc, rd, relay, 0, type, c, st);
}
#endif
#endif
