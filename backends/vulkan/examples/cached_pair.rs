//! The caching allocator's cached alloc/free pair over a Vulkan device, side by side with
//! the raw driver (`vkAllocateMemory` + `vkFreeMemory`) and with the backend's own
//! `malloc`/`free` (memory + buffer + mapping per allocation), for 4 KiB and 2 MiB.
//!
//! ```sh
//! VK_DRIVER_FILES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json \
//!   cargo run --release -p memreuse-vulkan --example cached_pair
//! ```
//!
//! Prints the median over 5 rounds of ns per pair and the ratio peer / memreuse.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use ash::vk;
use memreuse_core::Backend;
use memreuse_core::allocator::{AllocatorConfig, CachingAllocator};
use memreuse_vulkan::{DeviceConfig, VulkanDevice};

const ROUNDS: usize = 5;

/// Median ns per iteration of `f` run `n` times, over [`ROUNDS`] rounds.
fn median_ns(n: u32, mut f: impl FnMut()) -> f64 {
    let mut samples: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                f();
            }
            t.elapsed().as_nanos() as f64 / f64::from(n)
        })
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[ROUNDS / 2]
}

fn main() {
    let device = match VulkanDevice::open(&DeviceConfig::new(0)) {
        Ok(d) => Arc::new(d),
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    let facts = &device.context().facts;
    println!("device: {} (Vulkan {})", facts.name, facts.api_version);
    let alloc = CachingAllocator::new(Arc::clone(&device), AllocatorConfig::default());
    let stream = device.default_stream();
    let raw = device.raw();
    println!(
        "| size | memreuse cached pair | raw vkAllocateMemory+vkFreeMemory | backend malloc+free |"
    );
    println!("|---|---|---|---|");
    for (label, bytes) in [("4 KiB", 4u64 << 10), ("2 MiB", 2 << 20)] {
        // Warm the cache: the first allocation creates the segment.
        drop(alloc.allocate(bytes, &stream).expect("allocate"));
        let cached = median_ns(200_000, || {
            let s = alloc.allocate(bytes, &stream).expect("allocate");
            black_box(s.ptr());
        });
        let info = vk::MemoryAllocateInfo::default()
            .allocation_size(bytes)
            .memory_type_index(facts.memory_type);
        let driver = median_ns(5_000, || {
            // SAFETY: valid device and allocate info; the memory is freed at once, unused.
            unsafe {
                let m = raw
                    .device
                    .allocate_memory(&info, None)
                    .expect("vkAllocateMemory");
                raw.device.free_memory(black_box(m), None);
            }
        });
        let backend = median_ns(5_000, || {
            let p = device.malloc(bytes).expect("malloc");
            device.free(black_box(p)).expect("free");
        });
        println!(
            "| {label} | {cached:.1} ns (1.00x) | {driver:.1} ns ({:.1}x) | {backend:.1} ns ({:.1}x) |",
            driver / cached,
            backend / cached
        );
    }
}
