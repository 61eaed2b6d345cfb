/* fakenccl: the hub: serves the ranks of other processes. Part of fakenccl.c, which includes it: not compiled alone. */

/* ---- the hub: serves the ranks of other processes through their proxies ----
 *
 * One thread per connection reads a request, runs it on a thread of its own
 * while it watches the connection (a remote rank that closes it, by Destroy,
 * Abort or its death, aborts the proxy so that the proxy's waits give up, and
 * is lost to its peers of other nodes: abort_proxy), then answers. The join's
 * answer names the hub's node, for a remote rank that loses the hub. A proxy
 * joins, connects, meets and computes with the code a local rank runs. */

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
    k->proxy->node = rb_u64(in); /* the remote rank's node */
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
    wb_u64(&k->reply, this_node()); /* the hub's node: its death is a lost peer of another node, or not */
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
    if ((c->aborted || r == ncclRemoteError) && !t->owed) { /* given up mid-way: peers may still read what it brought */
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

/* abort_proxy: a remote rank's connection closed. Its proxy stops, and its
 * clique counts the rank lost: peers on other nodes that need it fail with a
 * kept ncclRemoteError, as NCCL's network transport fails them; peers on its
 * own node wait on until aborted, as over NCCL's SHM and P2P (lost_peer). A
 * clean Destroy closes it too: nothing fails then unless a peer still needs
 * the rank, as NCCL's sockets closed by a destroy would fail that peer. */
static void abort_proxy(comm* c) {
    pthread_mutex_lock(&g);
    c->aborted = 1;
    if (c->c && c->c->comm[c->rank] == c) c->c->lost |= 1ull << c->rank;
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
    if (k->proxy) abort_proxy(k->proxy); /* lost: peers of other nodes that need it fail, those of its node wait on */
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
        int fd = bootstrap_ip(&a) ? -1 : listen_on(&a);
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
