//! The state beside the inbox (docs/untrusted-input.md): the files that live in the
//! folder holding the inbox, and nothing else writes or reads them —
//! `files` (the one safe reader and writer: capped, never through a link,
//! never waiting, written whole; a configured task folder there opened
//! without following a link), `attempts` (attempt counts and the runs of
//! each task's unsettled attempts), `slots` (the recurring tasks' slots),
//! `spend` (the day's spend, the budget ledger), `budget` (the `[budget]`
//! limits asked before every model request and told every reply's
//! spend, kept in that ledger), `digest` (when the last digest was
//! mailed), `lock` (the single-instance run lock and who holds it),
//! `last_run` (how the last run ended) and `deliveries` (whether
//! notifications and traces get through).

mod attempts;
mod budget;
mod deliveries;
mod digest;
pub mod files;
mod last_run;
mod lock;
mod slots;
mod spend;

pub use attempts::{ATTEMPTS_FILE, AttemptCount, Attempts, FileRef, RunRef};
pub use budget::{Budget, SpendToday, day_of};
pub use deliveries::{Channel, Delivered, Deliveries, Delivery};
pub use digest::{DigestStanding, LastDigest};
pub use files::task_folder;
pub use last_run::LastRun;
pub use lock::{Holder, LockState, RunLock};
pub use slots::{Slots, TaskSlots};
pub use spend::{Added, DaySpend, Found, SPEND_FILE, SPEND_LOCK, Wait};

#[cfg(test)]
mod tests;
