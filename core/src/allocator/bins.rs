//! Lazy coalescing: recently freed blocks parked unmerged, for an exact-size fast path.
//!
//! A cached malloc+free pair of PyTorch's design splits a pooled block at every hand-out
//! and merges it back at every free: two removes, two inserts and a search in the ordered
//! pool, most of the pair's cost. Instead, a block the user frees with no stream uses (so
//! it is free at once) may be *parked* in `State::bins`, a short list, out of its pool and
//! not merged with its pooled upper neighbour (its "remainder"). Parked, it stands for the
//! block eager merging would have made: itself plus that remainder (the *merged block*).
//!
//! # Equivalence with eager merging (exact)
//! Every observable effect is the one PyTorch's eager merge-on-free gives:
//! - **Hand-outs.** A request takes a parked block only when eager best fit over the
//!   canonical pool (parked blocks counted as their merged blocks, their remainders not on
//!   their own) picks that merged block, the oversize rules accept it, and splitting it for
//!   the request leaves exactly the parked block and its remainder. Then the allocator state
//!   after the hand-out is the eager one. Any other request first merges back the parked
//!   blocks of its stream and pool and runs the ordinary best fit.
//! - **Statistics.** Parking applies the stat changes of the eager merge (the remainder's
//!   `inactive_split` contribution becomes the merged block's), a hit those of the eager
//!   split, so every figure, peaks and cumulative counts included, is the eager one.
//! - **Ages.** A parked block remembers when it was freed; merged back, it gets that time
//!   as its garbage-collection age, as if merged when freed.
//! - **Structure.** Parking keeps this invariant: a parked block's lower neighbour is never
//!   free and its upper one never parked, so the merged block is the block itself plus at
//!   most its pooled upper neighbour. A block becoming free next to a parked block, or next
//!   to its remainder, merges the parked block back first (`State::merge_into_pool`).
//!   `snapshot()`, `empty_cache`, and every slow step of malloc (callbacks' retry, garbage
//!   collection, new segments, releasing cached blocks, OOM) merge every parked block back
//!   first, so they see the canonical blocks.
//! - **Rules 1-3.** A parked block is handed only to its own stream; a block with stream
//!   uses never parks (it waits in pending-free as before); a parked block is `Free` with a
//!   bumped generation, so its [`super::BlockRef`] is stale as for any cached block.

use crate::backend::Backend;

use super::block::Status;
use super::sizes::{MAX_NON_SPLIT_ROUNDING, should_split};
use super::state::{HandOut, Request, State};

/// Default number of blocks parked at once. Small, so the scans stay short; one covers a
/// steady alloc/free loop, a few the interleaved sizes of a training step.
pub(crate) const BIN_CAPACITY: usize = 8;

/// The block eager merging would have made of a parked block.
struct Merged {
    size: u64,
    addr: u64,
    /// The merged block would be a whole segment (no `inactive_split` contribution).
    whole: bool,
    /// The pooled upper neighbour it absorbs, if any.
    remainder: Option<u32>,
}

impl Merged {
    fn split_contribution(&self) -> (i64, i64) {
        if self.whole {
            (0, 0)
        } else {
            (1, self.size as i64)
        }
    }
}

impl<B: Backend> State<B> {
    fn merged(&self, slot: u32) -> Merged {
        let b = self.slab.get(slot);
        let remainder = b.next.filter(|&n| self.is_pooled(n));
        let (size, next) = match remainder {
            Some(r) => {
                let r = self.slab.get(r);
                (b.size + r.size, r.next)
            }
            None => (b.size, b.next),
        };
        Merged {
            size,
            addr: b.ptr,
            whole: b.prev.is_none() && next.is_none(),
            remainder,
        }
    }

    /// Bytes of the block eager merging would have made of the parked block in `slot`.
    pub fn merged_size(&self, slot: u32) -> u64 {
        self.merged(slot).size
    }

    /// The block in `slot` was just freed by the user with no stream uses: park it when the
    /// invariant allows, else return it to its pool at once.
    pub fn defer_free(&mut self, slot: u32) {
        if self.bins.len() >= self.bin_capacity && !self.bins.is_empty() {
            // Evict before `slot` turns free, so the evicted block never meets it in
            // transit.
            let oldest = self.bins.remove(0);
            self.unpark_and_merge(oldest);
        }
        self.mark_free(slot);
        let b = self.slab.get(slot);
        let parkable = self.bin_capacity > 0
            && b.prev
                .is_none_or(|p| self.slab.get(p).status != Status::Free)
            && b.next.is_none_or(|n| !self.is_parked(n));
        if !parkable {
            self.merge_into_pool(slot);
            return;
        }
        let m = self.merged(slot);
        let before = self.split_contribution(m.remainder);
        let pool = self.slab.get(slot).pool;
        self.apply_split_change(pool, before, m.split_contribution());
        let b = self.slab.get_mut(slot);
        b.parked = true;
        b.gc_base = self.malloc_count;
        self.stats.cached_free_bytes += b.size;
        self.bins.push(slot);
    }

