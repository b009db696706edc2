//! Draining the inbox (SPEC §2 `run` / `run-task`): take the lock, list the
//! tasks, check the endpoint answers at all, then take each task from file
//! to records: parse, run the loop, write the summary, and move the file to
//! `done/` or `failed/` — or leave it in the inbox to be tried again.
//!
//! A task's file leaves the inbox only after its summary is written, so a
//! kill at any point leaves the task in the inbox (tried again next run)
//! and its records readable.

mod check;
pub mod eval;
pub mod exec;
mod filing;
pub mod folders;
mod ledger;
pub mod lock;
mod prepare;
pub mod prune;
pub mod recurring;
pub mod replay;
pub mod requeue;
mod resume;
pub mod stats;
mod task;

pub use check::{CheckReport, check_inbox};
use filing::*;
use ledger::Ledger;
use task::*;

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::Context;
use futures::StreamExt;
use tokio::time::Instant;
use tracing::Instrument;

use crate::agent::deps::TaskDeps;
use crate::agent::expect::{self, Evidence, Verdict};
use crate::agent::{Outcome, Stats, StopReason, TaskEvent, TaskInput, TaskSpec, run_task};
use crate::config::{Config, EndpointKind};
use crate::display::Progress;
use crate::drain::lock::RunLock;
use crate::inbox::{self, Attempts, InboxEntry, TaskProblem};
use crate::records::{RunRecord, Status, Summary};
use crate::tools::{Tool, ToolName, Toolbox};

/// Options of one `run` / `run-task` invocation.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub dry_run: bool,
    pub concurrency: usize,
    /// `run-task NAME`: only this inbox entry (or, with `recurring`, this
    /// recurring task, now).
    pub only: Option<String>,
    /// `run-task --recurring NAME`.
    pub recurring: bool,
    /// The live lines on a terminal (hidden unless the binary draws them).
    pub progress: Progress,
    /// Told of each task as it ends (`run --json`, `run-task`'s answer).
    pub on_end: Option<OnEnd>,
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

/// How a batch of tasks is handled: by `run`, `eval` and `replay` alike.
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
    /// The date role prompts see (`{{date}}`); a replay keeps the recorded
    /// one; a slot's date wins over both.
    pub today: Option<chrono::NaiveDate>,
    /// The live lines on a terminal: the drain draws them, the loop never sees them.
    pub progress: Progress,
    /// Told of each task filed.
    pub on_end: Option<OnEnd>,
    /// A recurring task's slot: what its body's `{{date}}` and
    /// `{{last_success}}` say, and its summary's `slot` (SPEC §17).
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
    /// A batch that files nothing, writes for real, and records under the
    /// config's logs folder; callers change what differs.
    pub fn new(cfg: &Config, progress: Progress) -> Mode {
        Mode {
            dry_run: false,
            file: false,
            logs: cfg.paths.logs.clone(),
            replay_of: None,
            today: None,
            progress,
            on_end: None,
            slot: None,
        }
    }
}

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
    /// The diagnosis of the setup fault that stopped the run (SPEC §16).
    pub setup_fault: Option<String>,
    /// What the run met besides its tasks that the operator must fix: an
    /// inbox entry that will never run, a state file that cannot be saved.
    /// The run exits 1 for them when nothing worse happened (SPEC §22).
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
        if let Some(fault) = &self.setup_fault {
            text.push_str(&format!(
                "\nsetup fault, the run stopped and nothing was filed for it: {fault}"
            ));
        }
        text
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// Another run holds the lock; `wanted` is the task `run-task` asked
    /// for, which did not run.
    Locked {
        wanted: Option<String>,
    },
    /// The endpoint did not answer before the first task; nothing was touched.
    Unreachable(String),
    Finished(Tally),
}

/// A usage or configuration error found while running (exit 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// `run-task NAME` named no task it can run (exit 2): a typo at a prompt,
/// not a fault of the unattended setup, so the metrics are left alone.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NameError(pub String);

/// How a task run ended, for the tally.
#[derive(Debug)]
pub enum TaskEnd {
    /// The run was stopping before the task began.
    NotStarted,
    /// Summary written, file where it belongs.
    Filed(Box<Summary>),
    /// The task's records or its file could not be written or moved; it is
    /// left where it was and counts as failed in this run. Ends arrive in
    /// the order tasks finish, so each says which task it was.
    Broken { task: String },
}

