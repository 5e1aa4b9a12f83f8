//! Imports PyTorch's memory snapshot (`torch.cuda.memory._dump_snapshot`, a pickle) and
//! memreuse's own snapshots (the same shape, as pickle or JSON): `device_traces[device]` is
//! replayed, the recording allocator's own segment decisions are skipped, and blocks live
//! before the trace ring's first entry are rebuilt from `segments`.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::io::BufRead;

use super::doc::{Doc, Ref, View};
use super::error::ImportError;
use super::history::{Action, Entry, InitialBlock, ReplayHistory};
use super::json::read_json;
use super::limits::{Fail, ImportLimits, Limit};
use super::pickle::read_pickle;

/// Reading context: the file name for errors, the decoded document, and the count of items
/// read again through shared containers (bounded by [`Limit::MemoCopies`]).
struct Ctx<'a> {
    path: &'a str,
    doc: &'a Doc,
    visited: RefCell<Vec<u64>>,
    copies: Cell<u64>,
    max_copies: u64,
}

impl<'a> Ctx<'a> {
    fn shape(&self, at: impl Into<String>, message: impl Into<String>) -> ImportError {
        ImportError::Shape {
            path: self.path.to_owned(),
            at: at.into(),
            message: message.into(),
        }
    }

    /// Counts reading the container at arena index `node` with `len` items: a second read
    /// (the container is shared) counts its items as copies.
    fn visit(&self, node: usize, len: usize) -> Result<(), ImportError> {
        let mut visited = self.visited.borrow_mut();
        let (word, bit) = (node / 64, 1u64 << (node % 64));
        if visited[word] & bit == 0 {
            visited[word] |= bit;
            return Ok(());
        }
        let copies = self.copies.get() + len as u64;
        self.copies.set(copies);
        if copies > self.max_copies {
            return Err(ImportError::LimitExceeded {
                path: self.path.to_owned(),
                limit: Limit::MemoCopies,
                max: self.max_copies,
            });
        }
        Ok(())
    }

    fn dict(&self, node: Ref, at: &str) -> Result<&'a [(Ref, Ref)], ImportError> {
        match self.doc.view(node) {
            View::Dict(d, i) => {
                self.visit(i, d.len())?;
                Ok(d)
            }
            other => Err(self.shape(at, format!("expected a dict, found {}", other.kind()))),
        }
    }

    fn list(&self, node: Ref, at: &str) -> Result<&'a [Ref], ImportError> {
        match self.doc.view(node) {
            View::List(l, i) => {
                self.visit(i, l.len())?;
                Ok(l)
            }
            other => Err(self.shape(at, format!("expected a list, found {}", other.kind()))),
        }
    }

    /// A non-negative integer field; `None` when absent and `required` is false.
    fn uint(
        &self,
        d: &[(Ref, Ref)],
        key: &str,
        at: &str,
        required: bool,
    ) -> Result<Option<u64>, ImportError> {
        match d
            .iter()
            .rev()
            .find(|(k, _)| matches!(self.doc.view(*k), View::Str(s) if s == key))
        {
            None if !required => Ok(None),
            None => Err(self.shape(at, format!("`{key}` is missing"))),
            Some(&(_, v)) => match self.doc.view(v) {
                View::Int(i) => u64::try_from(i).map(Some).map_err(|_| {
                    self.shape(
                        at,
                        format!("`{key}` is {i}: expected a non-negative integer"),
                    )
                }),
                other => Err(self.shape(
                    at,
                    format!(
                        "`{key}` is {}: expected a non-negative integer",
                        other.kind()
                    ),
                )),
            },
        }
    }

    fn string(&self, d: &[(Ref, Ref)], key: &str, at: &str) -> Result<&'a str, ImportError> {
        match self.doc.get(d, key).map(|v| self.doc.view(v)) {
            Some(View::Str(s)) => Ok(s),
            None => Err(self.shape(at, format!("`{key}` is missing"))),
            Some(other) => Err(self.shape(
                at,
                format!("`{key}` is {}: expected a string", other.kind()),
            )),
        }
    }

    /// Whether `entry` is a `free_completed` of `addr` (a look ahead: not counted as a
    /// read).
    fn completes(&self, entry: Ref, addr: u64) -> bool {
        let View::Dict(d, _) = self.doc.view(entry) else {
            return false;
        };
        matches!(
            self.doc.get(d, "action").map(|a| self.doc.view(a)),
            Some(View::Str("free_completed"))
        ) && matches!(self.doc.get(d, "addr").map(|a| self.doc.view(a)), Some(View::Int(a)) if a as u64 == addr)
    }
}

