//! `delay` as host-held work: a gate on the stream that one thread per device opens the
//! given time after the stream reached it (Vulkan has no device-side sleep, and a submit
//! may not wait for a value the host signals later on lavapipe's single queue).
//!
//! Delays of one device are served one after another by its thread (best effort, as the
//! `Backend` contract allows); each is capped at [`MAX_DELAY`].

use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Duration;

use memreuse_core::BackendError;

use crate::handles::Gate;
use crate::result::BACKEND;
use crate::sched::host_wait;

/// The longest one `delay` waits.
pub const MAX_DELAY: Duration = Duration::from_secs(10);

/// Sends delays to the device's delay thread (started on first use).
pub struct Delays {
    tx: Sender<(Gate, Duration)>,
}

impl Delays {
    /// Starts the thread that opens delay gates of one device.
    pub fn start(device_index: usize, host_timeout: Duration) -> Result<Delays, BackendError> {
        let (tx, rx) = channel();
        std::thread::Builder::new()
            .name(format!("vulkan-delay-{device_index}"))
            .spawn(move || serve(&rx, host_timeout))
            .map_err(|e| BackendError::Unavailable {
                backend: BACKEND.to_owned(),
                reason: format!("could not start the delay thread: {e}"),
            })?;
        Ok(Delays { tx })
    }

    /// Queues `gate` to open `micros` (capped) after its stream reached it.
    pub fn push(&self, gate: Gate, micros: u64) -> Result<(), BackendError> {
        let wait = Duration::from_micros(micros).min(MAX_DELAY);
        self.tx
            .send((gate, wait))
            .map_err(|_| BackendError::Unavailable {
                backend: BACKEND.to_owned(),
                reason: "the delay thread has stopped".to_owned(),
            })
    }
}

/// Runs until every sender is gone (the device dropped) and the queue is empty.
fn serve(rx: &Receiver<(Gate, Duration)>, host_timeout: Duration) {
    for (gate, wait) in rx {
        match host_wait(&gate.raw, gate.sem, gate.before, host_timeout, "delay") {
            Ok(()) => {
                std::thread::sleep(wait);
                gate.open();
            }
            // Opening now would signal below a pending value; the stream stays held and
            // host waits on it end in their own timeout errors.
            Err(e) => tracing::warn!("vulkan delay gate not opened: {e}"),
        }
    }
}
