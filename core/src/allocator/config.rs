//! The allocator's configuration string, in PyTorch's `PYTORCH_ALLOC_CONF` syntax (which
//! variable it is read from: `config_env.rs`).
//!
//! Comma-separated `key:value` pieces; the value of `roundup_power2_divisions` may be a
//! bracketed list whose own commas do not separate pieces. Every malformed string is a typed
//! [`ConfigError`] naming the key and what is valid; nothing is silently clamped or ignored
//! (PyTorch clamps `max_split_size_mb` up to 20 and ignores a GC threshold without a memory
//! fraction: memreuse rejects both).

use thiserror::Error;

use super::config_keys::{
    KeyOrigin, NPU_LAZY_RECLAIM_KEY, NPU_PAGE_SIZE_1G, NPU_PAGE_SIZE_KEY, canonical_key,
    known_unsupported,
};
use super::sizes::ROUNDUP_INTERVALS;
use crate::error::clip;

/// A key or value for a message: as written in backticks, or cut to 64 characters (with
/// its length) when longer, so a hostile 100 KB value cannot make the message huge.
fn shown(v: &str) -> String {
    if v.chars().nth(64).is_none() {
        format!("`{v}`")
    } else {
        clip(v)
    }
}

/// memreuse's own configuration variable, the first [`AllocatorConfig::from_env`] reads (it
/// wins over PyTorch's names). Error messages of [`AllocatorConfig::parse`] start with it.
pub const ALLOC_CONF_ENV: &str = "MEMREUSE_ALLOC_CONF";

/// The keys [`AllocatorConfig::parse`] accepts, as listed in error messages.
pub const VALID_KEYS: &str = "max_split_size_mb, garbage_collection_threshold, \
     roundup_power2_divisions, per_process_memory_fraction, lazy_reclaim, expandable_segments, \
     expandable_segments_page_size_mb, expandable_segments_trim, release_lock_on_cudamalloc \
     (also spelled release_lock_on_hipmalloc); torch_npu's multi_stream_lazy_reclaim, \
     page_size:1g and release_lock_on_npumalloc";

/// Capacity of the trace ring buffer [`AllocatorConfig::with_trace_capacity`] callers
/// typically ask for, in entries (PyTorch's `_record_memory_history` default `max_entries`
/// is larger; 16384 keeps a few seconds of a training step). Not the default: tracing is
/// off unless enabled, as in PyTorch, because it reads the clock on every alloc and free.
pub const DEFAULT_TRACE_CAPACITY: usize = 16384;

