//! The race-checking adaptor's cost per device operation: the same loop of
//! `memset_zero` + `copy_device_to_device` + event record/wait on two streams, on a bare
//! `ManualBackend` and behind `RaceChecker`. Run it under callgrind for instruction counts
//! (the machine is shared, wall time is noisy):
//!
//! ```sh
//! cargo build --release -p memreuse-core --example race_overhead
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/race_overhead bare 20000
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/race_overhead checked 20000
//! ```
//!
//! The difference of the two totals divided by `4 * N` device calls is the adaptor's
//! cost per call. Without arguments it prints wall-clock ns per call for both.

use std::time::Instant;

use memreuse_core::Backend;
use memreuse_core::race::RaceChecker;
use memreuse_core::testing::ManualBackend;

fn workload<B: Backend>(b: &B, n: u64) {
    let s0 = b.default_stream();
    let s1 = b.create_stream().expect("stream");
    let p = b.malloc(1 << 20).expect("malloc");
    let ev = b.create_event().expect("event");
    for i in 0..n {
        let off = (i % 64) * 4096;
        b.memset_zero(p.offset(off), 4096, &s0).expect("memset");
        b.record_event(&ev, &s0).expect("record");
        b.stream_wait_event(&s1, &ev).expect("wait");
        b.copy_device_to_device(p.offset(512 * 1024 + off), p.offset(off), 4096, &s1)
            .expect("copy");
        // Offsets wrap every 64 iterations: the host waits before s0 rewrites what s1 read.
        if i % 64 == 63 {
            b.synchronize_device().expect("sync");
        }
    }
    b.synchronize_device().expect("sync");
    b.free(p).expect("free");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(200_000);
    let bare = || ManualBackend::new(1 << 30);
    match args.get(1).map(String::as_str) {
        Some("bare") => workload(&bare(), n),
        Some("checked") => {
            let b = RaceChecker::standalone(bare());
            workload(&b, n);
            let races = b.race_reports().unwrap_or_default();
            assert!(
                races.is_empty(),
                "{} races, first: {}",
                races.len(),
                races[0]
            );
        }
        _ => {
            for name in ["bare", "checked"] {
                let t = Instant::now();
                if name == "bare" {
                    workload(&bare(), n);
                } else {
                    workload(&RaceChecker::standalone(bare()), n);
                }
                let ns = t.elapsed().as_nanos() as f64 / (4 * n) as f64;
                println!("{name:8} {ns:8.1} ns per device call ({n} iterations of 4 calls)");
            }
        }
    }
}
