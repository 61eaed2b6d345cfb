/* A fake CUDA runtime for gonccl's tests: "device memory" is host memory tagged
 * with its device, and every stream is a worker thread that runs its work in
 * order, later than it was enqueued (FAKECUDA_DELAY_US per item, default 200),
 * so a missing synchronize shows up as wrong data. Exports the CUDA runtime
 * functions gonccl calls, with CUDA's error codes, plus fakecuda_* helpers for
 * the fake NCCL.
 *
 * Stream capture (CUDA graphs): a capturing stream records the copies,
 * memsets, event records and the fake NCCL's launches enqueued on it as graph
 * nodes instead of running them; cudaStreamEndCapture makes a graph of them,
 * instantiation copies the nodes and each cudaGraphLaunch enqueues them afresh
 * on the launch stream, in captured order. The fake NCCL's launches come
 * through fakecuda_stream_enqueue_graphable: a node holds the NCCL's item, and
 * each launch asks the NCCL for a fresh copy of it (clone, at launch time, as
 * NCCL's persistent plans are re-armed by each launch) and runs that in stream
 * order; the cudaGraph_t, every cudaGraphExec_t made from it and the launches
 * still in flight share the item by reference count, and the last of them to
 * go (a cudaGraphDestroy/cudaGraphExecDestroy, or a launch finishing after
 * them, as CUDA defers the destruction of a graph in flight) gives it back to
 * the NCCL (release): CUDA's user objects, through which NCCL learns that the
 * graphs holding its work are gone. Calls that break a capture get CUDA's
 * codes and invalidate it: a synchronize or query of the capturing stream
 * (900), a "potentially unsafe" call (cudaMalloc, cudaFree, synchronous
 * copies, cudaDeviceSynchronize, cudaDeviceEnablePeerAccess, cudaGraphInstantiate: CUDA 12 on H100
 * refused nccl-bench's instantiation of one GPU's graph while the same
 * thread still captured another's, 900 ...) from the thread that began a
 * thread-local capture or from any thread during a global one (900), as the
 * thread's own mode (cudaThreadExchangeStreamCaptureMode) allows,
 * legacy-stream work on a device whose blocking stream is capturing (906), an
 * event recorded in a capture queried or synchronized (907), waiting inside a
 * capture on an event recorded outside it (905), ending a non-relaxed capture
 * on another thread (908, the capture stays open). Not modelled (refused with
 * 900): cross-stream capture (another stream joining through an event),
 * stream-ordered allocation inside a capture, and work the fake NCCL enqueues
 * through plain fakecuda_stream_enqueue. Nor are graph updates
 * (cudaGraphExecUpdate), node-level graph building, or instantiation flags. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

enum {
    cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2,
    cudaErrorNoDevice = 100, cudaErrorInvalidDevice = 101, cudaErrorOperatingSystem = 304,
    cudaErrorInvalidResourceHandle = 400, cudaErrorIllegalState = 401, cudaErrorNotReady = 600,
    cudaErrorPeerAccessAlreadyEnabled = 704, cudaErrorPeerAccessNotEnabled = 705,
    cudaErrorHostMemoryAlreadyRegistered = 712, cudaErrorHostMemoryNotRegistered = 713,
    cudaErrorStreamCaptureUnsupported = 900, cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureIsolation = 905, cudaErrorStreamCaptureImplicit = 906,
    cudaErrorCapturedEvent = 907, cudaErrorStreamCaptureWrongThread = 908,
};

enum { capNone = 0, capActive = 1, capInvalidated = 2 };            /* cudaStreamCaptureStatus */
enum { modeGlobal = 0, modeThreadLocal = 1, modeRelaxed = 2 };      /* cudaStreamCaptureMode */

static pthread_mutex_t g = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER; /* any work item finished */
static __thread int current_device;
static __thread int last_error;

/* Contexts, as CUDA >= 12 makes them: cudaSetDevice creates the device's
 * primary context and makes it the thread's; a thread that never chose a
 * device reads as device 0, and the first call that needs a context
 * (thread_context, at the top of those calls) creates device 0's. The
 * process's primary contexts are a mask (fakecuda_primary_contexts), for the
 * tests of a process that must not touch GPU 0. */
static __thread int has_context;
static unsigned long long primary_contexts;

static void make_context(int d) {
    if (d >= 0 && d < 64) __atomic_or_fetch(&primary_contexts, 1ull << d, __ATOMIC_SEQ_CST);
}

static void thread_context(void) {
    if (has_context) return;
    has_context = 1;
    make_context(current_device);
}

API unsigned long long fakecuda_primary_contexts(void) { return __atomic_load_n(&primary_contexts, __ATOMIC_SEQ_CST); }

/* FAKECUDA_DEVICES is read at each call, not once: a test process may set it
 * anew per test (nccltest.Setenv) with the library already loaded. */
static int ndevices(void) {
    const char* s = getenv("FAKECUDA_DEVICES");
    int n = s ? atoi(s) : 8; /* 0: a machine without a GPU */
    return n < 0 ? 0 : n > 64 ? 64 : n; /* the per-device tables below hold 64 */
}

static useconds_t delay_us(void) {
    static long d = -1;
    if (d < 0) {
        const char* s = getenv("FAKECUDA_DELAY_US");
        d = s ? atol(s) : 200;
    }
    return (useconds_t)d;
}

static int fail(int e) {
    last_error = e;
    return e;
}

/* ---- allocations ---- */

typedef struct alloc {
    char* base;
    size_t size;
    int dev;  /* -1 for page-locked host memory */
    int registered; /* cudaHostRegister: the caller's memory, not ours to free */
    struct alloc* next;
} alloc;
static alloc* allocs;

static alloc* find_alloc(const void* p) {
    for (alloc* a = allocs; a; a = a->next)
        if ((const char*)p >= a->base && (const char*)p < a->base + (a->size ? a->size : 1)) return a;
    return NULL;
}

API int fakecuda_ptr_device(const void* p, size_t len) {
    pthread_mutex_lock(&g);
    alloc* a = find_alloc(p);
    int r = -1;
    if (a && a->dev >= 0) r = (const char*)p + len <= a->base + a->size ? a->dev : -2;
    pthread_mutex_unlock(&g);
    return r;
}

API long fakecuda_live_allocations(void) {
    long n = 0;
    pthread_mutex_lock(&g);
    for (alloc* a = allocs; a; a = a->next) n++;
    pthread_mutex_unlock(&g);
    return n;
}

static int add_alloc(void** out, size_t size, int dev) {
    if (!out) return fail(cudaErrorInvalidValue);
    alloc* a = calloc(1, sizeof *a);
    a->base = calloc(1, size ? size : 1);
    if (!a->base) {
        free(a);
        return fail(cudaErrorMemoryAllocation);
    }
    a->size = size;
    a->dev = dev;
    pthread_mutex_lock(&g);
    a->next = allocs;
    allocs = a;
    pthread_mutex_unlock(&g);
    *out = a->base;
    return cudaSuccess;
}

static int remove_alloc(void* p, int host) {
    if (!p) return cudaSuccess;
    pthread_mutex_lock(&g);
    for (alloc** pa = &allocs; *pa; pa = &(*pa)->next) {
        alloc* a = *pa;
        if (a->base == p && (a->dev < 0) == host && !a->registered) {
            *pa = a->next;
            pthread_mutex_unlock(&g);
            free(a->base);
            free(a);
            return cudaSuccess;
        }
    }
    pthread_mutex_unlock(&g);
    return fail(cudaErrorInvalidValue);
}

