//! Draining the inbox (SPEC §2 `run` / `run-task`): take the lock, list the
//! tasks, check the endpoint answers at all, then take each task from file
//! to records: parse, run the loop, write the summary, and move the file to
//! `done/` or `failed/` — or leave it in the inbox to be tried again.
//!
//! A task's file leaves the inbox only after its summary is written, so a
//! kill at any point leaves the task in the inbox (tried again next run)
//! and its records readable.

pub mod eval;
pub mod folders;
pub mod lock;
pub mod replay;

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::Context;
use futures::{FutureExt, StreamExt};
use tokio::time::Instant;
use tracing::Instrument;

use crate::agent::deps::Harness;
use crate::agent::expect::{self, Evidence, Verdict};
use crate::agent::{Outcome, Stats, StopReason, TaskEvent, TaskInput, TaskSpec, run_task};
use crate::config::{Config, EndpointKind};
use crate::display::Progress;
use crate::drain::lock::RunLock;
use crate::inbox::{self, Attempts, InboxEntry, TaskProblem};
use crate::records::{RunRecord, Status, Summary};
use crate::tools::{ToolName, Toolbox};

/// Options of one `run` / `run-task` invocation.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub dry_run: bool,
    pub concurrency: usize,
    /// `run-task NAME`: only this inbox entry.
    pub only: Option<String>,
    /// The live lines on a terminal (hidden unless the binary draws them).
    pub progress: Progress,
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
    /// The date role prompts see (`{{date}}`); a replay keeps the recorded one.
    pub today: Option<chrono::NaiveDate>,
    /// The live lines on a terminal: the drain draws them, the loop never sees them.
    pub progress: Progress,
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

