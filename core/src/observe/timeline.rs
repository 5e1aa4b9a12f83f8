//! A Chrome-trace / Perfetto JSON timeline of one run (open it at ui.perfetto.dev or
//! chrome://tracing).
//!
//! One clock: every timestamp is in microseconds on the allocator's trace clock
//! ([`crate::allocator::trace_clock_us`]), which the process group's work spans and the
//! memory samples also use.
//!
//! - a thread track per stream (`stream N`) with instants: `alloc`, `free`,
//!   `segment_alloc`, `segment_free`;
//! - pending frees (`free_requested` -> `free_completed` later) as async spans named
//!   `pending free (stream N)`, category `pending_free`;
//! - collectives (issue -> observed completion) as async spans named
//!   `<op> (comm stream N)`, category `collective`;
//! - `oom` and `snapshot` as process-wide instants;
//! - counter tracks `allocated_bytes` and `reserved_bytes`.
//!
//! Every async span has exactly one begin (`ph: "b"`) and one end (`ph: "e"`) with the same
//! `cat` and `id`; a pending free still pending at the end of the trace is closed at the
//! last timestamp with `args.unfinished = true`. Events are sorted by timestamp.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use serde_json::{Value, json};

use super::viewer::{ExportError, write_atomic};
use crate::allocator::{TraceAction, TraceEntry};
use crate::ids::StreamId;
use crate::process_group::WorkSpan;

/// Allocated and reserved bytes at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemorySample {
    /// Microseconds on the trace clock.
    pub time_us: u64,
    /// Allocated bytes.
    pub allocated: u64,
    /// Reserved bytes.
    pub reserved: u64,
}

/// A timeline under construction.
#[derive(Clone, Debug)]
pub struct Timeline {
    pid: u64,
    process_name: String,
    events: Vec<(u64, Value)>,
    streams: BTreeSet<u64>,
    comm_streams: BTreeSet<u64>,
    next_id: u64,
}

fn ts_of(us: u64) -> Value {
    json!(us)
}

impl Timeline {
    /// An empty timeline for one process (`pid` groups its tracks; use the rank).
    pub fn new(process_name: &str, pid: u64) -> Self {
        Timeline {
            pid,
            process_name: process_name.to_owned(),
            events: Vec::new(),
            streams: BTreeSet::new(),
            comm_streams: BTreeSet::new(),
            next_id: 0,
        }
    }

    fn push(&mut self, ts: u64, v: Value) {
        self.events.push((ts, v));
    }

    fn instant(&mut self, name: &str, stream: u64, ts: u64, args: &Value) {
        self.streams.insert(stream);
        let v = json!({"name": name, "ph": "i", "s": "t", "pid": self.pid, "tid": stream,
            "ts": ts_of(ts), "args": args});
        self.push(ts, v);
    }

    fn span(&mut self, cat: &str, name: &str, tid: u64, (begin, end): (u64, u64), args: &Value) {
        let id = format!("{cat}-{}", self.next_id);
        self.next_id += 1;
        let end = end.max(begin);
        let b = json!({"name": name, "cat": cat, "ph": "b", "id": id, "pid": self.pid,
            "tid": tid, "ts": ts_of(begin), "args": args});
        let e = json!({"name": name, "cat": cat, "ph": "e", "id": id, "pid": self.pid,
            "tid": tid, "ts": ts_of(end)});
        self.push(begin, b);
        self.push(end, e);
    }

