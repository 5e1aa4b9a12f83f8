//! Size classes, rounding and split rules, exactly as PyTorch's `CUDACachingAllocator`.
//!
//! Every function saturates instead of overflowing: a request near `u64::MAX` rounds to
//! `u64::MAX`, which no device can provide, so it ends in a typed out-of-memory error rather
//! than a panic or a small wrapped size.

/// Smallest block handed out; every block size is a multiple of it.
pub const MIN_BLOCK_SIZE: u64 = 512;
/// Largest request served from the small pool (1 MiB).
pub const SMALL_SIZE: u64 = 1 << 20;
/// Segment size of the small pool (2 MiB).
pub const SMALL_BUFFER: u64 = 2 << 20;
/// Requests below this (10 MiB) get a [`LARGE_BUFFER`] segment.
pub const MIN_LARGE_ALLOC: u64 = 10 << 20;
/// Segment size for mid-sized large requests (20 MiB); also PyTorch's default
/// `max_non_split_rounding`.
pub const LARGE_BUFFER: u64 = 20 << 20;
/// Large requests of [`MIN_LARGE_ALLOC`] or more are rounded up to a multiple of this (2 MiB).
pub const ROUND_LARGE: u64 = 2 << 20;
/// Number of `roundup_power2_divisions` intervals: one per power of two from 1 MiB to 32 GiB
/// (the last one also covers everything above).
pub const ROUNDUP_INTERVALS: usize = 16;
/// An oversize request takes no cached block more than this many bytes larger than itself.
pub const MAX_NON_SPLIT_ROUNDING: u64 = LARGE_BUFFER;

/// Which pool a block belongs to.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub(crate) enum PoolKind {
    /// Blocks carved from 2 MiB segments, for requests of at most 1 MiB.
    Small,
    /// Everything else.
    Large,
}

/// The pool serving a (rounded) request of `size` bytes.
pub(crate) fn pool_for(size: u64) -> PoolKind {
    if size <= SMALL_SIZE {
        PoolKind::Small
    } else {
        PoolKind::Large
    }
}

/// The interval index of `size` for `roundup_power2_divisions` (PyTorch's
/// `roundup_power2_divisions(size)`): 0 for sizes below 2 MiB, then one per power of two.
pub(crate) fn roundup_interval(size: u64) -> usize {
    let log_size = 63 - u64::from(size.max(1).leading_zeros());
    let start = 20; // log2(1 MiB)
    (log_size.saturating_sub(start) as usize).min(ROUNDUP_INTERVALS - 1)
}

/// PyTorch's `roundup_power2_next_division`: rounds `size` up to the next of `divisions`
/// equal steps between the two powers of two around it.
fn roundup_power2_next_division(size: u64, divisions: u64) -> u64 {
    if size.is_power_of_two() {
        return size;
    }
    let floor = 1u64 << size.ilog2();
    let step = floor >> divisions.ilog2();
    if step == 0 {
        return floor.saturating_mul(2);
    }
    let rounded_floor = size & !(step - 1);
    if rounded_floor == size {
        size
    } else {
        rounded_floor.saturating_add(step)
    }
}

/// The block size for a request of `size` bytes (PyTorch's `round_size`): at least
/// [`MIN_BLOCK_SIZE`], a multiple of it, or the next power-of-two division when the
/// request's interval has more than one division configured.
#[inline]
pub(crate) fn round_size(size: u64, divisions: &[u64; ROUNDUP_INTERVALS]) -> u64 {
    if size < MIN_BLOCK_SIZE {
        return MIN_BLOCK_SIZE;
    }
    // Fast path: every size up to 1 MiB is in interval 0; with at most one division there,
    // plain rounding to 512 bytes applies.
    if size <= SMALL_SIZE && divisions[0] <= 1 {
        return size.div_ceil(MIN_BLOCK_SIZE).saturating_mul(MIN_BLOCK_SIZE);
    }
    let div = divisions[roundup_interval(size)];
    if div > 1 && size > MIN_BLOCK_SIZE.saturating_mul(div) {
        roundup_power2_next_division(size, div)
    } else {
        size.div_ceil(MIN_BLOCK_SIZE).saturating_mul(MIN_BLOCK_SIZE)
    }
}

/// The segment size requested from the device when no cached block fits a rounded request
/// of `size` bytes (PyTorch's `get_allocation_size`).
pub(crate) fn segment_size(size: u64) -> u64 {
    if size <= SMALL_SIZE {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        size.div_ceil(ROUND_LARGE).saturating_mul(ROUND_LARGE)
    }
}

/// Whether a free block of `block_size` handed to a rounded request of `size` is split
/// (PyTorch's `should_split`): small pool when the remainder is at least
/// [`MIN_BLOCK_SIZE`]; large pool when the request is below `max_split_size` and the
/// remainder is more than [`SMALL_SIZE`].
pub(crate) fn should_split(
    pool: PoolKind,
    block_size: u64,
    size: u64,
    max_split_size: u64,
) -> bool {
    let remaining = block_size - size;
    match pool {
        PoolKind::Small => remaining >= MIN_BLOCK_SIZE,
        PoolKind::Large => size < max_split_size && remaining > SMALL_SIZE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: [u64; ROUNDUP_INTERVALS] = [0; ROUNDUP_INTERVALS];

    #[test]
    fn rounds_to_min_block() {
        assert_eq!(round_size(0, &NONE), 512);
        assert_eq!(round_size(1, &NONE), 512);
        assert_eq!(round_size(512, &NONE), 512);
        assert_eq!(round_size(513, &NONE), 1024);
        assert_eq!(round_size(u64::MAX, &NONE), u64::MAX);
    }

    #[test]
    fn power2_divisions_match_pytorch() {
        let four = [4; ROUNDUP_INTERVALS];
        // 1200 KiB lies in [1 MiB, 2 MiB): quarters of 1 MiB are 256 KiB steps -> 1280 KiB.
        assert_eq!(round_size(1200 << 10, &four), 1280 << 10);
        // Exact power of two stays.
        assert_eq!(round_size(1 << 20, &four), 1 << 20);
        // Small sizes (<= 512 * divisions) are rounded to 512 only.
        assert_eq!(round_size(1500, &four), 1536);
    }

    #[test]
    fn segment_sizes() {
        assert_eq!(segment_size(512), SMALL_BUFFER);
        assert_eq!(segment_size(SMALL_SIZE), SMALL_BUFFER);
        assert_eq!(segment_size(SMALL_SIZE + 512), LARGE_BUFFER);
        assert_eq!(segment_size(MIN_LARGE_ALLOC), MIN_LARGE_ALLOC);
        assert_eq!(
            segment_size(MIN_LARGE_ALLOC + 1),
            MIN_LARGE_ALLOC + ROUND_LARGE
        );
    }

    #[test]
    fn interval_index() {
        assert_eq!(roundup_interval(512), 0);
        assert_eq!(roundup_interval(3 << 20), 1);
        assert_eq!(roundup_interval(u64::MAX), ROUNDUP_INTERVALS - 1);
    }
}
