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
