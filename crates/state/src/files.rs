//! The state files beside the inbox (docs/operating.md, "The folder beside the
//! inbox"): the attempt counts, the recurring slots, the run lock, and the
//! short locks a read-modify-write of one of them is done under. The folder
//! holding the inbox is the operator's (it may be reached through their link);
//! it may also be shared with other local users, so nothing in it is followed:
//! a state file is read capped, never through a link and without waiting (a
//! FIFO, a device, a link or an oversized file is unreadable, which its reader
//! counts as absent, with a warning), and written whole through an exclusive,
//! unpredictable temporary name, then renamed into place.

use std::fs::TryLockError;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use harness_base::file::{FileError, Foreign};
use harness_base::folder::Folder;
use harness_config::Paths;

/// Held while a run writes what `status` reads (how the last run ended,
/// how its deliveries went): each is read, changed and written whole
/// under it, so two runs ending at once lose neither's.
pub const STATUS_LOCK: &str = ".agent-harness-status.lock";

/// How long a run waits for [`STATUS_LOCK`]: another holds it for a read
/// and a write.
pub const STATUS_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A state file as it was found.
#[derive(Debug)]
pub enum Stored {
    /// Nothing has its name: a new setup.
    Absent,
    Bytes(Vec<u8>),
    /// A link, a FIFO, a device, a file over the cap, a folder: why, for
    /// the warning. Its reader goes on as if it were absent, on the safe
    /// side.
    Unreadable(String),
    /// Read by [`read_own`]: another user than this one or the folder's
    /// owner put it there (why, for the warning). Not read.
    Foreign(String),
}

/// The folder holding the inbox, opened: a link at its own name is the
/// operator's and is followed.
pub fn open(dir: &Path) -> io::Result<Folder> {
    Folder::open_root(dir)
}

/// A configured task folder (`[paths] inbox`, `done`, `failed`): inside the
/// folder holding the inbox nothing is followed, so one that sits there is
/// opened from it without following a link (another user who may write
/// there cannot turn `done/` into a link to their choice of folder);
/// anywhere else it is the operator's own path, a link at its name
/// followed like `[paths] logs`.
pub fn task_folder(paths: &Paths, dir: &Path) -> io::Result<Folder> {
    let state_dir = paths.state_dir();
    match (dir.parent(), dir.file_name()) {
        (Some(parent), Some(name)) if parent == state_dir => open(&state_dir)?.sub(name),
        _ => Folder::open_root(dir),
    }
}

/// Reads the state file `name` in `dir`, at most `cap` bytes.
pub fn read(dir: &Path, name: &str, cap: u64) -> Stored {
    read_with(dir, |folder| folder.read(name, cap))
}

/// [`read`] of a state file whose contents only this user or the
/// folder's owner may set: another user's file there is unreadable.
pub fn read_own(dir: &Path, name: &str, cap: u64) -> Stored {
    read_with(dir, |folder| folder.read_own(name, cap))
}

fn read_with(dir: &Path, read: impl FnOnce(&Folder) -> Result<Vec<u8>, FileError>) -> Stored {
    let folder = match open(dir) {
        Ok(folder) => folder,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Stored::Absent,
        Err(e) => return Stored::Unreadable(e.to_string()),
    };
    match read(&folder) {
        Err(FileError::Io(e)) if e.kind() == io::ErrorKind::NotFound => Stored::Absent,
        Err(FileError::Io(e)) if Foreign::of(&e).is_some() => Stored::Foreign(e.to_string()),
        Ok(bytes) => Stored::Bytes(bytes),
        Err(FileError::NotRegular(what)) => {
            Stored::Unreadable(format!("it is {what}, not a regular file; it was not read"))
        }
        Err(e) => Stored::Unreadable(e.to_string()),
    }
}

/// Writes the state file `name` in `dir` whole (`0600`).
pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    open(dir)?.replace(name, bytes, 0o600)
}

/// Removes the state file `name` in `dir` (a link there as a link).
pub fn remove(dir: &Path, name: &str) -> io::Result<()> {
    match open(dir) {
        Ok(folder) => folder.remove_file(name.as_ref()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Takes the short lock `lock` beside the inbox in `dir` (created when
/// missing, never through a link, never another user's), waiting at most
/// `limit` for another process to let go: `Ok(None)` when it did not.
/// Held while the file lives.
pub fn short_lock(dir: &Path, lock: &str, limit: Duration) -> io::Result<Option<std::fs::File>> {
    let file = open(dir)?
        .open_lock(lock)
        .map_err(|e| io::Error::new(e.kind(), format!("its lock {lock}: {e}")))?;
    let waited = Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(Some(file)),
            Err(TryLockError::WouldBlock) if waited.elapsed() < limit => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(TryLockError::WouldBlock) => return Ok(None),
            Err(TryLockError::Error(e)) => return Err(e),
        }
    }
}

/// The status lock, taken for a write of `name` in `dir` (`LastRun`,
/// `Deliveries`): `Err` when it cannot be taken, or stays taken.
pub(crate) fn status_locked(dir: &Path, name: &str) -> anyhow::Result<std::fs::File> {
    let path = dir.join(name);
    match short_lock(dir, STATUS_LOCK, STATUS_LOCK_WAIT) {
        Ok(Some(lock)) => Ok(lock),
        Ok(None) => anyhow::bail!("writing {}: {STATUS_LOCK} stayed locked", path.display()),
        Err(e) => anyhow::bail!("writing {}: {e}", path.display()),
    }
}
