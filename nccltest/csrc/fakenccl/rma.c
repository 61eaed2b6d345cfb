/* fakenccl: one-sided RMA. Part of fakenccl.c, which includes it: not compiled alone. */

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
