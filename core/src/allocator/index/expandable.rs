//! Expandable segments as the index sees them (PyTorch's `expandable_segments:True`).
//!
//! An expandable segment is a range of reserved addresses tiled by blocks like any other
//! segment, but some of its blocks are [`BlockState::Unmapped`]: no physical page lies
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
use super::{Block, BlockIndex, BlockState, Segment};

/// PyTorch's `should_split` with expandable segments: the remainder is a block of its own
/// when it has at least [`MIN_BLOCK_SIZE`] bytes, whatever the pool.
#[inline]
pub(super) fn should_split(block_size: u64, size: u64) -> bool {
    block_size - size >= MIN_BLOCK_SIZE
}

impl BlockIndex {
    /// Switches the index to expandable segments' split and `inactive_split` rules (before
    /// any segment exists).
    pub fn set_expandable(&mut self, on: bool) {
        debug_assert!(self.segments.is_empty());
        self.expandable = on;
    }

    /// A new expandable segment: `size` reserved bytes at `base` for `stream`'s `pool`, one
    /// unmapped block (nothing reserved yet). Returns the block's slot.
    pub fn add_expandable_segment(
        &mut self,
        base: u64,
        size: u64,
        stream: StreamId,
        pool: PoolKind,
    ) -> u32 {
        let slot = self.slab.insert(Block {
            generation: 0,
            ptr: base,
            size,
            stream,
            pool,
            state: BlockState::Unmapped,
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
                head: slot,
            },
        );
        slot
    }

    /// Forgets the expandable segment whose only block, unmapped, is in `slot` (its range
    /// went back to the device).
    pub fn remove_expandable_segment(&mut self, slot: u32) -> Option<Segment> {
        let b = self.slab.get(slot);
        if b.state != BlockState::Unmapped || !b.is_whole_segment() {
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
        let usable = |b: &Block| b.state.is_free() || b.state == BlockState::Unmapped;
        let mut cursor = Some(head);
        while let Some(slot) = cursor {
            let b = self.slab.get(slot);
            cursor = b.next;
            if b.state != BlockState::Unmapped {
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

    /// The first `bytes` of the unmapped block in `slot` were mapped: they become a free
    /// block (the rest stays unmapped) and merge with their free neighbours. Returns the
    /// merged free block's slot.
    pub fn map_front(&mut self, slot: u32, bytes: u64) -> u32 {
        let b = *self.slab.get(slot);
        debug_assert!(b.state == BlockState::Unmapped && bytes > 0 && bytes <= b.size);
        if bytes < b.size {
            let rest = self.slab.insert(Block {
                generation: 0,
                ptr: b.ptr + bytes,
                size: b.size - bytes,
                state: BlockState::Unmapped,
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
                state: BlockState::Unmapped,
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
            h.state = BlockState::Unmapped;
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
            n.filter(|&n| ix.slab.get(n).state == BlockState::Unmapped)
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
