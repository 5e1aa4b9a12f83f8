//! Issue 17 item 3: race reports that blame the program's own missing `record_stream` /
//! `wait_stream` say so, with the fix in words, instead of blaming the allocator. Real
//! allocator hand-outs over the mock's race detector, with the allocator's use ledger.

use std::sync::Arc;

use memreuse::allocator::{AllocatorConfig, CachingAllocator};
use memreuse::mock::{MockConfig, MockDevice};
use memreuse::race::{RaceAdvice, UseLookup, advise};
use memreuse::{Backend, RaceKind};

fn setup() -> (Arc<MockDevice>, Arc<CachingAllocator<MockDevice>>) {
    let dev = Arc::new(MockDevice::new(MockConfig::with_capacity(64 << 20)).expect("device"));
    let alloc = CachingAllocator::new(Arc::clone(&dev), AllocatorConfig::default());
    alloc.enable_use_ledger(1024);
    (dev, alloc)
}

#[test]
fn a_missing_record_stream_is_the_programs_bug_with_the_fix() {
    let (dev, alloc) = setup();
    let compute = dev.default_stream();
    let side = dev.create_stream().unwrap();
    let x = alloc.allocate(4096, &compute).unwrap();
    let x_id = x.allocation_id();
    dev.set_op_label("op 3");
    dev.memset_zero(x.ptr(), 4096, &side).unwrap();
    // Freed with no record_stream(x, side): the allocator reuses the block on compute.
    drop(x);
    let y = alloc.allocate(4096, &compute).unwrap();
    dev.set_op_label("op 4");
    dev.memset_zero(y.ptr(), 4096, &compute).unwrap();
    let reports = dev.race_reports().unwrap();
    assert_eq!(reports.len(), 1, "{reports:#?}");
    assert_eq!(reports[0].kind, RaceKind::Reuse);
    let ledger = alloc.use_ledger().unwrap();
    let advice = advise(&reports[0], &ledger);
    assert_eq!(
        advice,
        RaceAdvice::MissingRecordStream {
            allocation: x_id,
            side: dev.stream_id(&side),
            side_op: "memset_zero [op 3]".to_owned(),
        }
    );
    assert!(
        advice.to_string().contains(&format!(
            "add record_stream({x_id}, {}) before the free of {x_id}",
            dev.stream_id(&side)
        )),
        "{advice}"
    );
    drop(y);
    dev.synchronize_device().unwrap();
}

#[test]
fn with_record_stream_there_is_no_race_and_the_ledger_knows_the_use() {
    let (dev, alloc) = setup();
    let compute = dev.default_stream();
    let side = dev.create_stream().unwrap();
    let x = alloc.allocate(4096, &compute).unwrap();
    let x_id = x.allocation_id();
    dev.memset_zero(x.ptr(), 4096, &side).unwrap();
    alloc.record_stream(&x, &side);
    drop(x);
    let y = alloc.allocate(4096, &compute).unwrap();
    dev.memset_zero(y.ptr(), 4096, &compute).unwrap();
    assert!(dev.race_reports().unwrap().is_empty());
    let ledger = alloc.use_ledger().unwrap();
    assert_eq!(
        ledger.had_recorded_use(x_id, dev.stream_id(&side)),
        Some(true)
    );
    drop(y);
    dev.synchronize_device().unwrap();
}

#[test]
fn a_missing_wait_stream_names_which_stream_must_wait() {
    let (dev, alloc) = setup();
    let compute = dev.default_stream();
    let side = dev.create_stream().unwrap();
    let x = alloc.allocate(4096, &compute).unwrap();
    dev.set_op_label("op 7");
    dev.memset_zero(x.ptr(), 4096, &side).unwrap();
    dev.set_op_label("op 8");
    dev.memset_zero(x.ptr(), 4096, &compute).unwrap();
    let reports = dev.race_reports().unwrap();
    assert_eq!(reports.len(), 1, "{reports:#?}");
    let advice = advise(&reports[0], &alloc.use_ledger().unwrap());
    assert_eq!(
        advice.to_string(),
        format!(
            "program bug (missing wait_stream): {} must wait_stream({}) before `memset_zero [op 8]`",
            dev.stream_id(&compute),
            dev.stream_id(&side)
        )
    );
    drop(x);
    dev.synchronize_device().unwrap();
}
