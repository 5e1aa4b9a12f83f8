//! Collectives take the element type and count of their buffers: a buffer whose size is
//! not a whole number of elements, or a count that does not fit, is a typed error issued
//! before any work (the group stays usable); an explicit count communicates exactly that
//! many elements and leaves the rest of the buffer alone.

mod common;

use common::{Setup, run};
use memreuse::{CommBuffer, DType, P2pOp, PgError, ReduceOp, ReuseMode};

fn invalid_reason(result: Result<memreuse::Work<memreuse::mock::MockDevice>, PgError>) -> String {
    match result {
        Err(PgError::InvalidArgument { reason, .. }) => reason,
        Err(other) => panic!("expected InvalidArgument, got {other}"),
        Ok(_) => panic!("expected InvalidArgument, got a work"),
    }
}

#[test]
fn a_buffer_that_is_not_whole_f32_elements_is_refused_by_every_collective() {
    let out = run(&Setup::new(2, ReuseMode::AvoidRecordStream), |r| {
        let c = &r.compute;
        // 6 bytes: one and a half f32. The old process group truncated this to 1 element.
        let odd = r.allocator.allocate(6, c).expect("allocate");
        let whole = r.tensor(2, 1.0, c);
        let mut reasons = vec![
            invalid_reason(r.pg.all_reduce(&odd, ReduceOp::Sum, c, true)),
            invalid_reason(r.pg.broadcast(&odd, 0, c, true)),
            invalid_reason(r.pg.all_gather(&whole, &odd, c, true)),
            invalid_reason(r.pg.reduce_scatter(&odd, &whole, ReduceOp::Sum, c, true)),
            invalid_reason(r.pg.all_to_all(&odd, &whole, c, true)),
            invalid_reason(r.pg.send(&odd, 1 - r.rank, c, true)),
            invalid_reason(r.pg.recv(&odd, 1 - r.rank, c, true)),
        ];
        let ops = [
            P2pOp::Send(&whole, 1 - r.rank),
            P2pOp::Recv(&odd, 1 - r.rank),
        ];
        reasons.push(invalid_reason(r.pg.batch_isend_irecv(&ops, c)));
        // Nothing was issued, and the group still works afterwards.
        assert_eq!(r.pg.stats().works_issued, 0);
        r.pg.all_reduce(&whole, ReduceOp::Sum, c, false)
            .expect("a whole buffer still reduces");
        (reasons, r.read(&whole, c))
    });
    assert!(out.races.is_empty());
    for (reasons, values) in &out.values {
        assert_eq!(reasons.len(), 8);
        for reason in reasons {
            assert!(
                reason.contains("6 bytes") && reason.contains("f32"),
                "the error names the size and the element type: {reason}"
            );
        }
        // Rank 0 holds 1.0s and rank 1 2.0s: the sum is 3.0 everywhere.
        assert_eq!(*values, vec![3.0, 3.0]);
    }
}

#[test]
fn an_explicit_count_reduces_only_the_first_elements() {
    let out = run(&Setup::new(2, ReuseMode::EraseRecordStream), |r| {
        let c = &r.compute;
        let base = 10.0 * r.rank as f32;
        let t = r.tensor_with(&[base + 1.0, base + 2.0, base + 3.0, base + 4.0], c);
        let first_two = CommBuffer::new(&t, DType::F32).with_count(2);
        r.pg.all_reduce(first_two, ReduceOp::Sum, c, true)
            .expect("issue")
            .wait(c)
            .expect("wait");
        r.read(&t, c)
    });
    assert!(out.races.is_empty());
    assert_eq!(out.values[0], vec![12.0, 14.0, 3.0, 4.0]);
    assert_eq!(out.values[1], vec![12.0, 14.0, 13.0, 14.0]);
}

#[test]
fn a_count_larger_than_the_buffer_is_refused_naming_the_limit() {
    let out = run(&Setup::new(2, ReuseMode::AvoidRecordStream), |r| {
        let c = &r.compute;
        let t = r.tensor(4, 0.0, c);
        let too_many = CommBuffer::new(&t, DType::F32).with_count(5);
        let reason = invalid_reason(r.pg.all_reduce(too_many, ReduceOp::Sum, c, true));
        let huge = CommBuffer::new(&t, DType::F32).with_count(usize::MAX);
        let overflow = invalid_reason(r.pg.broadcast(huge, 0, c, true));
        (reason, overflow, r.pg.stats().works_issued)
    });
    for (reason, overflow, issued) in &out.values {
        assert!(reason.contains("5 f32 elements"), "{reason}");
        assert!(reason.contains("16 bytes"), "{reason}");
        assert!(reason.contains("at most 4 elements"), "{reason}");
        assert!(overflow.contains("at most 4 elements"), "{overflow}");
        assert_eq!(*issued, 0);
    }
}
