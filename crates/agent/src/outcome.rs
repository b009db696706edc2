//! How a task ends: the stop reasons (docs/tasks.md, "Task files"), the
//! counters of a run, a final answer or the stop without one, and the outcome
//! the loop hands back. These belong to the loop; the records serialize them.

use serde::{Deserialize, Serialize};

use harness_wire::chat::Usage;

/// Why a task stopped. Its name (`max_turns`) is one rule for serde and
/// for [`StopReason::as_str`]: both derived, snake_case.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr, strum::EnumIter,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum StopReason {
    FinalAnswer,
    MaxTurns,
    MaxWallSecs,
    MaxTotalTokens,
    LoopDetected,
    ContextExhausted,
    EndpointError,
    InvalidTask,
    EmptyResponse,
    Interrupted,
    /// The harness itself failed inside the task (a panic), or the process
    /// died on this task in every allowed attempt.
    InternalError,
    /// A final answer, but an `[expect]` check failed.
    ExpectationFailed,
    /// The final answer did not match the output schema, even when asked again.
    InvalidAnswer,
    /// The setup is wrong, not the task (a refused key, a wrong route, a
    /// refused notes token): the run stops and the task stays in the inbox.
    SetupFault,
    /// The answer was cut at `max_tokens`, even when asked again for a shorter one.
    AnswerTruncated,
    /// An MCP server the task may use did not start, or died
    /// (docs/tools.md, "Tools from MCP servers"): retryable, never run with its
    /// tools missing.
    ToolServerUnavailable,
    /// A reply cut at `max_tokens` while it repeated one block (docs/tasks.md,
    /// "The loop").
    Repetition,
    /// A `[budget]` limit was reached before a model request
    /// (docs/budget-and-traces.md, "Budget"):
    /// the task stays in the inbox and goes on from its records later.
    BudgetExhausted,
}

impl StopReason {
    /// The name the records give it.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Counters of one task run, summed as it goes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    pub turns: u32,
    pub tool_calls: u32,
    pub tool_errors: u32,
    pub usage: Usage,
    pub runpod_exec_ms: Option<u64>,
    pub runpod_delay_ms: Option<u64>,
    /// Calls answered "not run" because a call limit was reached.
    pub calls_over_budget: u32,
}

/// How a task run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub stop: StopReason,
    pub final_answer: Option<String>,
    pub error: Option<String>,
    /// The failure may pass if tried again in a later run (endpoint unavailable, interrupted).
    pub retryable: bool,
    pub stats: Stats,
    /// The final answer as JSON, when it was checked against an output schema.
    pub result: Option<serde_json::Value>,
}

impl Outcome {
    /// An outcome reached before the loop ran (an invalid task, a crash).
    pub fn failed(stop: StopReason, error: String) -> Outcome {
        Outcome {
            stop,
            final_answer: None,
            error: Some(error),
            retryable: false,
            stats: Stats::default(),
            result: None,
        }
    }

    /// How the loop ended, with the run's counters.
    pub(super) fn ended(ending: Result<FinalAnswer, Stop>, stats: Stats) -> Outcome {
        match ending {
            Ok(FinalAnswer { answer, result }) => Outcome {
                stop: StopReason::FinalAnswer,
                final_answer: Some(answer),
                error: None,
                retryable: false,
                stats,
                result,
            },
            Err(Stop {
                reason,
                error,
                retryable,
            }) => Outcome {
                stop: reason,
                final_answer: None,
                error: Some(error),
                retryable,
                stats,
                result: None,
            },
        }
    }
}

/// A final answer: how the loop ends well.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FinalAnswer {
    pub answer: String,
    /// The answer's JSON, when an output schema checked it.
    pub result: Option<serde_json::Value>,
}

/// Why the loop stopped without an answer: the error every step returns
/// with `?`.
#[derive(Debug, Clone, PartialEq)]
pub struct Stop {
    pub reason: StopReason,
    pub error: String,
    pub retryable: bool,
}

impl Stop {
    /// A final stop with what went wrong.
    pub fn failed(reason: StopReason, error: impl Into<String>) -> Stop {
        Stop {
            reason,
            error: error.into(),
            retryable: false,
        }
    }

    /// The setup is wrong (docs/operating.md, "Setup faults"): the task is left
    /// as it was.
    pub fn setup_fault(diagnosis: impl Into<String>) -> Stop {
        Stop::failed(StopReason::SetupFault, diagnosis).retryable()
    }

    pub fn retryable(mut self) -> Stop {
        self.retryable = true;
        self
    }

    /// Adds a note to the error.
    pub(crate) fn with_note(mut self, note: String) -> Stop {
        self.error = format!("{}; {note}", self.error);
        self
    }
}
