//! The bounded tool-calling loop (docs/tasks.md, "The loop").
//!
//! [`run_task`] is the contract: messages start as `[system, user(task)]`;
//! each turn sends them with the task's tools, reads the reply, and either
//! finishes (a final answer) or answers every tool call and goes round
//! again — until a bound (`max_turns`, `max_wall_secs`, `max_total_tokens`,
//! the context window, the repeat guard) stops it. Thinking is kept out of
//! replayed turns but reported in the events.
//!
//! Every step reports what it did as a [`TaskEvent`] to one sink; the loop
//! writes no file and draws nothing. `run` owns the loop and its state;
//! each step beside it is a type or a function of its own: `model` (one
//! model call), `answer` (a reply without calls judged), `aids` (what
//! `[prompt]` adds for small models), `calls` (one
//! turn's calls), `context` (the conversation). A step returns `Err(Stop)`
//! when the task stops without an answer; the final answer is the loop's
//! `Ok`, so the loop reads as the list of docs/tasks.md, "The loop".

mod aids;
mod answer;
mod calls;
pub mod context;
pub mod deps;
pub mod events;
pub mod expect;
mod model;
mod outcome;
mod run;
mod spec;

pub use calls::Answer;
pub use context::{ContextNote, Counted, Elided};
pub use events::{ModelAttempt, ReplyFacts, Sink, TaskEvent};
pub use outcome::{Outcome, Stats, Stop, StopReason};
pub use run::run_task;
pub use spec::{BUILT_IN_SYSTEM_PROMPT, TaskInput, TaskSpec};
