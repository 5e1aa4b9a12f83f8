//! Fuzzing `MEMREUSE_ALLOC_CONF` on the stable toolchain: strings built from the
//! syntax's own tokens (keys, separators, lists, numbers at and past every bound,
//! leading zeros, huge values) always parse to a configuration or a typed error, never a
//! panic, and an accepted configuration satisfies every documented bound.
//!
//! Fixed seed, fixed case count: `MEMREUSE_FUZZ_CASES` (default 256).

use memreuse_core::allocator::AllocatorConfig;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

const SEED: [u8; 32] = *b"memreuse-issue-12-allocconf-0001";

fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "max_split_size_mb",
            "garbage_collection_threshold",
            "roundup_power2_divisions",
            "per_process_memory_fraction",
            "lazy_reclaim",
            "expandable_segments",
            "expandable_segments_trim",
            ":",
            ",",
            "[",
            "]",
            ">",
            " ",
            "0",
            "00",
            "020",
            "1",
            "2",
            "4",
            "16",
            "20",
            "64",
            "128",
            "256",
            "0.5",
            "1.0",
            "NaN",
            "inf",
            "-1",
            "+1",
            "True",
            "False",
            "18446744073709551615",
            "18446744073709551616",
        ])
        .prop_map(str::to_owned),
        "[0-9]{1,25}",
        "\\PC{0,8}",
    ]
}

#[test]
fn alloc_conf_strings_parse_or_fail_with_a_typed_error() {
    let cases = std::env::var("MEMREUSE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &SEED));
    let result = runner.run(&prop::collection::vec(token(), 0..24), |tokens| {
        let text = tokens.concat();
        match AllocatorConfig::parse(&text) {
            Ok(c) => {
                prop_assert!(
                    c.roundup_power2_divisions
                        .iter()
                        .all(|&d| d == 0 || (d.is_power_of_two() && d <= 64)),
                    "{text:?}: {c:?}"
                );
                prop_assert!(
                    c.garbage_collection_threshold
                        .is_none_or(|t| t > 0.0 && t < 1.0),
                    "{text:?}: {c:?}"
                );
                prop_assert!(
                    c.per_process_memory_fraction
                        .is_none_or(|f| f > 0.0 && f <= 1.0),
                    "{text:?}: {c:?}"
                );
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
