/*
 * host.c: the reference memreuse backend plugin, a "host-memory accelerator".
 *
 * It is the template a vendor copies to port memreuse to a new accelerator in C
 * (docs/plugin-abi.md walks through it). Each piece maps to what a real runtime provides:
 *   - device memory     = posix_memalign'd host memory, checked against a table of live
 *                         allocations (a real port calls cudaMalloc / aclrtMalloc ...);
 *   - a stream          = a worker thread running a FIFO of operations (a real stream);
 *   - an event          = a counter: "stream S has completed N operations";
 *   - the communicator  = ranks of one process meeting in shared memory (a real port calls
 *                         NCCL / HCCL / its collective library).
 * Every rule of memreuse_backend.h is visible here: struct_size checks on what the host
 * hands in, MR_HAS_FIELD before writing what it hands out, a thread-local message after
 * every failure, every address checked, handles never NULL on MR_OK, nothing re-enters the
 * host. Only the entry symbol is exported (built with -fvisibility=hidden).
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "memreuse_backend.h"

#define HOST_DEVICES 64
#define HOST_ALIGNMENT 256
#define HOST_DEFAULT_CAPACITY (16ull << 30)
#define HOST_MSG 512

/* ---- the thread-local error message (C99 has no _Thread_local: a pthread key) -------- */

static pthread_key_t msg_key;
static pthread_once_t msg_once = PTHREAD_ONCE_INIT;
static void msg_init(void) { (void)pthread_key_create(&msg_key, free); }

static char *msg_buffer(void) {
    char *buf;
    (void)pthread_once(&msg_once, msg_init);
    buf = pthread_getspecific(msg_key);
    if (!buf && (buf = calloc(1, HOST_MSG)) != NULL) (void)pthread_setspecific(msg_key, buf);
    return buf;
}

/* Every failure goes through here: the status, and its message for last_error(). */
static MrStatus fail(MrStatus status, const char *fmt, ...) {
    char *buf = msg_buffer();
    va_list ap;
    if (buf) {
        va_start(ap, fmt);
        (void)vsnprintf(buf, HOST_MSG, fmt, ap);
        va_end(ap);
    }
    return status;
}

static const char *host_last_error(size_t *len) {
    char *buf = msg_buffer();
    if (!buf) {
        *len = 0;
        return "";
    }
    *len = strlen(buf);
    return buf;
}

/* ---- devices, streams, events --------------------------------------------------------- */

typedef struct Alloc {
    uint64_t base, bytes;
} Alloc;

typedef enum { OP_COPY, OP_ZERO, OP_DELAY, OP_WAIT, OP_COLL, OP_SEND, OP_RECV } OpKind;

struct Coll;
typedef struct Op {
    struct Op *next;
    OpKind kind;
    void *dst;
    const void *src;
    uint64_t bytes;
    void *owned;           /* staged host data, freed after the op */
    MrStream *wait_stream; /* OP_WAIT: until wait_stream completed wait_target ops */
    uint64_t wait_target;
    MrComm *comm; /* OP_COLL / OP_SEND / OP_RECV */
    uint64_t seq;
    uint32_t kind2, peer, root;
    uint64_t count;
    MrDType dtype;
    MrReduceOp op;
    MrStream *stream; /* set by enqueue */
} Op;

struct MrStream {
    MrDevice *dev;
    uint64_t id;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    Op *head, *tail;
    uint64_t enqueued, completed; /* the counters events are made of */
    int stop;
    MrStatus error; /* a failed op (a collective): the next synchronize reports it */
    char error_msg[240];
    struct MrStream *next; /* every stream of the device, freed at close */
};

struct MrEvent {
    MrStream *stream; /* NULL until recorded */
    uint64_t target;
};

struct MrDevice {
    uint32_t index;
    uint64_t capacity, used;
    pthread_mutex_t mu; /* the allocation table, the stream list */
    Alloc *allocs;
    size_t nallocs, cap_allocs;
    uint64_t next_stream_id;
    MrStream *streams;
    MrStream *default_stream;
};

