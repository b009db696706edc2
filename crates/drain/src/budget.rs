//! What the drain asks of the budget (docs/budget-and-traces.md, "Budget"):
//! only whether the next task may start — the endpoint asks it before every
//! request and charges it for each — and the ledger kept for the length of a
//! run. Once a limit is reached nothing more starts: what is left stays in the
//! inbox, a recurring slot stays due.

use std::future::Future;

use super::Mode;
use harness_agent::deps::TaskDeps;
use harness_config::Config;

/// A run's spend: the ledger beside the inbox kept from the run's start
/// (read once; one not trusted is replaced even by a run that spends
/// nothing), and what is still pending added at its end. A `run` is
/// metered as a whole; `exec`, `eval` and `replay` batch by batch.
pub(super) async fn spending<T>(cfg: &Config, deps: &TaskDeps, run: impl Future<Output = T>) -> T {
    deps.budget.keep_ledger(&cfg.paths.state_dir());
    let ended = run.await;
    deps.budget.flush();
    ended
}

/// Whether the next task of a batch may start: not once the run is
/// stopping, nor once a `[budget]` limit is reached. A replay spends only
/// when it goes live, and the endpoint asks the budget then.
pub(super) fn may_start(deps: &TaskDeps, mode: &Mode) -> bool {
    !deps.cancel.is_cancelled() && (mode.replay_of.is_some() || deps.budget.check().is_ok())
}
