//! The program of README's "Use it as a library", verbatim between this header and the
//! test module at the end (`tests/readme_example.rs` checks that they are equal; `cargo
//! test` runs the test below). Written from the README alone:
//! `cargo run --example two_streams_and_a_group`.

use std::sync::Arc;
use std::time::Duration;

use memreuse::comm::{read_f64, write_f64};
use memreuse::{
    AllocatorConfig, Backend, BackendOptions, CachingAllocator, CommBuffer, DType, ProcessGroup,
    RankEndpoint, ReduceOp, ReuseMode, WorldOptions,
};

type Error = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), Error> {
    // Two ranks of the mock device in this process ("cuda" or "ascend" with their
    // cargo features: one GPU/NPU per rank).
    let options = WorldOptions {
        world_size: 2,
        backend: BackendOptions::default(),
        timeout: Duration::from_secs(30),
    };
    let ranks = memreuse::open_world("mock", &options)?;
    let results = std::thread::scope(|scope| {
        let threads: Vec<_> = ranks
            .into_iter()
            .map(|endpoint| scope.spawn(move || rank_main(endpoint)))
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("rank thread"))
            .collect::<Result<Vec<Vec<f64>>, Error>>()
    })?;
    // Rank 0 contributed 1.0, rank 1 contributed 2.0: every element is their sum.
    assert_eq!(results, [vec![3.0; 4], vec![3.0; 4]]);
    Ok(())
}

fn rank_main(endpoint: RankEndpoint) -> Result<Vec<f64>, Error> {
    let device = endpoint.backend;
    // The user's settings, read as PyTorch reads them (MEMREUSE_ALLOC_CONF, then
    // PYTORCH_ALLOC_CONF, then this backend's PYTORCH_*_ALLOC_CONF); defaults when unset.
    let config = AllocatorConfig::from_env_for_backend(device.name())?;
    let allocator = CachingAllocator::try_new(Arc::new(device.clone()), config)?;
    let compute = device.default_stream();
    let side = device.create_stream()?;
    let pg = ProcessGroup::builder(Arc::clone(&allocator), endpoint.communicator)
        .mode(ReuseMode::from_number(2)?) // or "2".parse()?; unset: MULTI_STREAM_MEMORY_REUSE
        .build()?;

    // Four bf16 gradients produced on the side stream (its pool serves this block)...
    let size = DType::BF16.size_bytes();
    let t = allocator.allocate(4 * size, &side)?;
    let value = if endpoint.rank == 0 { 1.0 } else { 2.0 };
    let mut bytes = vec![0u8; t.requested_size() as usize];
    for element in bytes.chunks_exact_mut(size as usize) {
        write_f64(DType::BF16, value, element);
    }
    device.copy_host_to_device(t.ptr(), &bytes, &side)?;
    // ...and used on the compute stream: order compute after side, and tell the allocator,
    // so that freeing `t` waits for compute's work too.
    let produced = device.create_event()?;
    device.record_event(&produced, &side)?;
    device.stream_wait_event(&compute, &produced)?;
    allocator.record_stream(&t, &compute);

    // Asynchronous bf16 all_reduce (a plain `&t` would be f32): the group's comm stream
    // waits for compute first; wait() makes compute wait for the collective, then mode 2
    // releases the work's shelf.
    let work = pg.all_reduce(
        CommBuffer::new(&t, DType::BF16),
        ReduceOp::Sum,
        &compute,
        true,
    )?;
    work.wait(&compute)?;

    let mut out = vec![0u8; bytes.len()];
    device.copy_device_to_host(&mut out, t.ptr(), &compute)?;
    let stats = allocator.stats();
    println!(
        "rank {}: reserved {} B, record_stream calls {}, works {}",
        endpoint.rank,
        stats.reserved_bytes.current,
        stats.record_stream_calls,
        pg.stats().works_issued
    );
    Ok(out
        .chunks_exact(size as usize)
        .map(|c| read_f64(DType::BF16, c))
        .collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_readme_program_runs_and_reduces_on_both_ranks() {
        super::main().expect("the README program");
    }
}
