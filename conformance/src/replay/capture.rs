//! `run --snapshot-dir DIR --trace-dir DIR`: what one rank of a replay writes.
//!
//! - **Snapshot** (`DIR/<stem>.pickle`, PyTorch's memory-viewer format): taken *during*
//!   the run, at the op of the setup or body phase after which the allocator held
//!   pending-free blocks and the most active bytes (the most active bytes when the mode
//!   never has pending frees, e.g. mode 2, whose shelf holds tensors instead). That is the
//!   moment closest to the peak that shows what the mode keeps waiting. Its trace is the
//!   allocator's trace up to that moment.
//! - **Timeline** (`DIR/<stem>.trace.json`, Chrome trace / Perfetto): the rank's ops from
//!   the first to the last (before its process groups shut down): allocator trace (last [`CAPTURE_TRACE_CAPACITY`] entries), collectives of
//!   every group on their comm streams, allocated/reserved counters after every op.
//! - **Metrics** (`DIR/<stem>.metrics.txt`, next to the timeline): the Prometheus
//!   exposition of the rank's allocator and groups after its last op.
//!
//! `<stem>` is `<schedule>__<backend>__mode-<mode>[__conf-<tag>]__rank<r>` (see
//! [`artifact_stem`]).

use std::path::{Path, PathBuf};

use memreuse_core::allocator::{
    AllocatorConfig, AllocatorStats, CachingAllocator, Snapshot, trace_clock_us,
};
use memreuse_core::observe::{
    MemorySample, MetricsReport, Timeline, ViewerSnapshot, render_metrics,
};
use memreuse_core::process_group::WorkSpan;
use memreuse_core::{AnyBackend, Backend, StreamId};

use super::ReplayOptions;
use crate::schedule::Phase;

/// Trace ring capacity while capturing (the default allocator traces nothing).
pub const CAPTURE_TRACE_CAPACITY: usize = 1 << 16;

/// One file a run wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Artifact {
    /// `snapshot`, `timeline` or `metrics`.
    pub kind: &'static str,
    /// Global rank.
    pub rank: usize,
    /// Where it is.
    pub path: PathBuf,
}

/// What a rank captures while it replays.
pub(crate) struct Capture {
    snapshot_dir: Option<PathBuf>,
    trace_dir: Option<PathBuf>,
    /// Score (pending-free present, active bytes) and snapshot of the best moment so far.
    best: Option<((bool, u64), Snapshot)>,
    samples: Vec<MemorySample>,
}

/// The allocator configuration of a run: the run's `--alloc-conf` (or the default), with
/// tracing on while capturing.
pub(crate) fn allocator_config(options: &ReplayOptions) -> AllocatorConfig {
    let config = options
        .alloc_conf
        .as_ref()
        .map_or_else(AllocatorConfig::default, |c| c.config.clone());
    if options.snapshot_dir.is_some() || options.trace_dir.is_some() {
        config.with_trace_capacity(CAPTURE_TRACE_CAPACITY)
    } else {
        config
    }
}

/// A file-name-safe, injective rendering of `s`: ASCII letters, digits, `-` and `.` are
/// kept; every other byte (`_` included) becomes `_` and two lowercase hex digits. Since
/// `_` only ever starts an escape, distinct inputs give distinct outputs (`a/b` is
/// `a_2fb`, `a_b` is `a_5fb`) and `__` never occurs inside a component.
fn safe(s: &str) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'.' {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "_{b:02x}");
        }
    }
    out
}

/// Bytes of an artifact stem at most: the 255-byte file name limit of common file systems
/// less the longest suffix, `.metrics.txt`.
const MAX_STEM_BYTES: usize = 255 - ".metrics.txt".len();