/* True when [ptr, ptr + bytes) lies inside one live allocation. */
static int in_allocation(MrDevice *d, uint64_t ptr, uint64_t bytes) {
    size_t i;
    int ok = 0;
    (void)pthread_mutex_lock(&d->mu);
    for (i = 0; i < d->nallocs && !ok; i++) {
        const Alloc *a = &d->allocs[i];
        ok = ptr >= a->base && bytes <= a->bytes && ptr - a->base <= a->bytes - bytes;
    }
    (void)pthread_mutex_unlock(&d->mu);
    return ok;
}

static MrStatus check_range(MrDevice *d, uint64_t ptr, uint64_t bytes, const char *call) {
    if (in_allocation(d, ptr, bytes)) return MR_OK;
    return fail(MR_ERR_INVALID_ARGUMENT,
                "%s: [0x%llx, +%llu) is not inside one live allocation of device %u", call,
                (unsigned long long)ptr, (unsigned long long)bytes, d->index);
}

static void run_op(Op *op); /* below: the communicator part */

static void *stream_main(void *arg) {
    MrStream *s = arg;
    for (;;) {
        Op *op;
        (void)pthread_mutex_lock(&s->mu);
        while (!s->head && !s->stop) (void)pthread_cond_wait(&s->cv, &s->mu);
        op = s->head;
        (void)pthread_mutex_unlock(&s->mu);
        if (!op) return NULL; /* stopped and drained */
        run_op(op);
        (void)pthread_mutex_lock(&s->mu);
        s->head = op->next;
        if (!s->head) s->tail = NULL;
        s->completed++;
        (void)pthread_cond_broadcast(&s->cv);
        (void)pthread_mutex_unlock(&s->mu);
        free(op->owned);
        free(op);
    }
}

static MrStream *stream_new(MrDevice *d) {
    MrStream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->dev = d;
    (void)pthread_mutex_init(&s->mu, NULL);
    (void)pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
        free(s);
        return NULL;
    }
    (void)pthread_mutex_lock(&d->mu);
    s->id = d->next_stream_id++;
    s->next = d->streams;
    d->streams = s;
    (void)pthread_mutex_unlock(&d->mu);
    return s;
}

/* Appends an op; returns the stream's op count after it (its completion ticket). */
static uint64_t enqueue(MrStream *s, Op *op) {
    uint64_t ticket;
    op->next = NULL;
    op->stream = s;
    (void)pthread_mutex_lock(&s->mu);
    if (s->tail) s->tail->next = op;
    else s->head = op;
    s->tail = op;
    ticket = ++s->enqueued;
    (void)pthread_cond_broadcast(&s->cv);
    (void)pthread_mutex_unlock(&s->mu);
    return ticket;
}

/* Waits until the stream completed `ticket` ops (a device-side wait of another stream). */
static void wait_done(MrStream *s, uint64_t ticket) {
    (void)pthread_mutex_lock(&s->mu);
    while (s->completed < ticket) (void)pthread_cond_wait(&s->cv, &s->mu);
    (void)pthread_mutex_unlock(&s->mu);
}

/* Waits until the stream completed `ticket` ops; reports (once) an op that failed. */
static MrStatus wait_ticket(MrStream *s, uint64_t ticket) {
    MrStatus st;
    char msg[240];
    (void)pthread_mutex_lock(&s->mu);
    while (s->completed < ticket) (void)pthread_cond_wait(&s->cv, &s->mu);
    st = s->error;
    memcpy(msg, s->error_msg, sizeof msg);
    s->error = MR_OK;
    (void)pthread_mutex_unlock(&s->mu);
    return st == MR_OK ? MR_OK : fail(st, "stream %llu: %s", (unsigned long long)s->id, msg);
}

