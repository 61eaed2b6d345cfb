/* A fake NCCL for gonccl's tests, over the fake CUDA runtime (fakecudart.c).
 *
 * It behaves like NCCL where a binding can go wrong: the unique id travels by
 * value and is checked byte for byte; ncclCommInitRank blocks until every rank
 * has joined; operations are checked with NCCL's result codes and last-error
 * text, then run later on the stream's worker thread, meeting the other ranks'
 * workers; group depth and pending operations belong to the calling thread;
 * results are exact for every data type and reduction.
 *
 * Ranks in different processes meet as NCCL's bootstrap makes them, over
 * loopback TCP. The id carries the rendezvous address and the pid of the
 * process that made it: ncclGetUniqueId starts a root in this process (one
 * listening socket and thread per process, shared by its ids), and with
 * NCCL_COMM_ID=host:port rank 0's init listens at that address until every
 * rank has joined ("Call to bind failed: Address already in use" if it can't).
 * The process serving the rendezvous is the hub: its own ranks meet as ranks
 * of one process always did, and each rank of another process is a proxy
 * communicator there, fed over that rank's TCP connection: its collectives
 * send their input and get their output back, computed at the hub by the same
 * code, so results stay exact; point-to-point batches, splits and the
 * rendezvous of symmetric windows go the same way. A clique made by
 * ncclCommSplit lives in the process of its new rank 0 (NCCL bootstraps a
 * split from the new root). The hub carries its remote ranks' traffic: its
 * own ranks end an operation only once the remote ranks have their answers,
 * and its Finalize/Destroy lets the last answers (and one-sided puts and
 * signals still held for remote ranks) leave, up to 2 s, since the process
 * may exit next; it must outlive the work of its cliques. A peer's death is
 * not detected: whoever waits for it waits until aborted or revoked.
 *
 * Fault tolerance and one-sided RMA work across processes too (2.28.7-2.30,
 * see their sections): ncclCommRevoke needs no peer (a remote rank lets its
 * connection go, so a dead hub is never waited for); ncclCommShrink's staying
 * ranks meet without the parent's hub, which may be the dead process, in the
 * process of the lowest staying rank (an abstract Unix socket named by the new
 * clique's key); a grow id carries the root of the process that made it,
 * where the grown clique lives and every rank of another process joins (the
 * existing ranks that pass no id learn it from their hub); puts and signals
 * between processes go through the hub, a remote rank's bytes landing when
 * its ncclWaitSignal takes the signal. Not across processes: splitting a
 * revoked communicator (ncclInvalidUsage, saying so).
 *
 * Every collective is checked across ranks: a rank calling another operation,
 * count, type, reduction or root than the others fails it on every rank
 * (stderr, the last error, and the communicator's async error becomes
 * ncclInvalidUsage) and no data moves.
 *
 * Groups and aborts fail as NCCL's do (2.28-2.30): a call failing inside a
 * group discards the whole group and gives its error to every non-blocking
 * member, which only ncclCommAbort frees then (discard_group); a discarded
 * Send/Recv leaves NCCL's per-peer connection flags set, and the next setup of
 * that connection fails on both sides (p2p_stale); a non-blocking group runs
 * on a thread of its own, a job that the first successful poll of a member
 * completes, and two threads completing one job stop the process
 * (job_complete); so do ncclCommAbort beside another thread's call on the
 * same communicator (call_enter, release_begin) and a communicator freed
 * under another thread's open group (group_check_freed). A one-rank
 * communicator's collective runs at the call, in a group too.
 *
 * Connections are made lazily, as NCCL 2.22+ does (NCCL_RUNTIME_CONNECT=0
 * turns that off): a communicator's first operation waits inside the call
 * (at ncclGroupEnd for a group; in the launch thread of a non-blocking
 * communicator) until the ranks it needs (every rank for a collective, the
 * peers for sends and receives) have issued their first operation too. One
 * thread driving several ranks without a group deadlocks there, as in NCCL;
 * after 10 s (FAKENCCL_CONNECT_WARN_MS) it says so on stderr, and waits on.
 *
 * CUDA graphs: an operation enqueued on a capturing stream (collectives,
 * point-to-point alone or grouped, AlltoAllv, one-sided RMA) is recorded into
 * the graph, through the fake CUDA runtime, instead of running: checked and
 * connected at the call, as NCCL plans and connects at capture time, but not
 * numbered. Each cudaGraphLaunch runs a fresh copy of it in stream order,
 * numbered then among the communicator's operations, so a launch is
 * collective as in NCCL: every rank must capture the same operations, and
 * rank 0's k-th launch meets rank 1's k-th launch (or its matching direct
 * call); it completes only once the peers have launched theirs, and a
 * mismatch fails at launch as a direct call's does. Ranks of other processes
 * can be captured too: their launches take their turn on the connection to
 * the hub as direct calls do. A communicator counts the captured launches that
 * live graphs hold (NCCL's localPersistentRefs); from 2.26 its ncclCommDestroy
 * and ncclCommAbort wait, without error, until the graphs (executable graphs
 * and the graphs they came from, and launches still in flight) are destroyed,
 * as NCCL's commDestroySync does, saying so once on stderr after
 * FAKENCCL_CONNECT_WARN_MS (real NCCL waits silently); before 2.26 they do
 * not wait, and launching such a graph afterwards stops the process loudly
 * (the use of freed memory real NCCL would make). Not modelled: NCCL's
 * graph-mixing and persistent-buffer rules (NCCL_GRAPH_MIXING_SUPPORT), user
 * buffer registration through graphs, and a non-blocking communicator's
 * destroy running asynchronously (it blocks in the call).
 *
 * Variants: the default is NCCL 2.28.3; -DFAKENCCL_OLD is 2.14.3 (no Split,
 * Register, MemAlloc, windows, AlltoAll/Gather/Scatter, InitRankScalable, fp8);
 * -DFAKENCCL_VCCL=11 or =10 is VCCL 2.29.2 with ncclAlltoAllv in that ABI;
 * -DFAKENCCL_230 is NCCL 2.30.7 with the newer host API (revoke, grow, ...);
 * -DFAKENCCL_BROKEN lacks ncclCommInitRank; -DFAKENCCL_VERSION_CODE=N reports N.
 * Registering a symmetric window is collective, as in NCCL: every rank of the
 * communicator must call it, and each call waits for the others.
 * FAKENCCL_NULL_WINDOW=1 makes ncclCommWindowRegister succeed with no window. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

#if defined(FAKENCCL_OLD)
#define VERSION_CODE 21403
#define HAS_228 0
#define NUM_TYPES 10
#elif defined(FAKENCCL_230)
#define VERSION_CODE 23007
#define HAS_228 1
#define NUM_TYPES 12
#elif defined(FAKENCCL_VCCL)
#define VERSION_CODE 22902
#define HAS_228 1
#define NUM_TYPES 12
#else
#define VERSION_CODE 22803
#define HAS_228 1
#define NUM_TYPES 12
#endif
/* HAS_230: the 2.28.7-2.30 host API (revoke, grow, one-sided RMA, suspend, ...). */
#ifdef FAKENCCL_230
#define HAS_230 1
#else
#define HAS_230 0
#endif
#ifdef FAKENCCL_VERSION_CODE
#undef VERSION_CODE
#define VERSION_CODE FAKENCCL_VERSION_CODE
#endif
/* GRAPH_WAIT: NCCL >= 2.26 makes ncclCommDestroy and ncclCommAbort wait until
 * the CUDA graphs holding the communicator's captured work are destroyed. */
#define GRAPH_WAIT (VERSION_CODE >= 22600)

typedef enum { ncclSuccess, ncclUnhandledCudaError, ncclSystemError, ncclInternalError, ncclInvalidArgument,
               ncclInvalidUsage, ncclRemoteError, ncclInProgress } ncclResult_t;
enum { tInt8, tUint8, tInt32, tUint32, tInt64, tUint64, tFloat16, tFloat32, tFloat64, tBfloat16, tE4M3, tE5M2 };
enum { opSum, opProd, opMax, opMin, opAvg, opPreMul };
typedef struct { char internal[128]; } ncclUniqueId;

/* From the fake CUDA runtime. */
int fakecuda_ptr_device(const void* p, size_t len);
int fakecuda_stream_enqueue(void* stream, int dev, void (*fn)(void*), void* arg);
int fakecuda_stream_capturing(void* stream, int dev);
int fakecuda_stream_enqueue_graphable(void* stream, int dev, void (*run)(void*), void* arg, void* (*clone)(void*),
                                      void (*release)(void*));
int fakecuda_current_device(void);
int cudaMalloc(void** p, size_t n);
int cudaFree(void* p);

/* ---- errors: NCCL keeps one last-error buffer for the whole process ---- */

static pthread_mutex_t errmu = PTHREAD_MUTEX_INITIALIZER;
static char last_error[1024];
static __thread char my_error[1024]; /* this thread's last failure: what a hub answers a remote rank */

static ncclResult_t fail(ncclResult_t r, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(my_error, sizeof my_error, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&errmu);
    memcpy(last_error, my_error, sizeof last_error);
    pthread_mutex_unlock(&errmu);
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

/* ---- loopback TCP: addresses, sockets, messages ---- */

typedef struct {
    int family; /* 4 or 6; 1: an abstract Unix socket named by addr[0..7] (a shrink's rendezvous) */
    unsigned char addr[16];
    int port;
} netaddr;

/* parse_addr reads host:port, [v6]:port or name:port (resolved, IPv4 first). */
static int parse_addr(const char* s, netaddr* a) {
    char host[256];
    const char* colon;
    size_t n;
    if (*s == '[') {
        const char* end = strchr(s, ']');
        if (!end || end[1] != ':') return -1;
        n = (size_t)(end - s - 1);
        if (n == 0 || n >= sizeof host) return -1;
        memcpy(host, s + 1, n);
        colon = end + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon) return -1;
        n = (size_t)(colon - s);
        if (n == 0 || n >= sizeof host || memchr(s, ':', n)) return -1; /* a bare IPv6 address needs brackets */
        memcpy(host, s, n);
    }
    host[n] = 0;
    char* end;
    long port = strtol(colon + 1, &end, 10);
    if (colon[1] < '0' || colon[1] > '9' || *end || port < 1 || port > 65535) return -1;
    memset(a, 0, sizeof *a);
    a->port = (int)port;
    if (inet_pton(AF_INET, host, a->addr) == 1) {
        a->family = 4;
        return 0;
    }
    if (inet_pton(AF_INET6, host, a->addr) == 1) {
        a->family = 6;
        return 0;
    }
    struct addrinfo hints, *res, *p;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, NULL, &hints, &res)) return -1;
    int found = 0;
    for (p = res; p && !found; p = p->ai_next) /* IPv4 first */
        if (p->ai_family == AF_INET) {
            memcpy(a->addr, &((struct sockaddr_in*)p->ai_addr)->sin_addr, 4);
            a->family = 4;
            found = 1;
        }
    for (p = res; p && !found; p = p->ai_next)
        if (p->ai_family == AF_INET6) {
            memcpy(a->addr, &((struct sockaddr_in6*)p->ai_addr)->sin6_addr, 16);
            a->family = 6;
            found = 1;
        }
    freeaddrinfo(res);
    return found ? 0 : -1;
}

static socklen_t to_sockaddr(const netaddr* a, struct sockaddr_storage* ss) {
    memset(ss, 0, sizeof *ss);
    if (a->family == 1) {
        struct sockaddr_un* su = (struct sockaddr_un*)ss;
        uint64_t k;
        memcpy(&k, a->addr, 8);
        su->sun_family = AF_UNIX;
        int n = snprintf(su->sun_path + 1, sizeof su->sun_path - 1, "fakenccl-%016llx", (unsigned long long)k);
        return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
    }
    if (a->family == 6) {
        struct sockaddr_in6* s6 = (struct sockaddr_in6*)ss;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)a->port);
        memcpy(&s6->sin6_addr, a->addr, 16);
        return sizeof *s6;
    }
    struct sockaddr_in* s4 = (struct sockaddr_in*)ss;
    s4->sin_family = AF_INET;
    s4->sin_port = htons((uint16_t)a->port);
    memcpy(&s4->sin_addr, a->addr, 4);
    return sizeof *s4;
}

static void nodelay(int fd) {
    int one = 1; /* fails harmlessly on a Unix socket */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* listen_on binds and listens at a (port 0: an ephemeral port, written back);
 * -1 with errno set on failure. */
static int listen_on(netaddr* a) {
    struct sockaddr_storage ss;
    socklen_t len = to_sockaddr(a, &ss);
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr*)&ss, len) || listen(fd, 128)) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    if (a->port == 0 && a->family != 1) {
        len = sizeof ss;
        getsockname(fd, (struct sockaddr*)&ss, &len);
        a->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6*)&ss)->sin6_port : ((struct sockaddr_in*)&ss)->sin_port);
    }
    return fd;
}

static int connect_to(const netaddr* a) {
    struct sockaddr_storage ss;
    socklen_t len = to_sockaddr(a, &ss);
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (connect(fd, (struct sockaddr*)&ss, len)) {
        close(fd);
        return -1;
    }
    nodelay(fd);
    return fd;
}

