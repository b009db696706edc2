//! Setup faults (docs/operating.md, "Setup faults"): a key, a route or a token
//! the endpoint or a service refuses stops the run loudly, files nothing,
//! counts no attempt, and the next run (the setup fixed) does everything; a
//! refusal after a success is the task's, not the setup's.

use std::time::Duration;

use agent_harness::agent::StopReason;
use agent_harness::records::Status;
use serde_json::{Value, json};
use wiremock::{Request, Respond, ResponseTemplate};

use crate::common::fake_runpod::{FakeRunpod, completed};
use crate::common::*;

fn refused() -> ResponseTemplate {
    ResponseTemplate::new(401).set_body_json(json!({"error": {"message": "Invalid API Key"}}))
}

/// Tasks `a`, `b` and `c`, and a key the server refuses once: it is
/// rotated (fixed) after that, and the model answers each task.
fn three_tasks_and_a_rotated_key() -> Scenario {
    scenario()
        .script(vec![
            refused(),
            ok(final_answer("a done")),
            ok(final_answer("b done")),
            ok(final_answer("c done")),
        ])
        .task("a", "Task a.")
        .task("b", "Task b.")
        .task("c", "Task c.")
        // A key is configured; the server refuses it.
        .config("api_key_env = \"RUNPOD_API_KEY\"\n")
}

#[tokio::test]
async fn a_rotated_key_stops_the_run_and_files_nothing() {
    let s = three_tasks_and_a_rotated_key().build().await;

    let outcome = s.run().await;

    assert_eq!(outcome.exit_code(), 2);
    assert_eq!(s.inbox(), ["a.md", "b.md", "c.md"], "every task stays");
    assert!(s.failed().is_empty() && s.done().is_empty());
    assert!(
        !s.root().join("logs/b").exists() && !s.root().join("logs/c").exists(),
        "no further task started"
    );
    assert_eq!(attempt_counts(&s), json!({}), "no attempt was counted");
    assert_eq!(s.requests().await.len(), 1, "a 401 is asked once");
    let metrics = s.metrics();
    assert_contains(&metrics, "agent_harness_last_run_exit_code 2\n");
    assert_contains(
        &metrics,
        "agent_harness_last_run_tasks{status=\"interrupted\",stop_reason=\"setup_fault\"} 1",
    );
}

#[tokio::test]
async fn a_rotated_key_interrupts_its_task_naming_the_keys_variable() {
    let s = three_tasks_and_a_rotated_key().ran().await;

    let a = s.summary("a");
    assert_eq!(
        (a.status, a.stop_reason, a.retryable),
        (Status::Interrupted, StopReason::SetupFault, true)
    );
    let error = "the endpoint refused the API key (HTTP 401); \
                 check RUNPOD_API_KEY (the variable named by [openai] api_key_env). \
                 The server said: Invalid API Key";
    assert_eq!(a.error.as_deref(), Some(error));
}

#[tokio::test]
async fn once_the_key_is_fixed_the_next_run_does_every_task_on_its_first_attempt() {
    let s = three_tasks_and_a_rotated_key().ran().await;

    let outcome = s.run().await;

    assert_eq!(outcome.exit_code(), 0);
    assert!(s.inbox().is_empty());
    assert_eq!(s.done().len(), 3);
    let again = s.summary_in(&s.root().join(format!("logs/a/{RUN_ID}-2")));
    assert_eq!((again.status, again.attempt), (Status::Succeeded, 1));
    for t in ["b", "c"] {
        assert_eq!(s.summary(t).attempt, 1, "{t}");
    }
    assert_contains(s.metrics(), "agent_harness_last_success_timestamp_seconds ");
}

#[tokio::test]
async fn a_wrong_route_or_method_is_a_setup_fault_naming_base_url() {
    let not_found = "no chat route or no such model there (HTTP 404); ";
    let not_allowed = "the endpoint does not take a chat request there (HTTP 405); ";
    for (status, words) in [(404, not_found), (405, not_allowed)] {
        let s = scenario()
            .script(vec![ResponseTemplate::new(status)])
            .task("t", "hi")
            .build()
            .await;

        assert_eq!(s.run().await.exit_code(), 2, "{status}");

        let t = s.summary("t");
        assert_eq!(t.stop_reason, StopReason::SetupFault, "{status}");
        let error = t.error.unwrap();
        assert!(error.starts_with(words), "{status}: {error}");
        assert!(error.contains("check [openai] base_url"), "{error}");
        assert_eq!(s.inbox(), ["t.md"]);
        assert_eq!(s.requests().await.len(), 1, "{status} is not retried");
    }
}

/// Task `t` on the RunPod endpoint `rp`.
async fn on_runpod(rp: &FakeRunpod) -> Scene {
    let config = rp.config_sections();
    scenario()
        .task("t", "hi")
        .config_file(&config)
        .build()
        .await
}

