//! Happens-before race checking: one engine, one clock layer, two users.
//!
//! - [`DeviceDetector`] (`detector.rs`) is the engine: per-allocation access histories
//!   with `FastTrack` epochs, allocation ownership from
//!   [`crate::Backend::annotate_allocation`], and the race log.
//! - [`HappensBefore`] is the clock layer above it: one [`VClock`] per stream and per
//!   device host, the rules that order ops (ops, waits, host observations, joint ops,
//!   allocations and frees, mappings and unmappings), and one detector per device. The
//!   mock device drives it natively (under the lock of its queues).
//! - [`RaceChecker`] is an adaptor over *any* [`crate::Backend`] (and, with
//!   [`RaceCheckedComm`], over the communicators opened on it): it forwards every call and
//!   drives the same layer from the calls alone, so a race it reports is a missing
//!   API-level ordering — a real bug on any device, whatever the timing was.
//!
//! Both report [`RaceReport`]s: schedule race or reuse race, both operations, their
//! streams and the byte range.

mod adaptor;
mod advice;
mod annotations;
mod clock;
mod detector;
mod happens_before;
mod history;
mod lines;
mod log;
mod op;
mod report;

pub use adaptor::{CheckedEvent, RaceCheckedComm, RaceChecker, RaceWorld, wrap_endpoints};
pub use advice::{RaceAdvice, UseLookup, advise};
pub use clock::VClock;
pub use detector::DeviceDetector;
pub use happens_before::HappensBefore;
pub use lines::{format_race_lines, parse_race_lines};
pub use op::{HOST_STREAM, OpInfo};
pub use report::{AccessKind, RaceAccess, RaceKind, RaceReport};
