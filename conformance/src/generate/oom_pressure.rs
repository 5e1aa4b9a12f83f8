//! `oom-pressure`: sized so that only reclaimed memory avoids out-of-memory.
//!
//! A long-lived tensor of `big` elements stays allocated; each layer allocates another
//! `big` tensor, all-reduces it asynchronously, frees it before the wait and waits. The
//! device (`device_memory`, default 2.5 x `big` bytes) fits two `big` tensors but not
//! three, so the next layer's allocation succeeds only once the freed tensor's memory is
//! released (a drained mode-2 shelf, completed stream-use events). A final allocation of
//! 4/3 x `big` fits only once the cached `big` segment is released to the device. Tensors
//! are at least 12 MiB, multiples of 2 MiB, so PyTorch-style rounding adds nothing.

use super::ops::{all_reduce, alloc, check, copy_range, free, upload, wait, zero};
use super::{GenError, GenOptions, round_up, skeleton, world};
use crate::schedule::{DeclaredOom, Op, OpKind, ReduceOp, Schedule};

pub(super) const DESCRIPTION: &str =
    "OOM pressure: device fits only with drained shelves / released cache (uses device_memory)";

/// Elements of the small tensor through which big ones are checked.
const PROBE: u64 = 4096;
/// 2 MiB in f32 elements.
const SEGMENT_ELEMS: u64 = 1 << 19;

/// PyTorch's default large page of an expandable segment (`kLargeBuffer`).
const DEFAULT_PAGE: u64 = 20 << 20;

/// The declared outcome under 20 MiB expandable pages: `keep` and the next tensor share
/// one expandable segment whose mapped pages are whole 20 MiB ones, so the device must
/// hold their sum rounded up to a page. At the default sizes (two 12 MiB tensors on a
/// 30 MiB device) that is 40 MiB: out of memory, as in PyTorch.
fn declared_oom(big_bytes: u64, last_bytes: u64, device: u64) -> Vec<DeclaredOom> {
    let paged = |bytes: u64| bytes.div_ceil(DEFAULT_PAGE) * DEFAULT_PAGE;
    let needs = paged(2 * big_bytes).max(paged(big_bytes + last_bytes));
    if needs <= device {
        return Vec::new();
    }
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    vec![DeclaredOom {
        alloc_conf: "expandable_segments:True,expandable_segments_page_size_mb:20".to_owned(),
        because: format!(
            "two {:.1} MiB tensors in one expandable segment of 20 MiB pages map {:.1} MiB, \
             more than the {:.1} MiB device",
            mib(big_bytes),
            mib(needs),
            mib(device)
        ),
    }]
}

pub(super) fn generate(opts: &GenOptions) -> Result<Schedule, GenError> {
    let ranks = world(opts, "oom-pressure", 2, |_| true, "any number of ranks")?;
    let big = round_up(opts.elems.max(6 * SEGMENT_ELEMS), SEGMENT_ELEMS);
    if big > crate::schedule::MAX_ELEMS / 2 {
        return Err(GenError::Unsupported {
            preset: "oom-pressure",
            reason: format!("elems {big} too large"),
        });
    }
    let last = round_up(big + big / 3, SEGMENT_ELEMS);
    let mut sched = skeleton("oom-pressure", DESCRIPTION, ranks, opts);
    let device = opts.device_memory.unwrap_or(big * 4 * 5 / 2);
    sched.device_memory = Some(device);
    sched.expect_out_of_memory = declared_oom(big * 4, last * 4, device);
    sched.setup = vec![alloc("keep", big), upload("keep", opts.seed)];
    let body = &mut sched.body;
    // Big tensors are zeroed rather than uploaded and only small probes are checked: the
    // point is memory pressure, and this keeps the reference interpreter fast.
    for l in 0..opts.layers {
        let (t, w) = (format!("b{l}"), format!("w{l}"));
        body.extend([
            alloc(&t, big),
            zero(&t),
            all_reduce(&t, "world", ReduceOp::Sum, Some(&w)),
            free(&t),
            wait(&w),
        ]);
    }
    body.extend([
        alloc("last", last),
        zero("last"),
        copy_range("keep", 0, "last", last - PROBE, PROBE),
        alloc("probe", PROBE),
        copy_range("last", last - PROBE, "probe", 0, PROBE),
        check("probe"),
        free("probe"),
        free("last"),
        Op::all(OpKind::EmptyCache),
    ]);
    sched.teardown = vec![
        alloc("probe", PROBE),
        copy_range("keep", big - PROBE, "probe", 0, PROBE),
        check("probe"),
        free("probe"),
        free("keep"),
    ];
    Ok(sched)
}
