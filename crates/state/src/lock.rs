//! The single-instance lock (docs/operating.md, "The lock"): an advisory
//! `flock` on a file beside the inbox, held for the whole run and released by
//! the kernel when the process ends, however it ends — so a crash never leaves
//! a stale lock. The file is opened inside the folder holding the inbox, never
//! through a link (one planted there creates nothing anywhere) and never a
//! FIFO. Its holder writes in it who it is ([`Holder`]: the process, the
//! command, since when), which `status` reads back while the lock is held
//! (docs/operating.md, "The morning after"); the flock alone says whether it
//! is held.

use std::fs::{File, TryLockError};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::files::{self, Stored};
use harness_base::file::FileError;

const LOCK_FILE: &str = ".agent-harness.lock";

/// A holder's note is a line; anything bigger is not one.
const MAX_HOLDER_BYTES: u64 = 4096;

/// Held while it lives.
#[derive(Debug)]
pub struct RunLock {
    file: File,
    pub path: PathBuf,
}

/// Who holds the lock, as its holder wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub pid: u32,
    /// The command holding it: `run`, `run-task`, `requeue`, `rerun`, `prune`.
    pub command: String,
    pub since: DateTime<Utc>,
}

impl Holder {
    /// A command that runs tasks while it holds the lock.
    pub fn runs_tasks(&self) -> bool {
        matches!(self.command.as_str(), "run" | "run-task")
    }
}

/// The lock as a reader finds it, without taking it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockState {
    Free,
    /// Held; by whom when its holder's note can be read (an older
    /// version wrote none; another user's note is not trusted).
    Held(Option<Holder>),
    /// It could not be looked at (a link or FIFO planted at its name, a
    /// folder this user may not read): why.
    Unknown(String),
}

impl RunLock {
    /// The lock file for a state folder.
    pub fn path(state_dir: &Path) -> PathBuf {
        state_dir.join(LOCK_FILE)
    }

    /// Takes the lock, or returns `None` when another process holds it.
    pub fn try_acquire(state_dir: &Path) -> anyhow::Result<Option<RunLock>> {
        std::fs::create_dir_all(state_dir)
            .with_context(|| format!("creating {}", state_dir.display()))?;
        let path = Self::path(state_dir);
        let file = super::files::open(state_dir)
            .and_then(|folder| folder.open_lock(LOCK_FILE))
            .with_context(|| format!("opening the lock file {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(RunLock { file, path })),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(e)) => {
                Err(e).with_context(|| format!("locking {}", path.display()))
            }
        }
    }

    /// Writes who holds the lock into its file, over what an earlier
    /// holder wrote. A note that cannot be written is a warning: the lock
    /// is what counts.
    pub fn note(&self, holder: &Holder) {
        let written = serde_json::to_string(holder)
            .map_err(std::io::Error::other)
            .and_then(|line| {
                self.file.set_len(0)?;
                self.file.write_all_at(format!("{line}\n").as_bytes(), 0)?;
                (&self.file).flush()
            });
        if let Err(e) = written {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot note the lock's holder; status will not say who holds it");
        }
    }

    /// Whether a process holds the lock in `state_dir`, and who, looked
    /// at without taking it and without creating anything.
    pub fn state(state_dir: &Path) -> LockState {
        let folder = match files::open(state_dir) {
            Ok(folder) => folder,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return LockState::Free,
            Err(e) => return LockState::Unknown(format!("{}: {e}", state_dir.display())),
        };
        match folder.lock_held(LOCK_FILE) {
            Ok(false) => LockState::Free,
            Err(FileError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => LockState::Free,
            Err(e) => LockState::Unknown(format!("{}: {e}", Self::path(state_dir).display())),
            Ok(true) => LockState::Held(
                match files::read_own(state_dir, LOCK_FILE, MAX_HOLDER_BYTES) {
                    Stored::Bytes(bytes) => serde_json::from_slice(&bytes).ok(),
                    Stored::Absent | Stored::Unreadable(_) | Stored::Foreign(_) => None,
                },
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_until_the_first_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let first = RunLock::try_acquire(dir.path()).unwrap();
        assert!(first.is_some());
        assert!(RunLock::try_acquire(dir.path()).unwrap().is_none());
        drop(first);
        assert!(RunLock::try_acquire(dir.path()).unwrap().is_some());
    }

    #[test]
    fn a_link_planted_at_the_lock_creates_nothing_and_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("made-through-the-link");
        std::os::unix::fs::symlink(&target, RunLock::path(dir.path())).unwrap();
        let e = RunLock::try_acquire(dir.path()).unwrap_err();
        assert!(format!("{e:#}").contains("symbolic link"), "{e:#}");
        assert!(!target.exists());
    }

    #[test]
    fn the_state_says_who_holds_the_lock_and_takes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(RunLock::state(dir.path()), LockState::Free);
        assert!(
            !RunLock::path(dir.path()).exists(),
            "a look creates nothing"
        );
        let lock = RunLock::try_acquire(dir.path()).unwrap().unwrap();
        assert_eq!(RunLock::state(dir.path()), LockState::Held(None));
        let holder = Holder {
            pid: 4242,
            command: "run".into(),
            since: "2026-04-09T06:15:00Z".parse().unwrap(),
        };
        lock.note(&holder);
        assert_eq!(
            RunLock::state(dir.path()),
            LockState::Held(Some(holder.clone()))
        );
        assert!(
            RunLock::try_acquire(dir.path()).unwrap().is_none(),
            "still held after the look"
        );
        drop(lock);
        assert_eq!(RunLock::state(dir.path()), LockState::Free);
        // A later holder's shorter note replaces the whole of the first.
        let lock = RunLock::try_acquire(dir.path()).unwrap().unwrap();
        let short = Holder {
            pid: 7,
            command: "prune".into(),
            ..holder
        };
        lock.note(&short);
        assert_eq!(RunLock::state(dir.path()), LockState::Held(Some(short)));
    }
}
