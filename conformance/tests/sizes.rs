//! Through the binary: byte options take `30MiB`-style sizes, and a bad size is a usage
//! error that names the flag and says what is valid.

use std::process::{Command, Output};

fn cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memreuse-conformance"))
        .args(args)
        .output()
        .expect("runs")
}

#[test]
fn device_memory_takes_binary_units_and_refuses_decimal_ones_naming_the_flag() {
    let d = std::env::temp_dir().join(format!("memreuse-sizes-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("dir");
    let f = d.join("oom.json");
    let o = cli(&[
        "generate",
        "oom-pressure",
        "--device-memory",
        "30MiB",
        "-o",
        &f.to_string_lossy(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let text = std::fs::read_to_string(&f).expect("written");
    assert!(text.contains("\"device_memory\": 31457280"), "{text}");
    for bad in ["30MB", "-1", "99999999999TiB", "0.1KiB"] {
        let o = cli(&["--device-memory", bad, "--mode", "0"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{bad}: {err}");
        assert!(err.contains("--device-memory"), "{bad}: {err}");
    }
    let o = cli(&["--device-memory", "30MB"]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("decimal KB/MB/GB/TB are refused"),
        "{o:?}"
    );
    let _ = std::fs::remove_dir_all(d);
}
