//! The benchmark's deterministic size trace and its text format.
//!
//! A trace is a list of operations on numbered *slots*: `Alloc { slot, size }` puts a new
//! allocation into an empty slot, `Free { slot }` frees the one it holds. Every peer (this
//! allocator, the raw driver, PyTorch's allocators from Python) keeps one handle per slot,
//! so "free slot 17" frees the same allocation everywhere.
//!
//! Sizes are log-uniform by octave: an exponent `e` uniform in `min_log2..max_log2`, then a
//! size uniform in `2^e..=2^(e+1)`. The live set is bounded twice: at most `max_live`
//! allocations and at most `max_live_bytes` requested bytes (an allocation that would cross
//! the byte bound becomes a free). Only integer arithmetic on a SplitMix64 stream decides
//! sizes and slots, so a seed gives the same trace on every machine.
//!
//! Text format, version 1 (what [`Trace::write_to`] writes and [`Trace::parse`] reads;
//! `scripts/gpu_peer_bench.py` reads the same):
//! ```text
//! memreuse-trace v1 slots <N>
//! # any number of comment lines
//! a <slot> <size>
//! f <slot>
//! ```
//! Slots are below `N`, sizes at least 1, an `a` goes into an empty slot, an `f` frees a
//! full one, and every slot is empty at the end.

use std::io::{self, BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};

use thiserror::Error;

/// The first line of a version-1 trace file, before the slot count.
pub const TRACE_MAGIC: &str = "memreuse-trace v1 slots";

/// The seeded generator of every trace (shared with the mock's deterministic mode).
pub use memreuse_core::testing::SplitMix64;

/// One trace operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Allocate `size` bytes into `slot` (empty before).
    Alloc {
        /// Slot receiving the allocation.
        slot: u32,
        /// Requested bytes (at least 1).
        size: u64,
    },
    /// Free the allocation in `slot`.
    Free {
        /// Slot holding the allocation.
        slot: u32,
    },
}

/// Parameters of a generated trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceSpec {
    /// Generator seed.
    pub seed: u64,
    /// Random operations (the final drain of live allocations comes on top).
    pub ops: usize,
    /// At most this many allocations live at once.
    pub max_live: u32,
    /// At most this many requested bytes live at once.
    pub max_live_bytes: u64,
    /// Chance, per mille, that an op allocates while both bounds leave room.
    pub alloc_per_mille: u64,
    /// Smallest size exponent: sizes start at `2^min_log2` bytes.
    pub min_log2: u32,
    /// Largest size exponent: sizes end at `2^max_log2` bytes.
    pub max_log2: u32,
}

/// A [`TraceSpec`] that cannot generate a trace.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid trace spec: {0}")]
pub struct SpecError(pub String);

impl TraceSpec {
    /// The GPU benchmark's trace: 200,000 ops, sizes 512 B..=64 MiB log-uniform by octave,
    /// at most 256 allocations and 4 GiB requested live, 55% allocations while there is room.
    pub const GPU: TraceSpec = TraceSpec {
        seed: 0x5EED_C0DA,
        ops: 200_000,
        max_live: 256,
        max_live_bytes: 4 << 30,
        alloc_per_mille: 550,
        min_log2: 9,
        max_log2: 26,
    };

    /// Checks that the bounds make sense (one largest allocation fits the byte bound).
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.max_live == 0 {
            return Err(SpecError("max_live is 0".into()));
        }
        if self.min_log2 >= self.max_log2 || self.max_log2 > 40 {
            return Err(SpecError(format!(
                "size exponents {}..{} (need min < max <= 40)",
                self.min_log2, self.max_log2
            )));
        }
        if self.max_live_bytes < 1u64 << self.max_log2 {
            return Err(SpecError(format!(
                "max_live_bytes {} is below the largest size 2^{}",
                self.max_live_bytes, self.max_log2
            )));
        }
        if self.alloc_per_mille > 1000 {
            return Err(SpecError(format!(
                "alloc_per_mille {} is above 1000",
                self.alloc_per_mille
            )));
        }
        Ok(())
    }
}

/// A trace and its own figures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// Operations; every allocation is freed by the end.
    pub ops: Vec<Op>,
    /// Number of slots (every slot index is below this).
    pub slots: u32,
    /// Number of allocations.
    pub allocs: u64,
    /// Peak of the live requested bytes: the lower bound of any allocator's footprint.
    pub live_peak_bytes: u64,
    /// Index of the op right after which the live bytes first reach their peak.
    pub live_peak_op: usize,
    /// Most allocations live at once.
    pub live_peak_count: u32,
    /// Sum of all requested bytes.
    pub requested_bytes: u64,
}

