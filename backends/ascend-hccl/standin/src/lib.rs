//! memreuse-ascend-standin: one cdylib exporting the ACL runtime **and** HCCL symbols with
//! the exact C signatures of CANN's headers, backed by the memreuse mock device, so that CI
//! drives `memreuse-ascend`'s real FFI path without an NPU. It refuses what the runtime
//! documents as unsupported (`backends/ascend-hccl/docs/usage-rules.md`) and comes in
//! install profiles: separate builds for different exported symbols (features `cann80`:
//! no `HcclGroupStart`/`HcclGroupEnd`/`HcclBarrier`; `cann85`: the group symbols in a
//! `libhcomm.so` this library links), behaviour bits chosen at run time
//! (`MEMREUSE_STANDIN_BEHAVIOUR`, `harness.rs`).
//!
//! **Tests and CI only.** The test harness symlinks the built `.so` as `libascendcl.so` and
//! `libhccl.so` in a temporary directory and points `MEMREUSE_ASCEND_LIB_DIR` there; nothing
//! installs it, and no default search path of the backend can reach it.
//!
//! Design (the ACL/HCCL face of `memreuse-standin-engine`, which holds the cluster cell,
//! handle tables, the export guard, call counters, fault injection and the common hooks):
//! - **Devices**: one [`memreuse_mock::MockCluster`] of N devices per configuration (default
//!   16 devices of [`memreuse_mock::DEFAULT_CAPACITY`] each), so capacity limits and the race
//!   detector apply and joint ops (collectives) can span devices. The current device is per
//!   thread (`aclrtSetDevice`), as in ACL.
//! - **Handles** (streams, events, communicators) are entries of a table keyed by opaque,
//!   pointer-looking integers; an unknown or destroyed handle is an error code, never UB.
//!   The null stream is the current device's default stream.
//! - **Communicators**: `HcclCommInitRootInfo` rendezvous in process, keyed by the 4108
//!   root-info bytes; collectives are joint ops of the mock (`JointGroup`/`JointOp`),
//!   point-to-point uses one two-rank joint group per (sender, receiver) pair, and
//!   `HcclGroupStart`/`HcclGroupEnd` submit the thread's pending sends and receives as one
//!   batch per stream.
//! - **Errors**: every exported function runs under `catch_unwind` (a panic becomes
//!   `ACL_ERROR_INTERNAL_ERROR` / `HCCL_E_INTERNAL`); bad arguments return the ACL/HCCL code
//!   the real runtime documents (null pointer, zero size, unknown handle, `count > destMax`,
//!   misaligned device-to-device copy), device OOM returns `ACL_ERROR_RT_MEMORY_ALLOCATION`.
//! - **Virtual memory** (`vm.rs`): `aclrtReserveMemAddress` and the rest of the
//!   expandable-segment calls over the mock's virtual memory, with the runtime's documented
//!   argument rules.
//! - **Harness hooks** (`memreuse_standin_*`, see `harness.rs`): configure a fresh cluster,
//!   allocation annotations and op labels for the race detector, delays, race reports, fault
//!   injection (the engine's, plus HCCL's communicator faults), per-symbol call counters.

#[cfg(all(feature = "cann80", feature = "cann85"))]
compile_error!("features `cann80` and `cann85` are different installs: enable one");

mod acl;
mod events;
mod harness;
mod hccl;
mod hccl_p2p;
#[cfg(feature = "cann85")]
mod hcomm_link;
mod vm;

use std::sync::Arc;
use std::sync::atomic::AtomicI32;
use std::time::Duration;

use memreuse_core::BackendError;
use memreuse_mock::{JointGroup, MockDevice, MockEvent, MockStream, PairGroups};
use memreuse_standin_engine::{ClusterCell, HandleTable};
// Every export runs under the engine's guard; out-pointers are written by its `write_out`.
use memreuse_standin_engine::{guard, write_out};

/// ACL status codes the stand-in returns.
mod code {
    pub const INVALID_PARAM: i32 = 100_000;
    pub const RT_PARAM_INVALID: i32 = 107_000;
    pub const RT_CONTEXT_NULL: i32 = 107_002;
    pub const RT_DEVICE_TASK_ABORT: i32 = 107_022;
    pub const RT_FEATURE_NOT_SUPPORT: i32 = 207_000;
    pub const INVALID_DEVICE: i32 = 200_002;
    pub const RT_MEMORY_ALLOCATION: i32 = 207_001;
    pub const INTERNAL_ERROR: i32 = 500_000;
    pub const RT_INTERNAL_ERROR: i32 = 507_000;
    pub const RT_STREAM_NOT_COMPLETE: i32 = 507_004;
    pub const RT_STREAM_SYNC_TIMEOUT: i32 = 507_046;
}

/// HCCL result codes the stand-in returns.
mod hcode {
    pub const E_PARA: i32 = 1;
    pub const E_PTR: i32 = 2;
    pub const E_INTERNAL: i32 = 4;
    pub const E_NOT_SUPPORT: i32 = 5;
    pub const E_TIMEOUT: i32 = 9;
    pub const E_RUNTIME: i32 = 15;
    pub const E_AGAIN: i32 = 20;
}

/// The configured cluster (the engine creates the default one on first use).
static CLUSTER: ClusterCell<()> = ClusterCell::new(|_| ());

fn device_count() -> usize {
    CLUSTER.device_count()
}

fn device_at(index: usize) -> Option<MockDevice> {
    CLUSTER.device(index)
}

fn joint_timeout() -> Duration {
    CLUSTER.timeout()
}

