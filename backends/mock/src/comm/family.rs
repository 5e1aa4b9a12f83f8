//! [`MockCommunicator`]: one rank's member of a mock communicator (or sub-group).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use memreuse_core::comm::{CommError, Communicator, DType, ReduceOp};
use memreuse_core::{BackendError, DevicePtr};
use parking_lot::Mutex;

use super::collective;
use super::pairs::PairGroups;
use crate::device::MockDevice;
use crate::error::BACKEND_NAME;
use crate::handles::MockStream;
use crate::joint::{JointGroup, JointOp};
use crate::region::MemAccess;

static NEXT_COMM_UID: AtomicU64 = AtomicU64::new(1);

/// `(creation number, ranks)` of a sub-group.
type SubgroupKey = (u64, Vec<usize>);

/// What every member of one communicator shares: its devices, its collective joint group,
/// its point-to-point pair groups and the sub-groups created from it.
pub(crate) struct Family {
    uid: u64,
    /// Device of each group rank.
    devices: Vec<MockDevice>,
    collectives: JointGroup,
    /// Point-to-point: one two-rank joint group per `(sender, receiver)` of group ranks.
    pairs: PairGroups,
    /// `(creation number, ranks)` -> the sub-group's family, created by the first member
    /// that asks.
    subgroups: Mutex<HashMap<SubgroupKey, Arc<Family>>>,
}

impl Family {
    pub(crate) fn new(devices: Vec<MockDevice>) -> Result<Arc<Family>, BackendError> {
        let collectives = JointGroup::new(&devices)?;
        let pairs = PairGroups::new(&devices);
        Ok(Arc::new(Family {
            uid: NEXT_COMM_UID.fetch_add(1, Ordering::Relaxed),
            devices,
            collectives,
            pairs,
            subgroups: Mutex::new(HashMap::new()),
        }))
    }
}

/// A send or receive waiting for `group_end`.
struct PendingP2p {
    group: JointGroup,
    share: usize,
    op: JointOp,
    stream: MockStream,
}

/// One rank's member of a mock communicator. Built by [`super::open_mock_world`] (world)
/// or [`Communicator::new_group`] (sub-groups).
pub struct MockCommunicator {
    family: Arc<Family>,
    rank: usize,
    /// Number of `new_group` calls this member made (matches sub-group creations across
    /// members, as `torch.distributed.new_group` requires every member to call in order).
    new_group_calls: Mutex<u64>,
    /// `Some` between `group_start` and `group_end`.
    pending: Mutex<Option<Vec<PendingP2p>>>,
    /// Set by `abort`.
    aborted: Mutex<Option<String>>,
}

impl std::fmt::Debug for MockCommunicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MockCommunicator(comm {} rank {}/{})",
            self.family.uid,
            self.rank,
            self.family.devices.len()
        )
    }
}

fn bytes_of(count: usize, dtype: DType) -> u64 {
    count as u64 * dtype.size_bytes()
}

impl MockCommunicator {
    pub(crate) fn new(family: Arc<Family>, rank: usize) -> MockCommunicator {
        MockCommunicator {
            family,
            rank,
            new_group_calls: Mutex::new(0),
            pending: Mutex::new(None),
            aborted: Mutex::new(None),
        }
    }

    /// Fault injection: the communicator's `k`-th collective (0-based, counted in issue
    /// order, the same on every member) fails on every member instead of running.
    pub fn inject_collective_failure(&self, k: u64) {
        self.family.collectives.inject_failure(k);
    }

    /// This member's device.
    pub fn device(&self) -> &MockDevice {
        &self.family.devices[self.rank]
    }