/// Why a trace could not be read or is malformed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum TraceError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// The first line is not `memreuse-trace v1 slots <N>`.
    #[error("line 1: expected `{TRACE_MAGIC} <N>`, found `{found}`")]
    Header {
        /// What the first line said.
        found: String,
    },
    /// A line is not `a <slot> <size>` or `f <slot>`.
    #[error("line {line}: {reason}: `{text}`")]
    Syntax {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: &'static str,
        /// The line.
        text: String,
    },
    /// An operation breaks the slot rules.
    #[error("line {line}: {reason}")]
    Invalid {
        /// 1-based line number (0 when the trace did not come from text).
        line: usize,
        /// What is wrong.
        reason: String,
    },
}

/// Validation state shared by the generator-free constructors.
struct Checker {
    live: Vec<Option<u64>>,
    n_live: u32,
    bytes: u64,
    trace: Trace,
}

impl Checker {
    fn new(slots: u32) -> Checker {
        Checker {
            live: vec![None; slots as usize],
            n_live: 0,
            bytes: 0,
            trace: Trace {
                ops: Vec::new(),
                slots,
                allocs: 0,
                live_peak_bytes: 0,
                live_peak_op: 0,
                live_peak_count: 0,
                requested_bytes: 0,
            },
        }
    }

    fn push(&mut self, op: Op, line: usize) -> Result<(), TraceError> {
        let invalid = |reason: String| TraceError::Invalid { line, reason };
        match op {
            Op::Alloc { slot, size } => {
                let cell = self.live.get_mut(slot as usize).ok_or_else(|| {
                    invalid(format!("slot {slot} outside 0..{}", self.trace.slots))
                })?;
                if size == 0 {
                    return Err(invalid(format!("allocation of 0 bytes into slot {slot}")));
                }
                if cell.is_some() {
                    return Err(invalid(format!("allocation into live slot {slot}")));
                }
                *cell = Some(size);
                self.n_live += 1;
                self.bytes += size;
                self.trace.allocs += 1;
                self.trace.requested_bytes += size;
                self.trace.live_peak_count = self.trace.live_peak_count.max(self.n_live);
                if self.bytes > self.trace.live_peak_bytes {
                    self.trace.live_peak_bytes = self.bytes;
                    self.trace.live_peak_op = self.trace.ops.len();
                }
            }
            Op::Free { slot } => {
                let size = self
                    .live
                    .get_mut(slot as usize)
                    .ok_or_else(|| invalid(format!("slot {slot} outside 0..{}", self.trace.slots)))?
                    .take()
                    .ok_or_else(|| invalid(format!("free of empty slot {slot}")))?;
                self.n_live -= 1;
                self.bytes -= size;
            }
        }
        self.trace.ops.push(op);
        Ok(())
    }

    fn finish(self, line: usize) -> Result<Trace, TraceError> {
        if self.n_live == 0 {
            Ok(self.trace)
        } else {
            Err(TraceError::Invalid {
                line,
                reason: format!("{} allocation(s) never freed", self.n_live),
            })
        }
    }
}

impl Trace {
    /// Generates the trace of `spec`.
    pub fn generate(spec: &TraceSpec) -> Result<Trace, SpecError> {
        spec.validate()?;
        let mut rng = SplitMix64::new(spec.seed);
        let mut live: Vec<u32> = Vec::with_capacity(spec.max_live as usize);
        let mut free_slots: Vec<u32> = (0..spec.max_live).rev().collect();
        let mut size_of = vec![0u64; spec.max_live as usize];
        let mut live_bytes = 0u64;
        let mut checker = Checker::new(spec.max_live);
        checker.trace.ops.reserve(spec.ops + spec.max_live as usize);
        for _ in 0..spec.ops {
            // Every op draws the coin and a size, so the stream does not depend on the branch.
            let coin = rng.chance(spec.alloc_per_mille);
            let e = rng.range_inclusive(u64::from(spec.min_log2), u64::from(spec.max_log2) - 1);
            let size = rng.range_inclusive(1 << e, 2 << e);
            let room =
                live.len() < spec.max_live as usize && live_bytes + size <= spec.max_live_bytes;
            let op = if live.is_empty() || (room && coin) {
                let slot = free_slots.pop().expect("a slot is free below max_live");
                size_of[slot as usize] = size;
                live.push(slot);
                live_bytes += size;
                Op::Alloc { slot, size }
            } else {
                let i = rng.range_inclusive(0, live.len() as u64 - 1) as usize;
                let slot = live.swap_remove(i);
                free_slots.push(slot);
                live_bytes -= size_of[slot as usize];
                Op::Free { slot }
            };
            checker
                .push(op, 0)
                .expect("the generator keeps the slot rules");
        }
        live.sort_unstable();
        for slot in live {
            checker
                .push(Op::Free { slot }, 0)
                .expect("drain frees live slots");
        }
        Ok(checker.finish(0).expect("drained"))
    }

