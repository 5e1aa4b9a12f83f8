//! An independent reference model of PyTorch's caching allocator with
//! `expandable_segments:True`, written from the rules of `c10/cuda/CUDACachingAllocator.cpp`
//! (`get_free_block`, `alloc_block`, `try_allocate_expandable_block`,
//! `find_expandable_block`, `map_block`, `unmap_block`, `release_blocks`,
//! `release_cached_blocks`, `garbage_collect_cached_blocks`, `try_merge_blocks`,
//! `ExpandableSegment::map`/`unmap`), sharing no code with memreuse: plain maps of blocks by
//! address and sets of free blocks by (stream, size, address).
//!
//! It covers what the recorded histories exercise: one device, any number of streams,
//! immediate and pending frees, a device capacity, and optionally
//! `per_process_memory_fraction` with `garbage_collection_threshold` (which, with expandable
//! segments, frees nothing: PyTorch's collector skips every block of an expandable segment).
//! `max_split_size_mb` and `roundup_power2_divisions` are not modelled.

use std::collections::{BTreeMap, BTreeSet};

/// `kMinBlockSize`: every request is rounded up to it.
const MIN_BLOCK: u64 = 512;
/// `kSmallSize`: requests up to it use the small pool.
const SMALL_SIZE: u64 = 1 << 20;
/// `kSmallBuffer`: the small pool's page.
const SMALL_BUFFER: u64 = 2 << 20;
/// `kLargeBuffer`: the large pool's default page.
const LARGE_BUFFER: u64 = 20 << 20;
/// `kMinLargeAlloc`: below it a large request's allocation size is `kLargeBuffer`.
const MIN_LARGE_ALLOC: u64 = 10 << 20;
/// `kRoundLarge`: large allocation sizes are multiples of it.
const ROUND_LARGE: u64 = 2 << 20;

/// What a block of address space is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    /// Reserved, no physical page (`mapped == false`).
    Unmapped,
    /// Mapped, in the pool's free set.
    Free,
    /// Handed out.
    Allocated,
    /// Freed by the user with an event outstanding (`event_count > 0`).
    Pending {
        /// Who freed it (the caller's allocation id): a completion names it.
        tag: usize,
        /// The event completed; `process_events` frees it at the next allocation.
        done: bool,
    },
}

#[derive(Clone, Copy, Debug)]
struct Block {
    seg: usize,
    size: u64,
    state: State,
}

#[derive(Clone, Copy, Debug)]
struct Segment {
    base: u64,
    len: u64,
    stream: usize,
    small: bool,
    page: u64,
}

/// The settings the model knows.
#[derive(Clone, Copy, Debug)]
pub struct ModelConfig {
    /// Large-pool page (`expandable_segments_page_size_mb`, default 20 MiB).
    pub large_page: u64,
    /// `per_process_memory_fraction`, if set.
    pub fraction: Option<f64>,
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            large_page: LARGE_BUFFER,
            fraction: None,
        }
    }
}

/// What a replay through the model measured.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct ModelFigures {
    /// Highest mapped bytes.
    pub reserved_peak: u64,
    /// Successful `map_block` calls (`num_device_alloc`).
    pub device_allocs: u64,
    /// The request that ran out of memory (its index in the caller's numbering).
    pub first_oom: Option<u64>,
}

/// The allocator state.
pub struct Model {
    cfg: ModelConfig,
    capacity: u64,
    blocks: BTreeMap<u64, Block>,
    /// Free blocks per pool (0 large, 1 small): (stream, size, address).
    free: [BTreeSet<(usize, u64, u64)>; 2],
    segs: Vec<Option<Segment>>,
    next_addr: u64,
    mapped: u64,
    /// Blocks in [`State::Pending`].
    pending: usize,
    /// Figures so far.
    pub figures: ModelFigures,
}

fn pool_of(small: bool) -> usize {
    usize::from(small)
}

