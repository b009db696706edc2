//! `[mcp.servers.NAME]`: the MCP servers whose tools tasks may use
//! (docs/tools.md, "Tools from MCP servers") — how each is reached, what of the
//! environment it gets, its timeouts, and which of its tools are offered and
//! which count as writes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use harness_base::redact::Secret;

use super::limits::{bounds, check_range};
use super::locate::expand_home;
use super::secrets::Secrets;
use super::value::{check_http_url, resolve_file};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMcp {
    #[serde(default)]
    pub(super) servers: BTreeMap<String, RawMcpServer>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMcpServer {
    command: Option<Vec<String>>,
    url: Option<String>,
    #[serde(default)]
    env_pass: Vec<String>,
    #[serde(default = "default_startup_timeout")]
    startup_timeout_secs: u64,
    #[serde(default = "default_call_timeout")]
    call_timeout_secs: u64,
    tools: Option<Vec<String>>,
    write_tools: Option<Vec<String>>,
}

fn default_startup_timeout() -> u64 {
    20
}

fn default_call_timeout() -> u64 {
    60
}

/// The longest name offered to the model, `SERVER__tool` (what OpenAI-style
/// function names allow).
pub const MAX_TOOL_NAME: usize = 64;

/// Between a server's name and its tool's in the name the model sees.
pub const MCP_SEPARATOR: &str = "__";

/// One configured MCP server.
#[derive(Debug, Clone)]
pub struct McpServerConfig {
    pub name: String,
    pub transport: McpTransport,
    /// Start, `initialize` and `tools/list`, together.
    pub startup_timeout: Duration,
    /// One `tools/call`.
    pub call_timeout: Duration,
    /// Only these tools are offered; `None`: every tool it lists.
    pub tools: Option<Vec<String>>,
    /// These tools are writes; `None`: every tool not annotated read-only.
    pub write_tools: Option<Vec<String>>,
}

/// How a server is reached.
#[derive(Debug, Clone)]
pub enum McpTransport {
    /// A child process speaking JSON-RPC lines on stdin/stdout.
    Stdio(StdioCommand),
    /// Streamable HTTP.
    Http { url: String },
}

/// How a stdio server is started.
#[derive(Debug, Clone)]
pub struct StdioCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
    /// The working directory: the config file's folder.
    pub dir: PathBuf,
    /// PATH and HOME of the harness, when set.
    pub inherited: Vec<(String, String)>,
    /// `env_pass`: each a secret (redacted everywhere).
    pub passed: Vec<(String, Secret)>,
}

impl StdioCommand {
    /// The program as it would start: a path (absolute, or relative to the
    /// config) or a bare name found in the `PATH` it is given; `Err` says
    /// why none would start, for `check` (docs/operating.md, "Commands").
    pub fn executable(&self) -> Result<PathBuf, String> {
        let path = if self.program.components().count() > 1 || self.program.is_absolute() {
            Some(self.program.clone())
        } else {
            let dirs = self
                .inherited
                .iter()
                .find(|(k, _)| k == "PATH")
                .map(|(_, v)| v.as_str())
                .unwrap_or_default();
            // As the process starts it: the first one this user may run.
            std::env::split_paths(dirs)
                .map(|d| d.join(&self.program))
                .find(|p| p.is_file() && may_run(p))
                .or_else(|| {
                    std::env::split_paths(dirs)
                        .map(|d| d.join(&self.program))
                        .find(|p| p.is_file())
                })
        };
        let shown = self.program.display();
        let Some(path) = path else {
            return Err(format!("{shown:?} is not found in PATH"));
        };
        match std::fs::metadata(&path) {
            Ok(m) if !m.is_file() => Err(format!("{} is not a file", path.display())),
            Ok(_) if may_run(&path) => Ok(path),
            Ok(_) => Err(format!("{} is not executable by this user", path.display())),
            Err(_) => Err(format!("{} does not exist", path.display())),
        }
    }
}

/// Whether this user (its effective ids) may run the file at `path`.
fn may_run(path: &Path) -> bool {
    use rustix::fs::{Access, AtFlags};
    rustix::fs::accessat(rustix::fs::CWD, path, Access::EXEC_OK, AtFlags::EACCESS).is_ok()
}

