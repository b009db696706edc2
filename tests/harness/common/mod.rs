//! Test fixtures: a scripted OpenAI-compatible endpoint, a stateful fake
//! noteworx implementing its API (docs/tools.md, "Built-in tools"), a fake
//! RunPod, a throwaway project folder with the helpers to read its records, and
//! the one way a test arranges all of it ([`scenario`]).
#![allow(dead_code, unused_imports)]

pub mod binary;
pub mod fake_noteworx;
pub mod fake_runpod;
pub mod mcp;
pub mod scenario;
pub mod smtp;
pub mod tls;

pub use binary::*;
pub use scenario::*;

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_harness::agent::deps::{Clock, TaskDeps};
pub use agent_harness::app::exit::Exit;
use agent_harness::config::Config;
use agent_harness::drain::{BatchOptions, RunOptions, RunOutcome};
use agent_harness::endpoint::RetryPolicy;
use agent_harness::records::{Summary, ToolLine};
pub use agent_harness::wire::chat::{Message, Role};
use chrono::{TimeZone, Utc};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// The fixed "now" of every test run: run ids are `20260409T061500Z`.
pub fn fixed_clock() -> Clock {
    Arc::new(|| {
        Utc.with_ymd_and_hms(2026, 4, 9, 6, 15, 0)
            .single()
            .unwrap_or_default()
    })
}

pub const RUN_ID: &str = "20260409T061500Z";

/// A chat reply with tool calls: `(id, name, arguments)`.
pub fn tool_calls(calls: &[(&str, &str, Value)]) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| json!({"type": "function", "id": id, "function": {"name": name, "arguments": args.to_string()}}))
        .collect();
    json!({
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": "", "tool_calls": calls}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
        "model": "fake-gemma"
    })
}

/// A chat reply with a final answer.
pub fn final_answer(text: &str) -> Value {
    json!({
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 150, "completion_tokens": 10, "total_tokens": 160},
        "model": "fake-gemma"
    })
}

/// A reply with the given message and finish reason.
pub fn reply(message: Value, finish_reason: &str) -> Value {
    json!({
        "choices": [{"index": 0, "finish_reason": finish_reason, "message": message}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
    })
}

/// Answers a fixed script of responses in order; after the script, repeats the last.
pub struct Script {
    replies: Mutex<VecDeque<ResponseTemplate>>,
    last: Mutex<Option<ResponseTemplate>>,
}

impl Script {
    pub fn new(replies: Vec<ResponseTemplate>) -> Self {
        Script {
            replies: Mutex::new(replies.into()),
            last: Mutex::new(None),
        }
    }
}

impl Respond for Script {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        let next = self.replies.lock().unwrap().pop_front();
        match next {
            Some(r) => {
                *self.last.lock().unwrap() = Some(r.clone());
                r
            }
            None => self
                .last
                .lock()
                .unwrap()
                .clone()
                .unwrap_or_else(|| ResponseTemplate::new(500)),
        }
    }
}

pub fn ok(body: Value) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(body)
}

/// Answers by how far the conversation has got: a request carrying `k`
/// tool results gets reply `k`. Stateless, so any number of tasks can share
/// it at once, each following the same script.
pub struct ByProgress {
    pub replies: Vec<ResponseTemplate>,
}

impl Respond for ByProgress {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&req.body).unwrap_or_default();
        let done = body["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] == "tool").count());
        self.replies
            .get(done)
            .or(self.replies.last())
            .cloned()
            .unwrap_or_else(|| ResponseTemplate::new(500))
    }
}

/// The prompt the fake "renders" for a chat request: its messages and tools as JSON.
pub fn fake_prompt(body: &Value) -> String {
    json!([body["messages"], body["tools"]]).to_string()
}

/// The fake tokenizer: 4 characters a token.
pub fn fake_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

