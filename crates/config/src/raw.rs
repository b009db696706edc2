//! The file as written: raw sections with exactly the keys of
//! docs/configuration.md (an unknown key is an error), their defaults, `--set`
//! rewrites, and errors located at their line.

use std::path::PathBuf;

use serde::Deserialize;

use super::PromptAids;
use super::limits::{Limits, Retention, SpendLimits};
use super::profiles::RawAgent;
use super::secrets::setting_value;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawConfig {
    pub(super) endpoint: RawEndpoint,
    pub(super) runpod: RawRunpod,
    pub(super) openai: RawOpenai,
    pub(super) paths: RawPaths,
    pub(super) limits: Limits,
    pub(super) model: RawModel,
    pub(super) tools: RawTools,
    pub(super) prompt: RawPrompt,
    pub(super) metrics: RawMetrics,
    pub(super) retention: Retention,
    pub(super) budget: SpendLimits,
    pub(super) schedule: RawSchedule,
    pub(super) agents: std::collections::BTreeMap<String, RawAgent>,
    pub(super) mcp: super::mcp::RawMcp,
    pub(super) notify: RawNotify,
    pub(super) traces: super::traces::RawTraces,
    /// `[mail]`: absent when the file has no such section.
    pub(super) mail: Option<super::mail::RawMail>,
    pub(super) tls: super::tls::RawTls,
}

/// `[notify]`: who is told how each run ended (docs/operating.md, "Notify").
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNotify {
    /// A healthchecks.io-style ping URL: `/start` when a run starts, the
    /// URL itself on exit 0, `/<exit code>` otherwise.
    pub(super) ping_url: Option<String>,
    /// The environment variable (or systemd credential) holding `ping_url`
    /// instead, when the URL holds a key.
    pub(super) ping_url_env: Option<String>,
    /// A URL that gets the run's result when it exits non-zero.
    pub(super) on_failure_url: Option<String>,
    /// The environment variable (or systemd credential) holding
    /// `on_failure_url` instead (a Slack webhook's token).
    pub(super) on_failure_url_env: Option<String>,
    /// How `on_failure_url`'s body is written.
    #[serde(default)]
    pub(super) on_failure_format: FailureFormat,
    /// Who gets the digest by mail (through `[mail]`).
    #[serde(default)]
    pub(super) digest_to: Vec<String>,
    /// When the digest goes out each day, `HH:MM` in `[schedule] timezone`.
    pub(super) digest_at: Option<String>,
    /// A failed run's result is mailed to `digest_to` too.
    #[serde(default)]
    pub(super) on_failure_mail: bool,
}

