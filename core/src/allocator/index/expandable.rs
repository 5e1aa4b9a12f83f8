//! Expandable segments as the index sees them (PyTorch's `expandable_segments:True`).
//!
//! An expandable segment is a range of reserved addresses tiled by blocks like any other
//! segment, but some of its blocks are [`SlotState::Unmapped`]: no physical page lies
//! behind them. The device-facing layer (`allocator/expandable.rs`) maps and unmaps the
//! pages; the index keeps the tiling and the figures:
//! - an unmapped block is never in a free set and merges only with unmapped neighbours;
//!   a free (mapped) block merges only with free neighbours (PyTorch's `try_merge_blocks`
//!   refuses blocks of different `mapped`), so free blocks merge across page boundaries;
//! - `reserved_bytes` counts mapped bytes only; `segment` and `oversize_segments` do not
//!   count expandable segments (PyTorch counts them only for `cudaMalloc` segments);
//! - `inactive_split` leaves expandable segments out, and a block splits whenever the
//!   remainder is at least 512 bytes, in both pools (PyTorch's `should_split` with
//!   expandable segments).

use crate::ids::StreamId;

use super::super::sizes::{MIN_BLOCK_SIZE, PoolKind};
use super::free_set::FreeKey;
use super::{Block, BlockIndex, Segment, SlotState};

/// PyTorch's `should_split` with expandable segments: the remainder is a block of its own
/// when it has at least [`MIN_BLOCK_SIZE`] bytes, whatever the pool.
#[inline]
pub(super) fn should_split(block_size: u64, size: u64) -> bool {
    block_size - size >= MIN_BLOCK_SIZE
}

/// One step of a growth of an expandable segment (PyTorch's `map_block` loop): what the
/// device layer maps next, decided here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Growth {
    /// The free block in this slot serves the request.
    Ready(u32),
    /// Map `bytes` (whole pages) at `ptr`, the front of the unmapped block `target`.
    Map { target: u32, ptr: u64, bytes: u64 },
    /// The run cannot grow to the request.
    Stuck,
}

impl BlockIndex {
    /// Switches the index to expandable segments' split and `inactive_split` rules (before
    /// any segment exists).
    pub fn set_expandable(&mut self, on: bool) {
        debug_assert!(self.segments.is_empty());
        self.expandable = on;
    }

    /// A free block's "expandable size" (PyTorch's `get_free_block`): its size plus the
    /// unmapped range right after it, which a growth from this block would map.
    pub(super) fn expandable_size(&self, slot: u32) -> u64 {
        let b = self.block(slot);
        let after = b
            .next
            .map(|n| self.block(n))
            .filter(|n| n.state == SlotState::Unmapped)
            .map_or(0, |n| n.size);
        b.size + after
    }

    /// PyTorch's best fit with expandable segments: from the smallest free block that fits,
    /// walk forward in (size, address) order while the next block's expandable size is
    /// smaller than the current one's, so a block followed by unmapped space (which could
    /// grow) is passed over for one that grows less. Comparisons are between neighbours in
    /// the walk, as PyTorch's loop does, not against the smallest seen.
    pub(super) fn expandable_best_fit(
        &self,
        stream: StreamId,
        lane: u32,
        pool: PoolKind,
        size: u64,
    ) -> Option<FreeKey> {
        let mut walk = self.free_set(stream, lane, pool)?.at_least(size);
        let mut best = walk.next()?;
        let mut best_grows = self.expandable_size(best.slot);
        for next in walk {
            let grows = self.expandable_size(next.slot);
            if grows >= best_grows {
                break;
            }
            (best, best_grows) = (next, grows);
        }
        Some(best)
    }

    /// A new expandable segment: `size` reserved bytes at `base` for `stream`'s `pool`, one
    /// unmapped block (nothing reserved yet). Returns the block's slot.
    pub fn add_expandable_segment_in(
        &mut self,
        base: u64,
        size: u64,
        stream: StreamId,
        lane: u32,
        pool: PoolKind,
    ) -> u32 {
        let set = self.set_for(stream, lane);
        let slot = self.slab.insert(Block {
            generation: 0,
            ptr: base,
            size,
            stream,
            set,
            pool,
            state: SlotState::Unmapped,
            prev: None,
            next: None,
            segment: base,
        });
        self.segments.insert(
            base,
            Segment {
                size,
                stream,
                pool,
                lane,
                head: slot,
            },
        );
        slot
    }

