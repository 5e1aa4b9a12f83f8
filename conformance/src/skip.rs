//! Why a run was skipped, as a type: the replay, the race checker and the allocator
//! configuration decide it, the runner counts and judges it by its kind, and the report's
//! `skip_reason` is its text ([`SkipReason`]'s `Display`), worded as it always was.

use crate::availability::NotCompiled;

/// Why a run did not run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// The backend is not linked into this build.
    NotCompiled(NotCompiled),
    /// The backend cannot run here (no driver, library or device): its device count
    /// failed, or it refused to open the world as unavailable. The text is the backend's.
    Unavailable {
        /// What the backend said.
        reason: String,
    },
    /// The schedule has more ranks than the backend has devices.
    TooFewDevices {
        /// The backend's name.
        backend: String,
        /// The schedule's world size.
        needs: usize,
        /// The backend's device count.
        has: usize,
    },
    /// The backend opens single devices only: it has no world registration.
    NoMultiRankWorld {
        /// The backend's name.
        backend: String,
    },
    /// The schedule's point depends on the device capacity, and the backend cannot set
    /// one (it would pass trivially).
    FixedCapacity {
        /// The backend's name.
        backend: String,
        /// The capacity the run asked for (`--device-memory`, else the schedule's).
        bytes: u64,
    },
    /// The allocator configuration needs a capability the backend lacks.
    UnsupportedConfig {
        /// The configuration as given (`--alloc-conf` / `MEMREUSE_ALLOC_CONF`).
        conf: String,
        /// The key that needs the capability.
        key: String,
        /// The capability, in words.
        needs: String,
        /// The backend's name.
        backend: String,
    },
}

impl std::fmt::Display for SkipReason {
    /// The report's `skip_reason`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SkipReason::NotCompiled(missing) => {
                write!(f, "backend `{}` is {missing}", missing.backend)
            }
            SkipReason::Unavailable { reason } => f.write_str(reason),
            SkipReason::TooFewDevices {
                backend,
                needs,
                has,
            } => write!(f, "needs {needs} devices, backend `{backend}` has {has}"),
            SkipReason::NoMultiRankWorld { backend } => write!(
                f,
                "backend `{backend}` cannot open a multi-rank world in one process"
            ),
            SkipReason::FixedCapacity { backend, bytes } => write!(
                f,
                "the schedule's point depends on its device_memory ({bytes} bytes), and \
                 backend `{backend}` cannot set a device's capacity"
            ),
            SkipReason::UnsupportedConfig {
                conf,
                key,
                needs,
                backend,
            } => write!(
                f,
                "allocator configuration `{conf}` is not supported: `{key}` needs a backend \
                 with {needs}; backend `{backend}` does not have it"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every text is the one the report has always carried: scripts match on them.
    #[test]
    fn every_reason_reads_as_the_report_always_had_it() {
        let cases = [
            (
                SkipReason::NotCompiled(NotCompiled {
                    backend: "cuda".to_owned(),
                    feature: "cuda".to_owned(),
                }),
                "backend `cuda` is not compiled into this build (cargo feature `cuda`)",
            ),
            (
                SkipReason::Unavailable {
                    reason: "backend `cuda` unavailable: no driver".to_owned(),
                },
                "backend `cuda` unavailable: no driver",
            ),
            (
                SkipReason::TooFewDevices {
                    backend: "cuda".to_owned(),
                    needs: 8,
                    has: 1,
                },
                "needs 8 devices, backend `cuda` has 1",
            ),
            (
                SkipReason::NoMultiRankWorld {
                    backend: "x".to_owned(),
                },
                "backend `x` cannot open a multi-rank world in one process",
            ),
            (
                SkipReason::FixedCapacity {
                    backend: "cuda".to_owned(),
                    bytes: 4096,
                },
                "the schedule's point depends on its device_memory (4096 bytes), and backend `cuda` cannot set a device's capacity",
            ),
            (
                SkipReason::UnsupportedConfig {
                    conf: "expandable_segments:True".to_owned(),
                    key: "expandable_segments".to_owned(),
                    needs: "the virtual_memory capability".to_owned(),
                    backend: "vulkan".to_owned(),
                },
                "allocator configuration `expandable_segments:True` is not supported: `expandable_segments` needs a backend with the virtual_memory capability; backend `vulkan` does not have it",
            ),
        ];
        for (reason, text) in cases {
            assert_eq!(reason.to_string(), text);
        }
    }
}
