//! Collective arithmetic on the host, in every element type, exact for values within each
//! type's exactness bound or range, which it checks.

use std::collections::HashMap;

use memreuse_core::DType;

use super::typed;
use crate::schedule::{OpKind, ReduceOp};

/// One rank's tensor: its element type and its contents, the little-endian bytes of that
/// type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Tensor {
    pub(super) dtype: DType,
    pub(super) bytes: Vec<u8>,
}

/// Per-rank tensors: name -> contents. What a collective reads its members' inputs from
/// and writes their outputs to; the engine holds one for the whole schedule.
pub(super) type Memory = Vec<HashMap<String, Tensor>>;

/// A reduction that left its type's exactness bound (floating types) or range
/// (integers).
pub(super) struct Overflow {
    /// Index into the members of the collective.
    pub(super) member: usize,
    pub(super) tensor: String,
    pub(super) dtype: DType,
    /// Floating types: the largest absolute total (sum) or product (prod) reached.
    /// Integers: the first value or intermediate outside the range.
    pub(super) reached: i128,
}

/// What a reduction reached beyond its type's limit: the absolute measure (floats) or the
/// out-of-range value (integers).
type Excess = Option<i128>;

/// Element-wise reduction of equally long inputs of a floating type. The measure checked
/// is the sum of the absolute values (sum) or the product of the absolute values of the
/// non-zero factors (prod: a zero factor does not hide a partial product an other order
/// would round); max and min make no new values. Column loops run input by input so they
/// stay fast in unoptimised test builds.
fn reduce_float(dtype: DType, inputs: &[&[u8]], op: ReduceOp) -> (Vec<u8>, Excess) {
    let sz = typed::size(dtype);
    let decode = |x: &[u8]| -> Vec<f64> {
        x.chunks_exact(sz)
            .map(|c| typed::get_float(dtype, c))
            .collect()
    };
    let Some((first, rest)) = inputs.split_first() else {
        return (Vec::new(), None);
    };
    let mut acc = decode(first);
    let mut measure: Vec<f64> = match op {
        ReduceOp::Sum => acc.iter().map(|v| v.abs()).collect(),
        ReduceOp::Prod => acc
            .iter()
            .map(|v| if *v == 0.0 { 1.0 } else { v.abs() })
            .collect(),
        ReduceOp::Max | ReduceOp::Min => Vec::new(),
    };
    for x in rest {
        let x = decode(x);
        match op {
            ReduceOp::Sum => {
                for ((s, a), &v) in acc.iter_mut().zip(measure.iter_mut()).zip(&x) {
                    *s += v;
                    *a += v.abs();
                }
            }
            ReduceOp::Prod => {
                for ((s, a), &v) in acc.iter_mut().zip(measure.iter_mut()).zip(&x) {
                    *s *= v;
                    if v != 0.0 {
                        *a *= v.abs();
                    }
                }
            }
            ReduceOp::Max => acc.iter_mut().zip(&x).for_each(|(o, &v)| *o = o.max(v)),
            ReduceOp::Min => acc.iter_mut().zip(&x).for_each(|(o, &v)| *o = o.min(v)),
        }
    }
    let (bound, _) = typed::float_bound(dtype);
    let worst = measure.iter().copied().fold(0.0, f64::max);
    let mut out = vec![0u8; acc.len() * sz];
    for (o, &v) in out.chunks_exact_mut(sz).zip(&acc) {
        typed::put_float(dtype, v, o);
    }
    // Saturating: a measure far beyond i128 is reported as i128::MAX.
    #[allow(clippy::cast_possible_truncation)]
    let excess = (worst > bound).then_some(worst as i128);
    (out, excess)
}

