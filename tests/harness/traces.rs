//! Traces (docs/budget-and-traces.md, "Traces"): each task is one OpenTelemetry
//! trace sent over OTLP/HTTP protobuf — `invoke_agent <task>` over a `chat`
//! span per model request and an `execute_tool` span per call — and a collector
//! that is down, never answers, fails, refuses the size or is another service
//! costs at most `[traces] flush_secs` and a warning, never an outcome, a
//! file's place or the exit code. The header secret is found nowhere.

use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::common::*;

/// What `OTLP_HEADERS` holds: a hosted collector's key.
const SECRET: &str = "tr4ce-k3y-never-shown";

/// A collector answering every POST to `/v1/traces` as `answer` says.
async fn collector(answer: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/traces"))
        .respond_with(answer)
        .mount(&server)
        .await;
    server
}

fn traces_config(endpoint: &str, flush_secs: u64) -> String {
    format!(
        "[traces]\nendpoint = \"{endpoint}\"\nheaders_env = \"OTLP_HEADERS\"\nflush_secs = {flush_secs}\n"
    )
}

/// `args` run by the binary with the header secret set. A run still going
/// after `bin`'s 120 s is killed (no exit code): a test fails instead of
/// hanging on a run that waits for its collector without bound.
async fn run_traced(project: &Project, args: &[&str]) -> std::process::Output {
    let mut cmd = bin(project);
    cmd.args(args).env(
        "OTLP_HEADERS",
        format!("authorization=Bearer {SECRET},x-project-name=harness"),
    );
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

/// `run` of one task (a failed tool call, then the answer) with a
/// collector that takes everything: the collector kept, the project with
/// its model, the output.
async fn one_traced_run() -> (MockServer, Scene, std::process::Output) {
    let otlp = collector(ResponseTemplate::new(200)).await;
    let s = scenario()
        .by_progress(two_turns())
        .config(&traces_config(&format!("{}/v1/traces", otlp.uri()), 5))
        .task("hello", "Say hello.")
        .build()
        .await;
    let out = run_traced(&s, &["run"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    (otlp, s, out)
}

/// Every span the collector got, decoded, with the request headers.
async fn received(server: &MockServer) -> Vec<(wiremock::Request, Vec<Span>)> {
    let requests = server.received_requests().await.unwrap_or_default();
    requests
        .into_iter()
        .map(|r| {
            let decoded = ExportTraceServiceRequest::decode(r.body.as_slice()).unwrap();
            let spans = decoded
                .resource_spans
                .into_iter()
                .flat_map(|rs| rs.scope_spans)
                .flat_map(|ss| ss.spans)
                .collect();
            (r, spans)
        })
        .collect()
}

fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a any_value::Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
}

fn int(span: &Span, key: &str) -> i64 {
    match attr(span, key) {
        Some(any_value::Value::IntValue(n)) => *n,
        other => panic!("{key} on {}: {other:?}", span.name),
    }
}

fn text<'a>(span: &'a Span, key: &str) -> &'a str {
    match attr(span, key) {
        Some(any_value::Value::StringValue(s)) => s,
        other => panic!("{key} on {}: {other:?}", span.name),
    }
}

/// Every file under the project, as text, and what the run printed.
fn everything(project: &Project, out: &std::process::Output) -> String {
    let mut all = format!("{}{}", stdout(out), stderr(out));
    let mut stack = vec![project.root().to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                all.push_str(&String::from_utf8_lossy(
                    &std::fs::read(&p).unwrap_or_default(),
                ));
            }
        }
    }
    all
}

