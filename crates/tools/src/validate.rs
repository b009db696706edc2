//! Validation: a call's name checked against the task's tools and its
//! arguments against the tool's parameters, every problem named in one
//! message, the result a typed [`Call`].

use super::catalog::{Kind, SearchMode, Tool, ToolName};
use super::mcp;
use serde_json::{Map, Value};

/// A validated tool call with typed arguments.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    Webfetch {
        url: String,
        offset: usize,
    },
    ListNotes {
        space: Option<String>,
        tag: Option<String>,
        limit: Option<u64>,
    },
    SearchNotes {
        query: String,
        mode: SearchMode,
        limit: Option<u64>,
    },
    ReadNote {
        slug: String,
        offset: usize,
    },
    ListAttachments {
        slug: String,
    },
    ReadAttachment {
        slug: String,
        attachment_id: String,
        offset: usize,
    },
    CreateAttachment {
        slug: String,
        filename: String,
        content: String,
    },
    /// A tool of an MCP server; its arguments go as the model wrote them.
    Mcp {
        tool: std::sync::Arc<mcp::McpTool>,
        arguments: Map<String, Value>,
    },
}

impl Call {
    pub fn tool(&self) -> Tool {
        Tool::Builtin(match self {
            Call::Webfetch { .. } => ToolName::Webfetch,
            Call::ListNotes { .. } => ToolName::NoteworxListNotes,
            Call::SearchNotes { .. } => ToolName::NoteworxSearchNotes,
            Call::ReadNote { .. } => ToolName::NoteworxReadNote,
            Call::ListAttachments { .. } => ToolName::NoteworxListAttachments,
            Call::ReadAttachment { .. } => ToolName::NoteworxReadAttachment,
            Call::CreateAttachment { .. } => ToolName::NoteworxCreateAttachment,
            Call::Mcp { tool, .. } => return Tool::Mcp(tool.clone()),
        })
    }
}

/// Checks a call the model made against the task's allowed tools and the
/// tool's parameters. `Err` is the message to answer the model with.
pub fn validate(name: &str, arguments: &str, allowed: &[Tool]) -> Result<Call, String> {
    match allowed_tool(name, allowed)? {
        Tool::Builtin(tool) => {
            let args = argument_object(arguments, || tool.signature())?;
            let values = checked_arguments(*tool, &args)?;
            Ok(typed_call(*tool, &values))
        }
        Tool::Mcp(tool) => {
            let signature = || format!("{}{{arguments as its schema says}}", tool.name);
            Ok(Call::Mcp {
                tool: tool.clone(),
                arguments: argument_object(arguments, signature)?,
            })
        }
    }
}

/// The tool a call names, when the task allows it.
pub(super) fn allowed_tool<'t>(name: &str, allowed: &'t [Tool]) -> Result<&'t Tool, String> {
    if let Some(tool) = Tool::find(allowed, name) {
        return Ok(tool);
    }
    let listed = Tool::list(allowed);
    if ToolName::parse(name).is_some() {
        return Err(format!(
            "Tool {name} is not available in this task. The tools you can call are: {listed}."
        ));
    }
    Err(format!(
        "Unknown tool {name:?}. The tools you can call are: {listed}."
    ))
}

/// The arguments as a JSON object (empty text is no arguments).
pub(super) fn argument_object(
    arguments: &str,
    signature: impl Fn() -> String,
) -> Result<Map<String, Value>, String> {
    if arguments.len() > harness_wire::chat::MAX_ARGUMENT_BYTES {
        return Err(format!(
            "Arguments are {} bytes; the limit is {} (1 MiB). Expected {}.",
            arguments.len(),
            harness_wire::chat::MAX_ARGUMENT_BYTES,
            signature()
        ));
    }
    match arguments.trim() {
        "" => Ok(Map::new()),
        text => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => Ok(m),
            Ok(other) => Err(format!(
                "Arguments must be a JSON object, not {}. Expected {}.",
                kind_of(&other),
                signature()
            )),
            Err(e) => Err(format!(
                "Arguments are not valid JSON ({e}). Expected {}.",
                signature()
            )),
        },
    }
}

