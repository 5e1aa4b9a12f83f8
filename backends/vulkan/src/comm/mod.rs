//! [`VulkanCommunicator`]: one rank of a communicator between devices of this process.
//!
//! lavapipe has no external semaphores, so no device waits for another device. Each
//! operation instead closes a gate on the member's stream (see [`crate::sched`]): the
//! stream's later work is held on the host, and the communicator's proxy thread (see
//! [`hub`]) moves the data through the coherent mappings once every member's stream
//! reached the operation, then opens the gates. The calling thread never blocks.

pub mod hub;
pub mod movement;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use memreuse_core::comm::{CommError, Communicator, DType, ReduceOp};
use memreuse_core::{BackendError, DevicePtr};
use parking_lot::Mutex;

use crate::device::VulkanDevice;
use crate::handles::VulkanStream;
use crate::memory::Span;
use hub::{Contribution, Hub, SharedGate, Side};
use movement::{Kind, lengths};

static NEXT_COMM_UID: AtomicU64 = AtomicU64::new(1);

/// A send or receive waiting for `group_end`.
struct PendingP2p {
    sending: bool,
    peer: usize,
    dtype: DType,
    count: usize,
    span: Span,
    stream: VulkanStream,
}

/// Issue counters of one member: collectives, and transfers per peer each way.
struct Counters {
    collectives: u64,
    sent: Vec<u64>,
    received: Vec<u64>,
    new_groups: u64,
}

/// One rank's member of a communicator.
pub struct VulkanCommunicator {
    hub: Arc<Hub>,
    rank: usize,
    counters: Mutex<Counters>,
    group: Mutex<Option<Vec<PendingP2p>>>,
}

impl std::fmt::Debug for VulkanCommunicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "VulkanCommunicator(comm {} rank {}/{})",
            self.hub.uid,
            self.rank,
            self.hub.devices.len()
        )
    }
}

/// One member per device of `devices` (group rank order), sharing a new proxy.
pub fn communicators(
    devices: Vec<VulkanDevice>,
    timeout: Duration,
) -> Result<Vec<VulkanCommunicator>, BackendError> {
    let n = devices.len();
    let hub = Hub::start(
        NEXT_COMM_UID.fetch_add(1, Ordering::Relaxed),
        devices,
        timeout,
    )?;
    Ok((0..n)
        .map(|rank| VulkanCommunicator::new(Arc::clone(&hub), rank))
        .collect())
}

impl VulkanCommunicator {
    fn new(hub: Arc<Hub>, rank: usize) -> VulkanCommunicator {
        let n = hub.devices.len();
        VulkanCommunicator {
            hub,
            rank,
            counters: Mutex::new(Counters {
                collectives: 0,
                sent: vec![0; n],
                received: vec![0; n],
                new_groups: 0,
            }),
            group: Mutex::new(None),
        }
    }

    /// This member's device.
    pub fn device(&self) -> &VulkanDevice {
        &self.hub.devices[self.rank]
    }

    fn collective(
        &self,
        call: &'static str,
        kind: Kind,
        buffers: &[DevicePtr],
        (count, dtype): (usize, DType),
        stream: &VulkanStream,
    ) -> Result<(), CommError> {
        self.hub.check_alive()?;
        if self.group.lock().is_some() {
            return Err(CommError::invalid_argument(
                call,
                "collectives inside group_start/group_end are not supported",
            ));
        }
        let device = self.device();
        device.check_stream(call, stream)?;
        let size = self.hub.devices.len() as u64;
        let spans = buffers
            .iter()
            .zip(lengths(kind, count as u64, dtype.size_bytes(), size))
            .map(|(&p, len)| device.span(call, p, len))
            .collect::<Result<Vec<_>, _>>()?;
        let gate = SharedGate::new(device.gate(stream)?, 1);
        let seq = {
            let mut c = self.counters.lock();
            c.collectives += 1;
            c.collectives - 1
        };
        self.hub.contribute(
            seq,
            self.rank,
            Contribution {
                kind,
                dtype,
                count,
                spans,
                gate,
            },
        );
        Ok(())
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "the trait method's five arguments plus the call's name and direction"
    )]
    fn p2p(
        &self,
        call: &'static str,
        sending: bool,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        peer: usize,
        stream: &VulkanStream,
    ) -> Result<(), CommError> {
        self.hub.check_alive()?;
        let size = self.hub.devices.len();
        if peer >= size || peer == self.rank {
            return Err(CommError::invalid_argument(
                call,
                format!("peer {peer} is not another rank of this {size}-rank group"),
            ));
        }
        let device = self.device();
        device.check_stream(call, stream)?;
        let span = device.span(call, buf, count as u64 * dtype.size_bytes())?;
        let op = PendingP2p {
            sending,
            peer,
            dtype,
            count,
            span,
            stream: *stream,
        };
        let mut group = self.group.lock();
        if let Some(list) = group.as_mut() {
            list.push(op);
            return Ok(());
        }
        drop(group);
        self.issue(vec![op])
    }

    /// Issues a batch of point-to-point operations behind one gate on their stream.
    fn issue(&self, ops: Vec<PendingP2p>) -> Result<(), CommError> {
        let Some(first) = ops.first() else {
            return Ok(());
        };
        let stream = first.stream;
        if ops.iter().any(|p| p.stream != stream) {
            return Err(CommError::invalid_argument(
                "group_end",
                "every member of a group must use the same stream",
            ));
        }
        let gate = SharedGate::new(self.device().gate(&stream)?, ops.len());
        let mut counters = self.counters.lock();
        for op in ops {
            let side = Side {
                dtype: op.dtype,
                count: op.count,
                span: op.span,
                gate: Arc::clone(&gate),
            };
            let key = if op.sending {
                counters.sent[op.peer] += 1;
                (self.rank, op.peer, counters.sent[op.peer] - 1)
            } else {
                counters.received[op.peer] += 1;
                (op.peer, self.rank, counters.received[op.peer] - 1)
            };
            self.hub.transfer(key, op.sending, side);
        }
        Ok(())
    }
}

