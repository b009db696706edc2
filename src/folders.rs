//! The folders a run uses (SPEC §16 "Paths"). The inbox must exist: a
//! missing one is a typo or an unfinished install, and treating it as an
//! empty inbox would let a timer do nothing forever with exit 0. The other
//! folders are created when missing. Every problem names its config key, so
//! the operator knows which line of the config to fix.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::config::Config;

/// `path` as the operator should read it: absolute.
fn shown(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// `[paths] inbox` exists and is a folder; `Err` says what to fix.
pub fn check_inbox(inbox: &Path) -> Result<(), String> {
    let inbox = &shown(inbox);
    match std::fs::metadata(inbox) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(format!(
            "[paths] inbox: {} is not a folder",
            inbox.display()
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(format!(
            "[paths] inbox: the folder {} does not exist; fix the path, or create it (mkdir -p {})",
            inbox.display(),
            inbox.display()
        )),
        Err(e) => Err(format!(
            "[paths] inbox: cannot read {}: {e}",
            inbox.display()
        )),
    }
}

/// Before a run: the inbox exists, and `done/`, `failed/` and the logs
/// folder exist or are created. `Err` names the key of the first that fails.
pub fn prepare(cfg: &Config) -> Result<(), String> {
    check_inbox(&cfg.paths.inbox)?;
    for (key, dir) in [
        ("[paths] done", &cfg.paths.done),
        ("[paths] failed", &cfg.paths.failed),
        ("[paths] logs", &cfg.paths.logs),
    ] {
        std::fs::create_dir_all(dir).map_err(|e| {
            format!(
                "{key}: cannot create the folder {}: {e}",
                shown(dir).display()
            )
        })?;
    }
    Ok(())
}

/// For `check`, run as the service user: every folder a run writes to that
/// this user could not write (or, when missing, could not create). Nothing
/// is created or written.
pub fn unwritable(cfg: &Config) -> Vec<String> {
    let state = cfg.paths.state_dir();
    let metrics = cfg
        .metrics_textfile
        .as_ref()
        .and_then(|f| f.parent().map(Path::to_path_buf));
    let mut folders = vec![
        ("[paths] inbox", cfg.paths.inbox.clone(), ""),
        (
            "[paths] inbox",
            state,
            " (the inbox's parent folder holds the run lock and the attempt counts)",
        ),
        ("[paths] done", cfg.paths.done.clone(), ""),
        ("[paths] failed", cfg.paths.failed.clone(), ""),
        ("[paths] logs", cfg.paths.logs.clone(), ""),
    ];
    if let Some(dir) = metrics {
        folders.push(("[metrics] textfile", dir, ""));
    }
    folders
        .into_iter()
        .filter_map(|(key, dir, why)| {
            let dir = shown(&dir);
            let (at, exists) = nearest_existing(&dir)?;
            if writable(at) {
                return None;
            }
            Some(if exists {
                format!("{key}: {} is not writable by this user{why}", dir.display())
            } else {
                format!(
                    "{key}: {} does not exist and cannot be created by this user ({} is not writable){why}",
                    dir.display(),
                    at.display()
                )
            })
        })
        .collect()
}

/// `dir` itself when it exists (`true`), else its nearest existing ancestor.
fn nearest_existing(dir: &Path) -> Option<(&Path, bool)> {
    if dir.is_dir() {
        return Some((dir, true));
    }
    dir.ancestors()
        .skip(1)
        .find(|a| a.is_dir())
        .map(|a| (a, false))
}

/// Whether this process (its effective ids) may create files in `dir`:
/// permission bits, ACLs and read-only mounts, as the kernel judges them.
fn writable(dir: &Path) -> bool {
    let Ok(c) = CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a NUL-terminated path that outlives the call;
    // faccessat only reads it.
    unsafe {
        libc::faccessat(
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::W_OK | libc::X_OK,
            libc::AT_EACCESS,
        ) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_inbox_is_named_with_its_key_and_path() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("inbx");
        let e = check_inbox(&missing).unwrap_err();
        assert!(e.starts_with("[paths] inbox: the folder "), "{e}");
        assert!(e.contains(&missing.display().to_string()), "{e}");
        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap();
        assert!(check_inbox(&file).unwrap_err().ends_with("is not a folder"));
        assert!(check_inbox(dir.path()).is_ok());
    }

    #[test]
    fn a_missing_folder_is_judged_by_its_nearest_existing_ancestor() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("a/b/c");
        assert_eq!(nearest_existing(&deep), Some((dir.path(), false)));
        assert_eq!(nearest_existing(dir.path()), Some((dir.path(), true)));
        assert!(writable(dir.path()));
        assert!(!writable(&dir.path().join("nope")));
    }
}