/// Allocator settings. [`Default`] is PyTorch's default behaviour.
#[derive(Clone, Debug, PartialEq)]
// Each flag is one independent key of PyTorch's configuration string, named as PyTorch
// names it; an enum of states would not be the user's vocabulary.
#[allow(clippy::struct_excessive_bools)]
pub struct AllocatorConfig {
    /// Blocks of at least this many bytes are "oversize": never split, never handed to a
    /// smaller request. `u64::MAX` (the default) disables the rule.
    pub max_split_size: u64,
    /// Garbage-collect cached blocks once reserved memory passes this fraction of the
    /// per-process limit. Only valid together with `per_process_memory_fraction`.
    pub garbage_collection_threshold: Option<f64>,
    /// Divisions per power-of-two interval (index 0 = below 2 MiB, then one per power of two
    /// up to 32 GiB and above); 0 or 1 means plain 512-byte rounding.
    pub roundup_power2_divisions: [u64; ROUNDUP_INTERVALS],
    /// Limit the device memory this allocator reserves to this fraction of the device total.
    pub per_process_memory_fraction: Option<f64>,
    /// torch_npu's `multi_stream_lazy_reclaim`: process completed events at malloc only when
    /// more than 512 are pending or no cached block fits.
    pub lazy_reclaim: bool,
    /// PyTorch's `expandable_segments`: one segment per (stream, pool) reserves a virtual
    /// range and maps physical pages as blocks need them, so reserved memory follows live
    /// memory. Needs a backend with the `virtual_memory` capability
    /// ([`crate::Capabilities::virtual_memory`]); [`crate::allocator::CachingAllocator::try_new`]
    /// refuses it on one without.
    pub expandable_segments: bool,
    /// Bytes of one large-pool page of an expandable segment (key
    /// `expandable_segments_page_size_mb`, a whole number of MiB, only with
    /// `expandable_segments:True`); default 20 MiB, PyTorch's `kLargeBuffer` (torch_npu's
    /// `page_size:1g` is 1024). It must be a multiple of the backend's mapping granularity:
    /// [`crate::allocator::CachingAllocator::try_new`] refuses it otherwise
    /// ([`ConfigError::PageSize`]). Small-pool pages are 2 MiB.
    pub expandable_segments_page_size: u64,
    /// memreuse's extension, not PyTorch's (key `expandable_segments_trim:True|False`, only
    /// with `expandable_segments:True`; default off, which keeps PyTorch's behaviour): before
    /// an expandable segment maps new pages for a request, it first unmaps whole free pages
    /// of the same (stream, pool) segment, oldest free blocks first, up to the bytes about to
    /// be mapped, so reserved memory follows live memory without `empty_cache`. The price
    /// is a synchronization of that segment's stream and one unmap (and later one map) per
    /// page at each such growth; see `docs/expandable-segments.md`.
    pub expandable_segments_trim: bool,
    /// PyTorch's `release_lock_on_cudamalloc` (torch_npu: `release_lock_on_npumalloc`;
    /// default off): a new segment is obtained from the device without the allocator's lock,
    /// so other threads' cached allocations go on meanwhile (see
    /// [`crate::allocator::CachingAllocator::set_release_lock_on_malloc`], which can also
    /// change it at run time). Expandable segments keep the lock, as in PyTorch.
    pub release_lock_on_malloc: bool,
    /// Capacity of the trace ring buffer (entries); 0 (the default) disables tracing, as
    /// PyTorch's `_record_memory_history` is off by default: a trace entry costs a clock
    /// read, about a fifth of a cached malloc+free pair. Enable it with
    /// [`AllocatorConfig::with_trace_capacity`] (e.g. [`DEFAULT_TRACE_CAPACITY`]). Not
    /// settable from the string.
    pub trace_capacity: usize,
}

impl Default for AllocatorConfig {
    fn default() -> Self {
        AllocatorConfig {
            max_split_size: u64::MAX,
            garbage_collection_threshold: None,
            roundup_power2_divisions: [0; ROUNDUP_INTERVALS],
            per_process_memory_fraction: None,
            lazy_reclaim: false,
            expandable_segments: false,
            expandable_segments_page_size: super::sizes::LARGE_BUFFER,
            expandable_segments_trim: false,
            release_lock_on_malloc: false,
            trace_capacity: 0,
        }
    }
}

/// [`AllocatorConfig::parse`], so `"expandable_segments:True".parse::<AllocatorConfig>()`
/// works as it does for [`crate::ReuseMode`].
impl std::str::FromStr for AllocatorConfig {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, ConfigError> {
        Self::parse(s)
    }
}

