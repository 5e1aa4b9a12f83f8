//! memreuse-standin-engine: the part of a stand-in vendor library that is not the vendor's.
//!
//! A stand-in (`memreuse-ascend-standin` for ACL + HCCL, `memreuse-cuda-standin` for the
//! CUDA driver + NCCL) is a cdylib exporting a vendor's C symbols over the memreuse mock
//! device, so that CI drives a backend's real FFI path without hardware. Everything such a
//! library needs apart from the vendor's rules and codes lives here, so each stand-in is
//! only its vendor's face:
//!
//! - [`ClusterCell`]: the configured [`memreuse_mock::MockCluster`] (default
//!   [`DEFAULT_DEVICES`] devices of [`memreuse_mock::DEFAULT_CAPACITY`]), created on first
//!   use and replaced by `memreuse_standin_configure`.
//! - [`HandleTable`]: opaque, pointer-looking handles (streams, events, communicators), so
//!   an unknown or destroyed handle is an error code, never undefined behaviour.
//! - [`guard`]: the wrapper of every export (`catch_unwind`, so nothing unwinds across the
//!   C boundary; per-symbol call counters; injected call failures) and [`write_out`].
//! - [`Face`] and [`export_harness!`]: the `memreuse_standin_*` hooks every stand-in
//!   exports (configure, race detection, annotations, op labels, delays, race reports,
//!   call counters, fault injection), written once and answering in the face's codes.
//!
//! A vendor porting memreuse tests its own FFI layer the same way: a crate with its
//! library's C signatures and documented rules, a [`Face`] implementation, and
//! `export_harness!`; its backend reads the hooks by name, which a real install does not
//! export.
//!
//! **Tests and CI only**: nothing here is meant to be linked into a program that runs on
//! hardware.

mod cluster;
mod code;
mod face;
mod faults;
mod guard;
mod handles;
pub mod harness;

pub use cluster::{Cluster, ClusterCell, DEFAULT_DEVICES};
pub use code::ResultCode;
pub use face::Face;
pub use faults::{inject_call_failure, pending_call_failures};
pub use guard::{calls_of, guard, write_out};
pub use handles::{HANDLE_STRIDE, HandleTable};
