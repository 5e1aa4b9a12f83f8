//! [`MockDevice`]: one simulated device, and its [`Backend`] implementation.

use std::sync::Arc;
use std::time::Duration;

use memreuse_core::race::{OpInfo, VClock};
use memreuse_core::{
    AccessKind, AllocationId, Backend, BackendError, Capabilities, DevicePtr, MemoryInfo,
    PhysicalHandle, RaceReport, StreamId,
};
use parking_lot::{Mutex, MutexGuard};

use crate::config::MockConfig;
use crate::device_vm;
use crate::error::{BACKEND_NAME, invalid};
use crate::executor::{advance, wait_until};
use crate::memory::Span;
use crate::region::MemAccess;
use crate::world::{Core, Op, StreamState, Work, World};

/// Stack of a stream's worker thread: it runs op bodies (copies, reductions) that never
/// recurse; a replay at world size 1024 runs thousands of them, so the default 2 MiB each
/// would reserve gigabytes of address space.
const WORKER_STACK_BYTES: usize = 256 << 10;

/// The stream id race reports use for the host (a raw `free` racing with device work).
pub use memreuse_core::race::HOST_STREAM;

/// Owns a cluster's execution: when the last device handle goes, the workers stop and
/// queued work is dropped.
pub(crate) struct Owner {
    pub core: Arc<Core>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        let leftovers = {
            let mut w = self.core.world.lock();
            w.shutdown = true;
            for st in &w.streams {
                st.wake.notify_all();
            }
            let queues: Vec<_> = w
                .streams
                .iter_mut()
                .map(|s| std::mem::take(&mut s.queue))
                .collect();
            let slots: Vec<_> = w
                .groups
                .iter_mut()
                .map(|g| std::mem::take(&mut g.slots))
                .collect();
            (queues, slots)
        };
        self.core.cv.notify_all();
        // Bodies may own arbitrary values: drop them without the lock held.
        drop(leftovers);
    }
}

/// One simulated device: real host memory (or unbacked addresses), asynchronous streams,
/// events, and a happens-before race detector. Cheap to clone (a handle).
///
/// Create one with [`MockDevice::new`], or several sharing an executor (for joint ops)
/// with [`crate::MockCluster::new`].
#[derive(Clone)]
pub struct MockDevice {
    pub(crate) owner: Arc<Owner>,
    pub(crate) slot: usize,
    index: usize,
}

impl std::fmt::Debug for MockDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MockDevice({})", self.index)
    }
}

/// A stream of a mock device. Plain data: equality and hashing follow the stream.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct MockStream {
    cluster: u64,
    device: usize,
    index: usize,
}

/// Where an event was last recorded.
#[derive(Clone)]
struct Recorded {
    stream: usize,
    /// The stream position it completes at.
    target: u64,
    /// The stream's clock at the recording.
    clock: VClock,
}

/// An event of a mock device.
pub struct MockEvent {
    cluster: u64,
    device: usize,
    state: Mutex<Option<Recorded>>,
}

impl std::fmt::Debug for MockEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let recorded = self.state.lock().as_ref().map(|r| (r.stream, r.target));
        write!(
            f,
            "MockEvent(device {}, recorded {recorded:?})",
            self.device
        )
    }
}

impl MockDevice {
    /// A standalone device (a cluster of one) with `config`.
    pub fn new(config: MockConfig) -> Result<MockDevice, BackendError> {
        let mut devices = crate::cluster::MockCluster::new(1, config)?.into_devices();
        devices
            .pop()
            .ok_or_else(|| crate::error::device("MockDevice::new", "no device created"))
    }

    pub(crate) fn from_parts(owner: Arc<Owner>, slot: usize, index: usize) -> MockDevice {
        MockDevice { owner, slot, index }
    }

    pub(crate) fn core(&self) -> &Core {
        &self.owner.core
    }

