//! Layer 3: [`VulkanDevice`], one `VkDevice` as a memreuse [`Backend`].
//!
//! - memory: one `VkDeviceMemory` + `VkBuffer` per `malloc`, persistently mapped, behind
//!   synthetic addresses (see [`crate::memory`]); every range an operation names is checked
//!   against the live allocations first;
//! - streams: timeline semaphores, one submit per operation (see [`crate::sched`]);
//! - `memset_zero`: `vkCmdFillBuffer` over the 4-byte-aligned middle, `vkCmdCopyBuffer`
//!   from a zeroed buffer for the unaligned ends;
//! - `copy_host_to_device`: staged in a fresh host-visible buffer, then `vkCmdCopyBuffer`;
//!   `copy_device_to_host`: waits for the stream, then reads the coherent mapping;
//! - `delay`: host-held (see [`crate::delay`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ash::vk;
use memreuse_core::{Backend, BackendError, Capabilities, DevicePtr, MemoryInfo, StreamId};
use parking_lot::Mutex;

use crate::delay::Delays;
use crate::handles::{Gate, VulkanEvent, VulkanStream};
use crate::memory::{ADDRESS_ALIGNMENT, AddressSpace, Allocation, Span};
use crate::raw::RawDevice;
use crate::result::BACKEND;
use crate::sched::{Sched, host_wait};
use crate::sys::{Context, context};

/// How long a host wait (synchronize, device-to-host copy) waits before it is a
/// [`BackendError::Timeout`].
pub const DEFAULT_HOST_TIMEOUT: Duration = Duration::from_secs(300);

/// Bytes of the zeroed buffer `memset_zero` copies unaligned ends from.
const ZERO_BYTES: u64 = 256;

static NEXT_UID: AtomicU64 = AtomicU64::new(1);

/// How to open one [`VulkanDevice`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceConfig {
    /// memreuse device index (also selects its synthetic address range).
    pub index: usize,
    /// Bytes this device hands out at most; `None`: the size of the memory heap.
    pub capacity: Option<u64>,
    /// Limit of every host wait.
    pub host_timeout: Duration,
}

impl DeviceConfig {
    /// Device `index` with the heap's capacity and [`DEFAULT_HOST_TIMEOUT`].
    pub fn new(index: usize) -> DeviceConfig {
        DeviceConfig {
            index,
            capacity: None,
            host_timeout: DEFAULT_HOST_TIMEOUT,
        }
    }
}

/// One memreuse device: its own `VkDevice` (so its own queue) on the context's physical
/// device. Cheap to clone (shared state).
#[derive(Clone)]
pub struct VulkanDevice {
    pub(crate) inner: Arc<DeviceInner>,
}

pub(crate) struct DeviceInner {
    uid: u64,
    index: usize,
    pub(crate) sched: Arc<Mutex<Sched>>,
    pub(crate) memory: Mutex<AddressSpace>,
    zero: Arc<Allocation>,
    default: VulkanStream,
    pub(crate) host_timeout: Duration,
    delays: Mutex<Option<Delays>>,
    pub(crate) raw: Arc<RawDevice>,
}

impl std::fmt::Debug for VulkanDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "VulkanDevice({} on {})",
            self.inner.index, self.inner.raw.context.facts.name
        )
    }
}

impl VulkanDevice {
    /// Opens a device of the process's context (see [`crate::sys::context`]).
    pub fn open(config: &DeviceConfig) -> Result<VulkanDevice, BackendError> {
        VulkanDevice::open_on(&context()?, config)
    }

    /// Opens a device on `context`.
    pub fn open_on(
        context: &Arc<Context>,
        config: &DeviceConfig,
    ) -> Result<VulkanDevice, BackendError> {
        let raw = Arc::new(RawDevice::create(context)?);
        let mut sched = Sched::new(&raw)?;
        let uid = NEXT_UID.fetch_add(1, Ordering::Relaxed);
        let (index, sem) = sched.create_stream()?;
        let zero = Allocation::new(&raw, ZERO_BYTES, 0)?;
        zero.write(0, &[0; ZERO_BYTES as usize]);
        let capacity = config.capacity.unwrap_or(context.facts.heap_bytes);
        Ok(VulkanDevice {
            inner: Arc::new(DeviceInner {
                uid,
                index: config.index,
                sched: Arc::new(Mutex::new(sched)),
                memory: Mutex::new(AddressSpace::new(config.index, capacity)),
                zero: Arc::new(zero),
                default: VulkanStream {
                    device_uid: uid,
                    index,
                    sem,
                },
                host_timeout: config.host_timeout,
                delays: Mutex::new(None),
                raw,
            }),
        })
    }

