//! Layer 3: [`AscendDevice`], one NPU as a memreuse [`Backend`], with RAII streams and
//! pooled events.
//!
//! As torch_npu does:
//! - every thread binds the device (`aclrtSetDevice`) before its first ACL call for it
//!   (rank threads, the watchdog: [`AscendDevice::bind`] runs before every call, cached
//!   per thread);
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

use std::cell::Cell;
use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::time::Duration;

use memreuse_core::{
    AllocationId, Backend, BackendError, DevicePtr, MemoryInfo, PhysicalHandle, RaceReport,
    StreamId,
};
use parking_lot::Mutex;

pub use crate::events::AscendEvent;
use crate::events::EventPool;
use crate::loader::Api;
use crate::result::{BACKEND, acl_check, invalid};
use crate::staging::{Pinned, PinnedPool};
pub use crate::stream::AscendStream;
use crate::stream::{create_stream, sync_stream_raw};
use crate::sys;
use crate::virtual_memory::DeviceVm;

/// Staged host-to-device bytes kept beyond this are released by synchronizing their stream.
const MAX_PENDING_STAGING: usize = 64 << 20;

thread_local! {
    /// `(libraries, device, generation)` this thread last bound with `aclrtSetDevice`
    /// (device -1: none).
    static BOUND: Cell<(usize, i32, usize)> = const { Cell::new((0, -1, 0)) };
}

/// Bumped whenever every thread's binding becomes stale (finalize, stand-in reconfigure).
static GENERATION: AtomicUsize = AtomicUsize::new(1);

/// A pinned buffer holding bytes an enqueued host-to-device copy still reads.
struct Staging {
    buf: Pinned,
    len: usize,
    stream: AscendStream,
}

/// Binds `device` to the calling thread (`aclrtSetDevice`), once per thread and device.
pub(crate) fn bind(api: &Api, device: i32) -> Result<(), BackendError> {
    let key = (
        std::ptr::from_ref(api) as usize,
        device,
        GENERATION.load(Ordering::Acquire),
    );
    if BOUND.with(Cell::get) == key {
        return Ok(());
    }
    // SAFETY: plain integer argument.
    acl_check(unsafe { (api.aclrtSetDevice)(device) }, "aclrtSetDevice", 0)?;
    BOUND.with(|b| b.set(key));
    crate::note_device_set(api, device);
    Ok(())
}

