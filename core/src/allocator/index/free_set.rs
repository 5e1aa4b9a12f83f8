//! The free blocks of one (stream, pool): segregated size classes with bitmaps, each class
//! a vector kept in (size, address) order, so best fit is a couple of bit scans plus a
//! binary search in one short vector, and it picks exactly the block an ordered set keyed by
//! (size, address) picks (PyTorch's `BlockPool` order: smallest size that fits, then the
//! lowest address).
//!
//! # Classes
//! A size is counted in 512-byte units `u = size >> 9`. Units below 128 (64 KiB) each have
//! their own class (so the small pool's common sizes are exact); above, every power of two
//! is cut into 64 classes (two-level segregated fit, as TLSF). The class of a size never
//! decreases as the size grows, so every block of a higher class is larger than every block
//! of a lower one, and the best fit is the first block at least as large as the request in
//! the request's class, or else the first block of the next non-empty class.
//!
//! # Cost
//! Insert and remove are a binary search and a move of the tail of one class vector; class
//! vectors keep their capacity, so the steady state allocates nothing. A class holds the
//! free blocks of at most 1/64 of an octave of sizes (one exact size below 64 KiB), so it
//! is short unless a pool holds many free blocks of nearly one size.

/// A free block as the set orders it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(crate) struct FreeKey {
    /// Block size (first sort key).
    pub size: u64,
    /// Block address (second sort key).
    pub addr: u64,
    /// Slot of the block.
    pub slot: u32,
}

/// Bits of the second-level index: 64 classes per power of two.
const SL_BITS: u32 = 6;
/// Number of classes: enough for any `u64` size.
const NUM_CLASSES: usize = ((55 - SL_BITS + 1) << SL_BITS) as usize;
/// Class vectors allocated: a power of two above [`NUM_CLASSES`], so that a class masked
/// by `CLASS_SLOTS - 1` indexes them (and the bitmap words) with no bounds check on the
/// hot path; the classes above [`NUM_CLASSES`] stay empty.
const CLASS_SLOTS: usize = 4096;
/// 64-bit words of the class bitmap (one per summary bit).
const WORDS: usize = CLASS_SLOTS / 64;
const _: () = assert!(NUM_CLASSES <= CLASS_SLOTS && WORDS == 64);

/// The size class of `size` (see the module docs).
#[inline]
fn class_of(size: u64) -> usize {
    let u = size >> 9;
    if u < (1 << (SL_BITS + 1)) {
        return u as usize;
    }
    let fl = u.ilog2();
    let sl = (u >> (fl - SL_BITS)) & ((1 << SL_BITS) - 1);
    // The mask changes nothing (every class is below `NUM_CLASSES`) but lets the compiler
    // drop the bounds checks of `classes[c]` and `words[c / 64]`.
    (u64::from((fl - SL_BITS + 1) << SL_BITS) + sl) as usize & (CLASS_SLOTS - 1)
}

/// Free blocks of one stream in one pool.
pub(crate) struct FreeSet {
    /// Bit `w` set when `words[w]` is non-zero.
    summary: u64,
    /// Bit `c % 64` of word `c / 64` set when class `c` is non-empty.
    words: [u64; WORDS],
    /// Class vectors in (size, address) order; empty until the first insert.
    classes: Box<[Vec<FreeKey>; CLASS_SLOTS]>,
    len: usize,
}

impl FreeSet {
    pub fn new() -> Self {
        let mut classes = Vec::new();
        classes.resize_with(CLASS_SLOTS, Vec::new);
        let classes: Box<[Vec<FreeKey>; CLASS_SLOTS]> = classes
            .into_boxed_slice()
            .try_into()
            .expect("CLASS_SLOTS vectors");
        FreeSet {
            summary: 0,
            words: [0; WORDS],
            classes,
            len: 0,
        }
    }

    /// Number of free blocks.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Adds a block (not present yet).
    // Forced: on the cached hand-out/release path the plain hint left this an outlined
    // call (callgrind, `bench/README.md`: -55 Ir per cached 4 KiB pair with the three forced).
    #[expect(clippy::inline_always, reason = "measured on the hot path")]
    #[inline(always)]
    pub fn insert(&mut self, key: FreeKey) {
        let c = class_of(key.size);
        let v = &mut self.classes[c];
        self.len += 1;
        if v.is_empty() {
            // The usual case: a class holds one block (no search, no move).
            v.push(key);
            self.words[c / 64] |= 1 << (c % 64);
            self.summary |= 1 << (c / 64);
            return;
        }
        let pos = v.partition_point(|k| (k.size, k.addr) < (key.size, key.addr));
        debug_assert!(v.get(pos) != Some(&key), "block inserted twice");
        v.insert(pos, key);
    }

