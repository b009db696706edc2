//! Draining the inbox (docs/operating.md, "Commands" and "Endpoints and
//! retries"; docs/tasks.md, "Task files"): invalid tasks, moves, the lock, dry
//! runs, retryable tasks and their attempt counts, the reachability check.

use std::path::PathBuf;

use agent_harness::agent::StopReason;
use agent_harness::drain::{NameError, RunOptions, RunOutcome, Tally};
use agent_harness::records::Status;
use serde_json::{Value, json};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::common::fake_noteworx::{FakeNoteworx, note};
use crate::common::*;

/// Where the attempt counts of tasks tried again are kept.
fn attempts_file(project: &Project) -> PathBuf {
    project.root().join("tasks/.agent-harness-attempts.json")
}

/// A run that finished with these counts, and nothing else to report.
fn finished(succeeded: usize, failed: usize, retry_later: usize) -> RunOutcome {
    RunOutcome::Finished(Tally {
        succeeded,
        failed,
        retry_later,
        ..Tally::default()
    })
}

/// Each invalid task: its name, its bytes, part of the reason it fails with.
const INVALID_TASKS: &[(&str, &[u8], &str)] = &[
    (
        "a-unknown-key",
        b"+++\nmax_turnz = 3\n+++\nbody",
        "line 2: frontmatter: max_turnz: unknown key (expected one of max_turns,",
    ),
    (
        "b-wrong-type",
        b"+++\nmax_turns = \"many\"\n+++\nbody",
        "line 2: frontmatter: max_turns: expected an integer, found the string \"many\"",
    ),
    (
        "c-unknown-tool",
        b"+++\ntools = [\"shell\"]\n+++\nbody",
        "frontmatter: \"shell\" is not a tool (tools: webfetch, noteworx_list_notes,",
    ),
    ("d-unclosed", b"+++\nmax_turns = 3\nbody", "never closed"),
    (
        "e-empty",
        b"+++\nmax_turns = 3\n+++\n \n\t\n",
        "the task body is empty",
    ),
    ("f-not-utf8", b"caf\xe9\n", "not valid UTF-8"),
    (
        "g-zero-turns",
        b"+++\nmax_turns = 0\n+++\nbody",
        "line 2: frontmatter: max_turns = 0 is below its minimum, 1",
    ),
];

/// The [`INVALID_TASKS`], one over 1 MiB (`h-too-big`) and a valid task
/// (`z-good`) in the inbox: the scene and its run's outcome.
async fn ran_invalid_tasks_and_a_valid_one() -> (Scene, RunOutcome) {
    let scene = scenario()
        .answers(&["fine"])
        .task("z-good", "A valid task.")
        .config("[tools.webfetch]\nenabled = true")
        .build()
        .await;
    for (name, text, _) in INVALID_TASKS {
        std::fs::write(scene.root().join(format!("tasks/inbox/{name}.md")), text).unwrap();
    }
    let too_big = vec![b'x'; 1024 * 1024 + 1];
    std::fs::write(scene.root().join("tasks/inbox/h-too-big.md"), too_big).unwrap();
    let outcome = scene.run().await;
    (scene, outcome)
}

#[tokio::test]
async fn every_invalid_task_goes_to_failed_with_its_reason() {
    let (scene, _) = ran_invalid_tasks_and_a_valid_one().await;

    for (name, _, reason) in INVALID_TASKS {
        let s = scene.summary(name);
        assert_eq!(
            (s.status, s.stop_reason, s.retryable, s.turns),
            (Status::Failed, StopReason::InvalidTask, false, 0),
            "{name}"
        );
        let error = s.error.unwrap();
        assert!(error.contains(reason), "{name}: {error}");
        // The reason names the file.
        assert_contains(&error, &format!("{name}.md"));
    }
    assert!(scene.summary("h-too-big").error.unwrap().contains("1 MiB"));
}

#[tokio::test]
async fn invalid_tasks_do_not_stop_the_valid_ones() {
    let (scene, outcome) = ran_invalid_tasks_and_a_valid_one().await;

    assert_eq!(outcome, finished(1, 8, 0));
    assert_eq!(outcome.exit_code(), 1);
    assert_eq!(scene.done(), [format!("{RUN_ID}-z-good.md")]);
    assert_eq!(scene.failed().len(), 8);
    assert!(scene.inbox().is_empty());
    // Only the valid task called the model.
    assert_eq!(scene.requests().await.len(), 1);
}