/* Called by a worker whose op failed. */
static void stream_fail(MrStream *s, MrStatus st, const char *msg) {
    (void)pthread_mutex_lock(&s->mu);
    if (s->error == MR_OK) {
        s->error = st;
        (void)snprintf(s->error_msg, sizeof s->error_msg, "%s", msg);
    }
    (void)pthread_mutex_unlock(&s->mu);
}

static Op *op_new(OpKind kind) {
    Op *op = calloc(1, sizeof *op);
    if (op) op->kind = kind;
    return op;
}

static MrStatus no_memory(const char *call) {
    return fail(MR_ERR_INTERNAL, "%s: the plugin's own host allocation failed", call);
}

static MrStatus host_device_count(size_t *count) {
    if (getenv("MEMREUSE_HOST_PLUGIN_NO_DRIVER"))
        return fail(MR_ERR_UNAVAILABLE, "MEMREUSE_HOST_PLUGIN_NO_DRIVER is set (a missing "
                                        "driver, for testing the skip path)");
    *count = HOST_DEVICES;
    return MR_OK;
}

static MrStatus device_new(const MrOpenOptions *o, uint32_t index, MrDevice **out) {
    MrDevice *d;
    if (!o || o->struct_size < MR_SIZE_UPTO(MrOpenOptions, flags))
        return fail(MR_ERR_INVALID_ARGUMENT, "device_open: options missing or too small");
    if (index >= HOST_DEVICES)
        return fail(MR_ERR_INVALID_ARGUMENT, "device_open: device %u, this plugin has 0..%d",
                    index, HOST_DEVICES - 1);
    if (!(d = calloc(1, sizeof *d))) return no_memory("device_open");
    d->index = index;
    d->capacity = HOST_DEFAULT_CAPACITY;
    if (MR_HAS_FIELD(o, MrOpenOptions, memory_capacity) && (o->flags & MR_OPEN_MEMORY_CAPACITY))
        d->capacity = o->memory_capacity;
    d->next_stream_id = 1;
    (void)pthread_mutex_init(&d->mu, NULL);
    if (!(d->default_stream = stream_new(d))) {
        free(d);
        return no_memory("device_open");
    }
    *out = d;
    return MR_OK;
}

static MrStatus host_device_open(const MrOpenOptions *o, MrDevice **out) {
    return device_new(o, o ? o->device : 0, out);
}

static void host_device_close(MrDevice *d) {
    MrStream *s = d->streams;
    size_t i;
    while (s) {
        MrStream *next = s->next;
        (void)pthread_mutex_lock(&s->mu);
        s->stop = 1;
        (void)pthread_cond_broadcast(&s->cv);
        (void)pthread_mutex_unlock(&s->mu);
        (void)pthread_join(s->thread, NULL); /* a no-op wait for destroyed streams' threads */
        free(s);
        s = next;
    }
    for (i = 0; i < d->nallocs; i++) free((void *)(uintptr_t)d->allocs[i].base);
    free(d->allocs);
    free(d);
}

static MrStatus host_memory_info(MrDevice *d, MrMemoryInfo *info) {
    (void)pthread_mutex_lock(&d->mu);
    if (MR_HAS_FIELD(info, MrMemoryInfo, free_bytes)) info->free_bytes = d->capacity - d->used;
    if (MR_HAS_FIELD(info, MrMemoryInfo, total_bytes)) info->total_bytes = d->capacity;
    (void)pthread_mutex_unlock(&d->mu);
    return MR_OK;
}

static MrStatus host_capabilities(MrDevice *d, MrCapabilities *caps) {
    (void)d;
    if (MR_HAS_FIELD(caps, MrCapabilities, flags))
        caps->flags = MR_CAP_MEMORY_CAPACITY | MR_CAP_GROUPING;
    if (MR_HAS_FIELD(caps, MrCapabilities, allocation_alignment))
        caps->allocation_alignment = HOST_ALIGNMENT;
    return MR_OK;
}

