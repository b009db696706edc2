//! The binary: exit codes and what it prints (README, Exit codes;
//! docs/operating.md, "Commands").

use std::process::Output;

use serde_json::{Value, json};
use wiremock::ResponseTemplate;

use crate::common::*;

#[tokio::test]
async fn check_passes_a_clean_inbox_and_names_file_and_line_of_each_problem() {
    let s = offline()
        .task("good", "+++\nmax_turns = 2\n+++\nDo it.")
        .build()
        .await;
    let out = bin(&s).arg("check").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_contains(stdout(&out), "config ok; 1 task file(s), 0 with problems");

    s.task("bad", "+++\nmax_turns = 2\ncolour = \"red\"\n+++\nDo it.");
    let out = bin(&s).arg("check").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert_contains(
        &text,
        "tasks/inbox/bad.md:3: frontmatter: colour: unknown key (expected one of max_turns,",
    );
    assert_eq!(s.inbox(), ["bad.md", "good.md"], "check moves nothing");
}

#[tokio::test]
async fn a_bad_config_exits_2_naming_the_key_and_the_file() {
    let s = offline().config("[limits]\nmax_turnz = 3\n").build().await;
    for cmd in ["check", "run"] {
        let out = bin(&s).arg(cmd).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{cmd}");
        let err = stderr(&out);
        assert!(
            err.contains("agent.toml") && err.contains("max_turnz") && err.contains("line 6"),
            "{err}"
        );
    }
}

#[tokio::test]
async fn the_config_comes_from_the_flag_or_the_environment_and_the_flag_wins() {
    let s = offline().build().await;
    let good = s.config_path();
    let missing = s.root().join("nope.toml");
    let out = bin(&s)
        .env("AGENT_HARNESS_CONFIG", &good)
        .arg("check")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = bin(&s)
        .env("AGENT_HARNESS_CONFIG", &good)
        .arg("--config")
        .arg(&missing)
        .arg("check")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_contains(stderr(&out), "nope.toml");
}

#[tokio::test]
async fn run_task_refuses_paths_and_unknown_names_with_exit_2() {
    let s = offline().task("real", "x").build().await;
    for name in ["../real", "a/b", "..", "absent"] {
        let out = bin(&s).args(["run-task", name]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{name}: {}", stderr(&out));
    }
    assert_eq!(s.inbox(), ["real.md"]);
}

#[tokio::test]
async fn an_unreachable_endpoint_exits_75_and_an_empty_inbox_exits_0() {
    let port = closed_port();
    let s = scenario()
        .endpoint_at(&format!("http://127.0.0.1:{port}/v1"))
        .build()
        .await;
    let out = bin(&s).arg("run").output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "an empty inbox is success: {}",
        stderr(&out)
    );

    s.task("t", "x");
    let out = bin(&s).arg("run").output().unwrap();
    assert_eq!(out.status.code(), Some(75));
    assert_contains(stderr(&out), "connection refused");
    assert_eq!(s.inbox(), ["t.md"]);
}

#[tokio::test]
async fn a_second_run_prints_one_line_and_exits_0_while_the_lock_is_held() {
    let s = offline().task("t", "x").build().await;
    let _lock = agent_harness::state::RunLock::try_acquire(&s.root().join("tasks"))
        .unwrap()
        .unwrap();
    let out = bin(&s).arg("run").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("another run holds the lock"), "{err}");
}

/// The task `doomed`, refused by the model with a 400, run by the binary.
async fn doomed_run() -> (Scene, Output) {
    let refusal = ResponseTemplate::new(400).set_body_json(json!({"error": {"message": "bad"}}));
    let s = scenario()
        .script(vec![refusal])
        .task("doomed", "x")
        .build()
        .await;
    let run = run_bin(&s, &["run"]).await;
    (s, run)
}

#[tokio::test]
async fn a_failed_task_exits_1_and_the_journal_names_the_config() {
    let (s, run) = doomed_run().await;
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));
    assert_eq!(s.failed().len(), 1);
    // The journal says which config the run read.
    let config = format!("config={}", s.config_path().display());
    let err = stderr(&run);
    assert!(
        err.lines()
            .any(|l| l.contains("run started") && l.contains(&config)),
        "{err}"
    );
}

#[tokio::test]
async fn runs_lists_a_failed_task_in_json_and_in_the_table() {
    let (s, _) = doomed_run().await;
    let out = bin(&s).args(["runs", "--json"]).output().unwrap();
    let runs: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["task"], "doomed");
    assert_eq!(runs[0]["stop_reason"], "endpoint_error");

    let table = stdout(&bin(&s).arg("runs").output().unwrap());
    let mut lines = table.lines();
    assert!(lines.next().unwrap().starts_with("TASK"), "{table}");
    let row = lines.next().unwrap();
    assert!(
        row.starts_with("doomed") && row.contains("failed") && row.contains("endpoint_error"),
        "{table}"
    );
}

