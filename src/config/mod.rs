//! Configuration (SPEC §3): the TOML file is parsed into raw sections that
//! reject unknown keys, then resolved once into [`Config`]: defaults applied,
//! relative paths made absolute against the file's own folder, secrets read
//! from the environment variables the file names.
//!
//! Nothing here reads the process environment directly: callers pass an
//! `env` lookup, so tests never mutate global state.

pub mod setup;

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Map, Value};

/// The config file used when neither `--config` nor `AGENT_HARNESS_CONFIG` is given.
pub const DEFAULT_CONFIG_FILE: &str = "agent.toml";

/// A problem with the configuration: always exit code 2, nothing was run.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ConfigError {
    pub path: String,
    pub message: String,
}

impl ConfigError {
    fn new(path: &Path, message: impl Into<String>) -> Self {
        ConfigError {
            path: path.display().to_string(),
            message: message.into(),
        }
    }
}

/// A secret read from the environment. Its `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// Replaces every secret value with `***`: the one redactor for records,
/// tool results and diagnostic lines (SPEC §8, §12.8).
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    secrets: Vec<Secret>,
}

impl Redactor {
    pub fn new(secrets: Vec<Secret>) -> Self {
        // A value this short would make `***` of ordinary text.
        let secrets = secrets.into_iter().filter(|s| s.0.len() >= 4).collect();
        Redactor { secrets }
    }

    /// `text` with every secret replaced; without a copy when it holds none.
    pub fn redact(&self, text: String) -> String {
        let mut out = text;
        for s in &self.secrets {
            if out.contains(&s.0) {
                out = out.replace(&s.0, "***");
            }
        }
        out
    }

    /// As [`Redactor::redact`], borrowing when nothing changes.
    pub fn redact_str<'a>(&self, text: &'a str) -> std::borrow::Cow<'a, str> {
        if self.secrets.iter().any(|s| text.contains(&s.0)) {
            std::borrow::Cow::Owned(self.redact(text.to_string()))
        } else {
            std::borrow::Cow::Borrowed(text)
        }
    }
}

// ---------------------------------------------------------------------------
// Raw file sections: exactly the SPEC's keys, nothing else.

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    endpoint: RawEndpoint,
    #[serde(default)]
    runpod: RawRunpod,
    #[serde(default)]
    openai: RawOpenai,
    #[serde(default)]
    paths: RawPaths,
    #[serde(default)]
    limits: Limits,
    #[serde(default)]
    model: RawModel,
    #[serde(default)]
    tools: RawTools,
    #[serde(default)]
    prompt: RawPrompt,
    #[serde(default)]
    metrics: RawMetrics,
    #[serde(default)]
    agents: std::collections::BTreeMap<String, RawAgent>,
}

