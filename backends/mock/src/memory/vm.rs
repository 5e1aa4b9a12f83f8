//! The mock's virtual memory: reserved address ranges (no device memory behind them),
//! physical handles (what the capacity limits) and mappings of whole handles into
//! reserved ranges.
//!
//! # One backing per reserved range
//! A backed device gives each reserved range one contiguous host buffer, grown on demand
//! to the end of its highest mapping (and never shrunk while the range lives: an op
//! enqueued before an unmap may still hold a span into it, and must not index past the
//! end). An access is valid exactly when every granule it touches is mapped, so one
//! access may span several mappings (a block the allocator merged across a page
//! boundary), and an access touching one unmapped granule is refused
//! ([`Memory::vm_span`]).
//!
//! A handle keeps its bytes while unmapped: `vm_map` copies them into the range's buffer
//! and `vm_unmap` copies them back out, so a handle mapped again (at the same or another
//! address) shows the bytes it held. Each mapping is also a [`RawAlloc`] (without host
//! data of its own) so overlap checks, `free`'s refusal and the race detector see it.

use std::sync::Arc;

use memreuse_core::BackendError;
use parking_lot::Mutex;

use super::{Buffer, FILL_BYTE, Memory, RawAlloc, Span};
use crate::error::BACKEND_NAME;

/// The mock's mapping granularity (CUDA's usual 2 MiB).
pub(crate) const VM_GRANULARITY: u64 = 2 << 20;

/// One physical handle.
pub(crate) struct Physical {
    len: u64,
    /// Its bytes while unmapped on a backed device (while mapped they live in the range's
    /// buffer).
    data: Option<Vec<u8>>,
    /// Where it is mapped, if it is.
    mapped_at: Option<u64>,
}

/// One reserved range.
pub(crate) struct Reserved {
    len: u64,
    /// The range's host bytes on a backed device, as long as its highest mapping so far.
    data: Option<Buffer>,
}

fn aligned(call: &'static str, what: &str, value: u64) -> Result<(), BackendError> {
    if value == 0 || value % VM_GRANULARITY != 0 {
        return Err(BackendError::invalid_argument(
            BACKEND_NAME,
            call,
            format!(
                "{what} {value:#x} is not a non-zero multiple of the granularity {VM_GRANULARITY}"
            ),
        ));
    }
    Ok(())
}

impl Memory {
    /// Reserves `bytes` of addresses, aligned to the granularity, followed by one
    /// unmapped granule so that no range abuts another.
    pub(crate) fn vm_reserve(&mut self, bytes: u64) -> Result<u64, BackendError> {
        aligned("vm_reserve", "size", bytes)?;
        let base = self
            .next_addr
            .checked_next_multiple_of(VM_GRANULARITY)
            .filter(|b| {
                b.checked_add(bytes)
                    .and_then(|e| e.checked_add(VM_GRANULARITY))
                    .is_some_and(|e| e <= self.end_addr)
            })
            .ok_or_else(|| {
                BackendError::out_of_memory(BACKEND_NAME, bytes, "fake address space exhausted")
            })?;
        self.next_addr = base + bytes + VM_GRANULARITY;
        let data = self.backing.then(|| Arc::new(Mutex::new(Vec::new())));
        self.reserved.insert(base, Reserved { len: bytes, data });
        Ok(base)
    }

    /// Releases a reserved range none of whose pages is mapped.
    pub(crate) fn vm_release(&mut self, base: u64) -> Result<(), BackendError> {
        let Some(len) = self.reserved.get(&base).map(|r| r.len) else {
            return Err(BackendError::invalid_argument(
                BACKEND_NAME,
                "vm_release",
                format!("{base:#x} is not the base of a reserved range"),
            ));
        };
        if let Some((&at, _)) = self.allocs.range(base..base + len).next() {
            return Err(BackendError::invalid_argument(
                BACKEND_NAME,
                "vm_release",
                format!("range {base:#x} still has a mapping at {at:#x}: vm_unmap it first"),
            ));
        }
        self.reserved.remove(&base);
        Ok(())
    }

    /// Creates a physical handle of `bytes`, counted against the capacity.
    pub(crate) fn vm_create_physical(&mut self, bytes: u64) -> Result<u64, BackendError> {
        aligned("vm_create_physical", "size", bytes)?;
        // Physical memory is device memory: the planned malloc fault counts it too, so
        // the allocator's OOM chain can be tested with expandable segments.
        self.planned_fault(bytes)?;
        let free = self.capacity.saturating_sub(self.used);
        if bytes > free {
            return Err(BackendError::out_of_memory(
                BACKEND_NAME,
                bytes,
                format!("{free} bytes free of {} total", self.capacity),
            ));
        }
        let data = if self.backing {
            let len = usize::try_from(bytes).map_err(|_| {
                BackendError::out_of_memory(BACKEND_NAME, bytes, "larger than host address space")
            })?;
            let mut v = Vec::new();
            v.try_reserve_exact(len).map_err(|e| {
                BackendError::out_of_memory(BACKEND_NAME, bytes, format!("host memory: {e}"))
            })?;
            v.resize(len, FILL_BYTE);
            Some(v)
        } else {
            None
        };
        let id = self.next_handle;
        self.next_handle += 1;
        self.used += bytes;
        self.physical.insert(
            id,
            Physical {
                len: bytes,
                data,
                mapped_at: None,
            },
        );
        Ok(id)
    }

