//! Vector clocks for the happens-before race engine.
//!
//! One component per stream of the world (the stream's global index). A clock is
//! stored densely and grows on demand: components past its length are zero, so streams
//! created later need no update of existing clocks.

/// A vector clock: `self[i]` is the number of ops of stream `i` known to happen before.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VClock(Vec<u64>);

impl VClock {
    /// The component of stream `i` (zero when never seen).
    #[must_use]
    pub fn get(&self, i: usize) -> u64 {
        self.0.get(i).copied().unwrap_or(0)
    }

    /// Advances component `i` by one and returns its new value (the op's epoch).
    pub fn tick(&mut self, i: usize) -> u64 {
        if self.0.len() <= i {
            self.0.resize(i + 1, 0);
        }
        self.0[i] += 1;
        self.0[i]
    }

    /// Component-wise maximum with `other`: afterwards `self` knows everything `other` does.
    pub fn join(&mut self, other: &VClock) {
        if self.0.len() < other.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        for (mine, theirs) in self.0.iter_mut().zip(&other.0) {
            *mine = (*mine).max(*theirs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::VClock;

    #[test]
    fn tick_and_join() {
        let mut a = VClock::default();
        assert_eq!(a.tick(2), 1);
        assert_eq!(a.tick(2), 2);
        let mut b = VClock::default();
        b.tick(0);
        b.join(&a);
        assert_eq!((b.get(0), b.get(1), b.get(2), b.get(9)), (1, 0, 2, 0));
    }
}