    /// Forgets the expandable segment whose only block, unmapped, is in `slot` (its range
    /// went back to the device).
    pub fn remove_expandable_segment(&mut self, slot: u32) -> Option<Segment> {
        let b = self.slab.get(slot);
        if b.state != SlotState::Unmapped || !b.is_whole_segment() {
            return None;
        }
        let base = b.ptr;
        self.slab.remove(slot);
        self.segments.remove(&base)
    }

    /// PyTorch's `find_expandable_block` within the segment whose lowest block is `head`:
    /// the lowest run of free and unmapped blocks with at least `size` bytes that holds an
    /// unmapped block, starting at the free block just before that unmapped block if there
    /// is one. Returns the run's first slot.
    pub fn find_expandable(&self, head: u32, size: u64) -> Option<u32> {
        let usable = |b: &Block| b.state.is_free() || b.state == SlotState::Unmapped;
        let mut cursor = Some(head);
        while let Some(slot) = cursor {
            let b = self.slab.get(slot);
            cursor = b.next;
            if b.state != SlotState::Unmapped {
                continue;
            }
            let start = match b.prev {
                Some(p) if self.slab.get(p).state.is_free() => p,
                _ => slot,
            };
            let (mut bytes, mut run) = (0u64, Some(start));
            while bytes < size
                && let Some(r) = run
                && usable(self.slab.get(r))
            {
                bytes += self.slab.get(r).size;
                run = self.slab.get(r).next;
            }
            if bytes >= size {
                return Some(start);
            }
        }
        None
    }

    /// The next step of growing the run at `cand` (a free or unmapped block) to `size`
    /// bytes with pages of `page` bytes: done when `cand` is a free block that large, else
    /// map the pages the request still needs into the unmapped block at `cand` or just
    /// after it.
    pub fn growth_step(&self, cand: u32, size: u64, page: u64) -> Growth {
        let b = self.slab.get(cand);
        if b.state.is_free() && b.size >= size {
            return Growth::Ready(cand);
        }
        let (target, need) = if b.state == SlotState::Unmapped {
            (cand, size)
        } else {
            match b.next {
                Some(n) if self.slab.get(n).state == SlotState::Unmapped => (n, size - b.size),
                _ => return Growth::Stuck,
            }
        };
        let t = self.slab.get(target);
        Growth::Map {
            target,
            ptr: t.ptr,
            bytes: need.min(t.size).next_multiple_of(page),
        }
    }

    /// The first `bytes` of the unmapped block in `slot` were mapped: they become a free
    /// block (the rest stays unmapped) and merge with their free neighbours. Returns the
    /// merged free block's slot.
    pub fn map_front(&mut self, slot: u32, bytes: u64) -> u32 {
        let b = *self.slab.get(slot);
        debug_assert!(b.state == SlotState::Unmapped && bytes > 0 && bytes <= b.size);
        if bytes < b.size {
            let rest = self.slab.insert(Block {
                generation: 0,
                ptr: b.ptr + bytes,
                size: b.size - bytes,
                state: SlotState::Unmapped,
                prev: Some(slot),
                ..b
            });
            if let Some(n) = b.next {
                self.slab.get_mut(n).prev = Some(rest);
            }
            let h = self.slab.get_mut(slot);
            h.next = Some(rest);
            h.size = bytes;
        }
        self.figures.reserved_bytes.increase(b.pool, bytes);
        self.insert_free(slot);
        self.merge_free_neighbours(slot)
    }

    /// Merges the free block in `slot` with its free neighbours; returns the merged slot.
    fn merge_free_neighbours(&mut self, mut slot: u32) -> u32 {
        let is_free =
            |ix: &BlockIndex, n: Option<u32>| n.filter(|&n| ix.slab.get(n).state.is_free());
        if let Some(p) = is_free(self, self.slab.get(slot).prev) {
            self.remove_free(p);
            self.remove_free(slot);
            self.absorb(p, slot);
            self.insert_free(p);
            slot = p;
        }
        if let Some(n) = is_free(self, self.slab.get(slot).next) {
            self.remove_free(n);
            self.remove_free(slot);
            self.absorb(slot, n);
            self.insert_free(slot);
        }
        slot
    }

    /// Slots of the free blocks of the segment whose lowest block is `head`, in address
    /// order.
    pub fn free_slots(&self, head: u32) -> Vec<u32> {
        let mut out = Vec::new();
        let mut cursor = Some(head);
        while let Some(slot) = cursor {
            let b = self.slab.get(slot);
            if b.state.is_free() {
                out.push(slot);
            }
            cursor = b.next;
        }
        out
    }

