//! `whatif` replays: the recorded model traces give the allocator's own replay figures, the
//! out-of-memory answer on histories whose peak is known, pending frees keep their delay,
//! streams keep their pools, the settings list, and the command line.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use memreuse::history::{EventKind, read_trace_file};
use memreuse::mock::{MockConfig, MockDevice};
use memreuse::{AllocatorConfig, Backend, CachingAllocator};
use memreuse_conformance::whatif::{
    Action, Entry, Outcome, Plan, ReplayFigures, ReplayHistory, default_settings, evaluate,
    import_bytes, import_file, plan, replay,
};

const MIB: u64 = 1 << 20;

fn traces() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../traces");
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".trace.gz"))
        .collect();
    out.sort();
    assert_eq!(out.len(), 2, "the two recorded model traces");
    out
}

fn run(h: &ReplayHistory, conf: &str, capacity: u64) -> ReplayFigures {
    let config = AllocatorConfig::parse(conf).unwrap();
    replay(h, config, capacity, &mut |_| {}).unwrap()
}

/// The allocator's own replay: every request straight through `CachingAllocator` over the
/// mock (no backing memory, no race detector), as the benchmark replays the traces.
fn mock_replay(path: &Path, conf: &str) -> (u64, u64, u64) {
    let history = read_trace_file(path).unwrap();
    let config = MockConfig {
        capacity: 64 << 30,
        backing: false,
        race_detection: false,
        ..MockConfig::default()
    };
    let device = Arc::new(MockDevice::new(config).unwrap());
    let alloc = CachingAllocator::new(Arc::clone(&device), AllocatorConfig::parse(conf).unwrap());
    let stream = device.default_stream();
    let mut live = std::collections::HashMap::new();
    for e in history.events() {
        match e.kind {
            EventKind::Alloc => {
                live.insert(e.id, alloc.allocate(e.size, &stream).unwrap());
            }
            EventKind::Free => drop(live.remove(&e.id)),
        }
    }
    let s = alloc.stats();
    drop(live);
    (
        s.reserved_bytes.peak,
        s.allocated_bytes.peak,
        s.num_device_alloc,
    )
}

#[test]
fn the_recorded_model_traces_give_the_allocators_own_replay_figures() {
    for path in traces() {
        let h = import_file(&path, None).unwrap();
        assert!(!h.lower_bound);
        for conf in ["", "max_split_size_mb:128", "roundup_power2_divisions:4"] {
            let f = run(&h, conf, u64::MAX);
            assert_eq!(
                (
                    f.reserved_peak_bytes,
                    f.allocated_peak_bytes,
                    f.device_allocations
                ),
                mock_replay(&path, conf),
                "{} under {conf:?}",
                path.display()
            );
            assert_eq!(f.first_oom_entry, None);
            assert_eq!(f.entries_replayed, h.entries.len() as u64);
            assert_eq!(f.live_peak_bytes, h.live_peak_bytes());
            assert!(f.reserved_peak_bytes >= f.live_peak_bytes);
        }
    }
}

#[test]
fn a_recorded_trace_fits_at_its_reserved_peak_and_not_below_its_live_peak() {
    let path = &traces()[0];
    let h = import_file(path, None).unwrap();
    let unlimited = run(&h, "", u64::MAX);
    let at_peak = run(&h, "", unlimited.reserved_peak_bytes);
    assert_eq!(at_peak.first_oom_entry, None);
    assert_eq!(at_peak.reserved_peak_bytes, unlimited.reserved_peak_bytes);
    let below_live = run(&h, "", h.live_peak_bytes() - 1);
    let oom = below_live
        .first_oom_entry
        .expect("no allocator fits below the live peak");
    // The entry is a line of the file, and that line is an alloc.
    let line = std::str::from_utf8(&flate2_text(path))
        .unwrap()
        .lines()
        .nth(oom as usize - 1)
        .unwrap()
        .to_owned();
    assert!(line.starts_with("alloc "), "line {oom}: {line}");
    assert!(below_live.oom_message.unwrap().contains("out of memory"));
    assert!(below_live.entries_replayed < h.entries.len() as u64);
}

fn flate2_text(path: &Path) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_end(&mut out)
        .unwrap();
    out
}

fn trace(text: &str) -> ReplayHistory {
    import_bytes("t.trace", text.as_bytes(), None).unwrap()
}

