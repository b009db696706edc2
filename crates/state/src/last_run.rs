//! How the last run ended (docs/operating.md, "The morning after"): kept
//! beside the inbox in `.agent-harness-last-run.json` by each `run` and
//! `run-task` (not a dry run, nor one that found the lock taken; one that
//! stopped before its tasks, at its config or its setup, too) — when it
//! started and finished, its exit code and what its tasks did — so `status`
//! says it without the metrics textfile or the journal. The run that
//! finished last is the one kept: a run writes it after letting go of the
//! run lock, so one that took longer to end never replaces a later one's.
//! Written whole under a short lock of its own; read as hostile input
//! (capped, never through a link): what cannot be read is said, never
//! taken for "no run".

use std::path::Path;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::files::{self, Stored};

const LAST_RUN_FILE: &str = ".agent-harness-last-run.json";

/// A record of one run is a few hundred bytes; anything bigger is not one.
const MAX_BYTES: u64 = 64 * 1024;

/// The last run, as it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastRun {
    /// `run`, or `run-task NAME`.
    pub command: String,
    pub started: DateTime<Utc>,
    pub finished: DateTime<Utc>,
    pub exit_code: u8,
    pub succeeded: usize,
    /// Failed for good: moved to `failed/`.
    pub failed: usize,
    /// Left in the inbox: to try again, interrupted, or not started.
    pub retry_later: usize,
    pub interrupted: usize,
    pub not_started: usize,
    /// Why it exited as it did besides its tasks, in one line: a setup
    /// fault, an endpoint that did not answer, a `[budget]` limit, the
    /// error that stopped it, a problem it met.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl LastRun {
    /// The last run recorded beside the inbox in `state_dir`: `None` when
    /// none is; `Err` says why the file there cannot be read.
    pub fn load(state_dir: &Path) -> Result<Option<LastRun>, String> {
        let path = state_dir.join(LAST_RUN_FILE);
        match files::read_own(state_dir, LAST_RUN_FILE, MAX_BYTES) {
            Stored::Absent => Ok(None),
            Stored::Bytes(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| format!("{}: not a record of a run: {e}", path.display())),
            Stored::Unreadable(why) | Stored::Foreign(why) => {
                Err(format!("{}: {why}", path.display()))
            }
        }
    }

    /// Writes it beside the inbox in `state_dir`, over the last one —
    /// unless that one finished later: `Ok(false)`, and it stays. One that
    /// says it finished more than an hour after this run (planted, or the
    /// clock went back) is no later run: it is replaced, never kept for good.
    pub fn save(&self, state_dir: &Path) -> anyhow::Result<bool> {
        let path = state_dir.join(LAST_RUN_FILE);
        let _lock = files::status_locked(state_dir, LAST_RUN_FILE)?;
        if let Ok(Some(kept)) = LastRun::load(state_dir)
            && kept.finished > self.finished
            && kept.finished - self.finished <= chrono::TimeDelta::hours(1)
        {
            return Ok(false);
        }
        let text = serde_json::to_string_pretty(self)?;
        files::write(state_dir, LAST_RUN_FILE, (text + "\n").as_bytes())
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> LastRun {
        LastRun {
            command: "run".into(),
            started: "2026-04-09T06:15:00Z".parse().unwrap(),
            finished: "2026-04-09T06:16:30Z".parse().unwrap(),
            exit_code: 1,
            succeeded: 3,
            failed: 1,
            retry_later: 0,
            interrupted: 0,
            not_started: 0,
            note: None,
        }
    }

    #[test]
    fn the_last_run_is_read_back_as_it_was_written_and_replaced_by_the_next() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(LastRun::load(dir.path()), Ok(None));
        assert!(run().save(dir.path()).unwrap());
        assert_eq!(LastRun::load(dir.path()), Ok(Some(run())));
        let next = LastRun {
            exit_code: 2,
            note: Some("setup fault".into()),
            ..run()
        };
        assert!(next.save(dir.path()).unwrap(), "finished as late: replaced");
        assert_eq!(LastRun::load(dir.path()), Ok(Some(next.clone())));
        // A run that finished before the one kept (it took longer to write
        // its end) does not replace it.
        let earlier = LastRun {
            finished: "2026-04-09T06:16:29Z".parse().unwrap(),
            exit_code: 0,
            ..run()
        };
        assert!(!earlier.save(dir.path()).unwrap());
        assert_eq!(LastRun::load(dir.path()), Ok(Some(next)));
    }

    #[test]
    fn a_record_that_is_garbage_huge_or_a_link_is_said_never_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LAST_RUN_FILE);
        std::fs::write(&path, "{\"command\": 5").unwrap();
        let why = LastRun::load(dir.path()).unwrap_err();
        assert!(why.contains("not a record of a run"), "{why}");
        std::fs::write(&path, vec![b' '; MAX_BYTES as usize + 1]).unwrap();
        let why = LastRun::load(dir.path()).unwrap_err();
        assert!(why.contains("bytes"), "{why}");
        std::fs::remove_file(&path).unwrap();
        let elsewhere = dir.path().join("elsewhere.json");
        std::fs::write(&elsewhere, serde_json::to_string(&run()).unwrap()).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        let why = LastRun::load(dir.path()).unwrap_err();
        assert!(why.contains("symbolic link"), "{why}");
    }

    #[test]
    fn a_record_dated_past_the_hour_ahead_is_replaced_never_kept_for_good() {
        let dir = tempfile::tempdir().unwrap();
        let planted = LastRun {
            finished: "2099-01-01T00:00:00Z".parse().unwrap(),
            exit_code: 0,
            ..run()
        };
        assert!(planted.save(dir.path()).unwrap());
        assert!(run().save(dir.path()).unwrap(), "replaced");
        assert_eq!(LastRun::load(dir.path()), Ok(Some(run())));
    }
}
