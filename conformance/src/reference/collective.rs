//! Collective arithmetic on the host, exact for values within the exactness bound.

use std::collections::HashMap;

use super::EXACT_BOUND;
use crate::schedule::{OpKind, ReduceOp};

/// Per-rank tensors: name -> contents. What a collective reads its members' inputs from
/// and writes their outputs to; the engine holds one for the whole schedule.
pub(super) type Memory = Vec<HashMap<String, Vec<f32>>>;

/// A reduction whose absolute total left the exactness bound.
pub(super) struct Overflow {
    /// Index into the members of the collective.
    pub(super) member: usize,
    pub(super) tensor: String,
    pub(super) magnitude: u64,
}

/// Element-wise reduction of equally long inputs; also the largest absolute total a sum
/// adds up (0 for max/min, which add nothing up). Column sums run input by input so the
/// loops stay simple enough to be fast in unoptimised test builds.
fn reduce(inputs: &[Vec<f32>], op: ReduceOp) -> (Vec<f32>, f64) {
    let Some((first, rest)) = inputs.split_first() else {
        return (Vec::new(), 0.0);
    };
    match op {
        ReduceOp::Sum => {
            let mut sum: Vec<f64> = first.iter().map(|&v| f64::from(v)).collect();
            let mut abs: Vec<f64> = first.iter().map(|&v| f64::from(v).abs()).collect();
            for x in rest {
                for ((s, a), &v) in sum.iter_mut().zip(abs.iter_mut()).zip(x) {
                    *s += f64::from(v);
                    *a += f64::from(v).abs();
                }
            }
            let worst = abs.iter().copied().fold(0.0, f64::max);
            (sum.into_iter().map(|v| v as f32).collect(), worst)
        }
        ReduceOp::Max | ReduceOp::Min => {
            let mut out = first.clone();
            for x in rest {
                for (o, &v) in out.iter_mut().zip(x) {
                    *o = if op == ReduceOp::Max {
                        o.max(v)
                    } else {
                        o.min(v)
                    };
                }
            }
            (out, 0.0)
        }
    }
}

/// Executes one matched collective. `members` are (global rank, that rank's op) in
/// group-rank order. Returns the first exactness violation, if any.
pub(super) fn execute(members: &[(usize, &OpKind)], memory: &mut Memory) -> Option<Overflow> {
    let (_, first) = members.first()?;
    let read = |memory: &Memory, (rank, op): &(usize, &OpKind)| -> Vec<f32> {
        let name = match op {
            OpKind::AllReduce { t, .. } | OpKind::Broadcast { t, .. } => t,
            OpKind::AllGather { input, .. }
            | OpKind::ReduceScatter { input, .. }
            | OpKind::AllToAll { input, .. } => input,
            _ => return Vec::new(),
        };
        memory
            .get(*rank)
            .and_then(|m| m.get(name))
            .cloned()
            .unwrap_or_default()
    };
    let inputs: Vec<Vec<f32>> = members.iter().map(|m| read(memory, m)).collect();
    let gs = members.len();
    let outputs: Vec<Option<Vec<f32>>> = match first {
        OpKind::AllReduce { reduce: r, .. } => {
            let (out, worst) = reduce(&inputs, r.unwrap_or_default());
            if worst > EXACT_BOUND {
                return Some(overflow(members, worst));
            }
            vec![Some(out); gs]
        }
        OpKind::ReduceScatter { reduce: r, .. } => {
            let (out, worst) = reduce(&inputs, r.unwrap_or_default());
            if worst > EXACT_BOUND {
                return Some(overflow(members, worst));
            }
            let chunk = out.len() / gs.max(1);
            (0..gs)
                .map(|g| out.get(g * chunk..(g + 1) * chunk).map(<[f32]>::to_vec))
                .collect()
        }
        OpKind::AllGather { .. } => vec![Some(inputs.concat()); gs],
        OpKind::AllToAll { .. } => {
            let chunk = inputs.first().map_or(0, Vec::len) / gs.max(1);
            (0..gs)
                .map(|j| {
                    (0..gs)
                        .map(|i| inputs[i].get(j * chunk..(j + 1) * chunk))
                        .collect::<Option<Vec<&[f32]>>>()
                        .map(|c| c.concat())
                })
                .collect()
        }
        OpKind::Broadcast { root, .. } => {
            let root = root.unwrap_or(0);
            let data = inputs.get(root).cloned();
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
        if let (Some(out), Some(mem)) = (out, memory.get_mut(*rank)) {
            mem.insert(name.clone(), out);
        }
    }
    None
}

fn overflow(members: &[(usize, &OpKind)], worst: f64) -> Overflow {
    let tensor = match members.first().map(|m| m.1) {
        Some(OpKind::AllReduce { t, .. }) => t.clone(),
        Some(OpKind::ReduceScatter { input, .. }) => input.clone(),
        _ => String::new(),
    };
    Overflow {
        member: 0,
        tensor,
        magnitude: worst as u64,
    }
}
