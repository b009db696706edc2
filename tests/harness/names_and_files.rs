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
        .answers(&["done"])
        .task(&name, "A task with a long name.")
        .build()
        .await;

    let out = s.binary(&["run"]);

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(s.inbox().is_empty());
    let done = s.done();
    assert_eq!(done.len(), 1);
    assert!(done[0].len() <= 255, "{}", done[0].len());
    assert_contains(&done[0], "~");
    assert!(done[0].ends_with(".md"), "{}", done[0]);
    assert_eq!(s.binary(&["run"]).status.code(), Some(0));
    assert_eq!(s.requests().await.len(), 1, "it ran once");
    let listed = s.binary(&["runs", "--json"]);
    let runs: Value = serde_json::from_slice(&listed.stdout).unwrap();
    // The summary keeps the full name.
    assert_eq!(runs[0]["task"], Value::from(name));
}

#[tokio::test]
async fn slugs_and_ids_that_would_climb_out_of_their_route_send_no_request() {
    let notes = FakeNoteworx::start(vec![note("n", "N", &[], "x")]).await;
    let attach = json!({"slug": "..", "filename": "x.md", "content": "spam"});
    let read = json!({"slug": "n", "attachment_id": "."});
    let escapes = tool_calls(&[
        ("c1", "noteworx_read_note", json!({"slug": ".."})),
        ("c2", "noteworx_create_attachment", attach),
        ("c3", "noteworx_read_attachment", read),
        ("c4", "noteworx_list_attachments", json!({"slug": "n\u{0}"})),
    ]);
    let s = notes_task(&notes)
        .replies(vec![escapes, final_answer("done")])
        .ran()
        .await;

    assert!(notes.calls().await.is_empty(), "{:?}", notes.calls().await);
    let lines = s.tool_lines("t");
    assert_eq!(lines.len(), 4);
    for l in &lines {
        assert!(l.is_error && !l.executed, "{l:?}");
        assert_contains(&l.result, "must be a slug or id");
    }
}

#[tokio::test]
async fn a_runpod_job_id_that_climbs_the_url_is_never_polled() {
    let queued = vec![ok(job("../../x/purge-queue", "IN_QUEUE"))];
    let rp = FakeRunpod::start(queued, vec![ok(job("x", "COMPLETED"))], false).await;
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
    assert_contains(s.error.unwrap(), "malformed job id");
    let calls = rp.calls().await;
    assert!(!calls.is_empty());
    // Only the reachability check and /runsync.
    let seen: Vec<_> = calls.iter().map(|(m, p)| format!("{m} {p}")).collect();
    let known = ["POST /v2/ep123/runsync", "GET /v2/ep123/health"];
    assert!(seen.iter().all(|r| known.contains(&r.as_str())), "{seen:?}");
}

fn mkfifo(path: &std::path::Path) {
    assert!(Command::new("mkfifo").arg(path).status().unwrap().success());
}

/// The inbox holding a link to `private.txt` (`a-link`), a FIFO
/// (`b-fifo`) and a real task (`c-real`): the scene after one run, and
/// how the run ended.
async fn ran_a_link_a_fifo_and_a_real_task() -> (Scene, RunOutcome) {
    let scene = scenario()
        .answers(&["fine"])
        .task("c-real", "A real task.")
        .build()
        .await;
    let secret = scene.root().join("private.txt");
    std::fs::write(&secret, "my private notes").unwrap();
    std::os::unix::fs::symlink(&secret, scene.root().join("tasks/inbox/a-link.md")).unwrap();
    mkfifo(&scene.root().join("tasks/inbox/b-fifo.md"));
    let outcome = scene.run().await;
    (scene, outcome)
}

