//! The day's spend on model requests, kept beside the inbox
//! (docs/budget-and-traces.md, "Budget"): `.agent-harness-budget.json` holds
//! the calendar day and what it spent. It is read as hostile input, like every
//! state file there: missing, unreadable, linked, oversized or nonsense, it
//! counts as 0 (with a warning), and an earlier day's ledger is today's 0. One
//! this process does not trust — dated after today, or put there by another
//! user than this one or the folder's owner — counts as 0 too and is replaced
//! by this process's count at its next addition: it never switches a limit off,
//! and never pauses the queue by itself. It is written whole, and a process
//! adds its spend to what the file holds under a short lock of its own (`run`,
//! `exec` and `eval` may spend at the same time, and each reads it again before
//! every request).

use std::io;
use std::path::Path;
use std::time::Duration;

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};

use super::files::{self, Stored};

/// The ledger's name, beside the inbox.
pub const SPEND_FILE: &str = ".agent-harness-budget.json";

/// Held while a process adds its spend to the ledger.
pub const SPEND_LOCK: &str = ".agent-harness-budget.lock";

/// A ledger is a few dozen bytes; anything bigger is not one.
const MAX_BYTES: u64 = 4096;

/// How long an addition may wait for the ledger's lock: another process
/// holds it for one read and one write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Not at all: a lock held elsewhere leaves the addition for later.
    No,
    /// 50 ms at most, then later (before a request: the other holder is
    /// adding its own spend at the same moment).
    Briefly,
    /// 2 s at most, then an error (the end of a run).
    Long,
}

impl Wait {
    fn limit(self) -> Duration {
        match self {
            Wait::No => Duration::ZERO,
            Wait::Briefly => Duration::from_millis(50),
            Wait::Long => Duration::from_secs(2),
        }
    }
}

/// What one calendar day spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaySpend {
    pub day: NaiveDate,
    /// Prompt + completion tokens.
    pub tokens: u64,
    /// GPU time in milliseconds (RunPod `executionTime`, or the wall time
    /// of the chat requests).
    pub gpu_ms: u64,
}

impl DaySpend {
    pub fn nothing(day: NaiveDate) -> DaySpend {
        DaySpend {
            day,
            tokens: 0,
            gpu_ms: 0,
        }
    }

    /// What the ledger in `state_dir` says `today` spent (another day's
    /// ledger, or none, is nothing yet): `Err` says why it could not be
    /// read or is not trusted (its reader starts from 0).
    pub fn read(state_dir: &Path, today: NaiveDate) -> Result<DaySpend, String> {
        match DaySpend::find(state_dir, today) {
            Found::Absent | Found::Earlier => Ok(DaySpend::nothing(today)),
            Found::Today(spent) => Ok(spent),
            Found::Unreadable(why) | Found::Distrusted(why) => Err(why),
        }
    }

    /// What the ledger in `state_dir` holds, judged for `today`.
    pub fn find(state_dir: &Path, today: NaiveDate) -> Found {
        let stored = match files::read_own(state_dir, SPEND_FILE, MAX_BYTES) {
            Stored::Absent => return Found::Absent,
            Stored::Unreadable(why) => return Found::Unreadable(why),
            Stored::Foreign(why) => return Found::Distrusted(why),
            Stored::Bytes(bytes) => match serde_json::from_slice::<DaySpend>(&bytes) {
                Ok(stored) => stored,
                Err(e) => return Found::Unreadable(format!("not a ledger: {e}")),
            },
        };
        match stored.day.cmp(&today) {
            std::cmp::Ordering::Greater => Found::Distrusted(format!(
                "it is dated {}, after today ({today}): a clock that was wrong, or another hand, wrote it",
                stored.day
            )),
            std::cmp::Ordering::Equal => Found::Today(stored),
            std::cmp::Ordering::Less => Found::Earlier,
        }
    }

