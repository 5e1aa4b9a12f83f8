/*
 * memreuse_backend.h: the C ABI of a memreuse backend plugin, ABI version 1.
 *
 * This header is the only thing a vendor needs. A plugin is a shared library that exports
 *
 *     const MrBackendApi *memreuse_backend_v1(void);
 *
 * returning a table of function pointers that stays valid until the process exits. The host
 * (memreuse's loader) tries the entry of its own major version first, then newer ones (only
 * to name them in its error), so one library can serve several host majors by exporting
 * several entries.
 *
 * Rules (docs/plugin-abi.md says the same in prose):
 *  - C99 only, no C11: compile-time checks are negative-array typedefs.
 *  - Every struct begins with `size_t struct_size` and only ever grows at its end. The size
 *    of a version is MR_SIZE_UPTO(type, last field of that version).
 *    * Tables the plugin returns (MrBackendApi): struct_size says how much the plugin filled;
 *      the host reads no further, treats entries past it as NULL, and ignores a newer
 *      plugin's tail.
 *    * Structs the host passes in (options) or hands out to be filled (MrMemoryInfo,
 *      MrCapabilities, MrRaceReport): struct_size says how big the host's struct is; a
 *      plugin reads or writes a field only when MR_HAS_FIELD says it fits. The host zeroes
 *      what it hands out, so a field the plugin does not know stays 0.
 *  - Handles (MrDevice, MrStream, MrEvent, MrComm) are opaque and owned by the plugin. A call
 *    that returns MR_OK with a handle out-parameter must store a non-NULL handle.
 *  - Device addresses and physical-memory handles are uint64_t values; the plugin must check
 *    every address it is given (no host-side undefined behaviour for any value).
 *  - Strings are (pointer, length), not NUL-terminated, and are copied by whoever receives
 *    them before the next call.
 *  - Every call returns an MrStatus. After a non-MR_OK status, last_error() on the same
 *    thread returns the message (thread-local storage of the plugin, valid until the next
 *    call on that thread); the host copies it at once.
 *  - Ownership is explicit: what create/open returns is released by the matching
 *    destroy/close, called exactly once by the host. No entry takes a callback: a plugin can
 *    never re-enter the host. A plugin must not let a C++ exception or a Rust panic leave
 *    an entry.
 *  - Optional entries may be NULL: the host reports the operation as unsupported (a typed
 *    Unsupported error, or a skip), never calls it, never crashes.
 *
 * Threading:
 *  - Device entries (device_* ... vm_unmap, annotate_allocation ... race_report_get) may be
 *    called from any thread, concurrently, for the same device. Operations enqueued on one
 *    stream run in the order their enqueue calls returned.
 *  - Communicator entries: the host serializes calls per communicator (one at a time),
 *    except comm_abort and comm_async_error, which may come from any thread at any time
 *    (a watchdog) and must not block on the communicator's work.
 *  - comm_init_rank blocks until every rank of the group joined (one thread per rank).
 */
#ifndef MEMREUSE_BACKEND_H
#define MEMREUSE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI this header describes. A host accepts any minor of its major. */
#define MR_ABI_MAJOR 1
#define MR_ABI_MINOR 1

/* Marks the entry symbol exported (build the rest with -fvisibility=hidden). */
#if defined(_WIN32)
#define MR_EXPORT __declspec(dllexport)
#else
#define MR_EXPORT __attribute__((visibility("default")))
#endif

/* Size of TYPE up to and including FIELD: the struct_size of the version FIELD ended. */
#define MR_SIZE_UPTO(TYPE, FIELD) (offsetof(TYPE, FIELD) + sizeof(((TYPE *)0)->FIELD))
/* True when the struct at PTR (of TYPE) is big enough to hold FIELD. */
#define MR_HAS_FIELD(PTR, TYPE, FIELD) ((PTR)->struct_size >= MR_SIZE_UPTO(TYPE, FIELD))
/* A compile-time check without C11: a negative array size is an error. */
#define MR_CHECK(NAME, COND) typedef char mr_check_##NAME[(COND) ? 1 : -1]

/* ---- status codes ------------------------------------------------------------------- */

typedef int32_t MrStatus;
#define MR_OK 0
#define MR_ERR_INVALID_ARGUMENT 1 /* an argument refused: unknown address, bad handle, count */
#define MR_ERR_OUT_OF_MEMORY 2    /* the device cannot provide the bytes asked */
#define MR_ERR_UNSUPPORTED 3      /* an operation, element type or reduction not offered */
#define MR_ERR_UNAVAILABLE 4      /* the vendor library or the device is missing: a skip */
#define MR_ERR_DEVICE 5           /* a vendor call failed */
#define MR_ERR_TIMEOUT 6          /* a peer never arrived, a stream hung */
#define MR_ERR_DEVICE_LOST 7      /* the device is gone; every later call may fail */
#define MR_ERR_ABORTED 8          /* the communicator was aborted */
#define MR_ERR_INTERNAL 9         /* a bug in the plugin */

