//! The backend contract kit (`memreuse::testing::contract`) on every backend linked into
//! this build (the mock by default; the Ascend FFI path and CUDA with their features), and
//! proof that the kit catches a backend that breaks the contract: a mock wrapped so that
//! one method misbehaves.

use std::sync::Arc;

use memreuse::mock::{MockConfig, MockDevice};
use memreuse::testing::contract::{ContractOptions, check_backend};
use memreuse::{
    AllocationId, Backend, BackendError, BackendOptions, DevicePtr, MemoryInfo, RaceReport,
    StreamId, open_backend, registered_backends,
};

const CAPACITY: u64 = 64 << 20;

fn options_for(name: &str) -> ContractOptions {
    match name {
        // The mock checks every address and has the capacity it was given.
        "mock" => ContractOptions {
            oom_request: Some(CAPACITY + 1),
            checks_addresses: true,
            ..ContractOptions::default()
        },
        _ => ContractOptions::default(),
    }
}

#[test]
fn every_linked_backend_keeps_the_device_contract() {
    let mut ran = 0;
    for reg in registered_backends() {
        match (reg.device_count)() {
            Ok(n) if n > 0 => {}
            Ok(_) => {
                println!("skipped: backend {} has no device here", reg.name);
                continue;
            }
            Err(e) => {
                println!("skipped: backend {}: {e}", reg.name);
                continue;
            }
        }
        let options = BackendOptions {
            memory_capacity: Some(CAPACITY),
            ..BackendOptions::default()
        };
        let backend = Arc::new(open_backend(reg.name, &options).expect("opens device 0"));
        let report = check_backend(&backend, &options_for(reg.name));
        println!(
            "{}: passed {:?}, skipped {:?}",
            reg.name, report.passed, report.skipped
        );
        report.assert_passed();
        ran += 1;
    }
    assert!(ran >= 1, "the mock is always linked into the tests");
}

/// Which rule the wrapper breaks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Flaw {
    IgnoresEventWaits,
    MemsetDoesNothing,
    OomIsAGenericError,
    StreamsShareAnId,
    PanicsInMemset,
    /// Declares 4096-byte alignment the mock (512) does not give.
    OverstatesAlignment,
    /// `malloc(0)` reports out of memory instead of refusing the argument.
    ZeroIsOutOfMemory,
    /// `synchronize_device` fails (a device fault), while streams still hold work.
    SynchronizeFails,
}

/// The mock with one flaw: what a port with that bug would look like to the kit.
struct Flawed {
    inner: MockDevice,
    flaw: Flaw,
}

impl Backend for Flawed {
    type Stream = <MockDevice as Backend>::Stream;
    type Event = <MockDevice as Backend>::Event;

