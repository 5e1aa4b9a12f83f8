//! The data movement of each collective, as [`JointOp`](crate::JointOp) bodies: host-side
//! arithmetic over the regions the joint op declared, in any element type (core's
//! [`combine_into`], the one reference arithmetic).
//!
//! Public so that every communicator built on mock joint ops (the mock's own
//! [`MockCommunicator`](crate::MockCommunicator), the Ascend stand-in's HCCL) moves data
//! with the same code: results are then bit-identical across backends by construction,
//! which is what the conformance suite compares (digests of the mock against the others).
//!
//! Every body expects the region layout documented on it (region indices follow the order
//! of [`JointOp::access`](crate::JointOp::access) calls, per rank). Reductions combine in
//! rank order, rank 0 first, so a non-associative operation (float addition) gives the same
//! bits on every run. Lengths that disagree across ranks are an `InvalidArgument` error,
//! never a panic: bodies run on stream worker threads, where a panic would kill the stream.

use memreuse_core::BackendError;
use memreuse_core::comm::{DType, ElementwiseError, ReduceOp, combine_into, finish_average};

use crate::error::BACKEND_NAME;
use crate::region::JointMemory;

/// The common length of `region` across ranks, or an error naming the first rank that
/// differs from rank 0.
fn same_len(
    mem: &JointMemory<'_>,
    region: usize,
    what: &'static str,
) -> Result<usize, BackendError> {
    let len = mem.bytes(0, region)?.len();
    for r in 1..mem.ranks() {
        let other = mem.bytes(r, region)?.len();
        if other != len {
            return Err(BackendError::invalid_argument(
                BACKEND_NAME,
                what,
                format!("rank 0 passes {len} bytes but rank {r} passes {other}"),
            ));
        }
    }
    Ok(len)
}

/// Region 0 of every rank reduced in `dtype` with core's reference arithmetic, in rank
/// order (rank 0 first), `Avg` finished by the rank count.
fn reduce_region0_typed(
    mem: &JointMemory<'_>,
    dtype: DType,
    op: ReduceOp,
    what: &'static str,
) -> Result<Vec<u8>, BackendError> {
    let invalid =
        |e: ElementwiseError| BackendError::invalid_argument(BACKEND_NAME, what, e.to_string());
    let mut acc = mem.bytes(0, 0)?.to_vec();
    for r in 1..mem.ranks() {
        combine_into(dtype, op, &mut acc, mem.bytes(r, 0)?).map_err(invalid)?;
    }
    if mem.ranks() == 1 && !dtype.reduces_with(op) {
        return Err(invalid(ElementwiseError::Unsupported { dtype, op }));
    }
    finish_average(dtype, op, &mut acc, mem.ranks()).map_err(invalid)?;
    Ok(acc)
}

/// All-reduce of any reducible element type: region 0 of every rank is the input; the
/// reduction is written to each rank's last region. In place declares one region (read and
/// written); out of place declares input then output, and each rank may choose
/// independently. The arithmetic is [`combine_into`]'s, so every host-side communicator
/// gives the same bits.
pub fn all_reduce_typed(
    mem: &mut JointMemory<'_>,
    dtype: DType,
    op: ReduceOp,
) -> Result<(), BackendError> {
    same_len(mem, 0, "all_reduce")?;
    let acc = reduce_region0_typed(mem, dtype, op, "all_reduce")?;
    for r in 0..mem.ranks() {
        // `regions` is at least 1 here: region 0 of every rank was read.
        let out = mem.regions(r) - 1;
        let dst = mem.bytes_mut(r, out)?;
        if dst.len() != acc.len() {
            return Err(BackendError::invalid_argument(
                BACKEND_NAME,
                "all_reduce",
                "input and output lengths differ",
            ));
        }
        dst.copy_from_slice(&acc);
    }
    Ok(())
}

