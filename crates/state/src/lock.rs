//! The single-instance lock (docs/operating.md, "The lock"): an advisory
//! `flock` on a file beside the inbox, held for the whole run and released by
//! the kernel when the process ends, however it ends — so a crash never leaves
//! a stale lock. The file is opened inside the folder holding the inbox, never
//! through a link (one planted there creates nothing anywhere) and never a
//! FIFO.

use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};

use anyhow::Context;

const LOCK_FILE: &str = ".agent-harness.lock";

/// Held while it lives.
#[derive(Debug)]
pub struct RunLock {
    _file: File,
    pub path: PathBuf,
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
            Ok(()) => Ok(Some(RunLock { _file: file, path })),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(e)) => {
                Err(e).with_context(|| format!("locking {}", path.display()))
            }
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
}
