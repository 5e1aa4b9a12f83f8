//! The one way the project writes an output file (snapshots, timelines, reports, JSON,
//! metrics, whatif pages), so that a path given on a command line never destroys what it
//! should not:
//!
//! | the path names | what happens |
//! |---|---|
//! | nothing, or a regular file | written to a uniquely named temporary file next to it, then renamed over it: a reader sees the old file or the new one, never half of one |
//! | a character device or a FIFO (`/dev/null`, `mkfifo`) | written straight through; nothing is replaced (a FIFO waits for its reader, as `cat > fifo` does) |
//! | the process's own descriptor (`/dev/stdout`, `/dev/stderr`, `/dev/fd/N`, `/proc/self/fd/N`) | written straight through, appended to whatever the descriptor is (a terminal, a pipe, a file the shell redirected to) |
//! | any other symbolic link | refused, whatever it points to: an output never follows a link out of where it was asked to go |
//! | a directory, a block device, a socket | refused |
//!
//! [`OutputRules::within`] also refuses a path whose directory (symbolic links resolved)
//! is not inside the given one, and [`OutputRules::input`] refuses writing over an input
//! (the same file, by device and inode, under any name). The checks run just before the
//! write: a file swapped in between by another process is not detected.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Why an output was not written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutputError {
    /// The path names something that must not be replaced or written through.
    #[error(
        "refusing to replace {path}: it is a {kind}, not a regular file (outputs go to a \
         regular file, a new file, a character device, a FIFO or /dev/stdout)"
    )]
    NotARegularFile {
        /// The path.
        path: String,
        /// What it is: `symbolic link`, `directory`, `block device`, `socket`.
        kind: &'static str,
    },
    /// The path's directory is not inside the directory the output was confined to.
    #[error("refusing to write {path}: it is outside {dir}, where this output belongs")]
    OutsideDirectory {
        /// The path.
        path: String,
        /// The directory it had to be in.
        dir: String,
    },
    /// The path is one of the inputs.
    #[error("refusing to write {path}: it is the input {input}; give another output path")]
    SameAsInput {
        /// The path.
        path: String,
        /// The input it names.
        input: String,
    },
    /// Writing failed.
    #[error("could not write {path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The error.
        source: std::io::Error,
    },
}

/// Where an output may go and what it must not overwrite; [`OutputRules::default`] is no
/// restriction beyond the table of the module documentation.
#[derive(Debug, Clone, Default)]
pub struct OutputRules {
    within: Option<PathBuf>,
    inputs: Vec<PathBuf>,
}

impl OutputRules {
    /// No confinement, no inputs.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Confines outputs to `dir` (symbolic links of the path's directories resolved).
    #[must_use]
    pub fn within(mut self, dir: impl Into<PathBuf>) -> Self {
        self.within = Some(dir.into());
        self
    }

    /// Refuses writing over `path` (an input of the run), under any name.
    #[must_use]
    pub fn input(mut self, path: impl Into<PathBuf>) -> Self {
        self.inputs.push(path.into());
        self
    }
}

/// How an output was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// A regular file was created or atomically replaced.
    Replaced,
    /// A device, a FIFO or the process's own descriptor was written straight through.
    Through,
}

