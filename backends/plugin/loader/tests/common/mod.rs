//! Builds the C plugins the tests load: the reference plugin with its own Makefile, and
//! version-policy variants of it compiled from C here.

#![allow(dead_code)] // each test file uses a part

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The repository's `backends/plugin` directory.
pub fn plugin_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `make -C backends/plugin/host`, once per test process; the built library.
pub fn host_plugin() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = plugin_dir().join("host");
            let out = Command::new("make")
                .arg("-s")
                .arg("-C")
                .arg(&dir)
                .output()
                .expect("make runs (the reference plugin needs make and a C compiler)");
            assert!(
                out.status.success(),
                "make -C {} failed:\n{}",
                dir.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            dir.join("libmemreuse_host.so")
        })
        .clone()
}

/// Compiles `source` (C99, with the header on the include path, and the reference plugin
/// available as `#include "host.c"`) into a shared library in `dir`.
pub fn compile(dir: &Path, name: &str, source: &str) -> PathBuf {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, source).expect("write the C source");
    let so = dir.join(format!("lib{name}.so"));
    let out = Command::new("cc")
        .args([
            "-std=c99", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared", "-O1",
        ])
        .arg("-fvisibility=hidden")
        .arg("-I")
        .arg(plugin_dir().join("include"))
        .arg("-I")
        .arg(plugin_dir().join("host"))
        .arg("-o")
        .arg(&so)
        .arg(&c)
        .args(["-lpthread", "-lm"])
        .output()
        .expect("cc runs");
    assert!(
        out.status.success(),
        "cc {name}.c failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    so
}

/// A variant of the reference plugin: its table copied, then `edit` (C statements on
/// `MrBackendApi t`) applied, exported as `symbol`.
pub fn variant(dir: &Path, name: &str, symbol: &str, edit: &str) -> PathBuf {
    let source = format!(
        "#define memreuse_backend_v1 mr_reference_backend_v1\n\
         #include \"host.c\"\n\
         #undef memreuse_backend_v1\n\
         MR_EXPORT const MrBackendApi *{symbol}(void);\n\
         struct Bigger {{ MrBackendApi api; void *future[4]; }};\n\
         static struct Bigger big;\n\
         MR_EXPORT const MrBackendApi *{symbol}(void) {{\n\
             MrBackendApi t = *mr_reference_backend_v1();\n\
             {edit}\n\
             big.api = t;\n\
             return &big.api;\n\
         }}\n"
    );
    compile(dir, name, &source)
}
