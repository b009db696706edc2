//! Tool calls a model wrote as text instead of `tool_calls`: Gemma 4's
//! `<|tool_call>call:NAME{k:v}<tool_call|>` and the JSON form
//! `<tool_call>{"name":…,"arguments":…}</tool_call>`, parsed in time
//! linear in the text, whatever it holds.

use serde_json::{Map, Number, Value};

use crate::chat::MAX_ARGUMENT_BYTES;

/// Text-form call arguments nest at most this deep; deeper is not a call.
pub const MAX_ARGUMENT_DEPTH: usize = 64;

pub(super) const GEMMA_OPEN: &str = "<|tool_call>";

pub(super) const JSON_OPEN: &str = "<tool_call>";

/// Finds tool calls written as text. Returns the text with them removed and
/// the `(name, arguments)` pairs in order. Calls that cannot be parsed, and
/// calls whose text (`call:NAME{…}`, or the JSON between the tags) is
/// `quoted`, are left in the text.
///
/// Each opener is parsed only up to the next opener (a call never contains
/// another), so the work is linear in the text however many openers it
/// holds and however they fail.
pub fn recover_text_calls(
    text: &str,
    quoted: &dyn Fn(&str) -> bool,
) -> (String, Vec<(String, String)>) {
    let mut openers: Vec<(usize, bool)> = text
        .match_indices(GEMMA_OPEN)
        .map(|(i, _)| (i, true))
        .chain(text.match_indices(JSON_OPEN).map(|(i, _)| (i, false)))
        .collect();
    openers.sort_unstable();
    let mut calls = Vec::new();
    let mut rest = String::with_capacity(text.len());
    let mut cursor = 0;
    for (k, &(start, is_gemma)) in openers.iter().enumerate() {
        if start < cursor {
            continue;
        }
        let end = openers.get(k + 1).map_or(text.len(), |&(next, _)| next);
        let segment = &text[start..end];
        let parsed = if is_gemma {
            parse_gemma_call(segment)
        } else {
            parse_json_call(segment)
        };
        if let Some((len, call)) = parsed {
            let own = if is_gemma { GEMMA_OPEN } else { JSON_OPEN };
            let inner = segment[own.len()..len]
                .trim_end()
                .trim_end_matches("<tool_call|>")
                .trim_end_matches("</tool_call>")
                .trim();
            if quoted(inner) {
                continue;
            }
            rest.push_str(&text[cursor..start]);
            // Kept as text: a tree of every call at once would cost many
            // times the reply's size.
            calls.push((call.0, call.1.to_string()));
            cursor = start + len;
        }
    }
    rest.push_str(&text[cursor..]);
    (rest, calls)
}

/// `<|tool_call>call:NAME{…}<tool_call|>` at the start of `seg`, which ends
/// at the next opener; the closing tag may be missing when nothing but
/// white space follows.
pub(super) fn parse_gemma_call(seg: &str) -> Option<(usize, (String, Value))> {
    let mut p = GemmaParser {
        s: seg,
        i: GEMMA_OPEN.len(),
    };
    p.skip_ws();
    p.eat("call:")?;
    let name_len = p
        .rest()
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-' || c == '.'))?;
    let name = p.rest()[..name_len].to_string();
    if name.is_empty() {
        return None;
    }
    p.i += name_len;
    p.skip_ws();
    let args = p.object(1)?;
    p.skip_ws();
    if p.eat("<tool_call|>").is_none() && !p.rest().trim().is_empty() {
        return None;
    }
    Some((p.i, (name, args)))
}

/// `<tool_call>{"name": …, "arguments": …}</tool_call>` at the start of `seg`.
pub(super) fn parse_json_call(seg: &str) -> Option<(usize, (String, Value))> {
    let body_start = JSON_OPEN.len();
    let close = seg[body_start..].find("</tool_call>")?;
    if close > MAX_ARGUMENT_BYTES {
        return None;
    }
    let v: Value = serde_json::from_str(seg[body_start..body_start + close].trim()).ok()?;
    let call = call_parts(&v)?;
    Some((body_start + close + "</tool_call>".len(), call))
}

/// The name and arguments of a call written as a JSON object: `{"name": N,
/// "arguments" | "parameters": {…} | "{…}"}`, arguments left out being
/// `{}` (a tool that takes none). `None` when the arguments are not an
/// object, or nest past [`MAX_ARGUMENT_DEPTH`].
pub(super) fn call_parts(v: &Value) -> Option<(String, Value)> {
    let name = v.get("name")?.as_str()?.to_string();
    let args = match v.get("arguments").or_else(|| v.get("parameters")) {
        Some(Value::String(s)) => serde_json::from_str(s).ok()?,
        Some(obj @ Value::Object(_)) => obj.clone(),
        None => Value::Object(Map::new()),
        Some(_) => return None,
    };
    if !args.is_object() || depth(&args) > MAX_ARGUMENT_DEPTH {
        return None;
    }
    Some((name, args))
}

