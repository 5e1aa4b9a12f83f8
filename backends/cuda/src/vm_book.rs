//! The bookkeeping behind [`crate::CudaDevice`]'s virtual-memory calls, kept apart from the
//! driver so that its rules are tested without a GPU: what one device reserved
//! (`cuMemAddressReserve`), created (`cuMemCreate`) and mapped (`cuMemMap`), and the misuse
//! `memreuse_core::virtual_memory` says a port must refuse. Each `check_*` runs before the
//! driver call and returns [`BackendError::InvalidArgument`] naming the rule; each `record_*`
//! runs only after the driver succeeded, so a refused or failed call changes nothing.

use std::collections::{BTreeMap, HashMap};

use memreuse_core::{BackendError, DevicePtr, PhysicalHandle};

use crate::error;

/// The smallest granularity accepted from the driver: the allocation alignment every
/// backend keeps (`memreuse_core::Capabilities::allocation_alignment`).
const MIN_GRANULARITY: u64 = 256;

/// One physical handle.
struct Physical {
    bytes: u64,
    mapped_at: Option<u64>,
}

/// Reserved ranges, physical handles and mappings of one device.
#[derive(Default)]
pub(crate) struct VmBook {
    /// Base -> bytes.
    reserved: BTreeMap<u64, u64>,
    /// Handle -> its size and where it is mapped.
    handles: HashMap<u64, Physical>,
    /// Address -> (bytes, handle).
    mappings: BTreeMap<u64, (u64, u64)>,
}

/// What [`VmBook::take_all`] hands over, in the order it must be released.
pub(crate) struct Held {
    /// (address, bytes) of each mapping.
    pub(crate) mappings: Vec<(u64, u64)>,
    /// Each physical handle.
    pub(crate) handles: Vec<u64>,
    /// (base, bytes) of each reserved range.
    pub(crate) ranges: Vec<(u64, u64)>,
}

/// `value` is a non-zero multiple of `granularity`.
pub(crate) fn check_aligned(
    call: &'static str,
    what: &str,
    value: u64,
    granularity: u64,
) -> Result<(), BackendError> {
    if value == 0 || value % granularity != 0 {
        return Err(error::invalid(
            call,
            format!(
                "{what} {value:#x} is not a non-zero multiple of the granularity {granularity}"
            ),
        ));
    }
    Ok(())
}

/// The granularity the driver reported, if it keeps the core's rules (a power of two, a
/// multiple of the 256-byte allocation alignment). Anything else is the driver's fault,
/// not the caller's: a `Device` error naming the call, never `InvalidArgument`.
pub(crate) fn check_granularity(g: u64) -> Result<u64, BackendError> {
    if g.is_power_of_two() && g >= MIN_GRANULARITY {
        return Ok(g);
    }
    Err(BackendError::Device {
        backend: error::BACKEND_NAME.to_owned(),
        call: "cuMemGetAllocationGranularity",
        code: 0,
        code_name: "CUDA_SUCCESS".to_owned(),
        message: format!(
            "the driver reported a granularity of {g} bytes, not a power of two of at least \
             {MIN_GRANULARITY}"
        ),
    })
}

impl VmBook {
    /// Records a range the driver reserved.
    pub(crate) fn record_reserve(&mut self, base: u64, bytes: u64) {
        self.reserved.insert(base, bytes);
    }

    /// The size of the reserved range at `base`, if nothing in it is mapped.
    pub(crate) fn check_release(&self, base: DevicePtr) -> Result<u64, BackendError> {
        let Some(&len) = self.reserved.get(&base.addr()) else {
            return Err(error::invalid(
                "vm_release",
                format!("{base} is not the base of a range vm_reserve returned on this device"),
            ));
        };
        if let Some((&at, _)) = self.mappings.range(base.addr()..base.addr() + len).next() {
            return Err(error::invalid(
                "vm_release",
                format!("range {base} still has a mapping at {at:#x}: vm_unmap it first"),
            ));
        }
        Ok(len)
    }

    /// Forgets a released range.
    pub(crate) fn record_release(&mut self, base: DevicePtr) {
        self.reserved.remove(&base.addr());
    }

    /// Records a handle the driver created.
    pub(crate) fn record_create(&mut self, handle: u64, bytes: u64) {
        self.handles.insert(
            handle,
            Physical {
                bytes,
                mapped_at: None,
            },
        );
    }

    /// `handle` is live and unmapped.
    pub(crate) fn check_release_physical(
        &self,
        handle: PhysicalHandle,
    ) -> Result<(), BackendError> {
        match self.handles.get(&handle.0) {
            None => Err(error::invalid(
                "vm_release_physical",
                format!("{handle:?} is not a live handle of this device"),
            )),
            Some(Physical {
                mapped_at: Some(at),
                ..
            }) => Err(error::invalid(
                "vm_release_physical",
                format!("{handle:?} is still mapped at {at:#x}: vm_unmap it first"),
            )),
            Some(_) => Ok(()),
        }
    }

