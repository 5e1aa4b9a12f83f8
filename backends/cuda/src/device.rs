//! [`CudaDevice`]: one GPU through the CUDA driver API.
//!
//! - Raw memory: `cuMemAlloc` / `cuMemFree` (synchronous), never cudarc's `CudaSlice`,
//!   which creates two events per slice. Live allocations are tracked so every range an
//!   operation touches is checked first: a bad address is `InvalidArgument`, not a sticky
//!   context error.
//! - Streams: non-blocking (`CU_STREAM_NON_BLOCKING`); the "default" stream is one such
//!   stream created at open, never the legacy null stream.
//! - Events: `CU_EVENT_DISABLE_TIMING`; queried with `cuEventQuery` (`try_is_complete`).
//! - Every call binds the device's context to the calling thread first (rank threads and
//!   the process group's watchdog call in from threads CUDA has never seen).

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use cudarc::driver::{CudaContext, CudaEvent, CudaStream, result};
use memreuse_core::{Backend, BackendError, DevicePtr, MemoryInfo, PhysicalHandle, StreamId};
use parking_lot::Mutex;

use crate::error::{self, BACKEND_NAME};
use crate::virtual_memory::{self as vm, DeviceVm};

/// Longest `delay` honoured; longer ones are clamped.
pub const MAX_DELAY: Duration = Duration::from_secs(10);

static NEXT_STREAM_ID: AtomicU64 = AtomicU64::new(1);

/// A stream of a [`CudaDevice`]. Clones are handles to the same stream.
#[derive(Clone)]
pub struct CudaStreamHandle {
    id: u64,
    raw: Arc<CudaStream>,
}

impl CudaStreamHandle {
    /// cudarc's stream (for NCCL calls and interop).
    pub fn raw(&self) -> &Arc<CudaStream> {
        &self.raw
    }
}

impl PartialEq for CudaStreamHandle {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}
impl Eq for CudaStreamHandle {}
impl Hash for CudaStreamHandle {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.id.hash(state);
    }
}
impl fmt::Debug for CudaStreamHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CudaStream#{}", self.id)
    }
}

/// An event of a [`CudaDevice`] (timing disabled).
#[derive(Debug)]
pub struct CudaEventHandle {
    raw: CudaEvent,
}

struct Inner {
    ordinal: usize,
    ctx: Arc<CudaContext>,
    default_stream: CudaStreamHandle,
    /// Live raw allocations: start address -> length.
    allocations: Mutex<BTreeMap<u64, u64>>,
    /// Virtual memory: support, reserved ranges, handles, mappings (`virtual_memory.rs`).
    vm: Mutex<DeviceVm>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Memory the caller never freed goes back to the driver once the device is idle.
        // Errors cannot be reported from a drop; the context records them (cudarc).
        let live = std::mem::take(&mut *self.allocations.lock());
        let vm = self.vm.get_mut();
        if (live.is_empty() && !vm.holds_anything()) || self.ctx.bind_to_thread().is_err() {
            return;
        }
        let _ = self.ctx.synchronize();
        for ptr in live.into_keys() {
            // SAFETY: `ptr` came from `cuMemAlloc` in `malloc`, was removed from the table
            // (so it is freed once), and the device is idle (synchronized above).
            let _ = unsafe { result::free_sync(ptr) };
        }
        vm.release_all();
    }
}

/// One GPU: raw memory, non-blocking streams, events and stream-ordered copies.
#[derive(Clone)]
pub struct CudaDevice {
    inner: Arc<Inner>,
}

impl fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CudaDevice({})", self.inner.ordinal)
    }
}

/// Number of CUDA devices, or `Unavailable` when the driver is missing or reports none.
pub fn device_count() -> Result<usize, BackendError> {
    error::guard("device_count", || {
        error::probe_driver()?;
        result::init().map_err(|e| {
            error::unavailable(format!("cuInit failed: {}", error::driver("cuInit", e)))
        })?;
        let n = result::device::get_count().map_err(|e| error::driver("cuDeviceGetCount", e))?;
        Ok(usize::try_from(n).unwrap_or(0))
    })
}

