//! Schedule generators: realistic training-step presets and adversarial ones
//! (docs/design.md §7). Every preset's output validates for its default options and for any
//! option values it accepts (it returns [`GenError`] for the others), and keeps values
//! within the exactness bound by re-uploading fresh data every iteration, so nothing
//! accumulates across iterations.

mod adversarial;
mod ddp;
mod eight_then_four;
mod ep;
mod fsdp;
mod moe_mixed;
mod oom_pressure;
mod ops;
mod pp;
mod tp;

use memreuse_core::DType;

use crate::schedule::{OpKind, Schedule};

/// Options shared by all presets. Sizes are rounded up to what a preset needs (multiples
/// of 16 elements for aligned copies, times the group size where tensors are chunked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenOptions {
    /// Layers (for `pp`: micro-batches; for `ddp`: gradient buckets).
    pub layers: usize,
    /// Elements of the basic tensor (a parameter shard, a bucket, an activation chunk).
    pub elems: u64,
    /// Body iterations.
    pub iterations: u32,
    /// Number of ranks; `None`: the preset's default.
    pub world_size: Option<usize>,
    /// Seed offset of every `upload`.
    pub seed: u32,
    /// `device_memory` of the schedule; `None`: unset (or the preset's own, for
    /// `oom-pressure`).
    pub device_memory: Option<u64>,
    /// Element type of every tensor (`--dtype`); `None`: f32, written without `dtype`.
    /// Sizes stay in elements, so the bytes scale with the type.
    pub dtype: Option<DType>,
}

impl Default for GenOptions {
    fn default() -> Self {
        Self {
            layers: 2,
            elems: 256,
            iterations: 2,
            world_size: None,
            seed: 1,
            device_memory: None,
            dtype: None,
        }
    }
}

/// Why a preset cannot produce a schedule for the given options.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GenError {
    /// No preset of that name.
    #[error("unknown preset {0:?} (see `list`)")]
    UnknownPreset(String),
    /// The preset does not support these options.
    #[error("preset {preset}: {reason}")]
    Unsupported {
        /// The preset.
        preset: &'static str,
        /// Why.
        reason: String,
    },
}

/// A named schedule generator.
#[derive(Debug, Clone, Copy)]
pub struct Preset {
    /// Name used on the command line.
    pub name: &'static str,
    /// One-line description.
    pub description: &'static str,
    /// Whether it is a negative/adversarial scenario for reuse policies.
    pub adversarial: bool,
    /// The generator.
    pub generate: fn(&GenOptions) -> Result<Schedule, GenError>,
}

/// Every preset, realistic ones first.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "ddp",
        description: ddp::DESCRIPTION,
        adversarial: false,
        generate: ddp::generate,
    },
    Preset {
        name: "fsdp",
        description: fsdp::DESCRIPTION,
        adversarial: false,
        generate: fsdp::generate,
    },
    Preset {
        name: "tp",
        description: tp::DESCRIPTION,
        adversarial: false,
        generate: tp::generate,
    },
    Preset {
        name: "ep",
        description: ep::DESCRIPTION,
        adversarial: false,
        generate: ep::generate,
    },
    Preset {
        name: "pp",
        description: pp::DESCRIPTION,
        adversarial: false,
        generate: pp::generate,
    },
    Preset {
        name: "moe-mixed",
        description: moe_mixed::DESCRIPTION,
        adversarial: false,
        generate: moe_mixed::generate,
    },
    Preset {
        name: "eight-then-four",
        description: eight_then_four::DESCRIPTION,
        adversarial: false,
        generate: eight_then_four::generate,
    },
    Preset {
        name: "free-before-wait",
        description: adversarial::FREE_BEFORE_WAIT,
        adversarial: true,
        generate: adversarial::free_before_wait,
    },
    Preset {
        name: "never-wait",
        description: adversarial::NEVER_WAIT,
        adversarial: true,
        generate: adversarial::never_wait,
    },
    Preset {
        name: "late-wait",
        description: adversarial::LATE_WAIT,
        adversarial: true,
        generate: adversarial::late_wait,
    },
    Preset {
        name: "p2p-mode2",
        description: adversarial::P2P_MODE2,
        adversarial: true,
        generate: adversarial::p2p_mode2,
    },
    Preset {
        name: "oom-pressure",
        description: oom_pressure::DESCRIPTION,
        adversarial: true,
        generate: oom_pressure::generate,
    },
];

