//! Unit tests of the digest: what is listed, folded and said as a change,
//! the command that runs a failure again, the sending run and the folders
//! not read, the period's spend, redaction before clipping, when a day's
//! digest is due, and the text a person reads.

use std::path::PathBuf;

use chrono::{DateTime, Utc};

use harness_agent::StopReason;
use harness_base::zone::Zone;
use harness_config::{Redactor, Secret, TimeOfDay};
use harness_records::{ListedRun, Listing, Status, Summary};
use harness_state::{DaySpend, SpendToday};

use super::{Changed, Digest, Period, due};

/// The digest of `runs` over `period`, no ledger, no secret.
fn digest_of(runs: &[ListedRun], period: &Period) -> Digest {
    let listing = Listing {
        runs: runs.to_vec(),
        ..Listing::default()
    };
    Digest::of(&listing, period, None, &Redactor::default(), &again)
}

/// What runs a task again, as the engine would say it (`drain::again`,
/// tested there): here which task and run it was asked about.
fn again(task: &str, run_id: &str, _recurring: bool) -> String {
    format!("again: {task}/{run_id}")
}

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text).unwrap().to_utc()
}

/// A run of `task` that finished at `finished` (an hour of 2026-04-09).
fn run(task: &str, hour: u32, status: Status, answer: Option<&str>) -> ListedRun {
    let finished = at(&format!("2026-04-09T{hour:02}:00:00Z"));
    let run_id = format!("20260409T{hour:02}0000Z");
    let mut summary = Summary::blank(task, &run_id, finished);
    summary.status = status;
    summary.final_answer = answer.map(str::to_string);
    summary.total_tokens = 100;
    if status != Status::Succeeded {
        summary.stop_reason = StopReason::EndpointError;
        summary.error = Some("the endpoint rejected the request (HTTP 400)\nsecond line".into());
    }
    ListedRun {
        dir: PathBuf::from(format!("logs/{task}/{run_id}")),
        task_dir: task.to_string(),
        run_dir: run_id.clone(),
        summary,
    }
}

fn period(since_hour: u32) -> Period {
    Period {
        since: at(&format!("2026-04-09T{since_hour:02}:00:00Z")),
        until: at("2026-04-09T23:00:00Z"),
        zone: Zone::utc(),
    }
}

#[test]
fn failures_come_first_with_the_command_that_runs_each_again() {
    let mut wrong = run("wrong", 4, Status::Failed, None);
    wrong.summary.stop_reason = StopReason::ExpectationFailed;
    let runs = vec![
        run("good", 2, Status::Succeeded, Some("\n  The answer.\nMore.")),
        run("broken", 3, Status::Failed, None),
        wrong,
        run("waiting", 5, Status::Interrupted, None),
    ];

    let d = digest_of(&runs, &period(1));

    let again: Vec<(&str, &str)> = d
        .failures
        .iter()
        .map(|f| (f.task.as_str(), f.run_again.as_str()))
        .collect();
    assert_eq!(
        again,
        [
            ("broken", "again: broken/20260409T030000Z"),
            ("wrong", "again: wrong/20260409T040000Z"),
            ("waiting", "again: waiting/20260409T050000Z"),
        ]
    );
    assert_eq!(d.answers.len(), 1);
    assert_eq!(d.answers[0].first_line, "The answer.");
    // The server's words are not quoted: the harness's own are.
    assert_eq!(
        d.failures[0].error.as_deref(),
        Some(
            "the endpoint's answer ended the task (HTTP 400; its summary.json has the server's words)"
        )
    );
    assert_eq!(
        d.failures[1].error.as_deref(),
        Some("the answer missed its [expect] checks (its summary.json says more)")
    );
    let text = d.text();
    let failed = text.find("Failed (3):").unwrap();
    let answers = text.find("Answers (1):").unwrap();
    assert!(failed < answers, "{text}");
    assert!(
        text.contains("- broken: failed (endpoint_error), run 20260409T030000Z\n")
            && text.contains("  run it again: again: broken/20260409T030000Z\n"),
        "{text}"
    );
    assert!(
        text.ends_with("\nSpent in this period: 400 tokens.\n"),
        "{text}"
    );
    assert_eq!(d.subject(), "agent-harness digest: 3 failed, 1 answered");
}

