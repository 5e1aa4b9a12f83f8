//! README's "Use it as a library" program cannot rot: its code block is the body of
//! `examples/two_streams_and_a_group.rs` (between the file's `//!` header and its test
//! module), and `cargo test` runs that example's test (`test = true` in Cargo.toml).

/// The first ```rust block after the "## Use it as a library" heading.
fn readme_block() -> String {
    let readme = include_str!("../README.md");
    let section = readme
        .split_once("## Use it as a library")
        .expect("README has the section")
        .1;
    let code = section
        .split_once("```rust\n")
        .expect("the section has a rust block")
        .1;
    code.split_once("\n```\n")
        .expect("the block ends")
        .0
        .to_owned()
        + "\n"
}

#[test]
fn the_readme_block_is_the_example_file() {
    let example = include_str!("../examples/two_streams_and_a_group.rs");
    let body: Vec<&str> = example
        .lines()
        .skip_while(|l| l.starts_with("//!") || l.is_empty())
        .take_while(|l| *l != "#[cfg(test)]")
        .collect();
    assert_eq!(
        readme_block(),
        body.join("\n").trim_end().to_owned() + "\n",
        "README's library example and examples/two_streams_and_a_group.rs differ"
    );
}
