//! Recurring tasks (docs/tasks.md, "Recurring tasks"): due once per slot,
//! missed slots collapsed, never on first sight, the slot in the body and the
//! summary, retried until max_attempts, read in the configured time zone.

use std::sync::{Arc, Mutex};

use agent_harness::agent::StopReason;
use agent_harness::app::run_inbox;
use agent_harness::drain::{RunOutcome, Tally};
use agent_harness::records::{Status, Summary};
use chrono::{DateTime, TimeZone, Utc};
use serde_json::{Value, json};

use crate::common::*;

/// A clock the test moves.
struct Clock(Arc<Mutex<DateTime<Utc>>>);

impl Clock {
    fn at(t: DateTime<Utc>) -> Clock {
        Clock(Arc::new(Mutex::new(t)))
    }
    fn set(&self, t: DateTime<Utc>) {
        *self.0.lock().unwrap() = t;
    }
}

fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap()
}

/// Dates the recurring task file `name` ahead of every clock here, so
/// that it counts as first seen when a run first sees it.
fn first_seen_when_run(project: &Project, name: &str) {
    dated(project, name, utc(2040, 1, 1, 0, 0, 0));
}

/// Sets the file time of the recurring task file `name` to `t`.
fn dated(project: &Project, name: &str, t: DateTime<Utc>) {
    std::fs::File::options()
        .write(true)
        .open(project.root().join(format!("tasks/recurring/{name}.md")))
        .unwrap()
        .set_modified(t.into())
        .unwrap();
}

/// One `run` at the clock's time; the summaries of what it ran.
async fn run_at(scene: &Scene, clock: &Clock) -> (RunOutcome, Vec<Summary>) {
    let cfg = scene.cfg();
    let mut h = scene.deps();
    let t = clock.0.clone();
    h.clock = Arc::new(move || *t.lock().unwrap());
    let before = summaries(&cfg);
    let outcome = run_inbox(&cfg, &h, &run_options(1, false)).await.unwrap();
    let after = summaries(&cfg);
    (outcome, after.into_iter().skip(before.len()).collect())
}

/// Every summary under logs/, oldest run first.
fn summaries(cfg: &agent_harness::config::Config) -> Vec<Summary> {
    let mut all = Vec::new();
    let Ok(tasks) = std::fs::read_dir(&cfg.paths.logs) else {
        return all;
    };
    for task in tasks.flatten().filter(|t| t.path().is_dir()) {
        for run in std::fs::read_dir(task.path()).unwrap().flatten() {
            if let Ok(text) = std::fs::read_to_string(run.path().join("summary.json")) {
                all.push(serde_json::from_str::<Summary>(&text).unwrap());
            }
        }
    }
    all.sort_by_key(|s| s.run_id.clone());
    all
}

/// A recurring task's text: `body` on the schedule `cron`.
fn scheduled(cron: &str, body: &str) -> String {
    format!("+++\nschedule = \"{cron}\"\n+++\n{body}")
}

/// Writes the recurring state file.
fn write_state(project: &Project, state: &Value) {
    std::fs::write(state_file(project), state.to_string()).unwrap();
}

/// A task's state: seen since 08:00 on the tests' day, its 09:00 slot done.
fn done_at_nine() -> Value {
    json!({"since": "2026-04-09T08:00:00Z", "done": "2026-04-09T09:00:00Z"})
}

fn ran(outcome: &RunOutcome) -> usize {
    match outcome {
        RunOutcome::Finished(t) => t.succeeded + t.failed + t.retry_later + t.interrupted,
        other => panic!("the run did not finish: {other:?}"),
    }
}