/// Answers chat requests from a script like llama-server would count them:
/// `usage.prompt_tokens` is the fake tokenizer's count of the rendered
/// prompt, and a prompt over `window` is refused with llama-server's
/// `exceed_context_size_error`.
pub struct CountingScript {
    replies: Mutex<VecDeque<Value>>,
    last: Mutex<Option<Value>>,
    window: u64,
}

impl Respond for CountingScript {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&req.body).unwrap_or_default();
        let n = fake_tokens(&fake_prompt(&body));
        if n > self.window {
            return ResponseTemplate::new(400).set_body_json(json!({"error": {
                "code": 400, "type": "exceed_context_size_error",
                "message": "the request exceeds the available context size",
                "n_prompt_tokens": n, "n_ctx": self.window}}));
        }
        let next = self.replies.lock().unwrap().pop_front();
        let mut reply = match next {
            Some(r) => {
                *self.last.lock().unwrap() = Some(r.clone());
                r
            }
            None => self.last.lock().unwrap().clone().unwrap_or_default(),
        };
        reply["usage"] =
            json!({"prompt_tokens": n, "completion_tokens": 20, "total_tokens": n + 20});
        ResponseTemplate::new(200).set_body_json(reply)
    }
}

/// llama-server's `/apply-template` and `/tokenize`, consistent with
/// [`CountingScript`]; `/tokenize` insists on `add_special` and `parse_special`.
struct FakeTemplate;

impl Respond for FakeTemplate {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&req.body).unwrap_or_default();
        if req.url.path() == "/apply-template" {
            return ResponseTemplate::new(200).set_body_json(json!({"prompt": fake_prompt(&body)}));
        }
        if body["add_special"] != true || body["parse_special"] != true {
            return ResponseTemplate::new(400).set_body_json(
                json!({"error": {"message": "count with add_special and parse_special"}}),
            );
        }
        let n = fake_tokens(body["content"].as_str().unwrap_or(""));
        ResponseTemplate::new(200).set_body_json(json!({"tokens": vec![7; n as usize]}))
    }
}

/// Holds every chat request until the test opens it, then answers
/// `reply`: a run stays where the test wants it (its task started, the
/// lock held) for as long as the test needs, with no timing guessed. It
/// holds wiremock's own thread meanwhile, so nothing else is answered
/// then; after a minute it answers anyway (the test has failed by then),
/// so a test that never opens it never hangs the suite.
pub struct Gate {
    open: Arc<std::sync::atomic::AtomicBool>,
    reply: ResponseTemplate,
}

impl Respond for Gate {
    fn respond(&self, _: &Request) -> ResponseTemplate {
        let held = std::time::Instant::now();
        while !self.open.load(std::sync::atomic::Ordering::SeqCst)
            && held.elapsed() < Duration::from_secs(60)
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.reply.clone()
    }
}

/// An OpenAI-compatible server answering `POST /v1/chat/completions` from a script.
pub struct FakeLlm {
    pub server: MockServer,
}

/// What an OpenAI-compatible server answers to `GET /v1/models`.
pub async fn list_models(server: &MockServer) {
    Mock::given(method("GET"))
        .and(path("/v1/models"))
        .respond_with(ResponseTemplate::new(200).set_body_json(
            json!({"object": "list", "data": [{"id": "fake-gemma", "object": "model"}]}),
        ))
        .mount(server)
        .await;
}

impl FakeLlm {
    pub async fn start(script: Vec<ResponseTemplate>) -> FakeLlm {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/v1/chat/completions"))
            .respond_with(Script::new(script))
            .mount(&server)
            .await;
        list_models(&server).await;
        FakeLlm { server }
    }

    /// Answers every chat request `reply`, once the flag returned is set
    /// ([`Gate`]).
    pub async fn gated(reply: ResponseTemplate) -> (FakeLlm, Arc<std::sync::atomic::AtomicBool>) {
        let server = MockServer::start().await;
        let open = Arc::new(std::sync::atomic::AtomicBool::new(false));
        Mock::given(method("POST"))
            .and(path("/v1/chat/completions"))
            .respond_with(Gate {
                open: open.clone(),
                reply,
            })
            .mount(&server)
            .await;
        list_models(&server).await;
        (FakeLlm { server }, open)
    }