#[tokio::test]
async fn test_runpod_exits_1_with_one_line_when_the_endpoint_is_down() {
    let port = closed_port();
    let s = scenario()
        .endpoint_at(&format!("http://127.0.0.1:{port}/v1"))
        .build()
        .await;
    let out = bin(&s).arg("test-runpod").output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    let fails: Vec<&str> = text.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert_eq!(fails.len(), 1, "{text}");
    assert!(fails[0].contains(&format!("127.0.0.1:{port}")), "{text}");
}

/// Writes `logs/<task>/<run_id>/summary.json` from a real summary, renamed.
fn plant_run(project: &Project, template: &Value, task: &str, run_id: &str, started: &str) {
    let dir = project.root().join("logs").join(task).join(run_id);
    std::fs::create_dir_all(&dir).unwrap();
    let mut s = template.clone();
    s["task"] = task.into();
    s["run_id"] = run_id.into();
    s["started_at"] = started.into();
    std::fs::write(dir.join("summary.json"), s.to_string()).unwrap();
}

#[tokio::test]
async fn runs_lists_newest_first_and_survives_broken_run_folders() {
    let s = scenario()
        .replies(vec![final_answer("ok")])
        .task("seed", "x")
        .ran()
        .await;
    let template: Value =
        serde_json::from_slice(&std::fs::read(s.run_dir("seed").join("summary.json")).unwrap())
            .unwrap();
    std::fs::remove_dir_all(s.root().join("logs/seed")).unwrap();

    plant_run(
        &s,
        &template,
        "alpha",
        "20260401T080000Z",
        "2026-04-01T08:00:00Z",
    );
    plant_run(
        &s,
        &template,
        "beta",
        "20260403T080000Z",
        "2026-04-03T08:00:00Z",
    );
    plant_run(
        &s,
        &template,
        "alpha",
        "20260402T080000Z",
        "2026-04-02T08:00:00Z",
    );
    // Killed before its summary was written: records only, the last line cut.
    let killed = s.root().join("logs/alpha/20260404T080000Z");
    std::fs::create_dir_all(&killed).unwrap();
    std::fs::write(killed.join("conversation.jsonl"), "{\"turn\":1}\n{\"tur").unwrap();
    // A summary cut off half way.
    let torn = s.root().join("logs/beta/20260405T080000Z");
    std::fs::create_dir_all(&torn).unwrap();
    std::fs::write(torn.join("summary.json"), &template.to_string()[..40]).unwrap();
    // Stray files where folders are expected.
    std::fs::write(s.root().join("logs/NOTES.txt"), "mine").unwrap();
    std::fs::write(s.root().join("logs/beta/stray.json"), "{}").unwrap();

    let out = bin(&s).args(["runs", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let runs: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = runs.iter().map(|r| r["run_id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        ["20260403T080000Z", "20260402T080000Z", "20260401T080000Z"],
        "newest first"
    );
    let err = stderr(&out);
    assert_contains(&err, "2 run folder(s) without a readable summary.json");
    assert!(
        err.contains("20260404T080000Z") && err.contains("20260405T080000Z"),
        "{err}"
    );

    let out = bin(&s)
        .args(["runs", "--task", "alpha", "--limit", "1"])
        .output()
        .unwrap();
    let table = stdout(&out);
    let rows: Vec<&str> = table.lines().skip(1).collect();
    assert_eq!(rows.len(), 1, "{table}");
    assert!(
        rows[0].starts_with("alpha") && rows[0].contains("20260402T080000Z"),
        "{table}"
    );
    let err = stderr(&out);
    assert!(
        err.contains("1 run folder(s)") && !err.contains("20260405T080000Z"),
        "the note follows --task: {err}"
    );
}

#[tokio::test]
async fn on_a_terminal_each_running_task_has_a_live_line_and_the_run_ends_with_a_tally() {
    let slow = |body| ok(body).set_delay(std::time::Duration::from_millis(700));
    let s = scenario()
        .script(vec![
            slow(tool_calls(&[("c1", "noteworx_list_notes", json!({}))])),
            slow(final_answer("done")),
        ])
        .task("watched", "Hello.")
        .build()
        .await;
    let bin = assert_cmd::cargo::cargo_bin("agent-harness");
    // `script` gives the binary a terminal and records what it drew.
    let out = {
        let root = s.root().to_path_buf();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new("script")
                .args(["-qec", &format!("{} run", bin.display()), "/dev/null"])
                .current_dir(root)
                .env("TERM", "xterm")
                .env("NO_COLOR", "1")
                .env_remove("AGENT_HARNESS_CONFIG")
                .output()
                .unwrap()
        })
        .await
        .unwrap()
    };
    let screen = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{screen}");
    assert!(screen.contains("watched"), "{screen}");
    assert!(
        screen.contains("turn 1, 120 tokens"),
        "the live line: {screen}"
    );
    assert!(screen.contains("1 succeeded in "), "the tally: {screen}");
    assert!(screen.contains('\u{1b}'), "drawn in place: {screen:?}");
}

#[tokio::test]
async fn off_a_terminal_the_log_is_plain_lines() {
    let s = scenario()
        .replies(vec![final_answer("done")])
        .task("logged", "Hello.")
        .build()
        .await;
    let out = {
        let mut cmd = bin(&s);
        cmd.env_remove("NO_COLOR");
        tokio::task::spawn_blocking(move || cmd.arg("run").output().unwrap())
            .await
            .unwrap()
    };
    assert_eq!(out.status.code(), Some(0));
    let err = stderr(&out);
    assert!(
        err.contains("task finished") && err.contains("run finished"),
        "{err}"
    );
    assert!(!err.contains('\u{1b}'), "no escape codes: {err:?}");
    assert!(!err.contains("succeeded in "), "no live tally: {err}");
}

#[tokio::test]
async fn runs_needs_no_secrets() {
    let s = offline()
        .config("[tools.noteworx]\nbase_url = \"http://127.0.0.1:9\"\n")
        .build()
        .await;
    let out = bin(&s)
        .env_remove("NOTEWORX_TOKEN")
        .args(["runs", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "[]");
    let out = bin(&s)
        .env_remove("NOTEWORX_TOKEN")
        .arg("check")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "check still wants the token");
    assert!(stderr(&out).contains("NOTEWORX_TOKEN"), "{}", stderr(&out));
}

#[tokio::test]
async fn the_shipped_example_inbox_passes_check() {
    let example = include_str!("../../config/agent.toml.example");
    let profiles = &example[example.find("[agents.").unwrap()..];
    // `check` starts no server, but its program must be there: any will do.
    let s = offline()
        .config(&format!(
            "[tools.noteworx]\nbase_url = \"http://127.0.0.1:9\"\n{profiles}\
             [mcp.servers.time]\ncommand = [\"sh\"]\ntools = [\"get_current_time\"]\n"
        ))
        .build()
        .await;
    let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tasks/inbox");
    let mut names = Vec::new();
    for e in std::fs::read_dir(shipped).unwrap() {
        let e = e.unwrap();
        if e.path().extension().is_some_and(|x| x == "md") {
            std::fs::copy(e.path(), s.root().join("tasks/inbox").join(e.file_name())).unwrap();
            names.push(e.file_name());
        }
    }
    assert!(names.len() >= 3, "{names:?}");
    let out = bin(&s)
        .env("NOTEWORX_TOKEN", "nwx_x")
        .arg("check")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_contains(
        stdout(&out),
        &format!("{} task file(s), 0 with problems", names.len()),
    );
}

/// A fresh copy of the shipped example config, with only its endpoint
/// filled in, checks clean — no warning (README, Against your own server).
#[tokio::test]
async fn the_shipped_example_config_checks_clean_with_only_its_endpoint_filled_in() {
    let example = include_str!("../../config/agent.toml.example");
    let ours = example.replacen("kind = \"runpod\"", "kind = \"openai\"", 1);
    assert_ne!(ours, example, "the example names its endpoint kind");
    let s = scenario().config_file(&ours).build().await;
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tasks/inbox/example.md"),
        s.root().join("tasks/inbox/example.md"),
    )
    .unwrap();

    let out = bin(&s).arg("check").output().unwrap();

    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(!stdout(&out).contains("warning:"), "{}", stdout(&out));
    assert_contains(
        stdout(&out),
        "config ok; 1 task file(s), 0 with problems, 0 with warnings",
    );
}

