/* fakenccl: ncclGroupSimulateEnd, properties, suspend, parameters. Part of fakenccl.c, which includes it: not compiled alone. */

/* ---- ncclGroupSimulateEnd (2.22): the group is planned, never launched; its
 * estimate is 5 us per operation plus its bytes at 20 GB/s ---- */
#if HAS_228
API ncclResult_t ncclGroupSimulateEnd(void* sim) {
    if (group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd: not in a group call.");
    if (--group_depth > 0) return ncclSuccess;
    group_check_freed("ncclGroupSimulateEnd");
    task* list = group_head;
    group_head = NULL;
    group_tail = NULL;
    ncclResult_t err = group_error;
    group_error = ncclSuccess;
    int ninits = group_ninits, nm = group_nmembers;
    group_ninits = 0;
    group_nmembers = 0;
    group_blocking = -1;
    if (err) { /* groupCleanup, as ncclGroupEnd's */
        free_tasks(list);
        discard_group(group_members, nm, group_inits, ninits, err);
        return fail(err, "ncclGroupSimulateEnd: a call inside the group failed");
    }
    size_t size = 0;
    unsigned magic = 0;
    if (sim) {
        memcpy(&size, sim, 8);
        if (size >= 12) memcpy(&magic, (char*)sim + 8, 4);
        if (magic != 0x74685283) {
            free_tasks(list);
            discard_group(group_members, nm, group_inits, ninits, ncclInvalidArgument);
            return fail(ncclInvalidArgument, "ncclSimInfo_t argument not initialized via NCCL_SIM_INFO_INITIALIZER");
        }
    }
    /* NCCL plans the group, which sets its Send/Recv connections up: the
     * directions it asked for are connected from now on (see p2p_stale). */
    pthread_mutex_lock(&g);
    p2p_connected(list);
    pthread_mutex_unlock(&g);
    float us = 0;
    for (task* t = list; t; t = t->next) {
        size_t in = in_bytes(t), out = out_bytes(t);
        us += 5.0f + (float)(in > out ? in : out) / 20000.0f;
    }
    if (sim && size >= 20) memcpy((char*)sim + 16, &us, 4);
    free_tasks(list);
    return ncclSuccess;
}
#endif

/* ---- ncclCommQueryProperties (2.29.2), ncclCommSuspend/Resume/MemStats (2.29.7) ----
 * A communicator owns 1 MiB of memory that stays and 4 MiB that
 * ncclCommSuspend(NCCL_SUSPEND_MEM) releases until ncclCommResume; a suspended
 * communicator refuses operations; suspending twice, or resuming one not
 * suspended, is ncclInvalidUsage. */
#if HAS_230
#define FAKE_PERSIST_BYTES (1u << 20)
#define FAKE_SCRATCH_BYTES (4u << 20)

API ncclResult_t ncclCommQueryProperties(comm* c, void* props) {
    CALL(c, "ncclCommQueryProperties");
    const char* fn = "ncclCommQueryProperties";
    ncclResult_t r = live(c, fn);
    if (r || (r = ready_err(c))) return r;
    if (!props) return fail(ncclInvalidArgument, "%s: props is NULL", fn);
    char* p = props;
    size_t size;
    unsigned magic, version;
    memcpy(&size, p, 8);
    memcpy(&magic, p + 8, 4);
    memcpy(&version, p + 12, 4);
    if (magic != 0xcafebeef)
        return fail(ncclInvalidUsage, "Cannot get communicator properties: ncclCommProperties_t argument must be initialized via "
                                      "NCCL_COMM_PROPERTIES_INITIALIZER");
    if (version < 22902 || version > VERSION_CODE) return fail(ncclInvalidArgument, "%s: unknown ncclCommProperties_t version %u", fn, version);
    size_t need = version > 22903 ? 56 : 40;
    if (size < need) return fail(ncclInvalidArgument, "%s: ncclCommProperties_t of version %u has %zu bytes, not %zu", fn, version, size, need);
    int32_t ints[4] = {c->rank, c->nranks, c->dev, c->dev};
    memcpy(p + 16, ints, sizeof ints);
    p[32] = 1; /* deviceApiSupport */
    p[33] = 0; /* multimemSupport: no NVLS in the fake */
    int32_t none = 0, teams = 1;
    memcpy(p + 36, &none, 4); /* ginType */
    if (version > 22903) {
        memcpy(p + 40, &teams, 4); /* nLsaTeams */
        p[44] = 1;                 /* hostRmaSupport */
        memcpy(p + 48, &none, 4);  /* railedGinType */
    }
    return ncclSuccess;
}

API ncclResult_t ncclCommSuspend(comm* c, int flags) {
    CALL(c, "ncclCommSuspend");
    ncclResult_t r = live(c, "ncclCommSuspend");
    if (r || (r = ready_err(c))) return r;
    if (!(flags & 1)) return ncclSuccess; /* NCCL_SUSPEND_MEM is the only thing to suspend */
    pthread_mutex_lock(&g);
    int already = c->suspended;
    c->suspended = 1;
    pthread_mutex_unlock(&g);
    if (already) return fail(ncclInvalidUsage, "ncclCommSuspend: communicator memory is already suspended");
    return ncclSuccess;
}

API ncclResult_t ncclCommResume(comm* c) {
    CALL(c, "ncclCommResume");
    ncclResult_t r = live(c, "ncclCommResume");
    if (r || (r = ready_err(c))) return r;
    pthread_mutex_lock(&g);
    int was = c->suspended;
    c->suspended = 0;
    pthread_mutex_unlock(&g);
    if (!was) return fail(ncclInvalidUsage, "ncclCommResume: communicator is not suspended");
    return ncclSuccess;
}

API ncclResult_t ncclCommMemStats(comm* c, int stat, uint64_t* value) {
    CALL(c, "ncclCommMemStats");
    ncclResult_t r = live(c, "ncclCommMemStats");
    if (r || (r = ready_err(c))) return r;
    if (!value) return ncclInvalidArgument;
    uint64_t scratch = c->suspended ? 0 : FAKE_SCRATCH_BYTES;
    switch (stat) {
    case 0: *value = scratch; return ncclSuccess;
    case 1: *value = (uint64_t)c->suspended; return ncclSuccess;
    case 2: *value = FAKE_PERSIST_BYTES; return ncclSuccess;
    case 3: *value = FAKE_PERSIST_BYTES + scratch; return ncclSuccess;
    }
    return fail(ncclInvalidArgument, "ncclCommMemStats: unknown stat %d", stat);
}
#endif

/* ---- parameters (2.30.4): the registry of 2.30.7 as a program sees it
 * before creating a communicator. Only parameters defined with
 * DEFINE_NCCL_PARAM are registered (debug.cc): the six published ones, and
 * NCCL_WARN_ENABLE_DEBUG_INFO, listed with NCCL_PARAM_DUMP_ALL=true. The
 * NCCL_PARAM ones (NCCL_BUFFSIZE, NCCL_NVLS_ENABLE, ...) are not in it: Bind
 * and GetParameter refuse them. Values are rendered as NCCL's parsers render
 * them: integers in decimal, booleans TRUE/FALSE, an enum by its option name
 * ("<unknown>" for NCCL_DEBUG's unnamed default), a bit set as the option
 * that equals it or its single-bit options joined by commas, "NONE" when
 * empty. Read from the environment at each call (NCCL reads once). 2.30.4 and
 * 2.30.7 spell the handle type differently (ncclParamHandle_t* vs a pointer
 * typedef); both pass one pointer, as here. ---- */
#if HAS_230
enum { P_I8, P_I16, P_I32, P_I64, P_U8, P_U16, P_U32, P_U64, P_BOOL, P_CSTR, P_RAW };
typedef struct opt {
    const char* name;
    uint64_t value;
} opt;
static const opt debug_levels[] = {{"VERSION", 1}, {"WARN", 2}, {"INFO", 3}, {"ABORT", 4}, {"TRACE", 5}, {NULL, 0}};
static const opt subsystems[] = {{"INIT", 0x1}, {"COLL", 0x2}, {"P2P", 0x4}, {"SHM", 0x8}, {"NET", 0x10}, {"GRAPH", 0x20},
                                 {"TUNING", 0x40}, {"ENV", 0x80}, {"ALLOC", 0x100}, {"ALLOC_HOST", 0x20000}, {"CALL", 0x200},
                                 {"PROXY", 0x400}, {"NVLS", 0x800}, {"BOOTSTRAP", 0x1000}, {"REG", 0x2000}, {"PROFILE", 0x4000},
                                 {"RAS", 0x8000}, {"DESTROY", 0x10000}, {"ALL", ~0ull}, {NULL, 0}};
static const opt stamp_levels[] = {{"VERSION", 1u << 1}, {"WARN", 1u << 2}, {"INFO", 1u << 3}, {"ABORT", 1u << 4},
                                   {"TRACE", 1u << 5}, {"ALL", 0x3e}, {NULL, 0}};
enum { R_PLAIN, R_ONEOF, R_BITSET };
typedef struct param {
    const char* key;
    int type;
    const char* dflt; /* NULL: a null string */
    int render;
    const opt* opts;
    int published;
} param;
static param params[] = {
    {"NCCL_DEBUG", P_RAW, NULL, R_ONEOF, debug_levels, 1},
    {"NCCL_DEBUG_SUBSYS", P_U64, "INIT,BOOTSTRAP,ENV", R_BITSET, subsystems, 1},
    {"NCCL_WARN_ENABLE_DEBUG_INFO", P_BOOL, "FALSE", R_PLAIN, NULL, 0},
    {"NCCL_DEBUG_TIMESTAMP_LEVELS", P_U32, "WARN", R_BITSET, stamp_levels, 1},
    {"NCCL_DEBUG_TIMESTAMP_FORMAT", P_CSTR, "[%F %T] ", R_PLAIN, NULL, 1},
    {"NCCL_DEBUG_FILE", P_CSTR, NULL, R_PLAIN, NULL, 1},
    {"NCCL_SET_THREAD_NAME", P_BOOL, "FALSE", R_PLAIN, NULL, 1},
};
#define NPARAMS ((int)(sizeof params / sizeof params[0]))

static const char* param_value(const param* p) {
    const char* v = getenv(p->key);
    return v && *v ? v : p->dflt;
}

/* bits parses a bit set ("^" inverts, names case-insensitive); an unknown
 * name makes the default stand. */
static uint64_t bits(const param* p) {
    const char* v = param_value(p);
    for (int pass = 0; pass < 2; pass++, v = p->dflt) {
        int invert = *v == '^';
        uint64_t r = invert ? ~0ull : 0;
        int ok = 1;
        for (const char* t = v + invert; *t && ok;) {
            size_t n = strcspn(t, ",");
            ok = 0;
            for (const opt* o = p->opts; o->name; o++)
                if (strlen(o->name) == n && strncasecmp(o->name, t, n) == 0) {
                    r = invert ? r & ~o->value : r | o->value;
                    ok = 1;
                }
            t += n + (t[n] == ',');
        }
        if (ok) return r;
    }
    return 0;
}

/* render writes p's value as NCCL's toString does. */
static void render(const param* p, char* buf, size_t size) {
    const char* v = param_value(p);
    if (p->render == R_ONEOF) {
        const char* name = "<unknown>";
        for (const opt* o = p->opts; v && o->name; o++)
            if (strcasecmp(o->name, v) == 0) name = o->name;
        snprintf(buf, size, "%s", name);
    } else if (p->render == R_BITSET) {
        uint64_t b = bits(p);
        if (p->type == P_U32) b &= 0xffffffffu;
        buf[0] = 0;
        for (const opt* o = p->opts; o->name; o++)
            if ((p->type == P_U32 ? (o->value & 0xffffffffu) : o->value) == b) {
                snprintf(buf, size, "%s", o->name);
                return;
            }
        for (const opt* o = p->opts; o->name; o++)
            if (o->value && !(o->value & (o->value - 1)) && (b & o->value) == o->value) {
                size_t k = strlen(buf);
                snprintf(buf + k, size - k, "%s%s", k ? "," : "", o->name);
                b &= ~o->value;
            }
        if (!buf[0]) snprintf(buf, size, "NONE");
    } else if (p->type == P_BOOL) {
        snprintf(buf, size, "%s", v && (strcasecmp(v, "1") == 0 || strcasecmp(v, "T") == 0 || strcasecmp(v, "TRUE") == 0) ? "TRUE" : "FALSE");
    } else {
        snprintf(buf, size, "%s", v ? v : "");
    }
}

API ncclResult_t ncclParamBind(param** out, const char* key) {
    if (!out || !key) return ncclInvalidArgument;
    for (int i = 0; i < NPARAMS; i++)
        if (strcmp(params[i].key, key) == 0) {
            *out = &params[i];
            return ncclSuccess;
        }
    return fail(ncclInvalidArgument, "PARAM: key \"%s\" not found in registry", key);
}

static ncclResult_t param_get(const param* h, int type, void* out, size_t size) {
    if (!h || !out) return ncclInvalidArgument;
    if (h < params || h >= params + NPARAMS) return fail(ncclInvalidArgument, "PARAM: invalid handle %p", (const void*)h);
    if (h->type != type) return fail(ncclInvalidArgument, "PARAM: type mismatch for key \"%s\"", h->key);
    if (h->render == R_BITSET) {
        uint64_t x = bits(h);
        memcpy(out, &x, size); /* little-endian: the low bytes */
        return ncclSuccess;
    }
    const char* v = param_value(h);
    if (type <= P_I64) {
        int64_t x = strtoll(v, NULL, 10);
        memcpy(out, &x, size);
    } else {
        uint64_t x = strtoull(v, NULL, 10);
        memcpy(out, &x, size);
    }
    return ncclSuccess;
}

API ncclResult_t ncclParamGetI8(const param* h, int8_t* out) { return param_get(h, P_I8, out, 1); }
API ncclResult_t ncclParamGetI16(const param* h, int16_t* out) { return param_get(h, P_I16, out, 2); }
API ncclResult_t ncclParamGetI32(const param* h, int32_t* out) { return param_get(h, P_I32, out, 4); }
API ncclResult_t ncclParamGetI64(const param* h, int64_t* out) { return param_get(h, P_I64, out, 8); }
API ncclResult_t ncclParamGetU8(const param* h, uint8_t* out) { return param_get(h, P_U8, out, 1); }
API ncclResult_t ncclParamGetU16(const param* h, uint16_t* out) { return param_get(h, P_U16, out, 2); }
API ncclResult_t ncclParamGetU32(const param* h, uint32_t* out) { return param_get(h, P_U32, out, 4); }
API ncclResult_t ncclParamGetU64(const param* h, uint64_t* out) { return param_get(h, P_U64, out, 8); }

static __thread char param_buf[512]; /* valid until the thread's next call, as NCCL's */

API ncclResult_t ncclParamGetStr(const param* h, const char** out) {
    if (!h || !out) return ncclInvalidArgument;
    if (h < params || h >= params + NPARAMS) return fail(ncclInvalidArgument, "PARAM: invalid handle %p", (const void*)h);
    if (h->type != P_CSTR) return fail(ncclInvalidArgument, "PARAM: type mismatch for key \"%s\"", h->key);
    render(h, param_buf, sizeof param_buf);
    *out = param_buf;
    return ncclSuccess;
}

API ncclResult_t ncclParamGetParameter(const char* key, const char** value, int* len) {
    if (!key || !value || !len) return ncclInvalidArgument;
    param* h = NULL;
    ncclResult_t r = ncclParamBind(&h, key);
    if (r) return r;
    render(h, param_buf, sizeof param_buf);
    *value = param_buf;
    *len = (int)strlen(param_buf);
    return ncclSuccess;
}

static __thread const char* param_keys[NPARAMS + 1];

API ncclResult_t ncclParamGetAllParameterKeys(const char*** table, int* n) {
    if (!table || !n) return ncclInvalidArgument;
    const char* all = getenv("NCCL_PARAM_DUMP_ALL");
    int show = all && (strcasecmp(all, "true") == 0 || strcmp(all, "1") == 0), k = 0;
    for (int i = 0; i < NPARAMS; i++)
        if (params[i].published || show) param_keys[k++] = params[i].key;
    *table = param_keys;
    *n = k;
    return ncclSuccess;
}
#endif


#ifdef FAKENCCL_VCCL
static int in_symmetric_window(comm* c, const void* p, size_t bytes) {
    int ok = 0;
    pthread_mutex_lock(&g);
    for (window* w = c->windows; w && !ok; w = w->next)
        ok = (w->flags & 1) && (const char*)p >= w->base && (const char*)p + bytes <= w->base + w->size;
    pthread_mutex_unlock(&g);
    return ok;
}

static ncclResult_t alltoallv_checked(const void* send, const size_t* sc, const size_t* sd, void* recv, const size_t* rc,
                              const size_t* rd, const void* relay, size_t relaycount, int type, comm* c, void* st) {
    const char* fn = "ncclAlltoAllv";
    ncclResult_t r = live(c, fn);
    if (r) return r;
    if (c->revoked) return fail(ncclInvalidUsage, "%s : communicator was revoked", fn);
    if (c->broken) return fail(ncclInvalidUsage, "%s : %s", fn, broken_text);
    if (c->suspended) return fail(ncclInvalidUsage, "%s : communicator is suspended", fn);
    if (type < 0 || type >= NUM_TYPES) return fail(ncclInvalidArgument, "%s : invalid type %d", fn, type);
    if (!relay && relaycount) return fail(ncclInvalidArgument, "%s : relaycount %zu without a relay buffer", fn, relaycount);
    if (!sc || !sd || !rc || !rd) return fail(ncclInvalidArgument, "%s : NULL count or displacement array", fn);
    int n = c->nranks, me = c->rank, sz = type_size(type);
    size_t sendEnd = 0, recvEnd = 0;
    for (int j = 0; j < n; j++) {
        if (sc[me * n + j] && sd[me * n + j] + sc[me * n + j] > sendEnd) sendEnd = sd[me * n + j] + sc[me * n + j];
        if (rc[me * n + j] && rd[me * n + j] + rc[me * n + j] > recvEnd) recvEnd = rd[me * n + j] + rc[me * n + j];
        if (sc[j * n + me] != rc[me * n + j])
            return fail(ncclInvalidArgument, "%s : rank %d sends %zu to rank %d, which expects %zu", fn, j, sc[j * n + me], me, rc[me * n + j]);
    }
    if (!in_symmetric_window(c, send, sendEnd * sz) || !in_symmetric_window(c, recv, recvEnd * sz))
        return fail(ncclInvalidArgument, "%s : buffers not in a valid symmetric window", fn);
    if ((r = check_buf(c, fn, "sendbuff", send, sendEnd * sz)) || (r = check_buf(c, fn, "recvbuff", recv, recvEnd * sz))) return r;
    /* VCCL 2.29.2 cannot capture it: ncclLaunchRmaColl asserts and the
     * process aborts (src/rma/rma_coll.cc:177; seen on 4 x H200). */
    if (fakecuda_stream_capturing(st, c->dev) < 0) {
        fprintf(stderr, "fakenccl: rma/rma_coll.cc:177: ncclResult_t ncclLaunchRmaColl(ncclComm*, ncclKernelPlan*): "
                        "Assertion `!capturing && \"RMA Collective does not support cuda graph yet.\"' failed.\n");
        abort();
    }
    task* t = calloc(1, sizeof *t);
    *t = (task){.kind = kAlltoAllv, .type = type, .send = send, .recv = recv, .c = c, .stream = st};
    /* VCCL keeps the array pointers and reads them when the group ends: so
     * does the fake, and it fails the group if they changed in between. */
    t->a2av = malloc(4 * n * n * sizeof(size_t));
    t->a2av_user[0] = sc, t->a2av_user[1] = sd, t->a2av_user[2] = rc, t->a2av_user[3] = rd;
    t->a2av_sum = a2av_checksum(t->a2av_user, n);
    return submit(t);
}

static ncclResult_t alltoallv(const void* send, const size_t* sc, const size_t* sd, void* recv, const size_t* rc,
                              const size_t* rd, const void* relay, size_t relaycount, int type, comm* c, void* st) {
    CALL(c, "ncclAlltoAllv");
    if (group_depth > 0) group_check_freed("ncclAlltoAllv");
    ncclResult_t r = group_err(alltoallv_checked(send, sc, sd, recv, rc, rd, relay, relaycount, type, c, st));
    inside_call(r == ncclSuccess || r == ncclInProgress ? c : NULL, "ncclAlltoAllv");
    return r;
}

#if FAKENCCL_VCCL == 11
API ncclResult_t ncclAlltoAllv(const void* send, const size_t* sc, const size_t* sd, void* recv, const size_t* rc,
                               const size_t* rd, void* relay, size_t relaycount, int type, comm* c, void* st) {
    return alltoallv(send, sc, sd, recv, rc, rd, relay, relaycount, type, c, st);
}
#else
API ncclResult_t ncclAlltoAllv(const void* send, const size_t* sc, const size_t* sd, void* recv, const size_t* rc,
                               const size_t* rd, const void* relay, int type, comm* c, void* st) {
    return alltoallv(send, sc, sd, recv, rc, rd, relay, 0, type, c, st);
}
#endif
#endif
