//! Where `run` writes its report files (`--report DIR`, `--json FILE`, the default
//! directory), how often it rewrites them, and the links from the HTML page to each run's
//! artifacts.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use memreuse_core::output::{OutputError, OutputRules, write_output};

use super::lock::{LockRefusal, ReportLock, lock_report_dir};
use super::options::RunOptions;
use super::plan::UsageError;
use crate::replay::{Artifact, ArtifactLink, RunArtifacts, relative_href};
use crate::report::{MemorySeries, Report, RunMeta, render_html, render_markdown};

/// Where the report goes when neither `--report` nor `--json` is given, relative to the
/// target directory: `$CARGO_TARGET_DIR/conformance` when that variable is set, else
/// `target/conformance` under the current directory (see [`default_report_dir`]).
pub const DEFAULT_REPORT_DIR: &str = "target/conformance";

/// The default report directory: `$CARGO_TARGET_DIR/conformance` when the variable is set
/// and not empty, else [`DEFAULT_REPORT_DIR`] (docs/report-format.md).
pub fn default_report_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR").filter(|v| !v.is_empty()) {
        Some(target) => PathBuf::from(target).join("conformance"),
        None => PathBuf::from(DEFAULT_REPORT_DIR),
    }
}

/// The files of one run before they become links: (schedule, backend, mode, allocator
/// configuration) and what the run wrote.
pub(super) type RunFiles = (String, String, String, Option<String>, Vec<Artifact>);

/// Links from the report directory to every file a run wrote, snapshots first.
pub(super) fn artifact_links(dir: &Path, files: Vec<RunFiles>) -> Vec<RunArtifacts> {
    files
        .into_iter()
        .map(|(schedule, backend, mode, alloc_conf, mut artifacts)| {
            let order = |k: &str| {
                ["snapshot", "timeline", "metrics"]
                    .iter()
                    .position(|x| *x == k)
            };
            artifacts.sort_by_key(|a| (order(a.kind), a.rank));
            RunArtifacts {
                schedule,
                backend,
                mode,
                alloc_conf,
                links: artifacts
                    .iter()
                    .map(|a| ArtifactLink {
                        kind: a.kind,
                        rank: a.rank,
                        href: relative_href(dir, &a.path),
                    })
                    .collect(),
            }
        })
        .collect()
}

/// How often the report files are rewritten while runs go on: after the first run, then
/// at most this often, and always at the end.
pub(super) const REWRITE_EVERY: Duration = Duration::from_secs(2);

/// When the next rewrite is due: the first one at once, then one per [`REWRITE_EVERY`].
#[derive(Debug, Default)]
pub(super) struct Rewrites {
    last: Option<Instant>,
}

impl Rewrites {
    /// Whether a rewrite at `now` is due; if so, it counts as done.
    pub(super) fn due(&mut self, now: Instant) -> bool {
        let due = self
            .last
            .is_none_or(|t| now.saturating_duration_since(t) >= REWRITE_EVERY);
        if due {
            self.last = Some(now);
        }
        due
    }
}

/// Where the report files go: `--report DIR` (or the default directory when neither
/// `--report` nor `--json` is given) gets `report.json`, `report.html` and `summary.md`;
/// `--json FILE` gets the JSON report alone (`-` is standard output). Every file goes
/// through core's one output writer (`memreuse_core::output`), never over a schedule the
/// run reads; the directory is locked while this runner writes it.
pub(super) struct Outputs {
    pub(super) dir: Option<PathBuf>,
    pub(super) json: Option<PathBuf>,
    /// The schedule files the run reads: no output may replace one.
    inputs: Vec<PathBuf>,
    /// Held while the runner runs (`None`: no directory, or locks do not work there).
    _lock: Option<ReportLock>,
}

