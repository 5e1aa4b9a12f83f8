//! `memreuse-cuda-bench`: memreuse's caching allocator on a CUDA device against the raw
//! driver, on the workloads `scripts/gpu_peer_bench.py` replays with PyTorch's allocators.
//!
//! Workloads (all deterministic):
//! - `pair_4KiB`, `pair_2MiB`: allocate + free of one size, repeated after a warm-up;
//! - `trace_cold`, `trace`: the size trace ([`TraceSpec::GPU`] by default) replayed on a
//!   fresh allocator, then again on the warm one. The raw driver replays a prefix only
//!   (`--raw-trace-ops`, drained), since every op is a real `cuMemAlloc`/`cuMemFree`.
//!
//! Output: one JSON object per (peer, workload) on stdout, and in `--json PATH`.
//! `--write-trace PATH` writes the trace first (before touching CUDA) for the Python peers.
//! Without a CUDA driver or device it prints `skipped: <reason>` and exits 0 (exit 1 with
//! `MEMREUSE_REQUIRE_DEVICE=1`, what a GPU runner sets).

use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use memreuse_core::BackendError;
use memreuse_cuda::CudaDevice;
use memreuse_cuda::bench::raw::RawDriverPeer;
use memreuse_cuda::bench::run::{
    BenchError, BenchPeer, MemreusePeer, RECORD_SCHEMA, Record, Skipped, run_pairs, run_trace,
    write_json_lines,
};
use memreuse_cuda::bench::trace::{Trace, TraceSpec};
use thiserror::Error;

/// A command-line value the bench refuses.
#[derive(Debug, Error, PartialEq, Eq)]
enum ArgError {
    /// Not a whole number.
    #[error("`{0}` is not a whole number")]
    NotANumber(String),
    /// Zero where at least one is needed.
    #[error("must be at least 1")]
    Zero,
    /// A size argument outside what the trace supports.
    #[error("`{value}` is out of range {min}..={max}")]
    OutOfRange {
        /// The value given.
        value: u64,
        /// Smallest accepted.
        min: u64,
        /// Largest accepted.
        max: u64,
    },
}

/// A whole number of at least 1 (`_` separators allowed).
fn count(s: &str) -> Result<u64, ArgError> {
    let n = s
        .replace('_', "")
        .parse::<u64>()
        .map_err(|_| ArgError::NotANumber(s.to_owned()))?;
    if n == 0 { Err(ArgError::Zero) } else { Ok(n) }
}

/// A whole number, 0 allowed.
fn whole(s: &str) -> Result<u64, ArgError> {
    s.replace('_', "")
        .parse::<u64>()
        .map_err(|_| ArgError::NotANumber(s.to_owned()))
}

/// A number of live allocations: 1..=65536.
fn live_count(s: &str) -> Result<u64, ArgError> {
    let n = count(s)?;
    if n > 65_536 {
        return Err(ArgError::OutOfRange {
            value: n,
            min: 1,
            max: 65_536,
        });
    }
    Ok(n)
}

/// Bench options.
#[derive(Debug, Parser)]
#[command(name = "memreuse-cuda-bench", version, about)]
struct Args {
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0, value_parser = whole)]
    device: u64,
    /// Write the size trace here (text, `a <slot> <size>` / `f <slot>` lines) before anything else.
    #[arg(long, value_name = "PATH")]
    write_trace: Option<PathBuf>,
    /// Also write the JSON lines here.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Timed pairs per size for memreuse.
    #[arg(long, default_value = "1000000", value_parser = count)]
    pairs: u64,
    /// Timed pairs per size for the raw driver.
    #[arg(long, default_value = "10000", value_parser = count)]
    raw_pairs: u64,
    /// Untimed warm-up pairs before each pair measurement.
    #[arg(long, default_value = "1000", value_parser = whole)]
    warmup: u64,
    /// Random ops of the trace (its drain comes on top).
    #[arg(long, default_value = "200000", value_parser = count)]
    trace_ops: u64,
    /// Trace seed.
    #[arg(long, default_value_t = TraceSpec::GPU.seed, value_parser = whole)]
    seed: u64,
    /// At most this many allocations live in the trace.
    #[arg(long, default_value = "256", value_parser = live_count)]
    max_live: u64,
    /// At most this many MiB requested live in the trace (at least 64).
    #[arg(long, default_value = "4096", value_parser = count)]
    max_live_mib: u64,
    /// Ops of the trace the raw driver replays (then it frees what is live); 0 skips it.
    #[arg(long, default_value = "20000", value_parser = whole)]
    raw_trace_ops: u64,
    /// Do not run the raw driver peer at all.
    #[arg(long)]
    skip_raw: bool,
}

