/* fakenccl: NCCL_DEBUG's INFO line for each operation (subsystem COLL), as NCCL's ncclEnqueueCheck writes it. Part of fakenccl.c, which includes it: not compiled alone. */

/* ---- NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=COLL: one line per operation ----
 *
 * NCCL (debug.cc) reads NCCL_DEBUG once: INFO, ABORT and TRACE show INFO
 * lines. NCCL_DEBUG_SUBSYS is a comma-separated list of subsystems, or, led by
 * '^', every subsystem but those listed; unset, it is INIT,BOOTSTRAP,ENV, so
 * COLL shows only when named (or ALL). The lines go to NCCL_DEBUG_FILE, whose
 * %h is the host name, %p the pid and %% a '%', opened for writing and line
 * buffered, or else to stdout. ncclEnqueueCheck writes the line after the
 * arguments are checked and before the task is appended: a refused call has
 * none, a call of count 0 has one. The number in brackets is the calling
 * thread's current CUDA device (debug.cc asks cudaGetDevice), not the
 * communicator's. opCount is comm->opCount, which only ncclProxyStart
 * advances, for launches that posted work to NCCL's proxy thread: none
 * within one node over NVLink, where NCCL 2.28.3 prints 0 for every
 * operation. The fake has no proxy: 0. */

static pthread_once_t debug_once = PTHREAD_ONCE_INIT;
static FILE* debug_file; /* NULL: no COLL lines */
static char debug_host[256];

/* debug_names_coll says whether the NCCL_DEBUG_SUBSYS list s names COLL (or ALL). */
static int debug_names_coll(const char* s) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    char* save = NULL;
    for (char* t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
        if (strcasecmp(t, "COLL") == 0 || strcasecmp(t, "ALL") == 0) return 1;
    return 0;
}

static void debug_init(void) {
    const char* level = getenv("NCCL_DEBUG");
    if (!level || !(strcasecmp(level, "INFO") == 0 || strcasecmp(level, "ABORT") == 0 || strcasecmp(level, "TRACE") == 0))
        return;
    const char* sub = getenv("NCCL_DEBUG_SUBSYS");
    int coll = 0;
    if (sub && sub[0] == '^') coll = !debug_names_coll(sub + 1);
    else if (sub) coll = debug_names_coll(sub);
    if (!coll) return;
    gethostname(debug_host, sizeof debug_host - 1);
    char* dot = strchr(debug_host, '.');
    if (dot) *dot = 0;
    debug_file = stdout;
    const char* name = getenv("NCCL_DEBUG_FILE");
    if (!name) return;
    char path[PATH_MAX + 1];
    size_t n = 0;
    for (const char* p = name; *p && n < PATH_MAX; p++) {
        if (*p != '%') {
            path[n++] = *p;
            continue;
        }
        p++;
        if (*p == '%') path[n++] = '%';
        else if (*p == 'h') n += snprintf(path + n, PATH_MAX + 1 - n, "%s", debug_host);
        else if (*p == 'p') n += snprintf(path + n, PATH_MAX + 1 - n, "%d", (int)getpid());
        else if (*p) {
            path[n++] = '%';
            if (n < PATH_MAX) path[n++] = *p;
        } else
            break;
        if (n > PATH_MAX) n = PATH_MAX;
    }
    path[n] = 0;
    FILE* f = path[0] ? fopen(path, "w") : NULL;
    if (f) {
        setlinebuf(f);
        debug_file = f;
    }
}

/* debug_coll writes an operation's INFO line (opName as NCCL's: AllReduce,
 * Send, ...), where NCCL_DEBUG asks for it. */
static void debug_coll(const char* op_name, comm* c, const void* send, const void* recv, size_t count, int type, int op,
                       int root, void* stream) {
    pthread_once(&debug_once, debug_init);
    if (!debug_file) return;
    fprintf(debug_file,
            "%s:%d:%d [%d] NCCL INFO %s: opCount %lx sendbuff %p recvbuff %p count %zu datatype %d op %d root %d comm %p "
            "[nranks=%d] stream %p\n",
            debug_host, (int)getpid(), (int)syscall(SYS_gettid), fakecuda_current_device(), op_name, 0ul, send, recv, count,
            type, op, root, (void*)c, c->nranks, stream);
}
