//! Reading a model reply (docs/tasks.md, "The loop"): separating the thinking
//! from the answer, recovering tool calls the model wrote as text instead of
//! `tool_calls`, and noticing output that was cut off. Pure functions over
//! strings.
//!
//! Thinking comes in two shapes: `reasoning_content` (llama-server's
//! reasoning extraction) and inline blocks in `content` — Gemma 4's
//! `<|channel>thought … <channel|>` and the common `<think> … </think>`.
//! Text-form calls come as Gemma 4's `<|tool_call>call:NAME{k:v}<tool_call|>`,
//! as `<tool_call>{"name":…,"arguments":…}</tool_call>`, or as plain JSON
//! naming an offered tool ([`json_calls`]).

use serde_json::Value;

mod json_calls;
mod text_calls;

pub use json_calls::{MAX_CANDIDATES, OfferedTool, recover_json_calls};
pub use text_calls::{MAX_ARGUMENT_DEPTH, recover_text_calls};

use crate::chat::{
    FinishReason, FunctionCall, MAX_ARGUMENT_BYTES, MAX_CALLS_PER_REPLY, Message, ResponseMessage,
    Role, ToolCall,
};
use harness_config::ReplayThinking;

/// A model reply, read.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The answer text: thinking and text-form tool calls removed, trimmed.
    pub content: String,
    /// All thinking found (for the logs only), joined.
    pub thinking: Option<String>,
    /// Tool calls, from `tool_calls` or recovered from the text.
    pub calls: Vec<ToolCall>,
    /// The calls were written as text and recovered.
    pub recovered: bool,
    /// `finish_reason == "length"`: the output was cut off at `max_tokens`.
    pub cut_off: bool,
    /// Calls past [`MAX_CALLS_PER_REPLY`]: not read, so not run
    /// (docs/untrusted-input.md).
    pub unread_calls: u64,
    /// Calls written as plain JSON after the first: held back, not run
    /// ([`read_reply`]).
    pub held_back: usize,
}

/// The longest block a reply may repeat and still be called looping.
pub(crate) const MAX_LOOP_PERIOD: usize = 400;

/// Characters of a reply examined for a loop: its end (a loop runs to the
/// cut), so the check stays linear and small whatever the reply's size.
const LOOP_WINDOW: usize = 200_000;

/// The block `text` repeats over and over, when one block of at most
/// [`MAX_LOOP_PERIOD`] characters, repeated, covers at least half of it (a
/// model caught in a loop until `max_tokens` cut it: docs/tasks.md, "The
/// loop"). Text longer than 200,000 characters is judged by its last 200,000.
pub fn repeated_block(text: &str) -> Option<String> {
    let chars: Vec<char> = {
        let all = text.chars().count();
        text.chars().skip(all.saturating_sub(LOOP_WINDOW)).collect()
    };
    let n = chars.len();
    // The shortest period whose longest stretch covers half the text: a
    // stretch where each character equals the one a period on.
    for period in 1..=MAX_LOOP_PERIOD.min(n / 2) {
        let (mut run, mut start) = (0usize, 0usize);
        for i in 0..n - period {
            if chars[i] != chars[i + period] {
                run = 0;
                continue;
            }
            if run == 0 {
                start = i;
            }
            run += 1;
            if (run + period) * 2 >= n && run >= period {
                return Some(chars[start..start + period].iter().collect());
            }
        }
    }
    None
}

/// What a reply is read against: the request it answers and what the
/// model read before it.
pub struct ReadAgainst<'a> {
    /// The tools the request offered: a call written as plain JSON counts
    /// only when it is a call of one.
    pub offered: &'a [OfferedTool],
    /// Whether a text-form call's text appears in an earlier tool result:
    /// such a call is the model quoting what it read (a page, a note), not
    /// calling, and stays text (docs/untrusted-input.md).
    pub quoted: &'a dyn Fn(&str) -> bool,
    /// Whether the reply's text is itself the answer (it matches the task's
    /// output schema): its JSON is then not read for calls.
    pub is_answer: &'a dyn Fn(&str) -> bool,
}

impl ReadAgainst<'_> {
    /// A request that offered no tools, after no tool result.
    pub const NOTHING: ReadAgainst<'static> = ReadAgainst {
        offered: &[],
        quoted: &|_| false,
        is_answer: &|_| false,
    };
}