    /// Forgets a released handle.
    pub(crate) fn record_release_physical(&mut self, handle: PhysicalHandle) {
        self.handles.remove(&handle.0);
    }

    /// The handle's size, if it is live and unmapped and its whole size fits at `at`
    /// inside one reserved range over no mapping (`at` is aligned: checked by the caller).
    pub(crate) fn check_map(
        &self,
        at: DevicePtr,
        handle: PhysicalHandle,
    ) -> Result<u64, BackendError> {
        let bytes = match self.handles.get(&handle.0) {
            None => {
                return Err(error::invalid(
                    "vm_map",
                    format!("{handle:?} is not a live handle of this device"),
                ));
            }
            Some(Physical {
                mapped_at: Some(other),
                ..
            }) => {
                return Err(error::invalid(
                    "vm_map",
                    format!("{handle:?} is already mapped at {other:#x}"),
                ));
            }
            Some(p) => p.bytes,
        };
        let end = at
            .addr()
            .checked_add(bytes)
            .ok_or_else(|| error::invalid("vm_map", format!("{at}+{bytes} overflows")))?;
        let inside = self
            .reserved
            .range(..=at.addr())
            .next_back()
            .is_some_and(|(&base, &len)| end <= base + len);
        if !inside {
            return Err(error::invalid(
                "vm_map",
                format!("{bytes} bytes at {at} are not inside one range vm_reserve returned"),
            ));
        }
        let below = self.mappings.range(..at.addr()).next_back();
        if below.is_some_and(|(&m, &(len, _))| m + len > at.addr())
            || self.mappings.range(at.addr()..end).next().is_some()
        {
            return Err(error::invalid(
                "vm_map",
                format!("{bytes} bytes at {at} overlap a mapping: vm_unmap it first"),
            ));
        }
        Ok(bytes)
    }

    /// Records a mapping the driver made.
    pub(crate) fn record_map(&mut self, at: DevicePtr, handle: PhysicalHandle, bytes: u64) {
        self.mappings.insert(at.addr(), (bytes, handle.0));
        if let Some(p) = self.handles.get_mut(&handle.0) {
            p.mapped_at = Some(at.addr());
        }
    }

    /// `at` is exactly one mapping of `bytes`.
    pub(crate) fn check_unmap(&self, at: DevicePtr, bytes: u64) -> Result<(), BackendError> {
        match self.mappings.get(&at.addr()) {
            Some(&(len, _)) if len == bytes => Ok(()),
            Some(&(len, _)) => Err(error::invalid(
                "vm_unmap",
                format!("the mapping at {at} is {len} bytes, not {bytes}: unmap whole mappings"),
            )),
            None => Err(error::invalid(
                "vm_unmap",
                format!("{at} is not the address of a vm_map on this device"),
            )),
        }
    }

    /// Forgets a mapping the driver removed.
    pub(crate) fn record_unmap(&mut self, at: DevicePtr) {
        if let Some((_, handle)) = self.mappings.remove(&at.addr()) {
            if let Some(p) = self.handles.get_mut(&handle) {
                p.mapped_at = None;
            }
        }
    }

    /// True when every byte of `[start, end)` is mapped (possibly by several adjacent
    /// mappings: one access may span them, as on the device).
    pub(crate) fn covers(&self, start: u64, end: u64) -> bool {
        if start >= end {
            // An empty range is covered where a mapping holds its address or ends there
            // (as `check_range` treats an allocation), not anywhere at all.
            return self
                .mappings
                .range(..=start)
                .next_back()
                .is_some_and(|(&m, &(len, _))| start <= m + len);
        }
        let mut at = start;
        while at < end {
            match self.mappings.range(..=at).next_back() {
                Some((&m, &(len, _))) if m + len > at => at = m + len,
                _ => return false,
            }
        }
        true
    }

    /// True when nothing is reserved, created or mapped.
    pub(crate) fn is_empty(&self) -> bool {
        self.reserved.is_empty() && self.handles.is_empty() && self.mappings.is_empty()
    }