    /// Removes a block; false when it was not there.
    // Forced: on the cached hand-out/release path the plain hint left this an outlined
    // call (callgrind, `bench/README.md`: -55 Ir per cached 4 KiB pair with the three forced).
    #[expect(clippy::inline_always, reason = "measured on the hot path")]
    #[inline(always)]
    pub fn remove(&mut self, key: FreeKey) -> bool {
        let c = class_of(key.size);
        let v = &mut self.classes[c];
        if v.len() == 1 {
            if v[0] != key {
                return false;
            }
            v.clear();
        } else {
            let pos = v.partition_point(|k| (k.size, k.addr) < (key.size, key.addr));
            if v.get(pos) != Some(&key) {
                return false;
            }
            v.remove(pos);
            if !v.is_empty() {
                self.len -= 1;
                return true;
            }
        }
        self.words[c / 64] &= !(1 << (c % 64));
        if self.words[c / 64] == 0 {
            self.summary &= !(1 << (c / 64));
        }
        self.len -= 1;
        true
    }

    /// The first non-empty class at or above `c`.
    #[inline]
    fn next_class(&self, c: usize) -> Option<usize> {
        if c >= NUM_CLASSES {
            return None;
        }
        let (w, b) = (c / 64, c % 64);
        let here = self.words[w] & (u64::MAX << b);
        if here != 0 {
            return Some(w * 64 + here.trailing_zeros() as usize);
        }
        let above = if w + 1 >= 64 {
            0
        } else {
            self.summary & (u64::MAX << (w + 1))
        };
        if above == 0 {
            return None;
        }
        let w = above.trailing_zeros() as usize;
        Some(w * 64 + self.words[w].trailing_zeros() as usize)
    }

    /// The last non-empty class at or below `c`.
    fn prev_class(&self, c: usize) -> Option<usize> {
        let c = c.min(NUM_CLASSES - 1);
        let (w, b) = (c / 64, c % 64);
        let here = self.words[w] & (u64::MAX >> (63 - b));
        if here != 0 {
            return Some(w * 64 + 63 - here.leading_zeros() as usize);
        }
        let below = self.summary & ((1u64 << w) - 1);
        if below == 0 {
            return None;
        }
        let w = 63 - below.leading_zeros() as usize;
        Some(w * 64 + 63 - self.words[w].leading_zeros() as usize)
    }

    /// The smallest block of at least `size` bytes, lowest address among equals.
    #[inline]
    pub fn lower_bound(&self, size: u64) -> Option<FreeKey> {
        if self.len == 0 {
            return None;
        }
        let c = class_of(size);
        let mut next = self.next_class(c)?;
        if next == c {
            let v = &self.classes[c];
            if let Some(k) = v.first()
                && k.size >= size
            {
                return Some(*k);
            }
            let pos = v.partition_point(|k| k.size < size);
            if let Some(k) = v.get(pos) {
                return Some(*k);
            }
            next = self.next_class(c + 1)?;
        }
        self.classes[next].first().copied()
    }

    /// The largest block (highest address among equals).
    pub fn last(&self) -> Option<FreeKey> {
        if self.len == 0 {
            return None;
        }
        let c = self.prev_class(NUM_CLASSES - 1)?;
        self.classes[c].last().copied()
    }

