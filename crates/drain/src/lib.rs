//! Draining the inbox (docs/operating.md, "Commands": `run` / `run-task`): take
//! the lock, list the tasks, check the endpoint answers at all, then take each
//! task from file to records: parse, run the loop, write the summary, and move
//! the file to `done/` or `failed/` — or leave it in the inbox to be tried
//! again.
//!
//! A task's file leaves the inbox only after its summary is written, so a
//! kill at any point leaves the task in the inbox (tried again next run)
//! and its records readable.
//!
//! Every command that runs tasks asks through one [`BatchOptions`] (how a
//! batch runs and who is told), beside what is its own ([`RunOptions`],
//! `exec`'s, `eval`'s, `replay`'s); each batch is a [`Mode`] made from it.
//!
//! Beside the run, what reads or tidies the same folders: `check`,
//! `requeue` (and `rerun`), [`again`] (where a run's task is and which
//! command runs it again) and [`overview`] (`status`).

mod again;
mod budget;
mod check;
mod choose;
mod counting;
pub mod exec;
mod filing;
pub mod folders;
mod observers;
mod options;
mod overview;
mod pipeline;
mod prepare;
pub mod recurring;
pub mod requeue;
mod resume;
mod slips;
mod tally;
mod tool_servers;

pub use again::{Again, Back, Look, again};
pub use check::{CheckReport, check_inbox, check_task};
pub use options::{BatchOptions, EndFn, Mode, OnEnd, OnLocked, RunOptions, Slot};
pub use overview::{
    DaySpent, FailedTasks, NextRun, OldestTask, Overview, Running, RunningTask, Sending, Waiting,
    overview,
};
pub use tally::Tally;

use std::sync::Mutex;

use futures::StreamExt;
use tokio::time::Instant;

use budget::{may_start, spending};
use counting::Counting;
use harness_agent::deps::TaskDeps;
use harness_config::{Config, EndpointKind};
use harness_endpoint::Reach;
use harness_inbox::InboxEntry;
use harness_outputs::retention;
use harness_records::Summary;
use harness_state::{Attempts, Holder, RunLock, Slots, Standing};
use pipeline::Batch;

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// Another run holds the lock; `wanted` is the task `run-task` asked
    /// for, which did not run.
    Locked {
        wanted: Option<String>,
    },
    /// The endpoint did not answer before the first task; nothing was
    /// touched, and the `left` tasks that would have run (inbox tasks and
    /// recurring slots due) wait for the next run.
    Unreachable {
        why: String,
        left: usize,
    },
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
    /// Inbox entries that will never run, when the inbox was listed.
    pub ignored: Option<usize>,
    /// Each MCP server this run tried to start, and whether it is up.
    pub servers_up: Vec<(String, bool)>,
    /// The day's spend against the `[budget]` limits, when one is set.
    pub budget: Option<Standing>,
}

/// Runs the inbox (or `opts.only`) as `opts` says.
pub async fn run(cfg: &Config, deps: &TaskDeps, opts: &RunOptions) -> RunEnd {
    let (started, t0) = ((deps.clock)(), Instant::now());
    let mut ignored = None;
    let (result, summaries) = match drain_inbox(cfg, deps, opts, &mut ignored).await {
        Ok((outcome, summaries)) => (Ok(outcome), summaries),
        Err(e) => (Err(e), Vec::new()),
    };
    let servers_up = match &deps.toolbox.mcp {
        Some(mcp) => mcp.up().await,
        None => Vec::new(),
    };
    RunEnd {
        result,
        started,
        duration: t0.elapsed(),
        summaries,
        ignored,
        servers_up,
        budget: cfg.budget.any().then(|| deps.budget.standing()),
    }
}

