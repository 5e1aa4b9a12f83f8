//! The object-safe layer: a backend chosen by name at run time.
//!
//! [`DynBackend`] is implemented for every [`Backend`] by a blanket impl, so backends write
//! nothing extra. [`AnyBackend`] wraps an `Arc<dyn DynBackend>` and is itself a [`Backend`]
//! whose stream and event handles are type-erased: the allocator and the process group are
//! generic over `B: Backend` and run unchanged on it.

use std::any::Any;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::backend::{Backend, Capabilities};
use crate::error::BackendError;
use crate::ids::{AllocationId, DevicePtr, MemoryInfo, StreamId};
use crate::race::RaceReport;
use crate::virtual_memory::PhysicalHandle;

/// A type-erased stream handle. Equality and hashing use the stream's id.
#[derive(Clone)]
pub struct DynStream {
    id: StreamId,
    handle: Arc<dyn Any + Send + Sync>,
}

impl DynStream {
    /// The stream's identity.
    pub fn id(&self) -> StreamId {
        self.id
    }

    /// The concrete stream handle, when it is a `T`.
    pub fn downcast_ref<T: 'static>(&self) -> Option<&T> {
        self.handle.downcast_ref::<T>()
    }
}

impl PartialEq for DynStream {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}
impl Eq for DynStream {}
impl Hash for DynStream {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.id.hash(state);
    }
}
impl fmt::Debug for DynStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DynStream({})", self.id)
    }
}

/// A type-erased event handle.
pub struct DynEvent(Box<dyn Any + Send + Sync>);

impl fmt::Debug for DynEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DynEvent")
    }
}

/// Object-safe mirror of [`Backend`], with erased handles. Implemented for every backend.
#[allow(missing_docs)] // each method is documented on `Backend`
pub trait DynBackend: Send + Sync + 'static {
    fn name(&self) -> &str;
    fn device_index(&self) -> usize;
    fn memory_info(&self) -> Result<MemoryInfo, BackendError>;
    fn capabilities(&self) -> Capabilities;
    fn async_error(&self) -> Option<BackendError>;
    fn malloc(&self, bytes: u64) -> Result<DevicePtr, BackendError>;
    fn free(&self, ptr: DevicePtr) -> Result<(), BackendError>;
    fn default_stream(&self) -> DynStream;
    fn owns_stream(&self, stream: &DynStream) -> bool;
    fn create_stream(&self) -> Result<DynStream, BackendError>;
    fn create_event(&self) -> Result<DynEvent, BackendError>;
    fn record_event(&self, event: &DynEvent, stream: &DynStream) -> Result<(), BackendError>;
    fn query_event(&self, event: &DynEvent) -> Result<bool, BackendError>;
    fn synchronize_event(&self, event: &DynEvent) -> Result<(), BackendError>;
    fn stream_wait_event(&self, stream: &DynStream, event: &DynEvent) -> Result<(), BackendError>;
    fn synchronize_stream(&self, stream: &DynStream) -> Result<(), BackendError>;
    fn synchronize_device(&self) -> Result<(), BackendError>;
    fn memset_zero(
        &self,
        ptr: DevicePtr,
        bytes: u64,
        stream: &DynStream,
    ) -> Result<(), BackendError>;
    fn copy_host_to_device(
        &self,
        dst: DevicePtr,
        src: &[u8],
        stream: &DynStream,
    ) -> Result<(), BackendError>;
    fn copy_device_to_host(
        &self,
        dst: &mut [u8],
        src: DevicePtr,
        stream: &DynStream,
    ) -> Result<(), BackendError>;
    fn copy_device_to_device(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: u64,
        stream: &DynStream,
    ) -> Result<(), BackendError>;
    fn delay(&self, micros: u64, stream: &DynStream) -> Result<(), BackendError>;
    fn annotate_allocation(&self, ptr: DevicePtr, bytes: u64, id: AllocationId);
    fn set_op_label(&self, label: &str);
    fn race_reports(&self) -> Option<Vec<RaceReport>>;
    fn vm_granularity(&self) -> Result<u64, BackendError>;
    fn vm_reserve(&self, bytes: u64) -> Result<DevicePtr, BackendError>;
    fn vm_release(&self, base: DevicePtr) -> Result<(), BackendError>;
    fn vm_create_physical(&self, bytes: u64) -> Result<PhysicalHandle, BackendError>;
    fn vm_release_physical(&self, handle: PhysicalHandle) -> Result<(), BackendError>;
    fn vm_map(&self, at: DevicePtr, handle: PhysicalHandle) -> Result<(), BackendError>;
    fn vm_unmap(&self, at: DevicePtr, bytes: u64) -> Result<(), BackendError>;
    /// The concrete backend, for backend-specific extras (fault injection on the mock).
    fn as_any(&self) -> &dyn Any;
}