impl CudaDevice {
    /// Opens device `ordinal` (its primary context) and creates its default stream.
    pub fn open(ordinal: usize) -> Result<CudaDevice, BackendError> {
        error::guard("open", || {
            let count = device_count()?;
            if ordinal >= count {
                return Err(error::unavailable(format!(
                    "device {ordinal} requested, {count} CUDA device(s) visible"
                )));
            }
            let ctx = CudaContext::new(ordinal)
                .map_err(|e| error::driver("cuDevicePrimaryCtxRetain", e))?;
            // SAFETY: this crate never creates a `CudaSlice`, the only thing cudarc's event
            // tracking synchronizes; ordering is the allocator's job through events.
            unsafe { ctx.disable_event_tracking() };
            let raw = ctx
                .new_stream()
                .map_err(|e| error::driver("cuStreamCreate", e))?;
            let support = vm::query_support(ctx.cu_device(), ordinal);
            Ok(CudaDevice {
                inner: Arc::new(Inner {
                    ordinal,
                    ctx,
                    default_stream: CudaStreamHandle {
                        id: NEXT_STREAM_ID.fetch_add(1, Ordering::Relaxed),
                        raw,
                    },
                    allocations: Mutex::new(BTreeMap::new()),
                    vm: Mutex::new(DeviceVm::new(support, ordinal)),
                }),
            })
        })
    }

    /// cudarc's context of this device.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.inner.ctx
    }

    /// Binds the device's context to the calling thread.
    pub fn bind(&self) -> Result<(), BackendError> {
        self.inner
            .ctx
            .bind_to_thread()
            .map_err(|e| error::driver("cuCtxSetCurrent", e))
    }

    /// Checks that `[ptr, ptr + bytes)` lies inside one live allocation, or in pages mapped
    /// by `vm_map` (possibly several adjacent mappings).
    pub fn check_range(
        &self,
        call: &'static str,
        ptr: DevicePtr,
        bytes: u64,
    ) -> Result<(), BackendError> {
        let end = ptr.addr().checked_add(bytes).ok_or_else(|| {
            BackendError::invalid_argument(
                BACKEND_NAME,
                call,
                format!("range {ptr}+{bytes} overflows"),
            )
        })?;
        let live = self.inner.allocations.lock();
        match live.range(..=ptr.addr()).next_back() {
            Some((&start, &len)) if end <= start + len => Ok(()),
            _ if self.inner.vm.lock().covers(ptr.addr(), end) => Ok(()),
            _ => Err(BackendError::invalid_argument(
                BACKEND_NAME,
                call,
                format!(
                    "{bytes} bytes at {ptr} are not inside a live allocation of device {}",
                    self.inner.ordinal
                ),
            )),
        }
    }

    fn ordinal_i32(&self) -> i32 {
        i32::try_from(self.inner.ordinal).unwrap_or(i32::MAX)
    }

    fn stream_ok(&self, call: &'static str, stream: &CudaStreamHandle) -> Result<(), BackendError> {
        if Arc::ptr_eq(stream.raw.context(), &self.inner.ctx) {
            Ok(())
        } else {
            Err(BackendError::invalid_argument(
                BACKEND_NAME,
                call,
                "stream belongs to another device",
            ))
        }
    }
}

/// Host function enqueued by `delay`: sleeps for `arg` microseconds on CUDA's callback
/// thread. It makes no CUDA call (forbidden in host functions) and cannot unwind.
extern "C" fn sleep_micros(arg: *mut c_void) {
    std::thread::sleep(Duration::from_micros(arg.addr() as u64));
}

impl Backend for CudaDevice {
    type Stream = CudaStreamHandle;
    type Event = CudaEventHandle;

    fn name(&self) -> &str {
        BACKEND_NAME
    }

    fn device_index(&self) -> usize {
        self.inner.ordinal
    }

