//! Snapshot and timeline files are written next to the target through a unique temporary
//! file, never replace anything but a regular file (a FIFO is written through), and `Ok`
//! means the file is there.

use std::path::{Path, PathBuf};

use memreuse_core::observe::{ExportError, Timeline};

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("memreuse-write-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn timeline(name: &str) -> Timeline {
    Timeline::new(name, 0)
}

fn leftovers(d: &Path) -> Vec<String> {
    std::fs::read_dir(d)
        .expect("read dir")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            Path::new(n)
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("tmp"))
        })
        .collect()
}

#[cfg(unix)]
#[test]
fn symlinks_are_refused_and_fifos_written_through() {
    let d = dir("special");
    let target = d.join("target.json");
    std::fs::write(&target, "original").expect("write");
    let link = d.join("link.json");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    // Before: the symlink was replaced by a regular file.
    let err = timeline("a")
        .write(&link)
        .expect_err("a symlink is refused");
    assert!(
        matches!(
            &err,
            ExportError::NotARegularFile {
                kind: "symbolic link",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("refusing to replace"), "{err}");
    assert!(
        std::fs::symlink_metadata(&link)
            .expect("still there")
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read_to_string(&target).expect("read"), "original");

    let fifo = d.join("fifo.json");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    if made {
        // A FIFO is written through to its reader (memreuse_core::output), never replaced.
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read_to_string(fifo).expect("read the FIFO"))
        };
        timeline("a")
            .write(&fifo)
            .expect("a FIFO is written through");
        assert!(reader.join().expect("reader").contains("traceEvents"));
        let kind = std::fs::symlink_metadata(&fifo)
            .expect("still there")
            .file_type();
        assert!(std::os::unix::fs::FileTypeExt::is_fifo(&kind));
    }
    let err = timeline("a").write(&d).expect_err("a directory is refused");
    assert!(
        matches!(
            &err,
            ExportError::NotARegularFile {
                kind: "directory",
                ..
            }
        ),
        "{err}"
    );
    assert!(leftovers(&d).is_empty(), "{:?}", leftovers(&d));
}

#[test]
fn writers_of_one_path_do_not_share_a_temporary_file() {
    // Before: every writer used `<path>.tmp`; racing ranks renamed it away from each other
    // and some reported "No such file".
    let d = dir("race");
    let path = d.join("shared.trace.json");
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..16)
            .map(|i| {
                let path = &path;
                s.spawn(move || timeline(&format!("rank {i}")).write(path))
            })
            .collect();
        for h in handles {
            h.join().expect("no panic").expect("every write succeeds");
        }
    });
    let text = std::fs::read_to_string(&path).expect("the file is there");
    assert!(text.contains("rank "), "one complete write: {text}");
    serde_json::from_str::<serde_json::Value>(&text).expect("complete JSON");
    assert!(leftovers(&d).is_empty(), "{:?}", leftovers(&d));
    // A regular file is replaced.
    timeline("again")
        .write(&path)
        .expect("replaces a regular file");
    assert!(
        std::fs::read_to_string(&path)
            .expect("read")
            .contains("again")
    );
}
