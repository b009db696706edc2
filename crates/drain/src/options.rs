//! What a batch is asked (docs/operating.md, "Commands"): [`BatchOptions`], how
//! a batch runs and who is told — shared by `run`, `run-task`, `exec`, `eval`
//! and `replay` — beside what each command asks of its own ([`RunOptions`] for
//! `run` and `run-task`); and [`Mode`], one batch as the pipeline reads it,
//! resolved from them by one constructor per kind of batch, with that
//! batch's facts (where its records go, whether its files move, the run it
//! replays, its slot).

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

/// One batch as the pipeline reads it: its [`BatchOptions`] resolved, with
/// the facts of its kind. Made only by the constructors below, one per kind
/// of batch (the inbox, a slot, `exec`, `replay`, `eval`).
#[derive(Debug, Clone)]
pub struct Mode {
    /// Write tools become logged intents.
    pub(crate) dry_run: bool,
    /// Task files move to `done/` / `failed/` and attempts are counted (a
    /// real `run`); otherwise every file stays where it is.
    pub(crate) file: bool,
    /// Where the run folders go (`<logs>/<task>/<run_id>/`).
    pub(crate) logs: PathBuf,
    /// `<task>/<run_id>` of the run this one replays, for its summary.
    pub(crate) replay_of: Option<String>,
    /// Where each task's trace goes (`[traces]`; a replay only with `--traces`).
    pub(crate) traces: Option<Traces>,
    /// The date role prompts see (`{{date}}`); a replay keeps the recorded
    /// one; a slot's date wins over both.
    pub(crate) today: Option<chrono::NaiveDate>,
    /// The live lines on a terminal: the drain draws them, the loop never sees them.
    pub(crate) progress: Progress,
    /// Told of each task filed.
    pub(crate) on_end: Option<OnEnd>,
    /// A recurring task's slot: what its body's `{{date}}` and
    /// `{{last_success}}` say, and its summary's `slot` (docs/tasks.md,
    /// "Recurring tasks").
    pub(crate) slot: Option<Slot>,
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

impl BatchOptions {
    /// A `run`'s inbox tasks: filed, unless it is a dry run.
    pub(crate) fn inbox(&self, cfg: &Config) -> Mode {
        Mode {
            file: !self.dry_run,
            ..self.resolve(cfg)
        }
    }

    /// A recurring task run for its slot; its file never moves.
    pub(crate) fn slot(&self, cfg: &Config, slot: Slot) -> Mode {
        Mode {
            slot: Some(slot),
            ..self.resolve(cfg)
        }
    }

    /// `exec`'s task, from a file of its own that stays where it is.
    pub fn exec(&self, cfg: &Config) -> Mode {
        self.resolve(cfg)
    }

    /// A replay of the run `of`, on the date it ran (and for its slot);
    /// write tools stay intents unless `live_writes`.
    pub fn replay(
        &self,
        cfg: &Config,
        of: String,
        today: chrono::NaiveDate,
        slot: Option<Slot>,
        live_writes: bool,
    ) -> Mode {
        Mode {
            dry_run: self.dry_run || !live_writes,
            replay_of: Some(of),
            today: Some(today),
            slot,
            ..self.resolve(cfg)
        }
    }

    /// One variant of an eval, recorded under `logs`, its traces
    /// labelled with `labels`; write tools stay intents unless
    /// `live_writes`.
    pub fn eval(
        &self,
        cfg: &Config,
        logs: &std::path::Path,
        labels: Vec<(&'static str, String)>,
        live_writes: bool,
    ) -> Mode {
        Mode {
            dry_run: self.dry_run || !live_writes,
            logs: logs.to_path_buf(),
            traces: self.traces.as_ref().map(|t| t.for_config(cfg, labels)),
            ..self.resolve(cfg)
        }
    }

    /// What every kind shares: these options, nothing filed, the records
    /// under the config's logs folder.
    fn resolve(&self, cfg: &Config) -> Mode {
        Mode {
            dry_run: self.dry_run,
            file: false,
            logs: cfg.paths.logs.clone(),
            replay_of: None,
            traces: self.traces.clone(),
            today: None,
            progress: self.progress.clone(),
            on_end: self.on_end.clone(),
            slot: None,
        }
    }
}
