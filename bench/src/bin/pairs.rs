//! Runs one peer alone, for profilers (perf, callgrind):
//! `pairs <peer-id> <size-bytes|trace> [pairs]`, e.g. `pairs memreuse_mock 4096 1000000`.
//! Peer ids: memreuse_mock, memreuse_manual, cubecl_exclusive, cubecl_adaptive, glibc.

use memreuse_bench::{Peer, PeerFn, PeerKind, Trace, TraceSpec, run_trace, time_pairs, with_peer};

struct Job {
    size: Option<u64>,
    n: u64,
}

impl PeerFn<()> for Job {
    fn call<P: Peer>(self, mut peer: P) {
        match self.size {
            Some(size) => {
                time_pairs(&mut peer, size, 1000);
                let d = time_pairs(&mut peer, size, self.n);
                println!("{:.1} ns/pair", d.as_nanos() as f64 / self.n as f64);
            }
            None => {
                let trace = Trace::generate(&TraceSpec {
                    ops: self.n as usize,
                    ..TraceSpec::ISSUE_2
                });
                let d = run_trace(&mut peer, &trace);
                println!(
                    "{:.1} ns/pair, reserved peak {:?}",
                    d.as_nanos() as f64 / trace.allocs as f64,
                    peer.reserved_peak()
                );
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let kind = PeerKind::ALL
        .into_iter()
        .find(|k| Some(k.id()) == args.first().map(String::as_str))
        .expect("first argument: a peer id");
    let size = match args.get(1).map(String::as_str) {
        Some("trace") => None,
        Some(s) => Some(s.parse().expect("size in bytes")),
        None => Some(4096),
    };
    let n = args.get(2).map_or(1_000_000, |s| s.parse().expect("count"));
    with_peer(kind, Job { size, n });
}