#[test]
fn runs_that_ended_as_their_previous_run_are_folded_and_changes_are_said() {
    let recurring = |hour, status| {
        let mut r = run("nightly", hour, status, None);
        r.summary.recurring = true;
        r
    };
    let runs = vec![
        // Before the period: what the first runs in it are compared with.
        run("same", 1, Status::Succeeded, Some("42")),
        recurring(1, Status::Failed),
        run("flaky", 1, Status::Succeeded, Some("ok")),
        // In it.
        run("same", 3, Status::Succeeded, Some("42")),
        run("same", 4, Status::Succeeded, Some("42")),
        run("same", 5, Status::Succeeded, Some("43")),
        recurring(3, Status::Succeeded),
        run("flaky", 3, Status::Failed, None),
        run("flaky", 4, Status::Failed, None),
        run("flaky", 5, Status::Failed, None),
    ];

    let d = digest_of(&runs, &period(2));

    // 42 twice as before; flaky's two earlier failures alike its newest
    // are counted apart (the first of them followed a success).
    assert_eq!((d.unchanged, d.earlier_failures), (2, 2), "{d:#?}");
    let answers: Vec<(&str, &str)> = d
        .answers
        .iter()
        .map(|a| (a.task.as_str(), a.first_line.as_str()))
        .collect();
    assert_eq!(answers, [("nightly", "(no answer)"), ("same", "43")]);
    assert_eq!(d.failures.len(), 1);
    assert_eq!(d.failures[0].run_id, "20260409T050000Z");
    assert_eq!(d.failures[0].run_again, "again: flaky/20260409T050000Z");
    assert_eq!(d.changes.len(), 1);
    assert_eq!(
        (d.changes[0].task.as_str(), d.changes[0].change),
        ("nightly", Changed::Fixed)
    );
    let text = d.text();
    assert!(
        text.contains("- nightly: fixed (it failed last time)\n"),
        "{text}"
    );
    assert!(
        text.contains("Unchanged: 2 run(s) ended as their task's previous run did.\n"),
        "{text}"
    );
    assert!(
        text.contains("Failed alike before: 2 earlier failure(s) of the same kind as their task's failure named above.\n"),
        "{text}"
    );
    assert_eq!(
        d.subject(),
        "agent-harness digest: 1 failed, 2 failed alike before, 2 answered, 1 changed, 2 unchanged"
    );
}

#[test]
fn a_failure_as_its_previous_run_but_unlike_the_newest_is_unchanged() {
    let mut newest = run("t", 5, Status::Failed, None);
    newest.summary.stop_reason = StopReason::MaxTurns;
    let runs = vec![
        run("t", 3, Status::Failed, None),
        run("t", 4, Status::Failed, None),
        newest,
    ];

    let d = digest_of(&runs, &period(2));

    // 3 is named as nothing folds it; 4 ended as 3 did; 5 is the newest.
    assert_eq!((d.unchanged, d.earlier_failures), (1, 0), "{d:#?}");
    let named: Vec<&str> = d.failures.iter().map(|f| f.run_id.as_str()).collect();
    assert_eq!(named, ["20260409T030000Z", "20260409T050000Z"]);
}

#[test]
fn a_failure_a_later_run_made_good_needs_nothing_run_again() {
    let runs = vec![
        run("t", 3, Status::Failed, None),
        run("t", 4, Status::Succeeded, Some("fine")),
    ];

    let d = digest_of(&runs, &period(2));

    assert_eq!(
        d.failures[0].run_again,
        "nothing to do: it succeeded since, in run 20260409T040000Z"
    );
    assert_eq!(d.answers[0].first_line, "fine");
}