impl McpServerConfig {
    /// What must never be recorded: `env_pass` values, and the keys put in
    /// a `url`: its userinfo and the values of query keys that name a
    /// secret (`api_key`, `token`, … — the rule `--set` uses), as written
    /// and decoded (`url_secrets` in `secrets.rs`).
    pub fn secrets(&self) -> Vec<Secret> {
        let url = match &self.transport {
            McpTransport::Stdio(command) => {
                return command.passed.iter().map(|(_, v)| v.clone()).collect();
            }
            McpTransport::Http { url } => url,
        };
        super::secrets::url_secrets(url)
    }

    /// Whether the allowlist lets `tool` be offered.
    pub fn allows(&self, tool: &str) -> bool {
        self.tools
            .as_ref()
            .is_none_or(|t| t.iter().any(|n| n == tool))
    }
}

/// A name fit for a function name in the chat template: ASCII letters,
/// digits, `_` and `-`.
pub fn is_function_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_TOOL_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A server name: a function-name fragment without `__`, so that
/// `SERVER__tool` splits one way only.
fn is_server_name(name: &str) -> bool {
    is_function_name(name)
        && name.len() <= 32
        && !name.contains(MCP_SEPARATOR)
        && !name.starts_with('_')
        && !name.ends_with('_')
}

pub(super) fn resolve_mcp(
    raw: RawMcp,
    base: &Path,
    home: Option<&Path>,
    secrets: &Secrets<'_>,
) -> Result<Vec<McpServerConfig>, String> {
    raw.servers
        .into_iter()
        .map(|(name, s)| resolve_server(name, s, base, home, secrets))
        .collect()
}

fn resolve_server(
    name: String,
    s: RawMcpServer,
    base: &Path,
    home: Option<&Path>,
    secrets: &Secrets<'_>,
) -> Result<McpServerConfig, String> {
    let at = format!("[mcp.servers.{name}]");
    if !is_server_name(&name) {
        return Err(format!(
            "{at}: the name must be 1-32 ASCII letters, digits, - and single _ (not __, not at either end): its tools are offered as NAME__tool"
        ));
    }
    check_range(
        &format!("{at} startup_timeout_secs"),
        s.startup_timeout_secs,
        bounds::TIMEOUT_SECS,
    )?;
    check_range(
        &format!("{at} call_timeout_secs"),
        s.call_timeout_secs,
        bounds::TIMEOUT_SECS,
    )?;
    for (key, list) in [("tools", &s.tools), ("write_tools", &s.write_tools)] {
        for tool in list.iter().flatten() {
            if !is_function_name(tool)
                || name.len() + MCP_SEPARATOR.len() + tool.len() > MAX_TOOL_NAME
            {
                return Err(format!(
                    "{at} {key}: {tool:?} cannot be offered: {name}{MCP_SEPARATOR}{tool} must be at most {MAX_TOOL_NAME} ASCII letters, digits, _ and -"
                ));
            }
        }
    }
    let transport = match (s.command, s.url) {
        (Some(command), None) => stdio(&at, command, s.env_pass, base, home, secrets)?,
        (None, Some(url)) if s.env_pass.is_empty() => {
            check_http_url(&url, &format!("{at} url"))?;
            McpTransport::Http {
                url: url.trim().to_string(),
            }
        }
        (None, Some(_)) => {
            return Err(format!(
                "{at} env_pass: only a server started with `command` gets an environment"
            ));
        }
        _ => {
            return Err(format!(
                "{at}: set exactly one of `command` (a program and its arguments, started over stdio) or `url` (streamable HTTP)"
            ));
        }
    };
    Ok(McpServerConfig {
        name,
        transport,
        startup_timeout: Duration::from_secs(s.startup_timeout_secs),
        call_timeout: Duration::from_secs(s.call_timeout_secs),
        tools: s.tools,
        write_tools: s.write_tools,
    })
}

