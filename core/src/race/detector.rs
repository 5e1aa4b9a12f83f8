//! [`DeviceDetector`]: the happens-before engine's state for one device — which raw
//! allocations exist, who owns their bytes, which accesses may still be running, and the
//! races found.
//!
//! The engine is driven from outside: [`super::HappensBefore`] keeps one [`VClock`] per
//! stream and one per device host, ticks a stream's clock for each op and hands the op's
//! accesses to [`DeviceDetector::record_op`]. Keeping the clocks outside lets the mock
//! decide an op's clock, its queue position and its history entries under one lock, and
//! lets the adaptor share clocks across the devices of a world, while the checking itself
//! exists once.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use super::annotations::Annotations;
use super::clock::VClock;
use super::history::{Access, History};
use super::log::RaceLog;
use super::op::{HOST_STREAM, OpInfo};
use super::report::{AccessKind, RaceReport};
use crate::ids::AllocationId;

/// History is pruned once it holds this many entries more than after the last prune.
const MIN_PRUNE_AT: usize = 4096;

/// One raw allocation the engine knows about.
#[derive(Default)]
struct Tracked {
    len: u64,
    /// Accesses not yet known to be over.
    history: History,
    /// Which allocator hand-out each byte range currently belongs to.
    annotations: Annotations,
}

/// The race-checking state of one device. See the module documentation for who drives it.
pub struct DeviceDetector {
    allocs: BTreeMap<u64, Tracked>,
    log: RaceLog,
    /// Approximate number of stored accesses, to decide when to prune.
    history_len: usize,
    prune_at: usize,
}

impl std::fmt::Debug for DeviceDetector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceDetector")
            .field("allocations", &self.allocs.len())
            .field("history_len", &self.history_len)
            .field("races_found", &self.log.found())
            .finish_non_exhaustive()
    }
}

impl DeviceDetector {
    /// An empty detector keeping at most `max_reports` reports (later races are counted).
    pub fn new(max_reports: usize) -> DeviceDetector {
        DeviceDetector {
            allocs: BTreeMap::new(),
            log: RaceLog::new(max_reports),
            history_len: 0,
            prune_at: MIN_PRUNE_AT,
        }
    }

    /// A raw allocation `[base, base + len)` now exists (after a successful `malloc`).
    pub fn track_allocation(&mut self, base: u64, len: u64) {
        self.allocs.insert(
            base,
            Tracked {
                len,
                ..Tracked::default()
            },
        );
    }

    /// The tracked allocation holding byte `addr`: its base and state.
    fn containing(&mut self, addr: u64) -> Option<(u64, &mut Tracked)> {
        self.allocs
            .range_mut(..=addr)
            .next_back()
            .filter(|(base, t)| addr < **base + t.len.max(1))
            .map(|(base, t)| (*base, t))
    }

    /// `[ptr, ptr + bytes)` now belongs to allocator hand-out `id`. Advisory: a range
    /// outside every tracked allocation is ignored (ops touching it are refused anyway).
    pub fn annotate(&mut self, ptr: u64, bytes: u64, id: AllocationId) {
        if let Some((base, t)) = self.containing(ptr) {
            let end = ptr.saturating_add(bytes).min(base + t.len);
            t.annotations.annotate(ptr, end, id);
        }
    }

    /// Checks and records the accesses of one op.
    ///
    /// `clock` is the op's stream clock *after* the caller joined the host clock into it
    /// and ticked component `comp` to `tick` (the op's epoch); `host` is the device host's
    /// clock (used to prune history that every later op is ordered after). Each earlier
    /// access that conflicts with one of `accesses` and is not ordered before `clock` is a
    /// race; one report is kept per pair of ops. Empty ranges and ranges outside every
    /// tracked allocation are skipped.
    pub fn record_op(
        &mut self,
        op: &Arc<OpInfo>,
        clock: &VClock,
        comp: usize,
        tick: u64,
        accesses: &[(Range<u64>, AccessKind)],
        host: &VClock,
    ) {
        let mut recorded: Vec<(u64, Access)> = Vec::with_capacity(accesses.len());
        for (range, kind) in accesses {
            if range.start >= range.end {
                continue;
            }
            // One access may cover several tracked allocations laid end to end (the
            // mappings of one reserved range): one piece per allocation.
            let mut start = range.start;
            while start < range.end {
                let Some((base, t)) = self.containing(start) else {
                    break;
                };
                let end = range.end.min(base + t.len);
                let acc = Access {
                    start,
                    end,
                    kind: *kind,
                    comp,
                    tick,
                    op: Arc::clone(op),
                    alloc: t.annotations.owner(start),
                };
                recorded.push((base, acc));
                start = end.max(start + 1);
            }
        }
        let mut reported: Vec<u64> = Vec::new();
        for (base, acc) in &recorded {
            let Some(t) = self.allocs.get(base) else {
                continue;
            };
            let mut found = Vec::new();
            t.history.check(acc, clock, &mut found);
            for earlier in found {
                // One report per pair of ops, even when several of their ranges overlap.
                if !reported.contains(&earlier.op.seq) {
                    reported.push(earlier.op.seq);
                    self.log.add(earlier, acc, false);
                }
            }
        }
        self.history_len += recorded.len();
        for (base, acc) in recorded {
            if let Some(t) = self.allocs.get_mut(&base) {
                t.history.insert(acc);
            }
        }
        if self.history_len > self.prune_at {
            self.prune(host);
        }
    }