    /// The race detector's annotation of a hand-out (the part of `annotate_allocation`
    /// that takes the world lock).
    #[inline(never)]
    fn annotate_locked(&self, ptr: DevicePtr, bytes: u64, id: AllocationId) {
        self.core().world.lock().devices[self.slot]
            .detector
            .annotate(ptr.addr(), bytes, id);
    }

    /// The configuration of this device's cluster.
    pub fn config(&self) -> &MockConfig {
        &self.owner.core.config
    }

    /// The global stream index of `stream`, after checking it belongs to this device.
    pub(crate) fn stream_index(
        &self,
        stream: &MockStream,
        call: &'static str,
    ) -> Result<usize, BackendError> {
        if stream.cluster != self.core().uid || stream.device != self.slot {
            return Err(invalid(call, "stream belongs to another mock device"));
        }
        Ok(stream.index)
    }

    fn check_event(&self, event: &MockEvent, call: &'static str) -> Result<(), BackendError> {
        if event.cluster != self.core().uid || event.device != self.slot {
            return Err(invalid(call, "event belongs to another mock device"));
        }
        Ok(())
    }

    /// Validates declared accesses against this device's live allocations.
    pub(crate) fn spans(
        &self,
        w: &World,
        call: &'static str,
        accesses: &[MemAccess],
    ) -> Result<Vec<(Span, AccessKind)>, BackendError> {
        let memory = &w.devices[self.slot].memory;
        accesses
            .iter()
            .map(|a| Ok((memory.span(call, a.ptr.addr(), a.bytes)?, a.kind)))
            .collect()
    }

    /// Enqueues a plain op after validating its accesses; returns the stream's position
    /// after it and the stream's clock at that point.
    fn enqueue(
        &self,
        stream: &MockStream,
        call: &'static str,
        accesses: &[MemAccess],
        delay: Duration,
        work: impl FnOnce(&[(Span, AccessKind)]) -> Work,
    ) -> Result<(MutexGuard<'_, World>, usize, u64, VClock), BackendError> {
        let mut w = self.core().world.lock();
        let s = self.stream_index(stream, call)?;
        let spans = self.spans(&w, call, accesses)?;
        let work = work(&spans);
        let info = w.begin_op(s, call, &spans);
        let pos = w.push(s, Op { info, delay, work });
        let clock = w.streams[s].clock.clone();
        self.core().cv.notify_all();
        Ok((w, s, pos, clock))
    }

    /// Host-observed completion: everything `clock` knows happened before the host's next
    /// decisions on this device.
    fn observe(&self, w: &mut World, clock: &VClock) {
        w.devices[self.slot].host.join(clock);
    }

    /// Enqueues a `micros`-long device-side busy period of kind-specific name `call`.
    fn busy(
        &self,
        call: &'static str,
        micros: u64,
        stream: &MockStream,
    ) -> Result<(), BackendError> {
        self.enqueue(stream, call, &[], Duration::ZERO, |_| {
            Work::Delay(Duration::from_micros(micros))
        })
        .map(|_| ())
    }

    /// A handle to the stream with global index `index`, which must belong to this device.
    pub(crate) fn stream_handle(&self, index: usize) -> MockStream {
        MockStream {
            cluster: self.core().uid,
            device: self.slot,
            index,
        }
    }

    /// Adds a stream to this device (and its worker thread in threaded mode).
    pub(crate) fn add_stream(
        core: &Arc<Core>,
        w: &mut World,
        slot: usize,
    ) -> Result<usize, BackendError> {
        let s = w.streams.len();
        let clock = w.devices[slot].host.clone();
        if w.rng.is_none() {
            let worker_core = Arc::clone(core);
            std::thread::Builder::new()
                .name(format!("mock-dev{slot}-s{s}"))
                .stack_size(WORKER_STACK_BYTES)
                .spawn(move || crate::executor::worker(&worker_core, s))
                .map_err(|e| {
                    crate::error::device("create_stream", format!("worker thread: {e}"))
                })?;
        }
        w.streams.push(StreamState {
            device: slot,
            clock,
            queue: std::collections::VecDeque::new(),
            enqueued: 0,
            completed: 0,
            running: false,
            error: None,
            wake: Arc::new(parking_lot::Condvar::new()),
        });
        w.devices[slot].streams.push(s);
        Ok(s)
    }
}

