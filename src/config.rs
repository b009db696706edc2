//! Configuration (SPEC §3): the TOML file is parsed into raw sections that
//! reject unknown keys, then resolved once into [`Config`]: defaults applied,
//! relative paths made absolute against the file's own folder, secrets read
//! from the environment variables the file names.
//!
//! Nothing here reads the process environment directly: callers pass an
//! `env` lookup, so tests never mutate global state.

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

/// `[limits]`: the bounds every task runs within.
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
        }
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
}

#[derive(Debug, Clone)]
pub struct EndpointConfig {
    pub kind: EndpointKind,
    /// For `openai`: `{base_url}`; for `runpod`: `{base_url}/{endpoint_id}` or `endpoint_url`.
    /// Every route hangs off this URL, without a trailing slash.
    pub base_url: String,
    pub api_key: Option<Secret>,
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
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError::new(
                path,
                format!("cannot read the config file: {e} (set --config or AGENT_HARNESS_CONFIG)"),
            )
        })?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Self::parse(&text, path, &base, env)
    }

    /// Parses config text; relative paths resolve against `base`.
    pub fn parse(
        text: &str,
        path: &Path,
        base: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text)
            .map_err(|e| ConfigError::new(path, describe_toml_error(&e, text)))?;
        resolve(raw, path, base, env)
    }
}

/// Formats a TOML error as `line N: message`, which names the key involved.
pub fn describe_toml_error(err: &toml::de::Error, text: &str) -> String {
    match err.span() {
        Some(span) => format!("line {}: {}", line_of(text, span.start), err.message()),
        None => err.message().to_string(),
    }
}

/// 1-based line number of a byte offset.
pub fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

fn resolve(
    raw: RawConfig,
    path: &Path,
    base: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let err = |m: String| ConfigError::new(path, m);
    let secret = |section: &str, key: &str, var: &str| -> Result<Option<Secret>, ConfigError> {
        if var.is_empty() {
            return Ok(None);
        }
        match env(var) {
            Some(v) if !v.trim().is_empty() => Ok(Some(Secret::new(v.trim()))),
            _ => Err(err(format!(
                "environment variable {var} (named by [{section}] {key}) is not set; export it, or set {key} = \"\" if the endpoint needs no key"
            ))),
        }
    };

    let endpoint = match raw.endpoint.kind {
        EndpointKind::Openai => {
            let o = &raw.openai;
            if o.base_url.trim().is_empty() {
                return Err(err("[openai] base_url is required when [endpoint] kind = \"openai\" (for llama-server: \"http://127.0.0.1:8080/v1\")".into()));
            }
            check_http_url(&o.base_url, "[openai] base_url").map_err(err)?;
            EndpointConfig {
                kind: EndpointKind::Openai,
                base_url: o.base_url.trim().trim_end_matches('/').to_string(),
                api_key: secret("openai", "api_key_env", &o.api_key_env)?,
                model: Some(o.model.clone()).filter(|m| !m.is_empty()),
                request_timeout_secs: o.request_timeout_secs.max(1),
                poll_interval_ms: 0,
            }
        }
        EndpointKind::Runpod => {
            let r = &raw.runpod;
            let base_url = if !r.endpoint_url.trim().is_empty() {
                check_http_url(&r.endpoint_url, "[runpod] endpoint_url").map_err(err)?;
                r.endpoint_url.trim().trim_end_matches('/').to_string()
            } else if !r.endpoint_id.trim().is_empty() {
                check_http_url(&r.base_url, "[runpod] base_url").map_err(err)?;
                let id = r.endpoint_id.trim();
                if id.contains('/') {
                    return Err(err(format!(
                        "[runpod] endpoint_id {id:?} must be a bare id, not a URL (use endpoint_url for a full URL)"
                    )));
                }
                format!("{}/{}", r.base_url.trim().trim_end_matches('/'), id)
            } else {
                return Err(err("[runpod] endpoint_id (or endpoint_url) is required when [endpoint] kind = \"runpod\"; for a llama-server reached directly set [endpoint] kind = \"openai\"".into()));
            };
            EndpointConfig {
                kind: EndpointKind::Runpod,
                base_url,
                api_key: secret("runpod", "api_key_env", &r.api_key_env)?,
                model: None,
                request_timeout_secs: r.request_timeout_secs.max(1),
                poll_interval_ms: r.poll_interval_ms.clamp(50, 60_000),
            }
        }
    };

    let resolve_path = |p: &Path| {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            base.join(p)
        }
    };
    let paths = Paths {
        inbox: resolve_path(&raw.paths.inbox),
        done: resolve_path(&raw.paths.done),
        failed: resolve_path(&raw.paths.failed),
        logs: resolve_path(&raw.paths.logs),
    };

    let limits = raw.limits;
    for (key, zero) in [
        ("max_turns", limits.max_turns == 0),
        ("max_wall_secs", limits.max_wall_secs == 0),
        ("max_total_tokens", limits.max_total_tokens == 0),
        ("max_tool_result_chars", limits.max_tool_result_chars < 200),
        ("concurrency", limits.concurrency == 0),
        ("max_attempts", limits.max_attempts == 0),
    ] {
        if zero {
            let min = if key == "max_tool_result_chars" {
                "200"
            } else {
                "1"
            };
            return Err(err(format!("[limits] {key} must be at least {min}")));
        }
    }
    if limits.context_tokens != 0
        && u64::from(limits.context_tokens) <= u64::from(raw.model.max_tokens) + 256
    {
        return Err(err(format!(
            "[limits] context_tokens ({}) must leave room for the prompt after [model] max_tokens ({}); raise context_tokens or lower max_tokens",
            limits.context_tokens, raw.model.max_tokens
        )));
    }

    let m = raw.model;
    if m.max_tokens == 0 {
        return Err(err("[model] max_tokens must be at least 1".into()));
    }
    let extra = to_json_map(m.extra);
    if let Some(key) = extra
        .keys()
        .find(|k| RESERVED_EXTRA_KEYS.contains(&k.as_str()))
    {
        return Err(err(format!(
            "[model.extra] may not set {key:?}: the harness builds it (use [model.chat_template_kwargs] for template options)"
        )));
    }
    let chat_template_kwargs = to_json_map(m.chat_template_kwargs);
    if let Some(v) = chat_template_kwargs
        .get("enable_thinking")
        .filter(|v| !v.is_boolean())
    {
        return Err(err(format!(
            "[model.chat_template_kwargs] enable_thinking must be true or false, not {v}"
        )));
    }
    let model = ModelConfig {
        temperature: m.temperature,
        top_p: m.top_p,
        top_k: m.top_k,
        max_tokens: m.max_tokens,
        replay_thinking: m.replay_thinking,
        chat_template_kwargs,
        extra,
    };

    let w = raw.tools.webfetch;
    let webfetch = w.enabled.then(|| WebfetchConfig {
        timeout_secs: w.timeout_secs.max(1),
        max_bytes: w.max_bytes.max(1024),
        allow_private: w.allow_private,
        allow_hosts: normalise_hosts(w.allow_hosts),
        deny_hosts: normalise_hosts(w.deny_hosts),
    });

    let n = raw.tools.noteworx;
    let noteworx = if n.enabled && !n.base_url.trim().is_empty() {
        check_http_url(&n.base_url, "[tools.noteworx] base_url").map_err(err)?;
        if n.token_env.is_empty() {
            return Err(err(
                "[tools.noteworx] token_env must name the variable holding the noteworx token"
                    .into(),
            ));
        }
        let token = secret("tools.noteworx", "token_env", &n.token_env)?
            .ok_or_else(|| err("noteworx token missing".into()))?;
        Some(NoteworxConfig {
            base_url: n.base_url.trim().trim_end_matches('/').to_string(),
            token,
            token_env: n.token_env,
            agent_name: n.agent_name,
            timeout_secs: n.timeout_secs.max(1),
        })
    } else {
        None
    };

    Ok(Config {
        path: path.to_path_buf(),
        endpoint,
        paths,
        limits,
        model,
        webfetch,
        noteworx,
        system_prompt: raw.prompt.system.filter(|s| !s.trim().is_empty()),
    })
}

