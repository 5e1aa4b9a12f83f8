//! memreuse conformance suite, the backend-independent half: the `memreuse.schedule/1`
//! model and parser ([`schedule`]), the validator ([`validate`]), the host reference
//! interpreter with digest and live peak ([`reference`]) and the schedule generators
//! ([`generate`]). The replay engine and reports build on these.

pub mod generate;
pub mod reference;
pub mod schedule;
pub mod validate;

pub use reference::{Reference, reference};
pub use schedule::{Op, OpKind, Phase, Schedule, Step};
pub use validate::{ValidSchedule, ValidationError, ValidationErrorKind, validate};