static int send_all(int fd, const void* p, size_t n) {
    const char* b = p;
    while (n) {
        ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

static int recv_all(int fd, void* p, size_t n) {
    char* b = p;
    while (n) {
        ssize_t k = recv(fd, b, n, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

/* A message: a fixed header (type, payload length; little-endian, as every
 * host gonccl runs on), then the payload. */
enum { M_JOIN = 1, M_CONNECT, M_COLL, M_P2P, M_SPLIT, M_WIN, M_REPLY, M_NOTE, M_PUT, M_WAITSIG, M_GROWID, M_GROWGET };
typedef struct {
    uint32_t type, pad;
    uint64_t len;
} hdr;

/* The most one message may carry: the fakes' buffers are host memory, and a
 * larger length is a desynchronised or hostile peer. */
#define MAX_WIRE ((uint64_t)16 << 30)

typedef struct {
    char* p;
    size_t n, cap;
} wbuf;

static void wb_put(wbuf* b, const void* v, size_t k) {
    if (b->n + k > b->cap) {
        b->cap = (b->n + k) * 2 + 256;
        b->p = realloc(b->p, b->cap);
    }
    if (k) memcpy(b->p + b->n, v, k);
    b->n += k;
}
static void wb_start(wbuf* b, uint32_t type) {
    hdr h = {type, 0, 0};
    b->n = 0;
    wb_put(b, &h, sizeof h);
}
static void wb_i32(wbuf* b, int32_t v) { wb_put(b, &v, 4); }
static void wb_i64(wbuf* b, int64_t v) { wb_put(b, &v, 8); }
static void wb_u64(wbuf* b, uint64_t v) { wb_put(b, &v, 8); }
static void wb_str(wbuf* b, const char* s) {
    int32_t n = (int32_t)strlen(s);
    wb_i32(b, n);
    wb_put(b, s, (size_t)n);
}
__attribute__((unused)) static void wb_addr(wbuf* b, const netaddr* a) {
    wb_i32(b, a->family);
    wb_i32(b, a->port);
    wb_put(b, a->addr, 16);
}
static int wb_send(int fd, wbuf* b) {
    uint64_t len = b->n - sizeof(hdr);
    memcpy(b->p + offsetof(hdr, len), &len, 8);
    return send_all(fd, b->p, b->n);
}

typedef struct {
    const char* p;
    size_t n, off;
    int bad;
} rbuf;

static const char* rb_take(rbuf* r, size_t k) {
    if (r->bad || k > r->n - r->off) {
        r->bad = 1;
        return NULL;
    }
    const char* p = r->p + r->off;
    r->off += k;
    return p;
}
static int32_t rb_i32(rbuf* r) {
    int32_t v = 0;
    const char* p = rb_take(r, 4);
    if (p) memcpy(&v, p, 4);
    return v;
}
static int64_t rb_i64(rbuf* r) {
    int64_t v = 0;
    const char* p = rb_take(r, 8);
    if (p) memcpy(&v, p, 8);
    return v;
}
static uint64_t rb_u64(rbuf* r) { return (uint64_t)rb_i64(r); }
/* rb_str copies a string into out (NUL-terminated, cut to n-1). */
static void rb_str(rbuf* r, char* out, size_t n) {
    int32_t k = rb_i32(r);
    const char* p = k >= 0 ? rb_take(r, (size_t)k) : NULL;
    size_t m = p ? ((size_t)k < n - 1 ? (size_t)k : n - 1) : 0;
    if (m) memcpy(out, p, m);
    out[m] = 0;
}
__attribute__((unused)) static void rb_addr(rbuf* r, netaddr* a) {
    a->family = rb_i32(r);
    a->port = rb_i32(r);
    const char* p = rb_take(r, 16);
    if (p) memcpy(a->addr, p, 16);
}

/* recv_msg reads one message, blocking; the payload is malloc'd. */
static int recv_msg(int fd, uint32_t* type, char** payload, size_t* n) {
    hdr h;
    if (recv_all(fd, &h, sizeof h) || h.len > MAX_WIRE) return -1;
    char* p = malloc(h.len ? h.len : 1);
    if (!p || recv_all(fd, p, h.len)) {
        free(p);
        return -1;
    }
    *type = h.type;
    *payload = p;
    *n = h.len;
    return 0;
}

/* ---- unique ids ----
 *
 *   0   "FKID"
 *   4   key (the clique's name at the hub)
 *  12   flags: 1 = derived from NCCL_COMM_ID (rank 0's init listens there);
 *          2 = a grow id (ncclCommGetUniqueId): new ranks join the process that made it
 *  13   address family (4, 6)
 *  14   port
 *  16   address (16 bytes)
 *  32   pid of the process that made the id (0 from NCCL_COMM_ID)
 *  36.. filler derived from bytes 4 to 35: a changed byte anywhere is seen */

typedef struct {
    uint64_t key;
    int from_env, grow;
    netaddr at;
    uint32_t pid;
} idinfo;

static uint64_t xorshift(uint64_t* s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void fill_id(ncclUniqueId* id, const idinfo* d) {
    unsigned char* b = (unsigned char*)id->internal;
    memset(b, 0, 128);
    memcpy(b, "FKID", 4);
    memcpy(b + 4, &d->key, 8);
    b[12] = (unsigned char)(d->from_env | d->grow << 1);
    b[13] = (unsigned char)d->at.family;
    b[14] = (unsigned char)(d->at.port >> 8);
    b[15] = (unsigned char)d->at.port;
    memcpy(b + 16, d->at.addr, 16);
    memcpy(b + 32, &d->pid, 4);
    uint64_t s = 1469598103934665603ull;
    for (int i = 4; i < 36; i++) s = (s ^ b[i]) * 1099511628211ull;
    s |= 1;
    for (int i = 36; i < 128; i++) b[i] = (unsigned char)xorshift(&s);
}

/* check_id reads the id, or returns -1 after setting the error for a mangled one. */
static int check_id(const ncclUniqueId* id, const char* fn, idinfo* d) {
    const unsigned char* b = (const unsigned char*)id->internal;
    memset(d, 0, sizeof *d);
    memcpy(&d->key, b + 4, 8);
    d->from_env = b[12] & 1;
    d->grow = b[12] >> 1 & 1;
    d->at.family = b[13];
    d->at.port = b[14] << 8 | b[15];
    memcpy(d->at.addr, b + 16, 16);
    memcpy(&d->pid, b + 32, 4);
    ncclUniqueId want;
    fill_id(&want, d);
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

/* new_key names a new clique (g held). Seeded per process: a clique made by a
 * split at one process's hub may live in another process's table. */
static uint64_t new_key(void) {
    static int seeded;
    if (!seeded) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        next_key ^= (uint64_t)getpid() << 40 ^ (uint64_t)ts.tv_sec << 20 ^ (uint64_t)ts.tv_nsec;
        if (!next_key) next_key = 1;
        seeded = 1;
    }
    return xorshift(&next_key);
}

static int ensure_root(netaddr* at);

API ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
    if (!id) return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
    idinfo d;
    memset(&d, 0, sizeof d);
    const char* addr = getenv("NCCL_COMM_ID");
    if (addr && *addr) { /* the same id on every rank, from the address */
        if (parse_addr(addr, &d.at))
            return fail(ncclInvalidArgument, "Invalid NCCL_COMM_ID, please use format: <ipv4>:<port> or [<ipv6>]:<port> or <hostname>:<port>");
        d.key = 1469598103934665603ull;
        for (const char* p = addr; *p; p++) d.key = (d.key ^ (unsigned char)*p) * 1099511628211ull;
        d.from_env = 1;
    } else { /* this process is the root: its address and pid go into the id */
        pthread_mutex_lock(&g);
        d.key = new_key();
        pthread_mutex_unlock(&g);
        if (ensure_root(&d.at)) return fail(ncclSystemError, "ncclGetUniqueId: cannot listen for the bootstrap: %s", strerror(errno));
        d.pid = (uint32_t)getpid();
    }
    fill_id(id, &d);
    return ncclSuccess;
}

/* ---- cliques and communicators ---- */

#define SLOTS 64
#define MAXR 64

typedef struct slot { /* one collective's meeting place */
    long seq;
    int busy, arrived, computed, left;
    int checked, bad; /* the ranks' calls compared; they differ */
    int inside;       /* ranks inside run_collective with their task here: readers of the others' tasks */
    int delivered;    /* remote ranks that have their result */
    char why[480];    /* how */
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
    int hosting;      /* rank 0 listens at NCCL_COMM_ID for this clique's other ranks */
    uint64_t started; /* ranks that issued their first operation (lazy connection) */
    int nproxies, join_delivered; /* ranks of other processes; those told they joined */
    struct comm* comm[MAXR];
    slot slots[SLOTS];
    msg* mail;
    /* ncclCommSplit rendezvous */
    long split_seq;
    int split_arrived, split_left, split_delivered;
    int color[MAXR], skey[MAXR];
    netaddr sat[MAXR];   /* where each rank's process takes joins (its root) */
    uint32_t spid[MAXR]; /* and its pid */
    uint64_t split_base;
    /* symmetric window registration rendezvous */
    long win_seq;
    int win_arrived, win_left, win_delivered;
    /* ncclCommShrink rendezvous of the ranks that stay */
    long shrink_seq;
    int shrink_arrived, shrink_left, shrink_bad;
    uint64_t shrink_excluded, shrink_base;
    /* ncclCommGetUniqueId: the outstanding grow id's key (0 when none), where
     * the grown clique is joined (the root of the process that made the id),
     * and how many ranks took it (ranks spread over processes) */
    uint64_t grow_key;
    netaddr grow_at;
    uint32_t grow_pid;
    int grow_taken;
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
    long seq; /* a symmetric window: its place among the communicator's collective registrations */
} window;
typedef struct comm {
    unsigned magic;
    clique* c;      /* NULL for a remote rank: its clique is at the hub */
    uint64_t key;   /* the clique's key */
    int rank, nranks, dev;
    int ready;      /* joined its clique */
    ncclResult_t async;
    ncclResult_t sticky; /* an asynchronous failure: async stays at it */
    long coll_seq, split_seq, win_seq;
    long send_seq[MAXR], recv_seq[MAXR];
    int pending;    /* work items not yet run */
    int launches;   /* non-blocking groups of its whose launch thread runs: ncclCommAbort joins them */
    int graph_refs; /* NCCL's localPersistentRefs: captured launches that live CUDA graphs still hold */
    int aborted;    /* ncclCommAbort was called: waits on peers give up, as NCCL's abort flag makes them */
    int revoked;    /* ncclCommRevoke: in-flight work stops, new operations are refused */
    int halted;     /* ncclCommShrink(NCCL_SHRINK_ABORT) is stopping the in-flight work */
    int suspended;  /* ncclCommSuspend(NCCL_SUSPEND_MEM) */
    int broken;     /* a remote rank gave its connection up (revoke, or a request left unanswered): the hub sees it closed */
    struct rput* rputs; /* at the hub, a proxy: one-sided puts for its remote rank, until its ncclWaitSignal takes them */
    long shrink_seq;
    long sig_recv[MAXR], sig_taken[MAXR]; /* one-sided signals received from each peer; those waited for */
    int blocking;
    uint64_t connected; /* ranks this communicator has connected to (lazily, at its first operations) */
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
    /* a rank whose clique is in another process: its connection to the hub */
    int remote, fd;
    int io_busy, io_users, io_closing;
    long ticket_next, ticket_serving; /* its work items talk to the hub in the order they were launched */
    int proxy;      /* at the hub: stands for a rank of another process */
    int host_fd;    /* rank 0 at NCCL_COMM_ID: the listening socket, until every rank has joined */
    /* NCCL's per-peer point-to-point connector state (connIndex 1), by peer:
     * hasSeen, set at a Send's or Recv's call and never cleared; connected,
     * once a group that asked for the connection set it up; broken, once this
     * rank's side of a connection setup with the peer failed (see p2p_stale) */
    uint64_t seen_send, seen_recv, conn_send, conn_recv, p2p_broken;
    struct gjob* job; /* NCCL's comm->groupJob: the non-blocking job a success completes (see job_complete) */
    int calls;           /* threads inside an API call on this communicator (see call_enter) */
    const char* call_fn; /* the latest of them */
    int releasing;       /* ncclCommDestroy (1) or ncclCommAbort (2) is running on it */
    const char* freed_by; /* the call that freed it (ncclCommDestroy or ncclCommAbort) */
    struct comm* next_all;
} comm;
static comm* all_comms; /* every comm ever made, live or dead */

/* known says whether c is a communicator this library made (g held): a set
 * of every comm ever made (they are never freed), so that checking a handle
 * costs the same however many communicators the process made. */
static comm** comm_tab;
static size_t comm_tab_cap, comm_tab_n;
static size_t comm_slot(const comm* c, size_t cap) {
    uint64_t x = (uint64_t)(uintptr_t)c;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}
static void comm_tab_add(comm* c) {
    if (2 * (comm_tab_n + 1) > comm_tab_cap) {
        size_t cap = comm_tab_cap ? 2 * comm_tab_cap : 256;
        comm** t = calloc(cap, sizeof *t);
        for (size_t i = 0; i < comm_tab_cap; i++)
            if (comm_tab[i]) {
                size_t j = comm_slot(comm_tab[i], cap);
                while (t[j]) j = (j + 1) & (cap - 1);
                t[j] = comm_tab[i];
            }
        free(comm_tab);
        comm_tab = t;
        comm_tab_cap = cap;
    }
    size_t j = comm_slot(c, comm_tab_cap);
    while (comm_tab[j]) j = (j + 1) & (comm_tab_cap - 1);
    comm_tab[j] = c;
    comm_tab_n++;
}
static int known(const comm* c) {
    if (!c || !comm_tab_cap) return 0;
    for (size_t j = comm_slot(c, comm_tab_cap); comm_tab[j]; j = (j + 1) & (comm_tab_cap - 1))
        if (comm_tab[j] == c) return 1;
    return 0;
}

static int is_aborted(comm* c) { return c && __atomic_load_n(&c->aborted, __ATOMIC_RELAXED); }
/* rstopped: a remote rank's requests give up: aborted, revoked, halted by a
 * shrink's abort flag, or its connection given up. Needs no peer: a dead hub
 * is never waited for past it. */
static int rstopped(comm* c) {
    return c && (__atomic_load_n(&c->aborted, __ATOMIC_RELAXED) || __atomic_load_n(&c->revoked, __ATOMIC_RELAXED) ||
                 __atomic_load_n(&c->halted, __ATOMIC_RELAXED) || __atomic_load_n(&c->broken, __ATOMIC_RELAXED));
}
/* one_process: every rank of c's clique lives in this process. */
__attribute__((unused)) static int one_process(comm* c) { return !c->remote && !(c->c && c->c->nproxies); }
/* stopped: in-flight work quits (g held): an abort, a revoke, or a shrink's abort flag. */
static int stopped(comm* c) { return c->aborted || c->revoked || c->halted; }

/* Every thread the fake starts is named "fakenccl-...": tests count them. */
static void name_thread(const char* name) { pthread_setname_np(pthread_self(), name); }

/* set_async records a state (g held); an asynchronous failure stays. */
static void set_async(comm* c, ncclResult_t r) { c->async = c->sticky ? c->sticky : r; }
static void set_sticky(comm* c, ncclResult_t r) {
    c->sticky = r;
    c->async = r;
}

static uint64_t all_ranks(int n) { return n >= 64 ? ~0ull : (1ull << n) - 1; }

/* runtime_connect is NCCL_RUNTIME_CONNECT: connections made at the first
 * operation (default), or at init (0). */
static int runtime_connect(void) {
    const char* s = getenv("NCCL_RUNTIME_CONNECT");
    return !(s && strcmp(s, "0") == 0);
}

/* live checks a comm argument: NULL and unknown pointers are argument errors;
 * a destroyed communicator is a use-after-free that real NCCL would not survive,
 * so the fake stops the process loudly. */
static ncclResult_t live(comm* c, const char* fn) {
    if (!c) return fail(ncclInvalidArgument, "%s: comm argument is NULL", fn);
    pthread_mutex_lock(&g);
    int k = known(c);
    pthread_mutex_unlock(&g);
    if (!k) return fail(ncclInvalidArgument, "%s: invalid comm %p", fn, (void*)c);
    if (c->magic == DEAD_MAGIC) {
        fprintf(stderr, "fakenccl: %s: use of destroyed communicator %p\n", fn, (void*)c);
        abort();
    }
    if (!c->ready) return fail(ncclInvalidUsage, "%s: communicator is still initializing", fn);
    return ncclSuccess;
}

/* ready_err is ncclCommEnsureReady's verdict on a non-blocking communicator
 * that an earlier call left in error (poison): that error again. Most calls
 * on a communicator make this check after their argument checks of the
 * handle (window registration, properties, PreMulSum ops, finalize, split,
 * shrink, grow, suspend, memory statistics); only ncclCommAbort frees such a
 * communicator. */
static void job_complete(comm* c);
static ncclResult_t ready_err(comm* c) {
    if (c->blocking) return ncclSuccess;
    job_complete(c);
    pthread_mutex_lock(&g);
    ncclResult_t a = c->async;
    pthread_mutex_unlock(&g);
    return a == ncclInProgress ? ncclSuccess : a;
}

/* ---- groups: depth, pending tasks, the first failure and deferred inits belong to the calling thread ---- */

static __thread int group_depth;
static __thread struct task* group_head;
static __thread struct task** group_tail; /* NULL means &group_head */
static __thread ncclResult_t group_error; /* a call inside the group failed: ncclGroupEnd launches nothing */
static __thread comm* group_inits[MAXR];  /* communicators whose init the group deferred */
static __thread int group_ninits;
/* The communicators that joined the group (NCCL's ncclGroupCommHead): those
 * of its operations, a one-rank collective's apart (it runs at the call and
 * joins nothing). The last to join sets the group's mode, as NCCL's
 * ncclGroupBlocking: a non-blocking group runs on a thread of its own. */
static __thread comm** group_members;
static __thread int group_nmembers, group_members_cap;
static __thread int group_blocking = -1;

/* group_err records a failure inside a group, as NCCL's ncclGroupErrCheck does. */
static ncclResult_t group_err(ncclResult_t r) {
    if (group_depth > 0 && r != ncclSuccess && r != ncclInProgress) group_error = r;
    return r;
}

static void group_join(comm* c) {
    group_blocking = c->blocking;
    for (int i = 0; i < group_nmembers; i++)
        if (group_members[i] == c) return;
    if (group_nmembers == group_members_cap) {
        group_members_cap = 2 * group_members_cap + 8;
        group_members = realloc(group_members, group_members_cap * sizeof *group_members);
    }
    group_members[group_nmembers++] = c;
}

/* die stops the process, loudly, where real NCCL would crash or corrupt memory. */
__attribute__((noreturn, format(printf, 1, 2))) static void die(const char* fmt, ...) {
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    fprintf(stderr, "fakenccl: %s\n", text);
    fflush(stderr);
    abort();
}

/* group_check_freed: ncclCommAbort takes no lock and never looks at other
 * threads' open groups (their lists are thread-local): a communicator that
 * another thread freed while it was linked in this thread's group is touched
 * by the group's next call and by its ncclGroupEnd (groupCleanup included), a
 * use after free that real NCCL does not survive. */
static void group_check_freed(const char* fn) {
    for (int i = 0; i < group_nmembers + group_ninits; i++) {
        comm* c = i < group_nmembers ? group_members[i] : group_inits[i - group_nmembers];
        if (__atomic_load_n(&c->magic, __ATOMIC_ACQUIRE) == DEAD_MAGIC)
            die("%s: communicator %p was freed by %s while linked in this thread's open group", fn, (void*)c,
                c->freed_by ? c->freed_by : "ncclCommAbort");
    }
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

/* ---- calls inside the library, and ncclCommDestroy/Abort beside them ----
 *
 * NCCL's ncclCommAbort takes no lock; with several ranks of a communicator in
 * one process the last abort frees them all (init.cc commReclaim), and NCCL
 * was seen to crash ("double free or corruption (out)": VCCL 2.29.2, NVIDIA
 * 2.29.2 and 2.30.7) when one rank's abort ran while another thread was inside
 * a call (ncclAllReduce) on another rank. The docs: "make sure no thread is
 * calling any NCCL operations while calling ncclCommAbort". So the fake
 * counts, per communicator, the threads inside an API call that takes it
 * (call_enter; ncclGroupEnd counts for each communicator of its group), and
 * stops the process, whichever came first, when
 *  - ncclCommAbort of a communicator runs while another thread is inside a
 *    call (ncclCommDestroy and ncclCommAbort included) on a communicator of
 *    the same clique held in this process;
 *  - ncclCommDestroy of a communicator runs while another thread is inside a
 *    call on that same communicator, or an abort of the clique runs.
 * ncclCommDestroy of one rank beside calls on the others is let through, as
 * are two destroys at once: a destroy that is not the clique's last frees
 * nothing (NCCL counts them with an atomic, finalizeRankCnt), and the last
 * one's peers are freed already (their calls are caught as uses of freed
 * communicators). The two test hooks widen the window:
 * fakenccl_set_call_delay_us keeps operations inside, and
 * fakenccl_set_abort_delay_us keeps ncclCommDestroy and ncclCommAbort inside
 * once they are counted. Calls that make a communicator (init, split's
 * child, grow's new rank) are not counted. */

static int releasing_now; /* (g) ncclCommDestroy/Abort calls running in this process */
static long abort_delay_us;
API void fakenccl_set_abort_delay_us(long us) { __atomic_store_n(&abort_delay_us, us, __ATOMIC_RELAXED); }

/* clique_mates: a and b are ranks of one communicator held in this process. */
static int clique_mates(const comm* a, const comm* b) {
    if (a == b) return 1;
    if (a->proxy || b->proxy) return 0;
    if (a->c || b->c) return a->c == b->c;
    return a->key && a->key == b->key; /* ranks of a clique held in another process */
}

static const char* release_name(int how) { return how == 2 ? "ncclCommAbort" : "ncclCommDestroy"; }

/* call_enter counts this thread inside a call on c (NULL, unknown or freed
 * communicators are left to the call's own checks). */
static comm* call_enter(comm* c, const char* fn) {
    if (!c) return NULL;
    pthread_mutex_lock(&g);
    if (!known(c) || c->magic != COMM_MAGIC) {
        pthread_mutex_unlock(&g);
        return NULL;
    }
    c->calls++;
    c->call_fn = fn;
    if (releasing_now)
        for (comm* k = all_comms; k; k = k->next_all)
            if (k->releasing && (k->releasing == 2 || k == c) && clique_mates(k, c))
                die("%s on rank %d (communicator %p) was called while another thread was in %s of rank %d of the same "
                    "communicator: NCCL frees communicators under such calls; make sure no thread is calling NCCL "
                    "while ncclCommAbort runs",
                    fn, c->rank, (void*)c, release_name(k->releasing), k->rank);
    pthread_mutex_unlock(&g);
    return c;
}

static void call_leave(comm** p) {
    if (!*p) return;
    pthread_mutex_lock(&g);
    (*p)->calls--;
    pthread_mutex_unlock(&g);
}

/* CALL counts the rest of the enclosing block as inside a call on c. */
#define CALL(c, fn) __attribute__((cleanup(call_leave), unused)) comm* call_guard_ = call_enter(c, fn)

/* release_begin marks c as being destroyed (how 1) or aborted (how 2), once
 * no other thread is inside a call on its clique. */
static void release_begin(comm* c, int how) {
    pthread_mutex_lock(&g);
    for (comm* k = all_comms; k; k = k->next_all) {
        if (k->magic != COMM_MAGIC || !clique_mates(k, c)) continue;
        if (k->calls > 0 && (how == 2 || k == c))
            die("%s of rank %d (communicator %p) while another thread is inside %s on rank %d of the same "
                "communicator: NCCL frees communicators under such calls; make sure no thread is calling NCCL while "
                "ncclCommAbort runs",
                release_name(how), c->rank, (void*)c, k->call_fn ? k->call_fn : "a call", k->rank);
        if (k != c && k->releasing && (how == 2 || k->releasing == 2))
            die("%s of rank %d (communicator %p) while another thread is in %s of rank %d of the same communicator: "
                "abort the ranks of a communicator held in one process from one thread",
                release_name(how), c->rank, (void*)c, release_name(k->releasing), k->rank);
    }
    c->releasing = how;
    releasing_now++;
    pthread_mutex_unlock(&g);
    long us = __atomic_load_n(&abort_delay_us, __ATOMIC_RELAXED);
    if (us > 0) usleep(us);
}

static void release_end(comm* c) {
    pthread_mutex_lock(&g);
    c->releasing = 0;
    releasing_now--;
    pthread_mutex_unlock(&g);
}

/* ---- non-blocking jobs: who completes them ----
 *
 * A non-blocking communicator's background work (a group's launch, an init,
 * a split, a finalize...) is NCCL's group job: ncclGroupEnd links it to every
 * member that has none (comm->groupJob, counted in groupRefCount), and the
 * first ncclCommGetAsyncError on a member that reads ncclSuccess completes it
 * (ncclGroupJobComplete: join the thread once, drop the member's count, the
 * last deletes the job), as does any call that runs ncclCommEnsureReady (an
 * operation, most calls taking a communicator, Destroy). comm->groupJob is
 * read without a lock: two threads doing that at once on members of one job
 * (one communicator, or two of one group) both complete it, and one deletes
 * it while the other still joins its std::thread: "terminate called without
 * an active exception" (SIGABRT) on NCCL 2.30.7 and VCCL 2.29.2; 2.28's
 * pthread underflows the count silently. Every variant of the fake stops the
 * process there: each completion holds the job for a short window
 * (fakenccl_set_complete_window_us, 200 us) and a second thread completing
 * the same job meanwhile is the crash. */
typedef struct gjob {
    int refs;       /* members linked to it */
    int completing; /* threads inside its completion */
} gjob;

static long complete_window_us = 200;
API void fakenccl_set_complete_window_us(long us) { __atomic_store_n(&complete_window_us, us, __ATOMIC_RELAXED); }

/* job_start makes a job for the non-blocking communicators cs (g held): each
 * that has none is linked to it. */
static void job_start(comm** cs, int n) {
    gjob* j = calloc(1, sizeof *j);
    for (int i = 0; i < n; i++)
        if (!cs[i]->blocking && !cs[i]->job) {
            cs[i]->job = j;
            j->refs++;
        }
    if (!j->refs) free(j);
}
static void job_start1(comm* c) { job_start(&c, 1); }

/* job_unlink drops c's link (g held): ncclGroupJobAbort's part in an abort. */
static void job_unlink(comm* c) {
    gjob* j = c->job;
    if (!j) return;
    c->job = NULL;
    if (--j->refs == 0 && !j->completing) free(j);
}

/* job_complete is what ncclCommGetAsyncError does once it reads ncclSuccess
 * on a communicator linked to a job (g not held). */
static void job_complete(comm* c) {
    pthread_mutex_lock(&g);
    gjob* j = c->job;
    if (!j || c->async != ncclSuccess) {
        pthread_mutex_unlock(&g);
        return;
    }
    int twice = ++j->completing > 1;
    pthread_mutex_unlock(&g);
    if (twice)
        die("terminate called without an active exception (two threads completed one non-blocking group job): "
            "ncclCommGetAsyncError (or a call running ncclCommEnsureReady) on rank %d (communicator %p) while another "
            "thread completed the same job on a communicator of its group; poll a group's communicators from one "
            "thread", c->rank, (void*)c);
    long us = __atomic_load_n(&complete_window_us, __ATOMIC_RELAXED);
    if (us > 0) usleep(us);
    pthread_mutex_lock(&g);
    j->completing--;
    if (c->job == j) {
        c->job = NULL;
        j->refs--;
    }
    if (!j->refs && !j->completing) free(j);
    pthread_mutex_unlock(&g);
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
    c->fd = c->host_fd = -1;
    for (int i = 0; i < 32; i++) c->cfg[i] = INT_MIN;
    pthread_mutex_lock(&g);
    c->next_all = all_comms;
    all_comms = c;
    comm_tab_add(c);
    pthread_mutex_unlock(&g);
    return c;
}

/* read_config copies a ncclConfig_t as the library of this version would. */
static ncclResult_t read_config_fields(comm* c, const void* cfg, const char* fn);
static ncclResult_t read_config(comm* c, const void* cfg, const char* fn) {
    ncclResult_t r = read_config_fields(c, cfg, fn);
    /* As NCCL's parseCommConfig: NCCL_COMM_BLOCKING, 0 or 1, overrides the
     * config's blocking, also where no config was given. */
    const char* e = getenv("NCCL_COMM_BLOCKING");
    if (r == ncclSuccess && e && (strcmp(e, "0") == 0 || strcmp(e, "1") == 0)) c->blocking = e[0] == '1';
    return r;
}

static ncclResult_t read_config_fields(comm* c, const void* cfg, const char* fn) {
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

/* fakenccl_freed_by names the call that freed c ("ncclCommDestroy",
 * "ncclCommAbort"), NULL while it lives: freed communicators stay readable. */
API const char* fakenccl_freed_by(comm* c) {
    pthread_mutex_lock(&g);
    const char* s = c && c->magic != COMM_MAGIC ? c->freed_by : NULL;
    pthread_mutex_unlock(&g);
    return s;
}

API int fakenccl_live_comms(void) {
    int n = 0;
    pthread_mutex_lock(&g);
    for (comm* c = all_comms; c; c = c->next_all) n += c->magic == COMM_MAGIC;
    pthread_mutex_unlock(&g);
    return n;
}

/* ready_now marks c joined (g held). */
static void ready_now(comm* c) {
    c->ready = 1;
    if (!c->proxy && !runtime_connect()) { /* NCCL_RUNTIME_CONNECT=0: connected at init */
        c->connected = all_ranks(c->nranks);
        if (c->c) c->c->started |= 1ull << c->rank;
    }
    if (c->async == ncclInProgress) set_async(c, ncclSuccess);
    pthread_cond_broadcast(&gc);
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
    c->key = key;
    c->rank = rank;
    c->nranks = nranks;
    q->joined++;
    q->nproxies += c->proxy;
    pthread_cond_broadcast(&gc);
    /* The hub's own ranks return once the remote ranks were told too: this
     * process may exit next, and they are served from here. */
    while ((q->joined < nranks || (!c->proxy && q->join_delivered < q->nproxies)) && !c->aborted) pthread_cond_wait(&gc, &g);
    if (c->aborted) { /* ncclCommAbort during a non-blocking init: the bootstrap gives up */
        pthread_mutex_unlock(&g);
        return ncclInternalError;
    }
    ready_now(c);
    pthread_mutex_unlock(&g);
    return ncclSuccess;
}

/* ---- a rank of another process's clique: its side of the connection ---- */

/* wait_abort models a peer that died: nothing is detected, the wait goes on
 * until the communicator is aborted or revoked (or a shrink's abort flag
 * stops its work). */
static int wait_abort(comm* c, comm* also) {
    pthread_mutex_lock(&g);
    while (!rstopped(c) && !(also && also->aborted)) pthread_cond_wait(&gc, &g);
    pthread_mutex_unlock(&g);
    return -1;
}

/* give_up breaks c's connection after a request was left unanswered (g held):
 * it is out of step now, so nothing more goes over it, and the hub, seeing it
 * closed, stops c's proxy there. An aborted communicator's release closes it. */
static const char* broken_text =
    "the communicator's connection to its hub was given up when ncclCommShrink(NCCL_SHRINK_ABORT) stopped a request in flight";
static void give_up(comm* c) {
    if (c->aborted || c->broken) return;
    c->broken = 1;
    if (c->fd >= 0) shutdown(c->fd, SHUT_RDWR);
    pthread_cond_broadcast(&gc);
}

/* io_acquire takes c's connection for one request and its reply: -1 if c (or
 * also) is aborted first. */
static int io_acquire(comm* c, comm* also) {
    pthread_mutex_lock(&g);
    while (c->io_busy && !rstopped(c) && !(also && also->aborted)) pthread_cond_wait(&gc, &g);
    if (rstopped(c) || (also && also->aborted) || c->fd < 0) {
        pthread_mutex_unlock(&g);
        return -1;
    }
    c->io_busy = 1;
    c->io_users++;
    pthread_mutex_unlock(&g);
    return 0;
}

/* io_release gives the connection back (lost: a request was left
 * unanswered); the last user of a closed communicator's connection closes it. */
static void io_release(comm* c, int lost) {
    pthread_mutex_lock(&g);
    if (lost) give_up(c);
    c->io_busy = 0;
    if (--c->io_users == 0 && c->io_closing && c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
    pthread_cond_broadcast(&gc);
    pthread_mutex_unlock(&g);
}

/* recv_abortable reads n bytes: 0, -1 when c or also is aborted, -2 when the
 * connection is lost. */
static int recv_abortable(comm* c, comm* also, void* p, size_t n) {
    char* b = p;
    while (n) {
        if (rstopped(c) || is_aborted(also)) return -1;
        struct pollfd pf = {c->fd, POLLIN, 0};
        int k = poll(&pf, 1, 50);
        if (k < 0 && errno != EINTR) return -2;
        if (k <= 0) continue;
        ssize_t m = recv(c->fd, b, n, MSG_DONTWAIT);
        if (m < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (m <= 0) return -2;
        b += m;
        n -= (size_t)m;
    }
    return 0;
}

/* rpc_send sends a request on c's connection, taking it until rpc_recv. */
static int rpc_send(comm* c, comm* also, wbuf* req) {
    if (io_acquire(c, also)) return -1;
    if (wb_send(c->fd, req)) {
        wait_abort(c, also); /* the hub is gone: wait, as NCCL would, until aborted or revoked */
        io_release(c, 1);
        return -1;
    }
    return 0;
}

/* rpc_recv reads the reply (its payload malloc'd into *out), printing the
 * hub's notes on the way; -1 once c or also is aborted. */
static int rpc_recv(comm* c, comm* also, char** out, rbuf* r) {
    int st;
    for (;;) {
        hdr h;
        if ((st = recv_abortable(c, also, &h, sizeof h))) break;
        char* p = h.len <= MAX_WIRE ? malloc(h.len + 1) : NULL;
        if (!p) { /* a desynchronised or hostile hub: stop here, loudly */
            fprintf(stderr, "fakenccl: a reply of %llu bytes from the hub: refused\n", (unsigned long long)h.len);
            st = -2;
            break;
        }
        if ((st = recv_abortable(c, also, p, h.len))) {
            free(p);
            break;
        }
        if (h.type == M_NOTE) {
            p[h.len] = 0;
            fprintf(stderr, "%s\n", p);
            free(p);
            continue;
        }
        *out = p;
        *r = (rbuf){p, h.len, 0, 0};
        io_release(c, 0);
        return 0;
    }
    if (st == -2) wait_abort(c, also);
    io_release(c, 1);
    return -1;
}

static int rpc(comm* c, comm* also, wbuf* req, char** out, rbuf* r) {
    if (rpc_send(c, also, req)) return -1;
    return rpc_recv(c, also, out, r);
}

/* remote_join connects to the hub at a, retrying as NCCL's bootstrap does
 * until it can or c is aborted, and joins the clique of key there. */
static ncclResult_t remote_join_as(comm* c, comm* also, const netaddr* a, uint64_t key, int nranks, int rank, int grow,
                                   const char* fn) {
    int fd;
    for (;;) {
        if (is_aborted(c) || is_aborted(also) || __atomic_load_n(&c->io_closing, __ATOMIC_RELAXED)) return ncclInternalError;
        if ((fd = connect_to(a)) >= 0) break;
        usleep(50000);
    }
    pthread_mutex_lock(&g);
    if (c->aborted || c->io_closing) {
        pthread_mutex_unlock(&g);
        close(fd);
        return ncclInternalError;
    }
    c->fd = fd;
    c->remote = 1;
    c->key = key;
    c->rank = rank;
    c->nranks = nranks;
    pthread_mutex_unlock(&g);
    wbuf b = {0};
    wb_start(&b, M_JOIN);
    wb_u64(&b, key);
    wb_i32(&b, nranks);
    wb_i32(&b, rank);
    wb_i32(&b, !runtime_connect()); /* NCCL_RUNTIME_CONNECT=0: it connects at init */
    wb_i32(&b, grow);               /* a new rank of a grow: the hub checks it against the grow id */
    char* p = NULL;
    rbuf r;
    int st = rpc(c, also, &b, &p, &r);
    free(b.p);
    if (st) return ncclInternalError;
    ncclResult_t res = rb_i32(&r);
    char text[1024];
    rb_str(&r, text, sizeof text);
    free(p);
    if (res) return fail(res, "%s", text);
    pthread_mutex_lock(&g);
    ready_now(c);
    pthread_mutex_unlock(&g);
    return ncclSuccess;
}

static ncclResult_t remote_join(comm* c, comm* also, const netaddr* a, uint64_t key, int nranks, int rank, const char* fn) {
    return remote_join_as(c, also, a, key, nranks, rank, 0, fn);
}

/* Where a rank's clique is: in this process, hosted by this rank (rank 0 of
 * an NCCL_COMM_ID id: it listens there), or at another process's hub. */
enum { LOCAL, HOST, REMOTE };

static ncclResult_t join_at(comm* c, const idinfo* d, int where, int nranks, int rank, const char* fn) {
    if (where == REMOTE) return remote_join(c, NULL, &d->at, d->key, nranks, rank, fn);
    return join(c, d->key, nranks, rank, fn);
}

typedef struct joiner {
    comm* c;
    idinfo d;
    int where, nranks, rank;
} joiner;

static void* join_later(void* p) {
    name_thread("fakenccl-join");
    joiner* j = p;
    ncclResult_t r = join_at(j->c, &j->d, j->where, j->nranks, j->rank, "ncclCommInitRankConfig");
    pthread_mutex_lock(&g);
    if (r && !j->c->aborted && j->c->async == ncclInProgress) set_async(j->c, r); /* the init failed: its state says so */
    pthread_cond_broadcast(&gc);
    pthread_mutex_unlock(&g);
    free(j);
    return NULL;
}

static void start_conn(int fd);

typedef struct host {
    int fd;
    clique* q;
    comm* c;
} host;

/* host_accept serves NCCL_COMM_ID's address for one clique until all its ranks
 * have joined (or rank 0's init was given up), then closes it, as NCCL's root
 * does; the connections it accepted stay served. */
static void* host_accept(void* p) {
    name_thread("fakenccl-host");
    host* h = p;
    for (;;) {
        pthread_mutex_lock(&g);
        int done = h->q->joined >= h->q->nranks || h->c->aborted || h->c->magic == DEAD_MAGIC;
        if (done) { /* closed under the lock: release() may shut it down meanwhile */
            h->q->hosting = 0;
            h->c->host_fd = -1;
            close(h->fd);
        }
        pthread_mutex_unlock(&g);
        if (done) break;
        struct pollfd pf = {h->fd, POLLIN, 0};
        if (poll(&pf, 1, 20) <= 0) continue;
        int fd = accept4(h->fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0) start_conn(fd);
    }
    free(h);
    return NULL;
}

/* host_start makes the clique rank 0 hosts at NCCL_COMM_ID's address (a clique
 * of an earlier job at that address is left to its communicators) and serves
 * the listening socket lfd for it. */
static void host_start(int lfd, uint64_t key, int nranks, comm* c) {
    clique* q = calloc(1, sizeof *q);
    q->key = key;
    q->nranks = nranks;
    q->hosting = 1;
    pthread_mutex_lock(&g);
    for (clique** pq = &cliques; *pq;)
        if ((*pq)->key == key) *pq = (*pq)->next;
        else pq = &(*pq)->next;
    q->next = cliques;
    cliques = q;
    pthread_mutex_unlock(&g);
    host* h = malloc(sizeof *h);
    *h = (host){lfd, q, c};
    c->host_fd = lfd;
    pthread_t th;
    pthread_create(&th, NULL, host_accept, h);
    pthread_detach(th);
}

/* hosted says whether a clique of key is being hosted in this process. */
static int hosted(uint64_t key) {
    pthread_mutex_lock(&g);
    clique* q = cliques;
    while (q && !(q->key == key && q->hosting)) q = q->next;
    pthread_mutex_unlock(&g);
    return q != NULL;
}

static ncclResult_t init_rank(comm** out, int nranks, const ncclUniqueId* id, int rank, const void* cfg, const char* fn) {
    if (!out) return fail(ncclInvalidArgument, "%s: comm is NULL", fn);
    if (nranks < 1 || nranks > MAXR) return fail(ncclInvalidArgument, "%s: invalid nranks %d", fn, nranks);
    if (rank < 0 || rank >= nranks) return fail(ncclInvalidArgument, "%s: rank %d out of range [0, %d)", fn, rank, nranks);
    idinfo d;
    if (check_id(id, fn, &d)) return ncclInvalidArgument;
    int where = LOCAL, lfd = -1;
    if (d.from_env) where = rank == 0 ? HOST : hosted(d.key) ? LOCAL : REMOTE;
    else if (d.pid != (uint32_t)getpid()) where = REMOTE;
    if (where == HOST) { /* as NCCL's rank 0: the rendezvous listens at NCCL_COMM_ID */
        netaddr at = d.at;
        if ((lfd = listen_on(&at)) < 0) return fail(ncclSystemError, "Call to bind failed: %s", strerror(errno));
    }
    comm* c = new_comm(fakecuda_current_device());
    ncclResult_t r = read_config(c, cfg, fn);
    if (r) {
        if (lfd >= 0) close(lfd);
        return r;
    }
    if (where == HOST) host_start(lfd, d.key, nranks, c);
    *out = c;
    if (!c->blocking || group_depth > 0) { /* in a group NCCL defers the init to ncclGroupEnd */
        c->async = ncclInProgress;
        if (!group_depth) { /* a job of its own (a group's inits are linked at ncclGroupEnd) */
            pthread_mutex_lock(&g);
            job_start1(c);
            pthread_mutex_unlock(&g);
        }
        if (group_depth > 0) {
            if (group_ninits == MAXR) return group_err(fail(ncclInternalError, "%s: too many inits in one group", fn));
            group_inits[group_ninits++] = c;
        }
        joiner* j = malloc(sizeof *j);
        *j = (joiner){c, d, where, nranks, rank};
        pthread_t th;
        pthread_create(&th, NULL, join_later, j);
        pthread_detach(th);
        return c->blocking ? ncclSuccess : ncclInProgress;
    }
    return join_at(c, &d, where, nranks, rank, fn);
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
    uint64_t key = new_key();
    pthread_mutex_unlock(&g);
    clique* q = calloc(1, sizeof *q);
    q->key = key;
    q->nranks = q->joined = ndev;
    for (int i = 0; i < ndev; i++) {
        comm* c = new_comm(devlist ? devlist[i] : i);
        c->c = q;
        c->key = key;
        c->rank = i;
        c->nranks = ndev;
        pthread_mutex_lock(&g);
        ready_now(c);
        pthread_mutex_unlock(&g);
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

/* split_done readies the split rendezvous for the next split once every rank
 * has left it and every remote rank has its answer (g held). */
static void split_done(clique* q) {
    if (q->split_left == q->nranks && q->split_delivered == q->nproxies) {
        q->split_arrived = q->split_left = q->split_delivered = 0;
        q->split_seq++;
        pthread_cond_broadcast(&gc);
    }
}

/* split_meet is ncclCommSplit's rendezvous over the parent's clique: it
 * returns the new communicator's size, this rank's place in it and its key, or
 * -1 if nc was aborted meanwhile. Each rank brings where its process takes
 * joins (mine, pid); the new clique lives in the process of its new rank 0,
 * as NCCL bootstraps a split from the new root: *host, *hpid. */
static int split_meet(comm* c, comm* nc, int color, int key, const netaddr* mine, uint32_t pid, int* me,
                      uint64_t* newkey, netaddr* host, uint32_t* hpid) {
    clique* q = c->c;
    int n = c->nranks;
    pthread_mutex_lock(&g);
    long seq = c->split_seq++;
    while (q->split_seq != seq && !(nc && nc->aborted)) pthread_cond_wait(&gc, &g); /* an earlier split still in use */
    if (nc && nc->aborted) {
        pthread_mutex_unlock(&g);
        return -1;
    }
    if (q->split_arrived == 0) q->split_base = new_key();
    q->color[c->rank] = color;
    q->skey[c->rank] = key;
    q->sat[c->rank] = *mine;
    q->spid[c->rank] = pid;
    q->split_arrived++;
    pthread_cond_broadcast(&gc);
    while (q->split_arrived < n && !(nc && nc->aborted)) pthread_cond_wait(&gc, &g);
    if (nc && nc->aborted) {
        pthread_mutex_unlock(&g);
        return -1;
    }
    int size = 0, root = -1;
    *me = 0;
    for (int i = 0; i < n; i++) {
        if (q->color[i] != color) continue;
        size++;
        if (q->skey[i] < key || (q->skey[i] == key && i < c->rank)) (*me)++;
        if (root < 0 || q->skey[i] < q->skey[root]) root = i;
    }
    *host = q->sat[root];
    *hpid = q->spid[root];
    *newkey = q->split_base ^ ((uint64_t)(unsigned)color * 0x100000001b3ull);
    q->split_left++;
    if (!c->proxy) /* the hub's own ranks: once the remote ranks have their answer (this process may exit next) */
        while (q->split_seq == seq && q->split_delivered < q->nproxies && !(nc && nc->aborted)) pthread_cond_wait(&gc, &g);
    split_done(q);
    pthread_mutex_unlock(&g);
    return size;
}

/* split_any is split_meet for any parent (a remote rank's parent meets at its
 * hub): *at is where the new clique is, *remote whether that is another
 * process. A rank whose clique has ranks in other processes brings its
 * process's root, where they may have to join. */
static int split_any(comm* c, comm* nc, int color, int key, int* me, uint64_t* newkey, netaddr* at, int* remote) {
    netaddr mine;
    memset(&mine, 0, sizeof mine);
    uint32_t pid = (uint32_t)getpid(), hpid = pid;
    if (color != -1 && (c->remote || c->c->nproxies) && ensure_root(&mine)) return -1;
    int size;
    if (!c->remote) size = split_meet(c, nc, color, key, &mine, pid, me, newkey, at, &hpid);
    else {
        wbuf b = {0};
        wb_start(&b, M_SPLIT);
        wb_i32(&b, color);
        wb_i32(&b, key);
        wb_addr(&b, &mine);
        wb_i32(&b, (int32_t)pid);
        char* p = NULL;
        rbuf r;
        int st = rpc(c, nc, &b, &p, &r);
        free(b.p);
        if (st) return -1;
        size = rb_i32(&r);
        *me = rb_i32(&r);
        *newkey = rb_u64(&r);
        rb_addr(&r, at);
        hpid = (uint32_t)rb_i32(&r);
        free(p);
        if (r.bad) return -1;
    }
    *remote = hpid != pid;
    return size;
}

static ncclResult_t split_join(comm* nc, comm* parent, int remote, const netaddr* at, uint64_t newkey, int size, int me) {
    if (remote) return remote_join(nc, parent, at, newkey, size, me, "ncclCommSplit");
    return join(nc, newkey, size, me, "ncclCommSplit");
}

typedef struct splitter {
    comm *parent, *nc, **out;
    int color, key;
} splitter;

/* split_later runs a non-blocking split. As NCCL, it writes the new handle
 * only when done, and the parent stays in progress until then. */
static void* split_later(void* p) {
    name_thread("fakenccl-split");
    splitter* sp = p;
    int me, remote;
    uint64_t newkey;
    netaddr at;
    int size = split_any(sp->parent, sp->nc, sp->color, sp->key, &me, &newkey, &at, &remote);
    ncclResult_t r = size > 0 ? split_join(sp->nc, sp->parent, remote, &at, newkey, size, me) : ncclInternalError;
    pthread_mutex_lock(&g);
    if (r == ncclSuccess) *sp->out = sp->nc;
    set_async(sp->parent, r == ncclSuccess || sp->parent->aborted ? ncclSuccess : r);
    pthread_cond_broadcast(&gc);
    pthread_mutex_unlock(&g);
    free(sp);
    return NULL;
}

API ncclResult_t ncclCommSplit(comm* c, int color, int key, comm** out, const void* cfg) {
    CALL(c, "ncclCommSplit");
    ncclResult_t r = live(c, "ncclCommSplit");
    if (r || (r = ready_err(c))) return r;
    if (!out) return fail(ncclInvalidArgument, "ncclCommSplit: newcomm is NULL");
    if ((c->revoked || c->broken) && !one_process(c))
        return fail(ncclInvalidUsage, "ncclCommSplit: the fake splits a revoked communicator only within one process: across "
                                      "processes its ranks no longer reach their hub; ncclCommShrink it instead");
    int me, remote;
    uint64_t newkey;
    netaddr at;
    if (color == -1) {
        split_any(c, NULL, color, key, &me, &newkey, &at, &remote);
        *out = NULL;
        return ncclSuccess;
    }
    comm* nc = new_comm(c->dev);
    if ((r = read_config(nc, cfg, "ncclCommSplit"))) return r;
    if (!nc->blocking) { /* as NCCL: the split runs on; the parent says when it is done */
        *out = NULL;
        nc->async = ncclInProgress;
        pthread_mutex_lock(&g);
        set_async(c, ncclInProgress);
        job_start1(c);
        pthread_mutex_unlock(&g);
        splitter* sp = malloc(sizeof *sp);
        *sp = (splitter){c, nc, out, color, key};
        pthread_t th;
        pthread_create(&th, NULL, split_later, sp);
        pthread_detach(th);
        return ncclInProgress;
    }
    *out = nc;
    int size = split_any(c, NULL, color, key, &me, &newkey, &at, &remote);
    if (size < 1) return fail(ncclInternalError, "ncclCommSplit: the split was given up");
    return split_join(nc, c, remote, &at, newkey, size, me);
}
#endif

static int inflight; /* requests of remote ranks this process is serving (g) */

/* undelivered: a live proxy of q holds one-sided puts or signals that its
 * remote rank has not waited for yet (g held). */
static int undelivered(clique* q) {
    for (int i = 0; i < q->nranks; i++) {
        comm* p = q->comm[i];
        if (!p || !p->proxy || p->aborted) continue;
        if (p->rputs) return 1;
        for (int j = 0; j < q->nranks; j++)
            if (p->sig_recv[j] > p->sig_taken[j]) return 1;
    }
    return 0;
}

/* wait_idle waits for c's work to finish. At a hub, it then lets the remote
 * ranks' last answers go out (up to 2 s, for a rank still blocked on others):
 * a receive here may have completed a remote rank's send before its answer
 * left, a put or signal for a remote rank waits at its proxy for that rank's
 * ncclWaitSignal, and this process may exit next. */
static void wait_idle(comm* c) {
    pthread_mutex_lock(&g);
    while (c->pending) pthread_cond_wait(&gc, &g);
    if (c->c && c->c->nproxies && (inflight || undelivered(c->c))) {
        struct timespec dl;
        clock_gettime(CLOCK_REALTIME, &dl);
        dl.tv_sec += 2;
        while ((inflight || undelivered(c->c)) && pthread_cond_timedwait(&gc, &g, &dl) != ETIMEDOUT) {
        }
    }
    pthread_mutex_unlock(&g);
}

static void* finalize_later(void* p) {
    name_thread("fakenccl-final");
    comm* c = p;
    wait_idle(c);
    pthread_mutex_lock(&g);
    set_async(c, ncclSuccess);
    pthread_mutex_unlock(&g);
    return NULL;
}

API ncclResult_t ncclCommFinalize(comm* c) {
    CALL(c, "ncclCommFinalize");
    ncclResult_t r = live(c, "ncclCommFinalize");
    if (r || (r = ready_err(c))) return r;
    if (c->revoked) return fail(ncclInvalidArgument, "ncclCommFinalize: calling ncclCommFinalize after ncclCommRevoke is invalid");
    if (!c->blocking) {
        pthread_mutex_lock(&g);
        c->async = ncclInProgress;
        job_start1(c);
        pthread_mutex_unlock(&g);
        pthread_t th;
        pthread_create(&th, NULL, finalize_later, c);
        pthread_detach(th);
        return ncclInProgress;
    }
    wait_idle(c);
    return ncclSuccess;
}

static long warn_ms(void);
static struct timespec warn_deadline(void);

/* wait_graphs is NCCL's commDestroySync (2.26 and later): "keep polling
 * until all graphs referencing us die", in ncclCommDestroy and in
 * ncclCommAbort alike, with no error and no time limit (g held). Real NCCL
 * says nothing while it waits; the fake says once on stderr, after
 * FAKENCCL_CONNECT_WARN_MS (10 s), what it waits for, so that a test hung
 * there says why in its log. Before 2.26 NCCL does not wait: a graph launched
 * after the destroy uses freed memory (graph_comm). */
static void wait_graphs(comm* c, const char* fn) {
#if GRAPH_WAIT
    struct timespec dl = warn_deadline();
    int warned = 0;
    while (c->graph_refs > 0) {
        if (warned) {
            pthread_cond_wait(&gc, &g);
            continue;
        }
        if (pthread_cond_timedwait(&gc, &g, &dl) != ETIMEDOUT || c->graph_refs <= 0) continue;
        warned = 1;
        int n = c->graph_refs;
        pthread_mutex_unlock(&g);
        fprintf(stderr,
                "fakenccl: %s on rank %d waits for CUDA graphs holding %d captured launch(es) of the communicator "
                "to be destroyed (cudaGraphExecDestroy and cudaGraphDestroy): NCCL >= 2.26 waits for them too\n",
                fn, c->rank, n);
        pthread_mutex_lock(&g);
    }
#endif
}

/* warn_deadline is now plus warn_ms, for a timed wait that warns once. */
static struct timespec warn_deadline(void) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    long ms = warn_ms();
    dl.tv_sec += ms / 1000;
    dl.tv_nsec += ms % 1000 * 1000000;
    if (dl.tv_nsec >= 1000000000) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000;
    }
    return dl;
}

static ncclResult_t release(comm* c, const char* fn, int wait) {
    if (!c) return fail(ncclInvalidArgument, "%s: comm is NULL", fn);
    ncclResult_t r = live(c, fn);
    if (r && r != ncclInvalidUsage) return r; /* a comm still initializing may be aborted */
    if (wait && !r && (r = ready_err(c))) /* ncclCommEnsureReady: a communicator left in error is only aborted */
        return fail(r, "%s: the communicator is in error (%s): only ncclCommAbort frees it", fn, ncclGetErrorString(r));
    release_begin(c, wait ? 1 : 2);
    if (wait) wait_idle(c);
    pthread_mutex_lock(&g);
    if (!wait) c->aborted = 1;
    pthread_cond_broadcast(&gc); /* an abort stops the work in flight first */
    while (c->launches) pthread_cond_wait(&gc, &g); /* and joins its group jobs' threads (ncclGroupJobAbort) */
    job_unlink(c); /* ncclGroupJobAbort (abort), or the completed job's link (destroy) */
    wait_graphs(c, fn);
    c->freed_by = fn;
    __atomic_store_n(&c->magic, DEAD_MAGIC, __ATOMIC_RELEASE); /* kept allocated: work in flight may still read it */
    if (c->host_fd >= 0) shutdown(c->host_fd, SHUT_RDWR); /* an init given up: its address takes no one more */
    /* A remote rank's connection closes: its hub marks the rank's proxy
     * aborted. Whoever still uses the connection closes it last. */
    c->io_closing = 1;
    if (c->fd >= 0) {
        shutdown(c->fd, SHUT_RDWR);
        if (c->io_users == 0) {
            close(c->fd);
            c->fd = -1;
        }
    }
    pthread_cond_broadcast(&gc);
    pthread_mutex_unlock(&g);
    release_end(c);
    return ncclSuccess;
}

API ncclResult_t ncclCommDestroy(comm* c) { return release(c, "ncclCommDestroy", 1); }
API ncclResult_t ncclCommAbort(comm* c) { return release(c, "ncclCommAbort", 0); }

API ncclResult_t ncclCommGetAsyncError(comm* c, ncclResult_t* r) {
    if (!c || !r) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: NULL argument");
    CALL(c, "ncclCommGetAsyncError");
    pthread_mutex_lock(&g);
    int k = known(c);
    if (k && c->magic == DEAD_MAGIC) {
        fprintf(stderr, "fakenccl: ncclCommGetAsyncError: use of destroyed communicator %p\n", (void*)c);
        abort();
    }
    if (k) *r = c->async;
    pthread_mutex_unlock(&g);
    if (!k) return fail(ncclInvalidArgument, "ncclCommGetAsyncError: invalid comm");
    if (*r == ncclSuccess) job_complete(c); /* the job it was linked to, done: joined (see job_complete) */
    return ncclSuccess;
}

API ncclResult_t ncclCommCount(comm* c, int* n) {
    CALL(c, "ncclCommCount");
    ncclResult_t r = live(c, "ncclCommCount");
    if (r || (r = ready_err(c))) return r;
    if (!n) return fail(ncclInvalidArgument, "ncclCommCount: count is NULL");
    *n = c->nranks;
    return ncclSuccess;
}

API ncclResult_t ncclCommCuDevice(comm* c, int* d) {
    CALL(c, "ncclCommCuDevice");
    ncclResult_t r = live(c, "ncclCommCuDevice");
    if (r || (r = ready_err(c))) return r;
    if (!d) return fail(ncclInvalidArgument, "ncclCommCuDevice: device is NULL");
    *d = c->dev;
    return ncclSuccess;
}

API ncclResult_t ncclCommUserRank(comm* c, int* rank) {
    CALL(c, "ncclCommUserRank");
    ncclResult_t r = live(c, "ncclCommUserRank");
    if (r || (r = ready_err(c))) return r;
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
static const char* kind_names[] = {"AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter", "AlltoAll",
                                   "Gather", "Scatter", "Send", "Recv", "AlltoAllv"};
static const char* api_names[] = {"ncclAllReduce", "ncclBroadcast", "ncclReduce", "ncclAllGather", "ncclReduceScatter",
                                  "ncclAlltoAll", "ncclGather", "ncclScatter", "ncclSend", "ncclRecv", "ncclAlltoAllv"};
static const char* type_names[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32",
                                   "float64", "bfloat16", "float8e4m3", "float8e5m2"};

typedef struct task {
    int kind, type, op, root, peer;
    const void* send;
    void* recv;
    size_t count;
    comm* c;
    long seq;
    long ticket; /* a remote rank's work item: its turn on the connection */
    int overlap; /* send and recv overlap (a remote rank's in-place AlltoAll) */
    int owed;    /* at the hub: a proxy's result is owed to its remote rank */
    void* stream;
    /* PreMulSum scalar, resolved at launch */
    int premul_res;
    double scalar_f;
    int64_t scalar_i;
    const void* scalar_ptr;
    size_t* a2av; /* sendcounts, sdispls, recvcounts, rdispls: copied at launch */
    const size_t* a2av_user[4]; /* the caller's arrays, read until the group ends (as VCCL does) */
    unsigned long a2av_sum;     /* their checksum when the call was made */
    int asks;    /* a Send or Recv whose call set NCCL's hasSeen flag: its group asks to connect that direction */
    int refs;    /* holders besides its owner: the collective slot it was placed in (see task_put) */
    int dropped; /* its owner is done with it: the last holder frees it */
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
        if (me->overlap || ((const char*)me->send < (const char*)me->recv + n * cnt * sz &&
                            (const char*)me->recv < (const char*)me->send + n * cnt * sz))
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

/* in_bytes is how much of send the collective reads from this rank. */
static size_t in_bytes(task* me) {
    int n = me->c->nranks, sz = type_size(me->type), root = me->c->rank == me->root;
    switch (me->kind) {
    case kReduceScatter: case kAlltoAll: return me->count * n * sz;
    case kBroadcast: return root ? me->count * sz : 0;
    case kScatter: return root ? me->count * n * sz : 0;
    case kAlltoAllv: {
        size_t end = 0, *sc = me->a2av, *sd = me->a2av + n * n;
        for (int j = 0; j < n; j++) {
            size_t e = sd[me->c->rank * n + j] + sc[me->c->rank * n + j];
            if (sc[me->c->rank * n + j] && e > end) end = e;
        }
        return end * sz;
    }
    }
    return me->count * sz;
}

/* receives: whether this rank's recv gets a result. */
static int receives(task* me) { return !((me->kind == kReduce || me->kind == kGather) && me->c->rank != me->root); }

static int is_reduction(int kind) { return kind == kAllReduce || kind == kReduce || kind == kReduceScatter; }
static int is_rooted(int kind) { return kind == kBroadcast || kind == kReduce || kind == kGather || kind == kScatter; }
static int op_class(int op) { return op >= opPreMul ? opPreMul : op; }

static void describe(task* t, char* out, size_t n) {
    static const char* ops[] = {"sum", "prod", "max", "min", "avg", "premulsum"};
    int k = snprintf(out, n, "%s(", kind_names[t->kind]);
    if (t->kind != kAlltoAllv) k += snprintf(out + k, n - k, "count %zu, ", t->count);
    k += snprintf(out + k, n - k, "%s", t->type >= 0 && t->type < 12 ? type_names[t->type] : "?");
    if (is_reduction(t->kind)) k += snprintf(out + k, n - k, ", %s", ops[op_class(t->op)]);
    if (is_rooted(t->kind)) k += snprintf(out + k, n - k, ", root %d", t->root);
    snprintf(out + k, n - k, ")");
}

/* same_call says whether two ranks' calls of one collective agree. */
static int same_call(task* a, task* b) {
    if (a->kind != b->kind || a->type != b->type) return 0;
    if (a->kind != kAlltoAllv && a->count != b->count) return 0;
    if (is_reduction(a->kind) && op_class(a->op) != op_class(b->op)) return 0;
    if (is_rooted(a->kind) && a->root != b->root) return 0;
    return 1;
}

/* check_calls compares every rank's call with rank 0's (g held). */
static void check_calls(slot* s, int n) {
    s->checked = 1;
    for (int r = 1; r < n; r++)
        if (!same_call(s->task[0], s->task[r])) {
            char a[150], b[150];
            describe(s->task[0], a, sizeof a);
            describe(s->task[r], b, sizeof b);
            snprintf(s->why, sizeof s->why, "fakenccl: collective #%ld mismatch: rank 0 called %s but rank %d called %s",
                     s->seq + 1, a, r, b);
            s->bad = 1;
            return;
        }
}

/* mismatch makes a collective's mismatch loud on c: its async error, the last
 * error, and stderr once per collective in this process. */
static void mismatch(comm* c, long seq, const char* why) {
    static uint64_t printed_key;
    static long printed_seq = -1;
    /* The text first: a waiter that sees the error reads it at once. */
    if (!c->proxy) fail(ncclInvalidUsage, "%s", why);
    pthread_mutex_lock(&g);
    set_sticky(c, ncclInvalidUsage);
    pthread_mutex_unlock(&g);
    if (c->proxy) return; /* its own process says it */
    pthread_mutex_lock(&errmu);
    if (printed_key != c->key || printed_seq != seq) {
        printed_key = c->key;
        printed_seq = seq;
        fprintf(stderr, "%s\n", why);
    }
    pthread_mutex_unlock(&errmu);
}

/* A collective's task is read by the other ranks once it is in its slot
 * (check_calls compares the calls, compute reads the inputs): its owner (the
 * work item, or a hub's request) gives it up with task_put, and the slot
 * holds it (refs) until every rank has arrived and none is still inside, so
 * that a rank stopped by an abort (or a revoke) leaves its task readable by
 * the peers that still come to check it. A slot a rank never reaches keeps
 * its tasks: a checker may still come. */
static void task_free(task* t) {
    free(t->a2av);
    free(t);
}

/* task_put: the owner is done with t. */
static void task_put(task* t) {
    pthread_mutex_lock(&g);
    int held = t->refs > 0;
    if (held) t->dropped = 1;
    pthread_mutex_unlock(&g);
    if (!held) task_free(t);
}

/* slot_leave: a rank is done reading s's tasks (g held). */
static void slot_leave(slot* s, int n) {
    s->inside--;
    if (s->inside > 0 || s->arrived < n) return;
    for (int r = 0; r < n; r++) {
        task* t = s->task[r];
        s->task[r] = NULL;
        if (t && --t->refs == 0 && t->dropped) task_free(t);
    }
}

/* run_collective meets the other ranks' tasks of the same sequence number,
 * checks that they all called the same collective, computes into a private
 * buffer once all inputs are there, and writes it out only when every rank
 * has finished reading: in-place forms stay correct. It returns
 * ncclInvalidUsage when the calls differ (nothing moved; why says how). */
static ncclResult_t run_collective(task* me, char* why, size_t whylen) {
    clique* q = me->c->c;
    int n = me->c->nranks;
    pthread_mutex_lock(&g);
    slot* s = &q->slots[me->seq % SLOTS];
    while (s->busy && s->seq != me->seq && !stopped(me->c)) pthread_cond_wait(&gc, &g);
    if (stopped(me->c)) {
        pthread_mutex_unlock(&g);
        return ncclSuccess;
    }
    if (!s->busy) {
        for (int r = 0; r < MAXR; r++) /* none left by now: every rank arrived and left */
            if (s->task[r] && --s->task[r]->refs == 0 && s->task[r]->dropped) task_free(s->task[r]);
        memset(s, 0, sizeof *s);
        s->busy = 1;
        s->seq = me->seq;
    }
    s->task[me->c->rank] = me;
    me->refs++;
    s->inside++;
    s->arrived++;
    pthread_cond_broadcast(&gc);
    while (s->arrived < n && !stopped(me->c)) pthread_cond_wait(&gc, &g);
    if (!stopped(me->c) && !s->checked) check_calls(s, n);
    int bad = s->bad;
    if (bad) snprintf(why, whylen, "%s", s->why);
    if (stopped(me->c)) { /* the kernel quits on NCCL's abort flag; the task stays for the peers */
        slot_leave(s, n);
        pthread_mutex_unlock(&g);
        return ncclSuccess;
    }
    pthread_mutex_unlock(&g);

    size_t bytes = out_bytes(me);
    char* out = receives(me) && !bad ? malloc(bytes ? bytes : 1) : NULL;
    if (out && me->kind == kAlltoAllv) memcpy(out, me->recv, bytes);
    if (out) compute(s->task, n, me, out);

    pthread_mutex_lock(&g);
    s->computed++;
    pthread_cond_broadcast(&gc);
    while (s->computed < n && !stopped(me->c)) pthread_cond_wait(&gc, &g);
    if (stopped(me->c)) {
        slot_leave(s, n);
        pthread_mutex_unlock(&g);
        free(out);
        return ncclSuccess;
    }
    pthread_mutex_unlock(&g);
    if (out) memcpy(me->recv, out, bytes);
    free(out);
    pthread_mutex_lock(&g);
    s->left++;
    slot_leave(s, n);
    if (me->c->proxy) me->owed = 1; /* collective_delivered, once its remote rank has it */
    else /* the hub's own ranks end after the remote ranks have their results: the process may exit next */
        while (s->busy && s->seq == me->seq && s->delivered < q->nproxies && !stopped(me->c)) pthread_cond_wait(&gc, &g);
    if (s->busy && s->seq == me->seq && s->left == n && s->delivered == q->nproxies) s->busy = 0;
    pthread_cond_broadcast(&gc);
    pthread_mutex_unlock(&g);
    if (bad) mismatch(me->c, me->seq, why);
    return bad ? ncclInvalidUsage : ncclSuccess;
}

static int broken_peer(comm* c, uint64_t p2p);
static ncclResult_t broken_fail(const char* fn, int me, int peer);

/* run_p2p posts every send of a batch, performs its receives, then waits until
 * its sends were taken: any matched pattern completes, as NCCL groups do. */
static ncclResult_t run_p2p(task* batch) {
    ncclResult_t res = ncclSuccess;
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
        int broken = 0;
        for (;;) {
            for (m = q->mail; m; m = m->next)
                if (!m->taken && m->src == t->peer && m->dst == t->c->rank && m->seq == t->seq) break;
            if (m || stopped(t->c)) break;
            if ((broken = broken_peer(t->c, 1ull << t->peer) >= 0)) break;
            pthread_cond_wait(&gc, &g);
        }
        if (!m && broken) { /* the peer's side of the connection setup failed: see p2p_stale */
            set_sticky(t->c, ncclRemoteError);
            res = broken_fail("ncclRecv", t->c->rank, t->peer);
        }
        if (!m) continue; /* aborted */
        size_t want = t->count * type_size(t->type);
        if (m->bytes != want) {
            set_sticky(t->c, ncclInvalidUsage);
            res = fail(ncclInvalidUsage, "ncclRecv: peer %d sent %zu bytes, %zu expected", t->peer, m->bytes, want);
        }
        memcpy(t->recv, m->buf, m->bytes < want ? m->bytes : want);
        /* At the hub, a sender of this process ends only once the remote rank
         * has the bytes (taken 1, after_p2p): this process may exit next. */
        m->taken = t->c->proxy ? 2 : 1;
        pthread_cond_broadcast(&gc);
    }
    for (task* t = batch; t; t = t->next) {
        if (t->kind != kSend) continue;
        clique* q = t->c->c;
        for (;;) {
            msg** pm = &q->mail;
            while (*pm && !((*pm)->src == t->c->rank && (*pm)->dst == t->peer && (*pm)->seq == t->seq)) pm = &(*pm)->next;
            if (*pm && ((*pm)->taken == 1 || ((*pm)->taken && t->c->proxy))) {
                msg* m = *pm;
                *pm = m->next;
                free(m);
                break;
            }
            if (stopped(t->c)) break;
            if (broken_peer(t->c, 1ull << t->peer) >= 0) { /* never taken: see p2p_stale */
                if (*pm && !(*pm)->taken) {
                    msg* m = *pm;
                    *pm = m->next;
                    free(m);
                }
                set_sticky(t->c, ncclRemoteError);
                res = broken_fail("ncclSend", t->c->rank, t->peer);
                break;
            }
            pthread_cond_wait(&gc, &g);
        }
    }
    pthread_mutex_unlock(&g);
    return res;
}

/* ---- a remote rank's operations: its hub runs them on its proxy ---- */

/* remote_collective sends this rank's call and input to the hub and writes
 * the result the hub computed into recv. */
static void remote_collective(task* t) {
    comm* c = t->c;
    int n = c->nranks;
    size_t sb = in_bytes(t), rb = out_bytes(t);
    wbuf b = {0};
    wb_start(&b, M_COLL);
    wb_i64(&b, t->seq);
    wb_i32(&b, t->kind);
    wb_i32(&b, t->type);
    wb_i32(&b, op_class(t->op));
    wb_i32(&b, t->root);
    wb_u64(&b, t->count);
    val s = {0};
    if (is_reduction(t->kind) && t->op >= opPreMul) s = scalar_of(t); /* a device scalar is read now, as the kernel would */
    wb_put(&b, &s, 8);
    int overlap = sb && rb && (const char*)t->send < (const char*)t->recv + rb && (const char*)t->recv < (const char*)t->send + sb;
    wb_i32(&b, overlap);
    if (t->kind == kAlltoAllv)
        for (int i = 0; i < 4 * n * n; i++) wb_u64(&b, t->a2av[i]);
    wb_u64(&b, sb);
    wb_put(&b, t->send, sb);
    size_t cur = t->kind == kAlltoAllv ? rb : 0; /* what alltoallv leaves untouched stays */
    wb_u64(&b, cur);
    wb_put(&b, t->recv, cur);
    char* p = NULL;
    rbuf r;
    int st = rpc(c, NULL, &b, &p, &r);
    free(b.p);
    if (st) return; /* aborted */
    ncclResult_t res = rb_i32(&r);
    char why[1024];
    rb_str(&r, why, sizeof why);
    size_t got = rb_u64(&r);
    const char* bytes = rb_take(&r, got);
    if (res == ncclInvalidUsage) mismatch(c, t->seq, why);
    else if (bytes && got <= rb && receives(t)) memcpy(t->recv, bytes, got);
    free(p);
}

/* remote_p2p sends a batch's sends with their bytes and its receives' sizes;
 * the hub answers with the received bytes once its proxy's batch is done. */
static void remote_p2p(task* batch) {
    comm* c = batch->c;
    int nt = 0;
    for (task* t = batch; t; t = t->next) nt++;
    wbuf b = {0};
    wb_start(&b, M_P2P);
    wb_i32(&b, nt);
    for (task* t = batch; t; t = t->next) {
        wb_i32(&b, t->kind);
        wb_i32(&b, t->type);
        wb_i32(&b, t->peer);
        wb_i64(&b, t->seq);
        wb_u64(&b, t->count);
    }
    for (task* t = batch; t; t = t->next)
        if (t->kind == kSend) wb_put(&b, t->send, t->count * type_size(t->type));
    char* p = NULL;
    rbuf r;
    int st = rpc(c, NULL, &b, &p, &r);
    free(b.p);
    if (st) return;
    ncclResult_t res = rb_i32(&r);
    char why[1024];
    rb_str(&r, why, sizeof why);
    for (task* t = batch; t; t = t->next) {
        if (t->kind != kRecv) continue;
        size_t k = t->count * type_size(t->type);
        const char* bytes = rb_take(&r, k);
        if (bytes) memcpy(t->recv, bytes, k);
    }
    if (res) {
        fail(res, "%s", why); /* the text before the error a waiter sees */
        pthread_mutex_lock(&g);
        set_sticky(c, res);
        pthread_mutex_unlock(&g);
    }
    free(p);
}

/* A work item: one (comm, stream)'s tasks of one group, in order. */
static void run_item(void* p) {
    task* list = p;
    comm* c = list->c;
    long ticket = list->ticket;
    if (c->remote) { /* its turn on the connection: launch order, as NCCL runs a communicator's work */
        pthread_mutex_lock(&g);
        while (c->ticket_serving != ticket && !rstopped(c)) pthread_cond_wait(&gc, &g);
        pthread_mutex_unlock(&g);
    }
    task *p2p = NULL, **tail = &p2p;
    char why[480];
    for (task* t = list; t;) {
        task* next = t->next;
        if (t->kind == kSend || t->kind == kRecv) {
            t->next = NULL;
            *tail = t;
            tail = &t->next;
        } else {
            if (!c->remote) run_collective(t, why, sizeof why);
            else if (!rstopped(c)) remote_collective(t);
            task_put(t);
        }
        t = next;
    }
    if (p2p && !c->remote) run_p2p(p2p);
    else if (p2p && !rstopped(c)) remote_p2p(p2p);
    while (p2p) {
        task* next = p2p->next;
        free(p2p);
        p2p = next;
    }
    pthread_mutex_lock(&g);
    if (c->remote && c->ticket_serving == ticket) c->ticket_serving++;
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

/* number gives a task its place among its communicator's operations (g held):
 * ranks meet on these numbers, so every rank numbers in its call order. */
static void number(task* t) {
    if (t->kind == kSend) t->seq = t->c->send_seq[t->peer]++;
    else if (t->kind == kRecv) t->seq = t->c->recv_seq[t->peer]++;
    else t->seq = t->c->coll_seq++;
}

/* ---- CUDA graphs: a captured work item is a template; each graph launch runs a copy ----
 *
 * As NCCL records a persistent plan into the graph and re-arms it at each
 * launch, a capture records the (comm, stream)'s task list unnumbered, and
 * each cudaGraphLaunch asks for a fresh copy (clone_item, at launch time, in
 * launch order): numbered then, so a launch of rank 0's graph meets the
 * matching launch of rank 1's (a launch is collective: it completes only once
 * the peers have launched theirs), counted in pending, and for a rank of
 * another process given its turn on the connection to the hub. The graph owns
 * the template and gives it back (release_item) when the last graph holding
 * it is destroyed; until then the communicator counts it (graph_refs, NCCL's
 * localPersistentRefs), and from 2.26 its destroy and abort wait for that. */

/* graph_comm is the communicator of a captured item being launched: launching
 * a graph whose communicator was freed (possible before 2.26, which does not
 * wait for the graphs) uses freed memory, which the fake makes loud. */
static comm* graph_comm(comm* c) {
    if (c->magic == DEAD_MAGIC) {
        fprintf(stderr, "fakenccl: a CUDA graph launched work of destroyed communicator %p\n", (void*)c);
        abort();
    }
    return c;
}

static void* clone_item(void* p) {
    task* tmpl = p;
    comm* c = graph_comm(tmpl->c);
    task *head = NULL, **tail = &head;
    for (task* t = tmpl; t; t = t->next) {
        task* k = malloc(sizeof *k);
        *k = *t;
        k->next = NULL;
        k->refs = k->dropped = 0;
        if (t->a2av) {
            size_t n = 4 * (size_t)c->nranks * c->nranks * sizeof(size_t);
            k->a2av = malloc(n);
            memcpy(k->a2av, t->a2av, n);
        }
        *tail = k;
        tail = &k->next;
    }
    pthread_mutex_lock(&g);
    for (task* t = head; t; t = t->next) number(t);
    c->pending++;
    if (c->remote) head->ticket = c->ticket_next++;
    pthread_mutex_unlock(&g);
    return head;
}

static void release_item(void* p) {
    task* tmpl = p;
    comm* c = tmpl->c;
    free_tasks(tmpl);
    pthread_mutex_lock(&g);
    c->graph_refs--;
    pthread_cond_broadcast(&gc);
    pthread_mutex_unlock(&g);
}

/* stream_error is an enqueue's CUDA failure as the NCCL call's. */
static ncclResult_t stream_error(int e, void* st, const char* fn) {
    switch (e) {
    case 900: /* cudaErrorStreamCaptureUnsupported */
        return fail(ncclUnhandledCudaError, "%s: stream %p began capturing a CUDA graph during the call", fn, st);
    case 901: /* cudaErrorStreamCaptureInvalidated */
        return fail(ncclUnhandledCudaError, "%s: stream %p is capturing a CUDA graph that an earlier error invalidated", fn, st);
    case 906: /* cudaErrorStreamCaptureImplicit */
        return fail(ncclUnhandledCudaError, "%s: the legacy stream would join a capturing blocking stream of its device", fn);
    }
    return fail(ncclUnhandledCudaError, "%s: invalid stream %p", fn, st);
}

/* ---- lazy connection: a communicator's first operations connect it to the ranks they need ---- */

static long warn_ms(void) {
    const char* s = getenv("FAKENCCL_CONNECT_WARN_MS");
    return s && *s ? atol(s) : 10000;
}

/* missing is the lowest rank of need that has not issued its first operation, or -1 (g held). */
static int missing(clique* q, uint64_t need) {
    uint64_t m = need & ~q->started;
    return m ? __builtin_ctzll(m) : -1;
}

/* broken_peer is the lowest rank of p2p whose side of a point-to-point
 * connection setup with c failed (see p2p_stale), or -1 (g held). */
static int broken_peer(comm* c, uint64_t p2p) {
    clique* q = c->c;
    for (uint64_t m = p2p; m; m &= m - 1) {
        int r = __builtin_ctzll(m);
        comm* k = q && r < q->nranks ? q->comm[r] : NULL;
        if (k && (__atomic_load_n(&k->p2p_broken, __ATOMIC_RELAXED) >> c->rank & 1)) return r;
    }
    return -1;
}

/* broken_text says why a rank's point-to-point work with a broken peer fails. */
static ncclResult_t broken_fail(const char* fn, int me, int peer) {
    return fail(ncclRemoteError,
                "%s: rank %d cannot connect its Send/Recv with rank %d: rank %d's side of the connection setup failed "
                "(a discarded group left its per-peer connection flags set; real NCCL fails or hangs here)",
                fn, me, peer, peer);
}

/* connect_wait waits (g held) until every rank of need has issued its first
 * operation (0), or c is aborted (-1), or a peer of p2p (ranks this launch
 * asks to connect Send/Recv with) has broken its side of the setup (-2).
 * Past the warning time it says once why it waits: on stderr, or in a note to
 * the remote rank c stands for (note_fd). */
static int connect_wait(comm* c, uint64_t need, uint64_t p2p, const char* fn, int note_fd) {
    clique* q = c->c;
    struct timespec dl = warn_deadline();
    int warned = 0;
    while (missing(q, need) >= 0 && !stopped(c) && broken_peer(c, p2p) < 0) {
        if (warned) {
            pthread_cond_wait(&gc, &g);
            continue;
        }
        if (pthread_cond_timedwait(&gc, &g, &dl) != ETIMEDOUT || missing(q, need) < 0 || stopped(c)) continue;
        warned = 1;
        char text[400];
        snprintf(text, sizeof text,
                 "fakenccl: %s on rank %d waits for rank %d to connect: one thread driving several ranks of a "
                 "communicator needs ncclGroupStart/ncclGroupEnd",
                 fn, c->rank, missing(q, need));
        pthread_mutex_unlock(&g);
        if (note_fd >= 0) {
            wbuf b = {0};
            wb_start(&b, M_NOTE);
            wb_put(&b, text, strlen(text));
            wb_send(note_fd, &b);
            free(b.p);
        } else {
            fprintf(stderr, "%s\n", text);
        }
        pthread_mutex_lock(&g);
    }
    if (stopped(c)) return -1;
    return broken_peer(c, p2p) >= 0 ? -2 : 0;
}

/* ---- point-to-point connection flags left by a discarded group ----
 *
 * NCCL sets per-peer "seen" flags on its Send/Recv connectors at the call
 * (enqueue.cc p2pTaskAppend: hasSeen, with a connectSend/connectRecv bit that
 * asks ncclGroupEnd to connect that direction), and never clears hasSeen: a
 * group discarded by groupCleanup clears the request bits, not the flags. Only
 * a direction not connected yet is asked for (P2P connections are made
 * lazily, whatever NCCL_RUNTIME_CONNECT says; once connected the flags do not
 * matter). So after a discarded group held a Send to peer p (or a Recv from
 * p) on a connection not yet made, this rank never asks for that direction
 * again, while p asks for its side: their connection setup exchange differs in
 * size (seen on 4 x H100, 2.28.3 and 2.30.7: one rank asked for one direction,
 * the peer for two: "Message truncated : received 16384 bytes instead of
 * 8192", ncclInternalError at ncclGroupEnd). The fake models each direction
 * as 8192 bytes of connection information, one exchange per pair of ranks:
 * the next launch of this rank that needs such a direction with p fails with
 * ncclInternalError and that text (when this rank asks for nothing at all,
 * real NCCL skips the exchange and hangs instead; the fake fails, saying
 * so), and the connection with p stays broken: p's matching group fails with
 * ncclRemoteError when it connects (or, already connected, when its Send/Recv
 * runs: the communicator's asynchronous error), instead of hanging. */

/* p2p_asks sets NCCL's hasSeen flag of a Send or Recv at its call (g held). */
static void p2p_asks(task* t) {
    comm* c = t->c;
    if ((t->kind != kSend && t->kind != kRecv) || t->peer == c->rank) return;
    uint64_t bit = 1ull << t->peer, *seen = t->kind == kSend ? &c->seen_send : &c->seen_recv;
    if (!(*seen & bit)) {
        *seen |= bit;
        t->asks = 1;
    }
}

typedef struct {
    comm* c;
    uint64_t has_s, has_r, ask_s, ask_r; /* peers of its Send/Recv tasks; those whose call set the flag */
} p2pset;

/* p2p_sets gathers a launch's Send/Recv peers by communicator (g held). */
static int p2p_sets(task* list, p2pset** out) {
    p2pset* ps = NULL;
    int n = 0, cap = 0;
    for (task* t = list; t; t = t->next) {
        if ((t->kind != kSend && t->kind != kRecv) || t->peer == t->c->rank) continue;
        int i = 0;
        while (i < n && ps[i].c != t->c) i++;
        if (i == n) {
            if (n == cap) ps = realloc(ps, (cap = 2 * cap + 4) * sizeof *ps);
            ps[n++] = (p2pset){t->c, 0, 0, 0, 0};
        }
        uint64_t bit = 1ull << t->peer;
        if (t->kind == kSend) {
            ps[i].has_s |= bit;
            if (t->asks) ps[i].ask_s |= bit;
        } else {
            ps[i].has_r |= bit;
            if (t->asks) ps[i].ask_r |= bit;
        }
    }
    *out = ps;
    return n;
}

/* p2p_stale fails a launch that needs a direction a discarded group left
 * flagged but unconnected, and marks the connection with that peer broken. */
static ncclResult_t p2p_stale(task* list, const char* fn) {
    p2pset* ps;
    pthread_mutex_lock(&g);
    int n = p2p_sets(list, &ps);
    comm* bc = NULL;
    int peer = -1, needed = 0, asked = 0;
    for (int i = 0; i < n && !bc; i++) {
        comm* c = ps[i].c;
        uint64_t stale = (ps[i].has_s & c->seen_send & ~c->conn_send & ~ps[i].ask_s) |
                         (ps[i].has_r & c->seen_recv & ~c->conn_recv & ~ps[i].ask_r);
        if (!stale) continue;
        bc = c;
        peer = __builtin_ctzll(stale);
        uint64_t bit = 1ull << peer;
        needed = !!(ps[i].has_s & ~c->conn_send & bit) + !!(ps[i].has_r & ~c->conn_recv & bit);
        asked = !!(ps[i].ask_s & bit) + !!(ps[i].ask_r & bit);
        c->p2p_broken |= bit;
        if (!c->remote) c->c->started |= 1ull << c->rank; /* it reached the setup: a peer waiting there learns */
        pthread_cond_broadcast(&gc);
    }
    pthread_mutex_unlock(&g);
    free(ps);
    if (!bc) return ncclSuccess;
    if (bc->remote) { /* its hub marks the rank's proxy: the peers there learn too */
        wbuf b = {0};
        wb_start(&b, M_CONNECT);
        wb_u64(&b, 0);
        wb_str(&b, fn);
        wb_u64(&b, 0);
        wb_u64(&b, bc->p2p_broken);
        char* p = NULL;
        rbuf r;
        if (rpc(bc, NULL, &b, &p, &r) == 0) free(p);
        free(b.p);
    }
    if (asked)
        return fail(ncclInternalError, "Message truncated : received %d bytes instead of %d", 8192 * needed, 8192 * asked);
    return fail(ncclInternalError,
                "%s: rank %d does not ask to connect its Send/Recv with rank %d (a discarded group left NCCL's per-peer "
                "connection flags set) while rank %d asks: real NCCL hangs in the connection setup here",
                fn, bc->rank, peer, peer);
}

/* p2p_connected marks the directions a launch connected (g held). */
static void p2p_connected(task* list) {
    for (task* t = list; t; t = t->next) {
        if ((t->kind != kSend && t->kind != kRecv) || t->peer == t->c->rank) continue;
        if (t->kind == kSend) t->c->conn_send |= 1ull << t->peer;
        else t->c->conn_recv |= 1ull << t->peer;
    }
}

/* connect_first makes the connections a launch's tasks still need, as NCCL
 * 2.22+ does inside the first operations: a collective needs every rank, a
 * send or receive its peer, and each must have issued its first operation
 * too. Every communicator of the group counts as connecting before any of them
 * waits, so one group covering several ranks connects them all. A Send/Recv
 * direction not connected yet is set up with its peer: a peer whose side of
 * that setup failed fails it (ncclRemoteError). */
static ncclResult_t connect_first(task* list, const char* fn) {
    ncclResult_t r = p2p_stale(list, fn);
    if (r) return r;
    typedef struct {
        comm* c;
        uint64_t need, p2p;
        int sent;
    } want_t;
    want_t* ws = NULL;
    int n = 0, cap = 0;
    pthread_mutex_lock(&g);
    for (task* t = list; t; t = t->next) {
        comm* c = t->c;
        int p2p = t->kind == kSend || t->kind == kRecv;
        uint64_t w = p2p ? 1ull << t->peer : all_ranks(c->nranks);
        w &= ~(1ull << c->rank) & ~c->connected;
        uint64_t pw = 0;
        if (p2p && t->peer != c->rank && !((t->kind == kSend ? c->conn_send : c->conn_recv) >> t->peer & 1))
            pw = 1ull << t->peer;
        if (!w && !pw) continue;
        int i = 0;
        while (i < n && ws[i].c != c) i++;
        if (i == n) {
            if (n == cap) ws = realloc(ws, (cap = 2 * cap + 4) * sizeof *ws);
            ws[n++] = (want_t){c, 0, 0, 0};
        }
        ws[i].need |= w;
        ws[i].p2p |= pw;
    }
    for (int i = 0; i < n; i++)
        if (!ws[i].c->remote) ws[i].c->c->started |= 1ull << ws[i].c->rank;
    pthread_cond_broadcast(&gc);
    pthread_mutex_unlock(&g);
    if (!n) return ncclSuccess;
    for (int i = 0; i < n; i++) { /* a remote rank connects at its hub */
        if (!ws[i].c->remote) continue;
        wbuf b = {0};
        wb_start(&b, M_CONNECT);
        wb_u64(&b, ws[i].need);
        wb_str(&b, fn);
        wb_u64(&b, ws[i].p2p);
        wb_u64(&b, 0);
        ws[i].sent = rpc_send(ws[i].c, NULL, &b) == 0;
        free(b.p);
    }
    int failed = 0, bpeer = -1;
    comm* bc = NULL;
    char text[1024] = "";
    pthread_mutex_lock(&g);
    for (int i = 0; i < n; i++) {
        if (ws[i].c->remote) continue;
        int st = connect_wait(ws[i].c, ws[i].need, ws[i].p2p, fn, -1);
        if (st == -2 && !bc) {
            bc = ws[i].c;
            bpeer = broken_peer(bc, ws[i].p2p);
        }
        if (st) failed = 1;
        else ws[i].c->connected |= ws[i].need;
    }
    pthread_mutex_unlock(&g);
    for (int i = 0; i < n; i++) {
        if (!ws[i].c->remote) continue;
        char* p = NULL;
        rbuf rr;
        int got = ws[i].sent && rpc_recv(ws[i].c, NULL, &p, &rr) == 0;
        ncclResult_t res = got ? rb_i32(&rr) : ncclInternalError;
        if (res) {
            failed = 1;
            if (got && res == ncclRemoteError && !text[0]) rb_str(&rr, text, sizeof text);
        } else {
            pthread_mutex_lock(&g);
            ws[i].c->connected |= ws[i].need;
            pthread_mutex_unlock(&g);
        }
        free(p);
    }
    free(ws);
    if (bc) return broken_fail(fn, bc->rank, bpeer);
    if (text[0]) return fail(ncclRemoteError, "%s", text);
    if (failed) return fail(ncclInternalError, "%s: the communicator was aborted while connecting", fn);
    pthread_mutex_lock(&g);
    p2p_connected(list);
    pthread_mutex_unlock(&g);
    return ncclSuccess;
}

/* itemmode: whether a capture records a (comm, stream)'s work item. */
typedef struct {
    comm* c;
    void* st;
    int captured;
} itemmode;

static int captured_item(const itemmode* ms, const task* t) {
    while (ms->c != t->c || ms->st != t->stream) ms++;
    return ms->captured;
}

/* launch connects what needs it, numbers the tasks and hands each (comm,
 * stream) its work item. An item for a capturing stream is recorded into the
 * graph instead, unnumbered: each graph launch numbers a copy of it. */
static ncclResult_t launch(task* list, const char* fn) {
    for (task* t = list; t; t = t->next) {
        if (t->kind != kAlltoAllv) continue;
        int n = t->c->nranks;
        if (a2av_checksum(t->a2av_user, n) != t->a2av_sum) {
            free_tasks(list);
            return fail(ncclInvalidUsage, "ncclAlltoAllv : count or displacement arrays changed before the group ended");
        }
        for (int k = 0; k < 4; k++) memcpy(t->a2av + k * n * n, t->a2av_user[k], n * n * sizeof(size_t));
    }
    ncclResult_t r = connect_first(list, fn);
    if (r) {
        free_tasks(list);
        return r;
    }
    itemmode* ms = NULL;
    int nm = 0, cap = 0;
    for (task* t = list; t; t = t->next) {
        int i = 0;
        while (i < nm && !(ms[i].c == t->c && ms[i].st == t->stream)) i++;
        if (i < nm) continue;
        if (nm == cap) ms = realloc(ms, (cap = 2 * cap + 4) * sizeof *ms);
        int e = fakecuda_stream_capturing(t->stream, t->c->dev);
        if (e > 0) {
            free(ms);
            free_tasks(list);
            return stream_error(e, t->stream, fn);
        }
        ms[nm++] = (itemmode){t->c, t->stream, e < 0};
    }
    pthread_mutex_lock(&g);
    for (task* t = list; t; t = t->next)
        if (!captured_item(ms, t)) number(t);
    pthread_mutex_unlock(&g);
    while (list) {
        task *item = NULL, **it = &item, **rest = &list;
        comm* c = list->c;
        void* st = list->stream;
        int captured = captured_item(ms, list);
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
        int e;
        if (captured) { /* the graph holds the template from now on */
            pthread_mutex_lock(&g);
            c->graph_refs++;
            pthread_mutex_unlock(&g);
            e = fakecuda_stream_enqueue_graphable(st, c->dev, run_item, item, clone_item, release_item);
            if (e) {
                pthread_mutex_lock(&g);
                c->graph_refs--;
                pthread_mutex_unlock(&g);
            }
        } else {
            pthread_mutex_lock(&g);
            c->pending++;
            if (c->remote) item->ticket = c->ticket_next++;
            pthread_mutex_unlock(&g);
            e = fakecuda_stream_enqueue(st, c->dev, run_item, item);
            if (e) {
                pthread_mutex_lock(&g);
                c->pending--;
                if (c->remote) c->ticket_next--;
                pthread_mutex_unlock(&g);
            }
        }
        if (e) {
            free_tasks(item);
            free_tasks(list);
            free(ms);
            return stream_error(e, st, fn);
        }
    }
    free(ms);
    return ncclSuccess;
}

/* discard_group is groupCleanup after a failed call inside the group (g not
 * held): nothing runs, and every non-blocking communicator that joined the
 * group (its operations' and its deferred inits') gets the group's error as
 * its state (ncclCommSetAsyncError), which every later call but
 * ncclCommAbort returns from ncclCommEnsureReady: such a communicator can
 * only be aborted. Blocking members are left as they were. The Send/Recv
 * connection flags the group's calls set stay (see p2p_stale). */
static void discard_group(comm** members, int n, comm** inits, int ninits, ncclResult_t err) {
    pthread_mutex_lock(&g);
    for (int i = 0; i < n + ninits; i++) {
        comm* c = i < n ? members[i] : inits[i - n];
        if (!c->blocking) set_sticky(c, err);
    }
    pthread_cond_broadcast(&gc);
    pthread_mutex_unlock(&g);
}

/* A non-blocking group's launch (NCCL's groupLaunchNonBlocking, on a thread
 * of its own since 2.29, a pthread before): its result becomes the state of
 * every non-blocking member. */
typedef struct nbgroup {
    task* list;
    comm** members;
    int n;
    char fn[32];
} nbgroup;

/* launch_later is NCCL's group job thread of a non-blocking group. It takes
 * FAKENCCL_LAUNCH_DELAY_US (a test's knob: NCCL's thread may take long, as
 * when it connects the ranks) before launching; a member aborted meanwhile
 * stops it before anything reaches a stream, as NCCL's abort flag stops its
 * job. ncclCommAbort joins it (see release): after the abort, nothing of the
 * group is enqueued any more. */
static void* launch_later(void* p) {
    name_thread("fakenccl-launch");
    nbgroup* b = p;
    const char* d = getenv("FAKENCCL_LAUNCH_DELAY_US");
    if (d && atol(d) > 0) usleep((useconds_t)atol(d));
    pthread_mutex_lock(&g);
    int stop = 0;
    for (int i = 0; i < b->n; i++) stop |= b->members[i]->aborted;
    pthread_mutex_unlock(&g);
    ncclResult_t r = ncclSuccess;
    if (b->list && !stop) r = launch(b->list, b->fn);
    else if (b->list) free_tasks(b->list);
    pthread_mutex_lock(&g);
    for (int i = 0; i < b->n; i++) {
        if (!b->members[i]->blocking) set_async(b->members[i], r);
        b->members[i]->launches--;
    }
    pthread_cond_broadcast(&gc);
    pthread_mutex_unlock(&g);
    free(b->members);
    free(b);
    return NULL;
}

/* launch_nonblocking starts a non-blocking group: its members are in
 * progress, linked to a new job (see job_complete), until it is launched. */
static ncclResult_t launch_nonblocking(task* list, comm** members, int n, comm** inits, int ninits, const char* fn) {
    nbgroup* b = calloc(1, sizeof *b);
    b->list = list;
    b->members = malloc((size_t)(n + ninits + 1) * sizeof *members);
    memcpy(b->members, members, (size_t)n * sizeof *members);
    b->n = n;
    snprintf(b->fn, sizeof b->fn, "%s", fn);
    pthread_mutex_lock(&g);
    for (int i = 0; i < n; i++) {
        if (!members[i]->blocking) set_async(members[i], ncclInProgress);
        members[i]->launches++;
    }
    memcpy(b->members + n, inits, (size_t)ninits * sizeof *inits); /* linked too, as NCCL's async jobs' comms */
    job_start(b->members, n + ninits);
    pthread_mutex_unlock(&g);
    pthread_t th;
    pthread_create(&th, NULL, launch_later, b);
    pthread_detach(th);
    return ncclInProgress;
}

API ncclResult_t ncclGroupEnd(void) {
    if (group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd: not in a group");
    if (--group_depth > 0) return ncclSuccess;
    group_check_freed("ncclGroupEnd");
    task* list = group_head;
    group_head = NULL;
    group_tail = NULL;
    ncclResult_t err = group_error;
    group_error = ncclSuccess;
    int ninits = group_ninits, nonblocking = 0, nm = group_nmembers, mode = group_blocking;
    group_ninits = 0;
    group_nmembers = 0;
    group_blocking = -1;
    comm** members = group_members;
    if (err) { /* as NCCL: a failed call inside the group discards all of it */
        free_tasks(list);
        discard_group(members, nm, group_inits, ninits, err);
        return fail(err, "ncclGroupEnd: a call inside the group failed; nothing was launched");
    }
    comm** in = malloc((size_t)(nm + 1) * sizeof *in); /* inside this call, for ncclCommAbort's check */
    for (int i = 0; i < nm; i++) in[i] = call_enter(members[i], "ncclGroupEnd");
    ncclResult_t r;
    if ((list || nm) && mode == 0) { /* a non-blocking group: launched on a thread */
        r = launch_nonblocking(list, members, nm, group_inits, ninits, "ncclGroupEnd");
    } else {
        ncclResult_t initerr = ncclSuccess;
        for (int i = 0; i < ninits; i++) { /* blocking inits complete within ncclGroupEnd */
            comm* c = group_inits[i];
            if (!c->blocking) {
                nonblocking = 1;
                continue;
            }
            pthread_mutex_lock(&g);
            while (!c->ready && !c->aborted && c->async == ncclInProgress) pthread_cond_wait(&gc, &g);
            if (!c->ready && !c->aborted && !initerr) initerr = c->async;
            pthread_mutex_unlock(&g);
        }
        if (nonblocking) {
            pthread_mutex_lock(&g);
            job_start(group_inits, ninits);
            pthread_mutex_unlock(&g);
        }
        r = list ? launch(list, "ncclGroupEnd") : ncclSuccess;
        pthread_mutex_lock(&g);
        for (int i = 0; i < nm; i++) /* a non-blocking member of a blocking group */
            if (!members[i]->blocking) set_async(members[i], r);
        pthread_mutex_unlock(&g);
        if (!r && initerr) r = initerr;
        if (r == ncclSuccess && nonblocking) r = ncclInProgress;
    }
    for (int i = 0; i < nm; i++) call_leave(&in[i]);
    free(in);
    return r;
}

/* submit queues a checked task in the thread's group, or runs it as a group of
 * one. A non-blocking communicator's launch runs on a thread of its own, as
 * NCCL's groupLaunchNonBlocking does: the call returns ncclInProgress and the
 * communicator's state says when the launch is done. A Send or Recv sets its
 * connection flag at the call (p2p_asks). */
static ncclResult_t submit(task* t) {
    comm* c = t->c;
    pthread_mutex_lock(&g);
    p2p_asks(t);
    pthread_mutex_unlock(&g);
    if (group_depth > 0) {
        group_join(c);
        if (!group_tail) group_tail = &group_head;
        *group_tail = t;
        group_tail = &t->next;
        return ncclSuccess;
    }
    char fn[32];
    snprintf(fn, sizeof fn, "nccl%s", kind_names[t->kind]);
    if (!c->blocking) {
        pthread_mutex_lock(&g);
        if (c->async == ncclInProgress) {
            /* NCCL's ncclEnqueueCheck: ncclCommEnsureReady refuses the call,
             * and its fail path makes the refusal the communicator's
             * asynchronous error (enqueue.cc, 2.30.7). */
            set_sticky(c, ncclInvalidArgument);
            pthread_mutex_unlock(&g);
            free_tasks(t);
            return fail(ncclInvalidArgument, "Attempt to use communicator before the previous operation returned ncclSuccess");
        }
        pthread_mutex_unlock(&g);
        return launch_nonblocking(t, &c, 1, NULL, 0, fn);
    }
    return launch(t, fn);
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

static ncclResult_t enqueue_args(int kind, const char* fn, const void* send, void* recv, size_t count, int type, int op,
                            int root, comm* c, void* stream);

/* comm_checks is what ncclEnqueueCheck checks before its argument checks: a
 * valid, ready, unrevoked communicator; and, for a non-blocking one, no error
 * left by an earlier call (ncclCommEnsureReady returns it again). */
static ncclResult_t comm_checks(comm* c, const char* fn) {
    ncclResult_t r = live(c, fn);
    if (r) return r;
    if (c->revoked) return fail(ncclInvalidUsage, "%s : communicator was revoked", fn);
    if (c->broken) return fail(ncclInvalidUsage, "%s : %s", fn, broken_text);
    if (c->suspended) return fail(ncclInvalidUsage, "%s : communicator is suspended", fn);
    if (!c->blocking) {
        job_complete(c);
        pthread_mutex_lock(&g);
        ncclResult_t a = c->async;
        pthread_mutex_unlock(&g);
        if (a != ncclSuccess && a != ncclInProgress) return a;
    }
    return ncclSuccess;
}

/* poison is ncclEnqueueCheck's failure path: on a non-blocking communicator
 * an operation refused after the communicator checks becomes the
 * communicator's error (ncclCommSetAsyncError), and every later call returns
 * it until the communicator is aborted. A blocking one is left as it was. */
static ncclResult_t poison(comm* c, ncclResult_t r) {
    if (r == ncclSuccess || r == ncclInProgress || c->blocking) return r;
    pthread_mutex_lock(&g);
    set_async(c, r);
    pthread_cond_broadcast(&gc);
    pthread_mutex_unlock(&g);
    return r;
}

/* enqueue checks the arguments the way NCCL's ArgsCheck does, then submits. */
static ncclResult_t enqueue_checked(int kind, const char* fn, const void* send, void* recv, size_t count, int type, int op,
                            int root, comm* c, void* stream) {
    ncclResult_t r = comm_checks(c, fn);
    if (r) return r;
    r = enqueue_args(kind, fn, send, recv, count, type, op, root, c, stream);
    return poison(c, r);
}

/* enqueue_args is the rest of the checks, then the submission. */
static ncclResult_t enqueue_args(int kind, const char* fn, const void* send, void* recv, size_t count, int type, int op,
                            int root, comm* c, void* stream) {
    ncclResult_t r;
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
#if NUM_TYPES > 10
    /* One rank: NCCL runs a reduction as a copy, or with PreMulSum (which is
     * also what Avg of a float becomes) as a kernel of its own whose fp8 cases
     * are compiled out of the host code (onerank.cu tests __CUDA_ARCH__), so
     * fp8 Avg and PreMulSum on one rank are refused, 2.24 to 2.30 alike. */
    if (isop && n == 1 && (type == tE4M3 || type == tE5M2) && (op == opAvg || op >= opPreMul))
        return fail(ncclInvalidArgument, "%s : one-rank PreMulSum of fp8 has no kernel", fn);
#endif
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
    /* A one-rank communicator's collective is launched at the call, in a
     * group too, and joins no group (enqueue.cc taskAppend: "single rank
     * communicators, collectives are issued as ncclMemcpyAsyncs and thus don't
     * need a task"): a failed group does not hold it back, and a non-blocking
     * communicator is not in progress after it. NCCL 2.14 did so for the
     * reductions that are a copy (not Avg or PreMulSum). */
#ifdef FAKENCCL_OLD
    int direct = !(isop && (op == opAvg || op >= opPreMul));
#else
    int direct = 1;
#endif
    if (n == 1 && kind != kSend && kind != kRecv && direct) {
        char name[32];
        snprintf(name, sizeof name, "nccl%s", fn);
        return launch(t, name);
    }
    return submit(t);
}

static ncclResult_t enqueue(int kind, const char* fn, const void* send, void* recv, size_t count, int type, int op,
                            int root, comm* c, void* stream) {
    CALL(c, api_names[kind]);
    if (group_depth > 0) group_check_freed(api_names[kind]);
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
    CALL(c, "ncclRedOpCreatePreMulSum");
    ncclResult_t r = live(c, "ncclRedOpCreatePreMulSum");
    if (r || (r = ready_err(c))) return r;
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
    CALL(c, "ncclRedOpDestroy");
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
    CALL(c, "ncclCommRegister");
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
    CALL(c, "ncclCommDeregister");
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
    name_thread("fakenccl-winreg");
    winreg* w = p;
    register_window(w->c, w->buff, w->size, w->win, w->flags);
    pthread_mutex_lock(&g);
    set_async(w->c, ncclSuccess);
    pthread_cond_broadcast(&gc);
    pthread_mutex_unlock(&g);
    free(w);
    return NULL;
}

API ncclResult_t ncclCommWindowRegister(comm* c, void* buff, size_t size, window** win, int flags) {
    CALL(c, "ncclCommWindowRegister");
    ncclResult_t r = live(c, "ncclCommWindowRegister");
    if (r || (r = ready_err(c))) return r;
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
        job_start1(c);
        pthread_mutex_unlock(&g);
        pthread_t th;
        pthread_create(&th, NULL, register_later, w);
        pthread_detach(th);
        return ncclSuccess;
    }
    register_window(c, buff, size, win, flags);
    return ncclSuccess;
}

/* win_done readies the registration rendezvous for the next one once every
 * rank has left it and every remote rank has its answer (g held). */
static void win_done(clique* q) {
    if (q->win_left == q->nranks && q->win_delivered == q->nproxies) {
        q->win_arrived = q->win_left = q->win_delivered = 0;
        q->win_seq++;
        pthread_cond_broadcast(&gc);
    }
}

/* win_barrier is a symmetric registration's rendezvous: every rank registers
 * together (-1 if c is aborted meanwhile). */
static int win_barrier(comm* c) {
    clique* q = c->c;
    pthread_mutex_lock(&g);
    long seq = c->win_seq++;
    while (q->win_seq != seq && !c->aborted) pthread_cond_wait(&gc, &g);
    if (!c->aborted) {
        q->win_arrived++;
        pthread_cond_broadcast(&gc);
    }
    while (q->win_arrived < c->nranks && !c->aborted) pthread_cond_wait(&gc, &g);
    if (c->aborted) {
        pthread_mutex_unlock(&g);
        return -1;
    }
    q->win_left++;
    if (!c->proxy) /* the hub's own ranks: once the remote ranks have their answer (this process may exit next) */
        while (q->win_seq == seq && q->win_delivered < q->nproxies && !c->aborted) pthread_cond_wait(&gc, &g);
    win_done(q);
    pthread_mutex_unlock(&g);
    return 0;
}

static void register_window(comm* c, void* buff, size_t size, window** win, int flags) {
    if ((flags & 1) && c->remote) { /* the rendezvous is at the hub; the window stays here */
        wbuf b = {0};
        wb_start(&b, M_WIN);
        char* p = NULL;
        rbuf r;
        rpc(c, NULL, &b, &p, &r);
        free(b.p);
        free(p);
    } else if (flags & 1) {
        win_barrier(c);
    }
    window* w = calloc(1, sizeof *w);
    *w = (window){buff, size, flags, NULL, (flags & 1) && !c->remote ? c->win_seq - 1 : -1};
    pthread_mutex_lock(&g);
    if ((flags & 1) && c->remote) w->seq = c->win_seq++; /* numbered as its proxy at the hub numbers it */
    w->next = c->windows;
    c->windows = w;
    *win = w;
    pthread_mutex_unlock(&g);
}

API ncclResult_t ncclCommWindowDeregister(comm* c, window* w) {
    CALL(c, "ncclCommWindowDeregister");
    ncclResult_t r = live(c, "ncclCommWindowDeregister");
    if (r || (r = ready_err(c))) return r;
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

/* ---- fault tolerance: ncclCommShrink (2.27), ncclCommRevoke (2.28.7),
 * ncclCommGetUniqueId and ncclCommGrow (2.29.2) ----
 *
 * A shrink's ranks that stay form a new clique, renumbered in order (the
 * excluded ones may be dead); NCCL_SHRINK_ABORT first stops the parent's
 * in-flight work (it returns, its results lost), the default waits for it.
 * Within one process they meet over the parent's clique, which also checks
 * that their exclusion lists agree. For a clique spread over processes they
 * meet as NCCL's staying ranks do over the parent's bootstrap ring, without
 * the root or the excluded ranks: each computes the new key from the
 * parent's and the shrink's number; the lowest staying rank's process hosts
 * the new clique (its rank listens at an abstract Unix socket named by the
 * key until every staying rank has joined; staying ranks of that process
 * join directly), so the survivors shrink even when the dead process is the
 * one that hosted the parent. Across processes differing lists are not
 * detected: the ranks wait for each other until aborted.
 *
 * A revoke stops the in-flight work, refuses new operations
 * (ncclInvalidUsage) and makes ncclCommFinalize invalid; destroy, split and
 * shrink still work. It needs no peer: a rank of another process's clique
 * gives its connection to the hub up (its request in flight returns at once,
 * even if the hub is dead; the hub, seeing the connection closed, stops the
 * rank's proxy), so after a revoke such a communicator can be shrunk and
 * destroyed, and its split is ncclInvalidUsage. A shrink with
 * NCCL_SHRINK_ABORT that stops a remote rank's request in flight gives the
 * connection up too: the parent refuses operations afterwards.
 *
 * A grow id names a new clique of nRanks: the existing ranks keep their
 * numbers, the new ranks take the others; the id is consumed once the new
 * communicator is formed. The id carries the root of the process that made
 * it (as ncclGetUniqueId's does) and a grow flag: the grown clique lives in
 * that process, and the ranks of other processes, new or existing, join it
 * there, checked there against the id. The existing ranks that pass no id
 * wait for it at their clique (as NCCL's wait for the root's broadcast of
 * it): a rank of a clique spread over processes asks its hub, where the
 * rank that made the id published it; there the id stays outstanding until
 * every existing rank has taken it. A revoked rank of another process's
 * clique can no longer reach its hub: its grow is ncclInvalidUsage. */

#if HAS_228

/* A communicator made from a parent by shrink or grow, run as ncclCommSplit
 * runs: a non-blocking one completes on a thread, the parent in progress
 * until then, the new handle written only when done. */
typedef struct deriver {
    comm *parent, *nc, **out;
    int grow;          /* 0: shrink, 1: grow */
    uint64_t excluded; /* shrink */
    int flags;
    int nranks, has_id; /* grow */
    uint64_t idkey;
} deriver;

/* shrink_meet is the rendezvous of the ranks that stay: it returns the new
 * size and this rank's place, -1 if aborted, -2 if the ranks' exclusion lists
 * differ (the parent cannot shrink again after that). */
static int shrink_meet(comm* c, comm* nc, uint64_t excluded, int* me, uint64_t* newkey) {
    clique* q = c->c;
    int size = c->nranks - __builtin_popcountll(excluded);
    pthread_mutex_lock(&g);
    long seq = c->shrink_seq++;
    while (q->shrink_seq != seq && !q->shrink_bad && !nc->aborted && !c->aborted) pthread_cond_wait(&gc, &g);
    if (!q->shrink_bad && !nc->aborted && !c->aborted) {
        if (q->shrink_arrived == 0) {
            q->shrink_base = new_key();
            q->shrink_excluded = excluded;
        } else if (q->shrink_excluded != excluded) {
            q->shrink_bad = 1;
        }
        q->shrink_arrived++;
        pthread_cond_broadcast(&gc);
    }
    while (q->shrink_arrived < size && !q->shrink_bad && !nc->aborted && !c->aborted) pthread_cond_wait(&gc, &g);
    if (q->shrink_bad || nc->aborted || c->aborted) {
        int bad = q->shrink_bad;
        pthread_mutex_unlock(&g);
        return bad ? -2 : -1;
    }
    *me = __builtin_popcountll(~excluded & ((1ull << c->rank) - 1));
    *newkey = q->shrink_base;
    if (++q->shrink_left == size) {
        q->shrink_arrived = q->shrink_left = 0;
        q->shrink_seq++;
        pthread_cond_broadcast(&gc);
    }
    pthread_mutex_unlock(&g);
    return size;
}

/* here is a live communicator of this process that is rank r of the clique of
 * key (g held), or NULL. */
static comm* here(uint64_t key, int r) {
    for (comm* k = all_comms; k; k = k->next_all)
        if (k->magic == COMM_MAGIC && k->ready && k->key == key && k->rank == r && !k->proxy) return k;
    return NULL;
}

/* host_clique finds or makes the clique of key in this process and serves
 * the listening socket lfd for it until its ranks have joined, as rank 0 at
 * NCCL_COMM_ID does (g not held). */
static void host_clique(int lfd, uint64_t key, int nranks, comm* c) {
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
    q->hosting = 1;
    c->host_fd = lfd;
    pthread_mutex_unlock(&g);
    host* h = malloc(sizeof *h);
    *h = (host){lfd, q, c};
    pthread_t th;
    pthread_create(&th, NULL, host_accept, h);
    pthread_detach(th);
}

/* shrink_spread shrinks a communicator whose ranks live in several processes.
 * NCCL's staying ranks meet over the parent's bootstrap ring, which needs
 * neither the excluded ranks nor the root: here they meet without the parent's
 * hub, which may be dead. Each staying rank computes the same new key from the
 * parent's and the shrink's number; the new clique lives in the process of the
 * lowest staying rank, which listens for the others at an abstract Unix socket
 * named by that key (made for this shrink, closed once every rank joined);
 * staying ranks of that process join there directly. */
static ncclResult_t shrink_spread(deriver* d) {
    comm *c = d->parent, *nc = d->nc;
    uint64_t x = d->excluded;
    pthread_mutex_lock(&g);
    long seq = c->shrink_seq++;
    uint64_t key = c->key ^ 0x5348524e4b2d6b79ull;
    key ^= (uint64_t)(seq + 1) * 0x9e3779b97f4a7c15ull;
    key = (key ^ key >> 31) * 0xbf58476d1ce4e5b9ull;
    key ^= key >> 29;
    if (!key) key = 1;
    int size = c->nranks - __builtin_popcountll(x), me = __builtin_popcountll(~x & ((1ull << c->rank) - 1));
    int host = __builtin_ctzll(~x), all_here = 1, host_here = here(c->key, host) != NULL;
    for (int r = 0; r < c->nranks; r++)
        if (!(x >> r & 1) && !here(c->key, r)) all_here = 0;
    pthread_mutex_unlock(&g);
    netaddr at;
    memset(&at, 0, sizeof at);
    at.family = 1;
    memcpy(at.addr, &key, 8);
    if (!host_here) return remote_join(nc, c, &at, key, size, me, "ncclCommShrink");
    if (c->rank == host && !all_here) { /* the ranks of other processes join here */
        int lfd = listen_on(&at);
        if (lfd < 0) return fail(ncclSystemError, "ncclCommShrink: cannot listen for the staying ranks: %s", strerror(errno));
        host_clique(lfd, key, size, nc);
    }
    return join(nc, key, size, me, "ncclCommShrink");
}

static ncclResult_t shrink_run(deriver* d) {
    comm *c = d->parent, *nc = d->nc;
    pthread_mutex_lock(&g);
    if (d->flags & 1) { /* NCCL_SHRINK_ABORT: raise the abort flag, wait for the kernels, lower it */
        c->halted = 1;
        pthread_cond_broadcast(&gc);
    }
    while (c->pending && !c->aborted && !nc->aborted) pthread_cond_wait(&gc, &g);
    c->halted = 0;
    pthread_mutex_unlock(&g);
    if (!one_process(c)) return shrink_spread(d);
    int me;
    uint64_t key;
    int size = shrink_meet(c, nc, d->excluded, &me, &key);
    if (size == -2) return fail(ncclInvalidUsage, "ncclCommShrink: the ranks passed different excludeRanksList");
    if (size < 0) return fail(ncclInternalError, "ncclCommShrink: the shrink was given up");
    return join(nc, key, size, me, "ncclCommShrink");
}

/* ---- grow ids ---- */

typedef struct growid {
    uint64_t key;
    int from;     /* the size of the communicator being grown */
    int consumed; /* the grown communicator was formed */
    clique* parent;
    struct growid* next;
} growid;
static growid* growids; /* (g) */

static growid* find_growid(uint64_t key) {
    growid* gi = growids;
    while (gi && gi->key != key) gi = gi->next;
    return gi;
}

/* grow_done consumes the id once the new communicator is formed. */
static void grow_done(uint64_t key) {
    pthread_mutex_lock(&g);
    growid* gi = find_growid(key);
    if (gi) {
        gi->consumed = 1;
        if (gi->parent && gi->parent->grow_key == key) gi->parent->grow_key = 0;
    }
    pthread_cond_broadcast(&gc);
    pthread_mutex_unlock(&g);
}

/* grow_take waits (g held) for the grow id of c's clique, which lives in this
 * process, and takes its key (0: given up), where the grown clique is and in
 * which process. Once every rank of a clique spread over processes has taken
 * it, the id is no longer outstanding there. */
static uint64_t grow_take(comm* c, comm* nc, netaddr* at, uint32_t* pid) {
    clique* q = c->c;
    while (!q->grow_key && !c->aborted && !(nc && nc->aborted)) pthread_cond_wait(&gc, &g);
    if (c->aborted || (nc && nc->aborted)) return 0;
    uint64_t key = q->grow_key;
    *at = q->grow_at;
    *pid = q->grow_pid;
    if (q->nproxies && ++q->grow_taken == q->nranks) q->grow_key = 0;
    return key;
}

/* grow_existing: an existing rank waits for its communicator's grow id (as
 * NCCL's boundary ranks wait for the root's broadcast of it: a rank of
 * another process's clique asks its hub) and joins the new clique under its
 * own rank, here or in the process that made the id. */
static ncclResult_t grow_existing(deriver* d) {
    comm *c = d->parent, *nc = d->nc;
    uint64_t key = 0;
    netaddr at;
    uint32_t pid = 0;
    memset(&at, 0, sizeof at);
    if (!c->remote) {
        pthread_mutex_lock(&g);
        key = grow_take(c, nc, &at, &pid);
        pthread_mutex_unlock(&g);
    } else {
        wbuf b = {0};
        wb_start(&b, M_GROWGET);
        char* p = NULL;
        rbuf r;
        int st = rpc(c, nc, &b, &p, &r);
        free(b.p);
        if (!st) {
            key = rb_u64(&r);
            rb_addr(&r, &at);
            pid = (uint32_t)rb_i32(&r);
            if (r.bad) key = 0;
        }
        free(p);
    }
    if (!key) return fail(ncclInternalError, "ncclCommGrow: the grow was given up");
    if (d->has_id && d->idkey != key) return fail(ncclInvalidArgument, "ncclCommGrow: uniqueId is not this communicator's grow id");
    if (pid != (uint32_t)getpid()) return remote_join_as(nc, c, &at, key, d->nranks, c->rank, 2, "ncclCommGrow");
    ncclResult_t r = join(nc, key, d->nranks, c->rank, "ncclCommGrow");
    if (r == ncclSuccess) grow_done(key);
    return r;
}

static ncclResult_t derive_run(deriver* d) { return d->grow ? grow_existing(d) : shrink_run(d); }

static void* derive_later(void* p) {
    name_thread("fakenccl-derive");
    deriver* d = p;
    ncclResult_t r = derive_run(d);
    pthread_mutex_lock(&g);
    if (r == ncclSuccess) *d->out = d->nc;
    set_async(d->parent, r == ncclSuccess || d->parent->aborted ? ncclSuccess : r);
    pthread_cond_broadcast(&gc);
    pthread_mutex_unlock(&g);
    free(d);
    return NULL;
}

static ncclResult_t derive(deriver* d) {
    if (!d->nc->blocking) {
        *d->out = NULL;
        d->nc->async = ncclInProgress;
        pthread_mutex_lock(&g);
        set_async(d->parent, ncclInProgress);
        job_start1(d->parent);
        pthread_mutex_unlock(&g);
        deriver* h = malloc(sizeof *h);
        *h = *d;
        pthread_t th;
        pthread_create(&th, NULL, derive_later, h);
        pthread_detach(th);
        return ncclInProgress;
    }
    *d->out = d->nc;
    return derive_run(d);
}

/* new_child makes the communicator a shrink or grow derives: config NULL
 * inherits the parent's mode. */
static ncclResult_t new_child(comm* c, const void* cfg, const char* fn, comm** nc) {
    *nc = new_comm(c->dev);
    ncclResult_t r = read_config(*nc, cfg, fn);
    if (!cfg) (*nc)->blocking = c->blocking;
    return r;
}

API ncclResult_t ncclCommShrink(comm* c, int* excl, int nexcl, comm** out, const void* cfg, int flags) {
    CALL(c, "ncclCommShrink");
    const char* fn = "ncclCommShrink";
    ncclResult_t r = live(c, fn);
    if (r || (r = ready_err(c))) return r;
    if (!out) return fail(ncclInvalidArgument, "%s: newcomm is NULL", fn);
    if (!excl) return fail(ncclInvalidArgument, "%s: excludeRanksList is NULL", fn);
    if (nexcl <= 0) return fail(ncclInvalidArgument, "%s: excludeRanksCount %d must be positive", fn, nexcl);
    if (flags & ~1) return fail(ncclInvalidArgument, "%s: unknown shrinkFlags %#x", fn, (unsigned)flags);
    uint64_t excluded = 0;
    for (int i = 0; i < nexcl; i++) {
        int x = excl[i];
        if (x < 0 || x >= c->nranks) return fail(ncclInvalidArgument, "%s: excluded rank %d out of range [0, %d)", fn, x, c->nranks);
        if (excluded >> x & 1) return fail(ncclInvalidArgument, "%s: rank %d excluded twice", fn, x);
        excluded |= 1ull << x;
    }
    if (excluded >> c->rank & 1)
        return fail(ncclInvalidArgument, "%s: rank %d is in excludeRanksList: excluded ranks must not call ncclCommShrink", fn, c->rank);
    comm* nc;
    if ((r = new_child(c, cfg, fn, &nc))) return r;
    deriver d = {.parent = c, .nc = nc, .out = out, .excluded = excluded, .flags = flags};
    return derive(&d);
}
#endif

#if HAS_230
static void* revoke_later(void* p) {
    name_thread("fakenccl-revoke");
    comm* c = p;
    pthread_mutex_lock(&g);
    while (c->pending) pthread_cond_wait(&gc, &g);
    set_async(c, ncclSuccess);
    pthread_cond_broadcast(&gc);
    pthread_mutex_unlock(&g);
    return NULL;
}

API ncclResult_t ncclCommRevoke(comm* c, int flags) {
    CALL(c, "ncclCommRevoke");
    const char* fn = "ncclCommRevoke";
    if (!c) return ncclSuccess; /* as NCCL */
    ncclResult_t r = live(c, fn);
    if (r) return r;
    if (flags != 0) return fail(ncclInvalidArgument, "%s: revokeFlags must be NCCL_REVOKE_DEFAULT (0), not %d", fn, flags);
    pthread_mutex_lock(&g);
    if (c->revoked) {
        pthread_mutex_unlock(&g);
        return fail(ncclInvalidArgument, "%s: communicator already revoked", fn);
    }
    c->revoked = 1;
    /* A rank of another process's clique lets its connection go: its request
     * in flight gives up at once (the hub may be dead), and the hub, seeing it
     * closed, stops the rank's proxy there. Only shrink and destroy follow. */
    if (c->remote) give_up(c);
    pthread_cond_broadcast(&gc);
    if (c->blocking) { /* quiescent when the call returns */
        while (c->pending) pthread_cond_wait(&gc, &g);
        pthread_mutex_unlock(&g);
        return ncclSuccess;
    }
    c->async = ncclInProgress;
    job_start1(c);
    pthread_mutex_unlock(&g);
    pthread_t th;
    pthread_create(&th, NULL, revoke_later, c);
    pthread_detach(th);
    return ncclInProgress;
}

static const char* grow_revoked_text = "the communicator was revoked: its connection to its hub was given up";

/* grow_publish makes key the grow id of clique q, joined at (at, pid) (g held). */
static ncclResult_t grow_publish(clique* q, uint64_t key, const netaddr* at, uint32_t pid) {
    if (q->grow_key)
        return fail(ncclInvalidUsage, "ncclCommGetUniqueId: a grow id is outstanding: ncclCommGrow must consume it first");
    q->grow_key = key;
    q->grow_at = *at;
    q->grow_pid = pid;
    q->grow_taken = 0;
    pthread_cond_broadcast(&gc);
    return ncclSuccess;
}

API ncclResult_t ncclCommGetUniqueId(comm* c, ncclUniqueId* id) {
    CALL(c, "ncclCommGetUniqueId");
    const char* fn = "ncclCommGetUniqueId";
    ncclResult_t r = live(c, fn);
    if (r || (r = ready_err(c))) return r;
    if (!id) return fail(ncclInvalidArgument, "%s: uniqueId is NULL", fn);
    if (c->remote && (c->revoked || c->broken)) return fail(ncclInvalidUsage, "%s: %s", fn, grow_revoked_text);
    idinfo d;
    memset(&d, 0, sizeof d);
    /* The grown clique lives in this process; ranks of other processes join
     * it here: the id carries this process's root, as ncclGetUniqueId's does. */
    if (ensure_root(&d.at)) return fail(ncclSystemError, "%s: cannot listen for the new ranks: %s", fn, strerror(errno));
    d.pid = (uint32_t)getpid();
    d.grow = 1;
    pthread_mutex_lock(&g);
    d.key = new_key();
    if (!c->remote && (r = grow_publish(c->c, d.key, &d.at, d.pid))) {
        pthread_mutex_unlock(&g);
        return r;
    }
    growid* gi = calloc(1, sizeof *gi);
    *gi = (growid){d.key, c->nranks, 0, c->remote ? NULL : c->c, growids};
    growids = gi;
    pthread_mutex_unlock(&g);
    if (c->remote) { /* the clique is at the hub: the id is published there, for the ranks that pass NULL */
        wbuf b = {0};
        wb_start(&b, M_GROWID);
        wb_u64(&b, d.key);
        wb_addr(&b, &d.at);
        wb_i32(&b, (int32_t)d.pid);
        char* p = NULL;
        rbuf rr;
        int st = rpc(c, NULL, &b, &p, &rr);
        free(b.p);
        r = st ? ncclInternalError : rb_i32(&rr);
        char text[1024] = "the hub did not answer";
        if (!st) rb_str(&rr, text, sizeof text);
        free(p);
        if (r) {
            grow_done(d.key); /* not to be used */
            return fail(r, "%s", text);
        }
    }
    fill_id(id, &d);
    return ncclSuccess;
}

/* grow_check is what the process that made a grow id checks of a new rank
 * joining with it. */
static ncclResult_t grow_check(uint64_t key, int nranks, int rank, int existing) {
    const char* fn = "ncclCommGrow";
    pthread_mutex_lock(&g);
    growid* gi = find_growid(key);
    int from = gi ? gi->from : 0, consumed = gi ? gi->consumed : 0;
    pthread_mutex_unlock(&g);
    if (!gi) return fail(ncclInvalidArgument, "%s: uniqueId was not made by ncclCommGetUniqueId", fn);
    if (consumed) return fail(ncclInvalidUsage, "%s: uniqueId was already consumed by a grow", fn);
    if (nranks <= from) return fail(ncclInvalidArgument, "%s: total ranks %d must exceed the current %d ranks", fn, nranks, from);
    if (!existing && rank < from) return fail(ncclInvalidArgument, "%s: rank %d belongs to an existing rank: new ranks are %d..%d", fn, rank, from, nranks - 1);
    if (existing && rank >= from) return fail(ncclInternalError, "%s: existing rank %d of %d", fn, rank, from);
    return ncclSuccess;
}

/* grow_join joins a new rank to the grown clique: here, or at the hub of the
 * process that made the id. */
static ncclResult_t grow_join(comm* nc, const idinfo* d, int nranks, int rank) {
    if (d->pid != (uint32_t)getpid()) return remote_join_as(nc, NULL, &d->at, d->key, nranks, rank, 1, "ncclCommGrow");
    ncclResult_t r = join(nc, d->key, nranks, rank, "ncclCommGrow");
    if (r == ncclSuccess) grow_done(d->key);
    return r;
}

typedef struct grower {
    comm* nc;
    idinfo d;
    int nranks, rank;
} grower;

static void* grow_join_later(void* p) {
    name_thread("fakenccl-grow");
    grower* gr = p;
    ncclResult_t r = grow_join(gr->nc, &gr->d, gr->nranks, gr->rank);
    pthread_mutex_lock(&g);
    if (r && !gr->nc->aborted && gr->nc->async == ncclInProgress) set_async(gr->nc, r);
    pthread_cond_broadcast(&gc);
    pthread_mutex_unlock(&g);
    free(gr);
    return NULL;
}

/* grow_new: a new rank (comm NULL) joins the grown clique as an init does. */
static ncclResult_t grow_new(comm** out, int nranks, const ncclUniqueId* id, int rank, const void* cfg) {
    const char* fn = "ncclCommGrow";
    if (rank < 0) return fail(ncclInvalidArgument, "%s: new ranks must pass valid rank >= 0, got %d", fn, rank);
    if (!id) return fail(ncclInvalidArgument, "%s: new ranks must pass non-NULL uniqueId", fn);
    if (rank >= nranks) return fail(ncclInvalidArgument, "%s: new rank %d exceeds total ranks %d", fn, rank, nranks);
    idinfo d;
    if (check_id(id, fn, &d)) return ncclInvalidArgument;
    ncclResult_t r;
    if (!d.grow) return fail(ncclInvalidArgument, "%s: uniqueId was not made by ncclCommGetUniqueId", fn);
    /* An id of another process is checked there, when this rank joins. */
    if (d.pid == (uint32_t)getpid() && (r = grow_check(d.key, nranks, rank, 0))) return r;
    comm* nc = new_comm(fakecuda_current_device());
    if ((r = read_config(nc, cfg, fn))) return r;
    *out = nc;
    if (!nc->blocking) {
        pthread_mutex_lock(&g);
        nc->async = ncclInProgress;
        job_start1(nc);
        pthread_mutex_unlock(&g);
        grower* gr = malloc(sizeof *gr);
        *gr = (grower){nc, d, nranks, rank};
        pthread_t th;
        pthread_create(&th, NULL, grow_join_later, gr);
        pthread_detach(th);
        return ncclInProgress;
    }
    return grow_join(nc, &d, nranks, rank);
}

API ncclResult_t ncclCommGrow(comm* c, int nranks, const ncclUniqueId* id, int rank, comm** out, const void* cfg) {
    CALL(c, "ncclCommGrow");
    const char* fn = "ncclCommGrow";
    if (!out) return fail(ncclInvalidArgument, "%s: newcomm is NULL", fn);
    if (nranks <= 0 || nranks > MAXR) return fail(ncclInvalidArgument, "%s: total ranks must be in [1, %d], got %d", fn, MAXR, nranks);
    *out = NULL;
    if (!c) return grow_new(out, nranks, id, rank, cfg);
    ncclResult_t r = live(c, fn);
    if (r || (r = ready_err(c))) return r;
    if (nranks <= c->nranks) return fail(ncclInvalidArgument, "%s: total ranks %d must exceed the current %d ranks", fn, nranks, c->nranks);
    if (rank != -1) return fail(ncclInvalidArgument, "%s: existing ranks must pass rank=-1, got %d", fn, rank);
    if (c->remote && (c->revoked || c->broken)) return fail(ncclInvalidUsage, "%s: %s", fn, grow_revoked_text);
    deriver d = {.parent = c, .out = out, .grow = 1, .nranks = nranks};
    if (id) {
        idinfo info;
        if (check_id(id, fn, &info)) return ncclInvalidArgument;
        d.has_id = 1;
        d.idkey = info.key;
    }
    if ((r = new_child(c, cfg, fn, &d.nc))) return r;
    return derive(&d);
}
#endif

/* ---- one-sided RMA (2.29.2): ncclPutSignal, ncclSignal, ncclWaitSignal,
 * ncclWinGetUserPtr ----
 *
 * Checked as NCCL 2.30's rmaTaskAppend checks (ctx, sigIdx and flags must be
 * 0; the source must lie in a symmetric window of the communicator; peerWin
 * is this rank's handle of a symmetric window, which names the peer's window
 * of the same collective registration), then run on the stream: a put copies
 * the bytes into the peer's window at the offset and counts a signal at the
 * peer; a wait blocks its stream until the descriptors' signals have arrived
 * and consumes them. Calls in a group run at once. Captured into a CUDA
 * graph, each launch runs a copy (rma_clone), as the collectives' do.
 *
 * Across processes the bytes go through the hub. A remote rank's put or
 * signal is a request to its hub (in launch order on its connection), which
 * delivers it: into the window of a peer that lives at the hub, or into the
 * mailbox of a remote peer's proxy. A hub rank's put to a remote peer goes
 * into that mailbox directly. A remote rank's wait is a request that waits at
 * its proxy for the signals, and its answer brings the mailbox's puts, which
 * land in this rank's windows (matched by their registration number) before
 * the wait completes: a put's bytes are visible once its signal was waited
 * for, as NCCL promises, not earlier. The peer's window is not seen from
 * another process: a put is checked against the caller's window of the same
 * registration (symmetric windows have one size on every rank). */

#if HAS_230
typedef struct waitdesc {
    int opCnt, peer, sigIdx, ctx;
} waitdesc;

/* A put for a rank of another process, kept at the hub by its proxy: the
 * window's registration number, where in it, the bytes. */
typedef struct rput {
    long seq;
    size_t off, n;
    char* data;
    struct rput* next;
} rput;

typedef struct rma_task {
    comm *c, *peer_comm; /* peer_comm: NULL for a remote rank's put or signal (the hub finds the peer) */
    int kind; /* 0 put, 1 signal, 2 wait */
    int peer;
    long wseq;   /* the registration number of the peer's window */
    size_t off;  /* where in it */
    long ticket; /* a remote rank's: its turn on the connection */
    const char* src;
    char* dst;
    size_t bytes;
    int ndesc;
    waitdesc* descs;
} rma_task;

/* deposit delivers a put's bytes (none for a signal) from rank from to the
 * peer tc, and counts the signal there (g held): into tc's window when tc
 * lives in this process, into its mailbox when it is the proxy of a rank of
 * another process (its ncclWaitSignal takes them). */
static void deposit(comm* tc, int from, long wseq, size_t off, const char* data, size_t n) {
    if (tc->magic != COMM_MAGIC || from < 0 || from >= MAXR) return;
    if (n && tc->proxy) {
        rput* m = malloc(sizeof *m);
        *m = (rput){wseq, off, n, malloc(n), NULL};
        memcpy(m->data, data, n);
        rput** tail = &tc->rputs;
        while (*tail) tail = &(*tail)->next;
        *tail = m;
    } else if (n) {
        window* w = tc->windows;
        while (w && !((w->flags & 1) && w->seq == wseq)) w = w->next;
        if (w && off <= w->size && n <= w->size - off) memcpy(w->base + off, data, n);
    }
    tc->sig_recv[from]++;
    pthread_cond_broadcast(&gc);
}

/* remote_rma runs a remote rank's put, signal or wait at its hub. A wait's
 * answer brings the puts made to this rank since the last one, which land in
 * its windows before the wait completes: across processes a put's bytes are
 * visible once the signal that came with them is waited for, as NCCL
 * promises, not before. */
static void remote_rma(rma_task* t) {
    comm* c = t->c;
    wbuf b = {0};
    if (t->kind == 2) {
        wb_start(&b, M_WAITSIG);
        wb_i32(&b, t->ndesc);
        for (int i = 0; i < t->ndesc; i++) {
            wb_i32(&b, t->descs[i].opCnt);
            wb_i32(&b, t->descs[i].peer);
        }
    } else {
        wb_start(&b, M_PUT);
        wb_i32(&b, t->peer);
        wb_i64(&b, t->kind == 0 ? t->wseq : -1);
        wb_u64(&b, t->off);
        wb_u64(&b, t->bytes);
        wb_put(&b, t->src, t->bytes);
    }
    char* p = NULL;
    rbuf r;
    int st = rpc(c, NULL, &b, &p, &r);
    free(b.p);
    if (st) return; /* stopped */
    ncclResult_t res = rb_i32(&r);
    char why[1024];
    rb_str(&r, why, sizeof why);
    if (t->kind == 2 && !res) {
        int n = rb_i32(&r);
        pthread_mutex_lock(&g);
        for (int i = 0; i < n && !r.bad; i++) {
            long seq = (long)rb_i64(&r);
            size_t off = rb_u64(&r), k = rb_u64(&r);
            const char* bytes = rb_take(&r, k);
            window* w = c->windows;
            while (w && !((w->flags & 1) && w->seq == seq)) w = w->next;
            if (bytes && w && off <= w->size && k <= w->size - off) memcpy(w->base + off, bytes, k);
        }
        pthread_mutex_unlock(&g);
    }
    if (res) {
        fail(res, "%s", why);
        pthread_mutex_lock(&g);
        set_sticky(c, res);
        pthread_mutex_unlock(&g);
    }
    free(p);
}

static void rma_run(void* p) {
    rma_task* t = p;
    comm* c = t->c;
    if (c->remote) { /* its turn on the connection, in launch order */
        pthread_mutex_lock(&g);
        while (c->ticket_serving != t->ticket && !rstopped(c)) pthread_cond_wait(&gc, &g);
        pthread_mutex_unlock(&g);
        if (!rstopped(c)) remote_rma(t);
        pthread_mutex_lock(&g);
        if (c->ticket_serving == t->ticket) c->ticket_serving++;
    } else if (t->kind != 2 && t->peer_comm->proxy) { /* the peer is a rank of another process */
        pthread_mutex_lock(&g);
        if (!stopped(c)) deposit(t->peer_comm, c->rank, t->wseq, t->off, t->src, t->kind == 0 ? t->bytes : 0);
    } else if (t->kind == 2) {
        pthread_mutex_lock(&g);
        for (int i = 0; i < t->ndesc; i++) {
            waitdesc* d = &t->descs[i];
            while (c->sig_recv[d->peer] - c->sig_taken[d->peer] < d->opCnt && !stopped(c)) pthread_cond_wait(&gc, &g);
            if (stopped(c)) break;
            c->sig_taken[d->peer] += d->opCnt;
        }
    } else {
        pthread_mutex_lock(&g);
        int stop = stopped(c) || t->peer_comm->magic != COMM_MAGIC;
        pthread_mutex_unlock(&g);
        if (!stop && t->bytes) memcpy(t->dst, t->src, t->bytes);
        pthread_mutex_lock(&g);
        if (!stop) t->peer_comm->sig_recv[c->rank]++;
    }
    c->pending--;
    pthread_cond_broadcast(&gc);
    pthread_mutex_unlock(&g);
    free(t->descs);
    free(t);
}

/* rma_check is what every RMA call checks first. */
static ncclResult_t rma_check(comm* c, const char* fn, int peer, int sigIdx, int ctx, unsigned flags) {
    ncclResult_t r = live(c, fn);
    if (r) return r;
    if (c->revoked) return fail(ncclInvalidUsage, "%s: communicator was revoked", fn);
    if (c->broken) return fail(ncclInvalidUsage, "%s: %s", fn, broken_text);
    if (c->suspended) return fail(ncclInvalidUsage, "%s: communicator is suspended", fn);
    if (peer < 0 || peer >= c->nranks) return fail(ncclInvalidArgument, "%s: invalid peer %d (peer should be in the 0..%d range)", fn, peer, c->nranks - 1);
    if (ctx != 0) return fail(ncclInvalidArgument, "Context %d is invalid (must be 0)", ctx);
    if (sigIdx != 0) return fail(ncclInvalidArgument, "Signal index %d is invalid (must be 0)", sigIdx);
    if (flags != 0) return fail(ncclInvalidArgument, "Flags %u is invalid (must be 0)", flags);
    return ncclSuccess;
}

/* A captured RMA call is a template, as a captured collective is (see
 * clone_item): each graph launch runs a copy of it. */
static void* rma_clone(void* p) {
    rma_task* t = p;
    comm* c = graph_comm(t->c);
    rma_task* k = malloc(sizeof *k);
    *k = *t;
    if (t->descs) {
        k->descs = malloc((size_t)t->ndesc * sizeof *t->descs);
        memcpy(k->descs, t->descs, (size_t)t->ndesc * sizeof *t->descs);
    }
    pthread_mutex_lock(&g);
    c->pending++;
    if (c->remote) k->ticket = c->ticket_next++;
    pthread_mutex_unlock(&g);
    return k;
}

static void rma_release(void* p) {
    rma_task* t = p;
    comm* c = t->c;
    free(t->descs);
    free(t);
    pthread_mutex_lock(&g);
    c->graph_refs--;
    pthread_cond_broadcast(&gc);
    pthread_mutex_unlock(&g);
}

static ncclResult_t rma_submit(rma_task* t, void* stream, const char* fn) {
    comm* c = t->c;
    int e = fakecuda_stream_capturing(stream, c->dev);
    if (e < 0) { /* recorded into the capture: the graph holds it */
        pthread_mutex_lock(&g);
        c->graph_refs++;
        pthread_mutex_unlock(&g);
        if (!(e = fakecuda_stream_enqueue_graphable(stream, c->dev, rma_run, t, rma_clone, rma_release))) return ncclSuccess;
        pthread_mutex_lock(&g);
        c->graph_refs--;
        pthread_mutex_unlock(&g);
    } else if (e == 0) {
        pthread_mutex_lock(&g);
        c->pending++;
        if (c->remote) t->ticket = c->ticket_next++;
        pthread_mutex_unlock(&g);
        if (!(e = fakecuda_stream_enqueue(stream, c->dev, rma_run, t))) return ncclSuccess;
        pthread_mutex_lock(&g);
        c->pending--;
        if (c->remote) c->ticket_next--;
        pthread_mutex_unlock(&g);
    }
    free(t->descs);
    free(t);
    return stream_error(e, stream, fn);
}

/* find_window is c's window w (g held), or NULL. */
static window* find_window(comm* c, const window* w) {
    window* k = c->windows;
    while (k && k != w) k = k->next;
    return k;
}

static ncclResult_t put_signal(const void* src, size_t count, int type, int peer, window* pw, size_t off, int sigIdx,
                               int ctx, unsigned flags, comm* c, void* stream) {
    const char* fn = "ncclPutSignal";
    ncclResult_t r = rma_check(c, fn, peer, sigIdx, ctx, flags);
    if (r) return r;
    if (type < 0 || type >= NUM_TYPES) return fail(ncclInvalidArgument, "%s: invalid type %d", fn, type);
    if (!pw) return fail(ncclInvalidArgument, "ncclPutSignal: peerWin is NULL");
    if (!src) return fail(ncclInvalidArgument, "ncclPutSignal: srcBuff is NULL");
    size_t bytes = count * (size_t)type_size(type);
    if ((r = check_buf(c, fn, "srcBuff", src, bytes))) return r;
    pthread_mutex_lock(&g);
    window* mine = find_window(c, pw);
    window* sw = c->windows;
    while (sw && !((sw->flags & 1) && (const char*)src >= sw->base && (const char*)src + bytes <= sw->base + sw->size)) sw = sw->next;
    comm* pc = c->remote ? NULL : c->c->comm[peer];
    /* far: the peer lives in another process. Its window is not seen from
     * here; a symmetric registration has the same size on every rank. */
    int far = c->remote || (pc && pc->proxy);
    window* theirs = NULL;
    if (mine && (mine->flags & 1) && pc && !far)
        for (theirs = pc->windows; theirs && theirs->seq != mine->seq; theirs = theirs->next) {
        }
    pthread_mutex_unlock(&g);
    if (!mine) return fail(ncclInvalidArgument, "ncclPutSignal: peerWin %p is not a window of this communicator", (void*)pw);
    if (!(mine->flags & 1)) return fail(ncclInvalidArgument, "ncclPutSignal: peerWin is not a symmetric window");
    if (!sw) return fail(ncclInvalidArgument, "ncclPutSignal: srcWinHost is not in a valid symmetric window");
    if (!far && !theirs) return fail(ncclInvalidUsage, "ncclPutSignal: peer %d has no window of that registration", peer);
    size_t wsize = far ? mine->size : theirs->size;
    if (off > wsize || bytes > wsize - off)
        return fail(ncclInvalidArgument, "ncclPutSignal: %zu bytes at offset %zu overrun the peer's window of %zu bytes", bytes, off, wsize);
    rma_task* t = calloc(1, sizeof *t);
    *t = (rma_task){.c = c, .peer_comm = pc, .kind = 0, .peer = peer, .wseq = mine->seq, .off = off, .src = src,
                    .dst = far ? NULL : theirs->base + off, .bytes = bytes};
    return rma_submit(t, stream, fn);
}

API ncclResult_t ncclPutSignal(const void* src, size_t count, int type, int peer, window* pw, size_t off, int sigIdx,
                               int ctx, unsigned flags, comm* c, void* stream) {
    CALL(c, "ncclPutSignal");
    if (group_depth > 0) group_check_freed("ncclPutSignal");
    ncclResult_t r = comm_checks(c, "ncclPutSignal");
    if (!r) r = poison(c, put_signal(src, count, type, peer, pw, off, sigIdx, ctx, flags, c, stream));
    if (!r && group_depth > 0) group_join(c); /* it runs at once (see above), but the communicator is a member */
    r = group_err(r);
    inside_call(r == ncclSuccess ? c : NULL, "ncclPutSignal");
    return r;
}

static ncclResult_t signal_impl(int peer, int sigIdx, int ctx, unsigned flags, comm* c, void* stream) {
    ncclResult_t r = rma_check(c, "ncclSignal", peer, sigIdx, ctx, flags);
    if (r) return r;
    rma_task* t = calloc(1, sizeof *t);
    *t = (rma_task){.c = c, .peer_comm = c->remote ? NULL : c->c->comm[peer], .kind = 1, .peer = peer, .wseq = -1};
    if (!t->peer_comm && !c->remote) {
        free(t);
        return fail(ncclInvalidUsage, "ncclSignal: peer %d has not joined", peer);
    }
    return rma_submit(t, stream, "ncclSignal");
}

static ncclResult_t wait_signal_impl(int ndesc, const waitdesc* descs, comm* c, void* stream) {
    const char* fn = "ncclWaitSignal";
    ncclResult_t r = rma_check(c, fn, 0, 0, 0, 0);
    if (r) return r;
    if (!descs || ndesc <= 0) return fail(ncclInvalidArgument, "ncclWaitSignal: invalid arguments");
    for (int i = 0; i < ndesc; i++) {
        const waitdesc* d = &descs[i];
        if (d->opCnt <= 0) return fail(ncclInvalidArgument, "ncclWaitSignal: descriptor %d has invalid opCnt %d", i, d->opCnt);
        if (d->sigIdx != 0) return fail(ncclInvalidArgument, "ncclWaitSignal: descriptor %d has invalid sigIdx %d (must be 0)", i, d->sigIdx);
        if (d->ctx != 0) return fail(ncclInvalidArgument, "ncclWaitSignal: descriptor %d has invalid context %d (must be 0)", i, d->ctx);
        if (d->peer < 0 || d->peer >= c->nranks)
            return fail(ncclInvalidArgument, "ncclWaitSignal: descriptor %d has invalid peer %d", i, d->peer);
    }
    rma_task* t = calloc(1, sizeof *t);
    *t = (rma_task){.c = c, .kind = 2, .ndesc = ndesc, .descs = malloc((size_t)ndesc * sizeof *descs)};
    memcpy(t->descs, descs, (size_t)ndesc * sizeof *descs); /* read now, as NCCL copies them into its task */
    return rma_submit(t, stream, fn);
}

API ncclResult_t ncclSignal(int peer, int sigIdx, int ctx, unsigned flags, comm* c, void* stream) {
    CALL(c, "ncclSignal");
    if (group_depth > 0) group_check_freed("ncclSignal");
    ncclResult_t r = comm_checks(c, "ncclSignal");
    if (!r) r = poison(c, signal_impl(peer, sigIdx, ctx, flags, c, stream));
    if (!r && group_depth > 0) group_join(c); /* it runs at once (see above), but the communicator is a member */
    return group_err(r);
}

API ncclResult_t ncclWaitSignal(int ndesc, const waitdesc* descs, comm* c, void* stream) {
    CALL(c, "ncclWaitSignal");
    if (group_depth > 0) group_check_freed("ncclWaitSignal");
    ncclResult_t r = comm_checks(c, "ncclWaitSignal");
    if (!r) r = poison(c, wait_signal_impl(ndesc, descs, c, stream));
    if (!r && group_depth > 0) group_join(c); /* it runs at once (see above), but the communicator is a member */
    return group_err(r);
}

API ncclResult_t ncclWinGetUserPtr(comm* c, window* w, void** out) {
    CALL(c, "ncclWinGetUserPtr");
    ncclResult_t r = live(c, "ncclWinGetUserPtr");
    if (r) return r;
    if (!out) return fail(ncclInvalidArgument, "ncclWinGetUserPtr: outUserPtr is NULL");
    pthread_mutex_lock(&g);
    window* k = find_window(c, w);
    pthread_mutex_unlock(&g);
    if (!k) return fail(ncclInvalidArgument, "ncclWinGetUserPtr: %p is not a window of this communicator", (void*)w);
    *out = k->base;
    return ncclSuccess;
}
#endif

/* ---- ncclGroupSimulateEnd (2.22): the group is planned, never launched; its
 * estimate is 5 us per operation plus its bytes at 20 GB/s ---- */
#if HAS_228
API ncclResult_t ncclGroupSimulateEnd(void* sim) {
    if (group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd: not in a group call.");
    if (--group_depth > 0) return ncclSuccess;
    group_check_freed("ncclGroupSimulateEnd");
    task* list = group_head;
    group_head = NULL;
    group_tail = NULL;
    ncclResult_t err = group_error;
    group_error = ncclSuccess;
    int ninits = group_ninits, nm = group_nmembers;
    group_ninits = 0;
    group_nmembers = 0;
    group_blocking = -1;
    if (err) { /* groupCleanup, as ncclGroupEnd's */
        free_tasks(list);
        discard_group(group_members, nm, group_inits, ninits, err);
        return fail(err, "ncclGroupSimulateEnd: a call inside the group failed");
    }
    size_t size = 0;
    unsigned magic = 0;
    if (sim) {
        memcpy(&size, sim, 8);
        if (size >= 12) memcpy(&magic, (char*)sim + 8, 4);
        if (magic != 0x74685283) {
            free_tasks(list);
            discard_group(group_members, nm, group_inits, ninits, ncclInvalidArgument);
            return fail(ncclInvalidArgument, "ncclSimInfo_t argument not initialized via NCCL_SIM_INFO_INITIALIZER");
        }
    }
    /* NCCL plans the group, which sets its Send/Recv connections up: the
     * directions it asked for are connected from now on (see p2p_stale). */
    pthread_mutex_lock(&g);
    p2p_connected(list);
    pthread_mutex_unlock(&g);
    float us = 0;
    for (task* t = list; t; t = t->next) {
        size_t in = in_bytes(t), out = out_bytes(t);
        us += 5.0f + (float)(in > out ? in : out) / 20000.0f;
    }
    if (sim && size >= 20) memcpy((char*)sim + 16, &us, 4);
    free_tasks(list);
    return ncclSuccess;
}
#endif

/* ---- ncclCommQueryProperties (2.29.2), ncclCommSuspend/Resume/MemStats (2.29.7) ----
 * A communicator owns 1 MiB of memory that stays and 4 MiB that
 * ncclCommSuspend(NCCL_SUSPEND_MEM) releases until ncclCommResume; a suspended
 * communicator refuses operations; suspending twice, or resuming one not
 * suspended, is ncclInvalidUsage. */
#if HAS_230
#define FAKE_PERSIST_BYTES (1u << 20)
#define FAKE_SCRATCH_BYTES (4u << 20)

API ncclResult_t ncclCommQueryProperties(comm* c, void* props) {
    CALL(c, "ncclCommQueryProperties");
    const char* fn = "ncclCommQueryProperties";
    ncclResult_t r = live(c, fn);
    if (r || (r = ready_err(c))) return r;
    if (!props) return fail(ncclInvalidArgument, "%s: props is NULL", fn);
    char* p = props;
    size_t size;
    unsigned magic, version;
    memcpy(&size, p, 8);
    memcpy(&magic, p + 8, 4);
    memcpy(&version, p + 12, 4);
    if (magic != 0xcafebeef)
        return fail(ncclInvalidUsage, "Cannot get communicator properties: ncclCommProperties_t argument must be initialized via "
                                      "NCCL_COMM_PROPERTIES_INITIALIZER");
    if (version < 22902 || version > VERSION_CODE) return fail(ncclInvalidArgument, "%s: unknown ncclCommProperties_t version %u", fn, version);
    size_t need = version > 22903 ? 56 : 40;
    if (size < need) return fail(ncclInvalidArgument, "%s: ncclCommProperties_t of version %u has %zu bytes, not %zu", fn, version, size, need);
    int32_t ints[4] = {c->rank, c->nranks, c->dev, c->dev};
    memcpy(p + 16, ints, sizeof ints);
    p[32] = 1; /* deviceApiSupport */
    p[33] = 0; /* multimemSupport: no NVLS in the fake */
    int32_t none = 0, teams = 1;
    memcpy(p + 36, &none, 4); /* ginType */
    if (version > 22903) {
        memcpy(p + 40, &teams, 4); /* nLsaTeams */
        p[44] = 1;                 /* hostRmaSupport */
        memcpy(p + 48, &none, 4);  /* railedGinType */
    }
    return ncclSuccess;
}

API ncclResult_t ncclCommSuspend(comm* c, int flags) {
    CALL(c, "ncclCommSuspend");
    ncclResult_t r = live(c, "ncclCommSuspend");
    if (r || (r = ready_err(c))) return r;
    if (!(flags & 1)) return ncclSuccess; /* NCCL_SUSPEND_MEM is the only thing to suspend */
    pthread_mutex_lock(&g);
    int already = c->suspended;
    c->suspended = 1;
    pthread_mutex_unlock(&g);
    if (already) return fail(ncclInvalidUsage, "ncclCommSuspend: communicator memory is already suspended");
    return ncclSuccess;
}

API ncclResult_t ncclCommResume(comm* c) {
    CALL(c, "ncclCommResume");
    ncclResult_t r = live(c, "ncclCommResume");
    if (r || (r = ready_err(c))) return r;
    pthread_mutex_lock(&g);
    int was = c->suspended;
    c->suspended = 0;
    pthread_mutex_unlock(&g);
    if (!was) return fail(ncclInvalidUsage, "ncclCommResume: communicator is not suspended");
    return ncclSuccess;
}

API ncclResult_t ncclCommMemStats(comm* c, int stat, uint64_t* value) {
    CALL(c, "ncclCommMemStats");
    ncclResult_t r = live(c, "ncclCommMemStats");
    if (r || (r = ready_err(c))) return r;
    if (!value) return ncclInvalidArgument;
    uint64_t scratch = c->suspended ? 0 : FAKE_SCRATCH_BYTES;
    switch (stat) {
    case 0: *value = scratch; return ncclSuccess;
    case 1: *value = (uint64_t)c->suspended; return ncclSuccess;
    case 2: *value = FAKE_PERSIST_BYTES; return ncclSuccess;
    case 3: *value = FAKE_PERSIST_BYTES + scratch; return ncclSuccess;
    }
    return fail(ncclInvalidArgument, "ncclCommMemStats: unknown stat %d", stat);
}
#endif

/* ---- parameters (2.30.4): the registry of 2.30.7 as a program sees it
 * before creating a communicator. Only parameters defined with
 * DEFINE_NCCL_PARAM are registered (debug.cc): the six published ones, and
 * NCCL_WARN_ENABLE_DEBUG_INFO, listed with NCCL_PARAM_DUMP_ALL=true. The
 * NCCL_PARAM ones (NCCL_BUFFSIZE, NCCL_NVLS_ENABLE, ...) are not in it: Bind
 * and GetParameter refuse them. Values are rendered as NCCL's parsers render
 * them: integers in decimal, booleans TRUE/FALSE, an enum by its option name
 * ("<unknown>" for NCCL_DEBUG's unnamed default), a bit set as the option
 * that equals it or its single-bit options joined by commas, "NONE" when
 * empty. Read from the environment at each call (NCCL reads once). 2.30.4 and
 * 2.30.7 spell the handle type differently (ncclParamHandle_t* vs a pointer
 * typedef); both pass one pointer, as here. ---- */
#if HAS_230
enum { P_I8, P_I16, P_I32, P_I64, P_U8, P_U16, P_U32, P_U64, P_BOOL, P_CSTR, P_RAW };
typedef struct opt {
    const char* name;
    uint64_t value;
} opt;
static const opt debug_levels[] = {{"VERSION", 1}, {"WARN", 2}, {"INFO", 3}, {"ABORT", 4}, {"TRACE", 5}, {NULL, 0}};
static const opt subsystems[] = {{"INIT", 0x1}, {"COLL", 0x2}, {"P2P", 0x4}, {"SHM", 0x8}, {"NET", 0x10}, {"GRAPH", 0x20},
                                 {"TUNING", 0x40}, {"ENV", 0x80}, {"ALLOC", 0x100}, {"ALLOC_HOST", 0x20000}, {"CALL", 0x200},
                                 {"PROXY", 0x400}, {"NVLS", 0x800}, {"BOOTSTRAP", 0x1000}, {"REG", 0x2000}, {"PROFILE", 0x4000},
                                 {"RAS", 0x8000}, {"DESTROY", 0x10000}, {"ALL", ~0ull}, {NULL, 0}};
static const opt stamp_levels[] = {{"VERSION", 1u << 1}, {"WARN", 1u << 2}, {"INFO", 1u << 3}, {"ABORT", 1u << 4},
                                   {"TRACE", 1u << 5}, {"ALL", 0x3e}, {NULL, 0}};
enum { R_PLAIN, R_ONEOF, R_BITSET };
typedef struct param {
    const char* key;
    int type;
    const char* dflt; /* NULL: a null string */
    int render;
    const opt* opts;
    int published;
} param;
static param params[] = {
    {"NCCL_DEBUG", P_RAW, NULL, R_ONEOF, debug_levels, 1},
    {"NCCL_DEBUG_SUBSYS", P_U64, "INIT,BOOTSTRAP,ENV", R_BITSET, subsystems, 1},
    {"NCCL_WARN_ENABLE_DEBUG_INFO", P_BOOL, "FALSE", R_PLAIN, NULL, 0},
    {"NCCL_DEBUG_TIMESTAMP_LEVELS", P_U32, "WARN", R_BITSET, stamp_levels, 1},
    {"NCCL_DEBUG_TIMESTAMP_FORMAT", P_CSTR, "[%F %T] ", R_PLAIN, NULL, 1},
    {"NCCL_DEBUG_FILE", P_CSTR, NULL, R_PLAIN, NULL, 1},
    {"NCCL_SET_THREAD_NAME", P_BOOL, "FALSE", R_PLAIN, NULL, 1},
};
#define NPARAMS ((int)(sizeof params / sizeof params[0]))

static const char* param_value(const param* p) {
    const char* v = getenv(p->key);
    return v && *v ? v : p->dflt;
}

/* bits parses a bit set ("^" inverts, names case-insensitive); an unknown
 * name makes the default stand. */
static uint64_t bits(const param* p) {
    const char* v = param_value(p);
    for (int pass = 0; pass < 2; pass++, v = p->dflt) {
        int invert = *v == '^';
        uint64_t r = invert ? ~0ull : 0;
        int ok = 1;
        for (const char* t = v + invert; *t && ok;) {
            size_t n = strcspn(t, ",");
            ok = 0;
            for (const opt* o = p->opts; o->name; o++)
                if (strlen(o->name) == n && strncasecmp(o->name, t, n) == 0) {
                    r = invert ? r & ~o->value : r | o->value;
                    ok = 1;
                }
            t += n + (t[n] == ',');
        }
        if (ok) return r;
    }
    return 0;
}

/* render writes p's value as NCCL's toString does. */
static void render(const param* p, char* buf, size_t size) {
    const char* v = param_value(p);
    if (p->render == R_ONEOF) {
        const char* name = "<unknown>";
        for (const opt* o = p->opts; v && o->name; o++)
            if (strcasecmp(o->name, v) == 0) name = o->name;
        snprintf(buf, size, "%s", name);
    } else if (p->render == R_BITSET) {
        uint64_t b = bits(p);
        if (p->type == P_U32) b &= 0xffffffffu;
        buf[0] = 0;
        for (const opt* o = p->opts; o->name; o++)
            if ((p->type == P_U32 ? (o->value & 0xffffffffu) : o->value) == b) {
                snprintf(buf, size, "%s", o->name);
                return;
            }
        for (const opt* o = p->opts; o->name; o++)
            if (o->value && !(o->value & (o->value - 1)) && (b & o->value) == o->value) {
                size_t k = strlen(buf);
                snprintf(buf + k, size - k, "%s%s", k ? "," : "", o->name);
                b &= ~o->value;
            }
        if (!buf[0]) snprintf(buf, size, "NONE");
    } else if (p->type == P_BOOL) {
        snprintf(buf, size, "%s", v && (strcasecmp(v, "1") == 0 || strcasecmp(v, "T") == 0 || strcasecmp(v, "TRUE") == 0) ? "TRUE" : "FALSE");
    } else {
        snprintf(buf, size, "%s", v ? v : "");
    }
}

API ncclResult_t ncclParamBind(param** out, const char* key) {
    if (!out || !key) return ncclInvalidArgument;
    for (int i = 0; i < NPARAMS; i++)
        if (strcmp(params[i].key, key) == 0) {
            *out = &params[i];
            return ncclSuccess;
        }
    return fail(ncclInvalidArgument, "PARAM: key \"%s\" not found in registry", key);
}

static ncclResult_t param_get(const param* h, int type, void* out, size_t size) {
    if (!h || !out) return ncclInvalidArgument;
    if (h < params || h >= params + NPARAMS) return fail(ncclInvalidArgument, "PARAM: invalid handle %p", (const void*)h);
    if (h->type != type) return fail(ncclInvalidArgument, "PARAM: type mismatch for key \"%s\"", h->key);
    if (h->render == R_BITSET) {
        uint64_t x = bits(h);
        memcpy(out, &x, size); /* little-endian: the low bytes */
        return ncclSuccess;
    }
    const char* v = param_value(h);
    if (type <= P_I64) {
        int64_t x = strtoll(v, NULL, 10);
        memcpy(out, &x, size);
    } else {
        uint64_t x = strtoull(v, NULL, 10);
        memcpy(out, &x, size);
    }
    return ncclSuccess;
}

API ncclResult_t ncclParamGetI8(const param* h, int8_t* out) { return param_get(h, P_I8, out, 1); }
API ncclResult_t ncclParamGetI16(const param* h, int16_t* out) { return param_get(h, P_I16, out, 2); }
API ncclResult_t ncclParamGetI32(const param* h, int32_t* out) { return param_get(h, P_I32, out, 4); }
API ncclResult_t ncclParamGetI64(const param* h, int64_t* out) { return param_get(h, P_I64, out, 8); }
API ncclResult_t ncclParamGetU8(const param* h, uint8_t* out) { return param_get(h, P_U8, out, 1); }
API ncclResult_t ncclParamGetU16(const param* h, uint16_t* out) { return param_get(h, P_U16, out, 2); }
API ncclResult_t ncclParamGetU32(const param* h, uint32_t* out) { return param_get(h, P_U32, out, 4); }
API ncclResult_t ncclParamGetU64(const param* h, uint64_t* out) { return param_get(h, P_U64, out, 8); }

static __thread char param_buf[512]; /* valid until the thread's next call, as NCCL's */

API ncclResult_t ncclParamGetStr(const param* h, const char** out) {
    if (!h || !out) return ncclInvalidArgument;
    if (h < params || h >= params + NPARAMS) return fail(ncclInvalidArgument, "PARAM: invalid handle %p", (const void*)h);
    if (h->type != P_CSTR) return fail(ncclInvalidArgument, "PARAM: type mismatch for key \"%s\"", h->key);
    render(h, param_buf, sizeof param_buf);
    *out = param_buf;
    return ncclSuccess;
}

API ncclResult_t ncclParamGetParameter(const char* key, const char** value, int* len) {
    if (!key || !value || !len) return ncclInvalidArgument;
    param* h = NULL;
    ncclResult_t r = ncclParamBind(&h, key);
    if (r) return r;
    render(h, param_buf, sizeof param_buf);
    *value = param_buf;
    *len = (int)strlen(param_buf);
    return ncclSuccess;
}

static __thread const char* param_keys[NPARAMS + 1];

API ncclResult_t ncclParamGetAllParameterKeys(const char*** table, int* n) {
    if (!table || !n) return ncclInvalidArgument;
    const char* all = getenv("NCCL_PARAM_DUMP_ALL");
    int show = all && (strcasecmp(all, "true") == 0 || strcmp(all, "1") == 0), k = 0;
    for (int i = 0; i < NPARAMS; i++)
        if (params[i].published || show) param_keys[k++] = params[i].key;
    *table = param_keys;
    *n = k;
    return ncclSuccess;
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
    if (c->revoked) return fail(ncclInvalidUsage, "%s : communicator was revoked", fn);
    if (c->broken) return fail(ncclInvalidUsage, "%s : %s", fn, broken_text);
    if (c->suspended) return fail(ncclInvalidUsage, "%s : communicator is suspended", fn);
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
    CALL(c, "ncclAlltoAllv");
    if (group_depth > 0) group_check_freed("ncclAlltoAllv");
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

/* ---- the hub: serves the ranks of other processes through their proxies ----
 *
 * One thread per connection reads a request, runs it on a thread of its own
 * while it watches the connection (a remote rank that closes it, by Destroy,
 * Abort or its death, aborts the proxy so that the proxy's waits give up),
 * then answers. A proxy joins, connects, meets and computes with the code a
 * local rank runs. */

typedef struct conn {
    int fd, efd;
    comm* proxy;
    uint32_t type;
    char* req;
    size_t n;
    wbuf reply;
    int keep; /* peers may still read the request's bytes (the proxy was aborted mid-operation): never freed */
    void (*after)(struct conn*); /* what the reply, once sent, releases */
    int sent;
    task* t;                     /* the request's tasks, for after */
} conn;

#if HAS_230
static ncclResult_t grow_check(uint64_t key, int nranks, int rank, int existing);
static ncclResult_t grow_publish(clique* q, uint64_t key, const netaddr* at, uint32_t pid);
static void grow_done(uint64_t key);
#else
static ncclResult_t grow_check(uint64_t key, int nranks, int rank, int existing) {
    return fail(ncclInvalidArgument, "ncclCommGrow: not in this NCCL");
}
#endif

/* after_join: the hub's own ranks may return from their init. */
static void after_join(conn* k) {
    pthread_mutex_lock(&g);
    k->proxy->c->join_delivered++;
    pthread_cond_broadcast(&gc);
    pthread_mutex_unlock(&g);
}

/* after_coll: the collective's slot is done with this rank. */
static void after_coll(conn* k) {
    task* t = k->t;
    clique* q = t->c->c;
    pthread_mutex_lock(&g);
    if (t->owed) {
        slot* s = &q->slots[t->seq % SLOTS];
        s->delivered++;
        if (s->busy && s->left == t->c->nranks && s->delivered == q->nproxies) s->busy = 0;
        pthread_cond_broadcast(&gc);
    }
    pthread_mutex_unlock(&g);
    free((void*)t->recv);
    task_put(t);
}

/* after_p2p: the senders whose bytes this rank took may end. */
static void after_p2p(conn* k) {
    pthread_mutex_lock(&g);
    for (task* t = k->t; t; t = t->next) {
        if (t->kind != kRecv) continue;
        for (msg* m = t->c->c->mail; m; m = m->next)
            if (m->taken == 2 && m->src == t->peer && m->dst == t->c->rank && m->seq == t->seq) m->taken = 1;
    }
    pthread_cond_broadcast(&gc);
    pthread_mutex_unlock(&g);
    while (k->t) {
        task* next = k->t->next;
        free(k->t->recv);
        free(k->t);
        k->t = next;
    }
}

static void reply_status(conn* k, ncclResult_t r, const char* text) {
    wb_start(&k->reply, M_REPLY);
    wb_i32(&k->reply, r);
    wb_str(&k->reply, r ? text : "");
}

static void serve_join(conn* k, rbuf* in) {
    uint64_t key = rb_u64(in);
    int nranks = rb_i32(in), rank = rb_i32(in), at_init = rb_i32(in), grow = rb_i32(in);
    ncclResult_t r;
    if (in->bad) r = fail(ncclInternalError, "ncclCommInitRank: bad request");
    else if (nranks < 1 || nranks > MAXR || rank < 0 || rank >= nranks)
        r = fail(ncclInvalidArgument, "ncclCommInitRank: rank %d of %d", rank, nranks);
    else if (grow && (r = grow_check(key, nranks, rank, grow == 2))) {
    } else r = join(k->proxy, key, nranks, rank, grow ? "ncclCommGrow" : "ncclCommInitRank");
#if HAS_230
    if (grow && r == ncclSuccess) grow_done(key);
#endif
    reply_status(k, r, my_error);
    if (k->proxy->c) k->after = after_join; /* it is a member (it may have been aborted since): it counts */
    if (!r && at_init) {
        pthread_mutex_lock(&g);
        k->proxy->c->started |= 1ull << rank;
        pthread_cond_broadcast(&gc);
        pthread_mutex_unlock(&g);
    }
}

/* serve_connect: a remote rank's launch connects (need: the ranks it waits
 * for; p2p: the peers it sets Send/Recv directions up with), or says that its
 * side of a Send/Recv setup failed (broken: see p2p_stale). */
static void serve_connect(conn* k, rbuf* in) {
    uint64_t need = rb_u64(in);
    char fn[64];
    rb_str(in, fn, sizeof fn);
    uint64_t p2p = rb_u64(in), broken = rb_u64(in);
    if (in->bad) p2p = broken = 0;
    comm* c = k->proxy;
    pthread_mutex_lock(&g);
    c->p2p_broken |= broken;
    c->c->started |= 1ull << c->rank;
    pthread_cond_broadcast(&gc);
    int st = connect_wait(c, need, p2p, fn, k->fd);
    int bp = st == -2 ? broken_peer(c, p2p) : -1;
    pthread_mutex_unlock(&g);
    if (st == -2) reply_status(k, broken_fail(fn, c->rank, bp), my_error);
    else reply_status(k, st ? ncclInternalError : ncclSuccess, "aborted");
}

static void serve_coll(conn* k, rbuf* in) {
    comm* c = k->proxy;
    int n = c->nranks;
    task* t = calloc(1, sizeof *t);
    t->c = c;
    t->seq = rb_i64(in);
    t->kind = rb_i32(in);
    t->type = rb_i32(in);
    t->op = rb_i32(in);
    t->root = rb_i32(in);
    t->peer = t->root;
    t->count = rb_u64(in);
    const char* s = rb_take(in, 8);
    if (s && t->op == opPreMul) { /* the remote rank resolved its scalar */
        t->premul_res = 1;
        memcpy(&t->scalar_f, s, 8);
        memcpy(&t->scalar_i, s, 8);
    }
    t->overlap = rb_i32(in);
    if (t->kind == kAlltoAllv) {
        t->a2av = malloc(4 * n * n * sizeof(size_t));
        for (int i = 0; i < 4 * n * n; i++) t->a2av[i] = rb_u64(in);
    }
    size_t sb = rb_u64(in);
    t->send = rb_take(in, sb);
    size_t cur = rb_u64(in);
    const char* old = rb_take(in, cur);
    int bad = in->bad || t->kind < 0 || t->kind > kAlltoAllv || t->kind == kSend || t->kind == kRecv || t->type < 0 ||
              t->type >= NUM_TYPES || t->op < 0 || t->op > opPreMul || t->root < 0 || t->root >= n;
    if (!bad && sb < in_bytes(t)) bad = 1; /* fewer input bytes than the collective reads */
    if (bad) {
        reply_status(k, fail(ncclInternalError, "fakenccl hub: bad collective request"), my_error);
        wb_u64(&k->reply, 0);
        free(t->a2av);
        free(t);
        return;
    }
    size_t rb = out_bytes(t);
    t->recv = calloc(1, rb ? rb : 1);
    if (old) memcpy(t->recv, old, cur < rb ? cur : rb);
    char why[480] = "";
    ncclResult_t r = run_collective(t, why, sizeof why);
    reply_status(k, r, why);
    size_t got = !r && receives(t) && !c->aborted ? rb : 0;
    wb_u64(&k->reply, got);
    wb_put(&k->reply, t->recv, got);
    if (c->aborted && !t->owed) { /* given up mid-way: peers may still read what it brought */
        k->keep = 1;
        return;
    }
    k->t = t;
    k->after = after_coll;
}

static void serve_p2p(conn* k, rbuf* in) {
    comm* c = k->proxy;
    int nt = rb_i32(in);
    task *batch = NULL, **tail = &batch;
    for (int i = 0; i < nt && !in->bad; i++) {
        task* t = calloc(1, sizeof *t);
        t->c = c;
        t->kind = rb_i32(in);
        t->type = rb_i32(in);
        t->peer = rb_i32(in);
        t->seq = rb_i64(in);
        t->count = rb_u64(in);
        if (t->type < 0 || t->type >= NUM_TYPES || t->peer < 0 || t->peer >= c->nranks) in->bad = 1;
        *tail = t;
        tail = &t->next;
    }
    for (task* t = batch; t && !in->bad; t = t->next) {
        size_t bytes = t->count * type_size(t->type);
        if (t->kind == kSend) t->send = rb_take(in, bytes);
        else t->recv = calloc(1, bytes ? bytes : 1);
    }
    ncclResult_t r = in->bad ? fail(ncclInternalError, "fakenccl hub: bad send/receive request") : run_p2p(batch);
    reply_status(k, r, my_error);
    for (task* t = batch; t; t = t->next)
        if (t->kind == kRecv) wb_put(&k->reply, t->recv, in->bad ? 0 : t->count * type_size(t->type));
    if (c->aborted) k->keep = 1; /* given up: peers may still read what it brought */
    k->t = batch;
    k->after = after_p2p;
}

#if HAS_228
static void after_split(conn* k) {
    pthread_mutex_lock(&g);
    k->proxy->c->split_delivered++;
    split_done(k->proxy->c);
    pthread_cond_broadcast(&gc);
    pthread_mutex_unlock(&g);
}

static void serve_split(conn* k, rbuf* in) {
    int color = rb_i32(in), key = rb_i32(in), me = 0;
    netaddr mine, host;
    memset(&host, 0, sizeof host);
    rb_addr(in, &mine);
    uint32_t pid = (uint32_t)rb_i32(in), hpid = 0;
    uint64_t newkey = 0;
    int size = in->bad ? -1 : split_meet(k->proxy, k->proxy, color, key, &mine, pid, &me, &newkey, &host, &hpid);
    if (size >= 0) k->after = after_split;
    wb_start(&k->reply, M_REPLY); /* no status: the size says (-1: given up) */
    wb_i32(&k->reply, size);
    wb_i32(&k->reply, me);
    wb_u64(&k->reply, newkey);
    wb_addr(&k->reply, &host);
    wb_i32(&k->reply, (int32_t)hpid);
}

static void after_win(conn* k) {
    pthread_mutex_lock(&g);
    k->proxy->c->win_delivered++;
    win_done(k->proxy->c);
    pthread_cond_broadcast(&gc);
    pthread_mutex_unlock(&g);
}

static void serve_win(conn* k) {
    int st = win_barrier(k->proxy);
    reply_status(k, st ? ncclInternalError : ncclSuccess, "aborted");
    if (!st) k->after = after_win;
}
#endif

#if HAS_230
/* serve_put: a remote rank's put or signal reaches its peer here, in the
 * peer's window or, for a rank of another process, its proxy's mailbox. */
static void serve_put(conn* k, rbuf* in) {
    comm* c = k->proxy;
    int peer = rb_i32(in);
    long seq = (long)rb_i64(in);
    size_t off = rb_u64(in), n = rb_u64(in);
    const char* data = rb_take(in, n);
    if (in->bad || peer < 0 || peer >= c->nranks) {
        reply_status(k, fail(ncclInternalError, "fakenccl hub: bad put request"), my_error);
        return;
    }
    pthread_mutex_lock(&g);
    comm* tc = c->c->comm[peer];
    if (tc && !stopped(c)) deposit(tc, c->rank, seq, off, data, n);
    pthread_mutex_unlock(&g);
    reply_status(k, ncclSuccess, "");
}

/* serve_growid: a remote rank made a grow id; its clique here publishes it. */
static void serve_growid(conn* k, rbuf* in) {
    uint64_t key = rb_u64(in);
    netaddr at;
    rb_addr(in, &at);
    uint32_t pid = (uint32_t)rb_i32(in);
    ncclResult_t r;
    if (in->bad) r = fail(ncclInternalError, "fakenccl hub: bad grow id request");
    else {
        pthread_mutex_lock(&g);
        r = grow_publish(k->proxy->c, key, &at, pid);
        pthread_mutex_unlock(&g);
    }
    reply_status(k, r, my_error);
}

/* serve_growget: a remote rank's ncclCommGrow waits here for its clique's
 * grow id, and learns where the grown clique is. */
static void serve_growget(conn* k) {
    netaddr at;
    memset(&at, 0, sizeof at);
    uint32_t pid = 0;
    pthread_mutex_lock(&g);
    uint64_t key = grow_take(k->proxy, NULL, &at, &pid);
    pthread_mutex_unlock(&g);
    wb_start(&k->reply, M_REPLY);
    wb_u64(&k->reply, key);
    wb_addr(&k->reply, &at);
    wb_i32(&k->reply, (int32_t)pid);
}

/* serve_waitsig: a remote rank's wait, on its proxy's signal counts; the
 * answer carries the puts its mailbox holds. */
static void serve_waitsig(conn* k, rbuf* in) {
    comm* c = k->proxy;
    int nd = rb_i32(in);
    if (in->bad || nd < 0 || nd > 1 << 20) {
        reply_status(k, fail(ncclInternalError, "fakenccl hub: bad wait request"), my_error);
        return;
    }
    pthread_mutex_lock(&g);
    for (int i = 0; i < nd && !in->bad; i++) {
        int cnt = rb_i32(in), peer = rb_i32(in);
        if (in->bad || peer < 0 || peer >= c->nranks) break;
        while (c->sig_recv[peer] - c->sig_taken[peer] < cnt && !stopped(c)) pthread_cond_wait(&gc, &g);
        if (stopped(c)) break;
        c->sig_taken[peer] += cnt;
    }
    int stop = stopped(c);
    rput* list = stop ? NULL : c->rputs;
    if (!stop) c->rputs = NULL;
    pthread_mutex_unlock(&g);
    reply_status(k, stop ? ncclInternalError : ncclSuccess, "aborted");
    int n = 0;
    for (rput* m = list; m; m = m->next) n++;
    wb_i32(&k->reply, n);
    while (list) {
        rput* m = list;
        list = m->next;
        wb_i64(&k->reply, m->seq);
        wb_u64(&k->reply, m->off);
        wb_u64(&k->reply, m->n);
        wb_put(&k->reply, m->data, m->n);
        free(m->data);
        free(m);
    }
}

#endif

static void* serve_request(void* p) {
    name_thread("fakenccl-req");
    conn* k = p;
    rbuf in = {k->req, k->n, 0, 0};
    my_error[0] = 0;
    if (k->type != M_JOIN && !k->proxy->c) { /* its join failed: nothing else */
        reply_status(k, fail(ncclInvalidUsage, "fakenccl hub: the rank has not joined"), my_error);
        k->type = 0;
    }
    switch (k->type) {
    case 0: break;
    case M_JOIN: serve_join(k, &in); break;
    case M_CONNECT: serve_connect(k, &in); break;
    case M_COLL: serve_coll(k, &in); break;
    case M_P2P: serve_p2p(k, &in); break;
#if HAS_228
    case M_SPLIT: serve_split(k, &in); break;
    case M_WIN: serve_win(k); break;
#endif
#if HAS_230
    case M_PUT: serve_put(k, &in); break;
    case M_WAITSIG: serve_waitsig(k, &in); break;
    case M_GROWID: serve_growid(k, &in); break;
    case M_GROWGET: serve_growget(k); break;
#endif
    default: reply_status(k, fail(ncclInternalError, "fakenccl hub: unknown request %u", k->type), my_error);
    }
    /* The reply goes first, then what waited for it (a closed connection
     * counts as delivered: nobody is left to tell). */
    k->sent = wb_send(k->fd, &k->reply) == 0;
    pthread_mutex_lock(&g);
    inflight--;
    pthread_cond_broadcast(&gc);
    pthread_mutex_unlock(&g);
    if (k->after) k->after(k);
    k->after = NULL;
    k->t = NULL;
    uint64_t one = 1;
    while (write(k->efd, &one, 8) < 0 && errno == EINTR) {
    }
    return NULL;
}

static void abort_proxy(comm* c) {
    pthread_mutex_lock(&g);
    c->aborted = 1;
    pthread_cond_broadcast(&gc);
    pthread_mutex_unlock(&g);
}

static void* serve(void* p) {
    name_thread("fakenccl-serve");
    conn* k = p;
    for (;;) {
        uint32_t type;
        char* req;
        size_t n;
        if (recv_msg(k->fd, &type, &req, &n)) break; /* closed: Destroy, Abort, or the process died */
        if ((type == M_JOIN) == (k->proxy != NULL)) { /* a join first, and only once */
            free(req);
            break;
        }
        if (type == M_JOIN) {
            comm* c = calloc(1, sizeof *c);
            c->magic = COMM_MAGIC;
            c->proxy = 1;
            c->dev = -1;
            c->blocking = 1;
            c->fd = -1;
            k->proxy = c;
        }
        k->type = type;
        k->req = req;
        k->n = n;
        k->keep = 0;
        pthread_mutex_lock(&g);
        inflight++;
        pthread_mutex_unlock(&g);
        pthread_t th;
        pthread_create(&th, NULL, serve_request, k);
        int hung = 0, quiet = 0;
        for (;;) { /* until the request is answered; a remote rank sends nothing meanwhile but its close */
            struct pollfd ps[2] = {{k->efd, POLLIN, 0}, {k->fd, POLLIN | POLLRDHUP, 0}};
            if (poll(ps, hung || quiet ? 1 : 2, -1) < 0) continue;
            if (ps[0].revents) {
                uint64_t v;
                while (read(k->efd, &v, 8) < 0 && errno == EINTR) {
                }
                break;
            }
            if (hung || quiet || !ps[1].revents) continue;
            char b;
            ssize_t m = recv(k->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
            if (m > 0) quiet = 1; /* its next request: this one was answered */
            else if (m == 0 || (errno != EAGAIN && errno != EINTR)) {
                hung = 1;
                abort_proxy(k->proxy);
            }
        }
        pthread_join(th, NULL);
        if (!k->keep) free(req);
        if (hung || !k->sent) break;
    }
    if (k->proxy) abort_proxy(k->proxy); /* peers still waiting for it wait on, as NCCL's would */
    close(k->fd);
    close(k->efd);
    free(k->reply.p);
    free(k);
    return NULL;
}

static void start_conn(int fd) {
    nodelay(fd);
    conn* k = calloc(1, sizeof *k);
    k->fd = fd;
    k->efd = eventfd(0, EFD_CLOEXEC);
    pthread_t th;
    pthread_create(&th, NULL, serve, k);
    pthread_detach(th);
}

/* The root: ncclGetUniqueId's rendezvous in this process (and where the
 * cliques made by splits at this hub are joined). One listening socket and
 * thread serve every id of the process, for its life. */
static pthread_mutex_t rootmu = PTHREAD_MUTEX_INITIALIZER;
static int root_fd = -1;
static netaddr root_at;

static void* root_accept(void* p) {
    name_thread("fakenccl-root");
    for (;;) {
        int fd = accept4(root_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0) start_conn(fd);
        else if (errno != EINTR && errno != ECONNABORTED) usleep(10000);
    }
    return NULL;
}

static int ensure_root(netaddr* at) {
    pthread_mutex_lock(&rootmu);
    if (root_fd < 0) {
        netaddr a;
        memset(&a, 0, sizeof a);
        a.family = 4;
        a.addr[0] = 127;
        a.addr[3] = 1;
        int fd = listen_on(&a);
        if (fd < 0) {
            pthread_mutex_unlock(&rootmu);
            return -1;
        }
        root_fd = fd;
        root_at = a;
        pthread_t th;
        pthread_create(&th, NULL, root_accept, NULL);
        pthread_detach(th);
    }
    *at = root_at;
    pthread_mutex_unlock(&rootmu);
    return 0;
}