/// Where a finished task's file goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Disposition {
    Done,
    Failed,
    /// Stays in the inbox (retryable, interrupted, or a dry run).
    Keep,
}

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
pub async fn run(cfg: &Config, h: &Harness, opts: &RunOptions) -> RunEnd {
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
    h: &Harness,
    opts: &RunOptions,
) -> anyhow::Result<(RunOutcome, Vec<Summary>)> {
    crate::drain::folders::prepare(cfg).map_err(UsageError)?;
    let state_dir = cfg.paths.state_dir();
    let Some(_lock) = RunLock::try_acquire(&state_dir)? else {
        let wanted = opts.only.clone();
        return Ok((RunOutcome::Locked { wanted }, Vec::new()));
    };
    let mut entries = inbox::list(&cfg.paths.inbox)?;
    if !opts.dry_run {
        forget_absent(&state_dir, &entries);
    }
    if let Some(name) = &opts.only {
        inbox::check_task_name(name).map_err(NameError)?;
        entries.retain(|e| &e.name == name);
        if entries.is_empty() {
            return Err(NameError(format!(
                "no task {name:?} in the inbox {}",
                cfg.paths.inbox.display()
            ))
            .into());
        }
    }
    Ok(if entries.is_empty() {
        tracing::info!(inbox = %cfg.paths.inbox.display(), "the inbox is empty");
        (RunOutcome::Finished(Tally::default()), Vec::new())
    } else if let Err(why) = h.endpoint.ping().await {
        (RunOutcome::Unreachable(why), Vec::new())
    } else {
        drain(cfg, h, opts, entries).await
    })
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
    h: &Harness,
    opts: &RunOptions,
    entries: Vec<InboxEntry>,
) -> (RunOutcome, Vec<Summary>) {
    let mode = Mode {
        dry_run: opts.dry_run,
        file: !opts.dry_run,
        logs: cfg.paths.logs.clone(),
        replay_of: None,
        today: None,
        progress: opts.progress.clone(),
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
    let summaries = ends
        .into_iter()
        .filter_map(|e| match e {
            TaskEnd::Filed(s) => Some(*s),
            _ => None,
        })
        .collect();
    (RunOutcome::Finished(tally), summaries)
}

/// Runs `entries` (up to `concurrency` at once) as `mode` says, each from
/// file to records; the endpoint is not checked first.
pub async fn run_tasks(
    cfg: &Config,
    h: &Harness,
    entries: Vec<InboxEntry>,
    mode: &Mode,
    concurrency: usize,
) -> Vec<TaskEnd> {
    let drain = Drain {
        cfg,
        h,
        context_tokens: context_window(cfg, h).await,
        attempts: Mutex::new(Attempts::load(&cfg.paths.state_dir())),
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

/// The context window every task of the run manages, if any.
async fn context_window(cfg: &Config, h: &Harness) -> Option<u32> {
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

/// What every task of one run shares.
struct Drain<'a> {
    cfg: &'a Config,
    h: &'a Harness,
    context_tokens: Option<u32>,
    attempts: Mutex<Attempts>,
    mode: &'a Mode,
    /// The first setup fault a task met: the run stops (SPEC §16).
    setup_fault: Mutex<Option<String>>,
}

/// A task's attempt count: counted before it starts (SPEC §12.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct AttemptCount {
    /// Attempts counted in earlier runs.
    previous: u32,
    /// The process died on this task in every allowed attempt: not run again.
    exhausted: bool,
}

impl AttemptCount {
    /// This run's attempt number, as the summary says it.
    fn number(self) -> u32 {
        if self.exhausted {
            self.previous
        } else {
            self.previous.saturating_add(1)
        }
    }
}

/// Where a finished task goes and what its summary says about it: a pure
/// decision over the outcome and the attempt count.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Filing {
    disposition: Disposition,
    status: Status,
    retryable: bool,
    /// Added to the summary's error.
    note: Option<String>,
}

fn file_outcome(
    stop: StopReason,
    retryable: bool,
    attempt: u32,
    max_attempts: u32,
    file: bool,
) -> Filing {
    let status = match stop {
        StopReason::FinalAnswer => Status::Succeeded,
        StopReason::Interrupted | StopReason::SetupFault => Status::Interrupted,
        _ => Status::Failed,
    };
    let filing = |disposition, retryable, note| Filing {
        disposition,
        status,
        retryable,
        note,
    };
    match stop {
        _ if !file => filing(Disposition::Keep, retryable, None),
        StopReason::FinalAnswer => filing(Disposition::Done, false, None),
        StopReason::Interrupted | StopReason::SetupFault => filing(Disposition::Keep, true, None),
        _ if retryable && attempt < max_attempts => filing(
            Disposition::Keep,
            true,
            Some(format!(
                "left in the inbox to be tried again (attempt {attempt} of {max_attempts})"
            )),
        ),
        _ if retryable => filing(
            Disposition::Failed,
            false,
            Some(format!("gave up after {attempt} attempts (max_attempts)")),
        ),
        _ => filing(Disposition::Failed, false, None),
    }
}

impl Drain<'_> {
    /// One task from file to records, and the file to where it belongs.
    /// Never fails the run: a task whose records or file cannot be written
    /// is logged and counted failed.
    async fn process_task(&self, entry: &InboxEntry) -> TaskEnd {
        let (cfg, h) = (self.cfg, self.h);
        let started_at = (h.clock)();
        let t0 = Instant::now();
        let mut rec = match RunRecord::create(
            &self.mode.logs,
            &entry.name,
            started_at,
            cfg.secrets(),
        ) {
            Ok(rec) => rec,
            Err(e) => {
                tracing::error!(task = %entry.name, error = %format!("{e:#}"), "cannot create the task's records; it stays in the inbox");
                return TaskEnd::Broken {
                    task: entry.name.clone(),
                };
            }
        };
        let span = tracing::info_span!("task", name = %entry.name, run_id = %rec.run_id);
        let filed = self
            .run_and_file(entry, &mut rec, (started_at, t0))
            .instrument(span.clone())
            .await;
        match filed {
            Ok(summary) => TaskEnd::Filed(Box::new(summary)),
            Err(e) => {
                span.in_scope(|| {
                    tracing::error!(error = %format!("{e:#}"), "the task could not be filed; it stays in the inbox")
                });
                TaskEnd::Broken {
                    task: entry.name.clone(),
                }
            }
        }
    }

    /// Counts the attempt, runs the task (isolated), writes its summary and files it.
    async fn run_and_file(
        &self,
        entry: &InboxEntry,
        rec: &mut RunRecord,
        (started_at, t0): (chrono::DateTime<chrono::Utc>, Instant),
    ) -> anyhow::Result<Summary> {
        let (cfg, h) = (self.cfg, self.h);
        let count = self.begin_attempt(&entry.name)?;
        let ran = if count.exhausted {
            let error = killed_too_often(rec, h, count.previous, cfg.limits.max_attempts);
            Ran::from(Outcome::failed(StopReason::InternalError, error))
        } else {
            self.run_isolated(entry, rec).await
        };
        let Ran {
            outcome,
            verdicts,
            agent,
        } = ran;
        let outcome = self.stop_on_setup_fault(outcome);
        if let Some(result) = &outcome.result {
            rec.result(result)?;
        }
        let attempt = count.number();
        let filing = file_outcome(
            outcome.stop,
            outcome.retryable,
            attempt,
            cfg.limits.max_attempts,
            self.mode.file,
        );
        let mut summary = self.summarize(entry, rec, outcome, &filing, attempt, (started_at, t0));
        summary.expectations = verdicts;
        summary.agent = agent;
        rec.summary(&summary)?;
        let moved = match filing.disposition {
            Disposition::Done => Some(&cfg.paths.done),
            Disposition::Failed => Some(&cfg.paths.failed),
            Disposition::Keep => None,
        }
        .map(|dir| inbox::move_task(&entry.path, dir, &rec.run_id, &entry.name))
        .transpose()?;
        self.settle_attempt(&entry.name, count, &filing)?;
        let place = moved
            .as_deref()
            .map(|p: &Path| p.display().to_string())
            .unwrap_or_else(|| {
                if self.mode.file {
                    "left in the inbox".into()
                } else {
                    "not moved".into()
                }
            });
        rec.log(
            summary.finished_at,
            &format!(
                "{}: {} → {place}",
                summary.status.as_str(),
                summary.stop_reason.as_str()
            ),
        );
        tracing::info!(
            status = summary.status.as_str(),
            stop_reason = summary.stop_reason.as_str(),
            turns = summary.turns,
            tool_errors = summary.tool_errors,
            tokens = summary.total_tokens,
            wall_ms = summary.wall_ms,
            file = %place,
            error = summary.error.as_deref().unwrap_or("-"),
            "task finished"
        );
        Ok(summary)
    }

    /// A setup fault stops the run: no further task starts, and the tasks
    /// in flight (interrupted by it) end as setup faults too.
    fn stop_on_setup_fault(&self, mut outcome: Outcome) -> Outcome {
        let mut fault = self
            .setup_fault
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match (outcome.stop, fault.as_ref()) {
            (StopReason::SetupFault, None) => {
                let diagnosis = outcome.error.clone().unwrap_or_default();
                tracing::error!(error = %diagnosis, "setup fault: the run stops and every task stays in the inbox");
                *fault = Some(diagnosis);
                self.h.cancel.cancel();
            }
            (StopReason::Interrupted, Some(first)) => {
                outcome.stop = StopReason::SetupFault;
                outcome.error = Some(format!("stopped by another task's setup fault: {first}"));
            }
            _ => {}
        }
        outcome
    }

    /// Reads, resolves and runs the task, and judges its expectations. A
    /// panic anywhere inside ends this task as `internal_error`; the run
    /// goes on.
    async fn run_isolated(&self, entry: &InboxEntry, rec: &mut RunRecord) -> Ran {
        let h = self.h;
        let work = async {
            let (file, spec) = match self.prepare(entry) {
                Ok(prepared) => prepared,
                Err(problem) => return Ran::from(invalid(rec, h, &entry.path, &problem)),
            };
            rec.task_file(&file.text);
            let spec = spec.for_run(&rec.run_id);
            let live = self.mode.progress.task(&entry.name);
            let mut evidence = Evidence::default();
            let mut sink = |event: &TaskEvent<'_>| {
                rec.record((h.clock)(), event);
                live.on(event);
                evidence.on(event);
            };
            let outcome = run_task(h, &spec, &mut sink).await;
            let (outcome, verdicts) = match &spec.expect {
                Some(expect) => {
                    let verdicts = expect::verdicts(expect, &evidence, &outcome);
                    (expectations_met(outcome, &verdicts), Some(verdicts))
                }
                None => (outcome, None),
            };
            Ran {
                outcome,
                verdicts,
                agent: spec.agent,
            }
        };
        match AssertUnwindSafe(work).catch_unwind().await {
            Ok(done) => done,
            Err(panic) => {
                let error = format!(
                    "the harness failed inside this task (a bug; please report it): {}",
                    panic_message(panic.as_ref())
                );
                rec.log((h.clock)(), &error);
                tracing::error!(error = %error, "internal error; the other tasks go on");
                Ran::from(Outcome::failed(StopReason::InternalError, error))
            }
        }
    }

    /// The task file read and resolved against the config.
    fn prepare(&self, entry: &InboxEntry) -> Result<(inbox::TaskFile, TaskSpec), TaskProblem> {
        let file = inbox::read_task(&entry.path)?;
        let today = self
            .mode
            .today
            .unwrap_or_else(|| (self.h.clock)().date_naive());
        let spec = TaskSpec::resolve(
            self.cfg,
            &TaskInput {
                name: &entry.name,
                frontmatter: &file.frontmatter,
                body: &file.body,
                offered: &self.h.toolbox.offered(),
                context_tokens: self.context_tokens,
                dry_run: self.mode.dry_run,
                today,
            },
        )?;
        Ok((file, spec))
    }

    /// Counts an attempt before the task starts and saves it, so a task that
    /// kills the process still reaches `max_attempts`. A dry run counts nothing.
    fn begin_attempt(&self, name: &str) -> anyhow::Result<AttemptCount> {
        if !self.mode.file {
            return Ok(AttemptCount {
                previous: 0,
                exhausted: false,
            });
        }
        let mut counts = lock_attempts(&self.attempts);
        let previous = counts.get(name);
        let exhausted = previous >= self.cfg.limits.max_attempts;
        if !exhausted {
            counts.set(name, previous.saturating_add(1));
            counts.save(&self.cfg.paths.state_dir())?;
        }
        Ok(AttemptCount {
            previous,
            exhausted,
        })
    }

    /// After the task: a filed task's count goes; an interrupted one gets
    /// its attempt back; a retryable one keeps it.
    fn settle_attempt(
        &self,
        name: &str,
        count: AttemptCount,
        filing: &Filing,
    ) -> anyhow::Result<()> {
        if !self.mode.file {
            return Ok(());
        }
        let mut counts = lock_attempts(&self.attempts);
        match (filing.disposition, filing.status) {
            (Disposition::Keep, Status::Interrupted) if count.previous == 0 => counts.clear(name),
            (Disposition::Keep, Status::Interrupted) => counts.set(name, count.previous),
            (Disposition::Keep, _) => {}
            (Disposition::Done | Disposition::Failed, _) => counts.clear(name),
        }
        counts.save(&self.cfg.paths.state_dir())
    }

    fn summarize(
        &self,
        entry: &InboxEntry,
        rec: &RunRecord,
        outcome: Outcome,
        filing: &Filing,
        attempt: u32,
        (started_at, t0): (chrono::DateTime<chrono::Utc>, Instant),
    ) -> Summary {
        let runpod = self.cfg.endpoint.kind == EndpointKind::Runpod;
        let Stats {
            turns,
            tool_calls,
            tool_errors,
            usage,
            runpod_exec_ms,
            runpod_delay_ms,
            calls_over_budget,
        } = outcome.stats;
        let error = match (outcome.error, filing.note.clone()) {
            (Some(e), Some(k)) => Some(format!("{e}; {k}")),
            (e, k) => e.or(k),
        };
        Summary {
            task: entry.name.clone(),
            run_id: rec.run_id.clone(),
            status: filing.status,
            stop_reason: outcome.stop,
            retryable: filing.retryable,
            attempt,
            turns,
            tool_calls,
            tool_errors,
            calls_over_budget,
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            total_tokens: usage.total_tokens,
            runpod_exec_ms: runpod_exec_ms.or(runpod.then_some(0)),
            runpod_delay_ms: runpod_delay_ms.or(runpod.then_some(0)),
            wall_ms: u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX),
            started_at,
            finished_at: (self.h.clock)(),
            final_answer: outcome.final_answer,
            error,
            dry_run: self.mode.dry_run,
            expectations: None,
            replay_of: self.mode.replay_of.clone(),
            schema_checked: outcome.result.is_some(),
            agent: None,
        }
    }
}

