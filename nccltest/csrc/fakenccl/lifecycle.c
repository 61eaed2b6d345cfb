/* fakenccl: a remote rank's connection; ncclCommInit*, Split, Finalize, Destroy, Abort, queries. Part of fakenccl.c, which includes it: not compiled alone. */

/* ---- a rank of another process's clique: its side of the connection ---- */

/* hub_lost: c's connection to its hub was lost (the hub's process died or
 * went). With the hub on another node, NCCL's network transport fails the
 * work with ncclRemoteError, which c keeps, and its later requests fail at
 * once (hub_gone); on c's own node nothing is detected (SHM and P2P): the
 * wait goes on until the communicator is aborted or revoked (or a shrink's
 * abort flag stops its work). */
static void hub_lost(comm* c, comm* also) {
    pthread_mutex_lock(&g);
    if (c->hub_node != c->node && !rstopped(c) && !(also && also->aborted)) {
        fail(ncclRemoteError,
             "socketProgress: Connection closed by remote peer (fakenccl: rank %d's hub, on another node, is gone)",
             c->rank);
        set_sticky(c, ncclRemoteError);
        c->hub_gone = 1;
        pthread_cond_broadcast(&gc);
    }
    while (!rstopped(c) && !(also && also->aborted)) pthread_cond_wait(&gc, &g);
    pthread_mutex_unlock(&g);
}

/* give_up breaks c's connection after a request was left unanswered (g held):
 * it is out of step now, so nothing more goes over it, and the hub, seeing it
 * closed, stops c's proxy there. An aborted communicator's release closes it. */
static const char* broken_text =
    "the communicator's connection to its hub was given up when ncclCommShrink(NCCL_SHRINK_ABORT) stopped a request in flight";
static void give_up(comm* c) {
    if (c->aborted || c->broken || c->hub_gone) return; /* hub_gone: the hub went first, and c keeps what it left */
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
        hub_lost(c, also); /* the hub is gone */
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
    if (st == -2) hub_lost(c, also);
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
    wb_u64(&b, c->node);            /* its node: whether its death is seen by the others (lost_peer) */
    char* p = NULL;
    rbuf r;
    int st = rpc(c, also, &b, &p, &r);
    free(b.p);
    if (st) return ncclInternalError;
    ncclResult_t res = rb_i32(&r);
    char text[1024];
    rb_str(&r, text, sizeof text);
    uint64_t hub = rb_u64(&r);
    free(p);
    if (res) return fail(res, "%s", text);
    pthread_mutex_lock(&g);
    if (!r.bad) c->hub_node = hub;
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
    if (devlist) { /* as NCCL's: each device must exist, and appear once (unless NCCL_MULTI_RANK_GPU_ENABLE=1, 2.30) */
        int total = 0;
        cudaGetDeviceCount(&total);
        const char* multi = getenv("NCCL_MULTI_RANK_GPU_ENABLE");
        int allow_dup = HAS_230 && multi && atoi(multi) == 1;
        for (int i = 0; i < ndev; i++) {
            if (devlist[i] < 0 || devlist[i] >= total)
                return fail(ncclInvalidArgument, "Invalid device %d (totalnDev=%d)", devlist[i], total);
            for (int j = 0; j < i && !allow_dup; j++)
                if (devlist[j] == devlist[i]) return fail(ncclInvalidUsage, "ncclCommInitAll: device %d listed twice", devlist[i]);
        }
    }
    /* FAKENCCL_INIT_DELAY_US, a test's knob: NCCL's bootstrap and
     * connection setup take their time inside the call. */
    const char* delay = getenv("FAKENCCL_INIT_DELAY_US");
    if (delay && atol(delay) > 0) sleep_us(atol(delay));
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
        struct timespec dl = deadline_in(2000);
        while ((inflight || undelivered(c->c)) && pthread_cond_timedwait(&gc, &g, &dl) != ETIMEDOUT) {
        }
    }
    pthread_mutex_unlock(&g);
}

/* untold: a live proxy of q whose remote rank has a lost peer on another node
 * than its own and has not been answered so yet (g held). */
static int untold(clique* q) {
    for (int i = 0; i < q->nranks; i++) {
        comm* p = q->comm[i];
        if (!p || !p->proxy || p->aborted || p->told_lost || (q->lost >> i & 1)) continue;
        for (uint64_t m = q->lost; m; m &= m - 1)
            if (q->node[__builtin_ctzll(m)] != q->node[i]) return 1;
    }
    return 0;
}

/* tell_first: c, a rank of this process, failed for a lost peer of another
 * node (g held). Before it reports that, and this process perhaps exits, the
 * remote ranks that NCCL's sockets would fail too are answered so, up to
 * 500 ms: through their own sockets they would learn it whether or not this
 * process lives, but here they learn it only from their hub. */
static void tell_first(comm* c) {
    if (!c->c || !c->c->nproxies) return;
    struct timespec dl = deadline_in(500);
    while ((inflight || untold(c->c)) && pthread_cond_timedwait(&gc, &g, &dl) != ETIMEDOUT) {
    }
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
static struct timespec warn_deadline(void) { return deadline_in(warn_ms()); }

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
    if (k && c->job && c->job->launcher) {
        __atomic_add_fetch(&launch_polls, 1, __ATOMIC_RELAXED);
        if (c->job->launcher != (long)syscall(SYS_gettid)) __atomic_add_fetch(&polls_elsewhere, 1, __ATOMIC_RELAXED);
    }
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
