//! One task from file to records: its attempt counted, its file read and
//! parsed, the loop run (a panic caught), its expectations judged, its
//! summary written, and the file moved where the outcome says — or left in
//! the inbox to be tried again.

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Mutex;

use futures::FutureExt;

use super::ledger::{AttemptCount, Ledger};
use super::prepare::{Noted, Unready, unavailable};
use super::resume::ResumeNote;
use super::*;

/// What every task of one run shares.
pub(super) struct Drain<'a> {
    pub(super) cfg: &'a Config,
    pub(super) h: &'a TaskDeps,
    pub(super) context_tokens: Option<u32>,
    /// Where attempts are counted.
    pub(super) ledger: Ledger<'a>,
    pub(super) mode: &'a Mode,
    /// The first setup fault a task met: the run stops (SPEC §16).
    pub(super) setup_fault: Mutex<Option<String>>,
}

impl Drain<'_> {
    /// One task from file to records, and the file to where it belongs.
    /// Never fails the run: a task whose records or file cannot be written
    /// is logged and counted failed.
    pub(super) async fn process_task(&self, entry: &InboxEntry) -> TaskEnd {
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
        let slot = self.mode.slot.as_ref();
        let (dev, ino) = rec.identity()?;
        let run = inbox::RunRef {
            id: rec.run_id.clone(),
            dev,
            ino,
        };
        let file = inbox::FileRef::of(&entry.path);
        let count = (self.ledger).begin(cfg, slot, (&entry.name, file), run)?;
        let ran = if count.exhausted {
            let error = killed_too_often(rec, h, count.previous, cfg.limits.max_attempts);
            Ran::from(Outcome::failed(StopReason::InternalError, error))
        } else {
            self.run_isolated(entry, rec, &count).await
        };
        let Ran {
            outcome,
            verdicts,
            agent,
            resume,
            servers_down,
        } = ran;
        let outcome = self.stop_on_setup_fault(outcome);
        if let Some(result) = &outcome.result {
            rec.result(result)?;
        }
        if let Some(answer) = &outcome.final_answer
            && let Err(e) = rec.answer(answer)
        {
            // A copy of what summary.json holds: its loss files nothing wrongly.
            tracing::warn!(error = %format!("{e:#}"), "cannot write answer.md");
        }
        let result = outcome.result.clone();
        let (filing, attempt) = self.filing(&outcome, &count);
        let mut summary = self.summarize(entry, rec, outcome, &filing, attempt, (started_at, t0));
        summary.expectations = verdicts;
        summary.agent = agent;
        summary.wall_ms = summary
            .wall_ms
            .saturating_add(u64::try_from(resume.wall_before.as_millis()).unwrap_or(u64::MAX));
        summary.resumed_from = resume.from;
        summary.resumed_turns = resume.turns;
        summary.resume_refused = resume.refused;
        summary.earlier = resume.earlier;
        summary.tool_servers_down = servers_down;
        rec.summary(&summary)?;
        let place = self.move_file(entry, &rec.run_id, &filing)?;
        let slot = self.mode.slot.as_ref();
        (self.ledger).settle(cfg, slot, &entry.name, &count, &summary)?;
        rec.filed(&summary, &place);
        if let Some(on_end) = &self.mode.on_end {
            (on_end.0)(&summary, result.as_ref());
        }
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
    async fn run_isolated(
        &self,
        entry: &InboxEntry,
        rec: &mut RunRecord,
        count: &AttemptCount,
    ) -> Ran {
        let h = self.h;
        let work = async {
            let mut notes = Noted::default();
            let prepared = self
                .prepare_resumed(entry, &rec.run_id, count, &mut notes)
                .await;
            let servers_down = std::mem::take(&mut notes.servers_down);
            for line in notes.lines {
                rec.note((h.clock)(), &line);
            }
            let p = match prepared {
                Ok(prepared) => prepared,
                Err(Unready::Invalid(problem)) => {
                    return Ran::from(invalid(rec, h, &entry.path, &problem));
                }
                Err(Unready::Unavailable(why)) => return Ran::from(unavailable(rec, h, why)),
                Err(Unready::Interrupted) => {
                    let why = "stopped by a signal while its MCP servers started";
                    return Ran::from(Outcome::failed(StopReason::Interrupted, why.into()));
                }
            };
            rec.task_file(&p.file.text);
            let mut spec = p.spec;
            self.start_record(rec, &spec, &p.note, p.found.as_ref());
            if p.found.is_some() {
                spec.max_wall = super::resume::wall_left(spec.max_wall, p.note.wall_before);
            }
            let resumed = p.found.map(|f| f.into_deps(h));
            let deps = resumed.as_ref().map_or(h, |(d, _)| d);
            let live = self.mode.progress.task(&entry.name);
            let mut evidence = Evidence::default();
            let mut replayed = super::resume::Replayed::default();
            let mut sink = |event: &TaskEvent<'_>| {
                rec.record((h.clock)(), event);
                live.on(event);
                evidence.on(event);
                replayed.on(event);
            };
            let outcome = run_task(deps, &spec, &mut sink).await;
            let outcome = self.unless_server_died(&spec, outcome).await;
            self.log_tool_servers(rec, &spec);
            let mut resume = p.note;
            resume.earlier = replayed.earlier(resume.wall_before);
            if let Some((_, recording)) = &resumed {
                resume.turns = super::resume::answered_turns(recording);
            }
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
                resume,
                servers_down,
            }
        };
        match AssertUnwindSafe(work).catch_unwind().await {
            Ok(done) => done,
            Err(panic) => {
                let error = rec.internal_error((h.clock)(), &panic_message(panic.as_ref()));
                tracing::error!(error = %error, "internal error; the other tasks go on");
                Ran::from(Outcome::failed(StopReason::InternalError, error))
            }
        }
    }

    /// Where the task goes, and its attempt number.
    fn filing(&self, outcome: &Outcome, count: &AttemptCount) -> (Filing, u32) {
        let max = self.cfg.limits.max_attempts;
        let attempt = count.number();
        let counted_slot = match self.ledger {
            Ledger::Slot(_) => self.mode.slot.as_ref(),
            _ => None,
        };
        let mut filing = file_outcome(
            outcome.stop,
            outcome.retryable,
            attempt,
            max,
            self.mode.file || counted_slot.is_some(),
        );
        if let Some(slot) = counted_slot {
            slot_filing(&mut filing, slot, attempt, max);
        }
        (filing, attempt)
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
            recurring: self.mode.slot.is_some(),
            slot: self.mode.slot.as_ref().map(|s| s.at.to_rfc3339()),
            last_success: self.mode.slot.as_ref().and_then(|s| s.last_success),
            resumed_from: None,
            resumed_turns: 0,
            resume_refused: None,
            tool_servers_down: Vec::new(),
            earlier: crate::records::Earlier::default(),
        }
    }
}

