//! Tool calls a model wrote as plain JSON in its text (docs/tasks.md, "The
//! loop": calls written as text): `{"name": N, "arguments": {…}}` (or
//! `"parameters"`, the arguments an object or a JSON string of one), an
//! array of such objects, or one object a line — bare, or inside a ```
//! fence with any language tag or none, with prose around it. Servers parse
//! calls per model family; when the family's parser is not the one the
//! model followed, the call arrives as text, and this is where it is saved.
//!
//! Only an object naming a tool the request offered is a call: JSON about
//! anything else (an answer, an example) stays text. One more form is a
//! call, the one a small model writes when it describes the call it means
//! ("call the `noteworx_read_note` function with these arguments:" and the
//! arguments as a JSON object): an object that is not a call itself, when
//! the prose before it (since the last JSON) names exactly one offered tool
//! and the object's keys are that tool's parameters, its required ones
//! among them.
//!
//! The JSON a small model writes is not always JSON: a `// comment` after
//! a value, a comma before a closer, a line break inside a string. A span
//! that does not parse is mended once ([`parse_lenient`]) and tried again.
//!
//! Linear in the reply whatever it holds: one forward scan finds the
//! balanced JSON spans that open like a call (`{"` or `[{`); a span that
//! breaks (a closer that does not match, nesting past the limit, more than
//! [`MAX_ARGUMENT_BYTES`]) is given up where it broke and the scan goes on
//! from there, and one left open at the end of the text ends the scan, so
//! no byte is scanned twice. At most [`MAX_CANDIDATES`] spans are tried, and
//! each closed one is parsed once.

use std::ops::Range;

use serde_json::Value;

use super::text_calls::{MAX_ARGUMENT_DEPTH, call_parts, depth};
use crate::chat::MAX_ARGUMENT_BYTES;

/// The most candidate spans one reply is searched for calls.
pub const MAX_CANDIDATES: usize = 256;

/// A tool the request offered, as calls written as text are matched
/// against it: its name, and its parameters (the required ones named).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OfferedTool {
    pub name: String,
    pub params: Vec<String>,
    pub required: Vec<String>,
}

impl OfferedTool {
    /// Read from a tool's OpenAI-format definition (`{"type": "function",
    /// "function": {"name", "parameters": {"properties", "required"}}}`).
    pub fn of(definition: &Value) -> OfferedTool {
        let function = &definition["function"];
        let names = |v: &Value| -> Vec<String> {
            v.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|n| n.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        OfferedTool {
            name: function["name"].as_str().unwrap_or_default().to_string(),
            params: function["parameters"]["properties"]
                .as_object()
                .map(|p| p.keys().cloned().collect())
                .unwrap_or_default(),
            required: names(&function["parameters"]["required"]),
        }
    }
}

/// Finds calls written as JSON. Returns the text with them (and the fences
/// they leave empty) removed, and the `(name, arguments)` pairs in order.
/// A span whose text is `quoted` (found in a recent tool result) stays text.
pub fn recover_json_calls(
    text: &str,
    offered: &[OfferedTool],
    quoted: &dyn Fn(&str) -> bool,
) -> (String, Vec<(String, String)>) {
    let mut calls = Vec::new();
    let mut taken: Vec<Range<usize>> = Vec::new();
    let mut prose_from = 0;
    for span in spans(text) {
        let prose = &text[prose_from..span.start];
        prose_from = span.end;
        let raw = &text[span.clone()];
        let Some((value, mended)) = parse_lenient(raw) else {
            continue;
        };
        let Some(found) =
            calls_in(&value, offered).or_else(|| described_call(&value, prose, offered))
        else {
            continue;
        };
        // A quote stays a quote when mending is what set it apart.
        if quoted(raw) || mended.as_deref().is_some_and(quoted) {
            continue;
        }
        calls.extend(found);
        taken.push(span);
    }
    if calls.is_empty() {
        return (text.to_string(), calls);
    }
    let mut rest = String::with_capacity(text.len());
    let mut cursor = 0;
    for span in taken {
        rest.push_str(&text[cursor..span.start]);
        cursor = span.end;
    }
    rest.push_str(&text[cursor..]);
    (without_empty_fences(&rest), calls)
}

/// The span as JSON; failing that, as the JSON a model meant: `//`
/// comments ("// Replace with the actual id") and commas before a closer
/// dropped, line breaks and tabs inside strings escaped — with the mended
/// text. At most two parses.
fn parse_lenient(span: &str) -> Option<(Value, Option<String>)> {
    if let Ok(value) = serde_json::from_str(span) {
        return Some((value, None));
    }
    let mended = mended(span);
    let value = serde_json::from_str(&mended).ok()?;
    Some((value, Some(mended)))
}

/// `span` with what [`parse_lenient`] forgives mended, in one pass.
fn mended(span: &str) -> String {
    let mut out = String::with_capacity(span.len());
    let mut chars = span.chars().peekable();
    let (mut in_string, mut escaped) = (false, false);
    while let Some(c) = chars.next() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                (false, '\n') => {
                    out.push_str("\\n");
                    continue;
                }
                (false, '\r') => {
                    out.push_str("\\r");
                    continue;
                }
                (false, '\t') => {
                    out.push_str("\\t");
                    continue;
                }
                _ => {}
            }
            out.push(c);
            continue;
        }
        match c {
            '"' => in_string = true,
            '/' if chars.peek() == Some(&'/') => {
                while chars.next_if(|&c| c != '\n').is_some() {}
                continue;
            }
            ',' if matches!(next_token(chars.clone()), Some('}' | ']')) => continue,
            _ => {}
        }
        out.push(c);
    }
    out
}

