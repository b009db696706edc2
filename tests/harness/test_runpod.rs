//! `test-runpod` (docs/operating.md, "Commands"): the three steps, their exit
//! code, and a one-line diagnosis for each misconfiguration, for both endpoint
//! kinds.

use agent_harness::app::smoke;
use agent_harness::config::Config;
use agent_harness::endpoint::Endpoint;
use serde_json::json;
use wiremock::ResponseTemplate;

use crate::common::fake_noteworx::{self, FakeNoteworx, note};
use crate::common::fake_runpod::{FakeRunpod, completed};
use crate::common::*;

async fn smoke_test(cfg: &Config) -> (u8, String) {
    let ep = Endpoint::new(&cfg.endpoint, &cfg.tls.trust)
        .unwrap()
        .with_retry_policy(fast_retries());
    let mut out = Vec::new();
    let code = agent_harness::app::smoke_exit(smoke::test_endpoint(cfg, &ep, &mut out).await);
    (code, String::from_utf8(out).unwrap())
}

/// Asserts the smoke test failed with exactly one `FAIL` line, and returns it.
fn the_one_failure(code: u8, out: &str) -> &str {
    assert_eq!(code, 1, "{out}");
    let fails: Vec<&str> = out.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert_eq!(fails.len(), 1, "{out}");
    fails[0]
}

fn the_tool_call() -> serde_json::Value {
    // What llama-server returns for a Gemma 4 tool call, thinking included.
    let mut r = tool_calls(&[("call_1", "get_current_time", json!({"city": "Paris"}))]);
    r["choices"][0]["message"]["reasoning_content"] = json!("The user wants the time.");
    r
}

/// The endpoint's answers to the three steps: a completion, the tool
/// call, then `answer` to its result.
fn three_steps(answer: &str) -> Vec<serde_json::Value> {
    vec![
        final_answer("Hello."),
        the_tool_call(),
        final_answer(answer),
    ]
}

#[tokio::test]
async fn openai_kind_passes_all_three_steps() {
    let s = scenario()
        .replies(three_steps("It is noon in Paris."))
        .build()
        .await;

    let (code, out) = smoke_test(&s.cfg()).await;

    assert_eq!(code, 0, "{out}");
    for step in [
        "ok   reachable: HTTP",
        "ok   completion:",
        "ok   tool call: 1 call(s) to get_current_time",
        "ok   tool result accepted:",
    ] {
        assert!(out.contains(step), "missing {step:?} in:\n{out}");
    }
    assert_contains(&out, "model fake-gemma, 150 prompt + 10 completion tokens");
}

#[tokio::test]
async fn openai_kind_forces_the_tool_call_and_replays_it_without_thinking() {
    let s = scenario()
        .replies(three_steps("It is noon in Paris."))
        .build()
        .await;
    smoke_test(&s.cfg()).await;

    let requests = s.requests().await;
    assert_eq!(requests.len(), 3);
    let forced = sent(&requests[1]).tool_choice;
    assert_eq!(
        forced.as_deref(),
        Some("required"),
        "the tool call is forced"
    );
    let round_trip = messages(&requests[2]);
    let assistant = &round_trip[2];
    assert_eq!(assistant.tool_calls[0].id, "call_1");
    let raw = &requests[2]["messages"][2];
    assert!(raw.get("reasoning_content").is_none(), "{raw}");
    assert_eq!(round_trip[3].role, Role::Tool);
    assert_eq!(round_trip[3].tool_call_id.as_deref(), Some("call_1"));
}

#[tokio::test]
async fn runpod_kind_reports_queue_and_execution_times() {
    let rp = FakeRunpod::start(
        vec![
            ok(completed("j1", final_answer("Hello."), 1200, 340)),
            ok(completed("j2", the_tool_call(), 5, 410)),
            ok(completed("j3", final_answer("Noon."), 7, 220)),
        ],
        vec![],
        false,
    )
    .await;
    let s = scenario().config_file(&rp.config_sections()).build().await;

    let (code, out) = smoke_test(&s.cfg()).await;

    assert_eq!(code, 0, "{out}");
    assert_contains(&out, "runpod delay 1200 ms execution 340 ms");
    assert!(out.contains("runpod delay 7 ms execution 220 ms"), "{out}");
    let bodies = rp.runsync_bodies().await;
    assert_eq!(bodies.len(), 3);
    assert!(bodies.iter().all(|b| b["input"]["messages"].is_array()));
}

#[tokio::test]
async fn a_wrong_key_is_diagnosed_in_one_line() {
    let rp = FakeRunpod::start(vec![ResponseTemplate::new(401)], vec![], false).await;
    let s = scenario().config_file(&rp.config_sections()).build().await;

    let (code, out) = smoke_test(&s.cfg()).await;

    let fail = the_one_failure(code, &out);
    assert!(
        fail.starts_with("FAIL completion: the endpoint refused the API key"),
        "{out}"
    );
    assert!(fail.contains("[runpod] api_key_env"), "{out}");
    assert!(
        !out.contains(crate::common::fake_runpod::KEY),
        "the key is never printed"
    );
    let runsyncs = rp.runsync_bodies().await.len();
    assert_eq!(runsyncs, 1, "a 401 is not retried");
}

