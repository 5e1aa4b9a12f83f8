//! The device-level contract every [`Backend`] must keep, as checks a port can run.
//!
//! A vendor porting memreuse to a new accelerator implements [`Backend`] (and, for the
//! collective suite, a [`crate::comm::Communicator`]); before the conformance suite replays
//! collective schedules on it, [`check_backend`] checks the device layer alone: memory,
//! stream order, events ordering streams, typed out-of-memory, refused arguments,
//! `malloc(0)` and the declared allocation alignment
//! ([`crate::Capabilities::allocation_alignment`]), and the caching allocator running on it. Every backend in this repository runs it in its tests
//! (the mock, the manual backend, the Ascend FFI path against its stand-in, and CUDA on a
//! GPU), so a port is held to the same bar.
//!
//! Checks never panic on a misbehaving backend: each returns what went wrong (a backend
//! method that panics is caught and reported as that check's violation; a check that stops
//! early synchronizes the device before freeing its buffers, and leaves them allocated
//! when that synchronize fails), and
//! [`ContractReport::assert_passed`] turns the report into one test failure that lists
//! every violation.

use std::fmt;
use std::sync::Arc;

use crate::allocator::{AllocatorConfig, CachingAllocator};
use crate::backend::Backend;
use crate::ids::DevicePtr;

/// What [`check_backend`] may assume about the backend under test.
#[derive(Clone, Debug)]
pub struct ContractOptions {
    /// Copies move real data (false for [`super::ManualBackend`], whose copies read zeros):
    /// the data checks are skipped when false.
    pub moves_data: bool,
    /// A request the device must refuse with [`crate::BackendError::OutOfMemory`]
    /// (more than its capacity); `None` skips the check.
    pub oom_request: Option<u64>,
    /// Freeing an address the backend never handed out must be an error (backends that
    /// can check it: the mock, the stand-ins). Real drivers may not say; leave it off there.
    pub checks_addresses: bool,
    /// Busy time enqueued ahead of cross-stream work, so that a backend ignoring an event
    /// wait is caught reading data not yet written (a no-op where `delay` is).
    pub delay_micros: u64,
    /// Streams complete enqueued work on their own (false for the manual backend, whose
    /// streams only move when a test advances them): the event checks are skipped when
    /// false.
    pub streams_progress: bool,
}

impl Default for ContractOptions {
    fn default() -> Self {
        ContractOptions {
            moves_data: true,
            oom_request: Some(1 << 62),
            checks_addresses: false,
            delay_micros: 2_000,
            streams_progress: true,
        }
    }
}

/// One broken rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContractViolation {
    /// The check that found it.
    pub check: &'static str,
    /// What the backend did.
    pub what: String,
}

impl fmt::Display for ContractViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.check, self.what)
    }
}

/// The outcome of [`check_backend`].
#[derive(Clone, Debug, Default)]
pub struct ContractReport {
    /// Checks that ran and held.
    pub passed: Vec<&'static str>,
    /// Checks skipped by the options, with the option that skipped them.
    pub skipped: Vec<(&'static str, &'static str)>,
    /// Broken rules.
    pub violations: Vec<ContractViolation>,
}