/// Reduce-scatter of any reducible element type: region 0 of each rank is its input (group
/// size x output), region 1 its output; rank r receives chunk r of the reduction, with
/// [`combine_into`]'s arithmetic.
pub fn reduce_scatter_typed(
    mem: &mut JointMemory<'_>,
    dtype: DType,
    op: ReduceOp,
) -> Result<(), BackendError> {
    let total = same_len(mem, 0, "reduce_scatter")?;
    let ranks = mem.ranks();
    let acc = reduce_region0_typed(mem, dtype, op, "reduce_scatter")?;
    let chunk = total / ranks;
    if total % ranks != 0 || chunk as u64 % dtype.size_bytes() != 0 {
        return Err(BackendError::invalid_argument(
            BACKEND_NAME,
            "reduce_scatter",
            format!("{total} input bytes do not split into {ranks} whole {dtype} chunks"),
        ));
    }
    for r in 0..ranks {
        let out = mem.bytes_mut(r, 1)?;
        if out.len() != chunk {
            return Err(BackendError::invalid_argument(
                BACKEND_NAME,
                "reduce_scatter",
                "input is not output x group size",
            ));
        }
        out.copy_from_slice(&acc[r * chunk..(r + 1) * chunk]);
    }
    Ok(())
}

/// All-gather: region 0 of each rank is its input, region 1 its output (group size x
/// input), which receives every rank's input in rank order.
pub fn all_gather(mem: &mut JointMemory<'_>) -> Result<(), BackendError> {
    let n = same_len(mem, 0, "all_gather")?;
    let mut gathered = Vec::with_capacity(n * mem.ranks());
    for r in 0..mem.ranks() {
        gathered.extend_from_slice(mem.bytes(r, 0)?);
    }
    for r in 0..mem.ranks() {
        let out = mem.bytes_mut(r, 1)?;
        if out.len() != gathered.len() {
            return Err(BackendError::invalid_argument(
                BACKEND_NAME,
                "all_gather",
                "output is not input x group size",
            ));
        }
        out.copy_from_slice(&gathered);
    }
    Ok(())
}

/// All-to-all (any element type, it moves bytes): region 0 input, region 1 output, both
/// split into group-size chunks; chunk j of rank i lands in chunk i of rank j.
pub fn all_to_all(mem: &mut JointMemory<'_>) -> Result<(), BackendError> {
    let total = same_len(mem, 0, "all_to_all")?;
    let ranks = mem.ranks();
    if total % ranks != 0 {
        return Err(BackendError::invalid_argument(
            BACKEND_NAME,
            "all_to_all",
            "length not divisible by the group size",
        ));
    }
    let chunk = total / ranks;
    // Copied out first: outputs are written through `bytes_mut`, which borrows `mem`
    // exclusively, so no input slice may be held meanwhile.
    let inputs: Vec<Vec<u8>> = (0..ranks)
        .map(|r| mem.bytes(r, 0).map(<[u8]>::to_vec))
        .collect::<Result<_, _>>()?;
    for j in 0..ranks {
        let out = mem.bytes_mut(j, 1)?;
        if out.len() != total {
            return Err(BackendError::invalid_argument(
                BACKEND_NAME,
                "all_to_all",
                "input and output lengths differ",
            ));
        }
        for (i, input) in inputs.iter().enumerate() {
            out[i * chunk..(i + 1) * chunk].copy_from_slice(&input[j * chunk..(j + 1) * chunk]);
        }
    }
    Ok(())
}

/// Broadcast: region 0 of every rank; the root's bytes are copied to the others.
pub fn broadcast(mem: &mut JointMemory<'_>, root: usize) -> Result<(), BackendError> {
    same_len(mem, 0, "broadcast")?;
    let data = mem.bytes(root, 0)?.to_vec();
    for r in (0..mem.ranks()).filter(|&r| r != root) {
        mem.bytes_mut(r, 0)?.copy_from_slice(&data);
    }
    Ok(())
}

/// Point-to-point over a two-rank pair group (see [`PairGroups`](crate::PairGroups)): region
/// 0 of rank 0 (the sender) is copied to region 0 of rank 1 (the receiver).
pub fn send_recv(mem: &mut JointMemory<'_>) -> Result<(), BackendError> {
    same_len(mem, 0, "send/recv")?;
    let data = mem.bytes(0, 0)?.to_vec();
    mem.bytes_mut(1, 0)?.copy_from_slice(&data);
    Ok(())
}
