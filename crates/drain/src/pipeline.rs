//! One task from file to records, as one list of named steps
//! ([`Batch::steps`]), each handing the next a value of its own: count the
//! attempt (an `AttemptCount`) → prepare (`Prepared`: the file read, the
//! MCP servers it may use started) → place ([`Placed`]: the resume point
//! found and checked, the spec of this run resolved with the date it
//! needs) → start (`start.json`) → run ([`Ran`], the events watched by
//! [`Observers`]) → judge (`Judged`: the `[expect]` verdicts; a setup fault
//! stops the run) → summarise (`Summarised`) → file (`summary.json`, the
//! file moved: where it went) → settle (the attempt count, the last
//! `run.log` line, whoever asked told: the `Summary`). A panic anywhere
//! from preparing to judging ends that task as `internal_error`; the run
//! goes on. The file leaves the inbox only after its summary is written.

use std::panic::AssertUnwindSafe;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::{FutureExt, StreamExt};
use tokio::time::Instant;
use tracing::Instrument;

use super::budget::may_start;
use super::counting::Counting;
use super::filing::{self, Disposition, Judged, Stamp, Summarised};
use super::observers::Observers;
use super::prepare::{Prepared, Preparer, StartFailure};
use super::resume::{self, Replayed, Resumption, Start};
use super::tool_servers;
use super::{Mode, TaskEnd};
use harness_agent::deps::TaskDeps;
use harness_agent::expect::{self, Evidence};
use harness_agent::{Outcome, StopReason, TaskEvent, TaskSpec, run_task};
use harness_base::text::printable;
use harness_config::{Config, EndpointKind};
use harness_inbox::{self as inbox, InboxEntry, TaskFile};
use harness_records::{RunRecord, StartLine, Summary};
use harness_state::{AttemptCount, FileRef, RunRef};
use harness_traces::TaskTrace;

/// What every task of one batch shares.
pub(super) struct Batch<'a> {
    pub(super) cfg: &'a Config,
    pub(super) deps: &'a TaskDeps,
    /// The context window every task manages, if any.
    pub(super) context_tokens: Option<u32>,
    /// Where attempts are counted.
    pub(super) counting: Counting<'a>,
    pub(super) mode: &'a Mode,
    /// The first setup fault a task met: the run stops (docs/operating.md,
    /// "Setup faults").
    pub(super) setup_fault: Mutex<Option<String>>,
}

/// When a task began: on the run's clock, and on the monotonic one.
struct Began {
    at: DateTime<Utc>,
    instant: Instant,
}

/// A task placed: its file, the spec of this run, and how it starts with
/// respect to earlier records.
struct Placed {
    file: TaskFile,
    spec: TaskSpec,
    start: Start,
    /// The MCP servers it is not offered because they are down.
    servers_down: Vec<String>,
}

/// A task run: what the loop gave, and what judging it and its summary
/// need besides.
struct Ran {
    outcome: Outcome,
    evidence: Evidence,
    spec: TaskSpec,
    resumption: Resumption,
    servers_down: Vec<String>,
}

impl<'a> Batch<'a> {
    /// A batch of `mode`'s kind, its attempts counted in `counting`, with
    /// the context window every task of it manages.
    pub(super) async fn open(
        cfg: &'a Config,
        deps: &'a TaskDeps,
        mode: &'a Mode,
        counting: Counting<'a>,
    ) -> Batch<'a> {
        Batch {
            cfg,
            deps,
            context_tokens: context_window(cfg, deps).await,
            counting,
            mode,
            setup_fault: Mutex::new(None),
        }
    }

    /// Runs `entries`, up to `concurrency` at once, each from file to
    /// records; a task does not start once the run is stopping or a
    /// `[budget]` limit is reached.
    pub(super) async fn all(&self, entries: Vec<InboxEntry>, concurrency: usize) -> Vec<TaskEnd> {
        let concurrency = concurrency.max(1);
        // Which file, as `check` says it: absolute, so the journal names it
        // whatever the unit's working folder.
        let config = std::path::absolute(&self.cfg.path).unwrap_or_else(|_| self.cfg.path.clone());
        tracing::info!(
            tasks = entries.len(),
            concurrency,
            dry_run = self.mode.dry_run,
            config = %config.display(),
            "run started"
        );
        futures::stream::iter(entries)
            .map(|entry| async move {
                if !may_start(self.deps, self.mode) {
                    return TaskEnd::NotStarted;
                }
                self.process_task(&entry).await
            })
            .buffer_unordered(concurrency)
            .collect()
            .await
    }
}

