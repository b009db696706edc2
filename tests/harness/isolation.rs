//! Isolation (docs/untrusted-input.md): a panic in one task fails that task
//! alone; a task that kills the process reaches `max_attempts`; an
//! interrupted task gets its attempt back.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agent_harness::agent::StopReason;
use agent_harness::agent::deps::TaskDeps;
use agent_harness::drain::{RunOutcome, Tally};
use agent_harness::records::Status;
use chrono::{TimeZone, Utc};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use crate::common::*;

// -- 1. Isolation ------------------------------------------------------------

/// A reply whose task body says PANIC arms the clock: the next time the
/// harness asks it for the time — inside that task — it panics.
struct ArmOnPanicTask {
    armed: Arc<AtomicBool>,
}

impl Respond for ArmOnPanicTask {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&req.body).unwrap_or_default();
        if body["messages"][1]["content"]
            .as_str()
            .is_some_and(|t| t.contains("PANIC"))
        {
            self.armed.store(true, Ordering::SeqCst);
        }
        ok(final_answer("fine"))
    }
}

#[tokio::test]
async fn a_panic_inside_one_task_fails_that_task_alone_as_internal_error() {
    let armed = Arc::new(AtomicBool::new(false));
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ArmOnPanicTask {
            armed: armed.clone(),
        })
        .mount(&server)
        .await;
    list_models(&server).await;
    let scene = scenario()
        .llm(FakeLlm { server })
        .task("a-before", "Say hello.")
        .task("b-panics", "PANIC in here.")
        .task("c-after", "Say goodbye.")
        .build()
        .await;
    let cfg = scene.cfg();
    let trigger = armed.clone();
    let clock: agent_harness::agent::deps::Clock = Arc::new(move || {
        if trigger.swap(false, Ordering::SeqCst) {
            panic!("injected: the clock broke inside a task");
        }
        Utc.with_ymd_and_hms(2026, 4, 9, 6, 15, 0).unwrap()
    });
    let mut h = TaskDeps::new(&cfg, clock, CancellationToken::new()).unwrap();
    h.endpoint = agent_harness::endpoint::Endpoint::new(&cfg.endpoint, &cfg.tls.trust)
        .unwrap()
        .with_retry_policy(fast_retries());

    let outcome = agent_harness::app::run_inbox(&cfg, &h, &run_options(1, false))
        .await
        .unwrap();

    assert_eq!(
        outcome,
        RunOutcome::Finished(Tally {
            succeeded: 2,
            failed: 1,
            ..Tally::default()
        })
    );
    assert_eq!(outcome.exit_code(), 1);
    let s = scene.summary("b-panics");
    assert_eq!(
        (s.status, s.stop_reason, s.retryable),
        (Status::Failed, StopReason::InternalError, false)
    );
    assert!(
        s.error
            .as_deref()
            .unwrap()
            .contains("injected: the clock broke inside a task"),
        "{s:?}"
    );
    assert_eq!(
        scene.failed(),
        [format!("{RUN_ID}-b-panics.md")],
        "the file moved"
    );
    assert_eq!(scene.done().len(), 2);
    assert!(scene.inbox().is_empty());
    assert!(
        !attempts_file(&scene).exists(),
        "no attempt count is left behind"
    );
}

/// The model answers, but only after a minute: a run is stopped first.
fn a_minute_late() -> Vec<ResponseTemplate> {
    vec![ok(final_answer("too late")).set_delay(Duration::from_secs(60))]
}

/// The file counting each task's attempts.
fn attempts_file(s: &Scene) -> std::path::PathBuf {
    s.root().join("tasks/.agent-harness-attempts.json")
}

/// Starts `agent-harness run` and SIGKILLs it once its model call is in flight.
async fn kill_mid_call(s: &Scene, calls_before: usize) {
    let mut child = harness_command()
        .arg("run")
        .current_dir(s.root())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while s.requests().await.len() <= calls_before {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no model call arrived"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before its call"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().unwrap(); // SIGKILL: no handler, no summary, no cleanup
    child.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_that_kills_the_process_max_attempts_times_moves_to_failed() {
    let scene = scenario()
        .script(a_minute_late())
        .task("oom", "A task the process dies on.")
        .config("[limits]\nmax_attempts = 2")
        .build()
        .await;

    for killed in 0..2 {
        kill_mid_call(&scene, killed).await;
        assert_eq!(scene.inbox(), ["oom.md"], "a kill loses no task");
        let counts = attempt_counts(&scene);
        assert_eq!(counts, json!({"oom": killed + 1}), "counted before it ran");
        let runs = attempt_runs(&scene, "oom");
        assert_eq!(runs.len(), killed + 1, "each attempt's run is named");
    }
    let out = scene.binary(&["run"]);

    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(scene.requests().await.len(), 2, "not run a third time");
    assert!(scene.inbox().is_empty());
    let failed = scene.failed();
    assert_eq!(failed.len(), 1, "{failed:?}");
    let runs: Vec<_> = std::fs::read_dir(scene.root().join("logs/oom"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("summary.json").exists())
        .collect();
    assert_eq!(runs.len(), 1, "only the last run wrote a summary");
    let s = scene.summary_in(&runs[0]);
    assert_eq!(s.status, Status::Failed);
    assert_eq!(s.stop_reason, StopReason::InternalError);
    assert_eq!(s.attempt, 2);
    let error = s.error.unwrap();
    assert_contains(&error, "started this task 2 times");
    assert_contains(&error, "killed");
    assert!(!attempts_file(&scene).exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interrupted_task_gets_its_attempt_back() {
    let s = scenario()
        .script(a_minute_late())
        .task("t", "Slow.")
        .build()
        .await;
    interrupt_one_run(&s).await;
    let counts = attempt_counts(&s);
    assert_eq!(
        counts,
        json!({}),
        "the attempt counted at the start was taken back"
    );
    let runs = attempt_runs(&s, "t");
    assert_eq!(runs.len(), 1, "its run is named, to resume from");
    // A task with attempts from earlier runs goes back to that count (a
    // count alone is how an older version wrote it).
    std::fs::write(attempts_file(&s), r#"{"t": 2}"#).unwrap();
    interrupt_one_run(&s).await;
    assert_eq!(attempt_counts(&s), json!({"t": 2}));
}

/// Starts `run`, waits for its first model request and stops it with SIGTERM.
async fn interrupt_one_run(s: &Scene) {
    let seen = s.requests().await.len();
    let mut child = harness_command()
        .arg("run")
        .current_dir(s.root())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while s.requests().await.len() == seen {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no model call arrived"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    assert_eq!(child.wait().unwrap().code(), Some(75));
    assert_eq!(s.inbox(), ["t.md"]);
}
