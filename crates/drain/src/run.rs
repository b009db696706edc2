//! One `run` / `run-task`, as one list of named steps ([`Run::steps`]), each
//! handing the next a value of its own: ready (the folders checked, the
//! config's slips said) → lock (a [`RunLock`] and who holds it, or
//! `Locked`) → choose ([`ToRun`]: the inbox listed once, the recurring slots
//! due) → may start (the `[budget]` gate) → reach (the endpoint answers) →
//! inbox (its tasks run and filed) → recurring (the slots due, unless a
//! setup fault stopped the run) → wind up (the problems met besides the
//! tasks) → retain (`[retention]`) — and the lock let go after whoever
//! asked was told the work is done.

use std::ops::ControlFlow::{self, Break, Continue};
use std::sync::Mutex;

use super::budget::{self, may_start, spending};
use super::choose::{self, ToRun};
use super::counting::Counting;
use super::pipeline::Batch;
use super::recurring::Due;
use super::{RunOptions, RunOutcome, Tally, TaskEnd, UsageError, folders, slips};
use harness_agent::deps::TaskDeps;
use harness_config::Config;
use harness_endpoint::Reach;
use harness_outputs::retention;
use harness_records::Summary;
use harness_state::{Attempts, Holder, RunLock, Slots};

/// How a run ended so far, and the summaries of the tasks it filed.
pub(super) type Ended = (RunOutcome, Vec<Summary>);

/// One run: what it was asked, and what it found on the way that the
/// run's end reports.
pub(super) struct Run<'a> {
    cfg: &'a Config,
    deps: &'a TaskDeps,
    opts: &'a RunOptions,
    /// Inbox entries that will never run, once the inbox is listed.
    pub(super) ignored: Option<usize>,
    /// What the operator must fix that no task's record says (README, Exit codes).
    problems: Vec<String>,
}

