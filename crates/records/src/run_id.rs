//! Run ids (docs/operating.md, "Records"): a run's start second,
//! `YYYYMMDDTHHMMSSZ`, and `-N` when two runs of a task start in the same
//! second — made, read back, put in time order, and told from times no run of
//! this clock has had.

use chrono::{DateTime, Utc};

/// The run id for a start time: `YYYYMMDDTHHMMSSZ`.
pub fn run_id_for(started: DateTime<Utc>) -> String {
    started.format("%Y%m%dT%H%M%SZ").to_string()
}

/// The start time a run id names: `YYYYMMDDTHHMMSSZ`, perhaps `-N`.
pub fn run_time(run_id: &str) -> Option<DateTime<Utc>> {
    let stamp = run_id.split_once('-').map_or(run_id, |(s, n)| {
        if n.bytes().all(|b| b.is_ascii_digit()) && !n.is_empty() {
            s
        } else {
            ""
        }
    });
    if stamp.len() != 16 {
        return None;
    }
    chrono::NaiveDateTime::parse_from_str(stamp, "%Y%m%dT%H%M%SZ")
        .ok()
        .map(|t| t.and_utc())
}

/// A run id in time order (`…Z-10` after `…Z-9`): the stamp, then the clash number.
pub fn run_order(run_id: &str) -> (&str, u32) {
    match run_id.split_once('-') {
        Some((stamp, n)) => (stamp, n.parse().unwrap_or(0)),
        None => (run_id, 1),
    }
}

/// How far ahead of the clock a run's time may lie: further, and no run
/// of this clock wrote it (a planted folder, or a clock that went back).
pub(crate) const CLOCK_SLACK_HOURS: i64 = 1;

/// Whether `time`, a run's, lies more than [`CLOCK_SLACK_HOURS`] ahead of
/// `now`.
pub fn ahead_of_clock(time: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    time > now + chrono::Duration::hours(CLOCK_SLACK_HOURS)
}