/// Writes `bytes` to `path` under `rules` (the module documentation's table). `Ok` means
/// everything was written (and, for a regular file, synced and in place).
pub fn write_output(
    path: &Path,
    bytes: &[u8],
    rules: &OutputRules,
) -> Result<Written, OutputError> {
    let shown = || path.display().to_string();
    let io = |source| OutputError::Io {
        path: shown(),
        source,
    };
    if is_own_descriptor(path) {
        check_inputs(path, rules)?;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(io)?;
        f.write_all(bytes).and_then(|()| f.flush()).map_err(io)?;
        return Ok(Written::Through);
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) => {
            let t = meta.file_type();
            if t.is_file() {
                check_within(path, rules)?;
                check_inputs(path, rules)?;
                replace_atomically(path, bytes)?;
                return Ok(Written::Replaced);
            }
            if is_stream(t) {
                check_inputs(path, rules)?;
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map_err(io)?;
                f.write_all(bytes).and_then(|()| f.flush()).map_err(io)?;
                return Ok(Written::Through);
            }
            Err(OutputError::NotARegularFile {
                path: shown(),
                kind: file_kind(t),
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            check_within(path, rules)?;
            replace_atomically(path, bytes)?;
            Ok(Written::Replaced)
        }
        Err(e) => Err(io(e)),
    }
}

/// [`write_output`] without confinement or inputs.
pub fn write_file(path: &Path, bytes: &[u8]) -> Result<Written, OutputError> {
    write_output(path, bytes, &OutputRules::default())
}

/// `/dev/stdout`, `/dev/stderr`, `/dev/fd/N`, `/proc/self/fd/N`: the process's own open
/// descriptors, which a shell may have pointed at anything.
fn is_own_descriptor(path: &Path) -> bool {
    path == Path::new("/dev/stdout")
        || path == Path::new("/dev/stderr")
        || path.parent() == Some(Path::new("/dev/fd"))
        || path.parent() == Some(Path::new("/proc/self/fd"))
}

/// A character device or a FIFO: written through, never replaced.
fn is_stream(t: std::fs::FileType) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        t.is_char_device() || t.is_fifo()
    }
    #[cfg(not(unix))]
    {
        let _ = t;
        false
    }
}

fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

fn check_within(path: &Path, rules: &OutputRules) -> Result<(), OutputError> {
    let Some(dir) = &rules.within else {
        return Ok(());
    };
    let io = |source| OutputError::Io {
        path: path.display().to_string(),
        source,
    };
    let dir_real = std::fs::canonicalize(dir).map_err(io)?;
    let parent_real = std::fs::canonicalize(parent_of(path)).map_err(io)?;
    let named = path
        .file_name()
        .is_some_and(|n| n != std::ffi::OsStr::new(".."));
    if named && parent_real.starts_with(&dir_real) {
        Ok(())
    } else {
        Err(OutputError::OutsideDirectory {
            path: path.display().to_string(),
            dir: dir.display().to_string(),
        })
    }
}

fn check_inputs(path: &Path, rules: &OutputRules) -> Result<(), OutputError> {
    if rules.inputs.is_empty() {
        return Ok(());
    }
    // Only an existing regular file can be an input overwritten (a device or FIFO given
    // as both is read and written as such).
    let Ok(target) = std::fs::metadata(path) else {
        return Ok(());
    };
    if !target.is_file() {
        return Ok(());
    }
    for input in &rules.inputs {
        if let Ok(meta) = std::fs::metadata(input) {
            if meta.is_file() && same_file(&meta, &target, input, path) {
                return Err(OutputError::SameAsInput {
                    path: path.display().to_string(),
                    input: input.display().to_string(),
                });
            }
        }
    }
    Ok(())
}

#[cfg(unix)]
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata, _: &Path, _: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

#[cfg(not(unix))]
fn same_file(_: &std::fs::Metadata, _: &std::fs::Metadata, a: &Path, b: &Path) -> bool {
    matches!((std::fs::canonicalize(a), std::fs::canonicalize(b)), (Ok(x), Ok(y)) if x == y)
}

/// Through a uniquely named temporary file in the same directory (so the rename is atomic
/// and writers of one path never share a temporary file), synced, renamed over `path`.
fn replace_atomically(path: &Path, bytes: &[u8]) -> Result<(), OutputError> {
    let io = |source| OutputError::Io {
        path: path.display().to_string(),
        source,
    };
    let name = path
        .file_name()
        .map_or_else(|| "output".into(), |n| n.to_string_lossy().into_owned());
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .tempfile_in(parent_of(path))
        .map_err(io)?;
    tmp.write_all(bytes).map_err(io)?;
    tmp.as_file().sync_all().map_err(io)?;
    tmp.persist(path).map_err(|e| io(e.error))?;
    Ok(())
}

/// What a file that is refused is, in words.
fn file_kind(t: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_block_device() {
            return "block device";
        }
        if t.is_socket() {
            return "socket";
        }
    }
    if t.is_symlink() {
        "symbolic link"
    } else if t.is_dir() {
        "directory"
    } else {
        "special file"
    }
}