#[tokio::test]
async fn an_unknown_runpod_endpoint_id_is_a_setup_fault() {
    let rp = FakeRunpod::start(
        vec![ResponseTemplate::new(404).set_body_string("Not Found")],
        vec![],
        false,
    )
    .await;
    let s = on_runpod(&rp).await;

    assert_eq!(s.run().await.exit_code(), 2);

    let t = s.summary("t");
    assert_eq!(t.stop_reason, StopReason::SetupFault);
    assert_contains(
        t.error.as_deref().unwrap(),
        "no such endpoint (HTTP 404); check [runpod] endpoint_id or endpoint_url. The server said: Not Found",
    );
}

/// A 404 on a status poll is an expired job: retried, not a setup fault.
#[tokio::test]
async fn an_expired_runpod_job_is_retried_not_a_setup_fault() {
    let rp = FakeRunpod::start(
        vec![
            ok(json!({"id": "job1", "status": "IN_QUEUE"})),
            ok(completed("job2", final_answer("done"), 5, 7)),
        ],
        vec![ResponseTemplate::new(404)],
        false,
    )
    .await;
    let s = on_runpod(&rp).await;

    assert_eq!(s.run().await.exit_code(), 0);
    assert_eq!(s.summary("t").stop_reason, StopReason::FinalAnswer);
}

/// Refuses every request but those of the task whose prompt says "slow",
/// which are answered after a long delay.
struct RefuseAllButSlow;

impl Respond for RefuseAllButSlow {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&req.body).unwrap_or_default();
        if body.to_string().contains("slow") {
            ok(final_answer("late")).set_delay(Duration::from_secs(30))
        } else {
            // Lets the slow task's request go out first.
            refused().set_delay(Duration::from_millis(300))
        }
    }
}

/// A model that answers as [`RefuseAllButSlow`].
async fn refusing_all_but_slow() -> FakeLlm {
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(RefuseAllButSlow)
        .mount(&server)
        .await;
    list_models(&server).await;
    FakeLlm { server }
}

#[tokio::test]
async fn tasks_in_flight_end_as_setup_faults_and_the_rest_never_start() {
    let s = scenario()
        .llm(refusing_all_but_slow().await)
        .task("a-slow", "A slow one.")
        .task("b-refused", "Refused.")
        .task("c-later", "Never started.")
        .build()
        .await;

    assert_eq!(s.run_with(run_options(2, false)).await.exit_code(), 2);

    let slow = s.summary("a-slow");
    assert_eq!(
        (slow.status, slow.stop_reason),
        (Status::Interrupted, StopReason::SetupFault)
    );
    let error = slow.error.unwrap();
    let cause = "stopped by another task's setup fault: the endpoint refused the API key";
    assert!(error.starts_with(cause), "{error}");
    assert_eq!(s.summary("b-refused").stop_reason, StopReason::SetupFault);
    assert!(!s.root().join("logs/c-later").exists());
    assert_eq!(s.inbox(), ["a-slow.md", "b-refused.md", "c-later.md"]);
    assert_eq!(attempt_counts(&s), json!({}));
}

/// A refusal after the endpoint already answered in this run is about what
/// that request carried (a page that trips a firewall), not the setup: the
/// task fails for good and the run goes on, so it can never block the inbox.
#[tokio::test]
async fn a_refusal_after_a_success_is_the_tasks_not_the_setups() {
    let blocked = "blocked by web application firewall";
    let s = scenario()
        .script(vec![
            ok(call("no_such_tool", json!({}))),
            ResponseTemplate::new(403).set_body_json(json!({"error": {"message": blocked}})),
            ok(final_answer("b done")),
        ])
        .task("a", "Read the page.")
        .task("b", "Something else.")
        .build()
        .await;

    assert_eq!(s.run().await.exit_code(), 1);

    let a = s.summary("a");
    let rejected = format!("the endpoint rejected the request (HTTP 403): {blocked}");
    assert_eq!(
        (a.status, a.stop_reason, a.retryable),
        (Status::Failed, StopReason::EndpointError, false)
    );
    assert_eq!(a.error, Some(rejected));
    assert_eq!(s.summary("b").status, Status::Succeeded, "the run went on");
    assert!(s.inbox().is_empty());
}

/// A noteworx that lists note `n` but refuses to read it (403).
async fn notes_listing_n_but_refusing_it() -> wiremock::MockServer {
    use wiremock::matchers::{method, path};
    let notes = wiremock::MockServer::start().await;
    wiremock::Mock::given(method("GET"))
        .and(path("/api/notes"))
        .respond_with(ok(json!({"notes": [{"slug": "n", "title": "N"}]})))
        .mount(&notes)
        .await;
    wiremock::Mock::given(method("GET"))
        .and(path("/api/notes/n"))
        .respond_with(
            ResponseTemplate::new(403).set_body_json(json!({"error": "not shared with you"})),
        )
        .mount(&notes)
        .await;
    notes
}

