//! The communicator contract kit (`memreuse_core::testing::comm_contract`) on the mock
//! communicator, and on deliberately flawed communicators built over it: the kit passes
//! the mock and names each planted flaw.

use std::time::Duration;

use memreuse_core::DevicePtr;
use memreuse_core::comm::{CommError, Communicator, DType, ReduceOp};
use memreuse_core::testing::comm_contract::{CommContractOptions, Rank, check_communicator};
use memreuse_mock::{MockConfig, MockDevice, MockStream, open_mock_world};
use parking_lot::Mutex;

/// Which rule the wrapper breaks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Flaw {
    None,
    /// Rank 0 issues its first collective after its second.
    ReordersCollectives,
    /// `new_group` ignores the rank list (every rank joins).
    SubgroupsSpanTheWorld,
    /// Sends go to the rank after the one asked for.
    MisroutesSends,
    /// `group_start`/`group_end` do nothing: batch members are issued one by one.
    BatchesSerially,
    /// `abort` does nothing.
    AbortIsANoOp,
    /// f16 and bf16 all_reduces are issued as f32 over the same bytes (the 4-byte
    /// element assumption the typed API replaced).
    ReducesHalvesAsF32,
}

type Deferred = (DevicePtr, usize, DType, ReduceOp, MockStream);

struct Flawed {
    inner: Box<dyn Communicator<MockDevice>>,
    flaw: Flaw,
    deferred: Mutex<Option<Deferred>>,
    first_done: Mutex<bool>,
}

impl Flawed {
    fn wrap(inner: Box<dyn Communicator<MockDevice>>, flaw: Flaw) -> Flawed {
        Flawed {
            inner,
            flaw,
            deferred: Mutex::new(None),
            first_done: Mutex::new(false),
        }
    }

    fn release_deferred(&self) -> Result<(), CommError> {
        if let Some((buf, count, dtype, op, s)) = self.deferred.lock().take() {
            self.inner.all_reduce(buf, count, dtype, op, &s)?;
        }
        Ok(())
    }
}

impl Communicator<MockDevice> for Flawed {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn all_reduce(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        op: ReduceOp,
        stream: &MockStream,
    ) -> Result<(), CommError> {
        let mut first = self.first_done.lock();
        if self.flaw == Flaw::ReordersCollectives && self.rank() == 0 && !*first {
            *first = true;
            *self.deferred.lock() = Some((buf, count, dtype, op, *stream));
            return Ok(());
        }
        drop(first);
        if self.flaw == Flaw::ReducesHalvesAsF32 && matches!(dtype, DType::F16 | DType::BF16) {
            self.inner
                .all_reduce(buf, count / 2, DType::F32, op, stream)?;
            return self.release_deferred();
        }
        self.inner.all_reduce(buf, count, dtype, op, stream)?;
        self.release_deferred()
    }
    fn all_gather(
        &self,
        input: DevicePtr,
        output: DevicePtr,
        count: usize,
        dtype: DType,
        stream: &MockStream,
    ) -> Result<(), CommError> {
        self.inner.all_gather(input, output, count, dtype, stream)?;
        self.release_deferred()
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
        self.inner
            .reduce_scatter(input, output, count, dtype, op, stream)?;
        self.release_deferred()
    }
    fn all_to_all(
        &self,
        input: DevicePtr,
        output: DevicePtr,
        count: usize,
        dtype: DType,
        stream: &MockStream,
    ) -> Result<(), CommError> {
        self.inner.all_to_all(input, output, count, dtype, stream)?;
        self.release_deferred()
    }
    fn broadcast(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        root: usize,
        stream: &MockStream,
    ) -> Result<(), CommError> {
        self.inner.broadcast(buf, count, dtype, root, stream)?;
        self.release_deferred()
    }
    fn send(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        peer: usize,
        stream: &MockStream,
    ) -> Result<(), CommError> {
        let peer = if self.flaw == Flaw::MisroutesSends {
            let wrong = (peer + 1) % self.size();
            if wrong == self.rank() {
                (wrong + 1) % self.size()
            } else {
                wrong
            }
        } else {
            peer
        };
        self.inner.send(buf, count, dtype, peer, stream)
    }
    fn recv(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        peer: usize,
        stream: &MockStream,
    ) -> Result<(), CommError> {
        self.inner.recv(buf, count, dtype, peer, stream)
    }
    fn group_start(&self) -> Result<(), CommError> {
        if self.flaw == Flaw::BatchesSerially {
            return Ok(());
        }
        self.inner.group_start()
    }
    fn group_end(&self) -> Result<(), CommError> {
        if self.flaw == Flaw::BatchesSerially {
            return Ok(());
        }
        self.inner.group_end()
    }
    fn barrier(&self, stream: &MockStream) -> Result<(), CommError> {
        self.inner.barrier(stream)
    }
    fn new_group(
        &self,
        ranks: &[usize],
    ) -> Result<Option<Box<dyn Communicator<MockDevice>>>, CommError> {
        let all: Vec<usize> = (0..self.size()).collect();
        let asked = if self.flaw == Flaw::SubgroupsSpanTheWorld {
            &all[..]
        } else {
            ranks
        };
        Ok(self
            .inner
            .new_group(asked)?
            .map(|c| Box::new(Flawed::wrap(c, self.flaw)) as Box<dyn Communicator<MockDevice>>))
    }
    fn async_error(&self) -> Option<CommError> {
        self.inner.async_error()
    }
    fn abort(&self) {
        if self.flaw != Flaw::AbortIsANoOp {
            self.inner.abort();
        }
    }
}

