//! Memory pools (docs/memory-pools.md) on the strict mock device: isolation, scopes,
//! `use_on_oom`, `no_split`, release, per-pool statistics, the viewer's `segment_pool_id`,
//! and PyTorch's rules for expandable segments inside a pool. Bad input is in
//! `mem_pool_errors.rs`.

use std::sync::Arc;

use memreuse::allocator::{
    AllocError, AllocatorConfig, CachingAllocator, MemPoolId, MemPoolOptions, PoolError,
    SegmentSource, SourceMemory,
};
use memreuse::mock::{MockConfig, MockDevice};
use memreuse::observe::ViewerSnapshot;
use memreuse::{Backend, BackendError};

const MIB: u64 = 1 << 20;

fn device(capacity: u64) -> MockDevice {
    MockDevice::new(MockConfig::with_capacity(capacity)).expect("mock device")
}

fn allocator(dev: &MockDevice, conf: &str) -> Arc<CachingAllocator<MockDevice>> {
    let config = AllocatorConfig::parse(conf).expect("configuration");
    CachingAllocator::try_new(Arc::new(dev.clone()), config).expect("allocator")
}

/// The allocator's figures agree with its snapshot and with the device.
fn assert_consistent(alloc: &CachingAllocator<MockDevice>, dev: &MockDevice) {
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

#[test]
fn a_pools_blocks_are_never_given_to_ordinary_allocations_nor_the_reverse() {
    let dev = device(256 * MIB);
    let alloc = allocator(&dev, "");
    let s = dev.default_stream();
    let pool = alloc.create_pool(MemPoolOptions::default());
    let p = pool.allocate(4096, &s).unwrap();
    let p_addr = p.ptr();
    drop(p);
    let o = alloc.allocate(4096, &s).unwrap();
    assert_ne!(
        o.ptr(),
        p_addr,
        "an ordinary allocation took the pool's cached block"
    );
    let o_addr = o.ptr();
    drop(o);
    let p = pool.allocate(4096, &s).unwrap();
    assert_eq!(p.ptr(), p_addr, "the pool reuses its own cached block");
    assert_ne!(p.ptr(), o_addr);
    let stats = alloc.stats();
    assert_eq!(stats.num_device_alloc, 2, "one small segment each");
    let ps = pool.stats();
    assert_eq!((ps.segments, ps.allocations), (1, 1), "{ps:?}");
    assert_eq!(ps.reserved_bytes, 2 * MIB);
    assert_eq!(ps.allocated_bytes, 4096);
    assert_eq!(ps.id, pool.id());
    assert_eq!(pool.id().0, 0, "user pools are (0, uid), as PyTorch's");
    assert_ne!(pool.id(), MemPoolId::DEFAULT);
    let snap = alloc.snapshot();
    let ids: Vec<MemPoolId> = snap.segments.iter().map(|s| s.segment_pool_id).collect();
    assert!(
        ids.contains(&pool.id()) && ids.contains(&MemPoolId::DEFAULT),
        "{ids:?}"
    );
    drop(p);
    assert_consistent(&alloc, &dev);
}

#[test]
fn two_pools_do_not_share_segments() {
    let dev = device(256 * MIB);
    let alloc = allocator(&dev, "");
    let s = dev.default_stream();
    let (first, second) = (
        alloc.create_pool(MemPoolOptions::default()),
        alloc.create_pool(MemPoolOptions::default()),
    );
    let x = first.allocate(8 * MIB, &s).unwrap();
    let x_addr = x.ptr();
    drop(x);
    let y = second.allocate(8 * MIB, &s).unwrap();
    assert_ne!(y.ptr(), x_addr);
    assert_eq!((first.stats().segments, second.stats().segments), (1, 1));
}

#[test]
fn a_scope_routes_this_threads_allocations_on_its_streams_only() {
    let dev = device(256 * MIB);
    let alloc = allocator(&dev, "");
    let (s, other) = (dev.default_stream(), dev.create_stream().unwrap());
    let pool = alloc.create_pool(MemPoolOptions::default());
    {
        let _scope = pool.scope(std::slice::from_ref(&s)).unwrap();
        let t = alloc.allocate(4096, &s).unwrap();
        assert_eq!(pool.stats().allocations, 1, "routed into the pool");
        let u = alloc.allocate(4096, &other).unwrap();
        assert_eq!(pool.stats().allocations, 1, "another stream is not routed");
        let a2 = Arc::clone(&alloc);
        let s2 = s;
        let v = std::thread::spawn(move || a2.allocate(4096, &s2).map(|t| t.ptr()))
            .join()
            .unwrap()
            .unwrap();
        assert_eq!(pool.stats().allocations, 1, "another thread is not routed");
        let _ = (t, u, v);
    }
    let t = alloc.allocate(4096, &s).unwrap();
    assert_eq!(pool.stats().allocations, 0, "the scope ended");
    drop(t);
    // An empty stream list covers every stream; scopes nest, the innermost wins.
    let inner = alloc.create_pool(MemPoolOptions::default());
    let _outer = pool.scope(&[]).unwrap();
    let t = alloc.allocate(4096, &other).unwrap();
    assert_eq!(pool.stats().allocations, 1);
    {
        let _in = inner.scope(&[]).unwrap();
        let u = alloc.allocate(4096, &s).unwrap();
        assert_eq!(
            (pool.stats().allocations, inner.stats().allocations),
            (1, 1)
        );
        drop(u);
    }
    drop(t);
}

#[test]
fn use_on_oom_lets_an_ordinary_allocation_take_a_cached_pool_block() {
    for use_on_oom in [false, true] {
        let dev = device(40 * MIB);
        let alloc = allocator(&dev, "");
        let s = dev.default_stream();
        let pool = alloc.create_pool(MemPoolOptions {
            use_on_oom,
            no_split: false,
        });
        drop(pool.allocate(30 * MIB, &s).unwrap()); // cached in the pool: 30 MiB segment
        let r = alloc.allocate(20 * MIB, &s);
        if use_on_oom {
            let t = r.expect("served from the pool's cache");
            assert_eq!(pool.stats().allocations, 1, "the block is the pool's");
            assert_eq!(alloc.stats().num_device_alloc, 1, "no new segment");
            drop(t);
            assert_eq!(
                pool.stats().cached_free_bytes,
                30 * MIB,
                "it returns to the pool"
            );
        } else {
            assert!(matches!(r, Err(AllocError::OutOfMemory(_))), "{r:?}");
            assert_eq!(
                pool.stats().cached_free_bytes,
                30 * MIB,
                "the pool kept its segment"
            );
        }
        assert_consistent(&alloc, &dev);
    }
}

#[test]
fn no_split_gives_every_allocation_a_whole_block() {
    for no_split in [false, true] {
        let dev = device(256 * MIB);
        let alloc = allocator(&dev, "");
        let s = dev.default_stream();
        let pool = alloc.create_pool(MemPoolOptions {
            use_on_oom: false,
            no_split,
        });
        let a = pool.allocate(4096, &s).unwrap();
        let b = pool.allocate(4096, &s).unwrap();
        let st = pool.stats();
        if no_split {
            assert_eq!(a.size(), 2 * MIB, "the whole small segment");
            assert_eq!(st.segments, 2, "{st:?}");
        } else {
            assert_eq!(a.size(), 4096);
            assert_eq!(st.segments, 1, "{st:?}");
        }
        drop((a, b));
        // A cached whole block is handed out whole, not split, under no_split.
        let c = pool.allocate(512, &s).unwrap();
        assert_eq!(c.size(), if no_split { 2 * MIB } else { 512 });
    }
}

#[test]
fn dropping_a_pool_gives_back_its_cached_segments_and_later_the_live_ones() {
    let dev = device(256 * MIB);
    let alloc = allocator(&dev, "");
    let s = dev.default_stream();
    let pool = alloc.create_pool(MemPoolOptions::default());
    let id = pool.id();
    drop(pool.allocate(8 * MIB, &s).unwrap());
    let live = pool.allocate(4096, &s).unwrap();
    alloc.empty_cache().unwrap();
    assert_eq!(
        pool.stats().segments,
        2,
        "the allocator's empty_cache leaves a live pool alone"
    );
    drop(pool);
    let st = alloc.pool_stats(id).unwrap();
    assert_eq!(
        (st.segments, st.num_device_free, st.live),
        (1, 1, false),
        "{st:?}"
    );
    let addr = live.ptr();
    dev.memset_zero(addr, live.size(), &s)
        .expect("a live block of a dropped pool stays usable");
    drop(live);
    alloc.empty_cache().unwrap();
    let st = alloc.pool_stats(id).unwrap();
    assert_eq!((st.segments, st.num_device_free), (0, 2), "{st:?}");
    assert_eq!(alloc.stats().reserved_bytes.aggregate.current, 0);
    assert_consistent(&alloc, &dev);
}

#[test]
fn a_pools_empty_cache_releases_only_its_own_segments_and_it_stays_usable() {
    let dev = device(256 * MIB);
    let alloc = allocator(&dev, "");
    let s = dev.default_stream();
    let pool = alloc.create_pool(MemPoolOptions::default());
    drop(alloc.allocate(4096, &s).unwrap());
    drop(pool.allocate(4096, &s).unwrap());
    pool.empty_cache().unwrap();
    assert_eq!(pool.stats().segments, 0);
    assert_eq!(
        alloc.stats().segment.aggregate.current,
        1,
        "the default pool kept its own"
    );
    let t = pool.allocate(4096, &s).unwrap();
    assert_eq!(pool.stats().peak_reserved_bytes, 2 * MIB);
    drop(t);
    assert_consistent(&alloc, &dev);
}

#[test]
fn the_viewer_shows_the_pool_id_of_each_segment() {
    let dev = device(256 * MIB);
    let alloc = allocator(&dev, "");
    let s = dev.default_stream();
    let pool = alloc.create_pool(MemPoolOptions::default());
    let _a = alloc.allocate(4096, &s).unwrap();
    let _b = pool.allocate(4096, &s).unwrap();
    let viewer = ViewerSnapshot::from_snapshot(0, &alloc.snapshot()).unwrap();
    let json: String = viewer.to_json().unwrap().split_whitespace().collect();
    let pool_field = format!("\"segment_pool_id\":[{},{}]", pool.id().0, pool.id().1);
    assert_eq!(json.matches(&pool_field).count(), 1, "{json}");
    assert_eq!(
        json.matches("\"segment_pool_id\":[0,0]").count(),
        1,
        "{json}"
    );
}

#[test]
fn snapshots_record_the_device_total_for_readers_of_the_file() {
    let dev = device(256 * MIB);
    let alloc = allocator(&dev, "");
    let _t = alloc.allocate(4096, &dev.default_stream()).unwrap();
    let snap = alloc.snapshot();
    assert_eq!(snap.device_total, Some(256 * MIB));
    let viewer = ViewerSnapshot::from_snapshot(0, &snap).unwrap();
    assert_eq!(viewer.device_total, Some((256 * MIB) as i64));
    let json: String = viewer.to_json().unwrap().split_whitespace().collect();
    assert!(
        json.contains(&format!("\"device_total\":{}", 256 * MIB)),
        "{json}"
    );
    // Two devices of different capacities: no single total to record.
    let other = device(128 * MIB);
    let alloc2 = allocator(&other, "");
    let snap2 = alloc2.snapshot();
    let both = ViewerSnapshot::from_devices(&[(0, &snap), (1, &snap2)]).unwrap();
    assert_eq!(both.device_total, None);
    assert!(!both.to_json().unwrap().contains("device_total"));
}

/// A source over the mock device, for pools whose segments do not come from the allocator.
struct DeviceSource(MockDevice);

impl SegmentSource for DeviceSource {
    fn name(&self) -> &'static str {
        "device"
    }

    fn alloc(&self, bytes: u64) -> Result<SourceMemory, BackendError> {
        Ok(SourceMemory {
            ptr: self.0.malloc(bytes)?,
            len: bytes,
        })
    }

    fn free(&self, memory: SourceMemory) -> Result<(), BackendError> {
        self.0.free(memory.ptr)
    }
}

