//! A tiny seeded generator shared by the mock's deterministic mode, the size traces of the
//! benchmarks, and anything else that needs the same choices from the same seed.
//!
//! `SplitMix64` is enough: reproducible choices, not statistical quality, and one local
//! generator keeps the workspace free of a `rand` version every crate would have to agree
//! on.

/// `SplitMix64` (Steele, Lea, Flood 2014): one `u64` of state, full period, the same
/// sequence on every platform.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose whole output is fixed by `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (`0` when `n` is 0); the modulo bias is irrelevant for picking
    /// among a handful of choices.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// Uniform in `[lo, hi]` (Lemire's multiply-shift; `lo <= hi`, else `lo`).
    pub fn range_inclusive(&mut self, lo: u64, hi: u64) -> u64 {
        let span = u128::from(hi.saturating_sub(lo)) + 1;
        lo + ((u128::from(self.next_u64()) * span) >> 64) as u64
    }

    /// Uniform in `[0, 1)` (53 bits).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `per_mille / 1000`.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.range_inclusive(0, 999) < per_mille
    }
}

#[cfg(test)]
mod tests {
    use super::SplitMix64;

    fn first(seed: u64) -> Vec<u64> {
        let mut r = SplitMix64::new(seed);
        (0..8).map(|_| r.next_u64()).collect()
    }

    #[test]
    fn same_seed_same_sequence_and_seeds_differ() {
        assert_eq!(first(7), first(7));
        assert_ne!(first(7), first(8));
        // The reference sequence for seed 0 (Vigna's splitmix64.c).
        assert_eq!(first(0)[0], 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn ranges_stay_in_bounds() {
        let mut r = SplitMix64::new(1);
        assert!((0..1000).all(|_| r.below(3) < 3));
        assert_eq!(r.below(0), 0);
        assert!((0..1000).all(|_| (5..=9).contains(&r.range_inclusive(5, 9))));
        assert_eq!(r.range_inclusive(4, 4), 4);
        assert!((0..1000).all(|_| (0.0..1.0).contains(&r.unit())));
        assert!(!(0..100).any(|_| r.chance(0)));
        assert!((0..100).all(|_| r.chance(1000)));
    }
}