/// The context window every task of a batch manages, if any.
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

impl Batch<'_> {
    /// One task from file to records, and the file to where it belongs.
    /// Never fails the run: a task whose records or file cannot be written
    /// is logged, left where it was and counted failed.
    pub(super) async fn process_task(&self, entry: &InboxEntry) -> TaskEnd {
        let began = Began {
            at: (self.deps.clock)(),
            instant: Instant::now(),
        };
        let broken = || TaskEnd::Broken {
            task: entry.name.clone(),
        };
        let secrets = self.cfg.secrets();
        let mut rec = match RunRecord::create(&self.mode.logs, &entry.name, began.at, secrets) {
            Ok(rec) => rec,
            Err(e) => {
                tracing::error!(task = %printable(&entry.name), error = %format!("{e:#}"), "cannot create the task's records; it stays in the inbox");
                return broken();
            }
        };
        // A name may hold what reorders or breaks a journal line.
        let span =
            tracing::info_span!("task", name = %printable(&entry.name), run_id = %rec.run_id);
        let trace = (self.mode.traces.as_ref()).map(|t| t.task(&entry.name, &rec.run_id, began.at));
        let steps = self.steps(entry, &mut rec, trace, began);
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

    /// The steps, in order, each taking what the one before gave; `Err`
    /// when the records or the file could not be written (the task stays
    /// in the inbox).
    async fn steps(
        &self,
        entry: &InboxEntry,
        rec: &mut RunRecord,
        mut trace: Option<TaskTrace>,
        began: Began,
    ) -> anyhow::Result<Summary> {
        let count = self.count(entry, rec)?;
        let judged = match count.exhausted {
            true => self.give_up(rec, &count),
            false => self.isolated(entry, rec, &count, trace.as_mut()).await,
        };
        self.write_answer(rec, &judged.outcome)?;
        let summarised = self.summarise(entry, &rec.run_id, &count, judged, began);
        self.send_trace(rec, trace, &summarised.summary);
        let place = self.file(entry, rec, &summarised)?;
        let slot = self.mode.slot.as_ref();
        (self.counting).settle(self.cfg, slot, &entry.name, &count, &summarised.summary)?;
        rec.filed(&summarised.summary, &place);
        Ok(self.tell(summarised, &place))
    }

    /// Count: the attempt counted and saved with this run's folder and the
    /// task file's identity, before anything else happens.
    fn count(&self, entry: &InboxEntry, rec: &RunRecord) -> anyhow::Result<AttemptCount> {
        let (dev, ino) = rec.identity()?;
        let run = RunRef {
            id: rec.run_id.clone(),
            dev,
            ino,
        };
        let file = FileRef::of(&entry.path);
        let slot = self.mode.slot.as_ref();
        (self.counting).begin(self.cfg, slot, &entry.name, file, run)
    }

    /// A task killed mid-run too often is given up, not run again.
    fn give_up(&self, rec: &mut RunRecord, count: &AttemptCount) -> Judged {
        let error = rec.killed_too_often((self.deps.clock)(), count.previous, self.max());
        tracing::error!(error = %error, "task given up");
        self.unran(Outcome::failed(StopReason::InternalError, error))
    }

    /// From preparing to judging, isolated: a panic ends this task as
    /// `internal_error`.
    async fn isolated(
        &self,
        entry: &InboxEntry,
        rec: &mut RunRecord,
        count: &AttemptCount,
        trace: Option<&mut TaskTrace>,
    ) -> Judged {
        let steps = AssertUnwindSafe(self.prepare_to_judge(entry, rec, count, trace));
        steps.catch_unwind().await.unwrap_or_else(|panic| {
            let error = rec.internal_error((self.deps.clock)(), &panic_message(panic.as_ref()));
            tracing::error!(error = %error, "internal error; the other tasks go on");
            self.unran(Outcome::failed(StopReason::InternalError, error))
        })
    }

    /// Prepare, place, start, run, judge — or why the task could not start.
    async fn prepare_to_judge(
        &self,
        entry: &InboxEntry,
        rec: &mut RunRecord,
        count: &AttemptCount,
        mut trace: Option<&mut TaskTrace>,
    ) -> Judged {
        let prepared = match self.preparer().prepare(entry, rec).await {
            Ok(prepared) => prepared,
            Err(failure) => return self.not_started(entry, rec, failure),
        };
        let placed = match self.place(entry, &rec.run_id, count, prepared).await {
            Ok(placed) => placed,
            Err(failure) => return self.not_started(entry, rec, failure),
        };
        self.start(rec, trace.as_deref_mut(), &placed);
        let ran = self.run(entry, rec, trace, placed).await;
        self.judge(ran)
    }

    /// Place: the records the task may go on from found and checked, and
    /// the spec of this run resolved with their date — or, refused, with
    /// its own and the reason.
    async fn place(
        &self,
        entry: &InboxEntry,
        run_id: &str,
        count: &AttemptCount,
        prepared: Prepared,
    ) -> Result<Placed, StartFailure> {
        let preparer = self.preparer();
        let now = (self.deps.clock)();
        let point = (self.cfg.limits.resume && self.may_resume())
            .then(|| resume::find(self.mode, &entry.name, count, run_id, now))
            .flatten();
        let spec = preparer.spec(&entry.name, &prepared, run_id, point.as_ref())?;
        let start = match point {
            Some(point) => point.check(self.deps, &spec).await,
            None => Start::Fresh,
        };
        // Checked with the whole wall clock, as the recorded run ran (a
        // recorded retry's wait must not end the check early); run with
        // what the runs before left of it.
        let spec = match &start {
            Start::Refused(_) => preparer.spec(&entry.name, &prepared, run_id, None)?,
            Start::Resumed { point, .. } => TaskSpec {
                max_wall: resume::wall_left(spec.max_wall, point.wall_before),
                ..spec
            },
            Start::Fresh => spec,
        };
        Ok(Placed {
            file: prepared.file,
            spec,
            start,
            servers_down: prepared.servers_down,
        })
    }

    /// Start: the task file in its records (and its trace), `start.json`,
    /// and what the run goes on from (docs/resume-replay-eval.md, "Resume").
    fn start(&self, rec: &mut RunRecord, trace: Option<&mut TaskTrace>, placed: &Placed) {
        rec.task_file(&placed.file.text);
        if let Some(trace) = trace {
            trace.task_text(&placed.file.text);
        }
        let now = (self.deps.clock)();
        let point = placed.start.point();
        let wall_before = point.map_or(Duration::ZERO, |p| p.wall_before);
        let start = StartLine {
            task: placed.spec.name.clone(),
            run_id: rec.run_id.clone(),
            started_at: now,
            dry_run: self.mode.dry_run,
            replay_of: self.mode.replay_of.clone(),
            resumable: self.may_resume(),
            today: self.preparer().today(point.map(|p| p.today)),
            slot: self.mode.slot.as_ref().map(|s| s.at.to_rfc3339()),
            resumed_from: point.map(|p| p.run_id.clone()),
            wall_ms_before: harness_base::time::millis(wall_before),
        };
        rec.start(now, &start, placed.start.turns());
        placed.start.note(rec, now);
    }

    /// Run: the loop, its events watched; what it gave once the MCP servers
    /// it used are asked whether one died, and what it went on from.
    async fn run(
        &self,
        entry: &InboxEntry,
        rec: &mut RunRecord,
        trace: Option<&mut TaskTrace>,
        placed: Placed,
    ) -> Ran {
        let deps = self.deps;
        let resuming = placed.start.begin(deps);
        let mut observers = Observers {
            rec,
            live: self.mode.progress.task(&entry.name),
            evidence: Evidence::default(),
            replayed: Replayed::default(),
            trace,
        };
        let task_deps = resuming.deps.as_ref().unwrap_or(deps);
        let mut sink = |event: &TaskEvent<'_>| observers.on((deps.clock)(), event);
        let outcome = run_task(task_deps, &placed.spec, &mut sink).await;
        let outcome = tool_servers::unless_one_died(deps, &placed.spec, outcome).await;
        tool_servers::log_stderr(deps, observers.rec, &placed.spec);
        Ran {
            outcome,
            evidence: observers.evidence,
            spec: placed.spec,
            resumption: resuming.resumption(&observers.replayed),
            servers_down: placed.servers_down,
        }
    }

    /// Judge: the `[expect]` verdicts, and the outcome as the run sees it.
    fn judge(&self, ran: Ran) -> Judged {
        let verdicts = (ran.spec.expect.as_ref())
            .map(|expectations| expect::verdicts(expectations, &ran.evidence, &ran.outcome));
        let outcome = match &verdicts {
            Some(verdicts) => expect::judged(ran.outcome, verdicts),
            None => ran.outcome,
        };
        Judged {
            outcome: self.stop_on_setup_fault(outcome),
            verdicts,
            agent: ran.spec.agent,
            resumption: ran.resumption,
            servers_down: ran.servers_down,
        }
    }

    /// Why the task could not start, recorded, as what it came to.
    fn not_started(
        &self,
        entry: &InboxEntry,
        rec: &mut RunRecord,
        failure: StartFailure,
    ) -> Judged {
        let outcome = failure.outcome(rec, (self.deps.clock)(), &entry.path);
        self.unran(outcome)
    }

    /// What a task that never ran the loop came to: given up, not started, a panic.
    fn unran(&self, outcome: Outcome) -> Judged {
        Judged {
            outcome: self.stop_on_setup_fault(outcome),
            verdicts: None,
            agent: None,
            resumption: Resumption::default(),
            servers_down: Vec::new(),
        }
    }

    /// A setup fault stops the run: no further task starts, and the tasks
    /// in flight (interrupted by it) end as setup faults too.
    fn stop_on_setup_fault(&self, outcome: Outcome) -> Outcome {
        let mut fault = harness_base::sync::lock(&self.setup_fault);
        match (outcome.stop, fault.as_ref()) {
            (StopReason::SetupFault, None) => {
                let diagnosis = outcome.error.clone().unwrap_or_default();
                tracing::error!(error = %diagnosis, "setup fault: the run stops and every task stays in the inbox");
                *fault = Some(diagnosis);
                self.deps.cancel.cancel();
                outcome
            }
            (StopReason::Interrupted, Some(first)) => Outcome {
                stop: StopReason::SetupFault,
                error: Some(format!("stopped by another task's setup fault: {first}")),
                ..outcome
            },
            _ => outcome,
        }
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

    /// Summarise: where the task goes, with its attempt number, and its
    /// summary, whole.
    fn summarise(
        &self,
        entry: &InboxEntry,
        run_id: &str,
        count: &AttemptCount,
        judged: Judged,
        began: Began,
    ) -> Summarised {
        let counted_slot = match self.counting {
            Counting::Slot(_) => self.mode.slot.as_ref(),
            _ => None,
        };
        let (attempt, file) = (count.number(), self.mode.file);
        let filing = filing::file_outcome(&judged.outcome, attempt, self.max(), file, counted_slot);
        let stamp = Stamp {
            task: &entry.name,
            run_id,
            mode: self.mode,
            runpod: self.cfg.endpoint.kind == EndpointKind::Runpod,
            started_at: began.at,
            finished_at: (self.deps.clock)(),
            wall: began.instant.elapsed(),
        };
        filing::summarize(judged, filing, &stamp)
    }

    /// The task's trace, its root span closed as the summary says, queued
    /// for the collector.
    fn send_trace(&self, rec: &mut RunRecord, trace: Option<TaskTrace>, summary: &Summary) {
        let (Some(traces), Some(trace)) = (&self.mode.traces, trace) else {
            return;
        };
        let id = trace.trace_id();
        let line = match traces.send(&trace.end(summary.finished_at, summary)) {
            true => format!("trace {id} queued for [traces] endpoint"),
            false => {
                format!("trace {id} dropped: the queue for [traces] endpoint is full or closed")
            }
        };
        rec.log_line(summary.finished_at, &line);
    }

    /// File: `summary.json`, then the task file moved where its filing
    /// says; where it went, in words.
    fn file(
        &self,
        entry: &InboxEntry,
        rec: &RunRecord,
        summarised: &Summarised,
    ) -> anyhow::Result<String> {
        rec.summary(&summarised.summary)?;
        let paths = &self.cfg.paths;
        let dir = match summarised.disposition {
            Disposition::Done => &paths.done,
            Disposition::Failed => &paths.failed,
            Disposition::Keep if self.mode.file => return Ok("left in the inbox".into()),
            Disposition::Keep => return Ok("not moved".into()),
        };
        let moved = inbox::move_task(paths, &entry.path, dir, &rec.run_id, &entry.name)?;
        Ok(moved.display().to_string())
    }

    /// The task's end told to whoever asked (`OnEnd`) and to the service
    /// log; its summary.
    fn tell(&self, summarised: Summarised, place: &str) -> Summary {
        let summary = summarised.summary;
        if let Some(on_end) = &self.mode.on_end {
            (on_end.0)(&summary, summarised.result.as_ref());
        }
        tracing::info!(
            status = summary.status.as_str(),
            stop_reason = summary.stop_reason.as_str(),
            turns = summary.turns,
            tool_errors = summary.tool_errors,
            tokens = summary.total_tokens,
            wall_ms = summary.wall_ms,
            file = %printable(place),
            error = summary.error.as_deref().unwrap_or("-"),
            "task finished"
        );
        summary
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

/// The text of a panic's payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}