fn options() -> CommContractOptions {
    CommContractOptions {
        world_size: 4,
        timeout: Duration::from_millis(500),
        grouping: true,
    }
}

fn open(
    flaw: Flaw,
) -> impl Fn(usize, Duration) -> Result<Vec<Rank<MockDevice>>, memreuse_core::BackendError> + Sync {
    move |n, timeout| {
        let config = MockConfig {
            joint_timeout: timeout,
            sync_timeout: timeout * 2,
            ..MockConfig::with_capacity(1 << 22)
        };
        Ok(open_mock_world(n, config)?
            .into_iter()
            .map(|(d, c)| {
                (
                    d,
                    Box::new(Flawed::wrap(Box::new(c), flaw)) as Box<dyn Communicator<MockDevice>>,
                )
            })
            .collect())
    }
}

fn violations(flaw: Flaw) -> Vec<&'static str> {
    let report = check_communicator(&open(flaw), &options());
    println!("{flaw:?}: {report:#?}");
    report.violations.iter().map(|v| v.check).collect()
}

#[test]
fn the_mock_communicator_keeps_the_contract() {
    let report = check_communicator(&open(Flaw::None), &options());
    report.assert_passed();
    assert_eq!(report.passed.len(), 9, "{report:?}");
}

#[test]
fn without_grouping_the_batch_check_is_skipped_and_the_ordered_one_runs() {
    let report = check_communicator(
        &open(Flaw::None),
        &CommContractOptions {
            grouping: false,
            ..options()
        },
    );
    report.assert_passed();
    assert_eq!(report.skipped.len(), 1);
    assert_eq!(report.skipped[0].0, "group_batches");
    assert!(report.passed.contains(&"p2p_pairing"));
}

#[test]
fn the_kit_catches_collectives_matched_out_of_order() {
    // Rank 0 defers its first all_reduce in every check, so later checks break too; the
    // order check is the one that names it.
    let v = violations(Flaw::ReordersCollectives);
    assert_eq!(v.first(), Some(&"collective_order"), "{v:?}");
}

#[test]
fn the_kit_catches_subgroups_that_ignore_their_ranks() {
    assert_eq!(violations(Flaw::SubgroupsSpanTheWorld), ["subgroups"]);
}

#[test]
fn the_kit_catches_misrouted_sends() {
    let v = violations(Flaw::MisroutesSends);
    assert!(v.contains(&"p2p_pairing"), "{v:?}");
}

#[test]
fn the_kit_catches_batch_members_that_block_each_other() {
    assert_eq!(violations(Flaw::BatchesSerially), ["group_batches"]);
}

#[test]
fn the_kit_catches_an_abort_that_does_nothing() {
    assert_eq!(violations(Flaw::AbortIsANoOp), ["abort_unblocks"]);
}

#[test]
fn the_kit_catches_16_bit_reductions_done_in_f32() {
    assert_eq!(
        violations(Flaw::ReducesHalvesAsF32),
        ["element_types_reduce"]
    );
}

#[test]
fn a_world_of_one_is_refused_not_run() {
    let report = check_communicator(
        &open(Flaw::None),
        &CommContractOptions {
            world_size: 1,
            ..options()
        },
    );
    assert_eq!(report.violations.len(), 1);
    assert_eq!(report.violations[0].check, "world_size");
}