    fn capabilities(&self) -> memreuse_core::Capabilities {
        let mut c = memreuse_core::Capabilities::default();
        c.virtual_memory = self.inner.vm.lock().supported();
        // The stand-in is the mock behind the driver ABI: it honours the capacity and the
        // seed its configure hook takes, and has the mock's race detector and exact delays.
        // A real driver has none of the hooks.
        if let Some(h) = crate::standin::hooks().filter(|h| h.is_standin()) {
            c.deterministic_scheduling = true;
            c.memory_capacity = true;
            c.exact_delays = h.delay.is_some();
            c.native_race_detection =
                h.race_reports.is_some() && crate::standin::RACE_DETECTION.load(Ordering::Acquire);
        }
        c
    }

    fn memory_info(&self) -> Result<MemoryInfo, BackendError> {
        self.bind()?;
        let (free, total) = result::mem_get_info().map_err(|e| error::driver("cuMemGetInfo", e))?;
        Ok(MemoryInfo {
            free: free as u64,
            total: total as u64,
        })
    }

    fn malloc(&self, bytes: u64) -> Result<DevicePtr, BackendError> {
        if bytes == 0 {
            return Err(BackendError::invalid_argument(
                BACKEND_NAME,
                "malloc",
                "zero bytes",
            ));
        }
        let len = usize::try_from(bytes).map_err(|_| {
            BackendError::invalid_argument(
                BACKEND_NAME,
                "malloc",
                format!("{bytes} bytes do not fit in usize"),
            )
        })?;
        self.bind()?;
        // SAFETY: the context is bound; the memory is uninitialized, which is what
        // `Backend::malloc` promises (contents undefined) and is never read on the host.
        let ptr = unsafe { result::malloc_sync(len) }.map_err(|e| error::alloc(bytes, e))?;
        self.inner.allocations.lock().insert(ptr, bytes);
        Ok(DevicePtr(ptr))
    }

    fn free(&self, ptr: DevicePtr) -> Result<(), BackendError> {
        // Bind first: if the context cannot be bound, the allocation stays in the table
        // (still live, freeable later) instead of being forgotten while still allocated.
        self.bind()?;
        if self.inner.allocations.lock().remove(&ptr.addr()).is_none() {
            return Err(BackendError::invalid_argument(
                BACKEND_NAME,
                "free",
                format!("{ptr} is not a live allocation"),
            ));
        }
        // SAFETY: `ptr` was returned by `cuMemAlloc` and removed from the table just now,
        // so it is freed once; the caller guarantees no enqueued work still uses it.
        unsafe { result::free_sync(ptr.addr()) }.map_err(|e| error::driver("cuMemFree", e))
    }

    fn default_stream(&self) -> CudaStreamHandle {
        self.inner.default_stream.clone()
    }

    fn create_stream(&self) -> Result<CudaStreamHandle, BackendError> {
        let raw = self
            .inner
            .ctx
            .new_stream()
            .map_err(|e| error::driver("cuStreamCreate", e))?;
        Ok(CudaStreamHandle {
            id: NEXT_STREAM_ID.fetch_add(1, Ordering::Relaxed),
            raw,
        })
    }

    fn stream_id(&self, stream: &CudaStreamHandle) -> StreamId {
        StreamId(stream.id)
    }

    fn create_event(&self) -> Result<CudaEventHandle, BackendError> {
        let raw = self
            .inner
            .ctx
            .new_event(None)
            .map_err(|e| error::driver("cuEventCreate", e))?;
        Ok(CudaEventHandle { raw })
    }

    fn record_event(
        &self,
        event: &CudaEventHandle,
        stream: &CudaStreamHandle,
    ) -> Result<(), BackendError> {
        self.stream_ok("record_event", stream)?;
        event
            .raw
            .record(&stream.raw)
            .map_err(|e| error::driver("cuEventRecord", e))
    }

    fn query_event(&self, event: &CudaEventHandle) -> Result<bool, BackendError> {
        self.bind()?;
        event
            .raw
            .try_is_complete()
            .map_err(|e| error::driver("cuEventQuery", e))
    }

    fn synchronize_event(&self, event: &CudaEventHandle) -> Result<(), BackendError> {
        event
            .raw
            .synchronize()
            .map_err(|e| error::driver("cuEventSynchronize", e))
    }

