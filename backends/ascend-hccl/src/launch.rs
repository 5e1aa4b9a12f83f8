//! One process per rank, as torchrun launches them: rank 0 hosts the TCP store on
//! `MASTER_ADDR:MASTER_PORT`, calls `HcclGetRootInfo` and publishes the 4108 bytes; every
//! other rank fetches them (length-checked); every rank binds NPU `LOCAL_RANK` and calls
//! `HcclCommInitRootInfo`. Sub-groups publish their root info through the same store.

use std::sync::Arc;
use std::time::Duration;

use memreuse_core::BackendError;
use memreuse_core::store::{LaunchEnv, StoreOptions, TcpStore};

use crate::comm::{AscendCommunicator, Family, root_info, store_error};
use crate::device::AscendDevice;
use crate::loader::{Api, api};
use crate::result::{BACKEND, unavailable};
use crate::sys::{HCCL_ROOT_INFO_BYTES, HcclRootInfo};

/// The store key of the world communicator's root info.
pub const ROOT_INFO_KEY: &str = "memreuse/ascend/world/root-info";

/// This process's rank of a multi-process job.
pub struct AscendRank {
    /// The launch variables it was opened with.
    pub env: LaunchEnv,
    /// NPU `LOCAL_RANK`.
    pub device: AscendDevice,
    /// The world communicator.
    pub communicator: AscendCommunicator,
    /// The job's store (rank 0 hosts it).
    pub store: Arc<TcpStore>,
}

/// Opens rank `rank` of `world_size` on NPU `local_rank`, given the job's store (hosted by
/// rank 0, connected by the others).
pub fn open_rank_with_store(
    api: &'static Api,
    store: &Arc<TcpStore>,
    rank: usize,
    world_size: usize,
    local_rank: usize,
) -> Result<(AscendDevice, AscendCommunicator), BackendError> {
    let device = AscendDevice::open(api, local_rank)?;
    let root = if rank == 0 {
        let root = root_info(&device)?;
        store
            .set(ROOT_INFO_KEY, &root.to_bytes())
            .map_err(|e| store_error(&e))?;
        root
    } else {
        let bytes = store
            .get_exact(ROOT_INFO_KEY, HCCL_ROOT_INFO_BYTES)
            .map_err(|e| store_error(&e))?;
        HcclRootInfo::from_bytes(&bytes).ok_or_else(|| BackendError::Unavailable {
            backend: BACKEND.to_owned(),
            reason: "root info of the wrong length".to_owned(),
        })?
    };
    let family = Family::with_store(Arc::clone(store), ROOT_INFO_KEY.to_owned());
    let comm = AscendCommunicator::init(device.clone(), &root, world_size, rank, family)?;
    Ok((device, comm))
}

/// Opens this process's rank from torchrun's variables (`RANK`, `WORLD_SIZE`,
/// `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`); `timeout` bounds the store calls.
pub fn open_rank_from_env(timeout: Duration) -> Result<AscendRank, BackendError> {
    let launch_error = |e: &dyn std::fmt::Display| BackendError::Unavailable {
        backend: BACKEND.to_owned(),
        reason: format!("launch variables: {e}"),
    };
    let env = LaunchEnv::from_env().map_err(|e| launch_error(&e))?;
    let addr = env.master_socket_addr().map_err(|e| launch_error(&e))?;
    let api = api().map_err(|e| unavailable(&e))?;
    let options = StoreOptions {
        timeout,
        ..StoreOptions::default()
    };
    let store = if env.rank == 0 {
        TcpStore::host(addr, options)
    } else {
        TcpStore::connect(addr, options)
    }
    .map_err(|e| store_error(&e))?;
    let store = Arc::new(store);
    let (device, communicator) =
        open_rank_with_store(api, &store, env.rank, env.world_size, env.local_rank)?;
    Ok(AscendRank {
        env,
        device,
        communicator,
        store,
    })
}
