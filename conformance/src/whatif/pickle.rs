//! A bounded pickle machine (protocols 0-5) that reads a snapshot into a [`Doc`]: one loop
//! over the opcodes, no recursion; a memo reference shares the value instead of copying
//! it; integer literals are read in linear time; the values of dict keys a snapshot's
//! reader does not use (stack frames, most of a real snapshot) are read past without being
//! kept. Python globals, calls and object constructions (`GLOBAL`, `REDUCE`, `NEWOBJ`,
//! `INST`, `OBJ`, ...) become inert placeholders: nothing is ever looked up or executed.

use std::collections::HashMap;
use std::io::BufRead;

use super::doc::{Doc, Ref, SKIPPED, Val, View, is_kept_string};
use super::limits::{Fail, Hit, ImportLimits, Limit};
use super::pickle_input::{PickleInput, decode};
use super::pickle_skip::Skip;

/// Python globals and calls are never executed: what they leave is this.
const INERT: &str = "a Python object (globals and calls are never executed)";

/// The machine's state.
struct Machine<'a> {
    inp: PickleInput<'a>,
    limits: &'a ImportLimits,
    doc: Doc,
    stack: Vec<Ref>,
    marks: Vec<usize>,
    memo: Vec<Ref>,
    sparse_memo: HashMap<u64, Ref>,
    skip: Option<Skip>,
    /// The last value-making opcode was `EMPTY_DICT` (then the next string is a key).
    fresh_dict: bool,
}

/// Reads one pickle from `input` into a [`Doc`] bounded by `limits`.
pub(super) fn read_pickle(input: &mut dyn BufRead, limits: &ImportLimits) -> Result<Doc, Fail> {
    let mut m = Machine {
        inp: PickleInput::new(input, limits),
        limits,
        doc: Doc::new(limits),
        stack: Vec::new(),
        marks: Vec::new(),
        memo: Vec::new(),
        sparse_memo: HashMap::new(),
        skip: None,
        fresh_dict: false,
    };
    loop {
        let op = m.inp.byte()?;
        m.leave_skip_before(op);
        if m.step(op)? {
            return Ok(m.doc);
        }
        if (m.stack.len() + m.marks.len()) as u64 > limits.depth {
            return Err(Hit::new(Limit::Depth, limits).into());
        }
    }
}

