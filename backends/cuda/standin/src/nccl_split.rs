//! `ncclCommSplit` (not exported by the `old-nccl` profile): a collective over the parent
//! communicator. Every parent rank calls it (the `k`-th call of each rank forms the `k`-th
//! split); ranks of one color form a child ordered by (key, parent rank); a rank passing
//! `NCCL_SPLIT_NOCOLOR` gets a NULL communicator; another negative color is
//! `ncclInvalidArgument`; parent ranks that never call make the others fail after the
//! timeout with `ncclSystemError` (NCCL would wait forever). A NULL config inherits the
//! parent's blocking mode.

#![allow(non_snake_case, clippy::missing_safety_doc)]
#![cfg_attr(feature = "old-nccl", allow(dead_code))]

use std::ffi::c_int;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::codes::{NCCL_INTERNAL_ERROR, NCCL_INVALID_ARGUMENT, NCCL_SYSTEM_ERROR};
use crate::nccl::{
    CONFIG_MAGIC, ConfigHead, Member, SPLIT_NOCOLOR, Shared, Split, insert_comm, member, new_shared,
};
use crate::state::{guard, timeout};

/// Not exported by the `old-nccl` profile (NCCL < 2.18).
#[cfg_attr(not(feature = "old-nccl"), unsafe(no_mangle))]
unsafe extern "C" fn ncclCommSplit(
    comm: usize,
    color: c_int,
    key: c_int,
    newcomm: *mut usize,
    config: *const ConfigHead,
) -> u32 {
    guard("ncclCommSplit", NCCL_INTERNAL_ERROR, || {
        let parent = member(comm)?;
        if newcomm.is_null() || (color < 0 && color != SPLIT_NOCOLOR) {
            return Err(NCCL_INVALID_ARGUMENT);
        }
        let ps = Arc::clone(parent.ready()?);
        let nonblocking = if config.is_null() {
            parent.nonblocking
        } else {
            // SAFETY: not null (checked), a valid config (contract).
            let c = unsafe { &*config };
            if c.magic != CONFIG_MAGIC {
                return Err(NCCL_INVALID_ARGUMENT);
            }
            c.blocking == 0
        };
        let seq = parent.splits_issued.fetch_add(1, Ordering::AcqRel);
        let n = parent.nranks;
        let deadline = Instant::now() + timeout();
        let mut splits = ps.splits.lock();
        let s = splits.entry(seq).or_insert_with(|| Split {
            arrived: vec![None; n],
            results: None,
            taken: 0,
        });
        s.arrived[parent.rank] = Some((color, key));
        if s.arrived.iter().all(Option::is_some) {
            let mut results = vec![None; n];
            let mut colors: Vec<c_int> = s.arrived.iter().flatten().map(|(c, _)| *c).collect();
            colors.sort_unstable();
            colors.dedup();
            for c in colors.into_iter().filter(|&c| c != SPLIT_NOCOLOR) {
                let mut ranks: Vec<(c_int, usize)> = s
                    .arrived
                    .iter()
                    .enumerate()
                    .filter_map(|(r, a)| a.filter(|(ac, _)| *ac == c).map(|(_, k)| (k, r)))
                    .collect();
                ranks.sort_unstable();
                let devices = ranks.iter().map(|&(_, r)| ps.devices[r].clone()).collect();
                let child = new_shared(devices)?;
                for (new_rank, &(_, r)) in ranks.iter().enumerate() {
                    results[r] = Some((Arc::clone(&child), new_rank));
                }
            }
            s.results = Some(results);
            ps.splits_cv.notify_all();
        }
        let mine = loop {
            let s = splits.get_mut(&seq).ok_or(NCCL_INTERNAL_ERROR)?;
            if let Some(results) = &s.results {
                let mine = results[parent.rank].clone();
                s.taken += 1;
                if s.taken == n {
                    splits.remove(&seq);
                }
                break mine;
            }
            if ps.splits_cv.wait_until(&mut splits, deadline).timed_out() {
                return Err(NCCL_SYSTEM_ERROR);
            }
        };
        drop(splits);
        let handle = match mine {
            None => 0,
            Some((child, rank)) => {
                let size = child.devices.len();
                let index = parent_device_index(&parent, &child, rank);
                let m = Member::new(rank, size, index, nonblocking);
                let _ = m.shared.set(child);
                insert_comm(Arc::new(m))
            }
        };
        // SAFETY: not null (checked), valid for a write (contract).
        unsafe { newcomm.write(handle) };
        Ok(())
    })
}

/// The device index of a split child's member: the parent member's (same device).
fn parent_device_index(parent: &Member, _child: &Shared, _rank: usize) -> usize {
    parent.device_index
}