fn metric(project: &Project, name: &str) -> Option<String> {
    let text = std::fs::read_to_string(project.root().join("logs/agent-harness.prom")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ').map(str::to_string))
}

#[tokio::test]
async fn a_task_is_one_trace_of_its_requests_and_calls_and_the_header_key_is_nowhere() {
    let (otlp, s, out) = one_traced_run().await;
    let got = received(&otlp).await;
    assert_eq!(got.len(), 1, "one batch for one task");
    let (request, spans) = &got[0];
    assert_eq!(
        request.headers.get("content-type").unwrap(),
        "application/x-protobuf"
    );
    assert_eq!(
        request.headers.get("authorization").unwrap(),
        &format!("Bearer {SECRET}")
    );
    assert_eq!(request.headers.get("x-project-name").unwrap(), "harness");
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "invoke_agent hello",
            "chat",
            "execute_tool no_such_tool",
            "chat"
        ]
    );
    let root = &spans[0];
    assert!(
        spans.iter().all(|s| s.trace_id == root.trace_id),
        "one trace"
    );
    assert!(spans[1..].iter().all(|s| s.parent_span_id == root.span_id));
    let run_dir = the_run_dir(&s, "hello");
    let summary = s.summary_in(&run_dir);
    assert_eq!(
        int(root, "gen_ai.usage.input_tokens"),
        summary.prompt_tokens as i64
    );
    assert_eq!(
        int(root, "gen_ai.usage.output_tokens"),
        summary.completion_tokens as i64
    );
    let chats: Vec<&Span> = spans.iter().filter(|s| s.name == "chat").collect();
    let prompt: i64 = chats
        .iter()
        .map(|s| int(s, "gen_ai.usage.input_tokens"))
        .sum();
    assert_eq!(prompt, summary.prompt_tokens as i64);
    assert_eq!(text(root, "agent_harness.run_id"), summary.run_id);
    assert_eq!(text(root, "agent_harness.stop_reason"), "final_answer");
    assert_eq!(text(root, "gen_ai.operation.name"), "invoke_agent");
    assert_eq!(text(&spans[2], "gen_ai.tool.call.id"), "c1");
    assert_eq!(
        spans[2].status.as_ref().unwrap().code,
        2,
        "a tool error is an ERROR span"
    );
    assert!(
        spans
            .iter()
            .all(|s| attr(s, "gen_ai.output.messages").is_none()),
        "no contents unless asked"
    );
    let trace_id: String = root.trace_id.iter().map(|b| format!("{b:02x}")).collect();
    let run_log = std::fs::read_to_string(run_dir.join("run.log")).unwrap();
    assert!(run_log.contains(&trace_id), "the records name the trace");
    assert_eq!(
        metric(&s, "agent_harness_trace_export_failures_total").as_deref(),
        Some("0")
    );
    assert!(
        !everything(&s, &out).contains(SECRET),
        "the header key reached a file or the output"
    );
}

