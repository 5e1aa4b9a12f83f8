//! The allocator benchmark behind the `memreuse-cuda-bench` binary (issue 5, item 4).
//!
//! - [`trace`]: the deterministic size trace and its text format, which
//!   `scripts/gpu_peer_bench.py` replays with PyTorch's allocators;
//! - [`run`]: the peer trait, the two measurements (cached pair, trace replay), the memreuse
//!   peer and the JSON-line records;
//! - [`raw`]: the baseline peer, the driver's `cuMemAlloc`/`cuMemFree`;
//! - [`config`]: the allocator configuration from the environment, by PyTorch's CUDA names.
//!
//! Everything but [`raw`] works on any backend, so it is tested on the CPU.

pub mod config;
pub mod raw;
pub mod run;
pub mod trace;

#[cfg(test)]
mod tests;
