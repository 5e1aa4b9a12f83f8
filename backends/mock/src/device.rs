//! [`MockDevice`]: one simulated device, and its [`Backend`] implementation.

use std::sync::Arc;
use std::time::Duration;

use memreuse_core::race::VClock;
use memreuse_core::{
    AccessKind, AllocationId, Backend, BackendError, Capabilities, DevicePtr, MemoryInfo,
    PhysicalHandle, RaceReport, StreamId,
};
use parking_lot::{Mutex, MutexGuard};

use crate::cluster_state::{ClusterState, Core, Op, Work};
use crate::config::MockConfig;
use crate::device_vm;
use crate::error::BACKEND_NAME;
use crate::executor::{advance, wait_until};
use crate::handles::{MockEvent, MockStream, Recorded};
use crate::memory::Span;
use crate::owner::Owner;
use crate::region::MemAccess;

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

impl MockDevice {
    /// A standalone device (a cluster of one) with `config`.
    pub fn new(config: MockConfig) -> Result<MockDevice, BackendError> {
        let index = config.first_device_index;
        Ok(MockDevice::from_parts(Owner::start(1, config)?, 0, index))
    }

    pub(crate) fn from_parts(owner: Arc<Owner>, slot: usize, index: usize) -> MockDevice {
        MockDevice { owner, slot, index }
    }

    pub(crate) fn core(&self) -> &Core {
        &self.owner.core
    }

    /// The race detector's annotation of a hand-out (the part of `annotate_allocation`
    /// that takes the cluster lock).
    #[inline(never)]
    fn annotate_locked(&self, ptr: DevicePtr, bytes: u64, id: AllocationId) {
        self.core()
            .state
            .lock()
            .hb
            .annotate(self.slot, ptr.addr(), bytes, id);
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
            return Err(BackendError::invalid_argument(
                BACKEND_NAME,
                call,
                "stream belongs to another mock device",
            ));
        }
        Ok(stream.index)
    }

    fn check_event(&self, event: &MockEvent, call: &'static str) -> Result<(), BackendError> {
        if event.cluster != self.core().uid || event.device != self.slot {
            return Err(BackendError::invalid_argument(
                BACKEND_NAME,
                call,
                "event belongs to another mock device",
            ));
        }
        Ok(())
    }

    /// Validates declared accesses against this device's live allocations.
    pub(crate) fn spans(
        &self,
        w: &ClusterState,
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
    ) -> Result<(MutexGuard<'_, ClusterState>, usize, u64, VClock), BackendError> {
        let mut w = self.core().state.lock();
        let s = self.stream_index(stream, call)?;
        let spans = self.spans(&w, call, accesses)?;
        let work = work(&spans);
        let info = w.begin_op(s, call, &spans);
        let pos = w.push(s, Op { info, delay, work });
        let clock = w.hb.stream_clock(s).clone();
        self.core().cv.notify_all();
        Ok((w, s, pos, clock))
    }

    /// Host-observed completion: everything `clock` knows happened before the host's next
    /// decisions on this device.
    fn observe(&self, w: &mut ClusterState, clock: &VClock) {
        w.hb.observe(self.slot, clock);
    }

    /// Runs `f` on the cluster's state with this device's slot (the virtual-memory calls).
    fn vm<R>(&self, f: impl FnOnce(&mut ClusterState, usize) -> R) -> R {
        f(&mut self.core().state.lock(), self.slot)
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
        let (free, total) = self.core().state.lock().devices[self.slot].memory.info();
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
        self.vm(|w, slot| device_vm::with_memory(w, slot, |m| m.vm_reserve(bytes)))
            .map(DevicePtr)
    }

    fn vm_release(&self, base: DevicePtr) -> Result<(), BackendError> {
        self.vm(|w, slot| device_vm::with_memory(w, slot, |m| m.vm_release(base.addr())))
    }

    fn vm_create_physical(&self, bytes: u64) -> Result<PhysicalHandle, BackendError> {
        self.vm(|w, slot| device_vm::with_memory(w, slot, |m| m.vm_create_physical(bytes)))
            .map(PhysicalHandle)
    }

    fn vm_release_physical(&self, handle: PhysicalHandle) -> Result<(), BackendError> {
        self.vm(|w, slot| device_vm::with_memory(w, slot, |m| m.vm_release_physical(handle.0)))
    }

    fn vm_map(&self, at: DevicePtr, handle: PhysicalHandle) -> Result<(), BackendError> {
        self.vm(|w, slot| device_vm::map(w, slot, at, handle))
    }

    fn vm_unmap(&self, at: DevicePtr, bytes: u64) -> Result<(), BackendError> {
        self.vm(|w, slot| device_vm::unmap(w, slot, at, bytes))
    }

    fn async_error(&self) -> Option<BackendError> {
        self.core().state.lock().devices[self.slot]
            .last_error
            .clone()
    }

    fn malloc(&self, bytes: u64) -> Result<DevicePtr, BackendError> {
        let mut w = self.core().state.lock();
        let addr = w.devices[self.slot].memory.malloc(bytes)?;
        w.hb.allocated(self.slot, addr, bytes);
        Ok(DevicePtr(addr))
    }

    fn free(&self, ptr: DevicePtr) -> Result<(), BackendError> {
        let mut w = self.core().state.lock();
        w.devices[self.slot].memory.exact(ptr.addr())?;
        // The host frees: every access to the allocation must be known complete by now.
        w.hb.freed(self.slot, ptr.addr());
        let removed = w.devices[self.slot].memory.remove(ptr.addr());
        drop(w);
        drop(removed);
        Ok(())
    }

    fn default_stream(&self) -> MockStream {
        let w = self.core().state.lock();
        self.stream_handle(w.hb.device_streams(self.slot)[0])
    }

    fn create_stream(&self) -> Result<MockStream, BackendError> {
        let mut w = self.core().state.lock();
        let s = Owner::add_stream(&self.owner.core, &mut w, self.slot)?;
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
        let w = self.core().state.lock();
        let s = self.stream_index(stream, "record_event")?;
        *event.state.lock() = Some(Recorded {
            stream: s,
            target: w.streams[s].enqueued,
            clock: w.hb.stream_clock(s).clone(),
        });
        Ok(())
    }

    fn query_event(&self, event: &MockEvent) -> Result<bool, BackendError> {
        self.check_event(event, "query_event")?;
        let Some(rec) = event.state.lock().clone() else {
            return Ok(true);
        };
        let mut w = self.core().state.lock();
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
        let mut w = self.core().state.lock();
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
        let mut w = self.core().state.lock();
        w.hb.wait(s, &rec.clock);
        // A queue entry, not an op of the stream's clock: it orders through the join above.
        let info = w.hb.op_info(s, "stream_wait_event");
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
        let mut w = self.core().state.lock();
        let target = w.streams[s].enqueued;
        let clock = w.hb.stream_clock(s).clone();
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
        let mut w = self.core().state.lock();
        let targets: Vec<(usize, u64)> =
            w.hb.device_streams(self.slot)
                .iter()
                .map(|&s| (s, w.streams[s].enqueued))
                .collect();
        let clock = w.hb.device_clock(self.slot);
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
            return Err(BackendError::invalid_argument(
                BACKEND_NAME,
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
        self.core().state.lock().hb.set_label(self.slot, label);
    }

    fn race_reports(&self) -> Option<Vec<RaceReport>> {
        // With the detector off (`MockConfig::race_detection`) this is a detector-less
        // device: `None`, as on a backend without one.
        if !self.config().race_detection {
            return None;
        }
        Some(self.core().state.lock().hb.reports(self.slot).to_vec())
    }
}