/// Element-wise reduction of an integer type; every value and every intermediate, in any
/// order, must stay inside the type's range: for a sum, the totals of the positive and of
/// the negative terms; for a product, the product of the absolute values of the non-zero
/// factors. Arithmetic saturates in `i128`, far outside every type's range.
fn reduce_int(dtype: DType, inputs: &[&[u8]], op: ReduceOp) -> (Vec<u8>, Excess) {
    let sz = typed::size(dtype);
    let (min, max) = typed::int_range(dtype);
    let decode = |x: &[u8]| -> Vec<i128> {
        x.chunks_exact(sz)
            .map(|c| typed::get_int(dtype, c))
            .collect()
    };
    let Some((first, rest)) = inputs.split_first() else {
        return (Vec::new(), None);
    };
    let mut acc = decode(first);
    // (positive total, negative total) for sums; the absolute product for products.
    let mut pos: Vec<i128> = acc.iter().map(|&v| v.max(0)).collect();
    let mut neg: Vec<i128> = acc.iter().map(|&v| v.min(0)).collect();
    let mut mag: Vec<i128> = acc
        .iter()
        .map(|&v| if v == 0 { 1 } else { v.abs() })
        .collect();
    for x in rest {
        let x = decode(x);
        for (i, (o, &v)) in acc.iter_mut().zip(&x).enumerate() {
            match op {
                ReduceOp::Sum => {
                    *o = o.saturating_add(v);
                    pos[i] = pos[i].saturating_add(v.max(0));
                    neg[i] = neg[i].saturating_add(v.min(0));
                }
                ReduceOp::Prod => {
                    *o = o.saturating_mul(v);
                    if v != 0 {
                        mag[i] = mag[i].saturating_mul(v.abs());
                    }
                }
                ReduceOp::Max => *o = (*o).max(v),
                ReduceOp::Min => *o = (*o).min(v),
            }
        }
    }
    let excess = match op {
        ReduceOp::Sum => pos
            .iter()
            .find(|&&p| p > max)
            .or_else(|| neg.iter().find(|&&n| n < min))
            .copied(),
        ReduceOp::Prod => {
            let limit = max.max(-min);
            mag.iter().find(|&&m| m > limit).copied()
        }
        ReduceOp::Max | ReduceOp::Min => None,
    };
    let mut out = vec![0u8; acc.len() * sz];
    for (o, &v) in out.chunks_exact_mut(sz).zip(&acc) {
        typed::put_int(v, o);
    }
    (out, excess)
}

fn reduce(dtype: DType, inputs: &[&[u8]], op: ReduceOp) -> (Vec<u8>, Excess) {
    if dtype.is_floating() {
        reduce_float(dtype, inputs, op)
    } else {
        reduce_int(dtype, inputs, op)
    }
}

/// Executes one matched collective. `members` are (global rank, that rank's op) in
/// group-rank order. Returns the first exactness violation, if any.
pub(super) fn execute(members: &[(usize, &OpKind)], memory: &mut Memory) -> Option<Overflow> {
    let (_, first) = members.first()?;
    let read = |memory: &Memory, (rank, op): &(usize, &OpKind)| -> Option<Tensor> {
        let name = match op {
            OpKind::AllReduce { t, .. } | OpKind::Broadcast { t, .. } => t,
            OpKind::AllGather { input, .. }
            | OpKind::ReduceScatter { input, .. }
            | OpKind::AllToAll { input, .. } => input,
            _ => return None,
        };
        memory.get(*rank)?.get(name).cloned()
    };
    let tensors: Vec<Tensor> = members
        .iter()
        .map(|m| read(memory, m))
        .collect::<Option<_>>()?;
    // The validator made every member's tensors of one type.
    let dtype = tensors.first().map_or(DType::F32, |t| t.dtype);
    let inputs: Vec<&[u8]> = tensors.iter().map(|t| t.bytes.as_slice()).collect();
    let gs = members.len();
    let outputs: Vec<Option<Vec<u8>>> = match first {
        OpKind::AllReduce { reduce: r, .. } => {
            let (out, excess) = reduce(dtype, &inputs, r.unwrap_or_default());
            if let Some(reached) = excess {
                return Some(overflow(members, dtype, reached));
            }
            vec![Some(out); gs]
        }
        OpKind::ReduceScatter { reduce: r, .. } => {
            let (out, excess) = reduce(dtype, &inputs, r.unwrap_or_default());
            if let Some(reached) = excess {
                return Some(overflow(members, dtype, reached));
            }
            let chunk = out.len() / gs.max(1);
            (0..gs)
                .map(|g| out.get(g * chunk..(g + 1) * chunk).map(<[u8]>::to_vec))
                .collect()
        }
        OpKind::AllGather { .. } => vec![Some(inputs.concat()); gs],
        OpKind::AllToAll { .. } => {
            let chunk = inputs.first().map_or(0, |x| x.len()) / gs.max(1);
            (0..gs)
                .map(|j| {
                    (0..gs)
                        .map(|i| inputs[i].get(j * chunk..(j + 1) * chunk))
                        .collect::<Option<Vec<&[u8]>>>()
                        .map(|c| c.concat())
                })
                .collect()
        }
        OpKind::Broadcast { root, .. } => {
            let root = root.unwrap_or(0);
            let data = inputs.get(root).map(|x| x.to_vec());
            (0..gs)
                .map(|g| if g == root { None } else { data.clone() })
                .collect()
        }
        _ => vec![None; gs],
    };
    for ((rank, op), out) in members.iter().zip(outputs) {
        let name = match op {
            OpKind::AllReduce { t, .. } | OpKind::Broadcast { t, .. } => t,
            OpKind::AllGather { out, .. }
            | OpKind::ReduceScatter { out, .. }
            | OpKind::AllToAll { out, .. } => out,
            _ => continue,
        };
        if let (Some(bytes), Some(mem)) = (out, memory.get_mut(*rank)) {
            mem.insert(name.clone(), Tensor { dtype, bytes });
        }
    }
    None
}

