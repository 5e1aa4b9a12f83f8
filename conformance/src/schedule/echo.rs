//! How a schedule's own text is echoed in an error message: cut short, so a hostile value
//! (a megabyte-long name or key) cannot make a message huge. The parser and the
//! duplicate-key reader both echo through it.

use super::MAX_ECHO_CHARS;

/// `s` for an error message: at most [`MAX_ECHO_CHARS`] characters, with the full length
/// given when cut.
pub(crate) fn clip(s: &str) -> String {
    match s.char_indices().nth(MAX_ECHO_CHARS) {
        None => s.to_owned(),
        Some((end, _)) => format!("{}... ({} bytes)", &s[..end], s.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_text_is_echoed_whole_and_a_long_one_cut_with_its_length() {
        assert_eq!(clip("world"), "world");
        let long = "é".repeat(MAX_ECHO_CHARS + 1);
        let cut = clip(&long);
        assert_eq!(
            cut,
            format!("{}... ({} bytes)", "é".repeat(MAX_ECHO_CHARS), long.len())
        );
    }
}
