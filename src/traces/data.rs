//! What a trace is made of: spans with their kind, attributes and
//! status, the endpoint facts every span names, and how a task ended.

use chrono::{DateTime, Utc};

/// A span's kind, as OTLP numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Internal,
    Client,
}

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    Int(i64),
    Bool(bool),
    Strs(Vec<String>),
}

/// One finished span.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub span_id: [u8; 8],
    pub parent: Option<[u8; 8]>,
    pub name: String,
    pub kind: Kind,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub attributes: Vec<(&'static str, Value)>,
    /// `Some(true)`: status OK; `Some(false)`: ERROR with `message`;
    /// `None`: unset (the conventions' choice for a span that did not fail).
    pub ok: Option<bool>,
    pub message: String,
}

/// A task's spans, ready to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub trace_id: [u8; 16],
    pub spans: Vec<Span>,
}

/// What the trace needs of the endpoint, once per run.
#[derive(Debug, Clone)]
pub struct Model {
    /// `gen_ai.provider.name`: `runpod`, or `llama.cpp` for the openai kind.
    pub provider: &'static str,
    /// `gen_ai.request.model`, when the config names one.
    pub name: Option<String>,
    /// `server.address` and `server.port`.
    pub server: Option<(String, u16)>,
}

/// How the task ended, as its summary says.
#[derive(Debug, Clone, Copy)]
pub struct Ending<'a> {
    pub succeeded: bool,
    pub status: &'a str,
    pub stop_reason: &'a str,
    pub error: Option<&'a str>,
    pub attempt: u32,
    pub turns: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub final_answer: Option<&'a str>,
    pub dry_run: bool,
    /// `<task>/<run_id>` a replay replays.
    pub replay_of: Option<&'a str>,
}