    /// The host frees the raw allocation at `base`: every access to it must be known
    /// complete by now (`host` has passed it), otherwise the free races with it (a reuse
    /// race: the memory goes back to the device while work may still touch it). The
    /// allocation is no longer tracked afterwards. Unknown bases are ignored.
    pub fn free(&mut self, base: u64, host: &VClock) {
        let Some(t) = self.allocs.remove(&base) else {
            return;
        };
        self.history_len = self.history_len.saturating_sub(t.history.len());
        let free_op = Arc::new(OpInfo {
            seq: u64::MAX,
            desc: "free".to_owned(),
            stream: HOST_STREAM,
        });
        let later = Access {
            start: base,
            end: base + t.len,
            kind: AccessKind::Write,
            comp: usize::MAX,
            tick: 0,
            op: free_op,
            alloc: None,
        };
        for earlier in t.history.iter().filter(|a| host.get(a.comp) < a.tick) {
            self.log.add(earlier, &later, true);
        }
    }

    /// Drops the history `host` has passed (`host[comp] >= tick`).
    ///
    /// The clocks that matter are the host's (it creates streams, which start from it, and
    /// it frees memory) and each stream's *as of its next op*, which joins the host clock
    /// first: `min(host, min_s(stream_s ⊔ host))`. That minimum is the host clock itself,
    /// so history is dropped exactly when the host has observed it complete (a
    /// synchronize, a query returning true, a blocking copy); until then only same-stream
    /// subsumption keeps it small.
    pub fn prune(&mut self, host: &VClock) {
        let mut len = 0;
        for t in self.allocs.values_mut() {
            t.history.prune(host);
            len += t.history.len();
        }
        self.history_len = len;
        self.prune_at = (2 * len).max(MIN_PRUNE_AT);
    }

    /// Reports kept so far (at most the cap given to [`DeviceDetector::new`]).
    pub fn reports(&self) -> &[RaceReport] {
        self.log.reports()
    }

    /// Distinct races found, including those past the report cap.
    pub fn found(&self) -> u64 {
        self.log.found()
    }

    /// Stored history entries (approximate until the next [`DeviceDetector::prune`]).
    pub fn history_len(&self) -> usize {
        self.history_len
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::StreamId;
    use crate::race::RaceKind;

    fn op(seq: u64, stream: u64) -> Arc<OpInfo> {
        Arc::new(OpInfo {
            seq,
            desc: format!("op{seq}"),
            stream: StreamId(stream),
        })
    }

    #[test]
    fn unordered_writes_race_and_annotations_classify() {
        let mut d = DeviceDetector::new(10);
        d.track_allocation(0x1000, 256);
        d.annotate(0x1000, 128, AllocationId(1));
        d.annotate(0x1080, 128, AllocationId(2));
        let host = VClock::default();
        let mut a = VClock::default();
        let ta = a.tick(0);
        d.record_op(
            &op(0, 0),
            &a,
            0,
            ta,
            &[(0x1000..0x1100, AccessKind::Write)],
            &host,
        );
        let mut b = VClock::default();
        let tb = b.tick(1);
        d.record_op(
            &op(1, 1),
            &b,
            1,
            tb,
            &[(0x1080..0x1090, AccessKind::Read)],
            &host,
        );
        assert_eq!(d.reports().len(), 1);
        // The earlier write's first byte belongs to hand-out 1, the read to hand-out 2.
        assert_eq!(d.reports()[0].kind, RaceKind::Reuse);
        assert_eq!(d.reports()[0].range, 0x1080..0x1090);
        // Ordered after both: no new race.
        b.join(&a);
        let tb = b.tick(1);
        d.record_op(
            &op(2, 1),
            &b,
            1,
            tb,
            &[(0x1000..0x1100, AccessKind::Write)],
            &host,
        );
        assert_eq!(d.found(), 1);
    }

    #[test]
    fn free_before_the_host_observed_completion_is_a_reuse_race() {
        let mut d = DeviceDetector::new(10);
        d.track_allocation(0x1000, 64);
        let mut s = VClock::default();
        let t = s.tick(0);
        let mut host = VClock::default();
        d.record_op(
            &op(0, 0),
            &s,
            0,
            t,
            &[(0x1000..0x1040, AccessKind::Read)],
            &host,
        );
        host.join(&s);
        d.free(0x1000, &host);
        assert_eq!(d.found(), 0, "the host observed the read");
        d.track_allocation(0x2000, 64);
        let t = s.tick(0);
        d.record_op(
            &op(1, 0),
            &s,
            0,
            t,
            &[(0x2000..0x2040, AccessKind::Read)],
            &host,
        );
        d.free(0x2000, &host);
        assert_eq!(d.reports()[0].kind, RaceKind::Reuse);
        assert_eq!(d.reports()[0].later.stream, HOST_STREAM);
    }
}
