//! Registers the backend as `cuda` (and its in-process world opener).

use memreuse_core::{
    AnyBackend, BackendError, BackendOptions, BackendRegistration, WorldRegistration,
};

use crate::device::{CudaDevice, device_count};
use crate::error::BACKEND_NAME;

/// Opens device `options.device` (capacity and seed options do not apply to real GPUs).
fn open(options: &BackendOptions) -> Result<AnyBackend, BackendError> {
    Ok(AnyBackend::new(CudaDevice::open(options.device)?))
}

memreuse_core::inventory::submit! {
    BackendRegistration {
        name: BACKEND_NAME,
        summary: "NVIDIA GPUs through the CUDA driver API and NCCL (cudarc, loaded at run time)",
        device_count,
        open,
    }
}

memreuse_core::inventory::submit! {
    WorldRegistration { backend: BACKEND_NAME, open_world: crate::world::open_world }
}
