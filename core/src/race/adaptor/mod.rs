//! [`RaceChecker`]: a happens-before race checker wrapped around any [`Backend`], in the
//! manner of RMM's resource adaptors (one concern, forwarded calls).
//!
//! Clocks follow from the calls alone:
//! - every device operation is one op of its stream (it joins the host's clock and ticks
//!   the stream's component), with the byte ranges it reads and writes;
//! - `record_event` captures the stream's clock; `stream_wait_event` joins it into the
//!   waiting stream; a `query_event` that answered complete, `synchronize_event`,
//!   `synchronize_stream`, `synchronize_device` and the blocking `copy_device_to_host`
//!   join what they waited for into the host's clock;
//! - a collective or point-to-point operation ([`RaceCheckedComm`]) is one op of its
//!   stream with what it reads and writes; once every member arrived at it (matched in
//!   issue order, per communicator, or per (sender, receiver)) all members' streams are
//!   ordered after all members' ops;
//! - `annotate_allocation` tells which allocator hand-out owns which bytes, so a conflict
//!   between two hand-outs is a reuse race and one inside a hand-out a schedule race;
//! - `free` checks that the host has observed every access to the memory complete.
//!
//! These are the mock device's rules, written once in [`super::HappensBefore`], which both
//! drive, so over the mock the adaptor reports what the mock's native detector reports.
//! Ops that the wrapped backend refuses are not recorded.

mod comm;
mod endpoints;
mod state;

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use parking_lot::Mutex;

pub use comm::RaceCheckedComm;
pub use endpoints::wrap_endpoints;
pub use state::RaceWorld;
use state::WorldState;

use crate::backend::{Backend, Capabilities};
use crate::error::BackendError;
use crate::ids::{AllocationId, DevicePtr, MemoryInfo, StreamId};
use crate::race::{AccessKind, RaceReport, VClock};
use crate::virtual_memory::PhysicalHandle;

/// An event of a [`RaceChecker`]: the wrapped backend's event and the clock of the stream
/// at its last recording.
pub struct CheckedEvent<E> {
    inner: E,
    recorded: Mutex<Option<VClock>>,
}

impl<E: std::fmt::Debug> std::fmt::Debug for CheckedEvent<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CheckedEvent({:?})", self.inner)
    }
}

impl<E> CheckedEvent<E> {
    /// The wrapped backend's event.
    pub fn inner(&self) -> &E {
        &self.inner
    }

    fn clock(&self) -> Option<VClock> {
        self.recorded.lock().clone()
    }
}

struct Shared<B> {
    inner: B,
    world: Arc<RaceWorld>,
    device: usize,
    /// Size of each live physical handle, so a `vm_map` is tracked like a `malloc` of
    /// that many bytes (and its `vm_unmap` like a `free`): remapped pages are reuses.
    physical: Mutex<HashMap<PhysicalHandle, u64>>,
}

/// A [`Backend`] that forwards every call to `B` and checks the calls' happens-before
/// order. Cheap to clone (a handle). See the module documentation for the rules.
pub struct RaceChecker<B: Backend> {
    shared: Arc<Shared<B>>,
}

impl<B: Backend> Clone for RaceChecker<B> {
    fn clone(&self) -> Self {
        RaceChecker {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<B: Backend> std::fmt::Debug for RaceChecker<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RaceChecker({}:{}, device {} of the world)",
            self.shared.inner.name(),
            self.shared.inner.device_index(),
            self.shared.device
        )
    }
}

impl<B: Backend> RaceChecker<B> {
    /// Wraps `inner` as a new device of `world`. Its default stream is registered now, so
    /// it starts with nothing ordered before it.
    pub fn new(world: &Arc<RaceWorld>, inner: B) -> RaceChecker<B> {
        let device = world.add_device();
        let default = inner.stream_id(&inner.default_stream());
        let checker = RaceChecker {
            shared: Arc::new(Shared {
                inner,
                world: Arc::clone(world),
                device,
                physical: Mutex::new(HashMap::new()),
            }),
        };
        checker.locked(|s, d| s.comp(d, default));
        checker
    }

    /// Wraps `inner` in a world of its own (single-device checks).
    pub fn standalone(inner: B) -> RaceChecker<B> {
        RaceChecker::new(&RaceWorld::new(1000), inner)
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.shared.inner
    }

    /// The world this device belongs to.
    pub fn world(&self) -> &Arc<RaceWorld> {
        &self.shared.world
    }

    /// This device's index in its world.
    pub fn world_device(&self) -> usize {
        self.shared.device
    }

