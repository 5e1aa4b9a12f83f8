//! memreuse-cuda: the CUDA backend, through cudarc's driver and NCCL bindings loaded at run
//! time (`dynamic-loading`), so it builds and links on machines without CUDA.
//!
//! | item | what |
//! |---|---|
//! | [`CudaDevice`] | one GPU: `cuMemAlloc`/`cuMemFree`, non-blocking streams, disable-timing events, async memset/copies |
//! | [`CudaDevice`]'s `vm_*` | virtual memory (`cuMemAddressReserve`/`cuMemCreate`/`cuMemMap`/`cuMemSetAccess`/`cuMemUnmap`/`cuMemRelease`/`cuMemAddressFree`), declared only where the device supports it and the driver exports all eight symbols; run against the stand-in, never on a GPU yet |
//! | [`NcclCommunicator`] | one rank of an NCCL communicator (`ncclAlltoAll` on NCCL 2.28+, grouped send/recv before) |
//! | [`open_cuda_world`] | every rank in this process, one device each (`ncclCommInitAll`) |
//! | [`open_rank_from_env`] | one rank per process: torchrun's variables, NCCL id through the TCP store |
//! | [`bench`](mod@bench) | the allocator benchmark of the `memreuse-cuda-bench` binary: size trace, peers, records |
//!
//! CI runs all of it against the CUDA stand-in (`memreuse-cuda-standin`, found on
//! `LD_LIBRARY_PATH` as a real install is); on it the backend reads the stand-in's own hooks
//! (`standin.rs`: configure, race detection and reports, annotations, exact delays), which a
//! real driver does not export. Optional symbols (cuMem*, `ncclAlltoAll`, `ncclCommSplit`)
//! are probed by name before first use.
//!
//! Without `libcuda` (or `libnccl` for communicators) every entry point returns
//! `BackendError::Unavailable` naming the library and where it was looked for; nothing
//! panics. `delay` is best effort: a sleeping host function on the stream.
//!
//! The crate registers itself as backend `cuda`; link it with the facade's `cuda` feature.

pub mod bench;
mod comm;
mod device;
mod error;
mod nccl_args;
mod nccl_init;
mod p2p;
mod registry;
mod standin;
mod virtual_memory;
mod world;

pub use comm::{NCCL_ALLTOALL_VERSION, NcclCommunicator, nccl_version};
pub use device::{CudaDevice, CudaEventHandle, CudaStreamHandle, MAX_DELAY, device_count};
pub use error::{BACKEND_NAME, NcclFailure};
pub use nccl_init::{
    InitError, InitTimeoutError, MAX_NCCL_INIT_TIMEOUT_S, NCCL_INIT_TIMEOUT_ENV,
    SUGGESTED_NCCL_INIT_TIMEOUT, init_timeout_from_env, parse_init_timeout,
};
pub use world::{
    LaunchError, NCCL_ID_KEY, NCCL_ID_LEN, ProcessRank, open_cuda_world, open_rank,
    open_rank_from_env,
};

/// Re-exported so users can reach the raw bindings at the version this crate uses.
pub use cudarc;