    /// Releases an unmapped physical handle.
    pub(crate) fn vm_release_physical(&mut self, id: u64) -> Result<(), BackendError> {
        match self.physical.get(&id) {
            None => Err(BackendError::invalid_argument(
                BACKEND_NAME,
                "vm_release_physical",
                format!("phys#{id} is not a live physical handle"),
            )),
            Some(p) if p.mapped_at.is_some() => Err(BackendError::invalid_argument(
                BACKEND_NAME,
                "vm_release_physical",
                format!("phys#{id} is still mapped: vm_unmap it first"),
            )),
            Some(p) => {
                self.used -= p.len;
                self.physical.remove(&id);
                Ok(())
            }
        }
    }

    /// Maps the whole of handle `id` at `at`, inside a reserved range, over unmapped pages.
    /// Returns the mapping's length.
    pub(crate) fn vm_map(&mut self, at: u64, id: u64) -> Result<u64, BackendError> {
        aligned("vm_map", "address", at)?;
        let Some(p) = self.physical.get(&id) else {
            return Err(BackendError::invalid_argument(
                BACKEND_NAME,
                "vm_map",
                format!("phys#{id} is not a live physical handle"),
            ));
        };
        if let Some(other) = p.mapped_at {
            return Err(BackendError::invalid_argument(
                BACKEND_NAME,
                "vm_map",
                format!("phys#{id} is already mapped at {other:#x}"),
            ));
        }
        let len = p.len;
        let end = at.saturating_add(len);
        let range = self
            .reserved
            .range(..=at)
            .next_back()
            .filter(|(b, r)| end <= **b + r.len)
            .map(|(&b, r)| (b, r.data.clone()));
        let Some((range_base, range_data)) = range else {
            return Err(BackendError::invalid_argument(
                BACKEND_NAME,
                "vm_map",
                format!("[{at:#x}, {end:#x}) is not inside one reserved range"),
            ));
        };
        let overlaps = self
            .allocs
            .range(..end)
            .next_back()
            .is_some_and(|(&b, a)| b + a.len > at);
        if overlaps {
            return Err(BackendError::invalid_argument(
                BACKEND_NAME,
                "vm_map",
                format!("[{at:#x}, {end:#x}) overlaps a mapped page"),
            ));
        }
        let (start, stop) = host_range(at - range_base, len)?;
        if let Some(p) = self.physical.get_mut(&id) {
            p.mapped_at = Some(at);
            // Copy in: the range's bytes at the mapping become the handle's.
            if let (Some(buf), Some(bytes)) = (&range_data, p.data.take()) {
                let mut v = buf.lock();
                if v.len() < stop {
                    v.resize(stop, FILL_BYTE);
                }
                v[start..stop].copy_from_slice(&bytes);
            }
        }
        self.allocs.insert(
            at,
            RawAlloc {
                len,
                data: None,
                mapped: Some(id),
            },
        );
        Ok(len)
    }

    /// Unmaps the mapping of `bytes` at `at`.
    pub(crate) fn vm_unmap(&mut self, at: u64, bytes: u64) -> Result<(), BackendError> {
        let id = match self.allocs.get(&at) {
            Some(RawAlloc {
                len,
                mapped: Some(id),
                ..
            }) if *len == bytes => *id,
            _ => {
                return Err(BackendError::invalid_argument(
                    BACKEND_NAME,
                    "vm_unmap",
                    format!("no mapping of exactly {bytes} bytes starts at {at:#x}"),
                ));
            }
        };
        self.allocs.remove(&at);
        let range = self
            .reserved
            .range(..=at)
            .next_back()
            .map(|(&b, r)| (b, r.data.clone()));
        if let Some(p) = self.physical.get_mut(&id) {
            p.mapped_at = None;
            // Copy out: the handle keeps the bytes it held for a later mapping.
            if let Some((range_base, Some(buf))) = range {
                let (start, stop) = host_range(at - range_base, bytes)?;
                p.data = Some(buf.lock()[start..stop].to_vec());
            }
        }
        Ok(())
    }

