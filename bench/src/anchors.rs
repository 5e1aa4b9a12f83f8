//! CPU sub-allocator anchors: two well-known allocators doing the same bookkeeping
//! (best-fit-like placement of sizes in one address range), with no device, no streams and
//! no statistics, as a floor for the instruction counts.
//!
//! - [`OffsetAlloc`]: `offset-allocator` 0.2.0 (Sebastian Aaltonen's `OffsetAllocator`, a
//!   two-level bitmap of small-float size bins; offsets only, nothing written anywhere),
//!   counting in units of [`OFFSET_UNIT`] bytes (its sizes are `u32`; in bytes the 4 GiB
//!   range would run out on the trace).
//! - [`Rlsf`]: `rlsf` 0.2.3 (TLSF with eager split and merge). It writes its headers into
//!   the memory it manages, so it is given a `MAP_NORESERVE` anonymous arena at a fixed
//!   scale: **one arena byte per 16 device bytes** (a 4 KiB request is a 256-byte
//!   allocation; the 64 GiB device is a 4 GiB arena, whose pages are touched only where
//!   headers land). Its reserved figure is the highest end offset, scaled back by 16.
//!
//! Both report the highest end offset reached as their "reserved peak": the address range
//! they would need from a device.

use std::alloc::Layout;
use std::ptr::NonNull;

use offset_allocator::{Allocation, Allocator};
use rlsf::Tlsf;

use super::{CAPACITY, Peer};

/// Bytes per unit of the [`OffsetAlloc`] peer (every request is a multiple of 512 after
/// rounding up).
pub const OFFSET_UNIT: u64 = 256;

/// `offset-allocator` 0.2.0 over `u32::MAX` units of [`OFFSET_UNIT`] bytes.
pub struct OffsetAlloc {
    inner: Allocator<u32>,
    highest_end: u64,
}

impl OffsetAlloc {
    /// A fresh allocator over the whole `u32` range.
    pub fn new() -> Self {
        OffsetAlloc {
            inner: Allocator::new(u32::MAX),
            highest_end: 0,
        }
    }
}

impl Default for OffsetAlloc {
    fn default() -> Self {
        Self::new()
    }
}

impl Peer for OffsetAlloc {
    type Handle = (Allocation<u32>, u64);

    #[inline]
    fn alloc(&mut self, size: u64) -> (Allocation<u32>, u64) {
        let units = size.div_ceil(OFFSET_UNIT);
        let a = self
            .inner
            .allocate(u32::try_from(units).expect("size fits u32 units"))
            .expect("offset-allocator out of space");
        let end = (u64::from(a.offset) + units) * OFFSET_UNIT;
        self.highest_end = self.highest_end.max(end);
        (a, size)
    }

    #[inline]
    fn free(&mut self, (a, _): (Allocation<u32>, u64)) {
        self.inner.free(a);
    }

    fn reserved_peak(&mut self) -> Option<u64> {
        Some(self.highest_end)
    }

    fn reserved_now(&self) -> Option<u64> {
        None
    }
}

/// Arena bytes per device byte of the [`Rlsf`] peer: one per 16.
pub const RLSF_SCALE: u64 = 16;

/// rlsf's TLSF: 28 first-level classes (blocks up to 8 GiB with its 32-byte granularity),
/// 32 second-level classes.
type Tlsf28 = Tlsf<'static, u32, u32, 28, 32>;

/// `rlsf` 0.2.3 over a `MAP_NORESERVE` arena of `CAPACITY / RLSF_SCALE` bytes.
pub struct Rlsf {
    tlsf: Tlsf28,
    base: NonNull<u8>,
    len: usize,
    highest_end: u64,
}

impl Rlsf {
    /// A fresh TLSF over a fresh arena.
    pub fn new() -> Self {
        let len = (CAPACITY / RLSF_SCALE) as usize;
        // SAFETY: an anonymous private mapping with no address hint; the result is checked
        // against MAP_FAILED before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "mmap of the rlsf arena failed");
        let base = NonNull::new(p.cast::<u8>()).expect("mmap returned null");
        let mut tlsf = Tlsf28::new();
        let block = NonNull::slice_from_raw_parts(base, len);
        // SAFETY: the arena is a fresh mapping of `len` bytes, valid and unused until
        // `Drop` unmaps it after `tlsf` is gone; nothing else accesses it.
        let added = unsafe { tlsf.insert_free_block_ptr(block) };
        assert!(added.is_some(), "rlsf took the arena");
        Rlsf {
            tlsf,
            base,
            len,
            highest_end: 0,
        }
    }
}

impl Default for Rlsf {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Rlsf {
    fn drop(&mut self) {
        // Forget the TLSF's pointers into the arena before unmapping it.
        self.tlsf = Tlsf28::new();
        // SAFETY: `base`/`len` are exactly the mapping made in `new`, unmapped once; no
        // pointer into it is used afterwards (the peer's handles are all freed by then).
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

impl Peer for Rlsf {
    type Handle = NonNull<u8>;

    #[inline]
    fn alloc(&mut self, size: u64) -> NonNull<u8> {
        let scaled = (size / RLSF_SCALE).max(1) as usize;
        let layout = Layout::from_size_align(scaled, 16).expect("layout");
        let p = self.tlsf.allocate(layout).expect("rlsf out of arena");
        let end = (p.as_ptr() as u64 - self.base.as_ptr() as u64) + scaled as u64;
        self.highest_end = self.highest_end.max(end);
        p
    }

    #[inline]
    fn free(&mut self, p: NonNull<u8>) {
        // SAFETY: `p` came from `self.tlsf.allocate` with alignment 16 and is freed once.
        unsafe { self.tlsf.deallocate(p, 16) }
    }

    fn reserved_peak(&mut self) -> Option<u64> {
        Some(self.highest_end * RLSF_SCALE)
    }

    fn reserved_now(&self) -> Option<u64> {
        None
    }
}
