//! The device layer: [`AscendDevice`], one NPU as a memreuse [`Backend`], with RAII streams
//! and pooled events.
//!
//! As torch_npu does:
//! - every thread binds the device (`aclrtSetDevice`) before its first ACL call for it
//!   (rank threads, the watchdog: [`AscendDevice::bind`] runs before every call, cached
//!   per thread by the runtime layer);
//! - raw memory from `aclrtMallocAlign32` when the runtime exports it, else `aclrtMalloc`
//!   (which rounds to 32 bytes and pads 32 more), policy `ACL_MEM_MALLOC_HUGE_FIRST`;
//!   `ACL_ERROR_RT_MEMORY_ALLOCATION` / `ACL_ERROR_RT_DEVICE_OOM` are `OutOfMemory`, so the
//!   allocator's retry chain runs;
//! - `ACL_EVENT_SYNC` events from a per-device pool (see [`crate::events`]);
//! - host copies staged through pooled pinned buffers (`staging.rs`), copies with
//!   `aclrtMemcpyAsync` and `destMax`, zero-fill with `aclrtMemsetAsync`;
//! - device-to-device copies refuse addresses that are not 64-byte aligned;
//! - a stream is destroyed only after it was synchronized; when that fails (a hung or
//!   aborted stream) it is destroyed with `aclrtDestroyStreamForce` where the runtime has it;
//! - with a synchronize timeout set ([`AscendDevice::set_sync_timeout`]) and
//!   `aclrtSynchronizeStreamWithTimeout` present, a hung stream is a `Timeout` error
//!   (507046) instead of a host thread blocked for good.

use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use memreuse_core::{
    AllocationId, Backend, BackendError, DevicePtr, MemoryInfo, PhysicalHandle, RaceReport,
    StreamId,
};
use parking_lot::Mutex;

use crate::conversions::device_ptr;
pub use crate::events::AscendEvent;
use crate::events::EventPool;
use crate::loader::Api;
use crate::result::{BACKEND, acl, standin};
use crate::runtime::{self, bind};
use crate::staging::{Pinned, PinnedPool};
pub use crate::stream::AscendStream;
use crate::stream::{create_stream, synchronize};
use crate::sys;
use crate::virtual_memory::DeviceVm;

/// Staged host-to-device bytes kept beyond this are released by synchronizing their stream.
const MAX_PENDING_STAGING: usize = 64 << 20;

/// A pinned buffer holding bytes an enqueued host-to-device copy still reads.
struct Staging {
    buf: Pinned,
    len: usize,
    stream: AscendStream,
}

/// One Ascend NPU. Cheap to clone (shared state).
#[derive(Clone)]
pub struct AscendDevice {
    inner: Arc<DeviceInner>,
}

struct DeviceInner {
    api: &'static Api,
    device: i32,
    /// Milliseconds for `aclrtSynchronizeStreamWithTimeout`; -1: no limit.
    timeout_ms: Arc<AtomicI32>,
    default: AscendStream,
    events: Arc<EventPool>,
    pinned: PinnedPool,
    staging: Mutex<Vec<Staging>>,
    /// Reserved ranges, physical handles and mappings (`crate::virtual_memory`).
    vm: Mutex<DeviceVm>,
}

impl std::fmt::Debug for AscendDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "AscendDevice(npu:{} from {})",
            self.inner.device, self.inner.api.source
        )
    }
}

impl AscendDevice {
    /// True on the stand-in when its devices have their race detector (the runner switches
    /// it off for `--race-check adaptor`); never on a real CANN install.
    fn standin_detects_races(&self) -> bool {
        self.inner.api.memreuse_standin_race_reports.is_some()
            && (self.inner.api.memreuse_standin_set_race_detection.is_none()
                || runtime::standin_race_detection())
    }

    /// Opens device `index` with the given libraries (see [`crate::loader::api`]): binds it
    /// and creates its default (`compute`) stream.
    pub fn open(api: &'static Api, index: usize) -> Result<AscendDevice, BackendError> {
        runtime::init(api)?;
        let device = i32::try_from(index).map_err(|_| {
            BackendError::invalid_argument(BACKEND, "open", format!("device {index}"))
        })?;
        let timeout_ms = Arc::new(AtomicI32::new(-1));
        let default = create_stream(api, device, &timeout_ms)?;
        Ok(AscendDevice {
            inner: Arc::new(DeviceInner {
                api,
                device,
                timeout_ms,
                default,
                events: EventPool::new(api, device),
                pinned: PinnedPool::new(api),
                staging: Mutex::new(Vec::new()),
                vm: Mutex::new(DeviceVm::default()),
            }),
        })
    }

