//! Happens-before race checking: one engine, two users.
//!
//! - [`DeviceDetector`] is the engine: per-allocation access histories with `FastTrack`
//!   epochs, allocation ownership from [`crate::Backend::annotate_allocation`], and the
//!   race log. The mock device drives it natively (its clocks live next to its queues).
//! - [`RaceChecker`] is an adaptor over *any* [`crate::Backend`] (and, with
//!   [`RaceCheckedComm`], over the communicators opened on it): it forwards every call and
//!   derives vector clocks from the calls alone, so a race it reports is a missing
//!   API-level ordering — a real bug on any device, whatever the timing was.
//!
//! Both report [`RaceReport`]s: schedule race or reuse race, both operations, their
//! streams and the byte range.

mod adaptor;
mod advice;
mod annotations;
mod clock;
mod device;
mod history;
mod log;
mod report;

pub use adaptor::{CheckedEvent, RaceCheckedComm, RaceChecker, RaceWorld, wrap_endpoints};
pub use advice::{RaceAdvice, UseLookup, advise};
pub use clock::VClock;
pub use device::{DeviceDetector, HOST_STREAM, OpInfo};
pub use report::{AccessKind, RaceAccess, RaceKind, RaceReport};