#[tokio::test]
async fn every_minute_runs_once_per_minute_and_not_on_first_sight() {
    let s = scenario()
        .replies(vec![final_answer("a"), final_answer("b")])
        .recurring(
            "tick",
            "+++\nschedule = \"* * * * *\"\n+++\nTick for {{date}}.",
        )
        .build()
        .await;
    first_seen_when_run(&s, "tick");
    let clock = Clock::at(utc(2026, 4, 9, 12, 0, 30));

    let (first, _) = run_at(&s, &clock).await;
    assert_eq!(
        ran(&first),
        0,
        "first sight: due at its next scheduled time, not at once"
    );
    clock.set(utc(2026, 4, 9, 12, 0, 50));
    assert_eq!(
        ran(&run_at(&s, &clock).await.0),
        0,
        "no slot since it was seen"
    );

    clock.set(utc(2026, 4, 9, 12, 1, 10));
    let (third, runs) = run_at(&s, &clock).await;
    assert_eq!(
        third,
        RunOutcome::Finished(Tally {
            succeeded: 1,
            ..Tally::default()
        })
    );
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].task, "tick");
    assert!(runs[0].recurring);
    assert_eq!(runs[0].slot.as_deref(), Some("2026-04-09T12:01:00+00:00"));
    clock.set(utc(2026, 4, 9, 12, 1, 40));
    assert_eq!(
        ran(&run_at(&s, &clock).await.0),
        0,
        "the 12:01 slot is done: not twice"
    );

    clock.set(utc(2026, 4, 9, 12, 2, 5));
    assert_eq!(
        ran(&run_at(&s, &clock).await.0),
        1,
        "the next minute's slot"
    );
    assert_eq!(s.requests().await.len(), 2);
    assert!(
        s.root().join("tasks/recurring/tick.md").exists(),
        "never moved"
    );
    assert!(s.done().is_empty() && s.failed().is_empty());
}

#[tokio::test]
async fn a_week_of_missed_daily_slots_is_one_run_with_the_slot_in_its_body() {
    let s = scenario()
        .replies(vec![final_answer("scanned"), final_answer("again")])
        .recurring(
            "scan",
            "+++\nschedule = \"@daily\"\n+++\nScan the week up to {{date}}; last good scan: {{last_success}}.",
        )
        .build()
        .await;
    first_seen_when_run(&s, "scan");
    let clock = Clock::at(utc(2026, 4, 1, 10, 0, 0));
    run_at(&s, &clock).await;

    // The machine was off for a week.
    clock.set(utc(2026, 4, 8, 10, 0, 0));
    let (outcome, runs) = run_at(&s, &clock).await;
    assert_eq!(ran(&outcome), 1, "seven missed slots, one run");
    assert_eq!(runs[0].slot.as_deref(), Some("2026-04-08T00:00:00+00:00"));
    clock.set(utc(2026, 4, 8, 23, 0, 0));
    assert_eq!(ran(&run_at(&s, &clock).await.0), 0);
    clock.set(utc(2026, 4, 9, 0, 30, 0));
    assert_eq!(ran(&run_at(&s, &clock).await.0), 1);

    let asked: Vec<String> = s
        .requests()
        .await
        .iter()
        .map(|r| messages(r).last().unwrap().content.to_string())
        .collect();
    assert_eq!(
        asked,
        [
            "Scan the week up to 2026-04-08; last good scan: never.",
            "Scan the week up to 2026-04-09; last good scan: 2026-04-08."
        ]
    );
}

#[tokio::test]
async fn a_retryable_failure_keeps_its_slot_due_until_max_attempts() {
    let s = scenario()
        .script(vec![
            wiremock::ResponseTemplate::new(500)
                .set_body_json(json!({"error": {"message": "busy"}})),
        ])
        .recurring("flaky", "+++\nschedule = \"@hourly\"\n+++\nDo it.")
        .config("[limits]\nmax_attempts = 2")
        .build()
        .await;
    first_seen_when_run(&s, "flaky");
    let clock = Clock::at(utc(2026, 4, 9, 9, 30, 0));
    run_at(&s, &clock).await;

    clock.set(utc(2026, 4, 9, 10, 5, 0));
    let (first, runs) = run_at(&s, &clock).await;
    assert_eq!(first.exit_code(), 75, "{first:?}");
    assert_eq!(
        (runs[0].status, runs[0].retryable, runs[0].attempt),
        (Status::Failed, true, 1)
    );
    assert!(
        runs[0].error.as_deref().unwrap().contains("stays due"),
        "{:?}",
        runs[0]
    );
    clock.set(utc(2026, 4, 9, 10, 20, 0));
    let (second, runs) = run_at(&s, &clock).await;
    assert_eq!(ran(&second), 1, "the 10:00 slot is still due");
    assert_eq!(runs[0].slot.as_deref(), Some("2026-04-09T10:00:00+00:00"));
    assert_eq!(
        second.exit_code(),
        1,
        "the last attempt fails for good: {second:?}"
    );
    assert_eq!((runs[0].retryable, runs[0].attempt), (false, 2));
    assert!(
        runs[0]
            .error
            .as_deref()
            .unwrap()
            .contains("gave up on the slot"),
        "{:?}",
        runs[0]
    );
    clock.set(utc(2026, 4, 9, 10, 40, 0));
    assert_eq!(
        ran(&run_at(&s, &clock).await.0),
        0,
        "given up after max_attempts = 2"
    );
    clock.set(utc(2026, 4, 9, 11, 1, 0));
    assert_eq!(
        ran(&run_at(&s, &clock).await.0),
        1,
        "the next slot is a new start"
    );
}