static MrStatus host_malloc(MrDevice *d, uint64_t bytes, uint64_t *ptr) {
    void *mem = NULL;
    MrStatus st = MR_OK;
    if (bytes == 0) return fail(MR_ERR_INVALID_ARGUMENT, "malloc: 0 bytes asked");
    (void)pthread_mutex_lock(&d->mu);
    if (bytes > d->capacity - d->used) {
        st = fail(MR_ERR_OUT_OF_MEMORY, "malloc: %llu bytes asked, %llu of %llu free",
                  (unsigned long long)bytes, (unsigned long long)(d->capacity - d->used),
                  (unsigned long long)d->capacity);
    } else if (bytes > SIZE_MAX || posix_memalign(&mem, HOST_ALIGNMENT, (size_t)bytes) != 0) {
        st = fail(MR_ERR_OUT_OF_MEMORY, "malloc: the host has no %llu bytes",
                  (unsigned long long)bytes);
    } else if (d->nallocs == d->cap_allocs) {
        size_t cap = d->cap_allocs ? 2 * d->cap_allocs : 64;
        Alloc *grown = realloc(d->allocs, cap * sizeof *grown);
        if (!grown) {
            free(mem);
            st = no_memory("malloc");
        } else {
            d->allocs = grown;
            d->cap_allocs = cap;
        }
    }
    if (st == MR_OK) {
        d->allocs[d->nallocs].base = (uint64_t)(uintptr_t)mem;
        d->allocs[d->nallocs].bytes = bytes;
        d->nallocs++;
        d->used += bytes;
        *ptr = (uint64_t)(uintptr_t)mem;
    }
    (void)pthread_mutex_unlock(&d->mu);
    return st;
}

static MrStatus host_free(MrDevice *d, uint64_t ptr) {
    size_t i;
    (void)pthread_mutex_lock(&d->mu);
    for (i = 0; i < d->nallocs; i++) {
        if (d->allocs[i].base == ptr) {
            d->used -= d->allocs[i].bytes;
            d->allocs[i] = d->allocs[--d->nallocs];
            (void)pthread_mutex_unlock(&d->mu);
            free((void *)(uintptr_t)ptr);
            return MR_OK;
        }
    }
    (void)pthread_mutex_unlock(&d->mu);
    return fail(MR_ERR_INVALID_ARGUMENT, "free: 0x%llx is not a live allocation of device %u",
                (unsigned long long)ptr, d->index);
}

static MrStatus host_default_stream(MrDevice *d, MrStream **s) {
    *s = d->default_stream;
    return MR_OK;
}

static MrStatus host_stream_create(MrDevice *d, MrStream **s) {
    return (*s = stream_new(d)) ? MR_OK : no_memory("stream_create");
}

/* Drains and stops the worker; the struct stays until close (events may point at it). */
static void host_stream_destroy(MrDevice *d, MrStream *s) {
    (void)d;
    (void)pthread_mutex_lock(&s->mu);
    s->stop = 1;
    (void)pthread_cond_broadcast(&s->cv);
    (void)pthread_mutex_unlock(&s->mu);
}

static uint64_t host_stream_id(MrDevice *d, const MrStream *s) {
    (void)d;
    return s->id;
}

static MrStatus host_event_create(MrDevice *d, MrEvent **e) {
    (void)d;
    return (*e = calloc(1, sizeof **e)) ? MR_OK : no_memory("event_create");
}

static void host_event_destroy(MrDevice *d, MrEvent *e) {
    (void)d;
    free(e);
}

static MrStatus host_event_record(MrDevice *d, MrEvent *e, MrStream *s) {
    (void)pthread_mutex_lock(&s->mu);
    (void)pthread_mutex_lock(&d->mu);
    e->stream = s;
    e->target = s->enqueued;
    (void)pthread_mutex_unlock(&d->mu);
    (void)pthread_mutex_unlock(&s->mu);
    return MR_OK;
}