/// Generates preset `name` with `opts`. The output is validated before it is returned:
/// options whose schedule would be invalid (a limit exceeded, a tensor too large for its
/// group) are a [`GenError::Unsupported`] naming the first reason, never a file that
/// `validate` rejects.
pub fn generate(name: &str, opts: &GenOptions) -> Result<Schedule, GenError> {
    let preset = PRESETS
        .iter()
        .find(|p| p.name == name)
        .ok_or_else(|| GenError::UnknownPreset(name.to_owned()))?;
    bound_options(preset.name, opts)?;
    let mut schedule = (preset.generate)(opts)?;
    if let Some(dtype) = opts.dtype.filter(|d| *d != DType::F32) {
        with_dtype(&mut schedule, dtype);
    }
    match crate::validate::validate(preset.name, &schedule) {
        Ok(_) => Ok(schedule),
        Err(errors) => Err(GenError::Unsupported {
            preset: preset.name,
            reason: format!(
                "these options give an invalid schedule: {}",
                errors
                    .first()
                    .map_or_else(String::new, |e| e.kind.to_string())
            ),
        }),
    }
}

/// Makes every tensor of `schedule` an element of `dtype`. Every preset's tensors meet in
/// copies and collectives, so they all take the one type; a type the preset's ops cannot
/// use (fp8 under a reduction, bf16 over too many ranks) fails validation and is refused
/// with that reason.
fn with_dtype(schedule: &mut Schedule, dtype: DType) {
    for op in schedule
        .setup
        .iter_mut()
        .chain(&mut schedule.body)
        .chain(&mut schedule.teardown)
    {
        if let OpKind::Alloc { dtype: d, .. } = &mut op.kind {
            *d = Some(dtype);
        }
    }
}

/// Rejects option values no valid schedule can have, before a preset multiplies them
/// (a huge `layers` would exhaust memory building the ops; a huge `elems` would wrap when
/// rounded up).
fn bound_options(preset: &'static str, opts: &GenOptions) -> Result<(), GenError> {
    use crate::schedule::{MAX_ELEMS, MAX_ITERATIONS, MAX_STEPS};
    let unsupported = |what: &str, value: u64, max: u64| GenError::Unsupported {
        preset,
        reason: format!("{what} {value} is above the limit {max}"),
    };
    if opts.layers as u64 > MAX_STEPS {
        return Err(unsupported("layers", opts.layers as u64, MAX_STEPS));
    }
    if opts.elems > MAX_ELEMS {
        return Err(unsupported("elems", opts.elems, MAX_ELEMS));
    }
    if opts.iterations > MAX_ITERATIONS {
        return Err(unsupported(
            "iterations",
            u64::from(opts.iterations),
            u64::from(MAX_ITERATIONS),
        ));
    }
    Ok(())
}

/// Rounds `n` up to a multiple of `m` (at least `m`), saturating.
pub(crate) fn round_up(n: u64, m: u64) -> u64 {
    let m = m.max(1);
    n.max(1).div_ceil(m).saturating_mul(m)
}

/// The world size to use: the option, or `default`, checked against `ok`.
pub(crate) fn world(
    opts: &GenOptions,
    preset: &'static str,
    default: usize,
    ok: impl Fn(usize) -> bool,
    rule: &str,
) -> Result<usize, GenError> {
    let n = opts.world_size.unwrap_or(default);
    let max = crate::schedule::MAX_WORLD_SIZE;
    if n == 0 || n > max || !ok(n) {
        return Err(GenError::Unsupported {
            preset,
            reason: format!(
                "world size {n} is not supported: valid are 1..={max} ranks, and this preset needs {rule}"
            ),
        });
    }
    if opts.layers == 0 {
        return Err(GenError::Unsupported {
            preset,
            reason: "layers must be at least 1".to_owned(),
        });
    }
    if opts.elems == 0 {
        return Err(GenError::Unsupported {
            preset,
            reason: "elems must be at least 1 (it is rounded up to a multiple of 16)".to_owned(),
        });
    }
    Ok(n)
}

/// The skeleton every preset fills in.
pub(crate) fn skeleton(
    name: &str,
    description: &str,
    world_size: usize,
    opts: &GenOptions,
) -> Schedule {
    Schedule {
        name: name.to_owned(),
        description: Some(description.to_owned()),
        world_size,
        groups: std::collections::BTreeMap::new(),
        streams: Vec::new(),
        device_memory: opts.device_memory,
        iterations: opts.iterations,
        setup: Vec::new(),
        body: Vec::new(),
        teardown: Vec::new(),
        expect_out_of_memory: Vec::new(),
    }
}
