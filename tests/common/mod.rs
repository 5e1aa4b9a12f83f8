//! A multi-rank harness over the mock: one thread per rank, each with its device, its
//! caching allocator and its world process group.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use memreuse::allocator::{AllocatorConfig, CachingAllocator, Storage};
use memreuse::mock::{MockCommunicator, MockConfig, MockDevice, MockStream, open_mock_world};
use memreuse::process_group::{ProcessGroup, ReuseMode, SyncCollectives};
use memreuse::{Backend, BackendError, RaceKind, RaceReport};

/// One rank's view, handed to the per-rank closure.
pub struct Rank {
    pub rank: usize,
    pub world: usize,
    pub device: MockDevice,
    pub allocator: Arc<CachingAllocator<MockDevice>>,
    pub pg: ProcessGroup<MockDevice>,
    pub compute: MockStream,
}

impl Rank {
    /// Allocates `elems` f32 on `stream` and fills it with `value + rank`.
    pub fn tensor(&self, elems: usize, value: f32, stream: &MockStream) -> Storage<MockDevice> {
        let t = self
            .allocator
            .allocate(elems as u64 * 4, stream)
            .expect("allocate");
        self.fill(&t, value + self.rank as f32, stream);
        t
    }

    /// Allocates a tensor on `stream` holding exactly `values` (f32).
    pub fn tensor_with(&self, values: &[f32], stream: &MockStream) -> Storage<MockDevice> {
        let t = self
            .allocator
            .allocate(values.len() as u64 * 4, stream)
            .expect("allocate");
        let bytes: Vec<u8> = values.iter().copied().flat_map(f32::to_le_bytes).collect();
        self.device
            .copy_host_to_device(t.ptr(), &bytes, stream)
            .expect("upload");
        t
    }

    pub fn fill(&self, t: &Storage<MockDevice>, value: f32, stream: &MockStream) {
        let n = (t.requested_size() / 4) as usize;
        let bytes: Vec<u8> = std::iter::repeat_n(value, n)
            .flat_map(f32::to_le_bytes)
            .collect();
        self.device
            .copy_host_to_device(t.ptr(), &bytes, stream)
            .expect("upload");
    }