/// Why the bench failed (a skip is not a failure).
#[derive(Debug, Error)]
enum RunError {
    #[error("trace: {0}")]
    Spec(#[from] memreuse_cuda::bench::trace::SpecError),
    #[error("trace: {0}")]
    Trace(#[from] memreuse_cuda::bench::trace::TraceError),
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    #[error("opening device: {0}")]
    Open(Box<BackendError>),
    #[error("{peer} {workload}: {source}")]
    Bench {
        peer: &'static str,
        workload: String,
        source: Box<BenchError>,
    },
    #[error("allocator configuration: {0}")]
    Config(#[from] memreuse_core::ConfigError),
}

/// Where the records go: stdout, and the JSON file when asked, one flushed line each, so
/// whatever finished survives a timeout.
struct Sink {
    file: Option<(PathBuf, File)>,
}

impl Sink {
    fn open(path: Option<&PathBuf>) -> Result<Sink, RunError> {
        let file = path
            .map(|p| {
                File::create(p)
                    .map(|f| (p.clone(), f))
                    .map_err(|source| RunError::Io {
                        what: format!("creating {}", p.display()),
                        source,
                    })
            })
            .transpose()?;
        Ok(Sink { file })
    }

    fn emit<T: serde::Serialize>(&mut self, record: &T) -> Result<(), RunError> {
        let io = |what: String| move |source| RunError::Io { what, source };
        write_json_lines(io::stdout().lock(), std::slice::from_ref(record))
            .map_err(io("writing stdout".into()))?;
        if let Some((path, f)) = &mut self.file {
            write_json_lines(&mut *f, std::slice::from_ref(record))
                .map_err(io(format!("writing {}", path.display())))?;
        }
        Ok(())
    }

    fn record(&mut self, r: &Record) -> Result<(), RunError> {
        eprintln!(
            "{:>14} {:<10} {:>12.1} ns/{} x {}",
            r.peer, r.workload, r.ns_per_op, r.unit, r.iterations
        );
        self.emit(r)
    }
}

fn bench_err(peer: &'static str, workload: &str) -> impl FnOnce(BenchError) -> RunError {
    let workload = workload.to_owned();
    move |source| RunError::Bench {
        peer,
        workload,
        source: Box::new(source),
    }
}

/// Both pair sizes, then (when `trace` is given) the trace cold and warm.
fn run_peer<P: BenchPeer>(
    sink: &mut Sink,
    peer: &mut P,
    pairs: u64,
    warmup: u64,
    trace: Option<(&Trace, Option<String>)>,
    cold_and_warm: bool,
) -> Result<(), RunError> {
    let name = peer.name();
    for size in [4u64 << 10, 2 << 20] {
        let r = run_pairs(peer, size, warmup, pairs).map_err(bench_err(name, "pair"))?;
        sink.record(&r)?;
    }
    let Some((trace, note)) = trace else {
        return Ok(());
    };
    peer.release_cache().map_err(bench_err(name, "trace"))?;
    let workloads: &[&str] = if cold_and_warm {
        &["trace_cold", "trace"]
    } else {
        &["trace"]
    };
    for w in workloads {
        let mut r = run_trace(peer, trace, w).map_err(bench_err(name, w))?;
        r.note.clone_from(&note);
        sink.record(&r)?;
    }
    Ok(())
}

fn run(args: &Args) -> Result<(), RunError> {
    let spec = TraceSpec {
        seed: args.seed,
        ops: args.trace_ops as usize,
        max_live: args.max_live as u32,
        max_live_bytes: args.max_live_mib.saturating_mul(1 << 20),
        ..TraceSpec::GPU
    };
    let trace = Trace::generate(&spec)?;
    eprintln!(
        "trace: {} ops, {} allocations, live peak {} MiB in {} allocations, seed {:#x}",
        trace.ops.len(),
        trace.allocs,
        trace.live_peak_bytes >> 20,
        trace.live_peak_count,
        spec.seed
    );
    if let Some(path) = &args.write_trace {
        trace.write_to(path)?;
    }
    let mut sink = Sink::open(args.json.as_ref())?;
    let device = match CudaDevice::open(args.device as usize) {
        Ok(d) => d,
        Err(e @ BackendError::Unavailable { .. }) if memreuse_core::testing::device_required() => {
            // A GPU runner sets MEMREUSE_REQUIRE_DEVICE=1: no device is a failure there.
            return Err(RunError::Open(Box::new(e)));
        }
        Err(e @ BackendError::Unavailable { .. }) => {
            println!("skipped: {e}");
            for peer in ["memreuse", "raw-cuMemAlloc"] {
                let s = Skipped {
                    schema: RECORD_SCHEMA,
                    peer: peer.to_owned(),
                    skipped: e.to_string(),
                };
                if let Some((path, f)) = &mut sink.file {
                    write_json_lines(&mut *f, std::slice::from_ref(&s)).map_err(|source| {
                        RunError::Io {
                            what: format!("writing {}", path.display()),
                            source,
                        }
                    })?;
                }
            }
            return Ok(());
        }
        Err(e) => return Err(RunError::Open(Box::new(e))),
    };
    match device.context().name() {
        Ok(name) => eprintln!("device {}: {name}", args.device),
        Err(e) => eprintln!("device {}: name unknown ({e:?})", args.device),
    }

    let config = memreuse_cuda::bench::config::allocator_config()?;
    {
        let mut peer = MemreusePeer::new(device.clone(), config);
        run_peer(
            &mut sink,
            &mut peer,
            args.pairs,
            args.warmup,
            Some((&trace, None)),
            true,
        )?;
        peer.release_cache()
            .map_err(bench_err("memreuse", "release"))?;
    }

    if args.skip_raw {
        return Ok(());
    }
    let mut raw =
        RawDriverPeer::new(device).map_err(|e| bench_err("raw-cuMemAlloc", "open")(e.into()))?;
    let prefix = (args.raw_trace_ops > 0).then(|| {
        let p = trace.prefix(args.raw_trace_ops as usize);
        let note = format!(
            "raw driver replays the first {} of {} trace ops, then frees what is live \
             ({} ops); peak_reserved_bytes is the growth of device-wide used memory \
             (cuMemGetInfo) at that prefix's live peak",
            args.raw_trace_ops.min(trace.ops.len() as u64),
            trace.ops.len(),
            p.ops.len()
        );
        (p, Some(note))
    });
    let warmup = args.warmup.min(100);
    let prefix_ref = prefix.as_ref().map(|(p, n)| (p, n.clone()));
    run_peer(
        &mut sink,
        &mut raw,
        args.raw_pairs,
        warmup,
        prefix_ref,
        false,
    )
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ RunError::Spec(_)) => {
            eprintln!("memreuse-cuda-bench: invalid arguments: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("memreuse-cuda-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