    /// The context (loader, instance, physical device) this device was made on.
    pub fn context(&self) -> &Arc<Context> {
        &self.inner.raw.context
    }

    /// The `VkDevice` and queue behind this device (interop and the raw-driver benchmark
    /// peer; work submitted there is outside this backend's stream order).
    pub fn raw(&self) -> &Arc<RawDevice> {
        &self.inner.raw
    }

    /// Number of live raw allocations.
    pub fn live_allocations(&self) -> usize {
        self.inner.memory.lock().len()
    }

    /// Refuses a stream of another device.
    pub(crate) fn check_stream(
        &self,
        call: &'static str,
        s: &VulkanStream,
    ) -> Result<(), BackendError> {
        if s.device_uid == self.inner.uid {
            Ok(())
        } else {
            Err(BackendError::invalid_argument(
                BACKEND,
                call,
                format!("{s:?} belongs to another device"),
            ))
        }
    }

    /// The live allocation holding `[ptr, ptr + len)`.
    pub(crate) fn span(
        &self,
        call: &'static str,
        ptr: DevicePtr,
        len: u64,
    ) -> Result<Span, BackendError> {
        self.inner.memory.lock().span(call, ptr, len)
    }

    /// Adds a closed gate at the end of `stream` (see [`Gate`]).
    pub(crate) fn gate(&self, stream: &VulkanStream) -> Result<Gate, BackendError> {
        let (before, value) = self.inner.sched.lock().gate(stream.index)?;
        Ok(Gate {
            sched: Arc::clone(&self.inner.sched),
            raw: Arc::clone(&self.inner.raw),
            stream: stream.index,
            sem: stream.sem,
            before,
            value,
        })
    }

    /// The stream's current end, after its pending waits.
    fn end_of(&self, stream: &VulkanStream) -> Result<u64, BackendError> {
        let mut sched = self.inner.sched.lock();
        sched.flush_waits(stream.index)?;
        Ok(sched.enqueued(stream.index))
    }

    fn wait(&self, stream: &VulkanStream, value: u64, what: &str) -> Result<(), BackendError> {
        self.wait_at(stream.index, stream.sem, value, what)
    }

    /// Blocks until value `value` of stream `index`, then reports the stream's fault if a
    /// gate at or before it opened without its host part (an aborted collective).
    fn wait_at(
        &self,
        index: usize,
        sem: vk::Semaphore,
        value: u64,
        what: &str,
    ) -> Result<(), BackendError> {
        host_wait(&self.inner.raw, sem, value, self.inner.host_timeout, what)?;
        self.fault_upto(index, value)
    }

    fn fault_upto(&self, index: usize, value: u64) -> Result<(), BackendError> {
        self.inner
            .sched
            .lock()
            .fault_upto(index, value)
            .map_or(Ok(()), Err)
    }

    fn enqueue(
        &self,
        stream: &VulkanStream,
        record: impl FnOnce(&ash::Device, vk::CommandBuffer),
        keep: Vec<Arc<Allocation>>,
    ) -> Result<(), BackendError> {
        self.inner
            .sched
            .lock()
            .enqueue(stream.index, record, keep)?;
        Ok(())
    }
}

impl Backend for VulkanDevice {
    type Stream = VulkanStream;
    type Event = VulkanEvent;

    fn name(&self) -> &str {
        BACKEND
    }

    fn device_index(&self) -> usize {
        self.inner.index
    }

    fn capabilities(&self) -> Capabilities {
        let mut c = Capabilities::default();
        // The backend enforces its own capacity (lavapipe never refuses an allocation).
        c.memory_capacity = true;
        c.allocation_alignment = ADDRESS_ALIGNMENT;
        c
    }

    fn async_error(&self) -> Option<BackendError> {
        self.inner.sched.lock().broken()
    }

