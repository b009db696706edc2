//! One server's life: started (spawn or connect, `initialize`, a bounded
//! `tools/list`), watched for its death, and its stderr taken for
//! `run.log`.

use super::State;
use super::answers::{self};
use super::{MAX_HTTP_BYTES, MAX_LINE_BYTES, Server, Unavailable, Up, lines, listing, process};
use crate::mcp::listing::{MAX_TOOLS, McpTool};
use crate::mcp::process::Process;
use harness_base::http::TransportFailure;
use harness_base::sync::lock;
use harness_config::{McpTransport, Redactor};
use rmcp::ServiceExt;
use rmcp::service::{ClientInitializeError, RoleClient, RunningService};
use std::sync::Arc;
use std::time::Instant;

/// Pages of `tools/list` read at most, and tools kept from them: a server
/// that lists on and on is cut short (the rest is said, not read).
const MAX_PAGES: usize = 8;
const MAX_LISTED: usize = 2 * MAX_TOOLS;

impl Server {
    pub(super) async fn ready(
        &self,
        redactor: &Redactor,
        log_lines: &mut Vec<String>,
    ) -> Result<Vec<Arc<McpTool>>, Unavailable> {
        let name = &self.cfg.name;
        let mut state = self.state.lock().await;
        Server::notice_death(name, &mut state);
        if matches!(*state, State::NotStarted) {
            let t0 = Instant::now();
            let started =
                tokio::time::timeout(self.cfg.startup_timeout, self.start(redactor)).await;
            let process = lock(&self.starting).take();
            if let (Some(p), Ok(Err(_)) | Err(_)) = (process, &started) {
                p.kill().await;
            }
            *state = match started {
                Ok(Ok((up, left_out))) => {
                    log_lines.push(format!(
                        "MCP server {name} started in {} ms; tools: {}",
                        t0.elapsed().as_millis(),
                        list(&up.tools)
                    ));
                    log_lines.extend(lock(&self.problem).clone());
                    log_lines.extend(
                        left_out
                            .into_iter()
                            .map(|l| format!("MCP server {name}: {l}")),
                    );
                    State::Up(Box::new(up))
                }
                Ok(Err(down)) => State::Down(down),
                Err(_) => State::Down(Unavailable::new(format!(
                    "MCP server {name} did not start and list its tools within {} s (startup_timeout_secs)",
                    self.cfg.startup_timeout.as_secs()
                ))),
            };
        }
        match &*state {
            State::Up(up) => Ok(up.tools.clone()),
            State::Down(down) => {
                let tail = lock(&self.stderr).tail();
                let why = if tail.is_empty() {
                    format!("{}; it wrote nothing to stderr", down.why)
                } else {
                    format!("{}; its stderr ends: {tail}", down.why)
                };
                Err(Unavailable::new(why))
            }
            State::NotStarted => Err(Unavailable::new(format!(
                "MCP server {name} was not started"
            ))),
        }
    }

    /// Spawns or connects, initializes, and lists the tools.
    async fn start(&self, redactor: &Redactor) -> Result<(Up, Vec<String>), Unavailable> {
        let name = &self.cfg.name;
        let failed =
            |why: String| Unavailable::new(format!("MCP server {name} did not start: {why}"));
        let service = match &self.cfg.transport {
            McpTransport::Stdio(command) => {
                let (process, stdout, stdin) =
                    process::spawn(command, &self.stderr).map_err(|e| {
                        failed(format!("cannot run {}: {e}", command.program.display()))
                    })?;
                *lock(&self.starting) = Some(process);
                let (read, write) = tokio::io::duplex(64 * 1024);
                tokio::spawn(lines::relay(stdout, write, MAX_LINE_BYTES));
                let transport =
                    rmcp::transport::async_rw::AsyncRwTransport::new_client(read, stdin)
                        .with_max_line_length(MAX_LINE_BYTES);
                ().serve(answers::AnswersOnly::new(transport))
                    .await
                    .map_err(|e| failed(short(&chain(&e), redactor)))?
            }
            McpTransport::Http { url } => {
                // The harness's own client: one HTTP stack and one TLS
                // configuration for every connection it makes.
                // Session id and headers never follow a redirect to another
                // host ([`same_origin_redirects`]); no idle connection kept.
                let client = harness_base::http::client(&self.trust)
                    .map_err(|e| failed(short(&chain(&e), redactor)))?
                    .redirect(same_origin_redirects())
                    .pool_max_idle_per_host(0)
                    .build()
                    .map_err(|e| failed(short(&chain(&e), redactor)))?;
                let limits =
                    rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                        url.as_str(),
                    )
                    .max_sse_event_size(MAX_HTTP_BYTES)
                    .max_json_response_size(MAX_HTTP_BYTES);
                let transport =
                    rmcp::transport::StreamableHttpClientTransport::with_client(client, limits);
                ().serve(answers::AnswersOnly::new(transport))
                    .await
                    .map_err(|e| failed(short(&http_start_failure(&e), redactor)))?
            }
        };
        let (listed, more) = list_tools(&service, redactor).await.map_err(failed)?;
        let read = listed.len();
        let mut offer = listing::offer(&self.cfg, listed, redactor);
        if more {
            offer.left_out.push(format!(
                "the listing goes on past the {read} tools read (at most {MAX_PAGES} pages, {MAX_LISTED} tools); the rest was not read{}",
                if offer.unlisted.is_empty() {
                    String::new()
                } else {
                    format!(", and {} was not among them", offer.unlisted.join(", "))
                }
            ));
        }
        // A name the server does not list is a typo, or the server changed,
        // unless the listing was cut before it. The server's answer does not
        // stop the inbox (docs/tools.md, "Tools from MCP servers"): it is
        // offered with what it lists, and the run says what to fix.
        if !offer.unlisted.is_empty() && !more {
            let problem = format!(
                "MCP server {name} does not list {} (it lists: {}): fix [mcp.servers.{name}] tools / write_tools",
                offer.unlisted.join(", "),
                offer.listed.join(", ")
            );
            *lock(&self.problem) = Some(problem);
        }
        let process = lock(&self.starting).take();
        Ok((
            Up {
                service,
                process,
                tools: offer.tools,
            },
            offer.left_out,
        ))
    }

    /// An `Up` server whose process ended or whose connection closed is
    /// `Down` from now on.
    pub(super) fn notice_death(name: &str, state: &mut State) {
        if let State::Up(up) = state {
            let exited = up.process.as_mut().and_then(Process::exited);
            if let Some(status) = exited.or_else(|| {
                up.service
                    .is_transport_closed()
                    .then(|| "its connection closed".to_string())
            }) {
                *state = State::Down(Unavailable::new(format!(
                    "MCP server {name} died ({status})"
                )));
            }
        }
    }

    /// Whether the server is gone (its process ended, its connection closed).
    pub(super) async fn died(&self) -> bool {
        let mut state = self.state.lock().await;
        Server::notice_death(&self.cfg.name, &mut state);
        !matches!(*state, State::Up(_))
    }

    pub(super) async fn went_down(&self, why: &str) {
        let mut state = self.state.lock().await;
        if matches!(*state, State::Up(_)) {
            // The process (if any) is killed as `Up` drops.
            *state = State::Down(Unavailable::new(why));
        }
    }

    pub(super) fn stderr_lines(&self) -> Vec<String> {
        let (lines, left_out) = lock(&self.stderr).take();
        let name = &self.cfg.name;
        let mut out: Vec<String> = lines
            .into_iter()
            .map(|l| format!("MCP server {name} stderr: {l}"))
            .collect();
        if left_out > 0 {
            out.push(format!(
                "MCP server {name} stderr: {left_out} more line(s) left out"
            ));
        }
        out
    }
}

