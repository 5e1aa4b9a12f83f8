//! The contract every [`Communicator`](crate::comm::Communicator) must keep, as checks a port runs on N ranks of its
//! communicator, next to the device kit ([`super::contract`]).
//!
//! [`check_communicator`] opens fresh worlds through the port's opener (one per check
//! that may break its communicators), runs each rank on its own thread, and checks:
//! - `collective_order`: collectives are matched in issue order per communicator
//!   (an `all_reduce` then a `broadcast` give each its own result on every rank);
//! - `subgroups`: `new_group` gives members a communicator of the right rank and size whose
//!   collectives span only the members, and non-members `None`;
//! - `p2p_pairing`: sends and receives are matched per (sender, receiver) in issue order
//!   (two messages to the next rank arrive in order), issued even ranks first so that a
//!   communicator without batches cannot deadlock;
//! - `group_batches`: a ring of sends and receives issued as one `group_start`/`group_end`
//!   batch per rank completes (members of a batch do not block each other); skipped, and
//!   the ordered check above is what remains, when the communicator declares no grouping;
//! - `unequal_sizes_rejected`: an `all_reduce` whose ranks disagree on the size ends in an
//!   error on some rank (at enqueue or at the wait), not in success and not in a hang;
//! - `missing_rank_times_out`: a collective one rank never issues ends in an error within
//!   the world's timeout, not in a hang;
//! - `abort_unblocks`: `abort` makes a waiting rank's wait return an error, and
//!   `async_error` report it, while the peers never arrive;
//! - `element_types_move` and `element_types_reduce`: every element type through every
//!   operation, byte for byte, and every reduction the communicator says it does
//!   ([`Communicator::reduces`](crate::comm::Communicator::reduces)) equal to the reference
//!   arithmetic ([`combine_into`](crate::comm::combine_into) in rank order), every other one
//!   refused at enqueue on every rank.
//!
//! A check that goes wrong never hangs the kit: waits run on helper threads and are given
//! up after `options.timeout` times [`HANG_FACTOR`] (the communicators are then aborted).

// Values are small integers, exact in f32: results must match bit for bit.
#![allow(clippy::float_cmp)]

use std::sync::mpsc;
use std::time::Duration;

pub use super::comm_contract_ranks::Rank;
use super::comm_contract_ranks::{CheckResult, comm, free_all, per_rank};
use super::comm_contract_types::{element_types_move, element_types_reduce};
use super::contract::{ContractReport, ContractViolation};
use crate::backend::Backend;
use crate::comm::{DType, ReduceOp};
use crate::error::BackendError;
use crate::ids::DevicePtr;

/// A wait longer than `options.timeout` times this counts as a hang.
pub const HANG_FACTOR: u32 = 4;

/// Opens a fresh world of `world_size` ranks whose communication ops give up on a missing
/// peer after `timeout`.
pub type Opener<'a, B> = dyn Fn(usize, Duration) -> Result<Vec<Rank<B>>, BackendError> + Sync + 'a;

/// What [`check_communicator`] may assume.
#[derive(Clone, Debug)]
pub struct CommContractOptions {
    /// Ranks per world (at least 2; 4 exercises sub-groups best).
    pub world_size: usize,
    /// The timeout the opener gives the world (tests keep it at 2 s or less).
    pub timeout: Duration,
    /// The communicator supports `group_start`/`group_end` batches.
    pub grouping: bool,
}

impl Default for CommContractOptions {
    fn default() -> Self {
        CommContractOptions {
            world_size: 4,
            timeout: Duration::from_secs(2),
            grouping: true,
        }
    }
}

const N: usize = 64;
const BYTES: u64 = (N * 4) as u64;

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn upload<B: Backend>(b: &B, values: &[f32]) -> Result<DevicePtr, String> {
    let p = b
        .malloc((values.len() * 4) as u64)
        .map_err(|e| format!("malloc: {e}"))?;
    b.copy_host_to_device(p, &f32_bytes(values), &b.default_stream())
        .map_err(|e| format!("copy_host_to_device: {e}"))?;
    Ok(p)
}

