//! Tools from MCP servers (docs/tools.md), on the official Rust SDK (`rmcp`).
//!
//! [`McpServers`] holds a run's configured servers. Each is started once,
//! when the first task that may use it asks ([`McpServers::ready`]): spawn
//! (or connect), `initialize` and `tools/list`, all within
//! `startup_timeout_secs`. A server that does not come up, or that died,
//! answers every later task with [`Unavailable`] — never a task run with its
//! tools silently missing. [`McpServers::stop`] ends them all before exit.

mod answers;
mod lines;
mod listing;
mod process;
mod result;
mod server;

pub use listing::{MAX_SCHEMA_BYTES, MAX_SCHEMA_DEPTH, MAX_TOOLS, McpTool, Offer};
pub use process::kill_all;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService, ServiceError};
use serde_json::{Map, Value};

use crate::ToolOutput;
use harness_base::http::Trust;
use harness_base::sync::lock;
use harness_config::{McpServerConfig, Redactor};
use process::{Process, Stderr};

/// JSON-RPC lines longer than this are dropped by the transport: a result
/// is cut to at most 10^6 characters anyway, and a listing this long
/// would already be refused, so nothing bigger is ever parsed (docs/tools.md,
/// "Tools from MCP servers").
const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;

/// The same bound over streamable HTTP, where the SDK ends the connection
/// on a bigger answer (the server is then down for the run): twice the
/// line's, so a text result the Python SDK sends twice (as text and as
/// structured content) still fits.
const MAX_HTTP_BYTES: usize = 8 * 1024 * 1024;

/// The MCP servers of one run.
pub struct McpServers {
    servers: Vec<Server>,
    redactor: Arc<Redactor>,
}

impl std::fmt::Debug for McpServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.servers.iter().map(|s| s.cfg.name.as_str()).collect();
        f.debug_struct("McpServers")
            .field("servers", &names)
            .finish()
    }
}

struct Server {
    cfg: McpServerConfig,
    /// What a server over HTTPS is checked against (`[tls]`).
    trust: Trust,
    state: tokio::sync::Mutex<State>,
    stderr: Arc<Mutex<Stderr>>,
    /// The process while it starts: a start that fails or runs out of
    /// time kills it and waits for it.
    starting: Mutex<Option<Process>>,
    /// What its listing says is wrong with its configuration.
    problem: Mutex<Option<String>>,
}

enum State {
    NotStarted,
    Up(Box<Up>),
    /// It did not start, or it died: why, for every task that may use it.
    Down(Unavailable),
}

struct Up {
    service: RunningService<RoleClient, ()>,
    process: Option<Process>,
    tools: Vec<Arc<McpTool>>,
}

/// A server a task may use is not there: the task ends retryable
/// `tool_server_unavailable` with this message (docs/tools.md, "Tools from
/// MCP servers").
#[derive(Debug, Clone, PartialEq)]
pub struct Unavailable {
    pub why: String,
}

impl Unavailable {
    fn new(why: impl Into<String>) -> Unavailable {
        Unavailable { why: why.into() }
    }
}

/// A server that is not up, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Down {
    pub server: String,
    pub why: Unavailable,
}

/// The tools of the servers a task may use, and what their start wrote.
#[derive(Debug, Default)]
pub struct Ready {
    pub tools: Vec<Arc<McpTool>>,
    /// `run.log` lines: a start, tools left out, stderr.
    pub log_lines: Vec<String>,
}

impl McpServers {
    pub fn new(servers: &[McpServerConfig], trust: &Trust, redactor: Arc<Redactor>) -> McpServers {
        let servers = servers
            .iter()
            .map(|cfg| Server {
                cfg: cfg.clone(),
                trust: trust.clone(),
                state: tokio::sync::Mutex::new(State::NotStarted),
                stderr: Arc::new(Mutex::new(Stderr::new(Arc::clone(&redactor)))),
                starting: Mutex::new(None),
                problem: Mutex::new(None),
            })
            .collect();
        McpServers { servers, redactor }
    }

    /// The servers named, in configuration order.
    fn named<'a>(&'a self, names: &'a [&str]) -> impl Iterator<Item = &'a Server> {
        self.servers
            .iter()
            .filter(|s| names.contains(&s.cfg.name.as_str()))
    }

    /// Starts the named servers that have not started, in order, and gives
    /// the tools of those that are up, and why each other one is not.
    pub async fn ready(&self, names: &[&str]) -> (Ready, Vec<Down>) {
        let mut ready = Ready::default();
        let mut down = Vec::new();
        for server in self.named(names) {
            let up = server.ready(&self.redactor, &mut ready.log_lines).await;
            ready.log_lines.extend(server.stderr_lines());
            match up {
                Ok(tools) => ready.tools.extend(tools),
                Err(mut e) => {
                    // It may quote the server: no terminal escape gets through.
                    e.why = harness_base::text::printable(&e.why).into_owned();
                    down.push(Down {
                        server: server.cfg.name.clone(),
                        why: e,
                    });
                }
            }
        }
        (ready, down)
    }

    /// Each server this run tried to start, and whether it is up now (a
    /// server that died is not), for the metrics.
    pub async fn up(&self) -> Vec<(String, bool)> {
        let mut out = Vec::new();
        for server in &self.servers {
            let mut state = server.state.lock().await;
            Server::notice_death(&server.cfg.name, &mut state);
            match &*state {
                State::NotStarted => {}
                State::Up(_) => out.push((server.cfg.name.clone(), true)),
                State::Down(_) => out.push((server.cfg.name.clone(), false)),
            }
        }
        out
    }