/// How a failed run's result is written for `on_failure_url`
/// (docs/operating.md, "Notify").
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailureFormat {
    /// The JSON report (the default).
    #[default]
    Json,
    /// The same facts as plain text.
    Text,
    /// `{"text": …}`, which Slack, Mattermost and Rocket.Chat incoming
    /// webhooks take.
    Slack,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMetrics {
    /// The Prometheus textfile written after each run; `""` disables it.
    pub(super) textfile: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawEndpoint {
    /// `runpod` (default) or `openai`.
    pub(super) kind: EndpointKind,
}

/// Which wire protocol the endpoint speaks.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EndpointKind {
    /// RunPod serverless: `/runsync` envelope, job polling.
    #[default]
    Runpod,
    /// Any OpenAI-compatible `/chat/completions` (llama-server, vLLM, Ollama).
    Openai,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawRunpod {
    pub(super) endpoint_id: String,
    pub(super) api_key_env: String,
    pub(super) base_url: String,
    pub(super) endpoint_url: String,
    pub(super) poll_interval_ms: u64,
    pub(super) request_timeout_secs: u64,
}

impl Default for RawRunpod {
    fn default() -> Self {
        RawRunpod {
            endpoint_id: String::new(),
            api_key_env: "RUNPOD_API_KEY".into(),
            base_url: "https://api.runpod.ai/v2".into(),
            endpoint_url: String::new(),
            poll_interval_ms: 1000,
            request_timeout_secs: 120,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawOpenai {
    pub(super) base_url: String,
    pub(super) api_key_env: String,
    pub(super) model: String,
    pub(super) request_timeout_secs: u64,
}

impl Default for RawOpenai {
    fn default() -> Self {
        RawOpenai {
            base_url: String::new(),
            api_key_env: String::new(),
            model: String::new(),
            request_timeout_secs: 300,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawPaths {
    pub(super) inbox: PathBuf,
    pub(super) done: PathBuf,
    pub(super) failed: PathBuf,
    pub(super) logs: PathBuf,
    pub(super) recurring: PathBuf,
}

impl Default for RawPaths {
    fn default() -> Self {
        RawPaths {
            inbox: "tasks/inbox".into(),
            done: "tasks/done".into(),
            failed: "tasks/failed".into(),
            logs: "logs".into(),
            recurring: "tasks/recurring".into(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawModel {
    pub(super) temperature: Option<f64>,
    pub(super) top_p: Option<f64>,
    pub(super) top_k: Option<u32>,
    pub(super) max_tokens: u32,
    pub(super) replay_thinking: ReplayThinking,
    pub(super) chat_template_kwargs: toml::Table,
    pub(super) extra: toml::Table,
}

impl Default for RawModel {
    fn default() -> Self {
        let mut kwargs = toml::Table::new();
        kwargs.insert("enable_thinking".into(), toml::Value::Boolean(true));
        RawModel {
            temperature: Some(1.0),
            top_p: Some(0.95),
            top_k: Some(64),
            max_tokens: 2048,
            replay_thinking: ReplayThinking::Strip,
            chat_template_kwargs: kwargs,
            extra: toml::Table::new(),
        }
    }
}

/// What happens to the model's thinking when an assistant turn is replayed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplayThinking {
    /// Drop `reasoning_content` and inline thought blocks (the default).
    #[default]
    Strip,
    /// Send `reasoning_content` back on tool-call turns.
    Keep,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawTools {
    pub(super) webfetch: RawWebfetch,
    pub(super) noteworx: RawNoteworx,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawWebfetch {
    pub(super) enabled: bool,
    pub(super) timeout_secs: u64,
    pub(super) max_bytes: u64,
    pub(super) allow_private: bool,
    pub(super) allow_hosts: Vec<String>,
    pub(super) deny_hosts: Vec<String>,
    /// `[tls] ca_file` is trusted for fetched pages too.
    pub(super) use_ca_file: bool,
}

impl Default for RawWebfetch {
    fn default() -> Self {
        RawWebfetch {
            enabled: true,
            timeout_secs: 20,
            max_bytes: 2_000_000,
            allow_private: false,
            allow_hosts: Vec::new(),
            deny_hosts: Vec::new(),
            use_ca_file: false,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawNoteworx {
    pub(super) enabled: bool,
    pub(super) base_url: String,
    pub(super) token_env: String,
    pub(super) agent_name: String,
    pub(super) timeout_secs: u64,
}

impl Default for RawNoteworx {
    fn default() -> Self {
        RawNoteworx {
            enabled: true,
            base_url: String::new(),
            token_env: "NOTEWORX_TOKEN".into(),
            agent_name: "default-agent".into(),
            timeout_secs: 20,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPrompt {
    pub(super) system: Option<String>,
    pub(super) tool_preamble: Option<bool>,
    pub(super) call_example: Option<bool>,
    pub(super) argument_hints: Option<bool>,
    pub(super) result_note: Option<bool>,
}

impl RawPrompt {
    /// The aids it turns on or off, each unset one at its default.
    pub(super) fn aids(&self) -> PromptAids {
        let or = |set: Option<bool>, default: bool| set.unwrap_or(default);
        let d = PromptAids::DEFAULT;
        PromptAids {
            tool_preamble: or(self.tool_preamble, d.tool_preamble),
            call_example: or(self.call_example, d.call_example),
            argument_hints: or(self.argument_hints, d.argument_hints),
            result_note: or(self.result_note, d.result_note),
        }
    }
}

/// Sets `a.b.c = value` in a TOML table, making the tables on the way.
pub(super) fn set_dotted(table: &mut toml::Table, key: &str, value: &str) -> Result<(), String> {
    let parts: Vec<&str> = key.split('.').collect();
    if parts.len() < 2 || parts.iter().any(|p| p.trim().is_empty()) {
        return Err(format!(
            "{key:?} is not a config key: write SECTION.KEY, e.g. model.temperature"
        ));
    }
    let value = setting_value(value);
    let (last, sections) = parts.split_last().ok_or("empty key")?;
    let mut here = table;
    for section in sections {
        let entry = here
            .entry(section.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        here = entry
            .as_table_mut()
            .ok_or_else(|| format!("{key:?}: {section} is not a section"))?;
    }
    here.insert(last.to_string(), value);
    Ok(())
}

/// A resolution problem (a bound, a missing key) whose message starts with
/// `[section] key`, prefixed with the key's line when the file has it, as a
/// type error is: `line 4: [limits] max_turns = 0 is below its minimum, 1`.
pub(super) fn located(text: &str, message: String) -> String {
    let Some(rest) = message.strip_prefix('[') else {
        return message;
    };
    let Some((section, rest)) = rest.split_once(']') else {
        return message;
    };
    let key: String = rest
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .collect();
    let path: Vec<&str> = section.split('.').chain([key.as_str()]).collect();
    match key_line(text, &path) {
        Some(line) => format!("line {line}: {message}"),
        None => message,
    }
}

/// The 1-based line where the dotted `path` (tables, then the key) is set.
pub(super) fn key_line(text: &str, path: &[&str]) -> Option<usize> {
    let doc = toml::de::DeTable::parse(text).ok()?;
    let (last, tables) = path.split_last()?;
    let mut table = doc.get_ref();
    for name in tables {
        match table.get(*name).map(|v| v.get_ref()) {
            Some(toml::de::DeValue::Table(t)) => table = t,
            _ => return None,
        }
    }
    let (key, _) = table.get_key_value(*last)?;
    Some(harness_base::text::line_of(text, key.span().start))
}

/// Deserializes TOML text; `Err` is `(line, message naming the key)`.
pub fn deserialize_toml<T: serde::de::DeserializeOwned>(
    text: &str,
) -> Result<T, (Option<usize>, String)> {
    let de = toml::Deserializer::parse(text).map_err(|e| {
        let line = e.span().map(|s| harness_base::text::line_of(text, s.start));
        (line, e.message().trim().to_string())
    })?;
    serde_path_to_error::deserialize(de).map_err(|e| harness_base::text::toml_problem(&e, text))
}

/// `[schedule]`: how recurring tasks' schedules are read.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawSchedule {
    /// An IANA time zone name.
    pub(super) timezone: String,
}

impl Default for RawSchedule {
    fn default() -> Self {
        RawSchedule {
            timezone: "UTC".into(),
        }
    }
}

#[cfg(test)]
mod tests;
