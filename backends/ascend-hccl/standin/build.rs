//! With feature `cann85`, builds `libhcomm.so` (`hcomm/hcomm.rs`) with plain rustc into
//! OUT_DIR and links the stand-in against it, as `libhccl.so` links `libhcomm.so` in a CANN
//! 8.5+ install. Nothing to do for the other variants.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=hcomm/hcomm.rs");
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_CANN85").is_none() {
        return;
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let status = Command::new(rustc)
        .args([
            "--crate-type",
            "cdylib",
            "--crate-name",
            "hcomm",
            "--edition",
            "2021",
            "-C",
            "opt-level=2",
            "-C",
            "panic=abort",
            "--out-dir",
        ])
        .arg(&out)
        .arg("hcomm/hcomm.rs")
        .status()
        .expect("run rustc for libhcomm.so");
    assert!(status.success(), "building libhcomm.so failed: {status}");
    println!("cargo:rustc-link-search=native={}", out.display());
    // The stand-in finds libhcomm.so next to itself, as a CANN install's lib64 holds both.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-rpath,$ORIGIN");
    println!(
        "cargo:rustc-env=MEMREUSE_STANDIN_HCOMM={}",
        out.join("libhcomm.so").display()
    );
}
