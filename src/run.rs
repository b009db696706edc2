//! Draining the inbox (SPEC §2 `run` / `run-task`): take the lock, list the
//! tasks, check the endpoint answers at all, then take each task from file
//! to records: parse, run the loop, write the summary, and move the file to
//! `done/` or `failed/` — or leave it in the inbox to be tried again.
//!
//! A task's file leaves the inbox only after its summary is written, so a
//! kill at any point leaves the task in the inbox (tried again next run)
//! and its records readable.

use std::path::Path;
use std::sync::Mutex;

use anyhow::Context;
use futures::StreamExt;
use tokio::time::Instant;
use tracing::Instrument;

use crate::Harness;
use crate::agent::{Outcome, Stats, TaskSpec, run_task};
use crate::config::{Config, EndpointKind};
use crate::inbox::{self, Attempts, InboxEntry, TaskProblem};
use crate::lock::RunLock;
use crate::records::{RunRecord, Status, StopReason, Summary};

/// Options of one `run` / `run-task` invocation.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub dry_run: bool,
    pub concurrency: usize,
    /// `run-task NAME`: only this inbox entry.
    pub only: Option<String>,
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
        format!("{} in {:.1}s", parts.join(", "), elapsed.as_secs_f64())
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// Another run holds the lock.
    Locked,
    /// The endpoint did not answer before the first task; nothing was touched.
    Unreachable(String),
    Finished(Tally),
}

impl RunOutcome {
    /// The process exit code (SPEC §2).
    pub fn exit_code(&self) -> u8 {
        match self {
            RunOutcome::Locked => 0,
            RunOutcome::Unreachable(_) => 75,
            RunOutcome::Finished(t) if t.failed > 0 => 1,
            RunOutcome::Finished(t) if t.retry_later + t.interrupted + t.not_started > 0 => 75,
            RunOutcome::Finished(_) => 0,
        }
    }
}

/// A usage error found while running (exit 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Where a finished task's file goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Disposition {
    Done,
    Failed,
    /// Stays in the inbox (retryable, interrupted, or a dry run).
    Keep,
}

