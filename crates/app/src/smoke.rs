//! `test-runpod` (docs/operating.md, "Commands"): a smoke test of the
//! configured endpoint, either kind. Three steps, each printed with what it
//! measured: the endpoint answers HTTP; one short completion; one tool-call
//! round trip (the model is made to call a tool, the result goes back, the
//! server accepts it). A failure is diagnosed in one line naming what to fix —
//! for a refused key or a wrong route, the same line a run stops with
//! ([`harness_config::setup`]). When noteworx is configured, one listing checks
//! its address and token.

use std::io::Write;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use harness_base::http::Trust;
use harness_config::{Config, EndpointKind, NoteworxConfig};
use harness_endpoint::{CallError, Completion, Endpoint, Fit};
use harness_tools::mcp::McpServers;
use harness_tools::noteworx::client::{NoteworxClient, NoteworxError};
use harness_wire::chat::{self, Message, Sampling, Tweaks};
use harness_wire::reply::{OfferedTool, ReadAgainst, read_reply, replayed_assistant};

const STEP_TIMEOUT: Duration = Duration::from_secs(600);

/// Runs every step, printing each as it ends; `true` when all passed.
pub async fn test_endpoint(cfg: &Config, ep: &Endpoint, out: &mut dyn Write) -> bool {
    let kind = match cfg.endpoint.kind {
        EndpointKind::Runpod => "runpod",
        EndpointKind::Openai => "openai",
    };
    let _ = writeln!(out, "endpoint: {kind} {}", cfg.endpoint.base_url);
    let mut sampling = Sampling::from_config(&cfg.model, cfg.endpoint.model.clone());
    sampling.max_tokens = sampling.max_tokens.min(256);
    // Each step's lines are printed as it ends; the first failure ends the
    // endpoint's steps. The notes service is checked either way.
    let endpoint = report(out, reachable(cfg, ep).await)
        && report(out, completion(cfg, ep, &sampling).await)
        && report(out, tool_round_trip(cfg, ep, &sampling).await);
    let notes = match &cfg.noteworx {
        Some(n) => report(out, noteworx(n, &cfg.tls.trust).await),
        None => true,
    };
    let mut servers = true;
    for server in &cfg.mcp {
        servers &= report(out, mcp_server(cfg, &server.name).await);
    }
    endpoint && notes && servers
}

/// One MCP server started (as a run would) and its tools listed
/// (docs/tools.md, "Tools from MCP servers").
async fn mcp_server(cfg: &Config, name: &str) -> Steps {
    let servers = McpServers::new(
        &cfg.mcp,
        &cfg.tls.trust,
        std::sync::Arc::new(cfg.redactor()),
    );
    let t0 = Instant::now();
    let (ready, down) = servers.ready(&[name]).await;
    let problems = servers.problems();
    servers.stop().await;
    let redact = |s: String| cfg.redactor().redact(s);
    let notes: String = ready
        .log_lines
        .into_iter()
        .filter(|n| !n.starts_with(&format!("MCP server {name} started")))
        .filter(|n| !problems.contains(n))
        .map(|n| format!("     {}\n", redact(n)))
        .collect();
    match (down.into_iter().next().map(|d| d.why), problems.first()) {
        (None, None) => Ok(format!(
            "ok   mcp {name}: started in {} ms; tools: {}\n{notes}",
            t0.elapsed().as_millis(),
            list(&ready.tools)
        )),
        (None, Some(problem)) => Err(format!(
            "{notes}FAIL mcp {name}: {}; it started, tools: {}\n",
            redact(problem.clone()),
            list(&ready.tools)
        )),
        (Some(e), _) => Err(format!("{notes}FAIL mcp {name}: {}\n", redact(e.why))),
    }
}

