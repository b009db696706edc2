//! What happens in a task, as one typed stream: the loop emits a
//! [`TaskEvent`] at each step to a single sink, and every consumer — the
//! run records, the live display — reads the same stream. The loop knows
//! none of them; the events carry plain facts, no file formats.

use super::calls::Answer;
use super::context::{ContextNote, Counted, Elided};
use super::outcome::Outcome;
use harness_endpoint::Attempt;
use harness_tools::Tool;
use harness_wire::chat::{ToolCall, Usage};

/// Where a task's events go: the run's records and the live display.
pub type Sink<'a> = dyn FnMut(&TaskEvent<'_>) + Send + 'a;

/// One step of a task, in the order it happened.
#[derive(Debug)]
pub enum TaskEvent<'a> {
    /// The task began, offering these tools.
    Started { task: &'a str, tools: &'a [Tool] },
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
    /// The reply was empty: the model is asked once more, with this note.
    AskedAgain { thinking_off: bool, note: &'a str },
    /// The answer says it used this offered tool, and no tool has run: the
    /// model is asked once more, with this note.
    CallClaimed { tool: &'a str, note: &'a str },
    /// The answer was no answer yet (it stopped at a colon, said it will
    /// call a tool, repeated the task): asked for once more with a note.
    AnswerUnfinished { what: &'a str, note: &'a str },
    /// The answer was cut at `max_tokens`: it is asked for once more, shorter.
    AnswerCut,
    /// The final answer did not match the output schema: it is asked for
    /// once more, the schema as `response_format`.
    AnswerRejected { errors: &'a [String] },
    /// A write call is about to be sent: recorded before it goes, so a
    /// crash between sending and recording its result is known
    /// (docs/resume-replay-eval.md, "Resume").
    WriteIntent { turn: u32, call: &'a ToolCall },
    /// One tool call was answered (run, or refused with the reason).
    ToolAnswered(&'a Answer),
    /// The task ended.
    Stopped(&'a Outcome),
}

/// One HTTP attempt of a model call, as the endpoint reported it, with
/// the turn it belonged to and what the context manager did before it.
#[derive(Debug, Clone, Copy)]
pub struct ModelAttempt<'a> {
    pub turn: u32,
    pub attempt: &'a Attempt<'a>,
    /// What the context manager did before the request (first attempt only).
    pub context: Option<&'a ContextNote>,
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
    /// The model the server says answered, as it wrote it.
    pub model: Option<&'a str>,
    /// The answer text (thinking and text-form calls removed).
    pub content: &'a str,
    pub thinking: Option<&'a str>,
    /// The calls were written as text and recovered.
    pub recovered: bool,
    pub calls: &'a [ToolCall],
    /// Calls past the per-reply ceiling, not read.
    pub unread_calls: u64,
    /// Calls written as plain JSON after the first, held back.
    pub held_back: usize,
}
