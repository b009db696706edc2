//! The seven tools (SPEC §7): their names, the short descriptions a small
//! model reads, their parameters, argument validation, and dispatch.
//!
//! Each tool's parameters are declared once ([`Param`]); that table yields
//! both the JSON schema sent to the model and the validator, which names
//! every problem (missing, wrong type, unknown key) in one message so a model
//! can fix its call in one go. Validated arguments become a typed [`Call`].
//! Every failure here is a tool result for the model, never a crash.

pub mod noteworx;
pub mod text;
pub mod webfetch;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Map, Value, json};

/// The closed set of tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolName {
    Webfetch,
    NoteworxListNotes,
    NoteworxSearchNotes,
    NoteworxReadNote,
    NoteworxListAttachments,
    NoteworxReadAttachment,
    NoteworxCreateAttachment,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Str,
    /// A string that names one thing in a noteworx address (a slug, an
    /// attachment id): not empty, not `.` or `..`, no control characters.
    Id,
    /// A non-negative integer.
    Int,
    Enum(&'static [&'static str]),
}

/// One parameter of a tool.
#[derive(Debug, Clone, Copy)]
pub struct Param {
    pub name: &'static str,
    pub kind: Kind,
    pub required: bool,
    pub doc: &'static str,
}

const fn p(name: &'static str, kind: Kind, required: bool, doc: &'static str) -> Param {
    Param {
        name,
        kind,
        required,
        doc,
    }
}

const OFFSET_DOC: &str =
    "Character offset to start reading from (default 0). Use the offset a cut result gives you.";
const SLUG: Param = p("slug", Kind::Id, true, "The note's slug.");
const OFFSET: Param = p("offset", Kind::Int, false, OFFSET_DOC);
const WEBFETCH_PARAMS: &[Param] = &[p("url", Kind::Str, true, "Full http(s) URL."), OFFSET];
const LIST_NOTES_PARAMS: &[Param] = &[
    p("space", Kind::Str, false, "Only notes in this space."),
    p("tag", Kind::Str, false, "Only notes with this tag."),
    p(
        "limit",
        Kind::Int,
        false,
        "Most notes to return (default 20).",
    ),
];
const SEARCH_NOTES_PARAMS: &[Param] = &[
    p("query", Kind::Str, true, "What to search for."),
    p(
        "mode",
        Kind::Enum(&["fulltext", "title", "semantic"]),
        false,
        "fulltext (default), title or semantic.",
    ),
    p(
        "limit",
        Kind::Int,
        false,
        "Most notes to return (default 10).",
    ),
];
const READ_NOTE_PARAMS: &[Param] = &[SLUG, OFFSET];
const LIST_ATTACHMENTS_PARAMS: &[Param] = &[SLUG];
const READ_ATTACHMENT_PARAMS: &[Param] = &[
    SLUG,
    p(
        "attachment_id",
        Kind::Id,
        true,
        "The attachment id, as a string.",
    ),
    OFFSET,
];
const CREATE_ATTACHMENT_PARAMS: &[Param] = &[
    p("slug", Kind::Id, true, "The note to attach to."),
    p("filename", Kind::Str, true, "File name, e.g. summary.md."),
    p(
        "content",
        Kind::Str,
        true,
        "Markdown body only, no frontmatter.",
    ),
];

impl ToolName {
    pub const ALL: [ToolName; 7] = [
        ToolName::Webfetch,
        ToolName::NoteworxListNotes,
        ToolName::NoteworxSearchNotes,
        ToolName::NoteworxReadNote,
        ToolName::NoteworxListAttachments,
        ToolName::NoteworxReadAttachment,
        ToolName::NoteworxCreateAttachment,
    ];

