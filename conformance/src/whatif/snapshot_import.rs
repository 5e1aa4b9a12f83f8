//! Imports PyTorch's memory snapshot (`torch.cuda.memory._dump_snapshot`, a pickle) and
//! memreuse's own snapshots (the same shape, as pickle or JSON): `device_traces[device]` is
//! replayed, the recording allocator's own segment decisions are skipped, and blocks live
//! before the trace ring's first entry are rebuilt from `segments`.

use std::collections::{HashMap, HashSet};

use super::error::ImportError;
use super::history::{Action, Entry, InitialBlock, ReplayHistory};

/// The part of a pickle or JSON value a snapshot uses.
#[derive(Debug)]
enum Node {
    Int(i64),
    Str(String),
    List(Vec<Node>),
    Dict(HashMap<String, Node>),
    /// Anything else (None, floats, bytes, sets, integers wider than 64 bits), named.
    Other(&'static str),
}

impl Node {
    fn from_pickle(v: serde_pickle::Value) -> Node {
        use serde_pickle::{HashableValue, Value};
        match v {
            Value::I64(i) => Node::Int(i),
            Value::Bool(b) => Node::Int(i64::from(b)),
            Value::String(s) => Node::Str(s),
            Value::List(l) | Value::Tuple(l) => {
                Node::List(l.into_iter().map(Node::from_pickle).collect())
            }
            Value::Dict(d) => Node::Dict(
                d.into_iter()
                    .filter_map(|(k, v)| match k {
                        HashableValue::String(k) => Some((k, Node::from_pickle(v))),
                        _ => None,
                    })
                    .collect(),
            ),
            Value::None => Node::Other("None"),
            Value::Int(_) => Node::Other("an integer wider than 64 bits"),
            Value::F64(_) => Node::Other("a float"),
            Value::Bytes(_) => Node::Other("bytes"),
            Value::Set(_) | Value::FrozenSet(_) => Node::Other("a set"),
        }
    }

    fn from_json(v: serde_json::Value) -> Node {
        use serde_json::Value;
        match v {
            Value::Number(n) => n
                .as_i64()
                .map_or(Node::Other("a non-integer number"), Node::Int),
            Value::Bool(b) => Node::Int(i64::from(b)),
            Value::String(s) => Node::Str(s),
            Value::Array(a) => Node::List(a.into_iter().map(Node::from_json).collect()),
            Value::Object(o) => Node::Dict(
                o.into_iter()
                    .map(|(k, v)| (k, Node::from_json(v)))
                    .collect(),
            ),
            Value::Null => Node::Other("null"),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Node::Int(_) => "an integer",
            Node::Str(_) => "a string",
            Node::List(_) => "a list",
            Node::Dict(_) => "a dict",
            Node::Other(what) => what,
        }
    }
}

/// Decoding context: the file name for errors.
struct Ctx<'a> {
    path: &'a str,
}

impl Ctx<'_> {
    fn shape(&self, at: impl Into<String>, message: impl Into<String>) -> ImportError {
        ImportError::Shape {
            path: self.path.to_owned(),
            at: at.into(),
            message: message.into(),
        }
    }

    fn dict<'n>(&self, node: &'n Node, at: &str) -> Result<&'n HashMap<String, Node>, ImportError> {
        match node {
            Node::Dict(d) => Ok(d),
            other => Err(self.shape(at, format!("expected a dict, found {}", other.kind()))),
        }
    }

    fn list<'n>(&self, node: &'n Node, at: &str) -> Result<&'n [Node], ImportError> {
        match node {
            Node::List(l) => Ok(l),
            other => Err(self.shape(at, format!("expected a list, found {}", other.kind()))),
        }
    }

    /// A non-negative integer field; `None` when absent and `required` is false.
    fn uint(
        &self,
        d: &HashMap<String, Node>,
        key: &str,
        at: &str,
        required: bool,
    ) -> Result<Option<u64>, ImportError> {
        match d.get(key) {
            None if !required => Ok(None),
            None => Err(self.shape(at, format!("`{key}` is missing"))),
            Some(Node::Int(i)) => u64::try_from(*i).map(Some).map_err(|_| {
                self.shape(
                    at,
                    format!("`{key}` is {i}: expected a non-negative integer"),
                )
            }),
            Some(other) => Err(self.shape(
                at,
                format!(
                    "`{key}` is {}: expected a non-negative integer",
                    other.kind()
                ),
            )),
        }
    }

    fn string<'n>(
        &self,
        d: &'n HashMap<String, Node>,
        key: &str,
        at: &str,
    ) -> Result<&'n str, ImportError> {
        match d.get(key) {
            Some(Node::Str(s)) => Ok(s),
            None => Err(self.shape(at, format!("`{key}` is missing"))),
            Some(other) => Err(self.shape(
                at,
                format!("`{key}` is {}: expected a string", other.kind()),
            )),
        }
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

