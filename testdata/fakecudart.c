/* A fake CUDA runtime for gonccl's tests: "device memory" is host memory tagged
 * with its device, and every stream is a worker thread that runs its work in
 * order, later than it was enqueued (FAKECUDA_DELAY_US per item, default 200),
 * so a missing synchronize shows up as wrong data. Exports the CUDA runtime
 * functions gonccl calls, with CUDA's error codes, plus fakecuda_* helpers for
 * the fake NCCL. */
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
    cudaErrorNoDevice = 100, cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400, cudaErrorNotReady = 600,
};

static pthread_mutex_t g = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER; /* any work item finished */
static __thread int current_device;
static __thread int last_error;

static int ndevices(void) {
    static int n = -1;
    if (n < 0) {
        const char* s = getenv("FAKECUDA_DEVICES");
        n = s ? atoi(s) : 8;
    }
    return n;
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
        if (a->base == p && (a->dev < 0) == host) {
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
    int stop;
    item *head, *tail; /* head stays queued while it runs */
    pthread_cond_t work;
    struct stream* next;
} stream;
static stream* streams;              /* live streams */
static stream* dying;                /* destroyed streams still running their queue */
static stream* legacy[64];           /* the per-device NULL stream */

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

static int enqueue_on(void* h, int dev, void (*fn)(void*), void (*retire)(void*), void* arg) {
    pthread_mutex_lock(&g);
    stream* s = resolve_on(h, dev);
    if (!s) {
        pthread_mutex_unlock(&g);
        return cudaErrorInvalidResourceHandle;
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
 * the legacy stream of the communicator's device, whatever thread launches. */
API int fakecuda_stream_enqueue(void* h, int dev, void (*fn)(void*), void* arg) { return enqueue_on(h, dev, fn, NULL, arg); }

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

API int cudaStreamCreateWithFlags(void** out, unsigned flags) {
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
    pthread_mutex_lock(&g);
    for (stream** ps = &streams; *ps; ps = &(*ps)->next) {
        if (*ps == h) {
            stream* s = *ps;
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
    pthread_mutex_lock(&g);
    stream* s = resolve(h);
    if (!s) {
        pthread_mutex_unlock(&g);
        return fail(cudaErrorInvalidResourceHandle);
    }
    while (s->head) pthread_cond_wait(&done_cond, &g);
    pthread_mutex_unlock(&g);
    return cudaSuccess;
}

API int cudaStreamQuery(void* h) {
    pthread_mutex_lock(&g);
    stream* s = resolve(h);
    int r = !s ? cudaErrorInvalidResourceHandle : s->head ? cudaErrorNotReady : cudaSuccess;
    pthread_mutex_unlock(&g);
    return r == cudaErrorInvalidResourceHandle ? fail(r) : r;
}

API int cudaDeviceSynchronize(void) {
    if (current_device >= ndevices()) return fail(cudaErrorNoDevice);
    pthread_mutex_lock(&g);
    drain(current_device, 1);
    pthread_mutex_unlock(&g);
    return cudaSuccess;
}

/* ---- events ---- */

#define EVENT_MAGIC 0x45564e54u
typedef struct event {
    unsigned magic;
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
    pthread_mutex_lock(&g);
    event* e = find_event(h);
    if (!e || !resolve(st)) {
        pthread_mutex_unlock(&g);
        return fail(cudaErrorInvalidResourceHandle);
    }
    mark* m = malloc(sizeof *m);
    m->e = e;
    m->gen = ++e->recorded;
    pthread_mutex_unlock(&g);
    return enqueue(st, NULL, retire_mark, m);
}

API int cudaEventQuery(void* h) {
    pthread_mutex_lock(&g);
    event* e = find_event(h);
    int r = !e ? cudaErrorInvalidResourceHandle : e->completed < e->recorded ? cudaErrorNotReady : cudaSuccess;
    pthread_mutex_unlock(&g);
    return r == cudaErrorInvalidResourceHandle ? fail(r) : r;
}

API int cudaEventSynchronize(void* h) {
    pthread_mutex_lock(&g);
    event* e = find_event(h);
    if (!e) {
        pthread_mutex_unlock(&g);
        return fail(cudaErrorInvalidResourceHandle);
    }
    while (e->completed < e->recorded) pthread_cond_wait(&done_cond, &g);
    pthread_mutex_unlock(&g);
    return cudaSuccess;
}

API int cudaEventElapsedTime(float* ms, void* a, void* b) {
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
    pthread_mutex_lock(&g);
    event* e = find_event(h);
    if (!e || !resolve(st)) {
        pthread_mutex_unlock(&g);
        return fail(cudaErrorInvalidResourceHandle);
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

API int cudaMalloc(void** p, size_t n) {
    if (!ndevices()) return fail(cudaErrorNoDevice);
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
    drain_for(p);
    return remove_alloc(p, 0);
}

/* Each fake device has 80 GiB; what its allocations hold is used. */
#define FAKE_DEVICE_BYTES (80ull << 30)
API int cudaMemGetInfo(size_t* freeb, size_t* total) {
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
API int cudaMallocHost(void** p, size_t n) { return add_alloc(p, n, -1); }
API int cudaFreeHost(void* p) {
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
    int r = check_copy(dst, src, n, kind);
    if (r) return fail(r);
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

API int cudaMemcpyAsync(void* dst, const void* src, size_t n, int kind, void* st) {
    int r = check_copy(dst, src, n, kind);
    if (r) return fail(r);
    copy* c = malloc(sizeof *c);
    *c = (copy){dst, src, n, 0};
    if ((r = enqueue(st, run_copy, NULL, c))) {
        free(c);
        return fail(r);
    }
    return cudaSuccess;
}

API int cudaMemset(void* p, int value, size_t n) {
    if (n && fakecuda_ptr_device(p, n) < 0) return fail(cudaErrorInvalidValue);
    pthread_mutex_lock(&g);
    drain(current_device, 0);
    pthread_mutex_unlock(&g);
    memset(p, value, n);
    return cudaSuccess;
}

API int cudaMemsetAsync(void* p, int value, size_t n, void* st) {
    if (n && fakecuda_ptr_device(p, n) < 0) return fail(cudaErrorInvalidValue);
    copy* c = malloc(sizeof *c);
    *c = (copy){p, NULL, n, value};
    int r = enqueue(st, run_copy, NULL, c);
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
    }
    return "unknown error";
}

API int cudaGetLastError(void) {
    int e = last_error;
    last_error = 0;
    return e;
}

API int cudaPeekAtLastError(void) { return last_error; }