fn stdio(
    at: &str,
    command: Vec<String>,
    env_pass: Vec<String>,
    base: &Path,
    home: Option<&Path>,
    secrets: &Secrets<'_>,
) -> Result<McpTransport, String> {
    let mut parts = command.into_iter();
    let program = parts
        .next()
        .filter(|p| !p.trim().is_empty())
        .ok_or_else(|| format!("{at} command: the first item must be the program to start"))?;
    // `./server.py` is the config's neighbour; a bare name is looked up in PATH.
    let program = if program.contains('/') {
        resolve_file(
            base,
            &expand_home(Path::new(&program), home, &format!("{at} command"))?,
        )
    } else {
        PathBuf::from(program)
    };
    let mut passed = Vec::new();
    for var in env_pass {
        if matches!(var.as_str(), "PATH" | "HOME") {
            continue;
        }
        let section = &at[1..at.len() - 1];
        if let Some(value) = secrets.read(section, "env_pass", &var)? {
            passed.push((var, value));
        }
    }
    let inherited = ["PATH", "HOME"]
        .into_iter()
        .filter_map(|k| (secrets.env)(k).map(|v| (k.to_string(), v)))
        .collect();
    Ok(McpTransport::Stdio(StdioCommand {
        program,
        args: parts.collect(),
        // A config named without a folder lives in the working directory.
        dir: if base.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            base.to_path_buf()
        },
        inherited,
        passed,
    }))
}

#[cfg(test)]
mod tests {
    use super::super::*;

    fn parse(servers: &str) -> Result<Config, String> {
        let env = |k: &str| match k {
            "RUNPOD_API_KEY" => Some("rp_secret".to_string()),
            "GITHUB_TOKEN" => Some("ghp_passed_value".to_string()),
            "PATH" => Some("/usr/bin:/bin".to_string()),
            _ => None,
        };
        let text = format!("[runpod]\nendpoint_id = \"e\"\n{servers}");
        Config::parse(
            &text,
            Path::new("/etc/ah/agent.toml"),
            Path::new("/etc/ah"),
            &env,
        )
        .map_err(|e| e.message)
    }

    #[test]
    fn a_stdio_server_gets_path_home_and_its_passed_variables_as_secrets() {
        let cfg = parse(
            "[mcp.servers.files]\ncommand = [\"./bin/server\", \"--root\", \"/srv\"]\nenv_pass = [\"GITHUB_TOKEN\"]\ntools = [\"read_file\"]\nwrite_tools = []\n",
        )
        .unwrap();
        let s = &cfg.mcp[0];
        assert_eq!(s.name, "files");
        assert_eq!(s.startup_timeout.as_secs(), 20);
        assert_eq!(s.call_timeout.as_secs(), 60);
        assert!(s.allows("read_file") && !s.allows("write_file"));
        assert_eq!(s.write_tools.as_deref(), Some(&[][..]));
        let McpTransport::Stdio(StdioCommand {
            program,
            args,
            dir,
            inherited,
            passed,
        }) = &s.transport
        else {
            panic!("{:?}", s.transport)
        };
        assert_eq!(program, Path::new("/etc/ah/bin/server"));
        assert_eq!(args, &["--root", "/srv"]);
        assert_eq!(dir, Path::new("/etc/ah"));
        assert_eq!(
            inherited,
            &[("PATH".to_string(), "/usr/bin:/bin".to_string())]
        );
        assert_eq!(passed[0].0, "GITHUB_TOKEN");
        assert!(
            cfg.redactor()
                .redact("token ghp_passed_value".into())
                .ends_with("***")
        );
        let bare = parse("[mcp.servers.t]\ncommand = [\"uvx\", \"mcp-server-time\"]\n").unwrap();
        let McpTransport::Stdio(StdioCommand { program, .. }) = &bare.mcp[0].transport else {
            panic!()
        };
        assert_eq!(
            program,
            Path::new("uvx"),
            "a bare name is looked up in PATH"
        );
    }

