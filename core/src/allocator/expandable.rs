//! Expandable segments (`expandable_segments:True`): the device-facing growth and release.
//!
//! As PyTorch's `ExpandableSegment`: the first request of a (stream, pool) that no cached
//! block serves reserves one large range of device addresses for that stream and pool
//! (9/8 of the device's total memory, rounded up to the page, as PyTorch, at most
//! [`MAX_RESERVE`]; when the backend reports no total, [`UNKNOWN_CAPACITY_RESERVE`]). Physical pages are mapped at
//! the lowest unmapped addresses that, with the free block before them, fit the request
//! (PyTorch's `find_expandable_block` / `map_block`), one physical handle per page: 2 MiB
//! pages for the small pool, `expandable_segments_page_size_mb` (default 20 MiB) for the
//! large pool. The index (`index/expandable.rs`) keeps the unmapped ranges as blocks of
//! their own state, never in a free set, so free blocks merge across page boundaries and
//! never with unmapped ones.
//!
//! Releasing (`empty_cache`, the out-of-memory chain's last step, garbage collection)
//! unmaps the whole free pages inside free blocks, after synchronizing the segment's
//! stream (PyTorch's `unmapHandles`; uses by other streams were already waited for by
//! events, since a block with pending events is not free), and returns a segment's range
//! to the device once nothing in it is mapped.
//!
//! # Trim before growth (`expandable_segments_trim:True`)
//! memreuse's extension, not PyTorch's, off by default: a growth first unmaps whole free
//! pages of its own (stream, pool) segments, oldest free blocks first, up to the bytes it
//! maps, sparing the free blocks of the run it grows ([`State::trim_before_growth`]), so
//! reserved memory follows live memory without `empty_cache`. Each such growth pays a
//! synchronization of the segment's stream and one unmap per page (and the maps it does
//! anyway); see `docs/expandable-segments.md`.
//!
//! # Costs
//! Every page is one `vm_create_physical` + `vm_map` when mapped and one `vm_unmap` +
//! `vm_release_physical` when unmapped; on real devices these are driver calls
//! (`cuMemCreate`/`cuMemMap`/`cuMemSetAccess`, `aclrtMallocPhysical`/`aclrtMapMem`) far
//! dearer than a cached hand-out, and unmapping synchronizes a stream. They are counted in
//! `num_device_map` / `num_device_unmap` of [`super::AllocatorStats`]; a larger large-pool
//! page means fewer calls and more rounding.
//!
//! # Failures
//! A page that cannot be created (out of memory) or mapped undoes the pages this growth
//! step mapped and reports out of memory to the chain (PyTorch returns an empty mapped
//! range); pages mapped by earlier steps of the same request stay as free blocks, which
//! the chain's release step unmaps. A failed unmap leaves the pages not yet unmapped as
//! free blocks and returns the error.

use std::collections::BTreeMap;

use crate::backend::Backend;
use crate::error::BackendError;
use crate::ids::DevicePtr;
use crate::virtual_memory::PhysicalHandle;

use super::expandable_segment::ExpandableSegment;
use super::index::{Growth, SlotState};
use super::pool::DEFAULT_LANE;
use super::segment_events::SegmentEventKind;
use super::sizes::{PoolKind, SMALL_BUFFER};
use super::state::{DeviceOp, Request, Setup, State};
use super::trace::TraceAction;

/// Addresses reserved per expandable segment when the backend reports no total memory
/// (64 GiB: addresses cost nothing, and the capacity still limits what is mapped).
pub const UNKNOWN_CAPACITY_RESERVE: u64 = 64 << 30;
/// The most addresses one expandable segment reserves (16 TiB), for a backend whose total
/// is unlimited (a simulated device of `u64::MAX` bytes).
pub const MAX_RESERVE: u64 = 1 << 44;

impl<B: Backend> State<B> {
    /// Page size of `pool`'s expandable segments on a backend of granularity `granularity`.
    fn page_size(su: &Setup<B>, pool: PoolKind, granularity: u64) -> u64 {
        let page = match pool {
            PoolKind::Small => SMALL_BUFFER,
            PoolKind::Large => su.config.expandable_segments_page_size,
        };
        page.max(granularity).next_multiple_of(granularity.max(1))
    }