    /// Answers every task from the same script ([`ByProgress`]).
    pub async fn by_progress(replies: Vec<ResponseTemplate>) -> FakeLlm {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/v1/chat/completions"))
            .respond_with(ByProgress { replies })
            .mount(&server)
            .await;
        list_models(&server).await;
        FakeLlm { server }
    }

    /// A llama-server stand-in that counts prompts (`/apply-template`,
    /// `/tokenize`) and reports and enforces the same counts on chat requests.
    pub async fn counting(replies: Vec<Value>, window: u64) -> FakeLlm {
        let llm = Self::reporting(replies, window).await;
        for route in ["/apply-template", "/tokenize"] {
            Mock::given(method("POST"))
                .and(path(route))
                .respond_with(FakeTemplate)
                .mount(&llm.server)
                .await;
        }
        llm
    }

    /// As [`FakeLlm::counting`], without the routes that count: a server
    /// that reports and enforces its counts but cannot say them beforehand.
    pub async fn reporting(replies: Vec<Value>, window: u64) -> FakeLlm {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/v1/chat/completions"))
            .respond_with(CountingScript {
                replies: Mutex::new(replies.into()),
                last: Mutex::new(None),
                window,
            })
            .mount(&server)
            .await;
        list_models(&server).await;
        FakeLlm { server }
    }

    /// How many requests went to `route`.
    pub async fn requests_to(&self, route: &str) -> usize {
        self.server
            .received_requests()
            .await
            .unwrap_or_default()
            .iter()
            .filter(|r| r.url.path() == route)
            .count()
    }

    /// Every scripted reply is a 200 with this JSON body.
    pub async fn replies(bodies: Vec<Value>) -> FakeLlm {
        Self::start(bodies.into_iter().map(ok).collect()).await
    }

    pub fn base_url(&self) -> String {
        format!("{}/v1", self.server.uri())
    }

    /// The bodies of the chat requests received, in order.
    pub async fn requests(&self) -> Vec<Value> {
        self.server
            .received_requests()
            .await
            .unwrap_or_default()
            .into_iter()
            .filter(|r| r.url.path().ends_with("/chat/completions"))
            .map(|r| serde_json::from_slice(&r.body).unwrap())
            .collect()
    }
}

/// A throwaway project: `agent.toml`, `tasks/inbox`, `logs`.
pub struct Project {
    pub dir: tempfile::TempDir,
}

impl Project {
    pub fn new() -> Project {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("tasks/inbox")).unwrap();
        Project { dir }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn task(&self, name: &str, text: &str) -> PathBuf {
        let p = self.root().join("tasks/inbox").join(format!("{name}.md"));
        std::fs::write(&p, text).unwrap();
        p
    }

    /// Writes `agent.toml` for an `openai` endpoint at `base_url` plus `extra` TOML.
    pub fn write_config(&self, base_url: &str, extra: &str) -> PathBuf {
        let text = format!(
            "[endpoint]\nkind = \"openai\"\n[openai]\nbase_url = \"{base_url}\"\n{extra}\n"
        );
        let p = self.root().join("agent.toml");
        std::fs::write(&p, text).unwrap();
        p
    }

    pub fn config(&self, base_url: &str, extra: &str) -> Config {
        let p = self.write_config(base_url, extra);
        Config::load(&p, &test_env).unwrap()
    }

    pub fn inbox(&self) -> Vec<String> {
        names(&self.root().join("tasks/inbox"))
    }
    pub fn done(&self) -> Vec<String> {
        names(&self.root().join("tasks/done"))
    }
    pub fn failed(&self) -> Vec<String> {
        names(&self.root().join("tasks/failed"))
    }

    /// The metrics the runs wrote (`logs/agent-harness.prom`).
    pub fn metrics(&self) -> String {
        std::fs::read_to_string(self.root().join("logs/agent-harness.prom")).unwrap()
    }