/// Three 30 MiB blocks live at once: 30 MiB is a multiple of 2 MiB above 10 MiB, so each is
/// one segment of exactly 30 MiB and the reserved peak is 90 MiB.
#[test]
fn the_oom_answer_on_a_history_whose_peak_is_known() {
    let h = trace(
        "memreuse.trace/1\nalloc 1 31457280 0\nalloc 2 31457280 0\nfree 1 31457280 0\nalloc 3 31457280 0\nalloc 4 31457280 0\nend 5\n",
    );
    let unlimited = run(&h, "", u64::MAX);
    assert_eq!(unlimited.reserved_peak_bytes, 90 * MIB);
    assert_eq!(unlimited.live_peak_bytes, 90 * MIB);
    assert_eq!(unlimited.device_allocations, 3);
    assert_eq!(run(&h, "", 90 * MIB).first_oom_entry, None);
    let short = run(&h, "", 90 * MIB - 1);
    assert_eq!(
        short.first_oom_entry,
        Some(6),
        "line 6: the third live block"
    );
    assert_eq!(short.entries_replayed, 4);
    assert_eq!(
        short.live_peak_bytes,
        60 * MIB,
        "the failing request was never held"
    );
    // The table and the JSON say the same.
    let outcomes = evaluate(&h, &[String::new()], Some(90 * MIB - 1), false, &mut |_| {}).unwrap();
    let json: serde_json::Value = serde_json::from_str(&memreuse_conformance::whatif::to_json(
        "t.trace",
        &h,
        Some(90 * MIB - 1),
        &outcomes,
    ))
    .unwrap();
    assert_eq!(json["format"], "memreuse.whatif/1");
    assert_eq!(json["settings"][0]["alloc_conf"], "");
    assert_eq!(json["settings"][0]["first_oom_entry"], 6);
    assert_eq!(json["settings"][0]["reserved_peak_bytes"], 60 * MIB);
    assert_eq!(json["device_memory_bytes"], 90 * MIB - 1);
    let table = memreuse_conformance::whatif::render_table(&outcomes, false);
    // The table numbers entries as the header counts them (line 6 is the 5th entry).
    assert_eq!(json["settings"][0]["first_oom_position"], 5);
    assert!(table.contains("entry 5"), "{table}");
}

fn entry(id: usize, action: Action) -> Entry {
    Entry {
        id,
        action,
        source: 0,
    }
}

/// `free_requested` long before `free_completed`: the block is not reused until then, and
/// an out-of-memory retry synchronizes it as PyTorch does.
#[test]
fn a_pending_free_keeps_its_delay() {
    let big = Action::Alloc {
        size: 30 * MIB,
        stream: 0,
    };
    let history = |completed_first: bool| {
        let mut entries = vec![entry(0, big), entry(0, Action::FreeRequested)];
        if completed_first {
            entries.push(entry(0, Action::FreeCompleted));
        }
        entries.push(entry(1, big));
        if !completed_first {
            entries.push(entry(0, Action::FreeCompleted));
        }
        ReplayHistory {
            streams: vec![0],
            entries,
            ids: 2,
            ..ReplayHistory::default()
        }
    };
    let pending = run(&history(false), "", u64::MAX);
    assert_eq!(
        pending.reserved_peak_bytes,
        60 * MIB,
        "the pending block is not reused"
    );
    let completed = run(&history(true), "", u64::MAX);
    assert_eq!(completed.reserved_peak_bytes, 30 * MIB);
    let tight = run(&history(false), "", 30 * MIB);
    assert_eq!(
        tight.first_oom_entry, None,
        "the retry synchronizes the pending free"
    );
    assert_eq!(tight.alloc_retries, 1);
    assert_eq!(tight.reserved_peak_bytes, 30 * MIB);
}

#[test]
fn streams_keep_their_own_pools() {
    let other = trace(
        "memreuse.trace/1\nalloc 1 31457280 5\nfree 1 31457280 5\nalloc 2 31457280 0\nend 3\n",
    );
    assert_eq!(run(&other, "", u64::MAX).reserved_peak_bytes, 60 * MIB);
    let same = trace(
        "memreuse.trace/1\nalloc 1 31457280 0\nfree 1 31457280 0\nalloc 2 31457280 0\nend 3\n",
    );
    assert_eq!(run(&same, "", u64::MAX).reserved_peak_bytes, 30 * MIB);
}