    /// `alloc_segment` with expandable segments: maps pages into the request's segment
    /// until a free block of at least `req.size` bytes exists; returns its slot.
    /// `Ok(None)` is out of memory (device or address space; the caller checked the
    /// per-process limit).
    ///
    /// With `expandable_segments_trim:True` it first unmaps whole free pages of the
    /// request's own (stream, pool) segments, up to the bytes this growth would map
    /// ([`State::trim_before_growth`]), and only then looks for the run to grow, so the
    /// unmapping never touches the block the growth extends, and the holes it leaves are
    /// candidates (the lowest run that fits wins).
    pub fn alloc_expandable(
        &mut self,
        su: &Setup<B>,
        req: &Request<'_, B>,
    ) -> Result<Option<u32>, BackendError> {
        if su.config.expandable_segments_trim {
            self.trim_before_growth(su, req)?;
        }
        let found = self.find_growth(req);
        let (base, mut cand) = match found {
            Some(f) => f,
            None => match self.new_expandable_segment(su, req)? {
                Some(f) => f,
                None => return Ok(None),
            },
        };
        loop {
            let page = self.expandable[&base].page;
            let (target, t_ptr, bytes) = match self.index.growth_step(cand, req.size, page) {
                Growth::Ready(slot) => return Ok(Some(slot)),
                Growth::Stuck => return Ok(None),
                Growth::Map { target, ptr, bytes } => (target, ptr, bytes),
            };
            match self.map_pages(su, base, t_ptr, bytes) {
                Ok(true) => {}
                Ok(false) => {
                    self.release_if_unmapped(su, base)?;
                    return Ok(None);
                }
                Err(e) => {
                    if let Err(release) = self.release_if_unmapped(su, base) {
                        tracing::warn!(%release, "memreuse allocator: an empty expandable segment could not be released");
                    }
                    return Err(e);
                }
            }
            self.counts.device_op(DeviceOp::Alloc);
            if req.lane != DEFAULT_LANE {
                self.count_pool_segment(req.lane, bytes, true);
            }
            self.note_segment(
                Some(TraceAction::SegmentMap),
                SegmentEventKind::Map,
                (t_ptr, bytes),
                req.stream_id,
                req.lane,
            );
            cand = self.index.map_front(target, bytes);
        }
    }

    /// The lowest run of the request's (stream, pool) segments that a growth can extend to
    /// `req.size` bytes: `(segment base, first slot)`.
    fn find_growth(&self, req: &Request<'_, B>) -> Option<(u64, u32)> {
        self.expandable
            .iter()
            .filter(|(_, e)| {
                e.stream_id == req.stream_id && e.pool == req.pool && e.lane == req.lane
            })
            .find_map(|(&base, _)| {
                let head = self.index.segments().get(&base)?.head;
                Some((base, self.index.find_expandable(head, req.size)?))
            })
    }

    /// `expandable_segments_trim:True` (memreuse's extension): unmaps whole free pages of
    /// the request's (stream, pool) segments, oldest free blocks first, up to the bytes the
    /// growth about to happen would map (the request less the free bytes of the run
    /// [`Self::find_growth`] finds now, whose free blocks are left alone; the whole request
    /// when there is no such run), rounded up to whole pages. Each
    /// segment's stream is synchronized before its first unmap, as for `empty_cache`.
    /// Returns the bytes unmapped; on an error the pages already unmapped are recorded and
    /// the rest stay free blocks, so the allocator stays consistent.
    pub(crate) fn trim_before_growth(
        &mut self,
        su: &Setup<B>,
        req: &Request<'_, B>,
    ) -> Result<u64, BackendError> {
        let same = |e: &ExpandableSegment<B::Stream>| {
            e.stream_id == req.stream_id && e.pool == req.pool && e.lane == req.lane
        };
        let Some(page) = self.expandable.values().find(|e| same(e)).map(|e| e.page) else {
            return Ok(0);
        };
        // The run the growth would use now: its free blocks are spared, and it needs the
        // request less those free bytes.
        let (spare, free_in_run) = self
            .find_growth(req)
            .map(|(_, cand)| self.index.spared_run(cand, req.size))
            .unwrap_or_default();
        let want = req.size.saturating_sub(free_in_run).next_multiple_of(page);
        if want == 0 {
            return Ok(0);
        }
        self.unmap_free_pages_of(su, |e| same(e), Some(want), true, &spare)
    }

