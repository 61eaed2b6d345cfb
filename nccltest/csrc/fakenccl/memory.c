/* fakenccl: registration, memory, windows. Part of fakenccl.c, which includes it: not compiled alone. */

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