/// Forgets which device every thread bound (after the library was reconfigured or
/// finalised): each thread's next call sets its device again.
pub(crate) fn forget_binding() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
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
                || crate::registry::STANDIN_RACE_DETECTION
                    .load(std::sync::atomic::Ordering::Acquire))
    }

    /// Opens device `index` with the given libraries (see [`crate::loader::api`]): binds it
    /// and creates its default (`compute`) stream.
    pub fn open(api: &'static Api, index: usize) -> Result<AscendDevice, BackendError> {
        crate::init(api)?;
        let device =
            i32::try_from(index).map_err(|_| invalid("open", format!("device {index}")))?;
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

fn dptr(p: DevicePtr) -> *mut c_void {
    p.addr() as usize as *mut c_void
}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        if bind(self.api, self.device).is_ok() {
            // SAFETY: no arguments; waits for the device so staging can be released.
            let _ = unsafe { (self.api.aclrtSynchronizeDevice)() };
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
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: both out-pointers are valid.
        let code = unsafe {
            (self.inner.api.aclrtGetMemInfo)(sys::ACL_HBM_MEM, &raw mut free, &raw mut total)
        };
        acl_check(code, "aclrtGetMemInfo", 0)?;
        Ok(MemoryInfo {
            free: free as u64,
            total: total as u64,
        })
    }

    fn malloc(&self, bytes: u64) -> Result<DevicePtr, BackendError> {
        self.bind()?;
        let size = usize::try_from(bytes).map_err(|_| invalid("malloc", "size exceeds size_t"))?;
        let mut p: *mut c_void = std::ptr::null_mut();
        let api = self.inner.api;
        let (f, call) = match api.aclrtMallocAlign32 {
            Some(f) => (f, "aclrtMallocAlign32"),
            None => (api.aclrtMalloc, "aclrtMalloc"),
        };
        // SAFETY: `p` is a valid out-pointer; size and policy are plain values.
        let code = unsafe { f(&raw mut p, size, sys::ACL_MEM_MALLOC_HUGE_FIRST) };
        acl_check(code, call, bytes)?;
        Ok(DevicePtr(p as usize as u64))
    }

    fn free(&self, ptr: DevicePtr) -> Result<(), BackendError> {
        self.bind()?;
        // SAFETY: the caller guarantees `ptr` came from `malloc` and no work uses it; the
        // runtime checks the address itself.
        let code = unsafe { (self.inner.api.aclrtFree)(dptr(ptr)) };
        acl_check(code, "aclrtFree", 0)
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
        let (code, call) = sync_stream_raw(self.inner.api, stream.raw_handle(), timeout);
        acl_check(code, call, 0)?;
        self.release_staging(Some(stream));
        Ok(())
    }

    fn synchronize_device(&self) -> Result<(), BackendError> {
        self.bind()?;
        // SAFETY: no arguments.
        let code = unsafe { (self.inner.api.aclrtSynchronizeDevice)() };
        acl_check(code, "aclrtSynchronizeDevice", 0)?;
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
        let n =
            usize::try_from(bytes).map_err(|_| invalid("memset_zero", "size exceeds size_t"))?;
        // SAFETY: device address checked by the runtime; live stream; value 0 is a byte.
        let code =
            unsafe { (self.inner.api.aclrtMemsetAsync)(dptr(ptr), n, 0, n, stream.raw_handle()) };
        acl_check(code, "aclrtMemsetAsync", 0)
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
        let code = unsafe {
            (api.aclrtMemcpyAsync)(
                dptr(dst),
                src.len(),
                staging.as_mut_ptr(),
                src.len(),
                sys::ACL_MEMCPY_HOST_TO_DEVICE,
                stream.raw_handle(),
            )
        };
        if let Err(e) = acl_check(code, "aclrtMemcpyAsync", 0) {
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
        let code = unsafe {
            (api.aclrtMemcpyAsync)(
                staging.as_mut_ptr(),
                dst.len(),
                dptr(src),
                dst.len(),
                sys::ACL_MEMCPY_DEVICE_TO_HOST,
                stream.raw_handle(),
            )
        };
        let result = acl_check(code, "aclrtMemcpyAsync", 0).and_then(|()| {
            let timeout = self.inner.timeout_ms.load(Ordering::Relaxed);
            let (code, call) = sync_stream_raw(api, stream.raw_handle(), timeout);
            acl_check(code, call, 0)
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
            return Err(invalid(
                "copy_device_to_device",
                format!("aclrtMemcpyAsync needs 64-byte aligned addresses (dst {dst}, src {src})"),
            ));
        }
        self.bind()?;
        let n = usize::try_from(bytes).map_err(|_| invalid("copy_device_to_device", "size"))?;
        // SAFETY: device addresses are checked by the runtime; live stream.
        let code = unsafe {
            (self.inner.api.aclrtMemcpyAsync)(
                dptr(dst),
                n,
                dptr(src),
                n,
                sys::ACL_MEMCPY_DEVICE_TO_DEVICE,
                stream.raw_handle(),
            )
        };
        acl_check(code, "aclrtMemcpyAsync", 0)
    }

    fn delay(&self, micros: u64, stream: &AscendStream) -> Result<(), BackendError> {
        // ACL has no device-side sleep: on real NPUs this is a no-op (best effort, as the
        // trait allows); the stand-in enqueues an exact busy period.
        if let Some(f) = self.inner.api.memreuse_standin_delay {
            self.bind()?;
            // SAFETY: live stream handle, plain integer.
            let code = unsafe { f(stream.raw_handle(), micros) };
            acl_check(code, "memreuse_standin_delay", 0)?;
        }
        Ok(())
    }

    fn annotate_allocation(&self, ptr: DevicePtr, bytes: u64, id: AllocationId) {
        if let Some(f) = self.inner.api.memreuse_standin_annotate {
            // SAFETY: plain integers.
            let _ = unsafe { f(self.inner.device, ptr.addr(), bytes, id.0) };
        }
    }

    fn set_op_label(&self, label: &str) {
        if let Some(f) = self.inner.api.memreuse_standin_set_op_label {
            // SAFETY: `label` is valid for `label.len()` bytes during the call.
            let _ = unsafe { f(self.inner.device, label.as_ptr().cast(), label.len()) };
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
        // SAFETY: a null buffer asks only for the size.
        let needed = unsafe { f(self.inner.device, std::ptr::null_mut(), 0) };
        let mut buf = vec![0u8; usize::try_from(needed).ok()?];
        // SAFETY: `buf` is valid for `buf.len()` bytes.
        let written = unsafe { f(self.inner.device, buf.as_mut_ptr().cast(), buf.len()) };
        if written != needed {
            return None;
        }
        Some(crate::races::parse(&String::from_utf8_lossy(&buf)))
    }
}
