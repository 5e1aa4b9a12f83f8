//! Layer 3: [`AscendDevice`], one NPU as a memreuse [`Backend`], with RAII streams and
//! events.
//!
//! As torch_npu does:
//! - every thread binds the device (`aclrtSetDevice`) before its first ACL call for it
//!   (rank threads, the watchdog: [`AscendDevice::bind`] runs before every call, cached
//!   per thread);
//! - raw memory from `aclrtMallocAlign32` when the runtime exports it, else `aclrtMalloc`
//!   (which rounds to 32 bytes and pads 32 more), policy `ACL_MEM_MALLOC_HUGE_FIRST`;
//!   `ACL_ERROR_RT_MEMORY_ALLOCATION` is `OutOfMemory`, so the allocator's retry chain runs;
//! - events with `ACL_EVENT_CAPTURE_STREAM_PROGRESS` (through `aclrtCreateEventExWithFlag`
//!   when present), queried with `aclrtQueryEventStatus` (COMPLETE = 1);
//! - host copies staged through page-locked `aclrtMallocHost` memory, copies with
//!   `aclrtMemcpyAsync` and `destMax`, zero-fill with `aclrtMemsetAsync`;
//! - device-to-device copies refuse addresses that are not 64-byte aligned.

use std::cell::Cell;
use std::ffi::c_void;
use std::sync::Arc;

use memreuse_core::{
    AllocationId, Backend, BackendError, DevicePtr, MemoryInfo, RaceReport, StreamId,
};
use parking_lot::Mutex;

use crate::loader::Api;
use crate::result::{BACKEND, acl_check, invalid};
use crate::sys;

/// Staged host-to-device bytes kept beyond this are released by synchronizing their stream.
const MAX_PENDING_STAGING: usize = 64 << 20;

thread_local! {
    /// `(libraries, device)` this thread last bound with `aclrtSetDevice` (device -1: none).
    static BOUND: Cell<(usize, i32)> = const { Cell::new((0, -1)) };
}

/// A stream of an [`AscendDevice`]; destroyed when the last clone drops.
#[derive(Clone)]
pub struct AscendStream(Arc<StreamInner>);

struct StreamInner {
    raw: usize,
    device: i32,
    api: &'static Api,
}

impl AscendStream {
    pub(crate) fn raw_handle(&self) -> sys::aclrtStream {
        self.0.raw as sys::aclrtStream
    }
}

impl Drop for StreamInner {
    fn drop(&mut self) {
        if bind(self.api, self.device).is_ok() {
            // SAFETY: `raw` was created by aclrtCreateStream and is destroyed once, here.
            let code = unsafe { (self.api.aclrtDestroyStream)(self.raw as sys::aclrtStream) };
            if code != sys::ACL_SUCCESS {
                tracing::warn!(code, "aclrtDestroyStream failed");
            }
        }
    }
}

impl PartialEq for AscendStream {
    fn eq(&self, other: &Self) -> bool {
        self.0.raw == other.0.raw
    }
}
impl Eq for AscendStream {}
impl std::hash::Hash for AscendStream {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.raw.hash(state);
    }
}
impl std::fmt::Debug for AscendStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "AscendStream({:#x} on npu:{})",
            self.0.raw, self.0.device
        )
    }
}

/// An event of an [`AscendDevice`]; destroyed on drop.
pub struct AscendEvent {
    raw: usize,
    device: i32,
    api: &'static Api,
}

impl std::fmt::Debug for AscendEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AscendEvent({:#x} on npu:{})", self.raw, self.device)
    }
}

impl Drop for AscendEvent {
    fn drop(&mut self) {
        if bind(self.api, self.device).is_ok() {
            // SAFETY: `raw` was created by aclrtCreateEvent*WithFlag and is destroyed once.
            let code = unsafe { (self.api.aclrtDestroyEvent)(self.raw as sys::aclrtEvent) };
            if code != sys::ACL_SUCCESS {
                tracing::warn!(code, "aclrtDestroyEvent failed");
            }
        }
    }
}

/// Page-locked host memory holding bytes an enqueued host-to-device copy still reads.
struct Staging {
    ptr: usize,
    len: usize,
    stream: AscendStream,
}