/// A malformed configuration string. Each variant names the key (or the piece) and what is
/// valid.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A key memreuse does not know.
    #[error(
        "{ALLOC_CONF_ENV}: unknown key {} (valid keys: {VALID_KEYS})",
        shown(key)
    )]
    UnknownKey {
        /// The key as written.
        key: String,
    },
    /// A key PyTorch or torch_npu accepts that memreuse does not implement (not a typo).
    #[error(
        "{ALLOC_CONF_ENV}: key {} is known ({}) but not supported by memreuse: remove it (memreuse's keys: {VALID_KEYS})",
        shown(key),
        origin.describe()
    )]
    KnownUnsupported {
        /// The key as written.
        key: String,
        /// Which allocator accepts it.
        origin: KeyOrigin,
    },
    /// An error in a variable other than [`ALLOC_CONF_ENV`]: the message names that variable
    /// instead (built by [`crate::allocator::ChosenConf::parse`]).
    #[error("{}", error.to_string().replacen(ALLOC_CONF_ENV, variable, 1))]
    InVariable {
        /// The variable the string was read from.
        variable: &'static str,
        /// What was wrong with it.
        error: Box<ConfigError>,
    },
    /// A piece without `:` between key and value.
    #[error(
        "{ALLOC_CONF_ENV}: {} has no value: write `KEY:VALUE` (valid keys: {VALID_KEYS})",
        shown(key)
    )]
    MissingColon {
        /// The piece as written (taken as the key).
        key: String,
    },
    /// An empty piece (`a:1,,b:2`, or a trailing comma).
    #[error(
        "{ALLOC_CONF_ENV}: empty piece {} (pieces are `key:value` separated by single commas)",
        after.as_ref().map_or_else(|| "at the start".to_owned(), |k| format!("after key {}", shown(k)))
    )]
    EmptyPiece {
        /// The key of the piece before the empty one, if any.
        after: Option<String>,
    },
    /// A value that is not a number of the expected kind.
    #[error(
        "{ALLOC_CONF_ENV}: {} expects {expected}, got {}",
        shown(key),
        shown(value)
    )]
    BadNumber {
        /// The key.
        key: String,
        /// The value as written.
        value: String,
        /// What kind of number is valid.
        expected: &'static str,
    },
    /// A number outside the valid range.
    #[error(
        "{ALLOC_CONF_ENV}: {} must be {valid}, got {}",
        shown(key),
        shown(value)
    )]
    OutOfRange {
        /// The key.
        key: String,
        /// The value as written.
        value: String,
        /// The valid range.
        valid: &'static str,
    },
    /// A value of the wrong shape (not a boolean, a malformed list).
    #[error(
        "{ALLOC_CONF_ENV}: {} expects {expected}, got {}",
        shown(key),
        shown(value)
    )]
    BadValue {
        /// The key.
        key: String,
        /// The value as written.
        value: String,
        /// What is valid.
        expected: &'static str,
    },
    /// The same key twice.
    #[error("{ALLOC_CONF_ENV}: key {} given more than once", shown(key))]
    DuplicateKey {
        /// The key.
        key: String,
    },
    /// A key that only makes sense together with another one.
    #[error(
        "{ALLOC_CONF_ENV}: {} requires `{requires}` to be set as well",
        shown(key)
    )]
    Requires {
        /// The key that was given.
        key: String,
        /// The key it needs.
        requires: &'static str,
    },
    /// The environment variable is not valid Unicode.
    #[error("{ALLOC_CONF_ENV} is not valid Unicode")]
    NotUnicode,
    /// A valid setting the backend cannot provide (found when the allocator is opened with
    /// [`crate::allocator::CachingAllocator::try_new`], not by [`AllocatorConfig::parse`]).
    #[error(
        "{ALLOC_CONF_ENV}: `{key}` needs a backend with {needs}; backend `{backend}` does not have it (set `{key}:False` or pick a backend that declares it)"
    )]
    Unsupported {
        /// The key that asked for it.
        key: &'static str,
        /// The backend's name.
        backend: String,
        /// The capability it lacks.
        needs: &'static str,
    },
    /// `expandable_segments_page_size_mb` is not a multiple of the backend's mapping
    /// granularity (found by [`crate::allocator::CachingAllocator::try_new`]).
    #[error(
        "{ALLOC_CONF_ENV}: expandable_segments_page_size_mb is {page} bytes, not a multiple of backend `{backend}`'s mapping granularity of {granularity} bytes (pick a multiple of it)"
    )]
    PageSize {
        /// The page size asked for, in bytes.
        page: u64,
        /// The backend's granularity, in bytes.
        granularity: u64,
        /// The backend's name.
        backend: String,
    },
}

/// Splits on commas outside `[...]`.
fn split_pieces(s: &str) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                pieces.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    pieces.push(&s[start..]);
    pieces
}

fn parse_u64(key: &str, value: &str, expected: &'static str) -> Result<u64, ConfigError> {
    let bad = || ConfigError::BadNumber {
        key: key.to_owned(),
        value: value.to_owned(),
        expected,
    };
    // Digits only, no leading zero, no sign: one spelling per number, as every other
    // variable of the project.
    if value.is_empty()
        || !value.bytes().all(|b| b.is_ascii_digit())
        || (value.len() > 1 && value.starts_with('0'))
    {
        return Err(bad());
    }
    value.parse::<u64>().map_err(|_| bad())
}

fn parse_fraction(
    key: &str,
    value: &str,
    valid: &'static str,
    upper_inclusive: bool,
) -> Result<f64, ConfigError> {
    let f = value.parse::<f64>().map_err(|_| ConfigError::BadNumber {
        key: key.to_owned(),
        value: value.to_owned(),
        expected: "a decimal number",
    })?;
    // Written so that NaN fails the check.
    let ok = f > 0.0 && if upper_inclusive { f <= 1.0 } else { f < 1.0 };
    if ok {
        Ok(f)
    } else {
        Err(ConfigError::OutOfRange {
            key: key.to_owned(),
            value: value.to_owned(),
            valid,
        })
    }
}

