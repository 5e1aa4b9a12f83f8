//! Memory pools given bad input (docs/memory-pools.md, "Bad input"): each a typed error,
//! and the allocator consistent afterwards (it serves, `empty_cache` succeeds, its figures
//! match its snapshot and the device, and nothing leaks once everything is dropped).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use memreuse::allocator::{
    AllocError, AllocatorConfig, CachingAllocator, MemPoolOptions, PoolError, SegmentSource,
    SourceMemory,
};
use memreuse::mock::{MockConfig, MockDevice, open_mock_world};
use memreuse::{Backend, BackendError, DevicePtr};

const MIB: u64 = 1 << 20;

fn device(capacity: u64) -> MockDevice {
    MockDevice::new(MockConfig::with_capacity(capacity)).expect("mock device")
}

fn allocator(dev: &MockDevice) -> Arc<CachingAllocator<MockDevice>> {
    CachingAllocator::new(Arc::new(dev.clone()), AllocatorConfig::default())
}

/// Serves, empties its cache, and its figures match its snapshot and the device.
fn assert_consistent(alloc: &Arc<CachingAllocator<MockDevice>>, dev: &MockDevice) {
    let s = dev.default_stream();
    drop(alloc.allocate(4096, &s).expect("still serves"));
    alloc.process_events().expect("process_events");
    alloc.empty_cache().expect("empty_cache");
    let stats = alloc.stats();
    let snap = alloc.snapshot();
    let reserved: u64 = snap.segments.iter().map(|s| s.total_size).sum();
    assert_eq!(
        stats.reserved_bytes.aggregate.current, reserved,
        "{stats:?}"
    );
    let info = dev.memory_info().unwrap();
    assert_eq!(info.total - info.free, reserved, "device use = reserved");
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Good,
    Misaligned,
    Short,
    Fail,
    OutOfMemory,
}

/// A segment source over the mock device that misbehaves as told.
struct Source {
    dev: MockDevice,
    mode: Mutex<Mode>,
    /// Address handed out -> address the device gave.
    live: Mutex<HashMap<u64, u64>>,
    frees: Mutex<u64>,
}

impl Source {
    fn new(dev: &MockDevice, mode: Mode) -> Arc<Source> {
        Arc::new(Source {
            dev: dev.clone(),
            mode: Mutex::new(mode),
            live: Mutex::new(HashMap::new()),
            frees: Mutex::new(0),
        })
    }
}

impl SegmentSource for Source {
    fn name(&self) -> &'static str {
        "test-source"
    }

    fn alloc(&self, bytes: u64) -> Result<SourceMemory, BackendError> {
        let mode = *self.mode.lock().unwrap();
        match mode {
            Mode::Fail => {
                return Err(BackendError::invalid_argument(
                    "test-source",
                    "alloc",
                    "broken",
                ));
            }
            Mode::OutOfMemory => {
                return Err(BackendError::out_of_memory(
                    "test-source",
                    bytes,
                    "none left",
                ));
            }
            _ => {}
        }
        let real = self.dev.malloc(bytes + 4096)?.addr();
        let (ptr, len) = match mode {
            Mode::Misaligned => (real + 8, bytes),
            Mode::Short => (real, bytes - 512),
            _ => (real, bytes),
        };
        self.live.lock().unwrap().insert(ptr, real);
        Ok(SourceMemory {
            ptr: DevicePtr(ptr),
            len,
        })
    }

    fn free(&self, memory: SourceMemory) -> Result<(), BackendError> {
        *self.frees.lock().unwrap() += 1;
        let real = self
            .live
            .lock()
            .unwrap()
            .remove(&memory.ptr.addr())
            .expect("memory this source gave");
        self.dev.free(DevicePtr(real))
    }
}