#[test]
fn under_expandable_segments_a_plain_pool_gets_its_own_and_a_sourced_pool_ordinary_ones() {
    let dev = device(1 << 30);
    let alloc = allocator(&dev, "expandable_segments:True");
    let s = dev.default_stream();
    let plain = alloc.create_pool(MemPoolOptions::default());
    let src: Arc<dyn SegmentSource> = Arc::new(DeviceSource(dev.clone()));
    let sourced = alloc.create_pool_with_source(MemPoolOptions::default(), Some(src));
    let ordinary = alloc.allocate(4 * MIB, &s).unwrap();
    let in_plain = plain.allocate(4 * MIB, &s).unwrap();
    let in_sourced = sourced.allocate(4 * MIB, &s).unwrap();
    let snap = alloc.snapshot();
    let of = |id: MemPoolId| {
        snap.segments
            .iter()
            .filter(|seg| seg.segment_pool_id == id)
            .collect::<Vec<_>>()
    };
    let (default, pl, so) = (of(MemPoolId::DEFAULT), of(plain.id()), of(sourced.id()));
    assert!(
        default.len() == 1 && default[0].is_expandable,
        "{default:?}"
    );
    assert!(
        pl.len() == 1 && pl[0].is_expandable,
        "the plain pool's own: {pl:?}"
    );
    assert_ne!(pl[0].address, default[0].address);
    assert!(so.len() == 1 && !so[0].is_expandable, "{so:?}");
    assert_eq!(so[0].total_size, 20 * MIB, "an ordinary large segment");
    // The sourced pool splits by the ordinary rule: the 16 MiB remainder is one block.
    assert_eq!(so[0].blocks.len(), 2);
    // A pool's reserved bytes are its mapped pages, not its reserved addresses.
    let ps = plain.stats();
    assert_eq!(
        (ps.reserved_bytes, ps.peak_reserved_bytes),
        (20 * MIB, 20 * MIB),
        "{ps:?}"
    );
    assert_eq!(ps.num_device_alloc, 1, "one map");
    // The allocator's empty_cache unmaps the default pool's free pages, not the pools'.
    drop((ordinary, in_plain, in_sourced));
    alloc.empty_cache().unwrap();
    assert_eq!(plain.stats().segments, 1, "a live pool's pages stay mapped");
    assert_eq!(sourced.stats().segments, 1);
    plain.empty_cache().unwrap();
    sourced.empty_cache().unwrap();
    assert_eq!((plain.stats().segments, sourced.stats().segments), (0, 0));
    assert_eq!(alloc.stats().reserved_bytes.aggregate.current, 0);
    assert_consistent(&alloc, &dev);
}

#[test]
fn an_allocation_in_a_pool_that_does_not_fit_is_out_of_memory_and_leaves_other_pools_alone() {
    let dev = device(64 * MIB);
    let alloc = allocator(&dev, "");
    let s = dev.default_stream();
    let (holder, other) = (
        alloc.create_pool(MemPoolOptions::default()),
        alloc.create_pool(MemPoolOptions::default()),
    );
    drop(holder.allocate(40 * MIB, &s).unwrap());
    let r = other.allocate(40 * MIB, &s);
    assert!(matches!(r, Err(AllocError::OutOfMemory(_))), "{r:?}");
    assert_eq!(
        holder.stats().cached_free_bytes,
        40 * MIB,
        "a live pool's cache is never released for another"
    );
    drop(holder);
    other
        .allocate(40 * MIB, &s)
        .expect("fits once the other pool is gone");
    let err = alloc
        .allocate_in_pool(MemPoolId(0, u64::MAX), 4096, &s)
        .expect_err("no such pool");
    assert!(
        matches!(&err, AllocError::Pool(p) if matches!(**p, PoolError::Unknown { .. })),
        "{err:?}"
    );
}
