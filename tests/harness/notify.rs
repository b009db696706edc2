//! Somebody is told (SPEC §22): `[notify] ping_url` speaks healthchecks.io's
//! ping protocol (`/start`, success, `/<exit code>` with the last status
//! lines as the body), `[notify] on_failure_url` gets the run's result as
//! JSON when it exits non-zero; neither ever changes the exit code, a dry
//! run notifies nothing, and the URLs' keys are redacted everywhere.

use serde_json::{Value, json};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use agent_harness::drain::RunOptions;

use crate::cli::{run_bin, stderr};
use crate::common::*;

/// The check's key, in the ping URL's path as healthchecks.io puts it.
const CHECK: &str = "0d338dcc-a054-11ec-b909-0242ac120002";

/// A ping service that answers every request `OK`, and keeps them.
async fn pings() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_string("OK"))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200).set_body_string("OK"))
        .mount(&server)
        .await;
    server
}

/// `METHOD path body` of each request the service got, in order.
async fn received(server: &MockServer) -> Vec<(String, String, String)> {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .into_iter()
        .map(|r| {
            (
                r.method.to_string(),
                r.url.path().to_string(),
                String::from_utf8_lossy(&r.body).into_owned(),
            )
        })
        .collect()
}

fn notify(server: &MockServer) -> String {
    format!(
        "[notify]\nping_url = \"{0}/ping/{CHECK}\"\non_failure_url = \"{0}/hook/{CHECK}\"\n",
        server.uri()
    )
}

#[tokio::test]
async fn a_good_run_pings_start_then_success_and_sends_no_failure_report() {
    let hc = pings().await;
    let llm = FakeLlm::replies(vec![final_answer("done")]).await;
    let project = Project::new();
    project.task("t", "Answer.");
    let outcome = run_all(&project.config(&llm.base_url(), &notify(&hc))).await;

    assert_eq!(outcome.exit_code(), 0);
    let got = received(&hc).await;
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(
        (got[0].0.as_str(), got[0].1.clone()),
        ("GET", format!("/ping/{CHECK}/start"))
    );
    assert_eq!(
        (got[1].0.as_str(), got[1].1.clone()),
        ("POST", format!("/ping/{CHECK}"))
    );
    assert!(got[1].2.starts_with("1 succeeded in "), "{}", got[1].2);
}

#[tokio::test]
async fn a_failed_run_pings_its_exit_code_and_posts_its_result() {
    let hc = pings().await;
    let llm = FakeLlm::start(vec![
        ResponseTemplate::new(400).set_body_json(json!({"error": {"message": "bad request"}})),
    ])
    .await;
    let project = Project::new();
    project.task("broken", "Answer.");
    let outcome = run_all(&project.config(&llm.base_url(), &notify(&hc))).await;

    assert_eq!(outcome.exit_code(), 1);
    let got = received(&hc).await;
    let paths: Vec<&str> = got.iter().map(|g| g.1.as_str()).collect();
    assert_eq!(
        paths,
        [
            format!("/ping/{CHECK}/start"),
            format!("/ping/{CHECK}/1"),
            format!("/hook/{CHECK}")
        ]
    );
    assert!(
        got[1].2.contains("1 failed") && got[1].2.contains("broken: failed (endpoint_error)"),
        "{}",
        got[1].2
    );
    let report: Value = serde_json::from_str(&got[2].2).unwrap();
    assert_eq!(report["exit_code"], 1);
    assert_eq!(report["failed"], 1);
    assert_eq!(report["failed_tasks"][0]["task"], "broken");
    assert_eq!(report["failed_tasks"][0]["stop_reason"], "endpoint_error");
    assert!(
        report["failed_tasks"][0]["error"]
            .as_str()
            .unwrap()
            .contains("HTTP 400")
    );
}

#[tokio::test]
async fn a_dry_run_notifies_nothing() {
    let hc = pings().await;
    let (_llm, _project, cfg) = arrange(
        vec![final_answer("done")],
        &[("t", "Answer.")],
        &notify(&hc),
    )
    .await;
    run(
        &cfg,
        RunOptions {
            dry_run: true,
            concurrency: 1,
            ..RunOptions::default()
        },
    )
    .await;
    assert!(received(&hc).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_service_that_is_down_changes_no_exit_code_is_counted_and_its_key_never_shows() {
    let llm = FakeLlm::replies(vec![final_answer("done")]).await;
    let project = Project::new();
    project.task("t", "Answer.");
    let down = format!("http://127.0.0.1:{}", closed_port());
    project.write_config(
        &llm.base_url(),
        &format!("[notify]\nping_url = \"{down}/ping/{CHECK}\"\n"),
    );

    let out = run_bin(&project, &["run"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("a notification failed ([notify])"), "{err}");
    assert!(!err.contains(CHECK), "the check's key is in the log: {err}");
    assert!(!project.all_records().contains(CHECK));
    let metrics = std::fs::read_to_string(project.root().join("logs/agent-harness.prom")).unwrap();
    assert!(
        metrics.contains("agent_harness_notify_failures_total 2\n"),
        "the start and the end: {metrics}"
    );
    assert!(metrics.contains("agent_harness_last_run_exit_code 0\n"));
    // The counter goes on from the previous run's.
    project.task("u", "Answer.");
    run_bin(&project, &["run"]).await;
    let metrics = std::fs::read_to_string(project.root().join("logs/agent-harness.prom")).unwrap();
    assert!(
        metrics.contains("agent_harness_notify_failures_total 4\n"),
        "{metrics}"
    );
}

/// A run that finds the lock taken did nothing of its own: it logs to the
/// check (`/log`) instead of pinging success, so a run that hangs holding
/// the lock is still noticed when its success never comes.
#[tokio::test]
async fn a_run_that_finds_the_lock_taken_logs_instead_of_pinging_success() {
    let hc = pings().await;
    let (_llm, _project, cfg) = arrange(
        vec![final_answer("done")],
        &[("t", "Answer.")],
        &notify(&hc),
    )
    .await;
    let held = agent_harness::drain::lock::RunLock::try_acquire(&cfg.paths.state_dir())
        .unwrap()
        .unwrap();

    let outcome = run_all(&cfg).await;

    drop(held);
    assert_eq!(outcome.exit_code(), 0);
    let got = received(&hc).await;
    let calls: Vec<(&str, &str)> = got.iter().map(|g| (g.0.as_str(), g.1.as_str())).collect();
    assert_eq!(
        calls,
        [
            ("GET", &*format!("/ping/{CHECK}/start")),
            ("POST", &*format!("/ping/{CHECK}/log"))
        ]
    );
    assert!(
        got[1].2.contains("another run holds the lock"),
        "{}",
        got[1].2
    );
}