thread_local! {
    /// The thread's current device index (`aclrtSetDevice`), -1 when none.
    static CURRENT: std::cell::Cell<i32> = const { std::cell::Cell::new(-1) };
}

/// The current device of this thread, or `ACL_ERROR_RT_CONTEXT_NULL`.
fn current() -> Result<(usize, MockDevice), i32> {
    let i = CURRENT.with(std::cell::Cell::get);
    let idx = usize::try_from(i).map_err(|_| code::RT_CONTEXT_NULL)?;
    device_at(idx)
        .map(|d| (idx, d))
        .ok_or(code::RT_CONTEXT_NULL)
}

/// A stream handle's target.
#[derive(Clone)]
struct StreamH {
    device: MockDevice,
    stream: MockStream,
}

/// An event handle's target.
struct EventH {
    device: MockDevice,
    event: MockEvent,
    /// The creation flags (`ACL_EVENT_SYNC` = 1 is what `aclrtStreamWaitEvent` needs).
    flags: u32,
    /// Created by `aclrtCreateEventExWithFlag` (re-recordable, complete before a record).
    ex: bool,
    /// Recorded since creation or the last `aclrtResetEvent`.
    recorded: std::sync::atomic::AtomicBool,
}

/// What a communicator member shares with the others.
struct CommShared {
    devices: Vec<MockDevice>,
    collectives: JointGroup,
    /// Point-to-point: the mock's per-(sender, receiver) groups, so HcclSend/HcclRecv match
    /// in issue order exactly as the mock communicator's send/recv do.
    pairs: PairGroups,
    async_error: AtomicI32,
    /// `HcclCommDestroy` answers `HCCL_E_AGAIN` this many more times (harness: a busy
    /// communicator).
    busy_destroys: AtomicI32,
}

/// One rank's communicator handle.
struct CommMember {
    shared: Arc<CommShared>,
    rank: usize,
    /// Harness: this many more HCCL calls on this member block on the host (a call stuck
    /// inside HCCL) until the member is destroyed or the joint timeout passes.
    stuck_calls: AtomicI32,
    /// Calls blocked right now.
    blocked: AtomicI32,
    /// `HcclCommDestroy` succeeded on this member.
    destroyed: std::sync::atomic::AtomicBool,
}

/// A handle table entry.
#[derive(Clone)]
enum Handle {
    Stream(StreamH),
    Event(Arc<EventH>),
    Comm(Arc<CommMember>),
}

/// Streams, events and communicators.
static HANDLES: HandleTable<Handle> = HandleTable::new(0x5eed_0000);

fn insert_handle(h: Handle) -> usize {
    HANDLES.insert(h)
}

/// A fresh opaque handle value from the same sequence as the handle table's keys (for
/// tables kept elsewhere, such as physical memory handles in `vm.rs`).
pub(crate) fn next_handle_key() -> usize {
    HANDLES.next_key()
}

pub(crate) fn get_handle(key: usize) -> Option<Handle> {
    HANDLES.get(key)
}

fn live_streams() -> u64 {
    HANDLES.count(|h| matches!(h, Handle::Stream(_)))
}

fn remove_handle(key: usize) -> Option<Handle> {
    HANDLES.remove(key)
}

/// The stream behind `raw` (null: the current device's default stream).
fn stream_of(raw: *mut std::ffi::c_void) -> Result<StreamH, i32> {
    if raw.is_null() {
        let (_, device) = current()?;
        let stream = memreuse_core::Backend::default_stream(&device);
        return Ok(StreamH { device, stream });
    }
    match get_handle(raw as usize) {
        Some(Handle::Stream(s)) => Ok(s),
        _ => Err(code::RT_PARAM_INVALID),
    }
}

fn event_of(raw: *mut std::ffi::c_void) -> Result<Arc<EventH>, i32> {
    match get_handle(raw as usize) {
        Some(Handle::Event(e)) => Ok(e),
        _ => Err(code::RT_PARAM_INVALID),
    }
}

pub(crate) fn comm_of(raw: *mut std::ffi::c_void) -> Result<Arc<CommMember>, i32> {
    if raw.is_null() {
        return Err(hcode::E_PTR);
    }
    match get_handle(raw as usize) {
        Some(Handle::Comm(c)) => Ok(c),
        _ => Err(hcode::E_PARA),
    }
}

/// The ACL code for a mock error.
fn acl_code(e: &BackendError) -> i32 {
    match e {
        BackendError::OutOfMemory { .. } => code::RT_MEMORY_ALLOCATION,
        BackendError::InvalidArgument { .. } => code::RT_PARAM_INVALID,
        // Work of a destroyed (aborted) communicator: the runtime's "task abort".
        BackendError::Device { code_name, .. } if code_name == "MOCK_GROUP_ABORTED" => {
            code::RT_DEVICE_TASK_ABORT
        }
        _ => code::RT_INTERNAL_ERROR,
    }
}

/// The HCCL code for a mock error.
fn hccl_code(e: &BackendError) -> i32 {
    match e {
        BackendError::InvalidArgument { .. } => hcode::E_PARA,
        BackendError::Timeout { .. } => hcode::E_TIMEOUT,
        _ => hcode::E_RUNTIME,
    }
}

/// Harness: where the CANN 8.5 variant's `libhcomm.so` was built (null for the others).
#[unsafe(no_mangle)]
extern "C" fn memreuse_standin_hcomm_path() -> *const std::ffi::c_char {
    #[cfg(feature = "cann85")]
    {
        concat!(env!("MEMREUSE_STANDIN_HCOMM"), "\0")
            .as_ptr()
            .cast()
    }
    #[cfg(not(feature = "cann85"))]
    {
        std::ptr::null()
    }
}
