/*
 * host_comm.c: the communicator of the reference plugin (included by host.c, one
 * translation unit, so everything stays static).
 *
 * The ranks of a group are devices of this process. A collective is enqueued on a stream as
 * an op with the communicator's next sequence number; when the stream's worker reaches it,
 * it meets the other ranks' workers at the rendezvous of that number. The last to arrive
 * moves the data for everyone; the others wait (at most the group's timeout, and never
 * once their communicator is aborted). Sends are eager: the sender's worker copies the
 * data into a message, so a send never waits for its receiver and group_start/group_end
 * only need to check that the brackets balance.
 */

enum { K_ALL_REDUCE, K_ALL_GATHER, K_REDUCE_SCATTER, K_ALL_TO_ALL, K_BROADCAST, K_BARRIER };
static const char *const kind_names[] = {"all_reduce", "all_gather", "reduce_scatter",
                                         "all_to_all", "broadcast", "barrier"};

typedef struct Coll { /* one collective's rendezvous */
    struct Coll *next;
    uint64_t seq;
    uint32_t kind, root, arrived, departed;
    uint64_t count;
    MrDType dtype;
    MrReduceOp op;
    int done;
    MrStatus status;
    char msg[200];
    void **in, **out;
} Coll;

typedef struct Msg { /* one eager send */
    struct Msg *next;
    uint32_t from, to;
    uint64_t seq, bytes;
    void *data;
} Msg;

typedef struct Child { /* a sub-group made by new_group */
    struct Child *next;
    uint32_t *ranks;
    size_t n;
    uint64_t occurrence;
    struct Group *group;
} Child;

typedef struct Group {
    uint32_t size;
    uint64_t timeout_ms;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    Coll *colls;
    Msg *msgs;
    Child *children;
    uint32_t refs; /* communicators on it, plus one while a parent lists it */
} Group;

struct MrComm {
    Group *g;
    MrDevice *dev;
    uint32_t rank;
    uint64_t next_seq;            /* collectives issued */
    uint64_t *sent, *received;    /* point-to-point messages issued, per peer */
    int depth;                    /* group_start nesting */
    int aborted;                  /* under g->mu */
    MrStatus error;               /* the first asynchronous error, under g->mu */
    char error_msg[240];
    uint64_t new_groups;          /* new_group calls, to match them across ranks */
};

static const uint64_t dtype_bytes[MR_DTYPE_COUNT] = {4, 2, 2, 8, 1, 1, 4, 4, 8, 8, 1, 1};

static Group *group_new(uint32_t size, uint64_t timeout_ms) {
    Group *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->size = size;
    g->timeout_ms = timeout_ms;
    (void)pthread_mutex_init(&g->mu, NULL);
    (void)pthread_cond_init(&g->cv, NULL);
    return g;
}

static void group_release(Group *g) { /* called with g->mu NOT held */
    Child *c;
    uint32_t left;
    (void)pthread_mutex_lock(&g->mu);
    left = --g->refs;
    (void)pthread_mutex_unlock(&g->mu);
    if (left) return;
    while ((c = g->children) != NULL) {
        g->children = c->next;
        group_release(c->group);
        free(c->ranks);
        free(c);
    }
    while (g->colls) {
        Coll *next = g->colls->next;
        free(g->colls->in);
        free(g->colls);
        g->colls = next;
    }
    while (g->msgs) {
        Msg *next = g->msgs->next;
        free(g->msgs->data);
        free(g->msgs);
        g->msgs = next;
    }
    free(g);
}

static MrComm *comm_new(Group *g, MrDevice *dev, uint32_t rank) {
    MrComm *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->sent = calloc(g->size, sizeof *c->sent);
    c->received = calloc(g->size, sizeof *c->received);
    if (!c->sent || !c->received) {
        free(c->sent);
        free(c->received);
        free(c);
        return NULL;
    }
    c->g = g;
    c->dev = dev;
    c->rank = rank;
    (void)pthread_mutex_lock(&g->mu);
    g->refs++;
    (void)pthread_mutex_unlock(&g->mu);
    return c;
}

/* An op of `c` failed (g->mu held): the communicator's first asynchronous error, and
 * the stream's next synchronize reports it. */