#[test]
fn nothing_to_report_is_one_line_and_dry_runs_and_replays_are_no_news() {
    let mut dry = run("t", 3, Status::Succeeded, Some("x"));
    dry.summary.dry_run = true;
    let mut replay = run("t", 4, Status::Failed, None);
    replay.summary.replay_of = Some("t/20260409T010000Z".into());
    let old = run("t", 1, Status::Failed, None);

    let d = digest_of(&[dry, replay, old], &period(2));

    assert!(d.is_empty(), "{d:#?}");
    assert_eq!(
        d.text(),
        "agent-harness digest: nothing happened since 2026-04-09 02:00 (UTC).\n"
    );
    assert_eq!(d.subject(), "agent-harness digest: nothing happened");
    // The dry run spent its tokens all the same; the replay spent none of
    // its own, and the run before the period is not in it.
    assert_eq!(d.spend.tokens, 100);
    // A quiet night mailed by a run that exited 0 is still one line.
    let d = d.sent_by(0, "0 succeeded in 0.1s", &Redactor::default());
    assert!(d.is_empty());
    assert_eq!(
        d.text(),
        "agent-harness digest: nothing happened since 2026-04-09 02:00 (UTC); the run sending it exited 0.\n"
    );
}

#[test]
fn a_run_that_did_not_get_to_its_tasks_is_never_nothing_happened() {
    let secret = Redactor::new(vec![Secret::new("hunter2-SECRET")]);
    let d = digest_of(&[], &period(2)).sent_by(
        75,
        "the endpoint is unreachable, no task was touched: http://u:hunter2-SECRET@127.0.0.1:9/v1\nsecond line\n",
        &secret,
    );

    assert!(!d.is_empty());
    assert_eq!(d.subject(), "agent-harness digest: this run exited 75");
    let text = d.text();
    assert!(
        text.contains(
            "\nThis run, which sends the digest, exited 75:\n  the endpoint is unreachable, no task was touched: http://u:***@127.0.0.1:9/v1\n  second line\n"
        ),
        "{text}"
    );
    assert!(!text.contains("nothing happened"), "{text}");
}

#[test]
fn folders_that_were_not_read_are_named_and_never_nothing_happened() {
    let listing = Listing {
        unreadable: vec![PathBuf::from("logs/private")],
        skipped: vec!["logs/linked: a symbolic link, not followed".into()],
        ahead: vec![PathBuf::from("logs/t/20990101T000000Z")],
        ..Listing::default()
    };

    let d = Digest::of(&listing, &period(2), None, &Redactor::default(), &again);

    assert!(!d.is_empty());
    assert_eq!(d.unread.len(), 3, "{d:#?}");
    assert_eq!(d.subject(), "agent-harness digest: 3 folder(s) not read");
    let text = d.text();
    assert!(
        text.contains(
            "Not read (3), so their runs are missing here:\n- logs/private: this user may not read it (permission denied)\n- logs/linked: a symbolic link, not followed\n- logs/t/20990101T000000Z: not a run"
        ),
        "{text}"
    );
    let broken = Listing {
        broken: Some("logs: Not a directory (os error 20)".into()),
        ..Listing::default()
    };
    let d = Digest::of(&broken, &period(2), None, &Redactor::default(), &again);
    assert_eq!(
        d.unread,
        ["the logs folder: logs: Not a directory (os error 20)"]
    );
}