impl Model {
    /// A model of a device of `capacity` bytes.
    pub fn new(cfg: ModelConfig, capacity: u64) -> Self {
        Self {
            cfg,
            capacity,
            blocks: BTreeMap::new(),
            free: [BTreeSet::new(), BTreeSet::new()],
            segs: Vec::new(),
            next_addr: 1 << 40,
            mapped: 0,
            pending: 0,
            figures: ModelFigures::default(),
        }
    }

    fn seg(&self, b: &Block) -> Segment {
        self.segs[b.seg].expect("live segment")
    }

    fn next_of(&self, ptr: u64) -> Option<u64> {
        let b = self.blocks[&ptr];
        let next = ptr + b.size;
        self.blocks
            .get(&next)
            .filter(|n| n.seg == b.seg)
            .map(|_| next)
    }

    fn prev_of(&self, ptr: u64) -> Option<u64> {
        let b = self.blocks[&ptr];
        self.blocks
            .range(..ptr)
            .next_back()
            .filter(|(p, n)| n.seg == b.seg && **p + n.size == ptr)
            .map(|(p, _)| *p)
    }

    fn set_free(&mut self, ptr: u64, free: bool) {
        let b = self.blocks[&ptr];
        let s = self.seg(&b);
        let key = (s.stream, b.size, ptr);
        if free {
            self.free[pool_of(s.small)].insert(key);
        } else {
            self.free[pool_of(s.small)].remove(&key);
        }
    }

    /// `try_merge_blocks(dst, src)`: merges when `src` is neither allocated nor pending and
    /// has the same mapped state; returns the merged block's address.
    fn try_merge(&mut self, dst: u64, src: Option<u64>) -> u64 {
        let Some(src) = src else { return dst };
        let (d, s) = (self.blocks[&dst], self.blocks[&src]);
        let same = matches!(
            (d.state, s.state),
            (State::Free, State::Free) | (State::Unmapped, State::Unmapped)
        );
        if !same {
            return dst;
        }
        if d.state == State::Free {
            self.set_free(dst, false);
            self.set_free(src, false);
        }
        self.blocks.remove(&dst);
        self.blocks.remove(&src);
        let start = dst.min(src);
        let merged = Block {
            size: d.size + s.size,
            ..d
        };
        self.blocks.insert(start, merged);
        if merged.state == State::Free {
            self.set_free(start, true);
        }
        start
    }

    /// `free_block`: the block becomes free and merges with free neighbours.
    fn free_block(&mut self, ptr: u64) {
        self.blocks.get_mut(&ptr).expect("block").state = State::Free;
        self.set_free(ptr, true);
        let ptr = self.try_merge(ptr, self.prev_of(ptr));
        self.try_merge(ptr, self.next_of(ptr));
    }

    /// The user frees the block at `ptr`; `pending`: another stream still uses it, until
    /// [`Model::complete`] with the same `tag`.
    pub fn free(&mut self, ptr: u64, pending: Option<usize>) {
        if let Some(tag) = pending {
            self.blocks.get_mut(&ptr).expect("block").state = State::Pending { tag, done: false };
            self.pending += 1;
        } else {
            self.free_block(ptr);
        }
    }

    /// The pending free `tag` of the block at `ptr` completed (its event is done); nothing
    /// when an out-of-memory retry already synchronized it.
    pub fn complete(&mut self, ptr: u64, tag: usize) {
        if let Some(b) = self.blocks.get_mut(&ptr)
            && b.state == (State::Pending { tag, done: false })
        {
            b.state = State::Pending { tag, done: true };
        }
    }

    fn free_pending(&mut self, only_done: bool) {
        if self.pending == 0 {
            return;
        }
        let ready: Vec<u64> = self
            .blocks
            .iter()
            .filter(|(_, b)| match b.state {
                State::Pending { done, .. } => done || !only_done,
                _ => false,
            })
            .map(|(p, _)| *p)
            .collect();
        for p in ready {
            self.pending -= 1;
            self.free_block(p);
        }
    }

    fn expandable_size(&self, ptr: u64) -> u64 {
        let b = self.blocks[&ptr];
        b.size
            + self
                .next_of(ptr)
                .map(|n| self.blocks[&n])
                .filter(|n| n.state == State::Unmapped)
                .map_or(0, |n| n.size)
    }