    /// Validates `[ptr, end)`, which starts inside a mapping: every granule it touches
    /// must be mapped, in one reserved range. The span is relative to the range's base
    /// (its identity and lock-order key) and its buffer.
    pub(crate) fn vm_span(
        &self,
        call: &'static str,
        ptr: u64,
        end: u64,
    ) -> Result<Span, BackendError> {
        let Some((&base, range)) = self.reserved.range(..=ptr).next_back() else {
            return Err(BackendError::invalid_argument(
                BACKEND_NAME,
                call,
                format!("{ptr:#x} is in no reserved range"),
            ));
        };
        if end > base + range.len {
            return Err(BackendError::invalid_argument(
                BACKEND_NAME,
                call,
                format!(
                    "range [{ptr:#x}, {end:#x}) leaves the reserved range [{base:#x}, {:#x})",
                    base + range.len
                ),
            ));
        }
        let mut cursor = ptr;
        while cursor < end {
            match self.allocs.range(..=cursor).next_back() {
                Some((&b, a)) if a.mapped.is_some() && cursor < b + a.len => cursor = b + a.len,
                _ => {
                    return Err(BackendError::invalid_argument(
                        BACKEND_NAME,
                        call,
                        format!(
                            "range [{ptr:#x}, {end:#x}) touches the unmapped address {cursor:#x}"
                        ),
                    ));
                }
            }
        }
        let (offset, stop) = host_range(ptr - base, end - ptr)?;
        Ok(Span {
            base,
            offset,
            len: stop - offset,
            buf: range.data.clone(),
        })
    }
}

/// `[offset, offset + len)` as host indices.
fn host_range(offset: u64, len: u64) -> Result<(usize, usize), BackendError> {
    let start = usize::try_from(offset).map_err(|_| {
        BackendError::out_of_memory(BACKEND_NAME, len, "offset larger than host address space")
    })?;
    let stop = offset
        .checked_add(len)
        .and_then(|e| usize::try_from(e).ok())
        .ok_or_else(|| {
            BackendError::out_of_memory(BACKEND_NAME, len, "range larger than host address space")
        })?;
    Ok((start, stop))
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = VM_GRANULARITY;

    #[test]
    fn capacity_limits_mapped_bytes_not_reserved_addresses() {
        let mut m = Memory::new(1, 2 * G, true, None);
        // Reserving far more than the capacity is fine: addresses cost nothing.
        let base = m.vm_reserve(64 * G).unwrap();
        assert_eq!(m.info(), (2 * G, 2 * G));
        let a = m.vm_create_physical(G).unwrap();
        let b = m.vm_create_physical(G).unwrap();
        assert!(m.vm_create_physical(G).unwrap_err().is_out_of_memory());
        // Unmapped addresses are refused; mapped ones accepted.
        assert!(m.span("t", base, 1).is_err());
        m.vm_map(base, a).unwrap();
        m.vm_map(base + G, b).unwrap();
        assert!(m.span("t", base + G - 1, 1).is_ok());
        assert!(m.span("t", base + 2 * G, 1).is_err());
        // A mapping is not a malloc, and rules refuse out-of-order releases.
        assert!(m.exact(base).is_err());
        assert!(m.vm_release_physical(a).is_err());
        assert!(m.vm_release(base).is_err());
        assert!(m.vm_map(base + 2 * G, a).is_err(), "already mapped");
        assert!(m.vm_unmap(base, G + 1).is_err());
        m.vm_unmap(base + G, G).unwrap();
        assert!(m.span("t", base + G, 1).is_err(), "unmapped again");
        m.vm_release_physical(b).unwrap();
        assert_eq!(m.info().0, G);
        m.vm_unmap(base, G).unwrap();
        m.vm_release_physical(a).unwrap();
        m.vm_release(base).unwrap();
        assert_eq!(m.info(), (2 * G, 2 * G));
    }

    #[test]
    fn the_planned_malloc_fault_counts_physical_handles() {
        use crate::config::{FaultKind, MallocFault};
        let fault = MallocFault {
            nth: 2,
            kind: FaultKind::OutOfMemory,
        };
        let mut m = Memory::new(1, 8 * G, false, Some(fault));
        m.malloc(100).unwrap();
        let err = m.vm_create_physical(G).unwrap_err();
        assert!(err.is_out_of_memory(), "{err}");
        assert_eq!(m.info().0, 8 * G - 100, "the failed handle holds nothing");
        m.vm_create_physical(G).unwrap();
    }

    #[test]
    fn unaligned_and_outside_requests_are_refused() {
        let mut m = Memory::new(1, 4 * G, false, None);
        assert!(m.vm_reserve(G + 1).is_err());
        assert!(m.vm_create_physical(100).is_err());
        let base = m.vm_reserve(G).unwrap();
        let h = m.vm_create_physical(2 * G).unwrap();
        assert!(m.vm_map(base, h).is_err(), "larger than the range");
        assert!(m.vm_map(base + 512, h).is_err(), "unaligned");
        assert!(m.vm_map(base, 999).is_err(), "unknown handle");
    }
}