    /// Reserves a new expandable segment for the request's (stream, pool).
    fn new_expandable_segment(
        &mut self,
        su: &Setup<B>,
        req: &Request<'_, B>,
    ) -> Result<Option<(u64, u32)>, BackendError> {
        let granularity = su.backend.vm_granularity()?;
        let page = Self::page_size(su, req.pool, granularity);
        let total = su.backend.memory_info().map_or(0, |m| m.total);
        let total = if total == 0 {
            UNKNOWN_CAPACITY_RESERVE
        } else {
            total
        };
        let size = total
            .saturating_add(total / 8)
            .min(MAX_RESERVE)
            .max(req.size)
            .checked_next_multiple_of(page)
            .unwrap_or(u64::MAX / page * page);
        let base = match su.backend.vm_reserve(size) {
            Ok(p) => p.addr(),
            Err(e) if e.is_out_of_memory() => return Ok(None),
            Err(e) => return Err(e),
        };
        self.note_segment(
            Some(TraceAction::SegmentReserve),
            SegmentEventKind::Reserve,
            (base, size),
            req.stream_id,
            req.lane,
        );
        let slot =
            self.index
                .add_expandable_segment_in(base, size, req.stream_id, req.lane, req.pool);
        self.expandable.insert(
            base,
            ExpandableSegment {
                stream_id: req.stream_id,
                pool: req.pool,
                lane: req.lane,
                stream: req.stream.clone(),
                page,
                pages: BTreeMap::new(),
            },
        );
        Ok(Some((base, slot)))
    }

    /// Maps `bytes` (whole pages) at `at` in the segment at `base`, one handle per page.
    /// `Ok(false)` on out of memory, after undoing this call's pages; other errors are
    /// returned after the same undo. The per-process limit is not checked here: as in
    /// PyTorch, `alloc_segment` checks it once, against the request's allocation size.
    fn map_pages(
        &mut self,
        su: &Setup<B>,
        base: u64,
        at: u64,
        bytes: u64,
    ) -> Result<bool, BackendError> {
        let page = self.expandable[&base].page;
        let mut done: Vec<(u64, PhysicalHandle)> = Vec::new();
        let mut failure = None;
        for addr in (at..at + bytes).step_by(usize::try_from(page).unwrap_or(usize::MAX)) {
            let handle = match su.backend.vm_create_physical(page) {
                Ok(h) => h,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            };
            if let Err(e) = su.backend.vm_map(DevicePtr(addr), handle) {
                if let Err(release) = su.backend.vm_release_physical(handle) {
                    tracing::warn!(%release, "memreuse allocator: a physical page that failed to map could not be released");
                }
                failure = Some(e);
                break;
            }
            self.counts.device_op(DeviceOp::Map);
            done.push((addr, handle));
        }
        let Some(e) = failure else {
            self.expandable
                .get_mut(&base)
                .expect("segment exists")
                .pages
                .extend(done);
            return Ok(true);
        };
        // Undo: the pages were never handed out, so no work uses them.
        for (addr, handle) in done {
            let undone = su
                .backend
                .vm_unmap(DevicePtr(addr), page)
                .and_then(|()| su.backend.vm_release_physical(handle));
            self.counts.device_op(DeviceOp::Unmap);
            if let Err(undo) = undone {
                tracing::error!(%undo, "memreuse allocator: could not undo a partial expandable-segment growth");
                return Err(undo);
            }
        }
        if e.is_out_of_memory() {
            Ok(false)
        } else {
            Err(e)
        }
    }

    /// Returns the segment at `base` to the device when nothing in it is mapped.
    fn release_if_unmapped(&mut self, su: &Setup<B>, base: u64) -> Result<(), BackendError> {
        let Some(head) = self.index.segments().get(&base).map(|s| s.head) else {
            return Ok(());
        };
        let b = self.index.block(head);
        if b.state != SlotState::Unmapped || !b.is_whole_segment() {
            return Ok(());
        }
        su.backend.vm_release(DevicePtr(base))?;
        let (size, stream) = (b.size, b.stream);
        self.index.remove_expandable_segment(head);
        let lane = self
            .expandable
            .remove(&base)
            .map_or(DEFAULT_LANE, |e| e.lane);
        self.note_segment(
            None,
            SegmentEventKind::Unreserve,
            (base, size),
            stream,
            lane,
        );
        Ok(())
    }