const DIVISIONS_EXPECTED: &str = "a power of two up to 64";

fn parse_divisions(key: &str, value: &str) -> Result<u64, ConfigError> {
    let d = parse_u64(key, value, DIVISIONS_EXPECTED)?;
    if d.is_power_of_two() && d <= 64 {
        Ok(d)
    } else {
        Err(ConfigError::OutOfRange {
            key: key.to_owned(),
            value: value.to_owned(),
            valid: DIVISIONS_EXPECTED,
        })
    }
}

/// Parses `roundup_power2_divisions`: one number for every interval, or a list
/// `[SIZE_MB:DIV,...,>:DIV]` as PyTorch does (an entry fills the intervals before it when it
/// is the first; `>` fills every interval after the last one named; intervals between two named
/// ones keep 0, plain rounding).
fn parse_roundup(key: &str, value: &str) -> Result<[u64; ROUNDUP_INTERVALS], ConfigError> {
    let mut out = [0u64; ROUNDUP_INTERVALS];
    let Some(inner) = value.strip_prefix('[') else {
        out.fill(parse_divisions(key, value)?);
        return Ok(out);
    };
    let bad = || ConfigError::BadValue {
        key: key.to_owned(),
        value: value.to_owned(),
        expected: "a power of two, or a list like `[256:1,512:2,>:4]` (interval in MiB, a power of two : divisions)",
    };
    let inner = inner.strip_suffix(']').ok_or_else(bad)?;
    let unordered = || ConfigError::OutOfRange {
        key: key.to_owned(),
        value: value.to_owned(),
        valid: "intervals in strictly increasing order, each named once, `>` only last",
    };
    let mut last_index: Option<usize> = None;
    let mut last_mb: Option<u64> = None;
    let mut saw_rest = false;
    for entry in inner.split(',') {
        let (interval, divs) = entry.split_once(':').ok_or_else(bad)?;
        let (interval, divs) = (interval.trim(), divs.trim());
        let d = parse_divisions(key, divs)?;
        // `[1:2,1:4]` or `[512:2,256:1]` would silently let a later entry override or
        // reorder an earlier one: PyTorch's list is ordered, so only that order is valid.
        if saw_rest {
            return Err(unordered());
        }
        if interval == ">" {
            saw_rest = true;
            let from = last_index.map_or(0, |i| i + 1);
            out[from.min(ROUNDUP_INTERVALS)..].fill(d);
            continue;
        }
        let mb = parse_u64(key, interval, "an interval size in MiB (a power of two)")?;
        if !mb.is_power_of_two() {
            return Err(ConfigError::OutOfRange {
                key: key.to_owned(),
                value: interval.to_owned(),
                valid: "an interval size in MiB that is a power of two",
            });
        }
        if last_mb.is_some_and(|last| mb <= last) {
            return Err(unordered());
        }
        last_mb = Some(mb);
        let index = (mb.trailing_zeros() as usize).min(ROUNDUP_INTERVALS - 1);
        if last_index.is_none() {
            out[..index].fill(d);
        }
        out[index] = d;
        last_index = Some(index);
    }
    Ok(out)
}

fn parse_bool(key: &str, value: &str) -> Result<bool, ConfigError> {
    match value {
        "True" | "true" | "1" => Ok(true),
        "False" | "false" | "0" => Ok(false),
        _ => Err(ConfigError::BadValue {
            key: key.to_owned(),
            value: value.to_owned(),
            expected: "True, False, true, false, 1 or 0",
        }),
    }
}

