/* fakenccl: fault tolerance: shrink, revoke, grow. Part of fakenccl.c, which includes it: not compiled alone. */

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
 * shrink still work. A non-blocking one ends, as NCCL's does, with the
 * communicator's async error: after a peer lost on another node, the kept
 * ncclRemoteError (a blocking one returns success, as NCCL's). It needs no peer: a rank of another process's clique
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
    if (c->blocking) { /* quiescent when the call returns. NCCL's (2.28.9, 2.30.7) reads the async
                        * error only for a non-blocking communicator: a kept error stays unreported here */
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
