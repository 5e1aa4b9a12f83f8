//! [`ManualBackend`]: streams that advance only when the test says so.

use std::collections::HashMap;

use parking_lot::Mutex;

use crate::backend::Backend;
use crate::error::BackendError;
use crate::ids::{AllocationId, DevicePtr, MemoryInfo, StreamId};
use crate::virtual_memory::PhysicalHandle;

mod vm;

pub use vm::GRANULARITY as MANUAL_VM_GRANULARITY;

const NAME: &str = "manual";
/// First address handed out: far from 0 so a zero pointer is never valid.
const BASE_ADDR: u64 = 1 << 32;
/// Gap left after every raw allocation, so two segments are never adjacent and a merge
/// across segments would show up as a gap inside a "block".
const GUARD: u64 = 1 << 12;

/// A stream of a [`ManualBackend`] (its index; the default stream is 0).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct ManualStream(pub u32);

/// An event of a [`ManualBackend`] (its index).
#[derive(Debug)]
pub struct ManualEvent(u32);

/// What a [`ManualBackend`] was asked to do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ManualCounters {
    /// Successful raw allocations.
    pub raw_mallocs: u64,
    /// Raw frees.
    pub raw_frees: u64,
    /// Raw allocations that failed (out of memory or injected).
    pub failed_mallocs: u64,
    /// Events created.
    pub events_created: u64,
    /// Event recordings.
    pub events_recorded: u64,
    /// Event queries.
    pub event_queries: u64,
    /// `synchronize_event` calls.
    pub synchronize_event_calls: u64,
    /// `synchronize_stream` calls.
    pub synchronize_stream_calls: u64,
    /// `synchronize_device` calls.
    pub synchronize_device_calls: u64,
    /// `stream_wait_event` calls.
    pub stream_waits: u64,
    /// Device operations enqueued (memset, copies, delays, [`ManualBackend::enqueue_work`]).
    pub ops_enqueued: u64,
    /// `annotate_allocation` calls.
    pub annotations: u64,
}

#[derive(Default)]
struct StreamState {
    /// Position of the last enqueued item.
    submitted: u64,
    /// Everything at or before this position has completed.
    completed: u64,
}

struct EventState {
    /// `(stream, position)` of the last recording; `None` until recorded.
    at: Option<(u32, u64)>,
}

struct State {
    capacity: u64,
    used: u64,
    next_addr: u64,
    live: HashMap<u64, u64>,
    streams: Vec<StreamState>,
    events: Vec<EventState>,
    counters: ManualCounters,
    malloc_calls: u64,
    fail_at_call: Option<u64>,
    last_annotation: Option<(DevicePtr, u64, AllocationId)>,
    vm: vm::Vm,
}

/// A device whose streams advance only when the test says so. See the module docs.
pub struct ManualBackend {
    device_index: usize,
    state: Mutex<State>,
    /// Declares (and allows) the `vm_*` calls; see [`ManualBackend::with_virtual_memory`].
    virtual_memory: bool,
}

impl std::fmt::Debug for ManualBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManualBackend")
            .field("device_index", &self.device_index)
            .finish_non_exhaustive()
    }
}

fn invalid(call: &'static str, reason: String) -> BackendError {
    BackendError::InvalidArgument {
        backend: NAME.to_owned(),
        call,
        reason,
    }
}

impl State {
    fn stream(
        &mut self,
        s: &ManualStream,
        call: &'static str,
    ) -> Result<&mut StreamState, BackendError> {
        self.streams
            .get_mut(s.0 as usize)
            .ok_or_else(|| invalid(call, format!("unknown stream {}", s.0)))
    }

    fn enqueue(&mut self, s: &ManualStream, call: &'static str) -> Result<u64, BackendError> {
        self.counters.ops_enqueued += 1;
        let st = self.stream(s, call)?;
        st.submitted += 1;
        Ok(st.submitted)
    }

    fn event(&self, e: &ManualEvent, call: &'static str) -> Result<&EventState, BackendError> {
        self.events
            .get(e.0 as usize)
            .ok_or_else(|| invalid(call, format!("unknown event {}", e.0)))
    }

    fn check_range(
        &self,
        ptr: DevicePtr,
        bytes: u64,
        call: &'static str,
    ) -> Result<(), BackendError> {
        let inside = self.live.iter().any(|(&base, &size)| {
            ptr.addr() >= base && ptr.addr().saturating_add(bytes) <= base + size
        }) || self.vm.covers(ptr.addr(), bytes);
        if inside {
            Ok(())
        } else {
            Err(invalid(
                call,
                format!("[{ptr}, +{bytes}) is not inside a live allocation"),
            ))
        }
    }
}

