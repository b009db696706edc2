//! Another service on the configured port is a setup fault
//! (docs/operating.md, "Setup faults"): before the endpoint answered a chat
//! request in this run, a 404, 405 or 501, or a 2xx whose body is not JSON,
//! stops the run like a refused key, naming `base_url`; `test-runpod` fails its
//! reachability line for anything but an OpenAI-compatible server. Tried
//! against the service people really leave on a port: Python's `http.server`.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agent_harness::agent::StopReason;
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::common::*;

/// `python3 -m http.server` on a free loopback port, serving an empty folder.
struct HttpServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl HttpServer {
    fn start() -> HttpServer {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("index.html"),
            "<!DOCTYPE html><html>hello</html>",
        )
        .unwrap();
        let port = closed_port();
        let child = Command::new("python3")
            .args([
                "-m",
                "http.server",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
            ])
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "http.server did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        HttpServer {
            child,
            port,
            _dir: dir,
        }
    }

    fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every task of `inbox` still there as it was: none filed, no attempt counted.
#[track_caller]
fn assert_untouched(s: &Scene, inbox: &[&str]) {
    assert_eq!(s.inbox(), inbox, "every task as it was");
    assert!(s.failed().is_empty(), "none filed");
    assert_eq!(attempt_counts(s), json!({}), "no attempt counted");
}

#[tokio::test(flavor = "multi_thread")]
async fn pythons_http_server_on_the_port_stops_the_run_as_a_setup_fault_naming_base_url() {
    let other = HttpServer::start();
    let s = scenario()
        .endpoint_at(&other.base_url())
        .task("a", "Answer.")
        .task("b", "Answer too.")
        .build()
        .await;

    let out = run_bin(&s, &["run"]).await;

    // `test-runpod`'s reachability verdict, before any task: no task
    // started, none filed, no attempt counted.
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_contains(&err, "setup fault");
    assert_contains(&err, "/v1/models answered HTTP 404 without a model list");
    assert_contains(
        &err,
        "not an OpenAI-compatible server; check [openai] base_url",
    );
    assert!(!s.root().join("logs/a").exists(), "no task started");
    assert_untouched(&s, &["a.md", "b.md"]);
}

/// A FastAPI service (Arize Phoenix's port): JSON everywhere, `422
/// {"detail": [...]}` for a chat request, 404 JSON for the rest.
async fn fastapi(models: bool) -> MockServer {
    let server = MockServer::start().await;
    if models {
        list_models(&server).await;
    }
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(422).set_body_json(json!({"detail": [
            {"type": "missing", "loc": ["body", "model"], "msg": "Field required", "input": null}
        ]})))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(404).set_body_json(json!({"detail": "Not Found"})))
        .mount(&server)
        .await;
    server
}

/// How many chat requests `server` received.
async fn chats(server: &MockServer) -> usize {
    let received = server.received_requests().await.unwrap_or_default();
    received
        .iter()
        .filter(|r| r.url.path() == "/v1/chat/completions")
        .count()
}

#[tokio::test]
async fn another_json_service_on_the_port_leaves_every_task_in_the_inbox_with_exit_2() {
    for models in [false, true] {
        // Without a model list the check before the first task says so;
        // with one (a proxy that lists models), the first chat request's
        // 422, which is no OpenAI error, does.
        let server = fastapi(models).await;
        let (s, out) = run_tasks(&server, &["a", "b", "c"]).await;

        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "models={models}: {err}");
        assert_contains(&err, "check [openai] base_url");
        assert_untouched(&s, &["a.md", "b.md", "c.md"]);
        let asked = chats(&server).await;
        assert_eq!(
            asked,
            usize::from(models),
            "asked once at most, never retried"
        );
        if models {
            assert_contains(&err, "HTTP 422");
        }
    }
}

