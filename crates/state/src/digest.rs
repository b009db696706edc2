//! When the last digest was mailed (docs/operating.md, "Digest and mail"),
//! kept beside the inbox in `.agent-harness-digest.json`: the next digest
//! covers what happened since, and a day's digest goes out once. Read as
//! hostile input like every state file there: missing, unreadable, linked,
//! oversized, nonsense, put there by another user than this one or the
//! folder's owner, or dated more than an hour ahead of the clock (the rule
//! the records' listing applies to a run's time), it counts as no digest
//! yet (with a warning) — a planted file never silences the digest, it can
//! only make one more go out. A mark less than an hour ahead is a clock
//! stepped back a little since it was written: that digest went out.
//!
//! A run takes the mark before it mails — as *pending*, the time it was
//! taken beside the last digest's ([`LastDigest::take`]) — and keeps it as
//! sent only once the mail server accepted the message ([`LastDigest::sent`]);
//! it gives it back when the mail did not go ([`LastDigest::give_back`]).
//! Each only while the file still holds its own mark: a mark another run
//! took meanwhile is never undone. A pending mark younger than
//! [`PENDING_FOR`] is a digest being sent: no other run sends it. Older, its
//! run died before the server took the mail (killed, out of memory): the
//! period is due again, so a digest goes out at least once.

use std::path::Path;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::files::{self, Stored};

const DIGEST_FILE: &str = ".agent-harness-digest.json";

/// A mark is a few dozen bytes; anything bigger is not one.
const MAX_BYTES: u64 = 4096;

/// How far ahead of the clock a mark may lie and still count as sent: a
/// clock stepped back that little. Further, and no run of this clock
/// wrote it.
const CLOCK_SLACK: chrono::TimeDelta = chrono::TimeDelta::hours(1);

/// How long a pending mark holds the digest for the run that took it: well
/// past the bound on a run's end (10 s), within which its mail goes or
/// not.
pub(crate) const PENDING_FOR: chrono::TimeDelta = chrono::TimeDelta::minutes(5);

/// What the file holds: when the last digest went out (none yet: absent),
/// and when a run took the mark to send the next one, until the server
/// took it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Mark {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sent_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pending_since: Option<DateTime<Utc>>,
}

/// The digest's mark as read at a moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DigestStanding {
    /// When the last digest went out; `None` when none did, or the mark is
    /// not to be trusted.
    pub sent_at: Option<DateTime<Utc>>,
    /// A run took the mark less than [`PENDING_FOR`] ago and may be
    /// sending the digest now.
    pub sending: bool,
}

/// When the last digest went out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastDigest;

impl LastDigest {
    /// When the digest beside the inbox in `state_dir` was last mailed,
    /// as seen at `now`; `None` when none was, or the mark is not to be
    /// trusted (said in a warning).
    pub fn read(state_dir: &Path, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        Self::standing(state_dir, now).sent_at
    }

    /// The mark as seen at `now`: when the last digest was mailed, and
    /// whether a run is sending one (a pending mark, fresh).
    pub fn standing(state_dir: &Path, now: DateTime<Utc>) -> DigestStanding {
        let path = state_dir.join(DIGEST_FILE);
        let distrusted = |why: &str| {
            tracing::warn!(path = %path.display(), "the last digest's time is not read ({why}); the digest counts as never sent");
        };
        let mark = match Self::stored(state_dir) {
            Ok(mark) => mark,
            Err(why) => {
                distrusted(&why);
                return DigestStanding {
                    sent_at: None,
                    sending: false,
                };
            }
        };
        // A pending mark ahead of the clock is no run's of this clock (or
        // the clock stepped back): it holds nothing back, so a planted
        // file never silences the digest for more than PENDING_FOR.
        let sending = mark
            .pending_since
            .is_some_and(|at| at > now - PENDING_FOR && at <= now);
        let sent_at = match mark.sent_at {
            Some(sent_at) if sent_at > now + CLOCK_SLACK => {
                distrusted(&format!(
                    "it is dated {}, more than an hour after now: a clock that was wrong, or another hand, wrote it",
                    sent_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                ));
                None
            }
            sent_at => sent_at,
        };
        DigestStanding { sent_at, sending }
    }

    /// Takes the mark at `now` for a digest about to be sent: pending,
    /// the last digest's time (`previous`) kept beside it.
    pub fn take(
        state_dir: &Path,
        now: DateTime<Utc>,
        previous: Option<DateTime<Utc>>,
    ) -> anyhow::Result<()> {
        Self::write(
            state_dir,
            Mark {
                sent_at: previous,
                pending_since: Some(now),
            },
        )
    }

