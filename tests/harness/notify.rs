//! Somebody is told (docs/operating.md, "Notify"): `[notify] ping_url` speaks
//! healthchecks.io's ping protocol (`/start`, success, `/<exit code>` with the
//! last status lines as the body), `[notify] on_failure_url` gets the run's
//! result when it exits non-zero — JSON, text or Slack's `{"text": …}` as
//! `on_failure_format` says; neither ever changes the exit code, a dry run
//! notifies nothing, and the URLs' keys are redacted everywhere.

use std::time::Duration;

use serde_json::{Value, json};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::common::*;

/// The report `on_failure_url` gets as JSON (docs/operating.md, "Notify"),
/// read typed: a field renamed or gone fails the read.
#[derive(Debug, serde::Deserialize)]
struct FailureReport {
    exit_code: u8,
    failed: usize,
    setup_fault: Option<String>,
    failed_tasks: Vec<FailedTask>,
    more_failed_tasks: usize,
}

#[derive(Debug, serde::Deserialize)]
struct FailedTask {
    task: String,
    stop_reason: String,
    error: Option<String>,
}

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

/// Task `t`, notifying as `toml` says.
fn task_t(toml: &str) -> Scenario {
    scenario().task("t", "Answer.").config(toml)
}

/// Task `t`, which the model answers at once, notifying as `toml` says.
fn answered(toml: &str) -> Scenario {
    task_t(toml).answers(&["done"])
}

/// Task `broken`, whose request the endpoint refuses (HTTP 400),
/// notifying as `toml` says.
fn refused(toml: &str) -> Scenario {
    scenario()
        .script(vec![
            ResponseTemplate::new(400).set_body_json(json!({"error": {"message": "bad request"}})),
        ])
        .task("broken", "Answer.")
        .config(toml)
}

/// The path of each request the service got, in order.
async fn paths(server: &MockServer) -> Vec<String> {
    received(server).await.into_iter().map(|r| r.1).collect()
}

/// The bodies of the `/<exit>` ping and of the failure report the
/// service got.
async fn ping_and_report(server: &MockServer, exit: u8) -> (String, String) {
    let got = received(server).await;
    let ping = got.iter().find(|g| g.1.ends_with(&format!("/{exit}")));
    let report = got.iter().find(|g| g.1.starts_with("/hook"));
    (ping.unwrap().2.clone(), report.unwrap().2.clone())
}

#[tokio::test]
async fn a_good_run_pings_start_then_success_and_sends_no_failure_report() {
    let hc = pings().await;
    let outcome = answered(&notify(&hc)).build().await.run().await;

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
    let outcome = refused(&notify(&hc)).build().await.run().await;

    assert_eq!(outcome.exit_code(), 1);
    let ping = format!("/ping/{CHECK}");
    let hook = format!("/hook/{CHECK}");
    assert_eq!(
        paths(&hc).await,
        [format!("{ping}/start"), format!("{ping}/1"), hook]
    );
    let got = received(&hc).await;
    assert_contains(&got[1].2, "1 failed");
    assert_contains(&got[1].2, "broken: failed (endpoint_error)");
    let report: FailureReport = serde_json::from_str(&got[2].2).unwrap();
    assert_eq!((report.exit_code, report.failed), (1, 1));
    let task = &report.failed_tasks[0];
    assert_eq!(
        (&*task.task, &*task.stop_reason),
        ("broken", "endpoint_error")
    );
    assert!(task.error.as_deref().unwrap().contains("HTTP 400"));
}