/// What running a task gave, for its summary.
struct Ran {
    outcome: Outcome,
    verdicts: Option<Vec<Verdict>>,
    /// The profile it ran as.
    agent: Option<String>,
}

impl From<Outcome> for Ran {
    fn from(outcome: Outcome) -> Ran {
        Ran {
            outcome,
            verdicts: None,
            agent: None,
        }
    }
}

/// A final answer that misses an expectation is not a success.
fn expectations_met(mut outcome: Outcome, verdicts: &[Verdict]) -> Outcome {
    let missed: Vec<String> = verdicts
        .iter()
        .filter(|v| !v.ok)
        .map(|v| format!("{} ({})", v.check, v.detail))
        .collect();
    if outcome.stop == StopReason::FinalAnswer && !missed.is_empty() {
        outcome.stop = StopReason::ExpectationFailed;
        outcome.error = Some(format!("missed expectations: {}", missed.join("; ")));
    }
    outcome
}

/// The text of a panic's payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Why a task the process died on in every allowed attempt is given up.
fn killed_too_often(rec: &mut RunRecord, h: &Harness, starts: u32, max_attempts: u32) -> String {
    let error = format!(
        "the harness started this task {starts} times and never finished it: the process was killed each time \
         (out of memory, a crash, or SIGKILL); max_attempts = {max_attempts}, so it was not run again"
    );
    rec.log((h.clock)(), &error);
    tracing::error!(error = %error, "task given up");
    error
}