/// The same for noteworx: once a call in the run was answered, a 403 is
/// about one note, a tool error the model can work around.
#[tokio::test]
async fn a_notes_refusal_after_a_success_is_a_tool_error() {
    let notes = notes_listing_n_but_refusing_it().await;
    let section = format!("[tools.noteworx]\nbase_url = \"{}\"\n", notes.uri());
    let list = ("noteworx_list_notes", json!({}));
    let read = ("noteworx_read_note", json!({"slug": "n"}));
    let s = scenario()
        .calls(vec![list, read], "done")
        .task("t", "Read my notes.")
        .config(&section)
        .build()
        .await;

    assert_eq!(s.run().await.exit_code(), 0);

    let lines = s.tool_lines("t");
    assert!(!lines[0].is_error);
    assert!(lines[1].is_error);
    assert_eq!(
        lines[1].result,
        "noteworx refused the request (403): not shared with you."
    );
    assert_eq!(s.summary("t").status, Status::Succeeded);
}

/// A 401 is about the key, never about what a request carried: a key
/// rotated while a run goes on stops the run even after answers, and files
/// nothing.
#[tokio::test]
async fn a_401_after_a_success_still_stops_the_run() {
    let s = scenario()
        .script(vec![
            ok(final_answer("a done")),
            refused(),
            ok(final_answer("c done")),
        ])
        .task("a", "Task a.")
        .task("b", "Task b.")
        .task("c", "Task c.")
        .config("api_key_env = \"RUNPOD_API_KEY\"\n")
        .build()
        .await;

    assert_eq!(s.run().await.exit_code(), 2);

    assert_eq!(s.done().len(), 1, "a finished before the key was rotated");
    assert!(s.failed().is_empty());
    assert_eq!(s.inbox(), ["b.md", "c.md"]);
    assert_eq!(s.summary("b").stop_reason, StopReason::SetupFault);
    assert!(!s.root().join("logs/c").exists());
}

#[tokio::test]
async fn done_and_failed_in_one_folder_is_a_setup_fault_before_anything_runs() {
    let s = scenario()
        .replies(vec![final_answer("x")])
        .config("[paths]\ndone = \"tasks/archive\"\nfailed = \"tasks/archive\"\n")
        .task("t", "Answer.")
        .build()
        .await;

    let out = run_bin(&s, &["run"]).await;

    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_contains(
        stderr(&out),
        "[paths] done and [paths] failed are the same folder",
    );
    assert_eq!(s.inbox(), ["t.md"]);
    assert!(s.requests().await.is_empty());
    let check = run_bin(&s, &["check"]).await;
    assert_eq!(check.status.code(), Some(2));
    assert_contains(stdout(&check), "are the same folder");
}

#[tokio::test]
async fn https_to_a_plain_http_server_says_to_use_http() {
    let s = scenario().replies(vec![final_answer("Hi.")]).build().await;
    let https = s.llm().base_url().replacen("http://", "https://", 1);
    s.project.write_config(&https, "");
    let out = s.binary_async(&["test-runpod"]).await;
    assert_ne!(out.status.code(), Some(0));
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert_contains(&said, "the server speaks plain http: use http://");
}

/// A server on a free port that answers a plain HTTP request with
/// `status` (none: nothing at all); what is not HTTP (a TLS hello) it holds
/// without a word, as llama-server without TLS does.
fn silent_to_tls(status: Option<&'static str>) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut start = [0u8; 4];
                if conn.read_exact(&mut start).is_ok()
                    && &start == b"GET "
                    && let Some(status) = status
                {
                    let _ = conn.write_all(
                        format!(
                            "HTTP/1.1 {status}\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"
                        )
                        .as_bytes(),
                    );
                    return;
                }
                std::thread::sleep(Duration::from_secs(60));
            });
        }
    });
    port
}

/// `run` of one task against `https://` to [`silent_to_tls`]`(status)`:
/// the scene, the server's port and what the binary did.
async fn run_over_https(status: Option<&'static str>) -> (Scene, u16, std::process::Output) {
    let port = silent_to_tls(status);
    let s = scenario()
        .endpoint_at(&format!("https://127.0.0.1:{port}/v1"))
        .task("t", "Answer.")
        .build()
        .await;
    let out = s.binary_async(&["run"]).await;
    (s, port, out)
}

