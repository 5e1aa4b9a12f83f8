//! Shared pieces of the allocator benchmark (issue 2): a deterministic trace generator
//! and one adapter per allocator ("peer"), so the criterion bench (`benches/allocator.rs`)
//! and the summary table (`src/bin/summary.rs`) drive every peer through the same code.
//!
//! Peers:
//! - [`Memreuse`] over [`MockDevice`] with `backing: false`, and over [`ManualBackend`];
//! - [`CubeCl`]: `cubecl_server::memory_management::MemoryManagement` (cubecl-server
//!   0.11.3) in its `ExclusivePages` and `Adaptive` configurations, over [`NullStorage`],
//!   a `ComputeStorage` that hands out addresses without touching memory;
//! - [`Glibc`]: `std::alloc::System` (glibc `malloc`/`free`);
//! - [`OffsetAlloc`] and [`Rlsf`]: the CPU sub-allocator anchors `offset-allocator` 0.2.0
//!   and `rlsf` 0.2.3 (see `anchors.rs`).
//!
//! A "malloc+free pair" is one allocation of `size` bytes and, later, its release:
//! - memreuse: `CachingAllocator::allocate`, then dropping the returned `Storage`;
//! - cubecl: `MemoryManagement::reserve`, then dropping the returned handle (cubecl sees
//!   the slot free on its next reservation);
//! - glibc: `System.alloc`, then `System.dealloc`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cubecl_ir::MemoryDeviceProperties;
use cubecl_server::logging::ServerLogger;
use cubecl_server::memory_management::{
    ErrorGraph, ManagedMemoryHandle, MemoryConfiguration, MemoryManagement,
    MemoryManagementOptions, PageUpdate,
};
use cubecl_server::server::IoError;
use cubecl_server::storage::{ComputeStorage, StorageHandle, StorageId, StorageUtilization};
use memreuse_core::testing::ManualBackend;
use memreuse_core::{AllocatorConfig, Backend, CachingAllocator, Storage};
use memreuse_mock::{MockConfig, MockDevice};

/// KiB.
pub const KIB: u64 = 1 << 10;
/// MiB.
pub const MIB: u64 = 1 << 20;
/// GiB.
pub const GIB: u64 = 1 << 30;

/// Device capacity (address space) given to every device-like peer: nothing OOMs.
pub const CAPACITY: u64 = 64 * GIB;
/// `max_page_size` of the cubecl device: a quarter of the capacity, as the cubecl CUDA
/// runtime sizes it from the device's total memory.
pub const CUBECL_MAX_PAGE: u64 = CAPACITY / 4;
/// Offset alignment of the cubecl device (the CUDA/HIP runtimes' 32 bytes).
pub const CUBECL_ALIGNMENT: u64 = 32;

pub use anchors::{OFFSET_UNIT, OffsetAlloc, RLSF_SCALE, Rlsf};
pub use cubecl::{CubeCl, NullStorage};
pub use recorded::{parse_recorded, read_recorded};
pub use trace::{Op, SplitMix64, Trace, TraceSpec};

mod anchors;
mod cubecl;
mod recorded;
mod trace;

// ---------------------------------------------------------------------------------------
// Peers
// ---------------------------------------------------------------------------------------

/// An allocator under test.
pub trait Peer {
    /// What an allocation returns; dropping or passing it to [`Peer::free`] frees it.
    type Handle;
    /// Allocates `size` bytes.
    fn alloc(&mut self, size: u64) -> Self::Handle;
    /// Frees an allocation.
    fn free(&mut self, handle: Self::Handle);
    /// Peak of the bytes held from the device since creation, if the peer has a notion
    /// of it.
    fn reserved_peak(&mut self) -> Option<u64>;
    /// Bytes held from the device now, if the peer has a notion of it.
    fn reserved_now(&self) -> Option<u64>;
}

/// Which peer: used to build a fresh instance for each measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerKind {
    /// memreuse over the mock device, `backing: false`.
    MemreuseMock,
    /// memreuse over `ManualBackend`.
    MemreuseManual,
    /// cubecl `MemoryManagement`, `ExclusivePages`.
    CubeclExclusive,
    /// cubecl `MemoryManagement`, `Adaptive`.
    CubeclAdaptive,
    /// glibc malloc/free.
    Glibc,
    /// `offset-allocator` 0.2.0 (offsets only).
    OffsetAllocator,
    /// `rlsf` 0.2.3 (TLSF) over a 1/16-scale arena.
    Rlsf,
}

impl PeerKind {
    /// Every peer, in table order.
    pub const ALL: [PeerKind; 7] = [
        PeerKind::MemreuseMock,
        PeerKind::MemreuseManual,
        PeerKind::CubeclExclusive,
        PeerKind::CubeclAdaptive,
        PeerKind::Glibc,
        PeerKind::OffsetAllocator,
        PeerKind::Rlsf,
    ];

