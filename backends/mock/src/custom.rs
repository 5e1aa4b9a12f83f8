//! Custom single-device ops ([`MockDevice::enqueue_custom`]).

use memreuse_core::BackendError;

use crate::cluster_state::{Op, Work};
use crate::device::MockDevice;
use crate::handles::MockStream;
use crate::region::{JointBody, JointMemory, MemAccess};

impl MockDevice {
    /// Enqueues a custom op on `stream`: `body` runs in stream order with the `accesses`
    /// as its regions (rank 0), and the race detector checks them like any op's.
    pub fn enqueue_custom(
        &self,
        stream: &MockStream,
        name: &str,
        accesses: &[MemAccess],
        body: impl FnOnce(&mut JointMemory<'_>) -> Result<(), BackendError> + Send + 'static,
    ) -> Result<(), BackendError> {
        const CALL: &str = "enqueue_custom";
        let core = &self.owner.core;
        let mut w = core.state.lock();
        let s = self.stream_index(stream, CALL)?;
        let spans = self.spans(&w, CALL, accesses)?;
        let info = w.begin_op(s, name, &spans);
        let body: JointBody = Box::new(body);
        w.push(
            s,
            Op {
                info,
                delay: core.config.delays.custom,
                work: Work::Custom {
                    regions: spans.into_iter().map(|(span, _)| span).collect(),
                    body: Some(body),
                },
            },
        );
        drop(w);
        core.cv.notify_all();
        Ok(())
    }
}
