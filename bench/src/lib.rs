//! Shared pieces of the allocator benchmark (issue 2): a deterministic trace generator
//! and one adapter per allocator ("peer"), so the criterion bench (`benches/allocator.rs`)
//! and the summary table (`src/bin/summary.rs`) drive every peer through the same code.
//!
//! Peers:
//! - [`Memreuse`] over [`MockDevice`] with `backing: false`, and over [`ManualBackend`];
//! - [`CubeCl`]: `cubecl_server::memory_management::MemoryManagement` (cubecl-server
//!   0.11.3) in its `ExclusivePages` and `Adaptive` configurations, over [`NullStorage`],
//!   a `ComputeStorage` that hands out addresses without touching memory;
//! - [`Glibc`]: `std::alloc::System` (glibc `malloc`/`free`).
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

// ---------------------------------------------------------------------------------------
// RNG and trace
// ---------------------------------------------------------------------------------------

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and the same sequence everywhere.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` (53 bits).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `[lo, hi]` (Lemire's multiply-shift; the bias is below 2^-40 here).
    pub fn range_inclusive(&mut self, lo: u64, hi: u64) -> u64 {
        let span = hi - lo + 1;
        lo + ((u128::from(self.next_u64()) * u128::from(span)) >> 64) as u64
    }
}

/// One trace operation. Slots index a fixed table of live handles that every peer keeps
/// the same way, so "free a random live one" frees the same allocation in every peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Allocate `size` bytes into `slot` (empty before).
    Alloc {
        /// Slot receiving the handle.
        slot: u32,
        /// Requested bytes.
        size: u64,
    },
    /// Free the handle in `slot`.
    Free {
        /// Slot holding the handle.
        slot: u32,
    },
}

/// Parameters of the random trace (issue 2, workload b).
#[derive(Clone, Copy, Debug)]
pub struct TraceSpec {
    /// Generator seed.
    pub seed: u64,
    /// Random operations (the final drain of live allocations comes on top).
    pub ops: usize,
    /// At most this many allocations live at once; at the cap the op is always a free.
    pub max_live: usize,
    /// Probability that an op is an allocation while fewer than `max_live` are live.
    pub p_alloc: f64,
    /// Probability that an allocation is "small".
    pub p_small: f64,
    /// Small sizes: uniform in this inclusive range.
    pub small: (u64, u64),
    /// Large sizes: uniform in this inclusive range.
    pub large: (u64, u64),
}

impl TraceSpec {
    /// The trace of issue 2: 1,000,000 ops, 55% alloc while fewer than 200 are live,
    /// sizes 70% uniform in 512 B..=1 MiB and 30% uniform in 1 MiB..=64 MiB, seed 0x5EED.
    pub const ISSUE_2: TraceSpec = TraceSpec {
        seed: 0x5EED,
        ops: 1_000_000,
        max_live: 200,
        p_alloc: 0.55,
        p_small: 0.70,
        small: (512, MIB),
        large: (MIB, 64 * MIB),
    };
}

/// A generated trace and its own figures.
#[derive(Clone, Debug)]
pub struct Trace {
    /// Operations, random part then the drain (every allocation is freed by the end).
    pub ops: Vec<Op>,
    /// Number of allocations (= malloc+free pairs).
    pub allocs: u64,
    /// Number of slots the peers need.
    pub slots: usize,
    /// Peak of the live requested bytes: the lower bound of any allocator's footprint.
    pub live_peak_bytes: u64,
    /// Sum of all requested bytes.
    pub requested_bytes: u64,
}

impl Trace {
    /// Generates the trace of `spec`.
    pub fn generate(spec: &TraceSpec) -> Trace {
        let mut rng = SplitMix64::new(spec.seed);
        let mut live: Vec<u32> = Vec::with_capacity(spec.max_live);
        let mut free_slots: Vec<u32> = (0..spec.max_live as u32).rev().collect();
        let mut size_of = vec![0u64; spec.max_live];
        let mut ops = Vec::with_capacity(spec.ops + spec.max_live);
        let (mut allocs, mut live_bytes, mut live_peak_bytes, mut requested_bytes) =
            (0u64, 0u64, 0u64, 0u64);
        for _ in 0..spec.ops {
            // Draw the coin every time, so the sequence does not depend on the branch taken.
            let coin = rng.unit();
            let alloc = live.is_empty() || (live.len() < spec.max_live && coin < spec.p_alloc);
            if alloc {
                let (lo, hi) = if rng.unit() < spec.p_small {
                    spec.small
                } else {
                    spec.large
                };
                let size = rng.range_inclusive(lo, hi);
                let slot = free_slots.pop().expect("a slot is free below max_live");
                size_of[slot as usize] = size;
                live.push(slot);
                ops.push(Op::Alloc { slot, size });
                allocs += 1;
                requested_bytes += size;
                live_bytes += size;
                live_peak_bytes = live_peak_bytes.max(live_bytes);
            } else {
                let i = rng.range_inclusive(0, live.len() as u64 - 1) as usize;
                let slot = live.swap_remove(i);
                free_slots.push(slot);
                live_bytes -= size_of[slot as usize];
                ops.push(Op::Free { slot });
            }
        }
        // Drain: free what is left, oldest position first (part of the timed run, so
        // every timed allocation has its free).
        for slot in live.drain(..) {
            ops.push(Op::Free { slot });
        }
        Trace {
            ops,
            allocs,
            slots: spec.max_live,
            live_peak_bytes,
            requested_bytes,
        }
    }
}

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
}

impl PeerKind {
    /// Every peer, in table order.
    pub const ALL: [PeerKind; 5] = [
        PeerKind::MemreuseMock,
        PeerKind::MemreuseManual,
        PeerKind::CubeclExclusive,
        PeerKind::CubeclAdaptive,
        PeerKind::Glibc,
    ];

    /// Label in tables and criterion ids.
    pub fn label(self) -> &'static str {
        match self {
            PeerKind::MemreuseMock => "memreuse/mock(no backing, no detector)",
            PeerKind::MemreuseManual => "memreuse/ManualBackend",
            PeerKind::CubeclExclusive => "cubecl-0.11.3/ExclusivePages",
            PeerKind::CubeclAdaptive => "cubecl-0.11.3/Adaptive",
            PeerKind::Glibc => "glibc malloc/free",
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

/// A cubecl `ComputeStorage` that hands out fake addresses and never touches memory
/// (cubecl's own `BytesStorage` zeroes every byte, which would measure page faults).
/// Deallocations take effect at once (no deferral to `flush`), which can only lower
/// cubecl's reserved figures. Tracks the bytes held and their peak.
#[derive(Default)]
pub struct NullStorage {
    live: HashMap<StorageId, (u64, u64)>,
    next_addr: u64,
    allocated: u64,
    peak: u64,
    allocs: u64,
    deallocs: u64,
}

impl NullStorage {
    /// Peak of the bytes held.
    pub fn peak(&self) -> u64 {
        self.peak
    }

    /// `(page allocations, page deallocations)` so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.allocs, self.deallocs)
    }
}

impl ComputeStorage for NullStorage {
    /// The fake device address of the handle's range.
    type Resource = u64;

    fn alignment(&self) -> usize {
        CUBECL_ALIGNMENT as usize
    }

    fn get(&mut self, handle: &StorageHandle) -> Result<u64, IoError> {
        let (addr, _) = self
            .live
            .get(&handle.id)
            .copied()
            .expect("NullStorage::get on a deallocated id");
        Ok(addr + handle.offset())
    }

    fn alloc(&mut self, size: u64) -> Result<StorageHandle, IoError> {
        let id = StorageId::new();
        let addr = (1 << 40) + self.next_addr;
        self.next_addr += size.next_multiple_of(4096) + 4096;
        self.live.insert(id, (addr, size));
        self.allocated += size;
        self.peak = self.peak.max(self.allocated);
        self.allocs += 1;
        Ok(StorageHandle::new(
            id,
            StorageUtilization { offset: 0, size },
        ))
    }

    fn dealloc(&mut self, id: StorageId) {
        if let Some((_, size)) = self.live.remove(&id) {
            self.allocated -= size;
            self.deallocs += 1;
        }
    }

    fn flush(&mut self) {}

    fn bytes_allocated(&self) -> u64 {
        self.allocated
    }
}

/// cubecl-server 0.11.3 `MemoryManagement` over [`NullStorage`], reserving with
/// `PageUpdate::Allow` (periodic cleanup on every reservation, as the server does).
pub struct CubeCl {
    /// The memory management.
    pub mm: MemoryManagement<NullStorage>,
    failures: ErrorGraph,
}

impl CubeCl {
    /// A memory management with `config` on a device of [`CAPACITY`] bytes,
    /// [`CUBECL_MAX_PAGE`]-byte pages at most and [`CUBECL_ALIGNMENT`] alignment.
    pub fn new(config: MemoryConfiguration) -> Self {
        let props = MemoryDeviceProperties::new(CUBECL_MAX_PAGE, CUBECL_ALIGNMENT)
            .with_max_memory(CAPACITY);
        let mm = MemoryManagement::from_configuration(
            NullStorage::default(),
            &props,
            config,
            Arc::new(ServerLogger::default()),
            MemoryManagementOptions::new("bench"),
        );
        CubeCl {
            mm,
            failures: ErrorGraph::default(),
        }
    }

    /// `bytes_reserved` summed over cubecl's own memory report.
    pub fn report_reserved(&self) -> u64 {
        self.mm.memory_report().usage().bytes_reserved
    }
}

impl Peer for CubeCl {
    type Handle = ManagedMemoryHandle;

    #[inline]
    fn alloc(&mut self, size: u64) -> ManagedMemoryHandle {
        self.mm
            .reserve(size, PageUpdate::Allow, &mut self.failures)
            .expect("cubecl reserve")
    }

    #[inline]
    fn free(&mut self, handle: ManagedMemoryHandle) {
        drop(handle);
    }

    fn reserved_peak(&mut self) -> Option<u64> {
        // What the storage held at its peak: every page the pools kept, whatever pool.
        // (cubecl's report has per-pool `pages_peak` but no byte peak.)
        Some(self.mm.storage().peak())
    }

    fn reserved_now(&self) -> Option<u64> {
        Some(self.mm.bytes_allocated())
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

/// Times `n` pairs of `size` bytes.
pub fn time_pairs<P: Peer>(peer: &mut P, size: u64, n: u64) -> Duration {
    let t = Instant::now();
    for _ in 0..n {
        pair(peer, size);
    }
    t.elapsed()
}

/// Runs `trace` on `peer`; returns the time taken.
pub fn run_trace<P: Peer>(peer: &mut P, trace: &Trace) -> Duration {
    let mut slots: Vec<Option<P::Handle>> = (0..trace.slots).map(|_| None).collect();
    let t = Instant::now();
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
    let elapsed = t.elapsed();
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
