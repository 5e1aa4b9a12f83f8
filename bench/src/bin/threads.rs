//! Two threads on one allocator against two threads on two allocators: aggregate cached
//! 4 KiB pairs per second (wall clock), to see what the one allocator lock costs.
//!
//! `cargo run --release --bin threads [-- PAIRS_PER_THREAD]` (default 2,000,000). Needs an
//! idle machine with at least 2 free cores to show parallelism; on a loaded one the two
//! configurations converge and the figure says little (the CPU time is printed too).

use std::sync::Arc;
use std::time::Instant;

use memreuse_bench::{CAPACITY, cpu_time};
use memreuse_core::testing::ManualBackend;
use memreuse_core::{AllocatorConfig, Backend, CachingAllocator};

fn run(shared: bool, n: u64) -> (f64, f64) {
    let make = || {
        CachingAllocator::new(
            Arc::new(ManualBackend::new(CAPACITY)),
            AllocatorConfig::default(),
        )
    };
    let first = make();
    let allocators = [Arc::clone(&first), if shared { first } else { make() }];
    let (t0, c0) = (Instant::now(), cpu_time());
    std::thread::scope(|s| {
        for a in &allocators {
            s.spawn(move || {
                let stream = a.backend().default_stream();
                for _ in 0..n {
                    let st = a.allocate(4096, &stream).expect("allocate");
                    drop(std::hint::black_box(st));
                }
            });
        }
    });
    let (wall, cpu) = (t0.elapsed().as_secs_f64(), (cpu_time() - c0).as_secs_f64());
    ((2 * n) as f64 / wall, cpu)
}

fn main() {
    let n = std::env::args()
        .nth(1)
        .map_or(2_000_000, |s| s.parse().expect("pairs per thread"));
    for (label, shared) in [
        ("one allocator, 2 threads", true),
        ("two allocators, 1 thread each", false),
    ] {
        let (rate, cpu) = run(shared, n);
        println!(
            "{label}: {:.2} M pairs/s aggregate (wall), {cpu:.2} s CPU for {} pairs",
            rate / 1e6,
            2 * n
        );
    }
}
