//! `memreuse-conformance run`: every selected schedule on every selected backend, mode and
//! allocator configuration, a progress bar, the comparison table, and the report files.
//!
//! The steps, one file each: [`RunOptions`] (what is asked) is resolved into a [`Plan`]
//! (`plan`); a session (`session`) replays each run, judges and records it, shows progress
//! (`progress`) and rewrites the report files (`outputs`, in a directory it locks: `lock`); at the end it prints the
//! summary (`summary`) and returns the exit status. The runner does not know the command
//! line: `cli` builds its options.

mod confs;
mod lock;
mod options;
mod outputs;
mod plan;
mod progress;
mod session;
mod smallest_device;
mod summary;

use std::process::ExitCode;

pub use confs::{ConfSet, allocator_line, conf_sets};
pub use options::RunOptions;
pub use outputs::{DEFAULT_REPORT_DIR, default_report_dir};
pub use plan::{Plan, UsageError, plan};

use session::{RunKey, Session};

/// Runs the `run` subcommand; returns the exit status (0 all passed or skipped, 1 a run
/// failed or errored, 2 usage error / invalid schedule / an output that is a schedule / a
/// report directory another runner is writing).
pub fn run(options: &RunOptions) -> ExitCode {
    let plan = match plan(options) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("memreuse-conformance: {e}");
            return ExitCode::from(2);
        }
    };
    for w in &plan.warnings {
        eprintln!("memreuse-conformance: warning: {w}");
    }
    let outputs = match outputs::Outputs::open(options) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("memreuse-conformance: {e}");
            return ExitCode::from(2);
        }
    };
    let mut session = Session::start(options, &plan, outputs);
    // Each configuration is a whole set of runs, so a run stopped at a time limit has
    // complete sets for the configurations it finished.
    for set in &plan.alloc_confs {
        for entry in &plan.entries {
            for backend in &plan.backends {
                for &mode in &plan.modes {
                    session.run_one(RunKey {
                        conf: set.for_backend(backend),
                        entry,
                        backend,
                        mode,
                    });
                }
            }
        }
    }
    session.finish()
}
