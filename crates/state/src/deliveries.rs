//! Whether what a run sends out arrives (docs/operating.md, "The morning
//! after"): for each channel — `[notify]`'s requests, `[traces]`' export —
//! the last time one got through, and the failures since, kept beside the
//! inbox in `.agent-harness-deliveries.json` so that `status` can say a
//! channel that has been failing quietly (a failure there is a warning, never
//! the exit code). Each run that sent something adds its outcome: a success
//! clears the count. Read, changed and written whole under a short lock of
//! its own (two runs may end at once: one found the run lock taken and
//! still tells `[notify]`); read as hostile input: one that cannot be read
//! is said, and the next outcome starts it afresh.

use std::path::Path;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::files::{self, Stored};

const DELIVERIES_FILE: &str = ".agent-harness-deliveries.json";

/// A few channels of a few fields; anything bigger is not the file.
const MAX_BYTES: u64 = 64 * 1024;

/// What a run sends out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// `[notify]`: the ping and the failure report.
    Notify,
    /// `[traces]`: each task's trace.
    Traces,
}

/// Every channel's record; a channel that never sent has none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deliveries {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify: Option<Delivery>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traces: Option<Delivery>,
}

/// One channel's record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// When a run last sent on it with no failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success: Option<DateTime<Utc>>,
    /// What failed since then: notifications, or traces lost.
    #[serde(default)]
    pub failures: u64,
    /// When those failures began and when the last one was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_failure: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<DateTime<Utc>>,
    /// The last failure's error, one line, when the run knew it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// How one run's sending on a channel went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivered {
    /// Everything sent got through.
    Through,
    /// `count` failed (notifications, or traces lost), the last with `error`.
    Failed { count: u64, error: Option<String> },
}

impl Deliveries {
    /// The records beside the inbox in `state_dir` (none yet: empty);
    /// `Err` says why the file there cannot be read.
    pub fn load(state_dir: &Path) -> Result<Deliveries, String> {
        let path = state_dir.join(DELIVERIES_FILE);
        match files::read_own(state_dir, DELIVERIES_FILE, MAX_BYTES) {
            Stored::Absent => Ok(Deliveries::default()),
            Stored::Bytes(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| format!("{}: not a record of deliveries: {e}", path.display())),
            Stored::Unreadable(why) | Stored::Foreign(why) => {
                Err(format!("{}: {why}", path.display()))
            }
        }
    }

    /// The record of `channel`.
    pub fn of(&self, channel: Channel) -> Option<&Delivery> {
        match channel {
            Channel::Notify => self.notify.as_ref(),
            Channel::Traces => self.traces.as_ref(),
        }
    }

    /// `channel`'s outcome at `at` added to the records: a success clears
    /// the failures, a failure adds to them.
    pub(crate) fn add(&mut self, channel: Channel, at: DateTime<Utc>, outcome: &Delivered) {
        let record = match channel {
            Channel::Notify => &mut self.notify,
            Channel::Traces => &mut self.traces,
        }
        .get_or_insert_with(Delivery::default);
        match outcome {
            Delivered::Through => {
                *record = Delivery {
                    last_success: Some(at),
                    ..Delivery::default()
                };
            }
            Delivered::Failed { count, error } => {
                record.failures = record.failures.saturating_add(*count);
                record.first_failure.get_or_insert(at);
                record.last_failure = Some(at);
                record.last_error = error
                    .as_deref()
                    .map(|e| harness_base::text::one_line(e, harness_base::text::MAX_ERROR_CHARS));
            }
        }
    }