/// The run itself: folders, lock, listing, reachability, tasks.
async fn drain_inbox(
    cfg: &Config,
    deps: &TaskDeps,
    opts: &RunOptions,
    ignored: &mut Option<usize>,
) -> anyhow::Result<(RunOutcome, Vec<Summary>)> {
    folders::prepare(cfg).map_err(UsageError)?;
    // Requests would go to an endpoint or notes that are not the operator's.
    let placeholders = slips::placeholders(cfg);
    if !placeholders.is_empty() {
        return Err(UsageError(placeholders.join("; ")).into());
    }
    // What `check` warns of, said in the run's log too (nothing stops).
    for slip in slips::recurring_near_misses(cfg)
        .into_iter()
        .chain(slips::unused_mail(cfg))
        .chain(slips::extra_keys(cfg).1)
    {
        tracing::warn!("{}", slip.trim_start_matches("warning: "));
    }
    let state_dir = cfg.paths.state_dir();
    // A lock that cannot be taken is a fault of the setup (a read-only
    // folder, a link planted at its name): the run stops, naming it.
    let lock = RunLock::try_acquire(&state_dir)
        .map_err(|e| UsageError(format!("[paths] inbox: cannot take the run lock: {e:#}")))?;
    let Some(lock) = lock else {
        let wanted = opts.only.clone();
        return Ok((RunOutcome::Locked { wanted }, Vec::new()));
    };
    // Who holds it, for `status` (docs/operating.md, "The morning after").
    lock.note(&Holder {
        pid: std::process::id(),
        command: if opts.only.is_some() {
            "run-task"
        } else {
            "run"
        }
        .into(),
        since: (deps.clock)(),
    });
    if let Some(on_locked) = &opts.batch.on_locked {
        (on_locked.0)();
    }
    let ended = spending(cfg, deps, drain_locked(cfg, deps, opts, ignored))
        .await
        .map(|ended| wound_up(cfg, deps, opts, ended));
    // The run's work is done and the lock still held: what must not race
    // another run (the digest's mark) is taken now.
    if let Some(before_unlock) = &opts.batch.before_unlock {
        (before_unlock.0)();
    }
    ended
}

/// A run's tasks done, still under the lock: the problems met besides
/// them said (the run exits 1 for them), then retention.
fn wound_up(
    cfg: &Config,
    deps: &TaskDeps,
    opts: &RunOptions,
    mut ended: (RunOutcome, Vec<Summary>),
) -> (RunOutcome, Vec<Summary>) {
    if let RunOutcome::Finished(tally) = &mut ended.0 {
        tally.paused_by(&deps.budget);
        tally.problems.extend(deps.budget.problems());
        if let Some(mcp) = &deps.toolbox.mcp {
            tally.problems.extend(mcp.problems());
        }
        for problem in &tally.problems {
            tracing::warn!("{problem}; the run exits 1 for it");
        }
    }
    if !opts.batch.dry_run {
        retain(cfg, deps);
    }
    ended
}

/// Under the lock: what the run has to do, and doing it — unless the
/// budget leaves the queue paused, or the endpoint does not answer.
async fn drain_locked(
    cfg: &Config,
    deps: &TaskDeps,
    opts: &RunOptions,
    ignored: &mut Option<usize>,
) -> anyhow::Result<(RunOutcome, Vec<Summary>)> {
    let choose::ToRun {
        entries,
        due,
        state,
        problems,
        strays,
    } = choose::to_run(cfg, deps, opts, &cfg.paths.state_dir())?;
    *ignored = Some(strays);
    let mut ended = if entries.is_empty() && due.is_empty() {
        match strays {
            0 => {
                tracing::info!(inbox = %cfg.paths.inbox.display(), "the inbox is empty and no recurring task is due")
            }
            n => {
                tracing::warn!(inbox = %cfg.paths.inbox.display(), ignored = n, "the inbox holds no task to run, only entries that never run; no recurring task is due")
            }
        }
        (RunOutcome::Finished(Tally::default()), Vec::new())
    } else if let Err(why) = deps.budget.check() {
        // May this batch start? Not at a limit: nothing starts, and no
        // request goes out (the endpoint is not even asked); the queue waits.
        tracing::warn!(reason = %why, "budget reached: no task starts");
        let tally = Tally {
            not_started: entries.len() + due.len(),
            budget_exhausted: Some(why),
            ..Tally::default()
        };
        (RunOutcome::Finished(tally), Vec::new())
    } else {
        match deps.endpoint.reach().await {
            Reach::Answers => drain_then_recur(cfg, deps, opts, entries, due, state).await,
            Reach::Unreachable(why) => {
                let left = entries.len() + due.len();
                (RunOutcome::Unreachable { why, left }, Vec::new())
            }
            // Another service on the endpoint's port, or its certificate
            // refused: every task stays.
            Reach::NotTheServer(why) | Reach::Untrusted(why) => {
                tracing::error!(error = %why, "setup fault: the run stops and every task stays in the inbox");
                let tally = Tally {
                    not_started: entries.len() + due.len(),
                    setup_fault: Some(why),
                    ..Tally::default()
                };
                (RunOutcome::Finished(tally), Vec::new())
            }
        }
    };
    if let RunOutcome::Finished(tally) = &mut ended.0 {
        tally.problems.extend(problems);
    }
    Ok(ended)
}

