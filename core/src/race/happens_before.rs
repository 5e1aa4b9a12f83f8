//! [`HappensBefore`]: the vector clocks of one world of devices and streams, and one
//! [`DeviceDetector`] per device fed from them. The one place the happens-before rules are
//! written; the mock device and the [`super::RaceChecker`] adaptor both drive it.
//!
//! The rules:
//! - a stream starts from what its device's host has observed (its host clock);
//! - an op of a stream joins the host clock into the stream's clock, ticks the stream's
//!   component (the op's epoch), and its accesses are checked against every earlier access
//!   not ordered before it;
//! - a device-side wait for an event joins the event's clock (the recording stream's clock
//!   at the recording) into the waiting stream;
//! - what the host observed complete (a synchronize, a query that answered true, a
//!   blocking copy) joins into the host clock;
//! - a joint op (a collective, a matched send and receive) orders everything before it on
//!   every participant before everything after it on any participant;
//! - a raw allocation starts being tracked, and its free must come after the host observed
//!   every access to it; a mapping is an allocation and an unmapping a free, so remapped
//!   pages are reuses.
//!
//! The caller keeps whatever lock makes these steps atomic with its own state (the mock:
//! its queues; the adaptor: its event matching). Devices and streams are named by the
//! indices [`HappensBefore::add_device`] and [`HappensBefore::add_stream`] returned (a
//! stream's index is its clock *component*); another index is a caller bug and panics as
//! an out-of-range slice index would.

use std::ops::Range;
use std::sync::Arc;

use super::clock::VClock;
use super::detector::DeviceDetector;
use super::op::OpInfo;
use super::report::{AccessKind, RaceReport};
use crate::ids::{AllocationId, StreamId};

/// One stream: its device, the id its reports name, and its clock.
struct StreamClock {
    device: usize,
    id: StreamId,
    clock: VClock,
}

/// What the layer holds for one device: its host's clock, its streams, the label of its
/// next ops and its detector.
struct DeviceClocks {
    /// What the host threads driving this device have observed complete.
    host: VClock,
    /// Components of this device's streams, in creation order (the first is the default
    /// stream).
    streams: Vec<usize>,
    /// Label of the ops recorded next (`set_op_label`).
    label: Arc<str>,
    detector: DeviceDetector,
}

/// The happens-before state of one world. See the module documentation for the rules.
///
/// The small methods are `#[inline]`: the mock calls them from another crate on every raw
/// `malloc`/`free` and event, and without it each would be a call (measured: +15
/// instructions per raw `malloc`+`free` pair with the detector off).
pub struct HappensBefore {
    streams: Vec<StreamClock>,
    devices: Vec<DeviceClocks>,
    next_op: u64,
    max_reports: usize,
    detect: bool,
}

impl std::fmt::Debug for HappensBefore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HappensBefore")
            .field("devices", &self.devices.len())
            .field("streams", &self.streams.len())
            .field("detect", &self.detect)
            .finish_non_exhaustive()
    }
}

impl HappensBefore {
    /// An empty world. Each device keeps at most `max_reports` race reports (later races
    /// are only counted). With `detect` false only the clocks are kept: ops, allocations
    /// and annotations record nothing, and no race is ever found.
    #[must_use]
    pub fn new(max_reports: usize, detect: bool) -> HappensBefore {
        HappensBefore {
            streams: Vec::new(),
            devices: Vec::new(),
            next_op: 0,
            max_reports,
            detect,
        }
    }

    /// Whether accesses are checked (the `detect` given to [`HappensBefore::new`]).
    #[must_use]
    #[inline]
    pub fn detects(&self) -> bool {
        self.detect
    }

    /// Adds a device with nothing observed yet; returns its index.
    pub fn add_device(&mut self) -> usize {
        self.devices.push(DeviceClocks {
            host: VClock::default(),
            streams: Vec::new(),
            label: Arc::from(""),
            detector: DeviceDetector::new(self.max_reports),
        });
        self.devices.len() - 1
    }

    /// Adds a stream of `device` whose ops race reports name `id`; it starts from the
    /// device's host clock (what a stream created now knows). Returns its component.
    pub fn add_stream(&mut self, device: usize, id: StreamId) -> usize {
        let comp = self.streams.len();
        self.streams.push(StreamClock {
            device,
            id,
            clock: self.devices[device].host.clone(),
        });
        self.devices[device].streams.push(comp);
        comp
    }

