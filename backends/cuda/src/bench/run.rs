//! Peers and the two measurements: the cached pair and the trace replay.
//!
//! A peer is anything that allocates and frees device memory ([`BenchPeer`]); the runners
//! drive every peer through the same loops, so the figures differ only by the peer. The
//! memreuse peer is generic over the backend, so the runners are tested on the CPU with
//! `ManualBackend`; on a GPU it is [`CudaDevice`](crate::CudaDevice).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use memreuse_core::{
    AllocError, AllocatorConfig, Backend, BackendError, CachingAllocator, Storage,
};
use serde::Serialize;
use thiserror::Error;

use super::trace::{Op, Trace};

/// The `schema` field of every record.
pub const RECORD_SCHEMA: &str = "memreuse-gpu-bench/1";

/// Why a measurement failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum BenchError {
    /// A device call failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The caching allocator failed (out of memory after its retry chain, or a device call).
    #[error(transparent)]
    Alloc(Box<AllocError>),
}

impl From<AllocError> for BenchError {
    fn from(e: AllocError) -> BenchError {
        BenchError::Alloc(Box::new(e))
    }
}

/// A peer's memory figures since its last [`BenchPeer::reset_peaks`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerFigures {
    /// Peak of the bytes the peer held from the device, if it knows.
    pub peak_reserved_bytes: Option<u64>,
    /// Peak of the bytes handed out and not yet freed, as the peer counts them.
    pub peak_live_bytes: Option<u64>,
    /// Raw device allocations the peer made (`cuMemAlloc` calls), if it knows.
    pub device_allocs: Option<u64>,
}

/// An allocator under test.
pub trait BenchPeer {
    /// What an allocation returns.
    type Handle;
    /// The peer's name in records (`memreuse`, `raw-cuMemAlloc`).
    fn name(&self) -> &'static str;
    /// The calls measured, in words.
    fn api(&self) -> &'static str;
    /// Allocates `size` bytes.
    fn alloc(&mut self, size: u64) -> Result<Self::Handle, BenchError>;
    /// Frees an allocation.
    fn free(&mut self, handle: Self::Handle) -> Result<(), BenchError>;
    /// Waits for the device (the end of every timed region).
    fn synchronize(&mut self) -> Result<(), BenchError>;
    /// Returns cached memory to the device (before a cold measurement).
    fn release_cache(&mut self) -> Result<(), BenchError>;
    /// Starts a new measurement window for [`BenchPeer::figures`].
    fn reset_peaks(&mut self) -> Result<(), BenchError>;
    /// Called once, untimed, right after the op at which the trace's live bytes peak.
    fn at_live_peak(&mut self) -> Result<(), BenchError> {
        Ok(())
    }
    /// Figures since the last [`BenchPeer::reset_peaks`].
    fn figures(&mut self) -> PeerFigures;
}

/// One measurement, as one JSON line (the Python peers write the same fields).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Record {
    /// Always [`RECORD_SCHEMA`].
    pub schema: &'static str,
    /// `memreuse`, `raw-cuMemAlloc`, `torch-native` or `torch-cudaMallocAsync`.
    pub peer: String,
    /// The calls measured.
    pub api: String,
    /// `pair_4KiB`, `pair_2MiB`, `trace_cold` or `trace`.
    pub workload: String,
    /// What one iteration is: `pair` (malloc + free) or `op` (one trace line).
    pub unit: &'static str,
    /// Iterations timed.
    pub iterations: u64,
    /// Wall time of the timed loop, device synchronization at its end included.
    pub total_ns: u64,
    /// `total_ns / iterations`.
    pub ns_per_op: f64,
    /// Peak bytes held from the device during the loop (`null`: the peer does not know).
    pub peak_reserved_bytes: Option<u64>,
    /// Peak bytes handed out during the loop, as the peer counts them: rounded block sizes
    /// for memreuse (and PyTorch's `max_memory_allocated`), requested sizes for the raw
    /// driver peer.
    pub peak_live_bytes: Option<u64>,
    /// Peak live *requested* bytes of the trace replayed (trace workloads only).
    pub trace_live_peak_bytes: Option<u64>,
    /// Raw device allocations during the loop, if the peer knows.
    pub device_allocs: Option<u64>,
    /// Python peers: the same loop without the allocator calls, per iteration.
    pub python_loop_ns_per_op: Option<f64>,
    /// Python peers: the same loop calling Python no-op functions of the same arity
    /// instead of the allocator, per iteration (loop plus call overhead).
    pub python_call_ns_per_op: Option<f64>,
    /// Anything the reader must know to compare this figure.
    pub note: Option<String>,
}

/// A peer that could not run, as one JSON line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// Always [`RECORD_SCHEMA`].
    pub schema: &'static str,
    /// The peer.
    pub peer: String,
    /// Why it did not run.
    pub skipped: String,
}

fn record<P: BenchPeer>(
    peer: &mut P,
    workload: String,
    unit: &'static str,
    iterations: u64,
    elapsed: Duration,
) -> Record {
    let f = peer.figures();
    let total_ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
    Record {
        schema: RECORD_SCHEMA,
        peer: peer.name().to_owned(),
        api: peer.api().to_owned(),
        workload,
        unit,
        iterations,
        total_ns,
        ns_per_op: total_ns as f64 / iterations.max(1) as f64,
        peak_reserved_bytes: f.peak_reserved_bytes,
        peak_live_bytes: f.peak_live_bytes,
        trace_live_peak_bytes: None,
        device_allocs: f.device_allocs,
        python_loop_ns_per_op: None,
        python_call_ns_per_op: None,
        note: None,
    }
}