    /// Blocks smaller than `size`, largest first (descending (size, address)).
    pub fn below(&self, size: u64) -> impl Iterator<Item = FreeKey> + '_ {
        let mut class = if self.len == 0 {
            None
        } else {
            self.prev_class(class_of(size))
        };
        let mut cur: std::iter::Rev<std::slice::Iter<'_, FreeKey>> = [].iter().rev();
        std::iter::from_fn(move || {
            loop {
                if let Some(k) = cur.next() {
                    if k.size < size {
                        return Some(*k);
                    }
                    continue;
                }
                let c = class?;
                cur = self.classes[c].iter().rev();
                class = if c == 0 { None } else { self.prev_class(c - 1) };
            }
        })
    }

    /// Every block in ascending (size, address) order.
    pub fn iter(&self) -> impl Iterator<Item = FreeKey> + '_ {
        self.classes_from(0)
    }

    /// The blocks of at least `size` bytes in ascending (size, address) order: the first is
    /// [`FreeSet::lower_bound`], the rest are what an ordered set's iterator walks past it.
    pub fn at_least(&self, size: u64) -> impl Iterator<Item = FreeKey> + '_ {
        self.classes_from(class_of(size))
            .skip_while(move |k| k.size < size)
    }

    /// Every block of class `first` and above, ascending.
    fn classes_from(&self, first: usize) -> impl Iterator<Item = FreeKey> + '_ {
        let mut class = if self.len == 0 {
            None
        } else {
            self.next_class(first)
        };
        let mut cur: std::slice::Iter<'_, FreeKey> = [].iter();
        std::iter::from_fn(move || {
            loop {
                if let Some(k) = cur.next() {
                    return Some(*k);
                }
                let c = class?;
                cur = self.classes[c].iter();
                class = self.next_class(c + 1);
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn classes_never_decrease_and_cover_u64() {
        for shift in 0..64 {
            assert!(class_of(1u64 << shift) < NUM_CLASSES);
        }
        let mut prev = 0;
        for s in (0..(8u64 << 20)).step_by(512) {
            let c = class_of(s);
            assert!(c >= prev, "class of {s} decreased");
            prev = c;
        }
        assert_eq!(class_of(u64::MAX), NUM_CLASSES - 1);
        // Below 64 KiB every 512-byte size has its own class.
        assert_eq!(class_of(512), 1);
        assert_eq!(class_of(65024), 127);
    }

    #[test]
    fn best_fit_takes_smallest_then_lowest_address() {
        let mut s = FreeSet::new();
        for (i, (size, addr)) in [(4096, 900), (4096, 100), (8192, 50), (1 << 30, 7)]
            .into_iter()
            .enumerate()
        {
            s.insert(FreeKey {
                size,
                addr,
                slot: i as u32,
            });
        }
        assert_eq!(s.lower_bound(3000).map(|k| k.addr), Some(100));
        assert_eq!(s.lower_bound(4097).map(|k| k.addr), Some(50));
        assert_eq!(s.lower_bound(8193).map(|k| k.size), Some(1 << 30));
        assert_eq!(s.lower_bound((1 << 30) + 1), None);
        assert_eq!(s.last().map(|k| k.size), Some(1 << 30));
        let below: Vec<u64> = s.below(8192).map(|k| k.addr).collect();
        assert_eq!(below, [900, 100]);
    }

    /// One operation of the equivalence property.
    #[derive(Clone, Debug)]
    enum Op {
        Insert(u64, u64),
        Remove(usize),
        LowerBound(u64),
        Below(u64),
    }

    fn size() -> impl Strategy<Value = u64> {
        prop_oneof![
            4 => (1u64..=4096).prop_map(|u| u * 512),
            2 => 1u64..(64 << 20),
            1 => (1u64..40).prop_map(|s| 1u64 << s),
            1 => any::<u64>(),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            5 => (size(), 0u64..64).prop_map(|(s, a)| Op::Insert(s, a * 4096)),
            3 => any::<usize>().prop_map(Op::Remove),
            3 => size().prop_map(Op::LowerBound),
            1 => size().prop_map(Op::Below),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// The size-class set answers every query exactly as an ordered set keyed by
        /// (size, address), the order the allocator's pools used before.
        #[test]
        fn matches_an_ordered_set(ops in prop::collection::vec(op(), 1..300)) {
            let mut fast = FreeSet::new();
            let mut reference: BTreeSet<FreeKey> = BTreeSet::new();
            let mut slot = 0u32;
            for op in ops {
                match op {
                    Op::Insert(size, addr) => {
                        let key = FreeKey { size, addr, slot };
                        slot += 1;
                        if reference.iter().any(|k| (k.size, k.addr) == (size, addr)) {
                            continue; // one block per address and size
                        }
                        reference.insert(key);
                        fast.insert(key);
                    }
                    Op::Remove(i) => {
                        if reference.is_empty() {
                            let missing = FreeKey { size: 512, addr: 0, slot: 0 };
                            prop_assert!(!fast.remove(missing));
                            continue;
                        }
                        let key = *reference.iter().nth(i % reference.len()).unwrap();
                        reference.remove(&key);
                        prop_assert!(fast.remove(key));
                    }
                    Op::LowerBound(size) => {
                        let want = reference.iter().find(|k| k.size >= size).copied();
                        prop_assert_eq!(fast.lower_bound(size), want);
                    }
                    Op::Below(size) => {
                        let want: Vec<FreeKey> =
                            reference.iter().rev().filter(|k| k.size < size).copied().collect();
                        prop_assert_eq!(fast.below(size).collect::<Vec<_>>(), want);
                    }
                }
                prop_assert_eq!(fast.len(), reference.len());
                prop_assert_eq!(fast.last(), reference.iter().next_back().copied());
            }
            let all: Vec<FreeKey> = reference.iter().copied().collect();
            prop_assert_eq!(fast.iter().collect::<Vec<_>>(), all);
        }
    }
}
