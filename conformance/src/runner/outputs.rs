//! Where `run` writes its report files (`--report DIR`, `--json FILE`, the default
//! directory) and the links from the HTML page to each run's artifacts.

use std::path::{Path, PathBuf};

use super::options::RunOptions;
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

/// Where the report files go: `--report DIR` (or the default directory when neither
/// `--report` nor `--json` is given) gets `report.json`, `report.html` and `summary.md`;
/// `--json FILE` gets the JSON report alone.
pub(super) struct Outputs {
    pub(super) dir: Option<PathBuf>,
    pub(super) json: Option<PathBuf>,
}

impl Outputs {
    /// The files `options` asks for (`--report`, `--json`, else the default directory).
    pub(super) fn of(options: &RunOptions) -> Self {
        let dir = match (&options.report, &options.json) {
            (Some(dir), _) => Some(dir.clone()),
            (None, Some(_)) => None,
            (None, None) => Some(default_report_dir()),
        };
        Outputs {
            dir,
            json: options.json.clone(),
        }
    }

    /// Every report file written, as the final `report: ...` line lists them.
    pub(super) fn written(&self) -> Vec<String> {
        let mut written = Vec::new();
        if let Some(json) = &self.json {
            written.push(json.display().to_string());
        }
        if let Some(dir) = &self.dir {
            for f in ["report.json", "report.html", "summary.md"] {
                written.push(dir.join(f).display().to_string());
            }
        }
        written
    }

    /// The directory artifact links are relative to.
    pub(super) fn link_base(&self) -> &Path {
        self.dir
            .as_deref()
            .or_else(|| self.json.as_deref().and_then(Path::parent))
            .unwrap_or(Path::new("."))
    }
}

/// A report-writing failure, naming the file.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub(super) struct WriteError {
    path: PathBuf,
    source: std::io::Error,
}

/// Writes `contents` to `path` through a temporary file in the same directory and a rename,
/// so a reader (or a run killed half-way) never sees a half-written file.
fn write_atomic(path: &Path, contents: &str) -> Result<(), WriteError> {
    let fail = |source| WriteError {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|source| WriteError {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, contents).map_err(|source| WriteError {
        path: tmp.clone(),
        source,
    })?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        fail(e)
    })
}

/// Writes the JSON report, and with `html` the page and the Markdown summary, where
/// `outputs` says.
pub(super) fn write_reports(
    outputs: &Outputs,
    meta: &RunMeta,
    report: &Report,
    series: &[MemorySeries],
    links: &[RunArtifacts],
    html: bool,
) -> Result<(), WriteError> {
    let text = serde_json::to_string_pretty(report).map_err(|e| WriteError {
        path: PathBuf::from("report.json"),
        source: std::io::Error::other(e),
    })?;
    if let Some(dir) = &outputs.dir {
        write_atomic(&dir.join("report.json"), &text)?;
        if html {
            write_atomic(
                &dir.join("report.html"),
                &render_html(report, series, links, meta),
            )?;
            write_atomic(&dir.join("summary.md"), &render_markdown(report, meta))?;
        }
    }
    if let Some(path) = &outputs.json {
        write_atomic(path, &text)?;
    }
    Ok(())
}