fn foreign(backend: &str, call: &'static str, what: &str) -> BackendError {
    BackendError::InvalidArgument {
        backend: backend.to_owned(),
        call,
        reason: format!("{what} handle belongs to another backend"),
    }
}

impl<B: Backend> DynBackend for B {
    fn name(&self) -> &str {
        Backend::name(self)
    }
    fn device_index(&self) -> usize {
        Backend::device_index(self)
    }
    fn memory_info(&self) -> Result<MemoryInfo, BackendError> {
        Backend::memory_info(self)
    }
    fn capabilities(&self) -> Capabilities {
        Backend::capabilities(self)
    }
    fn async_error(&self) -> Option<BackendError> {
        Backend::async_error(self)
    }
    fn malloc(&self, bytes: u64) -> Result<DevicePtr, BackendError> {
        Backend::malloc(self, bytes)
    }
    fn free(&self, ptr: DevicePtr) -> Result<(), BackendError> {
        Backend::free(self, ptr)
    }
    fn owns_stream(&self, stream: &DynStream) -> bool {
        stream
            .downcast_ref::<B::Stream>()
            .is_some_and(|s| Backend::owns_stream(self, s))
    }
    fn default_stream(&self) -> DynStream {
        let s = Backend::default_stream(self);
        DynStream {
            id: self.stream_id(&s),
            handle: Arc::new(s),
        }
    }
    fn create_stream(&self) -> Result<DynStream, BackendError> {
        let s = Backend::create_stream(self)?;
        Ok(DynStream {
            id: self.stream_id(&s),
            handle: Arc::new(s),
        })
    }
    fn create_event(&self) -> Result<DynEvent, BackendError> {
        Ok(DynEvent(Box::new(Backend::create_event(self)?)))
    }
    fn record_event(&self, event: &DynEvent, stream: &DynStream) -> Result<(), BackendError> {
        Backend::record_event(
            self,
            event_of::<B>(self, event, "record_event")?,
            stream_of::<B>(self, stream, "record_event")?,
        )
    }
    fn query_event(&self, event: &DynEvent) -> Result<bool, BackendError> {
        Backend::query_event(self, event_of::<B>(self, event, "query_event")?)
    }
    fn synchronize_event(&self, event: &DynEvent) -> Result<(), BackendError> {
        Backend::synchronize_event(self, event_of::<B>(self, event, "synchronize_event")?)
    }
    fn stream_wait_event(&self, stream: &DynStream, event: &DynEvent) -> Result<(), BackendError> {
        Backend::stream_wait_event(
            self,
            stream_of::<B>(self, stream, "stream_wait_event")?,
            event_of::<B>(self, event, "stream_wait_event")?,
        )
    }
    fn synchronize_stream(&self, stream: &DynStream) -> Result<(), BackendError> {
        Backend::synchronize_stream(self, stream_of::<B>(self, stream, "synchronize_stream")?)
    }
    fn synchronize_device(&self) -> Result<(), BackendError> {
        Backend::synchronize_device(self)
    }
    fn memset_zero(
        &self,
        ptr: DevicePtr,
        bytes: u64,
        stream: &DynStream,
    ) -> Result<(), BackendError> {
        Backend::memset_zero(
            self,
            ptr,
            bytes,
            stream_of::<B>(self, stream, "memset_zero")?,
        )
    }
    fn copy_host_to_device(
        &self,
        dst: DevicePtr,
        src: &[u8],
        stream: &DynStream,
    ) -> Result<(), BackendError> {
        Backend::copy_host_to_device(
            self,
            dst,
            src,
            stream_of::<B>(self, stream, "copy_host_to_device")?,
        )
    }
    fn copy_device_to_host(
        &self,
        dst: &mut [u8],
        src: DevicePtr,
        stream: &DynStream,
    ) -> Result<(), BackendError> {
        Backend::copy_device_to_host(
            self,
            dst,
            src,
            stream_of::<B>(self, stream, "copy_device_to_host")?,
        )
    }
    fn copy_device_to_device(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: u64,
        stream: &DynStream,
    ) -> Result<(), BackendError> {
        Backend::copy_device_to_device(
            self,
            dst,
            src,
            bytes,
            stream_of::<B>(self, stream, "copy_device_to_device")?,
        )
    }
    fn delay(&self, micros: u64, stream: &DynStream) -> Result<(), BackendError> {
        Backend::delay(self, micros, stream_of::<B>(self, stream, "delay")?)
    }
    fn annotate_allocation(&self, ptr: DevicePtr, bytes: u64, id: AllocationId) {
        Backend::annotate_allocation(self, ptr, bytes, id);
    }
    fn set_op_label(&self, label: &str) {
        Backend::set_op_label(self, label);
    }
    fn race_reports(&self) -> Option<Vec<RaceReport>> {
        Backend::race_reports(self)
    }
    fn vm_granularity(&self) -> Result<u64, BackendError> {
        Backend::vm_granularity(self)
    }
    fn vm_reserve(&self, bytes: u64) -> Result<DevicePtr, BackendError> {
        Backend::vm_reserve(self, bytes)
    }
    fn vm_release(&self, base: DevicePtr) -> Result<(), BackendError> {
        Backend::vm_release(self, base)
    }
    fn vm_create_physical(&self, bytes: u64) -> Result<PhysicalHandle, BackendError> {
        Backend::vm_create_physical(self, bytes)
    }
    fn vm_release_physical(&self, handle: PhysicalHandle) -> Result<(), BackendError> {
        Backend::vm_release_physical(self, handle)
    }
    fn vm_map(&self, at: DevicePtr, handle: PhysicalHandle) -> Result<(), BackendError> {
        Backend::vm_map(self, at, handle)
    }
    fn vm_unmap(&self, at: DevicePtr, bytes: u64) -> Result<(), BackendError> {
        Backend::vm_unmap(self, at, bytes)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

fn stream_of<'a, B: Backend>(
    b: &B,
    s: &'a DynStream,
    call: &'static str,
) -> Result<&'a B::Stream, BackendError> {
    s.handle
        .downcast_ref::<B::Stream>()
        .ok_or_else(|| foreign(Backend::name(b), call, "stream"))
}

