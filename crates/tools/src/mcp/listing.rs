//! A server's `tools/list` answer made into the tools a task may be
//! offered: the allowlist applied, names checked as function names,
//! descriptions and schemas bounded and defanged, and which are writes.
//! The listing is hostile input: what cannot be offered safely is left out
//! with a note, never sent.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use harness_config::{MAX_TOOL_NAME, MCP_SEPARATOR, McpServerConfig, Redactor, is_function_name};

/// Tools offered from one server at most.
pub const MAX_TOOLS: usize = 128;
/// Characters of a description offered to the model.
const DESCRIPTION_CHARS: usize = 1024;
/// Lines saying which tools were not offered, at most (then a count).
const MAX_NOTES: usize = 20;
/// Bytes of an input schema, as JSON.
pub const MAX_SCHEMA_BYTES: usize = 16 * 1024;
/// Nesting of an input schema.
pub const MAX_SCHEMA_DEPTH: usize = 32;

/// One tool a server lists, as the model is offered it.
#[derive(Debug, Clone, PartialEq)]
pub struct McpTool {
    pub server: String,
    /// Its name on the server.
    pub tool: String,
    /// `SERVER__tool`: the name the model calls.
    pub name: String,
    pub description: String,
    pub schema: Map<String, Value>,
    /// Counts against `max_writes`; an intent under `--dry-run`.
    pub write: bool,
}

impl McpTool {
    /// A tool `check` accepts by its configuration alone (its server is not
    /// started): no description, an empty schema.
    pub fn declared(server: &str, tool: &str) -> McpTool {
        McpTool {
            server: server.to_string(),
            tool: tool.to_string(),
            name: format!("{server}{MCP_SEPARATOR}{tool}"),
            description: String::new(),
            schema: Map::new(),
            write: false,
        }
    }

    /// The OpenAI function-format definition sent to the model.
    pub fn definition(&self) -> Value {
        json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.schema,
            }
        })
    }
}

/// What a listing gave: the tools to offer and a line per tool left out.
#[derive(Debug, Default)]
pub struct Offer {
    /// In name order: the same listing in another order offers the same.
    pub tools: Vec<Arc<McpTool>>,
    pub left_out: Vec<String>,
    /// Names in `tools` or `write_tools` the server does not list: the
    /// configuration (or the server) is wrong, which the run says
    /// (docs/tools.md, "Tools from MCP servers").
    pub unlisted: Vec<String>,
    /// What the server lists, for that message (the first 32 names).
    pub listed: Vec<String>,
}

/// The listed tools this configuration offers.
pub(super) fn offer(
    cfg: &McpServerConfig,
    mut listed: Vec<rmcp::model::Tool>,
    redactor: &Redactor,
) -> Offer {
    let mut offer = Offer::default();
    // In name order before any cap: another order offers the same.
    listed.sort_by(|a, b| a.name.cmp(&b.name));
    // A name is the server's text: redacted before it is cut or shown.
    let shown = |name: &str| harness_base::text::clip(&redactor.redact_str(name), 80);
    let names: Vec<String> = listed.iter().map(|t| t.name.to_string()).collect();
    for wanted in cfg.tools.iter().chain(&cfg.write_tools).flatten() {
        if !names.contains(wanted) && !offer.unlisted.contains(wanted) {
            offer.unlisted.push(wanted.clone());
        }
    }
    offer.listed = names.iter().take(32).map(|n| shown(n)).collect();
    // A name in `write_tools` the server does not list may be a typo of
    // one it does: then every tool not marked read-only counts as a write
    // too, so a typo never makes a write a read (sent under `--dry-run`).
    let writes_unsure = cfg
        .write_tools
        .as_ref()
        .is_some_and(|writes| writes.iter().any(|w| offer.unlisted.contains(w)));
    for t in listed {
        let name = t.name.to_string();
        if !cfg.allows(&name) {
            continue;
        }
        let full = format!("{}{MCP_SEPARATOR}{name}", cfg.name);
        let why = if !is_function_name(&name) || full.len() > MAX_TOOL_NAME {
            Some(format!(
                "its name is not {MAX_TOOL_NAME} characters of ASCII letters, digits, _ and - with the server's prefix"
            ))
        } else if offer.tools.iter().any(|o| o.tool == name) {
            Some("the server lists the name twice; the first is offered".into())
        } else if offer.tools.len() >= MAX_TOOLS {
            Some(format!("at most {MAX_TOOLS} tools of a server are offered"))
        } else {
            None
        };
        if let Some(why) = why {
            let shown = shown(&name);
            offer
                .left_out
                .push(format!("tool {shown:?} not offered: {why}"));
            continue;
        }
        let schema = match schema(&t.input_schema, redactor) {
            Ok(schema) => schema,
            Err(why) => {
                offer
                    .left_out
                    .push(format!("tool {name} not offered: {why}"));
                continue;
            }
        };
        let write = is_write(cfg, &t, writes_unsure);
        // Redacted before it is cut: no part of a secret is left at the cut.
        let description = clean(t.description.as_deref().unwrap_or_default(), redactor);
        offer.tools.push(Arc::new(McpTool {
            server: cfg.name.clone(),
            tool: name,
            name: full,
            description: harness_base::text::clip(description.trim(), DESCRIPTION_CHARS),
            schema,
            write,
        }));
    }
    if offer.left_out.len() > MAX_NOTES {
        let more = offer.left_out.len() - MAX_NOTES;
        offer.left_out.truncate(MAX_NOTES);
        offer
            .left_out
            .push(format!("and {more} more tool(s) not offered"));
    }
    offer
}

