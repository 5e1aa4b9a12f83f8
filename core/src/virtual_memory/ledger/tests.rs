use super::*;
use crate::virtual_memory::check_aligned;

const G: u64 = 2 << 20;

fn reason(r: Result<impl std::fmt::Debug, BackendError>) -> String {
    match r {
        Err(BackendError::InvalidArgument { reason, .. }) => reason,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn every_misuse_is_refused_naming_its_rule_and_changes_nothing() {
    let mut b = VmLedger::new("cuda");
    let base = DevicePtr(0x7f00_0000_0000);
    b.record_reserve(base, 4 * G);
    b.record_create(PhysicalHandle(11), 2 * G);
    b.record_create(PhysicalHandle(12), G);
    assert!(reason(check_aligned("cuda", "vm_reserve", "size", G + 1, G)).contains("granularity"));
    assert!(reason(check_aligned("cuda", "vm_reserve", "size", 0, G)).contains("non-zero"));
    assert_eq!(b.check_map(base, PhysicalHandle(11)).unwrap(), 2 * G);
    b.record_map(base, PhysicalHandle(11), 2 * G);
    for (rule, r) in [
        (
            "already mapped",
            b.check_map(base.offset(2 * G), PhysicalHandle(11)),
        ),
        (
            "overlap a mapping",
            b.check_map(base.offset(G), PhysicalHandle(12)),
        ),
        (
            "not inside one range",
            b.check_map(base.offset(4 * G), PhysicalHandle(12)),
        ),
        (
            "not a live handle",
            b.check_map(base.offset(2 * G), PhysicalHandle(99)),
        ),
    ] {
        assert!(reason(r).contains(rule), "{rule}");
    }
    assert!(reason(b.check_unmap(base, G)).contains("unmap whole mappings"));
    assert!(reason(b.check_unmap(base.offset(2 * G), G)).contains("not the address"));
    assert!(reason(b.check_release_physical(PhysicalHandle(11))).contains("still mapped"));
    assert!(reason(b.check_release_physical(PhysicalHandle(99))).contains("not a live"));
    assert!(reason(b.check_release(base)).contains("still has a mapping"));
    assert!(reason(b.check_release(base.offset(G))).contains("not the base"));
    // The refusals changed nothing, and they name the ledger's backend.
    assert_eq!(b.mappings().collect::<Vec<_>>(), [(base, 2 * G)]);
    assert_eq!(b.ranges().collect::<Vec<_>>(), [(base, 4 * G)]);
    assert_eq!(b.handles().count(), 2);
    match b.check_unmap(base, G) {
        Err(BackendError::InvalidArgument { backend, call, .. }) => {
            assert_eq!((backend.as_str(), call), ("cuda", "vm_unmap"));
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    // The proper order still works afterwards.
    assert_eq!(
        b.check_map(base.offset(2 * G), PhysicalHandle(12)).unwrap(),
        G
    );
    b.record_map(base.offset(2 * G), PhysicalHandle(12), G);
    b.check_unmap(base, 2 * G).unwrap();
    b.record_unmap(base);
    b.check_release_physical(PhysicalHandle(11)).unwrap();
    b.record_release_physical(PhysicalHandle(11));
    assert!(reason(b.check_release(base)).contains("still has a mapping"));
    b.record_unmap(base.offset(2 * G));
    assert_eq!(b.check_release(base).unwrap(), 4 * G);
    b.record_release(base);
    assert!(reason(b.check_release(base)).contains("not the base"));
    b.record_release_physical(PhysicalHandle(12));
    assert!(b.is_empty());
}

#[test]
fn an_access_may_span_adjacent_mappings_but_not_a_hole() {
    let mut b = VmLedger::new("ascend");
    let base = 0x1000_0000;
    b.record_reserve(DevicePtr(base), 8 * G);
    for (h, page) in [(1, 0), (2, 1), (3, 3)] {
        b.record_create(PhysicalHandle(h), G);
        b.record_map(DevicePtr(base + page * G), PhysicalHandle(h), G);
    }
    assert!(
        b.covers(base + G - 64, base + G + 64),
        "two adjacent mappings"
    );
    assert!(b.covers(base, base + 2 * G));
    assert!(
        !b.covers(base + 2 * G - 64, base + 2 * G + 64),
        "page 2 is a hole"
    );
    assert!(!b.covers(base + G, base + 4 * G));
    assert!(b.covers(base + 3 * G, base + 4 * G));
    assert!(
        !b.covers(base + 4 * G - 1, base + 4 * G + 1),
        "past the end"
    );
    // Empty ranges: inside a mapping or at its end, yes; in a hole or outside, no
    // (before, an empty range was covered at any address).
    assert!(b.covers(base + G, base + G) && b.covers(base + 2 * G, base + 2 * G));
    assert!(
        !b.covers(base + 2 * G + 64, base + 2 * G + 64),
        "in the hole"
    );
    assert!(
        !b.covers(base + 64 * G, base + 64 * G),
        "far past every mapping"
    );
    assert!(!b.covers(64, 64), "below every mapping");
    let mut held = b.take_all();
    held.handles.sort();
    assert_eq!(
        held,
        VmHeld {
            mappings: vec![
                (DevicePtr(base), G),
                (DevicePtr(base + G), G),
                (DevicePtr(base + 3 * G), G)
            ],
            handles: vec![PhysicalHandle(1), PhysicalHandle(2), PhysicalHandle(3)],
            ranges: vec![(DevicePtr(base), 8 * G)],
        }
    );
    assert!(b.is_empty());
    assert!(!b.covers(base, base + 1), "nothing left");
}
