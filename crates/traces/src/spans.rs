//! One task's trace, built from its events as they happen and closed as its
//! summary says: the root `invoke_agent <task>`, a `chat <model>` span per
//! model request and an `execute_tool <name>` span per tool call, named and
//! attributed as the OpenTelemetry GenAI conventions say. Every time comes from
//! the run's own clock, so the spans nest; every text from outside passes the
//! redactor and a cap.

use chrono::{DateTime, Utc};

use harness_agent::{Answer, ModelAttempt, Outcome, ReplyFacts, TaskEvent};
use harness_base::text::clip;
use harness_config::Redactor;
use harness_records::{Status, Summary};

use super::data::{Model, Span, SpanKind, Trace, Value};

/// Characters of one exported content attribute (a reply, a tool's
/// result): what a request replays of one reply's text.
pub const CONTENT_CAP: usize = 16_000;
/// Characters of a status message or an error attribute.
const MESSAGE_CAP: usize = 512;
/// Spans one task keeps; past it, calls are counted but not traced.
pub const MAX_SPANS: usize = 4096;
/// Content characters one trace carries, all attributes together; past
/// it, contents are left out (`agent_harness.content_dropped`).
pub const CONTENT_TOTAL: usize = 1024 * 1024;

/// The model request in flight.
#[derive(Debug)]
struct OpenChat {
    span_id: [u8; 8],
    turn: u32,
    start: DateTime<Utc>,
    attempts: u32,
    recorded: bool,
    /// The last failed attempt: its error type and message.
    failure: Option<(String, String)>,
}

/// One task's trace as it grows.
#[derive(Debug)]
pub struct TaskTrace {
    trace_id: [u8; 16],
    root_id: [u8; 8],
    task: String,
    run_id: String,
    started: DateTime<Utc>,
    model: Model,
    content: bool,
    redactor: Redactor,
    spans: Vec<Span>,
    chat: Option<OpenChat>,
    /// When the last reply was read: no tool span starts before it.
    last_reply: DateTime<Utc>,
    /// The task's text, kept only with `content = true`.
    input: Option<String>,
    /// Spans past [`MAX_SPANS`], not kept.
    dropped: u64,
    /// Content characters this trace may still carry ([`CONTENT_TOTAL`]).
    content_left: usize,
    /// Content attributes left out once the cap was reached.
    content_dropped: u64,
    /// Attributes of the root span set by whoever runs the task.
    labels: Vec<(&'static str, String)>,
}

impl TaskTrace {
    pub(super) fn new(
        task: &str,
        run_id: &str,
        started: DateTime<Utc>,
        model: Model,
        content: bool,
        redactor: Redactor,
    ) -> TaskTrace {
        TaskTrace {
            trace_id: fastrand::u128(1..).to_be_bytes(),
            root_id: span_id(),
            task: task.to_string(),
            run_id: run_id.to_string(),
            started,
            model,
            content,
            redactor,
            spans: Vec::new(),
            chat: None,
            last_reply: started,
            input: None,
            dropped: 0,
            content_left: CONTENT_TOTAL,
            content_dropped: 0,
            labels: Vec::new(),
        }
    }

