//! The `OutOfMemory` message names what holds the unusable memory (issue 17 item 3): bytes
//! pending behind a work (a late wait) or behind the user's `record_stream`, shelves of
//! works never waited, fragmented cached bytes per pool.

mod common;

use std::sync::Arc;

use common::{MIB, setup_with, within};
use memreuse_core::WorkId;
use memreuse_core::allocator::{OomCulprits, ShelfHold, UseOwner};
use memreuse_core::{AllocError, Backend};

fn oom_of(r: Result<impl Sized, AllocError>) -> Box<memreuse_core::OutOfMemory> {
    match r {
        Err(AllocError::OutOfMemory(oom)) => oom,
        Err(e) => panic!("expected out of memory, got {e}"),
        Ok(_) => panic!("expected out of memory, got memory"),
    }
}

#[test]
fn late_wait_names_the_work_its_op_and_stream() {
    within(20, || {
        let (backend, alloc, [s0, s1, _]) = setup_with(40 * MIB, "");
        let work = WorkId(4242);
        let t = alloc.allocate(20 * MIB, &s0).unwrap();
        alloc.record_stream_for_work(&t, &s1, work);
        // The collective still runs on s1 when the program frees its input: the block waits.
        backend.enqueue_work(&s1).unwrap();
        drop(t);
        let id = alloc.allocate(12 * MIB, &s0).unwrap(); // stays allocated: 30 MiB cannot fit
        let s1_id = backend.stream_id(&s1);
        alloc.add_oom_explainer(Arc::new(move |c: &mut OomCulprits| {
            c.name_work(work, "all_reduce");
        }));
        let oom = oom_of(alloc.allocate(30 * MIB, &s0));
        assert_eq!(oom.culprits.pending.len(), 1, "{:?}", oom.culprits);
        let p = &oom.culprits.pending[0];
        assert_eq!(
            (p.owner, p.stream, p.op, p.bytes, p.blocks),
            (UseOwner::Work(work), s1_id, Some("all_reduce"), 20 * MIB, 1)
        );
        let msg = oom.to_string();
        assert!(
            msg.contains(
                "pending: 20.00 MiB (1 blocks) pending behind work#4242 (all_reduce) on stream#"
            ),
            "{msg}"
        );
        assert!(msg.contains("wait() on the work earlier"), "{msg}");
        // The chain synchronized s1: the pending block was reclaimed, and the allocator
        // stays consistent (the 28 MiB left on the device are served).
        assert!(backend.is_idle(&s1));
        let fits = alloc.allocate(28 * MIB, &s0).unwrap();
        assert_eq!(fits.size(), 28 * MIB);
        drop(id);
    });
}

#[test]
fn user_record_stream_is_named_as_such_and_never_waited_shelves_are_listed() {
    within(20, || {
        let (backend, alloc, [s0, _, s2]) = setup_with(40 * MIB, "");
        let t = alloc.allocate(20 * MIB, &s0).unwrap();
        let held = alloc.allocate(12 * MIB, &s0).unwrap();
        alloc.record_stream(&t, &s2);
        backend.enqueue_work(&s2).unwrap();
        drop(t);
        alloc.add_oom_explainer(Arc::new(|c: &mut OomCulprits| {
            c.shelved.push(ShelfHold {
                work: WorkId(7),
                op: "all_gather",
                bytes: 3 * MIB,
                storages: 2,
            });
        }));
        let oom = oom_of(alloc.allocate(30 * MIB, &s0));
        drop(held);
        let p = &oom.culprits.pending[0];
        assert_eq!(
            (p.owner, p.stream, p.op),
            (UseOwner::User, backend.stream_id(&s2), None)
        );
        let msg = oom.to_string();
        assert!(
            msg.contains("pending behind record_stream uses of stream#"),
            "{msg}"
        );
        assert!(
            msg.contains(
                "held on shelves: 3.00 MiB (2 storages) on the shelf of work#7 (all_gather), never waited"
            ),
            "{msg}"
        );
    });
}

#[test]
fn fragmented_cache_is_split_per_pool() {
    within(20, || {
        let (_backend, alloc, [s0, ..]) = setup_with(24 * MIB, "");
        // One 20 MiB segment cut into 4 + 4 + 4 + 8; freeing the first and third leaves
        // 8 MiB cached in two 4 MiB crumbs.
        let a = alloc.allocate(20 * MIB, &s0).unwrap();
        drop(a);
        let parts: Vec<_> = [4, 4, 4, 8]
            .iter()
            .map(|m| alloc.allocate(m * MIB, &s0).unwrap())
            .collect();
        let mut parts = parts.into_iter();
        let (p0, p1, p2, p3) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        drop(p0);
        drop(p2);
        let oom = oom_of(alloc.allocate(6 * MIB, &s0));
        assert!(oom.culprits.is_empty(), "{:?}", oom.culprits);
        let msg = oom.to_string();
        assert!(
            msg.contains(
                "cached but fragmented: 0 bytes in the small pool, 4.00 MiB in the large pool"
            ),
            "{msg}"
        );
        drop((p1, p3));
    });
}

#[test]
fn no_culprit_section_when_memory_is_simply_allocated() {
    within(20, || {
        let (_backend, alloc, [s0, ..]) = setup_with(16 * MIB, "");
        let held = alloc.allocate(12 * MIB, &s0).unwrap();
        let oom = oom_of(alloc.allocate(12 * MIB, &s0));
        assert!(!oom.to_string().contains("Unusable memory"), "{oom}");
        drop(held);
    });
}