impl Backend for MockDevice {
    type Stream = MockStream;
    type Event = MockEvent;

    fn name(&self) -> &str {
        BACKEND_NAME
    }

    fn device_index(&self) -> usize {
        self.index
    }

    fn memory_info(&self) -> Result<MemoryInfo, BackendError> {
        let (free, total) = self.core().world.lock().devices[self.slot].memory.info();
        Ok(MemoryInfo { free, total })
    }

    fn capabilities(&self) -> Capabilities {
        let mut c = Capabilities::default();
        c.deterministic_scheduling = true;
        c.native_race_detection = self.config().race_detection;
        c.memory_capacity = true;
        c.exact_delays = true;
        c.allocation_alignment = crate::memory::ALLOCATION_ALIGNMENT;
        c.virtual_memory = true;
        c
    }

    fn vm_granularity(&self) -> Result<u64, BackendError> {
        Ok(crate::memory::VM_GRANULARITY)
    }

    fn vm_reserve(&self, bytes: u64) -> Result<DevicePtr, BackendError> {
        device_vm::with_memory(self, |m| m.vm_reserve(bytes)).map(DevicePtr)
    }

    fn vm_release(&self, base: DevicePtr) -> Result<(), BackendError> {
        device_vm::with_memory(self, |m| m.vm_release(base.addr()))
    }

    fn vm_create_physical(&self, bytes: u64) -> Result<PhysicalHandle, BackendError> {
        device_vm::with_memory(self, |m| m.vm_create_physical(bytes)).map(PhysicalHandle)
    }

    fn vm_release_physical(&self, handle: PhysicalHandle) -> Result<(), BackendError> {
        device_vm::with_memory(self, |m| m.vm_release_physical(handle.0))
    }

    fn vm_map(&self, at: DevicePtr, handle: PhysicalHandle) -> Result<(), BackendError> {
        device_vm::map(self, at, handle)
    }

    fn vm_unmap(&self, at: DevicePtr, bytes: u64) -> Result<(), BackendError> {
        device_vm::unmap(self, at, bytes)
    }

    fn async_error(&self) -> Option<BackendError> {
        self.core().world.lock().devices[self.slot]
            .last_error
            .clone()
    }

    fn malloc(&self, bytes: u64) -> Result<DevicePtr, BackendError> {
        let mut w = self.core().world.lock();
        let detect = w.race_detection;
        let dev = &mut w.devices[self.slot];
        let addr = dev.memory.malloc(bytes)?;
        if detect {
            dev.detector.track_allocation(addr, bytes);
        }
        Ok(DevicePtr(addr))
    }

    fn free(&self, ptr: DevicePtr) -> Result<(), BackendError> {
        let mut w = self.core().world.lock();
        let detect = w.race_detection;
        let dev = &mut w.devices[self.slot];
        dev.memory.exact(ptr.addr())?;
        // The host frees: every access to the allocation must be known complete by now.
        if detect {
            dev.detector.free(ptr.addr(), &dev.host);
        }
        let removed = dev.memory.remove(ptr.addr());
        drop(w);
        drop(removed);
        Ok(())
    }

    fn default_stream(&self) -> MockStream {
        let w = self.core().world.lock();
        self.stream_handle(w.devices[self.slot].streams[0])
    }

    fn create_stream(&self) -> Result<MockStream, BackendError> {
        let mut w = self.core().world.lock();
        let s = MockDevice::add_stream(&self.owner.core, &mut w, self.slot)?;
        Ok(self.stream_handle(s))
    }

    fn owns_stream(&self, stream: &MockStream) -> bool {
        stream.cluster == self.core().uid && stream.device == self.slot
    }

    fn stream_id(&self, stream: &MockStream) -> StreamId {
        StreamId(stream.index as u64)
    }