    fn stream_wait_event(
        &self,
        stream: &CudaStreamHandle,
        event: &CudaEventHandle,
    ) -> Result<(), BackendError> {
        self.stream_ok("stream_wait_event", stream)?;
        stream
            .raw
            .wait(&event.raw)
            .map_err(|e| error::driver("cuStreamWaitEvent", e))
    }

    fn synchronize_stream(&self, stream: &CudaStreamHandle) -> Result<(), BackendError> {
        self.stream_ok("synchronize_stream", stream)?;
        stream
            .raw
            .synchronize()
            .map_err(|e| error::driver("cuStreamSynchronize", e))
    }

    fn synchronize_device(&self) -> Result<(), BackendError> {
        self.inner
            .ctx
            .synchronize()
            .map_err(|e| error::driver("cuCtxSynchronize", e))
    }

    fn memset_zero(
        &self,
        ptr: DevicePtr,
        bytes: u64,
        stream: &CudaStreamHandle,
    ) -> Result<(), BackendError> {
        self.stream_ok("memset_zero", stream)?;
        if bytes == 0 {
            return Ok(());
        }
        self.check_range("memset_zero", ptr, bytes)?;
        self.bind()?;
        // SAFETY: the range lies inside a live allocation of this device (checked), the
        // stream belongs to this context, and the context is bound.
        unsafe { result::memset_d8_async(ptr.addr(), 0, bytes as usize, stream.raw.cu_stream()) }
            .map_err(|e| error::driver("cuMemsetD8Async", e))
    }

    fn copy_host_to_device(
        &self,
        dst: DevicePtr,
        src: &[u8],
        stream: &CudaStreamHandle,
    ) -> Result<(), BackendError> {
        self.stream_ok("copy_host_to_device", stream)?;
        if src.is_empty() {
            return Ok(());
        }
        self.check_range("copy_host_to_device", dst, src.len() as u64)?;
        self.bind()?;
        // SAFETY: the destination lies inside a live allocation (checked); `src` stays
        // borrowed until the stream is synchronized below, so the driver never reads it
        // after this call returns, whether it stages pageable memory or DMAs directly.
        unsafe { result::memcpy_htod_async(dst.addr(), src, stream.raw.cu_stream()) }
            .map_err(|e| error::driver("cuMemcpyHtoDAsync", e))?;
        stream
            .raw
            .synchronize()
            .map_err(|e| error::driver("cuStreamSynchronize", e))
    }

    fn copy_device_to_host(
        &self,
        dst: &mut [u8],
        src: DevicePtr,
        stream: &CudaStreamHandle,
    ) -> Result<(), BackendError> {
        self.stream_ok("copy_device_to_host", stream)?;
        if dst.is_empty() {
            return Ok(());
        }
        self.check_range("copy_device_to_host", src, dst.len() as u64)?;
        self.bind()?;
        // SAFETY: the source lies inside a live allocation (checked); `dst` stays mutably
        // borrowed until the stream is synchronized below, so the copy finishes while the
        // buffer is ours.
        unsafe { result::memcpy_dtoh_async(dst, src.addr(), stream.raw.cu_stream()) }
            .map_err(|e| error::driver("cuMemcpyDtoHAsync", e))?;
        stream
            .raw
            .synchronize()
            .map_err(|e| error::driver("cuStreamSynchronize", e))
    }

    fn copy_device_to_device(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: u64,
        stream: &CudaStreamHandle,
    ) -> Result<(), BackendError> {
        self.stream_ok("copy_device_to_device", stream)?;
        if bytes == 0 {
            return Ok(());
        }
        self.check_range("copy_device_to_device", dst, bytes)?;
        self.check_range("copy_device_to_device", src, bytes)?;
        if dst.addr() < src.addr().saturating_add(bytes)
            && src.addr() < dst.addr().saturating_add(bytes)
        {
            return Err(BackendError::invalid_argument(
                BACKEND_NAME,
                "copy_device_to_device",
                format!("{bytes} bytes at {src} and {dst} overlap"),
            ));
        }
        self.bind()?;
        // SAFETY: both ranges lie inside live allocations of this device and do not
        // overlap (checked); the stream belongs to this context, which is bound.
        unsafe {
            result::memcpy_dtod_async(
                dst.addr(),
                src.addr(),
                bytes as usize,
                stream.raw.cu_stream(),
            )
        }
        .map_err(|e| error::driver("cuMemcpyDtoDAsync", e))
    }