/// Reads a reply. Recovered calls get ids `{id_prefix}-{n}`. Calls in
/// `tool_calls` win; else the tagged text forms; else plain JSON naming an
/// offered tool, unless the text is the answer. Of several calls written as
/// plain JSON only the first is kept, without the prose around it: a model
/// that writes its calls as prose writes its plan, and the calls after the
/// first guess what the first will return (a slug from a title, an id
/// "12345"); given the first's result, it writes the next with what it read.
pub fn read_reply(
    msg: &ResponseMessage,
    finish_reason: Option<&str>,
    id_prefix: &str,
    against: &ReadAgainst<'_>,
) -> Reply {
    let raw = msg.content.as_deref().unwrap_or("");
    let (without_thinking, mut thoughts) = strip_thinking(raw);
    if let Some(r) = msg
        .reasoning_content
        .as_deref()
        .filter(|r| !r.trim().is_empty())
    {
        thoughts.insert(0, r.trim().to_string());
    }
    let mut calls = msg.tool_calls.clone().unwrap_or_default();
    let mut unread_calls = msg.unread_calls;
    let mut recovered = false;
    let mut held_back = 0;
    let (mut content, mut found) = recover_text_calls(&without_thinking, against.quoted);
    if calls.is_empty() && found.is_empty() && !(against.is_answer)(without_thinking.trim()) {
        (content, found) = recover_json_calls(&without_thinking, against.offered, against.quoted);
        held_back = found.len().saturating_sub(1);
        found.truncate(1);
        if !found.is_empty() {
            // The prose around calls written as JSON is not replayed. It is
            // often the task said again ("To read the note … and attach
            // …"); replayed, a 1.5B model wrote it again after the result
            // instead of its next call (4 of 4 seeds), and without it wrote
            // the call (4 of 4). The response in the records keeps it.
            content = String::new();
        }
    }
    if calls.is_empty() && !found.is_empty() {
        recovered = true;
        unread_calls = found.len().saturating_sub(MAX_CALLS_PER_REPLY) as u64;
        calls = found
            .into_iter()
            .take(MAX_CALLS_PER_REPLY)
            .enumerate()
            .map(|(i, (name, args))| ToolCall {
                id: format!("{id_prefix}-{}", i + 1),
                kind: "function".into(),
                function: FunctionCall {
                    name,
                    arguments: args,
                },
            })
            .collect();
    }
    for call in &mut calls {
        if call.kind.is_empty() {
            call.kind = "function".into();
        }
    }
    let content = if recovered { content } else { without_thinking };
    Reply {
        content: content.trim().to_string(),
        thinking: (!thoughts.is_empty()).then(|| thoughts.join("\n\n")),
        calls,
        recovered,
        cut_off: finish_reason.and_then(FinishReason::parse) == Some(FinishReason::Length),
        unread_calls,
        held_back,
    }
}

/// Pairs of (open, close) markers of inline thinking.
const THINK_MARKERS: &[(&str, &str)] = &[("<|channel>", "<channel|>"), ("<think>", "</think>")];

/// Removes inline thinking blocks; returns the rest and the thoughts.
/// An unclosed block runs to the end of the text (thinking cut off by the
/// token limit); a closing marker with no opening ends thinking that the
/// template opened in the prompt, so everything before it is thought.
/// One forward pass per marker pair: linear in the text's length.
pub fn strip_thinking(text: &str) -> (String, Vec<String>) {
    let mut rest = text.to_string();
    let mut thoughts = Vec::new();
    for (open, close) in THINK_MARKERS {
        if rest.contains(open) || rest.contains(close) {
            rest = strip_pair(&rest, open, close, &mut thoughts);
        }
    }
    thoughts.retain(|t| !t.is_empty());
    (rest, thoughts)
}

fn strip_pair(text: &str, open: &str, close: &str, thoughts: &mut Vec<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut pos = 0;
    // A close marker before any open marker: the block began in the prompt.
    if let Some(c) = text.find(close)
        && text.find(open).is_none_or(|o| o > c)
    {
        thoughts.push(clean_thought(&text[..c], open));
        pos = c + close.len();
    }
    while let Some(o) = text[pos..].find(open).map(|o| pos + o) {
        out.push_str(&text[pos..o]);
        let after = o + open.len();
        match text[after..].find(close) {
            Some(c) => {
                thoughts.push(clean_thought(&text[after..after + c], open));
                pos = after + c + close.len();
            }
            None => {
                thoughts.push(clean_thought(&text[after..], open));
                pos = text.len();
            }
        }
    }
    out.push_str(&text[pos..]);
    out
}

