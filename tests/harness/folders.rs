//! The folders a run needs and its lock (docs/configuration.md, `[paths]`;
//! docs/operating.md, "The lock"): a folder missing, uncreatable or unusable is
//! a configuration error naming its key before any task starts; a run that
//! finds the lock taken touches nothing.

use std::os::unix::fs::PermissionsExt;

use crate::common::*;

#[tokio::test]
async fn a_missing_inbox_is_a_configuration_error_for_run_run_task_and_check() {
    let s = offline()
        .config("[paths]\ninbox = \"tasks/inbx\"")
        .build()
        .await;
    let inbx = s.root().join("tasks/inbx");
    let resolved = inbx.display().to_string();
    let said = format!("[paths] inbox: the folder {resolved} does not exist");
    for args in [&["run"][..], &["run-task", "t"], &["check"]] {
        let out = bin(&s).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let text = format!("{}{}", stdout(&out), stderr(&out));
        assert!(text.contains(&said), "{args:?}: {text}");
    }
    assert!(!inbx.exists(), "nothing creates the inbox");
    let metrics = std::fs::read_to_string(s.root().join("logs/agent-harness.prom")).unwrap();
    assert!(
        metrics.contains("agent_harness_last_run_exit_code 2\n"),
        "a run that read its config writes its figures: {metrics}"
    );
}

#[tokio::test]
async fn a_folder_that_cannot_be_created_names_its_key_and_touches_no_task() {
    let s = offline()
        .config("[paths]\ndone = \"blocker/done\"")
        .task("t", "x")
        .build()
        .await;
    std::fs::write(s.root().join("blocker"), "a file").unwrap();
    let out = bin(&s).arg("run").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_contains(stderr(&out), "[paths] done: cannot create the folder");
    assert_eq!(s.inbox(), ["t.md"]);
    assert!(!s.root().join("logs/t").exists());
}

#[tokio::test]
async fn run_task_exits_75_while_another_run_holds_the_lock() {
    let s = offline().task("t", "x").build().await;
    let _lock = agent_harness::state::RunLock::try_acquire(&s.root().join("tasks"))
        .unwrap()
        .unwrap();
    let out = bin(&s).args(["run-task", "t"]).output().unwrap();
    assert_eq!(out.status.code(), Some(75));
    let err = stderr(&out);
    assert!(err.contains("task \"t\" did not run"), "{err}");
    assert_eq!(s.inbox(), ["t.md"]);
}

/// `check` names a file in the way of a folder (`failed/`).
#[tokio::test]
async fn check_names_a_file_in_the_way_of_a_folder() {
    let s = offline()
        .config("[paths]\nfailed = \"blocker/failed\"")
        .task("t", "x")
        .build()
        .await;
    std::fs::write(s.root().join("blocker"), "a file").unwrap();
    let check = bin(&s).arg("check").output().unwrap();
    assert_eq!(check.status.code(), Some(2), "{}", stdout(&check));
    assert_contains(stdout(&check), "[paths] failed: ");
    assert_contains(stdout(&check), "blocker is not a folder");
}

/// `run` refuses folders it could not use, as `check` names them: an
/// existing `done/` it cannot write.
#[tokio::test]
async fn run_refuses_folders_it_cannot_use_before_any_task_starts() {
    let s = offline().task("t", "x").build().await;
    if unsafe { libc::geteuid() } != 0 {
        let done = s.root().join("tasks/done");
        std::fs::create_dir_all(&done).unwrap();
        std::fs::set_permissions(&done, std::fs::Permissions::from_mode(0o555)).unwrap();
        let out = bin(&s).arg("run").output().unwrap();
        std::fs::set_permissions(&done, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert_contains(stderr(&out), "[paths] done: ");
        assert!(!s.root().join("logs/t").exists(), "no task started");
    } else {
        // As root every folder is writable: the same check runs as nobody.
        let out = as_nobody(&s, "run");
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        let err = stderr(&out);
        let refused = err.contains("[paths] done: ") || err.contains("[paths] inbox: ");
        assert!(refused, "{err}");
        assert!(!s.root().join("logs/t").exists(), "no task started");
    }
}
