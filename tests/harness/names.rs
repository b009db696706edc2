//! Names as people type them (README, Commands): `run-task`, `show`,
//! `requeue`, `rerun` and `runs --task` take `NAME` or `NAME.md`, and a name
//! that matches nothing says where that task is, or the nearest names (exit
//! 2; `runs --task NAME --json` prints `[]`).

use crate::common::*;

/// A project where `example` succeeded (in `done/`, with a run in the
/// logs) and `waiting` is in the inbox.
async fn one_done() -> Scene {
    let s = scenario()
        .replies(vec![final_answer("Done."), final_answer("Again.")])
        .task("example", "Answer.")
        .build()
        .await;
    let out = run_bin(&s, &["run"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    s.task("waiting", "Later.");
    s
}

#[tokio::test(flavor = "multi_thread")]
async fn run_task_takes_name_md_and_says_where_a_task_is_or_what_is_near() {
    let s = one_done().await;

    let out = run_bin(&s, &["run-task", "exmaple"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_contains(stderr(&out), "did you mean exmaple → example?");
    let out = run_bin(&s, &["run-task", "example.md"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("example is in ")
            && stderr(&out).contains("tasks/done/ (it succeeded)")
            && stderr(&out).contains("run-task runs tasks from the inbox"),
        "{}",
        stderr(&out)
    );

    let out = run_bin(&s, &["run-task", "waiting.md"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "Again.\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn requeue_of_a_task_that_succeeded_says_it_is_in_done() {
    let s = one_done().await;

    let out = run_bin(&s, &["requeue", "example.md"]).await;

    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("example is in ")
            && err.contains("tasks/done/ (it succeeded)")
            && err.contains("requeue takes tasks from ")
            && err.trim_end().ends_with("tasks/failed/"),
        "{err}"
    );
    let out = run_bin(&s, &["requeue", "exmaple"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_contains(stderr(&out), "did you mean exmaple → example?");
    assert_eq!(s.inbox(), ["waiting.md"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn show_and_runs_take_name_md() {
    let s = one_done().await;

    let out = run_bin(&s, &["show", "example.md"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_contains(stdout(&out), "task        example");
    let out = run_bin(&s, &["runs", "--task", "example.md"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("example"), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn show_and_runs_say_what_is_near_a_name_with_no_run() {
    let s = one_done().await;

    for args in [&["show", "exmaple"][..], &["runs", "--task", "exmaple"][..]] {
        let out = run_bin(&s, args).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("did you mean exmaple → example?"),
            "{args:?}: {}",
            stderr(&out)
        );
        assert_eq!(stdout(&out), "", "{args:?}: no empty table");
    }
    // `--json` asked for a list: an empty one, the line still on stderr.
    let out = run_bin(&s, &["runs", "--task", "exmaple", "--json"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "[]");
    assert_contains(stderr(&out), "did you mean exmaple → example?");
    let out = run_bin(&s, &["runs", "--task", "waiting"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_contains(stderr(&out), "waiting is in the inbox");
    assert_contains(stderr(&out), "no run of it is recorded in");
}
