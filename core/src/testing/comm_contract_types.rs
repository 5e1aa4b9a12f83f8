//! The per-type checks of the communicator contract: every element type moves through
//! every collective and point-to-point, and every reduction the communicator says it does
//! ([`Communicator::reduces`]) gives the reference arithmetic's bits.
//!
//! - `element_types_move`: broadcast, all_gather, all_to_all and a send/recv ring in each of
//!   the twelve [`DType`]s deliver the exact bytes sent (fp8 included: moving data needs no
//!   arithmetic);
//! - `element_types_reduce`: for each type and [`ReduceOp`] the communicator reduces, an
//!   `all_reduce` and (for sum) a `reduce_scatter` equal [`combine_into`] over the ranks in
//!   rank order (then [`finish_average`]); for each one it says it cannot do, `all_reduce`
//!   is refused when it is enqueued, on every rank, so nothing is left for peers to wait on.
//!
//! Values are small integers (-2..=2, or 1..=3 for unsigned types), exact in every type and
//! whose sums and products over up to 16 ranks stay exact, so a device that reduces in
//! another order gives the same bits too.

use std::time::Duration;

use super::comm_contract_ranks::{CheckResult, Rank, comm, free_all, per_rank};
use crate::backend::Backend;
use crate::comm::{Communicator, DType, ReduceOp, combine_into, finish_average, write_f64};
use crate::ids::DevicePtr;

/// Elements per rank (and per chunk of the chunked collectives).
const N: usize = 16;

/// The value of element `i` on rank `r` in `dtype`, as little-endian bytes.
fn element(dtype: DType, r: usize, i: usize) -> Vec<u8> {
    // Small integers: the conversion is exact.
    #[allow(clippy::cast_precision_loss)]
    let v = if dtype.is_unsigned_integer() {
        ((r + i) % 3 + 1) as f64
    } else {
        ((r + 2 * i) % 5) as f64 - 2.0
    };
    let mut out = vec![0u8; size(dtype)];
    write_f64(dtype, v, &mut out);
    out
}

fn size(dtype: DType) -> usize {
    // Element sizes are 1..=8 bytes.
    dtype.size_bytes() as usize
}

/// `count` elements of rank `r`'s pattern, starting at element `from`.
fn pattern(dtype: DType, r: usize, from: usize, count: usize) -> Vec<u8> {
    (from..from + count)
        .flat_map(|i| element(dtype, r, i))
        .collect()
}

fn upload<B: Backend>(b: &B, bytes: &[u8]) -> Result<DevicePtr, String> {
    let p = b
        .malloc(bytes.len() as u64)
        .map_err(|e| format!("malloc: {e}"))?;
    b.copy_host_to_device(p, bytes, &b.default_stream())
        .map_err(|e| format!("copy_host_to_device: {e}"))?;
    Ok(p)
}

fn download<B: Backend>(b: &B, p: DevicePtr, len: usize) -> Result<Vec<u8>, String> {
    let mut out = vec![0u8; len];
    b.copy_device_to_host(&mut out, p, &b.default_stream())
        .map_err(|e| format!("copy_device_to_host: {e}"))?;
    Ok(out)
}

fn expect_bytes(what: &str, dtype: DType, got: &[u8], want: &[u8]) -> CheckResult {
    if got == want {
        Ok(())
    } else {
        let at = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
        Err(format!(
            "{what} in {dtype}: byte {at} is {:#04x}, want {:#04x} (the exact bytes sent)",
            got.get(at).copied().unwrap_or(0),
            want.get(at).copied().unwrap_or(0)
        ))
    }
}

/// Every type through every data-moving operation.
pub(super) fn element_types_move<B: Backend>(ranks: &[Rank<B>], limit: Duration) -> CheckResult {
    let n = ranks.len();
    per_rank(ranks, limit, &|r, dev, c| {
        for dtype in DType::ALL {
            move_one(dtype, n, r, dev, c)?;
        }
        Ok(())
    })
}