impl Drop for VulkanCommunicator {
    fn drop(&mut self) {
        self.hub.member_dropped();
    }
}

impl Communicator<VulkanDevice> for VulkanCommunicator {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.hub.devices.len()
    }

    fn all_reduce(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        op: ReduceOp,
        stream: &VulkanStream,
    ) -> Result<(), CommError> {
        CommError::check_reference_reduction("vulkan", "all_reduce", dtype, op)?;
        let kind = Kind::AllReduce(op);
        self.collective("all_reduce", kind, &[buf], (count, dtype), stream)
    }

    fn all_gather(
        &self,
        input: DevicePtr,
        output: DevicePtr,
        count: usize,
        dtype: DType,
        stream: &VulkanStream,
    ) -> Result<(), CommError> {
        self.collective(
            "all_gather",
            Kind::AllGather,
            &[input, output],
            (count, dtype),
            stream,
        )
    }

    fn reduce_scatter(
        &self,
        input: DevicePtr,
        output: DevicePtr,
        count: usize,
        dtype: DType,
        op: ReduceOp,
        stream: &VulkanStream,
    ) -> Result<(), CommError> {
        CommError::check_reference_reduction("vulkan", "reduce_scatter", dtype, op)?;
        let kind = Kind::ReduceScatter(op);
        self.collective(
            "reduce_scatter",
            kind,
            &[input, output],
            (count, dtype),
            stream,
        )
    }

    fn all_to_all(
        &self,
        input: DevicePtr,
        output: DevicePtr,
        count: usize,
        dtype: DType,
        stream: &VulkanStream,
    ) -> Result<(), CommError> {
        self.collective(
            "all_to_all",
            Kind::AllToAll,
            &[input, output],
            (count, dtype),
            stream,
        )
    }

    fn broadcast(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        root: usize,
        stream: &VulkanStream,
    ) -> Result<(), CommError> {
        if root >= self.size() {
            return Err(CommError::invalid_argument(
                "broadcast",
                format!("root {root} is outside the {}-rank group", self.size()),
            ));
        }
        let kind = Kind::Broadcast(root);
        self.collective("broadcast", kind, &[buf], (count, dtype), stream)
    }

    fn send(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        peer: usize,
        stream: &VulkanStream,
    ) -> Result<(), CommError> {
        self.p2p("send", true, buf, count, dtype, peer, stream)
    }

    fn recv(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        peer: usize,
        stream: &VulkanStream,
    ) -> Result<(), CommError> {
        self.p2p("recv", false, buf, count, dtype, peer, stream)
    }

    fn group_start(&self) -> Result<(), CommError> {
        let mut group = self.group.lock();
        if group.is_some() {
            return Err(CommError::invalid_argument(
                "group_start",
                "already inside group_start/group_end",
            ));
        }
        *group = Some(Vec::new());
        Ok(())
    }

    fn group_end(&self) -> Result<(), CommError> {
        let Some(list) = self.group.lock().take() else {
            return Err(CommError::invalid_argument(
                "group_end",
                "group_end without group_start",
            ));
        };
        self.hub.check_alive()?;
        self.issue(list)
    }

    fn barrier(&self, stream: &VulkanStream) -> Result<(), CommError> {
        self.collective("barrier", Kind::Barrier, &[], (0, DType::U8), stream)
    }

    fn new_group(
        &self,
        ranks: &[usize],
    ) -> Result<Option<Box<dyn Communicator<VulkanDevice>>>, CommError> {
        let size = self.size();
        let seq = {
            let mut c = self.counters.lock();
            c.new_groups += 1;
            c.new_groups - 1
        };
        let Some(position) = memreuse_core::comm::group_position(ranks, size, self.rank)
            .map_err(|reason| CommError::invalid_argument("new_group", reason))?
        else {
            return Ok(None);
        };
        let hub = {
            let mut subgroups = self.hub.subgroups.lock();
            if let Some(h) = subgroups.get(&(seq, ranks.to_vec())) {
                Arc::clone(h)
            } else {
                let devices = ranks.iter().map(|&r| self.hub.devices[r].clone()).collect();
                let uid = NEXT_COMM_UID.fetch_add(1, Ordering::Relaxed);
                let h = Hub::start(uid, devices, self.hub.timeout)?;
                subgroups.insert((seq, ranks.to_vec()), Arc::clone(&h));
                h
            }
        };
        Ok(Some(Box::new(VulkanCommunicator::new(hub, position))))
    }

    fn async_error(&self) -> Option<CommError> {
        self.hub.error()
    }

    fn abort(&self) {
        let reason = format!(
            "communicator {} aborted by rank {}",
            self.hub.uid, self.rank
        );
        self.hub.abort(reason, None);
    }
}