/// A collector that cannot take the trace, and what the run must still do:
/// exit 0 (a run that waited on the collector past `bin`'s 120 s would be
/// killed and have no code), file the task, warn naming the key, say the
/// trace was given up, count it. What it printed.
async fn survives(otlp: &str, case: &str) -> String {
    let s = scenario()
        .by_progress(two_turns())
        .config(&traces_config(otlp, 1))
        .task("hello", "Say hello.")
        .build()
        .await;
    let out = run_traced(&s, &["run"]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{case}: {err}");
    assert_eq!(
        s.done().len(),
        1,
        "{case}: the task is filed as without traces"
    );
    assert!(
        err.contains("[traces] endpoint"),
        "{case}: no warning naming the key: {err}"
    );
    assert!(
        err.contains("1 task trace(s) did not reach the collector"),
        "{case}: the run does not say the trace was given up: {err}"
    );
    assert_eq!(
        metric(&s, "agent_harness_trace_export_failures_total").as_deref(),
        Some("1"),
        "{case}"
    );
    assert!(
        !everything(&s, &out).contains(SECRET),
        "{case}: the header key leaked"
    );
    err
}

#[tokio::test]
async fn a_collector_that_is_down_fails_or_refuses_changes_nothing_but_a_warning() {
    survives(
        &format!("http://127.0.0.1:{}/v1/traces", closed_port()),
        "down",
    )
    .await;
    let failing = collector(ResponseTemplate::new(500)).await;
    survives(&format!("{}/v1/traces", failing.uri()), "500").await;
    let too_big = collector(ResponseTemplate::new(413)).await;
    survives(&format!("{}/v1/traces", too_big.uri()), "413").await;
    let web = collector(
        ResponseTemplate::new(200).set_body_raw("<html>Welcome</html>", "text/html; charset=utf-8"),
    )
    .await;
    survives(&format!("{}/v1/traces", web.uri()), "a web page").await;
}

#[tokio::test]
async fn a_collector_that_never_answers_costs_at_most_flush_secs() {
    // It would answer in an hour; `bin` kills a run after 120 s. A run that
    // exits 0 (as `survives` asserts) stopped waiting long before either:
    // the wait is bounded, and the run names what bounds it.
    let silent = collector(ResponseTemplate::new(200).set_delay(Duration::from_secs(3600))).await;
    let err = survives(&format!("{}/v1/traces", silent.uri()), "never answering").await;
    // survives() configures flush_secs = 1: the bound that applied. The
    // request's own timeout and the flush's end are both that second;
    // which says it first is the scheduler's (a loaded run saw the flush's).
    assert!(
        err.contains("a request has [traces] flush_secs = 1")
            || err.contains("still unsent when the flush ended: [traces] flush_secs ran out"),
        "the trace was given up at flush_secs: {err}"
    );
    assert_eq!(
        silent.received_requests().await.unwrap().len(),
        1,
        "the trace was sent once and never retried"
    );
}

#[tokio::test]
async fn a_failing_task_exits_as_it_would_without_traces() {
    let mut codes = Vec::new();
    for traced in [false, true] {
        let extra = if traced {
            traces_config(&format!("http://127.0.0.1:{}/v1/traces", closed_port()), 1)
        } else {
            String::new()
        };
        let s = scenario()
            .by_progress(vec![ok(tool_calls(&[("c1", "no_such_tool", json!({}))]))])
            .config(&format!("[limits]\nmax_turns = 1\n{extra}"))
            .task("hello", "Say hello.")
            .build()
            .await;
        let out = run_traced(&s, &["run"]).await;
        codes.push((out.status.code(), s.failed().len(), s.done().len()));
    }
    assert_eq!(codes[0], (Some(1), 1, 0), "without traces");
    // A collector that is down changes neither the code nor the files.
    assert_eq!(codes[1], codes[0]);
}

#[tokio::test]
async fn a_replay_sends_nothing_unless_asked() {
    let (otlp, s, _) = one_traced_run().await;
    let run_dir = the_run_dir(&s, "hello");
    let run_dir = run_dir.to_str().unwrap();
    let out = run_traced(&s, &["replay", run_dir]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        received(&otlp).await.len(),
        1,
        "a replay is silent by default"
    );
    let out = run_traced(&s, &["replay", "--traces", run_dir]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let got = received(&otlp).await;
    assert_eq!(got.len(), 2, "--traces sends the replay's trace");
    assert_eq!(got[1].1[0].name, "invoke_agent hello");
}

#[tokio::test]
async fn replay_traces_without_an_endpoint_is_a_usage_error() {
    let s = scenario()
        .by_progress(two_turns())
        .task("hello", "Say hello.")
        .build()
        .await;
    let out = run_traced(&s, &["run"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let run_dir = the_run_dir(&s, "hello");
    let out = run_traced(&s, &["replay", "--traces", run_dir.to_str().unwrap()]).await;
    assert_eq!(out.status.code(), Some(2));
    assert_contains(stderr(&out), "no [traces] endpoint");
}

/// Arize Phoenix from PyPI, served on loopback for one test, stopped on drop.
struct Phoenix {
    child: std::process::Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Phoenix {
    async fn start() -> Phoenix {
        let program = stack_paths().remove("PHOENIX").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (port, grpc) = (free_port(), free_port());
        let child = std::process::Command::new(program)
            .arg("serve")
            .env("PHOENIX_HOST", "127.0.0.1")
            .env("PHOENIX_PORT", port.to_string())
            .env("PHOENIX_GRPC_PORT", grpc.to_string())
            .env("PHOENIX_WORKING_DIR", dir.path())
            .env("PHOENIX_SQL_DATABASE_URL", "sqlite:///:memory:")
            .env("PHOENIX_TELEMETRY_ENABLED", "false")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("phoenix.log")).unwrap())
            .spawn()
            .unwrap();
        let mut phoenix = Phoenix {
            child,
            port,
            _dir: dir,
        };
        let http = reqwest_client();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let up = http.get(phoenix.url("/healthz")).send().await;
            if up.is_ok_and(|r| r.status().is_success()) {
                return phoenix;
            }
            let log = phoenix._dir.path().join("phoenix.log");
            if phoenix.child.try_wait().unwrap().is_some() || Instant::now() > deadline {
                panic!(
                    "Phoenix did not come up: {}",
                    std::fs::read_to_string(log).unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The spans Phoenix has stored in the project `x-project-name` named
    /// (`harness`, from `[traces] headers_env`), once `n` are in.
    async fn spans(&self, n: usize) -> Vec<serde_json::Value> {
        let http = reqwest_client();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            // Until the first span is in, the project does not exist (404).
            let answer = http
                .get(self.url("/v1/projects/harness/spans?limit=100"))
                .send()
                .await
                .unwrap();
            let body: serde_json::Value = answer.json().await.unwrap_or_default();
            let spans = body["data"].as_array().cloned().unwrap_or_default();
            if spans.len() >= n {
                return spans;
            }
            if Instant::now() > deadline {
                let projects = http.get(self.url("/v1/projects")).send().await.unwrap();
                panic!(
                    "{} of {n} spans in Phoenix's project harness; its projects: {}",
                    spans.len(),
                    projects.text().await.unwrap()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

impl Drop for Phoenix {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn reqwest_client() -> reqwest::Client {
    agent_harness::base::http::client(&agent_harness::base::http::Trust::bundled())
        .unwrap()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

#[tokio::test]
#[ignore = "needs scripts/test: Arize Phoenix from scripts/stack install"]
async fn arize_phoenix_reads_back_one_trace_with_the_span_tree_and_the_summarys_tokens() {
    let phoenix = Phoenix::start().await;
    let endpoint = phoenix.url("/v1/traces");
    let s = scenario()
        .by_progress(two_turns())
        .config(&traces_config(&endpoint, 10))
        .task("hello", "Say hello.")
        .build()
        .await;
    let out = run_traced(&s, &["run"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        metric(&s, "agent_harness_trace_export_failures_total").as_deref(),
        Some("0"),
        "{}",
        stderr(&out)
    );
    let spans = phoenix.spans(4).await;
    let summary = s.summary_in(&the_run_dir(&s, "hello"));
    let named = |name: &str| -> Vec<&serde_json::Value> {
        spans.iter().filter(|s| s["name"] == name).collect()
    };
    assert_eq!(spans.len(), 4, "{spans:#?}");
    let root = named("invoke_agent hello");
    let (chats, tools) = (named("chat"), named("execute_tool no_such_tool"));
    assert_eq!(
        (root.len(), chats.len(), tools.len()),
        (1, 2, 1),
        "{spans:#?}"
    );
    let root = root[0];
    let trace_id = &root["context"]["trace_id"];
    assert!(
        spans.iter().all(|s| &s["context"]["trace_id"] == trace_id),
        "one trace"
    );
    assert!(root["parent_id"].is_null());
    let root_id = &root["context"]["span_id"];
    assert!(
        chats
            .iter()
            .chain(&tools)
            .all(|s| &s["parent_id"] == root_id),
        "{spans:#?}"
    );
    let attrs = &root["attributes"];
    assert_eq!(attrs["gen_ai.agent.name"], "hello");
    assert_eq!(attrs["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(attrs["agent_harness.run_id"], summary.run_id.as_str());
    assert_eq!(attrs["agent_harness.stop_reason"], "final_answer");
    assert_eq!(attrs["gen_ai.usage.input_tokens"], summary.prompt_tokens);
    assert_eq!(
        attrs["gen_ai.usage.output_tokens"],
        summary.completion_tokens
    );
    assert_eq!(root["status_code"], "OK");
    let chat_tokens: u64 = chats
        .iter()
        .map(|s| {
            s["attributes"]["gen_ai.usage.input_tokens"]
                .as_u64()
                .unwrap()
        })
        .sum();
    assert_eq!(chat_tokens, summary.prompt_tokens);
    assert!(
        chats
            .iter()
            .any(|s| s["attributes"]["gen_ai.response.finish_reasons"] == json!(["tool_calls"])),
        "{chats:#?}"
    );
    let tool = tools[0];
    assert_eq!(tool["attributes"]["gen_ai.tool.name"], "no_such_tool");
    assert_eq!(tool["attributes"]["gen_ai.tool.call.id"], "c1");
    assert_eq!(tool["status_code"], "ERROR");
}

#[tokio::test]
async fn check_refuses_an_endpoint_that_is_not_otlp_http_and_never_shows_the_key() {
    let s = scenario().no_config_file().build().await;
    for (endpoint, says) in [
        ("grpc://127.0.0.1:4317", "its scheme is grpc"),
        ("http://127.0.0.1:4318", "has no path"),
    ] {
        s.write_config(CLOSED_URL, &traces_config(endpoint, 5));
        let out = bin(&s)
            .arg("check")
            .env("OTLP_HEADERS", format!("authorization={SECRET}"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{endpoint}");
        let err = stderr(&out);
        assert!(
            err.contains("[traces] endpoint") && err.contains(says),
            "{err}"
        );
    }
    s.write_config(
        "http://127.0.0.1:9/v1",
        &traces_config("http://127.0.0.1:4318/v1/traces", 5),
    );
    let out = bin(&s)
        .arg("check")
        .env("OTLP_HEADERS", format!("authorization {SECRET}"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("[traces] headers_env") && err.contains("has no `=`"),
        "{err}"
    );
    assert!(!err.contains(SECRET), "{err}");
    let out = bin(&s)
        .arg("check")
        .env("OTLP_HEADERS", format!("authorization={SECRET}"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let said = stdout(&out);
    assert_contains(
        &said,
        "traces: each task's trace goes to http://127.0.0.1:4318/v1/traces (contents not exported, 1 extra header(s)",
    );
    assert!(!said.contains(SECRET), "{said}");
}

#[tokio::test]
async fn a_signal_during_the_flush_cuts_it_short() {
    let silent = collector(ResponseTemplate::new(200).set_delay(Duration::from_secs(3600))).await;
    let endpoint = format!("{}/v1/traces", silent.uri());
    let s = scenario()
        .by_progress(two_turns())
        .config(&traces_config(&endpoint, 120))
        .task("hello", "Say hello.")
        .build()
        .await;
    let mut child = harness_command()
        .arg("run")
        .current_dir(s.root())
        .env("OTLP_HEADERS", format!("authorization=Bearer {SECRET}"))
        .spawn()
        .unwrap();
    // The task is filed: the run now waits for the collector.
    let deadline = Instant::now() + Duration::from_secs(30);
    while s.done().is_empty() {
        assert!(Instant::now() < deadline, "the task never finished");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    crate::signals::signal(&child, "TERM");
    // flush_secs is 120: a run that waited it out would hit this limit.
    let code = crate::signals::wait(&mut child, crate::signals::STOP_TIMEOUT);
    assert_eq!(code, Some(0), "the task succeeded before the signal");
    assert_eq!(
        metric(&s, "agent_harness_trace_export_failures_total").as_deref(),
        Some("1"),
        "the metrics are still written, the unsent trace counted"
    );
}