    /// `tools` for a message: their names comma-separated, or `none`.
    pub fn list(tools: &[ToolName]) -> String {
        if tools.is_empty() {
            return "none".to_string();
        }
        tools
            .iter()
            .map(|t| t.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ToolName::Webfetch => "webfetch",
            ToolName::NoteworxListNotes => "noteworx_list_notes",
            ToolName::NoteworxSearchNotes => "noteworx_search_notes",
            ToolName::NoteworxReadNote => "noteworx_read_note",
            ToolName::NoteworxListAttachments => "noteworx_list_attachments",
            ToolName::NoteworxReadAttachment => "noteworx_read_attachment",
            ToolName::NoteworxCreateAttachment => "noteworx_create_attachment",
        }
    }

    pub fn parse(name: &str) -> Option<ToolName> {
        ToolName::ALL.into_iter().find(|t| t.as_str() == name)
    }

    /// Tools that change something remote; `--dry-run` turns them into logged intents.
    pub fn is_write(self) -> bool {
        self == ToolName::NoteworxCreateAttachment
    }

    pub fn is_noteworx(self) -> bool {
        self != ToolName::Webfetch
    }

    /// Written for a small model: what it does, what comes back, one rule.
    pub fn description(self) -> &'static str {
        match self {
            ToolName::Webfetch => {
                "Fetch a web page (http/https) and return its readable text. Long pages are cut; use offset to read on."
            }
            ToolName::NoteworxListNotes => {
                "List notes: one line each with slug, title, tags, space, updated date. No note text; read a note by its slug."
            }
            ToolName::NoteworxSearchNotes => {
                "Search notes. Returns one line per match with slug, title, tags and score. No note text; read a note by its slug."
            }
            ToolName::NoteworxReadNote => {
                "Read one note's text by slug. Long notes are cut; use offset to read on."
            }
            ToolName::NoteworxListAttachments => {
                "List the attachments of a note: id, filename, type, size."
            }
            ToolName::NoteworxReadAttachment => {
                "Read one text attachment of a note. Long text is cut; use offset to read on."
            }
            ToolName::NoteworxCreateAttachment => {
                "Attach a markdown suggestion to a note. Write only the body: do NOT add frontmatter (--- lines); it is added for you."
            }
        }
    }

    pub fn params(self) -> &'static [Param] {
        match self {
            ToolName::Webfetch => WEBFETCH_PARAMS,
            ToolName::NoteworxListNotes => LIST_NOTES_PARAMS,
            ToolName::NoteworxSearchNotes => SEARCH_NOTES_PARAMS,
            ToolName::NoteworxReadNote => READ_NOTE_PARAMS,
            ToolName::NoteworxListAttachments => LIST_ATTACHMENTS_PARAMS,
            ToolName::NoteworxReadAttachment => READ_ATTACHMENT_PARAMS,
            ToolName::NoteworxCreateAttachment => CREATE_ATTACHMENT_PARAMS,
        }
    }

    /// The OpenAI function-format definition sent to the model.
    pub fn definition(self) -> Value {
        let mut properties = Map::new();
        for param in self.params() {
            let mut schema = match param.kind {
                Kind::Str | Kind::Id => json!({"type": "string"}),
                Kind::Int => json!({"type": "integer", "minimum": 0}),
                Kind::Enum(values) => json!({"type": "string", "enum": values}),
            };
            schema["description"] = Value::from(param.doc);
            properties.insert(param.name.into(), schema);
        }
        let required: Vec<&str> = self
            .params()
            .iter()
            .filter(|p| p.required)
            .map(|p| p.name)
            .collect();
        json!({
            "type": "function",
            "function": {
                "name": self.as_str(),
                "description": self.description(),
                "parameters": {"type": "object", "properties": properties, "required": required},
            }
        })
    }

    /// One line describing the expected arguments, for error messages.
    pub fn signature(self) -> String {
        let parts: Vec<String> = self
            .params()
            .iter()
            .map(|p| {
                let kind = match p.kind {
                    Kind::Str | Kind::Id => "string".to_string(),
                    Kind::Int => "integer".to_string(),
                    Kind::Enum(v) => v.join("|"),
                };
                format!(
                    "{}: {}{}",
                    p.name,
                    kind,
                    if p.required { " (required)" } else { "" }
                )
            })
            .collect();
        format!("{}{{{}}}", self.as_str(), parts.join(", "))
    }
}