#[tokio::test]
async fn tasks_run_oldest_file_name_first() {
    let s = scenario()
        .replies(vec![final_answer("one")])
        .task("b", "task b")
        .task("c", "task c")
        .task("a", "task a")
        .ran()
        .await;

    let order: Vec<String> = s
        .requests()
        .await
        .iter()
        .map(|r| messages(r)[1].content.as_str().to_string())
        .collect();
    assert_eq!(order, ["task a", "task b", "task c"]);
}

#[tokio::test]
async fn a_second_run_while_the_lock_is_held_does_nothing() {
    let s = scenario()
        .replies(vec![final_answer("x")])
        .task("t", "hi")
        .build()
        .await;
    let _held = agent_harness::state::RunLock::try_acquire(&s.cfg().paths.state_dir())
        .unwrap()
        .unwrap();

    let outcome = s.run().await;

    assert_eq!(outcome, RunOutcome::Locked { wanted: None });
    assert_eq!(outcome.exit_code(), 0);
    assert_eq!(s.inbox(), ["t.md"]);
    assert!(s.requests().await.is_empty());
}

/// Tasks `a` and `b` against a closed port, each run's failures reported
/// to a hook: the scene and the hook.
async fn unreachable_with_a_hook() -> (Scene, MockServer) {
    let hook = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(200))
        .mount(&hook)
        .await;
    let hook_url = format!("[notify]\non_failure_url = \"{}/hook\"\n", hook.uri());
    let s = offline()
        .config(&hook_url)
        .task("a", "one")
        .task("b", "two")
        .build()
        .await;
    (s, hook)
}

/// The bytes of the inbox's tasks `a` and `b`.
fn inbox_bytes(s: &Scene) -> Vec<Vec<u8>> {
    ["a", "b"]
        .iter()
        .map(|n| std::fs::read(s.root().join(format!("tasks/inbox/{n}.md"))).unwrap())
        .collect()
}

#[tokio::test]
async fn an_unreachable_endpoint_leaves_every_task_untouched_and_exits_75() {
    let (s, _hook) = unreachable_with_a_hook().await;
    let before = inbox_bytes(&s);

    let outcome = s.run().await;

    let RunOutcome::Unreachable { why, left: 2 } = &outcome else {
        panic!("{outcome:?}")
    };
    assert_contains(why, "127.0.0.1:9");
    assert_contains(why, "is llama-server");
    assert_eq!(outcome.exit_code(), 75);
    assert_eq!(s.inbox(), ["a.md", "b.md"]);
    assert_eq!(inbox_bytes(&s), before);
    for task in ["a", "b"] {
        let records = s.root().join("logs").join(task);
        assert!(!records.exists(), "no records for tasks never started");
    }
    assert!(!attempts_file(&s).exists());
}

/// What the operator reads the next morning counts them as waiting.
#[tokio::test]
async fn runs_that_find_the_endpoint_unreachable_report_the_tasks_as_waiting() {
    let (s, hook) = unreachable_with_a_hook().await;
    s.run().await;

    let out = s.binary_async(&["run"]).await;
    assert_eq!(out.status.code(), Some(75));
    assert_contains(stderr(&out), "no task was touched (2 left in the inbox)");
    let status = stdout(&s.binary_async(&["status"]).await);
    assert_contains(
        &status,
        "exit 75: 0 succeeded, 0 failed, 2 left in the inbox",
    );
    // Each run's failure report (the first run, and the binary's) says so.
    let posted = hook.received_requests().await.unwrap();
    assert!(!posted.is_empty());
    for p in &posted {
        let report: Value = serde_json::from_slice(&p.body).unwrap();
        assert_eq!(report["left_in_inbox"], 2, "{report}");
    }
}

/// The attempt counts kept from earlier runs: `gone`, no longer in the
/// inbox, and `t`.
const KEPT_COUNTS: &str = r#"{"gone": 2, "t": 1}"#;

