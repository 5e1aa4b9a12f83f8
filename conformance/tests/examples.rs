//! The public example schedules reproduce the digests and live peaks computed by an
//! independent implementation (docs/schedules.md, "Digest and live peak").
// Exact f32 equality is the point: reference results are bit-exact by construction.
#![allow(clippy::float_cmp)]

use memreuse_conformance::validate::load_str;

fn expect(file: &str, text: &str, digest: &str, live_peak: u64) {
    let valid = load_str(file, text).unwrap_or_else(|e| panic!("{file} must be valid: {e}"));
    assert_eq!(valid.reference.digest, digest, "{file} digest");
    assert_eq!(
        valid.reference.live_peak_bytes, live_peak,
        "{file} live_peak_bytes"
    );
}

#[test]
fn e1_copy_in_tests_data_reproduces_digest_and_live_peak() {
    let text = include_str!("data/e1-ddp-buckets.json");
    expect("e1-ddp-buckets.json", text, "9d15e2948ee6df12", 20480);
}

#[test]
fn e2_copy_in_tests_data_reproduces_digest_and_live_peak() {
    let text = include_str!("data/e2-p2p-batch.json");
    expect("e2-p2p-batch.json", text, "7698544667991271", 2048);
}

#[test]
fn e1_checks_hold_the_summed_buckets() {
    let valid = load_str("e1", include_str!("data/e1-ddp-buckets.json")).expect("valid");
    // Rank 0, body iteration 0, check of `sum` = b1 all-reduced over 2 ranks (seed 3).
    let c = &valid.reference.checks[0][0];
    let expect = |i: u64| -> f32 {
        (0..2u64)
            .map(|rank| ((3 * 1_000_003 + rank * 7919 + i * 31) % 251) as f32 - 125.0)
            .sum()
    };
    assert_eq!(c.tensor, "sum");
    assert_eq!(c.f32_values().len(), 1024);
    assert_eq!(c.f32_values()[5], expect(5));
    // 3 body checks + 1 teardown check per rank.
    assert_eq!(valid.reference.checks[1].len(), 4);
}