    /// The loaded libraries.
    pub fn api(&self) -> &'static Api {
        self.inner.api
    }

    /// The ACL device id.
    pub fn device_id(&self) -> i32 {
        self.inner.device
    }

    /// Binds this device to the calling thread (done before every ACL call).
    pub fn bind(&self) -> Result<(), BackendError> {
        bind(self.inner.api, self.inner.device)
    }

    /// Bounds every stream synchronize (and the synchronize before a stream is destroyed)
    /// by `timeout` through `aclrtSynchronizeStreamWithTimeout`, so a hung stream becomes a
    /// `Timeout` error (507046); `None` waits without limit. No effect on runtimes without
    /// that symbol. Values are clamped to 1..=`i32::MAX` milliseconds.
    pub fn set_sync_timeout(&self, timeout: Option<Duration>) {
        // At least 1 ms: 0 is not "no time at all" in every runtime version.
        let ms = timeout.map_or(-1, |t| {
            i32::try_from(t.as_millis()).unwrap_or(i32::MAX).max(1)
        });
        self.inner.timeout_ms.store(ms, Ordering::Relaxed);
    }

    /// Raw ACL events of this device created and not destroyed (in use, idle in the pool,
    /// or settling): bounded by the largest number of events alive at once.
    pub fn live_events(&self) -> usize {
        self.inner.events.live()
    }

    /// Binds the device, then runs `f` on its virtual-memory state (held for the call, so
    /// the ledger and the runtime change together).
    fn vm<R>(
        &self,
        f: impl FnOnce(&mut DeviceVm, &'static Api, i32) -> Result<R, BackendError>,
    ) -> Result<R, BackendError> {
        self.bind()?;
        f(&mut self.inner.vm.lock(), self.inner.api, self.inner.device)
    }

    fn release_staging(&self, only: Option<&AscendStream>) {
        let mut staging = self.inner.staging.lock();
        let (done, keep): (Vec<_>, Vec<_>) = staging
            .drain(..)
            .partition(|s| only.is_none_or(|o| &s.stream == o));
        *staging = keep;
        drop(staging);
        for s in done {
            self.inner.pinned.give(s.buf);
        }
    }
}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        if bind(self.api, self.device).is_ok() {
            // Waits for the device so staging can be released.
            let _ = acl::synchronize_device(self.api);
            // The device is idle: pages still mapped can go.
            self.vm.get_mut().release_all(self.api);
        }
        for s in self.staging.get_mut().drain(..) {
            self.pinned.give(s.buf);
        }
    }
}

impl Backend for AscendDevice {
    type Stream = AscendStream;
    type Event = AscendEvent;

    fn name(&self) -> &str {
        BACKEND
    }

    fn device_index(&self) -> usize {
        self.inner.device as usize
    }

    fn capabilities(&self) -> memreuse_core::Capabilities {
        let mut c = memreuse_core::Capabilities::default();
        // The stand-in is the mock behind the ACL/HCCL ABI: it honours what the mock does
        // (its configure hook takes the capacity and the seed). A real CANN install honours
        // none of it and has no race detector.
        if self.inner.api.is_standin() {
            c.deterministic_scheduling = true;
            c.memory_capacity = true;
            c.native_race_detection = self.standin_detects_races();
        }
        // The six symbols, and a runtime that does not refuse virtual memory on this part.
        c.virtual_memory = self
            .vm(|book, api, _| Ok(book.supported(api)))
            .unwrap_or(false);
        c
    }

    fn memory_info(&self) -> Result<MemoryInfo, BackendError> {
        self.bind()?;
        let (free, total) = acl::get_mem_info(self.inner.api, sys::ACL_HBM_MEM)?;
        Ok(MemoryInfo {
            free: free as u64,
            total: total as u64,
        })
    }

    fn malloc(&self, bytes: u64) -> Result<DevicePtr, BackendError> {
        self.bind()?;
        let size = usize::try_from(bytes).map_err(|_| {
            BackendError::invalid_argument(BACKEND, "malloc", "size exceeds size_t")
        })?;
        let api = self.inner.api;
        let policy = sys::ACL_MEM_MALLOC_HUGE_FIRST;
        match api.aclrtMallocAlign32 {
            Some(f) => acl::malloc_align32(f, size, policy, bytes),
            None => acl::malloc(api, size, policy, bytes),
        }
    }