/// Task `t` against an endpoint that stays busy (503), up to 3 attempts,
/// with the [`KEPT_COUNTS`].
async fn busy_with_counts_kept() -> Scene {
    let down = ResponseTemplate::new(503).set_body_json(json!({"error": {"message": "busy"}}));
    let s = scenario()
        .script(vec![down])
        .task("t", "hi")
        .config("[limits]\nmax_attempts = 3")
        .build()
        .await;
    std::fs::write(attempts_file(&s), KEPT_COUNTS).unwrap();
    s
}

#[tokio::test]
async fn a_dry_run_changes_no_attempt_count() {
    let s = busy_with_counts_kept().await;

    let dry = s.run_with(run_options(1, true)).await;

    assert_eq!(dry.exit_code(), 75);
    let kept = std::fs::read_to_string(attempts_file(&s)).unwrap();
    assert_eq!(kept, KEPT_COUNTS, "a dry run changes nothing");
}

#[tokio::test]
async fn counts_of_tasks_taken_out_of_the_inbox_are_forgotten() {
    let s = busy_with_counts_kept().await;

    s.run().await;
    // Task gone is forgotten; t counted its attempt.
    assert_eq!(attempt_counts(&s), json!({"t": 2}));
    // A task put back under a forgotten name starts from zero.
    s.task("gone", "back");
    s.run().await;
    // Task t reached max_attempts; gone starts afresh.
    assert_eq!(attempt_counts(&s), json!({"gone": 1}));
    assert_eq!(s.inbox(), ["gone.md"]);
    assert!(s.failed()[0].ends_with("-t.md"), "{:?}", s.failed());
}

/// Task `t` against an endpoint that stays down (503, loading), up to 2
/// attempts.
async fn down_for_two_attempts() -> Scene {
    let down = ResponseTemplate::new(503)
        .set_body_json(json!({"error": {"code": 503, "message": "Loading model"}}));
    scenario()
        .script(vec![down])
        .task("t", "hi")
        .config("[limits]\nmax_attempts = 2")
        .build()
        .await
}

#[tokio::test]
async fn an_endpoint_that_stays_down_mid_run_keeps_the_task_for_the_next_run() {
    let scene = down_for_two_attempts().await;

    let first = scene.run().await;

    assert_eq!(first, finished(0, 0, 1));
    assert_eq!(first.exit_code(), 75);
    assert_eq!(scene.inbox(), ["t.md"]);
    let s = scene.summary("t");
    assert_eq!(
        (s.status, s.stop_reason, s.retryable, s.attempt),
        (Status::Failed, StopReason::EndpointError, true, 1)
    );
    assert_contains(s.error.unwrap(), "tried again (attempt 1 of 2)");
}

#[tokio::test]
async fn a_task_kept_for_the_next_run_has_its_records_and_its_attempt_counted() {
    let scene = down_for_two_attempts().await;

    scene.run().await;

    // One line per attempt: the first and three retries.
    assert_eq!(scene.conversation("t").len(), 4);
    assert_eq!(attempt_counts(&scene), json!({"t": 1}));
    assert_eq!(attempt_runs(&scene, "t"), [RUN_ID]);
    let task = std::fs::read_to_string(scene.root().join("tasks/inbox/t.md")).unwrap();
    assert_eq!(task, "hi", "the task file is never written to");
}

#[tokio::test]
async fn an_endpoint_still_down_at_max_attempts_fails_the_task() {
    let scene = down_for_two_attempts().await;
    scene.run().await;

    let second = scene.run().await;

    assert_eq!(second, finished(0, 1, 0));
    assert_eq!(second.exit_code(), 1);
    let s = scene.summary_in(&scene.root().join(format!("logs/t/{RUN_ID}-2")));
    assert_eq!((s.retryable, s.attempt), (false, 2));
    assert_contains(s.error.unwrap(), "gave up after 2 attempts");
    assert_eq!(scene.failed(), [format!("{RUN_ID}-2-t.md")]);
    // The count goes with the task.
    assert!(!attempts_file(&scene).exists());
}

#[tokio::test]
async fn a_rejected_request_is_final_at_once() {
    let scene = scenario()
        .script(vec![ResponseTemplate::new(422).set_body_json(
            json!({"error": {"message": "tools[0]: unknown field"}}),
        )])
        .task("t", "hi")
        .build()
        .await;

    scene.run().await;

    let s = scene.summary("t");
    assert_eq!(
        (s.stop_reason, s.retryable),
        (StopReason::EndpointError, false)
    );
    assert_eq!(
        s.error.as_deref(),
        Some("the endpoint rejected the request (HTTP 422): tools[0]: unknown field")
    );
    assert_eq!(scene.requests().await.len(), 1, "a 422 is not retried");
    assert_eq!(scene.failed().len(), 1);
}

