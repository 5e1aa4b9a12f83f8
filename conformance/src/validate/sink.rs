//! Validation errors and the sink every stage (and the reference interpreter) reports
//! them to: deduplicated and capped, so a body error repeated every iteration is one.

use std::collections::HashSet;

use super::kind::ValidationErrorKind;
use crate::schedule::Phase;

/// At most this many errors are reported per schedule.
pub const MAX_ERRORS: usize = 200;

/// One validation error: the file, where it applies, and why.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ValidationError {
    /// The file (or the name given to [`validate`](crate::validate())).
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
