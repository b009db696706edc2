//! Exit codes (README, Exit codes): the one place where what a command found becomes
//! the number the process exits with, and so what systemd, a script or the
//! metrics textfile sees.

use harness_display::Progress;
use harness_drain::{NameError, RunOutcome, UsageError};
use harness_lab::replay::ReplayEnd;

pub const OK: u8 = 0;
pub const FAILED: u8 = 1;
pub(crate) const USAGE: u8 = 2;
pub(crate) const TEMPFAIL: u8 = 75;

/// How the process exiting with `code` is told: success only for 0, a
/// failure to report for a failed task or a wrong setup (1, 2), not for
/// what a later run retries by itself (75).
pub(crate) fn ending(code: u8) -> harness_notify::Ending {
    harness_notify::Ending {
        code,
        ok: code == OK,
        failed: matches!(code, FAILED | USAGE),
    }
}

/// The exit code of a reader that printed what it read (a listing, the
/// overview, a page): 1 when something of it could not be read (not
/// `read_all`: what was printed may miss runs) or the printing failed; a
/// reader whose pipe closed early (`| head`) is done.
pub(crate) fn of_listing(written: std::io::Result<()>, read_all: bool, progress: &Progress) -> u8 {
    match written {
        Ok(()) if read_all => OK,
        Ok(()) => FAILED,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => OK,
        Err(e) => {
            progress.eprintln(&format!("agent-harness: {e}"));
            FAILED
        }
    }
}

/// An outcome's exit code.
pub trait Exit {
    fn exit_code(&self) -> u8;
}

impl Exit for RunOutcome {
    /// `run` / `run-task`: 2 a setup fault, 1 a task failed, 75 something
    /// is left to try again (a `[budget]` limit reached, or `run-task`'s
    /// task could not run under the lock), else 0.
    fn exit_code(&self) -> u8 {
        match self {
            RunOutcome::Locked { wanted: None } => OK,
            RunOutcome::Locked { wanted: Some(_) } => TEMPFAIL,
            RunOutcome::Unreachable { .. } => TEMPFAIL,
            RunOutcome::Finished(t) if t.setup_fault.is_some() => USAGE,
            RunOutcome::Finished(t) if t.failed > 0 || !t.problems.is_empty() => FAILED,
            RunOutcome::Finished(t) if t.budget_exhausted.is_some() => TEMPFAIL,
            RunOutcome::Finished(t) if t.retry_later + t.interrupted + t.not_started > 0 => {
                TEMPFAIL
            }
            RunOutcome::Finished(_) => OK,
        }
    }
}

/// A run that stopped on an error: 2 for a usage or setup error (a path, a
/// name), 1 for anything else.
pub(super) fn run_error(e: &anyhow::Error) -> u8 {
    if e.downcast_ref::<UsageError>().is_some() || e.downcast_ref::<NameError>().is_some() {
        USAGE
    } else {
        FAILED
    }
}

/// `replay`: 0 the same requests and stop reason, 1 different (or the
/// replay could not be recorded), 2 not a readable run.
pub fn replay_exit(end: ReplayEnd) -> u8 {
    match end {
        ReplayEnd::Matched => OK,
        ReplayEnd::Differed | ReplayEnd::NotRecorded => FAILED,
        ReplayEnd::Unreadable => USAGE,
    }
}

/// `test-runpod`: 0 only when every step passed.
pub fn smoke_exit(passed: bool) -> u8 {
    if passed { OK } else { FAILED }
}
