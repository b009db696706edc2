//! Recorded lines turned back into what the endpoint and the tools answer
//! with: `replay` (SPEC §13) and resume (SPEC §18) both play a run's
//! records to the loop through these.

use std::collections::HashMap;
use std::time::Duration;

use super::{RecordedLine, ToolLine};
use crate::base::http::{RawBody, parse_tree};
use crate::endpoint::JobInfo;
use crate::endpoint::recorded::RecordedAttempt;
use crate::tools::ToolOutput;

/// The most memory the recorded tool details of a run may take as trees.
const MAX_DETAIL_TREE_BYTES: usize = 64 << 20;

/// A recorded attempt as the endpoint replays it.
pub fn recorded_attempt(l: &RecordedLine) -> RecordedAttempt {
    RecordedAttempt {
        turn: l.turn,
        attempt: l.attempt,
        request: l.request.clone(),
        http_status: l.http_status,
        response: l.response.clone().map(RawBody::from),
        error: l.error.clone(),
        failure: l.failure(),
        retry_after: l.retry_after_ms.map(Duration::from_millis),
        job: l.runpod.as_ref().map(|j| JobInfo {
            job_id: j.job_id.clone(),
            status: j.status.clone(),
            delay_time: j.delay_time,
            execution_time: j.execution_time,
            polls: j.polls,
        }),
    }
}

/// The exact prompt counts of the recorded run, by turn.
pub fn recorded_counts(attempts: &[RecordedLine]) -> Vec<(u32, u64)> {
    attempts
        .iter()
        .filter_map(|l| Some((l.turn, l.context.as_ref()?)))
        .flat_map(|(turn, c)| c.counts.iter().map(move |n| (turn, *n)))
        .collect()
}

/// The context window the recorded run managed (it may have come from the
/// server, which a replay does not ask).
pub fn recorded_window(attempts: &[RecordedLine]) -> Option<u32> {
    attempts
        .iter()
        .find_map(|l| l.context.as_ref().and_then(|c| c.context_tokens))
}

/// The results of the tools a recorded run ran, by turn and call id; their
/// details become trees within one byte cap for the whole run (SPEC §21).
pub fn recorded_results(tools: &[ToolLine]) -> HashMap<(u32, String), ToolOutput> {
    let mut left = MAX_DETAIL_TREE_BYTES;
    tools
        .iter()
        .filter(|t| t.executed)
        .map(|t| {
            let output = ToolOutput {
                text: t.result.clone(),
                is_error: t.is_error,
                detail: t
                    .detail
                    .as_ref()
                    .and_then(|d| parse_tree(d.get(), &mut left)),
                setup_fault: None,
            };
            ((t.turn, t.call_id.clone()), output)
        })
        .collect()
}
