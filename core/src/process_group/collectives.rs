//! The collectives of a process group: all_reduce, all_gather, reduce_scatter,
//! all_to_all, broadcast and barrier. Each checks its buffers, then goes through
//! [`ProcessGroup::issue`] (the policy, the work, the comm stream).

use super::buffer::CommBuffer;
use super::checks;
use super::error::PgError;
use super::group::ProcessGroup;
use super::kind::CommKind;
use super::work::Work;
use crate::allocator::Storage;
use crate::backend::Backend;
use crate::comm::ReduceOp;

impl<B: Backend> ProcessGroup<B> {
    /// In place: every member's tensor becomes the reduction over members.
    ///
    /// Tensors are `impl Into<CommBuffer>`: a `&Storage` is all of it as `f32`;
    /// [`CommBuffer::new`] / [`CommBuffer::with_count`] give the element type and count.
    pub fn all_reduce<'t>(
        &self,
        t: impl Into<CommBuffer<'t, B>>,
        op: ReduceOp,
        current: &B::Stream,
        async_op: bool,
    ) -> Result<Work<B>, PgError> {
        let (t, n, dtype) = checks::typed("all_reduce", t.into())?;
        self.check_reduction("all_reduce", dtype, op)?;
        self.issue(
            "all_reduce",
            CommKind::Collective,
            &[t],
            &[t],
            current,
            async_op,
            |c, s| c.all_reduce(t.ptr(), n, dtype, op, s),
        )
    }

    /// `output` (size x `input` elements) gathers every member's `input` by group rank.
    pub fn all_gather<'t>(
        &self,
        input: impl Into<CommBuffer<'t, B>>,
        output: impl Into<CommBuffer<'t, B>>,
        current: &B::Stream,
        async_op: bool,
    ) -> Result<Work<B>, PgError> {
        let (input, n, dtype) = checks::typed("all_gather", input.into())?;
        let (output, out_n) = checks::same_type("all_gather", output.into(), dtype)?;
        checks::check_len(
            "all_gather",
            out_n,
            n * self.size(),
            "output elements must be input elements x group size",
        )?;
        self.issue(
            "all_gather",
            CommKind::Collective,
            &[input],
            &[output],
            current,
            async_op,
            |c, s| c.all_gather(input.ptr(), output.ptr(), n, dtype, s),
        )
    }

    /// Member `r`'s `output` receives the reduction of chunk `r` of every member's `input`.
    pub fn reduce_scatter<'t>(
        &self,
        input: impl Into<CommBuffer<'t, B>>,
        output: impl Into<CommBuffer<'t, B>>,
        op: ReduceOp,
        current: &B::Stream,
        async_op: bool,
    ) -> Result<Work<B>, PgError> {
        let (output, n, dtype) = checks::typed("reduce_scatter", output.into())?;
        let (input, in_n) = checks::same_type("reduce_scatter", input.into(), dtype)?;
        checks::check_len(
            "reduce_scatter",
            in_n,
            n * self.size(),
            "input elements must be output elements x group size",
        )?;
        self.check_reduction("reduce_scatter", dtype, op)?;
        self.issue(
            "reduce_scatter",
            CommKind::Collective,
            &[input],
            &[output],
            current,
            async_op,
            |c, s| c.reduce_scatter(input.ptr(), output.ptr(), n, dtype, op, s),
        )
    }

    /// Equal-split all-to-all.
    pub fn all_to_all<'t>(
        &self,
        input: impl Into<CommBuffer<'t, B>>,
        output: impl Into<CommBuffer<'t, B>>,
        current: &B::Stream,
        async_op: bool,
    ) -> Result<Work<B>, PgError> {
        let (input, total, dtype) = checks::typed("all_to_all", input.into())?;
        let (output, out_n) = checks::same_type("all_to_all", output.into(), dtype)?;
        let size = self.size();
        checks::check_len(
            "all_to_all",
            out_n,
            total,
            "input and output must have equal lengths",
        )?;
        if size == 0 || total % size != 0 {
            return Err(PgError::InvalidArgument {
                op: "all_to_all",
                reason: format!("{total} elements are not divisible by the group size {size}"),
            });
        }
        self.issue(
            "all_to_all",
            CommKind::Collective,
            &[input],
            &[output],
            current,
            async_op,
            |c, s| c.all_to_all(input.ptr(), output.ptr(), total / size, dtype, s),
        )
    }

    /// Every member's tensor becomes group rank `root`'s.
    pub fn broadcast<'t>(
        &self,
        t: impl Into<CommBuffer<'t, B>>,
        root: usize,
        current: &B::Stream,
        async_op: bool,
    ) -> Result<Work<B>, PgError> {
        let (t, n, dtype) = checks::typed("broadcast", t.into())?;
        let (inputs, outputs): (&[&Storage<B>], &[&Storage<B>]) = if self.rank() == root {
            (&[t], &[])
        } else {
            (&[], &[t])
        };
        self.issue(
            "broadcast",
            CommKind::Collective,
            inputs,
            outputs,
            current,
            async_op,
            |c, s| c.broadcast(t.ptr(), n, dtype, root, s),
        )
    }

    /// Synchronous barrier over the group.
    pub fn barrier(&self, current: &B::Stream) -> Result<(), PgError> {
        self.issue(
            "barrier",
            CommKind::Collective,
            &[],
            &[],
            current,
            false,
            |c, s| c.barrier(s),
        )
        .map(|_| ())
    }
}