    fn free(&self, ptr: DevicePtr) -> Result<(), BackendError> {
        self.bind()?;
        acl::free(self.inner.api, ptr)
    }

    fn default_stream(&self) -> AscendStream {
        self.inner.default.clone()
    }

    fn create_stream(&self) -> Result<AscendStream, BackendError> {
        create_stream(self.inner.api, self.inner.device, &self.inner.timeout_ms)
    }

    fn stream_id(&self, stream: &AscendStream) -> StreamId {
        StreamId(stream.raw_handle() as usize as u64)
    }

    fn create_event(&self) -> Result<AscendEvent, BackendError> {
        self.inner.events.take()
    }

    fn record_event(&self, event: &AscendEvent, stream: &AscendStream) -> Result<(), BackendError> {
        self.bind()?;
        event.record(stream.raw_handle())
    }

    fn query_event(&self, event: &AscendEvent) -> Result<bool, BackendError> {
        self.bind()?;
        event.query()
    }

    fn synchronize_event(&self, event: &AscendEvent) -> Result<(), BackendError> {
        self.bind()?;
        event.synchronize()
    }

    fn stream_wait_event(
        &self,
        stream: &AscendStream,
        event: &AscendEvent,
    ) -> Result<(), BackendError> {
        self.bind()?;
        event.wait_on(stream.raw_handle())
    }

    fn synchronize_stream(&self, stream: &AscendStream) -> Result<(), BackendError> {
        self.bind()?;
        let timeout = self.inner.timeout_ms.load(Ordering::Relaxed);
        synchronize(self.inner.api, stream.raw_handle(), timeout)?;
        self.release_staging(Some(stream));
        Ok(())
    }

    fn synchronize_device(&self) -> Result<(), BackendError> {
        self.bind()?;
        acl::synchronize_device(self.inner.api)?;
        self.release_staging(None);
        Ok(())
    }

    fn memset_zero(
        &self,
        ptr: DevicePtr,
        bytes: u64,
        stream: &AscendStream,
    ) -> Result<(), BackendError> {
        self.bind()?;
        let n = usize::try_from(bytes).map_err(|_| {
            BackendError::invalid_argument(BACKEND, "memset_zero", "size exceeds size_t")
        })?;
        // Value 0 is a byte.
        acl::memset_async(self.inner.api, ptr, n, 0, n, stream.raw_handle())
    }