static void op_failed(MrComm *c, const Op *op, MrStatus st, const char *msg) {
    stream_fail(op->stream, st, msg);
    if (c->error != MR_OK) return;
    c->error = st;
    (void)snprintf(c->error_msg, sizeof c->error_msg, "%s", msg);
}

/* Waits on the group until *flag is set; MR_ERR_TIMEOUT / MR_ERR_ABORTED otherwise. */
static MrStatus wait_flag(MrComm *c, const int *flag) {
    struct timespec deadline;
    Group *g = c->g;
    (void)clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += (time_t)(g->timeout_ms / 1000);
    deadline.tv_nsec += (long)(g->timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    while (!*flag) {
        if (c->aborted) return MR_ERR_ABORTED;
        if (pthread_cond_timedwait(&g->cv, &g->mu, &deadline) == ETIMEDOUT && !*flag)
            return c->aborted ? MR_ERR_ABORTED : MR_ERR_TIMEOUT;
    }
    return MR_OK;
}

/* f16 and bf16 as the host's reference arithmetic computes them: widened to float,
 * combined, rounded back to nearest-even after every step (NaN stays NaN). */
static float f16_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    float f;
    if (exp == 0) {
        f = ldexpf((float)man, -24);
        return sign ? -f : f;
    }
    bits = exp == 0x1f ? (sign | 0x7f800000u | (man << 13))
                       : (sign | ((exp + 112) << 23) | (man << 13));
    memcpy(&f, &bits, sizeof f);
    return f;
}

static uint16_t float_to_f16(float f) {
    uint32_t x, sign, exp, man, h, rem, shift, mid;
    int e;
    memcpy(&x, &f, sizeof x);
    sign = (x >> 16) & 0x8000;
    exp = (x >> 23) & 0xff;
    man = x & 0x7fffff;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 | (man >> 13) : 0));
    e = (int)exp - 127 + 15;
    if (e >= 0x1f) return (uint16_t)(sign | 0x7c00);
    if (e <= 0) {
        if (e < -10) return (uint16_t)sign;
        man |= 0x800000;
        shift = (uint32_t)(14 - e);
        h = man >> shift;
        rem = man & ((1u << shift) - 1);
        mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    h = ((uint32_t)e << 10) | (man >> 13);
    rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++; /* a carry rounds into the exponent */
    return (uint16_t)(sign | h);
}