impl AllocatorConfig {
    /// Parses a configuration string. An empty (or all-whitespace) string gives the defaults.
    ///
    /// `garbage_collection_threshold` without `per_process_memory_fraction` is an error
    /// ([`ConfigError::Requires`]): PyTorch silently ignores it, which hides a
    /// misconfiguration.
    pub fn parse(s: &str) -> Result<Self, ConfigError> {
        let mut cfg = AllocatorConfig::default();
        if s.trim().is_empty() {
            return Ok(cfg);
        }
        let mut seen: Vec<&str> = Vec::new();
        for piece in split_pieces(s) {
            let piece = piece.trim();
            if piece.is_empty() {
                return Err(ConfigError::EmptyPiece {
                    after: seen.last().map(|k| (*k).to_owned()),
                });
            }
            let Some((key, value)) = piece.split_once(':') else {
                return Err(ConfigError::MissingColon {
                    key: piece.to_owned(),
                });
            };
            let (key, value) = (key.trim(), value.trim());
            match key {
                "max_split_size_mb" => {
                    let mb = parse_u64(key, value, "a whole number of MiB")?;
                    cfg.max_split_size =
                        mb.checked_mul(1 << 20)
                            .filter(|_| mb >= 20)
                            .ok_or_else(|| ConfigError::OutOfRange {
                                key: key.to_owned(),
                                value: value.to_owned(),
                                valid: "at least 20 (MiB) and representable in bytes",
                            })?;
                }
                "garbage_collection_threshold" => {
                    cfg.garbage_collection_threshold = Some(parse_fraction(
                        key,
                        value,
                        "between 0 and 1, exclusive",
                        false,
                    )?);
                }
                "roundup_power2_divisions" => {
                    cfg.roundup_power2_divisions = parse_roundup(key, value)?;
                }
                "per_process_memory_fraction" => {
                    cfg.per_process_memory_fraction = Some(parse_fraction(
                        key,
                        value,
                        "greater than 0 and at most 1",
                        true,
                    )?);
                }
                "lazy_reclaim" | NPU_LAZY_RECLAIM_KEY => cfg.lazy_reclaim = parse_bool(key, value)?,
                NPU_PAGE_SIZE_KEY => {
                    cfg.expandable_segments_page_size = (value == NPU_PAGE_SIZE_1G.0)
                        .then_some(NPU_PAGE_SIZE_1G.1)
                        .ok_or_else(|| ConfigError::BadValue {
                            key: key.to_owned(),
                            value: value.to_owned(),
                            expected: "`1g` (torch_npu's only page size; expandable_segments_page_size_mb takes any whole MiB)",
                        })?;
                }
                "expandable_segments" => cfg.expandable_segments = parse_bool(key, value)?,
                "expandable_segments_trim" => {
                    cfg.expandable_segments_trim = parse_bool(key, value)?;
                }
                "release_lock_on_cudamalloc"
                | "release_lock_on_hipmalloc"
                | "release_lock_on_npumalloc" => {
                    cfg.release_lock_on_malloc = parse_bool(key, value)?;
                }
                "expandable_segments_page_size_mb" => {
                    let mb = parse_u64(key, value, "a whole number of MiB")?;
                    cfg.expandable_segments_page_size = mb
                        .checked_mul(1 << 20)
                        .filter(|_| (1..=1 << 20).contains(&mb))
                        .ok_or_else(|| ConfigError::OutOfRange {
                            key: key.to_owned(),
                            value: value.to_owned(),
                            valid: "between 1 and 1048576 (MiB)",
                        })?;
                }
                _ => {
                    return Err(match known_unsupported(key) {
                        Some(origin) => ConfigError::KnownUnsupported {
                            key: key.to_owned(),
                            origin,
                        },
                        None => ConfigError::UnknownKey {
                            key: key.to_owned(),
                        },
                    });
                }
            }
            // torch_npu's spellings count as the memreuse key they stand for, so
            // `page_size:1g,expandable_segments_page_size_mb:20` is a duplicate.
            if seen.iter().any(|k| canonical_key(k) == canonical_key(key)) {
                return Err(ConfigError::DuplicateKey {
                    key: key.to_owned(),
                });
            }
            seen.push(key);
        }
        for key in [
            "expandable_segments_page_size_mb",
            NPU_PAGE_SIZE_KEY,
            "expandable_segments_trim",
        ] {
            // torch_npu's `page_size:1g` without expandable segments asks for 1 GiB huge pages
            // in ordinary segments, which memreuse does not model: refused the same way.
            if seen.contains(&key) && !cfg.expandable_segments {
                return Err(ConfigError::Requires {
                    key: key.to_owned(),
                    requires: "expandable_segments:True",
                });
            }
        }
        if cfg.garbage_collection_threshold.is_some() && cfg.per_process_memory_fraction.is_none() {
            return Err(ConfigError::Requires {
                key: "garbage_collection_threshold".to_owned(),
                requires: "per_process_memory_fraction",
            });
        }
        Ok(cfg)
    }

    /// The same configuration with a trace ring buffer of `capacity` entries (0 turns
    /// tracing off). Snapshots then carry the last `capacity` entries.
    pub fn with_trace_capacity(mut self, capacity: usize) -> Self {
        self.trace_capacity = capacity;
        self
    }
}