/// How deep a JSON value nests (a scalar is 0, `{}` is 1), without recursion.
pub(super) fn depth(v: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(v, 0)];
    while let Some((v, d)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Array(a) => Box::new(a.iter()),
            Value::Object(o) => Box::new(o.values()),
            _ => continue,
        };
        deepest = deepest.max(d + 1);
        stack.extend(children.map(|c| (c, d + 1)));
    }
    deepest
}

/// Gemma 4's argument syntax: `{key:value,…}` with bare keys, strings
/// between `<|"|>` quotes, and bare numbers, booleans, null, arrays and objects.
pub(super) struct GemmaParser<'a> {
    pub(super) s: &'a str,
    pub(super) i: usize,
}

pub(super) const QUOTE: &str = "<|\"|>";

impl GemmaParser<'_> {
    pub(super) fn rest(&self) -> &str {
        &self.s[self.i..]
    }
    pub(super) fn skip_ws(&mut self) {
        let trimmed = self.rest().trim_start();
        self.i = self.s.len() - trimmed.len();
    }
    pub(super) fn eat(&mut self, token: &str) -> Option<()> {
        self.rest()
            .starts_with(token)
            .then(|| self.i += token.len())
    }
    pub(super) fn object(&mut self, depth: usize) -> Option<Value> {
        if depth > MAX_ARGUMENT_DEPTH {
            return None;
        }
        self.eat("{")?;
        let mut map = Map::new();
        loop {
            self.skip_ws();
            if self.eat("}").is_some() {
                return Some(Value::Object(map));
            }
            let key = if self.rest().starts_with(QUOTE) {
                self.quoted()?
            } else if self.rest().starts_with('"') {
                self.json_string()?
            } else {
                let len = self.rest().find([':', '}', ','])?;
                let k = self.rest()[..len].trim().to_string();
                self.i += len;
                k
            };
            self.skip_ws();
            self.eat(":")?;
            self.skip_ws();
            let value = self.value(depth)?;
            map.insert(key, value);
            self.skip_ws();
            if self.eat(",").is_none() && !self.rest().starts_with('}') {
                return None;
            }
        }
    }
    pub(super) fn array(&mut self, depth: usize) -> Option<Value> {
        if depth > MAX_ARGUMENT_DEPTH {
            return None;
        }
        self.eat("[")?;
        let mut items = Vec::new();
        loop {
            self.skip_ws();
            if self.eat("]").is_some() {
                return Some(Value::Array(items));
            }
            items.push(self.value(depth)?);
            self.skip_ws();
            if self.eat(",").is_none() && !self.rest().starts_with(']') {
                return None;
            }
        }
    }
    pub(super) fn quoted(&mut self) -> Option<String> {
        self.eat(QUOTE)?;
        let end = self.rest().find(QUOTE)?;
        let s = self.rest()[..end].to_string();
        self.i += end + QUOTE.len();
        Some(s)
    }
    pub(super) fn json_string(&mut self) -> Option<String> {
        let mut de = serde_json::Deserializer::from_str(self.rest()).into_iter::<String>();
        let s = de.next()?.ok()?;
        self.i += de.byte_offset();
        Some(s)
    }
    /// A value inside a container at `depth`. Arguments longer than
    /// [`MAX_ARGUMENT_BYTES`] are not a call.
    pub(super) fn value(&mut self, depth: usize) -> Option<Value> {
        if self.i > MAX_ARGUMENT_BYTES {
            return None;
        }
        let s = self.s;
        let r = &s[self.i..];
        if r.starts_with(QUOTE) {
            return self.quoted().map(Value::String);
        }
        if r.starts_with('"') {
            return self.json_string().map(Value::String);
        }
        if r.starts_with('{') {
            return self.object(depth + 1);
        }
        if r.starts_with('[') {
            return self.array(depth + 1);
        }
        // A bare scalar runs to the next separator.
        let len = r.find([',', '}', ']']).unwrap_or(r.len());
        let word = r[..len].trim();
        if word.is_empty() || word.contains('<') {
            return None;
        }
        self.i += len;
        Some(match word {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            "null" => Value::Null,
            _ => word
                .parse::<i64>()
                .map(Value::from)
                .ok()
                .or_else(|| {
                    word.parse::<f64>()
                        .ok()
                        .and_then(Number::from_f64)
                        .map(Value::Number)
                })
                .unwrap_or_else(|| Value::String(word.to_string())),
        })
    }
}