    fn memory_info(&self) -> Result<MemoryInfo, BackendError> {
        let m = self.inner.memory.lock();
        Ok(MemoryInfo {
            free: m.capacity.saturating_sub(m.used),
            total: m.capacity,
        })
    }

    fn malloc(&self, bytes: u64) -> Result<DevicePtr, BackendError> {
        let mut m = self.inner.memory.lock();
        let base = m.reserve(bytes, self.inner.raw.context.facts.max_allocation)?;
        let alloc = Allocation::new(&self.inner.raw, bytes, base)?;
        Ok(m.insert(alloc))
    }

    fn free(&self, ptr: DevicePtr) -> Result<(), BackendError> {
        let alloc = self.inner.memory.lock().remove(ptr)?;
        drop(alloc);
        Ok(())
    }

    fn default_stream(&self) -> VulkanStream {
        self.inner.default
    }

    fn create_stream(&self) -> Result<VulkanStream, BackendError> {
        let (index, sem) = self.inner.sched.lock().create_stream()?;
        Ok(VulkanStream {
            device_uid: self.inner.uid,
            index,
            sem,
        })
    }

    fn stream_id(&self, stream: &VulkanStream) -> StreamId {
        StreamId(((self.inner.index as u64) << 32) | stream.index as u64)
    }

    fn create_event(&self) -> Result<VulkanEvent, BackendError> {
        Ok(VulkanEvent {
            device_uid: self.inner.uid,
            at: Mutex::new(None),
        })
    }

    fn record_event(&self, event: &VulkanEvent, stream: &VulkanStream) -> Result<(), BackendError> {
        self.check_stream("record_event", stream)?;
        if event.device_uid != self.inner.uid {
            return Err(BackendError::invalid_argument(
                BACKEND,
                "record_event",
                "the event belongs to another device",
            ));
        }
        let value = self.end_of(stream)?;
        *event.at.lock() = Some((stream.index, stream.sem, value));
        Ok(())
    }

    fn query_event(&self, event: &VulkanEvent) -> Result<bool, BackendError> {
        let Some((index, sem, value)) = *event.at.lock() else {
            return Ok(true);
        };
        if crate::sched::counter(&self.inner.raw, sem)? < value {
            return Ok(false);
        }
        self.fault_upto(index, value)?;
        Ok(true)
    }

    fn synchronize_event(&self, event: &VulkanEvent) -> Result<(), BackendError> {
        let Some((index, sem, value)) = *event.at.lock() else {
            return Ok(());
        };
        self.wait_at(index, sem, value, "synchronize_event")
    }

    fn stream_wait_event(
        &self,
        stream: &VulkanStream,
        event: &VulkanEvent,
    ) -> Result<(), BackendError> {
        self.check_stream("stream_wait_event", stream)?;
        if event.device_uid != self.inner.uid {
            return Err(BackendError::invalid_argument(
                BACKEND,
                "stream_wait_event",
                "the event belongs to another device",
            ));
        }
        if let Some((src, _, value)) = *event.at.lock() {
            self.inner.sched.lock().add_wait(stream.index, (src, value));
        }
        Ok(())
    }

    fn synchronize_stream(&self, stream: &VulkanStream) -> Result<(), BackendError> {
        self.check_stream("synchronize_stream", stream)?;
        let value = self.end_of(stream)?;
        self.wait(stream, value, "synchronize_stream")
    }

    fn synchronize_device(&self) -> Result<(), BackendError> {
        let ends = self.inner.sched.lock().ends()?;
        for (index, (sem, value)) in ends.into_iter().enumerate() {
            self.wait_at(index, sem, value, "synchronize_device")?;
        }
        Ok(())
    }