    fn name(&self) -> &'static str {
        "flawed"
    }
    fn device_index(&self) -> usize {
        self.inner.device_index()
    }
    fn memory_info(&self) -> Result<MemoryInfo, BackendError> {
        self.inner.memory_info()
    }
    fn capabilities(&self) -> memreuse_core::Capabilities {
        let mut c = self.inner.capabilities();
        // The wrapper forwards no vm_* call, so it must not claim the mock's.
        c.virtual_memory = false;
        if self.flaw == Flaw::OverstatesAlignment {
            c.allocation_alignment = 4096;
        }
        c
    }
    fn malloc(&self, bytes: u64) -> Result<DevicePtr, BackendError> {
        if self.flaw == Flaw::ZeroIsOutOfMemory && bytes == 0 {
            return Err(BackendError::OutOfMemory {
                backend: "flawed".into(),
                requested: 0,
                detail: "zero".into(),
            });
        }
        match self.inner.malloc(bytes) {
            Err(e) if self.flaw == Flaw::OomIsAGenericError && e.is_out_of_memory() => {
                Err(BackendError::InvalidArgument {
                    backend: "flawed".into(),
                    call: "malloc",
                    reason: e.to_string(),
                })
            }
            r => r,
        }
    }
    fn free(&self, ptr: DevicePtr) -> Result<(), BackendError> {
        self.inner.free(ptr)
    }
    fn default_stream(&self) -> Self::Stream {
        self.inner.default_stream()
    }
    fn create_stream(&self) -> Result<Self::Stream, BackendError> {
        self.inner.create_stream()
    }
    fn stream_id(&self, stream: &Self::Stream) -> StreamId {
        if self.flaw == Flaw::StreamsShareAnId {
            StreamId(0)
        } else {
            self.inner.stream_id(stream)
        }
    }
    fn create_event(&self) -> Result<Self::Event, BackendError> {
        self.inner.create_event()
    }
    fn record_event(&self, event: &Self::Event, stream: &Self::Stream) -> Result<(), BackendError> {
        self.inner.record_event(event, stream)
    }
    fn query_event(&self, event: &Self::Event) -> Result<bool, BackendError> {
        self.inner.query_event(event)
    }
    fn synchronize_event(&self, event: &Self::Event) -> Result<(), BackendError> {
        self.inner.synchronize_event(event)
    }
    fn stream_wait_event(
        &self,
        stream: &Self::Stream,
        event: &Self::Event,
    ) -> Result<(), BackendError> {
        if self.flaw == Flaw::IgnoresEventWaits {
            Ok(())
        } else {
            self.inner.stream_wait_event(stream, event)
        }
    }
    fn synchronize_stream(&self, stream: &Self::Stream) -> Result<(), BackendError> {
        self.inner.synchronize_stream(stream)
    }
    fn synchronize_device(&self) -> Result<(), BackendError> {
        if self.flaw == Flaw::SynchronizeFails {
            return Err(BackendError::DeviceLost {
                backend: "flawed".into(),
                reason: "planted".into(),
            });
        }
        self.inner.synchronize_device()
    }
    fn memset_zero(
        &self,
        ptr: DevicePtr,
        bytes: u64,
        stream: &Self::Stream,
    ) -> Result<(), BackendError> {
        if self.flaw == Flaw::MemsetDoesNothing {
            Ok(())
        } else if self.flaw == Flaw::PanicsInMemset {
            unimplemented!("memset_zero is not ported yet")
        } else {
            self.inner.memset_zero(ptr, bytes, stream)
        }
    }
    fn copy_host_to_device(
        &self,
        dst: DevicePtr,
        src: &[u8],
        stream: &Self::Stream,
    ) -> Result<(), BackendError> {
        self.inner.copy_host_to_device(dst, src, stream)
    }
    fn copy_device_to_host(
        &self,
        dst: &mut [u8],
        src: DevicePtr,
        stream: &Self::Stream,
    ) -> Result<(), BackendError> {
        self.inner.copy_device_to_host(dst, src, stream)
    }
    fn copy_device_to_device(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: u64,
        stream: &Self::Stream,
    ) -> Result<(), BackendError> {
        self.inner.copy_device_to_device(dst, src, bytes, stream)
    }
    fn delay(&self, micros: u64, stream: &Self::Stream) -> Result<(), BackendError> {
        self.inner.delay(micros, stream)
    }
    // The optional methods too: without `race_reports` the kit could judge only by bytes.
    fn annotate_allocation(&self, ptr: DevicePtr, bytes: u64, id: AllocationId) {
        self.inner.annotate_allocation(ptr, bytes, id);
    }
    fn set_op_label(&self, label: &str) {
        self.inner.set_op_label(label);
    }
    fn race_reports(&self) -> Option<Vec<RaceReport>> {
        self.inner.race_reports()
    }
}

fn violations_of(flaw: Flaw) -> Vec<&'static str> {
    let inner = MockDevice::new(MockConfig::with_capacity(CAPACITY)).unwrap();
    let backend = Arc::new(Flawed { inner, flaw });
    let report = check_backend(&backend, &options_for("mock"));
    report.violations.iter().map(|v| v.check).collect()
}