/* ---- element types and reductions (the full lists from ABI 1.0) ---------------------- */

typedef uint32_t MrDType;
#define MR_DTYPE_F32 0
#define MR_DTYPE_F16 1
#define MR_DTYPE_BF16 2
#define MR_DTYPE_F64 3
#define MR_DTYPE_I8 4
#define MR_DTYPE_U8 5
#define MR_DTYPE_I32 6
#define MR_DTYPE_U32 7
#define MR_DTYPE_I64 8
#define MR_DTYPE_U64 9
#define MR_DTYPE_F8E4M3 10
#define MR_DTYPE_F8E5M2 11
#define MR_DTYPE_COUNT 12

typedef uint32_t MrReduceOp;
#define MR_OP_SUM 0
#define MR_OP_PROD 1
#define MR_OP_MAX 2
#define MR_OP_MIN 3
#define MR_OP_AVG 4
#define MR_OP_COUNT 5

/* ---- opaque handles ------------------------------------------------------------------- */

typedef struct MrDevice MrDevice;
typedef struct MrStream MrStream;
typedef struct MrEvent MrEvent;
typedef struct MrComm MrComm;

/* ---- structs -------------------------------------------------------------------------- */

/* MrOpenOptions.flags: which optional fields hold a value. */
#define MR_OPEN_MEMORY_CAPACITY 1u          /* memory_capacity is set */
#define MR_OPEN_DETERMINISTIC_SEED 2u       /* deterministic_seed is set */
#define MR_OPEN_NO_NATIVE_RACE_DETECTION 4u /* switch a simulator's own detector off */

/* How to open one device (host to plugin). */
typedef struct MrOpenOptions {
    size_t struct_size;
    uint32_t device; /* device index */
    uint32_t flags;  /* MR_OPEN_* */
    uint64_t memory_capacity;
    uint64_t deterministic_seed;
} MrOpenOptions;

/* How to open a whole world of ranks inside this process (host to plugin). */
typedef struct MrWorldOptions {
    size_t struct_size;
    MrOpenOptions device; /* per rank; `device` is ignored: rank r opens device r */
    uint32_t world_size;
    uint32_t reserved;
    uint64_t timeout_ms; /* a collective waits this long for a missing peer */
} MrWorldOptions;

/* Free and total device memory (filled by the plugin). */
typedef struct MrMemoryInfo {
    size_t struct_size;
    uint64_t free_bytes;
    uint64_t total_bytes;
} MrMemoryInfo;

/* MrCapabilities.flags */
#define MR_CAP_DETERMINISTIC_SCHEDULING 1u /* runs reproducibly from deterministic_seed */
#define MR_CAP_NATIVE_RACE_DETECTION 2u    /* race_report_* report real races */
#define MR_CAP_MEMORY_CAPACITY 4u          /* honours memory_capacity */
#define MR_CAP_EXACT_DELAYS 8u             /* delay() keeps the stream busy exactly */
#define MR_CAP_VIRTUAL_MEMORY 16u          /* the vm_* entries work */
#define MR_CAP_GROUPING 32u                /* group_start/group_end batch send/recv */

/* What a device can honour (filled by the plugin). */
typedef struct MrCapabilities {
    size_t struct_size;
    uint64_t flags;                /* MR_CAP_* */
    uint64_t allocation_alignment; /* a power of two, at least 256 */
} MrCapabilities;

/* One side of a race (inside MrRaceReport; strings owned by the plugin). */
typedef struct MrRaceAccess {
    const char *op; /* op name and label */
    size_t op_len;
    uint64_t stream; /* stream_id() of the stream it ran on */
    uint32_t kind;   /* 0 read, 1 write */
    uint32_t has_allocation;
    uint64_t allocation; /* the id from annotate_allocation, when has_allocation */
} MrRaceAccess;

/* Two conflicting accesses not ordered by happens-before (filled by the plugin; its
 * strings stay valid until the next race_report_count on the device or its close). */
typedef struct MrRaceReport {
    size_t struct_size;
    uint32_t kind; /* 0 schedule race (one allocation), 1 reuse race (two) */
    uint32_t reserved;
    uint64_t range_start;
    uint64_t range_end;
    MrRaceAccess earlier;
    MrRaceAccess later;
} MrRaceReport;

/* Longest communicator unique id (bytes). */
#define MR_UNIQUE_ID_MAX 128

/* The entry table. R = required, O = optional (may be NULL), C = required when world_open
 * or comm_init_rank is present (a device-only plugin leaves every communicator entry NULL). */