/// Binds `device` to the calling thread (`aclrtSetDevice`), once per thread and device.
pub(crate) fn bind(api: &Api, device: i32) -> Result<(), BackendError> {
    let key = (std::ptr::from_ref(api) as usize, device);
    if BOUND.with(Cell::get) == key {
        return Ok(());
    }
    // SAFETY: plain integer argument.
    acl_check(unsafe { (api.aclrtSetDevice)(device) }, "aclrtSetDevice", 0)?;
    BOUND.with(|b| b.set(key));
    Ok(())
}

/// Forgets which device this thread bound (after the library was reconfigured).
pub(crate) fn forget_binding() {
    BOUND.with(|b| b.set((0, -1)));
}

/// One Ascend NPU. Cheap to clone (shared state).
#[derive(Clone)]
pub struct AscendDevice {
    inner: Arc<DeviceInner>,
}

struct DeviceInner {
    api: &'static Api,
    device: i32,
    default: AscendStream,
    staging: Mutex<Vec<Staging>>,
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
    /// Opens device `index` with the given libraries (see [`crate::loader::api`]): binds it
    /// and creates its default (`compute`) stream.
    pub fn open(api: &'static Api, index: usize) -> Result<AscendDevice, BackendError> {
        crate::init(api)?;
        let device =
            i32::try_from(index).map_err(|_| invalid("open", format!("device {index}")))?;
        let default = create_stream(api, device)?;
        Ok(AscendDevice {
            inner: Arc::new(DeviceInner {
                api,
                device,
                default,
                staging: Mutex::new(Vec::new()),
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

    fn release_staging(&self, only: Option<&AscendStream>) {
        let mut staging = self.inner.staging.lock();
        let (done, keep): (Vec<_>, Vec<_>) = staging
            .drain(..)
            .partition(|s| only.is_none_or(|o| &s.stream == o));
        *staging = keep;
        drop(staging);
        for s in done {
            free_host(self.inner.api, s.ptr);
        }
    }
}

fn create_stream(api: &'static Api, device: i32) -> Result<AscendStream, BackendError> {
    bind(api, device)?;
    let mut raw: sys::aclrtStream = std::ptr::null_mut();
    // SAFETY: `raw` is a valid out-pointer.
    let code = unsafe { (api.aclrtCreateStream)(&raw mut raw) };
    acl_check(code, "aclrtCreateStream", 0)?;
    Ok(AscendStream(Arc::new(StreamInner {
        raw: raw as usize,
        device,
        api,
    })))
}

fn malloc_host(api: &Api, len: usize) -> Result<*mut c_void, BackendError> {
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: `p` is a valid out-pointer; `len > 0` (callers skip empty copies).
    let code = unsafe { (api.aclrtMallocHost)(&raw mut p, len) };
    acl_check(code, "aclrtMallocHost", len as u64)?;
    Ok(p)
}

fn free_host(api: &Api, ptr: usize) {
    // SAFETY: `ptr` came from aclrtMallocHost and no enqueued copy reads it any more.
    let code = unsafe { (api.aclrtFreeHost)(ptr as *mut c_void) };
    if code != sys::ACL_SUCCESS {
        tracing::warn!(code, "aclrtFreeHost failed");
    }
}

fn dptr(p: DevicePtr) -> *mut c_void {
    p.addr() as usize as *mut c_void
}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        if bind(self.api, self.device).is_ok() {
            // SAFETY: no arguments; waits for the device so staging can be freed.
            let _ = unsafe { (self.api.aclrtSynchronizeDevice)() };
        }
        for s in self.staging.get_mut().drain(..) {
            free_host(self.api, s.ptr);
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
            c.native_race_detection = self.inner.api.memreuse_standin_race_reports.is_some();
        }
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
        create_stream(self.inner.api, self.inner.device)
    }

    fn stream_id(&self, stream: &AscendStream) -> StreamId {
        StreamId(stream.0.raw as u64)
    }

    fn create_event(&self) -> Result<AscendEvent, BackendError> {
        self.bind()?;
        let api = self.inner.api;
        let (f, call) = match api.aclrtCreateEventExWithFlag {
            Some(f) => (f, "aclrtCreateEventExWithFlag"),
            None => (api.aclrtCreateEventWithFlag, "aclrtCreateEventWithFlag"),
        };
        let mut raw: sys::aclrtEvent = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer.
        let code = unsafe { f(&raw mut raw, sys::ACL_EVENT_CAPTURE_STREAM_PROGRESS) };
        acl_check(code, call, 0)?;
        Ok(AscendEvent {
            raw: raw as usize,
            device: self.inner.device,
            api,
        })
    }

    fn record_event(&self, event: &AscendEvent, stream: &AscendStream) -> Result<(), BackendError> {
        self.bind()?;
        // SAFETY: both handles are live (owned by their RAII wrappers).
        let code = unsafe {
            (self.inner.api.aclrtRecordEvent)(event.raw as sys::aclrtEvent, stream.raw_handle())
        };
        acl_check(code, "aclrtRecordEvent", 0)
    }

    fn query_event(&self, event: &AscendEvent) -> Result<bool, BackendError> {
        self.bind()?;
        let mut status = sys::ACL_EVENT_RECORDED_STATUS_NOT_READY;
        // SAFETY: live handle, valid out-pointer.
        let code = unsafe {
            (self.inner.api.aclrtQueryEventStatus)(event.raw as sys::aclrtEvent, &raw mut status)
        };
        acl_check(code, "aclrtQueryEventStatus", 0)?;
        Ok(status == sys::ACL_EVENT_RECORDED_STATUS_COMPLETE)
    }

    fn synchronize_event(&self, event: &AscendEvent) -> Result<(), BackendError> {
        self.bind()?;
        // SAFETY: live handle.
        let code = unsafe { (self.inner.api.aclrtSynchronizeEvent)(event.raw as sys::aclrtEvent) };
        acl_check(code, "aclrtSynchronizeEvent", 0)
    }

    fn stream_wait_event(
        &self,
        stream: &AscendStream,
        event: &AscendEvent,
    ) -> Result<(), BackendError> {
        self.bind()?;
        // SAFETY: live handles.
        let code = unsafe {
            (self.inner.api.aclrtStreamWaitEvent)(stream.raw_handle(), event.raw as sys::aclrtEvent)
        };
        acl_check(code, "aclrtStreamWaitEvent", 0)
    }

    fn synchronize_stream(&self, stream: &AscendStream) -> Result<(), BackendError> {
        self.bind()?;
        // SAFETY: live handle.
        let code = unsafe { (self.inner.api.aclrtSynchronizeStream)(stream.raw_handle()) };
        acl_check(code, "aclrtSynchronizeStream", 0)?;
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
        let staging = malloc_host(api, src.len())?;
        // SAFETY: `staging` is a fresh host allocation of `src.len()` bytes.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), staging.cast::<u8>(), src.len()) };
        // SAFETY: `staging` stays allocated until the stream passed the copy (released only
        // after synchronizing the stream or device); the device address is checked by the
        // runtime.
        let code = unsafe {
            (api.aclrtMemcpyAsync)(
                dptr(dst),
                src.len(),
                staging,
                src.len(),
                sys::ACL_MEMCPY_HOST_TO_DEVICE,
                stream.raw_handle(),
            )
        };
        if let Err(e) = acl_check(code, "aclrtMemcpyAsync", 0) {
            free_host(api, staging as usize);
            return Err(e);
        }
        let mut pending = self.inner.staging.lock();
        pending.push(Staging {
            ptr: staging as usize,
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
        let staging = malloc_host(api, dst.len())?;
        // SAFETY: `staging` holds `dst.len()` bytes and is freed only after the stream was
        // synchronized (or the enqueue failed).
        let code = unsafe {
            (api.aclrtMemcpyAsync)(
                staging,
                dst.len(),
                dptr(src),
                dst.len(),
                sys::ACL_MEMCPY_DEVICE_TO_HOST,
                stream.raw_handle(),
            )
        };
        let result = acl_check(code, "aclrtMemcpyAsync", 0).and_then(|()| {
            // SAFETY: live stream.
            let code = unsafe { (api.aclrtSynchronizeStream)(stream.raw_handle()) };
            acl_check(code, "aclrtSynchronizeStream", 0)
        });
        if result.is_ok() {
            // SAFETY: the copy completed (stream synchronized); both ranges hold `dst.len()`.
            unsafe {
                std::ptr::copy_nonoverlapping(staging.cast::<u8>(), dst.as_mut_ptr(), dst.len());
            };
        }
        free_host(api, staging as usize);
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

    fn race_reports(&self) -> Option<Vec<RaceReport>> {
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
