//! What a run leaves beside the inbox for `status` (docs/operating.md, "The
//! morning after"): how it ended — when, its exit code, what its tasks did —
//! and how its notifications and traces went. A record that cannot be written
//! is a warning; it never changes the run's exit code.

use chrono::{DateTime, Utc};

use super::exit;
use harness_config::Config;
use harness_drain::{RunEnd, RunOptions, RunOutcome, Tally};
use harness_state::{Channel, Delivered, Deliveries, LastRun};

/// Characters of the one line a record gives for why a run ended as it did.
const NOTE_CHARS: usize = 300;

/// Keeps how the run ended with `code` (`only`: the task `run-task` named).
pub(super) fn last_run(cfg: &Config, only: Option<&str>, end: &RunEnd, code: u8) {
    let finished = end.started
        + chrono::TimeDelta::from_std(end.duration).unwrap_or(chrono::TimeDelta::zero());
    let none = Tally::default();
    let unreached;
    let (tally, note) = match &end.result {
        Ok(RunOutcome::Finished(t)) => (
            t,
            t.setup_fault
                .as_ref()
                .map(|f| format!("setup fault: {f}"))
                .or_else(|| t.budget_exhausted.as_ref().map(|b| format!("budget: {b}")))
                .or_else(|| t.problems.first().map(|p| format!("problem: {p}"))),
        ),
        Ok(RunOutcome::Unreachable { why, left }) => {
            // What would have run waits: counted as not started.
            unreached = Tally {
                not_started: *left,
                ..Tally::default()
            };
            (
                &unreached,
                Some(format!("the endpoint is unreachable: {why}")),
            )
        }
        Ok(RunOutcome::Locked { .. }) => (&none, None),
        Err(e) => (&none, Some(format!("{e:#}"))),
    };
    keep(
        cfg,
        &LastRun {
            command: command_of(only),
            started: end.started,
            finished,
            exit_code: code,
            succeeded: tally.succeeded,
            failed: tally.failed,
            retry_later: tally.retry_later,
            interrupted: tally.interrupted,
            not_started: tally.not_started,
            note: note.map(|n| one_note(cfg, &n)),
        },
    );
}

/// Keeps that a `run` or `run-task` (`only`) stopped with `code` before
/// it ran anything, at `at`, for `why`: a config that loads only without
/// its secrets, dependencies that cannot be made. Without it, `status`
/// would show the last run that got going as the last run.
pub(super) fn stopped_early(
    cfg: &Config,
    only: Option<&str>,
    at: DateTime<Utc>,
    code: u8,
    why: &str,
) {
    keep(
        cfg,
        &LastRun {
            command: command_of(only),
            started: at,
            finished: at,
            exit_code: code,
            succeeded: 0,
            failed: 0,
            retry_later: 0,
            interrupted: 0,
            not_started: 0,
            note: Some(one_note(cfg, why)),
        },
    );
}

/// [`stopped_early`] of a run (not a dry run) whose dependencies could
/// not be made, for `why`.
pub(super) fn no_deps(cfg: &Config, opts: &RunOptions, why: &str) {
    if !opts.batch.dry_run {
        let at = (harness_agent::deps::system_clock())();
        stopped_early(cfg, opts.only.as_deref(), at, exit::USAGE, why);
    }
}

fn command_of(only: Option<&str>) -> String {
    only.map_or_else(|| "run".into(), |name| format!("run-task {name}"))
}

/// A note as one line: redacted first, then clipped (a secret cut in two
/// by the clip would no longer be found whole).
fn one_note(cfg: &Config, note: &str) -> String {
    harness_base::text::one_line(&cfg.redactor().redact(note.to_string()), NOTE_CHARS)
}

fn keep(cfg: &Config, record: &LastRun) {
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

    /// A config whose paths are under `dir`, with `key` the endpoint's secret.
    fn config(dir: &std::path::Path, key: &'static str) -> Config {
        let text = "[endpoint]\nkind = \"openai\"\n[openai]\nbase_url = \"http://127.0.0.1:1/v1\"\napi_key_env = \"KEY\"\n[paths]\ninbox = \"tasks/inbox\"\n";
        harness_config::Config::parse(text, &dir.join("agent.toml"), dir, &|k: &str| {
            (k == "KEY").then(|| key.to_string())
        })
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// A secret that the clip would cut in two is still found whole.
    #[test]
    fn a_note_is_redacted_before_it_is_clipped() {
        let dir = tempfile::tempdir().unwrap();
        let key = "sk-0123456789abcdef0123456789abcdef";
        let cfg = config(dir.path(), key);
        std::fs::create_dir_all(cfg.paths.state_dir()).unwrap();
        let why = format!("{}{key} and more", "x".repeat(NOTE_CHARS - 10));
        let at = "2026-04-09T06:15:00Z".parse().unwrap();
        stopped_early(&cfg, None, at, 2, &why);
        let kept = LastRun::load(&cfg.paths.state_dir()).unwrap().unwrap();
        let note = kept.note.unwrap();
        assert!(!note.contains(&key[..8]), "{note}");
        assert_eq!(note.chars().count(), NOTE_CHARS);
        assert_eq!(
            (kept.command.as_str(), kept.exit_code, kept.started),
            ("run", 2, at)
        );
    }

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