/// Note `a`, and task `t` whose model attaches an idea to the note `slug`:
/// the notes service and the scene.
async fn attaching_an_idea_to(slug: &str) -> (FakeNoteworx, Scene) {
    let notes = FakeNoteworx::start(vec![note("a", "A", &[], "text")]).await;
    let attach = json!({"slug": slug, "filename": "s.md", "content": "Idea"});
    let scene = notes_task(&notes)
        .calls(vec![("noteworx_create_attachment", attach)], "attached")
        .build()
        .await;
    (notes, scene)
}

/// A dry run reads as a live run does before it would write: an attachment
/// on a note that does not exist is the same error, and nothing is sent.
#[tokio::test]
async fn a_dry_run_attachment_on_a_missing_note_is_the_error_a_live_run_gets() {
    let (notes, scene) = attaching_an_idea_to("Serving small models").await;

    scene.run_with(run_options(1, true)).await;

    let line = &scene.tool_lines("t")[0];
    assert!(line.is_error, "{}", line.result);
    assert_starts(&line.result, "No note with slug \"Serving small models\"");
    let calls = notes.calls().await;
    assert!(!calls.is_empty(), "the note was looked for");
    assert!(calls.iter().all(|(m, _)| m == "GET"), "{calls:?}");
}

#[tokio::test]
async fn dry_run_moves_nothing_counts_nothing_and_writes_nothing_remote() {
    let (notes, scene) = attaching_an_idea_to("a").await;

    let outcome = scene.run_with(run_options(1, true)).await;

    assert_eq!(outcome.exit_code(), 0);
    assert_eq!(scene.inbox(), ["t.md"]);
    assert!(scene.done().is_empty());
    assert!(notes.attachments("a").is_empty());
    let calls = notes.calls().await;
    assert!(!calls.is_empty(), "the dry run read what a live one reads");
    let writes: Vec<_> = calls.iter().filter(|(m, _)| m != "GET").collect();
    assert!(writes.is_empty(), "no write reached noteworx: {calls:?}");
    assert!(!attempts_file(&scene).exists());
}

#[tokio::test]
async fn a_dry_run_records_the_write_it_would_make_as_an_intent() {
    let (_notes, scene) = attaching_an_idea_to("a").await;

    scene.run_with(run_options(1, true)).await;

    let s = scene.summary("t");
    assert!(s.dry_run);
    assert_eq!(s.status, Status::Succeeded);
    let line = &scene.tool_lines("t")[0];
    assert_starts(
        &line.result,
        "Dry run: the attachment s.md on note a counts as created (nothing was written)",
    );
    let detail: Value = serde_json::from_str(line.detail.as_ref().unwrap().get()).unwrap();
    let intent = &detail["intent"];
    assert_eq!(intent["method"], "POST");
    assert_eq!(intent["path"], "/api/notes/a/attachments");
    let content = intent["body"]["content"].as_str().unwrap();
    assert_starts(content, "---\nagent: noteworx-agent-harness\n");
}

/// Tasks `one` and `two` in the inbox.
async fn two_tasks() -> Scene {
    scenario()
        .answers(&["x"])
        .task("one", "1")
        .task("two", "2")
        .build()
        .await
}

/// Runs only the inbox entry `name`, as `run-task` does.
async fn run_only(s: &Scene, name: &str) -> anyhow::Result<RunOutcome> {
    let opts = RunOptions {
        only: Some(name.into()),
        ..run_options(1, false)
    };
    agent_harness::app::run_inbox(&s.cfg(), &s.deps(), &opts).await
}

#[tokio::test]
async fn run_task_runs_only_the_named_entry() {
    let s = two_tasks().await;

    let outcome = run_only(&s, "two").await.unwrap();

    assert_eq!(outcome.exit_code(), 0);
    assert_eq!(s.inbox(), ["one.md"]);
}

