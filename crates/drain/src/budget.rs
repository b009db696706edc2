//! What the drain asks of the budget (docs/budget-and-traces.md, "Budget"):
//! only whether a batch and its next task may start, and which limit paused
//! it — the endpoint asks it before every request and charges it for each —
//! and the ledger kept for the length of a run. Once a limit is reached
//! nothing more starts: what is left stays in the inbox, a recurring slot
//! stays due. Outside the endpoint, only this file asks the budget
//! (`clippy.toml`), each function that does allowing it alone.

use std::future::Future;

use super::{Mode, Tally};
use harness_agent::deps::TaskDeps;
use harness_config::Config;
use harness_state::Budget;

/// A run's spend: the ledger beside the inbox kept from the run's start
/// (read once; one not trusted is replaced even by a run that spends
/// nothing), and what is still pending added at its end. A `run` is
/// metered as a whole; `exec`, `eval` and `replay` batch by batch.
#[allow(clippy::disallowed_methods, reason = "a seam of spend")]
pub(super) async fn spending<T>(cfg: &Config, deps: &TaskDeps, run: impl Future<Output = T>) -> T {
    if deps.budget.keep_ledger(&cfg.paths.state_dir()) {
        // The ledger lost the day's spend: the run records still hold it,
        // so a planted entry never makes the daily limit a per-run one.
        let spent = recorded_spend(cfg, (deps.clock)());
        tracing::warn!(
            tokens = spent.tokens,
            gpu_ms = spent.gpu_ms,
            "today's spend rebuilt from the day's run records"
        );
        deps.budget.rebuilt(spent);
    }
    let ended = run.await;
    deps.budget.flush();
    ended
}

/// Whether the next task of a batch may start: not once the run is
/// stopping, nor once a `[budget]` limit is reached. A replay spends only
/// when it goes live, and the endpoint asks the budget then.
#[allow(clippy::disallowed_methods, reason = "a seam of spend")]
pub(super) fn may_start(deps: &TaskDeps, mode: &Mode) -> bool {
    !deps.cancel.is_cancelled() && (mode.replay_of.is_some() || deps.budget.check().is_ok())
}

/// Whether a batch may start at all: `Err` names the `[budget]` limit
/// reached, and when it resets.
#[allow(clippy::disallowed_methods, reason = "a seam of spend")]
pub(super) fn may_begin(deps: &TaskDeps) -> Result<(), String> {
    deps.budget.check()
}

/// The `[budget]` limit that leaves a batch's tasks unstarted, if one is
/// reached (what `eval` says of the variants it did not run).
#[allow(clippy::disallowed_methods, reason = "a seam of spend")]
pub fn paused(budget: &Budget) -> Option<String> {
    budget.refused()
}

/// A batch's tally with the budget's word: the limit its unstarted tasks
/// were left for, and what the ledger met that the operator must fix.
pub(super) fn paused_by(tally: &mut Tally, deps: &TaskDeps) {
    if tally.not_started > 0 && tally.budget_exhausted.is_none() {
        tally.budget_exhausted = paused(&deps.budget);
    }
    tally.problems.extend(deps.budget.problems());
}

/// What the day of `now` (in `[schedule] timezone`) spent, as the run
/// records under the logs say: each run started that day, a replay's
/// aside (it spends only where it goes live, and says so in its own run).
/// GPU time is RunPod's execution time where it was given, else the run's
/// wall time: more than the chat requests took, never less.
fn recorded_spend(cfg: &Config, now: chrono::DateTime<chrono::Utc>) -> harness_state::DaySpend {
    let day = harness_state::day_of(now, &cfg.timezone);
    // Runs of earlier days are not read: a day in any time zone lies
    // within the last 25 hours (a clock change's day included).
    let since = now - chrono::TimeDelta::hours(25);
    let listing = harness_records::read_summaries_since(&cfg.paths.logs, now, Some(since));
    let mut spent = harness_state::DaySpend::nothing(day);
    for run in &listing.runs {
        let s = &run.summary;
        if s.replay_of.is_some() || harness_state::day_of(s.started_at, &cfg.timezone) != day {
            continue;
        }
        spent.tokens = spent.tokens.saturating_add(s.total_tokens);
        spent.gpu_ms = spent
            .gpu_ms
            .saturating_add(s.runpod_exec_ms.unwrap_or(s.wall_ms));
    }
    spent
}