fn move_one<B: Backend>(
    dtype: DType,
    world: usize,
    r: usize,
    dev: &B,
    member: &dyn Communicator<B>,
) -> CheckResult {
    let stream = dev.default_stream();
    let bytes = N * size(dtype);
    // Broadcast from the last rank.
    let b = upload(dev, &pattern(dtype, r, 0, N))?;
    comm(
        "broadcast",
        member.broadcast(b, N, dtype, world - 1, &stream),
    )?;
    let got = download(dev, b, bytes)?;
    expect_bytes("broadcast", dtype, &got, &pattern(dtype, world - 1, 0, N))?;
    // All-gather: every rank's input in rank order.
    let input = upload(dev, &pattern(dtype, r, 0, N))?;
    let gathered = upload(dev, &vec![0u8; world * bytes])?;
    comm(
        "all_gather",
        member.all_gather(input, gathered, N, dtype, &stream),
    )?;
    let want: Vec<u8> = (0..world).flat_map(|q| pattern(dtype, q, 0, N)).collect();
    let got = download(dev, gathered, world * bytes)?;
    expect_bytes("all_gather", dtype, &got, &want)?;
    // All-to-all: chunk j of rank i lands in chunk i of rank j.
    let a2a_in = upload(dev, &pattern(dtype, r, 0, world * N))?;
    let a2a_out = upload(dev, &vec![0u8; world * bytes])?;
    comm(
        "all_to_all",
        member.all_to_all(a2a_in, a2a_out, N, dtype, &stream),
    )?;
    let want: Vec<u8> = (0..world)
        .flat_map(|q| pattern(dtype, q, r * N, N))
        .collect();
    let got = download(dev, a2a_out, world * bytes)?;
    expect_bytes("all_to_all", dtype, &got, &want)?;
    // A ring of send/recv, even ranks sending first (no batch needed).
    let (next, prev) = ((r + 1) % world, (r + world - 1) % world);
    let into = upload(dev, &vec![0u8; bytes])?;
    if r % 2 == 0 {
        comm("send", member.send(input, N, dtype, next, &stream))?;
        comm("recv", member.recv(into, N, dtype, prev, &stream))?;
    } else {
        comm("recv", member.recv(into, N, dtype, prev, &stream))?;
        comm("send", member.send(input, N, dtype, next, &stream))?;
    }
    let got = download(dev, into, bytes)?;
    expect_bytes("send/recv", dtype, &got, &pattern(dtype, prev, 0, N))?;
    free_all(dev, &[b, input, gathered, a2a_in, a2a_out, into])
}

/// The reference reduction of `count` elements from `from` over `n` ranks.
fn reference(dtype: DType, op: ReduceOp, n: usize, from: usize, count: usize) -> Vec<u8> {
    let mut acc = pattern(dtype, 0, from, count);
    for q in 1..n {
        // `reduces_with` holds for every (dtype, op) this is called with, and the
        // lengths are equal: the reference cannot fail.
        let _ = combine_into(dtype, op, &mut acc, &pattern(dtype, q, from, count));
    }
    let _ = finish_average(dtype, op, &mut acc, n);
    acc
}

/// Every reduction the communicator does, checked against the reference arithmetic; every
/// one it does not, refused at enqueue.
pub(super) fn element_types_reduce<B: Backend>(ranks: &[Rank<B>], limit: Duration) -> CheckResult {
    let n = ranks.len();
    per_rank(ranks, limit, &|r, dev, c| {
        for dtype in DType::ALL {
            for op in ReduceOp::ALL {
                reduce_one(dtype, op, n, r, dev, c)?;
            }
        }
        Ok(())
    })
}

fn reduce_one<B: Backend>(
    dtype: DType,
    op: ReduceOp,
    world: usize,
    r: usize,
    dev: &B,
    member: &dyn Communicator<B>,
) -> CheckResult {
    let stream = dev.default_stream();
    let bytes = N * size(dtype);
    let x = upload(dev, &pattern(dtype, r, 0, N))?;
    if !member.reduces(dtype, op) {
        let refused = member.all_reduce(x, N, dtype, op, &stream).is_err();
        free_all(dev, &[x])?;
        return if refused {
            Ok(())
        } else {
            Err(format!(
                "the communicator says it cannot all_reduce {dtype} with {op}, but enqueued it"
            ))
        };
    }
    if dtype.is_fp8() {
        // Allowed (a backend may reduce fp8), but there is no reference to compare with.
        free_all(dev, &[x])?;
        return Ok(());
    }
    comm("all_reduce", member.all_reduce(x, N, dtype, op, &stream))?;
    let got = download(dev, x, bytes)?;
    expect_bytes(
        &format!("all_reduce({op})"),
        dtype,
        &got,
        &reference(dtype, op, world, 0, N),
    )?;
    let mut ptrs = vec![x];
    if op == ReduceOp::Sum {
        let input = upload(dev, &pattern(dtype, r, 0, world * N))?;
        let output = upload(dev, &vec![0u8; bytes])?;
        ptrs.extend([input, output]);
        comm(
            "reduce_scatter",
            member.reduce_scatter(input, output, N, dtype, op, &stream),
        )?;
        let got = download(dev, output, bytes)?;
        expect_bytes(
            "reduce_scatter(sum)",
            dtype,
            &got,
            &reference(dtype, op, world, r * N, N),
        )?;
    }
    free_all(dev, &ptrs)
}