/// How noteworx searches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SearchMode {
    #[default]
    Fulltext,
    Title,
    Semantic,
}

impl SearchMode {
    pub const ALL: [SearchMode; 3] = [
        SearchMode::Fulltext,
        SearchMode::Title,
        SearchMode::Semantic,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SearchMode::Fulltext => "fulltext",
            SearchMode::Title => "title",
            SearchMode::Semantic => "semantic",
        }
    }

    pub fn parse(s: &str) -> Option<SearchMode> {
        SearchMode::ALL.into_iter().find(|m| m.as_str() == s)
    }
}

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
}

impl Call {
    pub fn tool(&self) -> ToolName {
        match self {
            Call::Webfetch { .. } => ToolName::Webfetch,
            Call::ListNotes { .. } => ToolName::NoteworxListNotes,
            Call::SearchNotes { .. } => ToolName::NoteworxSearchNotes,
            Call::ReadNote { .. } => ToolName::NoteworxReadNote,
            Call::ListAttachments { .. } => ToolName::NoteworxListAttachments,
            Call::ReadAttachment { .. } => ToolName::NoteworxReadAttachment,
            Call::CreateAttachment { .. } => ToolName::NoteworxCreateAttachment,
        }
    }
}

/// Checks a call the model made against the task's allowed tools and the
/// tool's parameters. `Err` is the message to answer the model with.
pub fn validate(name: &str, arguments: &str, allowed: &[ToolName]) -> Result<Call, String> {
    let tool = allowed_tool(name, allowed)?;
    let args = argument_object(tool, arguments)?;
    let values = checked_arguments(tool, &args)?;
    Ok(typed_call(tool, &values))
}