/* ---- streams ---- */

typedef struct item {
    void (*fn)(void*);       /* runs unlocked */
    void (*retire)(void*);   /* runs with g held as the item leaves the queue */
    void* arg;
    struct item* next;
} item;

#define STREAM_MAGIC 0x5354524du
typedef struct stream {
    unsigned magic;
    int dev;
    int nonblocking;
    int priority;
    int stop;
    item *head, *tail; /* head stays queued while it runs */
    int cap;                       /* capNone, capActive, capInvalidated */
    int cap_mode;
    pthread_t cap_thread;
    struct node *cap_head, *cap_tail; /* the nodes captured so far */
    pthread_cond_t work;
    struct stream* next;
} stream;
static stream* streams;              /* live streams */
static int peer_enabled[64][64];     /* [device][peer] */
static stream* dying;                /* destroyed streams still running their queue */
static stream* legacy[64];           /* the per-device NULL stream */

/* A launch of the fake NCCL recorded by a capture (a "kernel node"): its item
 * is shared by the graph, its executable graphs and their launches in flight;
 * the last of them gives it back (release), outside g. */
typedef struct hostfn {
    void (*run)(void*);
    void* arg;
    void* (*clone)(void*);
    void (*release)(void*);
    int refs; /* g */
} hostfn;

/* A graph node: what a capture recorded. */
enum { nodeCopy, nodeRecord, nodeHost };
typedef struct node {
    int kind;
    void* dst;
    const void* src; /* NULL: a memset of value */
    size_t n;
    int value;
    struct event* e;
    hostfn* h;
    struct node* next;
} node;

/* hostfn_put drops a reference to h; the last one releases it. Called
 * without g. */
static void hostfn_put(hostfn* h);

/* free_nodes frees a node list, dropping its references to the NCCL's items.
 * Called without g (a release calls into the fake NCCL). */
static void free_nodes(node* n) {
    while (n) {
        node* next = n->next;
        if (n->kind == nodeHost) hostfn_put(n->h);
        free(n);
        n = next;
    }
}

/* invalidate ends the usefulness of s's capture: later work on s fails with
 * cudaErrorStreamCaptureInvalidated until cudaStreamEndCapture. g held. */
static void invalidate(stream* s) {
    if (s->cap == capActive) s->cap = capInvalidated;
}

/* unsafe_call reports (g held) whether the calling thread may not make a
 * "potentially unsafe" call now, and invalidates the captures it would break. */
static int unsafe_call(void);
/* legacy_conflict reports (g held) whether work on device dev's legacy stream
 * would join a capturing blocking stream, and invalidates those captures. */
static int legacy_conflict(int dev);

static void* worker(void* p) {
    stream* s = p;
    pthread_mutex_lock(&g);
    for (;;) {
        while (!s->head && !s->stop) pthread_cond_wait(&s->work, &g);
        if (!s->head) break;
        item* it = s->head;
        pthread_mutex_unlock(&g);
        if (delay_us()) usleep(delay_us());
        if (it->fn) it->fn(it->arg);
        pthread_mutex_lock(&g);
        if (it->retire) it->retire(it->arg);
        s->head = it->next;
        if (!s->head) s->tail = NULL;
        free(it);
        pthread_cond_broadcast(&done_cond);
    }
    for (stream** ps = &dying; *ps; ps = &(*ps)->next)
        if (*ps == s) {
            *ps = s->next;
            break;
        }
    pthread_cond_broadcast(&done_cond);
    pthread_mutex_unlock(&g);
    pthread_cond_destroy(&s->work);
    free(s);
    return NULL;
}

/* new_stream is called with g held. */
static stream* new_stream(int dev, int nonblocking) {
    stream* s = calloc(1, sizeof *s);
    s->magic = STREAM_MAGIC;
    s->dev = dev;
    s->nonblocking = nonblocking;
    pthread_cond_init(&s->work, NULL);
    pthread_t th;
    pthread_create(&th, NULL, worker, s);
    pthread_detach(th);
    return s;
}

/* resolve_on maps a handle to a live stream (NULL: the legacy stream of
 * device d), with g held. */
static stream* resolve_on(void* h, int d) {
    if (!h) {
        if (!legacy[d]) legacy[d] = new_stream(d, 0);
        return legacy[d];
    }
    for (stream* s = streams; s; s = s->next)
        if (s == h) return s;
    return NULL;
}

/* resolve is resolve_on the calling thread's current device. */
static stream* resolve(void* h) { return resolve_on(h, current_device); }

/* A thread's own capture interaction mode (cudaThreadExchangeStreamCaptureMode):
 * Global, the default, is barred by its own non-relaxed captures and by any
 * thread's global ones; ThreadLocal by its own non-relaxed captures only;
 * Relaxed by none. */
static __thread int thread_mode = modeGlobal;

/* barred reports (g held) whether a thread in mode mode, which began the
 * captures of thread self (a thread that began none: a fresh thread), may not
 * make a potentially unsafe call, and invalidates the captures it would break. */
static int barred(int mode, pthread_t self, int fresh) {
    int bad = 0;
    if (mode == modeRelaxed) return 0;
    for (stream* s = streams; s; s = s->next) {
        if (s->cap != capActive || s->cap_mode == modeRelaxed) continue;
        int own = !fresh && pthread_equal(s->cap_thread, self);
        if (own || (mode == modeGlobal && s->cap_mode == modeGlobal)) {
            invalidate(s);
            bad = 1;
        }
    }
    return bad;
}

static int unsafe_call(void) { return barred(thread_mode, pthread_self(), 0); }

API int cudaThreadExchangeStreamCaptureMode(int* mode) {
    if (!mode || *mode < modeGlobal || *mode > modeRelaxed) return fail(cudaErrorInvalidValue);
    int prev = thread_mode;
    thread_mode = *mode;
    *mode = prev;
    return cudaSuccess;
}

/* fakecuda_connect_guard is the fake NCCL's connection setup between two
 * ranks of one process (NCCL's cudaDeviceEnablePeerAccess, p2p.cc p2pMap): run
 * on the calling thread (inline: a group with one communicator to connect) or
 * on a thread of NCCL's own (fresh). 0, or CUDA's 900, the captures the call
 * breaks invalidated. */