    fn create_event(&self) -> Result<MockEvent, BackendError> {
        Ok(MockEvent {
            cluster: self.core().uid,
            device: self.slot,
            state: Mutex::new(None),
        })
    }

    fn record_event(&self, event: &MockEvent, stream: &MockStream) -> Result<(), BackendError> {
        self.check_event(event, "record_event")?;
        let w = self.core().world.lock();
        let s = self.stream_index(stream, "record_event")?;
        let st = &w.streams[s];
        *event.state.lock() = Some(Recorded {
            stream: s,
            target: st.enqueued,
            clock: st.clock.clone(),
        });
        Ok(())
    }

    fn query_event(&self, event: &MockEvent) -> Result<bool, BackendError> {
        self.check_event(event, "query_event")?;
        let Some(rec) = event.state.lock().clone() else {
            return Ok(true);
        };
        let mut w = self.core().world.lock();
        if w.streams[rec.stream].completed < rec.target
            && let Some(rng) = w.rng.as_mut()
        {
            let steps = rng.below(4);
            advance(self.core(), &mut w, steps);
        }
        let st = &w.streams[rec.stream];
        if st.completed < rec.target {
            return Ok(false);
        }
        if let Some(e) = st.error_upto(rec.target) {
            return Err(e);
        }
        self.observe(&mut w, &rec.clock);
        Ok(true)
    }

    fn synchronize_event(&self, event: &MockEvent) -> Result<(), BackendError> {
        self.check_event(event, "synchronize_event")?;
        let Some(rec) = event.state.lock().clone() else {
            return Ok(());
        };
        let mut w = self.core().world.lock();
        wait_until(self.core(), &mut w, "synchronize_event", |w| {
            w.streams[rec.stream].completed >= rec.target
        })?;
        if let Some(e) = w.streams[rec.stream].error_upto(rec.target) {
            return Err(e);
        }
        self.observe(&mut w, &rec.clock);
        Ok(())
    }

    fn stream_wait_event(
        &self,
        stream: &MockStream,
        event: &MockEvent,
    ) -> Result<(), BackendError> {
        self.check_event(event, "stream_wait_event")?;
        let s = self.stream_index(stream, "stream_wait_event")?;
        let Some(rec) = event.state.lock().clone() else {
            return Ok(());
        };
        let mut w = self.core().world.lock();
        w.streams[s].clock.join(&rec.clock);
        let desc = w.describe(self.slot, "stream_wait_event");
        let seq = w.next_op;
        w.next_op += 1;
        let info = Arc::new(OpInfo {
            seq,
            desc,
            stream: StreamId(s as u64),
        });
        w.push(
            s,
            Op {
                info,
                delay: Duration::ZERO,
                work: Work::Wait {
                    stream: rec.stream,
                    target: rec.target,
                },
            },
        );
        self.core().cv.notify_all();
        Ok(())
    }

    fn synchronize_stream(&self, stream: &MockStream) -> Result<(), BackendError> {
        let s = self.stream_index(stream, "synchronize_stream")?;
        let mut w = self.core().world.lock();
        let target = w.streams[s].enqueued;
        let clock = w.streams[s].clock.clone();
        wait_until(self.core(), &mut w, "synchronize_stream", |w| {
            w.streams[s].completed >= target
        })?;
        if let Some(e) = w.streams[s].error_upto(target) {
            return Err(e);
        }
        self.observe(&mut w, &clock);
        Ok(())
    }

    fn synchronize_device(&self) -> Result<(), BackendError> {
        let mut w = self.core().world.lock();
        let streams = w.devices[self.slot].streams.clone();
        let targets: Vec<(usize, u64)> = streams
            .iter()
            .map(|&s| (s, w.streams[s].enqueued))
            .collect();
        let mut clock = VClock::default();
        for &s in &streams {
            clock.join(&w.streams[s].clock);
        }
        wait_until(self.core(), &mut w, "synchronize_device", |w| {
            targets.iter().all(|&(s, t)| w.streams[s].completed >= t)
        })?;
        for &(s, t) in &targets {
            if let Some(e) = w.streams[s].error_upto(t) {
                return Err(e);
            }
        }
        self.observe(&mut w, &clock);
        Ok(())
    }