/// Whether a listed tool counts as a write: named in `write_tools`, or —
/// without that list, or when a name on it is not listed — not marked
/// read-only.
fn is_write(cfg: &McpServerConfig, t: &rmcp::model::Tool, writes_unsure: bool) -> bool {
    let read_only = t.annotations.as_ref().and_then(|a| a.read_only_hint) == Some(true);
    match &cfg.write_tools {
        Some(writes) => writes.iter().any(|w| *w == t.name) || (writes_unsure && !read_only),
        None => !read_only,
    }
}

/// The input schema, when it is small and shallow enough to send: an
/// object schema, every string in it defanged and redacted.
fn schema(schema: &Map<String, Value>, redactor: &Redactor) -> Result<Map<String, Value>, String> {
    let depth = schema.values().map(|v| depth(v, 1)).max().unwrap_or(0);
    if depth > MAX_SCHEMA_DEPTH {
        return Err(format!(
            "its input schema nests deeper than {MAX_SCHEMA_DEPTH} levels"
        ));
    }
    let bytes = serde_json::to_string(schema).map_or(usize::MAX, |s| s.len());
    if bytes > MAX_SCHEMA_BYTES {
        return Err(format!(
            "its input schema is {bytes} bytes; at most {MAX_SCHEMA_BYTES} are sent"
        ));
    }
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err("its input schema is not of type object".into());
    }
    Ok(cleaned_map(schema, redactor))
}

/// Levels of nesting, counted no further than one past the limit.
fn depth(v: &Value, at: usize) -> usize {
    if at > MAX_SCHEMA_DEPTH {
        return at;
    }
    let inner = match v {
        Value::Object(m) => m.values().map(|v| depth(v, at + 1)).max(),
        Value::Array(a) => a.iter().map(|v| depth(v, at + 1)).max(),
        _ => None,
    };
    inner.unwrap_or(at)
}

/// A copy of a schema (its keys too) with every string [`clean`].
fn cleaned_map(m: &Map<String, Value>, redactor: &Redactor) -> Map<String, Value> {
    m.iter()
        .map(|(k, v)| (clean(k, redactor), cleaned(v, redactor)))
        .collect()
}

fn cleaned(v: &Value, redactor: &Redactor) -> Value {
    match v {
        Value::String(s) => Value::String(clean(s, redactor)),
        Value::Array(a) => Value::Array(a.iter().map(|v| cleaned(v, redactor)).collect()),
        Value::Object(m) => Value::Object(cleaned_map(m, redactor)),
        other => other.clone(),
    }
}

/// Text from a server made safe for the prompt: no secret, no control token.
fn clean(text: &str, redactor: &Redactor) -> String {
    crate::text::defang(&redactor.redact_str(text)).into_owned()
}