impl<'a> Run<'a> {
    pub(super) fn new(cfg: &'a Config, deps: &'a TaskDeps, opts: &'a RunOptions) -> Run<'a> {
        Run {
            cfg,
            deps,
            opts,
            ignored: None,
            problems: Vec::new(),
        }
    }

    /// The steps, in order; `Err` for a fault of the setup found before a
    /// task ran (every task stays where it was).
    pub(super) async fn steps(&mut self) -> anyhow::Result<Ended> {
        self.ready()?;
        let Some(lock) = self.lock()? else {
            let wanted = self.opts.only.clone();
            return Ok((RunOutcome::Locked { wanted }, Vec::new()));
        };
        let (cfg, deps) = (self.cfg, self.deps);
        let ended = spending(cfg, deps, self.locked()).await;
        let ended = ended.map(|ended| self.wind_up(ended));
        if ended.is_ok() {
            self.retain();
        }
        // The run's work is done and the lock still held: what must not
        // race another run (the digest's mark) is taken now.
        if let Some(before_unlock) = &self.opts.batch.before_unlock {
            (before_unlock.0)();
        }
        drop(lock);
        ended
    }

    /// Under the lock: choose, then — unless there is nothing to do, the
    /// budget leaves the queue paused or the endpoint does not answer —
    /// the inbox, then the recurring slots.
    async fn locked(&mut self) -> anyhow::Result<Ended> {
        let todo = self.choose()?;
        if let Break(stopped) = self.may_start(&todo) {
            return Ok(stopped);
        }
        if let Break(stopped) = self.reach(&todo).await {
            return Ok(stopped);
        }
        let inbox = self.inbox(todo.entries).await;
        Ok(self.recurring(inbox, todo.due, todo.state).await)
    }

    /// Ready: the folders a run writes exist, no placeholder is left in the
    /// config, and what `check` warns of is said in the run's log too.
    fn ready(&self) -> anyhow::Result<()> {
        folders::prepare(self.cfg).map_err(UsageError)?;
        // Requests would go to an endpoint or notes that are not the operator's.
        let placeholders = slips::placeholders(self.cfg);
        if !placeholders.is_empty() {
            return Err(UsageError(placeholders.join("; ")).into());
        }
        for slip in slips::recurring_near_misses(self.cfg)
            .into_iter()
            .chain(slips::unused_mail(self.cfg))
            .chain(slips::extra_keys(self.cfg).1)
        {
            tracing::warn!("{}", slip.trim_start_matches("warning: "));
        }
        Ok(())
    }

    /// Lock: the run lock, noted with who holds it (for `status`), and
    /// whoever asked told (`[notify]`'s `/start`); `None` when another run
    /// holds it. A lock that cannot be taken (a read-only folder, a link
    /// planted at its name) is a fault of the setup.
    fn lock(&self) -> anyhow::Result<Option<RunLock>> {
        let lock = RunLock::try_acquire(&self.cfg.paths.state_dir())
            .map_err(|e| UsageError(format!("[paths] inbox: cannot take the run lock: {e:#}")))?;
        let Some(lock) = lock else {
            return Ok(None);
        };
        let command = if self.opts.only.is_some() {
            "run-task"
        } else {
            "run"
        };
        lock.note(&Holder {
            pid: std::process::id(),
            command: command.into(),
            since: (self.deps.clock)(),
        });
        if let Some(on_locked) = &self.opts.batch.on_locked {
            (on_locked.0)();
        }
        Ok(Some(lock))
    }

    /// Choose: the inbox's tasks and the recurring slots due.
    fn choose(&mut self) -> anyhow::Result<ToRun> {
        let mut todo = choose::to_run(self.cfg, self.deps, self.opts)?;
        self.ignored = Some(todo.strays);
        self.problems = std::mem::take(&mut todo.problems);
        Ok(todo)
    }

    /// May start: `Break` with how the run ended when there is nothing to do,
    /// or a `[budget]` limit is reached (nothing starts, no request goes
    /// out, the queue waits).
    fn may_start(&self, todo: &ToRun) -> ControlFlow<Ended> {
        let inbox = self.cfg.paths.inbox.display();
        if todo.entries.is_empty() && todo.due.is_empty() {
            match todo.strays {
                0 => tracing::info!(%inbox, "the inbox is empty and no recurring task is due"),
                n => {
                    tracing::warn!(%inbox, ignored = n, "the inbox holds no task to run, only entries that never run; no recurring task is due")
                }
            }
            return Break((RunOutcome::Finished(Tally::default()), Vec::new()));
        }
        let Err(why) = budget::may_begin(self.deps) else {
            return Continue(());
        };
        tracing::warn!(reason = %why, "budget reached: no task starts");
        let tally = Tally {
            budget_exhausted: Some(why),
            ..Tally::unstarted(todo.len())
        };
        Break((RunOutcome::Finished(tally), Vec::new()))
    }

    /// Reach: `Break` with how the run ended when the endpoint does not
    /// answer, or what answers is not the server (another service on its
    /// port, a certificate refused): every task stays.
    async fn reach(&self, todo: &ToRun) -> ControlFlow<Ended> {
        match self.deps.endpoint.prober().reach().await {
            Reach::Answers => Continue(()),
            Reach::Unreachable(why) => {
                let left = todo.len();
                Break((RunOutcome::Unreachable { why, left }, Vec::new()))
            }
            Reach::NotTheServer(why) | Reach::Untrusted(why) => {
                tracing::error!(error = %why, "setup fault: the run stops and every task stays in the inbox");
                let tally = Tally {
                    setup_fault: Some(why),
                    ..Tally::unstarted(todo.len())
                };
                Break((RunOutcome::Finished(tally), Vec::new()))
            }
        }
    }

    /// Inbox: its tasks run, tallied and — unless it is a dry run — filed.
    async fn inbox(&self, entries: Vec<harness_inbox::InboxEntry>) -> Ended {
        if entries.is_empty() {
            return (RunOutcome::Finished(Tally::default()), Vec::new());
        }
        let (cfg, deps, opts) = (self.cfg, self.deps, &self.opts.batch);
        let mode = opts.inbox(cfg);
        let counting = match mode.file {
            true => Counting::Inbox(Mutex::new(Attempts::load(&cfg.paths.state_dir()))),
            false => Counting::Uncounted,
        };
        let batch = Batch::open(cfg, deps, &mode, counting).await;
        let ends = batch.all(entries, opts.concurrency).await;
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
        (RunOutcome::Finished(tally), super::filed(ends))
    }

    /// Recurring: the slots due, one after another, each for its slot —
    /// unless a setup fault stopped the run, which also stops the slots; a
    /// slot the budget leaves unstarted stays due. Unless it is a dry run or
    /// `run-task --recurring`, each slot's attempt is counted and settled in
    /// the state beside the inbox as its task starts and ends.
    async fn recurring(
        &self,
        (mut outcome, mut summaries): Ended,
        due: Vec<Due>,
        state: Slots,
    ) -> Ended {
        let RunOutcome::Finished(tally) = &mut outcome else {
            return (outcome, summaries);
        };
        if tally.setup_fault.is_some() {
            return (outcome, summaries);
        }
        let (cfg, deps, opts) = (self.cfg, self.deps, &self.opts.batch);
        let state = Mutex::new(state);
        let settle = (!opts.dry_run && !self.opts.recurring).then_some(&state);
        let mut ends = Vec::new();
        for Due {
            entry,
            slot,
            broken,
        } in due
        {
            let mode = opts.slot(cfg, slot);
            // Stopping, or a `[budget]` limit reached: the slot stays due.
            if !may_start(deps, &mode) {
                ends.push(TaskEnd::NotStarted);
                continue;
            }
            // A file that cannot run has no slot to count: it is recorded,
            // once for each version of it (README, Exit codes).
            let counted = settle.filter(|_| broken.is_none());
            let counting = counted.map_or(Counting::Uncounted, Counting::Slot);
            let batch = Batch::open(cfg, deps, &mode, counting).await;
            let mut end = batch.process_task(&entry).await;
            if let (Some(version), Some(state), TaskEnd::Filed(_)) = (broken, settle, &end) {
                let mut state = harness_base::sync::lock(state);
                state.broken.insert(entry.name.clone(), version);
                if let Err(e) = state.save(&cfg.paths.state_dir()) {
                    tracing::error!(error = %format!("{e:#}"), "cannot save the recurring state");
                    end = TaskEnd::Broken { task: entry.name };
                }
            }
            let fault = Tally::of(std::slice::from_ref(&end)).setup_fault.is_some();
            ends.push(end);
            // A setup fault stops the run: no further task starts.
            if fault {
                break;
            }
        }
        tally.absorb(&Tally::of(&ends));
        summaries.extend(super::filed(ends));
        (outcome, summaries)
    }

    /// Wind up, still under the lock: the problems met besides the tasks
    /// said (the run exits 1 for them).
    fn wind_up(&mut self, mut ended: Ended) -> Ended {
        if let RunOutcome::Finished(tally) = &mut ended.0 {
            tally.problems.append(&mut self.problems);
            budget::paused_by(tally, self.deps);
            if let Some(mcp) = &self.deps.toolbox.mcp {
                tally.problems.extend(mcp.problems());
            }
            for problem in &tally.problems {
                tracing::warn!("{problem}; the run exits 1 for it");
            }
        }
        ended
    }

    /// Retain: `[retention]` applied, still under the lock; a dry run
    /// prunes nothing.
    fn retain(&self) {
        if self.opts.batch.dry_run {
            return;
        }
        let (cfg, clock) = (self.cfg, self.deps.clock.as_ref());
        let pruned = retention::prune(&cfg.paths, &cfg.retention, clock(), false);
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
}