#[test]
fn allocating_from_a_dropped_or_closed_pool_is_refused() {
    let dev = device(256 * MIB);
    let alloc = allocator(&dev);
    let s = dev.default_stream();
    let pool = alloc.create_pool(MemPoolOptions::default());
    let id = pool.id();
    drop(pool.allocate(4096, &s).unwrap());
    drop(pool);
    let err = alloc.allocate_in_pool(id, 4096, &s).expect_err("dropped");
    assert!(
        matches!(&err, AllocError::Pool(p) if matches!(**p, PoolError::Released { how: "dropped", .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains("takes no allocations"), "{err}");
    let pool = alloc.create_pool(MemPoolOptions::default());
    let id = pool.id();
    pool.close().unwrap();
    let err = alloc.allocate_in_pool(id, 4096, &s).expect_err("closed");
    assert!(
        matches!(&err, AllocError::Pool(p) if matches!(**p, PoolError::Released { how: "closed", .. })),
        "{err:?}"
    );
    assert_eq!(alloc.pool_stats(id).unwrap().segments, 0);
    assert_consistent(&alloc, &dev);
}

#[test]
fn a_source_that_fails_is_a_typed_error_and_one_out_of_memory_is_an_oom() {
    let dev = device(256 * MIB);
    let alloc = allocator(&dev);
    let s = dev.default_stream();
    let src = Source::new(&dev, Mode::Fail);
    let pool = alloc.create_pool_with_source(MemPoolOptions::default(), Some(src.clone()));
    let err = pool.allocate(4096, &s).expect_err("the source fails");
    let AllocError::Pool(p) = &err else {
        panic!("{err:?}")
    };
    let PoolError::SourceFailed {
        source_name, error, ..
    } = &**p
    else {
        panic!("{p:?}")
    };
    assert_eq!(source_name, "test-source");
    assert!(error.to_string().contains("broken"), "{error}");
    *src.mode.lock().unwrap() = Mode::OutOfMemory;
    let err = pool
        .allocate(4096, &s)
        .expect_err("the source is out of memory");
    assert!(matches!(err, AllocError::OutOfMemory(_)), "{err:?}");
    assert_eq!(pool.stats().segments, 0);
    assert_consistent(&alloc, &dev);
    *src.mode.lock().unwrap() = Mode::Good;
    let t = pool.allocate(4096, &s).expect("a good source serves");
    assert_eq!(pool.stats().num_device_alloc, 1);
    drop(t);
    drop(pool);
    assert_eq!(
        *src.frees.lock().unwrap(),
        1,
        "the segment went back to its source"
    );
    assert!(src.live.lock().unwrap().is_empty());
    assert_consistent(&alloc, &dev);
}

#[test]
fn misaligned_or_short_memory_from_a_source_is_refused_and_handed_back() {
    for (mode, what) in [
        (Mode::Misaligned, "not a multiple of 512"),
        (Mode::Short, "were asked for"),
    ] {
        let dev = device(256 * MIB);
        let alloc = allocator(&dev);
        let s = dev.default_stream();
        let src = Source::new(&dev, mode);
        let pool = alloc.create_pool_with_source(MemPoolOptions::default(), Some(src.clone()));
        let err = pool.allocate(4096, &s).expect_err("unusable memory");
        match &err {
            AllocError::Pool(p) => {
                let PoolError::BadMemory { reason, .. } = &**p else {
                    panic!("{mode:?}: {p:?}")
                };
                assert!(reason.contains(what), "{mode:?}: {reason}");
            }
            other => panic!("{mode:?}: {other:?}"),
        }
        assert_eq!(*src.frees.lock().unwrap(), 1, "{mode:?}: handed back");
        assert!(src.live.lock().unwrap().is_empty());
        let ps = pool.stats();
        assert_eq!((ps.segments, ps.num_device_alloc), (0, 0), "{ps:?}");
        assert_consistent(&alloc, &dev);
    }
}

#[test]
fn a_scope_on_another_devices_stream_is_refused() {
    let endpoints = open_mock_world(2, MockConfig::with_capacity(64 << 20)).unwrap();
    let (dev0, dev1) = (&endpoints[0].0, &endpoints[1].0);
    let alloc = allocator(dev0);
    let pool = alloc.create_pool(MemPoolOptions::default());
    let err = pool
        .scope(&[dev0.default_stream(), dev1.default_stream()])
        .expect_err("a foreign stream");
    assert!(
        matches!(
            err,
            AllocError::ForeignStream {
                call: "MemPool::scope",
                device: 0,
                ..
            }
        ),
        "{err:?}"
    );
    let t = alloc.allocate(4096, &dev0.default_stream()).unwrap();
    assert_eq!(pool.stats().allocations, 0, "nothing was routed");
    drop(t);
    assert_consistent(&alloc, dev0);
}

/// A source that, inside `alloc`, waits until the test says go (or gives up after a
/// minute, failing the allocation, so a held lock fails the test instead of hanging it).
struct Gate {
    dev: MockDevice,
    inside: std::sync::mpsc::SyncSender<()>,
    go: Mutex<std::sync::mpsc::Receiver<()>>,
}

impl SegmentSource for Gate {
    fn name(&self) -> &'static str {
        "gate"
    }

    fn alloc(&self, bytes: u64) -> Result<SourceMemory, BackendError> {
        self.inside.send(()).expect("test alive");
        self.go
            .lock()
            .unwrap()
            .recv_timeout(std::time::Duration::from_secs(60))
            .map_err(|_| BackendError::invalid_argument("gate", "alloc", "never told to go"))?;
        Ok(SourceMemory {
            ptr: self.dev.malloc(bytes)?,
            len: bytes,
        })
    }

    fn free(&self, memory: SourceMemory) -> Result<(), BackendError> {
        self.dev.free(memory.ptr)
    }
}

#[test]
fn release_lock_on_malloc_lets_other_threads_use_the_allocator_during_the_device_call() {
    let dev = device(256 * MIB);
    let alloc = allocator(&dev);
    assert!(
        !alloc.release_lock_on_malloc(),
        "off by default, as in PyTorch"
    );
    alloc.set_release_lock_on_malloc(true);
    let s = dev.default_stream();
    drop(alloc.allocate(4096, &s).unwrap()); // a cached block for the other thread
    let (inside_tx, inside_rx) = std::sync::mpsc::sync_channel(1);
    let (go_tx, go_rx) = std::sync::mpsc::channel();
    let gate = Arc::new(Gate {
        dev: dev.clone(),
        inside: inside_tx,
        go: Mutex::new(go_rx),
    });
    let pool = Arc::new(alloc.create_pool_with_source(MemPoolOptions::default(), Some(gate)));
    let p2 = Arc::clone(&pool);
    let worker = std::thread::spawn(move || p2.allocate(8 * MIB, &s).map(|t| t.size()));
    inside_rx
        .recv()
        .expect("the worker is inside the device call");
    // With the lock held this would wait for the worker, which waits for us.
    let cached = alloc
        .allocate(4096, &s)
        .expect("served while the device call runs");
    let stats = alloc.stats();
    assert_eq!(
        stats.num_device_alloc, 1,
        "the worker's segment is not in yet"
    );
    drop(cached);
    go_tx.send(()).unwrap();
    assert_eq!(
        worker.join().unwrap().expect("the worker's allocation"),
        8 * MIB
    );
    assert_eq!(pool.stats().segments, 1);
    drop(pool);
    assert_consistent(&alloc, &dev);
}