/// The workload name of a cached pair of `size` bytes (`pair_4KiB`, `pair_2MiB`).
pub fn pair_workload(size: u64) -> String {
    match size {
        s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("pair_{}MiB", s >> 20),
        s if s >= 1 << 10 && s % (1 << 10) == 0 => format!("pair_{}KiB", s >> 10),
        s => format!("pair_{s}B"),
    }
}

/// The cached pair: `warmup` untimed pairs, then `n` timed allocate+free pairs of `size`
/// bytes and one device synchronization.
pub fn run_pairs<P: BenchPeer>(
    peer: &mut P,
    size: u64,
    warmup: u64,
    n: u64,
) -> Result<Record, BenchError> {
    for _ in 0..warmup {
        let h = peer.alloc(size)?;
        peer.free(black_box(h))?;
    }
    peer.synchronize()?;
    peer.reset_peaks()?;
    let t = Instant::now();
    for _ in 0..n {
        let h = peer.alloc(size)?;
        peer.free(black_box(h))?;
    }
    peer.synchronize()?;
    let elapsed = t.elapsed();
    Ok(record(peer, pair_workload(size), "pair", n, elapsed))
}

/// Replays `trace` once (timed, device synchronization at the end included). The peer's
/// [`BenchPeer::at_live_peak`] runs untimed right after the trace's live peak.
pub fn run_trace<P: BenchPeer>(
    peer: &mut P,
    trace: &Trace,
    workload: &str,
) -> Result<Record, BenchError> {
    let mut slots: Vec<Option<P::Handle>> = (0..trace.slots).map(|_| None).collect();
    peer.synchronize()?;
    peer.reset_peaks()?;
    let mut paused = Duration::ZERO;
    let t = Instant::now();
    for (i, op) in trace.ops.iter().enumerate() {
        match *op {
            Op::Alloc { slot, size } => slots[slot as usize] = Some(peer.alloc(size)?),
            Op::Free { slot } => {
                let h = slots[slot as usize]
                    .take()
                    .expect("a validated trace frees live slots");
                peer.free(h)?;
            }
        }
        if i == trace.live_peak_op {
            let p = Instant::now();
            peer.at_live_peak()?;
            paused += p.elapsed();
        }
    }
    peer.synchronize()?;
    let elapsed = t.elapsed().saturating_sub(paused);
    let mut r = record(
        peer,
        workload.to_owned(),
        "op",
        trace.ops.len() as u64,
        elapsed,
    );
    r.trace_live_peak_bytes = Some(trace.live_peak_bytes);
    Ok(r)
}

/// memreuse's `CachingAllocator` on the backend's default stream.
pub struct MemreusePeer<B: Backend> {
    /// The allocator.
    pub allocator: Arc<CachingAllocator<B>>,
    stream: B::Stream,
    device_allocs_at_reset: u64,
}

impl<B: Backend> MemreusePeer<B> {
    /// An allocator over `backend` with `config`.
    pub fn new(backend: B, config: AllocatorConfig) -> Self {
        let stream = backend.default_stream();
        MemreusePeer {
            allocator: CachingAllocator::new(Arc::new(backend), config),
            stream,
            device_allocs_at_reset: 0,
        }
    }
}

impl<B: Backend> BenchPeer for MemreusePeer<B> {
    type Handle = Storage<B>;

    fn name(&self) -> &'static str {
        "memreuse"
    }

    fn api(&self) -> &'static str {
        "CachingAllocator::allocate + drop(Storage)"
    }

    #[inline]
    fn alloc(&mut self, size: u64) -> Result<Storage<B>, BenchError> {
        Ok(self.allocator.allocate(size, &self.stream)?)
    }

    #[inline]
    fn free(&mut self, handle: Storage<B>) -> Result<(), BenchError> {
        drop(handle);
        Ok(())
    }

    fn synchronize(&mut self) -> Result<(), BenchError> {
        Ok(self.allocator.backend().synchronize_device()?)
    }

    fn release_cache(&mut self) -> Result<(), BenchError> {
        Ok(self.allocator.empty_cache()?)
    }

    fn reset_peaks(&mut self) -> Result<(), BenchError> {
        self.allocator.reset_peak_stats();
        self.device_allocs_at_reset = self.allocator.stats().num_device_alloc;
        Ok(())
    }

    fn figures(&mut self) -> PeerFigures {
        let s = self.allocator.stats();
        PeerFigures {
            peak_reserved_bytes: Some(s.reserved_bytes.peak),
            peak_live_bytes: Some(s.allocated_bytes.peak),
            device_allocs: Some(s.num_device_alloc - self.device_allocs_at_reset),
        }
    }
}

/// Writes records as JSON lines.
pub fn write_json_lines<T: Serialize>(
    mut out: impl std::io::Write,
    records: &[T],
) -> std::io::Result<()> {
    for r in records {
        serde_json::to_writer(&mut out, r)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}
