//! Configuration (docs/configuration.md): the TOML file is parsed into raw
//! sections that reject unknown keys, then resolved once into [`Config`]:
//! defaults applied, relative paths made absolute against the file's own
//! folder, secrets read from the environment variables the file names, and
//! every secret of it gathered for the one [`Redactor`] ([`Config::redactor`];
//! it and [`Secret`] are `base`'s, re-exported here).
//!
//! Nothing here reads the process environment directly: callers pass an
//! `env` lookup, so tests never mutate global state.

mod limits;
mod locate;
mod mail;
mod mcp;
mod notify;
mod profiles;
mod raw;
mod resolve;
mod secrets;
pub mod setup;
mod tls;
mod traces;
mod value;

pub use harness_base::redact::{Redactor, Secret};
pub use limits::{Limits, Retention, SpendLimits, bounds, check_finite, check_range};
pub use locate::{CONFIG_VARIABLE, Lookup, SYSTEM_CONFIG, expand_home, locate, places};
pub use mail::{Login, MailAddress, MailConfig, MailSecurity};
pub use mcp::{
    MAX_TOOL_NAME, MCP_SEPARATOR, McpServerConfig, McpTransport, StdioCommand, is_function_name,
};
pub use notify::{DEFAULT_DIGEST_AT, NotifyConfig, TimeOfDay};
pub use profiles::{AgentProfile, AnswerStyle, PLACEHOLDERS, placeholders};
pub use raw::{EndpointKind, FailureFormat, ReplayThinking, deserialize_toml};
pub use secrets::{is_secret_setting, is_variable_name, setting_secrets};
pub use tls::TlsConfig;
pub use traces::TracesConfig;
pub use value::resolve_file;

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use notify::resolve_notify;
use profiles::resolve_agents;
use raw::{RawConfig, located, set_dotted};
use resolve::{resolve_endpoint, resolve_model, resolve_noteworx, resolve_paths, resolve_webfetch};
use secrets::Secrets;

/// The config file's name: in the current folder, the user's and the
/// system's config folders ([`locate`]), and what `init` writes.
pub const DEFAULT_CONFIG_FILE: &str = "agent.toml";

/// The `[runpod] endpoint_id` of `config/agent.toml.example`: a config
/// still holding it was copied and not filled in (`check` refuses it).
pub const EXAMPLE_ENDPOINT_ID: &str = "abc123xyz";

/// The endpoint id the README writes (`init --runpod ENDPOINT_ID`): refused
/// as the example's is.
pub const README_ENDPOINT_ID: &str = "ENDPOINT_ID";

/// The `[tools.noteworx] base_url` of the package's config: refused as a
/// placeholder until it is filled in.
pub const EXAMPLE_NOTES_URL: &str = "https://notes.example.com";

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

// ---------------------------------------------------------------------------
// Raw file sections: exactly the keys of docs/configuration.md, nothing else.

// ---------------------------------------------------------------------------
// The resolved configuration.

/// What `[prompt]` adds for small models when a task offers tools
/// (docs/configuration.md, "[prompt]"); each default was chosen by the eval
/// suite on the stand-in (docs/performance.md, "Tasks done on the stand-in").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromptAids {
    /// How calling works, a few sentences after whichever system prompt.
    pub tool_preamble: bool,
    /// One call written out, for one of the task's tools.
    pub call_example: bool,
    /// Each tool's description opens with its arguments, the required named.
    pub argument_hints: bool,
    /// After each turn's tool results, a user line: go on.
    pub result_note: bool,
}