#[tokio::test]
async fn a_dry_run_notifies_nothing() {
    let hc = pings().await;
    let s = answered(&notify(&hc)).build().await;
    s.run_with(run_options(1, true)).await;
    assert!(received(&hc).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_service_that_is_down_changes_no_exit_code_is_counted_and_its_key_never_shows() {
    let down = format!("http://127.0.0.1:{}", closed_port());
    let ping = format!("[notify]\nping_url = \"{down}/ping/{CHECK}\"\n");
    let s = answered(&ping).build().await;

    let out = run_bin(&s, &["run"]).await;

    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_contains(&err, "a notification failed ([notify])");
    // The check's key is in no log.
    assert_lacks(&err, CHECK);
    assert_lacks(s.all_records(), CHECK);
    // The start and the end.
    assert_contains(s.metrics(), "agent_harness_notify_failures_total 2\n");
    assert_contains(s.metrics(), "agent_harness_last_run_exit_code 0\n");
    // The counter goes on from the previous run's.
    s.task("u", "Answer.");
    run_bin(&s, &["run"]).await;
    assert_contains(s.metrics(), "agent_harness_notify_failures_total 4\n");
}

/// A run that finds the lock taken did nothing of its own: it logs to the
/// check (`/log`) instead of pinging success, so a run that hangs holding
/// the lock is still noticed when its success never comes.
#[tokio::test]
async fn a_run_that_finds_the_lock_taken_logs_and_never_pings_start() {
    let hc = pings().await;
    let s = answered(&notify(&hc)).build().await;
    let held = agent_harness::state::RunLock::try_acquire(&s.cfg().paths.state_dir())
        .unwrap()
        .unwrap();

    let outcome = s.run().await;

    drop(held);
    assert_eq!(outcome.exit_code(), 0);
    let got = received(&hc).await;
    let calls: Vec<(&str, &str)> = got.iter().map(|g| (g.0.as_str(), g.1.as_str())).collect();
    // No `/start`: that would reset the check's timer while the run
    // holding the lock may hang.
    assert_eq!(calls, [("POST", &*format!("/ping/{CHECK}/log"))]);
    assert_contains(&got[0].2, "another run holds the lock");
}

/// A receiver whose every answer is a redirect to `target`.
async fn redirecting_to(target: &str) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(wiremock::matchers::any())
        .respond_with(ResponseTemplate::new(307).insert_header("location", target))
        .mount(&server)
        .await;
    server
}

#[tokio::test(flavor = "multi_thread")]
async fn a_redirect_is_a_failed_notification_and_its_target_receives_nothing() {
    let target = pings().await;
    let hc = redirecting_to(&format!("{}/internal-admin?x=1", target.uri())).await;
    let s = refused(&notify(&hc)).build().await;

    let out = run_bin(&s, &["run"]).await;

    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let followed = received(&target).await;
    assert!(
        followed.is_empty(),
        "the redirect was followed: {followed:?}"
    );
    // Each notification asked once: a redirect is not retried either.
    let asked = paths(&hc).await;
    assert_eq!(asked.len(), 3, "{asked:?}");
    assert_contains(&err, "HTTP 307, a redirect to 127.0.0.1 (not followed)");
    assert_lacks(&err, "internal-admin");
    assert_contains(s.metrics(), "agent_harness_notify_failures_total 3\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn logs_show_a_notification_url_as_scheme_host_and_port_only() {
    let port = closed_port();
    let s = answered(&format!(
            "[notify]\nping_url = \"http://ghp_TOKENUSERNAME42:x-oauth-basic@127.0.0.1:{port}/p/short?sig=SIGVALUE9876&code=AZCODE5555\"\non_failure_url = \"http://hookuser:pw@127.0.0.1:{port}/hook/abc\"\n"
        ))
        .build()
        .await;

    let out = run_bin(&s, &["run"]).await;

    let err = stderr(&out);
    assert_contains(&err, &format!("url=http://127.0.0.1:{port} "));
    for secret in [
        "ghp_TOKENUSERNAME42",
        "x-oauth-basic",
        "SIGVALUE9876",
        "AZCODE5555",
        "/p/short",
    ] {
        assert_lacks(&err, secret);
    }
}

/// A receiver that takes a minute to answer anything.
async fn silent() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(wiremock::matchers::any())
        .respond_with(ResponseTemplate::new(200).set_delay(std::time::Duration::from_secs(60)))
        .mount(&server)
        .await;
    server
}

/// `/start` goes out once the run holds its lock, beside the first task:
/// a receiver that does not answer it never holds the task back.
#[tokio::test(flavor = "multi_thread")]
async fn start_goes_out_beside_the_first_task_and_never_holds_it_back() {
    let hc = silent().await;
    let s = answered(&notify(&hc)).build().await;

    let out = run_bin(&s, &["run"]).await;

    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let chat = s.requests().await;
    assert_eq!(chat.len(), 1);
    // Had the task waited for `/start`, its three tries (5 s each) would
    // all have come before the task's request.
    let starts = paths(&hc)
        .await
        .iter()
        .filter(|p| p.ends_with("/start"))
        .count();
    assert_eq!(starts, 1, "one try of /start, given up at the end");
    assert_contains(&err, "/start had no answer when the run ended");
}

/// Task `long`, which would go on for a long time: a slow tool call each
/// turn, for 30 turns.
fn a_long_task(toml: &str) -> Scenario {
    let turns: Vec<ResponseTemplate> = (0..30)
        .map(|i| {
            let call = tool_calls(&[(&format!("c{i}"), "no_such_tool", json!({"n": i}))]);
            ok(call).set_delay(Duration::from_millis(300))
        })
        .collect();
    scenario()
        .by_progress(turns)
        .task("long", "Loop.")
        .config(&format!("{toml}[limits]\nmax_turns = 30\n"))
}

/// The metrics are written before the end's notifications, so a receiver
/// that never answers loses nothing even if the process is killed while
/// it waits; after a signal the notifications take a second, not 33.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_with_a_silent_receiver_ends_soon_with_the_metrics_written() {
    let hc = silent().await;
    let s = a_long_task(&notify(&hc)).build().await;
    let child = spawn_run(&s, std::process::Stdio::piped());
    while s.requests().await.len() < 2 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    // Before: 3 tries × 5 s for the ping and again for the report, 33 s,
    // past what `systemctl stop` waits.
    let out = tokio::time::timeout(
        crate::signals::STOP_TIMEOUT,
        tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()),
    )
    .await
    .expect("the run was still going when systemctl stop would kill it")
    .unwrap();

    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(75), "{err}");
    assert_contains(s.metrics(), "agent_harness_last_run_exit_code 75\n");
    assert_contains(s.metrics(), "agent_harness_notify_failures_total 3\n");
    // The end's notifications were cut by the signal's second, not by the
    // 10 s of a normal end nor left to their retries.
    assert_contains(
        &err,
        "notifications cut after 1 s ([notify]), a signal came",
    );
    assert_eq!(s.inbox(), ["long.md"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_metrics_are_on_disk_while_the_end_notifications_still_wait() {
    let hc = silent().await;
    let s = refused(&notify(&hc)).build().await;
    let prom = s.root().join("logs/agent-harness.prom");
    let mut child = spawn_run(&s, std::process::Stdio::null());
    while !prom.exists() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "ended before its metrics"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    // The receiver holds every notification for a minute: the run is
    // still waiting on them, and a kill now loses nothing.
    assert!(child.try_wait().unwrap().is_none());
    child.kill().unwrap();
    child.wait().unwrap();
    let metrics = std::fs::read_to_string(&prom).unwrap();
    assert_contains(&metrics, "agent_harness_last_run_exit_code 1\n");
}

/// The ping's and the failure report's bodies of a run of sixty-one
/// failing tasks, one of whose errors quotes what the model wrote.
async fn sixty_one_failures() -> (String, String) {
    let hc = pings().await;
    let bait = "@channel URGENT: payroll moved, re-enter creds at http://evil.example/login";
    let mut scene = scenario()
        .by_progress(vec![ok(final_answer(&format!("{{\"n\": \"{bait}\"}}")))])
        .task(
            "aa-schema",
            "+++\noutput_schema = \"schemas/s.json\"\n+++\nGive n.",
        )
        .config(&notify(&hc));
    for i in 0..60 {
        // Not a task file: each fails at once, in the harness's words.
        scene = scene.task(&format!("bad{i:02}"), "+++\nmax_turns = \"many\"\n+++\nx");
    }
    let s = scene.build().await;
    std::fs::create_dir_all(s.root().join("schemas")).unwrap();
    std::fs::write(
        s.root().join("schemas/s.json"),
        r#"{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}"#,
    )
    .unwrap();
    let outcome = s.run().await;
    assert_eq!(outcome.exit_code(), 1, "{outcome:?}");
    ping_and_report(&hc, 1).await
}

#[tokio::test]
async fn bodies_carry_the_harness_words_never_the_models() {
    let (ping, report) = sixty_one_failures().await;

    assert_contains(&report, "aa-schema");
    for body in [&ping, &report] {
        assert_lacks(body, "evil.example");
        assert_lacks(body, "@channel");
    }
    assert_contains(
        &ping,
        "aa-schema: failed (invalid_answer): the answer did not match the output schema",
    );
}

#[tokio::test]
async fn bodies_keep_within_their_caps() {
    let (ping, report) = sixty_one_failures().await;

    assert_contains(&ping, "\nand 11 more");
    let report: FailureReport = serde_json::from_str(&report).unwrap();
    assert_eq!(report.failed_tasks.len(), 50);
    assert_eq!((report.more_failed_tasks, report.failed), (11, 61));
    for task in &report.failed_tasks {
        let error = task.error.as_deref().unwrap();
        assert!(error.chars().count() <= 300, "{task:?}");
    }
}

/// The failure report of a run whose one task the endpoint refused,
/// written as `format` says: its body and content type.
async fn failure_body_as(format: &str) -> (String, String) {
    failure_body_of("bro<!channel>ken", format).await
}

/// [`failure_body_as`] of a task named `task`.
async fn failure_body_of(task: &str, format: &str) -> (String, String) {
    let hook = pings().await;
    let s = scenario()
        .script(vec![
            ResponseTemplate::new(400).set_body_json(json!({"error": {"message": "bad request"}})),
        ])
        .task(task, "Answer.")
        .config(&format!(
            "[notify]\non_failure_url = \"{}/hook/{CHECK}\"\non_failure_format = \"{format}\"\n",
            hook.uri()
        ))
        .build()
        .await;
    assert_eq!(s.run().await.exit_code(), 1);
    let requests = hook.received_requests().await.unwrap();
    assert_eq!(requests.len(), 1);
    let kind = requests[0]
        .headers
        .get("content-type")
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    (String::from_utf8(requests[0].body.clone()).unwrap(), kind)
}

#[tokio::test]
async fn the_slack_format_posts_exactly_a_text_field() {
    let (body, kind) = failure_body_as("slack").await;

    assert_eq!(kind, "application/json");
    let body: Value = serde_json::from_str(&body).unwrap();
    let fields: Vec<&String> = body.as_object().unwrap().keys().collect();
    assert_eq!(fields, ["text"]);
    let text = body["text"].as_str().unwrap();
    assert!(
        text.starts_with("agent-harness run exited 1: 0 succeeded, 1 failed"),
        "{text}"
    );
    // Slack's markup characters as entities: the name calls nobody.
    assert_contains(
        text,
        &format!("- bro&lt;!channel&gt;ken (run {RUN_ID}): failed (endpoint_error)"),
    );
}

#[tokio::test]
async fn the_slack_format_breaks_every_mention() {
    let (body, _) = failure_body_of("@channel", "slack").await;

    let body: Value = serde_json::from_str(&body).unwrap();
    let text = body["text"].as_str().unwrap();
    // A word joiner after the `@`: Mattermost and Rocket.Chat call nobody.
    assert_contains(
        text,
        &format!("- @\u{2060}channel (run {RUN_ID}): failed (endpoint_error)"),
    );
    assert!(!text.contains("@channel"), "{text}");
}

#[tokio::test]
async fn the_text_format_posts_the_result_as_plain_text() {
    let (body, kind) = failure_body_as("text").await;

    assert_eq!(kind, "text/plain; charset=utf-8");
    assert!(
        body.starts_with("agent-harness run exited 1: 0 succeeded, 1 failed, 0 left in the inbox"),
        "{body}"
    );
    assert_contains(
        &body,
        &format!(
            "- bro<!channel>ken (run {RUN_ID}): failed (endpoint_error): the endpoint's answer ended the task (HTTP 400;"
        ),
    );
}

/// A setup fault whose server quotes the request: the ping and the failure
/// report say the harness's diagnosis, never the server's words.
#[tokio::test]
async fn a_setup_faults_bodies_say_the_harness_words_not_the_servers() {
    let hc = pings().await;
    let quoted =
        "invalid key for the request {\"messages\": [{\"content\": \"wire the money now\"}]}";
    let refusal = ResponseTemplate::new(401).set_body_json(json!({"error": {"message": quoted}}));
    let s = task_t(&notify(&hc)).script(vec![refusal]).build().await;

    let outcome = s.run().await;

    assert_eq!(outcome.exit_code(), 2, "{outcome:?}");
    let (ping, report) = ping_and_report(&hc, 2).await;
    for body in [&ping, &report] {
        assert_lacks(body, "wire the money");
        assert_lacks(body, "The server said");
    }
    let diagnosis = "the endpoint refused the API key (HTTP 401); check ";
    let stopped = "setup fault, the run stopped and nothing was filed for it";
    assert_contains(&ping, &format!("{stopped}: {diagnosis}"));
    let report: FailureReport = serde_json::from_str(&report).unwrap();
    let fault = report.setup_fault.as_deref().unwrap();
    assert!(fault.starts_with(diagnosis), "{report:?}");
    // The records keep the server's words, for the operator.
    let error = s.summary("t").error.unwrap();
    assert!(error.ends_with(&format!(". The server said: {quoted}")));
}