/// A whole run as it ended: the outcome, or the error that stopped it,
/// and the figures the metrics textfile is made of.
pub struct RunEnd {
    pub result: anyhow::Result<RunOutcome>,
    pub started: chrono::DateTime<chrono::Utc>,
    pub duration: std::time::Duration,
    /// The summaries of the tasks filed in this run.
    pub summaries: Vec<Summary>,
}

/// Runs the inbox (or `opts.only`) as `opts` says.
pub async fn run(cfg: &Config, h: &TaskDeps, opts: &RunOptions) -> RunEnd {
    let (started, t0) = ((h.clock)(), Instant::now());
    let (result, summaries) = match drain_inbox(cfg, h, opts).await {
        Ok((outcome, summaries)) => (Ok(outcome), summaries),
        Err(e) => (Err(e), Vec::new()),
    };
    RunEnd {
        result,
        started,
        duration: t0.elapsed(),
        summaries,
    }
}

/// The run itself: folders, lock, listing, reachability, tasks.
async fn drain_inbox(
    cfg: &Config,
    h: &TaskDeps,
    opts: &RunOptions,
) -> anyhow::Result<(RunOutcome, Vec<Summary>)> {
    crate::drain::folders::prepare(cfg).map_err(UsageError)?;
    let state_dir = cfg.paths.state_dir();
    // A lock that cannot be taken is a fault of the setup (a read-only
    // folder, a link planted at its name): the run stops, naming it.
    let lock = RunLock::try_acquire(&state_dir)
        .map_err(|e| UsageError(format!("[paths] inbox: cannot take the run lock: {e:#}")))?;
    let Some(_lock) = lock else {
        let wanted = opts.only.clone();
        return Ok((RunOutcome::Locked { wanted }, Vec::new()));
    };
    let recurring::ToRun {
        entries,
        due,
        state,
        problems,
    } = recurring::to_run(cfg, h, opts, &state_dir)?;
    let mut ended = if entries.is_empty() && due.is_empty() {
        tracing::info!(inbox = %cfg.paths.inbox.display(), "the inbox is empty and no recurring task is due");
        (RunOutcome::Finished(Tally::default()), Vec::new())
    } else if let Err(why) = h.endpoint.ping().await {
        (RunOutcome::Unreachable(why), Vec::new())
    } else {
        let (mut outcome, mut summaries) = if entries.is_empty() {
            (RunOutcome::Finished(Tally::default()), Vec::new())
        } else {
            drain(cfg, h, opts, entries).await
        };
        if let RunOutcome::Finished(tally) = &mut outcome
            && tally.setup_fault.is_none()
        {
            let settle = !opts.dry_run && !opts.recurring;
            let state = Mutex::new(state);
            let (more, ran) =
                recurring::run_recurring(cfg, h, opts, due, settle.then_some(&state)).await;
            tally.absorb(&more);
            summaries.extend(ran);
        }
        (outcome, summaries)
    };
    if let RunOutcome::Finished(tally) = &mut ended.0 {
        tally.problems.extend(problems);
        if let Some(mcp) = &h.toolbox.mcp {
            tally.problems.extend(mcp.problems());
        }
    }
    if !opts.dry_run {
        retain(cfg, h);
    }
    Ok(ended)
}

/// `[retention]` applied at the end of a run, still under its lock.
fn retain(cfg: &Config, h: &TaskDeps) {
    let pruned = prune::prune(&cfg.paths, &cfg.retention, (h.clock)(), false);
    if !pruned.removed.is_empty() {
        tracing::info!(
            removed = pruned.removed.len(),
            keep_days = cfg.retention.keep_days,
            keep_runs = cfg.retention.keep_runs,
            "retention: old run folders and done/ files removed"
        );
    }
    for why in pruned.failed.iter().chain(&pruned.skipped) {
        tracing::warn!(error = %why, "retention: cannot prune");
    }
}

/// Drops the attempt counts of tasks no longer in the inbox (removed by
/// hand): a file put back under the same name starts afresh, and the state
/// file does not grow with names long gone. Runs under the run lock.
fn forget_absent(state_dir: &Path, entries: &[InboxEntry]) {
    let mut counts = Attempts::load(state_dir);
    if counts.retain(|name| entries.iter().any(|e| e.name == name))
        && let Err(e) = counts.save(state_dir)
    {
        tracing::warn!(error = %e, "cannot save the attempt counts");
    }
}

