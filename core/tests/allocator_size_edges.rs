//! Sizes at the edges (issue 27 item 4): requests near 2^63 and 2^64 under every kind of
//! configuration, on a bounded and an unlimited device, end in memory or a typed
//! out-of-memory: no overflow panic (tests build with overflow checks), no wrapped figure,
//! and the allocator keeps serving ordinary requests.

mod common;

use common::{check_identities, setup_with};
use memreuse_core::AllocError;

const CONFIGS: [&str; 6] = [
    "",
    "expandable_segments:True",
    "expandable_segments:True,expandable_segments_trim:True",
    "roundup_power2_divisions:4",
    "max_split_size_mb:20",
    "per_process_memory_fraction:0.5,garbage_collection_threshold:0.5",
];

const SIZES: [u64; 9] = [
    u64::MAX,
    u64::MAX - 1,
    u64::MAX - (1 << 20),
    1 << 63,
    (1 << 63) - 1,
    (1 << 63) + 1,
    1 << 62,
    (1 << 45) + 3,
    (1 << 44) + 1,
];

#[test]
fn huge_requests_end_in_a_typed_oom_with_sane_figures() {
    for capacity in [u64::MAX, 1 << 40] {
        for conf in CONFIGS {
            let (_backend, alloc, [s0, s1, _]) = setup_with(capacity, conf);
            let keep = alloc.allocate(3 << 20, &s1).unwrap();
            for size in SIZES {
                match alloc.allocate(size, &s0) {
                    Ok(s) => assert!(s.size() >= size, "{conf} {capacity}: {size}"),
                    Err(AllocError::OutOfMemory(oom)) => {
                        assert_eq!(oom.requested, size);
                        assert!(
                            oom.device_total == capacity,
                            "{conf}: total {}",
                            oom.device_total
                        );
                        let _ = oom.to_string();
                    }
                    Err(e) => panic!("{conf} {capacity} {size}: {e}"),
                }
                let s = alloc.stats();
                check_identities(&s);
                assert!(
                    s.reserved_bytes.aggregate.current >= s.allocated_bytes.aggregate.current,
                    "{conf} {capacity} {size}: {s:?}"
                );
            }
            assert_eq!(alloc.allocate(1, &s0).unwrap().size(), 512, "{conf}");
            drop(keep);
        }
    }
}
