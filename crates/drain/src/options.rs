//! What a batch is asked (docs/operating.md, "Commands"): [`BatchOptions`], how
//! a batch runs and who is told — shared by `run`, `run-task`, `exec`, `eval`
//! and `replay` — beside what each command asks of its own ([`RunOptions`] for
//! `run` and `run-task`); and [`Mode`], one batch as the pipeline reads it,
//! made from them: the options and this batch's facts (where its records go,
//! whether its files move, the run it replays, its slot).

use std::path::PathBuf;

use harness_config::Config;
use harness_display::Progress;
use harness_records::Summary;
use harness_traces::Traces;

/// How a batch runs and who is told: what every command that runs tasks
/// (`run`, `run-task`, `exec`, `eval`, `replay`) shares, filled in one
/// place by the app.
#[derive(Debug, Clone, Default)]
pub struct BatchOptions {
    /// `--dry-run`: write tools become logged intents; a run files nothing,
    /// counts no attempt and prunes nothing.
    pub dry_run: bool,
    /// Tasks at once.
    pub concurrency: usize,
    /// The live lines on a terminal (hidden unless the binary draws them).
    pub progress: Progress,
    /// Told of each task as it ends (`run --json`, the answer of `run-task`
    /// and `exec`).
    pub on_end: Option<OnEnd>,
    /// Where each task's trace goes, when `[traces]` is set.
    pub traces: Option<Traces>,
    /// Told once a run holds the lock, before its first task (`[notify]`'s
    /// `/start`); it must not wait. Only `run` takes the lock.
    pub on_locked: Option<OnLocked>,
    /// Told once the run's work is done, while it still holds the lock
    /// (`[notify]`'s digest takes its mark there, so two runs never both
    /// take it); a few file operations at most.
    pub before_unlock: Option<OnLocked>,
}

/// One `run` / `run-task`: the batch, and which tasks it drains.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub batch: BatchOptions,
    /// `run-task NAME`: only this inbox entry (or, with `recurring`, this
    /// recurring task, now).
    pub only: Option<String>,
    /// `run-task --recurring NAME`.
    pub recurring: bool,
}

/// What [`BatchOptions::on_locked`] and [`BatchOptions::before_unlock`] call.
#[derive(Clone)]
pub struct OnLocked(pub std::sync::Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for OnLocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnLocked")
    }
}

/// A task's end, for whoever asked to be told: its summary and, for a
/// structured answer, the JSON that matched the schema.
#[derive(Clone)]
pub struct OnEnd(pub std::sync::Arc<EndFn>);

/// What [`OnEnd`] calls.
pub type EndFn = dyn Fn(&Summary, Option<&serde_json::Value>) + Send + Sync;

impl std::fmt::Debug for OnEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnEnd")
    }
}

/// How a batch of tasks is handled, by `run`, `exec`, `eval` and `replay`
/// alike: its [`BatchOptions`] as the pipeline reads them, and the facts of
/// this batch.
#[derive(Debug, Clone)]
pub struct Mode {
    /// Write tools become logged intents.
    pub dry_run: bool,
    /// Task files move to `done/` / `failed/` and attempts are counted (a
    /// real `run`); otherwise every file stays where it is.
    pub file: bool,
    /// Where the run folders go (`<logs>/<task>/<run_id>/`).
    pub logs: PathBuf,
    /// `<task>/<run_id>` of the run this one replays, for its summary.
    pub replay_of: Option<String>,
    /// Where each task's trace goes (`[traces]`; a replay only with `--traces`).
    pub traces: Option<Traces>,
    /// The date role prompts see (`{{date}}`); a replay keeps the recorded
    /// one; a slot's date wins over both.
    pub today: Option<chrono::NaiveDate>,
    /// The live lines on a terminal: the drain draws them, the loop never sees them.
    pub progress: Progress,
    /// Told of each task filed.
    pub on_end: Option<OnEnd>,
    /// A recurring task's slot: what its body's `{{date}}` and
    /// `{{last_success}}` say, and its summary's `slot` (docs/tasks.md,
    /// "Recurring tasks").
    pub slot: Option<Slot>,
}

/// The scheduled time a recurring task runs for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    pub at: chrono::DateTime<chrono::Utc>,
    /// `at`'s date in the schedule's time zone.
    pub date: chrono::NaiveDate,
    /// The date of the last slot that succeeded.
    pub last_success: Option<chrono::NaiveDate>,
}

impl Mode {
    /// A batch as `opts` asks, that files nothing and records under the
    /// config's logs folder; callers change what differs.
    pub fn new(cfg: &Config, opts: &BatchOptions) -> Mode {
        Mode {
            dry_run: opts.dry_run,
            file: false,
            logs: cfg.paths.logs.clone(),
            replay_of: None,
            traces: opts.traces.clone(),
            today: None,
            progress: opts.progress.clone(),
            on_end: opts.on_end.clone(),
            slot: None,
        }
    }
}