fn lock_attempts(m: &Mutex<Attempts>) -> std::sync::MutexGuard<'_, Attempts> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn invalid(rec: &mut RunRecord, h: &Harness, path: &Path, problem: &TaskProblem) -> Outcome {
    let error = format!("invalid task {}: {problem}", path.display());
    rec.log((h.clock)(), &error);
    tracing::warn!(error = %error, "invalid task");
    Outcome::failed(StopReason::InvalidTask, error)
}

/// What `check` found in the inbox.
#[derive(Debug, Default)]
pub struct CheckReport {
    pub tasks: usize,
    /// `file: message`: problems of the configuration itself (a `run`
    /// refuses to start with them).
    pub config_problems: Vec<String>,
    /// `file: message`: what in the configuration makes some tasks invalid.
    pub config_warnings: Vec<String>,
    /// `file:line: message`: each makes the task invalid.
    pub problems: Vec<String>,
    /// `file: message`: risks the operator should decide on; not errors.
    pub warnings: Vec<String>,
}

/// `check`: validates every inbox task against the config without calling
/// anything, and warns about tasks that could leak notes.
pub fn check_inbox(
    cfg: &Config,
    offered: &[crate::tools::ToolName],
    today: chrono::NaiveDate,
) -> anyhow::Result<CheckReport> {
    let in_config = |p: String| format!("{}: {p}", cfg.path.display());
    let mut report = CheckReport {
        config_problems: Toolbox::unknown_profile_tools(cfg)
            .into_iter()
            .chain(crate::drain::folders::check_inbox(&cfg.paths.inbox).err())
            .chain(crate::drain::folders::unwritable(cfg, true))
            .map(in_config)
            .collect(),
        config_warnings: Toolbox::unoffered_profile_tools(cfg)
            .into_iter()
            .map(in_config)
            .collect(),
        ..CheckReport::default()
    };
    if crate::drain::folders::check_inbox(&cfg.paths.inbox).is_ok()
        && let Err(e) = check_tasks(cfg, offered, today, &mut report)
    {
        report
            .config_problems
            .push(format!("{}: [paths] inbox: {e:#}", cfg.path.display()));
    }
    Ok(report)
}