/// Every argument fits its parameter and every required one is there;
/// `Err` names each problem at once, with the expected signature.
pub(super) fn checked_arguments(
    tool: ToolName,
    args: &Map<String, Value>,
) -> Result<Map<String, Value>, String> {
    let mut problems = Vec::new();
    let mut values = Map::new();
    for (key, value) in args {
        let Some(param) = tool.params().iter().find(|p| p.name == key) else {
            problems.push(format!("unknown argument `{key}`"));
            continue;
        };
        match coerce(param.kind, value) {
            Some(v) => {
                values.insert(key.clone(), v);
            }
            None if value.is_null() && !param.required => {}
            None => problems.push(format!(
                "`{key}` must be {}, not {}",
                expected(param.kind, value),
                kind_of(value)
            )),
        }
    }
    for param in tool.params().iter().filter(|p| p.required) {
        if !args.contains_key(param.name) || args[param.name].is_null() {
            problems.push(format!("missing required `{}`", param.name));
        } else if matches!(param.kind, Kind::Str | Kind::Id)
            && values
                .get(param.name)
                .and_then(Value::as_str)
                .is_some_and(|s| s.trim().is_empty())
        {
            problems.push(format!("`{}` must not be empty", param.name));
        }
    }
    if problems.is_empty() {
        return Ok(values);
    }
    Err(format!(
        "Invalid arguments for {}: {}. Expected {}.",
        tool.as_str(),
        problems.join("; "),
        tool.signature()
    ))
}

/// Checked arguments as the tool's typed call.
pub(super) fn typed_call(tool: ToolName, values: &Map<String, Value>) -> Call {
    let s = |k: &str| values.get(k).and_then(Value::as_str).map(str::to_string);
    let n = |k: &str| values.get(k).and_then(Value::as_u64);
    let req = |k: &str| s(k).unwrap_or_default();
    let offset = n("offset")
        .map(|o| usize::try_from(o).unwrap_or(usize::MAX))
        .unwrap_or(0);
    match tool {
        ToolName::Webfetch => Call::Webfetch {
            url: req("url").trim().to_string(),
            offset,
        },
        ToolName::NoteworxListNotes => Call::ListNotes {
            space: s("space"),
            tag: s("tag"),
            limit: n("limit"),
        },
        ToolName::NoteworxSearchNotes => Call::SearchNotes {
            query: req("query"),
            mode: s("mode")
                .and_then(|m| SearchMode::parse(&m))
                .unwrap_or_default(),
            limit: n("limit"),
        },
        ToolName::NoteworxReadNote => Call::ReadNote {
            slug: req("slug"),
            offset,
        },
        ToolName::NoteworxListAttachments => Call::ListAttachments { slug: req("slug") },
        ToolName::NoteworxReadAttachment => Call::ReadAttachment {
            slug: req("slug"),
            attachment_id: req("attachment_id"),
            offset,
        },
        ToolName::NoteworxCreateAttachment => Call::CreateAttachment {
            slug: req("slug"),
            filename: req("filename"),
            content: req("content"),
        },
    }
}

/// Accepts a value for a parameter kind, with the leniency small models need:
/// integers written as strings or as whole floats, ids written as numbers.
pub(super) fn coerce(kind: Kind, v: &Value) -> Option<Value> {
    match (kind, v) {
        (Kind::Str, Value::String(_)) => Some(v.clone()),
        (Kind::Id, Value::String(s)) if s.trim().is_empty() => Some(v.clone()),
        (Kind::Id, Value::String(s)) => {
            crate::noteworx::client::is_path_segment(s).then(|| v.clone())
        }
        (Kind::Str | Kind::Id, Value::Number(n)) => Some(Value::String(n.to_string())),
        (Kind::Int, Value::Number(n)) => n
            .as_u64()
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                    .map(|f| f as u64)
            })
            .map(Value::from),
        (Kind::Int, Value::String(s)) => s.trim().parse::<u64>().ok().map(Value::from),
        (Kind::Enum(allowed), Value::String(s)) => allowed.contains(&s.as_str()).then(|| v.clone()),
        _ => None,
    }
}

pub(super) fn expected(kind: Kind, got: &Value) -> String {
    match kind {
        Kind::Str => "a string".into(),
        Kind::Id if got.is_string() => {
            "a slug or id as a listing gave it (not . or .., no control characters)".into()
        }
        Kind::Id => "a string".into(),
        Kind::Int => "a non-negative integer".into(),
        Kind::Enum(v) => format!("one of {}", v.join(", ")),
    }
}

pub(super) fn kind_of(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(_) => "a boolean".into(),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) if s.chars().count() > 40 => "a string".into(),
        Value::String(s) => format!("{s:?}"),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}