impl Outputs {
    /// The files `options` asks for (`--report`, `--json`, else the default directory),
    /// checked before anything runs: an output that is one of the schedules, a symbolic
    /// link (or directory, socket, block device) the writer would refuse, or a report
    /// directory another runner holds, is a usage error (exit 2). A directory that cannot
    /// be created is reported when the report is written (exit 1, naming it).
    pub(super) fn open(options: &RunOptions) -> Result<Self, UsageError> {
        let json = options.json.as_ref().map(|p| {
            if p.as_os_str() == "-" {
                PathBuf::from("/dev/stdout")
            } else {
                p.clone()
            }
        });
        let dir = match (&options.report, &json) {
            (Some(dir), _) => Some(dir.clone()),
            (None, Some(_)) => None,
            (None, None) => Some(default_report_dir()),
        };
        let inputs = options.schedules.clone();
        for path in &report_paths(json.as_deref(), dir.as_deref()) {
            // What the writer would refuse at the end is refused now, before the runs.
            if let Some(kind) = refused_kind(path) {
                return Err(UsageError(
                    OutputError::NotARegularFile {
                        path: path.display().to_string(),
                        kind,
                    }
                    .to_string(),
                ));
            }
            if let Some(input) = same_as_input(path, &inputs) {
                return Err(UsageError(
                    OutputError::SameAsInput {
                        path: path.display().to_string(),
                        input: input.display().to_string(),
                    }
                    .to_string(),
                ));
            }
        }
        let mut lock = None;
        if let Some(dir) = &dir
            && std::fs::create_dir_all(dir).is_ok()
        {
            match lock_report_dir(dir) {
                Ok(held) => lock = Some(held),
                Err(held @ LockRefusal::Held(_)) => return Err(UsageError(held.to_string())),
                Err(unavailable) => eprintln!("memreuse-conformance: warning: {unavailable}"),
            }
        }
        let outputs = Outputs {
            dir,
            json,
            inputs,
            _lock: lock,
        };
        Ok(outputs)
    }

    /// Every report file, JSON first.
    fn paths(&self) -> Vec<PathBuf> {
        report_paths(self.json.as_deref(), self.dir.as_deref())
    }

    /// Every report file written, as the final `report: ...` line lists them.
    pub(super) fn written(&self) -> Vec<String> {
        self.paths()
            .iter()
            .map(|p| p.display().to_string())
            .collect()
    }

    /// Whether the JSON report goes to this process's standard output (`--json -` or
    /// `/dev/stdout`): the terminal's table then goes to standard error, so standard
    /// output holds the JSON document alone.
    pub(super) fn json_on_stdout(&self) -> bool {
        self.json.as_deref().is_some_and(|p| {
            [
                Path::new("/dev/stdout"),
                Path::new("/dev/fd/1"),
                Path::new("/proc/self/fd/1"),
            ]
            .contains(&p)
        })
    }

    /// The directory artifact links are relative to.
    pub(super) fn link_base(&self) -> &Path {
        self.dir
            .as_deref()
            .or_else(|| self.json.as_deref().and_then(Path::parent))
            .unwrap_or(Path::new("."))
    }

    /// Writes the JSON report, and with a directory the page and the Markdown summary.
    /// `last` is the final write: every file. Before it (after a run), a file that is a
    /// stream (standard output, a FIFO, a character device) is left for the final write,
    /// so it gets one whole report, not one per run.
    pub(super) fn write_reports(
        &self,
        meta: &RunMeta,
        report: &Report,
        series: &[MemorySeries],
        links: &[RunArtifacts],
        last: bool,
    ) -> Result<(), WriteError> {
        let text = serde_json::to_string_pretty(report).map_err(|e| WriteError {
            path: PathBuf::from("report.json"),
            reason: e.to_string(),
        })?;
        if let Some(dir) = &self.dir {
            std::fs::create_dir_all(dir).map_err(|e| WriteError {
                path: dir.clone(),
                reason: e.to_string(),
            })?;
            let rules = self.rules().within(dir);
            let json = dir.join("report.json");
            Self::put(&json, text.as_bytes(), &rules, last)?;
            let html = dir.join("report.html");
            if last || !writes_once(&html) {
                let page = render_html(report, series, links, meta);
                Self::put(&html, page.as_bytes(), &rules, last)?;
            }
            let md = dir.join("summary.md");
            Self::put(
                md.as_path(),
                render_markdown(report, meta).as_bytes(),
                &rules,
                last,
            )?;
        }
        if let Some(path) = &self.json {
            if !writes_once(path)
                && let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty())
            {
                std::fs::create_dir_all(parent).map_err(|e| WriteError {
                    path: parent.to_path_buf(),
                    reason: e.to_string(),
                })?;
            }
            Self::put(path, text.as_bytes(), &self.rules(), last)?;
        }
        Ok(())
    }

    /// The writer's rules: no schedule of the run replaced.
    fn rules(&self) -> OutputRules {
        self.inputs
            .iter()
            .fold(OutputRules::new(), OutputRules::input)
    }

    /// One file through core's writer; a stream only on the `last` write.
    fn put(path: &Path, bytes: &[u8], rules: &OutputRules, last: bool) -> Result<(), WriteError> {
        if !last && writes_once(path) {
            return Ok(());
        }
        write_output(path, bytes, rules)
            .map(|_| ())
            .map_err(|e| WriteError {
                path: path.to_path_buf(),
                reason: match e {
                    OutputError::Io { source, .. } => source.to_string(),
                    other => other.to_string(),
                },
            })
    }
}