pub async fn run(cfg: &Config, h: &Harness, opts: &RunOptions) -> anyhow::Result<RunOutcome> {
    let state_dir = cfg.paths.state_dir();
    let Some(_lock) = RunLock::try_acquire(&state_dir)? else {
        return Ok(RunOutcome::Locked);
    };
    let mut entries = inbox::list(&cfg.paths.inbox)?;
    if let Some(name) = &opts.only {
        inbox::check_task_name(name).map_err(UsageError)?;
        entries.retain(|e| &e.name == name);
        if entries.is_empty() {
            return Err(UsageError(format!(
                "no task {name:?} in the inbox {}",
                cfg.paths.inbox.display()
            ))
            .into());
        }
    }
    if entries.is_empty() {
        tracing::info!(inbox = %cfg.paths.inbox.display(), "the inbox is empty");
        return Ok(RunOutcome::Finished(Tally::default()));
    }
    if let Err(why) = h.endpoint.ping().await {
        return Ok(RunOutcome::Unreachable(why));
    }
    let context_tokens = match cfg.limits.context_tokens {
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
    };

    let drain = Drain {
        cfg,
        h,
        context_tokens,
        attempts: Mutex::new(Attempts::load(&state_dir)),
        dry_run: opts.dry_run,
    };
    let concurrency = opts.concurrency.max(1);
    tracing::info!(
        tasks = entries.len(),
        concurrency,
        dry_run = opts.dry_run,
        "run started"
    );
    let ends: Vec<anyhow::Result<Option<Summary>>> = futures::stream::iter(entries)
        .map(|entry| {
            let drain = &drain;
            async move {
                if h.cancel.is_cancelled() {
                    return Ok(None);
                }
                drain.process_task(&entry).await.map(Some)
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;

    let mut tally = Tally::default();
    for end in ends {
        match end? {
            None => tally.not_started += 1,
            Some(s) => match (s.status, s.retryable) {
                (Status::Succeeded, _) => tally.succeeded += 1,
                (Status::Interrupted, _) => tally.interrupted += 1,
                (Status::Failed, true) => tally.retry_later += 1,
                (Status::Failed, false) => tally.failed += 1,
            },
        }
    }
    tracing::info!(
        succeeded = tally.succeeded,
        failed = tally.failed,
        retry_later = tally.retry_later,
        interrupted = tally.interrupted,
        not_started = tally.not_started,
        "run finished"
    );
    Ok(RunOutcome::Finished(tally))
}

/// What every task of one run shares.
struct Drain<'a> {
    cfg: &'a Config,
    h: &'a Harness,
    context_tokens: Option<u32>,
    attempts: Mutex<Attempts>,
    dry_run: bool,
}

impl Drain<'_> {
    /// One task from file to records, and the file to where it belongs.
    async fn process_task(&self, entry: &InboxEntry) -> anyhow::Result<Summary> {
        let (cfg, h) = (self.cfg, self.h);
        let started_at = (h.clock)();
        let t0 = Instant::now();
        let mut rec = RunRecord::create(&cfg.paths.logs, &entry.name, started_at, cfg.secrets())?;
        let span = tracing::info_span!("task", name = %entry.name, run_id = %rec.run_id);
        self.run_and_file(entry, &mut rec, (started_at, t0))
            .instrument(span)
            .await
    }

    /// Runs a task whose record exists, writes its summary and files the task.
    async fn run_and_file(
        &self,
        entry: &InboxEntry,
        rec: &mut RunRecord,
        (started_at, t0): (chrono::DateTime<chrono::Utc>, Instant),
    ) -> anyhow::Result<Summary> {
        let (cfg, h, dry_run, attempts) = (self.cfg, self.h, self.dry_run, &self.attempts);
        let prepared = inbox::read_task(&entry.path).and_then(|file| {
            TaskSpec::resolve(
                cfg,
                &entry.name,
                &file.frontmatter,
                &file.body,
                &h.toolbox.offered(),
                self.context_tokens,
                dry_run,
            )
        });
        let outcome = match prepared {
            Ok(spec) => run_task(h, &spec, rec, &h.progress.task(&entry.name)).await,
            Err(problem) => invalid(rec, h, &entry.path, &problem),
        };

        let previous = lock_attempts(attempts).get(&entry.name);
        let attempt = previous + 1;
        let (disposition, retryable) = if dry_run {
            (Disposition::Keep, outcome.retryable)
        } else {
            match outcome.stop {
                StopReason::FinalAnswer => (Disposition::Done, false),
                StopReason::Interrupted => (Disposition::Keep, true),
                _ if outcome.retryable && attempt < cfg.limits.max_attempts => {
                    (Disposition::Keep, true)
                }
                _ => (Disposition::Failed, false),
            }
        };
        let status = match outcome.stop {
            StopReason::FinalAnswer => Status::Succeeded,
            StopReason::Interrupted => Status::Interrupted,
            _ => Status::Failed,
        };
        let finished_at = (h.clock)();
        let Stats {
            turns,
            tool_calls,
            tool_errors,
            usage,
            runpod_exec_ms,
            runpod_delay_ms,
        } = outcome.stats;
        let kept_error = match (disposition, outcome.retryable, dry_run) {
            (Disposition::Keep, true, false) if status == Status::Failed => Some(format!(
                "left in the inbox to be tried again (attempt {attempt} of {})",
                cfg.limits.max_attempts
            )),
            (Disposition::Failed, true, _) => {
                Some(format!("gave up after {attempt} attempts (max_attempts)"))
            }
            _ => None,
        };
        let error = match (outcome.error, kept_error) {
            (Some(e), Some(k)) => Some(format!("{e}; {k}")),
            (e, k) => e.or(k),
        };
        let summary = Summary {
            task: entry.name.clone(),
            run_id: rec.run_id.clone(),
            status,
            stop_reason: outcome.stop,
            retryable,
            attempt,
            turns,
            tool_calls,
            tool_errors,
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            total_tokens: usage.total_tokens,
            runpod_exec_ms: runpod_exec_ms
                .or((cfg.endpoint.kind == EndpointKind::Runpod).then_some(0)),
            runpod_delay_ms: runpod_delay_ms
                .or((cfg.endpoint.kind == EndpointKind::Runpod).then_some(0)),
            wall_ms: u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX),
            started_at,
            finished_at,
            final_answer: outcome.final_answer,
            error,
            dry_run,
        };
        rec.summary(&summary)?;

        let moved = match disposition {
            Disposition::Done => Some(inbox::move_task(
                &entry.path,
                &cfg.paths.done,
                &rec.run_id,
                &entry.name,
            )?),
            Disposition::Failed => Some(inbox::move_task(
                &entry.path,
                &cfg.paths.failed,
                &rec.run_id,
                &entry.name,
            )?),
            Disposition::Keep => None,
        };
        if !dry_run {
            let mut counts = lock_attempts(attempts);
            match disposition {
                Disposition::Keep if summary.status == Status::Failed => {
                    counts.set(&entry.name, attempt)
                }
                Disposition::Keep => {}
                Disposition::Done | Disposition::Failed => counts.clear(&entry.name),
            }
            counts.save(&cfg.paths.state_dir())?;
        }
        let place = moved
            .as_deref()
            .map(|p: &Path| p.display().to_string())
            .unwrap_or_else(|| "left in the inbox".into());
        rec.log(
            finished_at,
            &format!(
                "{}: {} → {place}",
                status_word(summary.status),
                summary.stop_reason.as_str()
            ),
        );
        tracing::info!(
            status = status_word(summary.status),
            stop_reason = summary.stop_reason.as_str(),
            turns,
            tokens = summary.total_tokens,
            wall_ms = summary.wall_ms,
            file = %place,
            "task finished"
        );
        Ok(summary)
    }
}