impl ManualBackend {
    /// A device of `capacity` bytes with only the default stream.
    pub fn new(capacity: u64) -> Self {
        ManualBackend {
            device_index: 0,
            state: Mutex::new(State {
                capacity,
                used: 0,
                next_addr: BASE_ADDR,
                live: HashMap::new(),
                streams: vec![StreamState::default()],
                events: Vec::new(),
                counters: ManualCounters::default(),
                malloc_calls: 0,
                fail_at_call: None,
                last_annotation: None,
                vm: vm::Vm::default(),
            }),
            virtual_memory: true,
        }
    }

    /// The same device without the virtual-memory interface: it no longer declares the
    /// `virtual_memory` capability and refuses every `vm_*` call with
    /// [`BackendError::Unsupported`] (as a backend without the interface does). By default
    /// a manual device has it, with a 2 MiB granularity ([`MANUAL_VM_GRANULARITY`]) and the
    /// mock's rules (module `manual/vm.rs`); its capacity limits raw allocations and
    /// physical handles together.
    #[must_use]
    pub fn without_virtual_memory(mut self) -> Self {
        self.virtual_memory = false;
        self
    }

    /// Makes the `n`-th `vm_unmap` from now fail with [`BackendError::Injected`], leaving
    /// the mapping in place (`n = 1`: the next one). `n = 0` clears the fault.
    pub fn fail_nth_vm_unmap(&self, n: u64) {
        self.state.lock().vm.fail_nth_unmap(n);
    }

    /// `(vm_map calls, vm_unmap calls)` that succeeded so far.
    pub fn vm_calls(&self) -> (u64, u64) {
        let st = self.state.lock();
        (st.vm.maps, st.vm.unmaps)
    }

    /// Bytes of live physical handles.
    pub fn physical_bytes(&self) -> u64 {
        self.state.lock().vm.physical_bytes()
    }

    /// Completes everything enqueued on `stream` so far (unknown streams are ignored).
    pub fn advance(&self, stream: &ManualStream) {
        if let Some(s) = self.state.lock().streams.get_mut(stream.0 as usize) {
            s.completed = s.submitted;
        }
    }

    /// Completes everything enqueued on every stream.
    pub fn advance_all(&self) {
        for s in &mut self.state.lock().streams {
            s.completed = s.submitted;
        }
    }

    /// Enqueues one item of work on `stream` (a kernel that runs until the next advance).
    pub fn enqueue_work(&self, stream: &ManualStream) -> Result<(), BackendError> {
        self.state
            .lock()
            .enqueue(stream, "enqueue_work")
            .map(|_| ())
    }

    /// Position of the last item enqueued on `stream` (0 for none or an unknown stream).
    pub fn submitted(&self, stream: &ManualStream) -> u64 {
        self.state
            .lock()
            .streams
            .get(stream.0 as usize)
            .map_or(0, |s| s.submitted)
    }

    /// Position up to which `stream` completed (0 for an unknown stream).
    pub fn completed(&self, stream: &ManualStream) -> u64 {
        self.state
            .lock()
            .streams
            .get(stream.0 as usize)
            .map_or(0, |s| s.completed)
    }

    /// True when everything enqueued on `stream` completed.
    pub fn is_idle(&self, stream: &ManualStream) -> bool {
        self.submitted(stream) == self.completed(stream)
    }

    /// Makes the `n`-th raw allocation from now fail with [`BackendError::Injected`]
    /// (`n = 1`: the next one). `n = 0` clears the fault.
    pub fn fail_nth_malloc(&self, n: u64) {
        let mut st = self.state.lock();
        st.fail_at_call = (n > 0).then(|| st.malloc_calls + n);
    }

    /// Changes the capacity (allocations already made stay).
    pub fn set_capacity(&self, capacity: u64) {
        self.state.lock().capacity = capacity;
    }

    /// What the backend was asked to do so far.
    pub fn counters(&self) -> ManualCounters {
        self.state.lock().counters
    }

    /// Bytes of raw allocations not yet freed.
    pub fn raw_bytes_in_use(&self) -> u64 {
        self.state.lock().used
    }

    /// Number of raw allocations not yet freed.
    pub fn live_raw_allocations(&self) -> usize {
        self.state.lock().live.len()
    }

