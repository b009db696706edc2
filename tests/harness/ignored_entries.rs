//! Nothing to do, said truthfully (docs/tasks.md, "Task files"): an inbox entry
//! that will never run (`color.txt`, `Color.MD`, a folder) is logged by every
//! run, counted in the metrics, and makes the run exit 1 — never "the inbox is
//! empty" with exit 0.

use crate::common::*;

/// Inbox entries that never run: a wrong extension, a wrong case, a
/// folder, and names no task may have.
const STRAYS: [&str; 5] = [
    "color.txt",
    "Color.MD",
    "folder.md",
    "compare v1..v2.md",
    "bell\u{7}\u{1b}]0;pwned.md",
];

/// Puts the [`STRAYS`] in the inbox (`folder.md` a folder).
fn place_strays(s: &Scene) {
    let inbox = s.root().join("tasks/inbox");
    for name in STRAYS {
        if name == "folder.md" {
            std::fs::create_dir(inbox.join(name)).unwrap();
        } else {
            std::fs::write(inbox.join(name), "What colour?").unwrap();
        }
    }
}

/// The lines of `text` that contain `part`.
fn lines_with<'a>(text: &'a str, part: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.contains(part)).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn entries_that_never_run_are_named_counted_and_exit_1() {
    let s = scenario().answers(&["done"]).build().await;
    place_strays(&s);

    let out = run_bin(&s, &["run"]).await;

    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_lacks(&err, "the inbox is empty");
    assert_contains(&err, "5 inbox entries will never run");
    for named in &STRAYS[..4] {
        assert_contains(&err, named);
    }
    assert!(
        !err.contains('\u{1b}'),
        "a name's escapes are shown escaped: {err}"
    );
    assert_lacks(&err, "cannot create the task's records");
    let metrics = s.metrics();
    assert_contains(&metrics, "agent_harness_inbox_ignored_files 5\n");
    assert_contains(&metrics, "agent_harness_last_run_exit_code 1\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_real_task_beside_entries_that_never_run_runs_and_the_run_still_exits_1() {
    let s = scenario().answers(&["done"]).build().await;
    place_strays(&s);
    s.task("real", "Answer.");

    let out = run_bin(&s, &["run"]).await;

    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(s.done().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn entries_that_never_run_taken_away_leave_an_empty_inbox_exit_0_and_the_gauge_0() {
    let s = scenario().answers(&["done"]).build().await;
    place_strays(&s);
    let out = run_bin(&s, &["run"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let inbox = s.root().join("tasks/inbox");
    for name in STRAYS {
        if name == "folder.md" {
            std::fs::remove_dir(inbox.join(name)).unwrap();
        } else {
            std::fs::remove_file(inbox.join(name)).unwrap();
        }
    }

    let out = run_bin(&s, &["run"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_contains(s.metrics(), "agent_harness_inbox_ignored_files 0\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn past_twenty_entries_that_never_run_are_counted_not_named() {
    let s = scenario().build().await;
    let inbox = s.root().join("tasks/inbox");
    for i in 0..25 {
        std::fs::write(inbox.join(format!("stray{i:02}.txt")), "x").unwrap();
    }

    let out = run_bin(&s, &["run"]).await;

    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let named = lines_with(&err, "an inbox entry that will never run");
    assert_eq!(named.len(), 20, "{err}");
    // The first 20, in order.
    assert_contains(named[0], "stray00.txt");
    assert_contains(named[19], "stray19.txt");
    assert_lacks(&err, "stray24.txt");
    let counted = lines_with(&err, "more inbox entries that will never run");
    assert_eq!(counted.len(), 1, "{err}");
    assert_contains(counted[0], "and 5 more");
    // The summary and the metrics count every one.
    assert_contains(&err, "25 inbox entries will never run");
    assert_contains(s.metrics(), "agent_harness_inbox_ignored_files 25\n");
}
