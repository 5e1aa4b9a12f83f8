//! The argument checks of process-group operations, run before anything is issued: element
//! types and counts of the buffers, and the lengths an operation requires.

use super::buffer::CommBuffer;
use super::error::PgError;
use crate::allocator::Storage;
use crate::backend::Backend;
use crate::comm::DType;

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

/// A batched point-to-point member's tensor, read as whole `f32` elements.
pub(super) fn p2p_elems<B: Backend>(op: &'static str, s: &Storage<B>) -> Result<usize, PgError> {
    CommBuffer::from(s).element_count(op)
}
