//! The argument check every communicator's `new_group` shares.

/// Checks the `ranks` of a `new_group` call on a communicator of `size` members, as NCCL and
/// HCCL require them: at least one, each below `size`, none twice. Returns the position of
/// `rank` (the caller) in `ranks`, or `None` when the caller is not a member; the error is
/// the reason, for the backend's own `InvalidArgument`.
pub fn group_position(ranks: &[usize], size: usize, rank: usize) -> Result<Option<usize>, String> {
    if ranks.is_empty() {
        return Err("a group needs at least one rank".to_owned());
    }
    let mut seen = vec![false; size];
    for &r in ranks {
        if r >= size || std::mem::replace(&mut seen[r], true) {
            return Err(format!(
                "ranks {ranks:?} must be distinct ranks below {size}"
            ));
        }
    }
    Ok(ranks.iter().position(|&r| r == rank))
}

#[cfg(test)]
mod tests {
    use super::group_position;

    #[test]
    fn members_empty_out_of_range_and_repeated_ranks() {
        assert_eq!(group_position(&[2, 0], 4, 0), Ok(Some(1)));
        assert_eq!(group_position(&[2, 3], 4, 0), Ok(None));
        assert!(
            group_position(&[], 4, 0)
                .unwrap_err()
                .contains("at least one")
        );
        assert!(group_position(&[4], 4, 0).unwrap_err().contains("below 4"));
        assert!(
            group_position(&[1, 1], 4, 1)
                .unwrap_err()
                .contains("distinct")
        );
    }
}