impl ContractReport {
    /// Panics with every violation listed, for use in a test.
    ///
    /// # Panics
    /// When any check failed.
    pub fn assert_passed(&self) {
        assert!(
            self.violations.is_empty(),
            "backend contract broken:\n{}",
            self.violations
                .iter()
                .map(|v| format!("  - {v}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

type CheckResult = Result<(), String>;

/// Turns a backend error into a violation message naming the call.
fn call<T, E: fmt::Display>(what: &str, r: Result<T, E>) -> Result<T, String> {
    r.map_err(|e| format!("{what} failed: {e}"))
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
        .collect()
}

/// Runs every check on `backend` and reports each one.
pub fn check_backend<B: Backend>(backend: &Arc<B>, options: &ContractOptions) -> ContractReport {
    let mut report = ContractReport::default();
    let b = backend.as_ref();
    let mut run =
        |name: &'static str, skip: Option<&'static str>, check: &dyn Fn() -> CheckResult| {
            if let Some(why) = skip {
                report.skipped.push((name, why));
                return;
            }
            // A backend with a race detector (the mock) also judges by happens-before, so
            // a missing wait is caught even when the timing happened to hide it in the
            // bytes.
            let races_before = b.race_reports().map_or(0, |r| r.len());
            // A port's method that panics (an `unimplemented!()`, a missing symbol) is a
            // violation of this check, not the end of the report.
            let checked = guarded(check);
            let outcome = checked.and_then(|()| match b.race_reports() {
                Some(races) if races.len() > races_before => Err(format!(
                    "the backend's race detector flagged {} race(s), first: {}",
                    races.len() - races_before,
                    races[races_before]
                )),
                _ => Ok(()),
            });
            match outcome {
                Ok(()) => report.passed.push(name),
                Err(what) => report
                    .violations
                    .push(ContractViolation { check: name, what }),
            }
        };
    let no_data = (!options.moves_data).then_some("moves_data = false");
    let no_progress = (!options.streams_progress).then_some("streams_progress = false");
    run("identity", None, &|| identity(b));
    run("malloc_zero", None, &|| malloc_zero(b));
    run("allocation_alignment", None, &|| allocation_alignment(b));
    run("copies_round_trip", no_data, &|| copies_round_trip(b));
    run("stream_order", no_data, &|| stream_order(b));
    run("event_orders_streams", no_data.or(no_progress), &|| {
        event_orders_streams(b, options.delay_micros)
    });
    run("event_query_and_sync", no_progress, &|| {
        event_query_and_sync(b, options.delay_micros)
    });
    run(
        "out_of_memory_is_typed",
        options
            .oom_request
            .is_none()
            .then_some("oom_request = None"),
        &|| out_of_memory_is_typed(b, options.oom_request.unwrap_or(0)),
    );
    run(
        "unknown_address_refused",
        (!options.checks_addresses).then_some("checks_addresses = false"),
        &|| unknown_address_refused(b),
    );
    run("virtual_memory", None, &|| {
        super::contract_vm::virtual_memory(b)
    });
    run("caching_allocator_runs", None, &|| {
        caching_allocator_runs(backend, options.moves_data)
    });
    report
}

fn identity<B: Backend>(b: &B) -> CheckResult {
    if b.name().is_empty() {
        return Err("name() is empty".into());
    }
    let d = b.default_stream();
    if b.stream_id(&d) != b.stream_id(&d.clone()) {
        return Err("two handles to the default stream have different ids".into());
    }
    let s1 = call("create_stream", b.create_stream())?;
    let s2 = call("create_stream", b.create_stream())?;
    let ids = [b.stream_id(&d), b.stream_id(&s1), b.stream_id(&s2)];
    if ids[0] == ids[1] || ids[0] == ids[2] || ids[1] == ids[2] {
        return Err(format!("streams share an id: {ids:?}"));
    }
    let info = call("memory_info", b.memory_info())?;
    if info.free > info.total {
        return Err(format!(
            "memory_info: free {} exceeds total {}",
            info.free, info.total
        ));
    }
    Ok(())
}

/// Runs `f`, turning a panic of the backend into a violation message.
fn guarded(f: impl FnOnce() -> CheckResult) -> CheckResult {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        let msg = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a non-string payload".to_owned());
        Err(format!("the backend panicked: {msg}"))
    })
}

/// Allocates two buffers of `len` bytes, runs `f`, and frees both whatever `f` returned.
fn with_buffers<B: Backend>(
    b: &B,
    len: u64,
    f: impl FnOnce(DevicePtr, DevicePtr) -> CheckResult,
) -> CheckResult {
    let x = call("malloc", b.malloc(len))?;
    let y = match b.malloc(len) {
        Ok(y) => y,
        Err(e) => {
            let _ = b.free(x);
            return Err(format!("malloc failed: {e}"));
        }
    };
    // Caught here as well as around the check, so that the buffers are freed.
    let out = guarded(|| f(x, y));
    // A check that stopped early may have left work on the buffers: never free memory
    // the device may still write (the `free` contract), whatever the outcome. If the
    // device cannot even be synchronized, nothing says the work is over: the buffers are
    // left allocated (a leak the violation reports) rather than freed under running work.
    if let Err(e) = b.synchronize_device() {
        return out.and(Err(format!(
            "synchronize_device failed: {e}; the check's two buffers were left allocated \
             rather than freed while work may still use them"
        )));
    }
    let freed = call("free", b.free(x)).and(call("free", b.free(y)));
    out.and(freed)
}

/// `malloc(0)` is either refused with an error that is not out-of-memory (which would
/// send the allocator into its free-cache-and-retry chain for nothing) or returns a
/// pointer `free` takes.
fn malloc_zero<B: Backend>(b: &B) -> CheckResult {
    match b.malloc(0) {
        Ok(p) => call("free of malloc(0)'s pointer", b.free(p)),
        Err(e) if e.is_out_of_memory() => Err(format!(
            "malloc(0) failed with out-of-memory ({e}); the contract allows a refused \
             argument (InvalidArgument, or the vendor's invalid-parameter status) or a \
             pointer that free accepts"
        )),
        Err(_) => Ok(()),
    }
}

/// Every `malloc` result is aligned to the declared `allocation_alignment`.
fn allocation_alignment<B: Backend>(b: &B) -> CheckResult {
    let align = b.capabilities().allocation_alignment;
    if !align.is_power_of_two() {
        return Err(format!(
            "capabilities().allocation_alignment is {align}, not a power of two"
        ));
    }
    let mut held = Vec::new();
    let mut out = Ok(());
    for bytes in [1, 3, 100, 257, 4097, 65_537] {
        match b.malloc(bytes) {
            Ok(p) => {
                held.push(p);
                if p.addr() % align != 0 {
                    out = Err(format!(
                        "malloc({bytes}) returned {p}, not a multiple of the declared \
                         allocation_alignment {align}"
                    ));
                    break;
                }
            }
            Err(e) => {
                out = Err(format!("malloc({bytes}) failed: {e}"));
                break;
            }
        }
    }
    for p in held {
        out = out.and(call("free", b.free(p)));
    }
    out
}

fn read<B: Backend>(b: &B, src: DevicePtr, len: usize, s: &B::Stream) -> Result<Vec<u8>, String> {
    let mut out = vec![0u8; len];
    call(
        "copy_device_to_host",
        b.copy_device_to_host(&mut out, src, s),
    )?;
    Ok(out)
}

fn copies_round_trip<B: Backend>(b: &B) -> CheckResult {
    const LEN: usize = 4096;
    let s = b.default_stream();
    with_buffers(b, LEN as u64, |x, y| {
        let data = pattern(LEN, 7);
        call("copy_host_to_device", b.copy_host_to_device(x, &data, &s))?;
        call(
            "copy_device_to_device",
            b.copy_device_to_device(y, x, LEN as u64, &s),
        )?;
        if read(b, y, LEN, &s)? != data {
            return Err("H2D then D2D then D2H did not give the bytes back".into());
        }
        call("memset_zero", b.memset_zero(y.offset(1024), 1024, &s))?;
        let got = read(b, y, LEN, &s)?;
        let mut want = data;
        want[1024..2048].fill(0);
        if got != want {
            return Err("memset_zero of [1024, 2048) did not zero exactly that range".into());
        }
        Ok(())
    })
}

fn stream_order<B: Backend>(b: &B) -> CheckResult {
    const LEN: usize = 1 << 16;
    let s = call("create_stream", b.create_stream())?;
    with_buffers(b, LEN as u64, |x, _| {
        // Three writes to the same bytes, enqueued back to back: only stream order makes
        // the last one win.
        call(
            "copy_host_to_device",
            b.copy_host_to_device(x, &pattern(LEN, 1), &s),
        )?;
        call("memset_zero", b.memset_zero(x, LEN as u64, &s))?;
        let tail = pattern(LEN / 2, 2);
        call(
            "copy_host_to_device",
            b.copy_host_to_device(x.offset(LEN as u64 / 2), &tail, &s),
        )?;
        let got = read(b, x, LEN, &s)?;
        if got[..LEN / 2].iter().any(|&v| v != 0) || got[LEN / 2..] != tail[..] {
            return Err("work on one stream did not run in enqueue order".into());
        }
        Ok(())
    })
}

fn event_orders_streams<B: Backend>(b: &B, delay_micros: u64) -> CheckResult {
    const LEN: usize = 1 << 16;
    let producer = call("create_stream", b.create_stream())?;
    let consumer = call("create_stream", b.create_stream())?;
    with_buffers(b, LEN as u64, |x, y| {
        call("memset_zero", b.memset_zero(y, LEN as u64, &consumer))?;
        call("synchronize_device", b.synchronize_device())?;
        let data = pattern(LEN, 3);
        call("delay", b.delay(delay_micros, &producer))?;
        call(
            "copy_host_to_device",
            b.copy_host_to_device(x, &data, &producer),
        )?;
        let ev = call("create_event", b.create_event())?;
        call("record_event", b.record_event(&ev, &producer))?;
        call("stream_wait_event", b.stream_wait_event(&consumer, &ev))?;
        call(
            "copy_device_to_device",
            b.copy_device_to_device(y, x, LEN as u64, &consumer),
        )?;
        if read(b, y, LEN, &consumer)? != data {
            return Err(
                "a copy on the consumer stream, after waiting on an event recorded after the producer's write, did not see that write"
                    .into(),
            );
        }
        Ok(())
    })
}

fn event_query_and_sync<B: Backend>(b: &B, delay_micros: u64) -> CheckResult {
    let s = call("create_stream", b.create_stream())?;
    call("delay", b.delay(delay_micros, &s))?;
    let ev = call("create_event", b.create_event())?;
    call("record_event", b.record_event(&ev, &s))?;
    call("synchronize_event", b.synchronize_event(&ev))?;
    if !call("query_event", b.query_event(&ev))? {
        return Err("query_event is false after synchronize_event returned".into());
    }
    // Re-recording moves the event to the stream's new tail.
    call("record_event", b.record_event(&ev, &s))?;
    call("synchronize_stream", b.synchronize_stream(&s))?;
    if !call("query_event", b.query_event(&ev))? {
        return Err("query_event is false after synchronize_stream of its stream".into());
    }
    call("synchronize_device", b.synchronize_device())
}

fn out_of_memory_is_typed<B: Backend>(b: &B, request: u64) -> CheckResult {
    match b.malloc(request) {
        Ok(p) => {
            let _ = b.free(p);
            Err(format!("malloc({request}) succeeded; expected OutOfMemory"))
        }
        Err(e) if e.is_out_of_memory() => {
            // The device is still usable.
            let p = call("malloc after out-of-memory", b.malloc(4096))?;
            call("free after out-of-memory", b.free(p))
        }
        Err(e) => Err(format!(
            "malloc({request}) failed with a non-OOM error, so the allocator's retry chain would not run: {e}"
        )),
    }
}

fn unknown_address_refused<B: Backend>(b: &B) -> CheckResult {
    let p = call("malloc", b.malloc(4096))?;
    let inner = b.free(p.offset(8));
    if inner.is_ok() {
        // It may have released the allocation: do not free it again.
        return Err("free of an address inside an allocation succeeded".into());
    }
    call("free", b.free(p))?;
    let double = b.free(p);
    if double.is_ok() {
        return Err("a second free of the same address succeeded".into());
    }
    Ok(())
}

fn caching_allocator_runs<B: Backend>(backend: &Arc<B>, moves_data: bool) -> CheckResult {
    let alloc = CachingAllocator::new(Arc::clone(backend), AllocatorConfig::default());
    let s = backend.default_stream();
    let a = call("allocate", alloc.allocate(1000, &s))?;
    let addr = a.ptr();
    if moves_data {
        let data = pattern(1000, 9);
        call(
            "copy_host_to_device",
            backend.copy_host_to_device(a.ptr(), &data, &s),
        )?;
        if read(backend.as_ref(), a.ptr(), 1000, &s)? != data {
            return Err("bytes written to an allocator block did not read back".into());
        }
    }
    drop(a);
    let b2 = call("allocate", alloc.allocate(1000, &s))?;
    if b2.ptr() != addr {
        return Err(format!(
            "a freed block was not reused by the same-size request on its stream ({addr} then {})",
            b2.ptr()
        ));
    }
    drop(b2);
    call("empty_cache", alloc.empty_cache())?;
    let st = alloc.stats();
    if st.reserved_bytes.aggregate.current != 0 || st.num_device_alloc != st.num_device_free {
        return Err(format!(
            "after empty_cache: reserved {} bytes, {} device allocs vs {} frees",
            st.reserved_bytes.aggregate.current, st.num_device_alloc, st.num_device_free
        ));
    }
    Ok(())
}