fn download<B: Backend>(b: &B, p: DevicePtr, len: usize) -> Result<Vec<f32>, String> {
    let mut out = vec![0u8; len * 4];
    b.copy_device_to_host(&mut out, p, &b.default_stream())
        .map_err(|e| format!("copy_device_to_host: {e}"))?;
    Ok(out
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// Runs every check and reports each one. `open` is called once per check.
pub fn check_communicator<B: Backend>(
    open: &Opener<'_, B>,
    options: &CommContractOptions,
) -> ContractReport {
    let mut report = ContractReport::default();
    let n = options.world_size;
    let limit = options.timeout * HANG_FACTOR;
    let mut run = |name: &'static str,
                   skip: Option<&'static str>,
                   check: &dyn Fn(&[Rank<B>]) -> CheckResult| {
        if let Some(why) = skip {
            report.skipped.push((name, why));
            return;
        }
        let outcome = match open(n, options.timeout) {
            Ok(ranks) if ranks.len() == n => {
                let out = check(&ranks);
                // Nothing of the check may still run when its buffers' device goes.
                for (dev, _) in &ranks {
                    let _ = dev.synchronize_device();
                }
                out
            }
            Ok(ranks) => Err(format!(
                "the opener returned {} ranks, asked for {n}",
                ranks.len()
            )),
            Err(e) => Err(format!("could not open a world of {n}: {e}")),
        };
        match outcome {
            Ok(()) => report.passed.push(name),
            Err(what) => report
                .violations
                .push(ContractViolation { check: name, what }),
        }
    };
    if n < 2 {
        report.violations.push(ContractViolation {
            check: "world_size",
            what: format!("the kit needs at least 2 ranks, got {n}"),
        });
        return report;
    }
    let no_grouping =
        (!options.grouping).then_some("grouping = false (ordered p2p checked instead)");
    run("collective_order", None, &|ranks| {
        collective_order(ranks, limit)
    });
    run("subgroups", None, &|ranks| subgroups(ranks, limit));
    run("p2p_pairing", None, &|ranks| p2p_pairing(ranks, limit));
    run("group_batches", no_grouping, &|ranks| {
        group_batches(ranks, limit)
    });
    run("unequal_sizes_rejected", None, &|ranks| {
        unequal_sizes(ranks, limit)
    });
    run("missing_rank_times_out", None, &|ranks| {
        missing_rank(ranks, limit)
    });
    run("abort_unblocks", None, &|ranks| {
        abort_unblocks(ranks, limit)
    });
    run("element_types_move", None, &|ranks| {
        element_types_move(ranks, limit)
    });
    run("element_types_reduce", None, &|ranks| {
        element_types_reduce(ranks, limit)
    });
    report
}

fn collective_order<B: Backend>(ranks: &[Rank<B>], limit: Duration) -> CheckResult {
    let n = ranks.len();
    let sum: f32 = (1..=n).map(|r| r as f32).sum();
    per_rank(ranks, limit, &|r, dev, c| {
        let x = upload(dev, &[(r + 1) as f32; N])?;
        let y = upload(dev, &[100.0 + r as f32; N])?;
        let s = dev.default_stream();
        comm(
            "all_reduce",
            c.all_reduce(x, N, DType::F32, ReduceOp::Sum, &s),
        )?;
        comm("broadcast", c.broadcast(y, N, DType::F32, n - 1, &s))?;
        let (gx, gy) = (download(dev, x, N)?, download(dev, y, N)?);
        let root = 100.0 + (n - 1) as f32;
        if gx.iter().any(|&v| v != sum) || gy.iter().any(|&v| v != root) {
            return Err(format!(
                "all_reduce gave {} (want {sum}), the broadcast after it {} (want {root}): collectives were not matched in issue order",
                gx[0], gy[0]
            ));
        }
        free_all(dev, &[x, y])
    })
}

fn subgroups<B: Backend>(ranks: &[Rank<B>], limit: Duration) -> CheckResult {
    let n = ranks.len();
    // Members in reverse order: group rank i is world rank members[i].
    let members: Vec<usize> = (0..n).rev().filter(|r| r % 2 == 0 || n == 2).collect();
    let sum: f32 = members.iter().map(|&r| (r + 1) as f32).sum();
    per_rank(ranks, limit, &|r, dev, c| {
        let sub = comm("new_group", c.new_group(&members))?;
        let Some(position) = members.iter().position(|&m| m == r) else {
            return match sub {
                None => Ok(()),
                Some(_) => Err("new_group gave a non-member a communicator".into()),
            };
        };
        let Some(sub) = sub else {
            return Err("new_group gave a member no communicator".into());
        };
        if sub.rank() != position || sub.size() != members.len() {
            return Err(format!(
                "sub-group member has rank {} of {}; want {position} of {}",
                sub.rank(),
                sub.size(),
                members.len()
            ));
        }
        let x = upload(dev, &[(r + 1) as f32; N])?;
        comm(
            "sub-group all_reduce",
            sub.all_reduce(x, N, DType::F32, ReduceOp::Sum, &dev.default_stream()),
        )?;
        let got = download(dev, x, N)?;
        if got.iter().any(|&v| v != sum) {
            return Err(format!(
                "a sub-group all_reduce gave {} (want {sum}, the sum over its members only)",
                got[0]
            ));
        }
        free_all(dev, &[x])
    })
}

/// Two messages from every rank to the next, received in order; even ranks send first.
fn p2p_pairing<B: Backend>(ranks: &[Rank<B>], limit: Duration) -> CheckResult {
    let n = ranks.len();
    per_rank(ranks, limit, &|r, dev, c| {
        let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
        let first = upload(dev, &[(10 * r + 1) as f32; N])?;
        let second = upload(dev, &[(10 * r + 2) as f32; N])?;
        let into = upload(dev, &[0.0; 2 * N])?;
        let s = dev.default_stream();
        let send = || -> CheckResult {
            comm("send", c.send(first, N, DType::F32, next, &s))?;
            comm("send", c.send(second, N, DType::F32, next, &s))
        };
        let recv = || -> CheckResult {
            comm("recv", c.recv(into, N, DType::F32, prev, &s))?;
            comm("recv", c.recv(into.offset(BYTES), N, DType::F32, prev, &s))
        };
        if r % 2 == 0 {
            send()?;
            recv()?;
        } else {
            recv()?;
            send()?;
        }
        let got = download(dev, into, 2 * N)?;
        let want = [(10 * prev + 1) as f32, (10 * prev + 2) as f32];
        if got[0] != want[0] || got[N] != want[1] {
            return Err(format!(
                "received {} then {} from rank {prev}; want {} then {}: sends were not paired per (sender, receiver) in order",
                got[0], got[N], want[0], want[1]
            ));
        }
        free_all(dev, &[first, second, into])
    })
}

/// A ring where every rank sends before it receives, as one batch: only batching keeps it
/// from deadlocking on a communicator whose sends wait for their receivers.
fn group_batches<B: Backend>(ranks: &[Rank<B>], limit: Duration) -> CheckResult {
    let n = ranks.len();
    per_rank(ranks, limit, &|r, dev, c| {
        let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
        let out = upload(dev, &[(r + 1) as f32; N])?;
        let into = upload(dev, &[0.0; N])?;
        let s = dev.default_stream();
        comm("group_start", c.group_start())?;
        comm("send", c.send(out, N, DType::F32, next, &s))?;
        comm("recv", c.recv(into, N, DType::F32, prev, &s))?;
        comm("group_end", c.group_end())?;
        let got = download(dev, into, N)?;
        if got[0] != (prev + 1) as f32 {
            return Err(format!(
                "a batched ring delivered {} from rank {prev}; want {}",
                got[0],
                prev + 1
            ));
        }
        free_all(dev, &[out, into])
    })
}

/// Waits for `stream`'s work on a helper thread; `None` when it did not return in `limit`.
fn wait_stream<B: Backend>(dev: &B, limit: Duration) -> Option<Result<(), BackendError>> {
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let _ = tx.send(dev.synchronize_stream(&dev.default_stream()));
        });
        rx.recv_timeout(limit).ok()
    })
}

