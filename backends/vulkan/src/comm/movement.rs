//! The data movement of each operation, done by the proxy on the host through the coherent
//! mappings once every member's stream reached the operation.
//!
//! Reductions combine in rank order, rank 0 first, with core's reference arithmetic
//! ([`combine_into`], then [`finish_average`]) exactly as the mock's collectives do, so
//! results are bit-identical to the mock's in every element type (what the conformance
//! digests compare).

use memreuse_core::comm::{DType, ElementwiseError, ReduceOp, combine_into, finish_average};

use crate::memory::Span;

/// What one member asked for; equal on every member of a matched operation except for the
/// buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// In place: `[buf]`.
    AllReduce(ReduceOp),
    /// `[input, output]`.
    AllGather,
    /// `[input, output]`.
    ReduceScatter(ReduceOp),
    /// `[input, output]`.
    AllToAll,
    /// `[buf]`, root in group ranks.
    Broadcast(usize),
    /// No buffer.
    Barrier,
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Kind::AllReduce(op) => write!(f, "all_reduce({op})"),
            Kind::AllGather => f.write_str("all_gather"),
            Kind::ReduceScatter(op) => write!(f, "reduce_scatter({op})"),
            Kind::AllToAll => f.write_str("all_to_all"),
            Kind::Broadcast(root) => write!(f, "broadcast(root {root})"),
            Kind::Barrier => f.write_str("barrier"),
        }
    }
}

/// Element-wise reduction of every member's first span in `dtype`, in rank order.
fn reduce(spans: &[Vec<Span>], dtype: DType, op: ReduceOp) -> Result<Vec<u8>, ElementwiseError> {
    let mut acc = spans[0][0].to_vec();
    for member in &spans[1..] {
        combine_into(dtype, op, &mut acc, &member[0].to_vec())?;
    }
    finish_average(dtype, op, &mut acc, spans.len())?;
    Ok(acc)
}

/// Runs a matched collective of `dtype` elements: `spans[r]` are member `r`'s buffers in
/// the order of [`Kind`]; their lengths were checked when each member issued the operation,
/// and the reduction when it was enqueued, so an error here means a broken invariant.
pub fn run_collective(
    kind: Kind,
    dtype: DType,
    spans: &[Vec<Span>],
) -> Result<(), ElementwiseError> {
    let n = spans.len();
    match kind {
        Kind::AllReduce(op) => {
            let bytes = reduce(spans, dtype, op)?;
            for member in spans {
                member[0].store(&bytes);
            }
        }
        Kind::AllGather => {
            let gathered: Vec<u8> = spans.iter().flat_map(|m| m[0].to_vec()).collect();
            for member in spans {
                member[1].store(&gathered);
            }
        }
        Kind::ReduceScatter(op) => {
            let acc = reduce(spans, dtype, op)?;
            let chunk = acc.len() / n;
            for (r, member) in spans.iter().enumerate() {
                member[1].store(&acc[r * chunk..(r + 1) * chunk]);
            }
        }
        Kind::AllToAll => {
            let inputs: Vec<Vec<u8>> = spans.iter().map(|m| m[0].to_vec()).collect();
            let chunk = inputs[0].len() / n;
            for (j, member) in spans.iter().enumerate() {
                let out: Vec<u8> = inputs
                    .iter()
                    .flat_map(|input| input[j * chunk..(j + 1) * chunk].iter().copied())
                    .collect();
                member[1].store(&out);
            }
        }
        Kind::Broadcast(root) => {
            let data = spans[root][0].to_vec();
            for (r, member) in spans.iter().enumerate() {
                if r != root {
                    member[0].store(&data);
                }
            }
        }
        Kind::Barrier => {}
    }
    Ok(())
}

/// The `(input, output)` byte lengths member buffers of `kind` must have for `count`
/// elements of `elem` bytes in a group of `size`.
pub fn lengths(kind: Kind, count: u64, elem: u64, size: u64) -> Vec<u64> {
    let one = count * elem;
    match kind {
        Kind::AllReduce(_) | Kind::Broadcast(_) => vec![one],
        Kind::AllGather => vec![one, one * size],
        Kind::ReduceScatter(_) => vec![one * size, one],
        Kind::AllToAll => vec![one * size, one * size],
        Kind::Barrier => Vec::new(),
    }
}