#[tokio::test]
async fn the_schedule_is_read_in_the_configured_time_zone() {
    let s = scenario()
        .replies(vec![final_answer("morning")])
        .recurring(
            "morning",
            "+++\nschedule = \"0 6 * * *\"\n+++\nGood morning, {{date}}.",
        )
        .config("[schedule]\ntimezone = \"America/New_York\"")
        .build()
        .await;
    first_seen_when_run(&s, "morning");
    let clock = Clock::at(utc(2026, 4, 9, 3, 0, 0));
    run_at(&s, &clock).await;
    // 06:00 in New York (EDT, UTC-4) is 10:00 UTC.
    clock.set(utc(2026, 4, 9, 9, 59, 0));
    assert_eq!(ran(&run_at(&s, &clock).await.0), 0);
    clock.set(utc(2026, 4, 9, 10, 0, 30));
    let (_, runs) = run_at(&s, &clock).await;
    assert_eq!(runs[0].slot.as_deref(), Some("2026-04-09T10:00:00+00:00"));
}

#[tokio::test]
async fn schedule_belongs_to_recurring_tasks_only() {
    let scene = scenario()
        .replies(vec![final_answer("x")])
        .task("inboxed", "+++\nschedule = \"@daily\"\n+++\nDo it.")
        .ran()
        .await;
    let s = scene.summary("inboxed");
    assert_eq!(
        (s.status, s.stop_reason),
        (Status::Failed, StopReason::InvalidTask)
    );
    assert!(
        s.error.unwrap().contains("only a recurring task"),
        "schedule in the inbox"
    );
    assert!(scene.requests().await.is_empty());
}