    /// The components of `device`'s streams, in creation order.
    #[must_use]
    #[inline]
    pub fn device_streams(&self, device: usize) -> &[usize] {
        &self.devices[device].streams
    }

    /// The clock of stream `comp` (what its next op will at least know).
    #[must_use]
    #[inline]
    pub fn stream_clock(&self, comp: usize) -> &VClock {
        &self.streams[comp].clock
    }

    /// The joined clocks of every stream of `device` (what `synchronize_device` waits for).
    #[must_use]
    pub fn device_clock(&self, device: usize) -> VClock {
        let mut all = VClock::default();
        for &c in &self.devices[device].streams {
            all.join(&self.streams[c].clock);
        }
        all
    }

    /// The label of `device`'s next ops (`set_op_label`; empty for none).
    pub fn set_label(&mut self, device: usize, label: &str) {
        self.devices[device].label = Arc::from(label);
    }

    /// A new op identity on stream `comp`: the next enqueue number, and `kind` with the
    /// device's label. Orders nothing (for queue entries that are not ops of the stream's
    /// clock, such as a device-side wait).
    pub fn op_info(&mut self, comp: usize, kind: &str) -> Arc<OpInfo> {
        let st = &self.streams[comp];
        let label = &self.devices[st.device].label;
        let desc = if label.is_empty() {
            kind.to_owned()
        } else {
            format!("{kind} [{label}]")
        };
        let seq = self.next_op;
        self.next_op += 1;
        Arc::new(OpInfo {
            seq,
            desc,
            stream: st.id,
        })
    }

    /// One op of kind `kind` on stream `comp`: joins the host clock into the stream, ticks
    /// it, and checks and records `accesses` (races go to the device's log). Returns the
    /// op's identity.
    pub fn begin_op(
        &mut self,
        comp: usize,
        kind: &str,
        accesses: &[(Range<u64>, AccessKind)],
    ) -> Arc<OpInfo> {
        let info = self.op_info(comp, kind);
        let st = &mut self.streams[comp];
        let dev = &mut self.devices[st.device];
        st.clock.join(&dev.host);
        let tick = st.clock.tick(comp);
        if self.detect {
            dev.detector
                .record_op(&info, &st.clock, comp, tick, accesses, &dev.host);
        }
        info
    }

    /// Stream `comp` waits (device-side) for everything `clock` knows.
    #[inline]
    pub fn wait(&mut self, comp: usize, clock: &VClock) {
        self.streams[comp].clock.join(clock);
    }

    /// The host of `device` observed everything `clock` knows complete.
    #[inline]
    pub fn observe(&mut self, device: usize, clock: &VClock) {
        self.devices[device].host.join(clock);
    }

