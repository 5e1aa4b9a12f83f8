//! Out-of-memory messages that name the rounding (issue 30 item 3): when a request needed
//! more device memory than its own size and that is why it failed, the message says how
//! much, why, which setting changes it, and points to `whatif`.

mod common;

use common::{MIB, setup_with};
use memreuse_core::AllocError;
use memreuse_core::allocator::RoundingCause;

fn oom_of(r: Result<impl Sized, AllocError>) -> Box<memreuse_core::OutOfMemory> {
    match r {
        Err(AllocError::OutOfMemory(oom)) => oom,
        Err(e) => panic!("expected out of memory, got {e}"),
        Ok(_) => panic!("expected out of memory, got memory"),
    }
}

#[test]
fn a_3_mib_request_that_needs_a_20_mib_segment_says_so() {
    let (_b, alloc, [s0, _, _]) = setup_with(4 * MIB, "");
    let oom = oom_of(alloc.allocate(3 * MIB, &s0));
    let r = oom.rounding.as_ref().expect("the 20 MiB segment is why");
    assert_eq!(r.needed, 20 * MIB);
    assert_eq!(
        r.causes,
        [RoundingCause::LargeSegment { segment: 20 * MIB }]
    );
    let msg = oom.to_string();
    assert!(
        msg.contains("This request of 3.00 MiB failed because it needed 20.00 MiB from the device: a request between 1 and 10 MiB is served from a 20.00 MiB large-pool segment"),
        "{msg}"
    );
    assert!(msg.contains("expandable_segments_page_size_mb:2"), "{msg}");
    assert!(msg.contains("memreuse-conformance whatif"), "{msg}");
}

#[test]
fn expandable_pages_are_named_with_their_size_and_setting() {
    // oom-pressure's case: two 12 MiB tensors in 20 MiB pages on a 30 MiB device.
    let (_b, alloc, [s0, _, _]) = setup_with(30 * MIB, "expandable_segments:True");
    let first = alloc.allocate(12 * MIB, &s0).unwrap();
    let oom = oom_of(alloc.allocate(12 * MIB, &s0));
    let r = oom.rounding.as_ref().expect("the 20 MiB page is why");
    assert_eq!(r.causes, [RoundingCause::ExpandablePage { page: 20 * MIB }]);
    let msg = oom.to_string();
    assert!(
        msg.contains("expandable segments map whole 20.00 MiB pages; a smaller expandable_segments_page_size_mb"),
        "{msg}"
    );
    drop(first);
    // With 2 MiB pages the same program fits: the setting the message names works.
    let (_b, alloc, [s0, _, _]) = setup_with(
        30 * MIB,
        "expandable_segments:True,expandable_segments_page_size_mb:2",
    );
    let _first = alloc.allocate(12 * MIB, &s0).unwrap();
    let _second = alloc.allocate(12 * MIB, &s0).unwrap();
}

#[test]
fn power_of_two_divisions_are_named() {
    let (_b, alloc, [s0, _, _]) = setup_with(40 * MIB, "roundup_power2_divisions:2");
    let oom = oom_of(alloc.allocate(36 * MIB, &s0));
    let r = oom.rounding.as_ref().expect("the 48 MiB block is why");
    assert_eq!(r.needed, 48 * MIB);
    assert_eq!(
        r.causes,
        [RoundingCause::PowerOfTwoDivisions {
            divisions: 2,
            block: 48 * MIB
        }]
    );
    assert!(
        oom.to_string().contains(
            "roundup_power2_divisions (2 for this size) rounded the block up to 48.00 MiB"
        ),
        "{oom}"
    );
}

#[test]
fn no_rounding_note_when_the_request_itself_does_not_fit() {
    let (_b, alloc, [s0, _, _]) = setup_with(4 * MIB, "");
    let oom = oom_of(alloc.allocate(5 * MIB, &s0));
    assert_eq!(oom.rounding, None);
    assert!(!oom.to_string().contains("whatif"), "{oom}");
}

#[test]
fn a_request_beyond_the_device_is_refused_at_once() {
    use memreuse_core::Backend;
    let (backend, alloc, [s0, s1, _]) = setup_with(1 << 30, "");
    // Something cached and something pending: the chain would release and synchronize.
    drop(alloc.allocate(30 * MIB, &s0).unwrap());
    let t = alloc.allocate(30 * MIB, &s0).unwrap();
    alloc.record_stream(&t, &s1);
    backend.enqueue_work(&s1).unwrap();
    drop(t);
    let before = alloc.stats();
    let oom = oom_of(alloc.allocate(2 << 30, &s0));
    let after = alloc.stats();
    assert_eq!(after.num_ooms, before.num_ooms + 1);
    assert_eq!(
        (
            after.num_sync_all_streams,
            after.num_device_free,
            after.num_alloc_retries
        ),
        (
            before.num_sync_all_streams,
            before.num_device_free,
            before.num_alloc_retries
        ),
        "refused before the chain: nothing synchronized, released or retried"
    );
    assert_eq!(oom.device_total, 1 << 30);
    assert!(!backend.is_idle(&s1));
    let _ = backend.stream_id(&s1);
}

#[test]
fn a_huge_request_on_an_unlimited_device_with_expandable_segments_is_refused_at_once() {
    let (backend, alloc, [s0, _, _]) = setup_with(u64::MAX, "expandable_segments:True");
    let oom = oom_of(alloc.allocate((1 << 63) - 1, &s0));
    assert_eq!(oom.requested, (1 << 63) - 1);
    assert_eq!(alloc.stats().num_device_map, 0, "no page was mapped");
    assert_eq!(backend.vm_calls(), (0, 0));
    // An ordinary request still works afterwards.
    assert_eq!(alloc.allocate(1, &s0).unwrap().size(), 512);
}
