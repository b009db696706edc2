//! Nothing to do, said truthfully (docs/tasks.md, "Task files"): an inbox entry
//! that will never run (`color.txt`, `Color.MD`, a folder) is logged by every
//! run, counted in the metrics, and makes the run exit 1 — never "the inbox is
//! empty" with exit 0.

use crate::common::*;

#[tokio::test(flavor = "multi_thread")]
async fn entries_that_never_run_are_named_counted_and_exit_1() {
    let s = scenario().replies(vec![final_answer("done")]).build().await;
    let inbox = s.root().join("tasks/inbox");
    std::fs::write(inbox.join("color.txt"), "What colour?").unwrap();
    std::fs::write(inbox.join("Color.MD"), "What colour?").unwrap();
    std::fs::create_dir(inbox.join("folder.md")).unwrap();
    // Names no task may have: never run, said the same way.
    std::fs::write(inbox.join("compare v1..v2.md"), "x").unwrap();
    std::fs::write(inbox.join("bell\u{7}\u{1b}]0;pwned.md"), "x").unwrap();

    let out = run_bin(&s, &["run"]).await;

    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(!err.contains("the inbox is empty"), "{err}");
    assert!(
        err.contains("5 inbox entries will never run")
            && err.contains("color.txt")
            && err.contains("Color.MD")
            && err.contains("folder.md")
            && err.contains("compare v1..v2.md"),
        "{err}"
    );
    assert!(
        !err.contains('\u{1b}'),
        "a name's escapes are shown escaped: {err}"
    );
    assert!(!err.contains("cannot create the task's records"), "{err}");
    let metrics = std::fs::read_to_string(s.root().join("logs/agent-harness.prom")).unwrap();
    assert!(
        metrics.contains("agent_harness_inbox_ignored_files 5\n")
            && metrics.contains("agent_harness_last_run_exit_code 1\n"),
        "{metrics}"
    );

    // With a real task beside them the task runs, and the run still says so.
    s.task("real", "Answer.");
    let out = run_bin(&s, &["run"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(s.done().len(), 1);
    // Taken away, the inbox is truly empty: exit 0, the gauge 0.
    for name in [
        "color.txt",
        "Color.MD",
        "compare v1..v2.md",
        "bell\u{7}\u{1b}]0;pwned.md",
    ] {
        std::fs::remove_file(inbox.join(name)).unwrap();
    }
    std::fs::remove_dir(inbox.join("folder.md")).unwrap();
    let out = run_bin(&s, &["run"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let metrics = std::fs::read_to_string(s.root().join("logs/agent-harness.prom")).unwrap();
    assert_contains(&metrics, "agent_harness_inbox_ignored_files 0\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn past_twenty_entries_that_never_run_are_counted_not_named() {
    let s = scenario().build().await;
    let inbox = s.root().join("tasks/inbox");
    for i in 0..25 {
        std::fs::write(inbox.join(format!("stray{i:02}.txt")), "x").unwrap();
    }

    let out = run_bin(&s, &["run"]).await;

    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    let named: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("an inbox entry that will never run"))
        .collect();
    assert_eq!(named.len(), 20, "{err}");
    assert!(
        named[0].contains("stray00.txt") && named[19].contains("stray19.txt"),
        "the first 20, in order: {err}"
    );
    assert!(!err.contains("stray24.txt"), "{err}");
    let counted: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("more inbox entries that will never run"))
        .collect();
    assert_eq!(counted.len(), 1, "{err}");
    assert!(counted[0].contains("and 5 more"), "{err}");
    // The summary and the metrics count every one.
    assert!(err.contains("25 inbox entries will never run"), "{err}");
    let metrics = std::fs::read_to_string(s.root().join("logs/agent-harness.prom")).unwrap();
    assert_contains(&metrics, "agent_harness_inbox_ignored_files 25\n");
}