    /// Unmaps the whole free pages inside free blocks of expandable segments of `pool`
    /// (every pool when `None`), oldest free blocks first, until at least `target` bytes
    /// were unmapped (all of them when `None`); each segment's stream is synchronized
    /// before its first page is unmapped, and a segment left with nothing mapped is
    /// released. Returns the bytes unmapped.
    ///
    /// A live memory pool's segments are left alone (the allocator-wide release never
    /// touches them; [`Self::unmap_lane_pages`] is the pool's own).
    pub fn unmap_free_pages(
        &mut self,
        su: &Setup<B>,
        pool: Option<PoolKind>,
        target: Option<u64>,
    ) -> Result<u64, BackendError> {
        let kept: Vec<u32> = self
            .expandable
            .values()
            .map(|e| e.lane)
            .filter(|&l| !self.index.releasable(l))
            .collect();
        self.unmap_free_pages_of(
            su,
            |e| pool.is_none_or(|p| p == e.pool) && !kept.contains(&e.lane),
            target,
            false,
            &[],
        )
    }

    /// Unmaps every whole free page of the expandable segments of memory-pool `lane` (the
    /// pool's own `empty_cache`), releasing segments left with nothing mapped.
    pub(crate) fn unmap_lane_pages(
        &mut self,
        su: &Setup<B>,
        lane: u32,
    ) -> Result<u64, BackendError> {
        self.unmap_free_pages_of(su, |e| e.lane == lane, None, false, &[])
    }

    /// [`Self::unmap_free_pages`] over the segments `keep` selects, leaving the free blocks
    /// in `spare` alone. With `exact` (the trim before a growth), a block's pages are
    /// unmapped only up to the pages still missing from `target`, so the trim unmaps no
    /// more than the growth maps; without it, all whole pages of each block visited
    /// (PyTorch's release).
    fn unmap_free_pages_of(
        &mut self,
        su: &Setup<B>,
        keep: impl Fn(&ExpandableSegment<B::Stream>) -> bool,
        target: Option<u64>,
        exact: bool,
        spare: &[u32],
    ) -> Result<u64, BackendError> {
        let segments = self
            .expandable
            .iter()
            .filter(|(_, e)| keep(e))
            .map(|(&base, e)| (base, e.page));
        let work = self.index.unmap_work(segments, spare, target.is_some());
        let mut unmapped = 0u64;
        let mut synced: Vec<u64> = Vec::new();
        for w in work {
            if target.is_some_and(|t| unmapped >= t) {
                break;
            }
            let mut len = w.len;
            if exact && let Some(t) = target {
                let page = self.expandable[&w.base].page;
                len = len.min((t - unmapped).next_multiple_of(page));
            }
            if !synced.contains(&w.base) {
                su.backend
                    .synchronize_stream(&self.expandable[&w.base].stream)?;
                synced.push(w.base);
            }
            unmapped += self.unmap_range(su, w.base, w.slot, w.start, len)?;
        }
        for base in synced {
            self.release_if_unmapped(su, base)?;
        }
        Ok(unmapped)
    }

    /// Unmaps the pages `[start, start + len)` inside the free block in `slot` of the
    /// segment at `base`. On a failure the pages already unmapped are recorded as such and
    /// the error returned.
    fn unmap_range(
        &mut self,
        su: &Setup<B>,
        base: u64,
        slot: u32,
        start: u64,
        len: u64,
    ) -> Result<u64, BackendError> {
        let (page, stream, lane) = {
            let e = &self.expandable[&base];
            (e.page, e.stream_id, e.lane)
        };
        let mut done = 0u64;
        let mut failure = None;
        while done < len {
            let addr = start + done;
            let Some(&handle) = self.expandable[&base].pages.get(&addr) else {
                break;
            };
            if let Err(e) = su.backend.vm_unmap(DevicePtr(addr), page) {
                failure = Some(e);
                break;
            }
            self.counts.device_op(DeviceOp::Unmap);
            self.expandable
                .get_mut(&base)
                .expect("segment exists")
                .pages
                .remove(&addr);
            if let Err(e) = su.backend.vm_release_physical(handle) {
                // Unmapped, so the index must say so; the handle is lost to this process.
                tracing::error!(%e, "memreuse allocator: an unmapped page could not be released");
                failure.get_or_insert(e);
                done += page;
                break;
            }
            done += page;
        }
        if done > 0 {
            self.index.unmap_range(slot, start, done);
            self.counts.device_op(DeviceOp::Free);
            if lane != DEFAULT_LANE {
                self.count_pool_segment(lane, done, false);
            }
            self.note_segment(
                Some(TraceAction::SegmentUnmap),
                SegmentEventKind::Unmap,
                (start, done),
                stream,
                lane,
            );
        }
        failure.map_or(Ok(done), Err)
    }
}
