//! The binary: exit codes and what it prints (SPEC §2).

use assert_cmd::Command;
use serde_json::Value;

use crate::common::*;

fn bin(project: &Project) -> Command {
    let mut cmd = Command::cargo_bin("agent-harness").unwrap();
    cmd.current_dir(project.root())
        .env_remove("AGENT_HARNESS_CONFIG")
        .env("NO_COLOR", "1")
        .timeout(std::time::Duration::from_secs(60));
    cmd
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn check_passes_a_clean_inbox_and_names_file_and_line_of_each_problem() {
    let project = Project::new();
    project.write_config("http://127.0.0.1:9/v1", "");
    project.task("good", "+++\nmax_turns = 2\n+++\nDo it.");
    let out = bin(&project).arg("check").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("config ok; 1 task file(s), 0 with problems"),
        "{}",
        stdout(&out)
    );

    project.task("bad", "+++\nmax_turns = 2\ncolour = \"red\"\n+++\nDo it.");
    let out = bin(&project).arg("check").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(
        text.contains("tasks/inbox/bad.md:3: frontmatter: unknown field `colour`"),
        "{text}"
    );
    assert_eq!(
        project.inbox(),
        ["bad.md", "good.md"],
        "check moves nothing"
    );
}

#[test]
fn a_bad_config_exits_2_naming_the_key_and_the_file() {
    let project = Project::new();
    project.write_config("http://127.0.0.1:9/v1", "[limits]\nmax_turnz = 3\n");
    for cmd in ["check", "run"] {
        let out = bin(&project).arg(cmd).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{cmd}");
        let err = stderr(&out);
        assert!(
            err.contains("agent.toml") && err.contains("max_turnz") && err.contains("line 6"),
            "{err}"
        );
    }
}

#[test]
fn the_config_comes_from_the_flag_or_the_environment_and_the_flag_wins() {
    let project = Project::new();
    let good = project.write_config("http://127.0.0.1:9/v1", "");
    let missing = project.root().join("nope.toml");
    let out = bin(&project)
        .env("AGENT_HARNESS_CONFIG", &good)
        .arg("check")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = bin(&project)
        .env("AGENT_HARNESS_CONFIG", &good)
        .arg("--config")
        .arg(&missing)
        .arg("check")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("nope.toml"), "{}", stderr(&out));
}

#[test]
fn run_task_refuses_paths_and_unknown_names_with_exit_2() {
    let project = Project::new();
    project.write_config("http://127.0.0.1:9/v1", "");
    project.task("real", "x");
    for name in ["../real", "a/b", "..", "absent"] {
        let out = bin(&project).args(["run-task", name]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{name}: {}", stderr(&out));
    }
    assert_eq!(project.inbox(), ["real.md"]);
}

#[test]
fn an_unreachable_endpoint_exits_75_and_an_empty_inbox_exits_0() {
    let project = Project::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    project.write_config(&format!("http://127.0.0.1:{port}/v1"), "");
    let out = bin(&project).arg("run").output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "an empty inbox is success: {}",
        stderr(&out)
    );

    project.task("t", "x");
    let out = bin(&project).arg("run").output().unwrap();
    assert_eq!(out.status.code(), Some(75));
    assert!(
        stderr(&out).contains("connection refused"),
        "{}",
        stderr(&out)
    );
    assert_eq!(project.inbox(), ["t.md"]);
}

#[test]
fn a_second_run_prints_one_line_and_exits_0_while_the_lock_is_held() {
    let project = Project::new();
    project.write_config("http://127.0.0.1:9/v1", "");
    project.task("t", "x");
    let _lock = agent_harness::lock::RunLock::try_acquire(&project.root().join("tasks"))
        .unwrap()
        .unwrap();
    let out = bin(&project).arg("run").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("another run holds the lock"), "{err}");
}

#[tokio::test]
async fn a_failed_task_exits_1_and_runs_lists_it() {
    let llm = FakeLlm::start(vec![
        wiremock::ResponseTemplate::new(400)
            .set_body_json(serde_json::json!({"error": {"message": "bad"}})),
    ])
    .await;
    let project = Project::new();
    project.write_config(&llm.base_url(), "");
    project.task("doomed", "x");
    let run = {
        let mut cmd = bin(&project);
        tokio::task::spawn_blocking(move || cmd.arg("run").output().unwrap())
            .await
            .unwrap()
    };
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    assert_eq!(project.failed().len(), 1);

    let out = bin(&project).args(["runs", "--json"]).output().unwrap();
    let runs: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["task"], "doomed");
    assert_eq!(runs[0]["stop_reason"], "endpoint_error");

    let table = stdout(&bin(&project).arg("runs").output().unwrap());
    let mut lines = table.lines();
    assert!(lines.next().unwrap().starts_with("TASK"), "{table}");
    let row = lines.next().unwrap();
    assert!(
        row.starts_with("doomed") && row.contains("failed") && row.contains("endpoint_error"),
        "{table}"
    );
}
