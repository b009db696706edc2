//! SPEC §16: the operator is asleep. A fault in the setup stops the run
//! and files nothing; a fault in a task never looks like success.

use std::time::Duration;

use agent_harness::agent::StopReason;
use agent_harness::config::Config;
use agent_harness::drain::RunOptions;
use agent_harness::records::Status;
use serde_json::{Value, json};
use wiremock::{Request, Respond, ResponseTemplate};

use crate::cli::{as_nobody, bin, stderr, stdout};
use crate::common::fake_runpod::{FakeRunpod, completed};
use crate::common::*;

fn refused() -> ResponseTemplate {
    ResponseTemplate::new(401).set_body_json(json!({"error": {"message": "Invalid API Key"}}))
}

#[tokio::test]
async fn a_rotated_key_stops_the_run_files_nothing_and_the_next_run_does_everything() {
    let llm = FakeLlm::start(vec![
        refused(),
        ok(final_answer("a done")),
        ok(final_answer("b done")),
        ok(final_answer("c done")),
    ])
    .await;
    let project = Project::new();
    for t in ["a", "b", "c"] {
        project.task(t, &format!("Task {t}."));
    }
    // A key is configured; the server refuses it.
    let cfg = project.config(&llm.base_url(), "api_key_env = \"RUNPOD_API_KEY\"\n");

    let outcome = run_all(&cfg).await;

    assert_eq!(outcome.exit_code(), 2);
    assert_eq!(
        project.inbox(),
        ["a.md", "b.md", "c.md"],
        "every task stays"
    );
    assert!(project.failed().is_empty() && project.done().is_empty());
    let s = project.summary("a");
    assert_eq!(
        (s.status, s.stop_reason, s.retryable),
        (Status::Interrupted, StopReason::SetupFault, true)
    );
    assert_eq!(
        s.error.as_deref(),
        Some(
            "the endpoint refused the API key (HTTP 401: Invalid API Key); \
             check RUNPOD_API_KEY (the variable named by [openai] api_key_env)"
        )
    );
    assert!(
        !project.root().join("logs/b").exists() && !project.root().join("logs/c").exists(),
        "no further task started"
    );
    assert_eq!(
        attempt_counts(&project),
        json!({}),
        "no attempt was counted"
    );
    assert_eq!(llm.requests().await.len(), 1, "a 401 is asked once");
    let metrics = std::fs::read_to_string(project.root().join("logs/agent-harness.prom")).unwrap();
    assert!(
        metrics.contains("agent_harness_last_run_exit_code 2\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "agent_harness_last_run_tasks{status=\"interrupted\",stop_reason=\"setup_fault\"} 1"
        ),
        "{metrics}"
    );

    // The key is fixed: the next run does every task, each on its first attempt.
    let outcome = run_all(&cfg).await;

    assert_eq!(outcome.exit_code(), 0);
    assert!(project.inbox().is_empty());
    assert_eq!(project.done().len(), 3);
    let again = project.summary_in(&project.root().join(format!("logs/a/{RUN_ID}-2")));
    assert_eq!((again.status, again.attempt), (Status::Succeeded, 1));
    for t in ["b", "c"] {
        assert_eq!(project.summary(t).attempt, 1, "{t}");
    }
    let metrics = std::fs::read_to_string(project.root().join("logs/agent-harness.prom")).unwrap();
    assert!(
        metrics.contains("agent_harness_last_success_timestamp_seconds "),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_wrong_route_or_method_is_a_setup_fault_naming_base_url() {
    for (status, words) in [
        (404, "no chat route or no such model there (HTTP 404: "),
        (
            405,
            "the endpoint does not take a chat request there (HTTP 405: ",
        ),
    ] {
        let llm = FakeLlm::start(vec![ResponseTemplate::new(status)]).await;
        let project = Project::new();
        project.task("t", "hi");
        let cfg = project.config(&llm.base_url(), "");

        assert_eq!(run_all(&cfg).await.exit_code(), 2, "{status}");

        let s = project.summary("t");
        assert_eq!(s.stop_reason, StopReason::SetupFault, "{status}");
        let error = s.error.unwrap();
        assert!(error.starts_with(words), "{status}: {error}");
        assert!(error.contains("check [openai] base_url"), "{error}");
        assert_eq!(project.inbox(), ["t.md"]);
        assert_eq!(llm.requests().await.len(), 1, "{status} is not retried");
    }
}

#[tokio::test]
async fn an_unknown_runpod_endpoint_id_is_a_setup_fault_but_an_expired_job_is_not() {
    let rp = FakeRunpod::start(
        vec![ResponseTemplate::new(404).set_body_string("Not Found")],
        vec![],
        false,
    )
    .await;
    let project = Project::new();
    project.task("t", "hi");
    let path = project.root().join("agent.toml");
    std::fs::write(&path, rp.config_sections()).unwrap();
    let cfg = Config::load(&path, &test_env).unwrap();

    assert_eq!(run_all(&cfg).await.exit_code(), 2);

    let s = project.summary("t");
    assert_eq!(s.stop_reason, StopReason::SetupFault);
    assert!(
        s.error.as_deref().unwrap().contains(
            "no such endpoint (HTTP 404: Not Found); check [runpod] endpoint_id or endpoint_url"
        ),
        "{:?}",
        s.error
    );

    // A 404 on a status poll is an expired job: retried, not a setup fault.
    let rp = FakeRunpod::start(
        vec![
            ok(json!({"id": "job1", "status": "IN_QUEUE"})),
            ok(completed("job2", final_answer("done"), 5, 7)),
        ],
        vec![ResponseTemplate::new(404)],
        false,
    )
    .await;
    let project = Project::new();
    project.task("t", "hi");
    let path = project.root().join("agent.toml");
    std::fs::write(&path, rp.config_sections()).unwrap();
    let cfg = Config::load(&path, &test_env).unwrap();

    assert_eq!(run_all(&cfg).await.exit_code(), 0);
    assert_eq!(project.summary("t").stop_reason, StopReason::FinalAnswer);
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

#[tokio::test]
async fn tasks_in_flight_end_as_setup_faults_and_the_rest_never_start() {
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(RefuseAllButSlow)
        .mount(&server)
        .await;
    let project = Project::new();
    project.task("a-slow", "A slow one.");
    project.task("b-refused", "Refused.");
    project.task("c-later", "Never started.");
    let cfg = project.config(&format!("{}/v1", server.uri()), "");

    let outcome = run(
        &cfg,
        RunOptions {
            concurrency: 2,
            ..RunOptions::default()
        },
    )
    .await;

    assert_eq!(outcome.exit_code(), 2);
    let slow = project.summary("a-slow");
    assert_eq!(
        (slow.status, slow.stop_reason),
        (Status::Interrupted, StopReason::SetupFault)
    );
    assert!(
        slow.error
            .as_deref()
            .unwrap()
            .starts_with("stopped by another task's setup fault: the endpoint refused the API key"),
        "{:?}",
        slow.error
    );
    assert_eq!(
        project.summary("b-refused").stop_reason,
        StopReason::SetupFault
    );
    assert!(!project.root().join("logs/c-later").exists());
    assert_eq!(project.inbox(), ["a-slow.md", "b-refused.md", "c-later.md"]);
    assert_eq!(attempt_counts(&project), json!({}));
}

#[test]
fn a_missing_inbox_is_a_configuration_error_for_run_run_task_and_check() {
    let project = Project::new();
    project.write_config("http://127.0.0.1:9/v1", "[paths]\ninbox = \"tasks/inbx\"\n");
    let resolved = project.root().join("tasks/inbx").display().to_string();
    for args in [&["run"][..], &["run-task", "t"], &["check"]] {
        let out = bin(&project).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let text = format!("{}{}", stdout(&out), stderr(&out));
        assert!(
            text.contains(&format!(
                "[paths] inbox: the folder {resolved} does not exist"
            )),
            "{args:?}: {text}"
        );
    }
    assert!(
        !project.root().join("tasks/inbx").exists(),
        "nothing creates the inbox"
    );
    let metrics = std::fs::read_to_string(project.root().join("logs/agent-harness.prom")).unwrap();
    assert!(
        metrics.contains("agent_harness_last_run_exit_code 2\n"),
        "a run that read its config writes its figures: {metrics}"
    );
}

#[test]
fn a_folder_that_cannot_be_created_names_its_key_and_touches_no_task() {
    let project = Project::new();
    std::fs::write(project.root().join("blocker"), "a file").unwrap();
    project.write_config(
        "http://127.0.0.1:9/v1",
        "[paths]\ndone = \"blocker/done\"\n",
    );
    project.task("t", "x");
    let out = bin(&project).arg("run").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("[paths] done: cannot create the folder"),
        "{}",
        stderr(&out)
    );
    assert_eq!(project.inbox(), ["t.md"]);
    assert!(!project.root().join("logs/t").exists());
}

#[test]
fn check_warns_about_inbox_entries_that_will_never_run() {
    let project = Project::new();
    project.write_config("http://127.0.0.1:9/v1", "");
    project.task("good", "Do it.");
    let inbox = project.root().join("tasks/inbox");
    std::fs::write(inbox.join("notes.txt"), "x").unwrap();
    std::fs::write(inbox.join("TASK.MD"), "x").unwrap();
    let out = bin(&project).arg("check").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "warnings do not fail check");
    let text = stdout(&out);
    for name in ["notes.txt", "TASK.MD"] {
        assert!(
            text.lines().any(|l| l.contains(name)
                && l.contains("warning: it will never run (only NAME.md files run")),
            "{name}: {text}"
        );
    }
    assert!(text.contains("1 task file(s)"), "{text}");
}

/// The folders the service user cannot write are named by their keys. As
/// root, `check` runs as `nobody`; otherwise a folder is made read-only.
#[test]
fn check_as_another_user_names_every_folder_it_cannot_write() {
    let project = Project::new();
    project.write_config("http://127.0.0.1:9/v1", "");
    project.task("t", "x");
    let root = unsafe { libc::geteuid() } == 0;
    let out = if root {
        as_nobody(&project, "check")
    } else {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            project.root().join("tasks/inbox"),
            std::fs::Permissions::from_mode(0o555),
        )
        .unwrap();
        let out = bin(&project).arg("check").output().unwrap();
        std::fs::set_permissions(
            project.root().join("tasks/inbox"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        out
    };
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let text = stdout(&out);
    let inbox = project.root().join("tasks/inbox").display().to_string();
    assert!(
        text.contains(&format!(
            "[paths] inbox: {inbox} is not writable by this user"
        )),
        "{text}"
    );
    if root {
        let done = project.root().join("tasks/done").display().to_string();
        assert!(
            text.contains(&format!(
                "[paths] done: {done} does not exist and cannot be created by this user"
            )),
            "{text}"
        );
        assert!(text.contains("[paths] logs: "), "{text}");
    }
}

#[tokio::test]
async fn yaml_frontmatter_is_an_invalid_task_not_a_prompt() {
    let llm = FakeLlm::replies(vec![final_answer("unused")]).await;
    let project = Project::new();
    project.task("t", "---\nmax_turns: 2\ntools: [webfetch]\n---\nDo it.\n");
    let cfg = project.config(&llm.base_url(), "");

    assert_eq!(run_all(&cfg).await.exit_code(), 1);

    let s = project.summary("t");
    assert_eq!(s.stop_reason, StopReason::InvalidTask);
    assert!(
        s.error
            .as_deref()
            .unwrap()
            .contains("frontmatter must be TOML between two +++ lines"),
        "{:?}",
        s.error
    );
    assert_eq!(project.failed().len(), 1);
    assert!(llm.requests().await.is_empty(), "the model never saw it");
}

fn cut(text: &str) -> Value {
    reply(json!({"role": "assistant", "content": text}), "length")
}

#[tokio::test]
async fn a_cut_answer_is_asked_for_once_more_shorter_with_thinking_off() {
    let llm = FakeLlm::replies(vec![
        cut("The answer is that the timer runs every"),
        final_answer("The timer runs hourly."),
    ])
    .await;
    let project = Project::new();
    project.task("t", "When does the timer run?");
    let cfg = project.config(&llm.base_url(), "");

    assert_eq!(run_all(&cfg).await.exit_code(), 0);

    let s = project.summary("t");
    assert_eq!(s.final_answer.as_deref(), Some("The timer runs hourly."));
    let requests = llm.requests().await;
    assert_eq!(requests.len(), 2);
    let second = messages(&requests[1]);
    let n = second.len();
    assert_eq!(
        second[n - 2]["content"],
        "The answer is that the timer runs every"
    );
    assert_eq!(second[n - 1]["role"], "user");
    assert!(
        second[n - 1]["content"]
            .as_str()
            .unwrap()
            .contains("cut off at the output length limit"),
        "{second:?}"
    );
    assert_eq!(
        requests[1]["chat_template_kwargs"]["enable_thinking"], false,
        "thinking off for the second ask"
    );
    let finishes: Vec<Value> = project
        .conversation("t")
        .iter()
        .map(|l| l["finish_reason"].clone())
        .collect();
    assert_eq!(finishes, [json!("length"), json!("stop")]);
    let log = project.run_log("t");
    assert!(log.contains("finish length); CUT at max_tokens"), "{log}");
    assert!(log.contains("the answer was CUT at max_tokens"), "{log}");
}

#[tokio::test]
async fn only_the_start_of_a_long_cut_answer_is_sent_back() {
    // Long, and no loop (a loop is `repetition`, never asked again).
    let long: String = (0..2000).map(|i| format!("w{i} ")).collect();
    let llm = FakeLlm::replies(vec![cut(&long), final_answer("Short.")]).await;
    let project = Project::new();
    project.task("t", "Explain.");
    let cfg = project.config(&llm.base_url(), "");

    assert_eq!(run_all(&cfg).await.exit_code(), 0);

    let requests = llm.requests().await;
    let second = messages(&requests[1]);
    let replayed = second[second.len() - 2]["content"].as_str().unwrap();
    assert_eq!(replayed.chars().count(), 1000, "{replayed}");
    assert!(replayed.ends_with('…') && long.starts_with(replayed.trim_end_matches('…')));
}

#[tokio::test]
async fn an_answer_cut_twice_or_on_the_last_turn_is_answer_truncated() {
    for (extra, replies, why) in [
        (
            "",
            vec![cut("The answer is that"), cut("The timer")],
            ", again when asked for a shorter one",
        ),
        (
            "[limits]\nmax_turns = 1\n",
            vec![cut("The answer is that")],
            " and no turn is left to ask again",
        ),
    ] {
        let llm = FakeLlm::replies(replies).await;
        let project = Project::new();
        project.task("t", "When does the timer run?");
        let cfg = project.config(&llm.base_url(), extra);

        assert_eq!(run_all(&cfg).await.exit_code(), 1, "{why}");

        let s = project.summary("t");
        assert_eq!(
            (s.status, s.stop_reason, s.final_answer),
            (Status::Failed, StopReason::AnswerTruncated, None),
            "{why}"
        );
        assert_eq!(
            s.error.as_deref(),
            Some(
                format!(
                    "the answer was cut at max_tokens = 2048 (finish_reason \"length\"){why}; \
                     raise max_tokens or ask for a shorter answer"
                )
                .as_str()
            )
        );
        assert_eq!(project.failed().len(), 1);
    }
}

#[test]
fn run_task_exits_75_while_another_run_holds_the_lock() {
    let project = Project::new();
    project.write_config("http://127.0.0.1:9/v1", "");
    project.task("t", "x");
    let _lock = agent_harness::drain::lock::RunLock::try_acquire(&project.root().join("tasks"))
        .unwrap()
        .unwrap();
    let out = bin(&project).args(["run-task", "t"]).output().unwrap();
    assert_eq!(out.status.code(), Some(75));
    let err = stderr(&out);
    assert!(err.contains("task \"t\" did not run"), "{err}");
    assert_eq!(project.inbox(), ["t.md"]);
}

#[tokio::test]
async fn tool_errors_are_in_the_task_finished_line_and_the_runs_table() {
    let llm = FakeLlm::replies(vec![
        tool_calls(&[("c1", "no_such_tool", json!({}))]),
        final_answer("done"),
    ])
    .await;
    let project = Project::new();
    project.write_config(&llm.base_url(), "");
    project.task("t", "x");
    let out = {
        let mut cmd = bin(&project);
        tokio::task::spawn_blocking(move || cmd.arg("run").output().unwrap())
            .await
            .unwrap()
    };
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let finished = stderr(&out)
        .lines()
        .find(|l| l.contains("task finished"))
        .map(str::to_string)
        .unwrap();
    assert!(finished.contains("tool_errors=1"), "{finished}");
    let table = stdout(&bin(&project).arg("runs").output().unwrap());
    let header: Vec<&str> = table
        .lines()
        .next()
        .unwrap()
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    let col = header.iter().position(|h| *h == "TOOL ERR").unwrap();
    // "RUN ID" and "STOP REASON" are one column each but two words.
    assert_eq!(header[..col].len(), 5, "{table}");
    assert_eq!(row[col], "1", "{table}");
}

#[tokio::test]
async fn the_report_marks_cut_replies_and_counts_tool_errors() {
    let llm = FakeLlm::replies(vec![
        tool_calls(&[("c1", "no_such_tool", json!({}))]),
        cut("The timer runs every"),
        final_answer("Hourly."),
    ])
    .await;
    let project = Project::new();
    project.task("t", "When?");
    let cfg = project.config(&llm.base_url(), "");
    assert_eq!(run_all(&cfg).await.exit_code(), 0);

    let out = project.root().join("report");
    let written = agent_harness::records::report::write(
        &project.root().join("logs"),
        &agent_harness::records::report::ReportOptions {
            out: out.clone(),
            task: None,
            limit: 10,
        },
        &mut |_| {},
    )
    .unwrap();
    let (index, pages) = (written.index, written.runs);
    assert_eq!(pages, 1);
    let index = std::fs::read_to_string(index).unwrap();
    assert!(index.contains("<th>Tool errors</th>"), "{index}");
    assert!(index.contains("<td class=\"failed\">1</td>"), "{index}");
    let page = std::fs::read_dir(out.join("runs"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .next()
        .unwrap();
    assert_eq!(
        page.matches("CUT at max_tokens").count(),
        1,
        "only the cut turn: {page}"
    );
    assert!(page.contains("1 tool error(s)"), "{page}");
}

/// A refusal after the endpoint already answered in this run is about what
/// that request carried (a page that trips a firewall), not the setup: the
/// task fails for good and the run goes on, so it can never block the inbox.
#[tokio::test]
async fn a_refusal_after_a_success_is_the_tasks_not_the_setups() {
    let llm = FakeLlm::start(vec![
        ok(tool_calls(&[("c1", "no_such_tool", json!({}))])),
        ResponseTemplate::new(403)
            .set_body_json(json!({"error": {"message": "blocked by web application firewall"}})),
        ok(final_answer("b done")),
    ])
    .await;
    let project = Project::new();
    project.task("a", "Read the page.");
    project.task("b", "Something else.");
    let cfg = project.config(&llm.base_url(), "");

    let outcome = run_all(&cfg).await;

    assert_eq!(outcome.exit_code(), 1);
    let a = project.summary("a");
    assert_eq!(
        (a.status, a.stop_reason, a.retryable),
        (Status::Failed, StopReason::EndpointError, false)
    );
    assert_eq!(
        a.error.as_deref(),
        Some("the endpoint rejected the request (HTTP 403): blocked by web application firewall")
    );
    assert_eq!(
        project.summary("b").status,
        Status::Succeeded,
        "the run went on"
    );
    assert!(project.inbox().is_empty());
}

/// The same for noteworx: once a call in the run was answered, a 403 is
/// about one note, a tool error the model can work around.
#[tokio::test]
async fn a_notes_refusal_after_a_success_is_a_tool_error() {
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
    let llm = FakeLlm::replies(vec![
        tool_calls(&[("c1", "noteworx_list_notes", json!({}))]),
        tool_calls(&[("c2", "noteworx_read_note", json!({"slug": "n"}))]),
        final_answer("done"),
    ])
    .await;
    let project = Project::new();
    project.task("t", "Read my notes.");
    let cfg = project.config(
        &llm.base_url(),
        &format!("[tools.noteworx]\nbase_url = \"{}\"\n", notes.uri()),
    );

    assert_eq!(run_all(&cfg).await.exit_code(), 0);

    let lines = project.tool_lines("t");
    assert!(!lines[0].is_error);
    assert!(lines[1].is_error);
    assert_eq!(
        lines[1].result,
        "noteworx refused the request (403): not shared with you."
    );
    assert_eq!(project.summary("t").status, Status::Succeeded);
}

/// `run` refuses folders it could not use, as `check` names them: an
/// existing `done/` it cannot write, a file in the way of `failed/`.
#[test]
fn run_refuses_folders_it_cannot_use_before_any_task_starts() {
    let project = Project::new();
    std::fs::write(project.root().join("blocker"), "a file").unwrap();
    project.write_config(
        "http://127.0.0.1:9/v1",
        "[paths]\nfailed = \"blocker/failed\"\n",
    );
    project.task("t", "x");
    let check = bin(&project).arg("check").output().unwrap();
    assert_eq!(check.status.code(), Some(2), "{}", stdout(&check));
    assert!(
        stdout(&check).contains("[paths] failed: ")
            && stdout(&check).contains("blocker is not a folder"),
        "{}",
        stdout(&check)
    );

    if unsafe { libc::geteuid() } != 0 {
        use std::os::unix::fs::PermissionsExt;
        project.write_config("http://127.0.0.1:9/v1", "");
        let done = project.root().join("tasks/done");
        std::fs::create_dir_all(&done).unwrap();
        std::fs::set_permissions(&done, std::fs::Permissions::from_mode(0o555)).unwrap();
        let out = bin(&project).arg("run").output().unwrap();
        std::fs::set_permissions(&done, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(stderr(&out).contains("[paths] done: "), "{}", stderr(&out));
        assert!(!project.root().join("logs/t").exists(), "no task started");
    } else {
        // As root every folder is writable: the same check runs as nobody.
        project.write_config("http://127.0.0.1:9/v1", "");
        let out = as_nobody(&project, "run");
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains("[paths] done: ") || err.contains("[paths] inbox: "),
            "{err}"
        );
        assert!(!project.root().join("logs/t").exists(), "no task started");
    }
}

/// A 401 is about the key, never about what a request carried: a key
/// rotated while a run goes on stops the run even after answers, and files
/// nothing.
#[tokio::test]
async fn a_401_after_a_success_still_stops_the_run() {
    let llm = FakeLlm::start(vec![
        ok(final_answer("a done")),
        refused(),
        ok(final_answer("c done")),
    ])
    .await;
    let project = Project::new();
    for t in ["a", "b", "c"] {
        project.task(t, &format!("Task {t}."));
    }
    let cfg = project.config(&llm.base_url(), "api_key_env = \"RUNPOD_API_KEY\"\n");

    assert_eq!(run_all(&cfg).await.exit_code(), 2);

    assert_eq!(
        project.done().len(),
        1,
        "a finished before the key was rotated"
    );
    assert!(project.failed().is_empty());
    assert_eq!(project.inbox(), ["b.md", "c.md"]);
    assert_eq!(project.summary("b").stop_reason, StopReason::SetupFault);
    assert!(!project.root().join("logs/c").exists());
}
