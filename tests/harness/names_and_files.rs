//! Names, ids and files from outside (docs/untrusted-input.md): task names that
//! do not fit, slugs and ids that would climb out of their route, links and
//! FIFOs where a file is expected, and records private whatever the umask.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use agent_harness::agent::StopReason;
use agent_harness::drain::{RunOutcome, Tally};
use serde_json::{Value, json};

use crate::common::fake_noteworx::{FakeNoteworx, note};
use crate::common::fake_runpod::{FakeRunpod, job};
use crate::common::*;

// -- 5. Names and ids -------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn a_task_name_of_240_bytes_runs_and_moves_under_a_shortened_name_once() {
    let name = "é".repeat(120);
    let s = scenario()
        .replies(vec![final_answer("done")])
        .task(&name, "A task with a long name.")
        .build()
        .await;

    let out = s.binary(&["run"]);

    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(s.inbox().is_empty());
    let done = s.done();
    assert_eq!(done.len(), 1);
    assert!(done[0].len() <= 255, "{}", done[0].len());
    assert!(
        done[0].contains('~') && done[0].ends_with(".md"),
        "{}",
        done[0]
    );
    let again = s.binary(&["run"]);
    assert_eq!(again.status.code(), Some(0));
    assert_eq!(s.requests().await.len(), 1, "it ran once");
    let listed = s.binary(&["runs", "--json"]);
    let runs: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(
        runs[0]["task"],
        Value::from(name),
        "the summary keeps the full name"
    );
}

#[tokio::test]
async fn slugs_and_ids_that_would_climb_out_of_their_route_send_no_request() {
    let notes = FakeNoteworx::start(vec![note("n", "N", &[], "x")]).await;
    let s = scenario()
        .replies(vec![
            tool_calls(&[
                ("c1", "noteworx_read_note", json!({"slug": ".."})),
                (
                    "c2",
                    "noteworx_create_attachment",
                    json!({"slug": "..", "filename": "x.md", "content": "spam"}),
                ),
                (
                    "c3",
                    "noteworx_read_attachment",
                    json!({"slug": "n", "attachment_id": "."}),
                ),
                ("c4", "noteworx_list_attachments", json!({"slug": "n\u{0}"})),
            ]),
            final_answer("done"),
        ])
        .task("t", "Try to escape.")
        .notes(&notes)
        .build()
        .await;

    s.run().await;

    assert!(notes.calls().await.is_empty(), "{:?}", notes.calls().await);
    let lines = s.tool_lines("t");
    assert_eq!(lines.len(), 4);
    for l in &lines {
        assert!(l.is_error && !l.executed, "{l:?}");
        assert!(l.result.contains("must be a slug or id"), "{}", l.result);
    }
}

#[tokio::test]
async fn a_runpod_job_id_that_climbs_the_url_is_never_polled() {
    let rp = FakeRunpod::start(
        vec![ok(job("../../x/purge-queue", "IN_QUEUE"))],
        vec![ok(job("x", "COMPLETED"))],
        false,
    )
    .await;
    let scene = scenario()
        .endpoint_at(&rp.server.uri())
        .config_file(&rp.config_sections())
        .task("t", "Hello.")
        .build()
        .await;

    let outcome = scene.run().await;

    assert_eq!(outcome.exit_code(), 75);
    let s = scene.summary("t");
    assert_eq!(s.stop_reason, StopReason::EndpointError);
    assert!(s.error.unwrap().contains("malformed job id"));
    let calls = rp.calls().await;
    assert!(!calls.is_empty());
    assert!(
        calls.iter().all(
            |(m, p)| (m.as_str(), p.as_str()) == ("POST", "/v2/ep123/runsync")
                || (m.as_str(), p.as_str()) == ("GET", "/v2/ep123/health")
        ),
        "only the reachability check and /runsync: {calls:?}"
    );
}