/// What running a task gave, for its summary.
pub(super) struct Ran {
    pub(super) outcome: Outcome,
    pub(super) verdicts: Option<Vec<Verdict>>,
    /// The profile it ran as.
    pub(super) agent: Option<String>,
    /// What it went on from (SPEC §18).
    pub(super) resume: ResumeNote,
    /// The MCP servers it was not offered because they were down.
    pub(super) servers_down: Vec<String>,
}

impl From<Outcome> for Ran {
    fn from(outcome: Outcome) -> Ran {
        Ran {
            outcome,
            verdicts: None,
            agent: None,
            resume: ResumeNote::default(),
            servers_down: Vec::new(),
        }
    }
}

/// A final answer that misses an expectation is not a success.
pub(super) fn expectations_met(mut outcome: Outcome, verdicts: &[Verdict]) -> Outcome {
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
pub(super) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Why a task the process died on in every allowed attempt is given up.
pub(super) fn killed_too_often(
    rec: &mut RunRecord,
    h: &TaskDeps,
    starts: u32,
    max_attempts: u32,
) -> String {
    let error = rec.killed_too_often((h.clock)(), starts, max_attempts);
    tracing::error!(error = %error, "task given up");
    error
}

pub(super) fn invalid(
    rec: &mut RunRecord,
    h: &TaskDeps,
    path: &Path,
    problem: &TaskProblem,
) -> Outcome {
    let error = rec.invalid_task((h.clock)(), path, problem);
    tracing::warn!(error = %error, "invalid task");
    Outcome::failed(StopReason::InvalidTask, error)
}
