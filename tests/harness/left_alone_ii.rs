//! An operator's week, part two (SPEC §17): what a task answered, out of
//! the records and onto stdout.

use serde_json::{Value, json};

use crate::cli::{bin, stderr, stdout};
use crate::common::*;

/// The one run folder of `task` (the binary runs on the real clock).
fn the_run_dir(project: &Project, task: &str) -> std::path::PathBuf {
    let runs: Vec<_> = std::fs::read_dir(project.root().join("logs").join(task))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    runs[0].clone()
}

async fn run_bin(project: &Project, args: &[&str]) -> std::process::Output {
    let mut cmd = bin(project);
    cmd.args(args);
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_final_answer_is_kept_as_answer_md_and_a_failed_task_has_none() {
    let llm = FakeLlm::start(vec![
        ok(final_answer("The answer is 42.")),
        wiremock::ResponseTemplate::new(400).set_body_json(json!({"error": {"message": "bad"}})),
    ])
    .await;
    let project = Project::new();
    project.task("a-answered", "Answer.");
    project.task("b-refused", "Answer.");
    let cfg = project.config(&llm.base_url(), "");

    assert_eq!(run_all(&cfg).await.exit_code(), 1);

    let answer = std::fs::read_to_string(project.run_dir("a-answered").join("answer.md")).unwrap();
    assert_eq!(answer, "The answer is 42.\n");
    assert!(!project.run_dir("b-refused").join("answer.md").exists());
}

#[tokio::test]
async fn run_task_prints_the_answer_and_nothing_else_on_stdout() {
    let llm = FakeLlm::replies(vec![final_answer("Forty-two.\n\nThat is all.")]).await;
    let project = Project::new();
    project.write_config(&llm.base_url(), "");
    project.task("q", "Answer.");

    let out = run_bin(&project, &["run-task", "q"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "Forty-two.\n\nThat is all.\n");
    assert!(stderr(&out).contains("task finished"), "{}", stderr(&out));
}

#[tokio::test]
async fn run_task_prints_a_structured_answer_as_the_json_of_result_json() {
    let llm = FakeLlm::replies(vec![final_answer(
        "Here it is:\n```json\n{\"papers\": 3, \"top\": \"Tool calling\"}\n```",
    )])
    .await;
    let project = Project::new();
    std::fs::create_dir_all(project.root().join("schemas")).unwrap();
    std::fs::write(
        project.root().join("schemas/scan.json"),
        r#"{"type":"object","required":["papers"],"properties":{"papers":{"type":"integer"}}}"#,
    )
    .unwrap();
    project.write_config(&llm.base_url(), "");
    project.task(
        "scan",
        "+++\noutput_schema = \"schemas/scan.json\"\n+++\nCount.",
    );

    let out = run_bin(&project, &["run-task", "scan"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let printed: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(printed, json!({"papers": 3, "top": "Tool calling"}));
    let file = std::fs::read_to_string(the_run_dir(&project, "scan").join("result.json")).unwrap();
    assert_eq!(stdout(&out), file, "stdout is result.json");
}

#[tokio::test]
async fn run_json_prints_one_summary_per_line_as_each_task_ends() {
    let llm = FakeLlm::start(vec![
        ok(final_answer("one")),
        wiremock::ResponseTemplate::new(400).set_body_json(json!({"error": {"message": "bad"}})),
        ok(final_answer("three")),
    ])
    .await;
    let project = Project::new();
    project.write_config(&llm.base_url(), "");
    for t in ["a", "b", "c"] {
        project.task(t, "Answer.");
    }

    let out = run_bin(&project, &["run", "--json"]).await;

    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let lines: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seen: Vec<(&str, &str)> = lines
        .iter()
        .map(|s| (s["task"].as_str().unwrap(), s["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        seen,
        [("a", "succeeded"), ("b", "failed"), ("c", "succeeded")]
    );
    for (line, task) in lines.iter().zip(["a", "b", "c"]) {
        let file: Value = serde_json::from_str(
            &std::fs::read_to_string(the_run_dir(&project, task).join("summary.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(line, &file, "the line is the task's summary.json");
    }
    assert!(
        !stderr(&out).contains("\"run_id\""),
        "stderr keeps only diagnostics"
    );

    let llm = FakeLlm::replies(vec![final_answer("four")]).await;
    let project = Project::new();
    project.write_config(&llm.base_url(), "");
    project.task("d", "Answer.");
    let quiet = run_bin(&project, &["run"]).await;
    assert_eq!(quiet.status.code(), Some(0), "{}", stderr(&quiet));
    assert_eq!(project.done().len(), 1);
    assert_eq!(
        stdout(&quiet),
        "",
        "without --json, run prints nothing on stdout"
    );
}

/// Puts `files` in `tasks/failed/` as a run would have left them.
fn failed(project: &Project, files: &[&str]) {
    let dir = project.root().join("tasks/failed");
    std::fs::create_dir_all(&dir).unwrap();
    for f in files {
        std::fs::write(dir.join(f), format!("task from {f}")).unwrap();
    }
}

#[tokio::test]
async fn a_failed_task_is_one_requeue_away_from_running_again_on_its_first_attempt() {
    let llm = FakeLlm::start(vec![
        wiremock::ResponseTemplate::new(400).set_body_json(json!({"error": {"message": "bad"}})),
        ok(final_answer("done now")),
    ])
    .await;
    let project = Project::new();
    project.write_config(&llm.base_url(), "");
    project.task("flaky", "Answer.");
    let first = run_bin(&project, &["run"]).await;
    assert_eq!(first.status.code(), Some(1), "{}", stderr(&first));
    assert_eq!(project.failed().len(), 1);
    // A count left behind (by hand, or an older version) is reset too.
    std::fs::write(
        project.root().join("tasks/.agent-harness-attempts.json"),
        r#"{"flaky": 7}"#,
    )
    .unwrap();

    let out = run_bin(&project, &["requeue", "flaky"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(project.inbox(), ["flaky.md"]);
    assert!(project.failed().is_empty());
    let printed = stdout(&out);
    assert!(
        printed.contains("tasks/failed/") && printed.ends_with("tasks/inbox/flaky.md\n"),
        "{printed}"
    );
    assert!(
        !project
            .root()
            .join("tasks/.agent-harness-attempts.json")
            .exists()
    );
    let again = run_bin(&project, &["run", "--json"]).await;
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    let summary: Value = serde_json::from_str(stdout(&again).trim()).unwrap();
    assert_eq!(
        (summary["status"].as_str(), summary["attempt"].as_u64()),
        (Some("succeeded"), Some(1))
    );
}

#[test]
fn requeue_takes_the_newest_file_of_a_name_and_never_overwrites_the_inbox() {
    let project = Project::new();
    project.write_config("http://127.0.0.1:9/v1", "");
    failed(
        &project,
        &[
            "20260401T060000Z-scan.md",
            "20260408T060000Z-scan.md",
            "20260408T060000Z-2-scan.md",
            "20260409T061500Z-2026-report.md",
            "20260409T061500Z-other.md",
        ],
    );
    // `…Z-2-scan` is run `…Z-2` of `scan`: its run folder says so.
    std::fs::create_dir_all(project.root().join("logs/scan/20260408T060000Z-2")).unwrap();

    let out = bin(&project).args(["requeue", "scan"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(project.root().join("tasks/inbox/scan.md")).unwrap(),
        "task from 20260408T060000Z-2-scan.md"
    );

    // The inbox holds scan.md now: the next one is refused, and stays.
    let out = bin(&project).args(["requeue", "scan"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("scan.md is already in the inbox"),
        "{}",
        stderr(&out)
    );
    assert_eq!(project.failed().len(), 4);
    assert_eq!(
        std::fs::read_to_string(project.root().join("tasks/inbox/scan.md")).unwrap(),
        "task from 20260408T060000Z-2-scan.md",
        "never overwritten"
    );

    // A run id names every task of that run; a date-like name stays whole.
    let out = bin(&project)
        .args(["requeue", "20260409T061500Z"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(project.inbox(), ["2026-report.md", "other.md", "scan.md"]);

    let out = bin(&project)
        .args(["requeue", "nothing-like-it"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("matches task \"nothing-like-it\""),
        "{}",
        stderr(&out)
    );
}

#[test]
fn requeue_all_failed_moves_the_newest_of_each_and_waits_for_a_running_run() {
    let project = Project::new();
    project.write_config("http://127.0.0.1:9/v1", "");
    failed(
        &project,
        &[
            "20260401T060000Z-a.md",
            "20260402T060000Z-a.md",
            "20260403T060000Z-b.md",
        ],
    );
    let lock = agent_harness::drain::lock::RunLock::try_acquire(&project.root().join("tasks"))
        .unwrap()
        .unwrap();
    let out = bin(&project)
        .args(["requeue", "--all-failed"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("another run holds the lock"),
        "{}",
        stderr(&out)
    );
    assert!(project.inbox().is_empty());
    drop(lock);

    let out = bin(&project)
        .args(["requeue", "--all-failed"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(project.inbox(), ["a.md", "b.md"]);
    assert_eq!(
        std::fs::read_to_string(project.root().join("tasks/inbox/a.md")).unwrap(),
        "task from 20260402T060000Z-a.md"
    );
    assert_eq!(project.failed(), ["20260401T060000Z-a.md"]);

    let out = bin(&project).args(["requeue"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "a target is required");
}