    /// Undoes the parking of `slot` (already taken out of `bins`) for a hand-out: the stat
    /// changes of the eager split of its merged block into it and its remainder. It is left
    /// free, in no pool.
    fn unpark(&mut self, slot: u32) {
        let m = self.merged(slot);
        let after = self.split_contribution(m.remainder);
        let b = self.slab.get_mut(slot);
        debug_assert!(b.status == Status::Free && b.parked);
        b.parked = false;
        let (pool, size) = (b.pool, b.size);
        self.stats.cached_free_bytes -= size;
        self.apply_split_change(pool, m.split_contribution(), after);
    }

    /// Merges the parked block in `slot` back into its pool, with its freeing time as age.
    /// The stats already describe the merged block (see the module docs), so this only
    /// changes the structure: the block absorbs its remainder, as it would have when freed.
    pub fn unpark_and_merge(&mut self, slot: u32) {
        if let Some(i) = self.bins.iter().position(|&s| s == slot) {
            self.bins.remove(i);
        }
        let b = self.slab.get_mut(slot);
        debug_assert!(b.status == Status::Free && b.parked);
        b.parked = false;
        let (size, next, freed_at) = (b.size, b.next, b.gc_base);
        self.stats.cached_free_bytes -= size;
        if let Some(r) = next.filter(|&n| self.is_pooled(n)) {
            self.pool_remove(r);
            self.merge_into(slot, r);
        }
        self.pool_insert(slot);
        self.slab.get_mut(slot).gc_base = freed_at;
    }

    /// Merges back every parked block of `req`'s stream and pool.
    fn flush_bins_for(&mut self, req: &Request<'_, B>) {
        let mut i = 0;
        while i < self.bins.len() {
            let b = self.slab.get(self.bins[i]);
            if b.stream == req.stream_id && b.pool == req.pool {
                self.unpark_and_merge(self.bins[i]);
            } else {
                i += 1;
            }
        }
    }

    /// Merges back every parked block.
    pub fn flush_bins(&mut self) {
        while let Some(&slot) = self.bins.last() {
            self.unpark_and_merge(slot);
        }
    }

    /// The bin index of the parked block eager best fit would hand out for `req`, split
    /// exactly into that block and its remainder; `None` when eager would do anything else.
    fn exact_hit(&self, req: &Request<'_, B>) -> Option<usize> {
        let mine = |s: u32| {
            let b = self.slab.get(s);
            b.stream == req.stream_id && b.pool == req.pool
        };
        // Usually no parked block has the size at all: skip the merged-block comparison.
        if !self
            .bins
            .iter()
            .any(|&s| mine(s) && self.slab.get(s).size == req.size)
        {
            return None;
        }
        let mut best: Option<(u64, u64, usize)> = None;
        for (i, &s) in self.bins.iter().enumerate() {
            if !mine(s) {
                continue;
            }
            let m = self.merged(s);
            if m.size >= req.size && best.is_none_or(|(sz, ad, _)| (m.size, m.addr) < (sz, ad)) {
                best = Some((m.size, m.addr, i));
            }
        }
        let (size, addr, i) = best?;
        if self.slab.get(self.bins[i]).size != req.size {
            return None;
        }
        // A pooled block eager best fit would prefer? Remainders of parked blocks belong to
        // their merged blocks, already compared above.
        for k in self.pool(req.pool).from(req.stream_id, req.size) {
            if (k.size, k.addr) >= (size, addr) {
                break;
            }
            if !self
                .slab
                .get(k.slot)
                .prev
                .is_some_and(|p| self.is_parked(p))
            {
                return None;
            }
        }
        let max_split = self.config.max_split_size;
        let rejected = (req.size < max_split && size >= max_split)
            || (req.size >= max_split && size >= req.size.saturating_add(MAX_NON_SPLIT_ROUNDING))
            || (size != req.size && !should_split(req.pool, size, req.size, max_split));
        (!rejected).then_some(i)
    }

    /// Serves `req` from the cache exactly as eager best fit would: from a parked block
    /// when that is the block eager would split off, else by best fit in the pool after
    /// merging back the parked blocks of the request's stream and pool.
    pub fn serve(&mut self, req: &Request<'_, B>) -> Option<HandOut> {
        if !self.bins.is_empty() {
            if let Some(i) = self.exact_hit(req) {
                let slot = self.bins.remove(i);
                self.unpark(slot);
                return Some(self.allocate_block(slot, req));
            }
            self.flush_bins_for(req);
        }
        let slot = self.best_fit(req)?;
        Some(self.hand_out(slot, req))
    }
}
