//! What happens in a task, as one typed stream: the loop emits a
//! [`TaskEvent`] at each step to a single sink, and every consumer — the
//! run records, the live display — reads the same stream. The loop knows
//! none of them; the events carry plain facts, no file formats.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::calls::Answer;
use super::context::{ContextNote, Counted, Elided};
use super::outcome::Outcome;
use crate::endpoint::Failure;
use crate::tools::ToolName;
use crate::wire::chat::{ToolCall, Usage};

/// One step of a task, in the order it happened.
#[derive(Debug)]
pub enum TaskEvent<'a> {
    /// The task began, offering these tools.
    Started {
        task: &'a str,
        tools: &'a [ToolName],
    },
    /// Old tool results were replaced by placeholders so the next request fits.
    ContextElided { elided: &'a Elided },
    /// A request is about to go out.
    RequestSent {
        turn: u32,
        messages: usize,
        prompt_tokens: u64,
        counted: Counted,
    },
    /// One HTTP attempt of a model call ended (a retried call has several).
    Attempt(ModelAttempt<'a>),
    /// The server said the prompt is over its context; it is shrunk and sent once more.
    ContextExceeded {
        n_prompt: Option<u64>,
        n_ctx: Option<u64>,
    },
    /// A reply was read.
    ReplyRead(ReplyFacts<'a>),
    /// The reply was empty: the model is asked once more.
    AskedAgain { thinking_off: bool },
    /// The answer was cut at `max_tokens`: it is asked for once more, shorter.
    AnswerCut,
    /// The final answer did not match the output schema: it is asked for
    /// once more, the schema as `response_format`.
    AnswerRejected { errors: &'a [String] },
    /// One tool call was answered (run, or refused with the reason).
    ToolAnswered(&'a Answer),
    /// The task ended.
    Stopped(&'a Outcome),
}

/// One HTTP attempt of a model call, as it ended.
#[derive(Debug, Clone)]
pub struct ModelAttempt<'a> {
    pub turn: u32,
    /// 1 for the first attempt of a call, then 2, 3, … for retries.
    pub attempt: u32,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub latency_ms: u64,
    /// The body sent (for RunPod, the `{"input": …}` envelope).
    pub request: &'a Value,
    pub http_status: Option<u16>,
    /// The raw response body: JSON when it parsed, else text.
    pub response: Option<&'a crate::base::http::RawBody>,
    pub error: Option<String>,
    /// What kind of failure it was, when it failed.
    pub failure: Option<AttemptFailure>,
    /// The server's `Retry-After`, in milliseconds.
    pub retry_after_ms: Option<u64>,
    /// The RunPod job, for the `runpod` kind.
    pub job: Option<JobFacts<'a>>,
    /// The reply's `finish_reason`; `length` means it was cut at `max_tokens`.
    pub finish_reason: Option<&'a str>,
    /// What the context manager did before the request (first attempt only).
    pub context: Option<&'a ContextNote>,
}

/// How an attempt failed: what a replay needs, with the status and the
/// body, to judge the recorded answer again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptFailure {
    Transport,
    Status,
    JobFailed,
    JobEnded,
    BadBody,
    TooLarge,
    WallClock,
    Interrupted,
    NotRecorded,
}

impl From<Failure> for AttemptFailure {
    fn from(f: Failure) -> Self {
        match f {
            Failure::Transport => AttemptFailure::Transport,
            Failure::Status => AttemptFailure::Status,
            Failure::JobFailed => AttemptFailure::JobFailed,
            Failure::JobEnded => AttemptFailure::JobEnded,
            Failure::BadBody => AttemptFailure::BadBody,
            Failure::TooLarge => AttemptFailure::TooLarge,
            Failure::WallClock => AttemptFailure::WallClock,
            Failure::Interrupted => AttemptFailure::Interrupted,
            Failure::NotRecorded => AttemptFailure::NotRecorded,
        }
    }
}

impl From<AttemptFailure> for Failure {
    fn from(f: AttemptFailure) -> Self {
        match f {
            AttemptFailure::Transport => Failure::Transport,
            AttemptFailure::Status => Failure::Status,
            AttemptFailure::JobFailed => Failure::JobFailed,
            AttemptFailure::JobEnded => Failure::JobEnded,
            AttemptFailure::BadBody => Failure::BadBody,
            AttemptFailure::TooLarge => Failure::TooLarge,
            AttemptFailure::WallClock => Failure::WallClock,
            AttemptFailure::Interrupted => Failure::Interrupted,
            AttemptFailure::NotRecorded => Failure::NotRecorded,
        }
    }
}

/// A RunPod job's facts after one attempt.
#[derive(Debug, Clone, Copy)]
pub struct JobFacts<'a> {
    pub id: Option<&'a str>,
    pub status: Option<&'a str>,
    pub delay_ms: Option<u64>,
    pub execution_ms: Option<u64>,
    pub polls: u32,
}

/// What a reply held.
#[derive(Debug, Clone, Copy)]
pub struct ReplyFacts<'a> {
    pub turn: u32,
    /// This reply's tokens.
    pub usage: Usage,
    /// All tokens of the task so far.
    pub total_tokens: u64,
    pub finish_reason: Option<&'a str>,
    pub thinking: Option<&'a str>,
    /// The calls were written as text and recovered.
    pub recovered: bool,
    pub calls: &'a [ToolCall],
    /// Calls past the per-reply ceiling, not read.
    pub unread_calls: u64,
}