static void event_read(MrDevice *d, MrEvent *e, MrStream **s, uint64_t *target) {
    (void)pthread_mutex_lock(&d->mu);
    *s = e->stream;
    *target = e->target;
    (void)pthread_mutex_unlock(&d->mu);
}

static MrStatus host_event_query(MrDevice *d, MrEvent *e, int32_t *complete) {
    MrStream *s;
    uint64_t target;
    event_read(d, e, &s, &target);
    if (!s) {
        *complete = 1;
        return MR_OK;
    }
    (void)pthread_mutex_lock(&s->mu);
    *complete = s->completed >= target;
    (void)pthread_mutex_unlock(&s->mu);
    return MR_OK;
}

static MrStatus host_event_synchronize(MrDevice *d, MrEvent *e) {
    MrStream *s;
    uint64_t target;
    event_read(d, e, &s, &target);
    return s ? wait_ticket(s, target) : MR_OK;
}

static MrStatus host_stream_wait_event(MrDevice *d, MrStream *s, MrEvent *e) {
    MrStream *other;
    uint64_t target;
    Op *op;
    event_read(d, e, &other, &target);
    if (!other || other == s) return MR_OK; /* unrecorded, or ordered by the stream itself */
    if (!(op = op_new(OP_WAIT))) return no_memory("stream_wait_event");
    op->wait_stream = other;
    op->wait_target = target;
    (void)enqueue(s, op);
    return MR_OK;
}

static MrStatus host_stream_synchronize(MrDevice *d, MrStream *s) {
    uint64_t ticket;
    (void)d;
    (void)pthread_mutex_lock(&s->mu);
    ticket = s->enqueued;
    (void)pthread_mutex_unlock(&s->mu);
    return wait_ticket(s, ticket);
}

static MrStatus host_device_synchronize(MrDevice *d) {
    MrStream *s;
    MrStatus st = MR_OK, one;
    (void)pthread_mutex_lock(&d->mu);
    s = d->streams;
    (void)pthread_mutex_unlock(&d->mu);
    for (; s; s = s->next)
        if ((one = host_stream_synchronize(d, s)) != MR_OK && st == MR_OK) st = one;
    return st;
}

static MrStatus host_memset_zero(MrDevice *d, uint64_t ptr, uint64_t bytes, MrStream *s) {
    Op *op;
    MrStatus st = check_range(d, ptr, bytes, "memset_zero");
    if (st != MR_OK) return st;
    if (!(op = op_new(OP_ZERO))) return no_memory("memset_zero");
    op->dst = (void *)(uintptr_t)ptr;
    op->bytes = bytes;
    (void)enqueue(s, op);
    return MR_OK;
}

static MrStatus host_copy_host_to_device(MrDevice *d, uint64_t dst, const void *src,
                                         size_t bytes, MrStream *s) {
    Op *op;
    MrStatus st = check_range(d, dst, bytes, "copy_host_to_device");
    if (st != MR_OK) return st;
    if (!(op = op_new(OP_COPY)) || !(op->owned = malloc(bytes ? bytes : 1))) {
        free(op);
        return no_memory("copy_host_to_device");
    }
    memcpy(op->owned, src, bytes); /* staged: the caller may reuse src at once */
    op->dst = (void *)(uintptr_t)dst;
    op->src = op->owned;
    op->bytes = bytes;
    (void)enqueue(s, op);
    return MR_OK;
}

static MrStatus host_copy_device_to_host(MrDevice *d, void *dst, uint64_t src, size_t bytes,
                                         MrStream *s) {
    Op *op;
    MrStatus st = check_range(d, src, bytes, "copy_device_to_host");
    if (st != MR_OK) return st;
    if (!(op = op_new(OP_COPY))) return no_memory("copy_device_to_host");
    op->dst = dst;
    op->src = (const void *)(uintptr_t)src;
    op->bytes = bytes;
    return wait_ticket(s, enqueue(s, op)); /* blocks until the bytes are in dst */
}

