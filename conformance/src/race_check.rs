//! `run --race-check`: which race checker judges a run, and what a backend's capabilities
//! make of the options it was given.

use memreuse_core::race::wrap_endpoints;
use memreuse_core::{Backend, RankEndpoint};

use crate::skip::SkipReason;

/// Reports kept per device by the adaptor (as the mock's default).
const MAX_REPORTS: usize = 1000;

/// `--race-check`: who checks races.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RaceCheck {
    /// The backend's native detector where it has one, the adaptor everywhere else.
    #[default]
    Auto,
    /// Every native detector off (where the backend can switch it off) and its reports
    /// ignored; the `memreuse_core::race::RaceChecker` adaptor alone judges.
    Adaptor,
    /// No race checking: `races` is `null` (speed runs).
    Off,
}

impl RaceCheck {
    /// Parses a `--race-check` value.
    pub fn parse(text: &str) -> Option<RaceCheck> {
        match text {
            "auto" => Some(RaceCheck::Auto),
            "adaptor" => Some(RaceCheck::Adaptor),
            "off" => Some(RaceCheck::Off),
            _ => None,
        }
    }

    /// Whether to ask the backend to switch its own detector off when opening it.
    pub fn disables_native(self) -> bool {
        self != RaceCheck::Auto
    }
}

/// Who judged a run, as the report's `race_checker` field says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checker {
    /// The backend's own detector.
    Native,
    /// The adaptor.
    Adaptor,
    /// Nobody (`--race-check off`).
    None,
}

impl Checker {
    /// `native`, `adaptor` or `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            Checker::Native => "native",
            Checker::Adaptor => "adaptor",
            Checker::None => "none",
        }
    }
}

/// Whether `backend` has a detector of its own (declared, or visible through its reports).
pub fn has_native_detector<B: Backend>(backend: &B) -> bool {
    backend.capabilities().native_race_detection || backend.race_reports().is_some()
}

/// Puts the adaptor in front of an opened world where `check` says so; returns the
/// endpoints to run and who judges.
pub fn arm(endpoints: Vec<RankEndpoint>, check: RaceCheck) -> (Vec<RankEndpoint>, Checker) {
    let native = endpoints
        .first()
        .is_some_and(|e| has_native_detector(&e.backend));
    match check {
        RaceCheck::Off => (endpoints, Checker::None),
        RaceCheck::Auto if native => (endpoints, Checker::Native),
        RaceCheck::Auto | RaceCheck::Adaptor => {
            (wrap_endpoints(endpoints, MAX_REPORTS).0, Checker::Adaptor)
        }
    }
}

/// The options of a run that `backend` cannot honour, by flag name (the report's
/// `ignored_options`), and a reason to skip the run when its point depends on one
/// ([`SkipReason::FixedCapacity`]).
pub fn ignored_options<B: Backend>(
    backend: &B,
    deterministic: bool,
    device_memory: Option<u64>,
    schedule_capacity: Option<u64>,
) -> (Vec<String>, Option<SkipReason>) {
    let caps = backend.capabilities();
    let mut ignored = Vec::new();
    if deterministic && !caps.deterministic_scheduling {
        ignored.push("--deterministic".to_owned());
    }
    if device_memory.is_some() && !caps.memory_capacity {
        ignored.push("--device-memory".to_owned());
    }
    let skip =
        (schedule_capacity.is_some() && !caps.memory_capacity).then(|| SkipReason::FixedCapacity {
            backend: backend.name().to_owned(),
            bytes: device_memory.or(schedule_capacity).unwrap_or_default(),
        });
    (ignored, skip)
}

/// What [`prepare`] decided for a run.
#[derive(Clone, Debug)]
pub struct Armed {
    /// Who judges races.
    pub checker: Checker,
    /// Options the backend cannot honour (the report's `ignored_options`).
    pub ignored: Vec<String>,
}

/// Reads the opened world's capabilities and arms the race checker: returns the endpoints
/// to run, or the reason to skip the run (its point depends on a capability the backend
/// lacks).
pub fn prepare(
    endpoints: Vec<RankEndpoint>,
    check: RaceCheck,
    deterministic: bool,
    device_memory: Option<u64>,
    schedule_capacity: Option<u64>,
) -> Result<(Vec<RankEndpoint>, Armed), SkipReason> {
    let (ignored, skip) = match endpoints.first() {
        Some(e) => ignored_options(&e.backend, deterministic, device_memory, schedule_capacity),
        None => (Vec::new(), None),
    };
    if let Some(reason) = skip {
        return Err(reason);
    }
    let (endpoints, checker) = arm(endpoints, check);
    Ok((endpoints, Armed { checker, ignored }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use memreuse_core::testing::ManualBackend;

    #[test]
    fn parse_accepts_exactly_the_three_values() {
        assert_eq!(RaceCheck::parse("auto"), Some(RaceCheck::Auto));
        assert_eq!(RaceCheck::parse("adaptor"), Some(RaceCheck::Adaptor));
        assert_eq!(RaceCheck::parse("off"), Some(RaceCheck::Off));
        assert_eq!(RaceCheck::parse("native"), None);
    }

    #[test]
    fn a_real_device_ignores_simulation_options_and_skips_capacity_schedules() {
        let b = ManualBackend::new(1 << 20);
        let (ignored, skip) = ignored_options(&b, true, Some(4096), None);
        assert_eq!(ignored, ["--deterministic", "--device-memory"]);
        assert!(skip.is_none());
        let (_, skip) = ignored_options(&b, false, None, Some(1 << 20));
        assert!(
            skip.is_some_and(|s| matches!(s, SkipReason::FixedCapacity { .. })
                && s.to_string().contains("device_memory"))
        );
    }
}
