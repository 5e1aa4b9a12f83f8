//! memreuse conformance suite, the backend-independent half: the `memreuse.schedule/1`
//! model and parser ([`schedule`]), the validator ([`validate`](mod@validate)), the host reference
//! interpreter with digest and live peak ([`reference`](mod@reference)), the schedule generators
//! ([`generate`]) and the command line ([`cli`]). The replay engine and reports build on
//! these.
//!
//! A replay engine loads and validates a schedule, then walks each rank's program and
//! compares its `check`s with the reference, in order:
//!
//! ```
//! use memreuse_conformance::{OpKind, validate::load_str};
//!
//! let text = include_str!("../tests/data/e1-ddp-buckets.json");
//! let valid = load_str("e1-ddp-buckets.json", text).expect("valid");
//! for rank in 0..valid.schedule.world_size {
//!     let expected = &valid.reference.checks[rank];
//!     let mut next_check = 0;
//!     for step in valid.schedule.rank_steps(rank) {
//!         // step.phase, step.iter, step.op_index identify the op; step.op.kind is it.
//!         if let OpKind::Check { .. } = step.op.kind {
//!             assert_eq!(expected[next_check].op_index, step.op_index);
//!             next_check += 1;
//!         }
//!     }
//!     assert_eq!(next_check, expected.len());
//! }
//! assert_eq!(valid.reference.digest, "9d15e2948ee6df12");
//! ```

pub mod alloc_conf;
pub mod availability;
pub mod cli;
pub mod generate;
pub mod plugins;
pub mod race_check;
pub mod reference;
pub mod replay;
pub mod report;
pub mod runner;
pub mod schedule;
pub mod size;
pub mod skip;
mod stdout;
pub mod suite;
pub mod validate;
pub mod whatif;

// Link the facade so the backends it enables register themselves (inventory).
use memreuse as _;

pub use reference::{CheckResult, Reference};
pub use schedule::{Op, OpKind, Phase, Schedule, Step};
pub use validate::{
    LoadError, ValidSchedule, ValidationError, ValidationErrorKind, load, reference, validate,
};
