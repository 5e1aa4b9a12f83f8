//! [`Owner`]: the lifetime of one cluster's execution. It creates the cluster's state and
//! the streams (with their worker threads), and stops the workers when the last device
//! handle goes.
//!
//! The layer below the devices: a [`crate::MockDevice`], a [`crate::JointGroup`] and a
//! [`crate::MockCluster`] all hold an `Arc<Owner>`, and none of them is needed to make one.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use memreuse_core::race::HappensBefore;
use memreuse_core::testing::SplitMix64;
use memreuse_core::{BackendError, StreamId};
use parking_lot::{Condvar, Mutex};

use crate::cluster_state::{ClusterState, Core, DeviceSlot, StreamState};
use crate::config::MockConfig;
use crate::memory::Memory;

/// Stack of a stream's worker thread: it runs op bodies (copies, reductions) that never
/// recurse; a replay at world size 1024 runs thousands of them, so the default 2 MiB each
/// would reserve gigabytes of address space.
const WORKER_STACK_BYTES: usize = 256 << 10;

static NEXT_CLUSTER_UID: AtomicU64 = AtomicU64::new(1);

/// Owns a cluster's execution: when the last device handle goes, the workers stop and
/// queued work is dropped.
pub(crate) struct Owner {
    pub core: Arc<Core>,
}

impl Owner {
    /// The execution of a new cluster of `n` devices (slots `0..n`), each with its default
    /// (`compute`) stream.
    pub(crate) fn start(n: usize, config: MockConfig) -> Result<Arc<Owner>, BackendError> {
        let mut hb = HappensBefore::new(config.max_race_reports, config.race_detection);
        let devices = (0..n)
            .map(|i| {
                hb.add_device();
                DeviceSlot {
                    memory: Memory::new(
                        config.first_device_index + i,
                        config.capacity,
                        config.backing,
                        config.malloc_fault,
                    ),
                    last_error: None,
                }
            })
            .collect();
        let state = ClusterState {
            devices,
            streams: Vec::new(),
            groups: Vec::new(),
            hb,
            rng: config.deterministic_seed.map(SplitMix64::new),
            driving: false,
            shutdown: false,
            trace: Vec::new(),
        };
        let core = Arc::new(Core {
            state: Mutex::new(state),
            cv: Condvar::new(),
            config,
            uid: NEXT_CLUSTER_UID.fetch_add(1, Ordering::Relaxed),
        });
        // Made before the streams, so that a failure below stops the workers started.
        let owner = Arc::new(Owner {
            core: Arc::clone(&core),
        });
        {
            let mut w = core.state.lock();
            for slot in 0..n {
                Owner::add_stream(&core, &mut w, slot)?;
            }
        }
        Ok(owner)
    }

    /// Adds a stream to device `slot` (and its worker thread in threaded mode); returns its
    /// global index, which is also its clock component.
    pub(crate) fn add_stream(
        core: &Arc<Core>,
        w: &mut ClusterState,
        slot: usize,
    ) -> Result<usize, BackendError> {
        let s = w.streams.len();
        if w.rng.is_none() {
            let worker_core = Arc::clone(core);
            std::thread::Builder::new()
                .name(format!("mock-dev{slot}-s{s}"))
                .stack_size(WORKER_STACK_BYTES)
                .spawn(move || crate::executor::worker(&worker_core, s))
                .map_err(|e| {
                    crate::error::device("create_stream", format!("worker thread: {e}"))
                })?;
        }
        w.streams.push(StreamState {
            device: slot,
            queue: VecDeque::new(),
            enqueued: 0,
            completed: 0,
            running: false,
            error: None,
            wake: Arc::new(Condvar::new()),
        });
        let comp = w.hb.add_stream(slot, StreamId(s as u64));
        debug_assert_eq!(comp, s, "streams and clocks are added together");
        Ok(s)
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        let leftovers = {
            let mut w = self.core.state.lock();
            w.shutdown = true;
            for st in &w.streams {
                st.wake.notify_all();
            }
            let queues: Vec<_> = w
                .streams
                .iter_mut()
                .map(|s| std::mem::take(&mut s.queue))
                .collect();
            let slots: Vec<_> = w
                .groups
                .iter_mut()
                .map(|g| std::mem::take(&mut g.slots))
                .collect();
            (queues, slots)
        };
        self.core.cv.notify_all();
        // Bodies may own arbitrary values: drop them without the lock held.
        drop(leftovers);
    }
}
