//! The argument checks of process-group operations, run before anything is issued: element
//! types and counts of the buffers, and the lengths an operation requires.

use super::buffer::CommBuffer;
use super::error::PgError;
use crate::allocator::Storage;
use crate::backend::Backend;
use crate::comm::{Communicator, DType, ReduceOp};

/// The storage, element count and element type of a buffer (its size checked).
pub(super) fn typed<'t, B: Backend>(
    op: &'static str,
    buf: CommBuffer<'t, B>,
) -> Result<(&'t Storage<B>, usize, DType), PgError> {
    Ok((buf.storage(), buf.element_count(op)?, buf.dtype()))
}

/// As [`typed`] for the second buffer of an operation: same element type.
pub(super) fn same_type<'t, B: Backend>(
    op: &'static str,
    buf: CommBuffer<'t, B>,
    dtype: DType,
) -> Result<(&'t Storage<B>, usize), PgError> {
    if buf.dtype() != dtype {
        return Err(PgError::InvalidArgument {
            op,
            reason: format!(
                "input and output must have one element type (got {dtype} and {})",
                buf.dtype()
            ),
        });
    }
    Ok((buf.storage(), buf.element_count(op)?))
}

/// `got` elements where the operation's `rule` requires `want`.
pub(super) fn check_len(
    op: &'static str,
    got: usize,
    want: usize,
    rule: &str,
) -> Result<(), PgError> {
    if got == want {
        Ok(())
    } else {
        Err(PgError::InvalidArgument {
            op,
            reason: format!("{rule} (got {got}, expected {want})"),
        })
    }
}

/// A reduction the communicator cannot do (`op` on `dtype`), refused before anything is
/// issued, naming the type, the operator and the backend.
pub(super) fn reduction<B: Backend>(
    op_name: &'static str,
    comm: &dyn Communicator<B>,
    backend: &B,
    dtype: DType,
    op: ReduceOp,
) -> Result<(), PgError> {
    if comm.reduces(dtype, op) {
        return Ok(());
    }
    let why = if dtype.is_fp8() {
        "fp8 types move data but do not reduce"
    } else if op == ReduceOp::Avg && !dtype.is_floating() {
        "avg is for floating types"
    } else {
        "the backend does not implement it"
    };
    Err(PgError::InvalidArgument {
        op: op_name,
        reason: format!(
            "{op} is not defined on {dtype} on the {} backend ({why}); \
             sum, prod, max and min reduce every non-fp8 type",
            backend.name()
        ),
    })
}
