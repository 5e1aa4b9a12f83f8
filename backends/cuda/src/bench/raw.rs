//! The baseline peer: the driver's synchronous `cuMemAlloc` / `cuMemFree`, no cache.

use cudarc::driver::result;
use memreuse_core::{Backend, BackendError};

use super::run::{BenchError, BenchPeer, PeerFigures};
use crate::device::CudaDevice;
use crate::error::{self, BACKEND_NAME};

/// A raw allocation: its device address and requested size. Dropping it without
/// [`BenchPeer::free`] leaks it until the process exits (the bench only does that on error).
#[derive(Debug)]
pub struct RawAllocation {
    ptr: u64,
    size: u64,
}

/// `cuMemAlloc` / `cuMemFree` on one device, straight through cudarc's `result` layer
/// (not [`CudaDevice::malloc`], whose live-range table would add to the figure).
///
/// The driver does not say how much it rounds, so `peak_reserved_bytes` is the growth of the
/// device's used memory (`cuMemGetInfo`, device-wide) from the start of a replay to the
/// trace's live peak, measured untimed; it is `None` for the pair workloads.
pub struct RawDriverPeer {
    device: CudaDevice,
    live: u64,
    peak_live: u64,
    allocs: u64,
    used_at_reset: Option<u64>,
    used_growth_at_peak: Option<u64>,
}

impl RawDriverPeer {
    /// The peer on `device`, whose context it binds to the calling thread (the bench runs
    /// every peer on that one thread; `alloc` and `free` call the driver directly).
    pub fn new(device: CudaDevice) -> Result<Self, BackendError> {
        device.bind()?;
        Ok(RawDriverPeer {
            device,
            live: 0,
            peak_live: 0,
            allocs: 0,
            used_at_reset: None,
            used_growth_at_peak: None,
        })
    }

    fn used(&self) -> Result<u64, BackendError> {
        let info = self.device.memory_info()?;
        Ok(info.total - info.free)
    }
}

impl BenchPeer for RawDriverPeer {
    type Handle = RawAllocation;

    fn name(&self) -> &'static str {
        "raw-cuMemAlloc"
    }

    fn api(&self) -> &'static str {
        "cuMemAlloc + cuMemFree (synchronous driver calls)"
    }

    #[inline]
    fn alloc(&mut self, size: u64) -> Result<RawAllocation, BenchError> {
        let len = usize::try_from(size).map_err(|_| {
            BackendError::invalid_argument(
                BACKEND_NAME,
                "cuMemAlloc",
                format!("{size} bytes do not fit"),
            )
        })?;
        // SAFETY: the device's context was bound to this thread by `new` (the bench is
        // single-threaded); the memory is never read on the host.
        let ptr = unsafe { result::malloc_sync(len) }.map_err(|e| error::alloc(size, e))?;
        self.live += size;
        self.peak_live = self.peak_live.max(self.live);
        self.allocs += 1;
        Ok(RawAllocation { ptr, size })
    }

    #[inline]
    fn free(&mut self, handle: RawAllocation) -> Result<(), BenchError> {
        self.live -= handle.size;
        // SAFETY: `handle.ptr` came from `cuMemAlloc` in `alloc` and the handle is consumed
        // here, so it is freed once; no work was enqueued on it.
        unsafe { result::free_sync(handle.ptr) }.map_err(|e| error::driver("cuMemFree", e))?;
        Ok(())
    }

    fn synchronize(&mut self) -> Result<(), BenchError> {
        Ok(self.device.synchronize_device()?)
    }

    fn release_cache(&mut self) -> Result<(), BenchError> {
        Ok(())
    }

    fn reset_peaks(&mut self) -> Result<(), BenchError> {
        self.device.bind()?;
        self.peak_live = self.live;
        self.allocs = 0;
        self.used_at_reset = Some(self.used()?);
        self.used_growth_at_peak = None;
        Ok(())
    }

    fn at_live_peak(&mut self) -> Result<(), BenchError> {
        let now = self.used()?;
        self.used_growth_at_peak = self.used_at_reset.map(|base| now.saturating_sub(base));
        Ok(())
    }

    fn figures(&mut self) -> PeerFigures {
        PeerFigures {
            peak_reserved_bytes: self.used_growth_at_peak,
            peak_live_bytes: Some(self.peak_live),
            device_allocs: Some(self.allocs),
        }
    }
}
