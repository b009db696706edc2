//! Names, ids and files from outside (SPEC §12.5, §12.9): task names that
//! do not fit, slugs and ids that would climb out of their route, links
//! and FIFOs where a file is expected, and records private whatever the
//! umask.

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
    let llm = FakeLlm::replies(vec![final_answer("done")]).await;
    let project = Project::new();
    let name = "é".repeat(120);
    project.task(&name, "A task with a long name.");
    project.write_config(&llm.base_url(), "");

    let out = run_binary(&project, &["run"]);

    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(project.inbox().is_empty());
    let done = project.done();
    assert_eq!(done.len(), 1);
    assert!(done[0].len() <= 255, "{}", done[0].len());
    assert!(
        done[0].contains('~') && done[0].ends_with(".md"),
        "{}",
        done[0]
    );
    let again = run_binary(&project, &["run"]);
    assert_eq!(again.status.code(), Some(0));
    assert_eq!(llm.requests().await.len(), 1, "it ran once");
    let listed = run_binary(&project, &["runs", "--json"]);
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
    let (_llm, project, cfg) = arrange(
        vec![
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
        ],
        &[("t", "Try to escape.")],
        &notes.config_section(),
    )
    .await;

    run_all(&cfg).await;

    assert!(notes.calls().await.is_empty(), "{:?}", notes.calls().await);
    let lines = project.tool_lines("t");
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
    let project = Project::new();
    project.task("t", "Hello.");
    let path = project.root().join("agent.toml");
    std::fs::write(&path, rp.config_sections()).unwrap();
    let cfg = agent_harness::config::Config::load(&path, &test_env).unwrap();

    let outcome = run_all(&cfg).await;

    assert_eq!(outcome.exit_code(), 75);
    let s = project.summary("t");
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
    let llm = FakeLlm::replies(vec![final_answer("fine")]).await;
    let project = Project::new();
    let secret = project.root().join("private.txt");
    std::fs::write(&secret, "my private notes").unwrap();
    std::os::unix::fs::symlink(&secret, project.root().join("tasks/inbox/a-link.md")).unwrap();
    let fifo = project.root().join("tasks/inbox/b-fifo.md");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    project.task("c-real", "A real task.");
    let cfg = project.config(&llm.base_url(), "");

    let outcome = run_all(&cfg).await;

    assert_eq!(
        outcome,
        RunOutcome::Finished(Tally {
            succeeded: 1,
            failed: 2,
            ..Tally::default()
        })
    );
    for (task, what) in [("a-link", "a symbolic link"), ("b-fifo", "a FIFO")] {
        let s = project.summary(task);
        assert_eq!(s.stop_reason, StopReason::InvalidTask);
        assert!(
            s.error
                .unwrap()
                .contains(&format!("not a regular file ({what})")),
            "{task}"
        );
    }
    let moved = project
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
    assert_eq!(llm.requests().await.len(), 1, "only the real task ran");
    assert!(!project.all_records().contains("my private notes"));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_output_schema_that_is_a_fifo_or_a_device_is_refused_without_reading_it() {
    let llm = FakeLlm::replies(vec![final_answer("fine")]).await;
    let project = Project::new();
    let fifo = project.root().join("fifo.json");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    project.task("a-fifo", "+++\noutput_schema = \"fifo.json\"\n+++\nCount.");
    project.task("b-zero", "+++\noutput_schema = \"/dev/zero\"\n+++\nCount.");
    project.task("c-real", "A real task.");
    project.write_config(&llm.base_url(), "");

    let check = run_binary_within(&project, &["check"], Duration::from_secs(60));
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

    let run = run_binary_within(&project, &["run"], Duration::from_secs(60));
    assert_eq!(
        run.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(project.failed().len(), 2, "{:?}", project.failed());
    assert!(project.done()[0].ends_with("-c-real.md"));
    let run = std::fs::read_dir(project.root().join("logs/b-zero"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(
        project.summary_in(&run.path()).stop_reason,
        StopReason::InvalidTask
    );
    assert_eq!(llm.requests().await.len(), 1, "only the real task ran");

    // A profile's schema is read when the config is: the config is refused.
    let path = project.write_config(
        &llm.base_url(),
        "[agents.x]\nrole_prompt = \"Hi.\"\noutput_schema = \"/dev/zero\"\n",
    );
    let e = agent_harness::config::Config::load(&path, &test_env).unwrap_err();
    assert!(e.message.contains("not a regular file (a device)"), "{e}");
}
// -- 9. Files --------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn records_are_private_under_a_permissive_umask() {
    let llm = FakeLlm::replies(vec![final_answer("done")]).await;
    let project = Project::new();
    project.task("t", "Hello.");
    project.write_config(&llm.base_url(), "");
    let bin = assert_cmd::cargo::cargo_bin("agent-harness");

    let out = Command::new("sh")
        .args(["-c", "umask 022; exec \"$0\" run"])
        .arg(&bin)
        .current_dir(project.root())
        .env_remove("AGENT_HARNESS_CONFIG")
        .output()
        .unwrap();

    assert_eq!(out.status.code(), Some(0));
    let mode = |p: std::path::PathBuf| std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
    let dir = std::fs::read_dir(project.root().join("logs/t"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert_eq!(mode(dir.clone()), 0o700);
    assert_eq!(mode(project.root().join("logs/t")), 0o700);
    for f in [
        "conversation.jsonl",
        "tools.jsonl",
        "run.log",
        "summary.json",
    ] {
        assert_eq!(mode(dir.join(f)), 0o600, "{f}");
    }
}