fn lock_attempts(m: &Mutex<Attempts>) -> std::sync::MutexGuard<'_, Attempts> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn status_word(s: Status) -> &'static str {
    match s {
        Status::Succeeded => "succeeded",
        Status::Failed => "failed",
        Status::Interrupted => "interrupted",
    }
}

fn invalid(rec: &mut RunRecord, h: &Harness, path: &Path, problem: &TaskProblem) -> Outcome {
    let error = format!("invalid task {}: {problem}", path.display());
    rec.log((h.clock)(), &error);
    tracing::warn!(error = %error, "invalid task");
    Outcome {
        stop: StopReason::InvalidTask,
        final_answer: None,
        error: Some(error),
        retryable: false,
        stats: Stats::default(),
    }
}

/// `check`: validates every inbox task against the config without calling
/// anything. Returns one line per problem, `file:line: message`.
pub fn check_inbox(
    cfg: &Config,
    offered: &[crate::tools::ToolName],
) -> anyhow::Result<(usize, Vec<String>)> {
    let entries = inbox::list(&cfg.paths.inbox)
        .with_context(|| format!("listing {}", cfg.paths.inbox.display()))?;
    let context_tokens = (cfg.limits.context_tokens > 0).then_some(cfg.limits.context_tokens);
    let mut problems = Vec::new();
    for e in &entries {
        let result = inbox::read_task(&e.path).and_then(|f| {
            TaskSpec::resolve(
                cfg,
                &e.name,
                &f.frontmatter,
                &f.body,
                offered,
                context_tokens,
                false,
            )
            .map(|_| ())
        });
        if let Err(p) = result {
            let at = p
                .line
                .map(|l| format!("{}:{l}", e.path.display()))
                .unwrap_or_else(|| e.path.display().to_string());
            problems.push(format!("{at}: {}", p.message));
        }
    }
    Ok((entries.len(), problems))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
        };
        assert_eq!(
            t.describe(Duration::from_secs(2)),
            "1 succeeded, 2 failed, 3 left in the inbox for a later run in 2.0s"
        );
    }
}