impl Machine<'_> {
    fn skipping(&self) -> bool {
        self.skip.is_some()
    }

    /// Ends reading past a value when `op` ends it.
    fn leave_skip_before(&mut self, op: u8) {
        if self
            .skip
            .is_some_and(|s| s.ends_before(op, self.stack.len(), self.marks.len()))
        {
            self.skip = None;
        }
    }

    fn pop(&mut self) -> Result<Ref, Fail> {
        if self.marks.last() == Some(&self.stack.len()) {
            return Err(decode(format!(
                "opcode at byte {} pops past a MARK",
                self.inp.at
            )));
        }
        self.stack.pop().ok_or_else(|| {
            decode(format!(
                "opcode at byte {} pops an empty stack",
                self.inp.at
            ))
        })
    }

    fn top(&self) -> Result<Ref, Fail> {
        self.stack.last().copied().ok_or_else(|| {
            decode(format!(
                "opcode at byte {} reads an empty stack",
                self.inp.at
            ))
        })
    }

    /// The items above the last MARK, which is removed.
    fn pop_mark(&mut self) -> Result<Vec<Ref>, Fail> {
        let m = self
            .marks
            .pop()
            .ok_or_else(|| decode(format!("opcode at byte {} needs a MARK", self.inp.at)))?;
        Ok(self.stack.split_off(m))
    }

    /// Pushes a value made by the machine (placeholder while reading past).
    fn push_val(&mut self, val: Val) -> Result<(), Fail> {
        let r = if self.skipping() {
            SKIPPED
        } else {
            self.doc.push(val)?
        };
        self.stack.push(r);
        Ok(())
    }

    fn push_int(&mut self, i: i64) -> Result<(), Fail> {
        let r = if self.skipping() {
            SKIPPED
        } else {
            self.doc.int(i)?
        };
        self.stack.push(r);
        Ok(())
    }

    /// Whether a string pushed now is a dict key (the next value is then its value).
    fn at_key_position(&self) -> bool {
        let is_dict = |r: Ref| r != SKIPPED && matches!(self.doc.view(r), View::Dict(..));
        if let Some(&m) = self.marks.last() {
            if m >= 1 && is_dict(self.stack[m - 1]) && (self.stack.len() - m) % 2 == 0 {
                return true;
            }
        }
        self.fresh_dict && self.stack.last().is_some_and(|&r| is_dict(r))
    }

    /// Pushes `r` (a string or a memo value) and starts reading past the next value when
    /// `r` is a key whose value is not used.
    fn push_maybe_key(&mut self, r: Ref) {
        if !self.skipping() {
            if let View::Str(s) = self.doc.view(r) {
                if !super::doc::is_used_key(s) && self.at_key_position() {
                    self.stack.push(r);
                    self.skip = Some(Skip {
                        pos: self.stack.len(),
                        marks: self.marks.len(),
                    });
                    return;
                }
            }
        }
        self.stack.push(r);
    }

    fn push_string(&mut self, bytes: &[u8]) -> Result<(), Fail> {
        if self.skipping() && !is_kept_string(bytes) {
            self.stack.push(SKIPPED);
            return Ok(());
        }
        let val = match std::str::from_utf8(bytes) {
            Ok(s) => Val::Str(s.into()),
            Err(_) => Val::Other("a string that is not UTF-8"),
        };
        let r = self.doc.push(val)?;
        self.push_maybe_key(r);
        Ok(())
    }

    /// A string of `n` bytes: kept when it may be used, else read past.
    fn string(&mut self, n: u64) -> Result<(), Fail> {
        // Only short strings can be names a reader compares; a long one is read past.
        let keep = !self.skipping() || n <= 24;
        let bytes = self.inp.bytes(n, keep, Limit::StringBytes)?;
        if keep {
            self.push_string(&bytes)
        } else {
            self.stack.push(SKIPPED);
            Ok(())
        }
    }

    fn put(&mut self, index: u64) -> Result<(), Fail> {
        let top = self.top()?;
        let dense = self.memo.len() as u64;
        match index.cmp(&dense) {
            std::cmp::Ordering::Less => self.memo[index as usize] = top,
            std::cmp::Ordering::Equal => {
                self.doc.count_memo()?;
                self.memo.push(top);
            }
            std::cmp::Ordering::Greater => {
                if !self.sparse_memo.contains_key(&index) {
                    self.doc.count_memo()?;
                }
                self.sparse_memo.insert(index, top);
            }
        }
        Ok(())
    }

    fn get(&mut self, index: u64) -> Result<(), Fail> {
        let found = usize::try_from(index)
            .ok()
            .and_then(|i| self.memo.get(i).copied())
            .or_else(|| self.sparse_memo.get(&index).copied())
            .ok_or_else(|| {
                decode(format!(
                    "memo reference {index} at byte {} was never stored",
                    self.inp.at
                ))
            })?;
        if self.skipping() {
            self.stack.push(SKIPPED);
        } else {
            self.push_maybe_key(found);
        }
        Ok(())
    }

    /// An integer of `bytes` little-endian two's-complement bytes (LONG1, LONG4).
    fn long_bytes(&mut self, n: u64) -> Result<(), Fail> {
        if n > self.limits.integer_digits {
            return Err(Hit::new(Limit::IntegerDigits, self.limits).into());
        }
        let b = self.inp.bytes(n, true, Limit::IntegerDigits)?;
        if b.len() > 8 {
            return self.push_val(Val::Other("an integer wider than 64 bits"));
        }
        let negative = b.last().is_some_and(|&x| x & 0x80 != 0);
        let mut full = if negative { [0xff; 8] } else { [0; 8] };
        full[..b.len()].copy_from_slice(&b);
        self.push_int(i64::from_le_bytes(full))
    }

    /// A protocol-0 integer literal (`I`, `L`): digits, parsed in linear time.
    fn text_int(&mut self, long: bool) -> Result<(), Fail> {
        let mut line = self.inp.line(Limit::IntegerDigits)?;
        if long && line.last() == Some(&b'L') {
            line.pop();
        }
        match line.as_slice() {
            b"01" if !long => return self.push_int(1),
            b"00" if !long => return self.push_int(0),
            _ => {}
        }
        let text = std::str::from_utf8(&line).unwrap_or("");
        let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(decode(format!(
                "integer literal at byte {} is not a decimal integer",
                self.inp.at
            )));
        }
        match text.parse::<i64>() {
            Ok(i) => self.push_int(i),
            Err(_) => self.push_val(Val::Other("an integer wider than 64 bits")),
        }
    }

    fn text_index(&mut self) -> Result<u64, Fail> {
        let line = self.inp.line(Limit::IntegerDigits)?;
        std::str::from_utf8(&line)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| {
                decode(format!(
                    "memo index at byte {} is not a number",
                    self.inp.at
                ))
            })
    }

    /// Executes `op`; true at STOP.
    #[allow(clippy::too_many_lines)]
    fn step(&mut self, op: u8) -> Result<bool, Fail> {
        let fresh = op == b'}';
        let memo_op = matches!(op, 0x94 | b'q' | b'r' | b'p' | 0x95 | 0x80);
        match op {
            0x80 => {
                self.inp.byte()?;
            }
            0x95 => {
                self.inp.u64le()?;
            }
            b'.' => {
                let root = self.pop()?;
                self.doc.root = root;
                return Ok(true);
            }
            b'(' => self.marks.push(self.stack.len()),
            b'0' => {
                if self.marks.last() == Some(&self.stack.len()) {
                    self.marks.pop();
                } else {
                    self.pop()?;
                }
            }
            b'1' => {
                self.pop_mark()?;
            }
            b'2' => {
                let top = self.top()?;
                self.stack.push(top);
            }
            b'N' => self.push_val(Val::Other("None"))?,
            0x88 => self.push_int(1)?,
            0x89 => self.push_int(0)?,
            b'J' => {
                let mut b = [0u8; 4];
                self.inp.fill(&mut b)?;
                self.push_int(i64::from(i32::from_le_bytes(b)))?;
            }
            b'K' => {
                let b = self.inp.byte()?;
                self.push_int(i64::from(b))?;
            }
            b'M' => {
                let mut b = [0u8; 2];
                self.inp.fill(&mut b)?;
                self.push_int(i64::from(u16::from_le_bytes(b)))?;
            }
            0x8a => {
                let n = self.inp.byte()?;
                self.long_bytes(u64::from(n))?;
            }
            0x8b => {
                let n = self.inp.u32le()?;
                if n >= 1 << 31 {
                    return Err(decode(format!(
                        "LONG4 at byte {} has a negative length",
                        self.inp.at
                    )));
                }
                self.long_bytes(n)?;
            }
            b'I' => self.text_int(false)?,
            b'L' => self.text_int(true)?,
            b'F' => {
                self.inp.line(Limit::StringBytes)?;
                self.push_val(Val::Other("a float"))?;
            }
            b'G' => {
                self.inp.u64le()?;
                self.push_val(Val::Other("a float"))?;
            }
            b'X' | b'T' => {
                let n = self.inp.u32le()?;
                self.string(n)?;
            }
            0x8c | b'U' => {
                let n = self.inp.byte()?;
                self.string(u64::from(n))?;
            }
            0x8d => {
                let n = self.inp.u64le()?;
                self.string(n)?;
            }
            b'V' => {
                let line = self.inp.line(Limit::StringBytes)?;
                self.push_string(&line)?;
            }
            b'S' => {
                self.inp.line(Limit::StringBytes)?;
                self.push_val(Val::Other("a protocol-0 string"))?;
            }
            b'B' => {
                let n = self.inp.u32le()?;
                self.inp.bytes(n, false, Limit::StringBytes)?;
                self.push_val(Val::Other("bytes"))?;
            }
            b'C' => {
                let n = self.inp.byte()?;
                self.inp.bytes(u64::from(n), false, Limit::StringBytes)?;
                self.push_val(Val::Other("bytes"))?;
            }
            0x8e | 0x96 => {
                let n = self.inp.u64le()?;
                self.inp.bytes(n, false, Limit::StringBytes)?;
                self.push_val(Val::Other("bytes"))?;
            }
            b']' | b')' => self.push_val(Val::List(Vec::new()))?,
            b'}' => self.push_val(Val::Dict(Vec::new()))?,
            0x8f => self.push_val(Val::Other("a set"))?,
            b'l' | b't' => {
                let items = self.pop_mark()?;
                self.push_list(items)?;
            }
            0x85..=0x87 => {
                let n = usize::from(op - 0x84);
                if self.stack.len() < n + self.marks.last().copied().unwrap_or(0) {
                    return Err(decode(format!(
                        "TUPLE{n} at byte {} lacks items",
                        self.inp.at
                    )));
                }
                let items = self.stack.split_off(self.stack.len() - n);
                self.push_list(items)?;
            }
            b'd' => {
                let items = self.pop_mark()?;
                self.push_val(Val::Dict(Vec::new()))?;
                let dict = self.top()?;
                self.set_items(dict, &items)?;
            }
            0x91 => {
                self.pop_mark()?;
                self.push_val(Val::Other("a set"))?;
            }
            b'a' => {
                let item = self.pop()?;
                let list = self.top()?;
                self.append(list, item)?;
            }
            b'e' => {
                let items = self.pop_mark()?;
                let list = self.top()?;
                for item in items {
                    self.append(list, item)?;
                }
            }
            b's' => {
                let value = self.pop()?;
                let key = self.pop()?;
                let dict = self.top()?;
                self.set_items(dict, &[key, value])?;
            }
            b'u' => {
                let items = self.pop_mark()?;
                let dict = self.top()?;
                self.set_items(dict, &items)?;
            }
            0x90 => {
                self.pop_mark()?;
                self.top()?;
            }
            0x94 => {
                let index = self.memo.len() as u64 + self.sparse_memo.len() as u64;
                self.put(index)?;
            }
            b'q' => {
                let i = self.inp.byte()?;
                self.put(u64::from(i))?;
            }
            b'r' => {
                let i = self.inp.u32le()?;
                self.put(i)?;
            }
            b'p' => {
                let i = self.text_index()?;
                self.put(i)?;
            }
            b'h' => {
                let i = self.inp.byte()?;
                self.get(u64::from(i))?;
            }
            b'j' => {
                let i = self.inp.u32le()?;
                self.get(i)?;
            }
            b'g' => {
                let i = self.text_index()?;
                self.get(i)?;
            }
            // Globals, calls and object constructions: never looked up, never executed.
            b'c' => {
                self.inp.line(Limit::StringBytes)?;
                self.inp.line(Limit::StringBytes)?;
                self.push_val(Val::Other(INERT))?;
            }
            0x93 | b'R' | 0x81 => {
                self.pop()?;
                self.pop()?;
                self.push_val(Val::Other(INERT))?;
            }
            0x92 => {
                self.pop()?;
                self.pop()?;
                self.pop()?;
                self.push_val(Val::Other(INERT))?;
            }
            b'i' => {
                self.inp.line(Limit::StringBytes)?;
                self.inp.line(Limit::StringBytes)?;
                self.pop_mark()?;
                self.push_val(Val::Other(INERT))?;
            }
            b'o' => {
                self.pop_mark()?;
                self.push_val(Val::Other(INERT))?;
            }
            b'b' => {
                self.pop()?;
                self.top()?;
            }
            0x82 => {
                self.inp.byte()?;
                self.push_val(Val::Other(INERT))?;
            }
            0x83 => {
                let mut b = [0u8; 2];
                self.inp.fill(&mut b)?;
                self.push_val(Val::Other(INERT))?;
            }
            0x84 => {
                self.inp.u32le()?;
                self.push_val(Val::Other(INERT))?;
            }
            b'P' => {
                self.inp.line(Limit::StringBytes)?;
                self.push_val(Val::Other(INERT))?;
            }
            b'Q' => {
                self.pop()?;
                self.push_val(Val::Other(INERT))?;
            }
            0x97 => self.push_val(Val::Other("an out-of-band buffer"))?,
            0x98 => {
                self.top()?;
            }
            other => {
                return Err(decode(format!(
                    "unknown opcode {other:#04x} at byte {}",
                    self.inp.at - 1
                )));
            }
        }
        if !memo_op {
            self.fresh_dict = fresh;
        }
        Ok(false)
    }

    fn push_list(&mut self, items: Vec<Ref>) -> Result<(), Fail> {
        if self.skipping() {
            self.stack.push(SKIPPED);
            return Ok(());
        }
        for _ in 0..items.len() {
            self.doc.count_item()?;
        }
        let r = self.doc.push(Val::List(items))?;
        self.stack.push(r);
        Ok(())
    }

    fn append(&mut self, list: Ref, item: Ref) -> Result<(), Fail> {
        if self.skipping() {
            return Ok(());
        }
        if self.doc.append(list, item)? {
            Ok(())
        } else {
            Err(decode(format!(
                "APPEND at byte {} to {}, not a list",
                self.inp.at,
                self.doc.view(list).kind()
            )))
        }
    }

    fn set_items(&mut self, dict: Ref, items: &[Ref]) -> Result<(), Fail> {
        if self.skipping() {
            return Ok(());
        }
        if items.len() % 2 != 0 {
            return Err(decode(format!(
                "SETITEMS at byte {} with an odd number of items",
                self.inp.at
            )));
        }
        for pair in items.chunks_exact(2) {
            if !self.doc.set_item(dict, pair[0], pair[1])? {
                return Err(decode(format!(
                    "SETITEM at byte {} on {}, not a dict",
                    self.inp.at,
                    self.doc.view(dict).kind()
                )));
            }
        }
        Ok(())
    }
}
