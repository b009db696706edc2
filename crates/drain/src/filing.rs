//! Where a finished task goes and what its summary says about it: pure
//! decisions over the task's judged result and its attempt count (a
//! recurring task's file never moves; its retries are its slot's), and the
//! summary built whole from them.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::resume::Resumption;
use super::{Mode, Slot};
use harness_agent::expect::Verdict;
use harness_agent::{Outcome, Stats, StopReason};
use harness_records::{Status, Summary};

/// What a task came to, judged: its outcome as the run sees it (a setup
/// fault's already stops the run), and what its summary needs besides.
pub(super) struct Judged {
    pub(super) outcome: Outcome,
    pub(super) verdicts: Option<Vec<Verdict>>,
    /// The profile it ran as.
    pub(super) agent: Option<String>,
    /// What it went on from (docs/resume-replay-eval.md, "Resume").
    pub(super) resumption: Resumption,
    /// The MCP servers it was not offered because they were down.
    pub(super) servers_down: Vec<String>,
}

/// Where a finished task's file goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Disposition {
    Done,
    Failed,
    /// Stays in the inbox (retryable, interrupted, or a dry run).
    Keep,
}

/// Where a finished task goes and what its summary says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Filing {
    pub(super) disposition: Disposition,
    pub(super) status: Status,
    pub(super) retryable: bool,
    /// Added to the summary's error.
    pub(super) note: Option<String>,
    /// The attempt number the summary says.
    pub(super) attempt: u32,
}

/// Where a task ends up after `attempt` of `max_attempts`: `file` when the
/// batch files tasks (a real run), `slot` when the attempt was a recurring
/// task's counted slot.
pub(super) fn file_outcome(
    outcome: &Outcome,
    attempt: u32,
    max_attempts: u32,
    file: bool,
    slot: Option<&Slot>,
) -> Filing {
    let (stop, retryable) = (outcome.stop, outcome.retryable);
    let status = match stop {
        StopReason::FinalAnswer => Status::Succeeded,
        StopReason::Interrupted | StopReason::SetupFault | StopReason::BudgetExhausted => {
            Status::Interrupted
        }
        _ => Status::Failed,
    };
    let filing = |disposition, retryable, note| Filing {
        disposition,
        status,
        retryable,
        note,
        attempt,
    };
    let mut filing = match stop {
        _ if !file && slot.is_none() => filing(Disposition::Keep, retryable, None),
        StopReason::FinalAnswer => filing(Disposition::Done, false, None),
        StopReason::Interrupted | StopReason::SetupFault | StopReason::BudgetExhausted => {
            filing(Disposition::Keep, true, None)
        }
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
    };
    if let Some(slot) = slot {
        for_slot(&mut filing, slot, max_attempts);
    }
    filing
}

/// A recurring task's file never moves; its retries are its slot's.
fn for_slot(filing: &mut Filing, slot: &Slot, max_attempts: u32) {
    filing.disposition = Disposition::Keep;
    if filing.note.is_some() {
        let (at, attempt) = (slot.at.to_rfc3339(), filing.attempt);
        filing.note = Some(if filing.retryable {
            format!(
                "the slot {at} stays due, to be tried again at the next run (attempt {attempt} of {max_attempts})"
            )
        } else {
            format!("gave up on the slot {at} after {attempt} attempts (max_attempts)")
        });
    }
}

/// What a summary says besides the task's result and its filing: whose
/// it is, how its batch ran it, and when.
pub(super) struct Stamp<'a> {
    pub(super) task: &'a str,
    pub(super) run_id: &'a str,
    pub(super) mode: &'a Mode,
    /// The endpoint is RunPod's: its timings are 0, not absent, when unknown.
    pub(super) runpod: bool,
    pub(super) started_at: DateTime<Utc>,
    pub(super) finished_at: DateTime<Utc>,
    /// Its wall time in this run.
    pub(super) wall: Duration,
}

/// A task summarised: its summary, where its file goes, and the JSON its
/// answer matched, for whoever is told of its end.
pub(super) struct Summarised {
    pub(super) summary: Summary,
    pub(super) disposition: Disposition,
    pub(super) result: Option<serde_json::Value>,
}

/// A task's summary, whole: who it was, what it gave, where it goes, when.
pub(super) fn summarize(judged: Judged, filing: Filing, stamp: &Stamp<'_>) -> Summarised {
    let Judged {
        outcome,
        verdicts,
        agent,
        resumption,
        servers_down,
    } = judged;
    let Stats {
        turns,
        tool_calls,
        tool_errors,
        usage,
        runpod_exec_ms,
        runpod_delay_ms,
        calls_over_budget,
    } = outcome.stats;
    let error = match (outcome.error, filing.note) {
        (Some(e), Some(k)) => Some(format!("{e}; {k}")),
        (e, k) => e.or(k),
    };
    let mode = stamp.mode;
    let wall = stamp.wall.saturating_add(resumption.wall_before);
    let summary = Summary {
        task: stamp.task.to_string(),
        run_id: stamp.run_id.to_string(),
        status: filing.status,
        stop_reason: outcome.stop,
        retryable: filing.retryable,
        attempt: filing.attempt,
        turns,
        tool_calls,
        tool_errors,
        calls_over_budget,
        prompt_tokens: usage.prompt_tokens,
        completion_tokens: usage.completion_tokens,
        total_tokens: usage.total_tokens,
        runpod_exec_ms: runpod_exec_ms.or(stamp.runpod.then_some(0)),
        runpod_delay_ms: runpod_delay_ms.or(stamp.runpod.then_some(0)),
        wall_ms: harness_base::time::millis(wall),
        started_at: stamp.started_at,
        finished_at: stamp.finished_at,
        final_answer: outcome.final_answer,
        error,
        dry_run: mode.dry_run,
        expectations: verdicts,
        replay_of: mode.replay_of.clone(),
        schema_checked: outcome.result.is_some(),
        agent,
        recurring: mode.slot.is_some(),
        slot: mode.slot.as_ref().map(|s| s.at.to_rfc3339()),
        last_success: mode.slot.as_ref().and_then(|s| s.last_success),
        resumed_from: resumption.from,
        resumed_turns: resumption.turns,
        resume_refused: resumption.refused,
        tool_servers_down: servers_down,
        earlier: resumption.earlier,
    };
    Summarised {
        summary,
        disposition: filing.disposition,
        result: outcome.result,
    }
}