    /// The digest of the mark `ours` went out (the server accepted it): it
    /// is kept as the last digest's time — while the file still holds
    /// `ours`. Whether it was kept.
    pub fn sent(state_dir: &Path, ours: DateTime<Utc>) -> anyhow::Result<bool> {
        if !Self::holds(state_dir, ours) {
            return Ok(false);
        }
        Self::save(state_dir, Some(ours))?;
        Ok(true)
    }

    /// Gives back the mark `ours` a run took for a digest that did not go
    /// out: `previous` is kept again (`None`: forgotten) — but only while
    /// the file still holds `ours`. Whether it was given back.
    pub fn give_back(
        state_dir: &Path,
        ours: DateTime<Utc>,
        previous: Option<DateTime<Utc>>,
    ) -> anyhow::Result<bool> {
        if !Self::holds(state_dir, ours) {
            return Ok(false);
        }
        Self::save(state_dir, previous)?;
        Ok(true)
    }

    /// Whether the file holds the mark a run took at `ours` (pending; or,
    /// as an older version wrote it, sent).
    fn holds(state_dir: &Path, ours: DateTime<Utc>) -> bool {
        match Self::stored(state_dir) {
            Ok(mark) => {
                mark.pending_since == Some(ours)
                    || mark
                        == Mark {
                            sent_at: Some(ours),
                            pending_since: None,
                        }
            }
            Err(_) => false,
        }
    }

    /// The mark as the file holds it, with no regard to the clock (none:
    /// the default); `Err` says why it is not to be read.
    fn stored(state_dir: &Path) -> Result<Mark, String> {
        match files::read_own(state_dir, DIGEST_FILE, MAX_BYTES) {
            Stored::Absent => Ok(Mark::default()),
            Stored::Unreadable(why) | Stored::Foreign(why) => Err(why),
            Stored::Bytes(bytes) => serde_json::from_slice::<Mark>(&bytes)
                .map_err(|e| format!("not a digest mark: {e}")),
        }
    }

    /// Keeps `sent_at` as the last digest's time, or with `None` forgets
    /// it (a digest that did not go out gives its mark back).
    pub fn save(state_dir: &Path, sent_at: Option<DateTime<Utc>>) -> anyhow::Result<()> {
        Self::write(
            state_dir,
            Mark {
                sent_at,
                pending_since: None,
            },
        )
    }

    fn write(state_dir: &Path, mark: Mark) -> anyhow::Result<()> {
        let path = state_dir.join(DIGEST_FILE);
        let written = if mark == Mark::default() {
            files::remove(state_dir, DIGEST_FILE)
        } else {
            let text = serde_json::to_string(&mark)? + "\n";
            files::write(state_dir, DIGEST_FILE, text.as_bytes())
        };
        written.map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().to_utc()
    }

