//! The single-instance lock (docs/operating.md, "The lock"): an advisory
//! `flock` on a file beside the inbox, held for the whole run and released by
//! the kernel when the process ends, however it ends — so a crash never leaves
//! a stale lock. The file is opened inside the folder holding the inbox, never
//! through a link (one planted there creates nothing anywhere) and never a
//! FIFO. Its holder writes in it who it is ([`Holder`]: the process, the
//! command, since when) and empties it when it lets go. A reader (`status`,
//! `runs`) never takes the lock, not even its shared side: the kernel's list
//! of locks (`/proc/locks`) says which process holds it, and the note is
//! believed only when that process wrote it (one a killed holder left names
//! another process, and says that holder did not end: [`LockState::Abandoned`]).

use std::fs::{File, TryLockError};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::files::{self, Stored};
use harness_base::file::FileError;
use harness_base::flock;

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
    /// Held by process `pid`; `holder` is its note, when it wrote one
    /// (it may not have yet: it writes it just after taking the lock).
    Held {
        pid: u32,
        holder: Option<Holder>,
    },
    /// Free, but the last holder's note is still there: a holder empties
    /// it as it lets go, so that one ended without letting go (killed:
    /// SIGKILL, out of memory, the machine stopped).
    Abandoned(Holder),
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
    /// at without taking it and without creating anything: the process
    /// `/proc/locks` says holds a `flock` on the file, with the note it
    /// wrote; where `/proc/locks` cannot be read, the note's process when
    /// it is alive. The note alone (another user's is not read) never
    /// says the lock is held.
    pub fn state(state_dir: &Path) -> LockState {
        let folder = match files::open(state_dir) {
            Ok(folder) => folder,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return LockState::Free,
            Err(e) => return LockState::Unknown(format!("{}: {e}", state_dir.display())),
        };
        let (dev, inode) = match folder.file_identity(LOCK_FILE) {
            Ok(identity) => identity,
            Err(FileError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                return LockState::Free;
            }
            Err(e) => {
                return LockState::Unknown(format!("{}: {e}", Self::path(state_dir).display()));
            }
        };
        let note: Option<Holder> = match files::read_own(state_dir, LOCK_FILE, MAX_HOLDER_BYTES) {
            Stored::Bytes(bytes) => serde_json::from_slice(&bytes).ok(),
            Stored::Absent | Stored::Unreadable(_) | Stored::Foreign(_) => None,
        };
        let pid = match flock::holder_now(dev, inode, note.as_ref().map(|n| n.pid)) {
            Ok(pid) => pid,
            Err(_) => note
                .as_ref()
                .map(|n| n.pid)
                .filter(|&pid| flock::alive(pid)),
        };
        match (pid, note) {
            (None, None) => LockState::Free,
            (None, Some(note)) => LockState::Abandoned(note),
            (Some(pid), note) => LockState::Held {
                pid,
                holder: note.filter(|n| n.pid == pid),
            },
        }
    }
}

/// The holder lets go: its note goes first, so that none is left to be
/// read as a run going now (the kernel releases the lock as the file closes).
impl Drop for RunLock {
    fn drop(&mut self) {
        let _ = self.file.set_len(0);
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
        let me = std::process::id();
        let lock = RunLock::try_acquire(dir.path()).unwrap().unwrap();
        assert_eq!(
            RunLock::state(dir.path()),
            LockState::Held {
                pid: me,
                holder: None
            }
        );
        let holder = Holder {
            pid: me,
            command: "run".into(),
            since: "2026-04-09T06:15:00Z".parse().unwrap(),
        };
        lock.note(&holder);
        assert_eq!(
            RunLock::state(dir.path()),
            LockState::Held {
                pid: me,
                holder: Some(holder.clone())
            }
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
            command: "prune".into(),
            ..holder
        };
        lock.note(&short);
        assert_eq!(
            RunLock::state(dir.path()),
            LockState::Held {
                pid: me,
                holder: Some(short)
            }
        );
    }

    /// Locks taken and let go beside a held one never hide it from a look
    /// (the kernel's table read in one read, not line by line).
    #[test]
    fn a_held_lock_is_seen_while_other_locks_come_and_go() {
        let (held, other) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let _lock = RunLock::try_acquire(held.path()).unwrap().unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let churning = {
            let (stop, state_dir) = (stop.clone(), other.path().to_path_buf());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    drop(RunLock::try_acquire(&state_dir));
                }
            })
        };
        let looks = (0..3000).map(|_| RunLock::state(held.path()));
        let hidden = looks
            .filter(|s| !matches!(s, LockState::Held { .. }))
            .count();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        churning.join().unwrap();
        assert_eq!(hidden, 0, "looks that did not see the held lock");
    }

    /// A look at the lock never takes it: a run trying it while status
    /// and runs look over and over always gets it.
    #[test]
    fn a_look_never_makes_the_lock_look_taken() {
        let dir = tempfile::tempdir().unwrap();
        drop(RunLock::try_acquire(dir.path()).unwrap());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let looking = {
            let (stop, state_dir) = (stop.clone(), dir.path().to_path_buf());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = RunLock::state(&state_dir);
                }
            })
        };
        for _ in 0..2000 {
            let lock = RunLock::try_acquire(dir.path()).unwrap();
            assert!(lock.is_some(), "a look took the lock from a run");
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        looking.join().unwrap();
    }

    #[test]
    fn a_note_left_behind_or_by_another_process_says_no_run_is_going() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id();
        let lock = RunLock::try_acquire(dir.path()).unwrap().unwrap();
        lock.note(&Holder {
            pid: me,
            command: "run".into(),
            since: "2026-04-09T06:15:00Z".parse().unwrap(),
        });
        drop(lock);
        assert_eq!(
            std::fs::metadata(RunLock::path(dir.path())).unwrap().len(),
            0,
            "the holder's note goes when it lets go"
        );
        // A note a killed holder left (it could not empty it), naming a
        // live process (its pid since reused): the lock is free, so no run
        // is going — that holder did not end.
        let old = Holder {
            pid: me,
            command: "run".into(),
            since: "2026-04-01T06:15:00Z".parse().unwrap(),
        };
        std::fs::write(
            RunLock::path(dir.path()),
            serde_json::to_string(&old).unwrap(),
        )
        .unwrap();
        assert_eq!(
            RunLock::state(dir.path()),
            LockState::Abandoned(old.clone())
        );
        // Held now, by a process whose note is not written yet: the old
        // note is not taken for it.
        let held = std::fs::File::options()
            .write(true)
            .open(RunLock::path(dir.path()))
            .unwrap();
        held.lock().unwrap();
        let other = Holder { pid: 1, ..old };
        std::fs::write(
            RunLock::path(dir.path()),
            serde_json::to_string(&other).unwrap(),
        )
        .unwrap();
        assert_eq!(
            RunLock::state(dir.path()),
            LockState::Held {
                pid: me,
                holder: None
            }
        );
    }
}