#[test]
fn test_endpoint_is_test_runpod_and_help_lists_it() {
    let help = harness_command().arg("--help").output().unwrap();
    assert!(stdout(&help).contains("test-endpoint"), "{}", stdout(&help));
    let out = harness_command()
        .args(["test-endpoint", "--help"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_contains(stdout(&out), "Smoke-test the endpoint");
}

#[test]
fn a_misspelt_list_is_pointed_at_runs_by_its_other_name() {
    let out = harness_command().arg("lsit").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_contains(stderr(&out), "similar subcommands exist: 'submit', 'list'");
    let help = harness_command().args(["list", "--help"]).output().unwrap();
    assert_contains(stdout(&help), "List recent runs");
}

#[test]
fn completions_and_the_man_page_are_made_from_the_command_line_without_a_config() {
    for shell in ["bash", "zsh", "fish"] {
        let out = harness_command()
            .args(["--config", "/nonexistent.toml", "completions", shell])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        for word in [
            "agent-harness",
            "run-task",
            "requeue",
            "submit",
            "completions",
        ] {
            assert!(script.contains(word), "{shell}: {word} missing");
        }
    }
    let out = harness_command().arg("man").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let page = stdout(&out);
    assert!(page.starts_with(".TH"), "{}", &page[..page.len().min(200)]);
    assert!(page.contains("run"), "{page}");
    let help = harness_command().arg("--help").output().unwrap();
    assert!(!stdout(&help).contains("\n  man "), "man is hidden");
}