#[tokio::test]
async fn run_task_refuses_paths_and_missing_names_and_counts_no_run() {
    let s = two_tasks().await;
    run_only(&s, "two").await.unwrap();
    let figures = s.metrics();

    for bad in ["../one", "a/b", "missing"] {
        let e = run_only(&s, bad).await.unwrap_err();
        assert!(e.downcast_ref::<NameError>().is_some(), "{bad}: {e}");
    }
    assert_eq!(s.inbox(), ["one.md"]);
    // A name typed wrong at a prompt is no run of the setup: the figures stay.
    assert_eq!(s.metrics(), figures);
}

/// Six tasks `t0`..`t5` reading a note, each reply slow, and a broken
/// task `t9-broken`: the notes service and the scene.
async fn six_slow_tasks_and_a_broken_one() -> (FakeNoteworx, Scene) {
    let slow = |body| ok(body).set_delay(std::time::Duration::from_millis(300));
    let notes = FakeNoteworx::start(vec![note("n1", "One", &[], "first note")]).await;
    let read = call("noteworx_read_note", json!({"slug": "n1"}));
    let mut arranged = scenario()
        .by_progress(vec![slow(read), slow(final_answer("read it"))])
        .notes(&notes);
    for i in 0..6 {
        arranged = arranged.task(&format!("t{i}"), &format!("Task number {i}."));
    }
    let s = arranged
        .task("t9-broken", "+++\nmax_turns = 0\n+++\nNever runs.")
        .build()
        .await;
    (notes, s)
}

#[tokio::test(flavor = "multi_thread")]
async fn four_tasks_run_at_once_and_an_invalid_one_fails_alone() {
    let (_notes, s) = six_slow_tasks_and_a_broken_one().await;

    let outcome = s.run_with(run_options(4, false)).await;

    assert_eq!(outcome, finished(6, 1, 0));
    // Four tasks were in flight at once: the first four requests are four
    // different tasks' first turns, before any second turn.
    let requests = s.requests().await;
    let asked: Vec<_> = requests[..4].iter().map(messages).collect();
    let turns: Vec<_> = asked.iter().map(Vec::len).collect();
    let first_four: Vec<_> = asked.iter().map(|m| m[1].content.clone()).collect();
    assert_eq!(turns, [2, 2, 2, 2], "{first_four:?}");
    let mut distinct = first_four.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "{first_four:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_tasks_keep_their_own_records() {
    let (_notes, s) = six_slow_tasks_and_a_broken_one().await;

    s.run_with(run_options(4, false)).await;

    for i in 0..6 {
        let task = format!("t{i}");
        let lines = s.conversation(&task);
        assert_eq!(lines.len(), 2, "{task}");
        for line in &lines {
            let asked = &messages(&line.request)[1].content;
            assert_eq!(
                asked,
                &format!("Task number {i}."),
                "{task}: only its own requests"
            );
        }
        assert_eq!(s.tool_lines(&task).len(), 1, "{task}");
        assert_eq!(s.summary(&task).final_answer.as_deref(), Some("read it"));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_task_among_concurrent_ones_disturbs_no_neighbour() {
    let (_notes, s) = six_slow_tasks_and_a_broken_one().await;

    s.run_with(run_options(4, false)).await;

    for i in 0..6 {
        let log = s.run_log(&format!("t{i}"));
        assert_contains(&log, &format!("task t{i} started"));
        assert_lacks(&log, "t9-broken");
    }
    assert_eq!(s.summary("t9-broken").stop_reason, StopReason::InvalidTask);
}

#[tokio::test]
async fn yaml_frontmatter_is_an_invalid_task_not_a_prompt() {
    let scene = scenario()
        .replies(vec![final_answer("unused")])
        .task("t", "---\nmax_turns: 2\ntools: [webfetch]\n---\nDo it.\n")
        .build()
        .await;

    assert_eq!(scene.run().await.exit_code(), 1);

    let s = scene.summary("t");
    assert_eq!(s.stop_reason, StopReason::InvalidTask);
    assert!(
        s.error
            .as_deref()
            .unwrap()
            .contains("frontmatter must be TOML between two +++ lines"),
        "{:?}",
        s.error
    );
    assert_eq!(scene.failed().len(), 1);
    assert!(scene.requests().await.is_empty(), "the model never saw it");
}