/// Runs the listed tasks and tallies them.
async fn drain(
    cfg: &Config,
    h: &TaskDeps,
    opts: &RunOptions,
    entries: Vec<InboxEntry>,
) -> (RunOutcome, Vec<Summary>) {
    let mode = Mode {
        dry_run: opts.dry_run,
        file: !opts.dry_run,
        on_end: opts.on_end.clone(),
        ..Mode::new(cfg, opts.progress.clone())
    };
    let ends = run_tasks(cfg, h, entries, &mode, opts.concurrency).await;
    let tally = Tally::of(&ends);
    tracing::info!(
        succeeded = tally.succeeded,
        failed = tally.failed,
        retry_later = tally.retry_later,
        interrupted = tally.interrupted,
        not_started = tally.not_started,
        "run finished"
    );
    (RunOutcome::Finished(tally), filed(ends))
}

/// The summaries of the tasks that were filed.
fn filed(ends: Vec<TaskEnd>) -> Vec<Summary> {
    ends.into_iter()
        .filter_map(|e| match e {
            TaskEnd::Filed(s) => Some(*s),
            _ => None,
        })
        .collect()
}

/// Runs `entries` (up to `concurrency` at once) as `mode` says, each from
/// file to records; the endpoint is not checked first. A real run
/// (`mode.file`) counts their attempts beside the inbox.
pub async fn run_tasks(
    cfg: &Config,
    h: &TaskDeps,
    entries: Vec<InboxEntry>,
    mode: &Mode,
    concurrency: usize,
) -> Vec<TaskEnd> {
    let ledger = if mode.file {
        Ledger::Inbox(Mutex::new(Attempts::load(&cfg.paths.state_dir())))
    } else {
        Ledger::Uncounted
    };
    let drain = Drain {
        cfg,
        h,
        context_tokens: context_window(cfg, h).await,
        ledger,
        mode,
        setup_fault: Mutex::new(None),
    };
    let concurrency = concurrency.max(1);
    tracing::info!(
        tasks = entries.len(),
        concurrency,
        dry_run = mode.dry_run,
        "run started"
    );
    futures::stream::iter(entries)
        .map(|entry| {
            let drain = &drain;
            async move {
                if h.cancel.is_cancelled() {
                    return TaskEnd::NotStarted;
                }
                drain.process_task(&entry).await
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await
}

/// Runs a recurring task for the slot `mode` names; with `settle`, the
/// slot's attempt is counted and settled in that state.
async fn run_slot(
    cfg: &Config,
    h: &TaskDeps,
    entry: InboxEntry,
    mode: &Mode,
    settle: Option<&Mutex<recurring::State>>,
) -> Vec<TaskEnd> {
    let drain = Drain {
        cfg,
        h,
        context_tokens: context_window(cfg, h).await,
        ledger: settle.map_or(Ledger::Uncounted, Ledger::Slot),
        mode,
        setup_fault: Mutex::new(None),
    };
    vec![drain.process_task(&entry).await]
}

/// The context window every task of the run manages, if any.
async fn context_window(cfg: &Config, h: &TaskDeps) -> Option<u32> {
    match cfg.limits.context_tokens {
        0 if cfg.endpoint.kind == EndpointKind::Openai => {
            let n = h.endpoint.discover_context().await;
            match n {
                Some(n) => {
                    tracing::info!(n_ctx = n, "context window read from the server's /props")
                }
                None => tracing::warn!(
                    "context_tokens = 0 and the server's /props gave no n_ctx: the context is not managed"
                ),
            }
            n
        }
        0 => None,
        n => Some(n),
    }
}

impl Tally {
    /// Adds another part of the same run.
    fn absorb(&mut self, other: &Tally) {
        self.succeeded += other.succeeded;
        self.failed += other.failed;
        self.retry_later += other.retry_later;
        self.interrupted += other.interrupted;
        self.not_started += other.not_started;
        if self.setup_fault.is_none() {
            self.setup_fault.clone_from(&other.setup_fault);
        }
        self.problems.extend(other.problems.iter().cloned());
    }

    fn of(ends: &[TaskEnd]) -> Tally {
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

#[cfg(test)]
mod tests;