/// The files of a report directory.
const REPORT_FILES: [&str; 3] = ["report.json", "report.html", "summary.md"];

/// The `--json` file, then the report directory's files.
fn report_paths(json: Option<&Path>, dir: Option<&Path>) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = json.map(Path::to_path_buf).into_iter().collect();
    if let Some(dir) = dir {
        paths.extend(REPORT_FILES.iter().map(|f| dir.join(f)));
    }
    paths
}

/// A report-writing failure, naming the file.
#[derive(Debug, thiserror::Error)]
#[error("{}: {reason}", path.display())]
pub(super) struct WriteError {
    path: PathBuf,
    reason: String,
}

/// Whether `path` is written straight through rather than replaced (the process's own
/// descriptors, a character device, a FIFO): such a file gets the report once, at the end.
fn writes_once(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    is_own_descriptor(path)
        || std::fs::symlink_metadata(path).is_ok_and(|m| {
            let t = m.file_type();
            t.is_char_device() || t.is_fifo()
        })
}

/// What core's writer refuses to replace or write through at `path` (a symbolic link
/// other than the process's own descriptors, a directory, a block device, a socket), in
/// its words; `None` for anything it writes.
fn refused_kind(path: &Path) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if is_own_descriptor(path) {
        return None;
    }
    let t = std::fs::symlink_metadata(path).ok()?.file_type();
    if t.is_symlink() {
        Some("symbolic link")
    } else if t.is_dir() {
        Some("directory")
    } else if t.is_block_device() {
        Some("block device")
    } else if t.is_socket() {
        Some("socket")
    } else {
        None
    }
}

/// `/dev/stdout`, `/dev/stderr`, `/dev/fd/N`, `/proc/self/fd/N`: written through by core's
/// writer, whatever they point at.
fn is_own_descriptor(path: &Path) -> bool {
    path == Path::new("/dev/stdout")
        || path == Path::new("/dev/stderr")
        || path.parent() == Some(Path::new("/dev/fd"))
        || path.parent() == Some(Path::new("/proc/self/fd"))
}

/// The input among `inputs` that `path` names (the same regular file under any name),
/// if any.
fn same_as_input<'a>(path: &Path, inputs: &'a [PathBuf]) -> Option<&'a PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let target = std::fs::metadata(path)
        .ok()
        .filter(std::fs::Metadata::is_file)?;
    inputs.iter().find(|input| {
        std::fs::metadata(input)
            .is_ok_and(|m| m.is_file() && m.dev() == target.dev() && m.ino() == target.ino())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_are_due_first_then_once_per_interval() {
        let mut r = Rewrites::default();
        let t0 = Instant::now();
        assert!(r.due(t0), "the first run's report is written at once");
        assert!(!r.due(t0 + REWRITE_EVERY / 2));
        assert!(r.due(t0 + REWRITE_EVERY));
        assert!(!r.due(t0 + REWRITE_EVERY + REWRITE_EVERY / 2));
    }

    #[test]
    fn streams_are_written_once() {
        assert!(writes_once(Path::new("/dev/stdout")));
        assert!(writes_once(Path::new("/dev/null")));
        assert!(!writes_once(Path::new("/nonexistent/report.json")));
    }
}
