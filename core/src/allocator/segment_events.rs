//! Segment events: subscribers are told when the allocator obtains or gives back a
//! segment, reserves or releases an expandable segment's address range, or maps or unmaps
//! its pages (PyTorch's allocator trace-tracker events; docs/segment-events.md). A
//! communicator registers its buffers from them (issue 28).
//!
//! # Delivery
//! Under the allocator's lock an event is only queued (and only while someone subscribes,
//! so without subscribers nothing changes). After the lock is dropped, the call that
//! queued it delivers the queue: one thread at a time holds the delivery role, drains the
//! queue in the order the events happened and calls every subscriber for each, in
//! subscription order. A thread that finds the role taken leaves its events to the holder,
//! which drains again before it lets go, so no event waits for a later call and none is
//! delivered out of order. A subscriber may thus run on another thread than the one whose
//! call caused the event, and it may call the allocator (its events are delivered after
//! the ones being delivered).
//!
//! # Failures
//! A subscriber's error and a subscriber's panic are recorded, never swallowed: each is a
//! [`SegmentEventFailure`] (the event, the subscriber, what it said), kept until
//! [`crate::allocator::CachingAllocator::take_segment_event_failures`] takes them. They are
//! not returned by the call that caused the event: the segment was already obtained or
//! given back when subscribers hear of it, so there is nothing to undo, and the call that
//! caused it may not be the one delivering. A panic is caught outside the allocator's lock,
//! so it poisons nothing and the other subscribers still hear of the event.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::ids::StreamId;

use super::callbacks::CallbackId;
use super::pool::MemPoolId;

/// Failures kept at most (the count of all of them is kept too): a subscriber that fails
/// on every event does not grow memory without bound.
pub const MAX_KEPT_FAILURES: usize = 1024;

/// What happened to a segment.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum SegmentEventKind {
    /// A segment was obtained (from the device or a pool's source): `addr`, `size`.
    SegmentAlloc,
    /// A segment was given back.
    SegmentFree,
    /// An expandable segment's address range was reserved (nothing mapped yet).
    Reserve,
    /// An expandable segment's address range was released (nothing was mapped in it).
    Unreserve,
    /// Pages of an expandable segment were mapped: the mapped range.
    Map,
    /// Pages of an expandable segment were unmapped: the unmapped range.
    Unmap,
}

/// One segment event.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct SegmentEvent {
    /// What happened.
    pub kind: SegmentEventKind,
    /// The memory pool of the segment ([`MemPoolId::DEFAULT`] for ordinary memory).
    pub pool: MemPoolId,
    /// The segment's stream.
    pub stream: StreamId,
    /// Address of the segment or range.
    pub addr: u64,
    /// Bytes of the segment or range.
    pub size: u64,
}

/// What a subscriber returns when it could not act on an event.
pub type SubscriberError = Box<dyn std::error::Error + Send + Sync>;

/// A subscriber: called outside the allocator's lock, once per event, in order.
pub type SegmentSubscriber = dyn Fn(&SegmentEvent) -> Result<(), SubscriberError> + Send + Sync;

/// A subscriber that returned an error or panicked on an event.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct SegmentEventFailure {
    /// The subscriber ([`crate::allocator::CachingAllocator::subscribe_segment_events`]).
    pub subscriber: CallbackId,
    /// The event it failed on.
    pub event: SegmentEvent,
    /// True when it panicked (`reason` is the panic's message).
    pub panicked: bool,
    /// Its error's message, or the panic's.
    pub reason: String,
}

/// The queue under the allocator's lock.
#[derive(Default)]
pub(crate) struct EventQueue {
    /// True while anyone subscribes: only then are events queued.
    pub on: bool,
    events: Vec<SegmentEvent>,
}

impl EventQueue {
    /// Queues an event if anyone listens.
    #[inline]
    pub fn push(
        &mut self,
        kind: SegmentEventKind,
        pool: MemPoolId,
        stream: StreamId,
        addr: u64,
        size: u64,
    ) {
        if self.on {
            self.events.push(SegmentEvent {
                kind,
                pool,
                stream,
                addr,
                size,
            });
        }
    }

    /// True when events wait for delivery.
    #[inline]
    pub fn pending(&self) -> bool {
        !self.events.is_empty()
    }

    /// The queued events, oldest first.
    pub fn take(&mut self) -> Vec<SegmentEvent> {
        std::mem::take(&mut self.events)
    }
}

/// Subscribers, the delivery role and the recorded failures (outside the allocator's
/// lock).
#[derive(Default)]
pub(crate) struct Subscribers {
    entries: Mutex<Vec<(CallbackId, Arc<SegmentSubscriber>)>>,
    /// Held by the thread delivering.
    delivering: Mutex<()>,
    failures: Mutex<(Vec<SegmentEventFailure>, u64)>,
}

impl Subscribers {
    /// Adds a subscriber; returns its id.
    pub fn add(&self, f: Arc<SegmentSubscriber>) -> CallbackId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let id = CallbackId(NEXT.fetch_add(1, Ordering::Relaxed));
        self.entries.lock().push((id, f));
        id
    }

    /// Removes a subscriber; returns whether any is left.
    pub fn remove(&self, id: CallbackId) -> bool {
        let mut e = self.entries.lock();
        e.retain(|(i, _)| *i != id);
        !e.is_empty()
    }

    /// Delivers the queue, as the module docs say: `drain` takes the queued events and
    /// `pending` says whether any are queued (both under the allocator's lock).
    pub fn deliver(
        &self,
        mut drain: impl FnMut() -> Vec<SegmentEvent>,
        pending: impl Fn() -> bool,
    ) {
        loop {
            let Some(role) = self.delivering.try_lock() else {
                return; // the holder delivers our events before it lets go
            };
            let batch = drain();
            self.call_all(&batch);
            drop(role);
            // Events queued by a thread that found the role taken after our drain: take the
            // role again for them (or leave them to whoever took it first).
            if batch.is_empty() && !pending() {
                return;
            }
        }
    }

    fn call_all(&self, batch: &[SegmentEvent]) {
        let subs: Vec<_> = self.entries.lock().clone();
        for event in batch {
            for (id, sub) in &subs {
                let failure = match catch_unwind(AssertUnwindSafe(|| sub(event))) {
                    Ok(Ok(())) => continue,
                    Ok(Err(e)) => (false, e.to_string()),
                    Err(panic) => (true, panic_message(panic.as_ref())),
                };
                tracing::warn!(subscriber = id.0, reason = %failure.1, "memreuse allocator: a segment-event subscriber failed");
                let mut f = self.failures.lock();
                f.1 += 1;
                if f.0.len() < MAX_KEPT_FAILURES {
                    f.0.push(SegmentEventFailure {
                        subscriber: *id,
                        event: *event,
                        panicked: failure.0,
                        reason: failure.1,
                    });
                }
            }
        }
    }

    /// The failures recorded since the last take, and how many there were in all (more
    /// than the list holds past [`MAX_KEPT_FAILURES`]).
    pub fn take_failures(&self) -> (Vec<SegmentEventFailure>, u64) {
        std::mem::take(&mut *self.failures.lock())
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}
