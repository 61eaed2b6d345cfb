/* fakenccl: cliques and communicators, groups, calls inside the library, non-blocking jobs. Part of fakenccl.c, which includes it: not compiled alone. */

/* sleep_us sleeps us microseconds in full: the Go runtime's signals
 * (preemption) end a plain usleep early, which made the tests' delay knobs
 * flaky under load. */
static void sleep_us(long us) {
    struct timespec left = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
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
    /* Each rank's node (see this_node), and the ranks of other processes
     * whose connection to this hub closed (died, aborted, destroyed): across
     * nodes NCCL reaches them through its network transport, whose closed
     * socket fails the work that needs them (see lost_peer). */
    uint64_t node[MAXR];
    uint64_t lost;
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
    uint64_t node;  /* the node this rank is on (this_node; a proxy: its remote rank's) */
    uint64_t hub_node; /* a remote rank: the node of its hub's process */
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
    int hub_gone;   /* a remote rank lost its hub, on another node: ncclRemoteError kept, its requests fail at once */
    int told_lost;  /* at the hub, a proxy: its remote rank was answered ncclRemoteError for a lost peer (lost_fail) */
    struct rput* rputs; /* at the hub, a proxy: one-sided puts for its remote rank, until its ncclWaitSignal takes them */
    long shrink_seq;
    long sig_recv[MAXR], sig_taken[MAXR]; /* one-sided signals received from each peer; those waited for */
    int blocking;
    int discarded;  /* a blocking communicator whose init a failed group destroyed unrun (NCCL's groupCleanup) */
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
 * shrink's abort flag, its connection given up, or its hub of another node
 * lost. Needs no peer: a dead hub is never waited for past it. */
static int rstopped(comm* c) {
    return c && (__atomic_load_n(&c->aborted, __ATOMIC_RELAXED) || __atomic_load_n(&c->revoked, __ATOMIC_RELAXED) ||
                 __atomic_load_n(&c->halted, __ATOMIC_RELAXED) || __atomic_load_n(&c->broken, __ATOMIC_RELAXED) ||
                 __atomic_load_n(&c->hub_gone, __ATOMIC_RELAXED));
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

/* lost_peer is the lowest rank of need (ranks of c's clique) whose connection
 * to the hub closed while on another node than c, or -1 (g held). NCCL's
 * network transport fails the work that needs such a peer with
 * ncclRemoteError within milliseconds ("Connection closed by remote peer");
 * SHM and P2P within a node see nothing, so a wait on a peer of c's own node
 * goes on until aborted or revoked. */
static int lost_peer(comm* c, uint64_t need) {
    clique* q = c->c;
    if (!q) return -1;
    for (uint64_t m = q->lost & need; m; m &= m - 1) {
        int r = __builtin_ctzll(m);
        if (q->node[r] != q->node[c->rank]) return r;
    }
    return -1;
}

/* deadline_in is now plus ms on CLOCK_REALTIME, for pthread_cond_timedwait. */
static struct timespec deadline_in(long ms) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += ms / 1000;
    dl.tv_nsec += ms % 1000 * 1000000;
    if (dl.tv_nsec >= 1000000000) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000;
    }
    return dl;
}

static void tell_first(comm* c);

/* lost_fail keeps ncclRemoteError on c, whose work needed the lost peer
 * (g held); why says so (a proxy's remote rank gets it in its reply, and
 * keeps the error there). */
