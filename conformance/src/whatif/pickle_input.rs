//! The pickle machine's input: opcode arguments read with the position kept for messages,
//! strings and text lines bounded by [`ImportLimits`] before they are held, and values the
//! machine does not keep read past without being held.

use std::io::{BufRead, Read};

use super::limits::{Fail, Hit, ImportLimits, Limit};

/// A decoding failure with what is wrong.
pub(super) fn decode(message: impl Into<String>) -> Fail {
    Fail::Decode(message.into())
}

/// The input and the byte offset reached.
pub(super) struct PickleInput<'a> {
    input: &'a mut dyn BufRead,
    limits: &'a ImportLimits,
    /// Bytes consumed so far.
    pub at: u64,
}

impl<'a> PickleInput<'a> {
    /// Reads `input` within `limits`.
    pub fn new(input: &'a mut dyn BufRead, limits: &'a ImportLimits) -> Self {
        PickleInput {
            input,
            limits,
            at: 0,
        }
    }

    pub fn byte(&mut self) -> Result<u8, Fail> {
        let mut b = [0u8; 1];
        self.fill(&mut b)?;
        Ok(b[0])
    }

    pub fn fill(&mut self, buf: &mut [u8]) -> Result<(), Fail> {
        match self.input.read_exact(buf) {
            Ok(()) => {
                self.at += buf.len() as u64;
                Ok(())
            }
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(decode(format!(
                "the pickle ends at byte {} without its STOP opcode (truncated?)",
                self.at
            ))),
            Err(e) => Err(Fail::Io(e)),
        }
    }

    pub fn u32le(&mut self) -> Result<u64, Fail> {
        let mut b = [0u8; 4];
        self.fill(&mut b)?;
        Ok(u64::from(u32::from_le_bytes(b)))
    }

    pub fn u64le(&mut self) -> Result<u64, Fail> {
        let mut b = [0u8; 8];
        self.fill(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// `n` bytes, kept (bounded by `limit`) or, when `keep` is false, read past.
    pub fn bytes(&mut self, n: u64, keep: bool, limit: Limit) -> Result<Vec<u8>, Fail> {
        if keep && n > limit.of(self.limits) {
            return Err(Hit::new(limit, self.limits).into());
        }
        let mut out = Vec::new();
        let got = if keep {
            (&mut *self.input).take(n).read_to_end(&mut out)
        } else {
            std::io::copy(&mut (&mut *self.input).take(n), &mut std::io::sink())
                .map(|c| usize::try_from(c).unwrap_or(usize::MAX))
        }
        .map_err(Fail::Io)?;
        self.at += got as u64;
        if (got as u64) < n {
            return Err(decode(format!(
                "the pickle ends at byte {} inside a {n}-byte value (truncated?)",
                self.at
            )));
        }
        Ok(out)
    }

    /// One text line (protocol 0 arguments), without its newline, at most `limit` bytes.
    pub fn line(&mut self, limit: Limit) -> Result<Vec<u8>, Fail> {
        let max = limit.of(self.limits);
        let mut out = Vec::new();
        let got = (&mut *self.input)
            .take(max.saturating_add(1))
            .read_until(b'\n', &mut out)
            .map_err(Fail::Io)?;
        self.at += got as u64;
        if out.last() != Some(&b'\n') {
            if got as u64 > max {
                return Err(Hit::new(limit, self.limits).into());
            }
            return Err(decode(format!(
                "the pickle ends at byte {} inside a text argument (truncated?)",
                self.at
            )));
        }
        out.pop();
        Ok(out)
    }
}
