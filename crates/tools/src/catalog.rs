//! The catalog: the closed set of tools, each one's short description and
//! parameters declared once, and the JSON schemas the model is offered.

use serde::Serialize;
use serde_json::Map;
use serde_json::{Value, json};

/// The closed set of tools; each name one rule for serde, [`ToolName::as_str`]
/// and [`ToolName::parse`].
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::EnumIter,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
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

pub(super) const fn p(name: &'static str, kind: Kind, required: bool, doc: &'static str) -> Param {
    Param {
        name,
        kind,
        required,
        doc,
    }
}

pub(super) const OFFSET_DOC: &str =
    "Character offset to start reading from (default 0). Use the offset a cut result gives you.";

pub(super) const SLUG: Param = p("slug", Kind::Id, true, "The note's slug.");

pub(super) const OFFSET: Param = p("offset", Kind::Int, false, OFFSET_DOC);

pub(super) const WEBFETCH_PARAMS: &[Param] =
    &[p("url", Kind::Str, true, "Full http(s) URL."), OFFSET];

pub(super) const LIST_NOTES_PARAMS: &[Param] = &[
    p("space", Kind::Str, false, "Only notes in this space."),
    p("tag", Kind::Str, false, "Only notes with this tag."),
    p(
        "limit",
        Kind::Int,
        false,
        "Most notes to return (default 20).",
    ),
];

pub(super) const SEARCH_NOTES_PARAMS: &[Param] = &[
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

pub(super) const READ_NOTE_PARAMS: &[Param] = &[SLUG, OFFSET];

pub(super) const LIST_ATTACHMENTS_PARAMS: &[Param] = &[SLUG];

pub(super) const READ_ATTACHMENT_PARAMS: &[Param] = &[
    SLUG,
    p(
        "attachment_id",
        Kind::Id,
        true,
        "The attachment id, as a string.",
    ),
    OFFSET,
];

pub(super) const CREATE_ATTACHMENT_PARAMS: &[Param] = &[
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
        self.into()
    }

    pub fn parse(name: &str) -> Option<ToolName> {
        name.parse().ok()
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
    pub(crate) fn signature(self) -> String {
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
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::EnumIter,
)]
#[strum(serialize_all = "snake_case")]
pub enum SearchMode {
    #[default]
    Fulltext,
    Title,
    Semantic,
}

impl SearchMode {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn parse(s: &str) -> Option<SearchMode> {
        s.parse().ok()
    }
}

/// A tool a task may be offered: one of the seven, or one an MCP server
/// lists (docs/tools.md, "Tools from MCP servers"). Two tools are the same when
/// their names are.
#[derive(Debug, Clone)]
pub enum Tool {
    Builtin(ToolName),
    Mcp(std::sync::Arc<super::mcp::McpTool>),
}

impl PartialEq for Tool {
    fn eq(&self, other: &Tool) -> bool {
        self.name() == other.name()
    }
}

impl From<ToolName> for Tool {
    fn from(t: ToolName) -> Tool {
        Tool::Builtin(t)
    }
}

impl Tool {
    /// The name the model calls it by.
    pub fn name(&self) -> &str {
        match self {
            Tool::Builtin(t) => t.as_str(),
            Tool::Mcp(m) => &m.name,
        }
    }

    pub fn definition(&self) -> Value {
        match self {
            Tool::Builtin(t) => t.definition(),
            Tool::Mcp(m) => m.definition(),
        }
    }

    /// Counts against `max_writes`; an intent under `--dry-run`.
    pub fn is_write(&self) -> bool {
        match self {
            Tool::Builtin(t) => t.is_write(),
            Tool::Mcp(m) => m.write,
        }
    }

    pub fn is_noteworx(&self) -> bool {
        matches!(self, Tool::Builtin(t) if t.is_noteworx())
    }

    /// The tool named `name` among `tools`.
    pub fn find<'t>(tools: &'t [Tool], name: &str) -> Option<&'t Tool> {
        tools.iter().find(|t| t.name() == name)
    }

    /// `tools` for a message: their names comma-separated, or `none`.
    pub fn list(tools: &[Tool]) -> String {
        if tools.is_empty() {
            return "none".to_string();
        }
        tools.iter().map(Tool::name).collect::<Vec<_>>().join(", ")
    }
}
