//! Spend within a budget (docs/budget-and-traces.md, "Budget"): a `[budget]`
//! limit reached pauses the queue — the task in flight ends `interrupted` /
//! `budget_exhausted` and stays in the inbox to resume from its records,
//! nothing further starts, the run exits 75 naming the limit and when it resets
//! — and never fails a task. The ledger beside the inbox is hostile input.

use std::time::Duration;

use agent_harness::agent::StopReason;
use agent_harness::drain::RunOutcome;
use agent_harness::records::{Status, Summary};
use agent_harness::state::DaySpend;
use serde_json::json;

use crate::common::fake_runpod::{FakeRunpod, completed, job};
use crate::common::*;

const LEDGER: &str = "tasks/.agent-harness-budget.json";

/// The tasks in `done/`, without the run id a filed name begins with.
fn done(project: &Project) -> Vec<String> {
    let mut names: Vec<String> = project
        .done()
        .iter()
        .map(|n| {
            let rest = n.split_once('-').map_or(n.as_str(), |(_, r)| r);
            match rest.split_once('-') {
                Some((k, r)) if k.bytes().all(|b| b.is_ascii_digit()) => r.to_string(),
                _ => rest.to_string(),
            }
        })
        .collect();
    names.sort();
    names
}

/// A ledger saying `day` spent `tokens` and `gpu_ms`.
fn plant_ledger(project: &Project, day: impl std::fmt::Display, tokens: u64, gpu_ms: u64) {
    std::fs::write(
        project.root().join(LEDGER),
        format!(r#"{{"day":"{day}","tokens":{tokens},"gpu_ms":{gpu_ms}}}"#),
    )
    .unwrap();
}

/// A suite of one task expecting "hello", in `suite/`.
fn hello_suite(project: &Project) {
    let suite = project.root().join("suite");
    std::fs::create_dir_all(&suite).unwrap();
    std::fs::write(
        suite.join("hi.md"),
        "+++\n[expect]\nanswer_matches = \"hello\"\n+++\nSay hello.",
    )
    .unwrap();
}

/// The ledger beside the inbox, read as the program's own `DaySpend`.
fn ledger(project: &Project) -> DaySpend {
    let text = std::fs::read_to_string(project.root().join(LEDGER)).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// `run --json`'s lines, each a task's summary.
fn json_lines(out: &std::process::Output) -> Vec<Summary> {
    stdout(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn a_run_limit_met_mid_inbox_pauses_the_queue_and_fails_nothing() {
    let s = scenario()
        .by_progress(two_turns())
        .config("[budget]\ntokens_per_run = 400")
        .task("a", "Look it up, then answer.")
        .task("b", "Look it up, then answer.")
        .task("c", "Look it up, then answer.")
        .build()
        .await;

    let out = run_bin(&s, &["run", "--json"]).await;

    // a: 120 + 160 = 280; b's first request brings the run to 400, its
    // second is never sent; c never starts.
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("[budget] tokens_per_run = 400 reached (400 tokens spent in this run)")
            && err.contains("resets when the next run starts"),
        "{err}"
    );
    assert_eq!(done(&s), ["a.md"]);
    assert_eq!(s.inbox(), ["b.md", "c.md"]);
    assert!(s.failed().is_empty());
    assert_eq!(s.requests().await.len(), 3);
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 2, "c never started: {lines:?}");
    assert_eq!(
        (
            lines[1].task.as_str(),
            lines[1].status,
            lines[1].stop_reason
        ),
        ("b", Status::Interrupted, StopReason::BudgetExhausted)
    );
    assert!(!s.root().join("logs/c").exists());
    // Its attempt given back, its run kept to resume from.
    assert_eq!(attempt_counts(&s), json!({}));
    assert_eq!(attempt_runs(&s, "b").len(), 1);
    // No daily limit: no ledger.
    assert!(!s.root().join(LEDGER).exists());
    // b's second request was refused before it went out: its records
    // name one request, and the refusal.
    let log = std::fs::read_to_string(the_run_dir(&s, "b").join("run.log")).unwrap();
    assert_eq!(log.matches(": request with ").count(), 1, "{log}");
    assert!(log.contains("tokens_per_run = 400 reached"), "{log}");
}

#[tokio::test]
async fn the_next_day_the_paused_task_resumes_from_its_records() {
    let s = scenario()
        .by_progress(two_turns())
        .config("[budget]\ntokens_per_day = 400")
        .task("a", "Look it up, then answer.")
        .task("b", "Look it up, then answer.")
        .task("c", "Look it up, then answer.")
        .build()
        .await;
    let first = run_bin(&s, &["run"]).await;
    assert_eq!(first.status.code(), Some(75), "{}", stderr(&first));
    let err = stderr(&first);
    assert!(
        err.contains("[budget] tokens_per_day = 400 reached (400 tokens spent on ")
            && err.contains("T00:00:00+00:00"),
        "{err}"
    );
    assert_eq!(ledger(&s).tokens, 400);
    // The same day, nothing starts and no request goes out.
    let again = run_bin(&s, &["run"]).await;
    assert_eq!(again.status.code(), Some(75), "{}", stderr(&again));
    assert_eq!(s.requests().await.len(), 3);
    // A ledger of another day is today's nothing.
    plant_ledger(&s, "2000-01-01", 400, 0);

    let next = run_bin(&s, &["run", "--json"]).await;

    assert_eq!(next.status.code(), Some(0), "{}", stderr(&next));
    assert_eq!(done(&s), ["a.md", "b.md", "c.md"]);
    // b sent only its second request; c both of its own.
    assert_eq!(s.requests().await.len(), 6);
    let lines = json_lines(&next);
    let b = lines.iter().find(|l| l.task == "b").unwrap();
    assert_eq!(b.status, Status::Succeeded);
    assert_eq!(b.resumed_turns, 1, "{b:?}");
    assert!(b.resumed_from.is_some(), "{b:?}");
    assert_eq!(ledger(&s).tokens, 160 + 280);
    // What the day spent, in the metrics.
    let prom = std::fs::read_to_string(s.root().join("logs/agent-harness.prom")).unwrap();
    assert!(
        prom.contains("agent_harness_budget_spent{kind=\"tokens\"} 440")
            && prom.contains("agent_harness_budget_limit{kind=\"tokens\"} 400"),
        "{prom}"
    );
}

#[tokio::test]
async fn tasks_in_flight_overshoot_by_at_most_one_request_each() {
    let slow = |body| ok(body).set_delay(Duration::from_millis(150));
    let mut scene = scenario()
        .by_progress(vec![
            slow(tool_calls(&[("c1", "no_such_tool", json!({"n": 1}))])),
            slow(tool_calls(&[("c2", "no_such_tool", json!({"n": 2}))])),
            slow(final_answer("done")),
        ])
        .config("[budget]\ntokens_per_run = 500");
    for i in 0..8 {
        scene = scene.task(&format!("t{i}"), "Look twice, then answer.");
    }
    let s = scene.build().await;

    let outcome = s.run_with(run_options(4, false)).await;

    // 120 tokens a request: the 5th reply reaches 500; at most 3 others
    // were in flight with it.
    let sent = s.requests().await.len();
    assert!((5..=8).contains(&sent), "{sent} requests");
    let RunOutcome::Finished(tally) = outcome else {
        panic!("{outcome:?}")
    };
    assert!(tally.budget_exhausted.is_some(), "{tally:?}");
    assert_eq!(tally.failed, 0);
    assert!(s.failed().is_empty());
    assert_eq!(
        s.inbox().len() + done(&s).len(),
        8,
        "every task is somewhere"
    );
    assert_eq!(tally.interrupted + tally.not_started, s.inbox().len());
}

/// What a test puts at the ledger's name before a run.
type Plant = Box<dyn FnOnce(&Project)>;

/// What a test puts at a path beside the inbox.
type PlantAt = fn(&std::path::Path);

/// Three one-turn tasks (160 tokens each) against `tokens_per_day = 200`,
/// with what `plant` puts at the ledger's name.
async fn run_over_a_planted_ledger(plant: impl FnOnce(&Project)) -> (Scene, std::process::Output) {
    let s = scenario()
        .by_progress(vec![ok(final_answer("done"))])
        .config("[budget]\ntokens_per_day = 200")
        .task("a", "Answer.")
        .task("b", "Answer.")
        .task("c", "Answer.")
        .build()
        .await;
    plant(&s.project);
    let out = run_bin(&s, &["run"]).await;
    (s, out)
}

#[tokio::test]
async fn a_corrupt_huge_or_linked_ledger_warns_and_the_limits_hold_from_nothing() {
    let elsewhere = tempfile::tempdir().unwrap();
    let target = elsewhere.path().join("kept.json");
    std::fs::write(&target, r#"{"day":"2000-01-01","tokens":7,"gpu_ms":0}"#).unwrap();
    let huge = format!(
        r#"{{"day":"2000-01-01","tokens":1,"gpu_ms":0}}{}"#,
        " ".repeat(200_000)
    );
    let plants: Vec<(&str, Plant)> = vec![
        (
            "corrupt",
            Box::new(|p: &Project| std::fs::write(p.root().join(LEDGER), "{\"day\": [[[").unwrap()),
        ),
        (
            "huge",
            Box::new(move |p: &Project| std::fs::write(p.root().join(LEDGER), huge).unwrap()),
        ),
        (
            "overflowing",
            Box::new(|p: &Project| {
                std::fs::write(
                    p.root().join(LEDGER),
                    r#"{"day":"2026-01-01","tokens":18446744073709551616,"gpu_ms":0}"#,
                )
                .unwrap()
            }),
        ),
        (
            "linked",
            Box::new({
                let target = target.clone();
                move |p: &Project| {
                    std::os::unix::fs::symlink(&target, p.root().join(LEDGER)).unwrap()
                }
            }),
        ),
    ];
    for (what, plant) in plants {
        let (s, out) = run_over_a_planted_ledger(plant).await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(75), "{what}: {err}");
        assert!(
            err.contains("budget ledger unreadable; today's spend counts from 0"),
            "{what}: {err}"
        );
        // From 0: a (160) and b (320) ran, c waits.
        assert_eq!(done(&s), ["a.md", "b.md"], "{what}");
        assert_eq!(s.inbox(), ["c.md"], "{what}");
        assert!(s.failed().is_empty(), "{what}");
        let kept = std::fs::symlink_metadata(s.root().join(LEDGER)).unwrap();
        assert!(kept.file_type().is_file(), "{what}: replaced by a file");
        assert_eq!(ledger(&s).tokens, 320, "{what}");
    }
    let untouched = std::fs::read_to_string(&target).unwrap();
    assert!(untouched.contains("\"tokens\":7"), "{untouched}");
}

#[tokio::test]
async fn the_day_is_the_calendar_day_of_the_configured_time_zone() {
    // The tests' clock reads 2026-04-09 06:15 UTC: 23:15 on the 8th in
    // Los Angeles.
    let s = scenario()
        .replies(vec![final_answer("done")])
        .task("t", "Answer.")
        .config("[schedule]\ntimezone = \"America/Los_Angeles\"\n[budget]\ntokens_per_day = 100")
        .build()
        .await;
    let full = |day: &str| plant_ledger(&s, day, 100, 0);
    full("2026-04-08");
    let RunOutcome::Finished(tally) = s.run().await else {
        panic!()
    };
    let why = tally.budget_exhausted.unwrap_or_default();
    assert!(
        why.contains("spent on 2026-04-08") && why.contains("resets at 2026-04-09T00:00:00-07:00"),
        "{why}"
    );
    assert_eq!(s.requests().await.len(), 0);
    // Yesterday there is another day.
    full("2026-04-07");
    let RunOutcome::Finished(tally) = s.run().await else {
        panic!()
    };
    assert_eq!((tally.succeeded, tally.budget_exhausted), (1, None));
    assert_eq!(ledger(&s).day.to_string(), "2026-04-08");
    assert_eq!(ledger(&s).tokens, 160);
    // The UTC date is tomorrow there: a ledger from a clock that was
    // ahead is not trusted (it would switch the daily limit off): said as
    // a problem, and the day's spend rebuilt from the run records — the
    // run above spent 160 of the 100 today, so nothing starts.
    s.task("t", "Answer.");
    full("2026-04-09");
    let RunOutcome::Finished(tally) = s.run().await else {
        panic!()
    };
    assert_eq!(tally.succeeded, 0);
    assert!(tally.budget_exhausted.is_some(), "{tally:?}");
    assert!(
        tally
            .problems
            .iter()
            .any(|p| p.contains("after today (2026-04-08)")),
        "{tally:?}"
    );
    assert_eq!(ledger(&s).day.to_string(), "2026-04-08");
    assert_eq!(ledger(&s).tokens, 160);
}

#[tokio::test]
async fn runpod_execution_time_is_what_the_gpu_limit_counts() {
    let reply = |id: &str| ok(completed(id, final_answer("done"), 700, 1500));
    let rp = FakeRunpod::start(
        vec![reply("j1"), reply("j2"), reply("j3")],
        vec![ok(job("j", "IN_QUEUE"))],
        false,
    )
    .await;
    let s = scenario()
        .task("a", "Answer.")
        .task("b", "Answer.")
        .task("c", "Answer.")
        .config_file(&format!(
            "{}[budget]\ngpu_seconds_per_day = 3\n",
            rp.config_sections()
        ))
        .build()
        .await;

    let RunOutcome::Finished(tally) = s.run().await else {
        panic!()
    };

    // 1.5 s of execution each (the 0.7 s in the queue is not GPU time):
    // a and b reach 3.0, c waits.
    assert_eq!(done(&s), ["a.md", "b.md"]);
    assert_eq!(s.inbox(), ["c.md"]);
    let why = tally.budget_exhausted.unwrap_or_default();
    assert_contains(
        &why,
        "gpu_seconds_per_day = 3 reached (3.0 GPU-seconds spent on 2026-04-09)",
    );
    assert_eq!(ledger(&s).gpu_ms, 3000);
    assert_eq!(ledger(&s).tokens, 320);
}

#[tokio::test]
async fn check_prints_todays_spend_against_each_limit() {
    let s = offline()
        .config(
            "[budget]\ntokens_per_day = 100000\ngpu_seconds_per_day = 3600\ntokens_per_run = 5000",
        )
        .build()
        .await;
    let today = chrono::Utc::now().date_naive();
    plant_ledger(&s, today, 1234, 61500);

    let out = run_bin(&s, &["check"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let printed = stdout(&out);
    assert_contains(
        &printed,
        &format!(
            "budget on {today} (UTC): 1234 of 100000 tokens (tokens_per_day), 61.5 of 3600 GPU-seconds (gpu_seconds_per_day), at most 5000 tokens a run (tokens_per_run)"
        ),
    );
    std::fs::write(s.root().join(LEDGER), "nonsense").unwrap();
    let printed = stdout(&run_bin(&s, &["check"]).await);
    assert!(
        printed.contains("budget ledger unreadable") && printed.contains("0 of 100000 tokens"),
        "{printed}"
    );
    // A ledger from a clock that ran ahead is said to be untrusted.
    plant_ledger(&s, "2999-01-01", 5, 0);
    let printed = stdout(&run_bin(&s, &["check"]).await);
    assert!(
        printed.contains("the budget ledger is not trusted (it is dated 2999-01-01, after today")
            && printed.contains("0 of 100000 tokens"),
        "{printed}"
    );
}

#[tokio::test]
async fn digest_says_when_the_ledger_its_spend_comes_from_cannot_be_read() {
    let s = offline()
        .config("[budget]\ntokens_per_day = 100000")
        .build()
        .await;
    std::fs::write(s.root().join(LEDGER), "nonsense").unwrap();

    let out = run_bin(&s, &["digest"]).await;

    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_contains(stderr(&out), "agent-harness: digest: the budget ledger: ");
}

#[tokio::test]
async fn eval_spends_from_the_day_and_replay_never_does() {
    let s = scenario()
        .by_progress(vec![ok(final_answer("hello"))])
        .config("[budget]\ntokens_per_day = 100000")
        .task("t", "Say hello.")
        .build()
        .await;
    hello_suite(&s);

    let out = run_bin(&s, &["run"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(ledger(&s).tokens, 160);
    let run_dir = the_run_dir(&s, "t");
    let out = run_bin(&s, &["replay", run_dir.to_str().unwrap()]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(ledger(&s).tokens, 160, "a replay sends nothing");
    let out = run_bin(&s, &["eval", "suite", "--repeat", "2"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    assert_eq!(ledger(&s).tokens, 160 * 3);
    assert_eq!(s.requests().await.len(), 3);
}

#[tokio::test]
async fn a_failed_attempt_spends_its_gpu_time_and_the_retry_asks_first() {
    // The job ran 2.5 s on the GPU, then failed: retryable, but the
    // 2-second day is spent, so the retry is never sent.
    let failed = json!({"id": "j1", "status": "FAILED", "executionTime": 2500, "error": "CUDA out of memory"});
    let rp = FakeRunpod::start(
        vec![ok(failed), ok(completed("j2", final_answer("done"), 5, 6))],
        vec![],
        false,
    )
    .await;
    let s = scenario()
        .task("t", "Answer.")
        .config_file(&format!(
            "{}[budget]\ngpu_seconds_per_day = 2\n",
            rp.config_sections()
        ))
        .build()
        .await;

    let RunOutcome::Finished(tally) = s.run().await else {
        panic!()
    };

    let runsync = rp
        .calls()
        .await
        .into_iter()
        .filter(|(_, p)| p.ends_with("/runsync"))
        .count();
    assert_eq!(runsync, 1, "no retry past the limit");
    let t = s.summary("t");
    assert_eq!(
        (t.status.as_str(), t.stop_reason.as_str()),
        ("interrupted", "budget_exhausted")
    );
    assert!(tally.budget_exhausted.is_some());
    assert_eq!(s.inbox(), ["t.md"]);
    assert_eq!(ledger(&s).gpu_ms, 2500);
}

/// A ledger saying today (UTC, the default zone) has spent `tokens`.
fn spent_today(project: &Project, tokens: u64) {
    plant_ledger(project, chrono::Utc::now().date_naive(), tokens, 0);
}

#[tokio::test]
async fn at_the_limit_replay_still_replays_and_exec_and_eval_say_why_they_stopped() {
    let s = scenario()
        .by_progress(vec![ok(final_answer("hello"))])
        .config("[budget]\ntokens_per_day = 1000")
        .task("t", "Say hello.")
        .build()
        .await;
    let out = run_bin(&s, &["run"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    spent_today(&s, 1000);

    // A replay answers from the records: nothing to spend, nothing refused.
    let run_dir = the_run_dir(&s, "t");
    let replay = run_bin(&s, &["replay", run_dir.to_str().unwrap()]).await;
    assert_eq!(replay.status.code(), Some(0), "{}", stderr(&replay));

    let exec = run_bin(&s, &["exec", "Say hello."]).await;
    assert_eq!(exec.status.code(), Some(75), "{}", stderr(&exec));
    assert_contains(
        stderr(&exec),
        "budget: [budget] tokens_per_day = 1000 reached",
    );

    hello_suite(&s);
    let eval = run_bin(&s, &["eval", "suite", "--min-pass-rate", "1"]).await;
    assert_eq!(eval.status.code(), Some(75), "{}", stderr(&eval));
    assert!(
        stderr(&eval).contains(
            "the eval was stopped by a budget limit: [budget] tokens_per_day = 1000 reached"
        ) && stderr(&eval).contains("decide nothing"),
        "{}",
        stderr(&eval)
    );
    assert_eq!(s.requests().await.len(), 1, "only the first run spent");
    assert_eq!(ledger(&s).tokens, 1000);
}

/// Replies that always call a tool (a new call each turn, so no loop is
/// seen), 15 tokens each, after `delay`.
fn endless_calls(delay: Duration) -> Vec<wiremock::ResponseTemplate> {
    (0..40)
        .map(|i| {
            let mut body = tool_calls(&[(&format!("c{i}"), "no_such_tool", json!({"n": i}))]);
            body["usage"] =
                json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15});
            ok(body).set_delay(delay)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn processes_spending_at_once_overshoot_a_daily_limit_by_one_request_each_at_most() {
    let s = scenario()
        .by_progress(endless_calls(Duration::from_millis(200)))
        .config("[budget]\ntokens_per_day = 100\n[limits]\nmax_turns = 30")
        .task("loop", "Loop.")
        .build()
        .await;
    let mut commands = vec![vec!["run".to_string()]];
    for j in 0..5 {
        commands.push(
            ["exec", "--name", &format!("ex{j}"), "Loop."]
                .map(String::from)
                .to_vec(),
        );
    }

    let outs = futures::future::join_all(commands.iter().map(|args| async {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_bin(&s, &args).await
    }))
    .await;

    for out in &outs {
        assert_eq!(out.status.code(), Some(75), "{}", stderr(out));
    }
    // Six processes, one request each in flight when the limit was met.
    let spent = ledger(&s).tokens;
    assert!((100..=100 + 6 * 15).contains(&spent), "{spent} tokens");
    assert_eq!(s.requests().await.len() as u64 * 15, spent);
}

#[tokio::test]
async fn a_limit_met_between_two_tasks_is_the_logs_last_line() {
    let s = scenario()
        .by_progress(vec![ok(final_answer("done"))])
        .config("[budget]\ntokens_per_day = 160")
        .task("a", "Answer.")
        .task("b", "Answer.")
        .build()
        .await;

    let out = run_bin(&s, &["run"]).await;

    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert_eq!(done(&s), ["a.md"]);
    assert_eq!(s.inbox(), ["b.md"]);
    let err = stderr(&out);
    let last = err
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    assert!(
        last.contains("[budget] tokens_per_day = 160 reached (160 tokens spent on ")
            && last.contains("it resets at "),
        "{err}"
    );
}

#[tokio::test]
#[ignore = "needs scripts/test: root, to give the ledger to another user"]
async fn another_users_ledger_neither_pauses_the_queue_nor_switches_the_limit_off() {
    assert!(
        rustix::process::geteuid().is_root(),
        "this test gives a file to another user: run it as root (scripts/test in CI does)"
    );
    let today = chrono::Utc::now().date_naive();
    let (s, out) = run_over_a_planted_ledger(|p| {
        plant_ledger(p, today, u64::MAX, 0);
        std::os::unix::fs::chown(p.root().join(LEDGER), Some(65534), Some(65534)).unwrap();
    })
    .await;

    // Not paused for the day by another user's claim: moved aside, the
    // day rebuilt from the records (nothing yet), so the limit of 200
    // still holds (a and b, then c waits), and said.
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_contains(
        &err,
        "was another user's file (uid 65534), where the day's spend is kept: moved aside to .agent-harness-budget.json.aside-",
    );
    assert_eq!(done(&s), ["a.md", "b.md"]);
    assert_eq!(s.inbox(), ["c.md"]);
    assert_eq!(ledger(&s).tokens, 320);
    let owner =
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(s.root().join(LEDGER)).unwrap());
    assert_eq!(owner, 0, "replaced by this user's");
}

/// A folder or FIFO planted at the ledger's name, or at its lock's, after
/// a run spent 320 of 400 tokens: moved aside, the day's spend rebuilt
/// from the run records, so the next run starts one task (320 < 400) and
/// leaves the other for tomorrow instead of counting from 0.
#[tokio::test]
async fn a_folder_or_fifo_at_the_ledger_or_its_lock_leaves_the_daily_limit_daily() {
    fn fifo(at: &std::path::Path) {
        use rustix::fs::{CWD, FileType, Mode, mknodat};
        mknodat(CWD, at, FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
    }
    fn folder(at: &std::path::Path) {
        std::fs::create_dir(at).unwrap();
    }
    let plants: [(&str, &str, PlantAt); 3] = [
        ("ledger folder", LEDGER, folder),
        ("ledger fifo", LEDGER, fifo),
        ("lock fifo", "tasks/.agent-harness-budget.lock", fifo),
    ];
    for (what, name, plant) in plants {
        let s = scenario()
            .by_progress(vec![ok(final_answer("done"))])
            .config("[budget]\ntokens_per_day = 400")
            .task("a", "Answer.")
            .task("b", "Answer.")
            .build()
            .await;
        let first = run_bin(&s, &["run"]).await;
        assert_eq!(first.status.code(), Some(0), "{what}: {}", stderr(&first));
        assert_eq!(ledger(&s).tokens, 320, "{what}");

        let at = s.root().join(name);
        std::fs::remove_file(&at).unwrap();
        plant(&at);
        s.task("c", "Answer.");
        s.task("d", "Answer.");
        let next = run_bin(&s, &["run"]).await;

        let err = stderr(&next);
        assert!(
            err.contains("where the day's spend is kept: moved aside to .agent-harness-budget."),
            "{what}: {err}"
        );
        assert_eq!(done(&s), ["a.md", "b.md", "c.md"], "{what}: {err}");
        assert_eq!(s.inbox(), ["d.md"], "{what}: the limit held");
        assert_eq!(
            next.status.code(),
            Some(1),
            "{what}: moved aside is said: {err}"
        );
        assert_eq!(ledger(&s).tokens, 480, "{what}");
        // The day after, nothing stops the queue: the entry is gone.
        let lock_or_ledger = std::fs::symlink_metadata(&at).unwrap();
        assert!(lock_or_ledger.file_type().is_file(), "{what}");
    }
}

#[tokio::test]
async fn a_ledger_dated_in_the_future_is_replaced_and_the_limit_holds_across_runs() {
    let s = scenario()
        .by_progress(vec![ok(final_answer("done"))])
        .config("[budget]\ntokens_per_day = 200")
        .task("a", "Answer.")
        .task("b", "Answer.")
        .build()
        .await;
    plant_ledger(&s, "2099-01-01", 0, 0);
    let first = run_bin(&s, &["run"]).await;
    assert_eq!(first.status.code(), Some(1), "{}", stderr(&first));
    assert_contains(
        stderr(&first),
        "not trusted (it is dated 2099-01-01, after today",
    );
    assert_eq!(ledger(&s).tokens, 320);

    // The next run counts from what the first spent: the limit holds.
    s.task("c", "Answer.");
    let next = run_bin(&s, &["run"]).await;

    assert_eq!(next.status.code(), Some(75), "{}", stderr(&next));
    assert_eq!(s.inbox(), ["c.md"]);
    assert_eq!(s.requests().await.len(), 2);
}

#[tokio::test]
async fn a_run_that_spends_nothing_still_replaces_a_ledger_it_does_not_trust() {
    let s = offline()
        .config("[budget]\ntokens_per_day = 200")
        .build()
        .await;
    plant_ledger(&s, "2099-01-01", 0, 0);

    let first = run_bin(&s, &["run"]).await;

    assert_eq!(first.status.code(), Some(1), "{}", stderr(&first));
    assert_ne!(ledger(&s).day.to_string(), "2099-01-01");
    assert_eq!(ledger(&s).tokens, 0);
    let next = run_bin(&s, &["run"]).await;
    assert_eq!(next.status.code(), Some(0), "{}", stderr(&next));
}