impl Config {
    /// Every secret value the records must never contain.
    pub fn secrets(&self) -> Vec<Secret> {
        self.endpoint
            .api_key
            .iter()
            .chain(self.noteworx.as_ref().map(|n| &n.token))
            .cloned()
            .collect()
    }
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

fn to_json_map(table: toml::Table) -> Map<String, Value> {
    table
        .into_iter()
        .map(|(k, v)| (k, toml_to_json(v)))
        .collect()
}

fn toml_to_json(v: toml::Value) -> Value {
    match v {
        toml::Value::String(s) => Value::String(s),
        toml::Value::Integer(i) => Value::from(i),
        toml::Value::Float(f) => serde_json::Number::from_f64(f)
            .map(Value::Number)
            .unwrap_or(Value::Null),
        toml::Value::Boolean(b) => Value::Bool(b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(a) => Value::Array(a.into_iter().map(toml_to_json).collect()),
        toml::Value::Table(t) => Value::Object(to_json_map(t)),
    }
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
    fn wrong_type_is_an_error_naming_the_line() {
        let e =
            parse("[runpod]\nendpoint_id = \"abc\"\n[limits]\nmax_turns = \"five\"\n").unwrap_err();
        assert!(e.message.contains("line 4"), "{e}");
        assert!(e.message.contains("invalid type"), "{e}");
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
    fn limits_that_cannot_work_are_refused() {
        let e = parse("[runpod]\nendpoint_id = \"a\"\n[limits]\nmax_turns = 0\n").unwrap_err();
        assert!(e.message.contains("max_turns"), "{e}");
        let e =
            parse("[runpod]\nendpoint_id = \"a\"\n[limits]\ncontext_tokens = 2048\n").unwrap_err();
        assert!(e.message.contains("context_tokens"), "{e}");
    }

    #[test]
    fn the_shipped_example_config_is_valid_and_documents_every_section() {
        let text = include_str!("../config/agent.toml.example");
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
