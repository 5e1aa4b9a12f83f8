//! `MEMREUSE_ALLOC_CONF` parsing (rule 9), as a pure function: no environment variables.

use memreuse_core::AllocatorConfig;
use memreuse_core::allocator::{ConfigError, ROUNDUP_INTERVALS};

const MIB: u64 = 1 << 20;

#[test]
fn empty_and_whitespace_give_defaults() {
    assert_eq!(
        AllocatorConfig::parse("").unwrap(),
        AllocatorConfig::default()
    );
    assert_eq!(
        AllocatorConfig::parse("  \t ").unwrap(),
        AllocatorConfig::default()
    );
    let d = AllocatorConfig::default();
    assert_eq!(d.max_split_size, u64::MAX);
    assert!(!d.lazy_reclaim);
    assert_eq!(
        (
            d.per_process_memory_fraction,
            d.garbage_collection_threshold
        ),
        (None, None)
    );
}

#[test]
fn every_key_parses() {
    let c = AllocatorConfig::parse(
        " max_split_size_mb : 64 ,per_process_memory_fraction:0.75,garbage_collection_threshold:0.6,\
         roundup_power2_divisions:[1:2,4:8,>:16],lazy_reclaim:True,expandable_segments:True",
    )
    .unwrap();
    assert!(c.expandable_segments);
    assert!(!AllocatorConfig::default().expandable_segments);
    assert_eq!(
        AllocatorConfig::parse("expandable_segments:maybe").unwrap_err(),
        ConfigError::BadValue {
            key: "expandable_segments".into(),
            value: "maybe".into(),
            expected: "True, False, true, false, 1 or 0",
        }
    );
    assert_eq!(c.max_split_size, 64 * MIB);
    assert_eq!(c.per_process_memory_fraction, Some(0.75));
    assert_eq!(c.garbage_collection_threshold, Some(0.6));
    assert!(c.lazy_reclaim);
    let mut want = [0u64; ROUNDUP_INTERVALS];
    want[0] = 2; // 1 MiB interval; index 1 (2 MiB) is not named and keeps plain rounding
    want[2] = 8;
    want[3..].fill(16);
    assert_eq!(c.roundup_power2_divisions, want);
    for (v, b) in [
        ("true", true),
        ("1", true),
        ("False", false),
        ("false", false),
        ("0", false),
    ] {
        assert_eq!(
            AllocatorConfig::parse(&format!("lazy_reclaim:{v}"))
                .unwrap()
                .lazy_reclaim,
            b
        );
    }
    assert_eq!(
        AllocatorConfig::parse("roundup_power2_divisions:4")
            .unwrap()
            .roundup_power2_divisions,
        [4; ROUNDUP_INTERVALS]
    );
    assert_eq!(
        AllocatorConfig::parse("per_process_memory_fraction:1")
            .unwrap()
            .per_process_memory_fraction,
        Some(1.0)
    );
}

fn err(s: &str) -> ConfigError {
    AllocatorConfig::parse(s).expect_err(s)
}

#[test]
fn unknown_key_is_named() {
    let e = err("max_split_size_mb:32,expandable_segment:True");
    assert_eq!(
        e,
        ConfigError::UnknownKey {
            key: "expandable_segment".into()
        }
    );
    let msg = e.to_string();
    assert!(
        msg.contains("expandable_segment`") && msg.contains("max_split_size_mb"),
        "{msg}"
    );
}

#[test]
fn bad_numbers_name_the_key() {
    for (s, key) in [
        ("max_split_size_mb:abc", "max_split_size_mb"),
        ("max_split_size_mb:1.5", "max_split_size_mb"),
        ("max_split_size_mb:", "max_split_size_mb"),
        (
            "per_process_memory_fraction:half",
            "per_process_memory_fraction",
        ),
        (
            "garbage_collection_threshold:x,per_process_memory_fraction:0.5",
            "garbage_collection_threshold",
        ),
        ("roundup_power2_divisions:four", "roundup_power2_divisions"),
        // One spelling per number: no leading zeros, signs or spaces.
        ("max_split_size_mb:020", "max_split_size_mb"),
        ("max_split_size_mb:+20", "max_split_size_mb"),
        ("roundup_power2_divisions:04", "roundup_power2_divisions"),
    ] {
        match err(s) {
            ConfigError::BadNumber { key: k, .. } => assert_eq!(k, key, "{s}"),
            other => panic!("{s}: expected BadNumber, got {other:?}"),
        }
        assert!(err(s).to_string().contains(key));
    }
}