    fn check_alive(&self) -> Result<(), CommError> {
        match &*self.aborted.lock() {
            Some(reason) => Err(CommError::Aborted {
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    fn collective(&self, stream: &MockStream, op: JointOp) -> Result<(), CommError> {
        self.check_alive()?;
        if self.pending.lock().is_some() {
            return Err(CommError::invalid_argument(
                "collective",
                "collectives inside group_start/group_end are not supported by the mock",
            ));
        }
        self.family.collectives.submit(self.rank, stream, op)?;
        Ok(())
    }

    fn p2p(
        &self,
        call: &'static str,
        peer: usize,
        access: MemAccess,
        stream: &MockStream,
        sending: bool,
    ) -> Result<(), CommError> {
        self.check_alive()?;
        let size = self.family.devices.len();
        if peer >= size || peer == self.rank {
            return Err(CommError::invalid_argument(
                call,
                format!("peer {peer} is not another rank of this {size}-rank group"),
            ));
        }
        let (sender, receiver) = if sending {
            (self.rank, peer)
        } else {
            (peer, self.rank)
        };
        let group = self.family.pairs.get(sender, receiver)?;
        let share = usize::from(!sending);
        let op = JointOp::new("send/recv")
            .access(access)
            .body(collective::send_recv);
        let mut pending = self.pending.lock();
        if let Some(list) = pending.as_mut() {
            list.push(PendingP2p {
                group,
                share,
                op,
                stream: *stream,
            });
            return Ok(());
        }
        drop(pending);
        group.submit(share, stream, op)?;
        Ok(())
    }
}

impl Communicator<MockDevice> for MockCommunicator {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.family.devices.len()
    }

    fn all_reduce(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        op: ReduceOp,
        stream: &MockStream,
    ) -> Result<(), CommError> {
        CommError::check_reference_reduction(BACKEND_NAME, "all_reduce", dtype, op)?;
        let jop = JointOp::new(format!("all_reduce({op})"))
            .access(MemAccess::write(buf, bytes_of(count, dtype)))
            .body(move |m| collective::all_reduce_typed(m, dtype, op));
        self.collective(stream, jop)
    }

    fn all_gather(
        &self,
        input: DevicePtr,
        output: DevicePtr,
        count: usize,
        dtype: DType,
        stream: &MockStream,
    ) -> Result<(), CommError> {
        let n = bytes_of(count, dtype);
        let jop = JointOp::new("all_gather")
            .access(MemAccess::read(input, n))
            .access(MemAccess::write(output, n * self.size() as u64))
            .body(collective::all_gather);
        self.collective(stream, jop)
    }

    fn reduce_scatter(
        &self,
        input: DevicePtr,
        output: DevicePtr,
        count: usize,
        dtype: DType,
        op: ReduceOp,
        stream: &MockStream,
    ) -> Result<(), CommError> {
        CommError::check_reference_reduction(BACKEND_NAME, "reduce_scatter", dtype, op)?;
        let n = bytes_of(count, dtype);
        let jop = JointOp::new(format!("reduce_scatter({op})"))
            .access(MemAccess::read(input, n * self.size() as u64))
            .access(MemAccess::write(output, n))
            .body(move |m| collective::reduce_scatter_typed(m, dtype, op));
        self.collective(stream, jop)
    }

    fn all_to_all(
        &self,
        input: DevicePtr,
        output: DevicePtr,
        count: usize,
        dtype: DType,
        stream: &MockStream,
    ) -> Result<(), CommError> {
        let n = bytes_of(count, dtype) * self.size() as u64;
        let jop = JointOp::new("all_to_all")
            .access(MemAccess::read(input, n))
            .access(MemAccess::write(output, n))
            .body(collective::all_to_all);
        self.collective(stream, jop)
    }

    fn broadcast(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        root: usize,
        stream: &MockStream,
    ) -> Result<(), CommError> {
        if root >= self.size() {
            return Err(CommError::invalid_argument(
                "broadcast",
                format!("root {root} is outside the {}-rank group", self.size()),
            ));
        }
        let n = bytes_of(count, dtype);
        let access = if self.rank == root {
            MemAccess::read(buf, n)
        } else {
            MemAccess::write(buf, n)
        };
        let jop = JointOp::new(format!("broadcast(root {root})"))
            .access(access)
            .body(move |m| collective::broadcast(m, root));
        self.collective(stream, jop)
    }

    fn send(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        peer: usize,
        stream: &MockStream,
    ) -> Result<(), CommError> {
        self.p2p(
            "send",
            peer,
            MemAccess::read(buf, bytes_of(count, dtype)),
            stream,
            true,
        )
    }

    fn recv(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        peer: usize,
        stream: &MockStream,
    ) -> Result<(), CommError> {
        self.p2p(
            "recv",
            peer,
            MemAccess::write(buf, bytes_of(count, dtype)),
            stream,
            false,
        )
    }

    fn group_start(&self) -> Result<(), CommError> {
        let mut pending = self.pending.lock();
        if pending.is_some() {
            return Err(CommError::invalid_argument(
                "group_start",
                "already inside group_start/group_end",
            ));
        }
        *pending = Some(Vec::new());
        Ok(())
    }

    fn group_end(&self) -> Result<(), CommError> {
        let Some(list) = self.pending.lock().take() else {
            return Err(CommError::invalid_argument(
                "group_end",
                "group_end without group_start",
            ));
        };
        let Some(first) = list.first() else {
            return Ok(());
        };
        let stream = first.stream;
        if list.iter().any(|p| p.stream != stream) {
            return Err(CommError::invalid_argument(
                "group_end",
                "every member of a group must use the same stream",
            ));
        }
        let groups: Vec<JointGroup> = list.iter().map(|p| p.group.clone()).collect();
        let ops: Vec<(&JointGroup, usize, JointOp)> = list
            .into_iter()
            .zip(&groups)
            .map(|(p, g)| (g, p.share, p.op))
            .collect();
        JointGroup::submit_batch(&stream, ops)?;
        Ok(())
    }

    fn barrier(&self, stream: &MockStream) -> Result<(), CommError> {
        self.collective(stream, JointOp::new("barrier"))
    }

    fn new_group(
        &self,
        ranks: &[usize],
    ) -> Result<Option<Box<dyn Communicator<MockDevice>>>, CommError> {
        let size = self.size();
        let mut calls = self.new_group_calls.lock();
        let seq = *calls;
        *calls += 1;
        drop(calls);
        let Some(position) = memreuse_core::comm::group_position(ranks, size, self.rank)
            .map_err(|reason| CommError::invalid_argument("new_group", reason))?
        else {
            return Ok(None);
        };
        let family = {
            let mut subgroups = self.family.subgroups.lock();
            if let Some(f) = subgroups.get(&(seq, ranks.to_vec())) {
                Arc::clone(f)
            } else {
                let devices = ranks
                    .iter()
                    .map(|&r| self.family.devices[r].clone())
                    .collect();
                let f = Family::new(devices)?;
                subgroups.insert((seq, ranks.to_vec()), Arc::clone(&f));
                f
            }
        };
        Ok(Some(Box::new(MockCommunicator::new(family, position))))
    }

    fn async_error(&self) -> Option<CommError> {
        self.aborted
            .lock()
            .as_ref()
            .map(|reason| CommError::Aborted {
                reason: reason.clone(),
            })
    }

    fn abort(&self) {
        let reason = format!(
            "communicator {} aborted by rank {}",
            self.family.uid, self.rank
        );
        *self.aborted.lock() = Some(reason.clone());
        self.family.collectives.abort(&reason);
        self.family.pairs.abort(&reason);
    }
}