    /// Adds `channel`'s outcome to the file in `state_dir` (one that
    /// cannot be read starts afresh, with a warning).
    pub fn record(
        state_dir: &Path,
        channel: Channel,
        at: DateTime<Utc>,
        outcome: &Delivered,
    ) -> anyhow::Result<()> {
        let path = state_dir.join(DELIVERIES_FILE);
        let _lock = files::status_locked(state_dir, DELIVERIES_FILE)?;
        let mut all = Deliveries::load(state_dir).unwrap_or_else(|why| {
            tracing::warn!(error = %why, "the record of deliveries is unreadable; it starts afresh");
            Deliveries::default()
        });
        all.add(channel, at, outcome);
        let text = serde_json::to_string_pretty(&all)?;
        files::write(state_dir, DELIVERIES_FILE, (text + "\n").as_bytes())
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        text.parse().unwrap()
    }

    #[test]
    fn failures_add_up_until_a_success_clears_them() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path();
        assert_eq!(Deliveries::load(state), Ok(Deliveries::default()));
        let failed = |n, e: &str| Delivered::Failed {
            count: n,
            error: Some(e.into()),
        };
        Deliveries::record(
            state,
            Channel::Notify,
            at("2026-04-08T06:00:00Z"),
            &Delivered::Through,
        )
        .unwrap();
        Deliveries::record(
            state,
            Channel::Notify,
            at("2026-04-09T06:00:00Z"),
            &failed(2, "HTTP 500"),
        )
        .unwrap();
        Deliveries::record(
            state,
            Channel::Notify,
            at("2026-04-09T07:00:00Z"),
            &failed(1, "HTTP 502\nmore"),
        )
        .unwrap();
        Deliveries::record(
            state,
            Channel::Traces,
            at("2026-04-09T07:00:00Z"),
            &Delivered::Through,
        )
        .unwrap();
        let all = Deliveries::load(state).unwrap();
        assert_eq!(
            all.of(Channel::Notify),
            Some(&Delivery {
                last_success: Some(at("2026-04-08T06:00:00Z")),
                failures: 3,
                first_failure: Some(at("2026-04-09T06:00:00Z")),
                last_failure: Some(at("2026-04-09T07:00:00Z")),
                last_error: Some("HTTP 502 more".into()),
            })
        );
        assert_eq!(all.of(Channel::Traces).unwrap().failures, 0);
        Deliveries::record(
            state,
            Channel::Notify,
            at("2026-04-10T06:00:00Z"),
            &Delivered::Through,
        )
        .unwrap();
        assert_eq!(
            Deliveries::load(state).unwrap().of(Channel::Notify),
            Some(&Delivery {
                last_success: Some(at("2026-04-10T06:00:00Z")),
                ..Delivery::default()
            })
        );
    }

    /// Two runs ending at once (one found the run lock taken and still
    /// tells `[notify]`): neither's outcome is lost.
    #[test]
    fn outcomes_added_at_once_are_all_kept() {
        let dir = tempfile::tempdir().unwrap();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let state = dir.path().to_path_buf();
                std::thread::spawn(move || {
                    for _ in 0..25 {
                        let failed = Delivered::Failed {
                            count: 1,
                            error: None,
                        };
                        Deliveries::record(
                            &state,
                            Channel::Notify,
                            at("2026-04-09T06:00:00Z"),
                            &failed,
                        )
                        .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let all = Deliveries::load(dir.path()).unwrap();
        assert_eq!(all.of(Channel::Notify).unwrap().failures, 100);
    }

    #[test]
    fn an_unreadable_record_is_said_and_the_next_outcome_starts_it_afresh() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(DELIVERIES_FILE), "[1, 2").unwrap();
        let why = Deliveries::load(dir.path()).unwrap_err();
        assert!(why.contains("not a record of deliveries"), "{why}");
        let failed = Delivered::Failed {
            count: 1,
            error: None,
        };
        Deliveries::record(
            dir.path(),
            Channel::Traces,
            at("2026-04-09T06:00:00Z"),
            &failed,
        )
        .unwrap();
        let all = Deliveries::load(dir.path()).unwrap();
        assert_eq!(all.of(Channel::Traces).unwrap().failures, 1);
        assert_eq!(all.of(Channel::Notify), None);
    }
}
