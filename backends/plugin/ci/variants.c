/*
 * variants.c: the reference plugin with one rule of the version policy broken (or bent) per
 * build, for plugin.sh. Build with -I../host -I../include and one -DVARIANT_*:
 *   VARIANT_OLDER_MINOR   an ABI 1.0 table (struct_size ends at `barrier`): loads, runs
 *   VARIANT_NEWER_MINOR   ABI 1.9 with a longer table: loads, the tail is ignored, runs
 *   VARIANT_WRONG_MAJOR   declares ABI 2.1 in memreuse_backend_v1: refused (exit 2)
 *   VARIANT_MISSING_ENTRY malloc is NULL: refused (exit 2)
 *   VARIANT_NULL_HANDLE   world_open answers MR_OK with NULL devices: a typed run error
 */
#define memreuse_backend_v1 mr_reference_backend_v1
#include "host.c"
#undef memreuse_backend_v1

#ifdef VARIANT_NULL_HANDLE
static MrStatus null_world(const MrWorldOptions *o, MrDevice **devices, MrComm **comms) {
    uint32_t r;
    for (r = 0; o && r < o->world_size; r++) devices[r] = NULL, comms[r] = NULL;
    return MR_OK;
}
#endif

struct Bigger {
    MrBackendApi api;
    void *future[4];
};
static struct Bigger big;

MR_EXPORT const MrBackendApi *memreuse_backend_v1(void);
MR_EXPORT const MrBackendApi *memreuse_backend_v1(void) {
    big.api = *mr_reference_backend_v1();
#if defined(VARIANT_OLDER_MINOR)
    big.api.abi_minor = 0;
    big.api.struct_size = MR_API_SIZE_V1_0;
#elif defined(VARIANT_NEWER_MINOR)
    big.api.abi_minor = 9;
    big.api.struct_size = sizeof big;
    big.future[0] = &big; /* an entry this host does not know: never read */
#elif defined(VARIANT_WRONG_MAJOR)
    big.api.abi_major = 2;
#elif defined(VARIANT_MISSING_ENTRY)
    big.api.malloc = NULL;
#elif defined(VARIANT_NULL_HANDLE)
    big.api.world_open = null_world;
#else
#error "define one VARIANT_*"
#endif
    return &big.api;
}
