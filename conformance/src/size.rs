//! Byte sizes on the command line (`--device-memory 7GiB`): a whole number of bytes, or a
//! number with a binary unit `KiB`, `MiB`, `GiB` or `TiB` (case-insensitive, optional
//! space, a fraction allowed when the result is whole bytes: `1.5KiB` is 1536). Decimal
//! units (`KB`, `MB`, `GB`, `TB`) are refused rather than guessed: PyTorch and
//! `nvidia-smi` mean powers of 1024 by them, disk vendors powers of 1000. One parser for
//! every byte option of every command ([`parse_size`]); clap names the flag in the error.

/// Why a size does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// Not a number with an optional unit (negative numbers included).
    #[error(
        "`{0}` is not a size; valid: a whole number of bytes or a number with KiB, MiB, GiB or TiB (e.g. 7GiB)"
    )]
    NotASize(String),
    /// A unit other than the binary ones.
    #[error(
        "unknown unit `{0}`; valid: KiB, MiB, GiB, TiB (binary, case-insensitive); decimal KB/MB/GB/TB are refused: write KiB/MiB/GiB/TiB"
    )]
    UnknownUnit(String),
    /// Larger than `u64::MAX` bytes.
    #[error("`{0}` is more than {max} bytes", max = u64::MAX)]
    Overflow(String),
    /// A fraction that is not a whole number of bytes.
    #[error("`{0}` is not a whole number of bytes")]
    NotWhole(String),
}

/// Parses `text` as a size in bytes (see the module doc).
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = (&t[..split], t[split..].trim());
    let not_a_size = || SizeError::NotASize(text.to_owned());
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return Err(not_a_size());
    }
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "kib" => 10,
        "mib" => 20,
        "gib" => 30,
        "tib" => 40,
        _ if unit.starts_with('-') || unit.is_empty() => return Err(not_a_size()),
        _ if !unit.chars().all(|c| c.is_ascii_alphabetic()) => return Err(not_a_size()),
        _ => return Err(SizeError::UnknownUnit(unit.to_owned())),
    };
    if fraction.len() > 18 {
        return Err(SizeError::NotWhole(text.to_owned()));
    }
    let overflow = || SizeError::Overflow(text.to_owned());
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| overflow())?
    };
    let scale = 10u128.pow(u32::try_from(fraction.len()).unwrap_or(0));
    let fraction: u128 = if fraction.is_empty() {
        0
    } else {
        fraction.parse().map_err(|_| not_a_size())?
    };
    let unit = 1u128 << shift;
    let frac_bytes = fraction * unit;
    if frac_bytes % scale != 0 {
        return Err(SizeError::NotWhole(text.to_owned()));
    }
    let bytes = whole
        .checked_mul(unit)
        .and_then(|b| b.checked_add(frac_bytes / scale))
        .ok_or_else(overflow)?;
    u64::try_from(bytes).map_err(|_| overflow())
}

/// [`parse_size`] for clap's `value_parser`: the message clap puts after the flag's name.
pub fn size_arg(text: &str) -> Result<u64, String> {
    parse_size(text).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_bytes_and_binary_units_case_insensitively() {
        assert_eq!(parse_size("31457280"), Ok(30 << 20));
        assert_eq!(parse_size("7GiB"), Ok(7 << 30));
        assert_eq!(parse_size("7 gib"), Ok(7 << 30));
        assert_eq!(parse_size("30MIB"), Ok(30 << 20));
        assert_eq!(parse_size("1.5KiB"), Ok(1536));
        assert_eq!(parse_size("2TiB"), Ok(2 << 40));
        assert_eq!(parse_size("0"), Ok(0));
    }

    #[test]
    fn decimal_units_negatives_overflow_and_fractions_of_a_byte_are_errors() {
        assert!(matches!(parse_size("7GB"), Err(SizeError::UnknownUnit(u)) if u == "GB"));
        assert!(matches!(parse_size("7XiB"), Err(SizeError::UnknownUnit(_))));
        assert!(matches!(parse_size("-5"), Err(SizeError::NotASize(_))));
        assert!(matches!(parse_size("-5MiB"), Err(SizeError::NotASize(_))));
        assert!(matches!(parse_size(""), Err(SizeError::NotASize(_))));
        assert!(matches!(parse_size("1.2.3"), Err(SizeError::NotASize(_))));
        assert!(matches!(
            parse_size("18446744073709551616"),
            Err(SizeError::Overflow(_))
        ));
        assert!(matches!(
            parse_size("16777216TiB"),
            Err(SizeError::Overflow(_))
        ));
        assert!(matches!(parse_size("0.3KiB"), Err(SizeError::NotWhole(_))));
        assert!(
            parse_size("7GB")
                .unwrap_err()
                .to_string()
                .contains("KiB/MiB/GiB/TiB")
        );
    }
}
