/* fakenccl: a remote rank's operations, CUDA graphs, lazy connection, ncclGroupStart. Part of fakenccl.c, which includes it: not compiled alone. */

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
    else if (res == ncclRemoteError) { /* a peer of another node was lost: the hub's verdict, kept here */
        fail(res, "%s", why);
        pthread_mutex_lock(&g);
        set_sticky(c, res);
        pthread_mutex_unlock(&g);
    } else if (bytes && got <= rb && receives(t)) memcpy(t->recv, bytes, got);
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

/* corrupt is a test's knob, FAKENCCL_CORRUPT_BYTES=N: a collective that
 * writes N bytes or more comes out with its first result byte flipped, as a
 * library returning wrong results would leave it (a checker must see it). */
static void corrupt(task* t) {
    static long min = -1;
    if (min < 0) {
        const char* v = getenv("FAKENCCL_CORRUPT_BYTES");
        min = v && atol(v) > 0 ? atol(v) : 0;
    }
    if (min > 0 && receives(t) && out_bytes(t) >= (size_t)min) ((unsigned char*)t->recv)[0] ^= 0xff;
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
            if (!rstopped(c)) corrupt(t);
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