/// The tool a call names, when the task allows it.
fn allowed_tool(name: &str, allowed: &[ToolName]) -> Result<ToolName, String> {
    let allowed_list = || {
        allowed
            .iter()
            .map(|t| t.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let Some(tool) = ToolName::parse(name) else {
        return Err(format!(
            "Unknown tool {name:?}. The tools you can call are: {}.",
            allowed_list()
        ));
    };
    if !allowed.contains(&tool) {
        return Err(format!(
            "Tool {name} is not available in this task. The tools you can call are: {}.",
            allowed_list()
        ));
    }
    Ok(tool)
}

/// The arguments as a JSON object (empty text is no arguments).
fn argument_object(tool: ToolName, arguments: &str) -> Result<Map<String, Value>, String> {
    if arguments.len() > crate::wire::chat::MAX_ARGUMENT_BYTES {
        return Err(format!(
            "Arguments are {} bytes; the limit is {} (1 MiB). Expected {}.",
            arguments.len(),
            crate::wire::chat::MAX_ARGUMENT_BYTES,
            tool.signature()
        ));
    }
    match arguments.trim() {
        "" => Ok(Map::new()),
        text => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => Ok(m),
            Ok(other) => Err(format!(
                "Arguments must be a JSON object, not {}. Expected {}.",
                kind_of(&other),
                tool.signature()
            )),
            Err(e) => Err(format!(
                "Arguments are not valid JSON ({e}). Expected {}.",
                tool.signature()
            )),
        },
    }
}

/// Every argument fits its parameter and every required one is there;
/// `Err` names each problem at once, with the expected signature.
fn checked_arguments(
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
fn typed_call(tool: ToolName, values: &Map<String, Value>) -> Call {
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
fn coerce(kind: Kind, v: &Value) -> Option<Value> {
    match (kind, v) {
        (Kind::Str, Value::String(_)) => Some(v.clone()),
        (Kind::Id, Value::String(s)) if s.trim().is_empty() => Some(v.clone()),
        (Kind::Id, Value::String(s)) => {
            crate::tools::noteworx::client::is_path_segment(s).then(|| v.clone())
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

fn expected(kind: Kind, got: &Value) -> String {
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

fn kind_of(v: &Value) -> String {
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

/// What a tool gave back, before the loop cuts it to size.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub text: String,
    pub is_error: bool,
    /// Extra facts for `tools.jsonl` (a dry-run intent, a duplicate skipped).
    pub detail: Option<Value>,
    /// The service refused the setup (a notes token): the run stops with
    /// this diagnosis (SPEC §16).
    pub setup_fault: Option<String>,
}

impl ToolOutput {
    pub fn ok(text: impl Into<String>) -> Self {
        ToolOutput {
            text: text.into(),
            is_error: false,
            detail: None,
            setup_fault: None,
        }
    }
    pub fn error(text: impl Into<String>) -> Self {
        ToolOutput {
            text: text.into(),
            is_error: true,
            detail: None,
            setup_fault: None,
        }
    }
    pub fn with_detail(mut self, detail: Value) -> Self {
        self.detail = Some(detail);
        self
    }
}

/// Who is calling: stamped into what write tools create.
#[derive(Debug, Clone)]
pub struct CallContext {
    pub task: String,
    pub run_id: String,
    /// The turn whose reply made the call, and the call's id.
    pub turn: u32,
    pub call_id: String,
    /// The profile the task runs as: its name signs attachments.
    pub agent: Option<String>,
    pub now: DateTime<Utc>,
    pub dry_run: bool,
    /// Tool results are cut to this many characters; readers page within it.
    pub max_chars: usize,
    /// Secrets are taken out of a text before it is paged, so none is
    /// split across two pages where neither holds all of it.
    pub redactor: std::sync::Arc<crate::config::Redactor>,
}

/// The configured tool bodies, built once per run and shared by all tasks.
#[derive(Debug, Clone, Default)]
pub struct Toolbox {
    pub webfetch: Option<webfetch::Webfetch>,
    pub noteworx: Option<noteworx::Noteworx>,
    /// A replay: calls are answered from a recorded run, not run.
    pub recorded: Option<std::sync::Arc<RecordedResults>>,
}

/// The tool results of a recorded run, by call id: a replay answers with
/// them instead of running the tools.
#[derive(Debug, Default)]
pub struct RecordedResults {
    pub results: std::collections::HashMap<String, ToolOutput>,
    /// From this turn on, tools run for real (`replay --from-turn`).
    pub live_from_turn: Option<u32>,
}

impl Toolbox {
    /// The tools offered to the model (before a task narrows them).
    pub fn offered(&self) -> Vec<ToolName> {
        offered(self.webfetch.is_some(), self.noteworx.is_some())
    }

    /// The tools a configuration offers, without building any client.
    pub fn offered_by(cfg: &crate::config::Config) -> Vec<ToolName> {
        offered(cfg.webfetch.is_some(), cfg.noteworx.is_some())
    }

    /// Tool names in `[agents.NAME]` profiles that are no tool at all (a
    /// typo): a configuration error, one message each.
    pub fn unknown_profile_tools(cfg: &crate::config::Config) -> Vec<String> {
        profile_tools(cfg)
            .filter(|(_, t)| ToolName::parse(t).is_none())
            .map(|(name, t)| {
                format!(
                    "[agents.{name}] tools: {t:?} is not a tool (tools: {})",
                    ToolName::list(&ToolName::ALL)
                )
            })
            .collect()
    }

    /// Tools profiles name that this configuration does not offer (noteworx
    /// not configured, say): a task naming such a profile is invalid.
    pub fn unoffered_profile_tools(cfg: &crate::config::Config) -> Vec<String> {
        let offered = Self::offered_by(cfg);
        profile_tools(cfg)
            .filter(|(_, t)| ToolName::parse(t).is_some_and(|t| !offered.contains(&t)))
            .map(|(name, t)| {
                format!(
                    "[agents.{name}] tools: {t:?} is not offered by this configuration (offered: {}): a task naming this profile is invalid",
                    ToolName::list(&offered)
                )
            })
            .collect()
    }

    /// Runs a validated call. Never panics and never returns a Rust error:
    /// every failure is an error result for the model.
    pub async fn run(&self, call: &Call, ctx: &CallContext) -> ToolOutput {
        if let Some(rec) = &self.recorded
            && rec.live_from_turn.is_none_or(|n| ctx.turn < n)
        {
            return rec.results.get(&ctx.call_id).cloned().unwrap_or_else(|| {
                ToolOutput::error(format!(
                    "replay: the recording has no result for call {}",
                    ctx.call_id
                ))
            });
        }
        let not_configured = |what: &str| {
            ToolOutput::error(format!(
                "{} is not configured in this harness; do not call it again.",
                what
            ))
        };
        match call {
            Call::Webfetch { url, offset } => match &self.webfetch {
                Some(w) => w.fetch(url, *offset, ctx.max_chars, &ctx.redactor).await,
                None => not_configured("webfetch"),
            },
            _ => match &self.noteworx {
                Some(n) => n.run(call, ctx).await,
                None => not_configured("noteworx"),
            },
        }
    }
}

/// Every (profile name, tool name) the profiles list.
fn profile_tools(cfg: &crate::config::Config) -> impl Iterator<Item = (&str, &str)> {
    cfg.agents.iter().flat_map(|(name, p)| {
        p.tools
            .iter()
            .flatten()
            .map(move |t| (name.as_str(), t.as_str()))
    })
}

fn offered(webfetch: bool, noteworx: bool) -> Vec<ToolName> {
    ToolName::ALL
        .into_iter()
        .filter(|t| if t.is_noteworx() { noteworx } else { webfetch })
        .collect()
}

/// Describes a call compactly for logs and placeholders: `name {"k":"v"}`.
pub fn describe_call(name: &str, arguments: &str) -> String {
    format!("{name} {}", crate::base::text::clip(arguments, 160))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: &[ToolName] = &ToolName::ALL;

    #[test]
    fn every_tool_has_a_schema_with_its_required_keys() {
        let d = ToolName::NoteworxReadAttachment.definition();
        assert_eq!(d["function"]["name"], "noteworx_read_attachment");
        assert_eq!(
            d["function"]["parameters"]["required"],
            json!(["slug", "attachment_id"])
        );
        assert_eq!(
            d["function"]["parameters"]["properties"]["attachment_id"]["type"],
            "string"
        );
        for t in ToolName::ALL {
            assert_eq!(ToolName::parse(t.as_str()), Some(t));
            assert!(
                t.description().len() < 160,
                "{} description too long for a small model",
                t.as_str()
            );
        }
        assert!(
            ToolName::NoteworxCreateAttachment
                .description()
                .contains("frontmatter")
        );
    }

    #[test]
    fn an_unknown_tool_lists_the_allowed_ones() {
        let e = validate(
            "read_file",
            "{}",
            &[ToolName::Webfetch, ToolName::NoteworxReadNote],
        )
        .unwrap_err();
        assert_eq!(
            e,
            "Unknown tool \"read_file\". The tools you can call are: webfetch, noteworx_read_note."
        );
    }

    #[test]
    fn a_tool_the_task_does_not_allow_is_refused() {
        let e = validate(
            "webfetch",
            r#"{"url":"http://x"}"#,
            &[ToolName::NoteworxReadNote],
        )
        .unwrap_err();
        assert!(
            e.starts_with("Tool webfetch is not available in this task"),
            "{e}"
        );
    }

    #[test]
    fn every_argument_problem_is_named_with_the_expected_schema() {
        let e = validate(
            "noteworx_read_attachment",
            r#"{"slgu":"a","offset":"x","attachment_id":true}"#,
            ALL,
        )
        .unwrap_err();
        assert_eq!(
            e,
            "Invalid arguments for noteworx_read_attachment: `attachment_id` must be a string, not a boolean; \
             `offset` must be a non-negative integer, not \"x\"; unknown argument `slgu`; missing required `slug`. \
             Expected noteworx_read_attachment{slug: string (required), attachment_id: string (required), offset: integer}."
        );
    }

    #[test]
    fn invalid_json_and_non_objects_are_explained() {
        let e = validate("noteworx_read_note", r#"{"slug": "cut off"#, ALL).unwrap_err();
        assert!(e.starts_with("Arguments are not valid JSON"), "{e}");
        assert!(e.contains("slug: string (required)"), "{e}");
        let e = validate("noteworx_read_note", "[1]", ALL).unwrap_err();
        assert!(
            e.starts_with("Arguments must be a JSON object, not an array"),
            "{e}"
        );
        let huge = format!(r#"{{"slug": "a", "pad": [{}1]}}"#, "1,".repeat(600_000));
        let e = validate("noteworx_read_note", &huge, ALL).unwrap_err();
        assert!(
            e.starts_with("Arguments are 1200025 bytes; the limit is 1048576 (1 MiB)."),
            "{e}"
        );
    }

    #[test]
    fn enums_and_empty_required_strings_are_checked() {
        let e = validate(
            "noteworx_search_notes",
            r#"{"query":" ","mode":"fuzzy"}"#,
            ALL,
        )
        .unwrap_err();
        assert!(
            e.contains("`mode` must be one of fulltext, title, semantic"),
            "{e}"
        );
        assert!(e.contains("`query` must not be empty"), "{e}");
    }

    #[test]
    fn slugs_and_ids_that_would_change_the_address_are_refused_before_any_request() {
        for (name, args) in [
            ("noteworx_read_note", r#"{"slug":".."}"#),
            ("noteworx_read_note", r#"{"slug":"."}"#),
            ("noteworx_list_attachments", r#"{"slug":"a\u0000b"}"#),
            (
                "noteworx_create_attachment",
                r#"{"slug":"..","filename":"x","content":"y"}"#,
            ),
            (
                "noteworx_read_attachment",
                r#"{"slug":"n","attachment_id":".."}"#,
            ),
            (
                "noteworx_read_attachment",
                r#"{"slug":"n","attachment_id":"1\n2"}"#,
            ),
        ] {
            let e = validate(name, args, ALL).unwrap_err();
            assert!(
                e.contains("must be a slug or id as a listing gave it"),
                "{args}: {e}"
            );
        }
        // Separators are fine: the client percent-encodes them into one segment.
        assert!(validate("noteworx_read_note", r#"{"slug":"a/b"}"#, ALL).is_ok());
        assert!(validate("noteworx_read_note", r#"{"slug":"..x"}"#, ALL).is_ok());
    }

    #[test]
    fn small_model_spellings_of_numbers_and_ids_are_accepted() {
        assert_eq!(
            validate(
                "noteworx_read_attachment",
                r#"{"slug":"n","attachment_id":42,"offset":"100"}"#,
                ALL
            )
            .unwrap(),
            Call::ReadAttachment {
                slug: "n".into(),
                attachment_id: "42".into(),
                offset: 100
            }
        );
        assert_eq!(
            validate("noteworx_list_notes", r#"{"limit":5.0,"tag":null}"#, ALL).unwrap(),
            Call::ListNotes {
                space: None,
                tag: None,
                limit: Some(5)
            }
        );
        assert_eq!(
            validate("noteworx_list_notes", "", ALL).unwrap(),
            Call::ListNotes {
                space: None,
                tag: None,
                limit: None
            }
        );
    }
}