#[tokio::test]
async fn an_openai_style_422_for_one_task_stays_that_tasks_failure() {
    let s = scenario()
        .script(vec![
            ResponseTemplate::new(422).set_body_json(
                json!({"error": {"message": "response_format is not supported", "type": "invalid_request_error"}}),
            ),
            ok(final_answer("done")),
        ])
        .task("a", "Answer.")
        .task("b", "Answer.")
        .build()
        .await;

    let out = run_bin(&s, &["run"]).await;

    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(s.failed().len(), 1);
    assert_eq!(s.done().len(), 1);
    let a = s.summary_in(&the_run_dir(&s, "a"));
    assert_eq!(a.stop_reason, StopReason::EndpointError);
    assert!(a.error.unwrap().contains("HTTP 422"));
}

#[tokio::test]
async fn a_llama_server_without_jinja_is_a_setup_fault_naming_the_flag() {
    // llama-server's own words when it was started without --jinja.
    let refusal = || {
        ResponseTemplate::new(500).set_body_json(json!({"error": {
            "code": 500, "message": "tools param requires --jinja flag", "type": "server_error"
        }}))
    };
    let s = scenario()
        .script(vec![refusal(), refusal(), refusal()])
        .task("a", "Answer.")
        .task("b", "Answer.")
        .build()
        .await;

    let out = run_bin(&s, &["run"]).await;

    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_contains(&err, "start it with --jinja");
    assert_contains(&err, "tools param requires --jinja flag");
    assert_untouched(&s, &["a.md", "b.md"]);
    assert_eq!(s.requests().await.len(), 1, "not retried, b never asked");
}

#[tokio::test(flavor = "multi_thread")]
async fn test_runpod_fails_reachability_for_a_service_that_is_no_openai_server() {
    let other = HttpServer::start();
    let s = scenario().endpoint_at(&other.base_url()).build().await;

    let out = run_bin(&s, &["test-runpod"]).await;

    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let printed = stdout(&out);
    assert!(
        printed.contains("FAIL reachable: GET ")
            && printed.contains("/v1/models answered HTTP 404 without a model list")
            && printed.contains("not an OpenAI-compatible server; check [openai] base_url"),
        "{printed}"
    );
    assert!(!printed.contains("ok   reachable"), "{printed}");
}

/// A login page, status 200: HTML where a chat answer belongs.
fn login_page() -> ResponseTemplate {
    ResponseTemplate::new(200)
        .insert_header("content-type", "text/html")
        .set_body_string("<!DOCTYPE html><html><body>Login</body></html>")
}

#[tokio::test]
async fn an_html_page_for_a_chat_request_is_a_setup_fault_before_the_endpoint_answered() {
    // A proxy that lists models in front of a login page.
    let models = json!({"object": "list", "data": [{"id": "fake-gemma", "object": "model"}]});
    let server = answering(ok(models), login_page()).await;
    let s = scenario()
        .llm(FakeLlm { server })
        .task("t", "Answer.")
        .build()
        .await;

    let outcome = s.run().await;

    assert_eq!(outcome.exit_code(), 2, "{outcome:?}");
    let t = s.summary("t");
    assert_eq!(t.stop_reason, StopReason::SetupFault);
    let error = t.error.unwrap();
    assert_contains(&error, "not JSON");
    assert_contains(&error, "check [openai] base_url");
    assert_eq!(s.inbox(), ["t.md"]);
}

#[tokio::test]
async fn an_html_page_once_the_endpoint_answered_is_retried_and_the_task_goes_on() {
    // Once the endpoint answered in this run, the same page is a passing
    // fault of something between.
    let s = scenario()
        .script(vec![
            ok(call("webfetch", json!({"url": "http://127.0.0.1:9/"}))),
            login_page(),
            ok(final_answer("done")),
        ])
        .task("t", "Answer.")
        .build()
        .await;

    let outcome = s.run().await;

    assert_eq!(outcome.exit_code(), 0, "{outcome:?}");
    assert_eq!(s.summary("t").final_answer.as_deref(), Some("done"));
    let kinds: Vec<_> = s
        .conversation("t")
        .iter()
        .map(|l| l.error_kind.clone().unwrap_or("-".into()))
        .collect();
    assert_eq!(kinds, ["-", "not_json", "-"]);
}