    #[test]
    fn a_mark_is_kept_read_back_and_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let now = at("2026-04-09T06:15:00Z");
        assert_eq!(LastDigest::read(dir.path(), now), None);
        LastDigest::save(dir.path(), Some(at("2026-04-09T06:00:00Z"))).unwrap();
        assert_eq!(
            LastDigest::read(dir.path(), now),
            Some(at("2026-04-09T06:00:00Z"))
        );
        LastDigest::save(dir.path(), None).unwrap();
        assert_eq!(LastDigest::read(dir.path(), now), None);
    }

    #[test]
    fn a_mark_a_little_ahead_is_a_clock_stepped_back_and_counts_as_sent() {
        let dir = tempfile::tempdir().unwrap();
        let now = at("2026-04-09T07:02:00Z");
        // Sent at 07:08, then the clock went back ten minutes.
        LastDigest::save(dir.path(), Some(at("2026-04-09T07:08:00Z"))).unwrap();
        assert_eq!(
            LastDigest::read(dir.path(), now),
            Some(at("2026-04-09T07:08:00Z"))
        );
        LastDigest::save(dir.path(), Some(at("2026-04-09T08:02:00Z"))).unwrap();
        assert_eq!(
            LastDigest::read(dir.path(), now),
            Some(at("2026-04-09T08:02:00Z"))
        );
        // More than an hour ahead: no run of this clock wrote it.
        LastDigest::save(dir.path(), Some(at("2026-04-09T08:03:00Z"))).unwrap();
        assert_eq!(LastDigest::read(dir.path(), now), None);
    }

    #[test]
    fn a_mark_is_given_back_only_while_the_file_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let now = at("2026-04-09T07:30:00Z");
        let previous = Some(at("2026-04-08T07:05:00Z"));
        let ours = at("2026-04-09T07:05:00Z");
        LastDigest::save(dir.path(), Some(ours)).unwrap();
        assert!(LastDigest::give_back(dir.path(), ours, previous).unwrap());
        assert_eq!(LastDigest::read(dir.path(), now), previous);
        // None before: forgotten again.
        LastDigest::save(dir.path(), Some(ours)).unwrap();
        assert!(LastDigest::give_back(dir.path(), ours, None).unwrap());
        assert_eq!(LastDigest::read(dir.path(), now), None);
        // Another run's mark meanwhile stays.
        let theirs = at("2026-04-09T07:06:00Z");
        LastDigest::save(dir.path(), Some(theirs)).unwrap();
        assert!(!LastDigest::give_back(dir.path(), ours, previous).unwrap());
        assert_eq!(LastDigest::read(dir.path(), now), Some(theirs));
        // And so does its absence, or what is no mark.
        LastDigest::save(dir.path(), None).unwrap();
        assert!(!LastDigest::give_back(dir.path(), ours, previous).unwrap());
        assert_eq!(LastDigest::read(dir.path(), now), None);
        std::fs::write(dir.path().join(DIGEST_FILE), "nonsense").unwrap();
        assert!(!LastDigest::give_back(dir.path(), ours, previous).unwrap());
        assert_eq!(
            std::fs::read_to_string(dir.path().join(DIGEST_FILE)).unwrap(),
            "nonsense"
        );
    }

    #[test]
    fn a_pending_mark_holds_the_digest_until_sent_or_until_its_run_is_surely_gone() {
        let dir = tempfile::tempdir().unwrap();
        let previous = Some(at("2026-04-08T07:05:00Z"));
        let ours = at("2026-04-09T07:05:00Z");
        LastDigest::take(dir.path(), ours, previous).unwrap();
        // Being sent: another run sends none; the period still starts at
        // the last digest that went out.
        let soon = LastDigest::standing(dir.path(), at("2026-04-09T07:06:00Z"));
        assert_eq!(
            soon,
            DigestStanding {
                sent_at: previous,
                sending: true
            }
        );
        // Its run died before the server took the mail: due again.
        let later = LastDigest::standing(dir.path(), ours + PENDING_FOR);
        assert_eq!(
            later,
            DigestStanding {
                sent_at: previous,
                sending: false
            }
        );
        // Taken by the server: sent at the mark's time.
        assert!(LastDigest::sent(dir.path(), ours).unwrap());
        assert_eq!(
            LastDigest::standing(dir.path(), at("2026-04-09T07:06:00Z")),
            DigestStanding {
                sent_at: Some(ours),
                sending: false
            }
        );
        // Another run's mark meanwhile is not made "sent".
        let theirs = at("2026-04-09T07:20:00Z");
        LastDigest::take(dir.path(), theirs, Some(ours)).unwrap();
        assert!(!LastDigest::sent(dir.path(), ours).unwrap());
        assert!(!LastDigest::give_back(dir.path(), ours, previous).unwrap());
        assert!(LastDigest::give_back(dir.path(), theirs, Some(ours)).unwrap());
        assert_eq!(LastDigest::read(dir.path(), theirs), Some(ours));
        // With no digest before, given back is no file at all.
        LastDigest::take(dir.path(), ours, None).unwrap();
        assert!(LastDigest::give_back(dir.path(), ours, None).unwrap());
        assert!(!dir.path().join(DIGEST_FILE).exists());
    }

    #[test]
    fn a_mark_far_ahead_of_the_clock_nonsense_or_a_link_counts_as_no_digest_yet() {
        let dir = tempfile::tempdir().unwrap();
        let now = at("2026-04-09T06:15:00Z");
        let path = dir.path().join(DIGEST_FILE);
        std::fs::write(&path, r#"{"sent_at":"2099-01-01T00:00:00Z"}"#).unwrap();
        assert_eq!(LastDigest::read(dir.path(), now), None);
        std::fs::write(&path, "x".repeat(10_000)).unwrap();
        assert_eq!(LastDigest::read(dir.path(), now), None);
        std::fs::write(&path, r#"{"sent_at":"2026-04-09T06:00:00Z","more":1}"#).unwrap();
        assert_eq!(LastDigest::read(dir.path(), now), None);
        std::fs::remove_file(&path).unwrap();
        let elsewhere = dir.path().join("elsewhere.json");
        std::fs::write(&elsewhere, r#"{"sent_at":"2026-04-09T06:00:00Z"}"#).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        assert_eq!(LastDigest::read(dir.path(), now), None);
        // Saving replaces the link, never writes through it.
        LastDigest::save(dir.path(), Some(at("2026-04-09T06:10:00Z"))).unwrap();
        assert_eq!(
            std::fs::read_to_string(&elsewhere).unwrap(),
            r#"{"sent_at":"2026-04-09T06:00:00Z"}"#
        );
        assert_eq!(
            LastDigest::read(dir.path(), now),
            Some(at("2026-04-09T06:10:00Z"))
        );
    }
}