typedef struct MrBackendApi {
    size_t struct_size; /* MR_SIZE_UPTO(MrBackendApi, last entry the plugin knows) */
    uint32_t abi_major; /* MR_ABI_MAJOR the plugin was built against */
    uint32_t abi_minor; /* MR_ABI_MINOR the plugin was built against */
    const char *name;   /* R: short backend name, e.g. "host" */
    size_t name_len;
    const char *summary; /* O: one line saying what it is */
    size_t summary_len;

    /* R: the message of the last non-MR_OK status on this thread. */
    const char *(*last_error)(size_t *len);

    /* Devices. R unless marked. */
    MrStatus (*device_count)(size_t *count); /* MR_ERR_UNAVAILABLE: no driver: a skip */
    MrStatus (*device_open)(const MrOpenOptions *options, MrDevice **device);
    void (*device_close)(MrDevice *device); /* after every stream, event and comm of it */
    MrStatus (*memory_info)(MrDevice *device, MrMemoryInfo *info);
    MrStatus (*capabilities)(MrDevice *device, MrCapabilities *caps); /* O: 256, no flags */
    MrStatus (*malloc)(MrDevice *device, uint64_t bytes, uint64_t *ptr);
    MrStatus (*free)(MrDevice *device, uint64_t ptr);

    /* Streams and events. The default stream is owned by the device (never destroyed). */
    MrStatus (*default_stream)(MrDevice *device, MrStream **stream);
    MrStatus (*stream_create)(MrDevice *device, MrStream **stream);
    void (*stream_destroy)(MrDevice *device, MrStream *stream); /* after its work drained */
    uint64_t (*stream_id)(MrDevice *device, const MrStream *stream); /* unique per device */
    MrStatus (*event_create)(MrDevice *device, MrEvent **event);   /* unrecorded: complete */
    void (*event_destroy)(MrDevice *device, MrEvent *event);
    MrStatus (*event_record)(MrDevice *device, MrEvent *event, MrStream *stream);
    MrStatus (*event_query)(MrDevice *device, MrEvent *event, int32_t *complete);
    MrStatus (*event_synchronize)(MrDevice *device, MrEvent *event);
    MrStatus (*stream_wait_event)(MrDevice *device, MrStream *stream, MrEvent *event);
    MrStatus (*stream_synchronize)(MrDevice *device, MrStream *stream);
    MrStatus (*device_synchronize)(MrDevice *device);

    /* Stream-ordered memory operations. The host buffer of copy_host_to_device is staged
     * before the call returns; copy_device_to_host blocks until the bytes are in dst. */
    MrStatus (*memset_zero)(MrDevice *device, uint64_t ptr, uint64_t bytes, MrStream *stream);
    MrStatus (*copy_host_to_device)(MrDevice *device, uint64_t dst, const void *src,
                                    size_t bytes, MrStream *stream);
    MrStatus (*copy_device_to_host)(MrDevice *device, void *dst, uint64_t src, size_t bytes,
                                    MrStream *stream);
    MrStatus (*copy_device_to_device)(MrDevice *device, uint64_t dst, uint64_t src,
                                      uint64_t bytes, MrStream *stream);

    /* O: a device-side busy period (NULL: the host treats delays as no-ops). */
    MrStatus (*delay)(MrDevice *device, uint64_t micros, MrStream *stream);
    /* O: MR_OK while healthy, else the asynchronous error (MR_ERR_DEVICE_LOST...). */
    MrStatus (*device_async_error)(MrDevice *device);

    /* O: virtual memory, all or none (declare MR_CAP_VIRTUAL_MEMORY). */
    MrStatus (*vm_granularity)(MrDevice *device, uint64_t *granularity);
    MrStatus (*vm_reserve)(MrDevice *device, uint64_t bytes, uint64_t *base);
    MrStatus (*vm_release)(MrDevice *device, uint64_t base);
    MrStatus (*vm_create_physical)(MrDevice *device, uint64_t bytes, uint64_t *handle);
    MrStatus (*vm_release_physical)(MrDevice *device, uint64_t handle);
    MrStatus (*vm_map)(MrDevice *device, uint64_t at, uint64_t handle);
    MrStatus (*vm_unmap)(MrDevice *device, uint64_t at, uint64_t bytes);

    /* Communicators. O: world_open opens devices 0..world_size-1 and one world
     * communicator over them (single-process jobs, the conformance runner). */
    MrStatus (*world_open)(const MrWorldOptions *options, MrDevice **devices, MrComm **comms);
    /* O: multi-process jobs: rank 0 makes an id, every rank joins with it. */
    MrStatus (*comm_unique_id)(uint8_t *id, size_t capacity, size_t *len);
    MrStatus (*comm_init_rank)(MrDevice *device, const uint8_t *id, size_t id_len,
                               uint32_t nranks, uint32_t rank, uint64_t timeout_ms,
                               MrComm **comm);
    MrStatus (*comm_rank_size)(MrComm *comm, uint32_t *rank, uint32_t *size); /* C */
    /* C: every member calls it with the same ranks in the same order relative to other
     * new_group calls; a non-member gets MR_OK with *group = NULL. */
    MrStatus (*comm_new_group)(MrComm *comm, const uint32_t *ranks, size_t nranks,
                               MrComm **group);
    void (*comm_destroy)(MrComm *comm); /* C */
    void (*comm_abort)(MrComm *comm);   /* C: pending and later ops fail, nothing waits */
    MrStatus (*comm_async_error)(MrComm *comm); /* C: MR_OK while healthy */

    /* C: collectives, enqueued on a stream of the communicator's device, matched across
     * the group in issue order. Counts are elements of dtype. An unsupported dtype or op
     * is MR_ERR_UNSUPPORTED. */
    MrStatus (*all_reduce)(MrComm *comm, uint64_t buf, uint64_t count, MrDType dtype,
                           MrReduceOp op, MrStream *stream);
    MrStatus (*all_gather)(MrComm *comm, uint64_t input, uint64_t output, uint64_t count,
                           MrDType dtype, MrStream *stream);
    MrStatus (*reduce_scatter)(MrComm *comm, uint64_t input, uint64_t output, uint64_t count,
                               MrDType dtype, MrReduceOp op, MrStream *stream);
    MrStatus (*all_to_all)(MrComm *comm, uint64_t input, uint64_t output, uint64_t count,
                           MrDType dtype, MrStream *stream);
    MrStatus (*broadcast)(MrComm *comm, uint64_t buf, uint64_t count, MrDType dtype,
                          uint32_t root, MrStream *stream);
    /* C: point-to-point, matched per (sender, receiver) in issue order. */
    MrStatus (*send)(MrComm *comm, uint64_t buf, uint64_t count, MrDType dtype, uint32_t peer,
                     MrStream *stream);
    MrStatus (*recv)(MrComm *comm, uint64_t buf, uint64_t count, MrDType dtype, uint32_t peer,
                     MrStream *stream);
    /* O: batch point-to-point operations (declare MR_CAP_GROUPING). */
    MrStatus (*group_start)(MrComm *comm);
    MrStatus (*group_end)(MrComm *comm);
    /* O: the stream continues once every member reached it. */
    MrStatus (*barrier)(MrComm *comm, MrStream *stream);
    /* ---- end of ABI 1.0 ---- */

    /* O (1.1): simulators only; NULL in real plugins. */
    void (*annotate_allocation)(MrDevice *device, uint64_t ptr, uint64_t bytes, uint64_t id);
    void (*set_op_label)(MrDevice *device, const char *label, size_t label_len);
    MrStatus (*race_report_count)(MrDevice *device, size_t *count);
    MrStatus (*race_report_get)(MrDevice *device, size_t index, MrRaceReport *report);
    /* O (1.1): later additions hang here (NULL today). */
    const void *extensions;
    /* ---- end of ABI 1.1 ---- */
} MrBackendApi;

