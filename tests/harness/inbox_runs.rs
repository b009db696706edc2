//! Draining the inbox (docs/operating.md, "Commands" and "Endpoints and
//! retries"; docs/tasks.md, "Task files"): invalid tasks, moves, the lock, dry
//! runs, retryable tasks and their attempt counts, the reachability check.

use agent_harness::agent::StopReason;
use agent_harness::drain::{RunOptions, RunOutcome, Tally};
use agent_harness::records::Status;
use serde_json::{Value, json};
use wiremock::ResponseTemplate;

use crate::common::fake_noteworx::{FakeNoteworx, note};
use crate::common::*;

#[tokio::test]
async fn every_invalid_task_goes_to_failed_with_its_reason_and_the_others_still_run() {
    let scene = scenario()
        .replies(vec![final_answer("fine")])
        .task("z-good", "A valid task.")
        .config("[tools.webfetch]\nenabled = true")
        .build()
        .await;
    let cases: &[(&str, &[u8], &str)] = &[
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
    for (name, text, _) in cases {
        std::fs::write(scene.root().join(format!("tasks/inbox/{name}.md")), text).unwrap();
    }
    std::fs::write(
        scene.root().join("tasks/inbox/h-too-big.md"),
        vec![b'x'; 1024 * 1024 + 1],
    )
    .unwrap();

    let outcome = scene.run().await;

    assert_eq!(
        outcome,
        RunOutcome::Finished(Tally {
            succeeded: 1,
            failed: 8,
            ..Tally::default()
        })
    );
    assert_eq!(outcome.exit_code(), 1);
    assert_eq!(scene.done(), [format!("{RUN_ID}-z-good.md")]);
    assert_eq!(scene.failed().len(), 8);
    assert!(scene.inbox().is_empty());
    for (name, _, reason) in cases {
        let s = scene.summary(name);
        assert_eq!(
            (s.status, s.stop_reason, s.retryable, s.turns),
            (Status::Failed, StopReason::InvalidTask, false, 0),
            "{name}"
        );
        let error = s.error.unwrap();
        assert!(error.contains(reason), "{name}: {error}");
        assert!(
            error.contains(&format!("{name}.md")),
            "the reason names the file: {error}"
        );
    }
    assert!(scene.summary("h-too-big").error.unwrap().contains("1 MiB"));
    assert_eq!(
        scene.requests().await.len(),
        1,
        "only the valid task called the model"
    );
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

#[tokio::test]
async fn an_unreachable_endpoint_leaves_every_task_untouched_and_exits_75() {
    let port = closed_port();
    let hook = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .respond_with(ResponseTemplate::new(200))
        .mount(&hook)
        .await;
    let s = scenario()
        .endpoint_at(&format!("http://127.0.0.1:{port}/v1"))
        .config(&format!(
            "[notify]\non_failure_url = \"{}/hook\"\n",
            hook.uri()
        ))
        .task("a", "one")
        .task("b", "two")
        .build()
        .await;
    let before: Vec<_> = ["a", "b"]
        .iter()
        .map(|n| std::fs::read(s.root().join(format!("tasks/inbox/{n}.md"))).unwrap())
        .collect();

    let outcome = s.run().await;

    let RunOutcome::Unreachable { why, left: 2 } = &outcome else {
        panic!("{outcome:?}")
    };
    assert!(
        why.contains(&format!("127.0.0.1:{port}")) && why.contains("is llama-server"),
        "{why}"
    );
    assert_eq!(outcome.exit_code(), 75);
    assert_eq!(s.inbox(), ["a.md", "b.md"]);
    let after: Vec<_> = ["a", "b"]
        .iter()
        .map(|n| std::fs::read(s.root().join(format!("tasks/inbox/{n}.md"))).unwrap())
        .collect();
    assert_eq!(before, after);
    for task in ["a", "b"] {
        assert!(
            !s.root().join("logs").join(task).exists(),
            "no records for tasks never started"
        );
    }
    assert!(!s.root().join("tasks/.agent-harness-attempts.json").exists());

    // What the operator reads the next morning counts them as waiting.
    let out = s.binary_async(&["run"]).await;
    assert_eq!(out.status.code(), Some(75));
    assert_contains(stderr(&out), "no task was touched (2 left in the inbox)");
    let status = stdout(&s.binary_async(&["status"]).await);
    assert_contains(
        &status,
        "exit 75: 0 succeeded, 0 failed, 2 left in the inbox",
    );
    // Each run's failure report (the run above, and this one) says so.
    let posted = hook.received_requests().await.unwrap();
    assert!(!posted.is_empty());
    for p in &posted {
        let report: Value = serde_json::from_slice(&p.body).unwrap();
        assert_eq!(report["left_in_inbox"], 2, "{report}");
    }
}

#[tokio::test]
async fn counts_of_tasks_taken_out_of_the_inbox_are_forgotten() {
    let down = ResponseTemplate::new(503).set_body_json(json!({"error": {"message": "busy"}}));
    let s = scenario()
        .script(vec![down])
        .task("t", "hi")
        .config("[limits]\nmax_attempts = 3")
        .build()
        .await;
    let state = s.root().join("tasks/.agent-harness-attempts.json");
    std::fs::write(&state, r#"{"gone": 2, "t": 1}"#).unwrap();

    let dry = s.run_with(run_options(1, true)).await;
    assert_eq!(dry.exit_code(), 75);
    assert_eq!(
        std::fs::read_to_string(&state).unwrap(),
        r#"{"gone": 2, "t": 1}"#,
        "a dry run changes nothing"
    );

    s.run().await;
    assert_eq!(
        attempt_counts(&s),
        json!({"t": 2}),
        "gone is forgotten; t counted its attempt"
    );
    // A task put back under a forgotten name starts from zero.
    s.task("gone", "back");
    s.run().await;
    assert_eq!(
        attempt_counts(&s),
        json!({"gone": 1}),
        "t reached max_attempts; gone starts afresh"
    );
    assert_eq!(s.inbox(), ["gone.md"]);
    assert!(s.failed()[0].ends_with("-t.md"), "{:?}", s.failed());
}

#[tokio::test]
async fn an_endpoint_that_stays_down_mid_run_keeps_the_task_until_max_attempts() {
    let down = || {
        ResponseTemplate::new(503)
            .set_body_json(json!({"error": {"code": 503, "message": "Loading model"}}))
    };
    let scene = scenario()
        .script(vec![down()])
        .task("t", "hi")
        .config("[limits]\nmax_attempts = 2")
        .build()
        .await;

    let first = scene.run().await;
    assert_eq!(
        first,
        RunOutcome::Finished(Tally {
            retry_later: 1,
            ..Tally::default()
        })
    );
    assert_eq!(first.exit_code(), 75);
    assert_eq!(scene.inbox(), ["t.md"]);
    let s = scene.summary("t");
    assert_eq!(
        (s.status, s.stop_reason, s.retryable, s.attempt),
        (Status::Failed, StopReason::EndpointError, true, 1)
    );
    assert!(
        s.error
            .as_deref()
            .unwrap()
            .contains("tried again (attempt 1 of 2)"),
        "{:?}",
        s.error
    );
    assert_eq!(
        scene.conversation("t").len(),
        4,
        "one line per attempt: the first and three retries"
    );
    assert_eq!(attempt_counts(&scene), json!({"t": 1}));
    assert_eq!(attempt_runs(&scene, "t"), [RUN_ID]);
    assert_eq!(
        std::fs::read_to_string(scene.root().join("tasks/inbox/t.md")).unwrap(),
        "hi",
        "the task file is never written to"
    );

    let second = scene.run().await;
    assert_eq!(
        second,
        RunOutcome::Finished(Tally {
            failed: 1,
            ..Tally::default()
        })
    );
    assert_eq!(second.exit_code(), 1);
    let runs: Vec<_> = std::fs::read_dir(scene.root().join("logs/t"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    let latest = runs
        .iter()
        .find(|p| p.ends_with(format!("{RUN_ID}-2")))
        .unwrap();
    let s = scene.summary_in(latest);
    assert_eq!((s.retryable, s.attempt), (false, 2));
    assert!(
        s.error
            .as_deref()
            .unwrap()
            .contains("gave up after 2 attempts"),
        "{:?}",
        s.error
    );
    assert_eq!(scene.failed(), [format!("{RUN_ID}-2-t.md")]);
    assert!(
        !scene
            .root()
            .join("tasks/.agent-harness-attempts.json")
            .exists(),
        "the count goes with the task"
    );
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

/// A dry run reads as a live run does before it would write: an attachment
/// on a note that does not exist is the same error, and nothing is sent.
#[tokio::test]
async fn a_dry_run_attachment_on_a_missing_note_is_the_error_a_live_run_gets() {
    let notes = FakeNoteworx::start(vec![note("a", "A", &[], "text")]).await;
    let create = |slug: &str| {
        tool_calls(&[(
            "c1",
            "noteworx_create_attachment",
            json!({"slug": slug, "filename": "s.md", "content": "Idea"}),
        )])
    };
    let scene = scenario()
        .replies(vec![
            create("Serving small models"),
            final_answer("attached"),
        ])
        .task("t", "Attach an idea to a.")
        .notes(&notes)
        .build()
        .await;

    scene.run_with(run_options(1, true)).await;

    let line = &scene.tool_lines("t")[0];
    assert!(line.is_error, "{}", line.result);
    assert!(
        line.result
            .starts_with("No note with slug \"Serving small models\""),
        "{}",
        line.result
    );
    let calls = notes.calls().await;
    assert!(!calls.is_empty(), "the note was looked for");
    assert!(calls.iter().all(|(m, _)| m == "GET"), "{calls:?}");
}

#[tokio::test]
async fn dry_run_moves_nothing_counts_nothing_and_writes_nothing_remote() {
    let notes = FakeNoteworx::start(vec![note("a", "A", &[], "text")]).await;
    let scene = scenario()
        .replies(vec![
            tool_calls(&[(
                "c1",
                "noteworx_create_attachment",
                json!({"slug": "a", "filename": "s.md", "content": "Idea"}),
            )]),
            final_answer("attached"),
        ])
        .task("t", "Attach an idea to a.")
        .notes(&notes)
        .build()
        .await;

    let outcome = scene.run_with(run_options(1, true)).await;

    assert_eq!(outcome.exit_code(), 0);
    assert_eq!(scene.inbox(), ["t.md"]);
    assert!(scene.done().is_empty());
    assert!(notes.attachments("a").is_empty());
    let calls = notes.calls().await;
    assert!(!calls.is_empty(), "the dry run read what a live one reads");
    assert!(
        calls.iter().all(|(m, _)| m == "GET"),
        "no write reached noteworx: {calls:?}"
    );
    let s = scene.summary("t");
    assert!(s.dry_run);
    assert_eq!(s.status, Status::Succeeded);
    let line = &scene.tool_lines("t")[0];
    assert!(
        line.result.starts_with(
            "Dry run: the attachment s.md on note a counts as created (nothing was written)"
        ),
        "{}",
        line.result
    );
    let detail: Value = serde_json::from_str(line.detail.as_ref().unwrap().get()).unwrap();
    let intent = &detail["intent"];
    assert_eq!(intent["method"], "POST");
    assert_eq!(intent["path"], "/api/notes/a/attachments");
    assert!(
        intent["body"]["content"]
            .as_str()
            .unwrap()
            .starts_with("---\nagent: noteworx-agent-harness\n")
    );
    assert!(
        !scene
            .root()
            .join("tasks/.agent-harness-attempts.json")
            .exists()
    );
}

#[tokio::test]
async fn run_task_runs_only_the_named_entry_and_refuses_paths() {
    let s = scenario()
        .replies(vec![final_answer("x")])
        .task("one", "1")
        .task("two", "2")
        .build()
        .await;
    let cfg = s.cfg();
    let h = s.deps();

    let opts = |n: &str| RunOptions {
        only: Some(n.into()),
        ..run_options(1, false)
    };
    let outcome = agent_harness::app::run_inbox(&cfg, &h, &opts("two"))
        .await
        .unwrap();
    assert_eq!(outcome.exit_code(), 0);
    assert_eq!(s.inbox(), ["one.md"]);

    let metrics = s.root().join("logs/agent-harness.prom");
    let figures = std::fs::read_to_string(&metrics).unwrap();
    for bad in ["../one", "a/b", "missing"] {
        let e = agent_harness::app::run_inbox(&cfg, &h, &opts(bad))
            .await
            .unwrap_err();
        assert!(
            e.downcast_ref::<agent_harness::drain::NameError>()
                .is_some(),
            "{bad}: {e}"
        );
    }
    assert_eq!(s.inbox(), ["one.md"]);
    assert_eq!(
        std::fs::read_to_string(&metrics).unwrap(),
        figures,
        "a name typed wrong at a prompt is no run of the setup: the figures stay"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_tasks_keep_their_own_records_and_a_failure_disturbs_no_neighbour() {
    let slow = |body| ok(body).set_delay(std::time::Duration::from_millis(300));
    let notes = FakeNoteworx::start(vec![note("n1", "One", &[], "first note")]).await;
    let mut arranged = scenario()
        .by_progress(vec![
            slow(tool_calls(&[(
                "c1",
                "noteworx_read_note",
                json!({"slug": "n1"}),
            )])),
            slow(final_answer("read it")),
        ])
        .notes(&notes);
    for i in 0..6 {
        arranged = arranged.task(&format!("t{i}"), &format!("Task number {i}."));
    }
    let s = arranged
        .task("t9-broken", "+++\nmax_turns = 0\n+++\nNever runs.")
        .build()
        .await;

    let outcome = s.run_with(run_options(4, false)).await;

    assert_eq!(
        outcome,
        RunOutcome::Finished(Tally {
            succeeded: 6,
            failed: 1,
            ..Tally::default()
        })
    );
    // Four tasks were in flight at once: the first four requests are four
    // different tasks' first turns, before any second turn.
    let requests = s.requests().await;
    let first_four: Vec<String> = requests[..4]
        .iter()
        .map(|r| messages(r)[1].content.clone())
        .collect();
    assert!(
        requests[..4].iter().all(|r| messages(r).len() == 2),
        "{first_four:?}"
    );
    let mut distinct = first_four.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "{first_four:?}");

    for i in 0..6 {
        let task = format!("t{i}");
        let lines = s.conversation(&task);
        assert_eq!(lines.len(), 2, "{task}");
        for line in &lines {
            assert_eq!(
                messages(&line.request)[1].content,
                format!("Task number {i}."),
                "{task}: only its own requests"
            );
        }
        assert_eq!(s.tool_lines(&task).len(), 1, "{task}");
        let log = s.run_log(&task);
        assert!(log.contains(&format!("task {task} started")), "{log}");
        assert!(!log.contains("t9-broken"), "{log}");
        assert_eq!(s.summary(&task).final_answer.as_deref(), Some("read it"));
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