    pub fn run_dir(&self, task: &str) -> PathBuf {
        self.root().join("logs").join(task).join(RUN_ID)
    }

    pub fn summary(&self, task: &str) -> Summary {
        self.summary_in(&self.run_dir(task))
    }

    pub fn summary_in(&self, dir: &Path) -> Summary {
        let text = std::fs::read_to_string(dir.join("summary.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    pub fn tool_lines(&self, task: &str) -> Vec<ToolLine> {
        jsonl(&self.run_dir(task).join("tools.jsonl"))
            .into_iter()
            .map(|v| serde_json::from_value(v).unwrap())
            .collect()
    }

    /// `conversation.jsonl`, each line read typed.
    pub fn conversation(&self, task: &str) -> Vec<ConversationRecord> {
        conversation_in(&self.run_dir(task))
    }

    pub fn run_log(&self, task: &str) -> String {
        std::fs::read_to_string(self.run_dir(task).join("run.log")).unwrap()
    }

    /// Every record file of every run, concatenated (for secret checks).
    pub fn all_records(&self) -> String {
        let mut out = String::new();
        let mut stack = vec![self.root().join("logs")];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                if e.path().is_dir() {
                    stack.push(e.path());
                } else {
                    out.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
                }
            }
        }
        out
    }
}

/// The attempts counted beside the inbox, by task (`{}` when none is):
/// the run ids each task's entry names are left out.
pub fn attempt_counts(project: &Project) -> Value {
    let text = std::fs::read_to_string(project.root().join("tasks/.agent-harness-attempts.json"))
        .unwrap_or_else(|_| "{}".into());
    let state: serde_json::Map<String, Value> = serde_json::from_str(&text).unwrap();
    state
        .into_iter()
        .filter_map(|(task, v)| {
            let n = v.as_u64().or_else(|| v["attempts"].as_u64()).unwrap();
            (n > 0).then(|| (task, json!(n)))
        })
        .collect()
}

