//! The validator: every check of docs/schedules.md "Validation", run before anything executes.
//!
//! Stages, each collecting every error it finds (deduplicated across iterations, capped at
//! [`MAX_ERRORS`]):
//! 0. `limits`: the size of the work (steps, element operations, delays, threads, host
//!    bytes), estimated without doing it; a schedule over a limit is rejected right away.
//! 1. `structure`: per-op checks that need no program order (names, ranks, alignment,
//!    `async`/`work`, groups and streams).
//! 2. `dataflow`: each rank's program in order: tensor liveness, element initialisation,
//!    works, and the static race rules.
//! 3. `plan`: collective and point-to-point matching per (phase, iteration).
//! 4. Only when 1-3 found nothing: the reference interpreter, along the plan stage 3
//!    built (built once; the interpreter depends on `plan`, `sink` and `kind`, and none
//!    of them on it), which doubles as the strictest-execution deadlock check and tracks the
//!    exactness bound.

mod dataflow;
pub(crate) mod kind;
pub(crate) mod limits;
pub(crate) mod plan;
pub(crate) mod sink;
mod structure;

pub use kind::ValidationErrorKind;
pub use limits::{
    CHECK_COPIES, Cost, HOST_BYTES_PER_RANK_THREAD, HOST_BYTES_PER_STEP,
    HOST_BYTES_PER_STREAM_THREAD, HOST_BYTES_PER_WATCHDOG_THREAD, TENSOR_COPIES, cost,
    expanded_steps,
};
pub use sink::{MAX_ERRORS, ValidationError};

use std::path::Path;

use crate::reference::Reference;
use crate::schedule::{ParseError, Schedule};
use sink::Sink;

/// A schedule that passed validation, with its reference results (computed on the way:
/// the exactness and deadlock checks run the reference interpreter).
#[derive(Debug, Clone)]
pub struct ValidSchedule {
    /// The schedule.
    pub schedule: Schedule,
    /// The expected results of every run of it.
    pub reference: Reference,
}

/// Validates a parsed schedule; `file` names it in errors. Returns every error found.
pub fn validate(file: &str, schedule: &Schedule) -> Result<ValidSchedule, Vec<ValidationError>> {
    let mut sink = Sink::new(file);
    // Limits first, and alone: they bound the work of every later stage.
    if !limits::check(schedule, &mut sink) {
        return Err(sink.into_errors());
    }
    structure::check(schedule, &mut sink);
    // Later stages index per-rank state by rank and name: only run them on a sound skeleton.
    if !sink.is_empty() {
        return Err(sink.into_errors());
    }
    dataflow::check(schedule, &mut sink);
    // Built once: the matching stage here, then the interpreter walks the same plan.
    let plan = plan::CommPlan::build(schedule, &mut sink);
    if !sink.is_empty() {
        return Err(sink.into_errors());
    }
    match crate::reference::interpret(schedule, &plan, &mut sink) {
        Some(reference) if sink.is_empty() => Ok(ValidSchedule {
            schedule: schedule.clone(),
            reference,
        }),
        _ => Err(sink.into_errors()),
    }
}

/// Validates `schedule` and returns its reference results (`file` names it in errors).
pub fn reference(file: &str, schedule: &Schedule) -> Result<Reference, Vec<ValidationError>> {
    validate(file, schedule).map(|v| v.reference)
}

/// Why a schedule file could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// Not a well-formed `memreuse.schedule/1` document.
    Parse(ParseError),
    /// Well-formed but invalid.
    Invalid(Vec<ValidationError>),
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Parse(e) => write!(f, "{e}"),
            Self::Invalid(errors) => {
                let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
                f.write_str(&lines.join("\n"))
            }
        }
    }
}

impl std::error::Error for LoadError {}

/// Reads, parses and validates a schedule file.
pub fn load(path: &Path) -> Result<ValidSchedule, LoadError> {
    let schedule = Schedule::from_file(path).map_err(LoadError::Parse)?;
    validate(&path.display().to_string(), &schedule).map_err(LoadError::Invalid)
}

/// Parses and validates schedule JSON text; `file` names it in errors.
pub fn load_str(file: &str, text: &str) -> Result<ValidSchedule, LoadError> {
    let schedule = Schedule::from_json_str(file, text).map_err(LoadError::Parse)?;
    validate(file, &schedule).map_err(LoadError::Invalid)
}