    /// Distinct races found on this device, including those past the report cap.
    pub fn race_count(&self) -> u64 {
        self.locked(|s, d| s.hb.found(d))
    }

    /// Runs `f` on the world's state, with this device's index in it: the one place the
    /// adaptor takes the world lock (held for `f` only).
    pub(crate) fn locked<R>(&self, f: impl FnOnce(&mut WorldState, usize) -> R) -> R {
        f(&mut self.shared.world.state.lock(), self.shared.device)
    }

    /// Records one op on `stream` (after the wrapped backend accepted it).
    pub(crate) fn record(
        &self,
        stream: &B::Stream,
        kind: &str,
        accesses: &[(Range<u64>, AccessKind)],
    ) -> usize {
        let id = self.shared.inner.stream_id(stream);
        self.locked(|s, d| s.op(d, id, kind, accesses))
    }

    fn comp_clock(&self, stream: &B::Stream) -> VClock {
        let id = self.shared.inner.stream_id(stream);
        self.locked(|s, d| {
            let c = s.comp(d, id);
            s.hb.stream_clock(c).clone()
        })
    }

    fn observe(&self, clock: &VClock) {
        self.locked(|s, d| s.hb.observe(d, clock));
    }
}

fn range(ptr: DevicePtr, bytes: u64) -> Range<u64> {
    ptr.addr()..ptr.addr().saturating_add(bytes)
}

impl<B: Backend> Backend for RaceChecker<B> {
    type Stream = B::Stream;
    type Event = CheckedEvent<B::Event>;

    fn name(&self) -> &str {
        self.shared.inner.name()
    }

    fn device_index(&self) -> usize {
        self.shared.inner.device_index()
    }