    /// Adds `spent` (tokens and GPU time of its day) to what the ledger in
    /// `state_dir` holds (another process may have spent since it was
    /// read), under the ledger's lock; returns the sum now kept. A lock
    /// held elsewhere is waited for as `wait` says: then `Ok(None)` (the
    /// caller adds it later), or for [`Wait::Long`] an error. A ledger
    /// that is not today's, cannot be read or is not trusted ([`Found`])
    /// is replaced by `spent`.
    pub fn add(state_dir: &Path, spent: DaySpend, wait: Wait) -> io::Result<Option<Added>> {
        let Some(_lock) = files::short_lock(state_dir, SPEND_LOCK, wait.limit())? else {
            return match wait {
                Wait::Long => Err(io::Error::other(format!(
                    "{SPEND_LOCK} stayed locked for {}s",
                    wait.limit().as_secs()
                ))),
                Wait::No | Wait::Briefly => Ok(None),
            };
        };
        let day = spent.day;
        let (before, replaced) = match DaySpend::find(state_dir, day) {
            Found::Today(before) => (before, None),
            Found::Absent | Found::Earlier => (DaySpend::nothing(day), None),
            Found::Unreadable(why) => (DaySpend::nothing(day), Some(Found::Unreadable(why))),
            Found::Distrusted(why) => (DaySpend::nothing(day), Some(Found::Distrusted(why))),
        };
        let sum = DaySpend {
            day,
            tokens: before.tokens.saturating_add(spent.tokens),
            gpu_ms: before.gpu_ms.saturating_add(spent.gpu_ms),
        };
        sum.save(state_dir)?;
        Ok(Some(Added { sum, replaced }))
    }

    /// Writes the ledger whole (`0600`), replacing whatever had its name.
    pub fn save(&self, state_dir: &Path) -> io::Result<()> {
        let text = serde_json::to_string(self).map_err(io::Error::other)?;
        files::write(state_dir, SPEND_FILE, (text + "\n").as_bytes())
    }
}

/// Moves aside, at `at`, what sits at the ledger's name or its lock's that
/// no process can keep the day's spend in — a folder, a FIFO, a socket or
/// a device, or another user's file (not this user's, nor the folder
/// owner's); at the lock's, a link or a file this user may not open too —
/// to `NAME.aside-<time>` in the same folder, so the next addition writes
/// a ledger again and the lock can be taken. What was moved, each said as
/// one line for the journal. A link at the ledger's name is left: it is
/// never followed, and the next write replaces it.
pub(crate) fn move_aside(state_dir: &Path, at: chrono::DateTime<chrono::Utc>) -> Vec<String> {
    use harness_base::folder::EntryKind;
    let Ok(folder) = files::open(state_dir) else {
        return Vec::new();
    };
    let me = harness_base::owner::me();
    let owner = folder.owner().unwrap_or(me);
    let mut moved = Vec::new();
    for name in [SPEND_FILE, SPEND_LOCK] {
        let Some((kind, uid)) = folder.kind_and_owner(name) else {
            continue;
        };
        let what = match kind {
            EntryKind::Folder => "a folder",
            EntryKind::Other => "a FIFO, socket or device",
            EntryKind::File if uid != me && uid != owner => "another user's file",
            // The lock is opened, never replaced: a link there, or a file
            // this user may not open, would hold every addition back.
            EntryKind::Link if name == SPEND_LOCK => "a link",
            EntryKind::File if name == SPEND_LOCK && folder.open_lock(name).is_err() => {
                "a file this user may not open"
            }
            EntryKind::File | EntryKind::Link => continue,
        };
        let aside = format!("{name}.aside-{}", at.format("%Y%m%dT%H%M%S%.9fZ"));
        let said = match folder.move_to(name.as_ref(), &folder, aside.as_ref()) {
            Ok(()) => format!(
                "{} was {what} (uid {uid}), where the day's spend is kept: moved aside to {aside}",
                state_dir.join(name).display()
            ),
            Err(e) => format!(
                "{} is {what} (uid {uid}), where the day's spend is kept, and could not be moved aside ({e}): remove it",
                state_dir.join(name).display()
            ),
        };
        moved.push(said);
    }
    moved
}

/// What the ledger holds, for one day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// No ledger yet.
    Absent,
    Today(DaySpend),
    /// An earlier day's: today has spent nothing yet.
    Earlier,
    /// A link, a FIFO, oversized, nonsense: why. Today counts from 0.
    Unreadable(String),
    /// Dated after today, or another user's: why. Today counts from 0,
    /// and the ledger is replaced; the run reports it as a problem.
    Distrusted(String),
}