#[test]
fn the_kit_catches_a_backend_that_ignores_event_waits() {
    // The producer's write sits behind a 2 ms delay, so without the wait the consumer
    // usually copies zeros; the mock's race detector flags the missing order whatever the
    // timing, so the verdict does not depend on the machine's load.
    let inner = MockDevice::new(MockConfig::with_capacity(CAPACITY)).unwrap();
    let backend = Arc::new(Flawed {
        inner,
        flaw: Flaw::IgnoresEventWaits,
    });
    let report = check_backend(&backend, &options_for("mock"));
    let checks: Vec<_> = report.violations.iter().map(|v| v.check).collect();
    assert_eq!(checks, ["event_orders_streams"], "{report:?}");
    let what = &report.violations[0].what;
    assert!(
        what.contains("did not see that write") || what.contains("race detector flagged"),
        "{what}"
    );
    // With no delay at all the bytes usually come out right; the detector still says no.
    let inner = MockDevice::new(MockConfig::with_capacity(CAPACITY)).unwrap();
    let backend = Arc::new(Flawed {
        inner,
        flaw: Flaw::IgnoresEventWaits,
    });
    let options = ContractOptions {
        delay_micros: 0,
        ..options_for("mock")
    };
    let report = check_backend(&backend, &options);
    let checks: Vec<_> = report.violations.iter().map(|v| v.check).collect();
    assert_eq!(checks, ["event_orders_streams"], "{report:?}");
}

#[test]
fn the_kit_catches_a_memset_that_does_nothing() {
    let v = violations_of(Flaw::MemsetDoesNothing);
    assert!(v.contains(&"copies_round_trip"), "{v:?}");
    assert!(v.contains(&"stream_order"), "{v:?}");
}

#[test]
fn the_kit_catches_an_oom_the_allocator_could_not_retry() {
    assert_eq!(
        violations_of(Flaw::OomIsAGenericError),
        ["out_of_memory_is_typed"]
    );
}

#[test]
fn the_kit_catches_streams_that_share_an_id() {
    let v = violations_of(Flaw::StreamsShareAnId);
    assert!(v.contains(&"identity"), "{v:?}");
}

#[test]
fn a_backend_that_panics_is_reported_and_the_other_checks_still_run() {
    let inner = MockDevice::new(MockConfig::with_capacity(CAPACITY)).unwrap();
    let backend = Arc::new(Flawed {
        inner,
        flaw: Flaw::PanicsInMemset,
    });
    let report = check_backend(&backend, &options_for("mock"));
    let broken: Vec<_> = report.violations.iter().map(|v| v.check).collect();
    assert!(broken.contains(&"copies_round_trip"), "{report:?}");
    assert!(
        report.violations.iter().all(|v| v
            .what
            .contains("the backend panicked: not implemented: memset_zero")),
        "{report:?}"
    );
    assert!(
        report.passed.contains(&"out_of_memory_is_typed"),
        "{report:?}"
    );
    assert!(
        report.passed.contains(&"caching_allocator_runs"),
        "{report:?}"
    );
    // The buffers of the interrupted checks went back to the device.
    assert_eq!(backend.inner.memory_info().unwrap().free, CAPACITY);
}

#[test]
fn the_kit_catches_an_alignment_the_backend_does_not_give() {
    // The mock's addresses are 512-aligned: its first allocation starts a 4096-aligned
    // address slice, the second lies 1024 bytes further.
    assert_eq!(
        violations_of(Flaw::OverstatesAlignment),
        ["allocation_alignment"]
    );
}

#[test]
fn the_kit_catches_a_malloc_zero_outside_the_contract() {
    assert_eq!(violations_of(Flaw::ZeroIsOutOfMemory), ["malloc_zero"]);
}

#[test]
fn after_a_failed_synchronize_the_kit_does_not_free_its_buffers() {
    let inner = MockDevice::new(MockConfig::with_capacity(CAPACITY)).unwrap();
    let backend = Arc::new(Flawed {
        inner,
        flaw: Flaw::SynchronizeFails,
    });
    let report = check_backend(&backend, &options_for("mock"));
    let left: Vec<_> = report
        .violations
        .iter()
        .filter(|v| v.what.contains("left allocated"))
        .map(|v| v.check)
        .collect();
    assert!(left.contains(&"copies_round_trip"), "{report:?}");
    // Those buffers are still allocated on the device: nothing freed memory that work
    // might still write.
    assert!(
        backend.inner.memory_info().unwrap().free < CAPACITY,
        "{report:?}"
    );
}