/// Decodes a pickle (`json == false`) or JSON snapshot and builds the history of `device`
/// (`None`: the first device with trace entries).
pub fn import_snapshot(
    path: &str,
    bytes: &[u8],
    json: bool,
    device: Option<usize>,
) -> Result<ReplayHistory, ImportError> {
    let ctx = Ctx { path };
    let root = if json {
        let v: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| ImportError::Decode {
                path: path.to_owned(),
                what: "JSON",
                message: e.to_string(),
            })?;
        Node::from_json(v)
    } else {
        // Python's pickle writes an object shared by several entries once and refers to it
        // again (PyTorch shares `frames`); serde-pickle 1.2 cannot hand such a shared nested
        // container out twice and, with this option, gives `None` for the later copies.
        // Only stack frames are shared that way in snapshots, and they are not read here.
        let options = serde_pickle::DeOptions::new()
            .replace_unresolved_globals()
            .replace_recursive_structures();
        let v =
            serde_pickle::value_from_slice(bytes, options).map_err(|e| ImportError::Decode {
                path: path.to_owned(),
                what: "pickle",
                message: e.to_string(),
            })?;
        Node::from_pickle(v)
    };
    let root = ctx.dict(&root, "the top level")?;
    let traces = match root.get("device_traces") {
        Some(node) => ctx.list(node, "device_traces")?,
        None => &[],
    };
    let with_entries: Vec<usize> = (0..traces.len())
        .filter(|&d| matches!(&traces[d], Node::List(l) if !l.is_empty()))
        .collect();
    let device = match device {
        Some(d) => d,
        None => with_entries.first().copied().unwrap_or(0),
    };
    let Some(entries) = traces.get(device) else {
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
        let e = ctx.dict(&entries[i], &at)?;
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
                        let completes_now = entries.get(i).is_some_and(|next| {
                            matches!(next, Node::Dict(n)
                                if matches!(n.get("action"), Some(Node::Str(a)) if a == "free_completed")
                                && matches!(n.get("addr"), Some(Node::Int(a)) if *a as u64 == addr))
                        });
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
    root: &HashMap<String, Node>,
    device: usize,
    live: &HashMap<u64, (usize, Held)>,
    out: &mut ReplayHistory,
) -> Result<(), ImportError> {
    let Some(segments) = root.get("segments") else {
        return Ok(());
    };
    let mut found = Vec::new();
    for (s, seg) in ctx.list(segments, "segments")?.iter().enumerate() {
        let at = format!("segments[{s}]");
        let seg = ctx.dict(seg, &at)?;
        if ctx.uint(seg, "device", &at, false)?.unwrap_or(0) != device as u64 {
            continue;
        }
        let stream = ctx.uint(seg, "stream", &at, false)?.unwrap_or(0);
        let mut addr = ctx.uint(seg, "address", &at, true)?.unwrap_or_default();
        let Some(blocks) = seg.get("blocks") else {
            continue;
        };
        for (b, block) in ctx
            .list(blocks, &format!("{at}.blocks"))?
            .iter()
            .enumerate()
        {
            let at = format!("{at}.blocks[{b}]");
            let block = ctx.dict(block, &at)?;
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