    /// Why one of the named servers is down, if one is: a task that may
    /// use it does not pass as done (docs/tools.md, "Tools from MCP
    /// servers").
    pub async fn down(&self, names: &[&str]) -> Option<Unavailable> {
        for server in self.named(names) {
            let mut state = server.state.lock().await;
            Server::notice_death(&server.cfg.name, &mut state);
            if let State::Down(down) = &*state {
                return Some(down.clone());
            }
        }
        None
    }

    /// What the listings of the servers started so far say is wrong with
    /// the configuration: the run exits 1 for it when nothing worse
    /// happened, and `test-runpod` fails on it.
    pub fn problems(&self) -> Vec<String> {
        self.servers
            .iter()
            .filter_map(|s| lock(&s.problem).clone())
            .collect()
    }

    /// Stderr lines the named servers wrote since they were last taken.
    pub fn stderr(&self, names: &[&str]) -> Vec<String> {
        self.named(names).flat_map(Server::stderr_lines).collect()
    }

    /// Calls `tool` with `arguments`. Every failure is an error result: a
    /// timeout for this call, a dead server for this call and (as
    /// [`Unavailable`]) for every later task.
    pub async fn call(&self, tool: &McpTool, arguments: Map<String, Value>) -> ToolOutput {
        let Some(server) = self.servers.iter().find(|s| s.cfg.name == tool.server) else {
            return ToolOutput::error(format!("No MCP server {} is configured.", tool.server));
        };
        let peer = match &*server.state.lock().await {
            State::Up(up) => up.service.peer().clone(),
            State::Down(down) => {
                return ToolOutput::error(format!("{}. Do not call its tools again.", down.why));
            }
            State::NotStarted => {
                return ToolOutput::error(format!("MCP server {} was not started.", tool.server));
            }
        };
        let mut params = CallToolRequestParams::new(tool.tool.clone());
        params.arguments = Some(arguments);
        let limit = server.cfg.call_timeout;
        match tokio::time::timeout(limit, peer.call_tool(params)).await {
            Ok(Ok(answer)) => result::output(answer),
            // The loop redacts, then cuts: nothing is clipped before that.
            Ok(Err(ServiceError::McpError(e))) => {
                ToolOutput::error(format!("{} refused the call: {}", tool.name, e.message))
            }
            // A closed connection, or a send that failed because the process
            // is gone, is a death; a send refused once (an HTTP 500) is not.
            Ok(Err(e @ (ServiceError::TransportClosed | ServiceError::TransportSend(_))))
                if matches!(e, ServiceError::TransportClosed) || server.died().await =>
            {
                let why = format!("MCP server {} stopped answering ({e})", tool.server);
                server.went_down(&why).await;
                ToolOutput::error(format!("{why}. Do not call its tools again."))
            }
            Ok(Err(e)) => ToolOutput::error(format!(
                "{} gave no usable answer: {}",
                tool.name,
                server::short(&e.to_string(), &self.redactor)
            )),
            Err(_) => ToolOutput::error(format!(
                "{} did not answer within {} s (call_timeout_secs); it was given up.",
                tool.name,
                limit.as_secs()
            )),
        }
    }

    /// Stops every started server: the connection closed, then its process
    /// group sent SIGTERM and, 2 s later, SIGKILL.
    pub async fn stop(&self) {
        let stops = self.servers.iter().map(|s| async move {
            // A start cut short by a signal left its process here.
            let starting = lock(&s.starting).take();
            if let Some(p) = starting {
                p.kill().await;
            }
            let state = std::mem::replace(
                &mut *s.state.lock().await,
                State::Down(Unavailable::new("stopped at the end of the run")),
            );
            if let State::Up(up) = state {
                let Up {
                    service,
                    mut process,
                    ..
                } = *up;
                // Before the connection closes: a stdio server exits at the
                // end of its stdin, and a child that left its group is then
                // no longer known as its own.
                process.iter_mut().for_each(Process::note_strays);
                let _ = tokio::time::timeout(Duration::from_secs(1), service.cancel()).await;
                if let Some(p) = process {
                    p.stop().await;
                }
            }
        });
        futures::future::join_all(stops).await;
    }
}

/// A tool name of the form `SERVER__tool` checked against the config:
/// `None` when the name is not of that form, else its server or why the
/// configuration cannot offer it.
pub fn configured<'c>(
    servers: &'c [McpServerConfig],
    name: &str,
) -> Option<Result<&'c McpServerConfig, String>> {
    let (server, tool) = name.split_once(harness_config::MCP_SEPARATOR)?;
    if !harness_config::is_function_name(tool) {
        return Some(Err(format!(
            "{name:?}: after SERVER__ comes the name of one of its tools"
        )));
    }
    let Some(cfg) = servers.iter().find(|s| s.name == server) else {
        let known: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
        return Some(Err(format!(
            "{name:?} names MCP server {server:?}, which is not configured (servers: {})",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        )));
    };
    if !cfg.allows(tool) {
        return Some(Err(format!(
            "{name:?}: {tool:?} is not on the tools allowlist of [mcp.servers.{server}] ({})",
            cfg.tools.as_deref().unwrap_or_default().join(", ")
        )));
    }
    Some(Ok(cfg))
}

/// The servers a task may use: those its `tools` name, or every server
/// when it names none.
pub fn servers_for<'c>(servers: &'c [McpServerConfig], names: Option<&[String]>) -> Vec<&'c str> {
    servers
        .iter()
        .filter(|s| {
            names.is_none_or(|names| {
                names.iter().any(|n| {
                    n.split_once(harness_config::MCP_SEPARATOR)
                        .is_some_and(|(server, _)| server == s.name)
                })
            })
        })
        .map(|s| s.name.as_str())
        .collect()
}

#[cfg(test)]
mod tests;
