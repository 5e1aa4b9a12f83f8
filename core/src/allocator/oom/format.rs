//! How the out-of-memory message spells bytes and lists (PyTorch's `format_size`).

use std::fmt;

/// Bytes in PyTorch's `format_size` style (`1.50 GiB`, `20.00 MiB`, `512 bytes`).
pub struct FormatSize(pub u64);

impl fmt::Display for FormatSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        let (value, unit) = if b < 1 << 10 {
            return write!(f, "{b} bytes");
        } else if b < 1 << 20 {
            (b as f64 / f64::from(1u32 << 10), "KiB")
        } else if b < 1 << 30 {
            (b as f64 / f64::from(1u32 << 20), "MiB")
        } else {
            (b as f64 / f64::from(1u32 << 30), "GiB")
        };
        write!(f, "{value:.2} {unit}")
    }
}

/// How many entries of each list the message spells out.
const SHOWN: usize = 4;

/// Writes ` label: a; b; c (and N more)` (no final stop) for the first entries of `items`.
pub(crate) fn write_list<T: fmt::Display>(
    f: &mut fmt::Formatter<'_>,
    label: &str,
    items: &[T],
) -> fmt::Result {
    write!(f, " {label}: ")?;
    for (i, item) in items.iter().take(SHOWN).enumerate() {
        if i > 0 {
            write!(f, "; ")?;
        }
        write!(f, "{item}")?;
    }
    if items.len() > SHOWN {
        write!(f, " (and {} more)", items.len() - SHOWN)?;
    }
    Ok(())
}