    /// Adds the allocator's trace entries (oldest first).
    pub fn add_trace(&mut self, entries: &[TraceEntry]) {
        let mut pending: HashMap<u64, TraceEntry> = HashMap::new();
        let last = entries.iter().map(|e| e.time_us).max().unwrap_or(0);
        for e in entries {
            let args = json!({"addr": e.addr, "size": e.size});
            match e.action {
                TraceAction::Alloc => self.instant("alloc", e.stream.0, e.time_us, &args),
                TraceAction::FreeRequested => {
                    self.instant("free", e.stream.0, e.time_us, &args);
                    pending.insert(e.addr, *e);
                }
                TraceAction::FreeCompleted => {
                    if let Some(b) = pending.remove(&e.addr)
                        && e.time_us > b.time_us
                    {
                        let name = format!("pending free (stream {})", b.stream.0);
                        self.span(
                            "pending_free",
                            &name,
                            b.stream.0,
                            (b.time_us, e.time_us),
                            &args,
                        );
                    }
                }
                TraceAction::SegmentAlloc => {
                    self.instant("segment_alloc", e.stream.0, e.time_us, &args);
                }
                TraceAction::SegmentFree => {
                    self.instant("segment_free", e.stream.0, e.time_us, &args);
                }
                TraceAction::SegmentMap
                | TraceAction::SegmentUnmap
                | TraceAction::SegmentReserve => {
                    self.instant(e.action.as_str(), e.stream.0, e.time_us, &args);
                }
                TraceAction::Oom | TraceAction::Snapshot => {
                    let mut args = args;
                    if let Some(free) = e.device_free {
                        args["device_free"] = json!(free);
                    }
                    let v = json!({"name": e.action.as_str(), "ph": "i", "s": "p",
                        "pid": self.pid, "tid": 0, "ts": ts_of(e.time_us), "args": args});
                    self.push(e.time_us, v);
                }
            }
        }
        let mut still: Vec<TraceEntry> = pending.into_values().collect();
        still.sort_by_key(|e| (e.time_us, e.addr));
        for b in still.into_iter().filter(|b| last > b.time_us) {
            let name = format!("pending free (stream {})", b.stream.0);
            let args = json!({"addr": b.addr, "size": b.size, "unfinished": true});
            self.span("pending_free", &name, b.stream.0, (b.time_us, last), &args);
        }
    }

    /// Adds a process group's finished works as spans on its comm stream's track.
    pub fn add_work_spans(&mut self, comm_stream: StreamId, spans: &[WorkSpan]) {
        self.comm_streams.insert(comm_stream.0);
        self.streams.insert(comm_stream.0);
        for w in spans {
            let name = format!("{} (comm stream {})", w.op, comm_stream.0);
            let args = json!({"work": w.id.0, "failed": w.failed});
            self.span(
                "collective",
                &name,
                comm_stream.0,
                (w.start_us, w.end_us),
                &args,
            );
        }
    }

    /// Adds counter samples for the `allocated_bytes` and `reserved_bytes` tracks.
    pub fn add_memory_samples(&mut self, samples: &[MemorySample]) {
        for s in samples {
            for (name, v) in [
                ("allocated_bytes", s.allocated),
                ("reserved_bytes", s.reserved),
            ] {
                let e = json!({"name": name, "ph": "C", "pid": self.pid, "tid": 0,
                    "ts": ts_of(s.time_us), "args": {name: v}});
                self.push(s.time_us, e);
            }
        }
    }

    /// The Chrome-trace JSON object (`traceEvents`, sorted by timestamp, metadata first).
    pub fn to_value(&self) -> Value {
        let mut events: Vec<Value> = Vec::with_capacity(self.events.len() + 8);
        events.push(
            json!({"name": "process_name", "ph": "M", "pid": self.pid, "tid": 0,
            "args": {"name": self.process_name}}),
        );
        for &s in &self.streams {
            let label = if self.comm_streams.contains(&s) {
                format!("comm stream {s}")
            } else {
                format!("stream {s}")
            };
            events.push(
                json!({"name": "thread_name", "ph": "M", "pid": self.pid, "tid": s,
                "args": {"name": label}}),
            );
        }
        let mut sorted: Vec<&(u64, Value)> = self.events.iter().collect();
        // Stable: a span's begin stays before its end at equal timestamps.
        sorted.sort_by_key(|(ts, _)| *ts);
        events.extend(sorted.into_iter().map(|(_, v)| v.clone()));
        json!({
            "traceEvents": events,
            "displayTimeUnit": "ms",
            "otherData": {"clock": "memreuse trace clock, microseconds since the first trace-clock read in the process"},
        })
    }

    /// The JSON text.
    pub fn to_json(&self) -> String {
        self.to_value().to_string()
    }

    /// Writes the JSON to `path`.
    pub fn write(&self, path: &Path) -> Result<(), ExportError> {
        write_atomic(path, self.to_json().as_bytes())
    }
}
