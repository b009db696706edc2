//! The lines of `conversation.jsonl` and `tools.jsonl`: one JSON object per
//! model attempt and per tool call, with the field names of docs/operating.md,
//! "Records".

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use harness_agent::{Answer, Counted, ModelAttempt};
use harness_endpoint::{Failure, JobInfo};
use harness_tools::ReadOn;

/// One line of `conversation.jsonl`: one HTTP attempt of a model call.
#[derive(Debug, Clone, Serialize)]
pub struct ConversationLine<'a> {
    pub turn: u32,
    pub attempt: u32,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub latency_ms: u64,
    /// The body sent (for RunPod, the `{"input": …}` envelope).
    pub request: &'a Value,
    pub http_status: Option<u16>,
    /// The raw response body: JSON when it parsed, else a string.
    pub response: Option<&'a harness_base::http::RawBody>,
    pub error: Option<&'a str>,
    /// The reply's `finish_reason`: `length` marks a reply cut at `max_tokens`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<&'a str>,
    /// How the attempt failed: `transport`, `status`, `job_failed`,
    /// `job_ended`, `bad_body`, `not_json`, `too_large`, `wall_clock`, `interrupted`,
    /// `not_recorded`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runpod: Option<&'a JobInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<ContextLine<'a>>,
    /// Answered from the records of the run this one resumed
    /// (docs/resume-replay-eval.md, "Resume").
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub resumed: bool,
}

/// The `context` object of a conversation line.
#[derive(Debug, Clone, Serialize)]
pub struct ContextLine<'a> {
    /// The context window managed (`[limits] context_tokens`, or the server's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_tokens: Option<u32>,
    /// Prompt tokens of the request as sent, as `counted` says.
    pub prompt_tokens: u64,
    /// `exact` (the server's template and tokenizer) or `estimated`.
    pub counted: &'static str,
    /// The harness's own estimate, before any count.
    pub estimated_prompt_tokens: u64,
    /// Every exact count made before this request (several when eliding
    /// took more than one round).
    #[serde(skip_serializing_if = "<[u64]>::is_empty")]
    pub counts: &'a [u64],
    /// `context_tokens − max_tokens`, when the context is managed (the
    /// record's name for it is `budget`).
    #[serde(rename = "budget")]
    pub room: Option<u64>,
    /// Tool results whose bodies were replaced by a placeholder before this request.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub elided_call_ids: &'a [String],
    /// Assistant turns whose replayed thinking was dropped before this request.
    #[serde(skip_serializing_if = "is_zero")]
    pub elided_reasoning: u32,
}

pub(super) fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The record's name for how a prompt was counted.
pub fn counted_name(c: Counted) -> &'static str {
    match c {
        Counted::Exact => "exact",
        Counted::Estimated => "estimated",
    }
}

impl<'a> ConversationLine<'a> {
    pub fn of(m: &ModelAttempt<'a>) -> Self {
        let a = m.attempt;
        ConversationLine {
            turn: m.turn,
            attempt: a.attempt,
            started_at: a.started_at,
            finished_at: a.finished_at,
            latency_ms: a.latency_ms,
            request: a.request,
            http_status: a.http_status,
            response: a.response.as_ref(),
            error: a.error.as_deref(),
            finish_reason: a.finish_reason.as_deref(),
            error_kind: a.failure.map(failure_name),
            retry_after_ms: a.retry_after.map(harness_base::time::millis),
            runpod: a.runpod.as_ref(),
            context: m.context.map(|c| ContextLine {
                context_tokens: c.window,
                prompt_tokens: c.prompt_tokens,
                counted: counted_name(c.counted),
                estimated_prompt_tokens: c.estimated_prompt_tokens,
                counts: &c.counts,
                room: c.room,
                elided_call_ids: &c.elided.call_ids,
                elided_reasoning: c.elided.reasoning,
            }),
            resumed: false,
        }
    }
}

/// The name of a [`Failure`] in `conversation.jsonl`'s `error_kind`.
pub(super) fn failure_name(f: Failure) -> &'static str {
    f.into()
}

pub(super) fn failure_of(name: &str) -> Option<Failure> {
    name.parse().ok()
}

/// One line of `tools.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ToolLine {
    pub turn: u32,
    pub call_id: String,
    pub name: String,
    pub arguments: String,
    /// The result as the model got it.
    pub result: String,
    pub is_error: bool,
    pub duration_ms: u64,
    pub original_chars: usize,
    pub returned_chars: usize,
    /// False when the call was answered without running the tool (invalid,
    /// repeated, cut off, over a call limit; dry-run writes are still "executed" as intents).
    pub executed: bool,
    /// The call was written as text and recovered.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub recovered: bool,
    /// How many times this exact call (name + arguments) has been asked for in the task.
    pub repeat: u32,
    /// Kept as text when read back: a crafted record cannot grow into a tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Box<serde_json::value::RawValue>>,
    /// Answered from the records of the run this one resumed
    /// (docs/resume-replay-eval.md, "Resume").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resumed: bool,
    /// The service refused the setup on this call: a resume runs it again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub setup_fault: bool,
    /// The result is one page of a longer text: where it goes on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_on: Option<ReadOn>,
}

impl ToolLine {
    pub fn of(a: &Answer) -> Self {
        ToolLine {
            turn: a.turn,
            call_id: a.call_id.clone(),
            name: a.name.clone(),
            arguments: a.arguments.clone(),
            result: a.text.clone(),
            is_error: a.is_error,
            duration_ms: a.duration_ms,
            original_chars: a.original_chars,
            returned_chars: a.returned_chars,
            executed: a.executed,
            recovered: a.recovered,
            repeat: a.repeat,
            detail: a
                .detail
                .as_ref()
                .and_then(|d| serde_json::value::to_raw_value(d).ok()),
            resumed: false,
            setup_fault: a.setup_fault.is_some(),
            read_on: a.read_on,
        }
    }
}

/// One line of `intents.jsonl`: a write call about to be sent
/// (docs/resume-replay-eval.md, "Resume").
/// Its result follows in `tools.jsonl`; an intent without one was sent,
/// or about to be, when the process died.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IntentLine {
    pub turn: u32,
    pub call_id: String,
    pub name: String,
    pub arguments: String,
    pub at: DateTime<Utc>,
}

/// `start.json`: what a run knew as it began, written before its first
/// request, so a run killed before its summary can still be resumed from
/// (docs/resume-replay-eval.md, "Resume").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartLine {
    pub task: String,
    pub run_id: String,
    pub started_at: DateTime<Utc>,
    /// A dry run's records are never resumed from, nor a replay's.
    pub dry_run: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_of: Option<String>,
    /// A later run of the task may go on from these records: false for
    /// `exec`, an eval, a replay, a dry run, `run-task --recurring`.
    pub resumable: bool,
    /// The date the task's prompts were built with: a resumed task keeps it.
    pub today: chrono::NaiveDate,
    /// A recurring task's slot (RFC 3339), as its summary would say it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_from: Option<String>,
    /// Wall time the task used in earlier runs.
    #[serde(default)]
    pub wall_ms_before: u64,
}

pub(super) fn json_line<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value)
        .unwrap_or_else(|e| format!("{{\"record_error\":{:?}}}", e.to_string()))
}
