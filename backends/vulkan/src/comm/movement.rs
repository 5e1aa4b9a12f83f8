//! The data movement of each operation, done by the proxy on the host through the coherent
//! mappings once every member's stream reached the operation.
//!
//! Reductions combine in rank order, rank 0 first, exactly as the mock's collectives do,
//! so results are bit-identical to the mock's (what the conformance digests compare).

use memreuse_core::comm::ReduceOp;

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

fn to_f32(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn from_f32(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Element-wise reduction of every member's first span, in rank order.
fn reduce(spans: &[Vec<Span>], op: ReduceOp) -> Vec<f32> {
    let mut acc = to_f32(&spans[0][0].to_vec());
    for member in &spans[1..] {
        for (a, b) in acc.iter_mut().zip(to_f32(&member[0].to_vec())) {
            *a = op.apply(*a, b);
        }
    }
    acc
}

/// Runs a matched collective: `spans[r]` are member `r`'s buffers in the order of [`Kind`];
/// their lengths were checked when each member issued the operation.
pub fn run_collective(kind: Kind, spans: &[Vec<Span>]) {
    let n = spans.len();
    match kind {
        Kind::AllReduce(op) => {
            let bytes = from_f32(&reduce(spans, op));
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
            let acc = reduce(spans, op);
            let chunk = acc.len() / n;
            for (r, member) in spans.iter().enumerate() {
                member[1].store(&from_f32(&acc[r * chunk..(r + 1) * chunk]));
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
}

/// The `(input, output)` byte lengths member buffers of `kind` must have for `count`
/// elements of 4 bytes in a group of `size`.
pub fn lengths(kind: Kind, count: u64, size: u64) -> Vec<u64> {
    let one = count * 4;
    match kind {
        Kind::AllReduce(_) | Kind::Broadcast(_) => vec![one],
        Kind::AllGather => vec![one, one * size],
        Kind::ReduceScatter(_) => vec![one * size, one],
        Kind::AllToAll => vec![one * size, one * size],
        Kind::Barrier => Vec::new(),
    }
}
