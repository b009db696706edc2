//! Run records (docs/operating.md, "Records"): `logs/<task>/<run_id>/` with
//! `conversation.jsonl` (every request attempt, raw), `tools.jsonl` (every
//! tool call), `run.log` (a human-readable trace, thinking included) and
//! `summary.json`.
//!
//! Each line is written with one `write` call as it happens, so a killed run
//! still leaves whole, parseable lines. Every line passes through the
//! redactor first: no secret value reaches a record, whatever produced it.
//! Read back (as untrusted input), a run's lines answer a task again
//! ([`answering`]: resume and `replay`).

mod answering;
mod capped;
mod evals;
mod lines;
mod listing;
mod own_words;
mod partial;
mod read;
mod record;
mod run_id;

pub use answering::{Answered, Answers, Difference, GoLive};
pub use capped::{MAX_CONVERSATION_BYTES, MAX_SUMMARY_BYTES, MAX_TOOLS_BYTES};
pub use evals::{
    Comparison, ListedEval, MAX_EVAL_BYTES, Report, TaskRow, Totals, VariantReport, list_evals,
    read_eval,
};
pub use lines::{ContextLine, ConversationLine, IntentLine, StartLine, ToolLine, counted_name};
pub use listing::{
    ListedRun, Listing, Unfinished, Unreadable, read_summaries, read_summaries_in,
    read_summaries_since, started_since, unfinished_since,
};
pub use partial::{PartialRun, parse_whole_lines, read_partial, read_partial_lines};
pub use read::{
    FailureDetail, MAX_LOG_TAIL_BYTES, RecordedContext, RecordedLine, RecordedRun, ReplyView,
    ToolError, answer_of, failure_detail, read_listed, read_run, reply_view, request_texts,
};
pub use record::{RunRecord, create_private_dir, replace_private};
pub use run_id::{ahead_of_clock, run_id_for, run_order, run_time};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use harness_agent::StopReason;
use harness_agent::expect::Verdict;
use lines::is_zero;

/// How a task ended; its name one rule for serde and [`Status::as_str`].
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    strum::IntoStaticStr,
    strum::EnumIter,
    strum::EnumString,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Status {
    Succeeded,
    Failed,
    Interrupted,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// The share of a resumed task's counts that its earlier runs used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Earlier {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub wall_ms: u64,
}

/// `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub task: String,
    pub run_id: String,
    pub status: Status,
    pub stop_reason: StopReason,
    pub retryable: bool,
    pub attempt: u32,
    pub turns: u32,
    pub tool_calls: u32,
    pub tool_errors: u32,
    /// Calls answered "not run" because `max_calls_per_turn` or `max_writes` was spent.
    #[serde(default)]
    pub calls_over_budget: u32,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    pub runpod_exec_ms: Option<u64>,
    pub runpod_delay_ms: Option<u64>,
    pub wall_ms: u64,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub final_answer: Option<String>,
    pub error: Option<String>,
    #[serde(default)]
    pub dry_run: bool,
    /// One verdict per `[expect]` key, for a task that has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expectations: Option<Vec<Verdict>>,
    /// `<task>/<run_id>` of the recorded run this one replays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_of: Option<String>,
    /// The final answer was checked against an output schema (and `result.json` written).
    #[serde(default)]
    pub schema_checked: bool,
    /// The `[agents.NAME]` profile the task ran as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// A recurring task (docs/tasks.md, "Recurring tasks"), run for `slot`
    /// (RFC 3339).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recurring: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
    /// A recurring task's `{{last_success}}` (absent: `never`), so a replay
    /// sends the same body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success: Option<chrono::NaiveDate>,
    /// The run whose records this one went on from
    /// (docs/resume-replay-eval.md, "Resume").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_from: Option<String>,
    /// The turns answered from those records.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub resumed_turns: u32,
    /// Why the task started fresh although it had records to go on from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_refused: Option<String>,
    /// The MCP servers it was not offered because they were down (a task
    /// that names no tools runs without them: docs/tools.md, "Tools from MCP
    /// servers").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_servers_down: Vec<String>,
    /// What of the counts above earlier runs used (a resumed task's
    /// summary covers the whole task): the metrics count this run's share.
    /// Not in the file.
    #[serde(skip)]
    pub earlier: Earlier,
}

impl Summary {
    /// A run of `task` that answered nothing and counted nothing, started
    /// and finished at `at`, as a success: the start a test (or a fake
    /// record) changes with `..`. The drain builds every field itself.
    pub fn blank(task: &str, run_id: &str, at: DateTime<Utc>) -> Summary {
        Summary {
            task: task.to_string(),
            run_id: run_id.to_string(),
            status: Status::Succeeded,
            stop_reason: StopReason::FinalAnswer,
            retryable: false,
            attempt: 1,
            turns: 0,
            tool_calls: 0,
            tool_errors: 0,
            calls_over_budget: 0,
            prompt_tokens: 0,
            completion_tokens: 0,
            total_tokens: 0,
            runpod_exec_ms: None,
            runpod_delay_ms: None,
            wall_ms: 0,
            started_at: at,
            finished_at: at,
            final_answer: None,
            error: None,
            dry_run: false,
            expectations: None,
            replay_of: None,
            schema_checked: false,
            agent: None,
            recurring: false,
            slot: None,
            last_success: None,
            resumed_from: None,
            resumed_turns: 0,
            resume_refused: None,
            tool_servers_down: Vec::new(),
            earlier: Earlier::default(),
        }
    }
}

#[cfg(test)]
mod tests;