    /// `get_free_block` with expandable segments: best fit, then the walk forward while the
    /// next block's expandable size is smaller.
    fn get_free_block(&mut self, stream: usize, size: u64, pool: usize) -> Option<u64> {
        let set = &self.free[pool];
        let mut it = *set.range((stream, size, 0)..).next()?;
        if it.0 != stream {
            return None;
        }
        loop {
            let next = self.free[pool]
                .range((std::ops::Bound::Excluded(it), std::ops::Bound::Unbounded))
                .next()
                .copied();
            match next {
                Some(n)
                    if n.0 == stream && self.expandable_size(n.2) < self.expandable_size(it.2) =>
                {
                    it = n;
                }
                _ => break,
            }
        }
        self.free[pool].remove(&it);
        Some(it.2)
    }

    fn allocatable(&self, ptr: u64) -> bool {
        matches!(self.blocks[&ptr].state, State::Free | State::Unmapped)
    }

    /// `find_expandable_block`: the lowest unmapped block of the stream's pool (with the free
    /// block before it) that has `size` bytes of allocatable address space; else a new
    /// segment.
    fn find_expandable_block(&mut self, stream: usize, small: bool, size: u64) -> u64 {
        let unmapped: Vec<u64> = self
            .blocks
            .iter()
            .filter(|(_, b)| {
                let s = self.seg(b);
                b.state == State::Unmapped && s.stream == stream && s.small == small
            })
            .map(|(p, _)| *p)
            .collect();
        for c in unmapped {
            let c = match self.prev_of(c) {
                Some(p) if self.allocatable(p) => p,
                _ => c,
            };
            let (mut bytes, mut b) = (0, Some(c));
            while bytes < size
                && let Some(p) = b.filter(|&p| self.allocatable(p))
            {
                bytes += self.blocks[&p].size;
                b = self.next_of(p);
            }
            if bytes >= size {
                return c;
            }
        }
        let page = if small {
            SMALL_BUFFER
        } else {
            self.cfg.large_page
        };
        let total = self.capacity;
        let len = total
            .saturating_add(total / 8)
            .min(1 << 44)
            .max(size)
            .next_multiple_of(page);
        let base = self.next_addr.next_multiple_of(page);
        self.next_addr = base + len + page;
        self.segs.push(Some(Segment {
            base,
            len,
            stream,
            small,
            page,
        }));
        self.blocks.insert(
            base,
            Block {
                seg: self.segs.len() - 1,
                size: len,
                state: State::Unmapped,
            },
        );
        base
    }

    /// `map_block`: maps the pages covering `[ptr, ptr + size)` of the unmapped block at
    /// `ptr` in one call, all or nothing; merges the mapped part with free neighbours.
    /// Returns the merged free block, `None` when a page does not fit on the device.
    fn map_block(&mut self, ptr: u64, size: u64) -> Option<u64> {
        let b = self.blocks[&ptr];
        let s = self.seg(&b);
        let bytes = (ptr + size - s.base).next_multiple_of(s.page) - (ptr - s.base);
        if self.mapped + bytes > self.capacity {
            return None;
        }
        self.mapped += bytes;
        self.figures.reserved_peak = self.figures.reserved_peak.max(self.mapped);
        self.figures.device_allocs += 1;
        if bytes < b.size {
            self.blocks.insert(
                ptr + bytes,
                Block {
                    size: b.size - bytes,
                    ..b
                },
            );
        }
        self.blocks.insert(
            ptr,
            Block {
                size: bytes,
                state: State::Free,
                ..b
            },
        );
        self.set_free(ptr, true);
        let ptr = self.try_merge(ptr, self.prev_of(ptr));
        Some(self.try_merge(ptr, self.next_of(ptr)))
    }

