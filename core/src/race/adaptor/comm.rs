//! [`RaceCheckedComm`]: a communicator whose operations the [`RaceChecker`] of its device
//! sees as ops of their streams, matched across members.

use std::ops::Range;

use parking_lot::Mutex;

use super::RaceChecker;
use super::state::{Channel, MatchKey};
use crate::backend::Backend;
use crate::comm::{CommError, Communicator, DType, ReduceOp};
use crate::ids::DevicePtr;
use crate::race::AccessKind;

/// A point-to-point operation issued between `group_start` and `group_end`.
struct Pending {
    key: MatchKey,
    share: usize,
    access: (Range<u64>, AccessKind),
}

/// Wraps one member of a communicator of backend `B`; its device must be wrapped in a
/// [`RaceChecker`] of the same [`super::RaceWorld`]. Every call is forwarded; an accepted
/// operation is recorded on its stream with what it reads and writes (as the mock's
/// communicator declares them), then matched: collectives in issue order per
/// communicator, sends and receives per (sender, receiver), a `group_start`/`group_end`
/// batch as one op of its stream.
pub struct RaceCheckedComm<B: Backend> {
    inner: Box<dyn Communicator<B>>,
    device: RaceChecker<B>,
    family: u64,
    new_group_calls: Mutex<u64>,
    pending: Mutex<Option<Vec<Pending>>>,
    /// The stream the open batch's operations named (all members name the same one).
    batch_stream: Mutex<Option<B::Stream>>,
}

fn bytes_of(count: usize, dtype: DType) -> u64 {
    count as u64 * dtype.size_bytes()
}

fn read(ptr: DevicePtr, bytes: u64) -> (Range<u64>, AccessKind) {
    (
        ptr.addr()..ptr.addr().saturating_add(bytes),
        AccessKind::Read,
    )
}

fn write(ptr: DevicePtr, bytes: u64) -> (Range<u64>, AccessKind) {
    (
        ptr.addr()..ptr.addr().saturating_add(bytes),
        AccessKind::Write,
    )
}

impl<B: Backend> RaceCheckedComm<B> {
    /// Wraps `inner`, a member of the communicator identified by `family` (from
    /// [`super::RaceWorld::new_family`]; the same for every member), running on `device`.
    pub fn new(
        inner: Box<dyn Communicator<B>>,
        device: RaceChecker<B>,
        family: u64,
    ) -> RaceCheckedComm<B> {
        RaceCheckedComm {
            inner,
            device,
            family,
            new_group_calls: Mutex::new(0),
            pending: Mutex::new(None),
            batch_stream: Mutex::new(None),
        }
    }

    /// Records an accepted collective and matches it.
    fn collective(
        &self,
        name: &str,
        accesses: &[(Range<u64>, AccessKind)],
        stream: &B::Stream,
        forwarded: Result<(), CommError>,
    ) -> Result<(), CommError> {
        forwarded?;
        let comp = self.device.record(stream, name, accesses);
        let size = self.inner.size();
        let rank = self.inner.rank();
        self.device
            .locked(|s, _| s.arrive((self.family, Channel::Collective), size, rank, comp));
        Ok(())
    }

    /// Records an accepted send or receive (or keeps it for `group_end`).
    fn p2p(
        &self,
        peer: usize,
        sending: bool,
        access: (Range<u64>, AccessKind),
        stream: &B::Stream,
        forwarded: Result<(), CommError>,
    ) -> Result<(), CommError> {
        forwarded?;
        let me = self.inner.rank();
        let (pair, share) = if sending {
            (Channel::Pair(me, peer), 0)
        } else {
            (Channel::Pair(peer, me), 1)
        };
        let key = (self.family, pair);
        if let Some(list) = self.pending.lock().as_mut() {
            list.push(Pending { key, share, access });
            return Ok(());
        }
        let comp = self
            .device
            .record(stream, "send/recv", std::slice::from_ref(&access));
        self.device.locked(|s, _| s.arrive(key, 2, share, comp));
        Ok(())
    }

    /// Inside a batch, remembers the stream it runs on.
    fn note_batch_stream(&self, stream: &B::Stream) {
        if self.pending.lock().is_some() {
            let mut slot = self.batch_stream.lock();
            if slot.is_none() {
                *slot = Some(stream.clone());
            }
        }
    }
}

impl<B: Backend> Communicator<RaceChecker<B>> for RaceCheckedComm<B> {
    fn rank(&self) -> usize {
        self.inner.rank()
    }

    fn size(&self) -> usize {
        self.inner.size()
    }

    fn reduces(&self, dtype: DType, op: ReduceOp) -> bool {
        self.inner.reduces(dtype, op)
    }