static MrStatus host_copy_device_to_device(MrDevice *d, uint64_t dst, uint64_t src,
                                           uint64_t bytes, MrStream *s) {
    Op *op;
    MrStatus st = check_range(d, dst, bytes, "copy_device_to_device");
    if (st == MR_OK) st = check_range(d, src, bytes, "copy_device_to_device");
    if (st != MR_OK) return st;
    if (!(op = op_new(OP_COPY))) return no_memory("copy_device_to_device");
    op->dst = (void *)(uintptr_t)dst;
    op->src = (const void *)(uintptr_t)src;
    op->bytes = bytes;
    (void)enqueue(s, op);
    return MR_OK;
}

static MrStatus host_delay(MrDevice *d, uint64_t micros, MrStream *s) {
    Op *op;
    (void)d;
    if (!(op = op_new(OP_DELAY))) return no_memory("delay");
    op->bytes = micros;
    (void)enqueue(s, op);
    return MR_OK;
}

#include "host_comm.c"

/* ---- the entry table ------------------------------------------------------------------ */

static const char host_name[] = "host";
static const char host_summary[] =
    "reference C plugin: host memory, a worker thread per stream, in-process collectives";

/* C99 designated initializers: an entry left out is NULL, i.e. "not offered". */
static const MrBackendApi host_api = {
    .struct_size = MR_API_SIZE_V1_1, /* this plugin knows ABI 1.1 and fills all of it */
    .abi_major = MR_ABI_MAJOR,
    .abi_minor = MR_ABI_MINOR,
    .name = host_name,
    .name_len = sizeof host_name - 1,
    .summary = host_summary,
    .summary_len = sizeof host_summary - 1,
    .last_error = host_last_error,
    .device_count = host_device_count,
    .device_open = host_device_open,
    .device_close = host_device_close,
    .memory_info = host_memory_info,
    .capabilities = host_capabilities,
    .malloc = host_malloc,
    .free = host_free,
    .default_stream = host_default_stream,
    .stream_create = host_stream_create,
    .stream_destroy = host_stream_destroy,
    .stream_id = host_stream_id,
    .event_create = host_event_create,
    .event_destroy = host_event_destroy,
    .event_record = host_event_record,
    .event_query = host_event_query,
    .event_synchronize = host_event_synchronize,
    .stream_wait_event = host_stream_wait_event,
    .stream_synchronize = host_stream_synchronize,
    .device_synchronize = host_device_synchronize,
    .memset_zero = host_memset_zero,
    .copy_host_to_device = host_copy_host_to_device,
    .copy_device_to_host = host_copy_device_to_host,
    .copy_device_to_device = host_copy_device_to_device,
    .delay = host_delay,
    /* device_async_error, vm_*: not offered (host memory has no asynchronous faults). */
    .world_open = host_world_open,
    /* comm_unique_id, comm_init_rank: not offered (single-process worlds only). */
    .comm_rank_size = host_comm_rank_size,
    .comm_new_group = host_comm_new_group,
    .comm_destroy = host_comm_destroy,
    .comm_abort = host_comm_abort,
    .comm_async_error = host_comm_async_error,
    .all_reduce = host_all_reduce,
    .all_gather = host_all_gather,
    .reduce_scatter = host_reduce_scatter,
    .all_to_all = host_all_to_all,
    .broadcast = host_broadcast,
    .send = host_send,
    .recv = host_recv,
    .group_start = host_group_start,
    .group_end = host_group_end,
    .barrier = host_barrier,
    /* annotate_allocation ... race_report_get: not offered (no race detector on a device). */
    .extensions = NULL,
};

/* The one exported symbol. */
MR_EXPORT const MrBackendApi *memreuse_backend_v1(void) { return &host_api; }