/// `check` for each inbox entry: its problems, its risks, and entries that
/// will never run.
fn check_tasks(
    cfg: &Config,
    offered: &[crate::tools::ToolName],
    today: chrono::NaiveDate,
    report: &mut CheckReport,
) -> anyhow::Result<()> {
    let entries = inbox::list(&cfg.paths.inbox)
        .with_context(|| format!("listing {}", cfg.paths.inbox.display()))?;
    report.tasks = entries.len();
    report.warnings.extend(inbox::strays(&cfg.paths.inbox)?.into_iter().map(|p| {
        format!(
            "{}: warning: it will never run (only NAME.md files run: lower-case .md, not hidden, not a folder)",
            crate::base::text::printable(&p.display().to_string())
        )
    }));
    let context_tokens = (cfg.limits.context_tokens > 0).then_some(cfg.limits.context_tokens);
    for e in &entries {
        let result = inbox::read_task(&e.path).and_then(|f| {
            TaskSpec::resolve(
                cfg,
                &TaskInput {
                    name: &e.name,
                    frontmatter: &f.frontmatter,
                    body: &f.body,
                    offered,
                    context_tokens,
                    dry_run: false,
                    today,
                },
            )
        });
        match result {
            Ok(spec) => {
                if let Some(w) = exfiltration_risk(cfg, &spec.tools) {
                    report.warnings.push(format!("{}: {w}", e.path.display()));
                }
            }
            Err(p) => {
                let at = p
                    .line
                    .map(|l| format!("{}:{l}", e.path.display()))
                    .unwrap_or_else(|| e.path.display().to_string());
                report.problems.push(format!("{at}: {}", p.message));
            }
        }
    }
    Ok(())
}

