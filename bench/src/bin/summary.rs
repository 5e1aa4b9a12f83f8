//! Prints the comparison table: wall and CPU ns per malloc+free pair for workloads (a) and
//! (b), reserved peaks for (b), CPU-time ratios against memreuse over the mock device, and
//! the issue-14 targets against cubecl ExclusivePages.
//!
//! `cargo run --release --bin summary [-- --rounds N --trace-runs N --pairs N]`

use memreuse_bench::{
    MIB, Peer, PeerFn, PeerKind, Timing, Trace, TraceSpec, pair, run_trace, time_pairs, with_peer,
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

/// Workload (a): median `(wall, CPU)` ns/pair over `rounds` rounds of `pairs` pairs, after
/// a warm-up.
struct Cached {
    size: u64,
    rounds: usize,
    pairs: u64,
}

impl PeerFn<(f64, f64)> for Cached {
    fn call<P: Peer>(self, mut peer: P) -> (f64, f64) {
        for _ in 0..10_000 {
            pair(&mut peer, self.size);
        }
        let (wall, cpu): (Vec<f64>, Vec<f64>) = (0..self.rounds)
            .map(|_| {
                let d = time_pairs(&mut peer, self.size, self.pairs);
                (
                    d.wall.as_nanos() as f64 / self.pairs as f64,
                    d.cpu.as_nanos() as f64 / self.pairs as f64,
                )
            })
            .unzip();
        (median(wall), median(cpu))
    }
}

/// Workload (b) on a fresh peer: `(time, reserved peak, reserved after the drain)`.
struct TraceRun<'a>(&'a Trace);

impl PeerFn<(Timing, Option<u64>, Option<u64>)> for TraceRun<'_> {
    fn call<P: Peer>(self, mut peer: P) -> (Timing, Option<u64>, Option<u64>) {
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
         each on a fresh allocator; CPU = CLOCK_PROCESS_CPUTIME_ID\n",
        args.rounds, args.pairs, args.trace_runs
    );

    struct Row {
        kind: PeerKind,
        /// `(wall, cpu)` ns per pair for each size of (a).
        a: Vec<(f64, f64)>,
        b: (f64, f64),
        b_peak: Option<u64>,
        b_after: Option<u64>,
    }
    let mut rows = Vec::new();
    for kind in PeerKind::ALL {
        let a: Vec<(f64, f64)> = sizes
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
        let (mut walls, mut cpus) = (Vec::new(), Vec::new());
        let mut peak = None;
        let mut after = None;
        for _ in 0..args.trace_runs {
            let (d, p, n) = with_peer(kind, TraceRun(&trace));
            walls.push(d.wall.as_nanos() as f64 / trace.allocs as f64);
            cpus.push(d.cpu.as_nanos() as f64 / trace.allocs as f64);
            if let Some(prev) = peak {
                assert_eq!(Some(prev), p, "{}: peak differs between runs", kind.label());
            }
            peak = p;
            after = n;
        }
        let b = (median(walls), median(cpus));
        eprintln!(
            "  measured {:<40} a: {:>8.1} / {:>8.1} ns CPU  b: {:>8.1} ns CPU",
            kind.label(),
            a[0].1,
            a[1].1,
            b.1
        );
        rows.push(Row {
            kind,
            a,
            b,
            b_peak: peak,
            b_after: after,
        });
    }

    let base = &rows[0];
    let (base_a, base_b, base_peak) = (base.a.clone(), base.b, base.b_peak.unwrap());
    let ratio = |x: f64, b: f64| format!("{:.2}x", x / b);
    println!(
        "| peer | (a) 4 KiB wall ns | CPU ns | CPU ratio | (a) 2 MiB wall ns | CPU ns | CPU ratio \
         | (b) trace wall ns | CPU ns | CPU ratio | (b) reserved peak MiB | ratio \
         | peak / live peak | reserved after drain MiB |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let (peak, pr, pl, after) = match r.b_peak {
            Some(p) => (
                mib(p),
                ratio(p as f64, base_peak as f64),
                format!("{:.2}", p as f64 / trace.live_peak_bytes as f64),
                r.b_after.map_or("n/a".into(), mib),
            ),
            None => ("n/a".into(), "-".into(), "-".into(), "n/a".into()),
        };
        println!(
            "| {} | {:.1} | {:.1} | {} | {:.1} | {:.1} | {} | {:.1} | {:.1} | {} | {} | {} | {} | {} |",
            r.kind.label(),
            r.a[0].0,
            r.a[0].1,
            ratio(r.a[0].1, base_a[0].1),
            r.a[1].0,
            r.a[1].1,
            ratio(r.a[1].1, base_a[1].1),
            r.b.0,
            r.b.1,
            ratio(r.b.1, base_b.1),
            peak,
            pr,
            pl,
            after
        );
    }
    println!(
        "| trace live-bytes peak (lower bound) | | | | | | | | | | {} | {} | 1.00 | |",
        mib(trace.live_peak_bytes),
        ratio(trace.live_peak_bytes as f64, base_peak as f64)
    );
    println!("\nratios: peer / memreuse over the mock (no backing, no race detector), CPU time.");

    // Issue-14 targets, CPU time in the same run: memreuse <= 0.5x cubecl ExclusivePages on
    // the cached 4 KiB pair and on the trace.
    let cubecl = rows
        .iter()
        .find(|r| r.kind == PeerKind::CubeclExclusive)
        .expect("cubecl ExclusivePages row");
    let verdict = |x: f64| if x <= 0.5 { "met" } else { "NOT met" };
    let r4 = base_a[0].1 / cubecl.a[0].1;
    println!(
        "target (a) 4 KiB: memreuse/mock {:.1} ns CPU vs cubecl ExclusivePages {:.1} ns -> {r4:.2}x (<= 0.5x: {})",
        base_a[0].1,
        cubecl.a[0].1,
        verdict(r4)
    );
    let rb = base_b.1 / cubecl.b.1;
    println!(
        "target (b) trace: memreuse/mock {:.1} ns CPU vs cubecl ExclusivePages {:.1} ns -> {rb:.2}x (<= 0.5x: {})",
        base_b.1,
        cubecl.b.1,
        verdict(rb)
    );
    println!(
        "reserved peak (b): memreuse/mock {} MiB (issue 14: must stay 3676.0)",
        mib(base_peak)
    );
}
