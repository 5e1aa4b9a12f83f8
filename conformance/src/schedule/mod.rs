//! The schedule model of `memreuse.schedule/1` (docs/schedules.md), its parser, and the
//! per-rank view of a schedule's program order that every consumer (validator, reference
//! interpreter, replay engine) iterates.

mod declared;
mod echo;
mod op;
mod parse;
mod strict_json;
mod topology;

pub use declared::DeclaredOom;
pub use op::{AsyncWork, BatchMember, Op, OpKind, ReduceOp};
pub use parse::{MAX_SCHEDULE_FILE_BYTES, ParseError, ParseErrorKind};
pub use topology::{Located, Topology};

use std::collections::BTreeMap;

use serde::Serialize;

/// The element type of an `alloc`'s optional `dtype`: `f32` when absent.
pub fn elem_type(dtype: Option<memreuse_core::DType>) -> memreuse_core::DType {
    dtype.unwrap_or(memreuse_core::DType::F32)
}

/// The value of `format` every schedule must carry.
pub const FORMAT: &str = "memreuse.schedule/1";
/// The reserved group name: the single list of all ranks in order.
pub const WORLD: &str = "world";
/// The stream that always exists and is current at the start of every phase.
pub const COMPUTE: &str = "compute";
/// Largest accepted `world_size`: keeps per-rank state of hostile inputs bounded.
pub const MAX_WORLD_SIZE: usize = 1024;
/// Longest accepted group, stream, tensor or work name, in bytes.
pub const MAX_NAME_BYTES: usize = 128;
/// Longest accepted schedule `name`, in bytes: artifact file names escape each byte to
/// at most three characters and must stay within 255 bytes.
pub const MAX_SCHEDULE_NAME_BYTES: usize = 64;
/// Longest value echoed in an error message, in characters; longer ones are cut, with
/// their full length given.
pub const MAX_ECHO_CHARS: usize = 64;
/// Largest accepted tensor length in elements (256 MiB of f32, 512 MiB of f64): the
/// reference interpreter materialises every tensor on the host.
pub const MAX_ELEMS: u64 = 1 << 26;
/// Host memory budget of validating and running one schedule (2 GiB): the validator
/// estimates the peak (reference tensors, checked values, the expanded program, replay
/// thread stacks; see [`crate::validate::Cost::host_bytes`]) and rejects anything above it
/// before the work is done, since an allocation failure inside the standard library or at
/// thread spawn aborts the process instead of returning an error.
pub const MAX_HOST_BYTES: u64 = 1 << 31;
/// Largest accepted number of op executions over all ranks, iterations expanded (the
/// body counted at least once): the validator and the reference interpreter hold every
/// rank's expanded program.
pub const MAX_STEPS: u64 = 1_000_000;
/// Largest accepted `iterations`: validation replays every iteration.
pub const MAX_ITERATIONS: u32 = 10_000;
/// Largest `us` of one `delay` op (1 s).
pub const MAX_DELAY_US: u64 = 1_000_000;
/// Largest sum of the `delay`s one rank executes, iterations expanded (10 s): well under
/// the 60 s communicator timeout, so a delayed peer never looks like a dead one.
pub const MAX_DELAY_TOTAL_US: u64 = 10_000_000;
/// Largest number of element operations of the reference interpreter over all ranks and
/// iterations (2^31, a few seconds of host time): per executing rank, the elements of
/// the tensors each op reads or writes.
pub const MAX_ELEMENT_OPS: u64 = 1 << 31;
/// Largest number of host threads a replay may need (one per rank, one per stream, one
/// watchdog per group list): a thread that cannot be spawned aborts the process.
pub const MAX_THREADS: u64 = 8192;

/// A phase of a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// Runs once, with `iter` = 0.
    Setup,
    /// Runs `iterations` times, with `iter` = 0..iterations-1.
    Body,
    /// Runs once, with `iter` = `iterations`.
    Teardown,
}

impl Phase {
    /// All phases in execution order.
    pub const ALL: [Phase; 3] = [Phase::Setup, Phase::Body, Phase::Teardown];

