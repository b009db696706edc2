//! `[agents.NAME]` profiles: a system prompt, a tool set and limits a task
//! picks by name (docs/tasks.md, "Profiles"), and the placeholders their
//! prompts may use.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::limits::{bounds, check_finite, check_range};
use super::locate::expand_home;
use super::value::resolve_file;

/// `[agents.NAME]`: a named profile a task picks with `agent = "NAME"`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAgent {
    pub(super) role_prompt: Option<String>,
    pub(super) tools: Option<Vec<String>>,
    pub(super) temperature: Option<f64>,
    pub(super) top_p: Option<f64>,
    pub(super) top_k: Option<u32>,
    pub(super) max_tokens: Option<u32>,
    pub(super) answer_style: Option<AnswerStyle>,
    pub(super) max_writes: Option<u32>,
    pub(super) output_schema: Option<PathBuf>,
}

/// How long answers should be: one sentence added to the system prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AnswerStyle {
    Concise,
    Balanced,
    Detailed,
}

impl AnswerStyle {
    pub fn sentence(self) -> &'static str {
        match self {
            AnswerStyle::Concise => "Keep the final answer as short as the task allows.",
            AnswerStyle::Balanced => "Give the final answer in a short paragraph.",
            AnswerStyle::Detailed => {
                "Give a full final answer, with the details and sources that matter."
            }
        }
    }
}

/// A resolved `[agents.NAME]` profile: the task's keys override these,
/// which override the config's.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentProfile {
    pub name: String,
    /// The system prompt, with `{{agent}}`, `{{task}}`, `{{date}}` and `{{tools}}` still in it.
    pub role_prompt: Option<String>,
    pub tools: Option<Vec<String>>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u32>,
    pub max_tokens: Option<u32>,
    pub answer_style: Option<AnswerStyle>,
    pub max_writes: Option<u32>,
    pub output_schema: Option<harness_base::schema::OutputSchema>,
}

/// The placeholders a role prompt may hold.
pub const PLACEHOLDERS: &[&str] = &["agent", "task", "date", "tools"];

/// Every `{{…}}` in `text`, trimmed.
pub fn placeholders(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find("{{") {
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else { break };
        out.push(after[..close].trim());
        rest = &after[close + 2..];
    }
    out
}

pub(super) fn resolve_agents(
    raw: std::collections::BTreeMap<String, RawAgent>,
    base: &Path,
    home: Option<&Path>,
    context_tokens: u32,
) -> Result<std::collections::BTreeMap<String, AgentProfile>, String> {
    raw.into_iter()
        .map(|(name, a)| {
            let at = format!("[agents.{name}]");
            if name.trim().is_empty() || name.chars().any(char::is_control) {
                return Err(format!("{at}: a profile needs a printable name"));
            }
            if let Some(p) = &a.role_prompt
                && let Some(bad) = placeholders(p).into_iter().find(|p| !PLACEHOLDERS.contains(p))
            {
                return Err(format!(
                    "{at} role_prompt: unknown placeholder {{{{{bad}}}}} (known: {{{{agent}}}}, {{{{task}}}}, {{{{date}}}}, {{{{tools}}}})"
                ));
            }
            if let Some(n) = a.max_tokens {
                check_range(&format!("{at} max_tokens"), u64::from(n), bounds::MAX_TOKENS)?;
                if context_tokens != 0 && u64::from(context_tokens) <= u64::from(n) + 256 {
                    return Err(format!(
                        "{at} max_tokens ({n}) leaves no room for the prompt in [limits] context_tokens ({context_tokens}); lower it or raise context_tokens"
                    ));
                }
            }
            if let Some(n) = a.max_writes {
                check_range(&format!("{at} max_writes"), u64::from(n), bounds::MAX_WRITES)?;
            }
            check_finite(&format!("{at} temperature"), a.temperature)?;
            check_finite(&format!("{at} top_p"), a.top_p)?;
            let output_schema = a
                .output_schema
                .map(|p| {
                    let p = expand_home(&p, home, &format!("{at} output_schema"))?;
                    harness_base::schema::OutputSchema::load(&resolve_file(base, &p))
                        .map_err(|e| format!("{at} output_schema: {e}"))
                })
                .transpose()?;
            let profile = AgentProfile {
                name: name.clone(),
                role_prompt: a.role_prompt,
                tools: a.tools,
                temperature: a.temperature,
                top_p: a.top_p,
                top_k: a.top_k,
                max_tokens: a.max_tokens,
                answer_style: a.answer_style,
                max_writes: a.max_writes,
                output_schema,
            };
            Ok((name, profile))
        })
        .collect()
}
