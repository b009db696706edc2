//! Unit tests of the budget: limits, the day boundary, the ledger.

#![allow(
    clippy::disallowed_methods,
    reason = "the budget's own tests ask and charge it"
)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use super::*;

/// A config with `[budget]` as given, in `tz`, and a clock the test moves.
fn budget(section: &str, tz: &str) -> (Budget, Arc<AtomicI64>) {
    let text = format!(
        "[endpoint]\nkind = \"openai\"\n[openai]\nbase_url = \"http://127.0.0.1:1/v1\"\n[schedule]\ntimezone = \"{tz}\"\n[budget]\n{section}\n"
    );
    let cfg = Config::parse(&text, Path::new("/t/agent.toml"), Path::new("/t"), &|_| {
        None
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let now = Arc::new(AtomicI64::new(at("2026-11-26T12:00:00Z")));
    let clock_now = now.clone();
    let clock: Arc<dyn Fn() -> DateTime<Utc> + Send + Sync> = Arc::new(move || {
        DateTime::from_timestamp(clock_now.load(Ordering::SeqCst), 0).unwrap_or_default()
    });
    (Budget::new(&cfg, clock), now)
}

fn at(rfc3339: &str) -> i64 {
    DateTime::parse_from_rfc3339(rfc3339).unwrap().timestamp()
}

#[test]
fn no_limit_never_stops_and_keeps_nothing() {
    let (b, _) = budget("", "UTC");
    b.spend(u64::MAX, u64::MAX);
    assert_eq!(b.check(), Ok(()));
    assert_eq!(b.spend_today().tokens, 0);
}

#[test]
fn a_limit_is_reached_at_its_value_and_named_with_its_reset() {
    let (b, _) = budget("tokens_per_day = 1000", "Europe/Berlin");
    b.spend(999, 0);
    assert_eq!(b.check(), Ok(()));
    b.spend(1, 0);
    let why = b.check().unwrap_err();
    assert!(
        why.contains("[budget] tokens_per_day = 1000 reached"),
        "{why}"
    );
    assert!(why.contains("1000 tokens spent on 2026-11-26"), "{why}");
    // Midnight in Berlin, in winter an hour ahead of UTC.
    assert!(why.contains("resets at 2026-11-27T00:00:00+01:00"), "{why}");
}

#[test]
fn gpu_seconds_and_the_run_limit_each_stop_on_their_own() {
    let (b, _) = budget("gpu_seconds_per_day = 2", "UTC");
    b.spend(1_000_000, 1999);
    assert_eq!(b.check(), Ok(()));
    b.spend(0, 1);
    assert!(
        b.check()
            .unwrap_err()
            .contains("gpu_seconds_per_day = 2 reached (2.0")
    );
    let (b, _) = budget("tokens_per_run = 10", "UTC");
    b.spend(12, 0);
    let why = b.check().unwrap_err();
    assert!(
        why.contains("tokens_per_run = 10 reached (12 tokens"),
        "{why}"
    );
    assert!(why.contains("next run"), "{why}");
}

#[test]
fn the_day_turns_at_midnight_in_the_configured_time_zone_not_utc() {
    let (b, now) = budget("tokens_per_day = 100", "America/New_York");
    // 23:30 in New York on the 26th is 04:30 UTC on the 27th.
    now.store(at("2026-11-27T04:30:00Z"), Ordering::SeqCst);
    b.spend(100, 0);
    let why = b.check().unwrap_err();
    assert!(why.contains("spent on 2026-11-26"), "{why}");
    assert!(why.contains("resets at 2026-11-27T00:00:00-05:00"), "{why}");
    now.store(at("2026-11-27T04:59:59Z"), Ordering::SeqCst);
    assert!(b.check().is_err());
    now.store(at("2026-11-27T05:00:00Z"), Ordering::SeqCst);
    assert_eq!(b.check(), Ok(()));
    assert_eq!(b.spend_today().day.to_string(), "2026-11-27");
    assert_eq!(b.spend_today().tokens, 0);
}

#[test]
fn a_midnight_that_a_clock_change_skips_resets_when_the_day_begins() {
    // Santiago moves its clocks from 24:00 to 01:00 on 2026-09-06.
    let (b, _) = budget("tokens_per_day = 1", "America/Santiago");
    let start = b.day_start(NaiveDate::from_ymd_opt(2026, 9, 6).unwrap());
    assert_eq!(start.to_rfc3339(), "2026-09-06T01:00:00-03:00");
}

#[test]
fn the_ledger_carries_the_day_across_runs_and_starts_from_nothing_when_it_is_nonsense() {
    let dir = tempfile::tempdir().unwrap();
    let (first, _) = budget("tokens_per_day = 100\ngpu_seconds_per_day = 9", "UTC");
    first.keep_ledger(dir.path());
    first.spend(60, 1500);
    let (second, _) = budget("tokens_per_day = 100\ngpu_seconds_per_day = 9", "UTC");
    second.keep_ledger(dir.path());
    assert_eq!(second.spend_today().tokens, 60);
    assert_eq!(second.spend_today().gpu_seconds, 1.5);
    second.spend(40, 0);
    assert!(second.check().is_err());
    std::fs::write(dir.path().join(SPEND_FILE), "{\"day\": nonsense").unwrap();
    let (third, _) = budget("tokens_per_day = 100", "UTC");
    third.keep_ledger(dir.path());
    assert_eq!(third.spend_today().tokens, 0);
    third.spend(99, 0);
    assert_eq!(third.check(), Ok(()));
    third.spend(1, 0);
    assert!(third.check().is_err(), "the limit holds from 0");
    assert_eq!(
        DaySpend::read(dir.path(), third.spend_today().day).map(|d| d.tokens),
        Ok(100)
    );
}

#[test]
fn a_ledger_that_cannot_be_written_is_a_problem_said_once() {
    let dir = tempfile::tempdir().unwrap();
    let (b, _) = budget("tokens_per_day = 100", "UTC");
    b.keep_ledger(&dir.path().join("missing"));
    b.spend(1, 0);
    b.spend(1, 0);
    let problem = b.problems().join("\n");
    assert!(problem.contains(SPEND_FILE), "{problem}");
    assert_eq!(b.spend_today().tokens, 2, "counted in memory still");
}

#[test]
fn another_process_lowering_the_ledger_never_lowers_this_ones_count() {
    let dir = tempfile::tempdir().unwrap();
    let (b, _) = budget("tokens_per_day = 100", "UTC");
    b.keep_ledger(dir.path());
    b.spend(60, 0);
    std::fs::write(
        dir.path().join(SPEND_FILE),
        r#"{"day":"2026-11-26","tokens":0,"gpu_ms":0}"#,
    )
    .unwrap();
    b.spend(40, 0);
    assert!(b.check().is_err(), "100 spent here, whatever the file says");
    assert_eq!(b.spend_today().tokens, 100);
}

#[test]
fn a_clock_gone_back_a_day_keeps_the_later_days_count() {
    let dir = tempfile::tempdir().unwrap();
    let (b, now) = budget("tokens_per_day = 100", "UTC");
    b.keep_ledger(dir.path());
    now.store(at("2026-11-27T08:00:00Z"), Ordering::SeqCst);
    b.spend(100, 0);
    now.store(at("2026-11-26T23:00:00Z"), Ordering::SeqCst);
    assert!(b.check().is_err(), "still the 27th's spend");
    b.spend(1, 0);
    assert_eq!(
        DaySpend::read(dir.path(), NaiveDate::from_ymd_opt(2026, 11, 27).unwrap())
            .map(|d| d.tokens),
        Ok(101)
    );
}

#[test]
fn a_ledger_locked_elsewhere_is_added_to_later_never_waited_for_mid_run() {
    let dir = tempfile::tempdir().unwrap();
    let (b, _) = budget("tokens_per_day = 100", "UTC");
    b.keep_ledger(dir.path());
    let held = std::fs::File::create(dir.path().join(crate::SPEND_LOCK)).unwrap();
    held.lock().unwrap();
    b.spend(30, 0);
    // Not waited for: waiting would have ended in "stayed locked", a problem.
    assert!(b.problems().is_empty());
    assert!(
        !dir.path().join(SPEND_FILE).exists(),
        "pending, not written"
    );
    assert_eq!(b.spend_today().tokens, 30, "counted here all the same");
    drop(held);
    b.spend(5, 0);
    let day = b.spend_today().day;
    assert_eq!(DaySpend::read(dir.path(), day).map(|d| d.tokens), Ok(35));
    assert!(b.problems().is_empty());
}

#[test]
fn the_first_refusal_is_remembered_after_the_day_turns() {
    let (b, now) = budget("tokens_per_day = 10", "UTC");
    b.spend(10, 0);
    let why = b.check().unwrap_err();
    now.store(at("2026-11-27T00:00:01Z"), Ordering::SeqCst);
    assert_eq!(b.check(), Ok(()));
    assert_eq!(b.refused(), Some(why));
}
