//! Prints the issue-2 comparison table: ns per malloc+free pair for workloads (a) and (b),
//! reserved peaks for (b), ratios against memreuse over the mock device.
//!
//! `cargo run --release --bin summary [-- --rounds N --trace-runs N --pairs N]`

use std::time::Duration;

use memreuse_bench::{
    MIB, Peer, PeerFn, PeerKind, Trace, TraceSpec, pair, run_trace, time_pairs, with_peer,
};

struct Args {
    rounds: usize,
    pairs: u64,
    trace_runs: usize,
}

fn parse_args() -> Args {
    let mut a = Args {
        rounds: 7,
        pairs: 200_000,
        trace_runs: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || {
            it.next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("{k} needs a number"))
        };
        match k.as_str() {
            "--rounds" => a.rounds = v() as usize,
            "--pairs" => a.pairs = v(),
            "--trace-runs" => a.trace_runs = v() as usize,
            "--bench" => {} // passed by `cargo bench`
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Workload (a): median ns/pair over `rounds` rounds of `pairs` pairs, after a warm-up.
struct Cached {
    size: u64,
    rounds: usize,
    pairs: u64,
}

impl PeerFn<f64> for Cached {
    fn call<P: Peer>(self, mut peer: P) -> f64 {
        for _ in 0..10_000 {
            pair(&mut peer, self.size);
        }
        let v = (0..self.rounds)
            .map(|_| {
                let d = time_pairs(&mut peer, self.size, self.pairs);
                d.as_nanos() as f64 / self.pairs as f64
            })
            .collect();
        median(v)
    }
}

/// Workload (b) on a fresh peer: `(time, reserved peak, reserved after the drain)`.
struct TraceRun<'a>(&'a Trace);

impl PeerFn<(Duration, Option<u64>, Option<u64>)> for TraceRun<'_> {
    fn call<P: Peer>(self, mut peer: P) -> (Duration, Option<u64>, Option<u64>) {
        let d = run_trace(&mut peer, self.0);
        (d, peer.reserved_peak(), peer.reserved_now())
    }
}

fn mib(b: u64) -> String {
    format!("{:.1}", b as f64 / MIB as f64)
}

fn main() {
    let args = parse_args();
    let sizes = [4 * 1024, 2 * MIB];
    let spec = TraceSpec::ISSUE_2;
    let trace = Trace::generate(&spec);
    println!(
        "trace (b): {} ops ({} random + {} drain), {} malloc+free pairs, seed {:#x}; \
         live requested peak {} MiB (lower bound), mean size {:.2} MiB",
        trace.ops.len(),
        spec.ops,
        trace.ops.len() - spec.ops,
        trace.allocs,
        spec.seed,
        mib(trace.live_peak_bytes),
        trace.requested_bytes as f64 / trace.allocs as f64 / MIB as f64
    );
    println!(
        "(a): median of {} rounds x {} pairs after 10k warm-up; (b): median of {} runs, \
         each on a fresh allocator\n",
        args.rounds, args.pairs, args.trace_runs
    );

    struct Row {
        kind: PeerKind,
        a: Vec<f64>,
        b_ns: f64,
        b_peak: Option<u64>,
        b_after: Option<u64>,
    }
    let mut rows = Vec::new();
    for kind in PeerKind::ALL {
        let a: Vec<f64> = sizes
            .iter()
            .map(|&size| {
                with_peer(
                    kind,
                    Cached {
                        size,
                        rounds: args.rounds,
                        pairs: args.pairs,
                    },
                )
            })
            .collect();
        let mut times = Vec::new();
        let mut peak = None;
        let mut after = None;
        for _ in 0..args.trace_runs {
            let (d, p, n) = with_peer(kind, TraceRun(&trace));
            times.push(d.as_nanos() as f64 / trace.allocs as f64);
            if let Some(prev) = peak {
                assert_eq!(Some(prev), p, "{}: peak differs between runs", kind.label());
            }
            peak = p;
            after = n;
        }
        let b_ns = median(times);
        eprintln!(
            "  measured {:<30} a: {:>8.1} / {:>8.1} ns  b: {:>8.1} ns",
            kind.label(),
            a[0],
            a[1],
            b_ns
        );
        rows.push(Row {
            kind,
            a,
            b_ns,
            b_peak: peak,
            b_after: after,
        });
    }

    let base = &rows[0];
    let (base_a, base_b, base_peak) = (base.a.clone(), base.b_ns, base.b_peak.unwrap());
    let ratio = |x: f64, b: f64| format!("{:.2}x", x / b);
    println!(
        "| peer | (a) 4 KiB ns/pair | ratio | (a) 2 MiB ns/pair | ratio | (b) trace ns/pair \
         | ratio | (b) reserved peak MiB | ratio | peak / live peak | reserved after drain MiB |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let (peak, pr, pl, after) = match r.b_peak {
            Some(p) => (
                mib(p),
                ratio(p as f64, base_peak as f64),
                format!("{:.2}", p as f64 / trace.live_peak_bytes as f64),
                mib(r.b_after.unwrap_or(0)),
            ),
            None => ("n/a".into(), "-".into(), "-".into(), "n/a".into()),
        };
        println!(
            "| {} | {:.1} | {} | {:.1} | {} | {:.1} | {} | {} | {} | {} | {} |",
            r.kind.label(),
            r.a[0],
            ratio(r.a[0], base_a[0]),
            r.a[1],
            ratio(r.a[1], base_a[1]),
            r.b_ns,
            ratio(r.b_ns, base_b),
            peak,
            pr,
            pl,
            after
        );
    }
    println!(
        "| trace live-bytes peak (lower bound) | | | | | | | {} | {} | 1.00 | |",
        mib(trace.live_peak_bytes),
        ratio(trace.live_peak_bytes as f64, base_peak as f64)
    );
    println!("\nratios: peer / memreuse over the mock (no backing, no race detector).");

    // Issue-2 target: memreuse >= 2x faster than cubecl's fastest configuration, and a
    // lower reserved peak than its most memory-efficient one.
    let cubecl: Vec<&Row> = rows
        .iter()
        .filter(|r| matches!(r.kind, PeerKind::CubeclExclusive | PeerKind::CubeclAdaptive))
        .collect();
    let labels = ["(a) 4 KiB", "(a) 2 MiB"];
    for (i, label) in labels.iter().enumerate() {
        let best = cubecl.iter().map(|r| r.a[i]).fold(f64::INFINITY, f64::min);
        println!(
            "target {label}: fastest cubecl {best:.1} ns vs memreuse/mock {:.1} ns -> {:.2}x ({})",
            base_a[i],
            best / base_a[i],
            if best / base_a[i] >= 2.0 {
                "met"
            } else {
                "NOT met"
            }
        );
    }
    let best_b = cubecl.iter().map(|r| r.b_ns).fold(f64::INFINITY, f64::min);
    println!(
        "target (b) speed: fastest cubecl {best_b:.1} ns vs memreuse/mock {base_b:.1} ns -> {:.2}x ({})",
        best_b / base_b,
        if best_b / base_b >= 2.0 {
            "met"
        } else {
            "NOT met"
        }
    );
    let best_peak = cubecl.iter().filter_map(|r| r.b_peak).min().unwrap();
    println!(
        "target (b) peak: most memory-efficient cubecl {} MiB vs memreuse/mock {} MiB ({})",
        mib(best_peak),
        mib(base_peak),
        if base_peak < best_peak {
            "met"
        } else {
            "NOT met"
        }
    );
}