#[tokio::test]
async fn check_prints_when_each_recurring_task_is_due_and_names_a_bad_schedule() {
    let s = offline()
        .config("[schedule]\ntimezone = \"Europe/Berlin\"")
        .recurring("weekly", "+++\nschedule = \"0 6 * * MON\"\n+++\nScan.")
        .recurring("broken", "+++\nschedule = \"61 * * * *\"\n+++\nScan.")
        .recurring("six", "+++\nschedule = \"0 0 6 * * MON\"\n+++\nScan.")
        .recurring("none", "Scan.")
        .build()
        .await;
    for name in ["weekly", "broken", "six", "none"] {
        first_seen_when_run(&s, name);
    }

    let out = bin(&s).arg("check").output().unwrap();

    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    let weekly = text
        .lines()
        .find(|l| l.contains("recurring weekly: next due"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        weekly.contains("T06:00:00+0"),
        "read in Berlin time: {weekly}"
    );
    assert_contains(
        &text,
        "broken.md: line 2: frontmatter: schedule = \"61 * * * *\": ",
    );
    assert_contains(
        &text,
        "six.md: line 2: frontmatter: schedule = \"0 0 6 * * MON\": expected five cron fields",
    );
    assert_contains(
        &text,
        "none.md: frontmatter: schedule: a recurring task needs one",
    );
    assert!(text.contains("1 recurring task(s) scheduled"), "{text}");

    s.write_config(
        "http://127.0.0.1:9/v1",
        "[schedule]\ntimezone = \"Mars/Olympus\"\n",
    );
    let out = bin(&s).arg("check").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_contains(stderr(&out), "[schedule] timezone");
}

#[tokio::test]
async fn run_task_recurring_runs_it_now_and_leaves_its_slots_alone() {
    let s = scenario()
        .replies(vec![final_answer("now"), final_answer("later")])
        .recurring("scan", "+++\nschedule = \"@daily\"\n+++\nScan {{date}}.")
        .build()
        .await;
    first_seen_when_run(&s, "scan");

    let out = run_bin(&s, &["run-task", "--recurring", "scan"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "now\n");
    assert!(
        !s.root()
            .join("tasks/.agent-harness-recurring.json")
            .exists(),
        "no slot state written"
    );
    let out = run_bin(&s, &["run-task", "--recurring", "nothing"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// The weekly task of docs/tasks.md, "Recurring tasks", under an hourly timer.
#[tokio::test]
async fn the_documented_weekly_task_under_an_hourly_timer_runs_once_a_week_and_runs_lists_it() {
    let scene = scenario()
        .replies(vec![final_answer("week 1"), final_answer("week 2")])
        .recurring(
            "weekly-scan",
            "+++\nschedule = \"0 6 * * MON\"\n+++\n# Weekly research scan ({{date}})\nFind the notes changed since {{last_success}}.",
        )
        .config("[schedule]\ntimezone = \"Europe/Berlin\"")
        .build()
        .await;
    first_seen_when_run(&scene, "weekly-scan");
    // An hourly timer, 7 minutes past each hour, for two weeks from Wednesday 2026-04-01.
    let clock = Clock::at(utc(2026, 4, 1, 0, 7, 0));
    let mut slots = Vec::new();
    for hour in 0..14 * 24 {
        clock.set(utc(2026, 4, 1, 0, 7, 0) + chrono::Duration::hours(hour));
        for s in run_at(&scene, &clock).await.1 {
            slots.push(s.slot.unwrap());
        }
    }
    // Mondays 06:00 in Berlin (CEST, UTC+2).
    assert_eq!(
        slots,
        ["2026-04-06T04:00:00+00:00", "2026-04-13T04:00:00+00:00"]
    );

    let out = bin(&scene)
        .args(["runs", "--task", "weekly-scan", "--json"])
        .output()
        .unwrap();
    let listed: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed.len(), 2, "{}", stdout(&out));
    assert!(listed.iter().all(|s| s["recurring"] == true));
}

fn state_file(project: &Project) -> std::path::PathBuf {
    project.root().join("tasks/.agent-harness-recurring.json")
}

fn read_state(project: &Project) -> Value {
    serde_json::from_str(&std::fs::read_to_string(state_file(project)).unwrap()).unwrap()
}

#[tokio::test]
async fn a_slot_whose_task_killed_the_process_max_attempts_times_is_given_up_and_the_rest_run() {
    let s = scenario()
        .replies(vec![final_answer("other ran")])
        .recurring("a-killer", "+++\nschedule = \"@hourly\"\n+++\nEat memory.")
        .recurring("b-other", "+++\nschedule = \"@hourly\"\n+++\nDo it.")
        .config("[limits]\nmax_attempts = 2")
        .build()
        .await;
    first_seen_when_run(&s, "a-killer");
    first_seen_when_run(&s, "b-other");
    // As runs leave it when the process dies in the task: both attempts at
    // the 10:00 slot counted before the task started, none settled.
    std::fs::write(
        state_file(&s),
        json!({
            "a-killer": {"since": "2026-04-09T08:00:00Z", "done": "2026-04-09T09:00:00Z",
                         "pending": "2026-04-09T10:00:00Z", "attempts": 2},
            "b-other": {"since": "2026-04-09T08:00:00Z", "done": "2026-04-09T09:00:00Z"}
        })
        .to_string(),
    )
    .unwrap();
    let clock = Clock::at(utc(2026, 4, 9, 10, 30, 0));

    let (outcome, runs) = run_at(&s, &clock).await;

    assert_eq!(outcome.exit_code(), 1, "{outcome:?}");
    assert_eq!(runs.len(), 2);
    let run = |task: &str| runs.iter().find(|r| r.task == task).unwrap();
    assert_eq!(
        run("a-killer").stop_reason,
        StopReason::InternalError,
        "the slot given up has a record saying why"
    );
    let why = run("a-killer").error.as_deref().unwrap();
    assert!(why.contains("killed"), "{why}");
    assert_eq!(run("b-other").status, Status::Succeeded);
    assert_eq!(
        s.requests().await.len(),
        1,
        "the killer did not run a third time"
    );
    assert_eq!(read_state(&s)["a-killer"]["done"], "2026-04-09T10:00:00Z");
    clock.set(utc(2026, 4, 9, 10, 50, 0));
    assert_eq!(ran(&run_at(&s, &clock).await.0), 0);
}

#[tokio::test]
async fn the_attempt_is_counted_before_the_task_starts_and_given_back_when_it_is_not_its_fault() {
    let bad_key = wiremock::ResponseTemplate::new(401)
        .set_body_json(json!({"error": {"message": "bad key"}}));
    let s = scenario()
        .script(vec![bad_key])
        .recurring("t", "+++\nschedule = \"@hourly\"\n+++\nDo it.")
        .build()
        .await;
    first_seen_when_run(&s, "t");
    write_state(&s, &json!({"t": done_at_nine()}));
    let clock = Clock::at(utc(2026, 4, 9, 10, 30, 0));

    let (outcome, runs) = run_at(&s, &clock).await;

    // A refused key is a setup fault.
    assert_eq!(outcome.exit_code(), 2, "{outcome:?}");
    assert_eq!(runs[0].stop_reason, StopReason::SetupFault);
    let state = read_state(&s);
    assert_eq!(
        (&state["t"]["pending"], &state["t"]["attempts"]),
        (&json!("2026-04-09T10:00:00Z"), &json!(0)),
        "counted, then given back: {state}"
    );
}

#[tokio::test]
async fn a_file_put_there_before_a_slot_runs_for_it_at_the_next_run() {
    let s = scenario()
        .replies(vec![final_answer("morning")])
        .recurring("daily", "+++\nschedule = \"0 6 * * *\"\n+++\nGood morning.")
        .build()
        .await;
    dated(&s, "daily", utc(2026, 4, 9, 5, 30, 0));
    let clock = Clock::at(utc(2026, 4, 9, 6, 5, 0));

    let (_, runs) = run_at(&s, &clock).await;

    assert_eq!(runs.len(), 1, "added at 05:30, the 06:00 slot is its first");
    assert_eq!(runs[0].slot.as_deref(), Some("2026-04-09T06:00:00+00:00"));
}

/// An hourly recurring task `r`, first seen by the first run, and a
/// model that answers "inbox ran".
async fn hourly_r() -> Scene {
    let s = scenario()
        .answers(&["inbox ran"])
        .recurring("r", "+++\nschedule = \"@hourly\"\n+++\nDo it.")
        .build()
        .await;
    first_seen_when_run(&s, "r");
    s
}

#[tokio::test]
async fn an_unlisted_recurring_folder_forgets_nothing() {
    let s = hourly_r().await;
    let seen = json!({"r": done_at_nine()});
    write_state(&s, &seen);
    // The folder is gone for a run (an unmounted disk): no slot is forgotten.
    let away = s.root().join("tasks/recurring-away");
    std::fs::rename(s.root().join("tasks/recurring"), &away).unwrap();
    let clock = Clock::at(utc(2026, 4, 9, 9, 30, 0));

    run_at(&s, &clock).await;

    assert_eq!(read_state(&s), seen);
}

#[tokio::test]
async fn the_state_is_no_reason_to_stop_the_inbox() {
    let s = hourly_r().await;
    // A state file that cannot be written keeps no inbox task from running,
    // and it is no silent success: no recurring task can run until it is.
    std::fs::create_dir(state_file(&s)).unwrap();
    s.task("t", "Answer.");
    let clock = Clock::at(utc(2026, 4, 9, 9, 30, 0));

    let (outcome, runs) = run_at(&s, &clock).await;

    assert_eq!(outcome.exit_code(), 1, "{outcome:?}");
    assert_eq!(runs[0].task, "t");
    let RunOutcome::Finished(tally) = outcome else {
        panic!()
    };
    assert_contains(&tally.problems[0], "the recurring state cannot be saved");
}

/// A task body naming its date and its last success.
const DATED: &str = "For {{date}}, since {{last_success}}.";

#[tokio::test]
async fn a_clock_that_went_back_counts_from_now_and_a_recurring_run_replays() {
    let s = scenario()
        .answers(&["ran"])
        .recurring("r", &scheduled("@daily", DATED))
        .build()
        .await;
    first_seen_when_run(&s, "r");
    let a_year_ahead = json!({"r": {"since": "2026-01-01T00:00:00Z", "done": "2027-04-10T00:00:00Z",
                     "last_success": "2027-04-10"}});
    write_state(&s, &a_year_ahead);
    let clock = Clock::at(utc(2026, 4, 9, 12, 0, 0));
    assert_eq!(ran(&run_at(&s, &clock).await.0), 0, "counted from now");
    clock.set(utc(2026, 4, 10, 1, 0, 0));
    let (_, runs) = run_at(&s, &clock).await;
    // The next slot after now runs, not a year later.
    assert_eq!(runs.len(), 1);
    let dir = s.root().join("logs/r").join(&runs[0].run_id);

    let out = run_bin(&s, &["replay", dir.to_str().unwrap()]).await;
    let printed = format!("{}{}", stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(0), "{printed}");
}

#[tokio::test]
async fn the_hour_that_comes_twice_in_autumn_runs_its_slot_once() {
    let s = scenario()
        .answers(&["once", "twice?"])
        .recurring("night", &scheduled("30 2,14 * * *", "Night shift."))
        .config("[schedule]\ntimezone = \"Europe/Berlin\"")
        .build()
        .await;
    first_seen_when_run(&s, "night");
    let clock = Clock::at(utc(2026, 10, 24, 13, 0, 0));
    run_at(&s, &clock).await;
    // 2026-10-25: 02:30 CEST is 00:30Z; the clocks go back at 01:00Z, and
    // 02:30 CET (01:30Z) is the same wall-clock time again.
    clock.set(utc(2026, 10, 25, 0, 45, 0));
    let (_, runs) = run_at(&s, &clock).await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].slot.as_deref(), Some("2026-10-25T00:30:00+00:00"));
    clock.set(utc(2026, 10, 25, 1, 45, 0));
    assert_eq!(ran(&run_at(&s, &clock).await.0), 0, "02:30 once, not twice");
    clock.set(utc(2026, 10, 25, 13, 45, 0));
    assert_eq!(ran(&run_at(&s, &clock).await.0), 1, "14:30 as usual");
}

#[tokio::test]
async fn a_slot_whose_attempt_cannot_be_saved_is_not_run_and_the_run_says_so() {
    let s = scenario()
        .replies(vec![final_answer("inbox ran"), final_answer("slot ran")])
        .recurring("daily", "+++\nschedule = \"0 6 * * *\"\n+++\nGood morning.")
        .task("t", "Answer.")
        .build()
        .await;
    dated(&s, "daily", utc(2026, 4, 9, 5, 30, 0));
    std::fs::create_dir(state_file(&s)).unwrap();
    let clock = Clock::at(utc(2026, 4, 9, 6, 5, 0));

    let (outcome, runs) = run_at(&s, &clock).await;

    assert_eq!(
        outcome.exit_code(),
        1,
        "unsaved, it would run again every run: {outcome:?}"
    );
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].task, "t", "the inbox still ran");
    assert_eq!(s.requests().await.len(), 1, "the recurring task did not");
}

