//! Opening ranks: all of them in this process (one device each, `ncclCommInitAll`), or one
//! per process with torchrun's variables and the TCP store ([`open_rank_from_env`]).

use std::ffi::c_int;
use std::time::Duration;

use cudarc::nccl::result as nccl;
use cudarc::nccl::sys;
use memreuse_core::comm::{CommError, ErasedCommunicator};
use memreuse_core::store::{EnvError, LaunchEnv, StoreError, StoreOptions, TcpStore};
use memreuse_core::{AnyBackend, BackendError, RankEndpoint, WorldOptions};
use thiserror::Error;

use crate::comm::NcclCommunicator;
use crate::device::{CudaDevice, device_count};
use crate::error::{self, BACKEND_NAME, guard};
use crate::nccl_init::{
    InitError, InitTimeoutError, init_rank_with_deadline, init_timeout_from_env,
    usable_init_timeout,
};

/// The store key under which rank 0 publishes the NCCL unique id.
pub const NCCL_ID_KEY: &str = "memreuse/nccl/unique_id";
/// Size of an NCCL unique id in bytes.
pub const NCCL_ID_LEN: usize = 128;
/// Devices the stand-in is configured with at least, so every built-in schedule (the
/// largest has 16 ranks) fits (a real driver has the devices it has).
pub const STANDIN_MIN_DEVICES: usize = 16;
/// Capacity of a stand-in device when the options name none.
const STANDIN_DEFAULT_CAPACITY: u64 = 1 << 30;

fn comm_to_backend(e: CommError) -> BackendError {
    match e {
        CommError::Backend(b) => b,
        other => BackendError::invalid_argument(BACKEND_NAME, "open_world", other.to_string()),
    }
}

/// Opens `world_size` devices (ranks `0..world_size` on devices `0..world_size`) with one
/// world communicator, in this process (one thread per rank drives them afterwards).
pub fn open_cuda_world(
    world_size: usize,
) -> Result<Vec<(CudaDevice, NcclCommunicator)>, BackendError> {
    guard("open_world", || {
        error::probe_driver()?;
        error::probe_nccl()?;
        if world_size == 0 {
            return Err(BackendError::invalid_argument(
                BACKEND_NAME,
                "open_world",
                "world size 0",
            ));
        }
        let count = device_count()?;
        if world_size > count {
            return Err(error::unavailable(format!(
                "needs {world_size} GPUs (NCCL refuses two ranks on one device), {count} visible"
            )));
        }
        let devices = (0..world_size)
            .map(CudaDevice::open)
            .collect::<Result<Vec<_>, _>>()?;
        let n = c_int::try_from(world_size).map_err(|_| {
            BackendError::invalid_argument(BACKEND_NAME, "open_world", "world size too large")
        })?;
        let list: Vec<c_int> = (0..n).collect();
        let mut comms: Vec<sys::ncclComm_t> = vec![std::ptr::null_mut(); world_size];
        devices[0].bind()?;
        // SAFETY: `comms` has room for `n` handles and `list` names `n` distinct visible
        // devices; NCCL fills every handle on success.
        unsafe { nccl::comm_init_all(comms.as_mut_ptr(), n, list.as_ptr()) }
            .map_err(|e| error::nccl("ncclCommInitAll", &e))?;
        let mut out = Vec::with_capacity(world_size);
        let family = crate::comm::SplitFamily::new();
        let mut raw = comms.into_iter();
        for (rank, device) in devices.into_iter().enumerate() {
            let Some(comm) = raw.next() else { break };
            // SAFETY: `comm` is rank `rank` of the fresh `world_size`-rank communicator on
            // device `rank`, owned by nobody else (`from_raw` aborts it if it fails).
            let wrapped =
                unsafe { NcclCommunicator::from_raw(device.clone(), comm, rank, world_size, None) };
            match wrapped {
                Ok(mut c) => {
                    c.set_family(std::sync::Arc::clone(&family));
                    out.push((device, c));
                }
                Err(e) => {
                    // The communicators already wrapped are aborted or destroyed by their
                    // drops; abort the ones not wrapped yet instead of leaking them.
                    for rest in raw {
                        // SAFETY: each is a live communicator of this world, owned here
                        // alone and never used again.
                        let _ = unsafe { nccl::comm_abort(rest) };
                    }
                    return Err(comm_to_backend(e));
                }
            }
        }
        Ok(out)
    })
}

