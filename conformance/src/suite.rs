//! The built-in suites: generated schedules plus hand-written edge cases, each declaring
//! whether the negative control (`--mode unsafe`) must find a reuse race in it.

use crate::generate::{GenOptions, generate};
use crate::schedule::Schedule;
use crate::validate::{ValidSchedule, load_str, validate};

/// One schedule of a suite.
pub struct SuiteEntry {
    /// The validated schedule and its reference results.
    pub valid: ValidSchedule,
    /// Whether the negative control must report a reuse race on it: true exactly when the
    /// schedule frees a tensor while a collective may still use it and then re-allocates
    /// and touches that memory from a non-communication op (fsdp, for instance, frees a
    /// gradient before its reduce_scatter is waited, but the memory is next written by
    /// an all_gather on the same comm stream, which stream order already protects). CI
    /// asserts exactly this list.
    pub negative_control_finds_reuse_race: bool,
}

/// Names accepted by `--suite`.
pub const SUITES: &[(&str, &str)] = &[
    (
        "builtin",
        "the default suite: every preset at small sizes, world-size-1 variants, the public examples and hand-written edge cases",
    ),
    (
        "single-device",
        "the world-size-1 part of `builtin` (what one GPU can run)",
    ),
    (
        "rfc",
        "the seeds' RFC experiment: moe-mixed (DP x FSDP x TP x EP), late-wait and FSDP at the RFC's sizes (listed per schedule)",
    ),
];

/// Why a suite could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// No suite of that name.
    #[error("unknown suite `{0}`; available: builtin, single-device, rfc")]
    Unknown(String),
    /// A built-in schedule did not generate or validate (a bug in this crate).
    #[error("built-in schedule `{name}` is broken: {reason}")]
    Broken {
        /// Schedule name.
        name: String,
        /// Why.
        reason: String,
    },
}

fn preset(
    name: &str,
    rename: Option<&str>,
    opts: &GenOptions,
    race: bool,
) -> Result<SuiteEntry, SuiteError> {
    let broken = |reason: String| SuiteError::Broken {
        name: rename.unwrap_or(name).to_owned(),
        reason,
    };
    let mut schedule: Schedule = generate(name, opts).map_err(|e| broken(e.to_string()))?;
    if let Some(n) = rename {
        n.clone_into(&mut schedule.name);
    }
    let valid = validate(&schedule.name.clone(), &schedule).map_err(|errs| {
        broken(
            errs.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        )
    })?;
    Ok(SuiteEntry {
        valid,
        negative_control_finds_reuse_race: race,
    })
}

fn embedded(file: &str, text: &str, race: bool) -> Result<SuiteEntry, SuiteError> {
    let valid = load_str(file, text).map_err(|e| SuiteError::Broken {
        name: file.to_owned(),
        reason: e.to_string(),
    })?;
    Ok(SuiteEntry {
        valid,
        negative_control_finds_reuse_race: race,
    })
}

fn ws1() -> GenOptions {
    GenOptions {
        world_size: Some(1),
        ..GenOptions::default()
    }
}

/// The world-size-1 schedules (a single GPU can run them).
fn single_device() -> Result<Vec<SuiteEntry>, SuiteError> {
    vec![
        preset("ddp", Some("ddp-ws1"), &ws1(), true),
        preset("fsdp", Some("fsdp-ws1"), &ws1(), false),
        preset(
            "free-before-wait",
            Some("free-before-wait-ws1"),
            &ws1(),
            true,
        ),
        embedded(
            "single-rank-streams.json",
            include_str!("../suite/single-rank-streams.json"),
            false,
        ),
    ]
    .into_iter()
    .collect::<Result<_, _>>()
}

/// The typed-tensor schedules (docs/schedule-format.md "Typed tensors"): bf16, f16, i64
/// and u8, and one step mixing six types.
fn typed() -> Vec<Result<SuiteEntry, SuiteError>> {
    vec![
        embedded(
            "bf16-gradients.json",
            include_str!("../suite/bf16-gradients.json"),
            false,
        ),
        embedded(
            "f16-shards.json",
            include_str!("../suite/f16-shards.json"),
            false,
        ),
        embedded(
            "i64-indices.json",
            include_str!("../suite/i64-indices.json"),
            false,
        ),
        embedded(
            "u8-buffers.json",
            include_str!("../suite/u8-buffers.json"),
            false,
        ),
        embedded(
            "mixed-precision-step.json",
            include_str!("../suite/mixed-precision-step.json"),
            false,
        ),
    ]
}

/// Builds suite `name`.
pub fn suite(name: &str) -> Result<Vec<SuiteEntry>, SuiteError> {
    let d = GenOptions::default();
    match name {
        "builtin" => {
            let mut entries: Vec<SuiteEntry> = vec![
                preset("ddp", None, &d, true),
                preset("fsdp", None, &d, false),
                preset("tp", None, &d, false),
                preset("ep", None, &d, false),
                preset("pp", None, &d, false),
                preset(
                    "moe-mixed",
                    None,
                    &GenOptions {
                        iterations: 1,
                        ..d.clone()
                    },
                    false,
                ),
                preset("free-before-wait", None, &d, true),
                preset("never-wait", None, &d, true),
                preset("late-wait", None, &d, false),
                preset("p2p-mode2", None, &d, true),
                preset("oom-pressure", None, &d, false),
                embedded(
                    "e1-ddp-buckets.json",
                    include_str!("../tests/data/e1-ddp-buckets.json"),
                    false,
                ),
                embedded(
                    "e2-p2p-batch.json",
                    include_str!("../tests/data/e2-p2p-batch.json"),
                    false,
                ),
                embedded(
                    "side-stream-free-before-wait.json",
                    include_str!("../suite/side-stream-free-before-wait.json"),
                    true,
                ),
                embedded(
                    "two-inflight-one-tensor.json",
                    include_str!("../suite/two-inflight-one-tensor.json"),
                    true,
                ),
            ]
            .into_iter()
            .chain(typed())
            .collect::<Result<_, _>>()?;
            entries.extend(single_device()?);
            Ok(entries)
        }
        "single-device" => single_device(),
        "rfc" => {
            // The RFC's run is 1000 steps of a real MoE model; on 2 cores we replay 30
            // steps with 64 KiB shards (200 before the schedule limits: that many steps
            // keep about 10 GB of check values on the host, above the 2 GiB budget), plus late-wait, where mode 2 holds memory longer,
            // plus FSDP with 4 MiB shards (16 MiB gathered layers, each its own segment),
            // where mode 0's record_stream over-allocation (pytorch#147168) shows in the
            // reserved peak.
            // Two steps (three before the schedule limits: their checked values need 2.8 GB
            // of host memory, above the 2 GiB budget); the over-allocation shows from the
            // first step's prefetch on.
            let fsdp = GenOptions {
                layers: 6,
                elems: 1 << 20,
                iterations: 2,
                ..d.clone()
            };
            let rfc = GenOptions {
                iterations: 30,
                elems: 16 * 1024,
                ..d.clone()
            };
            let late = GenOptions {
                iterations: 50,
                elems: 64 * 1024,
                ..d
            };
            vec![
                preset("moe-mixed", Some("moe-mixed-rfc"), &rfc, false),
                preset("late-wait", Some("late-wait-rfc"), &late, false),
                preset("fsdp", Some("fsdp-large-rfc"), &fsdp, false),
            ]
            .into_iter()
            .collect()
        }
        other => Err(SuiteError::Unknown(other.to_owned())),
    }
}