fn overflow(members: &[(usize, &OpKind)], dtype: DType, reached: i128) -> Overflow {
    let tensor = match members.first().map(|m| m.1) {
        Some(OpKind::AllReduce { t, .. }) => t.clone(),
        Some(OpKind::ReduceScatter { input, .. }) => input.clone(),
        _ => String::new(),
    };
    Overflow {
        member: 0,
        tensor,
        dtype,
        reached,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bf16(values: &[f64]) -> Vec<u8> {
        let mut out = vec![0u8; values.len() * 2];
        for (o, &v) in out.chunks_exact_mut(2).zip(values) {
            typed::put_float(DType::BF16, v, o);
        }
        out
    }

    /// The bound is inclusive: absolute totals of exactly 2^8 pass in bf16, 257 does not.
    #[test]
    fn the_bf16_bound_is_inclusive() {
        let (a, b) = (bf16(&[128.0, -100.0]), bf16(&[128.0, 156.0]));
        let (out, excess) = reduce(DType::BF16, &[&a, &b], ReduceOp::Sum);
        assert_eq!(excess, None);
        assert_eq!(out, bf16(&[256.0, 56.0]));
        let c = bf16(&[129.0, 0.0]);
        assert_eq!(reduce(DType::BF16, &[&a, &c], ReduceOp::Sum).1, Some(257));
        // A product's bound: 16 x 16 = 2^8 passes, and a zero factor hides nothing.
        let (plus, minus, zero) = (bf16(&[16.0]), bf16(&[-16.0]), bf16(&[0.0]));
        assert_eq!(
            reduce(DType::BF16, &[&plus, &minus], ReduceOp::Prod).1,
            None
        );
        assert_eq!(
            reduce(DType::BF16, &[&plus, &minus, &plus, &zero], ReduceOp::Prod).1,
            Some(4096)
        );
    }

    /// Integer sums are judged by their positive and negative totals (any order's
    /// intermediates), products by their magnitude.
    #[test]
    fn integer_ranges_cover_every_order() {
        let (a, b) = ([100u8], [156u8]);
        assert_eq!(
            reduce(DType::U8, &[&a, &b], ReduceOp::Sum),
            (vec![0], Some(256))
        );
        let (p, n) = ([100u8], [(-100i8).to_le_bytes()[0]]);
        // 100 + 100 - 100: the final value fits i8, the intermediate 200 does not.
        assert_eq!(reduce(DType::I8, &[&p, &p, &n], ReduceOp::Sum).1, Some(200));
        assert_eq!(reduce(DType::I8, &[&p, &n], ReduceOp::Sum).1, None);
    }
}