#[tokio::test]
async fn a_wrong_endpoint_id_is_diagnosed_in_one_line() {
    let rp = FakeRunpod::start(
        vec![ResponseTemplate::new(404).set_body_string("Not Found")],
        vec![],
        false,
    )
    .await;
    let s = scenario().config_file(&rp.config_sections()).build().await;

    let (code, out) = smoke_test(&s.cfg()).await;

    let fail = the_one_failure(code, &out);
    assert!(
        fail.starts_with("FAIL completion: no such endpoint"),
        "{out}"
    );
    assert!(
        fail.contains("[runpod] endpoint_id or endpoint_url"),
        "{out}"
    );
}

#[tokio::test]
async fn an_openai_base_url_without_the_chat_route_is_diagnosed() {
    let llm = FakeLlm::replies(vec![final_answer("unused")]).await;
    // The common mistake: the server root instead of `.../v1`.
    let s = scenario().endpoint_at(&llm.server.uri()).build().await;

    let (code, out) = smoke_test(&s.cfg()).await;

    let fail = the_one_failure(code, &out);
    assert!(fail.contains("check [openai] base_url"), "{out}");
}

#[tokio::test]
async fn an_unreachable_host_fails_the_first_step_and_names_host_and_port() {
    let port = closed_port();
    let s = scenario()
        .endpoint_at(&format!("http://127.0.0.1:{port}/v1"))
        .build()
        .await;

    let (code, out) = smoke_test(&s.cfg()).await;

    let fail = the_one_failure(code, &out);
    assert!(
        fail.starts_with(&format!(
            "FAIL reachable: cannot connect to 127.0.0.1:{port} (connection refused)"
        )),
        "{out}"
    );
    assert!(
        !out.contains("completion"),
        "nothing after the failed step: {out}"
    );
}

#[tokio::test]
async fn a_model_that_will_not_call_the_tool_fails_the_round_trip_step() {
    let s = scenario()
        .replies(vec![final_answer("Hello."), final_answer("It is noon.")])
        .build()
        .await;

    let (code, out) = smoke_test(&s.cfg()).await;

    let fail = the_one_failure(code, &out);
    assert!(
        fail.starts_with("FAIL tool call: the model answered without calling the tool"),
        "{out}"
    );
}

/// An endpoint that passes its three steps.
fn endpoint() -> Scenario {
    scenario().replies(three_steps("It is noon."))
}

/// With noteworx configured, one listing with the token checks it.
#[tokio::test]
async fn noteworx_is_checked_with_one_listing() {
    let notes = FakeNoteworx::start(vec![note("n", "N", &[], "text")]).await;
    let s = endpoint().notes(&notes).build().await;

    let (code, out) = smoke_test(&s.cfg()).await;

    assert_eq!(code, 0, "{out}");
    let listed = format!("ok   noteworx: {} listed 1 note(s)", notes.uri());
    assert!(out.lines().any(|l| l.starts_with(&listed)), "{out}");
    assert_eq!(
        notes.calls().await,
        [("GET".to_string(), "/api/notes?limit=1".to_string())]
    );
    assert_eq!(
        notes.authorization_headers().await,
        [format!("Bearer {}", fake_noteworx::TOKEN)]
    );
}

/// The token is refused: the endpoint's steps pass, the notes one fails,
/// one FAIL line naming the key.
#[tokio::test]
async fn a_refused_noteworx_token_is_one_failure_naming_token_env() {
    let notes = FakeNoteworx::start(vec![note("n", "N", &[], "text")]).await;
    notes.fail_next(&[401]);
    let s = endpoint().notes(&notes).build().await;
    let (code, out) = smoke_test(&s.cfg()).await;
    let fail = the_one_failure(code, &out);
    assert!(
        fail.starts_with("FAIL noteworx: noteworx refused the token (HTTP 401"),
        "{out}"
    );
    assert!(
        fail.ends_with(
            "check NOTEWORX_TOKEN (the variable named by [tools.noteworx] token_env). The server said: injected failure"
        ),
        "{out}"
    );
    assert!(!out.contains(fake_noteworx::TOKEN));
}

/// Nothing listens where noteworx should be: the one FAIL line names
/// base_url.
#[tokio::test]
async fn an_unreachable_noteworx_is_one_failure_naming_base_url() {
    let port = closed_port();
    let s = endpoint()
        .config(&format!(
            "[tools.noteworx]\nbase_url = \"http://127.0.0.1:{port}\"\n"
        ))
        .build()
        .await;
    let (code, out) = smoke_test(&s.cfg()).await;
    let fail = the_one_failure(code, &out);
    assert!(
        fail.starts_with("FAIL noteworx: noteworx could not be reached"),
        "{out}"
    );
    assert!(fail.ends_with("check [tools.noteworx] base_url"), "{out}");
}

/// A server that wants a key for everything (vLLM with `--api-key`, OpenAI
/// itself) is reached with the configured key: its model list is read.
#[tokio::test]
async fn the_reachability_probe_sends_the_configured_key() {
    use wiremock::matchers::{header, method, path};
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(method("GET"))
        .and(path("/v1/models"))
        .and(header("authorization", "Bearer rp_test_key_1234abcd"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"data": [{"id": "m"}]})))
        .mount(&server)
        .await;
    wiremock::Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(401).set_body_json(json!({"error": "no key"})))
        .mount(&server)
        .await;
    let s = scenario()
        .endpoint_at(&format!("{}/v1", server.uri()))
        .config("api_key_env = \"RUNPOD_API_KEY\"\n")
        .build()
        .await;

    let (_, out) = smoke_test(&s.cfg()).await;

    assert_contains(&out, "ok   reachable: HTTP 200");
    assert_contains(&out, "lists 1 model(s)");
}
