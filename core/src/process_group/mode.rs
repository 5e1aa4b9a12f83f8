//! `MULTI_STREAM_MEMORY_REUSE`: which reuse policy process groups use.

use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;

use thiserror::Error;

/// The environment variable that selects the reuse mode for every process group of the
/// process (read once, cached).
pub const MULTI_STREAM_MEMORY_REUSE: &str = "MULTI_STREAM_MEMORY_REUSE";

/// The four reuse modes of torch_npu (see `docs/design.md`, "Reuse policies"), with
/// memreuse's improvements (per-work stream uses, generation-checked block ids, guarded
/// mode-2 unstash).
///
/// A mode comes from its number ([`ReuseMode::from_number`]), from text
/// ([`str::parse`], digits or torch_npu's names), or from `MULTI_STREAM_MEMORY_REUSE`
/// ([`reuse_mode_from_env`]):
///
/// ```
/// use memreuse_core::process_group::ReuseMode;
///
/// assert_eq!(ReuseMode::from_number(2), Ok(ReuseMode::AvoidRecordStream));
/// assert_eq!("1".parse::<ReuseMode>(), Ok(ReuseMode::EraseRecordStream));
/// assert_eq!("CLOSE".parse::<ReuseMode>(), Ok(ReuseMode::RecordStream));
/// let err = "4".parse::<ReuseMode>().unwrap_err();
/// assert_eq!(err.to_string(), "invalid reuse mode \"4\": valid values are 0, 1, 2 or 3 \
///     (or CLOSE, ERASE_RECORD_STREAM, AVOID_RECORD_STREAM, ERASE_RECORD_STREAM_WITH_OPTIMIZE)");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum ReuseMode {
    /// `0` CLOSE: `record_stream` on every tensor a communication op touches.
    RecordStream,
    /// `1` ERASE_RECORD_STREAM: `record_stream`, then erase this work's use at `wait()`.
    EraseRecordStream,
    /// `2` AVOID_RECORD_STREAM (default): stash tensors on the work's shelf; release them
    /// after the current stream waited for the work.
    AvoidRecordStream,
    /// `3` ERASE_RECORD_STREAM_WITH_OPTIMIZE: mode 1, plus erase by generation-checked block
    /// id when the tensor is already gone.
    EraseRecordStreamWithOptimize,
}

impl ReuseMode {
    /// Every mode, in numeric order.
    pub const ALL: [ReuseMode; 4] = [
        ReuseMode::RecordStream,
        ReuseMode::EraseRecordStream,
        ReuseMode::AvoidRecordStream,
        ReuseMode::EraseRecordStreamWithOptimize,
    ];

    /// The mode when the variable is unset (the seeds' RFC proposes 2).
    pub const DEFAULT: ReuseMode = ReuseMode::AvoidRecordStream;

    /// The numeric value users write (`0`..`3`).
    pub const fn as_number(self) -> u8 {
        match self {
            ReuseMode::RecordStream => 0,
            ReuseMode::EraseRecordStream => 1,
            ReuseMode::AvoidRecordStream => 2,
            ReuseMode::EraseRecordStreamWithOptimize => 3,
        }
    }

    /// The mode with this number (`0`..`3`); any other number is an error listing the
    /// valid ones.
    pub fn from_number(number: u8) -> Result<ReuseMode, ParseReuseModeError> {
        ReuseMode::ALL
            .into_iter()
            .find(|m| m.as_number() == number)
            .ok_or_else(|| ParseReuseModeError {
                value: number.to_string(),
            })
    }

    /// torch_npu's name for the mode.
    pub const fn torch_name(self) -> &'static str {
        match self {
            ReuseMode::RecordStream => "CLOSE",
            ReuseMode::EraseRecordStream => "ERASE_RECORD_STREAM",
            ReuseMode::AvoidRecordStream => "AVOID_RECORD_STREAM",
            ReuseMode::EraseRecordStreamWithOptimize => "ERASE_RECORD_STREAM_WITH_OPTIMIZE",
        }
    }
}

impl fmt::Display for ReuseMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.as_number())
    }
}

impl FromStr for ReuseMode {
    type Err = ParseReuseModeError;

    /// Exactly one of `0`..`3` or one of torch_npu's names ([`ReuseMode::torch_name`]),
    /// surrounding whitespace allowed; the same digits the environment variable takes,
    /// with an error that does not name the variable.
    fn from_str(text: &str) -> Result<ReuseMode, ParseReuseModeError> {
        let trimmed = text.trim();
        ReuseMode::ALL
            .into_iter()
            .find(|m| {
                // One ASCII digit only: `02`, `+2` and non-ASCII digits stay errors.
                (trimmed.len() == 1 && trimmed.as_bytes()[0] == b'0' + m.as_number())
                    || trimmed == m.torch_name()
            })
            .ok_or_else(|| ParseReuseModeError {
                value: text.to_owned(),
            })
    }
}

/// A reuse mode given as a number or as text that names no mode
/// ([`ReuseMode::from_number`], [`str::parse`]).
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[error(
    "invalid reuse mode {value:?}: valid values are 0, 1, 2 or 3 (or CLOSE, ERASE_RECORD_STREAM, AVOID_RECORD_STREAM, ERASE_RECORD_STREAM_WITH_OPTIMIZE)"
)]
pub struct ParseReuseModeError {
    /// The number or text given.
    pub value: String,
}

