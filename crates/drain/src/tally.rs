//! What a run did, by task, and what it must say besides (README, Exit codes):
//! the counts its last line and its exit code are made of.

use super::TaskEnd;
use harness_agent::StopReason;
use harness_records::Status;

/// What the run did, by task.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    pub succeeded: usize,
    /// Failed for good: moved to `failed/`.
    pub failed: usize,
    /// Left in the inbox to be tried again (retryable failure).
    pub retry_later: usize,
    pub interrupted: usize,
    /// Not started because the run was stopping.
    pub not_started: usize,
    /// The diagnosis of the setup fault that stopped the run
    /// (docs/operating.md, "Setup faults").
    pub setup_fault: Option<String>,
    /// The `[budget]` limit that paused the queue, and when it resets
    /// (docs/budget-and-traces.md, "Budget").
    pub budget_exhausted: Option<String>,
    /// What the run met besides its tasks that the operator must fix: an
    /// inbox entry that will never run, a state file that cannot be saved.
    /// The run exits 1 for them when nothing worse happened (README, Exit codes).
    pub problems: Vec<String>,
}

impl Tally {
    /// `3 succeeded, 1 failed, 2 left in the inbox for a later run in 41.2s`.
    pub fn describe(&self, elapsed: std::time::Duration) -> String {
        let mut parts = vec![format!("{} succeeded", self.succeeded)];
        if self.failed > 0 {
            parts.push(format!("{} failed", self.failed));
        }
        let later = self.retry_later + self.interrupted + self.not_started;
        if later > 0 {
            parts.push(format!("{later} left in the inbox for a later run"));
        }
        let mut text = format!("{} in {:.1}s", parts.join(", "), elapsed.as_secs_f64());
        for problem in &self.problems {
            text.push_str(&format!("\nproblem: {problem}"));
        }
        if let Some(why) = &self.budget_exhausted {
            text.push_str(&format!(
                "\nbudget: {why}; what is left waits in the inbox, nothing was filed for it"
            ));
        }
        if let Some(fault) = &self.setup_fault {
            text.push_str(&format!(
                "\nsetup fault, the run stopped and nothing was filed for it: {fault}"
            ));
        }
        text
    }
}

impl Tally {
    /// `n` tasks none of which started (a `[budget]` limit, a setup fault).
    pub(super) fn unstarted(n: usize) -> Tally {
        Tally {
            not_started: n,
            ..Tally::default()
        }
    }

    /// Adds another part of the same run.
    pub(super) fn absorb(&mut self, other: &Tally) {
        self.succeeded += other.succeeded;
        self.failed += other.failed;
        self.retry_later += other.retry_later;
        self.interrupted += other.interrupted;
        self.not_started += other.not_started;
        if self.setup_fault.is_none() {
            self.setup_fault.clone_from(&other.setup_fault);
        }
        if self.budget_exhausted.is_none() {
            self.budget_exhausted.clone_from(&other.budget_exhausted);
        }
        self.problems.extend(other.problems.iter().cloned());
    }

    pub(super) fn of(ends: &[TaskEnd]) -> Tally {
        let mut tally = Tally::default();
        for end in ends {
            match end {
                TaskEnd::NotStarted => tally.not_started += 1,
                TaskEnd::Broken { .. } => tally.failed += 1,
                TaskEnd::Filed(s) => match (s.status, s.retryable) {
                    _ if s.stop_reason == StopReason::SetupFault => {
                        tally.interrupted += 1;
                        if tally.setup_fault.is_none() {
                            tally.setup_fault = s.error.clone();
                        }
                    }
                    _ if s.stop_reason == StopReason::BudgetExhausted => {
                        tally.interrupted += 1;
                        if tally.budget_exhausted.is_none() {
                            tally.budget_exhausted = s.error.clone();
                        }
                    }
                    (Status::Succeeded, _) => tally.succeeded += 1,
                    (Status::Interrupted, _) => tally.interrupted += 1,
                    (Status::Failed, true) => tally.retry_later += 1,
                    (Status::Failed, false) => tally.failed += 1,
                },
            }
        }
        tally
    }
}
