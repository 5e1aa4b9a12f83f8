//! Registrations: backend `ascend` (one device by name) and its in-process world opener
//! (one thread per rank for `HcclCommInitRootInfo`, rank 0's root info shared in process).
//! One process per rank is [`crate::launch`].

use std::sync::Arc;

use memreuse_core::comm::ErasedCommunicator;
use memreuse_core::{
    AnyBackend, BackendError, BackendOptions, BackendRegistration, RankEndpoint, WorldOptions,
    WorldRegistration,
};

use crate::comm::{AscendCommunicator, Family, root_info};
use crate::device::AscendDevice;
use crate::loader::{Api, api};
use crate::result::{BACKEND, acl, standin, unavailable};
use crate::runtime;

/// Devices the stand-in keeps at least, so `device_count` before a world opens covers
/// every built-in schedule (the largest has 16 ranks).
pub const STANDIN_MIN_DEVICES: usize = 16;

/// Capacity given to stand-in devices when the options name none.
const STANDIN_DEFAULT_CAPACITY: u64 = 1 << 30;

/// `aclrtGetDeviceCount` after `aclInit`.
pub fn device_count_of(api: &'static Api) -> Result<usize, BackendError> {
    runtime::init(api)?;
    Ok(acl::get_device_count(api)? as usize)
}

fn device_count() -> Result<usize, BackendError> {
    device_count_of(api().map_err(|e| unavailable(&e))?)
}

fn open(options: &BackendOptions) -> Result<AnyBackend, BackendError> {
    let api = api().map_err(|e| unavailable(&e))?;
    Ok(AnyBackend::new(AscendDevice::open(api, options.device)?))
}

/// Gives the stand-in a fresh cluster shaped by `options` (no-op on a real CANN install,
/// which has no `memreuse_standin_configure`).
pub fn configure_standin(api: &'static Api, options: &WorldOptions) -> Result<(), BackendError> {
    let Some(configure) = api.memreuse_standin_configure else {
        return Ok(());
    };
    let detect = !options.backend.disable_native_race_detection;
    if let Some(set_race_detection) = api.memreuse_standin_set_race_detection {
        standin::set_race_detection(set_race_detection, detect);
    }
    runtime::set_standin_race_detection(detect);
    let devices = options.world_size.max(STANDIN_MIN_DEVICES);
    let configured = standin::configure(
        configure,
        u32::try_from(devices).unwrap_or(u32::MAX),
        options
            .backend
            .memory_capacity
            .unwrap_or(STANDIN_DEFAULT_CAPACITY),
        options.backend.deterministic_seed,
        u64::try_from(options.timeout.as_millis()).unwrap_or(u64::MAX),
    );
    runtime::forget_binding();
    configured
}

/// Opens `options.world_size` ranks on devices `0..world_size` of the given libraries.
pub fn open_world_with(
    api: &'static Api,
    options: &WorldOptions,
) -> Result<Vec<(AscendDevice, AscendCommunicator)>, BackendError> {
    runtime::init(api)?;
    configure_standin(api, options)?;
    let n = options.world_size;
    let available = device_count_of(api)?;
    if available < n || n == 0 {
        return Err(BackendError::Unavailable {
            backend: BACKEND.to_owned(),
            reason: format!("a world of {n} ranks needs {n} devices, {available} present"),
        });
    }
    let devices = (0..n)
        .map(|r| AscendDevice::open(api, r))
        .collect::<Result<Vec<_>, _>>()?;
    for d in &devices {
        // A hung stream becomes a Timeout error instead of a blocked rank thread.
        d.set_sync_timeout(Some(options.timeout));
    }
    let root = root_info(&devices[0])?;
    let family = Family::with_timeout(options.timeout);
    let comms: Vec<Result<AscendCommunicator, BackendError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = devices
            .iter()
            .enumerate()
            .map(|(rank, d)| {
                let (d, family) = (d.clone(), Arc::clone(&family));
                scope.spawn(move || AscendCommunicator::init(d, &root, n, rank, family))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(BackendError::Unavailable {
                        backend: BACKEND.to_owned(),
                        reason: "a rank thread panicked in HcclCommInitRootInfo".to_owned(),
                    })
                })
            })
            .collect()
    });
    let comms = comms.into_iter().collect::<Result<Vec<_>, _>>()?;
    Ok(devices.into_iter().zip(comms).collect())
}

fn open_world(options: &WorldOptions) -> Result<Vec<RankEndpoint>, BackendError> {
    let api = api().map_err(|e| unavailable(&e))?;
    Ok(open_world_with(api, options)?
        .into_iter()
        .enumerate()
        .map(|(rank, (device, comm))| RankEndpoint {
            rank,
            backend: AnyBackend::new(device),
            communicator: Box::new(ErasedCommunicator::<AscendDevice>::new(Box::new(comm))),
        })
        .collect())
}

memreuse_core::inventory::submit! {
    BackendRegistration {
        name: BACKEND,
        summary: "Huawei Ascend NPU through the ACL runtime and HCCL (libascendcl.so, libhccl.so loaded at run time)",
        device_count,
        open,
    }
}

memreuse_core::inventory::submit! {
    WorldRegistration { backend: BACKEND, open_world }
}
