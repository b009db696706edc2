//! Draining the inbox (docs/operating.md, "Commands": `run` / `run-task`): a
//! run's steps ([`run::Run`]: take the lock, list the tasks, check the
//! endpoint answers at all, run the inbox, then the recurring slots due),
//! and each task's ([`pipeline::Batch`]: from file to records: parse, run the
//! loop, write the summary, and move the file to `done/` or `failed/` — or
//! leave it in the inbox to be tried again).
//!
//! A task's file leaves the inbox only after its summary is written, so a
//! kill at any point leaves the task in the inbox (tried again next run)
//! and its records readable.
//!
//! Every command that runs tasks asks through one [`BatchOptions`] (how a
//! batch runs and who is told), beside what is its own ([`RunOptions`],
//! `exec`'s, `eval`'s, `replay`'s); each batch is a [`Mode`] resolved from
//! it by the constructor of its kind.
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
mod run;
mod slips;
mod tally;
mod tool_servers;

pub use again::{Again, Back, again, again_in, program};
pub use budget::paused;
pub use check::{CheckReport, check_inbox, check_task};
pub use options::{BatchOptions, EndFn, Mode, OnEnd, OnLocked, RunOptions, Slot};
pub use overview::overview;
pub use tally::Tally;

use tokio::time::Instant;

use budget::spending;
use counting::Counting;
use harness_agent::deps::TaskDeps;
use harness_config::Config;
use harness_inbox::InboxEntry;
use harness_records::Summary;
use harness_state::SpendToday;
use pipeline::Batch;
use run::Run;

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
    pub budget: Option<SpendToday>,
}

/// Runs the inbox (or `opts.only`) as `opts` says: [`run::Run`]'s steps.
pub async fn run(cfg: &Config, deps: &TaskDeps, opts: &RunOptions) -> RunEnd {
    let (started, t0) = ((deps.clock)(), Instant::now());
    let mut run = Run::new(cfg, deps, opts);
    let (result, summaries) = match run.steps().await {
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
        ignored: run.ignored,
        servers_up,
        budget: cfg.budget.any().then(|| deps.budget.spend_today()),
    }
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
/// file to records, in a batch of its own (`exec`, `eval`, `replay`): the
/// endpoint is not checked first, no attempt is counted and the batch's
/// spend is kept in the ledger.
pub async fn run_tasks(
    cfg: &Config,
    deps: &TaskDeps,
    entries: Vec<InboxEntry>,
    mode: &Mode,
    concurrency: usize,
) -> Vec<TaskEnd> {
    let batch = async {
        let batch = Batch::open(cfg, deps, mode, Counting::Uncounted).await;
        batch.all(entries, concurrency).await
    };
    spending(cfg, deps, batch).await
}

#[cfg(test)]
mod tests;
