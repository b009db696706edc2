//! The OpenAI chat-completions wire format, typed: the messages we send, the
//! response we read, and [`build_request`], the one place a request body is
//! assembled (both endpoint kinds send the same body; RunPod only wraps it).
//!
//! Request hygiene for llama-server lives in these types: absent fields are
//! omitted rather than sent as `null` (a `null` `reasoning_content` or
//! `tool_call_id` is a server error), and replayed `arguments` are always
//! valid JSON strings.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use harness_base::lenient::{self, FirstOf};
use harness_config::ModelConfig;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// One message of the conversation as sent to the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    /// Always present (llama-server wants `content` on every non-assistant
    /// message, and `""` is accepted on assistant tool-call turns).
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    pub fn system(text: impl Into<String>) -> Self {
        Message {
            role: Role::System,
            content: text.into(),
            reasoning_content: None,
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
    pub fn user(text: impl Into<String>) -> Self {
        Message {
            role: Role::User,
            ..Message::system(text)
        }
    }
    pub fn tool(call_id: impl Into<String>, text: impl Into<String>) -> Self {
        Message {
            role: Role::Tool,
            tool_call_id: Some(call_id.into()),
            ..Message::system(text)
        }
    }
}

/// A tool call as replayed in an assistant message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionCall,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    /// A JSON object as a string. Servers may send an object; it is
    /// normalised to its string form on the way in.
    #[serde(deserialize_with = "arguments_as_string")]
    pub arguments: String,
}

/// The arguments as text: a string as is, an object (some servers send one)
/// as its JSON text — taken verbatim, never parsed into a tree.
fn arguments_as_string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let raw = Box::<serde_json::value::RawValue>::deserialize(d)?;
    let text = raw.get();
    Ok(match text.as_bytes().first() {
        Some(b'"') => serde_json::from_str(text).map_err(serde::de::Error::custom)?,
        Some(b'n') => String::new(),
        _ => text.to_owned(),
    })
}

/// The longest arguments a call may have: longer ones are never parsed
/// into a tree, run or replayed (an attachment's content is at most 256 KiB).
pub const MAX_ARGUMENT_BYTES: usize = 1024 * 1024;

/// A call's arguments with key order and spacing aside, for telling the
/// same call asked again; arguments too long to run, or not JSON, as
/// written (trimmed).
pub fn canonical_arguments(text: &str) -> String {
    (text.len() <= MAX_ARGUMENT_BYTES)
        .then(|| serde_json::from_str::<Value>(text).ok())
        .flatten()
        .map_or_else(|| text.trim().to_string(), |v| v.to_string())
}

/// The most tool calls of one reply that are read; the rest are counted
/// (docs/untrusted-input.md: they are over any call limit) and parsed past.
pub const MAX_CALLS_PER_REPLY: usize = 256;

/// The parts of a chat-completions response the loop uses.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ChatResponse {
    /// The first choice only: the loop never asks for more.
    #[serde(default, deserialize_with = "first_choice")]
    pub choices: Vec<Choice>,
    #[serde(default)]
    pub usage: Option<Usage>,
    #[serde(default)]
    pub model: Option<String>,
}

/// Why the server stopped generating (llama-server sends these three).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FinishReason {
    /// End of turn, no call.
    Stop,
    /// `max_tokens` (or the context) ran out: the output is cut off.
    Length,
    /// End of turn with tool calls.
    ToolCalls,
}

impl FinishReason {
    pub(crate) fn parse(s: &str) -> Option<FinishReason> {
        match s {
            "stop" => Some(FinishReason::Stop),
            "length" => Some(FinishReason::Length),
            "tool_calls" => Some(FinishReason::ToolCalls),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Choice {
    #[serde(default)]
    pub message: ResponseMessage,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

fn first_choice<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Choice>, D::Error> {
    Ok(lenient::first(d, 1)?.items)
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(from = "WireMessage")]
pub struct ResponseMessage {
    pub content: Option<String>,
    pub reasoning_content: Option<String>,
    /// The first [`MAX_CALLS_PER_REPLY`] calls.
    pub tool_calls: Option<Vec<ToolCall>>,
    /// Calls past [`MAX_CALLS_PER_REPLY`]: parsed past, not kept.
    pub unread_calls: u64,
}

/// The assistant message as it comes over the wire.
#[derive(Deserialize)]
struct WireMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default, deserialize_with = "at_most_calls")]
    tool_calls: Option<FirstOf<ToolCall>>,
}

fn at_most_calls<'de, D: Deserializer<'de>>(d: D) -> Result<Option<FirstOf<ToolCall>>, D::Error> {
    struct Visit;
    impl<'de> serde::de::Visitor<'de> for Visit {
        type Value = Option<FirstOf<ToolCall>>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list of tool calls")
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            lenient::first(d, MAX_CALLS_PER_REPLY).map(Some)
        }
    }
    d.deserialize_option(Visit)
}