/// `<schedule>__<backend>__mode-<mode>[__<conf>]__rank<r>`, each component rendered
/// injectively (see `safe`), so different runs never share a file; `<conf>` is the run's
/// allocator configuration as [`crate::alloc_conf::file_tag`] writes it (`conf-...`),
/// absent for the default configuration, its readable prefix shortened when a long
/// schedule name leaves less room (the hash that tells configurations apart is always
/// there). A schedule name has at most [`crate::schedule::MAX_SCHEDULE_NAME_BYTES`] bytes,
/// so the longest stem plus its suffix stays within the 255-byte file name limit.
pub fn artifact_stem(
    schedule: &str,
    backend: &str,
    mode: &str,
    conf: Option<&str>,
    rank: usize,
) -> String {
    let head = format!("{}__{}__mode-{}", safe(schedule), safe(backend), safe(mode));
    let tail = format!("__rank{rank}");
    let conf = conf.map_or_else(String::new, |c| {
        let room = MAX_STEM_BYTES.saturating_sub(head.len() + tail.len() + "__".len());
        format!("__{}", crate::alloc_conf::file_tag_within(c, room))
    });
    format!("{head}{conf}{tail}")
}

impl Capture {
    /// `None` when neither directory was asked for.
    pub(crate) fn new(options: &ReplayOptions) -> Option<Capture> {
        if options.snapshot_dir.is_none() && options.trace_dir.is_none() {
            return None;
        }
        Some(Capture {
            snapshot_dir: options.snapshot_dir.clone(),
            trace_dir: options.trace_dir.clone(),
            best: None,
            samples: Vec::new(),
        })
    }

    /// After every op: a counter sample, and a new snapshot if this moment beats the best.
    pub(crate) fn after_step(
        &mut self,
        allocator: &CachingAllocator<AnyBackend>,
        stats: &AllocatorStats,
        phase: Phase,
    ) {
        self.samples.push(MemorySample {
            time_us: trace_clock_us(),
            allocated: stats.allocated_bytes.current,
            reserved: stats.reserved_bytes.current,
        });
        if self.snapshot_dir.is_none() || phase == Phase::Teardown {
            return;
        }
        let score = (stats.pending_free_bytes > 0, stats.active_bytes.current);
        if self.best.as_ref().is_none_or(|(best, _)| score > *best) {
            self.best = Some((score, allocator.snapshot()));
        }
    }

    /// Writes the files; returns what was written and what could not be.
    pub(crate) fn finish(
        self,
        stem: &str,
        rank: usize,
        allocator: &CachingAllocator<AnyBackend>,
        spans: &[(StreamId, Vec<WorkSpan>)],
        metrics: &MetricsReport,
    ) -> (Vec<Artifact>, Vec<String>) {
        let mut written = Vec::new();
        let mut errors = Vec::new();
        let device = allocator.backend().device_index();
        let mut put = |kind: &'static str, dir: &Path, name: String, result| match result {
            Ok(()) => written.push(Artifact {
                kind,
                rank,
                path: dir.join(name),
            }),
            Err(e) => errors.push(format!("{kind}: {e}")),
        };
        if let Some(dir) = &self.snapshot_dir {
            let snap = match self.best {
                Some((_, s)) => s,
                None => allocator.snapshot(),
            };
            let name = format!("{stem}.pickle");
            let path = dir.join(&name);
            let result = create(dir).and_then(|()| {
                ViewerSnapshot::from_snapshot(device, &snap)
                    .and_then(|v| v.write_pickle(&path))
                    .map_err(|e| e.to_string())
            });
            put("snapshot", dir, name, result);
        }
        if let Some(dir) = &self.trace_dir {
            let mut t = Timeline::new(&stem.replace("__", " "), rank as u64);
            t.add_trace(&allocator.snapshot().traces);
            for (stream, s) in spans {
                t.add_work_spans(*stream, s);
            }
            t.add_memory_samples(&self.samples);
            let name = format!("{stem}.trace.json");
            let path = dir.join(&name);
            let result = create(dir).and_then(|()| t.write(&path).map_err(|e| e.to_string()));
            put("timeline", dir, name, result);
            let name = format!("{stem}.metrics.txt");
            // Core's one writer, confined to the directory: a planted symbolic link is
            // refused, never followed to overwrite its target.
            let result = memreuse_core::output::write_output(
                &dir.join(&name),
                render_metrics(metrics).as_bytes(),
                &memreuse_core::output::OutputRules::new().within(dir),
            )
            .map(|_| ())
            .map_err(|e| e.to_string());
            put("metrics", dir, name, result);
        }
        (written, errors)
    }
}

