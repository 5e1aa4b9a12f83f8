//! The cubecl peer: cubecl-server's `MemoryManagement` over a storage that never touches
//! memory.

use super::*;

/// A cubecl `ComputeStorage` that hands out fake addresses and never touches memory
/// (cubecl's own `BytesStorage` zeroes every byte, which would measure page faults).
/// Deallocations take effect at once (no deferral to `flush`), which can only lower
/// cubecl's reserved figures. Tracks the bytes held and their peak.
#[derive(Default)]
pub struct NullStorage {
    live: HashMap<StorageId, (u64, u64)>,
    next_addr: u64,
    allocated: u64,
    peak: u64,
    allocs: u64,
    deallocs: u64,
}

impl NullStorage {
    /// Peak of the bytes held.
    pub fn peak(&self) -> u64 {
        self.peak
    }

    /// `(page allocations, page deallocations)` so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.allocs, self.deallocs)
    }
}

impl ComputeStorage for NullStorage {
    /// The fake device address of the handle's range.
    type Resource = u64;

    fn alignment(&self) -> usize {
        CUBECL_ALIGNMENT as usize
    }

    fn get(&mut self, handle: &StorageHandle) -> Result<u64, IoError> {
        let (addr, _) = self
            .live
            .get(&handle.id)
            .copied()
            .expect("NullStorage::get on a deallocated id");
        Ok(addr + handle.offset())
    }

    fn alloc(&mut self, size: u64) -> Result<StorageHandle, IoError> {
        let id = StorageId::new();
        let addr = (1 << 40) + self.next_addr;
        self.next_addr += size.next_multiple_of(4096) + 4096;
        self.live.insert(id, (addr, size));
        self.allocated += size;
        self.peak = self.peak.max(self.allocated);
        self.allocs += 1;
        Ok(StorageHandle::new(
            id,
            StorageUtilization { offset: 0, size },
        ))
    }

    fn dealloc(&mut self, id: StorageId) {
        if let Some((_, size)) = self.live.remove(&id) {
            self.allocated -= size;
            self.deallocs += 1;
        }
    }

    fn flush(&mut self) {}

    fn bytes_allocated(&self) -> u64 {
        self.allocated
    }
}

/// cubecl-server 0.11.3 `MemoryManagement` over [`NullStorage`], reserving with
/// `PageUpdate::Allow` (periodic cleanup on every reservation, as the server does).
pub struct CubeCl {
    /// The memory management.
    pub mm: MemoryManagement<NullStorage>,
    failures: ErrorGraph,
}

impl CubeCl {
    /// A memory management with `config` on a device of [`CAPACITY`] bytes,
    /// [`CUBECL_MAX_PAGE`]-byte pages at most and [`CUBECL_ALIGNMENT`] alignment.
    pub fn new(config: MemoryConfiguration) -> Self {
        let props = MemoryDeviceProperties::new(CUBECL_MAX_PAGE, CUBECL_ALIGNMENT)
            .with_max_memory(CAPACITY);
        let mm = MemoryManagement::from_configuration(
            NullStorage::default(),
            &props,
            config,
            Arc::new(ServerLogger::default()),
            MemoryManagementOptions::new("bench"),
        );
        CubeCl {
            mm,
            failures: ErrorGraph::default(),
        }
    }

    /// `bytes_reserved` summed over cubecl's own memory report.
    pub fn report_reserved(&self) -> u64 {
        self.mm.memory_report().usage().bytes_reserved
    }
}

impl Peer for CubeCl {
    type Handle = ManagedMemoryHandle;

    #[inline]
    fn alloc(&mut self, size: u64) -> ManagedMemoryHandle {
        self.mm
            .reserve(size, PageUpdate::Allow, &mut self.failures)
            .expect("cubecl reserve")
    }

    #[inline]
    fn free(&mut self, handle: ManagedMemoryHandle) {
        drop(handle);
    }

    fn reserved_peak(&mut self) -> Option<u64> {
        // What the storage held at its peak: every page the pools kept, whatever pool.
        // (cubecl's report has per-pool `pages_peak` but no byte peak.)
        Some(self.mm.storage().peak())
    }

    fn reserved_now(&self) -> Option<u64> {
        Some(self.mm.bytes_allocated())
    }
}