/// A recurring file that cannot run gets a record saying why, and the run
/// exits 1 — once for each version of the file, not every run (README, Exit
/// codes).
#[tokio::test]
async fn a_broken_recurring_file_is_recorded_once_per_version_and_exits_1() {
    let s = scenario()
        .replies(vec![final_answer("ran")])
        .recurring("every5", "+++\nschedule = \"every 5 minutes\"\n+++\nDo it.")
        .build()
        .await;
    first_seen_when_run(&s, "every5");
    let clock = Clock::at(utc(2026, 4, 9, 9, 30, 0));

    let (first, runs) = run_at(&s, &clock).await;

    assert_eq!(first.exit_code(), 1, "{first:?}");
    assert_eq!(runs.len(), 1);
    assert_eq!(
        (runs[0].status, runs[0].stop_reason),
        (Status::Failed, StopReason::InvalidTask)
    );
    let error = runs[0].error.as_deref().unwrap();
    assert!(error.contains("schedule"), "{error}");
    assert!(s.requests().await.is_empty(), "nothing was asked");
    assert_eq!(
        std::fs::read_dir(s.root().join("tasks/recurring"))
            .unwrap()
            .count(),
        1,
        "the file stays where it is"
    );

    clock.set(utc(2026, 4, 9, 10, 30, 0));
    let (again, runs) = run_at(&s, &clock).await;
    assert_eq!(
        (again.exit_code(), runs.len()),
        (0, 0),
        "said once: {again:?}"
    );

    // A new version of the file, still broken, is said again.
    s.recurring("every5", "+++\nschedule = \"every hour\"\n+++\nDo it.");
    dated(&s, "every5", utc(2040, 1, 2, 0, 0, 0));
    let (third, runs) = run_at(&s, &clock).await;
    assert_eq!((third.exit_code(), runs.len()), (1, 1), "{third:?}");
}