#[tokio::test]
async fn a_symlink_or_fifo_in_the_inbox_is_an_invalid_task() {
    let (scene, outcome) = ran_a_link_a_fifo_and_a_real_task().await;

    let mut tally = Tally::default();
    (tally.succeeded, tally.failed) = (1, 2);
    assert_eq!(outcome, RunOutcome::Finished(tally));
    for (task, what) in [("a-link", "a symbolic link"), ("b-fifo", "a FIFO")] {
        let s = scene.summary(task);
        assert_eq!(s.stop_reason, StopReason::InvalidTask);
        let error = s.error.unwrap();
        assert!(
            error.contains(&format!("not a regular file ({what})")),
            "{task}"
        );
    }
    let moved = scene
        .root()
        .join(format!("tasks/failed/{RUN_ID}-a-link.md"));
    assert!(moved.is_symlink());
    assert_eq!(scene.requests().await.len(), 1, "only the real task ran");
}

#[tokio::test]
async fn the_target_of_a_symlink_in_the_inbox_is_never_read() {
    let (scene, _) = ran_a_link_a_fifo_and_a_real_task().await;

    let kept = std::fs::read_to_string(scene.root().join("private.txt")).unwrap();
    assert_eq!(kept, "my private notes");
    assert_lacks(scene.all_records(), "my private notes");
}

/// Tasks whose output schema is a FIFO (`a-fifo`) or a device
/// (`b-zero`), and a real task (`c-real`).
async fn schemas_a_fifo_and_a_device() -> Scene {
    let s = scenario()
        .answers(&["fine"])
        .task("a-fifo", "+++\noutput_schema = \"fifo.json\"\n+++\nCount.")
        .task("b-zero", "+++\noutput_schema = \"/dev/zero\"\n+++\nCount.")
        .task("c-real", "A real task.")
        .build()
        .await;
    mkfifo(&s.root().join("fifo.json"));
    s
}

#[tokio::test(flavor = "multi_thread")]
async fn check_refuses_an_output_schema_that_is_a_fifo_or_a_device_without_reading_it() {
    let s = schemas_a_fifo_and_a_device().await;

    let check = run_binary_within(&s, &["check"], Duration::from_secs(60));

    assert_eq!(check.status.code(), Some(1));
    let text = stdout(&check);
    for (task, what) in [("a-fifo", "a FIFO"), ("b-zero", "a device")] {
        let unread =
            format!("{task}.md: frontmatter: output_schema: cannot read the output schema");
        assert_contains(&text, &unread);
        let why = format!("not a regular file ({what}); it was not read");
        assert_contains(&text, &why);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn run_refuses_an_output_schema_that_is_a_fifo_or_a_device_without_reading_it() {
    let s = schemas_a_fifo_and_a_device().await;

    let run = run_binary_within(&s, &["run"], Duration::from_secs(60));

    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    assert_eq!(s.failed().len(), 2, "{:?}", s.failed());
    assert!(s.done()[0].ends_with("-c-real.md"));
    let b_zero = &s.run_dirs("b-zero")[0];
    assert_eq!(s.summary_in(b_zero).stop_reason, StopReason::InvalidTask);
    assert_eq!(s.requests().await.len(), 1, "only the real task ran");
}

/// A profile's schema is read when the config is: the config is refused.
#[tokio::test]
async fn a_profiles_output_schema_that_is_a_device_refuses_the_config() {
    let s = scenario()
        .config("[agents.x]\nrole_prompt = \"Hi.\"\noutput_schema = \"/dev/zero\"")
        .build()
        .await;

    let e = agent_harness::config::Config::load(&s.config_path(), &test_env).unwrap_err();

    assert!(e.message.contains("not a regular file (a device)"), "{e}");
}

// -- 9. Files --------------------------------------------------------------------

/// The records every run writes.
const RECORD_FILES: [&str; 4] = [
    "conversation.jsonl",
    "tools.jsonl",
    "run.log",
    "summary.json",
];

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test(flavor = "multi_thread")]
async fn records_are_private_under_a_permissive_umask() {
    let s = scenario()
        .answers(&["done"])
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
    let dir = the_run_dir(&s, "t");
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&s.root().join("logs/t")), 0o700);
    for f in RECORD_FILES {
        assert_eq!(mode(&dir.join(f)), 0o600, "{f}");
    }
}