    /// Label in tables and criterion ids.
    pub fn label(self) -> &'static str {
        match self {
            PeerKind::MemreuseMock => "memreuse/mock(no backing, no detector)",
            PeerKind::MemreuseManual => "memreuse/ManualBackend",
            PeerKind::CubeclExclusive => "cubecl-0.11.3/ExclusivePages",
            PeerKind::CubeclAdaptive => "cubecl-0.11.3/Adaptive",
            PeerKind::Glibc => "glibc malloc/free",
            PeerKind::OffsetAllocator => "offset-allocator-0.2.0 (offsets only)",
            PeerKind::Rlsf => "rlsf-0.2.3 TLSF (arena 1/16)",
        }
    }

    /// Short id for criterion.
    pub fn id(self) -> &'static str {
        match self {
            PeerKind::MemreuseMock => "memreuse_mock",
            PeerKind::MemreuseManual => "memreuse_manual",
            PeerKind::CubeclExclusive => "cubecl_exclusive",
            PeerKind::CubeclAdaptive => "cubecl_adaptive",
            PeerKind::Glibc => "glibc",
            PeerKind::OffsetAllocator => "offset_allocator",
            PeerKind::Rlsf => "rlsf",
        }
    }
}

/// Calls `f` with a fresh peer of `kind` (a generic callback, since the peers' handle
/// types differ).
pub fn with_peer<R>(kind: PeerKind, f: impl PeerFn<R>) -> R {
    match kind {
        PeerKind::MemreuseMock => f.call(Memreuse::mock()),
        PeerKind::MemreuseManual => f.call(Memreuse::manual()),
        PeerKind::CubeclExclusive => f.call(CubeCl::new(MemoryConfiguration::ExclusivePages)),
        PeerKind::CubeclAdaptive => f.call(CubeCl::new(MemoryConfiguration::Adaptive)),
        PeerKind::Glibc => f.call(Glibc),
        PeerKind::OffsetAllocator => f.call(OffsetAlloc::new()),
        PeerKind::Rlsf => f.call(Rlsf::new()),
    }
}

/// A callback generic over the peer type, for [`with_peer`].
pub trait PeerFn<R> {
    /// Runs on `peer`.
    fn call<P: Peer>(self, peer: P) -> R;
}

/// memreuse's `CachingAllocator` (default configuration) on the default stream of `B`.
pub struct Memreuse<B: Backend> {
    /// The allocator.
    pub allocator: Arc<CachingAllocator<B>>,
    stream: B::Stream,
}

impl<B: Backend> Memreuse<B> {
    /// An allocator over `backend` with the default configuration (what the bench uses).
    pub fn new(backend: B) -> Self {
        Memreuse::with_config(backend, AllocatorConfig::default())
    }

    /// An allocator over `backend` with `config` (for diagnostics in the `pairs` binary).
    pub fn with_config(backend: B, config: AllocatorConfig) -> Self {
        let stream = backend.default_stream();
        let allocator = CachingAllocator::new(Arc::new(backend), config);
        Memreuse { allocator, stream }
    }
}

impl Memreuse<MockDevice> {
    /// Over a mock device of [`CAPACITY`] bytes with `backing: false` and
    /// `race_detection: false`: the mock then only hands out addresses, so the figure is
    /// the allocator's bookkeeping plus the mock's raw malloc/free, not the race detector's
    /// per-allocation annotations (which no real device does).
    pub fn mock() -> Self {
        let config = MockConfig {
            backing: false,
            race_detection: false,
            ..MockConfig::with_capacity(CAPACITY)
        };
        Memreuse::new(MockDevice::new(config).expect("mock device"))
    }
}

impl Memreuse<ManualBackend> {
    /// Over a `ManualBackend` of [`CAPACITY`] bytes.
    pub fn manual() -> Self {
        Memreuse::new(ManualBackend::new(CAPACITY))
    }
}

impl<B: Backend> Peer for Memreuse<B> {
    type Handle = Storage<B>;

    #[inline]
    fn alloc(&mut self, size: u64) -> Storage<B> {
        self.allocator
            .allocate(size, &self.stream)
            .expect("memreuse allocate")
    }

    #[inline]
    fn free(&mut self, handle: Storage<B>) {
        drop(handle);
    }

    fn reserved_peak(&mut self) -> Option<u64> {
        Some(self.allocator.stats().reserved_bytes.peak)
    }

    fn reserved_now(&self) -> Option<u64> {
        Some(self.allocator.stats().reserved_bytes.current)
    }
}

/// glibc `malloc`/`free` through `std::alloc::System` (16-byte alignment: plain `malloc`).
pub struct Glibc;

impl Peer for Glibc {
    type Handle = (*mut u8, Layout);

    #[inline]
    fn alloc(&mut self, size: u64) -> (*mut u8, Layout) {
        let layout = Layout::from_size_align(size as usize, 16).expect("layout");
        // SAFETY: `layout` has a non-zero size (every request is at least 512 bytes).
        let p = unsafe { System.alloc(layout) };
        assert!(!p.is_null(), "malloc({size}) failed");
        (p, layout)
    }

    #[inline]
    fn free(&mut self, (p, layout): (*mut u8, Layout)) {
        // SAFETY: `p` came from `System.alloc(layout)` and is freed once.
        unsafe { System.dealloc(p, layout) }
    }