impl PromptAids {
    /// The defaults.
    pub const DEFAULT: PromptAids = PromptAids {
        tool_preamble: false,
        call_example: true,
        argument_hints: false,
        result_note: false,
    };
}

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
    /// `[prompt]`'s aids for small models.
    pub prompt_aids: PromptAids,
    /// `[metrics] textfile`: where each run's Prometheus figures go; `None` when disabled.
    pub metrics_textfile: Option<PathBuf>,
    /// `[retention]`: how long run folders and `done/` files are kept.
    pub retention: Retention,
    /// `[budget]`: what a day or a run may spend
    /// (docs/budget-and-traces.md, "Budget").
    pub budget: SpendLimits,
    /// `[schedule] timezone`: recurring tasks' schedules are read in it.
    pub timezone: harness_base::zone::Zone,
    /// `[agents.NAME]` profiles, by name.
    pub agents: std::collections::BTreeMap<String, AgentProfile>,
    /// Secret-looking `--set` values (`eval`): redacted like the others.
    pub setting_secrets: Vec<Secret>,
    /// `[mcp.servers.NAME]`, in name order.
    pub mcp: Vec<McpServerConfig>,
    /// `[notify]`: who is told how each run ended.
    pub notify: NotifyConfig,
    /// `[mail]`: the SMTP server mail goes through; `None` without the section.
    pub mail: Option<MailConfig>,
    /// `[traces]`: where each task's trace goes; `None` when no endpoint is set.
    pub traces: Option<TracesConfig>,
    /// `[tls]`: what every connection trusts (webfetch only with
    /// `use_ca_file`).
    pub tls: TlsConfig,
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
    /// Recurring task files: read, never moved (docs/tasks.md, "Recurring
    /// tasks").
    pub recurring: PathBuf,
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
    /// `[tls] ca_file` is trusted for the pages the model fetches too.
    pub use_ca_file: bool,
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
        raw.retention.check().map_err(err)?;
        raw.budget.check().map_err(err)?;
        let model = resolve_model(raw.model, limits.context_tokens).map_err(err)?;
        let home = (secrets.env)("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from);
        let home = home.as_deref();
        let paths = resolve_paths(&raw.paths, base, home).map_err(err)?;
        let tls = tls::resolve_tls(raw.tls, base, home).map_err(err)?;
        let agents = resolve_agents(raw.agents, base, home, limits.context_tokens).map_err(err)?;
        let metrics_textfile = match raw.metrics.textfile {
            None => Some(paths.logs.join("agent-harness.prom")),
            Some(p) if p.as_os_str().is_empty() => None,
            Some(p) => Some(resolve_file(
                base,
                &expand_home(&p, home, "[metrics] textfile").map_err(err)?,
            )),
        };
        Ok(Config {
            path: path.to_path_buf(),
            endpoint: resolve_endpoint(&raw.endpoint, &raw.runpod, &raw.openai, secrets)
                .map_err(err)?,
            paths,
            limits,
            model,
            webfetch: resolve_webfetch(raw.tools.webfetch, &tls).map_err(err)?,
            noteworx: resolve_noteworx(raw.tools.noteworx, secrets).map_err(err)?,
            prompt_aids: raw.prompt.aids(),
            system_prompt: raw.prompt.system.filter(|s| !s.trim().is_empty()),
            metrics_textfile,
            retention: raw.retention,
            budget: raw.budget,
            timezone: harness_base::zone::Zone::named(&raw.schedule.timezone)
                .map_err(|why| {
                    format!(
                        "[schedule] timezone: {:?} is not a time zone of this system's tz database (an IANA name such as \"Europe/Berlin\", or \"UTC\"; install tzdata — an old alias such as \"US/Pacific\" may need tzdata-legacy, or write its current name, \"America/Los_Angeles\" — or set TZDIR): {why}",
                        raw.schedule.timezone
                    )
                })
                .map_err(err)?,
            agents,
            setting_secrets: Vec::new(),
            mcp: mcp::resolve_mcp(raw.mcp, base, home, secrets).map_err(err)?,
            notify: resolve_notify(raw.notify, raw.mail.is_some(), secrets).map_err(err)?,
            traces: traces::resolve_traces(raw.traces, secrets).map_err(err)?,
            mail: mail::resolve_mail(raw.mail, secrets).map_err(err)?,
            tls,
        })
    }

    /// The redactor for every secret of this configuration.
    pub fn redactor(&self) -> Redactor {
        Redactor::new(self.secrets())
    }

    /// Every secret value the records must never contain: the keys read from
    /// the environment, and the keys written into every URL the configuration
    /// uses (docs/operating.md, "Records"; `secrets::url_secrets`) — the
    /// endpoint's (`[openai] base_url`, `[runpod] base_url` with its
    /// `endpoint_id`, or `endpoint_url`), noteworx's, each MCP server's,
    /// `[notify]`'s and `[traces]`'s; and `[mail]`'s login
    /// ([`MailConfig::secrets`]). A URL of a section the configuration does
    /// not use (`[runpod]` under `kind = "openai"`, a disabled noteworx) is
    /// never resolved, contacted or shown.
    pub fn secrets(&self) -> Vec<Secret> {
        self.endpoint
            .api_key
            .iter()
            .chain(self.noteworx.as_ref().map(|n| &n.token))
            .chain(&self.setting_secrets)
            .cloned()
            .chain(secrets::url_secrets(&self.endpoint.base_url))
            .chain(
                self.noteworx
                    .iter()
                    .flat_map(|n| secrets::url_secrets(&n.base_url)),
            )
            .chain(self.mcp.iter().flat_map(McpServerConfig::secrets))
            .chain(self.notify.secrets())
            .chain(self.traces.iter().flat_map(TracesConfig::secrets))
            .chain(self.mail.iter().flat_map(MailConfig::secrets))
            .collect()
    }
}

#[cfg(test)]
mod tests;
