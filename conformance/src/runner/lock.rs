//! The lock a runner holds on its report directory while it writes there, so that two
//! runners given one `--report DIR` do not silently keep only the last writer's runs: the
//! second is told (exit 2) before it runs anything.
//!
//! The lock is an advisory `flock` on `DIR/.memreuse-report.lock`, released by the kernel
//! when the process ends however it ends (a runner killed at a time limit never leaves a
//! stale lock behind; the empty file stays, and is never deleted, since deleting a lock
//! file lets a third runner lock a new file while the second still holds the old one).
//! Where locks do not work (a file system that refuses `flock`, such as some network
//! mounts), the runner warns that it cannot lock the directory and goes on unlocked, as
//! before: nothing is lost by trying.

use std::fs::File;
use std::path::{Path, PathBuf};

/// The name of the lock file inside a report directory.
pub(crate) const LOCK_FILE: &str = ".memreuse-report.lock";

/// A held lock on a report directory; dropping it (or the process ending) releases it.
#[derive(Debug)]
pub(super) struct ReportLock {
    /// Kept open: closing the last descriptor of the file releases the lock.
    _file: File,
}

/// Why a report directory was not locked.
#[derive(Debug)]
pub(super) enum LockRefusal {
    /// Another process holds the lock: the runner must not write there.
    Held(PathBuf),
    /// The lock could not be taken for another reason (the file system does not support
    /// it, the directory cannot be written): the runner goes on without it.
    Unavailable(PathBuf, std::io::Error),
}

impl std::fmt::Display for LockRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockRefusal::Held(dir) => write!(
                f,
                "report directory {} is being written by another runner (it holds {}); \
                 give another --report DIR, or wait for that run to end",
                dir.display(),
                dir.join(LOCK_FILE).display()
            ),
            LockRefusal::Unavailable(dir, e) => write!(
                f,
                "cannot lock report directory {} ({e}); writing it unlocked: a second \
                 runner writing there at the same time would replace this one's files",
                dir.display()
            ),
        }
    }
}

/// Takes the lock of report directory `dir` (which must exist) without waiting.
pub(super) fn lock_report_dir(dir: &Path) -> Result<ReportLock, LockRefusal> {
    let path = dir.join(LOCK_FILE);
    let unavailable = |e| LockRefusal::Unavailable(dir.to_path_buf(), e);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(unavailable)?;
    try_lock(&file).map_err(|e| {
        if e.kind() == std::io::ErrorKind::WouldBlock {
            LockRefusal::Held(dir.to_path_buf())
        } else {
            unavailable(e)
        }
    })?;
    Ok(ReportLock { _file: file })
}

/// An exclusive `flock` without waiting: `WouldBlock` when another descriptor holds it.
#[cfg(unix)]
fn try_lock(file: &File) -> std::io::Result<()> {
    use std::os::unix::io::AsRawFd;
    // SAFETY: `flock` takes a descriptor and flags and touches no memory of ours; the
    // descriptor is open for as long as `file` is borrowed.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// No advisory lock to take off Unix: the directory is written unlocked.
#[cfg(not(unix))]
fn try_lock(_: &File) -> std::io::Result<()> {
    Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_one_directory_is_refused_until_the_first_is_dropped() {
        let dir = std::env::temp_dir().join(format!("memreuse-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let first = lock_report_dir(&dir).expect("first lock");
        assert!(matches!(lock_report_dir(&dir), Err(LockRefusal::Held(_))));
        drop(first);
        assert!(lock_report_dir(&dir).is_ok(), "released on drop");
        let _ = std::fs::remove_dir_all(dir);
    }
}
