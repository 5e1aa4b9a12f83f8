//! Runs one peer alone, for profilers (perf, callgrind):
//! `pairs <peer-id> <size-bytes|trace|recorded:FILE> [pairs]`, e.g. `pairs memreuse_mock 4096
//! 1000000` or `pairs rlsf recorded:../traces/gpt2-small.trace.gz`.
//! Peer ids: memreuse_mock, memreuse_manual, cubecl_exclusive, cubecl_adaptive, glibc;
//! diagnostics only (not in the table): memreuse_manual_traced (allocator trace ring buffer
//! on, `DEFAULT_TRACE_CAPACITY` entries; it is off by default), memreuse_mock_detector (the
//! mock with its race detector on, as tests run it; the table's mock has it off).

use memreuse_bench::{
    CAPACITY, Memreuse, Peer, PeerFn, PeerKind, Trace, TraceSpec, run_trace, time_pairs, with_peer,
};
use memreuse_core::AllocatorConfig;
use memreuse_core::allocator::DEFAULT_TRACE_CAPACITY;
use memreuse_core::testing::ManualBackend;
use memreuse_mock::{MockConfig, MockDevice};

struct Job {
    size: Option<u64>,
    n: u64,
    /// A recorded `memreuse.trace/1` file to replay instead of the synthetic trace.
    recorded: Option<String>,
}

impl PeerFn<()> for Job {
    fn call<P: Peer>(self, mut peer: P) {
        match self.size {
            Some(size) => {
                time_pairs(&mut peer, size, 1000);
                let d = time_pairs(&mut peer, size, self.n);
                println!(
                    "{:.1} ns/pair ({:.1} ns CPU)",
                    d.wall.as_nanos() as f64 / self.n as f64,
                    d.cpu.as_nanos() as f64 / self.n as f64
                );
            }
            None => {
                let trace = match &self.recorded {
                    Some(path) => memreuse_bench::read_recorded(path).expect("recorded trace"),
                    None => Trace::generate(&TraceSpec {
                        ops: self.n as usize,
                        ..TraceSpec::ISSUE_2
                    }),
                };
                let d = run_trace(&mut peer, &trace);
                println!(
                    "{} pairs: {:.1} ns/pair ({:.1} ns CPU), reserved peak {:?}",
                    trace.allocs,
                    d.wall.as_nanos() as f64 / trace.allocs as f64,
                    d.cpu.as_nanos() as f64 / trace.allocs as f64,
                    peer.reserved_peak()
                );
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let id = args.first().map_or("", String::as_str);
    let recorded = args
        .get(1)
        .and_then(|a| a.strip_prefix("recorded:"))
        .map(str::to_owned);
    let size = match args.get(1).map(String::as_str) {
        Some("trace") => None,
        Some(a) if a.starts_with("recorded:") => None,
        Some(s) => Some(s.parse().expect("size in bytes")),
        None => Some(4096),
    };
    let n = args.get(2).map_or(1_000_000, |s| s.parse().expect("count"));
    let job = Job { size, n, recorded };
    match id {
        "memreuse_manual_traced" => {
            let traced = AllocatorConfig::default().with_trace_capacity(DEFAULT_TRACE_CAPACITY);
            job.call(Memreuse::with_config(ManualBackend::new(CAPACITY), traced));
        }
        "memreuse_mock_detector" => {
            let config = MockConfig {
                backing: false,
                ..MockConfig::with_capacity(CAPACITY)
            };
            job.call(Memreuse::new(MockDevice::new(config).expect("mock device")));
        }
        _ => {
            let kind = PeerKind::ALL
                .into_iter()
                .find(|k| k.id() == id)
                .expect("first argument: a peer id");
            with_peer(kind, job);
        }
    }
}
