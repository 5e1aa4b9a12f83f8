//! memreuse-cuda-standin: one cdylib exporting the CUDA driver API **and** NCCL symbols
//! that `memreuse-cuda` and cudarc 0.19's loader resolve, with the C signatures of CUDA
//! 12.8's `cuda.h` and of `nccl.h`, backed by the memreuse mock device, so that CI drives
//! the CUDA backend's real FFI path (cudarc's `dlopen`, error mapping, context binding,
//! the cuMem* path, the NCCL communicator) without a GPU.
//!
//! **Tests and CI only.** It is found like a real install: a directory on
//! `LD_LIBRARY_PATH` holding `libcuda.so`, `libcuda.so.1`, `libnccl.so` and `libnccl.so.2`,
//! all links to this one library (`backends/cuda/ci/standin.sh` and the backend's tests
//! make one; cudarc tries `libcuda.so` first). Nothing installs it anywhere else.
//!
//! It is written from the vendor's documentation (the CUDA driver API reference, `cuda.h`,
//! NCCL's documentation), never from what the backend does; where the documentation states
//! a rule but not its code, or is silent, the stand-in takes the strictest reading and
//! says so in the module that implements it. Its value is the bugs it finds.
//!
//! # Entry points and the rule each enforces
//!
//! Every driver entry point answers `CUDA_ERROR_NOT_INITIALIZED` before `cuInit(0)` (except
//! `cuInit`, `cuDriverGetVersion`, `cuGetErrorName`, `cuGetErrorString`), a null
//! out-pointer with `CUDA_ERROR_INVALID_VALUE`, and runs under `catch_unwind` (a panic is
//! `CUDA_ERROR_UNKNOWN` / `ncclInternalError`).
//!
//! | entry point | rule |
//! | --- | --- |
//! | `cuInit` | flags must be 0 |
//! | `cuDriverGetVersion` | reports 12080 |
//! | `cuDeviceGetCount`, `cuDeviceGet`, `cuDeviceGetName` | ordinal in range, else `CUDA_ERROR_INVALID_DEVICE`; the name truncated to `len` bytes, NUL-terminated (the benchmark asks for it) |
//! | `cuDeviceGetAttribute` | attribute inside the enum (`CUDA_ERROR_INVALID_VALUE`); only modelled attributes answered (compute capability 8.0, unified addressing 1, `VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED` 1 — 0 in `no-vm` —, `MEMORY_POOLS_SUPPORTED` 0); any other valid one is `CUDA_ERROR_NOT_SUPPORTED` rather than invented |
//! | `cuDevicePrimaryCtxRetain`, `cuDevicePrimaryCtxRelease_v2` | reference counted; releasing an unretained context is `CUDA_ERROR_INVALID_CONTEXT`; the last release destroys it with its streams, events and memory |
//! | `cuCtxGetCurrent`, `cuCtxSetCurrent` | per thread; only a live context (or NULL) becomes current |
//! | `cuCtxSynchronize` | needs a current context (`CUDA_ERROR_INVALID_CONTEXT`) |
//! | `cuGetErrorName`, `cuGetErrorString` | an unknown code is `CUDA_ERROR_INVALID_VALUE` with `*pStr = NULL` |
//! | `cuMemAlloc_v2`, `cuMemFree_v2`, `cuMemGetInfo_v2` | current context; size 0 refused; freeing an address not allocated in the current context, or freed already, is `CUDA_ERROR_INVALID_VALUE`; out of capacity is `CUDA_ERROR_OUT_OF_MEMORY` |
//! | `cuMemsetD8Async`, `cuMemcpyHtoDAsync_v2`, `cuMemcpyDtoHAsync_v2`, `cuMemcpyDtoDAsync_v2` | a stream of the current context (`CUDA_ERROR_INVALID_HANDLE`); ranges inside live memory (`CUDA_ERROR_INVALID_VALUE`); virtual memory only after `cuMemSetAccess` (`CUDA_ERROR_ILLEGAL_ADDRESS`) |
//! | `cuStreamCreate`, `cuStreamDestroy_v2`, `cuStreamSynchronize`, `cuStreamWaitEvent`, `cuLaunchHostFunc` | flags as documented; see `stream.rs` |
//! | `cuEventCreate`, `cuEventDestroy_v2`, `cuEventRecord`, `cuEventQuery`, `cuEventSynchronize` | an event recorded only on a stream of its own context; `cuEventQuery` on work not done is `CUDA_ERROR_NOT_READY`; see `stream.rs` |
//! | `cuMemGetAllocationGranularity`, `cuMemAddressReserve`, `cuMemAddressFree`, `cuMemCreate`, `cuMemRelease`, `cuMemMap`, `cuMemSetAccess`, `cuMemUnmap` | granularity multiples, whole-handle maps, access only after `cuMemSetAccess`, unmapping only mapped ranges, no release of a mapped range; see `vm.rs` (absent from `no-vm`) |
//! | `ncclGetVersion`, `ncclGetErrorString`, `ncclGetUniqueId` | 2.28.5 (2.13.4 in `old-nccl`) |
//! | `ncclCommInitRank`, `ncclCommInitRankConfig`, `ncclCommInitAll`, `ncclCommSplit`, `ncclCommFinalize`, `ncclCommDestroy`, `ncclCommAbort`, `ncclCommGetAsyncError` | same id, distinct ranks and devices, non-blocking `ncclInProgress`; see `nccl.rs` (`InitRankConfig`, `Split`, `Finalize` absent from `old-nccl`) |
//! | `ncclAllReduce`, `ncclReduceScatter`, `ncclAllGather`, `ncclAlltoAll`, `ncclBroadcast`, `ncclSend`, `ncclRecv`, `ncclGroupStart`, `ncclGroupEnd` | every type and operation of the enums; mismatches reported asynchronously; sends and receives matched at `ncclGroupEnd`; see `nccl_ops.rs` (`AlltoAll` absent from `old-nccl`) |
//!
//! Plus the stand-in-only hooks (`memreuse_standin_*`: configure, race detection, race
//! reports, annotations, exact delays, call counters, fault injection; `harness.rs`), which
//! the backend looks up by name and a real driver does not export.
//!
//! Layouts and enum values the backend passes (`CUmemAllocationProp`, `CUmemAccessDesc`,
//! `CUmemLocation`, `ncclConfig_t`'s head, `ncclUniqueId`, attribute, flag, result, data
//! type and reduction values) are checked at compile time against cudarc's `sys` types.
//!
//! # Install profiles (separate builds, cargo features)
//! - `no-vm`: a driver without virtual memory management (the attribute is 0, the cuMem*
//!   virtual-memory symbols are absent).
//! - `old-nccl`: an NCCL 2.13 without `ncclCommSplit`, `ncclCommInitRankConfig`,
//!   `ncclCommFinalize` and `ncclAlltoAll`.
//!
//! # Design
//! This crate is the CUDA face of `memreuse-standin-engine`, which holds what every
//! stand-in shares (the mock cluster, handle tables, the guard every export runs under,
//! call counters, fault injection, the common hooks); what is here is CUDA's and NCCL's
//! rules and codes. Devices are one [`memreuse_mock::MockCluster`] (default 16 devices of
//! 1 GiB) so capacity limits, deterministic scheduling and the race detector apply, and
//! collectives are joint ops of the mock; handles are opaque pointer-looking table keys, so
//! an unknown or destroyed handle is an error code, never undefined behaviour.

#[cfg(all(feature = "no-vm", feature = "old-nccl"))]
compile_error!("features `no-vm` and `old-nccl` are different installs: enable one");

mod codes;
mod driver;
mod harness;
mod memory;
mod nccl;
mod nccl_ops;
mod nccl_split;
mod reduce;
mod state;
mod stream;
mod vm;

pub use memreuse_standin_engine::DEFAULT_DEVICES;
