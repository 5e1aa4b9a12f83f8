//! Point-to-point for [`AscendCommunicator`]: `HcclSend` / `HcclRecv`, and groups of them
//! through `HcclGroupStart` / `HcclGroupEnd` where the runtime has them, or queued and
//! issued at `group_end` in the deadlock-free order of `group.rs` where it does not.

use std::sync::atomic::Ordering;

use memreuse_core::DevicePtr;
use memreuse_core::comm::{CommError, DType};

use super::{AscendCommunicator, comm_err};
use crate::device::AscendStream;
use crate::group::{Queued, deadlock_free_order};
use crate::result::{HcclError, hccl};
use crate::sys;

/// (the trait method, the HCCL symbol) of a send (`true`) or a receive, for errors.
fn names(send: bool) -> (&'static str, &'static str) {
    if send {
        ("send", "HcclSend")
    } else {
        ("recv", "HcclRecv")
    }
}

impl AscendCommunicator {
    /// `group_start`: `HcclGroupStart`, or an emulated group where the symbols are absent
    /// or answer `HCCL_E_NOT_SUPPORT`.
    pub(super) fn open_group(&self) -> Result<(), CommError> {
        self.check_aborted()?;
        if !self.groups_emulated() {
            if let Some(f) = self.device.api().HcclGroupStart {
                match self.call_status(|_| hccl::group_start(f))? {
                    Ok(()) => return Ok(()),
                    // Documented as unsupported on Atlas 910 and 310P parts.
                    Err(HcclError(sys::HCCL_E_NOT_SUPPORT)) => {
                        self.emulate_group.store(true, Ordering::Relaxed);
                    }
                    Err(e) => return Err(comm_err(e.into_backend("HcclGroupStart"))),
                }
            }
        }
        self.group.lock().depth += 1;
        Ok(())
    }

    /// `group_end`: `HcclGroupEnd`, or the emulated group's operations in the
    /// deadlock-free order.
    pub(super) fn close_group(&self) -> Result<(), CommError> {
        let emulated_open = self.group.lock().depth > 0;
        if !emulated_open {
            let Some(f) = self
                .device
                .api()
                .HcclGroupEnd
                .filter(|_| !self.groups_emulated())
            else {
                return Err(CommError::invalid_argument(
                    "group_end",
                    "no group is open (group_start first)",
                ));
            };
            return self.call("HcclGroupEnd", |_| hccl::group_end(f));
        }
        let queued = {
            let mut g = self.group.lock();
            g.depth -= 1;
            if g.depth > 0 {
                return Ok(());
            }
            std::mem::take(&mut g.queued)
        };
        self.check_aborted()?;
        self.issue_emulated(queued)
    }

    /// Issues the queued operations of an emulated group in the deadlock-free order.
    fn issue_emulated(&self, queued: Vec<Queued>) -> Result<(), CommError> {
        let ordered = deadlock_free_order(self.rank, queued, |q| (q.send, q.peer));
        for q in ordered {
            self.p2p_now(q.send, q.buf, q.count, q.dtype, q.peer, &q.stream)?;
        }
        Ok(())
    }

    /// `HcclSend` (`send`) or `HcclRecv` of `count` elements at `buf` with `peer`, queued
    /// while an emulated group is open.
    pub(super) fn p2p(
        &self,
        send: bool,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        peer: usize,
        stream: &AscendStream,
    ) -> Result<(), CommError> {
        let (method, _) = names(send);
        self.check_peer(method, peer)?;
        Self::dtype(method, dtype)?;
        {
            let mut g = self.group.lock();
            if g.depth > 0 {
                self.check_aborted()?;
                g.queued.push(Queued {
                    send,
                    buf,
                    count,
                    dtype,
                    peer,
                    stream: stream.clone(),
                });
                return Ok(());
            }
        }
        self.p2p_now(send, buf, count, dtype, peer, stream)
    }

    /// Issues one `HcclSend` (`send`) or `HcclRecv` now.
    fn p2p_now(
        &self,
        send: bool,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        peer: usize,
        stream: &AscendStream,
    ) -> Result<(), CommError> {
        let (method, symbol) = names(send);
        let t = Self::dtype(method, dtype)?;
        let (api, s) = (self.device.api(), stream.raw_handle());
        let (count, peer) = (count as u64, peer as u32);
        self.call(symbol, |c| {
            if send {
                hccl::send(api, buf, count, t, peer, c, s)
            } else {
                hccl::recv(api, buf, count, t, peer, c, s)
            }
        })
    }

    fn check_peer(&self, call: &'static str, peer: usize) -> Result<(), CommError> {
        if peer >= self.size || peer == self.rank {
            return Err(CommError::invalid_argument(
                call,
                format!(
                    "peer {peer} is not another rank of this {}-rank group",
                    self.size
                ),
            ));
        }
        Ok(())
    }
}
