//! The seven built-in tools (docs/tools.md, "Built-in tools") and those of
//! MCP servers ("Tools from MCP servers" there; [`mcp`]): names, the short
//! descriptions a small model reads, parameters, argument validation, and
//! dispatch — or a recorded result instead ([`RecordedResults`]).
//!
//! Each tool's parameters are declared once ([`Param`]); that table yields
//! both the JSON schema sent to the model and the validator, which names
//! every problem (missing, wrong type, unknown key) in one message so a model
//! can fix its call in one go. Validated arguments become a typed [`Call`].
//! Every failure here is a tool result for the model, never a crash.

mod catalog;
pub mod mcp;
pub mod noteworx;
pub mod text;
mod validate;
pub mod webfetch;

pub use catalog::{Kind, Param, SearchMode, Tool, ToolName};
pub use text::ReadOn;
pub use validate::{Call, validate};

use chrono::{DateTime, Utc};
use std::borrow::Cow;

use serde_json::Value;

/// What a tool gave back, before the loop cuts it to size.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub text: String,
    pub is_error: bool,
    /// Extra facts for `tools.jsonl` (a dry-run intent, a duplicate skipped).
    pub detail: Option<Value>,
    /// The service refused the setup (a notes token): the run stops with
    /// this diagnosis (docs/operating.md, "Setup faults").
    pub setup_fault: Option<String>,
    /// The result is one page of a longer text, which goes on from here.
    pub read_on: Option<ReadOn>,
}

impl ToolOutput {
    pub fn ok(text: impl Into<String>) -> Self {
        ToolOutput {
            text: text.into(),
            is_error: false,
            detail: None,
            setup_fault: None,
            read_on: None,
        }
    }
    pub fn error(text: impl Into<String>) -> Self {
        ToolOutput {
            text: text.into(),
            is_error: true,
            detail: None,
            setup_fault: None,
            read_on: None,
        }
    }
    /// A page of a longer text, as [`text::page`] cut it.
    pub(crate) fn page(page: text::Page, is_error: bool) -> Self {
        let mut out = if is_error {
            Self::error(page.text)
        } else {
            Self::ok(page.text)
        };
        out.read_on = page.read_on;
        out
    }
    pub(crate) fn with_detail(mut self, detail: Value) -> Self {
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
    pub redactor: std::sync::Arc<harness_config::Redactor>,
}

/// The configured tool bodies, built once per run and shared by all tasks.
#[derive(Debug, Clone, Default)]
pub struct Toolbox {
    pub webfetch: Option<webfetch::Webfetch>,
    pub noteworx: Option<noteworx::Noteworx>,
    /// A replay or a resumed task: calls are answered from a recorded
    /// run first, not run.
    pub recorded: Option<std::sync::Arc<RecordedResults>>,
    /// The configured MCP servers, started as tasks need them.
    pub mcp: Option<std::sync::Arc<mcp::McpServers>>,
}

/// The tool results of a recorded run, by turn and call id: the tools'
/// seam of answering from records (`records::answering` builds them, for
/// a replay and for a task resuming from its records), answered instead of
/// running the tools.
#[derive(Debug)]
pub struct RecordedResults {
    results: std::collections::HashMap<(u32, String), ToolOutput>,
    /// From this turn on, tools run for real (`replay --from-turn`, or the
    /// turn after the last recorded reply of a resumed task).
    live_from_turn: Option<u32>,
    /// A call with no recorded result runs for real (a resumed task: the
    /// process died before its result was written); in a replay it is an
    /// error result.
    missing_run_live: bool,
}

impl RecordedResults {
    pub fn new(
        results: std::collections::HashMap<(u32, String), ToolOutput>,
        live_from_turn: Option<u32>,
        missing_run_live: bool,
    ) -> Self {
        RecordedResults {
            results,
            live_from_turn,
            missing_run_live,
        }
    }

    /// The recorded answer to call `call_id` of `turn`, when the recording
    /// gives one; `None` when the call runs for real.
    fn answer(&self, turn: u32, call_id: &str) -> Option<Cow<'_, ToolOutput>> {
        if self.live_from_turn.is_some_and(|n| turn >= n) {
            return None;
        }
        match self.results.get(&(turn, call_id.to_string())) {
            Some(output) => Some(Cow::Borrowed(output)),
            None if self.missing_run_live => None,
            None => Some(Cow::Owned(ToolOutput::error(format!(
                "replay: the recording has no result for call {call_id}"
            )))),
        }
    }
}

