//! Recorded allocation streams (`memreuse.trace/1`, specified in the repository's
//! `docs/trace-format.md`; recorded model traces in `traces/*.trace.gz`) turned into a
//! [`Trace`] every peer replays.
//!
//! A minimal reader for the benchmark only (the repository's reader with every validity rule
//! is `memreuse_core::history`): `alloc`/`free` lines in order; comments and `end` skipped;
//! one stream (the peers run on one); zero-byte allocations are left out with their frees
//! (PyTorch hands out no block for them); allocations still live at the end are freed in a
//! drain, as in the synthetic trace.

use std::collections::HashMap;
use std::io::Read;

use super::{Op, Trace};

/// Reads a `memreuse.trace/1` file (gzip when the name ends in `.gz`).
pub fn read_recorded(path: &str) -> Result<Trace, String> {
    let raw = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    let mut text = String::new();
    if path.ends_with(".gz") {
        flate2::read::GzDecoder::new(&raw[..])
            .read_to_string(&mut text)
            .map_err(|e| format!("{path}: gzip: {e}"))?;
    } else {
        text = String::from_utf8(raw).map_err(|e| format!("{path}: {e}"))?;
    }
    parse_recorded(&text).map_err(|e| format!("{path}: {e}"))
}

/// Parses the text of a `memreuse.trace/1` history.
pub fn parse_recorded(text: &str) -> Result<Trace, String> {
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, "memreuse.trace/1")) => {}
        _ => return Err("line 1: not a memreuse.trace/1 file".into()),
    }
    let mut ops = Vec::new();
    let mut live: HashMap<u64, (u32, u64)> = HashMap::new();
    let mut free_slots: Vec<u32> = Vec::new();
    let (mut slots, mut allocs, mut bytes, mut peak, mut requested) =
        (0u32, 0u64, 0u64, 0u64, 0u64);
    for (i, line) in lines {
        let f: Vec<&str> = line.split_whitespace().collect();
        let num = |k: usize| -> Result<u64, String> {
            f.get(k)
                .ok_or_else(|| format!("line {}: missing field {k}", i + 1))?
                .parse()
                .map_err(|e| format!("line {}: {e}", i + 1))
        };
        match f.first().copied() {
            Some("alloc") => {
                let (id, size) = (num(1)?, num(2)?);
                if size == 0 {
                    live.insert(id, (u32::MAX, 0));
                    continue;
                }
                let slot = free_slots.pop().unwrap_or_else(|| {
                    slots += 1;
                    slots - 1
                });
                if live.insert(id, (slot, size)).is_some() {
                    return Err(format!("line {}: id {id} is live already", i + 1));
                }
                ops.push(Op::Alloc { slot, size });
                allocs += 1;
                bytes += size;
                requested += size;
                peak = peak.max(bytes);
            }
            Some("free") => {
                let id = num(1)?;
                let (slot, size) = live
                    .remove(&id)
                    .ok_or_else(|| format!("line {}: free of unknown id {id}", i + 1))?;
                if size == 0 {
                    continue;
                }
                ops.push(Op::Free { slot });
                free_slots.push(slot);
                bytes -= size;
            }
            _ => {} // comments, `end`, blank lines
        }
    }
    let mut rest: Vec<(u32, u64)> = live.into_values().filter(|&(_, s)| s != 0).collect();
    rest.sort_unstable();
    ops.extend(rest.into_iter().map(|(slot, _)| Op::Free { slot }));
    Ok(Trace {
        ops,
        allocs,
        slots: slots as usize,
        live_peak_bytes: peak,
        requested_bytes: requested,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_allocs_frees_and_drains_what_is_left() {
        let t = parse_recorded(
            "memreuse.trace/1\n# c\nalloc 1 4096 0 10\nalloc 2 0 0\nalloc 3 100 0\nfree 1 4096 0\nfree 2 0 0\nalloc 1 8 0\nend 6\n",
        )
        .unwrap();
        assert_eq!(t.allocs, 3);
        assert_eq!(t.live_peak_bytes, 4196);
        assert_eq!(t.ops.len(), 3 + 3, "three allocs, one free, two drained");
        assert!(parse_recorded("nope\n").is_err());
        assert!(parse_recorded("memreuse.trace/1\nfree 9 1 0\n").is_err());
    }
}
