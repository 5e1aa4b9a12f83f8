//! `memreuse-conformance`: the conformance runner's command line (see `cli`).

fn main() -> std::process::ExitCode {
    memreuse_conformance::cli::main_with(std::env::args_os())
}
