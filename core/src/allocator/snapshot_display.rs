//! A short human summary of a [`Snapshot`] (its `Display`): what a program prints after
//! taking one, before reaching for the viewer.

use std::fmt;

use super::oom::FormatSize;
use super::snapshot::{BlockState, SegmentType, Snapshot};

/// Bytes and blocks of one kind.
#[derive(Default)]
struct Tally {
    bytes: u64,
    blocks: u64,
}

impl Tally {
    fn add(&mut self, bytes: u64) {
        self.bytes = self.bytes.saturating_add(bytes);
        self.blocks += 1;
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = if self.blocks == 1 { "" } else { "s" };
        write!(f, "{} in {} block{s}", FormatSize(self.bytes), self.blocks)
    }
}

/// ```text
/// snapshot: 3 segments, 42.00 MiB reserved (small pool 2.00 MiB, large pool 40.00 MiB)
///   allocated     12.00 MiB in 5 blocks (requested 11.50 MiB)
///   pending free  2.00 MiB in 1 block
///   free          28.00 MiB in 4 blocks, largest 20.00 MiB
///   trace         120 entries
/// ```
///
/// Pending-free blocks are freed by the program but still used by another stream; the
/// figures are summed over the segments (each mapped run of an expandable segment counts
/// as one, as in PyTorch's snapshot).
impl fmt::Display for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (mut small, mut large) = (0u64, 0u64);
        let (mut allocated, mut pending, mut free) =
            (Tally::default(), Tally::default(), Tally::default());
        let (mut requested, mut largest_free) = (0u64, 0u64);
        for seg in &self.segments {
            match seg.segment_type {
                SegmentType::Small => small = small.saturating_add(seg.total_size),
                SegmentType::Large => large = large.saturating_add(seg.total_size),
            }
            for b in &seg.blocks {
                match b.state {
                    BlockState::ActiveAllocated => {
                        allocated.add(b.size);
                        requested = requested.saturating_add(b.requested_size);
                    }
                    BlockState::ActivePendingFree => pending.add(b.size),
                    BlockState::Inactive => {
                        free.add(b.size);
                        largest_free = largest_free.max(b.size);
                    }
                }
            }
        }
        let n = self.segments.len();
        writeln!(
            f,
            "snapshot: {n} segment{}, {} reserved (small pool {}, large pool {})",
            if n == 1 { "" } else { "s" },
            FormatSize(small.saturating_add(large)),
            FormatSize(small),
            FormatSize(large),
        )?;
        writeln!(
            f,
            "  allocated     {allocated} (requested {})",
            FormatSize(requested)
        )?;
        writeln!(f, "  pending free  {pending}")?;
        write!(f, "  free          {free}")?;
        if free.blocks > 0 {
            write!(f, ", largest {}", FormatSize(largest_free))?;
        }
        write!(f, "\n  trace         {} entries", self.traces.len())
    }
}
