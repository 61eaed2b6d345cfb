/* fakenccl: discarded groups' connection flags, ncclGroupEnd, ncclAllReduce ... ncclRedOpDestroy. Part of fakenccl.c, which includes it: not compiled alone. */

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
    pthread_mutex_unlock(&g);
    /* NCCL connects each communicator in a job of its own: one job runs on
     * the calling thread, several on threads of their own (group.cc
     * asyncJobLaunch). Between two GPUs of one process the connection enables
     * peer access, which a capture may forbid the thread (see
     * fakecuda_connect_guard); ranks in other processes are not modelled so. */
    for (int i = 0; i < n; i++) {
        if (ws[i].c->remote || !fakecuda_connect_guard(n == 1)) continue;
        comm* c = ws[i].c;
        free(ws);
        return fail(ncclInternalError, "%s: failed to peer with device %d: 900 operation not permitted when stream is capturing",
                    fn, c->dev);
    }
    pthread_mutex_lock(&g);
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

/* self_unmatched is NCCL's check of a rank's Sends to itself against its Recvs
 * from itself: ncclLaunchPrepare schedules a group's point-to-point tasks
 * (enqueue.cc, scheduleP2pTasksToPlan, 2.14 to 2.30.7), pairing in each round
 * the head of a peer's send queue with the head of its receive queue, and for
 * the rank itself refuses a half left without its other one: "Trying to send
 * to self without a matching recv", or "Trying to recv to self without a
 * matching send", ncclInvalidUsage. That runs at ncclGroupEnd, after the
 * group's connections are made, before anything is launched; a call outside a
 * group is a group of its own (ncclEnqueueCheck ends it with
 * ncclGroupEndInternal), so a lone Send or Recv to itself is refused at the
 * call, on a non-blocking communicator by the launch that follows it. The
 * failed group is then cleaned up (group.cc, groupCleanup): nothing of it
 * runs, and every non-blocking communicator of its tasks keeps the error. */
static ncclResult_t self_unmatched(task* list) {
    for (task* t = list; t; t = t->next) {
        if ((t->kind != kSend && t->kind != kRecv) || t->peer != t->c->rank) continue;
        task* u = list;
        while (u != t && !(u->c == t->c && (u->kind == kSend || u->kind == kRecv) && u->peer == u->c->rank)) u = u->next;
        if (u != t) continue; /* this communicator was counted */
        long sends = 0, recvs = 0;
        for (; u; u = u->next) {
            if (u->c != t->c || u->peer != t->c->rank) continue;
            if (u->kind == kSend) sends++;
            else if (u->kind == kRecv) recvs++;
        }
        if (sends == recvs) continue;
        /* The text first: a poll that sees the error reads it next. */
        ncclResult_t r = sends > recvs ? fail(ncclInvalidUsage, "Trying to send to self without a matching recv")
                                       : fail(ncclInvalidUsage, "Trying to recv to self without a matching send");
        pthread_mutex_lock(&g);
        for (task* v = list; v; v = v->next)
            if (!v->c->blocking) set_sticky(v->c, ncclInvalidUsage);
        pthread_cond_broadcast(&gc);
        pthread_mutex_unlock(&g);
        return r;
    }
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
static ncclResult_t launch_tasks(task* list, const char* fn);

/* launch is a blocking launch as NCCL's (group.cc, 2.28.3): the calling
 * thread's device is saved, each member's made current in turn, and the saved
 * one set back with cudaSetDevice. On a thread that never chose a device the
 * saved one is 0, and setting it creates device 0's context (the fake CUDA
 * runtime counts it, as CUDA >= 12 makes it). */
static ncclResult_t launch(task* list, const char* fn) {
    int saved = 0;
    cudaGetDevice(&saved);
    for (task* t = list; t; t = t->next) cudaSetDevice(t->c->dev);
    ncclResult_t r = launch_tasks(list, fn);
    cudaSetDevice(saved);
    return r;
}

static ncclResult_t launch_tasks(task* list, const char* fn) {
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
    if (!r) r = self_unmatched(list);
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
        else if (i >= n) c->discarded = 1;
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
    if (d && atol(d) > 0) sleep_us(atol(d));
    pthread_mutex_lock(&g);
    int stop = 0;
    for (int i = 0; i < b->n; i++) stop |= b->members[i]->aborted;
    pthread_mutex_unlock(&g);
    ncclResult_t r = ncclSuccess;
    if (b->list && !stop) {
        /* NCCL's job thread makes each member's device current and sets
         * nothing back (group.cc, groupLaunchNonBlocking) */
        for (task* t = b->list; t; t = t->next) cudaSetDevice(t->c->dev);
        r = launch_tasks(b->list, b->fn);
    } else if (b->list)
        free_tasks(b->list);
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
    gjob* j = job_start(b->members, n + ninits);
    if (j && n > 0) j->launcher = (long)syscall(SYS_gettid); /* a launch job (see polls_elsewhere) */
    pthread_t th;
    pthread_create(&th, NULL, launch_later, b); /* it waits for g before it sets any result */
    if (j)
        job_thread(j, th); /* joined by the poll that completes the job, as NCCL's group job thread */
    else
        pthread_detach(th);
    pthread_mutex_unlock(&g);
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
    debug_coll(fn, c, send, recv, count, type, op, root, stream);
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
