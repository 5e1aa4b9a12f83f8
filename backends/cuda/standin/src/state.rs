//! What every face shares: the configured mock cluster, the handle table (contexts,
//! streams, events, communicators), the thread's current context, call counters and the
//! guard every export runs under.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use memreuse_core::BackendError;
use memreuse_mock::{DEFAULT_CAPACITY, MockCluster, MockConfig, MockDevice, MockEvent, MockStream};
use parking_lot::Mutex;

use crate::codes;

/// Devices of the configuration a process starts with (every built-in schedule fits).
pub const DEFAULT_DEVICES: usize = 16;

/// The configured cluster.
pub(crate) struct State {
    pub devices: Vec<MockDevice>,
    pub timeout: Duration,
    /// Per device: the primary context's handle and its retain count.
    pub primary: Vec<(usize, u32)>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

/// `cuInit` succeeded in this process.
pub(crate) static INITIALIZED: AtomicBool = AtomicBool::new(false);

/// Replaces the cluster: every stream and event of the old one becomes unknown (the
/// harness also resets the memory, virtual-memory and communicator tables).
pub(crate) fn configure(n: usize, config: MockConfig) -> Result<(), BackendError> {
    let timeout = config.joint_timeout;
    let devices = MockCluster::new(n, config)?.into_devices();
    let primary = (0..n).map(|_| (next_handle_key(), 0)).collect();
    HANDLES.lock().take();
    *STATE.lock() = Some(State {
        devices,
        timeout,
        primary,
    });
    Ok(())
}

/// Runs `f` on the state, creating the default configuration on first use.
pub(crate) fn with_state<T>(f: impl FnOnce(&mut State) -> T) -> Result<T, u32> {
    let mut guard = STATE.lock();
    if guard.is_none() {
        drop(guard);
        configure(DEFAULT_DEVICES, MockConfig::with_capacity(DEFAULT_CAPACITY))
            .map_err(|_| codes::UNKNOWN)?;
        guard = STATE.lock();
    }
    let state = guard.as_mut().ok_or(codes::UNKNOWN)?;
    Ok(f(state))
}

pub(crate) fn device_count() -> usize {
    with_state(|s| s.devices.len()).unwrap_or(0)
}

pub(crate) fn device_at(index: usize) -> Option<MockDevice> {
    with_state(|s| s.devices.get(index).cloned()).ok().flatten()
}

pub(crate) fn timeout() -> Duration {
    with_state(|s| s.timeout).unwrap_or(Duration::from_secs(60))
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

static HANDLES: Mutex<Option<HashMap<usize, Handle>>> = Mutex::new(None);
static NEXT_HANDLE: AtomicUsize = AtomicUsize::new(0x7c0d_0000);

/// A fresh opaque, pointer-looking handle value (never 0, 1 or 2: CUDA's special streams).
pub(crate) fn next_handle_key() -> usize {
    NEXT_HANDLE.fetch_add(0x40, Ordering::Relaxed)
}

pub(crate) fn insert_handle(h: Handle) -> usize {
    let key = next_handle_key();
    HANDLES
        .lock()
        .get_or_insert_with(HashMap::new)
        .insert(key, h);
    key
}

pub(crate) fn get_handle(key: usize) -> Option<Handle> {
    HANDLES.lock().as_ref().and_then(|m| m.get(&key).cloned())
}

pub(crate) fn remove_handle(key: usize) -> Option<Handle> {
    HANDLES.lock().as_mut().and_then(|m| m.remove(&key))
}

/// Removes every stream and event of context `ctx` (it was destroyed).
pub(crate) fn remove_context_handles(ctx: usize) {
    if let Some(m) = HANDLES.lock().as_mut() {
        m.retain(|_, h| match h {
            Handle::Stream(s) => s.ctx != ctx,
            Handle::Event(e) => e.ctx != ctx,
        });
    }
}

/// The live streams of context `ctx`.
pub(crate) fn context_streams(ctx: usize) -> Vec<StreamH> {
    HANDLES.lock().as_ref().map_or_else(Vec::new, |m| {
        m.values()
            .filter_map(|h| match h {
                Handle::Stream(s) if s.ctx == ctx => Some(s.clone()),
                _ => None,
            })
            .collect()
    })
}

/// Stream handles not destroyed.
pub(crate) fn live_streams() -> u64 {
    HANDLES.lock().as_ref().map_or(0, |m| {
        m.values()
            .filter(|h| matches!(h, Handle::Stream(_)))
            .count() as u64
    })
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
        let index = s
            .primary
            .iter()
            .position(|&(h, refs)| h == ctx && refs > 0)?;
        Some((ctx, index, s.devices[index].clone()))
    })
    .ok()
    .flatten()
}

static CALLS: Mutex<Option<HashMap<&'static str, u64>>> = Mutex::new(None);

pub(crate) fn calls_of(name: &str) -> u64 {
    CALLS
        .lock()
        .as_ref()
        .and_then(|m| m.get(name).copied())
        .unwrap_or(0)
}

/// Runs an exported function's body: counts the call, turns `Err(code)` and panics into a
/// status code, so nothing unwinds across the C boundary.
pub(crate) fn guard(
    name: &'static str,
    panic_code: u32,
    f: impl FnOnce() -> Result<(), u32>,
) -> u32 {
    *CALLS
        .lock()
        .get_or_insert_with(HashMap::new)
        .entry(name)
        .or_insert(0) += 1;
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(code)) => {
            if tracing() {
                eprintln!("memreuse-cuda-standin: {name} -> {code}");
            }
            code
        }
        Err(_) => panic_code,
    }
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

/// Writes `value` through an out-pointer after the null check.
///
/// # Safety
/// `out` is null or valid for a write of `T`.
pub(crate) unsafe fn write_out<T>(out: *mut T, value: T, null_code: u32) -> Result<(), u32> {
    if out.is_null() {
        return Err(null_code);
    }
    // SAFETY: not null (checked); valid for writes by the caller's contract.
    unsafe { out.write(value) };
    Ok(())
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
