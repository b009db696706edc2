//! One task from file to records, as one list of named steps (see
//! [`Batch::process_task`]): count the attempt → prepare → find the resume
//! point → write `start.json` → run the loop → judge → summarise → file →
//! settle. A panic anywhere between preparing and judging ends that task
//! as `internal_error`; the run goes on. The file leaves the inbox only
//! after its summary is written.

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Mutex;

use futures::FutureExt;
use tokio::time::Instant;
use tracing::Instrument;

use super::counting::Counting;
use super::filing::{self, Disposition, Filing, TaskResult, Timing};
use super::prepare::{PrepLog, Preparer, StartFailure};
use super::resume::{self, Replayed, ResumePoint, Resumption};
use super::tool_servers;
use super::{Mode, TaskEnd};
use crate::agent::deps::TaskDeps;
use crate::agent::expect::{self, Evidence};
use crate::agent::{Outcome, StopReason, TaskEvent, TaskSpec, run_task};
use crate::config::{Config, EndpointKind};
use crate::inbox::{self, InboxEntry, TaskFile, TaskProblem};
use crate::records::{RunRecord, StartLine, Status, Summary};
use crate::state::{AttemptCount, FileRef, RunRef};
use crate::traces::{Ending, TaskTrace};

/// What every task of one batch shares.
pub(super) struct Batch<'a> {
    pub(super) cfg: &'a Config,
    pub(super) deps: &'a TaskDeps,
    /// The context window every task manages, if any.
    pub(super) context_tokens: Option<u32>,
    /// Where attempts are counted.
    pub(super) counting: Counting<'a>,
    pub(super) mode: &'a Mode,
    /// The first setup fault a task met: the run stops (SPEC §16).
    pub(super) setup_fault: Mutex<Option<String>>,
}

/// A task prepared and placed: its file, its spec, and where it goes on from.
struct Placed {
    file: TaskFile,
    spec: TaskSpec,
    point: Option<ResumePoint>,
    resumption: Resumption,
}