/// An addition to the ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Added {
    /// What the ledger now holds.
    pub sum: DaySpend,
    /// What it held that was replaced rather than added to
    /// ([`Found::Unreadable`] or [`Found::Distrusted`]).
    pub replaced: Option<Found>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn day(d: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(2026, 11, d).unwrap()
    }

    fn read_text(text: &[u8]) -> Result<DaySpend, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        std::fs::write(dir.path().join(SPEND_FILE), text).map_err(|e| e.to_string())?;
        DaySpend::read(dir.path(), day(26))
    }

    #[test]
    fn a_saved_ledger_reads_back_on_its_day_and_as_nothing_on_another() {
        let dir = tempfile::tempdir().unwrap();
        let spent = DaySpend {
            day: day(26),
            tokens: 1234,
            gpu_ms: 5678,
        };
        spent.save(dir.path()).unwrap();
        assert_eq!(DaySpend::read(dir.path(), day(26)), Ok(spent));
        assert_eq!(
            DaySpend::read(dir.path(), day(27)),
            Ok(DaySpend::nothing(day(27)))
        );
        assert_eq!(
            DaySpend::read(&dir.path().join("absent"), day(26)),
            Ok(DaySpend::nothing(day(26)))
        );
    }

    #[test]
    fn nonsense_is_unreadable_never_a_spend() {
        for text in [
            &b""[..],
            b"{",
            b"[]",
            b"{\"day\":\"2026-11-26\",\"tokens\":-1,\"gpu_ms\":0}",
            b"{\"day\":\"2026-11-26\",\"tokens\":18446744073709551616,\"gpu_ms\":0}",
            b"{\"day\":\"2026-11-26\",\"tokens\":1.5,\"gpu_ms\":0}",
            b"{\"day\":\"2026-13-40\",\"tokens\":1,\"gpu_ms\":0}",
            b"{\"day\":\"2026-11-26\",\"tokens\":1,\"gpu_ms\":0,\"x\":1}",
            b"\xff\xfe",
        ] {
            assert!(
                read_text(text).is_err(),
                "{}",
                String::from_utf8_lossy(text)
            );
        }
        let deep = format!("{}{}", "[".repeat(3000), "]".repeat(3000));
        assert!(read_text(deep.as_bytes()).is_err());
        // Over the cap: not read at all.
        let huge = format!(
            "{{\"day\":\"2026-11-26\",\"tokens\":1,\"gpu_ms\":0}}{}",
            " ".repeat(10_000)
        );
        assert!(read_text(huge.as_bytes()).is_err());
    }

    fn spent(d: u32, tokens: u64, gpu_ms: u64) -> DaySpend {
        DaySpend {
            day: day(d),
            tokens,
            gpu_ms,
        }
    }

    fn sum(added: io::Result<Option<Added>>) -> Option<DaySpend> {
        added.unwrap().map(|a| a.sum)
    }

    #[test]
    fn additions_from_two_holders_are_summed_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        DaySpend::add(dir.path(), spent(26, 10, 100), Wait::No).unwrap();
        // Another process spent meanwhile.
        let added = DaySpend::add(dir.path(), spent(26, 5, 50), Wait::No).unwrap();
        assert_eq!(
            added,
            Some(Added {
                sum: spent(26, 15, 150),
                replaced: None
            })
        );
        // A new day starts from what it spent, not from yesterday's.
        assert_eq!(
            sum(DaySpend::add(dir.path(), spent(27, 1, 0), Wait::No)),
            Some(spent(27, 1, 0))
        );
        assert_eq!(DaySpend::read(dir.path(), day(27)), Ok(spent(27, 1, 0)));
    }

    #[test]
    fn a_ledger_dated_after_today_is_not_trusted_and_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        spent(28, 0, 0).save(dir.path()).unwrap();
        assert!(matches!(
            DaySpend::find(dir.path(), day(27)),
            Found::Distrusted(why) if why.contains("dated 2026-11-28, after today (2026-11-27)")
        ));
        assert!(DaySpend::read(dir.path(), day(27)).is_err());
        let added = DaySpend::add(dir.path(), spent(27, 5, 0), Wait::No).unwrap();
        assert!(
            matches!(&added, Some(Added { sum, replaced: Some(Found::Distrusted(_)) }) if *sum == spent(27, 5, 0)),
            "{added:?}"
        );
        assert_eq!(DaySpend::read(dir.path(), day(27)), Ok(spent(27, 5, 0)));
    }

    #[test]
    #[ignore = "needs scripts/test: root, to give the ledger to another user"]
    fn another_users_ledger_is_not_trusted() {
        assert!(
            rustix::process::geteuid().is_root(),
            "this test gives a file to another user: run it as root (scripts/test in CI does)"
        );
        let dir = tempfile::tempdir().unwrap();
        spent(27, u64::MAX, 0).save(dir.path()).unwrap();
        let path = dir.path().join(SPEND_FILE);
        std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
        assert!(matches!(
            DaySpend::find(dir.path(), day(27)),
            Found::Distrusted(why) if why.contains("belongs to user 65534")
        ));
        assert_eq!(
            sum(DaySpend::add(dir.path(), spent(27, 5, 0), Wait::No)),
            Some(spent(27, 5, 0))
        );
    }

    #[test]
    fn what_no_process_can_keep_the_spend_in_is_moved_aside_and_a_plain_ledger_stays() {
        let dir = tempfile::tempdir().unwrap();
        let at = chrono::DateTime::parse_from_rfc3339("2026-04-09T06:15:00Z")
            .unwrap()
            .to_utc();
        spent(9, 5, 0).save(dir.path()).unwrap();
        assert!(move_aside(dir.path(), at).is_empty(), "a ledger of its own");
        std::fs::remove_file(dir.path().join(SPEND_FILE)).unwrap();
        std::fs::create_dir(dir.path().join(SPEND_FILE)).unwrap();
        std::os::unix::fs::symlink("/nonexistent", dir.path().join(SPEND_LOCK)).unwrap();
        let moved = move_aside(dir.path(), at);
        assert_eq!(moved.len(), 2, "{moved:?}");
        assert!(
            moved[0].contains(".agent-harness-budget.json was a folder")
                && moved[0].ends_with(
                    "moved aside to .agent-harness-budget.json.aside-20260409T061500.000000000Z"
                ),
            "{moved:?}"
        );
        assert!(
            moved[1].contains(".agent-harness-budget.lock was a link"),
            "{moved:?}"
        );
        assert!(!dir.path().join(SPEND_FILE).exists());
        // The next addition writes a ledger again.
        assert_eq!(
            sum(DaySpend::add(dir.path(), spent(9, 7, 0), Wait::No)),
            Some(spent(9, 7, 0))
        );
    }

    #[test]
    fn a_lock_held_elsewhere_is_not_waited_for_unless_asked_and_then_in_bounded_time() {
        let dir = tempfile::tempdir().unwrap();
        let held = std::fs::File::create(dir.path().join(SPEND_LOCK)).unwrap();
        held.lock().unwrap();
        assert_eq!(
            sum(DaySpend::add(dir.path(), spent(26, 1, 0), Wait::No)),
            None
        );
        let e = DaySpend::add(dir.path(), spent(26, 1, 0), Wait::Long).unwrap_err();
        assert!(e.to_string().contains("stayed locked"), "{e}");
        drop(held);
        assert!(
            DaySpend::add(dir.path(), spent(26, 1, 0), Wait::Long)
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn a_link_at_the_ledger_is_not_followed_and_is_replaced_by_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere.json");
        std::fs::write(
            &target,
            "{\"day\":\"2026-11-26\",\"tokens\":99,\"gpu_ms\":0}",
        )
        .unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join(SPEND_FILE)).unwrap();
        assert!(DaySpend::read(dir.path(), day(26)).is_err());
        DaySpend::nothing(day(26)).save(dir.path()).unwrap();
        let meta = std::fs::symlink_metadata(dir.path().join(SPEND_FILE)).unwrap();
        assert!(meta.file_type().is_file());
        let untouched = std::fs::read_to_string(&target).unwrap_or_default();
        assert!(untouched.contains("\"tokens\":99"), "{untouched}");
    }
}