fn event_of<'a, B: Backend>(
    b: &B,
    e: &'a DynEvent,
    call: &'static str,
) -> Result<&'a B::Event, BackendError> {
    e.0.downcast_ref::<B::Event>()
        .ok_or_else(|| foreign(Backend::name(b), call, "event"))
}

/// A backend picked at run time: a cheap, clonable handle around `Arc<dyn DynBackend>`.
///
/// It implements [`Backend`], so `CachingAllocator<AnyBackend>` works like any other.
#[derive(Clone)]
pub struct AnyBackend(Arc<dyn DynBackend>);

impl AnyBackend {
    /// Wraps a concrete backend.
    pub fn new<B: Backend>(backend: B) -> AnyBackend {
        AnyBackend(Arc::new(backend))
    }

    /// Wraps an already shared backend object.
    pub fn from_arc(backend: Arc<dyn DynBackend>) -> AnyBackend {
        AnyBackend(backend)
    }

    /// The concrete backend, when it is a `B` (for backend-specific extras).
    pub fn downcast_ref<B: Backend>(&self) -> Option<&B> {
        self.0.as_any().downcast_ref::<B>()
    }
}

impl fmt::Debug for AnyBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AnyBackend({}:{})", self.0.name(), self.0.device_index())
    }
}

impl Backend for AnyBackend {
    type Stream = DynStream;
    type Event = DynEvent;