static ncclResult_t lost_fail(comm* c, int peer, char* why, size_t n) {
    snprintf(why, n,
             "socketProgress: Connection closed by remote peer (fakenccl: rank %d, on another node, closed its "
             "connection while rank %d needed it)",
             peer, c->rank);
    set_sticky(c, ncclRemoteError);
    if (c->proxy) {
        snprintf(my_error, sizeof my_error, "%s", why); /* the reply's text; not this process's last error */
        c->told_lost = 1;
    } else {
        fail(ncclRemoteError, "%s", why);
        tell_first(c);
    }
    return ncclRemoteError;
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
    if (c->discarded && strcmp(fn, "ncclCommAbort") != 0 && strcmp(fn, "ncclCommDestroy") != 0) {
        /* NCCL's groupCleanup destroys a failed group's init jobs unrun
         * (group.cc): the blocking communicator stays a calloc'ed shell
         * whose async error reads ncclSuccess, so NCCL takes the call on
         * it; only ncclCommAbort and ncclCommDestroy are meant for it. */
        fprintf(stderr, "fakenccl: %s: communicator %p whose init a failed group discarded (NCCL never initialized it)\n", fn, (void*)c);
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
    if (us > 0) sleep_us(us);
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
    if (us > 0) sleep_us(us);
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
    long launcher;  /* the thread whose ncclGroupEnd (or operation) started a launch job; 0 for other jobs */
    pthread_t th;   /* a launch job's thread (has_th), joined by the first completion as NCCL's is */
    int has_th, joined;
} gjob;

/* polls_elsewhere counts the polls (ncclCommGetAsyncError) of a launch job
 * made from another thread than the one that started it. NCCL takes them from
 * any thread; the count is a probe for gonccl, which keeps a non-blocking
 * launch and its wait on one thread (a goroutine that moves between threads
 * while it polls cost up to 35-50 us per launch on H100 VMs). */
static long polls_elsewhere, launch_polls;
API long fakenccl_polls_elsewhere(void) { return __atomic_load_n(&polls_elsewhere, __ATOMIC_RELAXED); }
/* launch_polls counts every poll of a launch job, from any thread. */
API long fakenccl_launch_polls(void) { return __atomic_load_n(&launch_polls, __ATOMIC_RELAXED); }

static long complete_window_us = 200;
API void fakenccl_set_complete_window_us(long us) { __atomic_store_n(&complete_window_us, us, __ATOMIC_RELAXED); }

/* job_start makes a job for the non-blocking communicators cs (g held): each
 * that has none is linked to it. It returns the job, or NULL when none was
 * linked. */
static gjob* job_start(comm** cs, int n) {
    gjob* j = calloc(1, sizeof *j);
    for (int i = 0; i < n; i++)
        if (!cs[i]->blocking && !cs[i]->job) {
            cs[i]->job = j;
            j->refs++;
        }
    if (!j->refs) {
        free(j);
        return NULL;
    }
    return j;
}
static void job_start1(comm* c) { job_start(&c, 1); }

/* job_thread gives a launch job its thread (g held, so that the thread cannot
 * finish, nor a poll complete the job, before the job knows it). */
static void job_thread(gjob* j, pthread_t th) {
    j->th = th;
    j->has_th = 1;
}

/* job_free frees a job no member links any more (g held); a thread no
 * completion joined is detached. */
static void job_free(gjob* j) {
    if (j->has_th && !j->joined) pthread_detach(j->th);
    free(j);
}

/* job_unlink drops c's link (g held): ncclGroupJobAbort's part in an abort. */
static void job_unlink(comm* c) {
    gjob* j = c->job;
    if (!j) return;
    c->job = NULL;
    if (--j->refs == 0 && !j->completing) job_free(j);
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
    int join = j->has_th && !j->joined;
    pthread_t th = j->th;
    if (join) j->joined = 1;
    pthread_mutex_unlock(&g);
    if (join) pthread_join(th, NULL); /* ncclGroupJobComplete joins the job's thread (ncclAsyncJobComplete) */
    if (twice)
        die("terminate called without an active exception (two threads completed one non-blocking group job): "
            "ncclCommGetAsyncError (or a call running ncclCommEnsureReady) on rank %d (communicator %p) while another "
            "thread completed the same job on a communicator of its group; poll a group's communicators from one "
            "thread", c->rank, (void*)c);
    long us = __atomic_load_n(&complete_window_us, __ATOMIC_RELAXED);
    if (us > 0) sleep_us(us);
    pthread_mutex_lock(&g);
    j->completing--;
    if (c->job == j) {
        c->job = NULL;
        j->refs--;
    }
    if (!j->refs && !j->completing) job_free(j);
    pthread_mutex_unlock(&g);
}

static const char* cfg_names[] = {"blocking", "cgaClusterSize", "minCTAs", "maxCTAs", "splitShare", "trafficClass",
                                  "collnetEnable", "CTAPolicy", "shrinkShare", "nvlsCTAs", "nChannelsPerNetPeer",
                                  "nvlinkCentricSched", NULL};
static const int cfg_offsets[] = {16, 20, 24, 28, 40, 44, 56, 60, 64, 68, 72, 76};

/* this_node names the node of this process as NCCL's host hash does: its
 * NCCL_HOSTID, or else its host name (NCCL adds the boot id), hashed. Ranks on
 * one node reach each other through SHM or P2P, which see nothing of a peer's
 * death; ranks on different nodes through the network transport. */
static uint64_t this_node(void) {
    char name[256] = "";
    const char* id = getenv("NCCL_HOSTID");
    if (id && *id) snprintf(name, sizeof name, "%s", id);
    else gethostname(name, sizeof name - 1);
    uint64_t h = 1469598103934665603ull;
    for (const char* p = name; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return h;
}

static comm* new_comm(int dev) {
    comm* c = calloc(1, sizeof *c);
    c->magic = COMM_MAGIC;
    c->node = c->hub_node = this_node();
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
    q->node[rank] = c->node;
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