/// A task that can read notes and fetch any URL could be talked (by a note
/// or a page) into fetching a URL that carries note text out.
fn exfiltration_risk(cfg: &Config, tools: &[ToolName]) -> Option<String> {
    let reads_notes = tools.iter().any(|t| t.is_noteworx() && !t.is_write());
    let fetches_anywhere = tools.contains(&ToolName::Webfetch)
        && cfg
            .webfetch
            .as_ref()
            .is_some_and(|w| w.allow_hosts.is_empty());
    (reads_notes && fetches_anywhere).then(|| {
        "warning: this task may read notes and fetch any URL ([tools.webfetch] allow_hosts is empty), \
         so a fetched page or a note could lead the model to put note text in a URL it fetches; \
         narrow its tools or set allow_hosts"
            .to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn filing_sends_each_outcome_where_it_belongs() {
        use Disposition::*;
        let f = |stop, retryable, attempt, dry: bool| {
            let f = file_outcome(stop, retryable, attempt, 3, !dry);
            (f.disposition, f.status, f.retryable, f.note)
        };
        assert_eq!(
            f(StopReason::FinalAnswer, false, 1, false),
            (Done, Status::Succeeded, false, None)
        );
        assert_eq!(
            f(StopReason::Interrupted, true, 2, false),
            (Keep, Status::Interrupted, true, None)
        );
        assert_eq!(
            f(StopReason::EndpointError, true, 2, false),
            (
                Keep,
                Status::Failed,
                true,
                Some("left in the inbox to be tried again (attempt 2 of 3)".into())
            )
        );
        assert_eq!(
            f(StopReason::EndpointError, true, 3, false),
            (
                Failed,
                Status::Failed,
                false,
                Some("gave up after 3 attempts (max_attempts)".into())
            )
        );
        for stop in [
            StopReason::EndpointError,
            StopReason::MaxTurns,
            StopReason::InvalidTask,
            StopReason::InternalError,
            StopReason::LoopDetected,
        ] {
            assert_eq!(
                f(stop, false, 1, false),
                (Failed, Status::Failed, false, None),
                "{stop:?}"
            );
        }
        // A dry run files nothing and says whether a real run would retry.
        assert_eq!(
            f(StopReason::FinalAnswer, false, 1, true),
            (Keep, Status::Succeeded, false, None)
        );
        assert_eq!(
            f(StopReason::EndpointError, true, 9, true),
            (Keep, Status::Failed, true, None)
        );
        assert_eq!(
            f(StopReason::MaxTurns, false, 1, true),
            (Keep, Status::Failed, false, None)
        );
    }

    #[test]
    fn the_tally_names_only_what_happened() {
        let t = Tally {
            succeeded: 3,
            ..Tally::default()
        };
        assert_eq!(
            t.describe(Duration::from_millis(41_230)),
            "3 succeeded in 41.2s"
        );
        let t = Tally {
            succeeded: 1,
            failed: 2,
            retry_later: 1,
            interrupted: 1,
            not_started: 1,
            setup_fault: None,
        };
        assert_eq!(
            t.describe(Duration::from_secs(2)),
            "1 succeeded, 2 failed, 3 left in the inbox for a later run in 2.0s"
        );
    }
}