    fn all_reduce(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        op: ReduceOp,
        stream: &B::Stream,
    ) -> Result<(), CommError> {
        let r = self.inner.all_reduce(buf, count, dtype, op, stream);
        self.collective(
            &format!("all_reduce({op})"),
            &[write(buf, bytes_of(count, dtype))],
            stream,
            r,
        )
    }

    fn all_gather(
        &self,
        input: DevicePtr,
        output: DevicePtr,
        count: usize,
        dtype: DType,
        stream: &B::Stream,
    ) -> Result<(), CommError> {
        let r = self.inner.all_gather(input, output, count, dtype, stream);
        let n = bytes_of(count, dtype);
        self.collective(
            "all_gather",
            &[read(input, n), write(output, n * self.size() as u64)],
            stream,
            r,
        )
    }

    fn reduce_scatter(
        &self,
        input: DevicePtr,
        output: DevicePtr,
        count: usize,
        dtype: DType,
        op: ReduceOp,
        stream: &B::Stream,
    ) -> Result<(), CommError> {
        let r = self
            .inner
            .reduce_scatter(input, output, count, dtype, op, stream);
        let n = bytes_of(count, dtype);
        self.collective(
            &format!("reduce_scatter({op})"),
            &[read(input, n * self.size() as u64), write(output, n)],
            stream,
            r,
        )
    }

    fn all_to_all(
        &self,
        input: DevicePtr,
        output: DevicePtr,
        count: usize,
        dtype: DType,
        stream: &B::Stream,
    ) -> Result<(), CommError> {
        let r = self.inner.all_to_all(input, output, count, dtype, stream);
        let n = bytes_of(count, dtype) * self.size() as u64;
        self.collective("all_to_all", &[read(input, n), write(output, n)], stream, r)
    }

    fn broadcast(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        root: usize,
        stream: &B::Stream,
    ) -> Result<(), CommError> {
        let r = self.inner.broadcast(buf, count, dtype, root, stream);
        let n = bytes_of(count, dtype);
        let access = if self.rank() == root {
            read(buf, n)
        } else {
            write(buf, n)
        };
        self.collective(&format!("broadcast(root {root})"), &[access], stream, r)
    }

    fn send(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        peer: usize,
        stream: &B::Stream,
    ) -> Result<(), CommError> {
        let r = self.inner.send(buf, count, dtype, peer, stream);
        if r.is_ok() {
            self.note_batch_stream(stream);
        }
        self.p2p(peer, true, read(buf, bytes_of(count, dtype)), stream, r)
    }

    fn recv(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        peer: usize,
        stream: &B::Stream,
    ) -> Result<(), CommError> {
        let r = self.inner.recv(buf, count, dtype, peer, stream);
        if r.is_ok() {
            self.note_batch_stream(stream);
        }
        self.p2p(peer, false, write(buf, bytes_of(count, dtype)), stream, r)
    }

    fn group_start(&self) -> Result<(), CommError> {
        self.inner.group_start()?;
        *self.pending.lock() = Some(Vec::new());
        *self.batch_stream.lock() = None;
        Ok(())
    }

    fn group_end(&self) -> Result<(), CommError> {
        let r = self.inner.group_end();
        let list = self.pending.lock().take();
        let stream = self.batch_stream.lock().take();
        r?;
        let (Some(list), Some(stream)) = (list, stream) else {
            return Ok(());
        };
        if list.is_empty() {
            return Ok(());
        }
        let accesses: Vec<(Range<u64>, AccessKind)> =
            list.iter().map(|p| p.access.clone()).collect();
        let name = vec!["send/recv"; list.len()].join("+");
        let comp = self.device.record(&stream, &name, &accesses);
        self.device.locked(|s, _| {
            for p in list {
                s.arrive(p.key, 2, p.share, comp);
            }
        });
        Ok(())
    }

    fn barrier(&self, stream: &B::Stream) -> Result<(), CommError> {
        let r = self.inner.barrier(stream);
        self.collective("barrier", &[], stream, r)
    }

    fn new_group(
        &self,
        ranks: &[usize],
    ) -> Result<Option<Box<dyn Communicator<RaceChecker<B>>>>, CommError> {
        let seq = {
            let mut calls = self.new_group_calls.lock();
            let seq = *calls;
            *calls += 1;
            seq
        };
        let Some(sub) = self.inner.new_group(ranks)? else {
            return Ok(None);
        };
        let family = self
            .device
            .locked(|s, _| s.subgroup(self.family, seq, ranks));
        Ok(Some(Box::new(RaceCheckedComm::new(
            sub,
            self.device.clone(),
            family,
        ))))
    }

    fn async_error(&self) -> Option<CommError> {
        self.inner.async_error()
    }

    fn abort(&self) {
        self.inner.abort();
    }
}