    pub fn read(&self, t: &Storage<MockDevice>, stream: &MockStream) -> Vec<f32> {
        let mut bytes = vec![0u8; t.requested_size() as usize];
        self.device
            .copy_device_to_host(&mut bytes, t.ptr(), stream)
            .expect("read back");
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    /// Bounded polling (never a bare sleep that a loaded machine can outlast): calls
    /// `cond` until it holds, for at most 20 s.
    pub fn eventually(&self, what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !cond() {
            assert!(
                std::time::Instant::now() < deadline,
                "rank {}: timed out waiting for {what}",
                self.rank
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// What a run of the harness returns: per rank, the closure's value, and the race reports.
pub struct Outcome<T> {
    pub values: Vec<T>,
    pub races: Vec<RaceReport>,
    pub devices: Vec<MockDevice>,
    /// Per rank, the device error the harness took before its final synchronize (only
    /// with [`Setup::expect_device_errors`]; `None` otherwise).
    pub device_errors: Vec<Option<BackendError>>,
}

impl<T> Outcome<T> {
    pub fn reuse_races(&self) -> usize {
        self.races
            .iter()
            .filter(|r| r.kind == RaceKind::Reuse)
            .count()
    }
}

/// Options of a harness run.
#[derive(Clone)]
pub struct Setup {
    pub world: usize,
    pub mode: ReuseMode,
    pub config: MockConfig,
    pub watchdog: Option<Duration>,
    pub timeout: Duration,
    pub blocking_wait: bool,
    pub alloc: AllocatorConfig,
    /// Collectives of the world communicator (0-based, in issue order) that fail on every
    /// rank instead of running (`MockCommunicator::inject_collective_failure`), planted
    /// before any rank starts.
    pub inject_collective_failures: Vec<u64>,
    /// The body leaves a failed op behind. The mock keeps a stream's failure until
    /// `take_last_error()` (like a sticky device error), and the process group cannot
    /// clear it (the `Backend` trait has no such call, and on a real device only the
    /// communicator's owner knows the error was handled). So with this set, the harness
    /// takes each device's last error after dropping the group and before its final
    /// synchronize (reporting it in [`Outcome::device_errors`]); the zero-bytes assertion
    /// still runs. Without it, a leftover device error fails the run.
    pub expect_device_errors: bool,
    /// The group's never-waited warning delay (`unwaited_warning_after`).
    pub unwaited_warning_after: Duration,
    /// Where the group runs synchronous collectives (default: the current stream).
    pub sync_collectives: SyncCollectives,
}

impl Setup {
    pub fn new(world: usize, mode: ReuseMode) -> Setup {
        Setup {
            world,
            mode,
            config: MockConfig::with_capacity(256 << 20),
            watchdog: Some(Duration::from_millis(1)),
            timeout: Duration::from_secs(60),
            blocking_wait: false,
            alloc: AllocatorConfig::default(),
            inject_collective_failures: Vec::new(),
            expect_device_errors: false,
            unwaited_warning_after: Duration::from_secs(10),
            sync_collectives: SyncCollectives::default(),
        }
    }
}

/// Runs `body` on every rank (one thread each). After `body`, the harness drops the
/// group, (with [`Setup::expect_device_errors`]) takes the device's leftover error,
/// synchronizes the device, processes events and asserts nothing is left allocated.
pub fn run<T: Send>(setup: &Setup, body: impl Fn(&Rank) -> T + Sync) -> Outcome<T> {
    let endpoints = open_mock_world(setup.world, setup.config.clone()).expect("open mock world");
    let devices: Vec<MockDevice> = endpoints.iter().map(|(d, _)| d.clone()).collect();
    for &k in &setup.inject_collective_failures {
        // One call plants the fault for every member of the communicator.
        endpoints[0].1.inject_collective_failure(k);
    }
    let (values, device_errors) = std::thread::scope(|scope| {
        let handles: Vec<_> = endpoints
            .into_iter()
            .enumerate()
            .map(|(rank, (device, comm))| {
                let body = &body;
                let setup = setup.clone();
                scope.spawn(move || run_rank(rank, &setup, &device, comm, body))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank thread"))
            .unzip()
    });
    let races = devices
        .iter()
        .flat_map(|d| d.race_reports().unwrap_or_default())
        .collect();
    Outcome {
        values,
        races,
        devices,
        device_errors,
    }
}

fn run_rank<T>(
    rank: usize,
    setup: &Setup,
    device: &MockDevice,
    comm: MockCommunicator,
    body: &(impl Fn(&Rank) -> T + Sync),
) -> (T, Option<BackendError>) {
    let allocator = CachingAllocator::new(Arc::new(device.clone()), setup.alloc.clone());
    let pg = ProcessGroup::builder(Arc::clone(&allocator), Box::new(comm))
        .mode(setup.mode)
        .watchdog(setup.watchdog)
        .timeout(setup.timeout)
        .blocking_wait(setup.blocking_wait)
        .unwaited_warning_after(setup.unwaited_warning_after)
        .sync_collectives(setup.sync_collectives)
        .build()
        .expect("process group");
    let compute = device.default_stream();
    let r = Rank {
        rank,
        world: setup.world,
        device: device.clone(),
        allocator: Arc::clone(&allocator),
        pg,
        compute,
    };
    let value = body(&r);
    let Rank { pg, .. } = r;
    drop(pg);
    let device_error = if setup.expect_device_errors {
        device.take_last_error()
    } else {
        None
    };
    device.synchronize_device().expect("sync");
    allocator.process_events().expect("process events");
    assert_eq!(
        allocator.stats().allocated_bytes.current,
        0,
        "rank {rank}: bytes left allocated after the group dropped"
    );
    (value, device_error)
}