    /// The phase's field name in the schedule.
    pub fn name(self) -> &'static str {
        match self {
            Self::Setup => "setup",
            Self::Body => "body",
            Self::Teardown => "teardown",
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A parsed schedule. Parsing checks types and fields only; see [`crate::validate()`] for the
/// semantic checks that must pass before anything runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Schedule {
    /// Schedule name (used in reports).
    pub name: String,
    /// Optional free text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Number of ranks (>= 1).
    pub world_size: usize,
    /// User groups: name -> disjoint rank lists, each its own communicator.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub groups: BTreeMap<String, Vec<Vec<usize>>>,
    /// Extra stream names (`compute` always exists).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<String>,
    /// Per-rank device capacity in bytes, where a backend can set it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_memory: Option<u64>,
    /// Number of body iterations.
    pub iterations: u32,
    /// Ops run once before the body.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub setup: Vec<Op>,
    /// Ops run `iterations` times.
    pub body: Vec<Op>,
    /// Ops run once after the body.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub teardown: Vec<Op>,
    /// Allocator settings under which the schedule is expected to run out of memory
    /// (docs/schedule-format.md): the runner judges such a run as declared, not as an
    /// error.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub expect_out_of_memory: Vec<DeclaredOom>,
}

/// One op as executed by one rank: where it sits in the schedule and in the expansion.
#[derive(Debug, Clone, Copy)]
pub struct Step<'a> {
    /// The phase.
    pub phase: Phase,
    /// The phase index `iter`: 0 in setup, 0..iterations-1 in the body, `iterations` in
    /// teardown.
    pub iter: u32,
    /// Index of the op inside its phase's list.
    pub op_index: usize,
    /// The op.
    pub op: &'a Op,
}

impl Schedule {
    /// The ops of `phase`.
    pub fn phase_ops(&self, phase: Phase) -> &[Op] {
        match phase {
            Phase::Setup => &self.setup,
            Phase::Body => &self.body,
            Phase::Teardown => &self.teardown,
        }
    }

    /// The (phase, iter) segments in execution order: setup 0, body 0..iterations-1,
    /// teardown `iterations`. Communication matches only within one segment.
    pub fn segments(&self) -> impl Iterator<Item = (Phase, u32)> + '_ {
        std::iter::once((Phase::Setup, 0))
            .chain((0..self.iterations).map(|i| (Phase::Body, i)))
            .chain(std::iter::once((Phase::Teardown, self.iterations)))
    }

    /// Rank `rank`'s ops of one segment, in program order (ops whose `ranks` exclude the
    /// rank are skipped).
    pub fn segment_steps(
        &self,
        rank: usize,
        phase: Phase,
        iter: u32,
    ) -> impl Iterator<Item = Step<'_>> {
        self.phase_ops(phase)
            .iter()
            .enumerate()
            .filter(move |(_, op)| op.runs_on(rank))
            .map(move |(op_index, op)| Step {
                phase,
                iter,
                op_index,
                op,
            })
    }

    /// Rank `rank`'s whole program: every segment's steps in execution order.
    pub fn rank_steps(&self, rank: usize) -> impl Iterator<Item = Step<'_>> {
        self.segments()
            .flat_map(move |(phase, iter)| self.segment_steps(rank, phase, iter))
    }

    /// The schedule as a `memreuse.schedule/1` JSON document (pretty-printed).
    pub fn to_json_string(&self) -> String {
        #[derive(Serialize)]
        struct WithFormat<'a> {
            format: &'static str,
            #[serde(flatten)]
            schedule: &'a Schedule,
        }
        // Serializing plain structs, strings and integers into a String cannot fail.
        serde_json::to_string_pretty(&WithFormat {
            format: FORMAT,
            schedule: self,
        })
        .unwrap_or_default()
    }

    /// Parses a schedule from JSON text; `file` names the source in errors.
    pub fn from_json_str(file: &str, text: &str) -> Result<Self, ParseError> {
        parse::parse(file, text)
    }

    /// Reads (at most [`MAX_SCHEDULE_FILE_BYTES`]) and parses a schedule file.
    pub fn from_file(path: &std::path::Path) -> Result<Self, ParseError> {
        let file = path.display().to_string();
        match parse::read_bounded(path) {
            Ok(text) => parse::parse(&file, &text),
            Err(kind) => Err(ParseError {
                file,
                phase: None,
                op_index: None,
                kind,
            }),
        }
    }
}