/// A state file that cannot be read (garbage, a FIFO) never re-runs a slot
/// that may be done already: every task waits for its next slot, as the
/// warning says (docs/untrusted-input.md).
#[tokio::test]
async fn an_unreadable_state_never_reruns_a_slot_that_may_be_done() {
    for plant in ["garbage", "fifo"] {
        let s = scenario()
            .replies(vec![final_answer("ran")])
            .recurring("daily", "+++\nschedule = \"0 6 * * *\"\n+++\nGood morning.")
            .build()
            .await;
        // Put there long ago: without a state, its 06:00 slot would be due.
        dated(&s, "daily", utc(2026, 1, 1, 0, 0, 0));
        match plant {
            "garbage" => std::fs::write(state_file(&s), "{not json").unwrap(),
            _ => rustix::fs::mknodat(
                rustix::fs::CWD,
                state_file(&s),
                rustix::fs::FileType::Fifo,
                rustix::fs::Mode::from_raw_mode(0o600),
                0,
            )
            .unwrap(),
        }
        let clock = Clock::at(utc(2026, 4, 9, 6, 30, 0));

        let (outcome, runs) = run_at(&s, &clock).await;

        assert_eq!(
            (outcome.exit_code(), runs.len()),
            (0, 0),
            "{plant}: {outcome:?}"
        );
        assert!(s.requests().await.is_empty(), "{plant}");
        // The state was written anew: the next slot runs.
        clock.set(utc(2026, 4, 10, 6, 30, 0));
        assert_eq!(run_at(&s, &clock).await.1.len(), 1, "{plant}");
    }
}

