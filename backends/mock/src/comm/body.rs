//! The data movement of each collective, on the host: f32 arithmetic over the regions the
//! joint op declared (region order per rank is fixed by the op builders in `family.rs`).

use memreuse_core::BackendError;
use memreuse_core::comm::ReduceOp;

use crate::error::invalid;
use crate::region::JointMemory;

fn to_f32(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn write_f32(dst: &mut [u8], values: &[f32]) {
    for (chunk, v) in dst.chunks_exact_mut(4).zip(values) {
        chunk.copy_from_slice(&v.to_le_bytes());
    }
}

fn same_len(
    mem: &JointMemory<'_>,
    region: usize,
    what: &'static str,
) -> Result<usize, BackendError> {
    let len = mem.bytes(0, region)?.len();
    for r in 1..mem.ranks() {
        let other = mem.bytes(r, region)?.len();
        if other != len {
            return Err(invalid(
                what,
                format!("rank 0 passes {len} bytes but rank {r} passes {other}"),
            ));
        }
    }
    Ok(len)
}

/// Region 0 of every rank: in place reduction.
pub(crate) fn all_reduce(mem: &mut JointMemory<'_>, op: ReduceOp) -> Result<(), BackendError> {
    same_len(mem, 0, "all_reduce")?;
    let mut acc = to_f32(mem.bytes(0, 0)?);
    for r in 1..mem.ranks() {
        for (a, b) in acc.iter_mut().zip(to_f32(mem.bytes(r, 0)?)) {
            *a = op.apply(*a, b);
        }
    }
    for r in 0..mem.ranks() {
        write_f32(mem.bytes_mut(r, 0)?, &acc);
    }
    Ok(())
}

/// Region 0 input, region 1 output (`ranks` x input).
pub(crate) fn all_gather(mem: &mut JointMemory<'_>) -> Result<(), BackendError> {
    let n = same_len(mem, 0, "all_gather")?;
    let mut gathered = Vec::with_capacity(n * mem.ranks());
    for r in 0..mem.ranks() {
        gathered.extend_from_slice(mem.bytes(r, 0)?);
    }
    for r in 0..mem.ranks() {
        let out = mem.bytes_mut(r, 1)?;
        if out.len() != gathered.len() {
            return Err(invalid("all_gather", "output is not input x group size"));
        }
        out.copy_from_slice(&gathered);
    }
    Ok(())
}

/// Region 0 input (`ranks` x output), region 1 output: rank r gets chunk r reduced.
pub(crate) fn reduce_scatter(mem: &mut JointMemory<'_>, op: ReduceOp) -> Result<(), BackendError> {
    let total = same_len(mem, 0, "reduce_scatter")?;
    let ranks = mem.ranks();
    let mut acc = to_f32(mem.bytes(0, 0)?);
    for r in 1..ranks {
        for (a, b) in acc.iter_mut().zip(to_f32(mem.bytes(r, 0)?)) {
            *a = op.apply(*a, b);
        }
    }
    let chunk = total / 4 / ranks;
    for r in 0..ranks {
        let out = mem.bytes_mut(r, 1)?;
        if out.len() != chunk * 4 {
            return Err(invalid(
                "reduce_scatter",
                "input is not output x group size",
            ));
        }
        write_f32(out, &acc[r * chunk..(r + 1) * chunk]);
    }
    Ok(())
}

/// Region 0 input, region 1 output: chunk j of rank i lands in chunk i of rank j.
pub(crate) fn all_to_all(mem: &mut JointMemory<'_>) -> Result<(), BackendError> {
    let total = same_len(mem, 0, "all_to_all")?;
    let ranks = mem.ranks();
    if total % ranks != 0 {
        return Err(invalid(
            "all_to_all",
            "length not divisible by the group size",
        ));
    }
    let chunk = total / ranks;
    let inputs: Vec<Vec<u8>> = (0..ranks)
        .map(|r| mem.bytes(r, 0).map(<[u8]>::to_vec))
        .collect::<Result<_, _>>()?;
    for j in 0..ranks {
        let out = mem.bytes_mut(j, 1)?;
        if out.len() != total {
            return Err(invalid("all_to_all", "input and output lengths differ"));
        }
        for (i, input) in inputs.iter().enumerate() {
            out[i * chunk..(i + 1) * chunk].copy_from_slice(&input[j * chunk..(j + 1) * chunk]);
        }
    }
    Ok(())
}

/// Region 0 of every rank; the root's is copied to the others.
pub(crate) fn broadcast(mem: &mut JointMemory<'_>, root: usize) -> Result<(), BackendError> {
    same_len(mem, 0, "broadcast")?;
    let data = mem.bytes(root, 0)?.to_vec();
    for r in (0..mem.ranks()).filter(|&r| r != root) {
        mem.bytes_mut(r, 0)?.copy_from_slice(&data);
    }
    Ok(())
}

/// Pair group: rank 0 (sender) region 0 to rank 1 (receiver) region 0.
pub(crate) fn send_recv(mem: &mut JointMemory<'_>) -> Result<(), BackendError> {
    same_len(mem, 0, "send/recv")?;
    let data = mem.bytes(0, 0)?.to_vec();
    mem.bytes_mut(1, 0)?.copy_from_slice(&data);
    Ok(())
}
