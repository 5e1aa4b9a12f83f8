//! The watchdog: a thread per process group that polls in-flight works.
//!
//! It marks completion, turns timeouts and communicator errors into work errors, and
//! moves the shelves of completed works to the to-unstash list. It never drops a storage
//! itself (PyTorch moved unstashing off its watchdog after rare crashes): the main thread
//! drains the list at its next process-group call.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::shared::PgShared;
use crate::backend::Backend;

/// Stack of a watchdog thread: it only polls events (a replay runs one per group and
/// rank, thousands at world size 1024, so the default 2 MiB each would be gigabytes).
pub(crate) const WATCHDOG_STACK_BYTES: usize = 128 << 10;

/// Handle to a running watchdog thread; dropping it stops and joins the thread.
pub(crate) struct Watchdog {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Starts polling `shared` every `interval`.
    pub(crate) fn spawn<B: Backend>(
        shared: &Arc<PgShared<B>>,
        interval: Duration,
    ) -> std::io::Result<Watchdog> {
        let stop = Arc::clone(&shared.watchdog_signal);
        let weak = Arc::downgrade(shared);
        let stop_in = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("memreuse-watchdog".to_owned())
            .stack_size(WATCHDOG_STACK_BYTES)
            .spawn(move || {
                loop {
                    {
                        let (lock, cv) = &*stop_in;
                        let mut stopped = lock.lock();
                        // Checked under the signal's lock: a work issued after this check
                        // wakes us (`PgShared::work_issued` takes the same lock).
                        let idle = weak.upgrade().is_none_or(|s| s.nothing_in_flight());
                        if idle && !*stopped {
                            cv.wait(&mut stopped);
                        }
                        // One full interval before each scan, however often works are
                        // issued (each issue notifies): the polling cadence stays what it
                        // was, only idle time is spent asleep.
                        let deadline = std::time::Instant::now() + interval;
                        while !*stopped && !cv.wait_until(&mut stopped, deadline).timed_out() {}
                        if *stopped {
                            return;
                        }
                    }
                    // Holding only a weak reference lets the group drop while we sleep.
                    let Some(shared) = weak.upgrade() else { return };
                    shared.watchdog_scan();
                }
            })?;
        Ok(Watchdog {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        let (lock, cv) = &*self.stop;
        *lock.lock() = true;
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            // A panicking watchdog already reported itself; joining must not panic again.
            let _ = t.join();
        }
    }
}