    /// Checks `ops` over `slots` slots and computes the figures.
    pub fn from_ops(slots: u32, ops: impl IntoIterator<Item = Op>) -> Result<Trace, TraceError> {
        let mut checker = Checker::new(slots);
        for op in ops {
            checker.push(op, 0)?;
        }
        checker.finish(0)
    }

    /// The first `n` ops, then frees of whatever they left live (in slot order).
    pub fn prefix(&self, n: usize) -> Trace {
        let head = &self.ops[..n.min(self.ops.len())];
        let mut live = vec![false; self.slots as usize];
        for op in head {
            match *op {
                Op::Alloc { slot, .. } => live[slot as usize] = true,
                Op::Free { slot } => live[slot as usize] = false,
            }
        }
        let drain = (0..self.slots)
            .filter(|s| live[*s as usize])
            .map(|slot| Op::Free { slot });
        Trace::from_ops(self.slots, head.iter().copied().chain(drain))
            .expect("a prefix of a valid trace, drained, is valid")
    }

    /// Writes the trace in the text format (a `#` comment line carries the figures).
    pub fn write(&self, out: impl Write) -> io::Result<()> {
        let mut w = BufWriter::new(out);
        writeln!(w, "{TRACE_MAGIC} {}", self.slots)?;
        writeln!(
            w,
            "# ops={} allocs={} live_peak_bytes={} live_peak_count={} requested_bytes={}",
            self.ops.len(),
            self.allocs,
            self.live_peak_bytes,
            self.live_peak_count,
            self.requested_bytes
        )?;
        for op in &self.ops {
            match *op {
                Op::Alloc { slot, size } => writeln!(w, "a {slot} {size}")?,
                Op::Free { slot } => writeln!(w, "f {slot}")?,
            }
        }
        w.flush()
    }

    /// Writes the trace to the file `path`.
    pub fn write_to(&self, path: &Path) -> Result<(), TraceError> {
        let io = |source| TraceError::Io {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::create(path).map_err(io)?;
        self.write(file).map_err(io)
    }

    /// Reads a trace in the text format.
    pub fn parse(input: impl BufRead) -> Result<Trace, TraceError> {
        let io = |source| TraceError::Io {
            path: PathBuf::from("<input>"),
            source,
        };
        let mut lines = input.lines();
        let first = lines.next().transpose().map_err(io)?.unwrap_or_default();
        let slots = first
            .strip_prefix(TRACE_MAGIC)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|n| n.parse::<u32>().ok())
            .ok_or_else(|| TraceError::Header {
                found: first.clone(),
            })?;
        let mut checker = Checker::new(slots);
        let mut last = 1;
        for (i, text) in lines.enumerate() {
            let text = text.map_err(io)?;
            let line = i + 2;
            last = line;
            let t = text.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            let syntax = |reason| TraceError::Syntax {
                line,
                reason,
                text: text.clone(),
            };
            let mut words = t.split_ascii_whitespace();
            let kind = words.next().unwrap_or_default();
            let slot = words
                .next()
                .ok_or_else(|| syntax("missing slot"))?
                .parse::<u32>()
                .map_err(|_| syntax("slot is not a number"))?;
            let op = match kind {
                "a" => {
                    let size = words
                        .next()
                        .ok_or_else(|| syntax("missing size"))?
                        .parse::<u64>()
                        .map_err(|_| syntax("size is not a number"))?;
                    Op::Alloc { slot, size }
                }
                "f" => Op::Free { slot },
                _ => return Err(syntax("unknown op (expected `a` or `f`)")),
            };
            if words.next().is_some() {
                return Err(syntax("trailing words"));
            }
            checker.push(op, line)?;
        }
        checker.finish(last)
    }

    /// Reads the trace file `path`.
    pub fn read_from(path: &Path) -> Result<Trace, TraceError> {
        let file = std::fs::File::open(path).map_err(|source| TraceError::Io {
            path: path.to_owned(),
            source,
        })?;
        Trace::parse(io::BufReader::new(file))
    }
}
