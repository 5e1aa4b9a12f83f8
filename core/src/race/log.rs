//! The race log of one device: reports deduplicated and capped.

use std::collections::HashSet;

use super::history::Access;
use super::report::{AccessKind, RaceKind, RaceReport};
use crate::ids::StreamId;

/// Race reports found on one device, deduplicated and capped.
pub(crate) struct RaceLog {
    reports: Vec<RaceReport>,
    seen: HashSet<ReportKey>,
    found: u64,
    cap: usize,
}

type ReportKey = (String, StreamId, bool, String, StreamId, bool, u64, u64);

impl RaceLog {
    /// An empty log keeping at most `cap` reports.
    pub(crate) fn new(cap: usize) -> RaceLog {
        RaceLog {
            reports: Vec::new(),
            seen: HashSet::new(),
            found: 0,
            cap,
        }
    }

    /// Reports so far.
    pub(crate) fn reports(&self) -> &[RaceReport] {
        &self.reports
    }

    /// Distinct races found, including those past the cap.
    pub(crate) fn found(&self) -> u64 {
        self.found
    }

    /// Records that `later` races with `earlier`. `reuse` forces the reuse kind (a raw
    /// `free` while an access may still be running); otherwise the kind follows from the
    /// allocation ids. Identical reports (same ops, streams, kinds and range) are kept once.
    pub(crate) fn add(&mut self, earlier: &Access, later: &Access, reuse: bool) {
        let range = earlier.start.max(later.start)..earlier.end.min(later.end);
        let key: ReportKey = (
            earlier.op.desc.clone(),
            earlier.op.stream,
            earlier.kind == AccessKind::Write,
            later.op.desc.clone(),
            later.op.stream,
            later.kind == AccessKind::Write,
            range.start,
            range.end,
        );
        // Deduplication memory is bounded too: past it, races are only counted.
        if self.seen.len() < self.cap.saturating_mul(16) && !self.seen.insert(key) {
            return;
        }
        self.found += 1;
        if self.reports.len() >= self.cap {
            return;
        }
        let kind = match (earlier.alloc, later.alloc) {
            _ if reuse => RaceKind::Reuse,
            (Some(a), Some(b)) if a == b => RaceKind::Schedule,
            (None, None) => RaceKind::Schedule,
            _ => RaceKind::Reuse,
        };
        let report = RaceReport {
            kind,
            range,
            earlier: earlier.to_race_access(),
            later: later.to_race_access(),
        };
        tracing::warn!(target: "memreuse::race", "{report}");
        self.reports.push(report);
    }
}