#[test]
fn a_secret_is_redacted_before_any_field_is_clipped() {
    let secret = "tok<en&SECRET-0123456789";
    let mut cut = run("t", 3, Status::Failed, None);
    cut.summary.stop_reason = StopReason::MaxTurns;
    // The secret straddles the error's clip at 300 characters.
    cut.summary.error = Some(format!("{}{secret} after", "x".repeat(290)));
    let answered = run(
        "u",
        3,
        Status::Succeeded,
        Some(&format!("{}{secret}", "y".repeat(190))),
    );
    let listing = Listing {
        runs: vec![cut, answered],
        ..Listing::default()
    };
    let redactor = Redactor::new(vec![Secret::new(secret)]);

    let d = Digest::of(&listing, &period(2), None, &redactor, &again);

    let error = d.failures[0].error.as_deref().unwrap();
    assert!(
        error.starts_with(&format!("{}***", "x".repeat(290))),
        "{error}"
    );
    let answer = &d.answers[0].first_line;
    assert!(answer.ends_with("***"), "{answer}");
    for part in ["tok<", "SECRET", "tok&lt;"] {
        assert!(!d.text().contains(part), "{}", d.text());
    }
}

/// Runs finished yesterday 06:00, 23:00 and today 06:00, and the period
/// of a digest at 07:00 since yesterday's.
fn a_night() -> (Vec<ListedRun>, Period) {
    let finished = |t: &str| {
        let mut r = run("t", 1, Status::Succeeded, Some("x"));
        r.summary.started_at = at(t);
        r.summary.finished_at = at(t);
        r
    };
    let runs = vec![
        finished("2026-04-08T06:00:00Z"),
        finished("2026-04-08T23:00:00Z"),
        finished("2026-04-09T06:00:00Z"),
    ];
    let period = Period {
        since: at("2026-04-08T07:00:00Z"),
        until: at("2026-04-09T07:00:00Z"),
        zone: Zone::utc(),
    };
    (runs, period)
}

#[test]
fn the_spend_is_the_periods_not_the_calendar_days() {
    let (runs, period) = a_night();

    let d = digest_of(&runs, &period);

    // The evening before midnight counts, the run before the period not;
    // no GPU time spent and no GPU limit: none said.
    assert_eq!((d.spend.tokens, d.spend.gpu_seconds), (200, None));
    assert!(
        d.text().ends_with("\nSpent in this period: 200 tokens.\n"),
        "{}",
        d.text()
    );
}

#[test]
fn gpu_seconds_and_todays_standing_show_when_they_count() {
    let (runs, period) = a_night();

    // GPU time spent shows; with a daily limit, today's standing too.
    let mut gpu = runs;
    gpu[1].summary.runpod_exec_ms = Some(1500);
    let listing = Listing {
        runs: gpu.clone(),
        ..Listing::default()
    };
    let limits = harness_config::SpendLimits {
        tokens_per_day: 1000,
        ..harness_config::SpendLimits::default()
    };
    let standing = |limits| {
        let today = DaySpend {
            day: chrono::NaiveDate::from_ymd_opt(2026, 4, 9).unwrap(),
            tokens: 100,
            gpu_ms: 0,
        };
        SpendToday::of(today, limits)
    };
    let d = Digest::of(
        &listing,
        &period,
        Some(standing(limits)),
        &Redactor::default(),
        &again,
    );
    assert!(
        d.text().ends_with(
            "\nSpent in this period: 200 tokens, 1.5 GPU-seconds.\nToday so far (2026-04-09, UTC, every process): 100 of 1000 tokens (tokens_per_day).\n"
        ),
        "{}",
        d.text()
    );
    // No GPU spent in the period, but a GPU limit: said, as 0.
    gpu[1].summary.runpod_exec_ms = None;
    let listing = Listing {
        runs: gpu,
        ..Listing::default()
    };
    let limits = harness_config::SpendLimits {
        gpu_seconds_per_day: 600,
        ..harness_config::SpendLimits::default()
    };
    let d = Digest::of(
        &listing,
        &period,
        Some(standing(limits)),
        &Redactor::default(),
        &again,
    );
    assert!(
        d.text().ends_with(
            "\nSpent in this period: 200 tokens, 0.0 GPU-seconds.\nToday so far (2026-04-09, UTC, every process): 100 tokens, 0.0 of 600 GPU-seconds (gpu_seconds_per_day).\n"
        ),
        "{}",
        d.text()
    );
}