    #[test]
    fn every_misconfigured_server_is_an_error_naming_it() {
        let cases = [
            ("[mcp.servers.a]\n", "set exactly one of `command`"),
            (
                "[mcp.servers.a]\ncommand = [\"x\"]\nurl = \"http://h/mcp\"\n",
                "set exactly one",
            ),
            (
                "[mcp.servers.a]\ncommand = []\n",
                "the first item must be the program",
            ),
            (
                "[mcp.servers.a]\ncommand = [\" \"]\n",
                "the first item must be the program",
            ),
            (
                "[mcp.servers.a__b]\ncommand = [\"x\"]\n",
                "[mcp.servers.a__b]: the name",
            ),
            ("[mcp.servers._a]\ncommand = [\"x\"]\n", "the name must be"),
            (
                "[mcp.servers.\"a b\"]\ncommand = [\"x\"]\n",
                "the name must be",
            ),
            (
                "[mcp.servers.a]\nurl = \"ftp://h/mcp\"\n",
                "must be an http(s) URL",
            ),
            (
                "[mcp.servers.a]\nurl = \"http://h/mcp\"\nenv_pass = [\"GITHUB_TOKEN\"]\n",
                "only a server started with `command`",
            ),
            (
                "[mcp.servers.a]\ncommand = [\"x\"]\nenv_pass = [\"UNSET_VAR\"]\n",
                "environment variable UNSET_VAR",
            ),
            (
                "[mcp.servers.a]\ncommand = [\"x\"]\nenv_pass = [\"ghp_literal-secret\"]\n",
                "does not look like one",
            ),
            (
                "[mcp.servers.a]\ncommand = [\"x\"]\nstartup_timeout_secs = 0\n",
                "startup_timeout_secs = 0 is below its minimum",
            ),
            (
                "[mcp.servers.a]\ncommand = [\"x\"]\ncall_timeout_secs = 99999\n",
                "call_timeout_secs = 99999 is above its ceiling, 3600",
            ),
            (
                "[mcp.servers.a]\ncommand = [\"x\"]\ntools = [\"read file\"]\n",
                "tools: \"read file\" cannot be offered",
            ),
            (
                "[mcp.servers.a]\ncommand = [\"x\"]\nwrite_tools = [\"../x\"]\n",
                "write_tools: \"../x\" cannot be offered",
            ),
            (
                "[mcp.servers.a]\ncommand = [\"x\"]\nsurprise = 1\n",
                "surprise: unknown key (expected one of command, url, env_pass",
            ),
        ];
        for (text, want) in cases {
            let e = parse(text)
                .err()
                .unwrap_or_else(|| panic!("accepted: {text}"));
            assert!(e.contains(want), "{text}\n→ {e}");
            assert!(
                !e.contains("ghp_literal-secret"),
                "a pasted secret echoed: {e}"
            );
        }
        let long = format!("[mcp.servers.{}]\ncommand = [\"x\"]\n", "s".repeat(33));
        assert!(parse(&long).unwrap_err().contains("1-32"));
        let too_long_tool = format!(
            "[mcp.servers.abc]\ncommand = [\"x\"]\ntools = [\"{}\"]\n",
            "t".repeat(60)
        );
        assert!(parse(&too_long_tool).unwrap_err().contains("at most 64"));
    }

    #[test]
    fn keys_in_a_url_are_secrets_and_other_query_values_are_not() {
        let secrets = |url: &str| -> Vec<String> {
            let cfg = parse(&format!("[mcp.servers.w]\nurl = \"{url}\"\n")).unwrap();
            cfg.mcp[0]
                .secrets()
                .iter()
                .map(|s| s.expose().to_string())
                .collect()
        };
        assert_eq!(
            secrets("https://h/mcp?api_key=k3y%2Bplus&transport=stream"),
            ["k3y%2Bplus", "k3y+plus"]
        );
        // A plain user name before a password is no key; the userinfo is.
        assert_eq!(
            secrets("https://user:pa55word@h/mcp"),
            ["pa55word", "user:pa55word"]
        );
        assert_eq!(secrets("https://TOKEN123@h/mcp"), ["TOKEN123"]);
        assert!(secrets("https://h/mcp?transport=stream&v=2").is_empty());
    }

    #[test]
    fn function_names_are_ascii_words_of_64_at_most() {
        for ok in ["a", "read_file", "get-time", "A1", &"x".repeat(64)] {
            assert!(is_function_name(ok), "{ok}");
        }
        for bad in ["", "a b", "a.b", "ä", "a/b", "<|turn>", &"x".repeat(65)] {
            assert!(!is_function_name(bad), "{bad}");
        }
    }
}
