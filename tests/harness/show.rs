//! What the operator reads the next morning (docs/operating.md, "Commands"):
//! `show` prints a run and its answer, `runs` has an ANSWER column, and the
//! readers need their config and name a folder they cannot read as a permission
//! problem — never "no runs recorded".

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
    assert!(
        text.contains("status      succeeded (final_answer)"),
        "{text}"
    );
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
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["run_id"], first.as_str());
    assert_eq!(summary["final_answer"], "First answer.\nMore.");
    // Nothing that matches: exit 2.
    let out = bin(&s).args(["show", "nosuch"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no task \"nosuch\" in the inbox, done/, failed/"),
        "{}",
        stderr(&out)
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
        assert!(
            err.contains("agent.toml")
                && err.contains("no config file found")
                && err.contains("agent-harness init"),
            "{args:?}: {err}"
        );
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
                    && err.contains(&format!("sudo -u {owner} agent-harness {command}")),
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