/// `[agents.NAME]`: a named profile a task picks with `agent = "NAME"`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAgent {
    role_prompt: Option<String>,
    tools: Option<Vec<String>>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    top_k: Option<u32>,
    max_tokens: Option<u32>,
    answer_style: Option<AnswerStyle>,
    max_writes: Option<u32>,
    output_schema: Option<PathBuf>,
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
    pub output_schema: Option<crate::base::schema::OutputSchema>,
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

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetrics {
    /// The Prometheus textfile written after each run; `""` disables it.
    textfile: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEndpoint {
    /// `runpod` (default) or `openai`.
    #[serde(default)]
    kind: EndpointKind,
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
struct RawRunpod {
    endpoint_id: String,
    api_key_env: String,
    base_url: String,
    endpoint_url: String,
    poll_interval_ms: u64,
    request_timeout_secs: u64,
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
struct RawOpenai {
    base_url: String,
    api_key_env: String,
    model: String,
    request_timeout_secs: u64,
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
struct RawPaths {
    inbox: PathBuf,
    done: PathBuf,
    failed: PathBuf,
    logs: PathBuf,
}

impl Default for RawPaths {
    fn default() -> Self {
        RawPaths {
            inbox: "tasks/inbox".into(),
            done: "tasks/done".into(),
            failed: "tasks/failed".into(),
            logs: "logs".into(),
        }
    }
}

/// `[limits]`: the bounds every task runs within. Each has a floor and a
/// ceiling ([`bounds`]); a value outside them is a configuration error.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Model calls per task.
    pub max_turns: u32,
    /// Wall-clock seconds per task, retries and polling included.
    pub max_wall_secs: u64,
    /// Prompt + completion tokens summed over a task.
    pub max_total_tokens: u64,
    /// Every tool result is cut to this many characters, with a note.
    pub max_tool_result_chars: usize,
    /// The model's context window in tokens; 0 = ask the server or do not manage.
    pub context_tokens: u32,
    /// Tasks run at once.
    pub concurrency: usize,
    /// Runs a retryable task gets before it moves to `failed/`.
    pub max_attempts: u32,
    /// Tool calls run from one reply; the rest are answered "not run".
    pub max_calls_per_turn: u32,
    /// Write-tool calls run per task; the rest are answered "not run".
    pub max_writes: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_turns: 8,
            max_wall_secs: 600,
            max_total_tokens: 60_000,
            max_tool_result_chars: 6000,
            context_tokens: 8192,
            concurrency: 1,
            max_attempts: 3,
            max_calls_per_turn: 8,
            max_writes: 5,
        }
    }
}

/// Floors and ceilings of every number a person sets (SPEC §12.2), as
/// inclusive `(min, max)` pairs. The config refuses a value outside them
/// (exit 2); a task file doing so is an invalid task.
pub mod bounds {
    pub const MAX_TURNS: (u64, u64) = (1, 1000);
    pub const MAX_WALL_SECS: (u64, u64) = (1, 86_400);
    pub const MAX_TOTAL_TOKENS: (u64, u64) = (1, 1_000_000_000);
    pub const MAX_TOKENS: (u64, u64) = (1, 1_000_000);
    pub const MAX_TOOL_RESULT_CHARS: (u64, u64) = (200, 1_000_000);
    pub const CONTEXT_TOKENS: (u64, u64) = (0, 10_000_000);
    pub const CONCURRENCY: (u64, u64) = (1, 256);
    pub const MAX_ATTEMPTS: (u64, u64) = (1, 100);
    pub const MAX_CALLS_PER_TURN: (u64, u64) = (1, 64);
    pub const MAX_WRITES: (u64, u64) = (0, 1000);
    pub const TIMEOUT_SECS: (u64, u64) = (1, 3600);
    pub const POLL_INTERVAL_MS: (u64, u64) = (50, 60_000);
    /// `[tools.webfetch] max_bytes`: no page is read past what an endpoint body may hold.
    pub const WEBFETCH_MAX_BYTES: (u64, u64) = (1024, 32 * 1024 * 1024);
}

/// `Err` names `key` when `value` is outside `(min, max)`.
pub fn check_range(key: &str, value: u64, (min, max): (u64, u64)) -> Result<(), String> {
    if value < min {
        Err(format!("{key} = {value} is below its minimum, {min}"))
    } else if value > max {
        Err(format!("{key} = {value} is above its ceiling, {max}"))
    } else {
        Ok(())
    }
}

/// `Err` names `key` when `value` is `nan` or infinite.
pub fn check_finite(key: &str, value: Option<f64>) -> Result<(), String> {
    match value {
        Some(v) if !v.is_finite() => Err(format!("{key} = {v} is not a finite number")),
        _ => Ok(()),
    }
}

impl Limits {
    /// Every limit within its bounds; `Err` names the first that is not.
    fn check(&self) -> Result<(), String> {
        let u = |v: usize| u64::try_from(v).unwrap_or(u64::MAX);
        for (key, value, range) in [
            ("max_turns", u64::from(self.max_turns), bounds::MAX_TURNS),
            ("max_wall_secs", self.max_wall_secs, bounds::MAX_WALL_SECS),
            (
                "max_total_tokens",
                self.max_total_tokens,
                bounds::MAX_TOTAL_TOKENS,
            ),
            (
                "max_tool_result_chars",
                u(self.max_tool_result_chars),
                bounds::MAX_TOOL_RESULT_CHARS,
            ),
            (
                "context_tokens",
                u64::from(self.context_tokens),
                bounds::CONTEXT_TOKENS,
            ),
            ("concurrency", u(self.concurrency), bounds::CONCURRENCY),
            (
                "max_attempts",
                u64::from(self.max_attempts),
                bounds::MAX_ATTEMPTS,
            ),
            (
                "max_calls_per_turn",
                u64::from(self.max_calls_per_turn),
                bounds::MAX_CALLS_PER_TURN,
            ),
            ("max_writes", u64::from(self.max_writes), bounds::MAX_WRITES),
        ] {
            check_range(&format!("[limits] {key}"), value, range)?;
        }
        Ok(())
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawModel {
    temperature: Option<f64>,
    top_p: Option<f64>,
    top_k: Option<u32>,
    max_tokens: u32,
    replay_thinking: ReplayThinking,
    chat_template_kwargs: toml::Table,
    extra: toml::Table,
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
#[serde(deny_unknown_fields)]
struct RawTools {
    #[serde(default)]
    webfetch: RawWebfetch,
    #[serde(default)]
    noteworx: RawNoteworx,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawWebfetch {
    enabled: bool,
    timeout_secs: u64,
    max_bytes: u64,
    allow_private: bool,
    allow_hosts: Vec<String>,
    deny_hosts: Vec<String>,
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
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawNoteworx {
    enabled: bool,
    base_url: String,
    token_env: String,
    agent_name: String,
    timeout_secs: u64,
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
struct RawPrompt {
    system: Option<String>,
}

// ---------------------------------------------------------------------------
// The resolved configuration.

/// The whole configuration, resolved once at start-up and passed down.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it came from (for messages).
    pub path: PathBuf,
    pub endpoint: EndpointConfig,
    pub paths: Paths,
    pub limits: Limits,
    pub model: ModelConfig,
    /// `None` when webfetch is disabled.
    pub webfetch: Option<WebfetchConfig>,
    /// `None` when noteworx has no `base_url` or is disabled.
    pub noteworx: Option<NoteworxConfig>,
    /// `[prompt] system`; the built-in prompt is used when absent.
    pub system_prompt: Option<String>,
    /// `[metrics] textfile`: where each run's Prometheus figures go; `None` when disabled.
    pub metrics_textfile: Option<PathBuf>,
    /// `[agents.NAME]` profiles, by name.
    pub agents: std::collections::BTreeMap<String, AgentProfile>,
    /// Secret-looking `--set` values (`eval`): redacted like the others.
    pub setting_secrets: Vec<Secret>,
}

#[derive(Debug, Clone)]
pub struct EndpointConfig {
    pub kind: EndpointKind,
    /// For `openai`: `{base_url}`; for `runpod`: `{base_url}/{endpoint_id}` or `endpoint_url`.
    /// Every route hangs off this URL, without a trailing slash.
    pub base_url: String,
    pub api_key: Option<Secret>,
    /// The variable `api_key_env` names ("" when no key is configured),
    /// named when the key is refused.
    pub api_key_env: String,
    /// Sent as `"model"` when set (`openai` kind only).
    pub model: Option<String>,
    pub request_timeout_secs: u64,
    pub poll_interval_ms: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Paths {
    pub inbox: PathBuf,
    pub done: PathBuf,
    pub failed: PathBuf,
    pub logs: PathBuf,
}

impl Paths {
    /// The folder holding the inbox: the lock and the attempt-count state live here.
    pub fn state_dir(&self) -> PathBuf {
        self.inbox
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u32>,
    pub max_tokens: u32,
    pub replay_thinking: ReplayThinking,
    pub chat_template_kwargs: Map<String, Value>,
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct WebfetchConfig {
    pub timeout_secs: u64,
    pub max_bytes: u64,
    pub allow_private: bool,
    pub allow_hosts: Vec<String>,
    pub deny_hosts: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct NoteworxConfig {
    pub base_url: String,
    pub token: Secret,
    /// The variable the token came from, named in messages to the operator.
    pub token_env: String,
    pub agent_name: String,
    pub timeout_secs: u64,
}

/// Request fields the harness owns; `[model.extra]` may not set them.
const RESERVED_EXTRA_KEYS: &[&str] = &["messages", "tools", "stream", "chat_template_kwargs"];

impl Config {
    /// Reads and resolves the config file. `env` looks up environment variables.
    pub fn load(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        Self::load_as(
            path,
            &Secrets {
                env,
                offline: false,
            },
        )
    }

    /// Reads the config file with `KEY=VALUE` overrides applied (`eval
    /// --set` / `--matrix`). KEY is a dotted path (`model.temperature`,
    /// `limits.max_turns`, `tools.webfetch.enabled`); VALUE is read as a TOML
    /// value, or as a string when it is not one (`keep`).
    pub fn load_with(
        path: &Path,
        env: &dyn Fn(&str) -> Option<String>,
        overrides: &[(String, String)],
    ) -> Result<Config, ConfigError> {
        if overrides.is_empty() {
            return Self::load(path, env);
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new(path, format!("cannot read the config file: {e}")))?;
        let mut table: toml::Table =
            toml::from_str(&text).map_err(|e| ConfigError::new(path, e.message().to_string()))?;
        for (key, value) in overrides {
            set_dotted(&mut table, key, value).map_err(|m| ConfigError::new(path, m))?;
        }
        let text = toml::to_string(&table).map_err(|e| ConfigError::new(path, e.to_string()))?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let mut cfg = Self::parse(&text, path, &base, env).map_err(|mut e| {
            // A line of the rewritten text is no line of the file.
            let message = match e.message.split_once(": ") {
                Some((at, rest)) if at.starts_with("line ") => rest,
                _ => e.message.as_str(),
            };
            e.message = format!("{message} (with the --set / --matrix values applied)");
            e
        })?;
        cfg.setting_secrets = setting_secrets(overrides);
        Ok(cfg)
    }

    /// Parses config text; relative paths resolve against `base`.
    pub fn parse(
        text: &str,
        path: &Path,
        base: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        Self::parse_as(
            text,
            path,
            base,
            &Secrets {
                env,
                offline: false,
            },
        )
    }

    /// Reads the config file for a command that contacts nothing (`runs`,
    /// `report`, `replay` without `--from-turn`): a secret that is not set
    /// is not an error, and the service that needs it is never called.
    pub fn load_offline(
        path: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        Self::load_as(path, &Secrets { env, offline: true })
    }

    fn load_as(path: &Path, secrets: &Secrets<'_>) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError::new(
                path,
                format!("cannot read the config file: {e} (set --config or AGENT_HARNESS_CONFIG)"),
            )
        })?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Self::parse_as(&text, path, &base, secrets)
    }

    fn parse_as(
        text: &str,
        path: &Path,
        base: &Path,
        secrets: &Secrets<'_>,
    ) -> Result<Config, ConfigError> {
        let raw: RawConfig = deserialize_toml(text).map_err(|(line, m)| {
            ConfigError::new(
                path,
                match line {
                    Some(l) => format!("line {l}: {m}"),
                    None => m,
                },
            )
        })?;
        let err = |m: String| ConfigError::new(path, located(text, m));
        let limits = raw.limits;
        limits.check().map_err(err)?;
        let model = resolve_model(raw.model, limits.context_tokens).map_err(err)?;
        let paths = resolve_paths(&raw.paths, base);
        let agents = resolve_agents(raw.agents, base, limits.context_tokens).map_err(err)?;
        let metrics_textfile = match raw.metrics.textfile {
            None => Some(paths.logs.join("agent-harness.prom")),
            Some(p) if p.as_os_str().is_empty() => None,
            Some(p) if p.is_absolute() => Some(p),
            Some(p) => Some(base.join(p)),
        };
        Ok(Config {
            path: path.to_path_buf(),
            endpoint: resolve_endpoint(&raw.endpoint, &raw.runpod, &raw.openai, secrets)
                .map_err(err)?,
            paths,
            limits,
            model,
            webfetch: resolve_webfetch(raw.tools.webfetch).map_err(err)?,
            noteworx: resolve_noteworx(raw.tools.noteworx, secrets).map_err(err)?,
            system_prompt: raw.prompt.system.filter(|s| !s.trim().is_empty()),
            metrics_textfile,
            agents,
            setting_secrets: Vec::new(),
        })
    }

    /// The redactor for every secret of this configuration.
    pub fn redactor(&self) -> Redactor {
        Redactor::new(self.secrets())
    }

    /// Every secret value the records must never contain.
    pub fn secrets(&self) -> Vec<Secret> {
        self.endpoint
            .api_key
            .iter()
            .chain(self.noteworx.as_ref().map(|n| &n.token))
            .chain(&self.setting_secrets)
            .cloned()
            .collect()
    }
}

/// Whether a config key names a secret: one of its words (split at `_`,
/// `-` and `.`) is `key`, `token`, `password`, … — `api_key`, `auth_token`,
/// but not `max_tokens` or `keep`.
fn secret_key(key: &str) -> bool {
    const WORDS: &[&str] = &[
        "key",
        "apikey",
        "token",
        "password",
        "passwd",
        "secret",
        "auth",
        "credential",
        "credentials",
        "bearer",
    ];
    key.to_ascii_lowercase()
        .split(['_', '-', '.'])
        .any(|w| WORDS.contains(&w))
}

/// The secrets in a `--set KEY=VALUE` (SPEC §21), read the way the config
/// reads the value: each string under a secret-looking key (however deep
/// in a table), and the user and password of each URL.
fn value_secrets(key: &str, value: &toml::Value, out: &mut Vec<String>) {
    match value {
        toml::Value::String(s) => {
            if secret_key(key) {
                out.push(s.clone());
            }
            if let Ok(u) = url::Url::parse(s)
                && (!u.username().is_empty() || u.password().is_some())
            {
                out.push(s.clone());
                out.extend(u.password().map(str::to_string));
                out.push(u.username().to_string());
            }
        }
        toml::Value::Table(t) => {
            for (k, v) in t {
                value_secrets(&format!("{key}.{k}"), v, out);
            }
        }
        toml::Value::Array(a) => a.iter().for_each(|v| value_secrets(key, v, out)),
        _ => {}
    }
}

/// The secrets among `--set` / `--matrix` values, as `eval` applies them.
pub fn setting_secrets(overrides: &[(String, String)]) -> Vec<Secret> {
    let mut out = Vec::new();
    for (key, value) in overrides {
        value_secrets(key, &setting_value(value), &mut out);
    }
    out.into_iter()
        .filter(|s| !s.is_empty())
        .map(Secret::new)
        .collect()
}

/// Whether a `--set` value is shown as `***` in `eval.json` and the table.
pub fn is_secret_setting(key: &str, value: &str) -> bool {
    let mut out = Vec::new();
    value_secrets(key, &setting_value(value), &mut out);
    !out.is_empty()
}

/// A `--set` value as the config reads it: TOML, or else a string.
fn setting_value(value: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("v = {value}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.to_string()))
}

/// Sets `a.b.c = value` in a TOML table, making the tables on the way.
fn set_dotted(table: &mut toml::Table, key: &str, value: &str) -> Result<(), String> {
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
fn located(text: &str, message: String) -> String {
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
fn key_line(text: &str, path: &[&str]) -> Option<usize> {
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
    Some(crate::base::text::line_of(text, key.span().start))
}

/// Deserializes TOML text; `Err` is `(line, message naming the key)`.
pub fn deserialize_toml<T: serde::de::DeserializeOwned>(
    text: &str,
) -> Result<T, (Option<usize>, String)> {
    let de = toml::Deserializer::parse(text).map_err(|e| {
        let line = e.span().map(|s| crate::base::text::line_of(text, s.start));
        (line, e.message().trim().to_string())
    })?;
    serde_path_to_error::deserialize(de).map_err(|e| crate::base::text::toml_problem(&e, text))
}

/// Reads the secret named by a `*_env` setting: the environment variable,
/// or else `$CREDENTIALS_DIRECTORY/<VARIABLE>` (systemd `LoadCredential=`).
struct Secrets<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
    /// Nothing will be contacted: a secret that is not set is no error.
    offline: bool,
}

impl Secrets<'_> {
    /// `Ok(None)` when `var` is empty (no secret wanted). Never echoes a
    /// value that does not look like a variable name: it may be the secret.
    fn read(&self, section: &str, key: &str, var: &str) -> Result<Option<Secret>, String> {
        if var.is_empty() {
            return Ok(None);
        }
        if !is_variable_name(var) {
            return Err(format!(
                "[{section}] {key} must name an environment variable (A-Z, 0-9 and _, not starting with a digit); \
                 this value does not look like one, so it is not shown. Did you paste the secret itself? \
                 Put the secret in a variable and write its name here."
            ));
        }
        let from_env = (self.env)(var).filter(|v| !v.trim().is_empty());
        let from_credentials = || {
            let dir = (self.env)("CREDENTIALS_DIRECTORY").filter(|d| !d.is_empty())?;
            let text = std::fs::read_to_string(Path::new(&dir).join(var)).ok()?;
            Some(text).filter(|t| !t.trim().is_empty())
        };
        match from_env.or_else(from_credentials) {
            Some(v) => Ok(Some(Secret::new(v.trim()))),
            None if self.offline => Ok(None),
            None => Err(format!(
                "environment variable {var} (named by [{section}] {key}) is not set and no systemd credential {var} was loaded; \
                 export it, or set {key} = \"\" if the service needs no secret"
            )),
        }
    }
}

/// `[A-Z_][A-Z0-9_]*`: what a `*_env` setting must hold.
pub fn is_variable_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_uppercase() || c == '_')
        && chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

fn resolve_endpoint(
    endpoint: &RawEndpoint,
    runpod: &RawRunpod,
    openai: &RawOpenai,
    secrets: &Secrets<'_>,
) -> Result<EndpointConfig, String> {
    match endpoint.kind {
        EndpointKind::Openai => {
            let o = openai;
            if o.base_url.trim().is_empty() {
                return Err("[openai] base_url is required when [endpoint] kind = \"openai\" (for llama-server: \"http://127.0.0.1:8080/v1\")".into());
            }
            check_http_url(&o.base_url, "[openai] base_url")?;
            check_range(
                "[openai] request_timeout_secs",
                o.request_timeout_secs,
                bounds::TIMEOUT_SECS,
            )?;
            Ok(EndpointConfig {
                kind: EndpointKind::Openai,
                base_url: o.base_url.trim().trim_end_matches('/').to_string(),
                api_key: secrets.read("openai", "api_key_env", &o.api_key_env)?,
                api_key_env: o.api_key_env.clone(),
                model: Some(o.model.clone()).filter(|m| !m.is_empty()),
                request_timeout_secs: o.request_timeout_secs,
                poll_interval_ms: 0,
            })
        }
        EndpointKind::Runpod => {
            let r = runpod;
            let base_url = if !r.endpoint_url.trim().is_empty() {
                check_http_url(&r.endpoint_url, "[runpod] endpoint_url")?;
                r.endpoint_url.trim().trim_end_matches('/').to_string()
            } else if !r.endpoint_id.trim().is_empty() {
                check_http_url(&r.base_url, "[runpod] base_url")?;
                let id = r.endpoint_id.trim();
                if id.contains(['/', '?', '#']) || id == "." || id == ".." {
                    return Err(format!(
                        "[runpod] endpoint_id {id:?} must be a bare id, not a URL or path (use endpoint_url for a full URL)"
                    ));
                }
                format!("{}/{}", r.base_url.trim().trim_end_matches('/'), id)
            } else {
                return Err("[runpod] endpoint_id (or endpoint_url) is required when [endpoint] kind = \"runpod\"; for a llama-server reached directly set [endpoint] kind = \"openai\"".into());
            };
            check_range(
                "[runpod] request_timeout_secs",
                r.request_timeout_secs,
                bounds::TIMEOUT_SECS,
            )?;
            check_range(
                "[runpod] poll_interval_ms",
                r.poll_interval_ms,
                bounds::POLL_INTERVAL_MS,
            )?;
            Ok(EndpointConfig {
                kind: EndpointKind::Runpod,
                base_url,
                api_key: secrets.read("runpod", "api_key_env", &r.api_key_env)?,
                api_key_env: r.api_key_env.clone(),
                model: None,
                request_timeout_secs: r.request_timeout_secs,
                poll_interval_ms: r.poll_interval_ms,
            })
        }
    }
}

fn resolve_agents(
    raw: std::collections::BTreeMap<String, RawAgent>,
    base: &Path,
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
                .map(|p| crate::base::schema::OutputSchema::load(&resolve_file(base, &p)))
                .transpose()
                .map_err(|e| format!("{at} output_schema: {e}"))?;
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

/// `p` made absolute against the config file's folder.
pub fn resolve_file(base: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

fn resolve_paths(raw: &RawPaths, base: &Path) -> Paths {
    let resolve = |p: &Path| {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            base.join(p)
        }
    };
    Paths {
        inbox: resolve(&raw.inbox),
        done: resolve(&raw.done),
        failed: resolve(&raw.failed),
        logs: resolve(&raw.logs),
    }
}

fn resolve_model(m: RawModel, context_tokens: u32) -> Result<ModelConfig, String> {
    check_range(
        "[model] max_tokens",
        u64::from(m.max_tokens),
        bounds::MAX_TOKENS,
    )?;
    check_finite("[model] temperature", m.temperature)?;
    check_finite("[model] top_p", m.top_p)?;
    if context_tokens != 0 && u64::from(context_tokens) <= u64::from(m.max_tokens) + 256 {
        return Err(format!(
            "[limits] context_tokens ({context_tokens}) must leave room for the prompt after [model] max_tokens ({}); raise context_tokens or lower max_tokens",
            m.max_tokens
        ));
    }
    let extra = to_json_map(m.extra, "[model.extra]")?;
    if let Some(key) = extra
        .keys()
        .find(|k| RESERVED_EXTRA_KEYS.contains(&k.as_str()))
    {
        return Err(format!(
            "[model.extra] may not set {key:?}: the harness builds it (use [model.chat_template_kwargs] for template options)"
        ));
    }
    let chat_template_kwargs = to_json_map(m.chat_template_kwargs, "[model.chat_template_kwargs]")?;
    if let Some(v) = chat_template_kwargs
        .get("enable_thinking")
        .filter(|v| !v.is_boolean())
    {
        return Err(format!(
            "[model.chat_template_kwargs] enable_thinking must be true or false, not {v}"
        ));
    }
    Ok(ModelConfig {
        temperature: m.temperature,
        top_p: m.top_p,
        top_k: m.top_k,
        max_tokens: m.max_tokens,
        replay_thinking: m.replay_thinking,
        chat_template_kwargs,
        extra,
    })
}

fn resolve_webfetch(w: RawWebfetch) -> Result<Option<WebfetchConfig>, String> {
    if !w.enabled {
        return Ok(None);
    }
    check_range(
        "[tools.webfetch] timeout_secs",
        w.timeout_secs,
        bounds::TIMEOUT_SECS,
    )?;
    check_range(
        "[tools.webfetch] max_bytes",
        w.max_bytes,
        bounds::WEBFETCH_MAX_BYTES,
    )?;
    Ok(Some(WebfetchConfig {
        timeout_secs: w.timeout_secs,
        max_bytes: w.max_bytes,
        allow_private: w.allow_private,
        allow_hosts: normalise_hosts(w.allow_hosts),
        deny_hosts: normalise_hosts(w.deny_hosts),
    }))
}

fn resolve_noteworx(
    n: RawNoteworx,
    secrets: &Secrets<'_>,
) -> Result<Option<NoteworxConfig>, String> {
    if !n.enabled || n.base_url.trim().is_empty() {
        return Ok(None);
    }
    check_http_url(&n.base_url, "[tools.noteworx] base_url")?;
    check_range(
        "[tools.noteworx] timeout_secs",
        n.timeout_secs,
        bounds::TIMEOUT_SECS,
    )?;
    if n.token_env.is_empty() {
        return Err(
            "[tools.noteworx] token_env must name the variable holding the noteworx token".into(),
        );
    }
    let token = match secrets.read("tools.noteworx", "token_env", &n.token_env)? {
        Some(token) => token,
        // Offline, noteworx is never called: an empty token is never sent.
        None if secrets.offline => Secret::new(""),
        None => return Err("noteworx token missing".into()),
    };
    Ok(Some(NoteworxConfig {
        base_url: n.base_url.trim().trim_end_matches('/').to_string(),
        token,
        token_env: n.token_env,
        agent_name: n.agent_name,
        timeout_secs: n.timeout_secs,
    }))
}

fn check_http_url(url: &str, what: &str) -> Result<(), String> {
    match reqwest::Url::parse(url.trim()) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Ok(()),
        Ok(u) => Err(format!(
            "{what} must be an http(s) URL, not {:?} (scheme {})",
            url,
            u.scheme()
        )),
        Err(e) => Err(format!("{what} {url:?} is not a valid URL: {e}")),
    }
}

fn normalise_hosts(hosts: Vec<String>) -> Vec<String> {
    let set: BTreeSet<String> = hosts
        .into_iter()
        .map(|h| h.trim().trim_start_matches('.').to_ascii_lowercase())
        .filter(|h| !h.is_empty())
        .collect();
    set.into_iter().collect()
}

/// A TOML table as JSON; `nan` and `inf` are refused, naming the key.
fn to_json_map(table: toml::Table, section: &str) -> Result<Map<String, Value>, String> {
    table
        .into_iter()
        .map(|(k, v)| {
            let value = toml_to_json(v).map_err(|()| {
                format!("{section} {k} holds nan or inf, which cannot be sent as JSON")
            })?;
            Ok((k, value))
        })
        .collect()
}

fn toml_to_json(v: toml::Value) -> Result<Value, ()> {
    Ok(match v {
        toml::Value::String(s) => Value::String(s),
        toml::Value::Integer(i) => Value::from(i),
        toml::Value::Float(f) => Value::Number(serde_json::Number::from_f64(f).ok_or(())?),
        toml::Value::Boolean(b) => Value::Bool(b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(a) => {
            Value::Array(a.into_iter().map(toml_to_json).collect::<Result<_, _>>()?)
        }
        toml::Value::Table(t) => Value::Object(
            t.into_iter()
                .map(|(k, v)| Ok((k, toml_to_json(v)?)))
                .collect::<Result<_, ()>>()?,
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        let env = |k: &str| match k {
            "RUNPOD_API_KEY" => Some("rp_secret".to_string()),
            "NOTEWORX_TOKEN" => Some("nwx_secret".to_string()),
            _ => None,
        };
        Config::parse(
            text,
            Path::new("/etc/ah/agent.toml"),
            Path::new("/etc/ah"),
            &env,
        )
    }

    #[test]
    fn set_values_are_secret_by_their_key_words_or_their_userinfo() {
        let secret = |k: &str, v: &str| {
            setting_secrets(&[(k.to_string(), v.to_string())])
                .into_iter()
                .map(|s| s.expose().to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(secret("model.extra.api_key", "sk-live-A"), ["sk-live-A"]);
        assert_eq!(
            secret("model.extra.api_key", "'sk-live-B'"),
            ["sk-live-B"],
            "a TOML literal"
        );
        assert_eq!(
            secret("model.extra.api_key", r#""sk\u002Dlive-C""#),
            ["sk-live-C"],
            "an escape"
        );
        assert_eq!(
            secret("model.extra", r#"{api_key="SECRETD", n=1}"#),
            ["SECRETD"],
            "inside a table"
        );
        assert_eq!(
            secret("openai.base_url", "http://bob:pw-SECRETE@host/v1"),
            ["http://bob:pw-SECRETE@host/v1", "pw-SECRETE", "bob"]
        );
        for (k, v) in [
            ("model.max_tokens", "1024"),
            ("limits.max_total_tokens", "60000"),
            ("model.replay_thinking", "keep"),
            ("openai.base_url", "http://host/v1"),
        ] {
            assert!(secret(k, v).is_empty(), "{k}={v}");
            assert!(!is_secret_setting(k, v), "{k}={v}");
        }
        assert!(is_secret_setting("model.extra.auth_token", "x"));
    }

    #[test]
    fn a_bound_or_a_missing_key_names_its_line() {
        let e = parse("[runpod]\nendpoint_id = \"a\"\n\n[limits]\nmax_turns = 0\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "/etc/ah/agent.toml: line 5: [limits] max_turns = 0 is below its minimum, 1"
        );
        let e = parse("[runpod]\nendpoint_id = \"a\"\npoll_interval_ms = 1\n").unwrap_err();
        assert!(
            e.message.starts_with("line 3: [runpod] poll_interval_ms"),
            "{e}"
        );
        let e =
            parse("[runpod]\nendpoint_id = \"a\"\n[agents.scout]\ntools = []\nmax_writes = 5000\n")
                .unwrap_err();
        assert!(
            e.message.starts_with("line 5: [agents.scout] max_writes"),
            "{e}"
        );
        // A key that is not in the file (a default, a missing one) has no line.
        let e = parse("[endpoint]\nkind = \"openai\"\n").unwrap_err();
        assert!(
            e.message.starts_with("[openai] base_url is required"),
            "{e}"
        );
    }

    #[test]
    fn defaults_follow_the_spec() {
        let c = parse("[runpod]\nendpoint_id = \"abc\"\n").unwrap();
        assert_eq!(c.endpoint.kind, EndpointKind::Runpod);
        assert_eq!(c.endpoint.base_url, "https://api.runpod.ai/v2/abc");
        assert_eq!(c.endpoint.api_key, Some(Secret::new("rp_secret")));
        assert_eq!(c.limits, Limits::default());
        assert_eq!(c.paths.inbox, PathBuf::from("/etc/ah/tasks/inbox"));
        assert_eq!(c.paths.state_dir(), PathBuf::from("/etc/ah/tasks"));
        assert_eq!(c.model.max_tokens, 2048);
        assert_eq!(
            c.model.chat_template_kwargs.get("enable_thinking"),
            Some(&Value::Bool(true))
        );
        assert!(c.webfetch.is_some());
        assert!(c.noteworx.is_none(), "noteworx needs a base_url");
    }

    #[test]
    fn unknown_key_is_named_with_its_line() {
        let e = parse("[runpod]\nendpoint_id = \"abc\"\n[limits]\nmax_turn = 3\n").unwrap_err();
        assert_eq!(e.path, "/etc/ah/agent.toml");
        assert!(e.message.contains("line 4"), "{e}");
        assert!(e.message.contains("max_turn"), "{e}");
    }

    #[test]
    fn wrong_type_is_an_error_naming_the_section_the_key_and_the_line() {
        let e =
            parse("[runpod]\nendpoint_id = \"abc\"\n[limits]\nmax_turns = \"five\"\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "/etc/ah/agent.toml: line 4: [limits] max_turns: expected an integer, found the string \"five\""
        );
        let e = parse("[runpod]\nendpoint_id = \"abc\"\n[tools.webfetch]\nenabled = \"yes\"\n")
            .unwrap_err();
        assert_eq!(
            e.message,
            "line 4: [tools.webfetch] enabled: expected a boolean, found the string \"yes\""
        );
    }

    #[test]
    fn every_limit_outside_its_ceiling_is_refused_by_name() {
        for (section, key, value) in [
            ("limits", "max_turns", "1001"),
            ("limits", "max_wall_secs", "9223372036854775807"),
            ("limits", "max_total_tokens", "1000000001"),
            ("limits", "max_tool_result_chars", "1000001"),
            ("limits", "context_tokens", "10000001"),
            ("limits", "concurrency", "257"),
            ("limits", "max_attempts", "101"),
            ("limits", "max_calls_per_turn", "65"),
            ("limits", "max_writes", "1001"),
            ("model", "max_tokens", "1000001"),
            ("runpod", "request_timeout_secs", "3601"),
            ("runpod", "poll_interval_ms", "60001"),
            ("runpod", "poll_interval_ms", "49"),
            ("tools.webfetch", "timeout_secs", "0"),
            ("tools.noteworx", "timeout_secs", "86400"),
        ] {
            let head = "[runpod]\nendpoint_id = \"abc\"\n";
            let nwx = "[tools.noteworx]\nbase_url = \"https://n\"\n";
            let text = match section {
                "runpod" => format!("{head}{key} = {value}\n{nwx}"),
                "tools.noteworx" => format!("{head}{nwx}{key} = {value}\n"),
                _ => format!("{head}{nwx}[{section}]\n{key} = {value}\n"),
            };
            let e = parse(&text).unwrap_err();
            let line = text.lines().position(|l| l.starts_with(key)).unwrap() + 1;
            assert!(
                e.message
                    .starts_with(&format!("line {line}: [{section}] {key} = {value} is ")),
                "{section}.{key}: {e}"
            );
        }
    }

    #[test]
    fn nan_and_inf_are_refused_wherever_a_number_goes() {
        for (text, key) in [
            ("[model]\ntemperature = nan\n", "[model] temperature"),
            ("[model]\ntop_p = inf\n", "[model] top_p"),
            ("[model.extra]\nmin_p = -inf\n", "[model.extra] min_p"),
            (
                "[model.chat_template_kwargs]\nx = [1.0, nan]\n",
                "[model.chat_template_kwargs] x",
            ),
        ] {
            let e = parse(&format!("[runpod]\nendpoint_id = \"a\"\n{text}")).unwrap_err();
            assert!(
                e.message.starts_with(&format!("line 4: {key}")),
                "{text}: {e}"
            );
        }
    }

    #[test]
    fn a_secret_pasted_where_a_variable_name_belongs_is_refused_unseen() {
        for value in ["rp_live_AbC123secret", "my key", "1ABC", "lower_case"] {
            let e = parse(&format!(
                "[runpod]\nendpoint_id = \"a\"\napi_key_env = \"{value}\"\n"
            ))
            .unwrap_err();
            assert!(e.message.contains("[runpod] api_key_env must name"), "{e}");
            assert!(!e.to_string().contains(value), "the value is echoed: {e}");
        }
        for ok in ["RUNPOD_API_KEY", "_X", "K2"] {
            assert!(is_variable_name(ok), "{ok}");
        }
    }

    #[test]
    fn a_secret_may_come_from_the_systemd_credentials_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("NWX_CRED"), "nwx_from_credential\n").unwrap();
        let creds = dir.path().to_string_lossy().into_owned();
        let env = |k: &str| match k {
            "CREDENTIALS_DIRECTORY" => Some(creds.clone()),
            _ => None,
        };
        let c = Config::parse(
            "[endpoint]\nkind = \"openai\"\n[openai]\nbase_url = \"http://h/v1\"\n[tools.noteworx]\nbase_url = \"https://n\"\ntoken_env = \"NWX_CRED\"\n",
            Path::new("a.toml"),
            Path::new("."),
            &env,
        )
        .unwrap();
        assert_eq!(
            c.noteworx.unwrap().token.expose(),
            "nwx_from_credential",
            "trailing newline trimmed"
        );
        let e = Config::parse(
            "[endpoint]\nkind = \"openai\"\n[openai]\nbase_url = \"http://h/v1\"\napi_key_env = \"MISSING\"\n",
            Path::new("a.toml"),
            Path::new("."),
            &env,
        )
        .unwrap_err();
        assert!(e.message.contains("MISSING"), "{e}");
    }

    #[test]
    fn openai_kind_needs_a_base_url() {
        let e = parse("[endpoint]\nkind = \"openai\"\n").unwrap_err();
        assert!(e.message.contains("[openai] base_url is required"), "{e}");
        let c = parse("[endpoint]\nkind = \"openai\"\n[openai]\nbase_url = \"http://127.0.0.1:8080/v1/\"\nmodel = \"gemma\"\n").unwrap();
        assert_eq!(c.endpoint.base_url, "http://127.0.0.1:8080/v1");
        assert_eq!(c.endpoint.api_key, None);
        assert_eq!(c.endpoint.model.as_deref(), Some("gemma"));
    }

    #[test]
    fn runpod_endpoint_url_replaces_base_and_id() {
        let c = parse("[runpod]\nendpoint_url = \"http://127.0.0.1:8000/\"\napi_key_env = \"\"\n")
            .unwrap();
        assert_eq!(c.endpoint.base_url, "http://127.0.0.1:8000");
        assert_eq!(c.endpoint.api_key, None);
        let e = parse("[endpoint]\nkind = \"runpod\"\n").unwrap_err();
        assert!(e.message.contains("endpoint_id"), "{e}");
    }

    #[test]
    fn a_missing_secret_variable_is_named() {
        let e = parse("[runpod]\nendpoint_id = \"abc\"\napi_key_env = \"MY_KEY\"\n").unwrap_err();
        assert!(e.message.contains("MY_KEY"), "{e}");
        assert!(!e.message.contains("rp_secret"));
    }

    #[test]
    fn noteworx_is_offered_only_with_a_base_url_and_reads_its_token() {
        let c = parse("[runpod]\nendpoint_id = \"a\"\n[tools.noteworx]\nbase_url = \"https://notes.example.com/\"\n").unwrap();
        let n = c.noteworx.as_ref().unwrap();
        assert_eq!(n.base_url, "https://notes.example.com");
        assert_eq!(n.token.expose(), "nwx_secret");
        assert_eq!(format!("{:?}", n.token), "***");
        assert_eq!(c.secrets().len(), 2);
        let c = parse("[runpod]\nendpoint_id = \"a\"\n[tools.noteworx]\nenabled = false\nbase_url = \"https://n\"\n").unwrap();
        assert!(c.noteworx.is_none());
    }

    #[test]
    fn extra_may_not_override_what_the_harness_builds() {
        let e = parse("[runpod]\nendpoint_id = \"a\"\n[model.extra]\nstream = true\n").unwrap_err();
        assert!(e.message.contains("stream"), "{e}");
        let c = parse("[runpod]\nendpoint_id = \"a\"\n[model.extra]\nseed = 42\nmin_p = 0.05\n")
            .unwrap();
        assert_eq!(c.model.extra.get("seed"), Some(&Value::from(42)));
    }

    #[test]
    fn overrides_set_dotted_keys_as_toml_values_or_strings() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.toml");
        std::fs::write(
            &path,
            "[runpod]\nendpoint_id = \"a\"\n[model]\ntemperature = 1.0\n",
        )
        .unwrap();
        let env = |k: &str| (k == "RUNPOD_API_KEY").then(|| "rp_x".to_string());
        let set = |k: &str, v: &str| (k.to_string(), v.to_string());
        let c = Config::load_with(
            &path,
            &env,
            &[
                set("model.temperature", "0.3"),
                set("model.replay_thinking", "keep"),
                set("limits.max_turns", "6"),
                set("tools.webfetch.enabled", "false"),
            ],
        )
        .unwrap();
        assert_eq!(c.model.temperature, Some(0.3));
        assert_eq!(c.model.replay_thinking, ReplayThinking::Keep);
        assert_eq!(c.limits.max_turns, 6);
        assert!(c.webfetch.is_none());
        let e = Config::load_with(&path, &env, &[set("limits.max_turnz", "6")]).unwrap_err();
        assert!(e.message.contains("[limits] max_turnz: unknown key"), "{e}");
        assert!(
            e.message
                .ends_with("(with the --set / --matrix values applied)"),
            "{e}"
        );
        let e = Config::load_with(&path, &env, &[set("temperature", "1")]).unwrap_err();
        assert!(e.message.contains("write SECTION.KEY"), "{e}");
    }

    #[test]
    fn limits_that_cannot_work_are_refused() {
        let e = parse("[runpod]\nendpoint_id = \"a\"\n[limits]\nmax_turns = 0\n").unwrap_err();
        assert!(e.message.contains("max_turns"), "{e}");
        let e =
            parse("[runpod]\nendpoint_id = \"a\"\n[limits]\ncontext_tokens = 2048\n").unwrap_err();
        assert!(e.message.contains("context_tokens"), "{e}");
    }

    #[test]
    fn the_shipped_example_config_is_valid_and_documents_every_section() {
        let text = include_str!("../../config/agent.toml.example");
        let c = parse(text).unwrap();
        assert_eq!(c.endpoint.base_url, "https://api.runpod.ai/v2/abc123xyz");
        assert_eq!(c.limits, Limits::default());
        for section in [
            "[endpoint]",
            "[runpod]",
            "[openai]",
            "[paths]",
            "[limits]",
            "[model]",
            "[model.chat_template_kwargs]",
            "[model.extra]",
            "[tools.webfetch]",
            "[tools.noteworx]",
            "[prompt]",
            "[metrics]",
        ] {
            assert!(text.contains(section), "{section} missing from the example");
        }
    }

    #[test]
    fn secrets_never_show_in_debug_output() {
        let c = parse("[runpod]\nendpoint_id = \"abc\"\n").unwrap();
        assert!(!format!("{c:?}").contains("rp_secret"));
    }
}
