//! The process group communicates every element type: a typed `P2pOp` batch sends the
//! element type it names (not f32), a bf16 `all_reduce` reduces in bf16, and a buffer
//! that is not a whole number of elements of its type, or an operator the type does not
//! have, is a typed error issued before any work.

mod common;

use common::{Setup, run};
use memreuse::comm::{read_f64, write_f64};
use memreuse::mock::MockDevice;
use memreuse::{Backend, CommBuffer, DType, P2pOp, PgError, ReduceOp, ReuseMode, Storage, Work};

/// A tensor of `values` stored as `dtype` (each value exact in it).
fn typed_tensor(r: &common::Rank, dtype: DType, values: &[f64]) -> Storage<MockDevice> {
    let size = dtype.size_bytes() as usize;
    let mut bytes = vec![0u8; values.len() * size];
    for (chunk, &v) in bytes.chunks_exact_mut(size).zip(values) {
        write_f64(dtype, v, chunk);
    }
    let t = r
        .allocator
        .allocate(bytes.len() as u64, &r.compute)
        .expect("allocate");
    r.device
        .copy_host_to_device(t.ptr(), &bytes, &r.compute)
        .expect("upload");
    t
}

fn typed_read(r: &common::Rank, t: &Storage<MockDevice>, dtype: DType) -> Vec<f64> {
    let mut bytes = vec![0u8; t.requested_size() as usize];
    r.device
        .copy_device_to_host(&mut bytes, t.ptr(), &r.compute)
        .expect("read back");
    bytes
        .chunks_exact(dtype.size_bytes() as usize)
        .map(|c| read_f64(dtype, c))
        .collect()
}

fn invalid_reason(result: Result<Work<MockDevice>, PgError>) -> String {
    match result {
        Err(PgError::InvalidArgument { reason, .. }) => reason,
        Err(other) => panic!("expected InvalidArgument, got {other}"),
        Ok(_) => panic!("expected InvalidArgument, got a work"),
    }
}

#[test]
fn a_typed_batch_moves_elements_of_the_type_it_names() {
    // Five bf16 elements are 10 bytes: read as f32 (the old hard-coded type) they are not
    // whole elements, so the batch would have been refused or truncated.
    let out = run(&Setup::new(2, ReuseMode::AvoidRecordStream), |r| {
        let base = 10.0 * r.rank as f64;
        let mine = typed_tensor(
            r,
            DType::BF16,
            &[base, base + 1.0, base + 2.0, base + 3.0, -base],
        );
        let into = typed_tensor(r, DType::BF16, &[0.0; 5]);
        let peer = 1 - r.rank;
        let ops = [
            P2pOp::Send(CommBuffer::new(&mine, DType::BF16), peer),
            P2pOp::Recv(CommBuffer::new(&into, DType::BF16), peer),
        ];
        r.pg.batch_isend_irecv(&ops, &r.compute)
            .expect("issue")
            .wait(&r.compute)
            .expect("wait");
        typed_read(r, &into, DType::BF16)
    });
    assert!(out.races.is_empty());
    assert_eq!(out.values[0], vec![10.0, 11.0, 12.0, 13.0, -10.0]);
    assert_eq!(out.values[1], vec![0.0, 1.0, 2.0, 3.0, 0.0]);
}

#[test]
fn a_bf16_all_reduce_sums_in_bf16() {
    let out = run(&Setup::new(4, ReuseMode::EraseRecordStream), |r| {
        let v = r.rank as f64;
        let t = typed_tensor(r, DType::BF16, &[v, 2.0 * v, 0.5, -v]);
        r.pg.all_reduce(
            CommBuffer::new(&t, DType::BF16),
            ReduceOp::Sum,
            &r.compute,
            true,
        )
        .expect("issue")
        .wait(&r.compute)
        .expect("wait");
        typed_read(r, &t, DType::BF16)
    });
    assert!(out.races.is_empty());
    for values in &out.values {
        assert_eq!(*values, vec![6.0, 12.0, 2.0, -6.0]);
    }
}

#[test]
fn a_buffer_that_is_not_whole_elements_of_its_type_is_refused_before_any_work() {
    let out = run(&Setup::new(2, ReuseMode::AvoidRecordStream), |r| {
        let c = &r.compute;
        // 12 bytes: one and a half i64 (but three whole f32).
        let odd = r.allocator.allocate(12, c).expect("allocate");
        let whole = typed_tensor(r, DType::I64, &[1.0, 2.0]);
        let odd_i64 = || CommBuffer::new(&odd, DType::I64);
        let whole_i64 = CommBuffer::new(&whole, DType::I64);
        let peer = 1 - r.rank;
        let reasons = vec![
            invalid_reason(r.pg.all_reduce(odd_i64(), ReduceOp::Sum, c, true)),
            invalid_reason(r.pg.broadcast(odd_i64(), 0, c, true)),
            invalid_reason(r.pg.send(odd_i64(), peer, c, true)),
            invalid_reason(r.pg.recv(odd_i64(), peer, c, true)),
            invalid_reason(r.pg.batch_isend_irecv(
                &[P2pOp::Send(whole_i64, peer), P2pOp::Recv(odd_i64(), peer)],
                c,
            )),
        ];
        assert_eq!(r.pg.stats().works_issued, 0);
        reasons
    });
    for reasons in &out.values {
        assert_eq!(reasons.len(), 5);
        for reason in reasons {
            assert!(
                reason.contains("12 bytes") && reason.contains("i64"),
                "the error names the size and the element type: {reason}"
            );
        }
    }
}

#[test]
fn an_operator_the_type_does_not_have_is_refused_naming_type_op_and_backend() {
    let out = run(&Setup::new(2, ReuseMode::AvoidRecordStream), |r| {
        let c = &r.compute;
        let ints = typed_tensor(r, DType::I32, &[1.0, 2.0]);
        let fp8 = typed_tensor(r, DType::F8E4M3, &[1.0, 2.0]);
        let fp8_out = typed_tensor(r, DType::F8E4M3, &[1.0]);
        let reasons = vec![
            invalid_reason(r.pg.all_reduce(
                CommBuffer::new(&ints, DType::I32),
                ReduceOp::Avg,
                c,
                true,
            )),
            invalid_reason(r.pg.all_reduce(
                CommBuffer::new(&fp8, DType::F8E4M3),
                ReduceOp::Sum,
                c,
                true,
            )),
            invalid_reason(r.pg.reduce_scatter(
                CommBuffer::new(&fp8, DType::F8E4M3),
                CommBuffer::new(&fp8_out, DType::F8E4M3),
                ReduceOp::Max,
                c,
                true,
            )),
        ];
        // Refused before issuing: no work, and the group still reduces afterwards.
        assert_eq!(r.pg.stats().works_issued, 0);
        r.pg.all_reduce(CommBuffer::new(&ints, DType::I32), ReduceOp::Sum, c, false)
            .expect("a defined reduction still runs");
        (reasons, typed_read(r, &ints, DType::I32))
    });
    for (reasons, ints) in &out.values {
        let want = [("avg", "i32"), ("sum", "f8e4m3"), ("max", "f8e4m3")];
        for (reason, (op, dtype)) in reasons.iter().zip(want) {
            assert!(
                reason.contains(op) && reason.contains(dtype) && reason.contains("mock"),
                "names the operator, the type and the backend: {reason}"
            );
        }
        assert_eq!(*ints, vec![2.0, 4.0]);
    }
}