impl From<WireMessage> for ResponseMessage {
    fn from(w: WireMessage) -> Self {
        let (tool_calls, unread_calls) = match w.tool_calls {
            Some(list) => (Some(list.items), list.beyond),
            None => (None, 0),
        };
        ResponseMessage {
            content: w.content,
            reasoning_content: w.reasoning_content,
            tool_calls,
            unread_calls,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct Usage {
    #[serde(default, deserialize_with = "lenient::count_or_zero")]
    pub prompt_tokens: u64,
    #[serde(default, deserialize_with = "lenient::count_or_zero")]
    pub completion_tokens: u64,
    #[serde(default, deserialize_with = "lenient::count_or_zero")]
    pub total_tokens: u64,
}

impl Usage {
    /// `total_tokens` when the server gives it, else the sum of the parts
    /// (saturating: a server may report any number).
    pub fn total(&self) -> u64 {
        self.total_tokens
            .max(self.prompt_tokens.saturating_add(self.completion_tokens))
    }

    /// Adds another reply's usage, saturating.
    pub fn add(&mut self, other: &Usage) {
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.completion_tokens = self
            .completion_tokens
            .saturating_add(other.completion_tokens);
        self.total_tokens = self.total_tokens.saturating_add(other.total());
    }
}

/// Sampling and template settings of one task: `[model]` with the task's
/// frontmatter overrides applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampling {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u32>,
    pub max_tokens: u32,
    pub chat_template_kwargs: Map<String, Value>,
    pub extra: Map<String, Value>,
    /// Sent as `"model"` when set.
    pub model: Option<String>,
}

impl Sampling {
    pub fn from_config(model: &ModelConfig, model_name: Option<String>) -> Self {
        Sampling {
            temperature: model.temperature,
            top_p: model.top_p,
            top_k: model.top_k,
            max_tokens: model.max_tokens,
            chat_template_kwargs: model.chat_template_kwargs.clone(),
            extra: model.extra.clone(),
            model: model_name,
        }
    }
}

/// Per-request adjustments the loop makes on a retry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tweaks {
    /// Replaces `seed` (after a server error on the model's output).
    pub seed: Option<u64>,
    /// Turns thinking off (after thinking used up `max_tokens`).
    pub thinking_off: bool,
}

/// Builds the request body: `[model.extra]` first, then the fields the
/// harness owns, so `extra` can add to a request but never replace its
/// messages, tools or sampling keys.
pub fn build_request(
    messages: &[Message],
    tools: &[Value],
    sampling: &Sampling,
    tweaks: Tweaks,
    response_format: Option<&Value>,
) -> Value {
    let mut body = sampling.extra.clone();
    if let Some(model) = &sampling.model {
        body.insert("model".into(), Value::from(model.as_str()));
    }
    body.insert(
        "messages".into(),
        serde_json::to_value(messages).unwrap_or(Value::Null),
    );
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools.to_vec()));
    }
    if let Some(t) = sampling.temperature {
        body.insert("temperature".into(), Value::from(t));
    }
    if let Some(p) = sampling.top_p {
        body.insert("top_p".into(), Value::from(p));
    }
    if let Some(k) = sampling.top_k {
        body.insert("top_k".into(), Value::from(k));
    }
    body.insert("max_tokens".into(), Value::from(sampling.max_tokens));
    let mut kwargs = sampling.chat_template_kwargs.clone();
    if tweaks.thinking_off {
        kwargs.insert("enable_thinking".into(), Value::Bool(false));
    }
    if !kwargs.is_empty() {
        body.insert("chat_template_kwargs".into(), Value::Object(kwargs));
    }
    if let Some(seed) = tweaks.seed {
        body.insert("seed".into(), Value::from(seed));
    }
    if let Some(format) = response_format {
        body.insert("response_format".into(), format.clone());
    }
    body.insert("stream".into(), Value::Bool(false));
    Value::Object(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sampling() -> Sampling {
        Sampling {
            temperature: Some(1.0),
            top_p: Some(0.95),
            top_k: Some(64),
            max_tokens: 512,
            chat_template_kwargs: json!({"enable_thinking": true})
                .as_object()
                .cloned()
                .unwrap(),
            extra: json!({"min_p": 0.05, "seed": 7})
                .as_object()
                .cloned()
                .unwrap(),
            model: None,
        }
    }

    #[test]
    fn absent_fields_are_omitted_not_null() {
        let v = serde_json::to_value(Message {
            role: Role::Assistant,
            content: String::new(),
            ..Message::user("")
        })
        .unwrap();
        assert_eq!(v, json!({"role": "assistant", "content": ""}));
        let v = serde_json::to_value(Message::tool("c1", "ok")).unwrap();
        assert_eq!(
            v,
            json!({"role": "tool", "content": "ok", "tool_call_id": "c1"})
        );
    }

    #[test]
    fn the_request_carries_sampling_kwargs_and_extra() {
        let body = build_request(
            &[Message::user("hi")],
            &[json!({"type": "function"})],
            &sampling(),
            Tweaks::default(),
            None,
        );
        assert_eq!(
            body,
            json!({
                "messages": [{"role": "user", "content": "hi"}],
                "tools": [{"type": "function"}],
                "temperature": 1.0, "top_p": 0.95, "top_k": 64, "max_tokens": 512,
                "chat_template_kwargs": {"enable_thinking": true},
                "min_p": 0.05, "seed": 7, "stream": false
            })
        );
    }

    #[test]
    fn tweaks_change_the_seed_and_turn_thinking_off() {
        let body = build_request(
            &[],
            &[],
            &sampling(),
            Tweaks {
                seed: Some(99),
                thinking_off: true,
            },
            Some(&json!({"type": "json_object"})),
        );
        assert_eq!(body["response_format"], json!({"type": "json_object"}));
        assert_eq!(body["seed"], json!(99));
        assert_eq!(
            body["chat_template_kwargs"]["enable_thinking"],
            json!(false)
        );
        assert!(body.get("tools").is_none());
    }

    #[test]
    fn absurd_usage_counts_saturate_instead_of_wrapping_or_failing() {
        let r: ChatResponse = serde_json::from_str(
            &json!({
                "choices": [],
                "usage": {"prompt_tokens": u64::MAX, "completion_tokens": 1e300, "total_tokens": -3}
            })
            .to_string(),
        )
        .unwrap();
        let u = r.usage.unwrap();
        assert_eq!(
            (u.prompt_tokens, u.completion_tokens, u.total_tokens),
            (u64::MAX, u64::MAX, 0)
        );
        assert_eq!(u.total(), u64::MAX);
        let mut sum = Usage::default();
        sum.add(&u);
        sum.add(&u);
        assert_eq!(sum.total(), u64::MAX);
    }

    #[test]
    fn a_reply_keeps_its_first_choice_and_at_most_256_calls() {
        let call =
            r#"{"id": "c", "type": "function", "function": {"name": "x", "arguments": "{}"}}"#;
        let calls = vec![call; MAX_CALLS_PER_REPLY + 1000].join(",");
        let body = format!(
            r#"{{"choices": [{{"message": {{"content": "a", "tool_calls": [{calls}]}}}}, {{"message": {{"content": "b"}}}}]}}"#
        );
        let r: ChatResponse = serde_json::from_str(&body).unwrap();
        assert_eq!(r.choices.len(), 1);
        let m = &r.choices[0].message;
        assert_eq!(m.content.as_deref(), Some("a"));
        assert_eq!(m.tool_calls.as_ref().unwrap().len(), MAX_CALLS_PER_REPLY);
        assert_eq!(m.unread_calls, 1000);
        let none: ChatResponse = serde_json::from_str(
            r#"{"choices": [{"message": {"content": "x", "tool_calls": null}}]}"#,
        )
        .unwrap();
        assert_eq!(none.choices[0].message.tool_calls, None);
    }

    #[test]
    fn object_arguments_are_read_as_a_json_string() {
        let r: ChatResponse = serde_json::from_str(
            r#"{"choices": [{"message": {"content": "", "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "x", "arguments": {"k": [1, "two"]}}},
                {"id": "b", "type": "function", "function": {"name": "y", "arguments": "{\"q\": \"\\u00e9\"}"}},
                {"id": "c", "type": "function", "function": {"name": "z", "arguments": null}}
            ]}, "finish_reason": "tool_calls"}]}"#,
        )
        .unwrap();
        let calls = r.choices[0].message.tool_calls.as_ref().unwrap();
        assert_eq!(calls[0].function.arguments, r#"{"k": [1, "two"]}"#);
        assert_eq!(calls[1].function.arguments, r#"{"q": "\u00e9"}"#);
        assert_eq!(calls[2].function.arguments, "");
    }
}