fn unequal_sizes<B: Backend>(ranks: &[Rank<B>], limit: Duration) -> CheckResult {
    let (tx, rx) = mpsc::channel();
    let out = per_rank(ranks, limit, &|r, dev, c| {
        let count = if r == 0 { 2 * N } else { N };
        let x = upload(dev, &vec![1.0; count])?;
        let enq = c.all_reduce(x, count, DType::F32, ReduceOp::Sum, &dev.default_stream());
        let failed = enq.is_err()
            || match wait_stream(dev, limit) {
                Some(r) => r.is_err(),
                None => return Err("the wait for a size-mismatched all_reduce hung".into()),
            }
            || c.async_error().is_some();
        let _ = tx.send(failed);
        Ok(())
    });
    drop(tx);
    out?;
    if rx.iter().any(|f| f) {
        Ok(())
    } else {
        Err("an all_reduce whose ranks disagree on the size succeeded on every rank".into())
    }
}

fn missing_rank<B: Backend>(ranks: &[Rank<B>], limit: Duration) -> CheckResult {
    let n = ranks.len();
    per_rank(ranks, limit, &|r, dev, c| {
        if r == n - 1 {
            return Ok(()); // never arrives
        }
        let x = upload(dev, &[1.0; N])?;
        comm(
            "all_reduce",
            c.all_reduce(x, N, DType::F32, ReduceOp::Sum, &dev.default_stream()),
        )?;
        match wait_stream(dev, limit) {
            None => Err("a collective with a rank that never arrives hung".into()),
            Some(Ok(())) if c.async_error().is_none() => {
                Err("a collective with a rank that never arrives completed without an error".into())
            }
            Some(_) => Ok(()),
        }
    })
}

fn abort_unblocks<B: Backend>(ranks: &[Rank<B>], limit: Duration) -> CheckResult {
    let (dev, c) = &ranks[0];
    let x = upload(dev, &[1.0; N])?;
    comm(
        "all_reduce",
        c.all_reduce(x, N, DType::F32, ReduceOp::Sum, &dev.default_stream()),
    )?;
    if c.async_error().is_some() {
        return Err("async_error reports an error before anything failed".into());
    }
    c.abort();
    let waited = wait_stream(dev, limit);
    let after = c.async_error();
    match (waited, after) {
        (None, _) => Err("after abort, a wait for a collective the peers never issue hung".into()),
        (Some(Ok(())), _) => {
            Err("after abort, a collective the peers never issued completed successfully".into())
        }
        (Some(Err(_)), None) => Err("after abort, async_error reports nothing".into()),
        (Some(Err(_)), Some(_)) => Ok(()),
    }
}
