//! `whatif` throughput: history entries replayed per second of CPU time, per setting, on
//! the recorded model traces (`traces/*.trace.gz`). A benchmark, not a test:
//!
//! ```sh
//! cargo bench -p memreuse-conformance --bench whatif            # 20 rounds per setting
//! cargo bench -p memreuse-conformance --bench whatif -- 100     # rounds
//! ```
//!
//! Each round replays the whole history under one setting on a fresh allocator; the figure
//! is total entries / total thread CPU time (CLOCK_THREAD_CPUTIME_ID), so other load on
//! the machine does not decide it.

use std::path::Path;

use memreuse_conformance::whatif::{Outcome, default_settings, evaluate, import_file};

fn main() {
    let rounds: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(20);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../traces");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("traces/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.to_string_lossy().ends_with(".trace.gz"))
        .collect();
    files.sort();
    // A capacity makes the garbage-collection setting applicable; it is far above every
    // peak, so nothing runs out of memory.
    let capacity = Some(64 << 30);
    println!("rounds per setting: {rounds}, device memory 64 GiB");
    println!(
        "{:<20} {:<66} {:>9} {:>12} {:>16}",
        "trace", "setting", "entries", "cpu ms/round", "M entries/cpu-s"
    );
    for file in &files {
        let history = import_file(file, None).expect("readable trace");
        let name = file.file_name().unwrap_or_default().to_string_lossy();
        for conf in default_settings() {
            let mut cpu = 0.0;
            let mut entries = 0u64;
            let mut available = true;
            for _ in 0..rounds {
                let outcome = evaluate(
                    &history,
                    std::slice::from_ref(&conf),
                    capacity,
                    false,
                    &mut |_| {},
                )
                .expect("valid setting");
                match &outcome[0].outcome {
                    Outcome::Replayed(f, seconds) => {
                        cpu += seconds;
                        entries += f.entries_replayed;
                    }
                    _ => available = false,
                }
            }
            let conf = if conf.is_empty() {
                "\"\"".to_owned()
            } else {
                conf
            };
            if !available {
                println!("{name:<20} {conf:<66} (not replayed)");
                continue;
            }
            println!(
                "{name:<20} {conf:<66} {:>9} {:>12.2} {:>16.2}",
                entries / rounds as u64,
                cpu * 1e3 / rounds as f64,
                entries as f64 / cpu / 1e6
            );
        }
    }
}
