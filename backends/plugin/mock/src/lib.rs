//! memreuse-mock-plugin: the mock device (`memreuse-mock`) exported as a plugin of the C
//! ABI (`libmemreuse_mock_plugin.so`, entry `memreuse_backend_v1`).
//!
//! Every entry forwards to the mock's `Backend` and `Communicator` methods, so the built-in
//! suite run through the loader gives the mock's digests, races and figures: the proof
//! that the ABI carries everything a backend is (streams, events, the race detector's
//! reports, virtual memory, collectives and point-to-point). It is also the way to
//! measure what the boundary costs per call.
//!
//! Nothing unwinds across the boundary: every entry runs under `catch_unwind`, a panic is
//! `MR_ERR_INTERNAL` with a message.

mod comm;
mod device;
mod status;

use memreuse_plugin::abi::{ABI_MAJOR, ABI_MINOR, API_SIZE_V1_1, MrBackendApi};

/// The table, built once at compile time.
struct Table(MrBackendApi);

// SAFETY: the table is immutable; its pointers are function pointers and pointers to
// static strings.
unsafe impl Sync for Table {}

const NAME: &str = "mock";
const SUMMARY: &str = "the strict simulated device (memreuse-mock) exported through the plugin ABI";

static API: Table = Table(MrBackendApi {
    struct_size: API_SIZE_V1_1,
    abi_major: ABI_MAJOR,
    abi_minor: ABI_MINOR,
    name: NAME.as_ptr().cast(),
    name_len: NAME.len(),
    summary: SUMMARY.as_ptr().cast(),
    summary_len: SUMMARY.len(),
    last_error: Some(status::last_error),
    device_count: Some(device::device_count),
    device_open: Some(device::device_open),
    device_close: Some(device::device_close),
    memory_info: Some(device::memory_info),
    capabilities: Some(device::capabilities),
    malloc: Some(device::malloc),
    free: Some(device::free),
    default_stream: Some(device::default_stream),
    stream_create: Some(device::stream_create),
    stream_destroy: Some(device::stream_destroy),
    stream_id: Some(device::stream_id),
    event_create: Some(device::event_create),
    event_destroy: Some(device::event_destroy),
    event_record: Some(device::event_record),
    event_query: Some(device::event_query),
    event_synchronize: Some(device::event_synchronize),
    stream_wait_event: Some(device::stream_wait_event),
    stream_synchronize: Some(device::stream_synchronize),
    device_synchronize: Some(device::device_synchronize),
    memset_zero: Some(device::memset_zero),
    copy_host_to_device: Some(device::copy_host_to_device),
    copy_device_to_host: Some(device::copy_device_to_host),
    copy_device_to_device: Some(device::copy_device_to_device),
    delay: Some(device::delay),
    device_async_error: Some(device::device_async_error),
    vm_granularity: Some(device::vm_granularity),
    vm_reserve: Some(device::vm_reserve),
    vm_release: Some(device::vm_release),
    vm_create_physical: Some(device::vm_create_physical),
    vm_release_physical: Some(device::vm_release_physical),
    vm_map: Some(device::vm_map),
    vm_unmap: Some(device::vm_unmap),
    world_open: Some(comm::world_open),
    comm_unique_id: None,
    comm_init_rank: None,
    comm_rank_size: Some(comm::comm_rank_size),
    comm_new_group: Some(comm::comm_new_group),
    comm_destroy: Some(comm::comm_destroy),
    comm_abort: Some(comm::comm_abort),
    comm_async_error: Some(comm::comm_async_error),
    all_reduce: Some(comm::all_reduce),
    all_gather: Some(comm::all_gather),
    reduce_scatter: Some(comm::reduce_scatter),
    all_to_all: Some(comm::all_to_all),
    broadcast: Some(comm::broadcast),
    send: Some(comm::send),
    recv: Some(comm::recv),
    group_start: Some(comm::group_start),
    group_end: Some(comm::group_end),
    barrier: Some(comm::barrier),
    annotate_allocation: Some(device::annotate_allocation),
    set_op_label: Some(device::set_op_label),
    race_report_count: Some(device::race_report_count),
    race_report_get: Some(device::race_report_get),
    extensions: std::ptr::null(),
});

/// The plugin's entry symbol (ABI major 1).
#[unsafe(no_mangle)]
pub extern "C" fn memreuse_backend_v1() -> *const MrBackendApi {
    &raw const API.0
}