    fn copy_host_to_device(
        &self,
        dst: DevicePtr,
        src: &[u8],
        stream: &AscendStream,
    ) -> Result<(), BackendError> {
        if src.is_empty() {
            return Ok(());
        }
        self.bind()?;
        let api = self.inner.api;
        let staging = self.inner.pinned.take(src.len())?;
        // SAFETY: `staging` is a pinned buffer of at least `src.len()` bytes that no
        // enqueued copy reads (it left the pool).
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr(),
                staging.as_mut_ptr().cast::<u8>(),
                src.len(),
            );
        };
        // SAFETY: `staging` stays out of the pool until the stream passed the copy
        // (returned only after synchronizing the stream or device); the device address is
        // checked by the runtime.
        let copied = unsafe {
            acl::memcpy_async(
                api,
                device_ptr(dst),
                src.len(),
                staging.as_mut_ptr(),
                src.len(),
                sys::ACL_MEMCPY_HOST_TO_DEVICE,
                stream.raw_handle(),
            )
        };
        if let Err(e) = copied {
            self.inner.pinned.give(staging);
            return Err(e);
        }
        let mut pending = self.inner.staging.lock();
        pending.push(Staging {
            buf: staging,
            len: src.len(),
            stream: stream.clone(),
        });
        let total: usize = pending.iter().map(|s| s.len).sum();
        drop(pending);
        if total > MAX_PENDING_STAGING {
            self.synchronize_stream(stream)?;
        }
        Ok(())
    }

    fn copy_device_to_host(
        &self,
        dst: &mut [u8],
        src: DevicePtr,
        stream: &AscendStream,
    ) -> Result<(), BackendError> {
        if dst.is_empty() {
            return Ok(());
        }
        self.bind()?;
        let api = self.inner.api;
        let staging = self.inner.pinned.take(dst.len())?;
        // SAFETY: `staging` holds at least `dst.len()` bytes and returns to the pool only
        // after the stream was synchronized (or the enqueue failed).
        let copied = unsafe {
            acl::memcpy_async(
                api,
                staging.as_mut_ptr(),
                dst.len(),
                device_ptr(src),
                dst.len(),
                sys::ACL_MEMCPY_DEVICE_TO_HOST,
                stream.raw_handle(),
            )
        };
        let result = copied.and_then(|()| {
            let timeout = self.inner.timeout_ms.load(Ordering::Relaxed);
            synchronize(api, stream.raw_handle(), timeout)
        });
        if result.is_ok() {
            // SAFETY: the copy completed (stream synchronized); both ranges hold `dst.len()`.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    staging.as_mut_ptr().cast::<u8>(),
                    dst.as_mut_ptr(),
                    dst.len(),
                );
            };
            self.inner.pinned.give(staging);
            // The stream passed every earlier copy too: their staging is free.
            self.release_staging(Some(stream));
        } else {
            // The copy may still be pending on a failed stream: keep the buffer until the
            // stream is synchronized.
            self.inner.staging.lock().push(Staging {
                buf: staging,
                len: 0,
                stream: stream.clone(),
            });
        }
        result
    }

    fn copy_device_to_device(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: u64,
        stream: &AscendStream,
    ) -> Result<(), BackendError> {
        if dst.addr() % 64 != 0 || src.addr() % 64 != 0 {
            return Err(BackendError::invalid_argument(
                BACKEND,
                "copy_device_to_device",
                format!("aclrtMemcpyAsync needs 64-byte aligned addresses (dst {dst}, src {src})"),
            ));
        }
        self.bind()?;
        let n = usize::try_from(bytes).map_err(|_| {
            BackendError::invalid_argument(BACKEND, "copy_device_to_device", "size")
        })?;
        // SAFETY: both ends are device memory, checked by the runtime; live stream.
        unsafe {
            acl::memcpy_async(
                self.inner.api,
                device_ptr(dst),
                n,
                device_ptr(src),
                n,
                sys::ACL_MEMCPY_DEVICE_TO_DEVICE,
                stream.raw_handle(),
            )
        }
    }

    fn delay(&self, micros: u64, stream: &AscendStream) -> Result<(), BackendError> {
        // ACL has no device-side sleep: on real NPUs this is a no-op (best effort, as the
        // trait allows); the stand-in enqueues an exact busy period.
        if let Some(f) = self.inner.api.memreuse_standin_delay {
            self.bind()?;
            standin::delay(f, stream.raw_handle(), micros)?;
        }
        Ok(())
    }

    fn annotate_allocation(&self, ptr: DevicePtr, bytes: u64, id: AllocationId) {
        if let Some(f) = self.inner.api.memreuse_standin_annotate {
            let _ = standin::annotate(f, self.inner.device, ptr.addr(), bytes, id.0);
        }
    }

    fn set_op_label(&self, label: &str) {
        if let Some(f) = self.inner.api.memreuse_standin_set_op_label {
            let _ = standin::set_op_label(f, self.inner.device, label);
        }
    }

    fn vm_granularity(&self) -> Result<u64, BackendError> {
        self.vm(DeviceVm::granularity)
    }

    fn vm_reserve(&self, bytes: u64) -> Result<DevicePtr, BackendError> {
        self.vm(|book, api, d| book.reserve(api, d, bytes))
    }

    fn vm_release(&self, base: DevicePtr) -> Result<(), BackendError> {
        self.vm(|book, api, _| book.release(api, base))
    }

    fn vm_create_physical(&self, bytes: u64) -> Result<PhysicalHandle, BackendError> {
        self.vm(|book, api, d| book.create_physical(api, d, bytes))
    }

    fn vm_release_physical(&self, handle: PhysicalHandle) -> Result<(), BackendError> {
        self.vm(|book, api, _| book.release_physical(api, handle))
    }

    fn vm_map(&self, at: DevicePtr, handle: PhysicalHandle) -> Result<(), BackendError> {
        self.vm(|book, api, d| book.map(api, d, at, handle))
    }

    fn vm_unmap(&self, at: DevicePtr, bytes: u64) -> Result<(), BackendError> {
        self.vm(|book, api, _| book.unmap(api, at, bytes))
    }

    fn race_reports(&self) -> Option<Vec<RaceReport>> {
        if !self.standin_detects_races() {
            return None;
        }
        let f = self.inner.api.memreuse_standin_race_reports?;
        let buf = standin::race_reports(f, self.inner.device)?;
        Some(crate::races::parse(&String::from_utf8_lossy(&buf)))
    }
}
