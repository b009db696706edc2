//! Where a task's attempts are counted (docs/operating.md, "Endpoints and
//! retries"; docs/tasks.md, "Recurring tasks"; docs/resume-replay-eval.md,
//! "Resume"): the pipeline's first and last steps. Before a task starts its
//! attempt is saved beside the inbox with the run's id — so a task that kills
//! the process still reaches `max_attempts`, and its next attempt knows which
//! run folders are its own to resume from — and after it ends the attempt
//! settles: forgotten when the task is filed, given back when it was
//! interrupted, kept when it is tried again.

use std::sync::Mutex;

use super::Slot;
use super::recurring;
use harness_base::sync::lock;
use harness_config::Config;
use harness_records::{Status, Summary};
use harness_state::{AttemptCount, Attempts, FileRef, RunRef, Slots};

/// Where a task's attempts are counted, beside the inbox.
pub(super) enum Counting<'a> {
    /// Nothing is counted: a dry run, `exec`, an eval, a replay,
    /// `run-task --recurring`.
    Uncounted,
    /// Inbox tasks: the attempt counts.
    Inbox(Mutex<Attempts>),
    /// A recurring task's slot: the recurring state.
    Slot(&'a Mutex<Slots>),
}

impl Counting<'_> {
    /// Counts an attempt before the task starts and saves it with the
    /// run's id, so a task that kills the process still reaches
    /// `max_attempts`, and its next attempt knows which records are its own.
    ///
    /// `run` is the run folder this attempt writes; `file` the task file it
    /// runs (an inbox task's: another file under the same name since the
    /// last attempt starts fresh).
    pub(super) fn begin(
        &self,
        cfg: &Config,
        slot: Option<&Slot>,
        name: &str,
        file: Option<FileRef>,
        run: RunRef,
    ) -> anyhow::Result<AttemptCount> {
        let max = cfg.limits.max_attempts;
        let state_dir = cfg.paths.state_dir();
        match (self, slot) {
            (Counting::Inbox(attempts), _) => {
                let mut counts = lock(attempts);
                let (previous, runs) = counts
                    .of_file(name, file)
                    .map_or((0, Vec::new()), |t| (t.attempts, t.runs.clone()));
                let exhausted = previous >= max;
                if !exhausted {
                    counts.begin(name, run, file);
                    counts.save(&state_dir)?;
                }
                Ok(AttemptCount {
                    previous,
                    exhausted,
                    runs,
                })
            }
            (Counting::Slot(state), Some(slot)) => {
                let mut state = lock(state);
                let begun = recurring::begin_slot(&mut state, name, slot, max, run);
                state.save(&state_dir)?;
                Ok(begun)
            }
            _ => Ok(AttemptCount::UNCOUNTED),
        }
    }

    /// After the task: a filed task's count (or its slot) settles; an
    /// interrupted one gets its attempt back; a retryable one keeps it.
    /// Either way the runs to resume from are kept until it settles.
    pub(super) fn settle(
        &self,
        cfg: &Config,
        slot: Option<&Slot>,
        name: &str,
        count: &AttemptCount,
        summary: &Summary,
    ) -> anyhow::Result<()> {
        let state_dir = cfg.paths.state_dir();
        match (self, slot) {
            (Counting::Inbox(attempts), _) => {
                let mut counts = lock(attempts);
                match (summary.status, summary.retryable) {
                    (Status::Interrupted, _) => counts.set(name, count.previous),
                    (Status::Failed, true) => {}
                    _ => counts.clear(name),
                }
                counts.save(&state_dir)
            }
            (Counting::Slot(state), Some(slot)) => {
                let mut state = lock(state);
                recurring::settle_slot(&mut state, name, slot, summary);
                state.save(&state_dir)
            }
            _ => Ok(()),
        }
    }
}