fn list(tools: &[std::sync::Arc<harness_tools::mcp::McpTool>]) -> String {
    if tools.is_empty() {
        return "none".into();
    }
    tools
        .iter()
        .map(|t| format!("{}{}", t.name, if t.write { " (write)" } else { "" }))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One `GET /api/notes?limit=1` with the token: the notes service is there
/// and takes the token (docs/operating.md, "Commands").
async fn noteworx(cfg: &NoteworxConfig, trust: &Trust) -> Steps {
    let fail = |why: String| Err(format!("FAIL noteworx: {why}\n"));
    let client = match NoteworxClient::new(cfg, trust) {
        Ok(c) => c,
        Err(e) => return fail(format!("{e:#}")),
    };
    let t0 = Instant::now();
    let base = "check [tools.noteworx] base_url";
    match client.list_notes(None, None, Some(1)).await {
        Ok(notes) => Ok(format!(
            "ok   noteworx: {} listed {} note(s) in {} ms\n",
            cfg.base_url,
            notes.len(),
            t0.elapsed().as_millis()
        )),
        Err(NoteworxError::Status { status, message })
            if harness_config::setup::is_noteworx_fault(status) =>
        {
            fail(harness_config::setup::noteworx_diagnosis(
                &cfg.token_env,
                status,
                &message,
            ))
        }
        Err(NoteworxError::Status { status: 404, .. }) => fail(format!(
            "no notes API at {} (HTTP 404 for /api/notes); {base}",
            cfg.base_url
        )),
        Err(e) => fail(format!("{e}; {base}")),
    }
}

/// Prints a step's lines; `true` when it passed.
fn report(out: &mut dyn Write, step: Steps) -> bool {
    let (Ok(lines) | Err(lines)) = &step;
    let _ = write!(out, "{lines}");
    step.is_ok()
}

/// Each step's lines so far: `Err` once a step failed (its FAIL line last).
type Steps = Result<String, String>;

const TWEAKS: Tweaks = Tweaks {
    seed: None,
    thinking_off: true,
};

async fn reachable(cfg: &Config, ep: &Endpoint) -> Steps {
    let t0 = Instant::now();
    match ep.prober().probe().await {
        Ok(p) if p.fit == Fit::Fits => Ok(format!(
            "ok   reachable: HTTP {} in {} ms ({})\n",
            p.status,
            t0.elapsed().as_millis(),
            p.what
        )),
        Ok(p) if p.fit == Fit::NotReady => {
            Err(format!("FAIL reachable: {}; try again later\n", p.what))
        }
        Ok(p) => Err(format!("FAIL reachable: {}\n", p.misfit(cfg.endpoint.kind))),
        Err(why) => Err(format!("FAIL reachable: {why}\n")),
    }
}

async fn completion(cfg: &Config, ep: &Endpoint, sampling: &Sampling) -> Steps {
    let messages = [
        Message::system("Reply with one short sentence."),
        Message::user("Say hello."),
    ];
    let body = chat::build_request(&messages, &[], sampling, TWEAKS, None);
    match timed_call(cfg, ep, body).await {
        Ok((c, ms)) => Ok(format!("ok   completion: {}\n", describe(&c, ms))),
        Err(e) => Err(format!("FAIL completion: {}\n", ep.diagnose(&e))),
    }
}

/// The model is made to call a tool; the result goes back and must be accepted.
async fn tool_round_trip(cfg: &Config, ep: &Endpoint, sampling: &Sampling) -> Steps {
    let tool = json!({"type": "function", "function": {
        "name": "get_current_time",
        "description": "Get the current time in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    }});
    let mut forced = sampling.clone();
    forced
        .extra
        .entry("tool_choice")
        .or_insert(Value::from("required"));
    let mut messages = vec![
        Message::system("Use the tool to answer."),
        Message::user("What time is it in Paris?"),
    ];
    let body = chat::build_request(
        &messages,
        std::slice::from_ref(&tool),
        &forced,
        TWEAKS,
        None,
    );
    let (first, ms) = timed_call(cfg, ep, body)
        .await
        .map_err(|e| format!("FAIL tool call: {}\n", ep.diagnose(&e)))?;
    let choice = first.response.choices.first().cloned().unwrap_or_default();
    let reply = read_reply(
        &choice.message,
        choice.finish_reason.as_deref(),
        "smoke",
        &ReadAgainst {
            offered: &[OfferedTool::of(&tool)],
            ..ReadAgainst::NOTHING
        },
    );
    if reply.calls.is_empty() {
        return Err("FAIL tool call: the model answered without calling the tool (is llama-server started with --jinja?)\n".into());
    }
    let mut lines = format!(
        "ok   tool call: {} call(s) to {}; {}\n",
        reply.calls.len(),
        reply.calls[0].function.name,
        describe(&first, ms)
    );
    let assistant = replayed_assistant(&reply, harness_config::ReplayThinking::Strip);
    let ids: Vec<String> = assistant.tool_calls.iter().map(|c| c.id.clone()).collect();
    messages.push(assistant);
    for id in ids {
        messages.push(Message::tool(id, "12:00"));
    }
    let body = chat::build_request(&messages, &[tool], sampling, TWEAKS, None);
    match timed_call(cfg, ep, body).await {
        Ok((c, ms)) => {
            lines.push_str(&format!(
                "ok   tool result accepted: {}\n",
                describe(&c, ms)
            ));
            Ok(lines)
        }
        Err(e) => Err(format!("{lines}FAIL tool result: {}\n", ep.diagnose(&e))),
    }
}

async fn timed_call(
    cfg: &Config,
    ep: &Endpoint,
    body: Value,
) -> Result<(Completion, u128), CallError> {
    let t0 = Instant::now();
    let deadline = t0 + STEP_TIMEOUT.max(Duration::from_secs(cfg.endpoint.request_timeout_secs));
    let clock = chrono::Utc::now;
    let c = ep
        .chat(
            body,
            deadline,
            &CancellationToken::new(),
            &clock,
            &mut |_| {},
        )
        .await?;
    Ok((c, t0.elapsed().as_millis()))
}

fn describe(c: &Completion, ms: u128) -> String {
    let usage = c.response.usage.unwrap_or_default();
    let mut s = format!(
        "{ms} ms, model {}, {} prompt + {} completion tokens",
        c.response.model.as_deref().unwrap_or("?"),
        usage.prompt_tokens,
        usage.completion_tokens
    );
    if let Some(job) = &c.job {
        let ms = |v: Option<u64>| v.map_or("-".to_string(), |v| format!("{v} ms"));
        s.push_str(&format!(
            ", runpod delay {} execution {}",
            ms(job.delay_time),
            ms(job.execution_time)
        ));
    }
    s
}
