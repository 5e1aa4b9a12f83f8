//! The "eight-then-four" pattern on a 200 MiB mock, with and without expandable
//! segments: eight 16 MiB tensors allocated and freed, then four 32 MiB tensors. Prints
//! peak reserved, peak allocated and the device calls of each configuration.
//!
//! `cargo run -p memreuse-mock --example eight_then_four`

use std::sync::Arc;

use memreuse_core::Backend;
use memreuse_core::allocator::{AllocError, AllocatorConfig, CachingAllocator};
use memreuse_mock::{MockConfig, MockDevice};

const MIB: u64 = 1 << 20;

fn run(conf: &str) -> Result<(), AllocError> {
    let dev = MockDevice::new(MockConfig::with_capacity(200 * MIB)).expect("mock device");
    let config = AllocatorConfig::parse(conf).expect("valid configuration");
    let alloc = CachingAllocator::try_new(Arc::new(dev.clone()), config).expect("supported");
    let s = dev.default_stream();
    let eight: Vec<_> = (0..8)
        .map(|_| alloc.allocate(16 * MIB, &s))
        .collect::<Result<_, _>>()?;
    drop(eight);
    let four: Vec<_> = (0..4)
        .map(|_| alloc.allocate(32 * MIB, &s))
        .collect::<Result<_, _>>()?;
    let st = alloc.stats();
    println!(
        "{:<62} peak reserved {:>4} MiB  peak allocated {:>4} MiB  ratio {:.2}  \
         device allocs {:>2}  frees {:>2}  maps {:>3}  unmaps {:>3}  retries {}",
        if conf.is_empty() { "(defaults)" } else { conf },
        st.reserved_bytes.peak / MIB,
        st.allocated_bytes.peak / MIB,
        st.reserved_bytes.peak as f64 / st.allocated_bytes.peak as f64,
        st.num_device_alloc,
        st.num_device_free,
        st.num_device_map,
        st.num_device_unmap,
        st.num_alloc_retries,
    );
    drop(four);
    Ok(())
}

fn main() {
    for conf in [
        "",
        "expandable_segments:True",
        "expandable_segments:True,expandable_segments_page_size_mb:2",
    ] {
        if let Err(e) = run(conf) {
            println!("{conf}: {e}");
        }
    }
}
