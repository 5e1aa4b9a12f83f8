//! Criterion benchmark of issue 2: every peer on the same workloads, side by side.
//!
//! - `cached_pair/<size>/<peer>`: one malloc+free pair of `size` bytes on one stream, the
//!   same size repeatedly after a warm-up (the block is cached).
//! - `trace_1M/<peer>`: the 1,000,000-op seeded trace (plus the drain), each iteration on
//!   a fresh allocator; throughput is in malloc+free pairs, so ns/pair = 1e9 / (elem/s).
//!
//! `cargo bench --bench allocator -- --warm-up-time 1 --measurement-time 3`
//! (`cargo run --release --bin summary` prints the table with ratios and peaks.)

use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{
    BenchmarkGroup, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use memreuse_bench::{
    KIB, MIB, Peer, PeerFn, PeerKind, Trace, TraceSpec, pair, run_trace, with_peer,
};

struct Cached<'a, 'g> {
    group: &'a mut BenchmarkGroup<'g, WallTime>,
    id: &'static str,
    size: u64,
}

impl PeerFn<()> for Cached<'_, '_> {
    fn call<P: Peer>(self, mut peer: P) {
        for _ in 0..10_000 {
            pair(&mut peer, self.size);
        }
        self.group
            .bench_function(self.id, |b| b.iter(|| pair(&mut peer, self.size)));
    }
}

fn cached_pair(c: &mut Criterion) {
    for (size, label) in [(4 * KIB, "4KiB"), (2 * MIB, "2MiB")] {
        let mut group = c.benchmark_group(format!("cached_pair/{label}"));
        group.throughput(Throughput::Elements(1));
        for kind in PeerKind::ALL {
            with_peer(
                kind,
                Cached {
                    group: &mut group,
                    id: kind.id(),
                    size,
                },
            );
        }
        group.finish();
    }
}

/// One run of the trace on a fresh peer: its time and reserved peak.
struct TraceOnce<'a>(&'a Trace);

impl PeerFn<(Duration, Option<u64>)> for TraceOnce<'_> {
    fn call<P: Peer>(self, mut peer: P) -> (Duration, Option<u64>) {
        let d = run_trace(&mut peer, self.0).wall;
        (d, peer.reserved_peak())
    }
}

fn trace_1m(c: &mut Criterion) {
    let trace = Trace::generate(&TraceSpec::ISSUE_2);
    let mut group = c.benchmark_group("trace_1M");
    // One run takes 0.3-3 s here: ten flat samples of one run each, not criterion's
    // linear 1+2+..+10 runs.
    group.sample_size(10);
    group.sampling_mode(SamplingMode::Flat);
    group.throughput(Throughput::Elements(trace.allocs));
    let mut peaks = Vec::new();
    for kind in PeerKind::ALL {
        let mut peak = None;
        group.bench_function(kind.id(), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    // Building and dropping the allocator stay outside the timing.
                    let (d, p) = with_peer(kind, TraceOnce(&trace));
                    total += d;
                    peak = p;
                }
                total
            });
        });
        peaks.push((kind, peak));
    }
    group.finish();
    eprintln!(
        "trace_1M: {} pairs; live requested peak {:.1} MiB (lower bound)",
        trace.allocs,
        trace.live_peak_bytes as f64 / MIB as f64
    );
    for (kind, peak) in peaks {
        match peak {
            Some(p) => eprintln!(
                "  {:<30} reserved peak {:>8.1} MiB ({:.2}x live peak)",
                kind.label(),
                p as f64 / MIB as f64,
                p as f64 / trace.live_peak_bytes as f64
            ),
            None => eprintln!("  {:<30} reserved peak n/a", kind.label()),
        }
    }
}

criterion_group!(benches, cached_pair, trace_1m);
criterion_main!(benches);
