//! SIGTERM / SIGINT against the real binary (docs/operating.md, "Signals"): a
//! `systemctl stop` in the middle of a slow model call loses nothing.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agent_harness::agent::StopReason;
use agent_harness::records::{Status, Summary};
use serde_json::json;
use wiremock::matchers::{method, path_regex};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::common::*;

/// Starts `agent-harness run` on a project whose endpoint takes a minute to
/// answer, and returns once the model call is in flight.
async fn run_until_the_call_is_in_flight(s: &Scene) -> Child {
    let child = Command::new(assert_cmd::cargo::cargo_bin("agent-harness"))
        .arg("run")
        .current_dir(s.root())
        .env_remove("AGENT_HARNESS_CONFIG")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while s.requests().await.is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no model call arrived"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child
}

pub(crate) fn signal(child: &Child, name: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{name} failed");
}

/// What `systemctl stop` waits before it kills the service
/// (`TimeoutStopSec` in deploy/agent-harness.service). A run still going
/// after a signal for this long is killed and fails its test instead of
/// hanging it; the endpoints of these tests take longer to answer, so a
/// run that waited for them fails. How fast a run stops is no test's
/// business (docs/operating.md, "Signals": "within a second or two").
pub(crate) const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// Waits for the child to exit, at most `limit`; returns its code.
pub(crate) fn wait(child: &mut Child, limit: Duration) -> Option<i32> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        if start.elapsed() > limit {
            child.kill().ok();
            panic!("agent-harness still running {limit:?} after the signal");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn slow_endpoint() -> Vec<ResponseTemplate> {
    vec![ok(final_answer("too late")).set_delay(Duration::from_secs(60))]
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_mid_call_leaves_the_task_in_the_inbox_and_exits_75_in_time() {
    let scene = scenario()
        .script(slow_endpoint())
        .task("a-slow-one", "Summarise the week.")
        .task("b-not-started", "Another task.")
        .build()
        .await;
    let mut child = run_until_the_call_is_in_flight(&scene).await;

    signal(&child, "TERM");
    // The call would answer in 60 s: a run that waited for it is killed.
    let code = wait(&mut child, STOP_TIMEOUT);

    assert_eq!(code, Some(75), "exit 75: work is left in the inbox");
    assert_eq!(scene.inbox(), ["a-slow-one.md", "b-not-started.md"]);
    assert!(scene.done().is_empty() && scene.failed().is_empty());
    assert_eq!(
        scene.requests().await.len(),
        1,
        "no new task or call after the signal"
    );

    let dir = the_run_dir(&scene, "a-slow-one");
    let s: Summary = scene.summary_in(&dir);
    assert_eq!(
        (s.status, s.stop_reason),
        (Status::Interrupted, StopReason::Interrupted)
    );
    assert!(s.retryable, "an interrupted task is run again next time");
    let conversation = conversation_in(&dir);
    // The call in flight was cancelled, not waited for: its one attempt
    // ended interrupted, with no reply.
    assert_eq!(conversation.len(), 1, "{conversation:#?}");
    assert_eq!(
        conversation[0].error_kind.as_deref(),
        Some("interrupted"),
        "{:?}",
        conversation[0]
    );
    assert!(conversation[0].response.is_null(), "{:?}", conversation[0]);
    assert!(
        !scene.root().join("logs/b-not-started").exists(),
        "the task that had not started has no run"
    );

    // The lock was released: the next run takes the tasks again.
    let _llm2 = scene.then_replies(vec![final_answer("done")], "").await;
    let second = Command::new(assert_cmd::cargo::cargo_bin("agent-harness"))
        .arg("run")
        .current_dir(scene.root())
        .env_remove("AGENT_HARNESS_CONFIG")
        .output()
        .unwrap();
    assert_eq!(
        second.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let done = scene.done();
    assert_eq!(done.len(), 2, "{done:?}");
    assert!(done[0].ends_with("-a-slow-one.md") && done[1].ends_with("-b-not-started.md"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_signal_exits_at_once_while_the_first_is_still_cleaning_up() {
    // A pending RunPod job whose cancel takes 20 s: after the first signal
    // the harness waits (up to 5 s) for that cancel before it writes the
    // summary. The second signal must not wait for it.
    let rp = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path_regex("/runsync$"))
        .respond_with(ok(json!({"id": "job-1", "status": "IN_QUEUE"})))
        .mount(&rp)
        .await;
    Mock::given(method("GET"))
        .and(path_regex("/status/job-1$"))
        .respond_with(ok(json!({"id": "job-1", "status": "IN_QUEUE"})))
        .mount(&rp)
        .await;
    Mock::given(method("POST"))
        .and(path_regex("/cancel/job-1$"))
        .respond_with(
            ok(json!({"id": "job-1", "status": "CANCELLED"})).set_delay(Duration::from_secs(20)),
        )
        .mount(&rp)
        .await;
    let s = scenario()
        .endpoint_at(&rp.uri())
        .config_file(&format!(
            "[endpoint]\nkind = \"runpod\"\n[runpod]\nendpoint_url = \"{}\"\napi_key_env = \"\"\npoll_interval_ms = 50\n",
            rp.uri()
        ))
        .task("t", "Hello.")
        .build()
        .await;
    let mut child = Command::new(assert_cmd::cargo::cargo_bin("agent-harness"))
        .arg("run")
        .current_dir(s.root())
        .env_remove("AGENT_HARNESS_CONFIG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let polled =
        |reqs: &[wiremock::Request]| reqs.iter().any(|r| r.url.path().contains("/status/"));
    while !polled(&rp.received_requests().await.unwrap_or_default()) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the job was never polled"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    signal(&child, "INT");
    let cancel_sent = Instant::now();
    while !rp
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .any(|r| r.url.path().contains("/cancel/"))
    {
        assert!(
            cancel_sent.elapsed() < Duration::from_secs(10),
            "no cancel after the first signal"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    signal(&child, "INT");
    let code = wait(&mut child, STOP_TIMEOUT);

    // "At once" is an order, not a time: the run exited before the first
    // signal's cleanup (up to 5 s for the cancel, then the summary) ended.
    assert_eq!(code, Some(75));
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_contains(&stderr, "second signal, exiting at once");
    let dir = the_run_dir(&s, "t");
    assert!(
        !dir.join("summary.json").exists(),
        "the graceful path, which writes the summary after the cancel, never finished"
    );
    assert_eq!(s.inbox(), ["t.md"], "the task is never lost");
}