#[test]
fn zero_byte_requests_take_no_block() {
    let h = trace("memreuse.trace/1\nalloc 1 0 0\nalloc 2 512 0\nfree 1 0 0\nend 3\n");
    let f = run(&h, "", u64::MAX);
    assert_eq!(f.allocated_peak_bytes, 512);
    assert_eq!(f.device_allocations, 1);
}

#[test]
fn the_settings_list_and_what_cannot_be_replayed() {
    let list = default_settings();
    assert_eq!(list[0], "", "PyTorch's defaults first");
    assert!(list.contains(&"expandable_segments:True".to_owned()));
    assert!(
        list.iter()
            .filter(|s| s.starts_with("max_split_size_mb:"))
            .count()
            >= 3
    );
    assert!(
        list.iter()
            .any(|s| s.starts_with("roundup_power2_divisions:"))
    );
    let gc = list
        .iter()
        .find(|s| s.contains("garbage_collection_threshold"))
        .unwrap();
    assert!(matches!(plan(gc, false), Ok(Plan::NotApplicable(_))));
    assert!(matches!(plan(gc, true), Ok(Plan::Replay(_))));
    assert!(matches!(
        plan("expandable_segments:True", true),
        Ok(Plan::Replay(c)) if c.expandable_segments
    ));
    assert!(plan("max_split_size_mb:abc", true).is_err());
    assert!(plan("bogus:1", true).is_err());
    // A page size the allocator would round up is not replayed under its label (issue 27:
    // `expandable_segments_page_size_mb:1` was reported as 1 MiB pages with 2 MiB figures).
    match plan(
        "expandable_segments:True,expandable_segments_page_size_mb:1",
        true,
    ) {
        Ok(Plan::NotAvailable(why)) => assert!(why.contains("2 MiB pages"), "{why}"),
        other => panic!("expected not available, got {other:?}"),
    }
    assert!(matches!(
        plan(
            "expandable_segments:True,expandable_segments_page_size_mb:4",
            true
        ),
        Ok(Plan::Replay(_))
    ));
    // Every default setting is either replayed or says why not.
    let h = trace("memreuse.trace/1\nalloc 1 4096 0\nfree 1 4096 0\nend 2\n");
    let outcomes = evaluate(&h, &list, None, false, &mut |_| {}).unwrap();
    assert_eq!(outcomes.len(), list.len());
    for o in &outcomes {
        match &o.outcome {
            Outcome::Replayed(f, _) => assert_eq!(f.reserved_peak_bytes, 2 * MIB),
            Outcome::NotAvailable(why) => panic!("{}: {why}", o.alloc_conf),
            Outcome::NotApplicable(_) => assert_eq!(&o.alloc_conf, gc),
            Outcome::Failed(why) => panic!("{why}"),
        }
    }
}

fn cli(args: &[&str]) -> (Option<i32>, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_memreuse-conformance"))
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.code(), text)
}