    fn memset_zero(
        &self,
        ptr: DevicePtr,
        bytes: u64,
        stream: &MockStream,
    ) -> Result<(), BackendError> {
        let delay = self.config().delays.memset;
        self.enqueue(
            stream,
            "memset_zero",
            &[MemAccess::write(ptr, bytes)],
            delay,
            |spans| Work::Memset(spans[0].0.clone()),
        )
        .map(|_| ())
    }

    fn copy_host_to_device(
        &self,
        dst: DevicePtr,
        src: &[u8],
        stream: &MockStream,
    ) -> Result<(), BackendError> {
        let delay = self.config().delays.h2d;
        let backed = self.config().backing;
        self.enqueue(
            stream,
            "copy_host_to_device",
            &[MemAccess::write(dst, src.len() as u64)],
            delay,
            |spans| {
                // Staged now, so the caller may reuse its buffer at once.
                let data = if backed { src.to_vec() } else { Vec::new() };
                Work::HostToDevice(spans[0].0.clone(), data)
            },
        )
        .map(|_| ())
    }

    fn copy_device_to_host(
        &self,
        dst: &mut [u8],
        src: DevicePtr,
        stream: &MockStream,
    ) -> Result<(), BackendError> {
        const CALL: &str = "copy_device_to_host";
        let out = Arc::new(Mutex::new(None));
        let delay = self.config().delays.d2h;
        let (mut w, s, pos, clock) = self.enqueue(
            stream,
            CALL,
            &[MemAccess::read(src, dst.len() as u64)],
            delay,
            |spans| Work::DeviceToHost(spans[0].0.clone(), Arc::clone(&out)),
        )?;
        wait_until(self.core(), &mut w, CALL, |w| w.streams[s].completed >= pos)?;
        if let Some(e) = w.streams[s].error_upto(pos) {
            return Err(e);
        }
        self.observe(&mut w, &clock);
        drop(w);
        if let Some(bytes) = out.lock().take() {
            dst.copy_from_slice(&bytes);
        }
        Ok(())
    }

    fn copy_device_to_device(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: u64,
        stream: &MockStream,
    ) -> Result<(), BackendError> {
        const CALL: &str = "copy_device_to_device";
        if src.addr() < dst.addr().saturating_add(bytes)
            && dst.addr() < src.addr().saturating_add(bytes)
        {
            return Err(invalid(
                CALL,
                format!("source {src} and destination {dst} overlap for {bytes} bytes"),
            ));
        }
        let delay = self.config().delays.d2d;
        self.enqueue(
            stream,
            CALL,
            &[MemAccess::read(src, bytes), MemAccess::write(dst, bytes)],
            delay,
            |spans| Work::DeviceToDevice {
                src: spans[0].0.clone(),
                dst: spans[1].0.clone(),
            },
        )
        .map(|_| ())
    }

    fn delay(&self, micros: u64, stream: &MockStream) -> Result<(), BackendError> {
        self.busy("delay", micros, stream)
    }

    // Inlined into the allocator's hot path: with the detector off only the test remains
    // (the locked part is a separate call).
    #[inline]
    fn annotate_allocation(&self, ptr: DevicePtr, bytes: u64, id: AllocationId) {
        // Annotations only serve the race detector: with it off (benchmarks), skip the
        // device lock altogether.
        if self.config().race_detection {
            self.annotate_locked(ptr, bytes, id);
        }
    }

    fn set_op_label(&self, label: &str) {
        self.core().world.lock().devices[self.slot].label = Arc::from(label);
    }

    fn race_reports(&self) -> Option<Vec<RaceReport>> {
        // With the detector off (`MockConfig::race_detection`) this is a detector-less
        // device: `None`, as on a backend without one.
        if !self.config().race_detection {
            return None;
        }
        Some(
            self.core().world.lock().devices[self.slot]
                .detector
                .reports()
                .to_vec(),
        )
    }
}