    fn reserved_peak(&mut self) -> Option<u64> {
        None
    }

    fn reserved_now(&self) -> Option<u64> {
        None
    }
}

// ---------------------------------------------------------------------------------------
// Drivers
// ---------------------------------------------------------------------------------------

/// One malloc+free pair of `size` bytes.
#[inline]
pub fn pair<P: Peer>(peer: &mut P, size: u64) {
    let h = peer.alloc(size);
    let h = black_box(h);
    peer.free(h);
}

/// Wall-clock and process CPU time of one measurement.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// Wall-clock time.
    pub wall: Duration,
    /// CPU time of the process (`CLOCK_PROCESS_CPUTIME_ID`): on a machine loaded by other
    /// jobs it counts only the time this process ran, so it decides ratios, not wall time.
    pub cpu: Duration,
}

/// CPU time consumed by this process so far (`CLOCK_PROCESS_CPUTIME_ID`).
pub fn cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &raw mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Starts a [`Timing`] measurement; `finish` it at the end.
struct Stopwatch(Instant, Duration);

impl Stopwatch {
    fn start() -> Self {
        Stopwatch(Instant::now(), cpu_time())
    }

    fn finish(self) -> Timing {
        Timing {
            wall: self.0.elapsed(),
            cpu: cpu_time().saturating_sub(self.1),
        }
    }
}

/// Times `n` pairs of `size` bytes.
pub fn time_pairs<P: Peer>(peer: &mut P, size: u64, n: u64) -> Timing {
    let t = Stopwatch::start();
    for _ in 0..n {
        pair(peer, size);
    }
    t.finish()
}

/// Runs `trace` on `peer`; returns the time taken.
pub fn run_trace<P: Peer>(peer: &mut P, trace: &Trace) -> Timing {
    let mut slots: Vec<Option<P::Handle>> = (0..trace.slots).map(|_| None).collect();
    let t = Stopwatch::start();
    for op in &trace.ops {
        match *op {
            Op::Alloc { slot, size } => {
                let h = peer.alloc(size);
                slots[slot as usize] = Some(h);
            }
            Op::Free { slot } => {
                let h = slots[slot as usize]
                    .take()
                    .expect("trace frees a live slot");
                peer.free(h);
            }
        }
    }
    let elapsed = t.finish();
    debug_assert!(slots.iter().all(Option::is_none));
    elapsed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small_spec() -> TraceSpec {
        TraceSpec {
            ops: 20_000,
            ..TraceSpec::ISSUE_2
        }
    }

    #[test]
    fn trace_is_deterministic_and_well_formed() {
        let spec = small_spec();
        let t = Trace::generate(&spec);
        assert_eq!(t.ops, Trace::generate(&spec).ops);
        let mut live = vec![None; t.slots];
        let (mut n_live, mut max_live, mut bytes, mut peak, mut allocs) = (0, 0, 0, 0, 0);
        for op in &t.ops {
            match *op {
                Op::Alloc { slot, size } => {
                    assert!(live[slot as usize].is_none());
                    let small = (spec.small.0..=spec.small.1).contains(&size);
                    let large = (spec.large.0..=spec.large.1).contains(&size);
                    assert!(small || large, "size {size} out of range");
                    live[slot as usize] = Some(size);
                    n_live += 1;
                    allocs += 1;
                    bytes += size;
                    max_live = max_live.max(n_live);
                    peak = peak.max(bytes);
                }
                Op::Free { slot } => {
                    bytes -= live[slot as usize].take().expect("free of a live slot");
                    n_live -= 1;
                }
            }
        }
        assert_eq!(n_live, 0);
        assert_eq!(max_live, spec.max_live);
        assert_eq!(allocs, t.allocs);
        assert_eq!(peak, t.live_peak_bytes);
        assert!(
            t.ops.len() - spec.ops <= spec.max_live,
            "drain frees at most max_live"
        );
    }

    struct Check<'a>(&'a Trace);

    impl PeerFn<()> for Check<'_> {
        fn call<P: Peer>(self, mut peer: P) {
            for size in [4 * KIB, 2 * MIB] {
                pair(&mut peer, size);
            }
            run_trace(&mut peer, self.0);
            if let Some(peak) = peer.reserved_peak() {
                assert!(peak >= self.0.live_peak_bytes, "peak below the live bytes");
            }
        }
    }

    #[test]
    fn every_peer_runs_the_trace() {
        let t = Trace::generate(&small_spec());
        for kind in PeerKind::ALL {
            with_peer(kind, Check(&t));
        }
    }

    #[test]
    fn null_storage_tracks_bytes() {
        let mut s = NullStorage::default();
        let a = s.alloc(100).unwrap();
        let b = s.alloc(50).unwrap();
        assert_eq!(s.bytes_allocated(), 150);
        s.dealloc(a.id);
        assert_eq!((s.bytes_allocated(), s.peak()), (50, 150));
        assert_ne!(s.get(&b).unwrap(), 0);
        assert_eq!(s.counts(), (2, 1));
    }
}