/// The actions of `device_traces` entries.
const ACTIONS: &str = "alloc, free_requested, free_completed, segment_alloc, segment_free, \
                       segment_map, segment_unmap, snapshot, oom";

/// Where a block stands in the replay.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Held {
    Allocated,
    Pending,
}

/// Decodes a pickle (`json == false`) or JSON snapshot read from `input` and builds the
/// history of `device` (`None`: the first device with trace entries), within `limits`.
pub fn import_snapshot(
    path: &str,
    input: &mut dyn BufRead,
    json: bool,
    device: Option<usize>,
    limits: &ImportLimits,
) -> Result<ReplayHistory, ImportError> {
    let what = if json { "JSON" } else { "pickle" };
    let decoded = if json {
        read_json(input, limits)
    } else {
        read_pickle(input, limits)
    };
    let doc = decoded.map_err(|fail| match fail {
        Fail::Limit(hit) => ImportError::LimitExceeded {
            path: path.to_owned(),
            limit: hit.limit,
            max: hit.max,
        },
        Fail::Decode(message) => ImportError::Decode {
            path: path.to_owned(),
            what,
            message,
        },
        Fail::Io(source) => ImportError::Io {
            path: path.to_owned(),
            source,
        },
    })?;
    let ctx = Ctx {
        path,
        doc: &doc,
        visited: RefCell::new(vec![0; doc.node_count().div_ceil(64)]),
        copies: Cell::new(0),
        max_copies: limits.memo_copies,
    };
    let root = ctx.dict(doc.root, "the top level")?;
    let traces = match doc.get(root, "device_traces") {
        Some(node) => ctx.list(node, "device_traces")?,
        None => &[],
    };
    let with_entries: Vec<usize> = (0..traces.len())
        .filter(|&d| matches!(doc.view(traces[d]), View::List(l, _) if !l.is_empty()))
        .collect();
    let device = match device {
        Some(d) => d,
        None => with_entries.first().copied().unwrap_or(0),
    };
    let Some(&entries) = traces.get(device) else {
        return Err(ImportError::NoTrace {
            path: path.to_owned(),
            device,
            devices: with_entries,
        });
    };
    let entries = ctx.list(entries, &format!("device_traces[{device}]"))?;
    if entries.is_empty() {
        return Err(ImportError::NoTrace {
            path: path.to_owned(),
            device,
            devices: with_entries,
        });
    }

    let mut out = ReplayHistory {
        format: if json {
            "snapshot (JSON)"
        } else {
            "snapshot (pickle)"
        }
        .to_owned(),
        device_total: ctx.uint(root, "device_total", "the top level", false)?,
        ..ReplayHistory::default()
    };
    // Stream 0 (the default stream) is index 0 even when the trace starts elsewhere.
    out.stream_index(0);
    let mut live: HashMap<u64, (usize, Held)> = HashMap::new();
    // Blocks whose `free_requested` was skipped as unknown: their completion is skipped too,
    // without counting it twice.
    let mut unknown_pending: HashSet<u64> = HashSet::new();
    let mut i = 0;
    while i < entries.len() {
        let at = format!("device_traces[{device}][{i}]");
        let e = ctx.dict(entries[i], &at)?;
        let action = ctx.string(e, "action", &at)?;
        let source = i as u64;
        i += 1;
        match action {
            "alloc" => {
                let addr = ctx.uint(e, "addr", &at, true)?.unwrap_or_default();
                let size = ctx.uint(e, "size", &at, true)?.unwrap_or_default();
                let stream = ctx.uint(e, "stream", &at, false)?.unwrap_or(0);
                if live.contains_key(&addr) {
                    return Err(ctx.shape(
                        at,
                        format!("alloc at {addr:#x}, which is still live: each block is freed before its address is handed out again"),
                    ));
                }
                let stream = out.stream_index(stream);
                let id = out.ids;
                out.ids += 1;
                live.insert(addr, (id, Held::Allocated));
                out.entries.push(Entry {
                    id,
                    action: Action::Alloc { size, stream },
                    source,
                });
            }
            "free_requested" => {
                let addr = ctx.uint(e, "addr", &at, true)?.unwrap_or_default();
                match live.get(&addr) {
                    Some(&(id, Held::Allocated)) => {
                        // PyTorch records `free_completed` right after `free_requested` when
                        // no other stream uses the block: then it is a plain free.
                        let completes_now = entries
                            .get(i)
                            .is_some_and(|&next| ctx.completes(next, addr));
                        let action = if completes_now {
                            i += 1;
                            live.remove(&addr);
                            Action::Free
                        } else {
                            live.insert(addr, (id, Held::Pending));
                            Action::FreeRequested
                        };
                        out.entries.push(Entry { id, action, source });
                    }
                    Some(&(_, Held::Pending)) => {
                        return Err(ctx.shape(
                            at,
                            format!("free_requested of {addr:#x}, whose free is already pending"),
                        ));
                    }
                    None => {
                        out.skipped_unknown_frees += 1;
                        unknown_pending.insert(addr);
                    }
                }
            }
            "free_completed" => {
                let addr = ctx.uint(e, "addr", &at, true)?.unwrap_or_default();
                match live.get(&addr) {
                    Some(&(id, Held::Pending)) => {
                        live.remove(&addr);
                        out.entries.push(Entry {
                            id,
                            action: Action::FreeCompleted,
                            source,
                        });
                    }
                    Some(&(_, Held::Allocated)) => {
                        return Err(ctx.shape(
                            at,
                            format!("free_completed of {addr:#x} without its free_requested"),
                        ));
                    }
                    None => {
                        if !unknown_pending.remove(&addr) {
                            out.skipped_unknown_frees += 1;
                        }
                    }
                }
            }
            "segment_alloc" | "segment_free" | "segment_map" | "segment_unmap" | "snapshot" => {
                out.ignored_entries += 1;
            }
            "oom" => {
                out.ignored_entries += 1;
                out.recorded_ooms.push(source);
            }
            other => {
                return Err(ctx.shape(at, format!("unknown action `{other}` (valid: {ACTIONS})")));
            }
        }
    }
    reconstruct_initial(&ctx, root, device, &live, &mut out)?;
    out.lower_bound |= out.skipped_unknown_frees > 0 || !out.initial.is_empty();
    Ok(out)
}