fn create(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

/// One report link to a run's file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArtifactLink {
    /// `snapshot`, `timeline` or `metrics`.
    pub kind: &'static str,
    /// Global rank.
    pub rank: usize,
    /// Link target, relative to the report's directory when possible.
    pub href: String,
}

/// The files of one (schedule, backend, mode) run, for the HTML report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunArtifacts {
    /// Schedule name.
    pub schedule: String,
    /// Backend name.
    pub backend: String,
    /// Mode name.
    pub mode: String,
    /// The run's allocator configuration (`None`: the default).
    pub alloc_conf: Option<String>,
    /// Links, by kind then rank.
    pub links: Vec<ArtifactLink>,
}

/// `target` as a link from a page in `from_dir`: relative when both resolve to absolute
/// paths, with `/` separators and spaces escaped.
pub fn relative_href(from_dir: &Path, target: &Path) -> String {
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let (from, to) = (abs(from_dir), abs(target));
    let f: Vec<_> = from.components().collect();
    let t: Vec<_> = to.components().collect();
    let common = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
    let rel: PathBuf = if common == 0 {
        to.clone()
    } else {
        let mut rel = PathBuf::new();
        for _ in common..f.len() {
            rel.push("..");
        }
        for c in &t[common..] {
            rel.push(c);
        }
        rel
    };
    rel.to_string_lossy().replace('\\', "/").replace(' ', "%20")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hrefs_are_relative_to_the_report_directory() {
        let base = std::env::temp_dir();
        let href = relative_href(&base.join("a/report"), &base.join("a/snaps/x y.pickle"));
        assert_eq!(href, "../snaps/x%20y.pickle");
        assert_eq!(
            relative_href(&base.join("r"), &base.join("r/t.json")),
            "t.json"
        );
    }

    #[test]
    fn stems_are_file_name_safe_and_injective() {
        assert_eq!(
            artifact_stem("a/b c", "mock", "unsafe", None, 3),
            "a_2fb_20c__mock__mode-unsafe__rank3"
        );
        // Before: both were `a_b`.
        assert_ne!(
            artifact_stem("a/b", "mock", "0", None, 0),
            artifact_stem("a_b", "mock", "0", None, 0)
        );
        // A separator inside a name cannot fake a component boundary.
        assert_ne!(
            artifact_stem("a__mock", "x", "0", None, 0),
            artifact_stem("a", "mock__x", "0", None, 0)
        );
        // The longest accepted name, every byte escaped, still fits a file name.
        let longest = "\u{e9}".repeat(crate::schedule::MAX_SCHEDULE_NAME_BYTES / 2);
        let conf = "roundup_power2_divisions:[1:2,2:4,>:8],max_split_size_mb:100";
        let stem = artifact_stem(&longest, "ascend", "unsafe", Some(conf), 1023);
        assert!(stem.len() + ".metrics.txt".len() <= 255, "{}", stem.len());
        // A configuration is its own component: two configs never share a file.
        let with = |c| artifact_stem("s", "mock", "0", c, 0);
        assert_eq!(
            with(None),
            "s__mock__mode-0__rank0",
            "default names unchanged"
        );
        assert_ne!(with(Some("max_split_size_mb:20")), with(None));
        assert_ne!(
            with(Some("max_split_size_mb:20")),
            with(Some("max_split_size_mb:40"))
        );
    }
}
