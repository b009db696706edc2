//! Unit tests of `status`' text, without the binary: every line as the
//! operator reads it, from an overview built here.

use chrono::{DateTime, NaiveDate, Utc};

use super::{
    FailedTasks, NextRun, OldestTask, Overview, Running, RunningTask, Sending, Waiting, text,
};
use harness_base::zone::Zone;
use harness_state::{Delivery, Holder, LastRun, SpendToday};

fn at(t: &str) -> DateTime<Utc> {
    t.parse().unwrap()
}

fn task(task: &str, run_id: &str) -> RunningTask {
    RunningTask {
        task: task.into(),
        run_id: run_id.into(),
    }
}

/// Nothing configured, nothing recorded, everything read.
fn quiet() -> Overview {
    let unset = Sending {
        configured: false,
        record: None,
    };
    Overview {
        now: at("2026-04-09T06:15:00Z"),
        running: None,
        did_not_end: None,
        inbox: Waiting {
            read: true,
            count: 0,
            oldest: None,
            never_run: 0,
        },
        failed: FailedTasks {
            read: true,
            count: 0,
            newest: None,
        },
        last_run: None,
        budget: None,
        recurring: Vec::new(),
        notify: unset.clone(),
        traces: unset,
        problems: Vec::new(),
    }
}

#[test]
fn a_quiet_setup_is_one_line_a_label() {
    let expected = "\
running     no run holds the lock
inbox       empty
failed/     empty
last run    none recorded beside the inbox
budget      no [budget] limits
recurring   none
notify      [notify] is not set
traces      [traces] is not set
";
    assert_eq!(text(&quiet(), &Zone::utc()), expected);
}

#[test]
fn a_busy_setup_says_who_runs_what_is_waiting_and_what_failed_in_its_zone() {
    let mut seen = quiet();
    seen.running = Some(Running {
        pid: 41,
        command: Some("run".into()),
        since: Some(at("2026-04-09T06:00:00Z")),
        tasks: vec![task("a\x1b[2Jb", "20260409T060000Z")],
    });
    seen.inbox = Waiting {
        read: true,
        count: 3,
        oldest: Some(OldestTask {
            task: "old".into(),
            since: None,
        }),
        never_run: 2,
    };
    seen.failed = FailedTasks {
        read: true,
        count: 1,
        newest: Some(task("it's", "20260408T061500Z")),
    };
    seen.recurring = vec![
        NextRun {
            task: "daily".into(),
            due_now: true,
            at: Some(at("2026-04-09T06:00:00Z")),
            problem: None,
        },
        NextRun {
            task: "weekly".into(),
            due_now: false,
            at: Some(at("2026-04-13T07:00:00Z")),
            problem: None,
        },
        NextRun {
            task: "odd".into(),
            due_now: false,
            at: None,
            problem: Some("schedule \"0 99 * * *\" never comes round".into()),
        },
    ];
    let berlin = Zone::named("Europe/Berlin").unwrap();

    let shown = text(&seen, &berlin);
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(
        lines[0],
        "running     run since 2026-04-09T08:00:00+02:00 (pid 41): a\\u{1b}[2Jb (20260409T060000Z)"
    );
    assert_eq!(
        lines[1],
        "inbox       3 task(s); the oldest, old, waiting since a time unknown; \
         2 entry(ies) that will never run (agent-harness check names them)"
    );
    assert_eq!(
        lines[2],
        "failed/     1 task(s); the newest it's (run 20260408T061500Z): \
         agent-harness show 'it'\\''s/20260408T061500Z'"
    );
    assert_eq!(
        lines[5..8],
        [
            "recurring   daily: due now (slot 2026-04-09T08:00:00+02:00): the next run takes it",
            "            weekly: next 2026-04-13T09:00:00+02:00",
            "            odd: no slot: schedule \"0 99 * * *\" never comes round",
        ]
    );
}

#[test]
fn a_run_that_did_not_end_a_last_run_and_the_spend_are_said_with_their_numbers() {
    let mut seen = quiet();
    seen.did_not_end = Some(Holder {
        pid: 7,
        command: "run-task".into(),
        since: at("2026-04-09T05:00:00Z"),
    });
    seen.last_run = Some(LastRun {
        command: "run".into(),
        started: at("2026-04-09T05:00:00Z"),
        finished: at("2026-04-09T05:00:02.300Z"),
        exit_code: 75,
        succeeded: 1,
        failed: 2,
        retry_later: 1,
        interrupted: 1,
        not_started: 1,
        note: Some("the endpoint did not answer\nforged".into()),
    });
    seen.budget = Some(SpendToday {
        day: NaiveDate::from_ymd_opt(2026, 4, 9).unwrap(),
        tokens: 1200,
        gpu_seconds: 12.25,
        tokens_per_day: Some(5000),
        gpu_seconds_per_day: None,
        tokens_per_run: Some(800),
    });

    let shown = text(&seen, &Zone::utc());
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(
        lines[0],
        "running     none; the run-task started at 2026-04-09T05:00:00Z (pid 7) did not end: \
         killed (SIGKILL, out of memory, the machine stopped)? Its tasks stay in the inbox \
         for the next run. The journal says more (journalctl -u agent-harness)"
    );
    assert_eq!(
        lines[3..6],
        [
            "last run    run, started 2026-04-09T05:00:00Z, 2.3 s, exit 75: \
             1 succeeded, 2 failed, 3 left in the inbox",
            "            the endpoint did not answer\\nforged",
            "budget      2026-04-09: 1200 of 5000 tokens; at most 800 tokens a run",
        ]
    );
}

#[test]
fn a_channel_says_whether_it_gets_through_and_since_when_it_does_not() {
    let mut seen = quiet();
    seen.notify = Sending {
        configured: true,
        record: Some(Delivery {
            last_success: Some(at("2026-04-08T06:15:00Z")),
            failures: 3,
            first_failure: Some(at("2026-04-08T07:15:00Z")),
            last_failure: Some(at("2026-04-09T06:15:00Z")),
            last_error: Some("HTTP 503".into()),
        }),
    };
    seen.traces = Sending {
        configured: false,
        record: Some(Delivery {
            last_success: Some(at("2026-04-08T06:15:00Z")),
            ..Delivery::default()
        }),
    };

    let shown = text(&seen, &Zone::utc());
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(
        lines[6..],
        [
            "notify      3 failure(s) since the last success, 2026-04-08T06:15:00Z; \
             the last at 2026-04-09T06:15:00Z: HTTP 503",
            "traces      ok: the last went out 2026-04-08T06:15:00Z (not set in the config now)",
        ]
    );
}
