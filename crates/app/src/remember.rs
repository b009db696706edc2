//! What a run leaves beside the inbox for `status` (docs/operating.md, "The
//! morning after"): how it ended — when, its exit code, what its tasks did —
//! and how its notifications and traces went. A record that cannot be written
//! is a warning; it never changes the run's exit code.

use chrono::{DateTime, Utc};

use harness_config::Config;
use harness_drain::{RunEnd, RunOutcome};
use harness_state::{Channel, Delivered, Deliveries, LastRun};

/// Characters of the one line a record gives for why a run ended as it did.
const NOTE_CHARS: usize = 300;

/// Keeps how the run ended with `code` (`only`: the task `run-task` named).
pub(super) fn last_run(cfg: &Config, only: Option<&str>, end: &RunEnd, code: u8) {
    let finished = end.started
        + chrono::TimeDelta::from_std(end.duration).unwrap_or(chrono::TimeDelta::zero());
    let mut record = LastRun {
        command: only.map_or_else(|| "run".into(), |name| format!("run-task {name}")),
        started: end.started,
        finished,
        exit_code: code,
        succeeded: 0,
        failed: 0,
        retry_later: 0,
        interrupted: 0,
        not_started: 0,
        note: None,
    };
    let note = match &end.result {
        Ok(RunOutcome::Finished(t)) => {
            record.succeeded = t.succeeded;
            record.failed = t.failed;
            record.retry_later = t.retry_later;
            record.interrupted = t.interrupted;
            record.not_started = t.not_started;
            t.setup_fault
                .as_ref()
                .map(|f| format!("setup fault: {f}"))
                .or_else(|| t.budget_exhausted.as_ref().map(|b| format!("budget: {b}")))
                .or_else(|| t.problems.first().map(|p| format!("problem: {p}")))
        }
        Ok(RunOutcome::Unreachable(why)) => Some(format!("the endpoint is unreachable: {why}")),
        Ok(RunOutcome::Locked { .. }) => None,
        Err(e) => Some(format!("{e:#}")),
    };
    record.note = note.map(|n| {
        let line = n.split_whitespace().collect::<Vec<_>>().join(" ");
        cfg.redactor()
            .redact(harness_base::text::clip(&line, NOTE_CHARS))
    });
    if let Err(e) = record.save(&cfg.paths.state_dir()) {
        tracing::warn!(error = %format!("{e:#}"), "cannot keep how the run ended beside the inbox; status will not say it");
    }
}

/// How the run's traces went: `lost` of them did not reach the collector;
/// a run that sent none says nothing.
pub(super) fn traces(lost: u64, sent: bool) -> Option<Delivered> {
    match (lost, sent) {
        (0, false) => None,
        (0, true) => Some(Delivered::Through),
        (count, _) => Some(Delivered::Failed { count, error: None }),
    }
}

/// How the run's notifications went: `failures` of `attempts`, the last
/// for `error`; a run that sent none says nothing.
pub(super) fn notifications(
    attempts: u64,
    failures: u64,
    error: Option<String>,
) -> Option<Delivered> {
    match (attempts, failures) {
        (0, 0) => None,
        (_, 0) => Some(Delivered::Through),
        (_, count) => Some(Delivered::Failed { count, error }),
    }
}

/// Adds `outcome` on `channel` at `at` to the record beside the inbox.
pub(super) fn delivered(
    cfg: &Config,
    channel: Channel,
    at: DateTime<Utc>,
    outcome: Option<Delivered>,
) {
    let Some(outcome) = outcome else {
        return;
    };
    let outcome = match outcome {
        Delivered::Failed { count, error } => Delivered::Failed {
            count,
            error: error.map(|e| cfg.redactor().redact(e)),
        },
        through => through,
    };
    if let Err(e) = Deliveries::record(&cfg.paths.state_dir(), channel, at, &outcome) {
        tracing::warn!(error = %format!("{e:#}"), "cannot keep how notifications and traces went beside the inbox");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_channel_that_sent_nothing_says_nothing_and_any_failure_is_one() {
        assert_eq!(traces(0, false), None);
        assert_eq!(traces(0, true), Some(Delivered::Through));
        assert_eq!(
            traces(2, true),
            Some(Delivered::Failed {
                count: 2,
                error: None
            })
        );
        assert_eq!(notifications(0, 0, None), None);
        assert_eq!(notifications(2, 0, None), Some(Delivered::Through));
        assert_eq!(
            notifications(2, 1, Some("HTTP 500".into())),
            Some(Delivered::Failed {
                count: 1,
                error: Some("HTTP 500".into())
            })
        );
    }
}