#[tokio::test]
async fn a_symlink_or_fifo_in_the_inbox_is_invalid_and_its_target_never_read() {
    let scene = scenario()
        .replies(vec![final_answer("fine")])
        .task("c-real", "A real task.")
        .build()
        .await;
    let secret = scene.root().join("private.txt");
    std::fs::write(&secret, "my private notes").unwrap();
    std::os::unix::fs::symlink(&secret, scene.root().join("tasks/inbox/a-link.md")).unwrap();
    let fifo = scene.root().join("tasks/inbox/b-fifo.md");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );

    let outcome = scene.run().await;

    assert_eq!(
        outcome,
        RunOutcome::Finished(Tally {
            succeeded: 1,
            failed: 2,
            ..Tally::default()
        })
    );
    for (task, what) in [("a-link", "a symbolic link"), ("b-fifo", "a FIFO")] {
        let s = scene.summary(task);
        assert_eq!(s.stop_reason, StopReason::InvalidTask);
        assert!(
            s.error
                .unwrap()
                .contains(&format!("not a regular file ({what})")),
            "{task}"
        );
    }
    let moved = scene
        .root()
        .join(format!("tasks/failed/{RUN_ID}-a-link.md"));
    assert!(
        std::fs::symlink_metadata(&moved)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read_to_string(&secret).unwrap(),
        "my private notes"
    );
    assert_eq!(scene.requests().await.len(), 1, "only the real task ran");
    assert!(!scene.all_records().contains("my private notes"));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_output_schema_that_is_a_fifo_or_a_device_is_refused_without_reading_it() {
    let s = scenario()
        .replies(vec![final_answer("fine")])
        .task("a-fifo", "+++\noutput_schema = \"fifo.json\"\n+++\nCount.")
        .task("b-zero", "+++\noutput_schema = \"/dev/zero\"\n+++\nCount.")
        .task("c-real", "A real task.")
        .build()
        .await;
    let fifo = s.root().join("fifo.json");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );

    let check = run_binary_within(&s, &["check"], Duration::from_secs(60));
    assert_eq!(check.status.code(), Some(1));
    let text = String::from_utf8_lossy(&check.stdout);
    for (task, what) in [("a-fifo", "a FIFO"), ("b-zero", "a device")] {
        assert!(
            text.contains(&format!(
                "{task}.md: frontmatter: output_schema: cannot read the output schema"
            )) && text.contains(&format!("not a regular file ({what}); it was not read")),
            "{text}"
        );
    }

    let run = run_binary_within(&s, &["run"], Duration::from_secs(60));
    assert_eq!(
        run.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(s.failed().len(), 2, "{:?}", s.failed());
    assert!(s.done()[0].ends_with("-c-real.md"));
    let run = std::fs::read_dir(s.root().join("logs/b-zero"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(
        s.summary_in(&run.path()).stop_reason,
        StopReason::InvalidTask
    );
    assert_eq!(s.requests().await.len(), 1, "only the real task ran");

    // A profile's schema is read when the config is: the config is refused.
    let path = s.write_config(
        &s.llm().base_url(),
        "[agents.x]\nrole_prompt = \"Hi.\"\noutput_schema = \"/dev/zero\"\n",
    );
    let e = agent_harness::config::Config::load(&path, &test_env).unwrap_err();
    assert!(e.message.contains("not a regular file (a device)"), "{e}");
}
// -- 9. Files --------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn records_are_private_under_a_permissive_umask() {
    let s = scenario()
        .replies(vec![final_answer("done")])
        .task("t", "Hello.")
        .build()
        .await;
    let bin = assert_cmd::cargo::cargo_bin("agent-harness");

    let out = Command::new("sh")
        .args(["-c", "umask 022; exec \"$0\" run"])
        .arg(&bin)
        .current_dir(s.root())
        .env_remove("AGENT_HARNESS_CONFIG")
        .output()
        .unwrap();

    assert_eq!(out.status.code(), Some(0));
    let mode = |p: std::path::PathBuf| std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
    let dir = std::fs::read_dir(s.root().join("logs/t"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert_eq!(mode(dir.clone()), 0o700);
    assert_eq!(mode(s.root().join("logs/t")), 0o700);
    for f in [
        "conversation.jsonl",
        "tools.jsonl",
        "run.log",
        "summary.json",
    ] {
        assert_eq!(mode(dir.join(f)), 0o600, "{f}");
    }
}