    fn vm_granularity(&self) -> Result<u64, BackendError> {
        self.bind()?;
        self.inner.vm.lock().granularity()
    }

    fn vm_reserve(&self, bytes: u64) -> Result<DevicePtr, BackendError> {
        self.bind()?;
        self.inner.vm.lock().reserve(bytes)
    }

    fn vm_release(&self, base: DevicePtr) -> Result<(), BackendError> {
        self.bind()?;
        self.inner.vm.lock().release(base)
    }

    fn vm_create_physical(&self, bytes: u64) -> Result<PhysicalHandle, BackendError> {
        self.bind()?;
        self.inner.vm.lock().create_physical(bytes)
    }

    fn vm_release_physical(&self, handle: PhysicalHandle) -> Result<(), BackendError> {
        self.bind()?;
        self.inner.vm.lock().release_physical(handle)
    }

    fn vm_map(&self, at: DevicePtr, handle: PhysicalHandle) -> Result<(), BackendError> {
        self.bind()?;
        self.inner.vm.lock().map(at, handle)
    }

    fn vm_unmap(&self, at: DevicePtr, bytes: u64) -> Result<(), BackendError> {
        self.bind()?;
        self.inner.vm.lock().unmap(at, bytes)
    }

    /// Best effort: enqueues a host function (`cuLaunchHostFunc`) that sleeps `micros`
    /// microseconds (at most [`MAX_DELAY`]), so later work on `stream` starts at least that
    /// much later. It does not keep the GPU busy (no kernels are compiled into this crate),
    /// and CUDA runs host functions of all streams on one thread, so concurrent delays on
    /// different streams may add up.
    fn delay(&self, micros: u64, stream: &CudaStreamHandle) -> Result<(), BackendError> {
        self.stream_ok("delay", stream)?;
        if micros == 0 {
            return Ok(());
        }
        if let Some(f) = crate::standin::hooks().and_then(|h| h.delay) {
            // The stand-in's exact busy period instead of a sleeping host function.
            // SAFETY: a live stream of this device and a plain integer.
            let code = unsafe { f(stream.raw.cu_stream().cast(), micros) };
            if code != 0 {
                return Err(BackendError::Device {
                    backend: BACKEND_NAME.to_owned(),
                    call: "memreuse_standin_delay",
                    code: i64::from(code),
                    code_name: format!("CUresult {code}"),
                    message: "the stand-in refused the delay".to_owned(),
                });
            }
            return Ok(());
        }
        let micros = micros.min(MAX_DELAY.as_micros() as u64);
        self.bind()?;
        // SAFETY: `sleep_micros` is a valid `extern "C"` host function that makes no CUDA
        // call and cannot unwind; its argument is the delay encoded in the pointer value,
        // never dereferenced, so nothing has to outlive this call.
        unsafe {
            result::stream::launch_host_function(
                stream.raw.cu_stream(),
                sleep_micros,
                std::ptr::without_provenance_mut(micros as usize),
            )
        }
        .map_err(|e| error::driver("cuLaunchHostFunc", e))
    }

    fn annotate_allocation(&self, ptr: DevicePtr, bytes: u64, id: memreuse_core::AllocationId) {
        if let Some(f) = crate::standin::hooks().and_then(|h| h.annotate) {
            // SAFETY: plain integers.
            let _ = unsafe { f(self.ordinal_i32(), ptr.addr(), bytes, id.0) };
        }
    }

    fn set_op_label(&self, label: &str) {
        if let Some(f) = crate::standin::hooks().and_then(|h| h.set_op_label) {
            // SAFETY: `label` is valid for `label.len()` bytes during the call.
            let _ = unsafe { f(self.ordinal_i32(), label.as_ptr().cast(), label.len()) };
        }
    }

    fn race_reports(&self) -> Option<Vec<memreuse_core::RaceReport>> {
        crate::standin::race_reports(self.ordinal_i32())
    }
}