    fn name(&self) -> &str {
        self.0.name()
    }
    fn device_index(&self) -> usize {
        self.0.device_index()
    }
    fn memory_info(&self) -> Result<MemoryInfo, BackendError> {
        self.0.memory_info()
    }
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
    fn async_error(&self) -> Option<BackendError> {
        self.0.async_error()
    }
    fn malloc(&self, bytes: u64) -> Result<DevicePtr, BackendError> {
        self.0.malloc(bytes)
    }
    fn free(&self, ptr: DevicePtr) -> Result<(), BackendError> {
        self.0.free(ptr)
    }
    fn default_stream(&self) -> DynStream {
        self.0.default_stream()
    }
    fn create_stream(&self) -> Result<DynStream, BackendError> {
        self.0.create_stream()
    }
    fn owns_stream(&self, stream: &DynStream) -> bool {
        self.0.owns_stream(stream)
    }
    fn stream_id(&self, stream: &DynStream) -> StreamId {
        stream.id
    }
    fn create_event(&self) -> Result<DynEvent, BackendError> {
        self.0.create_event()
    }
    fn record_event(&self, event: &DynEvent, stream: &DynStream) -> Result<(), BackendError> {
        self.0.record_event(event, stream)
    }
    fn query_event(&self, event: &DynEvent) -> Result<bool, BackendError> {
        self.0.query_event(event)
    }
    fn synchronize_event(&self, event: &DynEvent) -> Result<(), BackendError> {
        self.0.synchronize_event(event)
    }
    fn stream_wait_event(&self, stream: &DynStream, event: &DynEvent) -> Result<(), BackendError> {
        self.0.stream_wait_event(stream, event)
    }
    fn synchronize_stream(&self, stream: &DynStream) -> Result<(), BackendError> {
        self.0.synchronize_stream(stream)
    }
    fn synchronize_device(&self) -> Result<(), BackendError> {
        self.0.synchronize_device()
    }
    fn memset_zero(
        &self,
        ptr: DevicePtr,
        bytes: u64,
        stream: &DynStream,
    ) -> Result<(), BackendError> {
        self.0.memset_zero(ptr, bytes, stream)
    }
    fn copy_host_to_device(
        &self,
        dst: DevicePtr,
        src: &[u8],
        stream: &DynStream,
    ) -> Result<(), BackendError> {
        self.0.copy_host_to_device(dst, src, stream)
    }
    fn copy_device_to_host(
        &self,
        dst: &mut [u8],
        src: DevicePtr,
        stream: &DynStream,
    ) -> Result<(), BackendError> {
        self.0.copy_device_to_host(dst, src, stream)
    }
    fn copy_device_to_device(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: u64,
        stream: &DynStream,
    ) -> Result<(), BackendError> {
        self.0.copy_device_to_device(dst, src, bytes, stream)
    }
    fn delay(&self, micros: u64, stream: &DynStream) -> Result<(), BackendError> {
        self.0.delay(micros, stream)
    }
    fn annotate_allocation(&self, ptr: DevicePtr, bytes: u64, id: AllocationId) {
        self.0.annotate_allocation(ptr, bytes, id);
    }
    fn set_op_label(&self, label: &str) {
        self.0.set_op_label(label);
    }
    fn race_reports(&self) -> Option<Vec<RaceReport>> {
        self.0.race_reports()
    }
    fn vm_granularity(&self) -> Result<u64, BackendError> {
        self.0.vm_granularity()
    }
    fn vm_reserve(&self, bytes: u64) -> Result<DevicePtr, BackendError> {
        self.0.vm_reserve(bytes)
    }
    fn vm_release(&self, base: DevicePtr) -> Result<(), BackendError> {
        self.0.vm_release(base)
    }
    fn vm_create_physical(&self, bytes: u64) -> Result<PhysicalHandle, BackendError> {
        self.0.vm_create_physical(bytes)
    }
    fn vm_release_physical(&self, handle: PhysicalHandle) -> Result<(), BackendError> {
        self.0.vm_release_physical(handle)
    }
    fn vm_map(&self, at: DevicePtr, handle: PhysicalHandle) -> Result<(), BackendError> {
        self.0.vm_map(at, handle)
    }
    fn vm_unmap(&self, at: DevicePtr, bytes: u64) -> Result<(), BackendError> {
        self.0.vm_unmap(at, bytes)
    }
}
