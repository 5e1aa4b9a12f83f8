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
//! 4. Only when 1-3 found nothing: the reference interpreter, which doubles as the
//!    strictest-execution deadlock check and tracks the exactness bound.

mod dataflow;
mod kind;
mod limits;
pub(crate) mod plan;
mod structure;

pub use kind::ValidationErrorKind;
pub use limits::{
    CHECK_COPIES, Cost, HOST_BYTES_PER_RANK_THREAD, HOST_BYTES_PER_STEP,
    HOST_BYTES_PER_STREAM_THREAD, HOST_BYTES_PER_WATCHDOG_THREAD, TENSOR_COPIES, cost,
    expanded_steps,
};

use std::collections::HashSet;
use std::path::Path;

use crate::reference::Reference;
use crate::schedule::{ParseError, Phase, Schedule};

/// At most this many errors are reported per schedule.
pub const MAX_ERRORS: usize = 200;

/// One validation error: the file, where it applies, and why.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ValidationError {
    /// The file (or the name given to [`validate`]).
    pub file: String,
    /// The phase of the op at fault, where one applies.
    pub phase: Option<Phase>,
    /// The index of the op at fault inside its phase.
    pub op_index: Option<usize>,
    /// The global rank at fault, where the error is specific to one.
    pub rank: Option<usize>,
    /// The reason.
    pub kind: ValidationErrorKind,
}

impl std::fmt::Display for ValidationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(phase) = self.phase {
            write!(f, ": {phase}")?;
        }
        if let Some(i) = self.op_index {
            write!(f, " op {i}")?;
        }
        if let Some(r) = self.rank {
            write!(f, " rank {r}")?;
        }
        write!(f, ": {}", self.kind)
    }
}

impl std::error::Error for ValidationError {}

/// Collects errors, dropping duplicates (a body error repeats every iteration) and stopping
/// at [`MAX_ERRORS`].
pub(crate) struct Sink {
    file: String,
    errors: Vec<ValidationError>,
    seen: HashSet<ValidationError>,
}

impl Sink {
    pub(crate) fn new(file: &str) -> Self {
        Self {
            file: file.to_owned(),
            errors: Vec::new(),
            seen: HashSet::new(),
        }
    }

    pub(crate) fn push(
        &mut self,
        phase: Option<Phase>,
        op_index: Option<usize>,
        rank: Option<usize>,
        kind: ValidationErrorKind,
    ) {
        if self.is_full() {
            return;
        }
        let error = ValidationError {
            file: self.file.clone(),
            phase,
            op_index,
            rank,
            kind,
        };
        if self.seen.insert(error.clone()) {
            self.errors.push(error);
            if self.errors.len() == MAX_ERRORS {
                let kind = ValidationErrorKind::TooManyErrors(MAX_ERRORS);
                self.errors.push(ValidationError {
                    file: self.file.clone(),
                    phase: None,
                    op_index: None,
                    rank: None,
                    kind,
                });
            }
        }
    }

    pub(crate) fn is_full(&self) -> bool {
        self.errors.len() > MAX_ERRORS
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    pub(crate) fn into_errors(self) -> Vec<ValidationError> {
        self.errors
    }
}

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
    if sink.is_empty() {
        dataflow::check(schedule, &mut sink);
        plan::CommPlan::build(schedule, &mut sink);
    }
    if !sink.is_empty() {
        return Err(sink.into_errors());
    }
    match crate::reference::run(schedule, &mut sink) {
        Some(reference) if sink.is_empty() => Ok(ValidSchedule {
            schedule: schedule.clone(),
            reference,
        }),
        _ => Err(sink.into_errors()),
    }
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