/// Plain http there: the scheme is the setup's fault; every task stays.
#[tokio::test]
async fn https_to_a_server_that_waits_in_plain_http_is_a_setup_fault() {
    let (s, port, out) = run_over_https(Some("200 OK")).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_contains(
        &err,
        &format!(
            "127.0.0.1:{port} gave no TLS answer, and answers plain http there (HTTP 200): the server speaks plain http: use http:// in the URL, not https://"
        ),
    );
    assert_eq!(s.inbox(), ["t.md"]);
    let out = s.binary_async(&["test-runpod"]).await;
    assert_contains(stdout(&out), "FAIL reachable: 127.0.0.1:");
    assert_contains(stdout(&out), "use http:// in the URL");
}

/// A TLS server that hangs stays a timeout, and so does one that says 400
/// to plain HTTP on its port (nginx, Go's): the run waits for a later one.
#[tokio::test]
async fn https_to_a_silent_server_is_a_timeout() {
    for status in [None, Some("400 Bad Request")] {
        let (s, _, out) = run_over_https(status).await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(75), "{status:?}: {err}");
        assert!(err.contains("did not answer in time"), "{status:?}: {err}");
        assert_eq!(s.inbox(), ["t.md"]);
    }
}

#[tokio::test]
async fn requeue_rerun_and_prune_need_no_secret_and_run_and_check_still_do() {
    let key = "AGENT_HARNESS_TEST_UNSET_KEY";
    let config = format!("api_key_env = \"{key}\"\n");
    let s = scenario().config(&config).build().await;
    filed(&s, "tasks/failed/20261128T010000Z-broke.md", "Try again.");
    filed(&s, "tasks/done/20261128T010000Z-fine.md", "Once more.");

    // The movers work from a shell where the key is not set.
    for args in [&["requeue", "broke"][..], &["rerun", "fine"], &["prune"]] {
        let out = run_bin(&s, args).await;
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    }
    assert_eq!(s.inbox(), ["broke.md", "fine.md"]);
    assert!(s.failed().is_empty() && s.done().is_empty());

    // What contacts the endpoint still refuses, naming the variable.
    for args in [&["run"][..], &["check"]] {
        let out = run_bin(&s, args).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        // In either stream: the newline keeps a match from spanning both.
        let said = format!("{}\n{}", stdout(&out), stderr(&out));
        assert!(said.contains(key), "{args:?}: {said}");
    }
    assert_eq!(s.inbox(), ["broke.md", "fine.md"], "nothing ran");
}

/// Writes `text` to `path` in the project, making its folder.
fn filed(project: &Project, path: &str, text: &str) {
    let path = project.root().join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Panics unless the test runs as root: only root can give a file to
/// another user (scripts/test runs as root in CI).
fn needs_root() {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test gives a file to another user: run it as root (scripts/test in CI does)"
    );
}

#[tokio::test]
#[ignore = "needs scripts/test: root, to give the config to another user"]
async fn a_found_config_another_user_owns_or_anyone_may_change_is_refused_before_anything_runs() {
    needs_root();
    let s = scenario()
        .replies(vec![final_answer("Ran.")])
        .task("t", "Answer.")
        .build()
        .await;
    let config = s.config_path();
    let refused = |out: &std::process::Output, why: &str| {
        let err = stderr(out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!("{}: not read: {why}", config.display()))
                && err.contains("--config PATH"),
            "{err}"
        );
    };

    // Planted by another user in the folder it is started in.
    std::os::unix::fs::chown(&config, Some(65534), Some(65534)).unwrap();
    let out = s.binary_async(&["run"]).await;
    refused(&out, "it is owned by ");
    assert!(stderr(&out).contains("uid 65534"), "{}", stderr(&out));
    let out = s.binary_async(&["check"]).await;
    refused(&out, "it is owned by ");

    // Ours, but anyone may write it, or change the folder it is in.
    std::os::unix::fs::chown(&config, Some(0), Some(0)).unwrap();
    let mode = |path: &std::path::Path, mode: u32| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    mode(&config, 0o666);
    refused(
        &s.binary_async(&["run"]).await,
        "anyone may write it (mode 0666)",
    );
    mode(&config, 0o644);
    mode(s.root(), 0o777);
    refused(
        &s.binary_async(&["run"]).await,
        "anyone may change the folder it is in (mode 0777, no sticky bit)",
    );
    assert_eq!(s.inbox(), ["t.md"], "every task is left as it was");
    assert!(
        s.requests().await.is_empty(),
        "the endpoint was never called"
    );

    // With the sticky bit (as /tmp) the folder is fine; and a config named
    // with --config is the operator's choice, whoever owns it.
    mode(s.root(), 0o1777);
    std::os::unix::fs::chown(&config, Some(65534), Some(65534)).unwrap();
    refused(&s.binary_async(&["run"]).await, "it is owned by ");
    let out = s
        .binary_async(&["--config", &config.display().to_string(), "run"])
        .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(s.done().len(), 1);
}