/// `run` of the tasks `names` against `server`.
async fn run_tasks(server: &MockServer, names: &[&str]) -> (Scene, std::process::Output) {
    let mut arranged = scenario().endpoint_at(&format!("{}/v1", server.uri()));
    for name in names {
        arranged = arranged.task(name, "Answer.");
    }
    let s = arranged.build().await;
    let out = run_bin(&s, &["run"]).await;
    (s, out)
}

/// `run` of one task, `a`, against `server`.
async fn run_one_task(server: &MockServer) -> (Scene, std::process::Output) {
    run_tasks(server, &["a"]).await
}

/// A server that answers `GET /v1/models` with `models` and every chat
/// request with `chat`.
async fn answering(models: ResponseTemplate, chat: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v1/models"))
        .respond_with(models)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(chat)
        .mount(&server)
        .await;
    server
}

#[tokio::test]
async fn a_refused_key_at_the_model_list_is_the_keys_fault() {
    let refused = || {
        ResponseTemplate::new(401).set_body_json(
            json!({"error": {"message": "Invalid API key", "type": "invalid_request_error"}}),
        )
    };
    // The model list and the chat refuse the key: the key is named, not the URL.
    let server = answering(refused(), refused()).await;
    let (s, out) = run_one_task(&server).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_contains(&err, "the endpoint refused the API key");
    assert_lacks(&err, "not an OpenAI-compatible server");
    assert_eq!(s.inbox(), ["a.md"]);
}

#[tokio::test]
async fn a_key_that_may_chat_but_not_list_models_runs() {
    let server = answering(
        ResponseTemplate::new(403)
            .set_body_json(json!({"error": {"message": "Missing scopes: api.model.read"}})),
        ok(final_answer("done")),
    )
    .await;
    let (s, out) = run_one_task(&server).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(s.done().len(), 1);
}

#[tokio::test]
async fn a_loading_server_or_a_gateways_502_is_a_later_run() {
    // Nothing touched, a later run (75).
    for status in [502, 503] {
        let server = answering(
            ResponseTemplate::new(status).set_body_string("<html>Bad Gateway</html>"),
            ResponseTemplate::new(status),
        )
        .await;
        let (s, out) = run_one_task(&server).await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(75), "{status}: {err}");
        assert_contains(&err, "not ready");
        assert_eq!(s.inbox(), ["a.md"]);
        assert!(!s.root().join("logs/a").exists());
    }
}

#[tokio::test]
async fn a_catch_all_json_service_files_nothing() {
    // `{"status": "ok"}` to everything, as llama-server's /health says.
    let server = MockServer::start().await;
    Mock::given(wiremock::matchers::any())
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"status": "ok"})))
        .mount(&server)
        .await;
    let (s, out) = run_one_task(&server).await;

    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_contains(&err, "without a model list");
    assert_eq!(s.inbox(), ["a.md"]);
}

#[tokio::test]
async fn a_chat_answer_that_is_no_chat_completion_is_a_setup_fault_at_the_first_request() {
    // Past the model list, `{"status": "ok"}` for a chat: a setup fault at
    // the first request, never six retries and a filed task.
    let server = answering(
        ok(json!({"object": "list", "data": []})),
        ResponseTemplate::new(200).set_body_json(json!({"status": "ok"})),
    )
    .await;
    let (s, out) = run_one_task(&server).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_contains(&err, "no chat completion");
    assert_eq!(s.inbox(), ["a.md"]);
    assert_eq!(attempt_counts(&s), json!({}));
}

#[tokio::test]
async fn a_flat_error_from_a_vllm_style_server_is_the_tasks_failure() {
    let s = scenario()
        .script(vec![
            ResponseTemplate::new(400).set_body_json(json!({
                "object": "error", "message": "This model's maximum context length is 4096 tokens",
                "type": "BadRequestError", "param": null, "code": 400
            })),
            ok(final_answer("done")),
        ])
        .task("a", "Answer.")
        .task("b", "Answer.")
        .build()
        .await;

    let out = run_bin(&s, &["run"]).await;

    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!((s.failed().len(), s.done().len()), (1, 1));
    let a = s.summary_in(&the_run_dir(&s, "a"));
    assert!(a.error.unwrap().contains("maximum context length"));
}