/// The `WorldRegistration` entry point: erased endpoints for the conformance runner.
pub(crate) fn open_world(options: &WorldOptions) -> Result<Vec<RankEndpoint>, BackendError> {
    // The stand-in gets a fresh cluster shaped by the options (no-op on a real driver):
    // enough devices for every built-in schedule, the capacity, seed and timeout asked.
    guard("open_world", || {
        crate::standin::configure(
            options.world_size.max(STANDIN_MIN_DEVICES),
            options
                .backend
                .memory_capacity
                .unwrap_or(STANDIN_DEFAULT_CAPACITY),
            options.backend.deterministic_seed,
            u64::try_from(options.timeout.as_millis()).unwrap_or(u64::MAX),
            !options.backend.disable_native_race_detection,
        )
    })?;
    Ok(open_cuda_world(options.world_size)?
        .into_iter()
        .enumerate()
        .map(|(rank, (device, comm))| RankEndpoint {
            rank,
            backend: AnyBackend::new(device),
            communicator: Box::new(ErasedCommunicator::<CudaDevice>::new(Box::new(comm))),
        })
        .collect())
}

/// Why a rank of a multi-process job could not start.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// torchrun's variables are missing or malformed.
    #[error(transparent)]
    Env(#[from] EnvError),
    /// The store failed (rank 0 unreachable, timeout, wrong-length id).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The device or NCCL failed, or is unavailable.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// `MEMREUSE_NCCL_INIT_TIMEOUT_S` is malformed.
    #[error(transparent)]
    InitTimeoutConfig(#[from] InitTimeoutError),
    /// Not every rank joined the communicator within the init timeout (it was aborted).
    #[error(transparent)]
    InitTimedOut(InitError),
}

/// One rank of a multi-process job: its endpoint, its place in the job and the store
/// (kept alive: on rank 0 it is the server).
pub struct ProcessRank {
    /// The parsed launch variables.
    pub env: LaunchEnv,
    /// The rank's device and world communicator.
    pub endpoint: RankEndpoint,
    /// The job's store.
    pub store: TcpStore,
}

/// Reads torchrun's variables and opens this process's rank ([`open_rank`]).
pub fn open_rank_from_env(timeout: Duration) -> Result<ProcessRank, LaunchError> {
    open_rank(LaunchEnv::from_env()?, timeout)
}

/// Opens device `LOCAL_RANK` and joins the world: rank 0 hosts the store on
/// `MASTER_ADDR:MASTER_PORT` and publishes a fresh NCCL unique id, the others fetch it
/// (exactly 128 bytes) within `timeout`; then every rank calls `ncclCommInitRank`, which
/// returns once all `WORLD_SIZE` ranks joined. With `MEMREUSE_NCCL_INIT_TIMEOUT_S` set,
/// every rank instead creates a non-blocking communicator (`ncclCommInitRankConfig`) and
/// waits for the others at most that many seconds: past that the communicator is aborted
/// and the error is [`LaunchError::InitTimedOut`]. An NCCL without
/// `ncclCommInitRankConfig` or `ncclCommFinalize` (probed by name) takes the blocking
/// init instead, with a warning naming the missing symbol.
pub fn open_rank(env: LaunchEnv, timeout: Duration) -> Result<ProcessRank, LaunchError> {
    let init_timeout = init_timeout_from_env()?;
    guard("open_rank", || {
        error::probe_driver()?;
        error::probe_nccl()
    })?;
    let addr = env.master_socket_addr()?;
    let options = StoreOptions {
        timeout,
        ..StoreOptions::default()
    };
    let device = CudaDevice::open(env.local_rank)?;
    let (store, id) = if env.rank == 0 {
        let store = TcpStore::host(addr, options)?;
        let id = guard("ncclGetUniqueId", || {
            nccl::get_uniqueid().map_err(|e| error::nccl("ncclGetUniqueId", &e))
        })?;
        let bytes: Vec<u8> = id.internal.iter().map(|c| *c as u8).collect();
        store.set(NCCL_ID_KEY, &bytes)?;
        (store, id)
    } else {
        let store = TcpStore::connect(addr, options)?;
        let bytes = store.get_exact(NCCL_ID_KEY, NCCL_ID_LEN)?;
        let mut id = sys::ncclUniqueId {
            internal: [0; NCCL_ID_LEN],
        };
        for (dst, src) in id.internal.iter_mut().zip(&bytes) {
            *dst = *src as std::ffi::c_char;
        }
        (store, id)
    };
    let rank = c_int::try_from(env.rank)
        .map_err(|_| BackendError::invalid_argument(BACKEND_NAME, "open_rank", "rank too large"))?;
    let size = c_int::try_from(env.world_size).map_err(|_| {
        BackendError::invalid_argument(BACKEND_NAME, "open_rank", "world size too large")
    })?;
    if rank >= size {
        return Err(BackendError::invalid_argument(
            BACKEND_NAME,
            "open_rank",
            format!("rank {rank} >= world size {size}"),
        )
        .into());
    }
    // Probed after the library loaded: without ncclCommInitRankConfig or ncclCommFinalize
    // the rank falls back to the blocking init (see `nccl_init`).
    let communicator = match usable_init_timeout(init_timeout) {
        None => {
            let comm = guard("ncclCommInitRank", || {
                device.bind()?;
                let mut comm: sys::ncclComm_t = std::ptr::null_mut();
                // SAFETY: `comm` is a valid out pointer, `id` came from rank 0's
                // `ncclGetUniqueId` (exactly 128 bytes), `rank < size` (checked above), and
                // the device's context is current.
                unsafe { nccl::comm_init_rank(&raw mut comm, size, id, rank) }
                    .map_err(|e| error::nccl("ncclCommInitRank", &e))?;
                Ok(comm)
            })?;
            // SAFETY: `comm` is this process's rank of a fresh `world_size`-rank blocking
            // communicator on `device`, owned by nobody else.
            unsafe {
                NcclCommunicator::from_raw(device.clone(), comm, env.rank, env.world_size, None)
            }
        }
        Some(limit) => {
            let comm = guard("ncclCommInitRankConfig", || {
                device.bind()?;
                // SAFETY: `id` came from rank 0's `ncclGetUniqueId` (exactly 128 bytes),
                // `rank < size` (checked above), and the device's context is current.
                Ok(unsafe { init_rank_with_deadline(env.world_size, id, env.rank, limit) })
            })?;
            let comm = match comm {
                Ok(comm) => comm,
                Err(InitError::Nccl(f)) => return Err(LaunchError::Backend(f.into())),
                Err(e) => return Err(LaunchError::InitTimedOut(e)),
            };
            // SAFETY: `comm` is this process's rank of a fresh, initialized
            // `world_size`-rank non-blocking communicator on `device`, owned by nobody else.
            unsafe {
                NcclCommunicator::from_raw(
                    device.clone(),
                    comm,
                    env.rank,
                    env.world_size,
                    Some(limit),
                )
            }
        }
    }
    .map_err(comm_to_backend)?;
    Ok(ProcessRank {
        endpoint: RankEndpoint {
            rank: env.rank,
            backend: AnyBackend::new(device),
            communicator: Box::new(ErasedCommunicator::<CudaDevice>::new(Box::new(
                communicator,
            ))),
        },
        env,
        store,
    })
}
