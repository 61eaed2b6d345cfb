/* fakenccl: element types; what the collectives compute, and how ranks meet. Part of fakenccl.c, which includes it: not compiled alone. */

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

/* abort_spin waits (g held) up to 50 ms for *count to reach n, on behalf of a
 * task whose communicator is stopped. NCCL's kernels read the abort flag only
 * after 10000 spins without progress (primitives.h, checkAbort; v2.28.3 and
 * v2.30.7), and an abort of one rank of a clique held in one process frees
 * nothing until the last of its ranks goes (init.cc, commReclaim): a kernel
 * whose peers run beside it completes after its communicator's abort. So an
 * InitAll pair whose rank 0 is aborted while a group of both ranks runs
 * finishes that group, and rank 1's Close returns at once (seen on NCCL 2.28.3
 * and 2.28.9). A kernel whose peers never come quits on the flag. */
static void abort_spin(int* count, int n) {
    struct timespec dl = deadline_in(50);
    while (*count < n && pthread_cond_timedwait(&gc, &g, &dl) != ETIMEDOUT) {
    }
}

/* run_collective meets the other ranks' tasks of the same sequence number,
 * checks that they all called the same collective, computes into a private
 * buffer once all inputs are there, and writes it out only when every rank
 * has finished reading: in-place forms stay correct. It returns
 * ncclInvalidUsage when the calls differ (nothing moved; why says how), and
 * ncclRemoteError, kept, when a rank of another node was lost before it
 * could complete (see lost_peer). */
static ncclResult_t run_collective(task* me, char* why, size_t whylen) {
    clique* q = me->c->c;
    int n = me->c->nranks, lp = -1;
    uint64_t all = all_ranks(n);
    pthread_mutex_lock(&g);
    slot* s = &q->slots[me->seq % SLOTS];
    while (s->busy && s->seq != me->seq && !stopped(me->c) && (lp = lost_peer(me->c, all)) < 0) pthread_cond_wait(&gc, &g);
    if (stopped(me->c) || (lp = lost_peer(me->c, all)) >= 0) {
        ncclResult_t r = stopped(me->c) ? ncclSuccess : lost_fail(me->c, lp, why, whylen);
        pthread_mutex_unlock(&g);
        return r;
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
    while (s->arrived < n && !stopped(me->c) && (lp = lost_peer(me->c, all)) < 0) pthread_cond_wait(&gc, &g);
    if (s->arrived < n && lp < 0) abort_spin(&s->arrived, n);
    if (s->arrived >= n && !s->checked) check_calls(s, n);
    int bad = s->bad;
    if (bad) snprintf(why, whylen, "%s", s->why);
    if (s->arrived < n) { /* the kernel quits on NCCL's abort flag, or a lost peer fails it; the task stays for the peers */
        ncclResult_t r = lp >= 0 ? lost_fail(me->c, lp, why, whylen) : ncclSuccess;
        slot_leave(s, n);
        pthread_mutex_unlock(&g);
        return r;
    }
    pthread_mutex_unlock(&g);

    size_t bytes = out_bytes(me);
    char* out = receives(me) && !bad ? malloc(bytes ? bytes : 1) : NULL;
    if (out && me->kind == kAlltoAllv) memcpy(out, me->recv, bytes);
    if (out) compute(s->task, n, me, out);

    pthread_mutex_lock(&g);
    s->computed++;
    pthread_cond_broadcast(&gc);
    while (s->computed < n && !stopped(me->c) && (lp = lost_peer(me->c, all)) < 0) pthread_cond_wait(&gc, &g);
    if (s->computed < n && lp < 0) abort_spin(&s->computed, n);
    if (s->computed < n) {
        ncclResult_t r = lp >= 0 ? lost_fail(me->c, lp, why, whylen) : ncclSuccess;
        slot_leave(s, n);
        pthread_mutex_unlock(&g);
        free(out);
        return r;
    }
    pthread_mutex_unlock(&g);
    if (out) memcpy(me->recv, out, bytes);
    free(out);
    pthread_mutex_lock(&g);
    s->left++;
    slot_leave(s, n);
    if (me->c->proxy) me->owed = 1; /* collective_delivered, once its remote rank has it */
    else /* the hub's own ranks end after the remote ranks have their results: the process may exit next
          * (a lost rank's result is never delivered) */
        while (s->busy && s->seq == me->seq && s->delivered < q->nproxies && !stopped(me->c) && !q->lost)
            pthread_cond_wait(&gc, &g);
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
    char why[480];
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
        int broken = 0, lp = -1;
        for (;;) {
            for (m = q->mail; m; m = m->next)
                if (!m->taken && m->src == t->peer && m->dst == t->c->rank && m->seq == t->seq) break;
            if (m || stopped(t->c)) break;
            if ((broken = broken_peer(t->c, 1ull << t->peer) >= 0)) break;
            if ((lp = lost_peer(t->c, 1ull << t->peer)) >= 0) break;
            pthread_cond_wait(&gc, &g);
        }
        if (!m && broken) { /* the peer's side of the connection setup failed: see p2p_stale */
            set_sticky(t->c, ncclRemoteError);
            res = broken_fail("ncclRecv", t->c->rank, t->peer);
        }
        if (!m && lp >= 0) res = lost_fail(t->c, lp, why, sizeof why);
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
            if (*pm && !(*pm)->taken && lost_peer(t->c, 1ull << t->peer) >= 0) { /* never to be taken */
                msg* m = *pm;
                *pm = m->next;
                free(m);
                res = lost_fail(t->c, t->peer, why, sizeof why);
                break;
            }
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
