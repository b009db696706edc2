//! The day's spend on model requests, kept beside the inbox (SPEC §23):
//! `.agent-harness-budget.json` holds the calendar day and what it spent.
//! It is read as hostile input, like every state file there: missing,
//! unreadable, linked, oversized or nonsense, it counts as 0 (with a
//! warning), and another day's ledger is today's 0. It is written whole,
//! and a process adds its spend to what the file holds under a short lock
//! of its own (`run`, `exec` and `eval` may spend at the same time).

use std::fs::TryLockError;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};

use super::state::{self, Stored};

/// The ledger's name, beside the inbox.
pub const SPEND_FILE: &str = ".agent-harness-budget.json";

/// Held while a process adds its spend to the ledger.
pub const SPEND_LOCK: &str = ".agent-harness-budget.lock";

/// A ledger is a few dozen bytes; anything bigger is not one.
const MAX_BYTES: u64 = 4096;

/// How long an addition waits for the ledger's lock: another process
/// holds it for one read and one write.
const LOCK_WAIT: Duration = Duration::from_secs(2);

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

    /// What the ledger in `state_dir` holds, of whichever day: `Ok(None)`
    /// when there is none, `Err` why it could not be read.
    pub fn stored(state_dir: &Path) -> Result<Option<DaySpend>, String> {
        match state::read(state_dir, SPEND_FILE, MAX_BYTES) {
            Stored::Absent => Ok(None),
            Stored::Unreadable(why) => Err(why),
            Stored::Bytes(bytes) => serde_json::from_slice::<DaySpend>(&bytes)
                .map(Some)
                .map_err(|e| format!("not a ledger: {e}")),
        }
    }

    /// What the ledger in `state_dir` says `today` spent (another day's
    /// ledger, or none, is nothing yet): `Err` says why it could not be
    /// read (its reader starts from 0).
    pub fn read(state_dir: &Path, today: NaiveDate) -> Result<DaySpend, String> {
        Ok(DaySpend::of_day(DaySpend::stored(state_dir)?, today))
    }

    /// [`DaySpend::read`], with a warning when the ledger is unreadable or
    /// missing.
    pub fn load(state_dir: &Path, today: NaiveDate) -> DaySpend {
        match DaySpend::stored(state_dir) {
            Ok(None) => {
                tracing::warn!(path = %state_dir.join(SPEND_FILE).display(), "no budget ledger yet; today's spend counts from 0");
                DaySpend::nothing(today)
            }
            Ok(stored) => DaySpend::of_day(stored, today),
            Err(why) => unreadable(state_dir, &why, today),
        }
    }

    /// What `stored` says `today` spent: another day's ledger, or none, is
    /// nothing yet.
    fn of_day(stored: Option<DaySpend>, today: NaiveDate) -> DaySpend {
        stored
            .filter(|spent| spent.day == today)
            .unwrap_or(DaySpend::nothing(today))
    }

    /// Adds `spent` (tokens and GPU time of its day) to what the ledger in
    /// `state_dir` holds (another process may have spent since it was
    /// read), under the ledger's lock; returns the sum now kept. With
    /// `wait` false a lock held elsewhere is `Ok(None)` at once (the caller
    /// adds it later); with `wait` it is waited for, 2 s at most. A ledger
    /// dated after `spent`'s day (the clock went back) is never
    /// overwritten: that is an error.
    pub fn add(state_dir: &Path, spent: DaySpend, wait: bool) -> io::Result<Option<DaySpend>> {
        let lock = state::open(state_dir)?.open_lock(SPEND_LOCK)?;
        let waited = Instant::now();
        loop {
            match lock.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) if !wait => return Ok(None),
                Err(TryLockError::WouldBlock) if waited.elapsed() < LOCK_WAIT => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(TryLockError::WouldBlock) => {
                    return Err(io::Error::other(format!(
                        "{SPEND_LOCK} stayed locked for {}s",
                        LOCK_WAIT.as_secs()
                    )));
                }
                Err(TryLockError::Error(e)) => return Err(e),
            }
        }
        let day = spent.day;
        let before = match DaySpend::stored(state_dir) {
            Ok(Some(later)) if later.day > day => {
                return Err(io::Error::other(format!(
                    "it is dated {}, after today ({day}): did the clock go back?",
                    later.day
                )));
            }
            Ok(stored) => DaySpend::of_day(stored, day),
            Err(why) => unreadable(state_dir, &why, day),
        };
        let sum = DaySpend {
            day,
            tokens: before.tokens.saturating_add(spent.tokens),
            gpu_ms: before.gpu_ms.saturating_add(spent.gpu_ms),
        };
        sum.save(state_dir)?;
        Ok(Some(sum))
    }

    /// Writes the ledger whole (`0600`), replacing whatever had its name.
    pub fn save(&self, state_dir: &Path) -> io::Result<()> {
        let text = serde_json::to_string(self).map_err(io::Error::other)?;
        state::write(state_dir, SPEND_FILE, (text + "\n").as_bytes())
    }
}

/// A ledger that cannot be read counts as nothing, with a warning.
fn unreadable(state_dir: &Path, why: &str, today: NaiveDate) -> DaySpend {
    tracing::warn!(path = %state_dir.join(SPEND_FILE).display(), error = %why, "budget ledger unreadable; today's spend counts from 0");
    DaySpend::nothing(today)
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

    #[test]
    fn additions_from_two_holders_are_summed_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        DaySpend::add(dir.path(), spent(26, 10, 100), false).unwrap();
        // Another process spent meanwhile.
        let sum = DaySpend::add(dir.path(), spent(26, 5, 50), false).unwrap();
        assert_eq!(sum, Some(spent(26, 15, 150)));
        // A new day starts from what it spent, not from yesterday's.
        let sum = DaySpend::add(dir.path(), spent(27, 1, 0), false).unwrap();
        assert_eq!(sum, Some(spent(27, 1, 0)));
        assert_eq!(DaySpend::read(dir.path(), day(27)), Ok(spent(27, 1, 0)));
        // A clock gone back never overwrites a later day's ledger.
        let e = DaySpend::add(dir.path(), spent(26, 1, 0), false).unwrap_err();
        assert!(e.to_string().contains("after today"), "{e}");
        assert_eq!(DaySpend::read(dir.path(), day(27)), Ok(spent(27, 1, 0)));
    }

    #[test]
    fn a_lock_held_elsewhere_is_not_waited_for_unless_asked_and_then_in_bounded_time() {
        let dir = tempfile::tempdir().unwrap();
        let held = std::fs::File::create(dir.path().join(SPEND_LOCK)).unwrap();
        held.lock().unwrap();
        assert_eq!(
            DaySpend::add(dir.path(), spent(26, 1, 0), false).unwrap(),
            None
        );
        let e = DaySpend::add(dir.path(), spent(26, 1, 0), true).unwrap_err();
        assert!(e.to_string().contains("stayed locked"), "{e}");
        drop(held);
        assert!(
            DaySpend::add(dir.path(), spent(26, 1, 0), true)
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