    /// `alloc_block` with expandable segments: the per-process limit checked against the
    /// request's allocation size, then `try_allocate_expandable_block`.
    fn alloc_block(
        &mut self,
        stream: usize,
        small: bool,
        size: u64,
        alloc_size: u64,
    ) -> Option<u64> {
        if let Some(f) = self.cfg.fraction {
            let allowed = (self.capacity as f64 * f) as u64;
            if self.mapped + alloc_size > allowed {
                return None;
            }
        }
        let mut cand = self.find_expandable_block(stream, small, size);
        if self.blocks[&cand].state == State::Unmapped {
            let len = self.blocks[&cand].size.min(size);
            cand = self.map_block(cand, len)?;
        }
        while self.blocks[&cand].size < size {
            let remaining = size - self.blocks[&cand].size;
            let next = self.next_of(cand).expect("free -> unmapped");
            let len = self.blocks[&next].size.min(remaining);
            cand = self.map_block(next, len)?;
        }
        self.set_free(cand, false);
        Some(cand)
    }

    /// `unmap_block`: unmaps the whole pages inside the free block at `ptr`.
    fn unmap_block(&mut self, ptr: u64) {
        let b = self.blocks[&ptr];
        let s = self.seg(&b);
        let start = (ptr - s.base).next_multiple_of(s.page) + s.base;
        let end = (ptr + b.size - s.base) / s.page * s.page + s.base;
        if start >= end {
            return;
        }
        self.set_free(ptr, false);
        self.blocks.remove(&ptr);
        if start > ptr {
            self.blocks.insert(
                ptr,
                Block {
                    size: start - ptr,
                    ..b
                },
            );
            self.set_free(ptr, true);
        }
        if ptr + b.size > end {
            self.blocks.insert(
                end,
                Block {
                    size: ptr + b.size - end,
                    ..b
                },
            );
            self.set_free(end, true);
        }
        self.blocks.insert(
            start,
            Block {
                size: end - start,
                state: State::Unmapped,
                ..b
            },
        );
        self.mapped -= end - start;
        let start = self.try_merge(start, self.prev_of(start));
        let start = self.try_merge(start, self.next_of(start));
        // `release_expandable_segment` once nothing of the segment is mapped.
        let whole = self.blocks[&start];
        if whole.size == s.len {
            self.blocks.remove(&start);
            self.segs[whole.seg] = None;
        }
    }

    /// `release_cached_blocks`: every pending free completes (`synchronize_and_free_events`),
    /// then every free block's whole pages are unmapped, large pool then small.
    fn release_cached_blocks(&mut self) {
        self.free_pending(false);
        for pool in 0..2 {
            let blocks: Vec<u64> = self.free[pool].iter().map(|k| k.2).collect();
            for p in blocks {
                if self.blocks.get(&p).is_some_and(|b| b.state == State::Free) {
                    self.unmap_block(p);
                }
            }
        }
    }

    /// `malloc`: a block of at least `orig` bytes on `stream`, `None` on out of memory.
    pub fn malloc(&mut self, orig: u64, stream: usize) -> Option<u64> {
        // process_events
        self.free_pending(true);
        let size = orig.max(1).next_multiple_of(MIN_BLOCK);
        let small = size <= SMALL_SIZE;
        let alloc_size = if small {
            SMALL_BUFFER
        } else if size < MIN_LARGE_ALLOC {
            LARGE_BUFFER
        } else {
            size.next_multiple_of(ROUND_LARGE)
        };
        // garbage_collect_cached_blocks skips expandable blocks, and
        // release_available_cached_blocks does nothing without max_split_size: neither
        // changes anything here.
        let ptr = if let Some(p) = self.get_free_block(stream, size, pool_of(small)) {
            p
        } else if let Some(p) = self.alloc_block(stream, small, size, alloc_size) {
            p
        } else {
            self.release_cached_blocks();
            self.alloc_block(stream, small, size, alloc_size)?
        };
        // alloc_found_block: split when the rest has at least kMinBlockSize.
        let b = self.blocks[&ptr];
        if b.size - size >= MIN_BLOCK {
            self.blocks.insert(
                ptr + size,
                Block {
                    size: b.size - size,
                    state: State::Free,
                    ..b
                },
            );
            self.set_free(ptr + size, true);
            self.blocks.get_mut(&ptr).expect("block").size = size;
        }
        self.blocks.get_mut(&ptr).expect("block").state = State::Allocated;
        Some(ptr)
    }
}
