//! The part of an out-of-memory message that names the rounding (issue 30): when a request
//! needs more device memory than its own size, and the difference is why it failed.
//!
//! A request of 1-10 MiB takes a whole 20 MiB large-pool segment, one of at most 1 MiB a
//! 2 MiB small-pool segment, an expandable segment grows by whole pages, and
//! `roundup_power2_divisions` rounds the block itself up. Without saying so, a message like
//! "12 MiB requested, 10 MiB free, 8 MiB cached" leaves the reader to guess.

use std::fmt;

use super::super::config::AllocatorConfig;
use super::super::sizes::{MIN_BLOCK_SIZE, MIN_LARGE_ALLOC, PoolKind, SMALL_BUFFER, SMALL_SIZE};
use super::format::FormatSize;

/// Why a request needed more than its own size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RoundingCause {
    /// A request of at most 1 MiB is served from a 2 MiB small-pool segment.
    SmallSegment,
    /// A request between 1 and 10 MiB is served from a 20 MiB large-pool segment.
    LargeSegment {
        /// The segment size.
        segment: u64,
    },
    /// A request of 10 MiB or more takes a segment rounded up to a multiple of 2 MiB.
    LargeRound,
    /// An expandable segment maps whole pages.
    ExpandablePage {
        /// The page size of the request's pool.
        page: u64,
    },
    /// `roundup_power2_divisions` rounded the block up.
    PowerOfTwoDivisions {
        /// The divisions configured for the request's size.
        divisions: u64,
        /// The block size after that rounding.
        block: u64,
    },
}

/// How much device memory a request needed beyond its own size, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rounding {
    /// Bytes the allocator had to get from the device for the request (for an expandable
    /// segment: at most this much, the request's block rounded up to whole pages).
    pub needed: u64,
    /// The causes, in the order they apply (block rounding first).
    pub causes: Vec<RoundingCause>,
}

/// What one request asked of the device, as the malloc chain computed it.
pub(crate) struct Ask {
    pub requested: u64,
    /// The block size after rounding.
    pub size: u64,
    pub pool: PoolKind,
    /// The segment size an ordinary segment would take.
    pub alloc_size: u64,
}

impl Rounding {
    /// The rounding of `ask` under `config` (`granularity`: the backend's mapping unit),
    /// when it is why the request failed: the request itself (rounded to 512 bytes only)
    /// would have fit in `available` device bytes (plus, for an expandable segment, the largest free cached block it can
    /// grow, `growable`), but what it needed did not. `None` otherwise.
    pub(crate) fn explain(
        config: &AllocatorConfig,
        granularity: u64,
        ask: &Ask,
        available: u64,
        growable: u64,
    ) -> Option<Rounding> {
        let mut causes = Vec::new();
        let plain = ask
            .requested
            .max(1)
            .div_ceil(MIN_BLOCK_SIZE)
            .saturating_mul(MIN_BLOCK_SIZE);
        if ask.size > plain {
            let interval = super::super::sizes::roundup_interval(ask.requested);
            causes.push(RoundingCause::PowerOfTwoDivisions {
                divisions: config.roundup_power2_divisions[interval],
                block: ask.size,
            });
        }
        let (needed, fits) = if config.expandable_segments {
            let page = match ask.pool {
                PoolKind::Small => SMALL_BUFFER,
                PoolKind::Large => config.expandable_segments_page_size,
            };
            let granularity = granularity.max(1);
            let page = page.max(granularity).next_multiple_of(granularity);
            let needed = ask.size.checked_next_multiple_of(page).unwrap_or(u64::MAX);
            if needed > ask.size {
                causes.push(RoundingCause::ExpandablePage { page });
            }
            (needed, available.saturating_add(growable) >= plain)
        } else {
            if ask.size <= SMALL_SIZE {
                causes.push(RoundingCause::SmallSegment);
            } else if ask.size < MIN_LARGE_ALLOC {
                causes.push(RoundingCause::LargeSegment {
                    segment: ask.alloc_size,
                });
            } else if ask.alloc_size > ask.size {
                causes.push(RoundingCause::LargeRound);
            }
            (ask.alloc_size, available >= plain)
        };
        (!causes.is_empty() && fits && available < needed).then_some(Rounding { needed, causes })
    }
}

impl fmt::Display for RoundingCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RoundingCause::SmallSegment => write!(
                f,
                "a request of at most 1 MiB is served from a 2.00 MiB small-pool segment (fixed, as in PyTorch)"
            ),
            RoundingCause::LargeSegment { segment } => write!(
                f,
                "a request between 1 and 10 MiB is served from a {} large-pool segment (PyTorch's rule); expandable_segments:True with expandable_segments_page_size_mb:2 maps only the 2 MiB pages it needs",
                FormatSize(segment)
            ),
            RoundingCause::LargeRound => write!(
                f,
                "a request of 10 MiB or more takes a segment rounded up to a multiple of 2.00 MiB (fixed, as in PyTorch)"
            ),
            RoundingCause::ExpandablePage { page } => write!(
                f,
                "expandable segments map whole {} pages; a smaller expandable_segments_page_size_mb (2 maps the least) needs less",
                FormatSize(page)
            ),
            RoundingCause::PowerOfTwoDivisions { divisions, block } => write!(
                f,
                "roundup_power2_divisions ({divisions} for this size) rounded the block up to {}; fewer divisions for this size round less",
                FormatSize(block)
            ),
        }
    }
}

impl fmt::Display for Rounding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "it needed {} from the device: ", FormatSize(self.needed))?;
        for (i, cause) in self.causes.iter().enumerate() {
            if i > 0 {
                write!(f, "; ")?;
            }
            write!(f, "{cause}")?;
        }
        Ok(())
    }
}