#[test]
fn a_summary_naming_another_task_than_its_folder_builds_no_path() {
    let mut forged = run("victim", 3, Status::Failed, None);
    forged.task_dir = "other".into();
    let mut escape = run("../../etc", 3, Status::Failed, None);
    escape.task_dir = "etc".into();

    let d = digest_of(&[forged, escape], &period(2));

    for f in &d.failures {
        assert_eq!(
            f.run_again, "unknown: the summary's task is not the task of the folder it is in",
            "{f:?}"
        );
    }
    // Said by the folders the runs were found in, never the names the
    // summaries claim.
    let mut named: Vec<&str> = d.failures.iter().map(|f| f.task.as_str()).collect();
    named.sort_unstable();
    assert_eq!(
        named,
        [
            "etc (its summary names another task)",
            "other (its summary names another task)"
        ]
    );
    let mut claims = run("victim", 3, Status::Failed, None);
    claims.run_dir = "20260409T031500Z".into();
    let d = digest_of(&[claims], &period(2));
    assert_eq!(d.failures[0].run_id, "20260409T031500Z");
    assert_eq!(d.failures[0].run_again, "again: victim/20260409T031500Z");
}

#[test]
fn the_run_again_line_is_one_escaped_line_whatever_the_engine_says() {
    let listing = Listing {
        runs: vec![run("t", 3, Status::Failed, None)],
        ..Listing::default()
    };
    let hostile = |_: &str, _: &str, _: bool| {
        "agent-harness requeue 'evil\u{1b}]0;PWNED\u{7}\nline'".to_string()
    };
    let d = Digest::of(&listing, &period(2), None, &Redactor::default(), &hostile);
    let line = &d.failures[0].run_again;
    assert!(!line.contains('\u{1b}') && !line.contains('\n'), "{line:?}");
}

#[test]
fn each_list_is_capped_and_the_rest_counted() {
    let runs: Vec<ListedRun> = (0..70)
        .map(|i| run(&format!("t{i:02}"), 3, Status::Failed, None))
        .collect();

    let d = digest_of(&runs, &period(2));

    assert_eq!((d.failures.len(), d.more_failures), (50, 20));
    assert!(d.text().contains("Failed (70):\n"));
    assert!(d.text().contains("\n- and 20 more\n"));
}

#[test]
fn the_digest_is_due_once_a_day_at_or_after_its_time_in_the_zone() {
    let seven = TimeOfDay::parse("07:00").unwrap();
    let utc = Zone::utc();
    assert!(!due(at("2026-04-09T06:59:00Z"), seven, &utc, None));
    assert!(due(at("2026-04-09T07:00:00Z"), seven, &utc, None));
    // Sent yesterday: due again today.
    assert!(due(
        at("2026-04-09T09:00:00Z"),
        seven,
        &utc,
        Some(at("2026-04-08T07:05:00Z"))
    ));
    // Sent at 07:08, then the clock went back ten minutes: sent.
    assert!(!due(
        at("2026-04-09T07:02:00Z"),
        seven,
        &utc,
        Some(at("2026-04-09T07:08:00Z"))
    ));
    // Sent today after 07:00: not again.
    assert!(!due(
        at("2026-04-09T23:00:00Z"),
        seven,
        &utc,
        Some(at("2026-04-09T07:05:00Z"))
    ));
    // 07:00 in Berlin (summer time) is 05:00 UTC.
    let berlin = Zone::named("Europe/Berlin").unwrap();
    assert!(due(at("2026-04-09T05:00:00Z"), seven, &berlin, None));
    assert!(!due(at("2026-04-09T04:59:00Z"), seven, &berlin, None));
    // 02:30 does not exist in Berlin on 2026-03-29: due from 03:00 (01:00 UTC).
    let half_two = TimeOfDay::parse("02:30").unwrap();
    assert!(!due(at("2026-03-29T00:59:00Z"), half_two, &berlin, None));
    assert!(due(at("2026-03-29T01:00:00Z"), half_two, &berlin, None));
}