API int fakecuda_connect_guard(int inline_) {
    pthread_mutex_lock(&g);
    int bad = inline_ ? unsafe_call() : barred(modeGlobal, pthread_self(), 1);
    pthread_mutex_unlock(&g);
    return bad ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

static int legacy_conflict(int dev) {
    int bad = 0;
    for (stream* s = streams; s; s = s->next)
        if (s->dev == dev && !s->nonblocking && s->cap != capNone) {
            invalidate(s);
            bad = 1;
        }
    return bad;
}

/* push queues an item on s, g held. */
static void push(stream* s, void (*fn)(void*), void (*retire)(void*), void* arg) {
    item* it = calloc(1, sizeof *it);
    it->fn = fn;
    it->retire = retire;
    it->arg = arg;
    if (s->tail) s->tail->next = it;
    else s->head = it;
    s->tail = it;
    pthread_cond_signal(&s->work);
}

/* capture_check says, g held, what enqueuing on s means: 0 run it, -1 record
 * it as a graph node, or an error (the capture was invalidated, or legacy work
 * would join a capture). */
static int capture_check(void* h, stream* s) {
    if (!h && legacy_conflict(s->dev)) return cudaErrorStreamCaptureImplicit;
    if (s->cap == capInvalidated) return cudaErrorStreamCaptureInvalidated;
    return s->cap == capActive ? -1 : 0;
}

static void add_node(stream* s, node n) {
    node* c = malloc(sizeof *c);
    *c = n;
    c->next = NULL;
    if (s->cap_tail) s->cap_tail->next = c;
    else s->cap_head = c;
    s->cap_tail = c;
}

static int enqueue_on(void* h, int dev, void (*fn)(void*), void (*retire)(void*), void* arg) {
    pthread_mutex_lock(&g);
    stream* s = resolve_on(h, dev);
    if (!s) {
        pthread_mutex_unlock(&g);
        return cudaErrorInvalidResourceHandle;
    }
    int r = capture_check(h, s);
    if (r) {
        /* Work this fake cannot turn into a graph node (the fake NCCL's). */
        if (r < 0) {
            invalidate(s);
            r = cudaErrorStreamCaptureUnsupported;
        }
        pthread_mutex_unlock(&g);
        return r;
    }
    item* it = calloc(1, sizeof *it);
    it->fn = fn;
    it->retire = retire;
    it->arg = arg;
    if (s->tail) s->tail->next = it;
    else s->head = it;
    s->tail = it;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&g);
    return cudaSuccess;
}

static int enqueue(void* h, void (*fn)(void*), void (*retire)(void*), void* arg) {
    return enqueue_on(h, current_device, fn, retire, arg);
}

/* fakecuda_stream_enqueue is the fake NCCL's kernel launch: the NULL stream is
 * the legacy stream of the communicator's device, whatever thread launches.
 * On a capturing stream it fails (900, and the capture is invalidated): the
 * fake NCCL uses it for work it knows is not captured. */
API int fakecuda_stream_enqueue(void* h, int dev, void (*fn)(void*), void* arg) { return enqueue_on(h, dev, fn, NULL, arg); }

static void hostfn_put(hostfn* h) {
    pthread_mutex_lock(&g);
    int last = --h->refs == 0;
    pthread_mutex_unlock(&g);
    if (!last) return;
    if (h->release) h->release(h->arg);
    free(h);
}

/* A launch's copy of a recorded NCCL item, run in stream order. */
typedef struct hostrun {
    hostfn* h;
    void* fresh;
} hostrun;

static void run_host(void* p) {
    hostrun* r = p;
    r->h->run(r->fresh);
    hostfn_put(r->h); /* a graph destroyed meanwhile gives the item back now */
    free(r);
}

/* launch_host enqueues a fresh copy of h's item on s (g held): clone runs now,
 * at launch time, in the fake NCCL (whose lock nests inside g). */
static void launch_host(stream* s, hostfn* h) {
    void* fresh = h->clone(h->arg);
    if (!fresh) return;
    hostrun* r = malloc(sizeof *r);
    r->h = h;
    r->fresh = fresh;
    h->refs++;
    push(s, run_host, NULL, r);
}

/* fakecuda_stream_capturing says what enqueuing on h (NULL: device dev's
 * legacy stream) would do now: 0 run, -1 record into a capture, or CUDA's
 * error (a bad handle, an invalidated capture, legacy work beside a capturing
 * blocking stream, which also invalidates that capture as the work would). */
API int fakecuda_stream_capturing(void* h, int dev) {
    pthread_mutex_lock(&g);
    stream* s = resolve_on(h, dev);
    int r = !s ? cudaErrorInvalidResourceHandle : capture_check(h, s);
    pthread_mutex_unlock(&g);
    return r;
}

/* fakecuda_stream_enqueue_graphable is the fake NCCL's launch of work that a
 * capture may record. Not capturing: run(clone(arg)) is enqueued and arg given
 * back (release), the capture having ended before the call got here; the fake
 * NCCL passes its template item only when fakecuda_stream_capturing said the
 * stream captures. Capturing: a node holding (run, arg, clone, release) is
 * recorded, arg now owned by the graph: each cudaGraphLaunch enqueues
 * run(clone(arg)) with the other nodes of the launch, and the last reference
 * to the node (graph, executable graphs, launches in flight) calls
 * release(arg). 0, or CUDA's error (arg is still the caller's). */
API int fakecuda_stream_enqueue_graphable(void* h, int dev, void (*run)(void*), void* arg, void* (*clone)(void*),
                                          void (*release)(void*)) {
    if (!run || !clone) return cudaErrorInvalidValue;
    pthread_mutex_lock(&g);
    stream* s = resolve_on(h, dev);
    int r = !s ? cudaErrorInvalidResourceHandle : capture_check(h, s);
    if (r > 0) {
        pthread_mutex_unlock(&g);
        return r;
    }
    hostfn* hf = calloc(1, sizeof *hf);
    *hf = (hostfn){run, arg, clone, release, 1};
    if (r < 0) add_node(s, (node){.kind = nodeHost, .h = hf});
    else launch_host(s, hf);
    pthread_mutex_unlock(&g);
    if (r == 0) hostfn_put(hf); /* run once: the fresh copy is queued, the template goes back */
    return cudaSuccess;
}

API int fakecuda_stream_device(void* h) {
    pthread_mutex_lock(&g);
    stream* s = resolve(h);
    int d = s ? s->dev : -1;
    pthread_mutex_unlock(&g);
    return d;
}

API int fakecuda_current_device(void) { return current_device; }

/* drain waits, with g held, until the streams of device dev are idle: all of
 * them, or (legacy semantics of synchronous copies) only the blocking ones. */
static void drain(int dev, int all) {
    for (;;) {
        int busy = legacy[dev] && legacy[dev]->head;
        for (stream* s = streams; s && !busy; s = s->next)
            if (s->dev == dev && s->head && (all || !s->nonblocking)) busy = 1;
        for (stream* s = dying; s && !busy && all; s = s->next) busy = s->dev == dev && s->head;
        if (!busy) return;
        pthread_cond_wait(&done_cond, &g);
    }
}

/* The fake's priority range, as an H100's: 0 (least) to -5 (greatest). */
#define PRIO_LEAST 0
#define PRIO_GREATEST (-5)

API int cudaStreamCreateWithPriority(void** out, unsigned flags, int priority) {
    thread_context();
    if (!out || flags > 1) return fail(cudaErrorInvalidValue);
    if (current_device >= ndevices()) return fail(cudaErrorNoDevice);
    /* As CUDA: a priority outside the range is clamped to it. */
    if (priority > PRIO_LEAST) priority = PRIO_LEAST;
    if (priority < PRIO_GREATEST) priority = PRIO_GREATEST;
    pthread_mutex_lock(&g);
    stream* s = new_stream(current_device, flags & 1);
    s->priority = priority;
    s->next = streams;
    streams = s;
    pthread_mutex_unlock(&g);
    *out = s;
    return cudaSuccess;
}

API int cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
    thread_context();
    if (current_device >= ndevices()) return fail(cudaErrorNoDevice);
    if (least) *least = PRIO_LEAST;
    if (greatest) *greatest = PRIO_GREATEST;
    return cudaSuccess;
}