    /// The last `annotate_allocation` call.
    pub fn last_annotation(&self) -> Option<(DevicePtr, u64, AllocationId)> {
        self.state.lock().last_annotation
    }
}

impl ManualBackend {
    /// Refuses a `vm_*` call after [`ManualBackend::without_virtual_memory`].
    fn vm_allowed(&self, call: &'static str) -> Result<(), BackendError> {
        if self.virtual_memory {
            Ok(())
        } else {
            Err(crate::virtual_memory::unsupported(NAME, call))
        }
    }
}

impl Backend for ManualBackend {
    type Stream = ManualStream;
    type Event = ManualEvent;

    fn name(&self) -> &str {
        NAME
    }

    fn device_index(&self) -> usize {
        self.device_index
    }

    fn memory_info(&self) -> Result<MemoryInfo, BackendError> {
        let st = self.state.lock();
        Ok(MemoryInfo {
            free: st.capacity.saturating_sub(st.used),
            total: st.capacity,
        })
    }

    fn malloc(&self, bytes: u64) -> Result<DevicePtr, BackendError> {
        let mut st = self.state.lock();
        st.malloc_calls += 1;
        if st.fail_at_call == Some(st.malloc_calls) {
            st.fail_at_call = None;
            st.counters.failed_mallocs += 1;
            return Err(BackendError::Injected {
                backend: NAME.to_owned(),
                what: format!("raw allocation #{}", st.malloc_calls),
            });
        }
        // Checked, not saturated: on an unlimited device a second huge allocation must not
        // wrap `used` nor share the saturated address of the first.
        let next = bytes
            .div_ceil(GUARD)
            .checked_mul(GUARD)
            .and_then(|b| st.next_addr.checked_add(b)?.checked_add(GUARD));
        let fits = st.used.checked_add(bytes).is_some_and(|u| u <= st.capacity);
        let (Some(next), true) = (next, fits) else {
            st.counters.failed_mallocs += 1;
            return Err(BackendError::OutOfMemory {
                backend: NAME.to_owned(),
                requested: bytes,
                detail: format!("{} of {} bytes in use", st.used, st.capacity),
            });
        };
        let ptr = st.next_addr;
        st.next_addr = next;
        st.used += bytes;
        st.live.insert(ptr, bytes);
        st.counters.raw_mallocs += 1;
        Ok(DevicePtr(ptr))
    }

    fn free(&self, ptr: DevicePtr) -> Result<(), BackendError> {
        let mut st = self.state.lock();
        let Some(size) = st.live.remove(&ptr.addr()) else {
            return Err(invalid("free", format!("{ptr} is not a live allocation")));
        };
        st.used -= size;
        st.counters.raw_frees += 1;
        Ok(())
    }

    fn default_stream(&self) -> ManualStream {
        ManualStream(0)
    }

    fn create_stream(&self) -> Result<ManualStream, BackendError> {
        let mut st = self.state.lock();
        st.streams.push(StreamState::default());
        Ok(ManualStream((st.streams.len() - 1) as u32))
    }

    fn stream_id(&self, stream: &ManualStream) -> StreamId {
        StreamId(u64::from(stream.0))
    }

    fn create_event(&self) -> Result<ManualEvent, BackendError> {
        let mut st = self.state.lock();
        st.events.push(EventState { at: None });
        st.counters.events_created += 1;
        Ok(ManualEvent((st.events.len() - 1) as u32))
    }

    fn record_event(&self, event: &ManualEvent, stream: &ManualStream) -> Result<(), BackendError> {
        let mut st = self.state.lock();
        st.event(event, "record_event")?;
        let pos = {
            let s = st.stream(stream, "record_event")?;
            s.submitted += 1;
            s.submitted
        };
        st.events[event.0 as usize].at = Some((stream.0, pos));
        st.counters.events_recorded += 1;
        Ok(())
    }

    fn query_event(&self, event: &ManualEvent) -> Result<bool, BackendError> {
        let mut st = self.state.lock();
        st.counters.event_queries += 1;
        Ok(match st.event(event, "query_event")?.at {
            None => true,
            Some((s, pos)) => st.streams[s as usize].completed >= pos,
        })
    }

    fn synchronize_event(&self, event: &ManualEvent) -> Result<(), BackendError> {
        let mut st = self.state.lock();
        st.counters.synchronize_event_calls += 1;
        if let Some((s, pos)) = st.event(event, "synchronize_event")?.at {
            let s = &mut st.streams[s as usize];
            s.completed = s.completed.max(pos);
        }
        Ok(())
    }

