//! `test-runpod` (SPEC §2): a smoke test of the configured endpoint, either
//! kind. Three steps, each printed with what it measured: the endpoint
//! answers HTTP; one short completion; one tool-call round trip (the model
//! is made to call a tool, the result goes back, the server accepts it).
//! A failure is diagnosed in one line naming what to fix.

use std::io::Write;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::chat::{self, Message, Sampling, Tweaks};
use crate::commands::exit;
use crate::config::{Config, EndpointKind};
use crate::endpoint::{CallError, Completion, Endpoint};
use crate::reply::{read_reply, replayed_assistant};

const STEP_TIMEOUT: Duration = Duration::from_secs(600);

pub async fn test_endpoint(cfg: &Config, ep: &Endpoint, out: &mut dyn Write) -> u8 {
    let kind = match cfg.endpoint.kind {
        EndpointKind::Runpod => "runpod",
        EndpointKind::Openai => "openai",
    };
    let _ = writeln!(out, "endpoint: {kind} {}", cfg.endpoint.base_url);
    let mut sampling = Sampling::from_config(&cfg.model, cfg.endpoint.model.clone());
    sampling.max_tokens = sampling.max_tokens.min(256);
    // Each step's lines are printed as it ends; the first failure ends the test.
    let passed = report(out, reachable(ep).await)
        && report(out, completion(cfg, ep, &sampling).await)
        && report(out, tool_round_trip(cfg, ep, &sampling).await);
    if passed { exit::OK } else { exit::FAILED }
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

async fn reachable(ep: &Endpoint) -> Steps {
    let t0 = Instant::now();
    match ep.ping().await {
        Ok(status) => Ok(format!(
            "ok   reachable: HTTP {status} in {} ms\n",
            t0.elapsed().as_millis()
        )),
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
        Err(e) => Err(format!("FAIL completion: {}\n", diagnose(cfg, &e))),
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
        .map_err(|e| format!("FAIL tool call: {}\n", diagnose(cfg, &e)))?;
    let choice = first.response.choices.first().cloned().unwrap_or_default();
    let reply = read_reply(
        &choice.message,
        choice.finish_reason.as_deref(),
        "smoke",
        &|_| false,
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
    let assistant = replayed_assistant(&reply, crate::config::ReplayThinking::Strip);
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
        Err(e) => Err(format!("{lines}FAIL tool result: {}\n", diagnose(cfg, &e))),
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

/// One line saying what failed and what to check.
pub fn diagnose(cfg: &Config, e: &CallError) -> String {
    let key_var = match cfg.endpoint.kind {
        EndpointKind::Runpod => "the variable named by [runpod] api_key_env",
        EndpointKind::Openai => "the variable named by [openai] api_key_env",
    };
    match e {
        CallError::Rejected {
            status: 401 | 403, ..
        } => format!("the endpoint refused the API key ({e}); check {key_var}"),
        CallError::Rejected { status: 404, .. } => match cfg.endpoint.kind {
            EndpointKind::Runpod => {
                format!("no such endpoint ({e}); check [runpod] endpoint_id or endpoint_url")
            }
            EndpointKind::Openai => format!(
                "no chat route there ({e}); check [openai] base_url (llama-server: http://HOST:PORT/v1)"
            ),
        },
        _ => e.to_string(),
    }
}