impl Toolbox {
    /// The tools offered to the model (before a task narrows them).
    pub fn offered(&self) -> Vec<Tool> {
        offered(self.webfetch.is_some(), self.noteworx.is_some())
    }

    /// The tools a configuration offers, without building any client.
    pub fn offered_by(cfg: &harness_config::Config) -> Vec<Tool> {
        offered(cfg.webfetch.is_some(), cfg.noteworx.is_some())
    }

    /// Tool names in `[agents.NAME]` profiles that are no tool at all (a
    /// typo): a configuration error, one message each.
    pub fn unknown_profile_tools(cfg: &harness_config::Config) -> Vec<String> {
        profile_tools(cfg)
            .filter_map(|(name, t)| {
                if ToolName::parse(t).is_some() {
                    return None;
                }
                Some(match mcp::configured(&cfg.mcp, t) {
                    Some(Ok(_)) => return None,
                    Some(Err(why)) => format!("[agents.{name}] tools: {why}"),
                    None => format!(
                        "[agents.{name}] tools: {t:?} is not a tool (tools: {}, or SERVER__tool of an [mcp.servers.SERVER])",
                        ToolName::list(&ToolName::ALL)
                    ),
                })
            })
            .collect()
    }

    /// Tools profiles name that this configuration does not offer (noteworx
    /// not configured, say): a task naming such a profile is invalid.
    pub fn unoffered_profile_tools(
        cfg: &harness_config::Config,
        used: impl Fn(&str) -> bool,
    ) -> Vec<String> {
        let offered = Self::offered_by(cfg);
        profile_tools(cfg)
            .filter(|(name, _)| used(name))
            .filter(|(_, t)| {
                ToolName::parse(t).is_some_and(|t| !offered.contains(&Tool::Builtin(t)))
            })
            .map(|(name, t)| {
                format!(
                    "[agents.{name}] tools: {t:?} is not offered by this configuration (offered: {}): a task naming this profile is invalid",
                    Tool::list(&offered)
                )
            })
            .collect()
    }

    /// Whether call `call_id` of `turn` is answered from a recording
    /// rather than run.
    pub fn answers_from_record(&self, turn: u32, call_id: &str) -> bool {
        self.recorded_answer(turn, call_id).is_some()
    }

    fn recorded_answer(&self, turn: u32, call_id: &str) -> Option<Cow<'_, ToolOutput>> {
        self.recorded.as_ref()?.answer(turn, call_id)
    }

    /// Runs a validated call. Never panics and never returns a Rust error:
    /// every failure is an error result for the model.
    pub async fn run(&self, call: &Call, ctx: &CallContext) -> ToolOutput {
        if let Some(output) = self.recorded_answer(ctx.turn, &ctx.call_id) {
            return output.into_owned();
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
            Call::Mcp { tool, arguments } if tool.write && ctx.dry_run => ToolOutput::ok(format!(
                "Dry run: {} counts as called (nothing was changed). It is done: do not call it again. {}",
                tool.name,
                text::AFTER_WRITE
            ))
            .with_detail(serde_json::json!({
                "dry_run": true,
                "intent": {"server": tool.server, "tool": tool.tool, "arguments": arguments},
            })),
            Call::Mcp { tool, arguments } => match &self.mcp {
                Some(servers) => servers.call(tool, arguments.clone()).await,
                None => not_configured("MCP"),
            },
            _ => match &self.noteworx {
                Some(n) => n.run(call, ctx).await,
                None => not_configured("noteworx"),
            },
        }
    }
}

/// Every (profile name, tool name) the profiles list.
fn profile_tools(cfg: &harness_config::Config) -> impl Iterator<Item = (&str, &str)> {
    cfg.agents.iter().flat_map(|(name, p)| {
        p.tools
            .iter()
            .flatten()
            .map(move |t| (name.as_str(), t.as_str()))
    })
}

fn offered(webfetch: bool, noteworx: bool) -> Vec<Tool> {
    ToolName::ALL
        .into_iter()
        .filter(|t| if t.is_noteworx() { noteworx } else { webfetch })
        .map(Tool::Builtin)
        .collect()
}

/// Describes a call compactly for logs and placeholders: `name {"k":"v"}`.
pub fn describe_call(name: &str, arguments: &str) -> String {
    format!("{name} {}", harness_base::text::clip(arguments, 160))
}

#[cfg(test)]
mod tests;