/// The run ids the attempt state names for `task`: what it may resume from.
pub fn attempt_runs(project: &Project, task: &str) -> Vec<String> {
    let text = std::fs::read_to_string(project.root().join("tasks/.agent-harness-attempts.json"))
        .unwrap_or_else(|_| "{}".into());
    let state: Value = serde_json::from_str(&text).unwrap();
    state[task]["runs"]
        .as_array()
        .map(|runs| {
            runs.iter()
                .map(|r| r["id"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The environment tests pretend to have: secrets for both services.
pub fn test_env(key: &str) -> Option<String> {
    match key {
        "NOTEWORX_TOKEN" => Some(fake_noteworx::TOKEN.to_string()),
        "RUNPOD_API_KEY" => Some(fake_runpod::KEY.to_string()),
        _ => None,
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    v.sort();
    v
}

pub fn jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("bad JSONL line in {}: {e}: {l}", path.display()))
        })
        .collect()
}

/// Fast retries for tests: the logic is the product's, the waits are short.
pub fn fast_retries() -> RetryPolicy {
    RetryPolicy {
        base: Duration::from_millis(10),
        cap: Duration::from_millis(50),
        max_retries: 3,
    }
}

pub fn harness(cfg: &Config) -> TaskDeps {
    let mut h = TaskDeps::new(cfg, fixed_clock(), CancellationToken::new()).unwrap();
    // The same endpoint, metered by the same budget, retrying faster.
    h.endpoint = h.endpoint.clone().with_retry_policy(fast_retries());
    h
}

/// A `run` of the whole inbox, `concurrency` tasks at once (a dry run
/// when `dry_run`), told of nobody.
pub fn run_options(concurrency: usize, dry_run: bool) -> RunOptions {
    RunOptions {
        batch: BatchOptions {
            concurrency,
            dry_run,
            ..BatchOptions::default()
        },
        ..RunOptions::default()
    }
}

/// Runs the whole inbox of `cfg`, one task at a time, with a fixed clock
/// and fast retries (the benchmark's; a test runs a [`Scene`]).
pub async fn run_all(cfg: &Config) -> RunOutcome {
    let deps = harness(cfg);
    agent_harness::app::run_inbox(cfg, &deps, &run_options(1, false))
        .await
        .unwrap()
}

/// How long a test lets work that must end on its own go on before it
/// fails instead of hanging: generous for a loaded two-core machine, and
/// never a speed (figures belong in benches/harness.rs). What a test must
/// not wait for takes far longer, so a run that waited for it fails here.
pub const HANG_LIMIT: Duration = Duration::from_secs(60);

/// `work`'s output; a failure naming `what` once it has gone on for
/// [`HANG_LIMIT`].
pub async fn before_hang_limit<T>(what: &str, work: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(HANG_LIMIT, work)
        .await
        .unwrap_or_else(|_| panic!("{what}: still going after {HANG_LIMIT:?}"))
}

/// A loopback port nothing listens on (bound, then released).
pub fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A chat request as the server received it, read typed: its sampling,
/// the tools it offered and its messages (`thinking` says what
/// `chat_template_kwargs.enable_thinking` asked).
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Sent {
    pub messages: Vec<Message>,
    #[serde(default)]
    pub tools: Vec<Offered>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u64>,
    pub min_p: Option<f64>,
    pub max_tokens: Option<u64>,
    pub seed: Option<u64>,
    pub stream: Option<bool>,
    pub tool_choice: Option<String>,
    pub chat_template_kwargs: Option<Value>,
    pub response_format: Option<Value>,
}

/// A tool a request offered.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Offered {
    pub function: OfferedFunction,
}

#[derive(Debug, Clone, serde::Deserialize)]
pub struct OfferedFunction {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

impl Sent {
    /// The names of the tools offered, in order.
    pub fn tool_names(&self) -> Vec<&str> {
        self.tools
            .iter()
            .map(|t| t.function.name.as_str())
            .collect()
    }

    /// `chat_template_kwargs.enable_thinking`, when the request set it.
    pub fn thinking(&self) -> Option<bool> {
        let kwargs = self.chat_template_kwargs.as_ref()?;
        kwargs.get("enable_thinking")?.as_bool()
    }
}

/// A request body read typed.
pub fn sent(body: &Value) -> Sent {
    serde_json::from_value(body.clone()).expect("a chat request")
}

/// A `conversation.jsonl` line as docs/operating.md says it, read typed: a
/// required field renamed or gone fails the read instead of comparing
/// against `null` (an `Option` reads a missing key as `None`). The bodies stay JSON (`response` is a string when it was not).
#[derive(Debug, Clone, serde::Deserialize)]
pub struct ConversationRecord {
    pub turn: usize,
    pub attempt: u32,
    pub started_at: chrono::DateTime<chrono::Utc>,
    pub finished_at: chrono::DateTime<chrono::Utc>,
    pub latency_ms: u64,
    pub request: Value,
    pub http_status: Option<u16>,
    pub response: Value,
    pub error: Option<String>,
    pub error_kind: Option<String>,
    pub finish_reason: Option<String>,
    pub runpod: Option<Value>,
    pub context: Option<ContextRecord>,
}

/// The `conversation.jsonl` of the run folder `dir`, each line read typed.
pub fn conversation_in(dir: &Path) -> Vec<ConversationRecord> {
    let lines = jsonl(&dir.join("conversation.jsonl"));
    lines
        .into_iter()
        .map(|l| serde_json::from_value(l).expect("a conversation line"))
        .collect()
}

/// The `context` object of a conversation line.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct ContextRecord {
    pub prompt_tokens: u64,
    pub counted: String,
    #[serde(default)]
    pub counts: Vec<u64>,
    pub budget: Option<u64>,
    #[serde(default)]
    pub elided_call_ids: Vec<String>,
    #[serde(default)]
    pub elided_reasoning: u32,
}

impl ConversationRecord {
    /// The `context` a call's first attempt carries.
    pub fn context(&self) -> &ContextRecord {
        self.context
            .as_ref()
            .expect("a context on the call's first attempt")
    }
}

/// The chat request inside a `conversation.jsonl` line (unwrapped from the
/// RunPod envelope when there is one).
pub fn sent_chat(line: &ConversationRecord) -> &Value {
    let request = &line.request;
    if request.get("input").is_some() {
        &request["input"]
    } else {
        request
    }
}

/// The messages of a request body, read as the program's own type: a
/// field renamed fails to compile, not compares against `null`.
pub fn messages(body: &Value) -> Vec<Message> {
    serde_json::from_value(body["messages"].clone()).expect("a request's messages")
}

/// The `arguments` of tool call `call` of message `message` in a request
/// as sent: a JSON string on the wire (the typed [`messages`] would take
/// an object too).
pub fn sent_arguments(body: &Value, message: usize, call: usize) -> &str {
    body["messages"][message]["tool_calls"][call]["function"]["arguments"]
        .as_str()
        .expect("arguments sent as a string")
}

/// The cached parts, as `scripts/stack paths` reports them.
pub fn stack_paths() -> HashMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(root.join("scripts/stack"))
        .arg("paths")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the real stack is not installed; run scripts/stack install (or scripts/test): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The one run folder of `task` (the binary runs on the real clock).
pub fn the_run_dir(project: &Project, task: &str) -> std::path::PathBuf {
    let runs: Vec<_> = std::fs::read_dir(project.root().join("logs").join(task))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    runs[0].clone()
}

/// The harness binary, its output piped, no config from the environment.
pub fn harness_command() -> Command {
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("agent-harness"));
    cmd.env_remove("AGENT_HARNESS_CONFIG")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// `args` run by the binary in `project`.
pub fn run_binary(project: &Project, args: &[&str]) -> std::process::Output {
    harness_command()
        .args(args)
        .current_dir(project.root())
        .output()
        .unwrap()
}

/// `args` run by the binary in `project`; a run still going after `limit`
/// is killed and fails the test (a hang must not hang the suite).
pub fn run_binary_within(
    project: &Project,
    args: &[&str],
    limit: Duration,
) -> std::process::Output {
    let mut child = harness_command()
        .args(args)
        .current_dir(project.root())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            child.kill().unwrap();
            panic!(
                "`agent-harness {}` still running after {limit:?}",
                args.join(" ")
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// A tool call that fails (no such tool), then the answer: two requests,
/// one call (120 tokens, then 160).
pub fn two_turns() -> Vec<ResponseTemplate> {
    vec![
        ok(tool_calls(&[("c1", "no_such_tool", json!({}))])),
        ok(final_answer("done")),
    ]
}

/// One tool call, `c1`, in a reply of its own.
pub fn call(name: &str, args: Value) -> Value {
    tool_calls(&[("c1", name, args)])
}

/// Fails, showing all of `text`, unless `part` is in it.
#[track_caller]
pub fn assert_contains(text: impl AsRef<str>, part: &str) {
    let text = text.as_ref();
    assert!(text.contains(part), "{part:?} is not in:\n{text}");
}

/// Fails, showing all of `text`, unless it starts with `prefix`.
#[track_caller]
pub fn assert_starts(text: &str, prefix: &str) {
    assert!(
        text.starts_with(prefix),
        "does not start with {prefix:?}:\n{text}"
    );
}

/// Fails, showing all of `text`, if `part` is in it.
#[track_caller]
pub fn assert_lacks(text: impl AsRef<str>, part: &str) {
    let text = text.as_ref();
    assert!(!text.contains(part), "{part:?} is in:\n{text}");
}

/// A reply cut at `max_tokens` (`finish_reason` `length`).
pub fn cut(text: &str) -> Value {
    reply(json!({"role": "assistant", "content": text}), "length")
}
