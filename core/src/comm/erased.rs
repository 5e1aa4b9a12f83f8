//! A communicator of a concrete backend seen as a communicator of [`AnyBackend`].

use std::marker::PhantomData;

use super::{CommError, Communicator, DType, ReduceOp};
use crate::backend::Backend;
use crate::dyn_backend::{AnyBackend, DynStream};
use crate::ids::DevicePtr;

/// Adapts a `Communicator<B>` to `Communicator<AnyBackend>` by unwrapping the erased
/// stream handles. A stream of another backend is an `InvalidArgument` error.
pub struct ErasedCommunicator<B: Backend> {
    inner: Box<dyn Communicator<B>>,
    _backend: PhantomData<fn() -> B>,
}

impl<B: Backend> ErasedCommunicator<B> {
    /// Wraps a concrete communicator.
    pub fn new(inner: Box<dyn Communicator<B>>) -> Self {
        ErasedCommunicator {
            inner,
            _backend: PhantomData,
        }
    }
}

fn concrete<'a, B: Backend>(
    s: &'a DynStream,
    call: &'static str,
) -> Result<&'a B::Stream, CommError> {
    s.downcast_ref::<B::Stream>()
        .ok_or_else(|| CommError::InvalidArgument {
            call,
            reason: "stream belongs to another backend".to_owned(),
        })
}

impl<B: Backend> Communicator<AnyBackend> for ErasedCommunicator<B> {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn reduces(&self, dtype: DType, op: ReduceOp) -> bool {
        self.inner.reduces(dtype, op)
    }
    fn all_reduce(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        op: ReduceOp,
        stream: &DynStream,
    ) -> Result<(), CommError> {
        self.inner
            .all_reduce(buf, count, dtype, op, concrete::<B>(stream, "all_reduce")?)
    }
    fn all_gather(
        &self,
        input: DevicePtr,
        output: DevicePtr,
        count: usize,
        dtype: DType,
        stream: &DynStream,
    ) -> Result<(), CommError> {
        self.inner.all_gather(
            input,
            output,
            count,
            dtype,
            concrete::<B>(stream, "all_gather")?,
        )
    }
    fn reduce_scatter(
        &self,
        input: DevicePtr,
        output: DevicePtr,
        count: usize,
        dtype: DType,
        op: ReduceOp,
        stream: &DynStream,
    ) -> Result<(), CommError> {
        self.inner.reduce_scatter(
            input,
            output,
            count,
            dtype,
            op,
            concrete::<B>(stream, "reduce_scatter")?,
        )
    }
    fn all_to_all(
        &self,
        input: DevicePtr,
        output: DevicePtr,
        count: usize,
        dtype: DType,
        stream: &DynStream,
    ) -> Result<(), CommError> {
        self.inner.all_to_all(
            input,
            output,
            count,
            dtype,
            concrete::<B>(stream, "all_to_all")?,
        )
    }
    fn broadcast(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        root: usize,
        stream: &DynStream,
    ) -> Result<(), CommError> {
        self.inner
            .broadcast(buf, count, dtype, root, concrete::<B>(stream, "broadcast")?)
    }
    fn send(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        peer: usize,
        stream: &DynStream,
    ) -> Result<(), CommError> {
        self.inner
            .send(buf, count, dtype, peer, concrete::<B>(stream, "send")?)
    }
    fn recv(
        &self,
        buf: DevicePtr,
        count: usize,
        dtype: DType,
        peer: usize,
        stream: &DynStream,
    ) -> Result<(), CommError> {
        self.inner
            .recv(buf, count, dtype, peer, concrete::<B>(stream, "recv")?)
    }
    fn group_start(&self) -> Result<(), CommError> {
        self.inner.group_start()
    }
    fn group_end(&self) -> Result<(), CommError> {
        self.inner.group_end()
    }
    fn barrier(&self, stream: &DynStream) -> Result<(), CommError> {
        self.inner.barrier(concrete::<B>(stream, "barrier")?)
    }
    fn new_group(
        &self,
        ranks: &[usize],
    ) -> Result<Option<Box<dyn Communicator<AnyBackend>>>, CommError> {
        Ok(self.inner.new_group(ranks)?.map(|c| {
            Box::new(ErasedCommunicator::<B>::new(c)) as Box<dyn Communicator<AnyBackend>>
        }))
    }
    fn async_error(&self) -> Option<CommError> {
        self.inner.async_error()
    }
    fn abort(&self) {
        self.inner.abort();
    }
}
