//! What a trace is made of: spans with their kind, attributes and
//! status, and the endpoint facts every span names.

use chrono::{DateTime, Utc};

/// A span's kind, as OTLP numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
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
    pub kind: SpanKind,
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