#[test]
fn the_command_line_writes_table_json_and_report() {
    let dir = std::env::temp_dir().join(format!("memreuse-whatif-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("h.trace");
    std::fs::write(
        &file,
        "memreuse.trace/1\nalloc 1 31457280 0\nalloc 2 31457280 0\nend 2\n",
    )
    .unwrap();
    let json = dir.join("w.json");
    let report = dir.join("report");
    let f = file.to_str().unwrap();
    let (code, out) = cli(&[
        "whatif",
        f,
        "--device-memory",
        "41943040",
        "--json",
        json.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("PyTorch defaults") && out.contains("entry 2"),
        "{out}"
    );
    // Every default setting replays, expandable segments included.
    assert!(!out.contains("not available"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("expandable_segments:True") && l.contains("entry 2")),
        "{out}"
    );
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(doc["format"], "memreuse.whatif/1");
    assert_eq!(
        doc["settings"].as_array().unwrap().len(),
        default_settings().len()
    );
    let page = std::fs::read_to_string(report.join("index.html")).unwrap();
    assert!(page.contains("<svg") && page.contains("max_split_size_mb:64"));

    let (code, out) = cli(&[
        "whatif",
        f,
        "--alloc-conf",
        "max_split_size_mb:1",
        "--quiet",
    ]);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("max_split_size_mb"), "{out}");
    let (code, out) = cli(&["whatif", dir.join("missing").to_str().unwrap()]);
    assert_eq!(code, Some(2), "{out}");
    let (code, out) = cli(&[
        "whatif",
        f,
        "--alloc-conf",
        "",
        "--alloc-conf",
        "max_split_size_mb:64",
    ]);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        !out.contains("not available"),
        "only the settings asked for: {out}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The smallest fitting device: exact on a history whose peak is known, and on a recorded
/// trace the smallest capacity of the 2 MiB grid that fits: every one below it, down to the
/// live peak, runs out of memory.
#[test]
fn the_smallest_fitting_device() {
    use memreuse_conformance::whatif::{CAPACITY_STEP, smallest_fitting_capacity};
    let known = trace(
        "memreuse.trace/1\nalloc 1 31457280 0\nalloc 2 31457280 0\nfree 1 31457280 0\nalloc 3 31457280 0\nalloc 4 31457280 0\nend 5\n",
    );
    let config = AllocatorConfig::default();
    assert_eq!(
        smallest_fitting_capacity(&known, &config, 90 * MIB).unwrap(),
        Some(90 * MIB)
    );
    let h = import_file(&traces()[0], None).unwrap();
    for conf in ["", "expandable_segments:True"] {
        let config = AllocatorConfig::parse(conf).unwrap();
        let unlimited = run(&h, conf, u64::MAX).reserved_peak_bytes;
        let smallest = smallest_fitting_capacity(&h, &config, unlimited)
            .unwrap()
            .unwrap();
        assert!(
            smallest <= unlimited.next_multiple_of(CAPACITY_STEP),
            "{conf:?}"
        );
        assert_eq!(run(&h, conf, smallest).first_oom_entry, None, "{conf:?}");
        let mut below = smallest - CAPACITY_STEP;
        while below >= h.live_peak_bytes() {
            assert!(
                run(&h, conf, below).first_oom_entry.is_some(),
                "{conf:?} fits at {below}, below {smallest}"
            );
            below -= CAPACITY_STEP;
        }
    }
    // Through `evaluate`, with a capacity given: the search starts from an unlimited replay.
    let outcomes = evaluate(&known, &[String::new()], Some(60 * MIB), true, &mut |_| {}).unwrap();
    assert_eq!(outcomes[0].smallest_device, Some(90 * MIB));
    let table = memreuse_conformance::whatif::render_table(&outcomes, false);
    assert!(
        table.contains("smallest device") && table.contains("90.0 MiB"),
        "{table}"
    );
}

/// A history built by hand that leaves `ids` and `streams` empty (the public fields allow
/// it) replays like the consistent one: the tables grow to what the entries name.
#[test]
fn a_hand_built_history_without_tables_replays() {
    let alloc = |stream| Action::Alloc {
        size: 30 * MIB,
        stream,
    };
    let sloppy = ReplayHistory {
        entries: vec![
            entry(0, alloc(0)),
            entry(0, Action::Free),
            entry(3, alloc(2)),
        ],
        ..ReplayHistory::default()
    };
    assert_eq!(sloppy.extent(), (4, 3));
    assert_eq!(sloppy.live_peak_bytes(), 30 * MIB);
    let f = run(&sloppy, "", u64::MAX);
    assert_eq!(f.reserved_peak_bytes, 60 * MIB, "stream 2 has its own pool");
}

/// Fitting is not monotonic in the capacity: on the Llama trace with expandable segments the
/// history fits at 4038 MiB, fails at 4044 MiB and fits again from 4058 MiB (where the
/// bisection this search replaced stopped); the search returns 4038 MiB.
#[test]
fn the_smallest_fitting_device_is_found_where_fitting_is_not_monotonic() {
    use memreuse_conformance::whatif::smallest_fitting_capacity;
    let h = import_file(&traces()[1], None).unwrap();
    let conf = "expandable_segments:True";
    assert_eq!(run(&h, conf, 4044 * MIB).first_oom_entry, Some(13411));
    assert_eq!(run(&h, conf, 4058 * MIB).first_oom_entry, None);
    let unlimited = run(&h, conf, u64::MAX).reserved_peak_bytes;
    let config = AllocatorConfig::parse(conf).unwrap();
    assert_eq!(
        smallest_fitting_capacity(&h, &config, unlimited).unwrap(),
        Some(4038 * MIB)
    );
}