impl Batch<'_> {
    /// One task from file to records, and the file to where it belongs.
    /// Never fails the run: a task whose records or file cannot be written
    /// is logged, left where it was and counted failed.
    pub(super) async fn process_task(&self, entry: &InboxEntry) -> TaskEnd {
        let started_at = (self.deps.clock)();
        let t0 = Instant::now();
        let broken = || TaskEnd::Broken {
            task: entry.name.clone(),
        };
        let secrets = self.cfg.secrets();
        let mut rec = match RunRecord::create(&self.mode.logs, &entry.name, started_at, secrets) {
            Ok(rec) => rec,
            Err(e) => {
                tracing::error!(task = %entry.name, error = %format!("{e:#}"), "cannot create the task's records; it stays in the inbox");
                return broken();
            }
        };
        let span = tracing::info_span!("task", name = %entry.name, run_id = %rec.run_id);
        let trace =
            (self.mode.traces.as_ref()).map(|t| t.task(&entry.name, &rec.run_id, started_at));
        let steps = self.steps(entry, &mut rec, trace, (started_at, t0));
        match steps.instrument(span.clone()).await {
            Ok(summary) => TaskEnd::Filed(Box::new(summary)),
            Err(e) => {
                span.in_scope(|| {
                    tracing::error!(error = %format!("{e:#}"), "the task could not be filed; it stays in the inbox");
                });
                broken()
            }
        }
    }

    /// The steps, in order; `Err` when the records or the file could not
    /// be written (the task stays in the inbox).
    async fn steps(
        &self,
        entry: &InboxEntry,
        rec: &mut RunRecord,
        mut trace: Option<TaskTrace>,
        (started_at, t0): (chrono::DateTime<chrono::Utc>, Instant),
    ) -> anyhow::Result<Summary> {
        let count = self.count_attempt(entry, rec)?;
        let result = if count.exhausted {
            let error = rec.killed_too_often((self.deps.clock)(), count.previous, self.max());
            tracing::error!(error = %error, "task given up");
            TaskResult::from(Outcome::failed(StopReason::InternalError, error))
        } else {
            self.run_isolated(entry, rec, &count, &mut trace).await
        };
        let result = TaskResult {
            outcome: self.stop_on_setup_fault(result.outcome),
            ..result
        };
        let schema_result = result.outcome.result.clone();
        self.write_answer(rec, &result.outcome)?;
        let filing = self.filing(&result.outcome, &count);
        let timing = Timing {
            started_at,
            finished_at: (self.deps.clock)(),
            wall: t0.elapsed(),
        };
        let runpod = self.cfg.endpoint.kind == EndpointKind::Runpod;
        let task = (entry.name.as_str(), rec.run_id.as_str());
        let summary = filing::summarize(task, result, &filing, timing, (self.mode, runpod));
        self.send_trace(rec, trace, &summary);
        rec.summary(&summary)?;
        let place = self.move_file(entry, &rec.run_id, &filing)?;
        let slot = self.mode.slot.as_ref();
        (self.counting).settle(self.cfg, slot, &entry.name, &count, &summary)?;
        rec.filed(&summary, &place);
        if let Some(on_end) = &self.mode.on_end {
            (on_end.0)(&summary, schema_result.as_ref());
        }
        log_end(&summary, &place);
        Ok(summary)
    }

    /// Step 1: the attempt counted and saved with this run's folder and
    /// the task file's identity, before anything else happens.
    fn count_attempt(&self, entry: &InboxEntry, rec: &RunRecord) -> anyhow::Result<AttemptCount> {
        let (dev, ino) = rec.identity()?;
        let run = RunRef {
            id: rec.run_id.clone(),
            dev,
            ino,
        };
        let file = FileRef::of(&entry.path);
        let slot = self.mode.slot.as_ref();
        (self.counting).begin(self.cfg, slot, (&entry.name, file), run)
    }

    /// Steps 2 to 6, isolated: a panic ends this task as `internal_error`.
    async fn run_isolated(
        &self,
        entry: &InboxEntry,
        rec: &mut RunRecord,
        count: &AttemptCount,
        trace: &mut Option<TaskTrace>,
    ) -> TaskResult {
        match AssertUnwindSafe(self.run(entry, rec, count, trace))
            .catch_unwind()
            .await
        {
            Ok(result) => result,
            Err(panic) => {
                let error = rec.internal_error((self.deps.clock)(), &panic_message(panic.as_ref()));
                tracing::error!(error = %error, "internal error; the other tasks go on");
                TaskResult::from(Outcome::failed(StopReason::InternalError, error))
            }
        }
    }

    /// Prepare, find the resume point, write `start.json`, run, judge.
    async fn run(
        &self,
        entry: &InboxEntry,
        rec: &mut RunRecord,
        count: &AttemptCount,
        trace: &mut Option<TaskTrace>,
    ) -> TaskResult {
        let deps = self.deps;
        let mut log = PrepLog::default();
        let placed = self.place(entry, &rec.run_id, count, &mut log).await;
        let servers_down = std::mem::take(&mut log.servers_down);
        for line in log.lines {
            rec.log_line((deps.clock)(), &line);
        }
        let placed = match placed {
            Ok(placed) => placed,
            Err(failure) => return TaskResult::from(self.cannot_start(rec, &entry.path, failure)),
        };
        rec.task_file(&placed.file.text);
        if let Some(trace) = trace.as_mut() {
            trace.task_text(&placed.file.text);
        }
        let Placed {
            mut spec,
            point,
            mut resumption,
            ..
        } = placed;
        self.write_start(rec, &spec, &resumption, point.as_ref());
        if point.is_some() {
            spec.max_wall = resume::wall_left(spec.max_wall, resumption.wall_before);
        }
        let resumed = point.map(|p| p.into_deps(deps));
        let task_deps = resumed.as_ref().map_or(deps, |(d, _)| d);
        let live = self.mode.progress.task(&entry.name);
        let mut evidence = Evidence::default();
        let mut replayed = Replayed::default();
        let mut sink = |event: &TaskEvent<'_>| {
            rec.record((deps.clock)(), event);
            live.on(event);
            evidence.on(event);
            replayed.on(event);
            if let Some(trace) = trace.as_mut() {
                trace.on((deps.clock)(), event);
            }
        };
        let outcome = run_task(task_deps, &spec, &mut sink).await;
        let outcome = tool_servers::unless_one_died(deps, &spec, outcome).await;
        tool_servers::log_stderr(deps, rec, &spec);
        resumption.earlier = replayed.earlier(resumption.wall_before);
        if let Some((_, recording)) = &resumed {
            resumption.turns = resume::answered_turns(recording);
        }
        let (outcome, verdicts) = match &spec.expect {
            Some(expectations) => {
                let verdicts = expect::verdicts(expectations, &evidence, &outcome);
                (expect::judged(outcome, &verdicts), Some(verdicts))
            }
            None => (outcome, None),
        };
        TaskResult {
            outcome,
            verdicts,
            agent: spec.agent,
            resumption,
            servers_down,
        }
    }

    /// Steps 2 and 3: the task read and resolved, the records it may go
    /// on from found and checked against the spec; refused records leave
    /// a fresh task and the reason.
    async fn place(
        &self,
        entry: &InboxEntry,
        run_id: &str,
        count: &AttemptCount,
        log: &mut PrepLog,
    ) -> Result<Placed, StartFailure> {
        let preparer = self.preparer();
        let now = (self.deps.clock)();
        let unsettled = count.previous > 0;
        let point = (self.cfg.limits.resume && self.may_resume())
            .then(|| resume::find(self.mode, &entry.name, &count.runs, run_id, unsettled, now))
            .flatten();
        let (file, spec) = preparer
            .prepare(entry, point.as_ref().map(|p| p.today), log)
            .await?;
        let spec = spec.for_run(run_id);
        let Some(point) = point else {
            return Ok(Placed {
                file,
                spec,
                point: None,
                resumption: Resumption::default(),
            });
        };
        match point.check(self.deps, &spec).await {
            Ok(turns) => Ok(Placed {
                file,
                spec,
                resumption: Resumption {
                    from: Some(point.run_id.clone()),
                    turns,
                    wall_before: point.wall_before,
                    ..Resumption::default()
                },
                point: Some(point),
            }),
            Err(why) => {
                log.servers_down.clear();
                let (file, spec) = preparer.prepare(entry, None, log).await?;
                Ok(Placed {
                    file,
                    spec: spec.for_run(run_id),
                    point: None,
                    resumption: Resumption {
                        refused: Some(format!("run {}: {why}", point.run_id)),
                        ..Resumption::default()
                    },
                })
            }
        }
    }

    /// Step 4: `start.json`, and what the run goes on from (SPEC §18).
    fn write_start(
        &self,
        rec: &mut RunRecord,
        spec: &TaskSpec,
        resumption: &Resumption,
        point: Option<&ResumePoint>,
    ) {
        let now = (self.deps.clock)();
        let start = StartLine {
            task: spec.name.clone(),
            run_id: rec.run_id.clone(),
            started_at: now,
            dry_run: self.mode.dry_run,
            replay_of: self.mode.replay_of.clone(),
            resumable: self.may_resume(),
            today: self.preparer().today(point.map(|p| p.today)),
            slot: self.mode.slot.as_ref().map(|s| s.at.to_rfc3339()),
            resumed_from: resumption.from.clone(),
            wall_ms_before: crate::base::time::millis(resumption.wall_before),
        };
        rec.start(now, &start, resumption.turns);
        if let Some(why) = &resumption.refused {
            let line = format!("not resumed from {why}; the task starts fresh");
            rec.log_line(now, &line);
            tracing::warn!(reason = %why, "not resumed; the task starts fresh");
        }
        for call in point.map(|p| p.resent.as_slice()).unwrap_or_default() {
            rec.log_line(
                now,
                &format!(
                    "write call {call} was recorded as about to be sent, but not its result: it runs again with the recorded arguments (an attachment with the same name and text is found, not created twice)"
                ),
            );
        }
    }

    /// Why a task could not start, recorded, as its outcome.
    fn cannot_start(&self, rec: &mut RunRecord, path: &Path, failure: StartFailure) -> Outcome {
        let now = (self.deps.clock)();
        match failure {
            StartFailure::Invalid(problem) => invalid(rec, now, path, &problem),
            StartFailure::Unavailable(why) => {
                rec.log_line(now, &format!("{why}; the task stays in the inbox"));
                tracing::warn!(error = %why, "a tool server is unavailable; the task is tried again later");
                let mut outcome = Outcome::failed(StopReason::ToolServerUnavailable, why);
                outcome.retryable = true;
                outcome
            }
            StartFailure::Interrupted => {
                let why = "stopped by a signal while its MCP servers started";
                Outcome::failed(StopReason::Interrupted, why.into())
            }
        }
    }

    /// A setup fault stops the run: no further task starts, and the tasks
    /// in flight (interrupted by it) end as setup faults too.
    fn stop_on_setup_fault(&self, mut outcome: Outcome) -> Outcome {
        let mut fault = crate::base::sync::lock(&self.setup_fault);
        match (outcome.stop, fault.as_ref()) {
            (StopReason::SetupFault, None) => {
                let diagnosis = outcome.error.clone().unwrap_or_default();
                tracing::error!(error = %diagnosis, "setup fault: the run stops and every task stays in the inbox");
                *fault = Some(diagnosis);
                self.deps.cancel.cancel();
            }
            (StopReason::Interrupted, Some(first)) => {
                outcome.stop = StopReason::SetupFault;
                outcome.error = Some(format!("stopped by another task's setup fault: {first}"));
            }
            _ => {}
        }
        outcome
    }

    /// `result.json` and `answer.md`, before the summary that names them.
    fn write_answer(&self, rec: &RunRecord, outcome: &Outcome) -> anyhow::Result<()> {
        if let Some(result) = &outcome.result {
            rec.result(result)?;
        }
        if let Some(answer) = &outcome.final_answer
            && let Err(e) = rec.answer(answer)
        {
            // A copy of what summary.json holds: its loss files nothing wrongly.
            tracing::warn!(error = %format!("{e:#}"), "cannot write answer.md");
        }
        Ok(())
    }

    /// Where the task goes, and its attempt number.
    fn filing(&self, outcome: &Outcome, count: &AttemptCount) -> Filing {
        let counted_slot = match self.counting {
            Counting::Slot(_) => self.mode.slot.as_ref(),
            _ => None,
        };
        let attempts = (count.number(), self.max());
        filing::file_outcome(outcome, attempts, self.mode.file, counted_slot)
    }

    /// Moves the task file where its filing says; where it went, in words.
    fn move_file(
        &self,
        entry: &InboxEntry,
        run_id: &str,
        filing: &Filing,
    ) -> anyhow::Result<String> {
        let paths = &self.cfg.paths;
        let dir = match filing.disposition {
            Disposition::Done => &paths.done,
            Disposition::Failed => &paths.failed,
            Disposition::Keep if self.mode.file => return Ok("left in the inbox".into()),
            Disposition::Keep => return Ok("not moved".into()),
        };
        let moved = inbox::move_task(paths, &entry.path, dir, run_id, &entry.name)?;
        Ok(moved.display().to_string())
    }

    /// The task's trace, its root span closed as the summary says, queued
    /// for the collector.
    fn send_trace(&self, rec: &mut RunRecord, trace: Option<TaskTrace>, summary: &Summary) {
        let (Some(traces), Some(trace)) = (&self.mode.traces, trace) else {
            return;
        };
        let ending = Ending {
            succeeded: summary.status == Status::Succeeded,
            status: summary.status.as_str(),
            stop_reason: summary.stop_reason.as_str(),
            error: summary.error.as_deref(),
            attempt: summary.attempt,
            turns: summary.turns,
            input_tokens: summary.prompt_tokens,
            output_tokens: summary.completion_tokens,
            final_answer: summary.final_answer.as_deref(),
            dry_run: summary.dry_run,
            replay_of: summary.replay_of.as_deref(),
        };
        let id = trace.trace_id();
        let line = match traces.send(&trace.end(summary.finished_at, &ending)) {
            true => format!("trace {id} queued for [traces] endpoint"),
            false => {
                format!("trace {id} dropped: the queue for [traces] endpoint is full or closed")
            }
        };
        rec.log_line(summary.finished_at, &line);
    }

    /// Whether a task of this batch may go on from earlier records: a real
    /// run whose attempts are counted beside the inbox (an inbox task or a
    /// recurring task's slot) — never a dry run, a replay, an eval or `exec`.
    fn may_resume(&self) -> bool {
        !self.mode.dry_run
            && self.mode.replay_of.is_none()
            && !matches!(self.counting, Counting::Uncounted)
    }

    fn preparer(&self) -> Preparer<'_> {
        Preparer {
            cfg: self.cfg,
            deps: self.deps,
            mode: self.mode,
            context_tokens: self.context_tokens,
        }
    }

    fn max(&self) -> u32 {
        self.cfg.limits.max_attempts
    }
}

/// The task's end, in the service log.
fn log_end(summary: &Summary, place: &str) {
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
}

/// An invalid task, recorded, as its outcome.
fn invalid(
    rec: &mut RunRecord,
    now: chrono::DateTime<chrono::Utc>,
    path: &Path,
    problem: &TaskProblem,
) -> Outcome {
    let error = rec.invalid_task(now, path, problem);
    tracing::warn!(error = %error, "invalid task");
    Outcome::failed(StopReason::InvalidTask, error)
}

/// The text of a panic's payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}