    /// A joint op whose participants are the streams `comps`, each arrived with the clock
    /// in `clocks`: every participant is ordered after every participant's op.
    pub fn meet<'a>(&mut self, comps: &[usize], clocks: impl IntoIterator<Item = &'a VClock>) {
        let mut joint = VClock::default();
        for c in clocks {
            joint.join(c);
        }
        for &c in comps {
            self.streams[c].clock.join(&joint);
        }
    }

    /// A raw allocation `[base, base + len)` of `device` now exists.
    #[inline]
    pub fn allocated(&mut self, device: usize, base: u64, len: u64) {
        if self.detect {
            self.devices[device].detector.track_allocation(base, len);
        }
    }

    /// The host of `device` frees the raw allocation at `base`: every access to it must be
    /// known complete by now, otherwise the free is a reuse race.
    #[inline]
    pub fn freed(&mut self, device: usize, base: u64) {
        if self.detect {
            let dev = &mut self.devices[device];
            dev.detector.free(base, &dev.host);
        }
    }

    /// `len` bytes of physical memory are mapped at `at`: an allocation of those bytes.
    #[inline]
    pub fn mapped(&mut self, device: usize, at: u64, len: u64) {
        self.allocated(device, at, len);
    }

    /// The mapping at `at` is removed: a free of its bytes (so work on them that the host
    /// has not observed complete races with it, and a later mapping there is a reuse).
    #[inline]
    pub fn unmapped(&mut self, device: usize, at: u64) {
        self.freed(device, at);
    }

    /// `[ptr, ptr + bytes)` of `device` now belongs to allocator hand-out `id` (tells
    /// reuse races from schedule races).
    #[inline]
    pub fn annotate(&mut self, device: usize, ptr: u64, bytes: u64, id: AllocationId) {
        if self.detect {
            self.devices[device].detector.annotate(ptr, bytes, id);
        }
    }

    /// Drops the history of `device` its host has observed complete.
    pub fn prune(&mut self, device: usize) {
        let dev = &mut self.devices[device];
        dev.detector.prune(&dev.host);
    }

    /// The race reports kept for `device`.
    #[must_use]
    pub fn reports(&self, device: usize) -> &[RaceReport] {
        self.devices[device].detector.reports()
    }

    /// Distinct races found on `device`, including those past the report cap.
    #[must_use]
    pub fn found(&self, device: usize) -> u64 {
        self.devices[device].detector.found()
    }

    /// Access-history entries `device`'s detector keeps (approximate until a prune).
    #[must_use]
    pub fn history_len(&self, device: usize) -> usize {
        self.devices[device].detector.history_len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::race::{HOST_STREAM, RaceKind};

    fn world() -> (HappensBefore, usize, usize, usize) {
        let mut hb = HappensBefore::new(10, true);
        let d = hb.add_device();
        let a = hb.add_stream(d, StreamId(7));
        let b = hb.add_stream(d, StreamId(8));
        hb.allocated(d, 0x1000, 256);
        (hb, d, a, b)
    }

    #[test]
    fn unordered_streams_race_and_a_wait_orders_them() {
        let (mut hb, d, a, b) = world();
        hb.set_label(d, "step 1");
        let w = hb.begin_op(a, "memset_zero", &[(0x1000..0x1100, AccessKind::Write)]);
        assert_eq!(w.desc, "memset_zero [step 1]");
        assert_eq!(w.stream, StreamId(7));
        hb.begin_op(b, "read", &[(0x1000..0x1010, AccessKind::Read)]);
        assert_eq!(hb.found(d), 1);
        let recorded = hb.stream_clock(a).clone();
        hb.wait(b, &recorded);
        hb.begin_op(b, "read", &[(0x1000..0x1010, AccessKind::Read)]);
        assert_eq!(hb.found(d), 1, "ordered after the write by the wait");
        assert_eq!(hb.device_streams(d), &[a, b]);
    }

    #[test]
    fn meet_orders_every_participant_after_every_op() {
        let (mut hb, d, a, b) = world();
        hb.begin_op(a, "write", &[(0x1000..0x1100, AccessKind::Write)]);
        hb.begin_op(b, "joint", &[]);
        let clocks = [hb.stream_clock(a).clone(), hb.stream_clock(b).clone()];
        hb.meet(&[a, b], &clocks);
        hb.begin_op(b, "read", &[(0x1000..0x1010, AccessKind::Read)]);
        assert_eq!(hb.found(d), 0);
    }

    #[test]
    fn an_unmap_before_the_host_observed_the_work_is_a_reuse_race() {
        let mut hb = HappensBefore::new(10, true);
        let d = hb.add_device();
        let s = hb.add_stream(d, StreamId(0));
        hb.mapped(d, 0x2000, 64);
        hb.begin_op(s, "read", &[(0x2000..0x2040, AccessKind::Read)]);
        hb.unmapped(d, 0x2000);
        assert_eq!(hb.reports(d)[0].kind, RaceKind::Reuse);
        assert_eq!(hb.reports(d)[0].later.stream, HOST_STREAM);
        // Observed complete first: no race.
        hb.mapped(d, 0x2000, 64);
        hb.begin_op(s, "read", &[(0x2000..0x2040, AccessKind::Read)]);
        let clock = hb.device_clock(d);
        hb.observe(d, &clock);
        hb.unmapped(d, 0x2000);
        assert_eq!(hb.found(d), 1);
    }

    #[test]
    fn without_detection_only_clocks_are_kept() {
        let mut hb = HappensBefore::new(10, false);
        let d = hb.add_device();
        let a = hb.add_stream(d, StreamId(0));
        let b = hb.add_stream(d, StreamId(1));
        hb.allocated(d, 0x1000, 64);
        hb.begin_op(a, "write", &[(0x1000..0x1040, AccessKind::Write)]);
        hb.begin_op(b, "write", &[(0x1000..0x1040, AccessKind::Write)]);
        hb.freed(d, 0x1000);
        assert_eq!((hb.found(d), hb.history_len(d)), (0, 0));
        assert_eq!(hb.stream_clock(a).get(a), 1);
    }
}