fn clean_thought(t: &str, open: &str) -> String {
    let t = t.trim();
    // Gemma 4 names its channel: `<|channel>thought\n…`.
    let t = if open == "<|channel>" {
        t.strip_prefix("thought").unwrap_or(t)
    } else {
        t
    };
    t.trim().to_string()
}

/// The most characters of an assistant's text, or of its thinking, that are
/// replayed: a reply can be as long as a server likes, and every later
/// request (and its record) would carry it again.
pub(crate) const MAX_REPLAYED_CHARS: usize = 16_000;

/// The most bytes of call arguments one replayed reply carries, all its
/// calls together: a reply may hold 256 calls of up to 1 MiB each, and every
/// later request (and its record) would carry them again. A legitimate
/// reply stays under it (an 8K window holds about 24 KB).
pub(crate) const MAX_REPLAYED_ARGUMENT_BYTES: usize = 64 * 1024;

/// The characters of one string value kept when a call's arguments are
/// shortened to fit [`MAX_REPLAYED_ARGUMENT_BYTES`].
const SHORTENED_STRING_CHARS: usize = 1_000;

/// The assistant message as replayed: thinking dropped (or kept on tool-call
/// turns with `replay_thinking = "keep"`), text-form calls turned into real
/// `tool_calls`, text cut to [`MAX_REPLAYED_CHARS`], and each call's
/// arguments as sent while they fit what is left of
/// [`MAX_REPLAYED_ARGUMENT_BYTES`] (in call order), else with every long
/// string value shortened, else `{}` — as `{}` too when they are not a JSON
/// object (llama-server answers 500 to a replayed call whose arguments do
/// not parse, so the text is never cut).
pub fn replayed_assistant(reply: &Reply, replay: ReplayThinking) -> Message {
    let mut room = MAX_REPLAYED_ARGUMENT_BYTES;
    let tool_calls = reply
        .calls
        .iter()
        .map(|c| {
            let arguments = replayed_arguments(&c.function.arguments, room);
            room -= arguments.len().min(room);
            ToolCall {
                id: c.id.clone(),
                kind: "function".into(),
                function: FunctionCall {
                    name: c.function.name.clone(),
                    arguments,
                },
            }
        })
        .collect();
    let reasoning_content = match replay {
        ReplayThinking::Keep => reply.thinking.as_deref().map(shortened),
        ReplayThinking::Strip => None,
    };
    Message {
        role: Role::Assistant,
        content: shortened(&reply.content),
        reasoning_content,
        tool_calls,
        tool_call_id: None,
    }
}

/// `text` when it is a JSON object of at most `room` bytes; else the
/// object with its long strings shortened, when that fits; else `{}`.
fn replayed_arguments(text: &str, room: usize) -> String {
    if text.len() > MAX_ARGUMENT_BYTES || !is_object_text(text) {
        return "{}".into();
    }
    if text.len() <= room {
        return text.to_string();
    }
    let Ok(mut value) = serde_json::from_str::<Value>(text) else {
        return "{}".into();
    };
    shorten_strings(&mut value);
    let short = value.to_string();
    if short.len() <= room {
        short
    } else {
        "{}".into()
    }
}

/// Every string in `v` cut to [`SHORTENED_STRING_CHARS`], saying how much
/// was left out. `v` was parsed by serde_json, so it nests at most 128 deep.
fn shorten_strings(v: &mut Value) {
    match v {
        Value::String(s) => {
            let total = harness_base::text::chars(s);
            if total > SHORTENED_STRING_CHARS {
                let cut = harness_base::text::byte_at(s, SHORTENED_STRING_CHARS);
                *s = format!(
                    "{}[… {} more characters not repeated here]",
                    &s[..cut],
                    total - SHORTENED_STRING_CHARS
                );
            }
        }
        Value::Array(items) => items.iter_mut().for_each(shorten_strings),
        Value::Object(map) => map.values_mut().for_each(shorten_strings),
        _ => {}
    }
}

/// Whether `text` is one JSON object (checked without building it).
fn is_object_text(text: &str) -> bool {
    text.trim_start().starts_with('{')
        && serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
}

/// `text` cut to [`MAX_REPLAYED_CHARS`], saying how much was left out.
fn shortened(text: &str) -> String {
    let total = harness_base::text::chars(text);
    if total <= MAX_REPLAYED_CHARS {
        return text.to_string();
    }
    format!(
        "{}\n[{} more characters of this reply are not repeated here]",
        &text[..harness_base::text::byte_at(text, MAX_REPLAYED_CHARS)],
        total - MAX_REPLAYED_CHARS
    )
}

#[cfg(test)]
mod tests;