    fn stream_wait_event(
        &self,
        stream: &ManualStream,
        event: &ManualEvent,
    ) -> Result<(), BackendError> {
        let mut st = self.state.lock();
        st.event(event, "stream_wait_event")?;
        st.stream(stream, "stream_wait_event")?;
        st.counters.stream_waits += 1;
        Ok(())
    }

    fn synchronize_stream(&self, stream: &ManualStream) -> Result<(), BackendError> {
        let mut st = self.state.lock();
        st.counters.synchronize_stream_calls += 1;
        let s = st.stream(stream, "synchronize_stream")?;
        s.completed = s.submitted;
        Ok(())
    }

    fn synchronize_device(&self) -> Result<(), BackendError> {
        let mut st = self.state.lock();
        st.counters.synchronize_device_calls += 1;
        for s in &mut st.streams {
            s.completed = s.submitted;
        }
        Ok(())
    }

    fn memset_zero(
        &self,
        ptr: DevicePtr,
        bytes: u64,
        stream: &ManualStream,
    ) -> Result<(), BackendError> {
        let mut st = self.state.lock();
        st.check_range(ptr, bytes, "memset_zero")?;
        st.enqueue(stream, "memset_zero").map(|_| ())
    }

    fn copy_host_to_device(
        &self,
        dst: DevicePtr,
        src: &[u8],
        stream: &ManualStream,
    ) -> Result<(), BackendError> {
        let mut st = self.state.lock();
        st.check_range(dst, src.len() as u64, "copy_host_to_device")?;
        st.enqueue(stream, "copy_host_to_device").map(|_| ())
    }

    fn copy_device_to_host(
        &self,
        dst: &mut [u8],
        src: DevicePtr,
        stream: &ManualStream,
    ) -> Result<(), BackendError> {
        let mut st = self.state.lock();
        st.check_range(src, dst.len() as u64, "copy_device_to_host")?;
        st.enqueue(stream, "copy_device_to_host")?;
        // Blocking: the copy and everything before it on the stream have finished.
        let s = st.stream(stream, "copy_device_to_host")?;
        s.completed = s.submitted;
        dst.fill(0);
        Ok(())
    }

    fn copy_device_to_device(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: u64,
        stream: &ManualStream,
    ) -> Result<(), BackendError> {
        let mut st = self.state.lock();
        st.check_range(dst, bytes, "copy_device_to_device")?;
        st.check_range(src, bytes, "copy_device_to_device")?;
        st.enqueue(stream, "copy_device_to_device").map(|_| ())
    }

    fn delay(&self, _micros: u64, stream: &ManualStream) -> Result<(), BackendError> {
        self.state.lock().enqueue(stream, "delay").map(|_| ())
    }

    fn capabilities(&self) -> crate::backend::Capabilities {
        crate::backend::Capabilities {
            virtual_memory: self.virtual_memory,
            ..Default::default()
        }
    }

    fn vm_granularity(&self) -> Result<u64, BackendError> {
        self.vm_allowed("vm_granularity")?;
        Ok(vm::GRANULARITY)
    }

    fn vm_reserve(&self, bytes: u64) -> Result<DevicePtr, BackendError> {
        self.vm_allowed("vm_reserve")?;
        self.state.lock().vm_reserve(bytes)
    }

    fn vm_release(&self, base: DevicePtr) -> Result<(), BackendError> {
        self.vm_allowed("vm_release")?;
        self.state.lock().vm_release(base)
    }

    fn vm_create_physical(&self, bytes: u64) -> Result<PhysicalHandle, BackendError> {
        self.vm_allowed("vm_create_physical")?;
        self.state.lock().vm_create_physical(bytes)
    }

    fn vm_release_physical(&self, handle: PhysicalHandle) -> Result<(), BackendError> {
        self.vm_allowed("vm_release_physical")?;
        self.state.lock().vm_release_physical(handle)
    }

    fn vm_map(&self, at: DevicePtr, handle: PhysicalHandle) -> Result<(), BackendError> {
        self.vm_allowed("vm_map")?;
        self.state.lock().vm_map(at, handle)
    }

    fn vm_unmap(&self, at: DevicePtr, bytes: u64) -> Result<(), BackendError> {
        self.vm_allowed("vm_unmap")?;
        self.state.lock().vm_unmap(at, bytes)
    }

    fn annotate_allocation(&self, ptr: DevicePtr, bytes: u64, id: AllocationId) {
        let mut st = self.state.lock();
        st.counters.annotations += 1;
        st.last_annotation = Some((ptr, bytes, id));
    }
}
