//! The state beside the inbox (docs/untrusted-input.md): the files that live in the
//! folder holding the inbox, and nothing else writes or reads them —
//! `files` (the one safe reader and writer: capped, never through a link,
//! never waiting, written whole; a configured task folder there opened
//! without following a link), `attempts` (attempt counts and the runs of
//! each task's unsettled attempts), `slots` (the recurring tasks' slots),
//! `spend` (the day's spend, the budget ledger), `budget` (the `[budget]`
//! limits asked before every model request and told every reply's
//! spend, kept in that ledger), `lock` (the single-instance run lock).

#![deny(clippy::print_stdout, clippy::print_stderr)]

mod attempts;
mod budget;
pub mod files;
mod lock;
mod slots;
mod spend;

pub use attempts::{ATTEMPTS_FILE, AttemptCount, Attempts, FileRef, RunRef};
pub use budget::{Budget, Standing, day_of};
pub use files::task_folder;
pub use lock::RunLock;
pub use slots::{Slots, TaskSlots};
pub use spend::{Added, DaySpend, Found, SPEND_FILE, SPEND_LOCK, Wait};

#[cfg(test)]
mod tests;