#[tokio::test]
async fn a_slot_the_budget_leaves_unstarted_stays_due_for_the_next_run() {
    let s = scenario()
        .by_progress(vec![ok(final_answer("ok"))])
        .recurring(
            "tick",
            "+++\nschedule = \"* * * * *\"\n+++\nTick for {{date}}.",
        )
        .config("[budget]\ntokens_per_run = 100")
        .build()
        .await;
    first_seen_when_run(&s, "tick");
    let clock = Clock::at(utc(2026, 4, 9, 12, 0, 30));
    assert_eq!(ran(&run_at(&s, &clock).await.0), 0, "first sight");
    s.task("first", "Answer.");
    clock.set(utc(2026, 4, 9, 12, 1, 10));

    // The inbox task spends 160 tokens of the run's 100: the slot waits.
    let (paused, runs) = run_at(&s, &clock).await;

    let RunOutcome::Finished(tally) = paused else {
        panic!("{paused:?}")
    };
    assert_eq!((tally.succeeded, tally.not_started), (1, 1));
    assert!(
        tally
            .budget_exhausted
            .as_deref()
            .is_some_and(|why| why.contains("tokens_per_run = 100")),
        "{tally:?}"
    );
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].task, "first");
    clock.set(utc(2026, 4, 9, 12, 1, 40));
    let (next, runs) = run_at(&s, &clock).await;
    assert_eq!(ran(&next), 1, "the 12:01 slot stayed due");
    assert_eq!(runs[0].slot.as_deref(), Some("2026-04-09T12:01:00+00:00"));
}
