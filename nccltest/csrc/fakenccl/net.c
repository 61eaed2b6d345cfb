/* fakenccl: errors, TCP, unique ids. Part of fakenccl.c, which includes it: not compiled alone. */

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

static long version_reads; /* ncclGetVersion calls that wrote a version */

API ncclResult_t ncclGetVersion(int* v) {
    if (!v) return fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
    *v = VERSION_CODE;
    __atomic_add_fetch(&version_reads, 1, __ATOMIC_RELAXED);
    return ncclSuccess;
}

/* For tests: how often the version was read (gonccl's Open reads it once). */
API long fakenccl_version_reads(void) { return __atomic_load_n(&version_reads, __ATOMIC_RELAXED); }

/* ---- TCP: addresses, sockets, messages ---- */

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
/* if_listed: whether an interface's name is in an NCCL_SOCKET_IFNAME-style
 * list: comma-separated name prefixes ("=" before the list: exact names), a
 * leading "^" to exclude them instead; ":port" suffixes are ignored. */
static int if_listed(const char* name, const char* list) {
    int exclude = *list == '^';
    list += exclude;
    int exact = *list == '=';
    list += exact;
    char buf[256], *save = NULL;
    snprintf(buf, sizeof buf, "%s", list);
    int hit = 0;
    for (char* tok = strtok_r(buf, ",", &save); tok && !hit; tok = strtok_r(NULL, ",", &save)) {
        char* colon = strchr(tok, ':');
        if (colon) *colon = 0;
        hit = exact ? !strcmp(name, tok) : !strncmp(name, tok, strlen(tok));
    }
    return exclude ? !hit : hit;
}

/* bootstrap_ip: the address a root listens on and its ids carry, so that ranks
 * on other hosts can dial it. NCCL chooses its bootstrap interface so
 * (ncclFindInterfaces): NCCL_SOCKET_IFNAME where set, else InfiniBand (ib*),
 * else any interface but docker* and lo*, else docker*, else lo; IPv4 here.
 * -1 with errno ENODEV where NCCL_SOCKET_IFNAME names nothing that is up. */
static int bootstrap_ip(netaddr* a) {
    const char* env = getenv("NCCL_SOCKET_IFNAME");
    const char* order[] = {"ib", "^docker,lo", "docker", "lo"};
    int n = 4;
    if (env && *env) {
        order[0] = env;
        n = 1;
    }
    struct ifaddrs* ifs;
    if (getifaddrs(&ifs)) return -1;
    int found = 0;
    for (int i = 0; i < n && !found; i++)
        for (struct ifaddrs* p = ifs; p && !found; p = p->ifa_next)
            if (p->ifa_addr && p->ifa_addr->sa_family == AF_INET && (p->ifa_flags & IFF_UP) && if_listed(p->ifa_name, order[i])) {
                memset(a, 0, sizeof *a);
                a->family = 4;
                memcpy(a->addr, &((struct sockaddr_in*)p->ifa_addr)->sin_addr, 4);
                found = 1;
            }
    freeifaddrs(ifs);
    if (!found && n == 1) {
        errno = ENODEV;
        return -1;
    }
    if (!found) { /* no interface at all: the loopback's address */
        memset(a, 0, sizeof *a);
        a->family = 4;
        a->addr[0] = 127;
        a->addr[3] = 1;
    }
    return 0;
}

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
