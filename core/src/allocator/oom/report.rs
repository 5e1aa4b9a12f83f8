//! The out-of-memory report: what observers receive ([`OomInfo`]) and the error's numbers
//! and message ([`OutOfMemory`]), in PyTorch's words.

use std::fmt;
use std::path::PathBuf;

use super::super::fragmentation::Fragmentation;
use super::culprits::{OomCulprits, fragmented_bytes};
use super::format::{FormatSize, write_list};
use super::rounding::Rounding;

/// What OOM observers receive (PyTorch's `(device, alloc_size, limit, device_free)` and
/// the allocator's own figures).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OomInfo {
    /// Device index.
    pub device: usize,
    /// Bytes the caller asked for.
    pub requested: u64,
    /// The per-process limit (`per_process_memory_fraction` x device total), if set.
    pub limit: Option<u64>,
    /// Free device memory as the device reported it at the failure (0 if it could not say).
    pub device_free: u64,
    /// Device capacity (0 if the device could not say).
    pub device_total: u64,
    /// Bytes allocated to callers.
    pub allocated: u64,
    /// Bytes reserved by the allocator (segments).
    pub reserved: u64,
}

/// The allocator could not provide memory even after its whole retry chain.
///
/// Carries the numbers of PyTorch's message, plus a fragmentation hint: the largest free
/// cached block against reserved-but-unallocated memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutOfMemory {
    /// Device index.
    pub device: usize,
    /// Bytes the caller asked for.
    pub requested: u64,
    /// Device capacity.
    pub device_total: u64,
    /// Free device memory at the failure.
    pub device_free: u64,
    /// Bytes allocated to callers.
    pub allocated: u64,
    /// Bytes reserved by the allocator but not allocated (cached free plus pending-free).
    pub reserved_unallocated: u64,
    /// The per-process limit, if one is set.
    pub limit: Option<u64>,
    /// Largest free block in the cache (any stream).
    pub largest_free_block: u64,
    /// Bytes of free cached blocks (pending-free blocks excluded).
    pub cached_free: u64,
    /// Fragmentation of the cached free blocks per pool at the failure.
    pub fragmentation: Fragmentation,
    /// What holds the unusable bytes: pending-free blocks per work and stream, shelves of
    /// works never waited (filled by the process groups' explainers).
    pub culprits: OomCulprits,
    /// How much device memory the request needed beyond its own size and why, when that
    /// is why it failed (its block would have fit in what the device had free).
    pub rounding: Option<Rounding>,
    /// The memory snapshot written at the failure (`MEMREUSE_OOM_SNAPSHOT`, or
    /// [`crate::CachingAllocator::set_oom_snapshot_path`]), if one was written.
    pub snapshot: Option<PathBuf>,
    /// The snapshot file that was asked for but could not be written, and why.
    pub snapshot_error: Option<(PathBuf, String)>,
}

impl fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "memreuse: device {d} out of memory. Tried to allocate {req}. Device {d} has a total capacity of {tot} of which {free} is free.",
            d = self.device,
            req = FormatSize(self.requested),
            tot = FormatSize(self.device_total),
            free = FormatSize(self.device_free),
        )?;
        if let Some(limit) = self.limit {
            write!(
                f,
                " This process is limited to {} (per_process_memory_fraction).",
                FormatSize(limit)
            )?;
        }
        write!(
            f,
            " Of the allocated memory {} is allocated by memreuse, and {} is reserved by memreuse but unallocated.",
            FormatSize(self.allocated),
            FormatSize(self.reserved_unallocated),
        )?;
        if let Some(r) = &self.rounding {
            write!(
                f,
                " This request of {} failed because {r}. To see which allocator settings fit the whole job, run `memreuse-conformance whatif` on a memory snapshot of it (MEMREUSE_OOM_SNAPSHOT writes one at the failure).",
                FormatSize(self.requested),
            )?;
        }
        if self.device_total > 0 {
            write!(
                f,
                " Device memory in use outside memreuse (total - free - reserved: communicator buffers, contexts, other libraries): {}.",
                FormatSize(self.outside_allocator()),
            )?;
        }
        if self.cached_free > 0 {
            write!(
                f,
                " Fragmentation of the cached free memory: {:.2} (small pool {:.2}, large pool {:.2}; 1 - largest free block / free cached bytes).",
                self.fragmentation_ratio(),
                self.fragmentation.small.ratio(),
                self.fragmentation.large.ratio(),
            )?;
        }
        self.write_culprits(f)?;
        if self.fragmented() {
            write!(
                f,
                " The largest cached free block is only {}: reserved but unallocated memory is fragmented; try setting max_split_size_mb in MEMREUSE_ALLOC_CONF to avoid fragmentation.",
                FormatSize(self.largest_free_block),
            )?;
        }
        if let Some((path, why)) = &self.snapshot_error {
            write!(
                f,
                " The memory snapshot could not be written to {}: {why}.",
                path.display()
            )?;
        }
        if let Some(path) = &self.snapshot {
            write!(
                f,
                " Memory snapshot written to {p}: python -m torch.cuda._memory_viz trace_plot {p} -o oom.html",
                p = path.display(),
            )?;
        }
        Ok(())
    }
}

impl OutOfMemory {
    /// The "unusable memory" part of the message: pending, shelved, fragmented, outside.
    fn write_culprits(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (small, large) = fragmented_bytes(&self.fragmentation);
        if self.culprits.is_empty() && small + large == 0 {
            return Ok(());
        }
        write!(f, " Unusable memory by cause:")?;
        if !self.culprits.pending.is_empty() {
            write_list(f, "pending", &self.culprits.pending)?;
            write!(
                f,
                " (when the request missed the cache: freed, but reusable only once those streams pass the free, so the allocator had to synchronize them; wait() on the work earlier)."
            )?;
        }
        if !self.culprits.shelved.is_empty() {
            write_list(f, "held on shelves", &self.culprits.shelved)?;
            write!(f, " (wait() on these works releases them).")?;
        }
        if small + large > 0 {
            write!(
                f,
                " cached but fragmented: {} in the small pool, {} in the large pool (free bytes outside each pool's largest block).",
                FormatSize(small),
                FormatSize(large),
            )?;
        }
        if self.device_total > 0 && self.outside_allocator() > 0 {
            write!(
                f,
                " outside the allocator (communicator buffers, contexts): {}.",
                FormatSize(self.outside_allocator()),
            )?;
        }
        Ok(())
    }

    /// Device memory in use that the allocator does not own: total - free - reserved
    /// (0 when the device could not say).
    pub fn outside_allocator(&self) -> u64 {
        self.device_total
            .saturating_sub(self.device_free)
            .saturating_sub(self.allocated + self.reserved_unallocated)
    }

    /// `1 - largest free block / free cached bytes` (0 with nothing cached).
    pub fn fragmentation_ratio(&self) -> f64 {
        if self.cached_free == 0 {
            0.0
        } else {
            1.0 - self.largest_free_block.min(self.cached_free) as f64 / self.cached_free as f64
        }
    }

    /// True when the cache holds enough unallocated memory for the request in total, but no
    /// single free block large enough: the failure is fragmentation, not exhaustion.
    pub fn fragmented(&self) -> bool {
        self.reserved_unallocated >= self.requested && self.largest_free_block < self.requested
    }
}

impl std::error::Error for OutOfMemory {}
