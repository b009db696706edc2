//! Upkeep (docs/operating.md, "Commands", "The morning after" and
//! "Retention"): `requeue` brings a failed task back on its first attempt
//! without ever overwriting the inbox, and `rerun` one that succeeded;
//! retention and `prune` remove old runs by age, keep the newest of each task
//! and all of `failed/`, and trust no clock behind the records.

use agent_harness::state::RunLock;
use serde_json::{Value, json};
use wiremock::ResponseTemplate;

use crate::common::*;

/// The attempts counted beside the inbox.
const ATTEMPTS: &str = "tasks/.agent-harness-attempts.json";

/// The run lock, held as a running run holds it.
fn hold_the_lock(project: &Project) -> RunLock {
    RunLock::try_acquire(&project.root().join("tasks"))
        .unwrap()
        .unwrap()
}

/// Writes `text` to `path` in the project, making its folder.
fn put(project: &Project, path: &str, text: &str) {
    let path = project.root().join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The text of `tasks/inbox/<file>`.
fn in_inbox(project: &Project, file: &str) -> String {
    std::fs::read_to_string(project.root().join("tasks/inbox").join(file)).unwrap()
}

/// Runs the inbox again, and its one task succeeds on its first attempt.
async fn runs_again_on_its_first_attempt(project: &Project) {
    let again = run_bin(project, &["run", "--json"]).await;
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    let summary: Value = serde_json::from_str(stdout(&again).trim()).unwrap();
    assert_eq!(
        (summary["status"].as_str(), summary["attempt"].as_u64()),
        (Some("succeeded"), Some(1))
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

/// Task `flaky`, run once by the binary: the endpoint refused it and it
/// is in `failed/`; the endpoint answers the next request.
async fn flaky_failed() -> Scene {
    let s = scenario()
        .script(vec![
            ResponseTemplate::new(400).set_body_json(json!({"error": {"message": "bad"}})),
            ok(final_answer("done now")),
        ])
        .task("flaky", "Answer.")
        .build()
        .await;
    let first = run_bin(&s, &["run"]).await;
    assert_eq!(first.status.code(), Some(1), "{}", stderr(&first));
    assert_eq!(s.failed().len(), 1);
    s
}

#[tokio::test]
async fn a_failed_task_is_one_requeue_away_from_running_again_on_its_first_attempt() {
    let s = flaky_failed().await;
    // A count left behind (by hand, or an older version) is reset too.
    std::fs::write(s.root().join(ATTEMPTS), r#"{"flaky": 7}"#).unwrap();

    let out = run_bin(&s, &["requeue", "flaky"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(s.inbox(), ["flaky.md"]);
    assert!(s.failed().is_empty());
    let printed = stdout(&out);
    assert_contains(&printed, "tasks/failed/");
    assert!(printed.ends_with("tasks/inbox/flaky.md\n"), "{printed}");
    assert!(!s.root().join(ATTEMPTS).exists());
    runs_again_on_its_first_attempt(&s).await;
}

/// Task `weekly`, run once by the binary: it succeeded and is in `done/`.
async fn weekly_done() -> Scene {
    let s = scenario()
        .answers(&["done", "done again"])
        .task("weekly", "Answer.")
        .build()
        .await;
    let first = run_bin(&s, &["run"]).await;
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    assert_eq!(s.done().len(), 1);
    s
}

/// Not in done/: where it is, and what rerun takes.
#[tokio::test]
async fn rerun_of_a_misspelt_name_suggests_the_task_in_done() {
    let s = weekly_done().await;

    let out = run_bin(&s, &["rerun", "wekly"]).await;

    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_contains(stderr(&out), "did you mean wekly → weekly?");
}

#[tokio::test]
async fn a_task_that_succeeded_is_one_rerun_away_from_running_again_on_its_first_attempt() {
    let s = weekly_done().await;

    let out = run_bin(&s, &["rerun", "weekly.md"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(s.inbox(), ["weekly.md"]);
    assert!(s.done().is_empty());
    let printed = stdout(&out);
    assert_contains(&printed, "tasks/done/");
    assert!(printed.ends_with("tasks/inbox/weekly.md\n"), "{printed}");
    let out = run_bin(&s, &["rerun", "weekly"]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_contains(&err, "weekly is in the inbox");
    assert_contains(&err, "rerun takes tasks from ");
    assert!(err.trim_end().ends_with("tasks/done/"), "{err}");
    runs_again_on_its_first_attempt(&s).await;
}

#[tokio::test]
async fn rerun_takes_a_run_id_and_never_overwrites_the_inbox() {
    let s = offline().build().await;
    put(&s, "tasks/done/20260408T060000Z-scan.md", "older");
    put(&s, "tasks/done/20260409T061500Z-scan.md", "newer");
    put(&s, "tasks/done/20260409T061500Z-other.md", "other");
    s.task("other", "in the inbox already");

    let out = run_bin(&s, &["rerun", "20260409T061500Z"]).await;

    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(in_inbox(&s, "scan.md"), "newer");
    assert_contains(&err, "other.md is already in the inbox");
    assert_contains(&err, "tasks/done");
    let other = in_inbox(&s, "other.md");
    assert_eq!(other, "in the inbox already", "never overwritten");
    let left = ["20260408T060000Z-scan.md", "20260409T061500Z-other.md"];
    assert_eq!(s.done(), left);
    let lock = hold_the_lock(&s);
    let out = run_bin(&s, &["rerun", "20260408T060000Z"]).await;
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    drop(lock);
}

/// Failed runs of `scan` (the newest, `…Z-2-scan`, run `…Z-2` of a day
/// with two), and of `2026-report` and `other` in one run.
fn three_scans_a_report_and_another_failed(project: &Project) {
    failed(
        project,
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
}

#[tokio::test]
async fn requeue_takes_the_newest_file_of_a_name_and_never_overwrites_the_inbox() {
    let s = offline().build().await;
    three_scans_a_report_and_another_failed(&s);
    let newest = "task from 20260408T060000Z-2-scan.md";

    let out = run_bin(&s, &["requeue", "scan"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(in_inbox(&s, "scan.md"), newest);

    // The inbox holds scan.md now: the next one is refused, and stays.
    let out = run_bin(&s, &["requeue", "scan"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_contains(stderr(&out), "scan.md is already in the inbox");
    assert_eq!(s.failed().len(), 4);
    assert_eq!(in_inbox(&s, "scan.md"), newest, "never overwritten");

    // A run id names every task of that run; a date-like name stays whole.
    let out = run_bin(&s, &["requeue", "20260409T061500Z"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(s.inbox(), ["2026-report.md", "other.md", "scan.md"]);

    let out = run_bin(&s, &["requeue", "nothing-like-it"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_contains(stderr(&out), "no task \"nothing-like-it\" in the inbox");
}

#[tokio::test]
async fn requeue_all_failed_moves_the_newest_of_each_and_waits_for_a_running_run() {
    let s = offline().build().await;
    let files = [
        "20260401T060000Z-a.md",
        "20260402T060000Z-a.md",
        "20260403T060000Z-b.md",
    ];
    failed(&s, &files);
    let lock = hold_the_lock(&s);
    let out = bin(&s).args(["requeue", "--all-failed"]).output().unwrap();
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert_contains(stderr(&out), "another run holds the lock");
    assert!(s.inbox().is_empty());
    drop(lock);

    let out = bin(&s).args(["requeue", "--all-failed"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(s.inbox(), ["a.md", "b.md"]);
    assert_eq!(in_inbox(&s, "a.md"), "task from 20260402T060000Z-a.md");
    assert_eq!(s.failed(), ["20260401T060000Z-a.md"]);

    let out = bin(&s).args(["requeue"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "a target is required");
}

/// A run id `days` days and `hours` hours before 2026-04-09T06:15:00Z (the tests' clock).
fn run_id_before(days: i64, hours: i64) -> String {
    let t = chrono::DateTime::parse_from_rfc3339("2026-04-09T06:15:00Z").unwrap()
        - chrono::Duration::days(days)
        - chrono::Duration::hours(hours);
    t.format("%Y%m%dT%H%M%SZ").to_string()
}

fn make_runs(project: &Project, task: &str, ids: &[String]) {
    for id in ids {
        let dir = project.root().join("logs").join(task).join(id);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("summary.json"), "{}").unwrap();
    }
}

fn runs_of(project: &Project, task: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(project.root().join("logs").join(task))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_run_prunes_by_age_but_keeps_the_newest_runs_of_each_task_and_all_of_failed() {
    let s = scenario()
        .replies(vec![final_answer("ok")])
        .task("t", "Answer.")
        .build()
        .await;
    // 12 old runs of `scan` (200 days and more), 3 recent ones.
    let old: Vec<String> = (0..12).map(|i| run_id_before(200 + i, 0)).collect();
    let recent: Vec<String> = (0..3).map(|i| run_id_before(i, 1)).collect();
    make_runs(&s, "scan", &old);
    make_runs(&s, "scan", &recent);
    let evals: Vec<String> = (0..12).map(|i| run_id_before(400 + i, 0)).collect();
    make_runs(&s, "eval", &evals);
    make_runs(&s, "eval", &[run_id_before(1, 0)]);
    let done = s.root().join("tasks/done");
    let failed = s.root().join("tasks/failed");
    std::fs::create_dir_all(&done).unwrap();
    std::fs::create_dir_all(&failed).unwrap();
    let old_done = done.join(format!("{}-scan.md", run_id_before(100, 0)));
    let new_done = done.join(format!("{}-scan.md", run_id_before(10, 0)));
    let old_failed = failed.join(format!("{}-scan.md", run_id_before(300, 0)));
    for f in [&old_done, &new_done, &old_failed] {
        std::fs::write(f, "x").unwrap();
    }
    // Nothing named otherwise, and nothing behind a link, is touched.
    std::fs::write(s.root().join("logs/scan/notes.txt"), "mine").unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(outside.path().join(run_id_before(500, 0))).unwrap();
    std::os::unix::fs::symlink(outside.path(), s.root().join("logs/linked")).unwrap();
    let cfg = s.cfg();
    assert_eq!(cfg.retention.keep_days, 90);
    assert_eq!(cfg.retention.keep_runs, 10);

    assert_eq!(s.run().await.exit_code(), 0);

    let mut kept: Vec<String> = old[..7].to_vec();
    kept.extend(recent.iter().cloned());
    kept.push("notes.txt".into());
    kept.sort();
    assert_eq!(
        runs_of(&s, "scan"),
        kept,
        "the newest 10 of scan, and its other files"
    );
    let mut kept_evals: Vec<String> = evals[..9].to_vec();
    kept_evals.push(run_id_before(1, 0));
    kept_evals.sort();
    assert_eq!(runs_of(&s, "eval"), kept_evals, "evals by the same rules");
    assert_eq!(runs_of(&s, "t").len(), 1, "this run's own folder stays");
    assert!(!old_done.exists() && new_done.exists());
    assert!(old_failed.exists(), "failed/ is never pruned");
    assert!(
        outside.path().join(run_id_before(500, 0)).exists(),
        "a link is not followed"
    );
}

#[tokio::test]
async fn keep_days_0_keeps_everything_and_a_dry_run_prunes_nothing() {
    let s = scenario()
        .replies(vec![final_answer("ok"), final_answer("ok")])
        .task("t", "Answer.")
        .config("[retention]\nkeep_days = 0\nkeep_runs = 0")
        .build()
        .await;
    let old: Vec<String> = (0..15).map(|i| run_id_before(300 + i, 0)).collect();
    make_runs(&s, "scan", &old);
    s.run().await;
    assert_eq!(runs_of(&s, "scan").len(), 15);

    s.task("u", "Answer.");
    s.write_config(&s.llm().base_url(), "[retention]\nkeep_runs = 0\n");
    s.run_with(run_options(1, true)).await;
    assert_eq!(runs_of(&s, "scan").len(), 15, "a dry run deletes nothing");
}

/// A project keeping 30 days of runs, and at least 5 of each task.
fn keeping_30_days_and_5_runs() -> Scenario {
    offline().config("[retention]\nkeep_days = 30\nkeep_runs = 5")
}

/// The run id of the time `t`.
fn run_id_at(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y%m%dT%H%M%SZ").to_string()
}

/// A year of hourly runs of `hourly`, up to now.
fn a_year_of_hourly_runs(project: &Project) {
    let now = chrono::Utc::now();
    let ids: Vec<String> = (0..24 * 365)
        .map(|h| run_id_at(now - chrono::Duration::hours(h)))
        .collect();
    make_runs(project, "hourly", &ids);
}

/// How many lines of `text` start with `prefix`.
fn lines_starting(text: &str, prefix: &str) -> usize {
    text.lines().filter(|l| l.starts_with(prefix)).count()
}

#[tokio::test]
async fn prune_dry_run_lists_what_prune_removes_and_bounds_a_year_of_hourly_runs() {
    let s = keeping_30_days_and_5_runs().build().await;
    a_year_of_hourly_runs(&s);

    let out = bin(&s).args(["prune", "--dry-run"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let would = lines_starting(&stdout(&out), "would remove ");
    assert_eq!(runs_of(&s, "hourly").len(), 24 * 365, "nothing removed yet");

    let out = bin(&s).arg("prune").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let removed = lines_starting(&stdout(&out), "removed ");
    assert_eq!(removed, would, "prune removes what --dry-run listed");
    let left = runs_of(&s, "hourly").len();
    assert!(
        (30 * 24..=30 * 24 + 1).contains(&left),
        "30 days of hourly runs are left, not a year: {left}"
    );
    assert_eq!(left + removed, 24 * 365);
}

#[tokio::test]
async fn prune_waits_for_a_running_run() {
    let s = keeping_30_days_and_5_runs().build().await;
    a_year_of_hourly_runs(&s);

    let lock = hold_the_lock(&s);
    let out = bin(&s).arg("prune").output().unwrap();
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    drop(lock);
    assert_eq!(runs_of(&s, "hourly").len(), 24 * 365, "nothing removed");
}

#[tokio::test]
async fn a_clock_behind_the_records_prunes_nothing_and_says_why() {
    let s = offline()
        .config("[retention]\nkeep_days = 1\nkeep_runs = 0")
        .build()
        .await;
    let now = chrono::Utc::now();
    let old = run_id_at(now - chrono::Duration::days(30));
    let ahead = run_id_at(now + chrono::Duration::days(2));
    make_runs(&s, "t", &[old.clone(), ahead.clone()]);

    let out = bin(&s).arg("prune").output().unwrap();

    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_contains(stderr(&out), "lies ahead of the clock");
    assert_eq!(stdout(&out), "");
    let mut both = vec![old, ahead];
    both.sort();
    assert_eq!(runs_of(&s, "t"), both, "nothing removed");
}

#[tokio::test]
async fn a_file_name_shortened_to_fit_is_not_requeued_under_a_guessed_name() {
    let s = offline().build().await;
    let long = "a".repeat(300);
    let file = agent_harness::inbox::fit_file_name("20260409T061500Z-", &long, ".md");
    assert!(file.len() <= 255 && file.contains('~'));
    failed(&s, &[&file]);

    let out = bin(&s).args(["requeue", "--all-failed"]).output().unwrap();

    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_contains(stderr(&out), "was shortened to fit 255 bytes");
    assert!(s.inbox().is_empty());
    assert_eq!(s.failed(), [file]);
}