/// The first character after blanks and `//` comments.
fn next_token(mut rest: impl Iterator<Item = char> + Clone) -> Option<char> {
    loop {
        let c = rest.find(|c| !c.is_whitespace())?;
        let mut after = rest.clone();
        if c == '/' && after.next() == Some('/') {
            rest = after;
            rest.find(|&c| c == '\n')?;
            continue;
        }
        return Some(c);
    }
}

/// The calls one span holds: an object naming an offered tool, or an array
/// of nothing but such objects. `None` when it is anything else.
fn calls_in(value: &Value, offered: &[OfferedTool]) -> Option<Vec<(String, String)>> {
    match value {
        Value::Object(_) => Some(vec![call_of(value, offered)?]),
        Value::Array(items) if !items.is_empty() => {
            items.iter().map(|item| call_of(item, offered)).collect()
        }
        _ => None,
    }
}

/// The arguments of a call described in prose: `value` is an object of
/// only `tool`'s parameters, its required ones among them, where `prose`
/// names exactly one offered tool, `tool`.
fn described_call(
    value: &Value,
    prose: &str,
    offered: &[OfferedTool],
) -> Option<Vec<(String, String)>> {
    let args = value.as_object().filter(|a| !a.is_empty())?;
    let mut named = offered.iter().filter(|t| names_word(prose, &t.name));
    let tool = named.next()?;
    if named.next().is_some()
        || !args.keys().all(|k| tool.params.contains(k))
        || !tool.required.iter().all(|r| args.contains_key(r))
        || depth(value) > MAX_ARGUMENT_DEPTH
    {
        return None;
    }
    Some(vec![(tool.name.clone(), value.to_string())])
}

/// Whether `word` stands in `text` as a whole word (not inside a longer
/// name of letters, digits, `_` or `-`).
fn names_word(text: &str, word: &str) -> bool {
    let part = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '-');
    !word.is_empty()
        && text.match_indices(word).any(|(i, _)| {
            !part(text[..i].chars().next_back()) && !part(text[i + word.len()..].chars().next())
        })
}

/// A call (`text_calls::call_parts`) of an offered tool.
fn call_of(v: &Value, offered: &[OfferedTool]) -> Option<(String, String)> {
    // A tool's definition echoed back (its schema as "parameters") is no call.
    if v.get("description").is_some() || v.get("function").is_some() {
        return None;
    }
    let (name, args) = call_parts(v)?;
    offered
        .iter()
        .any(|t| t.name == name)
        .then(|| (name, args.to_string()))
}

/// The balanced JSON spans of `text` that open like a call, in order, at
/// most [`MAX_CANDIDATES`] tried. One pass: see the module's opening.
fn spans(text: &str) -> Vec<Range<usize>> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut tried = 0;
    let mut i = 0;
    while i < bytes.len() && tried < MAX_CANDIDATES {
        if !opens_call(bytes, i) {
            i += 1;
            continue;
        }
        tried += 1;
        match close_of(bytes, i) {
            Scan::Closed(end) => {
                found.push(i..end);
                i = end;
            }
            Scan::Broke(at) => i = at.max(i + 1),
            Scan::Open => break,
        }
    }
    found
}

/// `{` whose next non-blank byte is `"`, or `[` whose next is `{`. The
/// blanks looked past are blanks: no later candidate starts in them.
fn opens_call(bytes: &[u8], i: usize) -> bool {
    let want = match bytes[i] {
        b'{' => b'"',
        b'[' => b'{',
        _ => return false,
    };
    bytes[i + 1..]
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == want)
}

/// How a span scanned from its opener ended.
enum Scan {
    /// Balanced: the span ends before this byte.
    Closed(usize),
    /// Not JSON from here: the scan goes on at this byte.
    Broke(usize),
    /// Still open at the end of the text.
    Open,
}

/// Scans the span opened at `start`, strings and escapes respected.
fn close_of(bytes: &[u8], start: usize) -> Scan {
    let mut closers: Vec<u8> = Vec::new();
    let mut brackets = harness_base::text::JsonBrackets::default();
    for (k, &b) in bytes[start..].iter().enumerate() {
        let at = start + k;
        if k > MAX_ARGUMENT_BYTES {
            return Scan::Broke(at);
        }
        match brackets.bracket(b) {
            Some(open @ (b'{' | b'[')) => {
                // Arguments nest at most MAX_ARGUMENT_DEPTH inside a call,
                // which sits in an object, perhaps in an array.
                if closers.len() > MAX_ARGUMENT_DEPTH + 2 {
                    return Scan::Broke(at);
                }
                closers.push(if open == b'{' { b'}' } else { b']' });
            }
            Some(close) => {
                if closers.pop() != Some(close) {
                    return Scan::Broke(at);
                }
                if closers.is_empty() {
                    return Scan::Closed(at + 1);
                }
            }
            None => {}
        }
    }
    Scan::Open
}

/// The text with every ``` fence that holds nothing but blanks removed
/// (what a fenced call leaves behind), in one pass over its lines.
fn without_empty_fences(text: &str) -> String {
    let lines: Vec<&str> = text.split('\n').collect();
    let mut keep = vec![true; lines.len()];
    let mut open: Option<usize> = None;
    for (n, line) in lines.iter().enumerate() {
        let t = line.trim();
        match open {
            None if t.starts_with("```") => open = Some(n),
            Some(o) if t == "```" => {
                if lines[o + 1..n].iter().all(|l| l.trim().is_empty()) {
                    keep[o..=n].iter_mut().for_each(|k| *k = false);
                }
                open = None;
            }
            Some(_) if t.starts_with("```") => open = Some(n),
            _ => {}
        }
    }
    let kept: Vec<&str> = lines
        .iter()
        .zip(keep)
        .filter_map(|(l, k)| k.then_some(*l))
        .collect();
    kept.join("\n")
}
