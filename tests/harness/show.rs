//! What the operator reads the next morning (docs/operating.md, "Commands"
//! and "The morning after"): `show` prints a run and its answer — and of a
//! failure, what went wrong and the command that runs it again — `runs` has
//! an ANSWER column and filters by time and status, both print times in
//! `[schedule] timezone`, and the readers need their config and name a
//! folder they cannot read as a permission problem — never "no runs
//! recorded".

use agent_harness::records::Summary;
use serde_json::Value;

use crate::common::*;

/// A project with two finished runs of `weekly` (the second the newest)
/// and one of `other`, run by the binary on the real clock.
async fn two_runs() -> Scene {
    let s = scenario()
        .replies(vec![
            final_answer("First answer.\nMore."),
            final_answer("The answer is 42.\n\nBecause \u{1b}]0;pwned\u{7}."),
            final_answer("Other."),
        ])
        .build()
        .await;
    for task in ["weekly", "weekly", "other"] {
        s.task(task, "Answer.");
        let out = run_bin(&s, &["run"]).await;
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        // Run ids are seconds: the next run gets its own.
        std::thread::sleep(std::time::Duration::from_millis(1100));
    }
    s
}

#[tokio::test(flavor = "multi_thread")]
async fn show_prints_a_run_where_its_file_went_and_its_answer() {
    let s = two_runs().await;

    let out = bin(&s).args(["show", "weekly"]).output().unwrap();

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("task        weekly"), "{text}");
    assert_contains(&text, "status      succeeded (final_answer)");
    assert!(
        text.contains("tasks/done/") && text.contains("-weekly.md"),
        "{text}"
    );
    assert!(
        text.contains("answer:\nThe answer is 42.\n\nBecause"),
        "the newest run of the task, its answer whole: {text}"
    );
    // No NAME: the newest run of all.
    let newest = stdout(&bin(&s).arg("show").output().unwrap());
    assert!(
        newest.contains("task        other") && newest.contains("Other."),
        "{newest}"
    );
    // A run id, and --json.
    let dirs: Vec<_> = std::fs::read_dir(s.root().join("logs/weekly"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let first = dirs.iter().min().unwrap();
    let out = bin(&s).args(["show", first, "--json"]).output().unwrap();
    let summary: Summary = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary.run_id, first.as_str());
    assert_eq!(
        summary.final_answer.as_deref(),
        Some("First answer.\nMore.")
    );
    // Nothing that matches: exit 2.
    let out = bin(&s).args(["show", "nosuch"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_contains(
        stderr(&out),
        "no task \"nosuch\" in the inbox, done/, failed/",
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_has_an_answer_column_clipped_and_escaped() {
    let s = two_runs().await;

    let out = bin(&s).arg("runs").output().unwrap();

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let table = stdout(&out);
    let header = table.lines().next().unwrap();
    assert!(header.ends_with("ANSWER"), "{header}");
    assert!(!header.contains("SLOT"), "no recurring run, no slot column");
    assert!(table.contains("The answer is 42."), "{table}");
    assert!(table.contains("First answer."), "{table}");
    assert!(!table.contains("More."), "only the first line: {table}");
    assert!(!table.contains('\u{1b}'), "escaped: {table}");
}

#[test]
fn every_reader_needs_its_config_and_names_it() {
    no_system_config();
    let s = scenario().no_config_file().build_blocking();
    std::fs::create_dir_all(s.root().join("logs")).unwrap();
    for args in [
        &["runs"][..],
        &["report"],
        &["show"],
        &["prune"],
        &["requeue", "--all-failed"],
    ] {
        let out = bin(&s).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = stderr(&out);
        assert!(err.contains("agent.toml"), "{args:?}: {err}");
        assert!(err.contains("no config file found"), "{args:?}: {err}");
        assert!(err.contains("agent-harness init"), "{args:?}: {err}");
        assert!(!stdout(&out).contains("no runs recorded"), "{args:?}");
    }
    assert!(!s.root().join("logs/report").exists(), "no report written");
}

/// A logs folder this user may not read is a permission problem naming the
/// key and the user to run as. As root the readers run as `nobody`;
/// otherwise the run folders are made unreadable to their owner.
#[tokio::test(flavor = "multi_thread")]
async fn a_logs_folder_this_user_cannot_read_is_a_permission_problem() {
    use std::os::unix::fs::PermissionsExt;
    let s = two_runs().await;
    s.task("t", "x");
    let root = rustix::process::geteuid().is_root();
    let owner = if root {
        "root".to_string()
    } else {
        String::from_utf8(
            std::process::Command::new("id")
                .arg("-un")
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap()
        .trim()
        .to_string()
    };
    let logs = s.root().join("logs");
    let locked = ["weekly", "other"].map(|t| logs.join(t));
    if !root {
        for dir in &locked {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o000)).unwrap();
        }
    }
    for command in ["runs", "show", "report"] {
        let out = if root {
            as_nobody(&s, command)
        } else {
            bin(&s).arg(command).output().unwrap()
        };
        assert_eq!(
            out.status.code(),
            Some(1),
            "{command}: {}{}",
            stdout(&out),
            stderr(&out)
        );
        let err = stderr(&out);
        assert!(
            err.contains("run it as the user that owns it"),
            "{command}: {err}"
        );
        if command != "report" || !root {
            assert!(
                err.contains("[paths] logs: ")
                    && err.contains("cannot be read by this user (permission denied)")
                    && err.contains(&format!(
                        "sudo -u {owner} agent-harness --config {} {command}",
                        s.config_path().display()
                    )),
                "{command}: {err}"
            );
        }
        assert!(!err.contains("symbolic link"), "{command}: {err}");
        assert!(!stdout(&out).contains("no runs recorded"), "{command}");
    }
    for dir in &locked {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
}

/// Writes `logs/<task>/<run_id>/summary.json` from `template`, renamed,
/// started at the run id's time and ended as `status` says.
fn plant_run(project: &Project, template: &Value, task: &str, run_id: &str, status: &str) {
    let dir = project.root().join("logs").join(task).join(run_id);
    std::fs::create_dir_all(&dir).unwrap();
    let started = agent_harness::records::run_time(run_id).unwrap();
    let mut s = template.clone();
    s["task"] = task.into();
    s["run_id"] = run_id.into();
    s["status"] = status.into();
    s["started_at"] = started.to_rfc3339().into();
    s["finished_at"] = (started + chrono::Duration::seconds(90))
        .to_rfc3339()
        .into();
    std::fs::write(dir.join("summary.json"), s.to_string()).unwrap();
}

/// The run ids `runs --json ARGS…` lists, newest first.
fn listed(s: &Scene, args: &[&str]) -> Vec<String> {
    let out = bin(s)
        .arg("runs")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    let runs: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    runs.iter()
        .map(|r| r["run_id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_since_and_status_filter_and_times_are_in_the_schedules_zone() {
    let s = scenario()
        .replies(vec![final_answer("ok")])
        .task("seed", "x")
        .config("[schedule]\ntimezone = \"Europe/Berlin\"\n")
        .ran()
        .await;
    let template: Value =
        serde_json::from_slice(&std::fs::read(s.run_dir("seed").join("summary.json")).unwrap())
            .unwrap();
    std::fs::remove_dir_all(s.root().join("logs/seed")).unwrap();
    plant_run(&s, &template, "alpha", "20260401T080000Z", "succeeded");
    plant_run(&s, &template, "alpha", "20260402T220000Z", "failed");
    plant_run(&s, &template, "beta", "20260403T080000Z", "interrupted");
    plant_run(&s, &template, "beta", "20260404T080000Z", "succeeded");

    // A date is its midnight in the zone: 2026-04-03 00:00 in Berlin is
    // 04-02 22:00 UTC, so the run that started then is in.
    assert_eq!(
        listed(&s, &["--since", "2026-04-03"]),
        ["20260404T080000Z", "20260403T080000Z", "20260402T220000Z"]
    );
    assert_eq!(
        listed(&s, &["--since", "2026-04-03T09:00:00+02:00"]),
        ["20260404T080000Z", "20260403T080000Z"]
    );
    assert_eq!(
        listed(&s, &["--status", "failed", "--status", "interrupted"]),
        ["20260403T080000Z", "20260402T220000Z"]
    );
    assert_eq!(
        listed(&s, &["--since", "2026-04-03", "--status", "succeeded"]),
        ["20260404T080000Z"]
    );
    assert_eq!(listed(&s, &["--since", "1h"]), Vec::<String>::new());

    let out = bin(&s).args(["runs", "--status", "done"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_contains(
        stderr(&out),
        "[possible values: succeeded, failed, interrupted]",
    );
    let out = bin(&s)
        .args(["runs", "--since", "yesterday"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_contains(stderr(&out), "--since: \"yesterday\" is no time");
    let out = bin(&s).args(["runs", "--since", "1h"]).output().unwrap();
    assert_eq!(stdout(&out).lines().last(), Some("(no run matches)"));

    // Times in the zone (April in Berlin is +02:00), or with --utc in UTC.
    let table = stdout(&bin(&s).args(["runs", "--task", "beta"]).output().unwrap());
    assert!(table.lines().next().unwrap().contains("STARTED"), "{table}");
    assert!(table.contains("2026-04-04T10:00:00+02:00"), "{table}");
    let table = stdout(
        &bin(&s)
            .args(["runs", "--task", "beta", "--utc"])
            .output()
            .unwrap(),
    );
    assert!(table.contains("2026-04-04T08:00:00Z"), "{table}");
    let text = stdout(&bin(&s).args(["show", "beta"]).output().unwrap());
    assert_contains(
        &text,
        "started 2026-04-04T10:00:00+02:00, finished 2026-04-04T10:01:30+02:00",
    );
    let text = stdout(&bin(&s).args(["show", "beta", "--utc"]).output().unwrap());
    assert!(text.contains("started 2026-04-04T08:00:00Z"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn show_of_a_failure_says_what_went_wrong_and_the_command_that_runs_it_again() {
    let s = scenario()
        .script(vec![
            ok(tool_calls(&[("c1", "no_such_tool", serde_json::json!({}))])),
            wiremock::ResponseTemplate::new(400).set_body_json(
                serde_json::json!({"error": {"message": "bad \u{1b}]0;x\u{7} request"}}),
            ),
        ])
        .task("doomed", "Answer.")
        .build()
        .await;
    let run = run_bin(&s, &["run"]).await;
    assert_eq!(run.status.code(), Some(1), "{}", stderr(&run));

    let out = bin(&s).args(["show", "doomed"]).output().unwrap();

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert_contains(&text, "status      failed (endpoint_error)");
    assert!(text.contains("error       "), "{text}");
    assert!(
        text.contains("tool error  turn 1, no_such_tool: "),
        "the last tool error: {text}"
    );
    // Named with the config it read: the line works from any folder.
    let program = format!("agent-harness --config {}", s.config_path().display());
    assert_contains(&text, &format!("again       {program} requeue doomed\n"));
    let tail = text
        .split("run.log, its last ")
        .nth(1)
        .unwrap_or_else(|| panic!("no log tail: {text}"));
    let log = std::fs::read_to_string(s.run_dirs("doomed")[0].join("run.log")).unwrap();
    let last = log.lines().rev().find(|l| !l.trim().is_empty()).unwrap();
    let start: String = last.chars().take(60).collect();
    assert!(
        tail.contains(&format!("  {start}")),
        "the log's last line {last:?} in {tail}"
    );
    assert!(!text.contains('\u{1b}'), "escaped: {text:?}");

    // A newer failed file of the same name (submitted again, failed
    // again): `requeue doomed` would move that one, so this run's is
    // named by its run id.
    let run_id = s.run_dirs("doomed")[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let newer = s.root().join("tasks/failed/20991231T000000Z-doomed.md");
    std::fs::write(&newer, "Answer.").unwrap();
    let text = stdout(&bin(&s).args(["show", "doomed"]).output().unwrap());
    assert_contains(&text, &format!("again       {program} requeue {run_id}\n"));
    std::fs::remove_file(&newer).unwrap();

    // Requeued by the line as printed, from another folder and a shell
    // without the config's secrets: it waits in the inbox.
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("again       "))
        .unwrap()
        .to_string();
    let bin_dir = assert_cmd::cargo::cargo_bin("agent-harness")
        .parent()
        .unwrap()
        .to_path_buf();
    let out = std::process::Command::new("sh")
        .args(["-c", &line])
        .current_dir("/")
        .env("PATH", format!("{}:/usr/bin:/bin", bin_dir.display()))
        .env_remove("AGENT_HARNESS_CONFIG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{line}: {}", stderr(&out));
    assert!(s.inbox().contains(&"doomed.md".to_string()), "{line}");
    let text = stdout(&bin(&s).args(["show", "doomed"]).output().unwrap());
    assert_contains(
        &text,
        "again       still in the inbox: the next run takes it",
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn show_of_a_success_says_no_failure() {
    let s = two_runs().await;
    let text = stdout(&bin(&s).args(["show", "weekly"]).output().unwrap());
    assert!(!text.contains("again "), "{text}");
    assert!(!text.contains("run.log, its last"), "{text}");
}