    fn memset_zero(
        &self,
        ptr: DevicePtr,
        bytes: u64,
        stream: &VulkanStream,
    ) -> Result<(), BackendError> {
        self.check_stream("memset_zero", stream)?;
        let span = self.span("memset_zero", ptr, bytes)?;
        if bytes == 0 {
            return Ok(());
        }
        let (start, end) = (span.offset, span.offset + bytes);
        let (a, b) = (start.next_multiple_of(4), end / 4 * 4);
        let dst = span.alloc.buffer;
        let zero = self.inner.zero.buffer;
        self.enqueue(
            stream,
            |d, cmd| {
                let mut ends = Vec::new();
                if a < b {
                    // SAFETY: `[a, b)` lies in `dst` and is 4-byte aligned; `cmd` records.
                    unsafe { d.cmd_fill_buffer(cmd, dst, a, b - a, 0) };
                    ends.extend([(start, a), (b, end)]);
                } else {
                    ends.push((start, end));
                }
                let regions: Vec<vk::BufferCopy> = ends
                    .into_iter()
                    .filter(|(s, e)| s < e)
                    .map(|(s, e)| {
                        vk::BufferCopy::default()
                            .src_offset(0)
                            .dst_offset(s)
                            .size(e - s)
                    })
                    .collect();
                if !regions.is_empty() {
                    // SAFETY: each region is shorter than 8 bytes (inside the zero buffer)
                    // and inside `dst`.
                    unsafe { d.cmd_copy_buffer(cmd, zero, dst, &regions) };
                }
            },
            vec![span.alloc.clone(), Arc::clone(&self.inner.zero)],
        )
    }

    fn copy_host_to_device(
        &self,
        dst: DevicePtr,
        src: &[u8],
        stream: &VulkanStream,
    ) -> Result<(), BackendError> {
        self.check_stream("copy_host_to_device", stream)?;
        let span = self.span("copy_host_to_device", dst, src.len() as u64)?;
        if src.is_empty() {
            return Ok(());
        }
        let staging = Allocation::new(&self.inner.raw, src.len() as u64, 0)?;
        staging.write(0, src);
        let (from, to, offset) = (staging.buffer, span.alloc.buffer, span.offset);
        let region = [vk::BufferCopy::default()
            .dst_offset(offset)
            .size(src.len() as u64)];
        self.enqueue(
            stream,
            // SAFETY: the region lies inside both buffers; `cmd` records.
            |d, cmd| unsafe { d.cmd_copy_buffer(cmd, from, to, &region) },
            vec![span.alloc, Arc::new(staging)],
        )
    }

    fn copy_device_to_host(
        &self,
        dst: &mut [u8],
        src: DevicePtr,
        stream: &VulkanStream,
    ) -> Result<(), BackendError> {
        self.check_stream("copy_device_to_host", stream)?;
        let span = self.span("copy_device_to_host", src, dst.len() as u64)?;
        if dst.is_empty() {
            return Ok(());
        }
        let value = self.end_of(stream)?;
        self.wait(stream, value, "copy_device_to_host")?;
        span.alloc.read(span.offset, dst);
        Ok(())
    }

    fn copy_device_to_device(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: u64,
        stream: &VulkanStream,
    ) -> Result<(), BackendError> {
        self.check_stream("copy_device_to_device", stream)?;
        let to = self.span("copy_device_to_device", dst, bytes)?;
        let from = self.span("copy_device_to_device", src, bytes)?;
        if bytes == 0 {
            return Ok(());
        }
        if Arc::ptr_eq(&to.alloc, &from.alloc)
            && to.offset < from.offset + bytes
            && from.offset < to.offset + bytes
        {
            return Err(BackendError::invalid_argument(
                BACKEND,
                "copy_device_to_device",
                format!(
                    "[{src}, +{bytes}) and [{dst}, +{bytes}) overlap; vkCmdCopyBuffer needs disjoint ranges"
                ),
            ));
        }
        let region = [vk::BufferCopy::default()
            .src_offset(from.offset)
            .dst_offset(to.offset)
            .size(bytes)];
        let (s, d_buf) = (from.alloc.buffer, to.alloc.buffer);
        self.enqueue(
            stream,
            // SAFETY: the region lies inside both buffers and does not overlap itself.
            |d, cmd| unsafe { d.cmd_copy_buffer(cmd, s, d_buf, &region) },
            vec![to.alloc, from.alloc],
        )
    }

    fn delay(&self, micros: u64, stream: &VulkanStream) -> Result<(), BackendError> {
        self.check_stream("delay", stream)?;
        if micros == 0 {
            return Ok(());
        }
        let mut delays = self.inner.delays.lock();
        if delays.is_none() {
            *delays = Some(Delays::start(self.inner.index, self.inner.host_timeout)?);
        }
        let gate = self.gate(stream)?;
        match delays.as_ref() {
            Some(d) => d.push(gate, micros),
            None => Ok(()),
        }
    }
}
