//! What every face shares: the configured mock cluster, the handle table (contexts,
//! streams, events, communicators), the thread's current context, call counters and the
//! guard every export runs under.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use memreuse_core::BackendError;
use memreuse_mock::{MockConfig, MockDevice, MockEvent, MockStream};
use memreuse_standin_engine::{Cluster, ClusterCell, HandleTable};
// Every export runs under the engine's guard; out-pointers are written by its `write_out`.
pub(crate) use memreuse_standin_engine::write_out;

use crate::codes;

/// The configured cluster; per configuration, per device: the primary context's handle
/// and its retain count.
pub(crate) type State = Cluster<Vec<(usize, u32)>>;

static STATE: ClusterCell<Vec<(usize, u32)>> =
    ClusterCell::new(|n| (0..n).map(|_| (next_handle_key(), 0)).collect());

/// `cuInit` succeeded in this process.
pub(crate) static INITIALIZED: AtomicBool = AtomicBool::new(false);

/// Replaces the cluster: every stream and event of the old one becomes unknown (the
/// harness also resets the memory, virtual-memory and communicator tables).
pub(crate) fn configure(n: usize, config: MockConfig) -> Result<(), BackendError> {
    STATE.configure(n, config)?;
    HANDLES.clear();
    Ok(())
}

/// Runs `f` on the state, creating the default configuration on first use.
pub(crate) fn with_state<T>(f: impl FnOnce(&mut State) -> T) -> Result<T, u32> {
    STATE.with(f).map_err(|_| codes::UNKNOWN)
}

pub(crate) fn device_count() -> usize {
    STATE.device_count()
}

pub(crate) fn device_at(index: usize) -> Option<MockDevice> {
    STATE.device(index)
}

pub(crate) fn timeout() -> Duration {
    STATE.timeout()
}

/// Races found on every device.
pub(crate) fn race_count() -> u64 {
    STATE.race_count()
}

/// A stream handle's target.
#[derive(Clone)]
pub(crate) struct StreamH {
    /// The context it was created in.
    pub ctx: usize,
    pub index: usize,
    pub device: MockDevice,
    pub stream: MockStream,
}

/// An event handle's target.
pub(crate) struct EventH {
    pub ctx: usize,
    pub device: MockDevice,
    pub event: MockEvent,
}

/// A handle table entry.
#[derive(Clone)]
pub(crate) enum Handle {
    Stream(StreamH),
    Event(Arc<EventH>),
}

/// Streams and events (communicators have their own table in `nccl.rs`, keyed from the
/// same sequence).
static HANDLES: HandleTable<Handle> = HandleTable::new(0x7c0d_0000);

/// A fresh opaque, pointer-looking handle value (never 0, 1 or 2: CUDA's special streams).
pub(crate) fn next_handle_key() -> usize {
    HANDLES.next_key()
}

pub(crate) fn insert_handle(h: Handle) -> usize {
    HANDLES.insert(h)
}

pub(crate) fn get_handle(key: usize) -> Option<Handle> {
    HANDLES.get(key)
}

pub(crate) fn remove_handle(key: usize) -> Option<Handle> {
    HANDLES.remove(key)
}

/// Removes every stream and event of context `ctx` (it was destroyed).
pub(crate) fn remove_context_handles(ctx: usize) {
    HANDLES.retain(|h| match h {
        Handle::Stream(s) => s.ctx != ctx,
        Handle::Event(e) => e.ctx != ctx,
    });
}

/// The live streams of context `ctx`.
pub(crate) fn context_streams(ctx: usize) -> Vec<StreamH> {
    HANDLES.collect(|h| match h {
        Handle::Stream(s) if s.ctx == ctx => Some(s.clone()),
        _ => None,
    })
}

/// Stream handles not destroyed.
pub(crate) fn live_streams() -> u64 {
    HANDLES.count(|h| matches!(h, Handle::Stream(_)))
}

thread_local! {
    /// The thread's current context handle (0: none), as `cuCtxSetCurrent` left it.
    pub(crate) static CURRENT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The current context of this thread: (context handle, device index, device), or
/// `CUDA_ERROR_INVALID_CONTEXT` when there is none or it was destroyed.
pub(crate) fn current() -> Result<(usize, usize, MockDevice), u32> {
    let ctx = CURRENT.with(std::cell::Cell::get);
    if ctx == 0 {
        return Err(codes::INVALID_CONTEXT);
    }
    context_device(ctx).ok_or(codes::INVALID_CONTEXT)
}

/// The device of an active (retained) primary context.
pub(crate) fn context_device(ctx: usize) -> Option<(usize, usize, MockDevice)> {
    with_state(|s| {
        let index = s.extra.iter().position(|&(h, refs)| h == ctx && refs > 0)?;
        Some((ctx, index, s.devices[index].clone()))
    })
    .ok()
    .flatten()
}

/// Runs an exported function's body under the engine's guard (call counted, injected
/// failure answered, panic caught), printing a refused call when tracing.
pub(crate) fn guard(
    name: &'static str,
    panic_code: u32,
    f: impl FnOnce() -> Result<(), u32>,
) -> u32 {
    let code = memreuse_standin_engine::guard(name, panic_code, f);
    if code != 0 && tracing() {
        eprintln!("memreuse-cuda-standin: {name} -> {code}");
    }
    code
}

/// `MEMREUSE_STANDIN_TRACE` is set: every refused call is printed to stderr with its code
/// (and the mock's reason, when the mock refused it).
pub(crate) fn tracing() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("MEMREUSE_STANDIN_TRACE").is_some())
}

/// A driver entry point: [`guard`] after the `cuInit` check (`CUDA_ERROR_NOT_INITIALIZED`).
pub(crate) fn driver(name: &'static str, f: impl FnOnce() -> Result<(), u32>) -> u32 {
    guard(name, codes::UNKNOWN, || {
        if !INITIALIZED.load(Ordering::Acquire) {
            return Err(codes::NOT_INITIALIZED);
        }
        f()
    })
}

/// The driver code for a mock error.
pub(crate) fn cu_code(e: &BackendError) -> u32 {
    if tracing() {
        eprintln!("memreuse-cuda-standin: the mock refused: {e}");
    }
    match e {
        BackendError::OutOfMemory { .. } => codes::OUT_OF_MEMORY,
        BackendError::InvalidArgument { .. } => codes::INVALID_VALUE,
        // Device work that failed (a collective whose peers never came, an aborted
        // communicator's work, an injected fault): the driver's "launch failed".
        BackendError::Timeout { .. }
        | BackendError::Device { .. }
        | BackendError::Injected { .. } => codes::LAUNCH_FAILED,
        _ => codes::UNKNOWN,
    }
}