    /// The whole pages (of `page` bytes, counted from the segment's base) inside the free
    /// block in `slot`: `(address, length)`, or `None` when it holds no whole page.
    pub fn inner_pages(&self, slot: u32, page: u64) -> Option<(u64, u64)> {
        let b = self.slab.get(slot);
        let offset = b.ptr - b.segment;
        let start = b.segment + offset.next_multiple_of(page);
        let end = b.segment + (offset + b.size) / page * page;
        (start < end).then(|| (start, end - start))
    }

    /// The pages `[start, start + len)` inside the free block in `slot` were unmapped: that
    /// range becomes an unmapped block (merged with unmapped neighbours), the bytes before
    /// and after it stay free blocks.
    pub fn unmap_range(&mut self, slot: u32, start: u64, len: u64) {
        let b = *self.slab.get(slot);
        debug_assert!(b.state.is_free() && start >= b.ptr && start + len <= b.ptr + b.size);
        self.remove_free(slot);
        let (head, tail) = (start - b.ptr, b.ptr + b.size - (start + len));
        let mut mid = if head > 0 {
            let m = self.slab.insert(Block {
                generation: 0,
                ptr: start,
                size: len,
                state: SlotState::Unmapped,
                prev: Some(slot),
                ..b
            });
            if let Some(n) = b.next {
                self.slab.get_mut(n).prev = Some(m);
            }
            let h = self.slab.get_mut(slot);
            h.next = Some(m);
            h.size = head;
            self.insert_free(slot);
            m
        } else {
            let h = self.slab.get_mut(slot);
            h.state = SlotState::Unmapped;
            h.size = len;
            slot
        };
        if tail > 0 {
            let next = self.slab.get(mid).next;
            let t = self.slab.insert(Block {
                generation: 0,
                ptr: start + len,
                size: tail,
                prev: Some(mid),
                next,
                ..b
            });
            if let Some(n) = next {
                self.slab.get_mut(n).prev = Some(t);
            }
            self.slab.get_mut(mid).next = Some(t);
            self.insert_free(t);
        }
        self.figures.reserved_bytes.decrease(b.pool, len);
        let unmapped = |ix: &BlockIndex, n: Option<u32>| {
            n.filter(|&n| ix.slab.get(n).state == SlotState::Unmapped)
        };
        if let Some(p) = unmapped(self, self.slab.get(mid).prev) {
            self.absorb(p, mid);
            mid = p;
        }
        if let Some(n) = unmapped(self, self.slab.get(mid).next) {
            self.absorb(mid, n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const PAGE: u64 = 20 * MIB;
    const BASE: u64 = 1 << 40;
    const S: StreamId = StreamId(0);

    fn index() -> BlockIndex {
        let mut ix = BlockIndex::new(u64::MAX);
        ix.set_expandable(true);
        ix
    }

    /// The blocks of the only segment as `(offset, size, state)` with states `F`ree,
    /// `A`llocated, `U`nmapped, after checking tiling, merging and the figures.
    fn layout(ix: &BlockIndex) -> Vec<(u64, u64, char)> {
        let (&base, seg) = ix.segments().iter().next().expect("one segment");
        let (mut end, mut out, mut mapped, mut free) = (base, Vec::new(), 0, 0);
        for b in ix.segment_blocks(seg.head) {
            assert_eq!(b.ptr, end, "blocks tile the segment");
            end += b.size;
            let c = match b.state {
                SlotState::Free { .. } => 'F',
                SlotState::Allocated { .. } => 'A',
                SlotState::Unmapped => 'U',
                other => panic!("unexpected {other:?}"),
            };
            if let Some(&(_, _, last)) = out.last() {
                assert!(
                    !(last == c && c != 'A'),
                    "unmerged neighbours: {out:?} + {c}"
                );
            }
            if c != 'U' {
                mapped += b.size;
            }
            if c == 'F' {
                free += b.size;
            }
            out.push((b.ptr - base, b.size, c));
        }
        assert_eq!(end, base + seg.size);
        let f = ix.figures();
        assert_eq!(f.reserved_bytes.current(), mapped, "reserved = mapped");
        assert_eq!(f.cached_free_bytes, free);
        assert_eq!(f.segment.current(), 0);
        assert_eq!(f.inactive_split.current(), 0);
        let in_set: usize = ix.free_blocks(PoolKind::Large).len();
        assert_eq!(in_set, out.iter().filter(|b| b.2 == 'F').count());
        out
    }

    #[test]
    fn map_hand_out_free_unmap_and_merge_across_pages() {
        let mut ix = index();
        let head = ix.add_expandable_segment(BASE, 10 * PAGE, S, PoolKind::Large);
        assert_eq!(layout(&ix), vec![(0, 10 * PAGE, 'U')]);
        assert_eq!(ix.find_expandable(head, 30 * MIB), Some(head));
        let first = ix.map_front(head, 2 * PAGE);
        assert_eq!(
            layout(&ix),
            vec![(0, 2 * PAGE, 'F'), (2 * PAGE, 8 * PAGE, 'U')]
        );
        // A hand-out splits off any remainder of at least 512 bytes (both pools).
        let big = ix.hand_out(first, 30 * MIB, 30 * MIB);
        let b_slot = ix.best_fit(S, PoolKind::Large, 4 * MIB).unwrap();
        let small = ix.hand_out(b_slot, 4 * MIB, 4 * MIB);
        assert_eq!(
            layout(&ix),
            vec![
                (0, 30 * MIB, 'A'),
                (30 * MIB, 4 * MIB, 'A'),
                (34 * MIB, 6 * MIB, 'F'),
                (2 * PAGE, 8 * PAGE, 'U'),
            ]
        );
        // The run for 20 MiB starts at the free block before the unmapped range.
        let run = ix.find_expandable(head, 20 * MIB).unwrap();
        assert_eq!(ix.block(run).ptr, BASE + 34 * MIB);
        let grown = ix.map_front(ix.block(run).next.unwrap(), PAGE);
        assert_eq!(
            ix.block(grown).size,
            26 * MIB,
            "merged across the page boundary"
        );
        // Freeing the first block: free space [0, 30) holds one whole page.
        let slot = ix.drop_handle(big.block).unwrap();
        let freed = ix.release(slot);
        assert_eq!(ix.inner_pages(freed, PAGE), Some((BASE, PAGE)));
        ix.unmap_range(freed, BASE, PAGE);
        assert_eq!(
            layout(&ix),
            vec![
                (0, PAGE, 'U'),
                (PAGE, 10 * MIB, 'F'),
                (30 * MIB, 4 * MIB, 'A'),
                (34 * MIB, 26 * MIB, 'F'),
                (3 * PAGE, 7 * PAGE, 'U'),
            ]
        );
        // The free block at the end holds one whole page ([40, 60)); unmapping it merges
        // with the unmapped tail, and the partial page before it stays free.
        let (start, len) = ix.inner_pages(grown, PAGE).unwrap();
        assert_eq!((start - BASE, len), (2 * PAGE, PAGE));
        ix.unmap_range(grown, start, len);
        assert_eq!(
            layout(&ix),
            vec![
                (0, PAGE, 'U'),
                (PAGE, 10 * MIB, 'F'),
                (30 * MIB, 4 * MIB, 'A'),
                (34 * MIB, 6 * MIB, 'F'),
                (2 * PAGE, 8 * PAGE, 'U'),
            ]
        );
        // Free the last allocation: everything free merges, and unmapping it all leaves one
        // unmapped block, whose segment can go.
        let slot = ix.drop_handle(small.block).unwrap();
        let all = ix.release(slot);
        assert_eq!(layout(&ix)[1], (PAGE, PAGE, 'F'));
        let (start, len) = ix.inner_pages(all, PAGE).unwrap();
        ix.unmap_range(all, start, len);
        assert_eq!(layout(&ix), vec![(0, 10 * PAGE, 'U')]);
        let whole = ix.segments()[&BASE].head;
        assert!(ix.remove_expandable_segment(whole).is_some());
        assert!(ix.segments().is_empty());
    }

    #[test]
    fn a_free_block_without_a_whole_page_is_not_unmapped() {
        let mut ix = index();
        let head = ix.add_expandable_segment(BASE, 4 * PAGE, S, PoolKind::Large);
        let f = ix.map_front(head, PAGE);
        let a = ix.hand_out(f, 5 * MIB, 5 * MIB);
        let rest = ix.block(a.block.id).next.unwrap();
        assert_eq!(
            ix.inner_pages(rest, PAGE),
            None,
            "[5, 20) holds no whole page"
        );
        assert_eq!(
            ix.find_expandable(head, 100 * MIB),
            None,
            "80 MiB of room in all"
        );
        assert!(ix.remove_expandable_segment(head).is_none(), "still mapped");
    }
}