/// The inbox's tasks, then (unless a setup fault stopped the run) the
/// recurring slots due; a slot the budget leaves unstarted stays due.
async fn drain_then_recur(
    cfg: &Config,
    deps: &TaskDeps,
    opts: &RunOptions,
    entries: Vec<InboxEntry>,
    due: Vec<recurring::Due>,
    state: Slots,
) -> (RunOutcome, Vec<Summary>) {
    let (mut outcome, mut summaries) = if entries.is_empty() {
        (RunOutcome::Finished(Tally::default()), Vec::new())
    } else {
        drain(cfg, deps, &opts.batch, entries).await
    };
    if let RunOutcome::Finished(tally) = &mut outcome
        && tally.setup_fault.is_none()
    {
        let settle = !opts.batch.dry_run && !opts.recurring;
        let state = Mutex::new(state);
        let (more, ran) =
            recurring::run_recurring(cfg, deps, &opts.batch, due, settle.then_some(&state)).await;
        tally.absorb(&more);
        summaries.extend(ran);
    }
    (outcome, summaries)
}

/// `[retention]` applied at the end of a run, still under its lock.
fn retain(cfg: &Config, deps: &TaskDeps) {
    let pruned = retention::prune(&cfg.paths, &cfg.retention, (deps.clock)(), false);
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

/// Runs the listed tasks and tallies them; unless it is a dry run, each
/// is filed.
async fn drain(
    cfg: &Config,
    deps: &TaskDeps,
    opts: &BatchOptions,
    entries: Vec<InboxEntry>,
) -> (RunOutcome, Vec<Summary>) {
    let mode = Mode {
        file: !opts.dry_run,
        ..Mode::new(cfg, opts)
    };
    let ends = run_batch(cfg, deps, entries, &mode, opts.concurrency).await;
    // What the inbox spent reaches the ledger before the recurring tasks
    // start, waiting for its lock if another process holds it.
    deps.budget.flush();
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
/// (`mode.file`) counts their attempts beside the inbox. A batch of its
/// own (`exec`, `eval`, `replay`): its spend is kept in the ledger.
pub async fn run_tasks(
    cfg: &Config,
    deps: &TaskDeps,
    entries: Vec<InboxEntry>,
    mode: &Mode,
    concurrency: usize,
) -> Vec<TaskEnd> {
    spending(cfg, deps, run_batch(cfg, deps, entries, mode, concurrency)).await
}

/// [`run_tasks`] within a run that keeps the ledger already.
async fn run_batch(
    cfg: &Config,
    deps: &TaskDeps,
    entries: Vec<InboxEntry>,
    mode: &Mode,
    concurrency: usize,
) -> Vec<TaskEnd> {
    let counting = if mode.file {
        Counting::Inbox(Mutex::new(Attempts::load(&cfg.paths.state_dir())))
    } else {
        Counting::Uncounted
    };
    let batch = Batch {
        cfg,
        deps,
        context_tokens: context_window(cfg, deps).await,
        counting,
        mode,
        setup_fault: Mutex::new(None),
    };
    let concurrency = concurrency.max(1);
    // Which file, as `check` says it: absolute, so the journal names it
    // whatever the unit's working folder.
    let config = std::path::absolute(&cfg.path).unwrap_or_else(|_| cfg.path.clone());
    tracing::info!(
        tasks = entries.len(),
        concurrency,
        dry_run = mode.dry_run,
        config = %config.display(),
        "run started"
    );
    futures::stream::iter(entries)
        .map(|entry| {
            let batch = &batch;
            async move {
                if !may_start(deps, mode) {
                    return TaskEnd::NotStarted;
                }
                batch.process_task(&entry).await
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
    deps: &TaskDeps,
    entry: InboxEntry,
    mode: &Mode,
    settle: Option<&Mutex<Slots>>,
) -> Vec<TaskEnd> {
    let batch = Batch {
        cfg,
        deps,
        context_tokens: context_window(cfg, deps).await,
        counting: settle.map_or(Counting::Uncounted, Counting::Slot),
        mode,
        setup_fault: Mutex::new(None),
    };
    vec![batch.process_task(&entry).await]
}

/// The context window every task of the run manages, if any.
async fn context_window(cfg: &Config, deps: &TaskDeps) -> Option<u32> {
    match cfg.limits.context_tokens {
        0 if cfg.endpoint.kind == EndpointKind::Openai => {
            let n = deps.endpoint.discover_context().await;
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

#[cfg(test)]
mod tests;