    /// Everything still held, for the drop; the book is left empty.
    pub(crate) fn take_all(&mut self) -> Held {
        Held {
            mappings: std::mem::take(&mut self.mappings)
                .into_iter()
                .map(|(at, (len, _))| (at, len))
                .collect(),
            handles: std::mem::take(&mut self.handles).into_keys().collect(),
            ranges: std::mem::take(&mut self.reserved).into_iter().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 2 << 20;

    fn reason(r: Result<impl std::fmt::Debug, BackendError>) -> String {
        match r {
            Err(BackendError::InvalidArgument { reason, .. }) => reason,
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn every_misuse_is_refused_naming_its_rule_and_changes_nothing() {
        let mut b = VmBook::default();
        let base = DevicePtr(0x7f00_0000_0000);
        b.record_reserve(base.addr(), 4 * G);
        b.record_create(11, 2 * G);
        b.record_create(12, G);
        assert!(reason(check_aligned("vm_reserve", "size", G + 1, G)).contains("granularity"));
        assert!(reason(check_aligned("vm_reserve", "size", 0, G)).contains("non-zero"));
        assert_eq!(b.check_map(base, PhysicalHandle(11)).unwrap(), 2 * G);
        b.record_map(base, PhysicalHandle(11), 2 * G);
        for (rule, r) in [
            (
                "already mapped",
                b.check_map(base.offset(2 * G), PhysicalHandle(11)),
            ),
            (
                "overlap a mapping",
                b.check_map(base.offset(G), PhysicalHandle(12)),
            ),
            (
                "not inside one range",
                b.check_map(base.offset(4 * G), PhysicalHandle(12)),
            ),
            (
                "not a live handle",
                b.check_map(base.offset(2 * G), PhysicalHandle(99)),
            ),
        ] {
            assert!(reason(r).contains(rule), "{rule}");
        }
        assert!(reason(b.check_unmap(base, G)).contains("unmap whole mappings"));
        assert!(reason(b.check_unmap(base.offset(2 * G), G)).contains("not the address"));
        assert!(reason(b.check_release_physical(PhysicalHandle(11))).contains("still mapped"));
        assert!(reason(b.check_release_physical(PhysicalHandle(99))).contains("not a live"));
        assert!(reason(b.check_release(base)).contains("still has a mapping"));
        assert!(reason(b.check_release(base.offset(G))).contains("not the base"));
        // The proper order still works afterwards.
        assert_eq!(
            b.check_map(base.offset(2 * G), PhysicalHandle(12)).unwrap(),
            G
        );
        b.record_map(base.offset(2 * G), PhysicalHandle(12), G);
        b.check_unmap(base, 2 * G).unwrap();
        b.record_unmap(base);
        b.check_release_physical(PhysicalHandle(11)).unwrap();
        b.record_release_physical(PhysicalHandle(11));
        assert!(reason(b.check_release(base)).contains("still has a mapping"));
        b.record_unmap(base.offset(2 * G));
        assert_eq!(b.check_release(base).unwrap(), 4 * G);
        b.record_release(base);
        assert!(reason(b.check_release(base)).contains("not the base"));
    }

    #[test]
    fn an_access_may_span_adjacent_mappings_but_not_a_hole() {
        let mut b = VmBook::default();
        let base = 0x1000_0000;
        b.record_reserve(base, 8 * G);
        for (h, page) in [(1, 0), (2, 1), (3, 3)] {
            b.record_create(h, G);
            b.record_map(DevicePtr(base + page * G), PhysicalHandle(h), G);
        }
        assert!(
            b.covers(base + G - 64, base + G + 64),
            "two adjacent mappings"
        );
        assert!(b.covers(base, base + 2 * G));
        assert!(
            !b.covers(base + 2 * G - 64, base + 2 * G + 64),
            "page 2 is a hole"
        );
        assert!(!b.covers(base + G, base + 4 * G));
        assert!(b.covers(base + 3 * G, base + 4 * G));
        assert!(
            !b.covers(base + 4 * G - 1, base + 4 * G + 1),
            "past the end"
        );
        // Empty ranges: inside a mapping or at its end, yes; in a hole or outside, no
        // (before, an empty range was covered at any address).
        assert!(b.covers(base + G, base + G) && b.covers(base + 2 * G, base + 2 * G));
        assert!(
            !b.covers(base + 2 * G + 64, base + 2 * G + 64),
            "in the hole"
        );
        assert!(
            !b.covers(base + 64 * G, base + 64 * G),
            "far past every mapping"
        );
        assert!(!b.covers(64, 64), "below every mapping");
        let held = b.take_all();
        assert_eq!(
            (held.mappings.len(), held.handles.len(), held.ranges.len()),
            (3, 3, 1)
        );
        assert!(!b.covers(base, base + 1), "nothing left");
    }

    #[test]
    fn a_granularity_breaking_the_core_rules_is_the_drivers_error() {
        for good in [256, 2 << 20, 1 << 30] {
            assert_eq!(check_granularity(good).unwrap(), good);
        }
        for bad in [0, 128, 3 << 20, (2 << 20) + 256] {
            match check_granularity(bad) {
                Err(BackendError::Device { call, message, .. }) => {
                    assert_eq!(call, "cuMemGetAllocationGranularity");
                    assert!(message.contains(&format!("{bad} bytes")), "{message}");
                }
                other => panic!("{bad}: expected a Device error, got {other:?}"),
            }
        }
    }
}
