//! The memory figures the index keeps, laid out for the hot path.
//!
//! Each counter stores, per pool, what cannot be derived (current value, peak, cumulative
//! increases), plus the peak of the two pools together, since a peak of a sum is not a sum
//! of peaks. Everything else of PyTorch's `Stat` is derived when [`Figures::stat_array`]
//! builds the public [`StatArray`]: `freed = allocated - current` (no reset of accumulated
//! statistics exists), and the aggregate's current and cumulative figures are the sums of
//! the pools'. Updates are inlined: one pool's three fields and the aggregate peak.

use super::super::sizes::PoolKind;
use super::super::stats::{Stat, StatArray};

/// One pool's stored part of a statistic.
#[derive(Clone, Copy, Default, Debug)]
struct PoolCounter {
    current: u64,
    peak: u64,
    allocated: u64,
}

/// A statistic per pool with the aggregate peak (see the module docs).
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct Counter {
    pools: [PoolCounter; 2],
    aggregate_peak: u64,
}

impl Counter {
    #[inline]
    pub fn increase(&mut self, pool: PoolKind, amount: u64) {
        // The other pool's value is read before this one is written, so the new value stays
        // in a register (no reload through the aliasing array).
        let i = pool as usize;
        let other = self.pools[i ^ 1].current;
        let p = &mut self.pools[i];
        let current = p.current + amount;
        p.current = current;
        // Cumulative: the one figure that is not bounded by the device (2^64 bytes handed
        // out over a run of huge requests), so it saturates instead of wrapping.
        p.allocated = p.allocated.saturating_add(amount);
        // Conditional stores: in a steady state no peak moves, and the test is cheaper than
        // a `max` and a store.
        if current > p.peak {
            p.peak = current;
        }
        if current + other > self.aggregate_peak {
            self.aggregate_peak = current + other;
        }
    }

    #[inline]
    pub fn decrease(&mut self, pool: PoolKind, amount: u64) {
        let p = &mut self.pools[pool as usize];
        debug_assert!(p.current >= amount, "figure would go negative");
        p.current -= amount;
    }

    /// A signed change (the inactive-split figures move both ways in one operation).
    #[inline]
    pub fn apply(&mut self, pool: PoolKind, delta: i64) {
        if delta >= 0 {
            self.increase(pool, delta.unsigned_abs());
        } else {
            self.decrease(pool, delta.unsigned_abs());
        }
    }

    /// Value of both pools together now.
    pub fn current(&self) -> u64 {
        self.pools[0].current + self.pools[1].current
    }

    pub fn reset_peak(&mut self) {
        for p in &mut self.pools {
            p.peak = p.current;
        }
        self.aggregate_peak = self.current();
    }

    fn pool_stat(p: PoolCounter) -> Stat {
        Stat {
            current: p.current,
            peak: p.peak,
            allocated: p.allocated,
            freed: p.allocated - p.current,
        }
    }

    /// The public per-pool and aggregate figures.
    pub fn stat_array(&self) -> StatArray {
        let small = Self::pool_stat(self.pools[PoolKind::Small as usize]);
        let large = Self::pool_stat(self.pools[PoolKind::Large as usize]);
        StatArray {
            aggregate: Stat {
                current: small.current + large.current,
                peak: self.aggregate_peak,
                allocated: small.allocated + large.allocated,
                freed: small.freed + large.freed,
            },
            small_pool: small,
            large_pool: large,
        }
    }

    /// The figure counted without pools (PyTorch's oversize counters): the aggregate.
    pub fn stat(&self) -> Stat {
        self.stat_array().aggregate
    }
}

/// Every figure the index keeps: what the blocks and segments add up to.
#[derive(Clone, Default, Debug)]
pub(crate) struct Figures {
    pub allocation: Counter,
    pub allocated_bytes: Counter,
    pub segment: Counter,
    pub reserved_bytes: Counter,
    pub active: Counter,
    pub active_bytes: Counter,
    pub inactive_split: Counter,
    pub inactive_split_bytes: Counter,
    pub requested_bytes: Counter,
    /// Counted in the aggregate only (the pool argument is always `Large`).
    pub oversize_allocations: Counter,
    /// Counted in the aggregate only (the pool argument is always `Large`).
    pub oversize_segments: Counter,
    /// Bytes of free blocks (both pools).
    pub cached_free_bytes: u64,
    /// Bytes of blocks freed by the user, waiting on events.
    pub pending_free_bytes: u64,
    /// Bytes of blocks whose events could not be queried (see `CachingAllocator` docs).
    pub quarantined_bytes: u64,
}

impl Figures {
    pub fn reset_peaks(&mut self) {
        for c in [
            &mut self.allocation,
            &mut self.allocated_bytes,
            &mut self.segment,
            &mut self.reserved_bytes,
            &mut self.active,
            &mut self.active_bytes,
            &mut self.inactive_split,
            &mut self.inactive_split_bytes,
            &mut self.requested_bytes,
            &mut self.oversize_allocations,
            &mut self.oversize_segments,
        ] {
            c.reset_peak();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_figures_match_a_stored_stat() {
        let mut c = Counter::default();
        c.increase(PoolKind::Small, 10);
        c.increase(PoolKind::Large, 5);
        c.decrease(PoolKind::Small, 10);
        c.increase(PoolKind::Large, 3);
        let s = c.stat_array();
        assert_eq!(
            s.small_pool,
            Stat {
                current: 0,
                peak: 10,
                allocated: 10,
                freed: 10
            }
        );
        assert_eq!(
            s.large_pool,
            Stat {
                current: 8,
                peak: 8,
                allocated: 8,
                freed: 0
            }
        );
        // The aggregate peak is 15 (both pools at once), not 10 + 8.
        assert_eq!(
            s.aggregate,
            Stat {
                current: 8,
                peak: 15,
                allocated: 18,
                freed: 10
            }
        );
        c.reset_peak();
        assert_eq!(c.stat_array().aggregate.peak, 8);
        assert_eq!(c.stat_array().small_pool.peak, 0);
    }
}