/// Active blocks of `device`'s segments that the trace never allocated were live before its
/// first entry: they become initial blocks (requested size, segment stream), in address
/// order.
fn reconstruct_initial(
    ctx: &Ctx<'_>,
    root: &[(Ref, Ref)],
    device: usize,
    live: &HashMap<u64, (usize, Held)>,
    out: &mut ReplayHistory,
) -> Result<(), ImportError> {
    let Some(segments) = ctx.doc.get(root, "segments") else {
        return Ok(());
    };
    let mut found = Vec::new();
    for (s, seg) in ctx.list(segments, "segments")?.iter().enumerate() {
        let at = format!("segments[{s}]");
        let seg = ctx.dict(*seg, &at)?;
        if ctx.uint(seg, "device", &at, false)?.unwrap_or(0) != device as u64 {
            continue;
        }
        let stream = ctx.uint(seg, "stream", &at, false)?.unwrap_or(0);
        let mut addr = ctx.uint(seg, "address", &at, true)?.unwrap_or_default();
        let Some(blocks) = ctx.doc.get(seg, "blocks") else {
            continue;
        };
        for (b, block) in ctx
            .list(blocks, &format!("{at}.blocks"))?
            .iter()
            .enumerate()
        {
            let at = format!("{at}.blocks[{b}]");
            let block = ctx.dict(*block, &at)?;
            let size = ctx.uint(block, "size", &at, true)?.unwrap_or_default();
            let block_addr = ctx.uint(block, "address", &at, false)?.unwrap_or(addr);
            addr = block_addr + size;
            let state = ctx.string(block, "state", &at)?;
            if state == "inactive" || live.contains_key(&block_addr) {
                continue;
            }
            if state != "active_allocated" && state != "active_pending_free" {
                return Err(ctx.shape(
                    at,
                    format!(
                        "state `{state}` (valid: active_allocated, active_pending_free, inactive)"
                    ),
                ));
            }
            let requested = ctx
                .uint(block, "requested_size", &at, false)?
                .unwrap_or(size);
            found.push((block_addr, requested, stream));
        }
    }
    found.sort_unstable();
    for (_, size, stream) in found {
        let stream = out.stream_index(stream);
        let id = out.ids;
        out.ids += 1;
        out.initial.push(InitialBlock { id, size, stream });
    }
    Ok(())
}
