//! memreuse-ascend: the Ascend NPU backend of memreuse, over the ACL runtime
//! (`libascendcl.so`) and HCCL (`libhccl.so`), both opened at run time with libloading.
//!
//! | layer | module | what |
//! | --- | --- | --- |
//! | sys | [`sys`] | the exact C types, constants and function-pointer types of the ABI |
//! | loader | [`loader`] | finding the libraries (every path tried is recorded), resolving required and optional symbols |
//! | result | [`result`] | every raw call, one thin function per entry point; every status checked; ACL/HCCL codes as typed errors with their names; 207001 / 207018 / `HCCL_E_OOM` are `OutOfMemory` |
//! | runtime | [`init`], [`finalize`] | the process-wide runtime state: lifecycle, each thread's bound device, the stand-in's race-detection setting |
//! | safe | [`AscendDevice`], [`AscendCommunicator`] | RAII streams, pooled SYNC events ([`events`]), pooled pinned staging, the `Backend` and `Communicator` implementations, fallbacks for optional symbols |
//! | safe | [`virtual_memory`] | the optional `vm_*` calls (expandable segments) over `aclrtReserveMemAddress` / `aclrtMallocPhysical` / `aclrtMapMem`, misuse refused before any FFI call |
//!
//! A file imports only from the layers before it: `sys` ← `loader` ← `result` ← `runtime` ←
//! {`stream`, `events`, `staging`, `virtual_memory`} ← `device` ← {`family`, `group`} ←
//! `comm` ← {`registry`, `launch`}; `conversions` (memreuse types as C types) and `races`
//! (the stand-in's race reports parsed) depend on nothing but `sys`. Only `result` calls
//! into the libraries.
//!
//! The runtime's usage rules this crate keeps, the symbol table (required or optional, which
//! CANN versions export each) and the test pinning each rule:
//! `backends/ascend-hccl/docs/usage-rules.md`. [`finalize`] resets the devices and calls
//! `aclFinalize` once (also at process exit).
//!
//! Registered as backend `ascend`, with an in-process world opener (one thread per rank);
//! [`launch::open_rank_from_env`] opens one rank per process (torchrun's variables, root
//! info through `memreuse_core::store::TcpStore`).
//! Without the libraries, `device_count` and `open` return `BackendError::Unavailable`
//! listing every path tried; nothing panics. CI exercises every line of this crate against
//! the stand-in library (`backends/ascend-hccl/standin`); it has not yet run on a real NPU.

pub mod comm;
mod conversions;
pub mod device;
pub mod events;
mod family;
mod group;
pub mod launch;
pub mod loader;
mod races;
pub mod registry;
pub mod result;
mod runtime;
mod staging;
mod stream;
pub mod sys;
pub mod virtual_memory;

pub use comm::AscendCommunicator;
pub use device::{AscendDevice, AscendEvent, AscendStream};
pub use loader::{Api, LoadError, api};
pub use runtime::{finalize, init};