    fn memory_info(&self) -> Result<MemoryInfo, BackendError> {
        self.shared.inner.memory_info()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            native_race_detection: true,
            ..self.shared.inner.capabilities()
        }
    }

    fn async_error(&self) -> Option<BackendError> {
        self.shared.inner.async_error()
    }

    fn malloc(&self, bytes: u64) -> Result<DevicePtr, BackendError> {
        let ptr = self.shared.inner.malloc(bytes)?;
        self.locked(|s, d| s.hb.allocated(d, ptr.addr(), bytes));
        Ok(ptr)
    }

    fn free(&self, ptr: DevicePtr) -> Result<(), BackendError> {
        self.shared.inner.free(ptr)?;
        self.locked(|s, d| s.hb.freed(d, ptr.addr()));
        Ok(())
    }

    fn default_stream(&self) -> B::Stream {
        self.shared.inner.default_stream()
    }

    fn create_stream(&self) -> Result<B::Stream, BackendError> {
        let s = self.shared.inner.create_stream()?;
        let id = self.shared.inner.stream_id(&s);
        self.locked(|w, d| w.comp(d, id));
        Ok(s)
    }

    fn stream_id(&self, stream: &B::Stream) -> StreamId {
        self.shared.inner.stream_id(stream)
    }

    fn create_event(&self) -> Result<Self::Event, BackendError> {
        Ok(CheckedEvent {
            inner: self.shared.inner.create_event()?,
            recorded: Mutex::new(None),
        })
    }

    fn record_event(&self, event: &Self::Event, stream: &B::Stream) -> Result<(), BackendError> {
        self.shared.inner.record_event(&event.inner, stream)?;
        *event.recorded.lock() = Some(self.comp_clock(stream));
        Ok(())
    }

    fn query_event(&self, event: &Self::Event) -> Result<bool, BackendError> {
        let done = self.shared.inner.query_event(&event.inner)?;
        if done && let Some(clock) = event.clock() {
            self.observe(&clock);
        }
        Ok(done)
    }

    fn synchronize_event(&self, event: &Self::Event) -> Result<(), BackendError> {
        self.shared.inner.synchronize_event(&event.inner)?;
        if let Some(clock) = event.clock() {
            self.observe(&clock);
        }
        Ok(())
    }

    fn stream_wait_event(
        &self,
        stream: &B::Stream,
        event: &Self::Event,
    ) -> Result<(), BackendError> {
        self.shared.inner.stream_wait_event(stream, &event.inner)?;
        if let Some(clock) = event.clock() {
            let id = self.shared.inner.stream_id(stream);
            self.locked(|s, d| {
                let c = s.comp(d, id);
                s.hb.wait(c, &clock);
            });
        }
        Ok(())
    }

    fn synchronize_stream(&self, stream: &B::Stream) -> Result<(), BackendError> {
        // What the wait covers is decided when it starts.
        let clock = self.comp_clock(stream);
        self.shared.inner.synchronize_stream(stream)?;
        self.observe(&clock);
        Ok(())
    }

    fn synchronize_device(&self) -> Result<(), BackendError> {
        let clock = self.locked(|s, d| s.hb.device_clock(d));
        self.shared.inner.synchronize_device()?;
        self.observe(&clock);
        Ok(())
    }

    fn memset_zero(
        &self,
        ptr: DevicePtr,
        bytes: u64,
        stream: &B::Stream,
    ) -> Result<(), BackendError> {
        self.shared.inner.memset_zero(ptr, bytes, stream)?;
        self.record(
            stream,
            "memset_zero",
            &[(range(ptr, bytes), AccessKind::Write)],
        );
        Ok(())
    }

    fn copy_host_to_device(
        &self,
        dst: DevicePtr,
        src: &[u8],
        stream: &B::Stream,
    ) -> Result<(), BackendError> {
        self.shared.inner.copy_host_to_device(dst, src, stream)?;
        self.record(
            stream,
            "copy_host_to_device",
            &[(range(dst, src.len() as u64), AccessKind::Write)],
        );
        Ok(())
    }

    fn copy_device_to_host(
        &self,
        dst: &mut [u8],
        src: DevicePtr,
        stream: &B::Stream,
    ) -> Result<(), BackendError> {
        self.shared.inner.copy_device_to_host(dst, src, stream)?;
        let id = self.shared.inner.stream_id(stream);
        let accesses = [(range(src, dst.len() as u64), AccessKind::Read)];
        self.locked(|s, d| {
            let c = s.op(d, id, "copy_device_to_host", &accesses);
            // Blocking: the host has observed the copy and everything before it.
            let clock = s.hb.stream_clock(c).clone();
            s.hb.observe(d, &clock);
        });
        Ok(())
    }

    fn copy_device_to_device(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: u64,
        stream: &B::Stream,
    ) -> Result<(), BackendError> {
        self.shared
            .inner
            .copy_device_to_device(dst, src, bytes, stream)?;
        self.record(
            stream,
            "copy_device_to_device",
            &[
                (range(src, bytes), AccessKind::Read),
                (range(dst, bytes), AccessKind::Write),
            ],
        );
        Ok(())
    }

    fn delay(&self, micros: u64, stream: &B::Stream) -> Result<(), BackendError> {
        self.shared.inner.delay(micros, stream)?;
        self.record(stream, "delay", &[]);
        Ok(())
    }

    fn annotate_allocation(&self, ptr: DevicePtr, bytes: u64, id: AllocationId) {
        self.shared.inner.annotate_allocation(ptr, bytes, id);
        self.locked(|s, d| s.hb.annotate(d, ptr.addr(), bytes, id));
    }

    fn set_op_label(&self, label: &str) {
        self.shared.inner.set_op_label(label);
        self.locked(|s, d| s.hb.set_label(d, label));
    }

    fn race_reports(&self) -> Option<Vec<RaceReport>> {
        Some(self.locked(|s, d| s.hb.reports(d).to_vec()))
    }

    fn vm_granularity(&self) -> Result<u64, BackendError> {
        self.shared.inner.vm_granularity()
    }

    fn vm_reserve(&self, bytes: u64) -> Result<DevicePtr, BackendError> {
        self.shared.inner.vm_reserve(bytes)
    }

    fn vm_release(&self, base: DevicePtr) -> Result<(), BackendError> {
        self.shared.inner.vm_release(base)
    }

    fn vm_create_physical(&self, bytes: u64) -> Result<PhysicalHandle, BackendError> {
        let handle = self.shared.inner.vm_create_physical(bytes)?;
        self.shared.physical.lock().insert(handle, bytes);
        Ok(handle)
    }

    fn vm_release_physical(&self, handle: PhysicalHandle) -> Result<(), BackendError> {
        self.shared.inner.vm_release_physical(handle)?;
        self.shared.physical.lock().remove(&handle);
        Ok(())
    }

    fn vm_map(&self, at: DevicePtr, handle: PhysicalHandle) -> Result<(), BackendError> {
        self.shared.inner.vm_map(at, handle)?;
        let bytes = self
            .shared
            .physical
            .lock()
            .get(&handle)
            .copied()
            .unwrap_or(0);
        self.locked(|s, d| s.hb.mapped(d, at.addr(), bytes));
        Ok(())
    }

    fn vm_unmap(&self, at: DevicePtr, bytes: u64) -> Result<(), BackendError> {
        self.shared.inner.vm_unmap(at, bytes)?;
        self.locked(|s, d| s.hb.unmapped(d, at.addr()));
        Ok(())
    }
}