static float bf16_to_float(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static uint16_t float_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

#define REDUCE_HALF(TO, FROM)                                                                \
    do {                                                                                     \
        uint16_t *a = acc;                                                                   \
        const uint16_t *b = x;                                                               \
        for (i = 0; i < n; i++) {                                                            \
            float p = TO(a[i]), q = TO(b[i]), r;                                             \
            switch (op) {                                                                    \
            case MR_OP_PROD: r = p * q; break;                                               \
            case MR_OP_MAX: r = fmaxf(p, q); break;                                          \
            case MR_OP_MIN: r = fminf(p, q); break;                                          \
            default: r = p + q; break;                                                       \
            }                                                                                \
            a[i] = FROM(r);                                                                  \
        }                                                                                    \
    } while (0)

#define DIVIDE_HALF(TO, FROM)                                                                \
    do {                                                                                     \
        uint16_t *a = acc;                                                                   \
        for (i = 0; i < n; i++) a[i] = FROM(TO(a[i]) / (float)ranks);                        \
    } while (0)

/* acc[i] = acc[i] OP x[i]; AVG sums here and divides in finish(). */
#define REDUCE(T, MAXF, MINF)                                                                \
    do {                                                                                     \
        T *a = acc;                                                                          \
        const T *b = x;                                                                      \
        for (i = 0; i < n; i++) {                                                            \
            switch (op) {                                                                    \
            case MR_OP_PROD: a[i] = (T)(a[i] * b[i]); break;                                 \
            case MR_OP_MAX: a[i] = MAXF(a[i], b[i]); break;                                  \
            case MR_OP_MIN: a[i] = MINF(a[i], b[i]); break;                                  \
            default: a[i] = (T)(a[i] + b[i]); break;                                         \
            }                                                                                \
        }                                                                                    \
    } while (0)
#define IMAX(a, b) ((a) > (b) ? (a) : (b))
#define IMIN(a, b) ((a) < (b) ? (a) : (b))

static void reduce(void *acc, const void *x, uint64_t n, MrDType t, MrReduceOp op) {
    uint64_t i;
    switch (t) {
    case MR_DTYPE_F32: REDUCE(float, fmaxf, fminf); break;
    case MR_DTYPE_F64: REDUCE(double, fmax, fmin); break;
    case MR_DTYPE_I8: REDUCE(int8_t, IMAX, IMIN); break;
    case MR_DTYPE_U8: REDUCE(uint8_t, IMAX, IMIN); break;
    case MR_DTYPE_I32: REDUCE(int32_t, IMAX, IMIN); break;
    case MR_DTYPE_U32: REDUCE(uint32_t, IMAX, IMIN); break;
    case MR_DTYPE_I64: REDUCE(int64_t, IMAX, IMIN); break;
    case MR_DTYPE_F16: REDUCE_HALF(f16_to_float, float_to_f16); break;
    case MR_DTYPE_BF16: REDUCE_HALF(bf16_to_float, float_to_bf16); break;
    default: REDUCE(uint64_t, IMAX, IMIN); break;
    }
}

#define DIVIDE(T)                                                                            \
    do {                                                                                     \
        T *a = acc;                                                                          \
        for (i = 0; i < n; i++) a[i] = (T)(a[i] / (T)ranks);                                 \
    } while (0)

static void finish(void *acc, uint64_t n, MrDType t, MrReduceOp op, uint32_t ranks) {
    uint64_t i;
    if (op != MR_OP_AVG) return;
    switch (t) {
    case MR_DTYPE_F32: DIVIDE(float); break;
    case MR_DTYPE_F64: DIVIDE(double); break;
    case MR_DTYPE_I8: DIVIDE(int8_t); break;
    case MR_DTYPE_U8: DIVIDE(uint8_t); break;
    case MR_DTYPE_I32: DIVIDE(int32_t); break;
    case MR_DTYPE_U32: DIVIDE(uint32_t); break;
    case MR_DTYPE_I64: DIVIDE(int64_t); break;
    case MR_DTYPE_F16: DIVIDE_HALF(f16_to_float, float_to_f16); break;
    case MR_DTYPE_BF16: DIVIDE_HALF(bf16_to_float, float_to_bf16); break;
    default: DIVIDE(uint64_t); break;
    }
}

/* The last rank to arrive moves everyone's data (g->mu held). Inputs are copied first, so
 * an output that overlaps an input (in-place all_gather) reads what was there before. */
static MrStatus move_data(Coll *k, uint32_t n) {
    uint64_t chunk = k->count * dtype_bytes[k->dtype];
    uint64_t in_bytes = (k->kind == K_REDUCE_SCATTER || k->kind == K_ALL_TO_ALL) ? n * chunk
                                                                                 : chunk;
    unsigned char *snap;
    uint32_t r, j;
    if (k->kind == K_BARRIER) return MR_OK;
    if (!(snap = malloc(n * in_bytes > 0 ? (size_t)(n * in_bytes) : 1))) return no_memory(kind_names[k->kind]);
    for (r = 0; r < n; r++) memcpy(snap + r * in_bytes, k->in[r], in_bytes);
    switch (k->kind) {
    case K_ALL_REDUCE:
        for (r = 1; r < n; r++) reduce(snap, snap + r * in_bytes, k->count, k->dtype, k->op);
        finish(snap, k->count, k->dtype, k->op, n);
        for (r = 0; r < n; r++) memcpy(k->out[r], snap, chunk);
        break;
    case K_BROADCAST:
        for (r = 0; r < n; r++) memcpy(k->out[r], snap + k->root * in_bytes, chunk);
        break;
    case K_ALL_GATHER:
        for (r = 0; r < n; r++)
            for (j = 0; j < n; j++) memcpy((unsigned char *)k->out[r] + j * chunk, snap + j * chunk, chunk);
        break;
    case K_ALL_TO_ALL: /* chunk j of member i lands in chunk i of member j */
        for (r = 0; r < n; r++)
            for (j = 0; j < n; j++)
                memcpy((unsigned char *)k->out[j] + r * chunk, snap + r * in_bytes + j * chunk, chunk);
        break;
    default: /* K_REDUCE_SCATTER: member r gets the reduction of chunk r */
        for (r = 0; r < n; r++) {
            for (j = 1; j < n; j++)
                reduce(snap + r * chunk, snap + j * in_bytes + r * chunk, k->count, k->dtype, k->op);
            finish(snap + r * chunk, k->count, k->dtype, k->op, n);
            memcpy(k->out[r], snap + r * chunk, chunk);
        }
        break;
    }
    free(snap);
    return MR_OK;
}

/* The worker's side of a collective op. */
static void run_collective(Op *op) {
    MrComm *c = op->comm;
    Group *g = c->g;
    Coll *k;
    MrStatus st;
    char msg[200];
    (void)pthread_mutex_lock(&g->mu);
    if (c->aborted) {
        op_failed(c, op, MR_ERR_ABORTED, "the communicator was aborted");
        (void)pthread_mutex_unlock(&g->mu);
        return;
    }
    for (k = g->colls; k && k->seq != op->seq; k = k->next) {}
    if (!k) {
        if (!(k = calloc(1, sizeof *k)) || !(k->in = calloc(2 * (size_t)g->size, sizeof(void *)))) {
            free(k);
            op_failed(c, op, MR_ERR_INTERNAL, "collective: the plugin's host allocation failed");
            (void)pthread_mutex_unlock(&g->mu);
            return;
        }
        k->out = k->in + g->size;
        k->seq = op->seq;
        k->kind = op->kind2;
        k->count = op->count;
        k->dtype = op->dtype;
        k->op = op->op;
        k->root = op->root;
        k->next = g->colls;
        g->colls = k;
    } else if (k->kind != op->kind2 || k->count != op->count || k->dtype != op->dtype ||
               k->op != op->op || k->root != op->root) {
        k->status = MR_ERR_INVALID_ARGUMENT;
        (void)snprintf(k->msg, sizeof k->msg,
                       "collective #%llu: rank %u issued %s of %llu elements, an earlier rank "
                       "%s of %llu (ranks must issue the same collectives in the same order)",
                       (unsigned long long)op->seq, c->rank, kind_names[op->kind2],
                       (unsigned long long)op->count, kind_names[k->kind],
                       (unsigned long long)k->count);
    }
    k->in[c->rank] = (void *)op->src;
    k->out[c->rank] = op->dst;
    if (++k->arrived == g->size) {
        if (k->status == MR_OK) k->status = move_data(k, g->size);
        k->done = 1;
        (void)pthread_cond_broadcast(&g->cv);
    }
    st = wait_flag(c, &k->done);
    if (st != MR_OK && k->status == MR_OK) {
        /* Never move data into this rank's buffers later: it is leaving. */
        k->status = st;
        (void)snprintf(k->msg, sizeof k->msg, "%s", st == MR_ERR_ABORTED
                       ? "the communicator was aborted"
                       : "a collective timed out waiting for a missing rank");
    }
    if (st == MR_OK) st = k->status;
    if (st != MR_OK) {
        (void)snprintf(msg, sizeof msg, "%s", k->msg);
        op_failed(c, op, st, msg);
    }
    if (++k->departed == g->size) { /* everyone left: unlink and free it */
        Coll **p = &g->colls;
        while (*p != k) p = &(*p)->next;
        *p = k->next;
        free(k->in);
        free(k);
    }
    (void)pthread_mutex_unlock(&g->mu);
}

static void run_p2p(Op *op) {
    MrComm *c = op->comm;
    Group *g = c->g;
    (void)pthread_mutex_lock(&g->mu);
    if (c->aborted) {
        op_failed(c, op, MR_ERR_ABORTED, "the communicator was aborted");
    } else if (op->kind == OP_SEND) {
        Msg *m = calloc(1, sizeof *m);
        if (m && (m->data = malloc(op->bytes ? op->bytes : 1)) != NULL) {
            memcpy(m->data, op->src, op->bytes);
            m->from = c->rank;
            m->to = op->peer;
            m->seq = op->seq;
            m->bytes = op->bytes;
            m->next = g->msgs;
            g->msgs = m;
            (void)pthread_cond_broadcast(&g->cv);
        } else {
            free(m);
            op_failed(c, op, MR_ERR_INTERNAL, "send: the plugin's host allocation failed");
        }
    } else { /* OP_RECV: wait for the matching message */
        Msg **p = NULL;
        struct timespec deadline;
        (void)clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += (time_t)(g->timeout_ms / 1000) + 1;
        for (;;) {
            for (p = &g->msgs; *p; p = &(*p)->next)
                if ((*p)->from == op->peer && (*p)->to == c->rank && (*p)->seq == op->seq) break;
            if (*p || c->aborted) break;
            if (pthread_cond_timedwait(&g->cv, &g->mu, &deadline) == ETIMEDOUT) break;
        }
        if (p && *p) {
            Msg *m = *p;
            *p = m->next;
            if (m->bytes == op->bytes) memcpy(op->dst, m->data, m->bytes);
            else op_failed(c, op, MR_ERR_INVALID_ARGUMENT, "recv: the sender sent another size");
            free(m->data);
            free(m);
        } else {
            op_failed(c, op, c->aborted ? MR_ERR_ABORTED : MR_ERR_TIMEOUT,
                      c->aborted ? "the communicator was aborted" : "recv: no message arrived");
        }
    }
    (void)pthread_mutex_unlock(&g->mu);
}

static void run_op(Op *op) {
    switch (op->kind) {
    case OP_COPY: memmove(op->dst, op->src, op->bytes); break;
    case OP_ZERO: memset(op->dst, 0, op->bytes); break;
    case OP_DELAY: {
        struct timespec t;
        t.tv_sec = (time_t)(op->bytes / 1000000);
        t.tv_nsec = (long)(op->bytes % 1000000) * 1000L;
        (void)nanosleep(&t, NULL);
        break;
    }
    case OP_WAIT: wait_done(op->wait_stream, op->wait_target); break;
    case OP_COLL: run_collective(op); break;
    default: run_p2p(op); break;
    }
}

/* ---- communicator entries ------------------------------------------------------------- */

static MrStatus host_world_open(const MrWorldOptions *o, MrDevice **devices, MrComm **comms) {
    Group *g;
    uint32_t r;
    if (!o || o->struct_size < MR_SIZE_UPTO(MrWorldOptions, timeout_ms))
        return fail(MR_ERR_INVALID_ARGUMENT, "world_open: options missing or too small");
    if (o->world_size == 0 || o->world_size > HOST_DEVICES)
        return fail(MR_ERR_INVALID_ARGUMENT, "world_open: %u ranks, this plugin has 1..%d",
                    o->world_size, HOST_DEVICES);
    if (!(g = group_new(o->world_size, o->timeout_ms))) return no_memory("world_open");
    g->refs = 1; /* held until every rank's communicator exists */
    for (r = 0; r < o->world_size; r++) {
        MrStatus st = device_new(&o->device, r, &devices[r]);
        if (st != MR_OK) return st; /* the host releases what was returned so far */
        if (!(comms[r] = comm_new(g, devices[r], r))) return no_memory("world_open");
    }
    group_release(g);
    return MR_OK;
}

static MrStatus host_comm_rank_size(MrComm *c, uint32_t *rank, uint32_t *size) {
    *rank = c->rank;
    *size = c->g->size;
    return MR_OK;
}

static MrStatus host_comm_new_group(MrComm *c, const uint32_t *ranks, size_t n, MrComm **out) {
    Group *g = c->g;
    Child *ch;
    size_t i, j, me = n;
    uint64_t occurrence = c->new_groups++;
    *out = NULL;
    if (n == 0 || n > g->size)
        return fail(MR_ERR_INVALID_ARGUMENT, "new_group: %zu ranks in a group of %u", n, g->size);
    for (i = 0; i < n; i++) {
        if (ranks[i] >= g->size)
            return fail(MR_ERR_INVALID_ARGUMENT, "new_group: rank %u outside the group of %u",
                        ranks[i], g->size);
        for (j = 0; j < i; j++)
            if (ranks[j] == ranks[i])
                return fail(MR_ERR_INVALID_ARGUMENT, "new_group: rank %u listed twice", ranks[i]);
        if (ranks[i] == c->rank) me = i;
    }
    if (me == n) return MR_OK; /* not a member: MR_OK with no communicator */
    (void)pthread_mutex_lock(&g->mu);
    for (ch = g->children; ch; ch = ch->next)
        if (ch->occurrence == occurrence && ch->n == n && !memcmp(ch->ranks, ranks, n * sizeof *ranks))
            break;
    if (!ch && (ch = calloc(1, sizeof *ch)) != NULL) {
        ch->ranks = malloc(n * sizeof *ranks);
        ch->group = group_new((uint32_t)n, g->timeout_ms);
        if (!ch->ranks || !ch->group) {
            free(ch->ranks);
            free(ch->group);
            free(ch);
            ch = NULL;
        } else {
            memcpy(ch->ranks, ranks, n * sizeof *ranks);
            ch->n = n;
            ch->occurrence = occurrence;
            ch->group->refs = 1; /* the parent's list */
            ch->next = g->children;
            g->children = ch;
        }
    }
    (void)pthread_mutex_unlock(&g->mu);
    if (!ch || !(*out = comm_new(ch->group, c->dev, (uint32_t)me))) return no_memory("new_group");
    return MR_OK;
}

static void host_comm_destroy(MrComm *c) {
    group_release(c->g);
    free(c->sent);
    free(c->received);
    free(c);
}

static void host_comm_abort(MrComm *c) {
    (void)pthread_mutex_lock(&c->g->mu);
    c->aborted = 1;
    if (c->error == MR_OK) {
        c->error = MR_ERR_ABORTED;
        (void)snprintf(c->error_msg, sizeof c->error_msg, "the communicator was aborted");
    }
    (void)pthread_cond_broadcast(&c->g->cv);
    (void)pthread_mutex_unlock(&c->g->mu);
}

static MrStatus host_comm_async_error(MrComm *c) {
    MrStatus st;
    char msg[240];
    (void)pthread_mutex_lock(&c->g->mu);
    st = c->error;
    memcpy(msg, c->error_msg, sizeof msg);
    (void)pthread_mutex_unlock(&c->g->mu);
    return st == MR_OK ? MR_OK : fail(st, "rank %u: %s", c->rank, msg);
}

/* Checks and enqueues one collective. in_n / out_n: elements of input and output. */
static MrStatus collective(MrComm *c, uint32_t kind, uint64_t in, uint64_t in_n, uint64_t out,
                           uint64_t out_n, MrDType t, MrReduceOp op, uint32_t root, MrStream *s) {
    const char *call = kind_names[kind];
    uint64_t size;
    MrStatus st;
    Op *o;
    int aborted;
    if (t >= MR_DTYPE_COUNT || op >= MR_OP_COUNT)
        return fail(MR_ERR_INVALID_ARGUMENT, "%s: element type %u / reduction %u is not an ABI "
                    "1 code", call, t, op);
    if (t == MR_DTYPE_F8E4M3 || t == MR_DTYPE_F8E5M2)
        if (kind == K_ALL_REDUCE || kind == K_REDUCE_SCATTER)
            return fail(MR_ERR_UNSUPPORTED, "%s: this plugin does not reduce element type %u "
                        "(it moves fp8, reduces every other type)", call, t);
    size = dtype_bytes[t];
    if (kind != K_BARRIER) {
        if (in_n > UINT64_MAX / size || out_n > UINT64_MAX / size)
            return fail(MR_ERR_INVALID_ARGUMENT, "%s: count overflows", call);
        if ((st = check_range(c->dev, in, in_n * size, call)) != MR_OK) return st;
        if ((st = check_range(c->dev, out, out_n * size, call)) != MR_OK) return st;
    }
    (void)pthread_mutex_lock(&c->g->mu);
    aborted = c->aborted;
    (void)pthread_mutex_unlock(&c->g->mu);
    if (aborted) return fail(MR_ERR_ABORTED, "%s: the communicator was aborted", call);
    if (!(o = op_new(OP_COLL))) return no_memory(call);
    o->comm = c;
    o->seq = c->next_seq++;
    o->kind2 = kind;
    o->src = (const void *)(uintptr_t)in;
    o->dst = (void *)(uintptr_t)out;
    o->count = kind == K_REDUCE_SCATTER ? out_n : (kind == K_ALL_GATHER ? in_n : in_n);
    if (kind == K_ALL_TO_ALL) o->count = in_n / c->g->size;
    o->dtype = t;
    o->op = op;
    o->root = root;
    (void)enqueue(s, o);
    return MR_OK;
}

static MrStatus host_all_reduce(MrComm *c, uint64_t buf, uint64_t n, MrDType t, MrReduceOp op,
                                MrStream *s) {
    return collective(c, K_ALL_REDUCE, buf, n, buf, n, t, op, 0, s);
}
static MrStatus host_all_gather(MrComm *c, uint64_t in, uint64_t out, uint64_t n, MrDType t,
                                MrStream *s) {
    return collective(c, K_ALL_GATHER, in, n, out, n * c->g->size, t, MR_OP_SUM, 0, s);
}
static MrStatus host_reduce_scatter(MrComm *c, uint64_t in, uint64_t out, uint64_t n, MrDType t,
                                    MrReduceOp op, MrStream *s) {
    return collective(c, K_REDUCE_SCATTER, in, n * c->g->size, out, n, t, op, 0, s);
}
static MrStatus host_all_to_all(MrComm *c, uint64_t in, uint64_t out, uint64_t n, MrDType t,
                                MrStream *s) {
    return collective(c, K_ALL_TO_ALL, in, n * c->g->size, out, n * c->g->size, t, MR_OP_SUM, 0, s);
}
static MrStatus host_broadcast(MrComm *c, uint64_t buf, uint64_t n, MrDType t, uint32_t root,
                               MrStream *s) {
    if (root >= c->g->size)
        return fail(MR_ERR_INVALID_ARGUMENT, "broadcast: root %u outside the group of %u", root,
                    c->g->size);
    return collective(c, K_BROADCAST, buf, n, buf, n, t, MR_OP_SUM, root, s);
}
static MrStatus host_barrier(MrComm *c, MrStream *s) {
    return collective(c, K_BARRIER, 0, 0, 0, 0, MR_DTYPE_F32, MR_OP_SUM, 0, s);
}

static MrStatus p2p(MrComm *c, OpKind kind, uint64_t buf, uint64_t n, MrDType t, uint32_t peer,
                    MrStream *s) {
    const char *call = kind == OP_SEND ? "send" : "recv";
    MrStatus st;
    Op *o;
    if (t >= MR_DTYPE_COUNT) return fail(MR_ERR_INVALID_ARGUMENT, "%s: element type %u", call, t);
    if (peer >= c->g->size || peer == c->rank)
        return fail(MR_ERR_INVALID_ARGUMENT, "%s: peer %u (this is rank %u of %u)", call, peer,
                    c->rank, c->g->size);
    if (n > UINT64_MAX / dtype_bytes[t]) return fail(MR_ERR_INVALID_ARGUMENT, "%s: count overflows", call);
    if ((st = check_range(c->dev, buf, n * dtype_bytes[t], call)) != MR_OK) return st;
    if (!(o = op_new(kind))) return no_memory(call);
    o->comm = c;
    o->peer = peer;
    o->seq = kind == OP_SEND ? c->sent[peer]++ : c->received[peer]++;
    o->bytes = n * dtype_bytes[t];
    o->src = (const void *)(uintptr_t)buf;
    o->dst = (void *)(uintptr_t)buf;
    (void)enqueue(s, o);
    return MR_OK;
}

static MrStatus host_send(MrComm *c, uint64_t buf, uint64_t n, MrDType t, uint32_t peer,
                          MrStream *s) {
    return p2p(c, OP_SEND, buf, n, t, peer, s);
}
static MrStatus host_recv(MrComm *c, uint64_t buf, uint64_t n, MrDType t, uint32_t peer,
                          MrStream *s) {
    return p2p(c, OP_RECV, buf, n, t, peer, s);
}

static MrStatus host_group_start(MrComm *c) {
    c->depth++;
    return MR_OK;
}
static MrStatus host_group_end(MrComm *c) {
    if (c->depth == 0) return fail(MR_ERR_INVALID_ARGUMENT, "group_end without group_start");
    c->depth--;
    return MR_OK;
}
