//! Reading past the value of a dict key a snapshot's reader does not use (stack frames,
//! most of a real snapshot): from the opcodes alone, where that value ends.

/// A value being read past: it lies at stack position `pos`, the stack had `marks` MARKs.
#[derive(Clone, Copy)]
pub(super) struct Skip {
    /// The value's stack position.
    pub pos: usize,
    /// MARKs open when it started.
    pub marks: usize,
}

impl Skip {
    /// Whether `op`, about to run with `len` stack items and `marks` MARKs, is past the
    /// value: it starts the next key at the value's level, or reaches below the value.
    pub fn ends_before(self, op: u8, len: usize, marks: usize) -> bool {
        let r = reach(op);
        let below = (r > 0 && len < self.pos + r)
            || marks < self.marks
            || (uses_mark(op) && marks <= self.marks);
        let next_key = len == self.pos + 1 && marks == self.marks && is_key_like(op);
        below || next_key
    }
}

/// Opcodes that push a string or a memo reference: while reading past a value, one at the
/// value's own level is the next key.
fn is_key_like(op: u8) -> bool {
    matches!(
        op,
        b'X' | 0x8c | 0x8d | b'V' | b'T' | b'U' | b'S' | b'h' | b'j' | b'g' | b's' | b'u' | b'.'
    )
}

/// Stack items below the top that `op` consumes or changes (MARK-delimited opcodes aside).
fn reach(op: u8) -> usize {
    match op {
        b'0' | b'2' | 0x85 | b'Q' => 1,
        b'a' | b'b' | b'R' | 0x81 | 0x86 | 0x93 => 2,
        b's' | 0x87 | 0x92 => 3,
        _ => 0,
    }
}

/// Opcodes that consume up to the last MARK.
fn uses_mark(op: u8) -> bool {
    matches!(
        op,
        b'e' | b'u' | 0x90 | b't' | b'l' | b'd' | 0x91 | b'1' | b'o' | b'i'
    )
}