    /// `labels` on the root span (an eval's id and variant).
    pub(super) fn labelled(mut self, labels: &[(&'static str, String)]) -> TaskTrace {
        self.labels = labels.to_vec();
        self
    }

    /// The trace's id, as collectors show it (32 hex digits).
    pub fn trace_id(&self) -> String {
        self.trace_id.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The task's text, exported on the root span with `content = true`.
    pub fn task_text(&mut self, text: &str) {
        if self.content {
            self.input = self.content_of(text);
        }
    }

    /// One event of the task, at `now` on the run's clock.
    pub fn on(&mut self, now: DateTime<Utc>, event: &TaskEvent<'_>) {
        match event {
            TaskEvent::RequestSent { turn, .. } => {
                self.close_chat(now, None);
                self.chat = Some(OpenChat {
                    span_id: span_id(),
                    turn: *turn,
                    start: now,
                    attempts: 0,
                    recorded: false,
                    failure: None,
                });
            }
            TaskEvent::Attempt(a) => self.attempt(a),
            TaskEvent::ContextExceeded { .. } => {
                if let Some(chat) = &mut self.chat {
                    let why = "the server said the prompt is over its context".to_string();
                    chat.failure = Some(("context_exceeded".into(), why));
                }
            }
            TaskEvent::ReplyRead(reply) => {
                self.close_chat(now, Some(reply));
                self.last_reply = now;
            }
            TaskEvent::ToolAnswered(answer) => self.tool(now, answer),
            TaskEvent::Stopped(outcome) => self.stopped(now, outcome),
            _ => {}
        }
    }

    /// The root span, closed as the task's summary says, and every span.
    pub fn end(mut self, now: DateTime<Utc>, summary: &Summary) -> Trace {
        self.close_chat(now, None);
        let succeeded = summary.status == Status::Succeeded;
        let attributes = self.root_attributes(summary, succeeded);
        let message = match &summary.error {
            Some(e) if !succeeded => self.text(e, MESSAGE_CAP),
            _ => String::new(),
        };
        let root = Span {
            span_id: self.root_id,
            parent: None,
            name: format!("invoke_agent {}", self.task),
            kind: SpanKind::Internal,
            start: self.started,
            end: now.max(self.started),
            attributes,
            ok: Some(succeeded),
            message,
        };
        let mut spans = Vec::with_capacity(self.spans.len() + 1);
        spans.push(root);
        spans.append(&mut self.spans);
        Trace {
            trace_id: self.trace_id,
            spans,
        }
    }

    fn root_attributes(
        &mut self,
        summary: &Summary,
        succeeded: bool,
    ) -> Vec<(&'static str, Value)> {
        let mut attributes = vec![
            ("gen_ai.operation.name", str("invoke_agent")),
            ("gen_ai.agent.name", str(&self.task)),
            ("gen_ai.provider.name", str(self.model.provider)),
            ("agent_harness.run_id", str(&self.run_id)),
            ("agent_harness.status", str(summary.status.as_str())),
            (
                "agent_harness.stop_reason",
                str(summary.stop_reason.as_str()),
            ),
            ("agent_harness.attempt", int(summary.attempt)),
            ("agent_harness.turns", int(summary.turns)),
            ("gen_ai.usage.input_tokens", int(summary.prompt_tokens)),
            ("gen_ai.usage.output_tokens", int(summary.completion_tokens)),
        ];
        if let Some(model) = &self.model.name {
            attributes.push(("gen_ai.request.model", str(model)));
        }
        if !succeeded {
            attributes.push(("error.type", str(summary.stop_reason.as_str())));
        }
        if self.dropped > 0 {
            attributes.push(("agent_harness.spans_dropped", int(self.dropped)));
        }
        if summary.dry_run {
            attributes.push(("agent_harness.dry_run", Value::Bool(true)));
        }
        if let Some(of) = &summary.replay_of {
            attributes.push(("agent_harness.replay_of", str(of)));
        }
        for (key, value) in &self.labels {
            attributes.push((key, str(value)));
        }
        if let Some(input) = self.input.take() {
            attributes.push(("gen_ai.input.messages", messages("user", &input, None, &[])));
        }
        if self.content
            && let Some(answer) = (summary.final_answer.as_deref()).and_then(|a| self.content_of(a))
        {
            attributes.push((
                "gen_ai.output.messages",
                messages("assistant", &answer, Some("stop"), &[]),
            ));
        }
        if self.content_dropped > 0 {
            attributes.push(("agent_harness.content_dropped", int(self.content_dropped)));
        }
        attributes
    }

    fn attempt(&mut self, a: &ModelAttempt<'_>) {
        let Some(chat) = &mut self.chat else {
            return;
        };
        chat.attempts = chat.attempts.saturating_add(1);
        chat.recorded |= a.attempt.recorded;
        if let Some(error) = &a.attempt.error {
            let kind = match a.attempt.http_status {
                Some(status) => status.to_string(),
                None => "transport".into(),
            };
            let message = clip(&self.redactor.redact_str(error), MESSAGE_CAP);
            chat.failure = Some((kind, message));
        }
    }

    /// The request in flight ends: answered by `reply`, or not.
    fn close_chat(&mut self, now: DateTime<Utc>, reply: Option<&ReplyFacts<'_>>) {
        let Some(chat) = self.chat.take() else {
            return;
        };
        let mut attributes = vec![
            ("gen_ai.operation.name", str("chat")),
            ("gen_ai.provider.name", str(self.model.provider)),
            ("agent_harness.turn", int(chat.turn)),
            ("agent_harness.attempts", int(chat.attempts)),
        ];
        if let Some(model) = &self.model.name {
            attributes.push(("gen_ai.request.model", str(model)));
        }
        if let Some((host, port)) = &self.model.server {
            attributes.push(("server.address", str(host)));
            attributes.push(("server.port", int(*port)));
        }
        if chat.recorded {
            attributes.push(("agent_harness.recorded", Value::Bool(true)));
        }
        let (ok, message) = match reply {
            Some(reply) => {
                self.reply_attributes(reply, &mut attributes);
                (None, String::new())
            }
            None => {
                let (kind, message) = chat
                    .failure
                    .unwrap_or_else(|| ("unanswered".into(), "the request got no reply".into()));
                attributes.push(("error.type", Value::Str(kind)));
                (Some(false), message)
            }
        };
        let name = match &self.model.name {
            Some(model) => format!("chat {model}"),
            None => "chat".into(),
        };
        self.push(Span {
            span_id: chat.span_id,
            parent: Some(self.root_id),
            name,
            kind: SpanKind::Client,
            start: chat.start,
            end: now.max(chat.start),
            attributes,
            ok,
            message,
        });
    }

    fn reply_attributes(&mut self, reply: &ReplyFacts<'_>, out: &mut Vec<(&'static str, Value)>) {
        out.push(("gen_ai.usage.input_tokens", int(reply.usage.prompt_tokens)));
        out.push((
            "gen_ai.usage.output_tokens",
            int(reply.usage.completion_tokens),
        ));
        let finish = reply.finish_reason.map(|f| self.text(f, 32));
        if let Some(finish) = &finish {
            out.push((
                "gen_ai.response.finish_reasons",
                Value::Strs(vec![finish.clone()]),
            ));
        }
        if let Some(model) = reply.model {
            out.push(("gen_ai.response.model", Value::Str(self.text(model, 128))));
        }
        if self.content {
            let text = self.content_of(reply.content).unwrap_or_default();
            let mut calls = Vec::with_capacity(reply.calls.len());
            for c in reply.calls {
                let arguments = self.content_of(&c.function.arguments).unwrap_or_default();
                calls.push(serde_json::json!({
                    "type": "tool_call",
                    "id": self.text(&c.id, MESSAGE_CAP),
                    "name": self.text(&c.function.name, MESSAGE_CAP),
                    "arguments": arguments,
                }));
            }
            out.push((
                "gen_ai.output.messages",
                messages("assistant", &text, finish.as_deref(), &calls),
            ));
        }
    }

    fn tool(&mut self, now: DateTime<Utc>, a: &Answer) {
        let took = chrono::Duration::milliseconds(i64::try_from(a.duration_ms).unwrap_or(i64::MAX));
        let start = now
            .checked_sub_signed(took)
            .unwrap_or(now)
            .max(self.last_reply)
            .min(now);
        let mut attributes = vec![
            ("gen_ai.operation.name", str("execute_tool")),
            (
                "gen_ai.tool.name",
                Value::Str(self.text(&a.name, MESSAGE_CAP)),
            ),
            (
                "gen_ai.tool.call.id",
                Value::Str(self.text(&a.call_id, MESSAGE_CAP)),
            ),
            ("gen_ai.tool.type", str("function")),
            ("agent_harness.turn", int(a.turn)),
            ("agent_harness.tool.executed", Value::Bool(a.executed)),
        ];
        if a.recorded {
            attributes.push(("agent_harness.recorded", Value::Bool(true)));
        }
        if self.content {
            for (key, text) in [
                ("gen_ai.tool.call.arguments", &a.arguments),
                ("gen_ai.tool.call.result", &a.text),
            ] {
                if let Some(text) = self.content_of(text) {
                    attributes.push((key, Value::Str(text)));
                }
            }
        }
        let (ok, message) = if a.is_error {
            let kind = if a.executed { "tool_error" } else { "not_run" };
            attributes.push(("error.type", str(kind)));
            // The result is content: without `content = true`, only what kind.
            let message = match self.content {
                true => self.text(&a.text, MESSAGE_CAP),
                false if a.executed => "the tool answered an error".into(),
                false => "the call was not run".into(),
            };
            (Some(false), message)
        } else {
            (None, String::new())
        };
        self.push(Span {
            span_id: span_id(),
            parent: Some(self.root_id),
            name: format!("execute_tool {}", self.text(&a.name, MESSAGE_CAP)),
            kind: SpanKind::Internal,
            start,
            end: now,
            attributes,
            ok,
            message,
        });
    }

    /// The loop ended: a request still in flight failed with the task.
    fn stopped(&mut self, now: DateTime<Utc>, outcome: &Outcome) {
        if let Some(chat) = &mut self.chat
            && chat.failure.is_none()
        {
            let message = outcome.error.as_deref().unwrap_or("the task stopped");
            let message = clip(&self.redactor.redact_str(message), MESSAGE_CAP);
            chat.failure = Some((outcome.stop.as_str().to_string(), message));
        }
        self.close_chat(now, None);
    }

    fn push(&mut self, span: Span) {
        if self.spans.len() < MAX_SPANS {
            self.spans.push(span);
        } else {
            self.dropped = self.dropped.saturating_add(1);
        }
    }

    /// A content attribute's text, redacted and capped, while the trace's
    /// content cap lasts.
    fn content_of(&mut self, text: &str) -> Option<String> {
        if self.content_left == 0 && !text.is_empty() {
            // Spent: not worth redacting what cannot go.
            self.content_dropped = self.content_dropped.saturating_add(1);
            return None;
        }
        let text = self.text(text, CONTENT_CAP);
        let chars = text.chars().count();
        if chars > self.content_left {
            self.content_dropped = self.content_dropped.saturating_add(1);
            return None;
        }
        self.content_left -= chars;
        Some(text)
    }

    /// Text from outside, redacted and capped.
    fn text(&self, text: &str, cap: usize) -> String {
        clip(&self.redactor.redact_str(text), cap)
    }
}

/// `gen_ai.input.messages` / `gen_ai.output.messages`: one message of
/// the conventions' JSON form, with its text and its tool calls.
fn messages(role: &str, text: &str, finish: Option<&str>, calls: &[serde_json::Value]) -> Value {
    let mut parts: Vec<serde_json::Value> = Vec::with_capacity(calls.len() + 1);
    if !text.is_empty() {
        parts.push(serde_json::json!({"type": "text", "content": text}));
    }
    parts.extend(calls.iter().cloned());
    let mut message = serde_json::json!({"role": role, "parts": parts});
    if let Some(finish) = finish {
        message["finish_reason"] = serde_json::Value::from(finish);
    }
    Value::Str(serde_json::Value::Array(vec![message]).to_string())
}

fn span_id() -> [u8; 8] {
    fastrand::u64(1..).to_be_bytes()
}

fn str(s: &str) -> Value {
    Value::Str(s.to_string())
}

fn int(n: impl TryInto<i64>) -> Value {
    Value::Int(n.try_into().unwrap_or(i64::MAX))
}
