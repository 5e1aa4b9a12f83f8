//! The loop callgrind counts for issue 26's CPU figure: `MEMREUSE_SYNC_OPS` synchronous
//! all_reduces of 4 KiB on a one-rank mock world (race detector and watchdog off), on the
//! path `MEMREUSE_SYNC_PATH` names (`current-stream`, the default, or `comm-stream`, the
//! old path). Ignored in ordinary runs; instructions per all_reduce are
//! `(Ir(N2) - Ir(N1)) / (N2 - N1)`:
//!
//! ```text
//! cargo test --release -p memreuse --test sync_all_reduce_cost --no-run
//! MEMREUSE_SYNC_OPS=2000 valgrind --tool=callgrind target/release/deps/sync_all_reduce_cost-* \
//!     --ignored --exact sync_all_reduce_loop --test-threads 1
//! ```

use std::sync::Arc;

use memreuse::Backend;
use memreuse::allocator::{AllocatorConfig, CachingAllocator};
use memreuse::comm::ReduceOp;
use memreuse::mock::{MockConfig, open_mock_world};
use memreuse::process_group::{ProcessGroup, ReuseMode, SyncCollectives};

#[test]
#[ignore = "a measurement loop for callgrind, not a check"]
fn sync_all_reduce_loop() {
    let ops: usize = std::env::var("MEMREUSE_SYNC_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let path: SyncCollectives = std::env::var("MEMREUSE_SYNC_PATH")
        .ok()
        .map_or(Ok(SyncCollectives::default()), |v| v.parse())
        .expect("MEMREUSE_SYNC_PATH");
    let mode = std::env::var("MULTI_STREAM_MEMORY_REUSE")
        .ok()
        .map_or(Ok(ReuseMode::DEFAULT), |v| v.parse())
        .expect("MULTI_STREAM_MEMORY_REUSE");
    let mut config = MockConfig::with_capacity(64 << 20);
    config.race_detection = false;
    let (device, comm) = open_mock_world(1, config)
        .expect("mock world")
        .pop()
        .expect("one rank");
    let allocator = CachingAllocator::new(Arc::new(device.clone()), AllocatorConfig::default());
    let pg = ProcessGroup::builder(Arc::clone(&allocator), Box::new(comm))
        .mode(mode)
        .watchdog(None)
        .sync_collectives(path)
        .build()
        .expect("process group");
    let c = device.default_stream();
    let t = allocator.allocate(4096, &c).expect("tensor");
    for _ in 0..ops {
        pg.all_reduce(&t, ReduceOp::Sum, &c, false)
            .expect("all_reduce");
    }
    device.synchronize_device().expect("sync");
    drop(t);
    println!("{ops} synchronous all_reduces on the {path} path, mode {mode}");
}