/* The struct_size of each version's table. */
#define MR_API_SIZE_V1_0 MR_SIZE_UPTO(MrBackendApi, barrier)
#define MR_API_SIZE_V1_1 MR_SIZE_UPTO(MrBackendApi, extensions)

/* The entry symbol of ABI major 1. */
MR_EXPORT const MrBackendApi *memreuse_backend_v1(void);

/* Layout checks, the same numbers the host's loader asserts (pointer-sized fields). */
MR_CHECK(struct_size_first, offsetof(MrBackendApi, struct_size) == 0);
MR_CHECK(api_v1_1_is_whole, MR_API_SIZE_V1_1 == sizeof(MrBackendApi));
MR_CHECK(api_v1_0_size, MR_API_SIZE_V1_0 == sizeof(void *) * 57);
MR_CHECK(api_v1_1_size, MR_API_SIZE_V1_1 == sizeof(void *) * 62);
MR_CHECK(open_options_size, sizeof(MrOpenOptions) == sizeof(size_t) + 24);
MR_CHECK(world_options_size, sizeof(MrWorldOptions) == 2 * sizeof(size_t) + 40);
MR_CHECK(memory_info_size, sizeof(MrMemoryInfo) == sizeof(size_t) + 16);
MR_CHECK(capabilities_size, sizeof(MrCapabilities) == sizeof(size_t) + 16);
MR_CHECK(race_access_size, sizeof(MrRaceAccess) == 2 * sizeof(size_t) + 24);
MR_CHECK(race_report_size, sizeof(MrRaceReport) == sizeof(size_t) + 24 +
                               2 * sizeof(MrRaceAccess));

#ifdef __cplusplus
}
#endif

#endif /* MEMREUSE_BACKEND_H */