/// `tools/list`, page by page, at most [`MAX_PAGES`] pages and
/// [`MAX_LISTED`] tools; `true` when the listing went on.
async fn list_tools(
    service: &RunningService<RoleClient, ()>,
    redactor: &Redactor,
) -> Result<(Vec<rmcp::model::Tool>, bool), String> {
    let mut tools = Vec::new();
    let mut cursor = None;
    for _ in 0..MAX_PAGES {
        let params = rmcp::model::PaginatedRequestParams::default().with_cursor(cursor);
        let page = service
            .peer()
            .list_tools(Some(params))
            .await
            .map_err(|e| format!("tools/list failed: {}", short(&e.to_string(), redactor)))?;
        tools.extend(page.tools);
        cursor = page.next_cursor;
        if tools.len() > MAX_LISTED {
            // One page may hold any number (within a line's 4 MiB).
            tools.truncate(MAX_LISTED);
            return Ok((tools, true));
        }
        if cursor.is_none() {
            return Ok((tools, false));
        }
    }
    Ok((tools, true))
}

/// Redirects an MCP POST may follow: 307 and 308 to the same origin, a
/// few at most.
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let keeps_body = matches!(attempt.status().as_u16(), 307 | 308);
        let first = attempt.previous().first().map(reqwest::Url::origin);
        if !keeps_body || first != Some(attempt.url().origin()) {
            attempt.stop()
        } else if attempt.previous().len() > 5 {
            attempt.error("more than 5 redirects")
        } else {
            attempt.follow()
        }
    })
}

/// An error and its causes, `: `-joined: a cause kept only in a source
/// (an I/O error under the SDK's) is not lost.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = String::new();
    for cause in harness_base::error::causes(e) {
        let more = cause.to_string();
        if text.is_empty() {
            text = more;
        } else if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
    }
    text
}

/// A start over HTTP that failed, in words: when the request under it got
/// no answer, that failure as every other client says it (the host and
/// port, the cause, and for a certificate no trusted root vouches for, what
/// to set) — rmcp keeps the request's error, but not as a cause, so
/// [`chain`] would end at "error sending request"; else the chain.
fn http_start_failure(e: &ClientInitializeError) -> String {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    let unanswered = match e {
        ClientInitializeError::TransportError { error, .. } => error
            .error
            .downcast_ref::<StreamableHttpError<reqwest::Error>>()
            .and_then(|e| match e {
                StreamableHttpError::Client(e) => Some(e),
                _ => None,
            }),
        _ => None,
    };
    match unanswered {
        Some(e) => TransportFailure::of(e, None).to_string(),
        None => chain(e),
    }
}

/// An SDK error for a message: redacted first, then its first 100 and
/// last 200 characters (the cause is at the end, after type names).
pub(super) fn short(e: &str, redactor: &Redactor) -> String {
    let e = redactor.redact_str(e);
    let n = e.chars().count();
    if n <= 300 {
        return e.into_owned();
    }
    let head: String = e.chars().take(100).collect();
    let tail: String = e.chars().skip(n - 200).collect();
    format!("{head}…{tail}")
}

fn list(tools: &[Arc<McpTool>]) -> String {
    if tools.is_empty() {
        return "none".into();
    }
    tools
        .iter()
        .map(|t| t.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