/// A malformed `MULTI_STREAM_MEMORY_REUSE` value.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[error(
    "invalid {variable}={}: valid values are 0, 1, 2 or 3 (surrounding whitespace allowed; unset means 2)",
    crate::error::clip(value)
)]
pub struct ReuseModeError {
    /// The variable's name.
    pub variable: &'static str,
    /// The value found (lossily decoded if it was not UTF-8).
    pub value: String,
}

/// Parses a `MULTI_STREAM_MEMORY_REUSE` value (its errors name the variable; for a mode
/// that does not come from the environment use [`ReuseMode::from_number`] or
/// [`str::parse`]): exactly one of `0`..`3` after trimming
/// surrounding whitespace. Everything else (empty, `abc`, `1x`, `-1`, `4`, `+2`, `02`,
/// `2.0`, non-ASCII digits) is an error — torch_npu's `strtol` silently turns some of
/// these into a mode; memreuse refuses them.
pub fn parse_reuse_mode(value: &str) -> Result<ReuseMode, ReuseModeError> {
    match value.trim() {
        "0" => Ok(ReuseMode::RecordStream),
        "1" => Ok(ReuseMode::EraseRecordStream),
        "2" => Ok(ReuseMode::AvoidRecordStream),
        "3" => Ok(ReuseMode::EraseRecordStreamWithOptimize),
        _ => Err(ReuseModeError {
            variable: MULTI_STREAM_MEMORY_REUSE,
            value: value.to_owned(),
        }),
    }
}

/// The process-wide mode from `MULTI_STREAM_MEMORY_REUSE`, read on the first call and
/// cached for the life of the process (as torch_npu's `OptionsManager` does). Unset means
/// [`ReuseMode::DEFAULT`].
pub fn reuse_mode_from_env() -> Result<ReuseMode, ReuseModeError> {
    static CACHED: OnceLock<Result<ReuseMode, ReuseModeError>> = OnceLock::new();
    CACHED
        .get_or_init(|| match std::env::var_os(MULTI_STREAM_MEMORY_REUSE) {
            None => Ok(ReuseMode::DEFAULT),
            Some(raw) => match raw.to_str() {
                Some(text) => parse_reuse_mode(text),
                None => Err(ReuseModeError {
                    variable: MULTI_STREAM_MEMORY_REUSE,
                    value: raw.to_string_lossy().into_owned(),
                }),
            },
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_exactly_the_four_digits_with_whitespace() {
        assert_eq!(parse_reuse_mode("0"), Ok(ReuseMode::RecordStream));
        assert_eq!(parse_reuse_mode(" 1\t"), Ok(ReuseMode::EraseRecordStream));
        assert_eq!(parse_reuse_mode("\n2 "), Ok(ReuseMode::AvoidRecordStream));
        assert_eq!(
            parse_reuse_mode("3"),
            Ok(ReuseMode::EraseRecordStreamWithOptimize)
        );
    }

    #[test]
    fn from_number_maps_0_to_3_and_refuses_the_rest() {
        for mode in ReuseMode::ALL {
            assert_eq!(ReuseMode::from_number(mode.as_number()), Ok(mode));
        }
        for bad in [4u8, 9, 255] {
            let err = ReuseMode::from_number(bad).expect_err("out of range");
            assert_eq!(err.value, bad.to_string());
            let msg = err.to_string();
            assert!(msg.contains("0, 1, 2 or 3"), "{msg}");
            assert!(!msg.contains(MULTI_STREAM_MEMORY_REUSE), "{msg}");
        }
    }

    #[test]
    fn from_str_takes_digits_and_torch_names_with_its_own_error() {
        for mode in ReuseMode::ALL {
            assert_eq!(mode.to_string().parse::<ReuseMode>(), Ok(mode));
            assert_eq!(
                format!(" {}\n", mode.torch_name()).parse::<ReuseMode>(),
                Ok(mode)
            );
        }
        for bad in [
            "", "abc", "1x", "-1", "4", "+2", "02", "\u{0662}", "close", "2.0",
        ] {
            let err = bad.parse::<ReuseMode>().expect_err(bad);
            assert_eq!(err.value, bad);
            let msg = err.to_string();
            assert!(msg.contains(&format!("{bad:?}")), "{msg}");
            assert!(msg.contains("0, 1, 2 or 3"), "{msg}");
            assert!(!msg.contains(MULTI_STREAM_MEMORY_REUSE), "{msg}");
        }
    }

    #[test]
    fn rejects_every_malformed_value_naming_variable_value_and_valid_values() {
        for bad in [
            "", " ", "abc", "1x", "-1", "4", "2.0", "+2", "02", "\u{0662}", "0x1", "1 2",
        ] {
            let err = parse_reuse_mode(bad).expect_err(bad);
            assert_eq!(err.value, bad);
            let msg = err.to_string();
            assert!(msg.contains("MULTI_STREAM_MEMORY_REUSE"), "{msg}");
            assert!(msg.contains(&format!("{bad:?}")), "{msg}");
            assert!(msg.contains("0, 1, 2 or 3"), "{msg}");
        }
    }
}