API int cudaStreamGetPriority(void* h, int* prio) {
    thread_context();
    if (!prio) return fail(cudaErrorInvalidValue);
    pthread_mutex_lock(&g);
    stream* s = resolve(h);
    if (s) *prio = s->priority;
    pthread_mutex_unlock(&g);
    return s ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

API int cudaStreamCreateWithFlags(void** out, unsigned flags) {
    thread_context();
    if (!out || flags > 1) return fail(cudaErrorInvalidValue);
    if (current_device >= ndevices()) return fail(cudaErrorNoDevice);
    pthread_mutex_lock(&g);
    stream* s = new_stream(current_device, flags & 1);
    s->next = streams;
    streams = s;
    pthread_mutex_unlock(&g);
    *out = s;
    return cudaSuccess;
}

API int cudaStreamCreate(void** out) { return cudaStreamCreateWithFlags(out, 0); }

API int cudaStreamDestroy(void* h) {
    thread_context();
    pthread_mutex_lock(&g);
    for (stream** ps = &streams; *ps; ps = &(*ps)->next) {
        if (*ps == h) {
            stream* s = *ps;
            if (s->cap != capNone) {
                invalidate(s);
                pthread_mutex_unlock(&g);
                return fail(cudaErrorStreamCaptureUnsupported);
            }
            *ps = s->next;
            s->stop = 1; /* the worker finishes the queue, then frees it */
            s->next = dying;
            dying = s;
            pthread_cond_signal(&s->work);
            pthread_mutex_unlock(&g);
            return cudaSuccess;
        }
    }
    pthread_mutex_unlock(&g);
    return fail(cudaErrorInvalidResourceHandle);
}

API int cudaStreamSynchronize(void* h) {
    thread_context();
    pthread_mutex_lock(&g);
    stream* s = resolve(h);
    if (!s) {
        pthread_mutex_unlock(&g);
        return fail(cudaErrorInvalidResourceHandle);
    }
    if (s->cap != capNone || (!h && legacy_conflict(s->dev))) {
        int r = s->cap != capNone ? cudaErrorStreamCaptureUnsupported : cudaErrorStreamCaptureImplicit;
        invalidate(s);
        pthread_mutex_unlock(&g);
        return fail(r);
    }
    while (s->head) pthread_cond_wait(&done_cond, &g);
    pthread_mutex_unlock(&g);
    return cudaSuccess;
}

API int cudaStreamQuery(void* h) {
    thread_context();
    pthread_mutex_lock(&g);
    stream* s = resolve(h);
    int r = !s ? cudaErrorInvalidResourceHandle : s->head ? cudaErrorNotReady : cudaSuccess;
    if (s && s->cap != capNone) {
        invalidate(s);
        r = cudaErrorStreamCaptureUnsupported;
    } else if (s && !h && legacy_conflict(s->dev))
        r = cudaErrorStreamCaptureImplicit;
    pthread_mutex_unlock(&g);
    return r && r != cudaErrorNotReady ? fail(r) : r;
}

API int cudaDeviceSynchronize(void) {
    thread_context();
    if (current_device >= ndevices()) return fail(cudaErrorNoDevice);
    pthread_mutex_lock(&g);
    /* Unsafe from the capturing thread; and it would wait for a capturing
     * stream of the device (a conservative model: refused from any thread). */
    int bad = unsafe_call();
    for (stream* s = streams; s; s = s->next)
        if (s->dev == current_device && s->cap != capNone) {
            invalidate(s);
            bad = 1;
        }
    if (bad) {
        pthread_mutex_unlock(&g);
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    drain(current_device, 1);
    pthread_mutex_unlock(&g);
    return cudaSuccess;
}

/* ---- events ---- */

#define EVENT_MAGIC 0x45564e54u
typedef struct event {
    unsigned magic;
    stream* captured; /* the capturing stream its last record went into, or NULL */
    unsigned long recorded, completed; /* generations */
    struct timespec at;
    struct event* next;
} event;
static event* events;

static event* find_event(void* h) {
    for (event* e = events; e; e = e->next)
        if (e == h) return e;
    return NULL;
}

API int cudaEventCreateWithFlags(void** out, unsigned flags) {
    thread_context();
    if (!out || flags > 7) return fail(cudaErrorInvalidValue);
    event* e = calloc(1, sizeof *e);
    e->magic = EVENT_MAGIC;
    pthread_mutex_lock(&g);
    e->next = events;
    events = e;
    pthread_mutex_unlock(&g);
    *out = e;
    return cudaSuccess;
}

API int cudaEventCreate(void** out) { return cudaEventCreateWithFlags(out, 0); }

API int cudaEventDestroy(void* h) {
    thread_context();
    pthread_mutex_lock(&g);
    for (event** pe = &events; *pe; pe = &(*pe)->next) {
        if (*pe == h) {
            *pe = (*pe)->next; /* kept allocated: markers in flight may still touch it */
            pthread_mutex_unlock(&g);
            return cudaSuccess;
        }
    }
    pthread_mutex_unlock(&g);
    return fail(cudaErrorInvalidResourceHandle);
}

typedef struct mark {
    event* e;
    unsigned long gen;
} mark;

/* retire_mark completes the event as the marker leaves its stream, so a stream
 * whose last event completed is idle at that same moment. */
static void retire_mark(void* p) {
    mark* m = p;
    clock_gettime(CLOCK_MONOTONIC, &m->e->at);
    if (m->gen > m->e->completed) m->e->completed = m->gen;
    free(m);
}

API int cudaEventRecord(void* h, void* st) {
    thread_context();
    pthread_mutex_lock(&g);
    event* e = find_event(h);
    stream* s = resolve(st);
    if (!e || !s) {
        pthread_mutex_unlock(&g);
        return fail(cudaErrorInvalidResourceHandle);
    }
    int r = capture_check(st, s);
    if (r > 0) {
        pthread_mutex_unlock(&g);
        return fail(r);
    }
    if (r < 0) {
        e->captured = s;
        add_node(s, (node){.kind = nodeRecord, .e = e});
        pthread_mutex_unlock(&g);
        return cudaSuccess;
    }
    e->captured = NULL;
    mark* m = malloc(sizeof *m);
    m->e = e;
    m->gen = ++e->recorded;
    pthread_mutex_unlock(&g);
    return enqueue(st, NULL, retire_mark, m);
}

API int cudaEventQuery(void* h) {
    thread_context();
    pthread_mutex_lock(&g);
    event* e = find_event(h);
    int r = !e ? cudaErrorInvalidResourceHandle : e->captured ? cudaErrorCapturedEvent
                                                : e->completed < e->recorded ? cudaErrorNotReady : cudaSuccess;
    pthread_mutex_unlock(&g);
    return r && r != cudaErrorNotReady ? fail(r) : r;
}

API int cudaEventSynchronize(void* h) {
    thread_context();
    pthread_mutex_lock(&g);
    event* e = find_event(h);
    if (!e || e->captured) {
        pthread_mutex_unlock(&g);
        return fail(e ? cudaErrorCapturedEvent : cudaErrorInvalidResourceHandle);
    }
    while (e->completed < e->recorded) pthread_cond_wait(&done_cond, &g);
    pthread_mutex_unlock(&g);
    return cudaSuccess;
}

API int cudaEventElapsedTime(float* ms, void* a, void* b) {
    thread_context();
    pthread_mutex_lock(&g);
    event *s = find_event(a), *e = find_event(b);
    int r = cudaSuccess;
    if (!ms) r = cudaErrorInvalidValue;
    else if (!s || !e) r = cudaErrorInvalidResourceHandle;
    else if (s->completed < s->recorded || e->completed < e->recorded || !s->recorded || !e->recorded) r = cudaErrorNotReady;
    else *ms = (float)((e->at.tv_sec - s->at.tv_sec) * 1e3 + (e->at.tv_nsec - s->at.tv_nsec) / 1e6);
    pthread_mutex_unlock(&g);
    return r ? fail(r) : r;
}

static void run_wait(void* p) {
    mark* m = p;
    pthread_mutex_lock(&g);
    while (m->e->completed < m->gen) pthread_cond_wait(&done_cond, &g);
    pthread_mutex_unlock(&g);
    free(m);
}

API int cudaStreamWaitEvent(void* st, void* h, unsigned flags) {
    thread_context();
    pthread_mutex_lock(&g);
    event* e = find_event(h);
    stream* s = resolve(st);
    if (!e || !s) {
        pthread_mutex_unlock(&g);
        return fail(cudaErrorInvalidResourceHandle);
    }
    int r = capture_check(st, s);
    if (r > 0 || (r == 0 && e->captured) || (r < 0 && e->captured != s)) {
        /* Inside a capture, an event from outside it crosses the boundary
         * (905); another stream joining a capture is not modelled (900). */
        if (r == 0) r = cudaErrorStreamCaptureUnsupported, invalidate(e->captured);
        else if (r < 0) r = e->captured ? cudaErrorStreamCaptureUnsupported : cudaErrorStreamCaptureIsolation, invalidate(s);
        pthread_mutex_unlock(&g);
        return fail(r);
    }
    if (r < 0) { /* recorded earlier in the same capture: the order holds */
        pthread_mutex_unlock(&g);
        return cudaSuccess;
    }
    mark* m = malloc(sizeof *m);
    m->e = e;
    m->gen = e->recorded; /* the record as of this call */
    pthread_mutex_unlock(&g);
    return enqueue(st, run_wait, NULL, m);
}

/* ---- devices ---- */

API int cudaGetDeviceCount(int* n) {
    if (!n) return fail(cudaErrorInvalidValue);
    *n = ndevices();
    return *n ? cudaSuccess : fail(cudaErrorNoDevice);
}

API int cudaSetDevice(int d) {
    if (!ndevices()) return fail(cudaErrorNoDevice);
    if (d < 0 || d >= ndevices() || d >= 64) return fail(cudaErrorInvalidDevice);
    current_device = d;
    has_context = 1;
    make_context(d);
    return cudaSuccess;
}

API int cudaGetDevice(int* d) {
    if (!d) return fail(cudaErrorInvalidValue);
    if (!ndevices()) return fail(cudaErrorNoDevice);
    *d = current_device;
    return cudaSuccess;
}

API int cudaRuntimeGetVersion(int* v) {
    if (!v) return fail(cudaErrorInvalidValue);
    *v = 12040;
    return cudaSuccess;
}

API int cudaDriverGetVersion(int* v) {
    if (!v) return fail(cudaErrorInvalidValue);
    *v = 12080;
    return cudaSuccess;
}

/* ---- memory ---- */

/* capture_guard refuses a potentially unsafe call during a capture (900) and,
 * for a call that works through device dev's legacy stream, one that would
 * join a capturing blocking stream (906); dev < 0: no legacy stream. */
static int capture_guard(int dev) {
    pthread_mutex_lock(&g);
    int r = unsafe_call() ? cudaErrorStreamCaptureUnsupported
            : dev >= 0 && dev < 64 && legacy_conflict(dev) ? cudaErrorStreamCaptureImplicit : cudaSuccess;
    pthread_mutex_unlock(&g);
    return r;
}

API int cudaMalloc(void** p, size_t n) {
    thread_context();
    if (!ndevices()) return fail(cudaErrorNoDevice);
    int r = capture_guard(-1);
    if (r) return fail(r);
    return add_alloc(p, n, current_device);
}
/* cudaFree and cudaFreeHost synchronize as CUDA's do: the memory is given back
 * only once the work queued on its device (every device, for page-locked host
 * memory) has finished, so work in flight never writes into freed memory. */
static void drain_for(void* p) {
    pthread_mutex_lock(&g);
    alloc* a = find_alloc(p);
    if (a && a->base == p) {
        if (a->dev >= 0) drain(a->dev, 1);
        else
            for (int d = 0; d < ndevices() && d < 64; d++) drain(d, 1);
    }
    pthread_mutex_unlock(&g);
}

API int cudaFree(void* p) {
    thread_context();
    int r = capture_guard(current_device);
    if (r) return fail(r);
    drain_for(p);
    return remove_alloc(p, 0);
}

/* Each fake device has 80 GiB; what its allocations hold is used. */
#define FAKE_DEVICE_BYTES (80ull << 30)
API int cudaMemGetInfo(size_t* freeb, size_t* total) {
    thread_context();
    if (!freeb || !total) return fail(cudaErrorInvalidValue);
    if (current_device >= ndevices()) return fail(cudaErrorNoDevice);
    size_t used = 0;
    pthread_mutex_lock(&g);
    for (alloc* a = allocs; a; a = a->next)
        if (a->dev == current_device) used += a->size;
    pthread_mutex_unlock(&g);
    *total = FAKE_DEVICE_BYTES;
    *freeb = used < FAKE_DEVICE_BYTES ? FAKE_DEVICE_BYTES - used : 0;
    return cudaSuccess;
}
API int cudaMallocHost(void** p, size_t n) {
    thread_context();
    int r = capture_guard(-1);
    return r ? fail(r) : add_alloc(p, n, -1);
}
API int cudaFreeHost(void* p) {
    thread_context();
    int r = capture_guard(-1);
    if (r) return fail(r);
    drain_for(p);
    return remove_alloc(p, 1);
}

enum { H2H, H2D, D2H, D2D, DEFAULT };

static int check_copy(void* dst, const void* src, size_t n, int kind) {
    if (n && (!dst || !src)) return cudaErrorInvalidValue;
    if (kind < 0 || kind > DEFAULT) return cudaErrorInvalidValue;
    int dd = kind == H2D || kind == D2D, sd = kind == D2H || kind == D2D;
    if (n && dd && fakecuda_ptr_device(dst, n) < 0) return cudaErrorInvalidValue;
    if (n && sd && fakecuda_ptr_device(src, n) < 0) return cudaErrorInvalidValue;
    return cudaSuccess;
}

typedef struct copy {
    void* dst;
    const void* src;
    size_t n;
    int value; /* memset when src is NULL */
} copy;

static void run_copy(void* p) {
    copy* c = p;
    if (c->src) memmove(c->dst, c->src, c->n);
    else memset(c->dst, c->value, c->n);
    free(c);
}

static long dma_delay_us; /* extra time a staged copy takes to land */

/* fakecuda_set_dma_delay_us makes every staged host-to-device copy land us
 * microseconds late on top of the stream's delay, so that a test can rely on
 * work issued right after the copy (even under an emulator) running first. */
API void fakecuda_set_dma_delay_us(long us) { __atomic_store_n(&dma_delay_us, us, __ATOMIC_RELAXED); }

static void run_staged_copy(void* p) {
    copy* c = p;
    long us = __atomic_load_n(&dma_delay_us, __ATOMIC_RELAXED);
    if (us > 0) usleep((useconds_t)us);
    memcpy(c->dst, c + 1, c->n);
    free(c);
}

/* pageable says whether p is host memory the runtime did not allocate. */
static int pageable(const void* p) {
    pthread_mutex_lock(&g);
    int r = find_alloc(p) == NULL;
    pthread_mutex_unlock(&g);
    return r;
}

API int cudaMemcpy(void* dst, const void* src, size_t n, int kind) {
    thread_context();
    int r = check_copy(dst, src, n, kind);
    if (r || (r = capture_guard(current_device))) return fail(r);
    pthread_mutex_lock(&g);
    drain(current_device, 0);
    pthread_mutex_unlock(&g);
    if (n && (kind == H2D || kind == DEFAULT) && fakecuda_ptr_device(dst, n) >= 0 && pageable(src)) {
        /* As CUDA: a copy from pageable host memory to the device returns
         * once the bytes are staged; the DMA lands later, on the legacy
         * stream, and work on a non-blocking stream may run before it. */
        copy* c = malloc(sizeof *c + n);
        *c = (copy){dst, NULL, n, 0};
        memcpy(c + 1, src, n);
        if ((r = enqueue(NULL, run_staged_copy, NULL, c))) {
            free(c);
            return fail(r);
        }
        return cudaSuccess;
    }
    memmove(dst, src, n);
    return cudaSuccess;
}

/* capture_or_run records n as a node when st is capturing (0), returns an
 * error, or returns -1: run it. */
static int capture_or_run(void* st, node n) {
    pthread_mutex_lock(&g);
    stream* s = resolve(st);
    int r = s ? capture_check(st, s) : 0; /* enqueue reports a bad handle */
    if (r < 0) add_node(s, n);
    pthread_mutex_unlock(&g);
    return r < 0 ? 0 : r > 0 ? r : -1;
}

API int cudaMemcpyAsync(void* dst, const void* src, size_t n, int kind, void* st) {
    thread_context();
    int r = check_copy(dst, src, n, kind);
    if (r) return fail(r);
    if ((r = capture_or_run(st, (node){.kind = nodeCopy, .dst = dst, .src = src, .n = n})) >= 0) return r ? fail(r) : r;
    if (n && pageable(src)) {
        /* As CUDA: from pageable host memory the bytes are staged during
         * the call (the caller may change them at once); the copy lands
         * later, in stream order. */
        copy* c = malloc(sizeof *c + n);
        *c = (copy){dst, NULL, n, 0};
        memcpy(c + 1, src, n);
        if ((r = enqueue(st, run_staged_copy, NULL, c))) {
            free(c);
            return fail(r);
        }
        return cudaSuccess;
    }
    copy* c = malloc(sizeof *c);
    *c = (copy){dst, src, n, 0};
    if ((r = enqueue(st, run_copy, NULL, c))) {
        free(c);
        return fail(r);
    }
    if (n && pageable(dst)) {
        /* As CUDA: into pageable host memory the call returns once the
         * copy is done (synchronous with respect to the host). */
        pthread_mutex_lock(&g);
        stream* s = resolve(st);
        while (s && s->head) pthread_cond_wait(&done_cond, &g);
        pthread_mutex_unlock(&g);
    }
    return cudaSuccess;
}

API int cudaMemset(void* p, int value, size_t n) {
    thread_context();
    if (n && fakecuda_ptr_device(p, n) < 0) return fail(cudaErrorInvalidValue);
    int r = capture_guard(current_device);
    if (r) return fail(r);
    pthread_mutex_lock(&g);
    drain(current_device, 0);
    pthread_mutex_unlock(&g);
    memset(p, value, n);
    return cudaSuccess;
}

API int cudaMemsetAsync(void* p, int value, size_t n, void* st) {
    thread_context();
    if (n && fakecuda_ptr_device(p, n) < 0) return fail(cudaErrorInvalidValue);
    int r = capture_or_run(st, (node){.kind = nodeCopy, .dst = p, .n = n, .value = value});
    if (r >= 0) return r ? fail(r) : r;
    copy* c = malloc(sizeof *c);
    *c = (copy){p, NULL, n, value};
    r = enqueue(st, run_copy, NULL, c);
    if (r) {
        free(c);
        return fail(r);
    }
    return cudaSuccess;
}

struct cudaPointerAttributes {
    int type;
    int device;
    void* devicePointer;
    void* hostPointer;
};

API int cudaPointerGetAttributes(struct cudaPointerAttributes* a, const void* p) {
    thread_context();
    if (!a) return fail(cudaErrorInvalidValue);
    memset(a, 0, sizeof *a);
    pthread_mutex_lock(&g);
    alloc* al = find_alloc(p);
    if (al && al->dev >= 0) {
        a->type = 2;
        a->device = al->dev;
        a->devicePointer = (void*)p;
    } else if (al) {
        a->type = 1;
        a->hostPointer = a->devicePointer = (void*)p;
    }
    pthread_mutex_unlock(&g);
    return cudaSuccess;
}

/* ---- host memory registration ---- */

API int cudaHostRegister(void* p, size_t size, unsigned flags) {
    thread_context();
    if (!p || !size || flags > 15) return fail(cudaErrorInvalidValue);
    int r = capture_guard(-1);
    if (r) return fail(r);
    pthread_mutex_lock(&g);
    for (alloc* a = allocs; a; a = a->next)
        if ((char*)p < a->base + a->size && a->base < (char*)p + size) {
            pthread_mutex_unlock(&g);
            return fail(cudaErrorHostMemoryAlreadyRegistered);
        }
    alloc* a = calloc(1, sizeof *a);
    a->base = p;
    a->size = size;
    a->dev = -1;
    a->registered = 1;
    a->next = allocs;
    allocs = a;
    pthread_mutex_unlock(&g);
    return cudaSuccess;
}

API int cudaHostUnregister(void* p) {
    thread_context();
    int r = capture_guard(-1);
    if (r) return fail(r);
    pthread_mutex_lock(&g);
    for (alloc** pa = &allocs; *pa; pa = &(*pa)->next) {
        alloc* a = *pa;
        if (a->base == p && a->registered) {
            *pa = a->next;
            pthread_mutex_unlock(&g);
            free(a);
            return cudaSuccess;
        }
    }
    pthread_mutex_unlock(&g);
    return fail(cudaErrorHostMemoryNotRegistered);
}

/* ---- device attributes and peer access ---- */

static int valid_device(int d) { return d >= 0 && d < ndevices() && d < 64; }

/* A fake device is an H100: compute capability 9.0, 132 SMs. */
API int cudaDeviceGetAttribute(int* v, int attr, int dev) {
    if (!v) return fail(cudaErrorInvalidValue);
    if (!valid_device(dev)) return fail(cudaErrorInvalidDevice);
    switch (attr) {
    case 10: *v = 32; break;              /* cudaDevAttrWarpSize */
    case 16: *v = 132; break;             /* cudaDevAttrMultiProcessorCount */
    case 19: *v = 1; break;               /* cudaDevAttrCanMapHostMemory */
    case 33: *v = 0x10 + dev; break;      /* cudaDevAttrPciBusId */
    case 34: *v = 0; break;               /* cudaDevAttrPciDeviceId */
    case 38: *v = 50 << 20; break;        /* cudaDevAttrL2CacheSize */
    case 41: *v = 1; break;               /* cudaDevAttrUnifiedAddressing */
    case 50: *v = 0; break;               /* cudaDevAttrPciDomainId */
    case 75: *v = 9; break;               /* cudaDevAttrComputeCapabilityMajor */
    case 76: *v = 0; break;               /* cudaDevAttrComputeCapabilityMinor */
    case 115: *v = 1; break;              /* cudaDevAttrMemoryPoolsSupported */
    default: return fail(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

/* Every pair of distinct fake devices can reach each other, unless
 * FAKECUDA_NO_PEER is set. */
API int cudaDeviceCanAccessPeer(int* can, int dev, int peer) {
    if (!can) return fail(cudaErrorInvalidValue);
    if (!valid_device(dev) || !valid_device(peer)) return fail(cudaErrorInvalidDevice);
    *can = dev != peer && !getenv("FAKECUDA_NO_PEER");
    return cudaSuccess;
}

API int cudaDeviceEnablePeerAccess(int peer, unsigned flags) {
    thread_context();
    if (flags) return fail(cudaErrorInvalidValue);
    if (!valid_device(peer) || peer == current_device || !valid_device(current_device)) return fail(cudaErrorInvalidDevice);
    if (getenv("FAKECUDA_NO_PEER")) return fail(cudaErrorInvalidDevice);
    int r = capture_guard(-1); /* refused in a capture on 4 × H100 (900): see fakecuda_connect_guard */
    if (r) return fail(r);
    pthread_mutex_lock(&g);
    int was = peer_enabled[current_device][peer];
    peer_enabled[current_device][peer] = 1;
    pthread_mutex_unlock(&g);
    return was ? fail(cudaErrorPeerAccessAlreadyEnabled) : cudaSuccess;
}

API int cudaDeviceDisablePeerAccess(int peer) {
    thread_context();
    if (!valid_device(peer) || !valid_device(current_device)) return fail(cudaErrorInvalidDevice);
    pthread_mutex_lock(&g);
    int was = peer_enabled[current_device][peer];
    peer_enabled[current_device][peer] = 0;
    pthread_mutex_unlock(&g);
    return was ? cudaSuccess : fail(cudaErrorPeerAccessNotEnabled);
}

/* ---- stream-ordered allocation ---- */

API int cudaMallocAsync(void** p, size_t n, void* st) {
    thread_context();
    if (!p) return fail(cudaErrorInvalidValue);
    pthread_mutex_lock(&g);
    stream* s = resolve(st);
    int r = !s ? cudaErrorInvalidResourceHandle : capture_check(st, s);
    int dev = s ? s->dev : 0;
    if (r < 0) invalidate(s), r = cudaErrorStreamCaptureUnsupported; /* not modelled */
    pthread_mutex_unlock(&g);
    if (r) return fail(r);
    /* The memory exists at once; CUDA makes it usable in stream order. */
    return add_alloc(p, n, dev);
}

static void run_free(void* p) { remove_alloc(p, 0); }

API int cudaFreeAsync(void* p, void* st) {
    thread_context();
    pthread_mutex_lock(&g);
    alloc* a = find_alloc(p);
    int bad = !a || a->base != p || a->dev < 0;
    stream* s = resolve(st);
    int r = !s ? cudaErrorInvalidResourceHandle : capture_check(st, s);
    if (r < 0) invalidate(s), r = cudaErrorStreamCaptureUnsupported; /* not modelled */
    pthread_mutex_unlock(&g);
    if (bad) return fail(cudaErrorInvalidValue);
    if (r) return fail(r);
    return (r = enqueue(st, run_free, NULL, p)) ? fail(r) : r;
}

/* ---- stream capture and graphs ---- */

#define GRAPH_MAGIC 0x47524150u
#define EXEC_MAGIC 0x47455845u
typedef struct graph {
    unsigned magic;
    node* nodes;
    struct graph* next;
} graph;
static graph *graphs, *execs; /* live cudaGraph_t and cudaGraphExec_t */

static graph* find_graph(graph* list, void* h) {
    for (graph* x = list; x; x = x->next)
        if (x == h) return x;
    return NULL;
}

/* copy_nodes copies a node list, sharing its NCCL items (g held). */
static node* copy_nodes(const node* n) {
    node *head = NULL, **tail = &head;
    for (; n; n = n->next) {
        node* c = malloc(sizeof *c);
        *c = *n;
        c->next = NULL;
        if (c->kind == nodeHost) c->h->refs++;
        *tail = c;
        tail = &c->next;
    }
    return head;
}

API int cudaStreamBeginCapture(void* h, int mode) {
    thread_context();
    if (mode < modeGlobal || mode > modeRelaxed) return fail(cudaErrorInvalidValue);
    if (!h) return fail(cudaErrorStreamCaptureUnsupported); /* the legacy stream cannot capture */
    pthread_mutex_lock(&g);
    stream* s = resolve(h);
    int r = !s ? cudaErrorInvalidResourceHandle : s->cap != capNone ? cudaErrorIllegalState : cudaSuccess;
    if (!r) {
        s->cap = capActive;
        s->cap_mode = mode;
        s->cap_thread = pthread_self();
        s->cap_head = s->cap_tail = NULL;
    }
    pthread_mutex_unlock(&g);
    return r ? fail(r) : r;
}

API int cudaStreamEndCapture(void* h, void** out) {
    thread_context();
    if (!out) return fail(cudaErrorInvalidValue);
    if (!h) return fail(cudaErrorIllegalState);
    pthread_mutex_lock(&g);
    stream* s = resolve(h);
    int r = !s ? cudaErrorInvalidResourceHandle : s->cap == capNone ? cudaErrorIllegalState : cudaSuccess;
    if (!r && s->cap_mode != modeRelaxed && !pthread_equal(s->cap_thread, pthread_self()))
        r = cudaErrorStreamCaptureWrongThread; /* the capture stays open */
    if (r) {
        pthread_mutex_unlock(&g);
        return fail(r);
    }
    for (event* e = events; e; e = e->next)
        if (e->captured == s) e->captured = NULL;
    node* nodes = s->cap_head;
    int invalid = s->cap == capInvalidated;
    s->cap = capNone;
    s->cap_head = s->cap_tail = NULL;
    *out = NULL;
    if (invalid) {
        pthread_mutex_unlock(&g);
        free_nodes(nodes); /* the NCCL's items recorded go back to it */
        return fail(cudaErrorStreamCaptureInvalidated);
    }
    graph* gr = calloc(1, sizeof *gr);
    gr->magic = GRAPH_MAGIC;
    gr->nodes = nodes;
    gr->next = graphs;
    graphs = gr;
    pthread_mutex_unlock(&g);
    *out = gr;
    return cudaSuccess;
}

API int cudaStreamIsCapturing(void* h, int* status) {
    thread_context();
    if (!status) return fail(cudaErrorInvalidValue);
    pthread_mutex_lock(&g);
    stream* s = resolve(h);
    int r = !s ? cudaErrorInvalidResourceHandle : !h && legacy_conflict(s->dev) ? cudaErrorStreamCaptureImplicit : cudaSuccess;
    if (!r) *status = s->cap;
    pthread_mutex_unlock(&g);
    return r ? fail(r) : r;
}

static int instantiate(void** out, void* gh, unsigned long long flags) {
    if (!out || flags > 15) return fail(cudaErrorInvalidValue);
    pthread_mutex_lock(&g);
    graph* gr = find_graph(graphs, gh);
    if (!gr) {
        pthread_mutex_unlock(&g);
        return fail(cudaErrorInvalidResourceHandle);
    }
    if (unsafe_call()) {
        pthread_mutex_unlock(&g);
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    graph* x = calloc(1, sizeof *x);
    x->magic = EXEC_MAGIC;
    x->nodes = copy_nodes(gr->nodes);
    x->next = execs;
    execs = x;
    pthread_mutex_unlock(&g);
    *out = x;
    return cudaSuccess;
}

/* Both CUDA 12+ forms: cudaGraphInstantiate took (exec, graph, errNode, log,
 * logSize) before CUDA 12; gonccl calls cudaGraphInstantiateWithFlags. */
API int cudaGraphInstantiateWithFlags(void** out, void* gh, unsigned long long flags) { return instantiate(out, gh, flags); }
API int cudaGraphInstantiate(void** out, void* gh, unsigned long long flags) { return instantiate(out, gh, flags); }

API int cudaGraphLaunch(void* xh, void* st) {
    thread_context();
    pthread_mutex_lock(&g);
    graph* x = find_graph(execs, xh);
    stream* s = resolve(st);
    int r = !x || !s ? cudaErrorInvalidResourceHandle : capture_check(st, s);
    if (r > 0) {
        pthread_mutex_unlock(&g);
        return fail(r);
    }
    for (node* n = x->nodes; n; n = n->next) {
        if (r < 0) { /* launched inside a capture: the nodes join it */
            add_node(s, *n);
            if (n->kind == nodeRecord) n->e->captured = s;
            if (n->kind == nodeHost) n->h->refs++;
        } else if (n->kind == nodeHost) {
            launch_host(s, n->h);
        } else if (n->kind == nodeCopy) {
            copy* c = malloc(sizeof *c);
            *c = (copy){n->dst, n->src, n->n, n->value};
            push(s, run_copy, NULL, c);
        } else {
            mark* m = malloc(sizeof *m);
            m->e = n->e;
            m->gen = ++n->e->recorded;
            n->e->captured = NULL;
            push(s, NULL, retire_mark, m);
        }
    }
    pthread_mutex_unlock(&g);
    return cudaSuccess;
}

/* cudaGraphUpload: the fake's graphs need no upload (each launch enqueues
 * the nodes afresh), so it checks the handles and the stream as a launch
 * does and enqueues nothing. */
API int cudaGraphUpload(void* xh, void* st) {
    thread_context();
    pthread_mutex_lock(&g);
    graph* x = find_graph(execs, xh);
    stream* s = resolve(st);
    int r = !x || !s ? cudaErrorInvalidResourceHandle : capture_check(st, s);
    pthread_mutex_unlock(&g);
    return r > 0 ? fail(r) : cudaSuccess;
}

static int destroy_graph(graph** list, void* h) {
    pthread_mutex_lock(&g);
    for (graph** px = list; *px; px = &(*px)->next)
        if (*px == h) {
            graph* x = *px;
            *px = x->next;
            pthread_mutex_unlock(&g);
            free_nodes(x->nodes);
            free(x);
            return cudaSuccess;
        }
    pthread_mutex_unlock(&g);
    return fail(cudaErrorInvalidResourceHandle);
}

/* cudaGraphDebugDotPrint writes a graph's nodes in capture order, each
 * depending on the one before, as DOT: a kernel node for each of the fake
 * NCCL's launches, a memset or memcpy node for each copy, an event record
 * node for each record; flags bit 0 (cudaGraphDebugDotFlagsVerbose) adds
 * their parameters. A path that cannot be written is cudaErrorOperatingSystem,
 * as CUDA answers. */
API int cudaGraphDebugDotPrint(void* gh, const char* path, unsigned flags) {
    thread_context();
    if (!path) return fail(cudaErrorInvalidValue);
    pthread_mutex_lock(&g);
    graph* x = find_graph(graphs, gh);
    if (!x) {
        pthread_mutex_unlock(&g);
        return fail(cudaErrorInvalidResourceHandle);
    }
    FILE* f = fopen(path, "w");
    if (!f) {
        pthread_mutex_unlock(&g);
        return fail(cudaErrorOperatingSystem);
    }
    fprintf(f, "digraph dot {\n");
    int i = 0;
    for (node* n = x->nodes; n; n = n->next, i++) {
        const char* kind = n->kind == nodeHost ? "KERNEL" : n->kind == nodeRecord ? "EVENT_RECORD" : n->src ? "MEMCPY" : "MEMSET";
        fprintf(f, "\"node%d\" [label=\"%d: %s", i, i, kind);
        if (flags & 1) {
            if (n->kind == nodeHost) fprintf(f, "\\nfakenccl launch %p", n->h->arg);
            else if (n->kind == nodeRecord) fprintf(f, "\\nevent %p", (void*)n->e);
            else if (n->src) fprintf(f, "\\n%zu bytes %p -> %p", n->n, n->src, n->dst);
            else fprintf(f, "\\n%zu bytes of %d at %p", n->n, n->value, n->dst);
        }
        fprintf(f, "\"];\n");
        if (i > 0) fprintf(f, "\"node%d\" -> \"node%d\";\n", i - 1, i);
    }
    fprintf(f, "}\n");
    pthread_mutex_unlock(&g);
    return fclose(f) == 0 ? cudaSuccess : fail(cudaErrorOperatingSystem);
}

API int cudaGraphExecDestroy(void* h) { return destroy_graph(&execs, h); }
API int cudaGraphDestroy(void* h) { return destroy_graph(&graphs, h); }

/* fakecuda_live_graphs counts graphs and executable graphs not destroyed. */
API long fakecuda_live_graphs(void) {
    thread_context();
    long n = 0;
    pthread_mutex_lock(&g);
    for (graph* x = graphs; x; x = x->next) n++;
    for (graph* x = execs; x; x = x->next) n++;
    pthread_mutex_unlock(&g);
    return n;
}

/* ---- errors ---- */

API const char* cudaGetErrorName(int e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorPeerAccessAlreadyEnabled: return "cudaErrorPeerAccessAlreadyEnabled";
    case cudaErrorPeerAccessNotEnabled: return "cudaErrorPeerAccessNotEnabled";
    case cudaErrorHostMemoryAlreadyRegistered: return "cudaErrorHostMemoryAlreadyRegistered";
    case cudaErrorHostMemoryNotRegistered: return "cudaErrorHostMemoryNotRegistered";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureIsolation: return "cudaErrorStreamCaptureIsolation";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
    case cudaErrorCapturedEvent: return "cudaErrorCapturedEvent";
    case cudaErrorStreamCaptureWrongThread: return "cudaErrorStreamCaptureWrongThread";
    case cudaErrorOperatingSystem: return "cudaErrorOperatingSystem";
    }
    return "cudaErrorUnknown";
}

API const char* cudaGetErrorString(int e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorPeerAccessAlreadyEnabled: return "peer access is already enabled";
    case cudaErrorPeerAccessNotEnabled: return "peer access has not been enabled";
    case cudaErrorHostMemoryAlreadyRegistered: return "part or all of the requested memory range is already mapped";
    case cudaErrorHostMemoryNotRegistered: return "pointer does not correspond to a registered memory region";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorCapturedEvent: return "operation not permitted on an event last recorded in a capturing stream";
    case cudaErrorStreamCaptureWrongThread: return "attempt to terminate a thread-local capture sequence from another thread";
    case cudaErrorOperatingSystem: return "OS call failed or operation not supported on this OS";
    }
    return "unknown error";
}

API int cudaGetLastError(void) {
    int e = last_error;
    last_error = 0;
    return e;
}

API int cudaPeekAtLastError(void) { return last_error; }