#[test]
fn out_of_range_values_say_what_is_valid() {
    for (s, key) in [
        ("max_split_size_mb:19", "max_split_size_mb"),
        (
            "max_split_size_mb:18446744073709551615",
            "max_split_size_mb",
        ),
        (
            "per_process_memory_fraction:0",
            "per_process_memory_fraction",
        ),
        (
            "per_process_memory_fraction:1.5",
            "per_process_memory_fraction",
        ),
        (
            "per_process_memory_fraction:NaN",
            "per_process_memory_fraction",
        ),
        (
            "garbage_collection_threshold:1,per_process_memory_fraction:0.5",
            "garbage_collection_threshold",
        ),
        (
            "garbage_collection_threshold:0,per_process_memory_fraction:0.5",
            "garbage_collection_threshold",
        ),
        ("roundup_power2_divisions:3", "roundup_power2_divisions"),
        ("roundup_power2_divisions:128", "roundup_power2_divisions"),
        ("roundup_power2_divisions:[3:2]", "roundup_power2_divisions"),
        // Repeated, unordered, or anything after `>`: one reading only.
        (
            "roundup_power2_divisions:[1:2,1:4]",
            "roundup_power2_divisions",
        ),
        (
            "roundup_power2_divisions:[512:2,256:1]",
            "roundup_power2_divisions",
        ),
        (
            "roundup_power2_divisions:[>:4,256:1]",
            "roundup_power2_divisions",
        ),
        (
            "roundup_power2_divisions:[256:1,>:4,>:8]",
            "roundup_power2_divisions",
        ),
    ] {
        match err(s) {
            ConfigError::OutOfRange { key: k, valid, .. } => {
                assert_eq!(k, key, "{s}");
                assert!(!valid.is_empty());
            }
            other => panic!("{s}: expected OutOfRange, got {other:?}"),
        }
    }
    assert!(
        err("max_split_size_mb:19")
            .to_string()
            .contains("at least 20")
    );
}

#[test]
fn empty_pieces_are_errors() {
    assert_eq!(
        err("max_split_size_mb:32,,lazy_reclaim:1"),
        ConfigError::EmptyPiece {
            after: Some("max_split_size_mb".into())
        }
    );
    assert_eq!(
        err("lazy_reclaim:1,"),
        ConfigError::EmptyPiece {
            after: Some("lazy_reclaim".into())
        }
    );
    assert_eq!(
        err(",lazy_reclaim:1"),
        ConfigError::EmptyPiece { after: None }
    );
    assert!(
        err("max_split_size_mb:32,,lazy_reclaim:1")
            .to_string()
            .contains("after key `max_split_size_mb`")
    );
}

#[test]
fn missing_colon_names_the_piece() {
    assert_eq!(
        err("lazy_reclaim"),
        ConfigError::MissingColon {
            key: "lazy_reclaim".into()
        }
    );
    assert_eq!(
        err("max_split_size_mb=32"),
        ConfigError::MissingColon {
            key: "max_split_size_mb=32".into()
        }
    );
}

#[test]
fn duplicate_keys_and_bad_values() {
    assert_eq!(
        err("lazy_reclaim:1,lazy_reclaim:0"),
        ConfigError::DuplicateKey {
            key: "lazy_reclaim".into()
        }
    );
    assert!(
        matches!(err("lazy_reclaim:yes"), ConfigError::BadValue { key, .. } if key == "lazy_reclaim")
    );
    assert!(
        matches!(err("roundup_power2_divisions:[1:2"), ConfigError::BadValue { key, .. } if key == "roundup_power2_divisions")
    );
    assert!(
        matches!(err("roundup_power2_divisions:[1-2]"), ConfigError::BadValue { key, .. } if key == "roundup_power2_divisions")
    );
}

#[test]
fn gc_threshold_requires_a_memory_fraction() {
    assert_eq!(
        err("garbage_collection_threshold:0.5"),
        ConfigError::Requires {
            key: "garbage_collection_threshold".into(),
            requires: "per_process_memory_fraction"
        }
    );
}

#[test]
fn error_messages_cut_huge_values_and_keys() {
    let huge = "9".repeat(100_000);
    for conf in [
        format!("max_split_size_mb:{huge}x"),
        format!("{huge}:1"),
        format!("lazy_reclaim:{huge}"),
        huge.clone(),
        format!("garbage_collection_threshold:0.{huge}9x"),
    ] {
        let err = memreuse_core::AllocatorConfig::parse(&conf).expect_err("invalid");
        let msg = err.to_string();
        assert!(msg.len() < 600, "{} bytes: {}", msg.len(), &msg[..200]);
        assert!(
            msg.contains("100"),
            "the message gives the cut value's length: {msg}"
        );
    }
}

#[test]
fn expandable_segments_on_a_backend_without_virtual_memory_is_refused_naming_it() {
    use memreuse_core::allocator::CachingAllocator;
    use memreuse_core::testing::ManualBackend;
    use std::sync::Arc;
    let backend = Arc::new(ManualBackend::new(1 << 30).without_virtual_memory());
    let cfg = AllocatorConfig::parse("expandable_segments:True").unwrap();
    let e = CachingAllocator::try_new(Arc::clone(&backend), cfg.clone()).unwrap_err();
    assert!(
        matches!(&e, ConfigError::Unsupported { key: "expandable_segments", backend: b, .. } if b.as_str() == memreuse_core::Backend::name(&*backend)),
        "{e:?}"
    );
    assert!(e.to_string().contains("virtual_memory"), "{e}");
    // The lenient constructor falls back to ordinary segments, as PyTorch does.
    let a = CachingAllocator::new(Arc::clone(&backend), cfg);
    assert!(!a.config().expandable_segments);
    // Without the key both constructors agree.
    assert!(CachingAllocator::try_new(backend, AllocatorConfig::default()).is_ok());
}
